//! Causal tile classification: an online softmax whose scores are masked by a band on `j - i`
//! (causal, shifted, sliding-window) computes only the key tiles a query tile can see, and
//! masks only those that cross the band's edges.
//!
//! Takes the fusion's online softmaxes (`online_softmax(o)`) and the loop over key tiles of each
//! (`loop_nest`'s [`TileLoops`]). The analysis ([`find`]) recognises scores written as
//! `sm = where(keep, x, -inf)` with `keep` one comparison, or `logical_and` of two, of sums of
//! `iota`s of the scores, integers and size symbols, one `iota` along the summed key axis `T`
//! (index `j`) and one along a query axis `S` (index `i`), each comparison a side of the band
//! `lower <= j - i <= upper`: `j <= i` (`iota(s, axis=T) <= iota(s, axis=S)`, or `>=` with the
//! operands swapped; upper 0), `j < i` (upper -1), FlashAttention's bottom-right aligned
//! `j <= i + T - S` (upper `T - S`, sizes read at run time), and with a sliding window of `W`
//! keys `i - j < W` (lower `1 - W`). The upper side is required (it bounds the loop); the lower
//! is optional.
//! The mask's tensors must be read by nothing else, and the masked scores must be the very
//! scores of the softmax (an op after the mask could turn `-inf` into a value that counts).
//! The key-tile loop must be the outer loop of `T` split by a constant `Bk` (its tile), and a
//! loop enclosing it must run over `S` whole (`Bq` = 1) or over the outer part of `S` split by
//! a constant `Bq`: query tile `q` holds the queries `[Bq q, Bq q + Bq)`. Anything else (another
//! mask, a persistent grid, no enclosing query loop) is not classified: the kernel computes and
//! masks every tile as before.
//!
//! Guarantees: the result is exactly the unclassified kernel's. With `offset` the upper side, a
//! key tile `t` is
//! - wholly masked for every query of tile `q` when `Bk t > Bq q + Bq - 1 + offset`: such tiles
//!   contribute `-inf` to the running maximum and 0 to the sum and the product, so the loop
//!   stops before them (pass `mask_bounds`): its extent becomes
//!   `min(extent, ceilDiv(Bq (q + 1), Bk))` for the offsets 0 and -1, and
//!   `max(1, ceilDiv(Bq (q + 1) + offset, Bk))` for the others (the offset's -1 is not
//!   subtracted, so every query tile keeps at least its first key tile: a row with no key left still runs the guarded
//!   recurrence over one masked tile and ends as `0 / 0`, as before; rows whose first tiles are
//!   all masked are untouched, since only tiles after the diagonal are dropped);
//! - wholly kept when `Bk t + Bk - 1 <= Bq q + offset`, i.e. `t < (Bq q + offset + 1) / Bk`
//!   (floor): those tiles run the scores without the mask (pass `mask_tiles`): the statements
//!   that compute only the mask's condition and the masked scores (the loop over the score
//!   fragment on tensor cores; on CUDA cores, the condition's and the select's statements in the
//!   loop that also computes the scores) become one `If` on the tile-uniform condition
//!   `t < that count`: a copy of the select taking the scores as they are, else all of them as
//!   they were, which only the remaining diagonal tiles run. With a lower side the condition
//!   is also `t >= ceilDiv(Bq q + Bq - 1 + lower, Bk)`, the first tile every query keeps whole;
//! - with a lower side, wholly masked when `Bk t + Bk - 1 < Bq q + lower`: the loop starts at
//!   `max(0, (Bq q + lower) / Bk)` (in `mask_tiles`, after the TMA pass: the loop counts its
//!   iterations from 0 in a variable of its own, which the mbarrier waits' phases read, and its
//!   body names the tile index with a `Let`; at least one tile runs). Not under a circular
//!   buffer, whose prologue and producer load the first tiles outside the loop body: such a
//!   band is left to pass `mask_list`, which lists the window's tiles ([`takes`]).
//!
//! Ragged sizes keep their bounds checks (`j < T`, `i < S` are the predicate pass's, not the
//! mask's): a wholly kept tile past `T` is still bounded, and queries past `S` are never stored.
//! The bound is taken before the TMA, circular-buffer and warp-specialization passes, so their
//! prologues and producer loops follow the same shorter loop; the split after `simplify`, on the
//! final statements, so no later pass sees two computations of one tensor.
//!
//! Emits: `mask_bounds`: the tile loop's extent as a `Min`; `mask_tiles`: the loop's start (a
//! lower side), and one `If` in place of
//! the mask's statements, per copy of the tile loop's body (the circular buffer's main loop and
//! epilogue), except where a tensor-core product is in flight over them (after `wait_group 1`:
//! the overlapped loop of `online_softmax(o, overlap=products)`), where a branch would drain
//! the product: that loop becomes two instead, FlashAttention-3's ([`two_loops`]), the wholly
//! kept tiles in one whose body has no mask, then the diagonal tiles in one that runs it.

