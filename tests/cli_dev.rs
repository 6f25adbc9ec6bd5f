//! `keel dev` as a terminal user meets it: Ctrl-C reaches the whole
//! foreground process group, and the brokers still stop by controlled
//! shutdown (the last one too, though it leads partitions nobody else can
//! take); a port another service holds is named before anything starts.
//! Both use the dev cluster's fixed addresses, so they run one at a time,
//! and a running `keel dev` must be stopped first.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::keel_bin;

/// The dev cluster's addresses are fixed: one test at a time.
static DEV: Mutex<()> = Mutex::new(());

/// Kills whatever a failed test left running under its unique directory.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("pkill").args(["-9", "-f", &self.0]).status();
    }
}

/// The pids of processes whose command line names a path under `dir`
/// (its nodes' data dirs), as pgrep lists them; empty when none.
fn nodes_under(dir: &str) -> String {
    let out = Command::new("pgrep")
        .args(["-f", "--", &format!("{dir}/")])
        .output()
        .expect("run pgrep");
    // 0: some found, 1: none; anything else is pgrep failing.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "pgrep: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Sends `signal` (`-INT`, `-HUP`, ...) to `keel dev` (`group`: to its
/// whole process group, as a terminal's Ctrl-C does) and waits, bounded,
/// until it exits; its exit status.
fn signal_and_wait(dev: &mut Child, signal: &str, group: bool) -> std::process::ExitStatus {
    let target = if group {
        format!("-{}", dev.id())
    } else {
        dev.id().to_string()
    };
    let sent = Command::new("kill")
        .args([signal, "--", &target])
        .status()
        .unwrap();
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(st) = dev.try_wait().unwrap() {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "keel dev did not stop on {signal}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `keel <args>` (with no bootstrap from the environment); panics
/// unless it exits 0.
fn keel_ok(args: &[&str]) {
    common::output_ok(
        Command::new(keel_bin())
            .args(args)
            .env_remove("KEEL_BOOTSTRAP"),
        &format!("keel {args:?}"),
    );
}

/// Starts `keel dev` as a terminal starts a job: the leader of a process
/// group of its own; returns once it printed that the cluster is up.
fn start_dev(dir: &Path) -> Child {
    use std::os::unix::process::CommandExt;
    let mut dev = Command::new(keel_bin())
        .args(["dev", "--fresh", "--dir"])
        .arg(dir)
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::from(
            std::fs::File::create(dir.with_extension("stderr")).expect("stderr file"),
        ))
        .spawn()
        .expect("start keel dev");
    let stdout = dev.stdout.take().unwrap();
    let rx = common::lines_of(stdout);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(l) if l.contains("is up") => return dev,
            _ => {
                if let Ok(Some(st)) = dev.try_wait() {
                    panic!(
                        "keel dev exited with {st}: {}",
                        std::fs::read_to_string(dir.with_extension("stderr")).unwrap_or_default()
                    );
                }
                assert!(Instant::now() < deadline, "keel dev did not come up")
            }
        }
    }
}

