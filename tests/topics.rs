//! Topic lifecycle on real processes: create, describe, delete (with the
//! classic deletion manager's pauses), re-create, reassign, elect.

mod common;

use std::time::Duration;

use common::*;
use keel_proto::pb;

const LONG: Duration = Duration::from_secs(90);

fn keel(c: &Cluster, args: &[&str]) -> (i32, serde_json::Value, String) {
    let mut full: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    full.extend([
        "--bootstrap".to_string(),
        c.controller_addrs().join(","),
        "--output".into(),
        "json".into(),
    ]);
    let out = std::process::Command::new(keel_bin())
        .args(&full)
        .output()
        .expect("run keel");
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    let said = said(&v, &String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), v, said)
}

/// `keel topics create events <flags>` against `c`, which must succeed;
/// its JSON answer.
fn create_events(c: &Cluster, flags: &[&str]) -> serde_json::Value {
    let (code, v, err) = keel(c, &[&["topics", "create", "events"], flags].concat());
    assert_eq!(code, 0, "{err}");
    v
}

/// Kills broker 3 and waits (bounded by [`LONG`]) until the controllers
/// have fenced it.
async fn kill_broker_3(c: &mut Cluster) {
    c.broker_mut(2).kill();
    c.wait_cluster("broker 3 fenced", LONG, |r| {
        broker_info(r, 3).is_some_and(|b| b.fenced)
    })
    .await
    .unwrap();
}

