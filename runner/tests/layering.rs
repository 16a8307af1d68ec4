//! The compiler's modules (and the runner's, the API crate's and the playground's) depend on each
//! other in one direction only: no import cycles (issues 12 and 32).
//!
//! The graph is read at the granularity of files: every `.rs` file is a module (`a/b/c.rs` is
//! `a::b::c`, `a/b/mod.rs` and `a/b.rs` are `a::b`). A module depends on the modules its code
//! names by path: `crate::...`, `super::...` (any number of them) and `self::...`, in `use` lines
//! (groups nested or over several lines) or inline. A path names the longest module it spells:
//! `crate::passes::tma::circular::issue` is `passes::tma::circular`. Comments and inline unit-test
//! modules do not count. A module naming one of its own ancestors (`use super::*` for the shared
//! parts in `mod.rs`) or descendants (a `mod.rs` using its children) is the parent-child tie every
//! directory module has, not an edge; siblings and cousins are edges. So a cycle between two
//! files of one pass (`tma/circular.rs` and `tma/warp_specialize.rs` naming each other through
//! `super::`) is found, as well as a cycle between top-level modules.
//!
//! The layering asserts below read the same graph folded to top-level modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;
type Graph = BTreeMap<Module, BTreeSet<Module>>;

/// Every `.rs` file under `src` with the module path it defines.
fn modules(src: &Path) -> Vec<(Module, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![(src.to_path_buf(), Vec::<String>::new())];
    while let Some((dir, prefix)) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                let mut p = prefix.clone();
                p.push(name);
                stack.push((path, p));
            } else if path.extension().is_some_and(|x| x == "rs") {
                let mut m = prefix.clone();
                let is_root = prefix.is_empty() && (name == "lib" || name == "main");
                if name != "mod" && !is_root {
                    m.push(name);
                }
                out.push((m, path));
            }
        }
    }
    out
}

/// The code of a file without comments and without its inline unit-test module, on one line
/// (so `use` groups over several lines read as one).
fn code_of(text: &str) -> String {
    let code = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    code.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every path the code names from `crate`, `super` or `self`, as written after the keyword
/// (groups expanded: `crate::{a::{b, c}, d}` gives `crate a b`, `crate a c`, `crate d`).
fn paths(code: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < bytes.len() {
        let start_ok = i == 0 || !(is_ident(bytes[i - 1]) || bytes[i - 1] == b':');
        let rest = &bytes[i..];
        let kw = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|k| rest.starts_with(k.as_bytes()));
        match kw {
            Some(k) if start_ok => {
                let mut prefix = vec![k.trim_end_matches(':').to_string()];
                let end = expand(code, i + k.len(), &mut prefix, &mut out);
                i = end.max(i + 1);
            }
            _ => i += 1,
        }
    }
    out
}

/// Reads the path from `at` (after a `::`), pushing the full paths it names onto `out`; returns
/// where it ended.
fn expand(
    code: &str,
    mut at: usize,
    prefix: &mut Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    let bytes = code.as_bytes();
    let skip_ws = |mut j: usize| {
        while j < bytes.len() && bytes[j].is_ascii_whitespace() {
            j += 1;
        }
        j
    };
    let depth = prefix.len();
    loop {
        at = skip_ws(at);
        if at < bytes.len() && bytes[at] == b'{' {
            // A group: each comma-separated member continues the prefix.
            at += 1;
            loop {
                at = skip_ws(at);
                if at >= bytes.len() {
                    break;
                }
                match bytes[at] {
                    b'}' => {
                        at += 1;
                        break;
                    }
                    b',' => at += 1,
                    _ => {
                        let before = at;
                        at = expand(code, at, prefix, out);
                        if at == before {
                            at += 1;
                        }
                    }
                }
            }
            prefix.truncate(depth);
            return at;
        }
        let start = at;
        while at < bytes.len() && (bytes[at].is_ascii_alphanumeric() || bytes[at] == b'_') {
            at += 1;
        }
        if at == start {
            // `*` or the end of the path.
            out.push(prefix.clone());
            prefix.truncate(depth);
            return at;
        }
        prefix.push(code[start..at].to_string());
        if bytes[at..].starts_with(b"::") {
            at += 2;
        } else {
            out.push(prefix.clone());
            prefix.truncate(depth);
            // `a as b`: the alias is no path.
            let after = skip_ws(at);
            if bytes[after..].starts_with(b"as ") {
                at = skip_ws(after + 3);
                while at < bytes.len() && (bytes[at].is_ascii_alphanumeric() || bytes[at] == b'_') {
                    at += 1;
                }
            }
            return at;
        }
    }
}

