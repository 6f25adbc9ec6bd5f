//! Every RPC of every gRPC service, walked on real processes over mutual
//! TLS as principals the cluster's ACLs give nothing: a user with no ACLs,
//! and a broker's certificate speaking for another broker or for itself on
//! the admin API. Each call must be refused (PermissionDenied, or an
//! authorization error code) or answered with nothing the caller may not
//! see: no protected topic's name or id, no other user's name, no broker
//! incarnation id, no broker address where the answer is not one that
//! lists brokers. The RPCs walked are the ones the proto files declare,
//! read from them at test time: an RPC added later is walked (and judged)
//! without a change here, and one no node serves fails the walk.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use common::*;
use keel_metadata::ErrorCode;
use keel_proto::client::ControllerClient;
use keel_proto::pb;
use keel_tls::{Expect, Identity, Transport};
use prost::bytes::{Buf, BufMut, Bytes};
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MethodDescriptor, ReflectMessage, Value};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;

const LONG: Duration = Duration::from_secs(90);
/// How long one walked call may take, all its answers read.
const CALL: Duration = Duration::from_secs(15);
/// The most answers read from one streaming call.
const MAX_STREAM_ANSWERS: usize = 4;

/// The topic no caller walked here may learn of.
const SECRET_TOPIC: &str = "secret-payroll";
/// A user who holds ACLs on it (its name is not the walkers' to learn).
const CLERK: &str = "payroll-clerk";

/// The RPCs that answer a principal without ACLs (everything else refuses
/// it): the cluster's brokers (as Kafka's Metadata tells any client), and
/// the topics it may describe (none).
const ANSWERED: [&str; 2] = [
    "keel.v1.AdminService/DescribeCluster",
    "keel.v1.AdminService/DescribeTopics",
];

/// The RPCs whose answers list the cluster's brokers, addresses included.
const LISTS_BROKERS: [&str; 1] = ["keel.v1.AdminService/DescribeCluster"];

/// The admin writes a node's certificate must be refused, by name.
const NODE_KEY_REFUSED: [&str; 12] = [
    "keel.v1.AdminService/CreateAcls",
    "keel.v1.AdminService/DeleteAcls",
    "keel.v1.AdminService/CreateTopics",
    "keel.v1.AdminService/DeleteTopics",
    "keel.v1.AdminService/AlterClusterConfigs",
    "keel.v1.AdminService/IncrementalAlterConfigs",
    "keel.v1.AdminService/UnregisterBroker",
    "keel.v1.AdminService/AlterUserScramCredentials",
    "keel.v1.AdminService/AddVoter",
    "keel.v1.AdminService/RemoveVoter",
    "keel.v1.AdminService/ElectLeaders",
    "keel.v1.AdminService/AlterPartitionReassignments",
];

/// Every service and RPC the proto files in `proto/` declare.
fn declared() -> DescriptorPool {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto");
    let mut files: Vec<String> = std::fs::read_dir(&root)
        .expect("read proto/")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".proto"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .proto file in {}", root.display());
    let mut compiler = protox::Compiler::new([&root]).expect("a proto compiler");
    compiler.include_imports(true);
    compiler
        .open_files(&files)
        .expect("the proto files compile");
    compiler.descriptor_pool()
}

/// `package.Service/Method`, as gRPC paths name an RPC.
fn rpc_name(m: &MethodDescriptor) -> String {
    format!("{}/{}", m.parent_service().full_name(), m.name())
}

/// Every RPC the proto files declare.
fn declared_rpcs(pool: &DescriptorPool) -> Vec<MethodDescriptor> {
    pool.services()
        .flat_map(|s| s.methods().collect::<Vec<_>>())
        .collect()
}

/// Messages as the bytes they are on the wire: any RPC can be called with
/// any request, and its answers judged from their descriptors.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// What one call of one RPC on one node came to.
#[derive(Debug)]
struct Outcome {
    /// The status the call (or its stream) ended with, if not OK.
    status: Option<tonic::Status>,
    /// Every answer read, as sent.
    answers: Vec<Bytes>,
}

