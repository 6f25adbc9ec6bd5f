//! Raft plumbing for Keel's controller quorum: the openraft type config, the
//! sled-backed log and state-machine stores (with snapshots), and the tonic
//! transport that carries openraft's messages between controllers.
//!
//! The replicated state is the [`keel_metadata::MetadataImage`]; each Raft
//! entry carries one [`keel_metadata::RecordBatch`].

#![warn(missing_docs)]

pub mod backup;
mod codec;
mod config;
pub mod dump;
mod error;
mod grant;
pub mod lease;
mod log_store;
mod member;
mod network;
mod open;
pub mod prevote;
mod service;
pub mod stall;
mod state_machine;
mod watchdog;

pub use codec::checksum;
pub use codec::{CodecError, STORAGE_FORMAT_VERSION};
pub use config::default_config;
/// The quorum's timing defaults and the lease they give.
pub mod timing {
    pub use crate::config::{
        lease_ms, ELECTION_TIMEOUT_MAX_MS, ELECTION_TIMEOUT_MIN_MS, HEARTBEAT_MS,
    };
}
pub use dump::{dump, dump_entries, DumpError, DumpedEntry};
pub use error::{EnvelopeRefusal, StorageOpenError};
pub use lease::LeaseClock;
pub use log_store::{index_key, stored_entry_bytes, HeldWrites, LogStore};
pub use member::{
    finish_joint_membership, in_joint_phase, membership_change_refusal, BadDirectoryId,
    DirectoryId, KeelNode,
};
pub use network::{IdentifyError, Network, PeerClient, PeerContacts};
pub use open::{open_storage, sled_config};
pub use service::RaftGrpcService;
pub use state_machine::{
    AppliedState, SnapshotBuilder, SnapshotFigures, SnapshotSource, SnapshotStats,
    StateMachineStore,
};
pub use watchdog::election_watchdog;

/// Runs `f`, which may take long, on this thread while the runtime's other
/// tasks go on without it (`block_in_place`: the worker's queue moves to
/// another thread first). On a two-core machine the runtime has two
/// workers, and a long computation holding one of them delayed the Raft
/// heartbeats that the leader's lease rests on. On a current-thread
/// runtime (some tests) `f` just runs.
pub fn off_the_workers<R>(f: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi_thread =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

use serde::{Deserialize, Serialize};

openraft::declare_raft_types!(
    /// openraft type config for Keel: entries carry metadata record batches,
    /// members are addressed by `host:port` and known by their data dir's
    /// directory id ([`KeelNode`]), snapshots travel as in-memory bytes.
    pub TypeConfig:
        D = keel_metadata::RecordBatch,
        R = ClientResponse,
        NodeId = u64,
        Node = KeelNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        Responder = openraft::impls::OneshotResponder<TypeConfig>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// Controller node id (stable for the life of a data dir).
pub type NodeId = u64;

/// A running Raft node of the controller quorum.
pub type KeelRaft = openraft::Raft<TypeConfig>;

/// What applying one entry returns to the writer. Empty on purpose: the
/// entry's log index (the records' offset) comes back in `client_write`'s
/// `log_id`, and the effect is read from the published image.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientResponse {}
