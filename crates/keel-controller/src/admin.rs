//! `AdminService`: operators' calls. Writes become commands on the active
//! controller's loop; reads are served by the active controller after a
//! linearizability check; any other node answers NOT_CONTROLLER with a
//! leader hint (except `DescribeNode`, which is about the node itself).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{BoxStream, StreamExt};
use keel_metadata::acl::{Operation, Resource};
use keel_metadata::decide::{duplicate_user, duplicated_users, MAX_SCRAM_CREDENTIALS};
use keel_metadata::decide::{ConfigOp, CreatePartitions, CreateTopic, ElectionKind};
use keel_metadata::scram::{ScramCredential, ScramMechanism};
use keel_metadata::{ApiError, BrokerId, ErrorCode, MetadataImage, TopicPartition};
use keel_proto::convert::{
    acl_binding_from_pb, acl_binding_to_pb, acl_filter_from_pb, broker_to_pb, brokers_from_pb,
    config_op_from_pb, election_kind_from_pb, error_to_pb, partition_to_pb, result_error,
    scram_credential_info_to_pb, scram_deletion_from_pb, scram_upsertion_from_pb,
};
use keel_proto::pb;
use keel_proto::pb::admin_service_server::AdminService;
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use crate::authz::{decide_permitted, Caller};
use crate::budget::{admit_each, Admitted};
use crate::command::{CommandKind, Proposal};
use crate::shared::{now_ms, Shared};

/// The admin gRPC service of one controller node.
#[derive(Clone)]
pub struct AdminApi {
    shared: Arc<Shared>,
}

/// Writes of one `Write` session being answered at once; beyond this the
/// session stops reading its stream (HTTP/2 flow control then holds the
/// client back).
pub const MAX_WRITES_IN_FLIGHT: usize = 1024;

impl AdminApi {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// One admin request slot, unless `req` is a write of a `Write`
    /// session (which holds one for the whole session).
    fn slot<T>(
        &self,
        req: &Request<T>,
    ) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ApiError> {
        if req.extensions().get::<SessionAdmitted>().is_some() {
            return Ok(None);
        }
        self.shared.throttle.admit().map(Some)
    }

    /// The configured super users, for a decision closure.
    fn super_users(&self) -> Arc<BTreeSet<keel_metadata::acl::Principal>> {
        self.shared.super_users.clone()
    }

    /// Refuses a caller of `req` who may not do `op` on the cluster by
    /// `image`'s ACLs.
    fn check_cluster<T>(
        &self,
        req: &Request<T>,
        image: &MetadataImage,
        op: Operation,
    ) -> Result<(), pb::Error> {
        Caller::of(req)
            .checker(image, &self.shared.super_users)
            .check(op, Resource::Cluster)
            .map_err(|e| error_to_pb(&e))
    }

    /// The image for a linearizable read of cluster-wide state by a caller
    /// who may do `op` on the cluster.
    async fn cluster_read<T>(
        &self,
        req: &Request<T>,
        op: Operation,
    ) -> Result<MetadataImage, pb::Error> {
        self.shared.linearizable().await?;
        let image = self.shared.image();
        self.check_cluster(req, &image, op)?;
        Ok(image)
    }

    /// Admits a unary write to the node's write budget, unless it came
    /// through a `Write` session, which admitted it before reading it.
    async fn admit<M: Message>(&self, req: &Request<M>) -> Option<Admitted> {
        if req.extensions().get::<SessionAdmitted>().is_some() {
            return None;
        }
        Some(
            self.shared
                .write_budget
                .admit(req.get_ref().encoded_len())
                .await,
        )
    }

    /// Answers one write of a `Write` session through the same handler as
    /// its unary call, as the session's caller.
    async fn write_one(&self, w: pb::WriteRequest, caller: Caller) -> pb::WriteResponse {
        use pb::write_request::Op;
        use pb::write_response::Result as Answer;
        let answer = match w.op {
            Some(Op::IncrementalAlterConfigs(r)) => self
                .incremental_alter_configs(admitted(r, caller.clone()))
                .await
                .map(|r| Answer::IncrementalAlterConfigs(r.into_inner())),
            Some(Op::CreateTopics(r)) => self
                .create_topics(admitted(r, caller.clone()))
                .await
                .map(|r| Answer::CreateTopics(r.into_inner())),
            Some(Op::DeleteTopics(r)) => self
                .delete_topics(admitted(r, caller.clone()))
                .await
                .map(|r| Answer::DeleteTopics(r.into_inner())),
            Some(Op::CreatePartitions(r)) => self
                .create_partitions(admitted(r, caller.clone()))
                .await
                .map(|r| Answer::CreatePartitions(r.into_inner())),
            None => Ok(Answer::Error(error_to_pb(&ApiError::new(
                ErrorCode::InvalidRequest,
                "write request names no op",
            )))),
        };
        pb::WriteResponse {
            id: w.id,
            result: Some(answer.unwrap_or_else(|s| {
                Answer::Error(error_to_pb(&ApiError::new(
                    ErrorCode::Internal,
                    format!("{}: {}", s.code(), s.message()),
                )))
            })),
        }
    }
}

/// Marks a request of a `Write` session: its share of the write budget is
/// already held.
#[derive(Clone, Copy)]
struct SessionAdmitted;

/// A session write as a request of `caller` for its unary handler.
fn admitted<M>(m: M, caller: Caller) -> Request<M> {
    let mut req = Request::new(m);
    req.extensions_mut().insert(SessionAdmitted);
    req.extensions_mut().insert(caller);
    req
}

/// A response that carries only a top-level error: how a request refused
/// before it was looked at is answered.
trait Refused: Default {
    fn refused(e: pb::Error) -> Self;
}

macro_rules! refused {
    ($($t:ty),* $(,)?) => {
        $(impl Refused for $t {
            #[allow(clippy::needless_update)]
            fn refused(e: pb::Error) -> Self {
                Self { error: Some(e), ..Default::default() }
            }
        })*
    };
}

refused!(
    pb::CreateTopicsResponse,
    pb::DeleteTopicsResponse,
    pb::CreatePartitionsResponse,
    pb::AlterPartitionReassignmentsResponse,
    pb::ListPartitionReassignmentsResponse,
    pb::ElectLeadersResponse,
    pb::DescribeClusterResponse,
    pb::DescribeTopicsResponse,
    pb::DescribeQuorumResponse,
    pb::UnregisterBrokerResponse,
    pb::IncrementalAlterConfigsResponse,
    pb::AddVoterResponse,
    pb::RemoveVoterResponse,
    pb::TriggerSnapshotResponse,
    pb::CreateAclsResponse,
    pb::DeleteAclsResponse,
    pb::DescribeAclsResponse,
    pb::AlterClusterConfigsResponse,
    pb::DescribeClusterConfigsResponse,
    pb::AlterUserScramCredentialsResponse,
    pb::DescribeUserScramCredentialsResponse,
);

/// Takes one of the node's admin request slots for the rest of the call
/// (a `Write` session's writes share their session's), or answers
/// THROTTLING_QUOTA_EXCEEDED.
macro_rules! slot {
    ($self:ident, $req:expr, $resp:ty) => {
        match $self.slot(&$req) {
            Ok(p) => p,
            Err(e) => return Ok(Response::new(<$resp as Refused>::refused(error_to_pb(&e)))),
        }
    };
}

/// Runs a membership change on a task of its own and answers with what it
/// did or its error: the change goes on to its end when the caller gives
/// up and its handler is dropped.
async fn to_the_end<T: Send + 'static>(
    change: impl std::future::Future<Output = Result<T, ApiError>> + Send + 'static,
) -> Result<T, pb::Error> {
    match tokio::spawn(change).await {
        Ok(r) => r.map_err(|e| error_to_pb(&e)),
        Err(e) => Err(error_to_pb(&ApiError::new(
            ErrorCode::Internal,
            format!("the membership change stopped: {e}"),
        ))),
    }
}

