//! The fault harness around the cluster kit. The kit itself (real `keel
//! controller` and `keel broker` processes, started, killed, paused and
//! restarted; typed admin helpers) is `keel-cluster`, re-exported here at
//! the same paths; this crate adds what breaks a cluster on purpose: LazyFS
//! disks that lose unsynced writes, tmpfs disks to fill, libfiu's failing
//! file calls, iptables cuts between loopback addresses, and a Kafka
//! connection for the lab's clients. The faults on a spec or a cluster are
//! extension traits ([`SpecFaults`], [`ClusterFaults`]); `use
//! keel_testkit::prelude::*` brings them with the kit's types.
//!
//! A scenario reads as a story:
//!
//! ```no_run
//! # async fn story(exe: std::path::PathBuf) -> anyhow::Result<()> {
//! use std::time::Duration;
//! use keel_testkit::{admin, Cluster, ClusterFaults, Spec, SpecFaults};
//! let mut c = Cluster::start(Spec::new(exe, "demo").brokers(3).lazyfs(true))?;
//! c.wait_active(Duration::from_secs(60)).await?;
//! c.wait_all_brokers_active(Duration::from_secs(60)).await?;
//! let client = c.client(Duration::from_secs(5), Duration::from_secs(30));
//! admin::create_topic(&client, "orders", 6, 3).await?;
//! c.power_cut(0)?;
//! # Ok(()) }
//! ```

pub use keel_cluster::{admin, cluster, probe, process};

pub mod faults;
pub mod fiu;
pub mod kafka;
pub mod lazyfs;
pub mod netfilter;
pub mod tmpfs;

pub use faults::{ClusterFaults, SpecFaults};
pub use keel_cluster::cluster::{
    describe_node_at, describe_node_with, free_port, Addressing, Cluster, DataDisk, DiskMaker,
    KafkaPorts, Naming, Node, NodeEnv, Ports, Role, Root, Spec,
};
pub use keel_cluster::process::{Launch, Process};
pub use lazyfs::of as node_lazyfs;

/// The kit's types with the fault traits: `use keel_testkit::prelude::*`.
pub mod prelude {
    pub use crate::faults::{ClusterFaults, SpecFaults};
    pub use crate::{Addressing, Cluster, Node, Role, Root, Spec};
}
