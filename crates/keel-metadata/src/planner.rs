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
pub fn plan(
    before: &MetadataImage,
    after: &MetadataImage,
    records: &[MetadataRecord],
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
            | MetadataRecord::LogDirsOffline { broker, .. } => {
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
            | MetadataRecord::ReplicaDeletionState { .. } => {}
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
        let recs = vec![
            MetadataRecord::Topic(TopicRecord {
                topic_id: t,
                name: "t".into(),
                configs: Default::default(),
            }),
            MetadataRecord::Partition(PartitionRecord {
                topic_id: t,
                partition: PartitionId(0),
                replicas: vec![BrokerId(1), BrokerId(2), BrokerId(3)],
                isr: vec![BrokerId(1), BrokerId(2), BrokerId(3)],
                leader: Some(BrokerId(1)),
            }),
        ];
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
}
