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
use keel_testkit::{ClusterFaults, SpecFaults};

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
        let status = wait_exit(&mut c, target, LONG, &when).await;
        // What this process wrote (the log is appended across starts).
        let all = c.controller(target).process.log_text();
        let log = all
            .rsplit("=== start #")
            .next()
            .unwrap_or_default()
            .to_string();
        assert_eq!(status.code(), Some(4), "{when}: {status}\n{log}");
        // The OS error reaches the log as io::Error's Display ("os error
        // 5") or, through sled's error, its Debug ("Os { code: 5, ..").
        let os_error = log.contains(&format!("os error {}", errno.code()))
            || log.contains(&format!("Os {{ code: {},", errno.code()));
        assert!(
            log.contains("raft stopped") && os_error,
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

/// `name` of the broker's Prometheus page, summed over its label sets.
fn gauge(page: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in page.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with(' ') || rest.starts_with('{')) {
            continue;
        }
        let v: f64 = rest.rsplit(' ').next()?.parse().ok()?;
        found = Some(found.unwrap_or(0.0) + v);
    }
    found
}

async fn broker_gauge(c: &Cluster, i: usize, name: &str) -> Option<f64> {
    let addr = c.broker(i).metrics_addr?;
    let page = keel_testkit::probe::scrape_metrics(addr).await?;
    gauge(&page, name)
}

/// A broker whose data dir fails (`fdatasync` with EIO, then the history's
/// `pwrite` with ENOSPC) cannot record a leadership it is given, so it must not take it:
/// the LeaderAndIsr is refused (the changes undone, the reason logged), the
/// broker keeps running and heartbeating, the controller keeps sending,
/// and once the disk works again the broker takes the leadership and
/// records it. A broker that cannot record a new registration's epoch
/// stops instead of running on it. Recorded leader epochs never go back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_whose_disk_fails_refuses_leadership_until_it_can_record_it() {
    let mut c = Cluster::start(fast_spec(3).fiu(true).metrics(true))
        .expect("start a cluster under libfiu (apt-get install -y fiu-utils)");
    c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    let client = client(&c);

    for (round, (calls, errno)) in [(Calls::Sync, Errno::Eio), (Calls::Pwrite, Errno::Enospc)]
        .into_iter()
        .enumerate()
    {
        let when = format!("round {round}: broker 2's {calls:?} failing with {errno:?}");
        // Every partition on brokers 1, 2, 3 in that order: broker 1 leads,
        // and broker 2 is first in line when broker 1 goes.
        let topic = format!("disk{round}");
        admin::create_topics(
            &client,
            &admin::create_topics_request(vec![admin::creatable_on(&topic, 4, &[1, 2, 3])]),
        )
        .await
        .unwrap_or_else(|e| panic!("{when}: create: {e:#}"));
        let deadline = Instant::now() + LONG;
        while broker_gauge(&c, 0, "keel_broker_leaders").await < Some(4.0) {
            assert!(
                Instant::now() < deadline,
                "{when}: broker 1 never led {topic}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let led_before = broker_gauge(&c, 1, "keel_broker_leaders")
            .await
            .unwrap_or(0.0);

        c.disk_fault(c.controller_count() + 1, calls, errno)
            .unwrap();
        c.broker_mut(0).process.kill();

        // Broker 2 is told to lead and refuses: it cannot record it.
        let deadline = Instant::now() + LONG;
        while !c
            .broker(1)
            .process
            .log_text()
            .contains("cannot write leadership history; refusing the changes")
        {
            assert!(
                Instant::now() < deadline,
                "{when}: no refusal logged\n{}",
                c.broker(1).process.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // For a while (several resends and heartbeats) it keeps running
        // and leads none of the partitions it could not record.
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(
                c.broker_mut(1).process.exited().is_none(),
                "{when}: broker 2 stopped\n{}",
                c.broker(1).process.log_tail(30)
            );
            assert_eq!(
                broker_gauge(&c, 1, "keel_broker_leaders").await,
                Some(led_before),
                "{when}: broker 2 took a leadership it could not record"
            );
        }
        assert_eq!(
            broker_gauge(&c, 1, "keel_broker_fenced").await,
            Some(0.0),
            "{when}: broker 2 kept its session"
        );

        // The disk works again: the controller's resend is taken, recorded.
        c.clear_disk_fault(c.controller_count() + 1, calls).unwrap();
        let deadline = Instant::now() + LONG;
        while broker_gauge(&c, 1, "keel_broker_leaders").await < Some(led_before + 4.0) {
            assert!(
                Instant::now() < deadline,
                "{when}: broker 2 never took over\n{}",
                c.broker(1).process.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Broker 1 back for the next round; it catches up as a follower.
        c.broker_mut(0).start().unwrap();
        c.wait_all_brokers_active(LONG).await.unwrap();
    }

    // Broker 3 must re-register (silent past its session) while its epoch
    // file cannot be made durable: it may not run on an epoch it could not
    // record, so it stops with the local-failure code and names the file;
    // started again on a working disk, it registers and serves.
    let b3 = c.controller_count() + 2;
    c.disk_fault(b3, Calls::Sync, Errno::Eio).unwrap();
    c.broker_mut(2).process.pause();
    tokio::time::sleep(Duration::from_secs(5)).await;
    c.broker_mut(2).process.resume();
    let deadline = Instant::now() + LONG;
    let status = loop {
        if let Some(st) = c.broker_mut(2).process.exited() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "broker 3 ran on an unrecorded epoch\n{}",
            c.broker(2).process.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let log = c.broker(2).process.log_text();
    assert_eq!(status.code(), Some(4), "{status}\n{log}");
    assert!(
        log.contains("broker.json") && log.contains("os error 5"),
        "no clear reason in the log\n{}",
        c.broker(2).process.log_tail(30)
    );
    c.broker_mut(2).start().unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();

    // Per partition, the leader epochs broker 2 recorded never go back.
    let mut last: std::collections::BTreeMap<(String, u64), u64> = Default::default();
    for line in history(&c, 1) {
        let key = (
            line["topic_id"].as_str().unwrap_or_default().to_string(),
            line["partition"].as_u64().unwrap_or_default(),
        );
        let Some(epoch) = line["leader_epoch"].as_u64() else {
            continue;
        };
        let prev = last.insert(key.clone(), epoch).unwrap_or(0);
        assert!(epoch >= prev, "{key:?}: leader epoch {epoch} after {prev}");
    }
    c.check_alive().unwrap();
}
