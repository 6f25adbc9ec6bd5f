//! Admin subcommands: thin clients of `AdminService` that follow
//! NOT_CONTROLLER redirects and print tables or stable JSON.
//!
//! One module per command group; this one holds what they share: the
//! options every command takes, the `call!` macro, and small helpers.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use keel_metadata::{ApiError, TopicId};
use keel_proto::client::ControllerClient;
use keel_proto::convert::error_from_pb;
use keel_proto::pb;

use crate::output::Output;
use crate::tls::{TlsArgs, TlsKeys};

/// The `keel dev` cluster's controllers, the default bootstrap.
pub const DEFAULT_BOOTSTRAP: &str = "127.0.0.11:9093,127.0.0.12:9093,127.0.0.13:9093";

/// How long a command tries to reach the active controller when no
/// `--timeout` is given: an address nobody answers at fails within it.
pub const DEFAULT_REACH: Duration = Duration::from_secs(5);

/// Options every admin command takes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Any controller addresses (HOST:PORT), comma separated
    /// (`--bootstrap-server` as Kafka's tools spell it).
    #[arg(
        long,
        short = 'b',
        visible_alias = "bootstrap-server",
        env = "KEEL_BOOTSTRAP",
        default_value = DEFAULT_BOOTSTRAP,
        global = true
    )]
    pub bootstrap: String,
    /// Output format: `table` for people, `json` for scripts (errors too:
    /// one `{"error": {...}}` object on stdout).
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
    /// Give up after this long (e.g. 5s, 500ms, 2m): reaching the active
    /// controller (default 5s; an address nobody answers at, a name that
    /// does not resolve or a wrong port fails within it, with the OS's
    /// reason), and for commands that wait (`topics delete --wait`,
    /// `reassign start --wait`, `quorum snapshot`, `quorum add-voter`,
    /// `health`) the wait itself (default: the command's own, in its help).
    #[arg(long, value_parser = parse_duration, global = true)]
    pub timeout: Option<Duration>,
    /// Mutual TLS: e.g. certs/user-admin.pem, its key and the cluster CA;
    /// none (and no `--allow-plaintext`) against a running `keel dev`
    /// cluster's addresses uses its admin certificate.
    #[command(flatten)]
    pub tls: TlsArgs,
}

impl Common {
    /// `--timeout`, else `default`.
    pub fn timeout_or(&self, default: Duration) -> Duration {
        self.timeout.unwrap_or(default)
    }

    /// The TLS options given; with none (and not `--allow-plaintext`)
    /// against the dev cluster's addresses, the running `keel dev`
    /// cluster's admin certificate when there is one.
    fn tls(&self) -> TlsArgs {
        let given = self.tls.clone();
        let none_given =
            given.tls_cert.is_none() && given.tls_key.is_none() && given.tls_ca.is_none();
        if none_given && !given.allow_plaintext && self.names_the_dev_cluster() {
            // The dev cluster's admin certificate, when `keel dev` made one.
            let dir = crate::dev::certs_dir();
            let files = [
                dir.join("user-admin.pem"),
                dir.join("user-admin-key.pem"),
                dir.join("ca.pem"),
            ];
            if files.iter().all(|f| f.is_file()) {
                let [cert, key, ca] = files;
                return TlsArgs {
                    tls_cert: Some(cert),
                    tls_key: Some(key),
                    tls_ca: Some(ca),
                    allow_plaintext: false,
                };
            }
        }
        given
    }

    /// Whether `--bootstrap` names only the dev cluster's nodes: the
    /// default, or addresses the running `keel dev` noted as its own
    /// (any of them, in any order: `-b 127.0.0.12:9093` too).
    fn names_the_dev_cluster(&self) -> bool {
        if self.bootstrap == DEFAULT_BOOTSTRAP {
            return true;
        }
        let dev = crate::dev::noted_addresses();
        match bootstrap_addresses(&self.bootstrap) {
            Ok(given) => !dev.is_empty() && given.iter().all(|a| dev.contains(a)),
            Err(_) => false,
        }
    }

    /// A client of the controllers named by `--bootstrap`, speaking as the
    /// TLS options say; on bad options, prints why and returns the exit
    /// code.
    pub fn client(&self) -> Result<ControllerClient, ExitCode> {
        let addresses = bootstrap_addresses(&self.bootstrap).map_err(usage)?;
        self.client_of(addresses)
    }

    /// The transport the TLS options say; on bad options, prints why and
    /// returns the exit code. Errors print as `--output` says from here on.
    pub fn transport(&self) -> Result<keel_tls::Transport, ExitCode> {
        crate::output::set_mode(self.output);
        self.tls()
            .transport(&TlsKeys::default(), None, None)
            .map_err(usage)
    }

    /// A client of exactly `addresses`, speaking as the TLS options say.
    /// With no credentials and no `--allow-plaintext`, a listener that
    /// wants TLS is found out before anything is sent, and said so.
    pub fn client_of(&self, addresses: Vec<String>) -> Result<ControllerClient, ExitCode> {
        let transport = self.transport()?;
        if matches!(transport, keel_tls::Transport::Plaintext) && !self.tls.allow_plaintext {
            let wait = self.timeout_or(DEFAULT_REACH).min(TLS_PROBE);
            if let Some(a) = addresses.iter().find(|a| crate::tls::speaks_tls(a, wait)) {
                return Err(crate::output::tls_required(a));
            }
        }
        let reach = self.timeout_or(DEFAULT_REACH);
        Ok(ControllerClient::new(addresses)
            .with_transport(transport)
            .with_timeouts(self.timeout.unwrap_or(REQUEST_TIMEOUT), reach)
            .with_fail_fast(true)
            .with_locate(true))
    }
}

/// The longest the TLS check of one address waits for its answer.
const TLS_PROBE: Duration = Duration::from_secs(1);

