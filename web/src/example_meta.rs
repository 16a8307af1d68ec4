//! What the Examples menu needs of an example's text, computed at build time by `build.rs`
//! (which includes this file by path) so that the page carries the menu without the programs:
//! an example's text is fetched from `examples/<group>/<name>.hf` next to the page when chosen.

/// The example's description: the first sentence of its header comment, without an
/// "Example 3:" style label, whole (the menu shows [`summary`] of a long one).
pub fn description(source: &str) -> String {
    let header: Vec<&str> = source
        .lines()
        .map_while(|l| l.trim().strip_prefix("//"))
        .map(str::trim)
        .collect();
    let text = header.join(" ");
    let text = match text.split_once(": ") {
        Some((label, rest)) if label.to_ascii_lowercase().contains("example") => rest,
        _ => text.as_str(),
    };
    match text.find(". ") {
        Some(i) => text[..=i].to_string(),
        None => text.to_string(),
    }
}

/// The size list of the first `// bench: M=...,N=...` line (empty without one).
pub fn bench_line(source: &str) -> &str {
    source
        .lines()
        .find_map(|l| l.trim().strip_prefix("// bench:"))
        .map(str::trim)
        .unwrap_or("")
}

/// FNV-1a of a text: tells whether the editor holds an example unchanged without carrying it.
pub fn fingerprint(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
