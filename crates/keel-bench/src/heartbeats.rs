//! Scenario `heartbeats`: one active controller (of a 3-node quorum with
//! the default 9 s session timeout) and a load generator in this process
//! simulating N brokers: each registers, is unfenced by a caught-up
//! heartbeat, then heartbeats every 2 s with a random phase through a pool
//! of connections. Per level: heartbeat latency and false fencing (an
//! `is_fenced` answer after the broker was unfenced, or
//! STALE_BROKER_EPOCH / UNKNOWN_BROKER / BROKER_FENCED).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_metadata::ErrorCode;
use keel_proto::pb;
use keel_proto::pb::broker_service_client::BrokerServiceClient;
use rand::Rng;
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tonic::transport::Channel;

use keel_testkit::{probe, Cluster};

use crate::cluster::{self, connect, CLUSTER_ID, STAND_IN_BROKER_ADDRESS};
use crate::stats::{cell, leadership_changes_total, machine, percentile_sorted, r1, r3, unix_now};
use crate::{progress, Env, Report};

/// Parameters of the `heartbeats` scenario.
#[derive(Clone, Debug)]
pub struct HeartbeatParams {
    /// Simulated broker counts, one level each (ascending).
    pub ladder: Vec<usize>,
    /// Measurement window per level (after every broker is registered).
    pub level_secs: f64,
    pub interval_ms: u64,
    /// Connections to the active controller shared by all simulated brokers.
    pub pool: usize,
    /// Registrations in flight at once.
    pub register_concurrency: usize,
    /// Give up on a level whose brokers are not all registered by then.
    pub register_budget_secs: f64,
    pub p99_limit_ms: f64,
    /// Abort a level when a controller's RSS passes this.
    pub rss_limit_bytes: u64,
    /// Abort a level when the machine's available memory drops below this.
    pub min_available_bytes: u64,
    /// Stop the ladder after the first level that is not ok.
    pub stop_on_failure: bool,
}

impl Default for HeartbeatParams {
    fn default() -> Self {
        Self {
            ladder: vec![250, 500, 1_000, 2_500, 5_000, 10_000, 20_000],
            level_secs: 20.0,
            interval_ms: 2_000,
            pool: 16,
            register_concurrency: 256,
            register_budget_secs: 90.0,
            p99_limit_ms: 10.0,
            rss_limit_bytes: 6 << 30,
            min_available_bytes: 4 << 30,
            stop_on_failure: true,
        }
    }
}

#[derive(Default)]
struct Counters {
    stop: AtomicBool,
    measuring: AtomicBool,
    unfenced: AtomicU64,
    failed_registration: AtomicU64,
    fenced_events: AtomicU64,
    fenced_brokers: AtomicU64,
    errors: AtomicU64,
    first_fence: Mutex<Option<String>>,
    first_error: Mutex<Option<String>>,
}

impl Counters {
    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut g) = self.first_error.lock() {
            g.get_or_insert(what);
        }
    }
}

/// What one simulated broker measured inside the window.
#[derive(Default)]
struct BrokerSamples {
    lat_ms: Vec<f32>,
    lag_ms: Vec<f32>,
}

fn is_fencing(code: i32) -> bool {
    code == ErrorCode::StaleBrokerEpoch.as_i32()
        || code == ErrorCode::UnknownBroker.as_i32()
        || code == ErrorCode::BrokerFenced.as_i32()
}

