//! The replicated metadata image and its strict, deterministic replay.
//!
//! Every controller holds one `MetadataImage` and applies committed record
//! batches to it in log order. Replay never consults the clock, randomness,
//! the network or the local node id, so the same records give the same image
//! (and the same [`MetadataImage::hash`]) everywhere. The maps are persistent
//! (`imbl`), so cloning an image is O(1): the active controller decides
//! against a working copy that shares structure with the committed one.
//!
//! The image is kept in slices that mirror [`crate::decide`]: each module
//! below holds the replay of its records and the queries over them, and
//! this one holds the struct, the one dispatch over the record enum, the
//! transactions and the invariants.

use std::sync::Arc;

use imbl::OrdMap;
use serde::{Deserialize, Serialize};

use crate::acl::AclBinding;
use crate::error::{ReplayError, ReplayErrorKind};
use crate::ids::{BrokerId, TopicId, TopicPartition};
use crate::records::{MetadataRecord, RecordBatch};
use crate::scram::{ScramCredential, ScramMechanism};
use crate::state::PartitionState;

mod acls;
mod brokers;
mod configs;
mod deletion;
mod encoding;
mod partition_table;
mod partitions;
mod scram;
mod sorted_map;
mod topics;

use partition_table::PartitionTable;

pub use crate::topic_config::ConfigSource;
pub use brokers::BrokerRegistration;
pub use partitions::PartitionImage;
pub use topics::TopicImage;

/// An invariant that does not hold (a bug, found by `validate`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid image: {0}")]
pub struct ValidationError(pub String);

/// The whole replicated cluster metadata.
///
/// Serialized by imbl (a map: length, then entries in key order); read back
/// through [`sorted_map`], never through imbl's own `Deserialize`.
///
/// Equality is that of the replicated state: it leaves out
/// `access_version`, which depends on where a node started replaying.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MetadataImage {
    /// Log index of the last applied entry (0 = nothing applied).
    offset: u64,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    brokers: OrdMap<BrokerId, BrokerRegistration>,
    #[serde(deserialize_with = "sorted_map::deserialize")]
    /// Behind an `Arc`: copying a shared map node (copy-on-write after every
    /// clone of the image) then copies pointers, not each topic's configs
    /// and deletion state; only the topic being changed is copied.
    topics: OrdMap<TopicId, Arc<TopicImage>>,
    /// Name -> id for every topic, including those being deleted.
    #[serde(deserialize_with = "sorted_map::deserialize")]
    topic_names: OrdMap<String, TopicId>,
    /// Every topic's partitions, stored densely (see [`PartitionTable`]);
    /// encoded as the ordered map from partition to its state.
    partitions: PartitionTable,
    /// Every ACL binding in force (a set: the value is empty).
    #[serde(deserialize_with = "sorted_map::deserialize")]
    acls: OrdMap<AclBinding, ()>,
    /// Cluster-wide defaults of topic configs (`ClusterConfig` records):
    /// what a topic without its own value for a key takes. After the
    /// fields of version 3, so an image without any is encoded in version
    /// 3's shape.
    #[serde(deserialize_with = "sorted_map::deserialize")]
    cluster_configs: OrdMap<String, String>,
    /// The records of a transaction whose end marker has not been replayed
    /// yet (KIP-868). Never part of an encoding: a snapshot is cut only
    /// between transactions (`validate` refuses an open one), and the hash
    /// is the same on every node at the same index anyway.
    #[serde(skip)]
    transaction: Option<OpenTransaction>,
    /// The log index of the last record applied that changed the ACLs or
    /// the SCRAM credentials (see [`MetadataImage::access_version`]).
    /// Never encoded nor hashed, and left out of equality: a node that
    /// loaded a snapshot has the snapshot's offset here, one that replayed
    /// the whole log the index of the change itself.
    #[serde(skip)]
    access_version: u64,
    /// Every user's SCRAM credential, per mechanism (`UserScramCredential`
    /// records); the key's mechanism is the credential's. The last field
    /// encoded, so an image without credentials is encoded in version 3's
    /// or 4's shape.
    #[serde(deserialize_with = "sorted_map::deserialize")]
    scram: OrdMap<(String, ScramMechanism), ScramCredential>,
}

impl PartialEq for MetadataImage {
    fn eq(&self, other: &Self) -> bool {
        // Destructured, so a new field must be placed on one side or the
        // other of equality.
        let Self {
            offset,
            brokers,
            topics,
            topic_names,
            partitions,
            acls,
            cluster_configs,
            transaction,
            access_version: _,
            scram,
        } = self;
        *offset == other.offset
            && *brokers == other.brokers
            && *topics == other.topics
            && *topic_names == other.topic_names
            && *partitions == other.partitions
            && *acls == other.acls
            && *cluster_configs == other.cluster_configs
            && *transaction == other.transaction
            && *scram == other.scram
    }
}

impl Eq for MetadataImage {}

