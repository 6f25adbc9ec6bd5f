//! The answers, as pure functions of a decoded request, its version and the
//! cache snapshot. They follow Kafka's KRaft broker (`KafkaApis`,
//! `KRaftMetadataCache`) so clients see what a Kafka broker would say.

use std::collections::BTreeSet;

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_quorum_response::{
    Listener as QuorumListener, Node as QuorumNode, PartitionData as QuorumPartition, ReplicaState,
    TopicData as QuorumTopic,
};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, DescribeClusterRequest,
    DescribeClusterResponse, DescribeQuorumRequest, DescribeQuorumResponse, MetadataRequest,
    MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::view::{kafka_id, ClusterView, PartitionView, QuorumMember, QuorumView, TopicView};

/// DescribeCluster's `endpoint_type` of a broker.
const ENDPOINT_BROKER: i8 = 1;
/// DescribeCluster's `endpoint_type` of a controller.
const ENDPOINT_CONTROLLER: i8 = 2;
/// Kafka's name of the metadata log's topic (its one partition is 0).
const METADATA_TOPIC: &str = "__cluster_metadata";
/// The listener name controllers' endpoints are given under.
const CONTROLLER_LISTENER: &str = "CONTROLLER";

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn ids(v: &[u32]) -> Vec<BrokerId> {
    v.iter().map(|b| BrokerId(kafka_id(*b))).collect()
}

/// Partition indexes are u32 in Keel, int32 in Kafka; Keel never makes
/// one above `i32::MAX`.
fn index(i: u32) -> i32 {
    i32::try_from(i).unwrap_or(i32::MAX)
}

// ---- ApiVersions ------------------------------------------------------------

/// The served APIs, as ApiVersions lists them.
fn api_keys(served: &[(ApiKey, i16, i16)]) -> Vec<ApiVersion> {
    served
        .iter()
        .map(|&(api, min, max)| {
            ApiVersion::default()
                .with_api_key(api as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect()
}

/// Kafka's rule for `client_software_name` and `_version` (v3+):
/// `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`.
fn valid_software_id(v: &str) -> bool {
    let b = v.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'.')
        }
        _ => false,
    }
}

/// ApiVersions: every served API and its versions; INVALID_REQUEST (and no
/// list) when a v3+ client names itself against Kafka's rule.
pub(crate) fn api_versions(
    req: &ApiVersionsRequest,
    version: i16,
    served: &[(ApiKey, i16, i16)],
) -> ApiVersionsResponse {
    if version >= 3
        && !(valid_software_id(req.client_software_name.as_str())
            && valid_software_id(req.client_software_version.as_str()))
    {
        return ApiVersionsResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code());
    }
    ApiVersionsResponse::default().with_api_keys(api_keys(served))
}

/// The v0 answer to an ApiVersions version not served.
pub(crate) fn api_versions_unsupported(served: &[(ApiKey, i16, i16)]) -> ApiVersionsResponse {
    let own = api_keys(served)
        .into_iter()
        .filter(|k| k.api_key == ApiKey::ApiVersions as i16)
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(own)
}

// ---- Metadata -------------------------------------------------------------

/// Metadata: the live brokers, the cluster id, a live broker as the
/// controller, and the topics asked for (all of them when the list is null,
/// or empty in v0). `allow_auto_topic_creation` is ignored: Keel never
/// creates a topic because a client asked about it.
///
/// Only topics the client may describe (`may_describe`) are named: left
/// out of an all-topics answer, and answered TOPIC_AUTHORIZATION_FAILED
/// when asked for by name, whether they exist or not (Kafka's rule: the
/// answer does not tell a forbidden topic from a missing one).
pub(crate) fn metadata(
    req: &MetadataRequest,
    version: i16,
    view: &ClusterView,
    may_describe: &dyn Fn(&str) -> bool,
) -> MetadataResponse {
    let brokers = view
        .brokers
        .iter()
        .filter_map(|(id, b)| {
            let addr = view.alive(*id)?;
            Some(
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(kafka_id(*id)))
                    .with_host(s(addr.ip().to_string()))
                    .with_port(i32::from(addr.port()))
                    .with_rack(b.rack.clone().map(s)),
            )
        })
        .collect();
    let all = match &req.topics {
        None => true,
        Some(t) => version == 0 && t.is_empty(),
    };
    let topics = if all {
        view.topics
            .iter()
            .filter(|(name, _)| may_describe(name))
            .map(|(name, t)| topic(name, t, version, view))
            .collect()
    } else {
        requested_topics(req, version, view, may_describe)
    };
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(s(view.cluster_id.clone())))
        .with_controller_id(BrokerId(view.controller_id()))
        .with_topics(topics)
}

