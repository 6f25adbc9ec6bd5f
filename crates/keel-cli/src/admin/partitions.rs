//! `keel partitions set` (alias `add`): grow a topic to a total.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use keel_proto::pb;
use serde_json::json;

use super::{item_error, Common, TopicArg};
use crate::output::{self, Output};

#[derive(Args, Debug)]
pub struct PartitionsArgs {
    #[command(subcommand)]
    cmd: PartitionsCmd,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand, Debug)]
enum PartitionsCmd {
    /// Grow a topic to `--total` partitions in all (partitions can only
    /// be added). `add` is the same command: its `--total` is the new
    /// count, not how many to add.
    #[command(
        visible_alias = "add",
        after_help = "Example (orders has 6 partitions; afterwards it has 12):\n  keel partitions set orders --total 12"
    )]
    Set {
        #[command(flatten)]
        topic: TopicArg,
        /// The partition count the topic ends with.
        #[arg(long)]
        total: u32,
    },
}

pub async fn partitions(a: PartitionsArgs) -> ExitCode {
    let client = match a.common.client() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let PartitionsCmd::Set { topic, total } = a.cmd;
    let topic = topic.name();
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
        Output::Table => crate::outln!(
            "Topic {topic} now has {}.",
            keel_controller::console::count(total as usize, "partition")
        ),
    }
    ExitCode::SUCCESS
}