use super::context::{Ctx, KeyNode, LoopKey};
use super::online_softmax::TileLoops;
use crate::diag::Diagnostic;
use crate::fusion::{
    BinaryOp, ExprId, Fusion, IterId, Op, Operand, ParallelType, TensorId, TernaryOp,
};
use crate::kir::{visit_mut, visit_stmt_mut, BufferId, Data, Flow, Kernel, Stmt, Val, VisitorMut};
use crate::plan::SizeExpr;
use std::convert::Infallible;

mod two_loops;

/// A mask's statements, which a wholly kept tile goes without (pass `mask_tiles`).
#[derive(Clone, Debug, PartialEq)]
pub struct MaskExprs {
    /// The `where` that masks the scores.
    pub select: ExprId,
    /// The expressions that compute its condition (the comparisons and what they compare) and
    /// the tensors they define, read by the select and each other only.
    pub condition: Vec<ExprId>,
    pub condition_tensors: Vec<TensorId>,
}

/// A causal mask on the scores of an online softmax ([`find`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CausalMask {
    /// The select and the comparisons and `iota`s of its condition.
    pub exprs: MaskExprs,
    /// The class of the key axis `T` and of the query axis `S`.
    pub key: IterId,
    pub query: IterId,
    /// Key `j` is kept for query `i` when `j - i <= upper` (0 for `j <= i`, -1 for `j < i`,
    /// `T - S` for the bottom-right aligned mask) ...
    pub upper: Offset,
    /// ... and `j - i >= lower` (a sliding window of `W` keys: `1 - W`), if given.
    pub lower: Option<Offset>,
}

/// The classified tile loop of one masked online softmax, handed from `mask_bounds` to
/// `mask_tiles`.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassifiedLoop {
    pub mask: MaskExprs,
    /// The key-tile loop's variable.
    pub tile_var: String,
    /// The variable of the query-tile loop around it (`longest_first` reverses its block
    /// order).
    pub query_var: String,
    /// How many of the first key tiles are wholly kept, in terms of the query tile's variable.
    pub kept_tiles: Val,
    /// With a lower bound (a sliding window): the first key tile wholly kept (the tiles before
    /// it are masked).
    pub kept_from: Option<Val>,
    /// With a lower bound and no circular buffer (whose prologue and producer issue the first
    /// tiles' loads outside the loop): the first tile some query of the tile sees, where the
    /// loop starts, and the name of the variable that counts its iterations.
    pub first_tile: Option<(Val, String)>,
    /// Whether the mask's statements outside the overlapped loop become an `If` on the tile.
    /// A document mask's do not: its first iteration keeps the mask (a kept tile masked is
    /// still right), so that its reads of the queries' ids, which no tile changes, run
    /// unconditionally before the loops and ptxas reads them once (a branch around them made
    /// the main loop read them in every iteration: 48 us of 549 at 2k on the H200).
    pub branch: bool,
}

/// What `mask_bounds` found, for `mask_tiles`.
#[derive(Clone, Debug, Default)]
pub struct CausalTiles(pub Vec<ClassifiedLoop>);

/// Whether some online softmax's scores carry a causal mask (and the grid is not persistent,
/// whose query tile is no loop variable here): the passes' `applies`.
pub fn used(cx: &Ctx) -> bool {
    super::online_softmax::some_masked(cx, |f, scores, axis| takes(f, scores, axis).is_some())
}

/// The band mask passes `mask_bounds` and `mask_tiles` take: [`find`]'s, but not a band with a
/// lower side (a window) when a circular buffer fills the key loop: its prologue and producer
/// issue the first tiles' loads outside the loop body, so the loop cannot start at the
/// window; pass `mask_list` lists the window's tiles instead.
pub fn takes(f: &Fusion, scores: TensorId, key_axis: IterId) -> Option<CausalMask> {
    let circular = f.tensor_ids().any(|t| f.tensors[t].circular.is_some());
    find(f, scores, key_axis).filter(|m| m.lower.is_none() || !circular)
}

