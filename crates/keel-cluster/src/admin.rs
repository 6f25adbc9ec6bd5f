//! Typed admin helpers over [`ControllerClient`]: the request builders and
//! the few calls every harness makes (create a topic, describe, register a
//! stand-in broker), each failing with the cluster's own error.

use anyhow::{anyhow, bail};
use keel_proto::client::ControllerClient;
use keel_proto::pb;

/// One topic to create: `partitions` partitions of `replication_factor`
/// replicas each, placed by the controller.
pub fn creatable(name: &str, partitions: u32, replication_factor: u32) -> pb::CreatableTopic {
    pb::CreatableTopic {
        name: name.to_string(),
        partitions,
        replication_factor,
        ..Default::default()
    }
}

/// One topic to create with every partition on `replicas` (in that order:
/// the first is the preferred leader).
pub fn creatable_on(name: &str, partitions: u32, replicas: &[u32]) -> pb::CreatableTopic {
    pb::CreatableTopic {
        name: name.to_string(),
        partitions,
        replication_factor: replicas.len() as u32,
        assignments: (0..partitions)
            .map(|partition| pb::ReplicaAssignment {
                partition,
                replicas: replicas.to_vec(),
            })
            .collect(),
        ..Default::default()
    }
}

/// A CreateTopics request for these topics.
pub fn create_topics_request(topics: Vec<pb::CreatableTopic>) -> pb::CreateTopicsRequest {
    pb::CreateTopicsRequest {
        topics,
        validate_only: false,
    }
}

/// One SET of `key` on `topic`.
pub fn set_config(topic: &str, key: String, value: String) -> pb::IncrementalAlterConfigsRequest {
    pb::IncrementalAlterConfigsRequest {
        topics: vec![pb::AlterTopicConfig {
            topic: topic.to_string(),
            ops: vec![pb::AlterConfigOp {
                key,
                value,
                op: pb::ConfigOp::Set as i32,
            }],
        }],
        validate_only: false,
    }
}

/// Whether an IncrementalAlterConfigs answer acknowledges every item.
pub fn alter_ok(r: &pb::IncrementalAlterConfigsResponse) -> bool {
    r.error.is_none() && !r.topics.is_empty() && r.topics.iter().all(|t| t.error.is_none())
}

/// Sends a CreateTopics request; the answer, or the request-level refusal.
/// A create is not idempotent, so it is re-sent only where it surely was
/// not applied (`admin_write`); a lost answer is an error, not a retry that
/// would come back TOPIC_ALREADY_EXISTS.
pub async fn create_topics(
    client: &ControllerClient,
    req: &pb::CreateTopicsRequest,
) -> anyhow::Result<pb::CreateTopicsResponse> {
    let r = client
        .admin_write(|mut c| {
            let req = req.clone();
            async move { c.create_topics(req).await }
        })
        .await?;
    fail_if_refused("CreateTopics", r.error.as_ref())?;
    Ok(r)
}

/// Creates one topic; its id, or the refusal.
pub async fn create_topic(
    client: &ControllerClient,
    name: &str,
    partitions: u32,
    replication_factor: u32,
) -> anyhow::Result<Vec<u8>> {
    let req = create_topics_request(vec![creatable(name, partitions, replication_factor)]);
    let r = create_topics(client, &req).await?;
    let t = r
        .topics
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("CreateTopics of {name} answered no topic"))?;
    fail_if_refused(format_args!("create of {name}"), t.error.as_ref())?;
    Ok(t.topic_id)
}

/// DescribeTopics of `names` (every topic when empty); the answer, or the
/// request-level refusal.
async fn describe_topics(
    client: &ControllerClient,
    names: Vec<String>,
) -> anyhow::Result<pb::DescribeTopicsResponse> {
    let req = pb::DescribeTopicsRequest { names };
    let r = client
        .admin(|mut c| {
            let req = req.clone();
            async move { c.describe_topics(req).await }
        })
        .await?;
    fail_if_refused("DescribeTopics", r.error.as_ref())?;
    Ok(r)
}

/// DescribeTopics of one topic: `None` when it does not exist.
pub async fn describe_topic(
    client: &ControllerClient,
    name: &str,
) -> anyhow::Result<Option<pb::TopicDescription>> {
    let r = describe_topics(client, vec![name.to_string()]).await?;
    Ok(r.topics.into_iter().find(|t| t.error.is_none()))
}

/// Names of every topic.
pub async fn topic_names(client: &ControllerClient) -> anyhow::Result<Vec<String>> {
    let r = describe_topics(client, Vec::new()).await?;
    Ok(r.topics.into_iter().map(|t| t.name).collect())
}

