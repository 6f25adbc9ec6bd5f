//! `keel cluster`: describe the brokers, unregister a fenced one.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use keel_proto::client::ControllerClient;
use keel_proto::pb;
use serde_json::json;

use super::Common;
use crate::output::{self, Output};

#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    cmd: ClusterCmd,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand, Debug)]
enum ClusterCmd {
    /// Every registered broker and its state, and every controller with
    /// its Kafka listener.
    #[command(after_help = "Example:\n  keel cluster describe -o json")]
    Describe,
    /// Remove a fenced broker for good. A broker that is alive (still
    /// heartbeating) is refused, changing nothing: stop it first.
    #[command(
        after_help = "Example (broker 4 is stopped and fenced):\n  keel cluster unregister-broker --id 4"
    )]
    UnregisterBroker {
        /// The broker's id.
        #[arg(long)]
        id: u32,
        /// Unregister it even though it still heartbeats while fenced (an
        /// unfenced broker is refused either way).
        #[arg(long)]
        force: bool,
    },
}

fn broker_state(b: &pb::BrokerInfo) -> &'static str {
    if b.fenced {
        "fenced"
    } else if b.shutting_down {
        "shutting_down"
    } else {
        "active"
    }
}

/// Runs `keel cluster`: describe, or unregister a broker.
pub async fn cluster(a: ClusterArgs) -> ExitCode {
    let client = match a.common.client() {
        Ok(c) => c,
        Err(code) => return code,
    };
    match a.cmd {
        ClusterCmd::Describe => describe(&client, &a.common).await,
        ClusterCmd::UnregisterBroker { id, force } => {
            unregister_forced(&client, a.common.output, id, force).await
        }
    }
}

/// `cluster describe`: the brokers, then every controller with where its
/// Kafka listener is.
async fn describe(client: &ControllerClient, common: &Common) -> ExitCode {
    let r = call!(
        client,
        admin,
        describe_cluster,
        pb::DescribeClusterRequest::default()
    );
    let quorum = call!(
        client,
        admin,
        describe_quorum,
        pb::DescribeQuorumRequest::default()
    );
    let transport = match common.transport() {
        Ok(t) => t,
        Err(code) => return code,
    };
    let controllers = controllers(&transport, &quorum).await;
    match common.output {
        Output::Json => output::json(&describe_json(&r, &controllers)),
        Output::Table => {
            print_brokers(&r);
            crate::outln!("");
            print_controllers(&controllers);
        }
    }
    ExitCode::SUCCESS
}

/// The `cluster describe` JSON (stable field names).
fn describe_json(r: &pb::DescribeClusterResponse, controllers: &[Controller]) -> serde_json::Value {
    json!({
    "cluster_id": r.cluster_id,
    "controller_id": r.controller_id,
    "controller_epoch": r.controller_epoch,
    "controllers": controllers.iter().map(|c| json!({
        "id": c.id,
        "address": c.address,
        "status": c.status,
        "kafka_address": c.kafka_address,
        "error": c.error,
    })).collect::<Vec<_>>(),
    "brokers": r.brokers.iter().filter_map(|d| {
        let b = d.broker.as_ref()?;
        Some(json!({
            "id": b.broker_id,
            "epoch": b.broker_epoch,
            "address": b.address,
            "kafka_address": b.kafka_address,
            "rack": b.rack,
            "state": broker_state(b),
            "last_heartbeat_ms": d.last_heartbeat_ms,
            "log_dirs": d.log_dirs,
            "offline_log_dirs": d.offline_log_dirs,
            "disks": d.disks.iter().map(|s| json!({
                "path": s.path,
                "free_bytes": s.free_bytes,
                "total_bytes": s.total_bytes,
            })).collect::<Vec<_>>(),
        }))
    }).collect::<Vec<_>>(),
    })
}

/// The `cluster describe` header line and broker table.
fn print_brokers(r: &pb::DescribeClusterResponse) {
    crate::outln!(
        "Cluster {}  active controller {}  epoch {}",
        r.cluster_id,
        r.controller_id,
        r.controller_epoch
    );
    let rows: Vec<Vec<String>> = r
        .brokers
        .iter()
        .filter_map(|d| {
            let b = d.broker.as_ref()?;
            Some(vec![
                b.broker_id.to_string(),
                b.broker_epoch.to_string(),
                b.address.clone(),
                b.kafka_address.clone().unwrap_or_else(|| "-".into()),
                b.rack.clone().unwrap_or_else(|| "-".into()),
                broker_state(b).to_string(),
                d.last_heartbeat_ms
                    .map(|m| format!("{m} ms ago"))
                    .unwrap_or_else(|| "-".into()),
                least_free(&d.disks),
            ])
        })
        .collect();
    output::table(
        &[
            "ID",
            "EPOCH",
            "ADDRESS",
            "KAFKA",
            "RACK",
            "STATE",
            "LAST HEARTBEAT",
            "DISK FREE",
        ],
        &rows,
    );
}

