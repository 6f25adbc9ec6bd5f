//! How long each fault lasts. Most faults are short: a leader cut off, a
//! process paused or a disk failing for just less or just more than the
//! controllers' lease and election timeout is where the edge cases live
//! (a deposed leader still answering, a follower voting too early), and a
//! fault of 8-10 s never sees them. Lengths are drawn from 50 ms to the
//! upper bound (10 s by default), weighted towards 200-900 ms; the first
//! faults of every run sit just either side of the lease and of the
//! election timeout, so every run has each of those edges at least once
//! (when it has that many fault windows).

use std::collections::BTreeMap;
use std::time::Duration;

use rand::seq::SliceRandom;
use rand::Rng;
use serde::Serialize;

/// The controllers' timings the fault lengths are aimed at (the defaults
/// of `keel controller`, which the run's cluster does not override).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Timing {
    /// How long an active controller acts on one quorum contact
    /// (`keel_raft::timing::lease_ms`).
    pub lease_ms: u64,
    /// A follower waits at least this long without a leader before it
    /// stands for election.
    pub election_timeout_min_ms: u64,
    /// A follower that acknowledged a leader will not vote for another
    /// until this long after (the followers' side of the lease).
    pub election_timeout_max_ms: u64,
}

impl Timing {
    /// The timings of a controller started with default flags (the
    /// quorum's defaults in `keel-raft`).
    pub fn of_controllers() -> Self {
        use keel_raft::timing::{
            lease_ms, ELECTION_TIMEOUT_MAX_MS, ELECTION_TIMEOUT_MIN_MS, HEARTBEAT_MS,
        };
        Timing {
            lease_ms: lease_ms(HEARTBEAT_MS, ELECTION_TIMEOUT_MAX_MS),
            election_timeout_min_ms: ELECTION_TIMEOUT_MIN_MS,
            election_timeout_max_ms: ELECTION_TIMEOUT_MAX_MS,
        }
    }

    /// Which band a fault of `ms` falls in, relative to these timings.
    pub fn band(&self, ms: u64) -> Band {
        if ms < self.lease_ms {
            Band::InsideLease
        } else if ms < self.election_timeout_max_ms {
            Band::LeaseToElectionTimeout
        } else if ms < 2 * self.election_timeout_max_ms {
            Band::JustPastElectionTimeout
        } else {
            Band::Long
        }
    }
}

/// Where a fault's length sits against the lease and election timeout.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Band {
    /// Shorter than the active controller's lease: it may keep acting
    /// through the whole fault.
    InsideLease,
    /// Past the lease, not past the followers' election timeout: the
    /// leader stops acting, nobody may replace it yet.
    LeaseToElectionTimeout,
    /// Up to twice the election timeout: an election may just start or
    /// just finish as the fault ends.
    JustPastElectionTimeout,
    /// Long enough for a failover to complete.
    Long,
}

/// How fault lengths are chosen (`keel jepsen --fault-secs`, `--fault-mode`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FaultLength {
    /// Every fault lasts exactly this long.
    Fixed(Duration),
    /// Drawn from [`SHORTEST`] to this bound, weighted towards 200-900 ms.
    Drawn(Duration),
}

/// The shortest fault.
pub const SHORTEST: Duration = Duration::from_millis(50);

/// How far either side of an edge the edge faults sit.
const EDGE_MS: u64 = 60;

/// Draws fault lengths for one run.
#[derive(Clone, Debug)]
pub struct Lengths {
    length: FaultLength,
    timing: Timing,
    /// Edge lengths not handed out yet (drawn mode), in the order they go.
    edges: Vec<Duration>,
}

impl Lengths {
    /// The lengths of a run; `rng` orders the edge faults.
    pub fn new(length: FaultLength, timing: Timing, rng: &mut impl Rng) -> Self {
        let mut edges = Vec::new();
        if let FaultLength::Drawn(max) = length {
            for edge in [timing.lease_ms, timing.election_timeout_max_ms] {
                for ms in [edge.saturating_sub(EDGE_MS), edge + EDGE_MS] {
                    let d = Duration::from_millis(ms).clamp(SHORTEST, max.max(SHORTEST));
                    edges.push(d);
                }
            }
            edges.shuffle(rng);
        }
        Lengths {
            length,
            timing,
            edges,
        }
    }

    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// The upper bound of every length.
    pub fn max(&self) -> Duration {
        match self.length {
            FaultLength::Fixed(d) | FaultLength::Drawn(d) => d,
        }
    }

    /// The next fault's length.
    pub fn next(&mut self, rng: &mut impl Rng) -> Duration {
        let max = match self.length {
            FaultLength::Fixed(d) => return d,
            FaultLength::Drawn(max) => max.max(SHORTEST),
        };
        if let Some(d) = self.edges.pop() {
            return d;
        }
        let roll = rng.random_range(0..100);
        let ms = if roll < 15 {
            rng.random_range(50..200u64)
        } else if roll < 75 {
            rng.random_range(200..=900u64)
        } else {
            // Log-uniform up to the bound: as many 1-3 s faults as 3-10 s.
            let lo = 900f64.ln();
            let hi = (max.as_millis().max(901) as f64).ln();
            rng.random_range(lo..hi).exp() as u64
        };
        Duration::from_millis(ms).clamp(SHORTEST, max)
    }
}

