//! The classic controller's partition and replica state machines, kept
//! exact. Each `transition` checks that the move is legal and returns a
//! typed error otherwise; nothing is ever silently overwritten.

use serde::{Deserialize, Serialize};

/// Lifecycle of a partition as the controller sees it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PartitionState {
    /// Never created, or deleted.
    NonExistent,
    /// Replicas assigned, no leader elected yet.
    New,
    /// Has a leader.
    Online,
    /// Had a leader and lost it (no eligible replica), or is being deleted.
    Offline,
}

/// Lifecycle of one replica (a partition on one broker).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ReplicaState {
    NonExistent,
    /// Created during reassignment; may only become a follower.
    New,
    /// Assigned and its broker is live.
    Online,
    /// Its broker is down, or it was stopped.
    Offline,
    /// `StopReplica` with delete was sent.
    DeletionStarted,
    /// The broker reported the delete done.
    DeletionSuccessful,
    /// The delete failed or the broker went away; retried later.
    DeletionIneligible,
}

/// An illegal state-machine move.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("illegal partition state transition {from:?} -> {to:?}")]
    Partition {
        from: PartitionState,
        to: PartitionState,
    },
    #[error("illegal replica state transition {from:?} -> {to:?}")]
    Replica {
        from: ReplicaState,
        to: ReplicaState,
    },
}

impl PartitionState {
    pub const ALL: [PartitionState; 4] = [
        PartitionState::NonExistent,
        PartitionState::New,
        PartitionState::Online,
        PartitionState::Offline,
    ];

    /// The states a partition may move to `self` from.
    pub fn valid_previous(self) -> &'static [PartitionState] {
        use PartitionState::*;
        match self {
            NonExistent => &[New, Offline],
            New => &[NonExistent],
            // Online -> Online is a re-election (new leader, same state).
            Online => &[New, Online, Offline],
            Offline => &[New, Online, Offline],
        }
    }

    /// Checks `self -> to`.
    pub fn transition(self, to: PartitionState) -> Result<PartitionState, TransitionError> {
        if to.valid_previous().contains(&self) {
            Ok(to)
        } else {
            Err(TransitionError::Partition { from: self, to })
        }
    }

    /// Lower-case name used in describe output.
    pub fn name(self) -> &'static str {
        match self {
            PartitionState::NonExistent => "nonexistent",
            PartitionState::New => "new",
            PartitionState::Online => "online",
            PartitionState::Offline => "offline",
        }
    }
}

impl ReplicaState {
    pub const ALL: [ReplicaState; 7] = [
        ReplicaState::NonExistent,
        ReplicaState::New,
        ReplicaState::Online,
        ReplicaState::Offline,
        ReplicaState::DeletionStarted,
        ReplicaState::DeletionSuccessful,
        ReplicaState::DeletionIneligible,
    ];

    /// The states a replica may move to `self` from.
    pub fn valid_previous(self) -> &'static [ReplicaState] {
        use ReplicaState::*;
        match self {
            NonExistent => &[DeletionSuccessful],
            New => &[NonExistent],
            Online => &[New, Online, Offline],
            Offline => &[New, Online, Offline, DeletionIneligible],
            DeletionStarted => &[Offline],
            DeletionSuccessful => &[DeletionStarted],
            DeletionIneligible => &[DeletionStarted],
        }
    }

    /// Checks `self -> to`.
    pub fn transition(self, to: ReplicaState) -> Result<ReplicaState, TransitionError> {
        if to.valid_previous().contains(&self) {
            Ok(to)
        } else {
            Err(TransitionError::Replica { from: self, to })
        }
    }
}
