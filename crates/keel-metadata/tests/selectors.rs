//! The five leader selectors, case by case and exhaustively over small
//! partitions: who leads, what the ISR becomes, who is told, and which
//! typed error comes back when nobody can lead.

use std::collections::BTreeSet;

use keel_metadata::selectors::{
    controlled_shutdown, no_op, offline_partition, preferred_replica, reassigned_partition,
    Election, SelectorError,
};
use keel_metadata::{
    ApiError, BrokerEpoch, BrokerId, ErrorCode, IncarnationId, LeaderEpoch, MetadataImage,
    MetadataRecord, PartitionEpoch, PartitionImage, PartitionState, RegisterBrokerRecord, TopicId,
    TopicPartition,
};

fn b(id: u32) -> BrokerId {
    BrokerId(id)
}

fn ids(v: &[u32]) -> Vec<BrokerId> {
    v.iter().copied().map(BrokerId).collect()
}

/// A partition with the given replicas, ISR and leader, not reassigning.
fn part(replicas: &[u32], isr: &[u32], leader: Option<u32>) -> PartitionImage {
    PartitionImage {
        replicas: ids(replicas),
        isr: ids(isr),
        leader: leader.map(BrokerId),
        leader_epoch: LeaderEpoch(4),
        partition_epoch: PartitionEpoch(9),
        adding: Vec::new(),
        removing: Vec::new(),
        state: if leader.is_some() {
            PartitionState::Online
        } else {
            PartitionState::Offline
        },
    }
}

/// An eligibility predicate: exactly these brokers may lead.
fn live(v: &[u32]) -> impl Fn(BrokerId) -> bool {
    let set: BTreeSet<BrokerId> = ids(v).into_iter().collect();
    move |x| set.contains(&x)
}

fn election(leader: u32, isr: &[u32], recipients: &[u32], unclean: bool) -> Election {
    Election {
        leader: b(leader),
        isr: ids(isr),
        recipients: ids(recipients),
        unclean,
    }
}

// ---- offline partition ----------------------------------------------------

#[test]
fn offline_picks_first_live_isr_member_in_replica_order() {
    let p = part(&[1, 2, 3], &[3, 2], None);
    let e = offline_partition(&p, live(&[2, 3]), false).unwrap();
    // 2 comes before 3 in the replica list, though after it in the ISR.
    assert_eq!(e, election(2, &[3, 2], &[2, 3], false));
}

#[test]
fn offline_shrinks_isr_to_its_live_members() {
    let p = part(&[1, 2, 3], &[1, 2, 3], Some(1));
    let e = offline_partition(&p, live(&[2, 3]), false).unwrap();
    assert_eq!(e, election(2, &[2, 3], &[2, 3], false));
}

#[test]
fn offline_prefers_a_clean_leader_even_with_unclean_enabled() {
    let p = part(&[1, 2, 3], &[3], None);
    let e = offline_partition(&p, live(&[1, 2, 3]), true).unwrap();
    assert_eq!(e, election(3, &[3], &[1, 2, 3], false));
}

#[test]
fn offline_without_live_isr_and_unclean_disabled_is_no_replica_online() {
    let p = part(&[1, 2, 3], &[1], None);
    let err = offline_partition(&p, live(&[2, 3]), false).unwrap_err();
    assert!(matches!(err, SelectorError::NoReplicaOnline(_)));
    assert_eq!(err.code(), ErrorCode::NoReplicaOnline);
}

#[test]
fn offline_without_live_isr_and_unclean_enabled_takes_first_live_replica() {
    let p = part(&[1, 2, 3], &[1], None);
    let e = offline_partition(&p, live(&[3, 2]), true).unwrap();
    assert_eq!(e, election(2, &[2], &[2, 3], true));
}

#[test]
fn offline_with_no_live_replica_at_all_fails_either_way() {
    let p = part(&[1, 2, 3], &[1, 2], None);
    for unclean in [false, true] {
        let err = offline_partition(&p, live(&[4, 5]), unclean).unwrap_err();
        assert!(matches!(err, SelectorError::NoReplicaOnline(_)), "{err:?}");
    }
}

