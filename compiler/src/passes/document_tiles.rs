//! Pass `document_tiles` (after `mask_bounds`): an online softmax whose scores carry a
//! document mask visits only the key tiles whose ids meet its query tile's.
//!
//! Takes the fusion's online softmaxes and the loop over key tiles of each (`loop_nest`'s
//! [`TileLoops`]). The analysis ([`find`]) recognises scores written as
//! `sm = where(same, x, -inf)` with `same = broadcast(ids_q, axis=..) == broadcast(ids_k,
//! axis=..)` (either side first): `ids_q` and `ids_k` integer fusion inputs whose last axis is a
//! query axis `S` and the summed key axis `T`, their other axes the same batch axes in the same
//! order (FlexAttention's document mask over packed sequences, `doc[b, q_idx] == doc[b, kv_idx]`),
//! alone or in a `logical_and` with one side of a band on `j - i` written as
//! [`super::causal_tiles`] reads it (the causal document mask: `same && j <= i`).
//! The mask's tensors must be read by nothing else and the masked scores must be the very scores
//! of the softmax (as [`super::causal_tiles`] asks). The key-tile loop must be the outer loop of
//! `T` split by a constant `Bk`, and the loops around it must bind the outer loop of `S` split
//! by a constant `Bq`, and each batch axis whole, to the grid (not a persistent one); the block
//! is a whole number of warps, known when the kernel is compiled. Anything else is left as it
//! was: every key tile runs, masked.
//!
//! Guarantees: the result is exactly the unlisted kernel's. A key id outside the range of the
//! query tile's ids equals none of them, so a key tile none of whose ids lies in that range is
//! masked whole for each of the tile's queries: it adds `-inf` to the running maximum and 0 to
//! the sum and to the product, and is not visited; nor is a tile with no pair `(i, j)` inside
//! the band. The others are visited in order, so each row's recurrence sees the same values in
//! the same order, less the tiles that add nothing. A query tile that meets no key tile still
//! runs tile 0, masked whole (a row with no key ends as `0 / 0`, as before). Any ids are right;
//! packed documents (non-decreasing ids) are where tiles drop: a query tile sees the key tiles
//! of the documents its queries belong to.
//!
//! Emits: the kernel's [`VisitedTiles`] (the list, which every thread of the CTA makes before
//! the body: `kir::VisitedTiles`), and [`VISITED_COUNT`] as the extent of the key-tile loops.
//! The index walks after this pass read the loop's tile from the list ([`Ctx::hw_env`]), so the
//! copies, the mask and the bounds follow it, while the later passes' pipeline slots and phases
//! count the loop's iterations. A launch constraint: at most [`VISITED_CAPACITY`] key tiles.

use super::causal_tiles::{Bound, Offset};
use super::context::{Ctx, LoopKey};
use super::online_softmax::TileLoops;
use crate::fusion::{
    BinaryOp, ExprId, Fusion, IterId, Op, Operand, ParallelType, TensorId, TernaryOp,
};
use crate::kir::{
    visit_mut, Flow, Kernel, Stmt, TileTest, Val, VisitedTiles, VisitorMut, VISITED_CAPACITY,
    VISITED_COUNT,
};
use crate::plan::{Constraint, SizeExpr};
use std::convert::Infallible;

/// A document mask on the scores of an online softmax ([`find`]).
#[derive(Clone, Debug, PartialEq)]
pub struct DocumentMask {
    /// The `where` that masks the scores.
    pub select: ExprId,
    /// The ids of the queries and of the keys (fusion inputs).
    pub query_ids: TensorId,
    pub key_ids: TensorId,
    /// The classes of the query axis, the key axis and the batch axes (in the ids' order).
    pub query: IterId,
    pub key: IterId,
    pub batch: Vec<IterId>,
    /// A side of a band on `j - i` the mask also asks for (`logical_and(same, j <= i)`).
    pub upper: Option<Offset>,
    pub lower: Option<Offset>,
}

/// Whether some online softmax's scores carry a document mask (and the grid is not
/// persistent): the pass's `applies`.
pub fn used(cx: &Ctx) -> bool {
    super::online_softmax::some_masked(cx, |f, scores, axis| find(f, scores, axis).is_some())
}

