//! Decision tests in Kafka's style: build a context, decide, check the
//! records and the reply, replay, check the image.

use std::collections::BTreeMap;

use keel_metadata::decide::*;
use keel_metadata::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

// ---- context --------------------------------------------------------------

fn b(id: u32) -> BrokerId {
    BrokerId(id)
}

fn bs(ids: &[u32]) -> Vec<BrokerId> {
    ids.iter().map(|i| BrokerId(*i)).collect()
}

fn code<T: std::fmt::Debug>(r: &Result<T, ApiError>) -> ErrorCode {
    r.as_ref().expect_err("expected a refusal").code
}

/// A controller's view: an image fed by committed entries.
struct Cluster {
    image: MetadataImage,
    rng: StdRng,
}

impl Cluster {
    fn new() -> Self {
        Self {
            image: MetadataImage::new(),
            rng: StdRng::seed_from_u64(42),
        }
    }

    /// A cluster with brokers `1..=n`, registered and unfenced.
    fn with_brokers(n: u32) -> Self {
        let mut c = Self::new();
        for id in 1..=n {
            c.add_broker(id, None);
        }
        c
    }

    /// Commits `records` as one entry and checks the image invariants.
    fn commit(&mut self, records: &[MetadataRecord]) -> u64 {
        let offset = self.image.offset() + 1;
        self.image
            .replay_batch(&RecordBatch::new(records.to_vec()), offset)
            .expect("decided records replay");
        self.image.validate().expect("image stays valid");
        offset
    }

    fn register_request(id: u32, incarnation: u128, previous: BrokerEpoch) -> RegisterBroker {
        RegisterBroker {
            broker: b(id),
            incarnation: IncarnationId(incarnation),
            address: format!("127.0.0.{id}:9092"),
            rack: None,
            log_dirs: vec!["/data/a".into(), "/data/b".into()],
            previous_epoch: previous,
        }
    }

    fn add_broker(&mut self, id: u32, rack: Option<&str>) -> BrokerEpoch {
        let mut req = Self::register_request(id, u128::from(id), BrokerEpoch(0));
        req.rack = rack.map(str::to_string);
        let d = self.image.decide_register_broker(&req, false);
        assert_eq!(d.reply, Ok(RegisterReply::New));
        let epoch = BrokerEpoch(self.commit(&d.records));
        self.unfence(id);
        epoch
    }

    fn epoch(&self, id: u32) -> BrokerEpoch {
        self.image.broker(b(id)).unwrap().epoch
    }

    fn unfence(&mut self, id: u32) {
        let d = self.image.decide_unfence_broker(b(id), self.epoch(id));
        assert_eq!(d.reply, Ok(()));
        self.commit(&d.records);
    }

    fn fence(&mut self, id: u32) {
        let d = self.image.decide_fence_broker(b(id));
        self.commit(&d.records);
    }

    /// Creates a topic with a manual assignment and returns its id.
    fn create(&mut self, name: &str, rows: &[&[u32]], configs: &[(&str, &str)]) -> TopicId {
        let req = CreateTopic {
            name: name.into(),
            assignments: Some(rows.iter().map(|r| bs(r)).collect()),
            configs: configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..CreateTopic::default()
        };
        let d = self
            .image
            .decide_create_topics(&[req], false, &mut self.rng);
        let id = d.reply[0].1.as_ref().expect("topic created").topic_id;
        self.commit(&d.records);
        id
    }

    fn p(&self, topic: TopicId, index: u32) -> &PartitionImage {
        self.image
            .partition(&TopicPartition::new(topic, index))
            .unwrap()
    }

    /// The leader of `tp` shrinks or expands its ISR.
    fn alter_isr(&mut self, tp: TopicPartition, isr: &[u32]) {
        let p = self.image.partition(&tp).unwrap().clone();
        let leader = p.leader.unwrap();
        let item = AlterPartitionItem {
            tp,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: bs(isr),
        };
        let d = self.image.decide_alter_partition(
            leader,
            self.image.broker(leader).unwrap().epoch,
            &[item],
        );
        d.reply.as_ref().unwrap()[0]
            .1
            .as_ref()
            .expect("ISR change accepted");
        self.commit(&d.records);
    }
}

/// A topic of `partitions` partitions placed by the controller.
fn spread(name: &str, partitions: u32, replication_factor: u32) -> CreateTopic {
    CreateTopic {
        name: name.into(),
        partitions,
        replication_factor,
        ..CreateTopic::default()
    }
}

fn change(records: &[MetadataRecord], i: usize) -> &PartitionChangeRecord {
    match &records[i] {
        MetadataRecord::PartitionChange(c) => c,
        other => panic!("record {i} is {other:?}, not a partition change"),
    }
}

// ---- brokers ---------------------------------------------------------------

#[test]
fn registration_starts_fenced_and_a_lost_answer_retry_gets_the_same_epoch() {
    let mut c = Cluster::new();
    let req = Cluster::register_request(1, 0xa, BrokerEpoch(0));

    let d = c.image.decide_register_broker(&req, false);
    assert_eq!(d.reply, Ok(RegisterReply::New));
    assert!(matches!(&d.records[..], [MetadataRecord::RegisterBroker(r)] if r.broker == b(1)));
    let epoch = BrokerEpoch(c.commit(&d.records));
    let reg = c.image.broker(b(1)).unwrap();
    assert_eq!(reg.epoch, epoch);
    assert!(reg.fenced);

    // The broker never saw the answer and retries with its old epoch.
    let retry = c.image.decide_register_broker(&req, true);
    assert_eq!(retry.reply, Ok(RegisterReply::Existing(epoch)));
    assert!(retry.records.is_empty());
}

#[test]
fn restart_of_a_leading_broker_moves_its_leaderships_before_reregistering() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("t", &[&[1, 2]], &[]);
    let old_epoch = c.epoch(1);

    // Same incarnation, knows its current epoch: a restart.
    let req = Cluster::register_request(1, 1, old_epoch);
    let d = c.image.decide_register_broker(&req, true);
    assert_eq!(d.reply, Ok(RegisterReply::New));
    assert_eq!(
        d.records[0],
        MetadataRecord::FenceBroker {
            broker: b(1),
            epoch: old_epoch
        }
    );
    let moved = change(&d.records, 1);
    assert_eq!(moved.leader, LeaderChange::To(b(2)));
    assert_eq!(moved.isr, Some(bs(&[2])));
    assert!(matches!(d.records[2], MetadataRecord::RegisterBroker(_)));
    assert_eq!(d.records.len(), 3);

    let offset = c.commit(&d.records);
    assert_eq!(c.epoch(1), BrokerEpoch(offset));
    assert!(c.image.broker(b(1)).unwrap().fenced);
    assert_eq!(c.p(t, 0).leader, Some(b(2)));
}

