//! The `compare` report: the `setup` description, the per-level JSON (its
//! keys are a contract), the table and the one-line summary.

use serde_json::{json, Value};

use super::systems::System;
use super::trial::{summarize, Trial};
use super::{ratio, CompareParams, Kind};
use crate::load::Connections;
use crate::stats::{cell, disk_probe_line, machine, median, r3};
use crate::{tls, Report};

/// The fixed description of the comparison (the `setup` JSON field).
pub fn setup_json(p: &CompareParams, systems: &[Box<dyn System>]) -> Value {
    let shared = p.connections == Connections::Shared;
    let order = if p.tls {
        "trial t: for each writer level: zookeeper, etcd, keel, keel-tls, grpc-echo (systems interleaved so machine noise hits all alike)"
    } else {
        "trial t: for each writer level: zookeeper, etcd, keel, grpc-echo (systems interleaved so machine noise hits all alike)"
    };
    let mut j = json!({
        "order": order,
        "warmup": format!("{} s per system at {} writers before the first trial, not recorded", p.warmup_secs, p.writers.iter().max().copied().unwrap_or(1)),
        "connections": p.connections.name(),
        "load_generator": if shared {
            "this process (the `keel` binary, tokio multi-thread runtime): one task per writer, one op in flight each, all writers of a system on one shared persistent connection; the same loop, value generator, timer and error budget for every system"
        } else {
            "this process (the `keel` binary, tokio multi-thread runtime): one task per writer, its own persistent connection, one op in flight; the same loop, value generator, timer and error budget for every system"
        },
        "latency": "p50/p99 pooled over the samples of every successful trial; ops/s is the median of the trials' ops/s",
        "cpu": "utime+stime of the server processes of the system (three; one for grpc-echo) (from /proc/<pid>/stat, 100 ticks/s) and of this load generator, over the whole level call (session/connection set-up and close included), as % of one core; other_cpu_pct is the rest of the machine's busy time (/proc/stat) in that window, idle_systems_cpu_pct the part of it the idle systems used, outside_cpu_pct what remains: work outside the comparison, i.e. noise; server_write_bytes is write_bytes of /proc/<pid>/io summed over the system's servers",
    });
    for k in Kind::ALL {
        j[k.name()] = match systems.iter().find(|s| s.kind() == k) {
            Some(s) => s.setup(),
            None => json!({ "skipped": true, "reason": k.skipped_reason() }),
        };
    }
    j["servers_started_by"] = json!(std::env::var("KEEL_BENCH_COMPARE_SETUP")
        .ok()
        .map(|s| s.lines().map(str::to_string).collect::<Vec<_>>()));
    j
}

/// The whole report; `results[level][kind index]` holds the trials.
pub fn report(
    p: &CompareParams,
    started_at: u64,
    setup: Value,
    results: &[Vec<Vec<Trial>>],
    disk: Value,
) -> Report {
    let present = |k: &Kind| !setup[k.name()]["skipped"].as_bool().unwrap_or(true);
    let mut levels_json = Vec::new();
    let mut ratios = Vec::new();
    let mut tls_levels = Vec::new();
    for (li, &w) in p.writers.iter().enumerate() {
        let mut per = serde_json::Map::new();
        for (si, s) in Kind::ALL.iter().enumerate() {
            let v = if present(s) {
                let mut v = summarize(&results[li][si]);
                v["trials"] = Value::Array(results[li][si].iter().map(Trial::json).collect());
                v
            } else {
                json!({ "skipped": true })
            };
            per.insert(s.name().to_string(), v);
        }
        let ops = |s: &str| per.get(s).and_then(|v| v["ops_per_s"].as_f64());
        let mut r = json!({ "writers": w });
        for s in Kind::ALL {
            if let Some(key) = s.ratio_key() {
                r[key] = json!(ratio(ops("keel"), ops(s.name())).map(r3));
            }
        }
        ratios.push(r.clone());
        let mut l = json!({ "writers": w });
        for (k, v) in per {
            l[k] = v;
        }
        for key in Kind::ALL.iter().filter_map(|s| s.ratio_key()) {
            l[key] = r[key].clone();
        }
        if present(&Kind::KeelTls) {
            let c = tls::comparison(
                w,
                tls_side(&l[Kind::Keel.name()]),
                tls_side(&l[Kind::KeelTls.name()]),
            );
            l["tls"] = c.clone();
            tls_levels.push(c);
        }
        levels_json.push(l);
    }

    let mut json = json!({
        "scenario": "compare",
        "started_at_unix": started_at,
        "parameters": {
            "nodes_per_system": 3,
            "writers": p.writers,
            "level_secs": p.level_secs,
            "trials": p.trials,
            "value_bytes": p.value_bytes,
            "warmup_secs": p.warmup_secs,
            "max_ops_per_level": p.max_ops_per_level,
            "request_timeout_ms": p.request_timeout_ms,
            "zookeeper": p.zookeeper,
            "etcd": p.etcd,
            "echo": p.echo,
            "tls": p.tls,
        },
        "leadership_changes": setup["keel"]["leadership_changes"].clone(),
        "setup": setup,
        "levels": levels_json,
        "ratios": ratios,
        "machine": machine(),
        "disk_probe": disk,
    });
    if p.tls {
        json["tls"] = tls::summary_json(&tls_levels, p.trials, TLS_ORDER);
    }
    let mut table = table(p, &json);
    let mut summary = summary_line(&json);
    if p.tls {
        table += &tls::table(&tls_levels, p.trials);
        summary += &format!("; {}", tls::summary_line(&tls_levels));
    }
    Report {
        scenario: "compare",
        json,
        table,
        summary,
    }
}

