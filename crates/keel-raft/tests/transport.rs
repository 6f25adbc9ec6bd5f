//! The Raft gRPC service (unary and `AppendStream`) refuses requests of
//! another cluster and bytes that do not decode, before they reach Raft.

mod common;

use common::*;
use keel_proto::pb::raft_service_client::RaftServiceClient;
use keel_proto::pb::RaftRequest;

/// A request from node 9 to node 0 of cluster `cluster_id`.
fn request(cluster_id: &str, payload: Vec<u8>, seq: u64) -> RaftRequest {
    RaftRequest {
        cluster_id: cluster_id.into(),
        from_node: 9,
        payload,
        seq,
        to_node: 0,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_from_another_cluster_or_with_garbage_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let node = start_single(root.path()).await;
    let mut client = RaftServiceClient::connect(format!("http://{}", node.addr))
        .await
        .unwrap();

    let foreign = client
        .vote(request("someone-else", vec![1, 2, 3], 0))
        .await
        .unwrap()
        .into_inner();
    assert!(foreign.payload.is_empty());
    assert!(foreign.error.contains("someone-else"), "{}", foreign.error);

    for payload in [
        vec![],
        vec![1, 0],
        vec![1, 0, 0xff, 0xff, 0xff, 0xff],
        vec![0x42; 100],
    ] {
        let garbage = client
            .append(request(CLUSTER, payload, 0))
            .await
            .unwrap()
            .into_inner();
        assert!(garbage.payload.is_empty());
        assert!(garbage.error.contains("undecodable"), "{}", garbage.error);
    }
    // The node is unharmed.
    assert!(node.raft.metrics().borrow().running_state.is_ok());
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_append_stream_refuses_the_same_requests_and_answers_each_by_seq() {
    let root = tempfile::tempdir().unwrap();
    let node = start_single(root.path()).await;
    let mut client = RaftServiceClient::connect(format!("http://{}", node.addr))
        .await
        .unwrap();
    let requests = vec![
        request("someone-else", vec![1, 2, 3], 40),
        request(CLUSTER, vec![0x42; 100], 41),
        request(CLUSTER, vec![], 42),
    ];
    let mut answers = client
        .append_stream(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let a = answers.message().await.unwrap().expect("first answer");
    assert_eq!(a.seq, 40);
    assert!(a.payload.is_empty());
    assert!(a.error.contains("someone-else"), "{}", a.error);
    for seq in [41, 42] {
        let a = answers.message().await.unwrap().expect("an answer");
        assert_eq!(a.seq, seq, "answers come in the order sent");
        assert!(a.payload.is_empty());
        assert!(a.error.contains("undecodable"), "{}", a.error);
    }
    assert!(
        answers.message().await.unwrap().is_none(),
        "the stream ends after the sender closes its side"
    );
    assert!(node.raft.metrics().borrow().running_state.is_ok());
    node.stop().await;
}

/// Two voters listed with one address: the node there gets requests meant
/// for the other, its own among them. It refuses them undecoded (openraft
/// would trip over its own messages) and keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_meant_for_another_node_or_from_itself_are_refused() {
    use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};

    let root = tempfile::tempdir().unwrap();
    let node = start_single(root.path()).await;
    let addr = keel_raft::KeelNode::new(&node.addr);
    let vote = |from: u64| openraft::raft::VoteRequest {
        vote: openraft::Vote::new(7, from),
        last_log_id: None,
    };
    let option = || RPCOption::new(std::time::Duration::from_secs(5));
    // (sender, the node it means to reach) for a node whose id is 1.
    for (from, to, served) in [(3, 2, false), (1, 3, false), (1, 1, false), (3, 1, true)] {
        let mut network = keel_raft::Network::new(CLUSTER.into(), from);
        let mut client = network.new_client(to, &addr).await;
        let answer = client.vote(vote(from), option()).await;
        assert_eq!(answer.is_ok(), served, "{from} -> {to}: {answer:?}");
    }
    assert!(node.raft.metrics().borrow().running_state.is_ok());
    node.stop().await;
}
