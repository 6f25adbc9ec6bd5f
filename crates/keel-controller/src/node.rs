//! A controller node: storage, Raft, the gRPC server (Raft, admin and
//! broker services on one address) and the leadership watch.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use keel_proto::pb::admin_service_server::AdminServiceServer;
use keel_proto::pb::broker_service_server::BrokerServiceServer;
use keel_raft::KeelNode;
use keel_raft::{KeelRaft, Network, RaftGrpcService};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::admin::AdminApi;
use crate::broker_api::BrokerApi;
use crate::config::ControllerConfig;
use crate::shared::Shared;

/// A running controller node.
pub struct ControllerNode {
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    leadership: JoinHandle<()>,
    /// Last: dropped once everything that talks to the core has stopped.
    _core: CoreRuntime,
}

/// The runtime the Raft core (and its replication and state machine
/// tasks, and its connections to the peers) runs on: threads of its own,
/// so that a main runtime with thousands of brokers' heartbeats and
/// channels queued on its workers cannot hold the core up behind them. A
/// core held up long enough stops answering the lease thread's liveness
/// probes (`keel_raft::lease`), and the leader gives up its leadership as
/// if the core were wedged: with every broker then reconnecting to the
/// next leader, one busy active controller became an election a second.
struct CoreRuntime(Option<tokio::runtime::Runtime>);

/// Node `node`'s [`CoreRuntime`], not yet wrapped.
fn core_runtime(node: keel_raft::NodeId) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(format!("keel-raft-{node}"))
        .enable_all()
        .build()
}

