//! State shared by a controller node's services, its leadership watch and
//! (while active) its event loop.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use keel_metadata::heartbeat::HeartbeatTracker;
use keel_metadata::{ApiError, ErrorCode, MetadataImage};
use keel_proto::convert::not_controller;
use keel_proto::pb;
use keel_raft::{AppliedState, DirectoryId, KeelRaft, PeerContacts};
use openraft::ServerState;
use tokio::sync::{mpsc, oneshot, watch};

use crate::budget::WriteBudget;
use crate::command::{outcome_unknown, resigned, Command, CommandKind, DecideEnv, Proposal};
use crate::config::ControllerConfig;

/// Monotonic milliseconds since the first call in this process: what
/// broker sessions and every timeout of the controller are timed with.
/// Never the wall clock, so an NTP step (or an operator setting the date)
/// neither fences every broker at once nor stops fencing; only ever passed
/// *into* pure code.
pub fn now_ms() -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// How to reach the running event loop, while this node is active.
#[derive(Clone)]
pub struct ActiveHandle {
    /// The controller epoch (Raft term) this activation runs under.
    pub epoch: u64,
    pub(crate) tx: mpsc::Sender<Command>,
}

/// A broker's own report in its last heartbeat.
#[derive(Clone, Debug, Default)]
pub struct BrokerReport {
    /// Its data dir's and log dirs' file systems.
    pub disks: Vec<keel_proto::pb::DiskSpace>,
    /// Its release.
    pub version: String,
}

/// One node's shared state.
pub struct Shared {
    pub config: ControllerConfig,
    pub raft: KeelRaft,
    /// The latest applied image, published by the state machine.
    pub image: watch::Receiver<Arc<AppliedState>>,
    /// `Some` while this node is the active controller.
    pub active: RwLock<Option<ActiveHandle>>,
    /// Broker sessions: soft state, meaningful only on the active controller.
    pub heartbeats: Mutex<HeartbeatTracker>,
    /// When each Raft peer last answered this node's RPCs.
    peer_contacts: PeerContacts,
    /// Bytes of admin writes being answered at once, over all connections.
    pub write_budget: WriteBudget,
    /// This node's data dir's directory id.
    pub directory_id: DirectoryId,
    /// `config.super_users`, shared with decision closures.
    pub super_users: Arc<crate::authz::SuperUsers>,
    /// Admin requests served at once and linearizable reads per second.
    pub throttle: crate::throttle::Throttle,
    /// The data dir's free space, as last measured.
    pub disk: Arc<crate::disk::DiskWatch>,
    /// What each broker's last heartbeat (of its current epoch) reported
    /// about itself: soft state, like the sessions.
    pub broker_reports: Mutex<std::collections::BTreeMap<keel_metadata::BrokerId, BrokerReport>>,
    /// The last controller events this node saw, for the web console.
    pub events: crate::events::Events,
    /// This node's Kafka listener as bound (set once, at start; unset
    /// without `--kafka-listen`), for DescribeNode.
    pub kafka_address: std::sync::OnceLock<std::net::SocketAddr>,
    /// The open connections of every listener of this node, and their
    /// limits (`keel_tls::admission`).
    pub gate: Arc<keel_tls::admission::Gate>,
}

impl Shared {
    pub fn new(
        config: ControllerConfig,
        raft: KeelRaft,
        image: watch::Receiver<Arc<AppliedState>>,
        peer_contacts: PeerContacts,
        directory_id: DirectoryId,
    ) -> Self {
        let heartbeats = Mutex::new(HeartbeatTracker::new(config.session_timeout_ms));
        let write_budget = WriteBudget::new(config.write_budget_bytes);
        let super_users = Arc::new(crate::authz::SuperUsers {
            principals: config.super_users.clone(),
            via_brokers: config.super_users_via_brokers,
        });
        let throttle = crate::throttle::Throttle::new(
            config.max_concurrent_admin_requests,
            config.max_linearizable_reads_per_sec,
        );
        let gate = keel_tls::admission::Gate::new(config.connections.clone());
        Self {
            gate,
            disk: Arc::default(),
            broker_reports: Mutex::default(),
            events: Default::default(),
            kafka_address: std::sync::OnceLock::new(),
            throttle,
            super_users,
            config,
            raft,
            image,
            active: RwLock::new(None),
            heartbeats,
            peer_contacts,
            write_budget,
            directory_id,
        }
    }

    /// Whether `ip` is the address of one of the cluster's own nodes: a
    /// voter of the configuration or of the applied membership, or a
    /// registered broker. Addresses given as host names are not matched.
    pub fn is_member_address(&self, ip: std::net::IpAddr) -> bool {
        let is = |addr: &str| {
            addr.parse::<std::net::SocketAddr>()
                .is_ok_and(|a| a.ip() == ip)
        };
        if self.config.voters.iter().any(|(_, a)| is(a)) {
            return true;
        }
        let applied = self.applied();
        applied
            .membership
            .membership()
            .nodes()
            .any(|(_, node)| is(&node.addr))
            || applied.image.brokers().any(|b| is(&b.address))
    }

    /// The applied state as of now (O(1) clone of an `Arc`).
    pub fn applied(&self) -> Arc<AppliedState> {
        self.image.borrow().clone()
    }

    /// The latest applied image.
    pub fn image(&self) -> MetadataImage {
        self.image.borrow().image.clone()
    }

