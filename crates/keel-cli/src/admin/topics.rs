//! `keel topics`: create, delete, list, describe, alter-config.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use keel_proto::pb;
use serde_json::{json, Value};

use super::{id_list, item_error, parse_kv, topic_id_text, usage, Common, TopicArg};
use crate::output::{self, Output};
use keel_proto::client::ControllerClient;

/// How long `topics delete --wait` waits without a `--timeout`.
const DELETE_WAIT: Duration = Duration::from_secs(60);
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
    #[command(
        after_help = "Examples:\n  keel topics create orders -p 6 -r 3 -c retention.ms=86400000\n  keel topics create --topic placed --replica-assignment 1:2,2:3,3:1"
    )]
    Create(CreateArgs),
    /// Delete a topic.
    #[command(after_help = "Example:\n  keel topics delete orders --wait --timeout 60s")]
    Delete(DeleteArgs),
    /// List topic names.
    #[command(after_help = "Example:\n  keel topics list -o json")]
    List,
    /// Describe topics (all, or one), optionally only the partitions in
    /// trouble.
    #[command(
        after_help = "Examples:\n  keel topics describe orders\n  keel topics describe --under-replicated\n  keel topics describe --unavailable -o json\n  keel topics describe --at-min-isr-partitions\n\nThe filters also go by kafka-topics' names (--under-replicated-partitions, --under-min-isr-partitions, --unavailable-partitions, --at-min-isr-partitions); given several, a partition matching any is shown. JSON lists the same partitions as the table."
    )]
    Describe(DescribeArgs),
    /// Set or delete topic configs (each key is checked against Kafka's
    /// topic config schema; a change that changes nothing is refused).
    #[command(
        after_help = "Example:\n  keel topics alter-config orders --set retention.ms=3600000 --delete cleanup.policy"
    )]
    AlterConfig {
        #[command(flatten)]
        topic: TopicArg,
        /// KEY=VALUE to set (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// KEY to delete (repeatable).
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
    },
}

/// What `topics create` takes.
#[derive(Args, Debug)]
struct CreateArgs {
    #[command(flatten)]
    topic: TopicArg,
    /// Partitions [default: 1; with --replica-assignment, its row count].
    #[arg(long, short = 'p')]
    partitions: Option<u32>,
    /// Replicas per partition [default: 1; with --replica-assignment,
    /// its row width].
    #[arg(long, short = 'r')]
    replication_factor: Option<u32>,
    /// Manual assignment: partitions separated by ',', replicas by ':'
    /// (e.g. 1:2,2:3 is two partitions of two replicas).
    #[arg(long)]
    replica_assignment: Option<String>,
    /// Topic config KEY=VALUE (repeatable).
    #[arg(long = "config", short = 'c', value_name = "KEY=VALUE")]
    configs: Vec<String>,
    /// Succeed if the topic already exists.
    #[arg(long)]
    if_not_exists: bool,
    /// Check the request without creating anything.
    #[arg(long)]
    validate_only: bool,
}

/// What `topics delete` takes.
#[derive(Args, Debug)]
struct DeleteArgs {
    #[command(flatten)]
    topic: TopicArg,
    /// Succeed (and do nothing) if the topic does not exist.
    #[arg(long)]
    if_exists: bool,
    /// Wait until the deletion completed.
    #[arg(long)]
    wait: bool,
    /// The timeout in seconds (older spelling of --timeout, which
    /// bounds the wait: default 60s).
    #[arg(long, hide = true, conflicts_with = "timeout")]
    timeout_s: Option<u64>,
}

