//! Keel's pure metadata core.
//!
//! Ids, records, the replicated [`MetadataImage`] with its strict replay,
//! the partition and replica state machines, leader selectors, replica
//! placement and the decide functions of the active controller. No async,
//! no I/O: the clock and randomness come in as arguments.
//!
//! Purity is a rule the compiler's linter enforces, not a review habit:
//! `clippy.toml` next to this crate's manifest lists the clocks, OS
//! randomness, threads and file, network, environment and process calls
//! this crate must not use, and these lints turn any use into an error.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

pub mod acl;
pub mod authz;
pub mod control;
pub mod decide;
pub mod entries;
pub mod entry;
pub mod error;
pub mod heartbeat;
pub mod ids;
pub mod image;
pub mod limits;
pub mod placement;
pub mod planner;
pub mod records;
pub mod scram;
pub mod selectors;
pub mod state;
pub mod synthetic;
pub mod topic_config;
pub mod validation;

pub use control::{BrokerInfo, ControllerStamp, PartitionLeadership};
pub use decide::Decision;
pub use error::{ApiError, DecodeError, ErrorCode, ReplayError, ReplayErrorKind};
pub use ids::*;
pub use image::{
    BrokerRegistration, ConfigSource, MetadataImage, PartitionImage, TopicImage, ValidationError,
};
pub use records::{
    LeaderChange, MetadataRecord, PartitionChangeRecord, PartitionRecord, RecordBatch,
    RegisterBrokerRecord, TopicRecord,
};
pub use state::{PartitionState, ReplicaState, TransitionError};

/// Topic config: allow electing an out-of-sync replica when no ISR member is live.
pub const UNCLEAN_LEADER_ELECTION: &str = "unclean.leader.election.enable";
/// Topic config: minimum ISR size for acknowledged writes (carried for brokers).
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";
