//! The replicated state machine: the [`MetadataImage`] in memory, persisted
//! only through snapshots kept in sled.
//!
//! On restart the latest snapshot becomes the image and openraft replays the
//! log after it, so the image is never written entry by entry.

use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use keel_metadata::MetadataImage;
use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    AnyError, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::codec;
use crate::{ClientResponse, KeelNode, NodeId, TypeConfig};

/// Key of the current snapshot in the `snapshot` tree.
pub(crate) const SNAPSHOT_KEY: &[u8] = b"current";

/// openraft's storage error for this node id type.
type StorageResult<T> = Result<T, StorageError<NodeId>>;

/// What a node has applied, as published to [`StateMachineStore::subscribe`]
/// readers after every applied chunk and every installed snapshot.
#[derive(Clone, Debug, Default)]
pub struct AppliedState {
    /// The metadata after the last applied entry.
    pub image: MetadataImage,
    /// The last applied entry; `None` before anything was applied.
    pub last_applied: Option<LogId<NodeId>>,
    /// The last membership config applied (or installed with a snapshot).
    pub membership: StoredMembership<NodeId, KeelNode>,
    /// Figures of this node's snapshots (one handle, shared by every
    /// published state).
    pub snapshots: Arc<SnapshotStats>,
}

/// Where the image of a loaded snapshot came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotSource {
    /// Read from this node's own storage when it started.
    Disk,
    /// Received from the leader and installed.
    Leader,
}

/// What is known about this node's snapshots: the stored one, the last
/// build and the last load. For operators and benchmarks; never replicated.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SnapshotFigures {
    /// Last log index the stored snapshot includes (`None`: no snapshot).
    pub last_index: Option<u64>,
    /// Size of the stored snapshot's data (what is sent to peers).
    pub size_bytes: u64,
    /// Size of the encoded image inside it.
    pub image_bytes: u64,
    /// Last build on this node, in ms: validate, encode, store and flush.
    pub build_ms: Option<f64>,
    /// The encoding part of `build_ms`.
    pub encode_ms: Option<f64>,
    /// Last load, in ms: read (from disk), decode, validate, and for an
    /// installed snapshot also storing it.
    pub load_ms: Option<f64>,
    /// The decoding and validating part of `load_ms`.
    pub decode_ms: Option<f64>,
    /// Where the last loaded snapshot came from.
    pub load_source: Option<SnapshotSource>,
}

/// A shared, lock-protected [`SnapshotFigures`].
#[derive(Debug, Default)]
pub struct SnapshotStats {
    /// The figures; every update is a short overwrite.
    figures: Mutex<SnapshotFigures>,
}

impl SnapshotStats {
    /// The figures as of now.
    pub fn get(&self) -> SnapshotFigures {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SnapshotFigures> {
        // Every critical section is a plain overwrite: never inconsistent.
        self.figures.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the snapshot now stored.
    fn stored(&self, snapshot: &StoredSnapshot, image_bytes: Option<u64>) {
        let mut f = self.lock();
        f.last_index = snapshot.meta.last_log_id.map(|l| l.index);
        f.size_bytes = snapshot.data.len() as u64;
        if let Some(b) = image_bytes {
            f.image_bytes = b;
        }
    }

    fn built(&self, build_ms: f64, encode_ms: f64) {
        let mut f = self.lock();
        f.build_ms = Some(build_ms);
        f.encode_ms = Some(encode_ms);
    }

    fn loaded(&self, source: SnapshotSource, load_ms: f64, decode_ms: f64) {
        let mut f = self.lock();
        f.load_ms = Some(load_ms);
        f.decode_ms = Some(decode_ms);
        f.load_source = Some(source);
    }
}

/// Milliseconds since `t`.
fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

/// The body of a snapshot: the image plus the Raft position it reflects,
/// so the data alone is enough to check it against its metadata.
#[derive(Serialize, Deserialize)]
struct SnapshotPayload {
    /// `MetadataImage::encode()` bytes (versioned, validated on decode).
    image: Vec<u8>,
    /// The last entry the image includes.
    last_applied: Option<LogId<NodeId>>,
    /// The membership in effect at `last_applied`.
    membership: StoredMembership<NodeId, KeelNode>,
}

/// A snapshot as stored in sled: openraft's metadata plus the payload bytes.
#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct StoredSnapshot {
    /// openraft's description of the snapshot.
    pub(crate) meta: SnapshotMeta<NodeId, KeelNode>,
    /// Encoded [`SnapshotPayload`], exactly as sent to peers.
    data: Vec<u8>,
}

impl StoredSnapshot {
    /// The state this snapshot restores; fails on any inconsistency. The
    /// state's `snapshots` handle is a new one; the caller replaces it.
    pub(crate) fn decode_state(&self) -> Result<AppliedState, String> {
        self.decode_state_sized().map(|(state, _)| state)
    }

