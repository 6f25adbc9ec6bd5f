//! A local cluster of real processes: three (or more) controllers and any
//! number of brokers, each on its own loopback address, with its data dir
//! and log under one directory. Nothing outlives the [`Cluster`]: every
//! process is SIGKILLed when it is dropped, on error paths too.
//!
//! The kit injects no fault of its own. Two seams let a test harness add
//! them: [`Spec::data_disk`] mounts a file system of the harness's choice
//! over every node's data dir, and [`Spec::node_env`] adds environment
//! variables to every node (a preloaded library, for example).

use std::any::Any;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use keel_proto::client::ControllerClient;
use keel_proto::pb;
use keel_proto::pb::admin_service_client::AdminServiceClient;
use keel_tls::Transport;

use crate::process::{Launch, Process};
use crate::{admin, probe};

/// What a node is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Controller,
    Broker,
}

/// Where nodes listen.
#[derive(Clone, Debug)]
pub enum Addressing {
    /// Every node on 127.0.0.1, each on a port of its own picked free at
    /// layout time: tests of one binary run side by side.
    Localhost,
    /// Controller `i` (0-based) on `127.0.<net>.<11+i>`, broker `i` on
    /// `127.0.<net>.<21+i>`: one address per node, so a packet filter can
    /// cut any pair.
    Subnet { net: u8, ports: Ports },
}

/// Ports on per-node addresses.
#[derive(Clone, Copy, Debug)]
pub enum Ports {
    /// One free port per node (and per metrics listener), picked at layout.
    Free,
    /// The same ports on every node of a role.
    Fixed {
        controller: u16,
        broker: u16,
        controller_metrics: u16,
        broker_metrics: u16,
    },
}

/// Where brokers' Kafka listeners (`--kafka-listen`) listen: on each
/// broker's own address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KafkaPorts {
    /// A free port per broker, picked at layout.
    Free,
    /// This port on every broker (they have addresses of their own).
    Fixed(u16),
}

/// Names of node directories and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// `c1`, `b1`.
    Short,
    /// `controller-1`, `broker-1`.
    Long,
}

/// Where a cluster's files go.
#[derive(Debug)]
pub enum Root {
    /// A temp dir removed on drop (kept when `keep`, for a post-mortem).
    Temp { prefix: String, keep: bool },
    /// A given directory (created if missing, never removed).
    At(PathBuf),
}

/// A file system mounted over one node's data dir (unmounted when it is
/// dropped). The kit only holds it; the harness that made it reaches its
/// own type through [`DataDisk::as_any`]. `Sync`: a cluster is shared
/// across tasks.
pub trait DataDisk: Any + Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// Mounts a [`DataDisk`] for each node (see [`Spec::data_disk`]).
pub trait DiskMaker: std::fmt::Debug + Send + Sync {
    /// Where a node's data dir is inside its disk dir `dir`.
    fn data_dir(&self, dir: &Path) -> PathBuf;
    /// Mounts a file system under `dir` (the node's disk dir, created if
    /// missing) so that [`DiskMaker::data_dir`] of `dir` is on it.
    fn mount(&self, dir: &Path) -> anyhow::Result<Box<dyn DataDisk>>;
}

/// Environment variables every node of a cluster gets (see
/// [`Spec::node_env`]), made once the cluster's directory exists.
pub trait NodeEnv: std::fmt::Debug + Send + Sync {
    /// The variables, given the cluster's root directory (where any file
    /// they name may go).
    fn env(&self, root: &Path) -> anyhow::Result<Vec<(String, String)>>;
}

/// Everything that shapes a cluster; [`Spec::new`] gives the defaults.
#[derive(Debug)]
pub struct Spec {
    /// The `keel` binary every node runs.
    pub exe: PathBuf,
    pub cluster_id: String,
    pub controllers: usize,
    pub brokers: usize,
    pub addressing: Addressing,
    pub root: Root,
    /// Data dirs under `<root>/<data_subdir>/<name>`; "" for the root itself.
    pub data_subdir: String,
    /// Logs under `<root>/<logs_subdir>/<name>.log`.
    pub logs_subdir: String,
    pub naming: Naming,
    /// Flags after the standard ones, for every controller.
    pub controller_flags: Vec<String>,
    /// Flags after the standard ones, for every broker.
    pub broker_flags: Vec<String>,
    /// `RUST_LOG` of controllers and brokers (`None` inherits).
    pub controller_log: Option<String>,
    pub broker_log: Option<String>,
    /// Give every node a Prometheus listener (`--metrics-listen`).
    pub metrics: bool,
    /// Processes in process groups of their own (see [`Launch`]).
    pub own_process_groups: bool,
    /// Mutual TLS: a CA and a certificate per node and for the `admin`
    /// user in `<root>/certs` (made on first use, reused after), every
    /// node started with its own, the kit's clients using admin's.
    pub tls: bool,
    /// Every node's data dir on a file system of its own, mounted by this
    /// maker when the cluster is laid out (`None`: the data dir is a plain
    /// directory under the root).
    pub data_disk: Option<Arc<dyn DiskMaker>>,
    /// Run a binary built with a deliberately unsafe feature (its
    /// `--version` says `UNSAFE`). Refused otherwise: such a build left
    /// in `target/` by a feature test loses acknowledged writes, and every
    /// other test run on it would report its failures as Keel's.
    pub allow_unsafe_build: bool,
    /// Extra environment of every node (`None`: none).
    pub node_env: Option<Arc<dyn NodeEnv>>,
    /// A Kafka listener on every broker (`None`: none).
    pub kafka: Option<KafkaPorts>,
    /// Over TLS, `--super-users-via-brokers` on the controllers: the
    /// kit's admin user keeps its power through a broker's Kafka listener,
    /// as on `keel dev` (on by default; off is the controllers' default).
    pub super_users_via_brokers: bool,
}

impl Spec {
    /// Three controllers, no broker, on 127.0.0.1 with free ports, in a
    /// temp dir, quiet logs.
    pub fn new(exe: impl Into<PathBuf>, cluster_id: impl Into<String>) -> Self {
        Self {
            exe: exe.into(),
            cluster_id: cluster_id.into(),
            controllers: 3,
            brokers: 0,
            addressing: Addressing::Localhost,
            root: Root::Temp {
                prefix: "keel-".into(),
                keep: false,
            },
            data_subdir: "data".into(),
            logs_subdir: "logs".into(),
            naming: Naming::Short,
            controller_flags: Vec::new(),
            broker_flags: Vec::new(),
            controller_log: Some("info,openraft=warn".into()),
            broker_log: Some("info,openraft=warn".into()),
            metrics: false,
            own_process_groups: false,
            tls: false,
            data_disk: None,
            allow_unsafe_build: false,
            node_env: None,
            kafka: None,
            super_users_via_brokers: true,
        }
    }

