//! Quorum description and membership changes (one at a time), and the
//! binding of voters' directory ids (see `keel_raft::KeelNode`).

use std::collections::BTreeMap;

use keel_metadata::{ApiError, ErrorCode};
use keel_proto::pb;
use keel_raft::{DirectoryId, KeelNode};
use openraft::ChangeMembers;

use crate::shared::Shared;

fn refused(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidQuorumChange, message)
}

fn raft_error(e: impl std::fmt::Display) -> ApiError {
    let s = e.to_string();
    if s.contains("forward") || s.contains("leader") {
        ApiError::new(ErrorCode::NotController, s)
    } else {
        refused(s)
    }
}

/// Finishes a change an earlier leader left in its joint phase; then
/// refuses a change while another one is still in its joint phase, or
/// when this node removed itself and is stepping down.
async fn ensure_settled(shared: &Shared) -> Result<(), ApiError> {
    if keel_raft::finish_joint_membership(&shared.raft)
        .await
        .map_err(raft_error)?
    {
        tracing::info!(
            node = shared.config.node_id,
            "finished a membership change an earlier leader left in its joint phase"
        );
    }
    let m = shared.raft.metrics().borrow().clone();
    match keel_raft::membership_change_refusal(m.id, m.membership_config.membership()) {
        Some(why) => Err(refused(why)),
        None => Ok(()),
    }
}

/// How long a voter may go without answering the leader's RPCs (which
/// go out every heartbeat) before it is described as unreachable.
fn unreachable_after_ms(shared: &Shared) -> u64 {
    (2 * shared.config.election_timeout_max_ms).max(1_000)
}

/// The leader's view: term, commit index, and every voter's replication.
pub(crate) fn describe(shared: &Shared) -> pb::DescribeQuorumResponse {
    let m = shared.raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
    let leader_last = m.last_log_index.unwrap_or(0);
    let contacts = shared.peer_contacts();
    let stale_ms = unreachable_after_ms(shared);
    let mut out = Vec::new();
    for (id, node) in membership.nodes() {
        let (last, status) = if Some(*id) == m.current_leader {
            (m.last_log_index, "leader")
        } else {
            let matched = m
                .replication
                .as_ref()
                .and_then(|r| r.get(id).cloned().flatten())
                .map(|l| l.index);
            let heard = contacts.get(id).is_some_and(|ms| *ms <= stale_ms);
            (
                matched,
                match (voters.contains(id), heard) {
                    (true, true) => "follower",
                    // A voter that has not answered the leader lately is
                    // not a healthy follower, whatever it last matched.
                    (true, false) => "unreachable",
                    (false, _) => "learner",
                },
            )
        };
        out.push(pb::VoterDescription {
            id: *id,
            address: node.addr.clone(),
            last_log_index: last,
            lag: leader_last.saturating_sub(last.unwrap_or(0)),
            last_contact_ms: if Some(*id) == m.current_leader {
                Some(0)
            } else {
                contacts.get(id).copied()
            },
            status: status.to_string(),
            directory_id: node.directory_id.map(|d| d.to_string()).unwrap_or_default(),
        });
    }
    pb::DescribeQuorumResponse {
        error: None,
        cluster_id: shared.config.cluster_id.clone(),
        leader_id: m.current_leader.unwrap_or(0),
        term: m.current_term,
        // openraft applies on commit; the leader's applied index is its
        // commit index as far as an observer can tell.
        commit_index: m.last_applied.map(|l| l.index).unwrap_or(0),
        voters: out,
        leader_disk: Some(shared.disk.to_pb(&shared.config.data_dir)),
    }
}

/// What [`add_voter`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Added {
    /// The directory id the membership records for the node.
    pub directory: DirectoryId,
    /// It was left a learner (asked for), not promoted.
    pub learner: bool,
}

/// How [`add_voter`] is asked to go about it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AddVoterOptions {
    /// How long the learner may take to catch up before it is left a
    /// learner.
    pub catch_up_wait: std::time::Duration,
    /// Stop once it is a learner; do not promote it.
    pub learner_only: bool,
}

