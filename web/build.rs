//! Embeds every example under `examples/` (one group per folder) so the Examples menu always
//! lists all of them: writes `$OUT_DIR/examples.rs` with `include_str!` of each `.hf` file.
use std::{env, fs, path::Path};

// The one definition of the examples' layout (`hopfuse::examples`), included by path: a
// build-dependency on the compiler would build the whole crate again for the host.
#[allow(dead_code)]
#[path = "../compiler/src/examples.rs"]
mod examples;

fn main() {
    let root = examples::repo_root();
    println!("cargo:rerun-if-changed={}", root.display());
    println!("cargo:rerun-if-changed=../compiler/src/examples.rs");
    let mut entries = Vec::new();
    let all = examples::list(&root).expect("examples/");
    let mut groups: Vec<&str> = all.iter().map(|e| e.group.as_str()).collect();
    groups.dedup();
    for group in groups {
        println!("cargo:rerun-if-changed={}", root.join(group).display());
    }
    for e in &all {
        let path = fs::canonicalize(&e.path).expect("example path");
        entries.push(format!(
            "    Example {{ group: {group:?}, name: {name:?}, source: include_str!({path:?}) }},\n",
            group = e.group,
            name = e.name,
            path = path.display().to_string()
        ));
    }
    let out = Path::new(&env::var("OUT_DIR").unwrap()).join("examples.rs");
    fs::write(
        out,
        format!("pub const ALL: &[Example] = &[\n{}];\n", entries.concat()),
    )
    .unwrap();
}