/// The document mask on `scores`, the scores of an online softmax over the class `key_axis`,
/// when they are written as the module doc says.
pub fn find(f: &Fusion, scores: TensorId, key_axis: IterId) -> Option<DocumentMask> {
    let def = |t: TensorId| f.tensors[t].definition;
    let select = def(scores)?;
    let (
        Op::Ternary(TernaryOp::Where),
        [Operand::Tensor(same), Operand::Tensor(_), Operand::Scalar(v)],
    ) = (&f.exprs[select].op, &f.exprs[select].inputs[..])
    else {
        return None;
    };
    if *v != f64::NEG_INFINITY || f.tensors[scores].is_output {
        return None;
    }
    if f.tensors[*same].is_output || f.uses(*same) != [select] {
        return None;
    }
    let key = f.class_of(key_axis);
    let cond = condition(f, *same)?;
    let band = match cond.other {
        None => None,
        Some((both, side)) => {
            let (bound, exprs, tensors) =
                super::causal_tiles::band_side(f, side, key, f.rank(scores))?;
            let of_mask = |u: ExprId| u == both || exprs.contains(&u);
            let compared = f.exprs[cond.ids.0].output;
            let only_mask = tensors
                .iter()
                .chain([&side, &compared])
                .all(|&t| !f.tensors[t].is_output && f.uses(t).iter().all(|&u| of_mask(u)));
            if !only_mask {
                return None;
            }
            Some(bound)
        }
    };
    let (_, a, b) = cond.ids;
    let classes =
        |t: TensorId| -> Vec<IterId> { f.logical(t).into_iter().map(|i| f.class_of(i)).collect() };
    let (ca, cb) = (classes(a), classes(b));
    let (query_ids, key_ids, cq, ck) = match (ca.last(), cb.last()) {
        (Some(_), Some(&lb)) if lb == key => (a, b, ca, cb),
        (Some(&la), Some(_)) if la == key => (b, a, cb, ca),
        _ => return None,
    };
    let query = *cq.last()?;
    let batch = cq[..cq.len() - 1].to_vec();
    if query == key || ck[..ck.len() - 1] != batch[..] || batch.contains(&key) {
        return None;
    }
    let (upper, lower) = match band {
        None => (None, None),
        Some(Bound::Upper(q, o)) if q == query => (Some(o), None),
        Some(Bound::Lower(q, o)) if q == query => (None, Some(o)),
        Some(_) => return None,
    };
    Some(DocumentMask {
        select,
        query_ids,
        key_ids,
        query,
        key,
        batch,
        upper,
        lower,
    })
}

/// Whether the mask's condition `keep` compares two inputs' ids, alone or in a `logical_and`
/// (what the automatic schedule's note says; [`find`] decides).
pub fn compares_ids(f: &Fusion, keep: TensorId) -> bool {
    condition(f, keep).is_some()
}

/// A document mask's condition: the comparison of ids ([`compared_ids`]) and, when it is one
/// side of a `logical_and`, that `logical_and` and its other side.
struct Condition {
    ids: (ExprId, TensorId, TensorId),
    other: Option<(ExprId, TensorId)>,
}

fn condition(f: &Fusion, keep: TensorId) -> Option<Condition> {
    if let Some(ids) = compared_ids(f, keep) {
        return Some(Condition { ids, other: None });
    }
    let both = f.tensors[keep].definition?;
    let (Op::Binary(BinaryOp::LogicalAnd), [Operand::Tensor(x), Operand::Tensor(y)]) =
        (&f.exprs[both].op, &f.exprs[both].inputs[..])
    else {
        return None;
    };
    let (ids, side) = match compared_ids(f, *x) {
        Some(ids) => (ids, *y),
        None => (compared_ids(f, *y)?, *x),
    };
    Some(Condition {
        ids,
        other: Some((both, side)),
    })
}

