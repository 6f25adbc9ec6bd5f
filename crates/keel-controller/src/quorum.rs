//! Quorum description and membership changes (one at a time).

use keel_metadata::{ApiError, ErrorCode};
use keel_proto::pb;
use openraft::{BasicNode, ChangeMembers};

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

/// The leader's view: term, commit index, and every voter's replication.
pub(crate) fn describe(shared: &Shared) -> pb::DescribeQuorumResponse {
    let m = shared.raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
    let leader_last = m.last_log_index.unwrap_or(0);
    let contacts = shared.peer_contacts();
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
            (
                matched,
                if voters.contains(id) {
                    "follower"
                } else {
                    "learner"
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
    }
}

/// Adds `id` as a learner, waits for it to catch up, then promotes it.
pub(crate) async fn add_voter(shared: &Shared, id: u64, address: String) -> Result<(), ApiError> {
    ensure_settled(shared)?;
    if address.parse::<std::net::SocketAddr>().is_err() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("{address:?} is not HOST:PORT"),
        ));
    }
    let m = shared.raft.metrics().borrow().clone();
    if m.membership_config
        .membership()
        .voter_ids()
        .any(|v| v == id)
    {
        return Err(refused(format!("node {id} is already a voter")));
    }
    shared
        .raft
        .add_learner(id, BasicNode::new(address), true)
        .await
        .map_err(raft_error)?;
    shared
        .raft
        .change_membership(
            ChangeMembers::AddVoterIds([id].into_iter().collect()),
            false,
        )
        .await
        .map_err(raft_error)?;
    tracing::info!(node = shared.config.node_id, voter = id, "voter added");
    Ok(())
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
