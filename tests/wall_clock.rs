//! A wall clock stepped by a minute (an NTP step, a VM resumed, an operator
//! with `date -s`) fences nobody and stops no fencing: broker sessions,
//! leases and timeouts run on the monotonic clock only.
//!
//! Every controller and broker runs under libfaketime (Debian's
//! `faketime`; CI installs it) with its monotonic clock left alone
//! (`DONT_FAKE_MONOTONIC=1`) and its wall clock read from a file the test
//! rewrites: `+60s`, then `-60s`, as a real clock step would look to the
//! process. The test checks that the fault is in force, so it cannot pass
//! without one: every node has libfaketime mapped, and a probe process
//! with the same environment reads the stepped clock.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use keel_proto::client::ControllerClient;
use keel_testkit::admin;

const LONG: Duration = Duration::from_secs(60);
/// The brokers' session timeout (controller and broker flag).
const SESSION: Duration = Duration::from_secs(3);

/// Where Debian's `faketime` package puts the preload library.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

fn libfaketime() -> PathBuf {
    let p = PathBuf::from(LIBFAKETIME);
    assert!(
        p.exists(),
        "this test steps the wall clock with libfaketime and cannot run without it: \
         apt-get install -y faketime ({LIBFAKETIME} is missing)"
    );
    p
}

/// Sets every process's wall-clock offset from real time.
fn step(file: &Path, offset: &str) {
    std::fs::write(file, format!("{offset}\n")).expect("write the faketime file");
}

/// The environment that puts a process under the test's wall clock.
fn faketime_env(lib: &Path, clock: &Path) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".to_string(), lib.display().to_string()),
        (
            "FAKETIME_TIMESTAMP_FILE".to_string(),
            clock.display().to_string(),
        ),
        // Re-read the file every second.
        ("FAKETIME_CACHE_DURATION".to_string(), "1".to_string()),
        ("DONT_FAKE_MONOTONIC".to_string(), "1".to_string()),
    ]
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64
}

/// Waits until a process started now under `env` reads a wall clock at
/// least `ahead` seconds from real time (negative: behind): the step is in
/// force for every process with that environment.
async fn wait_probe_offset(env: &[(String, String)], ahead: i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let out = std::process::Command::new("date")
            .arg("+%s")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .expect("run date");
        let seen: i64 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0);
        let off = seen - now_unix();
        if (ahead > 0 && off >= ahead - 5) || (ahead < 0 && off <= ahead + 5) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a process under libfaketime reads a wall clock {off:+} s from real time, not {ahead:+} s: the step is not in force"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every node has libfaketime loaded (its memory map shows it), so the
/// step the probe sees is the step the node sees.
fn assert_faketime_loaded(c: &Cluster) {
    for n in &c.nodes {
        let pid = n.process.pid().expect("node running");
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        assert!(
            maps.contains("libfaketime"),
            "{} does not have libfaketime loaded: its clock would not step",
            n.name()
        );
    }
}

/// (epoch, fenced) of brokers 1..=n, as the active controller says.
async fn sessions(client: &ControllerClient, n: u32) -> Vec<(u64, bool)> {
    let r = admin::describe_cluster(client)
        .await
        .expect("describe the cluster");
    (1..=n)
        .map(|id| {
            let b = broker_info(&r, id).unwrap_or_else(|| panic!("broker {id} unknown"));
            (b.broker_epoch, b.fenced)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_stepped_a_minute_either_way_fences_nobody_and_stops_no_fencing() {
    let lib = libfaketime();
    let session_ms = SESSION.as_millis().to_string();
    let mut c = Cluster::new(
        Spec::new(keel_bin(), CLUSTER_ID)
            .brokers(3)
            .controller_flags(&["--session-timeout-ms", &session_ms])
            .broker_flags(&[
                "--heartbeat-interval-ms",
                "300",
                "--session-timeout-ms",
                &session_ms,
            ])
            .logs(Some("info,openraft=warn"), Some("info,openraft=warn")),
    )
    .expect("lay out a cluster");
    let clock = c.dir().join("wall-clock-offset");
    step(&clock, "+0s");
    let env = faketime_env(&lib, &clock);
    for n in &mut c.nodes {
        n.process.launch.env.extend(env.iter().cloned());
    }
    c.start_all().expect("start the cluster");
    c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    assert_faketime_loaded(&c);
    let client = client(&c);
    let before = sessions(&client, 3).await;
    assert!(before.iter().all(|(_, fenced)| !fenced));

    for (offset, ahead) in [("+60s", 60), ("-60s", -60)] {
        step(&clock, offset);
        wait_probe_offset(&env, ahead).await;
        // Every node re-reads the file within a second.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // Three session timeouts on the stepped clock: a wall-clock session
        // would have fenced every broker (forward) or never expire (back).
        let until = std::time::Instant::now() + 3 * SESSION;
        while std::time::Instant::now() < until {
            let now = sessions(&client, 3).await;
            assert_eq!(
                now,
                before,
                "after a {offset} step a broker was fenced or re-registered\n{}",
                c.log_tails(20)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // The clock still 60 s behind: a silent broker is fenced all the same.
    let silent = c.controller_count() + 1; // broker 2
    c.nodes[silent].kill();
    c.wait_cluster("broker 2 fenced", LONG, |r| {
        broker_info(r, 2).is_some_and(|b| b.fenced)
    })
    .await
    .unwrap();
    let after = sessions(&client, 3).await;
    assert_eq!(after[0], before[0], "broker 1 untouched");
    assert_eq!(after[2], before[2], "broker 3 untouched");
}
