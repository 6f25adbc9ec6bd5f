//! Storage calls that never return. A disk (or a network or FUSE file
//! system) that hangs does not fail a call: the flush, the snapshot write
//! or the open simply never comes back, the Raft core waits on it for ever
//! and the node neither serves nor exits. Each such call stamps, on the way
//! in, the tick at which it started in a slot of its own, and clears it on
//! the way out; a watcher thread ([`watch`]) advances the tick once per
//! period and reports the first call that has been running longer than its
//! bound, so the node can exit from that thread (the stuck one never
//! returns) and its supervisor can restart it.
//!
//! The cost on the storage path is one relaxed load and two relaxed stores
//! per call: no clock is read there. Ticks only advance while a watcher
//! runs; without one (tools, tests) nothing is ever reported.
//!
//! One set of slots per process: a process runs one node's storage. (Tests
//! that run several stores in one process share them, and run no watcher.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A kind of storage call, timed in a slot of its own: calls of different
/// kinds may run at once (the log writer thread flushes while the Raft core
/// saves a vote), calls of one kind never do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageOp {
    /// Opening the data dir and its Raft storage at start-up (reads every
    /// file).
    Open,
    /// The log writer thread storing and flushing the leader's appends.
    LogWrite,
    /// The Raft core storing and flushing a follower's append, a vote or
    /// a truncation.
    LogFlush,
    /// Storing and flushing a snapshot (built here or sent by the leader).
    SnapshotWrite,
    /// Removing purged log entries.
    Purge,
    /// Measuring the data dir's free space (`statvfs`), once a second: on
    /// a file system that no longer answers, even an idle node notices.
    FreeSpace,
    /// A broker writing and syncing its history (before it answers a
    /// LeaderAndIsr, StopReplica or ISR change).
    BrokerHistory,
    /// A broker writing and syncing its data dir's meta file (its epoch,
    /// at each registration): a slot of its own, as it may run while a
    /// request writes the history.
    BrokerMeta,
    /// A broker probing its log dirs (a file written and removed in each)
    /// before each heartbeat: even an idle broker notices a log dir that
    /// no longer answers.
    LogDirProbe,
}

impl StorageOp {
    const ALL: [StorageOp; 9] = [
        StorageOp::Open,
        StorageOp::LogWrite,
        StorageOp::LogFlush,
        StorageOp::SnapshotWrite,
        StorageOp::Purge,
        StorageOp::FreeSpace,
        StorageOp::BrokerHistory,
        StorageOp::BrokerMeta,
        StorageOp::LogDirProbe,
    ];

    /// What the call does, for the message of a node that stops on it.
    pub fn describe(self) -> &'static str {
        match self {
            StorageOp::Open => "opening the data dir (and a controller's Raft storage)",
            StorageOp::LogWrite => "writing and flushing the log (leader's appends)",
            StorageOp::LogFlush => "flushing the log (an append, a vote or a truncation)",
            StorageOp::SnapshotWrite => "writing a snapshot",
            StorageOp::Purge => "removing purged log entries",
            StorageOp::FreeSpace => "measuring the data dir's free space",
            StorageOp::BrokerHistory => "writing and syncing the broker's history",
            StorageOp::BrokerMeta => "writing and syncing the broker's meta file",
            StorageOp::LogDirProbe => "probing the log dirs (a file written and removed)",
        }
    }
}

/// The watcher's clock and a slot per kind of call.
struct Slots {
    /// The watcher's clock, in periods; starts at 1 so that 0 in a slot
    /// means "no call running".
    tick: AtomicU64,
    /// Per [`StorageOp`]: the tick its running call started at, or 0.
    started: [AtomicU64; StorageOp::ALL.len()],
}

impl Slots {
    const fn new() -> Self {
        Self {
            tick: AtomicU64::new(1),
            started: [const { AtomicU64::new(0) }; StorageOp::ALL.len()],
        }
    }