    /// `--super-users-via-brokers` or not (see
    /// [`Spec::super_users_via_brokers`]).
    pub fn super_users_via_brokers(mut self, on: bool) -> Self {
        self.super_users_via_brokers = on;
        self
    }

    /// A Kafka listener on every broker (see [`Spec::kafka`]).
    pub fn kafka(mut self, ports: KafkaPorts) -> Self {
        self.kafka = Some(ports);
        self
    }

    /// Extra environment for every node (see [`Spec::node_env`]).
    pub fn node_env(mut self, env: Option<Arc<dyn NodeEnv>>) -> Self {
        self.node_env = env;
        self
    }

    /// Allows a deliberately unsafe build (see [`Spec::allow_unsafe_build`]).
    pub fn allow_unsafe_build(mut self, on: bool) -> Self {
        self.allow_unsafe_build = on;
        self
    }

    /// Data dirs on disks of `maker` (see [`Spec::data_disk`]).
    pub fn data_disk(mut self, maker: Option<Arc<dyn DiskMaker>>) -> Self {
        self.data_disk = maker;
        self
    }

    /// Mutual TLS on every node and kit client (see [`Spec::tls`]).
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }

    pub fn controllers(mut self, n: usize) -> Self {
        self.controllers = n;
        self
    }

    pub fn brokers(mut self, n: usize) -> Self {
        self.brokers = n;
        self
    }

    pub fn addressing(mut self, a: Addressing) -> Self {
        self.addressing = a;
        self
    }

    /// `127.0.<net>.x` with free ports.
    pub fn subnet(self, net: u8) -> Self {
        self.addressing(Addressing::Subnet {
            net,
            ports: Ports::Free,
        })
    }

    pub fn root(mut self, r: Root) -> Self {
        self.root = r;
        self
    }

    pub fn controller_flags<S: AsRef<str>>(mut self, f: &[S]) -> Self {
        self.controller_flags
            .extend(f.iter().map(|s| s.as_ref().to_string()));
        self
    }

    pub fn broker_flags<S: AsRef<str>>(mut self, f: &[S]) -> Self {
        self.broker_flags
            .extend(f.iter().map(|s| s.as_ref().to_string()));
        self
    }

    pub fn logs(mut self, controller: Option<&str>, broker: Option<&str>) -> Self {
        self.controller_log = controller.map(str::to_string);
        self.broker_log = broker.map(str::to_string);
        self
    }

    pub fn metrics(mut self, on: bool) -> Self {
        self.metrics = on;
        self
    }
}

/// A free TCP port on `ip`, never the same one twice in this process (two
/// nodes given one address would make one quorum of two nodes).
///
/// Ports come from below the kernel's ephemeral range: a port the kernel
/// hands out for `bind(0)` is also one it hands out as the source port of
/// any outgoing connection, so between picking it and the node binding it,
/// another test's client could take it ("Address already in use"). Below
/// the range nothing takes a port unless it asks for it by number.
pub fn free_port(ip: IpAddr) -> anyhow::Result<u16> {
    static GIVEN: Mutex<Vec<(IpAddr, u16)>> = Mutex::new(Vec::new());
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (low, high) = fixed_port_range();
    let span = u32::from(high - low);
    // Spread processes (test binaries, harnesses) over the range.
    let base = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span.min(5_000) {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = low + ((base + n) % span) as u16;
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if given.contains(&(ip, port)) {
            continue;
        }
        if TcpListener::bind((ip, port)).is_ok() {
            given.push((ip, port));
            return Ok(port);
        }
    }
    bail!("no free port on {ip} in {low}..{high}")
}

/// `[low, high)`: the ports below the kernel's ephemeral range (read from
/// `/proc/sys/net/ipv4/ip_local_port_range`), from 10000 up.
fn fixed_port_range() -> (u16, u16) {
    const LOW: u16 = 10_000;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if ephemeral_low > LOW + 1_000 {
        (LOW, ephemeral_low)
    } else {
        // An unusual range: fall back to the top of the port space.
        (61_000, 65_535)
    }
}

/// Fails when `exe --version` names a deliberately unsafe build (checked
/// once per binary and modification time).
pub fn check_safe_build(exe: &Path) -> anyhow::Result<()> {
    type Seen = Vec<(PathBuf, Option<std::time::SystemTime>, String)>;
    static SEEN: Mutex<Seen> = Mutex::new(Vec::new());
    let modified = std::fs::metadata(exe).and_then(|m| m.modified()).ok();
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let version = match seen.iter().find(|(p, m, _)| p == exe && *m == modified) {
        Some((_, _, v)) => v.clone(),
        None => {
            let out = std::process::Command::new(exe)
                .arg("--version")
                .output()
                .with_context(|| format!("run {} --version", exe.display()))?;
            let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
            seen.push((exe.to_path_buf(), modified, v.clone()));
            v
        }
    };
    if version.contains("UNSAFE") {
        bail!(
            "{} is a deliberately unsafe build ({version}); rebuild it without the feature \
             (`cargo build`) or allow it with Spec::allow_unsafe_build",
            exe.display()
        );
    }
    Ok(())
}

/// One node: its role, id, addresses and process.
pub struct Node {
    pub role: Role,
    /// Node id (controller) or broker id.
    pub id: u32,
    pub addr: SocketAddr,
    /// The Prometheus listener, when the spec asks for one.
    pub metrics_addr: Option<SocketAddr>,
    /// A broker's Kafka listener, when the spec asks for one.
    pub kafka_addr: Option<SocketAddr>,
    pub data_dir: PathBuf,
    pub process: Process,
    /// The file system the data dir is on, when the spec gives one.
    /// Declared after `process`: fields drop in order, so the process is
    /// killed before its disk is unmounted.
    pub disk: Option<Box<dyn DataDisk>>,
}

impl Node {
    pub fn name(&self) -> &str {
        &self.process.name
    }

