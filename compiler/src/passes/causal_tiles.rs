//! Causal tile classification: an online softmax whose scores are causally masked computes only
//! the key tiles a query tile can see, and masks only those that cross its diagonal.
//!
//! Takes the fusion's online softmaxes (`online_softmax(o)`) and the loop over key tiles of each
//! (`loop_nest`'s [`TileLoops`]). The analysis ([`find`]) recognises scores written as
//! `sm = where(keep, x, -inf)` with `keep` a comparison of two `iota`s of the scores, one along
//! the summed key axis `T` (index `j`) and one along a query axis `S` (index `i`):
//! `j <= i` (`iota(s, axis=T) <= iota(s, axis=S)`, or `>=` with the operands swapped) or
//! `j < i` (`<`, `>`); key `j` is kept for query `i` when `j <= i + offset`, the offset 0 or -1.
//! The mask's tensors must be read by nothing else, and the masked scores must be the very
//! scores of the softmax (an op after the mask could turn `-inf` into a value that counts).
//! The key-tile loop must be the outer loop of `T` split by a constant `Bk` (its tile), and a
//! loop enclosing it must run over `S` whole (`Bq` = 1) or over the outer part of `S` split by
//! a constant `Bq`: query tile `q` holds the queries `[Bq q, Bq q + Bq)`. Anything else (another
//! mask, a persistent grid, no enclosing query loop) is not classified: the kernel computes and
//! masks every tile as before.
//!
//! Guarantees: the result is exactly the unclassified kernel's. A key tile `t` is
//! - wholly masked for every query of tile `q` when `Bk t > Bq q + Bq - 1 + offset`: such tiles
//!   contribute `-inf` to the running maximum and 0 to the sum and the product, so the loop
//!   stops before them (pass `mask_bounds`): its extent becomes
//!   `min(extent, ceilDiv(Bq (q + 1), Bk))` (the offset's -1 is not subtracted, so every query
//!   tile keeps at least its first key tile: a row with no key left still runs the guarded
//!   recurrence over one masked tile and ends as `0 / 0`, as before; rows whose first tiles are
//!   all masked are untouched, since only tiles after the diagonal are dropped);
//! - wholly kept when `Bk t + Bk - 1 <= Bq q + offset`, i.e. `t < (Bq q + offset + 1) / Bk`
//!   (floor): those tiles run the scores without the mask (pass `mask_tiles`): the statements
//!   that compute only the mask's condition and the masked scores (the loop over the score
//!   fragment on tensor cores; on CUDA cores, the condition's and the select's statements in the
//!   loop that also computes the scores) become one `If` on the tile-uniform condition
//!   `t < that count`: a copy of the select taking the scores as they are, else all of them as
//!   they were, which only the remaining diagonal tiles run.
//!
//! Ragged sizes keep their bounds checks (`j < T`, `i < S` are the predicate pass's, not the
//! mask's): a wholly kept tile past `T` is still bounded, and queries past `S` are never stored.
//! The bound is taken before the TMA, circular-buffer and warp-specialization passes, so their
//! prologues and producer loops follow the same shorter loop; the split after `simplify`, on the
//! final statements, so no later pass sees two computations of one tensor.
//!
//! Emits: `mask_bounds`: the tile loop's extent as a `Min`; `mask_tiles`: one `If` in place of
//! the mask's statements, per copy of the tile loop's body (the circular buffer's main loop and
//! epilogue), except where a tensor-core product is in flight over them (after `wait_group 1`:
//! the overlapped loop of `online_softmax(o, overlap=products)`), whose tiles all run the mask:
//! a branch there would drain the product.

use super::context::{Ctx, KeyNode, LoopKey};
use super::online_softmax::TileLoops;
use crate::diag::Diagnostic;
use crate::fusion::{
    BinaryOp, ExprId, Fusion, IterId, Op, Operand, ParallelType, TensorId, TernaryOp,
};
use crate::kir::{BufferId, Data, Kernel, Stmt, Val};