async fn simulated_broker(
    id: u32,
    ch: Channel,
    sem: Arc<Semaphore>,
    k: Arc<Counters>,
    interval: Duration,
) -> BrokerSamples {
    let mut out = BrokerSamples::default();
    let mut c = BrokerServiceClient::new(ch);
    let epoch = {
        let Ok(_permit) = sem.acquire().await else {
            return out;
        };
        if k.stop.load(Ordering::Relaxed) {
            return out;
        }
        let reg = pb::RegisterBrokerRequest {
            broker_id: id,
            incarnation_id: (u128::from(id) + 1_000_000).to_be_bytes().to_vec(),
            cluster_id: CLUSTER_ID.to_string(),
            address: STAND_IN_BROKER_ADDRESS.to_string(),
            rack: None,
            log_dirs: vec![],
            previous_broker_epoch: 0,
            kafka_address: None,
        };
        let epoch = match c.register_broker(reg).await {
            Ok(r) if r.get_ref().error.is_none() => r.get_ref().broker_epoch,
            Ok(r) => {
                k.failed_registration.fetch_add(1, Ordering::Relaxed);
                k.error(format!("register {id}: {:?}", r.get_ref().error));
                return out;
            }
            Err(s) => {
                k.failed_registration.fetch_add(1, Ordering::Relaxed);
                k.error(format!("register {id}: {s}"));
                return out;
            }
        };
        let mut unfenced = false;
        for _ in 0..50 {
            let hb = pb::BrokerHeartbeatRequest {
                broker_id: id,
                broker_epoch: epoch,
                current_metadata_offset: u64::MAX / 2,
                ..Default::default()
            };
            match c.broker_heartbeat(hb).await {
                Ok(r) if r.get_ref().error.is_none() && !r.get_ref().is_fenced => {
                    unfenced = true;
                    break;
                }
                Ok(_) | Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
            if k.stop.load(Ordering::Relaxed) {
                break;
            }
        }
        if !unfenced {
            k.failed_registration.fetch_add(1, Ordering::Relaxed);
            k.error(format!("broker {id} was never unfenced"));
            return out;
        }
        k.unfenced.fetch_add(1, Ordering::Relaxed);
        epoch
    };
    let phase = Duration::from_micros(rand::rng().random_range(0..interval.as_micros() as u64));
    let mut next = tokio::time::Instant::now() + phase;
    let mut fenced_once = false;
    // Bounded: at most one heartbeat per interval, and the run stops via `stop`.
    for _ in 0..100_000u32 {
        // The stop flag is seen at the next tick (at most one interval later).
        tokio::time::sleep_until(next).await;
        if k.stop.load(Ordering::Relaxed) {
            break;
        }
        let now = tokio::time::Instant::now();
        let lag = now.saturating_duration_since(next);
        let hb = pb::BrokerHeartbeatRequest {
            broker_id: id,
            broker_epoch: epoch,
            current_metadata_offset: u64::MAX / 2,
            ..Default::default()
        };
        let t = Instant::now();
        let r = c.broker_heartbeat(hb).await;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        let measuring = k.measuring.load(Ordering::Relaxed);
        match r {
            Ok(r) => {
                let r = r.into_inner();
                let fenced = match &r.error {
                    Some(e) if is_fencing(e.code) => true,
                    Some(e) => {
                        k.error(format!("heartbeat {id}: {e:?}"));
                        false
                    }
                    None => r.is_fenced,
                };
                if fenced {
                    k.fenced_events.fetch_add(1, Ordering::Relaxed);
                    if !fenced_once {
                        fenced_once = true;
                        k.fenced_brokers.fetch_add(1, Ordering::Relaxed);
                        if let Ok(mut g) = k.first_fence.lock() {
                            g.get_or_insert(format!(
                                "broker {id}: {:?} is_fenced={}",
                                r.error, r.is_fenced
                            ));
                        }
                    }
                } else if r.error.is_none() && measuring {
                    out.lat_ms.push(ms as f32);
                    out.lag_ms.push(lag.as_secs_f64() as f32 * 1000.0);
                }
            }
            Err(s) => k.error(format!("heartbeat {id}: {s}")),
        }
        next += interval;
        let now = tokio::time::Instant::now();
        if next < now {
            // Fell a whole interval behind: skip ahead rather than burst.
            next = now;
        }
    }
    out
}

/// Runs one level on a fresh cluster.
async fn run_level(env: &Env, p: &HeartbeatParams, n: usize) -> anyhow::Result<Value> {
    progress!("heartbeats: {n} brokers: starting a 3-controller quorum on 127.0.3.11-13");
    let mut c = cluster::start(cluster::spec(env, 3, &[]))?;
    let active = c.wait_active(Duration::from_secs(60)).await?;
    c.wait_converged(0, Duration::from_secs(30)).await?;
    let leadership = cluster::Leadership::start(&c).await;
    let leader = c.controller(active).address();
    let mut pool = Vec::new();
    for _ in 0..p.pool {
        pool.push(connect(&leader, Duration::from_secs(5)).await?);
    }
    let k = Arc::new(Counters::default());
    let sem = Arc::new(Semaphore::new(p.register_concurrency));
    let interval = Duration::from_millis(p.interval_ms);
    let mut tasks = Vec::with_capacity(n);
    let reg_start = Instant::now();
    for i in 0..n {
        tasks.push(tokio::spawn(simulated_broker(
            i as u32 + 1,
            pool[i % pool.len()].clone(),
            sem.clone(),
            k.clone(),
            interval,
        )));
    }
    let mut rss_max = 0u64;
    let mut abort: Option<String> = None;
    let guard = |c: &mut Cluster, rss_max: &mut u64| -> Option<String> {
        if let Err(e) = c.check_alive() {
            return Some(format!("{e:#}"));
        }
        let rss = c.controllers().map(|n| n.rss_bytes()).max().unwrap_or(0);
        *rss_max = (*rss_max).max(rss);
        if rss > p.rss_limit_bytes {
            return Some(format!(
                "controller RSS {} MB over the {} MB limit",
                rss >> 20,
                p.rss_limit_bytes >> 20
            ));
        }
        let avail = probe::mem_available_bytes();
        if avail < p.min_available_bytes {
            return Some(format!("machine has only {} MB available", avail >> 20));
        }
        None
    };
    let mut last_report = Instant::now();
    let registration_secs;
    loop {
        let done =
            k.unfenced.load(Ordering::Relaxed) + k.failed_registration.load(Ordering::Relaxed);
        if done >= n as u64 {
            registration_secs = reg_start.elapsed().as_secs_f64();
            break;
        }
        if let Some(why) = guard(&mut c, &mut rss_max) {
            abort = Some(why);
            registration_secs = reg_start.elapsed().as_secs_f64();
            break;
        }
        if reg_start.elapsed().as_secs_f64() > p.register_budget_secs {
            abort = Some(format!(
                "only {} of {n} brokers registered and unfenced within {} s",
                k.unfenced.load(Ordering::Relaxed),
                p.register_budget_secs
            ));
            registration_secs = reg_start.elapsed().as_secs_f64();
            break;
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            progress!(
                "heartbeats: {n} brokers: {} unfenced after {:.0} s, controller RSS {} MB",
                k.unfenced.load(Ordering::Relaxed),
                reg_start.elapsed().as_secs_f64(),
                rss_max >> 20
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let registered = k.unfenced.load(Ordering::Relaxed);
    if abort.is_none() && registered < n as u64 {
        abort = Some(format!("{} registrations failed", n as u64 - registered));
    }
    if abort.is_none() {
        progress!(
            "heartbeats: {n} brokers registered in {registration_secs:.1} s; measuring {} s",
            p.level_secs
        );
        k.measuring.store(true, Ordering::Relaxed);
        let w = Instant::now();
        while w.elapsed().as_secs_f64() < p.level_secs {
            if let Some(why) = guard(&mut c, &mut rss_max) {
                abort = Some(why);
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        k.measuring.store(false, Ordering::Relaxed);
    }
    k.stop.store(true, Ordering::Relaxed);
    sem.close();
    let mut lat = Vec::new();
    let mut lag = Vec::new();
    let join_deadline = Instant::now() + Duration::from_secs(15);
    for t in tasks {
        let left = join_deadline.saturating_duration_since(Instant::now());
        let abort_handle = t.abort_handle();
        match tokio::time::timeout(left, t).await {
            Ok(Ok(s)) => {
                lat.extend(s.lat_ms.into_iter().map(f64::from));
                lag.extend(s.lag_ms.into_iter().map(f64::from));
            }
            Ok(Err(_)) => {}
            Err(_) => abort_handle.abort(),
        }
    }
    let log_tail = if abort.is_some() {
        c.controller(active).process.log_tail(5)
    } else {
        String::new()
    };
    let leadership_changes = leadership.changes(&c).await;
    drop(c);
    lat.sort_by(|a, b| a.total_cmp(b));
    lag.sort_by(|a, b| a.total_cmp(b));
    let p99 = percentile_sorted(&lat, 99.0);
    let fenced = k.fenced_events.load(Ordering::Relaxed);
    let ok = abort.is_none() && fenced == 0 && !lat.is_empty() && p99 < p.p99_limit_ms;
    let mut level = json!({
        "brokers": n,
        "registered": registered,
        "registration_secs": r3(registration_secs),
        "heartbeats": lat.len(),
        "heartbeats_per_s": r1(lat.len() as f64 / p.level_secs),
        "p50_ms": r3(percentile_sorted(&lat, 50.0)),
        "p99_ms": r3(p99),
        "max_ms": r3(lat.last().copied().unwrap_or(0.0)),
        "fenced": fenced,
        "fenced_brokers": k.fenced_brokers.load(Ordering::Relaxed),
        "errors": k.errors.load(Ordering::Relaxed),
        "generator_lag_p99_ms": r3(percentile_sorted(&lag, 99.0)),
        "controller_rss_mb_max": rss_max >> 20,
        "leadership_changes": leadership_changes,
        "ok": ok,
    });
    if let Some(why) = &abort {
        level["aborted"] = json!(why);
        if !log_tail.is_empty() {
            level["active_log_tail"] = json!(log_tail);
        }
    }
    if let Ok(g) = k.first_fence.lock() {
        if let Some(f) = g.as_ref() {
            level["first_fence"] = json!(f);
        }
    }
    if let Ok(g) = k.first_error.lock() {
        if let Some(f) = g.as_ref() {
            level["first_error"] = json!(f);
        }
    }
    progress!(
        "heartbeats: {n} brokers: p99 {:.2} ms, fenced {fenced}, errors {}, ok {ok}{}",
        p99,
        k.errors.load(Ordering::Relaxed),
        abort
            .as_ref()
            .map(|a| format!(" (aborted: {a})"))
            .unwrap_or_default()
    );
    Ok(level)
}

/// Runs the scenario.
pub async fn run(env: &Env, p: &HeartbeatParams) -> anyhow::Result<Report> {
    let started_at = unix_now();
    let mut levels = Vec::new();
    for &n in &p.ladder {
        let level = run_level(env, p, n).await?;
        let ok = level["ok"].as_bool().unwrap_or(false);
        levels.push(level);
        if !ok && p.stop_on_failure {
            progress!("heartbeats: stopping the ladder after the first level that is not ok");
            break;
        }
    }
    let max_ok = levels
        .iter()
        .filter(|l| l["ok"].as_bool().unwrap_or(false))
        .filter_map(|l| l["brokers"].as_u64())
        .max()
        .unwrap_or(0);
    let json = json!({
        "scenario": "heartbeats",
        "started_at_unix": started_at,
        "parameters": {
            "controllers": 3,
            "session_timeout_ms": 9000,
            "ladder": p.ladder,
            "level_secs": p.level_secs,
            "interval_ms": p.interval_ms,
            "pool_connections": p.pool,
            "register_concurrency": p.register_concurrency,
            "register_budget_secs": p.register_budget_secs,
            "p99_limit_ms": p.p99_limit_ms,
            "stand_in_broker_address": STAND_IN_BROKER_ADDRESS,
            "note": "latency is measured from send to answer; generator_lag is how late the load generator sent vs. schedule",
        },
        "leadership_changes": leadership_changes_total(&levels),
        "levels": levels,
        "max_brokers_ok": max_ok,
        "machine": machine(),
    });
    let mut table =
        String::from("heartbeats (every 2 s per simulated broker, one active controller)\n");
    table += &format!(
        "{:>8} {:>10} {:>9} {:>9} {:>9} {:>7} {:>7} {:>8} {:>5}\n",
        "brokers", "hb/s", "p50 ms", "p99 ms", "max ms", "fenced", "errors", "RSS MB", "ok"
    );
    for l in &levels {
        table += &format!(
            "{:>8} {:>10} {:>9} {:>9} {:>9} {:>7} {:>7} {:>8} {:>5}\n",
            cell(&l["brokers"]),
            cell(&l["heartbeats_per_s"]),
            cell(&l["p50_ms"]),
            cell(&l["p99_ms"]),
            cell(&l["max_ms"]),
            cell(&l["fenced"]),
            cell(&l["errors"]),
            cell(&l["controller_rss_mb_max"]),
            cell(&l["ok"])
        );
        if let Some(a) = l.get("aborted") {
            table += &format!("{:>8} aborted: {}\n", "", a.as_str().unwrap_or(""));
        }
    }
    let summary = format!(
        "heartbeats: largest N with p99 < {} ms and no false fencing: {max_ok}",
        p.p99_limit_ms
    );
    Ok(Report {
        scenario: "heartbeats",
        json,
        table,
        summary,
    })
}