/// The topics a request names, each once, in the order asked.
fn requested_topics(
    req: &MetadataRequest,
    version: i16,
    view: &ClusterView,
    may_describe: &dyn Fn(&str) -> bool,
) -> Vec<MetadataResponseTopic> {
    let mut seen_names = BTreeSet::new();
    let mut seen_ids = BTreeSet::new();
    let mut out = Vec::new();
    for asked in req.topics.iter().flatten() {
        match &asked.name {
            Some(name) => {
                let name = name.as_str();
                if !seen_names.insert(name.to_string()) {
                    continue;
                }
                if !may_describe(name) {
                    out.push(
                        MetadataResponseTopic::default()
                            .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                            .with_name(Some(TopicName(s(name)))),
                    );
                    continue;
                }
                out.push(match view.topics.get(name) {
                    Some(t) => topic(name, t, version, view),
                    None => {
                        let code = if keel_metadata::validation::validate_topic_name(name).is_err()
                        {
                            ResponseError::InvalidTopicException
                        } else {
                            ResponseError::UnknownTopicOrPartition
                        };
                        MetadataResponseTopic::default()
                            .with_error_code(code.code())
                            .with_name(Some(TopicName(s(name))))
                    }
                });
            }
            // By id: Kafka takes ids from v12 on; before, a null name is
            // an invalid request.
            None => {
                let id = asked.topic_id.as_u128();
                if !seen_ids.insert(id) {
                    continue;
                }
                let by_id = (version >= 12 && id != 0)
                    .then(|| view.topic_by_id(id))
                    .flatten();
                out.push(match by_id {
                    Some((name, t)) if may_describe(name) => topic(name, t, version, view),
                    // Kafka answers a forbidden id as an unknown one.
                    Some(_) => MetadataResponseTopic::default()
                        .with_error_code(ResponseError::UnknownTopicId.code())
                        .with_name(None)
                        .with_topic_id(asked.topic_id),
                    None => {
                        let code = if version >= 12 && id != 0 {
                            ResponseError::UnknownTopicId
                        } else {
                            ResponseError::InvalidRequest
                        };
                        MetadataResponseTopic::default()
                            .with_error_code(code.code())
                            .with_name(None)
                            .with_topic_id(asked.topic_id)
                    }
                });
            }
        }
    }
    out
}

/// One known topic with its partitions.
fn topic(name: &str, t: &TopicView, version: i16, view: &ClusterView) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(s(name))))
        .with_topic_id(Uuid::from_u128(t.id))
        .with_is_internal(false)
        .with_partitions(
            t.partitions
                .iter()
                .map(|p| partition(p, version, view))
                .collect(),
        )
}

