//! Limits on real processes: each one just below its value passes, just
//! above it is refused with a typed error naming it, and nothing is
//! written; a request far past the partition limits leaves the active
//! controller's memory where it was. A broker's listener limits take
//! effect, and a zero one stops it at start.

mod common;

use std::time::Duration;

use common::error_code as code;
use common::*;
use keel_metadata::ErrorCode;
use keel_proto::client::ControllerClient;
use keel_proto::pb;
use keel_testkit::admin::{creatable, set_config};

const LONG: Duration = Duration::from_secs(90);

const LIMITS: &[&str] = &[
    "--max-topics-per-request",
    "3",
    "--max-partitions-per-request",
    "20",
    "--max-partitions",
    "30",
    "--max-configs-per-topic",
    "2",
    "--max-config-value-bytes",
    "16",
    "--max-partitions-per-plan",
    "2",
    "--max-acls-per-request",
    "1",
    "--max-message-bytes",
    "65536",
    "--max-linearizable-reads-per-sec",
    "20",
    // The config limits are exercised with keys of their own (k1, k2, ...).
    "--allow-unknown-topic-configs",
];

/// (top-level error code and message, per-topic codes).
async fn create(
    client: &ControllerClient,
    topics: Vec<pb::CreatableTopic>,
    validate_only: bool,
) -> (ErrorCode, String, Vec<ErrorCode>) {
    let req = pb::CreateTopicsRequest {
        topics,
        validate_only,
    };
    let r = create_topics_answer(client, &req).await;
    (
        code(&r.error),
        r.error.map(|e| e.message).unwrap_or_default(),
        r.topics.iter().map(|t| code(&t.error)).collect(),
    )
}

fn with_configs(name: &str, configs: &[(&str, &str)]) -> pb::CreatableTopic {
    let mut t = creatable(name, 1, 1);
    t.configs = configs
        .iter()
        .map(|(k, v)| pb::ConfigEntry {
            key: k.to_string(),
            value: v.to_string(),
        })
        .collect();
    t
}