#[test]
fn another_incarnation_is_refused_while_the_session_lives_and_replaces_it_after() {
    let mut c = Cluster::with_brokers(1);
    let first = c.epoch(1);
    let impostor = Cluster::register_request(1, 0xbeef, BrokerEpoch(0));

    let d = c.image.decide_register_broker(&impostor, true);
    assert_eq!(code(&d.reply), ErrorCode::DuplicateBrokerRegistration);
    assert!(d.records.is_empty());

    // The old process's session expired: the new data dir takes over.
    let d = c.image.decide_register_broker(&impostor, false);
    assert_eq!(d.reply, Ok(RegisterReply::New));
    c.commit(&d.records);
    let reg = c.image.broker(b(1)).unwrap();
    assert_eq!(reg.incarnation, IncarnationId(0xbeef));
    assert!(reg.epoch > first);
}

#[test]
fn fencing_moves_leaders_bumps_epochs_shrinks_isrs_and_keeps_a_last_member() {
    let mut c = Cluster::with_brokers(3);
    let t = c.create("t", &[&[1, 2, 3], &[2, 1, 3]], &[]);
    let solo = c.create("solo", &[&[1]], &[]);
    let epoch1 = c.epoch(1);

    let d = c.image.decide_fence_broker(b(1));
    assert_eq!(
        d.records[0],
        MetadataRecord::FenceBroker {
            broker: b(1),
            epoch: epoch1
        }
    );
    assert_eq!(d.records.len(), 4);
    c.commit(&d.records);

    // Led by 1: the first live ISR member takes over.
    let p0 = c.p(t, 0);
    assert_eq!((p0.leader, &p0.isr), (Some(b(2)), &bs(&[2, 3])));
    assert_eq!(
        (p0.leader_epoch, p0.partition_epoch),
        (LeaderEpoch(1), PartitionEpoch(1))
    );
    // Followed by 1: only the ISR shrinks.
    let p1 = c.p(t, 1);
    assert_eq!((p1.leader, &p1.isr), (Some(b(2)), &bs(&[2, 3])));
    assert_eq!(
        (p1.leader_epoch, p1.partition_epoch),
        (LeaderEpoch(0), PartitionEpoch(1))
    );
    // Nobody else: offline, and the ISR keeps its last member.
    let s = c.p(solo, 0);
    assert_eq!(
        (s.leader, &s.isr, s.state),
        (None, &bs(&[1]), PartitionState::Offline)
    );
    assert_eq!(s.leader_epoch, LeaderEpoch(1));

    // Fencing again, or an unknown broker, changes nothing.
    assert!(c.image.decide_fence_broker(b(1)).records.is_empty());
    assert!(c.image.decide_fence_broker(b(9)).records.is_empty());

    // The last member comes back: it leads again.
    let d = c.image.decide_unfence_broker(b(1), epoch1);
    assert_eq!(d.records.len(), 2);
    c.commit(&d.records);
    assert_eq!(c.p(solo, 0).leader, Some(b(1)));
    assert_eq!(c.p(solo, 0).state, PartitionState::Online);
}

#[test]
fn unclean_election_on_fence_only_where_the_topic_allows_it() {
    let mut c = Cluster::with_brokers(2);
    let clean = c.create("clean", &[&[1, 2]], &[]);
    let dirty = c.create("dirty", &[&[1, 2]], &[(UNCLEAN_LEADER_ELECTION, "true")]);
    // Broker 2 falls out of sync on both.
    c.alter_isr(TopicPartition::new(clean, 0), &[1]);
    c.alter_isr(TopicPartition::new(dirty, 0), &[1]);

    let d = c.image.decide_fence_broker(b(1));
    let to_dirty = d
        .records
        .iter()
        .filter_map(|r| match r {
            MetadataRecord::PartitionChange(pc) if pc.topic_id == dirty => Some(pc),
            _ => None,
        })
        .next()
        .unwrap();
    assert_eq!(to_dirty.leader, LeaderChange::To(b(2)));
    assert!(to_dirty.unclean);
    c.commit(&d.records);

    assert_eq!(c.p(clean, 0).leader, None);
    assert_eq!(c.p(clean, 0).isr, bs(&[1]));
    assert_eq!(c.p(dirty, 0).leader, Some(b(2)));
    assert_eq!(c.p(dirty, 0).isr, bs(&[2]));
}

#[test]
fn unfence_refuses_unknown_and_stale_brokers_and_is_idempotent() {
    let c = Cluster::with_brokers(1);
    let e = c.epoch(1);
    assert_eq!(
        code(&c.image.decide_unfence_broker(b(9), e).reply),
        ErrorCode::UnknownBroker
    );
    let stale = c.image.decide_unfence_broker(b(1), BrokerEpoch(e.0 + 7));
    assert_eq!(code(&stale.reply), ErrorCode::StaleBrokerEpoch);
    assert!(stale.records.is_empty());
    let again = c.image.decide_unfence_broker(b(1), e);
    assert_eq!(again.reply, Ok(()));
    assert!(again.records.is_empty());
}

#[test]
fn fencing_a_broker_that_leads_100k_partitions_is_fast() {
    let mut c = Cluster::with_brokers(2);
    let req = spread("big", 100_000, 2);
    let d = c.image.decide_create_topics(&[req], false, &mut c.rng);
    let offset = c.image.offset() + 1;
    c.image
        .replay_batch(&RecordBatch::new(d.records), offset)
        .unwrap();
    let led_by_1 = c
        .image
        .partitions()
        .filter(|(_, p)| p.leader == Some(b(1)))
        .count();
    assert_eq!(led_by_1, 50_000);

    // How long this takes is measured by `keel bench broker-failure`, not
    // asserted here (a busy 2-core machine would make it flaky).
    let d = c.image.decide_fence_broker(b(1));
    // FenceBroker + one change for every partition (leader or ISR).
    assert_eq!(d.records.len(), 100_001);
    // The decided records replay: no partition is left with broker 1 leading.
    let offset = c.image.offset() + 1;
    c.image
        .replay_batch(&RecordBatch::new(d.records), offset)
        .unwrap();
    c.image.validate().unwrap();
    assert!(c.image.partitions().all(|(_, p)| p.leader == Some(b(2))));
}

