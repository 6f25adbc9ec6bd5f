//! The image's canonical encoding (snapshots and the hash) and the
//! legacy shapes older releases wrote, read back into today's image.

use std::io::Write;
use std::sync::Arc;

use imbl::OrdMap;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::acl::AclBinding;
use crate::error::DecodeError;
use crate::ids::{BrokerEpoch, BrokerId, IncarnationId, TopicId};
use crate::records::{decode_versioned, encode_as_into, encode_versioned_into};

use super::partition_table::PartitionTable;
use super::{sorted_map, BrokerRegistration, MetadataImage, TopicImage};

/// A registration as format versions 1 and 2 wrote it (before Kafka
/// listeners), read only to decode an old snapshot.
#[derive(Clone, Deserialize)]
struct BrokerRegistrationV2 {
    id: BrokerId,
    epoch: BrokerEpoch,
    incarnation: IncarnationId,
    address: String,
    rack: Option<String>,
    log_dirs: Vec<String>,
    offline_log_dirs: Vec<String>,
    fenced: bool,
    shutting_down: bool,
}

impl From<BrokerRegistrationV2> for BrokerRegistration {
    fn from(b: BrokerRegistrationV2) -> Self {
        Self {
            id: b.id,
            epoch: b.epoch,
            incarnation: b.incarnation,
            address: b.address,
            rack: b.rack,
            log_dirs: b.log_dirs,
            offline_log_dirs: b.offline_log_dirs,
            fenced: b.fenced,
            shutting_down: b.shutting_down,
            kafka_address: None,
        }
    }
}

/// The image as format version 1 wrote it (before ACLs), read only to
/// decode an old snapshot.
#[derive(Deserialize)]
struct ImageV1 {
    offset: u64,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    brokers: OrdMap<BrokerId, BrokerRegistrationV2>,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    topics: OrdMap<TopicId, Arc<TopicImage>>,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    topic_names: OrdMap<String, TopicId>,
    partitions: PartitionTable,
}

/// The image as format version 2 wrote it (registrations without a Kafka
/// listener), read only to decode an old snapshot.
#[derive(Deserialize)]
struct ImageV2 {
    offset: u64,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    brokers: OrdMap<BrokerId, BrokerRegistrationV2>,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    topics: OrdMap<TopicId, Arc<TopicImage>>,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    topic_names: OrdMap<String, TopicId>,
    partitions: PartitionTable,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    acls: OrdMap<AclBinding, ()>,
}

/// The image as format version 3 wrote it (no cluster config defaults),
/// read only to decode an old snapshot.
#[derive(Deserialize)]
struct ImageV3 {
    offset: u64,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    brokers: OrdMap<BrokerId, BrokerRegistration>,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    topics: OrdMap<TopicId, Arc<TopicImage>>,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    topic_names: OrdMap<String, TopicId>,
    partitions: PartitionTable,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    acls: OrdMap<AclBinding, ()>,
}

/// An image without cluster defaults and without SCRAM credentials in
/// [`ImageV3`]'s shape, as it is written, so older releases can read it.
#[derive(Serialize)]
struct ImageV3Ref<'a> {
    offset: u64,
    brokers: &'a OrdMap<BrokerId, BrokerRegistration>,
    topics: &'a OrdMap<TopicId, Arc<TopicImage>>,
    topic_names: &'a OrdMap<String, TopicId>,
    partitions: &'a PartitionTable,
    acls: &'a OrdMap<AclBinding, ()>,
}

/// The image as format version 4 wrote it (no SCRAM credentials), read
/// only to decode an old snapshot.
#[derive(Deserialize)]
struct ImageV4 {
    offset: u64,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    brokers: OrdMap<BrokerId, BrokerRegistration>,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    topics: OrdMap<TopicId, Arc<TopicImage>>,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    topic_names: OrdMap<String, TopicId>,
    partitions: PartitionTable,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    acls: OrdMap<AclBinding, ()>,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    cluster_configs: OrdMap<String, String>,
}

/// An image with cluster defaults but without SCRAM credentials in
/// [`ImageV4`]'s shape, as it is written, so the previous release can
/// read it.
#[derive(Serialize)]
struct ImageV4Ref<'a> {
    offset: u64,
    brokers: &'a OrdMap<BrokerId, BrokerRegistration>,
    topics: &'a OrdMap<TopicId, Arc<TopicImage>>,
    topic_names: &'a OrdMap<String, TopicId>,
    partitions: &'a PartitionTable,
    acls: &'a OrdMap<AclBinding, ()>,
    cluster_configs: &'a OrdMap<String, String>,
}

/// Registrations of a legacy image in today's shape.
fn upgrade_brokers(
    old: OrdMap<BrokerId, BrokerRegistrationV2>,
) -> OrdMap<BrokerId, BrokerRegistration> {
    old.iter()
        .map(|(id, b)| (*id, BrokerRegistration::from(b.clone())))
        .collect()
}