/// A transaction whose records replay holds back.
#[derive(Clone, Debug, PartialEq, Eq)]
struct OpenTransaction {
    /// Log index of the entry holding the begin marker.
    begun_at: u64,
    /// Held records with the index of the entry each came in (a broker's
    /// epoch is the index of its registration's own entry). Persistent, so
    /// cloning an image mid-transaction copies no record.
    records: imbl::Vector<(MetadataRecord, u64)>,
}

/// A replay error at log index `offset`.
fn err(offset: u64, kind: ReplayErrorKind) -> ReplayError {
    ReplayError { offset, kind }
}

impl MetadataImage {
    /// An empty image: nothing applied.
    pub fn new() -> Self {
        Self::default()
    }

    /// Log index of the last applied entry.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The log index of the last record that changed the ACLs or the SCRAM
    /// credentials (`AclAdded`, `AclRemoved`, `UserScramCredential`,
    /// `UserScramCredentialRemoved`); 0 when none was replayed. Brokers use
    /// it to know when to re-read the ACLs and credentials: a reader that
    /// saw a smaller value has stale ones.
    ///
    /// Not part of the encoding nor of the hash. After
    /// [`decode`](Self::decode) it is the snapshot's offset (the changes it
    /// holds are not known one by one), so a reader of a freshly loaded
    /// snapshot refreshes once, perhaps needlessly, never too rarely.
    pub fn access_version(&self) -> u64 {
        self.access_version
    }

    /// The index of the entry that began the open transaction, if one is
    /// open: its records have not taken effect yet.
    pub fn open_transaction(&self) -> Option<u64> {
        self.transaction.as_ref().map(|t| t.begun_at)
    }

    /// Records held by the open transaction.
    pub fn held_records(&self) -> usize {
        self.transaction.as_ref().map_or(0, |t| t.records.len())
    }

    // ---- replay ---------------------------------------------------------

    /// Applies one committed entry. Every record in it shares `offset`.
    pub fn replay_batch(&mut self, batch: &RecordBatch, offset: u64) -> Result<(), ReplayError> {
        for record in batch.records.iter() {
            self.replay(record, offset)?;
        }
        self.offset = self.offset.max(offset);
        Ok(())
    }

    /// Applies `records` as one entry at the log index after
    /// [`offset`](Self::offset) and returns that index: how benchmarks and
    /// tests build an image entry by entry from empty.
    pub fn replay_next(&mut self, records: Vec<MetadataRecord>) -> Result<u64, ReplayError> {
        let offset = self.offset + 1;
        self.replay_batch(&RecordBatch::new(records), offset)?;
        Ok(offset)
    }

    /// Marks `offset` applied for an entry that carries no records
    /// (a Raft blank or membership entry).
    pub fn advance_offset(&mut self, offset: u64) {
        self.offset = self.offset.max(offset);
    }

    /// Applies one record. A record that contradicts the image is an error
    /// naming the log index; the caller must stop.
    ///
    /// Inside a transaction records are held back, and take effect (each at
    /// the index it came with) when the end marker is replayed; an abort
    /// drops them. A held record that does not apply fails the end marker.
    pub fn replay(&mut self, record: &MetadataRecord, offset: u64) -> Result<(), ReplayError> {
        match (&mut self.transaction, record) {
            (Some(t), MetadataRecord::BeginTransaction { .. }) => {
                Err(err(offset, ReplayErrorKind::NestedTransaction(t.begun_at)))
            }
            (Some(_), MetadataRecord::EndTransaction) => {
                let held = self.transaction.take().map(|t| t.records);
                for (r, at) in held.into_iter().flatten() {
                    self.apply(&r, at)?;
                }
                Ok(())
            }
            (Some(_), MetadataRecord::AbortTransaction) => {
                self.transaction = None;
                Ok(())
            }
            (Some(t), r) => {
                t.records.push_back((r.clone(), offset));
                Ok(())
            }
            (None, MetadataRecord::BeginTransaction { .. }) => {
                self.transaction = Some(OpenTransaction {
                    begun_at: offset,
                    records: imbl::Vector::new(),
                });
                Ok(())
            }
            (None, MetadataRecord::EndTransaction | MetadataRecord::AbortTransaction) => {
                Err(err(offset, ReplayErrorKind::NoOpenTransaction))
            }
            (None, r) => self.apply(r, offset),
        }
    }

