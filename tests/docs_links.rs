//! The documentation holds together: every relative Markdown link in
//! README.md and docs/*.md names a file that exists, and every `#anchor`
//! names a heading of the file it points at (GitHub's slugs). The README
//! stays short and keeps the two quick-start commands.
//!
//! Only std: this test needs no cluster and no other crate.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

const README_MAX_LINES: usize = 300;
const QUICK_START: [&str; 2] = [
    "cargo run --release -- dev",
    "scripts/test-deps.sh && cargo test --workspace",
];

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every docs/*.md, sorted.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("docs/ is readable")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The lines of a Markdown text outside fenced code blocks, with their
/// line numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let marker = if t.starts_with("```") {
            Some("```")
        } else if t.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (Some(_), _) => {}
            (None, None) => out.push((i + 1, line)),
        }
    }
    out
}

/// GitHub's anchor for a heading: lowercase, spaces to '-', every other
/// character but letters, digits, '-' and '_' dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's headings (a repeated slug gets -1, -2
/// as on GitHub).
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let title = line[hashes..].trim().trim_end_matches('#');
        let base = slug(title);
        let mut candidate = base.clone();
        let mut n = 0;
        while seen.contains(&candidate) {
            n += 1;
            candidate = format!("{base}-{n}");
        }
        seen.insert(candidate);
    }
    seen
}

/// A line with its inline code spans blanked out.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if in_code {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// The targets of the `[text](target)` links of a Markdown text, with
/// their line numbers, outside code.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            let inside = after[..end].trim();
            let target = inside
                .split_whitespace()
                .next()
                .unwrap_or("")
                .trim_start_matches('<')
                .trim_end_matches('>');
            if rest[..i].contains('[') && !target.is_empty() {
                out.push((n, target.to_string()));
            }
            rest = &after[end + 1..];
        }
    }
    out
}

/// Every broken link of the given Markdown files, one line each:
/// `file:line: target: what is wrong`.
fn check_links(files: &[PathBuf]) -> Vec<String> {
    let mut problems = Vec::new();
    for file in files {
        let text = match fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                problems.push(format!("{}: cannot read: {e}", file.display()));
                continue;
            }
        };
        let dir = file.parent().unwrap_or(Path::new("."));
        for (line, target) in links(&text) {
            let lower = target.to_lowercase();
            if lower.starts_with("http://")
                || lower.starts_with("https://")
                || lower.starts_with("mailto:")
            {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let where_ = format!("{}:{line}: {target}", file.display());
            let linked = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            if !linked.exists() {
                problems.push(format!("{where_}: no such file {}", linked.display()));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if linked.is_dir() {
                problems.push(format!("{where_}: an anchor into a directory"));
                continue;
            }
            let linked_text = fs::read_to_string(&linked).unwrap_or_default();
            if !anchors(&linked_text).contains(anchor) {
                problems.push(format!(
                    "{where_}: no heading with anchor #{anchor} in {}",
                    linked.display()
                ));
            }
        }
    }
    problems
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let files = doc_files(&repo_root());
    assert!(files.len() > 1, "docs/*.md found: {files:?}");
    let problems = check_links(&files);
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn readme_is_short_and_has_the_quick_start() {
    let readme = fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, at most {README_MAX_LINES} wanted"
    );
    for command in QUICK_START {
        assert!(readme.contains(command), "README.md lacks `{command}`");
    }
}

#[test]
fn the_checker_reports_a_missing_file_and_a_missing_anchor() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("keel-docs-links-{}-{nanos}", std::process::id()));
    fs::create_dir_all(dir.join("docs")).unwrap();
    let a = dir.join("a.md");
    let b = dir.join("docs/b.md");
    fs::write(
        &a,
        "# A\n\n\
         [gone](docs/missing.md), [bad anchor](docs/b.md#no-such-heading),\n\
         [good](docs/b.md#the-real-heading-v2), [self](#a), [bad self](#nope),\n\
         [web](https://example.com/x#y), `[code](not-checked.md)`\n\
         ```sh\n[fenced](not-checked-either.md)\n```\n",
    )
    .unwrap();
    fs::write(
        &b,
        "# B\n\n## The real heading (`v2`)!\n\n[back](../a.md#a)\n",
    )
    .unwrap();

    let problems = check_links(&[a, b]);
    let _ = fs::remove_dir_all(&dir);

    let has = |needle: &str| problems.iter().any(|p| p.contains(needle));
    assert!(has("docs/missing.md: no such file"), "{problems:#?}");
    assert!(has("#no-such-heading"), "{problems:#?}");
    assert!(has("#nope"), "{problems:#?}");
    assert_eq!(
        problems.len(),
        3,
        "only the three broken links: {problems:#?}"
    );
}

#[test]
fn slugs_follow_github() {
    assert_eq!(
        slug("Fault testing (Jepsen-style)"),
        "fault-testing-jepsen-style"
    );
    assert_eq!(
        slug("2026-12-03: the Kafka listener (`keel bench kafka-metadata`)"),
        "2026-12-03-the-kafka-listener-keel-bench-kafka-metadata"
    );
    assert_eq!(
        slug("Power loss, disk faults and a full disk"),
        "power-loss-disk-faults-and-a-full-disk"
    );
    assert_eq!(slug("snake_case stays"), "snake_case-stays");
}
