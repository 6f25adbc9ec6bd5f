//! A controller's Kafka listener: ApiVersions lists only what controllers
//! serve, DescribeQuorum describes the metadata partition from the leader
//! (NOT_LEADER_OR_FOLLOWER elsewhere), DescribeCluster lists controllers;
//! a broker's API closes the connection; random and mutated frames are
//! answered well or closed.

mod common;

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, DescribeClusterRequest,
    DescribeClusterResponse, DescribeQuorumRequest, DescribeQuorumResponse, MetadataRequest,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;
use keel_kafka::{handle, ClusterView, Outcome, QuorumMember, QuorumView, CONTROLLER_SERVED};
use proptest::collection::vec;
use proptest::prelude::*;

fn member(id: u64, end: u64) -> QuorumMember {
    QuorumMember {
        id,
        directory_id: u128::from(id) << 64,
        log_end_offset: Some(end),
        last_contact_unix_ms: Some(1_700_000_000_000),
        last_caught_up_unix_ms: Some(1_700_000_000_000),
    }
}

fn controller_view(node_id: u64, leader: bool) -> ClusterView {
    ClusterView {
        cluster_id: "k".into(),
        quorum: Some(QuorumView {
            node_id,
            leader_id: Some(2),
            is_leader: leader,
            term: 7,
            commit_index: 41,
            voters: vec![member(1, 41), member(2, 42), member(3, 30)],
            observers: vec![member(4, 12)],
            listeners: (1..=3)
                .map(|i| (i, format!("127.0.0.{i}:9095").parse().unwrap()))
                .collect::<BTreeMap<_, _>>(),
        }),
        ..ClusterView::default()
    }
}

/// `api` v`version` with `body` as this test's client frames it.
fn request<B: Encodable>(api: ApiKey, version: i16, body: &B) -> Vec<u8> {
    common::request_frame(api, version, 9, "test", body)
}

fn answer<R: Decodable>(out: Outcome, api: ApiKey, version: i16) -> R {
    let Outcome::Respond { frame, .. } = out else {
        panic!("no answer: {out:?}");
    };
    let mut b = Bytes::copy_from_slice(&frame[4..]);
    let h = ResponseHeader::decode(&mut b, api.response_header_version(version)).unwrap();
    assert_eq!(h.correlation_id, 9);
    R::decode(&mut b, version).unwrap()
}

fn metadata_quorum() -> DescribeQuorumRequest {
    DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
        .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
        .with_partitions(vec![PartitionData::default()])])
}

#[test]
fn api_versions_lists_what_controllers_serve() {
    let req = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("t"))
        .with_client_software_version(StrBytes::from_static_str("1"));
    let out = handle(
        &request(ApiKey::ApiVersions, 3, &req),
        &controller_view(1, false),
    );
    let r: ApiVersionsResponse = answer(out, ApiKey::ApiVersions, 3);
    let listed: Vec<_> = r
        .api_keys
        .iter()
        .map(|k| (k.api_key, k.min_version, k.max_version))
        .collect();
    let served: Vec<_> = CONTROLLER_SERVED
        .iter()
        .map(|(k, a, b)| (*k as i16, *a, *b))
        .collect();
    assert_eq!(listed, served);
}

#[test]
fn the_leader_describes_the_quorum_and_the_others_point_to_it() {
    let out = handle(
        &request(ApiKey::DescribeQuorum, 2, &metadata_quorum()),
        &controller_view(2, true),
    );
    let r: DescribeQuorumResponse = answer(out, ApiKey::DescribeQuorum, 2);
    assert_eq!(r.error_code, 0);
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.error_code, p.leader_id.0, p.leader_epoch), (0, 2, 7));
    assert_eq!(p.high_watermark, 41);
    let voters: Vec<_> = p
        .current_voters
        .iter()
        .map(|v| (v.replica_id.0, v.log_end_offset))
        .collect();
    assert_eq!(voters, [(1, 41), (2, 42), (3, 30)]);
    assert_eq!(p.observers[0].replica_id.0, 4);
    assert_eq!(r.nodes.len(), 3);
    assert_eq!(r.nodes[0].listeners[0].port, 9095);

    let out = handle(
        &request(ApiKey::DescribeQuorum, 1, &metadata_quorum()),
        &controller_view(1, false),
    );
    let r: DescribeQuorumResponse = answer(out, ApiKey::DescribeQuorum, 1);
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, ResponseError::NotLeaderOrFollower.code());
    assert_eq!(p.leader_id.0, 2);

    let other = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
        .with_topic_name(TopicName(StrBytes::from_static_str("orders")))
        .with_partitions(vec![PartitionData::default()])]);
    let out = handle(
        &request(ApiKey::DescribeQuorum, 0, &other),
        &controller_view(2, true),
    );
    let r: DescribeQuorumResponse = answer(out, ApiKey::DescribeQuorum, 0);
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
}

