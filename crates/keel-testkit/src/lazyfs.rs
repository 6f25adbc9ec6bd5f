//! A node's data dir on a LazyFS mount of its own, so a test can pull the
//! plug: LazyFS (a FUSE file system) keeps written data in its own cache
//! until it is fsynced, and drops everything unsynced on
//! `lazyfs::clear-cache`. A power cut of a node is SIGKILL plus that
//! command; the node then restarts on what a real disk would have kept.
//! LazyFS's own faults (`crash`, `torn-op`, `torn-seq`, sent with
//! [`LazyFs::command`] and naming files by [`LazyFs::inner_path`]) end
//! with LazyFS killing itself: [`LazyFs::crashed`] says so, and
//! [`crate::ClusterFaults::remount_disk`] mounts the same backing dir again.
//!
//! The LazyFS binary is found at `$KEEL_LAZYFS` or `target/lazyfs/lazyfs`
//! under the working directory (`scripts/build-lazyfs.sh` builds the
//! vendored copy there); mounting needs root and `/dev/fuse`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

/// How long a mount may take to appear, and an unmount to finish.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(20);

/// The longest fault command LazyFS reads in one piece, newline included
/// (its `MAX_READ_CHUNK`, raised from upstream's 100 by the vendored copy's
/// patch 2).
const MAX_COMMAND_BYTES: usize = 4096;

/// LazyFS's config, in the dir given to [`LazyFs::mount`].
const CONFIG_FILE: &str = "lazyfs.toml";

/// The repository this kit was built from.
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the LazyFS binary is, or why it is not. Without `$KEEL_LAZYFS`,
/// the vendored copy is built into `target/lazyfs` first when it is not
/// there (`scripts/build-lazyfs.sh`, once per process).
pub fn binary() -> anyhow::Result<PathBuf> {
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let path = match std::env::var_os("KEEL_LAZYFS") {
        Some(p) => PathBuf::from(p),
        None => {
            let path = repository().join("target/lazyfs/lazyfs");
            let _one_at_a_time = BUILD.lock().unwrap_or_else(|p| p.into_inner());
            if !path.is_file() {
                let script = repository().join("scripts/build-lazyfs.sh");
                let st = Command::new(&script)
                    .stdout(Stdio::null())
                    .status()
                    .with_context(|| format!("run {}", script.display()))?;
                if !st.success() {
                    bail!("{} failed ({st})", script.display());
                }
            }
            path
        }
    };
    if !path.is_file() {
        bail!(
            "LazyFS is not built at {} (build it with scripts/build-lazyfs.sh, \
             or set KEEL_LAZYFS to a built lazyfs binary)",
            path.display()
        );
    }
    if !Path::new("/dev/fuse").exists() {
        bail!("/dev/fuse is missing: LazyFS needs FUSE");
    }
    Ok(path)
}

/// Why LazyFS mounts cannot be made here, if they cannot: they need root,
/// `/dev/fuse`, `fusermount3` and a built LazyFS ([`binary`], which builds
/// the vendored copy when it is missing).
pub fn unavailable_reason() -> Option<String> {
    let uid = nix::unistd::geteuid().as_raw();
    if uid != 0 {
        return Some(format!(
            "power cuts need root (every node's data dir goes on a LazyFS FUSE mount); running as uid {uid}"
        ));
    }
    let fusermount = Command::new("fusermount3")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if fusermount.is_err() {
        return Some("fusermount3 not found (apt-get install -y fuse3)".into());
    }
    binary().err().map(|e| format!("{e:#}"))
}

/// One mounted LazyFS file system, unmounted when dropped.
pub struct LazyFs {
    mountpoint: PathBuf,
    /// The directory LazyFS stores files in: the paths its faults name
    /// (`file=`, `from_rgx=`) are the paths under here, not the mount's.
    backing: PathBuf,
    fifo: PathBuf,
    /// LazyFS's own output, appended across remounts.
    log: PathBuf,
    /// The LazyFS binary and the directory given to [`LazyFs::mount`], for
    /// [`LazyFs::remount`].
    exe: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
}

