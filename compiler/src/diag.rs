//! Diagnostics: a message, an optional source span, and rendering with line:column and a caret.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Byte range in the program text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }
    pub fn join(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub message: String,
    pub span: Option<Span>,
    /// 1-based line and column of the span start, filled by [`Diagnostic::locate`].
    pub line: usize,
    pub column: usize,
}

impl Diagnostic {
    pub fn new(message: impl Into<String>, span: Option<Span>) -> Diagnostic {
        Diagnostic {
            message: message.into(),
            span,
            line: 0,
            column: 0,
        }
    }

    /// Fills line and column from the source text.
    pub fn locate(mut self, source: &str) -> Diagnostic {
        if let Some(span) = self.span {
            let (line, column) = line_col(source, span.start);
            self.line = line;
            self.column = column;
        }
        self
    }

    /// `line:col: error: message`, the source line, and a caret under the span.
    pub fn render(&self, source: &str, file: &str) -> String {
        let Some(span) = self.span else {
            return format!("{file}: error: {}", self.message);
        };
        let (line, column) = line_col(source, span.start);
        let text = source.lines().nth(line - 1).unwrap_or("");
        let width = {
            let end = span
                .end
                .min(span.start + text.len().saturating_sub(column - 1))
                .max(span.start + 1);
            source
                .get(span.start..end)
                .map(|s| s.chars().count())
                .unwrap_or(1)
                .max(1)
        };
        let pad: String = text
            .chars()
            .take(column - 1)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        format!(
            "{file}:{line}:{column}: error: {msg}\n{line:>4} | {text}\n     | {pad}{carets}",
            msg = self.message,
            carets = "^".repeat(width)
        )
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(source.len());
    let mut line = 1;
    let mut line_start = 0;
    for (i, c) in source.char_indices() {
        if i >= offset {
            break;
        }
        if c == '\n' {
            line += 1;
            line_start = i + 1;
        }
    }
    let column = source
        .get(line_start..offset)
        .map(|s| s.chars().count())
        .unwrap_or(0)
        + 1;
    (line, column)
}

/// One or more diagnostics: every syntax error, or every independent schedule error, or the
/// first error of a later stage.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn render(&self, source: &str, file: &str) -> String {
        self.0
            .iter()
            .map(|d| d.render(source, file))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Self {
        Diagnostics(vec![d])
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.0 {
            writeln!(f, "{}", d.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caret_points_at_span() {
        let src = "fusion f {\n  y = exp(x\n}";
        let d = Diagnostic::new("expected `)`", Some(Span::new(22, 23)));
        let r = d.render(src, "f.hf");
        assert!(r.starts_with("f.hf:2:12: error: expected `)`"), "{r}");
        assert!(r.ends_with("     |            ^"), "{r}");
    }
}
