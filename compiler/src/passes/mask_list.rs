//! Pass `mask_list` (after `document_tiles`): an online softmax whose scores carry a mask on
//! the query and key indices that `mask_bounds` does not take (a prefix-LM mask
//! `logical_or(j <= i, j < 256)`, chunks `i >> 10 == j >> 10`, a key padding bound, a window
//! written with `abs`, a sliding window when a circular buffer fills the key loop:
//! [`super::causal_tiles::takes`]) visits only the key tiles where the mask may keep a pair.
//!
//! Takes the fusion's online softmaxes and the loop over key tiles of each (`loop_nest`'s
//! [`TileLoops`]). The analysis ([`find`]) recognises scores written as `sm = where(keep, x,
//! -inf)`, `keep` made of `iota`s along the scores' key axis and one other axis, integer
//! literals, sizes, `+`, `-`, `*` by a literal, `min`, `max`, `abs`, `neg`, `remainder` and
//! `bitwise_right_shift` by a positive literal, widening casts between integers, comparisons,
//! `logical_and`, `logical_or` and `logical_not`, each an integer or bool tensor, and `keep`
//! read by the select alone. It bounds every node over a pair of tiles ([`Range`]: an
//! integer's least and greatest value, a condition's "may hold" and "must hold"), as a [`Val`]
//! of the tiles' first and last indices ([`TILE_BOUNDS`]). The key-tile loop must be the outer loop of `T` split by a
//! constant; the other iota axis must be bound to the grid by a loop over it whole or split by
//! a constant (the query tile), not a persistent grid; the block a whole number of warps.
//! Anything else (or a mask whose bounds would exceed [`MAX_BOUND_NODES`]) is left as it was:
//! every key tile runs, masked.
//!
//! Guarantees: the result is the unlisted kernel's up to the order of the running sums. Each
//! bound holds for every pair of the two tiles (each op's bound is the interval of its values
//! over its operands' intervals; integer overflow aside: the kernel computes the mask in its
//! integer type, the bounds in 64 bits), so a tile whose "may" is false is masked whole for
//! each query of the tile: it adds `-inf` to the running maximum and 0 to the sum and the
//! product, and is not visited. A tile whose "must" holds keeps every pair: the mask changes
//! none of its scores. The others are visited, first those, then the rest, each in order (the
//! online softmax's result does not depend on the order but for rounding). A query tile with
//! no listed tile still runs tile 0 masked.
//!
//! Emits: the kernel's [`VisitedTiles`] with [`TileTest::Bounds`] (one warp evaluates the
//! conditions per key tile, a block barrier; the tiles the mask keeps whole first), the loop
//! for `mask_tiles` when nothing but the mask reads its condition (the first
//! [`VISITED_KEPT`] iterations run without the mask's code; otherwise "must" is 0 and every
//! visited tile is masked), and [`crate::kir::VISITED_COUNT`] as the extent of the key-tile
//! loops; the index walks after this pass read the loop's tile from the list, as under
//! `document_tiles`. A launch constraint: at most [`crate::kir::VISITED_CAPACITY`] key tiles.

use super::causal_tiles::{CausalTiles, ClassifiedLoop, MaskExprs};
use super::context::Ctx;
use super::online_softmax::TileLoops;
use crate::dtype::DType;
use crate::fusion::{BinaryOp, ExprId, Fusion, IterId, Op, Operand, TensorId, TernaryOp, UnaryOp};
use crate::kir::{Kernel, TileTest, Val, VisitedTiles, TILE_BOUNDS, VISITED_KEPT};
use crate::plan::Constraint;

/// A mask on indices on the scores of an online softmax ([`find`]).
#[derive(Clone, Debug, PartialEq)]
pub struct IndexMask {
    /// The `where` that masks the scores.
    pub select: ExprId,
    /// The class of the key axis and, if the mask reads one, of the other (query) axis.
    pub key: IterId,
    pub query: Option<IterId>,
    /// Whether the mask may keep a pair of a query tile and a key tile, and whether it must
    /// keep every pair, in terms of [`TILE_BOUNDS`].
    pub may: Val,
    pub must: Val,
    /// The select and the expressions of its condition, when nothing else reads them: what a
    /// wholly kept tile goes without (pass `mask_tiles`). `None`: every visited tile is masked.
    pub exprs: Option<MaskExprs>,
}

