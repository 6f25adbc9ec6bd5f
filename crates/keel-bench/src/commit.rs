//! Scenario `commit`: durable commit throughput of the 3-node quorum with
//! small (~100-byte) metadata records.
//!
//! Each op is one IncrementalAlterConfigs SET of `bench.k<writer>` with a
//! 100-byte value (it changes every op, so every op is one TopicConfig
//! record). Writers are tokio tasks, each with its own persistent
//! connection to the active controller. The bulk level sets 1,000 keys per
//! request (1,000 records in one Raft entry).

use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_metadata::{MetadataRecord, RecordBatch, TopicId};
use keel_proto::pb;
use keel_proto::pb::admin_service_client::AdminServiceClient;
use keel_proto::pb::write_request::Op;
use keel_proto::pb::write_response::Result as Answer;
use keel_proto::session::{SharedSession, WriteSession};
use keel_tls::Transport;
use serde_json::{json, Value};
use tonic::transport::Channel;

use crate::ceiling::{ceiling_line, storage_ceiling, CeilingParams};
use keel_testkit::admin::{self, alter_ok, set_config};
use keel_testkit::{probe, Cluster};

use crate::cluster::{self, connect_over, value};
use crate::load::{run_writers, Connections, Level, Writer};
use crate::stats::{
    cell, disk_probe, disk_probe_line, latency_json, machine, median, percentile, r1, r3, unix_now,
};
use crate::{progress, Env, Report};

/// Parameters of the `commit` scenario.
#[derive(Clone, Debug)]
pub struct CommitParams {
    /// Concurrent writers per level.
    pub writers: Vec<usize>,
    /// Wall time per level.
    pub level_secs: f64,
    /// Upper bound on ops per level (all writers together).
    pub max_ops_per_level: u64,
    /// Bytes of each config value.
    pub value_bytes: usize,
    /// Keys per request at the bulk level.
    pub bulk_keys: usize,
    /// Writers at the bulk level, each with one request in flight on its
    /// own keys.
    pub bulk_writers: usize,
    /// Wall time of the bulk level.
    pub bulk_secs: f64,
    /// Also time one writer through `ControllerClient` (a connection per call).
    pub compare_client: bool,
    /// How Keel writers send their ops.
    pub api: KeelApi,
    /// Whether writers share one connection.
    pub connections: Connections,
    /// Seconds for each of the two storage ceilings (sled, plain file), run
    /// after the cluster has stopped; 0 skips them.
    pub storage_ceiling_secs: f64,
    /// Also compare Keel over mutual TLS with plaintext: a second quorum
    /// speaking TLS, and for every writer count `tls_rounds` rounds of one
    /// plaintext and one TLS level each (see [`crate::tls`]).
    pub tls: bool,
    /// Rounds per writer count of the TLS comparison.
    pub tls_rounds: usize,
}

/// How a Keel writer sends its ops to the active controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeelApi {
    /// `AdminService.Write`: one pipelined session per writer, each op a
    /// message on it.
    Session,
    /// One unary `IncrementalAlterConfigs` call per op.
    Unary,
}

impl KeelApi {
    pub fn name(self) -> &'static str {
        match self {
            KeelApi::Session => "session",
            KeelApi::Unary => "unary",
        }
    }
}

impl Default for CommitParams {
    fn default() -> Self {
        Self {
            writers: vec![1, 16, 64],
            level_secs: 10.0,
            max_ops_per_level: 2_000_000,
            value_bytes: 100,
            bulk_keys: 1_000,
            bulk_writers: 1,
            bulk_secs: 10.0,
            compare_client: true,
            api: KeelApi::Session,
            connections: Connections::PerWriter,
            storage_ceiling_secs: 4.0,
            tls: false,
            tls_rounds: 3,
        }
    }
}

