//! The broker's data dir: an exclusive process lock, and the identity that
//! must survive restarts (incarnation id, last broker epoch).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use keel_metadata::{BrokerEpoch, IncarnationId};
use keel_raft::stall::{timed, StorageOp};
use serde::{Deserialize, Serialize};

use crate::BrokerError;

const META_FILE: &str = "broker.json";
const LOCK_FILE: &str = "broker.lock";
/// File name of the leadership history inside the data dir.
pub const HISTORY_FILE: &str = "history.jsonl";

/// What is stored in `broker.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Meta {
    broker_id: u32,
    cluster_id: String,
    /// Text form of the 16-byte incarnation id.
    incarnation_id: String,
    /// Epoch of the last successful registration (0 before the first).
    last_broker_epoch: u64,
}

/// An opened, locked data dir. Dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct DataDir {
    dir: PathBuf,
    meta: Meta,
    /// Held open for the `flock`; the kernel releases it when the process
    /// dies. `None` once released at shutdown.
    lock: Option<File>,
}

impl DataDir {
    /// Creates the dir if needed, takes the lock, and loads (or creates) the
    /// identity. A dir made for another broker id or cluster is refused.
    pub(crate) fn open(dir: &Path, broker_id: u32, cluster_id: &str) -> Result<Self, BrokerError> {
        let _timed = timed(StorageOp::Open);
        std::fs::create_dir_all(dir).map_err(|e| BrokerError::io(dir, e))?;
        let lock = lock(dir)?;
        let meta_path = dir.join(META_FILE);
        let meta = match std::fs::read(&meta_path) {
            Ok(bytes) => {
                let meta: Meta =
                    serde_json::from_slice(&bytes).map_err(|e| BrokerError::CorruptDataDir {
                        dir: dir.to_path_buf(),
                        reason: format!("{META_FILE}: {e}"),
                    })?;
                if parse_incarnation(&meta.incarnation_id).is_none() {
                    return Err(BrokerError::CorruptDataDir {
                        dir: dir.to_path_buf(),
                        reason: format!(
                            "{META_FILE}: bad incarnation id {:?}",
                            meta.incarnation_id
                        ),
                    });
                }
                if meta.broker_id != broker_id {
                    return Err(BrokerError::ForeignDataDir {
                        dir: dir.to_path_buf(),
                        reason: format!("it belongs to broker {}, not {broker_id}", meta.broker_id),
                    });
                }
                if meta.cluster_id != cluster_id {
                    return Err(BrokerError::ForeignDataDir {
                        dir: dir.to_path_buf(),
                        reason: format!(
                            "it belongs to cluster {:?}, not {cluster_id:?}",
                            meta.cluster_id
                        ),
                    });
                }
                meta
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let meta = Meta {
                    broker_id,
                    cluster_id: cluster_id.to_string(),
                    incarnation_id: IncarnationId(rand::random::<u128>()).to_string(),
                    last_broker_epoch: 0,
                };
                write_atomically(dir, META_FILE, &meta)?;
                meta
            }
            Err(e) => return Err(BrokerError::io(meta_path, e)),
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            meta,
            lock: Some(lock),
        })
    }

    pub(crate) fn incarnation_id(&self) -> IncarnationId {
        // Validated in `open`.
        parse_incarnation(&self.meta.incarnation_id).unwrap_or(IncarnationId(0))
    }

    pub(crate) fn last_broker_epoch(&self) -> BrokerEpoch {
        BrokerEpoch(self.meta.last_broker_epoch)
    }

    /// Remembers the epoch of a successful registration, durably, so the
    /// next process start can name it as `previous_broker_epoch`.
    pub(crate) fn set_last_broker_epoch(&mut self, epoch: BrokerEpoch) -> Result<(), BrokerError> {
        if self.meta.last_broker_epoch == epoch.0 {
            return Ok(());
        }
        let mut meta = self.meta.clone();
        meta.last_broker_epoch = epoch.0;
        write_atomically(&self.dir, META_FILE, &meta)?;
        self.meta = meta;
        Ok(())
    }

    /// Lets another process (or a restarted broker) take the dir.
    pub(crate) fn release_lock(&mut self) {
        self.lock = None;
    }

    pub(crate) fn history_path(&self) -> PathBuf {
        self.dir.join(HISTORY_FILE)
    }
}

fn lock(dir: &Path) -> Result<File, BrokerError> {
    let path = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| BrokerError::io(&path, e))?;
    // SAFETY: flock on a descriptor we own; no memory is shared with the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        return Err(if err.kind() == std::io::ErrorKind::WouldBlock {
            BrokerError::Locked(dir.to_path_buf())
        } else {
            BrokerError::io(&path, err)
        });
    }
    // The pid is for operators only; the flock is what excludes.
    let _ = file.set_len(0);
    let _ = writeln!(file, "{}", std::process::id());
    Ok(file)
}

/// Temp file, fsync, rename, fsync the dir: readers see the old or the new
/// content, never a torn one, even across a crash.
fn write_atomically(dir: &Path, name: &str, meta: &Meta) -> Result<(), BrokerError> {
    let _timed = timed(StorageOp::BrokerMeta);
    let tmp = dir.join(format!("{name}.tmp"));
    let target = dir.join(name);
    let bytes = serde_json::to_vec_pretty(meta).map_err(|e| BrokerError::Io {
        path: target.clone(),
        message: e.to_string(),
    })?;
    let mut f = File::create(&tmp).map_err(|e| BrokerError::io(&tmp, e))?;
    f.write_all(&bytes).map_err(|e| BrokerError::io(&tmp, e))?;
    f.sync_all().map_err(|e| BrokerError::io(&tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, &target).map_err(|e| BrokerError::io(&target, e))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| BrokerError::io(dir, e))?;
    Ok(())
}

fn parse_incarnation(s: &str) -> Option<IncarnationId> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 {
        return None;
    }
    u128::from_str_radix(&hex, 16).ok().map(IncarnationId)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_survives_reopen_and_epoch_is_persisted() {
        let tmp = tempfile::tempdir().unwrap();
        let inc = {
            let mut d = DataDir::open(tmp.path(), 1, "c").unwrap();
            assert_eq!(d.last_broker_epoch(), BrokerEpoch(0));
            d.set_last_broker_epoch(BrokerEpoch(42)).unwrap();
            d.incarnation_id()
        };
        let d = DataDir::open(tmp.path(), 1, "c").unwrap();
        assert_eq!(d.incarnation_id(), inc);
        assert_eq!(d.last_broker_epoch(), BrokerEpoch(42));
    }

    #[test]
    fn second_open_while_locked_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let mut held = DataDir::open(tmp.path(), 1, "c").unwrap();
        assert!(matches!(
            DataDir::open(tmp.path(), 1, "c"),
            Err(BrokerError::Locked(_))
        ));
        held.release_lock();
        assert!(DataDir::open(tmp.path(), 1, "c").is_ok());
    }

    #[test]
    fn foreign_broker_id_or_cluster_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        drop(DataDir::open(tmp.path(), 1, "c").unwrap());
        assert!(matches!(
            DataDir::open(tmp.path(), 2, "c"),
            Err(BrokerError::ForeignDataDir { .. })
        ));
        assert!(matches!(
            DataDir::open(tmp.path(), 1, "other"),
            Err(BrokerError::ForeignDataDir { .. })
        ));
    }
}