/// A causal mask on the scores of an online softmax ([`find`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CausalMask {
    /// The `where` that masks the scores.
    pub select: ExprId,
    /// The expressions that compute its condition (the comparison and the `iota`s) and the
    /// tensors they define.
    pub condition: Vec<ExprId>,
    pub condition_tensors: Vec<TensorId>,
    /// The class of the key axis `T` and of the query axis `S`.
    pub key: IterId,
    pub query: IterId,
    /// Key `j` is kept for query `i` when `j <= i + offset` (0 for `<=`, -1 for `<`).
    pub offset: i64,
}

/// The classified tile loop of one masked online softmax, handed from `mask_bounds` to
/// `mask_tiles`.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassifiedLoop {
    pub mask: CausalMask,
    /// The key-tile loop's variable.
    pub tile_var: String,
    /// How many of the first key tiles are wholly kept, in terms of the query tile's variable.
    pub kept_tiles: Val,
}

/// What `mask_bounds` found, for `mask_tiles`.
#[derive(Clone, Debug, Default)]
pub struct CausalTiles(pub Vec<ClassifiedLoop>);

/// Whether some online softmax's scores carry a causal mask (and the grid is not persistent,
/// whose query tile is no loop variable here): the passes' `applies`.
pub fn used(cx: &Ctx) -> bool {
    let f = cx.fusion;
    f.persistent.is_none()
        && f.online_softmax
            .iter()
            .any(|r| find(f, r.pattern.scores, r.pattern.axis).is_some())
}

/// The causal mask on `scores`, the scores of an online softmax over the class `key_axis`, when
/// they are written as the module doc says.
pub fn find(f: &Fusion, scores: TensorId, key_axis: IterId) -> Option<CausalMask> {
    let def = |t: TensorId| f.tensors[t].definition;
    let select = def(scores)?;
    let x = &f.exprs[select];
    let (
        Op::Ternary(TernaryOp::Where),
        [Operand::Tensor(keep), Operand::Tensor(_), Operand::Scalar(v)],
    ) = (&x.op, &x.inputs[..])
    else {
        return None;
    };
    if *v != f64::NEG_INFINITY || f.tensors[scores].is_output {
        return None;
    }
    let compare = def(*keep)?;
    let c = &f.exprs[compare];
    let (Op::Binary(op), [Operand::Tensor(a), Operand::Tensor(b)]) = (&c.op, &c.inputs[..]) else {
        return None;
    };
    // Each operand an `iota` of the scores' shape: the class of its axis.
    let iota = |t: TensorId| -> Option<(ExprId, IterId)> {
        let e = def(t)?;
        let Op::Iota { axis } = f.exprs[e].op else {
            return None;
        };
        let logical = f.logical(t);
        (logical.len() == f.rank(scores)).then(|| (e, f.class_of(logical[axis])))
    };
    let ((ea, ca), (eb, cb)) = (iota(*a)?, iota(*b)?);
    let (j, i, offset) = match op {
        BinaryOp::Le => (ca, cb, 0),
        BinaryOp::Lt => (ca, cb, -1),
        BinaryOp::Ge => (cb, ca, 0),
        BinaryOp::Gt => (cb, ca, -1),
        _ => return None,
    };
    let key = f.class_of(key_axis);
    if j != key || i == key {
        return None;
    }
    // The mask's tensors feed the `where` only: the unmasked tiles leave them out.
    let only_read_by = |t: TensorId, reader: ExprId| {
        !f.tensors[t].is_output && f.uses(t).iter().all(|&u| u == reader)
    };
    if !only_read_by(*keep, select) || !only_read_by(*a, compare) || !only_read_by(*b, compare) {
        return None;
    }
    Some(CausalMask {
        select,
        condition: vec![compare, ea, eb],
        condition_tensors: vec![*keep, *a, *b],
        key,
        query: i,
        offset,
    })
}

/// A loop key as `(class, tile)`: the whole of an axis class (tile 1) or the outer loop of a
/// class split by a constant inner extent.
fn tiled_class(cx: &Ctx, key: LoopKey) -> Option<(IterId, i64)> {
    let root = |k: LoopKey| match cx.keys.nodes[k] {
        KeyNode::Root(c) => Some(cx.fusion.class_of(c)),
        _ => None,
    };
    match cx.keys.nodes[key] {
        KeyNode::Root(c) => Some((cx.fusion.class_of(c), 1)),
        KeyNode::Split {
            parent,
            factor,
            inner_split: true,
            is_outer: true,
        } if factor > 0 => Some((root(parent)?, factor)),
        _ => None,
    }
}

