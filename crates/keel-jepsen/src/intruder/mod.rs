//! The intruder nemesis and its checker.
//!
//! Through the whole run (in rounds, bounded in count and time) the
//! intruder keeps sending requests with three kinds of bad credentials:
//!
//! * `foreign_ca`: certificates of another CA for this cluster's id, one
//!   naming `User:admin` (creates and deletes topics) and one per broker id
//!   (registers that broker). The client trusts the cluster's CA (its
//!   certificate is public), so the handshake gets as far as the server's
//!   check of the client's certificate.
//! * `wrong_broker`: the certificate of broker X (issued by the cluster's
//!   CA) calling RegisterBroker, BrokerHeartbeat, AlterPartition and
//!   ControlledShutdown as live broker Y, with Y's real broker epoch (from
//!   DescribeCluster) and real partition epochs, so that only the
//!   certificate check can stop them.
//! * `no_acls`: `User:intruder`, issued by the cluster's CA, without any
//!   ACL: create a topic, delete the harness's target topics and a workload
//!   topic, add partitions, alter configs, an unclean election, a
//!   reassignment, unregister a broker, add and remove voters, grant itself
//!   everything, create and delete through a `Write` session, and
//!   (certificate checks again) a Raft Vote for a huge term
//!   to a controller and a LeaderAndIsr with a huge controller epoch to a
//!   broker.
//!
//! When the brokers have Kafka listeners (the intruder nemesis turns them
//! on), each round also attacks one of them ([`crate::intruder::kafka`]):
//! plaintext bytes, a foreign CA's certificate, a broker's certificate, a
//! wrong SCRAM password, a SCRAM user without ACLs and a replayed SCRAM
//! client-final (`kafka_*` credentials).
//!
//! Every attempt and its answer lands in `intruder.jsonl`. An answer is
//! `refused` (PermissionDenied, an authorization error code, or a TLS
//! handshake the server aborted), `errored` (no verdict: a transport error
//! such as a connection refused during a partition, or an error that comes
//! before authorization such as NOT_CONTROLLER) or `accepted`: a request
//! that a certificate check must stop got any answer at all, or an admin
//! request of the user without ACLs got past authorization.
//!
//! The checker ([`check`]) fails the run when an attempt was accepted, when
//! none was made, or when the cluster state after the final heal shows
//! anything the intruder tried (compared with the state before the run):
//! an `intruder-new-*` topic exists; a target topic is gone, marked for
//! deletion, recreated, resized, reassigned or reconfigured; an ACL binding
//! appeared; the voter set changed; a broker is gone, appeared, moved to
//! the forged address or carries the forged incarnation; a Raft term or a
//! broker's controller epoch reached the forged range; a broker history
//! line carries a forged controller epoch. Only the intruder touches those
//! names and values, so none of these can come from another nemesis.

pub mod kafka;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_metadata::TopicId;
use keel_proto::pb;
use keel_proto::pb::admin_service_client::AdminServiceClient;
use keel_proto::pb::broker_control_service_client::BrokerControlServiceClient;
use keel_proto::pb::broker_service_client::BrokerServiceClient;
use keel_proto::pb::raft_service_client::RaftServiceClient;
use keel_tls::Identity;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tonic::transport::Channel;

use crate::brokers::BrokerEvent;
use crate::client::{self, Expect, Transport};
use crate::cluster::{Cluster, CLIENT_IP};

/// The user without ACLs.
pub const USER: &str = "intruder";
/// Names of the topics the intruder tries to create (nobody else does).
pub const CREATE_PREFIX: &str = "intruder-new-";
/// Names of the topics the harness creates (as admin) for the intruder to
/// try to delete, resize, reassign and reconfigure.
pub const TARGET_PREFIX: &str = "intruder-target-";
/// How many target topics, and their partitions.
pub const TARGETS: usize = 2;
pub const TARGET_PARTITIONS: u32 = 2;
/// Controller epochs and Raft terms the intruder forges start here; no
/// legitimate one of a run comes near.
pub const FORGED_EPOCH: u64 = 1_000_000;
/// The incarnation id and address of the intruder's broker registrations.
pub const FORGED_INCARNATION: [u8; 16] = [0x1d; 16];
pub const FORGED_ADDRESS: &str = "127.0.0.1:1";
/// Node id of the voter the intruder tries to add.
pub const FORGED_VOTER: u64 = 9;
/// The config the intruder tries to set on the target topics.
pub const FORGED_CONFIG: (&str, &str) = ("retention.ms", "1");

/// Bounds of the loop.
pub const MAX_ROUNDS: u32 = 200;
const ROUND_PERIOD: Duration = Duration::from_millis(1500);
/// Each request's own bound (connect, handshake, answer).
const T: Duration = Duration::from_millis(1500);

/// The target topic names.
pub fn targets() -> Vec<String> {
    (0..TARGETS)
        .map(|i| format!("{TARGET_PREFIX}{i}"))
        .collect()
}

/// Which bad credential an attempt used.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Credential {
    ForeignCa,
    WrongBroker,
    NoAcls,
    /// The Kafka listeners' attacks ([`crate::intruder::kafka`]).
    KafkaPlaintext,
    KafkaForeignCa,
    KafkaNodeCert,
    KafkaWrongPassword,
    KafkaNoAcls,
    KafkaReplay,
}

impl Credential {
    /// The attacks on the Kafka listeners: each must be refused at least
    /// once in a run that makes them.
    pub const KAFKA: [Credential; 6] = [
        Credential::KafkaPlaintext,
        Credential::KafkaForeignCa,
        Credential::KafkaNodeCert,
        Credential::KafkaWrongPassword,
        Credential::KafkaNoAcls,
        Credential::KafkaReplay,
    ];

    /// Its name in `intruder.jsonl` (`kafka_replay`).
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()
    }
}

/// How the cluster answered an attempt.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// The certificate or authorization check refused it.
    Refused,
    /// No verdict: transport error, or an error before authorization.
    Errored,
    /// It got past the check that must stop it (a violation).
    Accepted,
}

/// One attempt (one line of `intruder.jsonl`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// Milliseconds since the run started (when it was sent).
    pub at_ms: f64,
    pub credential: Credential,
    /// The identity the presented certificate names.
    pub identity: String,
    /// The RPC, e.g. `CreateTopics`.
    pub request: String,
    /// What it aimed at (topic, broker, node).
    pub target: String,
    /// The address it was sent to.
    pub node: String,
    pub answer: Answer,
    /// Error code, gRPC status or transport error (shortened).
    pub detail: String,
}

