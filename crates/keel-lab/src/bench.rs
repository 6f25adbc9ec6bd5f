//! `keel-lab bench <scenario>` (and `keel bench`, which runs it): benchmark
//! scenarios against real local clusters (controllers are child processes
//! of this binary running the `keel` beside it, on their own
//! 127.0.x.y addresses, with data in a temp dir). Prints a table and a
//! one-line summary, writes `<out-dir>/<scenario>.json`, and with `--json`
//! prints the JSON to stdout too.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use keel_bench::broker_failure::BrokerFailureParams;
use keel_bench::commit::{CommitParams, KeelApi};
use keel_bench::compare::CompareParams;
use keel_bench::create_topics::CreateTopicsParams;
use keel_bench::failover::FailoverParams;
use keel_bench::heartbeats::HeartbeatParams;
use keel_bench::scale::ScaleParams;
use keel_bench::{Connections, Env, Report};

use crate::EXIT_LOCAL;

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Durable commit throughput and latency of small metadata records.
    Commit,
    /// Time from SIGKILL of the active controller to the first acknowledged write.
    Failover,
    /// Heartbeat latency and false fencing with N simulated brokers.
    Heartbeats,
    /// Leadership moves off a real broker that is SIGKILLed or SIGTERMed.
    BrokerFailure,
    /// Create 100,000 partitions through the admin API, then delete them.
    CreateTopics,
    /// Memory, snapshot and disk figures of a 1,000,000-partition image.
    Scale,
    /// Metadata over 100,000 partitions through a broker's Kafka listener
    /// (SSL), CreateTopics through it (SASL_SSL, SCRAM-SHA-512) against
    /// Keel's gRPC API, a SCRAM login's cost and a storm of 1,000 logins.
    KafkaMetadata,
    /// The `commit` workload against ZooKeeper and etcd ensembles (started
    /// by `scripts/bench-compare.sh`) and Keel, in one run.
    Compare,
    /// Every scenario but `compare`, one after the other.
    All,
}

