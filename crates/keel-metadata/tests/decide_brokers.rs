//! Decisions of `decide/brokers.rs`: registration, fencing, unfencing,
//! heartbeats, failed log dirs, controlled shutdown, unregistration; and the
//! scratch image a decision hands over. Each test builds a context,
//! decides, checks the records and the reply, replays, checks the image.

mod common;

use common::*;
use keel_metadata::decide::*;
use keel_metadata::*;

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
fn a_registration_naming_an_epoch_above_the_current_one_is_refused_and_changes_nothing() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("t", &[&[1, 2]], &[]);
    let current = c.epoch(1);
    let before = c.image.clone();
    // Broker 1's own incarnation (as a caller that read it would send),
    // naming an epoch the cluster never gave out, live session or not.
    for live in [true, false] {
        let forged = Cluster::register_request(1, 1, BrokerEpoch(current.0 + 1));
        let d = c.image.decide_register_broker(&forged, live);
        assert_eq!(code(&d.reply), ErrorCode::InvalidRequest);
        assert!(d.records.is_empty(), "{:?}", d.records);
        let e = d.reply.unwrap_err();
        assert!(e.message.contains("above the current one"), "{}", e.message);
    }
    assert_eq!(c.image, before);
    assert_eq!(c.p(t, 0).leader, Some(b(1)));
    // The real broker, naming its own epoch, still re-registers.
    let d = c
        .image
        .decide_register_broker(&Cluster::register_request(1, 1, current), true);
    assert_eq!(d.reply, Ok(RegisterReply::New));
}

#[test]
fn a_broker_never_adopts_a_registration_made_at_another_address() {
    let mut c = Cluster::new();
    // Someone who learned broker 1's incarnation registers it first, at an
    // address of theirs.
    let mut forged = Cluster::register_request(1, 0xa, BrokerEpoch(0));
    forged.address = "10.9.9.9:9092".into();
    let d = c.image.decide_register_broker(&forged, false);
    c.commit(&d.records);
    let theirs = c.epoch(1);

    // The real broker (same incarnation, its own address, an older epoch)
    // is not handed that registration: it replaces it.
    let real = Cluster::register_request(1, 0xa, BrokerEpoch(0));
    let d = c.image.decide_register_broker(&real, false);
    assert_eq!(d.reply, Ok(RegisterReply::New));
    c.commit(&d.records);
    let reg = c.image.broker(b(1)).unwrap();
    assert_eq!(reg.address, real.address);
    assert!(reg.epoch > theirs);
    // A retry of the real broker's own registration gets it back.
    let retry = c.image.decide_register_broker(&real, true);
    assert_eq!(retry.reply, Ok(RegisterReply::Existing(reg.epoch)));
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
fn fencing_a_broker_in_100k_partitions_writes_one_change_each_and_moves_every_leadership() {
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

    // How long this takes is measured, not asserted (a busy 2-core machine
    // would make it flaky): `cargo bench -p keel-metadata --bench core`
    // (`fence_100k_partitions`) and `keel bench broker-failure`.
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

#[test]
fn the_last_broker_able_to_lead_shuts_down_and_leaves_what_it_alone_leads_offline() {
    let mut c = Cluster::with_brokers(3);
    let t = c.create("t", &[&[1, 2, 3], &[2, 1, 3]], &[]);
    let solo = c.create("solo", &[&[1]], &[]);
    // Brokers 2 and 3 shut down first (as `keel dev` stops all three at
    // once): 2's leadership moves to 1, both leave the ISRs.
    for id in [2, 3] {
        let d = c.image.decide_controlled_shutdown(b(id), c.epoch(id));
        assert!(d.reply.clone().unwrap().should_shut_down, "broker {id}");
        c.commit(&d.records);
    }
    assert_eq!((c.p(t, 1).leader, &c.p(t, 1).isr), (Some(b(1)), &bs(&[1])));

    // Broker 1 leads everything and no one can take over: it is fenced and
    // may go at once; its partitions are left without a leader, it stays
    // their last ISR member.
    let epoch = c.epoch(1);
    let d = c.image.decide_controlled_shutdown(b(1), epoch);
    assert_eq!(
        d.records[..2],
        [
            MetadataRecord::BrokerShuttingDown {
                broker: b(1),
                epoch
            },
            MetadataRecord::FenceBroker {
                broker: b(1),
                epoch
            },
        ]
    );
    let reply = d.reply.clone().unwrap();
    assert!(reply.should_shut_down && reply.is_fenced, "{reply:?}");
    assert_eq!(reply.remaining_leaderships, 0);
    c.commit(&d.records);
    for (topic, i) in [(t, 0), (t, 1), (solo, 0)] {
        assert_eq!(c.p(topic, i).leader, None, "{topic} {i}");
        assert_eq!(c.p(topic, i).isr, bs(&[1]), "{topic} {i}");
    }
    c.image.validate().expect("valid image");
    // A retry (the answer was lost) still lets it go, and changes nothing.
    let d = c.image.decide_controlled_shutdown(b(1), epoch);
    assert!(d.records.is_empty());
    assert!(d.reply.unwrap().should_shut_down);
}

#[test]
fn a_broker_leading_a_sole_isr_partition_waits_while_another_broker_is_live() {
    // The failing side of the test above: one other live broker is enough
    // to keep the sole in-sync leader (an operator may add a replica).
    let mut c = Cluster::with_brokers(2);
    let solo = c.create("solo", &[&[1]], &[]);
    let d = c.image.decide_controlled_shutdown(b(1), c.epoch(1));
    let reply = d.reply.clone().unwrap();
    assert!(!reply.should_shut_down && !reply.is_fenced, "{reply:?}");
    assert_eq!(reply.remaining_leaderships, 1);
    c.commit(&d.records);
    assert_eq!(c.p(solo, 0).leader, Some(b(1)));
    // Once that broker is gone too, the last one goes.
    c.fence(2);
    let d = c.image.decide_controlled_shutdown(b(1), c.epoch(1));
    assert!(d.reply.clone().unwrap().should_shut_down);
    c.commit(&d.records);
    assert_eq!(c.p(solo, 0).leader, None);
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
    assert!(*kept.image() == replayed_on(&c.image, &d.records));
    kept.verify(&c.image, &d.records).expect("the proof holds");
    assert_eq!(
        kept.image()
            .partition(&TopicPartition::new(t, 0))
            .unwrap()
            .leader,
        Some(b(2))
    );
    assert_eq!(
        kept.image().offset(),
        c.image.offset(),
        "no entry is applied yet"
    );

    let req = spread("u", 4, 3);
    let d = c.image.decide_create_topics(&[req], false, &mut c.rng);
    assert!(
        *d.replayed.as_ref().expect("create keeps its image").image()
            == replayed_on(&c.image, &d.records)
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
