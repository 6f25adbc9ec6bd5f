//! Scenario `failover`: SIGKILL the active controller, time until the
//! first acknowledged write through a client bootstrapped with the two
//! survivors; restart the killed node and wait for convergence between
//! trials. Two image sizes: empty (one small topic) and large (`partitions`
//! created up front, topics of 100 partitions, RF 3, 3 stand-in brokers).

use std::time::{Duration, Instant};

use anyhow::bail;
use keel_proto::client::ControllerClient;
use serde_json::{json, Value};

use keel_testkit::admin::{self, alter_ok, set_config};
use keel_testkit::Cluster;

use crate::cluster::{self, value, ImageSpec};
use crate::stats::{cell, leadership_changes_total, machine, median, percentile, r1, r3, unix_now};
use crate::{progress, Env, Report};

/// Parameters of the `failover` scenario.
#[derive(Clone, Debug)]
pub struct FailoverParams {
    pub trials: usize,
    /// Target partition count of the large image (0 = only the empty size).
    pub partitions: u64,
    pub partitions_per_topic: u32,
    pub topics_per_request: usize,
    pub create_concurrency: usize,
    /// Time budget for creating the large image.
    pub create_budget_secs: f64,
    /// Per-attempt timeout of the write retried after the kill.
    pub attempt_timeout_ms: u64,
    /// Give up on one trial after this long.
    pub trial_timeout_secs: f64,
    /// Wait this long for the restarted node to converge.
    pub converge_timeout_secs: f64,
    /// Skip the empty size.
    pub skip_empty: bool,
    /// Every node and client speaks mutual TLS (the kit's certificates;
    /// the writes as the `admin` user).
    pub tls: bool,
}

impl Default for FailoverParams {
    fn default() -> Self {
        Self {
            trials: 10,
            partitions: 1_000_000,
            partitions_per_topic: 100,
            topics_per_request: 50,
            create_concurrency: 4,
            create_budget_secs: 240.0,
            attempt_timeout_ms: 300,
            trial_timeout_secs: 60.0,
            converge_timeout_secs: 180.0,
            skip_empty: false,
            tls: false,
        }
    }
}

const TOPIC: &str = "bench-failover";

/// Creates up to `target` partitions; returns (created, seconds).
async fn create_image(c: &Cluster, p: &FailoverParams, target: u64) -> anyhow::Result<(u64, f64)> {
    let spec = ImageSpec {
        partitions: target,
        partitions_per_topic: p.partitions_per_topic,
        replication_factor: 3,
        replicas: None,
        topics_per_request: p.topics_per_request,
        concurrency: p.create_concurrency,
        budget: Duration::from_secs_f64(p.create_budget_secs),
        prefix: "big".into(),
    };
    let made = cluster::create_image(c, &spec, "failover").await?;
    Ok((made.partitions, made.secs))
}

/// One trial; returns milliseconds from SIGKILL to the first acknowledged write.
async fn trial(c: &mut Cluster, p: &FailoverParams, n: usize) -> anyhow::Result<(f64, u64)> {
    let active = c.wait_active(Duration::from_secs(60)).await?;
    let all = c.client(Duration::from_secs(10), Duration::from_secs(30));
    let warm = all
        .admin(|mut a| async move {
            a.incremental_alter_configs(set_config(TOPIC, "bench.warm".into(), value(n, 0, 100)))
                .await
        })
        .await?;
    if !alter_ok(&warm) {
        bail!("warm-up write refused: {warm:?}");
    }
    let survivors: Vec<String> = (0..3)
        .filter(|&i| i != active)
        .map(|i| c.controller(i).address())
        .collect();
    let attempt = Duration::from_millis(p.attempt_timeout_ms);
    // Retries every 10 ms at most, so the retry schedule does not round the
    // measured time up to its next step.
    let client = ControllerClient::new(survivors)
        .with_transport(c.transport().clone())
        .with_timeouts(attempt, attempt)
        .with_max_backoff(Duration::from_millis(10));
    let t0 = Instant::now();
    c.controller_mut(active).kill();
    let mut attempts = 0u64;
    loop {
        attempts += 1;
        let req = set_config(TOPIC, "bench.failover".into(), value(n, attempts, 100));
        let r = client
            .admin(|mut a| {
                let req = req.clone();
                async move { a.incremental_alter_configs(req).await }
            })
            .await;
        if matches!(&r, Ok(r) if alter_ok(r)) {
            break;
        }
        if t0.elapsed().as_secs_f64() > p.trial_timeout_secs {
            bail!(
                "no write acknowledged within {} s after the kill",
                p.trial_timeout_secs
            );
        }
    }
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    progress!("failover: write acknowledged {ms:.1} ms after the kill ({attempts} attempts); restarting node {}", active + 1);
    c.controller_mut(active).start()?;
    if let Err(e) = c
        .wait_converged(0, Duration::from_secs_f64(p.converge_timeout_secs))
        .await
    {
        bail!("failover took {ms:.1} ms, but then {e:#}");
    }
    Ok((ms, attempts))
}

/// The largest resident memory of the controllers.
fn max_rss(c: &Cluster) -> u64 {
    c.controllers().map(|n| n.rss_bytes()).max().unwrap_or(0)
}

