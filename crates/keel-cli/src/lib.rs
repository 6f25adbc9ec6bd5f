//! Every `keel` subcommand.
//!
//! Exit codes: 0 success; 1 the cluster refused the request (an error code
//! is printed); 2 bad usage; 3 no controller reachable; 4 local failure
//! (bad data dir, cannot bind, ...).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod admin;
mod bench;
mod broker;
mod certs;
mod controller;
mod dev;
mod jepsen;
mod log;
mod logging;
mod output;
mod tls;

/// Exit code: the cluster answered with an error code.
pub const EXIT_REFUSED: u8 = 1;
/// Exit code: no controller could be reached.
pub const EXIT_UNREACHABLE: u8 = 3;
/// Exit code: a local failure (data dir, bind, config).
pub const EXIT_LOCAL: u8 = 4;

/// `keel --version`. A build with a deliberately unsafe feature says so
/// here (test harnesses refuse to run it by mistake) and at every start.
#[cfg(not(any(
    feature = "unsafe-ack-before-fsync",
    feature = "unsafe-skip-controller-epoch-check"
)))]
const VERSION: &str = env!("CARGO_PKG_VERSION");
#[cfg(any(
    feature = "unsafe-ack-before-fsync",
    feature = "unsafe-skip-controller-epoch-check"
))]
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " UNSAFE build (a demonstration feature that breaks Keel's guarantees is on; for tests only)"
);

/// The deliberately unsafe features this build has.
pub(crate) fn unsafe_features() -> Vec<&'static str> {
    let mut v = Vec::new();
    if cfg!(feature = "unsafe-ack-before-fsync") {
        v.push("unsafe-ack-before-fsync");
    }
    if cfg!(feature = "unsafe-skip-controller-epoch-check") {
        v.push("unsafe-skip-controller-epoch-check");
    }
    v
}

#[derive(Parser, Debug)]
#[command(
    name = "keel",
    version = VERSION,
    about = "Keel: a Kafka-style cluster controller on a Raft log"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a controller node (one voter of the Raft quorum).
    Controller(controller::ControllerArgs),
    /// Run a broker process.
    Broker(broker::BrokerArgs),
    /// Start a local 3-controller + 3-broker cluster (the quickest way to try Keel).
    Dev(dev::DevArgs),
    /// Jepsen-style fault test of a local cluster: nemesis, workload, checkers, report.
    Jepsen(jepsen::JepsenArgs),
    /// Run a benchmark scenario against real local clusters.
    Bench(bench::BenchArgs),
    /// Topics: create, delete, list, describe, alter-config.
    Topics(admin::TopicsArgs),
    /// Partitions: add partitions to a topic.
    Partitions(admin::PartitionsArgs),
    /// The broker cluster as the active controller sees it.
    Cluster(admin::ClusterArgs),
    /// The controller quorum: describe, add or remove voters.
    Quorum(admin::QuorumArgs),
    /// Partition reassignments: start, cancel, list.
    Reassign(admin::ReassignArgs),
    /// Elect preferred or unclean leaders.
    ElectLeaders(admin::ElectArgs),
    /// ACLs: who may do what (add, remove, list).
    Acls(admin::AclsArgs),
    /// Decode a controller's Raft log and snapshot offline.
    Log(log::LogArgs),
    /// Certificates: a cluster CA and one certificate per node and user.
    Certs(certs::CertsArgs),
    /// The gRPC echo server `keel bench compare` measures as its transport
    /// ceiling (started by the bench, not by hand).
    #[command(name = "bench-echo-server", hide = true)]
    BenchEchoServer(bench::EchoServerArgs),
}

/// Entry point of the `keel` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    let workers = match &cli.command {
        Command::Controller(a) => controller::worker_threads(a),
        Command::Bench(a) => bench::load_threads(a),
        _ => None,
    };
    if let Some(n) = workers {
        builder.worker_threads(n);
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
            Command::Controller(a) => controller::run(a).await,
            Command::Broker(a) => broker::run(a).await,
            Command::Dev(a) => dev::run(a).await,
            Command::Jepsen(a) => jepsen::run(a).await,
            Command::Bench(a) => bench::run(a).await,
            Command::Topics(a) => admin::topics(a).await,
            Command::Partitions(a) => admin::partitions(a).await,
            Command::Cluster(a) => admin::cluster(a).await,
            Command::Quorum(a) => admin::quorum(a).await,
            Command::Reassign(a) => admin::reassign(a).await,
            Command::ElectLeaders(a) => admin::elect(a).await,
            Command::Acls(a) => admin::acls(a).await,
            Command::Log(a) => log::run(a),
            Command::Certs(a) => certs::run(a),
            Command::BenchEchoServer(a) => bench::echo_server(a).await,
        }
    })
}
