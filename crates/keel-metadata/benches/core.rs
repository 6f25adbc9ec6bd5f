//! Benchmarks of the pure core: replay of partition changes, leader
//! selectors, replica placement, the record batch codec and snapshot
//! encode/decode. Under `cargo bench` it first prints two figures as JSON
//! lines: the time to replay 1,000,000 `PartitionChange` records (10,000
//! partitions, batches of 1,000) into an image, and the size, encode and
//! decode (with validation) times of a 1,000,000-partition snapshot.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput};
use keel_metadata::placement::{place_replicas, PlacementBroker};
use keel_metadata::records::RecordBatch;
use keel_metadata::selectors::{controlled_shutdown, offline_partition, preferred_replica};
use keel_metadata::{
    BrokerEpoch, BrokerId, IncarnationId, LeaderChange, MetadataImage, MetadataRecord,
    PartitionChangeRecord, PartitionId, PartitionRecord, RegisterBrokerRecord, TopicId,
    TopicPartition, TopicRecord,
};
use rand::rngs::StdRng;
use rand::SeedableRng;

const BROKERS: u32 = 3;
const TOPICS: u32 = 100;
const PARTITIONS_PER_TOPIC: u32 = 100;
const BATCH: usize = 1_000;
const FIGURE_RECORDS: usize = 1_000_000;

fn topic_id(t: u32) -> TopicId {
    TopicId(0x1000 + u128::from(t))
}

/// 3 registered, unfenced brokers and 100 topics of 100 partitions each,
/// replicated on all three brokers (preferred leader rotating). Returns the
/// image and the next free log index.
fn cluster() -> (MetadataImage, u64) {
    cluster_of(TOPICS)
}

/// [`cluster`] with `topics` topics of 100 partitions.
fn cluster_of(topics: u32) -> (MetadataImage, u64) {
    let mut image = MetadataImage::new();
    let mut offset = 0;
    let mut apply = |image: &mut MetadataImage, records: Vec<MetadataRecord>| {
        offset += 1;
        image
            .replay_batch(&RecordBatch::new(records), offset)
            .expect("setup replays");
        offset
    };
    let mut epochs = Vec::new();
    for b in 0..BROKERS {
        let e = apply(
            &mut image,
            vec![MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                broker: BrokerId(b),
                incarnation: IncarnationId(u128::from(b) + 1),
                address: format!("127.0.0.{}:9092", b + 1),
                rack: None,
                log_dirs: vec!["/data/0".into(), "/data/1".into()],
            })],
        );
        epochs.push(BrokerEpoch(e));
    }
    apply(
        &mut image,
        (0..BROKERS)
            .map(|b| MetadataRecord::UnfenceBroker {
                broker: BrokerId(b),
                epoch: epochs[b as usize],
            })
            .collect(),
    );
    for t in 0..topics {
        let mut records = vec![MetadataRecord::Topic(TopicRecord {
            topic_id: topic_id(t),
            name: format!("topic-{t}"),
            configs: BTreeMap::new(),
        })];
        for p in 0..PARTITIONS_PER_TOPIC {
            let replicas = replicas_of(t, p);
            records.push(MetadataRecord::Partition(PartitionRecord {
                topic_id: topic_id(t),
                partition: PartitionId(p),
                isr: replicas.clone(),
                leader: Some(replicas[0]),
                replicas,
            }));
        }
        apply(&mut image, records);
    }
    (image, offset + 1)
}

fn replicas_of(t: u32, p: u32) -> Vec<BrokerId> {
    let first = (t + p) % BROKERS;
    (0..BROKERS)
        .map(|i| BrokerId((first + i) % BROKERS))
        .collect()
}

/// `n` valid `PartitionChange` records cycling over every partition. Each
/// partition goes through rounds of: ISR shrink (drop the last follower),
/// ISR expand (add it back), leader move to the next ISR member.
fn partition_changes(n: usize) -> Vec<MetadataRecord> {
    let partitions = (TOPICS * PARTITIONS_PER_TOPIC) as usize;
    // Per partition: (replicas, index of the current leader in replicas).
    let mut model: Vec<(Vec<BrokerId>, usize)> = (0..TOPICS)
        .flat_map(|t| (0..PARTITIONS_PER_TOPIC).map(move |p| (replicas_of(t, p), 0)))
        .collect();
    (0..n)
        .map(|i| {
            let idx = i % partitions;
            let round = i / partitions;
            let (t, p) = (
                idx as u32 / PARTITIONS_PER_TOPIC,
                idx as u32 % PARTITIONS_PER_TOPIC,
            );
            let (replicas, leader) = &mut model[idx];
            let mut c = PartitionChangeRecord::new(topic_id(t), PartitionId(p));
            match round % 3 {
                0 => {
                    let dropped = replicas[(*leader + 2) % replicas.len()];
                    c.isr = Some(replicas.iter().copied().filter(|b| *b != dropped).collect());
                }
                1 => c.isr = Some(replicas.clone()),
                _ => {
                    *leader = (*leader + 1) % replicas.len();
                    c.leader = LeaderChange::To(replicas[*leader]);
                }
            }
            MetadataRecord::PartitionChange(c)
        })
        .collect()
}

fn batches(records: Vec<MetadataRecord>) -> Vec<RecordBatch> {
    records
        .chunks(BATCH)
        .map(|c| RecordBatch::new(c.to_vec()))
        .collect()
}

