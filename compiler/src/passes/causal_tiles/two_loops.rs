//! FlashAttention-3's two key loops, for the overlapped loop of `online_softmax(o,
//! overlap=products)` (part of pass `mask_tiles`).
//!
//! In that loop a tensor-core product is in flight over the mask's statements, so they cannot
//! become one `If` on the tile (ptxas drains the product at the branch's join): today every
//! tile of the loop runs the mask. Here the loop itself is split instead: its iterations over
//! the wholly kept tiles run in a first loop whose body has no mask at all (the select takes
//! the scores as they are, the condition's statements and buffers are gone), the rest (the
//! diagonal tiles) in a second loop with the body as it was. Both loops end as the original's
//! iterations did (the product drained by `wait_group 0` at the end of each), so nothing is in
//! flight across the seam.
//!
//! Takes a loop whose body starts with `let t = v + c` (`t` the key tile, `v` the loop's own
//! variable, `c` an integer: the overlapped loop names its tile one ahead of its product's) and
//! holds the masked select after a `wait_group` that leaves a product in flight. Only for a
//! mask with no lower side (the tiles kept whole are the first `kept` ones).
//!
//! Guarantees: the two loops run the original's iterations in order, each once: the first
//! `v` in `[0, a)` with `a = max(0, min(extent, kept - c))` (so `t < kept`: every key of the
//! tile is seen by every query of the query tile, and the mask would keep every score), the
//! second `v = v' + a` for `v'` in `[0, extent - a)`, its body naming `v` with a `Let` first,
//! so the mbarrier phases and indices read `v` as before.

use super::{unmask, ClassifiedLoop};
use crate::kir::{any_stmt, rewrite_pre, BufferId, Loop, Step, Stmt, Val};

/// Splits every overlapped loop over `c`'s key tiles in `body` into its kept and its diagonal
/// part (module doc); `taken` holds the kernel's variable names (the second loop's variable is
/// a new one). Returns whether a loop was split.
pub(super) fn split_overlapped(
    body: &mut Vec<Stmt>,
    c: &ClassifiedLoop,
    condition_buffers: &[BufferId],
    taken: &[String],
) -> bool {
    if c.kept_from.is_some() {
        return false;
    }
    let mut changed = false;
    rewrite_pre(body, &mut |s| match s {
        Stmt::Loop(l) => match tile_shift(&l, c) {
            Some(shift) if overlaps_mask(&l, c) => {
                changed = true;
                Step::Keep(two_loops(l, shift, c, condition_buffers, taken))
            }
            _ => Step::Descend(vec![Stmt::Loop(l)]),
        },
        s => Step::Descend(vec![s]),
    });
    changed
}

/// The integer `c` when `l`'s body starts with `let t = v + c` (or `t = v`), `t` the key tile
/// and `v` the loop's variable.
fn tile_shift(l: &Loop, c: &ClassifiedLoop) -> Option<i64> {
    let Some(Stmt::Let { var, value, .. }) = l.body.first() else {
        return None;
    };
    if *var != c.tile_var || l.var == c.tile_var || !l.digits.is_empty() {
        return None;
    }
    let own = |v: &Val| matches!(v, Val::Var(n) if *n == l.var);
    match value {
        v if own(v) => Some(0),
        Val::Add(a, b) => match (&**a, &**b) {
            (v, Val::Int(n)) if own(v) => Some(*n),
            _ => None,
        },
        _ => None,
    }
}

/// Whether the masked select runs in `l` while a product is in flight (after a `wait_group`
/// that leaves one).
fn overlaps_mask(l: &Loop, c: &ClassifiedLoop) -> bool {
    let in_flight = any_stmt(&l.body, &mut |s| matches!(s, Stmt::WgmmaWait(n) if *n > 0));
    let selects = any_stmt(
        &l.body,
        &mut |s| matches!(s, Stmt::Compute(x) if x.expr == c.mask.select),
    );
    in_flight && selects
}

/// `l` as its kept loop, without the mask, and its diagonal loop, as it was.
fn two_loops(
    l: Loop,
    shift: i64,
    c: &ClassifiedLoop,
    condition_buffers: &[BufferId],
    taken: &[String],
) -> Vec<Stmt> {
    // a = max(0, min(extent, kept - shift)) as -min(0, -min(extent, kept - shift)).
    let kept_iterations = Val::sub(c.kept_tiles.clone(), Val::Int(shift));
    let a = Val::sub(
        Val::Int(0),
        Val::min(
            Val::Int(0),
            Val::sub(Val::Int(0), Val::min(l.extent.clone(), kept_iterations)),
        ),
    );
    let mut kept = l.clone();
    kept.extent = a.clone();
    // The mask's tensors feed the select only (`find`), so the whole body goes without them.
    for s in &mut kept.body {
        unmask(s, &c.mask, condition_buffers);
    }
    let mut counter = format!("{}_diag", l.var);
    while taken.contains(&counter) {
        counter.push('n');
    }
    let mut diagonal = l;
    diagonal.extent = Val::sub(diagonal.extent, a.clone());
    let var = std::mem::replace(&mut diagonal.var, counter.clone());
    diagonal.body.insert(
        0,
        Stmt::Let {
            var,
            value: Val::add(Val::Var(counter), a),
            broadcast: false,
        },
    );
    vec![Stmt::Loop(kept), Stmt::Loop(diagonal)]
}