/// Worker threads for the runtime `keel-lab bench` runs in (built before the
/// scenario starts): `--load-threads`, else 1 for the write-throughput
/// scenarios, else the runtime's default.
pub fn load_threads(a: &BenchArgs) -> Option<usize> {
    let default = match a.scenario {
        Scenario::Commit | Scenario::Compare => Some(1),
        _ => None,
    };
    a.load_threads.map(usize::from).or(default)
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Which scenario to run.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Also print the JSON result to stdout.
    #[arg(long)]
    json: bool,
    /// Where `<scenario>.json` is written.
    #[arg(long, default_value = "bench-results")]
    out_dir: PathBuf,
    /// Worker threads of this process's runtime, which runs the load
    /// generator [default: 1 for commit and compare, one per core for the
    /// rest]. One thread leaves the other core to the servers, and each
    /// client's requests that are ready together leave together.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    load_threads: Option<u16>,
    /// failover: trials per image size [default: 10]; broker-failure: trials
    /// per measurement [default: 3]; compare: trials per level and system
    /// [default: 3]; commit with --tls: rounds of the TLS comparison per
    /// writer count [default: 3].
    #[arg(long)]
    trials: Option<usize>,
    /// failover: partitions of the large image, 0 = only the empty one
    /// [default: 1000000]; broker-failure: partitions led by broker 1 [default: 100000];
    /// create-topics: partitions created per trial [default: 100000];
    /// scale: partitions of the image [default: 1000000].
    #[arg(long)]
    partitions: Option<u64>,
    /// create-topics, scale and kafka-metadata: topics per CreateTopics
    /// (and DeleteTopics) call [default: 10 for create-topics, 50 for
    /// scale, 1 for kafka-metadata (the same through both APIs)].
    #[arg(long)]
    topics_per_request: Option<usize>,
    /// create-topics, scale and kafka-metadata: calls in flight at once
    /// [default: 4; 64 for kafka-metadata].
    #[arg(long)]
    create_concurrency: Option<usize>,
    /// scale: data dirs on LazyFS, and a standby's restart after a power
    /// cut (SIGKILL + unsynced writes dropped) timed too. Needs root and
    /// /dev/fuse; LazyFS is built on first use.
    #[arg(long)]
    power_cut: bool,
    /// failover: seconds allowed for creating the large image.
    #[arg(long, default_value_t = 240.0)]
    create_budget_secs: f64,
    /// failover: per-attempt timeout of the write retried after the kill.
    #[arg(long, default_value_t = 300)]
    attempt_timeout_ms: u64,
    /// failover: give up on a trial after this many seconds without an acknowledged write.
    #[arg(long, default_value_t = 60.0)]
    trial_timeout_secs: f64,
    /// failover: skip the empty image.
    #[arg(long)]
    skip_empty: bool,
    /// commit: writer counts, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    writers: Vec<usize>,
    /// commit: seconds per writer level (and for the bulk level).
    #[arg(long, default_value_t = 10.0)]
    level_secs: f64,
    /// commit: records per request at the bulk level.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    bulk_keys: u64,
    /// commit: writers at the bulk level, each with one request in flight.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    bulk_writers: u64,
    /// commit: seconds for each storage ceiling (three stores appending bulk
    /// entries at once on this disk, through sled and through a plain file,
    /// with no Raft or network), run after the cluster has stopped; 0 skips
    /// it.
    #[arg(long, default_value_t = 4.0, value_parser = ceiling_secs)]
    storage_ceiling_secs: f64,
    /// heartbeats: simulated broker counts, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "250,500,1000,2500,5000,10000,20000"
    )]
    brokers: Vec<usize>,
    /// heartbeats: measurement seconds per level.
    #[arg(long, default_value_t = 20.0)]
    heartbeat_secs: f64,
    /// heartbeats: run every level even after one fails.
    #[arg(long)]
    no_stop_on_failure: bool,
    /// heartbeats: share this many connections among all stand-in brokers,
    /// with no listener for the controller's channel (without it, each has
    /// its own connection and listener, on its own address).
    #[arg(long)]
    pool: Option<usize>,
    /// heartbeats: skip the failover after each level (the active
    /// controller killed, every broker's fresh session timed).
    #[arg(long)]
    no_failover: bool,
    /// compare: ZooKeeper ensemble, `host:port` comma separated (the first is
    /// tried first; the bench finds and talks to the leader).
    #[arg(long, value_delimiter = ',')]
    zookeeper: Vec<String>,
    /// compare: etcd endpoints, `http://host:port` comma separated (the bench
    /// finds and talks to the leader).
    #[arg(long, value_delimiter = ',')]
    etcd: Vec<String>,
    /// commit and compare: how Keel's writers send ops: `session` (one
    /// pipelined `AdminService.Write` stream per writer) or `unary` (one
    /// IncrementalAlterConfigs call per op).
    #[arg(long, value_enum, default_value_t = KeelApiArg::Session)]
    keel_api: KeelApiArg,
    /// commit and compare: `per-writer` (each writer opens its own
    /// connection) or `shared` (all writers of a system share one
    /// connection: one ZooKeeper session, one etcd gRPC channel, one Keel
    /// write session).
    #[arg(long, value_enum, default_value_t = ConnectionsArg::PerWriter)]
    connections: ConnectionsArg,
    /// compare: leave out the `grpc-echo` row (the transport ceiling: a gRPC
    /// echo server driven by the same writers).
    #[arg(long)]
    no_echo: bool,
    /// commit and compare: also measure Keel over mutual TLS in the same
    /// run (a second quorum, its levels interleaved with plaintext ones)
    /// and report ops/s and the servers' CPU per op of both, with TLS ÷
    /// plaintext, per writer count (the aim is stated at 64 writers: keep
    /// 64 in --writers, as the default is). failover: run the scenario on
    /// a TLS cluster. Other scenarios ignore it.
    #[arg(long)]
    tls: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ConnectionsArg {
    PerWriter,
    Shared,
}

