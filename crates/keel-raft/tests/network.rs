//! The client side of the transport: outgoing connections use the
//! configured source address, and answers are recorded per peer.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use keel_raft::{default_config, KeelNode, Network};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::VoteRequest;
use openraft::Vote;

/// Sends one vote request from `network` (as its node) to node `target`
/// at `addr`; the answer, if any, is not looked at.
async fn send_vote(network: &mut Network, target: u64, addr: &str) {
    let mut client = network.new_client(target, &KeelNode::new(addr)).await;
    let option = RPCOption::new(Duration::from_secs(2));
    let _ = client
        .vote(
            VoteRequest {
                vote: Vote::new(1, 9),
                last_log_id: None,
            },
            option,
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outgoing_connections_bind_the_configured_source_ip() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let source: IpAddr = Ipv4Addr::new(127, 0, 0, 2).into();
    let mut network = Network::new(CLUSTER.into(), 9).with_bind_ip(source);
    // The listener speaks no HTTP/2, so the call fails; only who dialed counts.
    let call = tokio::spawn(async move { send_vote(&mut network, 1, &addr).await });
    let (_stream, peer) = tokio::time::timeout(PATIENCE, listener.accept())
        .await
        .expect("the network dialed the listener")
        .unwrap();
    assert_eq!(peer.ip(), source, "connection came from {peer}");
    assert_ne!(peer.port(), 0);
    call.abort();

    // Without a bind ip (or with an unspecified one) the kernel picks 127.0.0.1.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mut network = Network::new(CLUSTER.into(), 9).with_bind_ip(Ipv4Addr::UNSPECIFIED.into());
    let call = tokio::spawn(async move { send_vote(&mut network, 1, &addr).await });
    let (_stream, peer) = tokio::time::timeout(PATIENCE, listener.accept())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(peer.ip(), IpAddr::from(Ipv4Addr::LOCALHOST));
    call.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_recorded_per_peer_and_age() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let config = Arc::new(default_config(CLUSTER));
    let node = TestNode::start(1, &root.path().join("n1"), listener().await, config).await;

    let mut network = Network::new(CLUSTER.into(), 9);
    let contacts = network.contacts();
    assert!(contacts.millis_since().is_empty());

    // A peer that is not listening: no contact recorded.
    let dead = listener().await;
    let dead_addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    send_vote(&mut network, 7, &dead_addr).await;
    assert!(contacts.millis_since().is_empty());

    // A real node answers (with a Raft-level refusal: node 9 is not a
    // member); that still counts as contact, seen through the clone.
    send_vote(&mut network, 1, &node.addr).await;
    let seen = contacts.clone().millis_since();
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        vec![1],
        "{seen:?}"
    );
    assert!(seen[&1] < 1_000, "{seen:?}");

    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = contacts.millis_since()[&1];
    assert!(later >= 300, "{later}");

    // A fresh answer resets the age; the network keeps recording after
    // being moved elsewhere (as into Raft).
    let started = Instant::now();
    let mut moved = network;
    send_vote(&mut moved, 1, &node.addr).await;
    assert!(contacts.millis_since()[&1] <= started.elapsed().as_millis() as u64);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_running_cluster_records_contact_with_every_peer() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let config = Arc::new(default_config(CLUSTER));
    let nodes = start_cluster(root.path(), config).await;
    let leader = wait_leader(&nodes).await;
    let leader = &nodes[leader as usize - 1];
    let deadline = Instant::now() + PATIENCE;
    loop {
        let seen = leader.contacts.millis_since();
        let peers: Vec<u64> = seen.keys().copied().collect();
        let expected: Vec<u64> = nodes
            .iter()
            .map(|n| n.id)
            .filter(|id| *id != leader.id)
            .collect();
        // Heartbeats every 100 ms keep every peer's age small.
        if peers == expected && seen.values().all(|ms| *ms < 1_000) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "leader {} saw {seen:?}",
            leader.id
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for n in nodes {
        n.stop().await;
    }
}

/// A peer in front of a real Raft service that counts the append streams
/// asked of it, and with `refuse_streams` plays an older version without
/// `AppendStream`.
struct TestPeer {
    inner: keel_raft::RaftGrpcService,
    /// How often a stream was asked for (and, refusing, refused).
    streams: Arc<std::sync::atomic::AtomicUsize>,
    refuse_streams: bool,
}

#[tonic::async_trait]
impl keel_proto::pb::raft_service_server::RaftService for TestPeer {
    type AppendStreamStream =
        <keel_raft::RaftGrpcService as keel_proto::pb::raft_service_server::RaftService>::AppendStreamStream;

    async fn append(
        &self,
        r: tonic::Request<keel_proto::pb::RaftRequest>,
    ) -> Result<tonic::Response<keel_proto::pb::RaftResponse>, tonic::Status> {
        self.inner.append(r).await
    }

    async fn append_stream(
        &self,
        r: tonic::Request<tonic::Streaming<keel_proto::pb::RaftRequest>>,
    ) -> Result<tonic::Response<Self::AppendStreamStream>, tonic::Status> {
        self.streams
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.refuse_streams {
            return Err(tonic::Status::unimplemented("not in this version"));
        }
        self.inner.append_stream(r).await
    }

    async fn vote(
        &self,
        r: tonic::Request<keel_proto::pb::RaftRequest>,
    ) -> Result<tonic::Response<keel_proto::pb::RaftResponse>, tonic::Status> {
        self.inner.vote(r).await
    }

    async fn install_snapshot(
        &self,
        r: tonic::Request<keel_proto::pb::RaftRequest>,
    ) -> Result<tonic::Response<keel_proto::pb::RaftResponse>, tonic::Status> {
        self.inner.install_snapshot(r).await
    }

    async fn pre_vote(
        &self,
        r: tonic::Request<keel_proto::pb::RaftRequest>,
    ) -> Result<tonic::Response<keel_proto::pb::RaftResponse>, tonic::Status> {
        self.inner.pre_vote(r).await
    }

    async fn lease(
        &self,
        r: tonic::Request<keel_proto::pb::RaftRequest>,
    ) -> Result<tonic::Response<keel_proto::pb::RaftResponse>, tonic::Status> {
        self.inner.lease(r).await
    }
}

/// Serves `node`'s Raft again behind a [`TestPeer`] on a fresh loopback
/// port; returns its address, the server task and the count of append
/// streams asked of it.
async fn serve_peer(
    node: &TestNode,
    refuse_streams: bool,
) -> (
    String,
    tokio::task::JoinHandle<()>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    let streams = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let peer = TestPeer {
        inner: keel_raft::RaftGrpcService::new(node.raft.clone(), CLUSTER.into()),
        streams: streams.clone(),
        refuse_streams,
    };
    let l = listener().await;
    let addr = l.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(
                keel_proto::pb::raft_service_server::RaftServiceServer::new(peer)
                    .max_decoding_message_size(64 << 20),
            )
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(l))
            .await;
    });
    (addr, server, streams)
}

