//! `keel health`: every controller and broker in one table, as etcdctl's
//! `endpoint status` shows a cluster; exits 1 when anything is unhealthy.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use keel_proto::pb;
use keel_proto::pb::admin_service_client::AdminServiceClient;
use serde_json::{json, Value};

use super::Common;
use crate::output::{self, Output};

/// How long `health` waits for each node's answer without a `--timeout`.
const NODE_ANSWER: Duration = Duration::from_secs(2);
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  keel health\n  keel health -o json | jq '.controllers[] | select(.healthy | not)'\n\nExit codes: 0 healthy; 1 something is unhealthy (each problem is named); 3 no controller reachable."
)]
pub struct HealthArgs {
    #[command(flatten)]
    common: Common,
}

/// One row: a controller or a broker, with what is wrong with it.
struct Endpoint {
    kind: &'static str,
    id: u64,
    address: String,
    role: String,
    /// Term (controllers) or broker epoch.
    epoch: Option<u64>,
    applied: Option<u64>,
    log_end: Option<u64>,
    lag: Option<u64>,
    /// Since the leader (controllers) or the active controller (brokers)
    /// last heard from it.
    last_contact_ms: Option<u64>,
    disk_free_bytes: Option<u64>,
    disk_total_bytes: Option<u64>,
    version: Option<String>,
    problems: Vec<String>,
}

impl Endpoint {
    fn json(&self) -> Value {
        json!({
            "id": self.id,
            "address": self.address,
            "role": self.role,
            if self.kind == "controller" { "term" } else { "epoch" }: self.epoch,
            "last_applied_index": self.applied,
            "last_log_index": self.log_end,
            "lag": self.lag,
            "last_contact_ms": self.last_contact_ms,
            "disk_free_bytes": self.disk_free_bytes,
            "disk_total_bytes": self.disk_total_bytes,
            "version": self.version,
            "healthy": self.problems.is_empty(),
            "problems": self.problems,
        })
    }

    fn row(&self) -> Vec<String> {
        let opt = |v: Option<u64>| v.map_or_else(|| "-".into(), |v| v.to_string());
        vec![
            format!("{} {}", self.kind, self.id),
            self.address.clone(),
            self.role.clone(),
            opt(self.epoch),
            opt(self.applied),
            opt(self.log_end),
            opt(self.lag),
            self.last_contact_ms
                .map_or_else(|| "-".into(), |m| format!("{m} ms")),
            match (self.disk_free_bytes, self.disk_total_bytes) {
                (Some(f), Some(t)) if t > 0 => format!(
                    "{}% ({:.1} GiB)",
                    f * 100 / t,
                    f as f64 / (1u64 << 30) as f64
                ),
                _ => "-".into(),
            },
            self.version.clone().unwrap_or_else(|| "-".into()),
            if self.problems.is_empty() {
                "ok".into()
            } else {
                self.problems.join("; ")
            },
        ]
    }
}

/// The fullest of a broker's dirs, as (free, total) bytes.
fn fullest(disks: &[pb::DiskSpace]) -> Option<(u64, u64)> {
    disks
        .iter()
        .filter(|d| d.total_bytes > 0)
        .min_by(|a, b| {
            let share = |d: &pb::DiskSpace| d.free_bytes as f64 / d.total_bytes as f64;
            share(a).total_cmp(&share(b))
        })
        .map(|d| (d.free_bytes, d.total_bytes))
}

/// One controller's own description, asked directly (not redirected);
/// the error says why there was none.
pub(super) async fn describe_node(
    transport: &keel_tls::Transport,
    addr: &str,
    timeout: Duration,
) -> Result<pb::DescribeNodeResponse, String> {
    let ask = async {
        let ep = keel_tls::transport::endpoint(addr)
            .map_err(|e| e.to_string())?
            .connect_timeout(timeout)
            .timeout(timeout);
        let ch = transport
            .connect(ep, None, keel_tls::Expect::Controller)
            .await
            .map_err(|e| {
                // The innermost cause is the OS's reason.
                let mut why = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    why = s.to_string();
                    source = s.source();
                }
                why
            })?;
        AdminServiceClient::new(ch)
            .describe_node(pb::DescribeNodeRequest {
                skip_image_hash: true,
            })
            .await
            .map(|r| r.into_inner())
            .map_err(|s| s.message().to_string())
    };
    tokio::time::timeout(timeout, ask)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} ms", timeout.as_millis())))
}

/// Runs `keel health`: every controller and broker, with what is wrong
/// with each; exits non-zero when anything is.
pub async fn health(a: HealthArgs) -> ExitCode {
    let client = match a.common.client() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let transport = match a.common.transport() {
        Ok(t) => t,
        Err(code) => return code,
    };
    let quorum = call!(
        client,
        admin,
        describe_quorum,
        pb::DescribeQuorumRequest::default()
    );
    let cluster = call!(
        client,
        admin,
        describe_cluster,
        pb::DescribeClusterRequest::default()
    );
    let mut cluster_problems = Vec::new();
    if quorum.leader_id == 0 {
        cluster_problems.push("the quorum has no leader".to_string());
    }
    let mut rows = Vec::new();
    let timeout = a.common.timeout_or(NODE_ANSWER);
    for v in &quorum.voters {
        rows.push(controller_row(&transport, v, &quorum, timeout).await);
    }
    rows.extend(cluster.brokers.iter().filter_map(broker_row));
    let healthy = cluster_problems.is_empty() && rows.iter().all(|e| e.problems.is_empty());
    print_health(a.common.output, healthy, &quorum, &cluster_problems, &rows);
    if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::EXIT_REFUSED)
    }
}

