//! The `keel-lab` binary as its users run it. Having a test here also makes
//! `cargo test --workspace` build `target/<profile>/keel-lab`, which
//! `keel jepsen` and `keel bench` run.

use std::process::Command;

fn lab(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_keel-lab"))
        .args(args)
        .output()
        .expect("run keel-lab");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_lab_command_has_help_with_an_example() {
    for cmd in ["jepsen", "bench", "sim"] {
        let (code, help, err) = lab(&[cmd, "--help"]);
        assert_eq!(code, 0, "{cmd}: {err}");
        assert!(help.contains("Example"), "{cmd} --help:\n{help}");
    }
}

#[test]
fn without_a_keel_binary_the_lab_names_the_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("keel");
    let out = Command::new(env!("CARGO_BIN_EXE_keel-lab"))
        .args(["jepsen", "--nemesis", "kill", "--time-limit", "1"])
        .arg("--results-dir")
        .arg(dir.path())
        .env("KEEL_BIN", &missing)
        .output()
        .expect("run keel-lab");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains(&missing.display().to_string()), "{err}");
}

/// `keel-lab sim`: a batch prints its summary as JSON and exits 0 when no
/// run broke an invariant; one seed replays with its trace, the same
/// digest each time.
#[test]
fn sim_runs_a_batch_and_replays_one_seed_exactly() {
    let (code, out, err) = lab(&[
        "sim",
        "--seeds",
        "4",
        "--first-seed",
        "7",
        "--sim-seconds",
        "3",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let summary: serde_json::Value = serde_json::from_str(&out).expect("JSON summary");
    assert_eq!(summary["runs"], 4, "{summary}");
    assert_eq!(summary["violations"], 0, "{summary}");
    assert!(summary["acked_writes"].as_u64().unwrap() > 0, "{summary}");

    let replay = || {
        let (code, out, err) = lab(&["sim", "--seed", "9", "--sim-seconds", "3", "--trace"]);
        assert_eq!(code, 0, "{out}{err}");
        let json_at = out.find("\n{").expect("a summary after the trace");
        let summary: serde_json::Value = serde_json::from_str(&out[json_at..]).unwrap();
        (out[..json_at].to_string(), summary)
    };
    let (trace_a, a) = replay();
    let (trace_b, b) = replay();
    assert!(trace_a.lines().count() > 100, "{trace_a}");
    assert_eq!(trace_a, trace_b);
    assert_eq!(a["trace_digest"], b["trace_digest"]);
    assert_eq!(a["seed"], 9);
}
