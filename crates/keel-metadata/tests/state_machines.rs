//! The partition and replica state machines: every (from, to) pair against
//! a literal table of the legal moves, and replay refusing records that
//! would make an illegal move.

use std::collections::BTreeMap;
use std::fmt::Debug;

use keel_metadata::records::RecordBatch;
use keel_metadata::{
    BrokerEpoch, BrokerId, IncarnationId, LeaderChange, MetadataImage, MetadataRecord,
    PartitionChangeRecord, PartitionId, PartitionRecord, PartitionState, RegisterBrokerRecord,
    ReplayError, ReplayErrorKind, ReplicaState, TopicId, TopicPartition, TopicRecord,
    TransitionError,
};

use PartitionState as P;
use ReplicaState as R;

/// The legal partition moves, written out from DESIGN §3 and the classic
/// controller's `PartitionStateMachine`.
const LEGAL_PARTITION: &[(PartitionState, PartitionState)] = &[
    (P::NonExistent, P::New),
    (P::New, P::Online),
    (P::Online, P::Online),
    (P::Offline, P::Online),
    (P::New, P::Offline),
    (P::Online, P::Offline),
    (P::Offline, P::Offline),
    (P::New, P::NonExistent),
    (P::Offline, P::NonExistent),
];

/// The legal replica moves, written out from DESIGN §3 and the classic
/// controller's `ReplicaStateMachine`.
const LEGAL_REPLICA: &[(ReplicaState, ReplicaState)] = &[
    (R::NonExistent, R::New),
    (R::New, R::Online),
    (R::Online, R::Online),
    (R::Offline, R::Online),
    (R::New, R::Offline),
    (R::Online, R::Offline),
    (R::Offline, R::Offline),
    (R::DeletionIneligible, R::Offline),
    (R::Offline, R::DeletionStarted),
    (R::DeletionStarted, R::DeletionSuccessful),
    (R::DeletionStarted, R::DeletionIneligible),
    (R::DeletionSuccessful, R::NonExistent),
];

/// Tries `transition` on every (from, to) pair of `all`: exactly the moves
/// in `legal` succeed, and every other one is refused with `refusal(from,
/// to)`.
fn assert_exactly_the_legal_moves<S: Copy + PartialEq + Debug>(
    all: &[S],
    legal: &[(S, S)],
    transition: impl Fn(S, S) -> Result<S, TransitionError>,
    refusal: impl Fn(S, S) -> TransitionError,
) {
    let mut legal_count = 0;
    for &from in all {
        for &to in all {
            let got = transition(from, to);
            if legal.contains(&(from, to)) {
                legal_count += 1;
                assert_eq!(got, Ok(to), "{from:?} -> {to:?} must be legal");
            } else {
                assert_eq!(
                    got,
                    Err(refusal(from, to)),
                    "{from:?} -> {to:?} must be refused"
                );
            }
        }
    }
    assert_eq!(legal_count, legal.len(), "table has duplicates");
}

/// `valid_previous(to)` lists exactly the states `legal` moves from into
/// `to`, for every `to` of `all`.
fn assert_valid_previous_agrees<S: Copy + Ord + Debug + 'static>(
    what: &str,
    all: &[S],
    legal: &[(S, S)],
    valid_previous: impl Fn(S) -> &'static [S],
) {
    for &to in all {
        let mut want: Vec<_> = legal
            .iter()
            .filter(|(_, t)| *t == to)
            .map(|(f, _)| *f)
            .collect();
        let mut got = valid_previous(to).to_vec();
        want.sort();
        got.sort();
        assert_eq!(got, want, "{what} valid_previous({to:?})");
    }
}

#[test]
fn partition_state_machine_allows_exactly_the_legal_moves() {
    assert_eq!(P::ALL.len(), 4);
    assert_exactly_the_legal_moves(&P::ALL, LEGAL_PARTITION, P::transition, |from, to| {
        TransitionError::Partition { from, to }
    });
}