    /// [`decode_state`](Self::decode_state), and the size of the encoded image.
    fn decode_state_sized(&self) -> Result<(AppliedState, u64), String> {
        let payload: SnapshotPayload =
            codec::decode(&self.data).map_err(|e| format!("snapshot payload: {e}"))?;
        let image =
            MetadataImage::decode(&payload.image).map_err(|e| format!("snapshot image: {e}"))?;
        if payload.last_applied != self.meta.last_log_id {
            return Err(format!(
                "snapshot data ends at {:?} but its metadata says {:?}",
                payload.last_applied, self.meta.last_log_id
            ));
        }
        if payload.membership != self.meta.last_membership {
            return Err("snapshot data and metadata disagree on membership".into());
        }
        let expected_offset = payload.last_applied.map_or(0, |l| l.index);
        if image.offset() != expected_offset {
            return Err(format!(
                "snapshot image is at offset {} but the snapshot ends at index {expected_offset}",
                image.offset()
            ));
        }
        let state = AppliedState {
            image,
            last_applied: payload.last_applied,
            membership: payload.membership,
            snapshots: Arc::default(),
        };
        Ok((state, payload.image.len() as u64))
    }

    /// A snapshot of `image` (already encoded as `image_bytes`) ending at
    /// `last_log_id` with `membership`: how a restored backup becomes a new
    /// node's installed snapshot (`backup.rs`).
    pub(crate) fn restored(
        image_bytes: Vec<u8>,
        last_log_id: LogId<NodeId>,
        membership: StoredMembership<NodeId, KeelNode>,
        snapshot_id: String,
    ) -> Result<Self, codec::CodecError> {
        let payload = SnapshotPayload {
            image: image_bytes,
            last_applied: Some(last_log_id),
            membership: membership.clone(),
        };
        Ok(Self {
            meta: SnapshotMeta {
                last_log_id: Some(last_log_id),
                last_membership: membership,
                snapshot_id,
            },
            data: codec::encode(&payload)?,
        })
    }

    /// The form openraft hands around.
    fn into_snapshot(self) -> Snapshot<TypeConfig> {
        Snapshot {
            meta: self.meta,
            snapshot: Box::new(Cursor::new(self.data)),
        }
    }
}

/// Durable home of the current snapshot, shared by the state machine and
/// its snapshot builders.
struct SnapshotStore {
    /// Flushed after every snapshot write.
    db: sled::Db,
    /// Holds the one current snapshot.
    tree: sled::Tree,
    /// Metadata of the stored snapshot. Only the metadata stays in memory
    /// (the data is read back from the tree when a peer needs it); the lock
    /// also orders a concurrent build and install so an older one never
    /// replaces a newer.
    current: tokio::sync::Mutex<Option<SnapshotMeta<NodeId, KeelNode>>>,
    /// Makes snapshot ids unique across builds of the same index.
    next_seq: AtomicU64,
    /// Figures of the stored snapshot and of the last build and load.
    stats: Arc<SnapshotStats>,
}

impl SnapshotStore {
    /// Stores `snapshot` unless a newer one is already stored.
    async fn save(
        &self,
        snapshot: &StoredSnapshot,
        image_bytes: Option<u64>,
    ) -> Result<(), AnyError> {
        let mut current = self.current.lock().await;
        if let Some(existing) = current.as_ref() {
            if existing.last_log_id > snapshot.meta.last_log_id {
                return Ok(());
            }
        }
        let bytes = codec::encode(snapshot).map_err(|e| AnyError::new(&e))?;
        let _timed = crate::stall::timed(crate::stall::StorageOp::SnapshotWrite);
        self.tree
            .insert(SNAPSHOT_KEY, bytes)
            .map_err(|e| AnyError::new(&e))?;
        self.db.flush_async().await.map_err(|e| AnyError::new(&e))?;
        *current = Some(snapshot.meta.clone());
        self.stats.stored(snapshot, image_bytes);
        Ok(())
    }

