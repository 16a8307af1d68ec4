//! Every program in `examples/`, embedded at build time (see `build.rs`), grouped by folder.

/// One example program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Example {
    /// Its folder under `examples/` (`basics`, `tma`, ...).
    pub group: &'static str,
    /// Its file name without `.hf`.
    pub name: &'static str,
    pub source: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/examples.rs"));

/// Groups in menu order: the known ones first, then any other folder alphabetically.
const ORDER: &[&str] = &["basics", "tma", "warp_specialization", "ws", "matmul"];

/// A group's title in the menu.
pub fn group_title(group: &str) -> String {
    match group {
        "basics" => "Basics".into(),
        "tma" => "TMA".into(),
        "warp_specialization" | "ws" => "Warp specialization".into(),
        "matmul" => "Tensor cores (matmul)".into(),
        g => {
            let g = g.replace('_', " ");
            let mut c = g.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        }
    }
}

/// The groups in menu order, each with its examples.
pub fn grouped() -> Vec<(&'static str, Vec<Example>)> {
    let mut groups: Vec<(&'static str, Vec<Example>)> = Vec::new();
    for e in ALL {
        match groups.iter_mut().find(|(g, _)| *g == e.group) {
            Some((_, list)) => list.push(*e),
            None => groups.push((e.group, vec![*e])),
        }
    }
    let rank = |g: &str| ORDER.iter().position(|o| *o == g).unwrap_or(ORDER.len());
    groups.sort_by(|a, b| rank(a.0).cmp(&rank(b.0)).then(a.0.cmp(b.0)));
    groups
}

/// `group/name`, the key used in the menu.
pub fn key(e: &Example) -> String {
    format!("{}/{}", e.group, e.name)
}

pub fn find(key: &str) -> Option<Example> {
    ALL.iter().copied().find(|e| self::key(e) == key)
}

/// The example's one-line description: the first sentence of its header comment, without an
/// "Example 3:" style label, cut at 110 characters.
pub fn description(e: &Example) -> String {
    let header: Vec<&str> = e
        .source
        .lines()
        .map_while(|l| l.trim().strip_prefix("//"))
        .map(str::trim)
        .collect();
    let text = header.join(" ");
    let text = match text.split_once(": ") {
        Some((label, rest)) if label.to_ascii_lowercase().contains("example") => rest,
        _ => text.as_str(),
    };
    let sentence = match text.find(". ") {
        Some(i) => &text[..=i],
        None => text,
    };
    if sentence.chars().count() > 110 {
        let cut: String = sentence.chars().take(109).collect();
        format!("{}…", cut.trim_end())
    } else {
        sentence.to_string()
    }
}

/// The sizes of the example's first `// bench: M=...,N=...` line (empty without one).
pub fn bench_sizes(e: &Example) -> std::collections::BTreeMap<String, i64> {
    e.source
        .lines()
        .find_map(|l| l.trim().strip_prefix("// bench:"))
        .map(|list| {
            list.split(',')
                .filter_map(|kv| {
                    let (k, v) = kv.split_once('=')?;
                    Some((k.trim().to_string(), v.trim().parse().ok()?))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The example whose text is exactly `source`, if any (to show it selected in the menu).
pub fn matching(source: &str) -> Option<Example> {
    ALL.iter().copied().find(|e| e.source == source)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_example_compiles_and_basics_come_first() {
        assert!(ALL.len() >= 5);
        for e in ALL {
            hopfuse::compile(e.source, &Default::default())
                .unwrap_or_else(|d| panic!("{}: {d}", key(e)));
        }
        assert_eq!(grouped()[0].0, "basics");
        assert_eq!(group_title("warp_specialization"), "Warp specialization");
        assert!(find("basics/add").is_some());
    }

    /// The tensor-core ladder is in the menu, after the groups it builds on, in step order.
    #[test]
    fn the_matmul_steps_are_a_group_of_their_own() {
        let groups = grouped();
        let names: Vec<&str> = groups.iter().map(|g| g.0).collect();
        assert_eq!(names[..4], ["basics", "tma", "ws", "matmul"]);
        assert_eq!(group_title("matmul"), "Tensor cores (matmul)");
        let steps: Vec<&str> = groups[3].1.iter().map(|e| e.name).collect();
        assert!(steps.len() >= 7, "{steps:?}");
        let key = |n: &str| -> u32 {
            n.trim_start_matches("step")
                .split('_')
                .next()
                .and_then(|d| d.parse().ok())
                .unwrap_or(0)
        };
        assert!(steps.windows(2).all(|w| key(w[0]) < key(w[1])), "{steps:?}");
        assert_eq!(steps[0], "step1_one_warp_group");
    }

    #[test]
    fn descriptions_and_bench_sizes() {
        let add = find("basics/add").unwrap();
        assert_eq!(
            description(&add),
            "c = a + b over f32 [M, N], 16-byte vector loads and stores."
        );
        assert_eq!(
            bench_sizes(&add).into_iter().collect::<Vec<_>>(),
            vec![("M".to_string(), 16384), ("N".to_string(), 16384)]
        );
        for e in ALL {
            let d = description(e);
            assert!(!d.is_empty() && d.chars().count() <= 110, "{}: {d}", key(e));
            assert!(
                !d.starts_with("Example") && !d.starts_with("TMA example"),
                "{}: {d}",
                key(e)
            );
            // Every example has bench sizes, and they name exactly its size symbols.
            let c = hopfuse::compile(e.source, &Default::default()).unwrap();
            let sizes = bench_sizes(e);
            for sym in &c.plan.symbols {
                assert!(
                    sizes.contains_key(sym),
                    "{}: no bench size for {sym}",
                    key(e)
                );
            }
        }
    }
}