/// What `topics describe` takes.
#[derive(Args, Debug)]
struct DescribeArgs {
    /// Only this topic (or `--topic`).
    #[arg(value_name = "TOPIC", conflicts_with = "topic")]
    topic_pos: Option<String>,
    /// Only this topic (the same as the positional TOPIC).
    #[arg(long, short = 't', value_name = "TOPIC")]
    topic: Option<String>,
    /// Only partitions with fewer in-sync replicas than replicas.
    #[arg(long, visible_alias = "under-replicated-partitions")]
    under_replicated: bool,
    /// Only partitions with fewer in-sync replicas than the topic's
    /// min.insync.replicas.
    #[arg(long, visible_alias = "under-min-isr-partitions")]
    under_min_isr: bool,
    /// Only partitions without a leader.
    #[arg(long, visible_alias = "unavailable-partitions")]
    unavailable: bool,
    /// Only partitions with exactly the topic's min.insync.replicas in
    /// sync (one more loss and producers with acks=all are refused).
    #[arg(long, visible_alias = "at-min-isr-partitions")]
    at_min_isr: bool,
    /// Only topics with config overrides.
    #[arg(long)]
    with_overrides: bool,
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

/// The replication factor of a topic: its first partition's replica
/// count, not counting replicas being added by a reassignment.
fn replication_factor(t: &pb::TopicDescription) -> usize {
    t.partitions
        .iter()
        .find_map(|p| p.state.as_ref())
        .map_or(0, |s| s.replicas.len().saturating_sub(s.adding.len()))
}

/// What `topics create` reports: the topic it made, or with
/// `--if-not-exists` the one that was already there.
#[derive(Debug)]
struct Created {
    topic_id: Vec<u8>,
    partitions: u32,
    replication_factor: u32,
    /// The topic existed before (nothing was created).
    existed: bool,
}

impl Created {
    /// The figures of a topic that already existed.
    fn existing(t: &pb::TopicDescription) -> Self {
        Created {
            topic_id: t.topic_id.clone(),
            partitions: t.partitions.len() as u32,
            replication_factor: replication_factor(t) as u32,
            existed: true,
        }
    }

    /// Prints the result of `topics create` on topic `name`, as `out` says.
    fn print(&self, out: Output, name: &str, validate_only: bool) {
        match out {
            Output::Json => output::json(&json!({
                "name": name,
                "topic_id": topic_id_text(&self.topic_id),
                "partitions": self.partitions,
                "replication_factor": self.replication_factor,
                "validate_only": validate_only,
                "created": !self.existed && !validate_only,
                "existed": self.existed,
            })),
            Output::Table => crate::outln!("{}", self.sentence(name, validate_only)),
        }
    }

    /// The line `topics create` prints.
    fn sentence(&self, name: &str, validate_only: bool) -> String {
        let what = if self.existed {
            format!("Topic {name} already exists")
        } else if validate_only {
            format!("Would create topic {name}")
        } else {
            format!("Created topic {name}")
        };
        format!(
            "{what} (id {}) with {}, replication factor {}.",
            topic_id_text(&self.topic_id),
            keel_controller::console::count(self.partitions as usize, "partition"),
            self.replication_factor
        )
    }
}

/// Which partitions `topics describe` shows.
#[derive(Clone, Copy, Debug, Default)]
struct PartitionFilter {
    /// Fewer in-sync replicas than replicas.
    under_replicated: bool,
    /// Fewer in-sync replicas than min.insync.replicas.
    under_min_isr: bool,
    /// No leader.
    unavailable: bool,
    /// Exactly min.insync.replicas in sync.
    at_min_isr: bool,
}

impl PartitionFilter {
    fn any(&self) -> bool {
        self.under_replicated || self.under_min_isr || self.unavailable || self.at_min_isr
    }