    /// `ip:port` of the node's listener.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    pub fn ip(&self) -> IpAddr {
        self.addr.ip()
    }

    /// (Re)starts the process on its data dir.
    pub fn start(&mut self) -> anyhow::Result<()> {
        self.process.start()
    }

    pub fn running(&self) -> bool {
        self.process.running()
    }

    pub fn kill(&mut self) {
        self.process.kill()
    }

    /// The `history.jsonl` a broker writes (one JSON object per line).
    pub fn history_path(&self) -> PathBuf {
        self.data_dir.join("history.jsonl")
    }

    /// Process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// A memory figure of the running process, in bytes (0 if unknown).
    pub fn memory_bytes(&self, what: probe::Memory) -> u64 {
        self.pid().map_or(0, |pid| probe::memory_bytes(pid, what))
    }

    /// Resident memory of the running process, in bytes (0 if unknown).
    pub fn rss_bytes(&self) -> u64 {
        self.memory_bytes(probe::Memory::Rss)
    }

    /// CPU time (clock ticks) the running process used so far.
    pub fn cpu_ticks(&self) -> Option<u64> {
        probe::cpu_ticks(self.pid()?)
    }

    /// Allocated bytes of the data dir (as `du` counts them).
    pub fn disk_bytes(&self) -> u64 {
        probe::disk_bytes(&self.data_dir)
    }
}

enum Dir {
    Temp(tempfile::TempDir),
    At(PathBuf),
}

impl Dir {
    fn path(&self) -> &Path {
        match self {
            Dir::Temp(t) => t.path(),
            Dir::At(p) => p,
        }
    }
}

/// Controllers (ids 1..) then brokers (ids 1..), in one list.
pub struct Cluster {
    // Dropped after `nodes` (fields drop in order): processes die before
    // their directory goes.
    pub nodes: Vec<Node>,
    dir: Dir,
    pub cluster_id: String,
    spec_exe: PathBuf,
    /// Extra environment of every node (from [`Spec::node_env`]).
    node_env: Vec<(String, String)>,
    addressing: Addressing,
    data_subdir: String,
    logs_subdir: String,
    naming: Naming,
    controller_flags: Vec<String>,
    broker_flags: Vec<String>,
    controller_log: Option<String>,
    broker_log: Option<String>,
    metrics: bool,
    own_process_groups: bool,
    /// Where the certificates are, when the cluster speaks TLS.
    certs: Option<PathBuf>,
    /// How the kit's clients speak: as user `admin`, or plaintext.
    transport: Transport,
    /// What mounts each node's data disk, when the spec gives one.
    data_disk: Option<Arc<dyn DiskMaker>>,
    /// Brokers' Kafka listeners, when the spec asks for them.
    kafka: Option<KafkaPorts>,
    /// `--super-users` of controllers over TLS: the kit's admin user only
    /// (a request a broker forwards acts as the Kafka client that sent it,
    /// never as the broker).
    super_users: String,
    /// See [`Spec::super_users_via_brokers`].
    super_users_via_brokers: bool,
    /// The port of controllers' Kafka listeners (each on its own address),
    /// when brokers have them and nodes have addresses of their own.
    controller_kafka_port: Option<u16>,
}

/// The user whose certificate the kit's clients present.
pub const ADMIN_USER: &str = "admin";

impl Cluster {
    /// Lays the cluster out (addresses, dirs, arguments); starts nothing.
    pub fn new(spec: Spec) -> anyhow::Result<Self> {
        let dir = match spec.root {
            Root::Temp { prefix, keep } => {
                let t = tempfile::Builder::new()
                    .prefix(&prefix)
                    .disable_cleanup(keep)
                    .tempdir()
                    .context("create a temp dir")?;
                Dir::Temp(t)
            }
            Root::At(p) => {
                std::fs::create_dir_all(&p).with_context(|| format!("create {}", p.display()))?;
                Dir::At(p)
            }
        };
        let node_env = match &spec.node_env {
            Some(e) => e.env(dir.path())?,
            None => Vec::new(),
        };
        let mut c = Cluster {
            nodes: Vec::new(),
            dir,
            cluster_id: spec.cluster_id,
            spec_exe: spec.exe,
            node_env,
            addressing: spec.addressing,
            data_subdir: spec.data_subdir,
            logs_subdir: spec.logs_subdir,
            naming: spec.naming,
            controller_flags: spec.controller_flags,
            broker_flags: spec.broker_flags,
            controller_log: spec.controller_log,
            broker_log: spec.broker_log,
            metrics: spec.metrics,
            own_process_groups: spec.own_process_groups,
            certs: None,
            transport: Transport::Plaintext,
            data_disk: spec.data_disk,
            kafka: spec.kafka,
            super_users: format!("User:{ADMIN_USER}"),
            super_users_via_brokers: spec.super_users_via_brokers,
            controller_kafka_port: None,
        };
        if spec.tls {
            let certs = c.dir.path().join("certs");
            make_certs(&certs, &c.cluster_id, spec.controllers, spec.brokers)?;
            c.transport =
                tls_transport(&certs, &keel_tls::Identity::user(&c.cluster_id, ADMIN_USER))?;
            c.certs = Some(certs);
        }
        let mut controllers = Vec::new();
        for i in 0..spec.controllers {
            controllers.push(c.addresses(Role::Controller, i)?);
        }
        // Controllers' Kafka listeners share one port (each controller
        // finds the others' at its voter address with its own port).
        c.controller_kafka_port = match (&c.addressing, c.kafka) {
            (Addressing::Subnet { .. }, Some(KafkaPorts::Fixed(port))) => port.checked_add(1),
            (Addressing::Subnet { .. }, Some(KafkaPorts::Free)) => match controllers.first() {
                Some((addr, _)) => Some(free_port(addr.ip())?),
                None => None,
            },
            _ => None,
        };
        let voters = voters_of(&controllers);
        for (i, (addr, metrics)) in controllers.iter().enumerate() {
            let node = c.controller_node(i as u32 + 1, *addr, *metrics, &voters, false);
            c.nodes.push(node);
        }
        for i in 0..spec.brokers {
            let (addr, metrics) = c.addresses(Role::Broker, i)?;
            let kafka = match c.kafka {
                None => None,
                Some(KafkaPorts::Fixed(port)) => Some(SocketAddr::new(addr.ip(), port)),
                Some(KafkaPorts::Free) => Some(SocketAddr::new(addr.ip(), free_port(addr.ip())?)),
            };
            let node = c.broker_node(i as u32 + 1, addr, metrics, kafka);
            c.nodes.push(node);
        }
        for i in 0..c.nodes.len() {
            c.mount_disk(i)?;
        }
        Ok(c)
    }