/// Whether some online softmax's scores carry a mask on indices that neither `mask_bounds`
/// nor `document_tiles` takes (and the grid is not persistent): the pass's `applies`.
pub fn used(cx: &Ctx) -> bool {
    super::online_softmax::some_masked(cx, |f, scores, axis| find(f, scores, axis).is_some())
}

/// The mask on `scores`, the scores of an online softmax over the class `key_axis`, when it
/// is written as the module doc says and is neither a band nor a document mask.
pub fn find(f: &Fusion, scores: TensorId, key_axis: IterId) -> Option<IndexMask> {
    if super::causal_tiles::takes(f, scores, key_axis).is_some()
        || super::document_tiles::find(f, scores, key_axis).is_some()
    {
        return None;
    }
    let select = f.tensors[scores].definition?;
    let (
        Op::Ternary(TernaryOp::Where),
        [Operand::Tensor(keep), Operand::Tensor(_), Operand::Scalar(v)],
    ) = (&f.exprs[select].op, &f.exprs[select].inputs[..])
    else {
        return None;
    };
    if *v != f64::NEG_INFINITY || f.tensors[scores].is_output || f.uses(*keep) != [select] {
        return None;
    }
    let key = f.class_of(key_axis);
    let mut b = Bounder {
        f,
        rank: f.rank(scores),
        key,
        query: None,
        reads_key: false,
        ranges: rustc_hash::FxHashMap::default(),
    };
    let Range::Bool { may, must } = b.range(&Operand::Tensor(*keep))? else {
        return None;
    };
    // Without the key index the mask drops no key tile of a query tile it keeps any of.
    if !b.reads_key {
        return None;
    }
    // The expressions of the condition: those of every tensor bounded.
    let mut condition: Vec<ExprId> = b
        .ranges
        .keys()
        .filter_map(|&t| f.tensors[t].definition)
        .collect();
    condition.sort();
    condition.dedup();
    let condition_tensors: Vec<TensorId> = condition.iter().map(|&e| f.exprs[e].output).collect();
    let only_mask = condition_tensors.iter().all(|&t| {
        f.uses(t)
            .iter()
            .all(|u| *u == select || condition.contains(u))
    });
    let (must, exprs) = if only_mask {
        let exprs = MaskExprs {
            select,
            condition,
            condition_tensors,
        };
        (must, Some(exprs))
    } else {
        (Val::Int(0), None)
    };
    Some(IndexMask {
        select,
        key,
        query: b.query,
        may,
        must,
        exprs,
    })
}

/// The values a node of the mask takes over a pair of tiles: an integer's least and greatest
/// (and whether it is never negative, where a division rounds down as the kernel IR's does),
/// or whether a condition may hold (for some pair) and must hold (for every pair), each 0 or 1.
#[derive(Clone, Debug, PartialEq)]
pub enum Range {
    Int { lo: Val, hi: Val, nonneg: bool },
    Bool { may: Val, must: Val },
}

/// Builds each node's [`Range`], noting the query axis the mask reads.
struct Bounder<'f> {
    f: &'f Fusion,
    rank: usize,
    key: IterId,
    query: Option<IterId>,
    reads_key: bool,
    /// Each tensor's range, once: a mask reads a tensor from several places.
    ranges: rustc_hash::FxHashMap<TensorId, Range>,
}

/// The most nodes a bound's value may have: a tensor read twice by each of many sums would
/// double its bounds' size at each (the values are trees); such a mask is left unlisted.
const MAX_BOUND_NODES: usize = 512;

fn nodes(v: &Val) -> usize {
    1 + v.operands().map_or(0, |(a, b)| nodes(a) + nodes(b))
}

