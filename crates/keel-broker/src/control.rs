//! BrokerControlService: requests from the active controller, fenced by
//! controller epoch and broker epoch, then by leader epoch per partition.

use std::sync::Arc;

use keel_metadata::{ApiError, ControllerEpoch, ErrorCode, LeaderEpoch, TopicPartition};
use keel_proto::pb;
use keel_proto::pb::broker_control_service_server::BrokerControlService;
use tonic::{Request, Response, Status};
use tracing::warn;

use crate::metrics;
use crate::shared::{now_ms, Shared};
use crate::wire;

/// The handler; cheap to clone into the tonic server.
#[derive(Clone)]
pub(crate) struct ControlService {
    pub shared: Arc<Shared>,
}

fn rejected(request: &'static str, e: &ApiError) {
    metrics::rejected(e.code);
    warn!(request, code = %e.code, reason = %e.message, "stale controller request rejected");
}

/// A LeaderAndIsr refused as a whole (nothing applied; the controller
/// sends it again).
fn refuse(e: &ApiError) -> Response<pb::LeaderAndIsrResponse> {
    rejected("LeaderAndIsr", e);
    Response::new(pb::LeaderAndIsrResponse {
        error: Some(wire::error(e)),
        partitions: Vec::new(),
    })
}

#[tonic::async_trait]
impl BrokerControlService for ControlService {
    async fn leader_and_isr(
        &self,
        request: Request<pb::LeaderAndIsrRequest>,
    ) -> Result<Response<pb::LeaderAndIsrResponse>, Status> {
        let req = request.into_inner();
        let now = now_ms();
        let mut st = self.shared.state();
        if let Err(e) = st.check_stamp(req.stamp.as_ref()) {
            return Ok(refuse(&e));
        }
        let ce = ControllerEpoch(req.stamp.as_ref().map_or(0, |s| s.controller_epoch));
        st.remember_leader_addresses(&req.leaders);
        let mut keys = Vec::with_capacity(req.partitions.len());
        let mut updates = Vec::with_capacity(req.partitions.len());
        for mut p in req.partitions {
            // The id moves into the answer's key: no copy per partition.
            let id = std::mem::take(&mut p.topic_id);
            let partition = p.partition;
            updates.push(wire::partition_update(&id, p));
            keys.push((id, partition));
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
                pb::PartitionError {
                    topic_id,
                    partition,
                    error: wire::result_error(&r),
                }
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
        let req = request.into_inner();
        let mut st = self.shared.state();
        let r = st
            .check_stamp(req.stamp.as_ref())
            .inspect_err(|e| rejected("UpdateMetadata", e))
            .and_then(|()| {
                st.update_metadata(req).inspect_err(|e| {
                    metrics::rejected(e.code);
                    warn!(code = %e.code, reason = %e.message, "UpdateMetadata rejected");
                })
            });
        Ok(Response::new(pb::UpdateMetadataResponse {
            error: wire::result_error(&r),
        }))
    }

    async fn stop_replica(
        &self,
        request: Request<pb::StopReplicaRequest>,
    ) -> Result<Response<pb::StopReplicaResponse>, Status> {
        let req = request.into_inner();
        let mut st = self.shared.state();
        if let Err(e) = st.check_stamp(req.stamp.as_ref()) {
            rejected("StopReplica", &e);
            return Ok(Response::new(pb::StopReplicaResponse {
                error: Some(wire::error(&e)),
                partitions: Vec::new(),
            }));
        }
        let items = req
            .partitions
            .iter()
            .map(|item| {
                wire::topic_id(&item.topic_id).map(|t| {
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
                pb::PartitionError {
                    topic_id: item.topic_id,
                    partition: item.partition,
                    error: wire::result_error(&r),
                }
            })
            .collect();
        Ok(Response::new(pb::StopReplicaResponse {
            error: None,
            partitions,
        }))
    }

    async fn describe_broker(
        &self,
        _request: Request<pb::DescribeBrokerRequest>,
    ) -> Result<Response<pb::DescribeBrokerResponse>, Status> {
        Ok(Response::new(self.shared.state().describe()))
    }
}
