//! The simulated log store's crash semantics, as the sled store has them:
//! acknowledged means flushed, a crash keeps what was flushed and at most
//! a prefix of the rest, a vote and a truncation are durable before their
//! calls return, and a handle from before a crash is dead.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use keel_raft::TypeConfig;
use keel_sim::{Crash, FlushPolicy, SimDisk, SimLogStore};
use openraft::storage::RaftLogStorage;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader, Vote};

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 0), index)
}

fn entries(term: u64, indexes: std::ops::RangeInclusive<u64>) -> Vec<Entry<TypeConfig>> {
    indexes
        .map(|index| Entry {
            log_id: log_id(term, index),
            payload: EntryPayload::Blank,
        })
        .collect()
}

/// Appends and counts the acknowledgements (successful ones only).
fn append(store: &SimLogStore, batch: Vec<Entry<TypeConfig>>, acked: &Arc<AtomicUsize>) {
    let acked = acked.clone();
    store
        .append_then(batch, move |result| {
            result.expect("a flush never fails here");
            acked.fetch_add(1, Ordering::SeqCst);
        })
        .expect("a live handle");
}

async fn indexes(store: &mut SimLogStore) -> Vec<u64> {
    let got = store.try_get_log_entries(0..).await.expect("a live handle");
    got.iter().map(|e| e.log_id.index).collect()
}

#[tokio::test]
async fn appends_are_acknowledged_only_by_the_flush_that_covers_them() {
    let disk = SimDisk::new(FlushPolicy::Deferred);
    let mut store = disk.open();
    let acked = Arc::new(AtomicUsize::new(0));

    append(&store, entries(1, 1..=3), &acked);
    append(&store, entries(1, 4..=4), &acked);
    // Readable at once (the page cache), acknowledged not yet.
    assert_eq!(indexes(&mut store).await, vec![1, 2, 3, 4]);
    assert_eq!(acked.load(Ordering::SeqCst), 0);
    assert_eq!(disk.unflushed_writes(), 4);
    assert!(disk.durable_log_ids().is_empty());

    disk.flush();
    assert_eq!(acked.load(Ordering::SeqCst), 2);
    assert_eq!(disk.durable_log_ids().len(), 4);
    assert_eq!(disk.unflushed_writes(), 0);
}

#[tokio::test]
async fn a_crash_loses_exactly_the_unflushed_writes_and_their_acknowledgements() {
    let disk = SimDisk::new(FlushPolicy::Deferred);
    let mut store = disk.open();
    let acked = Arc::new(AtomicUsize::new(0));

    append(&store, entries(1, 1..=3), &acked);
    disk.flush();
    append(&store, entries(1, 4..=6), &acked);
    store.save_committed(Some(log_id(1, 5))).await.unwrap();
    disk.crash(Crash::LoseUnflushed);

    // The append after the flush was never acknowledged, and never will be.
    assert_eq!(acked.load(Ordering::SeqCst), 1);
    disk.flush();
    assert_eq!(acked.load(Ordering::SeqCst), 1);

    let mut reopened = disk.open();
    assert_eq!(indexes(&mut reopened).await, vec![1, 2, 3]);
    let state = reopened.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(1, 3)));
    assert_eq!(reopened.read_committed().await.unwrap(), None);
}

#[tokio::test]
async fn a_torn_crash_keeps_a_prefix_of_the_unflushed_writes_never_a_gap() {
    let disk = SimDisk::new(FlushPolicy::Deferred);
    let store = disk.open();
    let acked = Arc::new(AtomicUsize::new(0));

    append(&store, entries(1, 1..=2), &acked);
    disk.flush();
    append(&store, entries(1, 3..=6), &acked);
    // The append is cut after two of its four entries.
    disk.crash(Crash::Torn { keep: 2 });

    let mut reopened = disk.open();
    assert_eq!(indexes(&mut reopened).await, vec![1, 2, 3, 4]);
    assert_eq!(
        acked.load(Ordering::SeqCst),
        1,
        "the torn append was never acknowledged"
    );
}

