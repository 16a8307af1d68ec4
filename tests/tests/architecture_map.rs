//! `docs/ARCHITECTURE.md` is a map, and a map that names files which moved or passes in the wrong
//! order misleads: every backticked path in it exists, its pass table lists `passes::PIPELINE` in
//! order, and it stays short (the detail belongs in the module docs).

use std::path::Path;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn map() -> String {
    std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap()
}

/// The backticked tokens of the text.
fn ticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Whether a token is written as a path in the tree (not a command line, an endpoint or a
/// Rust path).
fn is_path(t: &str) -> bool {
    const EXT: [&str; 11] = [
        ".rs", ".md", ".sh", ".hf", ".json", ".html", ".mjs", ".toml", ".js", ".py", ".snap",
    ];
    let plain = !t.contains(' ') && !t.contains("::") && !t.starts_with(['/', '#']);
    let endpoint = ["POST", "GET", "nats:", "dist/"]
        .iter()
        .any(|p| t.starts_with(p));
    plain && !endpoint && (t.contains('/') || EXT.iter().any(|e| t.ends_with(e)))
}

/// Where a path is looked for: from the root, or from the part of the tree its section
/// describes (the map writes module paths relative to their crate or pass folder).
const BASES: [&str; 12] = [
    "",
    "compiler/src",
    "compiler/src/passes",
    "compiler/src/codegen",
    "compiler/src/fusion",
    "runner/src",
    "runner",
    "web/src",
    "web",
    "tests/tests",
    "api/src",
    "runner/tests",
];

/// Whether `path` exists under `base`; a `*` in its file name matches any run of characters.
fn exists(base: &Path, path: &str) -> bool {
    let full = base.join(path);
    let Some((head, tail)) = path.rsplit('/').next().and_then(|f| f.split_once('*')) else {
        return full.exists();
    };
    let dir = full.parent().unwrap();
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.len() >= head.len() + tail.len() && name.starts_with(head) && name.ends_with(tail)
        })
    })
}

#[test]
fn every_path_the_map_names_exists() {
    let text = map();
    let mut missing = Vec::new();
    let mut checked = 0;
    for t in ticked(&text).into_iter().filter(|t| is_path(t)) {
        // `tests/passes/<pass>/<case>.hf` names a pattern: its folder must exist.
        let p = t.split('<').next().unwrap().trim_end_matches('/');
        checked += 1;
        if !BASES.iter().any(|b| exists(&root().join(b), p)) {
            missing.push(t.to_string());
        }
    }
    assert!(
        checked > 50,
        "only {checked} paths found: is the map still written with backticks?"
    );
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

#[test]
fn the_pass_table_lists_the_pipeline_in_order() {
    let text = map();
    let table = &text[text.find("## The passes").expect("a section on the passes")..];
    let listed: Vec<&str> = table
        .lines()
        .take_while(|l| !l.starts_with("Shared by"))
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .collect();
    let pipeline: Vec<&str> = hopfuse::passes::PIPELINE.iter().map(|p| p.name).collect();
    assert_eq!(listed, pipeline);
}

#[test]
fn the_map_stays_a_map() {
    let text = map();
    let lines = text.lines().count();
    assert!(
        lines <= 260,
        "docs/ARCHITECTURE.md has {lines} lines: move detail to module docs"
    );
    if let Some(long) = text.lines().find(|l| l.chars().count() > 120) {
        panic!("a line over 120 characters: {long}");
    }
}

#[test]
fn paths_are_told_from_names() {
    assert!(is_path("compiler/src/plan.rs"));
    assert!(is_path("loop_nest/"));
    assert!(!is_path("passes::PIPELINE"));
    assert!(!is_path("POST /api/run"));
    assert!(!is_path("hopfuse serve --queue nats://..."));
    assert!(exists(root(), "scripts/*-device-check.sh"));
    assert!(!exists(root(), "scripts/*-no-such-check.sh"));
}