/// DescribeCluster through the active controller.
pub async fn describe_cluster(
    client: &ControllerClient,
) -> anyhow::Result<pb::DescribeClusterResponse> {
    let r = client
        .admin(|mut c| async move {
            c.describe_cluster(pb::DescribeClusterRequest::default())
                .await
        })
        .await?;
    fail_if_refused("DescribeCluster", r.error.as_ref())?;
    Ok(r)
}

/// Whether brokers `1..=n` are registered, unfenced and not shutting down.
pub fn brokers_unfenced(r: &pb::DescribeClusterResponse, n: u32) -> bool {
    (1..=n).all(|id| broker_info(r, id).is_some_and(|b| !b.fenced && !b.shutting_down))
}

/// A broker as the cluster description shows it.
pub fn broker_info(r: &pb::DescribeClusterResponse, id: u32) -> Option<pb::BrokerInfo> {
    r.brokers
        .iter()
        .filter_map(|b| b.broker.as_ref())
        .find(|b| b.broker_id == id)
        .cloned()
}

/// Registers a stand-in broker `id` at `address` (nothing need listen
/// there) and heartbeats it once with a huge metadata offset, so it is
/// unfenced; returns its broker epoch.
pub async fn register_stand_in(
    client: &ControllerClient,
    cluster_id: &str,
    id: u32,
    address: &str,
) -> anyhow::Result<u64> {
    let req = pb::RegisterBrokerRequest {
        broker_id: id,
        incarnation_id: (u128::from(id) + 1000).to_be_bytes().to_vec(),
        cluster_id: cluster_id.to_string(),
        address: address.to_string(),
        rack: None,
        log_dirs: vec![],
        previous_broker_epoch: 0,
        kafka_address: None,
    };
    let r = client
        .broker(|mut c| {
            let req = req.clone();
            async move { c.register_broker(req).await }
        })
        .await?;
    fail_if_refused(
        format_args!("registration of broker {id}"),
        r.error.as_ref(),
    )?;
    let epoch = r.broker_epoch;
    let hb = pb::BrokerHeartbeatRequest {
        broker_id: id,
        broker_epoch: epoch,
        current_metadata_offset: u64::MAX / 2,
        ..Default::default()
    };
    let r = client
        .broker(|mut c| {
            let hb = hb.clone();
            async move { c.broker_heartbeat(hb).await }
        })
        .await?;
    fail_if_refused(format_args!("heartbeat of broker {id}"), r.error.as_ref())?;
    if r.is_fenced {
        bail!("broker {id} still fenced after catching up");
    }
    Ok(epoch)
}

/// The error "`what` refused: message (CODE)" when the controller sent
/// `error`.
fn fail_if_refused(what: impl std::fmt::Display, error: Option<&pb::Error>) -> anyhow::Result<()> {
    match error {
        Some(e) => bail!("{what} refused: {} ({})", e.message, code_name(e.code)),
        None => Ok(()),
    }
}

/// The wire name of an error code (`TOPIC_ALREADY_EXISTS`), or its number.
pub fn code_name(code: i32) -> String {
    pb::ErrorCode::try_from(code)
        .map(|c| c.as_str_name().to_string())
        .unwrap_or_else(|_| code.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_assigned_topic_puts_every_partition_on_the_given_replicas() {
        let t = creatable_on("t", 3, &[1, 2, 3]);
        assert_eq!(t.replication_factor, 3);
        assert_eq!(t.assignments.len(), 3);
        assert!(t
            .assignments
            .iter()
            .enumerate()
            .all(|(i, a)| a.partition == i as u32 && a.replicas == [1, 2, 3]));
        assert_eq!(creatable("u", 6, 2).assignments.len(), 0);
    }

    #[test]
    fn unfenced_means_every_broker_up_to_n_is_registered_active_and_staying() {
        let info = |id, fenced, shutting_down| pb::BrokerDescription {
            broker: Some(pb::BrokerInfo {
                broker_id: id,
                fenced,
                shutting_down,
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut r = pb::DescribeClusterResponse {
            brokers: vec![info(1, false, false), info(2, false, false)],
            ..Default::default()
        };
        assert!(brokers_unfenced(&r, 2));
        assert!(!brokers_unfenced(&r, 3), "broker 3 is not registered");
        r.brokers[1] = info(2, true, false);
        assert!(!brokers_unfenced(&r, 2));
        r.brokers[1] = info(2, false, true);
        assert!(!brokers_unfenced(&r, 2));
        assert_eq!(
            code_name(pb::ErrorCode::TopicAlreadyExists as i32),
            "TOPIC_ALREADY_EXISTS"
        );
        assert_eq!(code_name(9_999), "9999");
    }
}
