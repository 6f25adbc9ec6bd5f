//! Admin subcommands: thin clients of `AdminService` that follow
//! NOT_CONTROLLER redirects and print tables or stable JSON.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use keel_metadata::{ApiError, TopicId};
use keel_proto::client::ControllerClient;
use keel_proto::convert::{check, error_from_pb};
use keel_proto::pb;
use serde_json::{json, Value};

use crate::output::{self, Output};

/// The `keel dev` cluster's controllers, the default bootstrap.
pub const DEFAULT_BOOTSTRAP: &str = "127.0.0.11:9093,127.0.0.12:9093,127.0.0.13:9093";

/// Options every admin command takes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Any controller addresses, comma separated.
    #[arg(long, env = "KEEL_BOOTSTRAP", default_value = DEFAULT_BOOTSTRAP, global = true)]
    pub bootstrap: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
}

impl Common {
    pub fn client(&self) -> ControllerClient {
        ControllerClient::new(
            self.bootstrap
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
        )
    }
}

/// Runs a call; on transport failure prints and returns the exit code.
macro_rules! call {
    ($client:expr, $svc:ident, $method:ident, $req:expr) => {
        match $client
            .$svc(|mut c| {
                let req = $req.clone();
                async move { c.$method(req).await }
            })
            .await
        {
            Ok(r) => {
                if let Err(e) = check(&r.error) {
                    return output::refused(&e);
                }
                r
            }
            Err(e) => return output::unreachable(&e),
        }
    };
}

fn topic_id_text(b: &[u8]) -> String {
    TopicId::from_bytes(b)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn item_error(e: &Option<pb::Error>) -> Option<ApiError> {
    e.as_ref().filter(|e| e.code != 0).map(error_from_pb)
}

fn parse_kv(v: &[String]) -> Result<Vec<(String, String)>, String> {
    v.iter()
        .map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("config {s:?} is not KEY=VALUE"))
        })
        .collect()
}

fn usage(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(2)
}

// ---- topics -------------------------------------------------------------

#[derive(Args, Debug)]
pub struct TopicsArgs {
    #[command(subcommand)]
    cmd: TopicsCmd,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand, Debug)]
enum TopicsCmd {
    /// Create a topic.
    Create {
        name: String,
        #[arg(long, default_value_t = 1)]
        partitions: u32,
        #[arg(long, default_value_t = 1)]
        replication_factor: u32,
        /// Manual assignment: partitions separated by ',', replicas by ':' (e.g. 1:2,2:3).
        #[arg(long)]
        replica_assignment: Option<String>,
        /// Topic config KEY=VALUE (repeatable).
        #[arg(long = "config")]
        configs: Vec<String>,
        /// Succeed if the topic already exists.
        #[arg(long)]
        if_not_exists: bool,
        /// Check the request without creating anything.
        #[arg(long)]
        validate_only: bool,
    },
    /// Delete a topic.
    Delete {
        name: String,
        /// Wait until the deletion completed.
        #[arg(long)]
        wait: bool,
        /// Give up waiting after this many seconds.
        #[arg(long, default_value_t = 60)]
        timeout_s: u64,
    },
    /// List topic names.
    List,
    /// Describe topics (all, or one).
    Describe {
        #[arg(long)]
        topic: Option<String>,
    },
    /// Set or delete topic configs.
    AlterConfig {
        name: String,
        /// KEY=VALUE to set (repeatable).
        #[arg(long = "set")]
        set: Vec<String>,
        /// KEY to delete (repeatable).
        #[arg(long = "delete")]
        delete: Vec<String>,
    },
}

