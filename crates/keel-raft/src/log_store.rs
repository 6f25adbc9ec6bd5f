//! The Raft log, vote and purge marker on sled.
//!
//! Trees: `logs` (key = big-endian index, so sled's order is log order),
//! `vote`, `purged` and `committed` (one key each). Every write that openraft
//! must find after a crash is flushed before it is acknowledged.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};

use keel_metadata::RecordBatch;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    AnyError, Entry, EntryPayload, LogId, OptionalSend, RaftLogReader, StorageError,
    StorageIOError, Vote,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec::{self, CodecError};
use crate::member::DirectoryId;
use crate::stall::{timed, StorageOp};
use crate::{NodeId, TypeConfig};

/// Key of the single record in the one-key trees.
const VALUE_KEY: &[u8] = b"value";

/// openraft's storage error for this node id type.
type StorageResult<T> = Result<T, StorageError<NodeId>>;

/// Handle to the sled-backed Raft log. Cheap to clone: clones share the
/// same trees, which is how openraft gets concurrent log readers.
#[derive(Clone)]
pub struct LogStore {
    /// The database, flushed to make writes durable.
    db: sled::Db,
    /// Entries by big-endian index.
    logs: sled::Tree,
    /// The last vote granted or cast: must survive restarts or a node
    /// could vote twice in one term.
    vote: sled::Tree,
    /// The id of the last purged entry, so the log's start is known when
    /// every entry has been purged.
    purged: sled::Tree,
    /// The last known committed id: lets a restarted node re-apply
    /// committed entries before it hears from a leader.
    committed: sled::Tree,
    /// The newest appended entries, shared by every clone.
    recent: Arc<Mutex<Recent>>,
    /// One past the last purged index (0: nothing purged). Entries below it
    /// may still be on disk until the purger removes them; reads never
    /// return them.
    first_index: Arc<AtomicU64>,
    /// The purger thread, shared by every clone.
    purger: Arc<Background<u64>>,
    /// The thread storing and flushing the leader's own appends, shared by
    /// every clone.
    writer: Arc<Writer>,
    /// The data dir's directory id, from its identity record.
    pub(crate) directory_id: DirectoryId,
    /// Held: a follower's append waits before it flushes, as on a stalled
    /// disk (tests only: [`LogStore::stall_follower_appends`]).
    follower_hold: Arc<WriteHold>,
}

/// A background thread and its queue, shared by every `LogStore` clone.
/// Dropped with the last clone: closes the queue and waits for the thread,
/// so the database (which the thread holds) is closed when the store is,
/// and can be reopened at once.
struct Background<T> {
    tx: Option<mpsc::Sender<T>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<T: Send + 'static> Background<T> {
    /// Starts thread `name`, which hands `work` each queued item with every
    /// item queued behind it, in order, until the queue closes.
    fn spawn(name: &str, mut work: impl FnMut(Vec<T>) + Send + 'static) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<T>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut items = vec![first];
                    items.extend(rx.try_iter());
                    work(items);
                }
            })?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues `item`; gives it back if the thread is gone.
    fn send(&self, item: T) -> Result<(), T> {
        match &self.tx {
            Some(tx) => tx.send(item).map_err(|e| e.0),
            None => Err(item),
        }
    }
}

