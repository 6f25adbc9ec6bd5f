//! A Raft log store in memory with the sled store's contract and crash
//! semantics.
//!
//! The contract, as `keel_raft::LogStore` keeps it: a vote is durable
//! before `save_vote` returns; appended entries are acknowledged (the
//! callback runs) only once a flush covers them; a truncation is durable
//! before `truncate` returns; the committed id and the purge marker are
//! written without a flush and become durable with the next one. A crash
//! keeps everything flushed and, as sled recovers a prefix of its writes,
//! possibly a prefix of what came after: never a later write without the
//! earlier ones.
//!
//! Every write goes to one ordered journal. The durable state is what the
//! flushed part of the journal leaves; readers see the journal as a whole
//! (the page cache). When flushes happen is the [`FlushPolicy`]'s choice:
//! at once, as the real store does, or when the simulation calls
//! [`SimDisk::flush`], so that a flush and its report can be put anywhere
//! in a schedule. [`SimDisk::crash`] ends the process's view of the disk:
//! the unflushed writes are lost (or, [`Crash::Torn`], all but a prefix),
//! acknowledgements still waiting never come, and every handle opened
//! before the crash fails from then on.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, MutexGuard};

use keel_raft::{NodeId, TypeConfig};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    AnyError, Entry, LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote,
};

/// openraft's storage error for Keel's node id type.
type StorageResult<T> = Result<T, StorageError<NodeId>>;

/// When the disk makes written data durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushPolicy {
    /// Within the call that needs it (an append, a vote, a truncation), as
    /// the sled store does: an append is acknowledged before it returns.
    Immediate,
    /// Only when the simulation calls [`SimDisk::flush`], or a vote or a
    /// truncation forces one: appends wait for their acknowledgement.
    Deferred,
    /// Deliberately broken, for the checks that must fail: an append is
    /// acknowledged at once but becomes durable only with a later flush,
    /// so a crash can lose what was acknowledged (what a store that skips
    /// its `fsync` does).
    #[cfg(feature = "unsafe-ack-before-flush")]
    AckBeforeFlush,
}

/// What a crash leaves of the writes no flush covered yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crash {
    /// None of them.
    LoseUnflushed,
    /// The first `keep` of them (a torn write: an append cut after some of
    /// its entries); more than there are keeps them all.
    Torn {
        /// How many of the unflushed writes survive, in order.
        keep: usize,
    },
}

/// A call on a handle opened before the last crash: the process that held
/// it is gone, so it neither reads nor writes.
#[derive(Debug)]
pub struct StaleHandle {
    /// The crash count when the handle was opened.
    pub opened_at: u64,
    /// The crash count now.
    pub now: u64,
}

impl std::fmt::Display for StaleHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "log store handle from before crash {} used after crash {}",
            self.opened_at, self.now
        )
    }
}

impl std::error::Error for StaleHandle {}

/// One write as the disk receives it. Entry-grained, so a torn crash can
/// keep part of an append.
#[derive(Clone)]
enum Write {
    Vote(Vote<NodeId>),
    Committed(Option<LogId<NodeId>>),
    Entry(Entry<TypeConfig>),
    /// Removes every entry from this index on.
    Truncate(u64),
    /// Marks the log purged up to this id and drops the entries up to it.
    Purge(LogId<NodeId>),
}

/// The state a sequence of writes leaves.
#[derive(Clone, Default)]
struct Stored {
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    purged: Option<LogId<NodeId>>,
    /// Entries by index.
    logs: BTreeMap<u64, Entry<TypeConfig>>,
}

impl Stored {
    fn apply(&mut self, write: &Write) {
        match write {
            Write::Vote(vote) => self.vote = Some(*vote),
            Write::Committed(committed) => self.committed = *committed,
            Write::Entry(entry) => {
                self.logs.insert(entry.log_id.index, entry.clone());
            }
            Write::Truncate(index) => {
                self.logs.split_off(index);
            }
            Write::Purge(log_id) => {
                // The marker never goes back (openraft purges forward only).
                if self.purged.is_none_or(|p| p.index < log_id.index) {
                    self.purged = Some(*log_id);
                }
                self.logs = self.logs.split_off(&log_id.index.saturating_add(1));
            }
        }
    }
}