    /// Reads the stored snapshot back (for a peer that needs it).
    fn load(&self) -> Result<Option<StoredSnapshot>, AnyError> {
        match self.tree.get(SNAPSHOT_KEY).map_err(|e| AnyError::new(&e))? {
            None => Ok(None),
            Some(bytes) => codec::decode(&bytes)
                .map(Some)
                .map_err(|e| AnyError::new(&e)),
        }
    }
}

/// The state machine openraft applies committed entries to. Owns the
/// image; readers get copies through [`subscribe`](Self::subscribe).
pub struct StateMachineStore {
    /// The metadata after the last applied entry.
    image: MetadataImage,
    /// The last applied entry.
    last_applied: Option<LogId<NodeId>>,
    /// The last applied membership.
    membership: StoredMembership<NodeId, KeelNode>,
    /// The state at the last applied entry after which no transaction was
    /// open: where a snapshot is cut (never inside a transaction, whose
    /// held records the image does not encode).
    between_transactions: SnapshotPoint,
    /// Where snapshots are kept.
    snapshots: Arc<SnapshotStore>,
    /// Publishes every new applied state.
    published: watch::Sender<Arc<AppliedState>>,
}

impl StateMachineStore {
    /// Replays committed entries into the image (openraft's `apply`; the
    /// error is boxed only to keep the result small).
    fn apply_entries(
        &mut self,
        entries: Vec<Entry<TypeConfig>>,
    ) -> Result<Vec<ClientResponse>, Box<StorageError<NodeId>>> {
        // Work on a copy (O(1)) so a failed chunk leaves nothing half-applied.
        let mut image = self.image.clone();
        let mut last_applied = self.last_applied;
        let mut membership = self.membership.clone();
        let mut between = None;
        let mut responses = Vec::new();
        for entry in entries {
            let log_id = entry.log_id;
            match &entry.payload {
                EntryPayload::Blank => image.advance_offset(log_id.index),
                EntryPayload::Normal(batch) => {
                    if let Err(e) = image.replay_batch(batch, log_id.index) {
                        // A committed entry that does not replay means this
                        // node's state diverged or the log is corrupt: stop.
                        tracing::error!(
                            index = log_id.index,
                            error = %e,
                            "replay of a committed entry failed; stopping this node"
                        );
                        return Err(Box::new(
                            StorageIOError::apply(log_id, AnyError::new(&e)).into(),
                        ));
                    }
                }
                EntryPayload::Membership(m) => {
                    image.advance_offset(log_id.index);
                    membership = StoredMembership::new(Some(log_id), m.clone());
                }
            }
            last_applied = Some(log_id);
            responses.push(ClientResponse {});
            if image.open_transaction().is_none() {
                between = Some(log_id);
            }
        }
        if !responses.is_empty() {
            if between == last_applied {
                // O(1) copies of the persistent image.
                self.between_transactions = SnapshotPoint {
                    image: image.clone(),
                    last_applied,
                    membership: membership.clone(),
                };
            } else if between.is_some() {
                // A transaction began in this chunk after a point between
                // transactions: cut snapshots at the older point until it
                // ends (rare enough not to track every entry's image).
                tracing::debug!(
                    open_since = image.open_transaction(),
                    "a transaction is open; snapshots stay at the last point before it"
                );
            }
            self.image = image;
            self.last_applied = last_applied;
            self.membership = membership;
            self.publish();
        }
        Ok(responses)
    }

