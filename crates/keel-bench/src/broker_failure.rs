//! Scenario `broker-failure`: how fast leadership moves off a broker that
//! dies (SIGKILL, detected by session expiry) or leaves (SIGTERM, controlled
//! shutdown), with real `keel broker` processes.
//!
//! Three controllers (`127.0.6.11-13`, `--session-timeout-ms 3000`, JSON
//! logs, a Prometheus endpoint each) and three brokers (`127.0.6.21-23`,
//! heartbeat 500 ms, session 3 s). `partitions` partitions in topics of 100,
//! every one with replicas `[1, 2, 3]`, so broker 1 leads them all. Then two
//! trial sets, the state recreated between trials (broker 1 restarted, a
//! preferred election until it leads everything again, and brokers 2 and 3
//! have accepted that):
//!
//! * failure: SIGKILL broker 1. Measured from the active controller's
//!   "broker fenced" log line (logged once the fence and the leader moves
//!   are committed) to the last `accepted_at_ms` on brokers 2 and 3 of the
//!   first `leader_and_isr` line per partition with a leader other than 1 at
//!   a newer leader epoch. Also: Raft entries the fence used (active
//!   controller's `last_applied_index` across the fence) and the event-queue
//!   p99 from the controller's Prometheus endpoint.
//! * controlled shutdown: SIGTERM broker 1. Measured from the moment the
//!   bench sends the signal (bench clock, unix ms) to the same last
//!   acceptance on brokers 2 and 3.
//!
//! Every wait is bounded; every process is SIGKILLed when the rig drops.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use keel_proto::client::ControllerClient;
use keel_proto::pb;
use keel_proto::pb::admin_service_client::AdminServiceClient;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cluster::{self, connect, free_port, CLUSTER_ID};
use crate::stats::{cell, machine, median, percentile, r1, r3, unix_now};
use crate::{progress, Env, Report};

/// Parameters of the `broker-failure` scenario.
#[derive(Clone, Debug)]
pub struct BrokerFailureParams {
    /// Trials per measurement (failure, controlled shutdown).
    pub trials: usize,
    pub partitions: u64,
    pub partitions_per_topic: u32,
    pub topics_per_request: usize,
    pub create_concurrency: usize,
    /// Bound on creating the topics and their acceptance by brokers 2 and 3.
    pub setup_timeout_secs: f64,
    /// Bound on one measured move (kill/term until brokers 2 and 3 accepted).
    pub move_timeout_secs: f64,
    /// Bound on recreating the state between trials.
    pub restore_timeout_secs: f64,
}

impl Default for BrokerFailureParams {
    fn default() -> Self {
        Self {
            trials: 3,
            partitions: 100_000,
            partitions_per_topic: 100,
            topics_per_request: 20,
            create_concurrency: 4,
            setup_timeout_secs: 900.0,
            move_timeout_secs: 180.0,
            restore_timeout_secs: 600.0,
        }
    }
}

const SUBNET: u8 = 6;
const CONTROLLER_LOG: &str = "info,openraft=warn,sled=warn,h2=warn,tower=warn,hyper=warn";
/// Brokers log one line per partition they take over at info: keep them quiet.
const BROKER_LOG: &str = "warn,openraft=error";
const QUEUE_METRIC: &str = "keel_controller_event_queue_time_seconds";

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

// ---- processes ------------------------------------------------------------

/// One child process (controller or broker), SIGKILLed on drop.
struct Proc {
    name: String,
    args: Vec<String>,
    rust_log: &'static str,
    log: PathBuf,
    child: Option<Child>,
}

impl Proc {
    fn spawn(&mut self, exe: &Path) -> anyhow::Result<()> {
        self.kill();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let err = out.try_clone()?;
        let child = Command::new(exe)
            .args(&self.args)
            .env("RUST_LOG", self.rust_log)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("spawn {} ({})", self.name, exe.display()))?;
        self.child = Some(child);
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM (through kill(1): std only sends SIGKILL).
    fn terminate(&self) -> anyhow::Result<()> {
        let pid = self
            .child
            .as_ref()
            .map(|c| c.id())
            .ok_or_else(|| anyhow!("{} is not running", self.name))?;
        let st = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()
            .context("run kill -TERM")?;
        if !st.success() {
            bail!("kill -TERM {pid} failed: {st}");
        }
        Ok(())
    }

    /// Whether it exited (reaps it).
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let st = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(st)
    }

    fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three controllers and three brokers in a temp dir.
struct Rig {
    exe: PathBuf,
    dir: tempfile::TempDir,
    ctrl_addrs: Vec<String>,
    metrics_addrs: Vec<String>,
    ctrls: Vec<Proc>,
    brokers: Vec<Proc>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        for b in &mut self.brokers {
            b.kill();
        }
        for c in &mut self.ctrls {
            c.kill();
        }
    }
}

