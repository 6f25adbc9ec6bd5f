//! BrokerControlService: requests from the active controller, fenced by
//! controller epoch and broker epoch, then by leader epoch per partition.

use std::sync::Arc;

use keel_metadata::acl::{Operation, Principal, Resource};
use keel_metadata::{ApiError, ControllerEpoch, ErrorCode, LeaderEpoch, TopicPartition};
use keel_proto::convert;
use keel_proto::pb;
use keel_proto::pb::broker_control_service_server::BrokerControlService;
use tonic::{Request, Response, Status};
use tracing::warn;

use crate::metrics;
use crate::shared::{now_ms, Shared};
use crate::state::MetadataUpdate;

/// The handler; cheap to clone into the tonic server.
#[derive(Clone)]
pub(crate) struct ControlService {
    pub shared: Arc<Shared>,
}

fn rejected(request: &'static str, e: &ApiError) {
    metrics::rejected(e.code);
    if e.code == ErrorCode::Internal {
        // Not the controller's fault: this broker could not act on it (its
        // history could not be made durable); the controller sends again.
        warn!(request, code = %e.code, reason = %e.message, "controller request refused: this broker cannot record it");
    } else {
        warn!(request, code = %e.code, reason = %e.message, "stale controller request rejected");
    }
}

/// Over TLS, controller requests are accepted only from a controller's
/// certificate (which controller is active, the epochs decide).
#[allow(clippy::result_large_err)]
fn from_controller<T>(request: &Request<T>, what: &str) -> Result<(), Status> {
    keel_tls::transport::authorize(request, what, "a controller's certificate", |r| {
        matches!(r, keel_tls::Role::Controller(_))
    })
}

/// Over TLS, DescribeBroker (which names every topic and broker this
/// broker knows) is answered only to a controller's certificate, this
/// broker's own, or a principal the cluster's ACLs, as this broker last
/// read them ([`crate::access`]), let describe the cluster: a super user
/// or a holder of `Describe` on the Cluster resource. Another broker's
/// certificate is such a principal only if an ACL says so. A plaintext
/// listener knows no identities and lets everyone in.
#[allow(clippy::result_large_err)]
fn to_describer<T>(shared: &Shared, request: &Request<T>) -> Result<(), Status> {
    let own = shared.id.0;
    keel_tls::transport::authorize(
        request,
        "DescribeBroker",
        "a controller's certificate, this broker's own, or a principal allowed to \
         describe the cluster (a super user, or Describe on the Cluster resource)",
        |role| match role {
            keel_tls::Role::Controller(_) => true,
            keel_tls::Role::Broker(id) if *id == own => true,
            other => shared.access.get().may(
                &principal_of(other),
                Operation::Describe,
                Resource::Cluster,
            ),
        },
    )
}

/// The principal a certificate's role authenticates.
fn principal_of(role: &keel_tls::Role) -> Principal {
    match role {
        keel_tls::Role::Controller(id) => Principal::Controller(*id),
        keel_tls::Role::Broker(id) => Principal::Broker(*id),
        keel_tls::Role::User(name) => Principal::User(name.clone()),
    }
}

/// A LeaderAndIsr refused as a whole (nothing applied; the controller
/// sends it again).
fn refuse(e: &ApiError) -> Response<pb::LeaderAndIsrResponse> {
    rejected("LeaderAndIsr", e);
    Response::new(pb::LeaderAndIsrResponse {
        error: Some(convert::error_to_pb(e)),
        partitions: Vec::new(),
    })
}

