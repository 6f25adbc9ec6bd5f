//! The operator surface: `keel dev` started and stopped by a test, every
//! admin subcommand's happy path and a refusal, JSON parsed, `keel log dump`
//! on a real data dir.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::keel_bin;
use serde_json::{json, Value};

/// Runs `keel <args> --output json` against the dev cluster.
fn keel(args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(keel_bin())
        .args(args)
        .args(["--output", "json"])
        .env_remove("KEEL_BOOTSTRAP")
        .output()
        .expect("run keel");
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let said = common::said(&v, &String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), v, said)
}

fn ok(args: &[&str]) -> Value {
    let (code, v, err) = keel(args);
    assert_eq!(code, 0, "keel {args:?} failed: {err}");
    v
}

fn refused(args: &[&str], code_name: &str) {
    let (code, _, err) = keel(args);
    assert_eq!(code, 1, "keel {args:?} should be refused: {err}");
    assert!(
        err.contains(code_name),
        "keel {args:?}: expected {code_name} in {err}"
    );
}

/// A JSON array of numbers (broker ids), as numbers.
fn numbers(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("{v} is not an array"))
        .iter()
        .map(|n| {
            n.as_u64()
                .unwrap_or_else(|| panic!("{n} in {v} is not a number"))
        })
        .collect()
}

/// `numbers`, sorted.
fn sorted(v: &Value) -> Vec<u64> {
    let mut n = numbers(v);
    n.sort_unstable();
    n
}

/// The partitions of `keel topics describe --topic <name>`, checked to be
/// the one topic asked for, with the id it was created with and in
/// partition order.
fn describe_partitions(name: &str, topic_id: &str) -> Vec<Value> {
    let d = ok(&["topics", "describe", "--topic", name]);
    let topics = d["topics"].as_array().expect("topics");
    assert_eq!(topics.len(), 1, "{d}");
    let t = &topics[0];
    assert_eq!(t["name"], name, "{t}");
    assert_eq!(t["topic_id"], topic_id, "{t}");
    assert_eq!(t["marked_for_deletion"], false, "{t}");
    let partitions = t["partitions"].as_array().expect("partitions").clone();
    let indexes: Vec<u64> = partitions
        .iter()
        .map(|p| p["partition"].as_u64().expect("partition"))
        .collect();
    assert_eq!(
        indexes,
        (0..partitions.len() as u64).collect::<Vec<_>>(),
        "{t}"
    );
    partitions
}

/// A partition every replica of which is in sync and online, with no
/// reassignment in flight.
fn assert_healthy(p: &Value) {
    assert_eq!(sorted(&p["isr"]), sorted(&p["replicas"]), "{p}");
    assert!(
        numbers(&p["replicas"]).contains(&p["leader"].as_u64().expect("a leader")),
        "{p}"
    );
    assert_eq!(p["adding"], json!([]), "{p}");
    assert_eq!(p["removing"], json!([]), "{p}");
    assert_eq!(p["offline"], json!([]), "{p}");
    assert_eq!(p["state"], "online", "{p}");
}

fn processes_using(dir: &str) -> Vec<String> {
    let out = Command::new("pgrep")
        .args(["-af", dir])
        .output()
        .expect("pgrep");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("keel") && !l.contains("pgrep"))
        .map(String::from)
        .collect()
}

/// Stops `keel dev` and anything it started, even when the test fails.
struct DevGuard {
    pid: u32,
    dir: String,
}

impl Drop for DevGuard {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.pid.to_string()])
            .status();
        std::thread::sleep(Duration::from_millis(500));
        let _ = Command::new("pkill").args(["-9", "-f", &self.dir]).status();
    }
}

