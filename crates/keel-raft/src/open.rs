//! Opening a node's Raft data dir: one sled database holding the log, the
//! vote and the latest snapshot, stamped with the cluster and node it
//! belongs to.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::codec::{self, CodecError};
use crate::error::StorageOpenError;
use crate::log_store::LogStore;
use crate::member::DirectoryId;
use crate::state_machine::StateMachineStore;

/// sled's page cache. sled reads back only the log tail (for followers and
/// on restart) and the snapshot (on start or for a lagging peer); the image
/// lives in memory anyway. sled's 1 GiB default keeps every written page
/// resident up to that size: a 1,000,000-partition image's log (~35 MB)
/// and snapshot (~35 MB) on top of the image. 16 MiB still holds dozens of
/// the largest entries for followers that are a little behind.
pub(crate) const SLED_CACHE_BYTES: u64 = 16 << 20;

/// Key of the identity record in the `meta` tree.
pub(crate) const META_KEY: &[u8] = b"meta";

/// Who a data dir belongs to; written once, checked on every open.
#[derive(Serialize, Deserialize)]
pub(crate) struct StorageMeta {
    /// The cluster this dir's log belongs to.
    pub(crate) cluster_id: String,
    /// The node whose vote and log this is.
    pub(crate) node_id: u64,
    /// Drawn at random when the dir was formatted: what the quorum's
    /// membership knows this dir by (see `member.rs`).
    pub(crate) directory_id: DirectoryId,
}

/// The sled settings of every controller's storage, rooted at `dir`. Also
/// used by `keel bench commit`'s storage ceiling, so it measures the store
/// the controllers run.
///
/// The `unsafe-ack-before-fsync` demonstration build (never shipped)
/// also turns off sled's own flush every 500 ms: otherwise whether that
/// timer happened to fire between an acknowledgement and a power cut
/// decided whether the build lost anything, and the power-cut tests that
/// show they catch it (`tests/power.rs`) passed or failed on the timing.
pub fn sled_config(dir: &Path) -> sled::Config {
    let config = sled::Config::new()
        .path(dir)
        .cache_capacity(SLED_CACHE_BYTES);
    if cfg!(feature = "unsafe-ack-before-fsync") {
        return config.flush_every_ms(None);
    }
    config
}

/// Opens (or creates) the Raft storage under `data_dir/raft`.
///
/// A new dir is stamped with `cluster_id`, `node_id` and a random
/// directory id ([`LogStore::directory_id`]); an existing one
/// must carry the same stamp and decode cleanly, or the open fails with a
/// [`StorageOpenError`] naming the problem. Nothing is ever truncated or
/// reformatted to get past an error. sled itself reads a damaged message
/// written since the dir was last opened (each open records the log's tip
/// in a `snap.*` file) as a write torn by a crash: it opens with the log up
/// to that message and zeroes the rest. Damage behind that tip is refused.
pub fn open_storage(
    data_dir: &Path,
    cluster_id: &str,
    node_id: u64,
) -> Result<(LogStore, StateMachineStore), StorageOpenError> {
    let dir = data_dir.join("raft");
    let corrupt = |what: String| {
        StorageOpenError::Corrupt(format!("data dir {} is corrupt: {what}", dir.display()))
    };
    // A dir with files in it was opened before: it must carry its stamp.
    let existed = std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some());
    // sled may panic on some malformed files; that is corruption, not a bug
    // of this process, so it becomes an error like any other.
    let opened = catch_unwind(AssertUnwindSafe(|| sled_config(&dir).open()));
    let db = match opened {
        Ok(Ok(db)) => db,
        Ok(Err(sled::Error::Io(source))) => {
            return Err(StorageOpenError::Io {
                dir: dir.clone(),
                source,
            });
        }
        Ok(Err(e)) => return Err(corrupt(format!("the database does not open: {e}"))),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".to_string());
            return Err(corrupt(format!("the database does not open: {msg}")));
        }
    };
    // Every further read of the freshly opened files gets the same guard.
    let checked = catch_unwind(AssertUnwindSafe(|| {
        let directory_id = check_identity(&db, &dir, existed, cluster_id, node_id, &corrupt)?;
        let mut log = LogStore::open(&db).map_err(|e| corrupt(format!("log trees: {e}")))?;
        log.directory_id = directory_id;
        log.verify().map_err(&corrupt)?;
        let sm = StateMachineStore::open(&db, seq_seed()).map_err(&corrupt)?;
        Ok((log, sm))
    }));
    match checked {
        Ok(result) => result,
        Err(_) => Err(corrupt("reading the database panicked".to_string())),
    }
}

