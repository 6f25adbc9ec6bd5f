//! sled's own snapshot file (`snap.<lsn>`, the index of its log) after a
//! crash at the wrong moment: a half-written `snap.<lsn>.generating` left
//! behind, or a finished one whose rename never became durable, must not
//! stop the store from opening, nor lose a flushed write (vendored sled,
//! PATCHES.md §7).

use std::path::Path;

fn snapshot_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("snap."))
        .collect();
    v.sort();
    v
}

fn write_and_close(dir: &Path, from: u32, to: u32) {
    let db = keel_raft::sled_config(dir).open().unwrap();
    for i in from..to {
        db.insert(i.to_be_bytes(), vec![7u8; 100]).unwrap();
    }
    db.flush().unwrap();
}

fn assert_holds(dir: &Path, to: u32) {
    let db = keel_raft::sled_config(dir).open().expect("the store opens");
    for i in 0..to {
        assert_eq!(
            db.get(i.to_be_bytes()).unwrap().as_deref(),
            Some(&[7u8; 100][..]),
            "key {i} lost"
        );
    }
}

#[test]
fn a_half_written_snapshot_file_is_skipped_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    write_and_close(dir.path(), 0, 500);
    // sled writes its snapshot when it opens a log that grew.
    assert_holds(dir.path(), 500);
    assert!(!snapshot_files(dir.path()).is_empty());
    // The newest name, torn mid-write: garbage with no valid checksum.
    let torn = dir.path().join("snap.FFFFFFFFFFFFFFFF.generating");
    std::fs::write(&torn, vec![0xA5u8; 4096]).unwrap();
    assert_holds(dir.path(), 500);
    write_and_close(dir.path(), 500, 600);
    assert_holds(dir.path(), 600);
    assert!(
        snapshot_files(dir.path())
            .iter()
            .all(|n| !n.ends_with(".generating")),
        "leftovers are removed once a snapshot is written: {:?}",
        snapshot_files(dir.path())
    );
}

#[test]
fn a_snapshot_whose_rename_was_lost_falls_back_to_the_log() {
    let dir = tempfile::tempdir().unwrap();
    write_and_close(dir.path(), 0, 400);
    assert_holds(dir.path(), 400);
    write_and_close(dir.path(), 400, 500);
    let before = snapshot_files(dir.path());
    assert!(!before.is_empty());
    // As if the directory was never synced after the rename: every
    // snapshot is back under its `.generating` name.
    for name in snapshot_files(dir.path()) {
        std::fs::rename(
            dir.path().join(&name),
            dir.path().join(format!("{name}.generating")),
        )
        .unwrap();
    }
    assert_holds(dir.path(), 500);
}

#[test]
fn a_store_reopened_many_times_keeps_one_snapshot_file() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..5u32 {
        write_and_close(dir.path(), round * 100, round * 100 + 100);
    }
    assert_holds(dir.path(), 500);
    let files = snapshot_files(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
}
