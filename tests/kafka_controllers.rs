//! Kafka's wire protocol where no pinned client reaches: the controllers'
//! Kafka listeners (ApiVersions, DescribeCluster, DescribeQuorum, as a
//! `--bootstrap-controller` client asks them) and the partition
//! reassignment APIs through a broker, against real `keel` processes over
//! mutual TLS. Requests are encoded and answers decoded with the
//! `kafka-protocol` crate (generated from Kafka's message schemas).

mod common;

use std::time::Duration;

use common::*;
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey,
    ApiVersionsRequest, ApiVersionsResponse, BrokerId, DescribeClusterRequest,
    DescribeClusterResponse, DescribeQuorumRequest, DescribeQuorumResponse,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use keel_testkit::KafkaPorts;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.into()))
}

/// Three controllers and three brokers on 127.0.27.x, each with a Kafka
/// listener, mutual TLS; every broker active.
async fn cluster() -> Cluster {
    let mut c = Cluster::start(fast_spec(3).subnet(27).kafka(KafkaPorts::Free).tls(true))
        .expect("start a cluster with Kafka listeners");
    c.wait_all_brokers_active(Duration::from_secs(60))
        .await
        .expect("brokers active");
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_describe_the_quorum_to_kafka_clients() {
    let mut c = cluster().await;
    let active = c
        .wait_active(Duration::from_secs(30))
        .await
        .expect("an active controller");
    let addrs = c.controller_kafka_addrs();
    assert_eq!(addrs.len(), 3, "every controller has a Kafka listener");

    let req = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("keel-test"))
        .with_client_software_version(StrBytes::from_static_str("1"));
    let r: ApiVersionsResponse = kafka_ask(&c, &addrs[0], ApiKey::ApiVersions, 3, &req).await;
    let keys: Vec<i16> = r.api_keys.iter().map(|k| k.api_key).collect();
    assert_eq!(
        keys,
        [
            ApiKey::ApiVersions as i16,
            ApiKey::DescribeCluster as i16,
            ApiKey::DescribeQuorum as i16,
            // A TLS listener offers SASL too.
            ApiKey::SaslHandshake as i16,
            ApiKey::SaslAuthenticate as i16,
        ]
    );

    // Any controller names the active one and lists all three.
    let dc = DescribeClusterRequest::default().with_endpoint_type(2);
    let mut leader = None;
    for _ in 0..100 {
        let r: DescribeClusterResponse =
            kafka_ask(&c, &addrs[2], ApiKey::DescribeCluster, 1, &dc).await;
        assert_eq!(r.error_code, 0);
        assert_eq!(r.cluster_id.as_str(), CLUSTER_ID);
        let mut ids: Vec<i32> = r.brokers.iter().map(|b| b.broker_id.0).collect();
        ids.sort();
        assert_eq!(ids, [1, 2, 3]);
        if r.controller_id.0 == active as i32 + 1 {
            leader = Some(r.controller_id.0);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(leader, Some(active as i32 + 1), "the active controller");

    // The active controller describes the metadata partition.
    let dq = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
        .with_topic_name(name("__cluster_metadata"))
        .with_partitions(vec![PartitionData::default()])]);
    let r: DescribeQuorumResponse =
        kafka_ask(&c, &addrs[active], ApiKey::DescribeQuorum, 2, &dq).await;
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(p.leader_id.0, active as i32 + 1);
    assert!(p.leader_epoch >= 1 && p.high_watermark > 0, "{p:?}");
    let mut voters: Vec<i32> = p.current_voters.iter().map(|v| v.replica_id.0).collect();
    voters.sort();
    assert_eq!(voters, [1, 2, 3]);
    assert_eq!(r.nodes.len(), 3);
    // A follower points to the leader.
    let follower = (active + 1) % 3;
    let r: DescribeQuorumResponse =
        kafka_ask(&c, &addrs[follower], ApiKey::DescribeQuorum, 1, &dq).await;
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, ResponseError::NotLeaderOrFollower.code());
    assert_eq!(p.leader_id.0, active as i32 + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_reassignments_go_through_a_broker() {
    let c = cluster().await;
    let client = client(&c);
    create_topic(&client, "moves", 2, 2).await;
    let broker = c.kafka_addrs()[0].clone();
    let before = admin::describe_topic(&client, "moves")
        .await
        .unwrap()
        .expect("the topic");
    let replicas = before.partitions[0]
        .state
        .as_ref()
        .unwrap()
        .replicas
        .clone();
    // Move partition 0 to the broker that does not hold it.
    let spare = (1..=3u32).find(|b| !replicas.contains(b)).unwrap();
    let target = vec![BrokerId(spare as i32), BrokerId(replicas[0] as i32)];
    let req = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![
            ReassignableTopic::default()
                .with_name(name("moves"))
                .with_partitions(vec![
                    ReassignablePartition::default()
                        .with_partition_index(0)
                        .with_replicas(Some(target)),
                    // Nothing in flight to cancel on partition 1.
                    ReassignablePartition::default()
                        .with_partition_index(1)
                        .with_replicas(None),
                ]),
            ReassignableTopic::default()
                .with_name(name("nosuch"))
                .with_partitions(vec![ReassignablePartition::default()
                    .with_partition_index(0)
                    .with_replicas(Some(vec![BrokerId(1)]))]),
        ]);
    let r: AlterPartitionReassignmentsResponse =
        kafka_ask(&c, &broker, ApiKey::AlterPartitionReassignments, 0, &req).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let codes: Vec<(String, i32, i16)> = r
        .responses
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.0.to_string(), p.partition_index, p.error_code))
        })
        .collect();
    assert_eq!(
        codes,
        [
            ("moves".into(), 0, 0),
            (
                "moves".into(),
                1,
                ResponseError::NoReassignmentInProgress.code()
            ),
            (
                "nosuch".into(),
                0,
                ResponseError::UnknownTopicOrPartition.code()
            ),
        ]
    );

    // Listed while in flight, or done: either way it ends with the target.
    let list = ListPartitionReassignmentsRequest::default().with_timeout_ms(30_000);
    let r: ListPartitionReassignmentsResponse =
        kafka_ask(&c, &broker, ApiKey::ListPartitionReassignments, 0, &list).await;
    assert_eq!(r.error_code, 0);
    for t in &r.topics {
        assert_eq!(t.name.0.as_str(), "moves");
    }
    let mut done = false;
    for _ in 0..300 {
        let d = admin::describe_topic(&client, "moves")
            .await
            .unwrap()
            .expect("the topic");
        let s = d.partitions[0].state.as_ref().unwrap();
        if s.replicas == [spare, replicas[0]] && s.adding.is_empty() {
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(done, "the reassignment completed");
    let r: ListPartitionReassignmentsResponse =
        kafka_ask(&c, &broker, ApiKey::ListPartitionReassignments, 0, &list).await;
    assert!(r.topics.is_empty(), "{r:?}");
}
