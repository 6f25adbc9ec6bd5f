//! Broker stories against a fake active controller: registration and
//! identity, redirects, epoch fencing of controller requests, session loss,
//! and ISR changes driven by follower fetches.

mod support;

use keel_broker::{read_history, Broker, HistoryEvent};
use keel_metadata::{BrokerId, ErrorCode, TopicPartition};
use keel_proto::pb;
use support::*;

#[tokio::test]
async fn registers_persists_identity_and_reuses_it_after_restart() {
    let fake = FakeController::new(Mode::Active);
    let addr = fake.serve().await;
    let dir = tempfile::tempdir().unwrap();

    let broker = Broker::start(config(1, &[addr], dir.path())).await.unwrap();
    registered(&broker).await;
    assert_eq!(broker.state().broker_epoch.map(|e| e.0), Some(FIRST_EPOCH));
    let first = fake.registrations()[0].clone();
    assert_eq!(first.broker_id, 1);
    assert_eq!(first.cluster_id, "test-cluster");
    assert_eq!(first.previous_broker_epoch, 0);
    assert_eq!(first.incarnation_id.len(), 16);
    assert_eq!(first.address, broker.local_addr().to_string());
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("broker.json")).unwrap()).unwrap();
    assert_eq!(meta["last_broker_epoch"], FIRST_EPOCH);

    eventually("heartbeats with the registered epoch", || {
        fake.heartbeats()
            .iter()
            .any(|h| h.broker_epoch == FIRST_EPOCH && h.broker_id == 1)
    })
    .await;
    eventually("unfenced by heartbeat", || !broker.state().fenced).await;

    // A second process on the same data dir is refused.
    let second = Broker::start(config(1, &[addr], dir.path())).await;
    let err = second
        .err()
        .expect("second broker on a locked data dir must fail")
        .to_string();
    assert!(err.contains("locked"), "{err}");

    broker.shutdown(false).await.unwrap();

    let again = Broker::start(config(1, &[addr], dir.path())).await.unwrap();
    registered(&again).await;
    let regs = fake.registrations();
    assert_eq!(regs.len(), 2);
    assert_eq!(regs[1].previous_broker_epoch, FIRST_EPOCH);
    assert_eq!(regs[1].incarnation_id, first.incarnation_id);

    // Controlled shutdown: heartbeats ask, the fake allows it.
    again.shutdown(true).await.unwrap();
    assert!(fake.heartbeats().iter().any(|h| h.want_shutdown));
}

#[tokio::test]
async fn not_controller_hint_is_followed() {
    let active = FakeController::new(Mode::Active);
    let active_addr = active.serve().await;
    let standby = FakeController::new(Mode::Redirect {
        node_id: 2,
        address: active_addr.to_string(),
    });
    let standby_addr = standby.serve().await;
    let dir = tempfile::tempdir().unwrap();

    let broker = Broker::start(config(1, &[standby_addr], dir.path()))
        .await
        .unwrap();
    registered(&broker).await;
    assert_eq!(active.registrations().len(), 1);
    assert!(standby.registrations().is_empty());
    eventually("heartbeats reach the active controller", || {
        !active.heartbeats().is_empty()
    })
    .await;
    broker.shutdown(false).await.unwrap();
}

#[tokio::test]
async fn outgoing_connections_use_the_listen_ip() {
    let fake = FakeController::new(Mode::Active);
    let addr = fake.serve().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(1, &[addr], dir.path());
    cfg.listen = "127.0.0.2:0".parse().unwrap();
    let broker = Broker::start(cfg).await.unwrap();
    registered(&broker).await;
    let peer = fake.peers()[0].expect("server sees the peer address");
    assert_eq!(peer.ip().to_string(), "127.0.0.2");
    assert_eq!(
        fake.registrations()[0].address,
        broker.local_addr().to_string()
    );
    broker.shutdown(false).await.unwrap();
}

#[tokio::test]
async fn inconsistent_cluster_id_is_fatal() {
    let fake = FakeController::new(Mode::WrongCluster);
    let addr = fake.serve().await;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(1, &[addr], dir.path())).await.unwrap();
    let err = tokio::time::timeout(std::time::Duration::from_secs(20), broker.failed())
        .await
        .expect("fatal error within 20 s");
    assert!(err.to_string().contains("cluster id"), "{err}");
    assert!(broker.shutdown(false).await.is_err());
}

