//! All or nothing: decisions of any size are laid out into entries
//! (`entries::lay_out`), leadership is lost after any entry, and the next
//! leader aborts an open transaction. Replaying any prefix of that log
//! gives exactly the image in which each decision either fully happened or
//! never did, and a snapshot cut at the last index between transactions
//! replays to the same image.

use std::collections::BTreeMap;

use keel_metadata::decide::{Chain, CreateTopic};
use keel_metadata::entries::lay_out;
use keel_metadata::synthetic::SyntheticCluster;
use keel_metadata::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, RngSeed};
use rand::rngs::StdRng;
use rand::SeedableRng;

/// Three brokers, two small topics, at some offset.
fn base() -> MetadataImage {
    SyntheticCluster {
        brokers: 3,
        topics: 2,
        partitions_per_topic: 4,
    }
    .image()
    .expect("synthetic cluster replays")
    .0
}

/// A decision of one of a few kinds, sized by `n`, made on `image`.
fn decide(
    image: &MetadataImage,
    kind: u8,
    n: u32,
    i: usize,
    rng: &mut StdRng,
) -> Vec<MetadataRecord> {
    match kind % 3 {
        // A topic of n partitions (n + 1 records).
        0 => {
            let req = CreateTopic {
                name: format!("t{i}"),
                partitions: n.max(1),
                replication_factor: 2,
                assignments: None,
                configs: BTreeMap::new(),
            };
            image.decide_create_topics(&[req], false, rng).records
        }
        // n config changes of the first topic.
        1 => {
            let t = image.topics().next().expect("a topic").id;
            (0..n.max(1))
                .map(|k| MetadataRecord::TopicConfig {
                    topic_id: t,
                    key: format!("k{i}-{k}"),
                    value: Some("v".into()),
                })
                .collect()
        }
        // Fence a broker (and move everything it leads), then unfence it.
        _ => {
            let b = BrokerId((i % 3) as u32);
            let mut chain = Chain::new(image);
            chain.decide(|img| img.decide_fence_broker(b));
            let (records, _, dropped) = chain.finish();
            assert!(dropped.is_empty());
            records
        }
    }
}

/// Replays `entries` from `first_index` on, each entry at its own index.
fn replay_log(image: &mut MetadataImage, entries: &[Vec<MetadataRecord>], first_index: u64) {
    for (i, e) in entries.iter().enumerate() {
        image
            .replay_batch(&RecordBatch::new(e.clone()), first_index + i as u64)
            .expect("entry replays");
    }
}

