//! The client history: one record per operation, with invoke and
//! completion times and an outcome (`ok`, `fail`, `info`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// What a client asked for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    Create,
    Delete,
    Describe,
    /// CreatePartitions to a larger total (`partitions`).
    CreatePartitions,
    /// IncrementalAlterConfigs of one key (`config_key`, `config_value`).
    AlterConfig,
    /// AlterPartitionReassignments of one partition (`partition`, `replicas`).
    Reassign,
    /// Preferred leader election over every partition of the topic.
    ElectPreferred,
}

/// How an operation ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Acknowledged: it happened.
    Ok,
    /// Definitely not applied: the controller refused it (or it was never sent).
    Fail,
    /// Unknown: it may or may not have been applied, at any time after invocation.
    Info,
}

/// What a successful describe saw.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Seen {
    /// UNKNOWN_TOPIC.
    Absent,
    /// Listed and not marked for deletion.
    Present,
    /// Listed and marked for deletion.
    Deleting,
    /// Listed, present or marked for deletion: a Kafka client's describe
    /// (Kafka has no "marked for deletion", so it cannot tell which).
    Listed,
}

/// One operation of the history (one JSON line of `history.jsonl`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpRecord {
    /// Position in the history (order of completion records).
    pub index: usize,
    /// Client (worker) number; `-1` for the harness's own final reads.
    pub client: i64,
    /// Logical process: a client that got `info` continues as a new process
    /// (its old operation may still be in flight).
    pub process: u64,
    pub op: OpKind,
    pub name: String,
    /// Milliseconds since the run started.
    pub invoke_ms: f64,
    pub complete_ms: f64,
    pub outcome: Outcome,
    /// Wire error code name when the cluster answered with one (e.g. TOPIC_ALREADY_EXISTS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Describe result, when `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen: Option<Seen>,
    /// Topic id (hex) returned by a create or seen by a describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_id: Option<String>,
    /// Partitions a create asked for, the total a create_partitions asked
    /// for, or what a successful describe saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<u32>,
    /// Replication factor a create asked for or a describe saw (`0`: the
    /// describe's partitions disagreed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_factor: Option<u32>,
    /// Topic configs set explicitly, as a successful describe saw them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configs: Option<BTreeMap<String, String>>,
    /// Key an alter_config changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_key: Option<String>,
    /// Value an alter_config set; absent with `config_key` = removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_value: Option<String>,
    /// Partition a reassign moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<u32>,
    /// Target replicas of a reassign.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Vec<u32>>,
    /// Controller address that gave the final answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Attempts made (retries happen only after definite non-application).
    #[serde(default)]
    pub attempts: u32,
}

impl OpRecord {
    /// An operation with nothing but its kind, name, times and outcome
    /// (one attempt; every other field empty): what hand-made histories
    /// start from.
    pub fn new(op: OpKind, name: &str, invoke_ms: f64, complete_ms: f64, outcome: Outcome) -> Self {
        Self {
            index: 0,
            client: 0,
            process: 0,
            op,
            name: name.into(),
            invoke_ms,
            complete_ms,
            outcome,
            error: None,
            message: None,
            seen: None,
            topic_id: None,
            partitions: None,
            replication_factor: None,
            configs: None,
            config_key: None,
            config_value: None,
            partition: None,
            replicas: None,
            node: None,
            attempts: 1,
        }
    }

    pub fn latency_ms(&self) -> f64 {
        (self.complete_ms - self.invoke_ms).max(0.0)
    }
}

/// Writes the history as JSON lines.
pub fn write_history(path: &Path, ops: &[OpRecord]) -> std::io::Result<()> {
    write_json_lines(path, ops)
}

/// Writes `items` to `path`, one JSON object a line.
pub fn write_json_lines<T: Serialize>(path: &Path, items: &[T]) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for item in items {
        serde_json::to_writer(&mut f, item)?;
        f.write_all(b"\n")?;
    }
    f.flush()
}

/// Reads a history written by [`write_history`].
pub fn read_history(path: &Path) -> std::io::Result<Vec<OpRecord>> {
    let text = std::fs::read_to_string(path)?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(std::io::Error::other))
        .collect()
}
