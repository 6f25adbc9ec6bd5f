//! The Raft gRPC service refuses requests of another cluster and bytes that
//! do not decode, before they reach Raft.

mod common;

use std::sync::Arc;

use common::*;
use keel_proto::pb::raft_service_client::RaftServiceClient;
use keel_proto::pb::RaftRequest;
use keel_raft::default_config;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_from_another_cluster_or_with_garbage_are_refused() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let config = Arc::new(default_config(CLUSTER));
    let node = TestNode::start(1, &root.path().join("n1"), listener().await, config).await;
    let mut client = RaftServiceClient::connect(format!("http://{}", node.addr))
        .await
        .unwrap();

    let foreign = client
        .vote(RaftRequest {
            cluster_id: "someone-else".into(),
            from_node: 9,
            payload: vec![1, 2, 3],
        })
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
            .append(RaftRequest {
                cluster_id: CLUSTER.into(),
                from_node: 9,
                payload,
            })
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
