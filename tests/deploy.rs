//! The files under `deploy/` are checked, not just shipped: the alert
//! rules pass `promtool check rules` and their own unit tests, the example
//! Prometheus config passes `promtool check config`, a live controller's
//! scrape passes `promtool check metrics`, every metric the Grafana
//! dashboard and the alerts name is one a live cluster exports, the
//! example configs pass `keel controller|broker --check` and name every
//! option, and the systemd units pass `systemd-analyze verify`. Each check
//! is also shown failing on a bad input.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(90);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn deploy(rel: &str) -> PathBuf {
    repo().join("deploy").join(rel)
}

/// Runs a tool that `scripts/test-deps.sh` installs; says so when missing.
fn tool(name: &str, args: &[&str], cwd: &Path, stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut cmd = Command::new(name);
    cmd.args(args)
        .current_dir(cwd)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {name} ({e}): run scripts/test-deps.sh"));
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_alert_rules_and_prometheus_config_pass_promtool_and_the_rules_unit_tests() {
    let dir = deploy("prometheus");
    for args in [
        &["check", "rules", "alerts.yml"][..],
        &["test", "rules", "alerts_test.yml"],
        &["check", "config", "prometheus.yml"],
    ] {
        let o = tool("promtool", args, &dir, None);
        assert!(o.status.success(), "promtool {args:?}: {}", text(&o));
    }
    // The check can fail: a rule with a broken expression is refused.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("bad.yml"),
        "groups:\n  - name: x\n    rules:\n      - alert: Broken\n        expr: max(keel_controller_offline_partitions > \n",
    )
    .unwrap();
    let o = tool("promtool", &["check", "rules", "bad.yml"], tmp.path(), None);
    assert!(!o.status.success(), "a broken rule passed: {}", text(&o));
}

/// The keys an example config names, set or commented out (`# key = ...`).
fn keys_named(example: &str) -> BTreeSet<String> {
    example
        .lines()
        .filter_map(|l| {
            let l = l.trim_start_matches('#').trim();
            let (k, _) = l.split_once(" = ")?;
            k.chars()
                .all(|c| c.is_ascii_lowercase() || c == '_')
                .then(|| k.to_string())
        })
        .collect()
}

/// The long options `keel <role> --help` lists, as config keys.
fn options_of(role: &str) -> BTreeSet<String> {
    let o = tool(keel_bin(), &[role, "--help"], &repo(), None);
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("--"))
        .filter_map(|l| l.split([' ', ',']).next())
        .filter(|f| !["config", "check", "help", "version"].contains(f))
        .map(|f| f.replace('-', "_"))
        .collect()
}

#[test]
fn the_example_configs_pass_check_and_name_every_option() {
    let tmp = tempfile::tempdir().unwrap();
    let tls = tmp.path().join("tls");
    let o = tool(
        keel_bin(),
        &[
            "certs",
            "init",
            "--dir",
            tls.to_str().unwrap(),
            "--cluster-id",
            "prod",
        ],
        &repo(),
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    for role in ["controller", "broker"] {
        let example = std::fs::read_to_string(deploy(&format!("config/{role}.toml"))).unwrap();
        let missing: Vec<String> = options_of(role)
            .difference(&keys_named(&example))
            .cloned()
            .collect();
        assert!(
            missing.is_empty(),
            "deploy/config/{role}.toml does not name {missing:?}"
        );
        // The example's own paths, with certificates that exist.
        let file = tmp.path().join(format!("{role}.toml"));
        let check = || {
            tool(
                keel_bin(),
                &[role, "--config", file.to_str().unwrap(), "--check"],
                &repo(),
                None,
            )
        };
        std::fs::write(
            &file,
            example.replace("/etc/keel/tls", tls.to_str().unwrap()),
        )
        .unwrap();
        let o = check();
        assert!(o.status.success(), "{role} example: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("is valid"),
            "{}",
            text(&o)
        );
        // The check can fail: a misspelt key is refused with exit 2.
        std::fs::write(
            &file,
            example
                .replace("/etc/keel/tls", tls.to_str().unwrap())
                .replace("cluster_id =", "clusterid ="),
        )
        .unwrap();
        let o = check();
        assert_eq!(
            o.status.code(),
            Some(2),
            "{role} misspelt key: {}",
            text(&o)
        );
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("clusterid"),
            "{}",
            text(&o)
        );
    }
}