/// Module -> the modules of the same crate it depends on (see the module doc).
fn graph(src: &Path) -> Graph {
    let files = modules(src);
    let known: BTreeSet<Module> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut g: Graph = known.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
    for (module, path) in &files {
        let text = std::fs::read_to_string(path).unwrap();
        for p in paths(&code_of(&text)) {
            let (mut base, rest) = match p[0].as_str() {
                "crate" => (Vec::new(), &p[1..]),
                "self" => (module.clone(), &p[1..]),
                _ => {
                    // `super::super::x`: one level up per `super`.
                    let ups = p.iter().take_while(|s| *s == "super").count();
                    let base = module[..module.len().saturating_sub(ups)].to_vec();
                    (base, &p[ups..])
                }
            };
            for seg in rest {
                let mut next = base.clone();
                next.push(seg.clone());
                if !known.contains(&next) {
                    break;
                }
                base = next;
            }
            let related = base.starts_with(module) || module.starts_with(&base);
            if !related && known.contains(&base) {
                g.get_mut(module).unwrap().insert(base);
            }
        }
    }
    g
}

/// The graph folded to top-level modules (the crate root left out).
fn top_level(g: &Graph) -> BTreeMap<String, BTreeSet<String>> {
    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, deps) in g {
        let Some(a) = m.first() else { continue };
        let entry = top.entry(a.clone()).or_default();
        for d in deps {
            if let Some(b) = d.first().filter(|b| *b != a) {
                entry.insert(b.clone());
            }
        }
    }
    top
}

/// A cycle in the graph, if there is one (depth-first search with colours).
fn cycle<N: Ord + Clone>(g: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
    fn visit<N: Ord + Clone>(
        g: &BTreeMap<N, BTreeSet<N>>,
        m: &N,
        path: &mut Vec<N>,
        done: &mut BTreeSet<N>,
    ) -> Option<Vec<N>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut c = path[i..].to_vec();
            c.push(m.clone());
            return Some(c);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.clone());
        for d in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(g, d, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.clone());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|m| visit(g, m, &mut Vec::new(), &mut done))
}

fn show(c: &[Module]) -> String {
    c.iter()
        .map(|m| m.join("::"))
        .collect::<Vec<_>>()
        .join(" -> ")
}

