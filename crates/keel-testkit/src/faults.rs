//! The faults a test puts on a kit cluster, as extension traits of the
//! fault-free kit (`keel-cluster`): data dirs on LazyFS or a small tmpfs,
//! nodes under libfiu ([`SpecFaults`]); power cuts, failing file calls and
//! a crashed LazyFS mounted again ([`ClusterFaults`]).
//!
//! ```no_run
//! # fn story(exe: std::path::PathBuf) -> anyhow::Result<()> {
//! use keel_testkit::prelude::*;
//! let mut c = Cluster::start(Spec::new(exe, "demo").lazyfs(true))?;
//! c.power_cut(0)?;
//! # Ok(()) }
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use keel_cluster::{Cluster, Spec};

use crate::fiu::{Calls, Errno};
use crate::lazyfs::LazyFs;

/// Fault options of a [`Spec`].
pub trait SpecFaults: Sized {
    /// Every node's data dir on a LazyFS mount of its own (see
    /// [`crate::lazyfs`]), so [`ClusterFaults::power_cut`] can drop what
    /// it has not fsynced. `false` leaves the spec's disk as it is.
    fn lazyfs(self, on: bool) -> Self;
    /// Every node's data dir on a tmpfs of `bytes` (to fill it; needs
    /// root).
    fn tmpfs(self, bytes: u64) -> Self;
    /// Every node started with libfiu's POSIX preload, so
    /// [`ClusterFaults::disk_fault`] can fail its file system calls.
    /// `false` leaves the spec's node environment as it is.
    fn fiu(self, on: bool) -> Self;
}

impl SpecFaults for Spec {
    fn lazyfs(self, on: bool) -> Self {
        if on {
            self.data_disk(Some(Arc::new(crate::lazyfs::Maker)))
        } else {
            self
        }
    }

    fn tmpfs(self, bytes: u64) -> Self {
        self.data_disk(Some(Arc::new(crate::tmpfs::Maker(bytes))))
    }

    fn fiu(self, on: bool) -> Self {
        if on {
            self.node_env(Some(Arc::new(crate::fiu::NodeEnv)))
        } else {
            self
        }
    }
}

/// Faults on the nodes of a running [`Cluster`].
pub trait ClusterFaults {
    /// Pulls node `i`'s plug: SIGKILL, then everything its disk has not
    /// fsynced is gone (LazyFS `clear-cache`). The node stays down; start
    /// it again with [`keel_cluster::Node::start`]. Needs
    /// [`SpecFaults::lazyfs`].
    fn power_cut(&mut self, i: usize) -> anyhow::Result<()>;
    /// Makes node `i`'s `calls` fail with `errno` until
    /// [`ClusterFaults::clear_disk_fault`] or its next start (needs
    /// [`SpecFaults::fiu`]).
    fn disk_fault(&self, i: usize, calls: Calls, errno: Errno) -> anyhow::Result<()>;
    /// Lets node `i`'s `calls` succeed again.
    fn clear_disk_fault(&self, i: usize, calls: Calls) -> anyhow::Result<()>;
    /// Mounts node `i`'s LazyFS again (see [`LazyFs::remount`]) after a
    /// crash or torn-write fault killed it; the node must be stopped.
    /// Start it again with [`keel_cluster::Node::start`]. Needs
    /// [`SpecFaults::lazyfs`].
    fn remount_disk(&mut self, i: usize) -> anyhow::Result<()>;
    /// Whether node `i`'s LazyFS exited by itself (see
    /// [`LazyFs::crashed`]).
    fn disk_crashed(&mut self, i: usize) -> bool;
}

impl ClusterFaults for Cluster {
    fn power_cut(&mut self, i: usize) -> anyhow::Result<()> {
        let n = &mut self.nodes[i];
        n.kill();
        match crate::lazyfs::of(n) {
            Some(d) => d.clear_cache(),
            None => bail!("{} has no LazyFS disk (SpecFaults::lazyfs)", n.name()),
        }
    }

    fn disk_fault(&self, i: usize, calls: Calls, errno: Errno) -> anyhow::Result<()> {
        let (prefix, pid) = fiu_target(self, i)?;
        crate::fiu::enable(&prefix, pid, calls, errno)
    }

    fn clear_disk_fault(&self, i: usize, calls: Calls) -> anyhow::Result<()> {
        let (prefix, pid) = fiu_target(self, i)?;
        crate::fiu::disable(&prefix, pid, calls)
    }

    fn remount_disk(&mut self, i: usize) -> anyhow::Result<()> {
        let n = &mut self.nodes[i];
        if n.running() {
            bail!(
                "{} is running: stop it before remounting its disk",
                n.name()
            );
        }
        let name = n.name().to_string();
        match crate::lazyfs::of_mut(n) {
            Some(d) => d
                .remount()
                .with_context(|| format!("remount the disk of {name}")),
            None => bail!("{name} has no LazyFS disk (SpecFaults::lazyfs)"),
        }
    }

    fn disk_crashed(&mut self, i: usize) -> bool {
        crate::lazyfs::of_mut(&mut self.nodes[i]).is_some_and(LazyFs::crashed)
    }
}

/// libfiu's FIFO prefix of the cluster and node `i`'s pid.
fn fiu_target(c: &Cluster, i: usize) -> anyhow::Result<(PathBuf, u32)> {
    let n = &c.nodes[i];
    if c.node_env().iter().all(|(k, _)| k != "FIU_CTRL_FIFO") {
        bail!("{} does not run under libfiu (SpecFaults::fiu)", n.name());
    }
    let pid = n
        .process
        .pid()
        .ok_or_else(|| anyhow!("{} is not running", n.name()))?;
    Ok((crate::fiu::ctrl_prefix(c.dir()), pid))
}
