//! Admin subcommands: thin clients of `AdminService` that follow
//! NOT_CONTROLLER redirects and print tables or stable JSON.
//!
//! One module per command group; this one holds what they share: the
//! options every command takes, the `call!` macro, and small helpers.

use std::process::ExitCode;

use clap::Args;
use keel_metadata::{ApiError, TopicId};
use keel_proto::client::ControllerClient;
use keel_proto::convert::error_from_pb;
use keel_proto::pb;

use crate::output::Output;
use crate::tls::{TlsArgs, TlsKeys};

/// The `keel dev` cluster's controllers, the default bootstrap.
pub const DEFAULT_BOOTSTRAP: &str = "127.0.0.11:9093,127.0.0.12:9093,127.0.0.13:9093";

/// Options every admin command takes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Any controller addresses, comma separated.
    #[arg(long, env = "KEEL_BOOTSTRAP", default_value = DEFAULT_BOOTSTRAP, global = true)]
    pub bootstrap: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
    /// Mutual TLS: e.g. certs/user-admin.pem, its key and the cluster CA;
    /// none (and no `--allow-plaintext`) with the default bootstrap uses
    /// the running `keel dev` cluster's admin certificate.
    #[command(flatten)]
    pub tls: TlsArgs,
}

impl Common {
    /// The TLS options given; with none (and not `--allow-plaintext`)
    /// and the default bootstrap, the running `keel dev` cluster's admin
    /// certificate when there is one.
    fn tls(&self) -> TlsArgs {
        let given = self.tls.clone();
        let none_given =
            given.tls_cert.is_none() && given.tls_key.is_none() && given.tls_ca.is_none();
        if none_given && !given.allow_plaintext && self.bootstrap == DEFAULT_BOOTSTRAP {
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

    /// A client of the controllers named by `--bootstrap`, speaking as the
    /// TLS options say; on bad options, prints why and returns the exit
    /// code.
    pub fn client(&self) -> Result<ControllerClient, ExitCode> {
        let transport = self
            .tls()
            .transport(&TlsKeys::default(), None, None)
            .map_err(usage)?;
        Ok(ControllerClient::new(
            self.bootstrap
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
        )
        .with_transport(transport)
        .with_fail_fast(true))
    }
}

/// Runs a call; on transport failure prints and returns the exit code.
macro_rules! call {
    ($client:expr, $svc:ident, $method:ident, $req:expr) => {
        match $client
            .$svc(|mut c| {
                let req = $req.clone();
                async move { c.$method(req).await }
            })
            .await
        {
            Ok(r) => {
                if let Err(e) = ::keel_proto::convert::check(&r.error) {
                    return $crate::output::refused(&e);
                }
                r
            }
            Err(e) => return $crate::output::unreachable(&e),
        }
    };
}

mod acls;
mod cluster;
mod elect_leaders;
mod partitions;
mod quorum;
mod reassign;
mod topics;

pub use acls::{acls, AclsArgs};
pub use cluster::{cluster, ClusterArgs};
pub use elect_leaders::{elect, ElectArgs};
pub use partitions::{partitions, PartitionsArgs};
pub use quorum::{quorum, QuorumArgs};
pub use reassign::{reassign, ReassignArgs};
pub use topics::{topics, TopicsArgs};

fn topic_id_text(b: &[u8]) -> String {
    TopicId::from_bytes(b)
        .map(|t| t.to_string())
        .unwrap_or_default()
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
    eprintln!("error: {msg}");
    ExitCode::from(2)
}
