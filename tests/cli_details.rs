//! Details of the admin CLI against real processes: `topics create
//! --if-not-exists` answers the existing topic's figures, `configs
//! describe` shows what is set unless `--all`, `topics describe` takes
//! kafka-topics' filter names, counts read "1 partition", and `log dump`
//! refuses a record type it does not know.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(90);

/// Three controllers and three brokers over mutual TLS with fast timings
/// and HTTP listeners (the console's `/api/cluster`).
fn tls_cluster() -> Cluster {
    Cluster::start(fast_spec(3).tls(true).metrics(true)).expect("start a TLS cluster")
}

/// Runs `keel <args>` as the admin user against `c` with the output
/// format the args give (the table unless `-o json`); bounded to 60 s.
fn keel(c: &Cluster, args: &[&str]) -> Ran {
    run_keel_as(c, keel_testkit::cluster::ADMIN_USER, args, "")
}

/// [`keel`], which must succeed.
fn keel_ok(c: &Cluster, args: &[&str]) -> Ran {
    let r = keel(c, args);
    assert_eq!(r.code, 0, "keel {args:?}: {}{}", r.stdout, r.stderr);
    r
}

/// `(topic, partition)` of every partition in a `topics describe` JSON.
fn described(v: &Value) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for t in v["topics"].as_array().expect("topics") {
        for p in t["partitions"].as_array().expect("partitions") {
            out.push((
                t["name"].as_str().unwrap().to_string(),
                p["partition"].as_u64().unwrap(),
            ));
        }
    }
    out.sort();
    out
}

/// The partitions `topics describe <args> -o json` lists.
fn describe_filtered(c: &Cluster, args: &[&str]) -> Vec<(String, u64)> {
    let r = keel_ok(c, &[&["topics", "describe", "-o", "json"], args].concat());
    described(&r.json())
}

