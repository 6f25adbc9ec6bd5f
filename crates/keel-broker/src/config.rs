//! The broker's configuration, as the `keel broker` subcommand fills it in.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Kafka's `broker.heartbeat.interval.ms` default.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 2_000;
/// Kafka's `broker.session.timeout.ms` default.
pub const DEFAULT_SESSION_TIMEOUT_MS: u64 = 9_000;
/// Kafka's `replica.lag.time.max.ms` default.
pub const DEFAULT_REPLICA_LAG_TIME_MAX_MS: u64 = 30_000;
/// How long a storage call may run before the broker process exits (as a
/// controller's `storage_stall_timeout_ms`).
pub const DEFAULT_STORAGE_STALL_TIMEOUT_MS: u64 = 30_000;
/// How often followers report to their leaders by default.
pub const DEFAULT_REPLICA_FETCH_INTERVAL_MS: u64 = 500;
/// HTTP/2 streams one connection to the broker may have open at once by
/// default: the controller's channel has a few requests in flight, a
/// follower one fetch per leader.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 256;
/// A request to the broker not answered within this is cancelled, by
/// default.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 60_000;
/// The largest LeaderAndIsr, UpdateMetadata or StopReplica decoded by
/// default: one may carry thousands of partitions with long topic names.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 << 20;
/// The largest Kafka request read by default: 4 MiB, what Kafka clients
/// send a listener that takes no produce batches (see
/// `keel_kafka::DEFAULT_MAX_REQUEST_BYTES`; Kafka's own
/// `socket.request.max.bytes` is 100 MiB).
pub const DEFAULT_KAFKA_MAX_REQUEST_BYTES: usize = keel_kafka::DEFAULT_MAX_REQUEST_BYTES;

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
    /// A storage call (the history's write and sync, the meta file, a log
    /// dir probe, measuring free space, opening the data dir) still running
    /// after this many ms means the disk hangs: the process exits (code 6)
    /// so its supervisor restarts it. 0: never. Read by the process that
    /// runs the broker (`keel broker`), which watches its storage calls.
    pub storage_stall_timeout_ms: u64,
    /// Time between a follower's fetches from each leader.
    pub replica_fetch_interval_ms: u64,
    /// HTTP/2 streams one connection to the listener may have open at once;
    /// a client past it waits (flow control).
    pub max_concurrent_streams: u32,
    /// A request to the listener not answered within this is cancelled.
    pub request_timeout_ms: u64,
    /// The largest controller request (LeaderAndIsr, UpdateMetadata,
    /// StopReplica) the listener decodes; a larger one is refused with
    /// OUT_OF_RANGE naming the size.
    pub max_message_bytes: usize,
    /// How the listener and every client speak: mutual TLS with this
    /// broker's certificate, or plaintext.
    pub transport: keel_tls::Transport,
    /// Where the Kafka listener binds (`None`: no Kafka listener). Port 0
    /// picks a free port; the bound address is what gets registered, and
    /// what other brokers' Metadata answers name.
    pub kafka_listen: Option<SocketAddr>,
    /// A Kafka request whose length prefix claims more closes its
    /// connection.
    pub kafka_max_request_bytes: usize,
    /// Whether a Kafka client must present a certificate (TLS only).
    pub kafka_client_auth: keel_tls::KafkaClientAuth,
    /// Offer SASL PLAIN beside SCRAM on the (TLS) Kafka listener.
    pub kafka_sasl_plain: bool,
    /// Connection limits and timeouts of every listener of the process
    /// (`keel_tls::admission`).
    pub connections: keel_tls::admission::Limits,
    /// Kafka's `connections.max.idle.ms`: a Kafka connection that sends
    /// nothing for this long is closed.
    pub kafka_connections_max_idle_ms: u64,
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
            storage_stall_timeout_ms: DEFAULT_STORAGE_STALL_TIMEOUT_MS,
            replica_fetch_interval_ms: DEFAULT_REPLICA_FETCH_INTERVAL_MS,
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            transport: keel_tls::Transport::Plaintext,
            kafka_listen: None,
            kafka_max_request_bytes: DEFAULT_KAFKA_MAX_REQUEST_BYTES,
            kafka_client_auth: keel_tls::KafkaClientAuth::Required,
            kafka_sasl_plain: false,
            connections: keel_tls::admission::Limits::default(),
            kafka_connections_max_idle_ms: keel_kafka::server::DEFAULT_IDLE_TIMEOUT.as_millis()
                as u64,
        }
    }

    /// The Kafka listener's security: the node's own transport (one trust
    /// for both doors): TLS with its certificate and CA, SCRAM offered
    /// (and PLAIN when asked for); plaintext only where the node speaks
    /// plaintext (`--allow-plaintext`).
    pub fn kafka_security(&self) -> keel_kafka::server::Security {
        match &self.transport {
            keel_tls::Transport::Plaintext => keel_kafka::server::Security::Plaintext,
            keel_tls::Transport::Tls(ctx) => keel_kafka::server::Security::tls(
                ctx.clone(),
                self.kafka_client_auth,
                self.kafka_sasl_plain,
            ),
        }
    }

    /// Refuses settings that would make the loops spin, never time out,
    /// or the listener refuse everything.
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
        if self.max_concurrent_streams == 0 {
            return bad("max_concurrent_streams must be at least 1");
        }
        if self.request_timeout_ms == 0 {
            return bad("request_timeout_ms must be at least 1");
        }
        if self.max_message_bytes == 0 {
            return bad("max_message_bytes must be at least 1");
        }
        if self.kafka_sasl_plain && matches!(self.transport, keel_tls::Transport::Plaintext) {
            return bad("--kafka-sasl-plain needs TLS: PLAIN sends the password itself, never over a plaintext connection");
        }
        if self.kafka_max_request_bytes == 0 {
            return bad("kafka_max_request_bytes must be at least 1");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_listener_limit_is_refused_naming_it() {
        let ok = BrokerConfig::new(
            1,
            "127.0.0.1:0".parse().unwrap(),
            vec!["c".into()],
            "k",
            "d",
        );
        assert!(ok.validate().is_ok());
        let refused = |c: BrokerConfig| c.validate().expect_err("a zero").to_string();
        let mut c = ok.clone();
        c.max_concurrent_streams = 0;
        assert!(refused(c).ends_with("max_concurrent_streams must be at least 1"));
        let mut c = ok.clone();
        c.request_timeout_ms = 0;
        assert!(refused(c).ends_with("request_timeout_ms must be at least 1"));
        let mut c = ok;
        c.max_message_bytes = 0;
        assert_eq!(
            refused(c),
            "invalid broker configuration: max_message_bytes must be at least 1"
        );
    }
}
