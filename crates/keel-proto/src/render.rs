//! Rendering of the controller's requests to a broker from an image: what a
//! [`BrokerRound`] lists becomes `LeaderAndIsr` and `UpdateMetadata`
//! requests (split into requests of at most [`PARTITIONS_PER_REQUEST`]
//! partitions), and deletions become `StopReplica` items. Pure: the channel
//! that sends them only chooses when.

use std::collections::BTreeSet;

use keel_metadata::planner::BrokerRound;
use keel_metadata::{
    BrokerId, ControllerStamp, MetadataImage, PartitionId, TopicId, TopicPartition,
};

use crate::convert::{broker_to_pb, partition_to_pb};
use crate::pb;

/// Partitions per request: with common topic names an encoded request is
/// 1-2 MiB (brokers accept up to 64 MiB, for names of 249 characters).
pub const PARTITIONS_PER_REQUEST: usize = 20_000;

/// The stamp every controller request carries.
pub fn stamp_to_pb(s: &ControllerStamp) -> pb::ControllerStamp {
    pb::ControllerStamp {
        controller_id: s.controller_id,
        controller_epoch: s.controller_epoch.0,
        broker_epoch: s.broker_epoch.0,
    }
}

/// The states of `tps` in `image`. A partition that is gone was deleted
/// with its topic, which the cache learns from `deleted_topic_ids` (in this
/// round or a later one).
pub fn partition_states(image: &MetadataImage, tps: &[TopicPartition]) -> Vec<pb::PartitionState> {
    let mut out = Vec::with_capacity(tps.len());
    // The list is sorted: look each topic's name up once.
    let mut topic: Option<(TopicId, &str)> = None;
    for tp in tps {
        let Some(p) = image.partition(tp) else {
            continue;
        };
        let name = match topic {
            Some((id, name)) if id == tp.topic_id => name,
            _ => {
                let name = image
                    .topic(tp.topic_id)
                    .map(|t| t.name.as_str())
                    .unwrap_or("");
                topic = Some((tp.topic_id, name));
                name
            }
        };
        out.push(partition_to_pb(name, tp, p));
    }
    out
}

/// The brokers leading any of `states` (followers connect to them).
pub fn leaders_of(image: &MetadataImage, states: &[pb::PartitionState]) -> Vec<pb::BrokerInfo> {
    let ids: BTreeSet<u32> = states.iter().filter_map(|s| s.leader).collect();
    ids.into_iter()
        .filter_map(|id| image.broker(BrokerId(id)))
        .map(broker_to_pb)
        .collect()
}

/// One `LeaderAndIsr` request for `tps` (at most one request's worth).
pub fn leader_and_isr_request(
    image: &MetadataImage,
    stamp: &ControllerStamp,
    tps: &[TopicPartition],
) -> pb::LeaderAndIsrRequest {
    let partitions = partition_states(image, tps);
    pb::LeaderAndIsrRequest {
        stamp: Some(stamp_to_pb(stamp)),
        leaders: leaders_of(image, &partitions),
        partitions,
    }
}

/// What the first `UpdateMetadata` of a view carries besides partitions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetadataHead {
    pub brokers: Vec<pb::BrokerInfo>,
    pub removed_broker_ids: Vec<u32>,
    pub deleted_topic_ids: Vec<Vec<u8>>,
}

impl MetadataHead {
    /// The head of `round`'s view, from `image`.
    pub fn of(image: &MetadataImage, round: &BrokerRound) -> Self {
        Self {
            brokers: round
                .brokers
                .iter()
                .filter_map(|b| image.broker(*b))
                .map(broker_to_pb)
                .collect(),
            removed_broker_ids: round.removed_brokers.iter().map(|b| b.0).collect(),
            deleted_topic_ids: round
                .deleted_topics
                .iter()
                .map(|t| t.to_bytes().to_vec())
                .collect(),
        }
    }
}

/// Request `index` of the `count` a view of the cache is split into: only
/// the first replaces the cache (for a full view) and carries `head`, only
/// the last names the offset (the broker's cache is as new as `offset` once
/// every request of the view was applied).
pub fn update_metadata_request(
    image: &MetadataImage,
    stamp: &ControllerStamp,
    full: bool,
    (index, count): (usize, usize),
    tps: &[TopicPartition],
    head: MetadataHead,
) -> pb::UpdateMetadataRequest {
    pb::UpdateMetadataRequest {
        stamp: Some(stamp_to_pb(stamp)),
        metadata_offset: if index + 1 == count {
            image.offset()
        } else {
            0
        },
        full: full && index == 0,
        brokers: head.brokers,
        partitions: partition_states(image, tps),
        deleted_topic_ids: head.deleted_topic_ids,
        removed_broker_ids: head.removed_broker_ids,
    }
}

/// `tps` in request-sized chunks, in order (one empty chunk for an empty
/// list when `at_least_one`: a view with nothing but its head).
pub fn chunks(tps: Vec<TopicPartition>, at_least_one: bool) -> Vec<Vec<TopicPartition>> {
    let mut out: Vec<Vec<TopicPartition>> = tps
        .chunks(PARTITIONS_PER_REQUEST)
        .map(<[TopicPartition]>::to_vec)
        .collect();
    if out.is_empty() && at_least_one {
        out.push(Vec::new());
    }
    out
}

