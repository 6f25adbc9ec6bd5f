//! Scenario `scale`: a 1,000,000-partition image (RF 3).
//!
//! A fresh 3-controller quorum on 127.0.23.11-13 with three stand-in
//! brokers gets the image through the admin API (topics of 100 partitions).
//! Measured on the cluster: resident memory of the active controller and of
//! the standbys (from `/proc`), per partition; snapshot size and build time
//! (TriggerSnapshot on every node, which also purges the log the snapshot
//! covers); sled disk use per node after that compaction; and the load of
//! the snapshot by a restarted standby (the node's own figure and the time
//! from its start until it serves the image), then that standby's memory.
//! Measured in this process on an equivalent image built by the pure core:
//! replay of 1,000,000 `PartitionChange` records, snapshot encode and
//! decode, and the image's own memory.

use std::time::{Duration, Instant};

use anyhow::bail;
use keel_metadata::records::RecordBatch;
use keel_metadata::synthetic::SyntheticCluster;
use keel_metadata::{MetadataImage, TopicPartition};
use keel_proto::pb;
use keel_proto::pb::admin_service_client::AdminServiceClient;
use serde_json::{json, Value};

use keel_testkit::probe::{self, Memory};
use keel_testkit::{Cluster, ClusterFaults, SpecFaults};

use crate::cluster::{self, connect, ImageSpec};
use crate::stats::{cell, machine, median, r1, r3, unix_now};
use crate::{progress, Env, Report};

/// Parameters of the `scale` scenario.
#[derive(Clone, Debug)]
pub struct ScaleParams {
    /// Partitions in the image.
    pub partitions: u64,
    pub partitions_per_topic: u32,
    /// Topics per CreateTopics request.
    pub topics_per_request: usize,
    /// CreateTopics requests in flight.
    pub create_concurrency: usize,
    /// Time allowed for creating the image.
    pub create_budget_secs: f64,
    /// Wait after convergence before reading memory (background work settles).
    pub settle_secs: f64,
    /// Time allowed per snapshot build, and for a restarted node to load it.
    pub snapshot_timeout_secs: f64,
    /// `PartitionChange` records replayed in process.
    pub replay_records: usize,
    /// Records per replayed batch (one Raft entry each).
    pub replay_batch: usize,
    /// Repetitions of the in-process encode and decode (median reported).
    pub codec_repeats: usize,
    /// Every data dir on LazyFS, and one more measurement: a standby that
    /// loses power (SIGKILL and every unsynced write dropped) with log
    /// entries past its snapshot, timed from its start until it serves
    /// the current index. Needs root and /dev/fuse.
    pub power_cut: bool,
    /// Topics created after the snapshots, so the power-cut node has a
    /// log tail to replay on top of its snapshot.
    pub tail_topics: usize,
}

impl Default for ScaleParams {
    fn default() -> Self {
        Self {
            partitions: 1_000_000,
            partitions_per_topic: 100,
            topics_per_request: 50,
            create_concurrency: 4,
            create_budget_secs: 900.0,
            settle_secs: 5.0,
            snapshot_timeout_secs: 180.0,
            replay_records: 1_000_000,
            replay_batch: 1_000,
            codec_repeats: 3,
            power_cut: false,
            tail_topics: 200,
        }
    }
}

/// The scenario's own subnet: controllers on 127.0.23.11-13.
const SUBNET: u8 = 23;
/// Targets of the issue: resident bytes per partition, snapshot load time.
const TARGET_RSS_BYTES_PER_PARTITION: f64 = 500.0;
const TARGET_SNAPSHOT_LOAD_MS: f64 = 2_000.0;

/// Resident-memory figures of one controller.
fn memory(c: &Cluster, i: usize, partitions: u64, baseline: u64) -> Value {
    let node = c.controller(i);
    let rss = node.rss_bytes();
    let per = |b: u64| {
        if partitions == 0 {
            Value::Null
        } else {
            json!(r1(b as f64 / partitions as f64))
        }
    };
    json!({
        "node": i + 1,
        "rss_bytes": rss,
        "rss_anon_bytes": node.memory_bytes(Memory::RssAnon),
        "peak_rss_bytes": node.memory_bytes(Memory::PeakRss),
        "rss_bytes_per_partition": per(rss),
        "rss_over_empty_bytes_per_partition": per(rss.saturating_sub(baseline)),
    })
}

