//! One in-page compilation turned into what the panes show, and diagnostics turned into editor
//! positions (CodeMirror counts UTF-16 code units; the compiler gives byte spans).

use hopfuse::plan::{Constraint, LaunchPlan, Param, SizeExpr};
use serde::Serialize;
use std::collections::BTreeMap;

/// A pass dump with whether it changed the IR of the pass before it.
#[derive(Clone, Debug, PartialEq)]
pub struct PassView {
    pub name: &'static str,
    pub summary: &'static str,
    pub ir: String,
    pub changed: bool,
}

/// A successful compilation.
#[derive(Clone, Debug, PartialEq)]
pub struct Compiled {
    pub cuda: String,
    pub plan: LaunchPlan,
    pub passes: Vec<PassView>,
    /// Roles and circular buffers of the final kernel (the Pipeline pane).
    pub pipeline: hopfuse::pipeline_view::PipelineView,
    /// The fusion as a PyTorch function (the PyTorch pane; `hopfuse compile --torch`).
    pub torch: String,
}

/// A diagnostic located in the editor.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Diag {
    pub message: String,
    /// UTF-16 offsets into the program.
    pub from: usize,
    pub to: usize,
    pub line: usize,
    pub column: usize,
}

/// UTF-16 offset of a byte offset (clamped, and moved back to a character boundary).
pub fn utf16_offset(source: &str, byte: usize) -> usize {
    let mut b = byte.min(source.len());
    while !source.is_char_boundary(b) {
        b -= 1;
    }
    source[..b].encode_utf16().count()
}

/// Compiles `source` (the whole pipeline, as `hopfuse compile` does).
pub fn compile(source: &str) -> Result<Compiled, Vec<Diag>> {
    match hopfuse::compile(source, &hopfuse::CompileOptions::default()) {
        Ok(c) => {
            let mut passes: Vec<PassView> = Vec::with_capacity(c.passes.len());
            for p in c.passes {
                let changed = passes.last().is_none_or(|prev| prev.ir != p.ir);
                passes.push(PassView {
                    name: p.name,
                    summary: p.summary,
                    ir: p.ir,
                    changed,
                });
            }
            Ok(Compiled {
                cuda: c.cuda,
                plan: c.plan,
                passes,
                pipeline: c.pipeline,
                // Cannot fail once the program compiled (it parses and builds the same fusion).
                torch: hopfuse::torch_twin(source)
                    .map(|t| t.source)
                    .unwrap_or_default(),
            })
        }
        Err(d) => Err(d
            .0
            .into_iter()
            .map(|d| {
                let (from, to) = match d.span {
                    Some(s) => {
                        let from = utf16_offset(source, s.start);
                        let mut to = utf16_offset(source, s.end).max(from);
                        // An empty span still gets a visible mark when there is a character.
                        if to == from && s.start < source.len() {
                            to = utf16_offset(source, s.start + 1).max(from + 1);
                        }
                        (from, to)
                    }
                    None => (0, 0),
                };
                Diag {
                    message: d.message,
                    from,
                    to,
                    line: d.line,
                    column: d.column,
                }
            })
            .collect()),
    }
}

/// `expr` with the sizes, or why not.
pub fn eval(expr: &SizeExpr, sizes: &BTreeMap<String, i64>) -> Result<i64, String> {
    expr.eval(sizes).map_err(|e| e.to_string())
}

/// A row of the Launch plan pane: a size expression and its value with the current sizes.
pub fn expr_row(expr: &SizeExpr, sizes: &BTreeMap<String, i64>) -> String {
    match (expr.as_const(), eval(expr, sizes)) {
        (Some(c), _) => c.to_string(),
        (None, Ok(v)) => format!("{expr} = {v}"),
        (None, Err(e)) => format!("{expr} ({e})"),
    }
}

/// A constraint in words, and whether the current sizes satisfy it (None: cannot tell).
pub fn constraint_row(c: &Constraint, sizes: &BTreeMap<String, i64>) -> (String, Option<bool>) {
    match c {
        Constraint::Divisible {
            value,
            divisor,
            reason,
        } => (
            format!("{value} % {divisor} == 0: {reason}"),
            value.eval(sizes).ok().map(|v| v % divisor == 0),
        ),
        Constraint::AtMost { value, max, reason } => (
            format!("{value} <= {max}: {reason}"),
            value.eval(sizes).ok().map(|v| v <= *max),
        ),
        Constraint::Positive { value, reason } => (
            format!("{value} >= 1: {reason}"),
            value.eval(sizes).ok().map(|v| v >= 1),
        ),
    }
}

/// A kernel parameter in one line: kind, name, details.
pub fn param_row(p: &Param) -> (String, String, String) {
    match p {
        Param::Tensor {
            name,
            dtype,
            role,
            shape,
        } => (
            "tensor".into(),
            name.clone(),
            format!(
                "{} [{}] {}",
                dtype.name(),
                shape
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                format!("{role:?}").to_ascii_lowercase()
            ),
        ),
        Param::Size { symbol } => ("size".into(), symbol.clone(), "index type".into()),
        Param::Scalar { name, dtype } => ("scalar".into(), name.clone(), dtype.name().into()),
        Param::TensorMap { name, map } => (
            "tensor map".into(),
            name.clone(),
            format!("TMA map #{map}, 128 bytes by value"),
        ),
    }
}

/// Bytes in a short human form.
pub fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut u) = (n, 0);
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_become_utf16_offsets() {
        assert_eq!(utf16_offset("aé𝄞b", 1), 1);
        assert_eq!(utf16_offset("aé𝄞b", 3), 2);
        assert_eq!(utf16_offset("aé𝄞b", 4), 2); // inside 𝄞: back to its start
        assert_eq!(utf16_offset("aé𝄞b", 7), 4);
        assert_eq!(utf16_offset("aé𝄞b", 99), 5);
    }

    #[test]
    fn errors_are_located_and_passes_marked() {
        let e = compile("// é\nfusion f {\n  y = exp(x\n}").unwrap_err();
        assert_eq!(e.len(), 1);
        // At the `}` (byte 29, UTF-16 offset 28: `é` is two bytes, one code unit).
        assert_eq!((e[0].from, e[0].to, e[0].line), (28, 29, 4), "{e:?}");
        let src = crate::examples::find("basics/add").unwrap().source;
        let c = compile(src).unwrap();
        assert!(c.passes[0].changed);
        assert!(c.cuda.contains("__global__"));
        // The TMA passes run (and are dumped) only for fusions with TMA loads.
        let tma_passes = ["tma", "tma_issue", "circular_buffer"];
        let general = hopfuse::passes::PIPELINE
            .iter()
            .filter(|p| !tma_passes.contains(&p.name))
            .count();
        assert_eq!(c.passes.len(), 1 + general);
        let tma = compile(crate::examples::find("tma/exp_2d").unwrap().source).unwrap();
        assert_eq!(tma.passes.len(), 1 + hopfuse::passes::PIPELINE.len());
    }
}
