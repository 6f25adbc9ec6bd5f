//! A Keel controller node.
//!
//! Every node runs Raft (openraft over sled) and replays committed record
//! batches into its `MetadataImage`. The Raft leader is the active
//! controller: while it holds a quorum lease it runs one event loop that
//! decides every change with the pure core and proposes it to the log.

pub mod active;
pub mod admin;
pub mod authz;
pub mod broker_api;
pub mod budget;
pub mod channel;
pub mod command;
pub mod config;
pub mod console;
pub mod disk;
pub mod events;
mod journal;
mod kafka_listener;
mod leadership;
pub mod metric_names;
pub mod node;
pub mod process_metrics;
pub mod quorum;
pub mod shared;
mod tasks;
pub mod throttle;

pub use config::{parse_voters, ControllerConfig};
pub use node::ControllerNode;
