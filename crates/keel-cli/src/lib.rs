//! Every `keel` subcommand.
//!
//! Exit codes: 0 success; 1 the cluster refused the request (an error code
//! is printed); 2 bad usage; 3 no controller reachable; 4 local failure
//! (bad data dir, cannot bind, ...). A node (`keel controller`, `keel
//! broker`) also exits 5 when its shutdown hangs and 6 when its storage
//! stalls.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod admin;
mod broker;
mod certs;
mod connections;
mod controller;
mod dev;
mod lab;
mod log;
mod logging;
mod node;
mod output;
mod tls;

/// Exit code: the cluster answered with an error code.
pub const EXIT_REFUSED: u8 = 1;
/// Exit code: no controller could be reached.
pub const EXIT_UNREACHABLE: u8 = 3;
/// Exit code: a local failure (data dir, bind, config).
pub const EXIT_LOCAL: u8 = 4;
/// Exit code of a node whose orderly shutdown did not finish in time (a
/// storage call that never returns, a flush that hangs): it exits anyway,
/// so a supervisor can restart it and its port is free.
pub const EXIT_STUCK: u8 = 5;
/// Exit code of a node whose storage stalled: a log flush, snapshot write
/// or open still running after `--storage-stall-timeout-ms` (a disk that
/// never answers). It exits from a watcher thread, as the stuck call never
/// returns.
pub const EXIT_STALLED: u8 = 6;

/// `keel --version`. A build with a deliberately unsafe feature says so
/// here (test harnesses refuse to run it by mistake) and at every start.
#[cfg(not(any(
    feature = "unsafe-ack-before-fsync",
    feature = "unsafe-skip-controller-epoch-check"
)))]
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("KEEL_GIT_COMMIT"),
    ")"
);
#[cfg(any(
    feature = "unsafe-ack-before-fsync",
    feature = "unsafe-skip-controller-epoch-check"
))]
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("KEEL_GIT_COMMIT"),
    ")",
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
    about = "Keel: a Kafka-style cluster controller on a Raft log",
    after_help = "Examples:\n  keel dev                                   # a local cluster\n  keel topics create orders -p 6 -r 3\n  keel topics describe --under-replicated\n  keel quorum describe --replication\n  keel completions bash > /etc/bash_completion.d/keel"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a controller node (one voter of the Raft quorum).
    #[command(
        after_help = "Example:\n  keel controller --node-id 1 --listen 127.0.0.11:9093 \\\n    --voters 1@127.0.0.11:9093,2@127.0.0.12:9093,3@127.0.0.13:9093 \\\n    --data-dir /var/lib/keel/c1 --cluster-id prod --metrics-listen 127.0.0.11:9100"
    )]
    Controller(controller::ControllerArgs),
    /// Run a broker process.
    #[command(
        after_help = "Example:\n  keel broker --broker-id 1 --listen 127.0.0.21:9092 \\\n    --controllers 127.0.0.11:9093,127.0.0.12:9093,127.0.0.13:9093 \\\n    --cluster-id prod --data-dir /var/lib/keel/b1"
    )]
    Broker(broker::BrokerArgs),
    /// Start a local 3-controller + 3-broker cluster (the quickest way to try Keel).
    #[command(
        after_help = "Examples:\n  keel dev                 # resumes the cluster in .keel-dev, Ctrl-C stops it\n  keel dev --fresh --brokers 5"
    )]
    Dev(dev::DevArgs),
    /// Jepsen-style fault test of a local cluster: nemesis, workload,
    /// checkers, report (runs `keel-lab jepsen`).
    #[command(disable_help_flag = true)]
    Jepsen(lab::LabArgs),
    /// Run a benchmark scenario against real local clusters (runs
    /// `keel-lab bench`).
    #[command(disable_help_flag = true)]
    Bench(lab::LabArgs),
    /// Deterministic simulation of the controller quorum: seeds on every
    /// core, or one seed replayed exactly (runs `keel-lab sim`).
    #[command(disable_help_flag = true)]
    Sim(lab::LabArgs),
    /// Topics: create, delete, list, describe, alter-config.
    Topics(admin::TopicsArgs),
    /// Topic configs with their sources, and cluster-wide defaults
    /// (`--entity-default`), as kafka-configs does.
    Configs(admin::ConfigsArgs),
    /// Partitions: grow a topic to a total (`set`, alias `add`).
    Partitions(admin::PartitionsArgs),
    /// The broker cluster as the active controller sees it.
    Cluster(admin::ClusterArgs),
    /// The controller quorum: describe, add or remove voters.
    Quorum(admin::QuorumArgs),
    /// Partition reassignments: start, cancel, list.
    Reassign(admin::ReassignArgs),
    /// Elect preferred or unclean leaders.
    ElectLeaders(admin::ElectArgs),
    /// Every controller and broker: role, term, indexes, lag, disk free,
    /// version; exits 1 when anything is unhealthy.
    Health(admin::HealthArgs),
    /// ACLs: who may do what (add, remove, list).
    Acls(admin::AclsArgs),
    /// Users' SCRAM credentials for Kafka SASL logins (create, delete,
    /// list).
    Users(admin::UsersArgs),
    /// Decode a controller's Raft log and snapshot offline.
    Log(log::LogArgs),
    /// Certificates: a cluster CA and one certificate per node and user.
    #[command(
        after_help = "Example:\n  keel certs init --dir certs --cluster-id prod --controllers 3 --brokers 3 --users admin"
    )]
    Certs(certs::CertsArgs),
    /// Print a shell completion script (bash, zsh, fish, ...).
    #[command(
        after_help = "Examples:\n  keel completions bash > /etc/bash_completion.d/keel\n  keel completions zsh > \"${fpath[1]}/_keel\"\n  keel completions fish > ~/.config/fish/completions/keel.fish"
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `keel completions SHELL`: the completion script on stdout.
fn completions(shell: clap_complete::Shell) -> ExitCode {
    use clap::CommandFactory;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "keel", &mut script);
    output::write_line(format_args!(
        "{}",
        String::from_utf8_lossy(&script).trim_end()
    ));
    ExitCode::SUCCESS
}

