//! Kafka's own ACL and SCRAM credential APIs on a broker's Kafka listener,
//! forwarded to the active controller, against real `keel` processes over
//! mutual TLS: a binding created with CreateAcls is listed by DescribeAcls
//! and by Keel's own gRPC DescribeAcls, and DeleteAcls removes it; a
//! credential upserted with AlterUserScramCredentials is listed by
//! DescribeUserScramCredentials. Requests are encoded and answers decoded
//! with the `kafka-protocol` crate.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey, CreateAclsRequest,
    CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use keel_metadata::acl::{AclBinding, Operation, Permission, Principal, ResourcePattern};
use keel_metadata::scram::{ScramCredential, ScramMechanism};
use keel_proto::pb;
use keel_testkit::KafkaPorts;

fn st(s: &str) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// Kafka's codes used here.
const TOPIC: i8 = 2;
const PREFIXED: i8 = 4;
const LITERAL: i8 = 3;
const MATCH: i8 = 2;
const ANY: i8 = 1;
const CREATE: i8 = 5;
const READ: i8 = 3;
const ALLOW: i8 = 3;

/// Three controllers and three brokers with Kafka listeners, mutual TLS.
async fn cluster() -> Cluster {
    let mut c = Cluster::start(fast_spec(3).kafka(KafkaPorts::Free).tls(true))
        .expect("start a cluster with Kafka listeners");
    c.wait_all_brokers_active(Duration::from_secs(60))
        .await
        .expect("brokers active");
    c
}

/// The bindings Keel's own gRPC DescribeAcls lists.
async fn keel_bindings(c: &Cluster) -> Vec<AclBinding> {
    let r = client(c)
        .admin(|mut c| async move { c.describe_acls(pb::DescribeAclsRequest::default()).await })
        .await
        .expect("DescribeAcls answered");
    assert!(r.error.is_none(), "{:?}", r.error);
    r.bindings
        .iter()
        .map(|b| keel_proto::convert::acl_binding_from_pb(b).unwrap())
        .collect()
}

