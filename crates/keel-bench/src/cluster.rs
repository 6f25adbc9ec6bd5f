//! A 3-controller quorum of real `keel controller` processes on loopback.
//!
//! Controller `i` binds `127.0.<subnet>.<11+i>` on a free port, keeps its
//! data in a temp dir, and is SIGKILLed when the [`Cluster`] drops (also on
//! error paths), so nothing outlives the bench.

use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use keel_proto::client::ControllerClient;
use keel_proto::pb;
use keel_proto::pb::admin_service_client::AdminServiceClient;
use keel_proto::pb::broker_service_client::BrokerServiceClient;
use tonic::transport::{Channel, Endpoint};

/// The cluster id every bench cluster uses.
pub const CLUSTER_ID: &str = "keel-bench";

/// Address of every stand-in broker: nothing listens there, so the
/// controller's channels to them fail fast (connection refused) and retry.
pub const STAND_IN_BROKER_ADDRESS: &str = "127.0.4.1:9";

/// Three controller processes and their temp dir.
pub struct Cluster {
    dir: tempfile::TempDir,
    exe: PathBuf,
    pub addrs: Vec<String>,
    procs: Vec<Option<Child>>,
    extra: Vec<String>,
}

/// A free TCP port on `ip` (released before the controller binds it).
fn free_port(ip: &str) -> anyhow::Result<u16> {
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

impl Cluster {
    /// Starts three controllers on `127.0.<subnet>.11-13`; `extra` flags go to each.
    pub fn start(exe: &Path, subnet: u8, extra: &[&str]) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("keel-bench-")
            .tempdir()
            .context("create a temp dir")?;
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
            extra: extra.iter().map(|s| s.to_string()).collect(),
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
                .describe_node(pb::DescribeNodeRequest {})
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
    /// image hash; returns (index, hash).
    pub async fn wait_converged(&mut self, timeout: Duration) -> anyhow::Result<(u64, String)> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive()?;
            let mut views = Vec::new();
            for i in 0..3 {
                if self.is_running(i) {
                    views.push(self.describe_node(i).await);
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
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A redirect-following client over all three controllers.
    pub fn client(&self, request: Duration, deadline: Duration) -> ControllerClient {
        ControllerClient::new(self.addrs.clone()).with_timeouts(request, deadline)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..3 {
            self.kill(i);
        }
    }
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
    let mut s = format!("w{writer}-s{seq}-");
    while s.len() < len {
        s.push('x');
    }
    s.truncate(len.max(1));
    s
}
