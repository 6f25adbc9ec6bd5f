//! Property tests of the decide functions and replica placement. The runs
//! are deterministic: a fixed ChaCha seed and no failure persistence.

use std::collections::{BTreeMap, BTreeSet};

use keel_metadata::decide::*;
use keel_metadata::placement::{place_replicas, PlacementBroker};
use keel_metadata::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, RngSeed};
use rand::rngs::StdRng;
use rand::SeedableRng;

fn config(cases: u32) -> Config {
    Config {
        cases,
        rng_algorithm: RngAlgorithm::ChaCha,
        rng_seed: RngSeed::Fixed(0x6b65_656c),
        failure_persistence: None,
        ..Config::default()
    }
}

const BROKERS: u32 = 5;
const TOPICS: [&str; 4] = ["t0", "t1", "t2", "t3"];
const DIRS: [&str; 2] = ["/d0", "/d1"];

/// One step of a random controller history; the fields are interpreted by
/// [`Sim::step`] so that shrinking stays meaningful.
#[derive(Clone, Debug)]
struct Op {
    kind: u8,
    a: u8,
    b: u8,
    c: u8,
    seed: u64,
}

fn op() -> impl Strategy<Value = Op> {
    (0u8..28, any::<u8>(), any::<u8>(), any::<u8>(), any::<u64>()).prop_map(
        |(kind, a, b, c, seed)| Op {
            kind,
            a,
            b,
            c,
            seed,
        },
    )
}

/// A decision's records, after checking its replayed image (when it kept
/// one) is exactly `base` with those records replayed at the next offset,
/// as the active controller would replay them before adopting the image.
fn checked(
    base: &MetadataImage,
    records: Vec<MetadataRecord>,
    replayed: Option<Replayed>,
) -> Vec<MetadataRecord> {
    if let Some(proof) = replayed {
        if let Err(e) = proof.verify(base, &records) {
            panic!("a decision's replayed image is not its records replayed on the image it was made on: {e}");
        }
    }
    records
}

trait Checked {
    /// [`checked`] on a decision made on `base`.
    fn checked(self, base: &MetadataImage) -> Vec<MetadataRecord>;
}

impl<R> Checked for Decision<R> {
    fn checked(self, base: &MetadataImage) -> Vec<MetadataRecord> {
        checked(base, self.records, self.replayed)
    }
}

/// An image fed only through decisions, with the log of every entry.
struct Sim {
    image: MetadataImage,
    log: Vec<(u64, RecordBatch)>,
}

impl Sim {
    fn new() -> Self {
        Self {
            image: MetadataImage::new(),
            log: Vec::new(),
        }
    }

    fn commit(&mut self, records: Vec<MetadataRecord>) {
        if records.is_empty() {
            return;
        }
        let offset = self.image.offset() + 1;
        let batch = RecordBatch::new(records);
        self.image
            .replay_batch(&batch, offset)
            .unwrap_or_else(|e| panic!("decided batch {batch:?} does not replay: {e}"));
        self.log.push((offset, batch));
    }

    fn epoch(&self, broker: BrokerId) -> BrokerEpoch {
        self.image
            .broker(broker)
            .map_or(BrokerEpoch(0), |r| r.epoch)
    }

    fn topic(&self, i: u8) -> Option<TopicId> {
        self.image
            .topic_by_name(TOPICS[usize::from(i) % TOPICS.len()])
            .map(|t| t.id)
    }

    fn some_partition(&self, topic: u8, index: u8) -> Option<TopicPartition> {
        let t = self.image.topic(self.topic(topic)?)?;
        (t.partition_count > 0)
            .then(|| TopicPartition::new(t.id, u32::from(index) % t.partition_count))
    }

