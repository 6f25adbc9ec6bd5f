//! One system at one writer level in one trial: the level, with the CPU
//! and storage accounting around it (from /proc, through the kit's
//! probes), and the summary of a system's trials at a level.

use std::time::Instant;

use keel_testkit::probe;
use serde_json::{json, Value};

use super::systems::System;
use super::Kind;
use crate::load::Level;
use crate::stats::{median, percentile, r1, r3};

/// One system at one writer level in one trial.
pub struct Trial {
    pub trial: usize,
    /// Address the writers talked to.
    pub leader: String,
    /// The level, or why it failed.
    pub result: Result<Level, String>,
    /// Wall time of the whole level call (connects and closes included).
    pub wall_secs: f64,
    /// CPU seconds of the system's server processes during the call.
    pub server_cpu_secs: Option<f64>,
    /// CPU seconds of this process during the call.
    pub client_cpu_secs: Option<f64>,
    /// CPU seconds of the whole machine (all processes) during the call.
    pub machine_cpu_secs: Option<f64>,
    /// Bytes the system's server processes wrote to storage during the call.
    pub server_write_bytes: Option<u64>,
    /// CPU seconds of each other (idle) system's servers during the call.
    pub idle_cpu_secs: Vec<(&'static str, f64)>,
    /// 1-minute load average when the level started.
    pub load_avg_1m: Option<f64>,
}

impl Trial {
    fn ops_per_s(&self) -> Option<f64> {
        self.result.as_ref().ok().map(|l| l.ops as f64 / l.secs)
    }

    /// CPU of everything but this system's servers and the load generator
    /// (the idle systems, other work on the machine): noise.
    fn other_cpu_secs(&self) -> Option<f64> {
        let (m, s, c) = (
            self.machine_cpu_secs?,
            self.server_cpu_secs?,
            self.client_cpu_secs?,
        );
        Some((m - s - c).max(0.0))
    }

    /// CPU of processes outside this comparison (other work on the
    /// machine): [`Trial::other_cpu_secs`] less the idle systems.
    fn outside_cpu_secs(&self) -> Option<f64> {
        let idle: f64 = self.idle_cpu_secs.iter().map(|(_, c)| c).sum();
        Some((self.other_cpu_secs()? - idle).max(0.0))
    }

    fn ops(&self) -> u64 {
        self.result.as_ref().map(|l| l.ops).unwrap_or(0)
    }

    pub fn json(&self) -> Value {
        let cpu_pct = |c: Option<f64>| c.map(|c| r1(100.0 * c / self.wall_secs.max(1e-9)));
        let cpu_us_per_op = |c: Option<f64>| {
            c.filter(|_| self.ops() > 0)
                .map(|c| r1(c * 1e6 / self.ops() as f64))
        };
        let mut j = json!({
            "trial": self.trial,
            "leader": self.leader,
            "wall_secs": r3(self.wall_secs),
            "server_cpu_secs": self.server_cpu_secs.map(r3),
            "server_cpu_pct": cpu_pct(self.server_cpu_secs),
            "server_cpu_us_per_op": cpu_us_per_op(self.server_cpu_secs),
            "client_cpu_secs": self.client_cpu_secs.map(r3),
            "client_cpu_pct": cpu_pct(self.client_cpu_secs),
            "client_cpu_us_per_op": cpu_us_per_op(self.client_cpu_secs),
            "server_write_bytes": self.server_write_bytes,
            "server_write_bytes_per_op": self
                .server_write_bytes
                .filter(|_| self.ops() > 0)
                .map(|b| r1(b as f64 / self.ops() as f64)),
            "machine_cpu_pct": cpu_pct(self.machine_cpu_secs),
            "other_cpu_pct": cpu_pct(self.other_cpu_secs()),
            "idle_systems_cpu_pct": self
                .idle_cpu_secs
                .iter()
                .map(|(n, c)| (n.to_string(), json!(cpu_pct(Some(*c)))))
                .collect::<serde_json::Map<_, _>>(),
            "outside_cpu_pct": cpu_pct(self.outside_cpu_secs()),
            "load_avg_1m": self.load_avg_1m,
        });
        match &self.result {
            Ok(l) => {
                j["ops"] = json!(l.ops);
                j["errors"] = json!(l.errors);
                j["secs"] = json!(r3(l.secs));
                j["ops_per_s"] = json!(r1(l.ops as f64 / l.secs));
                j["p50_ms"] = json!(r3(percentile(&l.lat_ms, 50.0)));
                j["p99_ms"] = json!(r3(percentile(&l.lat_ms, 99.0)));
                j["first_error"] = json!(l.first_error);
            }
            Err(e) => j["error"] = json!(e),
        }
        j
    }
}

/// Median ops/s, pooled latency percentiles and median CPU of one system
/// at one level.
pub fn summarize(trials: &[Trial]) -> Value {
    let ok: Vec<&Trial> = trials.iter().filter(|t| t.result.is_ok()).collect();
    if ok.is_empty() {
        return json!({ "ok_trials": 0, "ops_per_s": null, "p50_ms": null, "p99_ms": null });
    }
    let ops_s: Vec<f64> = ok.iter().filter_map(|t| t.ops_per_s()).collect();
    let mut pooled = Vec::new();
    let mut errors = 0;
    for l in ok.iter().filter_map(|t| t.result.as_ref().ok()) {
        pooled.extend_from_slice(&l.lat_ms);
        errors += l.errors;
    }
    let ok_json: Vec<Value> = ok.iter().map(|t| t.json()).collect();
    let med = |f: &dyn Fn(&Value) -> Option<f64>| {
        let v: Vec<f64> = ok_json.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| r1(median(&v)))
    };
    json!({
        "ok_trials": ok.len(),
        "ops_per_s": r1(median(&ops_s)),
        "ops_per_s_min": r1(ops_s.iter().copied().fold(f64::INFINITY, f64::min)),
        "ops_per_s_max": r1(ops_s.iter().copied().fold(0.0, f64::max)),
        "p50_ms": r3(percentile(&pooled, 50.0)),
        "p99_ms": r3(percentile(&pooled, 99.0)),
        "errors": errors,
        "server_cpu_pct": med(&|j| j["server_cpu_pct"].as_f64()),
        "server_cpu_us_per_op": med(&|j| j["server_cpu_us_per_op"].as_f64()),
        "client_cpu_pct": med(&|j| j["client_cpu_pct"].as_f64()),
        "client_cpu_us_per_op": med(&|j| j["client_cpu_us_per_op"].as_f64()),
        "server_write_bytes_per_op": med(&|j| j["server_write_bytes_per_op"].as_f64()),
        "other_cpu_pct": med(&|j| j["other_cpu_pct"].as_f64()),
        "outside_cpu_pct": med(&|j| j["outside_cpu_pct"].as_f64()),
    })
}

