//! Scenario `compare`: the `commit` workload against a 3-node ZooKeeper
//! ensemble, a 3-node etcd cluster and a 3-node Keel quorum, in one run,
//! from this one load generator.
//!
//! Every system gets the same shape of load: `writers` tokio tasks, each
//! with its own persistent connection (a ZooKeeper session, an etcd gRPC
//! channel, a Keel gRPC channel) to the system's leader, one durable
//! 100-byte write in flight per writer.
//! - ZooKeeper: create the persistent znode `/keel-bench/w<writer>-<seq>`
//!   (one znode per partition state, as the classic controller kept them).
//! - etcd: Put `/keel-bench/w<writer>`.
//! - Keel: the `commit` op, an IncrementalAlterConfigs SET of
//!   `bench.k<writer>` on one topic (one TopicConfig record), sent on the
//!   writer's `AdminService.Write` session (or, with `--keel-api unary`, as
//!   one unary call per op).
//!
//! Systems are interleaved inside a trial (trial t: for each writer level:
//! zookeeper, etcd, keel, grpc-echo) so machine noise hits all alike.
//! ZooKeeper and etcd are started and stopped by `scripts/bench-compare.sh`;
//! Keel is started here on 127.0.20.11-13.
//!
//! The fourth row, `grpc-echo`, is the transport ceiling: a gRPC server
//! (a process of this binary on 127.0.23.1) that sends every message of a
//! stream straight back, driven by the same writers with the same values.
//! It does no consensus and touches no disk, so its ops/s is what one gRPC
//! round trip per op allows on this machine at that concurrency; Keel's
//! ratio to it (`keel_vs_grpc_echo`) is the share of that ceiling Keel
//! reaches while committing every op durably on a quorum.

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use keel_testkit::admin::{self, set_config};
use keel_testkit::{probe, Cluster};

use crate::cluster::{self, value};
use crate::commit::{run_level, KeelApi};
use crate::echo::{EchoServer, EchoWriter};
use crate::etcd::{self, EtcdError};
use crate::load::{run_writers, run_writers_on, Connections, Level, Writer};
use crate::stats::{
    cell, disk_probe, disk_probe_line, machine, median, percentile, r1, r3, unix_now,
};
use crate::zk::{self, ZkError, ZkSession, ERR_NODE_EXISTS};
use crate::{progress, Env, Report};

/// Parameters of the `compare` scenario.
#[derive(Clone, Debug)]
pub struct CompareParams {
    /// Concurrent writers per level.
    pub writers: Vec<usize>,
    /// Wall time per level and system.
    pub level_secs: f64,
    /// Trials per level and system.
    pub trials: usize,
    /// Bytes per value.
    pub value_bytes: usize,
    /// ZooKeeper ensemble `host:port`s (empty = skip ZooKeeper).
    pub zookeeper: Vec<String>,
    /// etcd endpoints (empty = skip etcd).
    pub etcd: Vec<String>,
    /// Untimed warm-up per system at the largest writer count, before the
    /// first trial (JIT compilation, connection pools, page cache).
    pub warmup_secs: f64,
    /// Upper bound on ops per level and system (all writers together).
    pub max_ops_per_level: u64,
    /// Per-request deadline of every client.
    pub request_timeout_ms: u64,
    /// How Keel's writers send their ops.
    pub api: KeelApi,
    /// Whether each system's writers share one connection.
    pub connections: Connections,
    /// Whether to measure the gRPC echo ceiling (`grpc-echo`).
    pub echo: bool,
}

impl Default for CompareParams {
    fn default() -> Self {
        Self {
            writers: vec![1, 16, 64],
            level_secs: 10.0,
            trials: 3,
            value_bytes: 100,
            zookeeper: Vec::new(),
            etcd: Vec::new(),
            warmup_secs: 10.0,
            max_ops_per_level: 2_000_000,
            request_timeout_ms: 10_000,
            api: KeelApi::Session,
            connections: Connections::PerWriter,
            echo: true,
        }
    }
}

/// Bad input to the scenario, or a peer that is not in the state the
/// comparison needs.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("bad parameter: {0}")]
    BadParams(String),
    /// Nothing to compare Keel with.
    #[error("give --zookeeper and/or --etcd endpoints (scripts/bench-compare.sh starts both)")]
    NoPeers,
    /// Znodes from an earlier run would collide with this run's names.
    #[error("ZooKeeper already holds {0} znodes under {ZK_ROOT} from an earlier run; start a fresh ensemble (scripts/bench-compare.sh does)")]
    StaleZnodes(i32),
    #[error(transparent)]
    Zk(#[from] ZkError),
    #[error(transparent)]
    Etcd(#[from] EtcdError),
}

/// Parent of every znode the bench creates.
const ZK_ROOT: &str = "/keel-bench";
/// Session timeout asked of ZooKeeper (writers never idle that long).
const ZK_SESSION_TIMEOUT_MS: i32 = 30_000;
/// Keel topic the `commit` op writes to.
const TOPIC: &str = "bench-compare";
/// Flags of every Keel controller (as in `commit`).
const KEEL_FLAGS: [&str; 2] = ["--session-timeout-ms", "600000"];
/// 127.0.<subnet>.11-13 of the Keel quorum.
const KEEL_SUBNET: u8 = 20;
/// Address of the gRPC echo server (the transport ceiling).
const ECHO_IP: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 0, 23, 1);

/// The systems, in the order they run inside a level (the order is also
/// their index in per-system arrays).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
enum System {
    Zookeeper,
    Etcd,
    Keel,
    /// The transport ceiling: a gRPC echo server, no consensus, no disk.
    Echo,
}

impl System {
    const ALL: [System; 4] = [System::Zookeeper, System::Etcd, System::Keel, System::Echo];

    fn name(self) -> &'static str {
        match self {
            System::Zookeeper => "zookeeper",
            System::Etcd => "etcd",
            System::Keel => "keel",
            System::Echo => "grpc-echo",
        }
    }

    /// Server processes the system runs.
    fn servers(self) -> usize {
        match self {
            System::Echo => 1,
            _ => 3,
        }
    }

    /// JSON key of Keel's ratio to this system (`None` for Keel).
    fn ratio_key(self) -> Option<&'static str> {
        match self {
            System::Zookeeper => Some("keel_vs_zookeeper"),
            System::Etcd => Some("keel_vs_etcd"),
            System::Keel => None,
            System::Echo => Some("keel_vs_grpc_echo"),
        }
    }
}