#[test]
fn no_import_cycles_in_the_compiler_the_runner_the_api_the_playground_or_the_launcher() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for krate in [
        "compiler/src",
        "runner/src",
        "api/src",
        "web/src",
        "launch/src",
    ] {
        let g = graph(&root.join(krate));
        assert!(g.len() > 3, "{krate}: modules not found");
        if let Some(c) = cycle(&g) {
            panic!("{krate}: import cycle {}", show(&c));
        }
    }
    // The graph is read as meant: the engine depends on the GPU layer, not the other way.
    let runner = top_level(&graph(&root.join("runner/src")));
    assert!(runner["engine"].contains("gpu") && !runner["gpu"].contains("engine"));
    // The compiler's layers: front end -> fusion -> kernel IR -> passes -> back end.
    let fine = graph(&root.join("compiler/src"));
    let compiler = top_level(&fine);
    for (low, high) in [
        ("frontend", "fusion"),
        ("fusion", "kir"),
        ("fusion", "passes"),
        ("kir", "passes"),
        ("passes", "backend"),
        ("fusion", "backend"),
        ("kir", "backend"),
        ("auto", "backend"),
        ("target", "passes"),
        ("plan", "passes"),
    ] {
        assert!(
            !compiler[low].contains(high),
            "`{low}` names `{high}`, a layer above it"
        );
    }
    assert!(compiler["passes"].contains("kir") && compiler["backend"].contains("kir"));
    // The back ends (`backend/`) read the IR above them, never one another.
    let backend = |m: &Module| (m.len() >= 2 && m[0] == "backend").then(|| m[1].clone());
    for (m, deps) in &fine {
        let Some(own) = backend(m) else { continue };
        for d in deps {
            if let Some(other) = backend(d).filter(|o| *o != own) {
                panic!(
                    "back end `{own}` ({}) names back end `{other}` ({})",
                    show(std::slice::from_ref(m)),
                    show(std::slice::from_ref(d))
                );
            }
        }
    }
    // And at file granularity: a pass's parts are read (`super::` paths resolve to siblings).
    let tma = ["passes", "tma"].map(String::from).to_vec();
    let ws = [&tma[..], &["warp_specialize".to_string()]].concat();
    assert!(
        fine[&ws]
            .iter()
            .any(|d| d.starts_with(&tma) && d.len() == 3),
        "the sibling imports of passes::tma::warp_specialize are not read"
    );
}

/// Writes a small crate into a temporary directory and returns its `src`.
fn planted(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hopfuse-layering-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

#[test]
fn a_cycle_between_sibling_files_through_super_is_found() {
    let src = planted(
        "siblings",
        &[
            ("lib.rs", "mod passes;\n"),
            ("passes/mod.rs", "mod a;\nmod b;\npub use self::a::f;\n"),
            (
                "passes/a.rs",
                "use super::*;\nuse super::b::{g,\n    h};\npub fn f() { g(); h(); }\n",
            ),
            (
                "passes/b.rs",
                "pub fn g() { super::a::f() }\npub fn h() {}\n",
            ),
        ],
    );
    let g = graph(&src);
    let c = cycle(&g).expect("the planted cycle");
    assert_eq!(show(&c), "passes::a -> passes::b -> passes::a");
    // Without b's call back there is none: `use super::*` and the parent's re-export are the
    // parent-child tie, not edges.
    std::fs::write(src.join("passes/b.rs"), "pub fn g() {}\npub fn h() {}\n").unwrap();
    assert_eq!(cycle(&graph(&src)), None);
    let _ = std::fs::remove_dir_all(src);
}

#[test]
fn a_cycle_through_crate_paths_in_nested_groups_is_found() {
    let src = planted(
        "groups",
        &[
            ("main.rs", "mod kir;\nmod passes;\n"),
            ("kir/mod.rs", "mod print;\n"),
            // A nested group over several lines, after a comment naming another module.
            (
                "kir/print.rs",
                "// crate::nothing here counts\nuse crate::{\n    passes::{sync::X, other},\n};\n",
            ),
            ("passes/mod.rs", "pub mod sync;\n"),
            ("passes/sync.rs", "pub struct X(crate::kir::print::Y);\n"),
        ],
    );
    let g = graph(&src);
    let c = cycle(&g).expect("the planted cycle");
    assert_eq!(show(&c), "kir::print -> passes::sync -> kir::print");
    let top = top_level(&g);
    assert!(top["kir"].contains("passes") && top["passes"].contains("kir"));
    let _ = std::fs::remove_dir_all(src);
}

#[test]
fn super_super_and_self_paths_resolve() {
    let code = "use super::super::{extract as view, PipelineView}; let x = self::walk::go();";
    assert_eq!(
        paths(code),
        [
            vec!["super", "super", "extract"],
            vec!["super", "super", "PipelineView"],
            vec!["self", "walk", "go"],
        ]
    );
}