    fn step(&mut self, op: &Op) {
        let broker = BrokerId(u32::from(op.a) % BROKERS + 1);
        let mut rng = StdRng::seed_from_u64(op.seed);
        // Common triggers (heartbeats, ISR changes, deletion steps) get
        // several kinds each so histories reach deep states.
        let kind = match op.kind {
            0 | 1 => 0,
            2..=4 => 1,
            5 => 2,
            6 => 3,
            7 | 8 => 4,
            9..=11 => 5,
            12 => 6,
            13 => 7,
            14 | 15 => 8,
            16 => 9,
            17 => 10,
            18..=20 => 11,
            21 => 12,
            22 => 13,
            23 => 14,
            24 => 15,
            25 => 16,
            _ => 17,
        };
        let records = match kind {
            0 => {
                let req = RegisterBroker {
                    broker,
                    incarnation: IncarnationId(u128::from(op.b % 2)),
                    address: format!("127.0.0.{}:9092", broker.0),
                    rack: (op.c % 4 != 3).then(|| format!("rack-{}", op.c % 3)),
                    log_dirs: DIRS.iter().map(|d| d.to_string()).collect(),
                    previous_epoch: if op.seed & 2 != 0 {
                        self.epoch(broker)
                    } else {
                        BrokerEpoch(0)
                    },
                    kafka_address: op
                        .c
                        .is_multiple_of(2)
                        .then(|| format!("127.0.0.{}:9094", broker.0)),
                };
                self.image
                    .decide_register_broker(&req, op.seed & 1 != 0)
                    .checked(&self.image)
            }
            1 => {
                let hb = Heartbeat {
                    broker,
                    epoch: self.epoch(broker),
                    metadata_offset: self.image.offset(),
                    want_fence: op.b & 2 != 0 && op.c.is_multiple_of(8),
                    want_shutdown: op.b & 4 != 0 && op.c.is_multiple_of(16),
                    offline_log_dirs: if op.b & 8 != 0 && op.c.is_multiple_of(5) {
                        vec![DIRS[usize::from(op.c) % 2].to_string()]
                    } else {
                        vec![]
                    },
                };
                self.image
                    .decide_heartbeat(&hb, op.b & 1 != 0)
                    .checked(&self.image)
            }
            2 => self
                .image
                .decide_unfence_broker(broker, self.epoch(broker))
                .checked(&self.image),
            3 => self.image.decide_fence_broker(broker).checked(&self.image),
            4 => {
                let mut configs = BTreeMap::new();
                if op.seed & 4 != 0 {
                    configs.insert(UNCLEAN_LEADER_ELECTION.to_string(), "true".to_string());
                }
                let req = CreateTopic {
                    name: TOPICS[usize::from(op.a) % TOPICS.len()].to_string(),
                    partitions: u32::from(op.b % 4) + 1,
                    replication_factor: u32::from(op.c % 3) + 1,
                    assignments: None,
                    configs,
                };
                self.image
                    .decide_create_topics(&[req], false, &mut rng)
                    .checked(&self.image)
            }
            5 => {
                let Some(tp) = self.some_partition(op.a, op.b) else {
                    return;
                };
                let p = self.image.partition(&tp).unwrap().clone();
                let Some(leader) = p.leader else { return };
                let mut isr: Vec<BrokerId> = p
                    .replicas
                    .iter()
                    .enumerate()
                    .filter(|(i, b)| **b == leader || op.c & (1 << i) != 0)
                    .map(|(_, b)| *b)
                    .collect();
                isr.sort();
                let stale = op.seed.is_multiple_of(5);
                let item = AlterPartitionItem {
                    tp,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: PartitionEpoch(p.partition_epoch.0 + u32::from(stale)),
                    new_isr: isr,
                };
                self.image
                    .decide_alter_partition(leader, self.epoch(leader), &[item])
                    .checked(&self.image)
            }
            6 => {
                let kind = if op.b & 1 == 0 {
                    ElectionKind::Preferred
                } else {
                    ElectionKind::Unclean
                };
                match self.some_partition(op.a, op.c) {
                    Some(tp) if op.b & 2 != 0 => self
                        .image
                        .decide_elect_leaders(kind, Some(&[tp]))
                        .checked(&self.image),
                    _ => self
                        .image
                        .decide_elect_leaders(kind, None)
                        .checked(&self.image),
                }
            }
            7 => self.image.decide_elect_offline().checked(&self.image),
            8 => {
                let Some(tp) = self.some_partition(op.a, op.b) else {
                    return;
                };
                let target: Vec<BrokerId> = (1..=BROKERS)
                    .filter(|i| op.c & (1 << i) != 0)
                    .map(BrokerId)
                    .collect();
                let target = (op.c & 1 == 0).then_some(target);
                self.image
                    .decide_alter_reassignments(&[(tp, target)])
                    .checked(&self.image)
            }
            9 => self
                .image
                .decide_reassignment_progress()
                .checked(&self.image),
            10 => {
                let name = TOPICS[usize::from(op.a) % TOPICS.len()].to_string();
                self.image
                    .decide_delete_topics(&[name])
                    .checked(&self.image)
            }
            11 => {
                // Some topic being deleted.
                let doomed: Vec<TopicId> = self
                    .image
                    .topics()
                    .filter(|t| t.marked_for_deletion())
                    .map(|t| t.id)
                    .collect();
                let Some(&t) = doomed.get(usize::from(op.a) % doomed.len().max(1)) else {
                    return;
                };
                let step = self.image.decide_deletion_progress(t);
                let sent = step.reply.send_stop_replica.clone();
                let records = step.checked(&self.image);
                self.commit(records);
                let results: Vec<(PartitionId, BrokerId, bool)> = sent
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| op.b & (1 << (i % 8)) != 0)
                    // Most deletes succeed; some fail and are retried.
                    .map(|(i, (tp, b))| {
                        let fails = op.c & (1 << (i % 8)) != 0 && op.seed.is_multiple_of(3);
                        (tp.partition, *b, !fails)
                    })
                    .collect();
                self.image
                    .decide_replica_deletion_results(t, &results)
                    .checked(&self.image)
            }
            12 => self
                .image
                .decide_controlled_shutdown(broker, self.epoch(broker))
                .checked(&self.image),
            13 => self
                .image
                .decide_unregister_broker(broker)
                .checked(&self.image),
            14 => {
                let Some(t) = self.topic(op.a) else { return };
                let count = self.image.topic(t).unwrap().partition_count;
                let item = CreatePartitions {
                    name: self.image.topic(t).unwrap().name.clone(),
                    total: count + u32::from(op.b % 2) + 1,
                    assignments: None,
                };
                self.image
                    .decide_create_partitions(&[item], false, &mut rng)
                    .checked(&self.image)
            }
            15 => self
                .image
                .decide_auto_rebalance(u32::from(op.a % 50))
                .checked(&self.image),
            17 => {
                use keel_metadata::scram::{ScramCredential, ScramMechanism};
                let user = format!("user-{}", op.a % 3);
                let mechanism = ScramMechanism::ALL[usize::from(op.b) % 2];
                if op.c.is_multiple_of(3) {
                    // Refused (RESOURCE_NOT_FOUND) when the user has none.
                    self.image
                        .decide_alter_scram(&[], &[(user, mechanism)])
                        .checked(&self.image)
                } else {
                    // Keys of the right shape (replay checks no more).
                    let credential = ScramCredential {
                        mechanism,
                        salt: op.seed.to_le_bytes().to_vec(),
                        iterations: mechanism.min_iterations() + u32::from(op.c),
                        stored_key: vec![op.c; mechanism.hash_len()],
                        server_key: vec![op.a; mechanism.hash_len()],
                    };
                    self.image
                        .decide_alter_scram(&[(user, credential)], &[])
                        .checked(&self.image)
                }
            }
            _ => {
                let name = TOPICS[usize::from(op.a) % TOPICS.len()].to_string();
                let value = if op.b & 1 == 0 { "true" } else { "false" };
                let ops = vec![ConfigOp::Set(UNCLEAN_LEADER_ELECTION.into(), value.into())];
                self.image
                    .decide_alter_configs(&[(name, ops)], false)
                    .checked(&self.image)
            }
        };
        self.commit(records);
    }

    /// Invariants beyond `validate`: fenced brokers lead nothing, and
    /// topics being deleted have no leaders.
    fn check(&self) {
        self.image.validate().expect("image stays valid");
        for (tp, p) in self.image.partitions() {
            if let Some(l) = p.leader {
                assert!(self.image.is_unfenced(l), "{tp} led by fenced broker {l}");
                let deleting = self.image.topic(tp.topic_id).unwrap().marked_for_deletion();
                assert!(!deleting, "{tp} of a topic being deleted has leader {l}");
            }
        }
    }
}

