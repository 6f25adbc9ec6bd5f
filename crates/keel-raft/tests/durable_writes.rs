//! What the stores make durable is in the files when the call returns: a
//! copy of the data dir taken at that moment, with nothing closed (as a
//! crashed process leaves it), opens with every such write. (That the
//! files also survive power loss is `fdatasync`'s part, in the vendored
//! sled; a test cannot pull the plug.) What a sled flush costs on this
//! disk is measured by `keel bench commit`: its disk probe (4 KiB
//! overwrite + `fdatasync`) and its storage ceiling (the controllers' sled
//! settings, an insert and a flush per entry).

use std::fs;
use std::path::Path;

use keel_metadata::{MetadataRecord, RecordBatch, TopicId, TopicRecord};
use keel_raft::{index_key, open_storage, sled_config};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, Vote,
};

/// Copies every file under `from` to the same place under `to`.
fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            fs::copy(&path, &target).unwrap();
        }
    }
}

fn topic_entry(index: u64) -> Entry<keel_raft::TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(2, 1), index),
        payload: EntryPayload::Normal(RecordBatch::new(vec![MetadataRecord::Topic(TopicRecord {
            topic_id: TopicId(u128::from(index)),
            name: format!("topic-{index}"),
            configs: Default::default(),
        })])),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sled_write_is_in_the_files_once_flush_or_flush_async_returns() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled_config(&dir.path().join("db")).open().unwrap();
    let logs = db.open_tree("logs").unwrap();
    let value = |i: u64| vec![i as u8; 200];
    // The log store's flush (`flush`) and the snapshot store's
    // (`flush_async`), alternately, after every insert.
    for i in 1..=20u64 {
        logs.insert(index_key(i), value(i)).unwrap();
        if i % 2 == 0 {
            db.flush_async().await.unwrap();
        } else {
            db.flush().unwrap();
        }
    }
    let crashed = tempfile::tempdir().unwrap();
    copy_dir(&dir.path().join("db"), &crashed.path().join("db"));
    drop(db);

    let db = sled_config(&crashed.path().join("db")).open().unwrap();
    let logs = db.open_tree("logs").unwrap();
    let stored: Vec<(Vec<u8>, Vec<u8>)> = logs
        .iter()
        .map(|kv| {
            let (k, v) = kv.unwrap();
            (k.to_vec(), v.to_vec())
        })
        .collect();
    let written: Vec<(Vec<u8>, Vec<u8>)> = (1..=20u64)
        .map(|i| (index_key(i).to_vec(), value(i)))
        .collect();
    assert_eq!(stored, written);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vote_appended_entries_and_a_stored_snapshot_open_from_a_crash_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, mut sm) = open_storage(dir.path(), "alpha", 1).unwrap();
    let vote = Vote::new_committed(2, 1);
    log.save_vote(&vote).await.unwrap();
    for index in 1..=30 {
        log.blocking_append([topic_entry(index)]).await.unwrap();
    }
    sm.apply((1..=20).map(topic_entry)).await.unwrap();
    let mut builder = sm.get_snapshot_builder().await;
    builder.build_snapshot().await.unwrap();
    let crashed = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), crashed.path());
    drop((log, sm));

    let (mut log, sm) = open_storage(crashed.path(), "alpha", 1).unwrap();
    assert_eq!(log.read_vote().await.unwrap(), Some(vote));
    assert_eq!(
        log.try_get_log_entries(0..).await.unwrap(),
        (1..=30).map(topic_entry).collect::<Vec<_>>()
    );
    let state = sm.subscribe().borrow().clone();
    assert_eq!(state.last_applied.map(|l| l.index), Some(20));
    assert_eq!(state.image.topic_count(), 20);
    state.image.validate().unwrap();
}
