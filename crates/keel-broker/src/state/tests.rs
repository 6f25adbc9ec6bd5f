//! Stories of whole requests against the composed state: epochs, roles,
//! history lines and their undo, fetches and ISR changes.

use super::*;
use crate::history::HistoryEvent;
use crate::view::LeadershipView;
use keel_metadata::{PartitionEpoch, TopicId};

const ME: BrokerId = BrokerId(1);

fn tp() -> TopicPartition {
    TopicPartition::new(TopicId(0xabc), 0)
}

fn registered() -> BrokerState {
    let mut st = BrokerState::new(ME, HistoryLog::in_memory(), || 0);
    st.on_registered(BrokerEpoch(7), Some((1, ControllerEpoch(3))), 1_000);
    st
}

fn stamp(controller_epoch: u64, broker_epoch: u64) -> Option<ControllerStamp> {
    Some(ControllerStamp {
        controller_id: 1,
        controller_epoch: ControllerEpoch(controller_epoch),
        broker_epoch: BrokerEpoch(broker_epoch),
    })
}

fn upd(leader: u32, leader_epoch: u32, partition_epoch: u32, isr: &[u32]) -> PartitionLeadership {
    PartitionLeadership {
        tp: tp(),
        topic: "t".into(),
        leader: Some(BrokerId(leader)),
        leader_epoch: LeaderEpoch(leader_epoch),
        partition_epoch: PartitionEpoch(partition_epoch),
        replicas: vec![BrokerId(1), BrokerId(2), BrokerId(3)],
        isr: isr.iter().copied().map(BrokerId).collect(),
        adding: Vec::new(),
        removing: Vec::new(),
    }
}

/// What the broker holds for `tp`, as its view shows it.
fn held(st: &BrokerState, tp: TopicPartition) -> LeadershipView {
    st.view().partition(tp).cloned().expect("partition held")
}

fn code(r: Result<(), ApiError>) -> ErrorCode {
    r.err().map_or(ErrorCode::None, |e| e.code)
}

#[test]
fn leader_epochs_never_go_back_and_one_epoch_names_one_leader() {
    let mut st = registered();
    let ce = ControllerEpoch(3);
    assert_eq!(
        code(st.apply_leader_and_isr(upd(1, 5, 10, &[1, 2]), ce, 1)),
        ErrorCode::None
    );
    assert!(held(&st, tp()).leading);
    // Re-send: idempotent, no new history line.
    assert_eq!(
        code(st.apply_leader_and_isr(upd(1, 5, 10, &[1, 2]), ce, 2)),
        ErrorCode::None
    );
    assert_eq!(st.history.lines().len(), 1);
    // Older leader epoch: fenced.
    assert_eq!(
        code(st.apply_leader_and_isr(upd(2, 4, 11, &[2]), ce, 3)),
        ErrorCode::FencedLeaderEpoch
    );
    // Same epoch, other leader: refused.
    assert_eq!(
        code(st.apply_leader_and_isr(upd(2, 5, 11, &[2]), ce, 4)),
        ErrorCode::FencedLeaderEpoch
    );
    // Same epoch, older partition epoch: ignored, state kept.
    assert_eq!(
        code(st.apply_leader_and_isr(upd(1, 5, 9, &[1]), ce, 5)),
        ErrorCode::None
    );
    assert_eq!(held(&st, tp()).state.isr, vec![BrokerId(1), BrokerId(2)]);
    // Newer epoch moves leadership away.
    assert_eq!(
        code(st.apply_leader_and_isr(upd(2, 6, 12, &[2]), ce, 6)),
        ErrorCode::None
    );
    assert!(!held(&st, tp()).leading);
    let lines = st.history.lines();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1].leader, Some(2));
    assert_eq!(lines[1].leader_epoch, 6);
    assert_eq!(lines[1].broker_epoch, 7);
    assert_eq!(lines[1].topic_id, TopicId(0xabc).to_string());
}

