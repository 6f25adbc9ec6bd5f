//! Why a node's Raft data dir cannot be opened.

use std::path::PathBuf;

/// A data dir that must not be used as is. The node stops with this error;
/// nothing on disk is truncated or reformatted to get past it.
#[derive(Debug, thiserror::Error)]
pub enum StorageOpenError {
    /// The dir was created for another cluster: starting would mix logs.
    #[error("data dir {} belongs to cluster '{found}', not '{expected}'", dir.display())]
    WrongCluster {
        /// The data dir that was opened.
        dir: PathBuf,
        /// Cluster id stored in the dir.
        found: String,
        /// Cluster id this node was started with.
        expected: String,
    },
    /// The dir holds another node's vote and log: reusing it would let one
    /// vote count twice.
    #[error("data dir {} belongs to node {found}, not node {expected}", dir.display())]
    WrongNode {
        /// The data dir that was opened.
        dir: PathBuf,
        /// Node id stored in the dir.
        found: u64,
        /// Node id this node was started with.
        expected: u64,
    },
    /// The dir was written by a build with another storage format.
    #[error(
        "data dir {} uses storage format version {found}; this build reads version {supported}",
        dir.display()
    )]
    UnsupportedFormat {
        /// The data dir that was opened.
        dir: PathBuf,
        /// Format version stored in the dir.
        found: u16,
        /// The format version this build reads.
        supported: u16,
    },
    /// The database or a record in it cannot be read back; the message
    /// names the dir and what failed.
    #[error("{0}")]
    Corrupt(String),
    /// The operating system refused (permissions, disk full, or another
    /// process holds the dir's lock).
    #[error("data dir {}: {source}", dir.display())]
    Io {
        /// The data dir that was opened.
        dir: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}
