//! A controller node's settings.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Everything a controller node needs to run. Defaults follow Kafka's where
/// Kafka has one.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// This node's id in the quorum.
    pub node_id: u64,
    /// Address the node binds for Raft, admin and broker RPCs; also the
    /// source address of its outgoing connections.
    pub listen: SocketAddr,
    /// The initial voters: `(id, "host:port")`.
    pub voters: Vec<(u64, String)>,
    /// Where sled keeps the log, vote and snapshots.
    pub data_dir: PathBuf,
    /// Set at bootstrap; checked on every registration and peer RPC.
    pub cluster_id: String,
    /// Start without bootstrapping: wait to be added with `quorum add-voter`.
    pub join: bool,
    /// A broker silent this long is fenced.
    pub session_timeout_ms: u64,
    /// Raft heartbeat period.
    pub raft_heartbeat_ms: u64,
    /// Raft election timeout range.
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// Take a snapshot after this many entries since the last one.
    pub snapshot_interval_entries: u64,
    /// Period of the preferred-leader rebalance task (0 disables it).
    pub auto_rebalance_interval_ms: u64,
    /// Rebalance a broker whose non-preferred share exceeds this percentage.
    pub auto_rebalance_threshold_pct: u32,
    /// Bytes of admin writes (encoded) answered at once on this node, over
    /// every connection; see `budget`.
    pub write_budget_bytes: u64,
    /// How every listener and client of the node speaks: mutual TLS with
    /// this controller's certificate, or plaintext.
    pub transport: keel_tls::Transport,
    /// Principals allowed everything, whatever the ACLs say
    /// (`--super-users`). Controllers of the cluster always are.
    pub super_users: std::collections::BTreeSet<keel_metadata::acl::Principal>,
    /// `--super-users-via-brokers`: a request a broker forwards as a super
    /// user gets a super user's power (off: the ACLs alone judge it).
    pub super_users_via_brokers: bool,
    /// Per-request and cluster-wide limits on admin requests.
    pub limits: keel_metadata::limits::Limits,
    /// Largest gRPC message the admin and broker services decode.
    pub max_message_bytes: usize,
    /// HTTP/2 streams one connection may have open at once.
    pub max_concurrent_streams: u32,
    /// Admin requests (a `Write` session counts once) served at once on
    /// this node; more are refused with THROTTLING_QUOTA_EXCEEDED.
    pub max_concurrent_admin_requests: usize,
    /// A request not answered within this is cancelled (DEADLINE_EXCEEDED).
    pub request_timeout_ms: u64,
    /// Linearizable reads (describes) this node serves per second; more
    /// are refused with THROTTLING_QUOTA_EXCEEDED.
    pub max_linearizable_reads_per_sec: u32,
    /// Free bytes the data dir keeps; below it new admin writes are
    /// refused. `None`: 1 GiB or 5% of the file system, whichever is
    /// smaller.
    pub disk_reserve_bytes: Option<u64>,
    /// A storage call (log flush, snapshot write, opening the storage,
    /// measuring the data dir) still running after this many ms means the
    /// disk hangs: the node exits so its supervisor can restart it
    /// (`keel_raft::stall`). 0: never.
    pub storage_stall_timeout_ms: u64,
    /// Topic config names Kafka's schema does not know are carried instead
    /// of refused with INVALID_CONFIG.
    pub allow_unknown_topic_configs: bool,
    /// Kafka listener (`--kafka-listen`): ApiVersions, DescribeCluster and
    /// DescribeQuorum for Kafka clients that bootstrap from controllers.
    pub kafka_listen: Option<SocketAddr>,
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

impl ControllerConfig {
    /// A config with defaults for everything but identity and addresses.
    pub fn new(
        node_id: u64,
        listen: SocketAddr,
        voters: Vec<(u64, String)>,
        data_dir: PathBuf,
        cluster_id: String,
    ) -> Self {
        Self {
            node_id,
            listen,
            voters,
            data_dir,
            cluster_id,
            join: false,
            session_timeout_ms: 9_000,
            raft_heartbeat_ms: keel_raft::timing::HEARTBEAT_MS,
            // Followers honour the old leader for `election_timeout_max`
            // (its lease); the election watchdog
            // (`keel_raft::election_watchdog`, the only thing that starts
            // elections) runs a pre-vote 20-70 ms after that, so a dead
            // leader is replaced ~0.5 s after it goes silent. With no
            // leader at all it waits a random timeout in this range.
            election_timeout_min_ms: keel_raft::timing::ELECTION_TIMEOUT_MIN_MS,
            election_timeout_max_ms: keel_raft::timing::ELECTION_TIMEOUT_MAX_MS,
            snapshot_interval_entries: 10_000,
            auto_rebalance_interval_ms: 300_000,
            auto_rebalance_threshold_pct: 10,
            write_budget_bytes: crate::budget::DEFAULT_WRITE_BUDGET_BYTES,
            transport: keel_tls::Transport::Plaintext,
            super_users: Default::default(),
            super_users_via_brokers: false,
            limits: Default::default(),
            max_message_bytes: 16 << 20,
            max_concurrent_streams: 1024,
            max_concurrent_admin_requests: 4096,
            request_timeout_ms: 120_000,
            max_linearizable_reads_per_sec: 20_000,
            disk_reserve_bytes: None,
            storage_stall_timeout_ms: 30_000,
            allow_unknown_topic_configs: false,
            kafka_listen: None,
            kafka_client_auth: keel_tls::KafkaClientAuth::Required,
            kafka_sasl_plain: false,
            connections: keel_tls::admission::Limits::default(),
            kafka_connections_max_idle_ms: keel_kafka::server::DEFAULT_IDLE_TIMEOUT.as_millis()
                as u64,
        }
    }

