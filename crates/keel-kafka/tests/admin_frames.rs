//! Admin requests, valid or mutated, to the pure core and to a live
//! listener: each is answered with a frame that decodes at its version,
//! or its connection is closed; never a panic, never an abort (a lying
//! array length is refused before the decoder reserves room for it), and
//! the listener keeps serving other connections.
//!
//! The controller behind the listener is a stand-in that answers every
//! call with "no active controller": what is tested is the framing and
//! the conversions, not the controller.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use keel_kafka::{
    answer, handle, serve, AdminCall, AdminReply, BoxFuture, Client, ClusterView, ForwardError,
    Forwarder, ListenerConfig, OnBehalf, Outcome, ViewSource,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Answers every call: no active controller.
struct Leaderless;

impl Forwarder for Leaderless {
    fn forward(
        &self,
        _: AdminCall,
        _: Client,
        _: Duration,
    ) -> BoxFuture<'_, Result<AdminReply, ForwardError>> {
        Box::pin(async { Err(ForwardError::NoController("none elected".into())) })
    }
}

impl ViewSource for Leaderless {
    fn view(&self) -> Arc<ClusterView> {
        Arc::new(ClusterView::default())
    }

    fn forwarder(&self) -> Option<&dyn Forwarder> {
        Some(self)
    }
}

fn s(v: String) -> StrBytes {
    StrBytes::from_string(v)
}

/// `api` v`version` with `body` as this test's client frames it.
fn frame<B: Encodable>(api: ApiKey, version: i16, body: &B) -> Vec<u8> {
    common::request_frame(api, version, 5, "prop", body)
}