    /// With no filter every partition; else those matching any filter given.
    fn keeps(&self, p: &pb::PartitionDescription, min_isr: usize) -> bool {
        let Some(s) = p.state.as_ref() else {
            return false;
        };
        !self.any()
            || (self.under_replicated && s.isr.len() < s.replicas.len())
            || (self.under_min_isr && s.isr.len() < min_isr)
            || (self.unavailable && s.leader.is_none())
            || (self.at_min_isr && s.isr.len() == min_isr)
    }
}

/// The topic's min.insync.replicas: its override, else the cluster
/// default, else Kafka's default.
fn min_isr(t: &pb::TopicDescription, defaults: &[pb::ConfigEntry]) -> usize {
    let key = keel_metadata::MIN_INSYNC_REPLICAS;
    t.configs
        .iter()
        .chain(defaults)
        .find(|c| c.key == key)
        .map(|c| c.value.as_str())
        .or_else(|| keel_metadata::topic_config::lookup(key).map(|d| d.default))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(1)
}

/// The `topics describe` JSON of one topic (stable field names), with
/// the `partitions` the filters kept.
fn topic_json(t: &pb::TopicDescription, partitions: &[&pb::PartitionDescription]) -> Value {
    let configs = keel_proto::convert::config_map(&t.configs);
    json!({
        "name": t.name,
        "topic_id": topic_id_text(&t.topic_id),
        "marked_for_deletion": t.marked_for_deletion,
        "replication_factor": replication_factor(t),
        "configs": configs,
        "partitions": partitions.iter().filter_map(|p| {
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

/// The ops `alter-config` sends: every `--set`, then every `--delete`.
fn config_ops(set: Vec<(String, String)>, delete: Vec<String>) -> Vec<pb::AlterConfigOp> {
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
    ops
}

/// What `alter-config` would change: the keys whose value differs from
/// the topic's current one (the last op on a key wins), as `KEY=VALUE` or
/// `-KEY`.
fn config_changes(current: &[pb::ConfigEntry], ops: &[pb::AlterConfigOp]) -> Vec<String> {
    let mut last: BTreeMap<&str, Option<&str>> = BTreeMap::new();
    for op in ops {
        let value = (op.op == pb::ConfigOp::Set as i32).then_some(op.value.as_str());
        last.insert(op.key.as_str(), value);
    }
    last.into_iter()
        .filter(|(k, v)| {
            current
                .iter()
                .find(|c| c.key == *k)
                .map(|c| c.value.as_str())
                != *v
        })
        .map(|(k, v)| match v {
            Some(v) => format!("{k}={v}"),
            None => format!("-{k}"),
        })
        .collect()
}

/// Runs `keel topics`: one function per subcommand.
pub async fn topics(a: TopicsArgs) -> ExitCode {
    let client = match a.common.client() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let out = a.common.output;
    match a.cmd {
        TopicsCmd::Create(c) => create(&client, out, c).await,
        TopicsCmd::Delete(d) => {
            let timeout = d
                .timeout_s
                .map_or(a.common.timeout_or(DELETE_WAIT), Duration::from_secs);
            delete(&client, out, d, timeout).await
        }
        TopicsCmd::List => list(&client, out).await,
        TopicsCmd::Describe(d) => describe(&client, out, d).await,
        TopicsCmd::AlterConfig { topic, set, delete } => {
            alter_config(&client, out, topic.name(), set, delete).await
        }
    }
}

/// `topics create`: creates the topic, or with `--if-not-exists` reports
/// the one already there.
async fn create(client: &ControllerClient, out: Output, c: CreateArgs) -> ExitCode {
    let CreateArgs {
        topic,
        partitions,
        replication_factor,
        replica_assignment,
        configs,
        if_not_exists,
        validate_only,
    } = c;
    let name = topic.name();
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
    let mut created = Created {
        topic_id: t.topic_id.clone(),
        partitions: t.partitions,
        replication_factor: t.replication_factor,
        existed: false,
    };
    if let Some(e) = item_error(&t.error) {
        if !(if_not_exists && e.code == keel_metadata::ErrorCode::TopicAlreadyExists) {
            return output::refused(&e);
        }
        // The reply to an existing topic carries no figures: the
        // topic's own come from describing it.
        let req = pb::DescribeTopicsRequest {
            names: vec![name.clone()],
        };
        let d = call!(client, admin, describe_topics, req.clone());
        let Some(existing) = d.topics.first() else {
            return usage(format!("the controller did not describe topic {name}"));
        };
        if let Some(e) = item_error(&existing.error) {
            return output::refused(&e);
        }
        created = Created::existing(existing);
    }
    created.print(out, &t.name, validate_only);
    ExitCode::SUCCESS
}

/// `topics delete`: marks the topic for deletion and, with `--wait`,
/// waits up to `timeout` for it to be gone.
async fn delete(
    client: &ControllerClient,
    out: Output,
    d: DeleteArgs,
    timeout: Duration,
) -> ExitCode {
    let DeleteArgs {
        topic,
        if_exists,
        wait,
        timeout_s: _,
    } = d;
    let name = topic.name();
    let req = pb::DeleteTopicsRequest {
        names: vec![name.clone()],
    };
    let r = call!(client, admin, delete_topics, req.clone());
    if let Some(e) = r.topics.first().and_then(|t| item_error(&t.error)) {
        if if_exists && e.code == keel_metadata::ErrorCode::UnknownTopic {
            match out {
                Output::Json => output::json(&json!({
                    "name": name,
                    "deleted": false,
                    "marked_for_deletion": false,
                    "existed": false,
                })),
                Output::Table => {
                    crate::outln!("Topic {name} does not exist; nothing to delete.")
                }
            }
            return ExitCode::SUCCESS;
        }
        return output::refused(&e);
    }
    if wait {
        let deadline = Instant::now() + timeout;
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
                eprintln!(
                    "error: topic {name} is still being deleted after {} s",
                    timeout.as_secs()
                );
                eprintln!("hint: deletion waits for every hosting broker to be up; see `keel cluster describe`");
                return ExitCode::from(crate::EXIT_REFUSED);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    match out {
        Output::Json => {
            output::json(&json!({"name": name, "deleted": wait, "marked_for_deletion": true}))
        }
        Output::Table if wait => crate::outln!("Deleted topic {name}."),
        Output::Table => crate::outln!("Topic {name} marked for deletion."),
    }
    ExitCode::SUCCESS
}

/// `topics list`: the topic names.
async fn list(client: &ControllerClient, out: Output) -> ExitCode {
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

/// `topics describe`: the topics and the partitions the filters keep.
async fn describe(client: &ControllerClient, out: Output, d: DescribeArgs) -> ExitCode {
    let DescribeArgs {
        topic_pos,
        topic,
        under_replicated,
        under_min_isr,
        unavailable,
        at_min_isr,
        with_overrides,
    } = d;
    let filter = PartitionFilter {
        under_replicated,
        under_min_isr,
        unavailable,
        at_min_isr,
    };
    let req = pb::DescribeTopicsRequest {
        names: topic_pos.or(topic).into_iter().collect(),
    };
    let r = call!(client, admin, describe_topics, req.clone());
    if let Some(e) = r.topics.iter().find_map(|t| item_error(&t.error)) {
        return output::refused(&e);
    }
    // Each topic shown with the partitions the filters keep; with a
    // partition filter, a topic none of whose partitions match is
    // left out.
    let shown: Vec<(&pb::TopicDescription, Vec<&pb::PartitionDescription>)> = r
        .topics
        .iter()
        .filter(|t| !with_overrides || !t.configs.is_empty())
        .map(|t| {
            let min = min_isr(t, &r.cluster_defaults);
            let parts = t
                .partitions
                .iter()
                .filter(|p| filter.keeps(p, min))
                .collect();
            (t, parts)
        })
        .filter(|(_, parts): &(_, Vec<_>)| !filter.any() || !parts.is_empty())
        .collect();
    match out {
        Output::Json => output::json(&json!({ "topics": shown
            .iter()
            .map(|(t, parts)| topic_json(t, parts))
            .collect::<Vec<_>>() })),
        Output::Table => {
            for (t, parts) in &shown {
                print_topic(t, parts);
            }
        }
    }
    ExitCode::SUCCESS
}

/// The `topics describe` table of one topic: its header line, then its
/// partitions the filters kept.
fn print_topic(t: &pb::TopicDescription, parts: &[&pb::PartitionDescription]) {
    let cfg: Vec<String> = t
        .configs
        .iter()
        .map(|c| format!("{}={}", c.key, c.value))
        .collect();
    crate::outln!(
        "Topic: {}  Id: {}  PartitionCount: {}  ReplicationFactor: {}{}  Configs: {}",
        t.name,
        topic_id_text(&t.topic_id),
        t.partitions.len(),
        replication_factor(t),
        if t.marked_for_deletion {
            "  MarkedForDeletion: true"
        } else {
            ""
        },
        cfg.join(",")
    );
    let rows: Vec<Vec<String>> = parts
        .iter()
        .filter_map(|p| {
            let s = p.state.as_ref()?;
            Some(vec![
                s.partition.to_string(),
                s.leader
                    .map(|l| l.to_string())
                    .unwrap_or_else(|| "none".into()),
                s.leader_epoch.to_string(),
                id_list(&s.replicas),
                id_list(&s.isr),
                id_list(&p.offline_replicas),
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

/// `topics alter-config`: sets and deletes configs of topic `name`,
/// refusing a change that changes nothing.
async fn alter_config(
    client: &ControllerClient,
    out: Output,
    name: String,
    set: Vec<String>,
    delete: Vec<String>,
) -> ExitCode {
    if set.is_empty() && delete.is_empty() {
        return usage("nothing to alter: give --set KEY=VALUE or --delete KEY");
    }
    let set = match parse_kv(&set) {
        Ok(s) => s,
        Err(e) => return usage(e),
    };
    let ops = config_ops(set, delete);
    // A refusal says, in its own message (so in JSON too), that
    // nothing was altered.
    let refused = |e: &keel_metadata::ApiError| {
        output::refused(&keel_metadata::ApiError::new(
            e.code,
            format!("{}. Nothing was altered.", e.message),
        ))
    };
    // The current configs, to tell a change from a no-op (which
    // the controller accepts silently).
    let d = call!(
        client,
        admin,
        describe_topics,
        pb::DescribeTopicsRequest {
            names: vec![name.clone()]
        }
    );
    if let Some(e) = d.topics.first().and_then(|t| item_error(&t.error)) {
        return refused(&e);
    }
    let current = d
        .topics
        .first()
        .map(|t| t.configs.clone())
        .unwrap_or_default();
    let changes = config_changes(&current, &ops);
    let req = pb::IncrementalAlterConfigsRequest {
        topics: vec![pb::AlterTopicConfig {
            topic: name.clone(),
            ops,
        }],
        // A no-op is still checked (a bad key or value is the
        // error to report), but not applied.
        validate_only: changes.is_empty(),
    };
    let r = call!(client, admin, incremental_alter_configs, req.clone());
    if let Some(e) = r.topics.first().and_then(|t| item_error(&t.error)) {
        return refused(&e);
    }
    if changes.is_empty() {
        output::error(
            "",
            &format!(
                "every config given already has that value on topic {name}. Nothing was altered."
            ),
            &format!("see the current values with `keel topics describe {name}`"),
        );
        return ExitCode::from(crate::EXIT_REFUSED);
    }
    match out {
        Output::Json => output::json(&json!({"name": name, "altered": true})),
        Output::Table => {
            crate::outln!("Altered configs of topic {name}: {}.", changes.join(", "))
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        cmd: TopicsCmd,
    }

    /// The filter `topics describe` with `args` applies.
    fn filter_of(args: &[&str]) -> PartitionFilter {
        let argv = ["t", "describe"].iter().chain(args).copied();
        match Cli::try_parse_from(argv).unwrap().cmd {
            TopicsCmd::Describe(DescribeArgs {
                under_replicated,
                under_min_isr,
                unavailable,
                at_min_isr,
                ..
            }) => PartitionFilter {
                under_replicated,
                under_min_isr,
                unavailable,
                at_min_isr,
            },
            other => panic!("{other:?}"),
        }
    }

    fn partition(leader: Option<u32>, replicas: &[u32], isr: &[u32]) -> pb::PartitionDescription {
        pb::PartitionDescription {
            state: Some(pb::PartitionState {
                leader,
                replicas: replicas.to_vec(),
                isr: isr.to_vec(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn describe_filters_go_by_kafka_topics_names_too() {
        // Three replicas, min.insync.replicas 2.
        let healthy = partition(Some(1), &[1, 2, 3], &[1, 2, 3]);
        let at_min = partition(Some(1), &[1, 2, 3], &[1, 2]);
        let under_min = partition(Some(1), &[1, 2, 3], &[1]);
        let leaderless = partition(None, &[1, 2, 3], &[1]);
        let kept = |f: PartitionFilter| {
            [&healthy, &at_min, &under_min, &leaderless]
                .iter()
                .map(|p| f.keeps(p, 2))
                .collect::<Vec<_>>()
        };
        for (kafka, keel, expected) in [
            (
                "--under-replicated-partitions",
                "--under-replicated",
                [false, true, true, true],
            ),
            (
                "--under-min-isr-partitions",
                "--under-min-isr",
                [false, false, true, true],
            ),
            (
                "--unavailable-partitions",
                "--unavailable",
                [false, false, false, true],
            ),
            (
                "--at-min-isr-partitions",
                "--at-min-isr",
                [false, true, false, false],
            ),
        ] {
            assert_eq!(kept(filter_of(&[kafka])), expected, "{kafka}");
            assert_eq!(kept(filter_of(&[keel])), expected, "{keel}");
        }
        assert_eq!(kept(filter_of(&[])), [true; 4]);
        // Several filters: a partition matching any.
        assert_eq!(
            kept(filter_of(&["--at-min-isr-partitions", "--unavailable"])),
            [false, true, false, true]
        );
    }

    #[test]
    fn create_says_one_partition_and_what_an_existing_topic_has() {
        let made = Created {
            topic_id: vec![],
            partitions: 1,
            replication_factor: 1,
            existed: false,
        };
        let line = made.sentence("a", false);
        assert!(line.starts_with("Created topic a "), "{line}");
        assert!(
            line.ends_with("with 1 partition, replication factor 1."),
            "{line}"
        );
        let existing = Created::existing(&pb::TopicDescription {
            name: "b".into(),
            partitions: vec![
                partition(Some(1), &[1, 2], &[1, 2]),
                partition(Some(2), &[2, 1], &[2, 1]),
            ],
            ..Default::default()
        });
        assert!(existing.existed);
        let line = existing.sentence("b", false);
        assert!(line.starts_with("Topic b already exists "), "{line}");
        assert!(
            line.ends_with("with 2 partitions, replication factor 2."),
            "{line}"
        );
    }
}
