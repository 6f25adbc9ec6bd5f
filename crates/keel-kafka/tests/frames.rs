//! Any bytes in, never a panic: each request frame, valid, mutated or
//! random, gets either a well-formed answer (the length it claims, the
//! request's correlation id, a body that decodes in full at the answered
//! version) or a closed connection.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, DescribeClusterRequest,
    DescribeClusterResponse, MetadataRequest, MetadataResponse, RequestHeader, ResponseHeader,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use keel_kafka::{handle, BrokerView, ClusterView, Outcome, PartitionView, TopicView, SERVED};
use proptest::collection::vec;
use proptest::prelude::*;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---- views ------------------------------------------------------------------

fn broker_view() -> impl Strategy<Value = BrokerView> {
    (
        any::<bool>(),
        any::<bool>(),
        proptest::option::of("[a-z]{1,3}"),
    )
        .prop_map(|(listener, fenced, rack)| BrokerView {
            kafka_address: listener.then(|| "127.0.0.1:9094".parse::<SocketAddr>().unwrap()),
            rack,
            fenced,
        })
}

fn partition_view(index: u32) -> impl Strategy<Value = PartitionView> {
    (
        proptest::option::of(0u32..7),
        any::<u32>(),
        vec(0u32..7, 0..4),
        vec(0u32..7, 0..4),
    )
        .prop_map(move |(leader, leader_epoch, replicas, isr)| PartitionView {
            index,
            leader,
            leader_epoch,
            replicas,
            isr,
        })
}

fn topic_view() -> impl Strategy<Value = TopicView> {
    (any::<u128>(), 0usize..4).prop_flat_map(|(id, n)| {
        (0..n as u32)
            .map(partition_view)
            .collect::<Vec<_>>()
            .prop_map(move |partitions| TopicView { id, partitions })
    })
}

fn cluster_view() -> impl Strategy<Value = ClusterView> {
    (
        "[a-z]{0,8}",
        0u32..7,
        proptest::collection::btree_map(0u32..7, broker_view(), 0..6),
        proptest::collection::btree_map("[a-c]{1,3}", topic_view(), 0..5),
    )
        .prop_map(|(cluster_id, broker_id, brokers, topics)| ClusterView {
            cluster_id,
            broker_id,
            brokers,
            topics,
            quorum: None,
        })
}

// ---- requests ---------------------------------------------------------------

/// A request as a client would send it: (api, version, frame bytes after
/// the length prefix).
#[derive(Clone, Debug)]
struct Request {
    api: ApiKey,
    version: i16,
    bytes: Vec<u8>,
}

fn encode_request<B: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &B,
) -> Request {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("proptest")));
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, api.request_header_version(version))
        .expect("header encodes");
    body.encode(&mut buf, version).expect("body encodes");
    Request {
        api,
        version,
        bytes: buf.to_vec(),
    }
}

fn metadata_topic(version: i16) -> impl Strategy<Value = MetadataRequestTopic> {
    (proptest::option::of("[a-c]{1,3}|[!-~]{0,4}"), any::<u128>()).prop_map(move |(name, id)| {
        // Names are non-nullable before v10, ids exist from v10.
        let name = if version < 10 {
            Some(name.unwrap_or_default())
        } else {
            name
        };
        MetadataRequestTopic::default()
            .with_name(name.map(|n| TopicName(StrBytes::from_string(n))))
            .with_topic_id(if version >= 10 {
                uuid::Uuid::from_u128(id)
            } else {
                uuid::Uuid::nil()
            })
    })
}

fn valid_request() -> impl Strategy<Value = Request> {
    let api_versions =
        (0i16..=4, "[a-z]{0,6}", "[0-9.]{0,4}", any::<i32>()).prop_map(|(v, name, ver, id)| {
            let body = ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_string(name))
                .with_client_software_version(StrBytes::from_string(ver));
            encode_request(ApiKey::ApiVersions, v, id, &body)
        });
    let metadata = (0i16..=13).prop_flat_map(|v| {
        (
            proptest::option::of(vec(metadata_topic(v), 0..5)),
            any::<bool>(),
            any::<i32>(),
        )
            .prop_map(move |(topics, auto, id)| {
                // Null (all topics) exists from v1.
                let topics = if v == 0 {
                    Some(topics.unwrap_or_default())
                } else {
                    topics
                };
                let body = MetadataRequest::default()
                    .with_topics(topics)
                    .with_allow_auto_topic_creation(if v >= 4 { auto } else { true });
                encode_request(ApiKey::Metadata, v, id, &body)
            })
    });
    let describe =
        (0i16..=2, 1i8..=2, any::<bool>(), any::<i32>()).prop_map(|(v, endpoint, fenced, id)| {
            let body = DescribeClusterRequest::default()
                .with_endpoint_type(if v >= 1 { endpoint } else { 1 })
                .with_include_fenced_brokers(v >= 2 && fenced);
            encode_request(ApiKey::DescribeCluster, v, id, &body)
        });
    prop_oneof![api_versions, metadata, describe]
}