/// The comparison `same = broadcast(ids_a) == broadcast(ids_b)` of two integer fusion inputs
/// (read through the caches the schedule made of them), each broadcast read by the comparison
/// only: the comparison and the two inputs.
pub fn compared_ids(f: &Fusion, same: TensorId) -> Option<(ExprId, TensorId, TensorId)> {
    let def = |t: TensorId| f.tensors[t].definition;
    let compare = def(same)?;
    let (Op::Binary(BinaryOp::Eq), [Operand::Tensor(a), Operand::Tensor(b)]) =
        (&f.exprs[compare].op, &f.exprs[compare].inputs[..])
    else {
        return None;
    };
    // A side: the broadcast of an integer fusion input, read by the comparison only.
    let side = |t: TensorId| -> Option<TensorId> {
        let e = def(t)?;
        let (Op::Broadcast { .. }, [Operand::Tensor(read)]) =
            (&f.exprs[e].op, &f.exprs[e].inputs[..])
        else {
            return None;
        };
        // Through the caches the schedule made of the input (`doc_ks` beside K).
        let mut ids = *read;
        while let Some(c) = def(ids) {
            match (&f.exprs[c].op, &f.exprs[c].inputs[..]) {
                (Op::Set, [Operand::Tensor(x)]) => ids = *x,
                _ => return None,
            }
        }
        let ids_tensor = &f.tensors[ids];
        let only_compared = f.uses(t).iter().all(|&u| u == compare);
        (ids_tensor.is_input
            && ids_tensor.dtype.is_integer()
            && !f.tensors[t].is_output
            && only_compared)
            .then_some(ids)
    };
    Some((compare, side(*a)?, side(*b)?))
}

/// Pass `document_tiles`: the first document-masked online softmax whose loops fit (module doc)
/// visits the listed key tiles. Returns the launch constraint on the list's length.
pub fn run(
    cx: &Ctx,
    tile_loops: &TileLoops,
    k: &mut Kernel,
) -> Result<(super::Change, Vec<Constraint>), crate::diag::Diagnostic> {
    for (mask, tile_key, bk) in masked_tile_loops(cx, tile_loops, find, |m| m.key) {
        let Some(grid) = grid_loops(k, tile_key) else {
            continue;
        };
        let Some(visited) = list(cx, &mask, &grid, tile_key, bk) else {
            continue;
        };
        let Some(constraint) = install(
            k,
            tile_key,
            visited,
            cx.class_extent(mask.key),
            "document mask",
        ) else {
            continue;
        };
        return Ok((super::Change::Changed, vec![constraint]));
    }
    Ok((super::Change::Unchanged, Vec::new()))
}

/// The loop over key tiles of each online softmax whose scores carry a mask `find` reads, with
/// the mask and the tiles' size, where that loop is the outer loop of the mask's key axis
/// (`key`) split by a constant.
pub(super) fn masked_tile_loops<'a, M: 'a>(
    cx: &'a Ctx,
    tile_loops: &'a TileLoops,
    find: impl Fn(&Fusion, TensorId, IterId) -> Option<M> + 'a,
    key: impl Fn(&M) -> IterId + 'a,
) -> impl Iterator<Item = (M, LoopKey, i64)> + 'a {
    let f = cx.fusion;
    f.online_softmax
        .iter()
        .zip(&tile_loops.0)
        .filter_map(move |(r, &tile_key)| {
            let mask = find(f, r.pattern.scores, r.pattern.axis)?;
            let (class, bk) = super::causal_tiles::tiled_class(cx, tile_key)?;
            (class == key(&mask)).then_some((mask, tile_key, bk))
        })
}

/// The grid-bound loops around the first loop of key `tile_key`, outermost first: the list is
/// made once per CTA, so its query tile and batch row must be the CTA's.
pub(super) fn grid_loops(k: &mut Kernel, tile_key: LoopKey) -> Option<Vec<(LoopKey, String)>> {
    let mut walk = FindGrid {
        tile_key,
        enclosing: Vec::new(),
        grid: None,
    };
    let Ok(()) = visit_mut(&mut k.body, &mut walk);
    walk.grid
}

/// Gives the kernel the list `visited` of the tile loop `tile_key`: the loops over it run
/// [`VISITED_COUNT`] iterations. Returns the launch constraint on the list's length (the
/// `mask` named in its reason), or `None`, the kernel unchanged, when its block is not a whole
/// number of warps known when it is compiled (the list is made with votes over whole warps).
pub(super) fn install(
    k: &mut Kernel,
    tile_key: LoopKey,
    visited: VisitedTiles,
    keys: SizeExpr,
    mask: &str,
) -> Option<Constraint> {
    let threads: Option<i64> = k.block.iter().map(|e| e.as_const()).product();
    if threads.is_none_or(|n| n % crate::target::WARP_THREADS != 0) {
        return None;
    }
    let count = Val::Var(VISITED_COUNT.to_string());
    crate::kir::for_each_stmt_mut(&mut k.body, &mut |s| {
        if let Stmt::Loop(l) = s {
            if l.key == tile_key {
                l.extent = count.clone();
            }
        }
        Flow::Descend
    });
    let bk = visited.key_tile;
    let tiles = SizeExpr::CeilDiv(Box::new(keys), Box::new(SizeExpr::Const(bk)));
    k.visited = Some(visited);
    Some(Constraint::AtMost {
        value: tiles,
        max: VISITED_CAPACITY,
        reason: format!(
            "the {mask}'s list of key tiles holds at most {VISITED_CAPACITY} tiles of {bk} keys"
        ),
    })
}

