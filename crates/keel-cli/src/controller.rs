//! `keel controller`: one voter of the controller quorum.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use keel_controller::{parse_voters, ControllerConfig, ControllerNode};
use serde::Deserialize;

use crate::logging::{self, LogFormat};
use crate::tls::{TlsArgs, TlsKeys};
use crate::EXIT_LOCAL;
use keel_tls::Role;

/// Largest `--write-budget-mb`: the budget counts bytes in a `u32`
/// (`keel_controller::budget::MAX_WRITE_BUDGET_BYTES`).
const MAX_WRITE_BUDGET_MB: u64 = keel_controller::budget::MAX_WRITE_BUDGET_BYTES >> 20;

/// Options of `keel controller`. Each is a flag, an environment variable
/// (`KEEL_*`) and a key of the optional TOML file; flags win over the
/// environment, which wins over the file.
#[derive(Args, Debug, Default)]
pub struct ControllerArgs {
    /// TOML file with any of the options below (keys as the long flags, with `_`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// This node's id in the quorum.
    #[arg(long, env = "KEEL_NODE_ID")]
    node_id: Option<u64>,
    /// Address to bind, e.g. 127.0.0.11:9093.
    #[arg(long, env = "KEEL_LISTEN")]
    listen: Option<SocketAddr>,
    /// Initial voters: 1@127.0.0.11:9093,2@127.0.0.12:9093,3@127.0.0.13:9093.
    #[arg(long, env = "KEEL_VOTERS")]
    voters: Option<String>,
    /// Data directory (Raft log, vote, snapshots).
    #[arg(long, env = "KEEL_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Cluster id, fixed when the data dir is first formatted.
    #[arg(long, env = "KEEL_CLUSTER_ID")]
    cluster_id: Option<String>,
    /// Join an existing quorum (wait for `keel quorum add-voter`) instead of bootstrapping.
    #[arg(long, env = "KEEL_JOIN")]
    join: bool,
    /// Broker session timeout in ms [default: 9000].
    #[arg(long, env = "KEEL_SESSION_TIMEOUT_MS")]
    session_timeout_ms: Option<u64>,
    /// Raft heartbeat interval in ms (also the AppendEntries timeout) [default: 150].
    #[arg(long, env = "KEEL_RAFT_HEARTBEAT_MS")]
    raft_heartbeat_ms: Option<u64>,
    /// Raft election timeout lower bound in ms [default: 300].
    #[arg(long, env = "KEEL_ELECTION_TIMEOUT_MIN_MS")]
    election_timeout_min_ms: Option<u64>,
    /// Raft election timeout upper bound in ms [default: 450].
    #[arg(long, env = "KEEL_ELECTION_TIMEOUT_MAX_MS")]
    election_timeout_max_ms: Option<u64>,
    /// Entries between snapshots [default: 10000].
    #[arg(long, env = "KEEL_SNAPSHOT_INTERVAL_ENTRIES")]
    snapshot_interval_entries: Option<u64>,
    /// Preferred-leader rebalance period in ms, 0 = off [default: 300000].
    #[arg(long, env = "KEEL_AUTO_REBALANCE_INTERVAL_MS")]
    auto_rebalance_interval_ms: Option<u64>,
    /// Rebalance threshold in percent [default: 10].
    #[arg(long, env = "KEEL_AUTO_REBALANCE_THRESHOLD_PCT")]
    auto_rebalance_threshold_pct: Option<u32>,
    /// Serve Prometheus metrics here, e.g. 127.0.0.11:9100 (the same
    /// endpoint as --http-listen).
    #[arg(long, env = "KEEL_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Serve HTTP here: the web console at / and /console, its JSON at
    /// /api/cluster, Prometheus metrics at /metrics; e.g. 127.0.0.11:9100.
    #[arg(long, env = "KEEL_HTTP_LISTEN")]
    http_listen: Option<SocketAddr>,
    /// Parse and validate the configuration (file, environment, flags),
    /// then exit: 0 when it is valid, 2 when not. Starts nothing.
    #[arg(long)]
    check: bool,
    /// Log format.
    #[arg(long, env = "KEEL_LOG_FORMAT", value_enum)]
    log_format: Option<LogFormat>,
    /// MiB of admin writes answered at once on this node, over all
    /// connections; further writes wait (and their sessions stop reading)
    /// [default: 256].
    #[arg(long, env = "KEEL_WRITE_BUDGET_MB", value_parser = clap::value_parser!(u64).range(1..=MAX_WRITE_BUDGET_MB))]
    write_budget_mb: Option<u64>,
    /// Async runtime worker threads [default: one per core].
    #[arg(long, env = "KEEL_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    worker_threads: Option<u16>,
    /// Topics one CreateTopics, DeleteTopics, CreatePartitions or alter-configs request may name [default: 10000].
    #[arg(long, env = "KEEL_MAX_TOPICS_PER_REQUEST")]
    max_topics_per_request: Option<usize>,
    /// New partitions one CreateTopics or CreatePartitions request may create [default: 1000000].
    #[arg(long, env = "KEEL_MAX_PARTITIONS_PER_REQUEST", value_parser = clap::value_parser!(u64).range(1..))]
    max_partitions_per_request: Option<u64>,
    /// Partitions the cluster may hold [default: 10000000].
    #[arg(long, env = "KEEL_MAX_PARTITIONS", value_parser = clap::value_parser!(u64).range(1..))]
    max_partitions: Option<u64>,
    /// Config keys one topic may carry [default: 10000].
    #[arg(long, env = "KEEL_MAX_CONFIGS_PER_TOPIC")]
    max_configs_per_topic: Option<usize>,
    /// Bytes of one config key or value [default: 1048576].
    #[arg(long, env = "KEEL_MAX_CONFIG_VALUE_BYTES")]
    max_config_value_bytes: Option<usize>,
    /// Partitions one reassignment or election request may name [default: 1000000].
    #[arg(long, env = "KEEL_MAX_PARTITIONS_PER_PLAN")]
    max_partitions_per_plan: Option<usize>,
    /// ACL bindings or filters in one request [default: 10000].
    #[arg(long, env = "KEEL_MAX_ACLS_PER_REQUEST")]
    max_acls_per_request: Option<usize>,
    /// Largest admin or broker-service message decoded, in bytes [default: 16777216].
    #[arg(long, env = "KEEL_MAX_MESSAGE_BYTES")]
    max_message_bytes: Option<usize>,
    /// HTTP/2 streams one connection may have open at once [default: 1024].
    #[arg(long, env = "KEEL_MAX_CONCURRENT_STREAMS", value_parser = clap::value_parser!(u32).range(1..))]
    max_concurrent_streams: Option<u32>,
    /// Admin requests served at once; more get THROTTLING_QUOTA_EXCEEDED [default: 4096].
    #[arg(long, env = "KEEL_MAX_CONCURRENT_ADMIN_REQUESTS")]
    max_concurrent_admin_requests: Option<usize>,
    /// A request not answered within this many ms is cancelled [default: 120000].
    #[arg(long, env = "KEEL_REQUEST_TIMEOUT_MS", value_parser = clap::value_parser!(u64).range(1..))]
    request_timeout_ms: Option<u64>,
    /// Describes served per second; more get THROTTLING_QUOTA_EXCEEDED [default: 20000].
    #[arg(long, env = "KEEL_MAX_LINEARIZABLE_READS_PER_SEC", value_parser = clap::value_parser!(u32).range(1..))]
    max_linearizable_reads_per_sec: Option<u32>,
    /// Free bytes the data dir keeps: below them new admin writes are
    /// refused with STORAGE_FULL [default: 1 GiB or 5% of the file system,
    /// whichever is smaller].
    #[arg(long, env = "KEEL_DISK_RESERVE_BYTES")]
    disk_reserve_bytes: Option<u64>,
    /// A storage call (log flush, snapshot write, opening the storage)
    /// still running after this many ms means the disk hangs: the node
    /// exits with code 6 so its supervisor restarts it; 0: never [default: 30000].
    #[arg(long, env = "KEEL_STORAGE_STALL_TIMEOUT_MS")]
    storage_stall_timeout_ms: Option<u64>,
    /// Carry topic config names Kafka's schema does not know instead of
    /// refusing them with INVALID_CONFIG (as Kafka does). For tests and
    /// benchmarks that need many distinct keys, or configs of a newer Kafka.
    #[arg(long, env = "KEEL_ALLOW_UNKNOWN_TOPIC_CONFIGS")]
    allow_unknown_topic_configs: bool,
    /// Principals allowed every admin operation whatever the ACLs say,
    /// comma separated: e.g. User:admin. Controllers always are.
    #[arg(long, env = "KEEL_SUPER_USERS")]
    super_users: Option<String>,
    /// Let a request a broker forwards from its Kafka listener as a super
    /// user have a super user's power. Off by default: forwarded requests
    /// are judged by the ACLs alone, so a broker's key (which may name any
    /// principal there) never carries more than the ACLs grant. `keel dev`
    /// turns it on.
    #[arg(long, env = "KEEL_SUPER_USERS_VIA_BROKERS")]
    super_users_via_brokers: bool,
    /// Kafka listener address, e.g. 127.0.0.11:9095: Kafka clients that
    /// bootstrap from the controllers ask ApiVersions, DescribeCluster and
    /// DescribeQuorum there (over TLS with this node's certificate, as the
    /// brokers' Kafka listeners; plaintext only with --allow-plaintext;
    /// off when not given). The other controllers are taken to listen on
    /// the same port.
    #[arg(long, env = "KEEL_CONTROLLER_KAFKA_LISTEN")]
    kafka_listen: Option<SocketAddr>,
    /// Whether a Kafka client must present a certificate (Kafka's
    /// ssl.client.auth): `required` or `requested` [default: required].
    #[arg(long, env = "KEEL_CONTROLLER_KAFKA_SSL_CLIENT_AUTH")]
    kafka_ssl_client_auth: Option<keel_tls::KafkaClientAuth>,
    /// Offer SASL PLAIN beside SCRAM on the Kafka listener (TLS only).
    #[arg(long, env = "KEEL_CONTROLLER_KAFKA_SASL_PLAIN")]
    kafka_sasl_plain: bool,
    #[command(flatten)]
    connections: crate::connections::ConnectionArgs,
    #[command(flatten)]
    tls: TlsArgs,
}

