//! Kafka's admin APIs, forwarded to the active controller: each Kafka
//! request becomes calls of Keel's own admin API (so the controller makes
//! every decision on its one path, with its own validation and ACLs), and
//! the answers become Kafka's, with Kafka's error codes mapped from Keel's
//! typed codes (never from message text).
//!
//! The broker checks only what Keel's messages cannot carry (a negative
//! count, a null config value, a name given twice in one request), as
//! Kafka's own broker does before it forwards.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse as IncrementalResult;
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse, BrokerId, CreatePartitionsRequest,
    CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest,
    DeleteTopicsResponse, DescribeConfigsRequest, DescribeConfigsResponse, ElectLeadersRequest,
    ElectLeadersResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, CreateAclsRequest,
    CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use keel_metadata::topic_config::{effective, ConfigSource, ConfigType};
use keel_metadata::ErrorCode;
use keel_proto::pb;
use uuid::Uuid;

use crate::forward::{AdminCall, AdminReply, ForwardError, OnBehalf};
use crate::view::{kafka_id, ClusterView};

/// Kafka's resource types (`ConfigResource.Type`).
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const RESOURCE_BROKER_LOGGER: i8 = 8;

/// Kafka's config sources (`DescribeConfigsResponse.ConfigSource`).
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_DEFAULT: i8 = 5;

/// Kafka's IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// How long a forwarded request may take when it names no timeout.
pub const DEFAULT_FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

pub use crate::error::KafkaError;

/// Kafka's error for one of Keel's typed codes.
pub fn kafka_error_code(code: ErrorCode) -> ResponseError {
    use ErrorCode as K;
    use ResponseError as R;
    match code {
        // Callers check `None` first; here it is a bug, not success.
        K::None | K::Internal => R::UnknownServerError,
        K::NotController => R::NotController,
        K::TopicAlreadyExists => R::TopicAlreadyExists,
        K::UnknownTopic | K::UnknownPartition | K::TopicDeletionInProgress => {
            R::UnknownTopicOrPartition
        }
        K::InvalidReplicationFactor => R::InvalidReplicationFactor,
        K::InvalidTopicName => R::InvalidTopicException,
        K::NoReplicaOnline | K::EligibleLeadersNotAvailable => R::EligibleLeadersNotAvailable,
        K::ReassignmentInProgress => R::ReassignmentInProgress,
        K::InvalidPartitions => R::InvalidPartitions,
        K::InvalidReplicaAssignment | K::UnknownBroker | K::IneligibleReplica => {
            R::InvalidReplicaAssignment
        }
        K::InvalidRequest | K::InvalidQuorumChange => R::InvalidRequest,
        K::NoReassignmentInProgress => R::NoReassignmentInProgress,
        K::ElectionNotNeeded => R::ElectionNotNeeded,
        K::PreferredLeaderNotAvailable => R::PreferredLeaderNotAvailable,
        K::InvalidConfig => R::InvalidConfig,
        K::RequestTimedOut => R::RequestTimedOut,
        K::TopicAuthorizationFailed => R::TopicAuthorizationFailed,
        K::ClusterAuthorizationFailed => R::ClusterAuthorizationFailed,
        K::PolicyViolation => R::PolicyViolation,
        K::ThrottlingQuotaExceeded => R::ThrottlingQuotaExceeded,
        K::StorageFull => R::KafkaStorageError,
        K::ResourceNotFound => R::ResourceNotFound,
        K::DuplicateResource => R::DuplicateResource,
        K::UnacceptableCredential => R::UnacceptableCredential,
        K::SaslAuthenticationFailed => R::SaslAuthenticationFailed,
        K::UnsupportedSaslMechanism => R::UnsupportedSaslMechanism,
        K::IllegalSaslState => R::IllegalSaslState,
        K::StaleControllerEpoch
        | K::UnconfirmedControllerEpoch
        | K::StaleBrokerEpoch
        | K::FencedLeaderEpoch
        | K::InvalidPartitionEpoch
        | K::DuplicateBrokerRegistration
        | K::InconsistentClusterId
        | K::BrokerFenced
        | K::NotLeaderOrFollower
        | K::BrokerNotFenced => R::UnknownServerError,
    }
}

/// Kafka's error for Keel's error in an answer (none: success).
fn from_pb(e: Option<&pb::Error>) -> KafkaError {
    match e {
        None => KafkaError::none(),
        Some(e) if e.code == 0 => KafkaError::none(),
        Some(e) => {
            let code = ErrorCode::from_i32(e.code)
                .map_or(ResponseError::UnknownServerError, kafka_error_code);
            KafkaError::new(code, e.message.clone())
        }
    }
}

/// Kafka's error for a call that got no answer.
fn from_forward(e: &ForwardError) -> KafkaError {
    let code = match e {
        ForwardError::NoController(_) | ForwardError::NotForwarding => ResponseError::NotController,
        ForwardError::OutcomeUnknown(_) => ResponseError::RequestTimedOut,
    };
    KafkaError::new(code, e.to_string())
}

/// A lost answer to a create, delete or partition change sent with
/// `timeout_ms <= 0`. Keel answers REQUEST_TIMED_OUT when a forwarded
/// write's outcome is unknown (it may never have been applied), but to
/// Kafka clients REQUEST_TIMED_OUT on such a request means "started, it
/// will complete", and librdkafka reports it as success. So these requests
/// get NOT_CONTROLLER instead: retriable, and never read as success (a
/// retry that finds the change done says so with its own error).
fn async_safe(timeout_ms: i32, e: Option<KafkaError>) -> Option<KafkaError> {
    match e {
        Some(e) if timeout_ms <= 0 && e.code == ResponseError::RequestTimedOut.code() => {
            Some(KafkaError::new(
                ResponseError::NotController,
                format!(
                    "the active controller changed while the request was in flight; it may or may not have been applied ({})",
                    e.message.unwrap_or_default()
                ),
            ))
        }
        e => e,
    }
}

/// The deadline a request's `timeout_ms` gives (none or nonsense: the default).
pub fn deadline(timeout_ms: i32) -> Duration {
    match u64::try_from(timeout_ms) {
        Ok(ms) if ms > 0 => Duration::from_millis(ms).min(DEFAULT_FORWARD_TIMEOUT),
        _ => DEFAULT_FORWARD_TIMEOUT,
    }
}

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn tn(v: impl Into<String>) -> TopicName {
    TopicName(s(v))
}

fn ids(v: &[u32]) -> Vec<BrokerId> {
    v.iter().map(|b| BrokerId(kafka_id(*b))).collect()
}

/// Broker ids as Keel's: a negative id names no broker.
fn keel_ids(v: &[BrokerId]) -> Option<Vec<u32>> {
    v.iter().map(|b| u32::try_from(b.0).ok()).collect()
}

fn topic_id(bytes: &[u8]) -> Uuid {
    <[u8; 16]>::try_from(bytes).map_or(Uuid::nil(), Uuid::from_bytes)
}

/// The answer of one kind of forwarded call.
trait Reply: Sized {
    /// The answer, if `r` is of this kind.
    fn take(r: AdminReply) -> Option<Self>;
}

macro_rules! replies {
    ($($variant:ident => $answer:ident),* $(,)?) => {
        $(impl Reply for pb::$answer {
            fn take(r: AdminReply) -> Option<Self> {
                match r {
                    AdminReply::$variant(x) => Some(x),
                    _ => None,
                }
            }
        })*
    };
}

replies!(
    CreateTopics => CreateTopicsResponse,
    DeleteTopics => DeleteTopicsResponse,
    CreatePartitions => CreatePartitionsResponse,
    DescribeTopics => DescribeTopicsResponse,
    IncrementalAlterConfigs => IncrementalAlterConfigsResponse,
    ElectLeaders => ElectLeadersResponse,
    AlterPartitionReassignments => AlterPartitionReassignmentsResponse,
    ListPartitionReassignments => ListPartitionReassignmentsResponse,
    AlterClusterConfigs => AlterClusterConfigsResponse,
    DescribeClusterConfigs => DescribeClusterConfigsResponse,
    CreateAcls => CreateAclsResponse,
    DeleteAcls => DeleteAclsResponse,
    DescribeAcls => DescribeAclsResponse,
    AlterUserScramCredentials => AlterUserScramCredentialsResponse,
    DescribeUserScramCredentials => DescribeUserScramCredentialsResponse,
);

/// The one path every forwarded admin call takes: sent to the active
/// controller on behalf of the client, answered with the reply of its
/// kind, or with the error of the whole call (no answer, the answer's own
/// top-level error, or an answer of another kind: the forwarder broke its
/// contract).
async fn ask<R: Reply>(
    fwd: &OnBehalf<'_>,
    c: AdminCall,
    deadline: Duration,
) -> Result<R, KafkaError> {
    let r = fwd
        .forward(c, deadline)
        .await
        .map_err(|e| from_forward(&e))?;
    let e = from_pb(r.error());
    if e.code != 0 {
        return Err(e);
    }
    R::take(r).ok_or_else(|| {
        from_forward(&ForwardError::NoController(
            "the forwarder answered a different call".into(),
        ))
    })
}