/// Each attempt's own bound without a `--timeout` (a big decision may take
/// seconds to commit); a `--timeout` bounds each attempt too.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The `--bootstrap` list, each entry checked to be HOST:PORT (a missing
/// port is named at once, not found out by a connection attempt).
fn bootstrap_addresses(list: &str) -> Result<Vec<String>, String> {
    let addresses: Vec<String> = list
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if addresses.is_empty() {
        return Err("--bootstrap names no address; give HOST:PORT of any controller".into());
    }
    for a in &addresses {
        match a.rsplit_once(':') {
            None => {
                return Err(format!(
                    "--bootstrap {a:?} has no port; write HOST:PORT, e.g. {a}:9093"
                ))
            }
            Some((host, _))
                if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) =>
            {
                return Err(format!(
                    "--bootstrap {a:?}: an IPv6 address goes in brackets, e.g. [::1]:9093"
                ))
            }
            Some((host, port)) => match port.parse::<u16>() {
                Ok(p) if p != 0 && !host.is_empty() => {}
                _ => {
                    return Err(format!(
                        "--bootstrap {a:?} is not HOST:PORT (a port is 1-65535; controllers listen on 9093 by default)"
                    ))
                }
            },
        }
    }
    Ok(addresses)
}

/// A topic named positionally or with `--topic` / `-t`, as Kafka's tools
/// spell it; either works, not both.
#[derive(Args, Debug, Clone)]
pub struct TopicArg {
    /// The topic (or `--topic`).
    #[arg(
        value_name = "TOPIC",
        required_unless_present = "topic",
        conflicts_with = "topic"
    )]
    topic_pos: Option<String>,
    /// The topic (the same as the positional TOPIC).
    #[arg(long, short = 't', value_name = "TOPIC")]
    topic: Option<String>,
}

impl TopicArg {
    /// The topic named (clap made sure there is one).
    pub fn name(&self) -> String {
        self.topic_pos
            .clone()
            .or_else(|| self.topic.clone())
            .unwrap_or_default()
    }
}

/// A timeout with its unit (`500ms`, `30s`, `2m`): one spelling for every
/// `--timeout`; the older `--timeout-s` / `--timeout-ms` stay as hidden
/// aliases.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 500ms, 30s or 2m"))?;
    let ms = match unit.trim() {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "" => return Err(format!("{s:?} has no unit; write e.g. {n}s or {n}ms")),
        _ => return Err(format!("{s:?} is not a duration like 500ms, 30s or 2m")),
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("{s:?} is too long"))
}

/// Runs a call; a transport failure or a refusal of the whole call is
/// printed and is `Err` with the exit code.
macro_rules! try_call {
    ($client:expr, $svc:ident, $method:ident, $req:expr) => {
        match $client
            .$svc(|mut c| {
                let req = $req.clone();
                async move { c.$method(req).await }
            })
            .await
        {
            Ok(r) => match ::keel_proto::convert::check(&r.error) {
                Ok(()) => Ok(r),
                Err(e) => Err($crate::output::refused(&e)),
            },
            Err(e) => Err($crate::output::unreachable(&e)),
        }
    };
}

/// Runs a call; on transport failure prints and returns the exit code.
macro_rules! call {
    ($client:expr, $svc:ident, $method:ident, $req:expr) => {
        match try_call!($client, $svc, $method, $req) {
            Ok(r) => r,
            Err(code) => return code,
        }
    };
}

mod acls;
pub(crate) mod cluster;
mod configs;
mod elect_leaders;
mod health;
mod partitions;
mod quorum;
mod reassign;
mod topics;
mod users;

pub use acls::{acls, AclsArgs};
pub use cluster::{cluster, ClusterArgs};
pub use configs::{configs, ConfigsArgs};
pub use elect_leaders::{elect, ElectArgs};
pub use health::{health, HealthArgs};
pub use partitions::{partitions, PartitionsArgs};
pub use quorum::{quorum, QuorumArgs};
pub use reassign::{reassign, ReassignArgs};
pub use topics::{topics, TopicsArgs};
pub use users::{users, UsersArgs};

fn topic_id_text(b: &[u8]) -> String {
    TopicId::from_bytes(b)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// Broker ids as the tables show them: `1,2,3`.
fn id_list(v: &[u32]) -> String {
    v.iter()
        .map(|b| b.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn item_error(e: &Option<pb::Error>) -> Option<ApiError> {
    e.as_ref().filter(|e| e.code != 0).map(error_from_pb)
}

fn parse_kv(v: &[String]) -> Result<Vec<(String, String)>, String> {
    v.iter()
        .map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("config {s:?} is not KEY=VALUE"))
        })
        .collect()
}

fn usage(msg: impl std::fmt::Display) -> ExitCode {
    crate::output::usage(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bootstrap_entry_without_a_port_is_named() {
        assert_eq!(
            bootstrap_addresses("a:9093, b:9093").unwrap(),
            vec!["a:9093", "b:9093"]
        );
        assert_eq!(
            bootstrap_addresses("[::1]:9093").unwrap(),
            vec!["[::1]:9093"]
        );
        let e = bootstrap_addresses("a:9093,127.0.0.11").unwrap_err();
        assert!(e.contains("\"127.0.0.11\" has no port"), "{e}");
        assert!(e.contains("127.0.0.11:9093"), "{e}");
        for bad in ["h:x", "h:0", ":9093", "h:70000", "::1"] {
            assert!(bootstrap_addresses(bad).is_err(), "{bad}");
        }
        assert!(bootstrap_addresses(" , ").is_err());
    }

    #[test]
    fn durations_need_a_unit() {
        use std::time::Duration;
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        for bad in ["30", "s", "1h", "-1s", "1.5s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
