//! The client history: one record per operation, with invoke and
//! completion times and an outcome (`ok`, `fail`, `info`).

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
    /// Partitions a create asked for, or a successful describe saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<u32>,
    /// Controller address that gave the final answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Attempts made (retries happen only after definite non-application).
    #[serde(default)]
    pub attempts: u32,
}

impl OpRecord {
    pub fn latency_ms(&self) -> f64 {
        (self.complete_ms - self.invoke_ms).max(0.0)
    }
}

/// Writes the history as JSON lines.
pub fn write_history(path: &Path, ops: &[OpRecord]) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for op in ops {
        serde_json::to_writer(&mut f, op)?;
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