/// `systemd-analyze verify` on copies of the units that point at the
/// binary under test (verify checks that ExecStart's program exists).
fn verify_units(dir: &Path, units: &[(&str, String)]) -> Output {
    let mut paths = Vec::new();
    for (name, body) in units {
        let p = dir.join(name);
        std::fs::write(&p, body.replace("/usr/local/bin/keel", keel_bin())).unwrap();
        paths.push(p.display().to_string());
    }
    let args: Vec<&str> = std::iter::once("verify")
        .chain(paths.iter().map(String::as_str))
        .collect();
    tool("systemd-analyze", &args, dir, None)
}

#[test]
fn the_systemd_units_pass_systemd_analyze_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let units: Vec<(&str, String)> = ["keel-controller.service", "keel-broker.service"]
        .into_iter()
        .map(|n| {
            (
                n,
                std::fs::read_to_string(deploy(&format!("systemd/{n}"))).unwrap(),
            )
        })
        .collect();
    let o = verify_units(tmp.path(), &units);
    // verify exits 0 on unknown keys and bad values too, and says so on
    // stderr: any complaint fails.
    assert!(
        o.status.success() && o.stderr.is_empty(),
        "systemd-analyze verify: {}",
        text(&o)
    );
    // The check can fail: a misspelt key and a bad value are reported.
    let bad = units[0]
        .1
        .replace("Restart=on-failure", "Restart=sometimes")
        .replace("KillSignal=", "KilSignal=");
    let o = verify_units(tmp.path(), &[("keel-bad.service", bad)]);
    assert!(
        !o.stderr.is_empty(),
        "a bad unit passed verify: {}",
        text(&o)
    );
}

/// Names of the families a scrape exports.
fn families(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Metric names an expression uses: identifiers of our families (a
/// histogram's `_bucket`, `_sum` and `_count` series name their family).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut word = String::new();
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        if word.starts_with("keel_") || word.starts_with("process_") {
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| word.strip_suffix(s))
                .unwrap_or(&word);
            out.insert(family.to_string());
        }
        word.clear();
    }
    out
}

/// What is wrong with a Grafana dashboard: structure, and metric names
/// `exported` does not hold.
fn dashboard_problems(dash: &Value, exported: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    for key in ["title", "uid"] {
        if !dash[key].is_string() {
            problems.push(format!("no {key}"));
        }
    }
    if !dash["schemaVersion"].is_u64() {
        problems.push("no schemaVersion".into());
    }
    let Some(panels) = dash["panels"].as_array().filter(|p| !p.is_empty()) else {
        problems.push("no panels".into());
        return problems;
    };
    let mut ids = BTreeSet::new();
    let mut queries = 0;
    for p in panels {
        let title = p["title"].as_str().unwrap_or("?");
        if !ids.insert(p["id"].as_u64().unwrap_or(0)) || p["id"].as_u64().is_none() {
            problems.push(format!("panel {title}: missing or repeated id"));
        }
        if !p["type"].is_string() {
            problems.push(format!("panel {title}: no type"));
        }
        let grid = &p["gridPos"];
        if ["x", "y", "w", "h"].iter().any(|k| !grid[k].is_u64())
            || grid["x"].as_u64().unwrap_or(0) + grid["w"].as_u64().unwrap_or(0) > 24
        {
            problems.push(format!("panel {title}: bad gridPos {grid}"));
        }
        if p["type"] == "row" {
            continue;
        }
        let targets = p["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("panel {title}: no targets"));
        }
        let mut refs = BTreeSet::new();
        for t in targets {
            queries += 1;
            if !refs.insert(t["refId"].as_str().unwrap_or("").to_string()) {
                problems.push(format!("panel {title}: repeated refId"));
            }
            let expr = t["expr"].as_str().unwrap_or("");
            let names = metric_names(expr);
            if names.is_empty() {
                problems.push(format!("panel {title}: expression names no metric: {expr}"));
            }
            for n in names.difference(exported) {
                problems.push(format!("panel {title}: {n} is not exported"));
            }
        }
    }
    if queries == 0 {
        problems.push("no queries".into());
    }
    problems
}

