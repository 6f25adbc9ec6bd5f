//! Fail stop: a controller whose storage is gone, fails or hangs exits, and
//! so does a broker whose disk hangs, within a bound, with a non-zero code
//! that says why, instead of hanging (a hung node holds its port and is
//! never restarted by its supervisor);
//! the cluster goes on without it. Started again, as `Restart=on-failure`
//! would, it refuses to start while the fault is there (with a clear error
//! and a non-zero code, never a hang), and rejoins and catches up once the
//! fault is gone.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use keel_proto::client::ControllerClient;
use keel_proto::pb;
use keel_testkit::{Cluster, SpecFaults};

/// The longest a controller may take to notice its data dir is gone and
/// exit: a snapshot is asked for at once, and the shutdown watchdog bounds
/// whatever hangs (15 s).
const EXIT_BOUND: Duration = Duration::from_secs(60);

/// Starts `spec` (`what` names it in a failure) and waits for an active
/// controller and an active broker; the cluster and the active
/// controller's index.
async fn ready(spec: Spec, what: &str) -> (Cluster, usize) {
    let mut c = Cluster::start(spec).expect(what);
    let active = c.wait_active(Duration::from_secs(30)).await.unwrap();
    c.wait_all_brokers_active(Duration::from_secs(30))
        .await
        .expect("the broker is active");
    (c, active)
}