/// The TOML file's shape: the same options, all optional.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct ControllerFile {
    node_id: Option<u64>,
    listen: Option<SocketAddr>,
    voters: Option<String>,
    data_dir: Option<PathBuf>,
    cluster_id: Option<String>,
    join: Option<bool>,
    session_timeout_ms: Option<u64>,
    raft_heartbeat_ms: Option<u64>,
    election_timeout_min_ms: Option<u64>,
    election_timeout_max_ms: Option<u64>,
    snapshot_interval_entries: Option<u64>,
    auto_rebalance_interval_ms: Option<u64>,
    auto_rebalance_threshold_pct: Option<u32>,
    metrics_listen: Option<SocketAddr>,
    http_listen: Option<SocketAddr>,
    log_format: Option<LogFormat>,
    write_budget_mb: Option<u64>,
    worker_threads: Option<u16>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    allow_plaintext: Option<bool>,
    super_users: Option<Vec<String>>,
    super_users_via_brokers: Option<bool>,
    disk_reserve_bytes: Option<u64>,
    storage_stall_timeout_ms: Option<u64>,
    allow_unknown_topic_configs: Option<bool>,
    kafka_listen: Option<SocketAddr>,
    kafka_ssl_client_auth: Option<String>,
    kafka_sasl_plain: Option<bool>,
    max_topics_per_request: Option<usize>,
    max_partitions_per_request: Option<u64>,
    max_partitions: Option<u64>,
    max_configs_per_topic: Option<usize>,
    max_config_value_bytes: Option<usize>,
    max_partitions_per_plan: Option<usize>,
    max_acls_per_request: Option<usize>,
    max_message_bytes: Option<usize>,
    max_concurrent_streams: Option<u32>,
    max_concurrent_admin_requests: Option<usize>,
    request_timeout_ms: Option<u64>,
    max_linearizable_reads_per_sec: Option<u32>,
    max_connections: Option<u64>,
    max_connections_per_ip: Option<u64>,
    connections_max_idle_ms: Option<u64>,
    tls_handshake_timeout_ms: Option<u64>,
}