/// An offset of the mask's band: an integer plus signed size extents (`T - S`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Offset {
    pub constant: i64,
    pub sizes: Vec<(i64, SizeExpr)>,
}

impl Offset {
    /// The offset when it is an integer alone.
    pub fn constant(&self) -> Option<i64> {
        self.sizes.is_empty().then_some(self.constant)
    }

    fn add(&mut self, other: &Offset, sign: i64) {
        self.constant += sign * other.constant;
        self.sizes
            .extend(other.sizes.iter().map(|(s, e)| (sign * s, e.clone())));
    }

    fn plus(mut self, c: i64) -> Offset {
        self.constant += c;
        self
    }

    /// `v` plus the offset in the kernel (sizes are its parameters), the sizes first and a
    /// negative integer subtracted.
    pub fn added_to(&self, mut v: Val) -> Val {
        for (sign, e) in &self.sizes {
            let e = Val::from_size(e);
            v = if *sign > 0 {
                Val::add(v, e)
            } else {
                Val::sub(v, e)
            };
        }
        match self.constant {
            0 => v,
            c if c > 0 => Val::add(v, Val::Int(c)),
            c => Val::sub(v, Val::Int(-c)),
        }
    }
}

/// A sum of `iota`s of the scores (coefficient per axis class) and an [`Offset`].
#[derive(Default)]
struct Affine {
    iotas: Vec<(IterId, i64)>,
    rest: Offset,
}

impl Affine {
    fn add(&mut self, other: &Affine, sign: i64) {
        for &(c, k) in &other.iotas {
            match self.iotas.iter_mut().find(|(x, _)| *x == c) {
                Some((_, n)) => *n += sign * k,
                None => self.iotas.push((c, sign * k)),
            }
        }
        self.rest.add(&other.rest, sign);
    }
}

/// One side of a band `j - i <= upper` or `j - i >= lower` written as the comparison `t` of
/// `iota`s of the scores (rank `rank`, key class `key`), as the module doc says: the side, with
/// the query class, and the comparison's expressions and tensors (for a mask that combines it
/// with another condition: `document_tiles`).
pub(super) fn band_side(
    f: &Fusion,
    t: TensorId,
    key: IterId,
    rank: usize,
) -> Option<(Bound, Vec<ExprId>, Vec<TensorId>)> {
    let mut cond = Condition {
        f,
        rank,
        key,
        exprs: Vec::new(),
        tensors: Vec::new(),
    };
    let side = cond.bound(t)?;
    Some((side, cond.exprs, cond.tensors))
}

/// One side of the band: `j - i <= c` (upper) or `j - i >= c` (lower).
pub(super) enum Bound {
    Upper(IterId, Offset),
    Lower(IterId, Offset),
}

/// The expressions and tensors of a mask's condition, as they are collected.
struct Condition<'f> {
    f: &'f Fusion,
    rank: usize,
    key: IterId,
    exprs: Vec<ExprId>,
    tensors: Vec<TensorId>,
}

