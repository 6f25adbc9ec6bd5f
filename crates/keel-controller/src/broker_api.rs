//! `BrokerService` on the active controller: registration, heartbeats,
//! AlterPartition and controlled shutdown.
//!
//! Heartbeats are answered from memory: the contact time is recorded here,
//! outside the event loop, so a busy loop never causes a live broker to be
//! fenced. Only state changes (unfence, fence request, shutdown, log-dir
//! failure) become commands on the loop.

use std::sync::Arc;

use keel_metadata::decide::{
    AlterPartitionItem, Heartbeat, HeartbeatReply, RegisterBroker, RegisterReply,
};
use keel_metadata::{
    ApiError, BrokerEpoch, BrokerId, ErrorCode, IncarnationId, LeaderEpoch, PartitionEpoch,
};
use keel_proto::convert::{
    acl_binding_to_pb, brokers_from_pb, error_to_pb, partition_to_pb, result_error,
    scram_credential_to_pb, topic_id_from_pb,
};
use keel_proto::pb;
use keel_proto::pb::broker_service_server::BrokerService;
use tonic::{Request, Response, Status};

use crate::command::{CommandKind, Proposal};
use crate::shared::{now_ms, Shared};

/// The broker-facing gRPC service of one controller node.
pub struct BrokerApi {
    shared: Arc<Shared>,
}

impl BrokerApi {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    fn error(&self, e: ApiError) -> Option<pb::Error> {
        if e.code == ErrorCode::NotController {
            let mut pe = self.shared.not_controller();
            pe.message = e.message;
            Some(pe)
        } else {
            Some(error_to_pb(&e))
        }
    }
}

/// Over TLS, a request made as broker `id` is accepted only from broker
/// `id`'s certificate.
#[allow(clippy::result_large_err)]
fn as_broker<T>(req: &Request<T>, what: &str, id: u32) -> Result<(), Status> {
    keel_tls::transport::authorize(
        req,
        format_args!("{what} as broker {id}"),
        format_args!("the certificate of broker {id}"),
        |r| *r == keel_tls::Role::Broker(id),
    )
}

/// A RegisterBroker request as the command it asks for, once it names
/// this cluster (`cluster_id`), a 16-byte incarnation id and HOST:PORT
/// addresses.
fn registration(
    req: pb::RegisterBrokerRequest,
    cluster_id: &str,
) -> Result<RegisterBroker, ApiError> {
    if req.cluster_id != cluster_id {
        return Err(ApiError::new(
            ErrorCode::InconsistentClusterId,
            format!(
                "broker belongs to cluster {:?}; this is cluster {:?}",
                req.cluster_id, cluster_id
            ),
        ));
    }
    let Some(incarnation) = IncarnationId::from_bytes(&req.incarnation_id) else {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "incarnation id must be 16 bytes",
        ));
    };
    if req.address.parse::<std::net::SocketAddr>().is_err() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("broker address {:?} is not HOST:PORT", req.address),
        ));
    }
    let kafka_address = req.kafka_address.filter(|a| !a.is_empty());
    if let Some(a) = kafka_address.as_deref() {
        if a.parse::<std::net::SocketAddr>().is_err() {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("Kafka listener address {a:?} is not HOST:PORT"),
            ));
        }
    }
    Ok(RegisterBroker {
        broker: BrokerId(req.broker_id),
        incarnation,
        address: req.address,
        rack: req.rack.filter(|r| !r.is_empty()),
        log_dirs: req.log_dirs,
        previous_epoch: BrokerEpoch(req.previous_broker_epoch),
        kafka_address,
    })
}

/// A heartbeat request (without its disks and release) as the decision
/// input it is.
fn heartbeat_of(req: pb::BrokerHeartbeatRequest) -> Heartbeat {
    Heartbeat {
        broker: BrokerId(req.broker_id),
        epoch: BrokerEpoch(req.broker_epoch),
        metadata_offset: req.current_metadata_offset,
        want_fence: req.want_fence,
        want_shutdown: req.want_shutdown,
        offline_log_dirs: req.offline_log_dirs,
    }
}

impl BrokerApi {
    /// The answer to a heartbeat, from this controller (active in
    /// `controller_epoch`) with the access data at `access_version`.
    fn heartbeat_answer(
        &self,
        r: Result<HeartbeatReply, ApiError>,
        controller_epoch: u64,
        access_version: u64,
    ) -> pb::BrokerHeartbeatResponse {
        match r {
            Ok(h) => pb::BrokerHeartbeatResponse {
                error: None,
                is_caught_up: h.is_caught_up,
                is_fenced: h.is_fenced,
                should_shut_down: h.should_shut_down,
                controller_epoch,
                controller_id: self.shared.config.node_id as u32,
                access_version,
            },
            Err(e) => pb::BrokerHeartbeatResponse {
                error: self.error(e),
                controller_epoch,
                controller_id: self.shared.config.node_id as u32,
                ..Default::default()
            },
        }
    }