#[test]
fn replica_state_machine_allows_exactly_the_legal_moves() {
    assert_eq!(R::ALL.len(), 7);
    assert_exactly_the_legal_moves(&R::ALL, LEGAL_REPLICA, R::transition, |from, to| {
        TransitionError::Replica { from, to }
    });
}

#[test]
fn valid_previous_agrees_with_the_tables() {
    assert_valid_previous_agrees("partition", &P::ALL, LEGAL_PARTITION, P::valid_previous);
    assert_valid_previous_agrees("replica", &R::ALL, LEGAL_REPLICA, R::valid_previous);
}

#[test]
fn transition_errors_name_both_states() {
    let e = P::Online.transition(P::New).unwrap_err();
    assert_eq!(
        e.to_string(),
        "illegal partition state transition Online -> New"
    );
    let e = R::Offline.transition(R::DeletionSuccessful).unwrap_err();
    assert_eq!(
        e.to_string(),
        "illegal replica state transition Offline -> DeletionSuccessful"
    );
}

// ---- replay-level ---------------------------------------------------------

const TOPIC: TopicId = TopicId(0xfeed);

fn b(id: u32) -> BrokerId {
    BrokerId(id)
}

fn tp(p: u32) -> TopicPartition {
    TopicPartition::new(TOPIC, p)
}

/// Applies `records` as one entry at `offset`, panicking on failure.
fn apply(image: &mut MetadataImage, offset: u64, records: Vec<MetadataRecord>) {
    image
        .replay_batch(&RecordBatch::new(records), offset)
        .unwrap_or_else(|e| panic!("setup replay failed: {e}"));
    image.validate().expect("image valid after setup");
}

/// Brokers 1..=3 registered at offsets 1..=3 and unfenced at 4; topic
/// `TOPIC` with `partitions` partitions on [1, 2, 3] led by 1, at offset 5.
fn cluster(partitions: u32) -> MetadataImage {
    let mut image = MetadataImage::new();
    for id in 1..=3u32 {
        apply(
            &mut image,
            u64::from(id),
            vec![MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                broker: b(id),
                incarnation: IncarnationId(u128::from(id)),
                address: format!("127.0.0.{id}:9092"),
                rack: None,
                log_dirs: vec!["/data".into()],
            })],
        );
    }
    apply(
        &mut image,
        4,
        (1..=3u32)
            .map(|id| MetadataRecord::UnfenceBroker {
                broker: b(id),
                epoch: BrokerEpoch(u64::from(id)),
            })
            .collect(),
    );
    let mut records = vec![MetadataRecord::Topic(TopicRecord {
        topic_id: TOPIC,
        name: "orders".into(),
        configs: BTreeMap::new(),
    })];
    for p in 0..partitions {
        records.push(partition_record(
            p,
            vec![b(1), b(2), b(3)],
            vec![b(1), b(2), b(3)],
            Some(b(1)),
        ));
    }
    apply(&mut image, 5, records);
    image
}

/// The record that marks `TOPIC` for deletion.
fn mark_for_deletion() -> MetadataRecord {
    MetadataRecord::MarkTopicForDeletion { topic_id: TOPIC }
}

/// The record that creates partition `p` of `TOPIC`.
fn partition_record(
    p: u32,
    replicas: Vec<BrokerId>,
    isr: Vec<BrokerId>,
    leader: Option<BrokerId>,
) -> MetadataRecord {
    MetadataRecord::Partition(PartitionRecord {
        topic_id: TOPIC,
        partition: PartitionId(p),
        replicas,
        isr,
        leader,
    })
}

fn change(p: u32) -> PartitionChangeRecord {
    PartitionChangeRecord::new(TOPIC, PartitionId(p))
}

fn deletion_state(replicas: &[(u32, u32)], state: ReplicaState) -> MetadataRecord {
    MetadataRecord::ReplicaDeletionState {
        topic_id: TOPIC,
        replicas: replicas
            .iter()
            .map(|(p, br)| (PartitionId(*p), b(*br)))
            .collect(),
        state,
    }
}

fn all_replicas(partitions: u32) -> Vec<(u32, u32)> {
    (0..partitions)
        .flat_map(|p| (1..=3).map(move |br| (p, br)))
        .collect()
}