impl From<ConnectionsArg> for Connections {
    fn from(a: ConnectionsArg) -> Self {
        match a {
            ConnectionsArg::PerWriter => Connections::PerWriter,
            ConnectionsArg::Shared => Connections::Shared,
        }
    }
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum KeelApiArg {
    Session,
    Unary,
}

impl From<KeelApiArg> for KeelApi {
    fn from(a: KeelApiArg) -> Self {
        match a {
            KeelApiArg::Session => KeelApi::Session,
            KeelApiArg::Unary => KeelApi::Unary,
        }
    }
}

fn emit(a: &BenchArgs, r: &Report) -> Result<(), String> {
    println!("{}", r.table);
    println!("{}", r.summary);
    let path = r
        .write(&a.out_dir)
        .map_err(|e| format!("cannot write results: {e:#}"))?;
    eprintln!("[bench] wrote {}", path.display());
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r.json).unwrap_or_default()
        );
    }
    Ok(())
}

/// `--storage-ceiling-secs`: 0 (skip) to 60 seconds.
fn ceiling_secs(s: &str) -> Result<f64, String> {
    let secs: f64 = s
        .parse()
        .map_err(|e| format!("{s:?} is not a number: {e}"))?;
    if (0.0..=60.0).contains(&secs) {
        Ok(secs)
    } else {
        Err(format!("{secs} is not between 0 and 60"))
    }
}

async fn one(a: &BenchArgs, env: &Env, s: Scenario) -> Result<(), String> {
    let r = match s {
        Scenario::Commit => {
            let p = CommitParams {
                writers: a.writers.clone(),
                level_secs: a.level_secs,
                bulk_secs: a.level_secs,
                bulk_keys: a.bulk_keys as usize,
                bulk_writers: a.bulk_writers as usize,
                api: a.keel_api.into(),
                connections: a.connections.into(),
                storage_ceiling_secs: a.storage_ceiling_secs,
                tls: a.tls,
                tls_rounds: a.trials.unwrap_or(CommitParams::default().tls_rounds),
                ..CommitParams::default()
            };
            keel_bench::commit::run(env, &p).await
        }
        Scenario::Failover => {
            let p = FailoverParams {
                trials: a.trials.unwrap_or(10),
                partitions: a.partitions.unwrap_or(1_000_000),
                create_budget_secs: a.create_budget_secs,
                skip_empty: a.skip_empty,
                attempt_timeout_ms: a.attempt_timeout_ms,
                trial_timeout_secs: a.trial_timeout_secs,
                tls: a.tls,
                ..FailoverParams::default()
            };
            keel_bench::failover::run(env, &p).await
        }
        Scenario::Heartbeats => {
            let p = HeartbeatParams {
                ladder: a.brokers.clone(),
                level_secs: a.heartbeat_secs,
                stop_on_failure: !a.no_stop_on_failure,
                pool: a.pool.filter(|n| *n > 0),
                failover: !a.no_failover,
                ..HeartbeatParams::default()
            };
            keel_bench::heartbeats::run(env, &p).await
        }
        Scenario::BrokerFailure => {
            let d = BrokerFailureParams::default();
            let p = BrokerFailureParams {
                trials: a.trials.unwrap_or(d.trials),
                partitions: a.partitions.unwrap_or(d.partitions),
                ..d
            };
            keel_bench::broker_failure::run(env, &p).await
        }
        Scenario::CreateTopics => {
            let d = CreateTopicsParams::default();
            let p = CreateTopicsParams {
                trials: a.trials.unwrap_or(d.trials),
                partitions: a.partitions.unwrap_or(d.partitions),
                topics_per_request: a.topics_per_request.unwrap_or(d.topics_per_request),
                concurrency: a.create_concurrency.unwrap_or(d.concurrency),
                ..d
            };
            keel_bench::create_topics::run(env, &p).await
        }
        Scenario::KafkaMetadata => {
            let d = keel_bench::kafka_metadata::KafkaMetadataParams::default();
            let p = keel_bench::kafka_metadata::KafkaMetadataParams {
                partitions: a.partitions.unwrap_or(d.partitions),
                concurrency: a.create_concurrency.unwrap_or(d.concurrency),
                topics_per_request: a.topics_per_request.unwrap_or(d.topics_per_request),
                ..d
            };
            keel_bench::kafka_metadata::run(env, &p).await
        }
        Scenario::Scale => {
            let d = ScaleParams::default();
            let p = ScaleParams {
                partitions: a.partitions.unwrap_or(d.partitions),
                topics_per_request: a.topics_per_request.unwrap_or(d.topics_per_request),
                create_concurrency: a.create_concurrency.unwrap_or(d.create_concurrency),
                power_cut: a.power_cut,
                ..d
            };
            keel_bench::scale::run(env, &p).await
        }
        Scenario::Compare => {
            let d = CompareParams::default();
            let p = CompareParams {
                writers: a.writers.clone(),
                level_secs: a.level_secs,
                trials: a.trials.unwrap_or(d.trials),
                zookeeper: a.zookeeper.clone(),
                etcd: a.etcd.clone(),
                api: a.keel_api.into(),
                connections: a.connections.into(),
                echo: !a.no_echo,
                tls: a.tls,
                ..d
            };
            keel_bench::compare::run(env, &p).await
        }
        Scenario::All => unreachable!("expanded by the caller"),
    }
    .map_err(|e| format!("{s:?} failed: {e:#}"))?;
    emit(a, &r)
}

