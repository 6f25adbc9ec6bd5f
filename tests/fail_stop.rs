//! Fail stop: a controller whose storage is gone exits, within a bound,
//! with a non-zero code, instead of hanging (a hung node holds its port
//! and is never restarted by its supervisor); the cluster goes on without
//! it.

mod common;

use std::time::Duration;

use common::*;
use keel_proto::client::ControllerClient;
use keel_proto::pb;
use keel_testkit::Cluster;

/// The longest a controller may take to notice its data dir is gone and
/// exit: a snapshot is asked for at once, and the shutdown watchdog bounds
/// whatever hangs (15 s).
const EXIT_BOUND: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_whose_data_dir_is_deleted_under_it_exits() {
    let mut c = Cluster::start(fast_spec(1)).expect("start a cluster");
    let active = c.wait_active(Duration::from_secs(30)).await.unwrap();
    c.wait_all_brokers_active(Duration::from_secs(30))
        .await
        .expect("the broker is active");
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