/// Replays `record` at `offset`, expects a failure, and checks the image
/// is exactly as before (the record left unapplied) and the error names
/// the log index.
fn refused(image: &mut MetadataImage, offset: u64, record: MetadataRecord) -> ReplayError {
    let before = image.clone();
    let hash_before = image.hash();
    let e = image
        .replay(&record, offset)
        .expect_err("record must be refused");
    assert_eq!(e.offset, offset);
    assert!(
        e.to_string().contains(&format!("log index {offset}")),
        "error must name the log index: {e}"
    );
    assert_eq!(
        *image, before,
        "a refused record must leave the image as it was"
    );
    assert_eq!(image.hash(), hash_before);
    image.validate().expect("image still valid");
    e
}

/// Replays `record` at `offset`, expects it refused as the illegal
/// replica move `from -> to`, and the image left as it was.
fn refused_replica_move(
    image: &mut MetadataImage,
    offset: u64,
    record: MetadataRecord,
    from: ReplicaState,
    to: ReplicaState,
) {
    let e = refused(image, offset, record);
    assert_eq!(*transition_kind(&e), TransitionError::Replica { from, to });
}

fn transition_kind(e: &ReplayError) -> &TransitionError {
    match &e.kind {
        ReplayErrorKind::Transition(t) => t,
        other => panic!("expected a transition error, got {other:?}"),
    }
}

#[test]
fn remove_topic_while_a_partition_is_online_is_refused() {
    let mut image = cluster(2);
    // Partition 1 goes offline, partition 0 keeps its leader.
    let mut off = change(1);
    off.leader = LeaderChange::NoLeader;
    apply(&mut image, 6, vec![MetadataRecord::PartitionChange(off)]);
    apply(
        &mut image,
        7,
        vec![
            mark_for_deletion(),
            deletion_state(&all_replicas(2), R::DeletionStarted),
            deletion_state(&all_replicas(2), R::DeletionSuccessful),
        ],
    );
    assert_eq!(image.partition(&tp(0)).unwrap().state, P::Online);

    let e = refused(
        &mut image,
        8,
        MetadataRecord::RemoveTopic { topic_id: TOPIC },
    );
    assert_eq!(
        *transition_kind(&e),
        TransitionError::Partition {
            from: P::Online,
            to: P::NonExistent
        }
    );
    assert!(image.topic(TOPIC).is_some());
    assert_eq!(image.partition_count(), 2);
}

#[test]
fn remove_topic_before_every_replica_is_deleted_is_refused() {
    let mut image = cluster(1);
    let mut off = change(0);
    off.leader = LeaderChange::NoLeader;
    apply(
        &mut image,
        6,
        vec![
            MetadataRecord::PartitionChange(off),
            mark_for_deletion(),
            deletion_state(&all_replicas(1), R::DeletionStarted),
            deletion_state(&[(0, 1), (0, 3)], R::DeletionSuccessful),
        ],
    );
    let e = refused(
        &mut image,
        7,
        MetadataRecord::RemoveTopic { topic_id: TOPIC },
    );
    assert_eq!(
        e.kind,
        ReplayErrorKind::DeletionIncomplete {
            topic: TOPIC,
            partition: 0,
            broker: b(2)
        }
    );
}

#[test]
fn remove_topic_not_marked_for_deletion_is_refused() {
    let mut image = cluster(1);
    let e = refused(
        &mut image,
        6,
        MetadataRecord::RemoveTopic { topic_id: TOPIC },
    );
    assert_eq!(e.kind, ReplayErrorKind::NotMarkedForDeletion(TOPIC));
}

#[test]
fn deletion_successful_straight_from_offline_is_refused() {
    let mut image = cluster(1);
    apply(&mut image, 6, vec![mark_for_deletion()]);
    assert_eq!(image.replica_state(&tp(0), b(2)), R::Offline);
    refused_replica_move(
        &mut image,
        7,
        deletion_state(&[(0, 2)], R::DeletionSuccessful),
        R::Offline,
        R::DeletionSuccessful,
    );
    assert_eq!(image.replica_state(&tp(0), b(2)), R::Offline);
}

