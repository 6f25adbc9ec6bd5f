//! Limits on real processes: each one just below its value passes, just
//! above it is refused with a typed error naming it, and nothing is
//! written; a request far past the partition limits leaves the active
//! controller's memory where it was.

mod common;

use std::time::Duration;

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
];

fn code(e: &Option<pb::Error>) -> ErrorCode {
    e.as_ref()
        .and_then(|e| ErrorCode::from_i32(e.code))
        .unwrap_or(ErrorCode::None)
}

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
    let r = client
        .admin_write(|mut c| {
            let req = req.clone();
            async move { c.create_topics(req).await }
        })
        .await
        .expect("create topics answered");
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
    let active = c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
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
