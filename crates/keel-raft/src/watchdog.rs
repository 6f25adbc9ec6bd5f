//! The election watchdog: the only thing that starts elections in Keel.
//!
//! openraft's own election timer is off (`Config::enable_elect = false`, in
//! [`crate::default_config`]): openraft 0.9 has no pre-vote, and its timer
//! would stand a node for election, bumping its term, the moment its own
//! timeout ran out, deposing a leader that a majority still follows (a node
//! back from a partition or a pause did exactly that). The watchdog stands
//! only after a pre-vote round ([`crate::prevote`]) that a majority of the
//! voters granted, then asks openraft for the election
//! (`raft.trigger().elect()`).
//!
//! When it asks:
//!
//! - a follower of a committed leader: once its own lease for that leader
//!   (`election_timeout_max` since it last accepted an AppendEntries or
//!   acknowledged a lease request of that leader, [`crate::lease`]) has
//!   run out, plus a margin and a stagger that grows with the node's rank
//!   among the voters, so that two followers of a dead leader do not split
//!   the vote: about half a second after the leader went silent;
//! - any other voter (a candidate whose election split the vote or went
//!   unanswered, a node that restarted without a leader, a leader that
//!   stepped down for want of a quorum, the voters of a fresh quorum whose
//!   first election failed): a random timeout in
//!   `[election_timeout_min, election_timeout_max]` after its vote last
//!   changed;
//! - after a lost pre-vote round: again after a new random timeout, or
//!   right after the lease a refusing voter still holds for its leader ends
//!   if that comes first.
//!
//! The first election of a fresh quorum needs no watchdog: openraft's
//! `initialize` makes the initializing node a candidate of term 1 at once
//! (there is no leader yet to depose, and `formed_quorum_peer` in the
//! controller keeps a late voter from initializing into a formed quorum).
//! Leaders and non-voters never stand.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use openraft::{LogId, ServerState, Vote};
use rand::Rng;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::grant::LeaseClock;
use crate::network::Network;
use crate::prevote::{pre_vote_won, PreVoteRefusal, PreVoteRequest};
use crate::{KeelNode, KeelRaft, NodeId};

/// How often the watchdog looks at the Raft state.
const POLL: Duration = Duration::from_millis(10);
/// Margin after the lease before the first-ranked follower asks.
const MARGIN: Duration = Duration::from_millis(20);
/// Extra wait per rank, so followers do not stand together.
const STAGGER: Duration = Duration::from_millis(50);

/// The wait after the last contact before node `me` asks: the lease, the
/// margin and its rank's stagger (rank among the voters other than the
/// silent leader).
fn election_delay(
    me: NodeId,
    leader: Option<NodeId>,
    voters: &[NodeId],
    lease: Duration,
) -> Duration {
    let rank = voters
        .iter()
        .filter(|v| Some(**v) != leader)
        .position(|v| *v == me)
        .unwrap_or(voters.len());
    lease + MARGIN + STAGGER * u32::try_from(rank).unwrap_or(u32::MAX)
}

/// When to ask again after a lost pre-vote round: after `random`, or just
/// after the earliest lease that a voter refusing for a live leader still
/// holds, if that ends first (the leader may simply be dead).
fn retry_after(refusals: &[PreVoteRefusal], random: Duration) -> Duration {
    refusals
        .iter()
        .filter_map(|r| match r {
            PreVoteRefusal::LiveLeader { left_ms, .. } => {
                Some(Duration::from_millis(*left_ms) + MARGIN)
            }
            _ => None,
        })
        .min()
        .map_or(random, |lease_end| lease_end.min(random))
}

/// What the watchdog reads of the Raft state.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    /// openraft's server state.
    state: ServerState,
    /// The stored vote.
    vote: Vote<NodeId>,
    /// When the vote last changed, or this node last accepted an
    /// AppendEntries from its leader.
    last_change: Option<Instant>,
    /// The last entry of the log.
    last_log_id: Option<LogId<NodeId>>,
    /// Voters of each configuration of the membership.
    joint: Vec<BTreeSet<NodeId>>,
    /// Every member, as the membership records it.
    members: BTreeMap<NodeId, KeelNode>,
}

impl Seen {
    /// The committed leader other than `me` that this node follows.
    fn follows_other(&self, me: NodeId) -> Option<NodeId> {
        let leader = self.vote.leader_id().voted_for()?;
        (self.state == ServerState::Follower && self.vote.is_committed() && leader != me)
            .then_some(leader)
    }

    fn voters(&self) -> BTreeSet<NodeId> {
        self.joint.iter().flatten().copied().collect()
    }
}