/// Calls `method` on `ch` with `request` (for a client stream: a stream of
/// that one message), reading at most [`MAX_STREAM_ANSWERS`] answers.
async fn call(ch: Channel, method: &MethodDescriptor, request: Bytes) -> Outcome {
    let path: tonic::codegen::http::uri::PathAndQuery = format!("/{}", rpc_name(method))
        .parse()
        .expect("a gRPC path");
    let mut grpc = tonic::client::Grpc::new(ch);
    let run = async {
        if let Err(e) = grpc.ready().await {
            return Outcome {
                status: Some(tonic::Status::unavailable(e.to_string())),
                answers: vec![],
            };
        }
        let streamed = match (method.is_client_streaming(), method.is_server_streaming()) {
            (false, false) => {
                return match grpc
                    .unary(tonic::Request::new(request), path, RawCodec)
                    .await
                {
                    Ok(r) => Outcome {
                        status: None,
                        answers: vec![r.into_inner()],
                    },
                    Err(s) => Outcome {
                        status: Some(s),
                        answers: vec![],
                    },
                };
            }
            (false, true) => {
                grpc.server_streaming(tonic::Request::new(request), path, RawCodec)
                    .await
            }
            (true, false) => {
                let one = tokio_stream::iter([request]);
                return match grpc
                    .client_streaming(tonic::Request::new(one), path, RawCodec)
                    .await
                {
                    Ok(r) => Outcome {
                        status: None,
                        answers: vec![r.into_inner()],
                    },
                    Err(s) => Outcome {
                        status: Some(s),
                        answers: vec![],
                    },
                };
            }
            (true, true) => {
                let one = tokio_stream::iter([request]);
                grpc.streaming(tonic::Request::new(one), path, RawCodec)
                    .await
            }
        };
        let mut stream = match streamed {
            Ok(r) => r.into_inner(),
            Err(s) => {
                return Outcome {
                    status: Some(s),
                    answers: vec![],
                }
            }
        };
        let mut answers = Vec::new();
        while answers.len() < MAX_STREAM_ANSWERS {
            match stream.message().await {
                Ok(Some(a)) => answers.push(a),
                Ok(None) => break,
                Err(s) => {
                    return Outcome {
                        status: Some(s),
                        answers,
                    }
                }
            }
        }
        Outcome {
            status: None,
            answers,
        }
    };
    match tokio::time::timeout(CALL, run).await {
        Ok(o) => o,
        Err(_) => Outcome {
            status: Some(tonic::Status::deadline_exceeded(
                "the walk's call timed out",
            )),
            answers: vec![],
        },
    }
}

/// How a call was judged.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    /// Refused: PermissionDenied, or only authorization error codes.
    Refused(String),
    /// Answered, naming nothing the caller may not see.
    Answered,
    /// Not served by this node (Unimplemented).
    NotServed,
}

/// Something the caller may not learn, by what it is.
struct Secret {
    what: String,
    bytes: Vec<u8>,
}

/// The error codes of every `keel.v1.Error` in `msg`, at any depth.
fn error_codes(msg: &DynamicMessage, out: &mut Vec<i32>) {
    if msg.descriptor().full_name() == "keel.v1.Error" {
        match msg.get_field_by_name("code").as_deref() {
            Some(Value::EnumNumber(code) | Value::I32(code)) => out.push(*code),
            // Not a code this walk can read: never taken for a refusal.
            _ => out.push(ErrorCode::Internal as i32),
        }
    }
    for (_, value) in msg.fields() {
        codes_in(value, out);
    }
}

fn codes_in(value: &Value, out: &mut Vec<i32>) {
    match value {
        Value::Message(m) => error_codes(m, out),
        Value::List(vs) => vs.iter().for_each(|v| codes_in(v, out)),
        Value::Map(m) => m.values().for_each(|v| codes_in(v, out)),
        _ => {}
    }
}

