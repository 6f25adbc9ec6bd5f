//! The broker's copy of who may do what (ACL bindings, super users, SCRAM
//! credentials), for its Kafka listener (logins are checked against it and
//! Metadata leaves out the topics a client may not describe) and for
//! DescribeBroker (answered to users only with `Describe` on the cluster).
//! Read from the active controller (DescribeAccess) at start, whenever a
//! heartbeat answer names a newer `access_version`, and (at most once a
//! second) when a login names a user this copy does not know.
//!
//! Nothing here authorizes a write: the active controller authorizes every
//! forwarded admin request again, as the client, inside its decision.
//! [`crate::access_refresh`] reads the copy.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_kafka::Access;
use tokio::sync::Notify;

/// The least time between two reads asked for by unknown logins.
const MISS_PAUSE: Duration = Duration::from_secs(1);

/// The current copy, and what wakes its refresher.
pub(crate) struct AccessCache {
    current: Mutex<Arc<Access>>,
    /// Notified when the copy should be read again.
    pub(crate) wake: Notify,
    /// When an unknown login last asked for a read.
    last_miss: Mutex<Option<Instant>>,
}

impl AccessCache {
    /// A broker that speaks plaintext checks nothing; one over TLS lets
    /// nobody log in and shows no topic until its first read.
    pub(crate) fn new(plaintext: bool) -> Self {
        let first = if plaintext {
            Access::open()
        } else {
            Access::default()
        };
        let cache = Self {
            current: Mutex::new(Arc::new(first)),
            wake: Notify::new(),
            last_miss: Mutex::new(None),
        };
        // The refresher reads once at start.
        cache.wake.notify_one();
        cache
    }

    pub(crate) fn get(&self) -> Arc<Access> {
        lock(&self.current).clone()
    }

    /// A heartbeat answer named `version`: read again if this copy is older.
    pub(crate) fn want(&self, version: u64) {
        if version != self.get().version {
            self.wake.notify_one();
        }
    }

    /// A login failed: perhaps its user was made a moment ago.
    pub(crate) fn missed(&self) {
        let mut last = lock(&self.last_miss);
        if last.is_none_or(|t| t.elapsed() >= MISS_PAUSE) {
            *last = Some(Instant::now());
            self.wake.notify_one();
        }
    }

    /// Replaces the copy; whether it differs from the one it replaces.
    pub(crate) fn set(&self, access: Access) -> bool {
        let mut current = lock(&self.current);
        let changed = **current != access;
        *current = Arc::new(access);
        changed
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
