//! Turns committed records into per-broker controller requests: the pure
//! planner behind the channel manager (the classic
//! `ControllerBrokerRequestBatch`). Executors only send what it plans.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{BrokerId, TopicId, TopicPartition};
use crate::image::MetadataImage;
use crate::records::MetadataRecord;

/// What a channel to one broker must do after a batch.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ChannelAction {
    /// (Re)open it and send the broker its full state: it registered or was
    /// unfenced.
    OpenWithFullState,
    /// Close it and drop its queue: the broker was fenced or unregistered.
    Close,
}

/// The requests one decision implies. Partition lists are sorted and free
/// of duplicates (a decision touching 100,000 partitions is planned with a
/// sort, not 400,000 set insertions).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BrokerRequestPlan {
    /// Channel openings and closings, the last word per broker.
    pub channels: BTreeMap<BrokerId, ChannelAction>,
    /// What `LeaderAndIsr` and `UpdateMetadata` must carry.
    pub updates: BrokerUpdates,
    /// Replicas removed from an assignment: `StopReplica` with delete.
    pub stop_replica: BTreeMap<BrokerId, Vec<TopicPartition>>,
}

/// The state changes of a plan that brokers learn through `LeaderAndIsr`
/// and `UpdateMetadata` (rendered later from the newest image).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BrokerUpdates {
    /// Partitions whose new state each broker must get in `LeaderAndIsr`.
    pub leader_and_isr: BTreeMap<BrokerId, Vec<TopicPartition>>,
    /// Partitions every broker's metadata cache must update.
    pub changed_partitions: Vec<TopicPartition>,
    /// Topics every broker's metadata cache must forget.
    pub deleted_topics: BTreeSet<TopicId>,
    /// Brokers whose registration or state changed: every cache gets their
    /// new entries (only those, so N registrations cost O(N) each, not O(N²)).
    pub changed_brokers: BTreeSet<BrokerId>,
}

impl BrokerUpdates {
    /// Nothing for any broker to learn.
    pub fn is_empty(&self) -> bool {
        self.leader_and_isr.is_empty()
            && self.changed_partitions.is_empty()
            && self.deleted_topics.is_empty()
            && self.changed_brokers.is_empty()
    }
}

impl BrokerRequestPlan {
    /// Nothing to send.
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty() && self.updates.is_empty() && self.stop_replica.is_empty()
    }
}

/// Plans the broker requests of `records`, which took `before` to `after`.
pub fn plan<'a>(
    before: &MetadataImage,
    after: &MetadataImage,
    records: impl IntoIterator<Item = &'a MetadataRecord>,
) -> BrokerRequestPlan {
    let mut p = BrokerRequestPlan::default();
    let mut touched: Vec<TopicPartition> = Vec::new();
    for r in records {
        match r {
            MetadataRecord::RegisterBroker(reg) => {
                p.channels
                    .insert(reg.broker, ChannelAction::OpenWithFullState);
                p.updates.changed_brokers.insert(reg.broker);
            }
            MetadataRecord::UnfenceBroker { broker, .. } => {
                p.channels.insert(*broker, ChannelAction::OpenWithFullState);
                p.updates.changed_brokers.insert(*broker);
            }
            MetadataRecord::FenceBroker { broker, .. }
            | MetadataRecord::UnregisterBroker { broker, .. } => {
                p.channels.insert(*broker, ChannelAction::Close);
                p.updates.changed_brokers.insert(*broker);
            }
            MetadataRecord::BrokerShuttingDown { broker, .. }
            | MetadataRecord::LogDirsOffline { broker, .. }
            | MetadataRecord::BrokerKafkaListener { broker, .. } => {
                p.updates.changed_brokers.insert(*broker);
            }
            MetadataRecord::Partition(r) => {
                touched.push(TopicPartition {
                    topic_id: r.topic_id,
                    partition: r.partition,
                });
            }
            MetadataRecord::PartitionChange(r) => {
                touched.push(TopicPartition {
                    topic_id: r.topic_id,
                    partition: r.partition,
                });
            }
            MetadataRecord::RemoveTopic { topic_id } => {
                p.updates.deleted_topics.insert(*topic_id);
            }
            MetadataRecord::Topic(_)
            | MetadataRecord::TopicConfig { .. }
            | MetadataRecord::MarkTopicForDeletion { .. }
            | MetadataRecord::ReplicaDeletionState { .. }
            | MetadataRecord::BeginTransaction { .. }
            | MetadataRecord::EndTransaction
            | MetadataRecord::AbortTransaction
            | MetadataRecord::AclAdded(_)
            | MetadataRecord::AclRemoved(_)
            | MetadataRecord::ClusterConfig { .. }
            // Brokers re-read credentials (and ACLs) when the image's
            // `access_version` moves, not through these requests.
            | MetadataRecord::UserScramCredential { .. }
            | MetadataRecord::UserScramCredentialRemoved { .. } => {}
        }
    }
    touched.sort_unstable();
    touched.dedup();
    p.updates.changed_partitions.reserve(touched.len());
    // Walking the partitions in order keeps every per-broker list sorted.
    for tp in touched {
        let Some(now) = after.partition(&tp) else {
            // Created and removed in one batch: nothing for brokers to hold.
            continue;
        };
        p.updates.changed_partitions.push(tp);
        for b in &now.replicas {
            p.updates.leader_and_isr.entry(*b).or_default().push(tp);
        }
        if let Some(was) = before.partition(&tp) {
            for b in was.replicas.iter().filter(|b| !now.replicas.contains(b)) {
                p.stop_replica.entry(*b).or_default().push(tp);
            }
        }
    }
    p
}

