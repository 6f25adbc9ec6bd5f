//! What a Prometheus scrape of real nodes shows: every family has a
//! `# HELP` line, latencies are histograms with buckets (a summary's
//! quantiles decay to 0 between events), standbys export their role and
//! Raft position too, and every process says its version and role.

mod common;

use std::time::Duration;

use common::*;

const LONG: Duration = Duration::from_secs(90);

/// Scrapes `addr` until `ok` holds for the text (bounded); returns it.
async fn scrape_until(addr: std::net::SocketAddr, what: &str, ok: impl Fn(&str) -> bool) -> String {
    scrape_within(addr, LONG, what, ok).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_exports_described_histograms_its_role_and_its_version() {
    let mut c = Cluster::start(fast_spec(1).metrics(true)).unwrap();
    let active = c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    let client = client(&c);
    create_topic(&client, "m", 1, 1).await;

    let leader = c.controller(active).metrics_addr.unwrap();
    let text = scrape_until(leader, "the active controller's commit histogram", |t| {
        t.contains("keel_controller_commit_latency_seconds_bucket{le=")
    })
    .await;
    assert!(
        text.contains("# TYPE keel_controller_commit_latency_seconds histogram"),
        "{text}"
    );
    assert!(text.contains("keel_controller_active 1"), "{text}");
    assert!(text.contains("role=\"controller\""), "{text}");
    assert!(text.contains("keel_build_info{"), "{text}");
    assert_eq!(families_without_help(&text), Vec::<String>::new(), "{text}");

    let standby = c.controller((active + 1) % 3).metrics_addr.unwrap();
    let text = scrape_until(standby, "a standby's role and applied index", |t| {
        t.contains("keel_controller_active 0") && t.contains("keel_controller_last_applied_index ")
    })
    .await;
    assert!(text.contains("# HELP keel_controller_active "), "{text}");
    assert_eq!(families_without_help(&text), Vec::<String>::new(), "{text}");

    let broker = c.broker(0).metrics_addr.unwrap();
    let text = scrape_until(broker, "the broker's heartbeat histogram", |t| {
        t.contains("keel_broker_heartbeat_latency_seconds_bucket{le=")
    })
    .await;
    assert!(text.contains("role=\"broker\""), "{text}");
    assert!(text.contains("keel_broker_fenced 0"), "{text}");
    assert_eq!(families_without_help(&text), Vec::<String>::new(), "{text}");
    c.check_alive().unwrap();
}

/// The value of an unlabelled sample `name` in a scrape.
fn value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Asserts that every unlabelled sample named in `expected` reads its value
/// in a scrape.
fn assert_values(text: &str, expected: &[(&str, f64)]) {
    for (name, want) in expected {
        assert_eq!(value(text, name), Some(*want), "{name}\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_broker_shows_as_fenced_with_under_replicated_partitions_on_every_controller() {
    let mut c = Cluster::start(fast_spec(3).metrics(true)).unwrap();
    let active = c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    let client = client(&c);
    create_topic(&client, "m", 3, 3).await;
    // min.insync.replicas defaults to 1: one dead replica of three leaves
    // every partition above it.
    let leader = c.controller(active).metrics_addr.unwrap();
    let text = scrape_until(leader, "a healthy cluster's gauges", |t| {
        value(t, "keel_controller_partitions") == Some(3.0)
            && value(t, "keel_controller_active_brokers") == Some(3.0)
    })
    .await;
    assert_values(
        &text,
        &[
            ("keel_controller_fenced_brokers", 0.0),
            ("keel_controller_under_replicated_partitions", 0.0),
            ("keel_controller_under_min_isr_partitions", 0.0),
            ("keel_controller_offline_partitions", 0.0),
            ("keel_controller_topics", 1.0),
        ],
    );
    let committed =
        value(&text, "keel_controller_last_committed_index").expect("leader's committed index");
    let applied = value(&text, "keel_controller_last_applied_index").expect("applied index");
    assert!(committed > 0.0 && applied > 0.0, "{text}");
    assert!(
        value(&text, "keel_controller_last_applied_lag_entries").is_some(),
        "{text}"
    );
    // Process metrics under their standard names.
    for name in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_cpu_seconds_total",
    ] {
        assert!(
            value(&text, name).is_some_and(|v| v > 0.0),
            "{name}\n{text}"
        );
    }
    assert!(
        value(&text, "process_start_time_seconds").is_some_and(|v| v > 1.0e9),
        "{text}"
    );
    assert!(
        text.contains("# TYPE process_cpu_seconds_total counter"),
        "{text}"
    );
    // Counters exist from the start, so an alert on their increase works.
    assert_eq!(
        value(&text, "keel_controller_metadata_errors_total"),
        Some(0.0),
        "{text}"
    );
    let elections_before =
        value(&text, "keel_controller_clean_leader_elections_total").unwrap_or(0.0);
    let led_by_3 = admin::describe_topic(&client, "m")
        .await
        .unwrap()
        .expect("topic m")
        .partitions
        .iter()
        .filter(|p| p.state.as_ref().and_then(|s| s.leader) == Some(3))
        .count();

    c.broker_mut(2).kill();
    let text = scrape_until(
        leader,
        "broker 3 fenced and its partitions under-replicated",
        |t| {
            value(t, "keel_controller_fenced_brokers") == Some(1.0)
                && value(t, "keel_controller_under_replicated_partitions") == Some(3.0)
        },
    )
    .await;
    assert_values(
        &text,
        &[
            ("keel_controller_active_brokers", 2.0),
            ("keel_controller_offline_partitions", 0.0),
            ("keel_controller_under_min_isr_partitions", 0.0),
        ],
    );
    // The partitions broker 3 led got new leaders from their ISR: clean
    // elections, none unclean.
    let text = scrape_until(leader, "the moved leaderships counted", |t| {
        value(t, "keel_controller_clean_leader_elections_total").unwrap_or(0.0)
            >= elections_before + led_by_3 as f64
    })
    .await;
    assert!(
        value(&text, "keel_controller_unclean_elections_total").unwrap_or(0.0) == 0.0,
        "{text}"
    );
    // A standby knows the same from its own image.
    let standby = c.controller((active + 1) % 3).metrics_addr.unwrap();
    let text = scrape_until(standby, "a standby's cluster gauges", |t| {
        value(t, "keel_controller_fenced_brokers") == Some(1.0)
    })
    .await;
    assert_values(
        &text,
        &[
            ("keel_controller_under_replicated_partitions", 3.0),
            ("keel_controller_active", 0.0),
        ],
    );
}

/// Every family in a scrape (any prefix: `keel_`, `process_`, or one a
/// library registers) without a `# HELP` line.
fn families_without_help(text: &str) -> Vec<String> {
    let families: std::collections::BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    families
        .into_iter()
        .filter(|n| !text.contains(&format!("# HELP {n} ")))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_family_a_live_controller_and_broker_export_has_help() {
    let mut c = Cluster::start(fast_spec(1).metrics(true)).unwrap();
    let active = c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    let client = client(&c);
    // A topic, so the families that appear only once there is work (commit
    // latency, per-partition figures) are in the scrape too.
    create_topic(&client, "help", 1, 1).await;

    let controller = c.controller(active).metrics_addr.unwrap();
    let text = scrape_until(
        controller,
        "the active controller's commit histogram",
        |t| t.contains("keel_controller_commit_latency_seconds_bucket{le="),
    )
    .await;
    assert!(text.contains("# TYPE process_open_fds "), "{text}");
    // The Kafka listener's refusal counter is there from the start (an
    // alert on its increase can fire), described like the rest.
    assert!(
        text.contains("keel_kafka_requests_refused_total{reason=\"frame_size\"} 0"),
        "{text}"
    );
    assert_eq!(families_without_help(&text), Vec::<String>::new(), "{text}");

    let broker = c.broker(0).metrics_addr.unwrap();
    let text = scrape_until(broker, "the broker's heartbeat histogram", |t| {
        t.contains("keel_broker_heartbeat_latency_seconds_bucket{le=")
    })
    .await;
    assert!(
        text.contains("keel_kafka_requests_refused_total{reason=\"decoded_size\"} 0"),
        "{text}"
    );
    assert_eq!(families_without_help(&text), Vec::<String>::new(), "{text}");
    c.check_alive().unwrap();
}