/// Pass `mask_bounds`: the key-tile loop of each causally masked online softmax stops after the
/// query tile's diagonal (module doc). Returns what `mask_tiles` splits.
pub fn bound(
    cx: &Ctx,
    tile_loops: &TileLoops,
    k: &mut Kernel,
) -> Result<(super::Change, CausalTiles), Diagnostic> {
    let f = cx.fusion;
    let mut out = Vec::new();
    for (r, &tile_key) in f.online_softmax.iter().zip(&tile_loops.0) {
        let Some(mask) = find(f, r.pattern.scores, r.pattern.axis) else {
            continue;
        };
        let Some((class, bk)) = tiled_class(cx, tile_key) else {
            continue;
        };
        if class != mask.key {
            continue;
        }
        // The tile loops with the query loop around them, each bounded by its query tile.
        let mut found: Option<(String, i64)> = None;
        let mut enclosing: Vec<(LoopKey, String)> = Vec::new();
        bound_in(
            cx,
            &mut k.body,
            tile_key,
            &mask,
            bk,
            &mut enclosing,
            &mut found,
        );
        let Some((query_var, bq)) = found else {
            continue;
        };
        let kept_tiles = kept_tiles(Val::Var(query_var), bq, bk, mask.offset);
        out.push(ClassifiedLoop {
            mask,
            tile_var: cx.keys.names[tile_key].clone(),
            kept_tiles,
        });
    }
    Ok((
        super::Change::from_changed(!out.is_empty()),
        CausalTiles(out),
    ))
}

/// How many key tiles of `bk` keys query tile `q` (of `bq` queries) computes: through the last
/// one holding a key its last query may see, `ceilDiv(bq (q + 1), bk)` (the offset's -1 left
/// out: at least one tile, module doc). Folded when `bk` divides `bq`.
pub fn visible_tiles(q: Val, bq: i64, bk: i64) -> Val {
    let next = Val::add(q, Val::Int(1));
    if bq % bk == 0 {
        scaled(bq / bk, next)
    } else {
        Val::ceil_div(Val::mul(Val::Int(bq), next), Val::Int(bk))
    }
}

/// How many of the first key tiles every query of tile `q` sees whole: `(bq q + offset + 1) /
/// bk`, folded to `(bq / bk) q` when `bk` divides `bq` and `0 <= offset + 1 < bk`.
pub fn kept_tiles(q: Val, bq: i64, bk: i64, offset: i64) -> Val {
    if bq % bk == 0 && (0..bk).contains(&(offset + 1)) {
        return scaled(bq / bk, q);
    }
    let first_query = scaled(bq, q);
    let numerator = match offset + 1 {
        0 => first_query,
        n => Val::add(first_query, Val::Int(n)),
    };
    Val::div(numerator, Val::Int(bk))
}

fn scaled(c: i64, v: Val) -> Val {
    if c == 1 {
        v
    } else {
        Val::mul(Val::Int(c), v)
    }
}

/// Bounds every loop of key `tile_key` in `body` under a loop over the mask's query class;
/// `found` is the query loop's variable and tile (the first one met; a second, different one
/// leaves its tile loops unbounded).
fn bound_in(
    cx: &Ctx,
    body: &mut [Stmt],
    tile_key: LoopKey,
    mask: &CausalMask,
    bk: i64,
    enclosing: &mut Vec<(LoopKey, String)>,
    found: &mut Option<(String, i64)>,
) {
    for s in body {
        if let Stmt::Loop(l) = s {
            if l.key == tile_key {
                let query =
                    enclosing
                        .iter()
                        .rev()
                        .find_map(|(key, var)| match tiled_class(cx, *key) {
                            Some((c, bq)) if c == mask.query => Some((var.clone(), bq)),
                            _ => None,
                        });
                if let Some((var, bq)) = query {
                    if found.as_ref().is_none_or(|(v, b)| *v == var && *b == bq) {
                        let last = visible_tiles(Val::Var(var.clone()), bq, bk);
                        l.extent = Val::min(l.extent.clone(), last);
                        *found = Some((var, bq));
                    }
                }
                continue;
            }
            enclosing.push((l.key, l.var.clone()));
            bound_in(cx, &mut l.body, tile_key, mask, bk, enclosing, found);
            enclosing.pop();
            continue;
        }
        for child in s.children_mut() {
            bound_in(cx, child, tile_key, mask, bk, enclosing, found);
        }
    }
}