/// A valid admin request: (api, version, bytes after the length prefix).
fn admin_request() -> impl Strategy<Value = (ApiKey, i16, Vec<u8>)> {
    let create = (
        2i16..=7,
        vec(
            (
                "[a-z./]{0,5}",
                -2i32..4,
                -2i16..4,
                vec(vec(-1i32..5, 0..3), 0..3),
                vec(("[a-z.]{1,6}", proptest::option::of("[0-9a-z]{0,4}")), 0..3),
            ),
            0..4,
        ),
        any::<bool>(),
    )
        .prop_map(|(v, topics, validate)| {
            let topics = topics
                .into_iter()
                .map(|(n, p, rf, a, c)| {
                    CreatableTopic::default()
                        .with_name(TopicName(s(n)))
                        .with_num_partitions(p)
                        .with_replication_factor(rf)
                        .with_assignments(
                            a.into_iter()
                                .enumerate()
                                .map(|(i, b)| {
                                    CreatableReplicaAssignment::default()
                                        .with_partition_index(i as i32)
                                        .with_broker_ids(b.into_iter().map(BrokerId).collect())
                                })
                                .collect(),
                        )
                        .with_configs(
                            c.into_iter()
                                .map(|(k, val)| {
                                    CreatableTopicConfig::default()
                                        .with_name(s(k))
                                        .with_value(val.map(s))
                                })
                                .collect(),
                        )
                })
                .collect();
            let body = CreateTopicsRequest::default()
                .with_topics(topics)
                .with_validate_only(validate);
            (
                ApiKey::CreateTopics,
                v,
                frame(ApiKey::CreateTopics, v, &body),
            )
        });
    let delete = (1i16..=6, vec("[a-z]{0,4}", 0..4), any::<u128>()).prop_map(|(v, names, id)| {
        let body = if v >= 6 {
            DeleteTopicsRequest::default().with_topics(
                names
                    .into_iter()
                    .map(|n| DeleteTopicState::default().with_name(Some(TopicName(s(n)))))
                    .chain([DeleteTopicState::default()
                        .with_name(None)
                        .with_topic_id(uuid::Uuid::from_u128(id))])
                    .collect(),
            )
        } else {
            DeleteTopicsRequest::default()
                .with_topic_names(names.into_iter().map(|n| TopicName(s(n))).collect())
        };
        (
            ApiKey::DeleteTopics,
            v,
            frame(ApiKey::DeleteTopics, v, &body),
        )
    });
    let alter = (
        0i16..=1,
        vec(
            (
                -1i8..9,
                "[a-z]{0,4}",
                vec(
                    ("[a-z.]{0,5}", -1i8..4, proptest::option::of("[0-9]{0,3}")),
                    0..3,
                ),
            ),
            0..3,
        ),
    )
        .prop_map(|(v, resources)| {
            let body = IncrementalAlterConfigsRequest::default().with_resources(
                resources
                    .into_iter()
                    .map(|(ty, n, cs)| {
                        AlterConfigsResource::default()
                            .with_resource_type(ty)
                            .with_resource_name(s(n))
                            .with_configs(
                                cs.into_iter()
                                    .map(|(k, op, val)| {
                                        AlterableConfig::default()
                                            .with_name(s(k))
                                            .with_config_operation(op)
                                            .with_value(val.map(s))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
            (
                ApiKey::IncrementalAlterConfigs,
                v,
                frame(ApiKey::IncrementalAlterConfigs, v, &body),
            )
        });
    let elect = (
        0i16..=2,
        -1i8..3,
        proptest::option::of(vec(("[a-z]{0,4}", vec(-1i32..4, 0..3)), 0..3)),
    )
        .prop_map(|(v, ty, tps)| {
            let body = ElectLeadersRequest::default()
                .with_election_type(if v >= 1 { ty } else { 0 })
                .with_topic_partitions(tps.map(|tps| {
                    tps.into_iter()
                        .map(|(t, ps)| {
                            TopicPartitions::default()
                                .with_topic(TopicName(s(t)))
                                .with_partitions(ps)
                        })
                        .collect()
                }));
            (
                ApiKey::ElectLeaders,
                v,
                frame(ApiKey::ElectLeaders, v, &body),
            )
        });
    prop_oneof![create, delete, alter, elect, acl_request(), scram_request()]
}

/// One ACL's fields, each code from a little below to a little above
/// Kafka's range: (resource type, name, pattern type, principal, host,
/// operation, permission).
type AclFields = (
    i8,
    Option<String>,
    i8,
    Option<String>,
    Option<String>,
    i8,
    i8,
);

fn acl_fields() -> impl Strategy<Value = AclFields> {
    (
        -1i8..9,
        proptest::option::of(prop_oneof![
            Just("*".to_string()),
            Just("kafka-cluster".to_string()),
            "[a-z]{0,4}"
        ]),
        -1i8..6,
        proptest::option::of(prop_oneof![
            Just("User:alice".to_string()),
            Just("User:*".to_string()),
            "[A-Za-z:]{0,8}"
        ]),
        proptest::option::of(prop_oneof![Just("*".to_string()), "[0-9.]{0,4}"]),
        -1i8..16,
        -1i8..5,
    )
}

/// DescribeAcls, CreateAcls, DeleteAcls at every served version.
fn acl_request() -> impl Strategy<Value = (ApiKey, i16, Vec<u8>)> {
    (0..3, 1i16..=3, vec(acl_fields(), 0..4)).prop_map(|(which, v, acls)| {
        let or_empty = |x: &Option<String>| s(x.clone().unwrap_or_default());
        match which {
            0 => {
                let (t, n, p, pr, h, op, perm) = acls
                    .first()
                    .cloned()
                    .unwrap_or((1, None, 1, None, None, 1, 1));
                let body = DescribeAclsRequest::default()
                    .with_resource_type_filter(t)
                    .with_resource_name_filter(n.map(s))
                    .with_pattern_type_filter(p)
                    .with_principal_filter(pr.map(s))
                    .with_host_filter(h.map(s))
                    .with_operation(op)
                    .with_permission_type(perm);
                (
                    ApiKey::DescribeAcls,
                    v,
                    frame(ApiKey::DescribeAcls, v, &body),
                )
            }
            1 => {
                let body = CreateAclsRequest::default().with_creations(
                    acls.iter()
                        .map(|(t, n, p, pr, h, op, perm)| {
                            create_acls_request::AclCreation::default()
                                .with_resource_type(*t)
                                .with_resource_name(or_empty(n))
                                .with_resource_pattern_type(*p)
                                .with_principal(or_empty(pr))
                                .with_host(or_empty(h))
                                .with_operation(*op)
                                .with_permission_type(*perm)
                        })
                        .collect(),
                );
                (ApiKey::CreateAcls, v, frame(ApiKey::CreateAcls, v, &body))
            }
            _ => {
                let body = DeleteAclsRequest::default().with_filters(
                    acls.into_iter()
                        .map(|(t, n, p, pr, h, op, perm)| {
                            delete_acls_request::DeleteAclsFilter::default()
                                .with_resource_type_filter(t)
                                .with_resource_name_filter(n.map(s))
                                .with_pattern_type_filter(p)
                                .with_principal_filter(pr.map(s))
                                .with_host_filter(h.map(s))
                                .with_operation(op)
                                .with_permission_type(perm)
                        })
                        .collect(),
                );
                (ApiKey::DeleteAcls, v, frame(ApiKey::DeleteAcls, v, &body))
            }
        }
    })
}

/// AlterUserScramCredentials and DescribeUserScramCredentials (v0), users
/// sometimes named twice.
fn scram_request() -> impl Strategy<Value = (ApiKey, i16, Vec<u8>)> {
    let user = prop_oneof![Just("bob".to_string()), "[a-z]{0,3}"];
    let alter = (
        vec((user.clone(), -1i8..4), 0..3),
        vec(
            (
                user.clone(),
                -1i8..4,
                prop_oneof![Just(4096i32), -2i32..20000],
                vec(any::<u8>(), 0..8),
                vec(any::<u8>(), 0..66),
            ),
            0..3,
        ),
    )
        .prop_map(|(dels, ups)| {
            use alter_user_scram_credentials_request::{
                ScramCredentialDeletion, ScramCredentialUpsertion,
            };
            let body = AlterUserScramCredentialsRequest::default()
                .with_deletions(
                    dels.into_iter()
                        .map(|(u, m)| {
                            ScramCredentialDeletion::default()
                                .with_name(s(u))
                                .with_mechanism(m)
                        })
                        .collect(),
                )
                .with_upsertions(
                    ups.into_iter()
                        .map(|(u, m, i, salt, salted)| {
                            ScramCredentialUpsertion::default()
                                .with_name(s(u))
                                .with_mechanism(m)
                                .with_iterations(i)
                                .with_salt(Bytes::from(salt))
                                .with_salted_password(Bytes::from(salted))
                        })
                        .collect(),
                );
            (
                ApiKey::AlterUserScramCredentials,
                0,
                frame(ApiKey::AlterUserScramCredentials, 0, &body),
            )
        });
    let describe = proptest::option::of(vec(user, 0..3)).prop_map(|users| {
        let body = DescribeUserScramCredentialsRequest::default().with_users(users.map(|us| {
            us.into_iter()
                .map(|u| {
                    describe_user_scram_credentials_request::UserName::default().with_name(s(u))
                })
                .collect()
        }));
        (
            ApiKey::DescribeUserScramCredentials,
            0,
            frame(ApiKey::DescribeUserScramCredentials, 0, &body),
        )
    });
    prop_oneof![alter, describe]
}

/// A frame's answer decodes in full at `version`; `Err` says why not.
fn decodes(api: ApiKey, version: i16, frame: &Bytes) -> Result<(), String> {
    let len = i32::from_be_bytes(frame[..4].try_into().unwrap());
    if len as usize != frame.len() - 4 {
        return Err(format!("prefix {len} for {} bytes", frame.len() - 4));
    }
    let mut b = frame.slice(4..);
    ResponseHeader::decode(&mut b, api.response_header_version(version))
        .map_err(|e| e.to_string())?;
    let r = match api {
        ApiKey::CreateTopics => CreateTopicsResponse::decode(&mut b, version).map(|_| ()),
        ApiKey::DeleteTopics => DeleteTopicsResponse::decode(&mut b, version).map(|_| ()),
        ApiKey::IncrementalAlterConfigs => {
            IncrementalAlterConfigsResponse::decode(&mut b, version).map(|_| ())
        }
        ApiKey::ElectLeaders => ElectLeadersResponse::decode(&mut b, version).map(|_| ()),
        ApiKey::CreatePartitions => CreatePartitionsResponse::decode(&mut b, version).map(|_| ()),
        ApiKey::DescribeConfigs => DescribeConfigsResponse::decode(&mut b, version).map(|_| ()),
        ApiKey::AlterConfigs => AlterConfigsResponse::decode(&mut b, version).map(|_| ()),
        ApiKey::AlterPartitionReassignments => {
            AlterPartitionReassignmentsResponse::decode(&mut b, version).map(|_| ())
        }
        ApiKey::ListPartitionReassignments => {
            ListPartitionReassignmentsResponse::decode(&mut b, version).map(|_| ())
        }
        ApiKey::DescribeAcls => DescribeAclsResponse::decode(&mut b, version).map(|_| ()),
        ApiKey::CreateAcls => CreateAclsResponse::decode(&mut b, version).map(|_| ()),
        ApiKey::DeleteAcls => DeleteAclsResponse::decode(&mut b, version).map(|_| ()),
        ApiKey::AlterUserScramCredentials => {
            AlterUserScramCredentialsResponse::decode(&mut b, version).map(|_| ())
        }
        ApiKey::DescribeUserScramCredentials => {
            DescribeUserScramCredentialsResponse::decode(&mut b, version).map(|_| ())
        }
        // Mutated into a view-only API: frames.rs checks those bodies.
        _ => Ok(()),
    };
    r.map_err(|e| e.to_string())?;
    Ok(())
}

fn mutate(bytes: &mut Vec<u8>, muts: &[(prop::sample::Index, u8, u8)]) {
    for (at, kind, byte) in muts {
        if bytes.is_empty() {
            return;
        }
        let i = at.index(bytes.len());
        match kind % 4 {
            0 => bytes[i] = *byte,
            1 => bytes[i] ^= 1 << (byte % 8),
            2 => bytes.truncate(i),
            _ => bytes.insert(i, *byte),
        }
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 768, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn admin_requests_valid_or_mutated_are_answered_well_or_closed(
        (api, version, bytes) in admin_request(),
        muts in vec((any::<prop::sample::Index>(), any::<u8>(), any::<u8>()), 0..4),
    ) {
        let mut bytes = bytes;
        let valid = muts.is_empty();
        mutate(&mut bytes, &muts);
        let view = ClusterView::default();
        let out = match handle(&bytes, &view) {
            Outcome::Forward(f) => {
                let client = Client::anonymous(None);
                let fwd = OnBehalf { forwarder: &Leaderless, client: &client };
                block_on(answer(*f, &view, &fwd))
            }
            other => other,
        };
        match &out {
            Outcome::Respond { api: a, version: v, frame } => {
                prop_assert!(decodes(*a, *v, frame).is_ok(), "{:?}", decodes(*a, *v, frame));
            }
            Outcome::Close(why) => prop_assert!(!valid, "a valid {api:?} v{version} closed: {why}"),
            Outcome::Forward(_) => prop_assert!(false, "answered with a forward"),
        }
    }
}

/// An ApiVersions v3 frame, length prefix included.
fn api_versions_frame() -> Vec<u8> {
    let body = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("t"))
        .with_client_software_version(StrBytes::from_static_str("1"));
    let f = frame(ApiKey::ApiVersions, 3, &body);
    let mut out = Vec::new();
    out.put_i32(f.len() as i32);
    out.extend_from_slice(&f);
    out
}

/// Reads one answer's correlation id, or `None` once the server closed.
async fn next_answer(s: &mut TcpStream) -> Option<i32> {
    let io = async {
        let len = s.read_i32().await.ok()?;
        let mut buf = vec![0u8; usize::try_from(len).ok()?];
        s.read_exact(&mut buf).await.ok()?;
        Some(i32::from_be_bytes(buf[..4].try_into().ok()?))
    };
    tokio::time::timeout(Duration::from_secs(10), io)
        .await
        .expect("an answer or a close within 10 s")
}

#[test]
fn a_live_listener_survives_mutated_admin_frames_and_keeps_serving() {
    block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let config = ListenerConfig {
            max_request_bytes: 1 << 16,
            idle_timeout: Duration::from_secs(30),
            ..ListenerConfig::default()
        };
        let server = tokio::spawn(serve(listener, Arc::new(Leaderless), config, stop_rx));
        let mut good = TcpStream::connect(addr).await.unwrap();

        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: 128,
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        let strategy = (
            admin_request(),
            vec(
                (any::<prop::sample::Index>(), any::<u8>(), any::<u8>()),
                0..4,
            ),
            any::<bool>(),
        );
        for _ in 0..128 {
            let ((_, _, mut bytes), muts, lie) = strategy.new_tree(&mut runner).unwrap().current();
            mutate(&mut bytes, &muts);
            let mut f = Vec::new();
            // Sometimes a prefix that does not match the bytes sent.
            let len = if lie {
                bytes.len() as i32 + 3
            } else {
                bytes.len() as i32
            };
            f.put_i32(len);
            f.extend_from_slice(&bytes);
            let mut bad = TcpStream::connect(addr).await.unwrap();
            bad.write_all(&f).await.unwrap();
            if lie {
                // The rest of the frame never comes: the client leaves.
                drop(bad);
            } else {
                // An answer or a close; then the client leaves.
                let _ = next_answer(&mut bad).await;
            }
            // The long-lived connection is still served, in order.
            good.write_all(&api_versions_frame()).await.unwrap();
            assert_eq!(next_answer(&mut good).await, Some(5));
        }
        stop.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the listener stops")
            .unwrap();
    });
}