/// Whether `haystack` holds `needle` anywhere.
fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Judges `outcome` of `method` called with `request`: `Err` says what is
/// wrong (a secret told, no verdict at all). A secret the request itself
/// named may be echoed (an item's refusal names its item); any other is a
/// leak, in an answer or a refusal's message.
fn judge(
    method: &MethodDescriptor,
    request: &[u8],
    outcome: &Outcome,
    secrets: &[Secret],
) -> Result<Verdict, String> {
    let rpc = rpc_name(method);
    let told = |bytes: &[u8]| -> Result<(), String> {
        for s in secrets {
            if holds(bytes, &s.bytes) && !holds(request, &s.bytes) {
                return Err(format!("{rpc} told {}", s.what));
            }
        }
        Ok(())
    };
    if let Some(s) = &outcome.status {
        told(s.message().as_bytes())?;
    }
    let mut codes = Vec::new();
    for a in &outcome.answers {
        told(a)?;
        let m = DynamicMessage::decode(method.output(), a.clone())
            .map_err(|e| format!("{rpc}: an answer that does not decode: {e}"))?;
        error_codes(&m, &mut codes);
    }
    if let Some(s) = &outcome.status {
        return match s.code() {
            tonic::Code::Unimplemented if outcome.answers.is_empty() => Ok(Verdict::NotServed),
            tonic::Code::PermissionDenied | tonic::Code::Unauthenticated => {
                Ok(Verdict::Refused(s.message().to_string()))
            }
            _ => Err(format!("{rpc}: no verdict: {s:?}")),
        };
    }
    let errors: Vec<ErrorCode> = codes
        .into_iter()
        .filter(|c| *c != 0)
        .map(|c| ErrorCode::from_i32(c).unwrap_or(ErrorCode::Internal))
        .collect();
    let authz = |c: &ErrorCode| {
        matches!(
            c,
            ErrorCode::ClusterAuthorizationFailed | ErrorCode::TopicAuthorizationFailed
        )
    };
    if errors.is_empty() {
        Ok(Verdict::Answered)
    } else if errors.iter().all(authz) {
        Ok(Verdict::Refused(format!("{errors:?}")))
    } else {
        Err(format!(
            "{rpc}: answered with errors {errors:?}: no verdict"
        ))
    }
}

