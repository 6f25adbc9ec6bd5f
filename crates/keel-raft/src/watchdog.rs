//! Prompt elections after the leader's lease runs out.
//!
//! openraft 0.9 lets a follower elect only on its tick (every 1.5 heartbeat
//! intervals) once the old leader's lease (`election_timeout_max` since the
//! last accepted AppendEntries) *and* a random election timeout drawn once
//! per process have both passed: 450 + 300..450 + 0..225 ms with the
//! defaults, about 0.9 s from a leader's death to a new leader. The lease
//! is what keeps a deposed leader's reads safe; the extra timeout is not.
//!
//! The watchdog asks openraft for an election as soon as this follower's
//! own lease for the current leader has expired, plus a stagger that grows
//! with the node's rank among the voters so two followers do not split the
//! vote. The lease check is the same one the voters apply to the request,
//! so no election starts earlier than openraft itself would allow, and the
//! built-in timers stay as the fallback: when the first-ranked follower
//! cannot win (its log is shorter than the other's), the next one's
//! watchdog election lands in the same term and fails too, and openraft's
//! timers elect the right node about a second after the leader went silent.

use std::time::Duration;

use openraft::ServerState;
use tokio::sync::watch;

use crate::{KeelRaft, NodeId};

/// How often the watchdog looks at the Raft state.
const POLL: Duration = Duration::from_millis(10);
/// Margin after the lease before the first-ranked follower elects.
const MARGIN: Duration = Duration::from_millis(20);
/// Extra wait per rank, so followers do not start elections together.
const STAGGER: Duration = Duration::from_millis(50);

/// The wait after the last contact before node `me` elects: the lease,
/// the margin and its rank's stagger (rank among the voters other than
/// the silent leader).
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

/// What the watchdog reads of the Raft state.
struct Seen {
    /// This node follows a committed leader other than itself.
    follows_other: bool,
    /// That leader.
    leader: Option<NodeId>,
    /// When this node last accepted an AppendEntries from it.
    last_contact: Option<tokio::time::Instant>,
    /// The voters, sorted.
    voters: Vec<NodeId>,
}

/// Reads [`Seen`] through the Raft core (`None`: Raft stopped).
async fn observe(raft: &KeelRaft, me: NodeId) -> Option<Seen> {
    raft.with_raft_state(move |s| {
        let vote = s.vote_ref();
        let leader = vote.leader_id().voted_for();
        let mut voters: Vec<NodeId> = s.membership_state.effective().voter_ids().collect();
        voters.sort_unstable();
        Seen {
            follows_other: s.server_state == ServerState::Follower
                && vote.is_committed()
                && leader.is_some_and(|l| l != me),
            leader,
            last_contact: s.vote_last_modified(),
            voters,
        }
    })
    .await
    .ok()
}

/// Runs until `stop` turns true or Raft stops: calls for an election once
/// per leader whose lease has expired on this follower.
pub async fn election_watchdog(
    raft: KeelRaft,
    me: NodeId,
    lease: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut fired_for: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = stop.wait_for(|v| *v) => return,
            _ = tokio::time::sleep(POLL) => {}
        }
        // Only followers watch; the metrics are read without asking the core.
        if raft.metrics().borrow().state != ServerState::Follower {
            continue;
        }
        let Some(seen) = observe(&raft, me).await else {
            return;
        };
        let Some(last_contact) = seen.last_contact else {
            continue;
        };
        if !seen.follows_other || fired_for == Some(last_contact) || !seen.voters.contains(&me) {
            continue;
        }
        let delay = election_delay(me, seen.leader, &seen.voters, lease);
        if last_contact.elapsed() <= delay {
            continue;
        }
        // Confirm with a second read that the core answers promptly: a core
        // that was busy (a long flush) may have AppendEntries from a live
        // leader queued, and the first read showed a contact time from
        // before them. The election command queues right behind this read.
        let asked = tokio::time::Instant::now();
        let Some(again) = observe(&raft, me).await else {
            return;
        };
        if asked.elapsed() > POLL
            || !again.follows_other
            || again.last_contact != Some(last_contact)
        {
            continue;
        }
        fired_for = Some(last_contact);
        tracing::info!(
            node = me,
            silent_leader = seen.leader,
            silent_ms = last_contact.elapsed().as_millis() as u64,
            "leader's lease expired; starting an election"
        );
        if raft.trigger().elect().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn followers_elect_one_after_another_and_never_inside_the_lease() {
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
}
