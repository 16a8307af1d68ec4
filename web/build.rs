//! Lists every example under `examples/` (one group per folder) so the Examples menu always
//! shows all of them: writes `$OUT_DIR/examples.rs` with each one's group, name, description,
//! bench sizes and fingerprint, the first one's text (the page opens with it), and every text
//! for the unit tests only (the page fetches a chosen example from `examples/`, which
//! `scripts/build-web.sh` copies into `dist/`).
use std::{env, fs, path::Path};

// The one definition of the examples' layout (`hopfuse::examples`), included by path: a
// build-dependency on the compiler would build the whole crate again for the host.
#[allow(dead_code)]
#[path = "../compiler/src/examples.rs"]
mod examples;
// What the menu shows of each example (the page carries these, not the programs).
#[path = "src/example_meta.rs"]
mod example_meta;

fn main() {
    let root = examples::repo_root();
    println!("cargo:rerun-if-changed={}", root.display());
    println!("cargo:rerun-if-changed=../compiler/src/examples.rs");
    let mut entries = Vec::new();
    let mut all = examples::list(&root).expect("examples/");
    // The first example opens the page: the basics' first (`basics/add`), whatever folders sort
    // before `basics` (`auto`).
    all.sort_by_key(|e| e.group != "basics");
    let mut groups: Vec<&str> = all.iter().map(|e| e.group.as_str()).collect();
    groups.dedup();
    for group in groups {
        println!("cargo:rerun-if-changed={}", root.join(group).display());
    }
    let mut sources = Vec::new();
    for e in &all {
        let path = fs::canonicalize(&e.path).expect("example path");
        let text = fs::read_to_string(&path).expect("example text");
        println!("cargo:rerun-if-changed={}", path.display());
        entries.push(format!(
            "    Example {{ group: {group:?}, name: {name:?}, description: {d:?}, bench: {b:?}, fingerprint: {f:#x} }},\n",
            group = e.group,
            name = e.name,
            d = example_meta::summary(&example_meta::description(&text)),
            b = example_meta::bench_line(&text),
            f = example_meta::fingerprint(&text),
        ));
        sources.push(format!(
            "    include_str!({:?}),\n",
            path.display().to_string()
        ));
    }
    let out = Path::new(&env::var("OUT_DIR").unwrap()).join("examples.rs");
    // The first example's text opens the page; the others are fetched when chosen (the unit
    // tests have them all).
    fs::write(
        out,
        format!(
            "pub const ALL: &[Example] = &[\n{}];\npub const FIRST_SOURCE: &str = {};\n#[cfg(test)]\npub const SOURCES: &[&str] = &[\n{}];\n",
            entries.concat(),
            sources[0].trim().trim_end_matches(','),
            sources.concat()
        ),
    )
    .unwrap();
}