#[test]
fn heartbeats_refuse_unknown_and_stale_brokers_and_unfence_once_caught_up() {
    let mut c = Cluster::new();
    let d = c
        .image
        .decide_register_broker(&Cluster::register_request(1, 1, BrokerEpoch(0)), false);
    let epoch = BrokerEpoch(c.commit(&d.records));
    let hb = Heartbeat {
        broker: b(1),
        epoch,
        metadata_offset: 0,
        want_fence: false,
        want_shutdown: false,
        offline_log_dirs: vec![],
    };

    let unknown = c.image.decide_heartbeat(
        &Heartbeat {
            broker: b(7),
            ..hb.clone()
        },
        true,
    );
    assert_eq!(code(&unknown.reply), ErrorCode::UnknownBroker);
    let stale = c.image.decide_heartbeat(
        &Heartbeat {
            epoch: BrokerEpoch(epoch.0 - 1),
            ..hb.clone()
        },
        true,
    );
    assert_eq!(code(&stale.reply), ErrorCode::StaleBrokerEpoch);
    assert!(unknown.records.is_empty() && stale.records.is_empty());

    // Still catching up: stays fenced, nothing written.
    let d = c.image.decide_heartbeat(&hb, false);
    assert!(d.records.is_empty());
    assert!(d.reply.as_ref().unwrap().is_fenced);

    let d = c.image.decide_heartbeat(&hb, true);
    assert_eq!(
        d.records,
        vec![MetadataRecord::UnfenceBroker {
            broker: b(1),
            epoch
        }]
    );
    let reply = d.reply.clone().unwrap();
    assert!(reply.is_caught_up && !reply.is_fenced && !reply.should_shut_down);
    c.commit(&d.records);

    // A steady heartbeat writes nothing.
    assert!(c.image.decide_heartbeat(&hb, true).records.is_empty());

    // The broker asks to be fenced.
    let d = c.image.decide_heartbeat(
        &Heartbeat {
            want_fence: true,
            ..hb
        },
        true,
    );
    assert_eq!(
        d.records,
        vec![MetadataRecord::FenceBroker {
            broker: b(1),
            epoch
        }]
    );
    assert!(d.reply.unwrap().is_fenced);
}

#[test]
fn a_failed_log_dir_fails_over_only_the_replicas_it_holds() {
    let mut c = Cluster::with_brokers(2);
    let rows: [&[u32]; 8] = [&[1, 2]; 8];
    let t = c.create("t", &rows, &[]);
    let reg = c.image.broker(b(1)).unwrap().clone();
    let on_a: Vec<u32> = (0..8)
        .filter(|i| reg.dir_of(&TopicPartition::new(t, *i)) == Some("/data/a"))
        .collect();
    assert!(
        !on_a.is_empty() && on_a.len() < 8,
        "both dirs hold partitions"
    );

    let hb = Heartbeat {
        broker: b(1),
        epoch: reg.epoch,
        metadata_offset: 0,
        want_fence: false,
        want_shutdown: false,
        offline_log_dirs: vec!["/data/a".into()],
    };
    let d = c.image.decide_heartbeat(&hb, true);
    assert_eq!(
        d.records[0],
        MetadataRecord::LogDirsOffline {
            broker: b(1),
            epoch: reg.epoch,
            dirs: vec!["/data/a".into()]
        }
    );
    assert_eq!(d.records.len(), 1 + on_a.len());
    c.commit(&d.records);

    for i in 0..8 {
        let p = c.p(t, i);
        if on_a.contains(&i) {
            assert_eq!((p.leader, &p.isr), (Some(b(2)), &bs(&[2])));
        } else {
            assert_eq!((p.leader, &p.isr), (Some(b(1)), &bs(&[1, 2])));
        }
    }
    // Reported again: already known, nothing new.
    assert!(c.image.decide_heartbeat(&hb, true).records.is_empty());
}

#[test]
fn controlled_shutdown_moves_leaders_and_waits_on_a_sole_isr_member() {
    let mut c = Cluster::with_brokers(3);
    let t = c.create("t", &[&[1, 2], &[2, 1], &[3, 1]], &[]);
    let solo = c.create("solo", &[&[1]], &[]);
    let epoch = c.epoch(1);

    let d = c.image.decide_controlled_shutdown(b(1), epoch);
    assert_eq!(
        d.records[0],
        MetadataRecord::BrokerShuttingDown {
            broker: b(1),
            epoch
        }
    );
    assert_eq!(d.records.len(), 4);
    let reply = d.reply.clone().unwrap();
    assert!(!reply.should_shut_down && !reply.is_fenced);
    assert_eq!(reply.remaining_leaderships, 1);
    c.commit(&d.records);
    assert_eq!((c.p(t, 0).leader, &c.p(t, 0).isr), (Some(b(2)), &bs(&[2])));
    assert_eq!(c.p(t, 1).isr, bs(&[2]));
    assert_eq!(c.p(t, 2).isr, bs(&[3]));
    // Its only in-sync replica keeps leading rather than go offline.
    assert_eq!(c.p(solo, 0).leader, Some(b(1)));

    // Retries change nothing until someone else can take over.
    let d = c.image.decide_controlled_shutdown(b(1), epoch);
    assert!(d.records.is_empty());
    assert_eq!(d.reply.unwrap().remaining_leaderships, 1);

    // An operator adds a replica; it catches up and the reassignment ends.
    let tp = TopicPartition::new(solo, 0);
    let d = c
        .image
        .decide_alter_reassignments(&[(tp, Some(bs(&[1, 2])))]);
    c.commit(&d.records);
    c.alter_isr(tp, &[1, 2]);
    assert!(!c.p(solo, 0).reassigning());

    let d = c.image.decide_controlled_shutdown(b(1), epoch);
    assert_eq!(change(&d.records, 0).leader, LeaderChange::To(b(2)));
    let reply = d.reply.clone().unwrap();
    assert!(reply.should_shut_down);
    assert_eq!(reply.remaining_leaderships, 0);
    c.commit(&d.records);
    assert_eq!(c.p(solo, 0).isr, bs(&[2]));
}

/// `base` with `records` replayed at its next offset, one by one (how the
/// active controller replays a decision before proposing it).
fn replayed_on(base: &MetadataImage, records: &[MetadataRecord]) -> MetadataImage {
    let mut image = base.clone();
    for r in records {
        image
            .replay(r, base.offset() + 1)
            .expect("decided record replays");
    }
    image
}

#[test]
fn a_decision_hands_over_its_scratch_image_only_when_it_holds_every_record() {
    let mut c = Cluster::with_brokers(3);
    let t = c.create("t", &[&[1, 2], &[2, 1], &[1, 3]], &[]);

    // Controlled shutdown replays every move on its scratch copy: that copy
    // is the image with the records, so the controller need not replay them.
    let d = c.image.decide_controlled_shutdown(b(1), c.epoch(1));
    assert_eq!(d.records.len(), 4);
    let kept = d
        .replayed
        .as_ref()
        .expect("controlled shutdown keeps its image");
    assert!(*kept == replayed_on(&c.image, &d.records));
    assert_eq!(
        kept.partition(&TopicPartition::new(t, 0)).unwrap().leader,
        Some(b(2))
    );
    assert_eq!(kept.offset(), c.image.offset(), "no entry is applied yet");

    let req = spread("u", 4, 3);
    let d = c.image.decide_create_topics(&[req], false, &mut c.rng);
    assert!(
        *d.replayed.as_ref().expect("create keeps its image") == replayed_on(&c.image, &d.records)
    );

    // Fencing skips the scratch replay of its moves (they are its last
    // step), so the scratch copy lacks them and is not handed over.
    let d = c.image.decide_fence_broker(b(1));
    assert!(d.records.len() > 1);
    assert!(d.replayed.is_none());

    // Nothing decided, nothing handed over.
    let d = c.image.decide_controlled_shutdown(b(9), BrokerEpoch(1));
    assert!(d.records.is_empty() && d.replayed.is_none());
    // And the debug form names the image's presence, not its contents.
    let d = c.image.decide_controlled_shutdown(b(2), c.epoch(2));
    assert!(format!("{d:?}").contains("replayed: true"));
}