/// Checks the dir's stamp, or writes it into a brand-new dir; returns the
/// dir's directory id.
fn check_identity(
    db: &sled::Db,
    dir: &Path,
    existed: bool,
    cluster_id: &str,
    node_id: u64,
    corrupt: &dyn Fn(String) -> StorageOpenError,
) -> Result<DirectoryId, StorageOpenError> {
    let meta_tree = db
        .open_tree("meta")
        .map_err(|e| corrupt(format!("meta tree: {e}")))?;
    let stored = meta_tree
        .get(META_KEY)
        .map_err(|e| corrupt(format!("meta record: {e}")))?;
    let Some(bytes) = stored else {
        // A dir without a stamp must be new; anything else lost its stamp
        // and cannot be trusted to belong to this node.
        if existed {
            return Err(corrupt(
                "it holds database files but no identity record (if this node never \
                 finished its first start, remove the dir and start again)"
                    .to_string(),
            ));
        }
        let names = db.tree_names();
        for name in names {
            if name.as_ref() == b"__sled__default" || name.as_ref() == b"meta" {
                continue;
            }
            let tree = db
                .open_tree(&name)
                .map_err(|e| corrupt(format!("tree list: {e}")))?;
            if !tree.is_empty() {
                return Err(corrupt(format!(
                    "it holds Raft data but no identity record (tree {:?})",
                    String::from_utf8_lossy(&name)
                )));
            }
        }
        let meta = StorageMeta {
            cluster_id: cluster_id.to_string(),
            node_id,
            directory_id: DirectoryId::random(),
        };
        let bytes = codec::encode(&meta).map_err(|e| corrupt(e.to_string()))?;
        meta_tree
            .insert(META_KEY, bytes)
            .map_err(|e| corrupt(format!("writing the meta record: {e}")))?;
        db.flush().map_err(|e| match e {
            sled::Error::Io(source) => StorageOpenError::Io {
                dir: dir.to_path_buf(),
                source,
            },
            other => corrupt(format!("flushing the meta record: {other}")),
        })?;
        tracing::info!(
            dir = %dir.display(),
            cluster_id,
            node_id,
            directory_id = %meta.directory_id,
            "created Raft storage"
        );
        return Ok(meta.directory_id);
    };
    let meta: StorageMeta = match codec::decode(&bytes) {
        Ok(meta) => meta,
        Err(CodecError::UnsupportedVersion { found, supported }) => {
            return Err(StorageOpenError::UnsupportedFormat {
                dir: dir.to_path_buf(),
                found,
                supported,
            })
        }
        Err(e) => return Err(corrupt(format!("meta record: {e}"))),
    };
    if meta.cluster_id != cluster_id {
        return Err(StorageOpenError::WrongCluster {
            dir: dir.to_path_buf(),
            found: meta.cluster_id,
            expected: cluster_id.to_string(),
        });
    }
    if meta.node_id != node_id {
        return Err(StorageOpenError::WrongNode {
            dir: dir.to_path_buf(),
            found: meta.node_id,
            expected: node_id,
        });
    }
    Ok(meta.directory_id)
}

/// Seed for snapshot ids: distinct across restarts without being stored.
fn seq_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
