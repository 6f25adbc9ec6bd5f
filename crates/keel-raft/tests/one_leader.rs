//! One leader at a time, in process: pre-votes refused while a majority
//! follows a live leader, the no-vote window of a restarted node,
//! check-quorum (Keel's openraft patch 5) and the moment of the last
//! quorum acknowledgement (patch 4).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use keel_raft::prevote::{PreVoteRefusal, PreVoteRequest};
use keel_raft::{default_config, KeelNode, Network};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::VoteRequest;
use openraft::{ServerState, Vote};

/// A node id no test node has: requests "from a stranger".
const STRANGER: u64 = 9;

/// The voter of the three (ids 1-3) that is neither `a` nor `b`: the
/// sender of requests that must be judged by what they say, not refused
/// for coming from a non-voter.
fn third(a: u64, b: u64) -> u64 {
    6 - a - b
}

/// A pre-vote from `candidate` with `last` as its log's end.
fn pre_vote_req(candidate: u64, term: u64, last: Option<openraft::LogId<u64>>) -> PreVoteRequest {
    PreVoteRequest {
        candidate,
        term,
        last_log_id: last,
    }
}

/// Waits until `pred` holds for node `n`'s metrics.
async fn wait_for(
    n: &TestNode,
    what: &str,
    pred: impl Fn(&openraft::RaftMetrics<u64, KeelNode>) -> bool,
) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if pred(&n.raft.metrics().borrow()) {
            return;
        }
        assert!(Instant::now() < deadline, "node {}: {what}", n.id);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_voter_refuses_pre_votes_while_it_follows_a_live_leader_and_a_leader_while_it_leads() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let nodes = start_cluster(root.path(), Arc::new(default_config(CLUSTER))).await;
    let leader_id = wait_leader(&nodes).await;
    let leader = &nodes[leader_id as usize - 1];
    let follower = nodes.iter().find(|n| n.id != leader_id).unwrap();
    let index = write_batches(&leader.raft, 0..3, 1).await;
    assert_converged(&nodes, index).await;
    let m = leader.raft.metrics().borrow().clone();
    let term = m.current_term;

    let ask = Duration::from_secs(2);
    // Not a voter: refused before anything is weighed.
    let e = Network::new(CLUSTER.into(), STRANGER)
        .pre_vote(
            follower.id,
            &KeelNode::new(follower.addr.as_str()),
            &pre_vote_req(STRANGER, term + 1, None),
            ask,
        )
        .await
        .expect_err("a non-voter may not ask for a pre-vote");
    assert!(e.contains("not a voter"), "{e}");
    let candidate = third(leader_id, follower.id);
    let network = Network::new(CLUSTER.into(), candidate);
    // Even with a longer log, at any term.
    let better = Some(openraft::LogId::new(
        openraft::CommittedLeaderId::new(term + 5, 0),
        index + 100,
    ));
    let r = network
        .pre_vote(
            follower.id,
            &KeelNode::new(follower.addr.as_str()),
            &pre_vote_req(candidate, term + 1, better),
            ask,
        )
        .await
        .unwrap();
    assert!(
        matches!(r.refusal, Some(PreVoteRefusal::LiveLeader { leader, .. }) if leader == leader_id),
        "{r:?}"
    );
    assert_eq!(r.term, term);
    let r = network
        .pre_vote(
            leader.id,
            &KeelNode::new(leader.addr.as_str()),
            &pre_vote_req(candidate, term + 1, better),
            ask,
        )
        .await
        .unwrap();
    assert!(
        matches!(r.refusal, Some(PreVoteRefusal::Leading { .. })),
        "{r:?}"
    );

    // A pre-vote changes nothing: same leader, same term, everywhere.
    for n in &nodes {
        let m = n.raft.metrics().borrow().clone();
        assert_eq!((m.current_leader, m.current_term), (Some(leader_id), term));
    }

    // With the leader gone, the followers' leases run out.
    let mut nodes = nodes;
    let gone = nodes.remove(leader_id as usize - 1);
    gone.stop().await;

    // The two survivors elect one of them (a pre-vote, then a vote).
    let new_leader = wait_leader(&nodes).await;
    assert_ne!(new_leader, leader_id);
    assert!(nodes[0].raft.metrics().borrow().current_term > term);
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_cut_off_from_its_leader_asks_in_vain_and_never_raises_its_term() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let mut nodes = start_cluster(root.path(), Arc::new(default_config(CLUSTER))).await;
    let leader_id = wait_leader(&nodes).await;
    let term = nodes[0].raft.metrics().borrow().current_term;
    let lonely = nodes.iter().position(|n| n.id != leader_id).unwrap();

    // Nothing reaches it any more; it still reaches the others, and keeps
    // asking them for pre-votes, which the leader (quorum contact) and the
    // other follower (a live leader) refuse.
    nodes[lonely].cut_off().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for n in &nodes {
        let m = n.raft.metrics().borrow().clone();
        assert_eq!(
            m.current_term, term,
            "node {} moved to another term: an election was held",
            n.id
        );
    }
    let m = nodes[lonely].raft.metrics().borrow().clone();
    assert_eq!(m.state, ServerState::Follower);
    let leader = &nodes[leader_id as usize - 1];
    assert_eq!(leader.raft.metrics().borrow().state, ServerState::Leader);
    write_batches(&leader.raft, 0..2, 1).await;
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_without_quorum_contact_steps_down_and_the_quorum_elects_again_when_back() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let config = Arc::new(default_config(CLUSTER));
    let nodes = start_cluster(root.path(), config.clone()).await;
    let leader_id = wait_leader(&nodes).await;
    let index = write_batches(&nodes[leader_id as usize - 1].raft, 0..3, 1).await;
    assert_converged(&nodes, index).await;

    let mut stopped = Vec::new();
    let mut leader = None;
    for n in nodes {
        if n.id == leader_id {
            leader = Some(n);
        } else {
            stopped.push(n.stop().await);
        }
    }
    let leader = leader.unwrap();
    let term = leader.raft.metrics().borrow().current_term;
    // Within election_timeout_max plus a tick (1.5 heartbeats) and slack.
    let cut = Instant::now();
    wait_for(&leader, "the leader steps down", |m| {
        m.state != ServerState::Leader
    })
    .await;
    let took = cut.elapsed();
    assert!(
        took < Duration::from_millis(
            config.election_timeout_max + config.heartbeat_interval * 3 / 2 + 500
        ),
        "stepping down took {took:?}"
    );
    let m = leader.raft.metrics().borrow().clone();
    assert_eq!(m.state, ServerState::Follower);
    assert_eq!(m.current_term, term, "a step-down stays in its term");
    assert!(m.millis_since_quorum_ack.is_none() && m.last_quorum_acked.is_none());
    let refused = leader.raft.client_write(topic_batch(100)).await;
    assert!(refused.is_err(), "a stepped-down leader accepts no write");
    assert!(leader.raft.ensure_linearizable().await.is_err());

    // The followers come back: a leader is elected again (whichever).
    let mut nodes = vec![leader];
    for (id, dir, addr) in stopped {
        nodes.push(TestNode::restart(id, &dir, &addr, config.clone()).await);
    }
    let new_leader = wait_leader(&nodes).await;
    let lead = nodes.iter().find(|n| n.id == new_leader).unwrap();
    let more = write_batches(&lead.raft, 3..6, 1).await;
    assert_converged(&nodes, more).await;
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_node_refuses_votes_and_pre_votes_inside_its_window() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let config = Arc::new(default_config(CLUSTER));
    let mut nodes = start_cluster(root.path(), config.clone()).await;
    let leader_id = wait_leader(&nodes).await;
    let index = write_batches(&nodes[leader_id as usize - 1].raft, 0..3, 1).await;
    assert_converged(&nodes, index).await;

    let pos = nodes.iter().position(|n| n.id != leader_id).unwrap();
    let (id, dir, addr) = nodes.remove(pos).stop().await;
    let window = Duration::from_secs(3);
    let restarted = Instant::now();
    let node = TestNode::start_with(id, &dir, rebind(&addr).await, config, Some(window)).await;
    // The quorum's term (the restarted node's own metrics may not be
    // reported yet).
    let term = nodes[0].raft.metrics().borrow().current_term;

    // A vote for a candidate well ahead (higher term, longer log) is
    // refused with the node's own vote and log, as any refusal.
    let candidate = third(leader_id, id);
    let mut network = Network::new(CLUSTER.into(), candidate);
    let mut client = network.new_client(id, &KeelNode::new(&addr)).await;
    let ahead = Some(openraft::LogId::new(
        openraft::CommittedLeaderId::new(term + 10, 0),
        index + 100,
    ));
    let resp = client
        .vote(
            VoteRequest::new(Vote::new(term + 10, candidate), ahead),
            RPCOption::new(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    assert!(!resp.vote_granted);
    assert_eq!(resp.vote.leader_id().get_term(), term, "{resp:?}");
    assert!(
        restarted.elapsed() < window,
        "the test was too slow to be inside the window"
    );
    let ask = || async {
        network
            .pre_vote(
                id,
                &KeelNode::new(addr.as_str()),
                &pre_vote_req(candidate, term + 11, ahead),
                Duration::from_secs(2),
            )
            .await
            .unwrap()
    };
    let r = ask().await;
    assert!(
        matches!(r.refusal, Some(PreVoteRefusal::JustRestarted { .. })),
        "{r:?}"
    );
    // Its vote did not move.
    assert_eq!(node.raft.metrics().borrow().current_term, term);

    // After the window it answers by the other rules (it follows a live
    // leader again).
    let rest = window.saturating_sub(restarted.elapsed());
    tokio::time::sleep(rest + Duration::from_millis(50)).await;
    // The window runs on the node's clock from its own start, a little
    // after `restarted` on a busy machine: what is left of it only shrinks,
    // and it ends (bounded).
    let mut left_before = u64::MAX;
    let mut r = None;
    for _ in 0..50 {
        let answer = ask().await;
        match answer.refusal {
            Some(PreVoteRefusal::JustRestarted { left_ms }) => {
                assert!(
                    left_ms <= left_before,
                    "{answer:?} after {left_before} ms left"
                );
                left_before = left_ms;
                tokio::time::sleep(Duration::from_millis(left_ms + 10)).await;
            }
            _ => {
                r = Some(answer);
                break;
            }
        }
    }
    let r = r.expect("the restart window never ended");
    assert!(
        !matches!(r.refusal, Some(PreVoteRefusal::JustRestarted { .. })),
        "{r:?}"
    );
    nodes.push(node);
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_moment_of_the_last_quorum_ack_ages_between_metrics_reports() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let nodes = start_cluster(root.path(), Arc::new(default_config(CLUSTER))).await;
    let leader_id = wait_leader(&nodes).await;
    let leader = &nodes[leader_id as usize - 1];
    wait_for(leader, "a quorum acknowledges the leader", |m| {
        m.last_quorum_acked.is_some()
    })
    .await;

    // What a reader holds: a report of the metrics, as of when the core
    // ran last. Its age in milliseconds is frozen; the moment is not.
    let report = leader.raft.metrics().borrow().clone();
    let frozen = report.millis_since_quorum_ack.unwrap();
    let acked = report.last_quorum_acked.unwrap();
    let derived = acked.elapsed().as_millis() as u64;
    assert!(
        derived + 5 >= frozen && derived <= frozen + 200,
        "{derived} vs {frozen}"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(acked.elapsed() >= Duration::from_millis(600));
    assert_eq!(report.millis_since_quorum_ack, Some(frozen));
    // Followers carry none.
    for n in nodes.iter().filter(|n| n.id != leader_id) {
        assert!(n.raft.metrics().borrow().last_quorum_acked.is_none());
    }
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bound_membership_refuses_envelopes_naming_another_data_dir() {
    use keel_proto::pb::raft_service_client::RaftServiceClient;
    use keel_proto::pb::{RaftRequest, Refusal};
    use keel_raft::DirectoryId;

    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let nodes = start_cluster(root.path(), Arc::new(default_config(CLUSTER))).await;
    let leader_id = wait_leader(&nodes).await;
    let leader = &nodes[leader_id as usize - 1];
    // The initial membership commits first (a change is refused while one
    // is uncommitted).
    write_batches(&leader.raft, 0..1, 1).await;
    // Bind every voter's data dir, as the active controller does.
    let bound: std::collections::BTreeMap<u64, KeelNode> = nodes
        .iter()
        .map(|n| {
            (
                n.id,
                KeelNode::with_directory(&n.addr, n.log.directory_id()),
            )
        })
        .collect();
    leader
        .raft
        .change_membership(openraft::ChangeMembers::SetNodes(bound), false)
        .await
        .unwrap();
    // The quorum still commits: every envelope names the right dirs.
    let index = write_batches(&leader.raft, 1..4, 1).await;
    assert_converged(&nodes, index).await;

    let follower = nodes.iter().find(|n| n.id != leader_id).unwrap();
    let other = nodes
        .iter()
        .find(|n| n.id != leader_id && n.id != follower.id)
        .unwrap();
    let mut client = RaftServiceClient::connect(format!("http://{}", follower.addr))
        .await
        .unwrap();
    let stranger_dir = DirectoryId::random();
    let request = |from_directory: String, to_directory: String| RaftRequest {
        cluster_id: CLUSTER.into(),
        from_node: other.id,
        payload: vec![0x42; 4],
        to_node: follower.id,
        from_directory,
        to_directory,
        ..Default::default()
    };

    // The sender expects another dir at the follower (its own was wiped).
    let r = client
        .append(request(
            other.log.directory_id().to_string(),
            stranger_dir.to_string(),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.refusal, Refusal::DirectoryMismatch as i32, "{}", r.error);
    let mine = follower.log.directory_id().to_string();
    assert_eq!(r.directory, mine, "answers carry the node's own id");
    for part in [
        mine.as_str(),
        &stranger_dir.to_string(),
        &format!(
            "keel quorum add-voter --node-id {} --address {} --directory-id {mine}",
            follower.id, follower.addr
        ),
    ] {
        assert!(r.error.contains(part), "{part:?} not in: {}", r.error);
    }

    // The sender's dir is not the one the membership records for it.
    let r = client
        .vote(request(stranger_dir.to_string(), mine.clone()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.refusal, Refusal::DirectoryMismatch as i32, "{}", r.error);
    assert!(
        r.error.contains(&other.log.directory_id().to_string())
            && r.error.contains(&stranger_dir.to_string()),
        "{}",
        r.error
    );
    // An append from it is not refused for that: only a leader sends
    // appends, and this node's membership may be older than the one that
    // re-admitted its leader's new dir (the payload is then refused).
    let r = client
        .append(request(stranger_dir.to_string(), mine.clone()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.refusal, Refusal::Undecodable as i32, "{}", r.error);
    // Sending no id at all is no way around it.
    let r = client
        .pre_vote(request(String::new(), String::new()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.refusal, Refusal::DirectoryMismatch as i32, "{}", r.error);

    // The right ids pass the envelope (the payload is then refused).
    let r = client
        .append(request(other.log.directory_id().to_string(), mine))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.refusal, Refusal::Undecodable as i32, "{}", r.error);

    for n in nodes {
        n.stop().await;
    }
}

/// Both followers' disks stall (every append of the leader's entries waits
/// before its flush, holding each follower's Raft core) for four election
/// timeouts while a write is pending: the leader's replication stalls, but
/// the lease heartbeats it sends beside replication are answered, so it
/// stays leader (check-quorum is satisfied), no follower stands, and the
/// term does not move. Once the disks are back the write commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_whose_followers_stall_on_their_disks_keeps_its_quorum_through_lease_heartbeats() {
    let oldest_ack = leader_through_stalled_followers(Duration::ZERO, 4).await;
    assert!(
        oldest_ack <= Duration::from_millis(default_config(CLUSTER).election_timeout_max),
        "the quorum acknowledgement aged {oldest_ack:?}"
    );
}

/// Both followers' disks stall, as in the test above, and both also answer
/// every lease request 200 ms late (a busy follower's answer waits for its
/// runtime). The leader keeps asking without waiting for the answers, so
/// its quorum clock ages by one delay plus a request interval, not two
/// delays plus an interval (550 ms, past the 450 ms lease, with one
/// request at a time): it stays leader in its term and no follower stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_whose_followers_answer_its_lease_late_keeps_its_quorum() {
    let delay = Duration::from_millis(200);
    let oldest_ack = leader_through_stalled_followers(delay, 6).await;
    // The acknowledgements came from the delayed lease answers only.
    assert!(
        oldest_ack >= delay,
        "the quorum acknowledgement aged only {oldest_ack:?}: were the answers delayed?"
    );
    assert!(
        oldest_ack <= Duration::from_millis(default_config(CLUSTER).election_timeout_max),
        "the quorum acknowledgement aged {oldest_ack:?}"
    );
}

/// Starts a quorum, stalls both followers' appends while a write is
/// pending and delays their lease answers by `delay`, for `leases`
/// election timeouts; throughout, the leader must stay leader in its term
/// and no follower may raise its term. Then lifts both faults and checks
/// the write commits in the same term. Returns the oldest age of the
/// leader's quorum acknowledgement seen (as of each look, not of the last
/// metrics report).
async fn leader_through_stalled_followers(delay: Duration, leases: u32) -> Duration {
    use std::sync::atomic::Ordering;
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let config = Arc::new(default_config(CLUSTER));
    let nodes = start_cluster(root.path(), config.clone()).await;
    let leader_id = wait_leader(&nodes).await;
    let leader = &nodes[leader_id as usize - 1];
    let index = write_batches(&leader.raft, 0..3, 1).await;
    assert_converged(&nodes, index).await;
    let term = leader.raft.metrics().borrow().current_term;

    let followers: Vec<_> = nodes.iter().filter(|n| n.id != leader_id).collect();
    for n in &followers {
        n.lease_answer_delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
    }
    let holds: Vec<_> = followers
        .iter()
        .map(|n| n.log.stall_follower_appends())
        .collect();
    let raft = leader.raft.clone();
    let pending = tokio::spawn(async move { raft.client_write(topic_batch(100)).await });
    let until = Instant::now() + Duration::from_millis(config.election_timeout_max) * leases;
    let mut oldest_ack = Duration::ZERO;
    while Instant::now() < until {
        let m = leader.raft.metrics().borrow().clone();
        assert_eq!(m.state, ServerState::Leader, "the leader stepped down");
        assert_eq!(m.current_term, term, "the term moved");
        if let Some(at) = m.last_quorum_acked {
            oldest_ack = oldest_ack.max(at.elapsed());
        }
        for n in &followers {
            assert_eq!(
                n.raft.metrics().borrow().current_term,
                term,
                "node {} raised its term",
                n.id
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !pending.is_finished(),
        "the write committed though no follower could flush"
    );
    drop(holds);
    for n in &followers {
        n.lease_answer_delay_ms.store(0, Ordering::Relaxed);
    }
    let written = tokio::time::timeout(PATIENCE, pending)
        .await
        .expect("the write commits once the disks are back")
        .unwrap()
        .expect("the write succeeds");
    assert_converged(&nodes, written.log_id.index).await;
    assert_eq!(leader.raft.metrics().borrow().current_term, term);
    for n in nodes {
        n.stop().await;
    }
    oldest_ack
}

/// A leader whose Raft core stops (here a request that never returns
/// holds it, as a storage call that never returns or a stopped thread
/// would) while its lease thread, network and followers stay healthy:
/// the lease thread stops renewing the followers' leases once the core
/// leaves its probes unanswered, and the other two elect a leader. Counts
/// leaderships, not milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_whose_raft_core_wedges_is_replaced() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let nodes = start_cluster(root.path(), Arc::new(default_config(CLUSTER))).await;
    let wedged = wait_leader(&nodes).await;
    let term = nodes[wedged as usize - 1]
        .raft
        .metrics()
        .borrow()
        .current_term;
    // The core runs the request's closure itself: it blocks there until
    // the sender is dropped at the end of the test.
    let (release, held) = std::sync::mpsc::channel::<()>();
    let held = std::sync::Mutex::new(held);
    let core = nodes[wedged as usize - 1].raft.clone();
    tokio::spawn(async move {
        let _ = core
            .with_raft_state(move |_| {
                let _ = held.lock().map(|rx| rx.recv());
            })
            .await;
    });
    // The other two elect one of them, in a later term.
    let others: Vec<&TestNode> = nodes.iter().filter(|n| n.id != wedged).collect();
    let deadline = Instant::now() + PATIENCE;
    let new_leader = loop {
        let led: Vec<(u64, u64)> = others
            .iter()
            .filter(|n| n.raft.metrics().borrow().state == ServerState::Leader)
            .map(|n| (n.id, n.raft.metrics().borrow().current_term))
            .collect();
        if let Some(&(id, t)) = led.first() {
            break (id, t);
        }
        assert!(
            Instant::now() < deadline,
            "node {wedged}'s core is wedged, yet nobody else leads: {:?}",
            others
                .iter()
                .map(|n| {
                    let m = n.raft.metrics().borrow().clone();
                    (n.id, m.state, m.current_term, m.current_leader)
                })
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        new_leader.0 != wedged && new_leader.1 > term,
        "{new_leader:?}"
    );
    drop(release);
}