fn mb(b: u64) -> f64 {
    r1(b as f64 / (1u64 << 20) as f64)
}

/// Resident memory of each controller, in MB.
fn rss_mb(c: &Cluster) -> Vec<f64> {
    c.controllers().map(|n| mb(n.rss_bytes())).collect()
}

/// TriggerSnapshot (with a purge of the log it covers) on controller `i`,
/// no redirect.
async fn trigger_snapshot(
    c: &Cluster,
    i: usize,
    timeout: Duration,
) -> anyhow::Result<pb::TriggerSnapshotResponse> {
    let ch = connect(&c.controller(i).address(), timeout + Duration::from_secs(5)).await?;
    let r = AdminServiceClient::new(ch)
        .trigger_snapshot(pb::TriggerSnapshotRequest {
            purge_log: true,
            timeout_ms: timeout.as_millis() as u64,
        })
        .await?
        .into_inner();
    if let Some(e) = &r.error {
        bail!(
            "TriggerSnapshot on controller {} refused: {}",
            i + 1,
            e.message
        );
    }
    Ok(r)
}

/// Figures of one TriggerSnapshot answer.
fn snapshot_json(node: usize, r: &pb::TriggerSnapshotResponse) -> Value {
    let s = r.snapshot.clone().unwrap_or_default();
    json!({
        "node": node + 1,
        "last_index": s.last_index,
        "size_bytes": s.size_bytes,
        "image_bytes": s.image_bytes,
        "build_ms": s.build_ms.map(r1),
        "encode_ms": s.encode_ms.map(r1),
        "wait_ms": r1(r.wait_ms),
        "purged_index": r.purged_index,
    })
}

