//! Helpers for end-to-end tests: real `keel` processes on loopback.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use keel_proto::client::ControllerClient;
use keel_proto::pb;
use keel_proto::pb::admin_service_client::AdminServiceClient;

/// The binary under test.
pub fn keel_bin() -> &'static str {
    env!("CARGO_BIN_EXE_keel")
}

/// A free TCP port on 127.0.0.1 (released before use; good enough for tests).
///
/// The kernel may hand the same free port to two calls in a row, and tests
/// of one binary run in parallel: a port is handed out at most once per
/// test process, or two nodes of one quorum could be given one address.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("bind an ephemeral port");
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// A child process killed (SIGKILL) when dropped.
pub struct Proc {
    pub child: Option<Child>,
    pub log: PathBuf,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status();
    }

    /// Waits for the process to exit; returns its code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    self.child = None;
                    return st.code();
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `keel <args>` with output to `log`.
pub fn spawn(args: &[String], log: &Path) -> Proc {
    let out = std::fs::File::create(log).expect("create log file");
    let err = out.try_clone().expect("clone log handle");
    let child = Command::new(keel_bin())
        .args(args)
        .env("RUST_LOG", "info,openraft=warn")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("spawn keel");
    Proc {
        child: Some(child),
        log: log.to_path_buf(),
    }
}

/// A three-controller quorum of real processes.
pub struct Quorum {
    pub dir: tempfile::TempDir,
    pub addrs: Vec<String>,
    pub procs: Vec<Proc>,
    pub cluster_id: String,
    pub extra: Vec<String>,
}

impl Quorum {
    /// Starts three controllers; `extra` flags go to each.
    pub fn start(extra: &[&str]) -> Self {
        Self::start_except(extra, None)
    }

