//! Kafka AdminClients nobody here wrote, against real `keel` processes
//! over the default mutual TLS: librdkafka's (`confluent_kafka`) and
//! kafka-python's create, alter, describe and delete topics through a
//! broker's Kafka listener, which forwards them to the active controller
//! (as `Broker:<id>`, a super user in the kit). Each client's script in
//! `tests/python/` prints JSON; the test checks every Kafka error code it
//! reports and what Keel's own API says afterwards.
//!
//! Needs the Python venv `scripts/test-deps.sh` makes (`target/venv`, or
//! `$KEEL_TEST_PYTHON`).

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;
use keel_testkit::KafkaPorts;
use serde_json::{json, Value};

/// The Python the tests drive: `$KEEL_TEST_PYTHON`, else the venv
/// `scripts/test-deps.sh` makes.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("KEEL_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/venv/bin/python");
    assert!(
        venv.exists(),
        "{} is missing: run scripts/test-deps.sh (it installs confluent-kafka and kafka-python), or set KEEL_TEST_PYTHON",
        venv.display()
    );
    venv
}

/// Runs `tests/python/<script>` with `args` (bounded: 180 s); its JSON.
pub fn run_python(script: &str, args: &[&str]) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let out = Command::new("timeout")
        .arg("180")
        .arg(python())
        .arg(&path)
        .args(args)
        .output()
        .expect("run timeout(1)");
    assert!(
        out.status.success(),
        "{script} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("{script} printed no JSON ({e}): {stdout}"))
}

/// Three controllers, three brokers with Kafka listeners, mutual TLS;
/// returned once every broker is active and `bootstrap`'s cache lists all
/// three (as `kcat -L` reads it).
async fn tls_kafka_cluster(bootstrap: usize) -> (Cluster, String) {
    tls_kafka_cluster_with(bootstrap, true).await
}

