//! `keel-lab jepsen` (and `keel jepsen`, which runs it): Jepsen-style fault testing of a real local cluster (see
//! the `keel-jepsen` crate). Needs root for network partitions (iptables)
//! and power cuts (LazyFS mounts).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use keel_jepsen::nemesis::Family;
use keel_jepsen::timing::FaultLength;
use keel_jepsen::Config;

#[derive(Args, Debug)]
pub struct JepsenArgs {
    /// How long the workload and the nemesis run, in seconds.
    #[arg(long, default_value_t = 60)]
    time_limit: u64,
    /// Fault families, comma separated: partition, partition-one-way,
    /// bridge, majorities-ring, isolate-leader, kill, kill-all, pause,
    /// net-slow, zombie, intruder, power, disk, or all. The network
    /// families, `net-slow` and `power` need root.
    #[arg(long, default_value = "all")]
    nemesis: String,
    /// Seed of the nemesis and workload choices (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Where each run's directory goes.
    #[arg(long, default_value = "jepsen-results")]
    results_dir: PathBuf,
    /// Number of brokers (1-9).
    #[arg(long, default_value_t = 3)]
    brokers: usize,
    /// Concurrent workload clients.
    #[arg(long, default_value_t = 5)]
    clients: usize,
    /// Upper bound of a fault's length in seconds (`--fault-mode drawn`,
    /// the default: lengths from 50 ms up to it, mostly 200-900 ms, the
    /// first ones just either side of the controllers' lease and election
    /// timeout), or every fault's length (`--fault-mode fixed`).
    #[arg(long, default_value_t = 10)]
    fault_secs: u64,
    /// `drawn` or `fixed`; see --fault-secs.
    #[arg(long, default_value = "drawn", value_parser = ["drawn", "fixed"])]
    fault_mode: String,
    /// Seconds of healed cluster between faults.
    #[arg(long, default_value_t = 10)]
    heal_secs: u64,
    /// Bound for recovery after the final heal, in seconds.
    #[arg(long, default_value_t = 30)]
    recovery_secs: u64,
    /// Topic names in the key space (small, so operations collide).
    #[arg(long, default_value_t = 8)]
    names: usize,
    /// Run every node and harness client in plaintext instead of mutual
    /// TLS (the intruder nemesis then has no certificates to forge: `all`
    /// leaves it out, naming it is an error).
    #[arg(long)]
    plaintext: bool,
    /// What the workload's clients speak: `grpc` (Keel's admin API on the
    /// controllers) or `kafka` (Kafka's protocol on a Kafka listener that
    /// every broker then gets, forwarding admin requests to the active
    /// controller: SASL_SSL as the SCRAM user `User:jepsen-client`, with
    /// ACLs for just the workload, or plaintext with --plaintext). Final
    /// reads and probes always use gRPC. The intruder nemesis gives the
    /// brokers Kafka listeners too, and attacks them.
    #[arg(long, default_value = "grpc", value_parser = ["grpc", "kafka"])]
    client: String,
}

pub async fn run(a: JepsenArgs) -> ExitCode {
    let mut families = match Family::parse_list(&a.nemesis) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(keel_jepsen::EXIT_USAGE);
        }
    };
    if a.plaintext {
        // `all` means every family that can run without TLS; asking for
        // the intruder by name is a mistake.
        if a.nemesis.split(',').any(|p| p.trim() == "intruder") {
            eprintln!("error: the intruder nemesis forges certificates and needs TLS; drop --plaintext or `intruder`");
            return ExitCode::from(keel_jepsen::EXIT_USAGE);
        }
        families.remove(&Family::Intruder);
    }
    if a.brokers == 0
        || a.brokers > 9
        || a.clients == 0
        || a.names == 0
        || a.time_limit == 0
        || a.fault_secs == 0
    {
        eprintln!(
            "error: --brokers must be 1-9; --clients, --names, --time-limit and --fault-secs must be positive"
        );
        return ExitCode::from(keel_jepsen::EXIT_USAGE);
    }
    let exe = match crate::keel_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(keel_jepsen::EXIT_LOCAL);
        }
    };
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64 % 1_000_000)
            .unwrap_or(1)
    });
    let client = match keel_jepsen::kafka_client::ClientKind::parse(&a.client) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(keel_jepsen::EXIT_USAGE);
        }
    };
    let cfg = Config {
        exe,
        time_limit: Duration::from_secs(a.time_limit),
        families,
        seed,
        results_dir: a.results_dir,
        brokers: a.brokers,
        clients: a.clients,
        fault: if a.fault_mode == "fixed" {
            FaultLength::Fixed(Duration::from_secs(a.fault_secs))
        } else {
            FaultLength::Drawn(Duration::from_secs(a.fault_secs))
        },
        heal: Duration::from_secs(a.heal_secs),
        recovery_bound: Duration::from_secs(a.recovery_secs),
        names: a.names,
        replication_factor: a.brokers.min(2) as u32,
        tls: !a.plaintext,
        client,
    };
    ExitCode::from(keel_jepsen::run(cfg).await)
}
