//! Why a process's TLS material cannot be used: one error for loading
//! ([`crate::context`]) and for checking ([`crate::validity`]).

use std::path::PathBuf;

use crate::identity::{Identity, IdentityError};

/// Why TLS material cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {why}")]
    File { path: PathBuf, why: String },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path}: {source}")]
    Identity {
        path: PathBuf,
        source: IdentityError,
    },
    #[error("{path} names {found}, a member of cluster {found_cluster:?}, not of {cluster:?}")]
    OtherCluster {
        path: PathBuf,
        found: Identity,
        found_cluster: String,
        cluster: String,
    },
    /// The certificate is not signed by (a chain to) the CA file.
    #[error("{path} does not chain to the CA in {ca}: {why}")]
    Untrusted {
        path: PathBuf,
        ca: PathBuf,
        why: String,
    },
    /// The certificate's validity ended.
    #[error("{path} expired on {not_after}")]
    Expired { path: PathBuf, not_after: String },
    /// The certificate's validity has not begun.
    #[error("{path} is not valid yet: its validity starts on {not_before}")]
    NotYetValid { path: PathBuf, not_before: String },
    /// The key file holds another certificate's key.
    #[error("{key} is not the private key of {cert}")]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("the TLS configuration is not usable: {0}")]
    Config(String),
}
