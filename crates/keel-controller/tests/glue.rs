//! The controller's gRPC glue, called directly (no network between the
//! test and the services): how a request becomes a command, how its
//! decision becomes the reply, and how errors map to wire codes. A
//! single-voter controller runs in this process on a loopback port.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use keel_controller::admin::AdminApi;
use keel_controller::broker_api::BrokerApi;
use keel_controller::{ControllerConfig, ControllerNode};
use keel_proto::pb;
use keel_proto::pb::admin_service_server::AdminService;
use keel_proto::pb::broker_service_server::BrokerService;
use tonic::Request;

const CLUSTER: &str = "glue";

fn free_addr() -> SocketAddr {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// A controller with `voters` (its own id is 1) on a free port.
async fn node(
    dir: &tempfile::TempDir,
    voters: Vec<(u64, String)>,
    listen: SocketAddr,
) -> ControllerNode {
    let mut config =
        ControllerConfig::new(1, listen, voters, dir.path().join("c1"), CLUSTER.into());
    config.session_timeout_ms = 600_000;
    ControllerNode::start(config)
        .await
        .expect("controller starts")
}

/// A single-voter controller that is active.
async fn active(dir: &tempfile::TempDir) -> ControllerNode {
    let listen = free_addr();
    let n = node(dir, vec![(1, listen.to_string())], listen).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(n.is_active() && n.shared().lease_valid()) {
        assert!(
            Instant::now() < deadline,
            "a single voter never became active"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    n
}

fn code(e: &Option<pb::Error>) -> Option<pb::ErrorCode> {
    e.as_ref()
        .map(|e| pb::ErrorCode::try_from(e.code).expect("a known code"))
}

fn register(id: u32) -> pb::RegisterBrokerRequest {
    pb::RegisterBrokerRequest {
        broker_id: id,
        incarnation_id: vec![id as u8; 16],
        cluster_id: CLUSTER.into(),
        address: format!("127.0.0.1:{}", 10_000 + id),
        ..Default::default()
    }
}

/// Broker 1's heartbeat at `epoch`, having applied the log up to `offset`.
fn hb(epoch: u64, offset: u64) -> Request<pb::BrokerHeartbeatRequest> {
    Request::new(pb::BrokerHeartbeatRequest {
        broker_id: 1,
        broker_epoch: epoch,
        current_metadata_offset: offset,
        ..Default::default()
    })
}

/// Registers broker 1 through `api`; the epoch it was given.
async fn registered_epoch(api: &BrokerApi) -> u64 {
    api.register_broker(Request::new(register(1)))
        .await
        .unwrap()
        .into_inner()
        .broker_epoch
}

/// One topic to create, placed by the controller.
fn topic(name: &str, partitions: u32, replication_factor: u32) -> pb::CreatableTopic {
    pb::CreatableTopic {
        name: name.into(),
        partitions,
        replication_factor,
        ..Default::default()
    }
}

/// A CreateTopics request (not validate-only) for these topics.
fn create(topics: Vec<pb::CreatableTopic>) -> Request<pb::CreateTopicsRequest> {
    Request::new(pb::CreateTopicsRequest {
        topics,
        validate_only: false,
    })
}

async fn applied_index(n: &ControllerNode) -> u64 {
    n.shared().applied().image.offset()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_maps_bad_requests_to_typed_errors_and_answers_the_epoch_replay_gives() {
    let dir = tempfile::tempdir().unwrap();
    let n = active(&dir).await;
    let api = BrokerApi::new(n.shared().clone());
    let before = applied_index(&n).await;
    let cases = [
        (
            pb::RegisterBrokerRequest {
                cluster_id: "other".into(),
                ..register(1)
            },
            pb::ErrorCode::InconsistentClusterId,
        ),
        (
            pb::RegisterBrokerRequest {
                incarnation_id: vec![1, 2, 3],
                ..register(1)
            },
            pb::ErrorCode::InvalidRequest,
        ),
        (
            pb::RegisterBrokerRequest {
                address: "nowhere".into(),
                ..register(1)
            },
            pb::ErrorCode::InvalidRequest,
        ),
    ];
    for (req, want) in cases {
        let r = api
            .register_broker(Request::new(req))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(code(&r.error), Some(want));
        assert_eq!(r.broker_epoch, 0);
    }
    assert_eq!(applied_index(&n).await, before, "refusals write nothing");

    let r = api
        .register_broker(Request::new(register(1)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.error, None);
    let image = n.shared().applied().image.clone();
    let reg = image
        .broker(keel_metadata::BrokerId(1))
        .expect("registered");
    assert_eq!(
        r.broker_epoch, reg.epoch.0,
        "the reply carries replay's epoch"
    );
    assert!(reg.fenced, "fenced until caught up");
    n.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_are_refused_for_unknown_or_stale_brokers_and_unfence_once_caught_up() {
    let dir = tempfile::tempdir().unwrap();
    let n = active(&dir).await;
    let api = BrokerApi::new(n.shared().clone());
    let r = api.broker_heartbeat(hb(1, 0)).await.unwrap().into_inner();
    assert_eq!(code(&r.error), Some(pb::ErrorCode::UnknownBroker));
    let epoch = registered_epoch(&api).await;
    let r = api
        .broker_heartbeat(hb(epoch + 1, 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&r.error), Some(pb::ErrorCode::StaleBrokerEpoch));
    // Not caught up with its own registration: stays fenced.
    let r = api
        .broker_heartbeat(hb(epoch, epoch - 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.error, None);
    assert!(r.is_fenced && !r.is_caught_up);
    let term = n.raft().metrics().borrow().current_term;
    assert_eq!(r.controller_epoch, term, "the controller epoch is the term");
    assert_eq!(r.controller_id, 1);
    // Caught up: unfenced by a committed record.
    let r = api
        .broker_heartbeat(hb(epoch, epoch))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.error, None);
    assert!(!r.is_fenced && r.is_caught_up);
    let image = n.shared().applied().image.clone();
    assert!(!image.broker(keel_metadata::BrokerId(1)).unwrap().fenced);
    n.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_answers_map_each_topic_to_its_own_code() {
    let dir = tempfile::tempdir().unwrap();
    let n = active(&dir).await;
    let brokers = BrokerApi::new(n.shared().clone());
    let epoch = registered_epoch(&brokers).await;
    brokers.broker_heartbeat(hb(epoch, epoch)).await.unwrap();
    let admin = AdminApi::new(n.shared().clone());
    let r = admin
        .create_topics(create(vec![
            topic("a", 2, 1),
            topic("b", 1, 3),
            topic("bad/name", 1, 1),
            topic("c", 0, 1),
        ]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.error, None);
    let codes: Vec<Option<pb::ErrorCode>> = r.topics.iter().map(|t| code(&t.error)).collect();
    assert_eq!(
        codes,
        vec![
            None,
            Some(pb::ErrorCode::InvalidReplicationFactor),
            Some(pb::ErrorCode::InvalidTopicName),
            Some(pb::ErrorCode::InvalidPartitions),
        ]
    );
    assert_eq!(r.topics[0].topic_id.len(), 16);
    // A second create of "a": its own code, the first topic untouched.
    let r = admin
        .create_topics(create(vec![topic("a", 5, 1)]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        code(&r.topics[0].error),
        Some(pb::ErrorCode::TopicAlreadyExists)
    );
    let d = admin
        .describe_topics(Request::new(pb::DescribeTopicsRequest {
            names: vec!["a".into(), "nope".into()],
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(d.error, None);
    assert_eq!(d.topics[0].partitions.len(), 2);
    assert_eq!(code(&d.topics[1].error), Some(pb::ErrorCode::UnknownTopic));
    n.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_is_not_active_answers_not_controller_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Two voters, the other never started: no majority, no leader.
    let listen = free_addr();
    let n = node(
        &dir,
        vec![(1, listen.to_string()), (2, free_addr().to_string())],
        listen,
    )
    .await;
    let brokers = BrokerApi::new(n.shared().clone());
    let admin = AdminApi::new(n.shared().clone());
    let r = brokers
        .register_broker(Request::new(register(1)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&r.error), Some(pb::ErrorCode::NotController));
    let r = brokers
        .broker_heartbeat(hb(1, 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&r.error), Some(pb::ErrorCode::NotController));
    let r = admin
        .create_topics(create(vec![topic("t", 1, 1)]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&r.error), Some(pb::ErrorCode::NotController));
    let r = admin
        .describe_topics(Request::new(pb::DescribeTopicsRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&r.error), Some(pb::ErrorCode::NotController));
    assert_eq!(applied_index(&n).await, 0, "nothing was written");
    n.shutdown().await.unwrap();
}