proptest! {
    #![proptest_config(Config {
        cases: 48,
        rng_algorithm: RngAlgorithm::ChaCha,
        rng_seed: RngSeed::Fixed(0x7a11),
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn a_leader_lost_after_any_entry_leaves_each_decision_whole_or_absent(
        shape in prop::collection::vec((0u8..3, 1u32..50_000), 1..5),
        max in 3usize..5_000,
        cut_frac in 0.0f64..=1.0,
        seed in any::<u64>(),
    ) {
        let base = base();
        let mut rng = StdRng::seed_from_u64(seed);
        // Decisions made one after another, each on the previous one's result
        // (as the active controller's batch does); each one's records replay.
        let mut working = base.clone();
        let mut decisions = Vec::new();
        for (i, (kind, n)) in shape.into_iter().enumerate() {
            // Keep cases quick: the sizes still cross many entry limits.
            let n = n % 6_000 + 1;
            let records = decide(&working, kind, n, i, &mut rng);
            for r in &records {
                working.replay(r, base.offset() + 1).expect("decided record replays");
            }
            decisions.push((format!("d{i}"), records));
        }
        let layout = lay_out(decisions.clone(), max);
        prop_assert!(layout.entries.iter().all(|e| !e.is_empty() && e.len() <= max.max(3)));
        let first = base.offset() + 1;
        let cut = ((layout.entries.len() as f64) * cut_frac).round() as usize;

        // The log a new leader ends with: the committed prefix, then an abort
        // if a transaction was left open.
        let mut image = base.clone();
        replay_log(&mut image, &layout.entries[..cut], first);
        let aborted = image.open_transaction().is_some();
        if aborted {
            image
                .replay_batch(&RecordBatch::new(vec![MetadataRecord::AbortTransaction]), first + cut as u64)
                .expect("the abort replays");
        }
        prop_assert!(image.open_transaction().is_none());
        image.validate().expect("valid after the cut");

        // Expected: the decisions whose last entry made it, each replayed at
        // the index of the entry holding it; the others not at all.
        let mut expected = base.clone();
        let mut entry_of = Vec::new();
        for (e, records) in layout.entries.iter().enumerate() {
            for r in records.iter().filter(|r| !r.is_transaction_marker()) {
                entry_of.push((r.clone(), e));
            }
        }
        let mut next = 0;
        for (d, (_, records)) in decisions.iter().enumerate() {
            let mine = &entry_of[next..next + records.len()];
            next += records.len();
            let whole = layout.last_entry[d].is_some_and(|last| last < cut);
            if whole {
                for (r, e) in mine {
                    expected.replay(r, first + *e as u64).expect("replays");
                }
            }
        }
        expected.advance_offset(image.offset());
        prop_assert!(image == expected, "a decision was applied in part (cut after entry {cut} of {})", layout.entries.len());

        // A snapshot at the last index between transactions, then the rest
        // of the log, replays to the same image.
        let mut replayed = base.clone();
        let mut snapshot_at: (MetadataImage, usize) = (base.clone(), 0);
        for (i, e) in layout.entries[..cut].iter().enumerate() {
            replayed
                .replay_batch(&RecordBatch::new(e.clone()), first + i as u64)
                .expect("replays");
            if replayed.open_transaction().is_none() {
                snapshot_at = (replayed.clone(), i + 1);
            }
        }
        let (snap, from) = snapshot_at;
        snap.validate().expect("a snapshot holds no open transaction");
        let mut restored = MetadataImage::decode(&snap.encode()).expect("snapshot decodes");
        replay_log(&mut restored, &layout.entries[from..cut], first + from as u64);
        if aborted {
            restored
                .replay_batch(&RecordBatch::new(vec![MetadataRecord::AbortTransaction]), first + cut as u64)
                .expect("the abort replays");
        }
        prop_assert!(restored == image, "restoring from the snapshot differs");
    }
}

#[test]
fn markers_out_of_place_are_replay_errors_and_held_records_take_their_own_index() {
    let mut image = base();
    let at = image.offset() + 1;
    let err = image
        .replay(&MetadataRecord::EndTransaction, at)
        .expect_err("no open transaction");
    assert_eq!(err.kind, ReplayErrorKind::NoOpenTransaction);
    assert!(image.replay(&MetadataRecord::AbortTransaction, at).is_err());
    let begin = MetadataRecord::BeginTransaction { name: "x".into() };
    image.replay(&begin, at).unwrap();
    assert_eq!(image.open_transaction(), Some(at));
    let err = image.replay(&begin, at + 1).expect_err("nested");
    assert_eq!(err.kind, ReplayErrorKind::NestedTransaction(at));
    // A registration held back takes effect at the end marker, with the
    // index of its own entry as its epoch.
    let reg = MetadataRecord::RegisterBroker(RegisterBrokerRecord {
        broker: BrokerId(7),
        incarnation: IncarnationId(7),
        address: "127.0.0.1:7".into(),
        rack: None,
        log_dirs: vec![],
    });
    image.replay(&reg, at + 1).unwrap();
    assert!(image.broker(BrokerId(7)).is_none(), "held back");
    assert_eq!(image.held_records(), 1);
    image
        .replay(&MetadataRecord::EndTransaction, at + 2)
        .unwrap();
    assert_eq!(
        image.broker(BrokerId(7)).unwrap().epoch,
        BrokerEpoch(at + 1)
    );
    assert_eq!(image.open_transaction(), None);
    // A held record that does not apply fails the end marker.
    image.replay(&begin, at + 3).unwrap();
    image
        .replay(
            &MetadataRecord::FenceBroker {
                broker: BrokerId(99),
                epoch: BrokerEpoch(1),
            },
            at + 3,
        )
        .unwrap();
    let err = image
        .replay(&MetadataRecord::EndTransaction, at + 4)
        .expect_err("the held record fails");
    assert_eq!(err.offset, at + 3, "the error names the record's own entry");
    // An open transaction is not a valid snapshot.
    let mut open = base();
    open.replay(&begin, at).unwrap();
    assert!(open.validate().is_err());
}