const TOPIC: &str = "bench-commit";
const BULK_TOPIC: &str = "bench-bulk";
/// Flags of every controller of the scenario.
const FLAGS: [&str; 2] = ["--session-timeout-ms", "600000"];
/// Subnets of the two quorums `--tls` compares: TLS on 127.0.5.11-13,
/// plaintext on 127.0.8.11-13.
const TLS_SUBNET: u8 = 5;
const TLS_PLAIN_SUBNET: u8 = 8;
/// How the TLS comparison orders its levels.
const TLS_ORDER: &str = "after the scenario's own cluster has stopped: two fresh quorums, one plaintext and one TLS, are started side by side and warmed up alike (one untimed level each at the largest writer count); then for each writer count, rounds of one plaintext and one TLS level (plaintext first in even rounds, TLS first in odd ones), so machine noise hits both alike; each side's figures are the medians of its rounds";

/// How one Keel writer reaches the active controller.
enum Conn {
    /// Unary calls on a kept-open connection.
    Unary(AdminServiceClient<Channel>),
    /// A `Write` session on its own connection.
    Session(WriteSession),
    /// A share of one `Write` session all writers use.
    Shared(SharedSession),
}

impl Conn {
    /// Another writer's handle on this connection, if writers can share it
    /// (a `WriteSession` answers one caller at a time, so it cannot).
    fn share(&self) -> Option<Conn> {
        match self {
            Conn::Unary(c) => Some(Conn::Unary(c.clone())),
            Conn::Shared(s) => Some(Conn::Shared(s.clone())),
            Conn::Session(_) => None,
        }
    }
}

/// A Keel writer: one connection to the active controller, one op in
/// flight; each op is the request `make(writer, seq)`.
struct KeelWriter<F> {
    conn: Conn,
    make: Arc<F>,
}

impl<F> Writer for KeelWriter<F>
where
    F: Fn(usize, u64) -> pb::IncrementalAlterConfigsRequest + Send + Sync + 'static,
{
    async fn op(&mut self, writer: usize, seq: u64) -> Result<(), String> {
        let req = (self.make)(writer, seq);
        let r = match &mut self.conn {
            Conn::Unary(c) => c
                .incremental_alter_configs(req)
                .await
                .map(tonic::Response::into_inner)
                .map_err(|s| s.to_string())?,
            Conn::Session(s) => match s.call(Op::IncrementalAlterConfigs(req)).await {
                Ok(Answer::IncrementalAlterConfigs(r)) => r,
                Ok(other) => return Err(format!("{other:?}")),
                Err(e) => return Err(e.to_string()),
            },
            Conn::Shared(s) => match s.call(Op::IncrementalAlterConfigs(req)).await {
                Ok(Answer::IncrementalAlterConfigs(r)) => r,
                Ok(other) => return Err(format!("{other:?}")),
                Err(e) => return Err(e.to_string()),
            },
        };
        if alter_ok(&r) {
            Ok(())
        } else {
            Err(format!("{r:?}"))
        }
    }

    async fn finish(self) {}
}

/// Runs `writers` Keel writers against `leader` for `secs` (or `max_ops`);
/// each op is the request `make(writer, seq)`, sent through `api` on a
/// connection per writer or one they share, over `transport`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_level<F>(
    leader: &str,
    transport: &Transport,
    api: KeelApi,
    connections: Connections,
    writers: usize,
    secs: f64,
    max_ops: u64,
    make: F,
) -> anyhow::Result<Level>
where
    F: Fn(usize, u64) -> pb::IncrementalAlterConfigsRequest + Send + Sync + 'static,
{
    let make = Arc::new(make);
    // The one connection (and session) shared writers use.
    let shared = match connections {
        Connections::PerWriter => None,
        Connections::Shared => {
            let ch = connect_over(transport, leader, Duration::from_secs(10)).await?;
            Some(match api {
                KeelApi::Session => Conn::Shared(SharedSession::open(ch).await?),
                KeelApi::Unary => Conn::Unary(AdminServiceClient::new(ch)),
            })
        }
    };
    let shared = &shared;
    run_writers("keel", writers, secs, max_ops, |_| {
        let make = make.clone();
        async move {
            let conn = match shared.as_ref().and_then(Conn::share) {
                Some(c) => c,
                None => {
                    let ch = connect_over(transport, leader, Duration::from_secs(10)).await?;
                    match api {
                        KeelApi::Session => Conn::Session(WriteSession::open(ch).await?),
                        KeelApi::Unary => Conn::Unary(AdminServiceClient::new(ch)),
                    }
                }
            };
            Ok(KeelWriter { conn, make })
        }
    })
    .await
}

