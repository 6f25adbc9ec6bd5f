//! Admission limits of the admin service: how many requests are served at
//! once, and how many linearizable reads per second. Both refuse (with
//! THROTTLING_QUOTA_EXCEEDED naming the limit) rather than queue: a client
//! that floods a controller learns it at once and backs off, and the
//! controller's memory stays bounded.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use keel_metadata::{ApiError, ErrorCode};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A token bucket: `rate` tokens a second, holding at most `rate` (one
/// second's worth of burst). Pure: the caller passes the time.
#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    tokens: f64,
    at: Option<Instant>,
}

impl TokenBucket {
    pub fn new(rate_per_sec: u32) -> Self {
        let rate = f64::from(rate_per_sec.max(1));
        Self {
            rate,
            tokens: rate,
            at: None,
        }
    }

    /// Takes one token at `now`, if there is one.
    pub fn take(&mut self, now: Instant) -> bool {
        if let Some(then) = self.at {
            let elapsed = now.saturating_duration_since(then).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
        }
        self.at = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The admin service's admission state on one node.
pub struct Throttle {
    slots: Arc<Semaphore>,
    max_requests: usize,
    reads: Mutex<TokenBucket>,
    reads_per_sec: u32,
}

impl Throttle {
    pub fn new(max_requests: usize, reads_per_sec: u32) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max_requests.max(1))),
            max_requests,
            reads: Mutex::new(TokenBucket::new(reads_per_sec)),
            reads_per_sec,
        }
    }

    /// A slot for one admin request (held until dropped), or the refusal.
    pub fn admit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.slots.clone().try_acquire_owned().map_err(|_| {
            metrics::counter!("keel_controller_throttled_total", "limit" => "requests")
                .increment(1);
            ApiError::new(
                ErrorCode::ThrottlingQuotaExceeded,
                format!(
                    "this controller is serving {} admin requests, its limit \
                     (--max-concurrent-admin-requests); retry later",
                    self.max_requests
                ),
            )
        })
    }

    /// One linearizable read, or the refusal.
    pub fn read(&self) -> Result<(), ApiError> {
        let ok = self
            .reads
            .lock()
            .map(|mut b| b.take(Instant::now()))
            .unwrap_or(true);
        if ok {
            return Ok(());
        }
        metrics::counter!("keel_controller_throttled_total", "limit" => "reads").increment(1);
        Err(ApiError::new(
            ErrorCode::ThrottlingQuotaExceeded,
            format!(
                "linearizable reads are limited to {} a second on this controller \
                 (--max-linearizable-reads-per-sec); retry later",
                self.reads_per_sec
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_bucket_allows_its_rate_then_refills_with_time() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(3);
        assert!((0..3).all(|_| b.take(t0)));
        assert!(!b.take(t0));
        // A third of a second brings one token back, not more.
        let t1 = t0 + Duration::from_millis(334);
        assert!(b.take(t1));
        assert!(!b.take(t1));
        // A long pause refills to the burst, not beyond.
        let t2 = t1 + Duration::from_secs(60);
        assert_eq!((0..10).filter(|_| b.take(t2)).count(), 3);
    }

    #[test]
    fn requests_past_the_limit_are_refused_until_one_ends() {
        let t = Throttle::new(2, 100);
        let a = t.admit().unwrap();
        let _b = t.admit().unwrap();
        let e = t.admit().unwrap_err();
        assert_eq!(e.code, ErrorCode::ThrottlingQuotaExceeded);
        assert!(e.message.contains("--max-concurrent-admin-requests"), "{e}");
        drop(a);
        assert!(t.admit().is_ok());
    }
}
