//! A node's data dir on a small tmpfs of its own, so a test can fill its
//! disk: `mount -t tmpfs -o size=N`, unmounted when dropped. Needs root.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// One mounted tmpfs.
pub struct Tmpfs {
    mountpoint: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `bytes` at `dir` (created).
    pub fn mount(dir: &Path, bytes: u64) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={bytes}"))
            .arg("tmpfs")
            .arg(dir)
            .status()
            .context("run mount")?;
        if !st.success() {
            bail!(
                "mount -t tmpfs on {} failed ({st}); it needs root",
                dir.display()
            );
        }
        Ok(Self {
            mountpoint: dir.to_path_buf(),
        })
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }
}

impl keel_cluster::DataDisk for Tmpfs {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// Mounts a tmpfs of this many bytes at each node's disk dir (see
/// [`crate::SpecFaults::tmpfs`]); the data dir is `<dir>/data`.
#[derive(Debug)]
pub struct Maker(pub u64);

impl keel_cluster::DiskMaker for Maker {
    fn data_dir(&self, dir: &Path) -> PathBuf {
        dir.join("data")
    }

    fn mount(&self, dir: &Path) -> anyhow::Result<Box<dyn keel_cluster::DataDisk>> {
        Ok(Box::new(Tmpfs::mount(dir, self.0)?))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.mountpoint)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Something still holds it: detach it so nothing is left.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&self.mountpoint)
                .status();
        }
    }
}
