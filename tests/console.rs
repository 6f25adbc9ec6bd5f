//! The controllers' web console on real processes: `/api/cluster` (read
//! with a plain HTTP client) and the page itself in a real browser
//! (Debian's chromium through chromium-driver, driven by Python selenium
//! from `target/venv`): a broker is killed and the page shows it fenced
//! and its partitions' leaders moved. A standby serves the page too, says
//! it is not the active controller and links to the one that is, and shows
//! when it last heard from the leader. `/health` answers on every node; a
//! topic deletion is an event of its own, not offline partitions, and an
//! operator's changes are events naming who made them.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use keel_testkit::{Addressing, Ports};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(90);

/// Three controllers and three brokers with fast timings, each on an
/// address of its own in `127.0.<net>.0/24` with the same ports on every
/// node of a role (as a deployment has them: a console links to the
/// active controller's at the same HTTP port on its host).
fn console_cluster(net: u8) -> Cluster {
    Cluster::start(console_spec(net)).expect("start a cluster")
}

/// The spec of [`console_cluster`].
fn console_spec(net: u8) -> Spec {
    fast_spec(3).metrics(true).addressing(Addressing::Subnet {
        net,
        ports: Ports::Fixed {
            controller: 9093,
            broker: 9092,
            controller_metrics: 9100,
            broker_metrics: 9101,
        },
    })
}

/// One HTTP GET on `addr` (bounded): status line and body.
async fn get(addr: SocketAddr, path: &str) -> Option<(String, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fetch = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).await.ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        Some((head.lines().next()?.to_string(), body.to_string()))
    };
    tokio::time::timeout(Duration::from_secs(5), fetch)
        .await
        .ok()?
}

/// `/api/cluster` of `addr`, once it answers and `ok` holds (bounded).
async fn cluster_until(addr: SocketAddr, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + LONG;
    let mut last = Value::Null;
    loop {
        if let Some((status, body)) = get(addr, "/api/cluster").await {
            assert!(status.contains(" 200 "), "{status}: {body}");
            last = serde_json::from_str(&body).expect("/api/cluster answers JSON");
            if ok(&last) {
                return last;
            }
        }
        assert!(Instant::now() < deadline, "{what}; last answer:\n{last:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn broker_state(v: &Value, id: u64) -> Option<&str> {
    v["brokers"].as_array()?.iter().find(|b| b["id"] == id)?["state"].as_str()
}

/// Partitions of `topic` in an answer.
fn partitions<'a>(v: &'a Value, topic: &str) -> Vec<&'a Value> {
    v["partitions"]
        .as_array()
        .map(|a| a.iter().filter(|p| p["topic"] == topic).collect())
        .unwrap_or_default()
}

