//! All or nothing, on three controllers in this process: a decision too
//! large for one entry whose leader dies part-way leaves nothing behind
//! (the next leader aborts its transaction), and every command of a batch
//! is answered with the index of its own entry.

use std::net::{Ipv4Addr, TcpListener};
use std::time::{Duration, Instant};

use keel_controller::broker_api::BrokerApi;
use keel_controller::command::{CommandKind, Proposal};
use keel_controller::{ControllerConfig, ControllerNode};
use keel_metadata::decide::CreateTopic;
use keel_metadata::entries::lay_out;
use keel_metadata::{BrokerId, MetadataImage, RecordBatch};
use keel_proto::pb;
use keel_proto::pb::broker_service_server::BrokerService;
use tonic::Request;

const CLUSTER: &str = "atomic";
const LONG: Duration = Duration::from_secs(60);
const MAX_RECORDS_PER_ENTRY: usize = keel_controller::active::MAX_RECORDS_PER_ENTRY;

/// One test at a time: each needs its leader to keep its lease, and two
/// debug-build quorums deciding 20,000 partitions at once on two cores
/// starve each other's heartbeats.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Quorum {
    _dir: tempfile::TempDir,
    nodes: Vec<Option<ControllerNode>>,
}

impl Quorum {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let addrs: Vec<_> = (0..3)
            .map(|_| {
                TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                    .and_then(|l| l.local_addr())
                    .unwrap()
            })
            .collect();
        let voters: Vec<(u64, String)> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| (i as u64 + 1, a.to_string()))
            .collect();
        let mut nodes = Vec::new();
        for (i, a) in addrs.iter().enumerate() {
            let mut c = ControllerConfig::new(
                i as u64 + 1,
                *a,
                voters.clone(),
                dir.path().join(format!("c{}", i + 1)),
                CLUSTER.into(),
            );
            c.session_timeout_ms = 600_000;
            nodes.push(Some(
                ControllerNode::start(c).await.expect("controller starts"),
            ));
        }
        Self { _dir: dir, nodes }
    }

    /// The active controller's index, once there is one.
    async fn active(&self) -> usize {
        let deadline = Instant::now() + LONG;
        loop {
            for (i, n) in self.nodes.iter().enumerate() {
                if let Some(n) = n {
                    if n.is_active() && n.shared().lease_valid() {
                        return i;
                    }
                }
            }
            assert!(Instant::now() < deadline, "no active controller");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn node(&self, i: usize) -> &ControllerNode {
        self.nodes[i].as_ref().expect("running")
    }

    fn image(&self, i: usize) -> MetadataImage {
        self.node(i).shared().image()
    }

    /// Waits until `pred` holds for the image of every running node.
    async fn wait_all(&self, what: &str, pred: impl Fn(&MetadataImage) -> bool) {
        let deadline = Instant::now() + LONG;
        loop {
            if self
                .nodes
                .iter()
                .flatten()
                .all(|n| pred(&n.shared().image()))
            {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for: {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(&mut self, i: usize) {
        if let Some(n) = self.nodes[i].take() {
            n.shutdown().await.unwrap();
        }
    }

    async fn shutdown(mut self) {
        for i in 0..self.nodes.len() {
            self.stop(i).await;
        }
    }
}

/// Registers broker `id` (a stand-in: nothing listens at its address) on
/// the active controller and unfences it; returns that controller's index.
/// A registration that meets an election (three fresh controllers on a
/// loaded host may hold one just after the first) is retried on the next
/// active controller, a bounded number of times.
async fn register(q: &Quorum, id: u32) -> usize {
    for _ in 0..5 {
        let leader = q.active().await;
        let api = BrokerApi::new(q.node(leader).shared().clone());
        let r = api
            .register_broker(Request::new(pb::RegisterBrokerRequest {
                broker_id: id,
                incarnation_id: vec![id as u8; 16],
                cluster_id: CLUSTER.into(),
                address: format!("127.0.0.1:{}", 10_000 + id),
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner();
        if let Some(e) = &r.error {
            assert!(
                matches!(
                    e.code(),
                    pb::ErrorCode::RequestTimedOut | pb::ErrorCode::NotController
                ),
                "registration refused: {e:?}"
            );
            continue;
        }
        let hb = api
            .broker_heartbeat(Request::new(pb::BrokerHeartbeatRequest {
                broker_id: id,
                broker_epoch: r.broker_epoch,
                current_metadata_offset: u64::MAX / 2,
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner();
        if hb.error.is_some() {
            continue;
        }
        assert!(!hb.is_fenced);
        return leader;
    }
    panic!("broker {id} could not register in five tries");
}

fn big(name: &str, partitions: u32) -> CreateTopic {
    CreateTopic {
        name: name.into(),
        partitions,
        replication_factor: 1,
        assignments: None,
        configs: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_leader_dies_after_its_first_entry_leaves_no_topic() {
    let _serial = SERIAL.lock().await;
    let mut q = Quorum::start().await;
    let leader = register(&q, 1).await;

    // The leader decides a 20,000-partition create and commits only the
    // first of its entries before it dies. (Its event loop is held on a
    // slow command meanwhile: it would abort a transaction it did not
    // open itself at its next turn.)
    let held = q.node(leader).shared().clone();
    let _hold = tokio::spawn(async move {
        held.submit(CommandKind::Housekeeping, |_, _| {
            std::thread::sleep(Duration::from_secs(3));
            Proposal::with_reply(Vec::new(), Ok(()))
        })
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let image = q.image(leader);
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(1);
    let d = image.decide_create_topics(&[big("big", 20_000)], false, &mut rng);
    let layout = lay_out(
        vec![("create_topics".into(), d.records)],
        MAX_RECORDS_PER_ENTRY,
    );
    assert!(layout.entries.len() >= 5);
    let first = RecordBatch::new(layout.entries[0].clone());
    let written = q
        .node(leader)
        .raft()
        .client_write(first)
        .await
        .expect("first entry commits");
    let begun = written.log_id.index;
    assert_eq!(q.image(leader).open_transaction(), Some(begun));
    assert!(q.image(leader).topic_by_name("big").is_none(), "held back");
    q.stop(leader).await;

    // The next leader aborts it: no topic, nothing held, on both nodes.
    let next = q.active().await;
    assert_ne!(next, leader);
    q.wait_all("the transaction aborted", |i| {
        i.open_transaction().is_none()
    })
    .await;
    for i in q.nodes.iter().flatten() {
        let image = i.shared().image();
        assert!(
            image.topic_by_name("big").is_none(),
            "a partial topic survived"
        );
        assert_eq!(image.partition_count(), 0);
        image.validate().unwrap();
    }
    // The name is free, and a whole create of that size commits whole.
    let shared = q.node(next).shared().clone();
    let created = shared
        .submit(CommandKind::CreateTopics, |image, env| {
            let d = image.decide_create_topics(&[big("big", 20_000)], false, &mut env.rng);
            Proposal::with_reply(d.records, Ok(d.reply))
        })
        .await
        .expect("the create commits");
    assert!(created[0].1.is_ok());
    q.wait_all("the topic on every node", |i| {
        i.topic_by_name("big")
            .is_some_and(|t| t.partition_count == 20_000)
    })
    .await;
    q.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_batched_with_a_large_create_is_told_the_epoch_replay_gave_it() {
    let _serial = SERIAL.lock().await;
    let q = Quorum::start().await;
    let leader = register(&q, 1).await;
    let shared = q.node(leader).shared().clone();

    // Hold the loop on one command, so what arrives meanwhile (a
    // registration, then a 12,000-record create) is decided as one batch.
    let hold = {
        let shared = shared.clone();
        tokio::spawn(async move {
            shared
                .submit(CommandKind::Housekeeping, |_, _| {
                    std::thread::sleep(Duration::from_millis(500));
                    Proposal::with_reply(Vec::new(), Ok(()))
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let reg = {
        let shared = shared.clone();
        tokio::spawn(async move {
            BrokerApi::new(shared)
                .register_broker(Request::new(pb::RegisterBrokerRequest {
                    broker_id: 2,
                    incarnation_id: vec![2; 16],
                    cluster_id: CLUSTER.into(),
                    address: "127.0.0.1:10002".into(),
                    ..Default::default()
                }))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let create = {
        let shared = shared.clone();
        tokio::spawn(async move {
            shared
                .submit(CommandKind::CreateTopics, |image, env| {
                    let d = image.decide_create_topics(&[big("wide", 11_999)], false, &mut env.rng);
                    Proposal::with_reply(d.records, Ok(d.reply))
                })
                .await
        })
    };
    hold.await.unwrap().unwrap();
    let reg = reg.await.unwrap().unwrap().into_inner();
    assert_eq!(reg.error, None);
    create.await.unwrap().unwrap();
    let image = q.image(leader);
    let epoch = image.broker(BrokerId(2)).expect("registered").epoch.0;
    assert_eq!(reg.broker_epoch, epoch, "the reply carries replay's epoch");
    assert!(
        epoch < image.offset(),
        "the registration's entry came before the create's"
    );
    assert_eq!(image.topic_by_name("wide").unwrap().partition_count, 11_999);
    q.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_of_100k_partitions_is_all_or_nothing() {
    let _serial = SERIAL.lock().await;
    let mut q = Quorum::start().await;
    let leader = register(&q, 1).await;
    let shared = q.node(leader).shared().clone();
    for t in 0..5 {
        shared
            .submit(CommandKind::CreateTopics, move |image, env| {
                let d = image.decide_create_topics(
                    &[big(&format!("t{t}"), 20_000)],
                    false,
                    &mut env.rng,
                );
                Proposal::with_reply(d.records, Ok(d.reply))
            })
            .await
            .expect("created");
    }
    let led_by_1 = |i: &MetadataImage| {
        i.partitions()
            .filter(|(_, p)| p.leader == Some(BrokerId(1)))
            .count()
    };
    q.wait_all("100,000 partitions led by broker 1", |i| {
        led_by_1(i) == 100_000
    })
    .await;

    // Half of the fence's entries commit, then the leader dies.
    let held = shared.clone();
    let _hold = tokio::spawn(async move {
        held.submit(CommandKind::Housekeeping, |_, _| {
            std::thread::sleep(Duration::from_secs(5));
            Proposal::with_reply(Vec::new(), Ok(()))
        })
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let d = q.image(leader).decide_fence_broker(BrokerId(1));
    assert_eq!(d.records.len(), 100_001);
    let layout = lay_out(
        vec![("housekeeping".into(), d.records)],
        MAX_RECORDS_PER_ENTRY,
    );
    let half = layout.entries.len() / 2;
    for e in &layout.entries[..half] {
        q.node(leader)
            .raft()
            .client_write(RecordBatch::new(e.clone()))
            .await
            .expect("entry commits");
    }
    assert!(q.image(leader).open_transaction().is_some());
    assert_eq!(led_by_1(&q.image(leader)), 100_000, "nothing applied yet");
    q.stop(leader).await;

    let next = q.active().await;
    assert_ne!(next, leader);
    q.wait_all("the fence aborted", |i| i.open_transaction().is_none())
        .await;
    for n in q.nodes.iter().flatten() {
        let image = n.shared().image();
        assert!(!image.broker(BrokerId(1)).unwrap().fenced, "half a fence");
        assert_eq!(led_by_1(&image), 100_000, "half a fence");
    }
    q.shutdown().await;
}