/// One partition, as `KRaftMetadataCache.partitionMetadata` answers it:
/// without a live leader, leader -1 and LEADER_NOT_AVAILABLE (or, from v6,
/// LISTENER_NOT_FOUND when the leader is up but has no Kafka listener);
/// replicas and ISR as they stand (only v0 leaves out the dead ones, with
/// REPLICA_NOT_AVAILABLE); offline replicas are those on brokers that are
/// unknown, fenced or without a Kafka listener.
fn partition(p: &PartitionView, version: i16, view: &ClusterView) -> MetadataResponsePartition {
    let alive = |b: &u32| view.alive(*b).is_some();
    let offline: Vec<u32> = p.replicas.iter().copied().filter(|b| !alive(b)).collect();
    let (mut replicas, mut isr) = (p.replicas.clone(), p.isr.clone());
    let mut error = None;
    if version == 0 {
        replicas.retain(alive);
        isr.retain(alive);
        if replicas.len() < p.replicas.len() || isr.len() < p.isr.len() {
            error = Some(ResponseError::ReplicaNotAvailable);
        }
    }
    let leader = p.leader.filter(alive);
    if leader.is_none() {
        let up_without_listener = p.leader.is_some_and(|l| {
            view.brokers
                .get(&l)
                .is_some_and(|b| !b.fenced && b.kafka_address.is_none())
        });
        error = Some(if up_without_listener && version >= 6 {
            ResponseError::ListenerNotFound
        } else {
            ResponseError::LeaderNotAvailable
        });
    }
    MetadataResponsePartition::default()
        .with_error_code(error.map_or(0, |e| e.code()))
        .with_partition_index(index(p.index))
        .with_leader_id(BrokerId(leader.map_or(-1, kafka_id)))
        .with_leader_epoch(i32::try_from(p.leader_epoch).unwrap_or(i32::MAX))
        .with_replica_nodes(ids(&replicas))
        .with_isr_nodes(ids(&isr))
        .with_offline_replicas(ids(&offline))
}

// ---- DescribeCluster ------------------------------------------------------

/// The start of a DescribeCluster answer from an endpoint of type
/// `endpoint` (`name`: the type as Kafka's message spells it); `Err`: the
/// whole answer, MISMATCHED_ENDPOINT_TYPE, when the request (v1 on) asks
/// for endpoints of another type.
// Both sides are the same answer type, so there is nothing to box apart.
#[allow(clippy::result_large_err)]
fn cluster_answer(
    req: &DescribeClusterRequest,
    version: i16,
    view: &ClusterView,
    endpoint: i8,
    name: &str,
) -> Result<DescribeClusterResponse, DescribeClusterResponse> {
    let base = DescribeClusterResponse::default()
        .with_endpoint_type(endpoint)
        .with_cluster_id(s(view.cluster_id.clone()));
    if version >= 1 && req.endpoint_type != endpoint {
        return Err(base
            .with_error_code(ResponseError::MismatchedEndpointType.code())
            .with_error_message(Some(s(format!(
                "The request was sent to an endpoint of type {name}, but it wanted endpoint type {}",
                req.endpoint_type
            )))));
    }
    Ok(base)
}

/// DescribeCluster: the live brokers (and, when asked from v2 on, the
/// fenced ones marked so), the cluster id and a live broker as the
/// controller. A request for the controllers' endpoints gets
/// MISMATCHED_ENDPOINT_TYPE: this is a broker.
pub(crate) fn describe_cluster(
    req: &DescribeClusterRequest,
    version: i16,
    view: &ClusterView,
) -> DescribeClusterResponse {
    if let Some(q) = &view.quorum {
        return describe_controllers(req, version, view, q);
    }
    let base = match cluster_answer(req, version, view, ENDPOINT_BROKER, "BROKER") {
        Ok(base) => base,
        Err(mismatched) => return mismatched,
    };
    let with_fenced = version >= 2 && req.include_fenced_brokers;
    let brokers = view
        .brokers
        .iter()
        .filter(|(_, b)| with_fenced || !b.fenced)
        .filter_map(|(id, b)| {
            let addr = b.kafka_address?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(kafka_id(*id)))
                    .with_host(s(addr.ip().to_string()))
                    .with_port(i32::from(addr.port()))
                    .with_rack(b.rack.clone().map(s))
                    .with_is_fenced(b.fenced),
            )
        })
        .collect();
    base.with_controller_id(BrokerId(view.controller_id()))
        .with_brokers(brokers)
}

/// A Keel node id as Kafka's int32.
fn node_id(id: u64) -> BrokerId {
    BrokerId(i32::try_from(id).unwrap_or(-1))
}

/// DescribeCluster on a controller (KIP-919): the controllers with Kafka
/// listeners as the "brokers", the active controller as the controller. A
/// request for broker endpoints gets MISMATCHED_ENDPOINT_TYPE.
fn describe_controllers(
    req: &DescribeClusterRequest,
    version: i16,
    view: &ClusterView,
    q: &QuorumView,
) -> DescribeClusterResponse {
    let base = match cluster_answer(req, version, view, ENDPOINT_CONTROLLER, "CONTROLLER") {
        Ok(base) => base,
        Err(mismatched) => return mismatched,
    };
    let brokers = q
        .listeners
        .iter()
        .map(|(id, addr)| {
            DescribeClusterBroker::default()
                .with_broker_id(node_id(*id))
                .with_host(s(addr.ip().to_string()))
                .with_port(i32::from(addr.port()))
        })
        .collect();
    base.with_controller_id(q.leader_id.map_or(BrokerId(-1), node_id))
        .with_brokers(brokers)
}

