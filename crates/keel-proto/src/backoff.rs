//! Exponential backoff with jitter for clients of the controller's and the
//! brokers' RPCs: many retrying peers spread apart instead of retrying in
//! step.

use std::time::Duration;

use rand::Rng;

/// Delays that double from `first` up to `cap`; each actual delay is
/// between half and all of the nominal one.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(first: Duration, cap: Duration) -> Self {
        Self {
            first,
            cap,
            next: first,
        }
    }

    /// Back to the first delay (after a success).
    pub fn reset(&mut self) {
        self.next = self.first;
    }

    /// The delay before the next attempt.
    pub fn step(&mut self) -> Duration {
        let nominal = self.next;
        self.next = (self.next * 2).min(self.cap);
        let half = nominal / 2;
        half + Duration::from_micros(rand::rng().random_range(0..=half.as_micros() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_with_half_jitter_and_reset() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(50), ms(1_000));
        for nominal in [50, 100, 200, 400, 800, 1_000, 1_000] {
            let d = b.step();
            assert!(
                d >= ms(nominal / 2) && d <= ms(nominal),
                "{d:?} for {nominal} ms"
            );
        }
        b.reset();
        assert!(b.step() <= ms(50));
    }
}
