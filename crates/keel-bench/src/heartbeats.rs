//! Scenario `heartbeats`: one active controller (of a 3-node quorum with
//! the default 9 s session timeout) and a load generator in this process
//! standing in for N brokers, each as a real broker is seen by the
//! controller: an address of its own (`127.1.x.y`), its own connection to
//! the active controller for registration and heartbeats (from that
//! address), and its own listener serving the controller's channel
//! (LeaderAndIsr, UpdateMetadata, StopReplica, each answered with success
//! and its controller epoch recorded). Each registers, is unfenced by a
//! caught-up heartbeat, then heartbeats every 2 s with a random phase.
//! Per level: heartbeat latency and false fencing (an `is_fenced` answer
//! after the broker was unfenced, or STALE_BROKER_EPOCH / UNKNOWN_BROKER /
//! BROKER_FENCED), the active controller's CPU and resident memory per
//! broker, and a failover: the active controller is killed and the
//! scenario measures how long the new one takes to give every broker a
//! fresh session (a heartbeat it answers, and a request of its channel
//! stamped with its controller epoch). `--pool N` goes back to N shared
//! connections and no listeners (the stand-ins of earlier runs), for a
//! comparison.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use keel_metadata::ErrorCode;
use keel_proto::backoff::Backoff;
use keel_proto::pb;
use keel_proto::pb::broker_control_service_server::{
    BrokerControlService, BrokerControlServiceServer,
};
use keel_proto::pb::broker_service_client::BrokerServiceClient;
use keel_tls::{Expect, Transport};
use rand::Rng;
use serde_json::{json, Value};
use tokio::sync::{watch, Semaphore};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

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
    /// `None`: every simulated broker has its own connection to the active
    /// controller and its own listener for the controller's channel.
    /// `Some(n)`: n connections shared by all, and no listeners (the
    /// channels' address refuses connections).
    pub pool: Option<usize>,
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
    /// Kill the active controller after each level's window and measure
    /// how long its successor takes to give every broker a fresh session.
    pub failover: bool,
    /// How long that may take before the level gives up on it.
    pub failover_budget_secs: f64,
}

impl Default for HeartbeatParams {
    fn default() -> Self {
        Self {
            ladder: vec![250, 500, 1_000, 2_500, 5_000, 10_000, 20_000],
            level_secs: 20.0,
            interval_ms: 2_000,
            pool: None,
            register_concurrency: 256,
            register_budget_secs: 90.0,
            p99_limit_ms: 10.0,
            rss_limit_bytes: 6 << 30,
            min_available_bytes: 4 << 30,
            stop_on_failure: true,
            failover: true,
            failover_budget_secs: 60.0,
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
    /// Set while the active controller is being replaced: heartbeat
    /// errors then are expected and counted apart.
    failing_over: AtomicBool,
    failover_errors: AtomicU64,
    failover_fenced: AtomicU64,
}

impl Counters {
    fn error(&self, what: String) {
        if self.failing_over.load(Ordering::Relaxed) {
            self.failover_errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
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

/// A stand-in broker's control listener: what the controller's channel
/// sent it.
#[derive(Default)]
struct Control {
    /// The highest controller epoch of a request it answered.
    epoch: AtomicU64,
    /// When `epoch` last rose.
    epoch_rose_at: Mutex<Option<Instant>>,
    requests: AtomicU64,
}

impl Control {
    fn saw(&self, stamp: Option<&pb::ControllerStamp>) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let Some(stamp) = stamp else {
            return;
        };
        let before = self
            .epoch
            .fetch_max(stamp.controller_epoch, Ordering::Relaxed);
        if stamp.controller_epoch > before {
            if let Ok(mut at) = self.epoch_rose_at.lock() {
                *at = Some(Instant::now());
            }
        }
    }

    /// When a request of epoch above `old` first came, if one did.
    fn fresh_since(&self, old: u64) -> Option<Instant> {
        if self.epoch.load(Ordering::Relaxed) <= old {
            return None;
        }
        self.epoch_rose_at.lock().ok().and_then(|at| *at)
    }
}

/// Answers the controller's channel as a broker that accepts everything.
struct StandIn(Arc<Control>);

#[tonic::async_trait]
impl BrokerControlService for StandIn {
    async fn leader_and_isr(
        &self,
        request: Request<pb::LeaderAndIsrRequest>,
    ) -> Result<Response<pb::LeaderAndIsrResponse>, Status> {
        self.0.saw(request.get_ref().stamp.as_ref());
        Ok(Response::new(pb::LeaderAndIsrResponse::default()))
    }

    async fn update_metadata(
        &self,
        request: Request<pb::UpdateMetadataRequest>,
    ) -> Result<Response<pb::UpdateMetadataResponse>, Status> {
        self.0.saw(request.get_ref().stamp.as_ref());
        Ok(Response::new(pb::UpdateMetadataResponse::default()))
    }

    async fn stop_replica(
        &self,
        request: Request<pb::StopReplicaRequest>,
    ) -> Result<Response<pb::StopReplicaResponse>, Status> {
        self.0.saw(request.get_ref().stamp.as_ref());
        Ok(Response::new(pb::StopReplicaResponse::default()))
    }

    async fn describe_broker(
        &self,
        _: Request<pb::DescribeBrokerRequest>,
    ) -> Result<Response<pb::DescribeBrokerResponse>, Status> {
        Err(Status::unimplemented("a stand-in broker keeps no state"))
    }
}

/// Simulated broker `id`'s own address: `127.1.x.y`, 250 per /24.
fn broker_ip(id: u32) -> IpAddr {
    let i = id - 1;
    IpAddr::V4(Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250 + 1) as u8))
}

/// Serves the controller's channel for one stand-in on its own address
/// until `stop` turns true; returns the address it listens on.
async fn serve_control(
    ip: IpAddr,
    control: Arc<Control>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, 0)).await?;
    let addr = listener.local_addr()?;
    let service =
        BrokerControlServiceServer::new(StandIn(control)).max_decoding_message_size(256 << 20);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                async move {
                    let _ = stop.wait_for(|v| *v).await;
                },
            ),
    );
    Ok(addr)
}

