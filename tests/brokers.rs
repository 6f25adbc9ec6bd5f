//! Real `keel broker` processes against a real quorum: registration,
//! heartbeats, fencing, epochs, duplicate ids, controlled shutdown.

mod common;

use std::time::Duration;

use common::*;
use keel_proto::client::ControllerClient;
use keel_proto::pb;

const LONG: Duration = Duration::from_secs(60);

/// Sends `req` as a broker registration; the error code it was answered
/// with, if any.
async fn register(client: &ControllerClient, req: pb::RegisterBrokerRequest) -> Option<i32> {
    client
        .broker(|mut x| {
            let req = req.clone();
            async move { x.register_broker(req).await }
        })
        .await
        .unwrap()
        .error
        .map(|e| e.code)
}

/// Sends heartbeat `hb`; the error code it was answered with, if any.
async fn heartbeat(client: &ControllerClient, hb: pb::BrokerHeartbeatRequest) -> Option<i32> {
    client
        .broker(|mut x| {
            let hb = hb.clone();
            async move { x.broker_heartbeat(hb).await }
        })
        .await
        .unwrap()
        .error
        .map(|e| e.code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_brokers_register_and_are_unfenced() {
    let mut c = cluster(3);
    c.wait_active(LONG).await.unwrap();
    let r = c.wait_all_brokers_active(LONG).await.unwrap();
    let ids: Vec<u32> = r
        .brokers
        .iter()
        .filter_map(|b| b.broker.as_ref())
        .map(|b| b.broker_id)
        .collect();
    assert_eq!(ids, vec![1, 2, 3]);

    // The CLI shows them too, with the JSON contract's field names.
    let out = output_ok(
        std::process::Command::new(keel_bin()).args([
            "cluster",
            "describe",
            "--output",
            "json",
            "--bootstrap",
            &c.controller_addrs().join(","),
        ]),
        "keel cluster describe",
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let brokers = v["brokers"].as_array().expect("brokers array");
    assert_eq!(brokers.len(), 3);
    for b in brokers {
        assert_eq!(b["state"], "active");
        assert!(b["epoch"].as_u64().unwrap() > 0);
        assert!(b["address"].as_str().unwrap().starts_with("127.0.0.1:"));
        assert!(b["last_heartbeat_ms"].as_u64().is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_broker_is_fenced_and_unfenced_when_it_resumes() {
    let mut c = cluster(2);
    c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    let epoch = broker_info(&c.wait_all_brokers_active(LONG).await.unwrap(), 2)
        .unwrap()
        .broker_epoch;

    c.broker_mut(1).process.pause();
    let r = c
        .wait_cluster("paused broker fenced", LONG, |r| {
            broker_info(r, 2).is_some_and(|b| b.fenced)
        })
        .await
        .unwrap();
    assert_eq!(
        broker_info(&r, 2).unwrap().broker_epoch,
        epoch,
        "fencing keeps the registration"
    );

    c.broker_mut(1).process.resume();
    let r = c
        .wait_cluster("resumed broker unfenced", LONG, |r| {
            broker_info(r, 2).is_some_and(|b| !b.fenced)
        })
        .await
        .unwrap();
    let b = broker_info(&r, 2).unwrap();
    // Either it heartbeated on with its epoch, or (if it noticed the lost
    // session) re-registered with a newer one.
    assert!(b.broker_epoch >= epoch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_broker_gets_a_new_epoch_and_its_old_epoch_is_stale() {
    let mut c = cluster(1);
    c.wait_active(LONG).await.unwrap();
    let old = broker_info(&c.wait_all_brokers_active(LONG).await.unwrap(), 1)
        .unwrap()
        .broker_epoch;

    c.broker_mut(0).start().unwrap();
    let r = c
        .wait_cluster("restarted broker re-registered", LONG, |r| {
            broker_info(r, 1).is_some_and(|b| b.broker_epoch > old && !b.fenced)
        })
        .await
        .unwrap();
    assert!(broker_info(&r, 1).unwrap().broker_epoch > old);

    let client = client(&c);
    let hb = pb::BrokerHeartbeatRequest {
        broker_id: 1,
        broker_epoch: old,
        ..Default::default()
    };
    assert_eq!(
        heartbeat(&client, hb).await,
        Some(pb::ErrorCode::StaleBrokerEpoch as i32)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_incarnation_of_a_live_broker_id_is_refused() {
    let mut c = cluster(1);
    c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();

    // A second process with the same id but a fresh data dir.
    let dir = c.dir().join("b1-twin");
    let twin = stray(&c, c.broker(0), "b1-twin", |args| {
        set_flag(args, "--data-dir", dir.display().to_string());
        set_flag(args, "--listen", format!("127.0.0.1:{}", free_port()));
    });
    let client = client(&c);
    let req = pb::RegisterBrokerRequest {
        broker_id: 1,
        incarnation_id: vec![7; 16],
        cluster_id: c.cluster_id.clone(),
        address: "127.0.0.1:1".into(),
        ..Default::default()
    };
    assert_eq!(
        register(&client, req).await,
        Some(pb::ErrorCode::DuplicateBrokerRegistration as i32)
    );

    // The twin keeps being refused and the original stays registered and active.
    let deadline = std::time::Instant::now() + LONG;
    while !twin
        .log_text()
        .contains("another incarnation of this broker id")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the twin must log why it is refused: {}",
            twin.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = c.wait_all_brokers_active(LONG).await.unwrap();
    assert_eq!(r.brokers.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_active_controller_still_fences_a_broker_that_died_before_failover() {
    let mut c = cluster(2);
    let active = c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();

    c.broker_mut(1).kill();
    c.controller_mut(active).kill();
    let next = c.wait_active(LONG).await.unwrap();
    assert_ne!(next, active);
    let r = c
        .wait_cluster("dead broker fenced by the new controller", LONG, |r| {
            broker_info(r, 2).is_some_and(|b| b.fenced)
        })
        .await
        .unwrap();
    assert!(
        !broker_info(&r, 1).unwrap().fenced,
        "the live broker must stay unfenced"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_registrations_and_heartbeats_get_typed_errors_and_write_nothing() {
    let mut q = quorum(&[]);
    q.wait_active(LONG).await.unwrap();
    let (before, _) = q.wait_converged(1, LONG).await.unwrap();
    let client = client(&q);
    let good = pb::RegisterBrokerRequest {
        broker_id: 9,
        incarnation_id: vec![1; 16],
        cluster_id: q.cluster_id.clone(),
        address: "127.0.0.1:9".into(),
        ..Default::default()
    };
    let wrong_cluster = pb::RegisterBrokerRequest {
        cluster_id: "other".into(),
        ..good.clone()
    };
    assert_eq!(
        register(&client, wrong_cluster).await,
        Some(pb::ErrorCode::InconsistentClusterId as i32)
    );
    let short_incarnation = pb::RegisterBrokerRequest {
        incarnation_id: vec![1, 2, 3],
        ..good.clone()
    };
    assert_eq!(
        register(&client, short_incarnation).await,
        Some(pb::ErrorCode::InvalidRequest as i32)
    );
    let bad_address = pb::RegisterBrokerRequest {
        address: "not an address".into(),
        ..good.clone()
    };
    assert_eq!(
        register(&client, bad_address).await,
        Some(pb::ErrorCode::InvalidRequest as i32)
    );
    let bad_kafka_address = pb::RegisterBrokerRequest {
        kafka_address: Some("localhost:9094".into()),
        ..good.clone()
    };
    assert_eq!(
        register(&client, bad_kafka_address).await,
        Some(pb::ErrorCode::InvalidRequest as i32)
    );

    let hb = pb::BrokerHeartbeatRequest {
        broker_id: 42,
        broker_epoch: 1,
        ..Default::default()
    };
    assert_eq!(
        heartbeat(&client, hb).await,
        Some(pb::ErrorCode::UnknownBroker as i32)
    );

    // Every node applied the same log after the refusals. A new term may
    // have added its own blank entry meanwhile (an election on a busy
    // host), so the log itself is read: nothing after `before` may hold a
    // record.
    q.wait_converged(before, LONG).await.unwrap();
    q.kill_all();
    let entries = keel_raft::dump_entries(&q.controller(0).data_dir, Some(before + 1), None)
        .expect("controller 1's log reads");
    let written: Vec<_> = entries
        .iter()
        .filter(|e| e.kind != "blank" && e.kind != "membership")
        .collect();
    assert!(
        written.is_empty(),
        "refused requests must not write anything: {written:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_broker_gives_its_session_up_on_the_controllers_timeout_not_its_own() {
    // The controllers fence a silent broker after 2 s; the broker's own
    // flag says ten minutes. Registration tells the broker the
    // controllers' timeout, so once no controller answers it gives its
    // session up about when they would fence it, instead of leading on
    // beside a successor for ten minutes.
    let mut c = Cluster::start(
        Spec::new(keel_bin(), CLUSTER_ID)
            .brokers(1)
            .controller_flags(&["--session-timeout-ms", "2000"])
            .broker_flags(&[
                "--heartbeat-interval-ms",
                "300",
                "--session-timeout-ms",
                "600000",
            ]),
    )
    .expect("start a cluster");
    c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    assert!(
        c.broker(0)
            .process
            .log_tail(400)
            .contains("session timeout set by the controllers"),
        "{}",
        c.broker(0).process.log_tail(40)
    );

    for i in 0..3 {
        c.controller_mut(i).process.pause();
    }
    let paused = std::time::Instant::now();
    let bound = Duration::from_secs(30);
    let lost = loop {
        if c.broker(0).process.log_tail(400).contains("session lost") {
            break true;
        }
        if paused.elapsed() > bound {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let waited = paused.elapsed();
    for i in 0..3 {
        c.controller_mut(i).process.resume();
    }
    assert!(
        lost,
        "the broker kept its session for {waited:?} without an answered heartbeat: {}",
        c.broker(0).process.log_tail(40)
    );
    // Once the controllers answer again it registers again.
    c.wait_all_brokers_active(LONG).await.unwrap();
}