impl Bounder<'_> {
    fn range(&mut self, o: &Operand) -> Option<Range> {
        if let Operand::Tensor(t) = *o {
            if let Some(r) = self.ranges.get(&t) {
                return Some(r.clone());
            }
            let r = self.range_of(o)?;
            let size = match &r {
                Range::Int { lo, hi, .. } => nodes(lo) + nodes(hi),
                Range::Bool { may, must } => nodes(may) + nodes(must),
            };
            if size > MAX_BOUND_NODES {
                return None;
            }
            self.ranges.insert(t, r.clone());
            return Some(r);
        }
        self.range_of(o)
    }

    fn range_of(&mut self, o: &Operand) -> Option<Range> {
        let f = self.f;
        let t = match *o {
            Operand::Scalar(v) if v.fract() == 0.0 && v.abs() < 1e15 => {
                return Some(int(Val::Int(v as i64), Val::Int(v as i64), v >= 0.0))
            }
            // A size less a constant, not below 0 (`T - 5`).
            Operand::Count(c) if f.counts[c].minus.fract() == 0.0 => {
                let n = Val::from_size(&f.count_size(c));
                let n = match f.counts[c].minus as i64 {
                    0 => n,
                    m => max(Val::sub(n, Val::Int(m)), Val::Int(0)),
                };
                return Some(int(n.clone(), n, true));
            }
            Operand::Tensor(t) => t,
            _ => return None,
        };
        let dtype = f.tensors[t].dtype;
        if f.tensors[t].is_output || !(dtype.is_integer() || dtype == DType::Bool) {
            return None;
        }
        let e = f.tensors[t].definition?;
        let x = &f.exprs[e];
        match (&x.op, &x.inputs[..]) {
            (Op::Iota { axis }, _) => {
                let logical = f.logical(t);
                if logical.len() != self.rank {
                    return None;
                }
                let class = f.class_of(logical[*axis]);
                let [q0, q1, k0, k1] = TILE_BOUNDS.map(|n| Val::Var(n.to_string()));
                if class == self.key {
                    self.reads_key = true;
                    return Some(int(k0, k1, true));
                }
                if *self.query.get_or_insert(class) != class {
                    return None;
                }
                Some(int(q0, q1, true))
            }
            (Op::Set, [a]) => self.range(a),
            (Op::Cast(to), [a]) => {
                let from = match a {
                    Operand::Tensor(a) => f.tensors[*a].dtype,
                    _ => return None,
                };
                // Widening integer casts and bool to integer keep the values.
                let keeps = to.is_integer()
                    && (from == DType::Bool
                        || (from.is_integer() && to.size_bytes() >= from.size_bytes()));
                match self.range(a)? {
                    Range::Int { lo, hi, nonneg } if keeps && from != DType::Bool => {
                        Some(int(lo, hi, nonneg))
                    }
                    Range::Bool { may, must } if keeps => Some(int(must, may, true)),
                    _ => None,
                }
            }
            (Op::Unary(op), [a]) => {
                let a = self.range(a)?;
                match (op, a) {
                    (UnaryOp::Neg, Range::Int { lo, hi, .. }) => Some(int(neg(hi), neg(lo), false)),
                    (UnaryOp::Abs, Range::Int { lo, hi, nonneg }) if nonneg => {
                        Some(int(lo, hi, true))
                    }
                    (UnaryOp::Abs, Range::Int { lo, hi, .. }) => {
                        // 0 when the range holds it, else the end nearer 0.
                        let least = max(max(lo.clone(), neg(hi.clone())), Val::Int(0));
                        Some(int(least, max(neg(lo), hi), true))
                    }
                    (UnaryOp::LogicalNot, Range::Bool { may, must }) => {
                        Some(boolean(not(must), not(may)))
                    }
                    _ => None,
                }
            }
            (Op::Binary(op), [a, b]) => {
                let literal = |o: &Operand| match o {
                    Operand::Scalar(v) if v.fract() == 0.0 && v.abs() < 65536.0 => Some(*v as i64),
                    _ => None,
                };
                // A product's literal on either side; a shift's or remainder's on the right.
                let (a, b) = match (op, literal(a)) {
                    (BinaryOp::Mul, Some(_)) => (b, a),
                    _ => (a, b),
                };
                let c = literal(b);
                binary(*op, self.range(a)?, self.range(b)?, c)
            }
            _ => None,
        }
    }
}

