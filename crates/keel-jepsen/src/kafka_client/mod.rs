//! The workload through brokers' Kafka listeners (`keel jepsen --client
//! kafka`): the same operations as [`AdminClient`], sent as Kafka requests
//! (the `kafka-protocol` crate's codecs) to a broker, which forwards the
//! admin ones to the active controller. [`Client`] is what a workload
//! worker holds: either kind, with the same methods.
//!
//! Outcomes come from Kafka error codes alone ([`verdict`]). Every write is
//! sent with `timeout_ms > 0`: a broker answers NOT_CONTROLLER then only
//! when no controller took the request (it was not applied), and
//! REQUEST_TIMED_OUT when the forwarded write's answer was lost (unknown).
//! A request whose connection breaks or times out after it was written is
//! unknown too; one whose connection never opened was never sent.
//!
//! The brokers' Kafka listeners follow the node's transport
//! ([`KafkaSecurity`], Kafka's `security.protocol`). In a TLS run every
//! connection does a TLS handshake presenting the harness's admin user's
//! certificate (SSL: the listener takes the client for `User:admin`, a
//! super user) and checks that the server's certificate names a member of
//! the cluster, as Keel's own clients do; in a `--plaintext` run it speaks
//! plaintext. SASL_SSL ([`KafkaSecurity::sasl_ssl`], for brokers run with
//! `--kafka-ssl-client-auth requested`) presents no certificate and logs in
//! with SCRAM-SHA-512 instead. A connection that fails before the
//! request is written (TCP, TLS handshake or login) never sent it.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    ElectLeadersRequest, ElectLeadersResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, MetadataRequest, MetadataResponse, SaslHandshakeRequest,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;
use keel_metadata::scram::ScramMechanism;
use keel_metadata::TopicId;
use keel_tls::{TlsContext, Transport};
use rand::Rng;
#[cfg(test)]
use tokio::io::{AsyncRead, AsyncWrite};

use keel_testkit::kafka;

use crate::client::{AdminClient, OpResult};
use crate::history::{Outcome, Seen};

mod security;
mod verdict;

pub use security::KafkaSecurity;
pub(crate) use security::{sasl_handshake_request, scram_nonce};
pub use verdict::{
    checker_code, code_name, read_verdict, verdict, write_outcome, ReadVerdict, Verdict, WriteKind,
};

/// Which API the workload's clients speak.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ClientKind {
    /// Keel's gRPC admin API on the controllers (mutual TLS unless
    /// `--plaintext`).
    #[default]
    Grpc,
    /// Kafka's protocol on the brokers' Kafka listeners (TLS as
    /// `User:admin` unless `--plaintext`: [`KafkaSecurity`]).
    Kafka,
}

impl ClientKind {
    /// `grpc` or `kafka`, as `--client` takes them.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "grpc" => Ok(ClientKind::Grpc),
            "kafka" => Ok(ClientKind::Kafka),
            other => Err(format!("unknown client {other:?}: grpc or kafka")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ClientKind::Grpc => "grpc",
            ClientKind::Kafka => "kafka",
        }
    }
}

/// A workload client of either kind.
pub enum Client {
    Grpc(AdminClient),
    Kafka(KafkaClient),
}

impl Client {
    pub async fn create(&mut self, name: &str, partitions: u32, rf: u32) -> OpResult {
        match self {
            Client::Grpc(c) => c.create(name, partitions, rf).await,
            Client::Kafka(c) => c.create(name, partitions, rf).await,
        }
    }

    pub async fn delete(&mut self, name: &str) -> OpResult {
        match self {
            Client::Grpc(c) => c.delete(name).await,
            Client::Kafka(c) => c.delete(name).await,
        }
    }

    pub async fn describe(&mut self, name: &str) -> OpResult {
        match self {
            Client::Grpc(c) => c.describe(name).await,
            Client::Kafka(c) => c.describe(name).await,
        }
    }

    pub async fn create_partitions(&mut self, name: &str, total: u32) -> OpResult {
        match self {
            Client::Grpc(c) => c.create_partitions(name, total).await,
            Client::Kafka(c) => c.create_partitions(name, total).await,
        }
    }

    pub async fn alter_config(&mut self, name: &str, key: &str, value: Option<&str>) -> OpResult {
        match self {
            Client::Grpc(c) => c.alter_config(name, key, value).await,
            Client::Kafka(c) => c.alter_config(name, key, value).await,
        }
    }