impl Condition<'_> {
    /// `o` as a sum of `iota`s of the scores, integers and sizes (`iota(s, axis=0) + T - S`).
    fn affine(&mut self, o: &Operand) -> Option<Affine> {
        let f = self.f;
        let t = match *o {
            Operand::Scalar(v) if v.fract() == 0.0 && v.abs() < 1e15 => {
                return Some(Affine {
                    rest: Offset {
                        constant: v as i64,
                        ..Offset::default()
                    },
                    ..Affine::default()
                })
            }
            Operand::Count(c) if f.counts[c].minus == 0.0 => {
                return Some(Affine {
                    rest: Offset {
                        constant: 0,
                        sizes: vec![(1, f.count_size(c))],
                    },
                    ..Affine::default()
                })
            }
            Operand::Tensor(t) => t,
            _ => return None,
        };
        let e = f.tensors[t].definition?;
        let x = &f.exprs[e];
        let affine = match (&x.op, &x.inputs[..]) {
            (Op::Iota { axis }, _) => {
                let logical = f.logical(t);
                if logical.len() != self.rank {
                    return None;
                }
                Affine {
                    iotas: vec![(f.class_of(logical[*axis]), 1)],
                    ..Affine::default()
                }
            }
            (Op::Binary(op @ (BinaryOp::Add | BinaryOp::Sub)), [a, b]) => {
                let mut sum = self.affine(a)?;
                let b = self.affine(b)?;
                sum.add(&b, if *op == BinaryOp::Add { 1 } else { -1 });
                sum
            }
            _ => return None,
        };
        self.exprs.push(e);
        self.tensors.push(t);
        Some(affine)
    }

    /// `t` as one side of the band on `j - i`, `j` the key index and `i` another axis's.
    fn bound(&mut self, t: TensorId) -> Option<Bound> {
        let f = self.f;
        let e = f.tensors[t].definition?;
        let x = &f.exprs[e];
        let (Op::Binary(op), [a, b]) = (&x.op, &x.inputs[..]) else {
            return None;
        };
        let mut diff = self.affine(a)?;
        diff.add(&self.affine(b)?, -1);
        self.exprs.push(e);
        self.tensors.push(t);
        diff.iotas.retain(|&(_, k)| k != 0);
        let kj = diff.iotas.iter().find(|(c, _)| *c == self.key)?.1;
        let [(c1, k1), (c2, k2)] = diff.iotas[..] else {
            return None;
        };
        let query = if c1 == self.key { c2 } else { c1 };
        if !matches!(kj, 1 | -1) || k1 + k2 != 0 {
            return None;
        }
        // kj (j - i) + rest `op` 0, so j - i `op'` c with c = -kj rest, op' flipped when kj < 0.
        let mut c = Offset::default();
        c.add(&diff.rest, -kj);
        let op = match (op, kj) {
            (op, 1) => *op,
            (BinaryOp::Le, _) => BinaryOp::Ge,
            (BinaryOp::Lt, _) => BinaryOp::Gt,
            (BinaryOp::Ge, _) => BinaryOp::Le,
            (BinaryOp::Gt, _) => BinaryOp::Lt,
            _ => return None,
        };
        Some(match op {
            BinaryOp::Le => Bound::Upper(query, c),
            BinaryOp::Lt => Bound::Upper(query, c.plus(-1)),
            BinaryOp::Ge => Bound::Lower(query, c),
            BinaryOp::Gt => Bound::Lower(query, c.plus(1)),
            _ => return None,
        })
    }
}

/// The band mask on `scores`, the scores of an online softmax over the class `key_axis`, when
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
    let key = f.class_of(key_axis);
    let mut cond = Condition {
        f,
        rank: f.rank(scores),
        key,
        exprs: Vec::new(),
        tensors: Vec::new(),
    };
    let keep_expr = &f.exprs[def(*keep)?];
    let bounds = match (&keep_expr.op, &keep_expr.inputs[..]) {
        (Op::Binary(BinaryOp::LogicalAnd), [Operand::Tensor(a), Operand::Tensor(b)]) => {
            let bounds = [cond.bound(*a)?, cond.bound(*b)?];
            cond.exprs.push(def(*keep)?);
            cond.tensors.push(*keep);
            bounds.into_iter().collect()
        }
        _ => vec![cond.bound(*keep)?],
    };
    let (mut upper, mut lower, mut query) = (None, None, None);
    for b in bounds {
        let (q, slot, o) = match b {
            Bound::Upper(q, o) => (q, &mut upper, o),
            Bound::Lower(q, o) => (q, &mut lower, o),
        };
        if slot.is_some() || query.is_some_and(|x| x != q) {
            return None;
        }
        *slot = Some(o);
        query = Some(q);
    }
    let (Some(upper), Some(query)) = (upper, query) else {
        return None;
    };
    if query == key {
        return None;
    }
    // The mask's tensors feed the `where` (or each other) only: the unmasked tiles leave them
    // out.
    let in_condition = |u: ExprId| u == select || cond.exprs.contains(&u);
    if cond
        .tensors
        .iter()
        .any(|&t| f.tensors[t].is_output || !f.uses(t).iter().all(|&u| in_condition(u)))
    {
        return None;
    }
    let mut condition = cond.exprs;
    condition.dedup();
    let mut condition_tensors = cond.tensors;
    condition_tensors.dedup();
    Some(CausalMask {
        exprs: MaskExprs {
            select,
            condition,
            condition_tensors,
        },
        key,
        query,
        upper,
        lower,
    })
}

