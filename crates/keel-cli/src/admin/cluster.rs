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
                            "rack": b.rack,
                            "state": broker_state(b),
                            "last_heartbeat_ms": d.last_heartbeat_ms,
                            "log_dirs": d.log_dirs,
                            "offline_log_dirs": d.offline_log_dirs,
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
                                b.rack.clone().unwrap_or_else(|| "-".into()),
                                broker_state(b).to_string(),
                                d.last_heartbeat_ms
                                    .map(|m| format!("{m} ms ago"))
                                    .unwrap_or_else(|| "-".into()),
                            ])
                        })
                        .collect();
                    output::table(
                        &["ID", "EPOCH", "ADDRESS", "RACK", "STATE", "LAST HEARTBEAT"],
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
