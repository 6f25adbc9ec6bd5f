//! BrokerControlService: requests from the active controller, fenced by
//! controller epoch and broker epoch, then by leader epoch per partition.

use std::sync::Arc;

use keel_metadata::acl::{Operation, Principal, Resource};
use keel_metadata::{ApiError, ControllerEpoch, ErrorCode, LeaderEpoch, TopicPartition};
use keel_proto::convert;
use keel_proto::pb;
use keel_proto::pb::broker_control_service_server::BrokerControlService;
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use crate::metrics;
use crate::shared::{now_ms, Shared};
use crate::state::{BrokerState, MetadataUpdate, Sender};

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
    } else if e.code == ErrorCode::UnconfirmedControllerEpoch {
        // A new controller, usually, that this broker's heartbeat has not
        // reached yet: the heartbeat was woken; the controller sends again.
        info!(request, code = %e.code, reason = %e.message, "controller request refused until the quorum confirms its epoch");
    } else {
        warn!(request, code = %e.code, reason = %e.message, "stale controller request rejected");
    }
}

/// Over TLS, controller requests are accepted only from a controller's
/// certificate; returns which controller sent it, for the stamp check
/// (which controller is active, the quorum's answers decide).
#[allow(clippy::result_large_err)]
fn from_controller<T>(request: &Request<T>, what: &str) -> Result<Sender, Status> {
    keel_tls::transport::authorize(request, what, "a controller's certificate", |r| {
        matches!(r, keel_tls::Role::Controller(_))
    })?;
    Ok(match keel_tls::transport::peer(request).map(|p| &p.role) {
        Some(keel_tls::Role::Controller(id)) => Sender::Controller(*id),
        _ => Sender::Unauthenticated,
    })
}

impl ControlService {
    /// Runs `take` on the state for one controller request `what`, with
    /// its body and which controller sent it (`Status` when the sender's
    /// certificate is not a controller's); a controller epoch the quorum
    /// has not confirmed yet wakes the heartbeat at once: its answer
    /// confirms the epoch if the quorum is in it, and the controller's
    /// next try is accepted.
    #[allow(clippy::result_large_err)]
    fn take<T, R>(
        &self,
        what: &'static str,
        request: Request<T>,
        take: impl FnOnce(&mut BrokerState, T, Sender) -> Result<R, ApiError>,
    ) -> Result<Result<R, ApiError>, Status> {
        let sender = from_controller(&request, what)?;
        let req = request.into_inner();
        let r = take(&mut self.shared.state(), req, sender);
        if let Err(e) = &r {
            if e.code == ErrorCode::UnconfirmedControllerEpoch {
                self.shared.poke.notify_one();
            }
            rejected(what, e);
        }
        Ok(r)
    }
}

/// Per-partition refusals of an accepted request, logged and counted (a
/// StopReplica of a partition this broker does not hold is no news).
fn partition_results(
    request: &'static str,
    keys: impl IntoIterator<Item = (Vec<u8>, u32)>,
    results: Vec<Result<(), ApiError>>,
) -> Vec<pb::PartitionError> {
    keys.into_iter()
        .zip(results)
        .map(|((topic_id, partition), r)| {
            if let Err(e) = &r {
                metrics::rejected(e.code);
                if request != "StopReplica" || e.code != ErrorCode::InvalidRequest {
                    warn!(request, partition, code = %e.code, reason = %e.message, "partition rejected");
                }
            }
            convert::partition_error_to_pb(topic_id, partition, &r)
        })
        .collect()
}

/// A LeaderAndIsr as the broker takes it, under the state lock: the stamp
/// first, then every partition in order. `Err`: refused as a whole, and
/// nothing changed (the controller sends it again).
pub(crate) fn take_leader_and_isr(
    st: &mut BrokerState,
    req: pb::LeaderAndIsrRequest,
    sender: Sender,
    now_ms: u64,
) -> Result<Vec<pb::PartitionError>, ApiError> {
    let stamp = req.stamp.as_ref().map(convert::stamp_from_pb);
    st.check_stamp(stamp, sender)?;
    let ce = stamp.map_or(ControllerEpoch(0), |s| s.controller_epoch);
    let mut keys = Vec::with_capacity(req.partitions.len());
    let mut updates = Vec::with_capacity(req.partitions.len());
    for mut p in req.partitions {
        updates.push(convert::take_leadership_from_pb(&mut p).map_err(ApiError::from));
        // The id moves into the answer's key: no copy per partition.
        keys.push((p.topic_id, p.partition));
    }
    let results = st.apply_leader_and_isr_all(updates, ce, now_ms)?;
    st.remember_leader_addresses(req.leaders.into_iter().map(convert::broker_info_from_pb));
    Ok(partition_results("LeaderAndIsr", keys, results))
}

/// An UpdateMetadata as the broker takes it: all or nothing.
pub(crate) fn take_update_metadata(
    st: &mut BrokerState,
    req: pb::UpdateMetadataRequest,
    sender: Sender,
) -> Result<(), ApiError> {
    st.check_stamp(req.stamp.as_ref().map(convert::stamp_from_pb), sender)?;
    st.update_metadata(metadata_update(req)?);
    Ok(())
}

