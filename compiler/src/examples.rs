//! Where the example programs are: `examples/<group>/<name>.hf` at the repository root, one
//! folder level of groups. The one definition of that layout, used by the tests
//! (`hopfuse-tests`), the runner (`hopfuse bench` with no programs, its tests) and the
//! playground's build script, which embeds every example (it includes this file by path, so
//! it must use nothing but `std`). Shell scripts glob the same layout: `examples/*/*.hf`.
//! Within a group, runs of digits in names compare as numbers (`step9` before `step10`).

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
    out.sort_by(|a, b| (&a.group, natural_key(&a.name)).cmp(&(&b.group, natural_key(&b.name))));
    Ok(out)
}

/// An example's text with its `schedule { ... }` block deleted (from the line `schedule {` to
/// the `}` line that closes it; comments and `// bench:` lines kept): the program the
/// automatic-schedule tests compile, as a user who writes only the math would.
pub fn without_schedule(source: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in source.lines() {
        if line.trim_end() == "schedule {" {
            inside = true;
        } else if inside && line.trim_end() == "}" {
            inside = false;
        } else if !inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A name's sort key with its runs of digits compared as numbers (`step9` before `step10`).
pub fn natural_key(name: &str) -> Vec<(String, u64)> {
    let mut key = Vec::new();
    let mut text = String::new();
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            let mut n = u64::from(c as u8 - b'0');
            while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                n = n.saturating_mul(10).saturating_add(u64::from(d));
                chars.next();
            }
            key.push((std::mem::take(&mut text), n));
        } else {
            text.push(c);
        }
    }
    key.push((text, 0));
    key
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
    fn numbers_in_names_sort_as_numbers() {
        let mut names = ["step10_b", "step9_a", "step1_c", "add", "step2"];
        names.sort_by_key(|n| natural_key(n));
        assert_eq!(names, ["add", "step1_c", "step2", "step9_a", "step10_b"]);
    }

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