/// [`tls_kafka_cluster`], with the brokers' `--kafka-admin` as `admin`.
async fn tls_kafka_cluster_with(bootstrap: usize, admin: bool) -> (Cluster, String) {
    let mut c = Cluster::start(
        fast_spec(3)
            .kafka(KafkaPorts::Free)
            .kafka_admin(admin)
            .tls(true),
    )
    .expect("start a TLS cluster with Kafka listeners");
    c.wait_all_brokers_active(Duration::from_secs(60))
        .await
        .expect("brokers active");
    let addr = c.kafka_addrs()[bootstrap].clone();
    for _ in 0..100 {
        let out = Command::new("timeout")
            .args(["20", "kcat", "-L", "-J", "-b", &addr])
            .output()
            .expect("run kcat (scripts/test-deps.sh installs it)");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if v["brokers"].as_array().is_some_and(|b| b.len() == 3) {
            return (c, addr);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{addr} never listed three brokers");
}

async fn keel_topics(c: &Cluster, prefix: &str) -> Vec<String> {
    admin::topic_names(&client(c))
        .await
        .expect("list topics")
        .into_iter()
        .filter(|t| t.starts_with(prefix))
        .collect()
}

/// The Kafka listener authenticates nobody: unless a broker is started
/// with `--kafka-admin`, admin requests reaching it are refused with
/// CLUSTER_AUTHORIZATION_FAILED (which clients do not retry) and change
/// nothing, even though the broker itself may administer the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_without_kafka_admin_refuses_admin_requests_and_changes_nothing() {
    let (c, addr) = tls_kafka_cluster_with(0, false).await;
    let r = run_python("create_one.py", &[&addr, "noadmin-t"]);
    assert_eq!(r["error"], json!("CLUSTER_AUTHORIZATION_FAILED(31)"), "{r}");
    assert!(keel_topics(&c, "noadmin").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_admin_client_administers_topics_through_a_broker() {
    let (c, bootstrap) = tls_kafka_cluster(1).await;
    let got = run_python("confluent_admin.py", &[&bootstrap, "ck-"]);
    eprintln!("{got:#}");

    // Errors as librdkafka names them, with Kafka's code:
    // TOPIC_EXCEPTION is INVALID_TOPIC_EXCEPTION, UNKNOWN_TOPIC_OR_PART
    // UNKNOWN_TOPIC_OR_PARTITION.
    assert_eq!(got["create_plain"], Value::Null);
    assert_eq!(got["create_validate_only"], Value::Null);
    assert_eq!(got["create_with_configs"], Value::Null);
    assert_eq!(got["create_duplicate"], "TOPIC_ALREADY_EXISTS(36)");
    assert_eq!(got["create_bad_name"], "TOPIC_EXCEPTION(17)");
    assert_eq!(got["create_rf_too_large"], "INVALID_REPLICATION_FACTOR(38)");
    assert_eq!(got["create_bad_config"], "INVALID_CONFIG(40)");
    // validate_only created nothing; the refused ones neither.
    assert_eq!(got["list_topics"], json!(["ck-configs", "ck-plain"]));
    assert_eq!(got["plain_partitions"], 3);
    assert_eq!(got["create_partitions"], Value::Null);
    assert_eq!(got["create_partitions_fewer"], "INVALID_PARTITIONS(37)");
    assert_eq!(got["plain_partitions_after"], 5);
    assert_eq!(
        got["describe_configs"],
        json!({
            "retention.ms": {"value": "1000", "default": false},
            "cleanup.policy": {"value": "compact", "default": false},
            "segment.ms": {"value": "604800000", "default": true},
        })
    );
    assert_eq!(got["describe_configs_unknown"], "UNKNOWN_TOPIC_OR_PART(3)");
    assert_eq!(got["incremental_alter_configs"], Value::Null);
    assert_eq!(
        got["configs_after_alter"],
        json!({
            "retention.ms": {"value": "2000", "default": false},
            "cleanup.policy": {"value": "delete", "default": true},
        })
    );
    assert_eq!(got["incremental_alter_bad_value"], "INVALID_CONFIG(40)");
    // APPEND and SUBTRACT start from the value in force (Kafka's default
    // "delete" after the DELETE above).
    assert_eq!(got["append"], Value::Null);
    assert_eq!(got["after_append"], "delete,compact");
    assert_eq!(got["subtract"], Value::Null);
    assert_eq!(got["after_subtract"], "compact");
    assert_eq!(got["append_not_a_list"], "INVALID_CONFIG(40)");
    assert_eq!(got["set_named_broker"], "INVALID_REQUEST(42)");
    assert_eq!(got["describe_cluster"]["cluster_id"], CLUSTER_ID);
    assert_eq!(got["describe_cluster"]["nodes"], json!([1, 2, 3]));
    // The controller a Kafka client is told of is the broker it asked
    // (librdkafka asks whichever broker it holds a connection to).
    let controller = got["describe_cluster"]["controller"].as_u64();
    assert!(
        matches!(controller, Some(1..=3)),
        "controller {controller:?}"
    );
    // Leaders are the preferred replicas already: nothing to elect.
    assert_eq!(
        got["elect_leaders_preferred"],
        json!({"ck-plain-0": "ELECTION_NOT_NEEDED(84)"})
    );
    assert_eq!(
        got["elect_leaders_unclean"],
        json!({"ck-plain-1": "ELECTION_NOT_NEEDED(84)"})
    );
    assert_eq!(
        got["delete_topics"],
        json!({"ck-plain": null, "ck-configs": null})
    );
    assert_eq!(got["delete_unknown"], "UNKNOWN_TOPIC_OR_PART(3)");

    // Keel's own API agrees.
    assert!(keel_topics(&c, "ck-").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_admin_client_administers_topics_through_a_broker() {
    let (c, bootstrap) = tls_kafka_cluster(0).await;
    let got = run_python("kafka_python_admin.py", &[&bootstrap, "kp-"]);
    eprintln!("{got:#}");

    assert_eq!(got["create"], json!({"kp-kp": 0}));
    assert_eq!(got["create_duplicate"], "TopicAlreadyExistsError");
    assert_eq!(got["list_topics"], json!(["kp-kp"]));
    assert_eq!(
        got["describe_configs"],
        json!({"error": 0, "retention.ms": "5000"})
    );
    assert_eq!(got["alter_configs"], json!([0]));
    assert_eq!(
        got["describe_configs_after"],
        json!({"error": 0, "retention.ms": "7000"})
    );
    // A cluster-wide default on the default broker resource (empty name),
    // under Kafka's broker name, is what a topic without its own value
    // takes; AlterConfigs replaces the whole set of defaults.
    assert_eq!(got["set_default"], json!([0]));
    assert_eq!(
        got["defaults"],
        json!({"error": 0, "configs": {"log.retention.ms": ["123456", 3]}})
    );
    assert_eq!(
        got["with_default"],
        json!({"error": 0, "configs": {"retention.ms": ["123456", 3], "segment.ms": ["604800000", 5]}})
    );
    assert_eq!(got["set_bad_default"], json!([40]));
    assert_eq!(got["replace_defaults"], json!([0]));
    assert_eq!(
        got["defaults_after_replace"],
        json!({"error": 0, "configs": {"log.segment.bytes": ["1048576", 3]}})
    );
    assert_eq!(
        got["with_default_after_replace"],
        json!({"error": 0, "configs": {"retention.ms": ["604800000", 5], "segment.ms": ["604800000", 5]}})
    );
    assert_eq!(got["clear_defaults"], json!([0]));
    assert_eq!(got["describe_cluster"]["cluster_id"], CLUSTER_ID);
    assert_eq!(got["describe_cluster"]["brokers"], json!([1, 2, 3]));
    assert_eq!(got["delete"], json!({"kp-kp": 0}));
    assert_eq!(got["list_topics_after"], json!([]));
    assert!(keel_topics(&c, "kp-").await.is_empty());
}

/// While a client creates topics one at a time through a broker, the
/// active controller is killed. Every create answered with success exists
/// afterwards with the partitions asked for; every other answer is an
/// error a Kafka client retries (NOT_CONTROLLER, REQUEST_TIMED_OUT), or
/// TOPIC_ALREADY_EXISTS for a topic whose first attempt librdkafka itself
/// resent; nothing exists that was not asked for, nothing twice.
/// (librdkafka, with `operation_timeout=0` as here, reads REQUEST_TIMED_OUT
/// as "creation started": a create in flight when the controller died
/// must not get it, or it would count as a success that never happened.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_sent_while_the_active_controller_fails_over_is_applied_once_or_retriable() {
    let (mut c, bootstrap) = tls_kafka_cluster(2).await;
    let active = c
        .wait_active(Duration::from_secs(30))
        .await
        .expect("an active controller");
    let n = 60;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/failover_creates.py");
    let child = Command::new("timeout")
        .arg("300")
        .arg(python())
        .arg(&script)
        .args([bootstrap.as_str(), "fo-", &n.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start failover_creates.py");
    // Kill the active controller once some creates went through.
    for _ in 0..600 {
        if keel_topics(&c, "fo-").await.len() >= 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before_kill = keel_topics(&c, "fo-").await.len();
    c.controller_mut(active).kill();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .expect("failover_creates.py ran");
    assert!(
        out.status.success(),
        "failover_creates.py: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<(String, Option<String>)> =
        serde_json::from_slice(&out.stdout).expect("JSON answers");
    eprintln!("{answers:?}");
    assert_eq!(answers.len(), n);

    let exists: std::collections::BTreeSet<String> =
        keel_topics(&c, "fo-").await.into_iter().collect();
    let mut retriable = 0;
    for (topic, answer) in &answers {
        match answer.as_deref() {
            None => assert!(exists.contains(topic), "{topic} was created, then lost"),
            Some("NOT_CONTROLLER(41)") | Some("REQUEST_TIMED_OUT(7)") => retriable += 1,
            Some("TOPIC_ALREADY_EXISTS(36)") => {
                assert!(exists.contains(topic), "{topic}: exists, said the broker")
            }
            Some(other) => panic!("{topic}: {other} is neither success nor retriable"),
        }
    }
    let asked: std::collections::BTreeSet<&String> = answers.iter().map(|(t, _)| t).collect();
    assert!(exists.iter().all(|t| asked.contains(t)), "{exists:?}");
    let client = client(&c);
    for t in &exists {
        let d = admin::describe_topic(&client, t)
            .await
            .expect("describe")
            .expect("the topic");
        assert_eq!(d.partitions.len(), 2, "{t}");
    }
    // The failover happened while creates were being sent, and the later
    // ones succeeded through the new active controller.
    assert!(before_kill < n, "every create was done before the kill");
    assert!(answers[n - 1].1.is_none(), "{:?}", answers[n - 1]);
    eprintln!("{retriable} retriable answers; {before_kill} topics before the kill");
}
