//! Errors that stop the broker (or refuse to start it). Expected refusals
//! from the controller are retried by the loops and never surface here.

use std::path::PathBuf;

/// Why the broker cannot start or keep running.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BrokerError {
    #[error("invalid broker configuration: {0}")]
    Config(String),
    /// Another live process owns this data dir.
    #[error("data dir {0} is locked by another live broker process")]
    Locked(PathBuf),
    /// The data dir belongs to another broker id or cluster.
    #[error("data dir {dir} is foreign: {reason}")]
    ForeignDataDir { dir: PathBuf, reason: String },
    #[error("data dir {dir}: stored state is corrupt: {reason}")]
    CorruptDataDir { dir: PathBuf, reason: String },
    #[error("i/o on {path}: {message}")]
    Io { path: PathBuf, message: String },
    /// The quorum belongs to another cluster: retrying cannot help.
    #[error("controller refused registration: inconsistent cluster id ({0})")]
    InconsistentClusterId(String),
    #[error("cannot listen on {addr}: {message}")]
    Listen { addr: String, message: String },
}

impl BrokerError {
    pub(crate) fn io(path: impl Into<PathBuf>, e: std::io::Error) -> Self {
        BrokerError::Io {
            path: path.into(),
            message: e.to_string(),
        }
    }
}
