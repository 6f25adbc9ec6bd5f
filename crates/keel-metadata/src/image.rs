//! The replicated metadata image and its strict, deterministic replay.
//!
//! Every controller holds one `MetadataImage` and applies committed record
//! batches to it in log order. Replay never consults the clock, randomness,
//! the network or the local node id, so the same records give the same image
//! (and the same [`MetadataImage::hash`]) everywhere. The maps are persistent
//! (`imbl`), so cloning an image is O(1): the active controller decides
//! against a working copy that shares structure with the committed one.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use imbl::OrdMap;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::acl::AclBinding;
use crate::error::{DecodeError, ReplayError, ReplayErrorKind};
use crate::ids::{
    BrokerEpoch, BrokerId, IncarnationId, LeaderEpoch, PartitionEpoch, PartitionId, TopicId,
    TopicPartition,
};
use crate::records::{
    decode_versioned, encode_as_into, encode_versioned_into, LeaderChange, MetadataRecord,
    PartitionChangeRecord, PartitionRecord, RecordBatch, RegisterBrokerRecord, TopicRecord,
};
use crate::scram::{ScramCredential, ScramMechanism};
use crate::state::{PartitionState, ReplicaState, TransitionError};

mod partition_table;

use partition_table::PartitionTable;

/// A registered broker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub id: BrokerId,
    /// Log index of the registration record.
    pub epoch: BrokerEpoch,
    pub incarnation: IncarnationId,
    pub address: String,
    pub rack: Option<String>,
    pub log_dirs: Vec<String>,
    /// Failed log dirs; replicas placed in them are offline.
    pub offline_log_dirs: Vec<String>,
    /// A fenced broker may not lead or join an ISR.
    pub fenced: bool,
    /// In controlled shutdown: may not become leader or join an ISR.
    pub shutting_down: bool,
    /// `host:port` of its Kafka listener; `None` when it registered none.
    pub kafka_address: Option<String>,
}

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

impl BrokerRegistration {
    /// Unfenced and not shutting down: may become a leader.
    pub fn can_lead(&self) -> bool {
        !self.fenced && !self.shutting_down
    }

    /// The log dir that holds `tp` on this broker: a deterministic spread of
    /// partitions over dirs, computed the same way by brokers and controllers.
    pub fn dir_of(&self, tp: &TopicPartition) -> Option<&str> {
        if self.log_dirs.is_empty() {
            return None;
        }
        let h = (tp.topic_id.0 as u64) ^ ((tp.topic_id.0 >> 64) as u64) ^ u64::from(tp.partition.0);
        let i = (h % self.log_dirs.len() as u64) as usize;
        Some(self.log_dirs[i].as_str())
    }

    /// The replica of `tp` here is usable: broker unfenced, its dir online.
    pub fn replica_online(&self, tp: &TopicPartition) -> bool {
        if self.fenced {
            return false;
        }
        match self.dir_of(tp) {
            Some(dir) => !self.offline_log_dirs.iter().any(|d| d == dir),
            None => true,
        }
    }
}

/// A topic's own metadata (its partitions live in the image's partition map).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicImage {
    pub id: TopicId,
    pub name: String,
    /// Persistent, with shared strings, so a change to one key copies one
    /// path of reference counts, not the map and its strings: the active
    /// controller applies thousands of config records a second, each to a
    /// topic shared with the committed image.
    pub configs: OrdMap<Arc<str>, Arc<str>>,
    /// Partitions `0..partition_count` exist.
    pub partition_count: u32,
    /// Present once marked for deletion: the deletion state of every replica.
    pub deletion: Option<BTreeMap<(PartitionId, BrokerId), ReplicaState>>,
}

impl TopicImage {
    pub fn marked_for_deletion(&self) -> bool {
        self.deletion.is_some()
    }
}

pub use crate::topic_config::ConfigSource;

/// One partition's replicated state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionImage {
    /// Assigned replicas, preferred leader first.
    pub replicas: Vec<BrokerId>,
    /// In-sync replicas; never empty, always a subset of `replicas`.
    pub isr: Vec<BrokerId>,
    pub leader: Option<BrokerId>,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: PartitionEpoch,
    /// Replicas a reassignment is adding (subset of `replicas`).
    pub adding: Vec<BrokerId>,
    /// Replicas a reassignment is removing (subset of `replicas`).
    pub removing: Vec<BrokerId>,
    pub state: PartitionState,
}

