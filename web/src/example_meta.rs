//! What the Examples menu needs of an example's text, computed at build time by `build.rs`
//! (which includes this file by path) so that the page carries the menu without the programs:
//! an example's text is fetched from `examples/<group>/<name>.hf` next to the page when chosen.

/// The first sentence of an example's header comment, without an "Example 3:" style label,
/// whole (the menu shows its [`summary`]).
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

/// The longest line the Examples menu shows of a description.
pub const SUMMARY_CHARS: usize = 120;

/// The Examples menu's line for a description: the description when it is short, else its
/// first clause that fits (up to `: `, `; ` or ` (`, else the last `, `, never inside
/// brackets) as a sentence. Computed at build time: the page carries only these lines.
pub fn summary(d: &str) -> String {
    if d.chars().count() <= SUMMARY_CHARS {
        return d.to_string();
    }
    let (mut depth, mut clause, mut comma) = (0usize, None, None);
    for (i, c) in d.char_indices().take_while(|&(i, _)| i <= SUMMARY_CHARS) {
        let rest = &d[i..];
        match c {
            '(' | '[' => {
                if c == '(' && depth == 0 && i >= 21 && d[..i].ends_with(' ') {
                    clause = clause.or(Some(i - 1));
                }
                depth += 1;
            }
            ')' | ']' => depth = depth.saturating_sub(1),
            _ if depth > 0 || i < 20 => {}
            _ if rest.starts_with(": ") || rest.starts_with("; ") => clause = clause.or(Some(i)),
            _ if rest.starts_with(", ") => comma = Some(i),
            _ => {}
        }
    }
    let cut = clause.or(comma).unwrap_or_else(|| {
        let boundaries = d.char_indices().map(|(i, _)| i);
        boundaries
            .take_while(|&i| i <= SUMMARY_CHARS)
            .last()
            .unwrap_or(0)
    });
    format!("{}.", d[..cut].trim_end_matches([' ', ',', ';', ':']))
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
