//! The active controller's channel to a broker that stops answering: the
//! hung connection is dropped after the request timeout (counted and
//! logged), and rebuilt once the broker is back, which then gets what it
//! missed.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use keel_proto::pb;

const LONG: Duration = Duration::from_secs(90);
const DISCONNECTS: &str = "keel_controller_channel_disconnects_total";
const CONNECTS: &str = "keel_controller_channel_connects_total";

/// The value of counter `name` for broker `broker` in a Prometheus scrape
/// of `addr` (0 when absent: nothing counted yet); `None` when the scrape
/// fails.
async fn counter(addr: SocketAddr, name: &str, broker: u32) -> Option<f64> {
    let text = keel_testkit::probe::scrape_metrics(addr).await?;
    let label = format!("broker=\"{broker}\"");
    Some(
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

/// Counter `name` for `broker`, summed over every controller (a failover
/// moves the channels to another one); `None` if one does not answer.
async fn total(c: &Cluster, name: &str, broker: u32) -> Option<f64> {
    let mut sum = 0.0;
    for n in c.controllers() {
        sum += counter(n.metrics_addr.expect("metrics listener"), name, broker).await?;
    }
    Some(sum)
}

/// Waits until `pred` holds for the sum of counter `name` for `broker`.
async fn wait_total(c: &Cluster, name: &str, broker: u32, what: &str, pred: impl Fn(f64) -> bool) {
    let deadline = Instant::now() + LONG;
    loop {
        if total(c, name, broker).await.is_some_and(&pred) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {LONG:?} waiting for: {what}\n{}",
            c.log_tails(30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Topics in broker `i`'s metadata cache, and whether it thinks it is
/// fenced; `None` when it does not answer.
async fn broker_view(c: &Cluster, i: usize) -> Option<(Vec<String>, bool)> {
    let ask = async {
        let ch = keel_tls::transport::endpoint(&c.broker(i).address())
            .ok()?
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(5))
            .connect()
            .await
            .ok()?;
        let d = pb::broker_control_service_client::BrokerControlServiceClient::new(ch)
            .describe_broker(pb::DescribeBrokerRequest {})
            .await
            .ok()?
            .into_inner();
        Some((d.cache.into_iter().map(|p| p.topic).collect(), d.fenced))
    };
    tokio::time::timeout(Duration::from_secs(10), ask)
        .await
        .ok()
        .flatten()
}

/// `line` without its terminal colours (`ESC [ ... m`).
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(ch) = chars.next() {
        if ch == '\u{1b}' {
            chars.by_ref().find(|c| *c == 'm');
        } else {
            out.push(ch);
        }
    }
    out
}

/// Lines of the controllers' logs saying `what` about broker 2.
fn controllers_logged(c: &Cluster, what: &str) -> usize {
    c.controllers()
        .map(|n| {
            n.process
                .log_text()
                .lines()
                .map(plain)
                .filter(|l| l.contains(what) && l.contains("broker=2"))
                .count()
        })
        .sum()
}

const DROPPED: &str = "connection to broker dropped; reconnecting";
const BACK: &str = "broker reachable again; channel reconnected";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_brokers_connection_is_dropped_after_the_timeout_and_rebuilt_when_it_returns() {
    // Sessions outlast the pause, so the paused broker stays registered
    // and unfenced and its channel stays open: what drops the connection
    // is the channel's request timeout, not a fence closing the channel.
    // Slow elections keep one active controller through a busy machine.
    let mut c = Cluster::start(
        Spec::new(keel_bin(), CLUSTER_ID)
            .brokers(2)
            .metrics(true)
            .controller_flags(&[
                "--session-timeout-ms",
                "300000",
                "--raft-heartbeat-ms",
                "200",
                "--election-timeout-min-ms",
                "3000",
                "--election-timeout-max-ms",
                "4000",
            ])
            .broker_flags(&["--session-timeout-ms", "300000"]),
    )
    .expect("start a cluster");
    c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    let client = client(&c);
    // A first topic: both channels have had requests answered.
    create_topic(&client, "before", 2, 2).await;
    wait_total(&c, CONNECTS, 2, "broker 2's channel connected", |v| {
        v >= 1.0
    })
    .await;
    let disconnects = total(&c, DISCONNECTS, 2).await.expect("scrape");
    let connects = total(&c, CONNECTS, 2).await.expect("scrape");
    let (dropped, back) = (
        controllers_logged(&c, DROPPED),
        controllers_logged(&c, BACK),
    );

    // Broker 2 stops answering; its kernel still accepts (and buffers)
    // whatever is sent to it.
    c.broker_mut(1).process.pause();
    create_topic(&client, "during", 2, 2).await;
    wait_total(
        &c,
        DISCONNECTS,
        2,
        "the hung connection to broker 2 dropped",
        |v| v > disconnects,
    )
    .await;
    assert!(
        controllers_logged(&c, DROPPED) > dropped,
        "{}",
        c.log_tails(30)
    );
    // Broker 1 was never held up.
    let deadline = Instant::now() + LONG;
    while !broker_view(&c, 0)
        .await
        .is_some_and(|(topics, _)| topics.iter().any(|t| t == "during"))
    {
        assert!(
            Instant::now() < deadline,
            "broker 1 never learned of topic during"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Back: the channel connects again and broker 2 gets what it missed.
    c.broker_mut(1).process.resume();
    wait_total(&c, CONNECTS, 2, "broker 2's channel reconnected", |v| {
        v > connects
    })
    .await;
    let deadline = Instant::now() + LONG;
    loop {
        if let Some((topics, fenced)) = broker_view(&c, 1).await {
            if !fenced && topics.iter().any(|t| t == "during") {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "broker 2 never learned of topic during\n{}",
            c.log_tails(30)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let r = c.wait_all_brokers_active(LONG).await.unwrap();
    assert!(!broker_info(&r, 2).unwrap().fenced);
    assert!(controllers_logged(&c, BACK) > back, "{}", c.log_tails(30));
    c.check_alive().unwrap();
}