impl PartitionImage {
    pub fn reassigning(&self) -> bool {
        !self.adding.is_empty() || !self.removing.is_empty()
    }

    /// The replica set a reassignment aims for (replicas minus removing).
    pub fn target_replicas(&self) -> Vec<BrokerId> {
        self.replicas
            .iter()
            .copied()
            .filter(|b| !self.removing.contains(b))
            .collect()
    }

    /// The replica set before the reassignment (replicas minus adding).
    pub fn original_replicas(&self) -> Vec<BrokerId> {
        self.replicas
            .iter()
            .copied()
            .filter(|b| !self.adding.contains(b))
            .collect()
    }
}

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

/// Reads an `OrdMap` from untrusted bytes (a snapshot).
///
/// imbl's own `Deserialize` preallocates whatever length the input claims,
/// so a corrupt snapshot claiming 2^62 entries aborts the process on
/// allocation failure. Here entries are inserted one at a time as they are
/// read, so a false length just runs out of input and is a decode error.
/// Keys must arrive strictly increasing, as `encode` writes them: an
/// unsorted or repeated key is refused, so the only accepted encoding of an
/// image is its canonical one.
mod sorted_map {
    use std::fmt;
    use std::marker::PhantomData;

    use imbl::OrdMap;
    use serde::de::{Deserialize, Deserializer, Error, MapAccess, Visitor};

    pub(super) fn deserialize<'de, D, K, V>(de: D) -> Result<OrdMap<K, V>, D::Error>
    where
        D: Deserializer<'de>,
        K: Deserialize<'de> + Ord + Clone,
        V: Deserialize<'de> + Clone,
    {
        de.deserialize_map(SortedMapVisitor(PhantomData))
    }

    struct SortedMapVisitor<K, V>(PhantomData<fn() -> (K, V)>);

    impl<'de, K, V> Visitor<'de> for SortedMapVisitor<K, V>
    where
        K: Deserialize<'de> + Ord + Clone,
        V: Deserialize<'de> + Clone,
    {
        type Value = OrdMap<K, V>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map with strictly increasing keys")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Self::Value, A::Error> {
            // No `size_hint` preallocation: the hint is the untrusted length.
            let mut map = OrdMap::new();
            while let Some((k, v)) = entries.next_entry::<K, V>()? {
                if map.get_max().is_some_and(|(max, _)| *max >= k) {
                    return Err(A::Error::custom("map keys not strictly increasing"));
                }
                map.insert(k, v);
            }
            Ok(map)
        }
    }
}

fn err(offset: u64, kind: ReplayErrorKind) -> ReplayError {
    ReplayError { offset, kind }
}

fn has_duplicates(v: &[BrokerId]) -> bool {
    // Replica lists are as long as the replication factor: a pairwise scan
    // beats sorting a copy there, and allocates nothing.
    if v.len() <= 16 {
        return v.iter().enumerate().any(|(i, b)| v[i + 1..].contains(b));
    }
    let mut s: Vec<BrokerId> = v.to_vec();
    s.sort_unstable();
    s.windows(2).any(|w| w[0] == w[1])
}

impl MetadataImage {
    pub fn new() -> Self {
        Self::default()
    }

    // ---- reads ----------------------------------------------------------