/// The `name`s of a `configs describe` JSON.
fn config_names(v: &Value) -> Vec<String> {
    v["configs"]
        .as_array()
        .expect("configs")
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_if_not_exists_configs_overrides_and_log_dump_record_types() {
    let mut c = tls_cluster();
    c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();

    // A new topic of one partition: the count reads in the singular.
    let r = keel_ok(&c, &["topics", "create", "single", "-p", "1", "-r", "1"]);
    assert!(
        r.stdout.contains("with 1 partition, replication factor 1."),
        "{}",
        r.stdout
    );
    let made = keel_ok(
        &c,
        &[
            "topics", "create", "orders", "-p", "3", "-r", "2", "-o", "json",
        ],
    )
    .json();
    assert_eq!(made["created"], true, "{made}");
    assert_eq!(made["partitions"], 3, "{made}");

    // Again with --if-not-exists and other counts: the existing topic's
    // own figures, and that it was not created.
    let again = keel_ok(
        &c,
        &[
            "topics",
            "create",
            "orders",
            "-p",
            "1",
            "-r",
            "1",
            "--if-not-exists",
            "-o",
            "json",
        ],
    )
    .json();
    assert_eq!(again["name"], "orders", "{again}");
    assert_eq!(again["topic_id"], made["topic_id"], "{again}");
    assert_eq!(again["partitions"], 3, "{again}");
    assert_eq!(again["replication_factor"], 2, "{again}");
    assert_eq!(again["created"], false, "{again}");
    assert_eq!(again["existed"], true, "{again}");
    assert_eq!(again["validate_only"], false, "{again}");
    let r = keel_ok(&c, &["topics", "create", "orders", "--if-not-exists"]);
    assert!(
        r.stdout.starts_with("Topic orders already exists "),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("with 3 partitions, replication factor 2."),
        "{}",
        r.stdout
    );
    // Growing to a total reads right too.
    let r = keel_ok(&c, &["partitions", "set", "orders", "--total", "4"]);
    assert!(r.stdout.contains("now has 4 partitions."), "{}", r.stdout);

    // configs describe: what is set (the topic's own value, the cluster
    // default it takes), as kafka-configs shows; --all every config.
    keel_ok(
        &c,
        &[
            "configs",
            "alter",
            "--topic",
            "orders",
            "--add-config",
            "retention.ms=3600000",
        ],
    );
    keel_ok(
        &c,
        &[
            "configs",
            "alter",
            "--entity-default",
            "--add-config",
            "log.retention.bytes=1000000",
        ],
    );
    let set = keel_ok(
        &c,
        &["configs", "describe", "--topic", "orders", "-o", "json"],
    )
    .json();
    assert_eq!(set["topic"], "orders", "{set}");
    let mut names = config_names(&set);
    names.sort();
    assert_eq!(names, ["retention.bytes", "retention.ms"], "{set}");
    let sources: Vec<&str> = set["configs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["source"].as_str().unwrap())
        .collect();
    assert!(sources.contains(&"DYNAMIC_TOPIC_CONFIG"), "{set}");
    assert!(sources.contains(&"DYNAMIC_DEFAULT_BROKER_CONFIG"), "{set}");
    let overrides = keel_ok(
        &c,
        &[
            "configs",
            "describe",
            "--topic",
            "orders",
            "--overrides",
            "-o",
            "json",
        ],
    )
    .json();
    assert_eq!(overrides, set);
    let all = keel_ok(
        &c,
        &[
            "configs", "describe", "--topic", "orders", "--all", "-o", "json",
        ],
    )
    .json();
    let all_names = config_names(&all);
    assert!(all_names.len() > 20, "{all}");
    assert!(all_names.iter().any(|n| n == "cleanup.policy"), "{all}");
    let table = keel_ok(&c, &["configs", "describe", "--topic", "orders"]);
    assert!(table.stdout.contains("retention.ms"), "{}", table.stdout);
    assert!(!table.stdout.contains("cleanup.policy"), "{}", table.stdout);
    let table = keel_ok(&c, &["configs", "describe", "--topic", "orders", "--all"]);
    assert!(table.stdout.contains("cleanup.policy"), "{}", table.stdout);

    // log dump of a stopped controller: a known record type filters, an
    // unknown one is a usage error naming the valid ones.
    c.controller_mut(2).kill();
    let dir = c.controller(2).data_dir.clone();
    let dump = |types: &str| {
        std::process::Command::new(keel_bin())
            .args(["log", "dump", "--data-dir"])
            .arg(&dir)
            .args(["-o", "json", "--record-type", types])
            .output()
            .expect("run keel log dump")
    };
    let out = dump("topic");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\"orders\""), "{text}");
    let out = dump("Topic,Nope");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(err.contains("Nope"), "{err}");
    assert!(err.contains("RemoveTopic"), "{err}");
    assert!(err.contains("PartitionChange"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_filters_by_kafka_topics_names_and_a_lost_partition_reads_singular() {
    let mut c = tls_cluster();
    let active = c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    // Broker 3 is about to die. `atmin` keeps min.insync.replicas (2) of
    // its three; `undermin` drops below its 2; `lonely` lives on broker 3
    // alone; `safe` does not touch broker 3.
    let create = |name: &str, assignment: &str, min_isr: &str| {
        keel_ok(
            &c,
            &[
                "topics",
                "create",
                name,
                "--replica-assignment",
                assignment,
                "-c",
                &format!("min.insync.replicas={min_isr}"),
            ],
        );
    };
    create("atmin", "1:2:3", "2");
    create("undermin", "1:3", "2");
    create("lonely", "3", "1");
    create("safe", "1:2", "1");
    assert_eq!(
        describe_filtered(&c, &["--under-replicated-partitions"]),
        []
    );

    c.broker_mut(2).kill();
    let deadline = Instant::now() + LONG;
    loop {
        let shown = describe_filtered(&c, &["--unavailable-partitions"]);
        if shown == [("lonely".to_string(), 0)] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "lonely-0 never unavailable: {shown:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let p = |t: &str| (t.to_string(), 0u64);
    // The ISRs shrink once broker 3 is fenced, with the leader moves; an
    // ISR is never empty, so lonely's stays [3] (as in Kafka).
    let deadline = Instant::now() + LONG;
    loop {
        let shown = describe_filtered(&c, &["--under-replicated-partitions"]);
        if shown == [p("atmin"), p("undermin")] {
            break;
        }
        assert!(Instant::now() < deadline, "under-replicated: {shown:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        describe_filtered(&c, &["--under-min-isr-partitions"]),
        [p("undermin")]
    );
    // lonely's one in-sync replica is its min.insync.replicas.
    assert_eq!(
        describe_filtered(&c, &["--at-min-isr-partitions"]),
        [p("atmin"), p("lonely")]
    );
    assert_eq!(
        describe_filtered(
            &c,
            &["--under-min-isr-partitions", "--unavailable-partitions"]
        ),
        [p("lonely"), p("undermin")]
    );
    // The table shows the same partitions.
    let table = keel_ok(&c, &["topics", "describe", "--at-min-isr-partitions"]);
    assert!(table.stdout.contains("Topic: atmin "), "{}", table.stdout);
    assert!(!table.stdout.contains("Topic: safe "), "{}", table.stdout);

    // The controller's event of the one partition lost reads singular.
    let http = c.controller(active).metrics_addr.expect("an HTTP listener");
    let deadline = Instant::now() + LONG;
    loop {
        let v = console_api(http).await;
        let texts: Vec<&str> = v["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["text"].as_str())
            .collect();
        if texts.iter().any(|t| t.contains("went offline")) {
            assert!(
                texts.contains(&"1 partition went offline (no eligible leader)"),
                "{texts:?}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no offline event: {texts:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The console's `/api/cluster` of `addr` (`Null` when it does not answer).
async fn console_api(addr: std::net::SocketAddr) -> Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fetch = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req = format!("GET /api/cluster HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).await.ok()?;
        let (_, body) = text.split_once("\r\n\r\n")?;
        serde_json::from_str(body).ok()
    };
    tokio::time::timeout(Duration::from_secs(5), fetch)
        .await
        .ok()
        .flatten()
        .unwrap_or(Value::Null)
}
