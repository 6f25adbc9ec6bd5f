//! The broker handle: start everything, observe it, stop it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_metadata::{BrokerId, IncarnationId};
use keel_proto::pb::broker_control_service_server::BrokerControlServiceServer;
use keel_proto::pb::replica_service_server::ReplicaServiceServer;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::control::ControlService;
use crate::controller_link::ControllerLink;
use crate::data_dir::DataDir;
use crate::history::HistoryLog;
use crate::kafka::CacheViews;
use crate::net::Dialer;
use crate::replica::ReplicaHandler;
use crate::shared::{lock, Shared};
use crate::state::BrokerState;
use crate::view::BrokerStateView;
use crate::{isr, lifecycle, replica, BrokerConfig, BrokerError};

/// Upper bound on waiting for the controller to release a controlled shutdown.
pub const CONTROLLED_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// A running broker. Dropping it without [`Broker::shutdown`] stops its
/// tasks but does not wait for them.
pub struct Broker {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    /// Server, fetcher, ISR manager, watchdog.
    tasks: Vec<JoinHandle<()>>,
    /// Registration/heartbeat loop; the only one that can fail fatally.
    lifecycle: Option<JoinHandle<()>>,
    /// Set when the lifecycle loop stopped on an unrecoverable error.
    fatal: watch::Receiver<Option<BrokerError>>,
    /// The open connections of every listener of this broker.
    gate: Arc<keel_tls::admission::Gate>,
}

/// The Kafka listener, bound, when the config asks for one.
async fn bind_kafka(config: &BrokerConfig) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    Ok(match config.kafka_listen {
        None => None,
        Some(addr) => {
            Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| BrokerError::Listen {
                        addr: addr.to_string(),
                        message: format!("Kafka listener: {e}"),
                    })?,
            )
        }
    })
}

/// The state every task of the broker shares, at its start.
fn new_shared(
    config: BrokerConfig,
    data_dir: DataDir,
    history: HistoryLog,
    local_addr: SocketAddr,
    kafka_address: Option<SocketAddr>,
) -> Arc<Shared> {
    let id = BrokerId(config.broker_id);
    let rpc_timeout = Duration::from_millis((config.session_timeout_ms / 3).clamp(200, 5_000));
    let incarnation = data_dir.incarnation_id();
    Arc::new(Shared {
        id,
        address: local_addr,
        kafka_address,
        incarnation,
        state: Mutex::new(BrokerState::new(id, history, crate::shared::wall_ms)),
        data_dir: Mutex::new(data_dir),
        link: Mutex::new(ControllerLink::new(config.controllers.clone())),
        dialer: Mutex::new(Dialer::new(
            config.listen.ip(),
            rpc_timeout,
            config.transport.clone(),
        )),
        want_shutdown: AtomicBool::new(false),
        poke: Notify::new(),
        shutdown_allowed: watch::Sender::new(false),
        access: crate::access::AccessCache::new(matches!(
            config.transport,
            keel_tls::Transport::Plaintext
        )),
        session_timeout_ms: std::sync::atomic::AtomicU64::new(config.session_timeout_ms),
        config,
    })
}

/// Serves BrokerControlService and ReplicaService on `listener` until
/// `stop_rx` turns true.
fn spawn_grpc_server(
    shared: &Arc<Shared>,
    gate: &Arc<keel_tls::admission::Gate>,
    listener: tokio::net::TcpListener,
    stop_rx: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let server = tonic::transport::Server::builder()
        .max_concurrent_streams(shared.config.max_concurrent_streams)
        .timeout(Duration::from_millis(shared.config.request_timeout_ms))
        .http2_keepalive_interval(Some(keel_tls::transport::HTTP2_KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(keel_tls::transport::HTTP2_KEEPALIVE_TIMEOUT))
        .add_service(
            BrokerControlServiceServer::new(ControlService {
                shared: shared.clone(),
            })
            .max_decoding_message_size(shared.config.max_message_bytes),
        )
        .add_service(ReplicaServiceServer::new(ReplicaHandler {
            shared: shared.clone(),
        }));
    let mut server_stop = stop_rx;
    let transport = shared.config.transport.clone();
    let grpc_door = keel_tls::admission::Door::new(gate, "grpc");
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = server_stop.wait_for(|s| *s).await;
        };
        if let Err(e) = transport
            .serve_admitted(server, listener, grpc_door, shutdown)
            .await
        {
            error!(error = %e, "broker gRPC server failed");
        }
    })
}