/// How long the node named in `add-voter` has to answer who it is.
const IDENTIFY_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Asks the node at `address` whether it is controller `id` of this
/// cluster (with data dir `expected`, when named), and which directory id
/// its data dir has. Any other answer, or none, is a refusal saying why.
async fn identify(
    shared: &Shared,
    id: u64,
    address: &str,
    expected: Option<DirectoryId>,
) -> Result<DirectoryId, ApiError> {
    let vote = shared.raft.metrics().borrow().vote;
    let network = keel_raft::Network::new(shared.config.cluster_id.clone(), shared.config.node_id)
        .with_bind_ip(shared.config.listen.ip())
        .with_directory(shared.directory_id)
        .with_transport(shared.config.transport.clone());
    network
        .identify(id, address, expected, vote, IDENTIFY_WAIT)
        .await
        .map_err(|e| {
            let hint = match &e {
                keel_raft::IdentifyError::Unreachable { .. } => {
                    format!("check the address and that node {id} runs (`keel controller --join`)")
                }
                keel_raft::IdentifyError::Refused { kind, .. } => match kind {
                    keel_proto::pb::Refusal::WrongCluster => {
                        "it is a controller of another cluster".to_string()
                    }
                    keel_proto::pb::Refusal::WrongNode => {
                        format!("it is not node {id}: check --node-id and --address")
                    }
                    keel_proto::pb::Refusal::DirectoryMismatch => {
                        "check --directory-id against the node's log".to_string()
                    }
                    _ => "check the address".to_string(),
                },
                keel_raft::IdentifyError::NoDirectory { .. } => {
                    "it runs a release without directory ids; upgrade it first".to_string()
                }
            };
            refused(format!("node {id} not added, nothing changed: {e}; {hint}"))
        })
}

/// The directory id an add-voter request names (none when empty), once
/// its `address` is HOST:PORT and its `directory` 32 hex digits.
fn checked_request(address: &str, directory: &str) -> Result<Option<DirectoryId>, ApiError> {
    if address.parse::<std::net::SocketAddr>().is_err() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("{address:?} is not HOST:PORT"),
        ));
    }
    let directory: Option<DirectoryId> = if directory.is_empty() {
        None
    } else {
        Some(directory.parse().map_err(|e: keel_raft::BadDirectoryId| {
            ApiError::new(ErrorCode::InvalidRequest, e.to_string())
        })?)
    };
    Ok(directory)
}

/// Whether adding `id` re-admits a voter with a new data dir (it is a
/// voter recorded with another directory id than `directory`); refuses
/// adding a voter again, re-admitting the active controller, and a
/// learner recorded at another address. `member` is how the membership
/// records `id` and whether it is a voter.
fn readmits(
    shared: &Shared,
    id: u64,
    address: &str,
    directory: Option<DirectoryId>,
    member: (Option<&KeelNode>, bool),
) -> Result<bool, ApiError> {
    let (recorded, is_voter) = member;
    Ok(match (recorded, is_voter, directory) {
        (Some(_), true, None) => return Err(refused(format!("node {id} is already a voter"))),
        (Some(n), true, Some(d)) if n.directory_id == Some(d) => {
            return Err(refused(format!("node {id} is already a voter")))
        }
        (Some(_), true, Some(_)) if id == shared.config.node_id => {
            return Err(refused(format!(
                "node {id} is the active controller; its data dir is in use"
            )))
        }
        (Some(_), true, Some(_)) => true,
        (Some(n), false, _) if n.addr != address => {
            return Err(refused(format!(
                "node {id} is a learner at {}, not {address}; remove it first (keel quorum \
                 remove-learner --node-id {id})",
                n.addr
            )))
        }
        _ => false,
    })
}

/// Refuses a learner `id` recorded (as `n`) with another directory id than
/// the one the node at `address` answered with (`found`).
fn same_learner_directory(
    id: u64,
    address: &str,
    n: &KeelNode,
    found: DirectoryId,
) -> Result<(), ApiError> {
    if n.directory_id.is_some_and(|d| d != found) {
        return Err(refused(format!(
            "node {id} is a learner recorded with directory id {}, but the node at {address} \
             has {found}; remove it first (keel quorum remove-learner --node-id {id})",
            n.directory_id.map(|d| d.to_string()).unwrap_or_default()
        )));
    }
    Ok(())
}

/// Removes voter `id` (recorded with an old data dir) so that it can be
/// added back as a learner with its new one (`found`).
async fn remove_for_readmission(
    shared: &Shared,
    id: u64,
    recorded: Option<&KeelNode>,
    found: DirectoryId,
) -> Result<(), ApiError> {
    tracing::warn!(
        node = shared.config.node_id,
        voter = id,
        recorded = %recorded
            .and_then(|n| n.directory_id)
            .map(|r| r.to_string())
            .unwrap_or_else(|| "unbound".into()),
        new_directory = %found,
        "re-admitting a voter with a new data dir: removing it, then adding it back as a learner"
    );
    change_one(
        shared,
        ChangeMembers::RemoveVoters([id].into_iter().collect()),
    )
    .await?;
    Ok(())
}

