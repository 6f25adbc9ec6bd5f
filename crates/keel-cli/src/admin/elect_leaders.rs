//! `keel elect-leaders`: elect preferred or unclean leaders.

use std::process::ExitCode;

use clap::Args;
use keel_proto::pb;
use serde_json::json;

use super::{item_error, usage, Common};
use crate::output;

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  keel elect-leaders --preferred --all\n  keel elect-leaders --preferred -t orders --partition 3\n  keel elect-leaders --unclean --path-to-json-file partitions.json\n    (Kafka's format: {\"partitions\": [{\"topic\": \"orders\", \"partition\": 3}]})"
)]
pub struct ElectArgs {
    /// Move leadership back to preferred replicas.
    #[arg(long, conflicts_with = "unclean")]
    preferred: bool,
    /// Elect a leader for leaderless partitions even from outside the ISR.
    #[arg(long)]
    unclean: bool,
    /// The topic of the one partition to elect for.
    #[arg(long, short = 't', requires = "partition")]
    topic: Option<String>,
    /// The partition (of --topic) to elect for.
    #[arg(long, requires = "topic")]
    partition: Option<u32>,
    /// Every partition.
    #[arg(long, conflicts_with = "topic")]
    all: bool,
    /// The partitions to elect for, in Kafka's JSON file format:
    /// {"partitions": [{"topic": "T", "partition": 0}, ...]}.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["topic", "all"])]
    path_to_json_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    common: Common,
}

/// Kafka's `--path-to-json-file` format.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PartitionsFile {
    partitions: Vec<PartitionRef>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PartitionRef {
    topic: String,
    partition: u32,
}

/// The partitions a `--path-to-json-file` names (at least one: an empty
/// list would mean every partition to the controller).
fn read_partitions(path: &std::path::Path) -> Result<Vec<pb::TopicPartitionRef>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let f: PartitionsFile = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{}: not a partition list like {{\"partitions\": [{{\"topic\": \"T\", \"partition\": 0}}]}}: {e}",
            path.display()
        )
    })?;
    if f.partitions.is_empty() {
        return Err(format!(
            "{} lists no partition (use --all for every partition)",
            path.display()
        ));
    }
    Ok(f.partitions
        .into_iter()
        .map(|p| pb::TopicPartitionRef {
            topic: p.topic,
            partition: p.partition,
        })
        .collect())
}

pub async fn elect(a: ElectArgs) -> ExitCode {
    if !a.preferred && !a.unclean {
        return usage("pass --preferred or --unclean");
    }
    if !a.all && a.topic.is_none() && a.path_to_json_file.is_none() {
        return usage("pass --topic T --partition P, --path-to-json-file FILE, or --all");
    }
    let listed = match a
        .path_to_json_file
        .as_deref()
        .map(read_partitions)
        .transpose()
    {
        Ok(l) => l,
        Err(e) => return usage(e),
    };
    let client = match a.common.client() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let req = pb::ElectLeadersRequest {
        election_type: if a.unclean {
            pb::ElectionType::Unclean
        } else {
            pb::ElectionType::Preferred
        } as i32,
        partitions: match (&a.topic, a.partition, listed) {
            (_, _, Some(listed)) => listed,
            (Some(t), Some(p), None) => vec![pb::TopicPartitionRef {
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
    let v = json!({
        "partitions": r.partitions.iter().map(|p| json!({
            "topic": p.topic, "partition": p.partition, "leader": p.leader,
            "error": item_error(&p.error).map(|e| e.code.name()),
        })).collect::<Vec<_>>()
    });
    output::answer(
        a.common.output,
        v,
        || output::table(&["TOPIC", "PARTITION", "RESULT"], &rows),
        failed.as_ref(),
    )
}
