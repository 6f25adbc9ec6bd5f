//! `dump` decodes a stopped node's data dir: stamp, vote, markers, snapshot
//! and the entries in a range; it refuses a running node's dir and reports
//! damaged entries instead of failing.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use keel_raft::{default_config, dump, DumpError};
use openraft::SnapshotPolicy;

/// Dumps `dir`, waiting while a just-stopped node in this process still
/// holds the database lock.
async fn dump_when_free(dir: &Path, from: Option<u64>, to: Option<u64>) -> Vec<String> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match dump(dir, from, to) {
            Ok(lines) => return lines,
            Err(DumpError::Locked { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("dump {}: {e}", dir.display()),
        }
    }
}

/// The `index term kind` lines (entries), without the header and records.
fn entry_indexes(lines: &[String]) -> Vec<u64> {
    lines
        .iter()
        .skip_while(|l| l.as_str() != "index term kind")
        .skip(1)
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dump_shows_stamp_snapshot_and_entries_of_a_stopped_node() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let mut config = default_config(CLUSTER);
    config.snapshot_policy = SnapshotPolicy::LogsSinceLast(20);
    let config = Arc::new(config.validate().unwrap());
    let nodes = start_cluster(root.path(), config).await;
    let leader = wait_leader(&nodes).await;
    let last = write_batches(&nodes[leader as usize - 1].raft, 0..40, 1).await;
    assert_converged(&nodes, last).await;
    for n in &nodes {
        n.raft
            .wait(Some(PATIENCE))
            .metrics(|m| m.snapshot.is_some(), "a snapshot was built")
            .await
            .unwrap();
    }

    // A running node's dir is refused with advice.
    let err = dump(&nodes[0].dir, None, None).unwrap_err();
    assert!(matches!(err, DumpError::Locked { .. }), "{err}");
    assert!(err.to_string().contains("stop the node"), "{err}");

    let mut stopped = Vec::new();
    for n in nodes {
        stopped.push(n.stop().await);
    }
    let dir = &stopped[0].1;
    let lines = dump_when_free(dir, None, None).await;
    let text = lines.join("\n");
    println!("{text}");
    assert!(
        text.contains(&format!("stamp: cluster \"{CLUSTER}\" node 1")),
        "{text}"
    );
    assert!(text.contains("vote: term "), "{text}");
    assert!(text.contains("committed: index "), "{text}");
    assert!(text.contains("snapshot: id "), "{text}");
    assert!(
        text.contains("snapshot membership: voters [1, 2, 3]"),
        "{text}"
    );
    assert!(text.contains("snapshot image: offset "), "{text}");
    assert!(text.contains(" hash "), "{text}");
    // The initial membership entry and every topic.
    assert!(text.contains("0 0 membership voters [1, 2, 3]"), "{text}");
    assert!(lines.iter().any(|l| l.contains(" blank")), "{text}");
    for n in 0..40 {
        assert!(
            text.contains(&format!("name: \"topic-{n}\"")),
            "topic-{n}:\n{text}"
        );
    }
    let all = entry_indexes(&lines);
    assert_eq!(all.first(), Some(&0));
    assert_eq!(all.last(), Some(&last));

    // --from/--to keep just the inclusive range.
    let some = dump_when_free(dir, Some(5), Some(9)).await;
    assert_eq!(entry_indexes(&some), (5..=9).collect::<Vec<_>>());
    let records = some.iter().filter(|l| l.starts_with("    Topic(")).count();
    assert_eq!(records, 5, "{some:#?}");
    let tail = dump_when_free(dir, Some(last - 1), None).await;
    assert_eq!(entry_indexes(&tail), vec![last - 1, last]);
    // The header is there even for an empty selection.
    let none = dump_when_free(dir, Some(last + 1), None).await;
    assert!(entry_indexes(&none).is_empty());
    assert!(none.iter().any(|l| l.starts_with("stamp: ")));

    assert!(matches!(
        dump(dir, Some(9), Some(5)),
        Err(DumpError::EmptyRange { from: 9, to: 5 })
    ));
}

#[test]
fn a_damaged_entry_is_reported_by_index_and_the_rest_still_dumps() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    {
        let db = sled::open(dir.join("raft")).unwrap();
        // Garbage in the store's format prefix, a foreign format version,
        // a key that is not an index, and a vote that does not decode.
        let logs = db.open_tree("logs").unwrap();
        logs.insert(7u64.to_be_bytes(), vec![1, 0, 0xff, 0xff, 0xff])
            .unwrap();
        logs.insert(8u64.to_be_bytes(), vec![9, 9]).unwrap();
        logs.insert(b"odd", vec![1, 0]).unwrap();
        db.open_tree("vote")
            .unwrap()
            .insert(b"value", vec![0xde, 0xad])
            .unwrap();
        db.flush().unwrap();
    }
    let lines = dump(dir, None, None).unwrap();
    let text = lines.join("\n");
    println!("{text}");
    assert!(text.contains("stamp: missing"), "{text}");
    assert!(text.contains("vote: undecodable"), "{text}");
    assert!(text.contains("purged: none"), "{text}");
    assert!(text.contains("snapshot: none"), "{text}");
    assert!(text.contains("7 ? undecodable: entry 7"), "{text}");
    assert!(text.contains("8 ? undecodable: entry 8"), "{text}");
    assert!(text.contains("not a log index"), "{text}");
    // Dumping created nothing: no stamp, no trees.
    let db = sled::open(dir.join("raft")).unwrap();
    assert!(!db.tree_names().iter().any(|n| n.as_ref() == b"meta"));
}

#[test]
fn a_missing_data_dir_is_an_error_and_is_not_created() {
    let root = tempfile::tempdir().unwrap();
    let missing = root.path().join("nope");
    let err = dump(&missing, None, None).unwrap_err();
    assert!(matches!(err, DumpError::NoData { .. }), "{err}");
    assert!(!missing.exists());
}