/// What the checker compares before and after the run (read as admin).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Every topic whose name starts with `intruder-`.
    pub topics: BTreeMap<String, TopicState>,
    /// Every ACL binding, as text.
    pub acls: BTreeSet<String>,
    pub voters: Vec<u64>,
    pub brokers: BTreeMap<u32, BrokerState>,
    /// Raft term per controller that answered.
    pub terms: BTreeMap<u64, u64>,
    /// Controller epoch each broker that answered has seen.
    pub controller_epochs_seen: BTreeMap<u32, u64>,
}

/// A partition's number, replicas, replicas being added, being removed.
pub type PartitionReplicas = (u32, Vec<u32>, Vec<u32>, Vec<u32>);

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicState {
    pub topic_id: String,
    pub marked_for_deletion: bool,
    pub replicas: Vec<PartitionReplicas>,
    pub configs: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerState {
    pub address: String,
    pub incarnation: String,
}

fn bad_address() -> tonic::Status {
    tonic::Status::invalid_argument("bad address")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn short(s: &str) -> String {
    s.chars().take(200).collect()
}

/// The certificates the intruder presents.
pub struct Credentials {
    pub user: Transport,
    /// Brokers' certificates of the cluster's CA, ids `1..=brokers + 1`.
    pub brokers: BTreeMap<u32, Transport>,
    /// Another CA's certificate naming `User:admin`.
    pub foreign_admin: Transport,
    /// Another CA's certificates naming brokers `1..=brokers`.
    pub foreign_brokers: BTreeMap<u32, Transport>,
}

/// Issues the intruder's certificates: the cluster CA's for `User:intruder`
/// and for brokers (kept in the cluster's certs dir), and a foreign CA's in
/// `<run dir>/intruder-certs` (with the cluster CA's certificate as the
/// trusted root).
pub fn credentials(c: &Cluster, run_dir: &Path) -> anyhow::Result<Credentials> {
    let Some(certs) = c.certs_dir() else {
        anyhow::bail!("the intruder nemesis needs a TLS cluster (it is off with --plaintext)");
    };
    let id = c.cluster_id.clone();
    let n = c.broker_count() as u32;
    let user = c.transport_as(&Identity::user(&id, USER))?;
    let mut brokers = BTreeMap::new();
    for b in 1..=n + 1 {
        brokers.insert(b, c.transport_as(&Identity::broker(&id, b))?);
    }
    let dir = run_dir.join("intruder-certs");
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(certs.join("ca.pem"), dir.join("ca.pem"))?;
    let ca = keel_tls::certs::Ca::new(&id)?;
    let foreign = |identity: &Identity| -> anyhow::Result<Transport> {
        let (cert, _) = keel_tls::certs::paths(&dir, identity);
        if !cert.exists() {
            keel_tls::certs::write_issued(&dir, identity, &ca.issue(identity, &[], &[])?)?;
        }
        keel_testkit::cluster::tls_transport(&dir, identity)
    };
    let foreign_admin = foreign(&Identity::user(&id, keel_testkit::cluster::ADMIN_USER))?;
    let mut foreign_brokers = BTreeMap::new();
    for b in 1..=n {
        foreign_brokers.insert(b, foreign(&Identity::broker(&id, b))?);
    }
    Ok(Credentials {
        user,
        brokers,
        foreign_admin,
        foreign_brokers,
    })
}

/// An admin response: its top-level error and its items' errors.
trait Answered {
    fn top(&self) -> Option<&pb::Error>;
    fn items(&self) -> Vec<Option<&pb::Error>>;
}

macro_rules! answered {
    ($t:ty, $items:ident) => {
        impl Answered for $t {
            fn top(&self) -> Option<&pb::Error> {
                self.error.as_ref()
            }
            fn items(&self) -> Vec<Option<&pb::Error>> {
                self.$items.iter().map(|i| i.error.as_ref()).collect()
            }
        }
    };
    ($t:ty) => {
        impl Answered for $t {
            fn top(&self) -> Option<&pb::Error> {
                self.error.as_ref()
            }
            fn items(&self) -> Vec<Option<&pb::Error>> {
                Vec::new()
            }
        }
    };
}

answered!(pb::CreateTopicsResponse, topics);
answered!(pb::DeleteTopicsResponse, topics);
answered!(pb::CreatePartitionsResponse, topics);
answered!(pb::IncrementalAlterConfigsResponse, topics);
answered!(pb::ElectLeadersResponse, partitions);
answered!(pb::AlterPartitionReassignmentsResponse, partitions);
answered!(pb::CreateAclsResponse, results);
answered!(pb::UnregisterBrokerResponse);
answered!(pb::AddVoterResponse);
answered!(pb::RemoveVoterResponse);

fn is_authz(e: &pb::Error) -> bool {
    e.code == pb::ErrorCode::TopicAuthorizationFailed as i32
        || e.code == pb::ErrorCode::ClusterAuthorizationFailed as i32
}

/// A TLS handshake the server aborted (its alert, or the connection it
/// closed in the handshake), as opposed to a server that was not there.
pub fn handshake_refused(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    !t.contains("tcp connect error")
        && !t.contains("connection refused")
        && (t.contains("alert")
            || t.contains("certificate")
            || t.contains("handshake")
            || t.contains("unknownca")
            || t.contains("tls"))
}

/// A request that a certificate check must stop: any answer at all got
/// past it.
pub fn classify_cert<R>(r: &Result<R, tonic::Status>, foreign_ca: bool) -> (Answer, String) {
    match r {
        Ok(_) => (
            Answer::Accepted,
            "answered: the certificate check let it through".into(),
        ),
        Err(s) => {
            let text = format!("{:?}: {} ({:?})", s.code(), s.message(), s);
            if matches!(
                s.code(),
                tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
            ) || (foreign_ca && handshake_refused(&text))
            {
                (Answer::Refused, short(&text))
            } else {
                (Answer::Errored, short(&text))
            }
        }
    }
}

/// An admin request of the user without ACLs.
fn classify_acl<R: Answered>(r: &Result<R, tonic::Status>) -> (Answer, String) {
    match r {
        Err(_) => classify_cert(r, false),
        Ok(r) => {
            if let Some(e) = r.top() {
                let a = if is_authz(e) {
                    Answer::Refused
                } else {
                    Answer::Errored
                };
                return (
                    a,
                    format!("{}: {}", client::code_name(e.code), short(&e.message)),
                );
            }
            let items = r.items();
            if let Some(e) = items.iter().flatten().find(|e| is_authz(e)) {
                return (
                    Answer::Refused,
                    format!("{}: {}", client::code_name(e.code), short(&e.message)),
                );
            }
            let codes: Vec<String> = items
                .iter()
                .map(|e| e.map_or("NONE".into(), |e| client::code_name(e.code)))
                .collect();
            (
                Answer::Accepted,
                format!("got past authorization: item answers {codes:?}"),
            )
        }
    }
}

/// Format of the Raft payloads the intruder forges: keel-raft's format 2
/// (a little-endian `u16` version, then bincode), which nodes still read.
/// Whether or not a node still decodes it, any answer to a forged vote
/// means the certificate check let it through.
const VOTE_FORMAT: u16 = 2;

/// The Raft payload of a vote request for `term` from `candidate`.
fn vote_payload(term: u64, candidate: u64) -> Vec<u8> {
    let req = openraft::raft::VoteRequest::<u64>::new(openraft::Vote::new(term, candidate), None);
    let mut out = VOTE_FORMAT.to_le_bytes().to_vec();
    if let Ok(body) = bincode::serde::encode_to_vec(&req, bincode::config::standard()) {
        out.extend(body);
    }
    out
}

/// What a round knows of the cluster (read as admin).
#[derive(Default)]
struct View {
    active: Option<String>,
    /// Live (unfenced) brokers: id, epoch.
    live: Vec<(u32, u64)>,
    /// Partition states of the target topics.
    partitions: Vec<pb::PartitionState>,
}

/// The intruder.
pub struct Intruder {
    pub ctrl: Vec<String>,
    /// Broker id and address.
    pub brokers: Vec<(u32, String)>,
    pub cluster_id: String,
    pub admin: Transport,
    pub creds: Credentials,
    /// Names of the workload's key space (`jepsen-<i>`, i < names).
    pub names: usize,
    pub start: Instant,
    pub attempts: Arc<Mutex<Vec<Attempt>>>,
    /// The attacks on the brokers' Kafka listeners, when they have some.
    pub kafka: Option<crate::intruder::kafka::KafkaAttacks>,
}

impl Intruder {
    fn ms(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1000.0
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        at_ms: f64,
        credential: Credential,
        identity: &Transport,
        request: &str,
        target: String,
        node: &str,
        (answer, detail): (Answer, String),
    ) {
        self.attempts.lock().unwrap().push(Attempt {
            at_ms,
            credential,
            identity: identity.identity().map(|i| i.uri()).unwrap_or_default(),
            request: request.into(),
            target,
            node: node.into(),
            answer,
            detail,
        });
    }

    fn ch(transport: &Transport, addr: &str, expect: Expect) -> Option<Channel> {
        client::channel(transport, addr, CLIENT_IP.into(), T, expect)
    }

    /// Runs rounds until `stop`, `until` (since start) or [`MAX_ROUNDS`].
    pub async fn run(self, stop: Arc<AtomicBool>, until: Duration) {
        let mut round = 0u32;
        while round < MAX_ROUNDS && !stop.load(Ordering::SeqCst) && self.start.elapsed() < until {
            let t0 = Instant::now();
            self.round(round).await;
            round += 1;
            let pause = ROUND_PERIOD
                .saturating_sub(t0.elapsed())
                .max(Duration::from_millis(200));
            tokio::time::sleep(pause).await;
        }
    }

    async fn view(&self) -> View {
        let mut v = View::default();
        let Some(active) = client::find_active(&self.admin, &self.ctrl, T).await else {
            return v;
        };
        if let Some(c) = client::describe_cluster(&self.admin, &active, T).await {
            v.live = c
                .brokers
                .iter()
                .filter_map(|b| b.broker.as_ref())
                .filter(|b| !b.fenced)
                .map(|b| (b.broker_id, b.broker_epoch))
                .collect();
        }
        if let Some(ch) = Self::ch(&self.admin, &active, Expect::Controller) {
            let req = pb::DescribeTopicsRequest { names: targets() };
            if let Ok(r) = AdminServiceClient::new(ch).describe_topics(req).await {
                v.partitions = r
                    .into_inner()
                    .topics
                    .into_iter()
                    .flat_map(|t| t.partitions)
                    .filter_map(|p| p.state)
                    .collect();
            }
        }
        v.active = Some(active);
        v
    }

    async fn round(&self, round: u32) {
        let v = self.view().await;
        let n = self.ctrl.len().max(1);
        let active = v
            .active
            .clone()
            .unwrap_or_else(|| self.ctrl[round as usize % n].clone());
        let r = round as usize;
        let target = format!("{TARGET_PREFIX}{}", r % TARGETS);
        // Broker Y (impersonated) and its epoch: a live one when known.
        let (y, y_epoch) = if v.live.is_empty() {
            let id = (r % self.brokers.len().max(1)) as u32 + 1;
            (id, 1)
        } else {
            v.live[r % v.live.len()]
        };
        let p = v
            .partitions
            .iter()
            .find(|p| p.leader == Some(y))
            .or_else(|| v.partitions.first())
            .cloned();
        self.foreign_ca(round, &active, &target, y).await;
        self.wrong_broker(&active, y, y_epoch, p.as_ref()).await;
        self.no_acls(round, &active, &target, y, y_epoch, p.as_ref())
            .await;
        if let Some(k) = &self.kafka {
            k.round(round, &target, |a| {
                self.attempts.lock().unwrap().push(Attempt {
                    at_ms: a.sent.saturating_duration_since(self.start).as_secs_f64() * 1000.0,
                    credential: a.credential,
                    identity: a.identity,
                    request: a.request,
                    target: a.target,
                    node: a.node,
                    answer: a.answer.0,
                    detail: a.answer.1,
                })
            })
            .await;
        }
    }

    async fn foreign_ca(&self, round: u32, active: &str, target: &str, y: u32) {
        let t = &self.creds.foreign_admin;
        let name = format!("{CREATE_PREFIX}a{round}");
        let at = self.ms();
        let r = match Self::ch(t, active, Expect::Controller) {
            Some(ch) => {
                AdminServiceClient::new(ch)
                    .create_topics(pb::CreateTopicsRequest {
                        topics: vec![pb::CreatableTopic {
                            name: name.clone(),
                            partitions: 1,
                            replication_factor: 1,
                            ..Default::default()
                        }],
                        validate_only: false,
                    })
                    .await
            }
            None => Err(bad_address()),
        };
        let c = classify_cert(&r, true);
        self.record(
            at,
            Credential::ForeignCa,
            t,
            "CreateTopics",
            name,
            active,
            c,
        );

        let at = self.ms();
        let r = match Self::ch(t, active, Expect::Controller) {
            Some(ch) => {
                AdminServiceClient::new(ch)
                    .delete_topics(pb::DeleteTopicsRequest {
                        names: vec![target.to_string()],
                    })
                    .await
            }
            None => Err(bad_address()),
        };
        let c = classify_cert(&r, true);
        self.record(
            at,
            Credential::ForeignCa,
            t,
            "DeleteTopics",
            target.into(),
            active,
            c,
        );

        let Some(t) = self.creds.foreign_brokers.get(&y) else {
            return;
        };
        let at = self.ms();
        let r = match Self::ch(t, active, Expect::Controller) {
            Some(ch) => {
                BrokerServiceClient::new(ch)
                    .register_broker(self.forged_registration(y, 0))
                    .await
            }
            None => Err(bad_address()),
        };
        let c = classify_cert(&r, true);
        self.record(
            at,
            Credential::ForeignCa,
            t,
            "RegisterBroker",
            format!("broker {y}"),
            active,
            c,
        );
    }

    fn forged_registration(&self, y: u32, previous_epoch: u64) -> pb::RegisterBrokerRequest {
        pb::RegisterBrokerRequest {
            broker_id: y,
            incarnation_id: FORGED_INCARNATION.to_vec(),
            cluster_id: self.cluster_id.clone(),
            address: FORGED_ADDRESS.into(),
            rack: None,
            log_dirs: vec![],
            previous_broker_epoch: previous_epoch,
            kafka_address: None,
        }
    }

    /// Broker X's certificate calling as live broker Y.
    async fn wrong_broker(
        &self,
        active: &str,
        y: u32,
        y_epoch: u64,
        p: Option<&pb::PartitionState>,
    ) {
        let x = self
            .creds
            .brokers
            .keys()
            .copied()
            .find(|&x| x != y && x == y % (self.brokers.len() as u32 + 1) + 1)
            .or_else(|| self.creds.brokers.keys().copied().find(|&x| x != y));
        let Some(t) = x.and_then(|x| self.creds.brokers.get(&x)) else {
            return;
        };
        let who = format!("broker {y} (epoch {y_epoch})");
        let client = || Self::ch(t, active, Expect::Controller).map(BrokerServiceClient::new);

        let at = self.ms();
        let r = match client() {
            Some(mut c) => {
                c.register_broker(self.forged_registration(y, y_epoch))
                    .await
            }
            None => Err(bad_address()),
        };
        let c = classify_cert(&r, false);
        self.record(
            at,
            Credential::WrongBroker,
            t,
            "RegisterBroker",
            who.clone(),
            active,
            c,
        );

        let at = self.ms();
        let r = match client() {
            Some(mut c) => {
                c.broker_heartbeat(pb::BrokerHeartbeatRequest {
                    broker_id: y,
                    broker_epoch: y_epoch,
                    current_metadata_offset: 0,
                    want_fence: true,
                    want_shutdown: true,
                    offline_log_dirs: vec![],
                    disks: vec![],
                    software_version: String::new(),
                })
                .await
            }
            None => Err(bad_address()),
        };
        let c = classify_cert(&r, false);
        self.record(
            at,
            Credential::WrongBroker,
            t,
            "BrokerHeartbeat",
            who.clone(),
            active,
            c,
        );

        let at = self.ms();
        let items: Vec<pb::AlterPartitionItem> = p
            .map(|p| pb::AlterPartitionItem {
                topic_id: p.topic_id.clone(),
                partition: p.partition,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                new_isr: vec![y],
            })
            .into_iter()
            .collect();
        let r = match client() {
            Some(mut c) => {
                c.alter_partition(pb::AlterPartitionRequest {
                    broker_id: y,
                    broker_epoch: y_epoch,
                    partitions: items,
                })
                .await
            }
            None => Err(bad_address()),
        };
        let c = classify_cert(&r, false);
        self.record(
            at,
            Credential::WrongBroker,
            t,
            "AlterPartition",
            who.clone(),
            active,
            c,
        );

        let at = self.ms();
        let r = match client() {
            Some(mut c) => {
                c.controlled_shutdown(pb::ControlledShutdownRequest {
                    broker_id: y,
                    broker_epoch: y_epoch,
                })
                .await
            }
            None => Err(bad_address()),
        };
        let c = classify_cert(&r, false);
        self.record(
            at,
            Credential::WrongBroker,
            t,
            "ControlledShutdown",
            who,
            active,
            c,
        );
    }

    /// An admin request as the user without ACLs, following NOT_CONTROLLER
    /// to the named leader (at most twice).
    async fn as_user<R, F, Fut>(&self, request: &str, target: String, first: &str, call: F)
    where
        R: Answered,
        F: Fn(AdminServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let t = &self.creds.user;
        let mut addr = first.to_string();
        for hop in 0..3 {
            let at = self.ms();
            let r = match Self::ch(t, &addr, Expect::Controller) {
                Some(ch) => {
                    match tokio::time::timeout(T * 2, call(AdminServiceClient::new(ch))).await {
                        Ok(r) => r.map(|r| r.into_inner()),
                        Err(_) => Err(tonic::Status::deadline_exceeded("no answer in time")),
                    }
                }
                None => Err(bad_address()),
            };
            let redirect = match &r {
                Ok(resp) => resp
                    .top()
                    .filter(|e| e.code == pb::ErrorCode::NotController as i32)
                    .and_then(|e| e.leader.as_ref())
                    .map(|l| l.address.clone())
                    .filter(|l| *l != addr && !l.is_empty()),
                Err(_) => None,
            };
            if let (Some(next), true) = (redirect, hop < 2) {
                addr = next;
                continue;
            }
            let c = classify_acl(&r);
            self.record(at, Credential::NoAcls, t, request, target, &addr, c);
            return;
        }
    }

    async fn no_acls(
        &self,
        round: u32,
        active: &str,
        target: &str,
        y: u32,
        y_epoch: u64,
        p: Option<&pb::PartitionState>,
    ) {
        let name = format!("{CREATE_PREFIX}c{round}");
        let req = pb::CreateTopicsRequest {
            topics: vec![pb::CreatableTopic {
                name: name.clone(),
                partitions: 1,
                replication_factor: 1,
                ..Default::default()
            }],
            validate_only: false,
        };
        self.as_user("CreateTopics", name, active, |mut c| {
            let req = req.clone();
            async move { c.create_topics(req).await }
        })
        .await;

        let workload = format!("jepsen-{}", round as usize % self.names.max(1));
        for victim in [target.to_string(), workload] {
            let req = pb::DeleteTopicsRequest {
                names: vec![victim.clone()],
            };
            self.as_user("DeleteTopics", victim, active, |mut c| {
                let req = req.clone();
                async move { c.delete_topics(req).await }
            })
            .await;
        }

        let req = pb::CreatePartitionsRequest {
            topics: vec![pb::CreatePartitionsTopic {
                name: target.into(),
                total: TARGET_PARTITIONS + 1,
                assignments: vec![],
            }],
            validate_only: false,
        };
        self.as_user("CreatePartitions", target.into(), active, |mut c| {
            let req = req.clone();
            async move { c.create_partitions(req).await }
        })
        .await;

        let req = pb::IncrementalAlterConfigsRequest {
            topics: vec![pb::AlterTopicConfig {
                topic: target.into(),
                ops: vec![pb::AlterConfigOp {
                    key: FORGED_CONFIG.0.into(),
                    value: FORGED_CONFIG.1.into(),
                    op: pb::ConfigOp::Set as i32,
                }],
            }],
            validate_only: false,
        };
        self.as_user("IncrementalAlterConfigs", target.into(), active, |mut c| {
            let req = req.clone();
            async move { c.incremental_alter_configs(req).await }
        })
        .await;

        let req = pb::ElectLeadersRequest {
            election_type: pb::ElectionType::Unclean as i32,
            partitions: vec![pb::TopicPartitionRef {
                topic: target.into(),
                partition: 0,
            }],
        };
        self.as_user(
            "ElectLeaders(unclean)",
            format!("{target}-0"),
            active,
            |mut c| {
                let req = req.clone();
                async move { c.elect_leaders(req).await }
            },
        )
        .await;

        let mut replicas: Vec<u32> = p.map(|p| p.replicas.clone()).unwrap_or_default();
        replicas.reverse();
        if replicas.len() > 1 {
            replicas.pop();
        } else {
            replicas = vec![y];
        }
        let req = pb::AlterPartitionReassignmentsRequest {
            partitions: vec![pb::ReassignablePartition {
                topic: target.into(),
                partition: 0,
                replicas: replicas.clone(),
                cancel: false,
            }],
        };
        self.as_user(
            "AlterPartitionReassignments",
            format!("{target}-0 -> {replicas:?}"),
            active,
            |mut c| {
                let req = req.clone();
                async move { c.alter_partition_reassignments(req).await }
            },
        )
        .await;

        self.as_user(
            "UnregisterBroker",
            format!("broker {y}"),
            active,
            |mut c| async move {
                c.unregister_broker(pb::UnregisterBrokerRequest {
                    broker_id: y,
                    ..Default::default()
                })
                .await
            },
        )
        .await;

        let voter = (round as u64 % self.ctrl.len().max(1) as u64) + 1;
        self.as_user(
            "RemoveVoter",
            format!("node {voter}"),
            active,
            |mut c| async move {
                c.remove_voter(pb::RemoveVoterRequest {
                    node_id: voter,
                    ..Default::default()
                })
                .await
            },
        )
        .await;
        self.as_user(
            "AddVoter",
            format!("node {FORGED_VOTER}"),
            active,
            |mut c| async move {
                c.add_voter(pb::AddVoterRequest {
                    node_id: FORGED_VOTER,
                    address: FORGED_ADDRESS.into(),
                    directory_id: String::new(),
                    ..Default::default()
                })
                .await
            },
        )
        .await;

        let me = format!("User:{USER}");
        let binding = |resource| pb::AclBinding {
            principal: me.clone(),
            resource: Some(pb::AclResource {
                resource: Some(resource),
            }),
            operation: "all".into(),
            permission: pb::AclPermission::Allow as i32,
        };
        let req = pb::CreateAclsRequest {
            bindings: vec![
                binding(pb::acl_resource::Resource::Cluster(true)),
                binding(pb::acl_resource::Resource::TopicPrefix("i".into())),
                binding(pb::acl_resource::Resource::TopicPrefix("j".into())),
            ],
        };
        self.as_user("CreateAcls", format!("{me} all"), active, |mut c| {
            let req = req.clone();
            async move { c.create_acls(req).await }
        })
        .await;

        self.write_session(round, active, target).await;
        self.vote(round).await;
        self.leader_and_isr(round, y, y_epoch).await;
    }

    /// The same writes through a `Write` session (authorized as the
    /// session's caller): create a topic, delete a target.
    async fn write_session(&self, round: u32, active: &str, target: &str) {
        use pb::write_request::Op;
        use pb::write_response::Result as Reply;
        let t = &self.creds.user;
        let name = format!("{CREATE_PREFIX}w{round}");
        let writes = vec![
            pb::WriteRequest {
                id: 1,
                op: Some(Op::CreateTopics(pb::CreateTopicsRequest {
                    topics: vec![pb::CreatableTopic {
                        name: name.clone(),
                        partitions: 1,
                        replication_factor: 1,
                        ..Default::default()
                    }],
                    validate_only: false,
                })),
            },
            pb::WriteRequest {
                id: 2,
                op: Some(Op::DeleteTopics(pb::DeleteTopicsRequest {
                    names: vec![target.to_string()],
                })),
            },
        ];
        let at = self.ms();
        let session = async {
            let ch = Self::ch(t, active, Expect::Controller).ok_or_else(bad_address)?;
            let mut answers = AdminServiceClient::new(ch)
                .write(tokio_stream::iter(writes))
                .await?
                .into_inner();
            let mut out = BTreeMap::new();
            while out.len() < 2 {
                match answers.message().await? {
                    Some(m) => {
                        out.insert(m.id, m.result);
                    }
                    None => break,
                }
            }
            Ok::<_, tonic::Status>(out)
        };
        let answers = match tokio::time::timeout(T * 2, session).await {
            Ok(r) => r,
            Err(_) => Err(tonic::Status::deadline_exceeded("no answer in time")),
        };
        for (id, request, aim) in [
            (1u64, "Write(CreateTopics)", name),
            (2, "Write(DeleteTopics)", target.to_string()),
        ] {
            let c = match &answers {
                Err(s) => classify_cert::<()>(&Err(s.clone()), false),
                Ok(m) => match m.get(&id) {
                    None | Some(None) => (Answer::Errored, "no answer in the session".into()),
                    Some(Some(Reply::CreateTopics(r))) => classify_acl(&Ok(r.clone())),
                    Some(Some(Reply::DeleteTopics(r))) => classify_acl(&Ok(r.clone())),
                    Some(Some(Reply::Error(e))) => classify_acl(&Ok(pb::RemoveVoterResponse {
                        error: Some(e.clone()),
                        ..Default::default()
                    })),
                    Some(Some(other)) => (
                        Answer::Accepted,
                        format!("answered with another op: {other:?}"),
                    ),
                },
            };
            self.record(at, Credential::NoAcls, t, request, aim, active, c);
        }
    }

    /// A Raft Vote for a forged term, as the user, to a controller.
    async fn vote(&self, round: u32) {
        let t = &self.creds.user;
        let n = self.ctrl.len();
        if n < 2 {
            return;
        }
        let to = round as usize % n;
        let from = (to + 1) % n;
        let (to_id, from_id) = (to as u64 + 1, from as u64 + 1);
        let addr = &self.ctrl[to];
        let dir = |a: &str| {
            let a = a.to_string();
            async move {
                client::describe_node(&self.admin, &a, T)
                    .await
                    .map(|d| d.directory_id)
                    .unwrap_or_default()
            }
        };
        let to_directory = dir(addr).await;
        let from_directory = dir(&self.ctrl[from]).await;
        let term = FORGED_EPOCH + round as u64;
        let req = pb::RaftRequest {
            cluster_id: self.cluster_id.clone(),
            from_node: from_id,
            payload: vote_payload(term, from_id),
            seq: 0,
            to_node: to_id,
            from_directory,
            to_directory,
        };
        let at = self.ms();
        let r = match Self::ch(t, addr, Expect::ControllerId(to_id)) {
            Some(ch) => RaftServiceClient::new(ch).vote(req).await,
            None => Err(bad_address()),
        };
        let c = classify_cert(&r, false);
        self.record(
            at,
            Credential::NoAcls,
            t,
            "Vote",
            format!("controller {to_id} for term {term} as controller {from_id}"),
            addr,
            c,
        );
    }

    /// A LeaderAndIsr with a forged controller epoch, as the user, to a
    /// broker: a partition of its cache with a forged leader epoch.
    async fn leader_and_isr(&self, round: u32, y: u32, y_epoch: u64) {
        let t = &self.creds.user;
        let Some((_, addr)) = self.brokers.iter().find(|(id, _)| *id == y) else {
            return;
        };
        let epoch = FORGED_EPOCH + round as u64;
        let mut partitions = Vec::new();
        if let Some(d) = client::describe_broker(&self.admin, addr, T).await {
            if let Some(mut p) = d.cache.into_iter().find(|p| p.replicas.contains(&y)) {
                p.leader = Some(y);
                p.isr = vec![y];
                p.leader_epoch = p.leader_epoch.saturating_add(1000);
                p.partition_epoch = p.partition_epoch.saturating_add(1000);
                partitions.push(p);
            }
        }
        let req = pb::LeaderAndIsrRequest {
            stamp: Some(pb::ControllerStamp {
                controller_id: 1,
                controller_epoch: epoch,
                broker_epoch: y_epoch,
            }),
            partitions,
            leaders: vec![],
        };
        let at = self.ms();
        let r = match Self::ch(t, addr, Expect::Broker(y)) {
            Some(ch) => {
                BrokerControlServiceClient::new(ch)
                    .leader_and_isr(req)
                    .await
            }
            None => Err(bad_address()),
        };
        let c = classify_cert(&r, false);
        self.record(
            at,
            Credential::NoAcls,
            t,
            "LeaderAndIsr",
            format!("broker {y} with controller epoch {epoch}"),
            addr,
            c,
        );
    }
}

/// Creates the target topics as admin (bounded); `Err` names what failed.
pub async fn create_targets(
    admin: &mut client::AdminClient,
    replication_factor: u32,
    bound: Duration,
) -> Result<(), String> {
    let start = Instant::now();
    for name in targets() {
        loop {
            let r = admin
                .create(&name, TARGET_PARTITIONS, replication_factor)
                .await;
            let done = r.outcome == Some(crate::history::Outcome::Ok)
                || r.error.as_deref() == Some("TOPIC_ALREADY_EXISTS");
            if done {
                break;
            }
            if start.elapsed() > bound {
                return Err(format!(
                    "cannot create {name}: {:?} {:?}",
                    r.error, r.message
                ));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    Ok(())
}

/// Reads the state the checker compares, as admin, from the active
/// controller (and every node for terms and epochs); retried until
/// `bound`. `Err`: what could not be read.
pub async fn observe(
    admin: &Transport,
    ctrl: &[String],
    brokers: &[(u32, String)],
    bound: Duration,
) -> Result<State, String> {
    let start = Instant::now();
    loop {
        match observe_once(admin, ctrl, brokers).await {
            Ok(s) => return Ok(s),
            Err(e) if start.elapsed() >= bound => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

async fn observe_once(
    admin: &Transport,
    ctrl: &[String],
    brokers: &[(u32, String)],
) -> Result<State, String> {
    let active = client::find_active(admin, ctrl, T)
        .await
        .ok_or("no active controller")?;
    let ch = client::channel(admin, &active, CLIENT_IP.into(), T * 4, Expect::Controller)
        .ok_or("bad address")?;
    let mut c = AdminServiceClient::new(ch);
    let mut s = State::default();

    let ts = c
        .describe_topics(pb::DescribeTopicsRequest::default())
        .await
        .map_err(|e| format!("describe topics: {e}"))?
        .into_inner();
    if let Some(e) = ts.error {
        return Err(format!("describe topics: {}", e.message));
    }
    for t in ts
        .topics
        .into_iter()
        .filter(|t| t.name.starts_with("intruder-"))
    {
        let mut replicas: Vec<PartitionReplicas> = t
            .partitions
            .iter()
            .filter_map(|p| p.state.as_ref())
            .map(|p| {
                (
                    p.partition,
                    p.replicas.clone(),
                    p.adding.clone(),
                    p.removing.clone(),
                )
            })
            .collect();
        replicas.sort();
        s.topics.insert(
            t.name.clone(),
            TopicState {
                topic_id: TopicId::from_bytes(&t.topic_id)
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| hex(&t.topic_id)),
                marked_for_deletion: t.marked_for_deletion,
                replicas,
                configs: t.configs.into_iter().map(|c| (c.key, c.value)).collect(),
            },
        );
    }

    let acls = c
        .describe_acls(pb::DescribeAclsRequest { filter: None })
        .await
        .map_err(|e| format!("describe acls: {e}"))?
        .into_inner();
    if let Some(e) = acls.error {
        return Err(format!("describe acls: {}", e.message));
    }
    s.acls = acls
        .bindings
        .iter()
        .map(|b| {
            format!(
                "{} {:?} {} {:?}",
                b.principal,
                b.resource.as_ref().and_then(|r| r.resource.clone()),
                b.operation,
                pb::AclPermission::try_from(b.permission)
            )
        })
        .collect();

    let q = c
        .describe_quorum(pb::DescribeQuorumRequest::default())
        .await
        .map_err(|e| format!("describe quorum: {e}"))?
        .into_inner();
    if let Some(e) = q.error {
        return Err(format!("describe quorum: {}", e.message));
    }
    s.voters = q.voters.iter().map(|v| v.id).collect();
    s.voters.sort();

    let cl = c
        .describe_cluster(pb::DescribeClusterRequest::default())
        .await
        .map_err(|e| format!("describe cluster: {e}"))?
        .into_inner();
    if let Some(e) = cl.error {
        return Err(format!("describe cluster: {}", e.message));
    }
    for b in &cl.brokers {
        if let Some(info) = &b.broker {
            s.brokers.insert(
                info.broker_id,
                BrokerState {
                    address: info.address.clone(),
                    incarnation: hex(&b.incarnation_id),
                },
            );
        }
    }
    for a in ctrl {
        if let Some(d) = client::describe_node(admin, a, T).await {
            s.terms.insert(d.node_id, d.term);
        }
    }
    for (id, a) in brokers {
        if let Some(d) = client::describe_broker(admin, a, T).await {
            s.controller_epochs_seen
                .insert(*id, d.controller_epoch_seen);
        }
    }
    Ok(s)
}

/// Counts of attempts by answer.
pub fn counts(attempts: &[Attempt]) -> (usize, usize, usize) {
    let c = |a: Answer| attempts.iter().filter(|x| x.answer == a).count();
    (c(Answer::Refused), c(Answer::Errored), c(Answer::Accepted))
}

/// [`check_with_kafka`] of a run without Kafka listeners.
pub fn check(
    attempts: &[Attempt],
    before: Option<&State>,
    after: Option<&State>,
    histories: &BTreeMap<u32, Vec<BrokerEvent>>,
) -> (bool, Value) {
    check_with_kafka(attempts, before, after, histories, false)
}

/// The intruder checker: valid when attempts were made, none was accepted,
/// nothing the intruder tried shows in `after` compared with `before` or
/// in the brokers' histories, and, when the run has Kafka listeners
/// (`kafka`), every kind of Kafka attack was refused at least once (an
/// attack never answered proves nothing).
pub fn check_with_kafka(
    attempts: &[Attempt],
    before: Option<&State>,
    after: Option<&State>,
    histories: &BTreeMap<u32, Vec<BrokerEvent>>,
    kafka: bool,
) -> (bool, Value) {
    let (refused, errored, accepted) = counts(attempts);
    let mut violations: Vec<Value> = Vec::new();
    for a in attempts.iter().filter(|a| a.answer == Answer::Accepted) {
        violations.push(json!({"accepted": a}));
    }
    let mut unknown = Vec::new();
    if attempts.is_empty() {
        unknown.push("the intruder made no attempt: it proves nothing".to_string());
    }
    if kafka {
        for kind in Credential::KAFKA {
            let of = |answer: Option<Answer>| {
                attempts
                    .iter()
                    .filter(|a| a.credential == kind && answer.is_none_or(|x| a.answer == x))
                    .count()
            };
            if of(Some(Answer::Refused)) == 0 {
                unknown.push(format!(
                    "no {} attempt was refused ({} made): the Kafka listeners' check is unproven",
                    kind.name(),
                    of(None)
                ));
            }
        }
    }
    match (before, after) {
        (Some(b), Some(a)) => state_violations(b, a, &mut violations),
        (b, a) => {
            if b.is_none() {
                unknown.push("the state before the run could not be read".into());
            }
            if a.is_none() {
                unknown.push("the state after the run could not be read".into());
            }
        }
    }
    for (id, events) in histories {
        for e in events.iter().filter(|e| e.controller_epoch >= FORGED_EPOCH) {
            violations.push(
                json!({"broker_history_with_forged_controller_epoch": {"broker": id, "line": e}}),
            );
        }
    }
    let mut by_request: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for a in attempts {
        let key = format!(
            "{} {}",
            serde_json::to_value(a.credential)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
            a.request
        );
        let answer = serde_json::to_value(a.answer)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        *by_request
            .entry(key)
            .or_default()
            .entry(answer)
            .or_default() += 1;
    }
    let valid = violations.is_empty() && unknown.is_empty();
    let count = violations.len();
    violations.truncate(20);
    (
        valid,
        json!({
            "attempts": attempts.len(),
            "refused": refused,
            "errored": errored,
            "accepted": accepted,
            "by_request": by_request,
            "violations": violations,
            "violation_count": count,
            "cannot_tell": unknown,
        }),
    )
}

fn state_violations(before: &State, after: &State, out: &mut Vec<Value>) {
    for (name, t) in &after.topics {
        if name.starts_with(CREATE_PREFIX) {
            out.push(json!({"intruder_topic_exists": {"name": name, "topic": t}}));
        }
    }
    for name in targets() {
        let was = before.topics.get(&name);
        let now = after.topics.get(&name);
        match (was, now) {
            (Some(w), Some(n)) if w == n => {}
            (None, _) => out.push(json!({"target_topic_missing_before_the_run": name})),
            (Some(w), n) => out.push(json!({"target_topic_changed": {
                "name": name, "before": w, "after": n,
            }})),
        }
    }
    let new_acls: Vec<&String> = after.acls.difference(&before.acls).collect();
    if !new_acls.is_empty() {
        out.push(json!({"acl_bindings_appeared": new_acls}));
    }
    if after.voters != before.voters {
        out.push(json!({"voters_changed": {"before": before.voters, "after": after.voters}}));
    }
    for (id, b) in &before.brokers {
        match after.brokers.get(id) {
            None => out.push(json!({"broker_gone": id})),
            Some(a) if a.address != b.address => out.push(json!({"broker_address_changed": {
                "broker": id, "before": b.address, "after": a.address,
            }})),
            Some(_) => {}
        }
    }
    let forged = hex(&FORGED_INCARNATION);
    for (id, a) in &after.brokers {
        if !before.brokers.contains_key(id) {
            out.push(json!({"broker_appeared": {"broker": id, "state": a}}));
        }
        if a.incarnation == forged || a.address == FORGED_ADDRESS {
            out.push(json!({"broker_registered_by_the_intruder": {"broker": id, "state": a}}));
        }
    }
    for (id, term) in &after.terms {
        if *term >= FORGED_EPOCH {
            out.push(json!({"controller_in_forged_term": {"node": id, "term": term}}));
        }
    }
    for (id, e) in &after.controller_epochs_seen {
        if *e >= FORGED_EPOCH {
            out.push(json!({"broker_saw_forged_controller_epoch": {"broker": id, "epoch": e}}));
        }
    }
}

/// Writes the attempts as JSON lines.
pub fn write_attempts(path: &Path, attempts: &[Attempt]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for a in attempts {
        serde_json::to_writer(&mut f, a)?;
        f.write_all(b"\n")?;
    }
    f.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_answers_are_classified_by_their_codes() {
        let e = |code: pb::ErrorCode| pb::Error {
            code: code as i32,
            message: "x".into(),
            leader: None,
        };
        let refused: Result<pb::CreateTopicsResponse, tonic::Status> =
            Ok(pb::CreateTopicsResponse {
                error: None,
                topics: vec![pb::CreateTopicResult {
                    error: Some(e(pb::ErrorCode::TopicAuthorizationFailed)),
                    ..Default::default()
                }],
            });
        assert_eq!(classify_acl(&refused).0, Answer::Refused);
        let top: Result<pb::RemoveVoterResponse, tonic::Status> = Ok(pb::RemoveVoterResponse {
            error: Some(e(pb::ErrorCode::ClusterAuthorizationFailed)),
            ..Default::default()
        });
        assert_eq!(classify_acl(&top).0, Answer::Refused);
        let not_ctrl: Result<pb::RemoveVoterResponse, tonic::Status> =
            Ok(pb::RemoveVoterResponse {
                error: Some(e(pb::ErrorCode::NotController)),
                ..Default::default()
            });
        assert_eq!(classify_acl(&not_ctrl).0, Answer::Errored);
        let ok: Result<pb::RemoveVoterResponse, tonic::Status> =
            Ok(pb::RemoveVoterResponse::default());
        assert_eq!(classify_acl(&ok).0, Answer::Accepted);
        // Past authorization, refused for another reason: still a breach.
        let past: Result<pb::CreateTopicsResponse, tonic::Status> = Ok(pb::CreateTopicsResponse {
            error: None,
            topics: vec![pb::CreateTopicResult {
                error: Some(e(pb::ErrorCode::TopicAlreadyExists)),
                ..Default::default()
            }],
        });
        assert_eq!(classify_acl(&past).0, Answer::Accepted);
        let denied: Result<(), tonic::Status> = Err(tonic::Status::permission_denied("no"));
        assert_eq!(classify_cert(&denied, false).0, Answer::Refused);
        let down: Result<(), tonic::Status> = Err(tonic::Status::unavailable(
            "tcp connect error: Connection refused",
        ));
        assert_eq!(classify_cert(&down, true).0, Answer::Errored);
        let answered: Result<(), tonic::Status> = Ok(());
        assert_eq!(classify_cert(&answered, true).0, Answer::Accepted);
    }

    fn kafka_attempt(credential: Credential, answer: Answer) -> Attempt {
        Attempt {
            at_ms: 1.0,
            credential,
            identity: "User:intruder-scram (replayed client-final)".into(),
            request: "SaslAuthenticate".into(),
            target: format!("{CREATE_PREFIX}kr0"),
            node: "127.0.2.21:9094".into(),
            answer,
            detail: String::new(),
        }
    }

    fn every_kafka_attack_refused() -> Vec<Attempt> {
        Credential::KAFKA
            .iter()
            .map(|c| kafka_attempt(*c, Answer::Refused))
            .collect()
    }

    /// The cluster as the intruder found it: every target topic, nothing
    /// else.
    fn targets_untouched() -> State {
        State {
            topics: targets()
                .into_iter()
                .map(|t| (t, TopicState::default()))
                .collect(),
            ..State::default()
        }
    }

    #[test]
    fn kafka_attacks_all_refused_and_nothing_written_pass() {
        let before = targets_untouched();
        let (valid, detail) = check_with_kafka(
            &every_kafka_attack_refused(),
            Some(&before),
            Some(&before),
            &BTreeMap::new(),
            true,
        );
        assert!(valid, "{detail}");
    }

    #[test]
    fn an_accepted_kafka_replay_fails_the_intruder_checker() {
        let before = targets_untouched();
        let mut attempts = every_kafka_attack_refused();
        attempts.push(kafka_attempt(Credential::KafkaReplay, Answer::Accepted));
        let (valid, detail) = check_with_kafka(
            &attempts,
            Some(&before),
            Some(&before),
            &BTreeMap::new(),
            true,
        );
        assert!(!valid);
        assert_eq!(detail["accepted"], 1);
        assert_eq!(detail["violation_count"], 1);
    }

    #[test]
    fn a_topic_made_by_a_kafka_attack_fails_the_intruder_checker_even_if_refused() {
        let before = targets_untouched();
        let mut after = before.clone();
        after
            .topics
            .insert(format!("{CREATE_PREFIX}kp3"), TopicState::default());
        let (valid, detail) = check_with_kafka(
            &every_kafka_attack_refused(),
            Some(&before),
            Some(&after),
            &BTreeMap::new(),
            true,
        );
        assert!(!valid);
        assert!(
            detail["violations"][0]["intruder_topic_exists"].is_object(),
            "{detail}"
        );
    }

    #[test]
    fn a_kafka_attack_never_refused_leaves_the_intruder_checker_unconvinced() {
        let before = targets_untouched();
        let mut attempts: Vec<Attempt> = every_kafka_attack_refused()
            .into_iter()
            .filter(|a| a.credential != Credential::KafkaNodeCert)
            .collect();
        attempts.push(kafka_attempt(Credential::KafkaNodeCert, Answer::Errored));
        let (valid, detail) = check_with_kafka(
            &attempts,
            Some(&before),
            Some(&before),
            &BTreeMap::new(),
            true,
        );
        assert!(!valid);
        assert!(detail["cannot_tell"][0]
            .as_str()
            .unwrap()
            .contains("kafka_node_cert"));
        // A run without Kafka listeners asks for none.
        let grpc_only = vec![Attempt {
            credential: Credential::NoAcls,
            ..kafka_attempt(Credential::NoAcls, Answer::Refused)
        }];
        let (valid, detail) = check_with_kafka(
            &grpc_only,
            Some(&before),
            Some(&before),
            &BTreeMap::new(),
            false,
        );
        assert!(valid, "{detail}");
    }

    #[test]
    fn a_vote_payload_has_the_format_prefix() {
        let p = vote_payload(FORGED_EPOCH, 2);
        assert_eq!(p[..2], VOTE_FORMAT.to_le_bytes());
        assert!(p.len() > 2);
    }
}
