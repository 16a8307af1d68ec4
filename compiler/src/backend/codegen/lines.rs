//! The CUDA line map: for every line of the emitted source, what wrote it (the prelude, the
//! kernel's signature, its entry set-up, a thread/block index binding, or one kernel-IR
//! statement) and, for bindings and statements, the line of the final kernel-IR dump it stands
//! for and the pass that produced that IR line. A PTX or SASS line, whose line info names a
//! CUDA line, leads through this map to the IR and the pass (`hopfuse compile --sass`, the
//! playground's PTX and SASS panes).
//!
//! The emitter records a [`Written`] per line while it writes (the text does not depend on it);
//! [`LineMap::new`] resolves statements to dump lines (`kir::Kernel::print_with_lines`) and
//! blames each dump line on the pass that introduced it ([`blame`]: a line diff between
//! consecutive dumps, followed back from the last one, as `git blame` follows commits).

use crate::kir::IrLines;
use serde::{Deserialize, Serialize};

/// What wrote one line of the CUDA source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// The index typedef, prelude helpers, blank lines before the kernel.
    Prelude,
    /// The kernel's signature and its closing brace.
    Signature,
    /// Entry set-up: the dynamic shared memory, mbarrier array pointers, the warp index.
    Setup,
    /// The `i`-th thread/block index binding (`Kernel::hw_vars`).
    Binding(usize),
    /// The statement with this preorder number in the kernel body.
    Stmt(usize),
}

/// One line of the CUDA source in the line map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", try_from = "CudaLineRecord")]
pub enum CudaLine {
    Prelude,
    Signature,
    Setup,
    /// A thread/block index binding: its line in the final IR dump.
    Binding {
        ir_line: usize,
        pass: Option<String>,
    },
    /// Written for the kernel-IR statement `stmt` (preorder number), which starts at `ir_line`
    /// (1-based) of the final IR dump; `pass` introduced that IR line (none when the dumps were
    /// too large to compare).
    Stmt {
        stmt: usize,
        ir_line: usize,
        pass: Option<String>,
    },
}

/// A [`CudaLine`]'s JSON (`{"kind": ..., fields}`) read as one flat record. Same JSON as the
/// tagged enum; read this way because serde's reader for internally tagged enums buffers every
/// entry and costs the playground's wasm tens of KiB (it reads the map from `POST
/// /api/inspect`).
#[derive(Deserialize)]
struct CudaLineRecord {
    kind: CudaLineKind,
    #[serde(default)]
    stmt: Option<usize>,
    #[serde(default)]
    ir_line: Option<usize>,
    #[serde(default)]
    pass: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum CudaLineKind {
    Prelude,
    Signature,
    Setup,
    Binding,
    Stmt,
}

impl TryFrom<CudaLineRecord> for CudaLine {
    type Error = &'static str;

    fn try_from(r: CudaLineRecord) -> Result<CudaLine, &'static str> {
        let ir_line = || {
            r.ir_line
                .ok_or("a `binding` or `stmt` line needs `ir_line`")
        };
        Ok(match r.kind {
            CudaLineKind::Prelude => CudaLine::Prelude,
            CudaLineKind::Signature => CudaLine::Signature,
            CudaLineKind::Setup => CudaLine::Setup,
            CudaLineKind::Binding => CudaLine::Binding {
                ir_line: ir_line()?,
                pass: r.pass,
            },
            CudaLineKind::Stmt => CudaLine::Stmt {
                stmt: r.stmt.ok_or("a `stmt` line needs `stmt`")?,
                ir_line: ir_line()?,
                pass: r.pass,
            },
        })
    }
}

impl CudaLine {
    /// The line of the final IR dump this CUDA line stands for.
    pub fn ir_line(&self) -> Option<usize> {
        match self {
            CudaLine::Binding { ir_line, .. } | CudaLine::Stmt { ir_line, .. } => Some(*ir_line),
            _ => None,
        }
    }