/// Counters read at one instant, around every level.
struct Sample {
    /// CPU seconds of each system's servers, in [`Kind::ALL`] order.
    server_cpu_secs: [Option<f64>; Kind::ALL.len()],
    /// Storage write bytes of each system's servers, same order.
    server_write_bytes: [Option<u64>; Kind::ALL.len()],
    /// CPU ticks of this process.
    client_ticks: Option<u64>,
    /// Busy ticks of the machine.
    machine_ticks: Option<u64>,
}

impl Sample {
    /// CPU seconds system `s`'s servers used from `self` to `later`.
    fn server_cpu(&self, s: Kind, later: &Sample) -> Option<f64> {
        let i = s.index();
        Some((later.server_cpu_secs[i]? - self.server_cpu_secs[i]?).max(0.0))
    }

    /// Bytes system `s`'s servers wrote from `self` to `later`.
    fn server_write_bytes(&self, s: Kind, later: &Sample) -> Option<u64> {
        let i = s.index();
        Some(later.server_write_bytes[i]?.saturating_sub(self.server_write_bytes[i]?))
    }
}

/// Seconds between two tick counts.
fn ticks_secs(before: Option<u64>, after: Option<u64>) -> Option<f64> {
    Some(after?.saturating_sub(before?) as f64 / probe::ticks_per_second())
}

impl Sample {
    /// Every counter a trial reports, read at one instant.
    fn read(systems: &[Box<dyn System>]) -> Sample {
        let mut s = Sample {
            server_cpu_secs: [None; Kind::ALL.len()],
            server_write_bytes: [None; Kind::ALL.len()],
            client_ticks: probe::own_cpu_ticks(),
            machine_ticks: probe::machine_busy_ticks(),
        };
        for sys in systems {
            let (kind, pids) = (sys.kind(), sys.pids());
            // A figure is only known when every server's is.
            let sum = |read: fn(u32) -> Option<u64>| -> Option<u64> {
                if pids.len() != kind.servers() {
                    return None;
                }
                pids.iter().map(|&pid| read(pid)).sum()
            };
            s.server_cpu_secs[kind.index()] =
                sum(probe::cpu_ticks).map(|t| t as f64 / probe::ticks_per_second());
            s.server_write_bytes[kind.index()] = sum(probe::write_bytes);
        }
        s
    }
}

