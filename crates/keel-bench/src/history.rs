//! Brokers' `history.jsonl`, read as it grows: one JSON object per line,
//! one line per request a broker accepted. The `broker-failure` scenario
//! reads the `leader_and_isr` lines to see when each partition's new
//! leadership reached the brokers that stay.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use keel_testkit::Cluster;
use serde::Deserialize;

use crate::progress;
use crate::tail::Tail;

/// The fields of a history line the bench reads (the broker writes ids
/// without escapes, so they borrow from the line).
#[derive(Deserialize)]
struct Line<'a> {
    event: &'a str,
    topic_id: Option<&'a str>,
    partition: Option<u64>,
    /// `null` when the partition has no leader.
    leader: Option<u64>,
    leader_epoch: Option<u64>,
    accepted_at_ms: Option<u64>,
}

/// Hashes the u64 partition keys of [`History`] with one multiplication:
/// SipHash on 400,000 keys per phase is CPU taken from the brokers measured.
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        // A product's low bits depend only on the input's low bits; the
        // table indexes by low bits, so hand it the well-mixed high ones.
        self.0.rotate_left(32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    }
}

type KeyMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<KeyHasher>>;

/// One broker's history, read incrementally: the newest leader epoch per
/// partition, and the partitions whose leadership moved during the
/// current phase.
pub struct History {
    tail: Tail,
    /// Topic id -> a small number (partition keys are `topic << 32 | partition`).
    topics: HashMap<String, u32>,
    epochs: KeyMap<u32>,
    /// Leader epochs at the start of the phase.
    base: KeyMap<u32>,
    /// Partition -> accepted_at_ms of its first matching line in the phase.
    found: KeyMap<u64>,
    /// Which leader the phase waits for: broker 1, or any but broker 1.
    want_leader_1: bool,
    /// Bytes read but not parsed yet (the last line may be torn), and how
    /// many complete lines they hold.
    unparsed: Vec<u8>,
    unparsed_lines: u64,
}

impl History {
    pub fn new(path: PathBuf) -> Self {
        Self {
            tail: Tail::new(path),
            topics: HashMap::new(),
            epochs: KeyMap::default(),
            base: KeyMap::default(),
            found: KeyMap::default(),
            want_leader_1: true,
            unparsed: Vec::new(),
            unparsed_lines: 0,
        }
    }

    /// Reads and parses everything written so far.
    pub fn poll(&mut self) {
        self.read();
        self.parse();
    }

    /// Reads what was written; parses it only once there are enough lines
    /// for `want` partitions to have moved: while the brokers write, the
    /// bench only counts newlines, leaving the CPU to what it measures.
    pub fn poll_until(&mut self, want: u64) {
        self.read();
        if self.found.len() as u64 + self.unparsed_lines >= want {
            self.parse();
        }
    }

    fn read(&mut self) {
        let start = self.unparsed.len();
        self.tail.append_to(&mut self.unparsed);
        self.unparsed_lines += self.unparsed[start..]
            .iter()
            .filter(|b| **b == b'\n')
            .count() as u64;
    }

    /// Parses the complete lines read so far (a torn last line waits).
    fn parse(&mut self) {
        let Some(end) = self.unparsed.iter().rposition(|b| *b == b'\n') else {
            return;
        };
        let rest = self.unparsed.split_off(end + 1);
        let text = std::mem::replace(&mut self.unparsed, rest);
        self.unparsed_lines = 0;
        for l in text.split(|b| *b == b'\n') {
            if let Ok(line) = serde_json::from_slice::<Line>(l) {
                self.record(&line);
            }
        }
    }

    fn record(&mut self, l: &Line) {
        if l.event != "leader_and_isr" {
            return;
        }
        let (Some(topic), Some(partition), Some(epoch), Some(at)) =
            (l.topic_id, l.partition, l.leader_epoch, l.accepted_at_ms)
        else {
            return;
        };
        let next = self.topics.len() as u32;
        let t = *self.topics.entry(topic.to_string()).or_insert(next);
        let key = (u64::from(t) << 32) | partition;
        let epoch = epoch as u32;
        let matches = if self.want_leader_1 {
            l.leader == Some(1)
        } else {
            l.leader.is_some_and(|b| b != 1)
        };
        if matches && self.base.get(&key).is_none_or(|b| epoch > *b) {
            self.found.entry(key).or_insert(at);
        }
        self.epochs.insert(key, epoch);
    }

    /// Starts a phase after reading everything written so far.
    pub fn begin(&mut self, want_leader_1: bool) {
        self.poll();
        self.base = self.epochs.clone();
        self.found.clear();
        self.want_leader_1 = want_leader_1;
    }

