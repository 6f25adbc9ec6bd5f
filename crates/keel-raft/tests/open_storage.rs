//! A data dir is used only by the node and cluster it was created for, and
//! a damaged one either opens with exactly the writes made before the
//! damage or is refused with an error naming the problem; it never panics.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use keel_metadata::{MetadataRecord, RecordBatch, TopicId, TopicRecord};
use keel_raft::{open_storage, stored_entry_bytes, StorageOpenError};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, Vote,
};

/// Entries [`populate`] appends to the log.
const ENTRIES: u64 = 60;
/// Entries [`populate`] applies before building a snapshot.
const APPLIED: u64 = 50;

fn log_id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn topic_batch(index: u64) -> RecordBatch {
    RecordBatch::new(vec![MetadataRecord::Topic(TopicRecord {
        topic_id: TopicId(u128::from(index)),
        name: format!("topic-{index}"),
        configs: Default::default(),
    })])
}

fn topic_entry(index: u64) -> Entry<keel_raft::TypeConfig> {
    Entry {
        log_id: log_id(index),
        payload: EntryPayload::Normal(topic_batch(index)),
    }
}

/// The vote every populated dir holds.
fn vote() -> Vote<u64> {
    Vote::new_committed(1, 1)
}

/// A runtime like the controller's: the log store flushes through
/// `block_in_place`, which needs worker threads.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Fills a new dir the way a node does, in this order: the vote; entries
/// 1..=60 appended one at a time (each flushed); the committed marker at
/// 60; entries 1..=50 applied and a snapshot of them stored. Then closes it.
fn populate(dir: &Path) {
    runtime().block_on(async {
        let (mut log, mut sm) = open_storage(dir, "alpha", 1).unwrap();
        log.save_vote(&vote()).await.unwrap();
        for index in 1..=ENTRIES {
            log.blocking_append([topic_entry(index)]).await.unwrap();
        }
        log.save_committed(Some(log_id(ENTRIES))).await.unwrap();
        sm.apply((1..=APPLIED).map(topic_entry)).await.unwrap();
        let mut builder = sm.get_snapshot_builder().await;
        builder.build_snapshot().await.unwrap();
    });
}

/// What an open found: the Raft state a restarted node would start from.
#[derive(Debug, PartialEq)]
struct Found {
    vote: Option<Vote<u64>>,
    /// Every log entry, in order.
    log: Vec<Entry<keel_raft::TypeConfig>>,
    committed: Option<LogId<u64>>,
    /// The state machine's last applied entry (from its stored snapshot).
    applied: Option<LogId<u64>>,
    /// Topics of the state machine's image.
    topics: usize,
}

/// Opens `dir` as node 1 of "alpha" and reads back everything it holds.
fn open_and_read(dir: &Path) -> Result<Found, StorageOpenError> {
    let (mut log, sm) = open_storage(dir, "alpha", 1)?;
    let state = sm.subscribe().borrow().clone();
    state.image.validate().unwrap();
    let found = runtime().block_on(async {
        let found = Found {
            vote: log.read_vote().await.unwrap(),
            log: log.try_get_log_entries(0..).await.unwrap(),
            committed: log.read_committed().await.unwrap(),
            applied: state.last_applied,
            topics: state.image.topic_count(),
        };
        // The log's own idea of its end agrees with the entries read.
        let log_state = log.get_log_state().await.unwrap();
        assert_eq!(
            log_state.last_log_id,
            found.log.last().map(|e| e.log_id),
            "log state of {found:?}"
        );
        found
    });
    Ok(found)
}

/// What a populated dir holds when only entries before `index` survived:
/// the vote (written first) and entries 1..index; the committed marker and
/// the state machine's snapshot came after every append, so they are gone.
fn log_before(index: u64) -> Found {
    Found {
        vote: Some(vote()),
        log: (1..index).map(topic_entry).collect(),
        committed: None,
        applied: None,
        topics: 0,
    }
}