/// How `--tls` orders Keel's two quorums.
const TLS_ORDER: &str = "keel (plaintext) and keel-tls (a second quorum, mutual TLS) run one right after the other in every trial and writer level, after the same warm-up; each side's figures are the medians of its trials";

/// One side of the TLS comparison: the figures of a Keel system's summary
/// at one level that the comparison shows.
fn tls_side(v: &Value) -> Value {
    let mut side = json!({});
    for k in [
        "ok_trials",
        "ops_per_s",
        "server_cpu_us_per_op",
        "client_cpu_us_per_op",
        "p50_ms",
        "p99_ms",
        "errors",
    ] {
        side[k] = v[k].clone();
    }
    side
}

fn table(p: &CompareParams, j: &Value) -> String {
    let version = |s: &str| {
        let v = &j["setup"][s];
        if v["skipped"].as_bool().unwrap_or(true) {
            format!("{s}: skipped ({})", cell(&v["reason"]))
        } else {
            format!(
                "{s} {} (leader {})",
                cell(&v["version"]),
                cell(&v["leader_at_start"])
            )
        }
    };
    let mut t = format!(
        "compare ({}-byte durable writes, 3 nodes each, {} trial(s) x {} s per level, {} connections; ops/s = median of trials, p50/p99 pooled)\n",
        p.value_bytes, p.trials, p.level_secs, p.connections.name()
    );
    t += &format!(
        "{}; {}; keel {}",
        version("zookeeper"),
        version("etcd"),
        cell(&j["setup"]["keel"]["version"])
    );
    let echo = &j["setup"]["grpc-echo"];
    if !echo["skipped"].as_bool().unwrap_or(true) {
        t += &format!("; grpc-echo at {}", cell(&echo["addresses"][0]));
    }
    t += "\n";
    let row = |c: [&str; 10]| {
        let line = format!(
            "{:>7} {:<9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>7}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9]
        );
        // Keel's rows have no ratio: no trailing blanks.
        line.trim_end().to_string() + "\n"
    };
    t += &row([
        "writers",
        "system",
        "ops/s",
        "p50 ms",
        "p99 ms",
        "srv CPU%",
        "cli CPU%",
        "srv us/op",
        "disk B/op",
        "keel ÷",
    ]);
    let levels = j["levels"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let mut errors = Vec::new();
    for l in levels {
        for s in Kind::ALL {
            let v = &l[s.name()];
            if v["skipped"].as_bool().unwrap_or(false) {
                continue;
            }
            if v["errors"].as_u64().unwrap_or(0) > 0 || v["ok_trials"] != json!(p.trials) {
                errors.push(format!(
                    "{} at {} writers: {} failed ops, {} of {} trials ok",
                    s.name(),
                    cell(&l["writers"]),
                    cell(&v["errors"]),
                    cell(&v["ok_trials"]),
                    p.trials
                ));
            }
            let r = s.ratio_key().map(|k| cell(&l[k])).unwrap_or_default();
            let disk = v["server_write_bytes_per_op"]
                .as_f64()
                .map(|b| format!("{b:.0}"))
                .unwrap_or_else(|| "-".into());
            t += &row([
                &cell(&l["writers"]),
                s.name(),
                &cell(&v["ops_per_s"]),
                &cell(&v["p50_ms"]),
                &cell(&v["p99_ms"]),
                &cell(&v["server_cpu_pct"]),
                &cell(&v["client_cpu_pct"]),
                &cell(&v["server_cpu_us_per_op"]),
                &disk,
                &r,
            ]);
        }
    }
    t += &disk_probe_line(&j["disk_probe"]);
    t += "keel ÷ = Keel ops/s divided by that system's ops/s (medians of this run); CPU % of one core (srv = the system's 3 processes, or the echo server's 1, cli = this load generator); srv us/op = server CPU per op; disk B/op = bytes the servers wrote to storage per op; grpc-echo = the transport ceiling (one gRPC round trip per op, no consensus, no disk)\n";
    for e in errors {
        t += &format!("errors: {e}\n");
    }
    // Noise: what the idle systems and everything outside the comparison
    // used while a level ran.
    let (mut outside, mut load) = (Vec::new(), Vec::new());
    let mut idle: Vec<(&str, Vec<f64>)> =
        Kind::ALL.iter().map(|s| (s.name(), Vec::new())).collect();
    for l in levels {
        for s in Kind::ALL {
            for tr in l[s.name()]["trials"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
            {
                outside.extend(tr["outside_cpu_pct"].as_f64());
                load.extend(tr["load_avg_1m"].as_f64());
                for (name, v) in idle.iter_mut() {
                    v.extend(tr["idle_systems_cpu_pct"][*name].as_f64());
                }
            }
        }
    }
    let idle: Vec<String> = idle
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(n, v)| format!("{n} {:.1}%", median(v)))
        .collect();
    if !idle.is_empty() {
        t += &format!(
            "idle CPU of each system while another ran (median): {}\n",
            idle.join(", ")
        );
    }
    if !outside.is_empty() && !load.is_empty() {
        t += &format!(
            "noise: CPU used outside the comparison during a level: median {:.0}%, max {:.0}% of one core; 1-min load average {:.1}..{:.1} on {} cores\n",
            median(&outside),
            outside.iter().copied().fold(0.0, f64::max),
            load.iter().copied().fold(f64::INFINITY, f64::min),
            load.iter().copied().fold(0.0, f64::max),
            cell(&j["machine"]["nproc"])
        );
    }
    t
}

fn summary_line(j: &Value) -> String {
    let Some(l) = j["levels"].as_array().and_then(|v| v.last()) else {
        return "compare: no levels".into();
    };
    let ops = |s: &str| {
        l[s]["ops_per_s"]
            .as_f64()
            .map(|v| format!("{v:.0}"))
            .unwrap_or_else(|| "-".into())
    };
    let mut line = format!(
        "compare at {} writers: keel {} ops/s, zookeeper {} (keel ÷ {}), etcd {} (keel ÷ {})",
        cell(&l["writers"]),
        ops("keel"),
        ops("zookeeper"),
        cell(&l["keel_vs_zookeeper"]),
        ops("etcd"),
        cell(&l["keel_vs_etcd"]),
    );
    if l["grpc-echo"].is_object() && !l["grpc-echo"]["skipped"].as_bool().unwrap_or(false) {
        line += &format!(
            ", gRPC echo ceiling {} (keel ÷ {})",
            ops("grpc-echo"),
            cell(&l["keel_vs_grpc_echo"])
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setup_names_every_system_and_who_started_the_servers() {
        let j = setup_json(&CompareParams::default(), &[]);
        for k in Kind::ALL {
            assert_eq!(j[k.name()]["skipped"], true, "{k:?}");
            assert!(j[k.name()]["reason"].is_string(), "{k:?}");
        }
        for key in [
            "order",
            "warmup",
            "connections",
            "load_generator",
            "latency",
            "cpu",
        ] {
            assert!(j[key].is_string(), "{key}");
        }
        assert!(j.get("servers_started_by").is_some());
    }

    #[test]
    fn every_system_but_keel_gets_a_ratio_and_the_ceiling_shows_in_the_summary() {
        for s in Kind::ALL {
            assert_eq!(
                s.ratio_key().is_none(),
                matches!(s, Kind::Keel | Kind::KeelTls),
                "{s:?}"
            );
        }
        assert_eq!(Kind::Echo.servers(), 1);
        let level = |echo: Value| {
            json!({ "levels": [{
                "writers": 64,
                "keel": { "ops_per_s": 12000.0 },
                "zookeeper": { "ops_per_s": 6000.0 },
                "etcd": { "ops_per_s": 3000.0 },
                "grpc-echo": echo,
                "keel_vs_zookeeper": 2.0,
                "keel_vs_etcd": 4.0,
                "keel_vs_grpc_echo": 0.25,
            }]})
        };
        let with = summary_line(&level(json!({ "ops_per_s": 48000.0, "ok_trials": 3 })));
        assert!(
            with.ends_with("gRPC echo ceiling 48000 (keel ÷ 0.25)"),
            "{with}"
        );
        let without = summary_line(&level(json!({ "skipped": true })));
        assert!(!without.contains("echo"), "{without}");
    }

    /// A trial of `ops` ops in one second with `cpu` server CPU seconds.
    fn trial(ops: u64, cpu: f64) -> Trial {
        Trial {
            trial: 0,
            leader: "l".into(),
            result: Ok(crate::load::Level {
                writers: 64,
                ops,
                errors: 0,
                secs: 1.0,
                lat_ms: vec![1.0],
                first_error: None,
            }),
            wall_secs: 1.0,
            server_cpu_secs: Some(cpu),
            client_cpu_secs: None,
            machine_cpu_secs: None,
            server_write_bytes: None,
            idle_cpu_secs: Vec::new(),
            load_avg_1m: None,
        }
    }

    #[test]
    fn with_tls_each_level_compares_keel_over_tls_with_plaintext() {
        let p = CompareParams {
            writers: vec![64],
            trials: 1,
            etcd: vec!["http://127.0.22.1:2379".into()],
            tls: true,
            ..CompareParams::default()
        };
        let mut setup = setup_json(&p, &[]);
        for k in [Kind::Etcd, Kind::Keel, Kind::KeelTls] {
            setup[k.name()] = json!({ "skipped": false, "version": "v" });
        }
        let mut results: Vec<Vec<Vec<Trial>>> =
            vec![Kind::ALL.iter().map(|_| Vec::new()).collect()];
        results[0][Kind::Etcd.index()].push(trial(1000, 0.5));
        results[0][Kind::Keel.index()].push(trial(4000, 0.8));
        results[0][Kind::KeelTls.index()].push(trial(3600, 0.9));
        let r = report(&p, 0, setup, &results, json!({}));
        let l = &r.json["levels"][0];
        // Keel's own ratio to etcd is unchanged by the TLS quorum.
        assert_eq!(l["keel_vs_etcd"].as_f64(), Some(4.0));
        assert_eq!(l["keel-tls"]["ops_per_s"].as_f64(), Some(3600.0));
        let t = &l["tls"];
        assert_eq!(t["plaintext"]["server_cpu_us_per_op"].as_f64(), Some(200.0));
        assert_eq!(t["tls"]["server_cpu_us_per_op"].as_f64(), Some(250.0));
        assert_eq!(t["cpu_per_op_ratio"].as_f64(), Some(1.25));
        assert_eq!(t["ops_per_s_ratio"].as_f64(), Some(0.9));
        assert_eq!(r.json["tls"]["at_64_writers"]["within_aim"], true);
        assert_eq!(r.json["parameters"]["tls"], true);
        assert!(r.table.contains("TLS vs plaintext"), "{}", r.table);
        assert!(r.summary.contains("CPU/op 1.25"), "{}", r.summary);
    }
}