/// Pass `mask_tiles`: inside each classified tile loop, the statement computing the masked
/// scores runs unmasked on the wholly kept tiles (module doc).
pub fn split(tiles: &CausalTiles, k: &mut Kernel) -> super::Change {
    let mut changed = false;
    for c in &tiles.0 {
        let buffers: Vec<BufferId> = k
            .buffer_ids()
            .filter(|&b| {
                k.buffers[b.index()]
                    .tensor
                    .is_some_and(|t| c.mask.condition_tensors.contains(&t))
            })
            .collect();
        changed |= split_in(&mut k.body, c, &buffers, false);
    }
    super::Change::from_changed(changed)
}

/// Splits, in `body` (inside the tile loop when `in_tile`), the mask's statements: those that
/// compute nothing but the condition and the masked scores ([`mask_only`]: the loop over the
/// score fragment on tensor cores, or the condition's and the select's statements among the
/// scores' other work on CUDA cores). Where the select is among them, they become one `If` at
/// the select's place: the kept tiles run the select's statement unmasked, the others all of
/// them in order (the condition's statements move after the work between them and the select,
/// which none of it reads: the mask's tensors are read by the select only).
fn split_in(
    body: &mut Vec<Stmt>,
    c: &ClassifiedLoop,
    condition_buffers: &[BufferId],
    mut in_tile: bool,
) -> bool {
    let mut mask_stmts = Vec::new();
    for (k, s) in body.iter().enumerate() {
        if let Stmt::Let { var, .. } = s {
            // The circular buffer's epilogue names the tile index with a `Let`.
            in_tile |= *var == c.tile_var;
        }
        if in_tile && mask_only(s, c, condition_buffers) {
            mask_stmts.push(k);
        }
    }
    let select_at = mask_stmts
        .iter()
        .copied()
        .find(|&k| computes(&body[k], c.mask.select));
    // Where a tensor-core product is in flight (after `wait_group 1` and before the wait that
    // drains it: `online_softmax(o, overlap=products)`), a branch would make ptxas drain the
    // product at its join (`WARPGROUP.DEPBAR` before the exponentials), so the mask stays as
    // it is, without a branch, and its selects run in the product's shadow.
    if let Some(&first) = mask_stmts.first() {
        let in_flight = body[..first].iter().rev().find_map(|s| match s {
            Stmt::WgmmaWait(n) => Some(*n > 0),
            _ => None,
        });
        if select_at.is_some() && in_flight == Some(true) {
            return false;
        }
    }
    let Some(select_at) = select_at else {
        // Not here: inside the statements that hold the select among other work.
        let mut changed = false;
        let mut in_tile = in_tile;
        for s in body.iter_mut() {
            if let Stmt::Let { var, .. } = s {
                in_tile |= *var == c.tile_var;
            }
            let inner = in_tile || matches!(s, Stmt::Loop(l) if l.var == c.tile_var);
            for child in s.children_mut() {
                changed |= split_in(child, c, condition_buffers, inner);
            }
        }
        return changed;
    };
    let mut unmasked = body[select_at].clone();
    unmask(&mut unmasked, &c.mask, condition_buffers);
    let masked: Vec<Stmt> = mask_stmts.iter().map(|&k| body[k].clone()).collect();
    let split = Stmt::If {
        cond: Val::lt(Val::Var(c.tile_var.clone()), c.kept_tiles.clone()),
        then: vec![unmasked],
        els: masked,
    };
    let mut k = 0;
    body.retain(|_| {
        k += 1;
        k - 1 == select_at || !mask_stmts.contains(&(k - 1))
    });
    let at = select_at - mask_stmts.iter().filter(|&&m| m < select_at).count();
    body[at] = split;
    true
}