    /// The pass that produced that IR line.
    pub fn pass(&self) -> Option<&str> {
        match self {
            CudaLine::Binding { pass, .. } | CudaLine::Stmt { pass, .. } => pass.as_deref(),
            _ => None,
        }
    }
}

/// Every line of a CUDA source, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineMap {
    /// `lines[i]` is line `i + 1` of the source.
    pub lines: Vec<CudaLine>,
}

impl LineMap {
    /// Resolves what the emitter wrote against the final dump's statement lines. `dumps` are
    /// the kernel-IR dumps of the passes that ran, in order, as (pass name, IR); the last one
    /// is the dump `ir` was recorded from.
    pub fn new(written: &[Written], ir: &IrLines, dumps: &[(&str, &str)]) -> LineMap {
        let texts: Vec<&str> = dumps.iter().map(|d| d.1).collect();
        // A pass that rewrites values in place keeps each line where it was (`specialize`: the
        // statement is still the one an earlier pass wrote).
        let in_place: Vec<bool> = dumps
            .iter()
            .map(|d| {
                crate::passes::PIPELINE
                    .iter()
                    .any(|p| p.name == d.0 && p.in_place)
            })
            .collect();
        let origin = blame_through(&texts, &in_place);
        let pass_of = |ir_line: usize| -> Option<String> {
            let dump = (*origin.get(ir_line.checked_sub(1)?)?)?;
            Some(dumps[dump].0.to_string())
        };
        let lines = written
            .iter()
            .map(|w| match *w {
                Written::Prelude => CudaLine::Prelude,
                Written::Signature => CudaLine::Signature,
                Written::Setup => CudaLine::Setup,
                Written::Binding(i) => match ir.bindings.get(i) {
                    Some(&ir_line) => CudaLine::Binding {
                        ir_line,
                        pass: pass_of(ir_line),
                    },
                    None => CudaLine::Setup,
                },
                Written::Stmt(stmt) => match ir.stmts.get(stmt) {
                    Some(&ir_line) => CudaLine::Stmt {
                        stmt,
                        ir_line,
                        pass: pass_of(ir_line),
                    },
                    None => CudaLine::Setup,
                },
            })
            .collect();
        LineMap { lines }
    }

    /// Line `cuda_line` (1-based) of the source.
    pub fn get(&self, cuda_line: usize) -> Option<&CudaLine> {
        self.lines.get(cuda_line.checked_sub(1)?)
    }
}

/// The number of lines of `text` (a last line without a newline counts).
pub fn count(text: &str) -> usize {
    text.lines().count()
}

/// The most cells of one line-diff table; dumps larger than this are not compared.
const MAX_DIFF_CELLS: usize = 1 << 22;

/// For each line of the last text, the index of the text that introduced it: the line was
/// matched, diff by diff, back through every text after that one (a longest-common-subsequence
/// diff of lines between neighbours). `None` where a diff was too large to compute.
pub fn blame(texts: &[&str]) -> Vec<Option<usize>> {
    blame_through(texts, &[])
}

/// [`blame`], where text `k` with `in_place[k]` keeps every line of the text before it at its
/// place (a rewrite inside lines: line `i` is line `i` of the text before, when both have as
/// many lines), so it introduces none.
fn blame_through(texts: &[&str], in_place: &[bool]) -> Vec<Option<usize>> {
    let Some(last) = texts.last() else {
        return Vec::new();
    };
    // Each text split into lines once (it is the old side of one diff and the new of another).
    let mut new: Vec<&str> = last.lines().collect();
    let n = new.len();
    // Position of each final line in text `k` while it is being traced.
    let mut at: Vec<Option<usize>> = (0..n).map(Some).collect();
    let mut origin: Vec<Option<usize>> = vec![None; n];
    let mut traced = vec![true; n];
    for k in (1..texts.len()).rev() {
        // A pass that changed nothing keeps every line where it was: nothing to trace.
        if texts[k - 1] == texts[k] {
            continue;
        }
        let old: Vec<&str> = texts[k - 1].lines().collect();
        let kept = in_place.get(k).copied().unwrap_or(false) && old.len() == new.len();
        let matched = if kept {
            Some((0..new.len()).map(Some).collect())
        } else {
            match_lines(&old, &new)
        };
        let Some(matched) = matched else {
            // Unknown from here back: the lines still traced get no pass.
            for t in traced.iter_mut() {
                *t = false;
            }
            break;
        };
        for i in 0..n {
            if !traced[i] {
                continue;
            }
            match at[i].and_then(|p| matched[p]) {
                Some(q) => at[i] = Some(q),
                None => {
                    origin[i] = Some(k);
                    traced[i] = false;
                }
            }
        }
        new = old;
    }
    for i in 0..n {
        if traced[i] {
            origin[i] = Some(0);
        }
    }
    origin
}