/// How a simulated broker reaches the active controller.
#[derive(Clone)]
enum Route {
    /// A connection of a shared pool.
    Pooled(Channel),
    /// Its own connection from `ip`, to whichever controller `active`
    /// names; redialed when that changes.
    Own {
        ip: IpAddr,
        active: watch::Receiver<String>,
    },
}

/// The broker's client and the controller address it speaks to.
struct Link {
    route: Route,
    to: String,
    client: Option<BrokerServiceClient<Channel>>,
}

impl Link {
    fn new(route: Route) -> Self {
        let client = match &route {
            Route::Pooled(ch) => Some(BrokerServiceClient::new(ch.clone())),
            Route::Own { .. } => None,
        };
        Self {
            route,
            to: String::new(),
            client,
        }
    }

    /// The client, (re)connected to the active controller when this
    /// broker has its own connection and the active controller changed
    /// (or no connection is up).
    async fn client(&mut self) -> Result<&mut BrokerServiceClient<Channel>, String> {
        if let Route::Own { ip, active } = &self.route {
            let now = active.borrow().clone();
            if self.client.is_none() || now != self.to {
                let ep = keel_tls::transport::endpoint(&now)
                    .map_err(|e| e.to_string())?
                    .connect_timeout(Duration::from_secs(5))
                    .timeout(Duration::from_secs(30));
                let ch = Transport::Plaintext
                    .connect(ep, Some(*ip), Expect::Controller)
                    .await
                    .map_err(|e| format!("connect to {now}: {e}"))?;
                self.client = Some(BrokerServiceClient::new(ch));
                self.to = now;
            }
        }
        self.client
            .as_mut()
            .ok_or_else(|| "no connection".to_string())
    }

    /// Forgets an own connection after a transport error, so the next
    /// call dials again.
    fn failed(&mut self) {
        if matches!(self.route, Route::Own { .. }) {
            self.client = None;
        }
    }

    /// The controller this broker's last call went to.
    fn to(&self) -> &str {
        &self.to
    }
}

/// When each simulated broker last had a heartbeat answered, and by whom.
#[derive(Default)]
struct Answered {
    at: Mutex<Option<(Instant, String)>>,
}

fn is_fencing(code: i32) -> bool {
    code == ErrorCode::StaleBrokerEpoch.as_i32()
        || code == ErrorCode::UnknownBroker.as_i32()
        || code == ErrorCode::BrokerFenced.as_i32()
}