/// Keel ops/s ÷ peer ops/s; `None` when either is missing or the peer did
/// nothing.
pub fn ratio(keel_ops_s: Option<f64>, peer_ops_s: Option<f64>) -> Option<f64> {
    match (keel_ops_s, peer_ops_s) {
        (Some(k), Some(p)) if p > 0.0 && k.is_finite() && p.is_finite() => Some(k / p),
        _ => None,
    }
}

/// Pids of the processes listening on `addrs` (`host:port` or
/// `http://host:port`), as far as /proc shows them.
fn listener_pids(addrs: &[String]) -> Vec<u32> {
    addrs
        .iter()
        .filter_map(|a| {
            let hp = a.trim_start_matches("http://").trim_end_matches('/');
            probe::listener_pid(hp.parse().ok()?)
        })
        .collect()
}

/// How a ZooKeeper writer reaches the leader.
enum ZkConn {
    /// Its own session.
    Own(ZkSession),
    /// A share of one pipelined session (closed by the level, not here).
    Shared(zk::SharedZkSession),
}

/// A ZooKeeper writer: its own session to the leader, or a share of one.
struct ZkWriter {
    session: ZkConn,
    /// Added to `seq` so names never repeat across levels and trials.
    seq_base: u64,
    value_bytes: usize,
}

impl Writer for ZkWriter {
    async fn op(&mut self, writer: usize, seq: u64) -> Result<(), String> {
        let n = self.seq_base + seq;
        let path = format!("{ZK_ROOT}/w{writer}-{n}");
        let data = value(writer, n, self.value_bytes);
        match &mut self.session {
            ZkConn::Own(s) => s.create(&path, data.as_bytes()).await,
            ZkConn::Shared(s) => s.create(&path, data.as_bytes()).await,
        }
        .map_err(|e| e.to_string())
    }

    async fn finish(self) {
        if let ZkConn::Own(s) = self.session {
            let _ = s.close().await;
        }
    }
}

/// An etcd writer: its own gRPC connection to the leader, or a clone of
/// one (tonic multiplexes the clones' calls on it).
struct EtcdWriter {
    client: etcd::pb::kv_client::KvClient<tonic::transport::Channel>,
    endpoint: String,
    value_bytes: usize,
}

impl Writer for EtcdWriter {
    async fn op(&mut self, writer: usize, seq: u64) -> Result<(), String> {
        let key = format!("{ZK_ROOT}/w{writer}").into_bytes();
        let v = value(writer, seq, self.value_bytes).into_bytes();
        etcd::put(&mut self.client, &self.endpoint, key, v)
            .await
            .map_err(|e| e.to_string())
    }

    async fn finish(self) {}
}

/// A peer the run talks to: its endpoints, leader and server processes.
struct Peer {
    endpoints: Vec<String>,
    /// Server version as the server reports it.
    version: String,
    /// Leader address at the start of the run.
    leader: String,
    /// Pids of the server processes (for CPU figures); may be incomplete.
    pids: Vec<u32>,
}

/// One system at one writer level in one trial.
struct Trial {
    trial: usize,
    /// Address the writers talked to.
    leader: String,
    /// The level, or why it failed.
    result: Result<Level, String>,
    /// Wall time of the whole level call (connects and closes included).
    wall_secs: f64,
    /// CPU seconds of the system's server processes during the call.
    server_cpu_secs: Option<f64>,
    /// CPU seconds of this process during the call.
    client_cpu_secs: Option<f64>,
    /// CPU seconds of the whole machine (all processes) during the call.
    machine_cpu_secs: Option<f64>,
    /// Bytes the system's server processes wrote to storage during the call.
    server_write_bytes: Option<u64>,
    /// CPU seconds of each other (idle) system's servers during the call.
    idle_cpu_secs: Vec<(&'static str, f64)>,
    /// 1-minute load average when the level started.
    load_avg_1m: Option<f64>,
}

impl Trial {
    fn ops_per_s(&self) -> Option<f64> {
        self.result.as_ref().ok().map(|l| l.ops as f64 / l.secs)
    }

    /// CPU of everything but this system's servers and the load generator
    /// (the idle systems, other work on the machine): noise.
    fn other_cpu_secs(&self) -> Option<f64> {
        let (m, s, c) = (
            self.machine_cpu_secs?,
            self.server_cpu_secs?,
            self.client_cpu_secs?,
        );
        Some((m - s - c).max(0.0))
    }

    /// CPU of processes outside this comparison (other work on the
    /// machine): [`Trial::other_cpu_secs`] less the idle systems.
    fn outside_cpu_secs(&self) -> Option<f64> {
        let idle: f64 = self.idle_cpu_secs.iter().map(|(_, c)| c).sum();
        Some((self.other_cpu_secs()? - idle).max(0.0))
    }

    fn ops(&self) -> u64 {
        self.result.as_ref().map(|l| l.ops).unwrap_or(0)
    }