/// Worker threads for the controller's runtime, which is built before the
/// rest of the configuration is read: the flag, else the config file's
/// `worker_threads`. A file that cannot be read, or a 0 in it, is left to
/// `build` to report (the runtime builder would panic on 0).
pub fn worker_threads(a: &ControllerArgs) -> Option<usize> {
    let from_file = || {
        let text = std::fs::read_to_string(a.config.as_ref()?).ok()?;
        toml::from_str::<ControllerFile>(&text).ok()?.worker_threads
    };
    a.worker_threads
        .or_else(from_file)
        .filter(|n| *n > 0)
        .map(usize::from)
}

/// The node's configuration, HTTP address and log format from the flags,
/// the environment and the file; the first bad or missing option is the
/// error.
fn build(a: &ControllerArgs) -> Result<(ControllerConfig, Option<SocketAddr>, LogFormat), String> {
    let file: ControllerFile = crate::node::read_file(a.config.as_ref())?;
    if file.worker_threads == Some(0) {
        return Err("worker_threads must be at least 1".into());
    }
    let mut c = required(a, &file)?;
    c.transport = transport(a, &file, &c.cluster_id, c.node_id)?;
    c.super_users = super_users(a, &file)?;
    c.super_users_via_brokers =
        a.super_users_via_brokers || file.super_users_via_brokers.unwrap_or(false);
    c.join = a.join || file.join.unwrap_or(false);
    raft_timing(&mut c, a, &file)?;
    request_limits(&mut c, a, &file)?;
    listener_limits(&mut c, a, &file)?;
    if let Some(v) = a.disk_reserve_bytes.or(file.disk_reserve_bytes) {
        c.disk_reserve_bytes = Some(v);
    }
    if let Some(v) = a.storage_stall_timeout_ms.or(file.storage_stall_timeout_ms) {
        c.storage_stall_timeout_ms = v;
    }
    c.allow_unknown_topic_configs =
        a.allow_unknown_topic_configs || file.allow_unknown_topic_configs.unwrap_or(false);
    kafka_listener(&mut c, a, &file)?;
    c.validate()?;
    let http = http_endpoint(a, &file)?;
    let format = a.log_format.or(file.log_format).unwrap_or_default();
    Ok((c, http, format))
}