/// Per run: faults by kind and fault lengths by band (the report's
/// `fault_lengths`).
pub fn summarize(timing: &Timing, faults: &[(String, Option<u64>)]) -> serde_json::Value {
    let mut by_kind: BTreeMap<&str, u64> = BTreeMap::new();
    let mut bands: BTreeMap<Band, u64> = BTreeMap::new();
    for (kind, planned) in faults {
        *by_kind.entry(kind.as_str()).or_default() += 1;
        if let Some(ms) = planned {
            *bands.entry(timing.band(*ms)).or_default() += 1;
        }
    }
    serde_json::json!({
        "timing": timing,
        "faults_by_kind": by_kind,
        "lengths_by_band": bands,
        "short_faults_inside_lease": bands.get(&Band::InsideLease).copied().unwrap_or(0),
        "short_faults_inside_election_timeout": bands.get(&Band::InsideLease).copied().unwrap_or(0)
            + bands.get(&Band::LeaseToElectionTimeout).copied().unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn timing() -> Timing {
        Timing {
            lease_ms: 300,
            election_timeout_min_ms: 300,
            election_timeout_max_ms: 450,
        }
    }

    #[test]
    fn the_controllers_timings_put_the_lease_inside_the_election_timeout() {
        let t = Timing::of_controllers();
        assert!(t.lease_ms < t.election_timeout_max_ms);
        assert!(t.election_timeout_min_ms <= t.election_timeout_max_ms);
    }

    #[test]
    fn every_run_starts_with_faults_just_either_side_of_the_lease_and_the_election_timeout() {
        let mut rng = StdRng::seed_from_u64(7);
        let t = timing();
        let mut l = Lengths::new(FaultLength::Drawn(Duration::from_secs(10)), t, &mut rng);
        let mut first: Vec<u64> = (0..4)
            .map(|_| l.next(&mut rng).as_millis() as u64)
            .collect();
        first.sort();
        assert_eq!(first, vec![240, 360, 390, 510]);
        let bands: Vec<Band> = first.iter().map(|&ms| t.band(ms)).collect();
        assert_eq!(
            bands,
            vec![
                Band::InsideLease,
                Band::LeaseToElectionTimeout,
                Band::LeaseToElectionTimeout,
                Band::JustPastElectionTimeout
            ]
        );
    }

    #[test]
    fn drawn_lengths_stay_within_bounds_and_are_mostly_short() {
        let mut rng = StdRng::seed_from_u64(1);
        let max = Duration::from_secs(10);
        let mut l = Lengths::new(FaultLength::Drawn(max), timing(), &mut rng);
        let v: Vec<Duration> = (0..2000).map(|_| l.next(&mut rng)).collect();
        assert!(v.iter().all(|d| *d >= SHORTEST && *d <= max));
        let short = v
            .iter()
            .filter(|d| (200..=900).contains(&(d.as_millis() as u64)))
            .count();
        assert!(short > v.len() / 2, "{short} of {} in 200-900 ms", v.len());
        assert!(v.iter().any(|d| d.as_millis() < 200));
        assert!(v.iter().any(|d| d.as_secs() >= 3));
    }

    #[test]
    fn a_fixed_length_or_a_low_bound_is_honoured() {
        let mut rng = StdRng::seed_from_u64(2);
        let mut fixed = Lengths::new(
            FaultLength::Fixed(Duration::from_secs(8)),
            timing(),
            &mut rng,
        );
        assert!((0..10).all(|_| fixed.next(&mut rng) == Duration::from_secs(8)));
        let bound = Duration::from_millis(400);
        let mut low = Lengths::new(FaultLength::Drawn(bound), timing(), &mut rng);
        assert!((0..100).all(|_| low.next(&mut rng) <= bound));
    }

    #[test]
    fn the_summary_counts_faults_by_kind_and_band() {
        let f = |k: &str, ms: Option<u64>| (k.to_string(), ms);
        let s = summarize(
            &timing(),
            &[
                f("pause-controller", Some(250)),
                f("pause-controller", Some(400)),
                f("bridge", Some(5000)),
                f("stale-controller-request", None),
            ],
        );
        assert_eq!(s["faults_by_kind"]["pause-controller"], 2);
        assert_eq!(s["lengths_by_band"]["inside_lease"], 1);
        assert_eq!(s["lengths_by_band"]["long"], 1);
        assert_eq!(s["short_faults_inside_lease"], 1);
        assert_eq!(s["short_faults_inside_election_timeout"], 2);
    }
}