/// A StopReplica as the broker takes it: the stamp, then each item.
pub(crate) fn take_stop_replica(
    st: &mut BrokerState,
    req: pb::StopReplicaRequest,
    sender: Sender,
) -> Result<Vec<pb::PartitionError>, ApiError> {
    st.check_stamp(req.stamp.as_ref().map(convert::stamp_from_pb), sender)?;
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
    let keys = req
        .partitions
        .into_iter()
        .map(|p| (p.topic_id, p.partition));
    Ok(partition_results("StopReplica", keys, results))
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

/// A request-level error and per-partition answers, from a request's
/// outcome (refused as a whole: the error, no partitions).
fn answer(
    r: Result<Vec<pb::PartitionError>, ApiError>,
) -> (Option<pb::Error>, Vec<pb::PartitionError>) {
    match r {
        Ok(partitions) => (None, partitions),
        Err(e) => (Some(convert::error_to_pb(&e)), Vec::new()),
    }
}

#[tonic::async_trait]
impl BrokerControlService for ControlService {
    async fn leader_and_isr(
        &self,
        request: Request<pb::LeaderAndIsrRequest>,
    ) -> Result<Response<pb::LeaderAndIsrResponse>, Status> {
        let now = now_ms();
        let r = self.take("LeaderAndIsr", request, |st, req, sender| {
            take_leader_and_isr(st, req, sender, now)
        })?;
        let (error, partitions) = answer(r);
        Ok(Response::new(pb::LeaderAndIsrResponse {
            error,
            partitions,
        }))
    }

    async fn update_metadata(
        &self,
        request: Request<pb::UpdateMetadataRequest>,
    ) -> Result<Response<pb::UpdateMetadataResponse>, Status> {
        let r = self.take("UpdateMetadata", request, take_update_metadata)?;
        Ok(Response::new(pb::UpdateMetadataResponse {
            error: convert::result_error(&r),
        }))
    }

    async fn stop_replica(
        &self,
        request: Request<pb::StopReplicaRequest>,
    ) -> Result<Response<pb::StopReplicaResponse>, Status> {
        let r = self.take("StopReplica", request, take_stop_replica)?;
        let (error, partitions) = answer(r);
        Ok(Response::new(pb::StopReplicaResponse { error, partitions }))
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
        st.on_registered(BrokerEpoch(7), None, 1_000);
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

    mod fences {
        //! Random request sequences from controller keys against one
        //! broker: whatever a key that is not the active controller's
        //! sends, the broker's recorded epochs and partitions move only on
        //! requests it accepted, and the real controller is never locked
        //! out.

        use super::super::*;
        use crate::history::HistoryLog;
        use crate::state::BrokerState;
        use keel_metadata::decide::HeartbeatReply;
        use keel_metadata::{BrokerEpoch, BrokerId, TopicId};
        use proptest::prelude::*;

        const BROKER_EPOCH: u64 = 7;

        #[derive(Clone, Debug)]
        enum Op {
            /// The quorum answers a heartbeat, in a new term under
            /// controller `leader` when `new_term`.
            Heartbeat { new_term: bool, leader: u32 },
            /// The real controller sends a LeaderAndIsr and an
            /// UpdateMetadata in the confirmed epoch.
            Real,
            /// A newly elected controller sends before any answer of the
            /// quorum confirmed its epoch.
            Early { leader: u32 },
            /// A key that is not the active controller's sends something
            /// forged.
            Forged {
                cert: usize,
                stamp_id: u32,
                epoch: u8,
                random_epoch: u64,
                broker_epoch: u64,
                leader_epoch: u32,
                kind: u8,
            },
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                (any::<bool>(), 1u32..=3)
                    .prop_map(|(new_term, leader)| Op::Heartbeat { new_term, leader }),
                Just(Op::Real),
                (1u32..=3).prop_map(|leader| Op::Early { leader }),
                (
                    0usize..4,
                    0u32..=6,
                    0u8..5,
                    any::<u64>(),
                    prop_oneof![Just(BROKER_EPOCH), any::<u64>()],
                    any::<u32>(),
                    0u8..3,
                )
                    .prop_map(
                        |(
                            cert,
                            stamp_id,
                            epoch,
                            random_epoch,
                            broker_epoch,
                            leader_epoch,
                            kind,
                        )| {
                            Op::Forged {
                                cert,
                                stamp_id,
                                epoch,
                                random_epoch,
                                broker_epoch,
                                leader_epoch,
                                kind,
                            }
                        }
                    ),
            ]
        }

        fn stamp(id: u32, epoch: u64, broker_epoch: u64) -> Option<pb::ControllerStamp> {
            Some(pb::ControllerStamp {
                controller_id: id,
                controller_epoch: epoch,
                broker_epoch,
            })
        }

        fn partition(leader_epoch: u32) -> pb::PartitionState {
            pb::PartitionState {
                topic: "t".into(),
                topic_id: TopicId(0xabc).to_bytes().to_vec(),
                partition: 0,
                leader: Some(1),
                leader_epoch,
                partition_epoch: leader_epoch,
                replicas: vec![1, 2, 3],
                isr: vec![1, 2, 3],
                ..Default::default()
            }
        }

        fn leader_and_isr(
            s: Option<pb::ControllerStamp>,
            leader_epoch: u32,
        ) -> pb::LeaderAndIsrRequest {
            pb::LeaderAndIsrRequest {
                stamp: s,
                partitions: vec![partition(leader_epoch)],
                leaders: vec![],
            }
        }

        fn update_metadata(
            s: Option<pb::ControllerStamp>,
            offset: u64,
        ) -> pb::UpdateMetadataRequest {
            pb::UpdateMetadataRequest {
                stamp: s,
                metadata_offset: offset,
                full: true,
                brokers: vec![],
                partitions: vec![partition(1)],
                deleted_topic_ids: vec![],
                removed_broker_ids: vec![],
            }
        }

        /// What a refused request must leave as it was.
        fn snapshot(st: &BrokerState) -> (crate::view::BrokerStateView, usize) {
            (st.view(), st.metadata().partitions().len())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]
            #[test]
            fn only_accepted_requests_move_the_broker_and_the_real_controller_is_never_locked_out(
                ops in proptest::collection::vec(op(), 1..60)
            ) {
                let mut st = BrokerState::new(BrokerId(1), HistoryLog::in_memory(), || 0);
                let (mut term, mut leader) = (3u64, 1u32);
                st.on_registered(BrokerEpoch(BROKER_EPOCH), Some((leader, ControllerEpoch(term))), 0);
                let (mut leader_epoch, mut offset, mut now) = (0u32, 0u64, 1u64);
                for op in ops {
                    now += 10;
                    match op {
                        Op::Heartbeat { new_term, leader: next } => {
                            if new_term {
                                term += 1;
                                leader = next;
                            }
                            let reply = HeartbeatReply::default();
                            prop_assert!(st.on_heartbeat(
                                BrokerEpoch(BROKER_EPOCH), &reply, leader, ControllerEpoch(term), now
                            ));
                        }
                        Op::Real => {
                            leader_epoch += 1;
                            offset += 1;
                            let me = Sender::Controller(leader.into());
                            let s = stamp(leader, term, BROKER_EPOCH);
                            let r = take_leader_and_isr(&mut st, leader_and_isr(s, leader_epoch), me, now);
                            prop_assert!(r.is_ok(), "the real controller was refused: {r:?}");
                            prop_assert!(r.unwrap().iter().all(|p| p.error.is_none()));
                            let r = take_update_metadata(&mut st, update_metadata(s, offset), me);
                            prop_assert!(r.is_ok(), "the real controller was refused: {r:?}");
                            prop_assert_eq!(st.view().controller_epoch_seen, ControllerEpoch(term));
                        }
                        Op::Early { leader: next } => {
                            let before = snapshot(&st);
                            let s = stamp(next, term + 1, BROKER_EPOCH);
                            let r = take_leader_and_isr(
                                &mut st, leader_and_isr(s, leader_epoch + 1), Sender::Controller(next.into()), now,
                            );
                            prop_assert_eq!(
                                r.err().map(|e| e.code), Some(ErrorCode::UnconfirmedControllerEpoch)
                            );
                            prop_assert_eq!(snapshot(&st), before);
                        }
                        Op::Forged { cert, stamp_id, epoch, random_epoch, broker_epoch, leader_epoch: le, kind } => {
                            // Any controller key but the active one's,
                            // members (1-3) or not (4-5).
                            let keys: Vec<u64> =
                                (1..=5).filter(|k| *k != u64::from(leader)).collect();
                            let cert = keys[cert % keys.len()];
                            let ce = match epoch {
                                0 => term.saturating_sub(1),
                                1 => term,
                                2 => term + 1,
                                3 => u64::MAX,
                                _ => random_epoch,
                            };
                            let s = stamp(stamp_id, ce, broker_epoch);
                            let sender = Sender::Controller(cert);
                            let before = snapshot(&st);
                            let refused = match kind {
                                0 => take_leader_and_isr(&mut st, leader_and_isr(s, le), sender, now).is_err(),
                                1 => take_update_metadata(&mut st, update_metadata(s, u64::from(le)), sender).is_err(),
                                _ => {
                                    let req = pb::StopReplicaRequest {
                                        stamp: s,
                                        partitions: vec![pb::StopReplicaItem {
                                            topic_id: TopicId(0xabc).to_bytes().to_vec(),
                                            partition: 0,
                                            delete: true,
                                            leader_epoch: le,
                                        }],
                                    };
                                    take_stop_replica(&mut st, req, sender).is_err()
                                }
                            };
                            prop_assert!(refused, "a forged request from controller key {cert} was accepted");
                            prop_assert_eq!(snapshot(&st), before);
                        }
                    }
                }
            }
        }
    }
}