    fn json(&self) -> Value {
        let cpu_pct = |c: Option<f64>| c.map(|c| r1(100.0 * c / self.wall_secs.max(1e-9)));
        let cpu_us_per_op = |c: Option<f64>| {
            c.filter(|_| self.ops() > 0)
                .map(|c| r1(c * 1e6 / self.ops() as f64))
        };
        let mut j = json!({
            "trial": self.trial,
            "leader": self.leader,
            "wall_secs": r3(self.wall_secs),
            "server_cpu_secs": self.server_cpu_secs.map(r3),
            "server_cpu_pct": cpu_pct(self.server_cpu_secs),
            "server_cpu_us_per_op": cpu_us_per_op(self.server_cpu_secs),
            "client_cpu_secs": self.client_cpu_secs.map(r3),
            "client_cpu_pct": cpu_pct(self.client_cpu_secs),
            "client_cpu_us_per_op": cpu_us_per_op(self.client_cpu_secs),
            "server_write_bytes": self.server_write_bytes,
            "server_write_bytes_per_op": self
                .server_write_bytes
                .filter(|_| self.ops() > 0)
                .map(|b| r1(b as f64 / self.ops() as f64)),
            "machine_cpu_pct": cpu_pct(self.machine_cpu_secs),
            "other_cpu_pct": cpu_pct(self.other_cpu_secs()),
            "idle_systems_cpu_pct": self
                .idle_cpu_secs
                .iter()
                .map(|(n, c)| (n.to_string(), json!(cpu_pct(Some(*c)))))
                .collect::<serde_json::Map<_, _>>(),
            "outside_cpu_pct": cpu_pct(self.outside_cpu_secs()),
            "load_avg_1m": self.load_avg_1m,
        });
        match &self.result {
            Ok(l) => {
                j["ops"] = json!(l.ops);
                j["errors"] = json!(l.errors);
                j["secs"] = json!(r3(l.secs));
                j["ops_per_s"] = json!(r1(l.ops as f64 / l.secs));
                j["p50_ms"] = json!(r3(percentile(&l.lat_ms, 50.0)));
                j["p99_ms"] = json!(r3(percentile(&l.lat_ms, 99.0)));
                j["first_error"] = json!(l.first_error);
            }
            Err(e) => j["error"] = json!(e),
        }
        j
    }
}

/// Median ops/s, pooled latency percentiles and median CPU of one system
/// at one level.
fn summarize(trials: &[Trial]) -> Value {
    let ok: Vec<&Trial> = trials.iter().filter(|t| t.result.is_ok()).collect();
    if ok.is_empty() {
        return json!({ "ok_trials": 0, "ops_per_s": null, "p50_ms": null, "p99_ms": null });
    }
    let ops_s: Vec<f64> = ok.iter().filter_map(|t| t.ops_per_s()).collect();
    let mut pooled = Vec::new();
    let mut errors = 0;
    for l in ok.iter().filter_map(|t| t.result.as_ref().ok()) {
        pooled.extend_from_slice(&l.lat_ms);
        errors += l.errors;
    }
    let ok_json: Vec<Value> = ok.iter().map(|t| t.json()).collect();
    let med = |f: &dyn Fn(&Value) -> Option<f64>| {
        let v: Vec<f64> = ok_json.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| r1(median(&v)))
    };
    json!({
        "ok_trials": ok.len(),
        "ops_per_s": r1(median(&ops_s)),
        "ops_per_s_min": r1(ops_s.iter().copied().fold(f64::INFINITY, f64::min)),
        "ops_per_s_max": r1(ops_s.iter().copied().fold(0.0, f64::max)),
        "p50_ms": r3(percentile(&pooled, 50.0)),
        "p99_ms": r3(percentile(&pooled, 99.0)),
        "errors": errors,
        "server_cpu_pct": med(&|j| j["server_cpu_pct"].as_f64()),
        "server_cpu_us_per_op": med(&|j| j["server_cpu_us_per_op"].as_f64()),
        "client_cpu_pct": med(&|j| j["client_cpu_pct"].as_f64()),
        "client_cpu_us_per_op": med(&|j| j["client_cpu_us_per_op"].as_f64()),
        "server_write_bytes_per_op": med(&|j| j["server_write_bytes_per_op"].as_f64()),
        "other_cpu_pct": med(&|j| j["other_cpu_pct"].as_f64()),
        "outside_cpu_pct": med(&|j| j["outside_cpu_pct"].as_f64()),
    })
}

fn validate(p: &CompareParams) -> Result<(), CompareError> {
    let bad = |m: &str| Err(CompareError::BadParams(m.to_string()));
    if p.trials == 0 || p.trials > 1_000 {
        return bad("--trials must be 1..=1000");
    }
    if p.writers.is_empty() || p.writers.iter().any(|&w| w == 0 || w > 10_000) {
        return bad("--writers must be a non-empty list of counts in 1..=10000");
    }
    if !(p.level_secs.is_finite() && p.level_secs > 0.0 && p.level_secs <= 3_600.0) {
        return bad("--level-secs must be in (0, 3600]");
    }
    if !(p.warmup_secs.is_finite() && (0.0..=3_600.0).contains(&p.warmup_secs)) {
        return bad("warm-up seconds must be in [0, 3600]");
    }
    if p.value_bytes == 0 || p.value_bytes > 512 << 10 {
        return bad("value bytes must be in 1..=524288");
    }
    if p.max_ops_per_level == 0 || p.request_timeout_ms == 0 {
        return bad("max ops per level and the request timeout must be positive");
    }
    if p.zookeeper.is_empty() && p.etcd.is_empty() {
        return Err(CompareError::NoPeers);
    }
    Ok(())
}

/// Finds the ZooKeeper leader, checks the tree has no znodes of an
/// earlier run, and creates the parent znode.
async fn setup_zookeeper(p: &CompareParams) -> Result<Peer, CompareError> {
    let (leader, info) = zk::find_leader(&p.zookeeper, Duration::from_secs(60)).await?;
    let timeout = Duration::from_millis(p.request_timeout_ms);
    let mut s = ZkSession::connect(&leader, ZK_SESSION_TIMEOUT_MS, timeout).await?;
    match s.create(ZK_ROOT, b"").await {
        Ok(()) => {}
        Err(ZkError::Server {
            code: ERR_NODE_EXISTS,
            ..
        }) => {}
        Err(e) => return Err(e.into()),
    }
    let children = s.exists(ZK_ROOT).await?.map(|st| st.num_children);
    s.close().await?;
    if let Some(n) = children.filter(|&n| n > 0) {
        return Err(CompareError::StaleZnodes(n));
    }
    Ok(Peer {
        endpoints: p.zookeeper.clone(),
        version: info.version.unwrap_or_else(|| "unknown".into()),
        leader,
        pids: listener_pids(&p.zookeeper),
    })
}

async fn setup_etcd(p: &CompareParams) -> Result<Peer, CompareError> {
    let m = etcd::find_leader(&p.etcd, Duration::from_secs(60)).await?;
    Ok(Peer {
        endpoints: p.etcd.clone(),
        version: m.version,
        leader: m.endpoint,
        pids: listener_pids(&p.etcd),
    })
}

/// Counters read at one instant, around every level.
struct Sample {
    /// CPU seconds of each system's servers, in [`System::ALL`] order.
    server_cpu_secs: [Option<f64>; System::ALL.len()],
    /// Storage write bytes of each system's servers, same order.
    server_write_bytes: [Option<u64>; System::ALL.len()],
    /// CPU ticks of this process.
    client_ticks: Option<u64>,
    /// Busy ticks of the machine.
    machine_ticks: Option<u64>,
}