/// CPU ticks used so far by the controllers (all three together) and by
/// this process, the load generator.
#[derive(Clone, Copy)]
struct CpuTicks {
    servers: Option<u64>,
    client: Option<u64>,
}

impl CpuTicks {
    fn now(c: &Cluster) -> Self {
        Self {
            servers: c.controllers_cpu_ticks(),
            client: probe::own_cpu_ticks(),
        }
    }

    /// `(servers, client)` CPU microseconds per record since `self`
    /// (`None` where /proc could not be read).
    fn per_record(self, after: CpuTicks, records: u64) -> (Option<f64>, Option<f64>) {
        let us = |b: Option<u64>, a: Option<u64>| {
            let ticks = a?.checked_sub(b?)?;
            (records > 0)
                .then(|| r1(ticks as f64 / probe::ticks_per_second() * 1e6 / records as f64))
        };
        (
            us(self.servers, after.servers),
            us(self.client, after.client),
        )
    }
}

/// The bulk level's request of writer `w`, op `s`: `keys` SETs of the
/// writer's own keys, each with a `vb`-byte value.
fn bulk_request(w: usize, s: u64, keys: usize, vb: usize) -> pb::IncrementalAlterConfigsRequest {
    pb::IncrementalAlterConfigsRequest {
        topics: vec![pb::AlterTopicConfig {
            topic: BULK_TOPIC.to_string(),
            ops: (0..keys)
                .map(|k| pb::AlterConfigOp {
                    key: bulk_key(w, keys, k),
                    value: value(k, s, vb),
                    op: pb::ConfigOp::Set as i32,
                })
                .collect(),
        }],
        validate_only: false,
    }
}

/// Key `k` of bulk writer `w`: each writer has its own range.
fn bulk_key(w: usize, keys: usize, k: usize) -> String {
    format!("bench.b{}", w * keys + k)
}

/// The bytes the log store writes for one bulk request's entry: the
/// `TopicConfig` records the controller decides for it, with a full-size
/// topic id and a term, leader and index as large as a long-lived
/// cluster's.
fn bulk_entry_bytes(p: &CommitParams) -> anyhow::Result<Vec<u8>> {
    let topic_id = TopicId(u128::MAX / 3);
    let records = (0..p.bulk_keys)
        .map(|k| MetadataRecord::TopicConfig {
            topic_id,
            key: bulk_key(0, p.bulk_keys, k),
            value: Some(value(k, 1_000_000, p.value_bytes)),
        })
        .collect();
    Ok(keel_raft::stored_entry_bytes(
        1_000,
        3,
        10_000_000,
        RecordBatch::new(records),
    )?)
}

/// CRC-32s of every stored entry on the cluster, at most: one when each of
/// the three nodes encodes it for its log and one when each reads it back.
const CHECKSUMS_PER_ENTRY: f64 = 6.0;