#[tokio::test]
async fn controller_requests_are_fenced_by_epochs_and_accepted_ones_recorded() {
    let fake = FakeController::new(Mode::Active);
    fake.elect(5);
    let addr = fake.serve().await;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(1, &[addr], dir.path())).await.unwrap();
    registered(&broker).await;
    let mut client = control_client(&broker).await;
    let e = FIRST_EPOCH;
    let lai = |stamp, parts: Vec<pb::PartitionState>| pb::LeaderAndIsrRequest {
        stamp,
        partitions: parts,
        leaders: vec![leader_info(1, broker.local_addr())],
    };

    // Accepted: this broker leads partition 0 at leader epoch 3.
    let r = client
        .leader_and_isr(lai(stamp(5, e), vec![partition(1, 3, 4, &[1, 2])]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&r.error), ErrorCode::None);
    assert_eq!(codes(&r.partitions)[&0], ErrorCode::None);
    let tp = TopicPartition::new(topic(), 0);
    assert!(broker.state().partition(tp).unwrap().leading);
    assert_eq!(broker.state().controller_epoch_seen.0, 5);

    // Lower controller epoch.
    let r = client
        .leader_and_isr(lai(stamp(4, e), vec![partition(2, 9, 9, &[2])]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&r.error), ErrorCode::StaleControllerEpoch);

    // Wrong broker epoch.
    let r = client
        .leader_and_isr(lai(stamp(5, e - 1), vec![partition(2, 9, 9, &[2])]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&r.error), ErrorCode::StaleBrokerEpoch);

    // Lower leader epoch; same epoch naming another leader; malformed id.
    let mut malformed = partition(1, 3, 4, &[1]);
    malformed.partition = 7;
    malformed.topic_id = vec![1, 2, 3];
    let r = client
        .leader_and_isr(lai(stamp(5, e), vec![partition(2, 2, 9, &[2])]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(codes(&r.partitions)[&0], ErrorCode::FencedLeaderEpoch);
    let r = client
        .leader_and_isr(lai(stamp(5, e), vec![partition(2, 3, 5, &[2]), malformed]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(codes(&r.partitions)[&0], ErrorCode::FencedLeaderEpoch);
    assert_eq!(codes(&r.partitions)[&7], ErrorCode::InvalidRequest);

    // A newer controller, before the broker's heartbeat has met it: its
    // epoch is not confirmed yet, and nothing changes.
    let r = client
        .leader_and_isr(lai(stamp(6, e), vec![partition(2, 4, 5, &[2])]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&r.error), ErrorCode::UnconfirmedControllerEpoch);
    assert!(broker.state().partition(tp).unwrap().leading);
    assert_eq!(broker.state().controller_epoch_seen.0, 5);
    // Once the quorum answers in epoch 6, the broker's next heartbeat
    // answer confirms it.
    fake.elect(6);
    eventually("the heartbeat confirms epoch 6", || {
        broker.state().controller_epoch_seen.0 == 6
    })
    .await;

    // The newer controller moves leadership to broker 2.
    let r = client
        .leader_and_isr(lai(stamp(6, e), vec![partition(2, 4, 5, &[2])]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(codes(&r.partitions)[&0], ErrorCode::None);
    assert!(!broker.state().partition(tp).unwrap().leading);

    let history = read_history(&broker.history_path()).unwrap();
    let accepted: Vec<(Option<u32>, u32, u64)> = history
        .iter()
        .map(|h| (h.leader, h.leader_epoch, h.controller_epoch))
        .collect();
    assert_eq!(accepted, vec![(Some(1), 3, 5), (Some(2), 4, 6)]);
    assert!(history.iter().all(|h| h.event == HistoryEvent::LeaderAndIsr
        && h.broker_id == 1
        && h.topic_id == topic().to_string()));

    // UpdateMetadata feeds the cache and the heartbeat's metadata offset.
    let r = client
        .update_metadata(pb::UpdateMetadataRequest {
            stamp: stamp(6, e),
            metadata_offset: 42,
            full: true,
            brokers: vec![leader_info(2, "127.0.0.1:1".parse().unwrap())],
            partitions: vec![partition(2, 4, 5, &[2])],
            deleted_topic_ids: Vec::new(),
            removed_broker_ids: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&r.error), ErrorCode::None);
    let d = client
        .describe_broker(pb::DescribeBrokerRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (
            d.broker_id,
            d.broker_epoch,
            d.controller_epoch_seen,
            d.metadata_offset
        ),
        (1, e, 6, 42)
    );
    assert_eq!((d.cache.len(), d.brokers.len()), (1, 1));
    eventually("heartbeat carries the metadata offset", || {
        fake.heartbeats()
            .iter()
            .any(|h| h.current_metadata_offset == 42)
    })
    .await;

    // StopReplica with an old leader epoch is fenced; a current one deletes.
    let stop = |leader_epoch, delete| pb::StopReplicaRequest {
        stamp: stamp(6, e),
        partitions: vec![pb::StopReplicaItem {
            topic_id: topic().to_bytes().to_vec(),
            partition: 0,
            delete,
            leader_epoch,
        }],
    };
    let r = client
        .stop_replica(stop(3, false))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(codes(&r.partitions)[&0], ErrorCode::FencedLeaderEpoch);
    let r = client
        .stop_replica(stop(4, true))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(codes(&r.partitions)[&0], ErrorCode::None);
    assert!(broker.state().partition(tp).is_none());

    broker.shutdown(false).await.unwrap();
}

#[tokio::test]
async fn session_loss_stops_leading_then_reregisters() {
    let fake = FakeController::new(Mode::Active);
    let addr = fake.serve().await;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(1, &[addr], dir.path())).await.unwrap();
    registered(&broker).await;
    let mut client = control_client(&broker).await;
    client
        .leader_and_isr(pb::LeaderAndIsrRequest {
            stamp: stamp(3, FIRST_EPOCH),
            partitions: vec![partition(1, 1, 1, &[1])],
            leaders: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(broker.state().leading().count(), 1);

    fake.set_mode(Mode::Silent);
    eventually("leadership given up", || {
        broker.state().leading().count() == 0
    })
    .await;
    assert_eq!(broker.state().broker_epoch, None);
    let history = read_history(&broker.history_path()).unwrap();
    assert_eq!(
        history.last().map(|h| h.event),
        Some(HistoryEvent::Resigned)
    );

    // While the session is given up, controller requests are refused.
    let r = client
        .leader_and_isr(pb::LeaderAndIsrRequest {
            stamp: stamp(3, FIRST_EPOCH),
            partitions: vec![partition(1, 1, 1, &[1])],
            leaders: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&r.error), ErrorCode::StaleBrokerEpoch);

    fake.set_mode(Mode::Active);
    eventually("re-registered", || {
        broker.state().broker_epoch.map(|e| e.0) == Some(FIRST_EPOCH + 1)
    })
    .await;
    let regs = fake.registrations();
    assert_eq!(regs.last().unwrap().previous_broker_epoch, FIRST_EPOCH);
    broker.shutdown(false).await.unwrap();
}

#[tokio::test]
async fn leader_expands_isr_for_a_fetching_follower_and_shrinks_it_when_it_stops() {
    let fake = FakeController::new(Mode::Active);
    let addr = fake.serve().await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let leader = Broker::start(config(1, &[addr], d1.path())).await.unwrap();
    let follower = Broker::start(config(2, &[addr], d2.path())).await.unwrap();
    registered(&leader).await;
    registered(&follower).await;

    // Broker 1 leads; broker 2 is assigned but not yet in the ISR.
    let req = pb::LeaderAndIsrRequest {
        stamp: stamp(3, FIRST_EPOCH),
        partitions: vec![partition(1, 1, 1, &[1])],
        leaders: vec![leader_info(1, leader.local_addr())],
    };
    for b in [&leader, &follower] {
        let r = control_client(b)
            .await
            .leader_and_isr(req.clone())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(codes(&r.partitions)[&0], ErrorCode::None);
    }
    let tp = TopicPartition::new(topic(), 0);
    let isr = |b: &Broker| {
        b.state()
            .partition(tp)
            .map(|p| p.state.isr.clone())
            .unwrap_or_default()
    };

    eventually("follower joins the ISR", || {
        isr(&leader) == vec![BrokerId(1), BrokerId(2)]
    })
    .await;
    let expand = fake.alters()[0].clone();
    assert_eq!((expand.broker_id, expand.broker_epoch), (1, FIRST_EPOCH));
    assert_eq!(expand.partitions[0].new_isr, vec![1, 2]);
    assert_eq!(
        (
            expand.partitions[0].leader_epoch,
            expand.partitions[0].partition_epoch
        ),
        (1, 1)
    );

    follower.shutdown(false).await.unwrap();
    eventually("silent follower leaves the ISR", || {
        isr(&leader) == vec![BrokerId(1)]
    })
    .await;
    let shrink = fake.alters().last().unwrap().clone();
    assert_eq!(shrink.partitions[0].new_isr, vec![1]);
    assert_eq!(shrink.partitions[0].partition_epoch, 2);

    let events: Vec<HistoryEvent> = read_history(&leader.history_path())
        .unwrap()
        .iter()
        .map(|h| h.event)
        .collect();
    assert_eq!(
        events,
        vec![
            HistoryEvent::LeaderAndIsr,
            HistoryEvent::AlterPartition,
            HistoryEvent::AlterPartition
        ]
    );
    leader.shutdown(false).await.unwrap();
}
