//! Patched (Keel): acknowledgements from outside replication
//! (`Raft::lease_acknowledged`, `ReplicationHandler::lease_acked`) and the
//! timeout of appends that carry entries (`Config::append_entries_timeout_ms`).

use std::sync::Arc;
use std::time::Duration;

use maplit::btreeset;
use pretty_assertions::assert_eq;

use crate::engine::testing::UTConfig;
use crate::engine::Engine;
use crate::testing::log_id;
use crate::utime::UTime;
use crate::Config;
use crate::EffectiveMembership;
use crate::Membership;
use crate::TokioInstant;
use crate::Vote;

const TIMEOUT: Duration = Duration::from_millis(450);

/// Node 1, leader of term 3 since `since`, of voters {1, 2, 3}.
fn leader(since: TokioInstant) -> Engine<UTConfig> {
    let mut eng = Engine::default();
    eng.state.enable_validation(false); // Disable validation for incomplete state

    eng.config.id = 1;
    eng.state.vote = UTime::new(since, Vote::new_committed(3, 1));
    eng.state.log_ids.append(log_id(3, 1, 1));
    eng.state.membership_state.set_effective(Arc::new(EffectiveMembership::new(
        Some(log_id(3, 1, 1)),
        Membership::<u64, ()>::new(vec![btreeset! {1,2,3}], None),
    )));
    eng.testing_new_leader();
    eng.state.server_state = eng.calc_server_state();
    eng
}

#[test]
fn test_lease_acked_by_a_voter_moves_the_quorum_clock() -> anyhow::Result<()> {
    let now = TokioInstant::now();
    // No acknowledgement: a leader of 10 s steps down...
    assert!(leader(now - Duration::from_secs(10)).check_quorum(now, TIMEOUT));
    let mut eng = leader(now - Duration::from_secs(10));

    // ...but not once a voter acknowledged a lease request sent 100 ms ago.
    let sent = now - Duration::from_millis(100);
    eng.replication_handler().lease_acked(2, sent);
    assert_eq!(Some(sent), eng.leader.as_mut().unwrap().last_quorum_acked_time());
    assert!(!eng.check_quorum(now, TIMEOUT));
    Ok(())
}

#[test]
fn test_lease_acked_by_a_stranger_is_ignored() -> anyhow::Result<()> {
    let now = TokioInstant::now();
    let mut eng = leader(now - Duration::from_secs(10));
    // Node 9 is not a member: nothing changes, and nothing panics.
    eng.replication_handler().lease_acked(9, now);
    assert_eq!(None, eng.leader.as_mut().unwrap().last_quorum_acked_time());
    assert!(eng.check_quorum(now, TIMEOUT));
    Ok(())
}

#[test]
fn test_an_older_lease_ack_does_not_move_the_clock_back() -> anyhow::Result<()> {
    let now = TokioInstant::now();
    let mut eng = leader(now - Duration::from_secs(10));
    eng.replication_handler().lease_acked(2, now);
    eng.replication_handler().lease_acked(2, now - Duration::from_secs(1));
    assert_eq!(Some(now), eng.leader.as_mut().unwrap().last_quorum_acked_time());
    Ok(())
}

#[test]
fn test_append_entries_timeout_defaults_to_the_heartbeat_interval() -> anyhow::Result<()> {
    let c = Config::default();
    assert_eq!(0, c.append_entries_timeout_ms);
    assert_eq!(Duration::from_millis(c.heartbeat_interval), c.append_entries_timeout());

    let c = Config {
        heartbeat_interval: 150,
        append_entries_timeout_ms: 2_000,
        ..Config::default()
    };
    assert_eq!(Duration::from_millis(2_000), c.append_entries_timeout());
    Ok(())
}
