//! Disk faults on a running node through libfiu (Debian's `fiu-utils` and
//! `libfiu0`): a node started with libfiu's POSIX preload library
//! ([`SpecFaults::fiu`](crate::SpecFaults::fiu)) has its `pwrite`, `fsync`,
//! `fdatasync`, `open` ... calls fail with a chosen errno while a fault is
//! enabled, switched on and off at run time with `fiu-ctrl`. Real failing
//! system calls in the real binary; nothing in Keel knows.
//!
//! Only file calls are offered: `write`/`writev` also carry the node's
//! sockets, so failing them would be a network fault, not a disk one.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// Where Debian installs libfiu's preload libraries.
const PRELOAD_DIR: &str = "/usr/lib/fiu";

/// An errno a fault returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Errno {
    /// EIO (5): the device failed.
    Eio,
    /// ENOSPC (28): no space left.
    Enospc,
}

impl Errno {
    /// The errno's number.
    pub fn code(self) -> i32 {
        match self {
            Errno::Eio => 5,
            Errno::Enospc => 28,
        }
    }
}

/// A group of file system calls to fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Calls {
    /// `fsync` and `fdatasync`: nothing becomes durable.
    Sync,
    /// `pwrite` and `pwritev` (sled's log, a broker's history: every
    /// positioned write; never a socket's).
    Pwrite,
    /// `open`: no new file (snapshot blobs, history files).
    Open,
}

impl Calls {
    fn points(self) -> &'static [&'static str] {
        match self {
            Calls::Sync => &["posix/io/sync/fsync", "posix/io/sync/fdatasync"],
            Calls::Pwrite => &["posix/io/rw/pwrite", "posix/io/rw/pwritev"],
            Calls::Open => &["posix/io/oc/open"],
        }
    }
}

/// Environment for a process started with libfiu, remote-controlled
/// through FIFOs named `<ctrl_prefix>-<pid>.{in,out}`.
pub fn env(ctrl_prefix: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let run = Path::new(PRELOAD_DIR).join("fiu_run_preload.so");
    let posix = Path::new(PRELOAD_DIR).join("fiu_posix_preload.so");
    if !run.exists() || !posix.exists() {
        bail!(
            "libfiu is missing ({} not found): apt-get install -y fiu-utils libfiu0",
            posix.display()
        );
    }
    which("fiu-ctrl")?;
    Ok(vec![
        (
            "LD_PRELOAD".into(),
            format!("{} {}", run.display(), posix.display()),
        ),
        ("FIU_CTRL_FIFO".into(), ctrl_prefix.display().to_string()),
        ("FIU_ENABLE".into(), String::new()),
    ])
}

/// Where a cluster's libfiu FIFOs go: `<root>/fiu/ctrl-<pid>.{in,out}`.
pub fn ctrl_prefix(root: &Path) -> PathBuf {
    root.join("fiu").join("ctrl")
}

/// libfiu's environment for every node of a cluster (see
/// [`crate::SpecFaults::fiu`]), its FIFOs under [`ctrl_prefix`].
#[derive(Debug)]
pub struct NodeEnv;

impl keel_cluster::NodeEnv for NodeEnv {
    fn env(&self, root: &Path) -> anyhow::Result<Vec<(String, String)>> {
        let prefix = ctrl_prefix(root);
        if let Some(fifos) = prefix.parent() {
            std::fs::create_dir_all(fifos)
                .with_context(|| format!("create {}", fifos.display()))?;
        }
        env(&prefix)
    }
}

fn which(tool: &str) -> anyhow::Result<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(tool))
        .find(|p| p.exists())
        .with_context(|| format!("{tool} not found: apt-get install -y fiu-utils"))
}

/// Runs one `fiu-ctrl` command against `pid`.
fn ctrl(ctrl_prefix: &Path, pid: u32, command: &str) -> anyhow::Result<()> {
    let out = Command::new(which("fiu-ctrl")?)
        .arg("-f")
        .arg(ctrl_prefix)
        .arg("-c")
        .arg(command)
        .arg(pid.to_string())
        .output()
        .context("run fiu-ctrl")?;
    if !out.status.success() {
        bail!(
            "fiu-ctrl -c '{command}' {pid}: {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Makes every call of `calls` in process `pid` fail with `errno`.
pub fn enable(ctrl_prefix: &Path, pid: u32, calls: Calls, errno: Errno) -> anyhow::Result<()> {
    for point in calls.points() {
        ctrl(
            ctrl_prefix,
            pid,
            &format!("enable name={point},failnum=1,failinfo={}", errno.code()),
        )?;
    }
    Ok(())
}

/// Lets the calls of `calls` in process `pid` succeed again.
pub fn disable(ctrl_prefix: &Path, pid: u32, calls: Calls) -> anyhow::Result<()> {
    for point in calls.points() {
        ctrl(ctrl_prefix, pid, &format!("disable name={point}"))?;
    }
    Ok(())
}
