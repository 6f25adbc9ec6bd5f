//! Patched (Keel): check-quorum (`Engine::check_quorum`, `Config::enable_check_quorum`).

use std::sync::Arc;
use std::time::Duration;

use maplit::btreeset;
use pretty_assertions::assert_eq;

use crate::core::ServerState;
use crate::engine::testing::UTConfig;
use crate::engine::Command;
use crate::engine::Engine;
use crate::testing::log_id;
use crate::utime::UTime;
use crate::progress::Progress;
use crate::EffectiveMembership;
use crate::Instant;
use crate::Membership;
use crate::TokioInstant;
use crate::Vote;

const TIMEOUT: Duration = Duration::from_millis(450);

fn m123() -> Membership<u64, ()> {
    Membership::<u64, ()>::new(vec![btreeset! {1,2,3}], None)
}

fn m1() -> Membership<u64, ()> {
    Membership::<u64, ()>::new(vec![btreeset! {1}], None)
}

/// Node 1, leader of term 3 since `since`, in `membership`.
fn leader(membership: Membership<u64, ()>, since: TokioInstant) -> Engine<UTConfig> {
    let mut eng = Engine::default();
    eng.state.enable_validation(false); // Disable validation for incomplete state

    eng.config.id = 1;
    eng.state.vote = UTime::new(since, Vote::new_committed(3, 1));
    eng.state.log_ids.append(log_id(3, 1, 1));
    eng.state
        .membership_state
        .set_effective(Arc::new(EffectiveMembership::new(Some(log_id(3, 1, 1)), membership)));
    eng.testing_new_leader();
    eng.state.server_state = eng.calc_server_state();
    eng
}

#[test]
fn test_check_quorum_a_leader_acknowledged_within_the_timeout_stays() -> anyhow::Result<()> {
    let now = TokioInstant::now();
    let mut eng = leader(m123(), now - Duration::from_secs(10));
    let _ = eng.leader.as_mut().unwrap().clock_progress.increase_to(&2, Some(now - Duration::from_millis(100)));

    assert!(!eng.check_quorum(now, TIMEOUT));
    assert!(eng.leader.is_some());
    assert_eq!(ServerState::Leader, eng.state.server_state);
    assert_eq!(0, eng.output.take_commands().len());
    Ok(())
}

#[test]
fn test_check_quorum_a_leader_without_a_quorum_ack_for_the_timeout_steps_down() -> anyhow::Result<()> {
    let now = TokioInstant::now();
    let mut eng = leader(m123(), now - Duration::from_secs(10));
    // One follower answered 600 ms ago, the other never: a quorum (two of three, the leader
    // counting itself) last acknowledged the leader 600 ms ago.
    let _ = eng.leader.as_mut().unwrap().clock_progress.increase_to(&2, Some(now - Duration::from_millis(600)));

    assert!(eng.check_quorum(now, TIMEOUT));

    assert!(eng.leader.is_none());
    assert!(eng.candidate_ref().is_none());
    assert_eq!(ServerState::Follower, eng.state.server_state);
    assert_eq!(
        &Vote::new_committed(3, 1),
        eng.state.vote_ref(),
        "the vote stays: a vote never goes back"
    );
    assert_eq!(
        vec![
            //
            Command::QuitLeader,
            Command::RebuildReplicationStreams { targets: vec![] },
        ],
        eng.output.take_commands()
    );
    assert!(eng.leader_handler().is_err(), "a follower accepts no writes");

    // Once stepped down, nothing more happens; the tick's membership step-down check does not
    // make it leader again from its vote.
    assert!(!eng.check_quorum(now, TIMEOUT));
    eng.leader_step_down();
    assert!(eng.leader.is_none());
    assert_eq!(ServerState::Follower, eng.state.server_state);
    assert_eq!(0, eng.output.take_commands().len());

    // A higher vote moves it on, as any follower.
    eng.vote_handler().update_vote(&Vote::new_committed(4, 2)).unwrap();
    assert_eq!(ServerState::Follower, eng.state.server_state);
    assert!(eng.leader.is_none());
    Ok(())
}

#[test]
fn test_check_quorum_counts_from_leadership_when_no_quorum_ever_acknowledged() -> anyhow::Result<()> {
    // A node that restarted as leader of its stored vote, or was just elected: no quorum has
    // acknowledged it yet, and it has the whole timeout from its vote's change.
    let now = TokioInstant::now();
    let mut eng = leader(m123(), now - Duration::from_millis(200));
    assert!(!eng.check_quorum(now, TIMEOUT));
    assert!(eng.leader.is_some());

    let mut eng = leader(m123(), now - Duration::from_millis(500));
    assert!(eng.check_quorum(now, TIMEOUT));
    assert!(eng.leader.is_none());
    Ok(())
}

#[test]
fn test_check_quorum_a_single_voter_is_its_own_quorum() -> anyhow::Result<()> {
    let now = TokioInstant::now();
    let mut eng = leader(m1(), now - Duration::from_secs(10));
    assert!(!eng.check_quorum(TokioInstant::now(), TIMEOUT));
    assert!(eng.leader.is_some());
    Ok(())
}

#[test]
fn test_check_quorum_a_follower_has_nothing_to_check() -> anyhow::Result<()> {
    let now = TokioInstant::now();
    let mut eng = leader(m123(), now - Duration::from_secs(10));
    eng.leader = None;
    eng.state.vote = UTime::new(now - Duration::from_secs(10), Vote::new_committed(3, 2));
    eng.state.server_state = eng.calc_server_state();
    assert!(!eng.check_quorum(now, TIMEOUT));
    assert_eq!(ServerState::Follower, eng.state.server_state);
    assert_eq!(0, eng.output.take_commands().len());
    Ok(())
}

#[test]
fn test_check_quorum_is_off_by_default() -> anyhow::Result<()> {
    assert!(!crate::Config::default().enable_check_quorum);
    let c = crate::Config::build(&["foo", "--enable-check-quorum"])?;
    assert!(c.enable_check_quorum);
    Ok(())
}

#[test]
fn test_tokio_instants_map_to_the_same_std_instant() -> anyhow::Result<()> {
    let t = TokioInstant::now() - Duration::from_millis(250);
    let std = t.to_std();
    assert_eq!(t.into_std(), std);
    assert!(std.elapsed() >= Duration::from_millis(250));
    Ok(())
}
