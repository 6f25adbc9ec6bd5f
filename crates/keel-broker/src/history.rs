//! `history.jsonl`: one JSON line per leadership state this broker accepted
//! or gave up, in the order it happened here. Checkers read it to verify
//! the fencing invariants (one leader per leader epoch, epochs never go back).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use keel_metadata::{BrokerId, ControllerEpoch, PartitionLeadership, TopicId};
use keel_raft::stall::{timed, StorageOp};
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

/// One line about to be written, borrowing what the broker holds: a
/// LeaderAndIsr for 100,000 partitions writes 100,000 of them, so encoding
/// one allocates nothing. Serializes field for field as [`HistoryEntry`]
/// (the topic id as its UUID text; id newtypes as their numbers).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Line<'a> {
    pub event: HistoryEvent,
    #[serde(serialize_with = "serialize_display")]
    pub topic_id: TopicId,
    pub partition: u32,
    pub leader: Option<BrokerId>,
    pub leader_epoch: u32,
    pub partition_epoch: u32,
    pub isr: &'a [BrokerId],
    pub replicas: &'a [BrokerId],
    pub controller_epoch: u64,
    pub broker_id: u32,
    pub broker_epoch: u64,
    pub accepted_at_ms: u64,
}

/// Who writes the lines of one request, and when: the same for all of them.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Author {
    pub broker_id: BrokerId,
    /// The broker's epoch (0 when unregistered).
    pub broker_epoch: u64,
    /// Wall clock (Unix ms) when the request was applied.
    pub at_ms: u64,
}

impl<'a> Line<'a> {
    /// The line recording `state`, which a request of `controller_epoch` set.
    pub(crate) fn of(
        event: HistoryEvent,
        state: &'a PartitionLeadership,
        controller_epoch: ControllerEpoch,
        by: Author,
    ) -> Self {
        Line {
            event,
            topic_id: state.tp.topic_id,
            partition: state.tp.partition.0,
            leader: state.leader,
            leader_epoch: state.leader_epoch.0,
            partition_epoch: state.partition_epoch.0,
            isr: &state.isr,
            replicas: &state.replicas,
            controller_epoch: controller_epoch.0,
            broker_id: by.broker_id.0,
            broker_epoch: by.broker_epoch,
            accepted_at_ms: by.at_ms,
        }
    }
}

impl Line<'_> {
    /// The line as [`read_history`] returns it.
    pub(crate) fn to_entry(&self) -> HistoryEntry {
        HistoryEntry {
            event: self.event,
            topic_id: self.topic_id.to_string(),
            partition: self.partition,
            leader: self.leader.map(|b| b.0),
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            isr: self.isr.iter().map(|b| b.0).collect(),
            replicas: self.replicas.iter().map(|b| b.0).collect(),
            controller_epoch: self.controller_epoch,
            broker_id: self.broker_id,
            broker_epoch: self.broker_epoch,
            accepted_at_ms: self.accepted_at_ms,
        }
    }

    /// Appends the line as JSON (what serde writes for [`HistoryEntry`],
    /// without building one) and a newline.
    fn write_json(&self, out: &mut Vec<u8>) {
        // Plain numbers, strings and arrays into memory: cannot fail.
        serde_json::to_writer(&mut *out, self).expect("a history line encodes to JSON");
        out.push(b'\n');
    }
}

