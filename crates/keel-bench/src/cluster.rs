//! A 3-controller quorum of real `keel controller` processes on loopback,
//! optionally with real `keel broker` processes.
//!
//! Controller `i` binds `127.0.<subnet>.<11+i>` on a free port, broker `i`
//! `127.0.<subnet>.<21+i>`; each keeps its data in a temp dir, and every
//! process is SIGKILLed when the [`Cluster`] drops (also on error paths), so
//! nothing outlives the bench.

use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use keel_proto::client::ControllerClient;
use keel_proto::pb;
use keel_proto::pb::admin_service_client::AdminServiceClient;
use keel_proto::pb::broker_service_client::BrokerServiceClient;
use tonic::transport::{Channel, Endpoint};

use crate::progress;

/// The cluster id every bench cluster uses.
pub const CLUSTER_ID: &str = "keel-bench";

/// Address of every stand-in broker: nothing listens there, so the
/// controller's channels to them fail fast (connection refused) and retry.
pub const STAND_IN_BROKER_ADDRESS: &str = "127.0.4.1:9";

/// Three controller processes (and any brokers) and their temp dir.
pub struct Cluster {
    dir: tempfile::TempDir,
    exe: PathBuf,
    pub addrs: Vec<String>,
    procs: Vec<Option<Child>>,
    extra: Vec<String>,
    /// The subnet's third octet (brokers bind on it too).
    subnet: u8,
    /// Addresses of the brokers started by [`Cluster::start_brokers`].
    pub broker_addrs: Vec<String>,
    /// Broker processes, by index (broker id = index + 1).
    brokers: Vec<Option<Child>>,
}

/// A free TCP port on `ip` (released before the controller binds it).
pub(crate) fn free_port(ip: &str) -> anyhow::Result<u16> {
    let l = TcpListener::bind(format!("{ip}:0")).with_context(|| format!("bind {ip}:0"))?;
    Ok(l.local_addr()?.port())
}

/// A persistent (eagerly connected) channel to `addr`.
pub async fn connect(addr: &str, request_timeout: Duration) -> anyhow::Result<Channel> {
    let ep = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| anyhow!("bad address {addr}: {e}"))?
        .connect_timeout(Duration::from_secs(1))
        .timeout(request_timeout)
        .tcp_nodelay(true);
    Ok(ep.connect().await?)
}