/// `keel-lab bench-echo-server` (hidden): the gRPC echo server `keel-lab
/// bench compare` starts as its transport ceiling.
#[derive(Args, Debug)]
pub struct EchoServerArgs {
    /// Address to listen on (port 0: any free port).
    #[arg(long)]
    pub listen: std::net::SocketAddr,
}

/// Binds, prints `listening on <addr>` (the line the bench waits for) and
/// serves until killed.
pub async fn echo_server(a: EchoServerArgs) -> ExitCode {
    use std::io::Write as _;
    let listener = match tokio::net::TcpListener::bind(a.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", a.listen);
            return ExitCode::from(EXIT_LOCAL);
        }
    };
    let bound = match listener.local_addr() {
        Ok(addr) => addr,
        Err(e) => {
            eprintln!("error: no local address: {e}");
            return ExitCode::from(EXIT_LOCAL);
        }
    };
    let mut out = std::io::stdout();
    if writeln!(out, "{}{bound}", keel_bench::echo::LISTENING)
        .and_then(|()| out.flush())
        .is_err()
    {
        return ExitCode::from(EXIT_LOCAL);
    }
    match keel_bench::echo::serve(listener).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_LOCAL)
        }
    }
}

pub async fn run(a: BenchArgs) -> ExitCode {
    if a.trials == Some(0)
        || a.writers.is_empty()
        || a.brokers.is_empty()
        || a.writers.contains(&0)
        || a.topics_per_request == Some(0)
        || a.create_concurrency == Some(0)
    {
        eprintln!("error: --trials, --writers, --brokers, --topics-per-request and --create-concurrency must be non-empty and positive");
        return ExitCode::from(2);
    }
    let exe = match crate::keel_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_LOCAL);
        }
    };
    if cfg!(debug_assertions) {
        eprintln!("[bench] WARNING: this is a debug build; measure with `cargo build --release`");
    }
    let env = Env { exe };
    let scenarios = match a.scenario {
        Scenario::All => vec![
            Scenario::Commit,
            Scenario::Failover,
            Scenario::Heartbeats,
            Scenario::BrokerFailure,
            Scenario::CreateTopics,
            Scenario::Scale,
        ],
        s => vec![s],
    };
    let mut failed = false;
    for s in scenarios {
        if let Err(e) = one(&a, &env, s).await {
            eprintln!("error: {e}");
            failed = true;
        }
    }
    if failed {
        ExitCode::from(EXIT_LOCAL)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn threads(args: &[&str]) -> Option<usize> {
        let cmd =
            Cmd::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).unwrap();
        load_threads(&cmd.args)
    }

    #[test]
    fn write_scenarios_default_to_one_load_thread() {
        assert_eq!(threads(&["commit"]), Some(1));
        assert_eq!(threads(&["compare"]), Some(1));
        assert_eq!(threads(&["heartbeats"]), None);
        assert_eq!(threads(&["all"]), None);
        assert_eq!(threads(&["commit", "--load-threads", "2"]), Some(2));
        assert_eq!(threads(&["heartbeats", "--load-threads", "4"]), Some(4));
        assert!(Cmd::try_parse_from(["bench", "commit", "--load-threads", "0"]).is_err());
    }
}