/// The answer to the items of a request that were sent on in one call
/// (`None`: every item was refused here, nothing was sent).
struct Batch<R>(Option<Result<R, KafkaError>>);

impl<R: Reply> Batch<R> {
    /// Sends `items` in the call `call` makes of them, unless there are
    /// none.
    async fn send<T>(
        fwd: &OnBehalf<'_>,
        items: Vec<T>,
        call: impl FnOnce(Vec<T>) -> AdminCall,
        deadline: Duration,
    ) -> Self {
        if items.is_empty() {
            return Batch(None);
        }
        Batch(Some(ask(fwd, call(items), deadline).await))
    }

    /// Sends the `items` of a write as [`Batch::send`] does, within the
    /// request's `timeout_ms`, and reads a lost answer as
    /// [`Batch::async_safe`] says.
    async fn send_write<T>(
        fwd: &OnBehalf<'_>,
        items: Vec<T>,
        call: impl FnOnce(Vec<T>) -> AdminCall,
        timeout_ms: i32,
    ) -> Self {
        Self::send(fwd, items, call, deadline(timeout_ms))
            .await
            .async_safe(timeout_ms)
    }

    /// A lost answer to a write sent with `timeout_ms <= 0` reads as
    /// NOT_CONTROLLER (see [`async_safe`]).
    fn async_safe(self, timeout_ms: i32) -> Self {
        Batch(self.0.map(|r| {
            r.map_err(|e| async_safe(timeout_ms, Some(e)).unwrap_or_else(KafkaError::none))
        }))
    }

    /// The reply, when one came.
    fn reply(&self) -> Option<&R> {
        self.0.as_ref().and_then(|r| r.as_ref().ok())
    }

    /// The error of the whole call, when it failed.
    fn failed(&self) -> Option<&KafkaError> {
        self.0.as_ref().and_then(|r| r.as_ref().err())
    }

    /// The reply's items (`items` picks them) by name: how each item asked
    /// for finds its own answer. Empty when no reply came.
    fn by_name<'a, T: Named>(
        &'a self,
        items: impl FnOnce(&'a R) -> &'a [T],
    ) -> BTreeMap<&'a str, &'a T> {
        self.reply()
            .map(|r| items(r).iter().map(|t| (t.name(), t)).collect())
            .unwrap_or_default()
    }

    /// The error of item `i` of a request: the one found before sending
    /// (in `local`), else what [`Batch::item`] says of it.
    fn item_or_local(
        &self,
        local: &BTreeMap<usize, KafkaError>,
        i: usize,
        own: Option<Option<&pb::Error>>,
        what: &str,
    ) -> KafkaError {
        match local.get(&i) {
            Some(e) => e.clone(),
            None => self.item(own, what),
        }
    }

    /// The error of one item that was sent: the whole call's, else its own
    /// answer's (`own`; `None`: the reply does not name it).
    fn item(&self, own: Option<Option<&pb::Error>>, what: &str) -> KafkaError {
        match (self.failed(), own) {
            (Some(e), _) => e.clone(),
            (None, Some(e)) => from_pb(e),
            (None, None) => KafkaError::new(
                ResponseError::UnknownServerError,
                format!("the controller did not answer for this {what}"),
            ),
        }
    }
}

/// An item of a reply that names the topic it answers for.
trait Named {
    /// The topic's name.
    fn name(&self) -> &str;
}

macro_rules! named {
    ($($t:ty),* $(,)?) => {
        $(impl Named for $t {
            fn name(&self) -> &str {
                &self.name
            }
        })*
    };
}

named!(
    pb::CreateTopicResult,
    pb::DeleteTopicResult,
    pb::CreatePartitionsResult,
    pb::TopicDescription,
);

/// The distinct topic names among the resources of a configs request
/// (each a resource type and name), in order.
fn topic_names<N: ToString>(resources: impl Iterator<Item = (i8, N)>) -> Vec<String> {
    resources
        .filter(|(ty, _)| *ty == RESOURCE_TOPIC)
        .map(|(_, name)| name.to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The keys that stand more than once in `keys`.
fn repeated<K: Ord + Clone>(keys: impl IntoIterator<Item = K>) -> BTreeSet<K> {
    let mut seen = BTreeSet::new();
    keys.into_iter()
        .filter(|k| !seen.insert(k.clone()))
        .collect()
}

// ---- CreateTopics -----------------------------------------------------------

/// CreateTopics (v2-7): each topic converted, the valid ones sent in one
/// call (with `validate_only`), every topic answered in the request's order.
pub async fn create_topics(
    req: CreateTopicsRequest,
    version: i16,
    fwd: &OnBehalf<'_>,
) -> CreateTopicsResponse {
    let dups = repeated(req.topics.iter().map(|t| t.name.0.to_string()));
    let mut local: BTreeMap<usize, KafkaError> = BTreeMap::new();
    let mut sent = Vec::new();
    for (i, t) in req.topics.iter().enumerate() {
        let name = t.name.0.to_string();
        if dups.contains(&name) {
            local.insert(
                i,
                KafkaError::new(ResponseError::InvalidRequest, "Duplicate topic name."),
            );
            continue;
        }
        match creatable(t) {
            Ok(c) => sent.push(c),
            Err(e) => {
                local.insert(i, e);
            }
        }
    }
    let validate_only = req.validate_only;
    let call = |topics| {
        AdminCall::CreateTopics(pb::CreateTopicsRequest {
            topics,
            validate_only,
        })
    };
    let batch =
        Batch::<pb::CreateTopicsResponse>::send_write(fwd, sent, call, req.timeout_ms).await;
    let by_name: BTreeMap<&str, &pb::CreateTopicResult> = batch.by_name(|r| &r.topics);
    let topics = req
        .topics
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let base = CreatableTopicResult::default()
                .with_name(t.name.clone())
                .with_num_partitions(-1)
                .with_replication_factor(-1);
            let own = by_name.get(t.name.0.as_str()).map(|r| r.error.as_ref());
            let err = batch.item_or_local(&local, i, own, "topic");
            if err.code != 0 {
                return base.with_error_code(err.code).with_error_message(err.msg());
            }
            let Some(r) = by_name.get(t.name.0.as_str()) else {
                return base;
            };
            let out = base
                .with_num_partitions(i32::try_from(r.partitions).unwrap_or(i32::MAX))
                .with_replication_factor(i16::try_from(r.replication_factor).unwrap_or(i16::MAX));
            if version >= 7 {
                out.with_topic_id(topic_id(&r.topic_id))
            } else {
                out
            }
        })
        .collect();
    CreateTopicsResponse::default().with_topics(topics)
}

/// A count of a CreateTopics request: `default` for Kafka's -1, else the
/// count, which must not be negative (`invalid` otherwise).
fn count_or_default(n: i32, default: u32, invalid: KafkaError) -> Result<u32, KafkaError> {
    match n {
        -1 => Ok(default),
        n => u32::try_from(n).map_err(|_| invalid),
    }
}

/// One topic of a CreateTopics request as Keel's. Kafka's -1 counts mean
/// "the default": one partition and one replica (Kafka's `num.partitions`
/// and `default.replication.factor`), or, with an explicit assignment, the
/// counts the assignment gives.
fn creatable(
    t: &kafka_protocol::messages::create_topics_request::CreatableTopic,
) -> Result<pb::CreatableTopic, KafkaError> {
    let explicit = !t.assignments.is_empty();
    if explicit && (t.num_partitions != -1 || t.replication_factor != -1) {
        return Err(KafkaError::new(
            ResponseError::InvalidRequest,
            "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
        ));
    }
    let default = if explicit { 0 } else { 1 };
    let partitions = count_or_default(
        t.num_partitions,
        default,
        KafkaError::new(
            ResponseError::InvalidPartitions,
            "Number of partitions must be larger than 0, or -1 to use the default value.",
        ),
    )?;
    let replication_factor = count_or_default(
        t.replication_factor.into(),
        default,
        KafkaError::new(
            ResponseError::InvalidReplicationFactor,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        ),
    )?;
    let mut assignments = Vec::new();
    for a in &t.assignments {
        let (Ok(partition), Some(replicas)) =
            (u32::try_from(a.partition_index), keel_ids(&a.broker_ids))
        else {
            return Err(KafkaError::new(
                ResponseError::InvalidReplicaAssignment,
                format!(
                    "partition {} is assigned to {:?}",
                    a.partition_index, a.broker_ids
                ),
            ));
        };
        assignments.push(pb::ReplicaAssignment {
            partition,
            replicas,
        });
    }
    let mut configs = Vec::new();
    for c in &t.configs {
        let Some(value) = &c.value else {
            return Err(KafkaError::new(
                ResponseError::InvalidConfig,
                format!(
                    "Null value not supported for topic configs: {}",
                    c.name.as_str()
                ),
            ));
        };
        configs.push(pb::ConfigEntry {
            key: c.name.to_string(),
            value: value.to_string(),
        });
    }
    Ok(pb::CreatableTopic {
        name: t.name.0.to_string(),
        partitions,
        replication_factor,
        assignments,
        configs,
    })
}

// ---- DeleteTopics -----------------------------------------------------------