/// Serves Kafka clients on `l`, from the broker's metadata cache.
fn spawn_kafka_listener(
    shared: &Arc<Shared>,
    gate: &Arc<keel_tls::admission::Gate>,
    l: tokio::net::TcpListener,
    stop_rx: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let views = Arc::new(CacheViews {
        shared: shared.clone(),
        last: Mutex::new(None),
    });
    let limits = keel_kafka::ListenerConfig {
        max_request_bytes: shared.config.kafka_max_request_bytes,
        security: shared.config.kafka_security(),
        idle_timeout: Duration::from_millis(shared.config.kafka_connections_max_idle_ms),
        admission: keel_tls::admission::Door::new(gate, "kafka"),
        ..keel_kafka::ListenerConfig::default()
    };
    tokio::spawn(keel_kafka::serve(l, views, limits, stop_rx))
}

/// Runs the registration/heartbeat loop; the receiver holds the error it
/// stopped on, if it was unrecoverable.
fn spawn_lifecycle(
    shared: &Arc<Shared>,
    stop_rx: watch::Receiver<bool>,
) -> (JoinHandle<()>, watch::Receiver<Option<BrokerError>>) {
    let (fatal_tx, fatal) = watch::channel(None);
    let run_shared = shared.clone();
    let lifecycle = tokio::spawn(async move {
        if let Err(e) = lifecycle::run(run_shared, stop_rx).await {
            error!(error = %e, "broker stopped on an unrecoverable error");
            fatal_tx.send_replace(Some(e));
        }
    });
    (lifecycle, fatal)
}

impl Broker {
    /// Locks the data dir, binds the listener, serves BrokerControlService
    /// and ReplicaService, and starts registering with the controllers.
    pub async fn start(config: BrokerConfig) -> anyhow::Result<Broker> {
        config.validate()?;
        let id = BrokerId(config.broker_id);
        let data_dir = DataDir::open(&config.data_dir, config.broker_id, &config.cluster_id)?;
        let history = HistoryLog::open(&data_dir.history_path())?;
        for d in &config.log_dirs {
            // A dir that cannot be created is reported offline by heartbeats.
            if let Err(e) = std::fs::create_dir_all(d) {
                warn!(dir = %d, error = %e, "cannot create log dir");
            }
        }
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| BrokerError::Listen {
                addr: config.listen.to_string(),
                message: e.to_string(),
            })?;
        let local_addr = listener.local_addr()?;
        let kafka_listener = bind_kafka(&config).await?;
        let kafka_address = match &kafka_listener {
            Some(l) => Some(l.local_addr()?),
            None => None,
        };
        let incarnation = data_dir.incarnation_id();
        let shared = new_shared(config, data_dir, history, local_addr, kafka_address);
        info!(broker = id.0, address = %local_addr, kafka = ?kafka_address, %incarnation, transport = %shared.config.transport, "broker starting");

        let gate = keel_tls::admission::Gate::new(shared.config.connections.clone());
        let members = Arc::downgrade(&shared);
        gate.set_members(Arc::new(move |ip| {
            members
                .upgrade()
                .is_some_and(|shared| shared.is_member_address(ip))
        }));
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = vec![spawn_grpc_server(&shared, &gate, listener, stop_rx.clone())];
        if let Some(l) = kafka_listener {
            tasks.push(spawn_kafka_listener(&shared, &gate, l, stop_rx.clone()));
        }
        // The Kafka listener and, over TLS, DescribeBroker check callers
        // against the copy of the ACLs; a plaintext broker without a Kafka
        // listener checks nothing.
        if shared.config.kafka_listen.is_some() || shared.config.transport.is_tls() {
            tasks.push(tokio::spawn(crate::access_refresh::run_refresher(
                shared.clone(),
                stop_rx.clone(),
            )));
        }
        tasks.push(tokio::spawn(replica::run_fetcher(
            shared.clone(),
            stop_rx.clone(),
        )));
        tasks.push(tokio::spawn(isr::run_isr_manager(
            shared.clone(),
            stop_rx.clone(),
        )));
        tasks.push(tokio::spawn(lifecycle::run_watchdog(
            shared.clone(),
            stop_rx.clone(),
        )));