/// The request each RPC is walked with: the one that would do the caller
/// most good (its own ACL, the protected topic deleted or altered, another
/// broker's or controller's place taken); an empty message (which asks for
/// everything where a filter is empty) for the rest.
fn request_for(rpc: &str) -> Bytes {
    let secret = || SECRET_TOPIC.to_string();
    let bytes = match rpc.rsplit('/').next().unwrap_or_default() {
        "CreateAcls" => pb::CreateAclsRequest {
            bindings: vec![pb::AclBinding {
                principal: "User:*".into(),
                resource: Some(pb::AclResource {
                    resource: Some(pb::acl_resource::Resource::Cluster(true)),
                }),
                operation: "all".into(),
                permission: pb::AclPermission::Allow as i32,
            }],
        }
        .encode_to_vec(),
        "DeleteAcls" => pb::DeleteAclsRequest {
            filters: vec![pb::AclFilter::default()],
        }
        .encode_to_vec(),
        "CreateTopics" => {
            admin::create_topics_request(vec![admin::creatable("walk-made", 1, 1)]).encode_to_vec()
        }
        "DeleteTopics" => pb::DeleteTopicsRequest {
            names: vec![secret()],
        }
        .encode_to_vec(),
        "CreatePartitions" => pb::CreatePartitionsRequest {
            topics: vec![pb::CreatePartitionsTopic {
                name: secret(),
                total: 2,
                assignments: vec![],
            }],
            validate_only: false,
        }
        .encode_to_vec(),
        "IncrementalAlterConfigs" => pb::IncrementalAlterConfigsRequest {
            topics: vec![pb::AlterTopicConfig {
                topic: secret(),
                ops: vec![pb::AlterConfigOp {
                    key: "retention.ms".into(),
                    value: "1".into(),
                    op: 0,
                }],
            }],
            validate_only: false,
        }
        .encode_to_vec(),
        "AlterClusterConfigs" => pb::AlterClusterConfigsRequest {
            ops: vec![pb::AlterConfigOp {
                key: "retention.ms".into(),
                value: "1".into(),
                op: 0,
            }],
            validate_only: false,
        }
        .encode_to_vec(),
        "ElectLeaders" => pb::ElectLeadersRequest {
            election_type: pb::ElectionType::Unclean as i32,
            partitions: vec![],
        }
        .encode_to_vec(),
        "AlterPartitionReassignments" => pb::AlterPartitionReassignmentsRequest {
            partitions: vec![pb::ReassignablePartition {
                topic: secret(),
                partition: 0,
                replicas: vec![1],
                cancel: false,
            }],
        }
        .encode_to_vec(),
        "UnregisterBroker" => pb::UnregisterBrokerRequest {
            broker_id: 1,
            force: true,
        }
        .encode_to_vec(),
        "AddVoter" => pb::AddVoterRequest {
            node_id: 9,
            address: "127.0.0.1:1".into(),
            ..Default::default()
        }
        .encode_to_vec(),
        "RemoveVoter" => pb::RemoveVoterRequest {
            node_id: 3,
            force: true,
            ..Default::default()
        }
        .encode_to_vec(),
        "AlterUserScramCredentials" => pb::AlterUserScramCredentialsRequest {
            upsertions: vec![],
            deletions: vec![pb::ScramCredentialDeletion {
                user: "somebody".into(),
                mechanism: pb::ScramMechanism::ScramSha256 as i32,
            }],
        }
        .encode_to_vec(),
        "Write" => pb::WriteRequest {
            id: 1,
            op: Some(pb::write_request::Op::DeleteTopics(
                pb::DeleteTopicsRequest {
                    names: vec![secret()],
                },
            )),
        }
        .encode_to_vec(),
        // As broker 1 (BrokerService, ReplicaService).
        "RegisterBroker" => pb::RegisterBrokerRequest {
            broker_id: 1,
            incarnation_id: vec![7; 16],
            cluster_id: CLUSTER_ID.into(),
            address: "127.0.0.1:1".into(),
            ..Default::default()
        }
        .encode_to_vec(),
        "BrokerHeartbeat" => pb::BrokerHeartbeatRequest {
            broker_id: 1,
            broker_epoch: 1,
            ..Default::default()
        }
        .encode_to_vec(),
        "AlterPartition" => pb::AlterPartitionRequest {
            broker_id: 1,
            ..Default::default()
        }
        .encode_to_vec(),
        "ControlledShutdown" => pb::ControlledShutdownRequest {
            broker_id: 1,
            broker_epoch: 1,
        }
        .encode_to_vec(),
        "DescribeAccess" => pb::DescribeAccessRequest { broker_id: 1 }.encode_to_vec(),
        "Fetch" => pb::FetchRequest {
            follower_id: 1,
            ..Default::default()
        }
        .encode_to_vec(),
        // As controller 1 (RaftService).
        "Append" | "AppendStream" | "Vote" | "PreVote" | "Lease" | "InstallSnapshot" => {
            pb::RaftRequest {
                cluster_id: CLUSTER_ID.into(),
                from_node: 1,
                seq: 1,
                ..Default::default()
            }
            .encode_to_vec()
        }
        _ => Vec::new(),
    };
    Bytes::from(bytes)
}

/// A TLS cluster of three controllers and one broker, with the protected
/// topic, a user holding ACLs on it, and that user's SCRAM credential.
async fn cluster_with_a_secret() -> Cluster {
    // The controllers' own default: a broker forwards no super user's power.
    let mut c = Cluster::start(fast_spec(1).tls(true).super_users_via_brokers(false))
        .expect("start a TLS cluster");
    c.wait_active(LONG).await.expect("an active controller");
    c.wait_all_brokers_active(LONG)
        .await
        .expect("the broker is active");
    create_topic(&client(&c), SECRET_TOPIC, 1, 1).await;
    allow_on_topic_prefix(&c, CLERK, &["describe", "alter"], SECRET_TOPIC);
    create_scram_user(&c, CLERK, "SCRAM-SHA-256", "clerk-password");
    c
}

