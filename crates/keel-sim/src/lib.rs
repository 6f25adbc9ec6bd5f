//! Parts for running Keel's quorum under a deterministic simulation, where
//! one seed decides what the disks, the network and the clocks do.
//!
//! Today: [`SimDisk`] and [`SimLogStore`], the Raft log store with the sled
//! store's contract (`keel_raft::LogStore`) and its crash semantics, held
//! in memory so a simulation decides when writes become durable and what a
//! crash leaves. openraft's storage conformance suite runs against it
//! (`tests/store_suite.rs`), so it cannot drift from the contract the real
//! store is held to.

#![warn(missing_docs)]

mod store;

pub use store::{Crash, FlushPolicy, SimDisk, SimLogStore, StaleHandle};