#[test]
fn describe_cluster_lists_the_controllers_and_the_active_one() {
    let req = DescribeClusterRequest::default().with_endpoint_type(2);
    let out = handle(
        &request(ApiKey::DescribeCluster, 1, &req),
        &controller_view(1, false),
    );
    let r: DescribeClusterResponse = answer(out, ApiKey::DescribeCluster, 1);
    assert_eq!(
        (r.error_code, r.controller_id.0, r.endpoint_type),
        (0, 2, 2)
    );
    let ids: Vec<_> = r.brokers.iter().map(|b| b.broker_id.0).collect();
    assert_eq!(ids, [1, 2, 3]);

    let brokers = DescribeClusterRequest::default().with_endpoint_type(1);
    let out = handle(
        &request(ApiKey::DescribeCluster, 1, &brokers),
        &controller_view(1, false),
    );
    let r: DescribeClusterResponse = answer(out, ApiKey::DescribeCluster, 1);
    assert_eq!(r.error_code, ResponseError::MismatchedEndpointType.code());
}

#[test]
fn a_brokers_api_closes_a_controllers_connection() {
    let out = handle(
        &request(ApiKey::Metadata, 12, &MetadataRequest::default()),
        &controller_view(1, true),
    );
    assert!(matches!(out, Outcome::Close(_)), "{out:?}");
}

/// Respond (with a length that matches) or close; never anything else.
fn well_formed_or_closed(out: &Outcome) -> Result<(), String> {
    match out {
        Outcome::Close(_) => Ok(()),
        Outcome::Respond { frame, .. } => {
            let len = i32::from_be_bytes(frame[..4].try_into().unwrap());
            if len as usize == frame.len() - 4 {
                Ok(())
            } else {
                Err(format!("prefix {len} for {} bytes", frame.len() - 4))
            }
        }
        Outcome::Forward(f) => Err(format!("a controller forwarded {:?}", f.api)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_describe_quorum_frames_are_answered_well_or_closed(
        version in 0i16..=2,
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in any::<prop::sample::Index>(),
        leader in any::<bool>(),
    ) {
        let mut bytes = request(ApiKey::DescribeQuorum, version, &metadata_quorum());
        for (i, b) in flips {
            let i = i.index(bytes.len());
            bytes[i] = b;
        }
        bytes.truncate(cut.index(bytes.len() + 1));
        let out = handle(&bytes, &controller_view(2, leader));
        prop_assert!(well_formed_or_closed(&out).is_ok(), "{:?}", out);
    }

    #[test]
    fn random_bytes_to_a_controller_are_answered_well_or_closed(
        key in prop_oneof![Just(18i16), Just(55), Just(60), any::<i16>()],
        version in -1i16..5,
        body in vec(any::<u8>(), 0..200),
    ) {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&key.to_be_bytes());
        bytes.extend_from_slice(&version.to_be_bytes());
        bytes.extend_from_slice(&9i32.to_be_bytes());
        bytes.extend_from_slice(&body);
        let out = handle(&bytes, &controller_view(2, true));
        prop_assert!(well_formed_or_closed(&out).is_ok(), "{:?}", out);
    }
}

#[test]
fn describing_the_quorum_needs_describe_on_the_cluster() {
    use keel_kafka::dispatch::route;
    use keel_kafka::{Access, Asker};
    use keel_metadata::acl::{AclBinding, Operation, Permission, Principal, ResourcePattern};

    let view = controller_view(2, true);
    let bytes = request(ApiKey::DescribeQuorum, 2, &metadata_quorum());
    let ops = Principal::User("ops".into());
    let access = Access {
        acls: vec![AclBinding {
            principal: ops.clone(),
            pattern: ResourcePattern::Cluster,
            operation: Operation::Describe,
            permission: Permission::Allow,
        }],
        ..Access::default()
    };
    let ask = |who: &Principal| {
        let asker = Asker {
            principal: who,
            access: &access,
        };
        let out = route(&bytes, &CONTROLLER_SERVED, || &view, &asker);
        let r: DescribeQuorumResponse = answer(out, ApiKey::DescribeQuorum, 2);
        r.error_code
    };
    assert_eq!(ask(&ops), 0);
    assert_eq!(
        ask(&Principal::Anonymous),
        ResponseError::ClusterAuthorizationFailed.code()
    );
    assert_eq!(
        ask(&Principal::User("eve".into())),
        ResponseError::ClusterAuthorizationFailed.code()
    );
}
