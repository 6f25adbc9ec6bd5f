//! A data dir is used only by the node and cluster it was created for, and
//! a damaged one is refused with an error instead of a crash.

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use keel_metadata::{MetadataRecord, RecordBatch, TopicId, TopicRecord};
use keel_raft::{open_storage, StorageOpenError};
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftSnapshotBuilder};

fn topic_entry(index: u64) -> Entry<keel_raft::TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(RecordBatch::new(vec![MetadataRecord::Topic(TopicRecord {
            topic_id: TopicId(u128::from(index)),
            name: format!("topic-{index}"),
            configs: Default::default(),
        })])),
    }
}

/// Opens a dir, writes a snapshot and closes it again.
fn populate(dir: &Path) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (_log, mut sm) = open_storage(dir, "alpha", 1).unwrap();
        sm.apply((1..=50).map(topic_entry)).await.unwrap();
        let mut builder = sm.get_snapshot_builder().await;
        builder.build_snapshot().await.unwrap();
    });
}

#[test]
fn reopening_with_the_same_identity_restores_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path());
    let (_log, sm) = open_storage(dir.path(), "alpha", 1).unwrap();
    let state = sm.subscribe().borrow().clone();
    assert_eq!(state.last_applied.map(|l| l.index), Some(50));
    assert_eq!(state.image.topic_count(), 50);
}

/// sled's log file is zero-filled to the end of the segment being written
/// (patched sled: flushes then write into allocated blocks, with no file
/// size to journal). A filled tail must read back exactly like a file
/// that stops after the last message: every reopen, after more writes each
/// time, finds everything written before it.
#[test]
fn the_zero_filled_log_tail_reads_back_after_every_reopen() {
    const SEGMENT: u64 = 512 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut applied = 0;
    for round in 1..=4u64 {
        rt.block_on(async {
            let (_log, mut sm) = open_storage(dir.path(), "alpha", 1).unwrap();
            let state = sm.subscribe().borrow().clone();
            assert_eq!(state.last_applied.map(|l| l.index).unwrap_or(0), applied);
            assert_eq!(state.image.topic_count() as u64, applied);
            let next = applied + 1;
            applied += 40 * round;
            sm.apply((next..=applied).map(topic_entry)).await.unwrap();
            let mut builder = sm.get_snapshot_builder().await;
            builder.build_snapshot().await.unwrap();
        });
        let log_file = dir.path().join("raft").join("db");
        let len = fs::metadata(&log_file).unwrap().len();
        assert!(
            len > 0 && len.is_multiple_of(SEGMENT),
            "round {round}: log file is {len} bytes, not whole segments"
        );
    }
    let (_log, sm) = open_storage(dir.path(), "alpha", 1).unwrap();
    let state = sm.subscribe().borrow().clone();
    assert_eq!(state.last_applied.map(|l| l.index), Some(applied));
    assert_eq!(state.image.topic_count() as u64, applied);
}

#[test]
fn data_dir_of_another_cluster_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path());
    let err = open_storage(dir.path(), "beta", 1)
        .err()
        .expect("must refuse");
    match &err {
        StorageOpenError::WrongCluster {
            found, expected, ..
        } => {
            assert_eq!(found, "alpha");
            assert_eq!(expected, "beta");
        }
        other => panic!("unexpected error: {other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("belongs to cluster 'alpha', not 'beta'"),
        "{msg}"
    );
}

#[test]
fn data_dir_of_another_node_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path());
    let err = open_storage(dir.path(), "alpha", 2)
        .err()
        .expect("must refuse");
    assert!(
        matches!(
            err,
            StorageOpenError::WrongNode {
                found: 1,
                expected: 2,
                ..
            }
        ),
        "{err}"
    );
    // The refusal changed nothing: the rightful node still opens it.
    open_storage(dir.path(), "alpha", 1).unwrap();
}

/// Every regular file of the sled db, biggest first.
fn db_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.join("raft")];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort_by_key(|p| std::cmp::Reverse(fs::metadata(p).unwrap().len()));
    files
}

/// Opening must return (Ok or a typed error), never panic or hang; a
/// damage that hides the data is reported, not papered over.
fn open_after(damage: impl Fn(&Path)) -> Result<(), StorageOpenError> {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path());
    damage(dir.path());
    open_storage(dir.path(), "alpha", 1).map(|(_log, sm)| {
        // If sled recovered a consistent prefix, the state must still be a
        // valid image of some prefix of the log.
        let state = sm.subscribe().borrow().clone();
        state.image.validate().unwrap();
    })
}

#[test]
fn overwritten_db_files_fail_to_open_with_an_error() {
    let result = open_after(|dir| {
        for file in db_files(dir) {
            let len = fs::metadata(&file).unwrap().len();
            let mut f = fs::OpenOptions::new().write(true).open(&file).unwrap();
            // Garbage over the whole file: headers, segments and all.
            f.seek(SeekFrom::Start(0)).unwrap();
            f.write_all(&vec![0xA5; len as usize]).unwrap();
        }
    });
    let err = result.expect_err("a db full of garbage must not open");
    println!("garbage-filled db: {err}");
    assert!(
        matches!(err, StorageOpenError::Corrupt(_)),
        "unexpected error: {err}"
    );
}

#[test]
fn truncated_db_files_fail_or_recover_without_panicking() {
    // sled may legitimately recover a prefix from a torn tail; what matters
    // is no panic, and that an error, if any, is typed.
    let result = open_after(|dir| {
        for file in db_files(dir) {
            let len = fs::metadata(&file).unwrap().len();
            let f = fs::OpenOptions::new().write(true).open(&file).unwrap();
            f.set_len(len / 3).unwrap();
        }
    });
    println!(
        "truncated db: {:?}",
        result.as_ref().map_err(|e| e.to_string())
    );
    if let Err(e) = result {
        assert!(
            matches!(
                e,
                StorageOpenError::Corrupt(_) | StorageOpenError::Io { .. }
            ),
            "unexpected error: {e}"
        );
    }
}

#[test]
fn emptied_db_files_fail_to_open_instead_of_starting_empty() {
    let result = open_after(|dir| {
        for file in db_files(dir) {
            fs::OpenOptions::new()
                .write(true)
                .open(&file)
                .unwrap()
                .set_len(0)
                .unwrap();
        }
    });
    let err = result.expect_err("an emptied db must not open as a new one");
    println!("emptied db: {err}");
    assert!(
        matches!(err, StorageOpenError::Corrupt(_)),
        "unexpected error: {err}"
    );
}

#[test]
fn flipped_bytes_inside_db_files_never_panic_the_open() {
    for fraction in [10u64, 4, 2] {
        let result = open_after(|dir| {
            for file in db_files(dir) {
                let len = fs::metadata(&file).unwrap().len();
                if len < 64 {
                    continue;
                }
                let mut f = fs::OpenOptions::new().write(true).open(&file).unwrap();
                f.seek(SeekFrom::Start(len / fraction)).unwrap();
                f.write_all(&[0xFF; 32]).unwrap();
            }
        });
        println!(
            "32 bytes flipped at 1/{fraction} of each file: {:?}",
            result.as_ref().map_err(|e| e.to_string())
        );
        if let Err(e) = result {
            assert!(
                matches!(
                    e,
                    StorageOpenError::Corrupt(_) | StorageOpenError::Io { .. }
                ),
                "unexpected error: {e}"
            );
        }
    }
}
