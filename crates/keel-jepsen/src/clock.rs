//! The `clock` nemesis: every node runs under libfaketime (Debian's
//! `faketime`), preloaded with `LD_PRELOAD`, reading its fake time from a
//! file of its own (`FAKETIME_TIMESTAMP_FILE`, read again at most once a
//! second: `FAKETIME_CACHE_DURATION=1`). A fault writes an offset of
//! minutes either way and a rate from 0.5x to 2x into one node's file or
//! every node's (each its own); the heal writes `+0 x1.0` back.
//!
//! Only the wall clock is skewed (`FAKETIME_DONT_FAKE_MONOTONIC=1`): Keel's
//! timeouts and leases run on the monotonic clock, which no real machine
//! steps or slows by minutes; a stepped wall clock (NTP, an operator) is
//! what happens in production, and nothing in Keel may depend on it.
//! libfaketime computes a rate from the process's start, so a new rate
//! also steps the wall clock.

use std::path::{Path, PathBuf};

use rand::Rng;
use serde::Serialize;

/// libfaketime's thread-safe preload library on Debian (amd64).
pub const LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// What a node's clock file says when no fault is on.
pub const TRUE_TIME: &str = "+0 x1.0";

/// One node's clock skew.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Skew {
    /// Seconds added to the wall clock (negative: behind).
    pub offset_s: i64,
    /// How fast the wall clock runs (1.0: real time).
    pub rate: f64,
}

impl Skew {
    /// An offset of 30 s to 10 min either way and a rate of 0.5x-2x.
    pub fn draw(rng: &mut impl Rng) -> Self {
        let offset_s = rng.random_range(30..=600i64) * if rng.random_bool(0.5) { 1 } else { -1 };
        let rate = f64::from(rng.random_range(5..=20u32)) / 10.0;
        Skew { offset_s, rate }
    }

    /// The line libfaketime reads (its advanced format, C locale).
    pub fn line(&self) -> String {
        format!("{:+} x{:.1}", self.offset_s, self.rate)
    }
}

/// Why nodes cannot run under libfaketime here (`None`: they can).
pub fn unavailable_reason() -> Option<String> {
    (!Path::new(LIB).exists()).then(|| {
        format!("libfaketime is missing ({LIB} not found; apt-get install -y faketime, or scripts/test-deps.sh)")
    })
}

/// Where node `name`'s clock file goes.
pub fn file_of(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.faketime"))
}

/// Environment that puts a node under libfaketime reading `file`, added to
/// the node's own (an `LD_PRELOAD` it has, e.g. libfiu's, is kept).
pub fn env(existing: &mut Vec<(String, String)>, file: &Path) {
    match existing.iter_mut().find(|(k, _)| k == "LD_PRELOAD") {
        Some((_, v)) => *v = format!("{v} {LIB}"),
        None => existing.push(("LD_PRELOAD".into(), LIB.into())),
    }
    existing.extend([
        (
            "FAKETIME_TIMESTAMP_FILE".to_string(),
            file.display().to_string(),
        ),
        ("FAKETIME_CACHE_DURATION".into(), "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]);
}

/// Sets a node's clock (`None`: true time).
pub fn set(file: &Path, skew: Option<&Skew>) -> std::io::Result<()> {
    let line = skew.map_or_else(|| TRUE_TIME.to_string(), Skew::line);
    // Written whole and renamed: libfaketime never reads half a line.
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, format!("{line}\n"))?;
    std::fs::rename(&tmp, file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn a_skew_is_minutes_either_way_at_half_to_double_speed() {
        let mut rng = StdRng::seed_from_u64(9);
        let v: Vec<Skew> = (0..200).map(|_| Skew::draw(&mut rng)).collect();
        assert!(v
            .iter()
            .all(|s| (30..=600).contains(&s.offset_s.abs()) && (0.5..=2.0).contains(&s.rate)));
        assert!(v.iter().any(|s| s.offset_s < 0) && v.iter().any(|s| s.offset_s > 0));
        let s = Skew {
            offset_s: -120,
            rate: 0.5,
        };
        assert_eq!(s.line(), "-120 x0.5");
        assert_eq!(
            Skew {
                offset_s: 45,
                rate: 2.0
            }
            .line(),
            "+45 x2.0"
        );
    }

    #[test]
    fn the_preload_joins_libfius_and_the_file_is_set_and_reset() {
        let dir = tempfile::tempdir().unwrap();
        let f = file_of(dir.path(), "c1");
        let mut e = vec![("LD_PRELOAD".to_string(), "/usr/lib/fiu/a.so".to_string())];
        env(&mut e, &f);
        assert_eq!(e[0].1, format!("/usr/lib/fiu/a.so {LIB}"));
        assert!(e.contains(&("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into())));
        set(
            &f,
            Some(&Skew {
                offset_s: 300,
                rate: 1.5,
            }),
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "+300 x1.5\n");
        set(&f, None).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "+0 x1.0\n");
    }
}