    /// Applies one record that takes effect now (no transaction is open,
    /// or its end marker was replayed): one arm per record type, each
    /// handing it to the slice of the image it changes.
    fn apply(&mut self, record: &MetadataRecord, offset: u64) -> Result<(), ReplayError> {
        use MetadataRecord as R;
        match record {
            R::RegisterBroker(r) => self.replay_register(r, offset),
            R::FenceBroker { broker, epoch } => {
                self.replay_broker_change(*broker, *epoch, offset, BrokerRegistration::fence)
            }
            R::UnfenceBroker { broker, epoch } => {
                self.replay_broker_change(*broker, *epoch, offset, BrokerRegistration::unfence)
            }
            R::BrokerShuttingDown { broker, epoch } => self.replay_broker_change(
                *broker,
                *epoch,
                offset,
                BrokerRegistration::begin_shutdown,
            ),
            R::UnregisterBroker { broker, epoch } => {
                self.replay_unregister_broker(*broker, *epoch, offset)
            }
            R::LogDirsOffline {
                broker,
                epoch,
                dirs,
            } => self.replay_broker_change(*broker, *epoch, offset, |b| b.take_dirs_offline(dirs)),
            R::BrokerKafkaListener { broker, address } => {
                self.replay_kafka_listener(*broker, address, offset)
            }
            R::Topic(r) => self.replay_topic(r, offset),
            R::Partition(r) => self.replay_partition(r, offset),
            R::PartitionChange(r) => self.replay_partition_change(r, offset),
            R::TopicConfig {
                topic_id,
                key,
                value,
            } => self.replay_topic_config(*topic_id, key, value.as_deref(), offset),
            R::ClusterConfig { key, value } => {
                self.replay_cluster_config(key, value.as_deref());
                Ok(())
            }
            R::MarkTopicForDeletion { topic_id } => {
                self.replay_mark_for_deletion(*topic_id, offset)
            }
            R::ReplicaDeletionState {
                topic_id,
                replicas,
                state,
            } => self.replay_replica_deletion_state(*topic_id, replicas, *state, offset),
            R::RemoveTopic { topic_id } => self.replay_remove_topic(*topic_id, offset),
            R::AclAdded(b) => self.replay_acl_added(b, offset),
            R::AclRemoved(b) => self.replay_acl_removed(b, offset),
            R::UserScramCredential { user, credential } => {
                self.replay_scram_credential(user, credential, offset)
            }
            R::UserScramCredentialRemoved { user, mechanism } => {
                self.replay_scram_credential_removed(user, *mechanism, offset)
            }
            // Markers are handled by `replay` and never held.
            R::BeginTransaction { .. } | R::EndTransaction | R::AbortTransaction => {
                Err(err(offset, ReplayErrorKind::NoOpenTransaction))
            }
        }
    }

    // ---- invariants -----------------------------------------------------

    /// Checks the invariants of DESIGN §3–4 over the whole image.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let fail = |s: String| Err(ValidationError(s));
        if let Some(at) = self.open_transaction() {
            return fail(format!(
                "a transaction begun at index {at} is open (a snapshot is cut only between transactions)"
            ));
        }
        for (name, id) in self.topic_names.iter() {
            match self.topics.get(id) {
                Some(t) if &t.name == name => {}
                _ => return fail(format!("topic name index {name:?} -> {id} is stale")),
            }
        }
        if self.topic_names.len() != self.topics.len() {
            return fail("topic name index size differs from topic count".into());
        }
        // Topics and partitions are both in key order: walk them side by
        // side (one pass, no lookups), expecting each topic's 0..count.
        let mut partitions = self.partitions.iter().peekable();
        for t in self.topics.values() {
            for i in 0..t.partition_count {
                let tp = TopicPartition::new(t.id, i);
                let p = match partitions.next_if(|(k, _)| **k <= tp) {
                    Some((k, p)) if *k == tp => p,
                    Some(_) => return fail("partitions exist outside any topic's range".into()),
                    None => return fail(format!("topic {} misses partition {i}", t.name)),
                };
                if let Err(e) =
                    Self::check_shape(tp, &p.replicas, &p.isr, &p.adding, &p.removing, 0)
                {
                    return fail(e.kind.to_string());
                }
                if let Some(l) = p.leader {
                    if !p.isr.contains(&l) {
                        return fail(format!("{tp}: leader {l} not in ISR"));
                    }
                }
                let state_ok = match p.state {
                    PartitionState::Online => p.leader.is_some(),
                    PartitionState::New | PartitionState::Offline => p.leader.is_none(),
                    PartitionState::NonExistent => false,
                };
                if !state_ok {
                    return fail(format!(
                        "{tp}: state {:?} with leader {:?}",
                        p.state, p.leader
                    ));
                }
                if let Some(del) = &t.deletion {
                    for b in &p.replicas {
                        if !del.contains_key(&(tp.partition, *b)) {
                            return fail(format!("{tp}: replica {b} missing from deletion state"));
                        }
                    }
                }
            }
        }
        if partitions.next().is_some() {
            return fail("partitions exist outside any topic's range".into());
        }
        for (id, b) in self.brokers.iter() {
            if *id != b.id {
                return fail(format!("broker key {id} holds registration of {}", b.id));
            }
        }
        for ((user, mechanism), c) in self.scram.iter() {
            if c.mechanism != *mechanism {
                return fail(format!(
                    "the {} credential of user {user:?} is keyed as {}",
                    c.mechanism.name(),
                    mechanism.name()
                ));
            }
            if let Err(e) = c.validate() {
                return fail(format!("the credential of user {user:?}: {e}"));
            }
        }
        Ok(())
    }
}