// ---- reassigned partition -------------------------------------------------

/// Moving [1, 2, 3] to [3, 4, 5]: 4 and 5 are being added, 1 and 2 removed.
fn reassigning(isr: &[u32]) -> PartitionImage {
    let mut p = part(&[1, 2, 3, 4, 5], isr, Some(1));
    p.adding = ids(&[4, 5]);
    p.removing = ids(&[1, 2]);
    p
}

#[test]
fn reassigned_picks_live_in_sync_member_of_the_target() {
    let p = reassigning(&[1, 2, 3, 4, 5]);
    let e = reassigned_partition(&p, live(&[1, 2, 3, 4, 5])).unwrap();
    // 1 is in sync and live but leaving; 3 is the first target member.
    assert_eq!(e, election(3, &[1, 2, 3, 4, 5], &[3, 4, 5], false));
}

#[test]
fn reassigned_skips_dead_and_out_of_sync_target_members() {
    let p = reassigning(&[1, 2, 3, 5]);
    // 3 is dead, 4 is live but not in sync: 5 leads.
    let e = reassigned_partition(&p, live(&[1, 2, 4, 5])).unwrap();
    assert_eq!(e, election(5, &[1, 2, 3, 5], &[4, 5], false));
}

#[test]
fn reassigned_without_eligible_target_member_fails() {
    let p = reassigning(&[1, 2, 3]);
    let err = reassigned_partition(&p, live(&[1, 2, 4, 5])).unwrap_err();
    assert_eq!(err, SelectorError::EligibleLeadersNotAvailable);
    assert_eq!(err.code(), ErrorCode::EligibleLeadersNotAvailable);
}

#[test]
fn reassigned_without_reassignment_targets_all_replicas() {
    let p = part(&[1, 2, 3], &[2, 3], Some(2));
    let e = reassigned_partition(&p, live(&[1, 3])).unwrap();
    assert_eq!(e, election(3, &[2, 3], &[1, 3], false));
}

// ---- preferred replica ----------------------------------------------------

#[test]
fn preferred_elects_first_assigned_replica_when_live_and_in_sync() {
    let p = part(&[2, 1, 3], &[1, 2, 3], Some(1));
    let e = preferred_replica(&p, live(&[1, 2])).unwrap();
    assert_eq!(e, election(2, &[1, 2, 3], &[2, 1], false));
}

#[test]
fn preferred_not_in_isr_is_not_available() {
    let p = part(&[2, 1, 3], &[1, 3], Some(1));
    let err = preferred_replica(&p, live(&[1, 2, 3])).unwrap_err();
    assert_eq!(err, SelectorError::PreferredLeaderNotAvailable);
    assert_eq!(err.code(), ErrorCode::PreferredLeaderNotAvailable);
}

#[test]
fn preferred_not_live_is_not_available() {
    let p = part(&[2, 1, 3], &[1, 2, 3], Some(1));
    let err = preferred_replica(&p, live(&[1, 3])).unwrap_err();
    assert_eq!(err, SelectorError::PreferredLeaderNotAvailable);
}

#[test]
fn preferred_never_falls_back_to_another_replica() {
    let p = part(&[2, 1, 3], &[1, 3], Some(1));
    assert!(preferred_replica(&p, live(&[1, 3])).is_err());
}

// ---- controlled shutdown --------------------------------------------------

#[test]
fn shutdown_of_a_follower_keeps_the_leader_and_drops_it_from_isr() {
    let p = part(&[1, 2, 3], &[1, 2, 3], Some(1));
    // The eligibility predicate may or may not already exclude the broker
    // that is shutting down; the selector excludes it either way.
    for eligible in [&[1, 2, 3][..], &[1, 3][..]] {
        let e = controlled_shutdown(&p, b(2), live(eligible)).unwrap();
        assert_eq!(e, election(1, &[1, 3], &[1, 3], false));
    }
}