/// Config entries in key order.
fn config_entries<'a>(
    m: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Vec<pb::ConfigEntry> {
    m.into_iter()
        .map(|(key, value)| pb::ConfigEntry {
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

/// The items of an AlterUserScramCredentials request, converted: the ones
/// refused before the decision (a user named twice, a mechanism not
/// supported, a salted password that yields no credential) keep their
/// refusal; the others go to the decision.
struct ScramChanges {
    /// Per item, in the request's order (upsertions, then deletions): the
    /// user and its refusal, `None` for an item decided.
    refused: Vec<(String, Option<ApiError>)>,
    upserts: Vec<(String, ScramCredential)>,
    deletions: Vec<(String, ScramMechanism)>,
}

impl ScramChanges {
    fn from_pb(req: &pb::AlterUserScramCredentialsRequest) -> Self {
        // A user named twice is refused in every item naming it, even one
        // whose conversion fails, as Kafka refuses them.
        let twice = duplicated_users(
            req.upsertions
                .iter()
                .map(|u| u.user.as_str())
                .chain(req.deletions.iter().map(|d| d.user.as_str())),
        );
        let mut out = Self {
            refused: Vec::with_capacity(req.upsertions.len() + req.deletions.len()),
            upserts: Vec::new(),
            deletions: Vec::new(),
        };
        for u in &req.upsertions {
            let refusal = if twice.contains(u.user.as_str()) {
                Some(duplicate_user(&u.user))
            } else {
                match scram_upsertion_from_pb(u) {
                    Ok(item) => {
                        out.upserts.push(item);
                        None
                    }
                    Err(e) => Some(e),
                }
            };
            out.refused.push((u.user.clone(), refusal));
        }
        for d in &req.deletions {
            let refusal = if twice.contains(d.user.as_str()) {
                Some(duplicate_user(&d.user))
            } else {
                match scram_deletion_from_pb(d) {
                    Ok(item) => {
                        out.deletions.push(item);
                        None
                    }
                    Err(e) => Some(e),
                }
            };
            out.refused.push((d.user.clone(), refusal));
        }
        out
    }

    /// Every item's result in the request's order: the decision answers
    /// the decided ones, in the same order (upserts, then deletions).
    fn merge(
        &self,
        decided: Vec<(String, Result<(), ApiError>)>,
    ) -> Vec<(String, Result<(), ApiError>)> {
        let mut decided = decided.into_iter();
        self.refused
            .iter()
            .map(|(user, refusal)| match refusal {
                Some(e) => (user.clone(), Err(e.clone())),
                None => decided.next().unwrap_or_else(|| {
                    (
                        user.clone(),
                        Err(ApiError::new(ErrorCode::Internal, "no decision for item")),
                    )
                }),
            })
            .collect()
    }
}

/// One audit line per committed ACL or credential change: who made it (the
/// caller's name says its listener, and for a forwarded request the client
/// and the broker), what changed (never a credential itself), and at which
/// log index.
fn log_access_changes(caller: &Caller, records: &[keel_metadata::MetadataRecord], index: u64) {
    use keel_metadata::MetadataRecord as R;
    let who = caller.name();
    for r in records {
        match r {
            R::AclAdded(b) | R::AclRemoved(b) => {
                let operation = if matches!(r, R::AclAdded(_)) {
                    "add"
                } else {
                    "remove"
                };
                tracing::info!(principal = %who, binding = %b, operation, index, "ACL changed");
            }
            R::UserScramCredential { user, credential } => {
                tracing::info!(principal = %who, user = %user, mechanism = %credential.mechanism, operation = "upsert", index, "SCRAM credential changed");
            }
            R::UserScramCredentialRemoved { user, mechanism } => {
                tracing::info!(principal = %who, user = %user, mechanism = %mechanism, operation = "delete", index, "SCRAM credential changed");
            }
            _ => {}
        }
    }
}

/// The description of the credentials of `users` (every user that has one
/// when empty): per user, mechanisms and iterations, never salts or keys.
fn describe_scram(image: &MetadataImage, users: &[String]) -> Vec<pb::UserScramCredentials> {
    let infos = |user: &str| -> Vec<pb::ScramCredentialInfo> {
        ScramMechanism::ALL
            .into_iter()
            .filter_map(|m| image.scram_credential(user, m))
            .map(scram_credential_info_to_pb)
            .collect()
    };
    if users.is_empty() {
        let mut out: Vec<pb::UserScramCredentials> = Vec::new();
        for (user, _, c) in image.scram_users() {
            match out.last_mut() {
                Some(last) if last.user == user => {
                    last.credentials.push(scram_credential_info_to_pb(c))
                }
                _ => out.push(pb::UserScramCredentials {
                    user: user.to_string(),
                    error: None,
                    credentials: vec![scram_credential_info_to_pb(c)],
                }),
            }
        }
        return out;
    }
    let twice = duplicated_users(users.iter().map(String::as_str));
    users
        .iter()
        .map(|user| {
            let (error, credentials) = if twice.contains(user.as_str()) {
                (Some(error_to_pb(&duplicate_user(user))), vec![])
            } else {
                let found = infos(user);
                if found.is_empty() {
                    let e = ApiError::new(
                        ErrorCode::ResourceNotFound,
                        format!("user {user:?} has no SCRAM credential"),
                    );
                    (Some(error_to_pb(&e)), vec![])
                } else {
                    (None, found)
                }
            };
            pb::UserScramCredentials {
                user: user.clone(),
                error,
                credentials,
            }
        })
        .collect()
}

/// A top-level error for a response's `error` field.
fn top(e: ApiError) -> Option<pb::Error> {
    Some(error_to_pb(&e))
}

/// Turns a submit failure into the response error, keeping the leader hint
/// for NOT_CONTROLLER.
fn submit_error(shared: &Shared, e: ApiError) -> Option<pb::Error> {
    if e.code == ErrorCode::NotController {
        let mut pe = shared.not_controller();
        pe.message = e.message;
        Some(pe)
    } else {
        top(e)
    }
}

fn assignments_from_pb(v: &[pb::ReplicaAssignment]) -> Option<Vec<Vec<BrokerId>>> {
    if v.is_empty() {
        return None;
    }
    let mut sorted: Vec<&pb::ReplicaAssignment> = v.iter().collect();
    sorted.sort_by_key(|a| a.partition);
    Some(
        sorted
            .iter()
            .map(|a| brokers_from_pb(&a.replicas))
            .collect(),
    )
}

fn resolve(image: &MetadataImage, topic: &str, partition: u32) -> Result<TopicPartition, ApiError> {
    let t = image.topic_by_name(topic).ok_or_else(|| {
        ApiError::new(
            ErrorCode::UnknownTopic,
            format!("topic {topic:?} does not exist"),
        )
    })?;
    if partition >= t.partition_count {
        return Err(ApiError::new(
            ErrorCode::UnknownPartition,
            format!(
                "topic {topic:?} has {}; {partition} does not exist",
                crate::console::count(t.partition_count as usize, "partition")
            ),
        ));
    }
    Ok(TopicPartition::new(t.id, partition))
}

fn topic_name(image: &MetadataImage, tp: &TopicPartition) -> String {
    image
        .topic(tp.topic_id)
        .map(|t| t.name.clone())
        .unwrap_or_else(|| tp.topic_id.to_string())
}

/// The describe view of one topic.
pub fn describe_topic(
    image: &MetadataImage,
    t: &keel_metadata::TopicImage,
) -> pb::TopicDescription {
    pb::TopicDescription {
        name: t.name.clone(),
        topic_id: t.id.to_bytes().to_vec(),
        error: None,
        marked_for_deletion: t.marked_for_deletion(),
        configs: t
            .configs
            .iter()
            .map(|(k, v)| pb::ConfigEntry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        partitions: image
            .partitions_of(t.id)
            .map(|(tp, p)| pb::PartitionDescription {
                state: Some(partition_to_pb(&t.name, tp, p)),
                offline_replicas: p
                    .replicas
                    .iter()
                    .filter(|b| !image.replica_online(tp, **b))
                    .map(|b| b.0)
                    .collect(),
                partition_state: p.state.name().to_string(),
            })
            .collect(),
    }
}

#[tonic::async_trait]
impl AdminService for AdminApi {
    type WriteStream = BoxStream<'static, Result<pb::WriteResponse, Status>>;

    async fn write(
        &self,
        req: Request<Streaming<pb::WriteRequest>>,
    ) -> Result<Response<Self::WriteStream>, Status> {
        let session_slot = self
            .shared
            .throttle
            .admit()
            .map_err(|e| Status::resource_exhausted(e.message))?;
        let api = self.clone();
        let caller = Caller::of(&req);
        let size = |m: &Result<pb::WriteRequest, Status>| m.as_ref().map_or(0, |w| w.encoded_len());
        let budget = self.shared.write_budget.clone();
        let answers = admit_each(req.into_inner(), budget, size)
            .map(move |(m, admitted)| {
                let api = api.clone();
                let caller = caller.clone();
                async move {
                    let answer = match m {
                        Ok(w) => Ok(api.write_one(w, caller).await),
                        Err(s) => Err(s),
                    };
                    drop(admitted);
                    answer
                }
            })
            .buffer_unordered(MAX_WRITES_IN_FLIGHT)
            // The session's slot is held until its stream is dropped.
            .inspect(move |_| {
                let _ = &session_slot;
            });
        Ok(Response::new(answers.boxed()))
    }

    async fn create_topics(
        &self,
        req: Request<pb::CreateTopicsRequest>,
    ) -> Result<Response<pb::CreateTopicsResponse>, Status> {
        let _slot = slot!(self, req, pb::CreateTopicsResponse);
        let _admitted = self.admit(&req).await;
        let caller = Caller::of(&req);
        let supers = self.super_users();
        let req = req.into_inner();
        let topics: Vec<CreateTopic> = req
            .topics
            .iter()
            .map(|t| CreateTopic {
                name: t.name.clone(),
                partitions: t.partitions,
                replication_factor: t.replication_factor,
                assignments: assignments_from_pb(&t.assignments),
                configs: t
                    .configs
                    .iter()
                    .map(|c| (c.key.clone(), c.value.clone()))
                    .collect(),
            })
            .collect();
        if let Err(e) = self.shared.config.limits.check_create_topics(&topics) {
            return Ok(Response::new(pb::CreateTopicsResponse {
                error: top(e),
                topics: vec![],
            }));
        }
        let limits = self.shared.config.limits.clone();
        let validate_only = req.validate_only;
        let unknown = if self.shared.config.allow_unknown_topic_configs {
            keel_metadata::topic_config::UnknownConfigs::Allow
        } else {
            keel_metadata::topic_config::UnknownConfigs::Refuse
        };
        let who = caller.principal().map(ToString::to_string);
        let r = self
            .shared
            .submit_as(CommandKind::CreateTopics, who, move |image, env| {
                if let Err(e) = limits.check_create_topics_in(image, &topics) {
                    return Proposal::with_reply(vec![], Err(e));
                }
                // Kafka's rule: `create` on the cluster, or on the topic.
                let checker = caller.checker(image, &supers);
                let any = checker.may(Operation::Create, Resource::Cluster);
                let d = decide_permitted(
                    &topics,
                    |t| {
                        (!any)
                            .then(|| {
                                checker
                                    .check(Operation::Create, Resource::Topic(&t.name))
                                    .err()
                            })
                            .flatten()
                    },
                    |t| t.name.clone(),
                    |ts| image.decide_create_topics_with(ts, validate_only, unknown, &mut env.rng),
                );
                Proposal::with_reply(d.records, Ok(d.reply)).with_replayed(d.replayed)
            })
            .await;
        Ok(Response::new(match r {
            Ok(results) => pb::CreateTopicsResponse {
                error: None,
                topics: results
                    .into_iter()
                    .map(|(name, r)| pb::CreateTopicResult {
                        name,
                        error: result_error(&r),
                        topic_id: r
                            .as_ref()
                            .map(|c| c.topic_id.to_bytes().to_vec())
                            .unwrap_or_default(),
                        partitions: r.as_ref().map(|c| c.partitions).unwrap_or(0),
                        replication_factor: r.as_ref().map(|c| c.replication_factor).unwrap_or(0),
                    })
                    .collect(),
            },
            Err(e) => pb::CreateTopicsResponse {
                error: submit_error(&self.shared, e),
                topics: vec![],
            },
        }))
    }

    async fn delete_topics(
        &self,
        req: Request<pb::DeleteTopicsRequest>,
    ) -> Result<Response<pb::DeleteTopicsResponse>, Status> {
        let _slot = slot!(self, req, pb::DeleteTopicsResponse);
        let _admitted = self.admit(&req).await;
        let caller = Caller::of(&req);
        let supers = self.super_users();
        let names = req.into_inner().names;
        if let Err(e) = self.shared.config.limits.check_topic_count(names.len()) {
            return Ok(Response::new(pb::DeleteTopicsResponse {
                error: top(e),
                topics: vec![],
            }));
        }
        let who = caller.principal().map(ToString::to_string);
        let r = self
            .shared
            .submit_as(CommandKind::DeleteTopics, who, move |image, _| {
                let mut chain = keel_metadata::decide::Chain::new(image);
                let reply = chain.decide(|image| {
                    let checker = caller.checker(image, &supers);
                    decide_permitted(
                        &names,
                        |n| checker.check(Operation::Delete, Resource::Topic(n)).err(),
                        Clone::clone,
                        |names| image.decide_delete_topics(names),
                    )
                });
                // Start these topics' deletion right away rather than at the
                // next tick (only these: others progress on the tick).
                let ids: Vec<keel_metadata::TopicId> = reply
                    .iter()
                    .filter_map(|(_, r)| r.as_ref().ok().copied())
                    .collect();
                let stop = crate::tasks::deletion_progress_of(&mut chain, &ids);
                crate::tasks::chain_proposal(chain, Ok(reply)).with_stop_replicas(stop)
            })
            .await;
        Ok(Response::new(match r {
            Ok(results) => pb::DeleteTopicsResponse {
                error: None,
                topics: results
                    .into_iter()
                    .map(|(name, r)| pb::DeleteTopicResult {
                        name,
                        error: result_error(&r),
                    })
                    .collect(),
            },
            Err(e) => pb::DeleteTopicsResponse {
                error: submit_error(&self.shared, e),
                topics: vec![],
            },
        }))
    }

    async fn create_partitions(
        &self,
        req: Request<pb::CreatePartitionsRequest>,
    ) -> Result<Response<pb::CreatePartitionsResponse>, Status> {
        let _slot = slot!(self, req, pb::CreatePartitionsResponse);
        let _admitted = self.admit(&req).await;
        let caller = Caller::of(&req);
        let supers = self.super_users();
        let req = req.into_inner();
        let items: Vec<CreatePartitions> = req
            .topics
            .iter()
            .map(|t| CreatePartitions {
                name: t.name.clone(),
                total: t.total,
                assignments: assignments_from_pb(&t.assignments),
            })
            .collect();
        if let Err(e) = self.shared.config.limits.check_create_partitions(&items) {
            return Ok(Response::new(pb::CreatePartitionsResponse {
                error: top(e),
                topics: vec![],
            }));
        }
        let limits = self.shared.config.limits.clone();
        let validate_only = req.validate_only;
        let who = caller.principal().map(ToString::to_string);
        let r = self
            .shared
            .submit_as(CommandKind::CreatePartitions, who, move |image, env| {
                if let Err(e) = limits.check_create_partitions_in(image, &items) {
                    return Proposal::with_reply(vec![], Err(e));
                }
                let checker = caller.checker(image, &supers);
                let d = decide_permitted(
                    &items,
                    |i| {
                        checker
                            .check(Operation::Alter, Resource::Topic(&i.name))
                            .err()
                    },
                    |i| i.name.clone(),
                    |items| image.decide_create_partitions(items, validate_only, &mut env.rng),
                );
                Proposal::with_reply(d.records, Ok(d.reply)).with_replayed(d.replayed)
            })
            .await;
        Ok(Response::new(match r {
            Ok(results) => pb::CreatePartitionsResponse {
                error: None,
                topics: results
                    .into_iter()
                    .map(|(name, r)| pb::CreatePartitionsResult {
                        name,
                        error: result_error(&r),
                    })
                    .collect(),
            },
            Err(e) => pb::CreatePartitionsResponse {
                error: submit_error(&self.shared, e),
                topics: vec![],
            },
        }))
    }

    async fn alter_partition_reassignments(
        &self,
        req: Request<pb::AlterPartitionReassignmentsRequest>,
    ) -> Result<Response<pb::AlterPartitionReassignmentsResponse>, Status> {
        let _slot = slot!(self, req, pb::AlterPartitionReassignmentsResponse);
        let caller = Caller::of(&req);
        let supers = self.super_users();
        let items = req.into_inner().partitions;
        if let Err(e) = self.shared.config.limits.check_plan(items.len()) {
            return Ok(Response::new(pb::AlterPartitionReassignmentsResponse {
                error: top(e),
                partitions: vec![],
            }));
        }
        let who = caller.principal().map(ToString::to_string);
        let r = self
            .shared
            .submit_as(CommandKind::AlterReassignments, who, move |image, _| {
                if let Err(e) = caller
                    .checker(image, &supers)
                    .check(Operation::Alter, Resource::Cluster)
                {
                    return Proposal::with_reply(vec![], Err(e));
                }
                let mut results: Vec<(String, u32, Result<(), ApiError>)> = Vec::new();
                let mut valid = Vec::new();
                let mut slots = Vec::new();
                for it in &items {
                    match resolve(image, &it.topic, it.partition) {
                        Ok(tp) => {
                            let target = if it.cancel {
                                None
                            } else {
                                Some(brokers_from_pb(&it.replicas))
                            };
                            slots.push((results.len(), valid.len()));
                            valid.push((tp, target));
                            results.push((it.topic.clone(), it.partition, Ok(())));
                        }
                        Err(e) => results.push((it.topic.clone(), it.partition, Err(e))),
                    }
                }
                let d = image.decide_alter_reassignments(&valid);
                for (ri, vi) in slots {
                    if let Some((_, r)) = d.reply.get(vi) {
                        results[ri].2 = r.clone();
                    }
                }
                Proposal::with_reply(d.records, Ok(results)).with_replayed(d.replayed)
            })
            .await;
        Ok(Response::new(match r {
            Ok(results) => pb::AlterPartitionReassignmentsResponse {
                error: None,
                partitions: results
                    .into_iter()
                    .map(|(topic, partition, r)| pb::ReassignmentResult {
                        topic,
                        partition,
                        error: result_error(&r),
                    })
                    .collect(),
            },
            Err(e) => pb::AlterPartitionReassignmentsResponse {
                error: submit_error(&self.shared, e),
                partitions: vec![],
            },
        }))
    }

    async fn list_partition_reassignments(
        &self,
        req: Request<pb::ListPartitionReassignmentsRequest>,
    ) -> Result<Response<pb::ListPartitionReassignmentsResponse>, Status> {
        let _slot = slot!(self, req, pb::ListPartitionReassignmentsResponse);
        if let Err(e) = self.shared.linearizable().await {
            return Ok(Response::new(pb::ListPartitionReassignmentsResponse {
                error: Some(e),
                reassignments: vec![],
            }));
        }
        let image = self.shared.image();
        if let Err(e) = self.check_cluster(&req, &image, Operation::Describe) {
            return Ok(Response::new(pb::ListPartitionReassignmentsResponse {
                error: Some(e),
                reassignments: vec![],
            }));
        }
        let wanted: BTreeSet<String> = req.into_inner().topics.into_iter().collect();
        let reassignments = image
            .list_reassignments()
            .into_iter()
            .filter_map(|(tp, p)| {
                let topic = topic_name(&image, &tp);
                (wanted.is_empty() || wanted.contains(&topic)).then(|| pb::OngoingReassignment {
                    topic,
                    partition: tp.partition.0,
                    replicas: p.replicas.iter().map(|b| b.0).collect(),
                    adding: p.adding.iter().map(|b| b.0).collect(),
                    removing: p.removing.iter().map(|b| b.0).collect(),
                })
            })
            .collect();
        Ok(Response::new(pb::ListPartitionReassignmentsResponse {
            error: None,
            reassignments,
        }))
    }

    async fn elect_leaders(
        &self,
        req: Request<pb::ElectLeadersRequest>,
    ) -> Result<Response<pb::ElectLeadersResponse>, Status> {
        let _slot = slot!(self, req, pb::ElectLeadersResponse);
        let caller = Caller::of(&req);
        let supers = self.super_users();
        let req = req.into_inner();
        let kind: ElectionKind = match election_kind_from_pb(req.election_type) {
            Ok(k) => k,
            Err(e) => {
                return Ok(Response::new(pb::ElectLeadersResponse {
                    error: Some(error_to_pb(&e.into())),
                    partitions: vec![],
                }))
            }
        };
        let wanted = req.partitions;
        if let Err(e) = self.shared.config.limits.check_plan(wanted.len()) {
            return Ok(Response::new(pb::ElectLeadersResponse {
                error: top(e),
                partitions: vec![],
            }));
        }
        let who = caller.principal().map(ToString::to_string);
        let r = self
            .shared
            .submit_as(CommandKind::ElectLeaders, who, move |image, _| {
                if let Err(e) = caller
                    .checker(image, &supers)
                    .check(Operation::Alter, Resource::Cluster)
                {
                    return Proposal::with_reply(vec![], Err(e));
                }
                let mut results: Vec<(String, u32, Result<BrokerId, ApiError>)> = Vec::new();
                let d = if wanted.is_empty() {
                    image.decide_elect_leaders(kind, None)
                } else {
                    let mut tps = Vec::new();
                    for w in &wanted {
                        match resolve(image, &w.topic, w.partition) {
                            Ok(tp) => tps.push(tp),
                            Err(e) => results.push((w.topic.clone(), w.partition, Err(e))),
                        }
                    }
                    image.decide_elect_leaders(kind, Some(&tps))
                };
                for (tp, r) in &d.reply {
                    results.push((topic_name(image, tp), tp.partition.0, r.clone()));
                }
                Proposal::with_reply(d.records, Ok(results)).with_replayed(d.replayed)
            })
            .await;
        Ok(Response::new(match r {
            Ok(results) => pb::ElectLeadersResponse {
                error: None,
                partitions: results
                    .into_iter()
                    .map(|(topic, partition, r)| pb::ElectionResult {
                        topic,
                        partition,
                        error: result_error(&r),
                        leader: r.ok().map(|b| b.0),
                    })
                    .collect(),
            },
            Err(e) => pb::ElectLeadersResponse {
                error: submit_error(&self.shared, e),
                partitions: vec![],
            },
        }))
    }

    async fn describe_cluster(
        &self,
        req: Request<pb::DescribeClusterRequest>,
    ) -> Result<Response<pb::DescribeClusterResponse>, Status> {
        let _slot = slot!(self, req, pb::DescribeClusterResponse);
        if let Err(e) = self.shared.linearizable().await {
            return Ok(Response::new(pb::DescribeClusterResponse {
                error: Some(e),
                ..Default::default()
            }));
        }
        let image = self.shared.image();
        let now = now_ms();
        let contacts: BTreeMap<BrokerId, u64> = match self.shared.heartbeats.lock() {
            Ok(t) => image
                .brokers()
                .filter_map(|b| {
                    t.last_contact_ms(b.id)
                        .map(|at| (b.id, now.saturating_sub(at)))
                })
                .collect(),
            Err(_) => BTreeMap::new(),
        };
        let reports = self
            .shared
            .broker_reports
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default();
        let m = self.shared.raft.metrics().borrow().clone();
        let incarnations =
            Caller::of(&req).may_see_incarnations(&image, &self.shared.config.super_users);
        Ok(Response::new(pb::DescribeClusterResponse {
            error: None,
            cluster_id: self.shared.config.cluster_id.clone(),
            controller_id: self.shared.config.node_id as u32,
            controller_epoch: m.current_term,
            brokers: image
                .brokers()
                .map(|b| pb::BrokerDescription {
                    broker: Some(broker_to_pb(b)),
                    last_heartbeat_ms: contacts.get(&b.id).copied(),
                    log_dirs: b.log_dirs.clone(),
                    offline_log_dirs: b.offline_log_dirs.clone(),
                    incarnation_id: if incarnations {
                        b.incarnation.to_bytes().to_vec()
                    } else {
                        Vec::new()
                    },
                    disks: reports
                        .get(&b.id)
                        .map(|r| r.disks.clone())
                        .unwrap_or_default(),
                    version: reports
                        .get(&b.id)
                        .map(|r| r.version.clone())
                        .unwrap_or_default(),
                })
                .collect(),
        }))
    }

    async fn describe_topics(
        &self,
        req: Request<pb::DescribeTopicsRequest>,
    ) -> Result<Response<pb::DescribeTopicsResponse>, Status> {
        let _slot = slot!(self, req, pb::DescribeTopicsResponse);
        if let Err(e) = self.shared.linearizable().await {
            return Ok(Response::new(pb::DescribeTopicsResponse {
                error: Some(e),
                topics: vec![],
                cluster_defaults: vec![],
            }));
        }
        let caller = Caller::of(&req);
        let names = req.into_inner().names;
        let image = self.shared.image();
        let checker = caller.checker(&image, &self.shared.config.super_users);
        let topics: Vec<pb::TopicDescription> = if names.is_empty() {
            // Only what the caller may describe; the rest is not there.
            let mut all: Vec<_> = image
                .topics()
                .filter(|t| checker.may(Operation::Describe, Resource::Topic(&t.name)))
                .collect();
            all.sort_by(|a, b| a.name.cmp(&b.name));
            all.into_iter().map(|t| describe_topic(&image, t)).collect()
        } else {
            names
                .iter()
                .map(|n| match image.topic_by_name(n) {
                    // Named but not describable: refused, whether or not it
                    // exists (its existence is not told either).
                    _ if !checker.may(Operation::Describe, Resource::Topic(n)) => {
                        pb::TopicDescription {
                            name: n.clone(),
                            error: checker
                                .check(Operation::Describe, Resource::Topic(n))
                                .err()
                                .map(|e| error_to_pb(&e)),
                            ..Default::default()
                        }
                    }
                    Some(t) => describe_topic(&image, t),
                    None => pb::TopicDescription {
                        name: n.clone(),
                        error: top(ApiError::new(
                            ErrorCode::UnknownTopic,
                            format!("topic {n:?} does not exist"),
                        )),
                        ..Default::default()
                    },
                })
                .collect()
        };
        // The defaults a described topic takes (told only with one).
        let cluster_defaults = if topics.iter().any(|t| t.error.is_none()) {
            config_entries(image.cluster_configs())
        } else {
            vec![]
        };
        Ok(Response::new(pb::DescribeTopicsResponse {
            error: None,
            topics,
            cluster_defaults,
        }))
    }

    async fn describe_quorum(
        &self,
        req: Request<pb::DescribeQuorumRequest>,
    ) -> Result<Response<pb::DescribeQuorumResponse>, Status> {
        let _slot = slot!(self, req, pb::DescribeQuorumResponse);
        if let Err(e) = self.shared.linearizable().await {
            return Ok(Response::new(pb::DescribeQuorumResponse {
                error: Some(e),
                ..Default::default()
            }));
        }
        if let Err(e) = self.check_cluster(&req, &self.shared.image(), Operation::Describe) {
            return Ok(Response::new(pb::DescribeQuorumResponse {
                error: Some(e),
                ..Default::default()
            }));
        }
        Ok(Response::new(crate::quorum::describe(&self.shared)))
    }

    async fn unregister_broker(
        &self,
        req: Request<pb::UnregisterBrokerRequest>,
    ) -> Result<Response<pb::UnregisterBrokerResponse>, Status> {
        let _slot = slot!(self, req, pb::UnregisterBrokerResponse);
        let caller = Caller::of(&req);
        let supers = self.super_users();
        let req = req.into_inner();
        let broker = BrokerId(req.broker_id);
        let force = req.force;
        let shared = self.shared.clone();
        let who = caller.principal().map(ToString::to_string);
        let r = self
            .shared
            .submit_as(CommandKind::UnregisterBroker, who, move |image, _| {
                if let Err(e) = caller
                    .checker(image, &supers)
                    .check(Operation::Alter, Resource::Cluster)
                {
                    return Proposal::with_reply(vec![], Err(e));
                }
                // A broker that still heartbeats (even a fenced one: catching
                // up, or asking to be fenced) would register again at once:
                // refused unless forced, once the caller may ask at all.
                // Sessions are soft state of this active controller.
                let live = !force
                    && shared
                        .heartbeats
                        .lock()
                        .map(|t| t.session_live(broker, crate::shared::now_ms()))
                        .unwrap_or(false);
                if live {
                    return Proposal::with_reply(
                        vec![],
                        Err(ApiError::new(
                            ErrorCode::BrokerNotFenced,
                            format!(
                                "broker {broker} is alive (it heartbeated within its session \
                                 timeout); stop it first, then unregister it once it is fenced, \
                                 or --force; nothing changed"
                            ),
                        )),
                    );
                }
                let d = image.decide_unregister_broker(broker);
                Proposal::new(d.records, move |commit| {
                    commit?;
                    if d.reply.is_ok() {
                        if let Ok(mut t) = shared.heartbeats.lock() {
                            t.remove(broker);
                        }
                    }
                    d.reply
                })
            })
            .await;
        Ok(Response::new(pb::UnregisterBrokerResponse {
            error: match r {
                Ok(()) => None,
                Err(e) => submit_error(&self.shared, e),
            },
        }))
    }

    async fn incremental_alter_configs(
        &self,
        req: Request<pb::IncrementalAlterConfigsRequest>,
    ) -> Result<Response<pb::IncrementalAlterConfigsResponse>, Status> {
        let _slot = slot!(self, req, pb::IncrementalAlterConfigsResponse);
        let _admitted = self.admit(&req).await;
        let caller = Caller::of(&req);
        let supers = self.super_users();
        let req = req.into_inner();
        let items: Result<Vec<(String, Vec<ConfigOp>)>, keel_proto::convert::ConvertError> = req
            .topics
            .into_iter()
            .map(|t| {
                let ops = t
                    .ops
                    .into_iter()
                    .map(config_op_from_pb)
                    .collect::<Result<_, _>>()?;
                Ok((t.topic, ops))
            })
            .collect();
        let items = match items {
            Ok(items) => items,
            Err(e) => {
                return Ok(Response::new(pb::IncrementalAlterConfigsResponse {
                    error: Some(error_to_pb(&ApiError::from(e))),
                    topics: vec![],
                }))
            }
        };
        if let Err(e) = self.shared.config.limits.check_alter_configs(&items) {
            return Ok(Response::new(pb::IncrementalAlterConfigsResponse {
                error: top(e),
                topics: vec![],
            }));
        }
        let limits = self.shared.config.limits.clone();
        let validate_only = req.validate_only;
        let unknown = if self.shared.config.allow_unknown_topic_configs {
            keel_metadata::topic_config::UnknownConfigs::Allow
        } else {
            keel_metadata::topic_config::UnknownConfigs::Refuse
        };
        let who = caller.principal().map(ToString::to_string);
        let r = self
            .shared
            .submit_as(CommandKind::AlterConfigs, who, move |image, _| {
                if let Err(e) = limits.check_alter_configs_in(image, &items) {
                    return Proposal::with_reply(vec![], Err(e));
                }
                let checker = caller.checker(image, &supers);
                let d = decide_permitted(
                    &items,
                    |(t, _)| {
                        checker
                            .check(Operation::AlterConfigs, Resource::Topic(t))
                            .err()
                    },
                    |(t, _)| t.clone(),
                    |items| image.decide_alter_configs_with(items, validate_only, unknown),
                );
                Proposal::with_reply(d.records, Ok(d.reply)).with_replayed(d.replayed)
            })
            .await;
        Ok(Response::new(match r {
            Ok(results) => pb::IncrementalAlterConfigsResponse {
                error: None,
                topics: results
                    .into_iter()
                    .map(|(topic, r)| pb::AlterConfigsResult {
                        topic,
                        error: result_error(&r),
                    })
                    .collect(),
            },
            Err(e) => pb::IncrementalAlterConfigsResponse {
                error: submit_error(&self.shared, e),
                topics: vec![],
            },
        }))
    }

    async fn add_voter(
        &self,
        req: Request<pb::AddVoterRequest>,
    ) -> Result<Response<pb::AddVoterResponse>, Status> {
        let _slot = slot!(self, req, pb::AddVoterResponse);
        if let Err(e) = self.shared.active_handle() {
            return Ok(Response::new(pb::AddVoterResponse {
                error: Some(e),
                ..Default::default()
            }));
        }
        if let Err(e) = self.check_cluster(&req, &self.shared.image(), Operation::Alter) {
            return Ok(Response::new(pb::AddVoterResponse {
                error: Some(e),
                ..Default::default()
            }));
        }
        let req = req.into_inner();
        // On a task of its own: a caller that gives up (a deadline, a
        // dropped connection) drops this handler, and with it whatever
        // step the change had reached; a re-admitted voter would stay a
        // learner nobody promotes. The change runs to its end either way.
        let shared = self.shared.clone();
        let options = crate::quorum::AddVoterOptions {
            catch_up_wait: match req.timeout_ms {
                0 => crate::quorum::CATCH_UP_WAIT,
                ms => Duration::from_millis(ms),
            },
            learner_only: req.learner_only,
        };
        let added = to_the_end(async move {
            crate::quorum::add_voter(
                &shared,
                req.node_id,
                req.address,
                &req.directory_id,
                options,
            )
            .await
        })
        .await;
        Ok(Response::new(match added {
            Ok(a) => pb::AddVoterResponse {
                error: None,
                directory_id: a.directory.to_string(),
                learner: a.learner,
            },
            Err(e) => pb::AddVoterResponse {
                error: Some(e),
                ..Default::default()
            },
        }))
    }

    async fn remove_voter(
        &self,
        req: Request<pb::RemoveVoterRequest>,
    ) -> Result<Response<pb::RemoveVoterResponse>, Status> {
        let _slot = slot!(self, req, pb::RemoveVoterResponse);
        if let Err(e) = self.shared.active_handle() {
            return Ok(Response::new(pb::RemoveVoterResponse {
                error: Some(e),
                ..Default::default()
            }));
        }
        if let Err(e) = self.check_cluster(&req, &self.shared.image(), Operation::Alter) {
            return Ok(Response::new(pb::RemoveVoterResponse {
                error: Some(e),
                ..Default::default()
            }));
        }
        let req = req.into_inner();
        // On a task of its own, as AddVoter's.
        let shared = self.shared.clone();
        let removed = to_the_end(async move {
            crate::quorum::remove_voter(&shared, req.node_id, req.force, req.learner_only).await
        })
        .await;
        Ok(Response::new(match removed {
            Ok(r) => pb::RemoveVoterResponse {
                error: None,
                was_learner: r == crate::quorum::Removed::Learner,
            },
            Err(e) => pb::RemoveVoterResponse {
                error: Some(e),
                ..Default::default()
            },
        }))
    }

    async fn create_acls(
        &self,
        req: Request<pb::CreateAclsRequest>,
    ) -> Result<Response<pb::CreateAclsResponse>, Status> {
        let _slot = slot!(self, req, pb::CreateAclsResponse);
        let caller = Caller::of(&req);
        let supers = self.super_users();
        let asked = req.into_inner().bindings;
        if let Err(e) = self.shared.config.limits.check_acls(asked.len()) {
            return Ok(Response::new(pb::CreateAclsResponse {
                error: top(e),
                results: vec![],
            }));
        }
        let parsed: Vec<Result<keel_metadata::acl::AclBinding, ApiError>> = asked
            .iter()
            .map(|b| acl_binding_from_pb(b).map_err(ApiError::from))
            .collect();
        let who = caller.principal().map(ToString::to_string);
        let r = self
            .shared
            .submit_as(CommandKind::AlterAcls, who, move |image, _| {
                if let Err(e) = caller
                    .checker(image, &supers)
                    .check(Operation::Alter, Resource::Cluster)
                {
                    return Proposal::with_reply(vec![], Err(e));
                }
                let valid: Vec<_> = parsed.iter().filter_map(|r| r.clone().ok()).collect();
                let d = image.decide_create_acls(&valid);
                let mut decided = d.reply.into_iter();
                let results: Vec<Result<(), ApiError>> = parsed
                    .iter()
                    .map(|p| match p {
                        Err(e) => Err(e.clone()),
                        Ok(_) => decided.next().unwrap_or_else(|| {
                            Err(ApiError::new(
                                ErrorCode::Internal,
                                "no decision for binding",
                            ))
                        }),
                    })
                    .collect();
                let records = d.records.clone();
                Proposal::new(d.records, move |commit| {
                    let index = commit?;
                    log_access_changes(&caller, &records, index);
                    Ok(results)
                })
                .with_replayed(d.replayed)
            })
            .await;
        Ok(Response::new(match r {
            Ok(results) => pb::CreateAclsResponse {
                error: None,
                results: asked
                    .into_iter()
                    .zip(results)
                    .map(|(binding, r)| pb::AclResult {
                        binding: Some(binding),
                        error: result_error(&r),
                    })
                    .collect(),
            },
            Err(e) => pb::CreateAclsResponse {
                error: submit_error(&self.shared, e),
                results: vec![],
            },
        }))
    }

    async fn delete_acls(
        &self,
        req: Request<pb::DeleteAclsRequest>,
    ) -> Result<Response<pb::DeleteAclsResponse>, Status> {
        let _slot = slot!(self, req, pb::DeleteAclsResponse);
        let caller = Caller::of(&req);
        let supers = self.super_users();
        let filters = req.into_inner().filters;
        if let Err(e) = self.shared.config.limits.check_acls(filters.len()) {
            return Ok(Response::new(pb::DeleteAclsResponse {
                error: top(e),
                results: vec![],
            }));
        }
        let filters = match filters
            .iter()
            .map(acl_filter_from_pb)
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(f) => f,
            Err(e) => {
                return Ok(Response::new(pb::DeleteAclsResponse {
                    error: Some(error_to_pb(&e.into())),
                    results: vec![],
                }))
            }
        };
        let who = caller.principal().map(ToString::to_string);
        let r = self
            .shared
            .submit_as(CommandKind::AlterAcls, who, move |image, _| {
                if let Err(e) = caller
                    .checker(image, &supers)
                    .check(Operation::Alter, Resource::Cluster)
                {
                    return Proposal::with_reply(vec![], Err(e));
                }
                let d = image.decide_delete_acls(&filters);
                let records = d.records.clone();
                let removed = d.reply;
                Proposal::new(d.records, move |commit| {
                    let index = commit?;
                    log_access_changes(&caller, &records, index);
                    Ok(removed)
                })
                .with_replayed(d.replayed)
            })
            .await;
        Ok(Response::new(match r {
            Ok(removed) => pb::DeleteAclsResponse {
                error: None,
                results: removed
                    .into_iter()
                    .map(|gone| pb::DeleteAclsResult {
                        removed: gone.iter().map(acl_binding_to_pb).collect(),
                    })
                    .collect(),
            },
            Err(e) => pb::DeleteAclsResponse {
                error: submit_error(&self.shared, e),
                results: vec![],
            },
        }))
    }

    async fn describe_acls(
        &self,
        req: Request<pb::DescribeAclsRequest>,
    ) -> Result<Response<pb::DescribeAclsResponse>, Status> {
        let _slot = slot!(self, req, pb::DescribeAclsResponse);
        let fail = |e: pb::Error| {
            Ok(Response::new(pb::DescribeAclsResponse {
                error: Some(e),
                bindings: vec![],
            }))
        };
        let image = match self.cluster_read(&req, Operation::Describe).await {
            Ok(image) => image,
            Err(e) => return fail(e),
        };
        let filter = match req.get_ref().filter.as_ref().map(acl_filter_from_pb) {
            None => Default::default(),
            Some(Ok(f)) => f,
            Some(Err(e)) => return fail(error_to_pb(&e.into())),
        };
        Ok(Response::new(pb::DescribeAclsResponse {
            error: None,
            bindings: filter
                .select(&image)
                .into_iter()
                .map(acl_binding_to_pb)
                .collect(),
        }))
    }

    async fn alter_user_scram_credentials(
        &self,
        req: Request<pb::AlterUserScramCredentialsRequest>,
    ) -> Result<Response<pb::AlterUserScramCredentialsResponse>, Status> {
        let _slot = slot!(self, req, pb::AlterUserScramCredentialsResponse);
        let _admitted = self.admit(&req).await;
        let caller = Caller::of(&req);
        let supers = self.super_users();
        let req = req.into_inner();
        let items = req.upsertions.len() + req.deletions.len();
        if items > MAX_SCRAM_CREDENTIALS {
            return Ok(Response::new(pb::AlterUserScramCredentialsResponse {
                error: top(ApiError::new(
                    ErrorCode::PolicyViolation,
                    format!(
                        "the request changes {items} credentials; at most {MAX_SCRAM_CREDENTIALS} at once"
                    ),
                )),
                results: vec![],
            }));
        }
        let asked = ScramChanges::from_pb(&req);
        let who = caller.principal().map(ToString::to_string);
        let r = self
            .shared
            .submit_as(CommandKind::AlterScramCredentials, who, move |image, _| {
                if let Err(e) = caller
                    .checker(image, &supers)
                    .check(Operation::Alter, Resource::Cluster)
                {
                    return Proposal::with_reply(vec![], Err(e));
                }
                let d = image.decide_alter_scram(&asked.upserts, &asked.deletions);
                let results = asked.merge(d.reply);
                let records = d.records.clone();
                Proposal::new(d.records, move |commit| {
                    let index = commit?;
                    log_access_changes(&caller, &records, index);
                    Ok(results)
                })
                .with_replayed(d.replayed)
            })
            .await;
        Ok(Response::new(match r {
            Ok(results) => pb::AlterUserScramCredentialsResponse {
                error: None,
                results: results
                    .into_iter()
                    .map(|(user, r)| pb::UserResult {
                        user,
                        error: result_error(&r),
                    })
                    .collect(),
            },
            Err(e) => pb::AlterUserScramCredentialsResponse {
                error: submit_error(&self.shared, e),
                results: vec![],
            },
        }))
    }

    async fn describe_user_scram_credentials(
        &self,
        req: Request<pb::DescribeUserScramCredentialsRequest>,
    ) -> Result<Response<pb::DescribeUserScramCredentialsResponse>, Status> {
        let _slot = slot!(self, req, pb::DescribeUserScramCredentialsResponse);
        let image = match self.cluster_read(&req, Operation::Describe).await {
            Ok(image) => image,
            Err(e) => {
                return Ok(Response::new(pb::DescribeUserScramCredentialsResponse {
                    error: Some(e),
                    results: vec![],
                }))
            }
        };
        let users = &req.get_ref().users;
        Ok(Response::new(pb::DescribeUserScramCredentialsResponse {
            error: None,
            results: describe_scram(&image, users),
        }))
    }

    async fn alter_cluster_configs(
        &self,
        req: Request<pb::AlterClusterConfigsRequest>,
    ) -> Result<Response<pb::AlterClusterConfigsResponse>, Status> {
        let _slot = slot!(self, req, pb::AlterClusterConfigsResponse);
        let _admitted = self.admit(&req).await;
        let caller = Caller::of(&req);
        let supers = self.super_users();
        let req = req.into_inner();
        let fail = |e: ApiError| {
            Ok(Response::new(pb::AlterClusterConfigsResponse {
                error: top(e),
            }))
        };
        let ops: Vec<ConfigOp> = match req.ops.into_iter().map(config_op_from_pb).collect() {
            Ok(ops) => ops,
            Err(e) => return fail(ApiError::from(e)),
        };
        let limits = self.shared.config.limits.clone();
        if let Err(e) = limits.check_alter_configs(&[("cluster defaults".to_string(), ops.clone())])
        {
            return fail(e);
        }
        let validate_only = req.validate_only;
        let unknown = if self.shared.config.allow_unknown_topic_configs {
            keel_metadata::topic_config::UnknownConfigs::Allow
        } else {
            keel_metadata::topic_config::UnknownConfigs::Refuse
        };
        let who = caller.principal().map(ToString::to_string);
        let r = self
            .shared
            .submit_as(CommandKind::AlterConfigs, who, move |image, _| {
                if let Err(e) = caller
                    .checker(image, &supers)
                    .check(Operation::AlterConfigs, Resource::Cluster)
                {
                    return Proposal::with_reply(vec![], Err(e));
                }
                if let Err(e) = limits.check_cluster_configs_in(image, &ops) {
                    return Proposal::with_reply(vec![], Err(e));
                }
                let d = image.decide_alter_cluster_configs(&ops, validate_only, unknown);
                Proposal::with_reply(d.records, Ok(d.reply)).with_replayed(d.replayed)
            })
            .await;
        Ok(Response::new(pb::AlterClusterConfigsResponse {
            error: match r {
                Ok(Ok(())) => None,
                Ok(Err(e)) => top(e),
                Err(e) => submit_error(&self.shared, e),
            },
        }))
    }

    async fn describe_cluster_configs(
        &self,
        req: Request<pb::DescribeClusterConfigsRequest>,
    ) -> Result<Response<pb::DescribeClusterConfigsResponse>, Status> {
        let _slot = slot!(self, req, pb::DescribeClusterConfigsResponse);
        let fail = |e: pb::Error| {
            Ok(Response::new(pb::DescribeClusterConfigsResponse {
                error: Some(e),
                configs: vec![],
            }))
        };
        let image = match self.cluster_read(&req, Operation::DescribeConfigs).await {
            Ok(image) => image,
            Err(e) => return fail(e),
        };
        Ok(Response::new(pb::DescribeClusterConfigsResponse {
            error: None,
            configs: config_entries(image.cluster_configs()),
        }))
    }

    async fn describe_node(
        &self,
        req: Request<pb::DescribeNodeRequest>,
    ) -> Result<Response<pb::DescribeNodeResponse>, Status> {
        // This node's image: ACLs as this node knows them.
        if let Err(e) = self.check_cluster(&req, &self.shared.image(), Operation::Describe) {
            return Err(Status::permission_denied(e.message));
        }
        let skip_hash = req.get_ref().skip_image_hash;
        let applied = self.shared.applied();
        let m = self.shared.raft.metrics().borrow().clone();
        let role = match m.state {
            openraft::ServerState::Leader => "leader",
            openraft::ServerState::Follower => "follower",
            openraft::ServerState::Candidate => "candidate",
            openraft::ServerState::Learner => "learner",
            openraft::ServerState::Shutdown => "shutdown",
        };
        Ok(Response::new(pb::DescribeNodeResponse {
            node_id: self.shared.config.node_id,
            cluster_id: self.shared.config.cluster_id.clone(),
            last_applied_index: applied.last_applied.map(|l| l.index).unwrap_or(0),
            image_hash: if skip_hash {
                String::new()
            } else {
                applied.image.hash()
            },
            role: role.to_string(),
            term: m.current_term,
            // A leader that stepped down for want of a quorum keeps its own
            // committed vote, which openraft reports as the leader: not a
            // leader to name.
            leader_id: m.current_leader.filter(|l| {
                *l != self.shared.config.node_id || m.state == openraft::ServerState::Leader
            }),
            // Active only while the lease holds, checked now: a leader cut
            // off from its majority says so within the lease, before the
            // leadership watch has resigned the role.
            active_controller: self
                .shared
                .active
                .read()
                .map(|g| g.is_some())
                .unwrap_or(false)
                && self.shared.lease_valid(),
            snapshot: Some(snapshot_to_pb(&applied.snapshots.get())),
            last_log_index: m.last_log_index,
            directory_id: self.shared.directory_id.to_string(),
            disk: Some(self.shared.disk.to_pb(&self.shared.config.data_dir)),
            version: env!("CARGO_PKG_VERSION").to_string(),
            kafka_address: self.shared.kafka_address.get().map(|a| a.to_string()),
        }))
    }

    type ReadSnapshotStream = BoxStream<'static, Result<pb::ReadSnapshotResponse, Status>>;

    async fn read_snapshot(
        &self,
        req: Request<pb::ReadSnapshotRequest>,
    ) -> Result<Response<Self::ReadSnapshotStream>, Status> {
        type Answer =
            Result<Response<BoxStream<'static, Result<pb::ReadSnapshotResponse, Status>>>, Status>;
        let refuse = |error: pb::Error| -> Answer {
            let r = pb::ReadSnapshotResponse {
                error: Some(error),
                ..Default::default()
            };
            Ok(Response::new(
                futures::stream::once(async move { Ok(r) }).boxed(),
            ))
        };
        let _slot = match self.slot(&req) {
            Ok(p) => p,
            Err(e) => return refuse(error_to_pb(&e)),
        };
        // A backup holds every ACL and credential of the cluster: the same
        // cluster-level permission as building a snapshot.
        if let Err(e) = self.check_cluster(&req, &self.shared.image(), Operation::Alter) {
            return refuse(e);
        }
        // The applied image is consistent by construction: everything up
        // to one log entry, nothing after it.
        let applied = self.shared.applied();
        // A node that has applied nothing is not in a quorum yet: as a
        // standby would, it points the client elsewhere.
        let Some(last) = applied.last_applied else {
            return refuse(error_to_pb(&ApiError::new(
                ErrorCode::NotController,
                "this node has applied nothing yet; ask another voter".to_string(),
            )));
        };
        // The image does not encode a transaction's held records: only a
        // point between transactions is a whole state.
        if let Some(at) = applied.image.open_transaction() {
            return refuse(error_to_pb(&ApiError::new(
                ErrorCode::RequestTimedOut,
                format!("a transaction is open since index {at}; try again once it ends"),
            )));
        }
        let membership = applied.membership.membership();
        let voters: Vec<String> = membership
            .voter_ids()
            .map(|id| {
                let addr = membership.get_node(&id).map_or("", |n| n.addr.as_str());
                format!("{id}@{addr}")
            })
            .collect();
        let image = applied.image.clone();
        let (body, image_hash) = keel_raft::off_the_workers(|| (image.encode(), image.hash()));
        // 1 MiB chunks stay far below gRPC's message limits whatever the
        // image's size.
        const CHUNK_BYTES: usize = 1 << 20;
        let mut messages = vec![pb::ReadSnapshotResponse {
            error: None,
            cluster_id: self.shared.config.cluster_id.clone(),
            index: last.index,
            term: last.leader_id.term,
            leader_node_id: last.leader_id.node_id,
            image_hash,
            image_bytes: body.len() as u64,
            chunk: Vec::new(),
            voters: voters.join(","),
        }];
        for (i, part) in body.chunks(CHUNK_BYTES).enumerate() {
            if i == 0 {
                messages[0].chunk = part.to_vec();
            } else {
                messages.push(pb::ReadSnapshotResponse {
                    chunk: part.to_vec(),
                    ..Default::default()
                });
            }
        }
        Ok(Response::new(
            futures::stream::iter(messages.into_iter().map(Ok)).boxed(),
        ))
    }

    async fn trigger_snapshot(
        &self,
        req: Request<pb::TriggerSnapshotRequest>,
    ) -> Result<Response<pb::TriggerSnapshotResponse>, Status> {
        let _slot = slot!(self, req, pb::TriggerSnapshotResponse);
        if let Err(e) = self.check_cluster(&req, &self.shared.image(), Operation::Alter) {
            return Ok(Response::new(pb::TriggerSnapshotResponse {
                error: Some(e),
                ..Default::default()
            }));
        }
        let req = req.into_inner();
        let timeout = match req.timeout_ms {
            0 => Duration::from_secs(60),
            ms => Duration::from_millis(ms),
        };
        let started = Instant::now();
        let fail = |code: ErrorCode, message: String| {
            Ok(Response::new(pb::TriggerSnapshotResponse {
                error: top(ApiError::new(code, message)),
                ..Default::default()
            }))
        };
        // The snapshot must include everything applied when asked.
        let applied = self.shared.applied();
        let target = applied.last_applied.map_or(0, |l| l.index);
        let raft = &self.shared.raft;
        if let Err(e) = raft.trigger().snapshot().await {
            return fail(ErrorCode::Internal, format!("cannot build a snapshot: {e}"));
        }
        let built = raft
            .wait(Some(timeout))
            .metrics(
                |m| m.snapshot.is_some_and(|s| s.index >= target),
                "snapshot covers the applied index",
            )
            .await;
        if let Err(e) = built {
            return fail(
                ErrorCode::RequestTimedOut,
                format!("no snapshot up to index {target} within {timeout:?}: {e}"),
            );
        }
        let wait_ms = started.elapsed().as_secs_f64() * 1000.0;
        let figures = applied.snapshots.get();
        if req.purge_log {
            let upto = figures.last_index.unwrap_or(target);
            if let Err(e) = raft.trigger().purge_log(upto).await {
                return fail(ErrorCode::Internal, format!("cannot purge the log: {e}"));
            }
            // openraft purges once no replication still reads those entries;
            // wait for it within what is left of the timeout.
            let left = timeout.saturating_sub(started.elapsed());
            let _ = raft
                .wait(Some(left))
                .metrics(
                    |m| m.purged.is_some_and(|p| p.index >= upto),
                    "log purged up to the snapshot",
                )
                .await;
        }
        let purged_index = raft.metrics().borrow().purged.map_or(0, |p| p.index);
        Ok(Response::new(pb::TriggerSnapshotResponse {
            error: None,
            snapshot: Some(snapshot_to_pb(&figures)),
            purged_index,
            wait_ms,
        }))
    }
}

/// The wire form of a node's snapshot figures.
fn snapshot_to_pb(f: &keel_raft::SnapshotFigures) -> pb::SnapshotInfo {
    pb::SnapshotInfo {
        last_index: f.last_index.unwrap_or(0),
        size_bytes: f.size_bytes,
        image_bytes: f.image_bytes,
        build_ms: f.build_ms,
        encode_ms: f.encode_ms,
        load_ms: f.load_ms,
        decode_ms: f.decode_ms,
        load_source: match f.load_source {
            Some(keel_raft::SnapshotSource::Disk) => "disk",
            Some(keel_raft::SnapshotSource::Leader) => "leader",
            None => "",
        }
        .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// A handler dropped while it waits (its caller gave up) does not stop
    /// the membership change it started: that runs to its end.
    #[tokio::test]
    async fn a_change_runs_to_its_end_when_its_handler_is_dropped() {
        let finished = Arc::new(AtomicBool::new(false));
        let f = finished.clone();
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let (go_on_tx, go_on) = tokio::sync::oneshot::channel::<()>();
        let handler = tokio::spawn(to_the_end(async move {
            let _ = started_tx.send(());
            let _ = go_on.await;
            f.store(true, Ordering::SeqCst);
            Ok(())
        }));
        // The change is under way when its handler is dropped, and goes on
        // only after that.
        started.await.unwrap();
        handler.abort();
        assert!(handler.await.unwrap_err().is_cancelled());
        go_on_tx.send(()).unwrap();
        for _ in 0..100 {
            if finished.load(Ordering::SeqCst) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(finished.load(Ordering::SeqCst), "the change was cut short");

        // An answered change reports its error.
        let e = to_the_end(async { Err::<(), _>(ApiError::new(ErrorCode::InvalidRequest, "no")) })
            .await;
        assert_eq!(
            e.map_err(|e| e.code),
            Err(ErrorCode::InvalidRequest.as_i32())
        );
        assert_eq!(to_the_end(async { Ok(()) }).await, Ok(()));
    }

    /// Items refused before the decision keep their place: the decision's
    /// answers fill the others in the request's order.
    #[test]
    fn scram_items_refused_up_front_keep_their_place_among_the_decided() {
        use keel_metadata::MetadataRecord;
        use keel_proto::convert::{scram_deletion_to_pb, scram_upsertion_to_pb};

        let m = ScramMechanism::Sha256;
        let salt = [7u8; 32];
        let salted = ScramCredential::salted_password(m, b"pw", &salt, 4096).unwrap();
        let up = |user: &str| scram_upsertion_to_pb(user, m, 4096, &salt, &salted);
        let req = pb::AlterUserScramCredentialsRequest {
            upsertions: vec![
                up("alice"),
                pb::ScramCredentialUpsertion {
                    mechanism: 0,
                    ..up("bob")
                },
                up("carol"),
                up("alice"),
            ],
            deletions: vec![
                scram_deletion_to_pb("dave", ScramMechanism::Sha512),
                scram_deletion_to_pb("erin", m),
            ],
        };
        let asked = ScramChanges::from_pb(&req);
        assert_eq!(asked.upserts.len(), 1);
        assert_eq!(asked.deletions.len(), 2);
        let mut image = MetadataImage::new();
        let erin = MetadataRecord::UserScramCredential {
            user: "erin".into(),
            credential: asked.upserts[0].1.clone(),
        };
        image.replay(&erin, 1).unwrap();
        let d = image.decide_alter_scram(&asked.upserts, &asked.deletions);
        let codes: Vec<(String, ErrorCode)> = asked
            .merge(d.reply)
            .into_iter()
            .map(|(u, r)| (u, r.err().map_or(ErrorCode::None, |e| e.code)))
            .collect();
        let want = [
            ("alice", ErrorCode::DuplicateResource),
            ("bob", ErrorCode::UnsupportedSaslMechanism),
            ("carol", ErrorCode::None),
            ("alice", ErrorCode::DuplicateResource),
            ("dave", ErrorCode::ResourceNotFound),
            ("erin", ErrorCode::None),
        ];
        let want: Vec<(String, ErrorCode)> =
            want.iter().map(|(u, c)| (u.to_string(), *c)).collect();
        assert_eq!(codes, want);
        assert_eq!(d.records.len(), 2);
    }
}