#[test]
fn every_illegal_replica_deletion_move_is_refused_by_replay() {
    // The deletion record can name any target; from each state reachable in
    // the deletion map, every target outside the table must be refused, and
    // so must a legal move out of the deletion machine (to New, Online or
    // NonExistent).
    let deletion_targets = [
        R::Offline,
        R::DeletionStarted,
        R::DeletionSuccessful,
        R::DeletionIneligible,
    ];
    let reach: &[(ReplicaState, &[ReplicaState])] = &[
        (R::Offline, &[]),
        (R::DeletionStarted, &[R::DeletionStarted]),
        (
            R::DeletionSuccessful,
            &[R::DeletionStarted, R::DeletionSuccessful],
        ),
        (
            R::DeletionIneligible,
            &[R::DeletionStarted, R::DeletionIneligible],
        ),
    ];
    let mut offset = 100;
    for (from, path) in reach {
        for to in R::ALL {
            let mut image = cluster(1);
            let mut records = vec![mark_for_deletion()];
            records.extend(path.iter().map(|s| deletion_state(&[(0, 3)], *s)));
            apply(&mut image, 6, records);
            assert_eq!(image.replica_state(&tp(0), b(3)), *from);
            offset += 1;
            let record = deletion_state(&[(0, 3)], to);
            if LEGAL_REPLICA.contains(&(*from, to)) && deletion_targets.contains(&to) {
                image.replay(&record, offset).expect("legal move replays");
                assert_eq!(image.replica_state(&tp(0), b(3)), to);
            } else {
                refused_replica_move(&mut image, offset, record, *from, to);
            }
        }
    }
}

#[test]
fn deletion_state_for_an_unmarked_topic_is_refused() {
    let mut image = cluster(1);
    let e = refused(&mut image, 6, deletion_state(&[(0, 1)], R::DeletionStarted));
    assert_eq!(e.kind, ReplayErrorKind::NotMarkedForDeletion(TOPIC));
}

#[test]
fn deletion_state_for_an_unassigned_replica_is_refused() {
    let mut image = cluster(1);
    apply(&mut image, 6, vec![mark_for_deletion()]);
    let e = refused(&mut image, 7, deletion_state(&[(0, 9)], R::DeletionStarted));
    assert_eq!(
        e.kind,
        ReplayErrorKind::UnknownReplica {
            tp: tp(0),
            broker: b(9)
        }
    );
}

#[test]
fn deletion_state_record_with_one_illegal_replica_is_not_half_applied() {
    let mut image = cluster(1);
    apply(
        &mut image,
        6,
        vec![
            mark_for_deletion(),
            deletion_state(&[(0, 1)], R::DeletionStarted),
        ],
    );
    // Replica (0,1) may move to DeletionSuccessful, replica (0,2) may not:
    // the whole record is refused and (0,1) stays DeletionStarted.
    refused(
        &mut image,
        7,
        deletion_state(&[(0, 1), (0, 2)], R::DeletionSuccessful),
    );
    assert_eq!(image.replica_state(&tp(0), b(1)), R::DeletionStarted);
}

#[test]
fn deletion_state_record_listing_a_replica_twice_moves_it_twice() {
    let mut image = cluster(1);
    apply(&mut image, 6, vec![mark_for_deletion()]);
    // The second listing is checked from DeletionStarted, where the first
    // one left it: DeletionStarted -> DeletionStarted is illegal, and the
    // first move is not kept either.
    refused_replica_move(
        &mut image,
        7,
        deletion_state(&[(0, 1), (0, 1)], R::DeletionStarted),
        R::DeletionStarted,
        R::DeletionStarted,
    );
    assert_eq!(image.replica_state(&tp(0), b(1)), R::Offline);
}