/// Replays 1,000,000 partition changes in batches of 1,000 and prints the
/// throughput as one JSON line.
fn replay_figure() {
    let (mut image, first) = cluster();
    let log = batches(partition_changes(FIGURE_RECORDS));
    let start = Instant::now();
    for (i, batch) in log.iter().enumerate() {
        image
            .replay_batch(batch, first + i as u64)
            .expect("generated changes replay");
    }
    let seconds = start.elapsed().as_secs_f64();
    image.validate().expect("image valid after the run");
    let tp = TopicPartition::new(topic_id(0), 0);
    assert_eq!(
        image.partition(&tp).expect("exists").partition_epoch.0 as usize,
        FIGURE_RECORDS / (TOPICS * PARTITIONS_PER_TOPIC) as usize
    );
    println!(
        "{{\"records\":{FIGURE_RECORDS},\"seconds\":{seconds:.3},\"records_per_s\":{:.0},\"partitions\":{},\"batch\":{BATCH}}}",
        FIGURE_RECORDS as f64 / seconds,
        TOPICS * PARTITIONS_PER_TOPIC,
    );
}

/// Builds a 1,000,000-partition image (10,000 topics of 100, RF 3), then
/// encodes and decodes it once, and prints the figures as one JSON line.
fn snapshot_figure() {
    let start = Instant::now();
    let (image, _) = cluster_of(10_000);
    let build_seconds = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let bytes = image.encode();
    let encode_seconds = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let decoded = MetadataImage::decode(&bytes).expect("decodes");
    let decode_seconds = start.elapsed().as_secs_f64();
    assert_eq!(decoded.partition_count(), image.partition_count());
    println!(
        "{{\"snapshot_partitions\":{},\"bytes\":{},\"build_by_replay_seconds\":{build_seconds:.3},\"encode_seconds\":{encode_seconds:.3},\"decode_seconds\":{decode_seconds:.3}}}",
        image.partition_count(),
        bytes.len(),
    );
}

fn bench_replay(c: &mut Criterion) {
    let (image, first) = cluster();
    let batch = batches(partition_changes(BATCH)).remove(0);
    let mut g = c.benchmark_group("replay");
    g.throughput(Throughput::Elements(BATCH as u64));
    // Against an O(1) clone, as the active controller's working copy does:
    // the first writes copy the shared tree paths.
    g.bench_function("partition_change_batch_1000", |b| {
        b.iter_batched(
            || image.clone(),
            |mut img| {
                img.replay_batch(&batch, first).expect("replays");
                img
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn bench_selectors(c: &mut Criterion) {
    let (image, _) = cluster();
    let tp = TopicPartition::new(topic_id(7), 3);
    let p = image.partition(&tp).expect("exists").clone();
    let eligible = |b: BrokerId| image.can_lead(b) && image.replica_online(&tp, b);
    let mut g = c.benchmark_group("selectors");
    g.bench_function("offline_partition", |b| {
        b.iter(|| offline_partition(black_box(&p), eligible, false))
    });
    g.bench_function("preferred_replica", |b| {
        b.iter(|| preferred_replica(black_box(&p), eligible))
    });
    g.bench_function("controlled_shutdown", |b| {
        b.iter(|| controlled_shutdown(black_box(&p), p.replicas[0], eligible))
    });
    g.finish();
}

/// `n` brokers spread over `racks` racks (`None`: no rack declared).
fn placement_brokers(n: u32, racks: Option<u32>) -> Vec<PlacementBroker> {
    (0..n)
        .map(|b| PlacementBroker {
            id: BrokerId(b),
            rack: racks.map(|r| format!("rack-{}", b % r)),
        })
        .collect()
}

fn bench_placement(c: &mut Criterion) {
    let mut g = c.benchmark_group("placement");
    for (partitions, brokers, racks) in
        [(100, 3, None), (1_000, 30, Some(3)), (10_000, 100, Some(5))]
    {
        let list = placement_brokers(brokers, racks);
        let name = format!(
            "{partitions}_partitions_rf3_{brokers}_brokers_{}_racks",
            racks.unwrap_or(0)
        );
        g.throughput(Throughput::Elements(u64::from(partitions)));
        g.bench_function(name, |b| {
            let mut rng = StdRng::seed_from_u64(7);
            b.iter(|| place_replicas(black_box(&list), partitions, 3, &mut rng).expect("placeable"))
        });
    }
    g.finish();
}

fn bench_codec(c: &mut Criterion) {
    let batch = batches(partition_changes(BATCH)).remove(0);
    let bytes = batch.encode();
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("encode_batch_1000", |b| {
        b.iter(|| black_box(&batch).encode())
    });
    g.bench_function("decode_batch_1000", |b| {
        b.iter(|| RecordBatch::decode(black_box(&bytes)).expect("decodes"))
    });
    g.finish();

    let (image, _) = cluster();
    let snapshot = image.encode();
    let mut g = c.benchmark_group("snapshot_10k_partitions");
    g.bench_function("encode", |b| b.iter(|| black_box(&image).encode()));
    g.bench_function("decode", |b| {
        b.iter(|| MetadataImage::decode(black_box(&snapshot)).expect("decodes"))
    });
    g.finish();

    let (image, _) = cluster_of(1_000);
    let snapshot = image.encode();
    let mut g = c.benchmark_group("snapshot_100k_partitions");
    g.throughput(Throughput::Elements(image.partition_count() as u64));
    g.bench_function("encode", |b| b.iter(|| black_box(&image).encode()));
    g.bench_function("decode", |b| {
        b.iter(|| MetadataImage::decode(black_box(&snapshot)).expect("decodes"))
    });
    g.finish();
}

fn main() {
    // The figure only under `cargo bench`; a test-mode run stays quick.
    if std::env::args().any(|a| a == "--bench") {
        replay_figure();
        snapshot_figure();
    }
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .configure_from_args();
    bench_replay(&mut c);
    bench_selectors(&mut c);
    bench_placement(&mut c);
    bench_codec(&mut c);
    c.final_summary();
}
