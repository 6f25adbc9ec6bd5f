//! Kafka clients nobody here wrote, against real `keel` processes over
//! the Kafka listeners' TLS (the node's own certificate and the cluster
//! CA): librdkafka's (`confluent_kafka`, kcat) and kafka-python's. Over SSL
//! a client's certificate names its user; over SASL_SSL (brokers started
//! with `--kafka-ssl-client-auth requested`) a SCRAM login does. A broker
//! forwards admin requests as the client, and the active controller
//! authorizes that principal against the ACLs (only `User:admin` is a
//! super user in the kit): the AdminClients administer what they are
//! granted and nothing else, intruders get nothing, and refusals write
//! nothing. Each client's script in `tests/python/` prints JSON; the test
//! checks every Kafka error code it reports and what Keel's own API says
//! afterwards.
//!
//! Needs the Python venv `scripts/test-deps.sh` makes (`target/venv`, or
//! `$KEEL_TEST_PYTHON`) and kcat.

mod common;

use std::time::Duration;

use common::*;
use keel_testkit::KafkaPorts;
use keel_tls::Identity;
use serde_json::{json, Value};

/// Brokers' `--kafka-ssl-client-auth`: a client without a certificate may
/// log in with SASL (or is `User:ANONYMOUS`).
const CLIENT_AUTH_REQUESTED: [&str; 2] = ["--kafka-ssl-client-auth", "requested"];

/// Three controllers, three brokers with Kafka listeners, mutual TLS;
/// returned once every broker is active and `bootstrap`'s cache lists all
/// three (as `kcat -L` over SSL as the admin user reads it).
async fn tls_kafka_cluster(bootstrap: usize) -> (Cluster, String) {
    tls_kafka_cluster_with(bootstrap, &[]).await
}