/// DeleteTopics (v1-6): by name, or (v6) by id, resolved through the
/// broker's cache; one call for every valid topic.
pub async fn delete_topics(
    req: DeleteTopicsRequest,
    version: i16,
    view: &ClusterView,
    fwd: &OnBehalf<'_>,
) -> DeleteTopicsResponse {
    let mut asked = asked_topics(&req, version, view);
    let twice = repeated(
        asked
            .iter()
            .filter_map(|(_, _, r)| r.as_ref().ok().cloned()),
    );
    for (_, _, r) in asked.iter_mut() {
        if matches!(r, Ok(n) if twice.contains(n)) {
            *r = Err(KafkaError::new(
                ResponseError::InvalidRequest,
                "Duplicate topic in request.",
            ));
        }
    }
    let names: Vec<String> = asked
        .iter()
        .filter_map(|(_, _, r)| r.as_ref().ok().cloned())
        .collect();
    let call = |names| AdminCall::DeleteTopics(pb::DeleteTopicsRequest { names });
    let batch =
        Batch::<pb::DeleteTopicsResponse>::send_write(fwd, names, call, req.timeout_ms).await;
    let by_name: BTreeMap<&str, &pb::DeleteTopicResult> = batch.by_name(|r| &r.topics);
    let responses = asked
        .iter()
        .map(|(name, id, resolved)| {
            let err = match resolved {
                Err(e) => e.clone(),
                Ok(n) => batch.item(by_name.get(n.as_str()).map(|r| r.error.as_ref()), "topic"),
            };
            let out_name = resolved.as_ref().ok().cloned().or(name.clone());
            let out_id = if id.is_nil() {
                out_name
                    .as_deref()
                    .and_then(|n| view.topics.get(n))
                    .map_or(Uuid::nil(), |t| Uuid::from_u128(t.id))
            } else {
                *id
            };
            let r = DeletableTopicResult::default()
                .with_name(out_name.map(tn))
                .with_error_code(err.code);
            let r = if version >= 5 {
                r.with_error_message(err.msg())
            } else {
                r
            };
            if version >= 6 {
                r.with_topic_id(out_id)
            } else {
                r
            }
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}

/// The topics a DeleteTopics request names, each as (name as asked, id
/// as asked, the name to delete or the error): by name, or (v6) by name or
/// by id resolved through the broker's cache.
fn asked_topics(
    req: &DeleteTopicsRequest,
    version: i16,
    view: &ClusterView,
) -> Vec<(Option<String>, Uuid, Result<String, KafkaError>)> {
    let mut asked: Vec<(Option<String>, Uuid, Result<String, KafkaError>)> = Vec::new();
    if version >= 6 {
        for t in &req.topics {
            let name = t.name.as_ref().map(|n| n.0.to_string());
            let resolved = match (&name, t.topic_id.is_nil()) {
                (Some(_), false) => Err(KafkaError::new(
                    ResponseError::InvalidRequest,
                    "A topic is named both by name and by id.",
                )),
                (Some(n), true) => Ok(n.clone()),
                (None, false) => view
                    .topic_by_id(t.topic_id.as_u128())
                    .map(|(n, _)| n.to_string())
                    .ok_or_else(|| {
                        KafkaError::new(
                            ResponseError::UnknownTopicId,
                            "This server does not host this topic ID.",
                        )
                    }),
                (None, true) => Err(KafkaError::new(
                    ResponseError::InvalidRequest,
                    "A topic is named neither by name nor by id.",
                )),
            };
            asked.push((name, t.topic_id, resolved));
        }
    } else {
        for n in &req.topic_names {
            asked.push((Some(n.0.to_string()), Uuid::nil(), Ok(n.0.to_string())));
        }
    }
    asked
}

// ---- CreatePartitions -------------------------------------------------------

/// CreatePartitions (v0-3): the new totals, with explicit assignments for
/// the new partitions numbered from the count the broker's cache knows.
pub async fn create_partitions(
    req: CreatePartitionsRequest,
    view: &ClusterView,
    fwd: &OnBehalf<'_>,
) -> CreatePartitionsResponse {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for t in &req.topics {
        *count.entry(t.name.0.to_string()).or_default() += 1;
    }
    let mut local: BTreeMap<usize, KafkaError> = BTreeMap::new();
    let mut sent = Vec::new();
    for (i, t) in req.topics.iter().enumerate() {
        let name = t.name.0.to_string();
        if count[&name] > 1 {
            local.insert(
                i,
                KafkaError::new(ResponseError::InvalidRequest, "Duplicate topic in request."),
            );
            continue;
        }
        let Ok(total) = u32::try_from(t.count) else {
            local.insert(
                i,
                KafkaError::new(
                    ResponseError::InvalidPartitions,
                    format!("Number of partitions {} is negative.", t.count),
                ),
            );
            continue;
        };
        let first = view
            .topics
            .get(&name)
            .map_or(0, |v| v.partitions.len() as u32);
        let mut assignments = Vec::new();
        let mut bad = None;
        for (k, a) in t.assignments.iter().flatten().enumerate() {
            match keel_ids(&a.broker_ids) {
                Some(replicas) => assignments.push(pb::ReplicaAssignment {
                    partition: first + k as u32,
                    replicas,
                }),
                None => {
                    bad = Some(KafkaError::new(
                        ResponseError::InvalidReplicaAssignment,
                        format!("assignment {:?} names a negative broker id", a.broker_ids),
                    ))
                }
            }
        }
        if let Some(e) = bad {
            local.insert(i, e);
            continue;
        }
        sent.push(pb::CreatePartitionsTopic {
            name,
            total,
            assignments,
        });
    }
    let validate_only = req.validate_only;
    let call = |topics| {
        AdminCall::CreatePartitions(pb::CreatePartitionsRequest {
            topics,
            validate_only,
        })
    };
    let batch =
        Batch::<pb::CreatePartitionsResponse>::send_write(fwd, sent, call, req.timeout_ms).await;
    let by_name: BTreeMap<&str, &pb::CreatePartitionsResult> = batch.by_name(|r| &r.topics);
    let results = req
        .topics
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let own = by_name.get(t.name.0.as_str()).map(|r| r.error.as_ref());
            let err = batch.item_or_local(&local, i, own, "topic");
            CreatePartitionsTopicResult::default()
                .with_name(t.name.clone())
                .with_error_code(err.code)
                .with_error_message(err.msg())
        })
        .collect();
    CreatePartitionsResponse::default().with_results(results)
}

// ---- DescribeConfigs --------------------------------------------------------

/// Kafka's `ConfigType` number of a topic config (DescribeConfigs v3+).
fn config_type(ty: ConfigType) -> i8 {
    match ty {
        ConfigType::Boolean => 1,
        ConfigType::String | ConfigType::Enum(_) => 2,
        ConfigType::Int { .. } => 3,
        ConfigType::Long { .. } => 5,
        ConfigType::Double { .. } => 6,
        ConfigType::EnumList(_) | ConfigType::ReplicaList => 7,
    }
}

/// One DescribeConfigs entry.
fn config_entry(
    name: &str,
    value: &str,
    source: i8,
    ty: Option<i8>,
    version: i16,
) -> DescribeConfigsResourceResult {
    let e = DescribeConfigsResourceResult::default()
        .with_name(s(name))
        .with_value(Some(s(value)))
        .with_read_only(false)
        .with_config_source(source)
        .with_is_sensitive(false);
    if version >= 3 {
        e.with_config_type(ty.unwrap_or(0))
    } else {
        e
    }
}

/// A topic's configs as DescribeConfigs lists them ([`effective`]: every
/// config Kafka defines with its value and source, then any other key set
/// on it, for a controller that carries unknown configs); only `keys` when
/// given.
fn topic_configs(
    set: &[pb::ConfigEntry],
    defaults: &[pb::ConfigEntry],
    keys: Option<&BTreeSet<String>>,
    version: i16,
) -> Vec<DescribeConfigsResourceResult> {
    effective(
        &keel_proto::convert::config_map(set),
        &keel_proto::convert::config_map(defaults),
    )
    .into_iter()
    .filter(|e| keys.is_none_or(|ks| ks.contains(e.name)))
    .map(|e| {
        let source = match e.source {
            ConfigSource::Topic => SOURCE_DYNAMIC_TOPIC,
            ConfigSource::ClusterDefault => SOURCE_DYNAMIC_DEFAULT_BROKER,
            ConfigSource::Default => SOURCE_DEFAULT,
        };
        config_entry(
            e.name,
            e.value,
            source,
            e.def.map(|d| config_type(d.ty)),
            version,
        )
    })
    .collect()
}

/// The cluster-wide defaults as a broker's DescribeConfigs lists them:
/// under Kafka's broker name of each (`log.retention.ms`), as dynamic
/// default broker configs; only `keys` when given.
fn default_configs(
    defaults: &[pb::ConfigEntry],
    keys: Option<&BTreeSet<String>>,
    version: i16,
) -> Vec<DescribeConfigsResourceResult> {
    defaults
        .iter()
        .filter_map(|c| {
            let name = keel_metadata::topic_config::broker_synonym(&c.key).unwrap_or(&c.key);
            let ty = keel_metadata::topic_config::lookup(&c.key).map(|d| config_type(d.ty));
            keys.is_none_or(|ks| ks.contains(name))
                .then(|| config_entry(name, &c.value, SOURCE_DYNAMIC_DEFAULT_BROKER, ty, version))
        })
        .collect()
}

