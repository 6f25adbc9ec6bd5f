//! ZooKeeper through the `zookeeper-client` crate: each writer creates the
//! persistent znode `/keel-bench/w<writer>-<seq>` (one znode per partition
//! state, as the classic controller kept them) on its own session to the
//! leader, or on one session all writers share (the crate pipelines the
//! requests of a session's clones in call order).
//!
//! The leader is found with the `srvr` four-letter command, which is not
//! part of the client protocol the crate speaks (the server answers it on
//! the client port, as plain text, and then closes the connection): that
//! small piece is written here.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client::{Acls, Client, CreateMode, CreateOptions};

use super::systems::{Ensemble, Load, System};
use super::{CompareError, CompareParams, Kind, ZK_ROOT};
use crate::cluster::value;
use crate::load::{run_writers_on, Level, Writer};
use crate::progress;

/// Session timeout asked of ZooKeeper (writers never idle that long).
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);
/// A persistent znode with the open ACL.
const PERSISTENT: CreateOptions<'static> = CreateMode::Persistent.with_acls(Acls::anyone_all());
/// Largest `srvr` answer read.
const MAX_SRVR_BYTES: u64 = 64 << 10;

/// A 3-server ensemble started by `scripts/bench-compare.sh`.
pub struct Zookeeper {
    /// Its `version` is `Zookeeper version:` of the leader's `srvr`.
    ensemble: Ensemble,
    /// Next free sequence number (znode names never repeat in a run).
    seq_next: u64,
    load: Load,
}

/// A session to `addr`.
async fn session(addr: &str, timeout: Duration) -> anyhow::Result<Client> {
    let connect = Client::connector()
        .with_session_timeout(SESSION_TIMEOUT)
        .with_connection_timeout(timeout)
        .with_fail_eagerly()
        .connect(addr);
    tokio::time::timeout(timeout, connect)
        .await
        .map_err(|_| anyhow!("ZooKeeper {addr}: no session within {timeout:?}"))?
        .with_context(|| format!("ZooKeeper {addr}: connect"))
}

impl Zookeeper {
    /// Finds the leader, checks the tree has no znodes of an earlier run,
    /// and creates the parent znode.
    pub async fn set_up(p: &CompareParams) -> anyhow::Result<Self> {
        let (leader, version) = find_leader(&p.zookeeper, Duration::from_secs(60)).await?;
        let load = Load::of(p);
        let s = session(&leader, load.timeout).await?;
        match s.create(ZK_ROOT, b"", &PERSISTENT).await {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => return Err(e).context("create the parent znode"),
        }
        let children = s.check_stat(ZK_ROOT).await?.map(|st| st.num_children);
        drop(s);
        if let Some(n) = children.filter(|&n| n > 0) {
            return Err(CompareError::StaleZnodes(n).into());
        }
        progress!("compare: ZooKeeper {version} leader {leader}");
        Ok(Self {
            ensemble: Ensemble::found(&p.zookeeper, leader, version),
            seq_next: 0,
            load,
        })
    }
}

/// A ZooKeeper writer: its own session to the leader, or a clone of one.
struct ZkWriter {
    session: Client,
    /// Added to `seq` so names never repeat across levels and trials.
    seq_base: u64,
    value_bytes: usize,
    timeout: Duration,
}

impl Writer for ZkWriter {
    async fn op(&mut self, writer: usize, seq: u64) -> Result<(), String> {
        let n = self.seq_base + seq;
        let path = format!("{ZK_ROOT}/w{writer}-{n}");
        let data = value(writer, n, self.value_bytes);
        let create = self.session.create(&path, data.as_bytes(), &PERSISTENT);
        match tokio::time::timeout(self.timeout, create).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("ZooKeeper create {path}: {e}")),
            Err(_) => Err(format!(
                "ZooKeeper create {path}: no answer within {:?}",
                self.timeout
            )),
        }
    }

    async fn finish(self) {}
}

#[tonic::async_trait]
impl System for Zookeeper {
    fn kind(&self) -> Kind {
        Kind::Zookeeper
    }

    fn pids(&self) -> &[u32] {
        &self.ensemble.pids
    }

    async fn leader(&mut self) -> anyhow::Result<String> {
        Ok(
            find_leader(&self.ensemble.endpoints, Duration::from_secs(30))
                .await?
                .0,
        )
    }

    async fn level(&mut self, leader: &str, writers: usize, secs: f64) -> anyhow::Result<Level> {
        let l = self.load;
        let seq_base = self.seq_next;
        // Each writer's seq stays below max_ops / writers (or 1).
        self.seq_next += (l.max_ops / writers as u64).max(1);
        run_writers_on(
            Kind::Zookeeper.name(),
            l.connections,
            writers,
            secs,
            l.max_ops,
            || session(leader, l.timeout),
            |session| async move {
                Ok(ZkWriter {
                    session,
                    seq_base,
                    value_bytes: l.value_bytes,
                    timeout: l.timeout,
                })
            },
        )
        .await
    }

