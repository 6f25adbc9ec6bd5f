//! Replays one seed and prints its trace: `cargo run -p keel-sim --example
//! replay -- SEED [SIM_SECONDS] [ack-before-flush]` (what `keel-lab sim
//! --seed S --trace` prints, without building the lab).

use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let seed = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut options = keel_sim::SimOptions::new(seed);
    if let Some(secs) = args.next().and_then(|s| s.parse().ok()) {
        options.time = Duration::from_secs(secs);
    }
    if args.next().as_deref() == Some("ack-before-flush") {
        options.disk = keel_sim::DiskMode::AckBeforeFlush;
    }
    options.keep_trace = true;
    match keel_sim::run(&options) {
        Ok(outcome) => {
            for line in outcome.trace.iter().flatten() {
                println!("{line}");
            }
            println!("violations: {:?}", outcome.violations);
        }
        Err(e) => eprintln!("error: {e}"),
    }
}