#[test]
fn session_loss_resigns_and_refuses_requests_until_reregistered() {
    let mut st = registered();
    st.apply_leader_and_isr(upd(1, 5, 10, &[1, 2]), ControllerEpoch(3), 1)
        .unwrap();
    assert!(!st.session_expired(1_000 + 500, 1_000));
    assert!(st.session_expired(1_000 + 1_001, 1_000));
    st.drop_registration("test");
    assert!(!held(&st, tp()).leading);
    assert_eq!(
        st.history.lines().last().map(|l| l.event),
        Some(HistoryEvent::Resigned)
    );
    assert_eq!(
        code(st.check_stamp(stamp(3, 7), Sender::Controller(1))),
        ErrorCode::StaleBrokerEpoch
    );
    // Re-registered, the controller re-sends the same leadership: resume.
    st.on_registered(BrokerEpoch(9), None, 3_000);
    st.check_stamp(stamp(3, 9), Sender::Controller(1)).unwrap();
    st.apply_leader_and_isr(upd(1, 5, 10, &[1, 2]), ControllerEpoch(3), 3_001)
        .unwrap();
    assert!(held(&st, tp()).leading);
}

#[test]
fn leader_shrinks_silent_followers_then_expands_returning_ones() {
    let mut st = registered();
    st.apply_leader_and_isr(upd(1, 5, 10, &[1, 2, 3]), ControllerEpoch(3), 0)
        .unwrap();
    // Within the lag window nobody is judged.
    assert!(st.plan_isr_changes(500, 1_000).is_empty());
    st.record_fetch(BrokerId(2), tp(), LeaderEpoch(5), 900)
        .unwrap();
    let items = st.plan_isr_changes(1_500, 1_000);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].new_isr, vec![BrokerId(1), BrokerId(2)]);
    assert_eq!(items[0].partition_epoch, PartitionEpoch(10));
    // In flight: not asked twice.
    assert!(st.plan_isr_changes(1_600, 1_000).is_empty());
    let committed = PartitionLeadership {
        partition_epoch: PartitionEpoch(11),
        ..upd(1, 5, 11, &[1, 2])
    };
    st.finish_alter(tp(), ErrorCode::None, Some(committed), 1_700, 2_000);
    st.commit_history_best_effort();
    assert_eq!(held(&st, tp()).state.isr, vec![BrokerId(1), BrokerId(2)]);
    assert_eq!(
        st.history.lines().last().map(|l| l.event),
        Some(HistoryEvent::AlterPartition)
    );
    // Broker 3 comes back.
    st.record_fetch(BrokerId(3), tp(), LeaderEpoch(5), 1_800)
        .unwrap();
    st.record_fetch(BrokerId(2), tp(), LeaderEpoch(5), 1_800)
        .unwrap();
    let items = st.plan_isr_changes(1_900, 1_000);
    assert_eq!(
        items[0].new_isr,
        vec![BrokerId(1), BrokerId(2), BrokerId(3)]
    );
    // Refused on epochs: wait for the controller.
    st.finish_alter(tp(), ErrorCode::InvalidPartitionEpoch, None, 2_000, 2_000);
    assert!(st.plan_isr_changes(2_100, 1_000).is_empty());
    st.apply_leader_and_isr(upd(1, 5, 12, &[1, 2]), ControllerEpoch(3), 2_200)
        .unwrap();
    assert_eq!(st.plan_isr_changes(2_300, 1_000).len(), 1);
}

#[test]
fn fetches_are_checked_against_the_held_leadership() {
    let mut st = registered();
    let fetch = |st: &mut BrokerState, le: u32| {
        code(st.record_fetch(BrokerId(2), tp(), LeaderEpoch(le), 1))
    };
    assert_eq!(fetch(&mut st, 5), ErrorCode::NotLeaderOrFollower);
    st.apply_leader_and_isr(upd(1, 5, 10, &[1, 2]), ControllerEpoch(3), 0)
        .unwrap();
    assert_eq!(fetch(&mut st, 4), ErrorCode::FencedLeaderEpoch);
    assert_eq!(fetch(&mut st, 6), ErrorCode::NotLeaderOrFollower);
    assert_eq!(fetch(&mut st, 5), ErrorCode::None);
    assert_eq!(
        code(st.record_fetch(BrokerId(9), tp(), LeaderEpoch(5), 1)),
        ErrorCode::NotLeaderOrFollower
    );
}