/// A loop key as `(class, tile)`: the whole of an axis class (tile 1) or the outer loop of a
/// class split by a constant inner extent.
pub(super) fn tiled_class(cx: &Ctx, key: LoopKey) -> Option<(IterId, i64)> {
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
        let Some(mask) = takes(f, r.pattern.scores, r.pattern.axis) else {
            continue;
        };
        let Some((class, bk)) = tiled_class(cx, tile_key) else {
            continue;
        };
        if class != mask.key {
            continue;
        }
        // The tile loops with the query loop around them, each bounded by its query tile.
        let mut walk = BoundTiles {
            cx,
            tile_key,
            mask: &mask,
            bk,
            enclosing: Vec::new(),
            found: None,
        };
        let Ok(()) = visit_mut(&mut k.body, &mut walk);
        let Some((query_key, _, bq)) = walk.found else {
            continue;
        };
        // The query loop's variable by its key (as the tile loop's), so that what `mask_tiles`
        // is given does not depend on the text of the kernel this pass was given.
        let query_var = cx.keys.names[query_key].clone();
        let q = || Val::Var(query_var.clone());
        // `mask_tiles` runs after `specialize`: a specialised kernel's sizes in the offsets are
        // values there.
        let specialized = |v: Val| match &cx.options.specialized {
            Some(sizes) => v.subst_sizes(sizes),
            None => v,
        };
        let kept_tiles = specialized(kept_tiles_under(q(), bq, bk, &mask.upper));
        let kept_from = mask
            .lower
            .as_ref()
            .map(|lower| specialized(first_kept_tile(q(), bq, bk, lower)));
        let tile_var = cx.keys.names[tile_key].clone();
        // (No circular buffer fills the loop: [`takes`].)
        let first_tile = mask.lower.as_ref().map(|lower| {
            let mut counter = format!("{tile_var}_n");
            while cx.keys.names.contains(&counter) {
                counter.push('n');
            }
            (specialized(first_seen_tile(q(), bq, bk, lower)), counter)
        });
        out.push(ClassifiedLoop {
            mask: mask.exprs,
            tile_var,
            query_var,
            kept_tiles,
            kept_from,
            first_tile,
            branch: true,
        });
    }
    Ok((
        super::Change::from_changed(!out.is_empty()),
        CausalTiles(out),
    ))
}

/// The first key tile whose every key every query of tile `q` sees past the band's lower side
/// `j - i >= lower`: `ceilDiv(bq q + bq - 1 + lower, bk)` (0 or less: every tile).
pub fn first_kept_tile(q: Val, bq: i64, bk: i64, lower: &Offset) -> Val {
    let last_query = lower.clone().plus(bq - 1).added_to(scaled(bq, q));
    Val::ceil_div(last_query, Val::Int(bk))
}

/// How many key tiles of `bk` keys query tile `q` (of `bq` queries) computes under the band's
/// upper side `j - i <= upper`: through the last one holding a key its last query may see, at
/// least one (module doc). For `upper` 0 or -1 `ceilDiv(bq (q + 1), bk)` (the -1 left out),
/// folded when `bk` divides `bq`; else `max(1, ceilDiv(bq (q + 1) + upper, bk))`.
pub fn visible_tiles_under(q: Val, bq: i64, bk: i64, upper: &Offset) -> Val {
    if matches!(upper.constant(), Some(0 | -1)) {
        return visible_tiles(q, bq, bk);
    }
    let next = Val::mul(Val::Int(bq), Val::add(q, Val::Int(1)));
    let tiles = Val::ceil_div(upper.added_to(next), Val::Int(bk));
    // max(1, tiles) as -min(-1, -tiles).
    Val::sub(
        Val::Int(0),
        Val::min(Val::Int(-1), Val::sub(Val::Int(0), tiles)),
    )
}

/// [`visible_tiles_under`] for the causal mask (`upper` 0 or -1).
pub fn visible_tiles(q: Val, bq: i64, bk: i64) -> Val {
    let next = Val::add(q, Val::Int(1));
    if bq % bk == 0 {
        scaled(bq / bk, next)
    } else {
        Val::ceil_div(Val::mul(Val::Int(bq), next), Val::Int(bk))
    }
}