    /// Records a registered broker's heartbeat: its session's contact
    /// time, and what it reports of its disks and release.
    fn note_contact(&self, hb: &Heartbeat, disks: Vec<pb::DiskSpace>, version: &str) {
        if let Ok(mut t) = self.shared.heartbeats.lock() {
            t.touch(hb.broker, hb.epoch, now_ms());
        }
        if let Ok(mut r) = self.shared.broker_reports.lock() {
            // Bounded: one entry per registered broker, a few disks and
            // a release number per entry.
            let report = crate::shared::BrokerReport {
                disks: disks.into_iter().take(64).collect(),
                version: version.chars().take(64).collect(),
            };
            r.insert(hb.broker, report);
        }
    }
}

#[tonic::async_trait]
impl BrokerService for BrokerApi {
    async fn describe_access(
        &self,
        req: Request<pb::DescribeAccessRequest>,
    ) -> Result<Response<pb::DescribeAccessResponse>, Status> {
        as_broker(&req, "DescribeAccess", req.get_ref().broker_id)?;
        // The active controller answers, as it answers heartbeats: the
        // version a heartbeat names is then one this answer has reached.
        if let Err(e) = self.shared.active_handle() {
            return Ok(Response::new(pb::DescribeAccessResponse {
                error: Some(e),
                ..Default::default()
            }));
        }
        let open = !keel_tls::transport::is_tls(&req);
        let applied = self.shared.applied();
        let image = &applied.image;
        Ok(Response::new(pb::DescribeAccessResponse {
            error: None,
            access_version: image.access_version(),
            super_users: self
                .shared
                .config
                .super_users
                .iter()
                .map(ToString::to_string)
                .collect(),
            acls: image.acls().map(acl_binding_to_pb).collect(),
            credentials: image
                .scram_users()
                .map(|(user, _, c)| scram_credential_to_pb(user, c))
                .collect(),
            open,
        }))
    }

    async fn register_broker(
        &self,
        req: Request<pb::RegisterBrokerRequest>,
    ) -> Result<Response<pb::RegisterBrokerResponse>, Status> {
        as_broker(&req, "RegisterBroker", req.get_ref().broker_id)?;
        let req = req.into_inner();
        let reply = |error, broker_epoch| {
            Ok(Response::new(pb::RegisterBrokerResponse {
                error,
                broker_epoch,
                ..Default::default()
            }))
        };
        let reg = match registration(req, &self.shared.config.cluster_id) {
            Ok(reg) => reg,
            Err(e) => return reply(Some(error_to_pb(&e)), 0),
        };
        let broker = reg.broker;
        let shared = self.shared.clone();
        let r = self
            .shared
            .submit(CommandKind::RegisterBroker, move |image, env| {
                let live = shared
                    .heartbeats
                    .lock()
                    .map(|t| t.session_live(broker, env.now_ms))
                    .unwrap_or(false);
                let d = image.decide_register_broker(&reg, live);
                Proposal::new(d.records, move |commit| {
                    // A new registration's epoch is the index of the entry
                    // that holds it, as replay gives it.
                    let index = commit?;
                    Ok(match d.reply? {
                        RegisterReply::Existing(e) => e,
                        RegisterReply::New => BrokerEpoch(index),
                    })
                })
                .with_replayed(d.replayed)
            })
            .await;
        match r {
            Ok(epoch) => {
                // Contact, as a heartbeat records it (a new registration's
                // session already started when its record committed).
                if let Ok(mut t) = self.shared.heartbeats.lock() {
                    t.touch(broker, epoch, now_ms());
                }
                // Who answers, in which epoch: what the broker fences
                // controller requests by until its first heartbeat answer.
                let controller_epoch = self.shared.active_handle().map_or(0, |h| h.epoch);
                Ok(Response::new(pb::RegisterBrokerResponse {
                    error: None,
                    broker_epoch: epoch.0,
                    controller_epoch,
                    controller_id: self.shared.config.node_id as u32,
                    session_timeout_ms: self.shared.config.session_timeout_ms,
                }))
            }
            Err(e) => reply(self.error(e), 0),
        }
    }