/// What the walkers may not learn in `c`: the protected topic's name and
/// id, the clerk's name, each broker's incarnation id and address.
async fn secrets(c: &Cluster) -> (Vec<Secret>, Vec<Secret>) {
    let admin = client(c);
    let topics = admin
        .admin(|mut x| async move {
            x.describe_topics(pb::DescribeTopicsRequest {
                names: vec![SECRET_TOPIC.into()],
            })
            .await
        })
        .await
        .expect("topics described");
    let id = topics.topics[0].topic_id.clone();
    assert_eq!(id.len(), 16, "{topics:?}");
    let cluster = admin
        .admin(|mut x| async move {
            x.describe_cluster(pb::DescribeClusterRequest::default())
                .await
        })
        .await
        .expect("cluster described");
    let mut always = vec![
        Secret {
            what: format!("the name of topic {SECRET_TOPIC}"),
            bytes: SECRET_TOPIC.as_bytes().to_vec(),
        },
        Secret {
            what: format!("the id of topic {SECRET_TOPIC}"),
            bytes: id,
        },
        Secret {
            what: format!("user {CLERK}'s name"),
            bytes: CLERK.as_bytes().to_vec(),
        },
    ];
    let mut addresses = Vec::new();
    for b in &cluster.brokers {
        assert_eq!(b.incarnation_id.len(), 16, "{b:?}");
        always.push(Secret {
            what: "a broker's incarnation id".into(),
            bytes: b.incarnation_id.clone(),
        });
        let info = b.broker.as_ref().expect("a broker's info");
        addresses.push(Secret {
            what: format!("broker {}'s address", info.broker_id),
            bytes: info.address.as_bytes().to_vec(),
        });
    }
    (always, addresses)
}

