//! Fixtures shared by the decision tests (one test file per decide
//! module): a controller's image fed by committed entries, and shorthands.

#![allow(dead_code, reason = "each test binary uses only some of these")]

use keel_metadata::decide::*;
use keel_metadata::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

pub fn b(id: u32) -> BrokerId {
    BrokerId(id)
}

pub fn bs(ids: &[u32]) -> Vec<BrokerId> {
    ids.iter().map(|i| BrokerId(*i)).collect()
}

pub fn code<T: std::fmt::Debug>(r: &Result<T, ApiError>) -> ErrorCode {
    r.as_ref().expect_err("expected a refusal").code
}

/// The error code of each per-item reply, `ErrorCode::None` for an item
/// that was accepted.
pub fn codes<K, T>(replies: &[(K, Result<T, ApiError>)]) -> Vec<ErrorCode> {
    replies
        .iter()
        .map(|(_, r)| r.as_ref().err().map_or(ErrorCode::None, |e| e.code))
        .collect()
}

/// A controller's view: an image fed by committed entries.
pub struct Cluster {
    pub image: MetadataImage,
    pub rng: StdRng,
}

impl Cluster {
    pub fn new() -> Self {
        Self {
            image: MetadataImage::new(),
            rng: StdRng::seed_from_u64(42),
        }
    }

    /// A cluster with brokers `1..=n`, registered and unfenced.
    pub fn with_brokers(n: u32) -> Self {
        let mut c = Self::new();
        for id in 1..=n {
            c.add_broker(id, None);
        }
        c
    }

    /// Commits `records` as one entry and checks the image invariants.
    pub fn commit(&mut self, records: &[MetadataRecord]) -> u64 {
        let offset = self.image.offset() + 1;
        self.image
            .replay_batch(&RecordBatch::new(records.to_vec()), offset)
            .expect("decided records replay");
        self.image.validate().expect("image stays valid");
        offset
    }

    pub fn register_request(id: u32, incarnation: u128, previous: BrokerEpoch) -> RegisterBroker {
        RegisterBroker {
            broker: b(id),
            incarnation: IncarnationId(incarnation),
            address: format!("127.0.0.{id}:9092"),
            rack: None,
            log_dirs: vec!["/data/a".into(), "/data/b".into()],
            previous_epoch: previous,
            kafka_address: None,
        }
    }

    pub fn add_broker(&mut self, id: u32, rack: Option<&str>) -> BrokerEpoch {
        let mut req = Self::register_request(id, u128::from(id), BrokerEpoch(0));
        req.rack = rack.map(str::to_string);
        let d = self.image.decide_register_broker(&req, false);
        assert_eq!(d.reply, Ok(RegisterReply::New));
        let epoch = BrokerEpoch(self.commit(&d.records));
        self.unfence(id);
        epoch
    }

    pub fn epoch(&self, id: u32) -> BrokerEpoch {
        self.image.broker(b(id)).unwrap().epoch
    }

    pub fn unfence(&mut self, id: u32) {
        let d = self.image.decide_unfence_broker(b(id), self.epoch(id));
        assert_eq!(d.reply, Ok(()));
        self.commit(&d.records);
    }

    pub fn fence(&mut self, id: u32) {
        let d = self.image.decide_fence_broker(b(id));
        self.commit(&d.records);
    }

    /// Creates a topic with a manual assignment and returns its id.
    pub fn create(&mut self, name: &str, rows: &[&[u32]], configs: &[(&str, &str)]) -> TopicId {
        let req = CreateTopic {
            name: name.into(),
            assignments: Some(rows.iter().map(|r| bs(r)).collect()),
            configs: configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..CreateTopic::default()
        };
        let d = self
            .image
            .decide_create_topics(&[req], false, &mut self.rng);
        let id = d.reply[0].1.as_ref().expect("topic created").topic_id;
        self.commit(&d.records);
        id
    }

    pub fn p(&self, topic: TopicId, index: u32) -> &PartitionImage {
        self.image
            .partition(&TopicPartition::new(topic, index))
            .unwrap()
    }

    /// The leader of `tp` shrinks or expands its ISR.
    pub fn alter_isr(&mut self, tp: TopicPartition, isr: &[u32]) {
        let p = self.image.partition(&tp).unwrap().clone();
        let leader = p.leader.unwrap();
        let item = AlterPartitionItem {
            tp,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: bs(isr),
        };
        let d = self.image.decide_alter_partition(
            leader,
            self.image.broker(leader).unwrap().epoch,
            &[item],
        );
        d.reply.as_ref().unwrap()[0]
            .1
            .as_ref()
            .expect("ISR change accepted");
        self.commit(&d.records);
    }
}

/// A topic of `partitions` partitions placed by the controller.
pub fn spread(name: &str, partitions: u32, replication_factor: u32) -> CreateTopic {
    CreateTopic {
        name: name.into(),
        partitions,
        replication_factor,
        ..CreateTopic::default()
    }
}

pub fn change(records: &[MetadataRecord], i: usize) -> &PartitionChangeRecord {
    match &records[i] {
        MetadataRecord::PartitionChange(c) => c,
        other => panic!("record {i} is {other:?}, not a partition change"),
    }
}
