//! The cluster kit. `keel dev`, the end-to-end tests, `keel-lab bench` and
//! `keel-lab jepsen` all start, stop, kill, pause and restart real `keel
//! controller` and `keel broker` processes through it, on addresses they
//! choose, wait for the quorum and the brokers with it, and reach the
//! cluster through its typed admin helpers.
//!
//! It injects no fault: no mounts, no packet filters, no preloads. The
//! fault harness (`keel-testkit`) adds them through [`DiskMaker`] and
//! [`NodeEnv`], so the production `keel` binary that runs `keel dev` links
//! none of it.
//!
//! A scenario reads as a story:
//!
//! ```no_run
//! # async fn story(exe: std::path::PathBuf) -> anyhow::Result<()> {
//! use std::time::Duration;
//! use keel_cluster::{admin, Cluster, Spec};
//! let mut c = Cluster::start(Spec::new(exe, "demo").brokers(3))?;
//! c.wait_active(Duration::from_secs(60)).await?;
//! c.wait_all_brokers_active(Duration::from_secs(60)).await?;
//! let client = c.client(Duration::from_secs(5), Duration::from_secs(30));
//! admin::create_topic(&client, "orders", 6, 3).await?;
//! c.broker_mut(0).kill();
//! # Ok(()) }
//! ```

pub mod admin;
pub mod cluster;
pub mod probe;
pub mod process;

pub use cluster::{
    describe_node_at, describe_node_with, free_port, Addressing, Cluster, DataDisk, DiskMaker,
    KafkaPorts, Naming, Node, NodeEnv, Ports, Role, Root, Spec,
};
pub use process::{Launch, Process};
