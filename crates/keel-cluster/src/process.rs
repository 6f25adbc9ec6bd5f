//! One node's process across its restarts: spawned from the `keel` binary
//! with a fixed argument list, its output appended to one log file (a
//! header line per start), killed, stopped, continued and signalled.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

/// How a node's process is started.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The `keel` binary.
    pub exe: PathBuf,
    /// Everything after the binary's name (`controller --node-id 1 ...`).
    pub args: Vec<String>,
    /// `RUST_LOG` for the process; `None` inherits the caller's.
    pub rust_log: Option<String>,
    /// Further environment variables.
    pub env: Vec<(String, String)>,
    /// Put the process in a process group of its own, so a terminal's
    /// Ctrl-C (sent to the foreground group) reaches only its parent, which
    /// then stops it in order (`keel dev`).
    pub own_process_group: bool,
}

/// A node process, SIGKILLed when dropped.
pub struct Process {
    /// Name in log headers and error messages (`c1`, `broker-2`, ...).
    pub name: String,
    pub launch: Launch,
    /// Where stdout and stderr go, appended across restarts.
    pub log: PathBuf,
    child: Option<Child>,
    /// Stopped with SIGSTOP and not continued yet.
    paused: bool,
    /// Starts so far (the header of each start in the log names it).
    starts: u32,
}

impl Process {
    /// A process that is not started yet.
    pub fn new(name: impl Into<String>, launch: Launch, log: PathBuf) -> Self {
        Self {
            name: name.into(),
            launch,
            log,
            child: None,
            paused: false,
            starts: 0,
        }
    }

    /// Starts it (SIGKILLing a running one first).
    pub fn start(&mut self) -> anyhow::Result<()> {
        self.kill();
        if let Some(dir) = self.log.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        }
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("open {}", self.log.display()))?;
        self.starts += 1;
        writeln!(out, "=== start #{} of {} ===", self.starts, self.name)?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(&self.launch.exe);
        cmd.args(&self.launch.args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        if let Some(log) = &self.launch.rust_log {
            cmd.env("RUST_LOG", log);
        }
        for (k, v) in &self.launch.env {
            cmd.env(k, v);
        }
        // No node outlives the process that started it (`keel dev` killed,
        // a test process gone): the node watches its parent.
        cmd.env("KEEL_EXIT_WITH_PARENT", "1");
        if self.launch.own_process_group {
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("start {} ({})", self.name, self.launch.exe.display()))?;
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    /// Whether a child is running (or stopped) and not reaped.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    pub fn paused(&self) -> bool {
        self.paused
    }

    /// Starts so far.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `sig`; false if not running or the signal failed.
    pub fn signal(&self, sig: Signal) -> bool {
        let Some(pid) = self.pid() else { return false };
        signal::kill(Pid::from_raw(pid as i32), sig).is_ok()
    }

    /// SIGKILL, and reap (a stopped process is continued first so it dies
    /// at once). A process in a group of its own dies with its whole group
    /// (e.g. a node run under a wrapper such as `strace`).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = Pid::from_raw(c.id() as i32);
            if self.paused {
                let _ = signal::kill(pid, Signal::SIGCONT);
            }
            if self.launch.own_process_group {
                let _ = signal::killpg(pid, Signal::SIGKILL);
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        self.paused = false;
    }

    /// SIGTERM: a controller or broker stops in order (a broker by
    /// controlled shutdown).
    pub fn terminate(&self) -> bool {
        self.signal(Signal::SIGTERM)
    }

    /// SIGSTOP.
    pub fn pause(&mut self) {
        if self.running() && !self.paused && self.signal(Signal::SIGSTOP) {
            self.paused = true;
        }
    }

    /// SIGCONT.
    pub fn resume(&mut self) {
        if self.paused {
            self.signal(Signal::SIGCONT);
            self.paused = false;
        }
    }

    /// The exit status, if the process exited (by itself or by a signal
    /// sent with [`Process::signal`]); reaps it.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let st = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        self.paused = false;
        Some(st)
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.exited() {
                return Some(st);
            }
            if !self.running() || Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The whole log (every start).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        tail(&self.log, n)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `n` lines of a text file ("" if unreadable).
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, log: PathBuf) -> Process {
        Process::new(
            "sh",
            Launch {
                exe: "/bin/sh".into(),
                args: vec!["-c".into(), script.into()],
                rust_log: Some("warn".into()),
                env: vec![("KIT_TEST".into(), "yes".into())],
                own_process_group: false,
            },
            log,
        )
    }

    /// Waits (bounded) until the log holds `n` lines of the script's output.
    fn wait_lines(p: &Process, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while p.log_text().matches("yes warn").count() < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_process_logs_each_start_and_is_killed_paused_and_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("logs/p.log");
        let mut p = sh("echo \"$KIT_TEST $RUST_LOG\"; exec sleep 30", log.clone());
        assert!(!p.running());
        p.start().unwrap();
        assert!(p.running());
        wait_lines(&p, 1);
        p.pause();
        assert!(p.paused());
        // A stopped process still dies at once when killed.
        p.kill();
        assert!(!p.running() && !p.paused());
        p.start().unwrap();
        wait_lines(&p, 2);
        // Starting a running process replaces it.
        p.start().unwrap();
        wait_lines(&p, 3);
        let text = p.log_text();
        assert_eq!(text.matches("=== start #").count(), 3, "{text}");
        assert_eq!(text.matches("yes warn").count(), 3, "{text}");
        assert!(text.contains("=== start #3 of sh ==="), "{text}");
        assert!(p.log_tail(1).contains("yes warn"));
        assert_eq!(p.starts(), 3);
    }

    #[test]
    fn an_exit_is_seen_with_its_status() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = sh("exit 3", dir.path().join("p.log"));
        p.start().unwrap();
        let st = p.wait_exit(Duration::from_secs(5)).expect("exited");
        assert_eq!(st.code(), Some(3));
        assert!(!p.running());
        // SIGTERM reaches the process.
        let mut q = sh("exec sleep 30", dir.path().join("q.log"));
        q.start().unwrap();
        assert!(q.terminate());
        let st = q.wait_exit(Duration::from_secs(5)).expect("terminated");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(15));
    }
}