#[test]
fn ctrl_c_to_the_process_group_stops_every_broker_by_controlled_shutdown() {
    let _one = DEV.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dev");
    let _cleanup = Cleanup(dir.display().to_string());
    let mut dev = start_dev(&dir);

    // Every leadership ends on the last broker to stop (replication factor
    // 3), and one partition has a single replica: neither may hold up the
    // exit.
    keel_ok(&[
        "topics",
        "create",
        "everywhere",
        "--partitions",
        "3",
        "--replication-factor",
        "3",
    ]);
    keel_ok(&["topics", "create", "single", "--replication-factor", "1"]);

    // Ctrl-C in a terminal: SIGINT to the whole foreground process group.
    let status = signal_and_wait(&mut dev, "-INT", true);
    let said = std::fs::read_to_string(dir.with_extension("stderr")).unwrap();
    assert!(status.success(), "{status}: {said}");
    assert!(
        said.contains("stopping brokers (controlled shutdown)"),
        "{said}"
    );
    assert!(said.contains("stopped; nothing left running."), "{said}");
    assert!(!said.contains("killed"), "a node had to be killed: {said}");
    // Its own status lines, written to a file here, carry no terminal codes.
    assert!(
        !said.contains('\x1b'),
        "colour codes in keel dev's output: {said}"
    );

    // Each broker asked, was allowed, and stopped; none gave up waiting.
    // (Had the signal reached the controllers too, they would be gone
    // before the brokers could ask.)
    let logs = dir.join("logs");
    for id in 1..=3 {
        let log = std::fs::read_to_string(logs.join(format!("broker-{id}.log"))).unwrap();
        for line in [
            "controlled shutdown: asking the controller",
            "controlled shutdown allowed",
            "broker stopped",
        ] {
            assert!(
                log.contains(line),
                "broker {id} never logged {line:?}:\n{log}"
            );
        }
        assert!(!log.contains("stopping anyway"), "broker {id}:\n{log}");
    }
    // Log files are for reading, without terminal colour codes.
    for entry in std::fs::read_dir(&logs).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.is_empty(), "{}", path.display());
        assert!(!text.contains('\x1b'), "colour codes in {}", path.display());
    }
}

#[test]
fn dev_names_a_port_another_service_holds_and_starts_nothing() {
    let _one = DEV.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dev");
    let _cleanup = Cleanup(dir.display().to_string());
    // As node_exporter does on 9100, here on controller 2's address only.
    let holder = std::net::TcpListener::bind("127.0.0.12:9100").expect("bind 127.0.0.12:9100");
    let out = Command::new(keel_bin())
        .args(["dev", "--fresh", "--exit-when-ready", "--dir"])
        .arg(&dir)
        .output()
        .expect("run keel dev");
    drop(holder);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("controller-2 metrics port 127.0.0.12:9100 is not free"),
        "{err}"
    );
    assert!(err.contains("Address already in use"), "{err}");
    // The only conflict named, and nothing was started.
    assert_eq!(err.matches("is not free").count(), 1, "{err}");
    assert!(
        !dir.join("logs").exists() || std::fs::read_dir(dir.join("logs")).unwrap().count() == 0
    );
}

/// Check before destroy: `keel dev --fresh` run again while a dev cluster
/// runs on the same directory refuses, removes nothing, and the running
/// cluster goes on serving.
#[test]
fn a_second_fresh_dev_refuses_and_leaves_the_running_cluster_untouched() {
    let _one = DEV.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dev");
    let _cleanup = Cleanup(dir.display().to_string());
    let mut dev = start_dev(&dir);
    keel_ok(&["topics", "create", "before", "--replication-factor", "3"]);

    let second = Command::new(keel_bin())
        .args(["dev", "--fresh", "--dir"])
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("run a second keel dev");
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{said}");
    assert!(said.contains("in use by a running node"), "{said}");
    assert!(said.contains("nothing was removed"), "{said}");
    for kept in [
        "controller-1/raft/db",
        "broker-1/broker.lock",
        "certs/ca.pem",
    ] {
        assert!(dir.join(kept).exists(), "{kept} was removed");
    }
    // The first cluster still commits and still answers.
    keel_ok(&["topics", "create", "after", "--replication-factor", "3"]);
    keel_ok(&["topics", "describe", "before"]);
    assert!(signal_and_wait(&mut dev, "-INT", true).success());
}

/// A closed terminal sends SIGHUP: `keel dev` stops its cluster as Ctrl-C
/// does, and no node outlives it.
#[test]
fn sighup_stops_the_dev_cluster_and_leaves_no_node_running() {
    let _one = DEV.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dev");
    let marker = dir.display().to_string();
    let _cleanup = Cleanup(marker.clone());
    let mut dev = start_dev(&dir);
    // Only keel dev: its nodes are in process groups of their own.
    let status = signal_and_wait(&mut dev, "-HUP", false);
    let said = std::fs::read_to_string(dir.with_extension("stderr")).unwrap();
    assert!(status.success(), "{status}: {said}");
    assert!(said.contains("stopped; nothing left running."), "{said}");
    let left = nodes_under(&marker);
    assert!(left.is_empty(), "nodes still running: {left}");
}

