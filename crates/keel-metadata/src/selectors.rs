//! The classic controller's five partition leader selectors, as pure
//! functions. Each returns the new leader, the new ISR and the replicas that
//! must receive `LeaderAndIsr`, or a typed error.
//!
//! `eligible(b)` says whether broker `b` may lead this partition now:
//! registered, unfenced, not shutting down, and the replica's log dir online.

use crate::error::{ApiError, ErrorCode};
use crate::ids::BrokerId;
use crate::image::PartitionImage;

/// The outcome of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Election {
    pub leader: BrokerId,
    pub isr: Vec<BrokerId>,
    /// Live assigned replicas: they get the new `LeaderAndIsr`.
    pub recipients: Vec<BrokerId>,
    /// The leader came from outside the ISR (data may be lost).
    pub unclean: bool,
}

/// Why no leader could be selected.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("no live replica can lead (unclean election {0})")]
    NoReplicaOnline(&'static str),
    #[error("no live in-sync replica of the target assignment can lead")]
    EligibleLeadersNotAvailable,
    #[error("the preferred replica is not live and in sync")]
    PreferredLeaderNotAvailable,
}

impl SelectorError {
    pub fn code(self) -> ErrorCode {
        match self {
            SelectorError::NoReplicaOnline(_) => ErrorCode::NoReplicaOnline,
            SelectorError::EligibleLeadersNotAvailable => ErrorCode::EligibleLeadersNotAvailable,
            SelectorError::PreferredLeaderNotAvailable => ErrorCode::PreferredLeaderNotAvailable,
        }
    }
}

impl From<SelectorError> for ApiError {
    fn from(e: SelectorError) -> Self {
        ApiError::new(e.code(), e.to_string())
    }
}

fn live_replicas(p: &PartitionImage, eligible: &impl Fn(BrokerId) -> bool) -> Vec<BrokerId> {
    p.replicas
        .iter()
        .copied()
        .filter(|b| eligible(*b))
        .collect()
}

/// Offline partition: the first live ISR member (in replica order) leads and
/// the ISR shrinks to its live members. With none, and unclean election
/// enabled, the first live assigned replica leads alone; else
/// `NoReplicaOnline`.
pub fn offline_partition(
    p: &PartitionImage,
    eligible: impl Fn(BrokerId) -> bool,
    unclean_allowed: bool,
) -> Result<Election, SelectorError> {
    let recipients = live_replicas(p, &eligible);
    let live_isr: Vec<BrokerId> = p.isr.iter().copied().filter(|b| eligible(*b)).collect();
    if let Some(leader) = recipients.iter().copied().find(|b| live_isr.contains(b)) {
        return Ok(Election {
            leader,
            isr: live_isr,
            recipients,
            unclean: false,
        });
    }
    if !unclean_allowed {
        return Err(SelectorError::NoReplicaOnline("disabled"));
    }
    match recipients.first().copied() {
        Some(leader) => Ok(Election {
            leader,
            isr: vec![leader],
            recipients,
            unclean: true,
        }),
        None => Err(SelectorError::NoReplicaOnline("enabled")),
    }
}

/// Reassigned partition: a live, in-sync member of the target replica set
/// (replicas minus removing), in target order. The ISR is unchanged.
pub fn reassigned_partition(
    p: &PartitionImage,
    eligible: impl Fn(BrokerId) -> bool,
) -> Result<Election, SelectorError> {
    let target = p.target_replicas();
    let leader = target
        .iter()
        .copied()
        .find(|b| eligible(*b) && p.isr.contains(b))
        .ok_or(SelectorError::EligibleLeadersNotAvailable)?;
    Ok(Election {
        leader,
        isr: p.isr.clone(),
        recipients: target.into_iter().filter(|b| eligible(*b)).collect(),
        unclean: false,
    })
}

/// Preferred replica: the first assigned replica, if live and in the ISR.
pub fn preferred_replica(
    p: &PartitionImage,
    eligible: impl Fn(BrokerId) -> bool,
) -> Result<Election, SelectorError> {
    let preferred = *p
        .replicas
        .first()
        .ok_or(SelectorError::PreferredLeaderNotAvailable)?;
    if !eligible(preferred) || !p.isr.contains(&preferred) {
        return Err(SelectorError::PreferredLeaderNotAvailable);
    }
    Ok(Election {
        leader: preferred,
        isr: p.isr.clone(),
        recipients: live_replicas(p, &eligible),
        unclean: false,
    })
}

/// Controlled shutdown of `shutting_down`: the ISR always loses that broker,
/// and the leader is the current one if it stays eligible, else the first
/// eligible member of the new ISR in replica order. When no such member is
/// left (the shutting-down broker was the only eligible one, or the only ISR
/// member) the answer is `EligibleLeadersNotAvailable`.
pub fn controlled_shutdown(
    p: &PartitionImage,
    shutting_down: BrokerId,
    eligible: impl Fn(BrokerId) -> bool,
) -> Result<Election, SelectorError> {
    let ok = |b: BrokerId| b != shutting_down && eligible(b);
    let isr: Vec<BrokerId> = p
        .isr
        .iter()
        .copied()
        .filter(|b| *b != shutting_down)
        .collect();
    let leader = match p.leader {
        Some(l) if ok(l) && isr.contains(&l) => l,
        _ => p
            .replicas
            .iter()
            .copied()
            .find(|b| ok(*b) && isr.contains(b))
            .ok_or(SelectorError::EligibleLeadersNotAvailable)?,
    };
    Ok(Election {
        leader,
        isr,
        recipients: p.replicas.iter().copied().filter(|b| ok(*b)).collect(),
        unclean: false,
    })
}

/// No-op: current leader and ISR unchanged (used to resend state).
pub fn no_op(
    p: &PartitionImage,
    eligible: impl Fn(BrokerId) -> bool,
) -> Result<Election, SelectorError> {
    let leader = p
        .leader
        .ok_or(SelectorError::NoReplicaOnline("not consulted"))?;
    Ok(Election {
        leader,
        isr: p.isr.clone(),
        recipients: live_replicas(p, &eligible),
        unclean: false,
    })
}