#[tokio::test]
async fn a_vote_is_durable_when_save_vote_returns_and_carries_earlier_writes_with_it() {
    let disk = SimDisk::new(FlushPolicy::Deferred);
    let mut store = disk.open();
    let acked = Arc::new(AtomicUsize::new(0));

    append(&store, entries(2, 1..=2), &acked);
    let vote = Vote::new(3, 1);
    store.save_vote(&vote).await.unwrap();
    // The flush the vote needed covered the append before it, in order.
    assert_eq!(disk.durable_vote(), Some(vote));
    assert_eq!(acked.load(Ordering::SeqCst), 1);

    disk.crash(Crash::LoseUnflushed);
    let mut reopened = disk.open();
    assert_eq!(reopened.read_vote().await.unwrap(), Some(vote));
    assert_eq!(indexes(&mut reopened).await, vec![1, 2]);
}

#[tokio::test]
async fn a_truncation_is_durable_when_truncate_returns() {
    let disk = SimDisk::new(FlushPolicy::Deferred);
    let mut store = disk.open();
    let acked = Arc::new(AtomicUsize::new(0));

    append(&store, entries(1, 1..=5), &acked);
    disk.flush();
    store.truncate(log_id(1, 3)).await.unwrap();
    disk.crash(Crash::LoseUnflushed);

    let mut reopened = disk.open();
    assert_eq!(indexes(&mut reopened).await, vec![1, 2]);
}

#[tokio::test]
async fn a_purge_becomes_durable_with_the_next_flush() {
    let disk = SimDisk::new(FlushPolicy::Deferred);
    let mut store = disk.open();
    let acked = Arc::new(AtomicUsize::new(0));

    append(&store, entries(1, 1..=5), &acked);
    disk.flush();
    store.purge(log_id(1, 2)).await.unwrap();
    assert_eq!(indexes(&mut store).await, vec![3, 4, 5]);

    // Lost with a crash before any flush: the entries are back.
    disk.crash(Crash::LoseUnflushed);
    let mut reopened = disk.open();
    assert_eq!(indexes(&mut reopened).await, vec![1, 2, 3, 4, 5]);
    assert_eq!(
        reopened.get_log_state().await.unwrap().last_purged_log_id,
        None
    );

    // Kept once a flush covers it, with the log ending at the marker when
    // everything is purged.
    reopened.purge(log_id(1, 5)).await.unwrap();
    disk.flush();
    disk.crash(Crash::LoseUnflushed);
    let mut again = disk.open();
    assert!(indexes(&mut again).await.is_empty());
    let state = again.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 5)));
    assert_eq!(state.last_log_id, Some(log_id(1, 5)));
}

#[tokio::test]
async fn a_handle_from_before_a_crash_neither_reads_nor_writes() {
    let disk = SimDisk::new(FlushPolicy::Immediate);
    let mut old = disk.open();
    let acked = Arc::new(AtomicUsize::new(0));
    append(&old, entries(1, 1..=1), &acked);
    disk.crash(Crash::LoseUnflushed);

    let err = old
        .append_then(entries(1, 2..=2), |_| {})
        .expect_err("a stale handle writes nothing");
    assert_eq!((err.opened_at, err.now), (0, 1));
    assert!(old.try_get_log_entries(0..).await.is_err());
    assert!(old.save_vote(&Vote::new(9, 9)).await.is_err());
    assert_eq!(disk.durable_vote(), None);

    let mut reopened = disk.open();
    assert_eq!(indexes(&mut reopened).await, vec![1]);
}

#[tokio::test]
async fn with_immediate_flushes_an_append_is_durable_when_it_returns() {
    let disk = SimDisk::new(FlushPolicy::Immediate);
    let store = disk.open();
    let acked = Arc::new(AtomicUsize::new(0));
    append(&store, entries(1, 1..=3), &acked);
    assert_eq!(acked.load(Ordering::SeqCst), 1);
    disk.crash(Crash::LoseUnflushed);
    assert_eq!(disk.durable_log_ids().len(), 3);
    assert_eq!(disk.flushes(), 1);
}