/// An empty append from node 9 in term 1.
fn heartbeat() -> openraft::raft::AppendEntriesRequest<keel_raft::TypeConfig> {
    openraft::raft::AppendEntriesRequest {
        vote: Vote::new_committed(1, 9),
        prev_log_id: None,
        entries: vec![],
        leader_commit: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_stream_to_current_peers_and_fall_back_to_unary_calls_for_older_ones() {
    let root = tempfile::tempdir().unwrap();
    let node = start_single(root.path()).await;

    // The same Raft behind an older server on a second port.
    let (legacy_addr, server, refused) = serve_peer(&node, true).await;

    let option = || RPCOption::new(Duration::from_secs(5));
    let mut network = Network::new(CLUSTER.into(), 9);
    // Current peer: several appends over one client's stream.
    let mut current = network.new_client(1, &KeelNode::new(&node.addr)).await;
    for round in 0..3 {
        let r = current.append_entries(heartbeat(), option()).await;
        assert!(r.is_ok(), "current peer, round {round}: {r:?}");
    }
    // Older peer (node 1's Raft again, so addressed as node 1, from a
    // network of its own): every client's append is answered; only the
    // first client asked for a stream, later ones know the peer is
    // unary-only.
    let mut legacy = Network::new(CLUSTER.into(), 9);
    for round in 0..3 {
        let mut client = legacy.new_client(1, &KeelNode::new(&legacy_addr)).await;
        let r = client.append_entries(heartbeat(), option()).await;
        assert!(r.is_ok(), "older peer, round {round}: {r:?}");
        let r = client.append_entries(heartbeat(), option()).await;
        assert!(r.is_ok(), "older peer, round {round}, again: {r:?}");
    }
    assert_eq!(refused.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Dropping the client ends its stream, so the server stops promptly.
    drop(current);
    server.abort();
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_carried_a_catch_up_is_replaced_by_a_fresh_one() {
    use keel_metadata::{MetadataRecord, RecordBatch, TopicId};
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};

    let root = tempfile::tempdir().unwrap();
    let node = start_single(root.path()).await;
    let (addr, server, opened) = serve_peer(&node, false).await;
    let option = || RPCOption::new(Duration::from_secs(10));
    let count = || opened.load(std::sync::atomic::Ordering::SeqCst);
    let mut network = Network::new(CLUSTER.into(), 9);
    let mut client = network.new_client(1, &KeelNode::new(&addr)).await;

    // Small appends share one stream.
    for _ in 0..3 {
        let r = client.append_entries(heartbeat(), option()).await;
        assert!(r.is_ok(), "{r:?}");
    }
    assert_eq!(count(), 1);

    // A ~5 MiB append (answered: this node refuses the stale leader) is
    // followed by a fresh stream.
    let records = (0..50)
        .map(|i| MetadataRecord::TopicConfig {
            topic_id: TopicId(1),
            key: format!("k{i}"),
            value: Some("x".repeat(100 << 10)),
        })
        .collect();
    let mut big = heartbeat();
    big.entries = vec![Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 9), 0),
        payload: EntryPayload::Normal(RecordBatch::new(records)),
    }];
    let r = client.append_entries(big, option()).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(count(), 1, "the large append went on the open stream");
    for _ in 0..3 {
        let r = client.append_entries(heartbeat(), option()).await;
        assert!(r.is_ok(), "{r:?}");
    }
    assert_eq!(count(), 2, "one fresh stream after the large append");

    drop(client);
    server.abort();
    node.stop().await;
}