/// [`kept_tiles`] for the band's upper side `j - i <= upper`: `(bq q + upper + 1) / bk`
/// (truncated: a negative count keeps no tile, as 0 does).
pub fn kept_tiles_under(q: Val, bq: i64, bk: i64, upper: &Offset) -> Val {
    match upper.constant() {
        Some(offset) => kept_tiles(q, bq, bk, offset),
        None => Val::div(upper.clone().plus(1).added_to(scaled(bq, q)), Val::Int(bk)),
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

/// The first key tile some query of tile `q` sees above the band's lower side `j - i >=
/// lower`: the one holding key `bq q + lower`, `max(0, (bq q + lower) / bk)`.
pub fn first_seen_tile(q: Val, bq: i64, bk: i64, lower: &Offset) -> Val {
    let first = Val::div(lower.added_to(scaled(bq, q)), Val::Int(bk));
    // max(0, first) as -min(0, -first).
    Val::sub(
        Val::Int(0),
        Val::min(Val::Int(0), Val::sub(Val::Int(0), first)),
    )
}

/// Starts the tile loop `l` at tile `first`, counting its iterations from 0 in `counter`: its
/// body names the tile index as before with a `Let` (index arithmetic, the mask and the tile
/// classification read it unchanged), and its mbarrier waits take their phase from the count,
/// as the TMA pass wrote them for a loop from 0.
fn start_at(l: &mut crate::kir::Loop, first: &Val, counter: &str) {
    let count = Val::Var(counter.to_string());
    let tile = l.var.clone();
    crate::kir::for_each_stmt_mut(&mut l.body, &mut |s| {
        if let Stmt::MbarWait { parity, .. } = s {
            *parity = parity.subst(&tile, &count);
        }
        crate::kir::Flow::Descend
    });
    // At least one tile, as the upper bound keeps (a row with no key runs one masked tile and
    // ends as 0 / 0, never reading an accumulator no product started): max(1, extent - first).
    let remaining = Val::sub(l.extent.clone(), first.clone());
    l.extent = Val::sub(
        Val::Int(0),
        Val::min(Val::Int(-1), Val::sub(Val::Int(0), remaining)),
    );
    let tile = std::mem::replace(&mut l.var, counter.to_string());
    l.body.insert(
        0,
        Stmt::Let {
            var: tile,
            value: Val::add(count, first.clone()),
            broadcast: false,
        },
    );
}

/// Starts every loop over `c`'s key tiles in `body` at its first seen tile ([`start_at`]).
fn start_in(body: &mut [Stmt], c: &ClassifiedLoop, first: &Val, counter: &str) {
    crate::kir::for_each_stmt_mut(body, &mut |s| match s {
        Stmt::Loop(l) if l.var == c.tile_var => {
            start_at(l, first, counter);
            Flow::Skip
        }
        _ => Flow::Descend,
    });
}

/// Bounds every loop of key `tile_key` under a loop over the mask's query class (a walk of the
/// kernel); `found` is the query loop's key, variable and tile (the first one met; a second,
/// different one leaves its tile loops unbounded).
struct BoundTiles<'s, 'c> {
    cx: &'s Ctx<'c>,
    tile_key: LoopKey,
    mask: &'s CausalMask,
    bk: i64,
    /// The loops around the statement walked, outermost first.
    enclosing: Vec<(LoopKey, String)>,
    found: Option<(LoopKey, String, i64)>,
}

impl VisitorMut for BoundTiles<'_, '_> {
    type Error = Infallible;

    fn stmt(&mut self, s: &mut Stmt, _at: usize) -> Result<Flow, Infallible> {
        let Stmt::Loop(l) = s else {
            return Ok(Flow::Descend);
        };
        if l.key != self.tile_key {
            return Ok(Flow::Descend);
        }
        let query =
            self.enclosing
                .iter()
                .rev()
                .find_map(|(key, var)| match tiled_class(self.cx, *key) {
                    Some((c, bq)) if c == self.mask.query => Some((*key, var.clone(), bq)),
                    _ => None,
                });
        if let Some((key, var, bq)) = query {
            if self
                .found
                .as_ref()
                .is_none_or(|(_, v, b)| *v == var && *b == bq)
            {
                let last =
                    visible_tiles_under(Val::Var(var.clone()), bq, self.bk, &self.mask.upper);
                l.extent = Val::min(l.extent.clone(), last);
                self.found = Some((key, var, bq));
            }
        }
        Ok(Flow::Skip)
    }

    fn enter(&mut self, s: &Stmt, _body: usize) -> Result<Flow, Infallible> {
        if let Stmt::Loop(l) = s {
            self.enclosing.push((l.key, l.var.clone()));
        }
        Ok(Flow::Descend)
    }

    fn leave(&mut self, s: &mut Stmt, _body: usize) -> Result<(), Infallible> {
        if let Stmt::Loop(_) = s {
            self.enclosing.pop();
        }
        Ok(())
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
        // The overlapped loop first: its kept tiles in a loop of their own, without the mask.
        let mut taken = Vec::new();
        crate::kir::for_each_stmt(&k.body, &mut |s| match s {
            Stmt::Loop(l) => taken.push(l.var.clone()),
            Stmt::Let { var, .. } => taken.push(var.clone()),
            _ => {}
        });
        changed |= two_loops::split_overlapped(&mut k.body, c, &buffers, &taken);
        if c.branch {
            let mut walk = SplitTiles {
                c,
                condition_buffers: &buffers,
                in_tile: vec![false],
                changed: false,
            };
            let Ok(()) = visit_mut(&mut k.body, &mut walk);
            changed |= walk.changed;
        }
        if let Some((first, counter)) = &c.first_tile {
            start_in(&mut k.body, c, first, counter);
            changed = true;
        }
    }
    super::Change::from_changed(changed)
}

/// The walk of [`split`] for one classified loop: the first block (outer ones first) that holds
/// the statement computing the masked scores is split ([`split_in`]); `in_tile` says, per
/// block entered, whether it is inside the tile loop (or after the `let` that names its index).
struct SplitTiles<'s> {
    c: &'s ClassifiedLoop,
    condition_buffers: &'s [BufferId],
    in_tile: Vec<bool>,
    changed: bool,
}

impl VisitorMut for SplitTiles<'_> {
    type Error = Infallible;

    fn block_start(&mut self, body: &mut Vec<Stmt>) -> Result<Flow, Infallible> {
        let in_tile = *self.in_tile.last().expect("the kernel's entry");
        Ok(
            match split_in(body, self.c, self.condition_buffers, in_tile) {
                Split::Done => {
                    self.changed = true;
                    Flow::Skip
                }
                Split::InFlight => Flow::Skip,
                Split::NotHere => Flow::Descend,
            },
        )
    }

    fn stmt(&mut self, s: &mut Stmt, _at: usize) -> Result<Flow, Infallible> {
        if let Stmt::Let { var, .. } = s {
            // The circular buffer's epilogue names the tile index with a `Let`.
            if *var == self.c.tile_var {
                *self.in_tile.last_mut().expect("the kernel's entry") = true;
            }
        }
        Ok(Flow::Descend)
    }

    fn enter(&mut self, s: &Stmt, _body: usize) -> Result<Flow, Infallible> {
        let outer = *self.in_tile.last().expect("the kernel's entry");
        let inner = outer || matches!(s, Stmt::Loop(l) if l.var == self.c.tile_var);
        self.in_tile.push(inner);
        Ok(Flow::Descend)
    }

    fn leave(&mut self, _s: &mut Stmt, _body: usize) -> Result<(), Infallible> {
        self.in_tile.pop();
        Ok(())
    }
}

