//! `keel configs`: describe and alter topic configs and their cluster-wide
//! defaults, the way Kafka's `kafka-configs` does (`--entity-type topics
//! --entity-name T`, or `--topic T`; `--entity-default` for the defaults).

use std::process::ExitCode;

use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use keel_metadata::topic_config::{self, ConfigSource};
use keel_proto::client::ControllerClient;
use keel_proto::pb;
use serde_json::json;

use super::{item_error, usage, Common};
use crate::output::{self, Output};

#[derive(Args, Debug)]
pub struct ConfigsArgs {
    #[command(subcommand)]
    cmd: ConfigsCmd,
    #[command(flatten)]
    common: Common,
}

/// Kafka's entity types; Keel keeps configs of topics, and cluster-wide
/// defaults of them (`brokers --entity-default`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum EntityType {
    Topics,
    Brokers,
}

/// Whose configs: one topic, or the cluster-wide defaults.
#[derive(Args, Debug, Clone)]
#[command(group(ArgGroup::new("entity").args(["topic", "entity_name", "entity_default"]).required(true)))]
struct Entity {
    /// The topic (same as `--entity-type topics --entity-name T`).
    #[arg(long, short = 't')]
    topic: Option<String>,
    /// Kafka's spelling: `topics` with `--entity-name`, or `brokers` with
    /// `--entity-default`.
    #[arg(long, value_enum)]
    entity_type: Option<EntityType>,
    /// The topic, with `--entity-type topics`.
    #[arg(long)]
    entity_name: Option<String>,
    /// The cluster-wide defaults every topic without its own value takes
    /// (Kafka's dynamic default broker configs).
    #[arg(long)]
    entity_default: bool,
}

/// What `Entity` names, once checked.
enum Target {
    Topic(String),
    Defaults,
}

impl Entity {
    fn target(&self) -> Result<Target, String> {
        match (&self.topic, &self.entity_name, self.entity_default, self.entity_type) {
            (Some(t), None, false, None | Some(EntityType::Topics)) => Ok(Target::Topic(t.clone())),
            (None, Some(t), false, Some(EntityType::Topics)) => Ok(Target::Topic(t.clone())),
            (None, Some(_), false, None) => Err("--entity-name needs --entity-type topics".into()),
            (None, Some(b), false, Some(EntityType::Brokers)) => Err(format!(
                "Keel keeps no configs of broker {b}; cluster-wide defaults are set with --entity-default"
            )),
            (None, None, true, None | Some(EntityType::Brokers)) => Ok(Target::Defaults),
            (None, None, true, Some(EntityType::Topics)) => Err(
                "topics have no defaults of their own; --entity-default means the cluster-wide defaults"
                    .into(),
            ),
            _ => Err("name one entity: --topic T, --entity-type topics --entity-name T, or --entity-default".into()),
        }
    }
}

#[derive(Subcommand, Debug)]
enum ConfigsCmd {
    /// A topic's configs that are set (its own values and the cluster
    /// defaults it takes), with where each comes from, as kafka-configs
    /// shows them; `--all` adds every other config at Kafka's default.
    /// With `--entity-default`, the cluster-wide defaults that are set.
    /// `-o json` lists the same configs as the table.
    #[command(
        after_help = "Examples:\n  keel configs describe --topic orders\n  keel configs describe --entity-type topics --entity-name orders --all\n  keel configs describe --entity-default"
    )]
    Describe {
        #[command(flatten)]
        entity: Entity,
        /// Only values that are not Kafka's default (the topic's own and
        /// the cluster's defaults): what is shown without `--all`.
        #[arg(long)]
        overrides: bool,
        /// Every config, Kafka's defaults included (kafka-configs' flag).
        #[arg(long, conflicts_with = "overrides")]
        all: bool,
    },
    /// Set or delete configs of a topic, or cluster-wide defaults. Keys
    /// and values are checked against Kafka's topic config schema; for
    /// the defaults, Kafka's broker names (`log.retention.ms`) are taken
    /// as the topic config they stand for (`retention.ms`).
    #[command(
        after_help = "Examples:\n  keel configs alter --topic orders --add-config retention.ms=3600000,cleanup.policy=[compact,delete]\n  keel configs alter --entity-default --add-config log.retention.ms=86400000\n  keel configs alter --entity-default --delete-config retention.ms"
    )]
    Alter {
        #[command(flatten)]
        entity: Entity,
        /// KEY=VALUE pairs, comma separated; a list value in brackets
        /// (`cleanup.policy=[compact,delete]`). Repeatable.
        #[arg(long, value_name = "K=V,K=V")]
        add_config: Vec<String>,
        /// Keys to delete, comma separated. Repeatable.
        #[arg(long, value_name = "K,K")]
        delete_config: Vec<String>,
        /// Check the change and report what would happen; change nothing.
        #[arg(long)]
        validate_only: bool,
    },
}