impl Sample {
    /// Position of `s` in the sample arrays (filled in `System::ALL`
    /// order, which the discriminants follow: see the test).
    fn index(s: System) -> usize {
        s as usize
    }

    /// CPU seconds system `s`'s servers used from `self` to `later`.
    fn server_cpu(&self, s: System, later: &Sample) -> Option<f64> {
        let i = Self::index(s);
        Some((later.server_cpu_secs[i]? - self.server_cpu_secs[i]?).max(0.0))
    }

    /// Bytes system `s`'s servers wrote from `self` to `later`.
    fn server_write_bytes(&self, s: System, later: &Sample) -> Option<u64> {
        let i = Self::index(s);
        Some(later.server_write_bytes[i]?.saturating_sub(self.server_write_bytes[i]?))
    }
}

/// Seconds between two tick counts.
fn ticks_secs(before: Option<u64>, after: Option<u64>) -> Option<f64> {
    Some(after?.saturating_sub(before?) as f64 / probe::ticks_per_second())
}

/// What runs one level of one system.
struct Systems {
    zk: Option<Peer>,
    etcd: Option<Peer>,
    keel: Cluster,
    keel_pids: Vec<u32>,
    /// The echo server (absent with `echo: false`).
    echo: Option<EchoServer>,
    /// Next free ZooKeeper sequence number (names never repeat in a run).
    zk_seq_next: u64,
}

impl Systems {
    fn present(&self, s: System) -> bool {
        match s {
            System::Zookeeper => self.zk.is_some(),
            System::Etcd => self.etcd.is_some(),
            System::Keel => true,
            System::Echo => self.echo.is_some(),
        }
    }

    fn pids(&self, s: System) -> &[u32] {
        match s {
            System::Zookeeper => self.zk.as_ref().map(|z| z.pids.as_slice()).unwrap_or(&[]),
            System::Etcd => self.etcd.as_ref().map(|e| e.pids.as_slice()).unwrap_or(&[]),
            System::Keel => &self.keel_pids,
            System::Echo => self.echo.as_ref().map(EchoServer::pids).unwrap_or(&[]),
        }
    }

    /// The sum of `read(pid)` over system `s`'s servers (`None` if any is
    /// unknown).
    fn sum_pids(&self, s: System, read: impl Fn(u32) -> Option<u64>) -> Option<u64> {
        let pids = self.pids(s);
        if pids.len() != s.servers() {
            return None;
        }
        pids.iter().map(|&pid| read(pid)).sum()
    }

    /// CPU seconds of system `s`'s servers so far (`None` if any is unknown).
    fn server_cpu(&self, s: System) -> Option<f64> {
        self.sum_pids(s, probe::cpu_ticks)
            .map(|ticks| ticks as f64 / probe::ticks_per_second())
    }

    /// Bytes system `s`'s servers wrote to storage so far, net of writes
    /// cancelled before they reached it (`None` if any is unknown).
    fn server_write_bytes(&self, s: System) -> Option<u64> {
        self.sum_pids(s, probe::write_bytes)
    }

    /// Every counter a trial reports, read at one instant.
    fn sample(&self) -> Sample {
        Sample {
            server_cpu_secs: System::ALL.map(|s| self.server_cpu(s)),
            server_write_bytes: System::ALL.map(|s| self.server_write_bytes(s)),
            client_ticks: probe::own_cpu_ticks(),
            machine_ticks: probe::machine_busy_ticks(),
        }
    }

    /// The current leader of `s` (looked up again before every level, so a
    /// leadership change between levels is followed).
    async fn leader(&mut self, s: System, p: &CompareParams) -> anyhow::Result<String> {
        Ok(match s {
            System::Zookeeper => {
                zk::find_leader(&p.zookeeper, Duration::from_secs(30))
                    .await?
                    .0
            }
            System::Etcd => {
                etcd::find_leader(&p.etcd, Duration::from_secs(30))
                    .await?
                    .endpoint
            }
            System::Keel => {
                let i = self.keel.wait_active(Duration::from_secs(30)).await?;
                self.keel.controller(i).address()
            }
            System::Echo => self
                .echo
                .as_ref()
                .map(|e| e.addr.clone())
                .context("no echo server")?,
        })
    }

    /// One level of `writers` on system `s` against `leader`.
    async fn level(
        &mut self,
        s: System,
        leader: &str,
        writers: usize,
        secs: f64,
        p: &CompareParams,
    ) -> anyhow::Result<Level> {
        let vb = p.value_bytes;
        let timeout = Duration::from_millis(p.request_timeout_ms);
        let max_ops = p.max_ops_per_level;
        match s {
            System::Zookeeper => {
                let seq_base = self.zk_seq_next;
                // Each writer's seq stays below max_ops / writers (or 1).
                self.zk_seq_next += (max_ops / writers as u64).max(1);
                let leader = leader.to_string();
                let shared = match p.connections {
                    Connections::PerWriter => None,
                    Connections::Shared => Some(
                        ZkSession::connect(&leader, ZK_SESSION_TIMEOUT_MS, timeout)
                            .await?
                            .into_shared(),
                    ),
                };
                let l = run_writers(s.name(), writers, secs, max_ops, |_| {
                    let leader = leader.clone();
                    let shared = shared.clone();
                    async move {
                        let session = match shared {
                            Some(s) => ZkConn::Shared(s),
                            None => ZkConn::Own(
                                ZkSession::connect(&leader, ZK_SESSION_TIMEOUT_MS, timeout).await?,
                            ),
                        };
                        Ok(ZkWriter {
                            session,
                            seq_base,
                            value_bytes: vb,
                        })
                    }
                })
                .await;
                if let Some(s) = shared {
                    let _ = s.close().await;
                }
                l
            }
            System::Etcd => {
                run_writers_on(
                    s.name(),
                    p.connections,
                    writers,
                    secs,
                    max_ops,
                    || async { Ok(etcd::kv_client(leader, timeout).await?) },
                    |client| async move {
                        Ok(EtcdWriter {
                            client,
                            endpoint: leader.to_string(),
                            value_bytes: vb,
                        })
                    },
                )
                .await
            }
            System::Keel => {
                let l = run_level(
                    leader,
                    p.api,
                    p.connections,
                    writers,
                    secs,
                    max_ops,
                    move |w, s| set_config(TOPIC, format!("bench.k{w}"), value(w, s, vb)),
                )
                .await;
                self.keel.check_alive()?;
                l
            }
            System::Echo => {
                run_writers_on(
                    s.name(),
                    p.connections,
                    writers,
                    secs,
                    max_ops,
                    || cluster::connect(leader, timeout),
                    |channel| EchoWriter::open(channel, vb, timeout),
                )
                .await
            }
        }
    }

