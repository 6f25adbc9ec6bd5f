//! `keel-lab sim` (and `keel sim`, which runs it): deterministic
//! simulation of the controller quorum (see the `keel-sim` crate). Many
//! seeds on every core, or one seed replayed with its trace.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use keel_sim::{run, run_many, shrink, Batch, SimOptions};

/// Failing seeds shrunk to their shortest failing run, at most.
const SHRINK_AT_MOST: usize = 3;

#[derive(Args, Debug)]
pub struct SimArgs {
    /// Replay this one seed: runs it alone and prints what it found (and
    /// its trace, with --trace).
    #[arg(long)]
    seed: Option<u64>,
    /// How many seeds to run, from --first-seed.
    #[arg(long, default_value_t = 1_000)]
    seeds: u64,
    /// The first seed of a batch.
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
    /// Wall-clock seconds: no new run starts after this.
    #[arg(long)]
    time_limit: Option<u64>,
    /// Simulated seconds of writes and faults in each run (healing and
    /// the final checks come after).
    #[arg(long, default_value_t = 30)]
    sim_seconds: u64,
    /// Threads running seeds (default: every core).
    #[arg(long)]
    jobs: Option<usize>,
    /// With --seed: print every line of the run's trace.
    #[arg(long, requires = "seed")]
    trace: bool,
}

/// Runs the simulation as `args` asks; exit code 1 when a run broke an
/// invariant, 4 when one could not run.
pub fn run_cli(args: SimArgs) -> ExitCode {
    let mut template = SimOptions::new(0);
    template.time = Duration::from_secs(args.sim_seconds);
    if let Some(seed) = args.seed {
        template.seed = seed;
        template.keep_trace = args.trace;
        return match run(&template) {
            Ok(outcome) => {
                if let Some(lines) = &outcome.trace {
                    for line in lines {
                        println!("{line}");
                    }
                }
                let report = serde_json::json!({
                    "seed": outcome.seed,
                    "simulated_ms": outcome.sim_ms,
                    "trace_lines": outcome.trace_lines,
                    "trace_digest": format!("{:016x}", outcome.digest),
                    "acked_writes": outcome.acked,
                    "faults": outcome.faults,
                    "terms_with_a_leader": outcome.terms_led,
                    "terms_with_two_leaders": outcome.shared_terms,
                    "violations": outcome.violations,
                });
                println!("{report:#}");
                if outcome.violations.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(crate::EXIT_LOCAL)
            }
        };
    }
    let mut batch = Batch::new(args.first_seed, args.seeds);
    if let Some(jobs) = args.jobs {
        batch.jobs = jobs;
    }
    batch.wall_limit = args.time_limit.map(Duration::from_secs);
    let jobs = batch.jobs;
    let summary = run_many(&template, &batch);
    for (i, (seed, violations)) in summary.failed.iter().enumerate() {
        eprintln!("seed {seed} broke an invariant:");
        for v in violations {
            eprintln!("  {v}");
        }
        eprintln!(
            "  replay: keel-lab sim --seed {seed} --sim-seconds {} --trace",
            args.sim_seconds
        );
        // Shrinking costs a few runs each: the first few failures only.
        if i < SHRINK_AT_MOST {
            let mut failing = template.clone();
            failing.seed = *seed;
            if let Some((short, outcome)) = shrink(&failing) {
                eprintln!(
                    "  shortest failing run: keel-lab sim --seed {seed} --sim-seconds {} --trace ({} trace lines; first violation: {})",
                    short.time.as_secs(),
                    outcome.trace_lines,
                    outcome.violations.first().map_or("", String::as_str)
                );
            }
        }
    }
    for (seed, e) in &summary.errors {
        eprintln!("seed {seed} could not run: {e}");
    }
    let minutes = summary.wall_ms as f64 / 60_000.0;
    let report = serde_json::json!({
        "runs": summary.runs,
        "first_seed": args.first_seed,
        "jobs": jobs,
        "simulated_seconds": summary.sim_ms / 1_000,
        "wall_seconds": summary.wall_ms as f64 / 1_000.0,
        "runs_per_minute": if minutes > 0.0 { summary.runs as f64 / minutes } else { 0.0 },
        "acked_writes": summary.acked,
        "faults": summary.faults,
        "failed_seeds": summary.failed.iter().map(|f| f.0).collect::<Vec<_>>(),
        "violations": summary.failed.iter().map(|f| f.1.len()).sum::<usize>(),
        "errors": summary.errors.len(),
    });
    println!("{report:#}");
    if !summary.errors.is_empty() {
        ExitCode::from(crate::EXIT_LOCAL)
    } else if summary.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
