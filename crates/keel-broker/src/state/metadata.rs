//! The broker's metadata cache: every partition and every registered broker
//! as the controller's UpdateMetadata requests describe them, the metadata
//! offset they reached (reported in heartbeats, so the controller knows
//! when the broker has caught up), and the leader addresses LeaderAndIsr
//! requests name.

use std::collections::{BTreeMap, BTreeSet};

use keel_metadata::{BrokerId, BrokerInfo, PartitionLeadership, TopicId, TopicPartition};

/// One UpdateMetadata, validated: applying it cannot fail.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MetadataUpdate {
    /// The whole view: replaces the cache (otherwise merged into it).
    pub full: bool,
    /// Metadata log offset it brings the broker to; 0 in the parts of a
    /// split view, which leave the offset alone.
    pub offset: u64,
    /// New or changed brokers.
    pub brokers: Vec<BrokerInfo>,
    /// Brokers to forget (unregistered).
    pub removed_brokers: Vec<BrokerId>,
    /// New or changed partitions.
    pub partitions: Vec<PartitionLeadership>,
    /// Topics to forget with all their partitions (deleted).
    pub deleted_topics: BTreeSet<TopicId>,
}

/// What the broker knows of the cluster beyond its own partitions.
#[derive(Debug, Default)]
pub(crate) struct MetadataCache {
    /// Metadata log offset of the last UpdateMetadata applied (0 before any).
    offset: u64,
    /// Registered brokers, by id.
    brokers: BTreeMap<BrokerId, BrokerInfo>,
    /// Every partition of every topic.
    partitions: BTreeMap<TopicPartition, PartitionLeadership>,
    /// Leader addresses from LeaderAndIsr `leaders` (fresher than the cache).
    leader_addresses: BTreeMap<BrokerId, String>,
    /// Counts the UpdateMetadata requests applied: a view made of the cache
    /// at one generation is current while the generation is.
    generation: u64,
}

impl MetadataCache {
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// How many UpdateMetadata requests were applied.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Cached partitions, in partition order.
    pub(crate) fn partitions(&self) -> impl ExactSizeIterator<Item = &PartitionLeadership> {
        self.partitions.values()
    }

    /// Cached brokers, in id order.
    pub(crate) fn brokers(&self) -> impl ExactSizeIterator<Item = &BrokerInfo> {
        self.brokers.values()
    }

    pub(crate) fn apply(&mut self, u: MetadataUpdate) {
        self.generation += 1;
        if u.full {
            self.brokers.clear();
            self.partitions.clear();
        }
        for b in u.brokers {
            self.brokers.insert(b.id, b);
        }
        for id in &u.removed_brokers {
            self.brokers.remove(id);
        }
        for p in u.partitions {
            self.partitions.insert(p.tp, p);
        }
        if !u.deleted_topics.is_empty() {
            self.partitions
                .retain(|tp, _| !u.deleted_topics.contains(&tp.topic_id));
        }
        self.offset = self.offset.max(u.offset);
    }

    /// Remembers where the leaders a LeaderAndIsr names listen.
    pub(crate) fn remember_leader_addresses(
        &mut self,
        leaders: impl IntoIterator<Item = BrokerInfo>,
    ) {
        for b in leaders {
            if !b.address.is_empty() {
                self.leader_addresses.insert(b.id, b.address);
            }
        }
    }

    /// Where broker `b` listens, if known.
    pub(crate) fn address_of(&self, b: BrokerId) -> Option<String> {
        self.leader_addresses
            .get(&b)
            .cloned()
            .or_else(|| self.brokers.get(&b).map(|i| i.address.clone()))
            .filter(|a| !a.is_empty())
    }

    /// Broker `b` may join an ISR: not known to be fenced or shutting down.
    pub(crate) fn may_join_isr(&self, b: BrokerId) -> bool {
        self.brokers
            .get(&b)
            .is_none_or(|i| !i.fenced && !i.shutting_down)
    }
}