/// Adds `id` as a learner, waits for it to catch up, then promotes it.
///
/// First the node at `address` must answer as controller `id` of this
/// cluster; the membership records the directory id it answered with (or
/// `directory`, which must then be the one it answered with). A node that
/// does not is refused and nothing changes. A learner `id` already at
/// `address` (an earlier add-voter that gave up waiting) is promoted
/// once it has caught up.
///
/// With `directory` (32 hex digits), naming a voter that is already in
/// the membership with another directory id (its dir was wiped, restored
/// or copied, and it is refused as a voter) re-admits it: it is removed,
/// then added back as a learner at `address` with the new dir, which must
/// catch up before it is promoted. Never a voter with an empty log in one
/// step.
pub(crate) async fn add_voter(
    shared: &Shared,
    id: u64,
    address: String,
    directory: &str,
    options: AddVoterOptions,
) -> Result<Added, ApiError> {
    ensure_settled(shared).await?;
    let directory = checked_request(&address, directory)?;
    let m = shared.raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let is_voter = membership.voter_ids().any(|v| v == id);
    let recorded = membership.get_node(&id).cloned();
    let readmit = readmits(
        shared,
        id,
        &address,
        directory,
        (recorded.as_ref(), is_voter),
    )?;
    // Who answers there, before anything changes.
    let found = identify(shared, id, &address, directory).await?;
    // A learner already there with another dir than the node now has.
    if let Some(n) = recorded.as_ref().filter(|_| !is_voter) {
        same_learner_directory(id, &address, n, found)?;
    }
    if readmit {
        remove_for_readmission(shared, id, recorded.as_ref(), found).await?;
    }
    let added_at = if !readmit && recorded.is_some() {
        // Already a learner here: it must have stored the membership
        // that added it, which is no later than the current one.
        m.membership_config.log_id().map(|l| l.index).unwrap_or(0)
    } else {
        shared
            .raft
            .add_learner(id, KeelNode::with_directory(address, found), false)
            .await
            .map_err(raft_error)?
            .log_id
            .index
    };
    if options.learner_only {
        tracing::info!(
            node = shared.config.node_id,
            learner = id,
            directory = %found,
            "learner added"
        );
        return Ok(Added {
            directory: found,
            learner: true,
        });
    }
    wait_caught_up(shared, id, added_at, options.catch_up_wait).await?;
    change_one(
        shared,
        ChangeMembers::AddVoterIds([id].into_iter().collect()),
    )
    .await?;
    tracing::info!(
        node = shared.config.node_id,
        voter = id,
        directory = %found,
        "voter added"
    );
    Ok(Added {
        directory: found,
        learner: false,
    })
}

/// How long a new learner may take to catch up before `add-voter` gives
/// up on promoting it (it stays a learner; the call can be repeated), when
/// the request does not say.
pub(crate) const CATCH_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Waits until learner `id` has stored the log up to `index` (the entry
/// that added it), as this leader's replication reports it. openraft's own
/// wait calls a learner up to date within 5,000 entries of the leader,
/// counting one that has stored nothing as at index 0: a node that
/// refuses or cannot take the leader's appends would be promoted, and the
/// quorum would then need every other voter.
async fn wait_caught_up(
    shared: &Shared,
    id: u64,
    index: u64,
    within: std::time::Duration,
) -> Result<(), ApiError> {
    let mut rx = shared.raft.metrics();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let matched = {
            let m = rx.borrow_and_update();
            if m.current_leader != Some(shared.config.node_id) {
                return Err(ApiError::new(
                    ErrorCode::NotController,
                    format!("this node stopped leading while node {id} was catching up"),
                ));
            }
            if m.membership_config.membership().get_node(&id).is_none() {
                return Err(refused(format!(
                    "node {id} was removed while it was catching up"
                )));
            }
            m.replication
                .as_ref()
                .and_then(|r| r.get(&id).cloned().flatten())
                .map(|l| l.index)
        };
        if matched.is_some_and(|m| m >= index) {
            return Ok(());
        }
        let changed = tokio::time::timeout_at(deadline, rx.changed()).await;
        if !matches!(changed, Ok(Ok(()))) || tokio::time::Instant::now() >= deadline {
            return Err(ApiError::new(
                ErrorCode::RequestTimedOut,
                format!(
                    "node {id} has not caught up within {} s (it has stored up to {}, the leader \
                     needs {index}); it stays a learner: check that it runs and what its log \
                     says, then run add-voter again",
                    within.as_secs(),
                    matched.map_or_else(|| "nothing".to_string(), |m| format!("index {m}"))
                ),
            ));
        }
    }
}

