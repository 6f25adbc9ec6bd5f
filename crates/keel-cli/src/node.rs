//! What `keel controller` and `keel broker` read alike: the optional TOML
//! file, the checks on counts that must not be 0, and the Kafka listener's
//! options (client authentication, SASL, connection limits); and the
//! first steps of running either.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use keel_tls::admission::Limits;
use keel_tls::KafkaClientAuth;
use serde::de::DeserializeOwned;

use crate::connections;
use crate::EXIT_LOCAL;

/// The TOML file `path` names, or every key absent without one.
pub fn read_file<T: DeserializeOwned + Default>(path: Option<&PathBuf>) -> Result<T, String> {
    match path {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            toml::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
        }
        None => Ok(T::default()),
    }
}

/// `v` for option `name`, refused when it is 0.
pub fn at_least_one<T: PartialEq + From<u8>>(name: &str, v: T) -> Result<T, String> {
    if v == T::from(0) {
        return Err(format!("{name} must be at least 1"));
    }
    Ok(v)
}

/// The Kafka listener's options as given (flag, environment or file).
pub struct KafkaGiven<'a> {
    /// `--kafka-ssl-client-auth`, which wins over the file's.
    pub ssl_client_auth: Option<KafkaClientAuth>,
    /// The file's `kafka_ssl_client_auth`, parsed only without the flag.
    pub ssl_client_auth_file: Option<&'a str>,
    /// SASL/PLAIN asked for by the flag or the file.
    pub sasl_plain: bool,
    /// The connection limits.
    pub connections: connections::Given,
    /// How long an idle Kafka connection stays open.
    pub connections_max_idle_ms: Option<u64>,
}

/// The Kafka listener's options, checked; `None`: the node's default.
pub struct KafkaListener {
    /// How clients authenticate with TLS.
    pub client_auth: Option<KafkaClientAuth>,
    /// Whether SASL/PLAIN is offered.
    pub sasl_plain: bool,
    /// The connection limits.
    pub connections: Limits,
    /// How long an idle Kafka connection stays open.
    pub connections_max_idle_ms: Option<u64>,
}

/// Checks the Kafka listener's options in the order the nodes always
/// have, so the first bad one is the one reported.
pub fn kafka_listener(given: KafkaGiven) -> Result<KafkaListener, String> {
    let client_auth = match (given.ssl_client_auth, given.ssl_client_auth_file) {
        (Some(v), _) => Some(v),
        (None, Some(v)) => Some(v.parse()?),
        (None, None) => None,
    };
    let connections = connections::limits(given.connections)?;
    let connections_max_idle_ms = given
        .connections_max_idle_ms
        .map(|v| at_least_one("connections_max_idle_ms", v))
        .transpose()?;
    Ok(KafkaListener {
        client_auth,
        sasl_plain: given.sasl_plain,
        connections,
        connections_max_idle_ms,
    })
}

/// The body of a node's `fn kafka_listener(c, a, f) -> Result<(), String>`:
/// takes the Kafka listener's address, client authentication, SASL and
/// connection limits from the flags `a` (their connection limits in
/// `a.connections`), else the file `f`, checks them with
/// [`kafka_listener`] and sets them on the configuration `c`. A macro
/// because `keel controller` and `keel broker` name these options alike
/// on their own argument, file and configuration types.
macro_rules! set_kafka_listener {
    ($c:ident, $a:ident, $f:ident) => {{
        $c.kafka_listen = $a.kafka_listen.or($f.kafka_listen);
        let k = $crate::node::kafka_listener($crate::node::KafkaGiven {
            ssl_client_auth: $a.kafka_ssl_client_auth,
            ssl_client_auth_file: $f.kafka_ssl_client_auth.as_deref(),
            sasl_plain: $a.kafka_sasl_plain || $f.kafka_sasl_plain.unwrap_or(false),
            connections: $crate::connections::Given {
                max_connections: $a.connections.max_connections.or($f.max_connections),
                max_connections_per_ip: $a
                    .connections
                    .max_connections_per_ip
                    .or($f.max_connections_per_ip),
                tls_handshake_timeout_ms: $a
                    .connections
                    .tls_handshake_timeout_ms
                    .or($f.tls_handshake_timeout_ms),
            },
            connections_max_idle_ms: $a
                .connections
                .connections_max_idle_ms
                .or($f.connections_max_idle_ms),
        })?;
        if let Some(v) = k.client_auth {
            $c.kafka_client_auth = v;
        }
        $c.kafka_sasl_plain = k.sasl_plain;
        $c.connections = k.connections;
        if let Some(v) = k.connections_max_idle_ms {
            $c.kafka_connections_max_idle_ms = v;
        }
        Ok(())
    }};
}
pub(crate) use set_kafka_listener;

/// The node's settings as `build` made them; bad options are printed and
/// are exit code 2.
pub fn settings<T>(built: Result<T, String>) -> Result<T, ExitCode> {
    built.map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })
}

/// What `--check` prints for a valid configuration of `kind` `id`.
pub fn say_valid(kind: &str, id: impl std::fmt::Display, cluster_id: &str, listen: SocketAddr) {
    println!("configuration of {kind} {id} is valid (cluster {cluster_id}, listen {listen})");
}

/// The HTTP endpoint at `addr`, bound before anything starts so that a
/// taken port stops the node at once with the reason; a failure is
/// logged as "cannot serve `what`".
pub async fn bind_endpoint(
    addr: Option<SocketAddr>,
    what: &str,
) -> Result<
    Option<(
        tokio::net::TcpListener,
        keel_controller::console::RenderMetrics,
    )>,
    ExitCode,
> {
    match addr {
        None => Ok(None),
        Some(addr) => match crate::logging::metrics_endpoint(addr).await {
            Ok(v) => Ok(Some(v)),
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "cannot serve {what}");
                Err(ExitCode::from(EXIT_LOCAL))
            }
        },
    }
}
