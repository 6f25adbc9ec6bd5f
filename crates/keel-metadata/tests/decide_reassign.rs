//! Decisions of `decide/reassign.rs`: starting, completing and cancelling
//! partition reassignments. Each test builds a context, decides, checks the
//! records and the reply, replays, checks the image.

mod common;

use common::*;
use keel_metadata::decide::*;
use keel_metadata::*;

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
fn cancelling_a_reassignment_returns_to_the_original_replicas() {
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
    assert_eq!(
        codes(&d.reply),
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
