//! The operator surface: `keel dev` started and stopped by a test, every
//! admin subcommand's happy path and a refusal, JSON parsed, `keel log dump`
//! on a real data dir.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::keel_bin;
use serde_json::Value;

/// Runs `keel <args> --output json` against the dev cluster.
fn keel(args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(keel_bin())
        .args(args)
        .args(["--output", "json"])
        .env_remove("KEEL_BOOTSTRAP")
        .output()
        .expect("run keel");
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
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
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
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
    assert_eq!(q["voters"].as_array().unwrap().len(), 3);
    for v in q["voters"].as_array().unwrap() {
        for k in [
            "id",
            "address",
            "last_log_index",
            "lag",
            "last_contact_ms",
            "status",
        ] {
            assert!(v.get(k).is_some(), "quorum describe voter lacks {k}");
        }
    }
    assert!(q["term"].as_u64().unwrap() >= 1);
    assert!(q["commit_index"].as_u64().unwrap() >= 1);
    let c = ok(&["cluster", "describe"]);
    assert_eq!(c["brokers"].as_array().unwrap().len(), 3);
    // A snapshot on the first bootstrap node covers what it applied and
    // purges the log behind it. That node may be a follower still applying
    // the commit index seen above, so it is asked again (bounded) until its
    // snapshot reaches that index.
    let commit = q["commit_index"].as_u64().unwrap();
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
    ok(&[
        "topics",
        "create",
        "clicks",
        "--partitions",
        "3",
        "--replication-factor",
        "2",
    ]);
    refused(&["topics", "create", "bad/name"], "INVALID_TOPIC_NAME");
    refused(
        &["topics", "create", "big", "--replication-factor", "9"],
        "INVALID_REPLICATION_FACTOR",
    );
    assert_eq!(
        ok(&["topics", "list"])["topics"],
        serde_json::json!(["clicks"])
    );
    ok(&[
        "topics",
        "alter-config",
        "clicks",
        "--set",
        "retention.ms=1000",
    ]);
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
    ok(&["partitions", "add", "clicks", "--total", "5"]);
    refused(
        &["partitions", "add", "clicks", "--total", "2"],
        "INVALID_PARTITIONS",
    );
    let d = ok(&["topics", "describe", "--topic", "clicks"]);
    let t = &d["topics"][0];
    assert_eq!(t["configs"]["retention.ms"], "1000");
    assert_eq!(t["partitions"].as_array().unwrap().len(), 5);
    refused(&["topics", "describe", "--topic", "nope"], "UNKNOWN_TOPIC");

    // Elections and reassignment.
    let e = ok(&["elect-leaders", "--preferred", "--all"]);
    assert!(e["partitions"].is_array());
    let plan = ok(&[
        "reassign",
        "generate",
        "--topics",
        "clicks",
        "--brokers",
        "1,2",
    ]);
    assert_eq!(plan["partitions"].as_array().unwrap().len(), 5);
    let plan_file = dir.path().join("plan.json");
    std::fs::write(&plan_file, plan.to_string()).unwrap();
    ok(&[
        "reassign",
        "start",
        "--plan",
        plan_file.to_str().unwrap(),
        "--wait",
        "--timeout-s",
        "60",
    ]);
    assert_eq!(
        ok(&["reassign", "list"])["reassignments"],
        serde_json::json!([])
    );
    refused(
        &["reassign", "cancel", "--plan", plan_file.to_str().unwrap()],
        "NO_REASSIGNMENT_IN_PROGRESS",
    );
    let d = ok(&["topics", "describe", "--topic", "clicks"]);
    for p in d["topics"][0]["partitions"].as_array().unwrap() {
        assert!(
            !p["replicas"].as_array().unwrap().contains(&Value::from(3)),
            "generated plan moves off broker 3"
        );
    }

    // Brokers: a live one cannot be unregistered.
    refused(&["broker", "unregister", "--id", "1"], "BROKER_NOT_FENCED");
    refused(
        &["cluster", "unregister-broker", "--id", "77"],
        "UNKNOWN_BROKER",
    );

    // Deletion.
    ok(&["topics", "delete", "clicks", "--wait", "--timeout-s", "60"]);
    assert_eq!(ok(&["topics", "list"])["topics"], serde_json::json!([]));

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
    let out = Command::new(keel_bin())
        .args([
            "log",
            "dump",
            "--data-dir",
            &format!("{data_s}/controller-1"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("clicks"), "log dump shows the topic record");
    assert!(text.contains("RemoveTopic"), "log dump shows the deletion");
}

/// `keel bench commit` with every writer on one shared write session: a
/// short real run against its own quorum, every op answered.
#[test]
fn bench_commit_runs_its_writers_on_one_shared_session() {
    let out_dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(keel_bin())
        .args([
            "bench",
            "commit",
            "--writers",
            "1,8",
            "--level-secs",
            "1",
            "--connections",
            "shared",
            "--out-dir",
        ])
        .arg(out_dir.path())
        .output()
        .expect("run keel bench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Value = serde_json::from_slice(
        &std::fs::read(out_dir.path().join("commit.json")).expect("commit.json"),
    )
    .expect("commit.json parses");
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
