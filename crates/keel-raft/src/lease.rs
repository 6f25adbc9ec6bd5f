//! Lease heartbeats: the leader's "do you still follow me?", beside
//! replication.
//!
//! openraft sends heartbeats on the replication stream, one request at a
//! time per follower, so while a large append is in flight (a decision of
//! 100,000 records is many entries, each stored and flushed by the
//! follower) no heartbeat reaches that follower and no acknowledgement
//! comes back. The leader's quorum clock then stalls, check-quorum deposes
//! a healthy leader, and the followers' leases run out and they stand for
//! election: big decisions starved the lease.
//!
//! So the leader also sends each voter a [`LeaseRequest`] every heartbeat
//! interval, on a connection of its own ([`crate::network::Network::lease`]).
//! A follower answers it at once from its published Raft state, without
//! waiting for its Raft core: it acknowledges ([`decide_lease`]) only if it
//! follows exactly the leadership the request names (same committed vote).
//! An acknowledgement
//!
//! - on the leader counts toward its quorum clock as an answered heartbeat
//!   sent at the same moment would (`Raft::lease_acknowledged`, a Keel
//!   patch of openraft): check-quorum, `last_quorum_acked`, the active
//!   controller's lease;
//! - on the follower renews the lease it grants that leader
//!   ([`LeaseClock`]): it refuses pre-votes and does not stand for
//!   election while the leader keeps answering.
//!
//! A cut-off or paused leader sends nothing that arrives, so both clocks
//! stop exactly as before; a follower that voted for another leader stops
//! acknowledging the old one at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::{ServerState, Vote};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::network::Network;
use crate::{KeelRaft, NodeId};

/// Sent by a leader to a voter.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct LeaseRequest {
    /// The leader's committed vote (its term and its id).
    pub vote: Vote<NodeId>,
}

/// The voter's answer.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct LeaseResponse {
    /// It follows the leadership of the request's vote.
    pub acked: bool,
}

/// Whether node `me`, in `state` with vote `mine`, acknowledges a lease
/// request for `theirs`: only a follower (or learner) whose vote is that
/// very committed leadership, of another node.
pub fn decide_lease(
    me: NodeId,
    state: ServerState,
    mine: &Vote<NodeId>,
    theirs: &Vote<NodeId>,
) -> bool {
    theirs.is_committed()
        && mine == theirs
        && theirs.leader_id().voted_for().is_some_and(|l| l != me)
        && matches!(state, ServerState::Follower | ServerState::Learner)
}

/// When a follower last acknowledged a lease request, and for which
/// leadership; shared by the service that answers and the watchdog that
/// decides when to stand.
#[derive(Clone, Default, Debug)]
pub struct LeaseClock(Arc<Mutex<Option<Contact>>>);

/// A leadership and the moment its lease request was acknowledged.
type Contact = (Vote<NodeId>, Instant);

