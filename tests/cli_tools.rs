//! The admin commands as a Kafka operator uses them, against a real
//! cluster of the kit (three controllers, three brokers, plaintext, free
//! addresses): topic positional or `--topic`, `--if-exists`, the
//! `describe` health filters before and after a broker dies, `alter-config`
//! refusals, `partitions set`, `quorum describe --status`, `keel health`,
//! `reassign generate/verify`, `elect-leaders --path-to-json-file`; and the
//! parts that need no cluster (`--version`, completions, `--bootstrap`
//! without a port).

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const LONG: Duration = Duration::from_secs(60);

/// `keel <args>` against `bootstrap`: (exit code, stdout, stderr).
fn keel_raw(bootstrap: &str, args: &[&str]) -> (i32, String, String) {
    run_text(
        Command::new(keel_bin())
            .args(args)
            .args(["--allow-plaintext", "-b", bootstrap])
            .env_remove("KEEL_BOOTSTRAP"),
    )
}

/// `keel <args> -o json`: (exit code, parsed stdout, stderr).
fn keel_json(bootstrap: &str, args: &[&str]) -> (i32, Value, String) {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (code, out, err) = keel_raw(bootstrap, &all);
    let v = serde_json::from_str(&out).unwrap_or(Value::Null);
    let said = common::said(&v, &err);
    (code, v, said)
}

/// `keel <args> -o json`, which must succeed.
fn ok(bootstrap: &str, args: &[&str]) -> Value {
    let (code, v, err) = keel_json(bootstrap, args);
    assert_eq!(code, 0, "keel {args:?} failed: {err}");
    v
}

