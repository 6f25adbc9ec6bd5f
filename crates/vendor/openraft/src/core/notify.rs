use crate::core::sm;
use crate::raft::VoteResponse;
use crate::replication;
use crate::type_config::alias::InstantOf;
use crate::LogId;
use crate::MessageSummary;
use crate::RaftTypeConfig;
use crate::Vote;

/// A message coming from the internal components.
pub(crate) enum Notify<C>
where C: RaftTypeConfig
{
    VoteResponse {
        target: C::NodeId,
        resp: VoteResponse<C::NodeId>,

        /// The candidate that sent the vote request.
        ///
        /// A vote identifies a unique server state.
        sender_vote: Vote<C::NodeId>,
    },

    /// Seen a higher `vote`.
    HigherVote {
        /// The ID of the target node from which the new term was observed.
        target: C::NodeId,

        /// The higher vote observed.
        higher: Vote<C::NodeId>,

        /// The candidate or leader that sent the vote request.
        ///
        /// A vote identifies a unique server state.
        sender_vote: Vote<C::NodeId>,
        // TODO: need this?
        // /// The cluster this replication works for.
        // membership_log_id: Option<LogId<C::NodeId>>,
    },

    /// Result of executing a command sent from network worker.
    Network { response: replication::Response<C> },

    /// Result of executing a command sent from state machine worker.
    StateMachine { command_result: sm::CommandResult<C> },

    /// The leader's own append is on disk (or failed to get there).
    ///
    /// RaftCore does not wait for the leader's flush before it replicates
    /// the entries; the leader counts itself as holding them only when this
    /// arrives, and only if it is still the leader of `vote`.
    LocalLogFlushed {
        /// The leader vote the entries were appended under.
        vote: Vote<C::NodeId>,
        /// The last entry of the append.
        last_log_id: LogId<C::NodeId>,
        /// Whether the flush succeeded.
        result: Result<(), std::io::Error>,
    },

    /// Patched (Keel): `target` acknowledged, by a message the application sent outside
    /// replication, that it follows the leader of `vote`; the message left the leader at
    /// `sending_time`. See [`Raft::lease_acknowledged`](`crate::Raft::lease_acknowledged`).
    /// A notification, not an API message, so that it is handled in order with the ticks
    /// that run check-quorum.
    LeaseAcked {
        target: C::NodeId,
        vote: Vote<C::NodeId>,
        sending_time: InstantOf<C>,
    },

    /// A tick event to wake up RaftCore to check timeout etc.
    Tick {
        /// ith tick
        i: u64,
    },
}

impl<C> Notify<C>
where C: RaftTypeConfig
{
    pub(crate) fn sm(command_result: sm::CommandResult<C>) -> Self {
        Self::StateMachine { command_result }
    }
}

impl<C> MessageSummary<Notify<C>> for Notify<C>
where C: RaftTypeConfig
{
    fn summary(&self) -> String {
        match self {
            Self::VoteResponse {
                target,
                resp,
                sender_vote: vote,
            } => {
                format!("VoteResponse: from: {}: {}, res-vote: {}", target, resp.summary(), vote)
            }
            Self::HigherVote {
                ref target,
                higher: ref new_vote,
                sender_vote: ref vote,
            } => {
                format!(
                    "Seen a higher vote: target: {}, vote: {}, server_state_vote: {}",
                    target, new_vote, vote
                )
            }
            Self::Network { response } => {
                format!("Replication command done: {}", response.summary())
            }
            Self::StateMachine { command_result } => {
                format!("StateMachine command done: {:?}", command_result)
            }
            Self::LocalLogFlushed {
                vote,
                last_log_id,
                result,
            } => {
                format!(
                    "LocalLogFlushed: vote: {}, last_log_id: {}, ok: {}",
                    vote,
                    last_log_id,
                    result.is_ok()
                )
            }
            Self::LeaseAcked { target, vote, .. } => {
                format!("LeaseAcked: target: {}, vote: {}", target, vote)
            }
            Self::Tick { i } => {
                format!("Tick {}", i)
            }
        }
    }
}