impl Drop for CoreRuntime {
    fn drop(&mut self) {
        // Dropped from within the main runtime: do not wait for its tasks.
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// A voter of this cluster that already follows or is a Raft leader (the
/// quorum formed without this node, e.g. it started late), if any answers
/// within a short timeout (the first such answer, without waiting for the
/// other peers). Unreachable peers and peers still electing
/// count as not formed: on a cluster's first start every voter
/// initializes, which is safe, and a quorum can form without any one node.
async fn formed_quorum_peer(config: &ControllerConfig) -> Option<u64> {
    use keel_proto::pb::admin_service_client::AdminServiceClient;
    use keel_proto::pb::DescribeNodeRequest;
    let probes = config
        .voters
        .iter()
        .filter(|(id, _)| *id != config.node_id)
        .map(|(id, addr)| async move {
            let endpoint = keel_tls::transport::endpoint(addr)
                .ok()?
                .connect_timeout(Duration::from_millis(300))
                .timeout(Duration::from_secs(3));
            let channel = config
                .transport
                .connect(endpoint, None, keel_tls::Expect::ControllerId(*id))
                .await
                .ok()?;
            let d = AdminServiceClient::new(channel)
                .describe_node(DescribeNodeRequest {
                    skip_image_hash: true,
                })
                .await
                .ok()?
                .into_inner();
            (d.cluster_id == config.cluster_id && d.leader_id.is_some()).then_some(*id)
        });
    // The first peer that answers "formed" settles it; "not formed" needs
    // every answer (or timeout).
    let mut probes: futures::stream::FuturesUnordered<_> = probes.collect();
    while let Some(answer) = futures::StreamExt::next(&mut probes).await {
        if answer.is_some() {
            return answer;
        }
    }
    None
}

/// The Raft settings of this node, from its config.
fn raft_config(config: &ControllerConfig) -> anyhow::Result<Arc<openraft::Config>> {
    let mut rc = keel_raft::default_config(&config.cluster_id);
    rc.heartbeat_interval = config.raft_heartbeat_ms;
    rc.election_timeout_min = config.election_timeout_min_ms;
    rc.election_timeout_max = config.election_timeout_max_ms;
    rc.snapshot_policy = openraft::SnapshotPolicy::LogsSinceLast(config.snapshot_interval_entries);
    Ok(Arc::new(rc.validate().context("invalid raft settings")?))
}

/// The Raft service peers call, under this node's advertised address; a
/// `restarted` node refuses votes until a lease it may have granted
/// before has run out.
fn raft_grpc_service(
    config: &ControllerConfig,
    raft: &KeelRaft,
    directory_id: keel_raft::DirectoryId,
    lease_clock: keel_raft::LeaseClock,
    restarted: bool,
) -> RaftGrpcService {
    let advertised = config
        .voters
        .iter()
        .find(|(id, _)| *id == config.node_id)
        .map_or_else(|| config.listen.to_string(), |(_, addr)| addr.clone());
    let mut raft_service = RaftGrpcService::new(raft.clone(), config.cluster_id.clone())
        .with_directory(directory_id)
        .with_address(advertised)
        .with_lease_clock(lease_clock);
    if restarted {
        raft_service =
            raft_service.refusing_votes_for(Duration::from_millis(config.election_timeout_max_ms));
    }
    raft_service
}

/// Serves the Raft, admin and broker services on `listener` until
/// `shutdown_rx` turns true; the Raft service also on the listener's lane
/// ([`keel_tls::lane`]), a thread of its own where the leader's lease
/// requests and candidates' pre-votes are answered whatever this runtime
/// is busy with.
fn spawn_server(
    config: &ControllerConfig,
    shared: &Arc<Shared>,
    raft_service: RaftGrpcService,
    listener: tokio::net::TcpListener,
    shutdown_rx: watch::Receiver<bool>,
) -> anyhow::Result<JoinHandle<Result<(), tonic::transport::Error>>> {
    let builder = || {
        tonic::transport::Server::builder()
            .max_concurrent_streams(config.max_concurrent_streams)
            .timeout(Duration::from_millis(config.request_timeout_ms))
            .http2_keepalive_interval(Some(keel_tls::transport::HTTP2_KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(keel_tls::transport::HTTP2_KEEPALIVE_TIMEOUT))
    };
    let lane_router = builder().add_service(raft_service.clone().into_server());
    let router = builder()
        .add_service(raft_service.into_server())
        .add_service(
            AdminServiceServer::new(AdminApi::new(shared.clone()))
                .max_decoding_message_size(config.max_message_bytes),
        )
        .add_service(
            BrokerServiceServer::new(BrokerApi::new(shared.clone()))
                .max_decoding_message_size(config.max_message_bytes),
        );
    let door = keel_tls::admission::Door::new(&shared.gate, "grpc");
    // The transport accepts without Nagle: Raft and controller RPCs
    // are small and latency-bound.
    config
        .transport
        .serve_with_lane(
            router,
            lane_router,
            listener,
            door,
            format!("keel-lane-{}", config.node_id),
            shutdown_rx,
        )
        .context("cannot start the Raft listener's lane")
}

/// On a fresh node (not joining, nothing on disk), initializes the quorum
/// membership, unless a peer already belongs to a formed quorum.
async fn bootstrap(config: &ControllerConfig, raft: &KeelRaft, restarted: bool) {
    let fresh = !config.join && !restarted;
    let formed = if fresh {
        formed_quorum_peer(config).await
    } else {
        None
    };
    if let Some(peer) = formed {
        // Initializing now would make this node a term-1 candidate
        // that deposes the quorum's leader; the leader will replicate
        // the membership (which names this node) instead.
        tracing::info!(
            node = config.node_id,
            peer,
            "a peer already belongs to a formed quorum; waiting for its leader instead of initializing"
        );
    } else if fresh {
        let members: BTreeMap<u64, KeelNode> = config
            .voters
            .iter()
            .map(|(id, addr)| (*id, KeelNode::new(addr.clone())))
            .collect();
        // Every voter does this on its first start with the same set:
        // the identical initial membership makes it safe, and the quorum
        // forms as soon as a majority is up. No directory id is known
        // yet (each voter knows only its own): the active controller
        // binds them once the voters answer it (keel_raft::KeelNode).
        match raft.initialize(members).await {
            Ok(()) => tracing::info!(node = config.node_id, "initialized quorum membership"),
            Err(e) => {
                tracing::info!(node = config.node_id, reason = %e, "membership already set by a peer")
            }
        }
    }
}

/// Serves Kafka clients on `addr`, from the quorum's image.
async fn start_kafka_listener(
    config: &ControllerConfig,
    shared: &Arc<Shared>,
    addr: std::net::SocketAddr,
    shutdown_rx: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let l = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (Kafka listener)"))?;
    let kafka_address = l.local_addr().unwrap_or(addr);
    let _ = shared.kafka_address.set(kafka_address);
    // One trust for both doors: the node's own TLS, or plaintext
    // where the node speaks plaintext (`--allow-plaintext`).
    let security = match &config.transport {
        keel_tls::Transport::Plaintext => keel_kafka::server::Security::Plaintext,
        keel_tls::Transport::Tls(ctx) => keel_kafka::server::Security::tls(
            ctx.clone(),
            config.kafka_client_auth,
            config.kafka_sasl_plain,
        ),
    };
    let views = Arc::new(crate::kafka_listener::QuorumViews {
        shared: shared.clone(),
        kafka_address,
        access: std::sync::Mutex::new(None),
    });
    tokio::spawn(keel_kafka::serve(
        l,
        views,
        keel_kafka::ListenerConfig {
            security,
            idle_timeout: Duration::from_millis(config.kafka_connections_max_idle_ms),
            admission: keel_tls::admission::Door::new(&shared.gate, "kafka"),
            ..keel_kafka::ListenerConfig::default()
        },
        shutdown_rx,
    ));
    Ok(())
}

impl ControllerNode {
    /// Opens (or formats) the data dir, starts Raft and the server, and
    /// bootstraps the quorum on a first start.
    pub async fn start(config: ControllerConfig) -> anyhow::Result<Self> {
        // Timed: on a disk that hangs, the first look at the dir hangs.
        let opening = keel_raft::stall::timed(keel_raft::stall::StorageOp::Open);
        std::fs::create_dir_all(&config.data_dir)
            .with_context(|| format!("cannot create data dir {}", config.data_dir.display()))?;
        let (log, sm) =
            keel_raft::open_storage(&config.data_dir, &config.cluster_id, config.node_id)?;
        drop(opening);
        let image = sm.subscribe();
        let directory_id = log.directory_id();
        tracing::info!(node = config.node_id, %directory_id, "data dir opened");
        let rc = raft_config(&config)?;
        let network = Network::new(config.cluster_id.clone(), config.node_id)
            .with_bind_ip(config.listen.ip())
            .with_directory(directory_id)
            .with_transport(config.transport.clone());
        let peer_contacts = network.contacts();
        let lease_clock = network.lease_clock();
        // The election watchdog asks for pre-votes through the same
        // connections.
        let watchdog_network = network.clone();
        let core = core_runtime(config.node_id).context("cannot start the Raft runtime")?;
        let node_id = config.node_id;
        let started = core
            .spawn(async move { openraft::Raft::new(node_id, rc, network, log, sm).await })
            .await;
        let core = CoreRuntime(Some(core));
        let raft: KeelRaft = started
            .context("the Raft runtime failed")?
            .context("raft failed to start")?;
        // A data dir that holds a vote or a log may have promised a leader a
        // lease before this process started: no vote until it has run out.
        let restarted = raft.is_initialized().await.context("raft stopped")?;
        let raft_service = raft_grpc_service(&config, &raft, directory_id, lease_clock, restarted);

        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let shared = Arc::new(Shared::new(
            config.clone(),
            raft.clone(),
            image,
            peer_contacts,
            directory_id,
        ));
        let members = Arc::downgrade(&shared);
        shared.gate.set_members(Arc::new(move |ip| {
            members
                .upgrade()
                .is_some_and(|shared| shared.is_member_address(ip))
        }));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let server = spawn_server(
            &config,
            &shared,
            raft_service,
            listener,
            shutdown_rx.clone(),
        )?;

        bootstrap(&config, &raft, restarted).await;

        tokio::spawn(crate::disk::watch_disk(
            config.data_dir.clone(),
            config.disk_reserve_bytes,
            shared.disk.clone(),
            shutdown_rx.clone(),
        ));
        tokio::spawn(keel_raft::election_watchdog(
            raft.clone(),
            watchdog_network,
            config.node_id,
            shutdown_rx.clone(),
        ));
        if let Some(addr) = config.kafka_listen {
            start_kafka_listener(&config, &shared, addr, shutdown_rx.clone()).await?;
        }
        let leadership = tokio::spawn(crate::leadership::watch_leadership(
            shared.clone(),
            shutdown_rx,
        ));
        tracing::info!(node = config.node_id, listen = %config.listen, cluster = %config.cluster_id, transport = %config.transport, "controller started");
        Ok(Self {
            shared,
            shutdown,
            server,
            leadership,
            _core: core,
        })
    }

    pub fn raft(&self) -> &KeelRaft {
        &self.shared.raft
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// True while this node runs the active-controller role.
    pub fn is_active(&self) -> bool {
        self.shared
            .active
            .read()
            .map(|g| g.is_some())
            .unwrap_or(false)
    }

    /// Stops the server, the active role and Raft.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let _ = self.shutdown.send(true);
        let _ = self.leadership.await;
        let _ = self.shared.raft.shutdown().await;
        self.server.abort();
        let _ = self.server.await;
        Ok(())
    }
}