/// A valid request changed the way a broken or hostile client would.
#[derive(Clone, Debug)]
enum Mutation {
    Flip {
        at: prop::sample::Index,
        bit: u8,
    },
    Set {
        at: prop::sample::Index,
        byte: u8,
    },
    Truncate {
        at: prop::sample::Index,
    },
    Insert {
        at: prop::sample::Index,
        bytes: Vec<u8>,
    },
    /// Another API key (any i16) or version in the header.
    Key(i16),
    Version(i16),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (any::<prop::sample::Index>(), any::<u8>())
            .prop_map(|(at, byte)| Mutation::Set { at, byte }),
        any::<prop::sample::Index>().prop_map(|at| Mutation::Truncate { at }),
        (any::<prop::sample::Index>(), vec(any::<u8>(), 1..8))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        prop_oneof![any::<i16>(), -2i16..80].prop_map(Mutation::Key),
        prop_oneof![any::<i16>(), -2i16..20].prop_map(Mutation::Version),
    ]
}

fn mutate(bytes: &mut Vec<u8>, m: &Mutation) {
    match m {
        Mutation::Flip { at, bit } => {
            let i = at.index(bytes.len());
            bytes[i] ^= 1 << bit;
        }
        Mutation::Set { at, byte } => {
            let i = at.index(bytes.len());
            bytes[i] = *byte;
        }
        Mutation::Truncate { at } => bytes.truncate(at.index(bytes.len())),
        Mutation::Insert { at, bytes: b } => {
            let i = at.index(bytes.len() + 1);
            bytes.splice(i..i, b.iter().copied());
        }
        Mutation::Key(k) if bytes.len() >= 2 => bytes[..2].copy_from_slice(&k.to_be_bytes()),
        Mutation::Version(v) if bytes.len() >= 4 => bytes[2..4].copy_from_slice(&v.to_be_bytes()),
        Mutation::Key(_) | Mutation::Version(_) => {}
    }
}

// ---- checks -----------------------------------------------------------------

/// Decodes an answer in full; `Err` says what is wrong with it.
fn decode_answer(request: &[u8], outcome: &Outcome) -> Result<Option<Answer>, String> {
    let Outcome::Respond {
        api,
        version,
        frame,
    } = outcome
    else {
        return Ok(None);
    };
    let (api, version) = (*api, *version);
    let len = i32::from_be_bytes(frame[..4].try_into().unwrap());
    if len as usize != frame.len() - 4 {
        return Err(format!("prefix says {len}, frame has {}", frame.len() - 4));
    }
    if i16::from_be_bytes([request[0], request[1]]) != api as i16 {
        return Err(format!("answered {api:?} to another API"));
    }
    let mut buf = Bytes::copy_from_slice(&frame[4..]);
    let header = ResponseHeader::decode(&mut buf, api.response_header_version(version))
        .map_err(|e| format!("header: {e}"))?;
    let asked = i32::from_be_bytes(request[4..8].try_into().unwrap());
    if header.correlation_id != asked {
        return Err(format!(
            "correlation id {} answers {asked}",
            header.correlation_id
        ));
    }
    let answer = match api {
        ApiKey::ApiVersions => {
            ApiVersionsResponse::decode(&mut buf, version).map(Answer::ApiVersions)
        }
        ApiKey::Metadata => MetadataResponse::decode(&mut buf, version).map(Answer::Metadata),
        ApiKey::DescribeCluster => {
            DescribeClusterResponse::decode(&mut buf, version).map(Answer::DescribeCluster)
        }
        other => return Err(format!("answered {other:?}, which is not served")),
    }
    .map_err(|e| format!("body: {e}"))?;
    if !buf.is_empty() {
        return Err(format!("{} bytes after the body", buf.len()));
    }
    Ok(Some(answer))
}

#[derive(Debug)]
enum Answer {
    ApiVersions(ApiVersionsResponse),
    Metadata(MetadataResponse),
    DescribeCluster(DescribeClusterResponse),
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn a_valid_request_gets_a_well_formed_answer(view in cluster_view(), req in valid_request()) {
        let out = handle(&req.bytes, &view);
        let answer = decode_answer(&req.bytes, &out);
        prop_assert!(matches!(answer, Ok(Some(_))), "{:?} v{}: {:?} {:?}", req.api, req.version, out, answer);
        match answer.unwrap().unwrap() {
            Answer::ApiVersions(r) => {
                // Only a client naming itself against Kafka's rule is refused.
                if r.error_code == 0 {
                    let listed: Vec<_> = r.api_keys.iter().map(|k| (k.api_key, k.min_version, k.max_version)).collect();
                    let served: Vec<_> = SERVED.iter().map(|(k, a, b)| (*k as i16, *a, *b)).collect();
                    prop_assert_eq!(listed, served);
                } else {
                    prop_assert!(req.version >= 3);
                    prop_assert_eq!(r.error_code, 42);
                }
            }
            Answer::Metadata(r) => {
                // Brokers listed: exactly the live ones with a listener.
                let listed: Vec<i32> = r.brokers.iter().map(|b| b.node_id.0).collect();
                let alive: Vec<i32> = view.brokers.keys().filter(|id| view.alive(**id).is_some()).map(|id| *id as i32).collect();
                prop_assert_eq!(listed, alive);
                for t in &r.topics {
                    if t.error_code == 0 {
                        let name = t.name.as_ref().expect("a known topic has its name");
                        let known = &view.topics[name.0.as_str()];
                        prop_assert_eq!(t.partitions.len(), known.partitions.len());
                    }
                }
            }
            Answer::DescribeCluster(r) => {
                prop_assert_eq!(r.endpoint_type, 1);
            }
        }
    }