fn parse_assignment(s: &str) -> Result<Vec<pb::ReplicaAssignment>, String> {
    s.split(',')
        .enumerate()
        .map(|(i, part)| {
            let replicas = part
                .split(':')
                .map(|b| {
                    b.trim()
                        .parse::<u32>()
                        .map_err(|_| format!("broker id {b:?} is not a number"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(pb::ReplicaAssignment {
                partition: i as u32,
                replicas,
            })
        })
        .collect()
}

/// The `topics describe` JSON of one topic (stable field names).
pub fn topic_json(t: &pb::TopicDescription) -> Value {
    let configs: BTreeMap<&str, &str> = t
        .configs
        .iter()
        .map(|c| (c.key.as_str(), c.value.as_str()))
        .collect();
    json!({
        "name": t.name,
        "topic_id": topic_id_text(&t.topic_id),
        "marked_for_deletion": t.marked_for_deletion,
        "configs": configs,
        "partitions": t.partitions.iter().filter_map(|p| {
            let s = p.state.as_ref()?;
            Some(json!({
                "partition": s.partition,
                "leader": s.leader,
                "leader_epoch": s.leader_epoch,
                "partition_epoch": s.partition_epoch,
                "replicas": s.replicas,
                "isr": s.isr,
                "adding": s.adding,
                "removing": s.removing,
                "offline": p.offline_replicas,
                "state": p.partition_state,
            }))
        }).collect::<Vec<_>>(),
    })
}

pub async fn topics(a: TopicsArgs) -> ExitCode {
    let client = a.common.client();
    let out = a.common.output;
    match a.cmd {
        TopicsCmd::Create {
            name,
            partitions,
            replication_factor,
            replica_assignment,
            configs,
            if_not_exists,
            validate_only,
        } => {
            let configs = match parse_kv(&configs) {
                Ok(c) => c,
                Err(e) => return usage(e),
            };
            let assignments = match replica_assignment
                .as_deref()
                .map(parse_assignment)
                .transpose()
            {
                Ok(a) => a.unwrap_or_default(),
                Err(e) => return usage(e),
            };
            let req = pb::CreateTopicsRequest {
                topics: vec![pb::CreatableTopic {
                    name: name.clone(),
                    partitions,
                    replication_factor,
                    assignments,
                    configs: configs
                        .into_iter()
                        .map(|(key, value)| pb::ConfigEntry { key, value })
                        .collect(),
                }],
                validate_only,
            };
            let r = call!(client, admin_write, create_topics, req.clone());
            let Some(t) = r.topics.first() else {
                return usage("the controller returned no result");
            };
            if let Some(e) = item_error(&t.error) {
                if !(if_not_exists && e.code == keel_metadata::ErrorCode::TopicAlreadyExists) {
                    return output::refused(&e);
                }
            }
            match out {
                Output::Json => output::json(&json!({
                    "name": t.name,
                    "topic_id": topic_id_text(&t.topic_id),
                    "partitions": t.partitions,
                    "replication_factor": t.replication_factor,
                    "validate_only": validate_only,
                })),
                Output::Table if t.topic_id.is_empty() => {
                    println!("Topic {} already exists.", t.name)
                }
                Output::Table => println!(
                    "{} topic {} (id {}) with {} partitions, replication factor {}.",
                    if validate_only {
                        "Would create"
                    } else {
                        "Created"
                    },
                    t.name,
                    topic_id_text(&t.topic_id),
                    t.partitions,
                    t.replication_factor
                ),
            }
            ExitCode::SUCCESS
        }
        TopicsCmd::Delete {
            name,
            wait,
            timeout_s,
        } => {
            let req = pb::DeleteTopicsRequest {
                names: vec![name.clone()],
            };
            let r = call!(client, admin, delete_topics, req.clone());
            if let Some(e) = r.topics.first().and_then(|t| item_error(&t.error)) {
                return output::refused(&e);
            }
            if wait {
                let deadline = Instant::now() + Duration::from_secs(timeout_s);
                loop {
                    let req = pb::DescribeTopicsRequest {
                        names: vec![name.clone()],
                    };
                    let r = call!(client, admin, describe_topics, req.clone());
                    let gone = r
                        .topics
                        .first()
                        .is_none_or(|t| item_error(&t.error).is_some());
                    if gone {
                        break;
                    }
                    if Instant::now() >= deadline {
                        eprintln!("error: topic {name} is still being deleted after {timeout_s} s");
                        eprintln!("hint: deletion waits for every hosting broker to be up; see `keel cluster describe`");
                        return ExitCode::from(crate::EXIT_REFUSED);
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            match out {
                Output::Json => output::json(
                    &json!({"name": name, "deleted": wait, "marked_for_deletion": true}),
                ),
                Output::Table if wait => println!("Deleted topic {name}."),
                Output::Table => println!("Topic {name} marked for deletion."),
            }
            ExitCode::SUCCESS
        }
        TopicsCmd::List => {
            let r = call!(
                client,
                admin,
                describe_topics,
                pb::DescribeTopicsRequest::default()
            );
            let names: Vec<&str> = r.topics.iter().map(|t| t.name.as_str()).collect();
            match out {
                Output::Json => output::json(&json!({ "topics": names })),
                Output::Table => names.iter().for_each(|n| println!("{n}")),
            }
            ExitCode::SUCCESS
        }
        TopicsCmd::Describe { topic } => {
            let req = pb::DescribeTopicsRequest {
                names: topic.iter().cloned().collect(),
            };
            let r = call!(client, admin, describe_topics, req.clone());
            if let Some(e) = r.topics.iter().find_map(|t| item_error(&t.error)) {
                return output::refused(&e);
            }
            match out {
                Output::Json => output::json(
                    &json!({ "topics": r.topics.iter().map(topic_json).collect::<Vec<_>>() }),
                ),
                Output::Table => {
                    for t in &r.topics {
                        let cfg: Vec<String> = t
                            .configs
                            .iter()
                            .map(|c| format!("{}={}", c.key, c.value))
                            .collect();
                        println!(
                            "Topic: {}  Id: {}  Partitions: {}{}  Configs: {}",
                            t.name,
                            topic_id_text(&t.topic_id),
                            t.partitions.len(),
                            if t.marked_for_deletion {
                                "  MarkedForDeletion: true"
                            } else {
                                ""
                            },
                            cfg.join(",")
                        );
                        let rows: Vec<Vec<String>> = t
                            .partitions
                            .iter()
                            .filter_map(|p| {
                                let s = p.state.as_ref()?;
                                let list = |v: &[u32]| {
                                    v.iter()
                                        .map(|b| b.to_string())
                                        .collect::<Vec<_>>()
                                        .join(",")
                                };
                                Some(vec![
                                    s.partition.to_string(),
                                    s.leader
                                        .map(|l| l.to_string())
                                        .unwrap_or_else(|| "none".into()),
                                    s.leader_epoch.to_string(),
                                    list(&s.replicas),
                                    list(&s.isr),
                                    list(&p.offline_replicas),
                                    p.partition_state.clone(),
                                ])
                            })
                            .collect();
                        output::table(
                            &[
                                "PARTITION",
                                "LEADER",
                                "EPOCH",
                                "REPLICAS",
                                "ISR",
                                "OFFLINE",
                                "STATE",
                            ],
                            &rows,
                        );
                    }
                }
            }
            ExitCode::SUCCESS
        }
        TopicsCmd::AlterConfig { name, set, delete } => {
            let set = match parse_kv(&set) {
                Ok(s) => s,
                Err(e) => return usage(e),
            };
            let mut ops: Vec<pb::AlterConfigOp> = set
                .into_iter()
                .map(|(key, value)| pb::AlterConfigOp {
                    key,
                    value,
                    op: pb::ConfigOp::Set as i32,
                })
                .collect();
            ops.extend(delete.into_iter().map(|key| pb::AlterConfigOp {
                key,
                value: String::new(),
                op: pb::ConfigOp::Delete as i32,
            }));
            let req = pb::IncrementalAlterConfigsRequest {
                topics: vec![pb::AlterTopicConfig {
                    topic: name.clone(),
                    ops,
                }],
                validate_only: false,
            };
            let r = call!(client, admin, incremental_alter_configs, req.clone());
            if let Some(e) = r.topics.first().and_then(|t| item_error(&t.error)) {
                return output::refused(&e);
            }
            match out {
                Output::Json => output::json(&json!({"name": name, "altered": true})),
                Output::Table => println!("Altered configs of topic {name}."),
            }
            ExitCode::SUCCESS
        }
    }
}

// ---- partitions -----------------------------------------------------------

#[derive(Args, Debug)]
pub struct PartitionsArgs {
    #[command(subcommand)]
    cmd: PartitionsCmd,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand, Debug)]
enum PartitionsCmd {
    /// Grow a topic to `--total` partitions.
    Add {
        topic: String,
        #[arg(long)]
        total: u32,
    },
}

pub async fn partitions(a: PartitionsArgs) -> ExitCode {
    let client = a.common.client();
    let PartitionsCmd::Add { topic, total } = a.cmd;
    let req = pb::CreatePartitionsRequest {
        topics: vec![pb::CreatePartitionsTopic {
            name: topic.clone(),
            total,
            assignments: vec![],
        }],
        validate_only: false,
    };
    let r = call!(client, admin_write, create_partitions, req.clone());
    if let Some(e) = r.topics.first().and_then(|t| item_error(&t.error)) {
        return output::refused(&e);
    }
    match a.common.output {
        Output::Json => output::json(&json!({"name": topic, "partitions": total})),
        Output::Table => println!("Topic {topic} now has {total} partitions."),
    }
    ExitCode::SUCCESS
}

// ---- cluster --------------------------------------------------------------

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
    let client = a.common.client();
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
                    println!(
                        "Cluster {}  active controller {}  epoch {}",
                        r.cluster_id, r.controller_id, r.controller_epoch
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
                Output::Table => println!("Broker {id} unregistered."),
            }
            ExitCode::SUCCESS
        }
    }
}

// ---- quorum -----------------------------------------------------------------

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
    /// Add a voter (started with `keel controller --join`).
    AddVoter {
        #[arg(long)]
        node_id: u64,
        #[arg(long)]
        address: String,
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
    let client = a.common.client();
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
                    "voters": r.voters.iter().map(|v| json!({
                        "id": v.id,
                        "address": v.address,
                        "last_log_index": v.last_log_index,
                        "lag": v.lag,
                        "last_contact_ms": v.last_contact_ms,
                        "status": v.status,
                    })).collect::<Vec<_>>(),
                })),
                Output::Table => {
                    println!("ClusterId:    {}", r.cluster_id);
                    println!("LeaderId:     {}", r.leader_id);
                    println!("Term:         {}", r.term);
                    println!("CommitIndex:  {}", r.commit_index);
                    println!(
                        "Voters:       {:?}",
                        r.voters
                            .iter()
                            .filter(|v| v.status != "learner")
                            .map(|v| v.id)
                            .collect::<Vec<_>>()
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
                            ],
                            &rows,
                        );
                    }
                }
            }
            ExitCode::SUCCESS
        }
        QuorumCmd::AddVoter { node_id, address } => {
            let req = pb::AddVoterRequest { node_id, address };
            let _ = call!(client, admin_write, add_voter, req.clone());
            match a.common.output {
                Output::Json => output::json(&json!({"node_id": node_id, "added": true})),
                Output::Table => println!("Node {node_id} is now a voter."),
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
                    println!("SnapshotIndex: {}", snap.last_index);
                    println!("SizeBytes:     {}", snap.size_bytes);
                    println!("ImageBytes:    {}", snap.image_bytes);
                    if let Some(ms) = snap.build_ms {
                        println!("BuildMs:       {ms:.1}");
                    }
                    println!("PurgedIndex:   {}", r.purged_index);
                    println!("WaitMs:        {:.1}", r.wait_ms);
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
                Output::Table => println!("Node {node_id} is no longer a voter."),
            }
            ExitCode::SUCCESS
        }
    }
}