/// The directory ids to bind now: for each member the membership has not
/// bound yet, the id its data dir answered with (this node's own for
/// itself). Members that never answered stay unbound.
pub(crate) fn directories_to_bind(
    members: &BTreeMap<u64, KeelNode>,
    me: u64,
    my_directory: DirectoryId,
    answered: &BTreeMap<u64, DirectoryId>,
) -> BTreeMap<u64, KeelNode> {
    members
        .iter()
        .filter(|(_, n)| n.directory_id.is_none())
        .filter_map(|(id, n)| {
            let d = if *id == me {
                Some(my_directory)
            } else {
                answered.get(id).copied()
            }?;
            Some((*id, KeelNode::with_directory(n.addr.clone(), d)))
        })
        .collect()
}

/// Binds the directory id of every member not bound yet that has answered
/// this (active) node, in one membership change (`SetNodes`: the voters do
/// not change). Returns how many were bound.
pub(crate) async fn bind_directories(shared: &Shared) -> Result<usize, ApiError> {
    ensure_settled(shared).await?;
    let members: BTreeMap<u64, KeelNode> = {
        let m = shared.raft.metrics();
        let m = m.borrow();
        m.membership_config
            .membership()
            .nodes()
            .map(|(id, n)| (*id, n.clone()))
            .collect()
    };
    let bind = directories_to_bind(
        &members,
        shared.config.node_id,
        shared.directory_id,
        &shared.peer_directories(),
    );
    if bind.is_empty() {
        return Ok(0);
    }
    let n = bind.len();
    let which: Vec<String> = bind
        .iter()
        .map(|(id, node)| format!("{id}={}", node.directory_id.unwrap_or_default()))
        .collect();
    shared
        .raft
        .change_membership(ChangeMembers::SetNodes(bind), false)
        .await
        .map_err(raft_error)?;
    tracing::info!(
        node = shared.config.node_id,
        bound = %which.join(", "),
        "bound voters' directory ids in the membership"
    );
    Ok(n)
}

/// How far (log entries) behind the leader's commit index a voter may be
/// and still count as caught up toward the majority a removal must leave.
const CAUGHT_UP_SLACK: u64 = 1_000;

/// What the quorum looks like to the leader, for the removal check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VoterState {
    /// The voter is this (leading) node.
    pub leader: bool,
    /// It answered the leader within the unreachable threshold.
    pub heard: bool,
    /// The last log index it has stored, as replication reports it.
    pub matched: Option<u64>,
}

/// Why removing `id` from `voters` would leave no live, caught-up
/// majority among the voters left, or `None` when it would. Pure: the
/// leader's view comes in as arguments.
pub(crate) fn removal_breaks_majority(
    voters: &BTreeMap<u64, VoterState>,
    id: u64,
    commit_index: u64,
) -> Option<String> {
    let left: Vec<(&u64, &VoterState)> = voters.iter().filter(|(v, _)| **v != id).collect();
    let caught_up = |s: &VoterState| {
        s.leader
            || (s.heard
                && s.matched
                    .is_some_and(|m| m.saturating_add(CAUGHT_UP_SLACK) >= commit_index))
    };
    let live = left.iter().filter(|(_, s)| caught_up(s)).count();
    if live * 2 > left.len() {
        return None;
    }
    let lagging: Vec<String> = left
        .iter()
        .filter(|(_, s)| !caught_up(s))
        .map(|(v, s)| {
            if s.heard {
                format!("{v} (behind)")
            } else {
                format!("{v} (unreachable)")
            }
        })
        .collect();
    Some(format!(
        "removing node {id} would leave voters {:?} of which only {live} are live and caught up \
         (not: {}); a majority of {} is needed",
        left.iter().map(|(v, _)| **v).collect::<Vec<_>>(),
        lagging.join(", "),
        left.len() / 2 + 1
    ))
}

/// What [`remove_voter`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Removed {
    /// A voter.
    Voter,
    /// A learner (never promoted, or left by an add-voter that gave up).
    Learner,
}