/// What runs when the flush covering an append is done: the append's
/// acknowledgement (openraft's callback, or a test's probe).
type OnDurable = Box<dyn FnOnce(io::Result<()>) + Send>;

/// The disk behind one node's log store.
struct DiskState {
    /// What the flushed writes left: a crash never loses it.
    durable: Stored,
    /// What every write so far left, flushed or not: what readers see.
    current: Stored,
    /// Writes since the last flush, in order.
    unflushed: Vec<Write>,
    /// Acknowledgements of appends no flush has covered yet, in order.
    waiting: Vec<OnDurable>,
    policy: FlushPolicy,
    /// Crashes so far; handles remember the count they were opened at.
    crashes: u64,
    /// Flushes that made at least one write durable.
    flushes: u64,
    /// Woken at every write, for a simulated flusher to wait on.
    written: Arc<tokio::sync::Notify>,
}

impl DiskState {
    fn write(&mut self, write: Write) {
        self.current.apply(&write);
        self.unflushed.push(write);
        self.written.notify_one();
    }

    /// Makes every write durable, then acknowledges the appends waiting.
    fn flush(&mut self) -> Vec<OnDurable> {
        if !self.unflushed.is_empty() {
            for write in self.unflushed.drain(..) {
                self.durable.apply(&write);
            }
            self.flushes += 1;
        }
        std::mem::take(&mut self.waiting)
    }
}

/// A simulated disk holding one node's Raft log, vote and markers. Cheap to
/// clone: clones are the same disk.
#[derive(Clone)]
pub struct SimDisk {
    state: Arc<Mutex<DiskState>>,
}