async fn topic_gone(c: &Cluster, name: &str) {
    let client = client(c);
    let deadline = std::time::Instant::now() + LONG;
    loop {
        let names = topic_names(&client).await;
        if !names.iter().any(|n| n == name) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "topic {name} was never removed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_describe_delete_and_recreate_through_the_cli() {
    let mut c = cluster(3);
    wait_ready(&mut c, LONG).await;

    let v = create_events(
        &c,
        &[
            "--partitions",
            "4",
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=2",
        ],
    );
    let first_id = v["topic_id"].as_str().unwrap().to_string();

    let (code, v, err) = keel(&c, &["topics", "describe", "--topic", "events"]);
    assert_eq!(code, 0, "{err}");
    let t = &v["topics"][0];
    assert_eq!(t["name"], "events");
    assert_eq!(t["topic_id"], first_id.as_str());
    assert_eq!(t["marked_for_deletion"], false);
    assert_eq!(t["configs"]["min.insync.replicas"], "2");
    let parts = t["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 4);
    for p in parts {
        assert_eq!(p["replicas"].as_array().unwrap().len(), 3);
        assert!(p["leader"].is_u64());
        assert_eq!(p["leader_epoch"], 0);
        assert!(p["isr"].as_array().unwrap().contains(&p["leader"]));
    }

    // A refusal: same name again.
    let (code, _, err) = keel(&c, &["topics", "create", "events"]);
    assert_eq!(code, 1);
    assert!(err.contains("TOPIC_ALREADY_EXISTS"), "{err}");
    // --if-not-exists turns it into success.
    let (code, _, _) = keel(&c, &["topics", "create", "events", "--if-not-exists"]);
    assert_eq!(code, 0);

    let (code, v, err) = keel(
        &c,
        &["topics", "delete", "events", "--wait", "--timeout-s", "60"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["deleted"], true);
    let (_, v, _) = keel(&c, &["topics", "list"]);
    assert_eq!(v["topics"], serde_json::json!([]));

    // Re-created: a new topic id.
    let v = create_events(&c, &["--partitions", "2", "--replication-factor", "2"]);
    assert_ne!(
        v["topic_id"].as_str().unwrap(),
        first_id,
        "a re-created name is a different topic"
    );

    // Brokers stopped the old replicas with delete.
    for b in 0..3 {
        let h = history(&c, b);
        assert!(
            h.iter()
                .any(|e| e["event"] == "stopped" && e["topic_id"] == first_id.as_str()),
            "broker {} never stopped the deleted topic's replicas",
            b + 1
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_waits_for_a_down_broker_and_finishes_when_it_returns() {
    let mut c = cluster(3);
    let client = ready_with_topic(&mut c, LONG, "logs", 3, 3).await;

    kill_broker_3(&mut c).await;

    delete_topic(&client, "logs").await;

    // Paused: still there, marked for deletion, while broker 3 is down.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let t = c
        .wait_topic("logs", "marked", LONG, |t| t.marked_for_deletion)
        .await
        .unwrap();
    assert!(t.marked_for_deletion);

    c.broker_mut(2).start().unwrap();
    topic_gone(&c, "logs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reassignment_that_removes_the_leader_moves_leadership_and_completes() {
    let mut c = cluster(3);
    wait_ready(&mut c, LONG).await;
    let client = client(&c);
    create_placed_topic(&client, "r", &[1, 2]).await;
    c.wait_topic("r", "led by 1", LONG, |t| {
        t.partitions[0].state.as_ref().unwrap().leader == Some(1)
    })
    .await
    .unwrap();

    let plan = c.dir().join("plan.json");
    std::fs::write(
        &plan,
        r#"{"partitions":[{"topic":"r","partition":0,"replicas":[3,2]}]}"#,
    )
    .unwrap();
    let (code, _, err) = keel(&c, &["reassign", "start", "--plan", plan.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let t = c
        .wait_topic("r", "reassignment complete", LONG, |t| {
            let s = t.partitions[0].state.as_ref().unwrap();
            s.replicas == vec![3, 2] && s.adding.is_empty() && s.removing.is_empty()
        })
        .await
        .unwrap();
    let s = t.partitions[0].state.as_ref().unwrap();
    assert_ne!(s.leader, Some(1), "the removed replica cannot stay leader");
    assert!(!s.isr.contains(&1));
    let (_, v, _) = keel(&c, &["reassign", "list"]);
    assert_eq!(v["reassignments"], serde_json::json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_failover_mid_deletion_and_mid_reassignment_completes_both() {
    let mut c = cluster(3);
    let client = ready_with_topic(&mut c, LONG, "gone", 3, 3).await;
    create_placed_topic(&client, "moving", &[1]).await;

    // Broker 3 down: the deletion pauses and the reassignment onto 3 waits.
    kill_broker_3(&mut c).await;
    let del = pb::DeleteTopicsRequest {
        names: vec!["gone".into()],
    };
    let r = client
        .admin(|mut x| {
            let del = del.clone();
            async move { x.delete_topics(del).await }
        })
        .await
        .unwrap();
    assert!(r.topics[0].error.is_none());
    let re = pb::AlterPartitionReassignmentsRequest {
        partitions: vec![pb::ReassignablePartition {
            topic: "moving".into(),
            partition: 0,
            replicas: vec![3],
            cancel: false,
        }],
    };
    let r = client
        .admin(|mut x| {
            let re = re.clone();
            async move { x.alter_partition_reassignments(re).await }
        })
        .await
        .unwrap();
    assert!(r.partitions[0].error.is_none(), "{r:?}");

    // The active controller dies; a new one takes over both flows.
    let active = c.wait_active(LONG).await.unwrap();
    c.controller_mut(active).kill();
    c.wait_active(LONG).await.unwrap();
    c.broker_mut(2).start().unwrap();

    topic_gone(&c, "gone").await;
    c.wait_topic(
        "moving",
        "reassignment complete on the new controller",
        LONG,
        |t| {
            let s = t.partitions[0].state.as_ref().unwrap();
            s.replicas == vec![3] && s.adding.is_empty() && s.leader == Some(3)
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preferred_election_after_a_broker_returns_restores_preferred_leaders() {
    let mut c = cluster(3);
    ready_with_topic(&mut c, LONG, "pref", 6, 3).await;
    let preferred_of = |t: &pb::TopicDescription| -> Vec<(Option<u32>, u32)> {
        t.partitions
            .iter()
            .map(|p| {
                let s = p.state.as_ref().unwrap();
                (s.leader, s.replicas[0])
            })
            .collect()
    };
    c.wait_topic("pref", "preferred leaders", LONG, |t| {
        preferred_of(t).iter().all(|(l, p)| *l == Some(*p))
    })
    .await
    .unwrap();

    c.broker_mut(0).kill();
    c.wait_topic("pref", "leaders off broker 1", LONG, |t| {
        preferred_of(t)
            .iter()
            .all(|(l, _)| l.is_some() && *l != Some(1))
    })
    .await
    .unwrap();
    c.broker_mut(0).start().unwrap();
    c.wait_topic("pref", "broker 1 back in every ISR", LONG, |t| {
        t.partitions
            .iter()
            .all(|p| p.state.as_ref().unwrap().isr.contains(&1))
    })
    .await
    .unwrap();

    output_ok(
        std::process::Command::new(keel_bin()).args([
            "elect-leaders",
            "--preferred",
            "--all",
            "--bootstrap",
            &c.controller_addrs().join(","),
            "--output",
            "json",
        ]),
        "keel elect-leaders",
    );
    let t = c
        .wait_topic("pref", "preferred leaders restored", LONG, |t| {
            preferred_of(t).iter().all(|(l, p)| *l == Some(*p))
        })
        .await
        .unwrap();
    assert!(preferred_of(&t).iter().any(|(l, _)| *l == Some(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_rebalance_restores_preferred_leaders_on_its_own() {
    let mut c = cluster_with(3, &["--auto-rebalance-interval-ms", "1000"]);
    wait_ready(&mut c, LONG).await;
    create_topic(&client(&c), "auto", 6, 3).await;
    let on_preferred = |t: &pb::TopicDescription| {
        t.partitions.iter().all(|p| {
            let s = p.state.as_ref().unwrap();
            s.leader == Some(s.replicas[0])
        })
    };
    c.wait_topic("auto", "preferred leaders", LONG, on_preferred)
        .await
        .unwrap();
    c.broker_mut(1).kill();
    c.wait_topic("auto", "leaders off broker 2", LONG, |t| {
        t.partitions.iter().all(|p| {
            let l = p.state.as_ref().unwrap().leader;
            l.is_some() && l != Some(2)
        })
    })
    .await
    .unwrap();
    c.broker_mut(1).start().unwrap();
    // No election is asked for: the periodic task moves leadership back.
    c.wait_topic(
        "auto",
        "auto rebalance restored preferred leaders",
        LONG,
        on_preferred,
    )
    .await
    .unwrap();
}