#[tonic::async_trait]
impl BrokerControlService for ControlService {
    async fn leader_and_isr(
        &self,
        request: Request<pb::LeaderAndIsrRequest>,
    ) -> Result<Response<pb::LeaderAndIsrResponse>, Status> {
        from_controller(&request, "LeaderAndIsr")?;
        let req = request.into_inner();
        let now = now_ms();
        let stamp = req.stamp.as_ref().map(convert::stamp_from_pb);
        let mut st = self.shared.state();
        if let Err(e) = st.check_stamp(stamp) {
            return Ok(refuse(&e));
        }
        let ce = stamp.map_or(ControllerEpoch(0), |s| s.controller_epoch);
        st.remember_leader_addresses(req.leaders.into_iter().map(convert::broker_info_from_pb));
        let mut keys = Vec::with_capacity(req.partitions.len());
        let mut updates = Vec::with_capacity(req.partitions.len());
        for mut p in req.partitions {
            updates.push(convert::take_leadership_from_pb(&mut p).map_err(ApiError::from));
            // The id moves into the answer's key: no copy per partition.
            keys.push((p.topic_id, p.partition));
        }
        let results = match st.apply_leader_and_isr_all(updates, ce, now) {
            Ok(results) => results,
            Err(e) => {
                // Nothing was applied: the whole request fails, and the
                // controller sends it again.
                return Ok(refuse(&e));
            }
        };
        drop(st);
        let partitions = keys
            .into_iter()
            .zip(results)
            .map(|((topic_id, partition), r)| {
                if let Err(e) = &r {
                    metrics::rejected(e.code);
                    warn!(partition, code = %e.code, reason = %e.message, "LeaderAndIsr partition rejected");
                }
                convert::partition_error_to_pb(topic_id, partition, &r)
            })
            .collect();
        Ok(Response::new(pb::LeaderAndIsrResponse {
            error: None,
            partitions,
        }))
    }

    async fn update_metadata(
        &self,
        request: Request<pb::UpdateMetadataRequest>,
    ) -> Result<Response<pb::UpdateMetadataResponse>, Status> {
        from_controller(&request, "UpdateMetadata")?;
        let req = request.into_inner();
        let stamp = req.stamp.as_ref().map(convert::stamp_from_pb);
        let mut st = self.shared.state();
        let r = st
            .check_stamp(stamp)
            .inspect_err(|e| rejected("UpdateMetadata", e))
            .and_then(|()| {
                let update = metadata_update(req).inspect_err(|e| {
                    metrics::rejected(e.code);
                    warn!(code = %e.code, reason = %e.message, "UpdateMetadata rejected");
                })?;
                st.update_metadata(update);
                Ok(())
            });
        Ok(Response::new(pb::UpdateMetadataResponse {
            error: convert::result_error(&r),
        }))
    }

    async fn stop_replica(
        &self,
        request: Request<pb::StopReplicaRequest>,
    ) -> Result<Response<pb::StopReplicaResponse>, Status> {
        from_controller(&request, "StopReplica")?;
        let req = request.into_inner();
        let stamp = req.stamp.as_ref().map(convert::stamp_from_pb);
        let mut st = self.shared.state();
        if let Err(e) = st.check_stamp(stamp) {
            rejected("StopReplica", &e);
            return Ok(Response::new(pb::StopReplicaResponse {
                error: Some(convert::error_to_pb(&e)),
                partitions: Vec::new(),
            }));
        }
        let items = req
            .partitions
            .iter()
            .map(|item| {
                convert::topic_id_from_pb(&item.topic_id)
                    .map_err(ApiError::from)
                    .map(|t| {
                        (
                            TopicPartition::new(t, item.partition),
                            item.delete,
                            LeaderEpoch(item.leader_epoch),
                        )
                    })
            })
            .collect();
        let results = st.stop_replica_all(items);
        drop(st);
        let partitions = req
            .partitions
            .into_iter()
            .zip(results)
            .map(|(item, r)| {
                if let Err(e) = &r {
                    metrics::rejected(e.code);
                    if e.code != ErrorCode::InvalidRequest {
                        warn!(partition = item.partition, code = %e.code, reason = %e.message, "StopReplica partition rejected");
                    }
                }
                convert::partition_error_to_pb(item.topic_id, item.partition, &r)
            })
            .collect();
        Ok(Response::new(pb::StopReplicaResponse {
            error: None,
            partitions,
        }))
    }

    async fn describe_broker(
        &self,
        request: Request<pb::DescribeBrokerRequest>,
    ) -> Result<Response<pb::DescribeBrokerResponse>, Status> {
        to_describer(&self.shared, &request)?;
        let st = self.shared.state();
        let (session, cache) = (st.session(), st.metadata());
        Ok(Response::new(pb::DescribeBrokerResponse {
            broker_id: session.id().0,
            broker_epoch: session.broker_epoch().map_or(0, |e| e.0),
            controller_epoch_seen: session.controller_epoch_seen().0,
            metadata_offset: cache.offset(),
            fenced: session.fenced(),
            cache: cache.partitions().map(convert::leadership_to_pb).collect(),
            brokers: cache.brokers().map(convert::broker_info_to_pb).collect(),
        }))
    }
}

