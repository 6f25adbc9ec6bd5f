//! No circles between the modules of any crate of ours: a module that
//! names `crate::x` (or `use crate::{x, ...}`) depends on `x`, and no chain
//! of such dependencies leads back to where it started. Circles hide which
//! module owns what, and every later change has to read all of them.
//!
//! The graph is over each crate's top-level modules (a file `src/x.rs` or
//! a directory `src/x/`), from their code outside `#[cfg(test)] mod tests`
//! and comments. Vendored upstream code is not ours and is not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module name → the source text of its files (test modules and line
/// comments dropped).
type Sources = BTreeMap<String, String>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its unit tests and line comments.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A crate's top-level modules and their code.
fn sources(src: &Path) -> Sources {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut out = Sources::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .into_owned();
        let module = first.trim_end_matches(".rs").to_string();
        if matches!(module.as_str(), "lib" | "main") || module == "bin" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        out.entry(module).or_default().push_str(&code_of(&text));
    }
    out
}

/// The identifiers that follow `prefix` in `code`.
fn names_after<'a>(code: &'a str, prefix: &str) -> Vec<&'a str> {
    code.match_indices(prefix)
        .map(|(i, _)| {
            let rest = &code[i + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

/// Module → the other modules of the crate it names.
fn graph(sources: &Sources) -> BTreeMap<String, BTreeSet<String>> {
    let mut g = BTreeMap::new();
    for (m, code) in sources {
        let mut deps = BTreeSet::new();
        let mut named: Vec<&str> = names_after(code, "crate::");
        for (i, _) in code.match_indices("use crate::{") {
            let rest = &code[i + "use crate::{".len()..];
            let group = &rest[..rest.find('}').unwrap_or(rest.len())];
            named.extend(group.split(',').filter_map(|item| {
                let item = item.trim();
                let end = item
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(item.len());
                (end > 0).then(|| &item[..end])
            }));
        }
        for n in named {
            if n != m && sources.contains_key(n) {
                deps.insert(n.to_string());
            }
        }
        g.insert(m.clone(), deps);
    }
    g
}

/// The circles of `g`: its strongly connected components of more than
/// one module (Tarjan's algorithm).
fn circles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.g.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.out.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.out
}

#[test]
fn no_crate_of_ours_has_a_circle_between_its_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n != "vendor") && p.join("src").is_dir())
        .collect();
    crates.push(root.to_path_buf());
    crates.sort();
    assert!(
        crates.len() > 5,
        "crates not found under {}",
        root.display()
    );
    let mut found = Vec::new();
    for c in &crates {
        for circle in circles(&graph(&sources(&c.join("src")))) {
            found.push(format!(
                "{}: {}",
                c.file_name().unwrap().to_string_lossy(),
                circle.join(" <-> ")
            ));
        }
    }
    assert!(found.is_empty(), "module circles:\n{}", found.join("\n"));
}

#[test]
fn the_checker_finds_a_circle_and_passes_a_chain() {
    let of = |pairs: &[(&str, &str)]| -> Sources {
        pairs
            .iter()
            .map(|(m, code)| (m.to_string(), code_of(code)))
            .collect()
    };
    // a -> b -> c -> a, through a path, a group import and a call.
    let circle = of(&[
        ("a", "use crate::b::Thing;"),
        ("b", "use crate::{c, a_not_a_module};"),
        ("c", "fn f() { crate::a::go() }"),
        ("d", "// crate::a in a comment only"),
    ]);
    assert_eq!(circles(&graph(&circle)), vec![vec!["a", "b", "c"]]);
    // The same without the way back, and a reference made only by a
    // test module, are no circle.
    let chain = of(&[
        ("a", "use crate::b::Thing;"),
        ("b", "use crate::{c};"),
        (
            "c",
            "fn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::a::go;\n}",
        ),
    ]);
    assert!(circles(&graph(&chain)).is_empty());
}
