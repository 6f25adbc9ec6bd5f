//! Disk faults on real processes through libfiu (`fiu-utils`): while a
//! controller's `fsync`/`fdatasync` fail with EIO, or its `pwrite`s with
//! ENOSPC, it must not go on acknowledging from memory. It stops (the
//! Raft core quits on the storage error, the process exits with code 4
//! and says why), the other two keep the cluster writable, and once
//! started again (the fault gone) it catches up and converges. No
//! acknowledged write is lost, whichever node the fault hits.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use keel_testkit::fiu::{Calls, Errno};

const LONG: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_whose_disk_fails_stops_acknowledging_and_restarts_cleanly() {
    let mut c = Cluster::start(fast_spec(1).fiu(true))
        .expect("start a cluster under libfiu (apt-get install -y fiu-utils)");
    c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    let client = Arc::new(client(&c));
    let acked: Acked = Arc::default();

    let faults = [
        ("follower", Calls::Sync, Errno::Eio),
        ("active", Calls::Sync, Errno::Eio),
        ("active", Calls::Pwrite, Errno::Enospc),
        ("follower", Calls::Pwrite, Errno::Eio),
    ];
    for (round, (who, calls, errno)) in faults.into_iter().enumerate() {
        let when = format!("round {round}: {who}'s {calls:?} failing with {errno:?}");
        let writes = Writes::start(&client, format!("r{round}"), 1, &acked);
        let n = count(&acked);
        wait_acked(&c, &acked, n + 3, LONG, &when).await;
        let active = c.wait_active(LONG).await.unwrap();
        let target = if who == "active" {
            active
        } else {
            (active + 1) % 3
        };
        c.disk_fault(target, calls, errno).unwrap();

        // It stops on its own, saying why, rather than going on from memory.
        let deadline = Instant::now() + LONG;
        let status = loop {
            if let Some(st) = c.controller_mut(target).process.exited() {
                break st;
            }
            assert!(
                Instant::now() < deadline,
                "{when}: the node kept running\n{}",
                c.controller(target).process.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        // What this process wrote (the log is appended across starts).
        let all = c.controller(target).process.log_text();
        let log = all
            .rsplit("=== start #")
            .next()
            .unwrap_or_default()
            .to_string();
        assert_eq!(status.code(), Some(4), "{when}: {status}\n{log}");
        assert!(
            log.contains("raft stopped") && log.contains(&format!("os error {}", errno.code())),
            "{when}: no clear reason in the log\n{}",
            c.controller(target).process.log_tail(30)
        );

        // The other two keep taking writes.
        let n = count(&acked);
        wait_acked(&c, &acked, n + 5, LONG, &when).await;

        // Started again (a new process has no fault), it catches up.
        c.controller_mut(target).start().unwrap();
        writes.stop().await;
        c.wait_converged(1, LONG)
            .await
            .unwrap_or_else(|e| panic!("{when}: {e}"));
        let names: BTreeSet<String> = topic_names(&client).await.into_iter().collect();
        let acked_now = acked.lock().unwrap().clone();
        let lost: Vec<&String> = acked_now.difference(&names).collect();
        assert!(
            lost.is_empty(),
            "{when}: acknowledged topics lost: {lost:?}"
        );
    }
    assert!(count(&acked) >= 30, "{} writes acknowledged", count(&acked));
    c.check_alive().unwrap();
}
