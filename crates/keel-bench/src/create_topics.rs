//! Scenario `create-topics`: 100,000 partitions (RF 3) created through the
//! admin API, then deleted.
//!
//! Every trial starts a fresh 3-controller quorum on 127.0.24.11-13 and
//! three real `keel broker` processes (deletion completes only when brokers
//! answer `StopReplica`). Topics of 100 partitions are created by
//! CreateTopics calls carrying `topics_per_request` topics each, with
//! `concurrency` calls in flight; then deleted the same way by DeleteTopics
//! calls. Measured: creation wall time (first call to last answer) and
//! partitions/s; deletion wall time until every DeleteTopics call returned,
//! and until DescribeTopics (all topics, a linearizable read on the active
//! controller) shows none of them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use keel_proto::client::ControllerClient;
use keel_proto::pb;
use serde_json::{json, Value};

use keel_testkit::Cluster;

use crate::cluster::{self, ImageSpec};
use crate::stats::{cell, leadership_changes_total, machine, median, percentile, r1, r3, unix_now};
use crate::{progress, Env, Report};

/// Parameters of the `create-topics` scenario.
#[derive(Clone, Debug)]
pub struct CreateTopicsParams {
    /// Trials (a fresh cluster each).
    pub trials: usize,
    /// Partitions created per trial.
    pub partitions: u64,
    pub partitions_per_topic: u32,
    /// Topics per CreateTopics / DeleteTopics call.
    pub topics_per_request: usize,
    /// Calls in flight at once.
    pub concurrency: usize,
    /// Give up on creating after this long.
    pub create_budget_secs: f64,
    /// Give up waiting for the deleted topics to be gone after this long.
    pub delete_timeout_secs: f64,
}

impl Default for CreateTopicsParams {
    fn default() -> Self {
        Self {
            trials: 3,
            partitions: 100_000,
            partitions_per_topic: 100,
            topics_per_request: 10,
            concurrency: 4,
            create_budget_secs: 300.0,
            delete_timeout_secs: 300.0,
        }
    }
}

/// The scenario's own subnet: controllers on .11-13, brokers on .21-23.
const SUBNET: u8 = 24;
/// Broker session timeout (controllers) and heartbeat period (brokers).
const SESSION_TIMEOUT_MS: &str = "3000";
const HEARTBEAT_INTERVAL_MS: &str = "500";

fn spec(p: &CreateTopicsParams) -> ImageSpec {
    ImageSpec {
        partitions: p.partitions,
        partitions_per_topic: p.partitions_per_topic,
        replication_factor: 3,
        replicas: None,
        topics_per_request: p.topics_per_request,
        concurrency: p.concurrency,
        budget: Duration::from_secs_f64(p.create_budget_secs),
        prefix: "ct".into(),
    }
}

/// Deletes every topic of `spec`; returns the seconds until the last call
/// returned and each call's latency (ms).
async fn delete_all(
    c: &Cluster,
    spec: &ImageSpec,
    concurrency: usize,
) -> anyhow::Result<(f64, Vec<f64>)> {
    let topics = spec.topics();
    let next = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let client = c.client(Duration::from_secs(60), Duration::from_secs(120));
        let (next, latencies, spec) = (next.clone(), latencies.clone(), spec.clone());
        tasks.push(tokio::spawn(async move {
            let tpr = spec.topics_per_request.max(1) as u64;
            loop {
                let first = next.fetch_add(tpr, Ordering::Relaxed);
                if first >= topics {
                    return Ok::<Instant, anyhow::Error>(Instant::now());
                }
                let last = (first + tpr).min(topics);
                let req = pb::DeleteTopicsRequest {
                    names: (first..last).map(|t| spec.topic_name(t)).collect(),
                };
                let sent = Instant::now();
                let r = client
                    .admin(|mut a| {
                        let req = req.clone();
                        async move { a.delete_topics(req).await }
                    })
                    .await?;
                if let Ok(mut v) = latencies.lock() {
                    v.push(sent.elapsed().as_secs_f64() * 1000.0);
                }
                if let Some(e) = r.error {
                    bail!("DeleteTopics refused: {e:?}");
                }
                for t in &r.topics {
                    // A topic already being deleted (a retried call) is fine.
                    if let Some(e) = &t.error {
                        if e.code != pb::ErrorCode::TopicDeletionInProgress as i32 {
                            bail!("deletion of {} refused: {e:?}", t.name);
                        }
                    }
                }
            }
        }));
    }
    let mut end = start;
    for t in tasks {
        end = end.max(t.await??);
    }
    let latencies = latencies.lock().map(|v| v.clone()).unwrap_or_default();
    Ok((end.duration_since(start).as_secs_f64(), latencies))
}