    /// Starts the three controllers but `late` (if any), whose slot holds
    /// a stopped process until [`Quorum::restart`] starts it.
    pub fn start_except(extra: &[&str], late: Option<usize>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let addrs: Vec<String> = (0..3)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let mut q = Quorum {
            dir,
            addrs,
            procs: Vec::new(),
            cluster_id: "keel-test".into(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        for i in 0..3 {
            let p = if Some(i) == late {
                Proc {
                    child: None,
                    log: q.dir.path().join(format!("c{}-late.log", i + 1)),
                }
            } else {
                q.spawn_node(i)
            };
            q.procs.push(p);
        }
        q
    }

    pub fn voters(&self) -> String {
        self.addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}@{}", i + 1, a))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("c{}", i + 1))
    }

    pub fn args(&self, i: usize, cluster_id: &str) -> Vec<String> {
        let mut a = vec![
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
            cluster_id.to_string(),
        ];
        a.extend(self.extra.iter().cloned());
        a
    }

    pub fn spawn_node(&self, i: usize) -> Proc {
        let log = self.dir.path().join(format!(
            "c{}-{}.log",
            i + 1,
            Instant::now().elapsed().as_nanos()
        ));
        spawn(&self.args(i, &self.cluster_id), &log)
    }

    /// Restarts node `i` (after it was killed) on the same data dir.
    pub fn restart(&mut self, i: usize) {
        self.procs[i].kill();
        self.procs[i] = self.spawn_node(i);
    }

    pub fn client(&self) -> ControllerClient {
        ControllerClient::new(self.addrs.clone())
            .with_timeouts(Duration::from_secs(5), Duration::from_secs(60))
    }

    /// DescribeNode on one node (no redirect).
    pub async fn describe_node(&self, i: usize) -> Option<pb::DescribeNodeResponse> {
        let mut c = AdminServiceClient::connect(format!("http://{}", self.addrs[i]))
            .await
            .ok()?;
        c.describe_node(pb::DescribeNodeRequest::default())
            .await
            .ok()
            .map(|r| r.into_inner())
    }

    /// Waits until some node is the active controller; returns its index.
    pub async fn wait_active(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            for i in 0..self.addrs.len() {
                if self.procs[i].child.is_none() {
                    continue;
                }
                if let Some(d) = self.describe_node(i).await {
                    if d.active_controller {
                        return i;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "no active controller within {timeout:?}\n{}",
                self.log_tails(40)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last `lines` lines of each node's log, for a failure message
    /// (the logs live in a temp dir that is gone once the test ends).
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for (i, p) in self.procs.iter().enumerate() {
            let text = p.log_text();
            let all: Vec<&str> = text.lines().collect();
            let tail = &all[all.len().saturating_sub(lines)..];
            out.push_str(&format!(
                "--- node {} ({}) log, last {} lines ---\n{}\n",
                i + 1,
                self.addrs[i],
                tail.len(),
                tail.join("\n")
            ));
        }
        out
    }

    /// Waits until every running node has applied the same index with the
    /// same image hash, at least `min_index`; returns (index, hash).
    pub async fn wait_converged(&self, min_index: u64, timeout: Duration) -> (u64, String) {
        let deadline = Instant::now() + timeout;
        loop {
            let mut views = Vec::new();
            for i in 0..self.addrs.len() {
                if self.procs[i].child.is_some() {
                    views.push(self.describe_node(i).await);
                }
            }
            if views.iter().all(|v| v.is_some()) {
                let v: Vec<_> = views.into_iter().flatten().collect();
                let first = (&v[0].last_applied_index, &v[0].image_hash);
                if *first.0 >= min_index
                    && v.iter()
                        .all(|d| (&d.last_applied_index, &d.image_hash) == first)
                {
                    return (*first.0, first.1.clone());
                }
            }
            assert!(
                Instant::now() < deadline,
                "controllers did not converge within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Registers a stand-in broker through the quorum and heartbeats it once
/// so it is unfenced; returns its epoch.
pub async fn register_fake_broker(client: &ControllerClient, cluster_id: &str, id: u32) -> u64 {
    let req = pb::RegisterBrokerRequest {
        broker_id: id,
        incarnation_id: (u128::from(id) + 1000).to_be_bytes().to_vec(),
        cluster_id: cluster_id.to_string(),
        address: format!("127.0.0.1:{}", 1 + id),
        rack: None,
        log_dirs: vec![],
        previous_broker_epoch: 0,
    };
    let r = client
        .broker(|mut c| {
            let req = req.clone();
            async move { c.register_broker(req).await }
        })
        .await
        .expect("register reaches the controller");
    assert!(r.error.is_none(), "registration refused: {:?}", r.error);
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
        .await
        .expect("heartbeat reaches the controller");
    assert!(r.error.is_none(), "heartbeat refused: {:?}", r.error);
    assert!(
        !r.is_fenced,
        "broker {id} should be unfenced after catching up"
    );
    epoch
}

/// Creates topic `name` (RF `rf`, `partitions` partitions); panics on refusal.
pub async fn create_topic(
    client: &ControllerClient,
    name: &str,
    partitions: u32,
    rf: u32,
) -> Vec<u8> {
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
        .await
        .expect("create reaches the controller");
    assert!(r.error.is_none(), "create refused: {:?}", r.error);
    let t = &r.topics[0];
    assert!(t.error.is_none(), "create of {name} refused: {:?}", t.error);
    t.topic_id.clone()
}

/// Names of all topics, through the active controller.
pub async fn topic_names(client: &ControllerClient) -> Vec<String> {
    let r = client
        .admin(|mut c| async move {
            c.describe_topics(pb::DescribeTopicsRequest::default())
                .await
        })
        .await
        .expect("describe reaches the controller");
    assert!(r.error.is_none(), "describe refused: {:?}", r.error);
    r.topics.into_iter().map(|t| t.name).collect()
}

/// A quorum plus real `keel broker` processes.
pub struct Cluster {
    pub q: Quorum,
    pub broker_addrs: Vec<String>,
    pub brokers: Vec<Proc>,
    pub broker_flags: Vec<String>,
}

impl Cluster {
    /// Three controllers and `n` brokers with fast timings: heartbeat 300 ms,
    /// session 3 s, replica lag 3 s.
    pub fn start(n: usize) -> Self {
        Self::start_with(n, &[])
    }

    /// As [`Cluster::start`], with extra controller flags.
    pub fn start_with(n: usize, controller_flags: &[&str]) -> Self {
        let mut flags = vec!["--session-timeout-ms", "3000"];
        flags.extend_from_slice(controller_flags);
        let q = Quorum::start(&flags);
        let broker_addrs = (0..n)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let mut c = Cluster {
            q,
            broker_addrs,
            brokers: Vec::new(),
            broker_flags: [
                "--heartbeat-interval-ms",
                "300",
                "--session-timeout-ms",
                "3000",
                "--replica-lag-time-max-ms",
                "3000",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        };
        for i in 0..n {
            let p = c.spawn_broker(i);
            c.brokers.push(p);
        }
        c
    }

    pub fn broker_dir(&self, i: usize) -> PathBuf {
        self.q.dir.path().join(format!("b{}", i + 1))
    }

    pub fn broker_args(&self, i: usize, data_dir: &Path) -> Vec<String> {
        let mut a = vec![
            "broker".to_string(),
            "--broker-id".into(),
            (i + 1).to_string(),
            "--listen".into(),
            self.broker_addrs[i].clone(),
            "--controllers".into(),
            self.q.addrs.join(","),
            "--cluster-id".into(),
            self.q.cluster_id.clone(),
            "--data-dir".into(),
            data_dir.display().to_string(),
        ];
        a.extend(self.broker_flags.iter().cloned());
        a
    }

    pub fn spawn_broker(&self, i: usize) -> Proc {
        let log = self
            .q
            .dir
            .path()
            .join(format!("b{}-{}.log", i + 1, std::process::id()));
        let log = unique(log);
        spawn(&self.broker_args(i, &self.broker_dir(i)), &log)
    }

    pub fn restart_broker(&mut self, i: usize) {
        self.brokers[i].kill();
        self.brokers[i] = self.spawn_broker(i);
    }

    /// Waits until `pred` holds for the cluster description.
    pub async fn wait_cluster<F>(
        &self,
        what: &str,
        timeout: Duration,
        pred: F,
    ) -> pb::DescribeClusterResponse
    where
        F: Fn(&pb::DescribeClusterResponse) -> bool,
    {
        let client = self.q.client();
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(r) = client
                .admin(|mut c| async move {
                    c.describe_cluster(pb::DescribeClusterRequest::default())
                        .await
                })
                .await
            {
                if r.error.is_none() && pred(&r) {
                    return r;
                }
            }
            assert!(Instant::now() < deadline, "timed out waiting for: {what}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until `pred` holds for the description of `topic`.
    pub async fn wait_topic<F>(
        &self,
        topic: &str,
        what: &str,
        timeout: Duration,
        pred: F,
    ) -> pb::TopicDescription
    where
        F: Fn(&pb::TopicDescription) -> bool,
    {
        let client = self.q.client();
        let deadline = Instant::now() + timeout;
        let req = pb::DescribeTopicsRequest {
            names: vec![topic.to_string()],
        };
        loop {
            if let Ok(r) = client
                .admin(|mut c| {
                    let req = req.clone();
                    async move { c.describe_topics(req).await }
                })
                .await
            {
                if let Some(t) = r.topics.into_iter().next() {
                    if t.error.is_none() && pred(&t) {
                        return t;
                    }
                }
            }
            assert!(Instant::now() < deadline, "timed out waiting for: {what}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until every broker is registered and active.
    pub async fn wait_all_active(&self, timeout: Duration) -> pb::DescribeClusterResponse {
        let n = self.brokers.len();
        self.wait_cluster("all brokers active", timeout, |r| {
            r.brokers
                .iter()
                .filter_map(|b| b.broker.as_ref())
                .filter(|b| !b.fenced && !b.shutting_down)
                .count()
                == n
        })
        .await
    }

    /// The leadership history a broker wrote (one JSON object per line).
    pub fn history(&self, i: usize) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.broker_dir(i).join("history.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// A path that does not exist yet (appends a counter if needed).
pub fn unique(p: PathBuf) -> PathBuf {
    if !p.exists() {
        return p;
    }
    for i in 1.. {
        let q = p.with_extension(format!("{i}.log"));
        if !q.exists() {
            return q;
        }
    }
    p
}

/// The broker's state as the cluster description shows it.
pub fn broker_info(r: &pb::DescribeClusterResponse, id: u32) -> Option<pb::BrokerInfo> {
    r.brokers
        .iter()
        .filter_map(|b| b.broker.clone())
        .find(|b| b.broker_id == id)
}
