//! `keel cluster`: describe the brokers, unregister a fenced one.

use std::process::ExitCode;

use clap::{Args, Subcommand};
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
    /// Every registered broker and its state.
    Describe,
    /// Remove a fenced broker for good.
    UnregisterBroker {
        #[arg(long)]
        id: u32,
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

pub async fn cluster(a: ClusterArgs) -> ExitCode {
    let client = match a.common.client() {
        Ok(c) => c,
        Err(code) => return code,
    };
    match a.cmd {
        ClusterCmd::Describe => {
            let r = call!(
                client,
                admin,
                describe_cluster,
                pb::DescribeClusterRequest::default()
            );
            match a.common.output {
                Output::Json => output::json(&json!({
                    "cluster_id": r.cluster_id,
                    "controller_id": r.controller_id,
                    "controller_epoch": r.controller_epoch,
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
                })),
                Output::Table => {
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
            }
            ExitCode::SUCCESS
        }
        ClusterCmd::UnregisterBroker { id } => {
            let _ = call!(
                client,
                admin,
                unregister_broker,
                pb::UnregisterBrokerRequest { broker_id: id }
            );
            match a.common.output {
                Output::Json => output::json(&json!({"id": id, "unregistered": true})),
                Output::Table => crate::outln!("Broker {id} unregistered."),
            }
            ExitCode::SUCCESS
        }
    }
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
