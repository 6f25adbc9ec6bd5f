//! What a Kafka listener answers from: one snapshot of a broker's metadata
//! cache (what the controller's UpdateMetadata requests told it), taken
//! whole so one answer never mixes two states.

use std::collections::BTreeMap;
use std::net::SocketAddr;

/// The cluster as one broker's cache describes it at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterView {
    /// The cluster id the broker was started with (and registered under).
    pub cluster_id: String,
    /// The broker answering: named as the "controller" of Kafka's answers
    /// (see [`ClusterView::controller_id`]).
    pub broker_id: u32,
    /// Every broker the cache knows, fenced ones included, by id.
    pub brokers: BTreeMap<u32, BrokerView>,
    /// Every topic the cache knows, by name.
    pub topics: BTreeMap<String, TopicView>,
    /// Set on a controller's listener: then it serves ApiVersions,
    /// DescribeCluster (the controllers) and DescribeQuorum from this, and
    /// nothing of the brokers' cache.
    pub quorum: Option<QuorumView>,
}

/// A controller's view of the metadata quorum (Kafka's
/// `__cluster_metadata` partition), taken when the request arrived.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuorumView {
    /// The controller answering.
    pub node_id: u64,
    /// The active controller, if one is known.
    pub leader_id: Option<u64>,
    /// Whether this controller is the leader (only it knows the others'
    /// progress; the others answer NOT_LEADER_OR_FOLLOWER, as Kafka's).
    pub is_leader: bool,
    /// The Raft term: Kafka's leader epoch of the metadata partition.
    pub term: u64,
    /// The committed log index: Kafka's high watermark.
    pub commit_index: u64,
    /// The voters, by id.
    pub voters: Vec<QuorumMember>,
    /// Members that replicate without a vote (learners).
    pub observers: Vec<QuorumMember>,
    /// Each controller's Kafka listener, by id.
    pub listeners: BTreeMap<u64, SocketAddr>,
}

/// One member's replication, as the leader last saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuorumMember {
    pub id: u64,
    /// Its data dir's directory id (nil: not bound yet).
    pub directory_id: u128,
    /// The last log index it holds, as far as the leader knows.
    pub log_end_offset: Option<u64>,
    /// Unix milliseconds of the last answer the leader got from it.
    pub last_contact_unix_ms: Option<i64>,
    /// Unix milliseconds when it last held everything committed.
    pub last_caught_up_unix_ms: Option<i64>,
}

/// One registered broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerView {
    /// Its Kafka listener, as it registered it; `None` when it has none
    /// (Kafka clients cannot reach it, so it is not listed).
    pub kafka_address: Option<SocketAddr>,
    pub rack: Option<String>,
    /// A fenced broker is not alive: not listed, its replicas offline.
    pub fenced: bool,
}

/// One topic: its id and its partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicView {
    /// The 16-byte topic id (Kafka's UUID, same bytes).
    pub id: u128,
    /// In partition order.
    pub partitions: Vec<PartitionView>,
}

/// One partition as the controller last described it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionView {
    pub index: u32,
    /// `None` when the partition has no leader (offline).
    pub leader: Option<u32>,
    pub leader_epoch: u32,
    /// Assigned replicas, preferred leader first.
    pub replicas: Vec<u32>,
    /// In-sync replicas, a subset of `replicas`.
    pub isr: Vec<u32>,
}

impl ClusterView {
    /// Broker `id` is alive for Kafka clients: registered, unfenced, with a
    /// Kafka listener (KRaft's `getAliveEndpoint`).
    pub fn alive(&self, id: u32) -> Option<SocketAddr> {
        self.brokers
            .get(&id)
            .filter(|b| !b.fenced)
            .and_then(|b| b.kafka_address)
    }

    /// The id Kafka's Metadata and DescribeCluster answers give as the
    /// controller. As in KRaft, a live broker, never a controller: clients
    /// send controller-bound requests to that node and brokers forward them.
    /// This broker when it is alive, else the lowest alive one; -1 (none)
    /// when no broker is.
    pub fn controller_id(&self) -> i32 {
        if self.alive(self.broker_id).is_some() {
            return kafka_id(self.broker_id);
        }
        self.brokers
            .keys()
            .copied()
            .find(|id| self.alive(*id).is_some())
            .map_or(-1, kafka_id)
    }

    /// The topic with id `id` and its name.
    pub fn topic_by_id(&self, id: u128) -> Option<(&str, &TopicView)> {
        self.topics
            .iter()
            .find(|(_, t)| t.id == id)
            .map(|(n, t)| (n.as_str(), t))
    }
}

/// A Keel id as Kafka's int32 broker id. Keel ids are u32; one above
/// `i32::MAX` cannot be named in Kafka's protocol and reads as -1 (none).
pub fn kafka_id(id: u32) -> i32 {
    i32::try_from(id).unwrap_or(-1)
}
