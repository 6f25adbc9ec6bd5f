//! The write budget: a node-wide bound on the bytes of admin writes
//! (create and delete topics, create partitions, alter configs) being
//! answered at once, over every connection, `Write` session and unary call.
//!
//! A write holds its share (its encoded size) from admission until its
//! answer is ready. A `Write` session asks for the share of a message before
//! it reads the next one, so while the budget is spent, sessions stop
//! reading and HTTP/2 flow control holds their clients back; memory then
//! grows with the number of sessions (one waiting message each), not with
//! what clients send. A write larger than the whole budget takes all of it.
//! Waiters are served in order, so a large write is not starved by small
//! ones.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Default budget: 256 MiB of encoded writes in flight per node.
pub const DEFAULT_WRITE_BUDGET_BYTES: u64 = 256 << 20;

/// Largest budget accepted; the semaphore counts bytes in a `u32`.
pub const MAX_WRITE_BUDGET_BYTES: u64 = u32::MAX as u64;

/// The node's write budget (cheap to clone; clones share it).
#[derive(Clone, Debug)]
pub struct WriteBudget {
    bytes: Arc<Semaphore>,
    total: u32,
}

/// A write's admitted share, given back when dropped.
#[derive(Debug)]
pub struct Admitted {
    /// `None` only if the semaphore were closed, which it never is: the
    /// write then goes ahead rather than fail.
    _share: Option<OwnedSemaphorePermit>,
}

impl WriteBudget {
    /// A budget of `bytes` (clamped to 1..=`MAX_WRITE_BUDGET_BYTES`).
    pub fn new(bytes: u64) -> Self {
        let total = bytes.clamp(1, MAX_WRITE_BUDGET_BYTES) as u32;
        Self {
            bytes: Arc::new(Semaphore::new(total as usize)),
            total,
        }
    }

    /// Waits until a write of `size` encoded bytes fits, and admits it.
    pub async fn admit(&self, size: usize) -> Admitted {
        let share = u32::try_from(size).unwrap_or(u32::MAX).clamp(1, self.total);
        // The fast path takes no part in tokio's cooperative scheduling
        // budget: an acquire that may yield would split the messages a
        // session reads in one go, and with them the active controller's
        // batches (measured: 25% fewer writes/s at 64 writers).
        if let Ok(share) = self.bytes.clone().try_acquire_many_owned(share) {
            return Admitted {
                _share: Some(share),
            };
        }
        Admitted {
            _share: self.bytes.clone().acquire_many_owned(share).await.ok(),
        }
    }

    /// Bytes not held by any admitted write right now.
    #[cfg(test)]
    fn available(&self) -> usize {
        self.bytes.available_permits()
    }
}

/// Admits the items of `items` one after another: the next item is read
/// only once the previous one was admitted. `size` gives an item's share.
pub fn admit_each<S, T, F>(
    items: S,
    budget: WriteBudget,
    size: F,
) -> impl Stream<Item = (T, Admitted)> + Send
where
    S: Stream<Item = T> + Send,
    T: Send,
    F: Fn(&T) -> usize + Send + Sync + Clone,
{
    items.then(move |item| {
        let budget = budget.clone();
        let size = size.clone();
        async move {
            let admitted = budget.admit(size(&item)).await;
            (item, admitted)
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// Runs `n` writes of `size` bytes through one admitted stream with up
    /// to 64 answered at once (as a `Write` session does) and returns the
    /// largest number of bytes ever held at once.
    async fn peak_bytes(budget: WriteBudget, n: usize, size: usize) -> usize {
        let held = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let answered = admit_each(futures::stream::iter(0..n), budget.clone(), move |_| size)
            .map(|(i, admitted)| {
                let held = held.clone();
                let peak = peak.clone();
                async move {
                    let now = held.fetch_add(size, Ordering::SeqCst) + size;
                    peak.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    held.fetch_sub(size, Ordering::SeqCst);
                    drop(admitted);
                    i
                }
            })
            .buffer_unordered(64)
            .collect::<Vec<_>>()
            .await;
        assert_eq!(answered.len(), n, "every write is answered");
        assert_eq!(
            budget.available(),
            budget.total as usize,
            "every share returned"
        );
        peak.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn writes_in_flight_never_exceed_the_budget() {
        // Room for 4 writes of 100 bytes, though the session allows 64.
        let peak = peak_bytes(WriteBudget::new(400), 200, 100).await;
        assert!(peak <= 400, "peak {peak}");
        assert!(
            peak >= 200,
            "the budget is used, not serialised: peak {peak}"
        );
    }

    #[tokio::test]
    async fn a_write_larger_than_the_budget_takes_all_of_it() {
        // Each write is clamped to the whole budget: one at a time.
        let budget = WriteBudget::new(50);
        let peak = peak_bytes(budget, 20, 100).await;
        assert_eq!(peak, 100);
    }

    #[tokio::test]
    async fn sessions_share_one_budget() {
        let budget = WriteBudget::new(1_000);
        let held = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let mut sessions = Vec::new();
        for _ in 0..8 {
            let (budget, held, peak) = (budget.clone(), held.clone(), peak.clone());
            sessions.push(tokio::spawn(async move {
                admit_each(futures::stream::iter(0..50), budget, |_| 100)
                    .map(|(_, admitted)| {
                        let (held, peak) = (held.clone(), peak.clone());
                        async move {
                            let now = held.fetch_add(100, Ordering::SeqCst) + 100;
                            peak.fetch_max(now, Ordering::SeqCst);
                            tokio::task::yield_now().await;
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            held.fetch_sub(100, Ordering::SeqCst);
                            drop(admitted);
                        }
                    })
                    .buffer_unordered(32)
                    .count()
                    .await
            }));
        }
        for s in sessions {
            assert_eq!(s.await.unwrap(), 50);
        }
        let peak = peak.load(Ordering::SeqCst);
        assert!(peak <= 1_000, "peak {peak} over 8 sessions");
        assert_eq!(budget.available(), 1_000);
    }
}