    /// Lays the cluster out and starts every node.
    pub fn start(spec: Spec) -> anyhow::Result<Self> {
        if !spec.allow_unsafe_build {
            check_safe_build(&spec.exe)?;
        }
        let mut c = Self::new(spec)?;
        c.start_all()?;
        Ok(c)
    }

    /// The listener (and metrics) address of the `i`th node of `role`.
    fn addresses(&self, role: Role, i: usize) -> anyhow::Result<(SocketAddr, Option<SocketAddr>)> {
        let (ip, fixed) = match &self.addressing {
            Addressing::Localhost => (IpAddr::V4(Ipv4Addr::LOCALHOST), None),
            Addressing::Subnet { net, ports } => {
                let host = match role {
                    Role::Controller => 11 + i,
                    Role::Broker => 21 + i,
                };
                let host =
                    u8::try_from(host).map_err(|_| anyhow!("too many nodes for a subnet"))?;
                let fixed = match ports {
                    Ports::Free => None,
                    Ports::Fixed {
                        controller,
                        broker,
                        controller_metrics,
                        broker_metrics,
                    } => Some(match role {
                        Role::Controller => (*controller, *controller_metrics),
                        Role::Broker => (*broker, *broker_metrics),
                    }),
                };
                (IpAddr::V4(Ipv4Addr::new(127, 0, *net, host)), fixed)
            }
        };
        let (port, metrics_port) = match fixed {
            Some(p) => p,
            None => (
                free_port(ip)?,
                if self.metrics { free_port(ip)? } else { 0 },
            ),
        };
        let metrics = self.metrics.then_some(SocketAddr::new(ip, metrics_port));
        Ok((SocketAddr::new(ip, port), metrics))
    }

    fn node_name(&self, role: Role, id: u32) -> String {
        match (self.naming, role) {
            (Naming::Short, Role::Controller) => format!("c{id}"),
            (Naming::Short, Role::Broker) => format!("b{id}"),
            (Naming::Long, Role::Controller) => format!("controller-{id}"),
            (Naming::Long, Role::Broker) => format!("broker-{id}"),
        }
    }

    fn data_dir_of(&self, name: &str) -> PathBuf {
        match &self.data_disk {
            Some(maker) => maker.data_dir(&self.disk_dir_of(name)),
            None => self.dir.path().join(&self.data_subdir).join(name),
        }
    }

    /// Where node `name`'s own file system lives, when the spec gives
    /// nodes disks.
    fn disk_dir_of(&self, name: &str) -> PathBuf {
        self.dir.path().join("disks").join(name)
    }

