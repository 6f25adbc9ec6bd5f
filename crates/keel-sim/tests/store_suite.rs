//! openraft's storage conformance suite against the simulated log store,
//! the same suite the sled store passes (keel-raft's `storage_suite`): the
//! two cannot drift apart in what they promise openraft.

use keel_raft::{open_storage, StateMachineStore, TypeConfig};
use keel_sim::{FlushPolicy, SimDisk, SimLogStore};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{AnyError, StorageError, StorageIOError};
use tempfile::TempDir;

/// A fresh simulated disk per suite case, flushing as the real store does;
/// the state machine is Keel's own, on a temp dir that lives as long as
/// the stores.
struct SimBuilder;

impl StoreBuilder<TypeConfig, SimLogStore, StateMachineStore, TempDir> for SimBuilder {
    async fn build(&self) -> Result<(TempDir, SimLogStore, StateMachineStore), StorageError<u64>> {
        let dir = TempDir::new().map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
        let (_sled_log, sm) = open_storage(dir.path(), "suite", 0)
            .map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
        Ok((dir, SimDisk::new(FlushPolicy::Immediate).open(), sm))
    }
}

#[test]
fn sim_store_passes_openraft_storage_suite() {
    if let Err(e) = Suite::test_all(SimBuilder) {
        panic!("storage suite failed: {e}");
    }
}

/// The simulated store with one promise broken: `truncate` keeps the
/// entries it should remove (as a store whose truncation never reached
/// the disk would after a restart).
#[derive(Clone)]
struct KeepsTruncated(SimLogStore);

impl openraft::RaftLogReader<TypeConfig> for KeepsTruncated {
    async fn try_get_log_entries<
        RB: std::ops::RangeBounds<u64> + Clone + std::fmt::Debug + openraft::OptionalSend,
    >(
        &mut self,
        range: RB,
    ) -> Result<Vec<openraft::Entry<TypeConfig>>, StorageError<u64>> {
        self.0.try_get_log_entries(range).await
    }
}

impl openraft::storage::RaftLogStorage<TypeConfig> for KeepsTruncated {
    type LogReader = Self;

    async fn get_log_state(
        &mut self,
    ) -> Result<openraft::storage::LogState<TypeConfig>, StorageError<u64>> {
        self.0.get_log_state().await
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &openraft::Vote<u64>) -> Result<(), StorageError<u64>> {
        self.0.save_vote(vote).await
    }

    async fn read_vote(&mut self) -> Result<Option<openraft::Vote<u64>>, StorageError<u64>> {
        self.0.read_vote().await
    }

    async fn save_committed(
        &mut self,
        committed: Option<openraft::LogId<u64>>,
    ) -> Result<(), StorageError<u64>> {
        self.0.save_committed(committed).await
    }

    async fn read_committed(&mut self) -> Result<Option<openraft::LogId<u64>>, StorageError<u64>> {
        self.0.read_committed().await
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: openraft::storage::LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = openraft::Entry<TypeConfig>> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        self.0.append(entries, callback).await
    }

    async fn truncate(&mut self, _log_id: openraft::LogId<u64>) -> Result<(), StorageError<u64>> {
        Ok(())
    }

    async fn purge(&mut self, log_id: openraft::LogId<u64>) -> Result<(), StorageError<u64>> {
        self.0.purge(log_id).await
    }
}

struct BrokenBuilder;

impl StoreBuilder<TypeConfig, KeepsTruncated, StateMachineStore, TempDir> for BrokenBuilder {
    async fn build(
        &self,
    ) -> Result<(TempDir, KeepsTruncated, StateMachineStore), StorageError<u64>> {
        let (dir, log, sm) = SimBuilder.build().await?;
        Ok((dir, KeepsTruncated(log), sm))
    }
}

#[test]
fn the_suite_fails_a_store_whose_truncate_keeps_the_entries() {
    // The suite reports a broken promise with an error or an assertion.
    let passed = std::panic::catch_unwind(|| Suite::test_all(BrokenBuilder).is_ok());
    assert!(
        !matches!(passed, Ok(true)),
        "the suite passed a store that never truncates"
    );
}