#[test]
fn deletion_state_record_only_moves_replicas_within_the_deletion_machine() {
    let mut image = cluster(1);
    apply(&mut image, 6, vec![mark_for_deletion()]);
    // Offline -> Online is a legal replica move, but not for a replica
    // being deleted.
    refused_replica_move(
        &mut image,
        7,
        deletion_state(&[(0, 1)], R::Online),
        R::Offline,
        R::Online,
    );
    refused(&mut image, 7, deletion_state(&[(0, 1)], R::New));

    // DeletionSuccessful -> NonExistent is legal too, but only RemoveTopic
    // takes a replica out of the deletion machine.
    apply(
        &mut image,
        7,
        vec![
            deletion_state(&[(0, 1)], R::DeletionStarted),
            deletion_state(&[(0, 1)], R::DeletionSuccessful),
        ],
    );
    refused_replica_move(
        &mut image,
        8,
        deletion_state(&[(0, 1)], R::NonExistent),
        R::DeletionSuccessful,
        R::NonExistent,
    );
    assert_eq!(image.replica_state(&tp(0), b(1)), R::DeletionSuccessful);
}

#[test]
fn duplicate_replicas_are_refused_in_short_and_long_lists() {
    let mut image = cluster(0);
    for n in [3u32, 40] {
        let mut replicas: Vec<BrokerId> = (1..=n).map(b).collect();
        replicas.push(b(n / 2));
        let e = refused(
            &mut image,
            6,
            partition_record(0, replicas.clone(), vec![b(1)], Some(b(1))),
        );
        assert!(e.to_string().contains("duplicate replicas"), "{n}: {e}");
    }
}

#[test]
fn partition_walks_its_whole_lifecycle_through_replay() {
    let mut image = cluster(0);
    // NonExistent -> New: created without a leader.
    apply(
        &mut image,
        6,
        vec![partition_record(
            0,
            vec![b(1), b(2), b(3)],
            vec![b(1), b(2), b(3)],
            None,
        )],
    );
    let p = image.partition(&tp(0)).unwrap();
    assert_eq!(
        (p.state, p.leader_epoch.0, p.partition_epoch.0),
        (P::New, 0, 0)
    );

    // New -> Online.
    let mut elect = change(0);
    elect.leader = LeaderChange::To(b(2));
    apply(&mut image, 7, vec![MetadataRecord::PartitionChange(elect)]);
    let p = image.partition(&tp(0)).unwrap();
    assert_eq!(
        (p.state, p.leader, p.leader_epoch.0),
        (P::Online, Some(b(2)), 1)
    );

    // Online -> Online: a re-election bumps the leader epoch.
    let mut move_leader = change(0);
    move_leader.leader = LeaderChange::To(b(3));
    apply(
        &mut image,
        8,
        vec![MetadataRecord::PartitionChange(move_leader)],
    );
    let p = image.partition(&tp(0)).unwrap();
    assert_eq!(
        (p.state, p.leader_epoch.0, p.partition_epoch.0),
        (P::Online, 2, 2)
    );

    // Online -> Offline.
    let mut lose = change(0);
    lose.leader = LeaderChange::NoLeader;
    lose.isr = Some(vec![b(3)]);
    apply(&mut image, 9, vec![MetadataRecord::PartitionChange(lose)]);
    let p = image.partition(&tp(0)).unwrap();
    assert_eq!((p.state, p.leader, p.leader_epoch.0), (P::Offline, None, 3));

    // Offline -> Offline: an ISR change without a leader.
    let mut shrink = change(0);
    shrink.isr = Some(vec![b(1)]);
    apply(
        &mut image,
        10,
        vec![MetadataRecord::PartitionChange(shrink)],
    );
    let p = image.partition(&tp(0)).unwrap();
    assert_eq!(
        (p.state, p.leader_epoch.0, p.partition_epoch.0),
        (P::Offline, 3, 4)
    );

    // Offline -> Online -> Offline, then deletion: Offline -> NonExistent.
    let mut back = change(0);
    back.leader = LeaderChange::To(b(1));
    let mut again = change(0);
    again.leader = LeaderChange::NoLeader;
    apply(
        &mut image,
        11,
        vec![
            MetadataRecord::PartitionChange(back),
            MetadataRecord::PartitionChange(again),
        ],
    );
    assert_eq!(image.partition(&tp(0)).unwrap().state, P::Offline);
    assert_eq!(image.replica_state(&tp(0), b(1)), R::Online);

    apply(&mut image, 12, vec![mark_for_deletion()]);
    assert_eq!(image.replica_state(&tp(0), b(1)), R::Offline);
    apply(
        &mut image,
        13,
        vec![deletion_state(&all_replicas(1), R::DeletionStarted)],
    );
    // A failed delete is retried: Ineligible -> Offline -> Started.
    apply(
        &mut image,
        14,
        vec![
            deletion_state(&[(0, 2)], R::DeletionIneligible),
            deletion_state(&[(0, 2)], R::Offline),
            deletion_state(&[(0, 2)], R::DeletionStarted),
        ],
    );
    apply(
        &mut image,
        15,
        vec![deletion_state(&all_replicas(1), R::DeletionSuccessful)],
    );
    assert_eq!(image.replica_state(&tp(0), b(2)), R::DeletionSuccessful);
    apply(
        &mut image,
        16,
        vec![MetadataRecord::RemoveTopic { topic_id: TOPIC }],
    );
    assert!(image.topic(TOPIC).is_none());
    assert!(image.topic_by_name("orders").is_none());
    assert!(image.partition(&tp(0)).is_none());
    assert_eq!(image.replica_state(&tp(0), b(2)), R::NonExistent);
    assert_eq!(image.offset(), 16);
}

