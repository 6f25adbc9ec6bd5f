//! The `controller_key` attack: a controller's own certificate (issued by
//! the cluster's CA, so every certificate check lets it through) sends a
//! broker LeaderAndIsr, UpdateMetadata and StopReplica stamped with its own
//! id, the broker's real epoch and a forged controller epoch (the forged
//! range, or the highest epoch there is), over partitions the broker holds
//! with forged leader epochs. A broker takes the controller epoch only from
//! the quorum's own answers, so each must be refused by the epoch fence
//! and change nothing; a broker that learned the forged epoch would refuse
//! the real controller from then on, which the checker looks for after
//! the run (a broker's fence above every controller's term).

use keel_proto::pb;
use keel_proto::pb::broker_control_service_client::BrokerControlServiceClient;

use super::classify::classify_fence;
use super::{Credential, Intruder, FORGED_EPOCH, T};
use crate::client::{self, Expect};

impl Intruder {
    /// One round of the attack on broker `y` (registered at `y_epoch`),
    /// with controller `round % n + 1`'s certificate.
    pub(super) async fn controller_key(&self, round: u32, y: u32, y_epoch: u64) {
        let keys: Vec<(&u64, &client::Transport)> = self.creds.controllers.iter().collect();
        if keys.is_empty() {
            return;
        }
        let (id, t) = keys[round as usize % keys.len()];
        let Some((_, addr)) = self.brokers.iter().find(|(b, _)| *b == y) else {
            return;
        };
        let epoch = if round.is_multiple_of(2) {
            FORGED_EPOCH + u64::from(round)
        } else {
            u64::MAX
        };
        let stamp = Some(pb::ControllerStamp {
            controller_id: *id as u32,
            controller_epoch: epoch,
            broker_epoch: y_epoch,
        });
        let mut partitions = Vec::new();
        if let Some(d) = client::describe_broker(&self.admin, addr, T).await {
            partitions = d
                .cache
                .into_iter()
                .filter(|p| p.replicas.contains(&y))
                .map(|p| pb::PartitionState {
                    leader: None,
                    leader_epoch: p.leader_epoch.saturating_add(1000),
                    partition_epoch: p.partition_epoch.saturating_add(1000),
                    ..p
                })
                .collect();
        }
        let target = format!("broker {y} as controller {id} in epoch {epoch}");
        let control = || Self::ch(t, addr, Expect::Broker(y)).map(BrokerControlServiceClient::new);

        let req = pb::LeaderAndIsrRequest {
            stamp,
            partitions: partitions.clone(),
            leaders: vec![],
        };
        self.attempt(
            (Credential::ControllerKey, t),
            ("LeaderAndIsr", target.clone()),
            addr,
            || {
                control().map(|mut c| async move {
                    c.leader_and_isr(req).await.map(tonic::Response::into_inner)
                })
            },
            classify_fence,
        )
        .await;

        let req = pb::UpdateMetadataRequest {
            stamp,
            metadata_offset: u64::MAX,
            full: true,
            ..Default::default()
        };
        self.attempt(
            (Credential::ControllerKey, t),
            ("UpdateMetadata", target.clone()),
            addr,
            || {
                control().map(|mut c| async move {
                    c.update_metadata(req)
                        .await
                        .map(tonic::Response::into_inner)
                })
            },
            classify_fence,
        )
        .await;

        let req = pb::StopReplicaRequest {
            stamp,
            partitions: partitions
                .iter()
                .map(|p| pb::StopReplicaItem {
                    topic_id: p.topic_id.clone(),
                    partition: p.partition,
                    delete: true,
                    leader_epoch: p.leader_epoch,
                })
                .collect(),
        };
        self.attempt(
            (Credential::ControllerKey, t),
            ("StopReplica", target),
            addr,
            || {
                control().map(|mut c| async move {
                    c.stop_replica(req).await.map(tonic::Response::into_inner)
                })
            },
            classify_fence,
        )
        .await;
    }
}
