//! A trait for time instants.

use std::fmt::Debug;
use std::ops::Add;
use std::ops::AddAssign;
use std::ops::Sub;
use std::ops::SubAssign;
use std::panic::RefUnwindSafe;
use std::panic::UnwindSafe;
use std::time::Duration;

use crate::OptionalSend;
use crate::OptionalSync;

/// A measurement of a monotonically non-decreasing clock.
pub trait Instant:
    Add<Duration, Output = Self>
    + AddAssign<Duration>
    + Clone
    + Copy
    + Debug
    + Eq
    + Ord
    + PartialEq
    + PartialOrd
    + RefUnwindSafe
    + OptionalSend
    + Sub<Duration, Output = Self>
    + Sub<Self, Output = Duration>
    + SubAssign<Duration>
    + OptionalSync
    + Unpin
    + UnwindSafe
    + 'static
{
    /// Return the current instant.
    fn now() -> Self;

    /// Return the amount of time since the instant.
    ///
    /// The returned duration is guaranteed to be non-negative.
    fn elapsed(&self) -> Duration {
        let now = Self::now();
        if now > *self {
            now - *self
        } else {
            Duration::from_secs(0)
        }
    }

    /// Patched (Keel): the same moment as a [`std::time::Instant`], for values handed to the
    /// application (`RaftMetrics::last_quorum_acked`).
    ///
    /// The default maps it through the current time of both clocks; a runtime whose instants
    /// are `std`'s (tokio's are) overrides it with the exact value.
    fn to_std(&self) -> std::time::Instant {
        let std_now = std::time::Instant::now();
        let now = Self::now();
        if now >= *self {
            std_now.checked_sub(now - *self).unwrap_or(std_now)
        } else {
            std_now + (*self - now)
        }
    }
}

pub type TokioInstant = tokio::time::Instant;

impl Instant for tokio::time::Instant {
    #[inline]
    fn now() -> Self {
        tokio::time::Instant::now()
    }

    #[inline]
    fn to_std(&self) -> std::time::Instant {
        self.into_std()
    }
}
