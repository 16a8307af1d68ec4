//! Embeds every example under `examples/` (one group per folder) so the Examples menu always
//! lists all of them: writes `$OUT_DIR/examples.rs` with `include_str!` of each `.hf` file.
use std::{env, fs, path::Path};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut entries = Vec::new();
    let mut groups: Vec<_> = fs::read_dir(&root)
        .expect("examples/")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .collect();
    groups.sort_by_key(|e| e.file_name());
    for group in groups {
        println!("cargo:rerun-if-changed={}", group.path().display());
        let mut files: Vec<_> = fs::read_dir(group.path())
            .expect("example group")
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "hf"))
            .collect();
        files.sort();
        for file in files {
            let group = group.file_name().to_string_lossy().into_owned();
            let name = file.file_stem().unwrap().to_string_lossy().into_owned();
            let path = fs::canonicalize(&file).expect("example path");
            entries.push(format!(
                "    Example {{ group: {group:?}, name: {name:?}, source: include_str!({path:?}) }},\n",
                path = path.display().to_string()
            ));
        }
    }
    let out = Path::new(&env::var("OUT_DIR").unwrap()).join("examples.rs");
    fs::write(
        out,
        format!("pub const ALL: &[Example] = &[\n{}];\n", entries.concat()),
    )
    .unwrap();
}