/// Extra controller flags from `KEEL_BENCH_CONTROLLER_ARGS` (split on
/// whitespace; e.g. `--worker-threads 1`), for trying a setting in any
/// scenario without a code change. They go after the scenario's own flags.
pub(crate) fn controller_args_from_env() -> Vec<String> {
    std::env::var("KEEL_BENCH_CONTROLLER_ARGS")
        .map(|v| v.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

impl Cluster {
    /// Starts three controllers on `127.0.<subnet>.11-13`; `extra` flags go to each.
    pub fn start(exe: &Path, subnet: u8, extra: &[&str]) -> anyhow::Result<Self> {
        let mut dir = tempfile::Builder::new()
            .prefix("keel-bench-")
            .tempdir()
            .context("create a temp dir")?;
        // KEEL_BENCH_KEEP=1 keeps data dirs and logs for a post-mortem.
        if std::env::var_os("KEEL_BENCH_KEEP").is_some_and(|v| v == "1") {
            dir.disable_cleanup(true);
            progress!(
                "keeping the cluster's data and logs in {}",
                dir.path().display()
            );
        }
        let mut addrs = Vec::new();
        for i in 0..3 {
            let ip = format!("127.0.{subnet}.{}", 11 + i);
            addrs.push(format!("{ip}:{}", free_port(&ip)?));
        }
        let mut c = Cluster {
            dir,
            exe: exe.to_path_buf(),
            addrs,
            procs: vec![None, None, None],
            extra: extra
                .iter()
                .map(|s| s.to_string())
                .chain(controller_args_from_env())
                .collect(),
            subnet,
            broker_addrs: Vec::new(),
            brokers: Vec::new(),
        };
        for i in 0..3 {
            c.spawn(i)?;
        }
        Ok(c)
    }

    fn voters(&self) -> String {
        self.addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}@{}", i + 1, a))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Data dir of controller `i`.
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("c{}", i + 1))
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("c{}.log", i + 1))
    }

    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(i))?;
        let err = out.try_clone()?;
        let mut args = vec![
            "controller".to_string(),
            "--node-id".into(),
            (i + 1).to_string(),
            "--listen".into(),
            self.addrs[i].clone(),
            "--voters".into(),
            self.voters(),
            "--data-dir".into(),
            self.data_dir(i).display().to_string(),
            "--cluster-id".into(),
            CLUSTER_ID.into(),
        ];
        args.extend(self.extra.iter().cloned());
        // KEEL_BENCH_METRICS=1 serves each controller's Prometheus metrics
        // on port 9464 of its own address, for a look during the run.
        if std::env::var_os("KEEL_BENCH_METRICS").is_some_and(|v| v == "1") {
            if let Some((ip, _)) = self.addrs[i].rsplit_once(':') {
                args.push("--metrics-listen".into());
                args.push(format!("{ip}:9464"));
            }
        }
        let log = std::env::var("KEEL_BENCH_LOG").unwrap_or_else(|_| "warn,openraft=error".into());
        let child = Command::new(&self.exe)
            .args(args)
            .env("RUST_LOG", log)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("spawn {}", self.exe.display()))?;
        self.procs[i] = Some(child);
        Ok(())
    }

    /// SIGKILLs controller `i` and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.procs[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts controller `i` again on its data dir (after [`Cluster::kill`]).
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.kill(i);
        self.spawn(i)
    }

    pub fn is_running(&self, i: usize) -> bool {
        self.procs[i].is_some()
    }

    /// Process id of controller `i`, if running.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.procs[i].as_ref().map(|c| c.id())
    }

    /// Resident memory of controller `i` in bytes (0 if unknown).
    pub fn rss_bytes(&self, i: usize) -> u64 {
        let Some(pid) = self.pid(i) else { return 0 };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(0)
    }

    /// Fails (with the tail of its log) if a controller that should run exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        for i in 0..3 {
            if let Some(c) = self.procs[i].as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    self.procs[i] = None;
                    bail!(
                        "controller {} exited ({st}); last log lines:\n{}",
                        i + 1,
                        self.log_tail(i, 15)
                    );
                }
            }
        }
        Ok(())
    }

    /// The last `n` lines of controller `i`'s log.
    pub fn log_tail(&self, i: usize, n: usize) -> String {
        let text = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Allocated bytes (as `du` counts them) of the three data dirs.
    pub fn disk_bytes(&self) -> u64 {
        (0..3).map(|i| du(&self.data_dir(i))).sum()
    }

    /// DescribeNode on controller `i` (no redirect), within about a second.
    pub async fn describe_node(&self, i: usize) -> Option<pb::DescribeNodeResponse> {
        self.procs[i].as_ref()?;
        let fut = async {
            let ch = connect(&self.addrs[i], Duration::from_secs(1)).await.ok()?;
            AdminServiceClient::new(ch)
                .describe_node(pb::DescribeNodeRequest::default())
                .await
                .ok()
                .map(|r| r.into_inner())
        };
        tokio::time::timeout(Duration::from_millis(1500), fut)
            .await
            .ok()
            .flatten()
    }

    /// Waits until a running node says it is the active controller.
    pub async fn wait_active(&mut self, timeout: Duration) -> anyhow::Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive()?;
            for i in 0..3 {
                if let Some(d) = self.describe_node(i).await {
                    if d.active_controller {
                        return Ok(i);
                    }
                }
            }
            if Instant::now() >= deadline {
                bail!("no active controller within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every running node applied the same index with the same
    /// image hash; returns (index, hash). Each node hashes its whole image
    /// to answer, so rounds are spaced by at least their own duration: the
    /// wait costs the nodes at most half their time on a large image.
    pub async fn wait_converged(&mut self, timeout: Duration) -> anyhow::Result<(u64, String)> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive()?;
            let round = Instant::now();
            let mut views = Vec::new();
            for i in 0..3 {
                if self.is_running(i) {
                    views.push(self.describe_node_within(i, Duration::from_secs(10)).await);
                }
            }
            if views.iter().all(|v| v.is_some()) && !views.is_empty() {
                let v: Vec<_> = views.into_iter().flatten().collect();
                let first = (v[0].last_applied_index, v[0].image_hash.clone());
                if v.iter().any(|d| d.active_controller)
                    && v.iter()
                        .all(|d| (d.last_applied_index, &d.image_hash) == (first.0, &first.1))
                {
                    return Ok(first);
                }
            }
            if Instant::now() >= deadline {
                bail!("controllers did not converge within {timeout:?}");
            }
            tokio::time::sleep(round.elapsed().max(Duration::from_millis(100))).await;
        }
    }

    /// A redirect-following client over all three controllers.
    pub fn client(&self, request: Duration, deadline: Duration) -> ControllerClient {
        ControllerClient::new(self.addrs.clone()).with_timeouts(request, deadline)
    }
}