#[test]
fn unregistering_needs_a_known_fenced_broker() {
    let mut c = Cluster::with_brokers(2);
    assert_eq!(
        code(&c.image.decide_unregister_broker(b(9)).reply),
        ErrorCode::UnknownBroker
    );
    let d = c.image.decide_unregister_broker(b(2));
    assert_eq!(code(&d.reply), ErrorCode::BrokerNotFenced);
    assert!(d.records.is_empty());

    c.fence(2);
    let d = c.image.decide_unregister_broker(b(2));
    assert_eq!(d.reply, Ok(()));
    c.commit(&d.records);
    assert!(c.image.broker(b(2)).is_none());
}

// ---- topics ----------------------------------------------------------------

#[test]
fn create_topic_places_replicas_and_elects_the_first_replica() {
    let mut c = Cluster::with_brokers(3);
    let req = CreateTopic {
        name: "orders".into(),
        partitions: 6,
        replication_factor: 2,
        configs: BTreeMap::from([(MIN_INSYNC_REPLICAS.to_string(), "2".to_string())]),
        ..CreateTopic::default()
    };
    let d = c.image.decide_create_topics(&[req], false, &mut c.rng);
    let created = d.reply[0].1.clone().unwrap();
    assert_eq!((created.partitions, created.replication_factor), (6, 2));
    assert_ne!(created.topic_id, TopicId(0));
    assert!(matches!(&d.records[0], MetadataRecord::Topic(t) if t.name == "orders"));
    assert_eq!(d.records.len(), 7);
    c.commit(&d.records);

    let mut leaders = BTreeMap::new();
    for (_, p) in c.image.partitions_of(created.topic_id) {
        assert_eq!(p.leader, Some(p.replicas[0]));
        assert_eq!(p.isr, p.replicas);
        *leaders.entry(p.replicas[0]).or_insert(0) += 1;
    }
    assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
}

#[test]
fn create_topics_refuses_bad_items_and_still_creates_the_good_one() {
    let mut c = Cluster::with_brokers(2);
    c.fence(2);
    c.create("taken", &[&[1]], &[]);
    let doomed = c.create("doomed", &[&[1]], &[]);
    let d = c.image.decide_delete_topics(&["doomed".into()]);
    c.commit(&d.records);
    assert!(c.image.topic(doomed).unwrap().marked_for_deletion());

    let plain = |name: &str, partitions, rf| CreateTopic {
        name: name.into(),
        partitions,
        replication_factor: rf,
        ..CreateTopic::default()
    };
    let manual = |name: &str, rows: Vec<Vec<BrokerId>>| CreateTopic {
        name: name.into(),
        assignments: Some(rows),
        ..CreateTopic::default()
    };
    let with_config = |name: &str, k: &str, v: &str| CreateTopic {
        configs: BTreeMap::from([(k.to_string(), v.to_string())]),
        ..plain(name, 1, 1)
    };
    let reqs = vec![
        plain("good", 2, 1),
        plain("bad name", 1, 1),
        plain("twice", 1, 1),
        plain("twice", 1, 1),
        plain("taken", 1, 1),
        plain("doomed", 1, 1),
        plain("zero", 0, 1),
        plain("huge", MAX_PARTITIONS_PER_TOPIC + 1, 1),
        plain("rf0", 1, 0),
        // Broker 2 is fenced: only one broker can lead.
        plain("rf2", 1, 2),
        with_config("unclean", UNCLEAN_LEADER_ELECTION, "maybe"),
        with_config("isr", MIN_INSYNC_REPLICAS, "2"),
        manual("empty", vec![]),
        manual("ragged", vec![bs(&[1]), bs(&[1, 2])]),
        manual("dup", vec![bs(&[1, 1])]),
        manual("ghost", vec![bs(&[1, 9])]),
        manual("no-leader", vec![bs(&[2])]),
    ];
    let d = c.image.decide_create_topics(&reqs, false, &mut c.rng);
    let codes: Vec<(&str, ErrorCode)> = d
        .reply
        .iter()
        .map(|(n, r)| {
            (
                n.as_str(),
                r.as_ref().err().map_or(ErrorCode::None, |e| e.code),
            )
        })
        .collect();
    assert_eq!(
        codes,
        vec![
            ("good", ErrorCode::None),
            ("bad name", ErrorCode::InvalidTopicName),
            ("twice", ErrorCode::InvalidRequest),
            ("twice", ErrorCode::InvalidRequest),
            ("taken", ErrorCode::TopicAlreadyExists),
            ("doomed", ErrorCode::TopicAlreadyExists),
            ("zero", ErrorCode::InvalidPartitions),
            ("huge", ErrorCode::InvalidPartitions),
            ("rf0", ErrorCode::InvalidReplicationFactor),
            ("rf2", ErrorCode::InvalidReplicationFactor),
            ("unclean", ErrorCode::InvalidConfig),
            ("isr", ErrorCode::InvalidConfig),
            ("empty", ErrorCode::InvalidReplicaAssignment),
            ("ragged", ErrorCode::InvalidReplicaAssignment),
            ("dup", ErrorCode::InvalidReplicaAssignment),
            ("ghost", ErrorCode::UnknownBroker),
            ("no-leader", ErrorCode::InvalidReplicaAssignment),
        ]
    );
    assert!(d.reply[5]
        .1
        .as_ref()
        .unwrap_err()
        .message
        .contains("marked for deletion"));
    // Only "good": its topic record and two partitions.
    assert_eq!(d.records.len(), 3);
    c.commit(&d.records);
    assert!(c.image.topic_by_name("good").is_some());
    assert!(c.image.topic_by_name("zero").is_none());
}

#[test]
fn validate_only_answers_without_writing() {
    let mut c = Cluster::with_brokers(1);
    let req = spread("t", 3, 1);
    let d = c.image.decide_create_topics(&[req], true, &mut c.rng);
    assert!(d.reply[0].1.is_ok());
    assert!(d.records.is_empty());
}

