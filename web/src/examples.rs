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
const ORDER: &[&str] = &["basics", "tma", "warp_specialization", "ws"];

/// A group's title in the menu.
pub fn group_title(group: &str) -> String {
    match group {
        "basics" => "Basics".into(),
        "tma" => "TMA".into(),
        "warp_specialization" | "ws" => "Warp specialization".into(),
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
}
