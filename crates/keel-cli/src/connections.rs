//! The connection limits of `keel controller` and `keel broker`
//! (`keel_tls::admission`): from the flags, then fitted to the process's
//! open-file limit.

use std::time::Duration;

use clap::Args;
use keel_tls::admission::Limits;

use crate::logging;

/// The connection options both nodes take as flags (or `KEEL_*`
/// environment variables); `None`: not given.
#[derive(Args, Debug, Clone, Default)]
pub struct ConnectionArgs {
    /// Connections open at once over all listeners of this node (Kafka's
    /// max.connections); the cluster's own nodes get a reserve past it.
    /// Lowered to what the open-file limit allows [default: the open-file
    /// limit less a margin].
    #[arg(long, env = "KEEL_MAX_CONNECTIONS", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: Option<u64>,
    /// Connections open at once from one address (Kafka's
    /// max.connections.per.ip); the cluster's own nodes are exempt
    /// [default: 1000].
    #[arg(long, env = "KEEL_MAX_CONNECTIONS_PER_IP", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections_per_ip: Option<u64>,
    /// A Kafka or HTTP (metrics, console) connection that sends nothing
    /// for this many ms is closed (Kafka's connections.max.idle.ms)
    /// [default: 600000].
    #[arg(long, env = "KEEL_CONNECTIONS_MAX_IDLE_MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub connections_max_idle_ms: Option<u64>,
    /// A TLS handshake not done within this many ms closes its connection
    /// [default: 5000].
    #[arg(long, env = "KEEL_TLS_HANDSHAKE_TIMEOUT_MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub tls_handshake_timeout_ms: Option<u64>,
}

/// The limits as given (flag, environment or file); `None`: the default.
pub struct Given {
    pub max_connections: Option<u64>,
    pub max_connections_per_ip: Option<u64>,
    pub tls_handshake_timeout_ms: Option<u64>,
}

/// The limits `given` asks for, defaults elsewhere.
pub fn limits(given: Given) -> Result<Limits, String> {
    let positive = |name: &str, v: u64| {
        if v == 0 {
            Err(format!("{name} must be at least 1"))
        } else {
            Ok(v)
        }
    };
    let count = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    let mut l = Limits::default();
    if let Some(v) = given.max_connections {
        l.max_connections = count(positive("max_connections", v)?);
    }
    if let Some(v) = given.max_connections_per_ip {
        l.max_connections_per_ip = count(positive("max_connections_per_ip", v)?);
    }
    if let Some(v) = given.tls_handshake_timeout_ms {
        l.handshake_timeout = Duration::from_millis(positive("tls_handshake_timeout_ms", v)?);
    }
    Ok(l)
}

/// Raises the open-file limit to its hard limit, then lowers `asked` so
/// that its connections leave a margin of descriptors free for storage,
/// Raft peers and outgoing channels; logs both.
pub fn fit_fd_limit(asked: Limits) -> Limits {
    let Some(fds) = logging::raise_fd_limit() else {
        return asked;
    };
    let fitted = asked.clone().fit_fd_limit(fds);
    if fitted.max_connections < asked.max_connections
        && asked.max_connections != Limits::default().max_connections
    {
        tracing::warn!(
            asked = asked.max_connections,
            allowed = fitted.max_connections,
            open_file_limit = fds,
            "max_connections lowered to what the open-file limit allows"
        );
    }
    tracing::info!(
        open_file_limit = fds,
        kept_free = Limits::fd_margin(fds),
        max_connections = fitted.max_connections,
        max_connections_per_ip = fitted.max_connections_per_ip,
        member_reserve = fitted.member_reserve,
        tls_handshake_timeout_ms = fitted.handshake_timeout.as_millis() as u64,
        "connection limits"
    );
    fitted
}