/// Removes member `id`: a learner outright; a voter only if the voters
/// left keep a live, caught-up majority (unless `force`) and one is left
/// at all. `learner_only` refuses a voter. A refusal changes nothing.
pub(crate) async fn remove_voter(
    shared: &Shared,
    id: u64,
    force: bool,
    learner_only: bool,
) -> Result<Removed, ApiError> {
    ensure_settled(shared).await?;
    let m = shared.raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let voters: Vec<u64> = membership.voter_ids().collect();
    if !voters.contains(&id) {
        if membership.get_node(&id).is_none() {
            return Err(refused(format!(
                "node {id} is neither a voter nor a learner"
            )));
        }
        shared
            .raft
            .change_membership(
                ChangeMembers::RemoveNodes([id].into_iter().collect()),
                false,
            )
            .await
            .map_err(raft_error)?;
        tracing::info!(
            node = shared.config.node_id,
            learner = id,
            "learner removed"
        );
        return Ok(Removed::Learner);
    }
    if learner_only {
        return Err(refused(format!(
            "node {id} is a voter, not a learner; use remove-voter"
        )));
    }
    if voters.len() <= 1 {
        return Err(refused("cannot remove the last voter"));
    }
    if !force {
        let contacts = shared.peer_contacts();
        let stale_ms = unreachable_after_ms(shared);
        let state: BTreeMap<u64, VoterState> = voters
            .iter()
            .map(|v| {
                let leader = *v == shared.config.node_id;
                (
                    *v,
                    VoterState {
                        leader,
                        heard: leader || contacts.get(v).is_some_and(|ms| *ms <= stale_ms),
                        matched: m
                            .replication
                            .as_ref()
                            .and_then(|r| r.get(v).cloned().flatten())
                            .map(|l| l.index),
                    },
                )
            })
            .collect();
        let commit = m.last_applied.map(|l| l.index).unwrap_or(0);
        if let Some(why) = removal_breaks_majority(&state, id, commit) {
            return Err(refused(format!(
                "{why}; nothing changed (bring the others back first, or --force)"
            )));
        }
    }
    change_one(
        shared,
        ChangeMembers::RemoveVoters([id].into_iter().collect()),
    )
    .await?;
    tracing::info!(node = shared.config.node_id, voter = id, "voter removed");
    Ok(Removed::Voter)
}

/// Commits one membership change (without keeping removed voters as
/// learners); a refusal or a lost leadership is the typed error.
async fn change_one(shared: &Shared, change: ChangeMembers<u64, KeelNode>) -> Result<(), ApiError> {
    shared
        .raft
        .change_membership(change, false)
        .await
        .map_err(raft_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unbound_members_that_answered_are_bound_and_a_bound_id_never_changes() {
        let d = |n: u128| DirectoryId(n);
        let members: BTreeMap<u64, KeelNode> = [
            (1, KeelNode::new("a:1")),
            (2, KeelNode::new("b:1")),
            (3, KeelNode::with_directory("c:1", d(30))),
            (4, KeelNode::new("d:1")),
        ]
        .into_iter()
        .collect();
        // Node 3 answered with another id (its dir was replaced): not
        // rebound. Node 4 never answered: stays unbound.
        let answered: BTreeMap<u64, DirectoryId> = [(2, d(20)), (3, d(31))].into_iter().collect();
        let bind = directories_to_bind(&members, 1, d(10), &answered);
        assert_eq!(
            bind,
            [
                (1, KeelNode::with_directory("a:1", d(10))),
                (2, KeelNode::with_directory("b:1", d(20))),
            ]
            .into_iter()
            .collect()
        );
        let all_bound: BTreeMap<u64, KeelNode> = bind.into_iter().collect();
        assert!(directories_to_bind(&all_bound, 1, d(99), &answered).is_empty());
    }

    #[test]
    fn a_removal_must_leave_a_live_caught_up_majority_of_the_voters_left() {
        let s = |leader, heard, matched| VoterState {
            leader,
            heard,
            matched,
        };
        // 1 leads, 2 is dead, 3 is live and caught up.
        let voters: BTreeMap<u64, VoterState> = [
            (1, s(true, true, None)),
            (2, s(false, false, Some(100))),
            (3, s(false, true, Some(5_000))),
        ]
        .into_iter()
        .collect();
        // Removing the dead one leaves {1, 3}, both live.
        assert_eq!(removal_breaks_majority(&voters, 2, 5_000), None);
        // Removing a live one leaves {1, 2}: one of two is not a majority.
        let why = removal_breaks_majority(&voters, 3, 5_000).expect("refused");
        assert!(why.contains("2 (unreachable)"), "{why}");
        // A voter far behind does not count either.
        let behind: BTreeMap<u64, VoterState> = [
            (1, s(true, true, None)),
            (2, s(false, true, Some(10))),
            (3, s(false, true, Some(5_000))),
        ]
        .into_iter()
        .collect();
        let why = removal_breaks_majority(&behind, 3, 5_000).expect("refused");
        assert!(why.contains("2 (behind)"), "{why}");
        assert_eq!(removal_breaks_majority(&behind, 2, 5_000), None);
    }
}
