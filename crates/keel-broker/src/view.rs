//! Read-only snapshots of the broker's state, for tests and operators.

use keel_metadata::{BrokerEpoch, BrokerId, ControllerEpoch, PartitionLeadership, TopicPartition};

/// The broker as it sees itself at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerStateView {
    pub broker_id: BrokerId,
    /// `None` before registering and while the session is assumed lost.
    pub broker_epoch: Option<BrokerEpoch>,
    /// As the last heartbeat answer said (true until the first says otherwise).
    pub fenced: bool,
    pub caught_up: bool,
    /// The controller allowed a controlled shutdown to complete.
    pub should_shut_down: bool,
    /// The highest controller epoch the quorum confirmed to this broker;
    /// requests below it, and above it, are refused.
    pub controller_epoch_seen: ControllerEpoch,
    /// Metadata offset of the last UpdateMetadata applied.
    pub metadata_offset: u64,
    /// Log dirs the last probe found unusable.
    pub offline_log_dirs: Vec<String>,
    /// Every partition this broker holds, led or followed.
    pub leaderships: Vec<LeadershipView>,
}

impl BrokerStateView {
    /// Partitions this broker is currently acting as leader for.
    pub fn leading(&self) -> impl Iterator<Item = &LeadershipView> {
        self.leaderships.iter().filter(|l| l.leading)
    }

    pub fn partition(&self, tp: TopicPartition) -> Option<&LeadershipView> {
        self.leaderships.iter().find(|l| l.state.tp == tp)
    }
}

/// One held partition: its state as the controller sent it, and what this
/// broker makes of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeadershipView {
    /// Partition, topic name, leader, epochs, replicas and ISR.
    pub state: PartitionLeadership,
    /// Epoch of the controller whose request set this state.
    pub controller_epoch: ControllerEpoch,
    /// Acting as leader now (named leader, session alive, not stopped).
    pub leading: bool,
    /// Stopped by StopReplica without delete.
    pub stopped: bool,
}