/// What [`split_in`] did with a block.
enum Split {
    /// The mask's statements became one `If`.
    Done,
    /// The select is here, but a tensor-core product is in flight over it: left unsplit, and
    /// the walk does not go into it either.
    InFlight,
    /// The select is not among the block's statements (the walk goes on into them).
    NotHere,
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
) -> Split {
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
    // (At the select, where the `If` goes: a declaration of the mask's, such as a cache of a
    // document's ids, may come before the wait.)
    if let Some(at) = select_at {
        let in_flight = body[..at].iter().rev().find_map(|s| match s {
            Stmt::WgmmaWait(n) => Some(*n > 0),
            _ => None,
        });
        if in_flight == Some(true) {
            return Split::InFlight;
        }
    }
    let Some(select_at) = select_at else {
        // Not here: inside the statements that hold the select among other work (the walk
        // goes on into them).
        return Split::NotHere;
    };
    let mut unmasked = body[select_at].clone();
    unmask(&mut unmasked, &c.mask, condition_buffers);
    let masked: Vec<Stmt> = mask_stmts.iter().map(|&k| body[k].clone()).collect();
    let tile = || Val::Var(c.tile_var.clone());
    let mut cond = Val::lt(tile(), c.kept_tiles.clone());
    if let Some(from) = &c.kept_from {
        // from <= t as from - 1 < t.
        cond = Val::and(cond, Val::lt(Val::sub(from.clone(), Val::Int(1)), tile()));
    }
    let split = Stmt::If {
        cond,
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
    Split::Done
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
fn unmask(s: &mut Stmt, mask: &MaskExprs, condition_buffers: &[BufferId]) {
    let Ok(()) = visit_stmt_mut(
        s,
        0,
        &mut Unmask {
            mask,
            condition_buffers,
        },
    );
}

/// The walk of [`unmask`].
struct Unmask<'s> {
    mask: &'s MaskExprs,
    condition_buffers: &'s [BufferId],
}

impl VisitorMut for Unmask<'_> {
    type Error = Infallible;

    fn stmt(&mut self, s: &mut Stmt, _at: usize) -> Result<Flow, Infallible> {
        if let Stmt::Compute(c) = s {
            if c.expr == self.mask.select {
                if let Data::Ternary(TernaryOp::Where, _, operands) = &c.value {
                    let [_, kept, _] = &**operands;
                    c.value = kept.clone();
                }
            }
        }
        Ok(Flow::Descend)
    }

    fn block(&mut self, body: &mut Vec<Stmt>) -> Result<(), Infallible> {
        // The predicate's conditions around the condition's computations go with them.
        body.retain(|t| match t {
            Stmt::Compute(c) => !self.mask.condition.contains(&c.expr),
            Stmt::Alloc(b) => !self.condition_buffers.contains(b),
            Stmt::If { then, els, .. } => !(then.is_empty() && els.is_empty()),
            _ => true,
        });
        Ok(())
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

    /// The band's classification against every (query, key) pair: the upper side given as
    /// sizes (`T - S`, bottom-right aligned, at S <= T and S > T) or as other integers, the
    /// lower side of a sliding window. Computed tiles hold every key some query sees (none
    /// past them), and the unmasked ones only keys every query sees.
    #[test]
    fn band_tile_counts_match_the_mask_pair_by_pair() {
        let sizes_offset = || Offset {
            constant: 0,
            sizes: vec![
                (1, SizeExpr::Sym("T".into())),
                (-1, SizeExpr::Sym("S".into())),
            ],
        };
        for (bq, bk) in [(64, 64), (64, 32), (128, 64), (48, 64)] {
            for (s, t) in [(100, 300), (300, 300), (300, 100), (64, 1037)] {
                for (upper, lower) in [
                    (sizes_offset(), None),
                    (
                        Offset {
                            constant: 5,
                            sizes: vec![],
                        },
                        None,
                    ),
                    (
                        Offset::default(),
                        Some(Offset {
                            constant: 1 - 100,
                            sizes: vec![],
                        }),
                    ),
                    (
                        Offset::default(),
                        Some(Offset {
                            constant: -1,
                            sizes: vec![],
                        }),
                    ),
                    (sizes_offset(), Some(sizes_offset().plus(-63))),
                ] {
                    let eval = |v: &Val, q: i64| {
                        v.eval_with(&|leaf| match leaf {
                            Val::Var(n) if n == "q" => Some(q),
                            Val::Size(n) if n == "T" => Some(t),
                            Val::Size(n) if n == "S" => Some(s),
                            _ => None,
                        })
                        .unwrap()
                    };
                    let c = |o: &Offset| eval(&o.added_to(Val::Int(0)), 0);
                    let q = || Val::Var("q".into());
                    let visible = visible_tiles_under(q(), bq, bk, &upper);
                    let kept = kept_tiles_under(q(), bq, bk, &upper);
                    let from = lower.as_ref().map(|l| first_kept_tile(q(), bq, bk, l));
                    let start = lower.as_ref().map(|l| first_seen_tile(q(), bq, bk, l));
                    let seen = |i: i64, j: i64| {
                        j - i <= c(&upper) && lower.as_ref().is_none_or(|l| j - i >= c(l))
                    };
                    for tq in 0..(s + bq - 1) / bq {
                        let n_hi = eval(&visible, tq);
                        let n_lo = eval(&kept, tq);
                        let first = from.as_ref().map_or(0, |f| eval(f, tq));
                        let start = start.as_ref().map_or(0, |f| eval(f, tq));
                        assert!(start >= 0, "{bq} {bk} {s} {t} {tq}");
                        assert!(n_hi >= 1, "{bq} {bk} {s} {t} {tq}");
                        let queries = bq * tq..bq * (tq + 1);
                        for tile in 0..n_hi + 3 {
                            let keys = bk * tile..bk * (tile + 1);
                            let any = queries.clone().any(|i| keys.clone().any(|j| seen(i, j)));
                            let all = queries.clone().all(|i| keys.clone().all(|j| seen(i, j)));
                            let at = format!("tile {tile} of query tile {tq} ({bq} x {bk}, S {s} T {t}, {upper:?} {lower:?})");
                            if tile >= n_hi || tile < start {
                                assert!(!any, "{at} is skipped but seen");
                            }
                            if tile < n_lo && tile >= first {
                                assert!(all, "{at} runs unmasked");
                            }
                        }
                    }
                }
            }
        }
    }
}