    /// Log index of the last applied entry.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    pub fn broker(&self, id: BrokerId) -> Option<&BrokerRegistration> {
        self.brokers.get(&id)
    }

    pub fn brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values()
    }

    /// Registered, unfenced and not shutting down.
    pub fn can_lead(&self, id: BrokerId) -> bool {
        self.brokers.get(&id).is_some_and(|b| b.can_lead())
    }

    /// Registered and unfenced (a shutting-down broker is still live).
    pub fn is_unfenced(&self, id: BrokerId) -> bool {
        self.brokers.get(&id).is_some_and(|b| !b.fenced)
    }

    /// The replica of `tp` on `id` can serve: broker unfenced, dir online.
    pub fn replica_online(&self, tp: &TopicPartition, id: BrokerId) -> bool {
        self.brokers.get(&id).is_some_and(|b| b.replica_online(tp))
    }

    pub fn topic(&self, id: TopicId) -> Option<&TopicImage> {
        self.topics.get(&id).map(|t| &**t)
    }

    pub fn topic_by_name(&self, name: &str) -> Option<&TopicImage> {
        self.topic_names
            .get(name)
            .and_then(|id| self.topics.get(id))
            .map(|t| &**t)
    }

    pub fn topics(&self) -> impl Iterator<Item = &TopicImage> {
        self.topics.values().map(|t| &**t)
    }

    pub fn topic_count(&self) -> usize {
        self.topics.len()
    }

    /// The cluster-wide defaults of topic configs, by key.
    pub fn cluster_configs(&self) -> &OrdMap<String, String> {
        &self.cluster_configs
    }

    /// The value `topic` has for config `key` and where it comes from: its
    /// own, else the cluster default, else Kafka's default (`None` for a
    /// key neither set nor in the schema).
    pub fn topic_config<'a>(
        &'a self,
        topic: &'a TopicImage,
        key: &str,
    ) -> Option<(&'a str, ConfigSource)> {
        crate::topic_config::resolve(
            key,
            topic.configs.get(key).map(|v| &**v),
            self.cluster_configs.get(key).map(String::as_str),
        )
    }

    /// What a topic without its own value for `key` takes: the cluster
    /// default, else Kafka's default.
    pub fn default_config(&self, key: &str) -> Option<&str> {
        match self.cluster_configs.get(key) {
            Some(v) => Some(v),
            None => crate::topic_config::lookup(key).map(|d| d.default),
        }
    }

    /// Whether `topic` allows unclean leader election (its own value, else
    /// the cluster default, else false).
    pub fn unclean_leader_election(&self, topic: &TopicImage) -> bool {
        self.topic_config(topic, crate::UNCLEAN_LEADER_ELECTION)
            .is_some_and(|(v, _)| v.eq_ignore_ascii_case("true"))
    }

    /// `topic`'s `min.insync.replicas` (its own value, else the cluster
    /// default, else 1).
    pub fn min_insync_replicas(&self, topic: &TopicImage) -> usize {
        self.topic_config(topic, crate::MIN_INSYNC_REPLICAS)
            .and_then(|(v, _)| v.trim().parse().ok())
            .unwrap_or(1)
    }

    pub fn partition(&self, tp: &TopicPartition) -> Option<&PartitionImage> {
        self.partitions.get(tp)
    }

    pub fn partitions(&self) -> impl Iterator<Item = (&TopicPartition, &PartitionImage)> {
        self.partitions.iter()
    }

    pub fn partition_count(&self) -> usize {
        self.partitions.len()
    }

    /// The partitions of one topic, in index order.
    pub fn partitions_of(
        &self,
        topic: TopicId,
    ) -> impl Iterator<Item = (&TopicPartition, &PartitionImage)> {
        self.partitions.topic(topic)
    }

    /// The replica state of `broker`'s copy of `tp`, derived from the image.
    pub fn replica_state(&self, tp: &TopicPartition, broker: BrokerId) -> ReplicaState {
        let Some(p) = self.partitions.get(tp) else {
            return ReplicaState::NonExistent;
        };
        if !p.replicas.contains(&broker) {
            return ReplicaState::NonExistent;
        }
        if let Some(del) = self
            .topics
            .get(&tp.topic_id)
            .and_then(|t| t.deletion.as_ref())
        {
            return del
                .get(&(tp.partition, broker))
                .copied()
                .unwrap_or(ReplicaState::Offline);
        }
        if !self.replica_online(tp, broker) {
            ReplicaState::Offline
        } else if p.adding.contains(&broker) && !p.isr.contains(&broker) {
            ReplicaState::New
        } else {
            ReplicaState::Online
        }
    }

    // ---- replay ---------------------------------------------------------

    /// Every ACL binding in force, in order.
    pub fn acls(&self) -> impl Iterator<Item = &AclBinding> {
        self.acls.keys()
    }

    pub fn acl_count(&self) -> usize {
        self.acls.len()
    }

    pub fn has_acl(&self, b: &AclBinding) -> bool {
        self.acls.contains_key(b)
    }

    /// `user`'s credential for `mechanism`, if it has one.
    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<&ScramCredential> {
        // The key owns its name: a lookup by `&str` needs one.
        self.scram.get(&(user.to_string(), mechanism))
    }

    /// Every credential with its user and mechanism, in (user, mechanism)
    /// order.
    pub fn scram_users(&self) -> impl Iterator<Item = (&str, ScramMechanism, &ScramCredential)> {
        self.scram
            .iter()
            .map(|((user, mechanism), c)| (user.as_str(), *mechanism, c))
    }

    /// How many credentials are stored (users times their mechanisms).
    pub fn scram_count(&self) -> usize {
        self.scram.len()
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

    /// Applies one committed entry. Every record in it shares `offset`.
    pub fn replay_batch(&mut self, batch: &RecordBatch, offset: u64) -> Result<(), ReplayError> {
        for record in batch.records.iter() {
            self.replay(record, offset)?;
        }
        self.offset = self.offset.max(offset);
        Ok(())
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
            R::FenceBroker { broker, epoch }
            | R::UnfenceBroker { broker, epoch }
            | R::BrokerShuttingDown { broker, epoch }
            | R::UnregisterBroker { broker, epoch }
            | R::LogDirsOffline { broker, epoch, .. } => {
                self.replay_broker_change(record, *broker, *epoch, offset)
            }
            R::BrokerKafkaListener { broker, address } => {
                // Only the registration of this very entry: its epoch is
                // this entry's index.
                let b = self.broker_mut(*broker, BrokerEpoch(offset), offset)?;
                b.kafka_address = Some(address.clone());
                Ok(())
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
                match value {
                    Some(v) => self.cluster_configs.insert(key.clone(), v.clone()),
                    None => self.cluster_configs.remove(key.as_str()),
                };
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
            R::AclAdded(_)
            | R::AclRemoved(_)
            | R::UserScramCredential { .. }
            | R::UserScramCredentialRemoved { .. } => {
                self.replay_access(record, offset)?;
                self.access_version = offset;
                Ok(())
            }
            // Markers are handled by `replay` and never held.
            R::BeginTransaction { .. } | R::EndTransaction | R::AbortTransaction => {
                Err(err(offset, ReplayErrorKind::NoOpenTransaction))
            }
        }
    }

    /// A change of registered broker `broker` in `epoch`: fenced,
    /// unfenced, shutting down, unregistered (only once fenced) or with
    /// log dirs offline.
    fn replay_broker_change(
        &mut self,
        record: &MetadataRecord,
        broker: BrokerId,
        epoch: BrokerEpoch,
        offset: u64,
    ) -> Result<(), ReplayError> {
        let b = self.broker_mut(broker, epoch, offset)?;
        match record {
            MetadataRecord::FenceBroker { .. } => {
                b.fenced = true;
                // A fenced broker is gone; its shutdown (if any) is over.
                b.shutting_down = false;
            }
            MetadataRecord::UnfenceBroker { .. } => b.fenced = false,
            MetadataRecord::BrokerShuttingDown { .. } => b.shutting_down = true,
            MetadataRecord::UnregisterBroker { .. } => {
                if !b.fenced {
                    return Err(err(offset, ReplayErrorKind::BrokerNotFenced(broker)));
                }
                self.brokers.remove(&broker);
            }
            MetadataRecord::LogDirsOffline { dirs, .. } => {
                for d in dirs {
                    if !b.offline_log_dirs.contains(d) {
                        b.offline_log_dirs.push(d.clone());
                    }
                }
                b.offline_log_dirs.sort();
            }
            _ => {}
        }
        Ok(())
    }

    /// Topic `topic_id`'s config `key` set to `value`, or removed.
    fn replay_topic_config(
        &mut self,
        topic_id: TopicId,
        key: &str,
        value: Option<&str>,
        offset: u64,
    ) -> Result<(), ReplayError> {
        let t = Arc::make_mut(
            self.topics
                .get_mut(&topic_id)
                .ok_or_else(|| err(offset, ReplayErrorKind::UnknownTopic(topic_id)))?,
        );
        match value {
            Some(v) => t.configs.insert(Arc::from(key), Arc::from(v)),
            None => t.configs.remove(key),
        };
        Ok(())
    }

    /// An ACL or SCRAM credential added or removed (a credential checked
    /// before it is stored: an image never holds one a login could not
    /// use).
    fn replay_access(&mut self, record: &MetadataRecord, offset: u64) -> Result<(), ReplayError> {
        let refused = match record {
            MetadataRecord::AclAdded(b) => self
                .acls
                .insert(b.clone(), ())
                .map(|_| ReplayErrorKind::DuplicateAcl(b.to_string())),
            MetadataRecord::AclRemoved(b) => match self.acls.remove(b) {
                Some(()) => None,
                None => Some(ReplayErrorKind::UnknownAcl(b.to_string())),
            },
            MetadataRecord::UserScramCredential { user, credential } => {
                match credential.validate() {
                    Ok(()) => {
                        self.scram
                            .insert((user.clone(), credential.mechanism), credential.clone());
                        None
                    }
                    Err(e) => Some(ReplayErrorKind::InvalidScramCredential {
                        user: user.clone(),
                        reason: e.to_string(),
                    }),
                }
            }
            MetadataRecord::UserScramCredentialRemoved { user, mechanism } => {
                match self.scram.remove(&(user.clone(), *mechanism)) {
                    Some(_) => None,
                    None => Some(ReplayErrorKind::UnknownScramCredential {
                        user: user.clone(),
                        mechanism: mechanism.name(),
                    }),
                }
            }
            _ => None,
        };
        match refused {
            Some(kind) => Err(err(offset, kind)),
            None => Ok(()),
        }
    }

    fn broker_mut(
        &mut self,
        id: BrokerId,
        epoch: BrokerEpoch,
        offset: u64,
    ) -> Result<&mut BrokerRegistration, ReplayError> {
        let b = self
            .brokers
            .get_mut(&id)
            .ok_or_else(|| err(offset, ReplayErrorKind::UnknownBroker(id)))?;
        if b.epoch != epoch {
            return Err(err(
                offset,
                ReplayErrorKind::BrokerEpochMismatch {
                    broker: id,
                    expected: b.epoch.0,
                    got: epoch.0,
                },
            ));
        }
        Ok(b)
    }

    fn replay_register(
        &mut self,
        r: &RegisterBrokerRecord,
        offset: u64,
    ) -> Result<(), ReplayError> {
        self.brokers.insert(
            r.broker,
            BrokerRegistration {
                id: r.broker,
                epoch: BrokerEpoch(offset),
                incarnation: r.incarnation,
                address: r.address.clone(),
                rack: r.rack.clone(),
                log_dirs: r.log_dirs.clone(),
                offline_log_dirs: Vec::new(),
                fenced: true,
                shutting_down: false,
                // Set by the `BrokerKafkaListener` record that follows, if any.
                kafka_address: None,
            },
        );
        Ok(())
    }

    fn replay_topic(&mut self, r: &TopicRecord, offset: u64) -> Result<(), ReplayError> {
        if self.topics.contains_key(&r.topic_id) {
            return Err(err(offset, ReplayErrorKind::DuplicateTopicId(r.topic_id)));
        }
        if self.topic_names.contains_key(&r.name) {
            return Err(err(
                offset,
                ReplayErrorKind::DuplicateTopicName(r.name.clone()),
            ));
        }
        self.topic_names.insert(r.name.clone(), r.topic_id);
        self.topics.insert(
            r.topic_id,
            Arc::new(TopicImage {
                id: r.topic_id,
                name: r.name.clone(),
                configs: r
                    .configs
                    .iter()
                    .map(|(k, v)| (Arc::from(k.as_str()), Arc::from(v.as_str())))
                    .collect(),
                partition_count: 0,
                deletion: None,
            }),
        );
        Ok(())
    }

    /// Checks a leader chosen by a record: assigned, in the ISR, and able to lead.
    fn check_new_leader(
        &self,
        tp: TopicPartition,
        leader: BrokerId,
        replicas: &[BrokerId],
        isr: &[BrokerId],
        offset: u64,
    ) -> Result<(), ReplayError> {
        if !replicas.contains(&leader) || !isr.contains(&leader) {
            return Err(err(
                offset,
                ReplayErrorKind::InvalidPartition {
                    tp,
                    reason: format!("leader {leader} not in replicas and ISR"),
                },
            ));
        }
        if !self.can_lead(leader) {
            return Err(err(
                offset,
                ReplayErrorKind::IneligibleLeader { tp, leader },
            ));
        }
        Ok(())
    }

    fn check_shape(
        tp: TopicPartition,
        replicas: &[BrokerId],
        isr: &[BrokerId],
        adding: &[BrokerId],
        removing: &[BrokerId],
        offset: u64,
    ) -> Result<(), ReplayError> {
        let bad = |reason: &str| {
            Err(err(
                offset,
                ReplayErrorKind::InvalidPartition {
                    tp,
                    reason: reason.to_string(),
                },
            ))
        };
        if replicas.is_empty() {
            return bad("empty replica list");
        }
        if has_duplicates(replicas) {
            return bad("duplicate replicas");
        }
        if isr.is_empty() {
            return bad("empty ISR");
        }
        if has_duplicates(isr) || isr.iter().any(|b| !replicas.contains(b)) {
            return bad("ISR is not a subset of the replicas");
        }
        if adding.iter().chain(removing).any(|b| !replicas.contains(b)) {
            return bad("adding/removing replicas not in the replica list");
        }
        if adding.iter().any(|b| removing.contains(b)) {
            return bad("a replica is both adding and removing");
        }
        Ok(())
    }

    fn replay_partition(&mut self, r: &PartitionRecord, offset: u64) -> Result<(), ReplayError> {
        let tp = TopicPartition {
            topic_id: r.topic_id,
            partition: r.partition,
        };
        let count = self
            .topics
            .get(&r.topic_id)
            .ok_or_else(|| err(offset, ReplayErrorKind::UnknownTopic(r.topic_id)))?
            .partition_count;
        if self.partitions.contains_key(&tp) {
            return Err(err(offset, ReplayErrorKind::DuplicatePartition(tp)));
        }
        if r.partition.0 != count {
            return Err(err(
                offset,
                ReplayErrorKind::PartitionOutOfOrder {
                    tp,
                    expected: count,
                },
            ));
        }
        Self::check_shape(tp, &r.replicas, &r.isr, &[], &[], offset)?;
        if let Some(b) = r.replicas.iter().find(|b| !self.brokers.contains_key(*b)) {
            return Err(err(offset, ReplayErrorKind::UnknownBroker(*b)));
        }
        let mut state = PartitionState::NonExistent
            .transition(PartitionState::New)
            .map_err(|e| err(offset, e.into()))?;
        if let Some(l) = r.leader {
            self.check_new_leader(tp, l, &r.replicas, &r.isr, offset)?;
            state = state
                .transition(PartitionState::Online)
                .map_err(|e| err(offset, e.into()))?;
        }
        let partition = PartitionImage {
            replicas: r.replicas.clone(),
            isr: r.isr.clone(),
            leader: r.leader,
            leader_epoch: LeaderEpoch(0),
            partition_epoch: PartitionEpoch(0),
            adding: Vec::new(),
            removing: Vec::new(),
            state,
        };
        // The index was checked against the topic's count above; the table
        // holds exactly partitions 0..count of every topic.
        self.partitions.push(tp, partition).map_err(|_| {
            err(
                offset,
                ReplayErrorKind::PartitionOutOfOrder {
                    tp,
                    expected: count,
                },
            )
        })?;
        if let Some(t) = self.topics.get_mut(&r.topic_id) {
            Arc::make_mut(t).partition_count += 1;
        }
        Ok(())
    }

    fn replay_partition_change(
        &mut self,
        r: &PartitionChangeRecord,
        offset: u64,
    ) -> Result<(), ReplayError> {
        let tp = TopicPartition {
            topic_id: r.topic_id,
            partition: r.partition,
        };
        if r.is_noop() {
            return Err(err(
                offset,
                ReplayErrorKind::InvalidPartition {
                    tp,
                    reason: "partition change record changes nothing".into(),
                },
            ));
        }
        let cur = self
            .partitions
            .get(&tp)
            .ok_or_else(|| err(offset, ReplayErrorKind::UnknownPartition(tp)))?;
        // The partition as the record leaves it, borrowed: checked in full
        // before anything is written, so a refused record changes nothing.
        let replicas = r.replicas.as_deref().unwrap_or(&cur.replicas);
        let isr = r.isr.as_deref().unwrap_or(&cur.isr);
        let adding = r.adding.as_deref().unwrap_or(&cur.adding);
        let removing = r.removing.as_deref().unwrap_or(&cur.removing);
        let new_leader = match r.leader {
            LeaderChange::Unchanged => cur.leader,
            LeaderChange::NoLeader => None,
            LeaderChange::To(b) => Some(b),
        };
        Self::check_shape(tp, replicas, isr, adding, removing, offset)?;
        if let Some(b) = replicas
            .iter()
            // Newly assigned replicas must be registered; existing ones may
            // belong to a broker that was unregistered since.
            .find(|b| !cur.replicas.contains(b) && !self.brokers.contains_key(*b))
        {
            return Err(err(offset, ReplayErrorKind::UnknownBroker(*b)));
        }
        let leader_changed = new_leader != cur.leader;
        if leader_changed {
            if let Some(l) = new_leader {
                self.check_new_leader(tp, l, replicas, isr, offset)?;
            }
        } else if let Some(l) = new_leader {
            // Leader kept: it must still be assigned and in the ISR.
            if !replicas.contains(&l) || !isr.contains(&l) {
                return Err(err(
                    offset,
                    ReplayErrorKind::InvalidPartition {
                        tp,
                        reason: format!("kept leader {l} left the replicas or ISR"),
                    },
                ));
            }
        }
        let target = if new_leader.is_some() {
            PartitionState::Online
        } else if cur.state == PartitionState::New {
            PartitionState::New
        } else {
            PartitionState::Offline
        };
        let state = if target != cur.state || target == PartitionState::Online && leader_changed {
            cur.state
                .transition(target)
                .map_err(|e| err(offset, e.into()))?
        } else {
            cur.state
        };
        let leader_epoch = if leader_changed {
            LeaderEpoch(cur.leader_epoch.0 + 1)
        } else {
            cur.leader_epoch
        };
        let partition_epoch = PartitionEpoch(cur.partition_epoch.0 + 1);

        // Checked: write in place (imbl copies only the path it shares with
        // other clones of the image).
        let p = self
            .partitions
            .get_mut(&tp)
            .ok_or_else(|| err(offset, ReplayErrorKind::UnknownPartition(tp)))?;
        if let Some(v) = &r.replicas {
            p.replicas.clone_from(v);
        }
        if let Some(v) = &r.isr {
            p.isr.clone_from(v);
        }
        if let Some(v) = &r.adding {
            p.adding.clone_from(v);
        }
        if let Some(v) = &r.removing {
            p.removing.clone_from(v);
        }
        p.leader = new_leader;
        p.leader_epoch = leader_epoch;
        p.partition_epoch = partition_epoch;
        p.state = state;
        // Replicas added to a topic under deletion join its deletion map
        // (an unchanged replica list is already in it).
        if let Some(v) = &r.replicas {
            let marked = self
                .topics
                .get(&tp.topic_id)
                .is_some_and(|t| t.marked_for_deletion());
            if marked {
                if let Some(del) = self
                    .topics
                    .get_mut(&tp.topic_id)
                    .and_then(|t| Arc::make_mut(t).deletion.as_mut())
                {
                    for b in v {
                        del.entry((tp.partition, *b))
                            .or_insert(ReplicaState::Offline);
                    }
                }
            }
        }
        Ok(())
    }

    /// Moves replicas of a topic under deletion to `state`: all of them or,
    /// if any move is refused, none.
    fn replay_replica_deletion_state(
        &mut self,
        topic_id: TopicId,
        replicas: &[(PartitionId, BrokerId)],
        state: ReplicaState,
        offset: u64,
    ) -> Result<(), ReplayError> {
        // The states of the deletion machine. A replica of a topic under
        // deletion never goes back to New or Online, and leaves the machine
        // (NonExistent) only with its topic, through RemoveTopic.
        let deletion_target = matches!(
            state,
            ReplicaState::Offline
                | ReplicaState::DeletionStarted
                | ReplicaState::DeletionSuccessful
                | ReplicaState::DeletionIneligible
        );
        let del = self
            .topics
            .get(&topic_id)
            .ok_or_else(|| err(offset, ReplayErrorKind::UnknownTopic(topic_id)))?
            .deletion
            .as_ref()
            .ok_or_else(|| err(offset, ReplayErrorKind::NotMarkedForDeletion(topic_id)))?;
        // Check every move before writing any. Moves are staged in order, so
        // a replica listed twice is checked from the state its first listing
        // left it in, exactly as applying them one by one would.
        let mut staged: BTreeMap<(PartitionId, BrokerId), ReplicaState> = BTreeMap::new();
        for &(p, b) in replicas {
            let cur = match staged.get(&(p, b)).or_else(|| del.get(&(p, b))) {
                Some(s) => *s,
                None => {
                    let tp = TopicPartition {
                        topic_id,
                        partition: p,
                    };
                    return Err(err(
                        offset,
                        ReplayErrorKind::UnknownReplica { tp, broker: b },
                    ));
                }
            };
            if !deletion_target {
                // Legal for the state machine perhaps, but not for a replica
                // being deleted.
                let refused = TransitionError::Replica {
                    from: cur,
                    to: state,
                };
                return Err(err(offset, refused.into()));
            }
            let next = cur.transition(state).map_err(|e| err(offset, e.into()))?;
            staged.insert((p, b), next);
        }
        if let Some(del) = self
            .topics
            .get_mut(&topic_id)
            .and_then(|t| Arc::make_mut(t).deletion.as_mut())
        {
            del.extend(staged);
        }
        Ok(())
    }

    fn replay_mark_for_deletion(
        &mut self,
        topic_id: TopicId,
        offset: u64,
    ) -> Result<(), ReplayError> {
        let t = self
            .topics
            .get(&topic_id)
            .ok_or_else(|| err(offset, ReplayErrorKind::UnknownTopic(topic_id)))?;
        if t.deletion.is_some() {
            return Err(err(
                offset,
                ReplayErrorKind::AlreadyMarkedForDeletion(topic_id),
            ));
        }
        let mut del = BTreeMap::new();
        for (tp, p) in self.partitions_of(topic_id) {
            for b in &p.replicas {
                // Every replica enters the deletion machine at Offline.
                del.insert((tp.partition, *b), ReplicaState::Offline);
            }
        }
        if let Some(t) = self.topics.get_mut(&topic_id) {
            Arc::make_mut(t).deletion = Some(del);
        }
        Ok(())
    }

    fn replay_remove_topic(&mut self, topic_id: TopicId, offset: u64) -> Result<(), ReplayError> {
        let t = self
            .topics
            .get(&topic_id)
            .ok_or_else(|| err(offset, ReplayErrorKind::UnknownTopic(topic_id)))?;
        let del = t
            .deletion
            .as_ref()
            .ok_or_else(|| err(offset, ReplayErrorKind::NotMarkedForDeletion(topic_id)))?;
        if let Some(((p, b), _)) = del
            .iter()
            .find(|(_, s)| **s != ReplicaState::DeletionSuccessful)
        {
            return Err(err(
                offset,
                ReplayErrorKind::DeletionIncomplete {
                    topic: topic_id,
                    partition: p.0,
                    broker: *b,
                },
            ));
        }
        let name = t.name.clone();
        let count = t.partition_count;
        for i in 0..count {
            let tp = TopicPartition::new(topic_id, i);
            if let Some(p) = self.partitions.get(&tp) {
                p.state
                    .transition(PartitionState::NonExistent)
                    .map_err(|e| err(offset, e.into()))?;
            }
        }
        self.partitions.remove_topic(topic_id, count);
        self.topics.remove(&topic_id);
        self.topic_names.remove(&name);
        Ok(())
    }

    // ---- invariants, hashing, snapshots -----------------------------------

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
