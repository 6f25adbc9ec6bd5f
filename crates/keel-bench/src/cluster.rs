//! How the bench starts its clusters with the cluster kit
//! ([`keel_testkit::Cluster`]): controller `i` on `127.0.<subnet>.<11+i>`,
//! broker `i` on `127.0.<subnet>.<21+i>`, free ports, a temp dir, and the
//! bench's environment knobs:
//!
//! - `KEEL_BENCH_CONTROLLER_ARGS`: flags added to every controller (split
//!   on whitespace, after the scenario's own), to try a setting in any
//!   scenario without a code change;
//! - `KEEL_BENCH_KEEP=1` (or `KEEL_BENCH_KEEP_DIR=1`): keep the cluster's
//!   data and logs for a post-mortem;
//! - `KEEL_BENCH_LOG`: the controllers' and brokers' log filter;
//! - `KEEL_BENCH_METRICS=1`: each controller serves its Prometheus metrics
//!   on port 9464 of its own address, for a look during the run.
//!
//! Also here: the large images scenarios create through the admin API, and
//! the values every write carries.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use keel_proto::client::ControllerClient;
use keel_proto::pb;
use keel_testkit::{admin, Cluster, Root, Spec};
use keel_tls::{Expect, Transport};
use tonic::transport::{Channel, Endpoint};

use crate::{progress, Env};

/// The cluster id every bench cluster uses.
pub const CLUSTER_ID: &str = "keel-bench";

/// Address of every stand-in broker: nothing listens there, so the
/// controller's channels to them fail fast (connection refused) and retry.
pub const STAND_IN_BROKER_ADDRESS: &str = "127.0.4.1:9";

/// Port of the controllers' metrics listener with `KEEL_BENCH_METRICS=1`.
const METRICS_PORT: u16 = 9464;

