//! The broker's configuration, as the `keel broker` subcommand fills it in.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Kafka's `broker.heartbeat.interval.ms` default.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 2_000;
/// Kafka's `broker.session.timeout.ms` default.
pub const DEFAULT_SESSION_TIMEOUT_MS: u64 = 9_000;
/// Kafka's `replica.lag.time.max.ms` default.
pub const DEFAULT_REPLICA_LAG_TIME_MAX_MS: u64 = 30_000;
/// How often followers report to their leaders by default.
pub const DEFAULT_REPLICA_FETCH_INTERVAL_MS: u64 = 500;

/// Everything one broker process needs to know at start.
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    /// Configured id; stable across restarts of this data dir.
    pub broker_id: u32,
    /// Own address: where BrokerControlService and ReplicaService listen,
    /// and the source address of every outgoing connection (so per-node
    /// packet filters cut both directions). Port 0 picks a free port; the
    /// bound one is what gets registered.
    pub listen: SocketAddr,
    /// Any controller addresses ("host:port"); redirects find the active one.
    pub controllers: Vec<String>,
    /// Must match the quorum's cluster id, or registration is refused.
    pub cluster_id: String,
    /// Failure domain reported at registration, for rack-aware placement.
    pub rack: Option<String>,
    /// Directories whose health is reported in every heartbeat.
    pub log_dirs: Vec<String>,
    /// Holds the incarnation id and last broker epoch, the process lock and
    /// `history.jsonl`.
    pub data_dir: PathBuf,
    /// Time between heartbeats to the active controller.
    pub heartbeat_interval_ms: u64,
    /// Without a heartbeat answer for this long, the broker assumes it was
    /// fenced and stops leading.
    pub session_timeout_ms: u64,
    /// A follower that has not fetched for this long leaves the ISR.
    pub replica_lag_time_max_ms: u64,
    /// Time between a follower's fetches from each leader.
    pub replica_fetch_interval_ms: u64,
    /// How the listener and every client speak: mutual TLS with this
    /// broker's certificate, or plaintext.
    pub transport: keel_tls::Transport,
}

impl BrokerConfig {
    /// A configuration with Kafka's default timings.
    pub fn new(
        broker_id: u32,
        listen: SocketAddr,
        controllers: Vec<String>,
        cluster_id: impl Into<String>,
        data_dir: impl Into<PathBuf>,
    ) -> Self {
        Self {
            broker_id,
            listen,
            controllers,
            cluster_id: cluster_id.into(),
            rack: None,
            log_dirs: Vec::new(),
            data_dir: data_dir.into(),
            heartbeat_interval_ms: DEFAULT_HEARTBEAT_INTERVAL_MS,
            session_timeout_ms: DEFAULT_SESSION_TIMEOUT_MS,
            replica_lag_time_max_ms: DEFAULT_REPLICA_LAG_TIME_MAX_MS,
            replica_fetch_interval_ms: DEFAULT_REPLICA_FETCH_INTERVAL_MS,
            transport: keel_tls::Transport::Plaintext,
        }
    }

    /// Refuses settings that would make the loops spin or never time out.
    pub(crate) fn validate(&self) -> Result<(), crate::BrokerError> {
        let bad = |what: &str| Err(crate::BrokerError::Config(what.to_string()));
        if self.controllers.is_empty() {
            return bad("at least one controller address is required");
        }
        if self.heartbeat_interval_ms == 0 || self.replica_fetch_interval_ms == 0 {
            return bad("heartbeat and fetch intervals must be positive");
        }
        if self.session_timeout_ms <= self.heartbeat_interval_ms {
            return bad("session timeout must exceed the heartbeat interval");
        }
        if self.replica_lag_time_max_ms == 0 {
            return bad("replica lag time must be positive");
        }
        Ok(())
    }
}