    /// Opens the snapshot tree and restores the latest snapshot, if any.
    /// The error is a description of what is corrupt. `seq_seed` keeps the
    /// snapshot ids of successive starts apart ([`crate::open_storage`]
    /// takes it from the clock; a simulation passes one from its seed).
    pub fn open(db: &sled::Db, seq_seed: u64) -> Result<Self, String> {
        let started = Instant::now();
        let tree = db
            .open_tree("snapshot")
            .map_err(|e| format!("snapshot tree: {e}"))?;
        let stored = match tree
            .get(SNAPSHOT_KEY)
            .map_err(|e| format!("snapshot tree: {e}"))?
        {
            None => None,
            Some(bytes) => Some(
                codec::decode::<StoredSnapshot>(&bytes)
                    .map_err(|e| format!("stored snapshot: {e}"))?,
            ),
        };
        let stats = Arc::new(SnapshotStats::default());
        let decoding = Instant::now();
        let (mut state, image_bytes) = match &stored {
            None => (AppliedState::default(), 0),
            Some(s) => s.decode_state_sized()?,
        };
        if let Some(s) = &stored {
            let (decode_ms, load_ms) = (ms_since(decoding), ms_since(started));
            stats.stored(s, Some(image_bytes));
            stats.loaded(SnapshotSource::Disk, load_ms, decode_ms);
            tracing::info!(
                meta = %s.meta,
                bytes = s.data.len(),
                partitions = state.image.partition_count(),
                load_ms,
                decode_ms,
                "loaded snapshot"
            );
        }
        state.snapshots = stats.clone();
        let (published, _) = watch::channel(Arc::new(state.clone()));
        Ok(Self {
            between_transactions: SnapshotPoint {
                image: state.image.clone(),
                last_applied: state.last_applied,
                membership: state.membership.clone(),
            },
            image: state.image,
            last_applied: state.last_applied,
            membership: state.membership,
            snapshots: Arc::new(SnapshotStore {
                db: db.clone(),
                tree,
                current: tokio::sync::Mutex::new(stored.map(|s| s.meta)),
                next_seq: AtomicU64::new(seq_seed),
                stats,
            }),
            published,
        })
    }

    /// A receiver that always holds the latest applied state. Cheap to
    /// read: the image is a persistent map shared with the state machine.
    pub fn subscribe(&self) -> watch::Receiver<Arc<AppliedState>> {
        self.published.subscribe()
    }

    /// Sends the current state to subscribers.
    fn publish(&self) {
        self.published.send_replace(Arc::new(AppliedState {
            image: self.image.clone(),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            snapshots: self.snapshots.stats.clone(),
        }));
    }
}

/// A state a snapshot can be cut at.
#[derive(Clone, Default)]
struct SnapshotPoint {
    image: MetadataImage,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, KeelNode>,
}

/// Builds a snapshot from a frozen copy of the state machine, so openraft
/// can keep applying while the snapshot is encoded and written.
pub struct SnapshotBuilder {
    /// The image at `last_applied`.
    image: MetadataImage,
    /// The last entry the snapshot includes.
    last_applied: Option<LogId<NodeId>>,
    /// The membership at `last_applied`.
    membership: StoredMembership<NodeId, KeelNode>,
    /// Where the snapshot is saved.
    snapshots: Arc<SnapshotStore>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let started = Instant::now();
        let write_err = |e: AnyError| StorageIOError::write_snapshot(None, e);
        self.image
            .validate()
            .map_err(|e| write_err(AnyError::new(&e)))?;
        let encoding = Instant::now();
        let payload = SnapshotPayload {
            image: self.image.encode(),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
        };
        let image_bytes = payload.image.len() as u64;
        let data = codec::encode(&payload).map_err(|e| write_err(AnyError::new(&e)))?;
        drop(payload);
        let encode_ms = ms_since(encoding);
        let seq = self.snapshots.next_seq.fetch_add(1, Ordering::Relaxed);
        let snapshot_id = match self.last_applied {
            Some(l) => format!("{}-{}-{seq}", l.leader_id, l.index),
            None => format!("none-{seq}"),
        };
        let stored = StoredSnapshot {
            meta: SnapshotMeta {
                last_log_id: self.last_applied,
                last_membership: self.membership.clone(),
                snapshot_id,
            },
            data,
        };
        self.snapshots
            .save(&stored, Some(image_bytes))
            .await
            .map_err(|e| StorageIOError::write_snapshot(Some(stored.meta.signature()), e))?;
        let build_ms = ms_since(started);
        self.snapshots.stats.built(build_ms, encode_ms);
        tracing::info!(
            meta = %stored.meta,
            bytes = stored.data.len(),
            partitions = self.image.partition_count(),
            build_ms,
            encode_ms,
            "built snapshot"
        );
        Ok(stored.into_snapshot())
    }
}