/// Alert expressions of a rules file (`expr:` lines and their folded
/// continuations).
fn alert_exprs(rules: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut open = false;
    for line in rules.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("expr:") {
            out.push(rest.trim().trim_start_matches(">-").to_string());
            open = true;
        } else if open && line.starts_with("            ") {
            out.last_mut().unwrap().push_str(t);
        } else {
            open = false;
        }
    }
    out
}

/// The body of a scrape of `addr` once `ok` holds (bounded).
async fn scrape_until(addr: std::net::SocketAddr, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + LONG;
    loop {
        let body = keel_testkit::probe::scrape_metrics(addr)
            .await
            .and_then(|t| t.split_once("\r\n\r\n").map(|(_, b)| b.to_string()))
            .unwrap_or_default();
        if ok(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "{what}; last scrape:\n{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_alerts_name_only_metrics_a_live_cluster_exports() {
    let mut c = Cluster::start(fast_spec(2).metrics(true)).unwrap();
    let active = c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    create_topic(&client(&c), "d", 2, 2).await;
    // A fence and the elections it causes, so their counters exist.
    c.broker_mut(1).kill();
    let leader = c.controller(active).metrics_addr.unwrap();
    let controller = scrape_until(leader, "a fence and its elections counted", |t| {
        t.contains("keel_controller_fenced_brokers 1")
            && t.contains("keel_controller_clean_leader_elections_total ")
            && t.contains("keel_controller_raft_peer_lag{")
    })
    .await;
    let broker = scrape_until(
        c.broker(0).metrics_addr.unwrap(),
        "a broker's heartbeats",
        |t| t.contains("keel_broker_heartbeat_latency_seconds_bucket"),
    )
    .await;

    // The live scrape is valid Prometheus text (lint included).
    let o = tool(
        "promtool",
        &["check", "metrics"],
        &repo(),
        Some(&controller),
    );
    assert!(o.status.success(), "promtool check metrics: {}", text(&o));

    let exported: BTreeSet<String> = families(&controller)
        .union(&families(&broker))
        .cloned()
        .collect();
    let dash: Value =
        serde_json::from_str(&std::fs::read_to_string(deploy("grafana/keel.json")).unwrap())
            .expect("deploy/grafana/keel.json parses");
    let problems = dashboard_problems(&dash, &exported);
    assert!(problems.is_empty(), "dashboard: {problems:#?}");

    let rules = std::fs::read_to_string(deploy("prometheus/alerts.yml")).unwrap();
    let exprs = alert_exprs(&rules);
    assert!(exprs.len() >= 5, "{exprs:?}");
    for expr in &exprs {
        let unknown: Vec<String> = metric_names(expr).difference(&exported).cloned().collect();
        assert!(
            unknown.is_empty(),
            "alerts.yml names {unknown:?}, which no node exports ({expr})"
        );
    }

    // The check can fail: a panel on a metric nobody exports, and one
    // without queries, are reported.
    let mut bad = dash.clone();
    bad["panels"][1]["targets"][0]["expr"] = "max(keel_controller_no_such_metric)".into();
    bad["panels"][2]["targets"] = Value::Array(vec![]);
    let problems = dashboard_problems(&bad, &exported);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("keel_controller_no_such_metric is not exported")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("no targets")),
        "{problems:?}"
    );
}