    fn setup(&self) -> Value {
        self.ensemble.setup(
            format!("create of the persistent znode {ZK_ROOT}/w<writer>-<seq> with a {}-byte value and the open ACL (one znode per partition state)", self.load.value_bytes),
            format!(
                "{}, to the leader found with `srvr` (Mode: leader); session timeout {} ms; client: the zookeeper-client crate on tokio",
                if self.load.shared() {
                    "one ZooKeeper session (one TCP connection) shared by all writers, their requests pipelined in call order and matched to replies by xid"
                } else {
                    "one ZooKeeper session (own TCP connection) per writer"
                },
                SESSION_TIMEOUT.as_millis()
            ),
            "server defaults: forceSync=yes, the transaction log is fsynced before a proposal is acknowledged, a quorum of 2 acknowledges each write",
        )
    }
}

/// What `srvr` says about a server: its version and whether it leads
/// (`Mode: leader`, or `standalone`).
#[derive(Debug, PartialEq, Eq)]
pub struct Srvr {
    pub version: Option<String>,
    pub mode: String,
}

impl Srvr {
    pub fn leads(&self) -> bool {
        self.mode == "leader" || self.mode == "standalone"
    }
}

/// Parses the answer to `srvr`; the error says why it is unusable.
pub fn parse_srvr(text: &str) -> Result<Srvr, String> {
    if text.contains("is not in the whitelist") || text.contains("is not executed because") {
        return Err("srvr is not whitelisted (set 4lw.commands.whitelist=srvr,stat,ruok)".into());
    }
    if text.contains("not currently serving requests") {
        return Err("the server is not currently serving requests".into());
    }
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key).map(|v| v.trim().to_string()))
    };
    let head: String = text.chars().take(200).collect();
    Ok(Srvr {
        version: field("Zookeeper version:"),
        mode: field("Mode:").ok_or_else(|| format!("no Mode line in {head:?}"))?,
    })
}

/// `srvr` of the server at `addr`.
async fn srvr(addr: &str) -> anyhow::Result<Srvr> {
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"srvr").await?;
        let mut out = Vec::new();
        (&mut s).take(MAX_SRVR_BYTES).read_to_end(&mut out).await?;
        anyhow::Ok(String::from_utf8_lossy(&out).into_owned())
    };
    let text = tokio::time::timeout(Duration::from_secs(2), ask)
        .await
        .map_err(|_| anyhow!("srvr timed out"))??;
    parse_srvr(&text).map_err(|e| anyhow!(e))
}

/// Polls `srvr` on every server until one leads (at most `timeout`);
/// returns its address and version.
async fn find_leader(addrs: &[String], timeout: Duration) -> anyhow::Result<(String, String)> {
    let start = Instant::now();
    let mut last = String::from("no answer yet");
    loop {
        for a in addrs {
            match srvr(a).await {
                Ok(s) if s.leads() => {
                    return Ok((a.clone(), s.version.unwrap_or_else(|| "unknown".into())))
                }
                Ok(s) => last = format!("{a}: {}", s.mode),
                Err(e) if e.to_string().contains("whitelisted") => return Err(e),
                Err(e) => last = format!("{a}: {e:#}"),
            }
        }
        if start.elapsed() >= timeout {
            bail!("no ZooKeeper server among {addrs:?} leads after {timeout:?} (last: {last})");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEADER: &str = "Zookeeper version: 3.8.0-5a02a05eddb59aee6ac762f7ea82e92a68eb9c0f, built on 2022-02-25 08:49 UTC\n\
        Latency min/avg/max: 0/0.31/12\nReceived: 40\nSent: 39\nConnections: 1\nOutstanding: 0\n\
        Zxid: 0x100000004\nMode: leader\nNode count: 7\nProposal sizes last/min/max: 48/48/150\n";

    #[test]
    fn srvr_of_the_leader_gives_mode_and_version() {
        let s = parse_srvr(LEADER).expect("parses");
        assert!(s.leads());
        assert!(s.version.expect("version").starts_with("3.8.0-"));
    }

    #[test]
    fn followers_and_observers_do_not_lead_but_a_standalone_server_does() {
        let f = parse_srvr(&LEADER.replace("Mode: leader", "Mode: follower")).expect("parses");
        assert!(!f.leads());
        assert!(!parse_srvr("Mode: observer\n").expect("parses").leads());
        assert!(parse_srvr("Mode: standalone\n").expect("parses").leads());
    }

    #[test]
    fn srvr_refusals_say_why() {
        let e = parse_srvr("srvr is not executed because it is not in the whitelist.\n");
        assert!(e.unwrap_err().contains("whitelist"));
        let e = parse_srvr("This ZooKeeper instance is not currently serving requests\n");
        assert!(e.unwrap_err().contains("not currently serving"));
        assert!(parse_srvr("").unwrap_err().contains("no Mode line"));
    }
}