// ---- reassignments and elections -----------------------------------------

#[derive(Args, Debug)]
pub struct ReassignArgs {
    #[command(subcommand)]
    cmd: ReassignCmd,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand, Debug)]
enum ReassignCmd {
    /// Propose a balanced plan moving topics onto a set of brokers (prints
    /// the plan JSON that `start --plan` takes).
    Generate {
        /// Topics to move, comma separated.
        #[arg(long)]
        topics: String,
        /// Target brokers, comma separated.
        #[arg(long)]
        brokers: String,
        /// Seed of the placement's randomness (same seed, same plan).
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Start the reassignments in a plan file:
    /// {"partitions": [{"topic", "partition", "replicas": [..]}]}.
    Start {
        #[arg(long)]
        plan: PathBuf,
        /// Wait (with a progress bar) until every reassignment completed.
        #[arg(long)]
        wait: bool,
        /// Give up waiting after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout_s: u64,
    },
    /// Cancel the reassignments of the partitions in a plan file.
    Cancel {
        #[arg(long)]
        plan: PathBuf,
    },
    /// Reassignments in flight.
    List,
}

#[derive(serde::Deserialize, serde::Serialize)]
struct Plan {
    partitions: Vec<PlanItem>,
}

#[derive(serde::Deserialize, serde::Serialize)]
struct PlanItem {
    topic: String,
    partition: u32,
    #[serde(default)]
    replicas: Vec<u32>,
}

fn read_plan(p: &PathBuf) -> Result<Plan, String> {
    let text =
        std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a reassignment plan: {e}", p.display()))
}

pub async fn reassign(a: ReassignArgs) -> ExitCode {
    let client = a.common.client();
    let (plan, cancel) = match &a.cmd {
        ReassignCmd::List => {
            let r = call!(
                client,
                admin,
                list_partition_reassignments,
                pb::ListPartitionReassignmentsRequest::default()
            );
            match a.common.output {
                Output::Json => output::json(&json!({
                    "reassignments": r.reassignments.iter().map(|x| json!({
                        "topic": x.topic, "partition": x.partition, "replicas": x.replicas,
                        "adding": x.adding, "removing": x.removing,
                    })).collect::<Vec<_>>()
                })),
                Output::Table => {
                    let rows: Vec<Vec<String>> = r
                        .reassignments
                        .iter()
                        .map(|x| {
                            vec![
                                x.topic.clone(),
                                x.partition.to_string(),
                                format!("{:?}", x.replicas),
                                format!("{:?}", x.adding),
                                format!("{:?}", x.removing),
                            ]
                        })
                        .collect();
                    output::table(
                        &["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"],
                        &rows,
                    );
                }
            }
            return ExitCode::SUCCESS;
        }
        ReassignCmd::Generate {
            topics,
            brokers,
            seed,
        } => {
            return generate(&client, topics, brokers, *seed).await;
        }
        ReassignCmd::Start { plan, .. } => (plan, false),
        ReassignCmd::Cancel { plan } => (plan, true),
    };
    let (wait, timeout_s) = match &a.cmd {
        ReassignCmd::Start {
            wait, timeout_s, ..
        } => (*wait, *timeout_s),
        _ => (false, 0),
    };
    let plan = match read_plan(plan) {
        Ok(p) => p,
        Err(e) => return usage(e),
    };
    let req = pb::AlterPartitionReassignmentsRequest {
        partitions: plan
            .partitions
            .iter()
            .map(|p| pb::ReassignablePartition {
                topic: p.topic.clone(),
                partition: p.partition,
                replicas: if cancel { vec![] } else { p.replicas.clone() },
                cancel,
            })
            .collect(),
    };
    let r = call!(client, admin, alter_partition_reassignments, req.clone());
    let mut failed = None;
    let rows: Vec<Vec<String>> = r
        .partitions
        .iter()
        .map(|p| {
            let e = item_error(&p.error);
            let status = match &e {
                Some(e) => format!("{}: {}", e.code, e.message),
                None => "ok".into(),
            };
            if e.is_some() {
                failed = e;
            }
            vec![p.topic.clone(), p.partition.to_string(), status]
        })
        .collect();
    match a.common.output {
        Output::Json => output::json(&json!({
            "partitions": r.partitions.iter().map(|p| json!({
                "topic": p.topic, "partition": p.partition,
                "error": item_error(&p.error).map(|e| e.code.name()),
            })).collect::<Vec<_>>()
        })),
        Output::Table => output::table(&["TOPIC", "PARTITION", "RESULT"], &rows),
    }
    if let Some(e) = failed {
        return output::refused(&e);
    }
    if wait {
        let wanted: std::collections::BTreeSet<(String, u32)> = plan
            .partitions
            .iter()
            .map(|p| (p.topic.clone(), p.partition))
            .collect();
        let bar = indicatif::ProgressBar::new(wanted.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} reassigning [{bar:40}] {pos}/{len} partitions ({elapsed})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let deadline = Instant::now() + Duration::from_secs(timeout_s);
        loop {
            let r = call!(
                client,
                admin,
                list_partition_reassignments,
                pb::ListPartitionReassignmentsRequest::default()
            );
            let pending = r
                .reassignments
                .iter()
                .filter(|x| wanted.contains(&(x.topic.clone(), x.partition)))
                .count();
            bar.set_position((wanted.len() - pending) as u64);
            if pending == 0 {
                bar.finish();
                break;
            }
            if Instant::now() >= deadline {
                bar.abandon();
                eprintln!("error: {pending} reassignments still in flight after {timeout_s} s");
                eprintln!("hint: new replicas must catch up and join the ISR; check `keel reassign list` and broker health");
                return ExitCode::from(crate::EXIT_REFUSED);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    ExitCode::SUCCESS
}

/// Proposes a balanced assignment of `topics` onto `brokers`, keeping each
/// topic's replication factor; racks come from the cluster description.
async fn generate(client: &ControllerClient, topics: &str, brokers: &str, seed: u64) -> ExitCode {
    use rand::SeedableRng;
    let names: Vec<String> = topics
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let ids: Result<Vec<u32>, _> = brokers
        .split(',')
        .map(|s| s.trim().parse::<u32>())
        .collect();
    let Ok(ids) = ids else {
        return usage(format!("--brokers {brokers:?} is not a list of broker ids"));
    };
    let cluster = call!(
        client,
        admin,
        describe_cluster,
        pb::DescribeClusterRequest::default()
    );
    let racks: BTreeMap<u32, Option<String>> = cluster
        .brokers
        .iter()
        .filter_map(|b| b.broker.as_ref())
        .map(|b| (b.broker_id, b.rack.clone()))
        .collect();
    if let Some(unknown) = ids.iter().find(|b| !racks.contains_key(b)) {
        return output::refused(&ApiError::new(
            keel_metadata::ErrorCode::UnknownBroker,
            format!("broker {unknown} is not registered"),
        ));
    }
    let placement: Vec<keel_metadata::placement::PlacementBroker> = ids
        .iter()
        .map(|b| keel_metadata::placement::PlacementBroker {
            id: keel_metadata::BrokerId(*b),
            rack: racks.get(b).cloned().flatten(),
        })
        .collect();
    let req = pb::DescribeTopicsRequest {
        names: names.clone(),
    };
    let r = call!(client, admin, describe_topics, req);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut items = Vec::new();
    for t in &r.topics {
        if let Some(e) = item_error(&t.error) {
            return output::refused(&e);
        }
        let rf = t
            .partitions
            .first()
            .and_then(|p| p.state.as_ref())
            .map(|s| s.replicas.len() as u32)
            .unwrap_or(1);
        let assignment = match keel_metadata::placement::place_replicas(
            &placement,
            t.partitions.len() as u32,
            rf,
            &mut rng,
        ) {
            Ok(a) => a,
            Err(e) => return output::refused(&e),
        };
        for (i, replicas) in assignment.into_iter().enumerate() {
            items.push(PlanItem {
                topic: t.name.clone(),
                partition: i as u32,
                replicas: replicas.into_iter().map(|b| b.0).collect(),
            });
        }
    }
    output::json(&serde_json::to_value(Plan { partitions: items }).unwrap_or(Value::Null));
    ExitCode::SUCCESS
}

#[derive(Args, Debug)]
pub struct ElectArgs {
    /// Move leadership back to preferred replicas.
    #[arg(long, conflicts_with = "unclean")]
    preferred: bool,
    /// Elect a leader for leaderless partitions even from outside the ISR.
    #[arg(long)]
    unclean: bool,
    #[arg(long, requires = "partition")]
    topic: Option<String>,
    #[arg(long, requires = "topic")]
    partition: Option<u32>,
    /// Every partition.
    #[arg(long, conflicts_with = "topic")]
    all: bool,
    #[command(flatten)]
    common: Common,
}

pub async fn elect(a: ElectArgs) -> ExitCode {
    if !a.preferred && !a.unclean {
        return usage("pass --preferred or --unclean");
    }
    if !a.all && a.topic.is_none() {
        return usage("pass --topic T --partition P, or --all");
    }
    let client = a.common.client();
    let req = pb::ElectLeadersRequest {
        election_type: if a.unclean {
            pb::ElectionType::Unclean
        } else {
            pb::ElectionType::Preferred
        } as i32,
        partitions: match (&a.topic, a.partition) {
            (Some(t), Some(p)) => vec![pb::TopicPartitionRef {
                topic: t.clone(),
                partition: p,
            }],
            _ => vec![],
        },
    };
    let r = call!(client, admin, elect_leaders, req.clone());
    let mut failed = None;
    let rows: Vec<Vec<String>> = r
        .partitions
        .iter()
        .map(|p| {
            let e = item_error(&p.error);
            let status = match &e {
                Some(e) => e.code.name().to_string(),
                None => format!(
                    "leader {}",
                    p.leader.map(|l| l.to_string()).unwrap_or_default()
                ),
            };
            if let Some(e) = e {
                if e.code != keel_metadata::ErrorCode::ElectionNotNeeded {
                    failed = Some(e);
                }
            }
            vec![p.topic.clone(), p.partition.to_string(), status]
        })
        .collect();
    match a.common.output {
        Output::Json => output::json(&json!({
            "partitions": r.partitions.iter().map(|p| json!({
                "topic": p.topic, "partition": p.partition, "leader": p.leader,
                "error": item_error(&p.error).map(|e| e.code.name()),
            })).collect::<Vec<_>>()
        })),
        Output::Table => output::table(&["TOPIC", "PARTITION", "RESULT"], &rows),
    }
    match failed {
        Some(e) => output::refused(&e),
        None => ExitCode::SUCCESS,
    }
}