#[test]
fn create_partitions_only_grows_and_keeps_the_replication_factor() {
    let mut c = Cluster::with_brokers(3);
    let t = c.create("t", &[&[1, 2]], &[]);
    let doomed = c.create("doomed", &[&[1]], &[]);
    c.commit(&c.image.decide_delete_topics(&["doomed".into()]).records);

    let item = |name: &str, total, rows: Option<Vec<Vec<BrokerId>>>| CreatePartitions {
        name: name.into(),
        total,
        assignments: rows,
    };
    let d = c.image.decide_create_partitions(
        &[
            item("t", 3, None),
            item("missing", 2, None),
            item("doomed", 2, None),
            item("t", 1, None),
        ],
        false,
        &mut c.rng,
    );
    // "t" appears twice: both refused as ambiguous.
    let codes: Vec<ErrorCode> = d.reply.iter().map(|(_, r)| code(r)).collect();
    assert_eq!(
        codes,
        vec![
            ErrorCode::InvalidRequest,
            ErrorCode::UnknownTopic,
            ErrorCode::TopicDeletionInProgress,
            ErrorCode::InvalidRequest
        ]
    );
    assert!(d.records.is_empty());
    let _ = doomed;

    let shrink = c
        .image
        .decide_create_partitions(&[item("t", 1, None)], false, &mut c.rng);
    assert_eq!(code(&shrink.reply[0].1), ErrorCode::InvalidPartitions);

    let bad_rf =
        c.image
            .decide_create_partitions(&[item("t", 2, Some(vec![bs(&[3])]))], false, &mut c.rng);
    assert_eq!(
        code(&bad_rf.reply[0].1),
        ErrorCode::InvalidReplicaAssignment
    );

    let d = c.image.decide_create_partitions(
        &[item("t", 2, Some(vec![bs(&[3, 1])]))],
        false,
        &mut c.rng,
    );
    assert_eq!(d.reply[0].1, Ok(()));
    c.commit(&d.records);
    let d = c
        .image
        .decide_create_partitions(&[item("t", 4, None)], false, &mut c.rng);
    assert_eq!(d.records.len(), 2);
    c.commit(&d.records);
    assert_eq!(c.image.topic(t).unwrap().partition_count, 4);
    assert_eq!(c.p(t, 1).replicas, bs(&[3, 1]));
    assert!(c.image.partitions_of(t).all(|(_, p)| p.replicas.len() == 2));
}

#[test]
fn alter_configs_writes_only_real_changes_and_validates_the_result() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("t", &[&[1, 2]], &[("retention.ms", "1000")]);
    let set = |k: &str, v: &str| ConfigOp::Set(k.into(), v.into());

    let d = c.image.decide_alter_configs(
        &[
            (
                "t".into(),
                vec![
                    set("retention.ms", "1000"),
                    set(MIN_INSYNC_REPLICAS, "2"),
                    ConfigOp::Delete("absent".into()),
                ],
            ),
            ("missing".into(), vec![set("a", "b")]),
        ],
        false,
    );
    assert_eq!(d.reply[0].1, Ok(()));
    assert_eq!(code(&d.reply[1].1), ErrorCode::UnknownTopic);
    assert_eq!(
        d.records,
        vec![MetadataRecord::TopicConfig {
            topic_id: t,
            key: MIN_INSYNC_REPLICAS.into(),
            value: Some("2".into())
        }]
    );
    c.commit(&d.records);

    let too_many = c
        .image
        .decide_alter_configs(&[("t".into(), vec![set(MIN_INSYNC_REPLICAS, "3")])], false);
    assert_eq!(code(&too_many.reply[0].1), ErrorCode::InvalidConfig);
    assert!(too_many.records.is_empty());

    let dry = c.image.decide_alter_configs(
        &[("t".into(), vec![ConfigOp::Delete("retention.ms".into())])],
        true,
    );
    assert_eq!(dry.reply[0].1, Ok(()));
    assert!(dry.records.is_empty());

    // The last op on a key wins, and only its final value is validated;
    // records come in key order.
    let d = c.image.decide_alter_configs(
        &[(
            "t".into(),
            vec![
                set(MIN_INSYNC_REPLICAS, "9"),
                set("x", "1"),
                ConfigOp::Delete(MIN_INSYNC_REPLICAS.into()),
                set("x", "2"),
            ],
        )],
        false,
    );
    assert_eq!(d.reply[0].1, Ok(()));
    assert_eq!(
        d.records,
        vec![
            MetadataRecord::TopicConfig {
                topic_id: t,
                key: MIN_INSYNC_REPLICAS.into(),
                value: None
            },
            MetadataRecord::TopicConfig {
                topic_id: t,
                key: "x".into(),
                value: Some("2".into())
            },
        ]
    );
}

#[test]
fn enabling_unclean_election_elects_leaderless_partitions_at_once() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("t", &[&[1, 2]], &[]);
    c.alter_isr(TopicPartition::new(t, 0), &[1]);
    c.fence(1);
    assert_eq!(c.p(t, 0).leader, None);

    let d = c.image.decide_alter_configs(
        &[(
            "t".into(),
            vec![ConfigOp::Set(UNCLEAN_LEADER_ELECTION.into(), "true".into())],
        )],
        false,
    );
    assert_eq!(d.records.len(), 2);
    assert!(change(&d.records, 1).unclean);
    c.commit(&d.records);
    assert_eq!(c.p(t, 0).leader, Some(b(2)));
}

// ---- deletion --------------------------------------------------------------

#[test]
fn deletion_runs_from_mark_to_removal_and_retries_failed_deletes() {
    let mut c = Cluster::with_brokers(3);
    let t = c.create("d", &[&[1, 2], &[2, 3]], &[]);

    let d = c.image.decide_delete_topics(&["d".into(), "nope".into()]);
    assert_eq!(d.reply[0].1, Ok(t));
    assert_eq!(code(&d.reply[1].1), ErrorCode::UnknownTopic);
    assert_eq!(change(&d.records, 0).leader, LeaderChange::NoLeader);
    assert_eq!(change(&d.records, 1).leader, LeaderChange::NoLeader);
    assert_eq!(
        d.records[2],
        MetadataRecord::MarkTopicForDeletion { topic_id: t }
    );
    c.commit(&d.records);
    assert_eq!(c.p(t, 0).state, PartitionState::Offline);
    // Asking again is fine and writes nothing.
    let again = c.image.decide_delete_topics(&["d".into()]);
    assert_eq!((again.reply[0].1.clone(), again.records.len()), (Ok(t), 0));

    let step = c.image.decide_deletion_progress(t);
    let all = vec![
        (PartitionId(0), b(1)),
        (PartitionId(0), b(2)),
        (PartitionId(1), b(2)),
        (PartitionId(1), b(3)),
    ];
    assert_eq!(
        step.records,
        vec![MetadataRecord::ReplicaDeletionState {
            topic_id: t,
            replicas: all.clone(),
            state: ReplicaState::DeletionStarted
        }]
    );
    assert_eq!(step.reply.send_stop_replica.len(), 4);
    assert_eq!(
        (step.reply.paused.clone(), step.reply.removed),
        (None, false)
    );
    c.commit(&step.records);

    // One delete fails.
    let results: Vec<(PartitionId, BrokerId, bool)> =
        all.iter().map(|(p, br)| (*p, *br, *br != b(3))).collect();
    let d = c.image.decide_replica_deletion_results(t, &results);
    assert!(!d.reply);
    c.commit(&d.records);
    let tp1 = TopicPartition::new(t, 1);
    assert_eq!(
        c.image.replica_state(&tp1, b(3)),
        ReplicaState::DeletionIneligible
    );
    // A stale report for an already deleted replica is ignored.
    assert!(c
        .image
        .decide_replica_deletion_results(t, &[(PartitionId(0), b(1), true)])
        .records
        .is_empty());

    // The failed one is retried: Ineligible -> Offline -> Started.
    let step = c.image.decide_deletion_progress(t);
    assert_eq!(step.reply.send_stop_replica, vec![(tp1, b(3))]);
    assert_eq!(step.records.len(), 2);
    c.commit(&step.records);

    let d = c
        .image
        .decide_replica_deletion_results(t, &[(PartitionId(1), b(3), true)]);
    assert!(d.reply);
    assert_eq!(
        d.records.last(),
        Some(&MetadataRecord::RemoveTopic { topic_id: t })
    );
    c.commit(&d.records);
    assert!(c.image.topic(t).is_none());
    assert_eq!(c.image.partition_count(), 0);
    assert!(c.image.decide_deletion_progress(t).reply.removed);

    // The name is free again and gets a new id.
    let again = c.create("d", &[&[1]], &[]);
    assert_ne!(again, t);
}

