//! Every program in `examples/`, listed at build time (see `build.rs`; numbers in names sort as
//! numbers, `hopfuse::examples`), grouped by folder: Basics, TMA, Warp specialization, Tensor
//! cores (matmul), then any other folder. The page carries each one's description and bench
//! sizes; its text is fetched from `examples/<group>/<name>.hf` next to the page when chosen
//! (the first is built in).

use crate::example_meta;

/// One example program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Example {
    /// Its folder under `examples/` (`basics`, `tma`, ...).
    pub group: &'static str,
    /// Its file name without `.hf`.
    pub name: &'static str,
    /// The menu's line: [`example_meta::summary`] of its header's first sentence.
    pub description: &'static str,
    /// The sizes of its first `// bench:` line.
    pub bench: &'static str,
    /// [`example_meta::fingerprint`] of its text.
    pub fingerprint: u64,
}

include!(concat!(env!("OUT_DIR"), "/examples.rs"));

/// Where the page fetches the example's text (relative to the page: `dist/examples/`).
pub fn url(e: &Example) -> String {
    format!("examples/{}/{}.hf", e.group, e.name)
}

/// The example's text when the page has it without fetching (the first example).
pub fn built_in(e: &Example) -> Option<&'static str> {
    (*e == ALL[0]).then_some(FIRST_SOURCE)
}

/// The example's text (unit tests: every text is built in).
#[cfg(test)]
pub fn source(e: &Example) -> &'static str {
    SOURCES[ALL.iter().position(|x| x == e).expect("an example")]
}

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
    // Kept in menu order as it is built (a binary search, not a sort: the page's wasm carries no
    // sort for this element type).
    let rank = |g: &'static str| (ORDER.iter().position(|o| *o == g).unwrap_or(ORDER.len()), g);
    let mut groups: Vec<(&'static str, Vec<Example>)> = Vec::new();
    for e in ALL {
        match groups.binary_search_by(|(g, _)| rank(g).cmp(&rank(e.group))) {
            Ok(at) => groups[at].1.push(*e),
            Err(at) => groups.insert(at, (e.group, vec![*e])),
        }
    }
    groups
}

/// `group/name`, the key used in the menu.
pub fn key(e: &Example) -> String {
    format!("{}/{}", e.group, e.name)
}

pub fn find(key: &str) -> Option<Example> {
    ALL.iter().copied().find(|e| self::key(e) == key)
}

/// The example's one-line description ([`example_meta::summary`] of its header's first sentence).
pub fn description(e: &Example) -> String {
    e.description.to_string()
}

/// The sizes of the example's first `// bench: M=...,N=...` line (empty without one).
pub fn bench_sizes(e: &Example) -> std::collections::BTreeMap<String, i64> {
    // Inserted one by one: `collect` into a BTreeMap would link a sort for its iterator type.
    let mut sizes = std::collections::BTreeMap::new();
    for (k, v) in e.bench.split(',').filter_map(|kv| kv.split_once('=')) {
        if let Ok(v) = v.trim().parse() {
            sizes.insert(k.trim().to_string(), v);
        }
    }
    sizes
}

/// The example whose text is exactly `source`, if any (to show it selected in the menu).
pub fn matching(source: &str) -> Option<Example> {
    let f = example_meta::fingerprint(source);
    ALL.iter().copied().find(|e| e.fingerprint == f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The menu's data is the texts' (computed at build time), only the first text is built in.
    #[test]
    fn the_menu_carries_what_the_texts_say() {
        for e in ALL {
            let text = source(e);
            assert_eq!(e.fingerprint, example_meta::fingerprint(text), "{}", key(e));
            assert_eq!(
                e.description,
                example_meta::summary(&example_meta::description(text)),
                "{}",
                key(e)
            );
            assert_eq!(e.bench, example_meta::bench_line(text), "{}", key(e));
            assert_eq!(matching(text), Some(*e));
            assert_eq!(url(e), format!("examples/{}.hf", key(e)));
        }
        assert_eq!(built_in(&ALL[0]), Some(source(&ALL[0])));
        assert!(ALL[1..].iter().all(|e| built_in(e).is_none()));
        assert_eq!(matching(&format!("{} ", source(&ALL[0]))), None);
    }

    #[test]
    fn every_example_compiles_and_basics_come_first() {
        assert!(ALL.len() >= 5);
        for e in ALL {
            // As the page compiles it: a split fusion compiles kernel by kernel.
            hopfuse::compile_program(source(e), &Default::default())
                .unwrap_or_else(|d| panic!("{}: {d}", key(e)));
        }
        assert_eq!(grouped()[0].0, "basics");
        // The page opens with the first example (`auto/` sorts before `basics/`).
        assert_eq!(key(&ALL[0]), "basics/add");
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
        // In order of their numbers; a step's variant (`step18_fp8_block_overlap`) shares it.
        assert!(
            steps.windows(2).all(|w| key(w[0]) <= key(w[1])),
            "{steps:?}"
        );
        assert!(steps.windows(2).any(|w| key(w[0]) < key(w[1])), "{steps:?}");
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
        // A long first sentence is summed up by its first clause, never cut mid-way.
        let matmul = find("basics/matmul").unwrap();
        let sentence = example_meta::description(source(&matmul));
        assert!(sentence.ends_with("compares it with cuBLAS on the same problem)."));
        assert_eq!(
            description(&matmul),
            "A matrix product c[M, N] = a[M, K] x b[K, N] in f32, written as a sum over K of broadcast products."
        );
        for e in ALL {
            let d = description(e);
            let sentence = example_meta::description(source(e));
            assert!(!d.is_empty() && !d.contains('…'), "{}: {d}", key(e));
            assert!(
                d.chars().count() <= example_meta::SUMMARY_CHARS + 1,
                "{}: {d}",
                key(e)
            );
            assert!(
                sentence.starts_with(d.trim_end_matches('.')),
                "{}: {d}",
                key(e)
            );
            assert!(
                !d.starts_with("Example") && !d.starts_with("TMA example"),
                "{}: {d}",
                key(e)
            );
            // Every example has bench sizes, and they name exactly its size symbols.
            let symbols = match hopfuse::compile_program(source(e), &Default::default()).unwrap() {
                hopfuse::Compiled::One { compilation, .. } => compilation.plan.symbols,
                hopfuse::Compiled::Segmented(s) => {
                    s.kernels.into_iter().flat_map(|c| c.plan.symbols).collect()
                }
            };
            let sizes = bench_sizes(e);
            for sym in &symbols {
                assert!(
                    sizes.contains_key(sym),
                    "{}: no bench size for {sym}",
                    key(e)
                );
            }
        }
    }
}