#[test]
fn shutdown_of_the_leader_moves_leadership_to_next_isr_member() {
    let p = part(&[1, 2, 3], &[1, 3, 2], Some(1));
    let e = controlled_shutdown(&p, b(1), live(&[1, 2, 3])).unwrap();
    // Replica order decides among the remaining ISR members.
    assert_eq!(e, election(2, &[3, 2], &[2, 3], false));
}

#[test]
fn shutdown_keeps_a_still_eligible_non_preferred_leader() {
    let p = part(&[1, 2, 3], &[1, 2, 3], Some(3));
    let e = controlled_shutdown(&p, b(1), live(&[1, 2, 3])).unwrap();
    assert_eq!(e, election(3, &[2, 3], &[2, 3], false));
}

#[test]
fn shutdown_moves_away_from_a_leader_that_is_no_longer_eligible() {
    // Leader 3 was fenced meanwhile; 1 shuts down; 2 is the only choice.
    let p = part(&[1, 2, 3], &[1, 2, 3], Some(3));
    let e = controlled_shutdown(&p, b(1), live(&[1, 2])).unwrap();
    assert_eq!(e, election(2, &[2, 3], &[2], false));
}

#[test]
fn shutdown_of_the_sole_isr_member_is_refused() {
    let p = part(&[1, 2, 3], &[1], Some(1));
    let err = controlled_shutdown(&p, b(1), live(&[1, 2, 3])).unwrap_err();
    assert_eq!(err, SelectorError::EligibleLeadersNotAvailable);
    assert_eq!(err.code(), ErrorCode::EligibleLeadersNotAvailable);
}

#[test]
fn shutdown_when_remaining_isr_members_cannot_lead_is_refused() {
    let p = part(&[1, 2, 3], &[1, 2], Some(1));
    let err = controlled_shutdown(&p, b(1), live(&[1, 3])).unwrap_err();
    assert_eq!(err, SelectorError::EligibleLeadersNotAvailable);
}

// ---- no-op ----------------------------------------------------------------

#[test]
fn no_op_keeps_leader_and_isr_and_tells_live_replicas() {
    let p = part(&[1, 2, 3], &[2, 1], Some(2));
    let e = no_op(&p, live(&[1, 2])).unwrap();
    assert_eq!(e, election(2, &[2, 1], &[1, 2], false));
}

#[test]
fn no_op_without_a_leader_fails() {
    let p = part(&[1, 2, 3], &[2], None);
    let err = no_op(&p, live(&[1, 2, 3])).unwrap_err();
    assert!(matches!(err, SelectorError::NoReplicaOnline(_)));
}

// ---- eligibility from a real image ----------------------------------------

const TOPIC: TopicId = TopicId(7);

/// Brokers: 1 fenced, 2 shutting down, 3 unfenced with its only log dir
/// failed, 4 and 5 healthy.
fn image_with_unhealthy_brokers() -> MetadataImage {
    let mut image = MetadataImage::new();
    let mut epochs = Vec::new();
    for id in 1..=5u32 {
        let e = image
            .replay_next(vec![MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                broker: b(id),
                incarnation: IncarnationId(u128::from(id)),
                address: format!("127.0.0.{id}:9092"),
                rack: None,
                log_dirs: vec!["/d0".into()],
            })])
            .expect("setup replays");
        epochs.push(BrokerEpoch(e));
    }
    let e = |id: u32| epochs[id as usize - 1];
    let mut records: Vec<MetadataRecord> = (2..=5u32)
        .map(|id| MetadataRecord::UnfenceBroker {
            broker: b(id),
            epoch: e(id),
        })
        .collect();
    records.push(MetadataRecord::BrokerShuttingDown {
        broker: b(2),
        epoch: e(2),
    });
    records.push(MetadataRecord::LogDirsOffline {
        broker: b(3),
        epoch: e(3),
        dirs: vec!["/d0".into()],
    });
    image.replay_next(records).expect("setup replays");
    image
}