impl LeaseClock {
    /// Notes an acknowledgement of `vote` at `at`.
    pub fn record(&self, vote: Vote<NodeId>, at: Instant) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match &*g {
            Some((v, t)) if *v == vote && *t >= at => {}
            _ => *g = Some((vote, at)),
        }
    }

    /// The last acknowledgement of exactly `vote`, if any.
    pub fn heard(&self, vote: &Vote<NodeId>) -> Option<Instant> {
        let g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        g.as_ref().filter(|(v, _)| v == vote).map(|(_, t)| *t)
    }

    /// The later of `contact` (openraft's last contact with the leader of
    /// `vote`) and the last acknowledged lease request of that leadership.
    pub fn last_contact(&self, vote: &Vote<NodeId>, contact: Option<Instant>) -> Option<Instant> {
        match (contact, self.heard(vote)) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Runs [`lease_heartbeats`] on a thread of its own with a runtime of its
/// own (and its own connections): the controller's runtime may have every
/// worker busy for a while (encoding a 100,000-partition answer, decoding
/// a large request), and the lease must not wait for them. Falls back to a
/// task on the current runtime if the thread cannot be started.
pub fn spawn_lease_heartbeats(
    raft: KeelRaft,
    network: Network,
    me: NodeId,
    stop: watch::Receiver<bool>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let (raft2, network2, stop2) = (raft.clone(), network.clone(), stop.clone());
    let started = rt.map_err(|e| e.to_string()).and_then(|rt| {
        std::thread::Builder::new()
            .name(format!("keel-lease-{me}"))
            .spawn(move || rt.block_on(lease_heartbeats(raft2, network2, me, stop2)))
            .map_err(|e| e.to_string())
    });
    if let Err(e) = started {
        tracing::warn!(node = me, error = %e, "no thread for lease heartbeats; sending them from a task");
        tokio::spawn(lease_heartbeats(raft, network, me, stop));
    }
}

/// Runs until `stop` turns true: while this node leads, sends every other
/// voter a lease request each heartbeat interval (one in flight per voter,
/// each answer awaited at most `election_timeout_min`) and hands every
/// acknowledgement to Raft.
pub async fn lease_heartbeats(
    raft: KeelRaft,
    network: Network,
    me: NodeId,
    mut stop: watch::Receiver<bool>,
) {
    let config = raft.config().clone();
    let interval = Duration::from_millis(config.heartbeat_interval.max(1));
    let timeout = Duration::from_millis(config.election_timeout_min.max(1));
    let mut in_flight: HashMap<NodeId, JoinHandle<()>> = HashMap::new();
    loop {
        tokio::select! {
            _ = stop.wait_for(|v| *v) => break,
            _ = tokio::time::sleep(interval) => {}
        }
        // Read under the borrow; the voters only while leading.
        let (vote, members) = {
            let m = raft.metrics();
            let m = m.borrow();
            let leads = m.state == ServerState::Leader
                && m.vote.is_committed()
                && m.vote.leader_id().voted_for() == Some(me);
            if !leads {
                continue;
            }
            let membership = m.membership_config.membership();
            let members: Vec<(NodeId, crate::KeelNode)> = membership
                .voter_ids()
                .filter(|id| *id != me)
                .filter_map(|id| membership.get_node(&id).map(|n| (id, n.clone())))
                .collect();
            (m.vote, members)
        };
        in_flight.retain(|_, h| !h.is_finished());
        for (target, node) in members {
            if in_flight.contains_key(&target) {
                continue;
            }
            let (raft, network) = (raft.clone(), network.clone());
            let req = LeaseRequest { vote };
            in_flight.insert(
                target,
                tokio::spawn(async move {
                    let sent = Instant::now();
                    if let Ok(r) = network.lease(target, &node, &req, timeout).await {
                        if r.acked {
                            let _ = raft.lease_acknowledged(target, vote, sent).await;
                        }
                    }
                }),
            );
        }
    }
    for (_, h) in in_flight {
        h.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(term: u64, leader: NodeId) -> Vote<NodeId> {
        Vote::new_committed(term, leader)
    }

    #[test]
    fn a_follower_acknowledges_only_the_leadership_it_follows() {
        let v = committed(5, 1);
        assert!(decide_lease(2, ServerState::Follower, &v, &v));
        assert!(decide_lease(2, ServerState::Learner, &v, &v));
        // Another term, another leader, or an uncommitted vote: no.
        assert!(!decide_lease(
            2,
            ServerState::Follower,
            &committed(6, 1),
            &v
        ));
        assert!(!decide_lease(
            2,
            ServerState::Follower,
            &committed(5, 3),
            &v
        ));
        let candidate = Vote::new(5, 1);
        assert!(!decide_lease(
            2,
            ServerState::Follower,
            &candidate,
            &candidate
        ));
        // A candidate, a leader, or the leader itself: no.
        assert!(!decide_lease(2, ServerState::Candidate, &v, &v));
        assert!(!decide_lease(2, ServerState::Leader, &v, &v));
        assert!(!decide_lease(1, ServerState::Follower, &v, &v));
    }

    #[test]
    fn the_clock_keeps_the_latest_acknowledgement_of_one_leadership() {
        let clock = LeaseClock::default();
        let v = committed(3, 1);
        let t0 = Instant::now();
        assert_eq!(clock.heard(&v), None);
        clock.record(v, t0 + Duration::from_millis(10));
        clock.record(v, t0);
        assert_eq!(clock.heard(&v), Some(t0 + Duration::from_millis(10)));
        // Another leadership's contact is not this one's.
        assert_eq!(clock.heard(&committed(4, 2)), None);
        clock.record(committed(4, 2), t0);
        assert_eq!(clock.heard(&v), None);
        // The later of openraft's contact and the clock.
        let w = committed(4, 2);
        assert_eq!(clock.last_contact(&w, None), Some(t0));
        let later = t0 + Duration::from_millis(5);
        assert_eq!(clock.last_contact(&w, Some(later)), Some(later));
        assert_eq!(clock.last_contact(&v, Some(t0)), Some(t0));
    }
}