async fn simulated_broker(
    id: u32,
    route: Route,
    address: String,
    sem: Arc<Semaphore>,
    k: Arc<Counters>,
    interval: Duration,
    answered: Arc<Answered>,
) -> BrokerSamples {
    let mut out = BrokerSamples::default();
    let mut link = Link::new(route);
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
            address,
            rack: None,
            log_dirs: vec![],
            previous_broker_epoch: 0,
            kafka_address: None,
        };
        let c = match link.client().await {
            Ok(c) => c,
            Err(e) => {
                k.failed_registration.fetch_add(1, Ordering::Relaxed);
                k.error(format!("register {id}: {e}"));
                return out;
            }
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
            let answer = match link.client().await {
                Ok(c) => c.broker_heartbeat(hb).await.map_err(|s| s.to_string()),
                Err(e) => Err(e),
            };
            match answer {
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
    // As a broker does: a failed heartbeat is retried after 50 ms, doubling
    // up to 1 s, not an interval later.
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    // Bounded: at most one heartbeat per retry delay, and the run stops via `stop`.
    for _ in 0..1_000_000u32 {
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
        let r = match link.client().await {
            Ok(c) => c.broker_heartbeat(hb).await.map_err(|s| s.to_string()),
            Err(e) => Err(e),
        };
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        let measuring = k.measuring.load(Ordering::Relaxed);
        let mut retry = true;
        match r {
            Ok(r) => {
                let r = r.into_inner();
                let fenced = match &r.error {
                    Some(e) if is_fencing(e.code) => true,
                    Some(e) => {
                        if e.code == ErrorCode::NotController.as_i32() {
                            link.failed();
                        }
                        k.error(format!("heartbeat {id}: {e:?}"));
                        false
                    }
                    None => r.is_fenced,
                };
                if r.error.is_none() && !fenced {
                    retry = false;
                    if let Ok(mut a) = answered.at.lock() {
                        *a = Some((Instant::now(), link.to().to_string()));
                    }
                }
                if fenced && k.failing_over.load(Ordering::Relaxed) {
                    k.failover_fenced.fetch_add(1, Ordering::Relaxed);
                } else if fenced {
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
            Err(s) => {
                link.failed();
                k.error(format!("heartbeat {id}: {s}"));
            }
        }
        if retry {
            next = tokio::time::Instant::now() + backoff.step();
            continue;
        }
        backoff.reset();
        next += interval;
        let now = tokio::time::Instant::now();
        if next < now {
            // Fell a whole interval behind: skip ahead rather than burst.
            next = now;
        }
    }
    out
}

/// Stand-ins' listeners and their records, or the refusing address of
/// pooled stand-ins.
struct StandIns {
    controls: Vec<Arc<Control>>,
    addresses: Vec<String>,
    stop: watch::Sender<bool>,
}

impl StandIns {
    /// `n` listeners, one per stand-in on its own address (none when
    /// `pooled`).
    async fn start(n: usize, pooled: bool) -> anyhow::Result<Self> {
        let (stop, stop_rx) = watch::channel(false);
        let mut out = Self {
            controls: Vec::with_capacity(n),
            addresses: Vec::with_capacity(n),
            stop,
        };
        for id in 1..=n as u32 {
            let control = Arc::new(Control::default());
            let address = if pooled {
                STAND_IN_BROKER_ADDRESS.to_string()
            } else {
                serve_control(broker_ip(id), control.clone(), stop_rx.clone())
                    .await
                    .map_err(|e| anyhow::anyhow!("listener of stand-in broker {id}: {e}"))?
                    .to_string()
            };
            out.controls.push(control);
            out.addresses.push(address);
        }
        Ok(out)
    }

    fn requests(&self) -> u64 {
        self.controls
            .iter()
            .map(|c| c.requests.load(Ordering::Relaxed))
            .sum()
    }

    fn max_epoch(&self) -> u64 {
        self.controls
            .iter()
            .map(|c| c.epoch.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }
}

impl Drop for StandIns {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// The active controller's CPU over a window: (% of one core, ticks).
fn cpu_between(before: Option<u64>, after: Option<u64>, secs: f64) -> Option<(f64, u64)> {
    let ticks = after?.checked_sub(before?)?;
    // /proc reports 100 ticks a second.
    Some((ticks as f64 / 100.0 / secs * 100.0, ticks))
}

/// Kills the active controller `active` and measures how long its
/// successor takes to give every stand-in a fresh session: a heartbeat
/// answered by it, and a request of its channel stamped with a higher
/// controller epoch than any before.
async fn failover(
    c: &mut Cluster,
    active: usize,
    p: &HeartbeatParams,
    k: &Counters,
    stand_ins: &StandIns,
    answered: &[Arc<Answered>],
    active_tx: &watch::Sender<String>,
) -> Value {
    let old_epoch = stand_ins.max_epoch();
    k.failing_over.store(true, Ordering::Relaxed);
    progress!(
        "heartbeats: killing the active controller (node {})",
        active + 1
    );
    let t0 = Instant::now();
    c.controller_mut(active).kill();
    let budget = Duration::from_secs_f64(p.failover_budget_secs);
    let mut new_active = None;
    while new_active.is_none() && t0.elapsed() < budget {
        for i in (0..c.controller_count()).filter(|i| *i != active) {
            if c.describe_node(i, Duration::from_millis(500))
                .await
                .is_some_and(|d| d.active_controller)
            {
                new_active = Some(i);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let Some(new_active) = new_active else {
        k.failing_over.store(false, Ordering::Relaxed);
        return json!({"error": format!("no new active controller within {budget:?}")});
    };
    let elected_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let new_addr = c.controller(new_active).address();
    let _ = active_tx.send(new_addr.clone());
    let n = answered.len();
    let mut channel_at: Vec<Option<Instant>> = vec![None; n];
    let mut heartbeat_at: Vec<Option<Instant>> = vec![None; n];
    loop {
        for i in 0..n {
            if channel_at[i].is_none() {
                channel_at[i] = stand_ins.controls[i].fresh_since(old_epoch);
            }
            if heartbeat_at[i].is_none() {
                heartbeat_at[i] = answered[i]
                    .at
                    .lock()
                    .ok()
                    .and_then(|a| a.clone())
                    .filter(|(at, to)| *at > t0 && *to == new_addr)
                    .map(|(at, _)| at);
            }
        }
        let done = channel_at.iter().chain(&heartbeat_at).all(Option::is_some);
        if done || t0.elapsed() >= budget {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    k.failing_over.store(false, Ordering::Relaxed);
    let ms = |at: &[Option<Instant>]| {
        let mut v: Vec<f64> = at
            .iter()
            .flatten()
            .map(|t| t.saturating_duration_since(t0).as_secs_f64() * 1000.0)
            .collect();
        v.sort_by(|a, b| a.total_cmp(b));
        v
    };
    let fresh: Vec<Option<Instant>> = channel_at
        .iter()
        .zip(&heartbeat_at)
        .map(|(a, b)| Some((*a)?.max((*b)?)))
        .collect();
    let (chan, hb, all) = (ms(&channel_at), ms(&heartbeat_at), ms(&fresh));
    let summary = |v: &[f64]| {
        json!({
            "brokers": v.len(),
            "p50_ms": r1(percentile_sorted(v, 50.0)),
            "p99_ms": r1(percentile_sorted(v, 99.0)),
            "max_ms": r1(v.last().copied().unwrap_or(0.0)),
        })
    };
    let fenced = k.failover_fenced.load(Ordering::Relaxed);
    progress!(
        "heartbeats: new active controller after {elected_ms:.0} ms; every broker's session fresh after {:.0} ms ({} of {n}), fenced {fenced}",
        all.last().copied().unwrap_or(0.0),
        all.len()
    );
    json!({
        "killed_node": active + 1,
        "new_active_node": new_active + 1,
        "old_controller_epoch": old_epoch,
        "new_active_after_ms": r1(elected_ms),
        "channel_request_of_new_epoch": summary(&chan),
        "heartbeat_answered_by_new_active": summary(&hb),
        "fresh_session": summary(&all),
        "all_fresh_ms": if all.len() == n { json!(r1(all.last().copied().unwrap_or(0.0))) } else { Value::Null },
        "not_fresh": n - all.len(),
        "fenced": fenced,
        "errors_while_failing_over": k.failover_errors.load(Ordering::Relaxed),
    })
}

/// Runs one level on a fresh cluster.
async fn run_level(env: &Env, p: &HeartbeatParams, n: usize) -> anyhow::Result<Value> {
    progress!("heartbeats: {n} brokers: starting a 3-controller quorum on 127.0.3.11-13");
    let mut c = cluster::start(cluster::spec(env, 3, &[]))?;
    let active = c.wait_active(Duration::from_secs(60)).await?;
    c.wait_converged(0, Duration::from_secs(30)).await?;
    let leadership = cluster::Leadership::start(&c).await;
    let leader = c.controller(active).address();
    let rss_base = c.controller(active).rss_bytes();
    let (active_tx, active_rx) = watch::channel(leader.clone());
    let mut pool = Vec::new();
    for _ in 0..p.pool.unwrap_or(0) {
        pool.push(connect(&leader, Duration::from_secs(5)).await?);
    }
    if p.pool.is_none() {
        progress!("heartbeats: {n} brokers: a listener each on 127.1.x.y");
    }
    let stand_ins = StandIns::start(n, p.pool.is_some()).await?;
    let k = Arc::new(Counters::default());
    let sem = Arc::new(Semaphore::new(p.register_concurrency));
    let interval = Duration::from_millis(p.interval_ms);
    let mut tasks = Vec::with_capacity(n);
    let answered: Vec<Arc<Answered>> = (0..n).map(|_| Arc::default()).collect();
    let reg_start = Instant::now();
    for i in 0..n {
        let id = i as u32 + 1;
        let route = if pool.is_empty() {
            Route::Own {
                ip: broker_ip(id),
                active: active_rx.clone(),
            }
        } else {
            Route::Pooled(pool[i % pool.len()].clone())
        };
        tasks.push(tokio::spawn(simulated_broker(
            id,
            route,
            stand_ins.addresses[i].clone(),
            sem.clone(),
            k.clone(),
            interval,
            answered[i].clone(),
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
    let mut cpu = None;
    let mut rss_end = 0;
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
        let cpu_before = c.controller(active).cpu_ticks();
        while w.elapsed().as_secs_f64() < p.level_secs {
            if let Some(why) = guard(&mut c, &mut rss_max) {
                abort = Some(why);
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        k.measuring.store(false, Ordering::Relaxed);
        cpu = cpu_between(
            cpu_before,
            c.controller(active).cpu_ticks(),
            w.elapsed().as_secs_f64(),
        );
        rss_end = c.controller(active).rss_bytes();
    }
    let channel_requests = stand_ins.requests();
    // Before the failover, which changes the leadership on purpose.
    let leadership_changes = leadership.changes(&c).await;
    let failover = if abort.is_none() && p.failover && p.pool.is_none() {
        Some(failover(&mut c, active, p, &k, &stand_ins, &answered, &active_tx).await)
    } else {
        None
    };
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
    drop(stand_ins);
    let log_tail = if abort.is_some() {
        c.controller(active).process.log_tail(5)
    } else {
        String::new()
    };
    drop(c);
    lat.sort_by(|a, b| a.total_cmp(b));
    lag.sort_by(|a, b| a.total_cmp(b));
    let p99 = percentile_sorted(&lat, 99.0);
    let fenced = k.fenced_events.load(Ordering::Relaxed);
    let failover_fenced = k.failover_fenced.load(Ordering::Relaxed);
    let ok = abort.is_none()
        && fenced == 0
        && failover_fenced == 0
        && !lat.is_empty()
        && p99 < p.p99_limit_ms;
    let heartbeats = lat.len();
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
        "controller_rss_mb_before_brokers": rss_base >> 20,
        "controller_rss_kb_per_broker": (rss_end > 0).then(|| r1(rss_end.saturating_sub(rss_base) as f64 / 1024.0 / n as f64)),
        "controller_cpu_pct": cpu.map(|(pct, _)| r1(pct)),
        "controller_cpu_us_per_heartbeat": cpu.filter(|_| heartbeats > 0).map(|(_, ticks)| r1(ticks as f64 * 10_000.0 / heartbeats as f64)),
        "controller_cpu_us_per_broker_per_s": cpu.map(|(pct, _)| r3(pct * 10_000.0 / n as f64)),
        "channel_requests": channel_requests,
        "failover": failover,
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

/// Descriptors kept for the controllers' own files and everything else.
const FD_SPARE: u64 = 4_096;

/// Open files `n` stand-in brokers need here: three each with their own
/// connections (their listener, their connection, the controller's
/// connection to the listener), one each pooled.
fn fds_needed(n: usize, pool: Option<usize>) -> u64 {
    let per = if pool.is_some() { 1 } else { 3 };
    per * n as u64 + FD_SPARE
}

/// Runs the scenario.
pub async fn run(env: &Env, p: &HeartbeatParams) -> anyhow::Result<Report> {
    let started_at = unix_now();
    // Three descriptors per stand-in here (its listener, its connection,
    // the controller's connection to its listener) and two per broker in
    // the controller, which inherits this limit and raises its soft limit
    // to it.
    let top = p.ladder.iter().copied().max().unwrap_or(0);
    let fd_limit = crate::stats::raise_fd_limit(fds_needed(top, p.pool));
    let disk = crate::stats::disk_probe(&std::env::temp_dir());
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut levels = Vec::new();
    for &n in &p.ladder {
        let need = fds_needed(n, p.pool);
        if fd_limit.is_some_and(|limit| limit < need) {
            let why = format!(
                "needs {need} open files (3 per stand-in broker and {FD_SPARE} more), the limit is {} and this process cannot raise it",
                fd_limit.unwrap_or(0)
            );
            progress!("heartbeats: {n} brokers: skipped: {why}");
            levels.push(json!({ "brokers": n, "ok": false, "skipped": true, "aborted": why }));
            if p.stop_on_failure {
                break;
            }
            continue;
        }
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
            "connections": if p.pool.is_some() { "pooled: shared connections, no listeners" } else { "own: a connection and a listener per stand-in broker, each on its own 127.1.x.y address" },
            "fd_limit": fd_limit,
            "failover": p.failover && p.pool.is_none(),
            "register_concurrency": p.register_concurrency,
            "register_budget_secs": p.register_budget_secs,
            "p99_limit_ms": p.p99_limit_ms,
            "stand_in_broker_address": if p.pool.is_some() { STAND_IN_BROKER_ADDRESS } else { "127.1.x.y, its own" },
            "note": "latency is measured from send to answer; generator_lag is how late the load generator sent vs. schedule",
        },
        "leadership_changes": leadership_changes_total(&levels),
        "levels": levels,
        "max_brokers_ok": max_ok,
        "machine": machine(),
        "disk_probe": disk,
        "load_average_before": load_before.trim(),
        "load_average_after": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
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
    table += &crate::stats::disk_probe_line(&json["disk_probe"]);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stand_in_with_its_own_connection_needs_three_open_files() {
        assert_eq!(fds_needed(10_000, None), 30_000 + FD_SPARE);
        assert_eq!(fds_needed(10_000, Some(16)), 10_000 + FD_SPARE);
    }

    #[test]
    fn every_stand_in_has_an_address_of_its_own_on_loopback() {
        let ips: std::collections::HashSet<IpAddr> = (1..=20_000).map(broker_ip).collect();
        assert_eq!(ips.len(), 20_000);
        assert!(ips.iter().all(|ip| match ip {
            IpAddr::V4(v4) => v4.octets()[0] == 127 && v4.octets()[1] == 1 && v4.octets()[3] != 0,
            IpAddr::V6(_) => false,
        }));
    }

    #[test]
    fn a_session_is_fresh_only_after_a_request_of_a_higher_controller_epoch() {
        let c = Control::default();
        let stamp = |epoch| pb::ControllerStamp {
            controller_id: 1,
            controller_epoch: epoch,
            broker_epoch: 7,
        };
        c.saw(Some(&stamp(2)));
        assert!(c.fresh_since(2).is_none(), "the old controller's epoch");
        c.saw(None);
        assert!(c.fresh_since(2).is_none());
        c.saw(Some(&stamp(3)));
        let fresh = c.fresh_since(2).expect("epoch 3 came");
        // An old controller's late request does not move it.
        c.saw(Some(&stamp(2)));
        assert_eq!(c.fresh_since(2), Some(fresh));
        assert_eq!(c.requests.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn cpu_is_a_share_of_one_core() {
        assert_eq!(cpu_between(Some(100), Some(300), 4.0), Some((50.0, 200)));
        assert_eq!(cpu_between(None, Some(300), 4.0), None);
        assert_eq!(cpu_between(Some(300), Some(100), 4.0), None);
    }
}
