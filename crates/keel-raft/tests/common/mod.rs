//! An in-process controller quorum: real Raft nodes, real sled dirs and real
//! tonic servers on 127.0.0.1.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use keel_metadata::{MetadataRecord, RecordBatch, TopicId, TopicRecord};
use keel_raft::{
    open_storage, AppliedState, KeelNode, KeelRaft, Network, PeerContacts, RaftGrpcService,
    StorageOpenError,
};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{Config, ServerState};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Cluster id every test node uses.
pub const CLUSTER: &str = "keel-test";

/// Generous bound for anything the cluster must eventually do.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// One running node.
pub struct TestNode {
    /// Raft node id.
    pub id: u64,
    /// `host:port` the node serves on (kept across restarts: it is in the
    /// membership).
    pub addr: String,
    /// The node's data dir.
    pub dir: PathBuf,
    /// The running Raft.
    pub raft: KeelRaft,
    /// A handle on the node's log store (shared with its Raft).
    pub log: keel_raft::LogStore,
    /// Latest applied state, as the controller would read it.
    pub state: watch::Receiver<Arc<AppliedState>>,
    /// State right after `Raft::new`: what the node recovered from disk.
    pub recovered: Arc<AppliedState>,
    /// When each peer last answered this node's RPCs.
    pub contacts: PeerContacts,
    /// Milliseconds the node waits before answering a lease request.
    pub lease_answer_delay_ms: Arc<AtomicU64>,
    /// The tonic server task.
    server: JoinHandle<()>,
    /// Triggers the server's graceful shutdown.
    stop_server: Option<watch::Sender<bool>>,
    /// Stops the election watchdog.
    stop_watchdog: watch::Sender<bool>,
}

/// Test logs at `RUST_LOG` (default: warnings).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

/// One node (id 1, default config) with its data under `root`; not part
/// of any quorum yet. Also sets up test logging.
pub async fn start_single(root: &Path) -> TestNode {
    init_tracing();
    let config = Arc::new(keel_raft::default_config(CLUSTER));
    TestNode::start(1, &root.join("n1"), listener().await, config).await
}

/// Reserves a listener on a free port of 127.0.0.1.
pub async fn listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.unwrap()
}

/// Binds `addr` again after a restart (the old socket may linger briefly).
pub async fn rebind(addr: &str) -> TcpListener {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(e) if Instant::now() < deadline => {
                tracing::info!(addr, error = %e, "rebinding");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("cannot rebind {addr}: {e}"),
        }
    }
}

/// Opens the node's storage, waiting while a previous incarnation in this
/// process still holds the sled lock.
async fn open_when_free(
    dir: &Path,
    id: u64,
) -> (keel_raft::LogStore, keel_raft::StateMachineStore) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match open_storage(dir, CLUSTER, id) {
            Ok(stores) => return stores,
            Err(StorageOpenError::Io { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("open node {id}: {e}"),
        }
    }
}

impl TestNode {
    /// Starts node `id` on `listener` with its data in `dir`.
    pub async fn start(id: u64, dir: &Path, listener: TcpListener, config: Arc<Config>) -> Self {
        Self::start_with(id, dir, listener, config, None).await
    }

    /// As [`TestNode::start`]; with `no_vote_for`, the node refuses votes
    /// for that long (as a controller restarted on a used data dir does).
    pub async fn start_with(
        id: u64,
        dir: &Path,
        listener: TcpListener,
        config: Arc<Config>,
        no_vote_for: Option<Duration>,
    ) -> Self {
        let addr = listener.local_addr().unwrap().to_string();
        let (log, sm) = open_when_free(dir, id).await;
        let state = sm.subscribe();
        let network = Network::new(CLUSTER.into(), id)
            .with_bind_ip(listener.local_addr().unwrap().ip())
            .with_directory(log.directory_id());
        let contacts = network.contacts();
        let lease_clock = network.lease_clock();
        let lease_answer_delay_ms = Arc::new(AtomicU64::new(0));
        let watchdog_network = network.clone();
        let raft = KeelRaft::new(id, config, network, log.clone(), sm)
            .await
            .unwrap();
        let recovered = state.borrow().clone();
        let (stop_tx, stop_rx) = watch::channel(false);
        // Elections come only from the watchdog, as in a controller.
        let (stop_watchdog, watchdog_stop) = watch::channel(false);
        tokio::spawn(keel_raft::election_watchdog(
            raft.clone(),
            watchdog_network,
            id,
            watchdog_stop,
        ));
        let mut service = RaftGrpcService::new(raft.clone(), CLUSTER.into())
            .with_directory(log.directory_id())
            .with_lease_clock(lease_clock)
            .with_lease_answer_delay(lease_answer_delay_ms.clone());
        if let Some(window) = no_vote_for {
            service = service.refusing_votes_for(window);
        }
        // Served as a controller serves it: lease requests and pre-votes
        // on the listener's lane (keel_tls::lane).
        let lane_router =
            tonic::transport::Server::builder().add_service(service.clone().into_server());
        let router = tonic::transport::Server::builder().add_service(service.into_server());
        let serving = keel_tls::Transport::Plaintext
            .serve_with_lane(
                router,
                lane_router,
                listener,
                keel_tls::admission::Door::unlimited("grpc"),
                format!("test-lane-{id}"),
                stop_rx,
            )
            .unwrap();
        let server = tokio::spawn(async move {
            match serving.await {
                Ok(Err(e)) => tracing::warn!(error = %e, "raft server ended"),
                Err(e) => tracing::warn!(error = %e, "raft server task ended"),
                Ok(Ok(())) => {}
            }
        });
        Self {
            id,
            addr,
            dir: dir.to_path_buf(),
            raft,
            log,
            state,
            recovered,
            contacts,
            lease_answer_delay_ms,
            server,
            stop_server: Some(stop_tx),
            stop_watchdog,
        }
    }

