//! A controller whose disk fills up: every node's data dir on a small
//! tmpfs. Below the free-space reserve the active controller refuses new
//! admin writes with STORAGE_FULL and writes nothing, while reads and
//! broker heartbeats go on (no broker is fenced, nothing crashes); once
//! space is freed it takes writes again on its own. Brokers report their
//! own disks with every heartbeat.

mod common;

use std::time::{Duration, Instant};

use common::*;
use keel_metadata::ErrorCode;
use keel_testkit::admin::{creatable, create_topics_request};
use keel_testkit::SpecFaults;

const LONG: Duration = Duration::from_secs(90);
const DISK: u64 = 96 << 20;
const RESERVE: u64 = 32 << 20;

async fn create(client: &keel_proto::client::ControllerClient, name: &str) -> ErrorCode {
    let req = create_topics_request(vec![creatable(name, 1, 1)]);
    let r = create_topics_answer(client, &req).await;
    let e = r
        .error
        .or_else(|| r.topics.first().and_then(|t| t.error.clone()));
    e.and_then(|e| ErrorCode::from_i32(e.code))
        .unwrap_or(ErrorCode::None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_the_reserve_writes_are_refused_and_taken_again_once_space_is_back() {
    let reserve = RESERVE.to_string();
    let mut c = Cluster::start(
        fast_spec(1)
            .tmpfs(DISK)
            .controller_flags(&["--disk-reserve-bytes", &reserve]),
    )
    .expect("start a cluster on tmpfs (needs root)");
    let active = c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    let client = client(&c);
    assert_eq!(create(&client, "before").await, ErrorCode::None);

    // Fill the active controller's disk to just under its reserve.
    let data = c.controller(active).data_dir.clone();
    let (free, _) = keel_controller::disk::space(&data).unwrap();
    let filler = data.join("filler");
    let fill = free.saturating_sub(RESERVE / 2);
    std::fs::write(&filler, vec![0u8; fill as usize]).unwrap();
    // Once the controller has measured it (once a second), writes are
    // refused.
    let deadline = Instant::now() + LONG;
    loop {
        let q = describe_quorum(&client).await;
        if q.leader_disk
            .is_some_and(|d| d.free_bytes < d.reserve_bytes)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the full disk was never measured"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(create(&client, "refused").await, ErrorCode::StorageFull);
    // Refused means written nowhere; reads and heartbeats go on.
    let names = topic_names(&client).await;
    assert_eq!(names, ["before"]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let d = keel_testkit::admin::describe_cluster(&client)
        .await
        .unwrap();
    assert!(keel_testkit::admin::brokers_unfenced(&d, 1), "{d:?}");
    // The broker reports its own data dir's file system (its tmpfs).
    let broker_dir = c.broker(0).data_dir.display().to_string();
    let disks = &d.brokers[0].disks;
    let own = disks
        .iter()
        .find(|s| s.path == broker_dir)
        .unwrap_or_else(|| panic!("no report of {broker_dir}: {disks:?}"));
    assert_eq!(own.total_bytes, DISK, "{own:?}");
    assert!(own.free_bytes > 0 && own.free_bytes <= DISK, "{own:?}");
    let q = describe_quorum(&client).await;
    let disk = q.leader_disk.expect("the leader's disk");
    assert!(disk.free_bytes < disk.reserve_bytes, "{disk:?}");
    assert_eq!(disk.reserve_bytes, RESERVE);

    // Space is back: writes are taken again, by the same controller.
    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + LONG;
    loop {
        match create(&client, "after").await {
            ErrorCode::None => break,
            ErrorCode::StorageFull => assert!(Instant::now() < deadline, "still refused"),
            other => panic!("answered {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut names = topic_names(&client).await;
    names.sort();
    assert_eq!(names, ["after", "before"]);
    assert_eq!(c.wait_active(LONG).await.unwrap(), active);
    c.check_alive().unwrap();
}