/// [`tls_kafka_cluster`], the brokers started with `broker_flags` too.
async fn tls_kafka_cluster_with(bootstrap: usize, broker_flags: &[&str]) -> (Cluster, String) {
    let mut c = Cluster::start(
        fast_spec(3)
            .kafka(KafkaPorts::Free)
            .tls(true)
            .broker_flags(broker_flags),
    )
    .expect("start a TLS cluster with Kafka listeners");
    c.wait_all_brokers_active(Duration::from_secs(60))
        .await
        .expect("brokers active");
    let addr = c.kafka_addrs()[bootstrap].clone();
    let admin = KafkaSecurity::admin(&c);
    let mut last = String::new();
    for _ in 0..100 {
        match kcat_list(&addr, &admin) {
            Ok(v) if kcat_brokers_and_topics(&v).0.len() == 3 => return (c, addr),
            Ok(v) => last = v.to_string(),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{addr} never listed three brokers: {last}");
}

async fn keel_topics(c: &Cluster, prefix: &str) -> Vec<String> {
    admin::topic_names(&client(c))
        .await
        .expect("list topics")
        .into_iter()
        .filter(|t| t.starts_with(prefix))
        .collect()
}

/// Waits (bounded: 60 s in all) until every broker's Kafka listener lets
/// `security` in and lists `topics` to it (users, credentials and ACLs
/// reach brokers a moment after the controller took them); the last
/// listing.
async fn wait_listed(c: &Cluster, security: &KafkaSecurity, topics: &[&str]) -> Value {
    let want = (
        vec![1, 2, 3],
        topics.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut last = Ok(Value::Null);
    for addr in c.kafka_addrs() {
        loop {
            last = kcat_list(&addr, security);
            let listed = matches!(&last, Ok(v) if kcat_brokers_and_topics(v) == want);
            if listed || std::time::Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let v = last
            .as_ref()
            .unwrap_or_else(|e| panic!("{e}\n{}", c.log_tails(30)));
        assert_eq!(kcat_brokers_and_topics(v), want, "{addr} as {security:?}");
    }
    last.unwrap()
}

/// How the Kafka path refuses an intruder.
#[derive(Clone, Copy, Debug)]
enum Refusal {
    /// No connection (the TLS handshake fails, or the listener closes on a
    /// node's certificate): kcat lists nothing, and a CreateTopics gets no
    /// answer from Keel (librdkafka gives up with a local error, code < 0,
    /// after reporting its failed connections).
    Connection,
    /// The SASL login fails: SASL_AUTHENTICATION_FAILED with Kafka's words,
    /// which librdkafka reports as `_AUTHENTICATION`.
    Login,
    /// Let in (kcat lists the cluster), but the create is refused for want
    /// of an ACL: TOPIC_ or CLUSTER_AUTHORIZATION_FAILED.
    Authorization,
}

/// A Kafka client that must not create `topic`.
struct Intruder {
    who: &'static str,
    topic: &'static str,
    security: KafkaSecurity,
    refused: Refusal,
}

/// Every intruder (at once) lists the cluster with kcat and creates its
/// topic with `create_one.py` (request bounded to 10 s) through the Kafka
/// listener at `addr`; each must be refused as it says. Checks nothing of
/// what was written: the caller asks Keel.
fn all_refused(addr: &str, intruders: &[Intruder]) {
    std::thread::scope(|s| {
        let runs: Vec<_> = intruders
            .iter()
            .map(|i| {
                s.spawn(move || {
                    let listed = kcat_list(addr, &i.security);
                    let created = run_python(
                        "create_one.py",
                        &[addr, i.topic, "10"],
                        &i.security.librdkafka_json(),
                    );
                    (listed, created)
                })
            })
            .collect();
        for (i, run) in intruders.iter().zip(runs) {
            let (listed, created) = run.join().unwrap();
            let who = i.who;
            eprintln!("{who}: {created}");
            let error = created["error"].as_str().unwrap_or_default();
            match i.refused {
                Refusal::Connection => {
                    assert!(listed.is_err(), "{who}: kcat listed {listed:?}");
                    assert!(error.contains("(-"), "{who}: {created}");
                    assert_ne!(created["client_errors"], json!({}), "{who}: {created}");
                }
                Refusal::Login => {
                    assert!(listed.is_err(), "{who}: kcat listed {listed:?}");
                    assert!(error.contains("(-"), "{who}: {created}");
                    let why = created["client_errors"]["_AUTHENTICATION(-169)"]
                        .as_str()
                        .unwrap_or_default();
                    assert!(why.contains("invalid credentials"), "{who}: {created}");
                }
                Refusal::Authorization => {
                    assert!(listed.is_ok(), "{who}: {listed:?}");
                    assert!(
                        matches!(
                            error,
                            "TOPIC_AUTHORIZATION_FAILED(29)" | "CLUSTER_AUTHORIZATION_FAILED(31)"
                        ),
                        "{who}: {created}"
                    );
                }
            }
        }
    })
}

/// On the default listener (`ssl.client.auth=required`) the admin user's
/// certificate lists the cluster with kcat; a client without TLS, one
/// without a certificate, one with a certificate of another CA (naming
/// `admin` of this very cluster) and one presenting a broker's own
/// certificate get no connection, and write nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_user_certificate_of_the_cluster_ca_gets_through_the_default_listener() {
    let (c, addr) = tls_kafka_cluster(0).await;
    admin::create_topic(&client(&c), "payroll", 1, 1)
        .await
        .expect("payroll created");
    let listed = wait_listed(&c, &KafkaSecurity::admin(&c), &["payroll"]).await;
    assert_eq!(
        listed["topics"][0]["partitions"].as_array().map(Vec::len),
        Some(1)
    );

    let foreign = tempfile::tempdir().unwrap();
    keel_tls::certs::init(
        foreign.path(),
        &keel_tls::certs::InitSpec {
            cluster_id: CLUSTER_ID.into(),
            users: vec!["admin".into()],
            ..Default::default()
        },
    )
    .expect("a foreign CA and its admin certificate");
    let foreign_admin = KafkaSecurity::Ssl {
        ca: c.certs_dir().unwrap().join("ca.pem"),
        cert: Some(keel_tls::certs::paths(
            foreign.path(),
            &Identity::user(CLUSTER_ID, "admin"),
        )),
    };
    let intruder = |who, topic, security| Intruder {
        who,
        topic,
        security,
        refused: Refusal::Connection,
    };
    all_refused(
        &addr,
        &[
            intruder("no TLS", "intruder-plain", KafkaSecurity::Plaintext),
            intruder(
                "TLS without a certificate",
                "intruder-nocert",
                KafkaSecurity::no_certificate(&c),
            ),
            intruder(
                "admin's certificate from a foreign CA",
                "intruder-foreign",
                foreign_admin,
            ),
            intruder(
                "broker 1's certificate",
                "intruder-broker",
                KafkaSecurity::certificate_of(&c, &Identity::broker(CLUSTER_ID, 1)),
            ),
        ],
    );
    // The listener said why (its log; the audit side).
    let log = c.broker(0).process.log_text();
    assert!(log.contains("TLS handshake refused"), "{log}");
    // (The foreign CA bears the cluster CA's name: its certificate's
    // signature is what fails.)
    assert!(
        log.contains("invalid peer certificate"),
        "the foreign CA: {log}"
    );
    assert!(log.contains("a node's certificate"), "broker 1's: {log}");
    assert!(keel_topics(&c, "intruder-").await.is_empty());
}

/// With `--kafka-ssl-client-auth requested`, kcat logs in over SASL_SSL
/// with SCRAM-SHA-512 (and SCRAM-SHA-256) as users `keel users create`
/// made, and lists the cluster: every broker, and only the topics each
/// user may describe. A wrong password, an unknown user and a mechanism
/// the user has no credential for are refused at login; a user without
/// ACLs, one with Describe only and a client with neither certificate nor
/// login (`User:ANONYMOUS`) get in but may not create. Nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_lists_the_cluster_over_sasl_ssl_and_logins_without_acls_change_nothing() {
    let (c, addr) = tls_kafka_cluster_with(1, &CLIENT_AUTH_REQUESTED).await;
    let client = client(&c);
    for t in ["carol-t", "secret-payroll"] {
        admin::create_topic(&client, t, 1, 1)
            .await
            .expect("topic created");
    }
    create_scram_user(&c, "carol", "SCRAM-SHA-512", "carol-secret");
    create_scram_user(&c, "dave", "SCRAM-SHA-256", "dave-secret");
    allow_on_topic_prefix(&c, "carol", &["describe"], "carol-");

    // Carol may describe her topics only; dave and ANONYMOUS nothing.
    let carol = KafkaSecurity::scram(&c, "SCRAM-SHA-512", "carol", "carol-secret");
    let dave = KafkaSecurity::scram(&c, "SCRAM-SHA-256", "dave", "dave-secret");
    let anonymous = KafkaSecurity::no_certificate(&c);
    wait_listed(&c, &carol, &["carol-t"]).await;
    wait_listed(&c, &dave, &[]).await;
    wait_listed(&c, &anonymous, &[]).await;

    let scram = |mechanism, user, password| KafkaSecurity::scram(&c, mechanism, user, password);
    all_refused(
        &addr,
        &[
            Intruder {
                who: "carol with a wrong password",
                topic: "intruder-wrong",
                security: scram("SCRAM-SHA-512", "carol", "not-carols"),
                refused: Refusal::Login,
            },
            Intruder {
                who: "an unknown user",
                topic: "intruder-unknown",
                security: scram("SCRAM-SHA-512", "mallory", "carol-secret"),
                refused: Refusal::Login,
            },
            Intruder {
                who: "carol with a mechanism she has no credential for",
                topic: "intruder-mechanism",
                security: scram("SCRAM-SHA-256", "carol", "carol-secret"),
                refused: Refusal::Login,
            },
            Intruder {
                who: "dave, without ACLs",
                topic: "intruder-dave",
                security: dave,
                refused: Refusal::Authorization,
            },
            Intruder {
                who: "carol, who may describe only",
                topic: "carol-new",
                security: carol,
                refused: Refusal::Authorization,
            },
            Intruder {
                who: "User:ANONYMOUS",
                topic: "intruder-anonymous",
                security: anonymous,
                refused: Refusal::Authorization,
            },
        ],
    );
    assert!(keel_topics(&c, "intruder-").await.is_empty());
    assert_eq!(keel_topics(&c, "carol-").await, ["carol-t"]);
}

/// AdminClients as user `alice`, granted create, describe, alter and
/// delete (and their configs' counterparts) on topics `alice-*` only:
/// confluent-kafka and kafka-python, both over SASL_SSL with SCRAM-SHA-512
/// (librdkafka with SaslHandshake v1 and SaslAuthenticate, kafka-python
/// 2.0.2 with SaslHandshake v0 and raw tokens). Both administer their
/// prefix; `bob-*` (not granted) and `secret-payroll` (the admin's) are
/// refused with TOPIC_AUTHORIZATION_FAILED, the latter never listed;
/// nothing of it is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_clients_as_alice_administer_her_prefix_and_nothing_else() {
    let (c, addr) = tls_kafka_cluster_with(2, &CLIENT_AUTH_REQUESTED).await;
    let client = client(&c);
    admin::create_topic(&client, "secret-payroll", 1, 1)
        .await
        .expect("secret-payroll created");
    create_scram_user(&c, "alice", "SCRAM-SHA-512", "alice-secret");
    allow_on_topic_prefix(
        &c,
        "alice",
        &[
            "create",
            "describe",
            "alter",
            "delete",
            "describe-configs",
            "alter-configs",
        ],
        "alice-",
    );
    let sasl = KafkaSecurity::scram(&c, "SCRAM-SHA-512", "alice", "alice-secret");
    wait_listed(&c, &sasl, &[]).await;
    let denied = "TOPIC_AUTHORIZATION_FAILED(29)";

    let got = run_python(
        "confluent_acls.py",
        &[&addr, "alice-ck-", "bob-x", "secret-payroll"],
        &sasl.librdkafka_json(),
    );
    eprintln!("{got:#}");
    assert_eq!(got["create"], Value::Null);
    assert_eq!(got["visible"], json!(["alice-ck-t"]));
    assert_eq!(got["hidden_by_name"], denied);
    assert_eq!(got["describe_configs"], "1000");
    assert_eq!(got["alter_configs"], Value::Null);
    assert_eq!(got["configs_after_alter"], "2000");
    assert_eq!(got["create_partitions"], Value::Null);
    assert_eq!(got["partitions_after"], 4);
    assert_eq!(got["create_forbidden"], denied);
    assert_eq!(got["describe_configs_forbidden"], denied);
    assert_eq!(got["describe_configs_hidden"], denied);
    assert_eq!(got["alter_configs_hidden"], denied);
    assert_eq!(got["create_partitions_hidden"], denied);
    assert_eq!(got["delete_hidden"], denied);
    assert_eq!(got["delete_forbidden"], denied);
    assert_eq!(got["delete"], Value::Null);
    assert_eq!(got["visible_after"], json!([]));

    let got = run_python(
        "kafka_python_acls.py",
        &[&addr, "alice-kp-", "bob-y", "secret-payroll"],
        &sasl.kafka_python(),
    );
    eprintln!("{got:#}");
    assert_eq!(got["create"], json!({"alice-kp-kp": 0}));
    assert_eq!(got["visible"], json!(["alice-kp-kp"]));
    assert_eq!(got["hidden_by_name"], json!([29]));
    assert_eq!(
        got["describe_configs"],
        json!({"error": 0, "retention.ms": "5000"})
    );
    assert_eq!(got["alter_configs"], json!([0]));
    assert_eq!(
        got["describe_configs_after"],
        json!({"error": 0, "retention.ms": "7000"})
    );
    assert_eq!(got["create_partitions"], json!({"alice-kp-kp": 0}));
    assert_eq!(got["create_forbidden"], "TopicAuthorizationFailedError");
    assert_eq!(got["describe_configs_forbidden"], 29);
    assert_eq!(got["alter_configs_hidden"], json!([29]));
    assert_eq!(got["delete_hidden"], "TopicAuthorizationFailedError");
    assert_eq!(got["delete"], json!({"alice-kp-kp": 0}));
    assert_eq!(got["visible_after"], json!([]));

    // Keel's own API agrees: alice's topics are gone, bob's never were,
    // the admin's is untouched.
    assert!(keel_topics(&c, "alice-").await.is_empty());
    assert!(keel_topics(&c, "bob-").await.is_empty());
    let payroll = admin::describe_topic(&client, "secret-payroll")
        .await
        .expect("describe")
        .expect("secret-payroll is still there");
    assert_eq!(payroll.partitions.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_admin_client_administers_topics_through_a_broker() {
    let (c, bootstrap) = tls_kafka_cluster(1).await;
    let admin_ssl = KafkaSecurity::admin(&c).librdkafka_json();
    let got = run_python("confluent_admin.py", &[&bootstrap, "ck-"], &admin_ssl);
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
    let admin_ssl = KafkaSecurity::admin(&c).kafka_python();
    let got = run_python("kafka_python_admin.py", &[&bootstrap, "kp-"], &admin_ssl);
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
    let child = python_script(
        "failover_creates.py",
        300,
        &[bootstrap.as_str(), "fo-", &n.to_string()],
        &KafkaSecurity::admin(&c).librdkafka_json(),
    )
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
    assert_script_ok("failover_creates.py", &out);
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