fn holds(list: &Value, id: u64) -> bool {
    list.as_array().is_some_and(|a| a.iter().any(|x| *x == id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_cluster_shows_the_quorum_the_brokers_and_a_killed_broker_fenced() {
    let mut c = console_cluster(41);
    let active = c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    create_topic(&client(&c), "console", 3, 3).await;
    let at = c.controller(active).metrics_addr.unwrap();

    let v = cluster_until(at, "the active controller sees three active brokers", |v| {
        v["role"] == "active"
            && (1..=3).all(|b| broker_state(v, b) == Some("active"))
            && partitions(v, "console").len() == 3
    })
    .await;
    assert_eq!(v["cluster_id"], CLUSTER_ID);
    assert_eq!(v["quorum"]["voters"].as_array().unwrap().len(), 3, "{v:#}");
    assert_eq!(v["quorum"]["leader"], v["node_id"], "{v:#}");
    assert!(
        v["quorum"]["committed_index"].as_u64().unwrap() > 0,
        "{v:#}"
    );
    assert!(
        v["brokers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["last_heartbeat_ms"].is_u64()),
        "the active controller knows every heartbeat: {v:#}"
    );
    let topic = v["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "console")
        .expect("topic listed")
        .clone();
    assert_eq!(topic["partitions"], 3);
    assert_eq!(topic["replication_factor"], 3);
    assert_eq!(topic["under_replicated"], 0);

    // A standby answers too, says so and points at the active controller.
    let standby = c.controller((active + 1) % 3).metrics_addr.unwrap();
    let s = cluster_until(standby, "a standby's view", |v| {
        v["role"] == "standby" && v["active_controller"]["id"] == v["quorum"]["leader"]
    })
    .await;
    assert_eq!(
        s["active_controller"]["console_url"],
        format!("http://{at}/console"),
        "{s:#}"
    );
    assert!(
        s["brokers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["last_heartbeat_ms"].is_null()),
        "a standby does not know heartbeats: {s:#}"
    );
    // The page is served on both paths.
    for path in ["/", "/console"] {
        let (status, body) = get(standby, path).await.expect("page served");
        assert!(status.contains(" 200 "), "{status}");
        assert!(body.contains("api/cluster"), "{body}");
    }
    let (status, _) = get(standby, "/nowhere").await.expect("answered");
    assert!(status.contains(" 404 "), "{status}");

    // Broker 3 dies: fenced, its leaderships and ISR places gone.
    c.broker_mut(2).kill();
    let v = cluster_until(at, "broker 3 fenced and out of every ISR", |v| {
        broker_state(v, 3) == Some("fenced")
            && partitions(v, "console")
                .iter()
                .all(|p| p["leader"] != 3 && !holds(&p["isr"], 3))
    })
    .await;
    assert_eq!(v["health"]["fenced_brokers"], 1, "{v:#}");
    assert_eq!(v["health"]["under_replicated_partitions"], 3, "{v:#}");
    assert_eq!(v["health"]["offline_partitions"], 0, "{v:#}");
    assert!(
        partitions(&v, "console")
            .iter()
            .all(|p| p["under_replicated"] == true),
        "{v:#}"
    );
    assert!(
        v["events"].as_array().unwrap().iter().any(|e| e["text"]
            .as_str()
            .unwrap_or("")
            .contains("broker fenced: broker 3")),
        "the fence is among the last events: {v:#}"
    );
}

/// Milliseconds since `node` was last heard from, as the voter list of an
/// answer says.
fn last_contact(v: &Value, node: &Value) -> Option<u64> {
    v["quorum"]["voters"]
        .as_array()?
        .iter()
        .find(|x| x["id"] == *node)?["last_contact_ms"]
        .as_u64()
}

/// The texts of an answer's events.
fn event_texts(v: &Value) -> Vec<String> {
    v["events"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e["text"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The value of an unlabelled gauge in `/metrics` of `addr`.
async fn gauge(addr: SocketAddr, name: &str) -> Option<f64> {
    let (_, body) = get(addr, "/metrics").await?;
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_shows_when_it_last_heard_from_the_leader_and_health_answers_on_every_node() {
    let mut c = console_cluster(43);
    let active = c.wait_active(LONG).await.unwrap();
    let at = c.controller(active).metrics_addr.unwrap();
    let standby = c.controller((active + 1) % 3).metrics_addr.unwrap();

    // /health: 200 on every controller, naming its role.
    for (addr, role) in [(at, "active"), (standby, "standby")] {
        let deadline = Instant::now() + LONG;
        loop {
            let (status, body) = get(addr, "/health").await.expect("/health answers");
            assert!(status.contains(" 200 "), "{status}: {body}");
            let h: Value = serde_json::from_str(&body).expect("/health answers JSON");
            assert_eq!(h["status"], "up", "{h}");
            assert_eq!(h["cluster_id"], CLUSTER_ID, "{h}");
            if h["role"] == role {
                break;
            }
            assert!(Instant::now() < deadline, "{addr} never said {role}: {h}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // A healthy cluster, watched from a standby for a while: the leader's
    // last contact is when the standby last heard from it, so it stays
    // within a few heartbeats however long the leader has led.
    let s = cluster_until(standby, "a standby following the leader", |v| {
        v["role"] == "standby" && v["quorum"]["leader"].is_u64()
    })
    .await;
    let leader = s["quorum"]["leader"].clone();
    let until = Instant::now() + Duration::from_secs(6);
    let mut samples = 0;
    while Instant::now() < until {
        let v = cluster_until(standby, "the standby still answers", |_| true).await;
        if v["quorum"]["leader"] == leader {
            let ms = last_contact(&v, &leader);
            assert!(
                ms.is_some_and(|ms| ms < 3_000),
                "the standby's contact with leader {leader} is {ms:?} ms: {:#}",
                v["quorum"]
            );
            samples += 1;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(samples >= 5, "only {samples} samples under the same leader");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_topic_is_shown_as_deleted_not_offline_and_admin_changes_are_events() {
    // Over mutual TLS, so the controller knows who asks (the kit's
    // clients are user admin).
    let mut c = Cluster::start(console_spec(44).tls(true)).expect("start a TLS cluster");
    let active = c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    let client = client(&c);
    create_topic(&client, "doomed", 3, 3).await;
    let at = c.controller(active).metrics_addr.unwrap();

    // The creation is an event, naming who asked.
    let v = cluster_until(at, "the creation among the events", |v| {
        event_texts(v)
            .iter()
            .any(|t| t == "topic doomed created (3 partitions), by User:admin")
    })
    .await;
    assert_eq!(v["health"]["offline_partitions"], 0, "{v:#}");

    // Broker 3 down keeps the deletion in flight (its replicas wait for
    // it), with every partition leaderless because of the deletion.
    c.broker_mut(2).kill();
    cluster_until(at, "broker 3 fenced", |v| {
        broker_state(v, 3) == Some("fenced")
    })
    .await;
    delete_topic(&client, "doomed").await;

    let v = cluster_until(at, "the deletion in flight and among the events", |v| {
        !v["deletions"].as_array().unwrap().is_empty()
            && event_texts(v)
                .iter()
                .any(|t| t == "topic doomed deleted (3 partitions), by User:admin")
    })
    .await;
    assert_eq!(v["deletions"][0]["topic"], "doomed", "{v:#}");
    assert!(
        partitions(&v, "doomed")
            .iter()
            .all(|p| p["leader"].is_null() && p["offline"] == false && p["deleting"] == true),
        "{v:#}"
    );
    assert_eq!(v["health"]["offline_partitions"], 0, "{v:#}");
    assert!(
        !event_texts(&v).iter().any(|t| t.contains("went offline")),
        "a deletion is no partitions going offline: {:#}",
        v["events"]
    );
    // The metric the offline-partitions alert keys on agrees, on the
    // active controller and on a standby.
    let standby = c.controller((active + 1) % 3).metrics_addr.unwrap();
    for addr in [at, standby] {
        assert_eq!(
            gauge(addr, "keel_controller_offline_partitions").await,
            Some(0.0),
            "{addr}"
        );
    }
}

/// The Python the tests drive: `$KEEL_TEST_PYTHON`, else the venv
/// `scripts/test-deps.sh` makes.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("KEEL_TEST_PYTHON") {
        return p.into();
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/venv/bin/python");
    assert!(
        venv.exists(),
        "{} is missing: run scripts/test-deps.sh (it installs chromium, chromium-driver and selenium), or set KEEL_TEST_PYTHON",
        venv.display()
    );
    venv
}

/// The script's next line of output (bounded).
async fn next_line(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(120), rx.recv())
        .await
        .ok()
        .flatten()
}

/// Kills the browser script when the test ends, passed or not.
struct Script(Child);

impl Drop for Script {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_chromium_shows_a_killed_broker_fenced_and_its_partitions_moved() {
    let mut c = console_cluster(42);
    let active = c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    create_topic(&client(&c), "web", 3, 3).await;
    let at = c.controller(active).metrics_addr.unwrap();
    let standby = c.controller((active + 1) % 3).metrics_addr.unwrap();
    // Every partition led by a broker other than 3 once 3 dies: wait for
    // leaders first, so the page's "before" is settled.
    cluster_until(at, "three led partitions", |v| {
        partitions(v, "web").len() == 3 && partitions(v, "web").iter().all(|p| p["leader"].is_u64())
    })
    .await;

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/console_browser.py");
    let mut child = Script(
        Command::new(python())
            .arg(&script)
            .args([
                format!("http://{at}/console"),
                format!("http://{standby}/console"),
                "3".into(),
                "web".into(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the browser script"),
    );
    let stdout = child.0.stdout.take().unwrap();
    let mut stdin = child.0.stdin.take().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            eprintln!("console_browser.py: {line}");
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The page showed the healthy cluster; now broker 3 dies.
    let ready = next_line(&mut rx).await;
    assert_eq!(
        ready.as_deref(),
        Some("READY"),
        "the page never showed three active brokers"
    );
    c.broker_mut(2).kill();
    writeln!(stdin, "KILLED").unwrap();
    stdin.flush().unwrap();
    let done = next_line(&mut rx).await;
    assert_eq!(
        done.as_deref(),
        Some("PASS"),
        "the page did not show broker 3 fenced and its partitions moved\n{}",
        c.log_tails(20)
    );
    let status = child.0.wait().unwrap();
    assert!(status.success(), "console_browser.py exited {status}");
}