impl Cluster {
    /// Starts `n` real brokers (ids 1..=n) on `127.0.<subnet>.21..`, each
    /// with `extra` flags, pointed at the three controllers.
    pub fn start_brokers(&mut self, n: usize, extra: &[&str]) -> anyhow::Result<()> {
        for i in 0..n {
            let ip = format!("127.0.{}.{}", self.subnet, 21 + i);
            let addr = format!("{ip}:{}", free_port(&ip)?);
            let data = self.dir.path().join(format!("b{}", i + 1));
            let log = self.dir.path().join(format!("b{}.log", i + 1));
            let out = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)?;
            let err = out.try_clone()?;
            let mut args = vec![
                "broker".to_string(),
                "--broker-id".into(),
                (i + 1).to_string(),
                "--listen".into(),
                addr.clone(),
                "--controllers".into(),
                self.addrs.join(","),
                "--cluster-id".into(),
                CLUSTER_ID.into(),
                "--data-dir".into(),
                data.display().to_string(),
            ];
            args.extend(extra.iter().map(|s| s.to_string()));
            let rust_log = std::env::var("KEEL_BENCH_LOG").unwrap_or_else(|_| "warn".into());
            let child = Command::new(&self.exe)
                .args(args)
                .env("RUST_LOG", rust_log)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .with_context(|| format!("spawn broker {} ({})", i + 1, self.exe.display()))?;
            self.broker_addrs.push(addr);
            self.brokers.push(Some(child));
        }
        Ok(())
    }

    /// Fails (with the tail of its log) if a broker exited.
    pub fn check_brokers_alive(&mut self) -> anyhow::Result<()> {
        for i in 0..self.brokers.len() {
            if let Some(c) = self.brokers[i].as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    self.brokers[i] = None;
                    let log = self.dir.path().join(format!("b{}.log", i + 1));
                    let text = std::fs::read_to_string(log).unwrap_or_default();
                    let lines: Vec<&str> = text.lines().collect();
                    bail!(
                        "broker {} exited ({st}); last log lines:\n{}",
                        i + 1,
                        lines[lines.len().saturating_sub(15)..].join("\n")
                    );
                }
            }
        }
        Ok(())
    }

    /// Waits until brokers `1..=n` are registered, unfenced and not shutting down.
    pub async fn wait_brokers_unfenced(&mut self, n: u32, timeout: Duration) -> anyhow::Result<()> {
        let client = self.client(Duration::from_secs(10), Duration::from_secs(20));
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive()?;
            self.check_brokers_alive()?;
            if brokers_unfenced(&client, n).await {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("brokers 1-{n} not all unfenced within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Resident memory of broker `i` (0-based) in bytes (0 if unknown).
    pub fn broker_rss_bytes(&self, i: usize) -> u64 {
        self.brokers
            .get(i)
            .and_then(|c| c.as_ref())
            .map_or(0, |c| proc_status_bytes(c.id(), "VmRSS:"))
    }

    /// Allocated bytes (as `du` counts them) of controller `i`'s data dir.
    pub fn disk_bytes_of(&self, i: usize) -> u64 {
        du(&self.data_dir(i))
    }

    /// A `/proc/<pid>/status` figure of controller `i` in bytes, e.g.
    /// `"VmHWM:"` (peak RSS) or `"RssAnon:"`; 0 if unknown.
    pub fn status_bytes(&self, i: usize, key: &str) -> u64 {
        self.pid(i).map_or(0, |pid| proc_status_bytes(pid, key))
    }

    /// TriggerSnapshot on controller `i` (no redirect).
    pub async fn trigger_snapshot(
        &self,
        i: usize,
        purge_log: bool,
        timeout: Duration,
    ) -> anyhow::Result<pb::TriggerSnapshotResponse> {
        let ch = connect(&self.addrs[i], timeout + Duration::from_secs(5)).await?;
        let r = AdminServiceClient::new(ch)
            .trigger_snapshot(pb::TriggerSnapshotRequest {
                purge_log,
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

    /// DescribeNode on controller `i` within `timeout` (a large image makes
    /// the answer slow: it hashes the image).
    pub async fn describe_node_within(
        &self,
        i: usize,
        timeout: Duration,
    ) -> Option<pb::DescribeNodeResponse> {
        self.procs[i].as_ref()?;
        let fut = async {
            let ch = connect(&self.addrs[i], timeout).await.ok()?;
            AdminServiceClient::new(ch)
                .describe_node(pb::DescribeNodeRequest::default())
                .await
                .ok()
                .map(|r| r.into_inner())
        };
        tokio::time::timeout(timeout, fut).await.ok().flatten()
    }
}

/// A `/proc/<pid>/status` line's value in bytes (the kernel prints kB).
fn proc_status_bytes(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for b in &mut self.brokers {
            if let Some(mut c) = b.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for i in 0..3 {
            self.kill(i);
        }
    }
}

/// A large image made through the admin API: topics of
/// `partitions_per_topic` partitions, `topics_per_request` per CreateTopics
/// call, `concurrency` calls in flight.
#[derive(Clone, Debug)]
pub struct ImageSpec {
    /// Partitions to create (rounded up to whole topics).
    pub partitions: u64,
    pub partitions_per_topic: u32,
    pub replication_factor: u32,
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

/// Creates `spec`'s topics through the admin API. A request whose outcome
/// is unknown (REQUEST_TIMED_OUT: leadership moved while it committed) is
/// sent again; topics it did create then answer TOPIC_ALREADY_EXISTS and
/// count as created. Any other refusal stops the creation; with nothing
/// created that is an error, else the partial result is returned (and
/// said in a progress line).
pub async fn create_image(
    c: &Cluster,
    spec: &ImageSpec,
    label: &str,
) -> anyhow::Result<ImageCreated> {
    let per_topic = u64::from(spec.partitions_per_topic);
    let topics = spec.topics();
    let next = Arc::new(AtomicU64::new(0));
    let created = Arc::new(AtomicU64::new(0));
    let retries = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let request_ms = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..spec.concurrency.max(1) {
        let client = c.client(Duration::from_secs(120), Duration::from_secs(180));
        let (next, created, retries, stop, request_ms) = (
            next.clone(),
            created.clone(),
            retries.clone(),
            stop.clone(),
            request_ms.clone(),
        );
        let spec = spec.clone();
        tasks.push(tokio::spawn(async move {
            let tpr = spec.topics_per_request.max(1) as u64;
            loop {
                if stop.load(Ordering::Relaxed) || start.elapsed() >= spec.budget {
                    return Ok::<Instant, anyhow::Error>(Instant::now());
                }
                let first = next.fetch_add(tpr, Ordering::Relaxed);
                if first >= topics {
                    return Ok(Instant::now());
                }
                let last = (first + tpr).min(topics);
                let req = pb::CreateTopicsRequest {
                    topics: (first..last)
                        .map(|t| pb::CreatableTopic {
                            name: spec.topic_name(t),
                            partitions: spec.partitions_per_topic,
                            replication_factor: spec.replication_factor,
                            ..Default::default()
                        })
                        .collect(),
                    validate_only: false,
                };
                let mut attempts = 0;
                let r = loop {
                    attempts += 1;
                    let sent = Instant::now();
                    let r = client
                        .admin(|mut a| {
                            let req = req.clone();
                            async move { a.create_topics(req).await }
                        })
                        .await;
                    match r {
                        Ok(r)
                            if r.error.as_ref().is_some_and(|e| {
                                e.code == pb::ErrorCode::RequestTimedOut as i32
                            }) && attempts < 5 =>
                        {
                            retries.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        Ok(r) => {
                            let ms = sent.elapsed().as_secs_f64() * 1000.0;
                            if let Ok(mut v) = request_ms.lock() {
                                v.push(ms);
                            }
                            break r;
                        }
                        Err(e) => {
                            stop.store(true, Ordering::Relaxed);
                            bail!("CreateTopics failed: {e}");
                        }
                    }
                };
                if let Some(e) = r.error {
                    stop.store(true, Ordering::Relaxed);
                    bail!("CreateTopics refused: {e:?}");
                }
                let mut ok = 0u64;
                for t in &r.topics {
                    match &t.error {
                        None => ok += 1,
                        Some(e) if e.code == pb::ErrorCode::TopicAlreadyExists as i32 => ok += 1,
                        Some(e) => {
                            stop.store(true, Ordering::Relaxed);
                            bail!("creation of {} refused: {e:?}", t.name);
                        }
                    }
                }
                created.fetch_add(ok * per_topic, Ordering::Relaxed);
            }
        }));
    }
    let mut last_report = Instant::now();
    while !tasks.iter().all(|t| t.is_finished()) {
        if last_report.elapsed() >= Duration::from_secs(10) {
            let n = created.load(Ordering::Relaxed);
            progress!(
                "{label}: {n} partitions created in {:.0} s ({:.0}/s)",
                start.elapsed().as_secs_f64(),
                n as f64 / start.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut first_err = None;
    let mut end = start;
    for t in tasks {
        match t.await? {
            Ok(done) => end = end.max(done),
            Err(e) => {
                end = Instant::now();
                first_err.get_or_insert(e);
            }
        }
    }
    let secs = end.duration_since(start).as_secs_f64();
    let n = created.load(Ordering::Relaxed);
    if let Some(e) = first_err {
        progress!("{label}: image creation stopped early: {e:#}");
        if n == 0 {
            return Err(e);
        }
    }
    let request_ms = request_ms.lock().map(|v| v.clone()).unwrap_or_default();
    Ok(ImageCreated {
        partitions: n,
        secs,
        request_ms,
        retries: retries.load(Ordering::Relaxed),
    })
}

/// Allocated bytes under `path` (st_blocks * 512, like `du`).
pub fn du(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        if let Ok(rd) = std::fs::read_dir(path) {
            for e in rd.flatten() {
                total += du(&e.path());
            }
        }
    }
    total
}

/// Registers a stand-in broker through the quorum and heartbeats it once
/// with a huge metadata offset so it is unfenced; returns its epoch.
pub async fn register_stand_in(client: &ControllerClient, id: u32) -> anyhow::Result<u64> {
    let req = pb::RegisterBrokerRequest {
        broker_id: id,
        incarnation_id: (u128::from(id) + 1000).to_be_bytes().to_vec(),
        cluster_id: CLUSTER_ID.to_string(),
        address: STAND_IN_BROKER_ADDRESS.to_string(),
        rack: None,
        log_dirs: vec![],
        previous_broker_epoch: 0,
    };
    let r = client
        .broker(|mut c| {
            let req = req.clone();
            async move { c.register_broker(req).await }
        })
        .await?;
    if let Some(e) = r.error {
        bail!("registration of broker {id} refused: {e:?}");
    }
    let epoch = r.broker_epoch;
    let hb = pb::BrokerHeartbeatRequest {
        broker_id: id,
        broker_epoch: epoch,
        current_metadata_offset: u64::MAX / 2,
        ..Default::default()
    };
    let r = client
        .broker(|mut c| {
            let hb = hb.clone();
            async move { c.broker_heartbeat(hb).await }
        })
        .await?;
    if r.error.is_some() || r.is_fenced {
        bail!("broker {id} not unfenced: {:?}", r.error);
    }
    Ok(epoch)
}

/// Creates topic `name`; fails on refusal.
pub async fn create_topic(
    client: &ControllerClient,
    name: &str,
    partitions: u32,
    rf: u32,
) -> anyhow::Result<()> {
    let req = pb::CreateTopicsRequest {
        topics: vec![pb::CreatableTopic {
            name: name.to_string(),
            partitions,
            replication_factor: rf,
            ..Default::default()
        }],
        validate_only: false,
    };
    let r = client
        .admin(|mut c| {
            let req = req.clone();
            async move { c.create_topics(req).await }
        })
        .await?;
    if let Some(e) = r.error {
        bail!("create of {name} refused: {e:?}");
    }
    if let Some(e) = r.topics.first().and_then(|t| t.error.clone()) {
        bail!("create of {name} refused: {e:?}");
    }
    Ok(())
}

/// A BrokerService client on a persistent channel.
pub fn broker_client(ch: Channel) -> BrokerServiceClient<Channel> {
    BrokerServiceClient::new(ch)
}

/// One SET of `key` on `topic`.
pub fn set_config(topic: &str, key: String, value: String) -> pb::IncrementalAlterConfigsRequest {
    pb::IncrementalAlterConfigsRequest {
        topics: vec![pb::AlterTopicConfig {
            topic: topic.to_string(),
            ops: vec![pb::AlterConfigOp {
                key,
                value,
                op: pb::ConfigOp::Set as i32,
            }],
        }],
        validate_only: false,
    }
}

/// Whether an IncrementalAlterConfigs answer acknowledges every item.
pub fn alter_ok(r: &pb::IncrementalAlterConfigsResponse) -> bool {
    r.error.is_none() && !r.topics.is_empty() && r.topics.iter().all(|t| t.error.is_none())
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

/// Whether brokers `1..=n` are all registered, unfenced and not shutting
/// down, as the active controller describes the cluster (false if it
/// cannot be asked).
pub(crate) async fn brokers_unfenced(client: &ControllerClient, n: u32) -> bool {
    let Ok(r) = client
        .admin(|mut c| async move {
            c.describe_cluster(pb::DescribeClusterRequest::default())
                .await
        })
        .await
    else {
        return false;
    };
    r.error.is_none()
        && (1..=n).all(|id| {
            r.brokers
                .iter()
                .filter_map(|b| b.broker.as_ref())
                .any(|b| b.broker_id == id && !b.fenced && !b.shutting_down)
        })
}

#[cfg(test)]
mod tests {
    use super::value;

    #[test]
    fn values_have_the_asked_length_and_differ_per_writer_and_seq() {
        assert_eq!(value(3, 7, 100).len(), 100);
        assert!(value(3, 7, 100).starts_with("w3-s7-x"));
        assert_eq!(value(3, 7, 1), "w");
        assert_eq!(value(3, 7, 0), "w");
        assert_ne!(value(3, 7, 100), value(3, 8, 100));
        assert_ne!(value(3, 7, 100), value(4, 7, 100));
    }
}
