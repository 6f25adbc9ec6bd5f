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
//! * `controller_key`: a controller's own certificate (round-robin over
//!   the controllers) sending brokers LeaderAndIsr, UpdateMetadata and
//!   StopReplica with a forged controller epoch and their real broker
//!   epoch ([`controller_key`]): the brokers' epoch fence must refuse them.
//!
//! * `flood`: every few rounds, silent TCP connections from an address of
//!   the intruder's own to the active controller, held open ([`flood`]):
//!   the listener must close them, and an admin request from elsewhere must
//!   still be answered meanwhile.
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

mod acl;
mod check;
mod classify;
mod controller_key;
mod flood;
pub mod kafka;

pub use check::{
    check, check_with_kafka, counts, create_targets, observe, write_attempts, BrokerState,
    PartitionReplicas, State, TopicState,
};
use classify::{classify_acl, Answered};
pub use classify::{classify_cert, handshake_refused};

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
use keel_testkit::admin::{creatable, create_topics_request, set_config};
use keel_tls::Identity;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tonic::transport::Channel;

use crate::brokers::BrokerEvent;
use crate::client::{self, Expect, Transport};
use crate::cluster::Cluster;

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
    /// A controller's own certificate with a forged controller epoch.
    ControllerKey,
    /// Silent connections to a listener, held open.
    Flood,
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
    /// The controllers' own certificates, by node id.
    pub controllers: BTreeMap<u64, Transport>,
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
    let mut controllers = BTreeMap::new();
    for node in 1..=c.controller_count() as u64 {
        controllers.insert(node, c.transport_as(&Identity::controller(&id, node))?);
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
        // The cluster's CA file, another CA's certificate: it would not
        // load checked.
        keel_testkit::cluster::tls_transport_unchecked(&dir, identity)
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
        controllers,
    })
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

    /// One attempt with `credential` (certificate `t`): `request` aimed at
    /// `target` on `node`, recorded with when it was sent and how
    /// `classify` reads its answer. `send` opens the channel and returns
    /// the call, `None` when the address does not parse.
    async fn attempt<R, Fut>(
        &self,
        (credential, t): (Credential, &Transport),
        (request, target): (&str, String),
        node: &str,
        send: impl FnOnce() -> Option<Fut>,
        classify: impl FnOnce(&Result<R, tonic::Status>) -> (Answer, String),
    ) where
        Fut: Future<Output = Result<R, tonic::Status>>,
    {
        let at = self.ms();
        let r = match send() {
            Some(call) => call.await,
            None => Err(bad_address()),
        };
        self.record(at, credential, t, request, target, node, classify(&r));
    }

    fn ch(transport: &Transport, addr: &str, expect: Expect) -> Option<Channel> {
        client::client_channel(transport, addr, T, expect)
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
        self.controller_key(round, y, y_epoch).await;
        self.flood(round, &active);
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
        let admin = || Self::ch(t, active, Expect::Controller).map(AdminServiceClient::new);
        let req = create_topics_request(vec![creatable(&name, 1, 1)]);
        self.attempt(
            (Credential::ForeignCa, t),
            ("CreateTopics", name),
            active,
            || admin().map(|mut c| async move { c.create_topics(req).await }),
            |r| classify_cert(r, true),
        )
        .await;

        let req = pb::DeleteTopicsRequest {
            names: vec![target.to_string()],
        };
        self.attempt(
            (Credential::ForeignCa, t),
            ("DeleteTopics", target.into()),
            active,
            || admin().map(|mut c| async move { c.delete_topics(req).await }),
            |r| classify_cert(r, true),
        )
        .await;

        let Some(t) = self.creds.foreign_brokers.get(&y) else {
            return;
        };
        self.attempt(
            (Credential::ForeignCa, t),
            ("RegisterBroker", format!("broker {y}")),
            active,
            || {
                Self::ch(t, active, Expect::Controller).map(|ch| async move {
                    BrokerServiceClient::new(ch)
                        .register_broker(self.forged_registration(y, 0))
                        .await
                })
            },
            |r| classify_cert(r, true),
        )
        .await;
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

        self.attempt(
            (Credential::WrongBroker, t),
            ("RegisterBroker", who.clone()),
            active,
            || {
                client().map(|mut c| async move {
                    c.register_broker(self.forged_registration(y, y_epoch))
                        .await
                })
            },
            |r| classify_cert(r, false),
        )
        .await;

        let req = pb::BrokerHeartbeatRequest {
            broker_id: y,
            broker_epoch: y_epoch,
            current_metadata_offset: 0,
            want_fence: true,
            want_shutdown: true,
            offline_log_dirs: vec![],
            disks: vec![],
            software_version: String::new(),
        };
        self.attempt(
            (Credential::WrongBroker, t),
            ("BrokerHeartbeat", who.clone()),
            active,
            || client().map(|mut c| async move { c.broker_heartbeat(req).await }),
            |r| classify_cert(r, false),
        )
        .await;

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
        let req = pb::AlterPartitionRequest {
            broker_id: y,
            broker_epoch: y_epoch,
            partitions: items,
        };
        self.attempt(
            (Credential::WrongBroker, t),
            ("AlterPartition", who.clone()),
            active,
            || client().map(|mut c| async move { c.alter_partition(req).await }),
            |r| classify_cert(r, false),
        )
        .await;

        let req = pb::ControlledShutdownRequest {
            broker_id: y,
            broker_epoch: y_epoch,
        };
        self.attempt(
            (Credential::WrongBroker, t),
            ("ControlledShutdown", who),
            active,
            || client().map(|mut c| async move { c.controlled_shutdown(req).await }),
            |r| classify_cert(r, false),
        )
        .await;
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
        self.attempt(
            (Credential::NoAcls, t),
            (
                "Vote",
                format!("controller {to_id} for term {term} as controller {from_id}"),
            ),
            addr,
            || {
                Self::ch(t, addr, Expect::ControllerId(to_id))
                    .map(|ch| async move { RaftServiceClient::new(ch).vote(req).await })
            },
            |r| classify_cert(r, false),
        )
        .await;
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
        self.attempt(
            (Credential::NoAcls, t),
            (
                "LeaderAndIsr",
                format!("broker {y} with controller epoch {epoch}"),
            ),
            addr,
            || {
                Self::ch(t, addr, Expect::Broker(y)).map(|ch| async move {
                    BrokerControlServiceClient::new(ch)
                        .leader_and_isr(req)
                        .await
                })
            },
            |r| classify_cert(r, false),
        )
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vote_payload_has_the_format_prefix() {
        let p = vote_payload(FORGED_EPOCH, 2);
        assert_eq!(p[..2], VOTE_FORMAT.to_le_bytes());
        assert!(p.len() > 2);
    }
}
