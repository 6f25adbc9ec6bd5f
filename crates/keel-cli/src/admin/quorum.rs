//! `keel quorum`: describe, add or remove voters, snapshot.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use keel_proto::pb;
use serde_json::json;

use super::Common;
use crate::output::{self, Output};

#[derive(Args, Debug)]
pub struct QuorumArgs {
    #[command(subcommand)]
    cmd: QuorumCmd,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand, Debug)]
enum QuorumCmd {
    /// Leader, term, commit index and every voter's replication state.
    Describe {
        /// Show the per-voter replication table (always included in JSON).
        #[arg(long)]
        replication: bool,
    },
    /// Add a voter (started with `keel controller --join`), or re-admit a
    /// voter whose data dir changed (wiped, restored, copied) by naming its
    /// new directory id: it is removed and added back as a learner that
    /// catches up before it is promoted.
    AddVoter {
        #[arg(long)]
        node_id: u64,
        #[arg(long)]
        address: String,
        /// The directory id of the node's data dir (32 hex digits; the
        /// node's log names it at start and in every refusal); omitted: the
        /// active controller binds it once the node answers.
        #[arg(long)]
        directory_id: Option<String>,
    },
    /// Remove a voter.
    RemoveVoter {
        #[arg(long)]
        node_id: u64,
    },
    /// Build a snapshot of the image on the controller the first
    /// `--bootstrap` address names (any voter, not only the active one),
    /// optionally purging the log entries it covers.
    Snapshot {
        /// Then purge every log entry the snapshot covers.
        #[arg(long)]
        purge_log: bool,
        /// Give up waiting for the snapshot after this long.
        #[arg(long, default_value_t = 60_000)]
        timeout_ms: u64,
    },
}

pub async fn quorum(a: QuorumArgs) -> ExitCode {
    let client = match a.common.client() {
        Ok(c) => c,
        Err(code) => return code,
    };
    match a.cmd {
        QuorumCmd::Describe { replication } => {
            let r = call!(
                client,
                admin,
                describe_quorum,
                pb::DescribeQuorumRequest::default()
            );
            match a.common.output {
                Output::Json => output::json(&json!({
                    "cluster_id": r.cluster_id,
                    "leader_id": r.leader_id,
                    "term": r.term,
                    "commit_index": r.commit_index,
                    "leader_disk": r.leader_disk.as_ref().map(|d| json!({
                        "free_bytes": d.free_bytes,
                        "total_bytes": d.total_bytes,
                        "reserve_bytes": d.reserve_bytes,
                        "path": d.path,
                    })),
                    "voters": r.voters.iter().map(|v| json!({
                        "id": v.id,
                        "address": v.address,
                        "last_log_index": v.last_log_index,
                        "lag": v.lag,
                        "last_contact_ms": v.last_contact_ms,
                        "status": v.status,
                        "directory_id": (!v.directory_id.is_empty()).then_some(&v.directory_id),
                    })).collect::<Vec<_>>(),
                })),
                Output::Table => {
                    crate::outln!("ClusterId:    {}", r.cluster_id);
                    crate::outln!("LeaderId:     {}", r.leader_id);
                    crate::outln!("Term:         {}", r.term);
                    crate::outln!("CommitIndex:  {}", r.commit_index);
                    if let Some(d) = &r.leader_disk {
                        crate::outln!(
                            "LeaderDisk:   {} MiB free of {} MiB (reserve {} MiB)",
                            d.free_bytes >> 20,
                            d.total_bytes >> 20,
                            d.reserve_bytes >> 20
                        );
                    }
                    crate::outln!(
                        "Voters:       {:?}",
                        r.voters
                            .iter()
                            .filter(|v| v.status != "learner")
                            .map(|v| v.id)
                            .collect::<Vec<_>>()
                    );
                    crate::outln!(
                        "DirectoryIds: {}",
                        r.voters
                            .iter()
                            .map(|v| format!(
                                "{}={}",
                                v.id,
                                if v.directory_id.is_empty() {
                                    "unbound"
                                } else {
                                    v.directory_id.as_str()
                                }
                            ))
                            .collect::<Vec<_>>()
                            .join(" ")
                    );
                    if replication {
                        let rows: Vec<Vec<String>> = r
                            .voters
                            .iter()
                            .map(|v| {
                                vec![
                                    v.id.to_string(),
                                    v.address.clone(),
                                    v.last_log_index
                                        .map(|i| i.to_string())
                                        .unwrap_or_else(|| "-".into()),
                                    v.lag.to_string(),
                                    v.last_contact_ms
                                        .map(|m| format!("{m} ms"))
                                        .unwrap_or_else(|| "-".into()),
                                    v.status.clone(),
                                    if v.directory_id.is_empty() {
                                        "unbound".into()
                                    } else {
                                        v.directory_id.clone()
                                    },
                                ]
                            })
                            .collect();
                        output::table(
                            &[
                                "NODE",
                                "ADDRESS",
                                "LOG END",
                                "LAG",
                                "LAST CONTACT",
                                "STATUS",
                                "DIRECTORY",
                            ],
                            &rows,
                        );
                    }
                }
            }
            ExitCode::SUCCESS
        }
        QuorumCmd::AddVoter {
            node_id,
            address,
            directory_id,
        } => {
            let req = pb::AddVoterRequest {
                node_id,
                address,
                directory_id: directory_id.clone().unwrap_or_default(),
            };
            let _ = call!(client, admin_write, add_voter, req.clone());
            match a.common.output {
                Output::Json => output::json(&json!({
                    "node_id": node_id,
                    "added": true,
                    "directory_id": directory_id,
                })),
                Output::Table => crate::outln!("Node {node_id} is now a voter."),
            }
            ExitCode::SUCCESS
        }
        QuorumCmd::Snapshot {
            purge_log,
            timeout_ms,
        } => {
            let req = pb::TriggerSnapshotRequest {
                purge_log,
                timeout_ms,
            };
            // Not retried on another node after a timeout (that would build
            // a second snapshot elsewhere); the attempt may take the whole
            // snapshot timeout.
            let budget = Duration::from_millis(timeout_ms.saturating_add(5_000));
            let client = client.with_timeouts(budget, budget);
            let r = call!(client, admin_write, trigger_snapshot, req);
            let snap = r.snapshot.unwrap_or_default();
            match a.common.output {
                Output::Json => output::json(&json!({
                    "last_index": snap.last_index,
                    "size_bytes": snap.size_bytes,
                    "image_bytes": snap.image_bytes,
                    "build_ms": snap.build_ms,
                    "purged_index": r.purged_index,
                    "wait_ms": r.wait_ms,
                })),
                Output::Table => {
                    crate::outln!("SnapshotIndex: {}", snap.last_index);
                    crate::outln!("SizeBytes:     {}", snap.size_bytes);
                    crate::outln!("ImageBytes:    {}", snap.image_bytes);
                    if let Some(ms) = snap.build_ms {
                        crate::outln!("BuildMs:       {ms:.1}");
                    }
                    crate::outln!("PurgedIndex:   {}", r.purged_index);
                    crate::outln!("WaitMs:        {:.1}", r.wait_ms);
                }
            }
            ExitCode::SUCCESS
        }
        QuorumCmd::RemoveVoter { node_id } => {
            let _ = call!(
                client,
                admin,
                remove_voter,
                pb::RemoveVoterRequest { node_id }
            );
            match a.common.output {
                Output::Json => output::json(&json!({"node_id": node_id, "removed": true})),
                Output::Table => crate::outln!("Node {node_id} is no longer a voter."),
            }
            ExitCode::SUCCESS
        }
    }
}
