//! `keel broker`: a broker process (and `keel broker unregister`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use keel_broker::{Broker, BrokerConfig};
use serde::Deserialize;

use crate::admin::Common;
use crate::logging::{self, LogFormat};
use crate::tls::{TlsArgs, TlsKeys};
use crate::EXIT_LOCAL;

/// Options of `keel broker`: flags, `KEEL_BROKER_*` environment variables,
/// or keys of the optional TOML file (flags win).
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BrokerArgs {
    #[command(subcommand)]
    cmd: Option<BrokerCmd>,
    /// TOML file with any of the options below (keys as the long flags, with `_`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// This broker's id.
    #[arg(long, env = "KEEL_BROKER_ID")]
    broker_id: Option<u32>,
    /// Own address, e.g. 127.0.0.21:9092 (also the source of outgoing connections).
    #[arg(long, env = "KEEL_BROKER_LISTEN")]
    listen: Option<SocketAddr>,
    /// Any controller addresses, comma separated.
    #[arg(long, env = "KEEL_CONTROLLERS")]
    controllers: Option<String>,
    /// Cluster id; must match the controllers'.
    #[arg(long, env = "KEEL_CLUSTER_ID")]
    cluster_id: Option<String>,
    /// Rack (availability zone) for rack-aware replica placement.
    #[arg(long, env = "KEEL_BROKER_RACK")]
    rack: Option<String>,
    /// Log directories, comma separated.
    #[arg(long, env = "KEEL_BROKER_LOG_DIRS")]
    log_dirs: Option<String>,
    /// Holds the incarnation id, last epoch and leadership history.
    #[arg(long, env = "KEEL_BROKER_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Heartbeat interval in ms [default: 2000].
    #[arg(long, env = "KEEL_HEARTBEAT_INTERVAL_MS")]
    heartbeat_interval_ms: Option<u64>,
    /// Session timeout in ms until the controllers give theirs at
    /// registration (theirs then holds: the controllers' --session-timeout-ms
    /// is the one knob) [default: 9000].
    #[arg(long, env = "KEEL_SESSION_TIMEOUT_MS")]
    session_timeout_ms: Option<u64>,
    /// replica.lag.time.max.ms [default: 30000].
    #[arg(long, env = "KEEL_REPLICA_LAG_TIME_MAX_MS")]
    replica_lag_time_max_ms: Option<u64>,
    /// A storage call (the history's write and sync, a log dir probe,
    /// measuring free space, opening the data dir) still running after
    /// this many ms means the disk hangs: the broker exits with code 6 so
    /// its supervisor restarts it; 0: never [default: 30000].
    #[arg(long, env = "KEEL_STORAGE_STALL_TIMEOUT_MS")]
    storage_stall_timeout_ms: Option<u64>,
    /// HTTP/2 streams one connection to this broker may have open at once;
    /// a client past it waits [default: 256].
    #[arg(long, env = "KEEL_BROKER_MAX_CONCURRENT_STREAMS", value_parser = clap::value_parser!(u32).range(1..))]
    max_concurrent_streams: Option<u32>,
    /// A request to this broker not answered within this many ms is
    /// cancelled [default: 60000].
    #[arg(long, env = "KEEL_BROKER_REQUEST_TIMEOUT_MS", value_parser = clap::value_parser!(u64).range(1..))]
    request_timeout_ms: Option<u64>,
    /// Largest LeaderAndIsr, UpdateMetadata or StopReplica decoded, in
    /// bytes; a larger one is refused (OUT_OF_RANGE) [default: 67108864].
    #[arg(long, env = "KEEL_BROKER_MAX_MESSAGE_BYTES")]
    max_message_bytes: Option<usize>,
    /// Kafka listener address, e.g. 127.0.0.21:9094: Kafka clients (kcat,
    /// AdminClients) reach the cluster there, over TLS with this broker's
    /// certificate (SSL with a client certificate, or SASL_SSL with
    /// SCRAM), or plaintext only with --allow-plaintext; off when not
    /// given.
    #[arg(long, env = "KEEL_BROKER_KAFKA_LISTEN")]
    kafka_listen: Option<SocketAddr>,
    /// Largest Kafka request read, in bytes (Kafka's
    /// socket.request.max.bytes, there 100 MiB); a larger one closes its
    /// connection [default: 4194304].
    #[arg(long, env = "KEEL_BROKER_KAFKA_MAX_REQUEST_BYTES")]
    kafka_max_request_bytes: Option<usize>,
    /// Whether a Kafka client must present a certificate (Kafka's
    /// ssl.client.auth): `required`, or `requested` (a client without one
    /// logs in with SASL, or is User:ANONYMOUS) [default: required].
    #[arg(long, env = "KEEL_BROKER_KAFKA_SSL_CLIENT_AUTH")]
    kafka_ssl_client_auth: Option<keel_tls::KafkaClientAuth>,
    /// Offer SASL PLAIN beside SCRAM-SHA-256/512 on the Kafka listener (TLS
    /// only: PLAIN sends the password itself). The password is checked
    /// against the user's SCRAM credential.
    #[arg(long, env = "KEEL_BROKER_KAFKA_SASL_PLAIN")]
    kafka_sasl_plain: bool,
    /// No longer used: every broker forwards Kafka admin requests, and the
    /// active controller authorizes each as the client that sent it.
    #[arg(long, env = "KEEL_BROKER_KAFKA_ADMIN", hide = true)]
    kafka_admin: bool,
    /// Prometheus metrics address.
    #[arg(long, env = "KEEL_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Log format.
    #[arg(long, env = "KEEL_LOG_FORMAT", value_enum)]
    log_format: Option<LogFormat>,
    /// Parse and validate the configuration (file, environment, flags),
    /// then exit: 0 when it is valid, 2 when not. Starts nothing.
    #[arg(long)]
    check: bool,
    #[command(flatten)]
    connections: crate::connections::ConnectionArgs,
    #[command(flatten)]
    tls: TlsArgs,
}