/// The row of voter `v`: as the leader sees it, then as it answers for
/// itself (asked directly, within `timeout`).
async fn controller_row(
    transport: &keel_tls::Transport,
    v: &pb::VoterDescription,
    quorum: &pb::DescribeQuorumResponse,
    timeout: Duration,
) -> Endpoint {
    let mut e = Endpoint {
        kind: "controller",
        id: v.id,
        address: v.address.clone(),
        role: v.status.clone(),
        epoch: None,
        applied: None,
        log_end: v.last_log_index,
        lag: Some(v.lag),
        last_contact_ms: v.last_contact_ms,
        disk_free_bytes: None,
        disk_total_bytes: None,
        version: None,
        problems: Vec::new(),
    };
    if v.status == "unreachable" {
        e.problems.push(match v.last_contact_ms {
            Some(ms) => format!("the leader has not heard from it for {ms} ms"),
            None => "the leader has not heard from it since it took over".into(),
        });
    }
    // Its own answer: role, term, indexes, disk, version.
    let node = describe_node(transport, &v.address, timeout).await;
    match node {
        Ok(n) => {
            e.role = n.role.clone();
            e.epoch = Some(n.term);
            e.applied = Some(n.last_applied_index);
            e.log_end = n.last_log_index.or(e.log_end);
            if let Some(d) = &n.disk {
                e.disk_free_bytes = Some(d.free_bytes);
                e.disk_total_bytes = Some(d.total_bytes);
                if d.reserve_bytes > 0 && d.free_bytes < d.reserve_bytes {
                    e.problems.push(format!(
                        "disk below its reserve ({} MiB free, reserve {} MiB)",
                        d.free_bytes >> 20,
                        d.reserve_bytes >> 20
                    ));
                }
            }
            e.version = (!n.version.is_empty()).then(|| n.version.clone());
            if n.term != quorum.term && quorum.leader_id != 0 {
                e.problems
                    .push(format!("at term {}, the leader at {}", n.term, quorum.term));
            }
        }
        Err(why) => e.problems.push(format!("no answer: {why}")),
    }
    e
}

/// The row of broker `d`; `None` for a description without a broker.
fn broker_row(d: &pb::BrokerDescription) -> Option<Endpoint> {
    let b = d.broker.as_ref()?;
    let state = if b.fenced {
        "fenced"
    } else if b.shutting_down {
        "shutting_down"
    } else {
        "active"
    };
    let disk = fullest(&d.disks);
    let mut e = Endpoint {
        kind: "broker",
        id: u64::from(b.broker_id),
        address: b.address.clone(),
        role: state.to_string(),
        epoch: Some(b.broker_epoch),
        applied: None,
        log_end: None,
        lag: None,
        last_contact_ms: d.last_heartbeat_ms,
        disk_free_bytes: disk.map(|d| d.0),
        disk_total_bytes: disk.map(|d| d.1),
        version: (!d.version.is_empty()).then(|| d.version.clone()),
        problems: Vec::new(),
    };
    if state != "active" {
        e.problems.push(format!("{state}: it serves no partition"));
    }
    if !d.offline_log_dirs.is_empty() {
        e.problems.push(format!(
            "offline log dirs: {}",
            d.offline_log_dirs.join(", ")
        ));
    }
    Some(e)
}

/// Prints the health rows and the cluster's own problems, as `out` says.
fn print_health(
    out: Output,
    healthy: bool,
    quorum: &pb::DescribeQuorumResponse,
    cluster_problems: &[String],
    rows: &[Endpoint],
) {
    match out {
        Output::Json => output::json(&json!({
            "healthy": healthy,
            "cluster_id": quorum.cluster_id,
            "leader_id": (quorum.leader_id != 0).then_some(quorum.leader_id),
            "term": quorum.term,
            "commit_index": quorum.commit_index,
            "problems": cluster_problems,
            "controllers": rows.iter().filter(|e| e.kind == "controller").map(Endpoint::json).collect::<Vec<_>>(),
            "brokers": rows.iter().filter(|e| e.kind == "broker").map(Endpoint::json).collect::<Vec<_>>(),
        })),
        Output::Table => {
            output::table(
                &[
                    "ENDPOINT",
                    "ADDRESS",
                    "ROLE",
                    "TERM/EPOCH",
                    "APPLIED",
                    "LOG END",
                    "LAG",
                    "LAST CONTACT",
                    "DISK FREE",
                    "VERSION",
                    "HEALTH",
                ],
                &rows.iter().map(Endpoint::row).collect::<Vec<_>>(),
            );
            for p in cluster_problems {
                crate::outln!("cluster: {p}");
            }
        }
    }
}
