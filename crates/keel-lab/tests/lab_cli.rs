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
    for cmd in ["jepsen", "bench"] {
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
