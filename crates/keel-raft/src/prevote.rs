//! Pre-vote (Raft dissertation §9.6; Kafka's KIP-996): before a node
//! stands for election it asks the voters whether they *would* vote for
//! it, and it elects only when a majority says yes. Nothing is stored and
//! no term moves during a pre-vote, so a node that returns from a partition
//! or a pause, and asks, deposes nobody that a majority still follows.
//!
//! This module is the pure part: what a voter answers ([`decide_pre_vote`],
//! from a [`VoterView`] of its own state at the moment of the request) and
//! when a candidate has won ([`pre_vote_won`]). The service answers
//! `RaftService.PreVote` with the first; the election watchdog
//! (`watchdog.rs`) runs the round and uses the second.

use std::collections::BTreeSet;
use std::time::Duration;

use openraft::LogId;
use serde::{Deserialize, Serialize};

use crate::NodeId;

/// "Would you vote for me?", sent by a node that means to stand.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct PreVoteRequest {
    /// The node asking.
    pub candidate: NodeId,
    /// The term it would stand in: its current term plus one. Reported in
    /// logs; the grant does not depend on it (see [`decide_pre_vote`]).
    pub term: u64,
    /// The last entry of its log.
    pub last_log_id: Option<LogId<NodeId>>,
}

/// A voter's answer.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct PreVoteResponse {
    /// The voter's current term.
    pub term: u64,
    /// `None`: granted; otherwise why not.
    pub refusal: Option<PreVoteRefusal>,
}

impl PreVoteResponse {
    /// The voter would vote for the candidate.
    pub fn granted(&self) -> bool {
        self.refusal.is_none()
    }
}

/// Why a voter would not vote for the candidate now.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PreVoteRefusal {
    /// The voter restarted less than `election_timeout_max` ago: it may
    /// have granted a leader a lease before it went down, and it does not
    /// remember when.
    #[error("restarted {left_ms} ms too recently to vote")]
    JustRestarted {
        /// How long until it votes again.
        left_ms: u64,
    },
    /// The voter leads, and a quorum acknowledged it within the lease.
    #[error("it leads, acknowledged by a quorum {acked_ms} ms ago")]
    Leading {
        /// How long ago a quorum acknowledged it (or it became leader).
        acked_ms: u64,
    },
    /// The voter heard from its leader within the lease.
    #[error("it heard from leader {leader} {heard_ms} ms ago; its lease ends in {left_ms} ms")]
    LiveLeader {
        /// The leader it follows.
        leader: NodeId,
        /// How long ago it last accepted an AppendEntries from it.
        heard_ms: u64,
        /// How long until that lease ends.
        left_ms: u64,
    },
    /// The candidate's log is behind the voter's: a real vote would be
    /// refused too.
    #[error("the candidate's log ends at {candidate:?}, behind the voter's {voter:?}")]
    LogBehind {
        /// The candidate's last log id.
        candidate: Option<LogId<NodeId>>,
        /// The voter's.
        voter: Option<LogId<NodeId>>,
    },
}

/// What a voter knows of itself when it answers, each duration measured at
/// that moment on its monotonic clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VoterView {
    /// The last entry of the voter's log.
    pub last_log_id: Option<LogId<NodeId>>,
    /// The committed leader (other than itself) the voter follows, and how
    /// long ago it last accepted an AppendEntries from it.
    pub follows: Option<(NodeId, Duration)>,
    /// When the voter leads: how long ago a quorum last acknowledged it, or
    /// it became leader if later.
    pub leading_for: Option<Duration>,
    /// Time left of the no-vote window after a restart, if any.
    pub restart_window_left: Option<Duration>,
    /// The lease a follower grants its leader: `election_timeout_max`.
    pub lease: Duration,
}

/// Whether the voter would vote for the candidate, or why not.
///
/// Granted only if none of these holds, checked in this order: the voter
/// is inside its post-restart window; it leads with quorum contact within
/// the lease; it heard from a live leader within the lease; the candidate's
/// log is behind its own.
///
/// The candidate's term does not matter. A candidate whose term is behind
/// a voter's but whose log is the most complete must still be able to win:
/// its real vote at that term is refused, but the refusal carries the
/// voter's vote and openraft moves the candidate's term up to it, so the
/// next round stands at a term that can win. Refusing a lower term here
/// instead could leave a cluster where the node with the highest term has a
/// shorter log and the node with the longest log never gets to stand.
pub fn decide_pre_vote(req: &PreVoteRequest, view: &VoterView) -> Result<(), PreVoteRefusal> {
    if let Some(left) = view.restart_window_left {
        return Err(PreVoteRefusal::JustRestarted {
            left_ms: millis(left),
        });
    }
    if let Some(age) = view.leading_for.filter(|age| *age <= view.lease) {
        return Err(PreVoteRefusal::Leading {
            acked_ms: millis(age),
        });
    }
    if let Some((leader, heard)) = view.follows.filter(|(_, heard)| *heard <= view.lease) {
        return Err(PreVoteRefusal::LiveLeader {
            leader,
            heard_ms: millis(heard),
            left_ms: millis(view.lease - heard),
        });
    }
    if req.last_log_id < view.last_log_id {
        return Err(PreVoteRefusal::LogBehind {
            candidate: req.last_log_id,
            voter: view.last_log_id,
        });
    }
    Ok(())
}

