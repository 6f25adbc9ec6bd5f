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
            rejected("LeaderAndIsr", &e);
            return Ok(Response::new(pb::LeaderAndIsrResponse {
                error: Some(wire::error(&e)),
                partitions: Vec::new(),
            }));
        }
        let ce = ControllerEpoch(req.stamp.as_ref().map_or(0, |s| s.controller_epoch));
        st.remember_leader_addresses(&req.leaders);
        let mut partitions = Vec::with_capacity(req.partitions.len());
        for p in &req.partitions {
            let r = wire::partition_update(p).and_then(|u| st.apply_leader_and_isr(u, ce, now));
            if let Err(e) = &r {
                metrics::rejected(e.code);
                warn!(partition = p.partition, code = %e.code, reason = %e.message, "LeaderAndIsr partition rejected");
            }
            partitions.push(wire::partition_error(&p.topic_id, p.partition, &r));
        }
        st.publish_gauges();
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
                st.update_metadata(&req).inspect_err(|e| {
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
        let mut partitions = Vec::with_capacity(req.partitions.len());
        for item in &req.partitions {
            let r = wire::topic_id(&item.topic_id).and_then(|t| {
                st.stop_replica(
                    TopicPartition::new(t, item.partition),
                    item.delete,
                    LeaderEpoch(item.leader_epoch),
                )
            });
            if let Err(e) = &r {
                metrics::rejected(e.code);
                if e.code != ErrorCode::InvalidRequest {
                    warn!(partition = item.partition, code = %e.code, reason = %e.message, "StopReplica partition rejected");
                }
            }
            partitions.push(wire::partition_error(&item.topic_id, item.partition, &r));
        }
        st.publish_gauges();
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
