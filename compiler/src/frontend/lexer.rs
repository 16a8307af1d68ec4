//! Tokens of the fusion language. Newlines are tokens (they end statements) except inside
//! parentheses and brackets.

use crate::diag::{Diagnostic, Span};

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    Ident(String),
    Int(i64),
    Float(f64, String),
    Punct(char),
    /// A comparison operator: `<`, `<=`, `>`, `>=`, `==`, `!=`.
    Compare(&'static str),
    Newline,
    Eof,
}

#[derive(Clone, Debug)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
}

pub fn lex(src: &str) -> Result<Vec<Token>, Diagnostic> {
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut depth: i32 = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        match c {
            b' ' | b'\t' | b'\r' => i += 1,
            b'\n' => {
                if depth == 0 {
                    out.push(Token {
                        tok: Tok::Newline,
                        span: Span::new(i, i + 1),
                    });
                }
                i += 1;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                out.push(Token {
                    tok: Tok::Ident(src[start..i].to_string()),
                    span: Span::new(start, i),
                });
            }
            b'0'..=b'9' => {
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                let mut is_float = false;
                if i < bytes.len()
                    && bytes[i] == b'.'
                    && bytes.get(i + 1).is_some_and(|b| b.is_ascii_digit())
                {
                    is_float = true;
                    i += 1;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                }
                if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
                    let mut j = i + 1;
                    if j < bytes.len() && (bytes[j] == b'+' || bytes[j] == b'-') {
                        j += 1;
                    }
                    if j < bytes.len() && bytes[j].is_ascii_digit() {
                        is_float = true;
                        i = j;
                        while i < bytes.len() && bytes[i].is_ascii_digit() {
                            i += 1;
                        }
                    }
                }
                let text = &src[start..i];
                let span = Span::new(start, i);
                let tok = if is_float {
                    let v: f64 = text
                        .parse()
                        .map_err(|_| Diagnostic::new(format!("bad number `{text}`"), Some(span)))?;
                    if !v.is_finite() {
                        return Err(Diagnostic::new(
                            format!("number `{text}` is out of range"),
                            Some(span),
                        ));
                    }
                    Tok::Float(v, text.to_string())
                } else {
                    Tok::Int(text.parse().map_err(|_| {
                        Diagnostic::new(format!("integer `{text}` is too large"), Some(span))
                    })?)
                };
                out.push(Token { tok, span });
            }
            b'(' | b'[' => {
                depth += 1;
                out.push(Token {
                    tok: Tok::Punct(c as char),
                    span: Span::new(i, i + 1),
                });
                i += 1;
            }
            b')' | b']' => {
                depth = (depth - 1).max(0);
                out.push(Token {
                    tok: Tok::Punct(c as char),
                    span: Span::new(i, i + 1),
                });
                i += 1;
            }
            b'<' | b'>' | b'=' | b'!'
                if matches!(bytes.get(i + 1), Some(b'=')) || (c != b'=' && c != b'!') =>
            {
                let two = bytes.get(i + 1) == Some(&b'=');
                let text = match (c, two) {
                    (b'<', false) => "<",
                    (b'<', true) => "<=",
                    (b'>', false) => ">",
                    (b'>', true) => ">=",
                    (b'=', _) => "==",
                    _ => "!=",
                };
                let len = text.len();
                out.push(Token {
                    tok: Tok::Compare(text),
                    span: Span::new(i, i + len),
                });
                i += len;
            }
            b'{' | b'}' | b',' | b':' | b'=' | b'+' | b'-' | b'*' | b'/' | b'.' | b';' => {
                out.push(Token {
                    tok: Tok::Punct(c as char),
                    span: Span::new(i, i + 1),
                });
                i += 1;
            }
            _ => {
                let ch = src[i..].chars().next().unwrap_or('?');
                return Err(Diagnostic::new(
                    format!("unexpected character `{}`", ch.escape_default()),
                    Some(Span::new(i, i + ch.len_utf8())),
                ));
            }
        }
    }
    out.push(Token {
        tok: Tok::Eof,
        span: Span::new(src.len(), src.len()),
    });
    Ok(out)
}
