//! The image's partition map, stored densely.
//!
//! A topic's partitions are always exactly `0..partition_count`: they are
//! created in index order and removed only with their topic. So instead of
//! one tree entry per partition, the table keeps chunks of up to
//! [`CHUNK`] consecutive partitions of one topic, each chunk a plain vector
//! behind an `Arc`, in a persistent map keyed by `(topic, chunk number)`.
//! A partition is found by its topic and index (`index / CHUNK`, then
//! `index % CHUNK`).
//!
//! Why: a persistent B-tree filled in key order leaves its leaves about half
//! empty, and each leaf slot is as large as the partition it holds. Dense
//! chunks roughly halve the memory of a large image and make decoding one
//! vector push per partition. Cloning stays O(1), and changing a partition of
//! a shared table copies one chunk and the tree path above it, as before.
//!
//! Serialized exactly like the ordered map it replaces (a length, then every
//! `(TopicPartition, PartitionImage)` in key order), so encodings and image
//! hashes do not change.

use std::fmt;
use std::sync::Arc;

use imbl::OrdMap;
use serde::de::{Deserializer, Error, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use super::PartitionImage;
use crate::ids::{TopicId, TopicPartition};

/// Partitions per chunk: the same fan-out as the persistent map's nodes, so
/// a copy-on-write of a chunk costs what a copy of a map leaf cost.
const CHUNK: u32 = 16;

/// One topic's partitions `number * CHUNK ..` (at most `CHUNK`, no gaps).
type Chunk = Vec<(TopicPartition, PartitionImage)>;

/// Where a partition's chunk sits in the map, and its slot in the chunk.
fn locate(tp: &TopicPartition) -> ((TopicId, u32), usize) {
    (
        (tp.topic_id, tp.partition.0 / CHUNK),
        (tp.partition.0 % CHUNK) as usize,
    )
}

/// A partition that is not the next one of its topic (see [`PartitionTable::push`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct NotNext;

/// Every partition of every topic, in `(topic, index)` order.
#[derive(Clone, Default)]
pub(super) struct PartitionTable {
    /// Chunks by `(topic, chunk number)`.
    chunks: OrdMap<(TopicId, u32), Arc<Chunk>>,
    /// Partitions in all chunks.
    len: usize,
}

impl PartitionTable {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn get(&self, tp: &TopicPartition) -> Option<&PartitionImage> {
        let (key, slot) = locate(tp);
        let (k, p) = self.chunks.get(&key)?.get(slot)?;
        (k == tp).then_some(p)
    }

    pub(super) fn contains_key(&self, tp: &TopicPartition) -> bool {
        self.get(tp).is_some()
    }

    /// The partition, for writing: copies its chunk (and the map path to it)
    /// if they are shared with another clone of the table.
    pub(super) fn get_mut(&mut self, tp: &TopicPartition) -> Option<&mut PartitionImage> {
        if !self.contains_key(tp) {
            // Nothing to write: do not copy any shared path for nothing.
            return None;
        }
        let (key, slot) = locate(tp);
        let chunk = Arc::make_mut(self.chunks.get_mut(&key)?);
        chunk.get_mut(slot).map(|(_, p)| p)
    }

    /// Appends `tp`, which must be the next partition of its topic: index 0
    /// of a topic without partitions, or one past the topic's last.
    pub(super) fn push(&mut self, tp: TopicPartition, p: PartitionImage) -> Result<(), NotNext> {
        let next_is = |last: Option<&TopicPartition>| match last {
            Some(last) => tp.partition.0.checked_sub(1) == Some(last.partition.0),
            None => tp.partition.0 == 0,
        };
        let (key, slot) = locate(&tp);
        if slot == 0 {
            let before = match key.1.checked_sub(1) {
                Some(n) => self
                    .chunks
                    .get(&(key.0, n))
                    .and_then(|c| c.last().map(|(k, _)| k)),
                None => None,
            };
            if self.chunks.contains_key(&key) || !next_is(before) {
                return Err(NotNext);
            }
            self.chunks.insert(key, Arc::new(vec![(tp, p)]));
        } else {
            let chunk = self.chunks.get_mut(&key).ok_or(NotNext)?;
            if chunk.len() != slot || !next_is(chunk.last().map(|(k, _)| k)) {
                return Err(NotNext);
            }
            Arc::make_mut(chunk).push((tp, p));
        }
        self.len += 1;
        Ok(())
    }

    /// Removes partitions `0..count` of `topic`.
    pub(super) fn remove_topic(&mut self, topic: TopicId, count: u32) {
        for n in 0..count.div_ceil(CHUNK) {
            if let Some(c) = self.chunks.remove(&(topic, n)) {
                self.len -= c.len();
            }
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&TopicPartition, &PartitionImage)> {
        self.chunks
            .values()
            .flat_map(|c| c.iter().map(|(tp, p)| (tp, p)))
    }

    /// The partitions of one topic, in index order.
    pub(super) fn topic(
        &self,
        topic: TopicId,
    ) -> impl Iterator<Item = (&TopicPartition, &PartitionImage)> {
        self.chunks
            .range((topic, 0)..=(topic, u32::MAX))
            .flat_map(|(_, c)| c.iter().map(|(tp, p)| (tp, p)))
    }
}

impl PartialEq for PartitionTable {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for PartitionTable {}

impl fmt::Debug for PartitionTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for PartitionTable {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.len))?;
        for (tp, p) in self.iter() {
            m.serialize_entry(tp, p)?;
        }
        m.end()
    }
}