/// `keel dev` SIGKILLed (or killed by the OOM killer) cannot stop anything
/// itself: its nodes notice their parent is gone and stop, and the next
/// `keel dev` on the same addresses starts.
#[test]
fn nodes_die_with_a_killed_keel_dev_and_the_next_one_starts() {
    let _one = DEV.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dev");
    let marker = dir.display().to_string();
    let _cleanup = Cleanup(marker.clone());
    let mut dev = start_dev(&dir);
    let nodes_left = || nodes_under(&marker);
    assert!(!nodes_left().is_empty(), "no node of {marker} seen running");
    dev.kill().unwrap();
    dev.wait().unwrap();
    // A bound, not a target: the parent is noticed within 0.5 s, but a
    // broker's controlled shutdown may wait for its (also stopping)
    // controllers up to 30 s before it stops anyway.
    let deadline = Instant::now() + Duration::from_secs(90);
    while !nodes_left().is_empty() {
        assert!(
            Instant::now() < deadline,
            "nodes outlived keel dev: {}",
            nodes_left()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The addresses are free again: a new dev cluster comes up and stops.
    let tmp2 = tempfile::tempdir().unwrap();
    let dir2 = tmp2.path().join("dev");
    let _cleanup2 = Cleanup(dir2.display().to_string());
    let mut again = start_dev(&dir2);
    assert!(signal_and_wait(&mut again, "-INT", true).success());
}

/// For scripts: `keel dev --exit-when-ready` returns once the cluster is
/// up and leaves it running in the background (a session of its own);
/// admin commands given any of its addresses explicitly use its
/// certificate as the default bootstrap does; `keel dev stop` ends it in
/// order and leaves nothing running (and a second stop has nothing to do).
#[test]
fn exit_when_ready_leaves_the_cluster_running_until_dev_stop() {
    let _one = DEV.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dev");
    let marker = dir.display().to_string();
    let _cleanup = Cleanup(marker.clone());
    let out = Command::new("timeout")
        .arg("180")
        .arg(keel_bin())
        .args([
            "dev",
            "--fresh",
            "--exit-when-ready",
            "--brokers",
            "1",
            "--dir",
        ])
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("run keel dev --exit-when-ready");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {said}", out.status);
    assert!(said.contains("is up"), "{said}");
    assert!(
        said.contains("keel dev stop"),
        "it says how to stop it: {said}"
    );
    assert!(
        !nodes_under(&marker).is_empty(),
        "the cluster runs on after the command returned"
    );

    // Any of its addresses, not only the default list: its certificate.
    keel_ok(&[
        "topics",
        "create",
        "detached",
        "--replication-factor",
        "1",
        "-b",
        "127.0.0.12:9093",
    ]);
    keel_ok(&[
        "topics",
        "describe",
        "detached",
        "--bootstrap",
        "127.0.0.13:9093,127.0.0.11:9093",
    ]);

    let stop = Command::new("timeout")
        .arg("120")
        .arg(keel_bin())
        .args(["dev", "stop", "--dir"])
        .arg(&dir)
        .output()
        .expect("run keel dev stop");
    let said = String::from_utf8_lossy(&stop.stderr);
    assert!(stop.status.success(), "{}: {said}", stop.status);
    assert!(said.contains("stopped"), "{said}");
    let left = nodes_under(&marker);
    assert!(left.is_empty(), "nodes still running: {left}");
    assert!(!dir.join("dev.pid").exists());
    let log = std::fs::read_to_string(dir.join("dev.log")).unwrap_or_default();
    assert!(log.contains("stopped; nothing left running."), "{log}");

    let again = Command::new(keel_bin())
        .args(["dev", "stop", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{said}");
    assert!(said.contains("nothing to stop"), "{said}");
}
