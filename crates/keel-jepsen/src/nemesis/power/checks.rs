//! The power nemesis's two checkers: every cut node came back within the
//! bound, and no broker's epoch went back across a cut.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use super::PowerKind;

/// One node's power cut and what became of it: the restart checker's
/// input.
#[derive(Clone, Debug, Serialize)]
pub struct Restart {
    pub node: String,
    pub kind: PowerKind,
    pub cut_ms: f64,
    /// When it was started again (`None`: it could not be, see `problem`).
    pub restarted_ms: Option<f64>,
    /// How long after its start it answered as a member of the cluster
    /// (`None`: not within the bound).
    pub back_after_ms: Option<f64>,
    /// Why it is not back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The end of its log, when it is not back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
    /// How "back" was judged, when not by following the leader.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A broker's epoch, as the active controller reported it, around one of
/// the broker's power cuts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EpochSample {
    pub broker: u32,
    pub cut_ms: u64,
    /// Just before the cut (`None`: no active controller answered).
    pub before: Option<u64>,
    /// Once it registered again and was unfenced (`None`: not within the
    /// bound; the restart checker reports that).
    pub after: Option<u64>,
}

/// Every power cut was followed by the node coming back within the bound.
pub fn restart_check(restarts: &[Restart], bound: Duration) -> (bool, Value) {
    let not_back: Vec<&Restart> = restarts
        .iter()
        .filter(|r| r.back_after_ms.is_none())
        .collect();
    let slowest = restarts
        .iter()
        .filter_map(|r| r.back_after_ms)
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    (
        not_back.is_empty(),
        json!({
            "power_cuts": restarts.len(),
            "bound_ms": bound.as_millis() as u64,
            "slowest_back_after_ms": slowest.map(f64::round),
            "not_back": not_back,
        }),
    )
}

/// A broker's epochs, in the order they were sampled across its power
/// cuts, never go back.
pub fn epoch_check(samples: &[EpochSample]) -> (bool, Value) {
    let mut by: BTreeMap<u32, Vec<&EpochSample>> = BTreeMap::new();
    for s in samples {
        by.entry(s.broker).or_default().push(s);
    }
    let mut went_back = Vec::new();
    let mut compared = 0usize;
    for (broker, mut cuts) in by {
        cuts.sort_by_key(|s| s.cut_ms);
        // (epoch, when and what it was) in the order observed.
        let seen: Vec<(u64, String)> = cuts
            .iter()
            .flat_map(|s| {
                [
                    s.before
                        .map(|e| (e, format!("before the cut at {} ms", s.cut_ms))),
                    s.after
                        .map(|e| (e, format!("after the cut at {} ms", s.cut_ms))),
                ]
            })
            .flatten()
            .collect();
        for w in seen.windows(2) {
            compared += 1;
            if w[1].0 < w[0].0 {
                went_back.push(json!({
                    "broker": broker,
                    "epoch": w[0].0, "when": w[0].1,
                    "then": w[1].0, "then_when": w[1].1,
                }));
            }
        }
    }
    (
        went_back.is_empty(),
        json!({"samples": samples, "comparisons": compared, "went_back": went_back}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restart(node: &str, back: Option<f64>) -> Restart {
        Restart {
            node: node.into(),
            kind: PowerKind::AllControllers,
            cut_ms: 5_000.0,
            restarted_ms: Some(13_000.0),
            back_after_ms: back,
            problem: back.is_none().then(|| "exited after its restart: exit status: 4".into()),
            log_tail: back
                .is_none()
                .then(|| "ERROR data dir .../raft is corrupt: the log entry at index 812 does not read back".into()),
            note: None,
        }
    }

    #[test]
    fn a_node_that_does_not_come_back_after_a_power_cut_fails_the_restart_check() {
        let bound = Duration::from_secs(30);
        let (ok, detail) = restart_check(
            &[restart("c1", Some(900.0)), restart("c2", Some(1_400.0))],
            bound,
        );
        assert!(ok, "{detail}");
        assert_eq!(detail["slowest_back_after_ms"], 1400.0);

        let (ok, detail) = restart_check(&[restart("c1", Some(900.0)), restart("c3", None)], bound);
        assert!(!ok);
        let not_back = detail["not_back"].as_array().unwrap();
        assert_eq!(not_back.len(), 1);
        assert_eq!(not_back[0]["node"], "c3");
        assert!(not_back[0]["log_tail"]
            .as_str()
            .unwrap()
            .contains("does not read back"));
    }

    fn sample(broker: u32, cut_ms: u64, before: Option<u64>, after: Option<u64>) -> EpochSample {
        EpochSample {
            broker,
            cut_ms,
            before,
            after,
        }
    }

    #[test]
    fn a_broker_epoch_that_goes_back_across_a_power_cut_fails_the_epoch_check() {
        // Higher after each cut, or the same (a registration retried by
        // the same incarnation gets its epoch back); unknowns skipped.
        let fine = [
            sample(1, 5_000, Some(12), Some(40)),
            sample(1, 20_000, Some(40), Some(40)),
            sample(2, 5_000, None, Some(41)),
            sample(2, 20_000, Some(41), None),
        ];
        let (ok, detail) = epoch_check(&fine);
        assert!(ok, "{detail}");
        assert_eq!(detail["comparisons"], 4);

        // Broker 1 comes back with an epoch below the one it had.
        let (ok, detail) = epoch_check(&[sample(1, 5_000, Some(40), Some(12))]);
        assert!(!ok);
        assert_eq!(detail["went_back"][0]["epoch"], 40);
        assert_eq!(detail["went_back"][0]["then"], 12);

        // Or below what it had after an earlier cut (sampled out of order).
        let (ok, detail) = epoch_check(&[
            sample(3, 20_000, Some(30), Some(50)),
            sample(3, 5_000, Some(10), Some(35)),
        ]);
        assert!(!ok);
        assert_eq!(detail["went_back"][0]["when"], "after the cut at 5000 ms");
        assert_eq!(
            detail["went_back"][0]["then_when"],
            "before the cut at 20000 ms"
        );
    }
}