/// A configuration with the options every controller must be given
/// (node id, listen address, voters, data dir, cluster id), defaults
/// elsewhere.
fn required(a: &ControllerArgs, file: &ControllerFile) -> Result<ControllerConfig, String> {
    let need = |name: &str| format!("--{name} is required (flag, KEEL_ env var or config file)");
    let node_id = a.node_id.or(file.node_id).ok_or_else(|| need("node-id"))?;
    let listen = a.listen.or(file.listen).ok_or_else(|| need("listen"))?;
    let voters = a
        .voters
        .clone()
        .or(file.voters.clone())
        .ok_or_else(|| need("voters"))?;
    let voters = parse_voters(&voters)?;
    let data_dir = a
        .data_dir
        .clone()
        .or(file.data_dir.clone())
        .ok_or_else(|| need("data-dir"))?;
    let cluster_id = a
        .cluster_id
        .clone()
        .or(file.cluster_id.clone())
        .ok_or_else(|| need("cluster-id"))?;
    if cluster_id.is_empty() {
        return Err("--cluster-id must not be empty".into());
    }
    Ok(ControllerConfig::new(
        node_id, listen, voters, data_dir, cluster_id,
    ))
}

/// The transport the TLS flags, else the file's keys, say; a peer must
/// show controller `node_id`'s identity in `cluster_id`.
fn transport(
    a: &ControllerArgs,
    file: &ControllerFile,
    cluster_id: &str,
    node_id: u64,
) -> Result<keel_tls::Transport, String> {
    let tls_keys = TlsKeys {
        tls_cert: file.tls_cert.clone(),
        tls_key: file.tls_key.clone(),
        tls_ca: file.tls_ca.clone(),
        allow_plaintext: file.allow_plaintext,
    };
    a.tls.node_transport(
        &tls_keys,
        Some(cluster_id),
        Some(&keel_tls::Identity::controller(cluster_id, node_id)),
    )
}