/// The list of a mask's key tiles for the grid-bound loops around its tile loop: the ids' rows
/// at the batch loops' indices, the query tile at the query loop's.
fn list(
    cx: &Ctx,
    mask: &DocumentMask,
    grid: &[(LoopKey, String)],
    tile_key: LoopKey,
    bk: i64,
) -> Option<VisitedTiles> {
    let f = cx.fusion;
    let bound = |class: IterId, tile: i64| {
        grid.iter().find_map(|(key, var)| {
            (super::causal_tiles::tiled_class(cx, *key) == Some((class, tile)))
                .then(|| Val::Var(var.clone()))
        })
    };
    let (query_var, bq) = grid.iter().find_map(
        |(key, var)| match super::causal_tiles::tiled_class(cx, *key) {
            Some((c, bq)) if c == mask.query => Some((Val::Var(var.clone()), bq)),
            _ => None,
        },
    )?;
    let extent = |c: IterId| Val::from_size(&cx.class_extent(c));
    // The batch row, row-major over the batch axes.
    let mut row: Option<Val> = None;
    for &c in &mask.batch {
        let index = bound(c, 1)?;
        row = Some(match row {
            None => index,
            Some(r) => Val::add(Val::mul(r, extent(c)), index),
        });
    }
    let (s, t) = (extent(mask.query), extent(mask.key));
    let (query_row, key_row) = match row {
        Some(r) => (Val::mul(r.clone(), s.clone()), Val::mul(r, t.clone())),
        None => (Val::Int(0), Val::Int(0)),
    };
    // (`specialize` makes the sizes in a band's offsets values, as every value of the kernel.)
    let offset = |o: &Offset| o.added_to(Val::Int(0));
    Some(VisitedTiles {
        var: cx.keys.names[tile_key].clone(),
        key_tile: bk,
        query_tile: bq,
        first_query: Val::mul(query_var, Val::Int(bq)),
        queries: s,
        keys: t,
        test: TileTest::Ids {
            query_ids: f.tensors[mask.query_ids].name.clone(),
            query_row,
            key_ids: f.tensors[mask.key_ids].name.clone(),
            key_row,
            upper: mask.upper.as_ref().map(offset),
            lower: mask.lower.as_ref().map(offset),
        },
        smem_offset: None,
    })
}

/// The grid-bound loops around the first loop of key `tile_key` (a walk of the kernel): the
/// list is made once per CTA, so its query tile and batch row must be the CTA's.
struct FindGrid {
    tile_key: LoopKey,
    /// The loops around the statement walked, outermost first, and whether each is grid-bound.
    enclosing: Vec<(LoopKey, String, bool)>,
    grid: Option<Vec<(LoopKey, String)>>,
}

impl VisitorMut for FindGrid {
    type Error = Infallible;

    fn stmt(&mut self, s: &mut Stmt, _at: usize) -> Result<Flow, Infallible> {
        let Stmt::Loop(l) = s else {
            return Ok(Flow::Descend);
        };
        if l.key != self.tile_key || self.grid.is_some() {
            return Ok(Flow::Descend);
        }
        self.grid = Some(
            self.enclosing
                .iter()
                .filter(|(_, _, grid)| *grid)
                .map(|(key, var, _)| (*key, var.clone()))
                .collect(),
        );
        Ok(Flow::Skip)
    }

    fn enter(&mut self, s: &Stmt, _body: usize) -> Result<Flow, Infallible> {
        if let Stmt::Loop(l) = s {
            let grid = matches!(
                l.parallel,
                ParallelType::BIDx | ParallelType::BIDy | ParallelType::BIDz
            );
            self.enclosing.push((l.key, l.var.clone(), grid));
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