    pub async fn reassign(&mut self, name: &str, partition: u32, replicas: &[u32]) -> OpResult {
        match self {
            Client::Grpc(c) => c.reassign(name, partition, replicas).await,
            Client::Kafka(c) => c.reassign(name, partition, replicas).await,
        }
    }

    pub async fn elect_preferred(&mut self, name: &str) -> OpResult {
        match self {
            Client::Grpc(c) => c.elect_preferred(name).await,
            Client::Kafka(c) => c.elect_preferred(name).await,
        }
    }
}

/// Kafka's resource type of a topic (`ConfigResource.Type`).
pub(crate) const RESOURCE_TOPIC: i8 = 2;
/// DescribeConfigs' source of a config set on the topic itself.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
/// IncrementalAlterConfigs operations.
pub(crate) const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
/// ElectLeaders' preferred election.
const ELECTION_PREFERRED: i8 = 0;

/// Request versions sent: the newest the listener serves of each, so
/// CreateTopics and Metadata carry topic ids.
pub(crate) const V_CREATE_TOPICS: i16 = 7;
pub(crate) const V_DELETE_TOPICS: i16 = 6;
const V_METADATA: i16 = 12;
const V_DESCRIBE_CONFIGS: i16 = 4;
const V_CREATE_PARTITIONS: i16 = 3;
pub(crate) const V_INCREMENTAL_ALTER_CONFIGS: i16 = 1;
const V_ELECT_LEADERS: i16 = 2;
const V_ALTER_REASSIGNMENTS: i16 = 0;

/// The SASL mechanism of the harness's logins.
pub(crate) const SASL_MECHANISM: ScramMechanism = ScramMechanism::Sha512;
/// SaslHandshake v1: the tokens then travel in SaslAuthenticate requests.
pub(crate) const V_SASL_HANDSHAKE: i16 = 1;
/// Characters of the client's SCRAM nonce (alphanumeric, fresh per login).
const SCRAM_NONCE_LEN: usize = 24;

/// Why an attempt got no answer.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The connection never opened: the request was never sent.
    NotSent(String),
    /// Written (perhaps in part) and then no whole answer: unknown.
    Lost(String),
}

impl CallError {
    pub(crate) fn text(&self) -> &str {
        match self {
            CallError::NotSent(s) | CallError::Lost(s) => s,
        }
    }
}

/// A failed SASL step in the harness's words: a refusal names Kafka's code
/// (`SASL_AUTHENTICATION_FAILED`), which the intruder's checker reads.
fn sasl_error(e: anyhow::Error) -> String {
    match e.downcast_ref::<kafka::SaslRefusal>() {
        Some(r) => format!("SASL login: {}: {}", code_name(r.code), r.message),
        None => format!("SASL login: {e:#}"),
    }
}

/// One connection to a broker's Kafka listener, from the harness's
/// address: the cluster kit's connection, with its failures sorted into
/// [`CallError`]s (a failure to open never sent anything; a failure after a
/// request was written leaves its outcome unknown).
pub(crate) struct Conn(kafka::KafkaConn);

#[cfg(test)]
impl Conn {
    /// A connection over any stream (a test's in-memory listener).
    pub(crate) fn over(stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static) -> Conn {
        Conn(kafka::KafkaConn::over(stream, Duration::from_secs(10)))
    }
}

impl Conn {
    /// Connects from `bind` to `addr`, does the TLS handshake and the
    /// login `security` asks for, all within `connect_timeout`. Every
    /// failure is [`CallError::NotSent`]: no request of the caller's was
    /// written.
    pub(crate) async fn open(
        bind: IpAddr,
        addr: &str,
        security: &KafkaSecurity,
        connect_timeout: Duration,
        answer_timeout: Duration,
    ) -> Result<Conn, CallError> {
        let dial = kafka::Dial {
            timeouts: kafka::Timeouts {
                open: connect_timeout,
                answer: answer_timeout,
            },
            bind: Some(bind),
            cluster_id: security.cluster_id.clone(),
        };
        kafka::KafkaConn::open_with(addr, &security.security, &dial)
            .await
            .map(Conn)
            .map_err(|e| CallError::NotSent(format!("{e:#}")))
    }

    /// One SaslAuthenticate round trip: `token` out, the server's in; a
    /// refusal names Kafka's code (see [`sasl_error`]).
    pub(crate) async fn authenticate(&mut self, token: Vec<u8>) -> Result<Vec<u8>, String> {
        self.0.authenticate(token).await.map_err(sasl_error)
    }

