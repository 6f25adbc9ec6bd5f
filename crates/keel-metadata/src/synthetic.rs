//! A deterministic synthetic cluster for benchmarks: brokers `0..brokers`,
//! registered and unfenced, and topics `0..topics` of `partitions_per_topic`
//! partitions replicated on every broker (preferred leader rotating), built
//! by replaying the records a controller would have written; plus a stream
//! of valid `PartitionChange` records over those partitions.

use std::collections::BTreeMap;

use crate::error::ReplayError;
use crate::ids::{BrokerEpoch, BrokerId, IncarnationId, PartitionId, TopicId};
use crate::image::MetadataImage;
use crate::records::{
    LeaderChange, MetadataRecord, PartitionChangeRecord, PartitionRecord, RegisterBrokerRecord,
    TopicRecord,
};

/// The shape of a synthetic cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyntheticCluster {
    /// Brokers, which is also the replication factor.
    pub brokers: u32,
    pub topics: u32,
    pub partitions_per_topic: u32,
}

impl SyntheticCluster {
    /// The id of topic `t`.
    pub fn topic_id(t: u32) -> TopicId {
        TopicId(0x1000 + u128::from(t))
    }

    /// Partitions in the cluster.
    pub fn partitions(&self) -> u64 {
        u64::from(self.topics) * u64::from(self.partitions_per_topic)
    }

    /// Replicas of partition `p` of topic `t`: every broker, the preferred
    /// leader rotating with `t + p`.
    pub fn replicas_of(&self, t: u32, p: u32) -> Vec<BrokerId> {
        let n = self.brokers.max(1);
        let first = ((u64::from(t) + u64::from(p)) % u64::from(n)) as u32;
        (0..n).map(|i| BrokerId((first + i) % n)).collect()
    }

    /// The image, built by replaying one entry per broker registration, one
    /// for the unfencing and one per topic; returns it with the next free
    /// log index.
    pub fn image(&self) -> Result<(MetadataImage, u64), ReplayError> {
        let mut image = MetadataImage::new();
        let mut epochs = Vec::new();
        for b in 0..self.brokers {
            let record = MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                broker: BrokerId(b),
                incarnation: IncarnationId(u128::from(b) + 1),
                address: format!("127.0.0.{}:9092", b + 1),
                rack: None,
                log_dirs: vec!["/data/0".into()],
            });
            epochs.push(BrokerEpoch(image.replay_next(vec![record])?));
        }
        let unfence = (0..self.brokers)
            .zip(epochs)
            .map(|(b, epoch)| MetadataRecord::UnfenceBroker {
                broker: BrokerId(b),
                epoch,
            })
            .collect();
        image.replay_next(unfence)?;
        for t in 0..self.topics {
            let mut records = vec![MetadataRecord::Topic(TopicRecord {
                topic_id: Self::topic_id(t),
                name: format!("topic-{t:06}"),
                configs: BTreeMap::new(),
            })];
            for p in 0..self.partitions_per_topic {
                let replicas = self.replicas_of(t, p);
                records.push(MetadataRecord::Partition(PartitionRecord {
                    topic_id: Self::topic_id(t),
                    partition: PartitionId(p),
                    isr: replicas.clone(),
                    leader: replicas.first().copied(),
                    replicas,
                }));
            }
            image.replay_next(records)?;
        }
        let next = image.offset() + 1;
        Ok((image, next))
    }

    /// `n` valid `PartitionChange` records cycling over every partition.
    /// Each partition goes through rounds of: ISR shrink (the replica two
    /// after the leader leaves), ISR expand (back to all replicas), leader
    /// move to the next replica. Replayable in order onto [`image`](Self::image)
    /// with at least 3 brokers.
    pub fn partition_changes(&self, n: usize) -> Vec<MetadataRecord> {
        assert!(
            self.brokers >= 3,
            "partition changes need replicas on 3 brokers"
        );
        let per_topic = self.partitions_per_topic.max(1) as usize;
        let partitions = self.partitions().max(1) as usize;
        let mut leader_at = vec![0usize; partitions];
        (0..n)
            .map(|i| {
                let idx = i % partitions;
                let round = i / partitions;
                let (t, p) = ((idx / per_topic) as u32, (idx % per_topic) as u32);
                let replicas = self.replicas_of(t, p);
                let leader = &mut leader_at[idx];
                let mut c = PartitionChangeRecord::new(Self::topic_id(t), PartitionId(p));
                match round % 3 {
                    0 => {
                        let dropped = replicas[(*leader + 2) % replicas.len()];
                        c.isr = Some(replicas.iter().copied().filter(|b| *b != dropped).collect());
                    }
                    1 => c.isr = Some(replicas),
                    _ => {
                        *leader = (*leader + 1) % replicas.len();
                        c.leader = LeaderChange::To(replicas[*leader]);
                    }
                }
                MetadataRecord::PartitionChange(c)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TopicPartition;
    use crate::records::RecordBatch;

    #[test]
    fn the_changes_replay_onto_the_image_and_keep_it_valid() {
        let c = SyntheticCluster {
            brokers: 3,
            topics: 4,
            partitions_per_topic: 5,
        };
        let (mut image, first) = c.image().unwrap();
        assert_eq!(image.partition_count() as u64, c.partitions());
        image.validate().unwrap();
        // Three full rounds: every partition shrinks, expands and moves.
        let changes = c.partition_changes(3 * c.partitions() as usize);
        image
            .replay_batch(&RecordBatch::new(changes), first)
            .unwrap();
        image.validate().unwrap();
        let tp = TopicPartition::new(SyntheticCluster::topic_id(2), 3);
        let p = image.partition(&tp).unwrap();
        assert_eq!(p.partition_epoch.0, 3);
        assert_eq!(p.isr.len(), 3);
        assert_eq!(p.leader, Some(c.replicas_of(2, 3)[1]));
    }
}
