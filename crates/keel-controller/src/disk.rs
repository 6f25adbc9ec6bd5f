//! The free space of the data dir's file system, watched once a second.
//! Below the reserve the active controller refuses new admin writes with
//! STORAGE_FULL (broker registrations, heartbeats, ISR changes and reads go
//! on: they are small and keep the cluster alive), and takes them again on
//! its own once space is back. A controller that fills its disk to the
//! last byte cannot write its log, and one whose log write fails stops;
//! refusing early keeps it out of that crash loop.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use keel_metadata::{ApiError, ErrorCode};
use tokio::sync::watch;

/// How often the free space is measured.
const PERIOD: Duration = Duration::from_secs(1);

/// Default reserve: 1 GiB or 5% of the file system, whichever is smaller.
pub fn default_reserve(total_bytes: u64) -> u64 {
    (1u64 << 30).min(total_bytes / 20)
}

/// (free bytes available to this process, total bytes) of the file system
/// holding `path`.
pub fn space(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a valid NUL-terminated path; `st` is written by the
    // call and read only after it succeeded.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let frag = st.f_frsize as u64;
    Ok((
        (st.f_bavail as u64).saturating_mul(frag),
        (st.f_blocks as u64).saturating_mul(frag),
    ))
}

/// The latest measurement, shared with the request path.
#[derive(Debug, Default)]
pub struct DiskWatch {
    free: AtomicU64,
    total: AtomicU64,
    reserve: AtomicU64,
    low: AtomicBool,
    /// The data dir itself is gone (deleted under the running node): its
    /// files live on only as unlinked inodes, so nothing written from now
    /// on survives a restart. The node must stop.
    gone: AtomicBool,
}

impl DiskWatch {
    /// Whether the data dir was found gone (see the field).
    pub fn gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }

    /// (free, total, reserve) bytes as last measured (0s before the first).
    pub fn figures(&self) -> (u64, u64, u64) {
        (
            self.free.load(Ordering::Relaxed),
            self.total.load(Ordering::Relaxed),
            self.reserve.load(Ordering::Relaxed),
        )
    }

    /// The free space as last measured, in the wire form, for the data
    /// dir at `path`.
    pub fn to_pb(&self, path: &Path) -> keel_proto::pb::DiskSpace {
        let (free_bytes, total_bytes, reserve_bytes) = self.figures();
        keel_proto::pb::DiskSpace {
            free_bytes,
            total_bytes,
            reserve_bytes,
            path: path.display().to_string(),
        }
    }

    /// Refuses a new admin write while the free space is below the reserve.
    pub fn check_write(&self) -> Result<(), ApiError> {
        if !self.low.load(Ordering::Relaxed) {
            return Ok(());
        }
        let (free, _, reserve) = self.figures();
        Err(ApiError::new(
            ErrorCode::StorageFull,
            format!(
                "the active controller's data dir has {free} bytes free, below its reserve of \
                 {reserve} bytes (--disk-reserve-bytes): new writes are refused until space is \
                 freed; reads and broker heartbeats go on"
            ),
        ))
    }

    /// Records one measurement.
    pub fn record(&self, free: u64, total: u64, reserve: u64) {
        self.free.store(free, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
        self.reserve.store(reserve, Ordering::Relaxed);
        let low = free < reserve;
        let was = self.low.swap(low, Ordering::Relaxed);
        if low && !was {
            tracing::warn!(
                free,
                reserve,
                "data dir below its free-space reserve; refusing new admin writes"
            );
        } else if was && !low {
            tracing::info!(
                free,
                reserve,
                "data dir above its free-space reserve again; taking writes"
            );
        }
        metrics::gauge!("keel_controller_data_dir_free_bytes").set(free as f64);
        metrics::gauge!("keel_controller_data_dir_total_bytes").set(total as f64);
        metrics::gauge!("keel_controller_data_dir_reserve_bytes").set(reserve as f64);
        metrics::gauge!("keel_controller_data_dir_low").set(if low { 1.0 } else { 0.0 });
    }
}

/// Measures `dir` every second until `shutdown`; `reserve` is the
/// configured reserve, or the default for the file system's size.
pub async fn watch_disk(
    dir: PathBuf,
    reserve: Option<u64>,
    watch: Arc<DiskWatch>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let d = dir.clone();
        let measure = move || {
            let _timed = keel_raft::stall::timed(keel_raft::stall::StorageOp::FreeSpace);
            space(&d)
        };
        match tokio::task::spawn_blocking(measure).await {
            Ok(Ok((free, total))) => watch.record(
                free,
                total,
                reserve.unwrap_or_else(|| default_reserve(total)),
            ),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::error!(dir = %dir.display(), error = %e, "the data dir is gone: nothing written now would survive a restart; stopping");
                watch.gone.store(true, Ordering::Relaxed);
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot measure the data dir's free space")
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_refused_below_the_reserve_and_taken_again_above_it() {
        let w = DiskWatch::default();
        w.record(10 << 20, 100 << 20, 5 << 20);
        assert!(w.check_write().is_ok());
        w.record(4 << 20, 100 << 20, 5 << 20);
        let e = w.check_write().unwrap_err();
        assert_eq!(e.code, ErrorCode::StorageFull);
        assert!(e.message.contains("--disk-reserve-bytes"), "{e}");
        w.record(6 << 20, 100 << 20, 5 << 20);
        assert!(w.check_write().is_ok());
        assert_eq!(default_reserve(1 << 40), 1 << 30);
        assert_eq!(default_reserve(100 << 20), 5 << 20);
        let (free, total) = space(Path::new("/")).unwrap();
        assert!(total > 0 && free <= total);
    }
}
