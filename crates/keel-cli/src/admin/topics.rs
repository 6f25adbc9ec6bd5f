//! `keel topics`: create, delete, list, describe, alter-config.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use keel_proto::pb;
use serde_json::{json, Value};

use super::{item_error, parse_kv, topic_id_text, usage, Common};
use crate::output::{self, Output};

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
        /// Partitions [default: 1; with --replica-assignment, its row count].
        #[arg(long)]
        partitions: Option<u32>,
        /// Replicas per partition [default: 1; with --replica-assignment,
        /// its row width].
        #[arg(long)]
        replication_factor: Option<u32>,
        /// Manual assignment: partitions separated by ',', replicas by ':'
        /// (e.g. 1:2,2:3 is two partitions of two replicas).
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
    let client = match a.common.client() {
        Ok(c) => c,
        Err(code) => return code,
    };
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
            // With a manual assignment, counts given must match it (the
            // controller checks); counts not given are taken from it.
            let default = if assignments.is_empty() { 1 } else { 0 };
            let req = pb::CreateTopicsRequest {
                topics: vec![pb::CreatableTopic {
                    name: name.clone(),
                    partitions: partitions.unwrap_or(default),
                    replication_factor: replication_factor.unwrap_or(default),
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
                    crate::outln!("Topic {} already exists.", t.name)
                }
                Output::Table => crate::outln!(
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
                Output::Table if wait => crate::outln!("Deleted topic {name}."),
                Output::Table => crate::outln!("Topic {name} marked for deletion."),
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
                Output::Table => names.iter().for_each(|n| crate::outln!("{n}")),
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
                        crate::outln!(
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
                Output::Table => crate::outln!("Altered configs of topic {name}."),
            }
            ExitCode::SUCCESS
        }
    }
}