fn run(ops: &[Op]) -> Sim {
    let mut sim = Sim::new();
    // Start from a few live brokers so most histories do something.
    for id in 1..=3 {
        let req = RegisterBroker {
            broker: BrokerId(id),
            incarnation: IncarnationId(0),
            address: format!("127.0.0.{id}:9092"),
            rack: Some(format!("rack-{}", id % 2)),
            log_dirs: DIRS.iter().map(|d| d.to_string()).collect(),
            previous_epoch: BrokerEpoch(0),
            kafka_address: None,
        };
        sim.commit(sim.image.decide_register_broker(&req, false).records);
        let epoch = sim.epoch(BrokerId(id));
        sim.commit(sim.image.decide_unfence_broker(BrokerId(id), epoch).records);
    }
    sim.check();
    for op in ops {
        sim.step(op);
        sim.check();
    }
    sim
}

fn replay_log(log: &[(u64, RecordBatch)]) -> MetadataImage {
    let mut image = MetadataImage::new();
    for (offset, batch) in log {
        image.replay_batch(batch, *offset).expect("log replays");
    }
    image.validate().expect("replayed image is valid");
    image
}

proptest! {
    #![proptest_config(config(128))]

    /// Any history of decisions keeps the image valid after every entry,
    /// and replaying the collected log from empty reproduces it exactly.
    #[test]
    fn decided_histories_replay_to_the_same_valid_image(ops in prop::collection::vec(op(), 1..100)) {
        let sim = run(&ops);
        let first = replay_log(&sim.log);
        let second = replay_log(&sim.log);
        prop_assert_eq!(first.hash(), second.hash());
        prop_assert_eq!(first.hash(), sim.image.hash());
        prop_assert_eq!(first.access_version(), sim.image.access_version());
    }

    /// After fencing, the broker leads nothing, and every partition it led
    /// that had another live in-sync replica has a leader again.
    #[test]
    fn fencing_hands_leadership_to_a_live_isr_member(ops in prop::collection::vec(op(), 1..40)) {
        let sim = run(&ops);
        let brokers: Vec<BrokerId> = sim.image.brokers().map(|r| r.id).collect();
        for broker in brokers {
            let before = &sim.image;
            let d = before.decide_fence_broker(broker);
            let mut after = before.clone();
            after
                .replay_batch(&RecordBatch::new(d.records), before.offset() + 1)
                .expect("fence records replay");
            after.validate().expect("valid after fence");
            for (tp, p) in before.partitions() {
                let now = after.partition(tp).unwrap();
                prop_assert_ne!(now.leader, Some(broker));
                let deleting = before.topic(tp.topic_id).unwrap().marked_for_deletion();
                let other_live_isr = p.isr.iter().any(|b| {
                    *b != broker && before.can_lead(*b) && before.replica_online(tp, *b)
                });
                if p.leader == Some(broker) && other_live_isr && !deleting {
                    prop_assert!(now.leader.is_some(), "{} left leaderless", tp);
                    prop_assert!(p.isr.contains(&now.leader.unwrap()));
                }
            }
        }
    }
}