impl Rig {
    fn start(exe: &Path) -> anyhow::Result<Self> {
        // KEEL_BENCH_KEEP_DIR=1 keeps the logs and histories for a look afterwards.
        let keep = std::env::var_os("KEEL_BENCH_KEEP_DIR").is_some_and(|v| v != "0");
        let dir = tempfile::Builder::new()
            .prefix("keel-bench-bf-")
            .disable_cleanup(keep)
            .tempdir()
            .context("create a temp dir")?;
        if keep {
            progress!("broker-failure: keeping {}", dir.path().display());
        }
        let mut ctrl_addrs = Vec::new();
        let mut metrics_addrs = Vec::new();
        for i in 0..3 {
            let ip = format!("127.0.{SUBNET}.{}", 11 + i);
            ctrl_addrs.push(format!("{ip}:{}", free_port(&ip)?));
            metrics_addrs.push(format!("{ip}:{}", free_port(&ip)?));
        }
        let voters = ctrl_addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}@{}", i + 1, a))
            .collect::<Vec<_>>()
            .join(",");
        let mut rig = Rig {
            exe: exe.to_path_buf(),
            ctrl_addrs: ctrl_addrs.clone(),
            metrics_addrs: metrics_addrs.clone(),
            ctrls: Vec::new(),
            brokers: Vec::new(),
            dir,
        };
        for i in 0..3 {
            let args = [
                "controller".to_string(),
                "--node-id".into(),
                (i + 1).to_string(),
                "--listen".into(),
                ctrl_addrs[i].clone(),
                "--voters".into(),
                voters.clone(),
                "--data-dir".into(),
                rig.dir
                    .path()
                    .join(format!("c{}", i + 1))
                    .display()
                    .to_string(),
                "--cluster-id".into(),
                CLUSTER_ID.into(),
                "--session-timeout-ms".into(),
                "3000".into(),
                "--log-format".into(),
                "json".into(),
                "--metrics-listen".into(),
                metrics_addrs[i].clone(),
            ];
            rig.ctrls.push(Proc {
                name: format!("controller {}", i + 1),
                args: args
                    .into_iter()
                    .chain(crate::cluster::controller_args_from_env())
                    .collect(),
                rust_log: CONTROLLER_LOG,
                log: rig.dir.path().join(format!("c{}.log", i + 1)),
                child: None,
            });
        }
        for i in 0..3 {
            let ip = format!("127.0.{SUBNET}.{}", 21 + i);
            let addr = format!("{ip}:{}", free_port(&ip)?);
            let args = [
                "broker".to_string(),
                "--broker-id".into(),
                (i + 1).to_string(),
                "--listen".into(),
                addr,
                "--controllers".into(),
                ctrl_addrs.join(","),
                "--cluster-id".into(),
                CLUSTER_ID.into(),
                "--data-dir".into(),
                rig.broker_dir(i).display().to_string(),
                "--heartbeat-interval-ms".into(),
                "500".into(),
                "--session-timeout-ms".into(),
                "3000".into(),
            ];
            rig.brokers.push(Proc {
                name: format!("broker {}", i + 1),
                args: args.to_vec(),
                rust_log: BROKER_LOG,
                log: rig.dir.path().join(format!("b{}.log", i + 1)),
                child: None,
            });
        }
        for i in 0..3 {
            rig.ctrls[i].spawn(exe)?;
        }
        Ok(rig)
    }

    fn broker_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("b{}", i + 1))
    }

    fn history_path(&self, i: usize) -> PathBuf {
        self.broker_dir(i).join("history.jsonl")
    }

    fn spawn_broker(&mut self, i: usize) -> anyhow::Result<()> {
        let exe = self.exe.clone();
        self.brokers[i].spawn(&exe)
    }

    fn client(&self) -> ControllerClient {
        ControllerClient::new(self.ctrl_addrs.clone())
            .with_timeouts(Duration::from_secs(30), Duration::from_secs(90))
    }

    /// Fails with the log tail of a controller that exited, or of a broker
    /// (other than `except`) that exited.
    fn check_alive(&mut self, except: Option<usize>) -> anyhow::Result<()> {
        for p in &mut self.ctrls {
            if let Some(st) = p.exited() {
                bail!(
                    "{} exited ({st}); last log lines:\n{}",
                    p.name,
                    p.log_tail(15)
                );
            }
        }
        for (i, p) in self.brokers.iter_mut().enumerate() {
            if Some(i) == except {
                continue;
            }
            if let Some(st) = p.exited() {
                bail!(
                    "{} exited ({st}); last log lines:\n{}",
                    p.name,
                    p.log_tail(15)
                );
            }
        }
        Ok(())
    }

    async fn describe_node(&self, i: usize) -> Option<pb::DescribeNodeResponse> {
        let fut = async {
            let ch = connect(&self.ctrl_addrs[i], Duration::from_secs(1))
                .await
                .ok()?;
            AdminServiceClient::new(ch)
                .describe_node(pb::DescribeNodeRequest::default())
                .await
                .ok()
                .map(|r| r.into_inner())
        };
        tokio::time::timeout(Duration::from_millis(1500), fut)
            .await
            .ok()
            .flatten()
    }

    async fn wait_active(&mut self, timeout: Duration) -> anyhow::Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive(None)?;
            for i in 0..3 {
                if self
                    .describe_node(i)
                    .await
                    .is_some_and(|d| d.active_controller)
                {
                    return Ok(i);
                }
            }
            if Instant::now() >= deadline {
                bail!("no active controller within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until brokers 1-3 are registered, unfenced and not shutting down.
    async fn wait_unfenced(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let client = self.client();
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive(None)?;
            if cluster::brokers_unfenced(&client, 3).await {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("brokers 1-3 not all unfenced within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

// ---- log tails --------------------------------------------------------------

/// Reads the lines appended to a file since the last call.
struct Tail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl Tail {
    fn append_to_partial(&mut self) {
        let mut partial = std::mem::take(&mut self.partial);
        self.append_to(&mut partial);
        self.partial = partial;
    }

    fn new(path: PathBuf) -> Self {
        Self {
            path,
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// Appends every new byte to `buf`, torn last line included.
    fn append_to(&mut self, buf: &mut Vec<u8>) {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return;
        };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let before = buf.len();
        if f.read_to_end(buf).is_err() {
            buf.truncate(before);
            return;
        }
        self.offset += (buf.len() - before) as u64;
    }

    /// Complete new lines (a torn last line waits for the next call).
    fn read(&mut self) -> Vec<String> {
        self.append_to_partial();
        let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') else {
            return Vec::new();
        };
        let rest = self.partial.split_off(end + 1);
        let done = std::mem::replace(&mut self.partial, rest);
        String::from_utf8_lossy(&done)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect()
    }
}

/// A controller log line of interest.
#[derive(Clone, Debug)]
struct LogEvent {
    message: String,
    /// Unix ms (fractional).
    at_ms: f64,
    fields: Value,
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` into unix ms.
fn rfc3339_ms(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut i = 19;
    let mut frac = 0.0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        frac = format!("0.{}", &s[start..i]).parse::<f64>().ok()?;
    }
    let offset_s = match b.get(i)? {
        b'Z' | b'z' => 0,
        sign @ (b'+' | b'-') => {
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            let o = oh * 3600 + om * 60;
            if *sign == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    // Days from civil (Howard Hinnant).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_s;
    Some((secs as f64 + frac) * 1000.0)
}

fn parse_log_line(line: &str) -> Option<LogEvent> {
    let v: Value = serde_json::from_str(line).ok()?;
    let fields = v.get("fields").cloned().unwrap_or(Value::Null);
    let message = fields
        .get("message")
        .or_else(|| v.get("message"))
        .and_then(Value::as_str)?
        .to_string();
    let at_ms = rfc3339_ms(v.get("timestamp")?.as_str()?)?;
    Some(LogEvent {
        message,
        at_ms,
        fields,
    })
}

/// The controllers' logs, read incrementally.
struct ControllerLogs {
    tails: Vec<Tail>,
    /// (controller index, event) of every broker state change seen.
    events: Vec<(usize, LogEvent)>,
}

impl ControllerLogs {
    fn new(rig: &Rig) -> Self {
        Self {
            tails: rig.ctrls.iter().map(|p| Tail::new(p.log.clone())).collect(),
            events: Vec::new(),
        }
    }

    /// Reads what is new; keeps the broker lines.
    fn poll(&mut self) {
        for (i, t) in self.tails.iter_mut().enumerate() {
            for l in t.read() {
                if let Some(e) = parse_log_line(&l) {
                    if e.message.starts_with("broker ") {
                        self.events.push((i, e));
                    }
                }
            }
        }
    }

    /// Forgets what was seen (new lines only from now on).
    fn mark(&mut self) {
        self.poll();
        self.events.clear();
    }

    /// The first `message` line about `broker` logged by controller `node`.
    fn find(&self, node: usize, message: &str, broker: u64) -> Option<LogEvent> {
        self.events
            .iter()
            .find(|(i, e)| {
                *i == node
                    && e.message == message
                    && e.fields.get("broker").and_then(Value::as_u64) == Some(broker)
            })
            .map(|(_, e)| e.clone())
    }
}

// ---- broker histories ---------------------------------------------------

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

/// One broker's `history.jsonl`, read incrementally: the newest leader epoch
/// per partition, and the partitions that moved during the current phase.
struct History {
    tail: Tail,
    topics: HashMap<String, u32>,
    epochs: KeyMap<u32>,
    /// Leader epochs at the start of the phase.
    base: KeyMap<u32>,
    /// Partition -> accepted_at_ms of its first matching line in the phase.
    found: KeyMap<u64>,
    /// Which leader the phase waits for: `Some(1)` = broker 1, `None` = any but 1.
    want_leader_1: bool,
    /// Bytes read but not parsed yet (the last line may be torn), and how
    /// many complete lines they hold.
    unparsed: Vec<u8>,
    unparsed_lines: u64,
}

impl History {
    fn new(path: PathBuf) -> Self {
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
    fn poll(&mut self) {
        self.read();
        self.parse();
    }

    /// Reads what was written; parses it only once there are enough lines
    /// for `want` partitions to have moved: while the brokers write, the
    /// bench only counts newlines, leaving the CPU to what it measures.
    fn poll_until(&mut self, want: u64) {
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
        let rest = self.unparsed[end + 1..].to_vec();
        let mut text = std::mem::replace(&mut self.unparsed, rest);
        text.truncate(end + 1);
        self.unparsed_lines = 0;
        for l in text.split(|b| *b == b'\n') {
            let Ok(l) = std::str::from_utf8(l) else {
                continue;
            };
            let (mut event, mut topic, mut partition, mut leader, mut epoch, mut at) =
                (None, None, None, None, None, None);
            for (k, v) in json_fields(l) {
                let num = || v.and_then(|v| v.parse::<u64>().ok());
                match k {
                    "event" => event = v,
                    "topic_id" => topic = v,
                    "partition" => partition = num(),
                    "leader" => leader = num(),
                    "leader_epoch" => epoch = num(),
                    "accepted_at_ms" => at = num(),
                    _ => {}
                }
            }
            if event != Some("leader_and_isr") {
                continue;
            }
            let (Some(topic), Some(partition), Some(epoch), Some(at)) =
                (topic, partition, epoch, at)
            else {
                continue;
            };
            let t = match self.topics.get(topic) {
                Some(t) => *t,
                None => {
                    let next = self.topics.len() as u32;
                    self.topics.insert(topic.to_string(), next);
                    next
                }
            };
            let key = (u64::from(t) << 32) | partition;
            let epoch = epoch as u32;
            let matches = if self.want_leader_1 {
                leader == Some(1)
            } else {
                leader.is_some_and(|l| l != 1)
            };
            let newer = self.base.get(&key).is_none_or(|b| epoch > *b);
            if matches && newer {
                self.found.entry(key).or_insert(at);
            }
            self.epochs.insert(key, epoch);
        }
    }

    /// Starts a phase after reading everything written so far.
    fn begin(&mut self, want_leader_1: bool) {
        self.poll();
        self.base = self.epochs.clone();
        self.found.clear();
        self.want_leader_1 = want_leader_1;
    }

    fn first_last(&self) -> (u64, u64) {
        let min = self.found.values().copied().min().unwrap_or(0);
        let max = self.found.values().copied().max().unwrap_or(0);
        (min, max)
    }
}

/// The value of a top-level scalar field of one `history.jsonl` line: the
/// text of a string (the broker writes ids without escapes) or of a number,
/// `None` when absent or null. A full JSON parse of 200,000 lines would cost
/// the bench more CPU than the brokers it measures spend on them.
#[cfg(test)]
fn json_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    json_fields(line)
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v)
}

/// The top-level `"key": value` pairs of a flat JSON object, in one pass:
/// strings without their quotes (no escapes expected), arrays skipped
/// (`None`), numbers as text, null as `None`.
fn json_fields(line: &str) -> impl Iterator<Item = (&str, Option<&str>)> {
    let b = line.as_bytes();
    let mut i = 0usize;
    std::iter::from_fn(move || {
        // The next key starts at the next quote.
        while i < b.len() && b[i] != b'"' {
            i += 1;
        }
        let k0 = i + 1;
        let k1 = k0 + line.get(k0..)?.find('"')?;
        i = k1 + 1;
        while i < b.len() && (b[i] == b':' || b[i] == b' ') {
            i += 1;
        }
        let value = match *b.get(i)? {
            b'"' => {
                let v0 = i + 1;
                let v1 = v0 + line.get(v0..)?.find('"')?;
                i = v1 + 1;
                Some(&line[v0..v1])
            }
            b'[' => {
                i += line.get(i..)?.find(']')? + 1;
                None
            }
            _ => {
                let v0 = i;
                while i < b.len() && b[i] != b',' && b[i] != b'}' {
                    i += 1;
                }
                let v = line[v0..i].trim();
                (v != "null").then_some(v)
            }
        };
        Some((&line[k0..k1], value))
    })
}

/// Histories of brokers 2 and 3.
struct Followers {
    h: Vec<History>,
}

impl Followers {
    fn new(rig: &Rig) -> Self {
        Self {
            h: vec![
                History::new(rig.history_path(1)),
                History::new(rig.history_path(2)),
            ],
        }
    }

    fn begin(&mut self, want_leader_1: bool) {
        for h in &mut self.h {
            h.begin(want_leader_1);
        }
    }

    /// Waits until both brokers saw `n` partitions move in this phase;
    /// returns (first, last) accepted_at_ms over both.
    async fn wait(
        &mut self,
        rig: &mut Rig,
        n: u64,
        timeout: Duration,
        except: Option<usize>,
        what: &str,
    ) -> anyhow::Result<(u64, u64)> {
        let deadline = Instant::now() + timeout;
        let mut last_report = Instant::now();
        loop {
            for h in &mut self.h {
                h.poll_until(n);
            }
            let counts: Vec<u64> = self.h.iter().map(|h| h.found.len() as u64).collect();
            if counts.iter().all(|c| *c >= n) {
                let first = self.h.iter().map(|h| h.first_last().0).min().unwrap_or(0);
                let last = self.h.iter().map(|h| h.first_last().1).max().unwrap_or(0);
                return Ok((first, last));
            }
            rig.check_alive(except)?;
            let report =
                Instant::now() >= deadline || last_report.elapsed() >= Duration::from_secs(15);
            if !report {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            for h in &mut self.h {
                h.poll();
            }
            let counts: Vec<u64> = self.h.iter().map(|h| h.found.len() as u64).collect();
            if counts.iter().all(|c| *c >= n) {
                continue;
            }
            if Instant::now() >= deadline {
                bail!(
                    "{what}: brokers 2 and 3 accepted {counts:?} of {n} partitions within {timeout:?}"
                );
            }
            if last_report.elapsed() >= Duration::from_secs(15) {
                progress!("broker-failure: {what}: brokers 2/3 accepted {counts:?} of {n}");
                last_report = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Per-broker last acceptance (ms) of the phase.
    fn lasts(&self) -> Vec<u64> {
        self.h.iter().map(|h| h.first_last().1).collect()
    }
}

// ---- metrics ------------------------------------------------------------

/// One Prometheus sample: name, labels, value.
type Sample = (String, Vec<(String, String)>, f64);

async fn scrape(addr: &str) -> anyhow::Result<Vec<Sample>> {
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let req = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        anyhow::Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    let text = tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .map_err(|_| anyhow!("scrape of {addr} timed out"))??;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or(&text);
    Ok(parse_metrics(body))
}

fn parse_metrics(body: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for l in body.lines() {
        if l.starts_with('#') || l.trim().is_empty() {
            continue;
        }
        let (head, value) = match l.rsplit_once(' ') {
            Some(x) => x,
            None => continue,
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let (name, labels) = match head.split_once('{') {
            Some((n, rest)) => {
                let rest = rest.trim_end_matches('}');
                let labels = rest
                    .split(',')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches('"').to_string()))
                    .collect();
                (n.to_string(), labels)
            }
            None => (head.trim().to_string(), Vec::new()),
        };
        out.push((name, labels, value));
    }
    out
}

fn label<'a>(s: &'a Sample, k: &str) -> Option<&'a str> {
    s.1.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

/// Event-queue p99 in ms across the fence, from two scrapes: bucket deltas
/// if the exporter renders a histogram, else the summary's 0.99 quantile
/// after the fence, the max over kinds with events across the fence.
/// Returns (p99 ms, method, per-kind detail).
fn queue_p99(before: &[Sample], after: &[Sample]) -> (Option<f64>, &'static str, Value) {
    let buckets = |s: &[Sample]| -> HashMap<String, f64> {
        let mut m = HashMap::new();
        for x in s.iter().filter(|x| x.0 == format!("{QUEUE_METRIC}_bucket")) {
            if let Some(le) = label(x, "le") {
                *m.entry(le.to_string()).or_insert(0.0) += x.2;
            }
        }
        m
    };
    let (b0, b1) = (buckets(before), buckets(after));
    if !b1.is_empty() {
        let mut deltas: Vec<(f64, f64)> = b1
            .iter()
            .map(|(le, v)| {
                let le_v = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::INFINITY)
                };
                (le_v, v - b0.get(le).copied().unwrap_or(0.0))
            })
            .collect();
        deltas.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total = deltas.last().map(|d| d.1).unwrap_or(0.0);
        if total <= 0.0 {
            return (None, "histogram bucket deltas (no events)", json!({}));
        }
        let p99 = deltas
            .iter()
            .find(|(_, c)| *c >= 0.99 * total)
            .map(|(le, _)| le * 1000.0);
        return (
            p99,
            "histogram bucket deltas across the fence, all kinds (upper bucket bound)",
            json!({"events": total}),
        );
    }
    let mut detail = serde_json::Map::new();
    let mut worst: Option<f64> = None;
    for x in after.iter().filter(|x| x.0 == QUEUE_METRIC) {
        if label(x, "quantile") != Some("0.99") {
            continue;
        }
        let kind = label(x, "kind").unwrap_or("-").to_string();
        let ms = x.2 * 1000.0;
        let count = |s: &[Sample]| {
            s.iter()
                .find(|y| y.0 == format!("{QUEUE_METRIC}_count") && label(y, "kind") == Some(&kind))
                .map(|y| y.2)
                .unwrap_or(0.0)
        };
        let sum = |s: &[Sample]| {
            s.iter()
                .find(|y| y.0 == format!("{QUEUE_METRIC}_sum") && label(y, "kind") == Some(&kind))
                .map(|y| y.2)
                .unwrap_or(0.0)
        };
        let n = count(after) - count(before);
        let mean_ms = if n > 0.0 {
            (sum(after) - sum(before)) / n * 1000.0
        } else {
            0.0
        };
        detail.insert(
            kind,
            json!({"p99_ms": (ms * 1000.0).round() / 1000.0, "events_in_window": n, "mean_ms_in_window": (mean_ms * 1000.0).round() / 1000.0}),
        );
        // Kinds with no event across the fence only carry older samples.
        if n > 0.0 {
            worst = Some(worst.map_or(ms, |w: f64| w.max(ms)));
        }
    }
    (
        worst,
        "summary quantile 0.99 rendered by the exporter after the fence, max over the event kinds that had events across the fence; the exporter's summary window is longer than the fence, so it also holds earlier samples of those kinds (per-kind means across the fence from _sum/_count deltas are in event_queue_by_kind_trials)",
        Value::Object(detail),
    )
}

/// Max of the summary quantile `q` of `name` over all label sets, in ms.
fn summary_max_ms(s: &[Sample], name: &str, q: &str) -> Option<f64> {
    s.iter()
        .filter(|x| x.0 == name && label(x, "quantile") == Some(q))
        .map(|x| x.2 * 1000.0)
        .reduce(f64::max)
}

// ---- topics and elections -------------------------------------------------

async fn create_topics(rig: &Rig, p: &BrokerFailureParams) -> anyhow::Result<()> {
    let per_topic = u64::from(p.partitions_per_topic);
    let topics = p.partitions.div_ceil(per_topic);
    let total = p.partitions;
    let next = Arc::new(AtomicU64::new(0));
    let created = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..p.create_concurrency.max(1) {
        let client = rig.client();
        let (next, created, stop) = (next.clone(), created.clone(), stop.clone());
        let tpr = p.topics_per_request.max(1) as u64;
        tasks.push(tokio::spawn(async move {
            loop {
                if stop.load(Ordering::Relaxed) {
                    return anyhow::Ok(());
                }
                let first = next.fetch_add(tpr, Ordering::Relaxed);
                if first >= topics {
                    return Ok(());
                }
                let last = (first + tpr).min(topics);
                let req = pb::CreateTopicsRequest {
                    topics: (first..last)
                        .map(|t| {
                            let n = (total - t * per_topic).min(per_topic) as u32;
                            pb::CreatableTopic {
                                name: format!("bf-{t:06}"),
                                partitions: n,
                                replication_factor: 3,
                                assignments: (0..n)
                                    .map(|i| pb::ReplicaAssignment {
                                        partition: i,
                                        replicas: vec![1, 2, 3],
                                    })
                                    .collect(),
                                ..Default::default()
                            }
                        })
                        .collect(),
                    validate_only: false,
                };
                let r = client
                    .admin(|mut a| {
                        let req = req.clone();
                        async move { a.create_topics(req).await }
                    })
                    .await;
                let r = match r {
                    Ok(r) => r,
                    Err(e) => {
                        stop.store(true, Ordering::Relaxed);
                        bail!("CreateTopics failed: {e}");
                    }
                };
                if let Some(e) = r.error {
                    stop.store(true, Ordering::Relaxed);
                    bail!("CreateTopics refused: {e:?}");
                }
                for t in &r.topics {
                    match &t.error {
                        None => {}
                        // A retried request whose first attempt went through.
                        Some(e) if e.code == pb::ErrorCode::TopicAlreadyExists as i32 => {}
                        Some(e) => {
                            stop.store(true, Ordering::Relaxed);
                            bail!("create of {} refused: {e:?}", t.name);
                        }
                    }
                }
                created.fetch_add(r.topics.len() as u64, Ordering::Relaxed);
            }
        }));
    }
    let mut last_report = Instant::now();
    while !tasks.iter().all(|t| t.is_finished()) {
        if start.elapsed().as_secs_f64() > p.setup_timeout_secs {
            stop.store(true, Ordering::Relaxed);
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            progress!(
                "broker-failure: {} of {topics} topics created in {:.0} s",
                created.load(Ordering::Relaxed),
                start.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for t in tasks {
        t.await??;
    }
    let n = created.load(Ordering::Relaxed);
    if n < topics {
        bail!(
            "only {n} of {topics} topics created within {} s",
            p.setup_timeout_secs
        );
    }
    Ok(())
}

/// Preferred election of every partition until none is left to move
/// (broker 1 must first be back in the ISRs); bounded.
async fn elect_preferred(rig: &mut Rig, timeout: Duration) -> anyhow::Result<u64> {
    let client = rig.client();
    let deadline = Instant::now() + timeout;
    let mut rounds = 0u64;
    loop {
        rounds += 1;
        let req = pb::ElectLeadersRequest {
            election_type: pb::ElectionType::Preferred as i32,
            partitions: vec![],
        };
        let r = client
            .admin(|a| {
                let req = req.clone();
                async move {
                    a.max_decoding_message_size(256 << 20)
                        .elect_leaders(req)
                        .await
                }
            })
            .await;
        match r {
            Ok(r) if r.error.is_none() => {
                let pending = r
                    .partitions
                    .iter()
                    .filter(|x| {
                        x.error
                            .as_ref()
                            .is_some_and(|e| e.code != pb::ErrorCode::ElectionNotNeeded as i32)
                    })
                    .count();
                if pending == 0 {
                    return Ok(rounds);
                }
            }
            Ok(r) => progress!("broker-failure: ElectLeaders refused: {:?}", r.error),
            Err(e) => progress!("broker-failure: ElectLeaders failed: {e}"),
        }
        rig.check_alive(None)?;
        if Instant::now() >= deadline {
            bail!("preferred leaders not all elected within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Brings broker 1 back (if down) and makes it lead every partition again,
/// as brokers 2 and 3 see it.
async fn restore(rig: &mut Rig, f: &mut Followers, p: &BrokerFailureParams) -> anyhow::Result<()> {
    let t = Instant::now();
    let timeout = Duration::from_secs_f64(p.restore_timeout_secs);
    f.begin(true);
    if rig.brokers[0].child.is_none() {
        rig.spawn_broker(0)?;
    }
    rig.wait_unfenced(timeout).await?;
    let rounds = elect_preferred(rig, timeout).await?;
    f.wait(rig, p.partitions, timeout, None, "restore").await?;
    progress!(
        "broker-failure: broker 1 leads all {} partitions again ({rounds} election rounds, {:.1} s)",
        p.partitions,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

// ---- trials ---------------------------------------------------------------

/// What the active controller logs when a broker's session expires, before
/// it decides the fence.
const EXPIRY_LINE: &str = "broker session expired; fencing it";

struct FailureTrial {
    ms: f64,
    /// The controller's "broker session expired; fencing it" line (logged
    /// when it starts deciding the fence) -> the same last acceptance: the
    /// failure end to end, deciding and committing the moves included.
    expiry_ms: f64,
    /// The expiry line -> the "broker fenced" line (decide and commit).
    expiry_to_fence_ms: f64,
    detect_ms: f64,
    first_accept_ms: f64,
    raft_entries: u64,
    fence_batch_entries: u64,
    term_changed: bool,
    queue_p99_ms: Option<f64>,
    queue_method: &'static str,
    queue_detail: Value,
    commit_p99_ms: Option<f64>,
    process_max_ms: Option<f64>,
    per_broker_last_ms: Vec<f64>,
}

async fn failure_trial(
    rig: &mut Rig,
    logs: &mut ControllerLogs,
    f: &mut Followers,
    p: &BrokerFailureParams,
) -> anyhow::Result<FailureTrial> {
    let timeout = Duration::from_secs_f64(p.move_timeout_secs);
    let active = rig.wait_active(Duration::from_secs(30)).await?;
    let before_metrics = scrape(&rig.metrics_addrs[active]).await?;
    let before = rig
        .describe_node(active)
        .await
        .ok_or_else(|| anyhow!("controller {} did not answer DescribeNode", active + 1))?;
    logs.mark();
    f.begin(false);
    let kill_ms = now_ms();
    rig.brokers[0].kill();
    let deadline = Instant::now() + timeout;
    let fence = loop {
        logs.poll();
        if let Some(e) = logs.find(active, "broker fenced", 1) {
            break e;
        }
        rig.check_alive(Some(0))?;
        if Instant::now() >= deadline {
            bail!(
                "controller {} logged no \"broker fenced\" for broker 1 within {timeout:?}",
                active + 1
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (first, last) = f
        .wait(rig, p.partitions, timeout, Some(0), "failure")
        .await?;
    let after = rig
        .describe_node(active)
        .await
        .ok_or_else(|| anyhow!("controller {} did not answer DescribeNode", active + 1))?;
    let after_metrics = scrape(&rig.metrics_addrs[active]).await?;
    let fence_index = fence
        .fields
        .get("index")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let (queue_p99_ms, queue_method, queue_detail) = queue_p99(&before_metrics, &after_metrics);
    // Logged before the fence is decided, so present once the fence is.
    let expiry = logs.find(active, EXPIRY_LINE, 1).ok_or_else(|| {
        anyhow!(
            "controller {} logged \"broker fenced\" but no \"{EXPIRY_LINE}\" for broker 1",
            active + 1
        )
    })?;
    Ok(FailureTrial {
        ms: last as f64 - fence.at_ms,
        expiry_ms: last as f64 - expiry.at_ms,
        expiry_to_fence_ms: fence.at_ms - expiry.at_ms,
        detect_ms: fence.at_ms - kill_ms as f64,
        first_accept_ms: first as f64 - fence.at_ms,
        raft_entries: after
            .last_applied_index
            .saturating_sub(before.last_applied_index),
        fence_batch_entries: fence_index.saturating_sub(before.last_applied_index),
        term_changed: after.term != before.term,
        queue_p99_ms,
        queue_method,
        queue_detail,
        commit_p99_ms: summary_max_ms(
            &after_metrics,
            "keel_controller_commit_latency_seconds",
            "0.99",
        ),
        process_max_ms: summary_max_ms(
            &after_metrics,
            "keel_controller_event_process_time_seconds",
            "1",
        ),
        per_broker_last_ms: f.lasts().iter().map(|l| *l as f64 - fence.at_ms).collect(),
    })
}

struct ShutdownTrial {
    ms: f64,
    /// SIGTERM -> the controller's "broker in controlled shutdown" line.
    to_shutdown_record_ms: Option<f64>,
    first_accept_ms: f64,
    raft_entries: u64,
    exit_ms: Option<f64>,
}

async fn shutdown_trial(
    rig: &mut Rig,
    logs: &mut ControllerLogs,
    f: &mut Followers,
    p: &BrokerFailureParams,
) -> anyhow::Result<ShutdownTrial> {
    let timeout = Duration::from_secs_f64(p.move_timeout_secs);
    let active = rig.wait_active(Duration::from_secs(30)).await?;
    let before = rig
        .describe_node(active)
        .await
        .ok_or_else(|| anyhow!("controller {} did not answer DescribeNode", active + 1))?;
    logs.mark();
    f.begin(false);
    // Taken before kill(1) runs: the ~1 ms it takes to start is inside T.
    let term_ms = now_ms();
    rig.brokers[0].terminate()?;
    let (first, last) = f
        .wait(rig, p.partitions, timeout, Some(0), "controlled shutdown")
        .await?;
    let after = rig.describe_node(active).await;
    logs.poll();
    let record = logs.find(active, "broker in controlled shutdown", 1);
    // The broker exits once the controller allows it (bounded by its own 30 s).
    let deadline = Instant::now() + Duration::from_secs(45);
    let exit_ms = loop {
        if rig.brokers[0].exited().is_some() {
            break Some((now_ms() - term_ms) as f64);
        }
        if rig.brokers[0].child.is_none() {
            break None;
        }
        if Instant::now() >= deadline {
            progress!("broker-failure: broker 1 did not exit within 45 s of SIGTERM; killing it");
            rig.brokers[0].kill();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    Ok(ShutdownTrial {
        ms: (last - term_ms) as f64,
        to_shutdown_record_ms: record.map(|e| e.at_ms - term_ms as f64),
        first_accept_ms: (first - term_ms) as f64,
        raft_entries: after
            .map(|a| {
                a.last_applied_index
                    .saturating_sub(before.last_applied_index)
            })
            .unwrap_or(0),
        exit_ms,
    })
}

fn summary_json(trials: &[f64]) -> Value {
    json!({
        "median_ms": r1(median(trials)),
        "p99_ms": r1(percentile(trials, 99.0)),
        "min_ms": r1(trials.iter().copied().reduce(f64::min).unwrap_or(0.0)),
        "max_ms": r1(trials.iter().copied().reduce(f64::max).unwrap_or(0.0)),
        "trials_ms": trials.iter().map(|x| r1(*x)).collect::<Vec<_>>(),
    })
}

fn opt_r1(x: Option<f64>) -> Value {
    x.map_or(Value::Null, |v| json!(r1(v)))
}

/// Runs the scenario.
pub async fn run(env: &Env, p: &BrokerFailureParams) -> anyhow::Result<Report> {
    if p.partitions == 0 || p.trials == 0 {
        bail!("--partitions and --trials must be positive");
    }
    let started_at = unix_now();
    progress!(
        "broker-failure: 3 controllers on 127.0.{SUBNET}.11-13, 3 brokers on 127.0.{SUBNET}.21-23"
    );
    let mut rig = Rig::start(&env.exe)?;
    rig.wait_active(Duration::from_secs(60)).await?;
    for i in 0..3 {
        rig.spawn_broker(i)?;
    }
    rig.wait_unfenced(Duration::from_secs(60)).await?;
    let mut logs = ControllerLogs::new(&rig);
    let mut f = Followers::new(&rig);
    f.begin(true);
    let t = Instant::now();
    progress!(
        "broker-failure: creating {} partitions (RF 3, replicas [1,2,3])",
        p.partitions
    );
    create_topics(&rig, p).await?;
    let create_secs = t.elapsed().as_secs_f64();
    f.wait(
        &mut rig,
        p.partitions,
        Duration::from_secs_f64(p.setup_timeout_secs),
        None,
        "setup",
    )
    .await?;
    let setup_secs = t.elapsed().as_secs_f64();
    progress!(
        "broker-failure: created in {create_secs:.1} s; brokers 2/3 accepted leader 1 for all after {setup_secs:.1} s"
    );

    let mut failure = Vec::new();
    let mut failure_errors = Vec::new();
    for n in 0..p.trials {
        match failure_trial(&mut rig, &mut logs, &mut f, p).await {
            Ok(tr) => {
                progress!(
                    "broker-failure: failure trial {}: {:.1} ms from fence log to last acceptance, {:.1} ms from session expiry (expiry -> fence log {:.1} ms, kill -> fence {:.0} ms, first acceptance +{:.1} ms, {} Raft entries, queue p99 {:?} ms)",
                    n + 1,
                    tr.ms,
                    tr.expiry_ms,
                    tr.expiry_to_fence_ms,
                    tr.detect_ms,
                    tr.first_accept_ms,
                    tr.raft_entries,
                    tr.queue_p99_ms.map(r3)
                );
                failure.push(tr);
            }
            Err(e) => {
                progress!("broker-failure: failure trial {} failed: {e:#}", n + 1);
                failure_errors.push(format!("{e:#}"));
                break;
            }
        }
        restore(&mut rig, &mut f, p).await?;
    }
    let mut shutdown = Vec::new();
    let mut shutdown_errors = Vec::new();
    for n in 0..p.trials {
        match shutdown_trial(&mut rig, &mut logs, &mut f, p).await {
            Ok(tr) => {
                progress!(
                    "broker-failure: controlled-shutdown trial {}: {:.1} ms from SIGTERM to last acceptance (shutdown record +{:?} ms, first acceptance +{:.1} ms, exit +{:?} ms)",
                    n + 1,
                    tr.ms,
                    tr.to_shutdown_record_ms.map(r1),
                    tr.first_accept_ms,
                    tr.exit_ms
                );
                shutdown.push(tr);
            }
            Err(e) => {
                progress!(
                    "broker-failure: controlled-shutdown trial {} failed: {e:#}",
                    n + 1
                );
                shutdown_errors.push(format!("{e:#}"));
                break;
            }
        }
        restore(&mut rig, &mut f, p).await?;
    }

    let fail_ms: Vec<f64> = failure.iter().map(|t| t.ms).collect();
    let mut fj = summary_json(&fail_ms);
    let entries: Vec<u64> = failure.iter().map(|t| t.raft_entries).collect();
    let q: Vec<f64> = failure.iter().filter_map(|t| t.queue_p99_ms).collect();
    fj["raft_entries"] = json!(entries.iter().copied().max().unwrap_or(0));
    fj["raft_entries_trials"] = json!(entries);
    fj["fence_batch_entries_trials"] = json!(failure
        .iter()
        .map(|t| t.fence_batch_entries)
        .collect::<Vec<_>>());
    fj["controller_term_changed"] = json!(failure.iter().any(|t| t.term_changed));
    fj["event_queue_p99_ms"] = if q.is_empty() {
        Value::Null
    } else {
        json!(r3(median(&q)))
    };
    fj["event_queue_p99_ms_trials"] = json!(q.iter().map(|x| r3(*x)).collect::<Vec<_>>());
    fj["event_queue_p99_method"] = json!(failure.first().map(|t| t.queue_method));
    fj["event_queue_by_kind_trials"] = json!(failure
        .iter()
        .map(|t| t.queue_detail.clone())
        .collect::<Vec<_>>());
    fj["kill_to_fence_log_ms_trials"] =
        json!(failure.iter().map(|t| r1(t.detect_ms)).collect::<Vec<_>>());
    fj["fence_log_to_first_acceptance_ms_trials"] = json!(failure
        .iter()
        .map(|t| r1(t.first_accept_ms))
        .collect::<Vec<_>>());
    fj["fence_log_to_last_acceptance_per_broker_ms_trials"] = json!(failure
        .iter()
        .map(|t| t
            .per_broker_last_ms
            .iter()
            .map(|x| r1(*x))
            .collect::<Vec<_>>())
        .collect::<Vec<_>>());
    fj["commit_latency_p99_ms_trials"] = json!(failure
        .iter()
        .map(|t| opt_r1(t.commit_p99_ms))
        .collect::<Vec<_>>());
    fj["event_process_max_ms_trials"] = json!(failure
        .iter()
        .map(|t| opt_r1(t.process_max_ms))
        .collect::<Vec<_>>());
    fj["failures"] = json!(failure_errors);
    let expiry_ms: Vec<f64> = failure.iter().map(|t| t.expiry_ms).collect();
    fj["expiry_to_last_acceptance"] = summary_json(&expiry_ms);
    fj["expiry_log_to_fence_log_ms_trials"] = json!(failure
        .iter()
        .map(|t| r1(t.expiry_to_fence_ms))
        .collect::<Vec<_>>());

    let sd_ms: Vec<f64> = shutdown.iter().map(|t| t.ms).collect();
    let mut sj = summary_json(&sd_ms);
    sj["sigterm_to_shutdown_record_log_ms_trials"] = json!(shutdown
        .iter()
        .map(|t| opt_r1(t.to_shutdown_record_ms))
        .collect::<Vec<_>>());
    sj["sigterm_to_first_acceptance_ms_trials"] = json!(shutdown
        .iter()
        .map(|t| r1(t.first_accept_ms))
        .collect::<Vec<_>>());
    sj["sigterm_to_exit_ms_trials"] = json!(shutdown
        .iter()
        .map(|t| opt_r1(t.exit_ms))
        .collect::<Vec<_>>());
    sj["raft_entries_trials"] = json!(shutdown.iter().map(|t| t.raft_entries).collect::<Vec<_>>());
    sj["failures"] = json!(shutdown_errors);

    let json = json!({
        "scenario": "broker-failure",
        "started_at_unix": started_at,
        "partitions": p.partitions,
        "parameters": {
            "controllers": 3,
            "brokers": 3,
            "trials": p.trials,
            "partitions_per_topic": p.partitions_per_topic,
            "replicas": [1, 2, 3],
            "topics_per_request": p.topics_per_request,
            "create_concurrency": p.create_concurrency,
            "controller_session_timeout_ms": 3000,
            "broker_heartbeat_interval_ms": 500,
            "broker_session_timeout_ms": 3000,
            "create_secs": r1(create_secs),
            "setup_secs": r1(setup_secs),
            "failure_measured": "SIGKILL broker 1; active controller's \"broker fenced\" log timestamp -> last accepted_at_ms on brokers 2 and 3 of the first leader_and_isr line per partition with leader != 1 at a newer leader epoch",
            "failure_expiry_measured": "failure.expiry_to_last_acceptance: the active controller's \"broker session expired; fencing it\" log timestamp (before the fence is decided) -> the same last acceptance, so deciding and committing the moves count too",
            "controlled_shutdown_measured": "SIGTERM to broker 1 (bench clock, taken before kill(1) starts) -> the same last acceptance on brokers 2 and 3",
        },
        "failure": fj,
        "controlled_shutdown": sj,
        "machine": machine(),
    });

    let mut table = format!(
        "broker-failure ({} partitions led by broker 1, RF 3)\n",
        p.partitions
    );
    table += &format!(
        "{:<22} {:>7} {:>10} {:>10} {:>10} {:>10}\n",
        "measurement", "trials", "median ms", "p99 ms", "min ms", "max ms"
    );
    for (name, j, n) in [
        ("failure (fence->ack)", &json["failure"], fail_ms.len()),
        (
            "failure (expiry->ack)",
            &json["failure"]["expiry_to_last_acceptance"],
            expiry_ms.len(),
        ),
        (
            "controlled shutdown",
            &json["controlled_shutdown"],
            sd_ms.len(),
        ),
    ] {
        table += &format!(
            "{:<22} {:>7} {:>10} {:>10} {:>10} {:>10}\n",
            name,
            n,
            cell(&j["median_ms"]),
            cell(&j["p99_ms"]),
            cell(&j["min_ms"]),
            cell(&j["max_ms"])
        );
    }
    table += &format!(
        "failure: Raft entries {} per fence, event-queue p99 {} ms; expiry log -> fence log {} ms; kill -> fence log {} ms; fence log -> first acceptance {} ms; max event processing {} ms; commit p99 {} ms\n",
        cell(&json["failure"]["raft_entries"]),
        cell(&json["failure"]["event_queue_p99_ms"]),
        json["failure"]["expiry_log_to_fence_log_ms_trials"],
        json["failure"]["kill_to_fence_log_ms_trials"],
        json["failure"]["fence_log_to_first_acceptance_ms_trials"],
        json["failure"]["event_process_max_ms_trials"],
        json["failure"]["commit_latency_p99_ms_trials"],
    );
    table += &format!(
        "controlled shutdown: SIGTERM -> shutdown record logged {} ms; -> first acceptance {} ms; -> broker exit {} ms\n",
        json["controlled_shutdown"]["sigterm_to_shutdown_record_log_ms_trials"],
        json["controlled_shutdown"]["sigterm_to_first_acceptance_ms_trials"],
        json["controlled_shutdown"]["sigterm_to_exit_ms_trials"],
    );
    let summary = format!(
        "broker-failure: {} partitions: failure median {} ms (fence -> last acceptance), {} ms from session expiry, controlled shutdown median {} ms (SIGTERM -> last acceptance)",
        p.partitions,
        cell(&json["failure"]["median_ms"]),
        cell(&json["failure"]["expiry_to_last_acceptance"]["median_ms"]),
        cell(&json["controlled_shutdown"]["median_ms"])
    );
    if fail_ms.is_empty() && sd_ms.is_empty() {
        bail!(
            "no trial succeeded; failure: {:?}; controlled shutdown: {:?}",
            json["failure"]["failures"],
            json["controlled_shutdown"]["failures"]
        );
    }
    Ok(Report {
        scenario: "broker-failure",
        json,
        table,
        summary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rfc3339() {
        assert_eq!(rfc3339_ms("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(
            rfc3339_ms("2024-03-01T12:00:00.250Z"),
            Some(1_709_294_400_250.0)
        );
        assert_eq!(
            rfc3339_ms("2024-03-01T13:00:00.250+01:00"),
            Some(1_709_294_400_250.0)
        );
        assert_eq!(rfc3339_ms("nonsense"), None);
    }

    #[test]
    fn reads_history_fields_without_a_full_parse() {
        let l = r#"{"event":"leader_and_isr","topic_id":"9639c1c1-995f-1e35-6b93-fadec412f94c","partition":95,"leader":null,"leader_epoch":7,"partition_epoch":9,"isr":[2,3],"replicas":[1,2,3],"controller_epoch":2,"broker_id":2,"broker_epoch":5,"accepted_at_ms":1709294400250}"#;
        assert_eq!(json_field(l, "event"), Some("leader_and_isr"));
        assert_eq!(
            json_field(l, "topic_id"),
            Some("9639c1c1-995f-1e35-6b93-fadec412f94c")
        );
        assert_eq!(json_field(l, "partition"), Some("95"));
        assert_eq!(json_field(l, "leader"), None);
        assert_eq!(json_field(l, "leader_epoch"), Some("7"));
        assert_eq!(json_field(l, "accepted_at_ms"), Some("1709294400250"));
        assert_eq!(json_field(l, "missing"), None);
        let l2 = l.replace(r#""leader":null"#, r#""leader":2"#);
        assert_eq!(json_field(&l2, "leader"), Some("2"));
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
        assert_eq!(h.found.len(), 1);
        // The rest of the torn line arrives: now it counts, with its own time.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, tail.as_bytes()).unwrap();
        h.poll_until(2);
        assert_eq!(h.found.len(), 2);
        assert_eq!(h.first_last(), (1_000, 2_000));
    }

    #[test]
    fn parses_summary_and_log_lines() {
        let m = parse_metrics(
            "# TYPE x summary\nkeel_controller_event_queue_time_seconds{kind=\"heartbeat\",quantile=\"0.99\"} 0.012\nkeel_controller_event_queue_time_seconds_count{kind=\"heartbeat\"} 3\n",
        );
        let (p99, _, _) = queue_p99(&[], &m);
        assert_eq!(p99.map(|x| (x * 1000.0).round()), Some(12_000.0));
        let e = parse_log_line(r#"{"timestamp":"2024-03-01T12:00:00.250Z","level":"INFO","fields":{"message":"broker fenced","node":1,"term":2,"index":9,"broker":1,"broker_epoch":5},"target":"keel_controller::tasks"}"#).unwrap();
        assert_eq!(e.message, "broker fenced");
        assert_eq!(e.fields["index"], 9);
        assert_eq!(e.at_ms, 1_709_294_400_250.0);
    }
}
