//! The systems `compare` drives, behind one trait: where the leader is,
//! one level of writers against it, the server processes to account, and
//! the fixed description of the setup. Keel and the gRPC echo ceiling are
//! here; ZooKeeper and etcd in modules of their own.

use std::time::Duration;

use keel_testkit::admin::set_config;
use keel_testkit::Cluster;
use serde_json::{json, Value};

use super::{CompareParams, Kind};
use crate::cluster::{self, connect, value};
use crate::commit::{run_level, KeelApi};
use crate::echo::{EchoServer, EchoWriter};
use crate::load::{run_writers_on, Connections, Level};
use crate::{progress, Env};

/// One system under comparison.
#[tonic::async_trait]
pub trait System: Send {
    fn kind(&self) -> Kind;
    /// Pids of its server processes (may be incomplete: then no CPU or
    /// storage figure is given).
    fn pids(&self) -> &[u32];
    /// The address writers talk to now (looked up again before every
    /// level, so a leadership change between levels is followed).
    async fn leader(&mut self) -> anyhow::Result<String>;
    /// `writers` writers against `leader` for `secs`.
    async fn level(&mut self, leader: &str, writers: usize, secs: f64) -> anyhow::Result<Level>;
    /// Fails when the system is broken for good.
    fn check(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
    /// Its part of the `setup` JSON field.
    fn setup(&self) -> Value;
    /// Leadership changes since it was set up, where the system tells
    /// (`null` otherwise).
    async fn leadership_changes(&mut self) -> Value {
        Value::Null
    }
}

/// What every adapter takes from the parameters.
#[derive(Clone, Copy)]
pub struct Load {
    pub value_bytes: usize,
    pub timeout: Duration,
    pub max_ops: u64,
    pub connections: Connections,
}

impl Load {
    pub fn of(p: &CompareParams) -> Self {
        Self {
            value_bytes: p.value_bytes,
            timeout: Duration::from_millis(p.request_timeout_ms),
            max_ops: p.max_ops_per_level,
            connections: p.connections,
        }
    }

    pub fn shared(&self) -> bool {
        self.connections == Connections::Shared
    }
}

/// Pids of the processes listening on `addrs` (`host:port` or
/// `http://host:port`), as far as /proc shows them.
pub fn listener_pids(addrs: &[String]) -> Vec<u32> {
    addrs
        .iter()
        .filter_map(|a| {
            let hp = a.trim_start_matches("http://").trim_end_matches('/');
            keel_testkit::probe::listener_pid(hp.parse().ok()?)
        })
        .collect()
}

/// An ensemble started outside this process (ZooKeeper, etcd), as found
/// when the comparison set it up.
pub struct Ensemble {
    /// The addresses given on the command line.
    pub endpoints: Vec<String>,
    /// Server version, as the leader reports it.
    pub version: String,
    /// The leader when it was set up.
    pub leader_at_start: String,
    /// Pids of the processes listening on `endpoints`.
    pub pids: Vec<u32>,
}

impl Ensemble {
    /// `endpoints`, led by `leader` running `version`.
    pub fn found(endpoints: &[String], leader: String, version: String) -> Self {
        Self {
            endpoints: endpoints.to_vec(),
            version,
            leader_at_start: leader,
            pids: listener_pids(endpoints),
        }
    }

    /// Its `setup` JSON: where it runs, and the `op`, `connection` and
    /// `durability` the writers see.
    pub fn setup(&self, op: String, connection: String, durability: &str) -> Value {
        json!({
            "skipped": false,
            "endpoints": self.endpoints,
            "leader_at_start": self.leader_at_start,
            "version": self.version,
            "server_pids": self.pids,
            "op": op,
            "connection": connection,
            "durability": durability,
        })
    }
}

/// Keel topic the `commit` op writes to.
const TOPIC: &str = "bench-compare";
/// Flags of every Keel controller (as in `commit`).
const KEEL_FLAGS: [&str; 2] = ["--session-timeout-ms", "600000"];
/// 127.0.<subnet>.11-13 of the Keel quorum.
const KEEL_SUBNET: u8 = 20;
/// 127.0.<subnet>.11-13 of the Keel quorum over mutual TLS (`--tls`).
const KEEL_TLS_SUBNET: u8 = 25;
/// Address of the gRPC echo server (the transport ceiling).
const ECHO_IP: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 0, 23, 1);

/// A 3-controller Keel quorum started here, plaintext or over mutual
/// TLS; the `commit` op.
pub struct Keel {
    tls: bool,
    cluster: Cluster,
    leadership: cluster::Leadership,
    pids: Vec<u32>,
    api: KeelApi,
    load: Load,
}

impl Keel {
    pub async fn set_up(env: &Env, p: &CompareParams, tls: bool) -> anyhow::Result<Self> {
        let (subnet, over) = if tls {
            (KEEL_TLS_SUBNET, "mutual TLS")
        } else {
            (KEEL_SUBNET, "plaintext")
        };
        progress!("compare: starting a 3-controller Keel quorum ({over}) on 127.0.{subnet}.11-13");
        let c = cluster::start_with_topic(env, subnet, &KEEL_FLAGS, tls, TOPIC).await?;
        Ok(Self {
            tls,
            leadership: cluster::Leadership::start(&c).await,
            pids: c.controllers().filter_map(|n| n.pid()).collect(),
            cluster: c,
            api: p.api,
            load: Load::of(p),
        })
    }
}