/// Splits kafka-configs' `--add-config` syntax: `k=v,k2=[a,b]`.
fn parse_add_config(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else {
            return Err(format!("{rest:?} is not KEY=VALUE"));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(format!("{s:?} has an empty key"));
        }
        let (value, next) = if let Some(list) = after.strip_prefix('[') {
            let Some((inner, tail)) = list.split_once(']') else {
                return Err(format!("the value of {key} opens [ but never closes it"));
            };
            let tail = tail.trim_start();
            if !(tail.is_empty() || tail.starts_with(',')) {
                return Err(format!("unexpected {tail:?} after the list value of {key}"));
            }
            (inner.to_string(), tail.strip_prefix(',').unwrap_or(tail))
        } else {
            match after.split_once(',') {
                Some((v, tail)) => (v.to_string(), tail),
                None => (after.to_string(), ""),
            }
        };
        out.push((key.to_string(), value.trim().to_string()));
        rest = next.trim();
    }
    Ok(out)
}

/// The ops an alter asks for; for the defaults, Kafka's broker names are
/// mapped to the topic config they stand for.
fn alter_ops(
    add: &[String],
    delete: &[String],
    defaults: bool,
) -> Result<Vec<pb::AlterConfigOp>, String> {
    let key = |k: &str| {
        if defaults {
            topic_config::default_key(k).unwrap_or(k).to_string()
        } else {
            k.to_string()
        }
    };
    let mut ops = Vec::new();
    for a in add {
        for (k, value) in parse_add_config(a)? {
            ops.push(pb::AlterConfigOp {
                key: key(&k),
                value,
                op: pb::ConfigOp::Set as i32,
            });
        }
    }
    for d in delete {
        for k in d.split(',').map(str::trim).filter(|k| !k.is_empty()) {
            ops.push(pb::AlterConfigOp {
                key: key(k),
                value: String::new(),
                op: pb::ConfigOp::Delete as i32,
            });
        }
    }
    if ops.is_empty() {
        return Err("nothing to alter: give --add-config K=V or --delete-config K".into());
    }
    Ok(ops)
}

/// One row of a topic's configs.
struct Row {
    name: String,
    value: String,
    source: ConfigSource,
}

/// Every config of a topic (the schema's, then any other key it has), its
/// value and source, from the topic's own configs and the cluster defaults.
fn topic_rows(own: &[pb::ConfigEntry], defaults: &[pb::ConfigEntry]) -> Vec<Row> {
    topic_config::effective(
        &keel_proto::convert::config_map(own),
        &keel_proto::convert::config_map(defaults),
    )
    .into_iter()
    .map(|e| Row {
        name: e.name.to_string(),
        value: e.value.to_string(),
        source: e.source,
    })
    .collect()
}

/// The rows `describe` shows: those set (on the topic or as a cluster
/// default), or with `all` every one.
fn described_rows(rows: Vec<Row>, all: bool) -> Vec<Row> {
    rows.into_iter()
        .filter(|r| all || r.source != ConfigSource::Default)
        .collect()
}

/// Runs `keel configs`: describe or alter a topic's configs or the
/// cluster-wide defaults.
pub async fn configs(a: ConfigsArgs) -> ExitCode {
    let client = match a.common.client() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let out = a.common.output;
    match a.cmd {
        ConfigsCmd::Describe {
            entity,
            overrides: _,
            all,
        } => match entity.target() {
            Err(e) => usage(e),
            Ok(Target::Topic(name)) => describe_topic(&client, out, name, all).await,
            Ok(Target::Defaults) => describe_defaults(&client, out).await,
        },
        ConfigsCmd::Alter {
            entity,
            add_config,
            delete_config,
            validate_only,
        } => {
            let target = match entity.target() {
                Ok(t) => t,
                Err(e) => return usage(e),
            };
            alter(
                &client,
                out,
                target,
                &add_config,
                &delete_config,
                validate_only,
            )
            .await
        }
    }
}