/// Whether `s` computes only the mask's condition and the masked scores (and holds at least one
/// such computation), outside any hardware-bound loop and the tile loop itself.
fn mask_only(s: &Stmt, c: &ClassifiedLoop, condition_buffers: &[BufferId]) -> bool {
    let mut any = false;
    let other = crate::kir::any_stmt(std::slice::from_ref(s), &mut |t| match t {
        Stmt::Compute(x) => {
            any = true;
            x.expr != c.mask.select && !c.mask.condition.contains(&x.expr)
        }
        Stmt::Alloc(b) => {
            any = true;
            !condition_buffers.contains(b)
        }
        Stmt::Loop(l) => {
            !matches!(l.parallel, ParallelType::Serial | ParallelType::Unroll)
                || l.var == c.tile_var
        }
        Stmt::If { .. } => false,
        _ => true,
    });
    !other && any
}

/// Whether `s` computes the expression `e`.
fn computes(s: &Stmt, e: ExprId) -> bool {
    crate::kir::any_stmt(
        std::slice::from_ref(s),
        &mut |s| matches!(s, Stmt::Compute(c) if c.expr == e),
    )
}

/// `s` without the mask: the `where` takes its kept value, the condition's computations and
/// buffers go.
fn unmask(s: &mut Stmt, mask: &CausalMask, condition_buffers: &[BufferId]) {
    if let Stmt::Compute(c) = s {
        if c.expr == mask.select {
            if let Data::Ternary(TernaryOp::Where, _, operands) = &c.value {
                let [_, kept, _] = &**operands;
                c.value = kept.clone();
            }
        }
        return;
    }
    for body in s.children_mut() {
        for t in body.iter_mut() {
            unmask(t, mask, condition_buffers);
        }
        // The predicate's conditions around the condition's computations go with them.
        body.retain(|t| match t {
            Stmt::Compute(c) => !mask.condition.contains(&c.expr),
            Stmt::Alloc(b) => !condition_buffers.contains(b),
            Stmt::If { then, els, .. } => !(then.is_empty() && els.is_empty()),
            _ => true,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The classification against every (query, key) pair: a tile past the visible ones holds
    /// no key any query of the tile sees, a kept tile no key any query of it does not see, at
    /// tile sizes that divide each other and that do not, and both offsets.
    #[test]
    fn tile_counts_match_the_mask_pair_by_pair() {
        let eval = |v: &Val, q: i64| {
            v.eval_with(&|leaf| match leaf {
                Val::Var(n) if n == "q" => Some(q),
                _ => None,
            })
            .unwrap()
        };
        let q = || Val::Var("q".into());
        for (bq, bk) in [
            (64, 64),
            (64, 32),
            (128, 64),
            (64, 128),
            (48, 64),
            (1, 32),
            (64, 1),
        ] {
            for offset in [0, -1] {
                let (visible, kept) = (visible_tiles(q(), bq, bk), kept_tiles(q(), bq, bk, offset));
                for tq in 0..12 {
                    let (n_hi, n_lo) = (eval(&visible, tq), eval(&kept, tq));
                    assert!(n_hi >= 1 && n_lo <= n_hi, "{bq} {bk} {offset} {tq}");
                    let seen = |i: i64, j: i64| j <= i + offset;
                    let queries = bq * tq..bq * (tq + 1);
                    for t in 0..n_hi + 3 {
                        let keys = bk * t..bk * (t + 1);
                        let any = queries.clone().any(|i| keys.clone().any(|j| seen(i, j)));
                        let all = queries.clone().all(|i| keys.clone().all(|j| seen(i, j)));
                        if t >= n_hi {
                            assert!(!any, "tile {t} of query tile {tq} ({bq} x {bk}, {offset}) is skipped but seen");
                        }
                        if t < n_lo {
                            assert!(
                                all,
                                "tile {t} of query tile {tq} ({bq} x {bk}, {offset}) runs unmasked"
                            );
                        }
                        // Tight for the tiles the query tile sees (the offset -1 may keep one
                        // more tile than it needs, never fewer).
                        if t == n_hi - 1 && offset == 0 {
                            assert!(any, "tile {t} of query tile {tq} is computed but unseen");
                        }
                        if t == n_lo {
                            assert!(
                                !all || t >= n_hi,
                                "tile {t} of query tile {tq} is masked but whole"
                            );
                        }
                    }
                }
            }
        }
    }
}