/// The super users: the flag's comma-separated list, else the file's.
fn super_users(
    a: &ControllerArgs,
    file: &ControllerFile,
) -> Result<std::collections::BTreeSet<keel_metadata::acl::Principal>, String> {
    let super_users: Vec<String> = match &a.super_users {
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
        None => file.super_users.clone().unwrap_or_default(),
    };
    super_users
        .iter()
        .map(|s| s.parse::<keel_metadata::acl::Principal>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--super-users: {e}"))
}

/// Raft's timing, snapshots, rebalancing and the write budget.
fn raft_timing(
    c: &mut ControllerConfig,
    a: &ControllerArgs,
    file: &ControllerFile,
) -> Result<(), String> {
    if let Some(v) = a.session_timeout_ms.or(file.session_timeout_ms) {
        c.session_timeout_ms = v;
    }
    if let Some(v) = a.raft_heartbeat_ms.or(file.raft_heartbeat_ms) {
        c.raft_heartbeat_ms = v;
    }
    if let Some(v) = a.election_timeout_min_ms.or(file.election_timeout_min_ms) {
        c.election_timeout_min_ms = v;
    }
    if let Some(v) = a.election_timeout_max_ms.or(file.election_timeout_max_ms) {
        c.election_timeout_max_ms = v;
    }
    if let Some(v) = a
        .snapshot_interval_entries
        .or(file.snapshot_interval_entries)
    {
        c.snapshot_interval_entries = v;
    }
    if let Some(v) = a
        .auto_rebalance_interval_ms
        .or(file.auto_rebalance_interval_ms)
    {
        c.auto_rebalance_interval_ms = v;
    }
    if let Some(v) = a
        .auto_rebalance_threshold_pct
        .or(file.auto_rebalance_threshold_pct)
    {
        c.auto_rebalance_threshold_pct = v;
    }
    if let Some(v) = a.write_budget_mb.or(file.write_budget_mb) {
        if !(1..=MAX_WRITE_BUDGET_MB).contains(&v) {
            return Err(format!("write_budget_mb must be 1..={MAX_WRITE_BUDGET_MB}"));
        }
        c.write_budget_bytes = v << 20;
    }
    Ok(())
}

/// The limits on one request and on the metadata as a whole.
fn request_limits(
    c: &mut ControllerConfig,
    a: &ControllerArgs,
    file: &ControllerFile,
) -> Result<(), String> {
    if let Some(v) = a.max_topics_per_request.or(file.max_topics_per_request) {
        c.limits.max_topics_per_request = v;
    }
    if let Some(v) = a
        .max_partitions_per_request
        .or(file.max_partitions_per_request)
    {
        c.limits.max_partitions_per_request = v;
    }
    if let Some(v) = a.max_partitions.or(file.max_partitions) {
        c.limits.max_partitions = v;
    }
    if let Some(v) = a.max_configs_per_topic.or(file.max_configs_per_topic) {
        c.limits.max_configs_per_topic = v;
    }
    if let Some(v) = a.max_config_value_bytes.or(file.max_config_value_bytes) {
        c.limits.max_config_value_bytes = v;
    }
    if let Some(v) = a.max_partitions_per_plan.or(file.max_partitions_per_plan) {
        c.limits.max_partitions_per_plan = v;
    }
    if let Some(v) = a.max_acls_per_request.or(file.max_acls_per_request) {
        c.limits.max_acls_per_request = v;
    }
    Ok(())
}

/// The limits of the controller's own listener.
fn listener_limits(
    c: &mut ControllerConfig,
    a: &ControllerArgs,
    file: &ControllerFile,
) -> Result<(), String> {
    if let Some(v) = a.max_message_bytes.or(file.max_message_bytes) {
        c.max_message_bytes = v;
    }
    if let Some(v) = a.max_concurrent_streams.or(file.max_concurrent_streams) {
        c.max_concurrent_streams = v;
    }
    if let Some(v) = a
        .max_concurrent_admin_requests
        .or(file.max_concurrent_admin_requests)
    {
        c.max_concurrent_admin_requests = v;
    }
    if let Some(v) = a.request_timeout_ms.or(file.request_timeout_ms) {
        c.request_timeout_ms = v;
    }
    if let Some(v) = a
        .max_linearizable_reads_per_sec
        .or(file.max_linearizable_reads_per_sec)
    {
        c.max_linearizable_reads_per_sec = v;
    }
    Ok(())
}

/// The Kafka listener: its address, client authentication, SASL and
/// connection limits.
fn kafka_listener(
    c: &mut ControllerConfig,
    a: &ControllerArgs,
    file: &ControllerFile,
) -> Result<(), String> {
    crate::node::set_kafka_listener!(c, a, file)
}

/// The HTTP endpoint's address: `--http-listen`, or its older name
/// `--metrics-listen`; both given must agree.
fn http_endpoint(a: &ControllerArgs, file: &ControllerFile) -> Result<Option<SocketAddr>, String> {
    let metrics = a.metrics_listen.or(file.metrics_listen);
    let http = a.http_listen.or(file.http_listen);
    if let (Some(m), Some(h)) = (metrics, http) {
        if m != h {
            return Err(format!(
                "--metrics-listen {m} and --http-listen {h} differ: they are one endpoint, give one"
            ));
        }
    }
    Ok(http.or(metrics))
}

/// How often the node checks whether its Raft core stopped on a fatal error.
const FATAL_CHECK_PERIOD: Duration = Duration::from_millis(100);
/// Fatal checks between two hand-backs of freed memory ([`release_freed`]).
const RELEASE_EVERY_CHECKS: u32 = 10;

/// Hands memory the process has freed back to the OS. mimalloc returns
/// freed large blocks (a 1,000,000-partition snapshot's ~34 MB buffers:
/// the encoded image, the payload, sled's copies) only when later
/// allocation work gets round to it, so an active controller measured
/// either ~420 or ~660 bytes of RSS per partition after a snapshot,
/// depending on which thread freed what. A forced collect also purges
/// those blocks; with nothing to purge it is cheap. Harmless when mimalloc
/// is not the global allocator (as in tests).
fn release_freed() {
    // SAFETY: `mi_collect` takes no pointers and may be called from any
    // thread at any time.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// Runs until SIGINT/SIGTERM, or a fatal Raft error.
pub async fn run(a: ControllerArgs) -> ExitCode {
    let (mut config, http, format) = match crate::node::settings(build(&a)) {
        Ok(v) => v,
        Err(code) => return code,
    };
    if a.check {
        let c = &config;
        crate::node::say_valid("controller", c.node_id, &c.cluster_id, c.listen);
        return ExitCode::SUCCESS;
    }
    logging::init(format);
    let http = match crate::node::bind_endpoint(http, "HTTP").await {
        Ok(v) => v,
        Err(code) => return code,
    };
    keel_controller::metric_names::describe();
    logging::build_info("controller");
    config.connections = crate::connections::fit_fd_limit(config.connections);
    logging::exit_with_parent();
    let unsafe_features = crate::unsafe_features();
    if !unsafe_features.is_empty() {
        tracing::warn!(features = ?unsafe_features, "this is a deliberately unsafe build");
    }
    crate::tls::watch_certificate(&config.transport, Role::Controller(config.node_id));
    // Before the storage opens: a disk that hangs hangs the open too.
    logging::exit_if_storage_stalls(config.storage_stall_timeout_ms);
    let node = match ControllerNode::start(config).await {
        Ok(n) => n,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "controller failed to start");
            return ExitCode::from(EXIT_LOCAL);
        }
    };
    let (http_stop, http_stop_rx) = tokio::sync::watch::channel(false);
    if let Some((listener, render)) = http {
        tracing::info!(addr = ?listener.local_addr().ok(), "http endpoint up (console, /api/cluster, /metrics)");
        tokio::spawn(keel_controller::console::serve(
            listener,
            node.shared().clone(),
            render,
            http_stop_rx,
        ));
    }
    if let Some(e) = wait_for_stop(&node).await {
        tracing::error!(error = %e, "raft stopped; exiting");
        logging::exit_if_stuck("the Raft core stopped", logging::SHUTDOWN_BOUND);
        let _ = node.shutdown().await;
        return ExitCode::from(EXIT_LOCAL);
    }
    tracing::info!("shutting down");
    logging::exit_if_stuck("asked to stop", logging::SHUTDOWN_BOUND);
    let _ = http_stop.send(true);
    let _ = node.shutdown().await;
    ExitCode::SUCCESS
}