    /// One level with CPU accounting around it.
    async fn trial(
        &mut self,
        s: System,
        trial: usize,
        writers: usize,
        p: &CompareParams,
    ) -> anyhow::Result<Trial> {
        let leader = self.leader(s, p).await?;
        let load_avg_1m = probe::load_avg_1m();
        let before = self.sample();
        let t0 = Instant::now();
        let result = self
            .level(s, &leader, writers, p.level_secs, p)
            .await
            .map_err(|e| format!("{e:#}"));
        let wall_secs = t0.elapsed().as_secs_f64();
        let after = self.sample();
        if s == System::Keel {
            // A dead controller is fatal for Keel's figures.
            self.keel.check_alive()?;
        }
        Ok(Trial {
            trial,
            leader,
            result,
            wall_secs,
            server_cpu_secs: before.server_cpu(s, &after),
            client_cpu_secs: ticks_secs(before.client_ticks, after.client_ticks),
            machine_cpu_secs: ticks_secs(before.machine_ticks, after.machine_ticks),
            server_write_bytes: before.server_write_bytes(s, &after),
            idle_cpu_secs: System::ALL
                .into_iter()
                .filter(|&o| o != s && self.present(o))
                .filter_map(|o| Some((o.name(), before.server_cpu(o, &after)?)))
                .collect(),
            load_avg_1m,
        })
    }
}

/// The fixed description of the comparison (the `setup` JSON field).
fn setup_json(p: &CompareParams, sys: &Systems) -> Value {
    let peer = |peer: &Option<Peer>, flag: &str| match peer {
        None => json!({ "skipped": true, "reason": format!("no {flag} endpoints given") }),
        Some(x) => json!({
            "skipped": false,
            "endpoints": x.endpoints,
            "leader_at_start": x.leader,
            "version": x.version,
            "server_pids": x.pids,
        }),
    };
    let mut zk = peer(&sys.zk, "--zookeeper");
    let mut et = peer(&sys.etcd, "--etcd");
    zk["op"] = json!(format!(
        "create of the persistent znode {ZK_ROOT}/w<writer>-<seq> with a {}-byte value and the open ACL (one znode per partition state)",
        p.value_bytes
    ));
    let shared = p.connections == Connections::Shared;
    zk["connection"] = json!(format!(
        "{}, to the leader found with `srvr` (Mode: leader); session timeout {ZK_SESSION_TIMEOUT_MS} ms; client: this crate's jute client on tokio",
        if shared {
            "one ZooKeeper session (one TCP connection, TCP_NODELAY) shared by all writers, their requests pipelined in order and those waiting together sent in one write, replies matched by order and xid"
        } else {
            "one ZooKeeper session (own TCP connection, TCP_NODELAY) per writer"
        }
    ));
    zk["durability"] = json!("server defaults: forceSync=yes, the transaction log is fsynced before a proposal is acknowledged, a quorum of 2 acknowledges each write");
    et["op"] = json!(format!(
        "KV.Put of {ZK_ROOT}/w<writer> with a {}-byte value (one Raft entry, a new revision per op)",
        p.value_bytes
    ));
    et["connection"] = json!(format!(
        "{} to the leader's client URL, found with Maintenance.Status (leader == header.member_id); client: tonic with the etcdserverpb messages in proto/etcd.proto",
        if shared {
            "one gRPC (HTTP/2) connection shared by all writers (each Put its own HTTP/2 stream on it)"
        } else {
            "one gRPC (HTTP/2) connection per writer"
        }
    ));
    et["durability"] = json!("server defaults: the WAL is fsynced before a Raft entry is acknowledged, a quorum of 2 acknowledges each write");
    json!({
        "order": "trial t: for each writer level: zookeeper, etcd, keel, grpc-echo (systems interleaved so machine noise hits all alike)",
        "warmup": format!("{} s per system at {} writers before the first trial, not recorded", p.warmup_secs, p.writers.iter().max().copied().unwrap_or(1)),
        "connections": p.connections.name(),
        "load_generator": if shared {
            "this process (the `keel` binary, tokio multi-thread runtime): one task per writer, one op in flight each, all writers of a system on one shared persistent connection; the same loop, value generator, timer and error budget for every system"
        } else {
            "this process (the `keel` binary, tokio multi-thread runtime): one task per writer, its own persistent connection, one op in flight; the same loop, value generator, timer and error budget for every system"
        },
        "latency": "p50/p99 pooled over the samples of every successful trial; ops/s is the median of the trials' ops/s",
        "cpu": "utime+stime of the server processes of the system (three; one for grpc-echo) (from /proc/<pid>/stat, 100 ticks/s) and of this load generator, over the whole level call (session/connection set-up and close included), as % of one core; other_cpu_pct is the rest of the machine's busy time (/proc/stat) in that window, idle_systems_cpu_pct the part of it the idle systems used, outside_cpu_pct what remains: work outside the comparison, i.e. noise; server_write_bytes is write_bytes of /proc/<pid>/io summed over the system's servers",
        "zookeeper": zk,
        "etcd": et,
        "keel": {
            "skipped": false,
            "addresses": sys.keel.controller_addrs(),
            "version": env!("CARGO_PKG_VERSION"),
            "flags": KEEL_FLAGS,
            "op": format!("IncrementalAlterConfigs SET of bench.k<writer> on topic {TOPIC} with a {}-byte value (one TopicConfig record), the `commit` workload", p.value_bytes),
            "connection": if shared {
                "one persistent gRPC (HTTP/2) connection to the active controller shared by all writers"
            } else {
                "one persistent gRPC (HTTP/2) connection per writer to the active controller"
            },
            "api": match (p.api, shared) {
                (KeelApi::Session, false) => "session: one AdminService.Write stream per writer (a pipelined write session; each op one message each way, one op in flight)",
                (KeelApi::Session, true) => "session: one AdminService.Write stream shared by all writers (each op one message each way, tagged with its id; those waiting together travel together)",
                (KeelApi::Unary, _) => "unary: one IncrementalAlterConfigs call per op",
            },
            "durability": "the Raft log is flushed (sled flush, fsync) before an append is acknowledged; a quorum of 2 acknowledges each write",
        },
        "grpc-echo": match &sys.echo {
            None => json!({ "skipped": true, "reason": "--no-echo" }),
            Some(e) => json!({
                "skipped": false,
                "addresses": [e.addr],
                "version": env!("CARGO_PKG_VERSION"),
                "op": format!("one {}-byte message sent on the writer's bidirectional gRPC stream (EchoService.Echo) and the same message received back", p.value_bytes),
                "connection": if shared {
                    "one persistent gRPC (HTTP/2) connection shared by all writers, a stream per writer"
                } else {
                    "one persistent gRPC (HTTP/2) connection and stream per writer"
                },
                "server": "one process of this binary (`keel bench-echo-server`, tonic, the controllers' runtime and socket options); the response stream is the request stream: no consensus, no disk",
                "durability": "none: the transport ceiling, what one gRPC round trip per op allows on this machine",
            }),
        },
        "servers_started_by": std::env::var("KEEL_BENCH_COMPARE_SETUP").ok().map(|s| s.lines().map(str::to_string).collect::<Vec<_>>()),
    })
}

