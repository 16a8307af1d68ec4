//! `--size M=4096,N=4096`: the values of a fusion's size symbols. A fusion whose extents are all
//! constants has none: an empty list (or no `--size` at all) is then the whole answer.

use std::collections::BTreeMap;

/// Parses `NAME=VALUE[,NAME=VALUE...]` into a map. Whitespace around items is ignored; a
/// value is a decimal integer (`_` separators allowed, e.g. `16_384`). Whether the names are
/// symbols of the fusion and the values are positive is checked later, by the launch plan.
pub fn parse_sizes(text: &str) -> Result<BTreeMap<String, i64>, String> {
    let mut sizes = BTreeMap::new();
    merge_sizes(&mut sizes, text)?;
    Ok(sizes)
}

/// Adds the sizes in `text` to `sizes` (so `--size M=1 --size N=2` works); a name given twice
/// is an error. An empty (or blank) text adds nothing: the sizes of a fusion without symbols.
pub fn merge_sizes(sizes: &mut BTreeMap<String, i64>, text: &str) -> Result<(), String> {
    if text.trim().is_empty() {
        return Ok(());
    }
    for item in text.split(',') {
        let item = item.trim();
        let Some((name, value)) = item.split_once('=') else {
            return Err(format!(
                "`{item}` is not NAME=VALUE (example: --size M=4096,N=4096)"
            ));
        };
        let (name, value) = (name.trim(), value.trim());
        if name.is_empty()
            || !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!("`{name}` is not a size symbol name (in `{item}`)"));
        }
        let digits: String = value.chars().filter(|&c| c != '_').collect();
        let parsed: i64 = digits.parse().map_err(|_| {
            format!("`{value}` is not an integer (in `{item}`; sizes are whole numbers below 2^63)")
        })?;
        if sizes.insert(name.to_string(), parsed).is_some() {
            return Err(format!("size `{name}` is given twice"));
        }
    }
    Ok(())
}

/// How a set of sizes is shown in reports and tables: `M=4096,N=4096`, or `(constant shapes)`
/// for none.
pub fn label(sizes: &BTreeMap<String, i64>) -> String {
    if sizes.is_empty() {
        "(constant shapes)".to_string()
    } else {
        format_sizes(sizes)
    }
}

/// `M=4096,N=4096`: the inverse of [`parse_sizes`].
pub fn format_sizes(sizes: &BTreeMap<String, i64>) -> String {
    sizes
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_list() {
        let s = parse_sizes("M=4096, N = 16_384").unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s["M"], 4096);
        assert_eq!(s["N"], 16384);
        assert_eq!(format_sizes(&s), "M=4096,N=16384");
    }

    #[test]
    fn merges_repeated_flags() {
        let mut s = parse_sizes("M=1").unwrap();
        merge_sizes(&mut s, "N=2").unwrap();
        assert_eq!(format_sizes(&s), "M=1,N=2");
        let err = merge_sizes(&mut s, "M=3").unwrap_err();
        assert!(err.contains("given twice"), "{err}");
    }

    #[test]
    fn rejects_bad_items() {
        for (text, needle) in [
            ("M", "not NAME=VALUE"),
            ("M=", "not an integer"),
            ("M=4k", "not an integer"),
            ("M=1.5", "not an integer"),
            ("=4", "not a size symbol"),
            ("1M=4", "not a size symbol"),
            ("M-N=4", "not a size symbol"),
            ("M=1,,N=2", "not NAME=VALUE"),
            ("M=99999999999999999999", "not an integer"),
        ] {
            let err = parse_sizes(text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn an_empty_list_is_no_sizes() {
        assert!(parse_sizes("").unwrap().is_empty());
        assert!(parse_sizes("  ").unwrap().is_empty());
        assert_eq!(label(&parse_sizes("").unwrap()), "(constant shapes)");
        assert_eq!(label(&parse_sizes("M=2").unwrap()), "M=2");
    }

    #[test]
    fn negative_values_parse_and_are_left_to_the_plan() {
        assert_eq!(parse_sizes("M=-4").unwrap()["M"], -4);
    }
}