/// Whether `granted` (the candidate itself included) holds a majority of
/// every configuration of a (possibly joint) membership, as a real vote
/// needs.
pub fn pre_vote_won(joint: &[BTreeSet<NodeId>], granted: &BTreeSet<NodeId>) -> bool {
    !joint.is_empty()
        && joint
            .iter()
            .all(|config| config.intersection(granted).count() * 2 > config.len())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use openraft::CommittedLeaderId;

    use super::*;

    const LEASE: Duration = Duration::from_millis(450);

    fn log(term: u64, index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(CommittedLeaderId::new(term, 0), index))
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A voter that follows nobody, leads nothing, did not just restart.
    fn free(last: Option<LogId<NodeId>>) -> VoterView {
        VoterView {
            last_log_id: last,
            follows: None,
            leading_for: None,
            restart_window_left: None,
            lease: LEASE,
        }
    }

    #[test]
    fn pre_votes_are_granted_by_the_rules_in_order() {
        let req = |last| PreVoteRequest {
            candidate: 2,
            term: 5,
            last_log_id: last,
        };
        type Case = (
            &'static str,
            PreVoteRequest,
            VoterView,
            Result<(), PreVoteRefusal>,
        );
        let cases: Vec<Case> = vec![
            (
                "equal logs, no leader",
                req(log(3, 10)),
                free(log(3, 10)),
                Ok(()),
            ),
            ("longer log", req(log(3, 11)), free(log(3, 10)), Ok(())),
            (
                "higher last term, shorter log",
                req(log(4, 2)),
                free(log(3, 10)),
                Ok(()),
            ),
            ("empty logs on both sides", req(None), free(None), Ok(())),
            (
                "shorter log",
                req(log(3, 9)),
                free(log(3, 10)),
                Err(PreVoteRefusal::LogBehind {
                    candidate: log(3, 9),
                    voter: log(3, 10),
                }),
            ),
            (
                "lower last term, longer log",
                req(log(2, 20)),
                free(log(3, 10)),
                Err(PreVoteRefusal::LogBehind {
                    candidate: log(2, 20),
                    voter: log(3, 10),
                }),
            ),
            (
                "a leader heard 100 ms ago",
                req(log(3, 10)),
                VoterView {
                    follows: Some((1, ms(100))),
                    ..free(log(3, 10))
                },
                Err(PreVoteRefusal::LiveLeader {
                    leader: 1,
                    heard_ms: 100,
                    left_ms: 350,
                }),
            ),
            (
                "a leader heard exactly a lease ago",
                req(log(3, 10)),
                VoterView {
                    follows: Some((1, LEASE)),
                    ..free(log(3, 10))
                },
                Err(PreVoteRefusal::LiveLeader {
                    leader: 1,
                    heard_ms: 450,
                    left_ms: 0,
                }),
            ),
            (
                "a leader silent for longer than the lease",
                req(log(3, 10)),
                VoterView {
                    follows: Some((1, ms(451))),
                    ..free(log(3, 10))
                },
                Ok(()),
            ),
            (
                "the voter leads, acknowledged 20 ms ago",
                req(log(3, 11)),
                VoterView {
                    leading_for: Some(ms(20)),
                    ..free(log(3, 10))
                },
                Err(PreVoteRefusal::Leading { acked_ms: 20 }),
            ),
            (
                "the voter leads without quorum contact for longer than the lease",
                req(log(3, 10)),
                VoterView {
                    leading_for: Some(ms(600)),
                    ..free(log(3, 10))
                },
                Ok(()),
            ),
            (
                "inside the restart window, even with a better log",
                req(log(9, 99)),
                VoterView {
                    restart_window_left: Some(ms(200)),
                    ..free(log(3, 10))
                },
                Err(PreVoteRefusal::JustRestarted { left_ms: 200 }),
            ),
            (
                "the restart window is checked first",
                req(log(3, 9)),
                VoterView {
                    restart_window_left: Some(ms(1)),
                    follows: Some((1, ms(10))),
                    ..free(log(3, 10))
                },
                Err(PreVoteRefusal::JustRestarted { left_ms: 1 }),
            ),
            (
                "a live leader is reported before a short log",
                req(log(3, 9)),
                VoterView {
                    follows: Some((1, ms(10))),
                    ..free(log(3, 10))
                },
                Err(PreVoteRefusal::LiveLeader {
                    leader: 1,
                    heard_ms: 10,
                    left_ms: 440,
                }),
            ),
        ];
        for (what, req, view, want) in cases {
            assert_eq!(decide_pre_vote(&req, &view), want, "{what}");
        }
    }

    #[test]
    fn the_candidate_term_does_not_decide_a_pre_vote() {
        for term in [0, 1, 5, 100] {
            let req = PreVoteRequest {
                candidate: 2,
                term,
                last_log_id: log(3, 10),
            };
            assert_eq!(decide_pre_vote(&req, &free(log(3, 10))), Ok(()));
        }
    }

    #[test]
    fn a_pre_vote_is_won_with_a_majority_of_every_configuration() {
        let set = |ids: &[NodeId]| ids.iter().copied().collect::<BTreeSet<NodeId>>();
        let one = vec![set(&[1, 2, 3])];
        let joint = vec![set(&[1, 2, 3]), set(&[3, 4, 5])];
        type Case<'a> = (&'a [BTreeSet<NodeId>], BTreeSet<NodeId>, bool);
        let cases: Vec<Case> = vec![
            (&one, set(&[1]), false),
            (&one, set(&[1, 2]), true),
            (&one, set(&[1, 2, 3]), true),
            (&one, set(&[1, 9]), false),
            (&joint, set(&[1, 2]), false),
            (&joint, set(&[1, 2, 4]), false),
            (&joint, set(&[1, 3, 4]), true),
            (&joint, set(&[1, 2, 4, 5]), true),
            (&[], set(&[1]), false),
        ];
        for (joint, granted, won) in cases {
            assert_eq!(pre_vote_won(joint, &granted), won, "{joint:?} {granted:?}");
        }
        let single = vec![set(&[7])];
        assert!(
            pre_vote_won(&single, &set(&[7])),
            "a lone voter elects itself"
        );
    }
}