    /// Partitions that moved in this phase.
    pub fn moved(&self) -> u64 {
        self.found.len() as u64
    }

    /// (first, last) accepted_at_ms of the phase's moves (0 if none).
    pub fn first_last(&self) -> (u64, u64) {
        let min = self.found.values().copied().min().unwrap_or(0);
        let max = self.found.values().copied().max().unwrap_or(0);
        (min, max)
    }
}

/// The histories of the brokers that stay (2 and 3).
pub struct Followers {
    h: Vec<History>,
}

impl Followers {
    pub fn new(c: &Cluster) -> Self {
        Self {
            h: (1..3)
                .map(|i| History::new(c.broker(i).history_path()))
                .collect(),
        }
    }

    pub fn begin(&mut self, want_leader_1: bool) {
        for h in &mut self.h {
            h.begin(want_leader_1);
        }
    }

    fn counts(&self) -> Vec<u64> {
        self.h.iter().map(History::moved).collect()
    }

    /// Waits until both brokers saw `n` partitions move in this phase;
    /// returns (first, last) accepted_at_ms over both. `except` is a node
    /// (of [`Cluster::nodes`]) that may exit meanwhile.
    pub async fn wait(
        &mut self,
        c: &mut Cluster,
        n: u64,
        timeout: Duration,
        except: &[usize],
        what: &str,
    ) -> anyhow::Result<(u64, u64)> {
        let deadline = Instant::now() + timeout;
        let mut last_report = Instant::now();
        loop {
            for h in &mut self.h {
                h.poll_until(n);
            }
            if self.counts().iter().all(|c| *c >= n) {
                let first = self.h.iter().map(|h| h.first_last().0).min().unwrap_or(0);
                let last = self.h.iter().map(|h| h.first_last().1).max().unwrap_or(0);
                return Ok((first, last));
            }
            c.check_alive_except(except)?;
            let report = last_report.elapsed() >= Duration::from_secs(15);
            if Instant::now() >= deadline || report {
                for h in &mut self.h {
                    h.poll();
                }
                let counts = self.counts();
                if counts.iter().all(|c| *c >= n) {
                    continue;
                }
                if Instant::now() >= deadline {
                    bail!("{what}: brokers 2 and 3 accepted {counts:?} of {n} partitions within {timeout:?}");
                }
                progress!("broker-failure: {what}: brokers 2/3 accepted {counts:?} of {n}");
                last_report = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Per-broker last acceptance (ms) of the phase.
    pub fn lasts(&self) -> Vec<u64> {
        self.h.iter().map(|h| h.first_last().1).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_line_is_read_for_its_partition_leader_epoch_and_time() {
        let l = r#"{"event":"leader_and_isr","topic_id":"9639c1c1-995f-1e35-6b93-fadec412f94c","partition":95,"leader":null,"leader_epoch":7,"partition_epoch":9,"isr":[2,3],"replicas":[1,2,3],"controller_epoch":2,"broker_id":2,"broker_epoch":5,"accepted_at_ms":1709294400250}"#;
        let x: Line = serde_json::from_str(l).unwrap();
        assert_eq!(x.event, "leader_and_isr");
        assert_eq!(x.topic_id, Some("9639c1c1-995f-1e35-6b93-fadec412f94c"));
        assert_eq!(
            (x.partition, x.leader, x.leader_epoch),
            (Some(95), None, Some(7))
        );
        assert_eq!(x.accepted_at_ms, Some(1_709_294_400_250));
        let l2 = l.replace(r#""leader":null"#, r#""leader":2"#);
        let x: Line = serde_json::from_str(&l2).unwrap();
        assert_eq!(x.leader, Some(2));
    }

    #[test]
    fn a_history_line_is_counted_once_complete() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        let line = |p: u32, at: u64| {
            format!(
                "{{\"event\":\"leader_and_isr\",\"topic_id\":\"t\",\"partition\":{p},\"leader\":2,\"leader_epoch\":3,\"accepted_at_ms\":{at}}}\n"
            )
        };
        let first = line(0, 1_000);
        let second = line(1, 2_000);
        let (head, tail) = second.split_at(second.len() - 4);
        let mut h = History::new(path.clone());
        h.begin(false);
        std::fs::write(&path, format!("{first}{head}")).unwrap();
        h.poll();
        assert_eq!(h.moved(), 1);
        // The rest of the torn line arrives: now it counts, with its own time.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, tail.as_bytes()).unwrap();
        h.poll_until(2);
        assert_eq!(h.moved(), 2);
        assert_eq!(h.first_last(), (1_000, 2_000));
    }
}