#[test]
fn deletion_waits_for_a_fenced_broker_and_resumes_when_it_returns() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("d", &[&[1, 2]], &[]);
    c.commit(&c.image.decide_delete_topics(&["d".into()]).records);
    c.commit(&c.image.decide_deletion_progress(t).records);

    // Broker 2 dies with the delete in flight.
    let d = c.image.decide_fence_broker(b(2));
    assert_eq!(
        d.records.len(),
        1,
        "a topic being deleted keeps its ISR as is"
    );
    c.commit(&d.records);

    let step = c.image.decide_deletion_progress(t);
    let tp = TopicPartition::new(t, 0);
    assert!(step
        .reply
        .paused
        .as_deref()
        .unwrap()
        .contains("fenced broker(s) 2"));
    assert_eq!(step.reply.send_stop_replica, vec![(tp, b(1))]);
    assert_eq!(
        step.records,
        vec![MetadataRecord::ReplicaDeletionState {
            topic_id: t,
            replicas: vec![(PartitionId(0), b(2))],
            state: ReplicaState::DeletionIneligible
        }]
    );
    c.commit(&step.records);
    let d = c
        .image
        .decide_replica_deletion_results(t, &[(PartitionId(0), b(1), true)]);
    assert!(!d.reply, "not removed while broker 2 still holds a replica");
    c.commit(&d.records);
    let paused = c.image.decide_deletion_progress(t);
    assert!(paused.reply.paused.is_some() && paused.records.is_empty());

    c.unfence(2);
    let step = c.image.decide_deletion_progress(t);
    assert_eq!(step.reply.paused, None);
    assert_eq!(step.reply.send_stop_replica, vec![(tp, b(2))]);
    c.commit(&step.records);
    let d = c
        .image
        .decide_replica_deletion_results(t, &[(PartitionId(0), b(2), true)]);
    assert!(d.reply);
    c.commit(&d.records);
    assert!(c.image.topic(t).is_none());
}

#[test]
fn replicas_on_unregistered_brokers_count_as_deleted() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("d", &[&[1, 2]], &[]);
    c.fence(2);
    c.commit(&c.image.decide_unregister_broker(b(2)).records);
    c.commit(&c.image.decide_delete_topics(&["d".into()]).records);

    let step = c.image.decide_deletion_progress(t);
    assert_eq!(
        step.reply.send_stop_replica,
        vec![(TopicPartition::new(t, 0), b(1))]
    );
    assert_eq!(step.reply.paused, None);
    c.commit(&step.records);
    assert_eq!(
        c.image.replica_state(&TopicPartition::new(t, 0), b(2)),
        ReplicaState::DeletionSuccessful
    );
    let d = c
        .image
        .decide_replica_deletion_results(t, &[(PartitionId(0), b(1), true)]);
    assert!(d.reply);
    c.commit(&d.records);
}

#[test]
fn deletion_waits_for_an_in_flight_reassignment_which_is_then_abandoned() {
    let mut c = Cluster::with_brokers(3);
    let t = c.create("d", &[&[1, 2]], &[]);
    let tp = TopicPartition::new(t, 0);
    c.commit(
        &c.image
            .decide_alter_reassignments(&[(tp, Some(bs(&[1, 3])))])
            .records,
    );
    assert!(c.p(t, 0).reassigning());
    let d = c.image.decide_alter_reassignments(&[(tp, None)]);
    assert_eq!(d.reply[0].1, Ok(()), "cancel is allowed before deletion");

    c.commit(&c.image.decide_delete_topics(&["d".into()]).records);
    let step = c.image.decide_deletion_progress(t);
    assert!(step.reply.paused.as_deref().unwrap().contains("reassigned"));
    assert!(step.records.is_empty());
    let refused = c.image.decide_alter_reassignments(&[(tp, None)]);
    assert_eq!(
        code(&refused.reply[0].1),
        ErrorCode::TopicDeletionInProgress
    );

    // Without a leader the new replica never catches up: give it up.
    let d = c.image.decide_reassignment_progress();
    assert_eq!(d.reply, vec![tp]);
    c.commit(&d.records);
    assert_eq!(c.p(t, 0).replicas, bs(&[1, 2]));

    let step = c.image.decide_deletion_progress(t);
    assert_eq!(step.reply.paused, None);
    // Broker 3 may already hold a copy: it is told to delete it too.
    assert_eq!(step.reply.send_stop_replica.len(), 3);
    c.commit(&step.records);
    let results: Vec<_> = [1, 2, 3]
        .iter()
        .map(|i| (PartitionId(0), b(*i), true))
        .collect();
    let d = c.image.decide_replica_deletion_results(t, &results);
    assert!(d.reply);
    c.commit(&d.records);
}

// ---- partitions ------------------------------------------------------------