/// Runs all trials on one image size.
async fn run_size(env: &Env, p: &FailoverParams, target: u64) -> anyhow::Result<Value> {
    let over = if p.tls { "mutual TLS" } else { "plaintext" };
    progress!("failover: starting a 3-controller quorum ({over}) on 127.0.2.11-13 (image target: {target} partitions)");
    let mut c =
        cluster::start(cluster::spec(env, 2, &["--session-timeout-ms", "600000"]).tls(p.tls))?;
    c.wait_active(Duration::from_secs(60)).await?;
    let leadership = cluster::Leadership::start(&c).await;
    let client = c.client(Duration::from_secs(10), Duration::from_secs(30));
    for id in 1..=3 {
        cluster::register_stand_in(&c, id).await?;
    }
    admin::create_topic(&client, TOPIC, 1, 3).await?;
    let mut size = json!({ "target_partitions": target });
    let mut created = 0;
    if target > 0 {
        let (n, secs) = create_image(&c, p, target).await?;
        created = n;
        let rate = n as f64 / secs;
        progress!(
            "failover: created {n} of {target} partitions in {secs:.1} s ({rate:.0} partitions/s)"
        );
        if n < target {
            progress!(
                "failover: NOTE only {n} of {target} partitions within the {} s budget; trials run on {n}",
                p.create_budget_secs
            );
        }
        size["create_secs"] = json!(r3(secs));
        size["create_partitions_per_s"] = json!(r1(rate));
    }
    size["partitions"] = json!(created);
    let t = Instant::now();
    let (index, _) = c
        .wait_converged(0, Duration::from_secs_f64(p.converge_timeout_secs))
        .await?;
    progress!(
        "failover: converged at index {index} ({:.1} s); controller RSS {} MB",
        t.elapsed().as_secs_f64(),
        max_rss(&c) >> 20
    );
    size["rss_mb_max"] = json!(max_rss(&c) >> 20);
    let mut trials = Vec::new();
    let mut attempts = Vec::new();
    let mut failures = Vec::new();
    for n in 0..p.trials {
        match trial(&mut c, p, n).await {
            Ok((ms, a)) => {
                progress!(
                    "failover: size {created}: trial {}: {ms:.1} ms ({a} attempts)",
                    n + 1
                );
                trials.push(ms);
                attempts.push(a);
            }
            Err(e) => {
                progress!("failover: size {created}: trial {} failed: {e:#}", n + 1);
                for i in 0..3 {
                    progress!(
                        "failover: controller {} log tail:\n{}",
                        i + 1,
                        c.controller(i).process.log_tail(8)
                    );
                }
                failures.push(format!("{e:#}"));
                // A failed trial leaves the cluster in an unknown state: stop here.
                break;
            }
        }
    }
    size["trials_ms"] = json!(trials.iter().map(|x| r1(*x)).collect::<Vec<_>>());
    size["attempts"] = json!(attempts);
    size["median_ms"] = json!(r1(median(&trials)));
    size["p99_ms"] = json!(r1(percentile(&trials, 99.0)));
    size["min_ms"] = json!(r1(trials.iter().copied().fold(f64::INFINITY, f64::min)));
    size["max_ms"] = json!(r1(trials.iter().copied().fold(0.0, f64::max)));
    if trials.is_empty() {
        size["min_ms"] = json!(0.0);
    }
    size["failures"] = json!(failures);
    // Each trial kills the leader once: one change per trial is the
    // scenario itself; more means extra elections.
    size["leadership_changes"] = leadership.changes(&c).await;
    size["kills"] = json!(trials.len() + failures.len());
    Ok(size)
}

/// Runs the scenario.
pub async fn run(env: &Env, p: &FailoverParams) -> anyhow::Result<Report> {
    let started_at = unix_now();
    let mut sizes = Vec::new();
    if !p.skip_empty {
        sizes.push(run_size(env, p, 0).await?);
    }
    if p.partitions > 0 {
        sizes.push(run_size(env, p, p.partitions).await?);
    }
    let json = json!({
        "scenario": "failover",
        "started_at_unix": started_at,
        "tls": p.tls,
        "parameters": {
            "controllers": 3,
            "trials": p.trials,
            "target_partitions": p.partitions,
            "partitions_per_topic": p.partitions_per_topic,
            "replication_factor": 3,
            "topics_per_request": p.topics_per_request,
            "create_concurrency": p.create_concurrency,
            "create_budget_secs": p.create_budget_secs,
            "attempt_timeout_ms": p.attempt_timeout_ms,
            "stand_in_brokers": 3,
            "session_timeout_ms": 600000,
            "measured": "SIGKILL of the active controller -> first acknowledged IncrementalAlterConfigs through a client bootstrapped with the two survivors",
            "tls": p.tls,
        },
        "leadership_changes": leadership_changes_total(&sizes),
        "sizes": sizes,
        "machine": machine(),
    });
    let mut table = format!(
        "failover (SIGKILL active controller -> first acked write){}\n",
        if p.tls {
            ", mutual TLS on every node and client"
        } else {
            ""
        }
    );
    table += &format!(
        "{:>12} {:>7} {:>10} {:>10} {:>10} {:>10}\n",
        "partitions", "trials", "median ms", "p99 ms", "min ms", "max ms"
    );
    for s in &sizes {
        table += &format!(
            "{:>12} {:>7} {:>10} {:>10} {:>10} {:>10}\n",
            cell(&s["partitions"]),
            s["trials_ms"].as_array().map(|a| a.len()).unwrap_or(0),
            cell(&s["median_ms"]),
            cell(&s["p99_ms"]),
            cell(&s["min_ms"]),
            cell(&s["max_ms"])
        );
        if let Some(rate) = s.get("create_partitions_per_s") {
            table += &format!(
                "{:>12} created {} of {} partitions at {} partitions/s\n",
                "",
                cell(&s["partitions"]),
                cell(&s["target_partitions"]),
                cell(rate)
            );
        }
    }
    let summary = format!(
        "failover{}: median {}",
        if p.tls { " (TLS)" } else { "" },
        sizes
            .iter()
            .map(|s| format!("{} ms at {} partitions", s["median_ms"], s["partitions"]))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(Report {
        scenario: "failover",
        json,
        table,
        summary,
    })
}