/// The `cluster describe` controller table.
fn print_controllers(controllers: &[Controller]) {
    let rows: Vec<Vec<String>> = controllers
        .iter()
        .map(|c| {
            vec![
                c.id.to_string(),
                c.address.clone(),
                match (&c.kafka_address, &c.error) {
                    (Some(k), _) => k.clone(),
                    (None, Some(e)) => format!("? ({e})"),
                    (None, None) => "-".into(),
                },
                c.status.clone(),
            ]
        })
        .collect();
    output::table(&["CONTROLLER", "ADDRESS", "KAFKA", "STATUS"], &rows);
}

/// How long each controller has to say where its Kafka listener is.
const NODE_TIMEOUT: Duration = Duration::from_secs(2);

/// One controller of the quorum, as `cluster describe` shows it.
struct Controller {
    id: u64,
    /// Its gRPC address, as the membership records it.
    address: String,
    /// As the leader describes it ("leader", "follower", "unreachable", ...).
    status: String,
    /// Its Kafka listener, in its own words; `None` when it has none or
    /// did not answer.
    kafka_address: Option<String>,
    /// Why it did not answer.
    error: Option<String>,
}

/// Every member of `quorum`, each asked directly for its Kafka listener
/// (a controller knows only its own).
async fn controllers(
    transport: &keel_tls::Transport,
    quorum: &pb::DescribeQuorumResponse,
) -> Vec<Controller> {
    let mut out = Vec::new();
    for v in &quorum.voters {
        let node = super::health::describe_node(transport, &v.address, NODE_TIMEOUT).await;
        let (kafka_address, error) = match node {
            Ok(n) => (n.kafka_address, None),
            Err(e) => (None, Some(e)),
        };
        out.push(Controller {
            id: v.id,
            address: v.address.clone(),
            status: v.status.clone(),
            kafka_address,
            error,
        });
    }
    out
}

/// The fullest of a broker's dirs: "37% (12.0 GiB)", or "-" before its
/// first report.
fn least_free(disks: &[pb::DiskSpace]) -> String {
    disks
        .iter()
        .filter(|d| d.total_bytes > 0)
        .min_by(|a, b| {
            let share = |d: &pb::DiskSpace| d.free_bytes as f64 / d.total_bytes as f64;
            share(a).total_cmp(&share(b))
        })
        .map(|d| {
            format!(
                "{}% ({:.1} GiB)",
                d.free_bytes * 100 / d.total_bytes,
                d.free_bytes as f64 / (1u64 << 30) as f64
            )
        })
        .unwrap_or_else(|| "-".into())
}

/// Removes fenced broker `id` for good: `keel cluster unregister-broker`,
/// and `keel broker unregister`, its older spelling.
pub(crate) async fn unregister(
    client: &keel_proto::client::ControllerClient,
    out: Output,
    id: u32,
) -> ExitCode {
    unregister_forced(client, out, id, false).await
}

/// [`unregister`], with `force`: even a fenced broker that still
/// heartbeats.
async fn unregister_forced(
    client: &keel_proto::client::ControllerClient,
    out: Output,
    id: u32,
    force: bool,
) -> ExitCode {
    let _ = call!(
        client,
        admin,
        unregister_broker,
        pb::UnregisterBrokerRequest {
            broker_id: id,
            force,
        }
    );
    match out {
        Output::Json => output::json(&json!({"id": id, "unregistered": true})),
        Output::Table => crate::outln!("Broker {id} unregistered."),
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod disk_tests {
    use super::*;

    #[test]
    fn the_fullest_dir_is_shown() {
        let d = |free: u64, total: u64| pb::DiskSpace {
            free_bytes: free,
            total_bytes: total,
            reserve_bytes: 0,
            path: String::new(),
        };
        assert_eq!(least_free(&[]), "-");
        assert_eq!(
            least_free(&[d(8 << 30, 16 << 30), d(1 << 30, 10 << 30)]),
            "10% (1.0 GiB)"
        );
        assert_eq!(least_free(&[d(0, 0)]), "-");
    }
}
