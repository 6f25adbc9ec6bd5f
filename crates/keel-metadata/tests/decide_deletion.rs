//! Decisions of `decide/deletion.rs`: marking topics for deletion and
//! driving the replica deletions to the topic's removal. Each test builds a
//! context, decides, checks the records and the reply, replays, checks the
//! image.

mod common;

use common::*;
use keel_metadata::*;

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