/// Where entry `index` of [`populate`] starts in the sled log file: the
/// first copy of its stored bytes is the message that inserted it (later
/// copies are rewrites of the tree node that holds it).
fn entry_offset(dir: &Path, index: u64) -> u64 {
    let stored = stored_entry_bytes(1, 1, index, topic_batch(index)).unwrap();
    let log = fs::read(dir.join("raft").join("db")).unwrap();
    let at = log
        .windows(stored.len())
        .position(|w| w == stored.as_slice())
        .expect("the entry's bytes are in the log file");
    (at + stored.len() / 2) as u64
}

/// Cuts the sled log file in the middle of entry `index`.
fn cut_log_at_entry(dir: &Path, index: u64) {
    let at = entry_offset(dir, index);
    fs::OpenOptions::new()
        .write(true)
        .open(dir.join("raft").join("db"))
        .unwrap()
        .set_len(at)
        .unwrap();
}

/// Inverts 4 bytes of `file` at `at`.
fn flip_bytes(file: &Path, at: u64) {
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap();
    let mut bytes = [0u8; 4];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut bytes).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&bytes.map(|b| !b)).unwrap();
}

/// Asserts `result` is the refusal of a corrupt dir naming `dir`.
fn assert_corrupt(result: Result<Found, StorageOpenError>, dir: &Path, what: &str) {
    match result {
        Err(StorageOpenError::Corrupt(msg)) => assert!(
            msg.starts_with(&format!(
                "data dir {} is corrupt: ",
                dir.join("raft").display()
            )) && msg.contains(what),
            "{msg}"
        ),
        other => panic!("expected a corrupt-dir error ({what}), got {other:?}"),
    }
}

#[test]
fn reopening_with_the_same_identity_restores_vote_log_marker_and_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path());
    let expected = Found {
        vote: Some(vote()),
        log: (1..=ENTRIES).map(topic_entry).collect(),
        committed: Some(log_id(ENTRIES)),
        applied: Some(log_id(APPLIED)),
        topics: APPLIED as usize,
    };
    assert_eq!(open_and_read(dir.path()).unwrap(), expected);
    // And again: an open changes nothing.
    assert_eq!(open_and_read(dir.path()).unwrap(), expected);
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

#[test]
fn overwritten_db_files_fail_to_open_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path());
    for file in db_files(dir.path()) {
        let len = fs::metadata(&file).unwrap().len();
        // Garbage over the whole file: headers, segments and all.
        fs::write(&file, vec![0xA5; len as usize]).unwrap();
    }
    assert_corrupt(
        open_and_read(dir.path()),
        dir.path(),
        "the database does not open",
    );
}

#[test]
fn emptied_db_files_fail_to_open_instead_of_starting_empty() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path());
    for file in db_files(dir.path()) {
        fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .unwrap()
            .set_len(0)
            .unwrap();
    }
    assert_corrupt(
        open_and_read(dir.path()),
        dir.path(),
        "it holds database files but no identity record",
    );
}

// sled cannot tell a log cut short by damage from one cut short by a crash
// in the middle of a write, unless the cut lies behind the tip its last
// recovery recorded (every open writes that tip into a `snap.*` file): a
// tear beyond it is read as the end of the log, behind it as corruption.
// So damage to writes made since the dir was last opened leaves exactly
// the writes before it, and damage to older writes is refused.

#[test]
fn a_log_cut_short_since_the_last_open_keeps_exactly_the_entries_before_the_cut() {
    for index in [1, 30, ENTRIES] {
        let dir = tempfile::tempdir().unwrap();
        populate(dir.path());
        cut_log_at_entry(dir.path(), index);
        assert_eq!(
            open_and_read(dir.path()).unwrap(),
            log_before(index),
            "log cut inside entry {index}"
        );
        // What the open recovered is now the dir's state for good.
        assert_eq!(open_and_read(dir.path()).unwrap(), log_before(index));
    }
}

