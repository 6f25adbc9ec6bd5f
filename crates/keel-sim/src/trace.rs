//! The record of one simulated run: every message, fault, write and
//! observation, stamped with the simulated time. Two runs of one seed on
//! one build produce the same lines; the digest compares them cheaply.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;

/// A run's trace. Cheap to clone: clones append to the same record.
#[derive(Clone)]
pub struct Trace {
    inner: Arc<Mutex<TraceInner>>,
}

struct TraceInner {
    /// When the run started, on the simulated clock.
    start: Instant,
    /// Every line so far, when kept.
    lines: Option<Vec<String>>,
    /// Running FNV-1a digest of every line.
    digest: u64,
    /// Lines so far.
    count: u64,
}

impl TraceInner {
    fn record(&mut self, what: impl std::fmt::Display) {
        let line = format!("{:>7} {what}", self.start.elapsed().as_millis());
        for b in line.bytes().chain(std::iter::once(b'\n')) {
            self.digest ^= u64::from(b);
            self.digest = self.digest.wrapping_mul(FNV_PRIME);
        }
        self.count += 1;
        if let Some(lines) = self.lines.as_mut() {
            lines.push(line);
        }
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

impl Trace {
    /// A trace starting now; `keep` keeps every line (for printing), else
    /// only the digest and the count are kept.
    pub fn new(keep: bool) -> Self {
        Self {
            inner: Arc::new(Mutex::new(TraceInner {
                start: Instant::now(),
                lines: keep.then(Vec::new),
                digest: FNV_OFFSET,
                count: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, TraceInner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records one event.
    pub fn event(&self, what: impl std::fmt::Display) {
        let mut inner = self.lock();
        inner.record(what);
    }

    /// Records one event unless the record is busy (from a panic hook,
    /// which may run while this thread holds it).
    pub(crate) fn try_event(&self, what: impl std::fmt::Display) {
        if let Ok(mut inner) = self.inner.try_lock() {
            inner.record(what);
        }
    }

    /// The digest of every line so far.
    pub fn digest(&self) -> u64 {
        self.lock().digest
    }

    /// How many lines so far.
    pub fn len(&self) -> u64 {
        self.lock().count
    }

    /// Whether nothing was recorded yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The lines, when kept.
    pub fn lines(&self) -> Option<Vec<String>> {
        self.lock().lines.clone()
    }
}