impl<T> Drop for Background<T> {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Removes purged entries (every key up to the received index) on its own
/// thread, so a large purge does not stall the Raft core: removing ~10,000
/// entries, some stored by sled as separate blob files, took the core
/// 0.5-0.7 s and let the followers' leases expire.
fn spawn_purger(logs: sled::Tree) -> std::io::Result<Background<u64>> {
    Background::spawn("keel-log-purge", move |uptos| {
        // Later requests cover earlier ones.
        let upto = uptos.into_iter().max().unwrap_or(0);
        let _timed = timed(StorageOp::Purge);
        if let Err(e) = remove_upto(&logs, upto) {
            // Leftovers stay below the marker, hidden from reads, and the
            // next purge removes them.
            tracing::warn!(upto, error = %e, "removing purged log entries failed");
        }
    })
}

/// Work for the writer thread, in append order.
enum Write {
    /// The leader's own entries, already in [`Recent`]: encoded, stored,
    /// flushed, then reported through the callback.
    Append {
        entries: Vec<Entry<TypeConfig>>,
        callback: LogFlushed<TypeConfig>,
    },
    /// Answered once every entry queued before it is stored (not
    /// necessarily flushed): a write that must follow them in sled (a
    /// follower's append, a truncation) waits for it.
    Barrier(tokio::sync::oneshot::Sender<()>),
}

/// Stores and flushes the leader's own appends on its own thread, so the
/// Raft core neither encodes nor writes them: a 100,000-partition election
/// appends ~20 entries of ~0.5 MB, each a blob file sled syncs twice, and
/// done in the core that kept it from sending heartbeats for half a
/// second. The entries are readable from [`Recent`] as soon as `append`
/// returns, which is what replication reads, and stay there until stored.
/// Each flush covers every entry stored before it started, so the appends
/// that queue up during one flush share the next; their callbacks run in
/// append order once it has returned.
fn spawn_writer(
    db: sled::Db,
    logs: sled::Tree,
    recent: Arc<Mutex<Recent>>,
) -> std::io::Result<Writer> {
    let hold = Arc::new(WriteHold::default());
    let held = hold.clone();
    let queued = Arc::new(AtomicU64::new(0));
    let counted = queued.clone();
    // After a failed write nothing more is stored: a later entry would
    // leave a hole. The core stops on the first failure it is told of.
    let mut failed: Option<String> = None;
    let thread = Background::spawn("keel-log-write", move |writes: Vec<Write>| {
        held.wait_released();
        let _timed = timed(StorageOp::LogWrite);
        let mut callbacks = Vec::new();
        let mut barriers = Vec::new();
        let mut stored = Vec::new();
        let mut appends = 0;
        for write in writes {
            match write {
                Write::Append { entries, callback } => {
                    appends += 1;
                    if failed.is_none() {
                        if let Err(e) = store_entries(&logs, &entries, &mut stored) {
                            failed = Some(e);
                        }
                    }
                    callbacks.push(callback);
                }
                Write::Barrier(tx) => barriers.push(tx),
            }
        }
        lock_recent(&recent).mark_stored(&stored);
        counted.fetch_sub(appends, Ordering::AcqRel);
        for tx in barriers {
            let _ = tx.send(());
        }
        if callbacks.is_empty() {
            return;
        }
        let flushed = match &failed {
            Some(e) => Err(e.clone()),
            None => flush_appends(&db).map_err(|e| e.to_string()),
        };
        for callback in callbacks {
            callback.log_io_completed(flushed.clone().map_err(std::io::Error::other));
        }
    })?;
    Ok(Writer {
        thread,
        queued,
        hold,
    })
}

/// The bytes the log store writes for a normal entry carrying `batch` at
/// `index`, appended by `leader` in `term`: what a benchmark writes to
/// measure the store without Raft.
pub fn stored_entry_bytes(
    term: u64,
    leader: NodeId,
    index: u64,
    batch: RecordBatch,
) -> Result<Vec<u8>, CodecError> {
    codec::encode(&Entry::<TypeConfig> {
        log_id: LogId::new(openraft::CommittedLeaderId::new(term, leader), index),
        payload: EntryPayload::Normal(batch),
    })
}

/// Encodes and inserts `entries` in order, noting each one's id and
/// encoded size in `stored`.
fn store_entries(
    logs: &sled::Tree,
    entries: &[Entry<TypeConfig>],
    stored: &mut Vec<(LogId<NodeId>, usize)>,
) -> Result<(), String> {
    for entry in entries {
        let bytes = codec::encode(entry)
            .map_err(|e| format!("encoding log entry {}: {e}", entry.log_id))?;
        let len = bytes.len();
        logs.insert(index_key(entry.log_id.index), bytes)
            .map_err(|e| format!("storing log entry {}: {e}", entry.log_id))?;
        stored.push((entry.log_id, len));
    }
    Ok(())
}

/// The writer thread, the number of appends queued on it and not yet
/// stored, and the hold a test may put on its flushes.
struct Writer {
    thread: Background<Write>,
    queued: Arc<AtomicU64>,
    hold: Arc<WriteHold>,
}

impl Drop for Writer {
    /// A hold left in place must not keep the thread, and so the join in
    /// `Background`'s drop that runs next, waiting forever.
    fn drop(&mut self) {
        self.hold.set(false);
    }
}

/// Lets a test hold the writer thread back, to show what the leader does
/// while its own append is neither stored nor durable.
#[derive(Default)]
struct WriteHold {
    held: Mutex<bool>,
    released: Condvar,
}

impl WriteHold {
    fn set(&self, held: bool) {
        *self.held.lock().unwrap_or_else(|p| p.into_inner()) = held;
        self.released.notify_all();
    }