#[test]
fn fenced_shutting_down_and_offline_dir_brokers_are_never_chosen() {
    let image = image_with_unhealthy_brokers();
    let tp = TopicPartition::new(TOPIC, 0);
    let eligible = |x: BrokerId| image.can_lead(x) && image.replica_online(&tp, x);
    let p = part(&[1, 2, 3, 4, 5], &[1, 2, 3, 5], None);

    let e = offline_partition(&p, eligible, false).unwrap();
    assert_eq!(e, election(5, &[5], &[4, 5], false));
    let e = offline_partition(&p, eligible, true).unwrap();
    assert_eq!(e.leader, b(5));

    let unclean = part(&[1, 2, 3, 4, 5], &[1, 2, 3], None);
    let e = offline_partition(&unclean, eligible, true).unwrap();
    assert_eq!(e, election(4, &[4], &[4, 5], true));
    assert!(offline_partition(&unclean, eligible, false).is_err());

    let pref = part(&[1, 4, 5], &[1, 4, 5], Some(4));
    assert!(preferred_replica(&pref, eligible).is_err());
    let pref = part(&[2, 4, 5], &[2, 4, 5], Some(4));
    assert!(preferred_replica(&pref, eligible).is_err());
    let pref = part(&[3, 4, 5], &[3, 4, 5], Some(4));
    assert!(preferred_replica(&pref, eligible).is_err());

    let shut = part(&[2, 1, 3, 4], &[2, 1, 3, 4], Some(2));
    let e = controlled_shutdown(&shut, b(2), eligible).unwrap();
    assert_eq!(e, election(4, &[1, 3, 4], &[4], false));

    let mut moving = part(&[1, 2, 3, 4, 5], &[1, 2, 3, 5], Some(5));
    moving.removing = ids(&[5]);
    assert_eq!(
        reassigned_partition(&moving, eligible).unwrap_err(),
        SelectorError::EligibleLeadersNotAvailable
    );
}

#[test]
fn selector_errors_convert_to_api_errors_with_their_code() {
    let cases = [
        (
            SelectorError::NoReplicaOnline("disabled"),
            ErrorCode::NoReplicaOnline,
        ),
        (
            SelectorError::EligibleLeadersNotAvailable,
            ErrorCode::EligibleLeadersNotAvailable,
        ),
        (
            SelectorError::PreferredLeaderNotAvailable,
            ErrorCode::PreferredLeaderNotAvailable,
        ),
    ];
    for (e, code) in cases {
        let api: ApiError = e.into();
        assert_eq!(api.code, code);
        assert_eq!(api.message, e.to_string());
    }
}

// ---- exhaustive over small partitions --------------------------------------

/// Every ordered arrangement of 1..=3 distinct brokers out of {1, 2, 3}.
fn replica_lists() -> Vec<Vec<BrokerId>> {
    let mut out = Vec::new();
    for a in 1..=3 {
        out.push(ids(&[a]));
        for c in 1..=3 {
            if c == a {
                continue;
            }
            out.push(ids(&[a, c]));
            for d in 1..=3 {
                if d != a && d != c {
                    out.push(ids(&[a, c, d]));
                }
            }
        }
    }
    out
}

/// Every non-empty subset of `v`, in reversed order so the ISR order
/// differs from the replica order.
fn non_empty_subsets(v: &[BrokerId]) -> Vec<Vec<BrokerId>> {
    (1u32..(1 << v.len()))
        .map(|mask| {
            let mut s: Vec<BrokerId> = (0..v.len())
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| v[i])
                .collect();
            s.reverse();
            s
        })
        .collect()
}