fn mounted(mountpoint: &Path) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return false;
    };
    let want = mountpoint.display().to_string();
    mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
}

impl LazyFs {
    /// Mounts a LazyFS at `<dir>/mnt` backed by `<dir>/backing` (both
    /// created), its fault FIFO at `<dir>/faults.fifo`, its own output in
    /// `<dir>/lazyfs.log`; waits (bounded) until the mount is there.
    pub fn mount(exe: &Path, dir: &Path) -> anyhow::Result<Self> {
        // Absolute: /proc/mounts and LazyFS's own fault paths name the
        // mount and backing dirs so.
        let dir = &std::path::absolute(dir)
            .with_context(|| format!("make {} absolute", dir.display()))?;
        let backing = dir.join("backing");
        let mountpoint = dir.join("mnt");
        std::fs::create_dir_all(&backing)?;
        std::fs::create_dir_all(&mountpoint)?;
        let fifo = dir.join("faults.fifo");
        if !fifo.exists() {
            nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
                .with_context(|| format!("mkfifo {}", fifo.display()))?;
        }
        let mut fs = Self {
            mountpoint,
            backing,
            fifo,
            log: dir.join("lazyfs.log"),
            exe: exe.to_path_buf(),
            dir: dir.to_path_buf(),
            child: None,
        };
        fs.start()?;
        Ok(fs)
    }

