//! `history.jsonl`: one JSON line per leadership state this broker accepted
//! or gave up, in the order it happened here. Checkers read it to verify
//! the fencing invariants (one leader per leader epoch, epochs never go back).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::BrokerError;

/// Why a line was written.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryEvent {
    /// A LeaderAndIsr changed what this broker holds.
    LeaderAndIsr,
    /// An AlterPartition this broker sent was committed; ISR / partition epoch changed.
    AlterPartition,
    /// Session lost: the broker stopped acting as leader of this partition.
    /// The fields repeat the leadership given up.
    Resigned,
    /// StopReplica: the broker no longer hosts the partition.
    Stopped,
}

/// One line of `history.jsonl`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub event: HistoryEvent,
    /// UUID text of the topic id.
    pub topic_id: String,
    pub partition: u32,
    /// `None` when the partition has no leader.
    pub leader: Option<u32>,
    pub leader_epoch: u32,
    pub partition_epoch: u32,
    pub isr: Vec<u32>,
    pub replicas: Vec<u32>,
    /// Epoch of the controller whose request this state came from.
    pub controller_epoch: u64,
    /// The broker that wrote the line.
    pub broker_id: u32,
    /// This broker's epoch when it wrote the line (0 when unregistered).
    pub broker_epoch: u64,
    /// Unix milliseconds at this broker.
    pub accepted_at_ms: u64,
}

/// Append-only writer. Each line goes out in one `write` on an `O_APPEND`
/// file, before the request that caused it is answered, so a killed
/// process never leaves a torn or missing line for an answered request.
/// Without a file (unit tests) lines are kept in memory.
#[derive(Debug)]
pub(crate) struct HistoryLog {
    path: PathBuf,
    file: Option<File>,
    /// Lines written, when there is no file.
    memory: Vec<HistoryEntry>,
}

impl HistoryLog {
    pub(crate) fn open(path: &Path) -> Result<Self, BrokerError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| BrokerError::io(path, e))?;
        Ok(Self {
            path: path.to_path_buf(),
            file: Some(file),
            memory: Vec::new(),
        })
    }

    #[cfg(test)]
    pub(crate) fn in_memory() -> Self {
        Self {
            path: PathBuf::from("<memory>"),
            file: None,
            memory: Vec::new(),
        }
    }

    #[cfg(test)]
    pub(crate) fn lines(&self) -> &[HistoryEntry] {
        &self.memory
    }

    pub(crate) fn append(&mut self, entry: &HistoryEntry) -> Result<(), BrokerError> {
        let Some(file) = self.file.as_mut() else {
            self.memory.push(entry.clone());
            return Ok(());
        };
        let mut line = serde_json::to_vec(entry).map_err(|e| BrokerError::Io {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        line.push(b'\n');
        file.write_all(&line)
            .and_then(|()| file.flush())
            .map_err(|e| BrokerError::io(&self.path, e))
    }
}

/// Reads every line of a history file (for tests and checkers).
pub fn read_history(path: &Path) -> std::io::Result<Vec<HistoryEntry>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(std::io::Error::other))
        .collect()
}