        let (lifecycle, fatal) = spawn_lifecycle(&shared, stop_rx);
        Ok(Broker {
            shared,
            local_addr,
            stop,
            tasks,
            lifecycle: Some(lifecycle),
            fatal,
            gate,
        })
    }

    /// The open connections of every listener of this broker and their
    /// limits: a listener served beside the broker (metrics) admits
    /// through it too.
    pub fn gate(&self) -> &Arc<keel_tls::admission::Gate> {
        &self.gate
    }

    /// The bound address (differs from the configured one when its port was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The bound Kafka listener, when the broker has one.
    pub fn kafka_addr(&self) -> Option<SocketAddr> {
        self.shared.kafka_address
    }

    /// This data dir's incarnation id.
    pub fn incarnation_id(&self) -> IncarnationId {
        self.shared.incarnation
    }

    /// Where accepted leaderships are recorded.
    pub fn history_path(&self) -> PathBuf {
        lock(&self.shared.data_dir).history_path()
    }

    /// A snapshot: epoch, fencing, controller epoch seen, leaderships.
    pub fn state(&self) -> BrokerStateView {
        self.shared.state().view()
    }

    /// Resolves only if the broker hit an unrecoverable error (e.g. the
    /// quorum has another cluster id); the process should then exit non-zero.
    pub async fn failed(&self) -> anyhow::Error {
        let mut rx = self.fatal.clone();
        let found = rx
            .wait_for(|f| f.is_some())
            .await
            .ok()
            .and_then(|f| f.clone());
        match found {
            Some(e) => e.into(),
            // Sender gone without an error: the loop ended normally. Never
            // resolve, so callers can select on this alongside other events.
            None => std::future::pending().await,
        }
    }

    /// Stops the broker. `controlled`: first ask the controller to move
    /// leaderships away (want_shutdown in heartbeats) and wait until it says
    /// should_shut_down, at most [`CONTROLLED_SHUTDOWN_TIMEOUT`].
    pub async fn shutdown(mut self, controlled: bool) -> anyhow::Result<()> {
        let registered = self.shared.state().broker_epoch().is_some();
        if controlled && registered && self.fatal.borrow().is_none() {
            info!(
                broker = self.shared.id.0,
                "controlled shutdown: asking the controller"
            );
            self.shared.want_shutdown.store(true, Ordering::SeqCst);
            self.shared.poke.notify_one();
            let mut allowed = self.shared.shutdown_allowed.subscribe();
            let confirmed = tokio::time::timeout(CONTROLLED_SHUTDOWN_TIMEOUT, async {
                allowed.wait_for(|a| *a).await.is_ok()
            })
            .await;
            match confirmed {
                Ok(_) => info!(broker = self.shared.id.0, "controlled shutdown allowed"),
                Err(_) => warn!(
                    broker = self.shared.id.0,
                    "controlled shutdown not confirmed within {:?}; stopping anyway",
                    CONTROLLED_SHUTDOWN_TIMEOUT
                ),
            }
        }
        self.stop.send_replace(true);
        let mut handles = std::mem::take(&mut self.tasks);
        handles.extend(self.lifecycle.take());
        for h in handles {
            let abort = h.abort_handle();
            if tokio::time::timeout(Duration::from_secs(10), h)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        lock(&self.shared.data_dir).release_lock();
        info!(broker = self.shared.id.0, "broker stopped");
        match self.fatal.borrow().clone() {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}