/// Runs the scenario.
pub async fn run(env: &Env, p: &CompareParams) -> anyhow::Result<Report> {
    validate(p)?;
    let started_at = unix_now();
    progress!("compare: probing the disk");
    let disk = disk_probe(&std::env::temp_dir());
    let zk = if p.zookeeper.is_empty() {
        progress!("compare: no --zookeeper endpoints, ZooKeeper is skipped");
        None
    } else {
        let z = setup_zookeeper(p).await?;
        progress!(
            "compare: ZooKeeper {} leader {} (server pids {:?})",
            z.version,
            z.leader,
            z.pids
        );
        Some(z)
    };
    let et = if p.etcd.is_empty() {
        progress!("compare: no --etcd endpoints, etcd is skipped");
        None
    } else {
        let e = setup_etcd(p).await?;
        progress!(
            "compare: etcd {} leader {} (server pids {:?})",
            e.version,
            e.leader,
            e.pids
        );
        Some(e)
    };

    progress!("compare: starting a 3-controller Keel quorum on 127.0.{KEEL_SUBNET}.11-13");
    let mut c = cluster::start(cluster::spec(env, KEEL_SUBNET, &KEEL_FLAGS))?;
    c.wait_active(Duration::from_secs(60)).await?;
    let client = c.client(Duration::from_secs(10), Duration::from_secs(30));
    cluster::register_stand_in(&client, 1).await?;
    admin::create_topic(&client, TOPIC, 1, 1).await?;
    c.wait_converged(0, Duration::from_secs(30)).await?;
    let keel_pids: Vec<u32> = c.controllers().filter_map(|n| n.pid()).collect();
    let echo = if p.echo {
        let e = EchoServer::start(&env.exe, ECHO_IP)?;
        progress!(
            "compare: gRPC echo ceiling at {} (pid {:?})",
            e.addr,
            e.pids()
        );
        Some(e)
    } else {
        None
    };
    let mut sys = Systems {
        zk,
        etcd: et,
        keel: c,
        keel_pids,
        echo,
        zk_seq_next: 0,
    };
    let systems: Vec<System> = System::ALL
        .into_iter()
        .filter(|&s| sys.present(s))
        .collect();

    if p.warmup_secs > 0.0 {
        let w = p.writers.iter().max().copied().unwrap_or(1);
        for &s in &systems {
            progress!(
                "compare: warm-up {} at {w} writers for {} s",
                s.name(),
                p.warmup_secs
            );
            let leader = sys.leader(s, p).await?;
            sys.level(s, &leader, w, p.warmup_secs, p)
                .await
                .with_context(|| format!("warm-up of {}", s.name()))?;
        }
    }

    // results[level][system] = trials
    let mut results: Vec<Vec<Vec<Trial>>> = p
        .writers
        .iter()
        .map(|_| System::ALL.iter().map(|_| Vec::new()).collect())
        .collect();
    for t in 0..p.trials {
        for (li, &w) in p.writers.iter().enumerate() {
            for &s in &systems {
                progress!(
                    "compare: trial {}/{}, {} at {w} writers for {} s",
                    t + 1,
                    p.trials,
                    s.name(),
                    p.level_secs
                );
                let tr = sys.trial(s, t, w, p).await?;
                if let Err(e) = &tr.result {
                    progress!("compare: {} trial {} failed: {e}", s.name(), t + 1);
                }
                let si = System::ALL.iter().position(|x| *x == s).unwrap_or(0);
                results[li][si].push(tr);
            }
        }
    }
    let setup = setup_json(p, &sys);
    drop(sys);

    let mut levels_json = Vec::new();
    let mut ratios = Vec::new();
    for (li, &w) in p.writers.iter().enumerate() {
        let mut per = serde_json::Map::new();
        for (si, s) in System::ALL.iter().enumerate() {
            let v = if systems.contains(s) {
                let mut v = summarize(&results[li][si]);
                v["trials"] = Value::Array(results[li][si].iter().map(Trial::json).collect());
                v
            } else {
                json!({ "skipped": true })
            };
            per.insert(s.name().to_string(), v);
        }
        let ops = |s: &str| per.get(s).and_then(|v| v["ops_per_s"].as_f64());
        let mut r = json!({ "writers": w });
        for s in System::ALL {
            if let Some(key) = s.ratio_key() {
                r[key] = json!(ratio(ops("keel"), ops(s.name())).map(r3));
            }
        }
        ratios.push(r.clone());
        let mut l = json!({ "writers": w });
        for (k, v) in per {
            l[k] = v;
        }
        for key in System::ALL.iter().filter_map(|s| s.ratio_key()) {
            l[key] = r[key].clone();
        }
        levels_json.push(l);
    }

    let json = json!({
        "scenario": "compare",
        "started_at_unix": started_at,
        "parameters": {
            "nodes_per_system": 3,
            "writers": p.writers,
            "level_secs": p.level_secs,
            "trials": p.trials,
            "value_bytes": p.value_bytes,
            "warmup_secs": p.warmup_secs,
            "max_ops_per_level": p.max_ops_per_level,
            "request_timeout_ms": p.request_timeout_ms,
            "zookeeper": p.zookeeper,
            "etcd": p.etcd,
            "echo": p.echo,
        },
        "setup": setup,
        "levels": levels_json,
        "ratios": ratios,
        "machine": machine(),
        "disk_probe": disk,
    });
    let table = table(p, &json);
    let summary = summary_line(&json);
    Ok(Report {
        scenario: "compare",
        json,
        table,
        summary,
    })
}