#[test]
fn stop_replica_fences_by_leader_epoch_and_delete_forgets() {
    let mut st = registered();
    st.apply_leader_and_isr(upd(2, 5, 10, &[1, 2]), ControllerEpoch(3), 0)
        .unwrap();
    assert_eq!(
        code(st.stop_replica(tp(), false, LeaderEpoch(4))),
        ErrorCode::FencedLeaderEpoch
    );
    st.stop_replica(tp(), false, LeaderEpoch(5)).unwrap();
    assert!(held(&st, tp()).stopped);
    assert!(st.fetch_targets().is_empty());
    // The stopped partition still fences older LeaderAndIsr.
    assert_eq!(
        code(st.apply_leader_and_isr(upd(2, 4, 9, &[2]), ControllerEpoch(3), 3)),
        ErrorCode::FencedLeaderEpoch
    );
    st.stop_replica(tp(), true, LeaderEpoch(0)).unwrap();
    assert!(st.view().leaderships.is_empty());
    assert_eq!(
        code(st.stop_replica(tp(), true, LeaderEpoch(0))),
        ErrorCode::None
    );
}

fn upd_of(partition: u32, leader: u32, leader_epoch: u32) -> PartitionLeadership {
    PartitionLeadership {
        tp: TopicPartition::new(TopicId(0xabc), partition),
        ..upd(leader, leader_epoch, leader_epoch, &[1, 2])
    }
}

#[test]
fn one_request_is_applied_item_by_item_with_its_lines_in_one_write() {
    let mut st = registered();
    let ce = ControllerEpoch(3);
    st.apply_leader_and_isr(upd_of(0, 1, 5), ce, 0).unwrap();
    let results = st.apply_leader_and_isr_all(
        vec![
            Ok(upd_of(0, 2, 4)), // older epoch: refused
            Ok(upd_of(1, 1, 1)),
            Err(ApiError::new(ErrorCode::InvalidRequest, "bad topic id")),
            Ok(upd_of(2, 2, 1)),
            Ok(upd_of(2, 2, 1)), // repeated: no second line
            Ok(upd_of(0, 2, 6)),
        ],
        ce,
        1,
    );
    let codes: Vec<ErrorCode> = results
        .expect("history written")
        .into_iter()
        .map(code)
        .collect();
    assert_eq!(
        codes,
        vec![
            ErrorCode::FencedLeaderEpoch,
            ErrorCode::None,
            ErrorCode::InvalidRequest,
            ErrorCode::None,
            ErrorCode::None,
            ErrorCode::None,
        ]
    );
    let lines = st.history.lines();
    assert_eq!(lines.len(), 4);
    assert_eq!(
        lines
            .iter()
            .map(|l| (l.partition, l.leader, l.leader_epoch))
            .collect::<Vec<_>>(),
        vec![
            (0, Some(1), 5),
            (1, Some(1), 1),
            (2, Some(2), 1),
            (0, Some(2), 6)
        ]
    );
    assert!(held(&st, upd_of(1, 1, 1).tp).leading);
    assert!(!held(&st, upd_of(0, 2, 6).tp).leading);
}

#[test]
#[cfg(target_os = "linux")]
fn a_failed_history_write_undoes_and_refuses_the_whole_request() {
    // Every write to /dev/full fails (ENOSPC).
    let history = HistoryLog::open(std::path::Path::new("/dev/full")).expect("open /dev/full");
    let mut st = BrokerState::new(ME, history, || 0);
    st.on_registered(BrokerEpoch(7), None, 0);
    let ce = ControllerEpoch(3);
    let results = st.apply_leader_and_isr_all(
        vec![
            Ok(upd_of(0, 1, 5)),
            Ok(upd_of(1, 2, 5)),
            Ok(upd_of(0, 2, 6)),
        ],
        ce,
        1,
    );
    // The request as a whole fails (so the controller resends it),
    // and nothing of it stays applied.
    let e = results.expect_err("a failed history write fails the request");
    assert_eq!(e.code, ErrorCode::Internal);
    assert!(st.view().leaderships.is_empty());
}
