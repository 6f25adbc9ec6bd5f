//! The `broker-failure` JSON (its keys are a contract), table and summary.

use anyhow::bail;
use serde_json::{json, Value};

use super::trials::{FailureTrial, ShutdownTrial};
use super::BrokerFailureParams;
use crate::stats::{cell, machine, median, percentile, r1, r3};
use crate::Report;

/// What the scenario measured.
pub struct Outcome {
    pub started_at: u64,
    pub create_secs: f64,
    pub setup_secs: f64,
    pub failure: Vec<FailureTrial>,
    pub failure_errors: Vec<String>,
    pub shutdown: Vec<ShutdownTrial>,
    pub shutdown_errors: Vec<String>,
    /// Raft terms gone by over the whole scenario (JSON number or null).
    pub leadership_changes: Value,
}

/// Median, p99, range and every trial; with no successful trial the
/// figures are null (shown as "-"), never a 0 ms that reads as a result.
fn summary_json(trials: &[f64]) -> Value {
    let or_null = |v: Option<f64>| v.map_or(Value::Null, |v| json!(r1(v)));
    let some = !trials.is_empty();
    json!({
        "median_ms": or_null(some.then(|| median(trials))),
        "p99_ms": or_null(some.then(|| percentile(trials, 99.0))),
        "min_ms": or_null(trials.iter().copied().reduce(f64::min)),
        "max_ms": or_null(trials.iter().copied().reduce(f64::max)),
        "trials_ms": trials.iter().map(|x| r1(*x)).collect::<Vec<_>>(),
    })
}

fn opt_r1(x: Option<f64>) -> Value {
    x.map_or(Value::Null, |v| json!(r1(v)))
}