fn table(p: &CompareParams, j: &Value) -> String {
    let version = |s: &str| {
        let v = &j["setup"][s];
        if v["skipped"].as_bool().unwrap_or(true) {
            format!("{s}: skipped ({})", cell(&v["reason"]))
        } else {
            format!(
                "{s} {} (leader {})",
                cell(&v["version"]),
                cell(&v["leader_at_start"])
            )
        }
    };
    let mut t = format!(
        "compare ({}-byte durable writes, 3 nodes each, {} trial(s) x {} s per level, {} connections; ops/s = median of trials, p50/p99 pooled)\n",
        p.value_bytes, p.trials, p.level_secs, p.connections.name()
    );
    t += &format!(
        "{}; {}; keel {}",
        version("zookeeper"),
        version("etcd"),
        cell(&j["setup"]["keel"]["version"])
    );
    let echo = &j["setup"]["grpc-echo"];
    if !echo["skipped"].as_bool().unwrap_or(true) {
        t += &format!("; grpc-echo at {}", cell(&echo["addresses"][0]));
    }
    t += "\n";
    let row = |c: [&str; 10]| {
        let line = format!(
            "{:>7} {:<9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>7}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9]
        );
        // Keel's rows have no ratio: no trailing blanks.
        line.trim_end().to_string() + "\n"
    };
    t += &row([
        "writers",
        "system",
        "ops/s",
        "p50 ms",
        "p99 ms",
        "srv CPU%",
        "cli CPU%",
        "srv us/op",
        "disk B/op",
        "keel ÷",
    ]);
    let levels = j["levels"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let mut errors = Vec::new();
    for l in levels {
        for s in System::ALL {
            let v = &l[s.name()];
            if v["skipped"].as_bool().unwrap_or(false) {
                continue;
            }
            if v["errors"].as_u64().unwrap_or(0) > 0 || v["ok_trials"] != json!(p.trials) {
                errors.push(format!(
                    "{} at {} writers: {} failed ops, {} of {} trials ok",
                    s.name(),
                    cell(&l["writers"]),
                    cell(&v["errors"]),
                    cell(&v["ok_trials"]),
                    p.trials
                ));
            }
            let r = s.ratio_key().map(|k| cell(&l[k])).unwrap_or_default();
            let disk = v["server_write_bytes_per_op"]
                .as_f64()
                .map(|b| format!("{b:.0}"))
                .unwrap_or_else(|| "-".into());
            t += &row([
                &cell(&l["writers"]),
                s.name(),
                &cell(&v["ops_per_s"]),
                &cell(&v["p50_ms"]),
                &cell(&v["p99_ms"]),
                &cell(&v["server_cpu_pct"]),
                &cell(&v["client_cpu_pct"]),
                &cell(&v["server_cpu_us_per_op"]),
                &disk,
                &r,
            ]);
        }
    }
    t += &disk_probe_line(&j["disk_probe"]);
    t += "keel ÷ = Keel ops/s divided by that system's ops/s (medians of this run); CPU % of one core (srv = the system's 3 processes, or the echo server's 1, cli = this load generator); srv us/op = server CPU per op; disk B/op = bytes the servers wrote to storage per op; grpc-echo = the transport ceiling (one gRPC round trip per op, no consensus, no disk)\n";
    for e in errors {
        t += &format!("errors: {e}\n");
    }
    // Noise: what the idle systems and everything outside the comparison
    // used while a level ran.
    let (mut outside, mut load) = (Vec::new(), Vec::new());
    let mut idle: Vec<(&str, Vec<f64>)> =
        System::ALL.iter().map(|s| (s.name(), Vec::new())).collect();
    for l in levels {
        for s in System::ALL {
            for tr in l[s.name()]["trials"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
            {
                outside.extend(tr["outside_cpu_pct"].as_f64());
                load.extend(tr["load_avg_1m"].as_f64());
                for (name, v) in idle.iter_mut() {
                    v.extend(tr["idle_systems_cpu_pct"][*name].as_f64());
                }
            }
        }
    }
    let idle: Vec<String> = idle
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(n, v)| format!("{n} {:.1}%", median(v)))
        .collect();
    if !idle.is_empty() {
        t += &format!(
            "idle CPU of each system while another ran (median): {}\n",
            idle.join(", ")
        );
    }
    if !outside.is_empty() && !load.is_empty() {
        t += &format!(
            "noise: CPU used outside the comparison during a level: median {:.0}%, max {:.0}% of one core; 1-min load average {:.1}..{:.1} on {} cores\n",
            median(&outside),
            outside.iter().copied().fold(0.0, f64::max),
            load.iter().copied().fold(f64::INFINITY, f64::min),
            load.iter().copied().fold(0.0, f64::max),
            cell(&j["machine"]["nproc"])
        );
    }
    t
}

fn summary_line(j: &Value) -> String {
    let Some(l) = j["levels"].as_array().and_then(|v| v.last()) else {
        return "compare: no levels".into();
    };
    let ops = |s: &str| {
        l[s]["ops_per_s"]
            .as_f64()
            .map(|v| format!("{v:.0}"))
            .unwrap_or_else(|| "-".into())
    };
    let mut line = format!(
        "compare at {} writers: keel {} ops/s, zookeeper {} (keel ÷ {}), etcd {} (keel ÷ {})",
        cell(&l["writers"]),
        ops("keel"),
        ops("zookeeper"),
        cell(&l["keel_vs_zookeeper"]),
        ops("etcd"),
        cell(&l["keel_vs_etcd"]),
    );
    if l["grpc-echo"].is_object() && !l["grpc-echo"]["skipped"].as_bool().unwrap_or(false) {
        line += &format!(
            ", gRPC echo ceiling {} (keel ÷ {})",
            ops("grpc-echo"),
            cell(&l["keel_vs_grpc_echo"])
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok_trial(trial: usize, ops: u64, secs: f64, lat: Vec<f64>, cpu: f64) -> Trial {
        Trial {
            trial,
            leader: "l".into(),
            result: Ok(Level {
                writers: 1,
                ops,
                errors: 0,
                secs,
                lat_ms: lat,
                first_error: None,
            }),
            wall_secs: secs,
            server_cpu_secs: Some(cpu),
            client_cpu_secs: None,
            machine_cpu_secs: None,
            server_write_bytes: Some(ops * 500),
            idle_cpu_secs: Vec::new(),
            load_avg_1m: None,
        }
    }

    #[test]
    fn sample_arrays_follow_the_order_of_all_systems() {
        for (i, s) in System::ALL.iter().enumerate() {
            assert_eq!(Sample::index(*s), i, "{s:?}");
        }
    }

    #[test]
    fn every_system_but_keel_gets_a_ratio_and_the_ceiling_shows_in_the_summary() {
        for s in System::ALL {
            assert_eq!(s.ratio_key().is_none(), s == System::Keel, "{s:?}");
        }
        assert_eq!(System::Echo.servers(), 1);
        let level = |echo: Value| {
            json!({ "levels": [{
                "writers": 64,
                "keel": { "ops_per_s": 12000.0 },
                "zookeeper": { "ops_per_s": 6000.0 },
                "etcd": { "ops_per_s": 3000.0 },
                "grpc-echo": echo,
                "keel_vs_zookeeper": 2.0,
                "keel_vs_etcd": 4.0,
                "keel_vs_grpc_echo": 0.25,
            }]})
        };
        let with = summary_line(&level(json!({ "ops_per_s": 48000.0, "ok_trials": 3 })));
        assert!(
            with.ends_with("gRPC echo ceiling 48000 (keel ÷ 0.25)"),
            "{with}"
        );
        let without = summary_line(&level(json!({ "skipped": true })));
        assert!(!without.contains("echo"), "{without}");
    }

    #[test]
    fn ratio_is_keel_over_peer_and_absent_without_both() {
        assert_eq!(ratio(Some(2000.0), Some(1000.0)), Some(2.0));
        assert_eq!(ratio(Some(500.0), Some(1000.0)), Some(0.5));
        assert_eq!(ratio(None, Some(1000.0)), None);
        assert_eq!(ratio(Some(1.0), None), None);
        assert_eq!(ratio(Some(1.0), Some(0.0)), None);
    }

    #[test]
    fn summary_takes_the_median_of_trials_and_pools_latencies() {
        let trials = vec![
            ok_trial(0, 1000, 1.0, vec![1.0; 10], 0.5),
            ok_trial(1, 3000, 1.0, vec![3.0; 10], 0.9),
            ok_trial(2, 2000, 1.0, vec![2.0; 10], 0.7),
            Trial {
                trial: 3,
                leader: "l".into(),
                result: Err("down".into()),
                wall_secs: 1.0,
                server_cpu_secs: None,
                client_cpu_secs: None,
                machine_cpu_secs: None,
                server_write_bytes: None,
                idle_cpu_secs: Vec::new(),
                load_avg_1m: None,
            },
        ];
        let s = summarize(&trials);
        assert_eq!(s["ok_trials"], 3);
        assert_eq!(s["ops_per_s"].as_f64(), Some(2000.0));
        assert_eq!(s["ops_per_s_min"].as_f64(), Some(1000.0));
        assert_eq!(s["ops_per_s_max"].as_f64(), Some(3000.0));
        // 30 pooled samples: 10 of each; p50 is the 15th, p99 the 30th.
        assert_eq!(s["p50_ms"].as_f64(), Some(2.0));
        assert_eq!(s["p99_ms"].as_f64(), Some(3.0));
        assert_eq!(s["server_cpu_pct"].as_f64(), Some(70.0));
        // 0.7 s of CPU for 2000 ops.
        assert_eq!(s["server_cpu_us_per_op"].as_f64(), Some(350.0));
        assert_eq!(s["client_cpu_pct"], Value::Null);
        assert_eq!(summarize(&trials[3..])["ops_per_s"], Value::Null);
    }

    #[test]
    fn other_cpu_is_what_the_machine_used_beyond_server_and_client() {
        let mut t = ok_trial(0, 100, 1.0, vec![1.0], 0.6);
        t.client_cpu_secs = Some(0.2);
        t.machine_cpu_secs = Some(1.1);
        assert_eq!(t.other_cpu_secs().map(r3), Some(0.3));
        assert_eq!(t.json()["other_cpu_pct"].as_f64(), Some(30.0));
        t.idle_cpu_secs = vec![("etcd", 0.1)];
        assert_eq!(t.outside_cpu_secs().map(r3), Some(0.2));
        assert_eq!(
            t.json()["idle_systems_cpu_pct"]["etcd"].as_f64(),
            Some(10.0)
        );
        assert_eq!(t.json()["server_write_bytes_per_op"].as_f64(), Some(500.0));
        t.machine_cpu_secs = Some(0.5);
        assert_eq!(t.other_cpu_secs(), Some(0.0));
        assert_eq!(t.outside_cpu_secs(), Some(0.0));
    }

    #[test]
    fn parameters_are_checked_before_anything_starts() {
        let ok = CompareParams {
            etcd: vec!["http://127.0.22.1:2379".into()],
            ..CompareParams::default()
        };
        assert!(validate(&ok).is_ok());
        assert!(matches!(
            validate(&CompareParams::default()),
            Err(CompareError::NoPeers)
        ));
        for bad in [
            CompareParams {
                trials: 0,
                ..ok.clone()
            },
            CompareParams {
                writers: vec![],
                ..ok.clone()
            },
            CompareParams {
                writers: vec![1, 0],
                ..ok.clone()
            },
            CompareParams {
                level_secs: 0.0,
                ..ok.clone()
            },
            CompareParams {
                level_secs: f64::NAN,
                ..ok.clone()
            },
            CompareParams {
                value_bytes: 0,
                ..ok.clone()
            },
        ] {
            assert!(matches!(validate(&bad), Err(CompareError::BadParams(_))));
        }
    }
}
