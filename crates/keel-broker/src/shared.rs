//! State shared by the broker's tasks and gRPC handlers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keel_metadata::{BrokerId, IncarnationId};
use keel_proto::pb::broker_service_client::BrokerServiceClient;
use keel_proto::pb::replica_service_client::ReplicaServiceClient;
use tokio::sync::{watch, Notify};
use tokio::time::{Interval, MissedTickBehavior};
use tonic::transport::Channel;

use crate::controller_link::ControllerLink;
use crate::data_dir::DataDir;
use crate::net::Dialer;
use crate::state::BrokerState;
use crate::BrokerConfig;

/// Everything the tasks share. Locks are std mutexes, never held across
/// an `.await`.
pub(crate) struct Shared {
    pub config: BrokerConfig,
    pub id: BrokerId,
    /// The bound listen address: what the controller is told.
    pub address: SocketAddr,
    /// The bound Kafka listener, if any: registered with the controller.
    pub kafka_address: Option<SocketAddr>,
    pub incarnation: IncarnationId,
    /// One lock for the whole broker state: see [`BrokerState`] for why.
    pub state: Mutex<BrokerState>,
    pub data_dir: Mutex<DataDir>,
    pub link: Mutex<ControllerLink>,
    pub dialer: Mutex<Dialer>,
    /// Set for a controlled shutdown: heartbeats ask to shut down.
    pub want_shutdown: AtomicBool,
    /// Wakes the heartbeat loop early (controlled shutdown started).
    pub poke: Notify,
    /// Flips to true when the controller answers should_shut_down.
    pub shutdown_allowed: watch::Sender<bool>,
    /// Who may do what, for the Kafka listener (see [`crate::access`]).
    pub access: crate::access::AccessCache,
    /// The session timeout in force: the controllers' (sent at
    /// registration), or `--session-timeout-ms` until one says.
    pub session_timeout_ms: AtomicU64,
}

impl Shared {
    pub(crate) fn state(&self) -> MutexGuard<'_, BrokerState> {
        lock(&self.state)
    }

    /// How long the session lasts without an answered heartbeat.
    pub(crate) fn session_timeout_ms(&self) -> u64 {
        self.session_timeout_ms.load(Ordering::Relaxed)
    }

    /// Takes the controllers' session timeout from a registration answer
    /// (0: they did not say; ours stays). The controllers fence a silent
    /// broker after their timeout, so a longer one of ours would let it
    /// lead on beside its successor.
    pub(crate) fn adopt_session_timeout(&self, controllers_ms: u64) {
        if controllers_ms == 0 {
            return;
        }
        let before = self
            .session_timeout_ms
            .swap(controllers_ms, Ordering::Relaxed);
        if before != controllers_ms {
            tracing::info!(
                own_ms = self.config.session_timeout_ms,
                controllers_ms,
                "session timeout set by the controllers"
            );
        }
        if controllers_ms <= self.config.heartbeat_interval_ms {
            tracing::warn!(
                controllers_ms,
                heartbeat_interval_ms = self.config.heartbeat_interval_ms,
                "the controllers' session timeout is not longer than the heartbeat interval; the session will be lost between heartbeats"
            );
        }
    }

    /// Whether `ip` is the address of one of the cluster's own nodes: a
    /// controller of `--controllers`, or a broker of the metadata cache.
    /// Addresses given as host names are not matched.
    pub(crate) fn is_member_address(&self, ip: std::net::IpAddr) -> bool {
        let is = |addr: &str| addr.parse::<SocketAddr>().is_ok_and(|a| a.ip() == ip);
        self.config.controllers.iter().any(|a| is(a))
            || self.state().metadata().brokers().any(|b| is(&b.address))
    }

    /// A client for the controller currently believed active, and its address.
    pub(crate) fn controller(&self) -> (String, Option<BrokerServiceClient<Channel>>) {
        let addr = lock(&self.link).current();
        let ch = lock(&self.dialer).channel(&addr, keel_tls::Expect::Controller);
        (addr, ch.map(BrokerServiceClient::new))
    }

    /// A client for the replica service of `leader` at `addr`.
    pub(crate) fn replica_client(
        &self,
        leader: BrokerId,
        addr: &str,
    ) -> Option<ReplicaServiceClient<Channel>> {
        lock(&self.dialer)
            .channel(addr, keel_tls::Expect::Broker(leader.0))
            .map(ReplicaServiceClient::new)
    }
}

/// Locks, recovering from poisoning: the state is kept consistent by
/// construction (each mutation completes or fails without partial writes).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Monotonic milliseconds since the first call in this process: what
/// session and lag timing use, immune to wall-clock jumps.
pub(crate) fn now_ms() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// Unix milliseconds, for history timestamps.
pub(crate) fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The rounds of a periodic task: one every `period` (after a late round
/// the next waits a whole period rather than bunching up) until `stop`.
pub(crate) struct Ticker {
    /// When the next round is due.
    tick: Interval,
    /// Set to true when the broker stops.
    stop: watch::Receiver<bool>,
}

impl Ticker {
    pub(crate) fn new(period: Duration, stop: watch::Receiver<bool>) -> Self {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self { tick, stop }
    }

    /// Waits for the next round: false once the broker stops.
    pub(crate) async fn next(&mut self) -> bool {
        tokio::select! {
            _ = self.tick.tick() => true,
            _ = self.stop.wait_for(|s| *s) => false,
        }
    }
}