    #[test]
    fn a_mutated_request_is_answered_well_or_closed(
        view in cluster_view(),
        req in valid_request(),
        mutations in vec(mutation(), 1..4),
    ) {
        let mut bytes = req.bytes.clone();
        for m in &mutations {
            if !bytes.is_empty() {
                mutate(&mut bytes, m);
            }
        }
        let out = handle(&bytes, &view);
        let answer = decode_answer(&bytes, &out);
        prop_assert!(answer.is_ok(), "{:?}: {:?}", out, answer);
    }

    #[test]
    fn random_bytes_are_answered_well_or_closed(view in cluster_view(), bytes in vec(any::<u8>(), 0..200)) {
        let out = handle(&bytes, &view);
        prop_assert!(decode_answer(&bytes, &out).is_ok());
    }

    /// Random bodies behind a valid header of every served API and version
    /// (and of ApiVersions past the served ones).
    #[test]
    fn random_bodies_behind_valid_headers_are_answered_well_or_closed(
        view in cluster_view(),
        pick in any::<prop::sample::Index>(),
        extra_version in 0i16..3,
        body in vec(any::<u8>(), 0..200),
    ) {
        let (api, min, max) = SERVED[pick.index(SERVED.len())];
        let version = min + (pick.index(1000) as i16 % (max - min + 1 + extra_version));
        let mut bytes = encode_request(api, version, 7, &EmptyBody).bytes;
        bytes.extend_from_slice(&body);
        let out = handle(&bytes, &view);
        let answer = decode_answer(&bytes, &out);
        prop_assert!(answer.is_ok(), "{:?}", answer);
        if api == ApiKey::ApiVersions && version > max {
            // The v0 answer naming the versions served.
            match (&out, answer.unwrap()) {
                (Outcome::Respond { version: 0, .. }, Some(Answer::ApiVersions(r))) => {
                    prop_assert_eq!(r.error_code, 35);
                    prop_assert_eq!(r.api_keys.len(), 1);
                    prop_assert_eq!(r.api_keys[0].max_version, max);
                }
                (o, _) => prop_assert!(false, "unexpected {:?}", o),
            }
        }
    }
}

/// Nothing: the header alone.
struct EmptyBody;

impl Encodable for EmptyBody {
    fn encode<B: kafka_protocol::protocol::buf::ByteBufMut>(
        &self,
        _: &mut B,
        _: i16,
    ) -> anyhow::Result<()> {
        Ok(())
    }
    fn compute_size(&self, _: i16) -> anyhow::Result<usize> {
        Ok(0)
    }
}

#[test]
fn unknown_topics_and_invalid_names_get_kafkas_errors() {
    let mut view = ClusterView {
        cluster_id: "k".into(),
        broker_id: 1,
        brokers: BTreeMap::new(),
        topics: BTreeMap::new(),
        quorum: None,
    };
    view.topics.insert(
        "orders".into(),
        TopicView {
            id: 5,
            partitions: vec![],
        },
    );
    let names = ["orders", "nope", "bad name", "orders"];
    let topics = names
        .iter()
        .map(|n| {
            MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_static_str(n))))
        })
        .collect();
    let req = encode_request(
        ApiKey::Metadata,
        12,
        1,
        &MetadataRequest::default().with_topics(Some(topics)),
    );
    let out = handle(&req.bytes, &view);
    let Ok(Some(Answer::Metadata(r))) = decode_answer(&req.bytes, &out) else {
        panic!("{out:?}");
    };
    let got: Vec<(String, i16)> = r
        .topics
        .iter()
        .map(|t| (t.name.as_ref().unwrap().0.to_string(), t.error_code))
        .collect();
    assert_eq!(
        got,
        [
            ("orders".to_string(), 0),
            ("nope".to_string(), 3),
            ("bad name".to_string(), 17)
        ]
    );
    assert_eq!(r.topics[0].topic_id, uuid::Uuid::from_u128(5));
}

#[test]
fn a_huge_array_claim_closes_instead_of_allocating() {
    // Metadata v4: header, then a topics array claiming i32::MAX entries.
    let mut bytes = encode_request(ApiKey::Metadata, 4, 1, &EmptyBody).bytes;
    bytes.extend_from_slice(&i32::MAX.to_be_bytes());
    bytes.push(1);
    let view = ClusterView::default();
    assert!(matches!(handle(&bytes, &view), Outcome::Close(_)));
    // v9+: a compact array length of u32::MAX.
    let mut bytes = encode_request(ApiKey::Metadata, 12, 1, &EmptyBody).bytes;
    bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0]);
    assert!(matches!(handle(&bytes, &view), Outcome::Close(_)));
}
