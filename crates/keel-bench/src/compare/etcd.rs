//! etcd through the `etcd-client` crate: each writer Puts
//! `/keel-bench/w<writer>` (one Raft entry, a new revision per op) on its
//! own gRPC connection to the leader, or on one connection all writers
//! share (each Put its own HTTP/2 stream). The leader is the member whose
//! `Maintenance.Status` names itself as the leader.

use std::time::{Duration, Instant};

use anyhow::bail;
use etcd_client::{Client, ConnectOptions, KvClient};
use serde_json::{json, Value};

use super::systems::{listener_pids, Load, System};
use super::{CompareParams, Kind, ZK_ROOT};
use crate::cluster::value;
use crate::load::{run_writers_on, Level, Writer};
use crate::progress;

/// One member's answer to `Maintenance.Status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The endpoint that answered, as `http://host:port`.
    pub endpoint: String,
    /// The answering member's id (`header.member_id`).
    pub member_id: u64,
    /// The member it believes leads the cluster (0: none).
    pub leader_id: u64,
    /// Server version, e.g. `3.4.23`.
    pub version: String,
}

/// The member that believes itself to be the leader, if any.
pub fn pick_leader(members: &[Member]) -> Option<&Member> {
    members
        .iter()
        .find(|m| m.leader_id != 0 && m.member_id == m.leader_id)
}

/// A client on its own connection to `endpoint`, every call bounded by
/// `timeout`.
async fn connect(endpoint: &str, timeout: Duration) -> anyhow::Result<Client> {
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(timeout);
    Ok(Client::connect([endpoint], Some(options)).await?)
}

/// `Maintenance.Status` of one member.
async fn status(endpoint: &str) -> anyhow::Result<Member> {
    let url = format!(
        "http://{}",
        endpoint.trim_start_matches("http://").trim_end_matches('/')
    );
    let r = connect(&url, Duration::from_secs(2))
        .await?
        .status()
        .await?;
    Ok(Member {
        member_id: r.header().map_or(0, |h| h.member_id()),
        leader_id: r.leader(),
        version: r.version().to_string(),
        endpoint: url,
    })
}

/// Polls every member's status until one is the leader (at most `timeout`).
async fn find_leader(endpoints: &[String], timeout: Duration) -> anyhow::Result<Member> {
    let start = Instant::now();
    let mut last = String::from("no answer yet");
    loop {
        let mut members = Vec::new();
        for e in endpoints {
            match status(e).await {
                Ok(m) => members.push(m),
                Err(err) => last = format!("{e}: {err:#}"),
            }
        }
        if let Some(m) = pick_leader(&members) {
            return Ok(m.clone());
        }
        if !members.is_empty() {
            last = format!("{members:?}");
        }
        if start.elapsed() >= timeout {
            bail!(
                "no etcd member among {endpoints:?} is the leader after {timeout:?} (last: {last})"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A 3-member cluster started by `scripts/bench-compare.sh`.
pub struct Etcd {
    endpoints: Vec<String>,
    version: String,
    leader_at_start: String,
    pids: Vec<u32>,
    load: Load,
}

impl Etcd {
    pub async fn set_up(p: &CompareParams) -> anyhow::Result<Self> {
        let m = find_leader(&p.etcd, Duration::from_secs(60)).await?;
        progress!("compare: etcd {} leader {}", m.version, m.endpoint);
        Ok(Self {
            endpoints: p.etcd.clone(),
            version: m.version,
            leader_at_start: m.endpoint,
            pids: listener_pids(&p.etcd),
            load: Load::of(p),
        })
    }
}

/// An etcd writer: a KV client on its own connection, or a clone of one.
struct EtcdWriter {
    kv: KvClient,
    value_bytes: usize,
}

impl Writer for EtcdWriter {
    async fn op(&mut self, writer: usize, seq: u64) -> Result<(), String> {
        let key = format!("{ZK_ROOT}/w{writer}");
        let v = value(writer, seq, self.value_bytes);
        match self.kv.put(key, v, None).await {
            Ok(_) => Ok(()),
            Err(e) => Err(format!("etcd Put: {e}")),
        }
    }

    async fn finish(self) {}
}

#[tonic::async_trait]
impl System for Etcd {
    fn kind(&self) -> Kind {
        Kind::Etcd
    }

    fn pids(&self) -> &[u32] {
        &self.pids
    }

    async fn leader(&mut self) -> anyhow::Result<String> {
        Ok(find_leader(&self.endpoints, Duration::from_secs(30))
            .await?
            .endpoint)
    }

    async fn level(&mut self, leader: &str, writers: usize, secs: f64) -> anyhow::Result<Level> {
        let l = self.load;
        run_writers_on(
            Kind::Etcd.name(),
            l.connections,
            writers,
            secs,
            l.max_ops,
            || async { Ok(connect(leader, l.timeout).await?.kv_client()) },
            |kv| async move {
                Ok(EtcdWriter {
                    kv,
                    value_bytes: l.value_bytes,
                })
            },
        )
        .await
    }

    fn setup(&self) -> Value {
        json!({
            "skipped": false,
            "endpoints": self.endpoints,
            "leader_at_start": self.leader_at_start,
            "version": self.version,
            "server_pids": self.pids,
            "op": format!("KV.Put of {ZK_ROOT}/w<writer> with a {}-byte value (one Raft entry, a new revision per op)", self.load.value_bytes),
            "connection": format!(
                "{} to the leader's client URL, found with Maintenance.Status (leader == header.member_id); client: the etcd-client crate (tonic)",
                if self.load.shared() {
                    "one gRPC (HTTP/2) connection shared by all writers (each Put its own HTTP/2 stream on it)"
                } else {
                    "one gRPC (HTTP/2) connection per writer"
                }
            ),
            "durability": "server defaults: the WAL is fsynced before a Raft entry is acknowledged, a quorum of 2 acknowledges each write",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(endpoint: &str, member_id: u64, leader_id: u64) -> Member {
        Member {
            endpoint: endpoint.into(),
            member_id,
            leader_id,
            version: "3.4.23".into(),
        }
    }

    #[test]
    fn the_leader_is_the_member_whose_id_is_its_leader_id() {
        let ms = vec![
            member("http://a:1", 11, 22),
            member("http://b:1", 22, 22),
            member("http://c:1", 33, 22),
        ];
        assert_eq!(
            pick_leader(&ms).map(|m| m.endpoint.as_str()),
            Some("http://b:1")
        );
    }

    #[test]
    fn no_leader_while_an_election_runs_or_the_leader_is_unreachable() {
        assert_eq!(pick_leader(&[member("http://a:1", 11, 0)]), None);
        assert_eq!(pick_leader(&[member("http://a:1", 11, 22)]), None);
        assert_eq!(pick_leader(&[]), None);
    }
}