/// For each line of `new`, the line of `old` it is kept from (a longest common subsequence of
/// equal lines; the common prefix and suffix are matched first). `None` past
/// [`MAX_DIFF_CELLS`].
fn match_lines(old: &[&str], new: &[&str]) -> Option<Vec<Option<usize>>> {
    let mut matched = vec![None; new.len()];
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    for (i, m) in matched.iter_mut().enumerate().take(prefix) {
        *m = Some(i);
    }
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    for j in 0..suffix {
        matched[new.len() - 1 - j] = Some(old.len() - 1 - j);
    }
    let a = &old[prefix..old.len() - suffix];
    let b = &new[prefix..new.len() - suffix];
    if a.is_empty() || b.is_empty() {
        return Some(matched);
    }
    let (rows, cols) = (a.len() + 1, b.len() + 1);
    if rows.saturating_mul(cols) > MAX_DIFF_CELLS {
        return None;
    }
    // An old line that appears nowhere in `b` matches nothing, and its row of the table below
    // equals the row under it, so the walk passes over it without a choice: the table leaves
    // such lines out (a pass that rewrites many lines leaves many), `kept` numbering the rest
    // in `a`. The matching is the same.
    let kept: Vec<usize> = if rows * cols > 4096 {
        let present: rustc_hash::FxHashSet<&str> = b.iter().copied().collect();
        (0..a.len()).filter(|&i| present.contains(a[i])).collect()
    } else {
        (0..a.len()).collect()
    };
    let a: Vec<&str> = kept.iter().map(|&i| a[i]).collect();
    let rows = a.len() + 1;
    // lcs[i * cols + j]: the LCS length of a[i..] and b[j..].
    let mut lcs = vec![0u32; rows * cols];
    for (i, line) in a.iter().enumerate().rev() {
        // Row i and row i + 1 as slices of exactly `cols` cells: no bounds check per cell (the
        // fill was most of the line map's time).
        let (row, below) = lcs[i * cols..(i + 2) * cols].split_at_mut(cols);
        for j in (0..b.len()).rev() {
            row[j] = if *line == b[j] {
                below[j + 1] + 1
            } else {
                below[j].max(row[j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            matched[prefix + j] = Some(prefix + kept[i]);
            i += 1;
            j += 1;
        } else if lcs[(i + 1) * cols + j] >= lcs[i * cols + j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    Some(matched)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blame_follows_lines_back_to_the_text_that_introduced_them() {
        let texts = [
            "kernel\n  for i:\n    y = x\n",
            "kernel\n  for i:\n    y = x\n",
            "kernel\n  alloc a\n  for i:\n    y = x\n",
            "kernel\n  alloc a\n  for i:\n    y = x  // init\n  sync\n",
        ];
        assert_eq!(
            blame(&texts),
            [Some(0), Some(2), Some(0), Some(3), Some(3)],
            "kernel and the loop from the first text, alloc from the third, the rest from the last"
        );
        assert_eq!(blame(&["a\nb\n"]), [Some(0), Some(0)]);
        assert!(blame(&[]).is_empty());
    }

    #[test]
    fn a_line_rewritten_in_place_is_blamed_on_the_text_before() {
        let texts = ["a\nb\n", "a\nb\nc\n", "a\nB\nc\n", "a\nB\nc\nd\n"];
        // Text 2 rewrote `b` in place: `B` is blamed on text 0, which wrote `b`.
        assert_eq!(
            blame_through(&texts, &[false, false, true, false]),
            [Some(0), Some(0), Some(1), Some(3)]
        );
        assert_eq!(blame(&texts), [Some(0), Some(2), Some(1), Some(3)]);
    }

    #[test]
    fn a_line_removed_and_put_back_is_blamed_on_the_text_that_put_it_back() {
        let texts = ["a\nb\nc\n", "a\nc\n", "a\nb\nc\n"];
        assert_eq!(blame(&texts), [Some(0), Some(2), Some(0)]);
    }

    /// Every kind of line reads back from the JSON it writes (`{"kind": ..., fields}`); a line
    /// without its kind's fields is refused.
    #[test]
    fn line_map_entries_round_trip_through_json() {
        let lines = [
            CudaLine::Prelude,
            CudaLine::Signature,
            CudaLine::Setup,
            CudaLine::Binding {
                ir_line: 5,
                pass: Some("loop_nest".into()),
            },
            CudaLine::Stmt {
                stmt: 12,
                ir_line: 17,
                pass: None,
            },
        ];
        for l in lines {
            let json = serde_json::to_string(&l).unwrap();
            assert_eq!(
                serde_json::from_str::<CudaLine>(&json).unwrap(),
                l,
                "{json}"
            );
        }
        assert_eq!(
            serde_json::to_value(CudaLine::Binding {
                ir_line: 5,
                pass: None
            })
            .unwrap(),
            serde_json::json!({"kind": "binding", "ir_line": 5, "pass": null})
        );
        assert!(serde_json::from_str::<CudaLine>(r#"{"kind": "stmt", "ir_line": 3}"#).is_err());
        assert!(serde_json::from_str::<CudaLine>(r#"{"kind": "binding"}"#).is_err());
    }

    /// A large diff leaves the old lines that the new text lacks out of its table: the
    /// matching is the one of the whole table.
    #[test]
    fn a_large_diff_matches_as_the_whole_table_does() {
        let old: Vec<String> = (0..90).map(|i| format!("line {}", i * 7 % 37)).collect();
        let new: Vec<String> = (0..80)
            .map(|i| format!("line {}", (i * 5 + 3) % 31))
            .collect();
        let (old, new): (Vec<&str>, Vec<&str>) = (
            old.iter().map(|s| s.as_str()).collect(),
            new.iter().map(|s| s.as_str()).collect(),
        );
        // The whole table, every old line a row (no common prefix or suffix here).
        assert!(old[0] != new[0] && old.last() != new.last());
        let cols = new.len() + 1;
        let mut lcs = vec![0u32; (old.len() + 1) * cols];
        for i in (0..old.len()).rev() {
            for j in (0..new.len()).rev() {
                lcs[i * cols + j] = if old[i] == new[j] {
                    lcs[(i + 1) * cols + j + 1] + 1
                } else {
                    lcs[(i + 1) * cols + j].max(lcs[i * cols + j + 1])
                };
            }
        }
        let mut whole = vec![None; new.len()];
        let (mut i, mut j) = (0, 0);
        while i < old.len() && j < new.len() {
            if old[i] == new[j] {
                whole[j] = Some(i);
                (i, j) = (i + 1, j + 1);
            } else if lcs[(i + 1) * cols + j] >= lcs[i * cols + j + 1] {
                i += 1;
            } else {
                j += 1;
            }
        }
        assert!(
            old.iter().any(|l| !new.contains(l)),
            "some old lines are left out"
        );
        assert!(whole.iter().flatten().count() > 10);
        assert_eq!(match_lines(&old, &new), Some(whole));
    }

    #[test]
    fn repeated_lines_match_in_order() {
        let m = match_lines(&["x", "s", "y", "s"], &["x", "s", "z", "y", "s"]).unwrap();
        assert_eq!(m, [Some(0), Some(1), None, Some(2), Some(3)]);
    }
}