/// Reads [`Seen`] through the Raft core (`None`: Raft stopped). The last
/// contact is the later of openraft's and the last lease request this node
/// acknowledged for the same leadership (`clock`, [`crate::lease`]).
async fn observe(raft: &KeelRaft, clock: &LeaseClock) -> Option<Seen> {
    // openraft keeps its log state reader private; the metrics trail the
    // core by at most one loop of it.
    let last_log_id = raft.data_metrics().borrow().last_log;
    let clock = clock.clone();
    raft.with_raft_state(move |s| {
        let membership = s.membership_state.effective().membership();
        Seen {
            state: s.server_state,
            vote: *s.vote_ref(),
            last_change: clock.last_contact(s.vote_ref(), s.vote_last_modified()),
            last_log_id,
            joint: membership.get_joint_config().clone(),
            members: membership.nodes().map(|(id, n)| (*id, n.clone())).collect(),
        }
    })
    .await
    .ok()
}

/// What one pre-vote round came to.
struct Round {
    /// A majority of every configuration granted (this node included).
    won: bool,
    /// The voters that granted, this node included.
    granted: BTreeSet<NodeId>,
    /// The refusals, with who gave them.
    refusals: Vec<(NodeId, PreVoteRefusal)>,
    /// Voters that gave no answer, and why.
    silent: Vec<(NodeId, String)>,
}

/// Asks every other voter for a pre-vote, each within `timeout`; ends as
/// soon as the round is won or every voter has answered.
async fn pre_vote_round(network: &Network, me: NodeId, seen: &Seen, timeout: Duration) -> Round {
    let req = PreVoteRequest {
        candidate: me,
        term: seen.vote.leader_id().get_term() + 1,
        last_log_id: seen.last_log_id,
    };
    let mut round = Round {
        won: false,
        granted: BTreeSet::from([me]),
        refusals: Vec::new(),
        silent: Vec::new(),
    };
    let mut asks: FuturesUnordered<_> = seen
        .voters()
        .into_iter()
        .filter(|v| *v != me)
        .map(|v| {
            let node = seen.members.get(&v).cloned().unwrap_or_default();
            let req = &req;
            async move { (v, network.pre_vote(v, &node, req, timeout).await) }
        })
        .collect();
    round.won = pre_vote_won(&seen.joint, &round.granted);
    while !round.won {
        let Some((voter, answer)) = asks.next().await else {
            break;
        };
        match answer {
            Ok(r) => match r.refusal {
                None => {
                    round.granted.insert(voter);
                }
                Some(why) => round.refusals.push((voter, why)),
            },
            Err(e) => round.silent.push((voter, e)),
        }
        round.won = pre_vote_won(&seen.joint, &round.granted);
    }
    round
}

/// A random election timeout in `[min, max]`.
fn random_timeout(min: Duration, max: Duration) -> Duration {
    if max <= min {
        return min;
    }
    rand::rng().random_range(min..=max)
}

/// Logs that this node stands for election after a won pre-vote `round`,
/// the vote having last changed at `last_change` (`leader`: the silent
/// leader it followed, if any).
fn log_standing(
    me: NodeId,
    seen: &Seen,
    leader: Option<NodeId>,
    last_change: Instant,
    round: &Round,
) {
    tracing::info!(
        node = me,
        term = seen.vote.leader_id().get_term() + 1,
        silent_leader = ?leader.or(seen.vote.leader_id().voted_for()),
        quiet_ms = last_change.elapsed().as_millis() as u64,
        granted = ?round.granted,
        "pre-vote won; standing for election"
    );
}

/// What the watchdog remembers from one poll to the next.
#[derive(Default)]
struct Memory {
    /// The random timeout drawn for the vote change it was drawn for.
    drawn: Option<(Option<Instant>, Duration)>,
    /// Not before this: set after a lost round.
    next_try: Option<Instant>,
    /// The last vote change a lost round was logged for (one line per episode).
    logged_loss_for: Option<Option<Instant>>,
}

impl Memory {
    /// How long after the last vote change this node waits before it
    /// stands: its turn after the silent `leader` it follows, else a
    /// random timeout in `[min, max]` drawn once per vote change.
    fn wait(
        &mut self,
        me: NodeId,
        seen: &Seen,
        leader: Option<NodeId>,
        lease: Duration,
        (min, max): (Duration, Duration),
    ) -> Duration {
        match leader {
            Some(l) => {
                let voters: Vec<NodeId> = seen.voters().into_iter().collect();
                election_delay(me, Some(l), &voters, lease)
            }
            None => match self.drawn {
                Some((at, d)) if at == seen.last_change => d,
                _ => {
                    let d = random_timeout(min, max);
                    self.drawn = Some((seen.last_change, d));
                    d
                }
            },
        }
    }

    /// After a lost pre-vote round: no new try before the refusals allow
    /// (else `retry`), and one log line per vote change.
    fn lost(&mut self, me: NodeId, seen: &Seen, round: &Round, retry: Duration) {
        let refusals: Vec<PreVoteRefusal> = round.refusals.iter().map(|(_, r)| r.clone()).collect();
        self.next_try = Some(Instant::now() + retry_after(&refusals, retry));
        if self.logged_loss_for != Some(seen.last_change) {
            self.logged_loss_for = Some(seen.last_change);
            tracing::info!(
                node = me,
                term = seen.vote.leader_id().get_term() + 1,
                granted = ?round.granted,
                refused = ?round.refusals,
                silent = ?round.silent,
                "pre-vote lost; not standing for election"
            );
        }
    }
}