// ---- DescribeQuorum -------------------------------------------------------

fn replica_state(m: &QuorumMember, version: i16) -> ReplicaState {
    let r = ReplicaState::default()
        .with_replica_id(node_id(m.id))
        .with_log_end_offset(
            m.log_end_offset
                .map_or(-1, |o| i64::try_from(o).unwrap_or(i64::MAX)),
        );
    let r = if version >= 1 {
        r.with_last_fetch_timestamp(m.last_contact_unix_ms.unwrap_or(-1))
            .with_last_caught_up_timestamp(m.last_caught_up_unix_ms.unwrap_or(-1))
    } else {
        r
    };
    if version >= 2 {
        r.with_replica_directory_id(Uuid::from_u128(m.directory_id))
    } else {
        r
    }
}

/// DescribeQuorum, as Kafka's Raft client answers it: the metadata
/// partition's leader, epoch (the term), high watermark (the commit
/// index), voters and observers, from the leader only (the others answer
/// NOT_LEADER_OR_FOLLOWER); any other partition asked for is
/// UNKNOWN_TOPIC_OR_PARTITION.
pub(crate) fn describe_quorum(
    req: &DescribeQuorumRequest,
    version: i16,
    q: &QuorumView,
) -> DescribeQuorumResponse {
    let asks_metadata = req.topics.len() == 1
        && req.topics[0].topic_name.0.as_str() == METADATA_TOPIC
        && req.topics[0].partitions.len() == 1
        && req.topics[0].partitions[0].partition_index == 0;
    let partition = QuorumPartition::default().with_partition_index(0);
    let partition = if !asks_metadata {
        partition.with_error_code(ResponseError::UnknownTopicOrPartition.code())
    } else if !q.is_leader {
        partition
            .with_error_code(ResponseError::NotLeaderOrFollower.code())
            .with_leader_id(q.leader_id.map_or(BrokerId(-1), node_id))
            .with_leader_epoch(i32::try_from(q.term).unwrap_or(i32::MAX))
    } else {
        partition
            .with_leader_id(q.leader_id.map_or(BrokerId(-1), node_id))
            .with_leader_epoch(i32::try_from(q.term).unwrap_or(i32::MAX))
            .with_high_watermark(i64::try_from(q.commit_index).unwrap_or(i64::MAX))
            .with_current_voters(q.voters.iter().map(|m| replica_state(m, version)).collect())
            .with_observers(
                q.observers
                    .iter()
                    .map(|m| replica_state(m, version))
                    .collect(),
            )
    };
    let topic_name = if asks_metadata {
        METADATA_TOPIC.to_string()
    } else {
        req.topics
            .first()
            .map_or(METADATA_TOPIC.to_string(), |t| t.topic_name.0.to_string())
    };
    let out = DescribeQuorumResponse::default().with_topics(vec![QuorumTopic::default()
        .with_topic_name(TopicName(s(topic_name)))
        .with_partitions(vec![partition])]);
    if version >= 2 {
        out.with_nodes(
            q.listeners
                .iter()
                .map(|(id, addr)| {
                    QuorumNode::default()
                        .with_node_id(node_id(*id))
                        .with_listeners(vec![QuorumListener::default()
                            .with_name(s(CONTROLLER_LISTENER))
                            .with_host(s(addr.ip().to_string()))
                            .with_port(addr.port())])
                })
                .collect(),
        )
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_ids_follow_kafkas_pattern() {
        for ok in ["a", "librdkafka", "apache-kafka-java", "3.7.0", "2.0.2-RC1"] {
            assert!(valid_software_id(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", ".", "a b", "é"] {
            assert!(!valid_software_id(bad), "{bad}");
        }
    }
}
