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

/// The fields every format version starts with, the registrations in
/// shape `B`: version 1's whole image (before ACLs), read only to decode
/// an old snapshot. bincode writes a struct as the sequence of its fields,
/// so a later version's shape nests the earlier one and adds its own.
#[derive(Deserialize)]
#[serde(bound(deserialize = "B: Deserialize<'de> + Clone"))]
struct LegacyImage<B> {
    offset: u64,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    brokers: OrdMap<BrokerId, B>,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    topics: OrdMap<TopicId, Arc<TopicImage>>,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    topic_names: OrdMap<String, TopicId>,
    partitions: PartitionTable,
}

/// The image as format versions 2 (registrations without a Kafka
/// listener) and 3 (no cluster config defaults) wrote it, read only to
/// decode an old snapshot.
#[derive(Deserialize)]
#[serde(bound(deserialize = "B: Deserialize<'de> + Clone"))]
struct LegacyImageWithAcls<B> {
    base: LegacyImage<B>,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    acls: OrdMap<AclBinding, ()>,
}

/// The image as format version 4 wrote it (no SCRAM credentials), read
/// only to decode an old snapshot.
#[derive(Deserialize)]
struct ImageV4 {
    v3: LegacyImageWithAcls<BrokerRegistration>,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    cluster_configs: OrdMap<String, String>,
}

impl<B> LegacyImage<B> {
    /// Today's image of this legacy one: its registrations through
    /// `upgrade`, with `acls` and `cluster_configs`, and no credentials.
    fn into_image(
        self,
        upgrade: impl FnOnce(OrdMap<BrokerId, B>) -> OrdMap<BrokerId, BrokerRegistration>,
        acls: OrdMap<AclBinding, ()>,
        cluster_configs: OrdMap<String, String>,
    ) -> MetadataImage {
        MetadataImage {
            offset: self.offset,
            brokers: upgrade(self.brokers),
            topics: self.topics,
            topic_names: self.topic_names,
            partitions: self.partitions,
            acls,
            cluster_configs,
            transaction: None,
            access_version: 0,
            scram: OrdMap::new(),
        }
    }
}

/// An image without cluster defaults and without SCRAM credentials in
/// version 3's shape, as it is written, so older releases can read it.
#[derive(Serialize)]
struct ImageV3Ref<'a> {
    offset: u64,
    brokers: &'a OrdMap<BrokerId, BrokerRegistration>,
    topics: &'a OrdMap<TopicId, Arc<TopicImage>>,
    topic_names: &'a OrdMap<String, TopicId>,
    partitions: &'a PartitionTable,
    acls: &'a OrdMap<AclBinding, ()>,
}

/// An image with cluster defaults but without SCRAM credentials in
/// [`ImageV4`]'s shape, as it is written, so the previous release can
/// read it.
#[derive(Serialize)]
struct ImageV4Ref<'a> {
    v3: ImageV3Ref<'a>,
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
        let v3 = ImageV3Ref {
            offset: self.offset,
            brokers: &self.brokers,
            topics: &self.topics,
            topic_names: &self.topic_names,
            partitions: &self.partitions,
            acls: &self.acls,
        };
        if !self.cluster_configs.is_empty() {
            let v4 = ImageV4Ref {
                v3,
                cluster_configs: &self.cluster_configs,
            };
            return encode_as_into(4, &v4, out);
        }
        encode_as_into(crate::records::BASE_RECORD_FORMAT_VERSION, &v3, out)
    }

    /// Decodes an image written by [`encode`](Self::encode) and validates
    /// it. Its [`access_version`](Self::access_version) is its offset.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut image: Self = if bytes.starts_with(&1u16.to_le_bytes()) {
            let v1: LegacyImage<BrokerRegistrationV2> = decode_versioned(bytes)?;
            v1.into_image(upgrade_brokers, OrdMap::new(), OrdMap::new())
        } else if bytes.starts_with(&2u16.to_le_bytes()) {
            let v2: LegacyImageWithAcls<BrokerRegistrationV2> = decode_versioned(bytes)?;
            v2.base.into_image(upgrade_brokers, v2.acls, OrdMap::new())
        } else if bytes.starts_with(&3u16.to_le_bytes()) {
            let v3: LegacyImageWithAcls<BrokerRegistration> = decode_versioned(bytes)?;
            v3.base.into_image(|b| b, v3.acls, OrdMap::new())
        } else if bytes.starts_with(&4u16.to_le_bytes()) {
            let v4: ImageV4 = decode_versioned(bytes)?;
            v4.v3.base.into_image(|b| b, v4.v3.acls, v4.cluster_configs)
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