/// Reads the table from untrusted bytes (a snapshot): entries are pushed one
/// at a time as they are read (a false length just runs out of input), and
/// each must be the next partition of its topic, with topics in increasing
/// order. So keys are strictly increasing, as `encode` writes them, and a
/// topic's partitions have no gaps, as `validate` demands anyway.
impl<'de> Deserialize<'de> for PartitionTable {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_map(TableVisitor)
    }
}

struct TableVisitor;

impl<'de> Visitor<'de> for TableVisitor {
    type Value = PartitionTable;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of every topic's partitions 0.., in key order")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Self::Value, A::Error> {
        let mut table = PartitionTable::default();
        // The chunk being filled, inserted into the map once complete (one
        // map insertion per chunk rather than a lookup per partition).
        let mut open: Option<((TopicId, u32), Chunk)> = None;
        let close = |table: &mut PartitionTable, key, mut chunk: Chunk| {
            // A topic's last chunk may be short: give back the room.
            chunk.shrink_to_fit();
            table.len += chunk.len();
            table.chunks.insert(key, Arc::new(chunk));
        };
        let mut last: Option<TopicPartition> = None;
        while let Some((tp, p)) = entries.next_entry::<TopicPartition, PartitionImage>()? {
            let next = match last {
                Some(l) if l.topic_id == tp.topic_id => {
                    tp.partition.0.checked_sub(1) == Some(l.partition.0)
                }
                Some(l) => l.topic_id < tp.topic_id && tp.partition.0 == 0,
                None => tp.partition.0 == 0,
            };
            if !next {
                return Err(A::Error::custom(format!(
                    "partition {tp} is not the next partition of its topic \
                     (keys must be strictly increasing, without gaps)"
                )));
            }
            let (key, slot) = locate(&tp);
            match &mut open {
                Some((k, chunk)) if *k == key && chunk.len() == slot => chunk.push((tp, p)),
                _ => {
                    if let Some((k, chunk)) = open.take() {
                        close(&mut table, k, chunk);
                    }
                    let mut chunk = Vec::with_capacity(CHUNK as usize);
                    chunk.push((tp, p));
                    open = Some((key, chunk));
                }
            }
            last = Some(tp);
        }
        if let Some((k, chunk)) = open {
            close(&mut table, k, chunk);
        }
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{BrokerId, LeaderEpoch, PartitionEpoch};
    use crate::state::PartitionState;

    fn partition(leader: u32) -> PartitionImage {
        PartitionImage {
            replicas: vec![BrokerId(leader)],
            isr: vec![BrokerId(leader)],
            leader: Some(BrokerId(leader)),
            leader_epoch: LeaderEpoch(0),
            partition_epoch: PartitionEpoch(0),
            adding: vec![],
            removing: vec![],
            state: PartitionState::Online,
        }
    }