/// What the per-value CRC-32 (codec format 3) costs at the bulk level,
/// measured in this run: the checksum of one bulk entry's stored bytes,
/// timed here (median of 5 rounds of 200), as CPU per record on the whole
/// cluster (at most [`CHECKSUMS_PER_ENTRY`] per entry) and as a share of
/// the servers' CPU per record the bulk level just measured.
fn checksum_cost(p: &CommitParams, server_us_per_record: Option<f64>) -> anyhow::Result<Value> {
    let entry = bulk_entry_bytes(p)?;
    let rounds = 200u32;
    let mut per_entry_us = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let mut acc = 0u32;
        for _ in 0..rounds {
            acc ^= keel_raft::checksum(std::hint::black_box(&entry));
        }
        std::hint::black_box(acc);
        per_entry_us.push(t.elapsed().as_secs_f64() * 1e6 / f64::from(rounds));
    }
    let entry_us = median(&per_entry_us);
    let cluster_us_per_record = entry_us * CHECKSUMS_PER_ENTRY / p.bulk_keys.max(1) as f64;
    Ok(json!({
        "entry_bytes": entry.len(),
        "crc_us_per_entry": r3(entry_us),
        "crc_gb_per_s": r3(entry.len() as f64 / entry_us / 1e3),
        "checksums_per_entry_on_the_cluster_at_most": CHECKSUMS_PER_ENTRY,
        "cluster_cpu_us_per_record": r3(cluster_us_per_record),
        "share_of_server_cpu_per_record": server_us_per_record
            .filter(|s| *s > 0.0)
            .map(|s| r3(cluster_us_per_record / s)),
    }))
}

/// One level of the TLS comparison on `c` (plaintext or TLS, as its
/// transport is): the level's figures with the servers' CPU per op, and
/// its latencies; a failure is recorded, not returned.
async fn comparison_round(
    c: &mut Cluster,
    p: &CommitParams,
    writers: usize,
    round: usize,
) -> (Value, Vec<f64>) {
    let failed = |e: anyhow::Error| {
        (
            json!({ "round": round, "error": format!("{e:#}") }),
            Vec::new(),
        )
    };
    let leader = match c.wait_active(Duration::from_secs(30)).await {
        Ok(i) => c.controller(i).address(),
        Err(e) => return failed(e),
    };
    let c: &Cluster = c;
    let vb = p.value_bytes;
    let before = CpuTicks::now(c);
    let l = match run_level(
        &leader,
        c.transport(),
        p.api,
        p.connections,
        writers,
        p.level_secs,
        p.max_ops_per_level,
        move |w, s| set_config(TOPIC, format!("bench.k{w}"), value(w, s, vb)),
    )
    .await
    {
        Ok(l) => l,
        Err(e) => return failed(e),
    };
    let (server_us, client_us) = before.per_record(CpuTicks::now(c), l.ops);
    let j = json!({
        "round": round,
        "ops": l.ops,
        "errors": l.errors,
        "secs": r3(l.secs),
        "ops_per_s": r1(l.ops as f64 / l.secs),
        "p50_ms": r3(percentile(&l.lat_ms, 50.0)),
        "p99_ms": r3(percentile(&l.lat_ms, 99.0)),
        "server_cpu_us_per_op": server_us,
        "client_cpu_us_per_op": client_us,
        "first_error": l.first_error,
    });
    (j, l.lat_ms)
}

/// One side of the TLS comparison at one writer count: medians of its
/// successful rounds, latencies pooled over them, and every round.
fn side_json(rounds: Vec<Value>, lat_ms: &[f64]) -> Value {
    let ok: Vec<&Value> = rounds.iter().filter(|r| r.get("error").is_none()).collect();
    let med = |k: &str| {
        let v: Vec<f64> = ok.iter().filter_map(|r| r[k].as_f64()).collect();
        (!v.is_empty()).then(|| r1(median(&v)))
    };
    let pct = |q: f64| (!lat_ms.is_empty()).then(|| r3(percentile(lat_ms, q)));
    json!({
        "ok_rounds": ok.len(),
        "ops_per_s": med("ops_per_s"),
        "server_cpu_us_per_op": med("server_cpu_us_per_op"),
        "client_cpu_us_per_op": med("client_cpu_us_per_op"),
        "p50_ms": pct(50.0),
        "p99_ms": pct(99.0),
        "errors": ok.iter().filter_map(|r| r["errors"].as_u64()).sum::<u64>(),
        "rounds": rounds,
    })
}

