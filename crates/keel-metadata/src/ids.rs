//! Identifiers and epochs. Each is a newtype so a broker id can never be
//! passed where a partition index or an epoch is expected.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A broker's configured id (`--broker-id`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BrokerId(pub u32);

/// A topic's unique id: a re-created name gets a new one.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TopicId(pub u128);

/// A partition's index within its topic.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PartitionId(pub u32);

/// Bumped on every leader change of a partition.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct LeaderEpoch(pub u32);

/// Bumped on every change of a partition (replaces the znode version).
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct PartitionEpoch(pub u32);

/// The log index of a broker's registration record.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct BrokerEpoch(pub u64);

/// The Raft term of the active controller.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct ControllerEpoch(pub u64);

/// Identifies one broker process lineage (one data dir); a wiped data dir
/// gives a new incarnation.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct IncarnationId(pub u128);

/// The log index of the last metadata record a node has applied.
pub type MetadataOffset = u64;

/// One partition of one topic.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TopicPartition {
    pub topic_id: TopicId,
    pub partition: PartitionId,
}

impl TopicPartition {
    pub fn new(topic_id: TopicId, partition: u32) -> Self {
        Self {
            topic_id,
            partition: PartitionId(partition),
        }
    }
}

fn fmt_uuid(v: u128, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let b = v.to_be_bytes();
    write!(
        f,
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        u16::from_be_bytes([b[4], b[5]]),
        u16::from_be_bytes([b[6], b[7]]),
        u16::from_be_bytes([b[8], b[9]]),
        v & 0xffff_ffff_ffff
    )
}

fn parse_uuid(s: &str) -> Option<u128> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 {
        return None;
    }
    u128::from_str_radix(&hex, 16).ok()
}

impl TopicId {
    /// Big-endian bytes, as carried on the wire.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// From wire bytes; `None` unless exactly 16 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        Some(Self(u128::from_be_bytes(b.try_into().ok()?)))
    }

    /// Parses the `8-4-4-4-12` hex form printed by `Display`.
    pub fn parse(s: &str) -> Option<Self> {
        parse_uuid(s).map(Self)
    }
}

impl IncarnationId {
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        Some(Self(u128::from_be_bytes(b.try_into().ok()?)))
    }
}

impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_uuid(self.0, f)
    }
}

impl fmt::Debug for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicId(")?;
        fmt_uuid(self.0, f)?;
        write!(f, ")")
    }
}

impl fmt::Display for IncarnationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_uuid(self.0, f)
    }
}

impl fmt::Debug for IncarnationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IncarnationId(")?;
        fmt_uuid(self.0, f)?;
        write!(f, ")")
    }
}

impl fmt::Display for BrokerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic_id, self.partition.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_id_text_and_bytes_round_trip() {
        let id = TopicId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        let text = id.to_string();
        assert_eq!(text, "01234567-89ab-cdef-0011-223344556677");
        assert_eq!(TopicId::parse(&text), Some(id));
        assert_eq!(TopicId::from_bytes(&id.to_bytes()), Some(id));
        assert_eq!(TopicId::from_bytes(&[1, 2, 3]), None);
        assert_eq!(TopicId::parse("not-a-uuid"), None);
    }
}