/// Records in one `apply` call from which the replay runs aside from the
/// runtime's workers ([`crate::off_the_workers`]): a 100,000-partition
/// election replays ~20 entries of 5,000 records, too long to hold a
/// worker; a small write's entry is not worth the hand-off.
const APPLY_ASIDE_RECORDS: usize = 2_000;

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(Option<LogId<NodeId>>, StoredMembership<NodeId, KeelNode>)> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<ClientResponse>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let records: usize = entries
            .iter()
            .map(|e| match &e.payload {
                EntryPayload::Normal(batch) => batch.records.len(),
                _ => 0,
            })
            .sum();
        let applied = if records >= APPLY_ASIDE_RECORDS {
            crate::off_the_workers(|| self.apply_entries(entries))
        } else {
            self.apply_entries(entries)
        };
        applied.map_err(|e| *e)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // Cut at the last applied entry after which no transaction was
        // open: a snapshot never holds half a transaction.
        let p = self.between_transactions.clone();
        SnapshotBuilder {
            image: p.image,
            last_applied: p.last_applied,
            membership: p.membership,
            snapshots: self.snapshots.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, KeelNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let started = Instant::now();
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: snapshot.into_inner(),
        };
        let (state, image_bytes) = stored.decode_state_sized().map_err(|e| {
            tracing::error!(meta = %meta, error = %e, "refusing a snapshot that does not decode");
            StorageIOError::read_snapshot(Some(meta.signature()), AnyError::error(e))
        })?;
        let decode_ms = ms_since(started);
        self.snapshots
            .save(&stored, Some(image_bytes))
            .await
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), e))?;
        let load_ms = ms_since(started);
        self.snapshots
            .stats
            .loaded(SnapshotSource::Leader, load_ms, decode_ms);
        tracing::info!(
            meta = %meta,
            bytes = stored.data.len(),
            partitions = state.image.partition_count(),
            load_ms,
            decode_ms,
            "installed snapshot"
        );
        self.between_transactions = SnapshotPoint {
            image: state.image.clone(),
            last_applied: state.last_applied,
            membership: state.membership.clone(),
        };
        self.image = state.image;
        self.last_applied = state.last_applied;
        self.membership = state.membership;
        self.publish();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        // Held so a concurrent save cannot swap the stored snapshot between
        // checking the metadata and reading the data.
        let current = self.snapshots.current.lock().await;
        let Some(meta) = current.as_ref() else {
            return Ok(None);
        };
        let stored = self
            .snapshots
            .load()
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), e))?
            .ok_or_else(|| {
                StorageIOError::read_snapshot(
                    Some(meta.signature()),
                    AnyError::error("the stored snapshot is gone"),
                )
            })?;
        Ok(Some(stored.into_snapshot()))
    }
}

