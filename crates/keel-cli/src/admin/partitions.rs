//! `keel partitions add`: grow a topic.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use keel_proto::pb;
use serde_json::json;

use super::{item_error, Common};
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
    /// Grow a topic to `--total` partitions.
    Add {
        topic: String,
        #[arg(long)]
        total: u32,
    },
}

pub async fn partitions(a: PartitionsArgs) -> ExitCode {
    let client = match a.common.client() {
        Ok(c) => c,
        Err(code) => return code,
    };
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
        Output::Table => crate::outln!("Topic {topic} now has {total} partitions."),
    }
    ExitCode::SUCCESS
}
