//! Metadata records: the only way metadata changes. A [`RecordBatch`] is one
//! Raft entry. Records are diffs; epochs and states are derived on replay.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::DecodeError;
use crate::ids::{BrokerEpoch, BrokerId, IncarnationId, PartitionId, TopicId};
use crate::scram::{ScramCredential, ScramMechanism};
use crate::state::ReplicaState;

/// Format version written in front of every encoded batch and snapshot.
/// Bump it when a record changes shape, and keep decoding older versions.
///
/// 2: the image carries ACL bindings. Records only gained variants at the
/// end of the enum, so version 1 batches decode unchanged; a version 1
/// image is read through its own legacy shape.
///
/// 3: a broker registration may name a Kafka listener (the
/// `BrokerKafkaListener` record, in the image `kafka_address`). Again only
/// a variant at the end of the enum; version 1 and 2 images are read
/// through legacy shapes whose registrations have no listener.
///
/// 4: cluster-wide defaults of topic configs (the `ClusterConfig` record,
/// in the image `cluster_configs`). A batch or image that carries none is
/// still written as version 3 (see [`MetadataRecord::format_version`]), so
/// a controller of the previous release keeps reading the log of an
/// upgraded one until a cluster default is actually set.
///
/// 5: users' SCRAM credentials (the `UserScramCredential` and
/// `UserScramCredentialRemoved` records, in the image `scram`; KIP-554's
/// `UserScramCredentialRecord`). Again only variants at the end of the
/// enum, and again what carries none is written as before: a batch without
/// these records keeps version 3 (or 4 with a cluster default), an image
/// without credentials keeps version 3's or 4's shape, so the previous
/// release reads an upgraded log until a credential is actually set.
pub const RECORD_FORMAT_VERSION: u16 = 5;
/// The version written for what carries nothing newer (see above).
pub const BASE_RECORD_FORMAT_VERSION: u16 = 3;
/// The oldest version still decoded.
pub const OLDEST_RECORD_FORMAT_VERSION: u16 = 1;

/// One metadata change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataRecord {
    /// A broker (re)registers; it starts fenced. Its epoch is the log index
    /// of the entry carrying this record.
    RegisterBroker(RegisterBrokerRecord),
    /// The broker may not lead or be in an ISR until unfenced.
    FenceBroker {
        broker: BrokerId,
        epoch: BrokerEpoch,
    },
    /// The broker caught up and may lead again.
    UnfenceBroker {
        broker: BrokerId,
        epoch: BrokerEpoch,
    },
    /// The broker asked for a controlled shutdown.
    BrokerShuttingDown {
        broker: BrokerId,
        epoch: BrokerEpoch,
    },
    /// An operator removed a fenced broker for good.
    UnregisterBroker {
        broker: BrokerId,
        epoch: BrokerEpoch,
    },
    /// These log dirs of the broker failed (replicas in them go offline).
    LogDirsOffline {
        broker: BrokerId,
        epoch: BrokerEpoch,
        dirs: Vec<String>,
    },
    /// A new topic; its partitions follow as `Partition` records.
    Topic(TopicRecord),
    /// A new partition with its initial assignment and leader.
    Partition(PartitionRecord),
    /// A change to an existing partition (only what changed).
    PartitionChange(PartitionChangeRecord),
    /// Set (`Some`) or remove (`None`) one topic config key.
    TopicConfig {
        topic_id: TopicId,
        key: String,
        value: Option<String>,
    },
    /// Deletion of the topic starts: it is hidden from new work and its
    /// replicas enter the deletion state machine at `Offline`.
    MarkTopicForDeletion { topic_id: TopicId },
    /// Replicas of a topic being deleted move to `state`.
    ReplicaDeletionState {
        topic_id: TopicId,
        replicas: Vec<(PartitionId, BrokerId)>,
        state: ReplicaState,
    },
    /// Every replica reported the delete: the topic is gone.
    RemoveTopic { topic_id: TopicId },
    /// The records that follow, up to the matching [`EndTransaction`],
    /// are one decision too large for one entry (KIP-868's
    /// `BeginTransactionRecord`): replay holds them back and applies them
    /// all at the end marker, or drops them all at an abort.
    ///
    /// [`EndTransaction`]: MetadataRecord::EndTransaction
    BeginTransaction {
        /// What the decision was (for logs and `keel log dump`).
        name: String,
    },
    /// The open transaction is complete: its records take effect.
    EndTransaction,
    /// The open transaction will never complete (its leader lost office
    /// before the end marker): its records are dropped. Appended by the
    /// next active controller before anything else.
    AbortTransaction,
    /// An ACL binding takes effect (KRaft's `AccessControlEntryRecord`).
    AclAdded(crate::acl::AclBinding),
    /// An ACL binding is removed.
    AclRemoved(crate::acl::AclBinding),
    /// The Kafka listener of the registration made in this same entry: it
    /// follows that registration's `RegisterBroker` record (Kafka keeps
    /// endpoints in `RegisterBrokerRecord`; here they came later, as a
    /// record of their own, so older records keep their shape). A
    /// registration without one has no Kafka listener.
    BrokerKafkaListener {
        broker: BrokerId,
        /// `host:port` where Kafka clients reach the broker.
        address: String,
    },
    /// Set (`Some`) or remove (`None`) the cluster-wide default of one
    /// topic config (Kafka's dynamic default broker config, set with
    /// `--entity-default`): topics without their own value take it.
    ClusterConfig { key: String, value: Option<String> },
    /// Sets `user`'s credential for `credential.mechanism`, adding it or
    /// replacing the one it had (Kafka's `UserScramCredentialRecord`):
    /// salt, iterations and the derived keys, never the password.
    UserScramCredential {
        user: String,
        credential: ScramCredential,
    },
    /// Removes `user`'s credential for `mechanism` (Kafka's
    /// `RemoveUserScramCredentialRecord`); it must exist.
    UserScramCredentialRemoved {
        user: String,
        mechanism: ScramMechanism,
    },
}