#[cfg(test)]
mod tests {
    use keel_metadata::{MetadataRecord, RecordBatch, TopicId, TopicRecord};
    use openraft::{CommittedLeaderId, RaftSnapshotBuilder};

    use super::*;

    fn topic_entry(index: u64) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(RecordBatch::new(vec![MetadataRecord::Topic(
                TopicRecord {
                    topic_id: TopicId(u128::from(index)),
                    name: format!("topic-{index}"),
                    configs: Default::default(),
                },
            )])),
        }
    }

    #[tokio::test]
    async fn snapshot_figures_follow_builds_and_loads_and_the_data_stays_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let (_log, mut sm) = crate::open_storage(dir.path(), "c", 1).unwrap();
        let published = sm.subscribe();
        assert_eq!(
            published.borrow().snapshots.get(),
            SnapshotFigures::default()
        );
        sm.apply((1..=3).map(topic_entry)).await.unwrap();

        let built = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        let figures = published.borrow().snapshots.get();
        assert_eq!(figures.last_index, Some(3));
        assert_eq!(figures.size_bytes, built.snapshot.get_ref().len() as u64);
        assert!(figures.image_bytes > 0 && figures.image_bytes < figures.size_bytes);
        assert!(figures.build_ms.is_some() && figures.encode_ms.is_some());
        assert_eq!(figures.load_source, None);

        // Only the metadata is kept in memory; the data is read back intact.
        let current = sm.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(current.meta, built.meta);
        assert_eq!(current.snapshot.get_ref(), built.snapshot.get_ref());
        drop((_log, sm));

        let (_log, sm) = crate::open_storage(dir.path(), "c", 1).unwrap();
        let state = sm.subscribe().borrow().clone();
        assert_eq!(state.last_applied.map(|l| l.index), Some(3));
        let loaded = state.snapshots.get();
        assert_eq!(loaded.load_source, Some(SnapshotSource::Disk));
        assert!(loaded.load_ms.is_some() && loaded.decode_ms.is_some());
        assert_eq!(loaded.last_index, Some(3));
        assert_eq!(loaded.size_bytes, figures.size_bytes);
        assert_eq!(loaded.image_bytes, figures.image_bytes);
    }

    fn entry(index: u64, records: Vec<MetadataRecord>) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(RecordBatch::new(records)),
        }
    }

    #[tokio::test]
    async fn a_snapshot_is_cut_only_between_transactions() {
        let dir = tempfile::tempdir().unwrap();
        let (_log, mut sm) = crate::open_storage(dir.path(), "c", 1).unwrap();
        let topic = |i: u64| match topic_entry(i).payload {
            EntryPayload::Normal(b) => b.records[0].clone(),
            _ => unreachable!(),
        };
        sm.apply([topic_entry(1)]).await.unwrap();
        // A transaction over entries 2 and 3: open after both.
        sm.apply([
            entry(
                2,
                vec![
                    MetadataRecord::BeginTransaction { name: "t".into() },
                    topic(2),
                ],
            ),
            entry(3, vec![topic(3)]),
        ])
        .await
        .unwrap();
        let state = sm.subscribe().borrow().clone();
        assert_eq!(state.image.open_transaction(), Some(2));
        assert_eq!(state.image.topic_count(), 1, "held back");
        let snap = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(
            snap.meta.last_log_id.map(|l| l.index),
            Some(1),
            "cut before the transaction"
        );
        // The end marker: the next snapshot holds the whole transaction.
        sm.apply([entry(4, vec![MetadataRecord::EndTransaction])])
            .await
            .unwrap();
        assert_eq!(sm.subscribe().borrow().image.topic_count(), 3);
        let snap = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(snap.meta.last_log_id.map(|l| l.index), Some(4));
        drop((_log, sm));
        let (_log, sm) = crate::open_storage(dir.path(), "c", 1).unwrap();
        let state = sm.subscribe().borrow().clone();
        assert_eq!(state.image.topic_count(), 3);
        assert_eq!(state.image.open_transaction(), None);
    }
}