/// `configs describe` of topic `name`: its configs set (or with `all`
/// every one), with their sources.
async fn describe_topic(
    client: &ControllerClient,
    out: Output,
    name: String,
    all: bool,
) -> ExitCode {
    let d = call!(
        client,
        admin,
        describe_topics,
        pb::DescribeTopicsRequest {
            names: vec![name.clone()]
        }
    );
    let Some(t) = d.topics.first() else {
        return usage(format!("the controller did not describe topic {name}"));
    };
    if let Some(e) = item_error(&t.error) {
        return output::refused(&e);
    }
    let rows = described_rows(topic_rows(&t.configs, &d.cluster_defaults), all);
    match out {
        Output::Json => output::json(&json!({
            "topic": name,
            "configs": rows.iter().map(|r| json!({
                "name": r.name,
                "value": r.value,
                "source": r.source.kafka_name(),
            })).collect::<Vec<_>>(),
        })),
        Output::Table if rows.is_empty() => crate::outln!(
            "No config is set on topic {name} or as a cluster-wide default; every config takes Kafka's default (see them with --all)."
        ),
        Output::Table => output::table(
            &["KEY", "VALUE", "SOURCE"],
            &rows
                .iter()
                .map(|r| {
                    vec![
                        r.name.clone(),
                        r.value.clone(),
                        r.source.kafka_name().to_string(),
                    ]
                })
                .collect::<Vec<_>>(),
        ),
    }
    ExitCode::SUCCESS
}

/// `configs describe --entity-default`: the cluster-wide defaults.
async fn describe_defaults(client: &ControllerClient, out: Output) -> ExitCode {
    let d = call!(
        client,
        admin,
        describe_cluster_configs,
        pb::DescribeClusterConfigsRequest {}
    );
    let synonym = |k: &str| topic_config::broker_synonym(k).unwrap_or("").to_string();
    match out {
        Output::Json => output::json(&json!({
            "cluster_defaults": d.configs.iter().map(|c| json!({
                "name": c.key,
                "value": c.value,
                "broker_config": topic_config::broker_synonym(&c.key),
                "source": ConfigSource::ClusterDefault.kafka_name(),
            })).collect::<Vec<_>>(),
        })),
        Output::Table if d.configs.is_empty() => {
            crate::outln!("No cluster-wide defaults are set; every topic without its own value takes Kafka's default.")
        }
        Output::Table => output::table(
            &["KEY", "VALUE", "KAFKA BROKER CONFIG"],
            &d.configs
                .iter()
                .map(|c| vec![c.key.clone(), c.value.clone(), synonym(&c.key)])
                .collect::<Vec<_>>(),
        ),
    }
    ExitCode::SUCCESS
}

