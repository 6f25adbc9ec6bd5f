//! The `keel-lab` binary: the laboratory that the production `keel` binary
//! leaves out. `keel-lab jepsen` runs fault tests and `keel-lab bench` runs
//! benchmark scenarios against clusters of the `keel` binary beside this
//! one (or `$KEEL_BIN`); `keel jepsen ...` and `keel bench ...` run this
//! binary with the same arguments.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod jepsen;
mod sim;

/// mimalloc, as in `keel`: the bench measures from a load generator in
/// this process.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit code: a local failure (no `keel` binary, cannot bind).
pub const EXIT_LOCAL: u8 = 4;

#[derive(Parser, Debug)]
#[command(
    name = "keel-lab",
    version,
    about = "Keel's laboratory: fault tests and benchmarks of real local clusters of the `keel` binary beside it",
    after_help = "Examples:\n  keel-lab jepsen --nemesis partition --time-limit 60\n  keel-lab bench commit --writers 1,8,64 --out-dir bench-out\n  keel-lab sim --seeds 1000\n\nThe clusters run the `keel` binary in this binary's directory; set KEEL_BIN to run another."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Jepsen-style fault test of a local cluster: nemesis, workload, checkers, report.
    #[command(after_help = "Example:\n  keel-lab jepsen --nemesis partition --time-limit 60")]
    Jepsen(jepsen::JepsenArgs),
    /// Run a benchmark scenario against real local clusters.
    #[command(
        after_help = "Example:\n  keel-lab bench commit --writers 1,8,64 --out-dir bench-out"
    )]
    Bench(bench::BenchArgs),
    /// The gRPC echo server `keel-lab bench compare` measures as its
    /// transport ceiling (started by the bench, not by hand).
    #[command(name = "bench-echo-server", hide = true)]
    BenchEchoServer(bench::EchoServerArgs),
    /// Deterministic simulation of the controller quorum: many seeds on
    /// every core, or one seed replayed exactly.
    #[command(
        after_help = "Examples:\n  keel-lab sim --seeds 10000 --time-limit 600\n  keel-lab sim --seed 42 --trace"
    )]
    Sim(sim::SimArgs),
}

/// The `keel` binary the clusters run: `$KEEL_BIN`, else `keel` in this
/// binary's directory (where cargo builds both).
pub fn keel_exe() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("KEEL_BIN") {
        let p = PathBuf::from(p);
        if !p.is_file() {
            return Err(format!(
                "KEEL_BIN names {}, which is not a file",
                p.display()
            ));
        }
        return Ok(p);
    }
    let me = std::env::current_exe()
        .map_err(|e| format!("cannot find the keel-lab binary's own path: {e}"))?;
    let keel = me.with_file_name("keel");
    if !keel.is_file() {
        return Err(format!(
            "no keel binary at {} (beside keel-lab): build it with `cargo build -p keel`, or set KEEL_BIN",
            keel.display()
        ));
    }
    Ok(keel)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Each simulated run has a runtime of its own, on threads of its own.
    let cli = match cli.command {
        Command::Sim(a) => return sim::run_cli(a),
        command => Cli { command },
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Command::Bench(a) = &cli.command {
        if let Some(n) = bench::load_threads(a) {
            builder.worker_threads(n);
        }
    }
    let rt = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_LOCAL);
        }
    };
    rt.block_on(async move {
        match cli.command {
            Command::Jepsen(a) => jepsen::run(a).await,
            Command::Bench(a) => bench::run(a).await,
            Command::BenchEchoServer(a) => bench::echo_server(a).await,
            Command::Sim(_) => unreachable!("run before the runtime starts"),
        }
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// The command line is consistent (no clashing flags or ids).
    #[test]
    fn the_command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