// ---- placement -------------------------------------------------------------

#[derive(Clone, Debug)]
struct PlacementCase {
    brokers: Vec<PlacementBroker>,
    partitions: u32,
    rf: u32,
    seed: u64,
}

fn placement_case() -> impl Strategy<Value = PlacementCase> {
    (1u32..=12, 0u32..=4, any::<bool>(), 1u32..=40, any::<u64>()).prop_flat_map(
        |(n, racks, balanced, partitions, seed)| {
            (1..=n, prop::collection::vec(0..racks.max(1), n as usize)).prop_map(
                move |(rf, rack_picks)| {
                    let brokers = (0..n)
                        .map(|i| PlacementBroker {
                            // Ids need not be dense.
                            id: BrokerId(i * 3 + 1),
                            rack: (racks > 0).then(|| {
                                let r = if balanced {
                                    i % racks
                                } else {
                                    rack_picks[i as usize]
                                };
                                format!("rack-{r}")
                            }),
                        })
                        .collect();
                    PlacementCase {
                        brokers,
                        partitions,
                        rf,
                        seed,
                    }
                },
            )
        },
    )
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn placement_spreads_replicas_leaders_and_racks(case in placement_case()) {
        let PlacementCase { brokers, partitions, rf, seed } = case;
        let place = || place_replicas(&brokers, partitions, rf, &mut StdRng::seed_from_u64(seed));
        let parts = place().unwrap();
        prop_assert_eq!(&parts, &place().unwrap(), "same seed, same placement");
        prop_assert_eq!(parts.len(), partitions as usize);

        let rack_of: BTreeMap<BrokerId, Option<String>> =
            brokers.iter().map(|b| (b.id, b.rack.clone())).collect();
        let racks: BTreeSet<&Option<String>> = rack_of.values().collect();
        let mut rack_sizes: BTreeMap<&Option<String>, usize> = BTreeMap::new();
        for r in rack_of.values() {
            *rack_sizes.entry(r).or_insert(0) += 1;
        }
        let balanced_racks = rack_sizes.values().collect::<BTreeSet<_>>().len() == 1;

        let mut leaders: BTreeMap<BrokerId, usize> = rack_of.keys().map(|b| (*b, 0)).collect();
        let mut replicas = leaders.clone();
        for ps in &parts {
            prop_assert_eq!(ps.len(), rf as usize);
            let distinct: BTreeSet<&BrokerId> = ps.iter().collect();
            prop_assert_eq!(distinct.len(), ps.len(), "a broker twice in {:?}", ps);
            let spread: BTreeSet<&Option<String>> = ps.iter().map(|b| &rack_of[b]).collect();
            prop_assert_eq!(spread.len(), (rf as usize).min(racks.len()), "racks of {:?}", ps);
            *leaders.get_mut(&ps[0]).unwrap() += 1;
            for b in ps {
                *replicas.get_mut(b).unwrap() += 1;
            }
        }
        let spread = |m: &BTreeMap<BrokerId, usize>| {
            m.values().max().unwrap() - m.values().min().unwrap()
        };
        prop_assert!(spread(&leaders) <= 1, "leaders {:?}", leaders);
        if balanced_racks {
            prop_assert!(spread(&replicas) <= 1, "replicas {:?}", replicas);
        }
    }
}
