//! `keel elect-leaders`: elect preferred or unclean leaders.

use std::process::ExitCode;

use clap::Args;
use keel_proto::pb;
use serde_json::json;

use super::{item_error, usage, Common};
use crate::output::{self, Output};

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