/// The range of `a op b` (`literal`: `b` when it is an integer literal).
fn binary(op: BinaryOp, a: Range, b: Range, literal: Option<i64>) -> Option<Range> {
    use BinaryOp as B;
    match (op, a, b) {
        (B::LogicalAnd, Range::Bool { may, must }, Range::Bool { may: m2, must: s2 }) => {
            Some(boolean(Val::and(may, m2), Val::and(must, s2)))
        }
        (B::LogicalOr, Range::Bool { may, must }, Range::Bool { may: m2, must: s2 }) => {
            Some(boolean(or(may, m2), or(must, s2)))
        }
        (
            op,
            Range::Int { lo, hi, nonneg: n },
            Range::Int {
                lo: l2,
                hi: h2,
                nonneg: n2,
            },
        ) => match op {
            B::Add => Some(int(Val::add(lo, l2), Val::add(hi, h2), n && n2)),
            B::Sub => Some(int(Val::sub(lo, h2), Val::sub(hi, l2), false)),
            B::Min => Some(int(Val::min(lo, l2), Val::min(hi, h2), n && n2)),
            B::Max => Some(int(max(lo, l2), max(hi, h2), n || n2)),
            B::Mul => match literal? {
                c if c >= 0 => Some(int(Val::mul(lo, Val::Int(c)), Val::mul(hi, Val::Int(c)), n)),
                c => Some(int(
                    Val::mul(hi, Val::Int(c)),
                    Val::mul(lo, Val::Int(c)),
                    false,
                )),
            },
            // An arithmetic shift right by `c` is a division by 2^c rounded down: monotone.
            B::ShiftRight => match literal? {
                c @ 0..=30 => {
                    let d = 1i64 << c;
                    Some(int(floor_div(lo, d, n), floor_div(hi, d, n), n))
                }
                _ => None,
            },
            // Python's remainder by `d > 0`: `x - d floor(x / d)`, which rises with `x` between
            // multiples of `d`; over a range that crosses one, anything in [0, d).
            B::Remainder => match literal? {
                d if d > 0 => {
                    let same = Val::eq(floor_div(lo.clone(), d, n), floor_div(hi.clone(), d, n));
                    let (rl, rh) = (remainder(lo, d, n), remainder(hi, d, n));
                    Some(int(
                        select(same.clone(), rl, Val::Int(0)),
                        select(same, rh, Val::Int(d - 1)),
                        true,
                    ))
                }
                _ => None,
            },
            B::Lt => Some(boolean(Val::lt(lo, h2), Val::lt(hi, l2))),
            B::Le => Some(boolean(le(lo, h2), le(hi, l2))),
            B::Gt => Some(boolean(Val::lt(l2, hi), Val::lt(h2, lo))),
            B::Ge => Some(boolean(le(l2, hi), le(h2, lo))),
            B::Eq | B::Ne => {
                let may = Val::and(le(lo.clone(), h2.clone()), le(l2.clone(), hi.clone()));
                let must = Val::and(
                    Val::and(Val::eq(lo.clone(), hi), Val::eq(l2.clone(), h2)),
                    Val::eq(lo, l2),
                );
                Some(if op == B::Eq {
                    boolean(may, must)
                } else {
                    boolean(not(must), not(may))
                })
            }
            _ => None,
        },
        _ => None,
    }
}

fn int(lo: Val, hi: Val, nonneg: bool) -> Range {
    Range::Int { lo, hi, nonneg }
}

fn boolean(may: Val, must: Val) -> Range {
    Range::Bool { may, must }
}

// The kernel IR's values have `<`, `==`, `&&` and `min`; the rest is written with them, on
// conditions that are 0 or 1.

fn neg(a: Val) -> Val {
    Val::sub(Val::Int(0), a)
}

