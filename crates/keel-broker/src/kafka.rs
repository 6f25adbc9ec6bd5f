//! The broker's side of its Kafka listener (`keel_kafka`): the metadata
//! cache as a [`ClusterView`], made again only after an UpdateMetadata
//! changed the cache, so a Metadata request costs a shared pointer; and
//! admin requests forwarded to the active controller over the broker's
//! controller link (its channels, its TLS identity), following
//! NOT_CONTROLLER hints as heartbeats do. A forwarded request names the
//! client's principal, address and listener (KIP-590's `Envelope`): the
//! controller authorizes the client, never this broker.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_kafka::{
    Access, AdminCall, AdminReply, BoxFuture, BrokerView, Client, ClusterView, ForwardError,
    Forwarder, PartitionView, TopicView, ViewSource,
};
use keel_metadata::{BrokerId, BrokerInfo, ErrorCode, PartitionLeadership};
use keel_proto::backoff::Backoff;
use keel_proto::pb::admin_service_client::AdminServiceClient;
use tonic::transport::Channel;
use tracing::debug;

use crate::shared::{lock, Shared};

/// The largest answer taken from the controller (a DescribeTopics of many
/// topics is over gRPC's 4 MiB default).
const MAX_ANSWER_BYTES: usize = 1 << 30;

/// Hands the listener the view of the cache as it stands.
pub(crate) struct CacheViews {
    pub(crate) shared: Arc<Shared>,
    /// The last view made, with the cache generation it was made from.
    pub(crate) last: Mutex<Option<(u64, Arc<ClusterView>)>>,
}

impl ViewSource for CacheViews {
    fn view(&self) -> Arc<ClusterView> {
        let st = self.shared.state();
        let generation = st.metadata().generation();
        let mut last = lock(&self.last);
        if let Some((g, v)) = last.as_ref() {
            if *g == generation {
                return v.clone();
            }
        }
        let v = Arc::new(view_of(
            &self.shared.config.cluster_id,
            self.shared.id,
            st.metadata().brokers(),
            st.metadata().partitions(),
        ));
        *last = Some((generation, v.clone()));
        v
    }

    fn forwarder(&self) -> Option<&dyn Forwarder> {
        Some(self)
    }

    fn access(&self) -> Arc<Access> {
        self.shared.access.get()
    }

    fn credentials_missed(&self) {
        self.shared.access.missed();
    }
}

impl Forwarder for CacheViews {
    fn forward(
        &self,
        call: AdminCall,
        client: Client,
        deadline: Duration,
    ) -> BoxFuture<'_, Result<AdminReply, ForwardError>> {
        Box::pin(forward(self.shared.clone(), call, client, deadline))
    }
}

/// Sends `call` to the active controller: NOT_CONTROLLER follows the hint
/// (or the next address), a connection that could not be made tries the
/// next address; a write whose answer is lost is not sent again.
async fn forward(
    shared: Arc<Shared>,
    call: AdminCall,
    client: Client,
    deadline: Duration,
) -> Result<AdminReply, ForwardError> {
    let start = Instant::now();
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
    loop {
        let addr = lock(&shared.link).current();
        let channel = lock(&shared.dialer).channel(&addr, keel_tls::Expect::Controller);
        let left = deadline.saturating_sub(start.elapsed());
        let last = match channel {
            None => {
                lock(&shared.link).rotate();
                format!("{addr}: the address does not parse")
            }
            Some(ch) => match tokio::time::timeout(left, send(ch, call.clone(), &client)).await {
                Ok(Ok(reply)) => match reply.error() {
                    Some(e) if e.code == ErrorCode::NotController.as_i32() => {
                        lock(&shared.link).follow(e.leader.as_ref());
                        format!("{addr}: {}", e.message)
                    }
                    _ => return Ok(reply),
                },
                Ok(Err(status)) => {
                    // Only a connection never made proves the call never left.
                    let never_sent = keel_proto::client::never_sent(&status);
                    let last = format!("{addr}: {}", status.message());
                    if call.is_write() && !never_sent {
                        return Err(ForwardError::OutcomeUnknown(last));
                    }
                    lock(&shared.link).rotate();
                    last
                }
                Err(_) if call.is_write() => {
                    return Err(ForwardError::OutcomeUnknown(format!(
                        "{addr}: no answer within {deadline:?}"
                    )));
                }
                Err(_) => format!("{addr}: no answer within {deadline:?}"),
            },
        };
        debug!(%last, "forwarding an admin request: trying again");
        let pause = backoff.step();
        if start.elapsed() + pause >= deadline {
            return Err(ForwardError::NoController(last));
        }
        tokio::time::sleep(pause).await;
    }
}

/// `r` with the forwarded client's principal, address and listener.
fn on_behalf<T>(r: T, client: &Client) -> tonic::Request<T> {
    let mut req = tonic::Request::new(r);
    let m = req.metadata_mut();
    let mut put = |key: &'static str, value: String| {
        // Principals, addresses and listener names are ASCII; anything
        // else is left out rather than sent garbled.
        if let Ok(v) = value.parse() {
            m.insert(key, v);
        }
    };
    put(
        keel_proto::forwarded::PRINCIPAL,
        client.principal.to_string(),
    );
    if let Some(a) = client.address {
        put(keel_proto::forwarded::CLIENT, a.to_string());
    }
    put(keel_proto::forwarded::LISTENER, client.listener.to_string());
    req
}