    /// Milliseconds since each peer last answered a Raft RPC of ours.
    pub fn peer_contacts(&self) -> BTreeMap<u64, u64> {
        self.peer_contacts.millis_since()
    }

    /// The directory id each peer's last Raft answer carried.
    pub fn peer_directories(&self) -> BTreeMap<u64, DirectoryId> {
        self.peer_contacts.directories()
    }

    /// The active controller's id and address, as far as this node can
    /// tell, for a NOT_CONTROLLER answer; `None` rather than a node that is
    /// not it.
    ///
    /// This node itself only while it runs the active role with a valid
    /// lease: a leader cut off from its majority, or one that stepped down
    /// for want of a quorum (openraft keeps its own committed vote, so it
    /// still names itself as leader), must not send clients back to itself.
    /// Another node only while this node follows it as committed leader,
    /// and that leader is this node's current Raft leader.
    pub fn leader_hint(&self) -> Option<(u64, String)> {
        let m = self.raft.metrics().borrow().clone();
        let leader = m.current_leader?;
        if leader == self.config.node_id {
            let active = self.active.read().map(|g| g.is_some()).unwrap_or(false);
            if !active || !self.lease_valid() {
                return None;
            }
        } else if m.state != ServerState::Follower && m.state != ServerState::Learner {
            // A candidate (or a leader that does not name itself) knows no
            // live leader.
            return None;
        }
        let node = m.membership_config.membership().get_node(&leader)?;
        Some((leader, node.addr.clone()))
    }

    pub fn not_controller(&self) -> pb::Error {
        not_controller(self.leader_hint())
    }

    /// Milliseconds since a quorum last acknowledged this node as leader,
    /// measured now; `None` when it is not the leader or no quorum
    /// acknowledged it yet in its term (a leader restored from its own
    /// stored vote after a restart has not been acknowledged).
    ///
    /// Computed from the moment of the acknowledgement that openraft
    /// reports (`last_quorum_acked`, a field of Keel's patched openraft),
    /// not from `millis_since_quorum_ack`: that one is computed when the
    /// Raft core last ran, and after a pause (SIGSTOP/SIGCONT) or a stalled
    /// core it is as old as the pause, and a deposed leader would pass the
    /// lease with it.
    pub fn quorum_ack_age_ms(&self) -> Option<u64> {
        let (state, leader, acked) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            (m.state, m.current_leader, m.last_quorum_acked)
        };
        if state != ServerState::Leader || leader != Some(self.config.node_id) {
            return None;
        }
        acked.map(|t| u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX))
    }

    /// True while this node is leader and a quorum acknowledged it within
    /// the lease: only then may it act as the active controller.
    pub fn lease_valid(&self) -> bool {
        self.quorum_ack_age_ms()
            .is_some_and(|ms| ms <= self.config.lease_ms())
    }

    /// The active handle, if this node is active and holds its lease.
    pub fn active_handle(&self) -> Result<ActiveHandle, pb::Error> {
        let h = self
            .active
            .read()
            .ok()
            .and_then(|g| g.clone())
            .ok_or_else(|| self.not_controller())?;
        if !self.lease_valid() {
            return Err(self.not_controller());
        }
        Ok(h)
    }

    /// Waits until reads of the image are linearizable (leader confirmed by
    /// a quorum and its state machine caught up), or says who leads.
    pub async fn linearizable(&self) -> Result<(), pb::Error> {
        self.active_handle()?;
        self.throttle
            .read()
            .map_err(|e| keel_proto::convert::error_to_pb(&e))?;
        match self.raft.ensure_linearizable().await {
            Ok(_) => Ok(()),
            Err(_) => Err(self.not_controller()),
        }
    }

    /// Runs `decide` on the event loop against the current image (plus the
    /// loop's earlier decisions in the same batch), proposes its records,
    /// and returns what `finish` makes of the commit outcome.
    pub async fn submit<T, D>(&self, kind: CommandKind, decide: D) -> Result<T, ApiError>
    where
        T: Send + 'static,
        D: FnOnce(&MetadataImage, &mut DecideEnv) -> Proposal<T> + Send + 'static,
    {
        self.submit_as(kind, None, decide).await
    }

    /// [`submit`](Self::submit) for a request of principal `who` (when
    /// known), whom the console's event for the change names.
    pub async fn submit_as<T, D>(
        &self,
        kind: CommandKind,
        who: Option<String>,
        decide: D,
    ) -> Result<T, ApiError>
    where
        T: Send + 'static,
        D: FnOnce(&MetadataImage, &mut DecideEnv) -> Proposal<T> + Send + 'static,
    {
        let handle = self
            .active_handle()
            .map_err(|e| ApiError::new(ErrorCode::NotController, e.message))?;
        if kind.is_admin_write() {
            self.disk.check_write()?;
        }
        let (tx, rx) = oneshot::channel();
        let cmd = Command::new(kind, decide, tx).by(who);
        let proposed = cmd.proposed_flag();
        if handle.tx.send(cmd).await.is_err() {
            return Err(resigned());
        }
        match tokio::time::timeout(Duration::from_secs(30), rx).await {
            Ok(Ok(v)) => v,
            Ok(Err(_)) if proposed.load(std::sync::atomic::Ordering::Acquire) => {
                Err(outcome_unknown())
            }
            Ok(Err(_)) => Err(resigned()),
            Err(_) => Err(ApiError::new(
                ErrorCode::RequestTimedOut,
                "the controller did not commit the change within 30 s",
            )),
        }
    }
}