fn max(a: Val, b: Val) -> Val {
    neg(Val::min(neg(a), neg(b)))
}

fn le(a: Val, b: Val) -> Val {
    Val::lt(a, Val::add(b, Val::Int(1)))
}

fn not(a: Val) -> Val {
    Val::eq(a, Val::Int(0))
}

fn or(a: Val, b: Val) -> Val {
    Val::lt(Val::Int(0), Val::add(a, b))
}

/// `a` when `c` (0 or 1) holds, else `b`.
fn select(c: Val, a: Val, b: Val) -> Val {
    Val::add(b.clone(), Val::mul(c, Val::sub(a, b)))
}

/// `floor(x / d)` for `d > 0` (the kernel IR's division truncates: the same for `x >= 0`).
fn floor_div(x: Val, d: i64, nonneg: bool) -> Val {
    if nonneg {
        return Val::div(x, Val::Int(d));
    }
    let inexact_negative = Val::and(
        Val::lt(x.clone(), Val::Int(0)),
        not(Val::eq(Val::rem(x.clone(), Val::Int(d)), Val::Int(0))),
    );
    Val::sub(Val::div(x, Val::Int(d)), inexact_negative)
}

/// Python's `x % d` for `d > 0` (C's for `x >= 0`).
fn remainder(x: Val, d: i64, nonneg: bool) -> Val {
    if nonneg {
        return Val::rem(x, Val::Int(d));
    }
    Val::sub(x.clone(), Val::mul(floor_div(x, d, false), Val::Int(d)))
}

/// Pass `mask_list`: the first online softmax masked on indices whose loops fit (module doc)
/// visits the listed key tiles. Returns the launch constraint on the list's length, and the
/// loop for `mask_tiles`: its first [`VISITED_KEPT`] iterations are wholly kept.
pub fn run(
    cx: &Ctx,
    tile_loops: &TileLoops,
    k: &mut Kernel,
) -> Result<(super::Change, Vec<Constraint>, CausalTiles), crate::diag::Diagnostic> {
    let loops = super::document_tiles::masked_tile_loops(cx, tile_loops, find, |m| m.key);
    for (mask, tile_key, bk) in loops {
        let Some(grid) = super::document_tiles::grid_loops(k, tile_key) else {
            continue;
        };
        // The query tile of the CTA: a grid-bound loop over the mask's other axis.
        let (first_query, queries, bq, query_var) = match mask.query {
            None => (Val::Int(0), Val::Int(1), 1, String::new()),
            Some(query) => {
                let Some((var, bq)) = grid.iter().find_map(|(key, var)| {
                    match super::causal_tiles::tiled_class(cx, *key) {
                        Some((c, bq)) if c == query => Some((var.clone(), bq)),
                        _ => None,
                    }
                }) else {
                    continue;
                };
                let first = Val::mul(Val::Var(var.clone()), Val::Int(bq));
                (first, Val::from_size(&cx.class_extent(query)), bq, var)
            }
        };
        let var = cx.keys.names[tile_key].clone();
        let visited = VisitedTiles {
            var: var.clone(),
            key_tile: bk,
            query_tile: bq,
            first_query,
            queries,
            keys: Val::from_size(&cx.class_extent(mask.key)),
            test: TileTest::Bounds {
                may: mask.may,
                must: mask.must,
            },
            smem_offset: None,
        };
        let keys = cx.class_extent(mask.key);
        let Some(constraint) = super::document_tiles::install(k, tile_key, visited, keys, "mask")
        else {
            continue;
        };
        let kept = mask.exprs.map(|exprs| ClassifiedLoop {
            mask: exprs,
            tile_var: var,
            query_var,
            kept_tiles: Val::Var(VISITED_KEPT.to_string()),
            kept_from: None,
            first_tile: None,
            branch: true,
        });
        return Ok((
            super::Change::Changed,
            vec![constraint],
            CausalTiles(kept.into_iter().collect()),
        ));
    }
    Ok((super::Change::Unchanged, Vec::new(), CausalTiles::default()))
}

#[cfg(test)]
mod tests;
