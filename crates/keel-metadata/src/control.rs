//! What the active controller's requests tell a broker, as domain values:
//! the stamp that fences every request, the state of each partition a
//! `LeaderAndIsr` / `UpdateMetadata` / AlterPartition answer carries, and
//! the brokers an `UpdateMetadata` lists. `keel-proto` converts them from
//! and to the wire; the broker holds and caches these, never protobuf
//! messages.

use crate::ids::{
    BrokerEpoch, BrokerId, ControllerEpoch, LeaderEpoch, PartitionEpoch, TopicPartition,
};

/// The header of every controller-to-broker request (Kafka's
/// `controllerId` / `controllerEpoch` / `brokerEpoch`): a broker refuses it
/// when either epoch is stale.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ControllerStamp {
    /// The sending controller's node id (for logs; epochs decide).
    pub controller_id: u32,
    /// The sender's Raft term; lower than one already seen means deposed.
    pub controller_epoch: ControllerEpoch,
    /// The target broker's registration as the controller knows it.
    pub broker_epoch: BrokerEpoch,
}

/// One partition's state as the controller sent it: what a broker holds
/// for a partition it hosts and caches for every partition. The
/// controller's own `PartitionImage` has more (the state machine's state);
/// this is the part that leaves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionLeadership {
    pub tp: TopicPartition,
    /// The topic's name (ids are what everything keys on; names are shown).
    pub topic: String,
    /// `None` when the partition has no leader (offline).
    pub leader: Option<BrokerId>,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: PartitionEpoch,
    /// Assigned replicas, preferred leader first.
    pub replicas: Vec<BrokerId>,
    /// In-sync replicas, a subset of `replicas`.
    pub isr: Vec<BrokerId>,
    /// Replicas a reassignment is adding (subset of `replicas`).
    pub adding: Vec<BrokerId>,
    /// Replicas a reassignment is removing (subset of `replicas`).
    pub removing: Vec<BrokerId>,
}

/// A registered broker as an `UpdateMetadata` lists it (the part of its
/// registration other brokers need: where it listens and whether it may
/// lead or join an ISR).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerInfo {
    pub id: BrokerId,
    pub epoch: BrokerEpoch,
    /// Where its broker services listen ("host:port"; empty when unknown).
    pub address: String,
    pub rack: Option<String>,
    /// A fenced broker may not lead or join an ISR.
    pub fenced: bool,
    /// In controlled shutdown: may not become leader or join an ISR.
    pub shutting_down: bool,
    /// `host:port` of its Kafka listener; `None` when it has none.
    pub kafka_address: Option<String>,
}