    /// Mounts node `i`'s disk, when the spec gives nodes disks and it has
    /// none yet.
    fn mount_disk(&mut self, i: usize) -> anyhow::Result<()> {
        let Some(maker) = self.data_disk.clone() else {
            return Ok(());
        };
        if self.nodes[i].disk.is_some() {
            return Ok(());
        }
        let dir = self.disk_dir_of(self.nodes[i].name());
        let disk = maker.mount(&dir)?;
        let data_dir = &self.nodes[i].data_dir;
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("create {}", data_dir.display()))?;
        self.nodes[i].disk = Some(disk);
        Ok(())
    }

    /// The extra environment every node runs with (see [`Spec::node_env`]).
    pub fn node_env(&self) -> &[(String, String)] {
        &self.node_env
    }

    fn log_of(&self, name: &str) -> PathBuf {
        self.dir
            .path()
            .join(&self.logs_subdir)
            .join(format!("{name}.log"))
    }

    fn launch(&self, args: Vec<String>, rust_log: &Option<String>) -> Launch {
        Launch {
            exe: self.spec_exe.clone(),
            args,
            rust_log: rust_log.clone(),
            env: self.node_env.clone(),
            own_process_group: self.own_process_groups,
        }
    }

    fn controller_node(
        &self,
        id: u32,
        addr: SocketAddr,
        metrics: Option<SocketAddr>,
        voters: &str,
        join: bool,
    ) -> Node {
        let name = self.node_name(Role::Controller, id);
        let data_dir = self.data_dir_of(&name);
        let mut args = vec![
            "controller".to_string(),
            "--node-id".into(),
            id.to_string(),
            "--listen".into(),
            addr.to_string(),
            "--voters".into(),
            voters.to_string(),
            "--data-dir".into(),
            data_dir.display().to_string(),
            "--cluster-id".into(),
            self.cluster_id.clone(),
        ];
        if let Some(m) = metrics {
            args.extend(["--metrics-listen".into(), m.to_string()]);
        }
        let kafka_addr = self
            .controller_kafka_port
            .map(|port| SocketAddr::new(addr.ip(), port));
        if let Some(k) = kafka_addr {
            args.extend(["--kafka-listen".into(), k.to_string()]);
        }
        if join {
            args.push("--join".into());
        }
        args.extend(self.tls_flags(&keel_tls::Identity::controller(
            &self.cluster_id,
            u64::from(id),
        )));
        if self.certs.is_some() {
            // The kit's clients speak as the admin user.
            args.extend(["--super-users".into(), self.super_users.clone()]);
            if self.super_users_via_brokers {
                args.push("--super-users-via-brokers".into());
            }
        }
        args.extend(self.controller_flags.iter().cloned());
        Node {
            role: Role::Controller,
            id,
            addr,
            metrics_addr: metrics,
            kafka_addr,
            process: Process::new(
                name.clone(),
                self.launch(args, &self.controller_log),
                self.log_of(&name),
            ),
            data_dir,
            disk: None,
        }
    }

    fn broker_node(
        &self,
        id: u32,
        addr: SocketAddr,
        metrics: Option<SocketAddr>,
        kafka: Option<SocketAddr>,
    ) -> Node {
        let name = self.node_name(Role::Broker, id);
        let data_dir = self.data_dir_of(&name);
        let mut args = vec![
            "broker".to_string(),
            "--broker-id".into(),
            id.to_string(),
            "--listen".into(),
            addr.to_string(),
            "--controllers".into(),
            self.controller_addrs().join(","),
            "--cluster-id".into(),
            self.cluster_id.clone(),
            "--data-dir".into(),
            data_dir.display().to_string(),
        ];
        if let Some(m) = metrics {
            args.extend(["--metrics-listen".into(), m.to_string()]);
        }
        if let Some(k) = kafka {
            args.extend(["--kafka-listen".into(), k.to_string()]);
        }
        args.extend(self.tls_flags(&keel_tls::Identity::broker(&self.cluster_id, id)));
        args.extend(self.broker_flags.iter().cloned());
        Node {
            role: Role::Broker,
            id,
            addr,
            metrics_addr: metrics,
            kafka_addr: kafka,
            process: Process::new(
                name.clone(),
                self.launch(args, &self.broker_log),
                self.log_of(&name),
            ),
            data_dir,
            disk: None,
        }
    }

    /// Lays out one more controller (id = controllers + 1) started with
    /// `--join` (it waits to be added as a voter); returns its index in
    /// [`Cluster::nodes`]. Not started.
    pub fn add_joining_controller(&mut self) -> anyhow::Result<usize> {
        let n = self.controller_count();
        let (addr, metrics) = self.addresses(Role::Controller, n)?;
        let mut all: Vec<(SocketAddr, Option<SocketAddr>)> = self
            .controllers()
            .map(|n| (n.addr, n.metrics_addr))
            .collect();
        all.push((addr, metrics));
        if let Some(certs) = &self.certs {
            issue_missing(
                certs,
                &keel_tls::Identity::controller(&self.cluster_id, n as u64 + 1),
            )?;
        }
        let node = self.controller_node(n as u32 + 1, addr, metrics, &voters_of(&all[..n]), true);
        // After the last controller, before the brokers.
        self.nodes.insert(n, node);
        self.mount_disk(n)?;
        Ok(n)
    }

    /// The cluster's directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The certificates directory (`ca.pem`, `controller-1.pem`, ...),
    /// when the cluster speaks TLS.
    pub fn certs_dir(&self) -> Option<&Path> {
        self.certs.as_deref()
    }

    /// How the kit's clients speak (as user `admin` over TLS, or
    /// plaintext).
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// A transport presenting `identity`'s certificate (issued by the
    /// cluster CA now if missing); plaintext when the cluster is.
    pub fn transport_as(&self, identity: &keel_tls::Identity) -> anyhow::Result<Transport> {
        match &self.certs {
            None => Ok(Transport::Plaintext),
            Some(certs) => {
                issue_missing(certs, identity)?;
                tls_transport(certs, identity)
            }
        }
    }

    /// The `--tls-*` flags of the node named `identity` (none without TLS).
    fn tls_flags(&self, identity: &keel_tls::Identity) -> Vec<String> {
        let Some(certs) = &self.certs else {
            // Nodes refuse to start without TLS unless told to speak
            // plaintext.
            return vec!["--allow-plaintext".into()];
        };
        let (cert, key) = keel_tls::certs::paths(certs, identity);
        vec![
            "--tls-cert".into(),
            cert.display().to_string(),
            "--tls-key".into(),
            key.display().to_string(),
            "--tls-ca".into(),
            certs.join("ca.pem").display().to_string(),
        ]
    }

    /// Starts every node that is not running (controllers first).
    pub fn start_all(&mut self) -> anyhow::Result<()> {
        for n in self.nodes.iter_mut().filter(|n| !n.running()) {
            n.start()?;
        }
        Ok(())
    }

    /// Starts every controller that is not running.
    pub fn start_controllers(&mut self) -> anyhow::Result<()> {
        for n in self
            .nodes
            .iter_mut()
            .filter(|n| n.role == Role::Controller && !n.running())
        {
            n.start()?;
        }
        Ok(())
    }

    /// Starts every broker that is not running.
    pub fn start_brokers(&mut self) -> anyhow::Result<()> {
        for n in self
            .nodes
            .iter_mut()
            .filter(|n| n.role == Role::Broker && !n.running())
        {
            n.start()?;
        }
        Ok(())
    }

    /// Fails naming the first node whose address is taken (another run, or
    /// a `keel dev`, still alive?).
    pub fn check_addresses_free(&self) -> anyhow::Result<()> {
        let taken: Vec<String> = self
            .nodes
            .iter()
            .flat_map(|n| {
                std::iter::once(n.addr)
                    .chain(n.metrics_addr)
                    .chain(n.kafka_addr)
            })
            .filter(|a| TcpListener::bind(a).is_err())
            .map(|a| a.to_string())
            .collect();
        if !taken.is_empty() {
            bail!("address(es) already in use: {}", taken.join(", "));
        }
        Ok(())
    }

    pub fn controllers(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|n| n.role == Role::Controller)
    }

    pub fn brokers(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|n| n.role == Role::Broker)
    }

    pub fn controller_count(&self) -> usize {
        self.controllers().count()
    }

    pub fn broker_count(&self) -> usize {
        self.brokers().count()
    }

    /// Controller `i` (0-based: node id `i + 1`).
    pub fn controller(&self, i: usize) -> &Node {
        self.controllers().nth(i).expect("no such controller")
    }

    pub fn controller_mut(&mut self, i: usize) -> &mut Node {
        self.nodes
            .iter_mut()
            .filter(|n| n.role == Role::Controller)
            .nth(i)
            .expect("no such controller")
    }

    /// Broker `i` (0-based: broker id `i + 1`).
    pub fn broker(&self, i: usize) -> &Node {
        self.brokers().nth(i).expect("no such broker")
    }

    pub fn broker_mut(&mut self, i: usize) -> &mut Node {
        self.nodes
            .iter_mut()
            .filter(|n| n.role == Role::Broker)
            .nth(i)
            .expect("no such broker")
    }

    /// `ip:port` of every controller, in id order.
    pub fn controller_addrs(&self) -> Vec<String> {
        self.controllers().map(Node::address).collect()
    }

    /// `ip:port` of every broker, in id order.
    pub fn broker_addrs(&self) -> Vec<String> {
        self.brokers().map(Node::address).collect()
    }

    /// `ip:port` of every broker's Kafka listener, in id order (brokers
    /// without one are left out).
    pub fn kafka_addrs(&self) -> Vec<String> {
        self.brokers()
            .filter_map(|n| n.kafka_addr.map(|a| a.to_string()))
            .collect()
    }

    /// `ip:port` of every controller's Kafka listener, in id order (only
    /// with a subnet layout and brokers' Kafka listeners).
    pub fn controller_kafka_addrs(&self) -> Vec<String> {
        self.controllers()
            .filter_map(|n| n.kafka_addr.map(|a| a.to_string()))
            .collect()
    }

    /// `1@ip:port,2@...`, as `--voters` takes it.
    pub fn voters(&self) -> String {
        let v: Vec<(SocketAddr, Option<SocketAddr>)> =
            self.controllers().map(|n| (n.addr, None)).collect();
        voters_of(&v)
    }

    /// CPU time (clock ticks) the controllers used so far, all together
    /// (`None` if one is not running or cannot be read).
    pub fn controllers_cpu_ticks(&self) -> Option<u64> {
        self.controllers().map(Node::cpu_ticks).sum()
    }

    /// Allocated bytes of every controller's data dir together.
    pub fn controllers_disk_bytes(&self) -> u64 {
        self.controllers().map(Node::disk_bytes).sum()
    }

    /// A client that follows NOT_CONTROLLER redirects over every
    /// controller.
    pub fn client(&self, request: Duration, deadline: Duration) -> ControllerClient {
        ControllerClient::new(self.controller_addrs())
            .with_timeouts(request, deadline)
            .with_transport(self.transport.clone())
    }

    /// Fails, with its log tail, when a node that should run has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        self.check_alive_except(&[])
    }

    /// As [`Cluster::check_alive`], for the controllers only.
    pub fn check_controllers_alive(&mut self) -> anyhow::Result<()> {
        self.check_alive_except(&self.broker_indexes())
    }

    /// As [`Cluster::check_alive`], skipping the nodes at these indexes
    /// (of [`Cluster::nodes`]).
    pub fn check_alive_except(&mut self, except: &[usize]) -> anyhow::Result<()> {
        for (i, n) in self.nodes.iter_mut().enumerate() {
            if except.contains(&i) {
                continue;
            }
            if let Some(st) = n.process.exited() {
                bail!(
                    "{} exited ({st}); last log lines:\n{}",
                    n.name(),
                    n.process.log_tail(20)
                );
            }
        }
        Ok(())
    }

    /// Continues stopped nodes and restarts killed (or exited) ones; says
    /// what it did, one line per node.
    pub fn heal_processes(&mut self) -> Vec<String> {
        let mut done = Vec::new();
        for n in self.nodes.iter_mut() {
            if let Some(st) = n.process.exited() {
                done.push(format!("{} had exited ({st})", n.name()));
            }
            if n.process.paused() {
                n.process.resume();
                done.push(format!("resumed {}", n.name()));
            }
            if !n.running() {
                match n.start() {
                    Ok(()) => done.push(format!("restarted {}", n.name())),
                    Err(e) => done.push(format!("cannot restart {}: {e:#}", n.name())),
                }
            }
        }
        done
    }

    /// SIGKILLs every node (brokers first).
    pub fn kill_all(&mut self) {
        for n in self.nodes.iter_mut().rev() {
            n.kill();
        }
    }

    /// The last `lines` lines of every node's log, for a failure message.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            out.push_str(&format!(
                "--- {} ({}) log, last {lines} lines ---\n{}\n",
                n.name(),
                n.addr,
                n.process.log_tail(lines)
            ));
        }
        out
    }

    /// DescribeNode on controller `i` (no redirect), within `timeout`.
    pub async fn describe_node(
        &self,
        i: usize,
        timeout: Duration,
    ) -> Option<pb::DescribeNodeResponse> {
        let node = self.controller(i);
        if !node.running() {
            return None;
        }
        describe_node_with(&self.transport, &node.address(), timeout).await
    }

    /// The highest Raft term any running controller reports (each asked
    /// within `timeout`); `None` when none answers. Every election raises
    /// it, so its growth over a run (read while every controller answers)
    /// bounds the leadership changes from above.
    pub async fn raft_term(&self, timeout: Duration) -> Option<u64> {
        let mut term = None;
        for i in 0..self.controller_count() {
            if let Some(d) = self.describe_node(i, timeout).await {
                term = Some(term.map_or(d.term, |t: u64| t.max(d.term)));
            }
        }
        term
    }

    /// Waits until a running controller says it is the active one; returns
    /// its index.
    pub async fn wait_active(&mut self, timeout: Duration) -> anyhow::Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_controllers_alive()?;
            for i in 0..self.controller_count() {
                if self
                    .describe_node(i, Duration::from_millis(1500))
                    .await
                    .is_some_and(|d| d.active_controller)
                {
                    return Ok(i);
                }
            }
            if Instant::now() >= deadline {
                bail!(
                    "no active controller within {timeout:?}\n{}",
                    self.log_tails(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every running controller applied the same index, at
    /// least `min_index`, with the same image hash, and one of them is
    /// active; returns (index, hash). Each node hashes its whole image to
    /// answer, so rounds are spaced by at least their own duration.
    pub async fn wait_converged(
        &mut self,
        min_index: u64,
        timeout: Duration,
    ) -> anyhow::Result<(u64, String)> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_controllers_alive()?;
            let round = Instant::now();
            let mut views = Vec::new();
            for i in 0..self.controller_count() {
                if self.controller(i).running() {
                    views.push(self.describe_node(i, Duration::from_secs(10)).await);
                }
            }
            if !views.is_empty() && views.iter().all(Option::is_some) {
                let v: Vec<_> = views.into_iter().flatten().collect();
                let first = (v[0].last_applied_index, v[0].image_hash.clone());
                if first.0 >= min_index
                    && v.iter().any(|d| d.active_controller)
                    && v.iter()
                        .all(|d| (d.last_applied_index, &d.image_hash) == (first.0, &first.1))
                {
                    return Ok(first);
                }
            }
            if Instant::now() >= deadline {
                bail!(
                    "controllers did not converge within {timeout:?}\n{}",
                    self.log_tails(30)
                );
            }
            tokio::time::sleep(round.elapsed().max(Duration::from_millis(100))).await;
        }
    }

    /// Waits until `pred` holds for the active controller's description of
    /// the cluster; returns it.
    pub async fn wait_cluster<F>(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: F,
    ) -> anyhow::Result<pb::DescribeClusterResponse>
    where
        F: Fn(&pb::DescribeClusterResponse) -> bool,
    {
        let client = self.client(Duration::from_secs(10), Duration::from_secs(20));
        let deadline = Instant::now() + timeout;
        loop {
            self.check_controllers_alive()?;
            if let Ok(r) = admin::describe_cluster(&client).await {
                if pred(&r) {
                    return Ok(r);
                }
            }
            if Instant::now() >= deadline {
                bail!(
                    "timed out after {timeout:?} waiting for: {what}\n{}",
                    self.log_tails(20)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until brokers `1..=n` are registered, unfenced and not shutting
    /// down.
    pub async fn wait_brokers_unfenced(
        &mut self,
        n: u32,
        timeout: Duration,
    ) -> anyhow::Result<pb::DescribeClusterResponse> {
        self.wait_cluster(&format!("brokers 1-{n} unfenced"), timeout, |r| {
            admin::brokers_unfenced(r, n)
        })
        .await
    }

    /// Waits until every broker of the cluster is registered and active.
    pub async fn wait_all_brokers_active(
        &mut self,
        timeout: Duration,
    ) -> anyhow::Result<pb::DescribeClusterResponse> {
        let n = self.broker_count() as u32;
        self.wait_brokers_unfenced(n, timeout).await
    }

    /// Waits until `pred` holds for the active controller's description of
    /// `topic`; returns it.
    pub async fn wait_topic<F>(
        &mut self,
        topic: &str,
        what: &str,
        timeout: Duration,
        pred: F,
    ) -> anyhow::Result<pb::TopicDescription>
    where
        F: Fn(&pb::TopicDescription) -> bool,
    {
        let client = self.client(Duration::from_secs(10), Duration::from_secs(20));
        let deadline = Instant::now() + timeout;
        loop {
            self.check_controllers_alive()?;
            if let Ok(Some(t)) = admin::describe_topic(&client, topic).await {
                if pred(&t) {
                    return Ok(t);
                }
            }
            if Instant::now() >= deadline {
                bail!(
                    "timed out after {timeout:?} waiting for: {what}\n{}",
                    self.log_tails(20)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Indexes of the brokers: a wait for the cluster's reaction to a
    /// broker stopping (controlled shutdown, a refused twin) must not fail
    /// because that broker exited.
    fn broker_indexes(&self) -> Vec<usize> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.role == Role::Broker)
            .map(|(i, _)| i)
            .collect()
    }
}

/// DescribeNode on the controller at `addr` (no redirect), within
/// `timeout`, over plaintext.
pub async fn describe_node_at(addr: &str, timeout: Duration) -> Option<pb::DescribeNodeResponse> {
    describe_node_with(&Transport::Plaintext, addr, timeout).await
}

/// DescribeNode on the controller at `addr` (no redirect), within
/// `timeout`, over `transport`.
pub async fn describe_node_with(
    transport: &Transport,
    addr: &str,
    timeout: Duration,
) -> Option<pb::DescribeNodeResponse> {
    let fut = async {
        let ep = keel_tls::transport::endpoint(addr)
            .ok()?
            .connect_timeout(timeout)
            .timeout(timeout);
        let ch = transport
            .connect(ep, None, keel_tls::Expect::Controller)
            .await
            .ok()?;
        AdminServiceClient::new(ch)
            .describe_node(pb::DescribeNodeRequest::default())
            .await
            .ok()
            .map(|r| r.into_inner())
    };
    tokio::time::timeout(timeout, fut).await.ok().flatten()
}

/// A CA and certificates for controllers `1..=controllers`, brokers
/// `1..=brokers` and the admin user in `dir`, unless `dir` has a CA
/// already (a restarted cluster keeps its certificates; missing ones are
/// issued).
fn make_certs(
    dir: &Path,
    cluster_id: &str,
    controllers: usize,
    brokers: usize,
) -> anyhow::Result<()> {
    if !dir.join("ca.pem").exists() {
        keel_tls::certs::init(
            dir,
            &keel_tls::certs::InitSpec {
                cluster_id: cluster_id.to_string(),
                controllers: controllers as u64,
                brokers: brokers as u32,
                users: vec![ADMIN_USER.to_string()],
                ips: Vec::new(),
                dns: Vec::new(),
            },
        )
        .with_context(|| format!("make certificates in {}", dir.display()))?;
        return Ok(());
    }
    let ids = (1..=controllers as u64)
        .map(|i| keel_tls::Identity::controller(cluster_id, i))
        .chain((1..=brokers as u32).map(|i| keel_tls::Identity::broker(cluster_id, i)))
        .chain(std::iter::once(keel_tls::Identity::user(
            cluster_id, ADMIN_USER,
        )));
    for id in ids {
        issue_missing(dir, &id)?;
    }
    Ok(())
}

/// Issues `identity`'s certificate with the CA in `dir` unless it exists.
pub fn issue_missing(dir: &Path, identity: &keel_tls::Identity) -> anyhow::Result<()> {
    let (cert, key) = keel_tls::certs::paths(dir, identity);
    if cert.exists() && key.exists() {
        return Ok(());
    }
    let issued = keel_tls::certs::load_ca(dir)?.issue(identity, &[], &[])?;
    keel_tls::certs::write_issued(dir, identity, &issued)?;
    Ok(())
}

/// A TLS transport presenting `identity`'s certificate and key from
/// `dir`, trusting `dir/ca.pem`.
pub fn tls_transport(dir: &Path, identity: &keel_tls::Identity) -> anyhow::Result<Transport> {
    let (cert, key) = keel_tls::certs::paths(dir, identity);
    let files = keel_tls::TlsFiles {
        cert,
        key,
        ca: dir.join("ca.pem"),
    };
    let ctx = keel_tls::TlsContext::load(files, &identity.cluster_id)?;
    Ok(Transport::Tls(std::sync::Arc::new(ctx)))
}

/// As [`tls_transport`], but the certificate need not chain to
/// `dir/ca.pem` nor be within its dates
/// ([`keel_tls::TlsContext::load_unchecked`]): a client that presents, on
/// purpose, a certificate the cluster must refuse.
pub fn tls_transport_unchecked(
    dir: &Path,
    identity: &keel_tls::Identity,
) -> anyhow::Result<Transport> {
    let (cert, key) = keel_tls::certs::paths(dir, identity);
    let files = keel_tls::TlsFiles {
        cert,
        key,
        ca: dir.join("ca.pem"),
    };
    let ctx = keel_tls::TlsContext::load_unchecked(files, &identity.cluster_id)?;
    Ok(Transport::Tls(std::sync::Arc::new(ctx)))
}

fn voters_of(controllers: &[(SocketAddr, Option<SocketAddr>)]) -> String {
    controllers
        .iter()
        .enumerate()
        .map(|(i, (a, _))| format!("{}@{a}", i + 1))
        .collect::<Vec<_>>()
        .join(",")
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsafe_build_is_refused_unless_allowed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let fake = |name: &str, version: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, format!("#!/bin/sh\necho '{version}'\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p
        };
        let safe = fake("safe", "keel 0.1.0");
        let unsafe_ = fake(
            "unsafe",
            "keel 0.1.0 UNSAFE build (a demonstration feature)",
        );
        check_safe_build(&safe).unwrap();
        let e = check_safe_build(&unsafe_).unwrap_err().to_string();
        assert!(e.contains("deliberately unsafe build"), "{e}");
        let e = Cluster::start(Spec::new(&unsafe_, "kit"))
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("deliberately unsafe build"), "{e}");
    }

    #[test]
    fn free_ports_are_below_the_ephemeral_range_and_never_repeat() {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (low, high) = fixed_port_range();
        let ports: Vec<u16> = (0..50).map(|_| free_port(ip).unwrap()).collect();
        assert!(ports.iter().all(|p| (low..high).contains(p)), "{ports:?}");
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len());
    }

    #[test]
    fn a_subnet_layout_gives_each_node_its_own_address_and_the_standard_flags() {
        let spec = Spec::new("/bin/keel", "kit")
            .brokers(2)
            .addressing(Addressing::Subnet {
                net: 0,
                ports: Ports::Fixed {
                    controller: 9093,
                    broker: 9092,
                    controller_metrics: 9100,
                    broker_metrics: 9101,
                },
            })
            .metrics(true)
            .controller_flags(&["--session-timeout-ms", "3000"]);
        let c = Cluster::new(spec).unwrap();
        assert_eq!(
            c.controller_addrs(),
            ["127.0.0.11:9093", "127.0.0.12:9093", "127.0.0.13:9093"]
        );
        assert_eq!(c.broker_addrs(), ["127.0.0.21:9092", "127.0.0.22:9092"]);
        assert_eq!(
            c.voters(),
            "1@127.0.0.11:9093,2@127.0.0.12:9093,3@127.0.0.13:9093"
        );
        let c2 = &c.controller(1).process.launch.args;
        assert_eq!(
            &c2[..5],
            [
                "controller",
                "--node-id",
                "2",
                "--listen",
                "127.0.0.12:9093"
            ]
        );
        assert!(c2.ends_with(&["--session-timeout-ms".to_string(), "3000".into()]));
        assert!(c2
            .windows(2)
            .any(|w| w == ["--metrics-listen", "127.0.0.12:9100"]));
        let b1 = &c.broker(0).process.launch.args;
        assert!(b1.windows(2).any(|w| w
            == [
                "--controllers",
                "127.0.0.11:9093,127.0.0.12:9093,127.0.0.13:9093"
            ]));
        assert!(c.broker(0).data_dir.ends_with("data/b1"));
        assert!(c.broker(1).process.log.ends_with("logs/b2.log"));
        assert!(c.nodes.iter().all(|n| !n.running()));
    }

    #[test]
    fn localhost_layouts_never_share_a_port() {
        let a = Cluster::new(Spec::new("/bin/keel", "kit").brokers(3).metrics(true)).unwrap();
        let b = Cluster::new(Spec::new("/bin/keel", "kit").brokers(3)).unwrap();
        let mut all: Vec<SocketAddr> = a
            .nodes
            .iter()
            .chain(b.nodes.iter())
            .flat_map(|n| {
                std::iter::once(n.addr)
                    .chain(n.metrics_addr)
                    .chain(n.kafka_addr)
            })
            .collect();
        let n = all.len();
        assert_eq!(n, 12 + 6);
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
    }

    #[test]
    fn a_node_reports_its_process_memory_cpu_and_data_dir_use() {
        let dir = tempfile::tempdir().unwrap();
        let launch = Launch {
            exe: "/bin/sh".into(),
            args: vec!["-c".into(), "exec sleep 30".into()],
            rust_log: None,
            env: Vec::new(),
            own_process_group: false,
        };
        let mut n = Node {
            role: Role::Broker,
            id: 1,
            addr: "127.0.0.1:9".parse().unwrap(),
            metrics_addr: None,
            kafka_addr: None,
            data_dir: dir.path().join("b1"),
            process: Process::new("b1", launch, dir.path().join("b1.log")),
            disk: None,
        };
        assert_eq!((n.pid(), n.rss_bytes(), n.cpu_ticks()), (None, 0, None));
        n.start().unwrap();
        assert!(n.pid().is_some());
        assert!(n.rss_bytes() > 0);
        // The shell execs `sleep` (which resets the peak) at a moment of its
        // own: compare once a read of the resident size is followed by a
        // peak at least as large, within a bounded wait.
        let consistent = (0..40).any(|_| {
            let rss = n.rss_bytes();
            let ok = n.memory_bytes(probe::Memory::PeakRss) >= rss && rss > 0;
            if !ok {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            ok
        });
        assert!(
            consistent,
            "the peak resident size stays below the resident size"
        );
        assert!(n.cpu_ticks().is_some());
        std::fs::create_dir_all(&n.data_dir).unwrap();
        std::fs::write(n.data_dir.join("f"), vec![0u8; 8192]).unwrap();
        assert!(n.disk_bytes() >= 8192);
        n.kill();
        assert_eq!(n.rss_bytes(), 0);
    }

    #[test]
    fn a_joining_controller_comes_after_the_others_and_before_the_brokers() {
        let mut c = Cluster::new(Spec::new("/bin/keel", "kit").brokers(1)).unwrap();
        let i = c.add_joining_controller().unwrap();
        assert_eq!(i, 3);
        assert_eq!(c.controller_count(), 4);
        assert_eq!(c.nodes[4].role, Role::Broker);
        let args = &c.controller(3).process.launch.args;
        assert!(args.contains(&"--join".to_string()));
        assert!(args.windows(2).any(|w| w[0] == "--node-id" && w[1] == "4"));
    }
}
