//! A fake active controller (a BrokerService that records what brokers
//! send) and small helpers for broker stories.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_broker::{Broker, BrokerConfig};
use keel_metadata::{ErrorCode, TopicId};
use keel_proto::pb;
use keel_proto::pb::broker_control_service_client::BrokerControlServiceClient;
use keel_proto::pb::broker_service_server::{BrokerService, BrokerServiceServer};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

/// How the fake answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Registers (epoch 7, then 8, ... per broker) and answers heartbeats.
    Active,
    /// Answers everything NOT_CONTROLLER with this hint.
    Redirect { node_id: u64, address: String },
    /// Never answers (calls hang).
    Silent,
    /// Refuses registration with INCONSISTENT_CLUSTER_ID.
    WrongCluster,
}

#[derive(Default)]
pub struct Recorded {
    pub registrations: Vec<pb::RegisterBrokerRequest>,
    pub heartbeats: Vec<pb::BrokerHeartbeatRequest>,
    pub alters: Vec<pb::AlterPartitionRequest>,
    /// Source address of each registration's connection.
    pub peers: Vec<Option<SocketAddr>>,
}

#[derive(Clone)]
pub struct FakeController {
    pub mode: Arc<Mutex<Mode>>,
    pub seen: Arc<Mutex<Recorded>>,
    /// Replica set reported back in AlterPartition answers.
    pub replicas: Vec<u32>,
    /// The epoch its answers name (as controller 1); see [`Self::elect`].
    pub controller_epoch: Arc<std::sync::atomic::AtomicU64>,
}

pub const FIRST_EPOCH: u64 = 7;

impl FakeController {
    pub fn new(mode: Mode) -> Self {
        Self {
            mode: Arc::new(Mutex::new(mode)),
            seen: Arc::new(Mutex::new(Recorded::default())),
            replicas: vec![1, 2],
            controller_epoch: Arc::new(3.into()),
        }
    }

    /// From now on its answers name `epoch`, as a newly elected
    /// controller's would.
    pub fn elect(&self, epoch: u64) {
        self.controller_epoch
            .store(epoch, std::sync::atomic::Ordering::SeqCst);
    }

    fn epoch(&self) -> u64 {
        self.controller_epoch
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn set_mode(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn mode(&self) -> Mode {
        self.mode.lock().unwrap().clone()
    }

    /// Serves on a fresh 127.0.0.1 port.
    pub async fn serve(&self) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let svc = BrokerServiceServer::new(self.clone());
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await;
        });
        addr
    }

    pub fn registrations(&self) -> Vec<pb::RegisterBrokerRequest> {
        self.seen.lock().unwrap().registrations.clone()
    }

    pub fn peers(&self) -> Vec<Option<SocketAddr>> {
        self.seen.lock().unwrap().peers.clone()
    }

    pub fn heartbeats(&self) -> Vec<pb::BrokerHeartbeatRequest> {
        self.seen.lock().unwrap().heartbeats.clone()
    }

    pub fn alters(&self) -> Vec<pb::AlterPartitionRequest> {
        self.seen.lock().unwrap().alters.clone()
    }

    /// Hangs for silent mode; returns the refusal for redirect mode.
    async fn gate(&self) -> Option<pb::Error> {
        match self.mode() {
            Mode::Silent => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                None
            }
            Mode::Redirect { node_id, address } => Some(pb::Error {
                code: ErrorCode::NotController.as_i32(),
                message: "not the active controller".into(),
                leader: Some(pb::LeaderHint { node_id, address }),
            }),
            _ => None,
        }
    }
}

#[tonic::async_trait]
impl BrokerService for FakeController {
    async fn describe_access(
        &self,
        _: Request<pb::DescribeAccessRequest>,
    ) -> Result<Response<pb::DescribeAccessResponse>, Status> {
        // A plaintext cluster's: nothing is checked.
        Ok(Response::new(pb::DescribeAccessResponse {
            open: true,
            ..Default::default()
        }))
    }

    async fn register_broker(
        &self,
        request: Request<pb::RegisterBrokerRequest>,
    ) -> Result<Response<pb::RegisterBrokerResponse>, Status> {
        if let Some(error) = self.gate().await {
            return Ok(Response::new(pb::RegisterBrokerResponse {
                error: Some(error),
                ..Default::default()
            }));
        }
        let peer = request.remote_addr();
        let req = request.into_inner();
        if self.mode() == Mode::WrongCluster {
            return Ok(Response::new(pb::RegisterBrokerResponse {
                error: Some(pb::Error {
                    code: ErrorCode::InconsistentClusterId.as_i32(),
                    message: "cluster id is other".into(),
                    leader: None,
                }),
                ..Default::default()
            }));
        }
        let mut seen = self.seen.lock().unwrap();
        let earlier = seen
            .registrations
            .iter()
            .filter(|r| r.broker_id == req.broker_id)
            .count() as u64;
        seen.registrations.push(req);
        seen.peers.push(peer);
        Ok(Response::new(pb::RegisterBrokerResponse {
            error: None,
            broker_epoch: FIRST_EPOCH + earlier,
            controller_epoch: self.epoch(),
            controller_id: 1,
            // Says nothing: the broker keeps its own session timeout.
            session_timeout_ms: 0,
        }))
    }