/// One level of `systems[i]` with `writers` writers for `secs`, and what
/// every system's servers, this process and the machine used meanwhile.
pub async fn measure(
    systems: &mut [Box<dyn System>],
    i: usize,
    trial: usize,
    writers: usize,
    secs: f64,
) -> anyhow::Result<Trial> {
    let kind = systems[i].kind();
    let leader = systems[i].leader().await?;
    let load_avg_1m = probe::load_avg_1m();
    let before = Sample::read(systems);
    let t0 = Instant::now();
    let result = systems[i]
        .level(&leader, writers, secs)
        .await
        .map_err(|e| format!("{e:#}"));
    let wall_secs = t0.elapsed().as_secs_f64();
    let after = Sample::read(systems);
    // A system broken for good (a dead Keel controller) is fatal.
    systems[i].check()?;
    Ok(Trial {
        trial,
        leader,
        result,
        wall_secs,
        server_cpu_secs: before.server_cpu(kind, &after),
        client_cpu_secs: ticks_secs(before.client_ticks, after.client_ticks),
        machine_cpu_secs: ticks_secs(before.machine_ticks, after.machine_ticks),
        server_write_bytes: before.server_write_bytes(kind, &after),
        idle_cpu_secs: systems
            .iter()
            .map(|o| o.kind())
            .filter(|&o| o != kind)
            .filter_map(|o| Some((o.name(), before.server_cpu(o, &after)?)))
            .collect(),
        load_avg_1m,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok_trial(trial: usize, ops: u64, secs: f64, lat: Vec<f64>, cpu: f64) -> Trial {
        Trial {
            trial,
            leader: "l".into(),
            result: Ok(Level {
                writers: 1,
                ops,
                errors: 0,
                secs,
                lat_ms: lat,
                first_error: None,
            }),
            wall_secs: secs,
            server_cpu_secs: Some(cpu),
            client_cpu_secs: None,
            machine_cpu_secs: None,
            server_write_bytes: Some(ops * 500),
            idle_cpu_secs: Vec::new(),
            load_avg_1m: None,
        }
    }

    #[test]
    fn summary_takes_the_median_of_trials_and_pools_latencies() {
        let trials = vec![
            ok_trial(0, 1000, 1.0, vec![1.0; 10], 0.5),
            ok_trial(1, 3000, 1.0, vec![3.0; 10], 0.9),
            ok_trial(2, 2000, 1.0, vec![2.0; 10], 0.7),
            Trial {
                trial: 3,
                leader: "l".into(),
                result: Err("down".into()),
                wall_secs: 1.0,
                server_cpu_secs: None,
                client_cpu_secs: None,
                machine_cpu_secs: None,
                server_write_bytes: None,
                idle_cpu_secs: Vec::new(),
                load_avg_1m: None,
            },
        ];
        let s = summarize(&trials);
        assert_eq!(s["ok_trials"], 3);
        assert_eq!(s["ops_per_s"].as_f64(), Some(2000.0));
        assert_eq!(s["ops_per_s_min"].as_f64(), Some(1000.0));
        assert_eq!(s["ops_per_s_max"].as_f64(), Some(3000.0));
        // 30 pooled samples: 10 of each; p50 is the 15th, p99 the 30th.
        assert_eq!(s["p50_ms"].as_f64(), Some(2.0));
        assert_eq!(s["p99_ms"].as_f64(), Some(3.0));
        assert_eq!(s["server_cpu_pct"].as_f64(), Some(70.0));
        // 0.7 s of CPU for 2000 ops.
        assert_eq!(s["server_cpu_us_per_op"].as_f64(), Some(350.0));
        assert_eq!(s["client_cpu_pct"], Value::Null);
        assert_eq!(summarize(&trials[3..])["ops_per_s"], Value::Null);
    }

    #[test]
    fn other_cpu_is_what_the_machine_used_beyond_server_and_client() {
        let mut t = ok_trial(0, 100, 1.0, vec![1.0], 0.6);
        t.client_cpu_secs = Some(0.2);
        t.machine_cpu_secs = Some(1.1);
        assert_eq!(t.other_cpu_secs().map(r3), Some(0.3));
        assert_eq!(t.json()["other_cpu_pct"].as_f64(), Some(30.0));
        t.idle_cpu_secs = vec![("etcd", 0.1)];
        assert_eq!(t.outside_cpu_secs().map(r3), Some(0.2));
        assert_eq!(
            t.json()["idle_systems_cpu_pct"]["etcd"].as_f64(),
            Some(10.0)
        );
        assert_eq!(t.json()["server_write_bytes_per_op"].as_f64(), Some(500.0));
        t.machine_cpu_secs = Some(0.5);
        assert_eq!(t.other_cpu_secs(), Some(0.0));
        assert_eq!(t.outside_cpu_secs(), Some(0.0));
    }
}