fn env_on(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Three controllers on `127.0.<subnet>.11-13` with `flags` and the
/// environment's; brokers, if the scenario adds them, on `.21-`.
pub fn spec(env: &Env, subnet: u8, flags: &[&str]) -> Spec {
    let extra: Vec<String> = std::env::var("KEEL_BENCH_CONTROLLER_ARGS")
        .map(|v| v.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();
    let log = std::env::var("KEEL_BENCH_LOG").ok();
    Spec::new(&env.exe, CLUSTER_ID)
        .subnet(subnet)
        .root(Root::Temp {
            prefix: "keel-bench-".into(),
            keep: env_on("KEEL_BENCH_KEEP") || env_on("KEEL_BENCH_KEEP_DIR"),
        })
        // The workloads write many distinct config keys (`bench.k<w>`).
        .controller_flags(&["--allow-unknown-topic-configs"])
        .controller_flags(flags)
        .controller_flags(&extra)
        .logs(
            Some(log.as_deref().unwrap_or("warn,openraft=error")),
            Some(log.as_deref().unwrap_or("warn")),
        )
}

/// Lays `spec` out and starts its controllers (brokers wait for
/// [`Cluster::start_brokers`]).
pub fn start(spec: Spec) -> anyhow::Result<Cluster> {
    let keep = matches!(spec.root, Root::Temp { keep: true, .. });
    let mut c = Cluster::new(spec)?;
    if keep {
        progress!(
            "keeping the cluster's data and logs in {}",
            c.dir().display()
        );
    }
    if env_on("KEEL_BENCH_METRICS") {
        for n in c.nodes.iter_mut().filter(|n| n.metrics_addr.is_none()) {
            if n.role == keel_testkit::Role::Controller {
                let at = std::net::SocketAddr::new(n.ip(), METRICS_PORT);
                let args = &mut n.process.launch.args;
                args.extend(["--metrics-listen".into(), at.to_string()]);
                n.metrics_addr = Some(at);
            }
        }
    }
    c.start_controllers()?;
    Ok(c)
}

/// Starts a quorum of `spec` (plaintext, or mutual TLS with `tls`), registers
/// stand-in broker 1 and creates `topic` (1 partition, RF 1), then waits
/// until every controller has applied it: the setup of a `commit` op load.
pub async fn start_with_topic(
    env: &Env,
    subnet: u8,
    flags: &[&str],
    tls: bool,
    topic: &str,
) -> anyhow::Result<Cluster> {
    let mut c = start(spec(env, subnet, flags).tls(tls))?;
    c.wait_active(Duration::from_secs(60)).await?;
    let client = c.client(Duration::from_secs(10), Duration::from_secs(30));
    register_stand_in(&c, 1).await?;
    admin::create_topic(&client, topic, 1, 1).await?;
    c.wait_converged(0, Duration::from_secs(30)).await?;
    Ok(c)
}

/// Counts leadership changes over part of a scenario: the growth of the
/// highest Raft term the controllers report between [`Leadership::start`]
/// and [`Leadership::changes`]. Every election (won or not) raises the
/// term, so while every controller answers at both ends the count is never
/// below the real number of changes (a node that does not answer is left
/// out of that end's maximum).
pub struct Leadership {
    start: Option<u64>,
}

impl Leadership {
    /// Reads the term now (after the cluster has an active controller).
    pub async fn start(c: &Cluster) -> Self {
        Self {
            start: c.raft_term(Duration::from_secs(5)).await,
        }
    }

    /// Terms gone by since [`Leadership::start`], as JSON (`null` when a
    /// term could not be read at either end).
    pub async fn changes(&self, c: &Cluster) -> serde_json::Value {
        match (self.start, c.raft_term(Duration::from_secs(5)).await) {
            (Some(a), Some(b)) => serde_json::json!(b.saturating_sub(a)),
            _ => serde_json::Value::Null,
        }
    }
}

/// Registers stand-in broker `id` of `c` (unfenced, nothing listening).
/// Over TLS it registers with broker `id`'s own certificate, as a
/// controller accepts a registration only from that broker.
pub async fn register_stand_in(c: &Cluster, id: u32) -> anyhow::Result<u64> {
    let transport = c.transport_as(&keel_tls::Identity::broker(CLUSTER_ID, id))?;
    let client = ControllerClient::new(c.controller_addrs())
        .with_timeouts(Duration::from_secs(10), Duration::from_secs(30))
        .with_transport(transport);
    admin::register_stand_in(&client, CLUSTER_ID, id, STAND_IN_BROKER_ADDRESS).await
}

/// A persistent (eagerly connected) plaintext channel to `addr`.
pub async fn connect(addr: &str, request_timeout: Duration) -> anyhow::Result<Channel> {
    connect_over(&Transport::Plaintext, addr, request_timeout).await
}

/// A persistent (eagerly connected) channel to the controller at `addr`
/// over `transport` (plaintext, or mutual TLS with its certificate).
pub async fn connect_over(
    transport: &Transport,
    addr: &str,
    request_timeout: Duration,
) -> anyhow::Result<Channel> {
    let ep = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| anyhow!("bad address {addr}: {e}"))?
        .connect_timeout(Duration::from_secs(1))
        .timeout(request_timeout)
        .tcp_nodelay(true);
    Ok(transport.connect(ep, None, Expect::Controller).await?)
}

/// A value of exactly `len` bytes that differs for every (writer, seq).
pub fn value(writer: usize, seq: u64, len: usize) -> String {
    use std::fmt::Write;
    let len = len.max(1);
    let mut s = String::with_capacity(len.max(32));
    let _ = write!(s, "w{writer}-s{seq}-");
    if s.len() < len {
        s.extend(std::iter::repeat_n('x', len - s.len()));
    }
    s.truncate(len);
    s
}

/// A large image made through the admin API: topics of
/// `partitions_per_topic` partitions, `topics_per_request` per CreateTopics
/// call, `concurrency` calls in flight.
#[derive(Clone, Debug)]
pub struct ImageSpec {
    /// Partitions to create (the last topic holds what is left over).
    pub partitions: u64,
    pub partitions_per_topic: u32,
    pub replication_factor: u32,
    /// Every partition on these brokers, the first leading (`None`: the
    /// controller places them).
    pub replicas: Option<Vec<u32>>,
    /// Topics per CreateTopics request.
    pub topics_per_request: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// No request is started after this long.
    pub budget: Duration,
    /// Topics are named `<prefix>-<number, 6 digits>`.
    pub prefix: String,
}

impl ImageSpec {
    /// Topics the spec creates.
    pub fn topics(&self) -> u64 {
        self.partitions
            .div_ceil(u64::from(self.partitions_per_topic.max(1)))
    }

    /// Name of topic number `t`.
    pub fn topic_name(&self, t: u64) -> String {
        format!("{}-{t:06}", self.prefix)
    }

    /// Topic number `t` as CreateTopics takes it.
    fn creatable(&self, t: u64) -> pb::CreatableTopic {
        let per_topic = u64::from(self.partitions_per_topic.max(1));
        let n = (self.partitions - t * per_topic).min(per_topic) as u32;
        match &self.replicas {
            Some(r) => admin::creatable_on(&self.topic_name(t), n, r),
            None => admin::creatable(&self.topic_name(t), n, self.replication_factor),
        }
    }
}

/// What [`create_image`] did.
#[derive(Clone, Debug, Default)]
pub struct ImageCreated {
    /// Partitions of topics the cluster acknowledged (created, or already
    /// there when a request whose outcome was unknown was sent again).
    pub partitions: u64,
    /// Wall time from the first request to the last answer.
    pub secs: f64,
    /// CreateTopics calls answered, and how long each took (ms).
    pub request_ms: Vec<f64>,
    /// Calls sent again after REQUEST_TIMED_OUT (outcome unknown).
    pub retries: u64,
}

/// What the creating tasks share.
#[derive(Default)]
struct Progress {
    next: AtomicU64,
    created: AtomicU64,
    retries: AtomicU64,
    stop: AtomicBool,
    request_ms: Mutex<Vec<f64>>,
}

/// Sends one CreateTopics request; again (up to five times) while its
/// outcome is unknown (REQUEST_TIMED_OUT: leadership moved while it
/// committed). Returns the partitions acknowledged.
async fn create_batch(
    client: &ControllerClient,
    spec: &ImageSpec,
    topics: std::ops::Range<u64>,
    k: &Progress,
) -> anyhow::Result<u64> {
    let req = admin::create_topics_request(topics.map(|t| spec.creatable(t)).collect());
    let timed_out = pb::ErrorCode::RequestTimedOut as i32;
    let mut attempts = 0;
    let r = loop {
        attempts += 1;
        let sent = Instant::now();
        let r = client
            .admin(|mut a| {
                let req = req.clone();
                async move { a.create_topics(req).await }
            })
            .await
            .context("CreateTopics failed")?;
        if r.error.as_ref().is_some_and(|e| e.code == timed_out) && attempts < 5 {
            k.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        if let Ok(mut v) = k.request_ms.lock() {
            v.push(sent.elapsed().as_secs_f64() * 1000.0);
        }
        break r;
    };
    if let Some(e) = r.error {
        bail!("CreateTopics refused: {e:?}");
    }
    let mut ok = 0u64;
    for (t, asked) in r.topics.iter().zip(&req.topics) {
        match &t.error {
            // A topic a retried request had already created counts.
            Some(e) if e.code != pb::ErrorCode::TopicAlreadyExists as i32 => {
                bail!("creation of {} refused: {e:?}", t.name)
            }
            _ => ok += u64::from(asked.partitions),
        }
    }
    Ok(ok)
}

/// Creates `spec`'s topics through the admin API. Any refusal but an
/// unknown outcome stops the creation; with nothing created that is an
/// error, else the partial result is returned (and said in a progress
/// line).
pub async fn create_image(
    c: &Cluster,
    spec: &ImageSpec,
    label: &str,
) -> anyhow::Result<ImageCreated> {
    let topics = spec.topics();
    let k = Arc::new(Progress::default());
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..spec.concurrency.max(1) {
        let client = c.client(Duration::from_secs(120), Duration::from_secs(180));
        let (k, spec) = (k.clone(), spec.clone());
        tasks.push(tokio::spawn(async move {
            let tpr = spec.topics_per_request.max(1) as u64;
            loop {
                if k.stop.load(Ordering::Relaxed) || start.elapsed() >= spec.budget {
                    return Ok::<Instant, anyhow::Error>(Instant::now());
                }
                let first = k.next.fetch_add(tpr, Ordering::Relaxed);
                if first >= topics {
                    return Ok(Instant::now());
                }
                let batch = first..(first + tpr).min(topics);
                match create_batch(&client, &spec, batch, &k).await {
                    Ok(n) => k.created.fetch_add(n, Ordering::Relaxed),
                    Err(e) => {
                        k.stop.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                };
            }
        }));
    }
    let mut last_report = Instant::now();
    while !tasks.iter().all(|t| t.is_finished()) {
        if last_report.elapsed() >= Duration::from_secs(10) {
            let n = k.created.load(Ordering::Relaxed);
            let secs = start.elapsed().as_secs_f64();
            progress!(
                "{label}: {n} partitions created in {secs:.0} s ({:.0}/s)",
                n as f64 / secs
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (mut first_err, mut end) = (None, start);
    for t in tasks {
        match t.await? {
            Ok(done) => end = end.max(done),
            Err(e) => {
                end = Instant::now();
                first_err.get_or_insert(e);
            }
        }
    }
    let n = k.created.load(Ordering::Relaxed);
    if let Some(e) = first_err {
        progress!("{label}: image creation stopped early: {e:#}");
        if n == 0 {
            return Err(e);
        }
    }
    let request_ms = k.request_ms.lock().map(|v| v.clone()).unwrap_or_default();
    Ok(ImageCreated {
        partitions: n,
        secs: end.duration_since(start).as_secs_f64(),
        request_ms,
        retries: k.retries.load(Ordering::Relaxed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_have_the_asked_length_and_differ_per_writer_and_seq() {
        assert_eq!(value(3, 7, 100).len(), 100);
        assert!(value(3, 7, 100).starts_with("w3-s7-x"));
        assert_eq!(value(3, 7, 1), "w");
        assert_eq!(value(3, 7, 0), "w");
        assert_ne!(value(3, 7, 100), value(3, 8, 100));
        assert_ne!(value(3, 7, 100), value(4, 7, 100));
    }

    #[test]
    fn an_image_is_whole_topics_and_a_last_one_with_the_rest() {
        let spec = ImageSpec {
            partitions: 250,
            partitions_per_topic: 100,
            replication_factor: 3,
            replicas: Some(vec![1, 2, 3]),
            topics_per_request: 2,
            concurrency: 1,
            budget: Duration::from_secs(1),
            prefix: "bf".into(),
        };
        assert_eq!(spec.topics(), 3);
        let last = spec.creatable(2);
        assert_eq!((last.name.as_str(), last.partitions), ("bf-000002", 50));
        assert!(last.assignments.iter().all(|a| a.replicas == [1, 2, 3]));
        let placed = ImageSpec {
            replicas: None,
            ..spec
        };
        assert_eq!(placed.creatable(0).partitions, 100);
        assert!(placed.creatable(0).assignments.is_empty());
    }

    #[test]
    fn the_environment_shapes_every_controller() {
        let env = Env {
            exe: "/bin/keel".into(),
        };
        let s = spec(&env, 7, &["--session-timeout-ms", "600000"]);
        let c = Cluster::new(s).expect("layout");
        assert_eq!(c.controller(2).ip().to_string(), "127.0.7.13");
        let args = &c.controller(0).process.launch.args;
        assert!(args.windows(2).any(|w| w == ["--cluster-id", CLUSTER_ID]));
        assert!(args.ends_with(&["--session-timeout-ms".into(), "600000".into()]));
        assert!(args.iter().any(|a| a == "--allow-unknown-topic-configs"));
    }
}
