//! The production binary leaves the laboratory out: `keel` neither depends
//! on the fault harness, the Jepsen tests or the bench nor carries any of
//! their code, which lives in the `keel-lab` binary. Both checks are shown
//! to fail on `keel-lab`, which has all of it.

mod common;

use std::process::Command;

/// The lab's crates, none of which `keel` may depend on.
const LAB_CRATES: [&str; 5] = [
    "keel-jepsen",
    "keel-bench",
    "keel-testkit",
    "keel-sim",
    "keel-lab",
];

/// What only the lab's code holds: its crates' mangled names, and the
/// tools it drives (LazyFS mounts, libfiu's controller, iptables chains,
/// FUSE unmounts). `keel` names none of them anywhere (checked by hand:
/// no doc string, flag or message of the production crates does).
const LAB_NEEDLES: [&str; 10] = [
    "keel_jepsen",
    "keel_bench",
    "keel_testkit",
    "keel_sim",
    "keel_lab",
    "lazyfs",
    "libfiu",
    "fiu-ctrl",
    "iptables",
    "fusermount",
];

/// The packages `package` depends on in normal builds, one name each.
fn normal_dependencies(package: &str) -> Vec<String> {
    let out = common::output_ok(
        Command::new(env!("CARGO"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args([
                "tree",
                "-p",
                package,
                "-e",
                "normal",
                "--prefix",
                "none",
                "--offline",
            ]),
        &format!("cargo tree -p {package}"),
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The needles found in the file at `path`.
fn needles_in(path: &std::path::Path) -> Vec<&'static str> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    LAB_NEEDLES
        .into_iter()
        .filter(|n| memchr::memmem::find(&bytes, n.as_bytes()).is_some())
        .collect()
}

#[test]
fn keel_depends_on_no_lab_crate() {
    let deps = normal_dependencies("keel");
    assert!(deps.iter().any(|d| d == "keel-cluster"), "{deps:?}");
    let lab: Vec<&String> = deps
        .iter()
        .filter(|d| LAB_CRATES.contains(&d.as_str()))
        .collect();
    assert!(lab.is_empty(), "keel depends on {lab:?}");
}

#[test]
fn the_same_dependency_check_finds_the_lab_crates_in_keel_lab() {
    let deps = normal_dependencies("keel-lab");
    for c in ["keel-jepsen", "keel-bench", "keel-testkit", "keel-sim"] {
        assert!(deps.iter().any(|d| d == c), "keel-lab lacks {c}: {deps:?}");
    }
}

#[test]
fn the_keel_binary_holds_no_lab_code() {
    let keel = std::path::Path::new(common::keel_bin());
    // The scan sees crate names: the kit `keel dev` runs on is there.
    let bytes = std::fs::read(keel).expect("read keel");
    assert!(memchr::memmem::find(&bytes, b"keel_cluster").is_some());
    assert_eq!(
        needles_in(keel),
        Vec::<&str>::new(),
        "in {}",
        keel.display()
    );
}

#[test]
fn the_same_scan_finds_the_lab_in_keel_lab() {
    let lab = common::keel_lab();
    let found = needles_in(&lab);
    for n in [
        "keel_jepsen",
        "keel_bench",
        "keel_testkit",
        "keel_sim",
        "lazyfs",
        "iptables",
    ] {
        assert!(found.contains(&n), "{n} not found in {}", lab.display());
    }
}