/// One broker on LazyFS, with `--storage-stall-timeout-ms` of
/// [`STALL_TIMEOUT`] given through `with_flags` (to the controllers or to
/// the broker); panics where LazyFS cannot run.
fn stalling_on_lazyfs(with_flags: impl FnOnce(Spec, &[&str]) -> Spec) -> Spec {
    if let Some(why) = keel_testkit::lazyfs::unavailable_reason() {
        panic!("this test needs LazyFS: {why}");
    }
    let stall_ms = STALL_TIMEOUT.as_millis().to_string();
    with_flags(
        fast_spec(1).lazyfs(true),
        &["--storage-stall-timeout-ms", stall_ms.as_str()],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_whose_data_dir_is_deleted_under_it_exits() {
    let (mut c, active) = ready(fast_spec(1), "start a cluster").await;
    let victim = (active + 1) % 3;
    let client = c.client(Duration::from_secs(5), Duration::from_secs(30));
    create_topic(&client, "before", 1, 1).await;

    std::fs::remove_dir_all(&c.controller(victim).data_dir).expect("delete the data dir");
    // Make it write: new entries, and a snapshot, which makes new files.
    for i in 0..20 {
        create_topic(&client, &format!("after-{i}"), 1, 1).await;
    }
    let single = ControllerClient::new(vec![c.controller(victim).address()])
        .with_timeouts(Duration::from_secs(5), Duration::from_secs(10))
        .with_transport(c.transport().clone());
    let _ = single
        .admin(|mut cl| async move {
            cl.trigger_snapshot(pb::TriggerSnapshotRequest {
                purge_log: true,
                timeout_ms: 5_000,
            })
            .await
        })
        .await;

    let status = wait_exit(&mut c, victim, EXIT_BOUND, "data dir deleted").await;
    assert!(!status.success(), "it exited with {status}");
    let log = c.controller(victim).process.log_tail(40);
    assert!(log.contains("the data dir is gone"), "it says why:\n{log}");

    // The quorum goes on without it.
    create_topic(&client, "without-it", 1, 1).await;
    let names = topic_names(&client).await;
    assert!(names.contains(&"without-it".to_string()), "{names:?}");
}

/// Exit code of a node that failed locally (its storage failed).
const EXIT_LOCAL: i32 = 4;
/// Exit code of a node whose storage stalled (`keel_cli::EXIT_STALLED`).
const EXIT_STALLED: i32 = 6;
/// `--storage-stall-timeout-ms` in the stall test.
const STALL_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest a controller may take to fail or exit on a storage fault,
/// or to refuse a start on one.
const FAULT_BOUND: Duration = Duration::from_secs(30);

/// What the last start of controller `i` wrote (its log file is appended
/// across starts).
fn last_start_log(c: &Cluster, i: usize) -> String {
    let all = c.controller(i).process.log_text();
    all.rsplit("=== start #")
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Sets or clears the immutable attribute of `path` (`chattr`): even root
/// can then neither write the file, through a descriptor it already holds,
/// nor open it for writing.
fn chattr(flag: &str, path: &Path) {
    let st = std::process::Command::new("chattr")
        .arg(flag)
        .arg(path)
        .status()
        .expect("run chattr (e2fsprogs)");
    assert!(st.success(), "chattr {flag} {}: {st}", path.display());
}

/// An immutable file, made writable again when dropped (also when the test
/// fails, so that its temp dir can be removed).
struct Immutable(PathBuf);

impl Immutable {
    fn set(path: PathBuf) -> Self {
        chattr("+i", &path);
        Self(path)
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .status();
    }
}

/// Creates `n` topics named `<prefix>-<i>`.
async fn create_topics(client: &ControllerClient, prefix: &str, n: usize) {
    for i in 0..n {
        create_topic(client, &format!("{prefix}-{i}"), 1, 1).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_whose_log_file_becomes_unwritable_exits_and_comes_back_once_it_is_writable() {
    let (mut c, active) = ready(fast_spec(1), "start a cluster").await;
    let victim = (active + 1) % 3;
    let client = c.client(Duration::from_secs(5), Duration::from_secs(30));
    create_topic(&client, "before", 1, 1).await;

    // sled's log file: every entry, vote and snapshot is written there.
    let db = c.controller(victim).data_dir.join("raft").join("db");
    assert!(db.is_file(), "{} is sled's log file", db.display());
    let immutable = Immutable::set(db.clone());
    let faulted = Instant::now();
    create_topics(&client, "unwritable", 5).await;
    let status = wait_exit(&mut c, victim, FAULT_BOUND, "log file unwritable").await;
    let took = faulted.elapsed();
    let log = last_start_log(&c, victim);
    assert_eq!(status.code(), Some(EXIT_LOCAL), "{status}\n{log}");
    assert!(
        log.contains("raft stopped")
            && (log.contains("os error 1") || log.contains("Os { code: 1,")),
        "it says why (EPERM writing its log; io::Error's Display or, through sled's error, its Debug):\n{log}"
    );
    eprintln!("log file unwritable: exited {status} {took:?} after the fault");

    // The quorum goes on without it.
    create_topics(&client, "without-it", 3).await;

    // Restarted with the file still unwritable: it refuses to start, at
    // once and saying why, rather than hanging or running on memory.
    restart_refused(
        &mut c,
        victim,
        EXIT_LOCAL,
        &["controller failed to start", "os error 1"],
        "start on an unwritable log",
    )
    .await;

    // The fault gone, a restart brings it back.
    drop(immutable);
    comes_back(
        &mut c,
        victim,
        &client,
        &["before", "unwritable-4", "without-it-2"],
    )
    .await;
}

/// Restarts controller `victim` while its storage fault stays: it must
/// exit with `code`, its log saying each of `why`, within [`FAULT_BOUND`],
/// rather than hang.
async fn restart_refused(c: &mut Cluster, victim: usize, code: i32, why: &[&str], what: &str) {
    let restarted = Instant::now();
    c.controller_mut(victim).start().unwrap();
    let status = wait_exit(c, victim, FAULT_BOUND, what).await;
    let log = last_start_log(c, victim);
    assert_eq!(status.code(), Some(code), "{status}\n{log}");
    for w in why {
        assert!(log.contains(w), "it says why ({w}):\n{log}");
    }
    eprintln!("{what}: exited {status} after {:?}", restarted.elapsed());
}

/// The fault gone: a restart of `victim` brings it back, it rejoins and
/// catches up (a topic created now, and every one of `before`, is there).
async fn comes_back(c: &mut Cluster, victim: usize, client: &ControllerClient, before: &[&str]) {
    c.controller_mut(victim).start().unwrap();
    create_topic(client, "after", 1, 1).await;
    c.wait_converged(1, Duration::from_secs(60))
        .await
        .expect("it catches up");
    assert!(c.controller_mut(victim).process.exited().is_none());
    let names = topic_names(client).await;
    for name in before.iter().chain(&["after"]) {
        assert!(names.contains(&name.to_string()), "{name}: {names:?}");
    }
}

/// Sends `signal` (`STOP`, `CONT`) to process `pid`.
fn signal(signal: &str, pid: u32) -> bool {
    std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .is_ok_and(|st| st.success())
}

/// A stopped LazyFS process (a disk that never answers), let go again when
/// dropped (also when the test fails: its unmount would wait for ever).
struct Frozen(u32);

impl Frozen {
    fn stop(pid: u32) -> Self {
        assert!(signal("STOP", pid), "SIGSTOP LazyFS ({pid})");
        Self(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal("CONT", self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_whose_disk_hangs_exits_with_its_own_code_and_comes_back_once_it_answers() {
    let spec = stalling_on_lazyfs(|spec, flags| spec.controller_flags(flags));
    let (mut c, active) = ready(spec, "start a cluster on LazyFS").await;
    let victim = (active + 1) % 3;
    let client = c.client(Duration::from_secs(5), Duration::from_secs(30));
    create_topic(&client, "before", 1, 1).await;

    let lazyfs = keel_testkit::node_lazyfs(c.controller(victim))
        .and_then(|d| d.pid())
        .expect("LazyFS runs under the controller's data dir");
    let frozen = Frozen::stop(lazyfs);
    let faulted = Instant::now();
    // Make it write: its appends' flushes now never return.
    create_topics(&client, "stalled", 3).await;
    let status = wait_exit(&mut c, victim, FAULT_BOUND, "disk hangs").await;
    let took = faulted.elapsed();
    let log = last_start_log(&c, victim);
    assert_eq!(status.code(), Some(EXIT_STALLED), "{status}\n{log}");
    assert!(log.contains("storage stalled"), "it says why:\n{log}");
    assert!(
        took >= STALL_TIMEOUT,
        "exited after {took:?}, before its stall timeout"
    );
    eprintln!("disk hangs: exited {status} {took:?} after the fault");

    // The quorum goes on without it.
    create_topics(&client, "without-it", 3).await;

    // Restarted on a disk that still hangs: opening the storage hangs too,
    // and it exits with the same code rather than waiting for ever.
    restart_refused(
        &mut c,
        victim,
        EXIT_STALLED,
        &["storage stalled"],
        "start on a hung disk",
    )
    .await;

    // The disk answers again: a restart brings it back.
    drop(frozen);
    comes_back(
        &mut c,
        victim,
        &client,
        &["before", "stalled-2", "without-it-2"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_whose_disk_hangs_exits_with_its_own_code_and_comes_back_once_it_answers() {
    let spec = stalling_on_lazyfs(|spec, flags| spec.broker_flags(flags));
    let (mut c, _) = ready(spec, "start a cluster on LazyFS").await;

    let lazyfs = keel_testkit::node_lazyfs(c.broker(0))
        .and_then(|d| d.pid())
        .expect("LazyFS runs under the broker's data dir");
    // Nothing is asked of the broker: its own heartbeat loop (a probe of
    // its log dirs, its free space) is what meets the hung disk.
    let frozen = Frozen::stop(lazyfs);
    let faulted = Instant::now();
    let status = wait_broker_exit(&mut c, 0, FAULT_BOUND, "disk hangs").await;
    let took = faulted.elapsed();
    let log = c.broker(0).process.log_tail(40);
    assert_eq!(status.code(), Some(EXIT_STALLED), "{status}\n{log}");
    assert!(log.contains("storage stalled"), "it says why:\n{log}");
    assert!(
        took >= STALL_TIMEOUT,
        "exited after {took:?}, before its stall timeout"
    );
    eprintln!("broker disk hangs: exited {status} {took:?} after the fault");

    // Restarted on a disk that still hangs: opening its data dir hangs,
    // and it exits with the same code rather than waiting for ever.
    let restarted = Instant::now();
    c.broker_mut(0).start().unwrap();
    let status = wait_broker_exit(&mut c, 0, FAULT_BOUND, "start on a hung disk").await;
    let log = c.broker(0).process.log_tail(40);
    assert_eq!(status.code(), Some(EXIT_STALLED), "{status}\n{log}");
    eprintln!(
        "broker start on a hung disk: exited {status} after {:?}",
        restarted.elapsed()
    );

    // The disk answers again: a restart brings it back, registered and
    // unfenced.
    drop(frozen);
    c.broker_mut(0).start().unwrap();
    c.wait_all_brokers_active(Duration::from_secs(60))
        .await
        .expect("the broker is back");
    assert!(c.broker_mut(0).process.exited().is_none());
}
