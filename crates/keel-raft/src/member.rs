//! A member of the controller quorum as the membership records it: its
//! address and the directory id of the data dir it votes with (KIP-853).
//!
//! Every data dir gets a random [`DirectoryId`] when it is formatted
//! (`open_storage`). A vote, or an acknowledgement that counts toward a
//! commit, is a promise that only that dir remembers: a dir that was wiped,
//! restored from an old backup or copied from another node answers with
//! an empty or an old vote and log, and could vote twice in one term or
//! make a committed entry disappear. So once the membership records a
//! voter's directory id, a Raft message to or from that voter with any
//! other id is refused (`service.rs`), and the voter neither votes nor
//! counts toward a quorum until an operator re-admits its new dir
//! (`keel quorum add-voter --directory-id`), which removes the voter and
//! adds it back as a learner that must catch up before it is promoted.
//!
//! The binding rule. Every voter bootstraps with the same initial
//! membership (it must: the first entry has the same log id everywhere),
//! so no voter's directory id is known at bootstrap: each is `None`,
//! unbound, and an unbound voter is not checked. Every Raft answer carries
//! the answering node's directory id; the active controller records, in a
//! membership change it commits (`SetNodes`), the id of each unbound voter
//! that has answered it, and its own. From that commit on, mismatches are
//! refused. A voter added with `add-voter --directory-id` is bound from the
//! start. What the rule cannot catch is a dir replaced while its voter is
//! still unbound, in the first moments of a quorum (or of a voter added
//! without an id): that dir is then the one bound.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The random identity of one data dir, drawn when it is formatted.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
pub struct DirectoryId(pub u128);

impl DirectoryId {
    /// A fresh random id.
    pub fn random() -> Self {
        Self(rand::random())
    }
}

impl fmt::Display for DirectoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// Text that is not a directory id (32 hex digits).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a directory id (32 hex digits, as `keel quorum describe` shows them)")]
pub struct BadDirectoryId(pub String);

impl FromStr for DirectoryId {
    type Err = BadDirectoryId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.len() != 32 {
            return Err(BadDirectoryId(s.to_string()));
        }
        u128::from_str_radix(t, 16)
            .map(DirectoryId)
            .map_err(|_| BadDirectoryId(s.to_string()))
    }
}

/// openraft's node type for Keel: where a member listens, and the data dir
/// it votes with once known.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct KeelNode {
    /// `host:port` of the member's gRPC listener.
    pub addr: String,
    /// The directory id of its data dir; `None` until bound (see the
    /// module doc).
    pub directory_id: Option<DirectoryId>,
}

impl KeelNode {
    /// A member at `addr` whose data dir is not bound yet.
    pub fn new(addr: impl Into<String>) -> Self {
        Self {
            addr: addr.into(),
            directory_id: None,
        }
    }

    /// A member at `addr` with data dir `dir`.
    pub fn with_directory(addr: impl Into<String>, dir: DirectoryId) -> Self {
        Self {
            addr: addr.into(),
            directory_id: Some(dir),
        }
    }
}

impl fmt::Display for KeelNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.directory_id {
            Some(d) => write!(f, "{} (directory {d})", self.addr),
            None => write!(f, "{} (directory unbound)", self.addr),
        }
    }
}

/// Whether `membership` is the joint configuration of a change in
/// progress (the old and the new voters), not a settled one.
pub fn in_joint_phase(membership: &openraft::Membership<crate::NodeId, KeelNode>) -> bool {
    membership.get_joint_config().len() > 1
}

/// Why no membership change may be asked of node `me` now, if one may
/// not: a change is still in progress (a joint configuration), or `me`
/// is not a voter of its own latest configuration. A leader that removed
/// itself goes on leading for a moment, until it steps down (openraft
/// keeps a removed leader until its next tick), and openraft is not
/// consistent about such a leader meanwhile: a further change asked of it
/// trips openraft's own assertions (found by the simulation, seed 1607 of
/// `keel-lab sim`). Changes go to its successor instead.
pub fn membership_change_refusal(
    me: crate::NodeId,
    membership: &openraft::Membership<crate::NodeId, KeelNode>,
) -> Option<&'static str> {
    if in_joint_phase(membership) {
        return Some("a membership change is still in progress; retry when it completes");
    }
    if !membership.voter_ids().any(|v| v == me) {
        return Some(
            "this node was removed from the voters and is stepping down; retry at the next \
             active controller",
        );
    }
    None
}

/// Finishes a membership change that a lost leadership or a crash left in
/// its joint phase: openraft commits a change as a joint configuration and
/// then the new one, both inside one `change_membership` call, and a
/// leader that stops between the two leaves the quorum in the joint
/// configuration, which openraft does not finish by itself and which
/// [`membership_change_refusal`] would refuse every later change in.
/// Moving to the joint's newer configuration is the step the interrupted
/// call would have taken. Returns whether there was one to finish.
pub async fn finish_joint_membership(
    raft: &crate::KeelRaft,
) -> Result<
    bool,
    openraft::error::RaftError<
        crate::NodeId,
        openraft::error::ClientWriteError<crate::NodeId, KeelNode>,
    >,
> {
    let goal = {
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        if !in_joint_phase(membership) {
            return Ok(false);
        }
        membership
            .get_joint_config()
            .last()
            .cloned()
            .unwrap_or_default()
    };
    raft.change_membership(openraft::ChangeMembers::ReplaceAllVoters(goal), false)
        .await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_ids_print_as_32_hex_digits_and_parse_back() {
        for id in [
            DirectoryId(0),
            DirectoryId(u128::MAX),
            DirectoryId::random(),
        ] {
            let s = id.to_string();
            assert_eq!(s.len(), 32);
            assert_eq!(s.parse::<DirectoryId>(), Ok(id));
        }
        assert!("".parse::<DirectoryId>().is_err());
        assert!("abc".parse::<DirectoryId>().is_err());
        assert!("zz".repeat(16).parse::<DirectoryId>().is_err());
        assert_ne!(DirectoryId::random(), DirectoryId::random());
    }

    #[test]
    fn membership_changes_are_refused_mid_change_and_on_a_removed_leader() {
        use std::collections::{BTreeMap, BTreeSet};
        let nodes: BTreeMap<u64, KeelNode> = (1..=3)
            .map(|i| (i, KeelNode::new(format!("n{i}:1"))))
            .collect();
        let voters = |ids: &[u64]| ids.iter().copied().collect::<BTreeSet<u64>>();
        let settled = openraft::Membership::new(vec![voters(&[1, 2, 3])], nodes.clone());
        assert_eq!(membership_change_refusal(1, &settled), None);
        let joint =
            openraft::Membership::new(vec![voters(&[1, 2, 3]), voters(&[2, 3])], nodes.clone());
        assert!(membership_change_refusal(1, &joint).is_some_and(|why| why.contains("in progress")));
        let without_me = openraft::Membership::new(vec![voters(&[2, 3])], nodes);
        assert!(
            membership_change_refusal(1, &without_me).is_some_and(|why| why.contains("removed"))
        );
        assert_eq!(membership_change_refusal(2, &without_me), None);
    }
}