    /// Starts LazyFS on the mountpoint (not mounted) and waits until it is
    /// mounted.
    fn start(&mut self) -> anyhow::Result<()> {
        // LazyFS now and then aborts while it starts (before it mounts
        // anything); a fresh start then mounts. Bounded: three tries.
        let mut last = None;
        for _ in 0..3 {
            match self.start_once() {
                Ok(()) => return Ok(()),
                Err(e) => {
                    self.unmount();
                    last = Some(e);
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(last.unwrap_or_else(|| anyhow!("LazyFS did not mount")))
    }

    fn start_once(&mut self) -> anyhow::Result<()> {
        let config = self.dir.join(CONFIG_FILE);
        std::fs::write(
            &config,
            format!(
                "[faults]\nfifo_path=\"{}\"\n[cache]\napply_eviction=false\n\
                 [cache.simple]\ncustom_size=\"512mb\"\nblocks_per_page=1\n\
                 [filesystem]\nlog_all_operations=false\nlogfile=\"\"\n",
                self.fifo.display()
            ),
        )?;
        // Appended: a remount after a crash fault keeps what LazyFS said
        // when it crashed.
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        writeln!(log, "=== mount {} ===", self.mountpoint.display())?;
        let lib_dir = self.exe.parent().unwrap_or(Path::new("."));
        // Relative, from LazyFS's working dir: LazyFS drops a config path
        // that contains "-o" anywhere, case-insensitively (it takes it for
        // a FUSE option), and then aborts on its missing default config;
        // a temp dir named /tmp/keel-Ox... did just that.
        let child = Command::new(&self.exe)
            .current_dir(&self.dir)
            .arg(&self.mountpoint)
            .arg("--config-path")
            .arg(CONFIG_FILE)
            .args(["-o", "allow_other", "-o", "modules=subdir", "-o"])
            .arg(format!("subdir={}", self.backing.display()))
            .arg("-f")
            .env("LD_LIBRARY_PATH", lib_dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {}", self.exe.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        while !mounted(&self.mountpoint) {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    self.child = None;
                    bail!(
                        "LazyFS exited ({st}) before mounting {}; its output ends:\n{}",
                        self.mountpoint.display(),
                        self.log_tail(15)
                    );
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "LazyFS did not mount {} within {MOUNT_TIMEOUT:?}",
                    self.mountpoint.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Where the file system is mounted (the node's data dir goes inside).
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The path LazyFS sees for `path` on the mount (its faults name files
    /// by these paths); `None` for a path outside the mount.
    pub fn inner_path(&self, path: &Path) -> Option<PathBuf> {
        let path = std::path::absolute(path).ok()?;
        let rel = path.strip_prefix(&self.mountpoint).ok()?;
        Some(self.backing.join(rel))
    }

    /// LazyFS's process id, while it runs: SIGSTOP it and every call on
    /// the mount waits (a disk that hangs) until SIGCONT.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether LazyFS has exited by itself: a `crash`, `torn-op` or
    /// `torn-seq` fault fired (or it failed). The mount is then dead
    /// (every access fails) until [`crate::ClusterFaults::remount_disk`].
    pub fn crashed(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// The last `n` lines LazyFS wrote (across remounts).
    pub fn log_tail(&self, n: usize) -> String {
        crate::process::tail(&self.log, n)
    }

    /// Sends one fault command (`lazyfs::clear-cache`, `lazyfs::checkpoint`,
    /// `lazyfs::torn-op::...`, `lazyfs::crash::...`).
    pub fn command(&self, cmd: &str) -> anyhow::Result<()> {
        // LazyFS takes each read of its FIFO as one command: a longer one
        // would be cut in two (vendored PATCHES.md, patch 2).
        if cmd.len() + 1 > MAX_COMMAND_BYTES {
            bail!(
                "LazyFS command of {} bytes (at most {}): {cmd}",
                cmd.len() + 1,
                MAX_COMMAND_BYTES
            );
        }
        // LazyFS holds the FIFO open for reading while it runs, so opening
        // it for writing does not block; refuse to wait if it is gone.
        if self.child.is_none() || !mounted(&self.mountpoint) {
            bail!("LazyFS at {} is not running", self.mountpoint.display());
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags_nonblock()
            .open(&self.fifo)
            .with_context(|| format!("open {}", self.fifo.display()))?;
        f.write_all(format!("{cmd}\n").as_bytes())
            .map_err(|e| anyhow!("write to {}: {e}", self.fifo.display()))
    }

    /// Drops every write not yet fsynced: what a power cut loses.
    pub fn clear_cache(&self) -> anyhow::Result<()> {
        self.command("lazyfs::clear-cache")?;
        // The command is applied by LazyFS's fault thread; give it a moment
        // before anything reads the file system again.
        std::thread::sleep(Duration::from_millis(200));
        Ok(())
    }

    /// Unmounts and mounts again on the same backing dir: what a node's
    /// disk needs after LazyFS crashed itself (a `crash`, `torn-op` or
    /// `torn-seq` fault), and a way to drop faults armed but not fired.
    /// Unsynced data in the cache is lost, as in a power cut. Stop the
    /// node on it first: a process with files open keeps the old mount
    /// busy.
    pub fn remount(&mut self) -> anyhow::Result<()> {
        self.unmount();
        self.start()
    }

    fn unmount(&mut self) {
        if mounted(&self.mountpoint) {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.mountpoint)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        if let Some(mut c) = self.child.take() {
            let deadline = Instant::now() + MOUNT_TIMEOUT;
            loop {
                match c.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        if mounted(&self.mountpoint) {
            // A busy mount: detach it lazily so nothing is left behind.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&self.mountpoint)
                .status();
        }
    }
}

impl keel_cluster::DataDisk for LazyFs {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// Mounts a LazyFS under each node's disk dir (see
/// [`crate::SpecFaults::lazyfs`]); the data dir is `<dir>/mnt/data`.
#[derive(Debug)]
pub struct Maker;

impl keel_cluster::DiskMaker for Maker {
    fn data_dir(&self, dir: &Path) -> PathBuf {
        dir.join("mnt").join("data")
    }

    fn mount(&self, dir: &Path) -> anyhow::Result<Box<dyn keel_cluster::DataDisk>> {
        Ok(Box::new(LazyFs::mount(&binary()?, dir)?))
    }
}

/// The LazyFS node `n`'s data dir is on, if it is on one.
pub fn of(n: &keel_cluster::Node) -> Option<&LazyFs> {
    n.disk.as_ref()?.as_any().downcast_ref()
}

/// [`of`], mutable.
pub fn of_mut(n: &mut keel_cluster::Node) -> Option<&mut LazyFs> {
    n.disk.as_mut()?.as_any_mut().downcast_mut()
}

impl Drop for LazyFs {
    fn drop(&mut self) {
        self.unmount();
    }
}

/// Non-blocking open for the FIFO (so a dead reader cannot hang a test).
trait NonBlock {
    fn custom_flags_nonblock(&mut self) -> &mut Self;
}

impl NonBlock for std::fs::OpenOptions {
    fn custom_flags_nonblock(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(nix::libc::O_NONBLOCK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs root, /dev/fuse and LazyFS (built on first use).
    #[test]
    fn a_disk_whose_path_holds_dash_o_mounts_with_its_own_config() {
        let exe = binary().expect("LazyFS (root, /dev/fuse, scripts/build-lazyfs.sh)");
        let dir = tempfile::Builder::new()
            .prefix("keel-Ox-o-")
            .tempdir()
            .unwrap();
        let mut fs = LazyFs::mount(&exe, dir.path()).unwrap();
        assert!(!fs.crashed());
        // Its FIFO is the one our config names: a power cut takes the
        // unsynced file.
        let f = fs.mountpoint().join("unsynced");
        std::fs::write(&f, b"lost").unwrap();
        fs.clear_cache().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read(&f).map(|b| !b.is_empty()).unwrap_or(false) {
            assert!(Instant::now() < deadline, "clear-cache had no effect");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Needs root, /dev/fuse and LazyFS (built on first use).
    #[test]
    fn a_disk_that_crashed_at_an_fsync_mounts_again_with_only_what_was_synced() {
        let exe = binary().expect("LazyFS (root, /dev/fuse, scripts/build-lazyfs.sh)");
        let dir = tempfile::tempdir().unwrap();
        let mut fs = LazyFs::mount(&exe, dir.path()).unwrap();
        // Deep enough that the fault command runs past upstream's 100-byte
        // reads.
        let deep = fs
            .mountpoint()
            .join("a-directory-with-a-long-name/and-another-one-below-it/raft");
        std::fs::create_dir_all(&deep).unwrap();
        let synced = deep.join("synced");
        let log = deep.join("db");
        let mut f = std::fs::File::create(&synced).unwrap();
        f.write_all(b"kept").unwrap();
        f.sync_all().unwrap();
        drop(f);
        let mut f = std::fs::File::create(&log).unwrap();
        f.write_all(b"never synced").unwrap();

        // LazyFS names files by their backing path.
        let inner = fs.inner_path(&log).unwrap();
        assert_eq!(
            inner,
            dir.path()
                .join("backing/a-directory-with-a-long-name/and-another-one-below-it/raft/db")
        );
        let cmd = format!(
            "lazyfs::crash::timing=before::op=fsync::from_rgx={}$",
            inner.display()
        );
        assert!(cmd.len() > 100, "{cmd}");
        fs.command(&cmd).unwrap();
        // Only that file: another one's fsync goes through.
        let mut other = std::fs::File::create(deep.join("conf")).unwrap();
        other.write_all(b"x").unwrap();
        std::thread::sleep(Duration::from_millis(300));
        other.sync_all().unwrap();
        assert!(!fs.crashed());
        assert!(!fs.log_tail(100).contains("command unknown"));
        assert!(fs.command(&"x".repeat(MAX_COMMAND_BYTES)).is_err());
        assert!(f.sync_all().is_err(), "the fsync crashes LazyFS");
        drop(f);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !fs.crashed() {
            assert!(Instant::now() < deadline, "LazyFS did not crash");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(fs.log_tail(100).contains("Triggered fault condition"));

        fs.remount().unwrap();
        assert!(!fs.crashed());
        assert_eq!(std::fs::read(&synced).unwrap(), b"kept");
        let lost = std::fs::read(&log).unwrap_or_default();
        assert!(lost.is_empty(), "{lost:?}");
        // The new LazyFS takes commands, and its log follows the old one's.
        fs.clear_cache().unwrap();
        assert_eq!(fs.log_tail(1000).matches("=== mount").count(), 2);
    }
}