    fn start(&self, op: StorageOp) {
        self.started[op as usize].store(self.tick.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    fn end(&self, op: StorageOp) {
        self.started[op as usize].store(0, Ordering::Relaxed);
    }

    /// Advances the clock by one period and returns the first call that
    /// has run for `bound_ticks` whole periods or more, with how many. A
    /// call stamped at tick `s` started at most one period before tick `s`
    /// began, so once the clock reaches `s + n + 1` it has run for at
    /// least `n` periods.
    fn advance(&self, bound_ticks: u64) -> Option<(StorageOp, u64)> {
        let now = self.tick.fetch_add(1, Ordering::Relaxed) + 1;
        StorageOp::ALL.into_iter().find_map(|op| {
            let started = self.started[op as usize].load(Ordering::Relaxed);
            let ran = now.saturating_sub(started).saturating_sub(1);
            (started != 0 && ran >= bound_ticks).then_some((op, ran))
        })
    }
}

/// The process's slots.
static SLOTS: Slots = Slots::new();

/// A call of one kind in progress; dropping it (the call returned, or its
/// future was dropped) clears the slot.
#[must_use = "the call is timed only while this is alive"]
pub struct Timed(StorageOp);

impl Drop for Timed {
    fn drop(&mut self) {
        SLOTS.end(self.0);
    }
}

/// Marks a call of kind `op` as started until the returned guard drops.
pub fn timed(op: StorageOp) -> Timed {
    SLOTS.start(op);
    Timed(op)
}

/// A call that has run too long: what it is and for how long, at least.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// The kind of call.
    pub op: StorageOp,
    /// How long it has run, at least (to within one period).
    pub for_at_least: Duration,
}

/// How often the watcher advances the clock.
pub const WATCH_PERIOD: Duration = Duration::from_secs(1);

/// Starts a thread that advances the clock every [`WATCH_PERIOD`] and
/// calls `on_stall` (once; the thread then ends) when a storage call has
/// run for `bound` or longer. `on_stall` is expected to end the process:
/// it runs on the watcher's own thread, which no storage call ever holds.
pub fn watch(
    bound: Duration,
    on_stall: impl FnOnce(Stall) + Send + 'static,
) -> std::io::Result<()> {
    let period_ms = WATCH_PERIOD.as_millis().max(1);
    let bound_ticks = u64::try_from(bound.as_millis().div_ceil(period_ms))
        .unwrap_or(u64::MAX)
        .max(1);
    std::thread::Builder::new()
        .name("storage-stall-watch".into())
        .spawn(move || loop {
            std::thread::sleep(WATCH_PERIOD);
            if let Some((op, ran)) = SLOTS.advance(bound_ticks) {
                on_stall(Stall {
                    op,
                    for_at_least: WATCH_PERIOD
                        .saturating_mul(u32::try_from(ran).unwrap_or(u32::MAX)),
                });
                return;
            }
        })
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_reported_only_after_it_has_run_for_its_bound() {
        // Slots of its own: other tests' stores use the process's.
        let slots = Slots::new();
        // Nothing running: nothing to report, however long.
        for _ in 0..5 {
            assert_eq!(slots.advance(2), None);
        }
        slots.start(StorageOp::LogFlush);
        // Started somewhere in the current period: two whole periods must
        // pass after it.
        assert_eq!(slots.advance(2), None);
        assert_eq!(slots.advance(2), None);
        assert_eq!(slots.advance(2), Some((StorageOp::LogFlush, 2)));
        slots.end(StorageOp::LogFlush);
        assert_eq!(slots.advance(2), None);
        // Calls that return in time are never reported, however many.
        for _ in 0..5 {
            slots.start(StorageOp::SnapshotWrite);
            assert_eq!(slots.advance(1), None);
            slots.end(StorageOp::SnapshotWrite);
        }
        // A stuck call of one kind is found while others come and go.
        slots.start(StorageOp::FreeSpace);
        for _ in 0..3 {
            slots.start(StorageOp::LogWrite);
            slots.end(StorageOp::LogWrite);
            assert_eq!(slots.advance(10), None);
        }
        assert_eq!(slots.advance(3), Some((StorageOp::FreeSpace, 3)));
        assert!(StorageOp::ALL
            .iter()
            .enumerate()
            .all(|(i, op)| *op as usize == i));
    }
}