    /// Stops the server only (Raft and the watchdog keep running): to its
    /// peers the node is unreachable, as behind a partition.
    pub async fn cut_off(&mut self) {
        if let Some(tx) = self.stop_server.take() {
            let _ = tx.send(true);
        }
        // Graceful shutdown waits for peers' connections to close; do not
        // let a peer that keeps one open stall the test.
        if tokio::time::timeout(Duration::from_secs(5), &mut self.server)
            .await
            .is_err()
        {
            self.server.abort();
        }
    }

    /// Restarts a stopped node on its old address and data dir.
    pub async fn restart(id: u64, dir: &Path, addr: &str, config: Arc<Config>) -> Self {
        let listener = rebind(addr).await;
        Self::start(id, dir, listener, config).await
    }

    /// Stops Raft and the server and waits until the data dir is released.
    pub async fn stop(mut self) -> (u64, PathBuf, String) {
        let _ = self.stop_watchdog.send(true);
        self.raft.shutdown().await.unwrap();
        self.cut_off().await;
        (self.id, self.dir, self.addr)
    }

    /// The node's latest applied state.
    pub fn applied(&self) -> Arc<AppliedState> {
        self.state.borrow().clone()
    }

    /// Blocks until the node applied `index`.
    pub async fn wait_applied(&self, index: u64) {
        self.raft
            .wait(Some(PATIENCE))
            .applied_index_at_least(Some(index), "applied")
            .await
            .unwrap_or_else(|e| panic!("node {} did not apply {index}: {e}", self.id));
    }
}

/// A cluster of three nodes with dirs under `root`.
pub async fn start_cluster(root: &Path, config: Arc<Config>) -> Vec<TestNode> {
    let mut listeners = Vec::new();
    for _ in 0..3 {
        listeners.push(listener().await);
    }
    let members: BTreeMap<u64, KeelNode> = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| {
            (
                i as u64 + 1,
                KeelNode::new(l.local_addr().unwrap().to_string()),
            )
        })
        .collect();
    let mut nodes = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let id = i as u64 + 1;
        nodes.push(TestNode::start(id, &root.join(format!("n{id}")), l, config.clone()).await);
    }
    nodes[0].raft.initialize(members).await.unwrap();
    nodes
}

/// The id of the node every running node agrees leads.
pub async fn wait_leader(nodes: &[TestNode]) -> u64 {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let leaders: Vec<Option<u64>> = nodes
            .iter()
            .map(|n| n.raft.metrics().borrow().current_leader)
            .collect();
        if let Some(Some(l)) = leaders.first() {
            // The leader itself must lead: one that stepped down for want
            // of a quorum still names itself (its committed vote).
            let leads = nodes
                .iter()
                .any(|n| n.id == *l && n.raft.metrics().borrow().state == ServerState::Leader);
            if leaders.iter().all(|x| *x == Some(*l)) && leads {
                return *l;
            }
        }
        assert!(Instant::now() < deadline, "no leader: {leaders:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One entry creating a topic with a unique id and name.
pub fn topic_batch(n: u64) -> RecordBatch {
    RecordBatch::new(vec![MetadataRecord::Topic(TopicRecord {
        topic_id: TopicId(u128::from(n) + 1),
        name: format!("topic-{n}"),
        configs: Default::default(),
    })])
}

/// Writes batches `range` through `leader` with `concurrency` writes in
/// flight; returns the highest log index written.
pub async fn write_batches(
    leader: &KeelRaft,
    range: std::ops::Range<u64>,
    concurrency: usize,
) -> u64 {
    let results = futures::stream::iter(range)
        .map(|n| {
            let raft = leader.clone();
            async move {
                let res: Result<_, RaftError<u64, ClientWriteError<u64, KeelNode>>> =
                    raft.client_write(topic_batch(n)).await;
                res.map(|r| r.log_id.index)
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await;
    let mut max = 0;
    for r in results {
        max = max.max(r.expect("write through the leader"));
    }
    max
}

/// Every node applied `index` and holds the same image; returns its hash.
pub async fn assert_converged(nodes: &[TestNode], index: u64) -> String {
    for n in nodes {
        n.wait_applied(index).await;
    }
    // Applied index can run ahead of `index` by a blank entry; wait until
    // all nodes agree on the same last applied entry.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let states: Vec<Arc<AppliedState>> = nodes.iter().map(|n| n.applied()).collect();
        let hashes: Vec<String> = states.iter().map(|s| s.image.hash()).collect();
        if hashes.iter().all(|h| *h == hashes[0])
            && states
                .iter()
                .all(|s| s.last_applied == states[0].last_applied)
        {
            for s in &states {
                s.image.validate().unwrap();
            }
            return hashes[0].clone();
        }
        assert!(Instant::now() < deadline, "images differ: {hashes:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