/// Runs until `stop` turns true or Raft stops: stands this node for
/// election when the rules of the module doc say so, after a won pre-vote.
/// `network` is a clone of the one Raft sends through (it shares its
/// connections).
pub async fn election_watchdog(
    raft: KeelRaft,
    network: Network,
    me: NodeId,
    mut stop: watch::Receiver<bool>,
) {
    let clock = network.lease_clock();
    // While this node leads, it sends the lease requests, from a thread of
    // its own (crate::lease::spawn_lease_heartbeats).
    crate::lease::spawn_lease_heartbeats(raft.clone(), network.clone(), me, stop.clone());
    let config = raft.config().clone();
    let lease = Duration::from_millis(config.election_timeout_max);
    let min = Duration::from_millis(config.election_timeout_min);
    let max = Duration::from_millis(config.election_timeout_max);
    // An answer later than this counts as no answer.
    let ask_timeout = min / 2;
    let mut memory = Memory::default();
    loop {
        tokio::select! {
            _ = stop.wait_for(|v| *v) => return,
            _ = tokio::time::sleep(POLL) => {}
        }
        // Leaders and learners never stand; read without asking the core.
        let state = raft.metrics().borrow().state;
        if matches!(
            state,
            ServerState::Leader | ServerState::Learner | ServerState::Shutdown
        ) {
            memory.next_try = None;
            continue;
        }
        let Some(seen) = observe(&raft, &clock).await else {
            return;
        };
        if !seen.voters().contains(&me) {
            continue;
        }
        let Some(last_change) = seen.last_change else {
            continue;
        };
        let leader = seen.follows_other(me);
        let wait = memory.wait(me, &seen, leader, lease, (min, max));
        let now = Instant::now();
        let due = (last_change + wait).max(memory.next_try.unwrap_or(now));
        if now < due {
            continue;
        }
        // Confirm with a second read that the core answers promptly: a core
        // that was busy (a long flush) may have AppendEntries from a live
        // leader queued, and the first read showed a contact time from
        // before them.
        let asked = Instant::now();
        let Some(again) = observe(&raft, &clock).await else {
            return;
        };
        if asked.elapsed() > POLL || again != seen {
            continue;
        }

        let round = pre_vote_round(&network, me, &seen, ask_timeout).await;
        let retry = random_timeout(min, max);
        if !round.won {
            memory.lost(me, &seen, &round, retry);
            continue;
        }
        // Nothing changed while the round ran (a leader's AppendEntries
        // would have moved the contact time).
        let Some(after) = observe(&raft, &clock).await else {
            return;
        };
        if after != seen {
            continue;
        }
        memory.next_try = Some(Instant::now() + retry);
        log_standing(me, &seen, leader, last_change, &round);
        if raft.trigger().elect().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn followers_stand_one_after_another_and_never_inside_the_lease() {
        let lease = Duration::from_millis(450);
        let voters = [1, 2, 3];
        let d2 = election_delay(2, Some(1), &voters, lease);
        let d3 = election_delay(3, Some(1), &voters, lease);
        assert_eq!(d2, lease + MARGIN);
        assert_eq!(d3, lease + MARGIN + STAGGER);
        // The silent leader's own rank is skipped, whoever it is.
        assert_eq!(election_delay(1, Some(3), &voters, lease), lease + MARGIN);
        assert_eq!(
            election_delay(2, Some(3), &voters, lease),
            lease + MARGIN + STAGGER
        );
        for me in voters {
            for leader in voters {
                assert!(election_delay(me, Some(leader), &voters, lease) > lease);
            }
        }
    }

    #[test]
    fn a_lost_round_is_retried_after_the_earliest_refusing_lease_or_the_random_timeout() {
        let random = Duration::from_millis(400);
        assert_eq!(retry_after(&[], random), random);
        let live = |left_ms| PreVoteRefusal::LiveLeader {
            leader: 1,
            heard_ms: 450 - left_ms,
            left_ms,
        };
        assert_eq!(
            retry_after(&[live(100), live(30)], random),
            Duration::from_millis(30) + MARGIN
        );
        assert_eq!(retry_after(&[live(440)], random), random);
        assert_eq!(
            retry_after(&[PreVoteRefusal::Leading { acked_ms: 5 }], random),
            random
        );
    }

    #[test]
    fn random_timeouts_stay_inside_the_range() {
        let (min, max) = (Duration::from_millis(300), Duration::from_millis(450));
        for _ in 0..1_000 {
            let d = random_timeout(min, max);
            assert!(d >= min && d <= max);
        }
        assert_eq!(random_timeout(max, max), max);
    }
}
