//! Stamps the git commit into `keel --version`: `KEEL_GIT_COMMIT` when
//! set (a packager building from a tarball without `.git`), else
//! `git rev-parse` of the checkout, else "unknown".

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=KEEL_GIT_COMMIT");
    let commit = std::env::var("KEEL_GIT_COMMIT")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| {
            // Only Keel's own checkout: a tarball unpacked inside some other
            // repository must not take that repository's commit.
            let top = git(&["rev-parse", "--show-toplevel"])?;
            Path::new(&top)
                .join("crates/keel-cli/build.rs")
                .exists()
                .then(|| git(&["rev-parse", "--short=12", "HEAD"]))?
        })
        .unwrap_or_else(|| "unknown".to_string());
    // Rebuild when HEAD moves: a checkout changes HEAD, a commit the ref
    // it names. Neither exists in a tarball.
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let git_dir = Path::new(&git_dir);
        let mut watched = vec![git_dir.join("HEAD"), git_dir.join("packed-refs")];
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.push(git_dir.join(r));
        }
        for p in watched.iter().filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    println!("cargo:rustc-env=KEEL_GIT_COMMIT={commit}");
}