impl MetadataImage {
    /// The canonical encoding: format version + bincode of the ordered
    /// maps; the oldest shape that holds the image: version 3's while no
    /// cluster default and no SCRAM credential is set, version 4's while
    /// no credential is, else version 5's (the whole struct).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out)
            .unwrap_or_else(|e| unreachable!("encoding the image failed: {e}"));
        out
    }

    /// [`encode`](Self::encode) into a writer. It fails only if `out` does:
    /// the image is plain data.
    fn encode_into<W: Write>(&self, out: &mut W) -> Result<(), crate::records::EncodeError> {
        if !self.scram.is_empty() {
            return encode_versioned_into(self, out);
        }
        if !self.cluster_configs.is_empty() {
            let v4 = ImageV4Ref {
                offset: self.offset,
                brokers: &self.brokers,
                topics: &self.topics,
                topic_names: &self.topic_names,
                partitions: &self.partitions,
                acls: &self.acls,
                cluster_configs: &self.cluster_configs,
            };
            return encode_as_into(4, &v4, out);
        }
        let v3 = ImageV3Ref {
            offset: self.offset,
            brokers: &self.brokers,
            topics: &self.topics,
            topic_names: &self.topic_names,
            partitions: &self.partitions,
            acls: &self.acls,
        };
        encode_as_into(crate::records::BASE_RECORD_FORMAT_VERSION, &v3, out)
    }

    /// Decodes an image written by [`encode`](Self::encode) and validates
    /// it. Its [`access_version`](Self::access_version) is its offset.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut image: Self = if bytes.starts_with(&1u16.to_le_bytes()) {
            let v1: ImageV1 = decode_versioned(bytes)?;
            Self {
                offset: v1.offset,
                brokers: upgrade_brokers(v1.brokers),
                topics: v1.topics,
                topic_names: v1.topic_names,
                partitions: v1.partitions,
                acls: OrdMap::new(),
                cluster_configs: OrdMap::new(),
                transaction: None,
                access_version: 0,
                scram: OrdMap::new(),
            }
        } else if bytes.starts_with(&2u16.to_le_bytes()) {
            let v2: ImageV2 = decode_versioned(bytes)?;
            Self {
                offset: v2.offset,
                brokers: upgrade_brokers(v2.brokers),
                topics: v2.topics,
                topic_names: v2.topic_names,
                partitions: v2.partitions,
                acls: v2.acls,
                cluster_configs: OrdMap::new(),
                transaction: None,
                access_version: 0,
                scram: OrdMap::new(),
            }
        } else if bytes.starts_with(&3u16.to_le_bytes()) {
            let v3: ImageV3 = decode_versioned(bytes)?;
            Self {
                offset: v3.offset,
                brokers: v3.brokers,
                topics: v3.topics,
                topic_names: v3.topic_names,
                partitions: v3.partitions,
                acls: v3.acls,
                cluster_configs: OrdMap::new(),
                transaction: None,
                access_version: 0,
                scram: OrdMap::new(),
            }
        } else if bytes.starts_with(&4u16.to_le_bytes()) {
            let v4: ImageV4 = decode_versioned(bytes)?;
            Self {
                offset: v4.offset,
                brokers: v4.brokers,
                topics: v4.topics,
                topic_names: v4.topic_names,
                partitions: v4.partitions,
                acls: v4.acls,
                cluster_configs: v4.cluster_configs,
                transaction: None,
                access_version: 0,
                scram: OrdMap::new(),
            }
        } else {
            decode_versioned(bytes)?
        };
        // Which changes the snapshot holds is not known one by one: a
        // reader of it refreshes once.
        image.access_version = image.offset;
        image
            .validate()
            .map_err(|e| DecodeError::Corrupt(e.to_string()))?;
        Ok(image)
    }

    /// Hex SHA-256 of the canonical encoding: equal on every node that
    /// applied the same records.
    ///
    /// The encoding is streamed into the hasher through a small buffer
    /// rather than built first: a large image's encoding is tens of MB.
    pub fn hash(&self) -> String {
        let mut hasher = Sha256::new();
        let mut out = std::io::BufWriter::with_capacity(64 << 10, &mut hasher);
        let written = self
            .encode_into(&mut out)
            .map_err(|e| e.to_string())
            .and_then(|_| out.flush().map_err(|e| e.to_string()));
        drop(out);
        if let Err(e) = written {
            // Hashing writes to memory and the image is plain data.
            unreachable!("hashing the image's encoding failed: {e}");
        }
        hex::encode(hasher.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{MetadataRecord, RegisterBrokerRecord};

    #[test]
    fn hash_is_the_sha256_of_the_encoding() {
        let mut image = MetadataImage::new();
        image
            .replay(
                &MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                    broker: BrokerId(1),
                    incarnation: IncarnationId(9),
                    address: "127.0.0.1:9092".into(),
                    rack: None,
                    log_dirs: vec![],
                }),
                1,
            )
            .unwrap();
        image.advance_offset(1);
        assert_eq!(image.hash(), hex::encode(Sha256::digest(image.encode())));
    }
}