/// Waits for restarted controller `i` to serve an image at `index` or
/// later; returns the milliseconds from `spawned` and its DescribeNode.
async fn wait_loaded(
    c: &mut Cluster,
    i: usize,
    index: u64,
    spawned: Instant,
    timeout: Duration,
) -> anyhow::Result<(f64, pb::DescribeNodeResponse)> {
    loop {
        c.check_alive()?;
        if let Some(d) = c.describe_node(i, Duration::from_secs(5)).await {
            if d.last_applied_index >= index {
                return Ok((spawned.elapsed().as_secs_f64() * 1000.0, d));
            }
        }
        if spawned.elapsed() >= timeout {
            bail!(
                "controller {} did not serve index {index} within {timeout:?}; log tail:\n{}",
                i + 1,
                c.controller(i).process.log_tail(10)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes `tail_topics` more topics (a log tail past the snapshots), cuts
/// controller `i`'s power, starts it on the same LazyFS mount and times it
/// until it serves the quorum's index; checks the quorum converges on one
/// image and that nothing acknowledged went missing.
async fn power_cut_restart(
    c: &mut Cluster,
    i: usize,
    tail_topics: usize,
    timeout: Duration,
) -> anyhow::Result<Value> {
    let client = c.client(Duration::from_secs(5), Duration::from_secs(30));
    let mut acked = Vec::new();
    for t in 0..tail_topics {
        let name = format!("tail-{t}");
        keel_testkit::admin::create_topic(&client, &name, 1, 3).await?;
        acked.push(name);
    }
    let (index, _) = c.wait_converged(0, timeout).await?;
    c.power_cut(i)?;
    let spawned = Instant::now();
    c.controller_mut(i).start()?;
    let (serve_ms, d) = wait_loaded(c, i, index, spawned, timeout).await?;
    let s = d.snapshot.clone().unwrap_or_default();
    progress!(
        "scale: power-cut node {} serves index {} after {serve_ms:.0} ms (snapshot load {:?} ms)",
        i + 1,
        d.last_applied_index,
        s.load_ms
    );
    let (converged, _) = c.wait_converged(index, timeout).await?;
    let names: std::collections::BTreeSet<String> = keel_testkit::admin::topic_names(&client)
        .await?
        .into_iter()
        .collect();
    let lost = acked.iter().filter(|n| !names.contains(*n)).count();
    if lost > 0 {
        bail!("{lost} acknowledged topics lost across the power cut");
    }
    Ok(json!({
        "node": i + 1,
        "tail_topics": tail_topics,
        "index_before_cut": index,
        "start_to_serving_ms": r1(serve_ms),
        "snapshot_load_ms": s.load_ms.map(r1),
        "snapshot_index": s.last_index,
        "served_index": d.last_applied_index,
        "converged_index": converged,
        "acknowledged_lost": lost,
    }))
}

/// The cluster part; returns its JSON section.
async fn run_cluster(env: &Env, p: &ScaleParams) -> anyhow::Result<Value> {
    progress!("scale: starting a 3-controller quorum on 127.0.{SUBNET}.11-13");
    let mut c = cluster::start(
        cluster::spec(env, SUBNET, &["--session-timeout-ms", "600000"]).lazyfs(p.power_cut),
    )?;
    c.wait_active(Duration::from_secs(60)).await?;
    let leadership = cluster::Leadership::start(&c).await;
    for id in 1..=3 {
        cluster::register_stand_in(&c, id).await?;
    }
    c.wait_converged(0, Duration::from_secs(60)).await?;
    let empty_rss: Vec<u64> = c.controllers().map(|n| n.rss_bytes()).collect();
    progress!(
        "scale: empty cluster RSS {:?} MB; creating {} partitions",
        empty_rss.iter().map(|b| mb(*b)).collect::<Vec<_>>(),
        p.partitions
    );

    let spec = ImageSpec {
        partitions: p.partitions,
        partitions_per_topic: p.partitions_per_topic,
        replication_factor: 3,
        replicas: None,
        topics_per_request: p.topics_per_request,
        concurrency: p.create_concurrency,
        budget: Duration::from_secs_f64(p.create_budget_secs),
        prefix: "scale".into(),
    };
    let made = cluster::create_image(&c, &spec, "scale").await?;
    let n = made.partitions;
    progress!(
        "scale: created {n} partitions in {:.1} s ({:.0}/s)",
        made.secs,
        n as f64 / made.secs
    );
    if n < p.partitions {
        progress!(
            "scale: NOTE only {n} of {} partitions within the {} s budget; figures are for {n}",
            p.partitions,
            p.create_budget_secs
        );
    }
    let t = Instant::now();
    let (index, hash) = c
        .wait_converged(0, Duration::from_secs_f64(p.snapshot_timeout_secs))
        .await?;
    let converge_secs = t.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs_f64(p.settle_secs)).await;
    let active = c.wait_active(Duration::from_secs(30)).await?;
    let standbys: Vec<usize> = (0..3).filter(|i| *i != active).collect();
    let after_create: Vec<Value> = (0..3).map(|i| memory(&c, i, n, empty_rss[i])).collect();
    progress!(
        "scale: converged at index {index} in {converge_secs:.1} s; RSS {:?} MB (node {} active)",
        rss_mb(&c),
        active + 1
    );

    // Snapshot and compact every node: standbys first, the active last.
    let timeout = Duration::from_secs_f64(p.snapshot_timeout_secs);
    let mut snapshots = Vec::new();
    let mut snapshot_index = 0;
    for &i in standbys.iter().chain([active].iter()) {
        let r = trigger_snapshot(&c, i, timeout).await?;
        let j = snapshot_json(i, &r);
        progress!("scale: snapshot on node {}: {j}", i + 1);
        snapshot_index = snapshot_index.max(r.snapshot.as_ref().map_or(0, |s| s.last_index));
        snapshots.push(j);
    }
    tokio::time::sleep(Duration::from_secs_f64(p.settle_secs)).await;
    let after_snapshot: Vec<Value> = (0..3).map(|i| memory(&c, i, n, empty_rss[i])).collect();
    let disk: Vec<u64> = c.controllers().map(|n| n.disk_bytes()).collect();
    progress!(
        "scale: after snapshot and purge: RSS {:?} MB, disk {:?} MB",
        rss_mb(&c),
        disk.iter().map(|b| mb(*b)).collect::<Vec<_>>()
    );

    // A standby restarted on its compacted data dir loads the snapshot.
    let restarted = standbys[0];
    c.controller_mut(restarted).kill();
    let spawned = Instant::now();
    c.controller_mut(restarted).start()?;
    let (serve_ms, d) = wait_loaded(&mut c, restarted, snapshot_index, spawned, timeout).await?;
    let s = d.snapshot.clone().unwrap_or_default();
    progress!(
        "scale: restarted node {} serves index {} after {serve_ms:.0} ms (snapshot load {:?} ms, decode {:?} ms, from {:?})",
        restarted + 1,
        d.last_applied_index,
        s.load_ms,
        s.decode_ms,
        s.load_source
    );
    let (index2, hash2) = c.wait_converged(0, timeout).await?;
    tokio::time::sleep(Duration::from_secs_f64(p.settle_secs)).await;
    let restarted_memory = memory(&c, restarted, n, 0);
    progress!(
        "scale: restarted node {} converged (index {index2}); RSS {} MB",
        restarted + 1,
        mb(c.controller(restarted).rss_bytes())
    );
    let load = json!({
        "node": restarted + 1,
        "load_ms": s.load_ms.map(r1),
        "decode_ms": s.decode_ms.map(r1),
        "load_source": s.load_source,
        "start_to_serving_ms": r1(serve_ms),
        "served_index": d.last_applied_index,
        "snapshot_index": snapshot_index,
        "memory_after_load": restarted_memory,
        "converged_index": index2,
        "hash_unchanged_by_restart": hash == hash2,
    });

    let power_cut = if p.power_cut {
        let other = standbys[1];
        Some(power_cut_restart(&mut c, other, p.tail_topics, timeout).await?)
    } else {
        None
    };

    let rss_active = c.controller(active).rss_bytes();
    let rss_standby = standbys
        .iter()
        .map(|i| c.controller(*i).rss_bytes())
        .max()
        .unwrap_or(0);
    let create_rate = n as f64 / made.secs.max(1e-9);
    let leadership_changes = leadership.changes(&c).await;
    Ok(json!({
        "partitions": n,
        "leadership_changes": leadership_changes,
        "topics": n.div_ceil(u64::from(p.partitions_per_topic)),
        "create_secs": r3(made.secs),
        "create_partitions_per_s": r1(create_rate),
        "create_requests": made.request_ms.len(),
        "create_request_p50_ms": r1(median(&made.request_ms)),
        "create_retries": made.retries,
        "converge_secs": r3(converge_secs),
        "image_index": index,
        "active_node": active + 1,
        "empty_rss_bytes": empty_rss,
        "memory_after_create": after_create,
        "snapshots": snapshots,
        "memory_after_snapshot": after_snapshot,
        "disk_bytes_after_compaction": disk,
        "snapshot_load": load,
        "power_cut_restart": power_cut,
        "rss_bytes_per_partition_active": r1(rss_active as f64 / n.max(1) as f64),
        "rss_bytes_per_partition_standby": r1(rss_standby as f64 / n.max(1) as f64),
    }))
}

/// The in-process part: the pure core on an equivalent image.
fn run_core(p: &ScaleParams) -> anyhow::Result<Value> {
    let per_topic = p.partitions_per_topic.max(1);
    let topics = u32::try_from(p.partitions.div_ceil(u64::from(per_topic)))?;
    let rss_before = probe::own_rss_bytes();
    let shape = SyntheticCluster {
        brokers: 3,
        topics,
        partitions_per_topic: per_topic,
    };
    let start = Instant::now();
    let (image, first) = shape.image()?;
    let create_rate = shape.partitions() as f64 / start.elapsed().as_secs_f64();
    let partitions = image.partition_count() as u64;
    let image_rss = probe::own_rss_bytes().saturating_sub(rss_before);
    progress!(
        "scale: in-process image of {partitions} partitions: {} MB resident ({:.0} bytes/partition)",
        mb(image_rss),
        image_rss as f64 / partitions as f64
    );

    // Replay as the state machine applies: each batch on a copy of the
    // image while the previous image is still held (published to readers),
    // so every first write to a shared chunk copies it.
    let log: Vec<RecordBatch> = shape
        .partition_changes(p.replay_records)
        .chunks(p.replay_batch.max(1))
        .map(|c| RecordBatch::new(c.to_vec()))
        .collect();
    let mut held = image.clone();
    let start = Instant::now();
    for (i, batch) in log.iter().enumerate() {
        let mut next = held.clone();
        next.replay_batch(batch, first + i as u64)?;
        held = next;
    }
    let cow_secs = start.elapsed().as_secs_f64();
    held.validate()?;
    drop(held);
    // The same records replayed in place (no other holder of the image).
    let mut work = image.clone();
    drop(image);
    let start = Instant::now();
    for (i, batch) in log.iter().enumerate() {
        work.replay_batch(batch, first + i as u64)?;
    }
    let in_place_secs = start.elapsed().as_secs_f64();
    work.validate()?;
    let records = p.replay_records as f64;
    progress!(
        "scale: replay of {} PartitionChange records: {:.0}/s copy-on-write, {:.0}/s in place",
        p.replay_records,
        records / cow_secs,
        records / in_place_secs
    );
    drop(log);

    let mut encode_ms = Vec::new();
    let mut decode_ms = Vec::new();
    let mut bytes = Vec::new();
    for _ in 0..p.codec_repeats.max(1) {
        let t = Instant::now();
        bytes = work.encode();
        encode_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        let back = MetadataImage::decode(&bytes)?;
        decode_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        if back.partition_count() != work.partition_count() {
            bail!("the decoded image lost partitions");
        }
    }
    let tp = TopicPartition::new(SyntheticCluster::topic_id(0), 0);
    let epoch = work.partition(&tp).map_or(0, |x| x.partition_epoch.0);
    progress!(
        "scale: in-process snapshot image {} MB: encode {:.0} ms, decode + validate {:.0} ms",
        mb(bytes.len() as u64),
        median(&encode_ms),
        median(&decode_ms)
    );
    Ok(json!({
        "partitions": partitions,
        "image_rss_bytes": image_rss,
        "image_rss_bytes_per_partition": r1(image_rss as f64 / partitions.max(1) as f64),
        "partition_records_per_s": r1(create_rate),
        "replay": {
            "records": p.replay_records,
            "batch": p.replay_batch,
            "copy_on_write_secs": r3(cow_secs),
            "copy_on_write_records_per_s": r1(records / cow_secs),
            "in_place_secs": r3(in_place_secs),
            "in_place_records_per_s": r1(records / in_place_secs),
            "partition_epoch_of_first_partition": epoch,
        },
        "image_bytes": bytes.len(),
        "encode_ms": encode_ms.iter().map(|x| r1(*x)).collect::<Vec<_>>(),
        "encode_median_ms": r1(median(&encode_ms)),
        "decode_ms": decode_ms.iter().map(|x| r1(*x)).collect::<Vec<_>>(),
        "decode_median_ms": r1(median(&decode_ms)),
    }))
}

/// Runs the scenario.
pub async fn run(env: &Env, p: &ScaleParams) -> anyhow::Result<Report> {
    if p.partitions == 0 || p.partitions > 100_000_000 || p.partitions_per_topic == 0 {
        bail!(
            "scale needs 1..=100000000 partitions and a positive partition count per topic (got {} and {})",
            p.partitions,
            p.partitions_per_topic
        );
    }
    let started_at = unix_now();
    let cluster = run_cluster(env, p).await?;
    progress!("scale: cluster stopped; measuring the pure core in process");
    let params = p.clone();
    let core = tokio::task::spawn_blocking(move || run_core(&params)).await??;

    let n = cluster["partitions"].as_u64().unwrap_or(0);
    let rss_active = cluster["rss_bytes_per_partition_active"]
        .as_f64()
        .unwrap_or(f64::INFINITY);
    let rss_standby = cluster["rss_bytes_per_partition_standby"]
        .as_f64()
        .unwrap_or(f64::INFINITY);
    let load_ms = cluster["snapshot_load"]["load_ms"]
        .as_f64()
        .unwrap_or(f64::INFINITY);
    let targets = json!({
        "rss_bytes_per_partition_max": TARGET_RSS_BYTES_PER_PARTITION,
        "rss_met_active": rss_active <= TARGET_RSS_BYTES_PER_PARTITION,
        "rss_met_standby": rss_standby <= TARGET_RSS_BYTES_PER_PARTITION,
        "snapshot_load_ms_max": TARGET_SNAPSHOT_LOAD_MS,
        "snapshot_load_met": load_ms <= TARGET_SNAPSHOT_LOAD_MS,
    });
    let json = json!({
        "scenario": "scale",
        "started_at_unix": started_at,
        "parameters": {
            "controllers": 3,
            "stand_in_brokers": 3,
            "partitions": p.partitions,
            "partitions_per_topic": p.partitions_per_topic,
            "replication_factor": 3,
            "topics_per_request": p.topics_per_request,
            "create_concurrency": p.create_concurrency,
            "settle_secs": p.settle_secs,
            "replay_records": p.replay_records,
            "replay_batch": p.replay_batch,
            "codec_repeats": p.codec_repeats,
            "malloc_arena_max": std::env::var("MALLOC_ARENA_MAX").ok(),
            "measured": "controller RSS from /proc after creation, after TriggerSnapshot+purge on every node, and of a standby restarted on its compacted data dir; snapshot figures as reported by each node; sled disk use per data dir; pure-core replay/encode/decode in this process on an equivalent image",
        },
        "cluster": cluster,
        "core": core,
        "targets": targets,
        "machine": machine(),
    });

    let c = &json["cluster"];
    let k = &json["core"];
    let snap0 = &c["snapshots"][0];
    let mut table = format!("scale ({n} partitions, RF 3, 3 controllers)\n");
    let row = |name: &str, value: String| format!("{name:<52} {value:>16}\n");
    table += &row(
        "create through the admin API (partitions/s)",
        cell(&c["create_partitions_per_s"]),
    );
    table += &row(
        "RSS active after create (bytes/partition)",
        cell(
            &c["memory_after_create"][c["active_node"].as_u64().unwrap_or(1) as usize - 1]
                ["rss_bytes_per_partition"],
        ),
    );
    table += &row(
        "RSS active after snapshot (bytes/partition)",
        cell(&c["rss_bytes_per_partition_active"]),
    );
    table += &row(
        "RSS standby after snapshot, max (bytes/partition)",
        cell(&c["rss_bytes_per_partition_standby"]),
    );
    table += &row(
        "RSS restarted standby (bytes/partition)",
        cell(&c["snapshot_load"]["memory_after_load"]["rss_bytes_per_partition"]),
    );
    table += &row("snapshot size (bytes)", cell(&snap0["size_bytes"]));
    table += &row("snapshot build, first node (ms)", cell(&snap0["build_ms"]));
    table += &row(
        "snapshot load by a restarted standby (ms)",
        cell(&c["snapshot_load"]["load_ms"]),
    );
    table += &row(
        "restarted standby: start to serving (ms)",
        cell(&c["snapshot_load"]["start_to_serving_ms"]),
    );
    if !c["power_cut_restart"].is_null() {
        table += &row(
            "power-cut standby: start to serving (ms)",
            cell(&c["power_cut_restart"]["start_to_serving_ms"]),
        );
    }
    table += &row(
        "sled disk after compaction, per node (MB)",
        c["disk_bytes_after_compaction"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|b| format!("{:.0}", mb(b.as_u64().unwrap_or(0))))
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .unwrap_or_default(),
    );
    table += &row(
        "core replay, copy-on-write (records/s)",
        cell(&k["replay"]["copy_on_write_records_per_s"]),
    );
    table += &row(
        "core replay, in place (records/s)",
        cell(&k["replay"]["in_place_records_per_s"]),
    );
    table += &row(
        "core image alone (bytes/partition)",
        cell(&k["image_rss_bytes_per_partition"]),
    );
    table += &row("core snapshot decode (ms)", cell(&k["decode_median_ms"]));
    table += &row("core snapshot encode (ms)", cell(&k["encode_median_ms"]));
    let summary = format!(
        "scale: {n} partitions; RSS {} bytes/partition active, {} standby (target {}); snapshot {} MB, build {} ms, load {} ms (target {}); replay {} records/s",
        cell(&c["rss_bytes_per_partition_active"]),
        cell(&c["rss_bytes_per_partition_standby"]),
        TARGET_RSS_BYTES_PER_PARTITION,
        mb(snap0["size_bytes"].as_u64().unwrap_or(0)),
        cell(&snap0["build_ms"]),
        cell(&c["snapshot_load"]["load_ms"]),
        TARGET_SNAPSHOT_LOAD_MS,
        cell(&k["replay"]["copy_on_write_records_per_s"]),
    );
    Ok(Report {
        scenario: "scale",
        json,
        table,
        summary,
    })
}