async fn alter(client: &ControllerClient, topic: &str, key: &str, value: &str) -> ErrorCode {
    let req = set_config(topic, key.into(), value.into());
    let r = client
        .admin_write(|mut c| {
            let req = req.clone();
            async move { c.incremental_alter_configs(req).await }
        })
        .await
        .expect("alter configs answered");
    match code(&r.error) {
        ErrorCode::None => code(&r.topics[0].error),
        top => top,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_limit_holds_at_its_value_and_refuses_past_it_writing_nothing() {
    let mut c = cluster_with(1, LIMITS);
    let active = wait_ready(&mut c, LONG).await;
    let client = client(&c);
    let pv = ErrorCode::PolicyViolation;

    // Topics per request: 3 pass (validated), 4 are refused and nothing
    // is created.
    let three: Vec<_> = (0..3).map(|i| creatable(&format!("v{i}"), 1, 1)).collect();
    let (top, _, each) = create(&client, three, true).await;
    assert_eq!((top, each), (ErrorCode::None, vec![ErrorCode::None; 3]));
    let four: Vec<_> = (0..4).map(|i| creatable(&format!("w{i}"), 1, 1)).collect();
    let (top, msg, _) = create(&client, four, false).await;
    assert_eq!(top, pv, "{msg}");
    assert!(msg.contains("max_topics_per_request = 3"), "{msg}");
    assert!(topic_names(&client).await.is_empty());

    // Partitions per request: 20 pass, 21 do not.
    let (top, msg, _) = create(
        &client,
        vec![creatable("a", 10, 1), creatable("b", 11, 1)],
        false,
    )
    .await;
    assert_eq!(top, pv, "{msg}");
    assert!(msg.contains("--max-partitions-per-request"), "{msg}");
    let (top, _, each) = create(
        &client,
        vec![creatable("a", 10, 1), creatable("b", 10, 1)],
        false,
    )
    .await;
    assert_eq!((top, each), (ErrorCode::None, vec![ErrorCode::None; 2]));
    // Partitions in the cluster: 20 held, 10 more reach 30, one more not.
    let (top, msg, _) = create(&client, vec![creatable("c", 11, 1)], false).await;
    assert_eq!(top, pv, "{msg}");
    assert!(msg.contains("max_partitions = 30"), "{msg}");
    let (top, _, _) = create(&client, vec![creatable("c", 10, 1)], true).await;
    assert_eq!(top, ErrorCode::None);
    let grow = pb::CreatePartitionsRequest {
        topics: vec![pb::CreatePartitionsTopic {
            name: "a".into(),
            total: 21,
            assignments: vec![],
        }],
        validate_only: false,
    };
    let r = client
        .admin_write(|mut cl| {
            let grow = grow.clone();
            async move { cl.create_partitions(grow).await }
        })
        .await
        .unwrap();
    assert_eq!(code(&r.error), pv, "{:?}", r.error);
    let mut names = topic_names(&client).await;
    names.sort();
    assert_eq!(names, ["a", "b"]);

    // Configs per topic and bytes per value.
    let sixteen = "x".repeat(16);
    let (top, _, each) = create(
        &client,
        vec![with_configs("d", &[("k1", &sixteen), ("k2", "v")])],
        false,
    )
    .await;
    assert_eq!((top, each), (ErrorCode::None, vec![ErrorCode::None]));
    let (top, msg, _) = create(
        &client,
        vec![with_configs("e", &[("k1", "v"), ("k2", "v"), ("k3", "v")])],
        false,
    )
    .await;
    assert_eq!(top, pv, "{msg}");
    let seventeen = "x".repeat(17);
    let (top, msg, _) = create(
        &client,
        vec![with_configs("e", &[("k", &seventeen)])],
        false,
    )
    .await;
    assert_eq!(top, pv, "{msg}");
    assert!(msg.contains("--max-config-value-bytes"), "{msg}");
    assert_eq!(alter(&client, "d", "k1", &seventeen).await, pv);
    assert_eq!(alter(&client, "d", "k3", "v").await, pv);
    assert_eq!(alter(&client, "d", "k2", "w").await, ErrorCode::None);
    let d = keel_testkit::admin::describe_topic(&client, "d")
        .await
        .unwrap()
        .expect("topic d exists");
    let mut configs: Vec<(String, String)> =
        d.configs.into_iter().map(|c| (c.key, c.value)).collect();
    configs.sort();
    assert_eq!(
        configs,
        [
            ("k1".to_string(), sixteen.clone()),
            ("k2".into(), "w".into())
        ]
    );

    // Partitions per plan.
    let elect = |n: u32| pb::ElectLeadersRequest {
        election_type: pb::ElectionType::Preferred as i32,
        partitions: (0..n)
            .map(|p| pb::TopicPartitionRef {
                topic: "a".into(),
                partition: p,
            })
            .collect(),
    };
    for (n, want) in [(2, ErrorCode::None), (3, pv)] {
        let req = elect(n);
        let r = client
            .admin_write(|mut cl| {
                let req = req.clone();
                async move { cl.elect_leaders(req).await }
            })
            .await
            .unwrap();
        assert_eq!(code(&r.error), want, "{n} partitions: {:?}", r.error);
    }

    // ACL entries per request.
    let binding = |name: &str| {
        keel_proto::convert::acl_binding_to_pb(&keel_metadata::acl::AclBinding {
            principal: format!("User:{name}").parse().unwrap(),
            pattern: keel_metadata::acl::ResourcePattern::Cluster,
            operation: keel_metadata::acl::Operation::Describe,
            permission: keel_metadata::acl::Permission::Allow,
        })
    };
    for (bindings, want) in [
        (vec![binding("a")], ErrorCode::None),
        (vec![binding("b"), binding("c")], pv),
    ] {
        let req = pb::CreateAclsRequest { bindings };
        let r = client
            .admin_write(|mut cl| {
                let req = req.clone();
                async move { cl.create_acls(req).await }
            })
            .await
            .unwrap();
        assert_eq!(code(&r.error), want, "{:?}", r.error);
    }

    // Message size: a request past --max-message-bytes is refused by the
    // transport, naming the limit.
    let huge = pb::DescribeTopicsRequest {
        names: (0..400).map(|i| format!("{i:0>200}")).collect(),
    };
    let mut raw = keel_proto::pb::admin_service_client::AdminServiceClient::new(
        keel_tls::transport::endpoint(&c.controller(active).address())
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    let s = raw.describe_topics(huge).await.expect_err("too large");
    assert!(s.message().contains("65536"), "{s:?}");

    // A request far past the partition limits builds nothing: the active
    // controller's memory stays where it was.
    let before = c.controller(active).rss_bytes();
    for _ in 0..5 {
        let many: Vec<_> = (0..3)
            .map(|i| creatable(&format!("big{i}"), 100_000, 1))
            .collect();
        let (top, _, _) = create(&client, many, true).await;
        assert_eq!(top, pv);
    }
    let after = c.controller(active).rss_bytes();
    assert!(
        after < before + (32 << 20),
        "RSS grew from {before} to {after} bytes"
    );

    // Linearizable reads: past 20 a second, some are refused, typed.
    let mut throttled = 0;
    for _ in 0..200 {
        let r = client
            .admin(|mut cl| async move {
                cl.describe_cluster(pb::DescribeClusterRequest::default())
                    .await
            })
            .await
            .unwrap();
        if code(&r.error) == ErrorCode::ThrottlingQuotaExceeded {
            throttled += 1;
            assert!(
                r.error
                    .unwrap()
                    .message
                    .contains("--max-linearizable-reads-per-sec"),
                "names the limit"
            );
        }
    }
    assert!(throttled > 0, "200 reads at once were never throttled");
    c.check_alive().unwrap();
}

/// Everything a broker prints when refused at start.
fn refused_at_start(mut p: Process) -> String {
    let st = p
        .wait_exit(LONG)
        .unwrap_or_else(|| panic!("{} did not exit:\n{}", p.name, p.log_text()));
    let log = p.log_text();
    assert_eq!(st.code(), Some(2), "{log}");
    log
}

/// The broker's listener limits are its own options (flag, `KEEL_BROKER_*`
/// variable, TOML key): a controller request past `--max-message-bytes` is
/// refused naming the size, a request the broker cannot finish is
/// cancelled after `--request-timeout-ms`, the controller's own requests
/// still get through, and a zero stops the broker at start naming the
/// option.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_brokers_listener_limits_are_options_and_zero_is_refused() {
    let mut c = Cluster::start(Spec::new(keel_bin(), CLUSTER_ID).brokers(1).broker_flags(&[
        "--max-message-bytes",
        "65536",
        "--request-timeout-ms",
        "3000",
        "--max-concurrent-streams",
        "16",
    ]))
    .expect("start a cluster");
    wait_ready(&mut c, LONG).await;

    // The controller's requests fit: a new topic's leadership reaches the
    // broker.
    let client = client(&c);
    create_topic(&client, "small", 3, 1).await;
    let ch = keel_tls::transport::endpoint(&c.broker(0).address())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut ctl = pb::broker_control_service_client::BrokerControlServiceClient::new(ch.clone());
    let deadline = std::time::Instant::now() + LONG;
    loop {
        let d = ctl
            .describe_broker(pb::DescribeBrokerRequest {})
            .await
            .unwrap()
            .into_inner();
        if d.cache.iter().filter(|p| p.topic == "small").count() == 3 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the broker never learned of topic small:\n{}",
            c.log_tails(20)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Past --max-message-bytes: refused by the transport, naming the limit.
    let big = pb::UpdateMetadataRequest {
        partitions: (0..1_000)
            .map(|i| pb::PartitionState {
                topic: format!("{i:0>100}"),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let s = ctl.update_metadata(big).await.expect_err("too large");
    assert_eq!(s.code(), tonic::Code::OutOfRange, "{s:?}");
    assert!(s.message().contains("65536"), "{s:?}");

    // A request whose body never ends is cancelled by the broker after
    // --request-timeout-ms (the client sets no deadline of its own).
    let mut grpc = tonic::client::Grpc::new(ch);
    grpc.ready().await.unwrap();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/keel.v1.BrokerControlService/DescribeBroker",
    );
    let never = tokio_stream::pending::<pb::DescribeBrokerRequest>();
    let call = grpc.client_streaming::<_, _, pb::DescribeBrokerResponse, _>(
        tonic::Request::new(never),
        path,
        tonic_prost::ProstCodec::default(),
    );
    let s = tokio::time::timeout(LONG, call)
        .await
        .expect("the broker cancels the request")
        .expect_err("a request without a body is not answered");
    assert_eq!(s.code(), tonic::Code::Cancelled, "{s:?}");
    assert!(s.message().contains("Timeout expired"), "{s:?}");

    // Zero, as a flag, a variable or a key of the file: the broker does
    // not start, and says which option. (Refused before it touches the
    // data dir, so these twins of broker 1 never run.)
    let node = c.broker(0);
    let log = refused_at_start(stray(&c, node, "zero-streams", |args| {
        set_flag(args, "--max-concurrent-streams", "0")
    }));
    assert!(log.contains("--max-concurrent-streams"), "{log}");

    let mut launch = node.process.launch.clone();
    let at = launch
        .args
        .iter()
        .position(|a| a == "--request-timeout-ms")
        .unwrap();
    launch.args.drain(at..at + 2);
    launch
        .env
        .push(("KEEL_BROKER_REQUEST_TIMEOUT_MS".into(), "0".into()));
    let mut p = Process::new("zero-timeout", launch, c.dir().join("zero-timeout.log"));
    p.start().unwrap();
    let log = refused_at_start(p);
    assert!(log.contains("--request-timeout-ms"), "{log}");

    let file = c.dir().join("zero-bytes.toml");
    std::fs::write(&file, "max_message_bytes = 0\n").unwrap();
    let log = refused_at_start(stray(&c, node, "zero-bytes", |args| {
        let at = args
            .iter()
            .position(|a| a == "--max-message-bytes")
            .unwrap();
        args.splice(
            at..at + 2,
            ["--config".to_string(), file.display().to_string()],
        );
    }));
    assert!(
        log.contains("max_message_bytes must be at least 1"),
        "{log}"
    );
    c.check_alive().unwrap();
}