impl MetadataRecord {
    /// The oldest format version that can carry this record.
    pub fn format_version(&self) -> u16 {
        match self {
            Self::ClusterConfig { .. } => 4,
            Self::UserScramCredential { .. } | Self::UserScramCredentialRemoved { .. } => 5,
            _ => BASE_RECORD_FORMAT_VERSION,
        }
    }

    /// One of the transaction markers (they carry no metadata change).
    pub fn is_transaction_marker(&self) -> bool {
        matches!(
            self,
            Self::BeginTransaction { .. } | Self::EndTransaction | Self::AbortTransaction
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterBrokerRecord {
    pub broker: BrokerId,
    pub incarnation: IncarnationId,
    /// `host:port` of the broker's gRPC endpoint.
    pub address: String,
    pub rack: Option<String>,
    pub log_dirs: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    pub topic_id: TopicId,
    pub name: String,
    pub configs: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    pub topic_id: TopicId,
    pub partition: PartitionId,
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    /// `None` when no replica could lead at creation.
    pub leader: Option<BrokerId>,
}

/// How a change treats the leader.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaderChange {
    Unchanged,
    /// The partition loses its leader (goes offline).
    NoLeader,
    /// This broker leads from now on.
    To(BrokerId),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionChangeRecord {
    pub topic_id: TopicId,
    pub partition: PartitionId,
    pub leader: LeaderChange,
    /// `None`: ISR unchanged.
    pub isr: Option<Vec<BrokerId>>,
    /// `None`: replica list unchanged.
    pub replicas: Option<Vec<BrokerId>>,
    /// Replicas being added by a reassignment (`Some(vec![])` clears).
    pub adding: Option<Vec<BrokerId>>,
    /// Replicas being removed by a reassignment (`Some(vec![])` clears).
    pub removing: Option<Vec<BrokerId>>,
    /// The new leader was chosen from outside the ISR.
    pub unclean: bool,
}

impl PartitionChangeRecord {
    /// A change that touches nothing yet; fill in the fields that change.
    pub fn new(topic_id: TopicId, partition: PartitionId) -> Self {
        Self {
            topic_id,
            partition,
            leader: LeaderChange::Unchanged,
            isr: None,
            replicas: None,
            adding: None,
            removing: None,
            unclean: false,
        }
    }

    /// True when the record would change nothing (and must not be written).
    pub fn is_noop(&self) -> bool {
        self.leader == LeaderChange::Unchanged
            && self.isr.is_none()
            && self.replicas.is_none()
            && self.adding.is_none()
            && self.removing.is_none()
    }
}

/// The records of one Raft entry, applied in order. Shared, so cloning an
/// entry (the log store's cache hands the same entry to replication and
/// apply) copies no record; encoded exactly like a plain `Vec`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordBatch {
    pub records: std::sync::Arc<Vec<MetadataRecord>>,
}

impl RecordBatch {
    pub fn new(records: Vec<MetadataRecord>) -> Self {
        Self {
            records: std::sync::Arc::new(records),
        }
    }

    /// `version (u16 LE) ++ bincode(batch)`, where the version is the
    /// oldest that carries every record of the batch.
    pub fn encode(&self) -> Vec<u8> {
        encode_plain_as(self.format_version(), self)
    }

    /// The oldest format version that can carry every record.
    pub fn format_version(&self) -> u16 {
        self.records
            .iter()
            .map(MetadataRecord::format_version)
            .max()
            .unwrap_or(BASE_RECORD_FORMAT_VERSION)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_versioned(bytes)
    }
}

/// A value serde cannot encode: a sequence or map of unknown length, a
/// `collect_str`, or an error raised by the value's own `Serialize`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode value: {0}")]
pub struct EncodeError(pub String);

/// Encodes any serde value behind the format version.
///
/// Fallible because `T` is arbitrary: bincode refuses sequences and maps of
/// unknown length, and a hand-written `Serialize` may raise its own error.
/// Writing into the `Vec` itself never fails.
pub fn encode_versioned<T: Serialize>(value: &T) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    encode_versioned_into(value, &mut out)?;
    Ok(out)
}

/// [`encode_versioned`] into any writer (e.g. straight into a hasher).
pub fn encode_versioned_into<T: Serialize, W: std::io::Write>(
    value: &T,
    out: &mut W,
) -> Result<(), EncodeError> {
    encode_as_into(RECORD_FORMAT_VERSION, value, out)
}

/// [`encode_versioned_into`] behind an older `version`, for a value whose
/// shape that version has.
pub(crate) fn encode_as_into<T: Serialize, W: std::io::Write>(
    version: u16,
    value: &T,
    out: &mut W,
) -> Result<(), EncodeError> {
    out.write_all(&version.to_le_bytes())
        .map_err(|e| EncodeError(e.to_string()))?;
    bincode::serde::encode_into_std_write(value, out, bincode::config::standard())
        .map_err(|e| EncodeError(e.to_string()))?;
    Ok(())
}

/// [`encode_versioned`] for this crate's own record and image types, whose
/// `encode` keeps returning plain bytes (`MetadataImage::encode` and `hash`
/// are called from other crates).
///
/// It cannot fail for them: every field is plain derived data — integers,
/// strings, options, enums, `Vec`s and ordered maps, all of known length —
/// so none of the three errors of [`encode_versioned`] can arise, and the
/// `Vec` writer never fails. An error here would be a bug in a `Serialize`
/// impl of this crate, which is fatal like any other broken invariant.
///
/// Written behind `version`: the oldest that has the value's shape.
pub(crate) fn encode_plain_as<T: Serialize>(version: u16, value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    match encode_as_into(version, value, &mut out) {
        Ok(()) => out,
        Err(e) => unreachable!("encoding this crate's plain data failed: {e}"),
    }
}

/// Decodes a value written by [`encode_versioned`]; never panics on bad input.
pub fn decode_versioned<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    if bytes.len() < 2 {
        return Err(DecodeError::Empty);
    }
    let version = u16::from_le_bytes([bytes[0], bytes[1]]);
    if !(OLDEST_RECORD_FORMAT_VERSION..=RECORD_FORMAT_VERSION).contains(&version) {
        return Err(DecodeError::UnsupportedVersion(
            version,
            RECORD_FORMAT_VERSION,
        ));
    }
    let config = bincode::config::standard().with_limit::<{ 1 << 30 }>();
    let (value, used) = bincode::serde::decode_from_slice(&bytes[2..], config)
        .map_err(|e| DecodeError::Corrupt(e.to_string()))?;
    let rest = bytes.len() - 2 - used;
    if rest != 0 {
        return Err(DecodeError::TrailingBytes(rest));
    }
    Ok(value)
}