    async fn broker_heartbeat(
        &self,
        request: Request<pb::BrokerHeartbeatRequest>,
    ) -> Result<Response<pb::BrokerHeartbeatResponse>, Status> {
        if let Some(error) = self.gate().await {
            return Ok(Response::new(pb::BrokerHeartbeatResponse {
                error: Some(error),
                ..Default::default()
            }));
        }
        let req = request.into_inner();
        let want_shutdown = req.want_shutdown;
        self.seen.lock().unwrap().heartbeats.push(req);
        Ok(Response::new(pb::BrokerHeartbeatResponse {
            error: None,
            is_caught_up: true,
            is_fenced: false,
            should_shut_down: want_shutdown,
            controller_epoch: self.epoch(),
            controller_id: 1,
            access_version: 0,
        }))
    }

    async fn alter_partition(
        &self,
        request: Request<pb::AlterPartitionRequest>,
    ) -> Result<Response<pb::AlterPartitionResponse>, Status> {
        if let Some(error) = self.gate().await {
            return Ok(Response::new(pb::AlterPartitionResponse {
                error: Some(error),
                partitions: Vec::new(),
            }));
        }
        let req = request.into_inner();
        let partitions = req
            .partitions
            .iter()
            .map(|i| pb::AlterPartitionResult {
                topic_id: i.topic_id.clone(),
                partition: i.partition,
                error: None,
                state: Some(pb::PartitionState {
                    topic: "t".into(),
                    topic_id: i.topic_id.clone(),
                    partition: i.partition,
                    leader: Some(req.broker_id),
                    leader_epoch: i.leader_epoch,
                    partition_epoch: i.partition_epoch + 1,
                    replicas: self.replicas.clone(),
                    isr: i.new_isr.clone(),
                    adding: Vec::new(),
                    removing: Vec::new(),
                }),
            })
            .collect();
        self.seen.lock().unwrap().alters.push(req);
        Ok(Response::new(pb::AlterPartitionResponse {
            error: None,
            partitions,
        }))
    }

    async fn controlled_shutdown(
        &self,
        _request: Request<pb::ControlledShutdownRequest>,
    ) -> Result<Response<pb::ControlledShutdownResponse>, Status> {
        Ok(Response::new(pb::ControlledShutdownResponse {
            error: None,
            remaining_leaderships: 0,
        }))
    }
}

/// Small timings so stories run in seconds.
pub fn config(broker_id: u32, controllers: &[SocketAddr], dir: &Path) -> BrokerConfig {
    let mut c = BrokerConfig::new(
        broker_id,
        "127.0.0.1:0".parse().unwrap(),
        controllers.iter().map(|a| a.to_string()).collect(),
        "test-cluster",
        dir,
    );
    c.log_dirs = vec![dir.join("logs").to_string_lossy().into_owned()];
    c.heartbeat_interval_ms = 100;
    c.session_timeout_ms = 1_000;
    c.replica_lag_time_max_ms = 1_000;
    c.replica_fetch_interval_ms = 100;
    c
}

/// Polls `cond` until true, failing the test after 20 s.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn registered(broker: &Broker) {
    eventually("broker registered", || {
        broker.state().broker_epoch.is_some()
    })
    .await;
}

pub async fn control_client(broker: &Broker) -> BrokerControlServiceClient<Channel> {
    BrokerControlServiceClient::connect(format!("http://{}", broker.local_addr()))
        .await
        .unwrap()
}

pub fn topic() -> TopicId {
    TopicId(0x0123_4567_89ab_cdef_0011_2233_4455_6677)
}

pub fn stamp(controller_epoch: u64, broker_epoch: u64) -> Option<pb::ControllerStamp> {
    Some(pb::ControllerStamp {
        controller_id: 1,
        controller_epoch,
        broker_epoch,
    })
}

pub fn partition(
    leader: u32,
    leader_epoch: u32,
    partition_epoch: u32,
    isr: &[u32],
) -> pb::PartitionState {
    pb::PartitionState {
        topic: "t".into(),
        topic_id: topic().to_bytes().to_vec(),
        partition: 0,
        leader: Some(leader),
        leader_epoch,
        partition_epoch,
        replicas: vec![1, 2],
        isr: isr.to_vec(),
        adding: Vec::new(),
        removing: Vec::new(),
    }
}

pub fn leader_info(broker_id: u32, addr: SocketAddr) -> pb::BrokerInfo {
    pb::BrokerInfo {
        broker_id,
        broker_epoch: FIRST_EPOCH,
        address: addr.to_string(),
        rack: None,
        fenced: false,
        shutting_down: false,
        kafka_address: None,
    }
}

/// Error code of an optional wire error (absent = NONE).
pub fn code(e: &Option<pb::Error>) -> ErrorCode {
    e.as_ref().map_or(ErrorCode::None, |e| {
        ErrorCode::from_i32(e.code).unwrap_or(ErrorCode::Internal)
    })
}

/// Per-partition codes of a response, keyed by partition index.
pub fn codes(parts: &[pb::PartitionError]) -> BTreeMap<u32, ErrorCode> {
    parts
        .iter()
        .map(|p| (p.partition, code(&p.error)))
        .collect()
}