/// DescribeConfigs (v1-4): topics from one DescribeTopics call; a broker
/// (or its loggers) has no configs Keel keeps, so its list is empty.
pub async fn describe_configs(
    req: DescribeConfigsRequest,
    version: i16,
    fwd: &OnBehalf<'_>,
) -> DescribeConfigsResponse {
    let names = topic_names(
        req.resources
            .iter()
            .map(|r| (r.resource_type, &r.resource_name)),
    );
    let batch = Batch::<pb::DescribeTopicsResponse>::send(
        fwd,
        names,
        |names| AdminCall::DescribeTopics(pb::DescribeTopicsRequest { names }),
        DEFAULT_FORWARD_TIMEOUT,
    )
    .await;
    let by_name: BTreeMap<&str, &pb::TopicDescription> = batch.by_name(|r| &r.topics);
    let topic_defaults: &[pb::ConfigEntry] =
        batch.reply().map_or(&[], |r| r.cluster_defaults.as_slice());
    // Brokers list the cluster-wide defaults (Keel keeps no config of one
    // broker): one DescribeClusterConfigs call if any broker is asked.
    let defaults = cluster_defaults_if(
        req.resources
            .iter()
            .any(|r| r.resource_type == RESOURCE_BROKER),
        fwd,
    )
    .await;
    let results = req
        .resources
        .iter()
        .map(|r| {
            let base = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let keys: Option<BTreeSet<String>> = r
                .configuration_keys
                .as_ref()
                .map(|ks| ks.iter().map(|k| k.to_string()).collect());
            let err = match r.resource_type {
                RESOURCE_TOPIC => match (batch.failed(), by_name.get(r.resource_name.as_str())) {
                    (Some(e), _) => e.clone(),
                    (None, Some(t)) => {
                        let e = from_pb(t.error.as_ref());
                        if e.code == 0 {
                            return base.with_configs(topic_configs(
                                &t.configs,
                                topic_defaults,
                                keys.as_ref(),
                                version,
                            ));
                        }
                        e
                    }
                    (None, None) => KafkaError::new(
                        ResponseError::UnknownTopicOrPartition,
                        "This server does not host this topic-partition.",
                    ),
                },
                RESOURCE_BROKER => match &defaults {
                    Ok(d) => return base.with_configs(default_configs(d, keys.as_ref(), version)),
                    Err(e) => e.clone(),
                },
                RESOURCE_BROKER_LOGGER => KafkaError::none(),
                other => KafkaError::new(
                    ResponseError::InvalidRequest,
                    format!("resource type {other} has no configs here"),
                ),
            };
            base.with_error_code(err.code).with_error_message(err.msg())
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

// ---- IncrementalAlterConfigs and AlterConfigs -------------------------------

/// The answer to each resource of an (Incremental)AlterConfigs request
/// (what [`alter_topic_configs`] gives), as responses of type `$item`.
macro_rules! config_responses {
    ($answered:expr, $item:ty) => {
        $answered
            .into_iter()
            .map(|(ty, name, e)| {
                <$item>::default()
                    .with_resource_type(ty)
                    .with_resource_name(s(name))
                    .with_error_code(e.code)
                    .with_error_message(e.msg())
            })
            .collect()
    };
}

/// Sends the topic changes of an (Incremental)AlterConfigs request as one
/// IncrementalAlterConfigs call, and a change of the default broker
/// resource (empty name: the cluster-wide defaults) as one
/// AlterClusterConfigs call; answers every resource, in order.
async fn alter_topic_configs(
    resources: Vec<(i8, String, Result<Vec<pb::AlterConfigOp>, KafkaError>)>,
    validate_only: bool,
    fwd: &OnBehalf<'_>,
) -> Vec<(i8, String, KafkaError)> {
    let mut count: BTreeMap<(i8, String), usize> = BTreeMap::new();
    for (ty, name, _) in &resources {
        *count.entry((*ty, name.clone())).or_default() += 1;
    }
    let mut checked = Vec::new();
    for (ty, name, ops) in resources {
        let r = if count[&(ty, name.clone())] > 1 {
            Err(KafkaError::new(
                ResponseError::InvalidRequest,
                "Duplicate resource in request.",
            ))
        } else if ty == RESOURCE_BROKER && name.is_empty() {
            ops.map(default_ops)
        } else if ty == RESOURCE_BROKER {
            ops.and(Err(KafkaError::new(
                ResponseError::InvalidRequest,
                format!("Keel keeps no configs of broker {name}: set cluster-wide defaults on the default broker resource (empty name, kafka-configs --entity-default)"),
            )))
        } else if ty != RESOURCE_TOPIC {
            ops.and(Err(KafkaError::new(
                ResponseError::InvalidRequest,
                format!("Keel keeps configs of topics (resource type 2) and their cluster-wide defaults (resource type 4, empty name), not of resource type {ty}"),
            )))
        } else {
            ops
        };
        checked.push((ty, name, r));
    }
    let default_reply = match checked
        .iter()
        .find(|(ty, name, _)| *ty == RESOURCE_BROKER && name.is_empty())
    {
        Some((_, _, Ok(ops))) => {
            let c = AdminCall::AlterClusterConfigs(pb::AlterClusterConfigsRequest {
                ops: ops.clone(),
                validate_only,
            });
            let r = ask::<pb::AlterClusterConfigsResponse>(fwd, c, DEFAULT_FORWARD_TIMEOUT).await;
            Some(r.err().unwrap_or_else(KafkaError::none))
        }
        _ => None,
    };
    let checked: Vec<_> = checked
        .into_iter()
        .map(
            |(ty, name, r)| match (&default_reply, ty, name.is_empty()) {
                (Some(e), RESOURCE_BROKER, true) => (ty, name, Err(e.clone())),
                _ => (ty, name, r),
            },
        )
        .collect();
    let topics: Vec<pb::AlterTopicConfig> = checked
        .iter()
        .filter(|(ty, ..)| *ty == RESOURCE_TOPIC)
        .filter_map(|(_, name, r)| {
            r.as_ref().ok().map(|ops| pb::AlterTopicConfig {
                topic: name.clone(),
                ops: ops.clone(),
            })
        })
        .collect();
    let batch = Batch::<pb::IncrementalAlterConfigsResponse>::send(
        fwd,
        topics,
        |items| {
            AdminCall::IncrementalAlterConfigs(pb::IncrementalAlterConfigsRequest {
                topics: items,
                validate_only,
            })
        },
        DEFAULT_FORWARD_TIMEOUT,
    )
    .await;
    let by_name: BTreeMap<&str, &pb::AlterConfigsResult> = batch
        .reply()
        .map(|r| r.topics.iter().map(|t| (t.topic.as_str(), t)).collect())
        .unwrap_or_default();
    checked
        .iter()
        .map(|(ty, name, r)| {
            let err = match r {
                // The default broker resource's answer (possibly success).
                Err(e) => e.clone(),
                Ok(_) => batch.item(
                    by_name.get(name.as_str()).map(|t| t.error.as_ref()),
                    "topic",
                ),
            };
            (*ty, name.clone(), err)
        })
        .collect()
}

/// IncrementalAlterConfigs (v0-1): SET, DELETE, and APPEND and SUBTRACT on
/// list-typed configs (applied by the controller to the value in force, in
/// the same decision: no read-then-write race).
pub async fn incremental_alter_configs(
    req: IncrementalAlterConfigsRequest,
    fwd: &OnBehalf<'_>,
) -> IncrementalAlterConfigsResponse {
    let resources = req
        .resources
        .iter()
        .map(|r| {
            let ops = r
                .configs
                .iter()
                .map(|c| {
                    let key = c.name.to_string();
                    match (c.config_operation, &c.value) {
                        (OP_SET, Some(v)) => Ok(pb::AlterConfigOp {
                            key,
                            value: v.to_string(),
                            op: pb::ConfigOp::Set as i32,
                        }),
                        (OP_SET, None) => Err(KafkaError::new(
                            ResponseError::InvalidRequest,
                            format!("Null value not supported for : {key}"),
                        )),
                        (OP_DELETE, _) => Ok(pb::AlterConfigOp {
                            key,
                            value: String::new(),
                            op: pb::ConfigOp::Delete as i32,
                        }),
                        (OP_APPEND | OP_SUBTRACT, Some(v)) => Ok(pb::AlterConfigOp {
                            key,
                            value: v.to_string(),
                            op: if c.config_operation == OP_APPEND {
                                pb::ConfigOp::Append
                            } else {
                                pb::ConfigOp::Subtract
                            } as i32,
                        }),
                        (OP_APPEND | OP_SUBTRACT, None) => Err(KafkaError::new(
                            ResponseError::InvalidRequest,
                            format!("Null value not supported for : {key}"),
                        )),
                        (op, _) => Err(KafkaError::new(
                            ResponseError::InvalidRequest,
                            format!("unknown config operation {op} on {key}: Kafka's are SET (0), DELETE (1), APPEND (2) and SUBTRACT (3)"),
                        )),
                    }
                })
                .collect::<Result<Vec<_>, _>>();
            (r.resource_type, r.resource_name.to_string(), ops)
        })
        .collect();
    let answered = alter_topic_configs(resources, req.validate_only, fwd).await;
    IncrementalAlterConfigsResponse::default()
        .with_responses(config_responses!(answered, IncrementalResult))
}

/// AlterConfigs (v0-2): a topic's configs (or the cluster-wide defaults, on
/// the default broker resource) become exactly the ones given.
/// The configs set now are read first (DescribeTopics), then one
/// IncrementalAlterConfigs sets the given ones and deletes the others: a
/// change made between the two by someone else may be undone, as with
/// Kafka's own non-incremental AlterConfigs.
pub async fn alter_configs(req: AlterConfigsRequest, fwd: &OnBehalf<'_>) -> AlterConfigsResponse {
    let names = topic_names(
        req.resources
            .iter()
            .map(|r| (r.resource_type, &r.resource_name)),
    );
    let current = current_topics(names, fwd).await;
    let defaults = cluster_defaults_if(
        req.resources
            .iter()
            .any(|r| r.resource_type == RESOURCE_BROKER && r.resource_name.is_empty()),
        fwd,
    )
    .await;
    let resources = req
        .resources
        .iter()
        .map(|r| {
            let name = r.resource_name.to_string();
            let ops = replacing_ops(r, &name, &current, &defaults);
            (r.resource_type, name, ops)
        })
        .collect();
    let answered = alter_topic_configs(resources, req.validate_only, fwd).await;
    AlterConfigsResponse::default()
        .with_responses(config_responses!(answered, AlterConfigsResourceResponse))
}

/// The topics named, as they stand now with their configs, by name (one
/// DescribeTopics call, none when no topic is named).
async fn current_topics(
    names: Vec<String>,
    fwd: &OnBehalf<'_>,
) -> Result<BTreeMap<String, pb::TopicDescription>, KafkaError> {
    if names.is_empty() {
        Ok(BTreeMap::new())
    } else {
        let c = AdminCall::DescribeTopics(pb::DescribeTopicsRequest { names });
        ask::<pb::DescribeTopicsResponse>(fwd, c, DEFAULT_FORWARD_TIMEOUT)
            .await
            .map(|r| {
                r.topics
                    .into_iter()
                    .map(|t| (t.name.clone(), t))
                    .collect::<BTreeMap<_, _>>()
            })
    }
}

/// The ops that make resource `r` (named `name`) of an AlterConfigs
/// request hold exactly the configs given: set each given one, delete
/// every other one set now (of the topic in `current`, or of the
/// cluster-wide `defaults` for the default broker resource).
fn replacing_ops(
    r: &kafka_protocol::messages::alter_configs_request::AlterConfigsResource,
    name: &str,
    current: &Result<BTreeMap<String, pb::TopicDescription>, KafkaError>,
    defaults: &Result<Vec<pb::ConfigEntry>, KafkaError>,
) -> Result<Vec<pb::AlterConfigOp>, KafkaError> {
    let mut ops = Vec::new();
    let mut given = BTreeSet::new();
    for c in &r.configs {
        let Some(v) = &c.value else {
            return Err(KafkaError::new(
                ResponseError::InvalidRequest,
                format!("Null value not supported for : {}", c.name.as_str()),
            ));
        };
        given.insert(c.name.to_string());
        ops.push(pb::AlterConfigOp {
            key: c.name.to_string(),
            value: v.to_string(),
            op: pb::ConfigOp::Set as i32,
        });
    }
    if r.resource_type == RESOURCE_BROKER && name.is_empty() {
        // Every default not given goes (given names may be
        // Kafka's broker names of topic configs).
        let given: BTreeSet<&str> = given
            .iter()
            .map(|k| keel_metadata::topic_config::default_key(k).unwrap_or(k))
            .collect();
        let set = defaults.as_ref().map_err(Clone::clone)?;
        let unset = set.iter().filter(|c| !given.contains(c.key.as_str()));
        ops.extend(unset.map(deletion));
        return Ok(ops);
    }
    if r.resource_type != RESOURCE_TOPIC {
        return Ok(ops);
    }
    let current = current.as_ref().map_err(Clone::clone)?;
    let Some(t) = current.get(name) else {
        return Err(KafkaError::new(
            ResponseError::UnknownTopicOrPartition,
            "This server does not host this topic-partition.",
        ));
    };
    let e = from_pb(t.error.as_ref());
    if e.code != 0 {
        return Err(e);
    }
    let unset = t.configs.iter().filter(|c| !given.contains(&c.key));
    ops.extend(unset.map(deletion));
    Ok(ops)
}

/// The op that deletes config `c`.
fn deletion(c: &pb::ConfigEntry) -> pb::AlterConfigOp {
    pb::AlterConfigOp {
        key: c.key.clone(),
        value: String::new(),
        op: pb::ConfigOp::Delete as i32,
    }
}

/// The cluster-wide defaults (one DescribeClusterConfigs call).
async fn cluster_defaults(fwd: &OnBehalf<'_>) -> Result<Vec<pb::ConfigEntry>, KafkaError> {
    let c = AdminCall::DescribeClusterConfigs(pb::DescribeClusterConfigsRequest {});
    ask::<pb::DescribeClusterConfigsResponse>(fwd, c, DEFAULT_FORWARD_TIMEOUT)
        .await
        .map(|r| r.configs)
}

/// The cluster-wide defaults when `wanted` (none, and no call, otherwise).
async fn cluster_defaults_if(
    wanted: bool,
    fwd: &OnBehalf<'_>,
) -> Result<Vec<pb::ConfigEntry>, KafkaError> {
    if wanted {
        cluster_defaults(fwd).await
    } else {
        Ok(Vec::new())
    }
}

/// The ops of the default broker resource with each name as the topic
/// config it stands for (`log.retention.ms` is `retention.ms`); other names
/// are left for the controller to refuse.
fn default_ops(ops: Vec<pb::AlterConfigOp>) -> Vec<pb::AlterConfigOp> {
    ops.into_iter()
        .map(|mut o| {
            if let Some(k) = keel_metadata::topic_config::default_key(&o.key) {
                o.key = k.to_string();
            }
            o
        })
        .collect()
}

// ---- ElectLeaders -----------------------------------------------------------

/// ElectLeaders (v0-2): preferred (v0 always) or unclean; no partitions
/// named means every partition.
pub async fn elect_leaders(
    req: ElectLeadersRequest,
    version: i16,
    fwd: &OnBehalf<'_>,
) -> ElectLeadersResponse {
    let election_type = match (version, req.election_type) {
        (0, _) | (_, 0) => pb::ElectionType::Preferred,
        (_, 1) => pb::ElectionType::Unclean,
        (_, other) => return unknown_election_type(&req, other),
    };
    let mut asked: Vec<(String, i32)> = Vec::new();
    for t in req.topic_partitions.iter().flatten() {
        for p in &t.partitions {
            asked.push((t.topic.0.to_string(), *p));
        }
    }
    let partitions = asked
        .iter()
        .filter_map(|(topic, p)| {
            u32::try_from(*p)
                .ok()
                .map(|partition| pb::TopicPartitionRef {
                    topic: topic.clone(),
                    partition,
                })
        })
        .collect::<Vec<_>>();
    let every = req.topic_partitions.is_none();
    let mut by_topic: BTreeMap<String, Vec<PartitionResult>> = BTreeMap::new();
    let mut top = KafkaError::none();
    if every || !partitions.is_empty() {
        let c = AdminCall::ElectLeaders(pb::ElectLeadersRequest {
            election_type: election_type as i32,
            partitions,
        });
        match ask::<pb::ElectLeadersResponse>(fwd, c, deadline(req.timeout_ms)).await {
            Err(e) => top = e,
            Ok(r) => {
                for p in r.partitions {
                    let e = from_pb(p.error.as_ref());
                    let index = i32::try_from(p.partition).unwrap_or(i32::MAX);
                    by_topic
                        .entry(p.topic.clone())
                        .or_default()
                        .push(partition_result(index, &e));
                }
            }
        }
    }
    answer_unanswered(&asked, &mut by_topic, &top);
    let results = by_topic
        .into_iter()
        .map(|(t, ps)| {
            ReplicaElectionResult::default()
                .with_topic(tn(t))
                .with_partition_result(ps)
        })
        .collect();
    // v0 has no top-level error: it is in every partition's.
    let out = ElectLeadersResponse::default().with_replica_election_results(results);
    if version >= 1 {
        out.with_error_code(top.code)
    } else {
        out
    }
}

/// The answer to an ElectLeaders request of an election type Kafka does
/// not define (`other`): INVALID_REQUEST, at the top and for every
/// partition named.
fn unknown_election_type(req: &ElectLeadersRequest, other: i8) -> ElectLeadersResponse {
    ElectLeadersResponse::default().with_error_code(ResponseError::InvalidRequest.code()).with_replica_election_results(
        req.topic_partitions
            .iter()
            .flatten()
            .map(|t| {
                ReplicaElectionResult::default().with_topic(t.topic.clone()).with_partition_result(
                    t.partitions
                        .iter()
                        .map(|p| {
                            PartitionResult::default()
                                .with_partition_id(*p)
                                .with_error_code(ResponseError::InvalidRequest.code())
                                .with_error_message(Some(s(format!("election type {other} is neither PREFERRED (0) nor UNCLEAN (1)"))))
                        })
                        .collect(),
                )
            })
            .collect(),
    )
}

/// Answers the partitions asked for but not answered (a negative index,
/// or the whole call failed, with `top`'s error then).
fn answer_unanswered(
    asked: &[(String, i32)],
    by_topic: &mut BTreeMap<String, Vec<PartitionResult>>,
    top: &KafkaError,
) {
    for (topic, p) in asked {
        let answered = by_topic
            .get(topic)
            .is_some_and(|ps| ps.iter().any(|r| r.partition_id == *p));
        if !answered {
            let e = if top.code != 0 {
                top.clone()
            } else {
                KafkaError::new(
                    ResponseError::UnknownTopicOrPartition,
                    "This server does not host this topic-partition.",
                )
            };
            by_topic
                .entry(topic.clone())
                .or_default()
                .push(partition_result(*p, &e));
        }
    }
}

/// One partition's answer to ElectLeaders.
fn partition_result(index: i32, e: &KafkaError) -> PartitionResult {
    PartitionResult::default()
        .with_partition_id(index)
        .with_error_code(e.code)
        .with_error_message(e.msg())
}

// ---- Reassignments ----------------------------------------------------------

/// AlterPartitionReassignments (v0): new replica lists, or (null) a
/// cancellation, in one call.
pub async fn alter_partition_reassignments(
    req: AlterPartitionReassignmentsRequest,
    fwd: &OnBehalf<'_>,
) -> AlterPartitionReassignmentsResponse {
    // (topic, partition, what to send or why not)
    let mut asked: Vec<(String, i32, Result<pb::ReassignablePartition, KafkaError>)> = Vec::new();
    for t in &req.topics {
        for p in &t.partitions {
            let topic = t.name.0.to_string();
            let r = match (u32::try_from(p.partition_index), &p.replicas) {
                (Err(_), _) => Err(KafkaError::new(
                    ResponseError::UnknownTopicOrPartition,
                    "a negative partition index",
                )),
                (Ok(partition), None) => Ok(pb::ReassignablePartition {
                    topic: topic.clone(),
                    partition,
                    replicas: vec![],
                    cancel: true,
                }),
                (Ok(partition), Some(rs)) => match keel_ids(rs) {
                    Some(replicas) => Ok(pb::ReassignablePartition {
                        topic: topic.clone(),
                        partition,
                        replicas,
                        cancel: false,
                    }),
                    None => Err(KafkaError::new(
                        ResponseError::InvalidReplicaAssignment,
                        format!("replicas {rs:?} name a negative broker id"),
                    )),
                },
            };
            asked.push((topic, p.partition_index, r));
        }
    }
    let partitions: Vec<pb::ReassignablePartition> = asked
        .iter()
        .filter_map(|(_, _, r)| r.as_ref().ok().cloned())
        .collect();
    let mut top = KafkaError::none();
    let mut answers: BTreeMap<(String, u32), KafkaError> = BTreeMap::new();
    if !partitions.is_empty() {
        let c = AdminCall::AlterPartitionReassignments(pb::AlterPartitionReassignmentsRequest {
            partitions,
        });
        match ask::<pb::AlterPartitionReassignmentsResponse>(fwd, c, deadline(req.timeout_ms)).await
        {
            Err(e) => top = e,
            Ok(r) => {
                for p in r.partitions {
                    answers.insert((p.topic.clone(), p.partition), from_pb(p.error.as_ref()));
                }
            }
        }
    }
    let mut by_topic: Vec<(String, Vec<ReassignablePartitionResponse>)> = Vec::new();
    for (topic, index, r) in &asked {
        let e = match r {
            Err(e) => e.clone(),
            Ok(p) if top.code != 0 => {
                let _ = p;
                top.clone()
            }
            Ok(p) => answers
                .get(&(p.topic.clone(), p.partition))
                .cloned()
                .unwrap_or_else(|| {
                    KafkaError::new(
                        ResponseError::UnknownServerError,
                        "the controller did not answer for this partition",
                    )
                }),
        };
        let resp = ReassignablePartitionResponse::default()
            .with_partition_index(*index)
            .with_error_code(e.code)
            .with_error_message(e.msg());
        match by_topic.iter_mut().find(|(t, _)| t == topic) {
            Some((_, v)) => v.push(resp),
            None => by_topic.push((topic.clone(), vec![resp])),
        }
    }
    AlterPartitionReassignmentsResponse::default()
        .with_error_code(top.code)
        .with_error_message(top.msg())
        .with_responses(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    ReassignableTopicResponse::default()
                        .with_name(tn(t))
                        .with_partitions(ps)
                })
                .collect(),
        )
}

/// ListPartitionReassignments (v0): the ones in flight, of every topic or
/// of the partitions named.
pub async fn list_partition_reassignments(
    req: ListPartitionReassignmentsRequest,
    fwd: &OnBehalf<'_>,
) -> ListPartitionReassignmentsResponse {
    let wanted: Option<BTreeMap<String, BTreeSet<i32>>> = req.topics.as_ref().map(|ts| {
        ts.iter()
            .map(|t| {
                (
                    t.name.0.to_string(),
                    t.partition_indexes.iter().copied().collect(),
                )
            })
            .collect()
    });
    if wanted.as_ref().is_some_and(|w| w.is_empty()) {
        return ListPartitionReassignmentsResponse::default();
    }
    let topics = wanted
        .as_ref()
        .map_or(vec![], |w| w.keys().cloned().collect());
    let c = AdminCall::ListPartitionReassignments(pb::ListPartitionReassignmentsRequest { topics });
    let r = match ask::<pb::ListPartitionReassignmentsResponse>(fwd, c, deadline(req.timeout_ms))
        .await
    {
        Err(e) => {
            return ListPartitionReassignmentsResponse::default()
                .with_error_code(e.code)
                .with_error_message(e.msg());
        }
        Ok(r) => r,
    };
    let mut by_topic: BTreeMap<String, Vec<OngoingPartitionReassignment>> = BTreeMap::new();
    for o in r.reassignments {
        let index = i32::try_from(o.partition).unwrap_or(i32::MAX);
        let keep = wanted
            .as_ref()
            .is_none_or(|w| w.get(&o.topic).is_some_and(|ps| ps.contains(&index)));
        if keep {
            by_topic.entry(o.topic.clone()).or_default().push(
                OngoingPartitionReassignment::default()
                    .with_partition_index(index)
                    .with_replicas(ids(&o.replicas))
                    .with_adding_replicas(ids(&o.adding))
                    .with_removing_replicas(ids(&o.removing)),
            );
        }
    }
    ListPartitionReassignmentsResponse::default().with_topics(
        by_topic
            .into_iter()
            .map(|(t, ps)| {
                OngoingTopicReassignment::default()
                    .with_name(tn(t))
                    .with_partitions(ps)
            })
            .collect(),
    )
}

// ---- ACLs -------------------------------------------------------------------

/// The Keel bindings a Kafka filter selects: fetched with a filter as
/// narrow as Keel's can be, then narrowed to exactly the Kafka filter's.
async fn acls_matching(
    f: &crate::acls::KafkaFilter,
    fwd: &OnBehalf<'_>,
) -> Result<Vec<keel_metadata::acl::AclBinding>, KafkaError> {
    f.validate()?;
    let Some(broad) = f.keel_filter() else {
        return Ok(vec![]);
    };
    let c = AdminCall::DescribeAcls(pb::DescribeAclsRequest {
        filter: Some(keel_proto::convert::acl_filter_to_pb(&broad)),
    });
    let r = ask::<pb::DescribeAclsResponse>(fwd, c, deadline(0)).await?;
    let mut out = Vec::new();
    for b in &r.bindings {
        let b = keel_proto::convert::acl_binding_from_pb(b).map_err(|e| {
            KafkaError::new(
                ResponseError::UnknownServerError,
                format!("the controller described a binding this broker cannot read: {e}"),
            )
        })?;
        if f.matches(&b) {
            out.push(b);
        }
    }
    Ok(out)
}

/// DescribeAcls (v1-3): the bindings the filter matches, grouped by
/// resource.
pub async fn describe_acls(req: DescribeAclsRequest, fwd: &OnBehalf<'_>) -> DescribeAclsResponse {
    let f = crate::acls::KafkaFilter::of_describe(&req);
    match acls_matching(&f, fwd).await {
        Ok(bindings) => DescribeAclsResponse::default()
            .with_resources(crate::acls::describe_resources(&bindings)),
        Err(e) => DescribeAclsResponse::default()
            .with_error_code(e.code)
            .with_error_message(e.msg()),
    }
}

/// CreateAcls (v1-3): each creation converted (those Keel cannot hold
/// refused per item), the rest sent in one call; one result per creation,
/// in order.
pub async fn create_acls(req: CreateAclsRequest, fwd: &OnBehalf<'_>) -> CreateAclsResponse {
    let mapped: Vec<Result<keel_metadata::acl::AclBinding, KafkaError>> =
        req.creations.iter().map(crate::acls::binding_of).collect();
    let sent: Vec<pb::AclBinding> = mapped
        .iter()
        .filter_map(|m| m.as_ref().ok())
        .map(keel_proto::convert::acl_binding_to_pb)
        .collect();
    let batch = Batch::<pb::CreateAclsResponse>::send(
        fwd,
        sent,
        |bindings| AdminCall::CreateAcls(pb::CreateAclsRequest { bindings }),
        deadline(0),
    )
    .await;
    let mut answers = batch.reply().map_or([].iter(), |r| r.results.iter());
    let results = mapped
        .iter()
        .map(|m| {
            let e = match m {
                Err(e) => e.clone(),
                Ok(_) => batch.item(answers.next().map(|a| a.error.as_ref()), "binding"),
            };
            AclCreationResult::default()
                .with_error_code(e.code)
                .with_error_message(e.msg())
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

/// DeleteAcls (v1-3): each filter's bindings found (as DescribeAcls finds
/// them), then exactly those removed in one call; a binding two filters
/// match is removed once, with the first.
pub async fn delete_acls(req: DeleteAclsRequest, fwd: &OnBehalf<'_>) -> DeleteAclsResponse {
    let mut found: Vec<Result<Vec<keel_metadata::acl::AclBinding>, KafkaError>> = Vec::new();
    let mut taken = BTreeSet::new();
    for f in &req.filters {
        let f = crate::acls::KafkaFilter::of_delete(f);
        found.push(
            acls_matching(&f, fwd)
                .await
                .map(|bs| bs.into_iter().filter(|b| taken.insert(b.clone())).collect()),
        );
    }
    let exact: Vec<pb::AclFilter> = found
        .iter()
        .filter_map(|f| f.as_ref().ok())
        .flatten()
        .map(|b| keel_proto::convert::acl_filter_to_pb(&crate::acls::exact_filter(b)))
        .collect();
    let batch = Batch::<pb::DeleteAclsResponse>::send(
        fwd,
        exact,
        |items| AdminCall::DeleteAcls(pb::DeleteAclsRequest { filters: items }),
        deadline(0),
    )
    .await;
    // One answer per exact filter, in the order sent.
    let mut removed = batch.reply().map_or([].iter(), |r| r.results.iter());
    let filter_results = found
        .into_iter()
        .map(|f| match (f, batch.failed()) {
            (Err(e), _) => DeleteAclsFilterResult::default()
                .with_error_code(e.code)
                .with_error_message(e.msg()),
            (Ok(bs), Some(e)) if !bs.is_empty() => DeleteAclsFilterResult::default()
                .with_error_code(e.code)
                .with_error_message(e.msg()),
            (Ok(bs), _) => {
                let mut matching = Vec::new();
                for b in &bs {
                    // A binding gone before the delete came is not named.
                    let gone = removed.next().is_some_and(|r| !r.removed.is_empty());
                    if gone {
                        matching.push(crate::acls::matching_acl(b));
                    }
                }
                DeleteAclsFilterResult::default().with_matching_acls(matching)
            }
        })
        .collect();
    DeleteAclsResponse::default().with_filter_results(filter_results)
}

// ---- SCRAM credentials ------------------------------------------------------

/// AlterUserScramCredentials (v0): one result per user. A user named more
/// than once is refused with DUPLICATE_RESOURCE (nothing of it is sent);
/// the others' items go in one call, and each user gets its first error.
pub async fn alter_user_scram_credentials(
    req: AlterUserScramCredentialsRequest,
    fwd: &OnBehalf<'_>,
) -> AlterUserScramCredentialsResponse {
    let users: Vec<String> = req
        .deletions
        .iter()
        .map(|d| d.name.to_string())
        .chain(req.upsertions.iter().map(|u| u.name.to_string()))
        .collect();
    let twice: BTreeSet<String> =
        keel_metadata::decide::duplicated_users(users.iter().map(String::as_str))
            .into_iter()
            .map(str::to_string)
            .collect();
    let mut items: Vec<(String, KafkaError)> = Vec::new();
    // The items sent: their users, upsertions then deletions (Keel's order).
    let mut sent_users = Vec::new();
    let mut upsertions = Vec::new();
    let mut deletions = Vec::new();
    for u in &req.upsertions {
        let user = u.name.to_string();
        if twice.contains(&user) {
            continue;
        }
        match u32::try_from(u.iterations) {
            Ok(iterations) => {
                upsertions.push(pb::ScramCredentialUpsertion {
                    user: user.clone(),
                    mechanism: i32::from(u.mechanism),
                    iterations,
                    salt: u.salt.to_vec(),
                    salted_password: u.salted_password.to_vec(),
                });
                sent_users.push(user);
            }
            Err(_) => items.push((
                user,
                KafkaError::new(
                    ResponseError::UnacceptableCredential,
                    format!("iterations {} is negative", u.iterations),
                ),
            )),
        }
    }
    for d in &req.deletions {
        let user = d.name.to_string();
        if twice.contains(&user) {
            continue;
        }
        deletions.push(pb::ScramCredentialDeletion {
            user: user.clone(),
            mechanism: i32::from(d.mechanism),
        });
        sent_users.push(user);
    }
    if !sent_users.is_empty() {
        let c = AdminCall::AlterUserScramCredentials(pb::AlterUserScramCredentialsRequest {
            upsertions,
            deletions,
        });
        let batch =
            Batch::<pb::AlterUserScramCredentialsResponse>(Some(ask(fwd, c, deadline(0)).await));
        let mut answers = batch.reply().map_or([].iter(), |r| r.results.iter());
        for user in sent_users {
            items.push((
                user,
                batch.item(answers.next().map(|a| a.error.as_ref()), "item"),
            ));
        }
    }
    for user in &twice {
        let e = keel_metadata::decide::duplicate_user(user);
        items.push((
            user.clone(),
            KafkaError::new(ResponseError::DuplicateResource, e.message),
        ));
    }
    // Users in the order the request first names them.
    let mut results = crate::acls::per_user(items);
    results.sort_by_key(|(u, _)| users.iter().position(|n| n == u));
    AlterUserScramCredentialsResponse::default().with_results(
        results
            .into_iter()
            .map(|(u, e)| {
                AlterUserScramCredentialsResult::default()
                    .with_user(s(u))
                    .with_error_code(e.code)
                    .with_error_message(e.msg())
            })
            .collect(),
    )
}

/// DescribeUserScramCredentials (v0): the users named (null or none:
/// every user with a credential), each once, with its mechanisms and
/// iterations.
pub async fn describe_user_scram_credentials(
    req: DescribeUserScramCredentialsRequest,
    fwd: &OnBehalf<'_>,
) -> DescribeUserScramCredentialsResponse {
    let users: Vec<String> = req
        .users
        .iter()
        .flatten()
        .map(|u| u.name.to_string())
        .collect();
    let c =
        AdminCall::DescribeUserScramCredentials(pb::DescribeUserScramCredentialsRequest { users });
    let r = match ask::<pb::DescribeUserScramCredentialsResponse>(fwd, c, deadline(0)).await {
        Ok(r) => r,
        Err(e) => {
            return DescribeUserScramCredentialsResponse::default()
                .with_error_code(e.code)
                .with_error_message(e.msg())
        }
    };
    let mut seen = BTreeSet::new();
    let results = r
        .results
        .into_iter()
        .filter(|u| seen.insert(u.user.clone()))
        .map(|u| {
            let e = from_pb(u.error.as_ref());
            DescribeUserScramCredentialsResult::default()
                .with_user(s(u.user))
                .with_error_code(e.code)
                .with_error_message(e.msg())
                .with_credential_infos(
                    u.credentials
                        .iter()
                        .map(|c| {
                            CredentialInfo::default()
                                .with_mechanism(i8::try_from(c.mechanism).unwrap_or(0))
                                .with_iterations(i32::try_from(c.iterations).unwrap_or(i32::MAX))
                        })
                        .collect(),
                )
        })
        .collect();
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

#[cfg(test)]
mod tests {

    /// A write whose outcome is unknown is never answered with a code a
    /// Kafka client reads as success: with `timeout_ms <= 0`,
    /// REQUEST_TIMED_OUT means "started" to librdkafka, so it becomes
    /// NOT_CONTROLLER; with a real timeout it stays.
    #[test]
    fn an_unknown_outcome_is_not_request_timed_out_for_async_requests() {
        let lost = || Some(from_forward(&ForwardError::OutcomeUnknown("gone".into())));
        let for_async = async_safe(0, lost()).expect("an error");
        assert_eq!(for_async.code, ResponseError::NotController.code());
        assert!(for_async.message.unwrap_or_default().contains("gone"));
        let with_timeout = async_safe(30_000, lost()).expect("an error");
        assert_eq!(with_timeout.code, ResponseError::RequestTimedOut.code());
        assert!(async_safe(0, None).is_none());
        let other = Some(KafkaError::new(ResponseError::InvalidConfig, "x"));
        assert_eq!(
            async_safe(0, other).map(|e| e.code),
            Some(ResponseError::InvalidConfig.code())
        );
    }

    use super::*;

    #[test]
    fn every_keel_code_maps_to_a_kafka_code_and_the_common_ones_as_kafka_names_them() {
        for c in ErrorCode::ALL {
            let _ = kafka_error_code(c);
        }
        assert_eq!(
            kafka_error_code(ErrorCode::TopicAlreadyExists),
            ResponseError::TopicAlreadyExists
        );
        assert_eq!(
            kafka_error_code(ErrorCode::UnknownTopic),
            ResponseError::UnknownTopicOrPartition
        );
        assert_eq!(
            kafka_error_code(ErrorCode::InvalidTopicName),
            ResponseError::InvalidTopicException
        );
        assert_eq!(
            kafka_error_code(ErrorCode::InvalidConfig),
            ResponseError::InvalidConfig
        );
        assert_eq!(
            kafka_error_code(ErrorCode::NotController),
            ResponseError::NotController
        );
    }

    #[test]
    fn default_counts_and_unrepresentable_values_are_settled_before_forwarding() {
        use kafka_protocol::messages::create_topics_request::{
            CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
        };
        let t = CreatableTopic::default()
            .with_name(tn("a"))
            .with_num_partitions(-1)
            .with_replication_factor(-1);
        let c = creatable(&t).unwrap();
        assert_eq!((c.partitions, c.replication_factor), (1, 1));
        let bad = t.clone().with_num_partitions(-3);
        assert_eq!(
            creatable(&bad).unwrap_err().code,
            ResponseError::InvalidPartitions.code()
        );
        let bad = t.clone().with_replication_factor(-2);
        assert_eq!(
            creatable(&bad).unwrap_err().code,
            ResponseError::InvalidReplicationFactor.code()
        );
        let explicit = t
            .clone()
            .with_assignments(vec![CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(vec![BrokerId(2), BrokerId(1)])]);
        let c = creatable(&explicit).unwrap();
        assert_eq!((c.partitions, c.replication_factor), (0, 0));
        assert_eq!(c.assignments[0].replicas, vec![2, 1]);
        let both = explicit.with_num_partitions(1);
        assert_eq!(
            creatable(&both).unwrap_err().code,
            ResponseError::InvalidRequest.code()
        );
        let null = t.with_configs(vec![CreatableTopicConfig::default()
            .with_name(s("retention.ms"))
            .with_value(None)]);
        assert_eq!(
            creatable(&null).unwrap_err().code,
            ResponseError::InvalidConfig.code()
        );
    }

    #[test]
    fn described_configs_are_defaults_overlaid_by_what_is_set() {
        let set = vec![pb::ConfigEntry {
            key: "retention.ms".into(),
            value: "1000".into(),
        }];
        let all = topic_configs(&set, &[], None, 4);
        assert_eq!(all.len(), keel_metadata::topic_config::TOPIC_CONFIGS.len());
        let r = all
            .iter()
            .find(|c| c.name.as_str() == "retention.ms")
            .unwrap();
        assert_eq!(
            (r.value.as_deref(), r.config_source),
            (Some("1000"), SOURCE_DYNAMIC_TOPIC)
        );
        let c = all
            .iter()
            .find(|c| c.name.as_str() == "cleanup.policy")
            .unwrap();
        assert_eq!(
            (c.value.as_deref(), c.config_source),
            (Some("delete"), SOURCE_DEFAULT)
        );
        let keys = ["segment.ms".to_string()].into_iter().collect();
        let one = topic_configs(&set, &[], Some(&keys), 4);
        assert_eq!(one.len(), 1);
    }

    /// Answers each call from a script and keeps what was sent.
    struct Scripted {
        sent: std::sync::Mutex<Vec<AdminCall>>,
        answer: fn(&AdminCall) -> AdminReply,
    }

    impl crate::forward::Forwarder for Scripted {
        fn forward(
            &self,
            call: AdminCall,
            _: crate::forward::Client,
            _: Duration,
        ) -> crate::forward::BoxFuture<'_, Result<AdminReply, ForwardError>> {
            let reply = (self.answer)(&call);
            self.sent.lock().unwrap().push(call);
            Box::pin(async move { Ok(reply) })
        }
    }

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn scram_alterations_refuse_users_named_twice_and_answer_once_per_user() {
        use kafka_protocol::messages::alter_user_scram_credentials_request::{
            ScramCredentialDeletion, ScramCredentialUpsertion,
        };
        let fwd = Scripted {
            sent: Default::default(),
            answer: |_| {
                AdminReply::AlterUserScramCredentials(pb::AlterUserScramCredentialsResponse {
                    error: None,
                    results: vec![
                        pb::UserResult {
                            user: "alice".into(),
                            error: None,
                        },
                        pb::UserResult {
                            user: "erin".into(),
                            error: Some(pb::Error {
                                code: ErrorCode::UnacceptableCredential.as_i32(),
                                message: "too short".into(),
                                leader: None,
                            }),
                        },
                    ],
                })
            },
        };
        let up = |u: &str, iterations| {
            ScramCredentialUpsertion::default()
                .with_name(s(u))
                .with_mechanism(2)
                .with_iterations(iterations)
        };
        let req = AlterUserScramCredentialsRequest::default()
            .with_deletions(vec![ScramCredentialDeletion::default()
                .with_name(s("bob"))
                .with_mechanism(1)])
            .with_upsertions(vec![
                up("alice", 4096),
                up("dave", -5),
                up("bob", 4096),
                up("erin", 4096),
            ]);
        let client = crate::forward::Client::anonymous(None);
        let on = OnBehalf {
            forwarder: &fwd,
            client: &client,
        };
        let r = run(alter_user_scram_credentials(req, &on));
        let got: Vec<(&str, i16)> = r
            .results
            .iter()
            .map(|r| (r.user.as_str(), r.error_code))
            .collect();
        assert_eq!(
            got,
            [
                ("bob", ResponseError::DuplicateResource.code()),
                ("alice", 0),
                ("dave", ResponseError::UnacceptableCredential.code()),
                ("erin", ResponseError::UnacceptableCredential.code()),
            ]
        );
        // Neither bob nor dave was sent.
        let sent = fwd.sent.lock().unwrap();
        let AdminCall::AlterUserScramCredentials(c) = &sent[0] else {
            panic!("{sent:?}")
        };
        let users: Vec<&str> = c.upsertions.iter().map(|u| u.user.as_str()).collect();
        assert_eq!(users, ["alice", "erin"]);
        assert!(c.deletions.is_empty());
    }

    #[test]
    fn a_delete_by_match_filter_removes_exactly_the_bindings_it_matches() {
        use crate::acls::{PATTERN_MATCH, PATTERN_PREFIXED, RESOURCE_TOPIC};
        use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
        use keel_metadata::acl::{AclBinding, Operation, Permission, Principal, ResourcePattern};
        fn bindings() -> Vec<AclBinding> {
            let b = |p, op| AclBinding {
                principal: Principal::User("alice".into()),
                pattern: p,
                operation: op,
                permission: Permission::Allow,
            };
            vec![
                b(
                    ResourcePattern::TopicPrefix("orders".into()),
                    Operation::Create,
                ),
                b(
                    ResourcePattern::Topic("payments".into()),
                    Operation::Describe,
                ),
            ]
        }
        let fwd = Scripted {
            sent: Default::default(),
            answer: |c| match c {
                AdminCall::DescribeAcls(_) => AdminReply::DescribeAcls(pb::DescribeAclsResponse {
                    error: None,
                    bindings: bindings()
                        .iter()
                        .map(keel_proto::convert::acl_binding_to_pb)
                        .collect(),
                }),
                AdminCall::DeleteAcls(r) => AdminReply::DeleteAcls(pb::DeleteAclsResponse {
                    error: None,
                    results: r
                        .filters
                        .iter()
                        .map(|_| pb::DeleteAclsResult {
                            removed: vec![keel_proto::convert::acl_binding_to_pb(&bindings()[0])],
                        })
                        .collect(),
                }),
                other => panic!("{other:?}"),
            },
        };
        let filter = DeleteAclsFilter::default()
            .with_resource_type_filter(RESOURCE_TOPIC)
            .with_resource_name_filter(Some(s("orders-eu")))
            .with_pattern_type_filter(PATTERN_MATCH)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_operation(1)
            .with_permission_type(1);
        let client = crate::forward::Client::anonymous(None);
        let on = OnBehalf {
            forwarder: &fwd,
            client: &client,
        };
        let r = run(delete_acls(
            DeleteAclsRequest::default().with_filters(vec![filter.clone(), filter]),
            &on,
        ));
        // The second filter matched the same binding: removed once.
        let removed: Vec<Vec<(&str, i8)>> = r
            .filter_results
            .iter()
            .map(|f| {
                f.matching_acls
                    .iter()
                    .map(|a| (a.resource_name.as_str(), a.pattern_type))
                    .collect()
            })
            .collect();
        assert_eq!(removed, [vec![("orders", PATTERN_PREFIXED)], vec![]]);
        let sent = fwd.sent.lock().unwrap();
        let AdminCall::DeleteAcls(d) = sent.last().unwrap() else {
            panic!("{sent:?}")
        };
        assert_eq!(
            d.filters,
            [keel_proto::convert::acl_filter_to_pb(
                &crate::acls::exact_filter(&bindings()[0])
            )]
        );
    }
}