    fn is_held(&self) -> bool {
        *self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait_released(&self) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        while *held {
            held = self.released.wait(held).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// While alive, the leader's own appends on this node are neither stored
/// nor flushed (see [`LogStore::hold_background_writes`]); dropping it lets
/// them go.
pub struct HeldWrites(Arc<WriteHold>);

impl Drop for HeldWrites {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// Removes every entry up to `upto`, a bounded batch at a time.
fn remove_upto(logs: &sled::Tree, upto: u64) -> sled::Result<()> {
    const CHUNK: usize = 512;
    loop {
        let keys: Vec<sled::IVec> = logs
            .range(..=index_key(upto))
            .keys()
            .take(CHUNK)
            .collect::<sled::Result<_>>()?;
        if keys.is_empty() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        for k in keys {
            batch.remove(k);
        }
        logs.apply_batch(batch)?;
    }
}

/// Stored entries kept in [`Recent`], at most.
const RECENT_ENTRIES: usize = 256;
/// Encoded bytes of the stored entries kept in [`Recent`], at most. Small
/// on purpose: reads come right after the append, and keeping 8 MiB of
/// decoded batches measured 15-20% slower bulk commits (allocator churn).
const RECENT_BYTES: usize = 1 << 20;

/// The newest appended entries with consecutive indexes. openraft reads an
/// entry back right after appending it, once per follower to replicate it
/// and once to apply it; serving those reads from here saves a sled lookup
/// and a decode each (the payload is shared, so a clone copies no record).
/// Every change to the sled tree is mirrored here under the same calls, so
/// a read finds the same entries either way.
///
/// The leader's own entries come here before the writer thread stores
/// them (their size is then unknown: `None`), and an entry is never
/// dropped for space before it is stored, so every entry from the first
/// one here on is readable here and every entry before it is in sled.
#[derive(Default)]
struct Recent {
    entries: VecDeque<(Entry<TypeConfig>, Option<usize>)>,
    /// Encoded bytes of the stored entries here.
    bytes: usize,
}

impl Recent {
    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|(e, _)| e.log_id.index)
    }

    /// Adds the next entry; `bytes` is its encoded size if it is stored.
    fn push(&mut self, entry: Entry<TypeConfig>, bytes: Option<usize>) {
        let next = self.entries.back().map(|(e, _)| e.log_id.index + 1);
        if next.is_some_and(|n| n != entry.log_id.index) {
            self.clear();
        }
        self.bytes += bytes.unwrap_or(0);
        self.entries.push_back((entry, bytes));
        self.shrink();
    }

    /// Records the encoded size of entries the writer thread has stored.
    /// An id no longer here (purged, or replaced after a truncation) is
    /// skipped.
    fn mark_stored(&mut self, stored: &[(LogId<NodeId>, usize)]) {
        let Some(first) = self.first_index() else {
            return;
        };
        for (log_id, len) in stored {
            let Some(at) = log_id
                .index
                .checked_sub(first)
                .and_then(|d| usize::try_from(d).ok())
            else {
                continue;
            };
            if let Some((e, bytes)) = self.entries.get_mut(at) {
                if e.log_id == *log_id && bytes.is_none() {
                    *bytes = Some(*len);
                    self.bytes += len;
                }
            }
        }
        self.shrink();
    }

    /// Drops the oldest stored entries while over either bound, keeping
    /// at least the newest one.
    fn shrink(&mut self) {
        while (self.entries.len() > RECENT_ENTRIES
            || (self.bytes > RECENT_BYTES && self.entries.len() > 1))
            && self.entries.front().is_some_and(|(_, b)| b.is_some())
        {
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        if let Some((_, b)) = self.entries.pop_front() {
            self.bytes -= b.unwrap_or(0);
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// Drops entries from `index` on.
    fn truncate(&mut self, index: u64) {
        while self
            .entries
            .back()
            .is_some_and(|(e, _)| e.log_id.index >= index)
        {
            if let Some((_, b)) = self.entries.pop_back() {
                self.bytes -= b.unwrap_or(0);
            }
        }
    }

    /// Drops entries up to and including `index`.
    fn purge(&mut self, index: u64) {
        while self.first_index().is_some_and(|i| i <= index) {
            self.pop_front();
        }
    }

    /// Splits a read of `start..end` (`end` = None: to the last entry): the
    /// end of the part to read from sled (`start..that`, empty if it is not
    /// past `start`) and the entries here from there on.
    fn read(&self, start: u64, end: Option<u64>) -> (Option<u64>, Vec<Entry<TypeConfig>>) {
        let Some(first) = self.first_index() else {
            return (end, Vec::new());
        };
        let from_sled = match end {
            Some(end) => end.min(first),
            None => first,
        };
        let from = start.max(first);
        let skip = usize::try_from(from - first).unwrap_or(usize::MAX);
        let here = self
            .entries
            .iter()
            .skip(skip)
            .take_while(|(e, _)| end.is_none_or(|end| e.log_id.index < end))
            .map(|(e, _)| e.clone())
            .collect();
        (Some(from_sled), here)
    }
}

/// The sled key of log index `index`.
pub fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// The log index stored under `key`, if the key has the right shape.
pub(crate) fn key_index(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.try_into().ok()?))
}

impl LogStore {
    /// Opens the log trees of an already verified database.
    pub(crate) fn open(db: &sled::Db) -> sled::Result<Self> {
        let logs = db.open_tree("logs")?;
        let purged = db.open_tree("purged")?;
        let first_index = match read_value::<LogId<NodeId>>(&purged) {
            Ok(Some(l)) => l.index.saturating_add(1),
            Ok(None) => 0,
            Err(e) => {
                return Err(sled::Error::Unsupported(format!(
                    "purge marker does not decode: {e}"
                )))
            }
        };
        let purger = Arc::new(spawn_purger(logs.clone()).map_err(sled::Error::Io)?);
        let recent = Arc::<Mutex<Recent>>::default();
        let writer = Arc::new(
            spawn_writer(db.clone(), logs.clone(), recent.clone()).map_err(sled::Error::Io)?,
        );
        Ok(Self {
            db: db.clone(),
            logs,
            vote: db.open_tree("vote")?,
            purged,
            committed: db.open_tree("committed")?,
            recent,
            first_index: Arc::new(AtomicU64::new(first_index)),
            purger,
            writer,
            directory_id: DirectoryId::default(),
            follower_hold: Arc::new(WriteHold::default()),
        })
    }

    /// Holds back the writer thread, which stores and flushes this node's
    /// own appends as leader, until the returned guard is dropped: the
    /// entries are replicated (from the cache) but this node does not count
    /// as holding them, and a write that must follow them waits. For tests
    /// of the commit rule; nothing else calls it.
    #[doc(hidden)]
    pub fn hold_background_writes(&self) -> HeldWrites {
        self.writer.hold.set(true);
        HeldWrites(self.writer.hold.clone())
    }

    /// Makes this node's appends of a leader's entries (and a new
    /// leader's first) wait before they flush, holding the Raft core as a
    /// stalled disk would, until the returned guard is dropped. For tests
    /// of what keeps flowing meanwhile; nothing else calls it.
    #[doc(hidden)]
    pub fn stall_follower_appends(&self) -> HeldWrites {
        self.follower_hold.set(true);
        HeldWrites(self.follower_hold.clone())
    }

    fn recent(&self) -> MutexGuard<'_, Recent> {
        lock_recent(&self.recent)
    }

    /// Waits until the writer thread has stored every append queued on it,
    /// so that a write made now lands after them in sled.
    async fn settle(&self) -> StorageResult<()> {
        if self.writer.queued.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let gone =
            || StorageIOError::write_logs(AnyError::error("the log writer thread has stopped"));
        if self.writer.thread.send(Write::Barrier(tx)).is_err() {
            return Err(gone().into());
        }
        rx.await.map_err(|_| gone().into())
    }

    /// Checks that every stored record of the log decodes; run at open so
    /// a corrupt dir is refused before the node joins the quorum.
    /// The directory id of the data dir this store lives in, drawn when
    /// the dir was formatted (see `KeelNode`).
    pub fn directory_id(&self) -> DirectoryId {
        self.directory_id
    }

    pub(crate) fn verify(&self) -> Result<(), String> {
        read_value::<Vote<NodeId>>(&self.vote).map_err(|e| format!("vote record: {e}"))?;
        read_value::<LogId<NodeId>>(&self.purged).map_err(|e| format!("purge marker: {e}"))?;
        read_value::<LogId<NodeId>>(&self.committed)
            .map_err(|e| format!("committed marker: {e}"))?;
        for kv in self.logs.iter() {
            let (k, v) = kv.map_err(|e| format!("log tree: {e}"))?;
            decode_entry(&k, &v).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Writes everything so far to disk, for a truncation or a vote. Only
    /// the Raft core calls this, and it waits for the flush before doing
    /// anything else, so the flush runs on the core's own thread through
    /// `block_in_place` ([`crate::off_the_workers`]: a large or stalled
    /// flush then blocks only the core). Handing it to sled's pool instead
    /// (`flush_async`) measured ~40 µs slower per append: two thread
    /// wake-ups. A follower's append flushes with [`Self::flush_here`].
    async fn flush(&self) -> Result<(), sled::Error> {
        crate::off_the_workers(|| {
            let _timed = timed(StorageOp::LogFlush);
            self.db.flush()
        })
        .map(|_| ())
    }

    /// Writes everything so far to disk on this worker, holding it for the
    /// flush: the follower's append, on every commit. `block_in_place`
    /// hands the worker's queue to another thread on every call, and that
    /// hand-off measured more than it saves here: a follower's core has
    /// nothing to do until its append is durable, and the runtime's other
    /// worker runs everything else meanwhile (in two alternating pairs of
    /// `keel bench commit --writers 1,64 --connections shared`, servers'
    /// CPU per record at one writer 655 / 618 µs against 730 / 724 µs, p50
    /// 0.536 / 0.499 ms against 0.570 / 0.539 ms).
    fn flush_here(&self) -> Result<(), sled::Error> {
        let _timed = timed(StorageOp::LogFlush);
        flush_appends(&self.db)
    }
}

/// The flush that makes appended entries durable before they are
/// acknowledged. The `unsafe-ack-before-fsync` feature (a demonstration
/// build, never shipped) skips it, so that the power-cut tests can show
/// they catch a store that acknowledges what it has not synced.
fn flush_appends(db: &sled::Db) -> Result<(), sled::Error> {
    if cfg!(feature = "unsafe-ack-before-fsync") {
        return Ok(());
    }
    db.flush().map(|_| ())
}

/// Locks the cache. A panicking holder cannot leave it unreadable: every
/// change keeps the entries consecutive (the byte count may drift, which
/// only decides when stored entries are dropped). It is not cleared, as
/// entries not yet stored are only here.
fn lock_recent(recent: &Mutex<Recent>) -> MutexGuard<'_, Recent> {
    recent
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Reads the one record of a one-key tree.
pub(crate) fn read_value<T: DeserializeOwned>(tree: &sled::Tree) -> Result<Option<T>, AnyError> {
    match tree.get(VALUE_KEY).map_err(|e| AnyError::new(&e))? {
        None => Ok(None),
        Some(bytes) => codec::decode(&bytes)
            .map(Some)
            .map_err(|e| AnyError::new(&e)),
    }
}

/// Replaces the one record of a one-key tree (not flushed).
fn write_value<T: Serialize>(tree: &sled::Tree, value: &T) -> Result<(), AnyError> {
    let bytes = codec::encode(value).map_err(|e| AnyError::new(&e))?;
    tree.insert(VALUE_KEY, bytes)
        .map_err(|e| AnyError::new(&e))?;
    Ok(())
}

/// Decodes a stored entry and checks it sits under its own index.
pub(crate) fn decode_entry(key: &[u8], value: &[u8]) -> Result<Entry<TypeConfig>, AnyError> {
    let entry: Entry<TypeConfig> = codec::decode(value).map_err(|e| {
        let at = key_index(key).map_or_else(|| format!("key {key:?}"), |i| format!("index {i}"));
        AnyError::error(format!("the log entry at {at} does not read back: {e}"))
    })?;
    match key_index(key) {
        Some(i) if i == entry.log_id.index => Ok(entry),
        _ => Err(AnyError::error(format!(
            "log entry {} is stored under key {key:?}",
            entry.log_id
        ))),
    }
}

/// Turns a sled error into openraft's log-write error.
fn write_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::write_logs(AnyError::new(&e)).into()
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        let start = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => match i.checked_add(1) {
                Some(i) => i,
                None => return Ok(Vec::new()),
            },
            Bound::Unbounded => 0,
        };
        // Purged entries the purger has not removed yet are not the log's.
        let start = start.max(self.first_index.load(Ordering::Acquire));
        let end = match range.end_bound() {
            Bound::Included(&i) => i.checked_add(1),
            Bound::Excluded(&i) => Some(i),
            Bound::Unbounded => None,
        };
        if end.is_some_and(|end| end <= start) {
            return Ok(Vec::new());
        }
        // The cache first: what it no longer holds is in sled by then.
        let (sled_end, cached) = self.recent().read(start, end);
        let mut entries = Vec::new();
        if sled_end.is_none_or(|e| e > start) {
            let iter = match sled_end {
                Some(end) => self.logs.range(index_key(start)..index_key(end)),
                None => self.logs.range(index_key(start)..),
            };
            for kv in iter {
                let (k, v) = kv.map_err(|e| StorageIOError::read_logs(AnyError::new(&e)))?;
                entries.push(decode_entry(&k, &v).map_err(StorageIOError::read_logs)?);
            }
        }
        if entries.is_empty() {
            return Ok(cached);
        }
        entries.extend(cached);
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last_purged_log_id =
            read_value::<LogId<NodeId>>(&self.purged).map_err(StorageIOError::read_logs)?;
        let last = self
            .logs
            .last()
            .map_err(|e| StorageIOError::read_logs(AnyError::new(&e)))?;
        let last_log_id = match last {
            Some((k, v)) => Some(
                decode_entry(&k, &v)
                    .map_err(StorageIOError::read_logs)?
                    .log_id,
            ),
            None => None,
        };
        // With everything purged, the last entry left may be a leftover
        // below the marker: the log then ends at the marker.
        let last_log_id = match (last_log_id, last_purged_log_id) {
            (Some(l), Some(p)) if l.index <= p.index => Some(p),
            (None, p) => p,
            (l, _) => l,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StorageResult<()> {
        write_value(&self.vote, vote).map_err(StorageIOError::write_vote)?;
        self.flush()
            .await
            .map_err(|e| StorageIOError::write_vote(AnyError::new(&e)))?;
        Ok(())
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        Ok(read_value(&self.vote).map_err(StorageIOError::read_vote)?)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StorageResult<()> {
        // Not flushed: a stale committed id only means re-applying less on
        // restart; the leader re-sends the commit index anyway.
        match committed {
            Some(c) => write_value(&self.committed, &c).map_err(StorageIOError::write)?,
            None => {
                self.committed
                    .remove(VALUE_KEY)
                    .map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
            }
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<NodeId>>> {
        Ok(read_value(&self.committed).map_err(StorageIOError::read)?)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // The leader's own entries: readable at once from the cache, and
        // stored and flushed by the writer thread while the core
        // replicates them; the core counts them when the callback runs.
        if !callback.is_awaited() {
            let entries: Vec<_> = entries.into_iter().collect();
            if entries.is_empty() {
                callback.log_io_completed(Ok(()));
                return Ok(());
            }
            {
                let mut recent = self.recent();
                for entry in &entries {
                    recent.push(entry.clone(), None);
                }
            }
            self.writer.queued.fetch_add(1, Ordering::AcqRel);
            return match self.writer.thread.send(Write::Append { entries, callback }) {
                Ok(()) => Ok(()),
                Err(write) => {
                    let gone = "the log writer thread has stopped";
                    if let Write::Append { callback, .. } = write {
                        callback.log_io_completed(Err(std::io::Error::other(gone)));
                    }
                    Err(StorageIOError::write_logs(AnyError::error(gone)).into())
                }
            };
        }
        // Anything else (a follower's append, or a new leader's first) is
        // written here and must land after what the writer still holds.
        self.settle().await?;
        // Plain inserts in log order, not a sled batch: a batch adds a
        // manifest that sled syncs on its own, doubling the syncs of every
        // append (measured: 118 µs vs 202 µs per one-entry append + flush).
        // Atomicity across the entries is not needed: sled recovers a
        // prefix of its writes, so a crash mid-append leaves a shorter log
        // without gaps, and nothing unflushed was acknowledged.
        //
        // Encoded before the cache's lock is taken: readers (replication,
        // apply) wait on that lock.
        let mut encoded = Vec::new();
        for entry in entries {
            let bytes = codec::encode(&entry)
                .map_err(|e| StorageIOError::write_log_entry(entry.log_id, AnyError::new(&e)))?;
            encoded.push((entry, bytes));
        }
        {
            let _timed = timed(StorageOp::LogFlush);
            let mut recent = self.recent();
            for (entry, bytes) in encoded {
                let len = bytes.len();
                if let Err(e) = self.logs.insert(index_key(entry.log_id.index), bytes) {
                    recent.clear();
                    return Err(write_err(e));
                }
                recent.push(entry, Some(len));
            }
        }
        // Only a test's stall blocks here (off the workers, as a stalled
        // disk would); otherwise no hand-off: see `flush_here`.
        if self.follower_hold.is_held() {
            crate::off_the_workers(|| self.follower_hold.wait_released());
        }
        // Durable before acknowledged: one flush covers the whole batch.
        match self.flush_here() {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(write_err(e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        tracing::debug!(%log_id, "truncating the log from this entry on");
        self.settle().await?;
        let mut batch = sled::Batch::default();
        for key in self.logs.range(index_key(log_id.index)..).keys() {
            batch.remove(key.map_err(write_err)?);
        }
        {
            let mut recent = self.recent();
            recent.truncate(log_id.index);
            self.logs.apply_batch(batch).map_err(write_err)?;
        }
        self.flush().await.map_err(write_err)?;
        Ok(())
    }

    /// Writes the purge marker and hides the purged entries at once; the
    /// purger thread removes them from disk later. No flush: sled recovers
    /// a prefix of its writes, so after a crash either the marker is there
    /// or the entries are (a purge is only an optimisation); the next
    /// append's flush makes it durable. Leftovers below the marker, after a
    /// crash or a failed removal, are removed by the next purge.
    async fn purge(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        tracing::debug!(%log_id, "purging the log up to this entry");
        write_value(&self.purged, &log_id).map_err(StorageIOError::write_logs)?;
        self.first_index
            .fetch_max(log_id.index.saturating_add(1), Ordering::AcqRel);
        self.recent().purge(log_id.index);
        if self.purger.send(log_id.index).is_err() {
            // The thread is gone (it never panics; only at shutdown):
            // remove here instead.
            remove_upto(&self.logs, log_id.index).map_err(write_err)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;

    #[tokio::test]
    async fn purged_entries_are_hidden_at_once_and_removed_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let mut store = LogStore::open(&db).unwrap();
        for i in 1..=10 {
            let e = entry(i);
            store
                .logs
                .insert(index_key(i), codec::encode(&e).unwrap())
                .unwrap();
        }
        store.purge(entry(4).log_id).await.unwrap();
        let got = store.try_get_log_entries(0..).await.unwrap();
        assert_eq!(got.first().map(|e| e.log_id.index), Some(5));
        assert_eq!(got.len(), 6);
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(4));
        assert_eq!(state.last_log_id.map(|l| l.index), Some(10));

        // Everything purged, but the removal not done yet (a leftover
        // below the marker): the log ends at the marker.
        store.purge(entry(10).log_id).await.unwrap();
        store
            .logs
            .insert(index_key(3), codec::encode(&entry(3)).unwrap())
            .unwrap();
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id.map(|l| l.index), Some(10));
        assert!(store.try_get_log_entries(0..).await.unwrap().is_empty());

        // Dropping the store waits for the purger, which removed all of it
        // but the leftover written after its last run.
        let logs = store.logs.clone();
        drop(store);
        let left: Vec<u64> = logs
            .iter()
            .keys()
            .map(|k| key_index(&k.unwrap()).unwrap())
            .collect();
        assert!(left.iter().all(|i| *i == 3), "{left:?}");
        // A reopened store hides it too.
        let mut store = LogStore::open(&db).unwrap();
        assert!(store.try_get_log_entries(0..).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_damaged_entry_is_an_error_naming_its_index_never_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let mut store = LogStore::open(&db).unwrap();
        for i in 1..=3 {
            let mut bytes = codec::encode(&entry(i)).unwrap();
            if i == 2 {
                let mid = bytes.len() / 2;
                bytes[mid] ^= 0x01;
            }
            store.logs.insert(index_key(i), bytes).unwrap();
        }
        let e = store.try_get_log_entries(1..=3).await.unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("index 2") && text.contains("checksum mismatch"),
            "{text}"
        );
        assert_eq!(store.try_get_log_entries(1..2).await.unwrap().len(), 1);
    }

    fn entry(index: u64) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    /// What a read of `start..end` takes from sled (its end) and the
    /// indexes of the entries it takes from the cache.
    fn read(r: &Recent, start: u64, end: Option<u64>) -> (Option<u64>, Vec<u64>) {
        let (sled_end, here) = r.read(start, end);
        (sled_end, here.iter().map(|e| e.log_id.index).collect())
    }

    #[test]
    fn recent_serves_what_it_holds_and_sends_the_rest_to_sled() {
        let mut r = Recent::default();
        assert_eq!(read(&r, 1, None), (None, vec![]), "all from sled");
        assert_eq!(read(&r, 1, Some(4)), (Some(4), vec![]));
        for i in 5..10 {
            r.push(entry(i), Some(10));
        }
        assert_eq!(read(&r, 3, None), (Some(5), vec![5, 6, 7, 8, 9]));
        assert_eq!(read(&r, 3, Some(4)), (Some(4), vec![]));
        assert_eq!(read(&r, 5, Some(7)), (Some(5), vec![5, 6]));
        assert_eq!(read(&r, 8, None), (Some(5), vec![8, 9]));
        assert_eq!(read(&r, 12, None), (Some(5), vec![]), "past the end");
    }

    #[test]
    fn recent_follows_truncate_purge_and_gaps() {
        let mut r = Recent::default();
        for i in 1..=6 {
            r.push(entry(i), Some(10));
        }
        r.truncate(4);
        assert_eq!(read(&r, 1, None).1, vec![1, 2, 3]);
        r.push(entry(4), Some(10));
        r.purge(2);
        assert_eq!(read(&r, 3, None), (Some(3), vec![3, 4]));
        assert_eq!(r.bytes, 20);
        // A non-consecutive append (never made by Raft) empties the cache
        // rather than serving a log with a hole.
        r.push(entry(9), Some(10));
        assert_eq!(read(&r, 3, None), (Some(9), vec![9]));
    }

    #[test]
    fn recent_is_bounded_by_count_and_bytes_but_keeps_the_newest() {
        let mut r = Recent::default();
        for i in 0..(RECENT_ENTRIES as u64 + 10) {
            r.push(entry(i), Some(1));
        }
        assert_eq!(r.entries.len(), RECENT_ENTRIES);
        assert_eq!(r.first_index(), Some(10));
        r.push(entry(RECENT_ENTRIES as u64 + 10), Some(RECENT_BYTES + 1));
        assert_eq!(r.entries.len(), 1, "one oversized entry is still kept");
        assert_eq!(r.bytes, RECENT_BYTES + 1);
    }

    /// The leader's entries wait in the cache until the writer has stored
    /// them: a read must find them there, however many pile up.
    #[test]
    fn recent_keeps_entries_not_yet_stored_until_they_are() {
        let mut r = Recent::default();
        r.push(entry(1), Some(RECENT_BYTES));
        let pending = RECENT_ENTRIES as u64 + 20;
        for i in 2..2 + pending {
            r.push(entry(i), None);
        }
        // Only the stored first entry could go.
        assert_eq!(r.first_index(), Some(2));
        assert_eq!(r.entries.len() as u64, pending);
        assert_eq!(r.bytes, 0);
        // Stored in two steps; ids no longer here (or of another term) are
        // skipped.
        let mut other_term = entry(30);
        other_term.log_id.leader_id = CommittedLeaderId::new(2, 1);
        r.mark_stored(&[
            (entry(1).log_id, 5),
            (entry(2).log_id, 1),
            (other_term.log_id, 1),
        ]);
        // Over the count, the stored entry 2 went; entry 3 holds the rest.
        assert_eq!(r.first_index(), Some(3), "entry 3 is not stored yet");
        assert_eq!(r.entries.len() as u64, pending - 1);
        assert_eq!(r.bytes, 0);
        let rest: Vec<_> = (3..2 + pending).map(|i| (entry(i).log_id, 1)).collect();
        r.mark_stored(&rest);
        assert_eq!(r.entries.len(), RECENT_ENTRIES);
        assert_eq!(r.bytes, RECENT_ENTRIES);
        assert_eq!(r.first_index(), Some(2 + pending - RECENT_ENTRIES as u64));
    }
}
