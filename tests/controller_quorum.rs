//! Real `keel controller` processes: failover, restart, refusal of foreign
//! or corrupt data dirs.

mod common;

use std::time::Duration;

use common::*;

const LONG: Duration = Duration::from_secs(60);

/// Long broker sessions: these tests use stand-in brokers that heartbeat once.
// Writes in these tests set many distinct config keys (`piped.k<n>`).
const FLAGS: &[&str] = &[
    "--session-timeout-ms",
    "600000",
    "--allow-unknown-topic-configs",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_active_controller_elects_a_new_one_and_loses_no_acknowledged_write() {
    let mut q = quorum(FLAGS);
    let client = client(&q);
    let first = q.wait_active(LONG).await.unwrap();
    for b in 1..=3 {
        register_fake_broker(&client, &q.cluster_id, b).await;
    }
    let mut acked = create_numbered_topics(&client, "before", 20, 3, 3).await;

    q.controller_mut(first).kill();
    let second = q.wait_active(LONG).await.unwrap();
    assert_ne!(first, second, "a surviving node must take over");

    let names = topic_names(&client).await;
    for n in &acked {
        assert!(
            names.contains(n),
            "acknowledged topic {n} lost after failover"
        );
    }
    acked.extend(create_numbered_topics(&client, "after", 10, 2, 3).await);

    // The dead voter is described as unreachable, not as a follower.
    let dead = first as u64 + 1;
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let d = describe_quorum(&client).await;
        let v = d
            .voters
            .iter()
            .find(|v| v.id == dead)
            .expect("dead voter listed");
        if v.status == "unreachable" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "dead voter still described as {v:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The old leader rejoins as a follower and converges.
    q.controller_mut(first).start().unwrap();
    let (index, _) = q.wait_converged(1, LONG).await.unwrap();
    assert!(index > 0);
    let d = q
        .describe_node(first, Duration::from_secs(2))
        .await
        .expect("restarted node answers");
    assert!(
        !d.active_controller,
        "the restarted node must not be active right away"
    );
    let names = topic_names(&client).await;
    for n in &acked {
        assert!(
            names.contains(n),
            "acknowledged topic {n} missing after rejoin"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_started_after_the_quorum_formed_joins_without_deposing_its_leader() {
    let mut q = quorum_except(FLAGS, 2);
    let client = client(&q);
    q.wait_active(LONG).await.unwrap();
    register_fake_broker(&client, &q.cluster_id, 1).await;
    let (index, _) = q.wait_converged(1, LONG).await.unwrap();

    // First start of the third voter: it finds a peer with a leader and
    // waits to be replicated to instead of initializing (which would make
    // it a term-1 candidate that deposes the leader). Checked through what
    // the late voter did (its log), not through the term, which an
    // unrelated election on a busy machine could also move.
    q.controller_mut(2).start().unwrap();
    q.wait_converged(index, LONG).await.unwrap();
    let late = q
        .describe_node(2, Duration::from_secs(2))
        .await
        .expect("late voter answers");
    assert!(late.leader_id.is_some(), "the late voter follows no leader");
    let log = q.controller(2).process.log_text();
    assert!(
        log.contains("waiting for its leader instead of initializing"),
        "the late voter did not find the formed quorum:\n{log}"
    );
    assert!(
        !log.contains("initialized quorum membership"),
        "the late voter initialized a membership of its own:\n{log}"
    );
    create_topic(&client, "after-join", 1, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_every_node_at_once_recovers_the_same_image_from_disk() {
    let mut q = quorum(FLAGS);
    let client = client(&q);
    q.wait_active(LONG).await.unwrap();
    for b in 1..=3 {
        register_fake_broker(&client, &q.cluster_id, b).await;
    }
    for i in 0..10 {
        create_topic(&client, &format!("t{i}"), 4, 2).await;
    }
    let (index, _) = q.wait_converged(1, LONG).await.unwrap();
    let before = metadata_view(&q);

    for i in 0..3 {
        q.controller_mut(i).kill();
    }
    for i in 0..3 {
        q.controller_mut(i).start().unwrap();
    }
    q.wait_active(LONG).await.unwrap();
    // Every node replays the same log to the same image (the hash covers
    // the applied index too, so it is compared among the nodes only: the
    // new term's blank entry may or may not be applied yet).
    let (index2, _) = q.wait_converged(index, LONG).await.unwrap();
    assert!(index2 >= index);
    // The metadata itself is what it was before the restart.
    assert_eq!(
        metadata_view(&q),
        before,
        "brokers or topics after a full restart differ from before"
    );
    let names = topic_names(&client).await;
    assert_eq!(names.len(), 10);
}

/// Brokers and topics as the CLI describes them (JSON), without the fields
/// that change with time or with the active controller.
fn metadata_view(q: &Cluster) -> serde_json::Value {
    let mut view = serde_json::Map::new();
    for what in ["cluster", "topics"] {
        let out = std::process::Command::new(keel_bin())
            .args([
                what,
                "describe",
                "--bootstrap",
                &q.controller_addrs().join(","),
                "--output",
                "json",
            ])
            .output()
            .expect("run keel");
        assert!(out.status.success(), "{what} describe failed: {out:?}");
        let mut v: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("describe prints JSON");
        if let Some(o) = v.as_object_mut() {
            o.remove("controller_epoch");
            o.remove("controller_id");
            // The quorum's roles (who leads) change with a restart; the
            // metadata is what must not.
            o.remove("controllers");
        }
        if let Some(brokers) = v.get_mut("brokers").and_then(|b| b.as_array_mut()) {
            for b in brokers {
                if let Some(b) = b.as_object_mut() {
                    b.remove("last_heartbeat_ms");
                }
            }
        }
        view.insert(what.to_string(), v);
    }
    serde_json::Value::Object(view)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_of_another_cluster_or_node_or_a_corrupt_one_is_refused() {
    let mut q = quorum(FLAGS);
    let client = client(&q);
    q.wait_active(LONG).await.unwrap();
    register_fake_broker(&client, &q.cluster_id, 1).await;
    q.wait_converged(1, LONG).await.unwrap();

    // Node 3 restarted with another cluster id: refused, with the reason.
    q.controller_mut(2).kill();
    let mut p = stray(&q, q.controller(2), "wrong-cluster", |args| {
        set_flag(args, "--cluster-id", "another-cluster")
    });
    let code = p
        .wait_exit(Duration::from_secs(30))
        .and_then(|st| st.code());
    assert!(
        matches!(code, Some(c) if c != 0),
        "node with a foreign cluster id must exit non-zero, got {code:?}"
    );
    let text = p.log_text();
    assert!(
        text.contains("another-cluster") && text.contains("keel-test"),
        "message must name both clusters: {text}"
    );

    // Node 3's data dir used as node 2's: refused.
    let node3_dir = q.controller(2).data_dir.display().to_string();
    let mut p = stray(&q, q.controller(1), "wrong-node", |args| {
        set_flag(args, "--data-dir", node3_dir);
        set_flag(args, "--listen", format!("127.0.0.1:{}", free_port()));
    });
    let code = p
        .wait_exit(Duration::from_secs(30))
        .and_then(|st| st.code());
    assert!(
        matches!(code, Some(c) if c != 0),
        "node with another node's data dir must exit non-zero"
    );
    assert!(
        p.log_text().contains("node"),
        "message must name the node id problem"
    );

    // Corrupt node 3's sled files: refused, not a panic, not a reformat.
    let raft_dir = q.controller(2).data_dir.join("raft");
    for entry in walk(&raft_dir) {
        if entry.is_file() {
            let len = std::fs::metadata(&entry).map(|m| m.len()).unwrap_or(0);
            if len > 0 {
                std::fs::write(&entry, vec![0xA5u8; len as usize]).unwrap();
            }
        }
    }
    let mut p = stray(&q, q.controller(2), "corrupt", |_| {});
    let code = p
        .wait_exit(Duration::from_secs(30))
        .and_then(|st| st.code());
    assert!(
        matches!(code, Some(c) if c != 0),
        "a corrupt data dir must stop the node"
    );
    assert!(
        !p.log_text().contains("panicked"),
        "corruption must be a clear error, not a panic: {}",
        p.log_text()
    );

    // The other two are unaffected: still a quorum that commits.
    register_fake_broker(&client, &q.cluster_id, 2).await;
    create_topic(&client, "still-works", 1, 2).await;
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_its_majority_stops_answering_as_active_controller() {
    let mut q = quorum(FLAGS);
    let active = q.wait_active(LONG).await.unwrap();
    let client = client(&q);
    register_fake_broker(&client, &q.cluster_id, 1).await;
    let followers: Vec<usize> = (0..3).filter(|i| *i != active).collect();
    for f in &followers {
        q.controller_mut(*f).process.pause();
    }
    // Longer than the lease; the old leader still believes it leads.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut admin = keel_proto::pb::admin_service_client::AdminServiceClient::connect(format!(
        "http://{}",
        q.controller_addrs()[active]
    ))
    .await
    .unwrap();
    let r = admin
        .describe_topics(keel_proto::pb::DescribeTopicsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.error.map(|e| e.code),
        Some(keel_proto::pb::ErrorCode::NotController as i32),
        "a leader without quorum contact must not serve a linearizable read"
    );
    let mut brokers = keel_proto::pb::broker_service_client::BrokerServiceClient::connect(format!(
        "http://{}",
        q.controller_addrs()[active]
    ))
    .await
    .unwrap();
    let hb = brokers
        .broker_heartbeat(keel_proto::pb::BrokerHeartbeatRequest {
            broker_id: 1,
            broker_epoch: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        hb.error.map(|e| e.code),
        Some(keel_proto::pb::ErrorCode::NotController as i32)
    );

    for f in &followers {
        q.controller_mut(*f).process.resume();
    }
    q.wait_active(LONG).await.unwrap();
    assert_eq!(topic_names(&client).await.len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voters_can_be_added_and_removed_one_at_a_time() {
    let mut q = quorum(FLAGS);
    q.wait_active(LONG).await.unwrap();
    let client = client(&q);
    register_fake_broker(&client, &q.cluster_id, 1).await;
    create_topic(&client, "before", 1, 1).await;

    // A fourth node joins (no bootstrap) and is promoted once it answers.
    let i4 = q.add_joining_controller().unwrap();
    start_and_wait(&mut q, i4).await;
    let addr4 = q.nodes[i4].address();

    let bootstrap = q.controller_addrs()[..3].join(",");
    let run = |args: &[&str]| {
        let out = output_ok(
            std::process::Command::new(keel_bin()).args(args).args([
                "--bootstrap",
                &bootstrap,
                "--output",
                "json",
            ]),
            &format!("keel {args:?}"),
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or(serde_json::Value::Null)
    };
    run(&["quorum", "add-voter", "--node-id", "4", "--address", &addr4]);
    let v = run(&["quorum", "describe"]);
    let voters: Vec<u64> = v["voters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["status"] != "learner")
        .map(|x| x["id"].as_u64().unwrap())
        .collect();
    assert_eq!(voters, vec![1, 2, 3, 4]);

    // Remove node 1 (whatever its role); the quorum keeps committing.
    run(&["quorum", "remove-voter", "--node-id", "1"]);
    let deadline = std::time::Instant::now() + LONG;
    loop {
        let out = std::process::Command::new(keel_bin())
            .args([
                "quorum",
                "describe",
                "--output",
                "json",
                "--bootstrap",
                &q.controller_addrs()[1..].join(","),
            ])
            .output()
            .unwrap();
        if out.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let ids: Vec<u64> = v["voters"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|x| x["status"] != "learner")
                .map(|x| x["id"].as_u64().unwrap())
                .collect();
            if ids == vec![2, 3, 4] {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "node 1 was never removed"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let client = keel_proto::client::ControllerClient::new(q.controller_addrs()[1..].to_vec())
        .with_timeouts(Duration::from_secs(5), Duration::from_secs(60));
    create_topic(&client, "after", 1, 1).await;
    let names = topic_names(&client).await;
    assert!(names.contains(&"before".to_string()) && names.contains(&"after".to_string()));
    // The joined node holds the same image as the others.
    q.controller_mut(0).kill();
    let (_, hash) = q.wait_converged(1, LONG).await.unwrap();
    assert!(!hash.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_session_pipelines_writes_and_answers_each_by_id() {
    use keel_proto::pb;
    use keel_proto::pb::admin_service_client::AdminServiceClient;
    use keel_proto::pb::write_request::Op;
    use keel_proto::pb::write_response::Result as Answer;
    use keel_proto::session::WriteSession;
    use tonic::transport::Endpoint;

    const KEYS: usize = 200;
    let mut q = quorum(FLAGS);
    let client = client(&q);
    let active = q.wait_active(LONG).await.unwrap();
    register_fake_broker(&client, &q.cluster_id, 1).await;
    let addrs = q.controller_addrs();
    let channel = |i: usize| {
        let e = Endpoint::from_shared(format!("http://{}", addrs[i])).expect("endpoint");
        async move { e.connect().await }
    };
    let mut s = WriteSession::open(channel(active).await.expect("connect"))
        .await
        .expect("open session");

    match s
        .call(Op::CreateTopics(one_partition_topic("piped")))
        .await
        .expect("create")
    {
        Answer::CreateTopics(r) => {
            assert!(r.error.is_none(), "{r:?}");
            assert!(r.topics[0].error.is_none(), "{r:?}");
        }
        other => panic!("create answered {other:?}"),
    }

    // All writes in flight at once, then every answer, by id.
    let set =
        |topic: &str, k: usize| admin::set_config(topic, format!("piped.k{k}"), format!("v{k}"));
    // A write of a 5 MiB value: too large for the controller.
    let huge = || {
        Op::IncrementalAlterConfigs(admin::set_config(
            "piped",
            "piped.k0".into(),
            "x".repeat(5 << 20),
        ))
    };
    let mut sent = std::collections::BTreeMap::new();
    for k in 0..KEYS {
        let id = s
            .send(Op::IncrementalAlterConfigs(set("piped", k)))
            .await
            .expect("send");
        sent.insert(id, true);
    }
    // One write that must be refused on its own, without ending the session.
    let refused = s
        .send(Op::IncrementalAlterConfigs(set("no-such-topic", 0)))
        .await
        .expect("send");
    sent.insert(refused, false);
    for _ in 0..sent.len() {
        let (id, answer) = s.recv().await.expect("answer");
        let ok = sent.remove(&id).expect("an answer for a sent id, once");
        let Answer::IncrementalAlterConfigs(r) = answer else {
            panic!("write {id} answered {answer:?}");
        };
        assert!(r.error.is_none(), "write {id}: {r:?}");
        assert_eq!(r.topics[0].error.is_none(), ok, "write {id}: {r:?}");
    }

    // A write too large for the controller is refused before it is sent;
    // the session stays usable.
    let e = s.send(huge()).await.expect_err("a 5 MiB write is refused");
    assert!(
        matches!(e, keel_proto::session::SessionError::TooLarge(_)),
        "{e}"
    );
    match s
        .call(Op::IncrementalAlterConfigs(set("piped", 0)))
        .await
        .expect("the session still answers")
    {
        Answer::IncrementalAlterConfigs(r) => assert!(r.error.is_none(), "{r:?}"),
        other => panic!("answered {other:?}"),
    }

    // One session shared by many tasks: each call gets its own answer.
    let shared = keel_proto::session::SharedSession::open(channel(active).await.expect("connect"))
        .await
        .expect("open shared session");
    let mut tasks = Vec::new();
    for t in 0..32usize {
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..10usize {
                let k = 1_000 + t * 10 + i;
                let topic = if k % 50 == 0 {
                    "no-such-topic"
                } else {
                    "piped"
                };
                let answer = shared
                    .call(Op::IncrementalAlterConfigs(set(topic, k)))
                    .await
                    .expect("shared call");
                let Answer::IncrementalAlterConfigs(r) = answer else {
                    panic!("shared write {k} answered {answer:?}");
                };
                assert!(r.error.is_none(), "shared write {k}: {r:?}");
                assert_eq!(
                    r.topics[0].error.is_none(),
                    topic == "piped",
                    "shared write {k} is answered for its own topic: {r:?}"
                );
            }
        }));
    }
    for t in tasks {
        t.await.expect("shared writer");
    }
    let e = shared
        .call(huge())
        .await
        .expect_err("a 5 MiB write is refused");
    assert!(
        matches!(e, keel_proto::session::SessionError::TooLarge(_)),
        "{e}"
    );
    let configs = topic_configs(&client, "piped").await;
    // Every write acknowledged on either session is visible.
    for k in (0..KEYS).chain((1_000..1_320).filter(|k| k % 50 != 0)) {
        assert!(
            configs
                .iter()
                .any(|c| c.key == format!("piped.k{k}") && c.value == format!("v{k}")),
            "acknowledged config piped.k{k} missing"
        );
    }
    drop(shared);

    // A request naming no op is refused with INVALID_REQUEST.
    let mut raw = AdminServiceClient::new(channel(active).await.expect("connect"));
    let mut answers = raw
        .write(tokio_stream::iter(vec![pb::WriteRequest {
            id: 7,
            op: None,
        }]))
        .await
        .expect("open raw session")
        .into_inner();
    let a = answers
        .message()
        .await
        .expect("answer")
        .expect("one answer");
    assert_eq!(a.id, 7);
    match a.result {
        Some(Answer::Error(e)) => assert_eq!(e.code, pb::ErrorCode::InvalidRequest as i32),
        other => panic!("empty write answered {other:?}"),
    }
    assert!(
        answers.message().await.expect("clean end").is_none(),
        "the session ends once the client's side is closed and answered"
    );

    // A standby answers writes with NOT_CONTROLLER and a leader hint (once
    // it has heard from the leader: wait until all nodes caught up).
    q.wait_converged(0, LONG).await.unwrap();
    let standby = (active + 1) % 3;
    let mut s = WriteSession::open(channel(standby).await.expect("connect"))
        .await
        .expect("open session");
    match s
        .call(Op::IncrementalAlterConfigs(set("piped", 0)))
        .await
        .expect("answer")
    {
        Answer::IncrementalAlterConfigs(r) => {
            let e = r.error.expect("refused");
            assert_eq!(e.code, pb::ErrorCode::NotController as i32);
            assert_eq!(
                e.leader.map(|l| l.address),
                Some(q.controller_addrs()[active].clone()),
                "the hint names the active controller"
            );
        }
        other => panic!("standby answered {other:?}"),
    }
}

/// With a 1 MiB write budget, writes larger than the whole budget (each
/// then runs alone) and small writes on one shared session and on unary
/// calls all complete: the budget holds writes back but never wedges them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_write_budget_holds_writes_back_without_losing_any() {
    use keel_proto::pb;
    use keel_proto::pb::write_request::Op;
    use keel_proto::pb::write_response::Result as Answer;
    use keel_proto::session::SharedSession;
    use tonic::transport::Endpoint;

    // Values past the default config-value limit, to fill the budget.
    let mut q = quorum(&[
        "--session-timeout-ms",
        "600000",
        "--write-budget-mb",
        "1",
        "--max-config-value-bytes",
        "2097152",
        "--allow-unknown-topic-configs",
    ]);
    let client = client(&q);
    let active = q.wait_active(LONG).await.unwrap();
    register_fake_broker(&client, &q.cluster_id, 1).await;
    let endpoint = Endpoint::from_shared(format!("http://{}", q.controller_addrs()[active]))
        .expect("endpoint");
    let session = SharedSession::open(endpoint.connect().await.expect("connect"))
        .await
        .expect("open shared session");
    match session
        .call(Op::CreateTopics(one_partition_topic("budget")))
        .await
        .expect("create")
    {
        Answer::CreateTopics(r) => assert!(r.topics[0].error.is_none(), "{r:?}"),
        other => panic!("create answered {other:?}"),
    }

    // Every eighth key gets a value of 1.5 MiB, the others a short one.
    let value = |k: usize| {
        if k.is_multiple_of(8) {
            format!("v{k}-{}", "x".repeat(3 << 19))
        } else {
            format!("v{k}")
        }
    };
    let set = move |k: usize| pb::IncrementalAlterConfigsRequest {
        topics: vec![pb::AlterTopicConfig {
            topic: "budget".into(),
            ops: vec![pb::AlterConfigOp {
                key: format!("budget.k{k}"),
                value: value(k),
                op: pb::ConfigOp::Set as i32,
            }],
        }],
        validate_only: false,
    };
    let mut tasks = Vec::new();
    for t in 0..8usize {
        let session = session.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..6usize {
                let k = t * 6 + i;
                let answer = session
                    .call(Op::IncrementalAlterConfigs(set(k)))
                    .await
                    .expect("session write");
                let Answer::IncrementalAlterConfigs(r) = answer else {
                    panic!("write {k} answered {answer:?}");
                };
                assert!(
                    r.error.is_none() && r.topics[0].error.is_none(),
                    "write {k}: {r:?}"
                );
            }
        }));
    }
    // Unary writes share the same budget.
    for k in 48..56usize {
        let r = client
            .admin(|mut c| async move { c.incremental_alter_configs(set(k)).await })
            .await
            .expect("unary write");
        assert!(
            r.error.is_none() && r.topics[0].error.is_none(),
            "unary {k}: {r:?}"
        );
    }
    for t in tasks {
        tokio::time::timeout(LONG, t)
            .await
            .expect("session writers finish")
            .expect("session writer");
    }
    let configs = topic_configs(&client, "budget").await;
    for k in 0..56usize {
        assert!(
            configs
                .iter()
                .any(|c| c.key == format!("budget.k{k}") && c.value == value(k)),
            "acknowledged config budget.k{k} missing"
        );
    }
}

/// Creates `name` with one partition on one replica.
fn one_partition_topic(name: &str) -> keel_proto::pb::CreateTopicsRequest {
    admin::create_topics_request(vec![admin::creatable(name, 1, 1)])
}

/// The configs of topic `name`, as the active controller describes them.
async fn topic_configs(
    client: &keel_proto::client::ControllerClient,
    name: &str,
) -> Vec<keel_proto::pb::ConfigEntry> {
    let name = name.to_string();
    let mut described = client
        .admin(|mut c| {
            let name = name.clone();
            async move {
                c.describe_topics(keel_proto::pb::DescribeTopicsRequest { names: vec![name] })
                    .await
            }
        })
        .await
        .expect("describe");
    std::mem::take(&mut described.topics[0].configs)
}

/// Runs `keel ARGS -o json --bootstrap` the first three controllers;
/// returns whether it succeeded, its JSON answer (or error object) and its
/// stderr.
fn keel_json(q: &Cluster, args: &[&str]) -> (bool, serde_json::Value, String) {
    let bootstrap = q.controller_addrs()[..3].join(",");
    let out = std::process::Command::new(keel_bin())
        .args(args)
        .args(["--bootstrap", &bootstrap, "--output", "json"])
        .output()
        .expect("run keel");
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (
        out.status.success(),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The quorum's members as the active controller describes them:
/// (voters, learners).
async fn members(client: &keel_proto::client::ControllerClient) -> (Vec<u64>, Vec<u64>) {
    let d = describe_quorum(client).await;
    let (learners, voters): (Vec<_>, Vec<_>) = d.voters.iter().partition(|v| v.status == "learner");
    (
        voters.iter().map(|v| v.id).collect(),
        learners.iter().map(|v| v.id).collect(),
    )
}

/// The code of the error object `keel -o json` printed.
fn json_error_code(v: &serde_json::Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_voter_of_a_node_that_is_not_there_or_not_that_node_is_refused_at_once_and_changes_nothing(
) {
    let mut q = quorum(FLAGS);
    q.wait_active(LONG).await.unwrap();
    let client = client(&q);
    let i4 = q.add_joining_controller().unwrap();
    start_and_wait(&mut q, i4).await;
    let addr4 = q.nodes[i4].address();
    let nobody = format!("127.0.0.1:{}", free_port());
    let wrong_dir = "0123456789abcdef0123456789abcdef";
    for (what, args) in [
        (
            "an address nobody listens at",
            vec!["--node-id", "4", "--address", &nobody],
        ),
        (
            "another node's id",
            vec!["--node-id", "5", "--address", &addr4],
        ),
        (
            "another data dir",
            vec![
                "--node-id",
                "4",
                "--address",
                &addr4,
                "--directory-id",
                wrong_dir,
            ],
        ),
    ] {
        let started = std::time::Instant::now();
        let mut all = vec!["quorum", "add-voter"];
        all.extend(args);
        let (ok, v, stderr) = keel_json(&q, &all);
        assert!(!ok, "add-voter with {what} was accepted: {v} {stderr}");
        assert_eq!(json_error_code(&v), "INVALID_QUORUM_CHANGE", "{what}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("nothing changed"),
            "{what}: {v}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "add-voter with {what} took {:?}",
            started.elapsed()
        );
        assert_eq!(
            members(&client).await,
            (vec![1, 2, 3], vec![]),
            "add-voter with {what} changed the membership"
        );
    }
    // The right node, with no directory id named: its own is bound.
    let (ok, v, stderr) = keel_json(
        &q,
        &["quorum", "add-voter", "--node-id", "4", "--address", &addr4],
    );
    assert!(ok, "{v} {stderr}");
    let node4 = q
        .describe_node(i4, Duration::from_secs(2))
        .await
        .expect("node 4 answers");
    assert_eq!(v["directory_id"], node4.directory_id.as_str(), "{v}");
    assert_eq!(members(&client).await, (vec![1, 2, 3, 4], vec![]));
}

/// Starts `q.nodes[i]` and waits until it answers.
async fn start_and_wait(q: &mut Cluster, i: usize) {
    q.nodes[i].start().unwrap();
    let deadline = std::time::Instant::now() + LONG;
    while q.describe_node(i, Duration::from_secs(1)).await.is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "node {i} never answered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Adds node 4 (started with `--join`) as a learner only, then kills it:
/// a learner that never catches up again. Returns its index.
async fn add_learner_then_kill_it(q: &mut Cluster) -> usize {
    let i4 = q.add_joining_controller().unwrap();
    start_and_wait(q, i4).await;
    let addr4 = q.nodes[i4].address();
    let (ok, v, stderr) = keel_json(
        q,
        &[
            "quorum",
            "add-voter",
            "--node-id",
            "4",
            "--address",
            &addr4,
            "--learner-only",
        ],
    );
    assert!(ok, "{v} {stderr}");
    assert_eq!(v["learner"], true, "{v}");
    q.nodes[i4].kill();
    i4
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_that_went_away_is_removed_by_remove_learner_and_stays_removed_after_restarts() {
    let mut q = quorum(FLAGS);
    q.wait_active(LONG).await.unwrap();
    let client = client(&q);
    add_learner_then_kill_it(&mut q).await;
    assert_eq!(members(&client).await, (vec![1, 2, 3], vec![4]));

    // Not a voter: remove-voter's old answer; remove-learner removes it.
    let (ok, v, stderr) = keel_json(&q, &["quorum", "remove-learner", "--node-id", "4"]);
    assert!(ok, "{v} {stderr}");
    assert_eq!(members(&client).await, (vec![1, 2, 3], vec![]));
    // A voter is not a learner.
    let (ok, v, _) = keel_json(&q, &["quorum", "remove-learner", "--node-id", "2"]);
    assert!(!ok, "remove-learner removed voter 2: {v}");
    assert_eq!(json_error_code(&v), "INVALID_QUORUM_CHANGE", "{v}");

    // Every controller restarts: the learner stays gone.
    for i in 0..3 {
        q.controller_mut(i).kill();
    }
    for i in 0..3 {
        q.controller_mut(i).start().unwrap();
    }
    q.wait_active(LONG).await.unwrap();
    let client = self::client(&q);
    assert_eq!(members(&client).await, (vec![1, 2, 3], vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_that_never_answers_is_logged_about_once_not_on_every_retry() {
    let mut q = quorum(FLAGS);
    let active = q.wait_active(LONG).await.unwrap();
    let client = client(&q);
    add_learner_then_kill_it(&mut q).await;
    // The kill itself is reported (a reset, then a refused connection);
    // what follows is the steady state.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = q.controller(active).process.log_text().lines().count();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let log = q.controller(active).process.log_text();
    let about: Vec<&str> = log
        .lines()
        .skip(before)
        .filter(|l| l.contains("target=4") || l.contains("node 4") || l.contains("target_node=4"))
        .collect();
    assert!(
        about.len() <= 2,
        "{} lines in 10 s about the missing learner:\n{}",
        about.len(),
        about.join("\n")
    );
    // remove-voter on a learner removes it too, and says so.
    let (ok, v, stderr) = keel_json(&q, &["quorum", "remove-voter", "--node-id", "4"]);
    assert!(ok, "{v} {stderr}");
    assert_eq!(v["was_learner"], true, "{v}");
    assert_eq!(members(&client).await, (vec![1, 2, 3], vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_voter_that_would_leave_no_live_majority_is_refused_and_changes_nothing() {
    let mut q = quorum(FLAGS);
    let active = q.wait_active(LONG).await.unwrap();
    let client = client(&q);
    register_fake_broker(&client, &q.cluster_id, 1).await;
    let dead = (active + 1) % 3;
    let live = (active + 2) % 3;
    q.controller_mut(dead).kill();
    // Wait until the leader calls it unreachable.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (ok, v, _) = keel_json(&q, &["quorum", "describe"]);
        let unreachable = ok
            && v["voters"].as_array().is_some_and(|vs| {
                vs.iter()
                    .any(|x| x["id"] == dead as u64 + 1 && x["status"] == "unreachable")
            });
        if unreachable {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "voter never unreachable: {v}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let live_id = (live as u64 + 1).to_string();
    let started = std::time::Instant::now();
    let (ok, v, stderr) = keel_json(&q, &["quorum", "remove-voter", "--node-id", &live_id]);
    assert!(
        !ok,
        "removing live voter {live_id} with another down was accepted: {v} {stderr}"
    );
    assert_eq!(json_error_code(&v), "INVALID_QUORUM_CHANGE", "{v}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(members(&client).await, (vec![1, 2, 3], vec![]));
    // The quorum still commits.
    create_topic(&client, "still-writable", 1, 1).await;
    // Removing the dead one leaves a live majority.
    let dead_id = (dead as u64 + 1).to_string();
    let (ok, v, stderr) = keel_json(&q, &["quorum", "remove-voter", "--node-id", &dead_id]);
    assert!(ok, "{v} {stderr}");
    let mut left = vec![1, 2, 3];
    left.retain(|v| *v != dead as u64 + 1);
    assert_eq!(members(&client).await, (left, vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unregister_of_a_broker_that_still_heartbeats_is_refused_unless_forced() {
    let q = quorum(FLAGS);
    let client = client(&q);
    register_fake_broker(&client, &q.cluster_id, 1).await;
    // Broker 2 registered a moment ago and is not unfenced yet: fenced,
    // but alive.
    let r = client
        .broker(|mut c| {
            let req = keel_proto::pb::RegisterBrokerRequest {
                broker_id: 2,
                incarnation_id: 2002u128.to_be_bytes().to_vec(),
                cluster_id: q.cluster_id.clone(),
                address: "127.0.0.1:3".into(),
                ..Default::default()
            };
            async move { c.register_broker(req).await }
        })
        .await
        .expect("registered");
    assert!(r.error.is_none(), "{:?}", r.error);
    for id in ["1", "2"] {
        let (ok, v, stderr) = keel_json(&q, &["cluster", "unregister-broker", "--id", id]);
        assert!(!ok, "live broker {id} unregistered: {v} {stderr}");
        assert_eq!(json_error_code(&v), "BROKER_NOT_FENCED", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("stop it"),
            "{v}"
        );
    }
    let d = admin::describe_cluster(&client).await.expect("described");
    assert_eq!(d.brokers.len(), 2, "{d:?}");
    // --force: the fenced one goes; the unfenced one is still refused.
    let (ok, v, stderr) = keel_json(
        &q,
        &["cluster", "unregister-broker", "--id", "2", "--force"],
    );
    assert!(ok, "{v} {stderr}");
    let (ok, v, _) = keel_json(
        &q,
        &["cluster", "unregister-broker", "--id", "1", "--force"],
    );
    assert!(!ok, "unfenced broker 1 unregistered: {v}");
}