#[derive(Subcommand, Debug)]
enum BrokerCmd {
    /// Remove a fenced broker from the cluster for good: the older
    /// spelling of `keel cluster unregister-broker`, kept for scripts.
    #[command(hide = true)]
    Unregister {
        /// The broker's id.
        #[arg(long)]
        id: u32,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct BrokerFile {
    broker_id: Option<u32>,
    listen: Option<SocketAddr>,
    controllers: Option<String>,
    cluster_id: Option<String>,
    rack: Option<String>,
    log_dirs: Option<String>,
    data_dir: Option<PathBuf>,
    heartbeat_interval_ms: Option<u64>,
    session_timeout_ms: Option<u64>,
    replica_lag_time_max_ms: Option<u64>,
    storage_stall_timeout_ms: Option<u64>,
    max_concurrent_streams: Option<u32>,
    request_timeout_ms: Option<u64>,
    max_message_bytes: Option<usize>,
    kafka_listen: Option<SocketAddr>,
    kafka_max_request_bytes: Option<usize>,
    kafka_ssl_client_auth: Option<String>,
    kafka_sasl_plain: Option<bool>,
    kafka_admin: Option<bool>,
    metrics_listen: Option<SocketAddr>,
    log_format: Option<LogFormat>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    allow_plaintext: Option<bool>,
    max_connections: Option<u64>,
    max_connections_per_ip: Option<u64>,
    connections_max_idle_ms: Option<u64>,
    tls_handshake_timeout_ms: Option<u64>,
}

fn list(s: &str) -> Vec<String> {
    s.split(',')
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty())
        .collect()
}

/// The broker's configuration, metrics address and log format from the
/// flags, the environment and the file; the first bad or missing option
/// is the error.
fn build(a: &BrokerArgs) -> Result<(BrokerConfig, Option<SocketAddr>, LogFormat), String> {
    let f: BrokerFile = crate::node::read_file(a.config.as_ref())?;
    let mut c = required(a, &f)?;
    c.rack = a.rack.clone().or(f.rack.clone());
    c.log_dirs = match a.log_dirs.clone().or(f.log_dirs.clone()) {
        Some(s) => list(&s),
        None => vec![c.data_dir.join("log").display().to_string()],
    };
    timing_and_limits(&mut c, a, &f)?;
    kafka_listener(&mut c, a, &f)?;
    Ok((
        c,
        a.metrics_listen.or(f.metrics_listen),
        a.log_format.or(f.log_format).unwrap_or_default(),
    ))
}

/// A configuration with the options every broker must be given (id,
/// listen address, controllers, cluster id, data dir) and its transport,
/// defaults elsewhere.
fn required(a: &BrokerArgs, f: &BrokerFile) -> Result<BrokerConfig, String> {
    let need = |n: &str| format!("--{n} is required (flag, env var or config file)");
    let id = a
        .broker_id
        .or(f.broker_id)
        .ok_or_else(|| need("broker-id"))?;
    let listen = a.listen.or(f.listen).ok_or_else(|| need("listen"))?;
    let controllers = list(
        &a.controllers
            .clone()
            .or(f.controllers.clone())
            .ok_or_else(|| need("controllers"))?,
    );
    let cluster_id = a
        .cluster_id
        .clone()
        .or(f.cluster_id.clone())
        .ok_or_else(|| need("cluster-id"))?;
    let data_dir = a
        .data_dir
        .clone()
        .or(f.data_dir.clone())
        .ok_or_else(|| need("data-dir"))?;
    let tls_keys = TlsKeys {
        tls_cert: f.tls_cert.clone(),
        tls_key: f.tls_key.clone(),
        tls_ca: f.tls_ca.clone(),
        allow_plaintext: f.allow_plaintext,
    };
    let transport = a.tls.node_transport(
        &tls_keys,
        Some(&cluster_id),
        Some(&keel_tls::Identity::broker(&cluster_id, id)),
    )?;
    let mut c = BrokerConfig::new(id, listen, controllers, cluster_id, data_dir);
    c.transport = transport;
    Ok(c)
}

/// Heartbeats, sessions, replica lag, storage stalls and the limits of
/// the broker's own listener.
fn timing_and_limits(c: &mut BrokerConfig, a: &BrokerArgs, f: &BrokerFile) -> Result<(), String> {
    use crate::node::at_least_one;
    if let Some(v) = a.heartbeat_interval_ms.or(f.heartbeat_interval_ms) {
        c.heartbeat_interval_ms = v;
    }
    if let Some(v) = a.session_timeout_ms.or(f.session_timeout_ms) {
        c.session_timeout_ms = v;
    }
    if let Some(v) = a.replica_lag_time_max_ms.or(f.replica_lag_time_max_ms) {
        c.replica_lag_time_max_ms = v;
    }
    if let Some(v) = a.storage_stall_timeout_ms.or(f.storage_stall_timeout_ms) {
        c.storage_stall_timeout_ms = v;
    }
    if let Some(v) = a.max_concurrent_streams.or(f.max_concurrent_streams) {
        c.max_concurrent_streams = at_least_one("max_concurrent_streams", v)?;
    }
    if let Some(v) = a.request_timeout_ms.or(f.request_timeout_ms) {
        c.request_timeout_ms = at_least_one("request_timeout_ms", v)?;
    }
    if let Some(v) = a.max_message_bytes.or(f.max_message_bytes) {
        c.max_message_bytes = at_least_one("max_message_bytes", v)?;
    }
    Ok(())
}

/// The Kafka listener: its address, request size, client authentication,
/// SASL and connection limits.
fn kafka_listener(c: &mut BrokerConfig, a: &BrokerArgs, f: &BrokerFile) -> Result<(), String> {
    if let Some(v) = a.kafka_max_request_bytes.or(f.kafka_max_request_bytes) {
        c.kafka_max_request_bytes = crate::node::at_least_one("kafka_max_request_bytes", v)?;
    }
    if a.kafka_admin || f.kafka_admin.unwrap_or(false) {
        eprintln!("keel broker: --kafka-admin is no longer used: every broker forwards Kafka admin requests, authorized as the client that sent them");
    }
    crate::node::set_kafka_listener!(c, a, f)
}

/// `keel broker unregister`: a client of the controllers, not a broker.
async fn unregister(id: u32, common: &Common) -> ExitCode {
    let client = match common.client() {
        Ok(c) => c,
        Err(code) => return code,
    };
    crate::admin::cluster::unregister(&client, common.output, id).await
}

/// Runs a broker until SIGINT/SIGTERM (then shuts down in a controlled
/// way) or until it fails; or `keel broker unregister`.
pub async fn run(a: BrokerArgs) -> ExitCode {
    if let Some(BrokerCmd::Unregister { id, common }) = a.cmd {
        return unregister(id, &common).await;
    }
    let (mut config, metrics, format) = match crate::node::settings(build(&a)) {
        Ok(v) => v,
        Err(code) => return code,
    };
    if a.check {
        let c = &config;
        crate::node::say_valid("broker", c.broker_id, &c.cluster_id, c.listen);
        return ExitCode::SUCCESS;
    }
    logging::init(format);
    let metrics = match crate::node::bind_endpoint(metrics, "metrics").await {
        Ok(v) => v,
        Err(code) => return code,
    };
    keel_broker::metrics::describe();
    logging::build_info("broker");
    config.connections = crate::connections::fit_fd_limit(config.connections);
    logging::exit_with_parent();
    crate::tls::watch_certificate(&config.transport, keel_tls::Role::Broker(config.broker_id));
    // Before the data dir opens: a disk that hangs hangs the open too.
    logging::exit_if_storage_stalls(config.storage_stall_timeout_ms);
    let http_idle = std::time::Duration::from_millis(config.kafka_connections_max_idle_ms);
    let broker = match Broker::start(config).await {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "broker failed to start");
            return ExitCode::from(EXIT_LOCAL);
        }
    };
    let (metrics_stop, metrics_stop_rx) = tokio::sync::watch::channel(false);
    if let Some((listener, render)) = metrics {
        tracing::info!(addr = ?listener.local_addr().ok(), "metrics endpoint up");
        let gate = broker.gate().clone();
        tokio::spawn(async move {
            logging::serve_metrics(listener, &gate, http_idle, render, metrics_stop_rx).await
        });
    }
    let stop = logging::shutdown_signal();
    tokio::pin!(stop);
    tokio::select! {
        _ = &mut stop => {}
        e = broker.failed() => {
            tracing::error!(error = %format!("{e:#}"), "broker stopped");
            logging::exit_if_stuck("the broker failed", logging::SHUTDOWN_BOUND);
            let _ = broker.shutdown(false).await;
            return ExitCode::from(EXIT_LOCAL);
        }
    }
    let _ = metrics_stop.send(true);
    tracing::info!("shutting down (controlled)");
    logging::exit_if_stuck(
        "asked to stop",
        keel_broker::CONTROLLED_SHUTDOWN_TIMEOUT + logging::SHUTDOWN_BOUND,
    );
    match broker.shutdown(true).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "controlled shutdown failed");
            ExitCode::from(EXIT_LOCAL)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: BrokerArgs,
    }

    fn parse<S: AsRef<str>>(args: &[S]) -> Result<BrokerArgs, clap::Error> {
        Cmd::try_parse_from(std::iter::once("broker").chain(args.iter().map(AsRef::as_ref)))
            .map(|c| c.args)
    }

    const BASE: [&str; 11] = [
        "--broker-id",
        "1",
        "--listen",
        "127.0.0.1:9092",
        "--controllers",
        "127.0.0.1:9093",
        "--cluster-id",
        "prod",
        "--data-dir",
        "/nonexistent",
        "--allow-plaintext",
    ];

    /// The required options, plaintext, then `extra`.
    fn with(extra: &[&str]) -> Vec<String> {
        BASE.iter().chain(extra).map(|s| s.to_string()).collect()
    }

    #[test]
    fn connection_limits_come_from_the_file_and_flags_win() {
        let (c, _, _) = build(&parse(&BASE).unwrap()).unwrap();
        assert_eq!(c.connections, keel_tls::admission::Limits::default());
        assert_eq!(c.kafka_connections_max_idle_ms, 600_000);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("broker.toml");
        std::fs::write(
            &file,
            "max_connections = 300\nmax_connections_per_ip = 30\nconnections_max_idle_ms = 1000\ntls_handshake_timeout_ms = 700\n",
        )
        .unwrap();
        let file = file.to_str().unwrap();
        let (c, _, _) = build(&parse(&with(&["--config", file])).unwrap()).unwrap();
        assert_eq!(c.connections.max_connections, 300);
        assert_eq!(c.connections.max_connections_per_ip, 30);
        assert_eq!(
            c.connections.handshake_timeout,
            std::time::Duration::from_millis(700)
        );
        assert_eq!(c.kafka_connections_max_idle_ms, 1_000);
        let flags = with(&["--config", file, "--max-connections-per-ip", "7"]);
        let (c, _, _) = build(&parse(&flags).unwrap()).unwrap();
        assert_eq!(c.connections.max_connections_per_ip, 7);
        std::fs::write(dir.path().join("zero.toml"), "max_connections = 0\n").unwrap();
        let zero = dir.path().join("zero.toml");
        let e = build(&parse(&with(&["--config", zero.to_str().unwrap()])).unwrap())
            .expect_err("0 is refused");
        assert!(e.contains("max_connections"), "{e}");
    }

    #[test]
    fn listener_limits_default_to_the_old_constants_and_come_from_flags_or_the_file() {
        let (c, _, _) = build(&parse(&BASE).unwrap()).unwrap();
        assert_eq!(c.max_concurrent_streams, 256);
        assert_eq!(c.request_timeout_ms, 60_000);
        assert_eq!(c.max_message_bytes, 64 << 20);

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("broker.toml");
        std::fs::write(
            &file,
            "max_concurrent_streams = 8\nrequest_timeout_ms = 500\nmax_message_bytes = 4096\n",
        )
        .unwrap();
        let file = file.to_str().unwrap();
        let (c, _, _) = build(&parse(&with(&["--config", file])).unwrap()).unwrap();
        assert_eq!(
            (
                c.max_concurrent_streams,
                c.request_timeout_ms,
                c.max_message_bytes
            ),
            (8, 500, 4096)
        );
        // Flags win over the file.
        let flags = with(&[
            "--config",
            file,
            "--max-concurrent-streams",
            "9",
            "--request-timeout-ms",
            "700",
            "--max-message-bytes",
            "8192",
        ]);
        let (c, _, _) = build(&parse(&flags).unwrap()).unwrap();
        assert_eq!(
            (
                c.max_concurrent_streams,
                c.request_timeout_ms,
                c.max_message_bytes
            ),
            (9, 700, 8192)
        );
    }

    #[test]
    fn the_kafka_listener_is_off_by_default_and_comes_from_flags_or_the_file() {
        let (c, _, _) = build(&parse(&BASE).unwrap()).unwrap();
        assert_eq!(c.kafka_listen, None);
        assert_eq!(c.kafka_max_request_bytes, 4 << 20);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("broker.toml");
        std::fs::write(
            &file,
            "kafka_listen = \"127.0.0.1:9094\"\nkafka_max_request_bytes = 4096\n",
        )
        .unwrap();
        let file = file.to_str().unwrap();
        let (c, _, _) = build(&parse(&with(&["--config", file])).unwrap()).unwrap();
        assert_eq!(c.kafka_listen, Some("127.0.0.1:9094".parse().unwrap()));
        assert_eq!(c.kafka_max_request_bytes, 4096);
        let flags = with(&[
            "--config",
            file,
            "--kafka-listen",
            "127.0.0.2:9095",
            "--kafka-max-request-bytes",
            "8192",
        ]);
        let (c, _, _) = build(&parse(&flags).unwrap()).unwrap();
        assert_eq!(c.kafka_listen, Some("127.0.0.2:9095".parse().unwrap()));
        assert_eq!(c.kafka_max_request_bytes, 8192);
        let e = build(&parse(&with(&["--kafka-max-request-bytes", "0"])).unwrap())
            .expect_err("0 bytes refused");
        assert_eq!(e, "kafka_max_request_bytes must be at least 1");
    }

    #[test]
    fn a_zero_listener_limit_is_refused_naming_it() {
        for flag in ["--max-concurrent-streams", "--request-timeout-ms"] {
            let e = parse(&with(&[flag, "0"])).expect_err("0 refused by clap");
            assert!(e.to_string().contains(flag), "{e}");
        }
        let e = build(&parse(&with(&["--max-message-bytes", "0"])).unwrap())
            .expect_err("0 bytes refused");
        assert_eq!(e, "max_message_bytes must be at least 1");
        let dir = tempfile::tempdir().unwrap();
        for key in [
            "max_concurrent_streams",
            "request_timeout_ms",
            "max_message_bytes",
        ] {
            let file = dir.path().join(format!("{key}.toml"));
            std::fs::write(&file, format!("{key} = 0\n")).unwrap();
            let e = build(&parse(&with(&["--config", file.to_str().unwrap()])).unwrap())
                .expect_err("0 in the file refused");
            assert_eq!(e, format!("{key} must be at least 1"));
        }
    }
}