    /// Refuses settings that can never work, naming the first one found
    /// (the cluster id, the request limits, the listener's limits, then
    /// the Raft timings): what `keel controller` checks before it starts.
    pub fn validate(&self) -> Result<(), String> {
        fn at_least_one(name: &str, v: u64) -> Result<(), String> {
            if v == 0 {
                return Err(format!("{name} must be at least 1"));
            }
            Ok(())
        }
        if self.cluster_id.is_empty() {
            return Err("--cluster-id must not be empty".into());
        }
        let l = &self.limits;
        for (name, v) in [
            ("max_topics_per_request", l.max_topics_per_request as u64),
            ("max_partitions_per_request", l.max_partitions_per_request),
            ("max_partitions", l.max_partitions),
            ("max_configs_per_topic", l.max_configs_per_topic as u64),
            ("max_config_value_bytes", l.max_config_value_bytes as u64),
            ("max_partitions_per_plan", l.max_partitions_per_plan as u64),
            ("max_acls_per_request", l.max_acls_per_request as u64),
            ("max_message_bytes", self.max_message_bytes as u64),
            (
                "max_concurrent_streams",
                u64::from(self.max_concurrent_streams),
            ),
            (
                "max_concurrent_admin_requests",
                self.max_concurrent_admin_requests as u64,
            ),
            ("request_timeout_ms", self.request_timeout_ms),
            (
                "max_linearizable_reads_per_sec",
                u64::from(self.max_linearizable_reads_per_sec),
            ),
        ] {
            at_least_one(name, v)?;
        }
        if self.election_timeout_min_ms >= self.election_timeout_max_ms
            || self.raft_heartbeat_ms * 2 > self.election_timeout_min_ms
        {
            return Err("election timeouts must satisfy 2 * heartbeat <= min < max".into());
        }
        Ok(())
    }

    /// How long quorum contact stays valid for acting as active controller
    /// ([`keel_raft::timing::lease_ms`] of this node's timings).
    pub fn lease_ms(&self) -> u64 {
        keel_raft::timing::lease_ms(self.raft_heartbeat_ms, self.election_timeout_max_ms)
    }
}

/// Parses `1@127.0.0.11:9093,2@127.0.0.12:9093`.
pub fn parse_voters(s: &str) -> Result<Vec<(u64, String)>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('@')
            .ok_or_else(|| format!("voter {part:?} is not of the form ID@HOST:PORT"))?;
        let id: u64 = id
            .parse()
            .map_err(|_| format!("voter id {id:?} is not a number"))?;
        addr.parse::<SocketAddr>()
            .map_err(|_| format!("voter address {addr:?} is not HOST:PORT"))?;
        if out.iter().any(|(i, _)| *i == id) {
            return Err(format!("voter id {id} appears twice"));
        }
        out.push((id, addr.to_string()));
    }
    if out.is_empty() {
        return Err("no voters given".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voters_parse_and_refuse_bad_input() {
        let v = parse_voters("1@127.0.0.11:9093, 2@127.0.0.12:9093").unwrap();
        assert_eq!(
            v,
            vec![(1, "127.0.0.11:9093".into()), (2, "127.0.0.12:9093".into())]
        );
        assert!(parse_voters("").is_err());
        assert!(parse_voters("x@127.0.0.1:1").is_err());
        assert!(parse_voters("1@nohost").is_err());
        assert!(parse_voters("1@127.0.0.1:1,1@127.0.0.1:2").is_err());
    }

    #[test]
    fn lease_is_shorter_than_the_election_timeout() {
        let c = ControllerConfig::new(
            1,
            "127.0.0.1:1".parse().unwrap(),
            vec![],
            "x".into(),
            "c".into(),
        );
        assert!(c.lease_ms() < c.election_timeout_max_ms);
        assert!(c.lease_ms() >= c.raft_heartbeat_ms);
    }

    #[test]
    fn validate_names_the_first_setting_that_can_never_work() {
        let ok = ControllerConfig::new(
            1,
            std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            vec![],
            "d".into(),
            "keel".into(),
        );
        assert_eq!(ok.validate(), Ok(()));
        let mut c = ok.clone();
        c.limits.max_acls_per_request = 0;
        c.request_timeout_ms = 0;
        assert_eq!(
            c.validate(),
            Err("max_acls_per_request must be at least 1".into())
        );
        let mut c = ok.clone();
        c.election_timeout_min_ms = c.election_timeout_max_ms;
        assert_eq!(
            c.validate(),
            Err("election timeouts must satisfy 2 * heartbeat <= min < max".into())
        );
        let mut c = ok;
        c.cluster_id.clear();
        assert!(c.validate().unwrap_err().contains("--cluster-id"));
    }
}