/// Serializes a value as the string its `Display` writes.
fn serialize_display<T: std::fmt::Display, S: serde::Serializer>(
    v: &T,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// Append-only writer. The lines of one request are staged, then go out
/// in one `write` on an `O_APPEND` file and one `fdatasync` before the
/// request is answered: neither a killed process nor a power cut loses a
/// line of an answered request (one sync per request, not per line).
/// A write that fails half-way is cut back off; a line torn by a kill in
/// the middle of a write (its request was never answered) is cut off when
/// the file is opened again. Without a file (unit tests) lines are kept in
/// memory.
#[derive(Debug)]
pub(crate) struct HistoryLog {
    path: PathBuf,
    file: Option<File>,
    /// Lines written, when there is no file.
    memory: Vec<HistoryEntry>,
    /// Encoded lines staged for the next [`HistoryLog::commit`].
    staged: Vec<u8>,
    /// Lines staged, when there is no file.
    staged_memory: Vec<HistoryEntry>,
}

impl HistoryLog {
    pub(crate) fn open(path: &Path) -> Result<Self, BrokerError> {
        let _timed = timed(StorageOp::Open);
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .map_err(|e| BrokerError::io(path, e))?;
        cut_torn_tail(&mut file, path)?;
        Ok(Self {
            path: path.to_path_buf(),
            file: Some(file),
            memory: Vec::new(),
            staged: Vec::new(),
            staged_memory: Vec::new(),
        })
    }

    #[cfg(test)]
    pub(crate) fn in_memory() -> Self {
        Self {
            path: PathBuf::from("<memory>"),
            file: None,
            memory: Vec::new(),
            staged: Vec::new(),
            staged_memory: Vec::new(),
        }
    }

    #[cfg(test)]
    pub(crate) fn lines(&self) -> &[HistoryEntry] {
        &self.memory
    }

    /// Writes one line now.
    #[cfg(test)]
    pub(crate) fn append(&mut self, line: &Line<'_>) -> Result<(), BrokerError> {
        self.stage(line);
        self.commit()
    }

    /// Stages the lines of one request, all written by `by`.
    pub(crate) fn stager(&mut self, by: Author) -> Stager<'_> {
        Stager { log: self, by }
    }

    /// Adds a line to the next write.
    pub(crate) fn stage(&mut self, line: &Line<'_>) {
        if self.file.is_none() {
            self.staged_memory.push(line.to_entry());
        } else {
            line.write_json(&mut self.staged);
        }
    }

    /// Writes every staged line in one write; on failure none of them
    /// stays in the file (as far as the file system lets us undo).
    pub(crate) fn commit(&mut self) -> Result<(), BrokerError> {
        let Some(file) = self.file.as_mut() else {
            self.memory.append(&mut self.staged_memory);
            return Ok(());
        };
        if self.staged.is_empty() {
            return Ok(());
        }
        // A disk that never answers leaves the write here for ever: the
        // storage-stall watch ends the process.
        let _timed = timed(StorageOp::BrokerHistory);
        let buf = std::mem::take(&mut self.staged);
        let before = file.metadata().map(|m| m.len());
        // A positioned write at the end (the file is O_APPEND, so the
        // kernel appends whatever the offset): `pwrite`, which only files
        // take, so a fault injected into it (libfiu) reaches the history
        // and not the broker's sockets.
        let r = match before {
            Ok(len) => file.write_all_at(&buf, len),
            Err(_) => file.write_all(&buf),
        };
        // Keep the allocation for the next request.
        self.staged = buf;
        self.staged.clear();
        if let Err(e) = r {
            if let Ok(len) = before {
                let _ = file.set_len(len);
            }
            return Err(BrokerError::io(&self.path, e));
        }
        // Durable before the request is answered. A failed sync fails the
        // request, and its lines are cut back off (then synced, as far as
        // the disk lets us), so a later successful sync cannot make the
        // record of a refused change durable.
        file.sync_data().map_err(|e| {
            if let Ok(len) = before {
                let _ = file.set_len(len);
                let _ = file.sync_data();
            }
            BrokerError::io(&self.path, e)
        })
    }
}

/// Stages the lines of one request under one author; the request's
/// owner then writes them with [`HistoryLog::commit`].
pub(crate) struct Stager<'a> {
    log: &'a mut HistoryLog,
    by: Author,
}

impl Stager<'_> {
    /// Stages the line recording `state`, which a request of
    /// `controller_epoch` set.
    pub(crate) fn stage(
        &mut self,
        event: HistoryEvent,
        state: &PartitionLeadership,
        controller_epoch: ControllerEpoch,
    ) {
        self.log
            .stage(&Line::of(event, state, controller_epoch, self.by));
    }
}