    async fn broker_heartbeat(
        &self,
        req: Request<pb::BrokerHeartbeatRequest>,
    ) -> Result<Response<pb::BrokerHeartbeatResponse>, Status> {
        as_broker(&req, "BrokerHeartbeat", req.get_ref().broker_id)?;
        let mut req = req.into_inner();
        let req_disks = std::mem::take(&mut req.disks);
        let req_version = std::mem::take(&mut req.software_version);
        let handle = match self.shared.active_handle() {
            Ok(h) => h,
            Err(e) => {
                return Ok(Response::new(pb::BrokerHeartbeatResponse {
                    error: Some(e),
                    ..Default::default()
                }))
            }
        };
        let hb = heartbeat_of(req);
        // One reference count, not a copy of the image's maps: this runs
        // for every heartbeat of every broker.
        let applied = self.shared.applied();
        let image = &applied.image;
        let access_version = image.access_version();
        let answer = |r: Result<HeartbeatReply, ApiError>| {
            Ok(Response::new(self.heartbeat_answer(
                r,
                handle.epoch,
                access_version,
            )))
        };
        let registered = image.broker(hb.broker).filter(|b| b.epoch == hb.epoch);
        if registered.is_some() {
            self.note_contact(&hb, req_disks, &req_version);
        }
        // Caught up once the broker has applied its own registration.
        let caught_up = registered.is_some_and(|b| hb.metadata_offset >= b.epoch.0);
        // The pure decision answers; only a state change goes to the loop.
        // The loop takes this very decision when its image is still the
        // applied image it was made on (the common case), and decides
        // again on its own image otherwise: deciding twice would double
        // the cost of a large change (a controlled shutdown moves every
        // leadership of the broker).
        // A heartbeat that may move leaderships (a shutdown, a fence, failed
        // log dirs, an unfence) can take long on a large image: it is
        // decided off the runtime's workers, which serve every other
        // broker's heartbeat.
        let decided_at = image.offset();
        // The first heartbeat asking to shut down always changes state (it
        // is the start of the shutdown): it goes to the loop at once and is
        // decided there only, with no look-ahead on the way.
        let starts_shutdown =
            hb.want_shutdown && registered.is_some_and(|b| !b.fenced && !b.shutting_down);
        let pre = if starts_shutdown {
            None
        } else {
            let heavy = hb.want_shutdown
                || hb.want_fence
                || !hb.offline_log_dirs.is_empty()
                || registered.is_some_and(|b| b.shutting_down || b.fenced);
            let d = if heavy {
                keel_raft::off_the_workers(|| image.decide_heartbeat(&hb, caught_up))
            } else {
                image.decide_heartbeat(&hb, caught_up)
            };
            if d.records.is_empty() {
                return answer(d.reply);
            }
            Some(d)
        };
        drop(applied);
        let r = self
            .shared
            .submit(CommandKind::BrokerHeartbeat, move |image, env| {
                let d = match pre {
                    Some(d) if env.applied_at == Some(decided_at) => d,
                    _ => image.decide_heartbeat(&hb, caught_up),
                };
                Proposal::from(d)
            })
            .await;
        answer(r)
    }

    async fn alter_partition(
        &self,
        req: Request<pb::AlterPartitionRequest>,
    ) -> Result<Response<pb::AlterPartitionResponse>, Status> {
        as_broker(&req, "AlterPartition", req.get_ref().broker_id)?;
        let req = req.into_inner();
        let broker = BrokerId(req.broker_id);
        let epoch = BrokerEpoch(req.broker_epoch);
        let mut items = Vec::new();
        let mut bad = Vec::new();
        for it in &req.partitions {
            match topic_id_from_pb(&it.topic_id) {
                Ok(t) => items.push(AlterPartitionItem {
                    tp: keel_metadata::TopicPartition::new(t, it.partition),
                    leader_epoch: LeaderEpoch(it.leader_epoch),
                    partition_epoch: PartitionEpoch(it.partition_epoch),
                    new_isr: brokers_from_pb(&it.new_isr),
                }),
                Err(e) => bad.push(pb::AlterPartitionResult {
                    topic_id: it.topic_id.clone(),
                    partition: it.partition,
                    error: Some(error_to_pb(&e.into())),
                    state: None,
                }),
            }
        }
        let r = self
            .shared
            .submit(CommandKind::AlterPartition, move |image, _| {
                let d = image.decide_alter_partition(broker, epoch, &items);
                let reply = d.reply.map(|v| {
                    v.into_iter()
                        .map(|(tp, r)| {
                            let name = image
                                .topic(tp.topic_id)
                                .map(|t| t.name.clone())
                                .unwrap_or_default();
                            pb::AlterPartitionResult {
                                topic_id: tp.topic_id.to_bytes().to_vec(),
                                partition: tp.partition.0,
                                error: result_error(&r),
                                state: r.ok().map(|p| partition_to_pb(&name, &tp, &p)),
                            }
                        })
                        .collect::<Vec<_>>()
                });
                Proposal::with_reply(d.records, reply).with_replayed(d.replayed)
            })
            .await;
        Ok(Response::new(match r {
            Ok(mut partitions) => {
                partitions.extend(bad);
                pb::AlterPartitionResponse {
                    error: None,
                    partitions,
                }
            }
            Err(e) => pb::AlterPartitionResponse {
                error: self.error(e),
                partitions: vec![],
            },
        }))
    }

    async fn controlled_shutdown(
        &self,
        req: Request<pb::ControlledShutdownRequest>,
    ) -> Result<Response<pb::ControlledShutdownResponse>, Status> {
        as_broker(&req, "ControlledShutdown", req.get_ref().broker_id)?;
        let req = req.into_inner();
        let broker = BrokerId(req.broker_id);
        let epoch = BrokerEpoch(req.broker_epoch);
        let r = self
            .shared
            .submit(CommandKind::ControlledShutdown, move |image, _| {
                image.decide_controlled_shutdown(broker, epoch).into()
            })
            .await;
        Ok(Response::new(match r {
            Ok(h) => pb::ControlledShutdownResponse {
                error: None,
                remaining_leaderships: h.remaining_leaderships,
            },
            Err(e) => pb::ControlledShutdownResponse {
                error: self.error(e),
                remaining_leaderships: 0,
            },
        }))
    }
}
