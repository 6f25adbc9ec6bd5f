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

/// Why a node refused a Raft message before decoding it. Sent back as the
/// envelope's `error` (this text) and `refusal` (the code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeRefusal {
    /// The sender belongs to another cluster.
    #[error("this node belongs to cluster '{ours}', not '{theirs}'")]
    WrongCluster {
        /// This node's cluster id.
        ours: String,
        /// The sender's.
        theirs: String,
    },
    /// The request was meant for another node, or came from this one.
    #[error("this is node {me}; the request from node {from} was meant for node {to}")]
    WrongNode {
        /// This node.
        me: u64,
        /// The sender.
        from: u64,
        /// The node the sender meant.
        to: u64,
    },
    /// The payload does not decode.
    #[error("undecodable request from node {from}: {reason}")]
    Undecodable {
        /// The sender.
        from: u64,
        /// What the decoder said.
        reason: String,
    },
    /// Node `node`'s data dir is not the one the membership records for it
    /// (wiped, restored from an old backup, or copied from another node):
    /// it neither votes nor counts toward a quorum until re-admitted.
    #[error(
        "node {node}'s data dir has directory id {shown}, but node {by}'s membership records \
         {recorded} for it: the dir was wiped, restored from a backup or copied from another \
         node, and its votes and acknowledgements are not the ones the quorum counted. Node \
         {node} does not vote or count toward a quorum until an operator re-admits its new dir: \
         keel quorum add-voter --node-id {node} --address {address} --directory-id {shown}",
        shown = if actual.is_empty() { "(none sent)" } else { actual.as_str() }
    )]
    DirectoryMismatch {
        /// The node whose dir does not match.
        node: u64,
        /// Its address, for the remedy.
        address: String,
        /// The directory id its dir has ("" when it sent none).
        actual: String,
        /// The directory id the membership records for it.
        recorded: String,
        /// The node whose membership records it: the sender of a request
        /// that expects it, or the receiver that checked the sender.
        by: u64,
    },
}

impl EnvelopeRefusal {
    /// The wire code of this refusal.
    pub fn code(&self) -> keel_proto::pb::Refusal {
        use keel_proto::pb::Refusal;
        match self {
            EnvelopeRefusal::WrongCluster { .. } => Refusal::WrongCluster,
            EnvelopeRefusal::WrongNode { .. } => Refusal::WrongNode,
            EnvelopeRefusal::Undecodable { .. } => Refusal::Undecodable,
            EnvelopeRefusal::DirectoryMismatch { .. } => Refusal::DirectoryMismatch,
        }
    }
}
