//! The compiler's modules (and the runner's, the API crate's and the playground's) depend on each
//! other in one direction only: no import cycles (issue 12). A module's dependencies are the other modules
//! of its crate that its code names as `crate::m` (in `use` lines, grouped `use crate::{a, b}`
//! or inline paths); comments and unit-test modules do not count. A directory module
//! (`engine/`) is one module with all its files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module name -> the modules of the same crate it names.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let mut all = Vec::new();
            let mut stack = vec![path];
            while let Some(dir) = stack.pop() {
                for e in std::fs::read_dir(dir).unwrap() {
                    let p = e.unwrap().path();
                    if p.is_dir() {
                        stack.push(p);
                    } else if p.extension().is_some_and(|x| x == "rs") {
                        all.push(p);
                    }
                }
            }
            files.entry(name).or_default().extend(all);
        } else if path.extension().is_some_and(|x| x == "rs") && name != "lib" && name != "main" {
            files.entry(name).or_default().push(path);
        }
    }
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    let mut deps = BTreeMap::new();
    for (module, paths) in &files {
        let mut named = BTreeSet::new();
        for path in paths {
            let text = std::fs::read_to_string(path).unwrap();
            let code = text
                .split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap_or_default();
            for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for (i, _) in line.match_indices("crate::") {
                    let rest = &line[i + "crate::".len()..];
                    let names: Vec<&str> = match rest.strip_prefix('{') {
                        // `use crate::{a, b::c}` (one line)
                        Some(group) => group
                            .split(['}', ','])
                            .map(|s| s.trim().split("::").next().unwrap_or_default())
                            .collect(),
                        None => vec![rest
                            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                            .next()
                            .unwrap_or_default()],
                    };
                    for n in names {
                        if modules.contains(n) && n != module {
                            named.insert(n.to_string());
                        }
                    }
                }
            }
        }
        deps.insert(module.clone(), named);
    }
    deps
}

/// A cycle in the graph, if there is one (depth-first search with colours).
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        m: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut c = path[i..].to_vec();
            c.push(m.to_string());
            return Some(c);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for d in &g[m] {
            if let Some(c) = visit(g, d, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|m| visit(g, m, &mut Vec::new(), &mut done))
}

#[test]
fn no_import_cycles_in_the_compiler_the_runner_the_api_or_the_playground() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for krate in ["compiler/src", "runner/src", "api/src", "web/src"] {
        let g = graph(&root.join(krate));
        assert!(g.len() > 3, "{krate}: modules not found");
        if let Some(c) = cycle(&g) {
            panic!("{krate}: import cycle {}", c.join(" -> "));
        }
    }
    // The graph is read as meant: the engine depends on the GPU layer, not the other way.
    let runner = graph(&root.join("runner/src"));
    assert!(runner["engine"].contains("gpu") && !runner["gpu"].contains("engine"));
    // The compiler's layers: front end -> fusion -> kernel IR -> passes -> back end.
    let compiler = graph(&root.join("compiler/src"));
    for (low, high) in [
        ("frontend", "fusion"),
        ("fusion", "kir"),
        ("fusion", "passes"),
        ("kir", "passes"),
        ("passes", "codegen"),
        ("target", "passes"),
        ("plan", "passes"),
    ] {
        assert!(
            !compiler[low].contains(high),
            "`{low}` names `{high}`, a layer above it"
        );
    }
    assert!(compiler["passes"].contains("kir") && compiler["codegen"].contains("kir"));
}

#[test]
fn a_cycle_is_found() {
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(cycle(&g).unwrap(), ["a", "b", "c", "a"]);
    let mut acyclic = g.clone();
    acyclic.get_mut("c").unwrap().clear();
    assert_eq!(cycle(&acyclic), None);
}
