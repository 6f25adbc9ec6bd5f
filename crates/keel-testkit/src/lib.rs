//! The one cluster kit. The end-to-end tests, `keel dev`, `keel bench` and
//! `keel jepsen` all start, stop, kill, pause and restart real `keel
//! controller` and `keel broker` processes through it, on addresses they
//! choose, wait for the quorum and the brokers with it, and reach the
//! cluster through its typed admin helpers.
//!
//! A scenario reads as a story:
//!
//! ```no_run
//! # async fn story(exe: std::path::PathBuf) -> anyhow::Result<()> {
//! use std::time::Duration;
//! use keel_testkit::{admin, Cluster, Spec};
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
pub mod fiu;
pub mod kafka;
pub mod lazyfs;
pub mod netfilter;
pub mod probe;
pub mod process;
pub mod tmpfs;

pub use cluster::{
    describe_node_at, describe_node_with, free_port, Addressing, Cluster, KafkaPorts, Naming, Node,
    Ports, Role, Root, Spec,
};
pub use process::{Launch, Process};