    /// Closes the connection the polite way (over TLS a close_notify
    /// first). Bounded; a broken connection is simply dropped.
    pub(crate) async fn close(self) {
        self.0.close().await;
    }

    /// Sends one request and reads its answer; any failure leaves the
    /// request's outcome unknown ([`CallError::Lost`]).
    pub(crate) async fn call<Q: Encodable, R: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        body: &Q,
    ) -> Result<R, CallError> {
        self.0
            .call(api, version, body)
            .await
            .map_err(|e| CallError::Lost(format!("{e:#}")))
    }
}

pub(crate) fn tn(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn text(m: &Option<StrBytes>) -> Option<String> {
    m.as_ref().map(|m| m.to_string())
}

/// An answer's item as (error code, message): UNKNOWN_SERVER_ERROR when
/// the answer has no item.
fn item_error(item: Option<(i16, &Option<StrBytes>)>) -> (i16, Option<String>) {
    item.map_or(
        (ResponseError::UnknownServerError.code(), None),
        |(code, m)| (code, text(m)),
    )
}

fn hex_id(id: &uuid::Uuid) -> Option<String> {
    (!id.is_nil())
        .then(|| TopicId::from_bytes(id.as_bytes()).map(|t| t.to_string()))
        .flatten()
}

/// One attempt's end.
enum Attempt {
    /// Not applied (NOT_CONTROLLER, or never sent): try again.
    Retry(String),
    Done(Box<OpResult>),
}

/// The end of a write attempt from its error code, or from why it got none.
fn write_attempt(kind: WriteKind, answer: Result<(i16, Option<String>), CallError>) -> Attempt {
    match answer {
        Err(CallError::NotSent(why)) => Attempt::Retry(why),
        Err(CallError::Lost(why)) => Attempt::Done(Box::new(OpResult {
            outcome: Some(Outcome::Info),
            error: Some("CONNECTION_LOST".into()),
            message: Some(why),
            ..Default::default()
        })),
        Ok((code, message)) => match write_outcome(kind, code, message.clone()) {
            None => Attempt::Retry(format!(
                "{}: {}",
                code_name(code),
                message.unwrap_or_default()
            )),
            Some(r) => Attempt::Done(Box::new(r)),
        },
    }
}

/// A workload client speaking Kafka to the brokers' listeners, one
/// connection per attempt (so a connection that never opened proves the
/// request was never sent).
pub struct KafkaClient {
    /// The brokers' Kafka listeners, `ip:port`.
    addrs: Vec<String>,
    /// Next broker to try: round robin over operations and attempts, so
    /// every broker's listener and forwarder serves the workload.
    rr: usize,
    /// The harness's own address, where connections leave from.
    bind: IpAddr,
    /// TLS and login of every connection.
    security: KafkaSecurity,
    /// `timeout_ms` of every request that has one: how long the broker
    /// keeps trying to reach the active controller.
    pub request_timeout: Duration,
    /// How long an attempt waits for its answer (longer than
    /// `request_timeout`, so the broker's own answer comes first).
    pub answer_timeout: Duration,
    /// Attempts stop after this; the operation then failed (not applied).
    pub op_budget: Duration,
}

impl KafkaClient {
    pub fn new(addrs: Vec<String>, bind: IpAddr, security: KafkaSecurity) -> Self {
        KafkaClient {
            addrs,
            rr: 0,
            bind,
            security,
            request_timeout: Duration::from_millis(2000),
            answer_timeout: Duration::from_millis(3000),
            op_budget: Duration::from_secs(4),
        }
    }

    fn timeout_ms(&self) -> i32 {
        i32::try_from(self.request_timeout.as_millis())
            .unwrap_or(i32::MAX)
            .max(1)
    }

    async fn open(&mut self) -> (String, Result<Conn, CallError>) {
        let Some(addr) = self.addrs.get(self.rr % self.addrs.len().max(1)).cloned() else {
            return (
                String::new(),
                Err(CallError::NotSent("no broker has a Kafka listener".into())),
            );
        };
        let conn = Conn::open(
            self.bind,
            &addr,
            &self.security,
            Duration::from_millis(700),
            self.answer_timeout,
        )
        .await;
        (addr, conn)
    }

    /// Runs attempts on the brokers in turn until one is final or the
    /// budget is spent (every attempt before was not applied).
    async fn run<F>(&mut self, mut attempt: F) -> OpResult
    where
        F: for<'c> FnMut(&'c mut Conn) -> futures_like::BoxFut<'c, Attempt>,
    {
        let start = Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            self.rr = self.rr.wrapping_add(1);
            let (addr, conn) = self.open().await;
            let end = match conn {
                Err(e) => Attempt::Retry(e.text().to_string()),
                Ok(mut c) => {
                    let end = attempt(&mut c).await;
                    c.close().await;
                    end
                }
            };
            match end {
                Attempt::Done(r) => {
                    let mut r = *r;
                    r.node = Some(addr);
                    r.attempts = attempts;
                    return r;
                }
                Attempt::Retry(why) => {
                    if start.elapsed() >= self.op_budget {
                        return OpResult {
                            outcome: Some(Outcome::Fail),
                            error: Some("UNREACHABLE".into()),
                            message: Some(format!(
                                "no attempt reached the active controller: {why}"
                            )),
                            node: Some(addr),
                            attempts,
                            ..Default::default()
                        };
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50 + 25 * attempts.min(8) as u64)).await;
        }
    }

    /// [`run`](Self::run)s one write of `kind`: `req` sent as `api` at
    /// `version`; `item` reads the answer as (error code, message).
    async fn write<Q, R>(
        &mut self,
        kind: WriteKind,
        (api, version): (ApiKey, i16),
        req: Q,
        item: fn(R) -> (i16, Option<String>),
    ) -> OpResult
    where
        Q: Encodable + Clone + Send + Sync + 'static,
        R: Decodable + Send + 'static,
    {
        self.run(|c| {
            let req = req.clone();
            Box::pin(async move {
                let a: Result<R, _> = c.call(api, version, &req).await;
                write_attempt(kind, a.map(item))
            })
        })
        .await
    }

    pub async fn create(&mut self, name: &str, partitions: u32, rf: u32) -> OpResult {
        let req = CreateTopicsRequest::default()
            .with_topics(vec![CreatableTopic::default()
                .with_name(tn(name))
                .with_num_partitions(i32::try_from(partitions).unwrap_or(i32::MAX))
                .with_replication_factor(i16::try_from(rf).unwrap_or(i16::MAX))])
            .with_timeout_ms(self.timeout_ms());
        let mut r = self
            .run(|c| {
                let req = req.clone();
                Box::pin(async move {
                    let a: Result<CreateTopicsResponse, _> =
                        c.call(ApiKey::CreateTopics, V_CREATE_TOPICS, &req).await;
                    let a = a.map(|resp| match resp.topics.first() {
                        Some(t) => (t.error_code, text(&t.error_message), hex_id(&t.topic_id)),
                        None => (ResponseError::UnknownServerError.code(), None, None),
                    });
                    let id = a.as_ref().ok().and_then(|(_, _, id)| id.clone());
                    match write_attempt(WriteKind::Create, a.map(|(c, m, _)| (c, m))) {
                        Attempt::Done(mut r) => {
                            if r.outcome == Some(Outcome::Ok) {
                                r.topic_id = id;
                            }
                            Attempt::Done(r)
                        }
                        retry => retry,
                    }
                })
            })
            .await;
        r.partitions = Some(partitions);
        r.replication_factor = Some(rf);
        r
    }

    pub async fn delete(&mut self, name: &str) -> OpResult {
        let req = DeleteTopicsRequest::default()
            .with_topics(vec![DeleteTopicState::default().with_name(Some(tn(name)))])
            .with_timeout_ms(self.timeout_ms());
        self.write(
            WriteKind::Delete,
            (ApiKey::DeleteTopics, V_DELETE_TOPICS),
            req,
            |resp: DeleteTopicsResponse| {
                item_error(
                    resp.responses
                        .first()
                        .map(|t| (t.error_code, &t.error_message)),
                )
            },
        )
        .await
    }

    /// Raises `name`'s partition count to `total` (CreatePartitions).
    pub async fn create_partitions(&mut self, name: &str, total: u32) -> OpResult {
        let req = CreatePartitionsRequest::default()
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(tn(name))
                .with_count(i32::try_from(total).unwrap_or(i32::MAX))
                .with_assignments(None)])
            .with_timeout_ms(self.timeout_ms());
        let mut r = self
            .write(
                WriteKind::CreatePartitions,
                (ApiKey::CreatePartitions, V_CREATE_PARTITIONS),
                req,
                |resp: CreatePartitionsResponse| {
                    item_error(
                        resp.results
                            .first()
                            .map(|t| (t.error_code, &t.error_message)),
                    )
                },
            )
            .await;
        r.partitions = Some(total);
        r
    }

    /// Sets (`Some`) or removes (`None`) one config of topic `name`
    /// (IncrementalAlterConfigs, which has no `timeout_ms`: the broker
    /// gives the forwarded call its default deadline, and an answer later
    /// than `answer_timeout` is unknown).
    pub async fn alter_config(&mut self, name: &str, key: &str, value: Option<&str>) -> OpResult {
        let config = AlterableConfig::default()
            .with_name(StrBytes::from_string(key.to_string()))
            .with_config_operation(if value.is_some() { OP_SET } else { OP_DELETE })
            .with_value(value.map(|v| StrBytes::from_string(v.to_string())));
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(RESOURCE_TOPIC)
                .with_resource_name(StrBytes::from_string(name.to_string()))
                .with_configs(vec![config]),
        ]);
        let mut r = self
            .write(
                WriteKind::AlterConfig,
                (ApiKey::IncrementalAlterConfigs, V_INCREMENTAL_ALTER_CONFIGS),
                req,
                |resp: IncrementalAlterConfigsResponse| {
                    item_error(
                        resp.responses
                            .first()
                            .map(|t| (t.error_code, &t.error_message)),
                    )
                },
            )
            .await;
        r.config_key = Some(key.to_string());
        r.config_value = value.map(str::to_string);
        r
    }

    /// Starts moving one partition of `name` to `replicas`
    /// (AlterPartitionReassignments); `ok` = accepted, not finished.
    pub async fn reassign(&mut self, name: &str, partition: u32, replicas: &[u32]) -> OpResult {
        let to: Vec<BrokerId> = replicas
            .iter()
            .map(|b| BrokerId(i32::try_from(*b).unwrap_or(i32::MAX)))
            .collect();
        let req = AlterPartitionReassignmentsRequest::default()
            .with_timeout_ms(self.timeout_ms())
            .with_topics(vec![ReassignableTopic::default()
                .with_name(tn(name))
                .with_partitions(vec![ReassignablePartition::default()
                    .with_partition_index(i32::try_from(partition).unwrap_or(i32::MAX))
                    .with_replicas(Some(to))])]);
        let mut r = self
            .write(
                WriteKind::Reassign,
                (ApiKey::AlterPartitionReassignments, V_ALTER_REASSIGNMENTS),
                req,
                |resp: AlterPartitionReassignmentsResponse| {
                    if resp.error_code != 0 {
                        return (resp.error_code, text(&resp.error_message));
                    }
                    let p = resp.responses.first().and_then(|t| t.partitions.first());
                    item_error(p.map(|p| (p.error_code, &p.error_message)))
                },
            )
            .await;
        r.partition = Some(partition);
        r.replicas = Some(replicas.to_vec());
        r
    }

    /// Preferred leader election (ElectLeaders, type 0) on every partition
    /// of `name` the broker's cache lists (partition 0 when it lists none,
    /// so the controller, not the cache, says whether the topic exists).
    /// ELECTION_NOT_NEEDED is not a failure; the first other partition
    /// error is the answer.
    pub async fn elect_preferred(&mut self, name: &str) -> OpResult {
        let metadata_req = MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(tn(name)))
            ]))
            .with_allow_auto_topic_creation(false);
        let timeout_ms = self.timeout_ms();
        let name = name.to_string();
        self.run(|c| {
            let metadata_req = metadata_req.clone();
            let name = name.clone();
            Box::pin(async move {
                // A read: safe to send again when it goes unanswered.
                let cache: MetadataResponse =
                    match c.call(ApiKey::Metadata, V_METADATA, &metadata_req).await {
                        Err(e) => return Attempt::Retry(e.text().to_string()),
                        Ok(m) => m,
                    };
                let mut partitions: Vec<i32> = cache
                    .topics
                    .iter()
                    .filter(|t| t.error_code == 0)
                    .flat_map(|t| t.partitions.iter().map(|p| p.partition_index))
                    .collect();
                if partitions.is_empty() {
                    partitions.push(0);
                }
                let req = ElectLeadersRequest::default()
                    .with_election_type(ELECTION_PREFERRED)
                    .with_timeout_ms(timeout_ms)
                    .with_topic_partitions(Some(vec![TopicPartitions::default()
                        .with_topic(tn(&name))
                        .with_partitions(partitions)]));
                let a: Result<ElectLeadersResponse, _> =
                    c.call(ApiKey::ElectLeaders, V_ELECT_LEADERS, &req).await;
                let not_needed = ResponseError::ElectionNotNeeded.code();
                let a = a.map(|resp| {
                    if resp.error_code != 0 {
                        return (resp.error_code, None);
                    }
                    resp.replica_election_results
                        .iter()
                        .flat_map(|t| t.partition_result.iter())
                        .find(|p| p.error_code != 0 && p.error_code != not_needed)
                        .map_or((0, None), |p| (p.error_code, text(&p.error_message)))
                });
                write_attempt(WriteKind::ElectPreferred, a)
            })
        })
        .await
    }

    /// Describe of one name. Existence and configs come from
    /// DescribeConfigs, which the broker forwards to the active controller
    /// (a linearizable read there, as the gRPC describe is): `absent`, or
    /// `listed` with the configs set on the topic. Kafka has no "marked for
    /// deletion", so a topic being deleted is listed like a present one
    /// ([`Seen::Listed`]: the linearizability checker accepts either). The
    /// topic id and partition count come only from Metadata, i.e. from the
    /// broker's cache, which may lag the controller: they go into the
    /// message, not into the fields the checkers read as linearizable
    /// (a lagging cache would show an older incarnation or count).
    pub async fn describe(&mut self, name: &str) -> OpResult {
        let configs_req = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(RESOURCE_TOPIC)
                .with_resource_name(StrBytes::from_string(name.to_string()))
                .with_configuration_keys(None),
        ]);
        let metadata_req = MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(tn(name)))
            ]))
            .with_allow_auto_topic_creation(false);
        self.run(|c| {
            let (configs_req, metadata_req) = (configs_req.clone(), metadata_req.clone());
            Box::pin(async move {
                let resp: DescribeConfigsResponse = match c
                    .call(ApiKey::DescribeConfigs, V_DESCRIBE_CONFIGS, &configs_req)
                    .await
                {
                    // Reads are safe to send again.
                    Err(e) => return Attempt::Retry(e.text().to_string()),
                    Ok(r) => r,
                };
                let Some(res) = resp.results.first() else {
                    return Attempt::Retry("empty DescribeConfigs answer".into());
                };
                let seen = match read_verdict(res.error_code) {
                    ReadVerdict::Listed => Seen::Listed,
                    ReadVerdict::Absent => Seen::Absent,
                    ReadVerdict::Retry => {
                        return Attempt::Retry(format!(
                            "{}: {}",
                            code_name(res.error_code),
                            text(&res.error_message).unwrap_or_default()
                        ))
                    }
                    ReadVerdict::Refused => {
                        return Attempt::Done(Box::new(OpResult {
                            outcome: Some(Outcome::Fail),
                            error: Some(code_name(res.error_code)),
                            message: text(&res.error_message),
                            ..Default::default()
                        }))
                    }
                };
                let mut r = OpResult {
                    outcome: Some(Outcome::Ok),
                    seen: Some(seen),
                    ..Default::default()
                };
                if seen == Seen::Listed {
                    let set: BTreeMap<String, String> = res
                        .configs
                        .iter()
                        .filter(|e| e.config_source == SOURCE_DYNAMIC_TOPIC)
                        .map(|e| (e.name.to_string(), text(&e.value).unwrap_or_default()))
                        .collect();
                    let cache: Result<MetadataResponse, _> =
                        c.call(ApiKey::Metadata, V_METADATA, &metadata_req).await;
                    r.message = Some(listed_message(cache.ok().as_ref()));
                    r.configs = Some(set);
                }
                Attempt::Done(Box::new(r))
            })
        })
        .await
    }
}

/// A listed topic's description for the history's message: what the
/// broker's cache says of it.
fn listed_message(cache: Option<&MetadataResponse>) -> String {
    let cache = match cache.and_then(|m| m.topics.first()) {
        None => "broker cache: no answer".to_string(),
        Some(t) if t.error_code != 0 => format!("broker cache: {}", code_name(t.error_code)),
        Some(t) => format!(
            "broker cache: id {}, {} partitions",
            hex_id(&t.topic_id).unwrap_or_else(|| "none".into()),
            t.partitions.len()
        ),
    };
    format!("listed (present or being deleted); {cache}")
}

/// Boxed futures of the attempt closures (they borrow the connection).
mod futures_like {
    use std::future::Future;
    use std::pin::Pin;

    pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
}

#[cfg(test)]
mod tests;
