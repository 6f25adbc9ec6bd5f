//! The verdict of a run: every checker's judgement of the history, the
//! final reads, the brokers' histories and what the nemesis recorded, and
//! the report (`results.json`, `history.jsonl`, `report.html`).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};

use crate::brokers::BrokerEvent;
use crate::history::{OpRecord, Outcome, Seen};
use crate::nemesis::{Family, FaultEvent, Nemesis, ZombieProbe};
use crate::{
    brokers, history, incarnations, linear, lost, nemesis, partitions, reassign, report, timing,
    Config,
};

/// What the harness reads once everything is healed.
pub(crate) struct Final {
    pub recovery: (bool, Value),
    pub convergence: (bool, Value),
    /// Every workload name's last state, as read.
    pub read: BTreeMap<String, Seen>,
    pub ids: BTreeMap<String, String>,
    /// Names no final read answered.
    pub unread: Vec<String>,
}

/// Adds checker `name`'s verdict.
pub(crate) fn put(
    checkers: &mut serde_json::Map<String, Value>,
    name: &str,
    valid: Value,
    detail: Value,
) {
    checkers.insert(name.into(), json!({"valid": valid, "detail": detail}));
}

/// Every checker's verdict on the run (but the intruder's and the crash
/// watch's, which the caller adds).
#[allow(clippy::too_many_arguments)]
pub(crate) fn judge(
    cfg: &Config,
    ops: &[OpRecord],
    fin: &Final,
    placement: &Result<reassign::Placement, String>,
    broker_hist: &BTreeMap<u32, Vec<BrokerEvent>>,
    unparsable: Vec<String>,
    probes: &[ZombieProbe],
    disk_stops: &[nemesis::DiskStop],
    faults: &[FaultEvent],
    nemesis: &Nemesis,
) -> serde_json::Map<String, Value> {
    let mut checkers = serde_json::Map::new();
    let b = |v: bool| json!(v);
    let (lin_valid, lin_detail) = linear::check_history(ops, 20_000_000);
    let lin_json = match lin_valid {
        Some(v) => json!(v),
        None => json!("unknown"),
    };
    put(&mut checkers, "linearizable", lin_json, lin_detail);
    let (lost_valid, mut lost_detail) = lost::check_with_ids(ops, &fin.read, &fin.ids);
    if !fin.unread.is_empty() {
        lost_detail["final_read_failed_for"] = json!(fin.unread);
    }
    put(
        &mut checkers,
        "no_lost_creates",
        b(lost_valid && fin.unread.is_empty()),
        lost_detail,
    );
    let (v, detail) = incarnations::check(ops);
    put(&mut checkers, "topic_incarnations", b(v), detail);
    let (v, detail) = partitions::check(ops);
    put(&mut checkers, "whole_topics", b(v), detail);
    let (v, detail) = match placement {
        Ok(p) => reassign::check(ops, p),
        Err(e) => (
            false,
            json!({"error": format!("cannot read the placement: {e}")}),
        ),
    };
    put(&mut checkers, "reassignments_land", b(v), detail);
    let (v, mut detail) = brokers::check(broker_hist);
    if !unparsable.is_empty() {
        detail["unparsable_lines"] = json!(unparsable);
    }
    put(&mut checkers, "broker_safety", b(v), detail);
    let (v, detail) = fin.convergence.clone();
    put(&mut checkers, "convergence", b(v), detail);
    let (v, detail) = fin.recovery.clone();
    put(&mut checkers, "recovery", b(v), detail);
    // Refusals needed: none without a zombie window (`all` may draw none
    // in a short run), one after one window, then ZOMBIE_MIN_REFUSED.
    let zombie_windows = faults.iter().filter(|f| f.family == Family::Zombie).count();
    let min_refused = nemesis::ZOMBIE_MIN_REFUSED.min(zombie_windows);
    let (v, detail) = nemesis::zombie_check(probes, min_refused);
    put(&mut checkers, "zombie_requests_refused", b(v), detail);
    if cfg.families.contains(&Family::Disk) {
        let (v, detail) = nemesis::disk_stop_check(disk_stops);
        put(&mut checkers, "disk_faults_stop_cleanly", b(v), detail);
        let (v, detail) = nemesis::power::epoch_check(&nemesis.disk_epochs);
        put(
            &mut checkers,
            "broker_epochs_across_disk_faults",
            b(v),
            detail,
        );
    }
    if cfg.families.contains(&Family::Membership) {
        let missing = &nemesis.voters_missing;
        put(
            &mut checkers,
            "voters_back_after_membership_changes",
            b(missing.is_empty()),
            json!({"not_added_back": missing}),
        );
    }
    if cfg.families.contains(&Family::Power) {
        let (v, detail) = nemesis::power::restart_check(&nemesis.restarts, cfg.recovery_bound);
        put(&mut checkers, "back_after_power_cuts", b(v), detail);
        let (v, detail) = nemesis::power::epoch_check(&nemesis.epochs);
        put(
            &mut checkers,
            "broker_epochs_across_power_cuts",
            b(v),
            detail,
        );
    }
    checkers
}