/// One round of requests to one broker, as lists of what to send; the
/// requests themselves are rendered from the newest image just before they
/// go (a later state supersedes an earlier one, so many changes cost one
/// round).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BrokerRound {
    /// A full state: the first `UpdateMetadata` replaces the whole cache,
    /// and the metadata goes first (a registering broker is unfenced once
    /// its cache caught up). A delta sends leadership first (as the classic
    /// controller did): replicas act on it; the caches follow.
    pub full: bool,
    /// Partitions whose state the broker gets in `LeaderAndIsr` (sorted).
    pub leader_and_isr: Vec<TopicPartition>,
    /// Whether an `UpdateMetadata` is due at all.
    pub metadata_due: bool,
    /// Partitions the broker's cache must update (sorted).
    pub metadata: Vec<TopicPartition>,
    /// Brokers whose registrations the cache must (re)learn.
    pub brokers: Vec<BrokerId>,
    /// Brokers the cache must forget (gone from the image).
    pub removed_brokers: Vec<BrokerId>,
    /// Topics the cache must forget.
    pub deleted_topics: Vec<TopicId>,
}

impl BrokerRound {
    /// The full state of `broker`: every broker and partition for its
    /// cache, and `LeaderAndIsr` for every partition it hosts.
    pub fn full(image: &MetadataImage, broker: BrokerId) -> Self {
        let mut hosted = Vec::new();
        let all: Vec<TopicPartition> = image
            .partitions()
            .map(|(tp, p)| {
                if p.replicas.contains(&broker) {
                    hosted.push(*tp);
                }
                *tp
            })
            .collect();
        Self {
            full: true,
            leader_and_isr: hosted,
            metadata_due: true,
            metadata: all,
            brokers: image.brokers().map(|b| b.id).collect(),
            removed_brokers: Vec::new(),
            deleted_topics: Vec::new(),
        }
    }

    /// What `updates` (oldest first) mean together for `broker`, against
    /// `image` (at least as new as every one of them): lists merged, each
    /// partition once.
    pub fn of_updates<'a>(
        image: &MetadataImage,
        broker: BrokerId,
        updates: impl IntoIterator<Item = &'a BrokerUpdates>,
    ) -> Self {
        let mut lai: Vec<TopicPartition> = Vec::new();
        let mut parts: Vec<TopicPartition> = Vec::new();
        let mut brokers: BTreeSet<BrokerId> = BTreeSet::new();
        let mut deleted: BTreeSet<TopicId> = BTreeSet::new();
        let mut merged = 0;
        for u in updates {
            merged += 1;
            if let Some(tps) = u.leader_and_isr.get(&broker) {
                lai.extend_from_slice(tps);
            }
            parts.extend_from_slice(&u.changed_partitions);
            brokers.extend(u.changed_brokers.iter().copied());
            deleted.extend(u.deleted_topics.iter().copied());
        }
        if merged > 1 {
            // Each list is sorted; their concatenation may repeat partitions.
            lai.sort_unstable();
            lai.dedup();
            parts.sort_unstable();
            parts.dedup();
        }
        let metadata_due = !parts.is_empty() || !brokers.is_empty() || !deleted.is_empty();
        let (present, removed): (Vec<BrokerId>, Vec<BrokerId>) = brokers
            .into_iter()
            .partition(|b| image.broker(*b).is_some());
        Self {
            full: false,
            leader_and_isr: lai,
            metadata_due,
            metadata: parts,
            brokers: present,
            removed_brokers: removed,
            deleted_topics: deleted.into_iter().collect(),
        }
    }
}