/// The report of a run.
pub fn report(p: &BrokerFailureParams, o: Outcome) -> anyhow::Result<Report> {
    let Outcome {
        started_at,
        create_secs,
        setup_secs,
        failure,
        failure_errors,
        shutdown,
        shutdown_errors,
        leadership_changes,
    } = o;
    let fail_ms: Vec<f64> = failure.iter().map(|t| t.ms).collect();
    let mut fj = summary_json(&fail_ms);
    let entries: Vec<u64> = failure.iter().map(|t| t.raft_entries).collect();
    let q: Vec<f64> = failure.iter().filter_map(|t| t.queue_p99_ms).collect();
    fj["raft_entries"] = json!(entries.iter().copied().max().unwrap_or(0));
    fj["raft_entries_trials"] = json!(entries);
    fj["fence_batch_entries_trials"] = json!(failure
        .iter()
        .map(|t| t.fence_batch_entries)
        .collect::<Vec<_>>());
    fj["controller_term_changed"] = json!(failure.iter().any(|t| t.term_changed));
    fj["event_queue_p99_ms"] = if q.is_empty() {
        Value::Null
    } else {
        json!(r3(median(&q)))
    };
    fj["event_queue_p99_ms_trials"] = json!(q.iter().map(|x| r3(*x)).collect::<Vec<_>>());
    fj["event_queue_p99_method"] = json!(failure.first().map(|t| t.queue_method));
    fj["event_queue_by_kind_trials"] = json!(failure
        .iter()
        .map(|t| t.queue_detail.clone())
        .collect::<Vec<_>>());
    fj["kill_to_fence_log_ms_trials"] =
        json!(failure.iter().map(|t| r1(t.detect_ms)).collect::<Vec<_>>());
    fj["fence_log_to_first_acceptance_ms_trials"] = json!(failure
        .iter()
        .map(|t| r1(t.first_accept_ms))
        .collect::<Vec<_>>());
    fj["fence_log_to_last_acceptance_per_broker_ms_trials"] = json!(failure
        .iter()
        .map(|t| t
            .per_broker_last_ms
            .iter()
            .map(|x| r1(*x))
            .collect::<Vec<_>>())
        .collect::<Vec<_>>());
    fj["commit_and_event_process_method"] = json!("histogram bucket deltas between the scrapes before and after the fence, as the upper bound of the bucket the quantile falls in (event_process_max: the bucket of the longest event)");
    fj["commit_latency_p99_ms_trials"] = json!(failure
        .iter()
        .map(|t| opt_r1(t.commit_p99_ms))
        .collect::<Vec<_>>());
    fj["event_process_max_ms_trials"] = json!(failure
        .iter()
        .map(|t| opt_r1(t.process_max_ms))
        .collect::<Vec<_>>());
    fj["failures"] = json!(failure_errors);
    let expiry_ms: Vec<f64> = failure.iter().map(|t| t.expiry_ms).collect();
    fj["expiry_to_last_acceptance"] = summary_json(&expiry_ms);
    fj["expiry_log_to_fence_log_ms_trials"] = json!(failure
        .iter()
        .map(|t| r1(t.expiry_to_fence_ms))
        .collect::<Vec<_>>());

    let sd_ms: Vec<f64> = shutdown.iter().map(|t| t.ms).collect();
    let mut sj = summary_json(&sd_ms);
    sj["sigterm_to_shutdown_record_log_ms_trials"] = json!(shutdown
        .iter()
        .map(|t| opt_r1(t.to_shutdown_record_ms))
        .collect::<Vec<_>>());
    sj["sigterm_to_first_acceptance_ms_trials"] = json!(shutdown
        .iter()
        .map(|t| r1(t.first_accept_ms))
        .collect::<Vec<_>>());
    sj["sigterm_to_exit_ms_trials"] = json!(shutdown
        .iter()
        .map(|t| opt_r1(t.exit_ms))
        .collect::<Vec<_>>());
    sj["raft_entries_trials"] = json!(shutdown.iter().map(|t| t.raft_entries).collect::<Vec<_>>());
    sj["failures"] = json!(shutdown_errors);

    let json = json!({
        "scenario": "broker-failure",
        "started_at_unix": started_at,
        "partitions": p.partitions,
        "leadership_changes": leadership_changes,
        "parameters": {
            "controllers": 3,
            "brokers": 3,
            "trials": p.trials,
            "partitions_per_topic": p.partitions_per_topic,
            "replicas": [1, 2, 3],
            "topics_per_request": p.topics_per_request,
            "create_concurrency": p.create_concurrency,
            "controller_session_timeout_ms": 3000,
            "broker_heartbeat_interval_ms": 500,
            "broker_session_timeout_ms": 3000,
            "create_secs": r1(create_secs),
            "setup_secs": r1(setup_secs),
            "failure_measured": "SIGKILL broker 1; active controller's \"broker fenced\" log timestamp -> last accepted_at_ms on brokers 2 and 3 of the first leader_and_isr line per partition with leader != 1 at a newer leader epoch",
            "failure_expiry_measured": "failure.expiry_to_last_acceptance: the active controller's \"broker session expired; fencing it\" log timestamp (before the fence is decided) -> the same last acceptance, so deciding and committing the moves count too",
            "controlled_shutdown_measured": "SIGTERM to broker 1 (bench clock, taken just before the signal is sent) -> the same last acceptance on brokers 2 and 3",
        },
        "failure": fj,
        "controlled_shutdown": sj,
        "machine": machine(),
    });

    let mut table = format!(
        "broker-failure ({} partitions led by broker 1, RF 3)\n",
        p.partitions
    );
    table += &format!(
        "{:<22} {:>7} {:>10} {:>10} {:>10} {:>10}\n",
        "measurement", "trials", "median ms", "p99 ms", "min ms", "max ms"
    );
    for (name, j, n) in [
        ("failure (fence->ack)", &json["failure"], fail_ms.len()),
        (
            "failure (expiry->ack)",
            &json["failure"]["expiry_to_last_acceptance"],
            expiry_ms.len(),
        ),
        (
            "controlled shutdown",
            &json["controlled_shutdown"],
            sd_ms.len(),
        ),
    ] {
        table += &format!(
            "{:<22} {:>7} {:>10} {:>10} {:>10} {:>10}\n",
            name,
            n,
            cell(&j["median_ms"]),
            cell(&j["p99_ms"]),
            cell(&j["min_ms"]),
            cell(&j["max_ms"])
        );
    }
    table += &format!(
        "failure: Raft entries {} per fence, event-queue p99 {} ms; expiry log -> fence log {} ms; kill -> fence log {} ms; fence log -> first acceptance {} ms; max event processing {} ms; commit p99 {} ms\n",
        cell(&json["failure"]["raft_entries"]),
        cell(&json["failure"]["event_queue_p99_ms"]),
        json["failure"]["expiry_log_to_fence_log_ms_trials"],
        json["failure"]["kill_to_fence_log_ms_trials"],
        json["failure"]["fence_log_to_first_acceptance_ms_trials"],
        json["failure"]["event_process_max_ms_trials"],
        json["failure"]["commit_latency_p99_ms_trials"],
    );
    table += &format!(
        "controlled shutdown: SIGTERM -> shutdown record logged {} ms; -> first acceptance {} ms; -> broker exit {} ms\n",
        json["controlled_shutdown"]["sigterm_to_shutdown_record_log_ms_trials"],
        json["controlled_shutdown"]["sigterm_to_first_acceptance_ms_trials"],
        json["controlled_shutdown"]["sigterm_to_exit_ms_trials"],
    );
    let summary = format!(
        "broker-failure: {} partitions: failure median {} ms (fence -> last acceptance), {} ms from session expiry, controlled shutdown median {} ms (SIGTERM -> last acceptance)",
        p.partitions,
        cell(&json["failure"]["median_ms"]),
        cell(&json["failure"]["expiry_to_last_acceptance"]["median_ms"]),
        cell(&json["controlled_shutdown"]["median_ms"])
    );
    if fail_ms.is_empty() && sd_ms.is_empty() {
        bail!(
            "no trial succeeded; failure: {:?}; controlled shutdown: {:?}",
            json["failure"]["failures"],
            json["controlled_shutdown"]["failures"]
        );
    }
    Ok(Report {
        scenario: "broker-failure",
        json,
        table,
        summary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measurement_without_trials_has_no_figures() {
        let none = summary_json(&[]);
        for k in ["median_ms", "p99_ms", "min_ms", "max_ms"] {
            assert_eq!(none[k], Value::Null, "{k}");
        }
        assert_eq!(none["trials_ms"], json!([]));
        assert_eq!(cell(&none["median_ms"]), "-");

        let some = summary_json(&[300.04, 100.0, 200.0]);
        assert_eq!(some["median_ms"], json!(200.0));
        assert_eq!(some["min_ms"], json!(100.0));
        assert_eq!(some["max_ms"], json!(300.0));
        assert_eq!(some["trials_ms"], json!([300.0, 100.0, 200.0]));
    }
}