#[test]
fn a_damaged_entry_written_since_the_last_open_keeps_exactly_the_entries_before_it() {
    for index in [1, 30, ENTRIES] {
        let dir = tempfile::tempdir().unwrap();
        populate(dir.path());
        flip_bytes(
            &dir.path().join("raft").join("db"),
            entry_offset(dir.path(), index),
        );
        assert_eq!(
            open_and_read(dir.path()).unwrap(),
            log_before(index),
            "bytes flipped inside entry {index}"
        );
    }
}

#[test]
fn a_log_cut_short_behind_the_last_open_is_refused_as_corrupt() {
    for index in [1, 30, ENTRIES] {
        let dir = tempfile::tempdir().unwrap();
        populate(dir.path());
        open_and_read(dir.path()).unwrap();
        cut_log_at_entry(dir.path(), index);
        assert_corrupt(
            open_and_read(dir.path()),
            dir.path(),
            "the database does not open",
        );
    }
}

#[test]
fn a_damaged_entry_behind_the_last_open_is_refused_as_corrupt() {
    for index in [1, 30, ENTRIES] {
        let dir = tempfile::tempdir().unwrap();
        populate(dir.path());
        open_and_read(dir.path()).unwrap();
        flip_bytes(
            &dir.path().join("raft").join("db"),
            entry_offset(dir.path(), index),
        );
        assert_corrupt(
            open_and_read(dir.path()),
            dir.path(),
            "the database does not open",
        );
    }
}

#[test]
fn damaged_sled_config_and_snapshot_files_are_refused_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path());
    open_and_read(dir.path()).unwrap();
    let files = db_files(dir.path());
    let named = |prefix: &str| {
        files
            .iter()
            .find(|f| f.file_name().unwrap().to_string_lossy().starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix}* file in {files:?}"))
            .clone()
    };
    for file in [named("conf"), named("snap.")] {
        let copy = tempfile::tempdir().unwrap();
        copy_dir(dir.path(), copy.path());
        let damaged = copy.path().join(file.strip_prefix(dir.path()).unwrap());
        flip_bytes(&damaged, 8);
        assert_corrupt(
            open_and_read(copy.path()),
            copy.path(),
            "the database does not open",
        );
    }
}

/// Copies every file under `from` to the same place under `to`.
fn copy_dir(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            fs::create_dir_all(&target).unwrap();
            copy_dir(&path, &target);
        } else {
            fs::copy(&path, &target).unwrap();
        }
    }
}

#[test]
fn each_data_dir_gets_a_directory_id_when_formatted_and_keeps_it() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let first = {
        let (log, _sm) = open_storage(a.path(), "alpha", 1).unwrap();
        log.directory_id()
    };
    let other = {
        let (log, _sm) = open_storage(b.path(), "alpha", 1).unwrap();
        log.directory_id()
    };
    assert_ne!(first, other, "two formats, two ids");
    populate(a.path());
    let (log, _sm) = open_storage(a.path(), "alpha", 1).unwrap();
    assert_eq!(log.directory_id(), first, "a reopen keeps the id");
}

#[test]
fn a_data_dir_of_the_previous_storage_format_is_refused_never_misread() {
    // A version-1 identity record (cluster, node; no directory id), as the
    // build before directory ids wrote it.
    let dir = tempfile::tempdir().unwrap();
    {
        let db = keel_raft::sled_config(&dir.path().join("raft"))
            .open()
            .unwrap();
        let mut v1 = 1u16.to_le_bytes().to_vec();
        v1.extend(
            bincode::serde::encode_to_vec(("alpha".to_string(), 1u64), bincode::config::standard())
                .unwrap(),
        );
        db.open_tree("meta").unwrap().insert(b"meta", v1).unwrap();
        db.flush().unwrap();
    }
    let err = open_storage(dir.path(), "alpha", 1)
        .err()
        .expect("must refuse");
    assert!(
        matches!(
            err,
            StorageOpenError::UnsupportedFormat {
                found: 1,
                supported: keel_raft::STORAGE_FORMAT_VERSION,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("storage format version 1"),
        "{err}"
    );
}
