//! openraft's storage conformance suite against the sled stores.

use keel_raft::{open_storage, LogStore, StateMachineStore, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{AnyError, StorageError, StorageIOError};
use tempfile::TempDir;

/// Opens fresh stores in a new temp dir per suite case; the dir lives as
/// long as the stores.
struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for SledBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<u64>> {
        let dir = TempDir::new().map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
        let (log, sm) = open_storage(dir.path(), "suite", 0)
            .map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn sled_store_passes_openraft_storage_suite() {
    if let Err(e) = Suite::test_all(SledBuilder) {
        panic!("storage suite failed: {e}");
    }
}
