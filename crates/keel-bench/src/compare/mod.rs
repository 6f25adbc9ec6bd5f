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
//! ZooKeeper and etcd are started and stopped by `scripts/bench-compare.sh`
//! (ZooKeeper reached through the `zookeeper-client` crate, etcd through
//! tonic: see `etcd.rs` for why not `etcd-client`); Keel is started here on
//! 127.0.20.11-13.
//!
//! The fourth row, `grpc-echo`, is the transport ceiling: a gRPC server
//! (a process of this binary on 127.0.23.1) that sends every message of a
//! stream straight back, driven by the same writers with the same values.
//! It does no consensus and touches no disk, so its ops/s is what one gRPC
//! round trip per op allows on this machine at that concurrency; Keel's
//! ratio to it (`keel_vs_grpc_echo`) is the share of that ceiling Keel
//! reaches while committing every op durably on a quorum.

//!
//! The story: set up every system (a [`System`] each), warm each up, run
//! the trials ([`trial::measure`] times one level of one system with the
//! CPU and disk accounting around it), then report ([`report`]).

mod etcd;
mod report;
mod systems;
mod trial;
mod zookeeper;

use anyhow::Context;

use self::systems::{Echo, Keel, System};
use self::trial::Trial;
use crate::commit::KeelApi;
use crate::load::Connections;
use crate::stats::{disk_probe, unix_now};
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
    /// Also measure Keel over mutual TLS (`keel-tls`: a second quorum,
    /// right after `keel` in every trial) and compare it with plaintext.
    pub tls: bool,
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
            tls: false,
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
}

/// Parent of every znode (and prefix of every etcd key) the bench writes.
const ZK_ROOT: &str = "/keel-bench";

/// The systems, in the order they run inside a level (the order is also
/// their index in per-system arrays).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Kind {
    Zookeeper,
    Etcd,
    Keel,
    /// Keel over mutual TLS (with `--tls`).
    KeelTls,
    /// The transport ceiling: a gRPC echo server, no consensus, no disk.
    Echo,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Zookeeper,
        Kind::Etcd,
        Kind::Keel,
        Kind::KeelTls,
        Kind::Echo,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Zookeeper => "zookeeper",
            Kind::Etcd => "etcd",
            Kind::Keel => "keel",
            Kind::KeelTls => "keel-tls",
            Kind::Echo => "grpc-echo",
        }
    }

    /// Server processes the system runs.
    pub fn servers(self) -> usize {
        match self {
            Kind::Echo => 1,
            _ => 3,
        }
    }

    /// JSON key of Keel's ratio to this system (`None` for Keel, over
    /// plaintext or TLS: TLS ÷ plaintext is in the level's `tls` field).
    pub fn ratio_key(self) -> Option<&'static str> {
        match self {
            Kind::Zookeeper => Some("keel_vs_zookeeper"),
            Kind::Etcd => Some("keel_vs_etcd"),
            Kind::Keel | Kind::KeelTls => None,
            Kind::Echo => Some("keel_vs_grpc_echo"),
        }
    }

    /// Position in per-system arrays (the `ALL` order, which the
    /// discriminants follow: see the test).
    pub fn index(self) -> usize {
        self as usize
    }

    /// Why the system is left out when it is not set up.
    fn skipped_reason(self) -> &'static str {
        match self {
            Kind::Zookeeper => "no --zookeeper endpoints given",
            Kind::Etcd => "no --etcd endpoints given",
            Kind::Keel => "never",
            Kind::KeelTls => "no --tls",
            Kind::Echo => "--no-echo",
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

pub(crate) fn validate(p: &CompareParams) -> Result<(), CompareError> {
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

/// Runs the scenario.
pub async fn run(env: &Env, p: &CompareParams) -> anyhow::Result<Report> {
    validate(p)?;
    let started_at = unix_now();
    progress!("compare: probing the disk");
    let disk = disk_probe(&std::env::temp_dir());

    // Set up: every system that is asked for, in the order they run.
    let mut systems: Vec<Box<dyn System>> = Vec::new();
    if p.zookeeper.is_empty() {
        progress!("compare: no --zookeeper endpoints, ZooKeeper is skipped");
    } else {
        systems.push(Box::new(zookeeper::Zookeeper::set_up(p).await?));
    }
    if p.etcd.is_empty() {
        progress!("compare: no --etcd endpoints, etcd is skipped");
    } else {
        systems.push(Box::new(etcd::Etcd::set_up(p).await?));
    }
    systems.push(Box::new(Keel::set_up(env, p, false).await?));
    if p.tls {
        systems.push(Box::new(Keel::set_up(env, p, true).await?));
    }
    if p.echo {
        systems.push(Box::new(Echo::set_up(env, p)?));
    }
    for s in &systems {
        progress!(
            "compare: {} ready (server pids {:?})",
            s.kind().name(),
            s.pids()
        );
    }

    // Warm up: each system at the largest writer count, not recorded.
    if p.warmup_secs > 0.0 {
        let w = p.writers.iter().max().copied().unwrap_or(1);
        for s in systems.iter_mut() {
            let name = s.kind().name();
            progress!(
                "compare: warm-up {name} at {w} writers for {} s",
                p.warmup_secs
            );
            let leader = s.leader().await?;
            s.level(&leader, w, p.warmup_secs)
                .await
                .with_context(|| format!("warm-up of {name}"))?;
        }
    }

    // Load and measure: results[level][kind index] = trials, the systems
    // interleaved inside every trial.
    let mut results: Vec<Vec<Vec<Trial>>> = p
        .writers
        .iter()
        .map(|_| Kind::ALL.iter().map(|_| Vec::new()).collect())
        .collect();
    for t in 0..p.trials {
        for (li, &w) in p.writers.iter().enumerate() {
            for i in 0..systems.len() {
                let kind = systems[i].kind();
                progress!(
                    "compare: trial {}/{}, {} at {w} writers for {} s",
                    t + 1,
                    p.trials,
                    kind.name(),
                    p.level_secs
                );
                let tr = trial::measure(&mut systems, i, t, w, p.level_secs).await?;
                if let Err(e) = &tr.result {
                    progress!("compare: {} trial {} failed: {e}", kind.name(), t + 1);
                }
                results[li][kind.index()].push(tr);
            }
        }
    }

    // Report.
    let mut setup = report::setup_json(p, &systems);
    for s in systems.iter_mut() {
        let name = s.kind().name();
        if setup[name].is_object() {
            setup[name]["leadership_changes"] = s.leadership_changes().await;
        }
    }
    drop(systems);
    Ok(report::report(p, started_at, setup, &results, disk))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_arrays_follow_the_order_of_all_systems() {
        for (i, s) in Kind::ALL.iter().enumerate() {
            assert_eq!(s.index(), i, "{s:?}");
        }
        // Keel over TLS runs right after Keel over plaintext.
        assert_eq!(Kind::KeelTls.index(), Kind::Keel.index() + 1);
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
