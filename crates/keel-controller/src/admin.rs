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
    config_op_from_pb, election_kind_from_pb, error_to_pb, item_results, partition_to_pb,
    scram_credential_info_to_pb, scram_deletion_from_pb, scram_upsertion_from_pb, Refused,
};
use keel_proto::pb;
use keel_proto::pb::admin_service_server::AdminService;
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use crate::authz::{caller_of, Caller, Checker};
use crate::budget::{admit_each, Admitted};
use crate::command::{CommandKind, DecideEnv, Proposal};
use crate::shared::{now_ms, Shared};
use keel_metadata::entry;

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
    fn super_users(&self) -> Arc<crate::authz::SuperUsers> {
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
        crate::authz::checker(&caller_of(req), image, &self.shared.super_users)
            .check(op, Resource::Cluster)
            .map_err(|e| error_to_pb(&e))
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

    /// Whether topic configs Keel does not know are taken (as given).
    fn unknown_configs(&self) -> keel_metadata::topic_config::UnknownConfigs {
        if self.shared.config.allow_unknown_topic_configs {
            keel_metadata::topic_config::UnknownConfigs::Allow
        } else {
            keel_metadata::topic_config::UnknownConfigs::Refuse
        }
    }

    /// The one path of every admin write (a forwarded Kafka request is
    /// one too), in Kafka's controller-write-event order:
    ///
    /// 1. an admin request slot and the node's write budget (a `Write`
    ///    session's writes hold their session's);
    /// 2. `parse`: the request converted and held to the static limits,
    ///    before anything is decided;
    /// 3. on the active controller's event loop, against the image the
    ///    loop holds: the caller's ACL on the cluster when the write is
    ///    cluster-wide (`cluster_op`; per-item ACLs are `decide`'s), then
    ///    `decide`, whose records are appended at once, atomically;
    /// 4. once they commit (or fail to), `answer` makes the response of
    ///    the reply.
    ///
    /// A refusal before the decision, or a failed commit, is the
    /// response's top-level typed error (NOT_CONTROLLER with the leader
    /// hint); a decision refuses per item in its reply. Nothing changes
    /// unless the records commit.
    async fn admin_write<M, R, P, T>(
        &self,
        req: Request<M>,
        kind: CommandKind,
        cluster_op: Option<Operation>,
        parse: impl FnOnce(M, &Shared) -> Result<P, ApiError>,
        decide: impl FnOnce(P, &MetadataImage, &mut DecideEnv, &Checker<'_>, &Asker) -> Proposal<T>
            + Send
            + 'static,
        answer: impl FnOnce(T) -> R,
    ) -> Result<Response<R>, Status>
    where
        M: Message,
        R: Refused,
        P: Send + 'static,
        T: Send + 'static,
    {
        let refused = |e: pb::Error| Ok(Response::new(R::refused(e)));
        let _slot = match self.slot(&req) {
            Ok(p) => p,
            Err(e) => return refused(error_to_pb(&e)),
        };
        let _admitted = self.admit(&req).await;
        let asker = Asker {
            caller: caller_of(&req),
            supers: self.super_users(),
        };
        let parsed = match parse(req.into_inner(), &self.shared) {
            Ok(p) => p,
            Err(e) => return refused(error_to_pb(&e)),
        };
        let who = asker.caller.principal().map(ToString::to_string);
        let decided = self
            .shared
            .submit_as(kind, who, move |image, env| {
                let checker = asker.checker(image);
                if let Some(op) = cluster_op {
                    if let Err(e) = checker.check(op, Resource::Cluster) {
                        return Proposal::with_reply(vec![], Err(e));
                    }
                }
                decide(parsed, image, env, &checker, &asker)
            })
            .await;
        match decided {
            Ok(reply) => Ok(Response::new(answer(reply))),
            Err(e) => refused(submit_refusal(&self.shared, e)),
        }
    }

    /// The one path of every admin read: an admin request slot; a
    /// linearizable read (only the active controller answers, once it has
    /// confirmed its leadership); the caller's ACL on the cluster when the
    /// read is cluster-wide (`cluster_op`; per-item ACLs are `answer`'s);
    /// then `answer` builds the response from the image. A refusal is the
    /// response's top-level typed error.
    async fn admin_read<M, R>(
        &self,
        req: Request<M>,
        cluster_op: Option<Operation>,
        answer: impl FnOnce(M, &MetadataImage, &Asker) -> Result<R, ApiError>,
    ) -> Result<Response<R>, Status>
    where
        R: Refused,
    {
        let refused = |e: pb::Error| Ok(Response::new(R::refused(e)));
        let _slot = match self.slot(&req) {
            Ok(p) => p,
            Err(e) => return refused(error_to_pb(&e)),
        };
        if let Err(e) = self.shared.linearizable().await {
            return refused(e);
        }
        let image = self.shared.image();
        if let Some(op) = cluster_op {
            if let Err(e) = self.check_cluster(&req, &image, op) {
                return refused(e);
            }
        }
        let asker = Asker {
            caller: caller_of(&req),
            supers: self.super_users(),
        };
        match answer(req.into_inner(), &image, &asker) {
            Ok(r) => Ok(Response::new(r)),
            Err(e) => refused(error_to_pb(&e)),
        }
    }

    /// The one path of a quorum membership change (openraft commits the
    /// membership itself; no metadata record): an admin request slot, this
    /// node must be the active controller and the caller needs ALTER on
    /// the cluster; then `change` runs on a task of its own, so that a
    /// caller who gives up (a deadline, a dropped connection) does not
    /// stop it halfway (a re-admitted voter would stay a learner nobody
    /// promotes), and `answer` makes the response of what it did.
    async fn membership_change<M, R, T, F>(
        &self,
        req: Request<M>,
        change: impl FnOnce(Arc<Shared>, M) -> F,
        answer: impl FnOnce(T) -> R,
    ) -> Result<Response<R>, Status>
    where
        R: Refused,
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, ApiError>> + Send + 'static,
    {
        let refused = |e: pb::Error| Ok(Response::new(R::refused(e)));
        let _slot = match self.slot(&req) {
            Ok(p) => p,
            Err(e) => return refused(error_to_pb(&e)),
        };
        if let Err(e) = self.shared.active_handle() {
            return refused(e);
        }
        if let Err(e) = self.check_cluster(&req, &self.shared.image(), Operation::Alter) {
            return refused(e);
        }
        match to_the_end(change(self.shared.clone(), req.into_inner())).await {
            Ok(t) => Ok(Response::new(answer(t))),
            Err(e) => refused(e),
        }
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

/// Who asks for an admin write, for its decision: the caller and the
/// node's super users.
struct Asker {
    caller: Caller,
    supers: Arc<crate::authz::SuperUsers>,
}

impl Asker {
    /// The caller's rights by `image`'s ACLs.
    fn checker<'a>(&'a self, image: &'a MetadataImage) -> Checker<'a> {
        crate::authz::checker(&self.caller, image, &self.supers)
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
        let (mut upserts, mut deletions) = (Vec::new(), Vec::new());
        let upserted = req
            .upsertions
            .iter()
            .map(|u| take_item(&u.user, &twice, || scram_upsertion_from_pb(u), &mut upserts));
        let deleted = req.deletions.iter().map(|d| {
            take_item(
                &d.user,
                &twice,
                || scram_deletion_from_pb(d),
                &mut deletions,
            )
        });
        let refused = upserted.chain(deleted).collect();
        Self {
            refused,
            upserts,
            deletions,
        }
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

/// One item of an AlterUserScramCredentials request: refused when its
/// user is named twice (whether or not it converts), else converted into
/// `decided` or refused with the conversion's error. Its user and refusal.
fn take_item<T>(
    user: &str,
    twice: &BTreeSet<&str>,
    convert: impl FnOnce() -> Result<T, ApiError>,
    decided: &mut Vec<T>,
) -> (String, Option<ApiError>) {
    let refusal = if twice.contains(user) {
        Some(duplicate_user(user))
    } else {
        match convert() {
            Ok(item) => {
                decided.push(item);
                None
            }
            Err(e) => Some(e),
        }
    };
    (user.to_string(), refusal)
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

/// The proposal of an ACL or credential change: once its records commit,
/// their audit lines, then the decision's reply.
fn audited<T: Send + 'static>(caller: &Caller, d: keel_metadata::Decision<T>) -> Proposal<T> {
    let records = d.records.clone();
    let caller = caller.clone();
    let reply = d.reply;
    Proposal::new(d.records, move |commit| {
        let index = commit?;
        log_access_changes(&caller, &records, index);
        Ok(reply)
    })
    .with_replayed(d.replayed)
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
fn submit_refusal(shared: &Shared, e: ApiError) -> pb::Error {
    if e.code == ErrorCode::NotController {
        let mut pe = shared.not_controller();
        pe.message = e.message;
        pe
    } else {
        error_to_pb(&e)
    }
}

/// A topic to create, as the decision takes it.
fn create_topic_from_pb(t: &pb::CreatableTopic) -> CreateTopic {
    CreateTopic {
        name: t.name.clone(),
        partitions: t.partitions,
        replication_factor: t.replication_factor,
        assignments: assignments_from_pb(&t.assignments),
        configs: t
            .configs
            .iter()
            .map(|c| (c.key.clone(), c.value.clone()))
            .collect(),
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
        let caller = caller_of(&req);
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
        let limits = self.shared.config.limits.clone();
        let unknown = self.unknown_configs();
        self.admin_write(
            req,
            CommandKind::CreateTopics,
            None,
            |req: pb::CreateTopicsRequest, shared| {
                let topics: Vec<CreateTopic> =
                    req.topics.iter().map(create_topic_from_pb).collect();
                shared.config.limits.check_create_topics(&topics)?;
                Ok((topics, req.validate_only))
            },
            move |(topics, validate_only), image, env, checker, _| {
                let rng = &mut env.rng;
                entry::create_topics(
                    image,
                    &topics,
                    validate_only,
                    unknown,
                    checker,
                    &limits,
                    rng,
                )
                .into()
            },
            |results| pb::CreateTopicsResponse {
                error: None,
                topics: item_results(results, |name, error, created| pb::CreateTopicResult {
                    name,
                    error,
                    topic_id: created
                        .as_ref()
                        .map(|c| c.topic_id.to_bytes().to_vec())
                        .unwrap_or_default(),
                    partitions: created.as_ref().map_or(0, |c| c.partitions),
                    replication_factor: created.as_ref().map_or(0, |c| c.replication_factor),
                }),
            },
        )
        .await
    }

    async fn delete_topics(
        &self,
        req: Request<pb::DeleteTopicsRequest>,
    ) -> Result<Response<pb::DeleteTopicsResponse>, Status> {
        self.admin_write(
            req,
            CommandKind::DeleteTopics,
            None,
            |req: pb::DeleteTopicsRequest, shared| {
                shared.config.limits.check_topic_count(req.names.len())?;
                Ok(req.names)
            },
            |names, image, _, _, asker| {
                let mut chain = keel_metadata::decide::Chain::new(image);
                let reply = chain.decide(|image| {
                    // Each step decides on the chain's image: its own
                    // checker, by that image's ACLs.
                    entry::delete_topics(image, &names, &asker.checker(image))
                });
                // Start these topics' deletion right away rather than at the
                // next tick (only these: others progress on the tick).
                let ids: Vec<keel_metadata::TopicId> = reply
                    .iter()
                    .filter_map(|(_, r)| r.as_ref().ok().copied())
                    .collect();
                let stop = crate::tasks::deletion_progress_of(&mut chain, &ids);
                crate::tasks::chain_proposal(chain, Ok(reply)).with_stop_replicas(stop)
            },
            |results| pb::DeleteTopicsResponse {
                error: None,
                topics: item_results(results, |name, error, _| pb::DeleteTopicResult {
                    name,
                    error,
                }),
            },
        )
        .await
    }

    async fn create_partitions(
        &self,
        req: Request<pb::CreatePartitionsRequest>,
    ) -> Result<Response<pb::CreatePartitionsResponse>, Status> {
        let limits = self.shared.config.limits.clone();
        self.admin_write(
            req,
            CommandKind::CreatePartitions,
            None,
            |req: pb::CreatePartitionsRequest, shared| {
                let items: Vec<CreatePartitions> = req
                    .topics
                    .iter()
                    .map(|t| CreatePartitions {
                        name: t.name.clone(),
                        total: t.total,
                        assignments: assignments_from_pb(&t.assignments),
                    })
                    .collect();
                shared.config.limits.check_create_partitions(&items)?;
                Ok((items, req.validate_only))
            },
            move |(items, validate_only), image, env, checker, _| {
                let rng = &mut env.rng;
                entry::create_partitions(image, &items, validate_only, checker, &limits, rng).into()
            },
            |results| pb::CreatePartitionsResponse {
                error: None,
                topics: item_results(results, |name, error, _| pb::CreatePartitionsResult {
                    name,
                    error,
                }),
            },
        )
        .await
    }

    async fn alter_partition_reassignments(
        &self,
        req: Request<pb::AlterPartitionReassignmentsRequest>,
    ) -> Result<Response<pb::AlterPartitionReassignmentsResponse>, Status> {
        self.admin_write(
            req,
            CommandKind::AlterReassignments,
            Some(Operation::Alter),
            |req: pb::AlterPartitionReassignmentsRequest, shared| {
                shared.config.limits.check_plan(req.partitions.len())?;
                Ok(req.partitions)
            },
            |items, image, _, _, _| {
                let mut results: Vec<((String, u32), Result<(), ApiError>)> = Vec::new();
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
                            results.push(((it.topic.clone(), it.partition), Ok(())));
                        }
                        Err(e) => results.push(((it.topic.clone(), it.partition), Err(e))),
                    }
                }
                let d = image.decide_alter_reassignments(&valid);
                for (ri, vi) in slots {
                    if let Some((_, r)) = d.reply.get(vi) {
                        results[ri].1 = r.clone();
                    }
                }
                Proposal::from(d.map_reply(|_| Ok(results)))
            },
            |results| pb::AlterPartitionReassignmentsResponse {
                error: None,
                partitions: item_results(results, |(topic, partition), error, _| {
                    pb::ReassignmentResult {
                        topic,
                        partition,
                        error,
                    }
                }),
            },
        )
        .await
    }

    async fn list_partition_reassignments(
        &self,
        req: Request<pb::ListPartitionReassignmentsRequest>,
    ) -> Result<Response<pb::ListPartitionReassignmentsResponse>, Status> {
        self.admin_read(req, Some(Operation::Describe), |req, image, _| {
            let wanted: BTreeSet<String> = req.topics.into_iter().collect();
            let reassignments = image
                .list_reassignments()
                .into_iter()
                .filter_map(|(tp, p)| {
                    let topic = topic_name(image, &tp);
                    (wanted.is_empty() || wanted.contains(&topic)).then(|| {
                        pb::OngoingReassignment {
                            topic,
                            partition: tp.partition.0,
                            replicas: p.replicas.iter().map(|b| b.0).collect(),
                            adding: p.adding.iter().map(|b| b.0).collect(),
                            removing: p.removing.iter().map(|b| b.0).collect(),
                        }
                    })
                })
                .collect();
            Ok(pb::ListPartitionReassignmentsResponse {
                error: None,
                reassignments,
            })
        })
        .await
    }

    async fn elect_leaders(
        &self,
        req: Request<pb::ElectLeadersRequest>,
    ) -> Result<Response<pb::ElectLeadersResponse>, Status> {
        self.admin_write(
            req,
            CommandKind::ElectLeaders,
            Some(Operation::Alter),
            |req: pb::ElectLeadersRequest, shared| {
                let kind: ElectionKind = election_kind_from_pb(req.election_type)?;
                shared.config.limits.check_plan(req.partitions.len())?;
                Ok((kind, req.partitions))
            },
            |(kind, wanted), image, _, _, _| {
                let mut results: Vec<((String, u32), Result<BrokerId, ApiError>)> = Vec::new();
                let d = if wanted.is_empty() {
                    image.decide_elect_leaders(kind, None)
                } else {
                    let mut tps = Vec::new();
                    for w in &wanted {
                        match resolve(image, &w.topic, w.partition) {
                            Ok(tp) => tps.push(tp),
                            Err(e) => results.push(((w.topic.clone(), w.partition), Err(e))),
                        }
                    }
                    image.decide_elect_leaders(kind, Some(&tps))
                };
                for (tp, r) in &d.reply {
                    results.push(((topic_name(image, tp), tp.partition.0), r.clone()));
                }
                Proposal::from(d.map_reply(|_| Ok(results)))
            },
            |results| pb::ElectLeadersResponse {
                error: None,
                partitions: item_results(results, |(topic, partition), error, leader| {
                    pb::ElectionResult {
                        topic,
                        partition,
                        error,
                        leader: leader.map(|b| b.0),
                    }
                }),
            },
        )
        .await
    }

    async fn describe_cluster(
        &self,
        req: Request<pb::DescribeClusterRequest>,
    ) -> Result<Response<pb::DescribeClusterResponse>, Status> {
        let shared = self.shared.clone();
        self.admin_read(req, None, move |_, image, asker| {
            let now = now_ms();
            let contacts: BTreeMap<BrokerId, u64> = match shared.heartbeats.lock() {
                Ok(t) => image
                    .brokers()
                    .filter_map(|b| {
                        t.last_contact_ms(b.id)
                            .map(|at| (b.id, now.saturating_sub(at)))
                    })
                    .collect(),
                Err(_) => BTreeMap::new(),
            };
            let reports = shared
                .broker_reports
                .lock()
                .map(|r| r.clone())
                .unwrap_or_default();
            let m = shared.raft.metrics().borrow().clone();
            let incarnations = asker.checker(image).may_see_incarnations();
            Ok(pb::DescribeClusterResponse {
                error: None,
                cluster_id: shared.config.cluster_id.clone(),
                controller_id: shared.config.node_id as u32,
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
            })
        })
        .await
    }

    async fn describe_topics(
        &self,
        req: Request<pb::DescribeTopicsRequest>,
    ) -> Result<Response<pb::DescribeTopicsResponse>, Status> {
        self.admin_read(req, None, |req, image, asker| {
            let names = req.names;
            let checker = asker.checker(image);
            let topics: Vec<pb::TopicDescription> = if names.is_empty() {
                // Only what the caller may describe; the rest is not there.
                let mut all: Vec<_> = image
                    .topics()
                    .filter(|t| checker.may(Operation::Describe, Resource::Topic(&t.name)))
                    .collect();
                all.sort_by(|a, b| a.name.cmp(&b.name));
                all.into_iter().map(|t| describe_topic(image, t)).collect()
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
                        Some(t) => describe_topic(image, t),
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
            Ok(pb::DescribeTopicsResponse {
                error: None,
                topics,
                cluster_defaults,
            })
        })
        .await
    }

    async fn describe_quorum(
        &self,
        req: Request<pb::DescribeQuorumRequest>,
    ) -> Result<Response<pb::DescribeQuorumResponse>, Status> {
        let shared = self.shared.clone();
        self.admin_read(req, Some(Operation::Describe), move |_, _, _| {
            Ok(crate::quorum::describe(&shared))
        })
        .await
    }

    async fn unregister_broker(
        &self,
        req: Request<pb::UnregisterBrokerRequest>,
    ) -> Result<Response<pb::UnregisterBrokerResponse>, Status> {
        let shared = self.shared.clone();
        self.admin_write(
            req,
            CommandKind::UnregisterBroker,
            Some(Operation::Alter),
            |req: pb::UnregisterBrokerRequest, _| Ok((BrokerId(req.broker_id), req.force)),
            move |(broker, force), image, _, _, _| {
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
            },
            |()| pb::UnregisterBrokerResponse { error: None },
        )
        .await
    }

    async fn incremental_alter_configs(
        &self,
        req: Request<pb::IncrementalAlterConfigsRequest>,
    ) -> Result<Response<pb::IncrementalAlterConfigsResponse>, Status> {
        let limits = self.shared.config.limits.clone();
        let unknown = self.unknown_configs();
        self.admin_write(
            req,
            CommandKind::AlterConfigs,
            None,
            |req: pb::IncrementalAlterConfigsRequest, shared| {
                let items = req
                    .topics
                    .into_iter()
                    .map(|t| {
                        let ops = t
                            .ops
                            .into_iter()
                            .map(config_op_from_pb)
                            .collect::<Result<Vec<_>, _>>()?;
                        Ok((t.topic, ops))
                    })
                    .collect::<Result<Vec<(String, Vec<ConfigOp>)>, keel_proto::convert::ConvertError>>()?;
                shared.config.limits.check_alter_configs(&items)?;
                Ok((items, req.validate_only))
            },
            move |(items, validate_only), image, _, checker, _| {
                entry::alter_configs(image, &items, validate_only, unknown, checker, &limits).into()
            },
            |results| pb::IncrementalAlterConfigsResponse {
                error: None,
                topics: item_results(results, |topic, error, _| pb::AlterConfigsResult {
                    topic,
                    error,
                }),
            },
        )
        .await
    }

    async fn add_voter(
        &self,
        req: Request<pb::AddVoterRequest>,
    ) -> Result<Response<pb::AddVoterResponse>, Status> {
        self.membership_change(
            req,
            |shared, req| async move {
                let options = crate::quorum::AddVoterOptions {
                    catch_up_wait: match req.timeout_ms {
                        0 => crate::quorum::CATCH_UP_WAIT,
                        ms => Duration::from_millis(ms),
                    },
                    learner_only: req.learner_only,
                };
                crate::quorum::add_voter(
                    &shared,
                    req.node_id,
                    req.address,
                    &req.directory_id,
                    options,
                )
                .await
            },
            |a| pb::AddVoterResponse {
                error: None,
                directory_id: a.directory.to_string(),
                learner: a.learner,
            },
        )
        .await
    }

    async fn remove_voter(
        &self,
        req: Request<pb::RemoveVoterRequest>,
    ) -> Result<Response<pb::RemoveVoterResponse>, Status> {
        self.membership_change(
            req,
            |shared, req| async move {
                crate::quorum::remove_voter(&shared, req.node_id, req.force, req.learner_only).await
            },
            |r| pb::RemoveVoterResponse {
                error: None,
                was_learner: r == crate::quorum::Removed::Learner,
            },
        )
        .await
    }

    async fn create_acls(
        &self,
        req: Request<pb::CreateAclsRequest>,
    ) -> Result<Response<pb::CreateAclsResponse>, Status> {
        self.admin_write(
            req,
            CommandKind::AlterAcls,
            Some(Operation::Alter),
            |req: pb::CreateAclsRequest, shared| {
                shared.config.limits.check_acls(req.bindings.len())?;
                let parsed: Vec<Result<keel_metadata::acl::AclBinding, ApiError>> = req
                    .bindings
                    .iter()
                    .map(|b| acl_binding_from_pb(b).map_err(ApiError::from))
                    .collect();
                Ok((req.bindings, parsed))
            },
            |(asked, parsed), image, _, _, asker| {
                let valid: Vec<_> = parsed.iter().filter_map(|r| r.clone().ok()).collect();
                let d = image.decide_create_acls(&valid).map_reply(|decided| {
                    let mut decided = decided.into_iter();
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
                    asked.into_iter().zip(results).collect::<Vec<_>>()
                });
                audited(&asker.caller, d)
            },
            |results| pb::CreateAclsResponse {
                error: None,
                results: item_results(results, |binding, error, _| pb::AclResult {
                    binding: Some(binding),
                    error,
                }),
            },
        )
        .await
    }

    async fn delete_acls(
        &self,
        req: Request<pb::DeleteAclsRequest>,
    ) -> Result<Response<pb::DeleteAclsResponse>, Status> {
        self.admin_write(
            req,
            CommandKind::AlterAcls,
            Some(Operation::Alter),
            |req: pb::DeleteAclsRequest, shared| {
                shared.config.limits.check_acls(req.filters.len())?;
                Ok(req
                    .filters
                    .iter()
                    .map(acl_filter_from_pb)
                    .collect::<Result<Vec<_>, _>>()?)
            },
            |filters, image, _, _, asker| {
                audited(&asker.caller, image.decide_delete_acls(&filters))
            },
            |removed| pb::DeleteAclsResponse {
                error: None,
                results: removed
                    .into_iter()
                    .map(|gone| pb::DeleteAclsResult {
                        removed: gone.iter().map(acl_binding_to_pb).collect(),
                    })
                    .collect(),
            },
        )
        .await
    }

    async fn describe_acls(
        &self,
        req: Request<pb::DescribeAclsRequest>,
    ) -> Result<Response<pb::DescribeAclsResponse>, Status> {
        self.admin_read(req, Some(Operation::Describe), |req, image, _| {
            let filter = match req.filter.as_ref().map(acl_filter_from_pb) {
                None => Default::default(),
                Some(f) => f?,
            };
            Ok(pb::DescribeAclsResponse {
                error: None,
                bindings: filter
                    .select(image)
                    .into_iter()
                    .map(acl_binding_to_pb)
                    .collect(),
            })
        })
        .await
    }

    async fn alter_user_scram_credentials(
        &self,
        req: Request<pb::AlterUserScramCredentialsRequest>,
    ) -> Result<Response<pb::AlterUserScramCredentialsResponse>, Status> {
        self.admin_write(
            req,
            CommandKind::AlterScramCredentials,
            Some(Operation::Alter),
            |req: pb::AlterUserScramCredentialsRequest, _| {
                let items = req.upsertions.len() + req.deletions.len();
                if items > MAX_SCRAM_CREDENTIALS {
                    return Err(ApiError::new(
                        ErrorCode::PolicyViolation,
                        format!(
                            "the request changes {items} credentials; at most {MAX_SCRAM_CREDENTIALS} at once"
                        ),
                    ));
                }
                Ok(ScramChanges::from_pb(&req))
            },
            |asked, image, _, _, asker| {
                let d = image.decide_alter_scram(&asked.upserts, &asked.deletions);
                audited(&asker.caller, d.map_reply(|decided| asked.merge(decided)))
            },
            |results| pb::AlterUserScramCredentialsResponse {
                error: None,
                results: item_results(results, |user, error, _| pb::UserResult { user, error }),
            },
        )
        .await
    }

    async fn describe_user_scram_credentials(
        &self,
        req: Request<pb::DescribeUserScramCredentialsRequest>,
    ) -> Result<Response<pb::DescribeUserScramCredentialsResponse>, Status> {
        self.admin_read(req, Some(Operation::Describe), |req, image, _| {
            Ok(pb::DescribeUserScramCredentialsResponse {
                error: None,
                results: describe_scram(image, &req.users),
            })
        })
        .await
    }

    async fn alter_cluster_configs(
        &self,
        req: Request<pb::AlterClusterConfigsRequest>,
    ) -> Result<Response<pb::AlterClusterConfigsResponse>, Status> {
        let limits = self.shared.config.limits.clone();
        let unknown = self.unknown_configs();
        self.admin_write(
            req,
            CommandKind::AlterConfigs,
            Some(Operation::AlterConfigs),
            |req: pb::AlterClusterConfigsRequest, shared| {
                let ops: Vec<ConfigOp> = req
                    .ops
                    .into_iter()
                    .map(config_op_from_pb)
                    .collect::<Result<_, _>>()?;
                shared
                    .config
                    .limits
                    .check_alter_configs(&[("cluster defaults".to_string(), ops.clone())])?;
                Ok((ops, req.validate_only))
            },
            move |(ops, validate_only), image, _, _, _| {
                entry::alter_cluster_configs(image, &ops, validate_only, unknown, &limits).into()
            },
            |r| pb::AlterClusterConfigsResponse {
                error: r.err().and_then(top),
            },
        )
        .await
    }

    async fn describe_cluster_configs(
        &self,
        req: Request<pb::DescribeClusterConfigsRequest>,
    ) -> Result<Response<pb::DescribeClusterConfigsResponse>, Status> {
        self.admin_read(req, Some(Operation::DescribeConfigs), |_, image, _| {
            Ok(pb::DescribeClusterConfigsResponse {
                error: None,
                configs: config_entries(image.cluster_configs()),
            })
        })
        .await
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
        let refused = |e: pb::Error| Ok(Response::new(pb::TriggerSnapshotResponse::refused(e)));
        let _slot = match self.slot(&req) {
            Ok(p) => p,
            Err(e) => return refused(error_to_pb(&e)),
        };
        if let Err(e) = self.check_cluster(&req, &self.shared.image(), Operation::Alter) {
            return refused(e);
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