/// One attempt of `call` on `ch`, on behalf of `client`.
async fn send(ch: Channel, call: AdminCall, client: &Client) -> Result<AdminReply, tonic::Status> {
    let mut c = AdminServiceClient::new(ch).max_decoding_message_size(MAX_ANSWER_BYTES);
    // Each call goes to the AdminService method of its name; the answer
    // comes back as the reply of the same variant.
    macro_rules! to_method {
        ($($call:ident => $method:ident,)*) => {
            match call {
                $(AdminCall::$call(r) => {
                    AdminReply::$call(c.$method(on_behalf(r, client)).await?.into_inner())
                })*
            }
        };
    }
    Ok(to_method! {
        CreateTopics => create_topics,
        DeleteTopics => delete_topics,
        CreatePartitions => create_partitions,
        DescribeTopics => describe_topics,
        IncrementalAlterConfigs => incremental_alter_configs,
        ElectLeaders => elect_leaders,
        AlterPartitionReassignments => alter_partition_reassignments,
        ListPartitionReassignments => list_partition_reassignments,
        AlterClusterConfigs => alter_cluster_configs,
        DescribeClusterConfigs => describe_cluster_configs,
        CreateAcls => create_acls,
        DeleteAcls => delete_acls,
        DescribeAcls => describe_acls,
        AlterUserScramCredentials => alter_user_scram_credentials,
        DescribeUserScramCredentials => describe_user_scram_credentials,
    })
}

/// The cache's brokers and partitions as Kafka's answers need them.
pub(crate) fn view_of<'a>(
    cluster_id: &str,
    me: BrokerId,
    brokers: impl Iterator<Item = &'a BrokerInfo>,
    partitions: impl Iterator<Item = &'a PartitionLeadership>,
) -> ClusterView {
    let brokers = brokers
        .map(|b| {
            (
                b.id.0,
                BrokerView {
                    // The controller checked it at registration.
                    kafka_address: b
                        .kafka_address
                        .as_deref()
                        .and_then(|a| a.parse::<SocketAddr>().ok()),
                    rack: b.rack.clone(),
                    fenced: b.fenced,
                },
            )
        })
        .collect();
    let mut topics: BTreeMap<String, TopicView> = BTreeMap::new();
    // The cache is in (topic id, partition) order: each topic's partitions
    // arrive in order.
    for p in partitions {
        topics
            .entry(p.topic.clone())
            .or_insert_with(|| TopicView {
                id: p.tp.topic_id.0,
                partitions: Vec::new(),
            })
            .partitions
            .push(PartitionView {
                index: p.tp.partition.0,
                leader: p.leader.map(|b| b.0),
                leader_epoch: p.leader_epoch.0,
                replicas: p.replicas.iter().map(|b| b.0).collect(),
                isr: p.isr.iter().map(|b| b.0).collect(),
            });
    }
    ClusterView {
        cluster_id: cluster_id.to_string(),
        broker_id: me.0,
        brokers,
        topics,
        quorum: None,
    }
}

#[cfg(test)]
mod tests {
    use keel_metadata::{BrokerEpoch, LeaderEpoch, PartitionEpoch, TopicId, TopicPartition};

    use super::*;

    fn broker(id: u32, kafka: Option<&str>, fenced: bool) -> BrokerInfo {
        BrokerInfo {
            id: BrokerId(id),
            epoch: BrokerEpoch(u64::from(id)),
            address: format!("127.0.0.{id}:9092"),
            rack: None,
            fenced,
            shutting_down: false,
            kafka_address: kafka.map(str::to_string),
        }
    }

    fn partition(topic: &str, id: u128, p: u32, leader: Option<u32>) -> PartitionLeadership {
        PartitionLeadership {
            tp: TopicPartition::new(TopicId(id), p),
            topic: topic.into(),
            leader: leader.map(BrokerId),
            leader_epoch: LeaderEpoch(4),
            partition_epoch: PartitionEpoch(7),
            replicas: vec![BrokerId(1), BrokerId(2)],
            isr: vec![BrokerId(1)],
            adding: vec![],
            removing: vec![],
        }
    }

    #[test]
    fn the_cache_becomes_topics_with_their_partitions_and_brokers_with_listeners() {
        let brokers = [
            broker(1, Some("127.0.0.1:9094"), false),
            broker(2, None, false),
            broker(3, Some("127.0.0.3:9094"), true),
        ];
        let partitions = [
            partition("b", 1, 0, Some(1)),
            partition("b", 1, 1, None),
            partition("a", 2, 0, Some(2)),
        ];
        let v = view_of("k", BrokerId(1), brokers.iter(), partitions.iter());
        assert_eq!((v.cluster_id.as_str(), v.broker_id), ("k", 1));
        assert_eq!(v.alive(1), Some("127.0.0.1:9094".parse().unwrap()));
        assert_eq!(v.alive(2), None, "no listener");
        assert_eq!(v.alive(3), None, "fenced");
        assert_eq!(v.controller_id(), 1);
        assert_eq!(v.topics.keys().collect::<Vec<_>>(), ["a", "b"]);
        let b = &v.topics["b"];
        assert_eq!(b.id, 1);
        assert_eq!(
            b.partitions,
            vec![
                PartitionView {
                    index: 0,
                    leader: Some(1),
                    leader_epoch: 4,
                    replicas: vec![1, 2],
                    isr: vec![1],
                },
                PartitionView {
                    index: 1,
                    leader: None,
                    leader_epoch: 4,
                    replicas: vec![1, 2],
                    isr: vec![1],
                },
            ]
        );
    }
}
