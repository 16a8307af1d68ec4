//! Text helpers shared by the printers (the fusion and kernel-IR dumps, the CUDA back end), at
//! the bottom of the crate's layering so that every printer may use them.

/// Appends the decimal text of `i` (as `{i}` writes it) without the formatting machinery:
/// indices are most of what the dumps and the CUDA hold.
pub(crate) fn write_int(i: i64, out: &mut String) {
    let mut digits = [0u8; 20];
    let mut n = i.unsigned_abs();
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if i < 0 {
        out.push('-');
    }
    out.push_str(std::str::from_utf8(&digits[at..]).expect("ASCII digits"));
}

/// The text of a float literal: the shortest decimal that reads back to the same value
/// (`{}`, positional), with a `.0` where that has no fraction, so that CUDA and Python read a
/// floating-point literal. (Not `{:?}`, which writes the same digits but switches to exponent
/// form far from 1: `Debug`'s float formatter is the only user of its code in the playground's
/// wasm, which counts against the page's download budget.)
pub(crate) fn float_literal(v: impl std::fmt::Display) -> String {
    let mut s = v.to_string();
    // Whole numbers only: not `NaN` or `inf` (the IR dump's literals may be those).
    if s.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
        s.push_str(".0");
    }
    s
}

/// The names of `known` close to `name` (a mistyped name's likely meaning): at most a third of
/// its letters (and at least one) inserted, deleted or replaced, or one of the two starts with
/// the other; nearest first.
pub(crate) fn near_names<'a>(name: &str, known: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    let mut near: Vec<(usize, &str)> = known
        .filter_map(|k| {
            let d = edit_distance(name, k);
            let prefix = name.len() >= 3 && (k.starts_with(name) || name.starts_with(k));
            (d <= limit || prefix).then_some((d, k))
        })
        .collect();
    near.sort();
    near.into_iter().map(|(_, k)| k).collect()
}

/// Levenshtein distance in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    #[test]
    fn near_names_are_small_edits_or_prefixes() {
        use super::near_names;
        let known = [
            "split",
            "merge",
            "reorder",
            "cache_after",
            "cache_before",
            "inline_most",
        ];
        assert_eq!(near_names("splt", known.into_iter()), ["split"]);
        assert_eq!(near_names("marge", known.into_iter()), ["merge"]);
        assert_eq!(
            near_names("cache", known.into_iter()),
            ["cache_after", "cache_before"]
        );
        assert_eq!(near_names("inline", known.into_iter()), ["inline_most"]);
        assert!(near_names("frobnicate", known.into_iter()).is_empty());
        assert_eq!(super::edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn float_literals_read_back_as_the_same_float() {
        use super::float_literal;
        assert_eq!(float_literal(1.0f32), "1.0");
        assert_eq!(float_literal(-2.0f64), "-2.0");
        assert_eq!(float_literal(0.044715f32), "0.044715");
        assert_eq!(float_literal(0.7978845608028654f64), "0.7978845608028654");
        assert_eq!(float_literal(1e-7f64), "0.0000001");
        assert_eq!(float_literal(1e20f32), "100000000000000000000.0");
        assert_eq!(float_literal(f64::NAN), "NaN");
        assert_eq!(float_literal(f64::NEG_INFINITY), "-inf");
        for v in [
            0.1f64,
            1.0 / 3.0,
            6.02e23,
            1.5e-300,
            f64::MAX,
            f64::MIN_POSITIVE,
        ] {
            assert_eq!(float_literal(v).parse::<f64>().unwrap(), v);
        }
        for v in [0.1f32, 1.0 / 3.0, 3.4e38, 1e-45] {
            assert_eq!(float_literal(v).parse::<f32>().unwrap(), v);
        }
    }
}