/// All small partitions and all live sets, with the invariants each
/// selector's result must satisfy.
#[test]
fn selector_results_respect_invariants_exhaustively() {
    let mut checked = 0;
    for replicas in replica_lists() {
        for isr in non_empty_subsets(&replicas) {
            let leaders: Vec<Option<BrokerId>> = std::iter::once(None)
                .chain(isr.iter().copied().map(Some))
                .collect();
            for leader in leaders {
                for live_mask in 0u32..16 {
                    let live_set: BTreeSet<BrokerId> = (1..=4)
                        .filter(|i| live_mask & (1 << (i - 1)) != 0)
                        .map(b)
                        .collect();
                    let eligible = |x: BrokerId| live_set.contains(&x);
                    let p = PartitionImage {
                        replicas: replicas.clone(),
                        isr: isr.clone(),
                        leader,
                        leader_epoch: LeaderEpoch(0),
                        partition_epoch: PartitionEpoch(0),
                        adding: Vec::new(),
                        removing: Vec::new(),
                        state: PartitionState::Online,
                    };
                    let live_replicas: Vec<BrokerId> =
                        replicas.iter().copied().filter(|x| eligible(*x)).collect();
                    let live_isr: Vec<BrokerId> =
                        isr.iter().copied().filter(|x| eligible(*x)).collect();
                    let check = |e: &Election, what: &str| {
                        assert!(
                            eligible(e.leader),
                            "{what}: ineligible leader {e:?} for {p:?}"
                        );
                        assert!(e.isr.contains(&e.leader), "{what}: leader outside ISR");
                        assert!(e.isr.iter().all(|x| replicas.contains(x)), "{what}: ISR");
                        assert!(
                            e.recipients.iter().all(|x| eligible(*x)),
                            "{what}: recipients"
                        );
                        assert!(e.recipients.contains(&e.leader), "{what}: leader not told");
                        assert_eq!(e.unclean, !isr.contains(&e.leader), "{what}: unclean flag");
                    };

                    for unclean in [false, true] {
                        match offline_partition(&p, eligible, unclean) {
                            Ok(e) => {
                                check(&e, "offline");
                                assert_eq!(e.recipients, live_replicas);
                                if e.unclean {
                                    assert!(live_isr.is_empty() && unclean);
                                    assert_eq!(e.isr, vec![e.leader]);
                                } else {
                                    assert_eq!(e.isr, live_isr);
                                }
                            }
                            Err(err) => {
                                assert!(matches!(err, SelectorError::NoReplicaOnline(_)));
                                assert!(live_isr.is_empty());
                                assert!(!unclean || live_replicas.is_empty());
                            }
                        }
                    }

                    match preferred_replica(&p, eligible) {
                        Ok(e) => {
                            check(&e, "preferred");
                            assert_eq!(e.leader, replicas[0]);
                            assert_eq!(e.isr, isr);
                        }
                        Err(_) => {
                            assert!(!eligible(replicas[0]) || !isr.contains(&replicas[0]));
                        }
                    }

                    match reassigned_partition(&p, eligible) {
                        Ok(e) => {
                            check(&e, "reassigned");
                            assert_eq!(e.isr, isr);
                        }
                        Err(_) => assert!(live_isr.is_empty()),
                    }

                    for down in 1..=3 {
                        match controlled_shutdown(&p, b(down), eligible) {
                            Ok(e) => {
                                check(&e, "shutdown");
                                assert_ne!(e.leader, b(down));
                                assert!(!e.isr.contains(&b(down)));
                                assert!(!e.recipients.contains(&b(down)));
                                if let Some(l) = leader {
                                    if l != b(down) && eligible(l) {
                                        assert_eq!(e.leader, l, "an eligible leader stays");
                                    }
                                }
                            }
                            Err(_) => assert!(live_isr.iter().all(|x| *x == b(down))),
                        }
                    }

                    match no_op(&p, eligible) {
                        Ok(e) => {
                            assert_eq!(Some(e.leader), leader);
                            assert_eq!(e.isr, isr);
                            assert_eq!(e.recipients, live_replicas);
                        }
                        Err(_) => assert_eq!(leader, None),
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 1_000, "covered {checked} cases");
}