/// `--tls`: starts a TLS quorum beside `plain` and measures both, their
/// levels interleaved ([`TLS_ORDER`]); one comparison per writer count.
async fn tls_comparison(env: &Env, p: &CommitParams) -> anyhow::Result<(Vec<Value>, Value)> {
    let mut sides = Vec::new();
    for (name, subnet, tls) in [
        ("plaintext", TLS_PLAIN_SUBNET, false),
        ("tls", TLS_SUBNET, true),
    ] {
        progress!(
            "commit: TLS comparison: starting a 3-controller {name} quorum on 127.0.{subnet}.11-13"
        );
        let c = cluster::start_with_topic(env, subnet, &FLAGS, tls, TOPIC).await?;
        sides.push((name, c));
    }
    let most = p.writers.iter().max().copied().unwrap_or(1);
    for (name, c) in sides.iter_mut() {
        progress!(
            "commit: TLS comparison: warm-up of the {name} quorum, {most} writers for {} s",
            p.level_secs
        );
        let (warm, _) = comparison_round(c, p, most, 0).await;
        if let Some(e) = warm.get("error") {
            anyhow::bail!("the {name} quorum's warm-up failed: {}", cell(e));
        }
    }
    let mut leadership = Vec::new();
    for (_, c) in &sides {
        leadership.push(cluster::Leadership::start(c).await);
    }
    let mut out = Vec::new();
    for &w in &p.writers {
        let mut rounds: [Vec<Value>; 2] = Default::default();
        let mut lat: [Vec<f64>; 2] = Default::default();
        for r in 0..p.tls_rounds {
            let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
            for side in order {
                let (name, c) = &mut sides[side];
                progress!(
                    "commit: TLS comparison: round {}/{}, {name} at {w} writers for {} s",
                    r + 1,
                    p.tls_rounds,
                    p.level_secs
                );
                let (j, l) = comparison_round(c, p, w, r).await;
                if let Some(e) = j.get("error") {
                    progress!(
                        "commit: TLS comparison: {name} round {} failed: {}",
                        r + 1,
                        cell(e)
                    );
                }
                c.check_alive()?;
                rounds[side].push(j);
                lat[side].extend(l);
            }
        }
        let [plain_rounds, tls_rounds] = rounds;
        out.push(crate::tls::comparison(
            w,
            side_json(plain_rounds, &lat[0]),
            side_json(tls_rounds, &lat[1]),
        ));
    }
    let mut changes = json!({});
    for ((name, c), l) in sides.iter().zip(&leadership) {
        changes[*name] = l.changes(c).await;
    }
    Ok((out, changes))
}

