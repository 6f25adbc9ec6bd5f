//! A node's data dir on a LazyFS mount of its own, so a test can pull the
//! plug: LazyFS (a FUSE file system) keeps written data in its own cache
//! until it is fsynced, and drops everything unsynced on
//! `lazyfs::clear-cache`. A power cut of a node is SIGKILL plus that
//! command; the node then restarts on what a real disk would have kept.
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

/// One mounted LazyFS file system, unmounted when dropped.
pub struct LazyFs {
    mountpoint: PathBuf,
    fifo: PathBuf,
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
        // LazyFS now and then aborts while it starts (before it mounts
        // anything); a fresh start then mounts. Bounded: three tries.
        let mut last = None;
        for _ in 0..3 {
            match Self::mount_once(exe, dir) {
                Ok(fs) => return Ok(fs),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(last.unwrap_or_else(|| anyhow!("LazyFS did not mount")))
    }

    fn mount_once(exe: &Path, dir: &Path) -> anyhow::Result<Self> {
        let backing = dir.join("backing");
        let mountpoint = dir.join("mnt");
        std::fs::create_dir_all(&backing)?;
        std::fs::create_dir_all(&mountpoint)?;
        let fifo = dir.join("faults.fifo");
        if !fifo.exists() {
            nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
                .with_context(|| format!("mkfifo {}", fifo.display()))?;
        }
        let config = dir.join("lazyfs.toml");
        std::fs::write(
            &config,
            format!(
                "[faults]\nfifo_path=\"{}\"\n[cache]\napply_eviction=false\n\
                 [cache.simple]\ncustom_size=\"512mb\"\nblocks_per_page=1\n\
                 [filesystem]\nlog_all_operations=false\nlogfile=\"\"\n",
                fifo.display()
            ),
        )?;
        let log = std::fs::File::create(dir.join("lazyfs.log"))?;
        let lib_dir = exe.parent().unwrap_or(Path::new("."));
        let child = Command::new(exe)
            .arg(&mountpoint)
            .arg("--config-path")
            .arg(&config)
            .args(["-o", "allow_other", "-o", "modules=subdir", "-o"])
            .arg(format!("subdir={}", backing.display()))
            .arg("-f")
            .env("LD_LIBRARY_PATH", lib_dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {}", exe.display()))?;
        let mut fs = Self {
            mountpoint,
            fifo,
            child: Some(child),
        };
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        while !mounted(&fs.mountpoint) {
            if let Some(c) = fs.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    fs.child = None;
                    let log = std::fs::read_to_string(dir.join("lazyfs.log")).unwrap_or_default();
                    let tail: Vec<&str> = log.lines().rev().take(15).collect();
                    bail!(
                        "LazyFS exited ({st}) before mounting {}; its output ends:\n{}",
                        fs.mountpoint.display(),
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    );
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "LazyFS did not mount {} within {MOUNT_TIMEOUT:?}",
                    fs.mountpoint.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(fs)
    }

    /// Where the file system is mounted (the node's data dir goes inside).
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Sends one fault command (`lazyfs::clear-cache`, `lazyfs::checkpoint`,
    /// `lazyfs::torn-op::...`, `lazyfs::crash::...`).
    pub fn command(&self, cmd: &str) -> anyhow::Result<()> {
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
