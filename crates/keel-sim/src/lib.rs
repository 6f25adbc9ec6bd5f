//! Deterministic simulation of Keel's controller quorum: one seed decides
//! what the disks, the network, the clocks and the scheduler do, so a run
//! that finds a violation can be replayed exactly.
//!
//! - [`SimDisk`] and [`SimLogStore`]: the Raft log store with the sled
//!   store's contract (`keel_raft::LogStore`) and its crash semantics, held
//!   in memory so a simulation decides when writes become durable and what
//!   a crash leaves. openraft's storage conformance suite runs against it
//!   (`tests/store_suite.rs`), so it cannot drift from the contract the
//!   real store is held to.
//! - [`run()`]: one run of three controllers (openraft and Keel's state
//!   machine, as the controller runs them, over [`SimLogStore`]) on one
//!   thread under a paused clock, with clients writing, a nemesis cutting
//!   links, losing, delaying and repeating messages, crashing nodes (one,
//!   or all at once), and the invariants of [`history`] checked at every
//!   step and at the end. [`run_many`] runs seeds on every core.
//!
//! Not simulated yet: the controller's event loop, brokers, the pre-vote
//! watchdog and the lease thread (they take time and randomness directly);
//! elections here come from openraft's own timer.

#![warn(missing_docs)]

pub mod history;
mod net;
mod panics;
mod run;
mod store;
mod trace;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use net::LinkFaults;
pub use run::{run, DiskMode, SimOptions, SimOutcome};
pub use store::{Crash, FlushPolicy, SimDisk, SimLogStore, StaleHandle};
pub use trace::Trace;

/// What [`run_many`] found.
#[derive(Debug, Default)]
pub struct Summary {
    /// Runs finished.
    pub runs: u64,
    /// Simulated milliseconds over every run.
    pub sim_ms: u64,
    /// Wall-clock milliseconds the whole batch took.
    pub wall_ms: u64,
    /// Writes acknowledged over every run.
    pub acked: u64,
    /// Faults injected over every run.
    pub faults: u64,
    /// Runs that broke an invariant: seed and violations, by seed.
    pub failed: Vec<(u64, Vec<String>)>,
    /// Runs that could not run (a local failure), with the reason.
    pub errors: Vec<(u64, String)>,
}

/// Which seeds [`run_many`] runs, and how.
#[derive(Clone, Debug)]
pub struct Batch {
    /// The first seed.
    pub first: u64,
    /// How many seeds, from `first` on.
    pub count: u64,
    /// Threads running seeds.
    pub jobs: usize,
    /// No new run starts once this much wall-clock time has passed.
    pub wall_limit: Option<Duration>,
    /// No new run starts once a run has broken an invariant.
    pub stop_at_first_failure: bool,
}

impl Batch {
    /// Seeds `first..first + count` on every core, to the end.
    pub fn new(first: u64, count: u64) -> Self {
        Self {
            first,
            count,
            jobs: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            wall_limit: None,
            stop_at_first_failure: false,
        }
    }
}

/// Runs the seeds of `batch`, each like `template`.
pub fn run_many(template: &SimOptions, batch: &Batch) -> Summary {
    let started = Instant::now();
    let next = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let summary = Mutex::new(Summary::default());
    std::thread::scope(|scope| {
        for _ in 0..batch.jobs.max(1) {
            scope.spawn(|| loop {
                if batch
                    .wall_limit
                    .is_some_and(|limit| started.elapsed() >= limit)
                    || (batch.stop_at_first_failure && failed.load(Ordering::Relaxed))
                {
                    return;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= batch.count {
                    return;
                }
                let mut options = template.clone();
                options.seed = batch.first.wrapping_add(i);
                options.keep_trace = false;
                let outcome = run(&options);
                let mut s = summary.lock().unwrap_or_else(|p| p.into_inner());
                match outcome {
                    Ok(o) => {
                        s.runs += 1;
                        s.sim_ms += o.sim_ms;
                        s.acked += o.acked as u64;
                        s.faults += o.faults as u64;
                        if !o.violations.is_empty() {
                            failed.store(true, Ordering::Relaxed);
                            s.failed.push((o.seed, o.violations));
                        }
                    }
                    Err(e) => s.errors.push((options.seed, e)),
                }
            });
        }
    });
    let mut summary = summary.into_inner().unwrap_or_else(|p| p.into_inner());
    summary.failed.sort_by_key(|f| f.0);
    summary.errors.sort_by_key(|f| f.0);
    summary.wall_ms = started.elapsed().as_millis() as u64;
    summary
}

/// The shortest run of `failing`'s seed that still breaks an invariant:
/// the nemesis and the clients draw their schedule in time order, so a
/// shorter run is a prefix of the longer one's faults and writes, and a
/// binary search over whole simulated seconds finds the shortest prefix
/// that fails (about log2 of the run's seconds runs). `None` if `failing`
/// does not fail.
pub fn shrink(failing: &SimOptions) -> Option<(SimOptions, SimOutcome)> {
    let fails = |options: &SimOptions| run(options).ok().filter(|o| !o.violations.is_empty());
    let mut best = (failing.clone(), fails(failing)?);
    let (mut low, mut high) = (0, failing.time.as_secs());
    // Invariant: `high` seconds fail (or are the original run); `low` do not.
    while high > low + 1 {
        let mid = low + (high - low) / 2;
        let mut options = failing.clone();
        options.time = Duration::from_secs(mid);
        match fails(&options) {
            Some(outcome) => {
                high = mid;
                best = (options, outcome);
            }
            None => low = mid,
        }
    }
    Some(best)
}
