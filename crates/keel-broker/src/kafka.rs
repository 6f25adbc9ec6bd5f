//! The broker's side of its Kafka listener (`keel_kafka`): the metadata
//! cache as a [`ClusterView`], made again only after an UpdateMetadata
//! changed the cache, so a Metadata request costs a shared pointer.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use keel_kafka::{BrokerView, ClusterView, PartitionView, TopicView, ViewSource};
use keel_metadata::{BrokerId, BrokerInfo, PartitionLeadership};

use crate::shared::{lock, Shared};

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