/// The verdict on every declared RPC when called as `transport`'s
/// identity: on the active controller for controller services, on the
/// broker for broker services (each RPC is tried on both; a node that does
/// not serve it answers Unimplemented). Fails on any leak, any call with
/// no verdict, and any RPC no node serves.
async fn walk(c: &mut Cluster, transport: &Transport) -> BTreeMap<String, Verdict> {
    let pool = declared();
    let rpcs = declared_rpcs(&pool);
    assert!(rpcs.len() >= 40, "only {} RPCs declared", rpcs.len());
    let active = c.wait_active(LONG).await.expect("an active controller");
    let nodes = [
        (
            "the active controller",
            c.controller(active).address(),
            Expect::Controller,
        ),
        ("broker 1", c.broker(0).address(), Expect::Broker(1)),
    ];
    let (always, addresses) = secrets(c).await;
    let mut verdicts = BTreeMap::new();
    let mut failures = Vec::new();
    for m in &rpcs {
        let rpc = rpc_name(m);
        let request = request_for(&rpc);
        let mut served = None;
        for (node, addr, expect) in &nodes {
            let ep = keel_tls::transport::endpoint(addr)
                .expect("an endpoint")
                .connect_timeout(Duration::from_secs(2));
            let ch = transport
                .connect(ep, None, *expect)
                .await
                .unwrap_or_else(|e| panic!("{node}: the TLS connection opens: {e}"));
            let outcome = call(ch, m, request.clone()).await;
            let mut protected: Vec<&Secret> = always.iter().collect();
            if !LISTS_BROKERS.contains(&rpc.as_str()) {
                protected.extend(&addresses);
            }
            let protected: Vec<Secret> = protected
                .into_iter()
                .map(|s| Secret {
                    what: s.what.clone(),
                    bytes: s.bytes.clone(),
                })
                .collect();
            match judge(m, &request, &outcome, &protected) {
                Ok(Verdict::NotServed) => {}
                Ok(v) => {
                    println!("{rpc} on {node}: {v:?}");
                    served = Some(v);
                }
                Err(e) => failures.push(format!("on {node}: {e}")),
            }
        }
        match served {
            Some(v) => {
                verdicts.insert(rpc, v);
            }
            None => failures.push(format!("{rpc}: no node serves it")),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    verdicts
}

/// Checks `verdicts` cover every declared RPC and each is what a
/// principal without ACLs gets: refused, except [`ANSWERED`].
fn expect_refused_but_answered(verdicts: &BTreeMap<String, Verdict>) {
    let pool = declared();
    let names: BTreeSet<String> = declared_rpcs(&pool).iter().map(rpc_name).collect();
    let walked: BTreeSet<String> = verdicts.keys().cloned().collect();
    assert_eq!(walked, names, "the walk called every declared RPC");
    for a in ANSWERED {
        assert!(names.contains(a), "{a} is no longer declared");
    }
    let wrong: Vec<String> = verdicts
        .iter()
        .filter(|(rpc, v)| {
            let answered = ANSWERED.contains(&rpc.as_str());
            answered != (**v == Verdict::Answered)
        })
        .map(|(rpc, v)| format!("{rpc}: {v:?}"))
        .collect();
    assert!(wrong.is_empty(), "unexpected verdicts: {wrong:#?}");
}

/// A topic as the walk compares it: name, id, partition count, configs.
type TopicShape = (String, Vec<u8>, usize, Vec<(String, String)>);

/// What the walk must not change, as the admin sees it.
#[derive(Debug, PartialEq, Eq)]
struct Unchanged {
    topics: Vec<TopicShape>,
    acls: Vec<String>,
    users: Vec<String>,
    cluster_configs: Vec<(String, String)>,
    brokers: Vec<u32>,
    voters: Vec<u64>,
}

async fn unchanged(admin: &ControllerClient) -> Unchanged {
    let topics = admin
        .admin(|mut x| async move {
            x.describe_topics(pb::DescribeTopicsRequest::default())
                .await
        })
        .await
        .expect("topics described");
    let acls = admin
        .admin(|mut x| async move { x.describe_acls(pb::DescribeAclsRequest::default()).await })
        .await
        .expect("ACLs described");
    let users = admin
        .admin(|mut x| async move {
            x.describe_user_scram_credentials(pb::DescribeUserScramCredentialsRequest::default())
                .await
        })
        .await
        .expect("users described");
    let configs = admin
        .admin(|mut x| async move {
            x.describe_cluster_configs(pb::DescribeClusterConfigsRequest::default())
                .await
        })
        .await
        .expect("cluster configs described");
    let cluster = admin
        .admin(|mut x| async move {
            x.describe_cluster(pb::DescribeClusterRequest::default())
                .await
        })
        .await
        .expect("cluster described");
    let quorum = describe_quorum(admin).await;
    let mut acls: Vec<String> = acls.bindings.iter().map(|b| format!("{b:?}")).collect();
    acls.sort();
    Unchanged {
        topics: topics
            .topics
            .into_iter()
            .map(|t| {
                let configs = t.configs.into_iter().map(|e| (e.key, e.value)).collect();
                (t.name, t.topic_id, t.partitions.len(), configs)
            })
            .collect(),
        acls,
        users: users.results.iter().map(|u| format!("{u:?}")).collect(),
        cluster_configs: configs
            .configs
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect(),
        brokers: cluster
            .brokers
            .iter()
            .filter_map(|b| b.broker.as_ref().map(|i| i.broker_id))
            .collect(),
        voters: quorum.voters.iter().map(|v| v.id).collect(),
    }
}

/// `method` (no request body) over channels from `channel` until it is
/// answered: a broker judges a principal's cluster permissions from its
/// copy of the ACLs and super users, which it reads from the controllers
/// after it registers and after every change, so a caller allowed by the
/// log may be refused for a moment. Fails after 30 s.
async fn answered(channel: impl Fn() -> Channel, method: &MethodDescriptor, who: &str) -> Outcome {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let outcome = call(channel(), method, Bytes::new()).await;
        if outcome.status.is_none() {
            return outcome;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{who} is still refused: {outcome:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_acls_is_refused_every_rpc_or_learns_nothing() {
    let mut c = cluster_with_a_secret().await;
    let admin = client(&c);
    let before = unchanged(&admin).await;
    assert!(
        before.topics.iter().any(|t| t.0 == SECRET_TOPIC),
        "{before:?}"
    );
    let nobody = c
        .transport_as(&Identity::user(CLUSTER_ID, "nobody"))
        .unwrap();
    let verdicts = walk(&mut c, &nobody).await;
    expect_refused_but_answered(&verdicts);
    // DescribeBroker's refusal says who may ask.
    match &verdicts["keel.v1.BrokerControlService/DescribeBroker"] {
        Verdict::Refused(why) => assert!(
            why.contains("describe the cluster") && why.contains("user/nobody"),
            "{why}"
        ),
        v => panic!("DescribeBroker: {v:?}"),
    }
    assert_eq!(unchanged(&admin).await, before, "the walk changed nothing");

    // The check can fail: the broker's own view, asked by a principal
    // allowed to describe the cluster, names the protected topic, and the
    // walk's judge calls it a leak.
    let (always, _) = secrets(&c).await;
    let pool = declared();
    let describe_broker = pool
        .get_service_by_name("keel.v1.BrokerControlService")
        .and_then(|s| s.methods().find(|m| m.name() == "DescribeBroker"))
        .expect("DescribeBroker is declared");
    let ch = |t: &Transport| {
        let ep = keel_tls::transport::endpoint(&c.broker(0).address()).unwrap();
        t.channel(ep, None, Expect::Broker(1))
    };
    let controller = c
        .transport_as(&Identity::controller(CLUSTER_ID, 1))
        .unwrap();
    let own = c.transport_as(&Identity::broker(CLUSTER_ID, 1)).unwrap();
    for (who, t) in [
        ("the admin user", c.transport().clone()),
        ("controller 1's certificate", controller),
        ("broker 1's own certificate", own),
    ] {
        let outcome = answered(|| ch(&t), &describe_broker, who).await;
        let e = judge(&describe_broker, &[], &outcome, &always).unwrap_err();
        assert!(e.contains(SECRET_TOPIC), "{who}: {e}");
    }
    // A user granted Describe on the Cluster resource may ask too, once
    // the broker has read the grant.
    let (code, _, err) = keel_as_admin(
        &c,
        &[
            "acls",
            "add",
            "--principal",
            "User:operator",
            "--operation",
            "describe",
            "--cluster",
            "--allow",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let operator = c
        .transport_as(&Identity::user(CLUSTER_ID, "operator"))
        .unwrap();
    let outcome = answered(|| ch(&operator), &describe_broker, "the operator").await;
    let e = judge(&describe_broker, &[], &outcome, &always).unwrap_err();
    assert!(e.contains(SECRET_TOPIC), "{e}");
    c.check_alive().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_brokers_certificate_has_no_admin_power_of_its_own() {
    let mut c = cluster_with_a_secret().await;
    let admin = client(&c);
    let before = unchanged(&admin).await;
    // Broker 2's certificate (issued by the cluster's CA, as a stolen or
    // spare broker key would be): on the admin API it is a principal
    // without ACLs; toward broker 1 and the controllers it cannot speak
    // as broker 1 or a controller.
    let broker2 = c.transport_as(&Identity::broker(CLUSTER_ID, 2)).unwrap();
    let verdicts = walk(&mut c, &broker2).await;
    expect_refused_but_answered(&verdicts);
    for rpc in NODE_KEY_REFUSED {
        assert!(
            matches!(verdicts.get(rpc), Some(Verdict::Refused(_))),
            "{rpc}: {:?}",
            verdicts.get(rpc)
        );
    }
    assert_eq!(unchanged(&admin).await, before, "the walk changed nothing");

    // A broker's key is trusted to say which Kafka user a request it
    // forwards comes from (as Kafka's Envelope), so it acts as any user it
    // names, but with the ACLs' rights only: a super user's power does not
    // go through a broker unless the controllers allow it
    // (`--super-users-via-brokers`, off by default); never as a node; and
    // a user without ACLs gets nothing (validate_only: nothing is written
    // even if allowed).
    let active = c.wait_active(LONG).await.unwrap();
    let ep = keel_tls::transport::endpoint(&c.controller(active).address()).unwrap();
    let ch = broker2.channel(ep, None, Expect::Controller);
    for (as_whom, want) in [
        ("User:admin", ErrorCode::TopicAuthorizationFailed),
        ("User:nobody", ErrorCode::TopicAuthorizationFailed),
        ("Controller:1", ErrorCode::TopicAuthorizationFailed),
        ("Broker:2", ErrorCode::TopicAuthorizationFailed),
    ] {
        let mut req = tonic::Request::new(pb::CreateTopicsRequest {
            validate_only: true,
            ..admin::create_topics_request(vec![admin::creatable("forwarded", 1, 1)])
        });
        req.metadata_mut().insert(
            keel_proto::forwarded::PRINCIPAL,
            as_whom.parse().expect("a header value"),
        );
        let r = pb::admin_service_client::AdminServiceClient::new(ch.clone())
            .create_topics(req)
            .await
            .expect("answered")
            .into_inner();
        assert_eq!(error_code(&r.error), ErrorCode::None, "{as_whom}: {r:?}");
        assert_eq!(error_code(&r.topics[0].error), want, "{as_whom}: {r:?}");
    }
    assert_eq!(
        unchanged(&admin).await,
        before,
        "validate_only wrote nothing"
    );
    c.check_alive().unwrap();
}

/// The judge itself, on answers known to hold a secret, known to hold
/// another error than a refusal, and a plain refusal.
#[test]
fn the_judge_finds_a_named_secret_and_tells_refusals_from_other_errors() {
    let pool = declared();
    let describe_topics = pool
        .get_service_by_name("keel.v1.AdminService")
        .and_then(|s| s.methods().find(|m| m.name() == "DescribeTopics"))
        .expect("DescribeTopics is declared");
    let secrets = [Secret {
        what: "the secret topic".into(),
        bytes: SECRET_TOPIC.as_bytes().to_vec(),
    }];
    let answer = |r: pb::DescribeTopicsResponse| Outcome {
        status: None,
        answers: vec![Bytes::from(r.encode_to_vec())],
    };
    let leaky = answer(pb::DescribeTopicsResponse {
        topics: vec![pb::TopicDescription {
            name: SECRET_TOPIC.into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    let e = judge(&describe_topics, &[], &leaky, &secrets).unwrap_err();
    assert!(e.contains("the secret topic"), "{e}");
    // Echoing what the request named is no leak.
    let asked = pb::DescribeTopicsRequest {
        names: vec![SECRET_TOPIC.into()],
    }
    .encode_to_vec();
    let refused_item = answer(pb::DescribeTopicsResponse {
        topics: vec![pb::TopicDescription {
            name: SECRET_TOPIC.into(),
            error: Some(pb::Error {
                code: ErrorCode::TopicAuthorizationFailed as i32,
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    });
    assert!(matches!(
        judge(&describe_topics, &asked, &refused_item, &secrets),
        Ok(Verdict::Refused(_))
    ));
    // An error that is no refusal is no verdict.
    let other = answer(pb::DescribeTopicsResponse {
        error: Some(pb::Error {
            code: ErrorCode::NotController as i32,
            ..Default::default()
        }),
        ..Default::default()
    });
    assert!(judge(&describe_topics, &[], &other, &secrets).is_err());
    // A secret in a refusal's message is a leak too.
    let status = Outcome {
        status: Some(tonic::Status::permission_denied(format!(
            "no, about {SECRET_TOPIC}"
        ))),
        answers: vec![],
    };
    assert!(judge(&describe_topics, &[], &status, &secrets).is_err());
    // And nothing at all in an empty answer.
    assert_eq!(
        judge(
            &describe_topics,
            &[],
            &answer(pb::DescribeTopicsResponse::default()),
            &secrets
        ),
        Ok(Verdict::Answered)
    );
}