#[tonic::async_trait]
impl System for Keel {
    fn kind(&self) -> Kind {
        if self.tls {
            Kind::KeelTls
        } else {
            Kind::Keel
        }
    }

    fn pids(&self) -> &[u32] {
        &self.pids
    }

    async fn leader(&mut self) -> anyhow::Result<String> {
        let i = self.cluster.wait_active(Duration::from_secs(30)).await?;
        Ok(self.cluster.controller(i).address())
    }

    async fn level(&mut self, leader: &str, writers: usize, secs: f64) -> anyhow::Result<Level> {
        let (vb, l) = (self.load.value_bytes, self.load);
        let level = run_level(
            leader,
            self.cluster.transport(),
            self.api,
            l.connections,
            writers,
            secs,
            l.max_ops,
            move |w, s| set_config(TOPIC, format!("bench.k{w}"), value(w, s, vb)),
        )
        .await;
        self.cluster.check_alive()?;
        level
    }

    fn check(&mut self) -> anyhow::Result<()> {
        self.cluster.check_alive()
    }

    async fn leadership_changes(&mut self) -> Value {
        self.leadership.changes(&self.cluster).await
    }

    fn setup(&self) -> Value {
        let shared = self.load.shared();
        json!({
            "skipped": false,
            "addresses": self.cluster.controller_addrs(),
            "version": env!("CARGO_PKG_VERSION"),
            "flags": KEEL_FLAGS,
            "op": format!("IncrementalAlterConfigs SET of bench.k<writer> on topic {TOPIC} with a {}-byte value (one TopicConfig record), the `commit` workload", self.load.value_bytes),
            "connection": if shared {
                "one persistent gRPC (HTTP/2) connection to the active controller shared by all writers"
            } else {
                "one persistent gRPC (HTTP/2) connection per writer to the active controller"
            },
            "api": match (self.api, shared) {
                (KeelApi::Session, false) => "session: one AdminService.Write stream per writer (a pipelined write session; each op one message each way, one op in flight)",
                (KeelApi::Session, true) => "session: one AdminService.Write stream shared by all writers (each op one message each way, tagged with its id; those waiting together travel together)",
                (KeelApi::Unary, _) => "unary: one IncrementalAlterConfigs call per op",
            },
            "durability": "the Raft log is flushed (sled flush, fsync) before an append is acknowledged; a quorum of 2 acknowledges each write",
            "transport": if self.tls {
                "mutual TLS (rustls): the controllers with their certificates, the writers with the `admin` user certificate"
            } else {
                "plaintext (--allow-plaintext)"
            },
        })
    }
}

/// The transport ceiling: a gRPC echo server, no consensus, no disk.
pub struct Echo {
    server: EchoServer,
    load: Load,
}

impl Echo {
    pub fn set_up(_env: &Env, p: &CompareParams) -> anyhow::Result<Self> {
        // The echo server is a subcommand of the running `keel-lab`, not
        // of the `keel` (`Env::exe`) the clusters run.
        let lab = std::env::current_exe()
            .map_err(|e| anyhow::anyhow!("cannot find the running keel-lab binary: {e}"))?;
        let server = EchoServer::start(&lab, ECHO_IP)?;
        progress!("compare: gRPC echo ceiling at {}", server.addr);
        Ok(Self {
            server,
            load: Load::of(p),
        })
    }
}

#[tonic::async_trait]
impl System for Echo {
    fn kind(&self) -> Kind {
        Kind::Echo
    }

    fn pids(&self) -> &[u32] {
        self.server.pids()
    }

    async fn leader(&mut self) -> anyhow::Result<String> {
        Ok(self.server.addr.clone())
    }

    async fn level(&mut self, leader: &str, writers: usize, secs: f64) -> anyhow::Result<Level> {
        let l = self.load;
        run_writers_on(
            Kind::Echo.name(),
            l.connections,
            writers,
            secs,
            l.max_ops,
            || connect(leader, l.timeout),
            |channel| EchoWriter::open(channel, l.value_bytes, l.timeout),
        )
        .await
    }

    fn setup(&self) -> Value {
        json!({
            "skipped": false,
            "addresses": [self.server.addr],
            "version": env!("CARGO_PKG_VERSION"),
            "op": format!("one {}-byte message sent on the writer's bidirectional gRPC stream (EchoService.Echo) and the same message received back", self.load.value_bytes),
            "connection": if self.load.shared() {
                "one persistent gRPC (HTTP/2) connection shared by all writers, a stream per writer"
            } else {
                "one persistent gRPC (HTTP/2) connection and stream per writer"
            },
            "server": "one process of the lab binary (`keel-lab bench-echo-server`, tonic, the controllers' runtime and socket options); the response stream is the request stream: no consensus, no disk",
            "durability": "none: the transport ceiling, what one gRPC round trip per op allows on this machine",
        })
    }
}