    #[test]
    fn partitions_are_found_across_chunks_and_removed_with_their_topic() {
        let mut t = PartitionTable::default();
        for topic in [TopicId(2), TopicId(1)] {
            for i in 0..40 {
                t.push(TopicPartition::new(topic, i), partition(i)).unwrap();
            }
        }
        assert_eq!(t.len(), 80);
        let tp = TopicPartition::new(TopicId(1), 33);
        assert_eq!(t.get(&tp).unwrap().leader, Some(BrokerId(33)));
        assert!(t.get(&TopicPartition::new(TopicId(1), 40)).is_none());
        assert!(t.get(&TopicPartition::new(TopicId(3), 0)).is_none());
        let order: Vec<_> = t.iter().map(|(tp, _)| *tp).collect();
        assert_eq!(order.first(), Some(&TopicPartition::new(TopicId(1), 0)));
        assert!(order.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(t.topic(TopicId(2)).count(), 40);

        let snapshot = t.clone();
        t.get_mut(&tp).unwrap().leader = None;
        assert_eq!(snapshot.get(&tp).unwrap().leader, Some(BrokerId(33)));
        assert_ne!(snapshot, t);

        t.remove_topic(TopicId(1), 40);
        assert_eq!(t.len(), 40);
        assert!(t.get(&tp).is_none());
        assert_eq!(t.topic(TopicId(1)).count(), 0);
    }

    #[test]
    fn only_the_next_partition_of_a_topic_may_be_pushed() {
        let mut t = PartitionTable::default();
        let tp = |i| TopicPartition::new(TopicId(7), i);
        assert_eq!(t.push(tp(1), partition(1)), Err(NotNext));
        for i in 0..16 {
            t.push(tp(i), partition(i)).unwrap();
        }
        assert_eq!(t.push(tp(15), partition(1)), Err(NotNext));
        assert_eq!(t.push(tp(17), partition(1)), Err(NotNext));
        assert_eq!(t.push(tp(32), partition(1)), Err(NotNext));
        t.push(tp(16), partition(16)).unwrap();
        assert_eq!(t.len(), 17);
    }

    #[test]
    fn encoding_is_the_ordered_map_encoding() {
        let mut t = PartitionTable::default();
        let mut m: OrdMap<TopicPartition, PartitionImage> = OrdMap::new();
        for topic in [TopicId(5), TopicId(9)] {
            for i in 0..20 {
                let tp = TopicPartition::new(topic, i);
                t.push(tp, partition(i)).unwrap();
                m.insert(tp, partition(i));
            }
        }
        let config = bincode::config::standard();
        let a = bincode::serde::encode_to_vec(&t, config).unwrap();
        let b = bincode::serde::encode_to_vec(&m, config).unwrap();
        assert_eq!(a, b);
        let (back, _): (PartitionTable, usize) =
            bincode::serde::decode_from_slice(&a, config).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn decoding_refuses_gaps_and_disorder() {
        let config = bincode::config::standard();
        let encode = |keys: &[(u128, u32)]| {
            let m: Vec<(TopicPartition, PartitionImage)> = keys
                .iter()
                .map(|(t, i)| (TopicPartition::new(TopicId(*t), *i), partition(1)))
                .collect();
            // A map's encoding: the length, then the entries as given.
            let mut out = bincode::serde::encode_to_vec(m.len() as u64, config).unwrap();
            for e in &m {
                out.extend(bincode::serde::encode_to_vec(e, config).unwrap());
            }
            out
        };
        let decode = |bytes: &[u8]| {
            bincode::serde::decode_from_slice::<PartitionTable, _>(bytes, config).map(|(t, _)| t)
        };
        assert!(decode(&encode(&[(1, 0), (1, 1), (2, 0)])).is_ok());
        assert!(decode(&encode(&[(1, 0), (1, 2)])).is_err());
        assert!(decode(&encode(&[(1, 1)])).is_err());
        assert!(decode(&encode(&[(2, 0), (1, 0)])).is_err());
        assert!(decode(&encode(&[(1, 0), (1, 0)])).is_err());
        // A length larger than the entries that follow is an error, not an allocation.
        let mut lying = encode(&[(1, 0)]);
        lying[0] = 0xfc;
        assert!(decode(&lying).is_err());
    }
}