/// Whether a `StopReplica(delete)` of `tp` on `broker` is still wanted: it
/// is moot when the replica is assigned again in `image` (it was reassigned
/// away and back) and the topic is not being deleted, since the
/// `LeaderAndIsr` that re-added it must not be undone.
pub fn stop_still_wanted(image: &MetadataImage, broker: BrokerId, tp: &TopicPartition) -> bool {
    let reassigned_back = image
        .partition(tp)
        .is_some_and(|p| p.replicas.contains(&broker));
    let deleting = image
        .topic(tp.topic_id)
        .is_some_and(|t| t.marked_for_deletion());
    !reassigned_back || deleting
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{BrokerEpoch, IncarnationId, PartitionId};
    use crate::records::{
        LeaderChange, PartitionChangeRecord, PartitionRecord, RegisterBrokerRecord, TopicRecord,
    };

    fn replay(image: &mut MetadataImage, records: &[MetadataRecord], offset: u64) {
        for r in records {
            image.replay(r, offset).expect("replays");
        }
    }

    fn register(b: u32) -> MetadataRecord {
        MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker: BrokerId(b),
            incarnation: IncarnationId(u128::from(b)),
            address: format!("127.0.0.1:{b}"),
            rack: None,
            log_dirs: vec![],
        })
    }

    /// Topic `t`, named "t", without configs of its own.
    fn topic(t: TopicId) -> MetadataRecord {
        MetadataRecord::Topic(TopicRecord {
            topic_id: t,
            name: "t".into(),
            configs: Default::default(),
        })
    }

    /// Partition `p` of topic `t` on `replicas`, all in sync, led by the
    /// first.
    fn partition(t: TopicId, p: u32, replicas: &[u32]) -> MetadataRecord {
        let replicas: Vec<BrokerId> = replicas.iter().copied().map(BrokerId).collect();
        MetadataRecord::Partition(PartitionRecord {
            topic_id: t,
            partition: PartitionId(p),
            isr: replicas.clone(),
            leader: replicas.first().copied(),
            replicas,
        })
    }

    #[test]
    fn registration_opens_a_channel_and_fencing_closes_it() {
        let before = MetadataImage::new();
        let mut after = before.clone();
        let recs = vec![register(1)];
        replay(&mut after, &recs, 5);
        let p = plan(&before, &after, &recs);
        assert_eq!(
            p.channels.get(&BrokerId(1)),
            Some(&ChannelAction::OpenWithFullState)
        );
        assert!(p.updates.changed_brokers.contains(&BrokerId(1)));

        let before = after.clone();
        let recs = vec![MetadataRecord::FenceBroker {
            broker: BrokerId(1),
            epoch: BrokerEpoch(5),
        }];
        replay(&mut after, &recs, 6);
        let p = plan(&before, &after, &recs);
        assert_eq!(p.channels.get(&BrokerId(1)), Some(&ChannelAction::Close));
    }

    #[test]
    fn a_partition_change_reaches_every_replica_and_stops_removed_ones() {
        let mut image = MetadataImage::new();
        let t = crate::ids::TopicId(7);
        let mut setup = vec![register(1), register(2), register(3)];
        replay(&mut image, &setup, 1);
        for b in 1..=3 {
            setup = vec![MetadataRecord::UnfenceBroker {
                broker: BrokerId(b),
                epoch: BrokerEpoch(1),
            }];
            replay(&mut image, &setup, 2);
        }
        let recs = vec![topic(t), partition(t, 0, &[1, 2, 3])];
        let before = image.clone();
        replay(&mut image, &recs, 3);
        let p = plan(&before, &image, &recs);
        let tp = TopicPartition::new(t, 0);
        for b in 1..=3 {
            assert!(p.updates.leader_and_isr[&BrokerId(b)].contains(&tp));
        }
        assert!(p.updates.changed_partitions.contains(&tp));

        let mut change = PartitionChangeRecord::new(t, PartitionId(0));
        change.replicas = Some(vec![BrokerId(1), BrokerId(2)]);
        change.isr = Some(vec![BrokerId(1), BrokerId(2)]);
        change.leader = LeaderChange::Unchanged;
        let recs = vec![MetadataRecord::PartitionChange(change)];
        let before = image.clone();
        replay(&mut image, &recs, 4);
        let p = plan(&before, &image, &recs);
        assert!(p.stop_replica[&BrokerId(3)].contains(&tp));
        assert!(!p.updates.leader_and_isr.contains_key(&BrokerId(3)));

        // Several changes of one partition, and of others in any order: each
        // partition is listed once, in order.
        let tp1 = TopicPartition::new(t, 1);
        let add = PartitionRecord {
            topic_id: t,
            partition: PartitionId(1),
            replicas: vec![BrokerId(2), BrokerId(1)],
            isr: vec![BrokerId(2), BrokerId(1)],
            leader: Some(BrokerId(2)),
        };
        let mut recs = vec![MetadataRecord::Partition(add)];
        let mut bump = PartitionChangeRecord::new(t, PartitionId(0));
        bump.isr = Some(vec![BrokerId(1)]);
        recs.push(MetadataRecord::PartitionChange(bump.clone()));
        let mut again = bump;
        again.isr = Some(vec![BrokerId(1), BrokerId(2)]);
        recs.push(MetadataRecord::PartitionChange(again));
        let before = image.clone();
        replay(&mut image, &recs, 5);
        let p = plan(&before, &image, &recs);
        assert_eq!(p.updates.changed_partitions, vec![tp, tp1]);
        assert_eq!(p.updates.leader_and_isr[&BrokerId(1)], vec![tp, tp1]);
        assert_eq!(p.updates.leader_and_isr[&BrokerId(2)], vec![tp, tp1]);
    }

    #[test]
    fn a_round_merges_the_updates_for_its_broker() {
        let mut image = MetadataImage::new();
        replay(&mut image, &[register(1)], 1);
        let tp = |p: u32| TopicPartition::new(TopicId(1), p);
        let changed = |n: u32| BrokerUpdates {
            changed_partitions: (0..n).map(tp).collect(),
            ..Default::default()
        };
        let mut a = changed(2);
        a.leader_and_isr.insert(BrokerId(1), vec![tp(0)]);
        a.leader_and_isr.insert(BrokerId(2), vec![tp(1)]);
        let mut b = changed(1);
        b.leader_and_isr.insert(BrokerId(1), vec![tp(0)]);
        b.changed_brokers = [BrokerId(1), BrokerId(9)].into();
        b.deleted_topics = [TopicId(5)].into();
        let r = BrokerRound::of_updates(&image, BrokerId(1), [&a, &b]);
        assert!(!r.full && r.metadata_due);
        assert_eq!(r.leader_and_isr, vec![tp(0)]);
        assert_eq!(r.metadata, vec![tp(0), tp(1)]);
        // Broker 9 is not in the image: caches drop it.
        assert_eq!(r.brokers, vec![BrokerId(1)]);
        assert_eq!(r.removed_brokers, vec![BrokerId(9)]);
        assert_eq!(r.deleted_topics, vec![TopicId(5)]);
        // Nothing for this broker's cache or leaderships: nothing due.
        let quiet = BrokerRound::of_updates(&image, BrokerId(1), std::iter::empty());
        assert!(!quiet.metadata_due && quiet.leader_and_isr.is_empty());
    }

    #[test]
    fn a_full_round_lists_every_partition_and_the_hosted_ones_for_leadership() {
        let mut image = MetadataImage::new();
        replay(&mut image, &[register(1), register(2)], 1);
        for b in [1, 2] {
            let unfence = MetadataRecord::UnfenceBroker {
                broker: BrokerId(b),
                epoch: BrokerEpoch(1),
            };
            replay(&mut image, &[unfence], 2);
        }
        let t = TopicId(3);
        let recs = vec![topic(t), partition(t, 0, &[1, 2]), partition(t, 1, &[2])];
        replay(&mut image, &recs, 2);
        let r = BrokerRound::full(&image, BrokerId(1));
        assert!(r.full && r.metadata_due);
        assert_eq!(r.leader_and_isr, vec![TopicPartition::new(t, 0)]);
        assert_eq!(r.metadata.len(), 2);
        assert_eq!(r.brokers, vec![BrokerId(1), BrokerId(2)]);
    }

    #[test]
    fn a_stop_is_moot_once_its_replica_is_assigned_again_unless_the_topic_goes() {
        let mut image = MetadataImage::new();
        let t = TopicId(3);
        let recs = vec![
            register(1),
            register(2),
            MetadataRecord::UnfenceBroker {
                broker: BrokerId(1),
                epoch: BrokerEpoch(1),
            },
            topic(t),
            partition(t, 0, &[1]),
        ];
        replay(&mut image, &recs, 1);
        let tp = TopicPartition::new(t, 0);
        // Broker 2 holds no replica: the stop stands.
        assert!(stop_still_wanted(&image, BrokerId(2), &tp));
        // Broker 1 was assigned (again): the stop is moot...
        assert!(!stop_still_wanted(&image, BrokerId(1), &tp));
        // ...unless the topic is being deleted.
        replay(
            &mut image,
            &[MetadataRecord::MarkTopicForDeletion { topic_id: t }],
            9,
        );
        assert!(stop_still_wanted(&image, BrokerId(1), &tp));
    }
}