/// An UpdateMetadata taken apart: all or nothing, one malformed item
/// refuses the whole request.
pub(crate) fn metadata_update(req: pb::UpdateMetadataRequest) -> Result<MetadataUpdate, ApiError> {
    let mut partitions = Vec::with_capacity(req.partitions.len());
    for mut p in req.partitions {
        partitions.push(convert::take_leadership_from_pb(&mut p)?);
    }
    let deleted_topics = req
        .deleted_topic_ids
        .iter()
        .map(|t| convert::topic_id_from_pb(t))
        .collect::<Result<_, _>>()?;
    Ok(MetadataUpdate {
        full: req.full,
        offset: req.metadata_offset,
        brokers: req
            .brokers
            .into_iter()
            .map(convert::broker_info_from_pb)
            .collect(),
        removed_brokers: convert::brokers_from_pb(&req.removed_broker_ids),
        partitions,
        deleted_topics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::HistoryLog;
    use crate::state::BrokerState;
    use keel_metadata::{BrokerEpoch, BrokerId, TopicId};

    fn code(r: Result<(), ApiError>) -> ErrorCode {
        r.err().map_or(ErrorCode::None, |e| e.code)
    }

    /// What the handler does with a request whose stamp passed.
    fn update_metadata(
        st: &mut BrokerState,
        req: pb::UpdateMetadataRequest,
    ) -> Result<(), ApiError> {
        st.update_metadata(metadata_update(req)?);
        Ok(())
    }

    #[test]
    fn metadata_full_replaces_delta_merges_deletes_remove() {
        let mut st = BrokerState::new(BrokerId(1), HistoryLog::in_memory(), || 0);
        st.on_registered(BrokerEpoch(7), 1_000);
        let part = |t: u128, p: u32| pb::PartitionState {
            topic_id: TopicId(t).to_bytes().to_vec(),
            partition: p,
            ..Default::default()
        };
        let req = |full, offset, parts: Vec<pb::PartitionState>, deleted: Vec<u128>| {
            pb::UpdateMetadataRequest {
                stamp: None,
                metadata_offset: offset,
                full,
                brokers: vec![pb::BrokerInfo {
                    broker_id: 2,
                    address: "127.0.0.2:1".into(),
                    ..Default::default()
                }],
                partitions: parts,
                deleted_topic_ids: deleted
                    .into_iter()
                    .map(|t| TopicId(t).to_bytes().to_vec())
                    .collect(),
                removed_broker_ids: vec![],
            }
        };
        update_metadata(&mut st, req(true, 10, vec![part(1, 0), part(2, 0)], vec![])).unwrap();
        update_metadata(&mut st, req(false, 11, vec![part(3, 0)], vec![1])).unwrap();
        assert_eq!(st.metadata().partitions().len(), 2);
        assert_eq!(st.metadata().offset(), 11);
        update_metadata(&mut st, req(true, 12, vec![part(4, 0)], vec![])).unwrap();
        assert_eq!(st.metadata().partitions().len(), 1);
        assert_eq!(
            st.metadata().address_of(BrokerId(2)).as_deref(),
            Some("127.0.0.2:1")
        );
        let mut bad = req(false, 13, vec![part(5, 0)], vec![]);
        bad.partitions[0].topic_id = vec![1, 2, 3];
        assert_eq!(
            code(update_metadata(&mut st, bad)),
            ErrorCode::InvalidRequest
        );
        assert_eq!(st.metadata().offset(), 12);
        // A delta naming a removed broker drops it from the cache.
        let mut gone = req(false, 14, vec![], vec![]);
        gone.brokers.clear();
        gone.removed_broker_ids = vec![2];
        update_metadata(&mut st, gone).unwrap();
        assert_eq!(st.metadata().brokers().len(), 0);
        assert_eq!(st.metadata().address_of(BrokerId(2)), None);
        // A split view: parts without an offset leave the offset alone.
        update_metadata(&mut st, req(false, 0, vec![part(6, 0)], vec![])).unwrap();
        assert_eq!(st.metadata().offset(), 14);
    }
}