#[test]
fn alter_partition_checks_broker_epochs_and_each_item() {
    let mut c = Cluster::with_brokers(4);
    let t = c.create("t", &[&[1, 2, 3]], &[]);
    let tp = TopicPartition::new(t, 0);
    let e1 = c.epoch(1);
    let item = |isr: &[u32], le: u32, pe: u32| AlterPartitionItem {
        tp,
        leader_epoch: LeaderEpoch(le),
        partition_epoch: PartitionEpoch(pe),
        new_isr: bs(isr),
    };

    let d = c
        .image
        .decide_alter_partition(b(9), e1, &[item(&[1], 0, 0)]);
    assert_eq!(code(&d.reply), ErrorCode::UnknownBroker);
    let d = c
        .image
        .decide_alter_partition(b(1), BrokerEpoch(e1.0 + 1), &[item(&[1], 0, 0)]);
    assert_eq!(code(&d.reply), ErrorCode::StaleBrokerEpoch);
    assert!(d.records.is_empty());

    let mut unknown_topic = item(&[1], 0, 0);
    unknown_topic.tp = TopicPartition::new(TopicId(77), 0);
    let mut unknown_partition = item(&[1], 0, 0);
    unknown_partition.tp = TopicPartition::new(t, 5);
    let d = c.image.decide_alter_partition(
        b(1),
        e1,
        &[
            unknown_topic,
            unknown_partition,
            item(&[1, 2], 1, 0),
            item(&[], 0, 0),
            item(&[1, 1], 0, 0),
            item(&[1, 4], 0, 0),
            item(&[2, 3], 0, 0),
            item(&[3, 2, 1], 0, 0),
            item(&[1, 2], 0, 0),
            item(&[1], 0, 0),
        ],
    );
    let replies = d.reply.as_ref().unwrap();
    let codes: Vec<ErrorCode> = replies
        .iter()
        .map(|(_, r)| r.as_ref().err().map_or(ErrorCode::None, |e| e.code))
        .collect();
    assert_eq!(
        codes,
        vec![
            ErrorCode::UnknownTopic,
            ErrorCode::UnknownPartition,
            ErrorCode::FencedLeaderEpoch,
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidRequest,
            // Same members in another order: nothing to change.
            ErrorCode::None,
            ErrorCode::None,
            // The previous item moved the partition epoch on.
            ErrorCode::InvalidPartitionEpoch,
        ]
    );
    assert_eq!(
        replies[7].1.as_ref().unwrap().partition_epoch,
        PartitionEpoch(0)
    );
    let after = replies[8].1.as_ref().unwrap();
    assert_eq!(
        (&after.isr, after.partition_epoch),
        (&bs(&[1, 2]), PartitionEpoch(1))
    );
    assert_eq!(d.records.len(), 1);
    c.commit(&d.records);

    // Only the leader may change the ISR.
    let d = c
        .image
        .decide_alter_partition(b(2), c.epoch(2), &[item(&[2], 0, 1)]);
    assert_eq!(code(&d.reply.unwrap()[0].1), ErrorCode::NotLeaderOrFollower);

    // A fenced broker cannot join the ISR; a live one can.
    c.fence(3);
    let d = c
        .image
        .decide_alter_partition(b(1), e1, &[item(&[1, 2, 3], 0, 1)]);
    assert_eq!(code(&d.reply.unwrap()[0].1), ErrorCode::IneligibleReplica);
    c.unfence(3);
    let d = c
        .image
        .decide_alter_partition(b(1), e1, &[item(&[1, 2, 3], 0, 1)]);
    assert!(d.reply.unwrap()[0].1.is_ok());
    c.commit(&d.records);
    assert_eq!(c.p(t, 0).isr, bs(&[1, 2, 3]));
}

#[test]
fn preferred_election_returns_leadership_to_the_first_replica() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("t", &[&[1, 2]], &[]);
    let tp = TopicPartition::new(t, 0);

    let d = c
        .image
        .decide_elect_leaders(ElectionKind::Preferred, Some(&[tp]));
    assert_eq!(code(&d.reply[0].1), ErrorCode::ElectionNotNeeded);

    c.fence(1);
    c.unfence(1);
    assert_eq!(c.p(t, 0).leader, Some(b(2)));
    // Broker 1 is back but not in sync yet.
    let d = c
        .image
        .decide_elect_leaders(ElectionKind::Preferred, Some(&[tp]));
    assert_eq!(code(&d.reply[0].1), ErrorCode::PreferredLeaderNotAvailable);
    assert!(d.records.is_empty());
    let all = c.image.decide_elect_leaders(ElectionKind::Preferred, None);
    assert_eq!(
        code(&all.reply[0].1),
        ErrorCode::PreferredLeaderNotAvailable
    );

    c.alter_isr(tp, &[2, 1]);
    let d = c.image.decide_elect_leaders(ElectionKind::Preferred, None);
    assert_eq!(d.reply, vec![(tp, Ok(b(1)))]);
    c.commit(&d.records);
    assert_eq!(
        (c.p(t, 0).leader, c.p(t, 0).leader_epoch),
        (Some(b(1)), LeaderEpoch(2))
    );
    // Nothing left to do: an all-partitions election reports nothing.
    assert!(c
        .image
        .decide_elect_leaders(ElectionKind::Preferred, None)
        .reply
        .is_empty());
}

#[test]
fn unclean_election_is_for_leaderless_partitions_only() {
    let mut c = Cluster::with_brokers(3);
    let t = c.create("t", &[&[1, 2]], &[]);
    let u = c.create("u", &[&[3]], &[]);
    let (tp, up) = (TopicPartition::new(t, 0), TopicPartition::new(u, 0));
    c.alter_isr(tp, &[1]);
    c.fence(1);
    c.fence(3);
    // Unclean election is off for the topic: the offline sweep leaves it.
    assert!(c.image.decide_elect_offline().records.is_empty());

    let d = c.image.decide_elect_leaders(
        ElectionKind::Unclean,
        Some(&[tp, up, TopicPartition::new(t, 9)]),
    );
    assert_eq!(d.reply[0].1, Ok(b(2)));
    assert_eq!(code(&d.reply[1].1), ErrorCode::EligibleLeadersNotAvailable);
    assert_eq!(code(&d.reply[2].1), ErrorCode::UnknownPartition);
    assert!(change(&d.records, 0).unclean);
    c.commit(&d.records);
    assert_eq!((c.p(t, 0).leader, &c.p(t, 0).isr), (Some(b(2)), &bs(&[2])));

    let d = c
        .image
        .decide_elect_leaders(ElectionKind::Unclean, Some(&[tp]));
    assert_eq!(code(&d.reply[0].1), ErrorCode::ElectionNotNeeded);
}

#[test]
fn offline_sweep_elects_where_someone_can_lead() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("t", &[&[1, 2]], &[(UNCLEAN_LEADER_ELECTION, "true")]);
    c.alter_isr(TopicPartition::new(t, 0), &[1]);
    c.fence(2);
    c.fence(1);
    assert_eq!(c.p(t, 0).leader, None);
    // Broker 2 is back: it is unfenced without the normal election pass
    // (as after a controller failover), so the sweep has to find it.
    let d = c.image.decide_heartbeat(
        &Heartbeat {
            broker: b(2),
            epoch: c.epoch(2),
            metadata_offset: 0,
            want_fence: false,
            want_shutdown: false,
            offline_log_dirs: vec![],
        },
        true,
    );
    c.commit(&d.records);
    assert_eq!(c.p(t, 0).leader, Some(b(2)), "unfencing elects right away");
    assert!(c.image.decide_elect_offline().records.is_empty());
}

#[test]
fn auto_rebalance_moves_leaders_home_above_the_threshold() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("t", &[&[1, 2], &[1, 2], &[2, 1]], &[]);
    c.fence(1);
    c.unfence(1);
    for i in 0..3 {
        c.alter_isr(TopicPartition::new(t, i), &[2, 1]);
    }
    // Broker 1 is preferred for two partitions and leads neither: 100%.
    assert!(c.image.decide_auto_rebalance(100).records.is_empty());
    let d = c.image.decide_auto_rebalance(10);
    assert_eq!(
        d.reply,
        vec![TopicPartition::new(t, 0), TopicPartition::new(t, 1)]
    );
    c.commit(&d.records);
    assert_eq!(c.p(t, 0).leader, Some(b(1)));
    assert_eq!(c.p(t, 2).leader, Some(b(2)));
    assert!(c.image.decide_auto_rebalance(0).records.is_empty());
}

// ---- reassignment ----------------------------------------------------------

