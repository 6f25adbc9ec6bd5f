//! What a Prometheus scrape of real nodes shows: every family has a
//! `# HELP` line, latencies are histograms with buckets (a summary's
//! quantiles decay to 0 between events), standbys export their role and
//! Raft position too, and every process says its version and role.

mod common;

use std::time::{Duration, Instant};

use common::*;

const LONG: Duration = Duration::from_secs(90);

/// Scrapes `addr` until `ok` holds for the text (bounded); returns it.
async fn scrape_until(addr: std::net::SocketAddr, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + LONG;
    loop {
        let text = keel_testkit::probe::scrape_metrics(addr)
            .await
            .unwrap_or_default();
        if ok(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "{what}; last scrape:\n{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Names of the `keel_` families in a scrape without a `# HELP` line.
fn without_help(text: &str) -> Vec<String> {
    let families: std::collections::BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("keel_"))
        .collect();
    families
        .into_iter()
        .filter(|n| !text.contains(&format!("# HELP {n} ")))
        .map(str::to_string)
        .collect()
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
    assert_eq!(without_help(&text), Vec::<String>::new(), "{text}");

    let standby = c.controller((active + 1) % 3).metrics_addr.unwrap();
    let text = scrape_until(standby, "a standby's role and applied index", |t| {
        t.contains("keel_controller_active 0") && t.contains("keel_controller_last_applied_index ")
    })
    .await;
    assert!(text.contains("# HELP keel_controller_active "), "{text}");
    assert_eq!(without_help(&text), Vec::<String>::new(), "{text}");

    let broker = c.broker(0).metrics_addr.unwrap();
    let text = scrape_until(broker, "the broker's heartbeat histogram", |t| {
        t.contains("keel_broker_heartbeat_latency_seconds_bucket{le=")
    })
    .await;
    assert!(text.contains("role=\"broker\""), "{text}");
    assert!(text.contains("keel_broker_fenced 0"), "{text}");
    assert_eq!(without_help(&text), Vec::<String>::new(), "{text}");
    c.check_alive().unwrap();
}
