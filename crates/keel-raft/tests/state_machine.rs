//! The state machine stops on a record that does not replay and refuses a
//! snapshot that does not decode, without panicking or half-applying.

use std::io::Cursor;

use keel_metadata::{MetadataRecord, RecordBatch, TopicId, TopicRecord};
use keel_raft::{open_storage, TypeConfig};
use openraft::storage::{RaftStateMachine, SnapshotMeta};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftSnapshotBuilder};

fn log_id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn topic_entry(index: u64, topic: u128) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(index),
        payload: EntryPayload::Normal(RecordBatch::new(vec![MetadataRecord::Topic(TopicRecord {
            topic_id: TopicId(topic),
            name: format!("topic-{topic}"),
            configs: Default::default(),
        })])),
    }
}

#[tokio::test]
async fn a_record_that_contradicts_the_image_is_a_storage_error_naming_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, mut sm) = open_storage(dir.path(), "c", 1).unwrap();
    let state = sm.subscribe();
    sm.apply([topic_entry(1, 7)]).await.unwrap();
    let before = state.borrow().clone();

    // Index 3 creates topic 7 again: fatal, and entry 2 of the same chunk
    // is not published either.
    let err = sm
        .apply([topic_entry(2, 8), topic_entry(3, 7)])
        .await
        .expect_err("duplicate topic must stop the node");
    let msg = err.to_string();
    assert!(msg.contains('3'), "{msg}");
    let after = state.borrow().clone();
    assert_eq!(after.last_applied, before.last_applied);
    assert_eq!(after.image.hash(), before.image.hash());
}

#[tokio::test]
async fn a_snapshot_that_does_not_decode_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, mut sm) = open_storage(dir.path(), "c", 1).unwrap();
    let meta = SnapshotMeta {
        last_log_id: Some(log_id(10)),
        last_membership: Default::default(),
        snapshot_id: "bogus".into(),
    };
    for bytes in [
        vec![],
        vec![1, 0],
        vec![1, 0, 0xff, 0xff, 0xff],
        vec![9; 64],
    ] {
        let res = sm
            .install_snapshot(&meta, Box::new(Cursor::new(bytes)))
            .await;
        assert!(res.is_err());
    }
    assert!(sm.get_current_snapshot().await.unwrap().is_none());
    assert_eq!(sm.subscribe().borrow().last_applied, None);
}

#[tokio::test]
async fn a_snapshot_whose_data_disagrees_with_its_meta_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, mut sm) = open_storage(dir.path(), "c", 1).unwrap();
    sm.apply((1..=5).map(|i| topic_entry(i, u128::from(i))))
        .await
        .unwrap();
    let snapshot = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();

    let other = tempfile::tempdir().unwrap();
    let (_log2, mut sm2) = open_storage(other.path(), "c", 2).unwrap();
    let mut lying = snapshot.meta.clone();
    lying.last_log_id = Some(log_id(9));
    let res = sm2
        .install_snapshot(
            &lying,
            Box::new(Cursor::new(snapshot.snapshot.get_ref().clone())),
        )
        .await;
    assert!(res.is_err());

    // The honest one installs and carries the same image.
    sm2.install_snapshot(&snapshot.meta, snapshot.snapshot.clone())
        .await
        .unwrap();
    assert_eq!(
        sm2.subscribe().borrow().image.hash(),
        sm.subscribe().borrow().image.hash()
    );
    let stored = sm2.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(stored.meta, snapshot.meta);
}