/// Alice's filter: her bindings on topics whatever their pattern.
fn alice_filter() -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_type_filter(TOPIC)
        .with_resource_name_filter(None)
        .with_pattern_type_filter(ANY)
        .with_principal_filter(Some(st("User:alice")))
        .with_host_filter(None)
        .with_operation(ANY)
        .with_permission_type(ANY)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_clients_create_describe_and_delete_acls_and_scram_credentials() {
    let c = cluster().await;
    let addrs = c.kafka_addrs();
    assert_eq!(addrs.len(), 3);
    let expected = AclBinding {
        principal: Principal::User("alice".into()),
        pattern: ResourcePattern::TopicPrefix("orders-".into()),
        operation: Operation::Create,
        permission: Permission::Allow,
    };

    // Create: the prefix binding is made; a READ binding and a literal
    // wildcard topic are refused per item, the rest of the request stands.
    let creation = AclCreation::default()
        .with_resource_type(TOPIC)
        .with_resource_name(st("orders-"))
        .with_resource_pattern_type(PREFIXED)
        .with_principal(st("User:alice"))
        .with_host(st("*"))
        .with_operation(CREATE)
        .with_permission_type(ALLOW);
    let req = CreateAclsRequest::default().with_creations(vec![
        creation.clone(),
        creation.clone().with_operation(READ),
        creation
            .clone()
            .with_resource_name(st("*"))
            .with_resource_pattern_type(LITERAL),
    ]);
    for version in [1, 3] {
        let r: CreateAclsResponse =
            kafka_ask(&c, &addrs[0], ApiKey::CreateAcls, version, &req).await;
        let codes: Vec<i16> = r.results.iter().map(|r| r.error_code).collect();
        let invalid = ResponseError::InvalidRequest.code();
        assert_eq!(codes, [0, invalid, invalid], "v{version}: {r:?}");
        let wildcard = r.results[2].error_message.as_ref().unwrap();
        assert!(wildcard.contains("--topic-prefix"), "{wildcard}");
    }

    // Describe through another broker, at the oldest and newest versions.
    for version in [1, 3] {
        let r: DescribeAclsResponse = kafka_ask(
            &c,
            &addrs[1],
            ApiKey::DescribeAcls,
            version,
            &alice_filter(),
        )
        .await;
        assert_eq!(r.error_code, 0, "{r:?}");
        assert_eq!(r.resources.len(), 1, "{r:?}");
        let res = &r.resources[0];
        assert_eq!(
            (
                res.resource_type,
                res.resource_name.as_str(),
                res.pattern_type
            ),
            (TOPIC, "orders-", PREFIXED)
        );
        let acls: Vec<(&str, &str, i8, i8)> = res
            .acls
            .iter()
            .map(|a| {
                (
                    a.principal.as_str(),
                    a.host.as_str(),
                    a.operation,
                    a.permission_type,
                )
            })
            .collect();
        assert_eq!(acls, [("User:alice", "*", CREATE, ALLOW)]);
    }
    // MATCH on a topic name the prefix covers finds it too (narrowed on
    // the broker); on a name it does not cover, nothing.
    for (name, found) in [("orders-eu", 1), ("payments", 0)] {
        let matching = alice_filter()
            .with_resource_name_filter(Some(st(name)))
            .with_pattern_type_filter(MATCH);
        let r: DescribeAclsResponse =
            kafka_ask(&c, &addrs[2], ApiKey::DescribeAcls, 2, &matching).await;
        assert_eq!(r.resources.len(), found, "{name}: {r:?}");
    }

    // Keel's own API sees the same binding.
    assert!(
        keel_bindings(&c).await.contains(&expected),
        "gRPC DescribeAcls lists the binding"
    );

    // Delete by filter: the binding is named as removed, and gone.
    let delete = DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
        .with_resource_type_filter(TOPIC)
        .with_resource_name_filter(Some(st("orders-")))
        .with_pattern_type_filter(PREFIXED)
        .with_principal_filter(Some(st("User:alice")))
        .with_host_filter(None)
        .with_operation(ANY)
        .with_permission_type(ANY)]);
    let r: DeleteAclsResponse = kafka_ask(&c, &addrs[0], ApiKey::DeleteAcls, 3, &delete).await;
    assert_eq!(r.filter_results.len(), 1);
    let f = &r.filter_results[0];
    assert_eq!(f.error_code, 0, "{r:?}");
    let removed: Vec<(&str, i8, &str)> = f
        .matching_acls
        .iter()
        .map(|a| {
            (
                a.resource_name.as_str(),
                a.pattern_type,
                a.principal.as_str(),
            )
        })
        .collect();
    assert_eq!(removed, [("orders-", PREFIXED, "User:alice")]);
    let r: DescribeAclsResponse =
        kafka_ask(&c, &addrs[1], ApiKey::DescribeAcls, 3, &alice_filter()).await;
    assert!(r.resources.is_empty(), "{r:?}");
    assert!(!keel_bindings(&c).await.contains(&expected));
    // Deleting again removes nothing.
    let r: DeleteAclsResponse = kafka_ask(&c, &addrs[0], ApiKey::DeleteAcls, 1, &delete).await;
    assert!(r.filter_results[0].matching_acls.is_empty(), "{r:?}");

    // SCRAM: an upsertion computed as a Kafka client computes it.
    let salt = b"keel-kafka-acl-apis-salt";
    let salted =
        ScramCredential::salted_password(ScramMechanism::Sha512, b"bob-secret", salt, 8192)
            .unwrap();
    let upsert = AlterUserScramCredentialsRequest::default().with_upsertions(vec![
        ScramCredentialUpsertion::default()
            .with_name(st("bob"))
            .with_mechanism(ScramMechanism::Sha512.kafka_type())
            .with_iterations(8192)
            .with_salt(Bytes::from_static(salt))
            .with_salted_password(Bytes::from(salted)),
    ]);
    let r: AlterUserScramCredentialsResponse =
        kafka_ask(&c, &addrs[1], ApiKey::AlterUserScramCredentials, 0, &upsert).await;
    let results: Vec<(&str, i16)> = r
        .results
        .iter()
        .map(|r| (r.user.as_str(), r.error_code))
        .collect();
    assert_eq!(results, [("bob", 0)], "{r:?}");

    let describe = DescribeUserScramCredentialsRequest::default()
        .with_users(Some(vec![UserName::default().with_name(st("bob"))]));
    let r: DescribeUserScramCredentialsResponse = kafka_ask(
        &c,
        &addrs[2],
        ApiKey::DescribeUserScramCredentials,
        0,
        &describe,
    )
    .await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(r.results.len(), 1, "{r:?}");
    let bob = &r.results[0];
    assert_eq!((bob.user.as_str(), bob.error_code), ("bob", 0));
    let infos: Vec<(i8, i32)> = bob
        .credential_infos
        .iter()
        .map(|i| (i.mechanism, i.iterations))
        .collect();
    assert_eq!(infos, [(ScramMechanism::Sha512.kafka_type(), 8192)]);
    // Every user: bob among them.
    let r: DescribeUserScramCredentialsResponse = kafka_ask(
        &c,
        &addrs[0],
        ApiKey::DescribeUserScramCredentials,
        0,
        &DescribeUserScramCredentialsRequest::default().with_users(None),
    )
    .await;
    assert!(r.results.iter().any(|u| u.user.as_str() == "bob"), "{r:?}");

    // A user named twice: DUPLICATE_RESOURCE, once, and nothing applied.
    let twice = AlterUserScramCredentialsRequest::default()
        .with_upsertions(upsert.upsertions.clone())
        .with_deletions(vec![
            kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                .with_name(st("bob"))
                .with_mechanism(ScramMechanism::Sha512.kafka_type()),
        ]);
    let r: AlterUserScramCredentialsResponse =
        kafka_ask(&c, &addrs[0], ApiKey::AlterUserScramCredentials, 0, &twice).await;
    let results: Vec<(&str, i16)> = r
        .results
        .iter()
        .map(|r| (r.user.as_str(), r.error_code))
        .collect();
    assert_eq!(
        results,
        [("bob", ResponseError::DuplicateResource.code())],
        "{r:?}"
    );
    let r: DescribeUserScramCredentialsResponse = kafka_ask(
        &c,
        &addrs[2],
        ApiKey::DescribeUserScramCredentials,
        0,
        &describe,
    )
    .await;
    assert_eq!(r.results[0].credential_infos.len(), 1, "still there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_manages_acls_and_scram_credentials_through_a_broker() {
    use serde_json::{json, Value};
    let c = cluster().await;
    let bootstrap = c.kafka_addrs().join(",");
    let admin_ssl = KafkaSecurity::admin(&c).librdkafka_json();
    let got = run_python(
        "confluent_acl_apis.py",
        &[&bootstrap, "cka-", "carol"],
        &admin_ssl,
    );
    eprintln!("{got:#}");
    let binding = json!([
        "TOPIC",
        "cka-",
        "PREFIXED",
        "User:carol",
        "*",
        "CREATE",
        "ALLOW"
    ]);
    assert_eq!(got["create"], Value::Null);
    assert_eq!(got["create_read"], "INVALID_REQUEST(42)");
    assert_eq!(got["describe_error"], Value::Null);
    assert_eq!(got["described"], json!([binding]));
    assert_eq!(got["described_match"], json!([binding]));
    assert_eq!(got["delete_error"], Value::Null);
    assert_eq!(got["deleted"], json!([binding]));
    assert_eq!(got["described_after_delete"], json!([]));
    assert_eq!(got["alter_scram"], Value::Null);
    assert_eq!(got["describe_scram_error"], Value::Null);
    assert_eq!(got["described_scram"], json!([["SCRAM_SHA_512", 8192]]));
}