#[test]
fn new_partition_removed_without_ever_having_a_leader() {
    let mut image = cluster(0);
    apply(
        &mut image,
        6,
        vec![
            partition_record(0, vec![b(1)], vec![b(1)], None),
            mark_for_deletion(),
            deletion_state(&[(0, 1)], R::DeletionStarted),
            deletion_state(&[(0, 1)], R::DeletionSuccessful),
            // New -> NonExistent.
            MetadataRecord::RemoveTopic { topic_id: TOPIC },
        ],
    );
    assert!(image.topic(TOPIC).is_none());
}

#[test]
fn derived_replica_states_follow_broker_liveness_and_reassignment() {
    let mut image = cluster(1);
    assert_eq!(image.replica_state(&tp(0), b(1)), R::Online);
    assert_eq!(image.replica_state(&tp(0), b(4)), R::NonExistent);
    assert_eq!(image.replica_state(&tp(7), b(1)), R::NonExistent);

    // A fenced broker's replicas are offline.
    apply(
        &mut image,
        6,
        vec![MetadataRecord::FenceBroker {
            broker: b(3),
            epoch: BrokerEpoch(3),
        }],
    );
    assert_eq!(image.replica_state(&tp(0), b(3)), R::Offline);

    // A failed log dir takes its replicas offline.
    apply(
        &mut image,
        7,
        vec![MetadataRecord::LogDirsOffline {
            broker: b(2),
            epoch: BrokerEpoch(2),
            dirs: vec!["/data".into()],
        }],
    );
    assert_eq!(image.replica_state(&tp(0), b(2)), R::Offline);

    // A replica being added and not yet in sync is New.
    apply(
        &mut image,
        8,
        vec![MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker: b(4),
            incarnation: IncarnationId(4),
            address: "127.0.0.4:9092".into(),
            rack: None,
            log_dirs: vec![],
        })],
    );
    apply(
        &mut image,
        9,
        vec![MetadataRecord::UnfenceBroker {
            broker: b(4),
            epoch: BrokerEpoch(8),
        }],
    );
    let mut add = change(0);
    add.replicas = Some(vec![b(1), b(2), b(3), b(4)]);
    add.adding = Some(vec![b(4)]);
    apply(&mut image, 10, vec![MetadataRecord::PartitionChange(add)]);
    assert_eq!(image.replica_state(&tp(0), b(4)), R::New);
    let mut caught_up = change(0);
    caught_up.isr = Some(vec![b(1), b(4)]);
    apply(
        &mut image,
        11,
        vec![MetadataRecord::PartitionChange(caught_up)],
    );
    assert_eq!(image.replica_state(&tp(0), b(4)), R::Online);
}
