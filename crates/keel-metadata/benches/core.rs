//! Benchmarks of the pure core: replay of partition changes, leader
//! selectors, replica placement, the record batch codec, snapshot
//! encode/decode and the decision to fence a broker of 100,000 partitions. Under `cargo bench` it first prints two figures as JSON
//! lines: the time to replay 1,000,000 `PartitionChange` records (10,000
//! partitions, batches of 1,000) into an image, and the size, encode and
//! decode (with validation) times of a 1,000,000-partition snapshot; then
//! the pure-core steps of fencing a broker in a 100,000-partition image.

#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a benchmark reads the clock to time the pure core"
)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput};
use keel_metadata::placement::{place_replicas, PlacementBroker};
use keel_metadata::records::RecordBatch;
use keel_metadata::selectors::{controlled_shutdown, offline_partition, preferred_replica};
use keel_metadata::synthetic::SyntheticCluster;
use keel_metadata::{BrokerId, MetadataImage, MetadataRecord, TopicId, TopicPartition};
use rand::rngs::StdRng;
use rand::SeedableRng;

const BROKERS: u32 = 3;
const TOPICS: u32 = 100;
const PARTITIONS_PER_TOPIC: u32 = 100;
const BATCH: usize = 1_000;
const FIGURE_RECORDS: usize = 1_000_000;

/// `topics` topics of 100 partitions on 3 brokers.
fn shape(topics: u32) -> SyntheticCluster {
    SyntheticCluster {
        brokers: BROKERS,
        topics,
        partitions_per_topic: PARTITIONS_PER_TOPIC,
    }
}

/// 3 registered, unfenced brokers and 100 topics of 100 partitions each,
/// replicated on all three brokers (preferred leader rotating). Returns the
/// image and the next free log index.
fn cluster() -> (MetadataImage, u64) {
    cluster_of(TOPICS)
}

/// [`cluster`] with `topics` topics of 100 partitions.
fn cluster_of(topics: u32) -> (MetadataImage, u64) {
    shape(topics).image().expect("setup replays")
}

fn topic_id(t: u32) -> TopicId {
    SyntheticCluster::topic_id(t)
}

/// `n` valid `PartitionChange` records cycling over the 10,000 partitions
/// of [`cluster`].
fn partition_changes(n: usize) -> Vec<MetadataRecord> {
    shape(TOPICS).partition_changes(n)
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

/// Records per Raft entry when the controller splits a large decision
/// (the broker-failure bench's 100,000 moves take 21 entries).
const FENCE_ENTRY_RECORDS: usize = 5_000;

/// Fences broker 1 of a 100,000-partition image (1,000 topics of 100 on 3
/// brokers; it leads a third and is in every ISR) and prints, as one JSON
/// line, the pure-core steps of a broker failure: deciding the fence,
/// encoding its records into entries, decoding them, replaying them (as
/// every controller's state machine does) and planning the brokers'
/// requests.
fn fence_figure() {
    let (image, first) = cluster_of(1_000);
    let start = Instant::now();
    let decision = image.decide_fence_broker(BrokerId(1));
    let decide_seconds = start.elapsed().as_secs_f64();
    let records = decision.records;
    let start = Instant::now();
    let entries: Vec<Vec<u8>> = records
        .chunks(FENCE_ENTRY_RECORDS)
        .map(|c| RecordBatch::new(c.to_vec()).encode())
        .collect();
    let encode_seconds = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let decoded: Vec<RecordBatch> = entries
        .iter()
        .map(|e| RecordBatch::decode(e).expect("decodes"))
        .collect();
    let decode_seconds = start.elapsed().as_secs_f64();
    let mut replayed = image.clone();
    let start = Instant::now();
    for (i, batch) in decoded.iter().enumerate() {
        replayed
            .replay_batch(batch, first + i as u64)
            .expect("the fence replays");
    }
    let replay_seconds = start.elapsed().as_secs_f64();
    assert!(replayed.broker(BrokerId(1)).expect("registered").fenced);
    let start = Instant::now();
    let plan = keel_metadata::planner::plan(&image, &replayed, &records);
    let plan_seconds = start.elapsed().as_secs_f64();
    assert_eq!(plan.updates.changed_partitions.len(), records.len() - 1);
    println!(
        "{{\"fence_partitions\":{},\"records\":{},\"entries\":{},\"bytes\":{},\"decide_seconds\":{decide_seconds:.4},\"encode_seconds\":{encode_seconds:.4},\"decode_seconds\":{decode_seconds:.4},\"replay_seconds\":{replay_seconds:.4},\"plan_seconds\":{plan_seconds:.4}}}",
        image.partition_count(),
        records.len(),
        entries.len(),
        entries.iter().map(Vec::len).sum::<usize>(),
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

/// Deciding the fence of broker 1 in the 100,000-partition image of
/// [`fence_figure`] (it leads a third of the partitions and is in every
/// ISR): one `FenceBroker` and a change for every partition.
fn bench_fence(c: &mut Criterion) {
    let (image, _) = cluster_of(1_000);
    let mut g = c.benchmark_group("fence_100k_partitions");
    g.throughput(Throughput::Elements(image.partition_count() as u64));
    g.bench_function("decide", |b| {
        b.iter(|| black_box(&image).decide_fence_broker(BrokerId(1)))
    });
    g.finish();
}

/// Deciding the controlled shutdown of broker 1 in the same image: every
/// partition it leads gets a new leader, every ISR it is in shrinks.
fn bench_controlled_shutdown(c: &mut Criterion) {
    let (image, _) = cluster_of(1_000);
    let epoch = image.broker(BrokerId(1)).expect("registered").epoch;
    let mut g = c.benchmark_group("controlled_shutdown_100k_partitions");
    g.throughput(Throughput::Elements(image.partition_count() as u64));
    g.bench_function("decide", |b| {
        b.iter(|| black_box(&image).decide_controlled_shutdown(BrokerId(1), epoch))
    });
    g.finish();
}

fn main() {
    // The figure only under `cargo bench`; a test-mode run stays quick.
    if std::env::args().any(|a| a == "--bench") {
        replay_figure();
        snapshot_figure();
        fence_figure();
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
    bench_fence(&mut c);
    bench_controlled_shutdown(&mut c);
    c.final_summary();
}
