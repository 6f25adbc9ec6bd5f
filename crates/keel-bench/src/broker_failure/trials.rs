//! One measured move of leadership off broker 1 (a failure, a controlled
//! shutdown), and the restore of the state every trial starts from.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use keel_proto::pb;
use keel_testkit::Cluster;
use serde_json::Value;

use super::logs::ControllerLogs;
use super::metrics::{queue_p99, scrape, window_quantile_ms};
use super::BrokerFailureParams;
use crate::history::Followers;
use crate::progress;

/// What the active controller logs when a broker's session expires, before
/// it decides the fence.
const EXPIRY_LINE: &str = "broker session expired; fencing it";

/// What a trial watches, carried from one to the next.
pub struct Watch {
    pub logs: ControllerLogs,
    pub followers: Followers,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Broker 1's index in [`Cluster::nodes`]: the node that may exit while
/// its leadership moves.
fn broker_1(c: &Cluster) -> [usize; 1] {
    [c.controller_count()]
}

async fn describe(c: &Cluster, i: usize) -> anyhow::Result<pb::DescribeNodeResponse> {
    c.describe_node(i, Duration::from_millis(1500))
        .await
        .ok_or_else(|| anyhow!("controller {} did not answer DescribeNode", i + 1))
}

pub struct FailureTrial {
    pub ms: f64,
    /// The controller's "broker session expired; fencing it" line (logged
    /// when it starts deciding the fence) -> the same last acceptance: the
    /// failure end to end, deciding and committing the moves included.
    pub expiry_ms: f64,
    /// The expiry line -> the "broker fenced" line (decide and commit).
    pub expiry_to_fence_ms: f64,
    pub detect_ms: f64,
    pub first_accept_ms: f64,
    pub raft_entries: u64,
    pub fence_batch_entries: u64,
    pub term_changed: bool,
    pub queue_p99_ms: Option<f64>,
    pub queue_method: &'static str,
    pub queue_detail: Value,
    pub commit_p99_ms: Option<f64>,
    pub process_max_ms: Option<f64>,
    pub per_broker_last_ms: Vec<f64>,
}

/// SIGKILL broker 1; from the fence the active controller logs to the
/// last acceptance on brokers 2 and 3.
pub async fn failure(
    c: &mut Cluster,
    w: &mut Watch,
    p: &BrokerFailureParams,
) -> anyhow::Result<FailureTrial> {
    let timeout = Duration::from_secs_f64(p.move_timeout_secs);
    let active = c.wait_active(Duration::from_secs(30)).await?;
    let metrics_at = c
        .controller(active)
        .metrics_addr
        .ok_or_else(|| anyhow!("controller {} has no metrics listener", active + 1))?;
    let before_metrics = scrape(metrics_at).await?;
    let before = describe(c, active).await?;
    w.logs.mark();
    w.followers.begin(false);
    let kill_ms = now_ms();
    c.broker_mut(0).kill();
    let deadline = Instant::now() + timeout;
    let fence = loop {
        w.logs.poll();
        if let Some(e) = w.logs.find(active, "broker fenced", 1) {
            break e;
        }
        c.check_alive_except(&broker_1(c))?;
        if Instant::now() >= deadline {
            bail!(
                "controller {} logged no \"broker fenced\" for broker 1 within {timeout:?}",
                active + 1
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let except = broker_1(c);
    let (first, last) = w
        .followers
        .wait(c, p.partitions, timeout, &except, "failure")
        .await?;
    let after = describe(c, active).await?;
    let after_metrics = scrape(metrics_at).await?;
    let fence_index = fence.fields.get("index").and_then(Value::as_u64);
    let (queue_p99_ms, queue_method, queue_detail) = queue_p99(&before_metrics, &after_metrics);
    // Logged before the fence is decided, so present once the fence is.
    let expiry = w.logs.find(active, EXPIRY_LINE, 1).ok_or_else(|| {
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
        fence_batch_entries: fence_index
            .unwrap_or(0)
            .saturating_sub(before.last_applied_index),
        term_changed: after.term != before.term,
        queue_p99_ms,
        queue_method,
        queue_detail,
        commit_p99_ms: window_quantile_ms(
            &before_metrics,
            &after_metrics,
            "keel_controller_commit_latency_seconds",
            0.99,
        ),
        process_max_ms: window_quantile_ms(
            &before_metrics,
            &after_metrics,
            "keel_controller_event_process_time_seconds",
            1.0,
        ),
        per_broker_last_ms: w
            .followers
            .lasts()
            .iter()
            .map(|l| *l as f64 - fence.at_ms)
            .collect(),
    })
}

pub struct ShutdownTrial {
    pub ms: f64,
    /// SIGTERM -> the controller's "broker in controlled shutdown" line.
    pub to_shutdown_record_ms: Option<f64>,
    pub first_accept_ms: f64,
    pub raft_entries: u64,
    pub exit_ms: Option<f64>,
}

/// SIGTERM broker 1; from the signal to the last acceptance on brokers 2
/// and 3.
pub async fn shutdown(
    c: &mut Cluster,
    w: &mut Watch,
    p: &BrokerFailureParams,
) -> anyhow::Result<ShutdownTrial> {
    let timeout = Duration::from_secs_f64(p.move_timeout_secs);
    let active = c.wait_active(Duration::from_secs(30)).await?;
    let before = describe(c, active).await?;
    w.logs.mark();
    w.followers.begin(false);
    // Taken just before the signal is sent.
    let term_ms = now_ms();
    if !c.broker(0).process.terminate() {
        bail!("SIGTERM to broker 1 failed");
    }
    let except = broker_1(c);
    let (first, last) = w
        .followers
        .wait(c, p.partitions, timeout, &except, "controlled shutdown")
        .await?;
    let after = c.describe_node(active, Duration::from_millis(1500)).await;
    w.logs.poll();
    let record = w.logs.find(active, "broker in controlled shutdown", 1);
    // The broker exits once the controller allows it (bounded by its own 30 s).
    let deadline = Instant::now() + Duration::from_secs(45);
    let exit_ms = loop {
        if c.broker_mut(0).process.exited().is_some() {
            break Some((now_ms() - term_ms) as f64);
        }
        if !c.broker(0).running() {
            break None;
        }
        if Instant::now() >= deadline {
            progress!("broker-failure: broker 1 did not exit within 45 s of SIGTERM; killing it");
            c.broker_mut(0).kill();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    Ok(ShutdownTrial {
        ms: (last - term_ms) as f64,
        to_shutdown_record_ms: record.map(|e| e.at_ms - term_ms as f64),
        first_accept_ms: (first - term_ms) as f64,
        raft_entries: after.map_or(0, |a| {
            a.last_applied_index
                .saturating_sub(before.last_applied_index)
        }),
        exit_ms,
    })
}

/// Preferred election of every partition until none is left to move
/// (broker 1 must first be back in the ISRs); bounded.
async fn elect_preferred(c: &mut Cluster, timeout: Duration) -> anyhow::Result<u64> {
    let client = c.client(Duration::from_secs(30), Duration::from_secs(90));
    let deadline = Instant::now() + timeout;
    let mut rounds = 0u64;
    let not_needed = pb::ErrorCode::ElectionNotNeeded as i32;
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
                    .filter(|x| x.error.as_ref().is_some_and(|e| e.code != not_needed));
                if pending.count() == 0 {
                    return Ok(rounds);
                }
            }
            Ok(r) => progress!("broker-failure: ElectLeaders refused: {:?}", r.error),
            Err(e) => progress!("broker-failure: ElectLeaders failed: {e}"),
        }
        c.check_alive()?;
        if Instant::now() >= deadline {
            bail!("preferred leaders not all elected within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Brings broker 1 back (if down) and makes it lead every partition again,
/// as brokers 2 and 3 see it.
pub async fn restore(
    c: &mut Cluster,
    w: &mut Watch,
    p: &BrokerFailureParams,
) -> anyhow::Result<()> {
    let t = Instant::now();
    let timeout = Duration::from_secs_f64(p.restore_timeout_secs);
    w.followers.begin(true);
    if !c.broker(0).running() {
        c.broker_mut(0).start()?;
    }
    c.wait_brokers_unfenced(3, timeout).await?;
    let rounds = elect_preferred(c, timeout).await?;
    w.followers
        .wait(c, p.partitions, timeout, &[], "restore")
        .await?;
    progress!(
        "broker-failure: broker 1 leads all {} partitions again ({rounds} election rounds, {:.1} s)",
        p.partitions,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
