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

/// Refuses a change while another one is still in its joint phase.
fn ensure_settled(shared: &Shared) -> Result<(), ApiError> {
    let m = shared.raft.metrics().borrow().clone();
    if m.membership_config.membership().get_joint_config().len() > 1 {
        return Err(refused(
            "a membership change is still in progress; retry when it completes",
        ));
    }
    Ok(())
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
        leader_disk: Some(crate::admin::disk_to_pb(shared)),
    }
}

/// Adds `id` as a learner, waits for it to catch up, then promotes it.
///
/// With `directory` (32 hex digits), the membership records that data dir
/// for it from the start. Naming a voter that is already in the
/// membership with another directory id (its dir was wiped, restored or
/// copied, and it is refused as a voter) re-admits it: it is removed,
/// then added back as a learner at `address` with the new dir, which must
/// catch up before it is promoted. Never a voter with an empty log in one
/// step.
pub(crate) async fn add_voter(
    shared: &Shared,
    id: u64,
    address: String,
    directory: &str,
) -> Result<(), ApiError> {
    ensure_settled(shared)?;
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
    let m = shared.raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    if membership.voter_ids().any(|v| v == id) {
        let recorded = membership.get_node(&id).and_then(|n| n.directory_id);
        match directory {
            Some(d) if recorded != Some(d) => {
                if id == shared.config.node_id {
                    return Err(refused(format!(
                        "node {id} is the active controller; its data dir is in use"
                    )));
                }
                tracing::warn!(
                    node = shared.config.node_id,
                    voter = id,
                    recorded = %recorded.map(|r| r.to_string()).unwrap_or_else(|| "unbound".into()),
                    new_directory = %d,
                    "re-admitting a voter with a new data dir: removing it, then adding it back as a learner"
                );
                shared
                    .raft
                    .change_membership(
                        ChangeMembers::RemoveVoters([id].into_iter().collect()),
                        false,
                    )
                    .await
                    .map_err(raft_error)?;
            }
            _ => return Err(refused(format!("node {id} is already a voter"))),
        }
    }
    let node = match directory {
        Some(d) => KeelNode::with_directory(address, d),
        None => KeelNode::new(address),
    };
    let added = shared
        .raft
        .add_learner(id, node, false)
        .await
        .map_err(raft_error)?;
    wait_caught_up(shared, id, added.log_id.index, CATCH_UP_WAIT).await?;
    shared
        .raft
        .change_membership(
            ChangeMembers::AddVoterIds([id].into_iter().collect()),
            false,
        )
        .await
        .map_err(raft_error)?;
    tracing::info!(
        node = shared.config.node_id,
        voter = id,
        directory = %directory.map(|d| d.to_string()).unwrap_or_else(|| "bound later".into()),
        "voter added"
    );
    Ok(())
}

/// How long a new learner may take to catch up before `add-voter` gives
/// up on promoting it (it stays a learner; the call can be repeated).
const CATCH_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

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
    ensure_settled(shared)?;
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

/// Removes voter `id` (the last voters can't be removed below one).
pub(crate) async fn remove_voter(shared: &Shared, id: u64) -> Result<(), ApiError> {
    ensure_settled(shared)?;
    let m = shared.raft.metrics().borrow().clone();
    let voters: Vec<u64> = m.membership_config.membership().voter_ids().collect();
    if !voters.contains(&id) {
        return Err(refused(format!("node {id} is not a voter")));
    }
    if voters.len() <= 1 {
        return Err(refused("cannot remove the last voter"));
    }
    shared
        .raft
        .change_membership(
            ChangeMembers::RemoveVoters([id].into_iter().collect()),
            false,
        )
        .await
        .map_err(raft_error)?;
    tracing::info!(node = shared.config.node_id, voter = id, "voter removed");
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
}