#[test]
fn reassignment_that_removes_the_leader_completes_when_new_replicas_catch_up() {
    let mut c = Cluster::with_brokers(4);
    let t = c.create("t", &[&[1, 2]], &[]);
    let tp = TopicPartition::new(t, 0);

    let d = c
        .image
        .decide_alter_reassignments(&[(tp, Some(bs(&[3, 4])))]);
    assert_eq!(d.reply, vec![(tp, Ok(()))]);
    let start = change(&d.records, 0);
    assert_eq!(start.replicas, Some(bs(&[3, 4, 1, 2])));
    assert_eq!(
        (start.adding.clone(), start.removing.clone()),
        (Some(bs(&[3, 4])), Some(bs(&[1, 2])))
    );
    assert_eq!(d.records.len(), 1, "new replicas are not in sync yet");
    c.commit(&d.records);
    assert_eq!(c.image.list_reassignments().len(), 1);
    assert!(c.image.decide_reassignment_progress().records.is_empty());

    // The leader reports the new replicas in sync: the move completes in
    // the same decision and leadership moves into the target.
    let p = c.p(t, 0).clone();
    let d = c.image.decide_alter_partition(
        b(1),
        c.epoch(1),
        &[AlterPartitionItem {
            tp,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: bs(&[1, 2, 3, 4]),
        }],
    );
    assert_eq!(d.records.len(), 2);
    let done = change(&d.records, 1);
    assert_eq!(done.leader, LeaderChange::To(b(3)));
    assert_eq!(
        (done.replicas.clone(), done.isr.clone()),
        (Some(bs(&[3, 4])), Some(bs(&[3, 4])))
    );
    let after = d.reply.as_ref().unwrap()[0].1.clone().unwrap();
    assert_eq!(
        (after.leader, after.leader_epoch),
        (Some(b(3)), LeaderEpoch(1))
    );
    c.commit(&d.records);
    assert!(!c.p(t, 0).reassigning());
    assert!(c.image.list_reassignments().is_empty());
}

#[test]
fn a_reassignment_that_only_removes_replicas_completes_at_once() {
    let mut c = Cluster::with_brokers(3);
    let t = c.create("t", &[&[1, 2, 3]], &[]);
    let tp = TopicPartition::new(t, 0);
    let d = c
        .image
        .decide_alter_reassignments(&[(tp, Some(bs(&[2, 3])))]);
    assert_eq!(d.records.len(), 2);
    c.commit(&d.records);
    let p = c.p(t, 0);
    assert_eq!(
        (&p.replicas, &p.isr, p.leader),
        (&bs(&[2, 3]), &bs(&[2, 3]), Some(b(2)))
    );
    // Asking for what is already there changes nothing.
    assert!(c
        .image
        .decide_alter_reassignments(&[(tp, Some(bs(&[2, 3])))])
        .records
        .is_empty());
}

#[test]
fn cancel_returns_to_the_original_replicas() {
    let mut c = Cluster::with_brokers(3);
    let t = c.create("t", &[&[1, 2]], &[]);
    let tp = TopicPartition::new(t, 0);
    c.commit(
        &c.image
            .decide_alter_reassignments(&[(tp, Some(bs(&[1, 3])))])
            .records,
    );
    assert_eq!(c.p(t, 0).replicas, bs(&[1, 3, 2]));

    let d = c.image.decide_alter_reassignments(&[(tp, None)]);
    assert_eq!(d.reply, vec![(tp, Ok(()))]);
    c.commit(&d.records);
    let p = c.p(t, 0);
    assert_eq!(
        (&p.replicas, &p.isr, p.reassigning()),
        (&bs(&[1, 2]), &bs(&[1, 2]), false)
    );

    let again = c.image.decide_alter_reassignments(&[(tp, None)]);
    assert_eq!(code(&again.reply[0].1), ErrorCode::NoReassignmentInProgress);
    assert!(again.records.is_empty());
}

#[test]
fn reassignment_refuses_bad_targets() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("t", &[&[1, 2]], &[]);
    let tp = TopicPartition::new(t, 0);
    let d = c.image.decide_alter_reassignments(&[
        (TopicPartition::new(TopicId(5), 0), Some(bs(&[1]))),
        (TopicPartition::new(t, 3), Some(bs(&[1]))),
        (tp, Some(vec![])),
        (tp, Some(bs(&[1, 1]))),
        (tp, Some(bs(&[1, 9]))),
        (tp, Some(bs(&[2, 1]))),
    ]);
    let codes: Vec<ErrorCode> = d
        .reply
        .iter()
        .map(|(_, r)| r.as_ref().err().map_or(ErrorCode::None, |e| e.code))
        .collect();
    assert_eq!(
        codes,
        vec![
            ErrorCode::UnknownTopic,
            ErrorCode::UnknownPartition,
            ErrorCode::InvalidReplicaAssignment,
            ErrorCode::InvalidReplicaAssignment,
            ErrorCode::UnknownBroker,
            ErrorCode::None,
        ]
    );
    // Only the reorder was written.
    assert_eq!(d.records.len(), 1);
    c.commit(&d.records);
    assert_eq!(c.p(t, 0).replicas, bs(&[2, 1]));
}

#[test]
fn enabling_unclean_election_through_alter_configs_elects_leaderless_partitions() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("t", &[&[1, 2]], &[]);
    let other = c.create("other", &[&[2, 1]], &[]);
    let tp = TopicPartition::new(t, 0);
    c.alter_isr(tp, &[1]);
    c.fence(1);
    assert_eq!(c.p(t, 0).leader, None, "only the fenced broker is in sync");

    let set = |k: &str, v: &str| ConfigOp::Set(k.into(), v.into());
    let d = c.image.decide_alter_configs(
        &[
            ("other".into(), vec![set("retention.ms", "5")]),
            ("t".into(), vec![set(UNCLEAN_LEADER_ELECTION, "TRUE")]),
        ],
        false,
    );
    assert_eq!(d.reply[0].1, Ok(()));
    assert_eq!(d.reply[1].1, Ok(()));
    assert_eq!(
        d.records[..2],
        [
            MetadataRecord::TopicConfig {
                topic_id: other,
                key: "retention.ms".into(),
                value: Some("5".into())
            },
            MetadataRecord::TopicConfig {
                topic_id: t,
                key: UNCLEAN_LEADER_ELECTION.into(),
                value: Some("TRUE".into())
            },
        ]
    );
    assert_eq!(d.records.len(), 3, "one election: {:?}", d.records);
    c.commit(&d.records);
    assert_eq!(c.p(t, 0).leader, Some(b(2)), "unclean election of broker 2");
    assert_eq!(c.p(t, 0).isr, bs(&[2]));
    assert_eq!(
        c.image
            .topic(other)
            .unwrap()
            .configs
            .get("retention.ms")
            .map(|v| &**v),
        Some("5")
    );

    // Setting it again (no change) or to false elects nothing.
    let d = c.image.decide_alter_configs(
        &[("t".into(), vec![set(UNCLEAN_LEADER_ELECTION, "false")])],
        false,
    );
    assert_eq!(d.records.len(), 1);
}
