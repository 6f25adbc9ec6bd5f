//! The lease a follower grants its leader: the messages of a lease
//! heartbeat ([`LeaseRequest`], [`LeaseResponse`]), the rule by which a
//! follower acknowledges one ([`decide_lease`]) and the clock of its last
//! acknowledgement ([`LeaseClock`]). The network answers and sends them;
//! [`crate::lease`] paces the leader's heartbeats.

use std::sync::{Arc, Mutex};

use openraft::{ServerState, Vote};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::NodeId;

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