/// Names of the topics in a `topics describe` answer.
fn names(d: &Value) -> Vec<String> {
    d["topics"]
        .as_array()
        .unwrap_or_else(|| panic!("no topics in {d}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// (topic, partition) of every partition in a `topics describe` answer.
fn partitions(d: &Value) -> Vec<(String, u64)> {
    let mut v = Vec::new();
    for t in d["topics"].as_array().unwrap() {
        for p in t["partitions"].as_array().unwrap() {
            v.push((
                t["name"].as_str().unwrap().to_string(),
                p["partition"].as_u64().unwrap(),
            ));
        }
    }
    v
}

fn tp(t: &str, p: u64) -> (String, u64) {
    (t.to_string(), p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_style_admin_commands_on_a_real_cluster() {
    let mut c = cluster(3);
    c.wait_all_brokers_active(LONG).await.unwrap();
    let boot = c.controller_addrs().join(",");
    let b = boot.as_str();

    // The topic positional or as --topic / -t; short flags for counts.
    let wide = ok(b, &["topics", "create", "wide", "-p", "2", "-r", "3"]);
    assert_eq!(
        (&wide["partitions"], &wide["replication_factor"]),
        (&json!(2), &json!(3))
    );
    let lone = ok(
        b,
        &[
            "topics",
            "create",
            "--topic",
            "lone",
            "--replica-assignment",
            "3",
        ],
    );
    assert_eq!(
        (&lone["partitions"], &lone["replication_factor"]),
        (&json!(1), &json!(1))
    );
    ok(
        b,
        &[
            "topics",
            "create",
            "-t",
            "tuned",
            "--replica-assignment",
            "3:1",
            "-c",
            "min.insync.replicas=2",
        ],
    );
    let by_flag = ok(b, &["topics", "describe", "--topic", "wide"]);
    assert_eq!(ok(b, &["topics", "describe", "wide"]), by_flag);
    assert_eq!(by_flag["topics"][0]["replication_factor"], 3, "{by_flag}");
    let all = ok(b, &["topics", "describe"]);
    let rf: Vec<(&str, u64)> = all["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap(),
                t["replication_factor"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(rf.len(), 3, "{all}");
    for expected in [("lone", 1), ("tuned", 2), ("wide", 3)] {
        assert!(rf.contains(&expected), "{expected:?} in {rf:?}");
    }
    let (_, table, _) = keel_raw(b, &["topics", "describe", "tuned"]);
    assert!(table.contains("ReplicationFactor: 2"), "{table}");
    assert_eq!(
        names(&ok(b, &["topics", "describe", "--with-overrides"])),
        ["tuned"]
    );
    // All healthy: no partition matches a health filter.
    for filter in ["--under-replicated", "--under-min-isr", "--unavailable"] {
        assert_eq!(
            ok(b, &["topics", "describe", filter]),
            json!({"topics": []}),
            "{filter}"
        );
    }

    // alter-config: a change that changes nothing, a bad value and an
    // unknown key are refused, and say nothing was altered.
    let (code, _, err) = keel_json(
        b,
        &[
            "topics",
            "alter-config",
            "tuned",
            "--set",
            "min.insync.replicas=2",
        ],
    );
    assert_refused(
        code,
        &err,
        1,
        &["already has that value", "Nothing was altered."],
    );
    for set in ["retention.ms=abc", "retention.msec=1000"] {
        let (code, _, err) = keel_json(b, &["topics", "alter-config", "tuned", "--set", set]);
        assert_eq!(code, 1, "{set}: {err}");
        assert!(err.contains("INVALID_CONFIG"), "{set}: {err}");
        assert!(err.contains("Nothing was altered."), "{set}: {err}");
    }
    let (code, said, err) = keel_raw(
        b,
        &[
            "topics",
            "alter-config",
            "-t",
            "tuned",
            "--set",
            "retention.ms=1000",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        said.trim(),
        "Altered configs of topic tuned: retention.ms=1000."
    );
    assert_eq!(
        ok(b, &["topics", "describe", "tuned"])["topics"][0]["configs"],
        json!({"min.insync.replicas": "2", "retention.ms": "1000"})
    );

    // Refusals name topics and brokers as an operator writes them: no
    // topic ids, no Rust ranges or Debug output.
    let (code, _, err) = keel_json(b, &["topics", "create", "big", "-r", "9"]);
    assert_refused(code, &err, 1, &["must be between 1 and 3"]);
    let scratch = tempfile::tempdir().unwrap();
    let bad_plan = scratch.path().join("bad.json");
    std::fs::write(
        &bad_plan,
        r#"{"partitions": [{"topic": "wide", "partition": 0, "replicas": [1, 1]}]}"#,
    )
    .unwrap();
    let (code, _, err) = keel_json(
        b,
        &["reassign", "start", "--plan", bad_plan.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("wide-0: target [1, 1] must be non-empty without repeats"),
        "{err}"
    );
    for internal in ["..=", "BrokerId", "TopicId"] {
        assert!(!err.contains(internal), "{internal} in {err}");
    }

    // delete --if-exists.
    assert_eq!(
        ok(b, &["topics", "delete", "nope", "--if-exists"]),
        json!({"name": "nope", "deleted": false, "marked_for_deletion": false, "existed": false})
    );
    let (code, _, err) = keel_json(b, &["topics", "delete", "nope"]);
    assert_refused(code, &err, 1, &["UNKNOWN_TOPIC"]);

    // partitions set (add is the same command).
    assert_eq!(
        ok(b, &["partitions", "set", "wide", "--total", "3"]),
        json!({"name": "wide", "partitions": 3})
    );
    let (code, _, err) = keel_json(b, &["partitions", "add", "-t", "wide", "--total", "2"]);
    assert_refused(code, &err, 1, &["INVALID_PARTITIONS"]);

    // quorum describe --status: Kafka's fields, from the same answer.
    let q = ok(b, &["quorum", "describe", "--status"]);
    let s = &q["status"];
    assert_eq!(s["cluster_id"], CLUSTER_ID, "{q}");
    assert_eq!(s["leader_id"], q["leader_id"], "{q}");
    assert_eq!(s["leader_epoch"], q["term"], "{q}");
    assert_eq!(s["high_watermark"], q["commit_index"], "{q}");
    assert_eq!(s["current_voters"], json!([1, 2, 3]), "{q}");
    assert_eq!(s["current_observers"], json!([]), "{q}");
    assert!(s["max_follower_lag"].is_u64(), "{q}");
    let (_, table, _) = keel_raw(b, &["quorum", "describe", "--status"]);
    assert!(table.contains("CurrentVoters:          [1,2,3]"), "{table}");
    assert!(table.contains("MaxFollowerLagTimeMs:"), "{table}");

    // keel health: all well.
    let h = ok(b, &["health"]);
    assert_eq!(h["healthy"], true, "{h}");
    let controllers = h["controllers"].as_array().unwrap();
    assert_eq!(controllers.len(), 3, "{h}");
    let leaders = controllers.iter().filter(|n| n["role"] == "leader").count();
    assert_eq!(leaders, 1, "{h}");
    for n in controllers {
        assert_eq!(n["healthy"], true, "{n}");
        assert_eq!(n["version"], env!("CARGO_PKG_VERSION"), "{n}");
        assert_eq!(n["term"], h["term"], "{n}");
        assert!(n["last_applied_index"].as_u64().unwrap() >= 1, "{n}");
        assert!(n["disk_free_bytes"].as_u64().unwrap() > 0, "{n}");
    }
    let brokers = h["brokers"].as_array().unwrap();
    assert_eq!(
        brokers
            .iter()
            .map(|b| b["id"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert!(brokers.iter().all(|b| b["role"] == "active"), "{h}");

    // Broker 3 dies: its partitions are described by the filters, and
    // health fails naming it.
    c.broker_mut(2).kill();
    c.wait_cluster("broker 3 fenced", LONG, |r| {
        r.brokers
            .iter()
            .filter_map(|d| d.broker.as_ref())
            .any(|b| b.broker_id == 3 && b.fenced)
    })
    .await
    .unwrap();
    // Every partition on broker 3, but not the one whose only replica it
    // is (its ISR keeps that last member).
    let mut under = partitions(&ok(b, &["topics", "describe", "--under-replicated"]));
    under.sort();
    assert_eq!(
        under,
        [tp("tuned", 0), tp("wide", 0), tp("wide", 1), tp("wide", 2)]
    );
    assert_eq!(
        partitions(&ok(b, &["topics", "describe", "--under-min-isr"])),
        [tp("tuned", 0)]
    );
    assert_eq!(
        partitions(&ok(b, &["topics", "describe", "--unavailable"])),
        [tp("lone", 0)]
    );
    let (_, table, _) = keel_raw(b, &["topics", "describe", "--unavailable"]);
    assert!(table.contains("Topic: lone"), "{table}");
    assert!(!table.contains("Topic: wide"), "{table}");
    let (code, h, err) = keel_json(b, &["health"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(h["healthy"], false, "{h}");
    let b3 = &h["brokers"][2];
    assert_eq!(
        (&b3["id"], &b3["role"], &b3["healthy"]),
        (&json!(3), &json!("fenced"), &json!(false)),
        "{h}"
    );
    assert!(
        h["controllers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["healthy"] == true),
        "{h}"
    );

    c.broker_mut(2).start().unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    let (code, h, err) = keel_json(b, &["health"]);
    assert_eq!(code, 0, "{h} {err}");

    // reassign generate: the current assignment (the rollback plan) and
    // the proposed one; verify tells not started from complete.
    let generate = [
        "reassign",
        "generate",
        "--topics",
        "tuned",
        "--brokers",
        "1,2",
    ];
    let plan = ok(b, &generate);
    assert_eq!(
        plan["current"],
        json!({"partitions": [{"topic": "tuned", "partition": 0, "replicas": [3, 1]}]})
    );
    let proposed = &plan["partitions"][0]["replicas"];
    let mut target: Vec<u64> = proposed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_u64().unwrap())
        .collect();
    target.sort_unstable();
    assert_eq!(target, [1, 2], "{plan}");
    let (_, table, _) = keel_raw(b, &generate);
    assert!(
        table.contains("Current partition replica assignment"),
        "{table}"
    );
    assert!(
        table.contains("Proposed partition reassignment configuration"),
        "{table}"
    );
    let dir = tempfile::tempdir().unwrap();
    let plan_file = dir.path().join("plan.json");
    std::fs::write(&plan_file, plan.to_string()).unwrap();
    let plan_path = plan_file.to_str().unwrap();
    let (code, v, err) = keel_json(b, &["reassign", "verify", "--plan", plan_path]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        v,
        json!({"complete": false, "partitions": [{
            "topic": "tuned", "partition": 0, "status": "not_done",
            "replicas": [3, 1], "target": proposed,
        }]})
    );
    ok(
        b,
        &[
            "reassign",
            "start",
            "--plan",
            plan_path,
            "--wait",
            "--timeout",
            "60s",
        ],
    );
    assert_eq!(
        ok(b, &["reassign", "verify", "--plan", plan_path]),
        json!({"complete": true, "partitions": [{
            "topic": "tuned", "partition": 0, "status": "complete",
            "replicas": proposed, "target": proposed,
        }]})
    );

    // elect-leaders with Kafka's partition file: exactly those partitions.
    // Broker 3 came back above; a preferred election needs the preferred
    // replica in sync again, so wait until no partition of wide lags.
    let deadline = std::time::Instant::now() + LONG;
    while partitions(&ok(b, &["topics", "describe", "--under-replicated"]))
        .iter()
        .any(|(topic, _)| topic == "wide")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "wide still under-replicated after {LONG:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let elect_file = dir.path().join("elect.json");
    std::fs::write(
        &elect_file,
        r#"{"partitions": [{"topic": "wide", "partition": 1}]}"#,
    )
    .unwrap();
    let e = ok(
        b,
        &[
            "elect-leaders",
            "--preferred",
            "--path-to-json-file",
            elect_file.to_str().unwrap(),
        ],
    );
    let listed = e["partitions"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{e}");
    assert_eq!(
        (&listed[0]["topic"], &listed[0]["partition"]),
        (&json!("wide"), &json!(1)),
        "{e}"
    );
    std::fs::write(&elect_file, r#"{"partitions": []}"#).unwrap();
    let (code, _, err) = keel_json(
        b,
        &[
            "elect-leaders",
            "--preferred",
            "--path-to-json-file",
            elect_file.to_str().unwrap(),
        ],
    );
    assert_refused(code, &err, 2, &["lists no partition"]);

    // A dead voter: `quorum describe --replication` shows it unreachable
    // (not a healthy follower) and `keel health` fails naming it.
    let q = ok(b, &["quorum", "describe"]);
    let leader = q["leader_id"].as_u64().unwrap();
    let dead = (1..=3u64).find(|id| *id != leader).unwrap();
    c.controller_mut(dead as usize - 1).kill();
    let mut tries = 0;
    let voter = loop {
        let q = ok(b, &["quorum", "describe"]);
        let v = q["voters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["id"] == dead)
            .cloned()
            .unwrap();
        if v["status"] == "unreachable" {
            break v;
        }
        tries += 1;
        assert!(tries < 150, "dead voter still described as {v}");
        std::thread::sleep(Duration::from_millis(200));
    };
    // Its last contact is at least as old as its death, and not the
    // leader's uptime pretending to be recent.
    assert!(
        voter["last_contact_ms"].as_u64().unwrap_or(u64::MAX) > 0,
        "{voter}"
    );
    let (_, table, _) = keel_raw(b, &["quorum", "describe", "--replication"]);
    let row = table
        .lines()
        .find(|l| l.starts_with(&format!("{dead} ")))
        .unwrap_or_else(|| panic!("no row for {dead}:\n{table}"));
    assert!(row.contains("unreachable"), "{table}");
    assert!(!row.contains("follower"), "{table}");
    let (code, h, err) = keel_json(b, &["health"]);
    assert_eq!(code, 1, "{h} {err}");
    let node = h["controllers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == dead)
        .cloned()
        .unwrap();
    assert_eq!(node["healthy"], false, "{h}");
    let problems = node["problems"].to_string();
    assert!(problems.contains("no answer"), "{problems}");
    assert!(problems.contains("Connection refused"), "{problems}");
}

#[test]
fn version_completions_and_usage_errors_need_no_cluster() {
    let run = |args: &[&str]| {
        run_text(
            Command::new(keel_bin())
                .args(args)
                .env_remove("KEEL_BOOTSTRAP"),
        )
    };
    let (code, v, _) = run(&["--version"]);
    assert_eq!(code, 0);
    assert!(
        v.starts_with(&format!("keel {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );

    for shell in ["bash", "zsh", "fish"] {
        let (code, script, err) = run(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        for word in ["keel", "topics", "health", "under-replicated"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
    let (code, _, err) = run(&["completions", "tcsh"]);
    assert_eq!(code, 2, "{err}");

    // A bootstrap address without its port is named at once.
    let (code, _, err) = run(&["topics", "list", "-b", "127.0.0.11"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("\"127.0.0.11\" has no port"), "{err}");
    // The topic once, positional or --topic.
    let (code, _, err) = run(&["topics", "create", "a", "--topic", "b"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(&["topics", "delete"]);
    assert_eq!(code, 2, "{err}");

    // Every command's help has an example (`jepsen`, `bench` and `sim`
    // show `keel-lab`'s).
    keel_lab();
    for cmd in [
        &["topics", "create"][..],
        &["topics", "delete"],
        &["topics", "list"],
        &["topics", "describe"],
        &["topics", "alter-config"],
        &["partitions", "set"],
        &["quorum", "describe"],
        &["reassign", "generate"],
        &["reassign", "start"],
        &["reassign", "verify"],
        &["reassign", "cancel"],
        &["reassign", "list"],
        &["elect-leaders"],
        &["health"],
        &["completions"],
        &["cluster", "describe"],
        &["cluster", "unregister-broker"],
        &["quorum", "add-voter"],
        &["quorum", "remove-voter"],
        &["quorum", "snapshot"],
        &["acls", "add"],
        &["acls", "remove"],
        &["acls", "list"],
        &["log", "dump"],
        &["controller"],
        &["broker"],
        &["dev"],
        &["bench"],
        &["certs"],
        &["jepsen"],
        &["sim"],
    ] {
        let (code, help, err) = run(&[cmd, &["--help"]].concat());
        assert_eq!(code, 0, "{cmd:?}: {err}");
        assert!(
            help.contains("Example"),
            "{cmd:?} --help has no example:\n{help}"
        );
    }
}

/// A stopped controller (SIGSTOP: the kernel still accepts connections to
/// it, nobody answers) first in `--bootstrap` is passed over: the CLI asks
/// every address which one is active before it sends anything, so a create
/// is acknowledged by the active controller. Trying the list in order, the
/// create went to the stopped node and ended, after its 10 s request
/// timeout, as of unknown outcome (exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_controller_first_in_the_bootstrap_list_is_passed_over() {
    let mut c = cluster(1);
    c.wait_all_brokers_active(LONG).await.unwrap();
    let active = c.wait_active(LONG).await.unwrap();
    let stopped = (active + 1) % 3;
    let mut addrs = c.controller_addrs();
    let first = addrs.remove(stopped);
    addrs.insert(0, first);
    let boot = addrs.join(",");

    c.controller_mut(stopped).process.pause();
    let created = ok(
        &boot,
        &["topics", "create", "past-a-stopped-node", "-r", "1"],
    );
    assert_eq!(created["name"], "past-a-stopped-node", "{created}");
    let d = ok(&boot, &["topics", "describe", "past-a-stopped-node"]);
    assert_eq!(names(&d), ["past-a-stopped-node"]);
    c.controller_mut(stopped).process.resume();
}
