//! A minimal etcd v3 client for `keel bench compare`: `KV.Put` and
//! `Maintenance.Status` over tonic (the messages are in
//! `proto/etcd.proto`), and finding the member that leads the cluster.

use std::time::{Duration, Instant};

use tonic::transport::{Channel, Endpoint};

use pb::kv_client::KvClient;
use pb::maintenance_client::MaintenanceClient;

/// Generated etcd messages and clients.
pub mod pb {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("etcdserverpb");
}

/// What can go wrong talking to etcd.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// The endpoint is not `http://host:port` (or `host:port`).
    #[error("bad etcd endpoint {endpoint:?}: {reason}")]
    BadEndpoint { endpoint: String, reason: String },
    /// No connection could be made.
    #[error("cannot connect to etcd at {endpoint}: {reason}")]
    Connect { endpoint: String, reason: String },
    /// The member answered a call with an error status.
    #[error("etcd {endpoint} answered {op} with {code:?}: {message}")]
    Rpc {
        endpoint: String,
        op: &'static str,
        code: tonic::Code,
        message: String,
    },
    /// No member reported itself as the leader before the deadline.
    #[error(
        "no etcd member among {endpoints:?} is the leader after {waited_ms} ms (last: {last})"
    )]
    NoLeader {
        endpoints: Vec<String>,
        waited_ms: u64,
        last: String,
    },
}

/// One member's answer to `Maintenance.Status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdMember {
    /// The endpoint that answered, normalised to `http://host:port`.
    pub endpoint: String,
    /// The answering member's id (`header.member_id`).
    pub member_id: u64,
    /// The member it believes leads the cluster (0: none).
    pub leader_id: u64,
    /// Server version, e.g. `3.4.23`.
    pub version: String,
}

/// `host:port` or `http://host:port` as `http://host:port`; TLS endpoints
/// are refused (the bench talks plain gRPC on loopback).
pub fn normalize_endpoint(endpoint: &str) -> Result<String, EtcdError> {
    let e = endpoint.trim();
    let bad = |reason: &str| EtcdError::BadEndpoint {
        endpoint: endpoint.to_string(),
        reason: reason.to_string(),
    };
    if e.starts_with("https://") {
        return Err(bad("TLS is not supported; use http://"));
    }
    let rest = e.strip_prefix("http://").unwrap_or(e);
    let rest = rest.trim_end_matches('/');
    match rest.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
            Ok(format!("http://{rest}"))
        }
        _ => Err(bad("expected http://host:port")),
    }
}

/// The member that believes itself to be the leader, if any.
pub fn pick_leader(members: &[EtcdMember]) -> Option<&EtcdMember> {
    members
        .iter()
        .find(|m| m.leader_id != 0 && m.member_id == m.leader_id)
}

/// A persistent (eagerly connected) channel to `endpoint` with a per-call
/// timeout.
pub async fn channel(endpoint: &str, request_timeout: Duration) -> Result<Channel, EtcdError> {
    let url = normalize_endpoint(endpoint)?;
    let ep = Endpoint::from_shared(url.clone())
        .map_err(|e| EtcdError::BadEndpoint {
            endpoint: endpoint.to_string(),
            reason: e.to_string(),
        })?
        .connect_timeout(Duration::from_secs(1))
        .timeout(request_timeout)
        .tcp_nodelay(true);
    ep.connect().await.map_err(|e| EtcdError::Connect {
        endpoint: url,
        reason: e.to_string(),
    })
}

/// `Maintenance.Status` of one member.
pub async fn status(endpoint: &str, timeout: Duration) -> Result<EtcdMember, EtcdError> {
    let url = normalize_endpoint(endpoint)?;
    let ch = channel(&url, timeout).await?;
    let r = MaintenanceClient::new(ch)
        .status(pb::StatusRequest {})
        .await
        .map_err(|s| EtcdError::Rpc {
            endpoint: url.clone(),
            op: "Status",
            code: s.code(),
            message: s.message().to_string(),
        })?
        .into_inner();
    Ok(EtcdMember {
        endpoint: url,
        member_id: r.header.map(|h| h.member_id).unwrap_or(0),
        leader_id: r.leader,
        version: r.version,
    })
}

/// Polls every member's status until one is the leader (at most `timeout`).
pub async fn find_leader(endpoints: &[String], timeout: Duration) -> Result<EtcdMember, EtcdError> {
    let start = Instant::now();
    let mut last = String::from("no answer yet");
    loop {
        let mut members = Vec::new();
        for e in endpoints {
            match status(e, Duration::from_secs(2)).await {
                Ok(m) => members.push(m),
                Err(err @ EtcdError::BadEndpoint { .. }) => return Err(err),
                Err(err) => last = err.to_string(),
            }
        }
        if let Some(m) = pick_leader(&members) {
            return Ok(m.clone());
        }
        if !members.is_empty() {
            last = format!("{members:?}");
        }
        if start.elapsed() >= timeout {
            return Err(EtcdError::NoLeader {
                endpoints: endpoints.to_vec(),
                waited_ms: start.elapsed().as_millis() as u64,
                last,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A KV client on its own persistent connection to `endpoint`.
pub async fn kv_client(
    endpoint: &str,
    request_timeout: Duration,
) -> Result<KvClient<Channel>, EtcdError> {
    Ok(KvClient::new(channel(endpoint, request_timeout).await?))
}

/// One `Put` of `key` = `value`; done when the cluster has committed it.
pub async fn put(
    c: &mut KvClient<Channel>,
    endpoint: &str,
    key: Vec<u8>,
    value: Vec<u8>,
) -> Result<(), EtcdError> {
    c.put(pb::PutRequest {
        key,
        value,
        ..Default::default()
    })
    .await
    .map(|_| ())
    .map_err(|s| EtcdError::Rpc {
        endpoint: endpoint.to_string(),
        op: "Put",
        code: s.code(),
        message: s.message().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(endpoint: &str, member_id: u64, leader_id: u64) -> EtcdMember {
        EtcdMember {
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

    #[test]
    fn endpoints_are_normalised_and_tls_or_garbage_is_refused() {
        assert_eq!(
            normalize_endpoint("127.0.22.1:2379").ok().as_deref(),
            Some("http://127.0.22.1:2379")
        );
        assert_eq!(
            normalize_endpoint("http://127.0.22.1:2379/")
                .ok()
                .as_deref(),
            Some("http://127.0.22.1:2379")
        );
        assert!(matches!(
            normalize_endpoint("https://h:1"),
            Err(EtcdError::BadEndpoint { .. })
        ));
        assert!(normalize_endpoint("http://h").is_err());
        assert!(normalize_endpoint("h:notaport").is_err());
        assert!(normalize_endpoint(":2379").is_err());
    }
}