/// Topics whose name starts with `prefix-` in a DescribeTopics of all topics.
async fn count_topics(client: &ControllerClient, prefix: &str) -> anyhow::Result<(usize, usize)> {
    let r = client
        .admin(|mut a| async move {
            a.describe_topics(pb::DescribeTopicsRequest { names: vec![] })
                .await
        })
        .await?;
    if let Some(e) = r.error {
        bail!("DescribeTopics refused: {e:?}");
    }
    let ours: Vec<&pb::TopicDescription> = r
        .topics
        .iter()
        .filter(|t| t.name.starts_with(&format!("{prefix}-")))
        .collect();
    let partitions = ours.iter().map(|t| t.partitions.len()).sum();
    Ok((ours.len(), partitions))
}

/// One trial on a fresh cluster.
async fn trial(env: &Env, p: &CreateTopicsParams, n: usize) -> anyhow::Result<Value> {
    progress!(
        "create-topics: trial {}: starting 3 controllers on 127.0.{SUBNET}.11-13 and 3 brokers on .21-23",
        n + 1
    );
    let layout = cluster::spec(env, SUBNET, &["--session-timeout-ms", SESSION_TIMEOUT_MS])
        .brokers(3)
        .broker_flags(&[
            "--heartbeat-interval-ms",
            HEARTBEAT_INTERVAL_MS,
            "--session-timeout-ms",
            SESSION_TIMEOUT_MS,
        ]);
    let mut c = cluster::start(layout)?;
    c.wait_active(Duration::from_secs(60)).await?;
    let leadership = cluster::Leadership::start(&c).await;
    c.start_brokers()?;
    c.wait_brokers_unfenced(3, Duration::from_secs(60)).await?;
    let spec = spec(p);
    let client = c.client(Duration::from_secs(60), Duration::from_secs(120));

    let made = cluster::create_image(&c, &spec, "create-topics").await?;
    let expected = spec.partitions;
    if made.partitions < expected {
        bail!(
            "only {} of {expected} partitions created within {} s",
            made.partitions,
            p.create_budget_secs
        );
    }
    c.check_alive()?;
    let (topics_seen, partitions_seen) = count_topics(&client, &spec.prefix).await?;
    if topics_seen as u64 != spec.topics() || partitions_seen as u64 != expected {
        bail!(
            "after creation DescribeTopics shows {topics_seen} topics / {partitions_seen} partitions, expected {} / {expected}",
            spec.topics()
        );
    }
    let active = c.wait_active(Duration::from_secs(10)).await?;
    let rss_active = c.controller(active).rss_bytes();
    let create_rate = made.partitions as f64 / made.secs.max(1e-9);
    progress!(
        "create-topics: trial {}: created {} partitions in {:.2} s ({create_rate:.0}/s); deleting",
        n + 1,
        made.partitions,
        made.secs
    );

    let start = Instant::now();
    let (calls_secs, delete_ms) = delete_all(&c, &spec, p.concurrency).await?;
    let timeout = Duration::from_secs_f64(p.delete_timeout_secs);
    let mut polls = 0u64;
    let gone_secs = loop {
        polls += 1;
        let (left, left_partitions) = count_topics(&client, &spec.prefix).await?;
        if left == 0 {
            break start.elapsed().as_secs_f64();
        }
        if start.elapsed() >= timeout {
            bail!(
                "{left} topics ({left_partitions} partitions) still there {} s after the first DeleteTopics call",
                p.delete_timeout_secs
            );
        }
        c.check_alive()?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    progress!(
        "create-topics: trial {}: DeleteTopics calls returned after {calls_secs:.2} s; all gone after {gone_secs:.2} s",
        n + 1
    );
    let leadership_changes = leadership.changes(&c).await;
    Ok(json!({
        "partitions": made.partitions,
        "leadership_changes": leadership_changes,
        "topics": spec.topics(),
        "create_secs": r3(made.secs),
        "create_partitions_per_s": r1(create_rate),
        "create_calls": made.request_ms.len(),
        "create_call_p50_ms": r1(percentile(&made.request_ms, 50.0)),
        "create_call_p99_ms": r1(percentile(&made.request_ms, 99.0)),
        "create_retries": made.retries,
        "active_rss_bytes_after_create": rss_active,
        "delete_calls_secs": r3(calls_secs),
        "delete_call_p50_ms": r1(percentile(&delete_ms, 50.0)),
        "delete_call_p99_ms": r1(percentile(&delete_ms, 99.0)),
        "delete_gone_secs": r3(gone_secs),
        "delete_gone_polls": polls,
    }))
}

/// Runs the scenario.
pub async fn run(env: &Env, p: &CreateTopicsParams) -> anyhow::Result<Report> {
    if p.partitions == 0 || p.partitions_per_topic == 0 || p.trials == 0 {
        bail!("create-topics needs positive --partitions, partitions per topic and --trials");
    }
    let started_at = unix_now();
    let mut trials = Vec::new();
    let mut failures = Vec::new();
    for n in 0..p.trials {
        match trial(env, p, n).await {
            Ok(t) => trials.push(t),
            Err(e) => {
                progress!("create-topics: trial {} failed: {e:#}", n + 1);
                failures.push(format!("{e:#}"));
            }
        }
    }
    if trials.is_empty() {
        bail!("every trial failed; first: {}", failures.join("; "));
    }
    let col = |k: &str| -> Vec<f64> { trials.iter().filter_map(|t| t[k].as_f64()).collect() };
    let summary_of = |k: &str| {
        let v = col(k);
        json!({
            "median": r3(median(&v)),
            "p99": r3(percentile(&v, 99.0)),
            "min": r3(v.iter().copied().fold(f64::INFINITY, f64::min)),
            "max": r3(v.iter().copied().fold(0.0, f64::max)),
        })
    };
    let figures = json!({
        "create_secs": summary_of("create_secs"),
        "create_partitions_per_s": summary_of("create_partitions_per_s"),
        "create_call_p99_ms": summary_of("create_call_p99_ms"),
        "delete_calls_secs": summary_of("delete_calls_secs"),
        "delete_gone_secs": summary_of("delete_gone_secs"),
    });
    let json = json!({
        "scenario": "create-topics",
        "started_at_unix": started_at,
        "parameters": {
            "controllers": 3,
            "brokers": 3,
            "trials": p.trials,
            "partitions": p.partitions,
            "partitions_per_topic": p.partitions_per_topic,
            "replication_factor": 3,
            "topics_per_request": p.topics_per_request,
            "concurrency": p.concurrency,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "broker_heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
            "measured": "create: first CreateTopics call -> last answer; delete: first DeleteTopics call -> last answer, and -> first DescribeTopics (all topics) showing none of them",
        },
        "leadership_changes": leadership_changes_total(&trials),
        "trials": trials,
        "failures": failures,
        "median": {
            "create_secs": figures["create_secs"]["median"],
            "create_partitions_per_s": figures["create_partitions_per_s"]["median"],
            "delete_calls_secs": figures["delete_calls_secs"]["median"],
            "delete_gone_secs": figures["delete_gone_secs"]["median"],
        },
        "figures": figures,
        "machine": machine(),
    });
    let mut table = format!(
        "create-topics ({} partitions = {} topics x {}, RF 3; {} topics per call, {} calls in flight)\n",
        p.partitions,
        spec(p).topics(),
        p.partitions_per_topic,
        p.topics_per_request,
        p.concurrency
    );
    table += &format!(
        "{:>6} {:>10} {:>14} {:>14} {:>16} {:>14}\n",
        "trial", "create s", "partitions/s", "create p99 ms", "delete calls s", "all gone s"
    );
    for (i, t) in json["trials"].as_array().into_iter().flatten().enumerate() {
        table += &format!(
            "{:>6} {:>10} {:>14} {:>14} {:>16} {:>14}\n",
            i + 1,
            cell(&t["create_secs"]),
            cell(&t["create_partitions_per_s"]),
            cell(&t["create_call_p99_ms"]),
            cell(&t["delete_calls_secs"]),
            cell(&t["delete_gone_secs"])
        );
    }
    let m = &json["median"];
    table += &format!(
        "{:>6} {:>10} {:>14} {:>14} {:>16} {:>14}\n",
        "median",
        cell(&m["create_secs"]),
        cell(&m["create_partitions_per_s"]),
        cell(&figures["create_call_p99_ms"]["median"]),
        cell(&m["delete_calls_secs"]),
        cell(&m["delete_gone_secs"])
    );
    let summary = format!(
        "create-topics: {} partitions created in {} s ({} partitions/s), deleted: calls returned after {} s, all gone after {} s (medians of {})",
        p.partitions,
        cell(&m["create_secs"]),
        cell(&m["create_partitions_per_s"]),
        cell(&m["delete_calls_secs"]),
        cell(&m["delete_gone_secs"]),
        json["trials"].as_array().map_or(0, |a| a.len())
    );
    Ok(Report {
        scenario: "create-topics",
        json,
        table,
        summary,
    })
}