/// Waits until SIGINT/SIGTERM (`None`) or until the Raft core stops on a
/// fatal error or the data dir is gone (`Some` of why), handing freed
/// memory back to the OS now and then.
async fn wait_for_stop(node: &ControllerNode) -> Option<String> {
    let stop = logging::shutdown_signal();
    tokio::pin!(stop);
    // Looked at now and then rather than on every change: openraft
    // publishes its metrics several times per entry, and each change would
    // wake this thread (it is not a runtime worker) only to find it running.
    let metrics = node.raft().metrics();
    let mut check = tokio::time::interval(FATAL_CHECK_PERIOD);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut checks = 0u32;
    loop {
        tokio::select! {
            _ = &mut stop => return None,
            _ = check.tick() => {
                checks = checks.wrapping_add(1);
                if checks.is_multiple_of(RELEASE_EVERY_CHECKS) {
                    release_freed();
                }
                // A core that stopped on an error says which; one that is
                // gone without saying (its task ended) dropped the sender.
                let stopped = match metrics.borrow().running_state.clone() {
                    Err(e) => Some(e.to_string()),
                    Ok(()) if metrics.has_changed().is_err() => {
                        Some("the Raft core is gone".to_string())
                    }
                    Ok(()) if node.shared().disk.gone() => {
                        Some("the data dir is gone".to_string())
                    }
                    Ok(()) => None,
                };
                if stopped.is_some() {
                    return stopped;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// The options every controller needs, TLS aside.
    const MINIMAL: [&str; 10] = [
        "--node-id",
        "1",
        "--listen",
        "127.0.0.1:9093",
        "--voters",
        "1@127.0.0.1:9093",
        "--data-dir",
        "/nonexistent",
        "--cluster-id",
        "prod",
    ];

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: ControllerArgs,
    }

    fn parse(args: &[&str]) -> Result<ControllerArgs, clap::Error> {
        Cmd::try_parse_from(std::iter::once("controller").chain(args.iter().copied()))
            .map(|c| c.args)
    }

    #[test]
    fn connection_limits_come_from_flags_with_kafka_defaults() {
        let mut args = MINIMAL.to_vec();
        args.push("--allow-plaintext");
        let (c, _, _) = build(&parse(&args).unwrap()).unwrap();
        assert_eq!(c.connections, keel_tls::admission::Limits::default());
        assert_eq!(c.kafka_connections_max_idle_ms, 600_000);
        args.extend([
            "--max-connections",
            "500",
            "--max-connections-per-ip",
            "50",
            "--connections-max-idle-ms",
            "30000",
            "--tls-handshake-timeout-ms",
            "2000",
        ]);
        let (c, _, _) = build(&parse(&args).unwrap()).unwrap();
        assert_eq!(c.connections.max_connections, 500);
        assert_eq!(c.connections.max_connections_per_ip, 50);
        assert_eq!(c.connections.handshake_timeout, Duration::from_secs(2));
        assert_eq!(c.kafka_connections_max_idle_ms, 30_000);
        let mut zero = MINIMAL.to_vec();
        zero.extend(["--allow-plaintext", "--max-connections-per-ip", "0"]);
        assert!(parse(&zero).is_err(), "0 is refused");
    }

    #[test]
    fn http_listen_and_metrics_listen_name_one_endpoint() {
        let mut base = MINIMAL.to_vec();
        base.push("--allow-plaintext");
        let with = |extra: &[&str]| {
            let mut args = base.to_vec();
            args.extend_from_slice(extra);
            build(&parse(&args).unwrap())
        };
        let (_, http, _) = with(&["--http-listen", "127.0.0.1:9100"]).unwrap();
        assert_eq!(http, Some("127.0.0.1:9100".parse().unwrap()));
        let (_, http, _) = with(&["--metrics-listen", "127.0.0.1:9100"]).unwrap();
        assert_eq!(http, Some("127.0.0.1:9100".parse().unwrap()));
        let same = [
            "--metrics-listen",
            "127.0.0.1:9100",
            "--http-listen",
            "127.0.0.1:9100",
        ];
        assert!(with(&same).is_ok());
        let e = with(&[
            "--metrics-listen",
            "127.0.0.1:9100",
            "--http-listen",
            "127.0.0.1:9200",
        ])
        .expect_err("two addresses for one endpoint");
        assert!(e.contains("--http-listen"), "{e}");
        let (_, http, _) = with(&[]).unwrap();
        assert_eq!(http, None);
    }

    #[test]
    fn worker_threads_come_from_the_flag_then_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("controller.toml");
        std::fs::write(&file, "worker_threads = 3\n").unwrap();
        let file = file.to_str().unwrap();

        assert_eq!(worker_threads(&parse(&[]).unwrap()), None);
        assert_eq!(
            worker_threads(&parse(&["--config", file]).unwrap()),
            Some(3)
        );
        let both = parse(&["--config", file, "--worker-threads", "1"]).unwrap();
        assert_eq!(worker_threads(&both), Some(1));
        // An unreadable file leaves the default; `run` reports the file.
        let missing = parse(&["--config", "/nonexistent/keel.toml"]).unwrap();
        assert_eq!(worker_threads(&missing), None);
        assert!(parse(&["--worker-threads", "0"]).is_err());
        // A 0 in the file is an error at start-up, not a runtime panic.
        let zero = dir.path().join("zero.toml");
        std::fs::write(&zero, "worker_threads = 0\n").unwrap();
        let zero = parse(&["--config", zero.to_str().unwrap()]).unwrap();
        assert_eq!(worker_threads(&zero), None);
        let e = build(&zero).expect_err("worker_threads = 0 is refused");
        assert!(e.contains("worker_threads"), "{e}");
    }

    #[test]
    fn tls_files_come_from_flags_or_the_config_file_and_must_name_this_node() {
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        keel_tls::certs::init(
            &certs,
            &keel_tls::certs::InitSpec {
                cluster_id: "prod".into(),
                controllers: 2,
                ..Default::default()
            },
        )
        .unwrap();
        let path = |name: &str| certs.join(name).display().to_string();
        let file = dir.path().join("controller.toml");
        std::fs::write(
            &file,
            format!(
                "node_id = 1\nlisten = \"127.0.0.1:9093\"\nvoters = \"1@127.0.0.1:9093\"\n\
                 data_dir = \"{}\"\ncluster_id = \"prod\"\n\
                 tls_cert = \"{}\"\ntls_key = \"{}\"\ntls_ca = \"{}\"\n",
                dir.path().join("data").display(),
                path("controller-1.pem"),
                path("controller-1-key.pem"),
                path("ca.pem"),
            ),
        )
        .unwrap();
        let file = file.to_str().unwrap();

        let (c, _, _) = build(&parse(&["--config", file]).unwrap()).unwrap();
        assert_eq!(
            c.transport.identity(),
            Some(keel_tls::Identity::controller("prod", 1))
        );
        // Flags win over the file.
        let flags = [
            "--config",
            file,
            "--node-id",
            "2",
            "--tls-cert",
            &path("controller-2.pem"),
            "--tls-key",
            &path("controller-2-key.pem"),
        ];
        let (c, _, _) = build(&parse(&flags).unwrap()).unwrap();
        assert_eq!(
            c.transport.identity(),
            Some(keel_tls::Identity::controller("prod", 2))
        );
        // Another node's certificate is refused.
        let e = build(&parse(&["--config", file, "--node-id", "2"]).unwrap())
            .expect_err("controller 1's certificate on node 2");
        assert!(
            e.contains("this process is keel://prod/controller/2"),
            "{e}"
        );
        // With plaintext asked for as well: refused.
        let e = build(&parse(&["--config", file, "--allow-plaintext"]).unwrap())
            .expect_err("TLS and plaintext at once");
        assert!(e.contains("--allow-plaintext"), "{e}");
        // Without TLS options: refused, unless plaintext is asked for.
        let plain = MINIMAL;
        let e = build(&parse(&plain).unwrap()).expect_err("no TLS settings");
        assert_eq!(e, crate::tls::NO_TLS);
        let mut allowed = plain.to_vec();
        allowed.push("--allow-plaintext");
        let (c, _, _) = build(&parse(&allowed).unwrap()).unwrap();
        assert!(!c.transport.is_tls());
        // One file alone: refused.
        let mut one = plain.to_vec();
        let cert = path("controller-1.pem");
        one.extend(["--tls-cert", &cert]);
        let e = build(&parse(&one).unwrap()).expect_err("a certificate alone");
        assert!(e.contains("go together"), "{e}");
    }
}