/// Moments and counts of the run the summary gives.
pub(crate) struct Times {
    pub healed_ms: f64,
    pub end_ms: f64,
    pub power_cuts: usize,
    pub intruder_attempts: usize,
}

/// Writes `results.json`, `history.jsonl` and `report.html` into the run
/// dir and the verdicts on stderr; whether every checker passed.
pub(crate) fn write_report(
    cfg: &Config,
    run_dir: &Path,
    ops: &[OpRecord],
    faults: &[FaultEvent],
    nemesis: &Nemesis,
    checkers: serde_json::Map<String, Value>,
    t: Times,
) -> bool {
    let fault_lengths = timing::summarize(
        &nemesis.lengths.timing(),
        &faults
            .iter()
            .map(|f| (f.kind.clone(), f.planned_ms))
            .collect::<Vec<_>>(),
    );
    let count = |o: Outcome| ops.iter().filter(|x| x.outcome == o).count();
    let valid = checkers
        .values()
        .all(|c| c.get("valid") == Some(&Value::Bool(true)));
    let summary = json!({
        "ops": ops.len(),
        "ok": count(Outcome::Ok),
        "fail": count(Outcome::Fail),
        "info": count(Outcome::Info),
        "faults": faults.len(),
        "ops_by_kind": report::ops_by_kind(ops),
        "faults_by_kind": fault_lengths["faults_by_kind"].clone(),
        "short_faults_inside_lease": fault_lengths["short_faults_inside_lease"].clone(),
        "intruder_attempts": t.intruder_attempts,
        "power_cuts": t.power_cuts,
        "final_heal_ms": t.healed_ms.round(),
        "end_ms": t.end_ms.round(),
    });
    let results = json!({
        "valid": valid,
        "seed": cfg.seed,
        "time_limit_s": cfg.time_limit.as_secs(),
        "nemesis": cfg.families,
        "brokers": cfg.brokers,
        "clients": cfg.clients,
        "client": cfg.client.as_str(),
        "tls": cfg.tls,
        "summary": summary,
        "checkers": Value::Object(checkers),
        "fault_lengths": fault_lengths,
        "faults": faults,
    });
    let _ = history::write_history(&run_dir.join("history.jsonl"), ops);
    let _ = std::fs::write(
        run_dir.join("results.json"),
        serde_json::to_string_pretty(&results).unwrap_or_default(),
    );
    let page = report::html(&results, ops, faults, t.end_ms);
    let _ = std::fs::write(run_dir.join("report.html"), page);

    eprintln!(
        "keel jepsen: {} ops (ok {}, fail {}, info {}); {} faults; {} intruder attempts; {} power cuts; final heal at {:.1} s, end at {:.1} s",
        ops.len(),
        count(Outcome::Ok),
        count(Outcome::Fail),
        count(Outcome::Info),
        faults.len(),
        t.intruder_attempts,
        t.power_cuts,
        t.healed_ms / 1000.0,
        t.end_ms / 1000.0,
    );
    for (kind, n) in summary["faults_by_kind"].as_object().into_iter().flatten() {
        eprintln!("  fault {kind:<40} {n}");
    }
    for (name, c) in results["checkers"].as_object().into_iter().flatten() {
        eprintln!("  {name:<26} {}", c["valid"]);
    }
    eprintln!(
        "keel jepsen: valid = {valid}; report {}",
        run_dir.join("report.html").display()
    );
    valid
}
