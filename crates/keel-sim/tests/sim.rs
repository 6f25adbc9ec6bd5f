//! The simulation: runs are replayed exactly from their seed, seeds of the
//! honest quorum break no invariant, and the same runs find the lost
//! acknowledged writes of a store that acknowledges before it flushes.
//! The checkers are shown to fire on histories made to break them.

use std::time::Duration;

use keel_sim::history::History;
use keel_sim::{run, run_many, shrink, Batch, DiskMode, SimOptions, Trace};
use openraft::{CommittedLeaderId, LogId};

/// Seeds the honest-quorum test runs (`KEEL_SIM_SEEDS` overrides; CI runs
/// the default, `keel-lab sim --seeds N` runs more).
fn seeds() -> u64 {
    std::env::var("KEEL_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(500)
}

fn short(seed: u64) -> SimOptions {
    let mut options = SimOptions::new(seed);
    options.time = Duration::from_secs(10);
    options
}

#[test]
fn two_runs_of_one_seed_are_identical() {
    for seed in [1, 2, 3] {
        let mut options = short(seed);
        options.keep_trace = true;
        let a = run(&options).unwrap();
        let b = run(&options).unwrap();
        let (la, lb) = (a.trace.unwrap(), b.trace.unwrap());
        assert!(
            la.len() > 1_000,
            "seed {seed}: a trace of {} lines",
            la.len()
        );
        if let Some(i) = la.iter().zip(&lb).position(|(x, y)| x != y) {
            panic!(
                "seed {seed}: the traces part at line {i}:\n  {}\n  {}",
                la[i], lb[i]
            );
        }
        assert_eq!(la.len(), lb.len(), "seed {seed}");
        assert_eq!(a.digest, b.digest, "seed {seed}");
        assert_eq!(a.violations, b.violations, "seed {seed}");
    }
}

#[test]
fn different_seeds_take_different_paths() {
    let a = run(&short(10)).unwrap();
    let b = run(&short(11)).unwrap();
    assert_ne!(a.digest, b.digest);
}

#[test]
fn seeds_of_the_honest_quorum_break_no_invariant() {
    let summary = run_many(&SimOptions::new(0), &Batch::new(1_000, seeds()));
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!(summary.runs, seeds());
    assert!(
        summary.failed.is_empty(),
        "{} of {} seeds broke an invariant (replay: keel-lab sim --seed S --trace): {:?}",
        summary.failed.len(),
        summary.runs,
        summary.failed
    );
    // The runs did work and met faults: not a quiet cluster.
    assert!(summary.acked > summary.runs * 50, "{summary:?}");
    assert!(summary.faults > summary.runs * 5, "{summary:?}");
    eprintln!(
        "{} runs, {} simulated s, {:.1} s wall, {} acked writes, {} faults",
        summary.runs,
        summary.sim_ms / 1_000,
        summary.wall_ms as f64 / 1_000.0,
        summary.acked,
        summary.faults
    );
}

#[test]
fn a_store_that_acknowledges_before_flushing_is_caught() {
    let mut template = SimOptions::new(0);
    template.disk = DiskMode::AckBeforeFlush;
    let mut batch = Batch::new(0, 200);
    batch.stop_at_first_failure = true;
    let summary = run_many(&template, &batch);
    eprintln!(
        "the broken store was caught after {} runs: {:?}",
        summary.runs, summary.failed
    );
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    // What a store that loses acknowledged appends leaves: a write a
    // leader acknowledged missing from a node that applied past it, or
    // two nodes that applied different entries at one index.
    let caught = summary.failed.iter().find(|(_, v)| {
        v.iter()
            .any(|v| v.contains("acknowledged write") || v.starts_with("index "))
    });
    assert!(
        caught.is_some(),
        "no run of {} found lost or diverging writes: {:?}",
        summary.runs,
        summary.failed
    );
    // The failure shrinks to a shorter run of the same seed that fails too.
    let mut failing = template.clone();
    failing.seed = summary.failed[0].0;
    let (short, outcome) = shrink(&failing).expect("the failing seed fails again");
    assert!(short.time <= failing.time);
    assert!(!outcome.violations.is_empty());
    eprintln!(
        "seed {} fails within {} simulated seconds",
        failing.seed,
        short.time.as_secs()
    );
}

fn id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

#[test]
fn the_step_checkers_fire_on_broken_histories() {
    let history = History::new(Trace::new(false));
    history.leader(3, 1);
    history.leader(3, 1);
    history.applied(1, id(3, 10), "a".into());
    history.applied(2, id(3, 10), "a".into());
    assert!(history.violations().is_empty());
    // A second leader in a term is counted, not a violation.
    history.leader(3, 2);
    assert_eq!(history.shared_terms(), 1);
    assert!(history.violations().is_empty());
    history.applied(3, id(4, 10), "b".into());
    assert_eq!(history.violations().len(), 1);
    assert!(history.violations()[0].contains("index 10"));
    history.applied(3, id(3, 10), "c".into());
    assert_eq!(history.violations().len(), 2);
}

/// Seeds that once broke an invariant, each kept once its cause was fixed.
/// - 1597, 1607, 2139, 2212, 2996, 3214, 3409, 3719: the nemesis asked a
///   leader that had just removed itself for another membership change,
///   and openraft's core died on its own assertion (a removed leader is
///   not a consistent leader until it steps down); the controller, and
///   the nemesis, now refuse changes of such a node
///   (`keel_raft::membership_change_refusal`).
/// - 1011, 1016, 1017, 1019: a removal interrupted between its joint and
///   final steps left the joint configuration, in which every later
///   change was refused forever; the active controller now finishes it
///   (`keel_raft::finish_joint_membership`).
#[test]
fn seeds_that_found_bugs_stay_fixed() {
    for seed in [
        1597, 1607, 2139, 2212, 2996, 3214, 3409, 3719, 1011, 1016, 1017, 1019,
    ] {
        let outcome = run(&SimOptions::new(seed)).unwrap();
        assert!(
            outcome.violations.is_empty(),
            "seed {seed}: {:?}",
            outcome.violations
        );
    }
}