/// Cuts a last line without its newline: the process died inside the write
/// of a request it never answered.
fn cut_torn_tail(file: &mut File, path: &Path) -> Result<(), BrokerError> {
    let meta = file.metadata().map_err(|e| BrokerError::io(path, e))?;
    if !meta.is_file() || meta.len() == 0 {
        return Ok(());
    }
    let len = meta.len();
    let mut keep = 0u64;
    let mut end = len;
    let mut buf = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))
            .and_then(|_| file.read_exact(chunk))
            .map_err(|e| BrokerError::io(path, e))?;
        if let Some(i) = chunk.iter().rposition(|b| *b == b'\n') {
            keep = start + i as u64 + 1;
            break;
        }
        end = start;
    }
    if keep < len {
        tracing::warn!(
            path = %path.display(),
            bytes = len - keep,
            "history ends with a torn line (the process died while writing it); cutting it off"
        );
        file.set_len(keep).map_err(|e| BrokerError::io(path, e))?;
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &[BrokerId] = &[BrokerId(1)];

    fn line(partition: u32) -> Line<'static> {
        Line {
            event: HistoryEvent::LeaderAndIsr,
            topic_id: keel_metadata::TopicId(7),
            partition,
            leader: Some(BrokerId(1)),
            leader_epoch: 1,
            partition_epoch: 1,
            isr: ONE,
            replicas: ONE,
            controller_epoch: 1,
            broker_id: 1,
            broker_epoch: 1,
            accepted_at_ms: 0,
        }
    }

    /// The partitions of the history file's lines, in order.
    fn partitions_in(path: &Path) -> Vec<u32> {
        read_history(path)
            .unwrap()
            .iter()
            .map(|e| e.partition)
            .collect()
    }

    #[test]
    fn a_line_is_written_as_serde_would_write_it() {
        let ids = [BrokerId(3), BrokerId(12), BrokerId(4_000_000_000)];
        for (event, leader) in [
            (HistoryEvent::LeaderAndIsr, Some(BrokerId(12))),
            (HistoryEvent::AlterPartition, Some(BrokerId(0))),
            (HistoryEvent::Resigned, None),
            (HistoryEvent::Stopped, None),
        ] {
            let l = Line {
                event,
                topic_id: keel_metadata::TopicId(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210),
                partition: u32::MAX,
                leader,
                leader_epoch: 0,
                partition_epoch: 99,
                isr: &ids[..2],
                replicas: &ids,
                controller_epoch: u64::MAX,
                broker_id: 7,
                broker_epoch: 1_000_000_007,
                accepted_at_ms: 1_796_020_972_110,
            };
            let mut fast = Vec::new();
            l.write_json(&mut fast);
            let mut serde = serde_json::to_vec(&l.to_entry()).unwrap();
            serde.push(b'\n');
            assert_eq!(
                String::from_utf8(fast).unwrap(),
                String::from_utf8(serde).unwrap()
            );
        }
        let mut empty = Vec::new();
        Line {
            isr: &[],
            ..line(0)
        }
        .write_json(&mut empty);
        assert!(String::from_utf8(empty).unwrap().contains("\"isr\":[]"));
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        let mut h = HistoryLog::open(&path).unwrap();
        let mut v = 0u64;
        let mut cases = vec![u64::MAX, 9, 10, 99, 100, 101, 999, 1_000];
        for _ in 0..64 {
            cases.push(v);
            v = v.wrapping_mul(3).wrapping_add(7);
        }
        for &n in &cases {
            h.stage(&Line {
                accepted_at_ms: n,
                ..line(0)
            });
        }
        h.commit().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        for (l, n) in text.lines().zip(&cases) {
            assert!(l.ends_with(&format!(",\"accepted_at_ms\":{n}}}")), "{l}");
        }
        assert_eq!(text.lines().count(), cases.len());
    }

    #[test]
    fn staged_lines_reach_the_file_only_on_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        let mut h = HistoryLog::open(&path).unwrap();
        h.stage(&line(0));
        h.stage(&line(1));
        assert!(read_history(&path).unwrap().is_empty());
        h.commit().unwrap();
        h.append(&line(2)).unwrap();
        assert_eq!(partitions_in(&path), vec![0, 1, 2]);
    }

    #[test]
    fn a_torn_last_line_is_cut_off_when_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        let mut h = HistoryLog::open(&path).unwrap();
        h.append(&line(0)).unwrap();
        drop(h);
        let mut text = std::fs::read(&path).unwrap();
        text.extend_from_slice(b"{\"event\":\"leader_and_is");
        std::fs::write(&path, &text).unwrap();
        assert!(read_history(&path).is_err());
        let mut h = HistoryLog::open(&path).unwrap();
        h.append(&line(1)).unwrap();
        assert_eq!(partitions_in(&path), vec![0, 1]);
        // Nothing but a torn line: nothing is left.
        std::fs::write(&path, b"{\"ev").unwrap();
        drop(HistoryLog::open(&path).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"");
    }
}