/// A `StopReplica(delete)` item.
pub fn stop_replica_item(topic_id: TopicId, partition: PartitionId) -> pb::StopReplicaItem {
    pb::StopReplicaItem {
        topic_id: topic_id.to_bytes().to_vec(),
        partition: partition.0,
        delete: true,
        leader_epoch: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_metadata::records::{PartitionRecord, RegisterBrokerRecord, TopicRecord};
    use keel_metadata::{BrokerEpoch, ControllerEpoch, IncarnationId, MetadataRecord as R};

    fn stamp() -> ControllerStamp {
        ControllerStamp {
            controller_id: 2,
            controller_epoch: ControllerEpoch(7),
            broker_epoch: BrokerEpoch(5),
        }
    }

    /// Brokers 1 and 2 (unfenced), topic `t` with partitions 0 (led by 1)
    /// and 1 (led by 2), at offset 3.
    fn image() -> (MetadataImage, TopicId) {
        let t = TopicId(9);
        let mut image = MetadataImage::new();
        let mut recs = Vec::new();
        for b in 1..=2 {
            recs.push(R::RegisterBroker(RegisterBrokerRecord {
                broker: BrokerId(b),
                incarnation: IncarnationId(u128::from(b)),
                address: format!("127.0.0.1:{b}"),
                rack: None,
                log_dirs: vec![],
            }));
        }
        for r in &recs {
            image.replay(r, 1).unwrap();
        }
        for b in 1..=2 {
            let unfence = R::UnfenceBroker {
                broker: BrokerId(b),
                epoch: BrokerEpoch(1),
            };
            image.replay(&unfence, 2).unwrap();
        }
        let mut recs = vec![R::Topic(TopicRecord {
            topic_id: t,
            name: "t".into(),
            configs: Default::default(),
        })];
        for (p, leader) in [(0, 1), (1, 2)] {
            recs.push(R::Partition(PartitionRecord {
                topic_id: t,
                partition: PartitionId(p),
                replicas: vec![BrokerId(leader)],
                isr: vec![BrokerId(leader)],
                leader: Some(BrokerId(leader)),
            }));
        }
        for r in &recs {
            image.replay(r, 3).unwrap();
        }
        (image, t)
    }

    #[test]
    fn leader_and_isr_carries_the_states_their_leaders_and_the_stamp() {
        let (image, t) = image();
        let gone = TopicPartition::new(TopicId(77), 0);
        let tps = [TopicPartition::new(t, 0), TopicPartition::new(t, 1), gone];
        let r = leader_and_isr_request(&image, &stamp(), &tps);
        assert_eq!(
            r.stamp,
            Some(pb::ControllerStamp {
                controller_id: 2,
                controller_epoch: 7,
                broker_epoch: 5
            })
        );
        // A partition gone from the image is left out (its topic's deletion
        // reaches the cache separately).
        assert_eq!(r.partitions.len(), 2);
        assert!(r.partitions.iter().all(|p| p.topic == "t"));
        assert_eq!(r.partitions[1].leader, Some(2));
        let leaders: Vec<u32> = r.leaders.iter().map(|b| b.broker_id).collect();
        assert_eq!(leaders, vec![1, 2]);
    }

    #[test]
    fn a_split_view_replaces_the_cache_first_and_names_its_offset_last() {
        let (image, t) = image();
        let round = BrokerRound {
            brokers: vec![BrokerId(1), BrokerId(42)],
            removed_brokers: vec![BrokerId(7)],
            deleted_topics: vec![TopicId(5)],
            ..Default::default()
        };
        let head = MetadataHead::of(&image, &round);
        // Broker 42 is not in the image: nothing to render for it.
        assert_eq!(head.brokers.len(), 1);
        assert_eq!(head.removed_broker_ids, vec![7]);
        assert_eq!(head.deleted_topic_ids, vec![TopicId(5).to_bytes().to_vec()]);
        let tps = [TopicPartition::new(t, 0)];
        let reqs: Vec<pb::UpdateMetadataRequest> = (0..3)
            .map(|i| {
                let h = if i == 0 {
                    head.clone()
                } else {
                    MetadataHead::default()
                };
                update_metadata_request(&image, &stamp(), true, (i, 3), &tps, h)
            })
            .collect();
        assert!(reqs[0].full && !reqs[1].full && !reqs[2].full);
        assert_eq!(
            reqs.iter().map(|r| r.metadata_offset).collect::<Vec<_>>(),
            vec![0, 0, image.offset()]
        );
        assert_eq!(reqs[0].removed_broker_ids, vec![7]);
        assert!(reqs[1].brokers.is_empty());
        // A delta in one request has everything and is not a replacement.
        let one = update_metadata_request(&image, &stamp(), false, (0, 1), &tps, head);
        assert_eq!(one.metadata_offset, image.offset());
        assert!(!one.full);
        assert_eq!(one.brokers.len(), 1);
        assert_eq!(one.partitions.len(), 1);
    }

    #[test]
    fn chunks_keep_order_and_size_and_a_view_has_at_least_one_request() {
        let tps: Vec<TopicPartition> = (0..(2 * PARTITIONS_PER_REQUEST + 1) as u32)
            .map(|p| TopicPartition::new(TopicId(1), p))
            .collect();
        let c = chunks(tps.clone(), false);
        assert_eq!(c.len(), 3);
        assert!(c.iter().all(|c| c.len() <= PARTITIONS_PER_REQUEST));
        assert_eq!(c.concat(), tps);
        assert!(chunks(Vec::new(), false).is_empty());
        assert_eq!(chunks(Vec::new(), true), vec![Vec::<TopicPartition>::new()]);
        let item = stop_replica_item(TopicId(3), PartitionId(4));
        assert!(item.delete);
        assert_eq!(item.topic_id, TopicId(3).to_bytes().to_vec());
        assert_eq!(item.partition, 4);
    }
}
