//! `--documents doc_q,doc_k:512` (`run`, `bench`, `tune`): integer inputs filled with
//! packed-document ids of that mean length instead of seeded values (`RunRequest::documents`;
//! the ids are `data::DocumentIds`', checked against the program by `data::InputFills`).
//!
//! Takes the flag's text ([`parse_documents`], clap's value parser, so a malformed value is a
//! usage error) and merges repeated flags ([`merge_documents`]); [`flags`] writes a request's
//! documents back as the flags that give them, for the reports.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

const EXAMPLE: &str = "--documents doc_q,doc_k:512";

/// One `--documents` value: the inputs and their documents' mean length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocumentsArg {
    pub names: Vec<String>,
    pub mean_len: NonZeroU32,
}

/// Parses `NAME[,NAME...]:L`, L a whole number of at least 1. The errors do not repeat the
/// value: clap's message quotes it.
pub fn parse_documents(text: &str) -> Result<DocumentsArg, String> {
    let Some((names, len)) = text.rsplit_once(':') else {
        return Err(format!(
            "not NAME[,NAME...]:L, L the documents' mean length (example: {EXAMPLE})"
        ));
    };
    let len = len.trim();
    let mean_len = match len.parse::<u32>() {
        Ok(l) => NonZeroU32::new(l).ok_or("the documents' mean length must be at least 1")?,
        Err(_) => {
            return Err(format!(
                "the documents' mean length `{len}` is not a whole number from 1 to {}",
                u32::MAX
            ))
        }
    };
    let names: Vec<String> = names.split(',').map(|n| n.trim().to_string()).collect();
    if names.iter().any(String::is_empty) {
        return Err(format!("an empty input name (example: {EXAMPLE})"));
    }
    Ok(DocumentsArg { names, mean_len })
}

/// The request's documents from every `--documents` value; an input named twice is an error.
pub fn merge_documents(args: &[DocumentsArg]) -> Result<BTreeMap<String, NonZeroU32>, String> {
    let mut documents = BTreeMap::new();
    for arg in args {
        for name in &arg.names {
            if documents.insert(name.clone(), arg.mean_len).is_some() {
                return Err(format!("--documents: input `{name}` is given twice"));
            }
        }
    }
    Ok(documents)
}

/// The `--documents` values that give `documents`, the inputs grouped by mean length
/// (`doc_k,doc_q:512`), for a command line that runs the same inputs again (`--profile`'s).
pub fn flag_values(documents: &BTreeMap<String, NonZeroU32>) -> Vec<String> {
    let mut by_len: BTreeMap<NonZeroU32, Vec<&str>> = BTreeMap::new();
    for (name, len) in documents {
        by_len.entry(*len).or_default().push(name);
    }
    by_len
        .iter()
        .map(|(len, names)| format!("{}:{len}", names.join(",")))
        .collect()
}

/// The flags that give `documents` (`--documents doc_k,doc_q:512`); empty for none. A
/// report's header carries them, so a logged run says which ids it ran on.
pub fn flags(documents: &BTreeMap<String, NonZeroU32>) -> String {
    flag_values(documents)
        .iter()
        .map(|v| format!("--documents {v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The line `bench` and `tune` print above their table when some inputs hold documents.
pub fn inputs_line(documents: &BTreeMap<String, NonZeroU32>) -> Option<String> {
    (!documents.is_empty()).then(|| {
        format!(
            "Inputs: {} (packed-document ids; the other inputs seeded).",
            flags(documents)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(names: &[&str], len: u32) -> DocumentsArg {
        DocumentsArg {
            names: names.iter().map(|n| n.to_string()).collect(),
            mean_len: NonZeroU32::new(len).unwrap(),
        }
    }

    #[test]
    fn documents_flags_parse_merge_and_print_back() {
        assert_eq!(
            parse_documents("doc_q, doc_k:512"),
            Ok(arg(&["doc_q", "doc_k"], 512))
        );
        assert_eq!(parse_documents("ids:1"), Ok(arg(&["ids"], 1)));
        for (text, needle) in [
            ("doc_q", "not NAME[,NAME...]:L"),
            ("doc_q:0", "must be at least 1"),
            ("doc_q:x", "`x` is not a whole number from 1"),
            ("doc_q:-4", "`-4` is not a whole number from 1"),
            (
                "doc_q:4294967296",
                "is not a whole number from 1 to 4294967295",
            ),
            ("doc_q,:4", "an empty input name"),
            (":4", "an empty input name"),
        ] {
            let err = parse_documents(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
        let merged = merge_documents(&[arg(&["doc_q", "doc_k"], 512), arg(&["seg"], 8)]).unwrap();
        assert_eq!(
            flags(&merged),
            "--documents seg:8 --documents doc_k,doc_q:512"
        );
        assert_eq!(flags(&BTreeMap::new()), "");
        assert_eq!(inputs_line(&BTreeMap::new()), None);
        assert_eq!(
            inputs_line(&merged).unwrap(),
            "Inputs: --documents seg:8 --documents doc_k,doc_q:512 (packed-document ids; the \
             other inputs seeded)."
        );
        assert_eq!(
            merge_documents(&[arg(&["doc_q"], 4), arg(&["doc_q"], 8)]).unwrap_err(),
            "--documents: input `doc_q` is given twice"
        );
    }
}