/// Entry point of the `keel` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // The laboratory is another binary: run it in place of this process.
    match &cli.command {
        Command::Jepsen(a) => return lab::forward("jepsen", a),
        Command::Bench(a) => return lab::forward("bench", a),
        Command::Sim(a) => return lab::forward("sim", a),
        _ => {}
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    let workers = match &cli.command {
        Command::Controller(a) => controller::worker_threads(a),
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
            Command::Jepsen(_) | Command::Bench(_) | Command::Sim(_) => {
                unreachable!("forwarded to keel-lab")
            }
            Command::Topics(a) => admin::topics(a).await,
            Command::Configs(a) => admin::configs(a).await,
            Command::Partitions(a) => admin::partitions(a).await,
            Command::Cluster(a) => admin::cluster(a).await,
            Command::Quorum(a) => admin::quorum(a).await,
            Command::Reassign(a) => admin::reassign(a).await,
            Command::ElectLeaders(a) => admin::elect(a).await,
            Command::Health(a) => admin::health(a).await,
            Command::Acls(a) => admin::acls(a).await,
            Command::Users(a) => admin::users(a).await,
            Command::Log(a) => log::run(a),
            Command::Certs(a) => certs::run(a),
            Command::Completions { shell } => completions(shell),
        }
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every subcommand's arguments are consistent (no clashing short
    /// flags, ids or conflicts naming unknown arguments).
    #[test]
    fn the_command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }

    /// Every visible option and argument of every command says what it is.
    #[test]
    fn every_option_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if a.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "keel", &mut missing);
        assert!(missing.is_empty(), "options without help: {missing:#?}");
    }
}