/// `configs alter`: sets and deletes configs of a topic or of the
/// cluster-wide defaults.
async fn alter(
    client: &ControllerClient,
    out: Output,
    target: Target,
    add_config: &[String],
    delete_config: &[String],
    validate_only: bool,
) -> ExitCode {
    let defaults = matches!(target, Target::Defaults);
    let ops = match alter_ops(add_config, delete_config, defaults) {
        Ok(ops) => ops,
        Err(e) => return usage(e),
    };
    let keys: Vec<String> = ops.iter().map(|o| o.key.clone()).collect();
    let what = match &target {
        Target::Topic(name) => {
            let req = pb::IncrementalAlterConfigsRequest {
                topics: vec![pb::AlterTopicConfig {
                    topic: name.clone(),
                    ops,
                }],
                validate_only,
            };
            let r = call!(client, admin_write, incremental_alter_configs, req);
            if let Some(e) = r.topics.first().and_then(|t| item_error(&t.error)) {
                return output::refused(&e);
            }
            format!("topic {name}")
        }
        Target::Defaults => {
            let req = pb::AlterClusterConfigsRequest { ops, validate_only };
            call!(client, admin_write, alter_cluster_configs, req);
            "the cluster-wide defaults".to_string()
        }
    };
    match out {
        Output::Json => output::json(&json!({
            "altered": !validate_only,
            "validated": true,
            "keys": keys,
        })),
        Output::Table if validate_only => {
            crate::outln!("Valid; nothing changed: {} of {what}.", keys.join(", "))
        }
        Output::Table => crate::outln!("Altered {} of {what}.", keys.join(", ")),
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_config_reads_kafka_configs_syntax() {
        assert_eq!(
            parse_add_config("retention.ms=5,cleanup.policy=[compact,delete], segment.ms = 9")
                .unwrap(),
            vec![
                ("retention.ms".into(), "5".into()),
                ("cleanup.policy".into(), "compact,delete".into()),
                ("segment.ms".into(), "9".into()),
            ]
        );
        assert!(parse_add_config("retention.ms").is_err());
        assert!(parse_add_config("=5").is_err());
        assert!(parse_add_config("cleanup.policy=[compact").is_err());
        assert!(parse_add_config("cleanup.policy=[compact]x").is_err());
    }

    #[test]
    fn defaults_take_kafkas_broker_names_as_the_topic_config() {
        let ops = alter_ops(
            &["log.retention.ms=5".into()],
            &["log.cleanup.policy,min.insync.replicas".into()],
            true,
        )
        .unwrap();
        let keys: Vec<_> = ops.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(
            keys,
            ["retention.ms", "cleanup.policy", "min.insync.replicas"]
        );
        // A topic's keys are passed as given (the controller checks them).
        let ops = alter_ops(&["log.retention.ms=5".into()], &[], false).unwrap();
        assert_eq!(ops[0].key, "log.retention.ms");
        assert!(alter_ops(&[], &[], true).is_err());
    }

    #[test]
    fn a_topics_rows_say_where_each_value_comes_from() {
        let e = |k: &str, v: &str| pb::ConfigEntry {
            key: k.into(),
            value: v.into(),
        };
        let rows = topic_rows(
            &[e("retention.ms", "5"), e("x.custom", "1")],
            &[e("retention.ms", "7"), e("segment.ms", "9")],
        );
        let find = |k: &str| rows.iter().find(|r| r.name == k).unwrap();
        assert_eq!(find("retention.ms").source, ConfigSource::Topic);
        assert_eq!(find("retention.ms").value, "5");
        assert_eq!(find("segment.ms").source, ConfigSource::ClusterDefault);
        assert_eq!(find("segment.ms").value, "9");
        assert_eq!(find("cleanup.policy").source, ConfigSource::Default);
        assert_eq!(find("cleanup.policy").value, "delete");
        assert_eq!(find("x.custom").source, ConfigSource::Topic);
        assert_eq!(rows.len(), topic_config::TOPIC_CONFIGS.len() + 1);
    }

    #[test]
    fn describe_shows_only_set_configs_unless_all() {
        use clap::Parser;
        #[derive(Parser, Debug)]
        struct Cli {
            #[command(subcommand)]
            cmd: ConfigsCmd,
        }
        let all = |args: &[&str]| match Cli::try_parse_from(args).unwrap().cmd {
            ConfigsCmd::Describe { all, .. } => all,
            other => panic!("{other:?}"),
        };
        let e = |k: &str, v: &str| pb::ConfigEntry {
            key: k.into(),
            value: v.into(),
        };
        let rows = || topic_rows(&[e("retention.ms", "5")], &[e("segment.ms", "9")]);
        let names = |rows: Vec<Row>| rows.into_iter().map(|r| r.name).collect::<Vec<_>>();

        let shown = described_rows(rows(), all(&["c", "describe", "-t", "t"]));
        assert_eq!(names(shown), ["retention.ms", "segment.ms"]);
        // `--overrides` (the older spelling of the default) is still taken.
        let shown = described_rows(rows(), all(&["c", "describe", "-t", "t", "--overrides"]));
        assert_eq!(names(shown), ["retention.ms", "segment.ms"]);
        let shown = described_rows(rows(), all(&["c", "describe", "-t", "t", "--all"]));
        assert_eq!(shown.len(), topic_config::TOPIC_CONFIGS.len());
    }
}