#[test]
fn dev_cluster_and_every_admin_command() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("dev");
    let data_s = data.display().to_string();
    let mut dev = Command::new(keel_bin())
        .args(["dev", "--fresh", "--dir", &data_s])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start keel dev");
    let _guard = DevGuard {
        pid: dev.id(),
        dir: data_s.clone(),
    };
    let stdout = dev.stdout.take().unwrap();
    let rx = common::lines_of(stdout);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(l) if l.contains("is up") => break,
            _ => assert!(Instant::now() < deadline, "keel dev did not come up"),
        }
    }

    // Quorum and cluster.
    let q = ok(&["quorum", "describe"]);
    assert_eq!(q["cluster_id"], "keel-dev");
    let leader = q["leader_id"].as_u64().expect("leader_id");
    assert!((1..=3).contains(&leader), "{q}");
    let term = q["term"].as_u64().expect("term");
    assert!(term >= 1, "{q}");
    let commit = q["commit_index"].as_u64().expect("commit_index");
    assert!(commit >= 1, "{q}");
    let voters = q["voters"].as_array().expect("voters");
    assert_eq!(
        voters
            .iter()
            .map(|v| v["id"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![1, 2, 3],
        "{q}"
    );
    for v in voters {
        let id = v["id"].as_u64().unwrap();
        assert_eq!(v["address"], format!("127.0.0.1{id}:9093"), "{v}");
        assert!(v["lag"].is_u64(), "{v}");
        if id == leader {
            assert_eq!(v["status"], "leader", "{v}");
            assert_eq!(v["lag"], 0, "{v}");
            assert_eq!(v["last_contact_ms"], 0, "{v}");
            assert!(v["last_log_index"].as_u64().unwrap() >= commit, "{v}");
        } else {
            assert_eq!(v["status"], "follower", "{v}");
        }
    }
    // Output into a pipe that is already closed (`| head -1` that has
    // read its line): a quiet exit 0, no panic.
    let mut closed = Command::new(keel_bin())
        .args(["topics", "list"])
        .env_remove("KEEL_BOOTSTRAP")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(closed.stdout.take());
    let out = closed.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let c = ok(&["cluster", "describe"]);
    assert_eq!(c["cluster_id"], "keel-dev");
    let epoch = c["controller_epoch"].as_u64().expect("controller_epoch");
    assert!(epoch >= term, "{c}");
    if epoch == term {
        assert_eq!(c["controller_id"], leader, "{c}");
    }
    let brokers = c["brokers"].as_array().expect("brokers");
    assert_eq!(
        brokers
            .iter()
            .map(|b| b["id"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![1, 2, 3],
        "{c}"
    );
    for b in brokers {
        let id = b["id"].as_u64().unwrap();
        assert_eq!(b["address"], format!("127.0.0.2{id}:9092"), "{b}");
        assert_eq!(b["state"], "active", "{b}");
        assert_eq!(b["rack"], Value::Null, "{b}");
        assert!(b["epoch"].as_u64().unwrap() >= 1, "{b}");
        assert!(b["last_heartbeat_ms"].is_u64(), "{b}");
        assert!(!b["log_dirs"].as_array().unwrap().is_empty(), "{b}");
        assert_eq!(b["offline_log_dirs"], json!([]), "{b}");
    }
    // Every controller, with the Kafka listener it reports itself (keel
    // dev gives each one on port 9095).
    let controllers = c["controllers"].as_array().expect("controllers");
    assert_eq!(
        controllers
            .iter()
            .map(|k| k["id"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![1, 2, 3],
        "{c}"
    );
    for k in controllers {
        let id = k["id"].as_u64().unwrap();
        assert_eq!(k["address"], format!("127.0.0.1{id}:9093"), "{k}");
        assert_eq!(k["kafka_address"], format!("127.0.0.1{id}:9095"), "{k}");
        assert_eq!(k["error"], Value::Null, "{k}");
    }
    // A snapshot on the first bootstrap node covers what it applied and
    // purges the log behind it. That node may be a follower still applying
    // the commit index seen above, so it is asked again (bounded) until its
    // snapshot reaches that index.
    let mut s = ok(&["quorum", "snapshot", "--purge-log"]);
    for _ in 0..50 {
        if s["last_index"].as_u64().unwrap() >= commit {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        s = ok(&["quorum", "snapshot", "--purge-log"]);
    }
    let last = s["last_index"].as_u64().unwrap();
    assert!(last >= commit, "{s}");
    assert!(s["size_bytes"].as_u64().unwrap() > 0, "{s}");
    assert!(s["image_bytes"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["purged_index"].as_u64().unwrap(), last, "{s}");

    // Topics.
    let created = ok(&[
        "topics",
        "create",
        "clicks",
        "--partitions",
        "3",
        "--replication-factor",
        "2",
    ]);
    let topic_id = created["topic_id"].as_str().expect("topic_id").to_string();
    assert!(!topic_id.is_empty(), "{created}");
    assert_eq!(
        created,
        json!({
            "name": "clicks",
            "topic_id": topic_id,
            "partitions": 3,
            "replication_factor": 2,
            "validate_only": false,
            "created": true,
            "existed": false,
        })
    );
    let checked = ok(&[
        "topics",
        "create",
        "views",
        "--partitions",
        "4",
        "--replication-factor",
        "3",
        "--validate-only",
    ]);
    assert_eq!(checked["name"], "views", "{checked}");
    assert_eq!(checked["partitions"], 4, "{checked}");
    assert_eq!(checked["replication_factor"], 3, "{checked}");
    assert_eq!(checked["validate_only"], true, "{checked}");
    // A manual assignment on its own: its rows and width are the counts.
    let assigned = ok(&[
        "topics",
        "create",
        "placed",
        "--replica-assignment",
        "1:2,2:3",
        "--validate-only",
    ]);
    assert_eq!(assigned["partitions"], 2, "{assigned}");
    assert_eq!(assigned["replication_factor"], 2, "{assigned}");
    refused(
        &[
            "topics",
            "create",
            "placed",
            "--partitions",
            "3",
            "--replica-assignment",
            "1:2,2:3",
        ],
        "INVALID_REQUEST",
    );
    refused(&["topics", "create", "bad/name"], "INVALID_TOPIC_NAME");
    refused(
        &["topics", "create", "big", "--replication-factor", "9"],
        "INVALID_REPLICATION_FACTOR",
    );
    assert_eq!(ok(&["topics", "list"]), json!({"topics": ["clicks"]}));
    // As created: replication factor 2 on distinct brokers, the first
    // replica leads, every replica in sync, epochs untouched.
    let partitions = describe_partitions("clicks", &topic_id);
    assert_eq!(partitions.len(), 3);
    for p in &partitions {
        let replicas = numbers(&p["replicas"]);
        assert_eq!(replicas.len(), 2, "{p}");
        assert_ne!(replicas[0], replicas[1], "{p}");
        assert!(replicas.iter().all(|b| (1..=3).contains(b)), "{p}");
        assert_eq!(p["leader"], replicas[0], "{p}");
        assert_eq!(numbers(&p["isr"]), replicas, "{p}");
        assert_eq!(p["leader_epoch"], 0, "{p}");
        assert_eq!(p["partition_epoch"], 0, "{p}");
        assert_healthy(p);
    }
    assert_eq!(
        ok(&[
            "topics",
            "alter-config",
            "clicks",
            "--set",
            "retention.ms=1000",
        ]),
        json!({"name": "clicks", "altered": true})
    );
    refused(
        &[
            "topics",
            "alter-config",
            "clicks",
            "--set",
            "unclean.leader.election.enable=maybe",
        ],
        "INVALID_CONFIG",
    );
    // Kafka's schema: a bad value or an unknown name, refused naming the key.
    for set in [
        "retention.ms=abc",
        "retention.msec=1000",
        "cleanup.policy=forever",
    ] {
        refused(
            &["topics", "alter-config", "clicks", "--set", set],
            "INVALID_CONFIG",
        );
    }
    assert_eq!(
        ok(&["partitions", "add", "clicks", "--total", "5"]),
        json!({"name": "clicks", "partitions": 5})
    );
    refused(
        &["partitions", "add", "clicks", "--total", "2"],
        "INVALID_PARTITIONS",
    );
    let d = ok(&["topics", "describe", "--topic", "clicks"]);
    assert_eq!(d["topics"][0]["configs"], json!({"retention.ms": "1000"}));
    // kafka-configs' view with --all: every config with its value and
    // source; a cluster-wide default (Kafka's broker name accepted) is what
    // a topic without its own value takes, and goes away again.
    let source = |topic: &str, key: &str| {
        let d = ok(&["configs", "describe", "--topic", topic, "--all"]);
        let row = d["configs"]
            .as_array()
            .expect("configs")
            .iter()
            .find(|c| c["name"] == key)
            .unwrap_or_else(|| panic!("{key} in {d}"))
            .clone();
        (row["value"].clone(), row["source"].clone())
    };
    assert_eq!(
        source("clicks", "retention.ms"),
        (json!("1000"), json!("DYNAMIC_TOPIC_CONFIG"))
    );
    assert_eq!(
        source("clicks", "segment.ms"),
        (json!("604800000"), json!("DEFAULT_CONFIG"))
    );
    ok(&[
        "configs",
        "alter",
        "--entity-default",
        "--add-config",
        "log.roll.ms=3600000,log.cleanup.policy=[compact,delete]",
    ]);
    assert_eq!(
        source("clicks", "segment.ms"),
        (json!("3600000"), json!("DYNAMIC_DEFAULT_BROKER_CONFIG"))
    );
    assert_eq!(
        source("clicks", "cleanup.policy"),
        (
            json!("compact,delete"),
            json!("DYNAMIC_DEFAULT_BROKER_CONFIG")
        )
    );
    let defaults = ok(&["configs", "describe", "--entity-default"]);
    assert_eq!(
        defaults["cluster_defaults"]
            .as_array()
            .expect("defaults")
            .iter()
            .map(|c| (c["name"].clone(), c["broker_config"].clone()))
            .collect::<Vec<_>>(),
        vec![
            (json!("cleanup.policy"), json!("log.cleanup.policy")),
            (json!("segment.ms"), json!("log.roll.ms")),
        ],
        "{defaults}"
    );
    refused(
        &[
            "configs",
            "alter",
            "--entity-default",
            "--add-config",
            "log.retention.ms=soon",
        ],
        "INVALID_CONFIG",
    );
    let (code, _, err) = keel(&[
        "configs",
        "alter",
        "--entity-type",
        "brokers",
        "--entity-name",
        "1",
        "--add-config",
        "log.retention.ms=1",
    ]);
    common::assert_refused(code, &err, 2, &["--entity-default"]);
    ok(&[
        "configs",
        "alter",
        "--entity-default",
        "--delete-config",
        "segment.ms,cleanup.policy",
    ]);
    assert_eq!(
        source("clicks", "segment.ms"),
        (json!("604800000"), json!("DEFAULT_CONFIG"))
    );
    let grown = describe_partitions("clicks", &topic_id);
    assert_eq!(grown.len(), 5);
    // The first three are unchanged; the two new ones keep the factor.
    assert_eq!(grown[..3], partitions[..]);
    for p in &grown[3..] {
        let replicas = numbers(&p["replicas"]);
        assert_eq!(replicas.len(), 2, "{p}");
        assert_ne!(replicas[0], replicas[1], "{p}");
        assert_eq!(p["leader"], replicas[0], "{p}");
        assert_eq!(numbers(&p["isr"]), replicas, "{p}");
        assert_healthy(p);
    }
    refused(&["topics", "describe", "--topic", "nope"], "UNKNOWN_TOPIC");

    // Elections: every leader is already the preferred one.
    assert_eq!(
        ok(&["elect-leaders", "--preferred", "--all"]),
        json!({"partitions": []})
    );
    assert_eq!(
        ok(&[
            "elect-leaders",
            "--preferred",
            "--topic",
            "clicks",
            "--partition",
            "0",
        ]),
        json!({"partitions": [{
            "topic": "clicks",
            "partition": 0,
            "leader": null,
            "error": "ELECTION_NOT_NEEDED",
        }]})
    );

    // Reassignment onto brokers 1 and 2.
    let plan = ok(&[
        "reassign",
        "generate",
        "--topics",
        "clicks",
        "--brokers",
        "1,2",
    ]);
    let items = plan["partitions"].as_array().expect("plan partitions");
    assert_eq!(items.len(), 5, "{plan}");
    for (i, item) in items.iter().enumerate() {
        assert_eq!(item["topic"], "clicks", "{item}");
        assert_eq!(item["partition"], i, "{item}");
        assert_eq!(sorted(&item["replicas"]), vec![1, 2], "{item}");
    }
    let plan_file = dir.path().join("plan.json");
    std::fs::write(&plan_file, plan.to_string()).unwrap();
    assert_eq!(
        ok(&[
            "reassign",
            "start",
            "--plan",
            plan_file.to_str().unwrap(),
            "--wait",
            "--timeout-s",
            "60",
        ]),
        json!({"partitions": (0..5)
            .map(|i| json!({"topic": "clicks", "partition": i, "error": null}))
            .collect::<Vec<_>>()})
    );
    assert_eq!(ok(&["reassign", "list"]), json!({"reassignments": []}));
    refused(
        &["reassign", "cancel", "--plan", plan_file.to_str().unwrap()],
        "NO_REASSIGNMENT_IN_PROGRESS",
    );
    let moved = describe_partitions("clicks", &topic_id);
    for (p, item) in moved.iter().zip(items) {
        assert_eq!(p["replicas"], item["replicas"], "the plan's replicas: {p}");
        assert_healthy(p);
    }
    // A preferred election moves every leader that is not its partition's
    // first replica back to it, and reports exactly those.
    let expected: Vec<Value> = moved
        .iter()
        .filter(|p| p["leader"] != p["replicas"][0])
        .map(|p| {
            json!({
                "topic": "clicks",
                "partition": p["partition"],
                "leader": p["replicas"][0],
                "error": null,
            })
        })
        .collect();
    assert_eq!(
        ok(&["elect-leaders", "--preferred", "--all"]),
        json!({"partitions": expected})
    );
    for p in describe_partitions("clicks", &topic_id) {
        assert_eq!(p["leader"], p["replicas"][0], "{p}");
        assert_healthy(&p);
    }

    // Brokers: a live one cannot be unregistered.
    refused(&["broker", "unregister", "--id", "1"], "BROKER_NOT_FENCED");
    refused(
        &["cluster", "unregister-broker", "--id", "77"],
        "UNKNOWN_BROKER",
    );

    // Deletion.
    assert_eq!(
        ok(&["topics", "delete", "clicks", "--wait", "--timeout-s", "60"]),
        json!({"name": "clicks", "deleted": true, "marked_for_deletion": true})
    );
    assert_eq!(ok(&["topics", "list"]), json!({"topics": []}));

    // Unreachable is a distinct exit code.
    let out = Command::new(keel_bin())
        .args(["topics", "list", "--bootstrap", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));

    // Ctrl-C: everything stops.
    let _ = Command::new("kill")
        .args(["-INT", &dev.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(st)) = dev.try_wait() {
            assert!(st.success(), "keel dev exits cleanly on Ctrl-C");
            break;
        }
        assert!(Instant::now() < deadline, "keel dev did not stop");
        std::thread::sleep(Duration::from_millis(100));
    }
    let left = processes_using(&data_s);
    assert!(left.is_empty(), "processes left behind: {left:?}");

    // The log of a stopped controller shows what this test did.
    let out = common::output_ok(
        Command::new(keel_bin()).args([
            "log",
            "dump",
            "--data-dir",
            &format!("{data_s}/controller-1"),
        ]),
        "keel log dump",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("clicks"), "log dump shows the topic record");
    assert!(text.contains("RemoveTopic"), "log dump shows the deletion");

    // The same log as data, only the topic's creation and removal.
    let out = common::output_ok(
        Command::new(keel_bin())
            .args([
                "log",
                "dump",
                "--data-dir",
                &format!("{data_s}/controller-1"),
            ])
            .args(["-o", "json", "--record-type", "Topic,RemoveTopic"]),
        "keel",
    );
    let d: Value = serde_json::from_slice(&out.stdout).expect("log dump JSON");
    let entries = d["entries"].as_array().expect("entries");
    let records: Vec<&Value> = entries
        .iter()
        .flat_map(|e| e["records"].as_array().unwrap())
        .collect();
    assert_eq!(records.len(), 2, "{d}");
    assert_eq!(records[0]["Topic"]["name"], "clicks", "{d}");
    assert!(records[1]["RemoveTopic"].is_object(), "{d}");
    let (created, removed) = (&entries[0], &entries[entries.len() - 1]);
    assert_eq!(created["kind"], "normal", "{d}");
    assert!(created["index"].as_u64().unwrap() < removed["index"].as_u64().unwrap());
    assert!(created["term"].as_u64().unwrap() >= 1, "{d}");
}

/// Runs `keel bench commit <args>` (the lab built first) into a fresh
/// directory; panics unless it succeeds. The `commit.json` it wrote and
/// the table it printed.
fn bench_commit(args: &[&str]) -> (Value, String) {
    common::keel_lab();
    let out_dir = tempfile::tempdir().expect("tempdir");
    let out = common::output_ok(
        Command::new(keel_bin())
            .args(["bench", "commit"])
            .args(args)
            .arg("--out-dir")
            .arg(out_dir.path()),
        "keel bench",
    );
    let j = serde_json::from_slice(
        &std::fs::read(out_dir.path().join("commit.json")).expect("commit.json"),
    )
    .expect("commit.json parses");
    (j, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `keel bench commit` with every writer on one shared write session: a
/// short real run against its own quorum, every op answered.
#[test]
fn bench_commit_runs_its_writers_on_one_shared_session() {
    let (j, _) = bench_commit(&[
        "--writers",
        "1,8",
        "--level-secs",
        "1",
        "--connections",
        "shared",
    ]);
    assert_eq!(j["parameters"]["connections"], "shared");
    assert_eq!(j["parameters"]["keel_api"], "session");
    // `commit` runs its load generator on one runtime thread by default.
    assert_eq!(j["machine"]["load_generator_threads"], 1);
    let levels = j["levels"].as_array().expect("levels");
    assert_eq!(levels.len(), 2);
    for l in levels {
        assert!(l["ops"].as_u64().unwrap_or(0) > 0, "{l}");
        assert_eq!(l["errors"], 0, "{l}");
    }
    assert!(
        j["bulk"]["batches"].as_u64().unwrap_or(0) > 0,
        "{}",
        j["bulk"]
    );
    assert_eq!(j["bulk"]["errors"], 0);
}

/// Nothing listening at any bootstrap address: the CLI says so at once,
/// with the OS's reason, instead of retrying until its 20 s deadline.
#[test]
fn an_unreachable_bootstrap_is_reported_at_once_with_the_os_reason() {
    let ports = [common::free_port(), common::free_port()];
    let bootstrap = format!("127.0.0.1:{},127.0.0.1:{}", ports[0], ports[1]);
    let started = Instant::now();
    let out = Command::new(keel_bin())
        .args([
            "topics",
            "list",
            "--allow-plaintext",
            "--bootstrap",
            &bootstrap,
        ])
        .output()
        .expect("run keel");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("Connection refused"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "gave up only after {:?}: {err}",
        started.elapsed()
    );
}

/// `keel bench commit --tls`: in one short run, Keel over plaintext and
/// over mutual TLS, both with positive ops/s and server CPU per op, and a
/// finite positive TLS ÷ plaintext ratio of each.
#[test]
fn bench_commit_with_tls_reports_plaintext_and_tls_side_by_side() {
    let (j, table) = bench_commit(&[
        "--tls",
        "--writers",
        "4",
        "--level-secs",
        "1",
        "--trials",
        "1",
        "--storage-ceiling-secs",
        "0",
    ]);
    assert_eq!(j["parameters"]["tls"], true);
    let levels = j["levels"].as_array().expect("levels");
    assert_eq!(levels.len(), 1);
    // The plaintext level's own fields are still there.
    assert!(levels[0]["ops"].as_u64().unwrap_or(0) > 0, "{}", levels[0]);
    let t = &levels[0]["tls"];
    assert_eq!(t["writers"], 4, "{t}");
    for side in ["plaintext", "tls"] {
        let s = &t[side];
        assert_eq!(s["ok_rounds"], 1, "{side}: {s}");
        assert_eq!(s["errors"], 0, "{side}: {s}");
        assert!(s["ops_per_s"].as_f64().unwrap_or(0.0) > 0.0, "{side}: {s}");
        assert!(
            s["server_cpu_us_per_op"].as_f64().unwrap_or(0.0) > 0.0,
            "{side}: {s}"
        );
    }
    for ratio in ["cpu_per_op_ratio", "ops_per_s_ratio"] {
        let r = t[ratio].as_f64().unwrap_or(f64::NAN);
        assert!(r.is_finite() && r > 0.0, "{ratio}: {t}");
    }
    assert_eq!(j["tls"]["rounds"], 1, "{}", j["tls"]);
    assert!(table.contains("TLS vs plaintext"), "{table}");
}

/// Runs `keel <args>` with no bootstrap or TLS from the environment; (exit
/// code, stdout, stderr, how long it took).
fn keel_timed(args: &[&str]) -> (Option<i32>, String, String, Duration) {
    let started = Instant::now();
    let out = Command::new(keel_bin())
        .args(args)
        .env_remove("KEEL_BOOTSTRAP")
        .env_remove("KEEL_ALLOW_PLAINTEXT")
        .output()
        .expect("run keel");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

/// A name that does not resolve fails at once with the resolver's reason
/// (`--bootstrap-server`, Kafka's spelling, works as `--bootstrap`); an
/// address that accepts connections and never answers fails within
/// `--timeout`; with `-o json` the error is one JSON object on stdout and
/// stderr stays empty. (Both used to take the client's 20 s deadline.)
#[test]
fn unresolvable_and_silent_addresses_fail_within_the_timeout() {
    let (code, _, err, took) = keel_timed(&[
        "topics",
        "list",
        "--allow-plaintext",
        "--timeout",
        "2s",
        "--bootstrap-server",
        "no-such-host.invalid:9093",
    ]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("dns error"), "the resolver's reason: {err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "printed once: {err}"
    );
    assert!(took < Duration::from_secs(8), "took {took:?}: {err}");

    // Accepts (the kernel completes the handshake) and never says a word.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let (code, out, err, took) = keel_timed(&[
        "topics",
        "list",
        "--allow-plaintext",
        "--timeout",
        "2s",
        "-b",
        &addr,
        "-o",
        "json",
    ]);
    assert_eq!(code, Some(3), "{out} {err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(v["error"]["code"], "UNREACHABLE", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap_or("").contains(&addr),
        "{v}"
    );
    assert!(err.is_empty(), "printed once, as JSON: {err}");
    assert!(
        took < Duration::from_secs(8),
        "took {took:?} with --timeout 2s"
    );
    drop(silent);
}

/// A node that cannot start (its port is taken) says why once on stderr,
/// not once as a log line and again as a plain line.
#[test]
fn a_node_that_cannot_start_says_why_once() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = holder.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err, _) = keel_timed(&[
        "controller",
        "--node-id",
        "1",
        "--listen",
        &addr,
        "--voters",
        &format!("1@{addr}"),
        "--data-dir",
        &dir.path().join("c1").display().to_string(),
        "--cluster-id",
        "once",
        "--allow-plaintext",
    ]);
    assert_eq!(code, Some(4), "{err}");
    assert_eq!(
        err.matches("Address already in use").count(),
        1,
        "said once: {err}"
    );
}