/// Runs the scenario.
pub async fn run(env: &Env, p: &CommitParams) -> anyhow::Result<Report> {
    let started_at = unix_now();
    progress!("commit: probing the disk");
    let disk = disk_probe(&std::env::temp_dir());
    progress!("commit: starting a 3-controller quorum on 127.0.1.11-13");
    let mut c = cluster::start(cluster::spec(env, 1, &FLAGS))?;
    let active = c.wait_active(Duration::from_secs(60)).await?;
    let leadership = cluster::Leadership::start(&c).await;
    let client = c.client(Duration::from_secs(10), Duration::from_secs(30));
    cluster::register_stand_in(&c, 1).await?;
    admin::create_topic(&client, TOPIC, 1, 1).await?;
    admin::create_topic(&client, BULK_TOPIC, 1, 1).await?;
    let leader = c.controller(active).address();
    progress!(
        "commit: active controller is node {} at {leader}",
        active + 1
    );
    c.wait_converged(0, Duration::from_secs(30)).await?;
    let disk_before = c.controllers_disk_bytes();

    let vb = p.value_bytes;
    let mut levels = Vec::new();
    let mut records = 0u64;
    let mut level_cpu = Vec::new();
    for &w in &p.writers {
        progress!("commit: {w} writers for {} s", p.level_secs);
        let before = CpuTicks::now(&c);
        let l = run_level(
            &leader,
            c.transport(),
            p.api,
            p.connections,
            w,
            p.level_secs,
            p.max_ops_per_level,
            move |w, s| set_config(TOPIC, format!("bench.k{w}"), value(w, s, vb)),
        )
        .await?;
        level_cpu.push(before.per_record(CpuTicks::now(&c), l.ops));
        c.check_alive()?;
        records += l.ops;
        levels.push(l);
    }

    progress!(
        "commit: bulk, {} writer(s) of {} keys per request, for {} s",
        p.bulk_writers,
        p.bulk_keys,
        p.bulk_secs
    );
    let keys = p.bulk_keys;
    let before = CpuTicks::now(&c);
    let bulk = run_level(
        &leader,
        c.transport(),
        p.api,
        p.connections,
        p.bulk_writers,
        p.bulk_secs,
        p.max_ops_per_level,
        move |w, s| bulk_request(w, s, keys, vb),
    )
    .await?;
    let bulk_cpu = before.per_record(CpuTicks::now(&c), bulk.ops * keys as u64);
    c.check_alive()?;
    records += bulk.ops * keys as u64;

    // Let the followers apply the tail, then measure the disk.
    c.wait_converged(0, Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let disk_after = c.controllers_disk_bytes();
    let disk_delta = disk_after.saturating_sub(disk_before);
    let per_record = disk_delta as f64 / records.max(1) as f64;

    let compare = if p.compare_client {
        progress!("commit: 1 writer through ControllerClient (a new connection per call) for 3 s");
        let cc = c.client(Duration::from_secs(10), Duration::from_secs(30));
        let mut lat = Vec::new();
        let start = Instant::now();
        let mut s = 0u64;
        while start.elapsed() < Duration::from_secs(3) && s < 100_000 {
            let req = set_config(TOPIC, "bench.cc".into(), value(0, s, vb));
            s += 1;
            let t = Instant::now();
            let r = cc
                .admin(|mut a| {
                    let req = req.clone();
                    async move { a.incremental_alter_configs(req).await }
                })
                .await;
            if matches!(&r, Ok(r) if alter_ok(r)) {
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let mut j = latency_json(&lat);
        j["ops_per_s"] = json!(r1(lat.len() as f64 / secs));
        Some(j)
    } else {
        None
    };
    let leadership_changes = leadership.changes(&c).await;
    drop(c);
    // On two fresh quorums, so both sides have the same history.
    let (tls_levels, tls_leadership) = if p.tls {
        Some(tls_comparison(env, p).await?)
    } else {
        None
    }
    .unzip();
    // After the cluster, so its writes do not disturb Keel's figures.
    let ceiling = if p.storage_ceiling_secs > 0.0 {
        progress!(
            "commit: storage ceiling: 3 stores appending bulk entries at once, {} s each for sled and a plain file",
            p.storage_ceiling_secs
        );
        let params = CeilingParams {
            nodes: 3,
            entry: Arc::new(bulk_entry_bytes(p)?),
            records_per_entry: p.bulk_keys,
            secs: p.storage_ceiling_secs,
            max_entries: 1_000_000,
        };
        let dir = std::env::temp_dir();
        Some(tokio::task::spawn_blocking(move || storage_ceiling(&dir, &params)).await?)
    } else {
        None
    };

    let mut level_json: Vec<Value> = levels
        .iter()
        .zip(&level_cpu)
        .map(|(l, (server_us, client_us))| {
            let ops_s = l.ops as f64 / l.secs;
            json!({
                "writers": l.writers,
                "ops": l.ops,
                "errors": l.errors,
                "secs": r3(l.secs),
                "ops_per_s": r1(ops_s),
                "records_per_s": r1(ops_s),
                "p50_ms": r3(percentile(&l.lat_ms, 50.0)),
                "p99_ms": r3(percentile(&l.lat_ms, 99.0)),
                "server_cpu_us_per_record": server_us,
                "client_cpu_us_per_record": client_us,
                "first_error": l.first_error,
            })
        })
        .collect();
    if let Some(t) = &tls_levels {
        for (l, t) in level_json.iter_mut().zip(t) {
            l["tls"] = t.clone();
        }
    }
    let bulk_batches_s = bulk.ops as f64 / bulk.secs;
    let bulk_json = json!({
        "writers": p.bulk_writers,
        "keys_per_request": keys,
        "batches": bulk.ops,
        "errors": bulk.errors,
        "secs": r3(bulk.secs),
        "batches_per_s": r1(bulk_batches_s),
        "records_per_s": r1(bulk_batches_s * keys as f64),
        "p50_ms": r3(percentile(&bulk.lat_ms, 50.0)),
        "p99_ms": r3(percentile(&bulk.lat_ms, 99.0)),
        "server_cpu_us_per_record": bulk_cpu.0,
        "client_cpu_us_per_record": bulk_cpu.1,
        "first_error": bulk.first_error,
        "checksum": checksum_cost(p, bulk_cpu.0)?,
    });
    let mut json = json!({
        "scenario": "commit",
        "started_at_unix": started_at,
        "parameters": {
            "controllers": 3,
            "writers": p.writers,
            "level_secs": p.level_secs,
            "max_ops_per_level": p.max_ops_per_level,
            "value_bytes": p.value_bytes,
            "bulk_keys": p.bulk_keys,
            "bulk_writers": p.bulk_writers,
            "bulk_secs": p.bulk_secs,
            "op": "IncrementalAlterConfigs SET of one key (one TopicConfig record)",
            "connection": match p.connections {
                Connections::PerWriter => "one persistent gRPC connection per writer to the active controller",
                Connections::Shared => "one persistent gRPC connection to the active controller shared by all writers",
            },
            "connections": p.connections.name(),
            "keel_api": p.api.name(),
        },
        "levels": level_json,
        "bulk": bulk_json,
        "leadership_changes": leadership_changes,
        "records_written": records,
        "disk_bytes_written": disk_delta,
        "disk_bytes_per_record": r1(per_record),
        "disk_bytes_per_record_per_node": r1(per_record / 3.0),
        "machine": machine(),
        "disk_probe": disk,
    });
    if let Some(cc) = compare {
        json["controller_client_1_writer"] = cc;
    }
    json["parameters"]["tls"] = json!(p.tls);
    if let Some(t) = &tls_levels {
        json["parameters"]["tls_rounds"] = json!(p.tls_rounds);
        json["tls"] = crate::tls::summary_json(t, p.tls_rounds, TLS_ORDER);
        json["tls"]["leadership_changes"] = json!(tls_leadership);
    }
    if let Some(ceiling) = ceiling {
        if let Some(sled) = ceiling["sled"]["records_per_s"]
            .as_f64()
            .filter(|&s| s > 0.0)
        {
            let bulk = json["bulk"]["records_per_s"].as_f64().unwrap_or(0.0);
            json["bulk"]["keel_vs_storage_ceiling"] = json!(r3(bulk / sled));
        }
        json["storage_ceiling"] = ceiling;
    }

    let mut table = format!(
        "commit (3 controllers, ~100-byte TopicConfig records, {} API, {} connections)\n",
        p.api.name(),
        p.connections.name()
    );
    table += &format!(
        "{:>10} {:>12} {:>10} {:>10} {:>8} {:>14} {:>14}\n",
        "writers", "records/s", "p50 ms", "p99 ms", "errors", "server µs/rec", "client µs/rec"
    );
    // A row: `first`, then the throughput, latency, error and CPU cells of `l`.
    let row = |first: String, l: &Value| {
        format!(
            "{first:>10} {:>12} {:>10} {:>10} {:>8} {:>14} {:>14}",
            cell(&l["records_per_s"]),
            cell(&l["p50_ms"]),
            cell(&l["p99_ms"]),
            cell(&l["errors"]),
            cell(&l["server_cpu_us_per_record"]),
            cell(&l["client_cpu_us_per_record"])
        )
    };
    for l in &level_json {
        table += &row(cell(&l["writers"]), l);
        table += "\n";
    }
    table += &format!(
        "{}   ({} batches/s of {keys} records)\n",
        row("bulk".into(), &bulk_json),
        cell(&bulk_json["batches_per_s"])
    );
    table += &format!(
        "disk: {} bytes over 3 nodes for {records} records = {:.1} B/record ({:.1} per node)\n",
        disk_delta,
        per_record,
        per_record / 3.0
    );
    let sum = &bulk_json["checksum"];
    table += &format!(
        "entry checksums (CRC-32): {} us per {}-byte bulk entry ({} GB/s), at most {} us of cluster CPU per record = {} of the servers' CPU per record\n",
        cell(&sum["crc_us_per_entry"]),
        cell(&sum["entry_bytes"]),
        cell(&sum["crc_gb_per_s"]),
        cell(&sum["cluster_cpu_us_per_record"]),
        cell(&sum["share_of_server_cpu_per_record"])
    );
    table += &disk_probe_line(&json["disk_probe"]);
    if let Some(ceiling) = json.get("storage_ceiling") {
        table += &ceiling_line(ceiling);
        table += &format!(
            "bulk reached {} of the sled ceiling\n",
            cell(&json["bulk"]["keel_vs_storage_ceiling"])
        );
    }
    if let Some(cc) = json.get("controller_client_1_writer") {
        table += &format!(
            "1 writer via ControllerClient (new connection per call): {} ops/s, p50 {} ms, p99 {} ms\n",
            cell(&cc["ops_per_s"]), cell(&cc["p50_ms"]), cell(&cc["p99_ms"])
        );
    }
    if let Some(t) = &tls_levels {
        table += &crate::tls::table(t, p.tls_rounds);
    }
    let best = level_json
        .iter()
        .map(|l| l["records_per_s"].as_f64().unwrap_or(0.0))
        .fold(0.0, f64::max);
    let mut summary = format!(
        "commit: up to {best:.0} records/s with 1-record ops, {:.0} records/s bulk, {per_record:.0} disk bytes/record (3 nodes)",
        bulk_json["records_per_s"].as_f64().unwrap_or(0.0)
    );
    if let Some(t) = &tls_levels {
        summary += &format!("; {}", crate::tls::summary_line(t));
    }
    Ok(Report {
        scenario: "commit",
        json,
        table,
        summary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_entry_carries_every_record_of_one_bulk_request() {
        let p = |keys| CommitParams {
            bulk_keys: keys,
            ..CommitParams::default()
        };
        let one = bulk_entry_bytes(&p(1_000)).expect("encode");
        let ten = bulk_entry_bytes(&p(10_000)).expect("encode");
        // Each record holds its 100-byte value, its key and a topic id.
        assert!(one.len() > 1_000 * 100, "{}", one.len());
        assert!(one.len() < 1_000 * 160, "{}", one.len());
        assert!(
            ten.len() > 10 * one.len() - 10_000,
            "{} {}",
            ten.len(),
            one.len()
        );
        // The request sends the same keys and value sizes the entry holds.
        let req = bulk_request(0, 0, 1_000, 100);
        let ops = &req.topics[0].ops;
        assert_eq!(ops.len(), 1_000);
        assert_eq!(ops[999].key, bulk_key(0, 1_000, 999));
        assert!(ops.iter().all(|o| o.value.len() == 100));
    }
}