impl SimDisk {
    /// An empty disk that flushes as `policy` says.
    pub fn new(policy: FlushPolicy) -> Self {
        Self {
            state: Arc::new(Mutex::new(DiskState {
                durable: Stored::default(),
                current: Stored::default(),
                unflushed: Vec::new(),
                waiting: Vec::new(),
                policy,
                crashes: 0,
                flushes: 0,
                written: Arc::new(tokio::sync::Notify::new()),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, DiskState> {
        // A panic while the lock was held cannot leave the state half
        // written (every change is made under one lock, in plain steps).
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A log store on this disk, as a (re)started process opens it.
    pub fn open(&self) -> SimLogStore {
        SimLogStore {
            disk: self.clone(),
            opened_at: self.lock().crashes,
        }
    }

    /// Makes every write so far durable and acknowledges the appends it
    /// covers, in the order they were made.
    pub fn flush(&self) {
        let acks = self.lock().flush();
        for ack in acks {
            ack(Ok(()));
        }
    }

    /// The process using this disk dies: what no flush covered is lost
    /// (all of it, or all but a prefix: `crash`), appends waiting for a
    /// flush are never acknowledged, and handles opened before now fail.
    pub fn crash(&self, crash: Crash) {
        let mut state = self.lock();
        let keep = match crash {
            Crash::LoseUnflushed => 0,
            Crash::Torn { keep } => keep,
        };
        let unflushed = std::mem::take(&mut state.unflushed);
        for write in unflushed.iter().take(keep) {
            state.durable.apply(write);
        }
        state.current = state.durable.clone();
        // Dropped, not called: a dead process acknowledges nothing.
        state.waiting.clear();
        state.crashes += 1;
    }

    /// Notified whenever a write arrives: a simulated flusher waits on it
    /// (one stored permit, so a write before the wait is not missed).
    pub fn written(&self) -> Arc<tokio::sync::Notify> {
        self.lock().written.clone()
    }

    /// How many writes no flush has covered yet.
    pub fn unflushed_writes(&self) -> usize {
        self.lock().unflushed.len()
    }

    /// How many flushes made at least one write durable.
    pub fn flushes(&self) -> u64 {
        self.lock().flushes
    }

    /// The ids of the entries a crash now would keep (with
    /// [`Crash::LoseUnflushed`]), in order.
    pub fn durable_log_ids(&self) -> Vec<LogId<NodeId>> {
        self.lock()
            .durable
            .logs
            .values()
            .map(|e| e.log_id)
            .collect()
    }

    /// The vote a crash now would keep.
    pub fn durable_vote(&self) -> Option<Vote<NodeId>> {
        self.lock().durable.vote
    }
}

/// The log store a node's Raft runs on, over a [`SimDisk`]. Clones share
/// the disk (openraft's readers are clones).
#[derive(Clone)]
pub struct SimLogStore {
    disk: SimDisk,
    /// The disk's crash count when this handle was opened.
    opened_at: u64,
}

impl SimLogStore {
    /// The disk, if no crash came since this handle was opened.
    fn live(&self) -> Result<MutexGuard<'_, DiskState>, StaleHandle> {
        let state = self.disk.lock();
        if state.crashes != self.opened_at {
            return Err(StaleHandle {
                opened_at: self.opened_at,
                now: state.crashes,
            });
        }
        Ok(state)
    }

    /// Appends `entries` and runs `on_durable` once a flush covers them
    /// (at once with [`FlushPolicy::Immediate`]); never, if a crash comes
    /// first. What openraft's `append` does with its callback.
    pub fn append_then(
        &self,
        entries: impl IntoIterator<Item = Entry<TypeConfig>>,
        on_durable: impl FnOnce(io::Result<()>) + Send + 'static,
    ) -> Result<(), StaleHandle> {
        let mut state = self.live()?;
        for entry in entries {
            state.write(Write::Entry(entry));
        }
        let acks = match state.policy {
            FlushPolicy::Immediate => {
                state.waiting.push(Box::new(on_durable));
                state.flush()
            }
            FlushPolicy::Deferred => {
                state.waiting.push(Box::new(on_durable));
                Vec::new()
            }
            #[cfg(feature = "unsafe-ack-before-flush")]
            FlushPolicy::AckBeforeFlush => vec![Box::new(on_durable) as OnDurable],
        };
        drop(state);
        for ack in acks {
            ack(Ok(()));
        }
        Ok(())
    }

    /// Writes `write` and, when `durable`, flushes before returning (with
    /// the acknowledgements that flush releases).
    fn write(&self, write: Write, durable: bool) -> Result<(), StaleHandle> {
        let mut state = self.live()?;
        state.write(write);
        let acks = if durable { state.flush() } else { Vec::new() };
        drop(state);
        for ack in acks {
            ack(Ok(()));
        }
        Ok(())
    }
}

/// A stale handle as openraft's storage error.
fn io_error(e: StaleHandle) -> StorageError<NodeId> {
    StorageIOError::write(AnyError::new(&e)).into()
}

fn read_error(e: StaleHandle) -> StorageError<NodeId> {
    StorageIOError::read(AnyError::new(&e)).into()
}

impl RaftLogReader<TypeConfig> for SimLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        let state = self.live().map_err(read_error)?;
        let start = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => match i.checked_add(1) {
                Some(i) => i,
                None => return Ok(Vec::new()),
            },
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&i) => i.checked_add(1),
            Bound::Excluded(&i) => Some(i),
            Bound::Unbounded => None,
        };
        // An empty or inverted range reads nothing (a BTreeMap range over
        // it would panic).
        if end.is_some_and(|end| end <= start) {
            return Ok(Vec::new());
        }
        let entries = match end {
            Some(end) => state.current.logs.range(start..end),
            None => state.current.logs.range(start..),
        };
        Ok(entries.map(|(_, entry)| entry.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for SimLogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let state = self.live().map_err(read_error)?;
        let last_purged_log_id = state.current.purged;
        let last_log_id = state
            .current
            .logs
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StorageResult<()> {
        self.write(Write::Vote(*vote), true).map_err(io_error)
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        Ok(self.live().map_err(read_error)?.current.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StorageResult<()> {
        // Not flushed, as in the sled store: a stale committed id only
        // means re-applying less after a restart.
        self.write(Write::Committed(committed), false)
            .map_err(io_error)
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<NodeId>>> {
        Ok(self.live().map_err(read_error)?.current.committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        self.append_then(entries, move |result| callback.log_io_completed(result))
            .map_err(io_error)
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        self.write(Write::Truncate(log_id.index), true)
            .map_err(io_error)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        // Not flushed, as in the sled store: after a crash either the
        // marker or the entries are there, and a purge only saves space.
        self.write(Write::Purge(log_id), false).map_err(io_error)
    }
}
