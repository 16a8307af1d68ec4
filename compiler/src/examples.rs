//! Where the example programs are: `examples/<group>/<name>.hf` at the repository root, one
//! folder level of groups. The one definition of that layout, used by the tests
//! (`hopfuse-tests`), the runner (`hopfuse bench` with no programs, its tests) and the
//! playground's build script, which embeds every example (it includes this file by path, so
//! it must use nothing but `std`). Shell scripts glob the same layout: `examples/*/*.hf`.

use std::path::{Path, PathBuf};

/// One example program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Example {
    /// Its folder below `examples/` (`basics`, `tma`, `ws`, ...).
    pub group: String,
    /// Its file name without `.hf`.
    pub name: String,
    pub path: PathBuf,
}

impl Example {
    /// `group/name`, as the playground's Examples menu and `hopfuse bench` name it.
    pub fn id(&self) -> String {
        format!("{}/{}", self.group, self.name)
    }
}

/// The `examples` folder of this repository (a path baked in at compile time: for tests and
/// build scripts of this workspace, not for an installed binary).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// Every example below `root` (an `examples` folder), sorted by group, then by name.
pub fn list(root: &Path) -> std::io::Result<Vec<Example>> {
    let mut out = Vec::new();
    for group in std::fs::read_dir(root)? {
        let group = group?.path();
        if !group.is_dir() {
            continue;
        }
        let group_name = file_name(&group);
        for file in std::fs::read_dir(&group)? {
            let path = file?.path();
            if path.is_file() && path.extension().is_some_and(|e| e == "hf") {
                out.push(Example {
                    group: group_name.clone(),
                    name: path
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    path,
                });
            }
        }
    }
    out.sort_by(|a, b| (&a.group, &a.name).cmp(&(&b.group, &b.name)));
    Ok(out)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_groups_and_programs_in_order_and_nothing_else() {
        let root = std::env::temp_dir().join(format!("hopfuse-examples-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (dir, file) in [
            ("b", "z.hf"),
            ("b", "a.hf"),
            ("a", "m.hf"),
            ("a", "notes.md"),
            ("a/nested", "deep.hf"),
        ] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
            std::fs::write(root.join(dir).join(file), "").unwrap();
        }
        std::fs::write(root.join("top.hf"), "").unwrap();
        let ids: Vec<String> = list(&root).unwrap().iter().map(Example::id).collect();
        assert_eq!(ids, ["a/m", "b/a", "b/z"]);
        assert!(list(&root.join("missing")).is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_repository_has_examples_in_every_group() {
        let all = list(&repo_root()).expect("examples/");
        for group in ["basics", "tma", "ws"] {
            assert!(all.iter().any(|e| e.group == group), "no {group} example");
        }
    }
}
