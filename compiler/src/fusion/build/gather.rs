//! Indexing with indices loaded from data: `gather(x, index, axis=k)` (`take_along_axis`) and
//! `index_select(x, k, index)`.
//!
//! Takes the call's operands and axis; checks them (an integer index read from a fusion input
//! through copies and broadcasts, its rank, the extents it shares with `x`, an `x` the kernel
//! can read at moved indices) with errors at the operand; emits one [`Op::Gather`] whose output
//! axes join the index's classes (every axis for `gather`, axis `k` for `index_select`) and, off
//! axis `k`, `x`'s. Axis `k` of `x` stays a class of its own: `passes::indexing` reads `x` there
//! at the index's value (a `Val::IndexIn`, clamped into `x`'s extent), `x` recomputed from the
//! fusion inputs when it is computed, as for the views of `build/views.rs`.
//!
//! Why the index is a fusion input: its value becomes part of an address (the load of `x`), which
//! the kernel computes from global memory at the output's indices; a computed index would be a
//! register value of another loop nest. A cast or arithmetic on labels is written before the
//! kernel (or as another kernel's output).

use super::*;

impl Builder {
    /// The ops of `gather` (`select` false) or `index_select` on `x` and `index` along `axis`
    /// (as written, with where it is written).
    pub(super) fn gather(
        &mut self,
        select: bool,
        [(x, x_at), (index, index_at)]: [(TensorId, Span); 2],
        (axis, axis_at): (f64, Span),
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        let func = if select { "index_select" } else { "gather" };
        let name = |b: &Self, t: TensorId| b.f.tensors[t].name.clone();
        let rank = self.f.rank(x);
        if rank == 0 {
            return Err(Diagnostic::new(
                format!("`{func}`: `{}` is a scalar and has no axis", name(self, x)),
                Some(x_at),
            ));
        }
        let r = rank as f64;
        if axis.fract() != 0.0 || axis < -r || axis >= r {
            return Err(Diagnostic::new(
                format!(
                    "`{func}`: {axis} is not an axis of `{}` (rank {rank})",
                    name(self, x)
                ),
                Some(axis_at),
            ));
        }
        let axis = if axis < 0.0 { axis + r } else { axis } as usize;
        let dtype = self.f.tensors[index].dtype;
        if dtype.int_range().is_none() {
            return Err(Diagnostic::new(
                format!(
                    "`{func}`: the index `{}` is {dtype}; it holds integers (i32, i64, i8 or u8)",
                    name(self, index)
                ),
                Some(index_at),
            ));
        }
        if self.index_source(index).is_none() {
            return Err(Diagnostic::new(
                format!("`{func}` reads its index from a fusion input (its values become addresses the kernel loads from), and `{}` is computed here: make it an input (copies and broadcasts of an input are fine)", name(self, index)),
                Some(index_at),
            ));
        }
        let index_rank = self.f.rank(index);
        let want = if select { 1 } else { rank };
        if index_rank != want {
            let what = if select {
                "a 1-D index".to_string()
            } else {
                format!(
                    "an index of the result's shape, rank {rank} as `{}`",
                    name(self, x)
                )
            };
            return Err(Diagnostic::new(
                format!(
                    "`{func}` takes {what}, and `{}` has rank {index_rank}",
                    name(self, index)
                ),
                Some(index_at),
            ));
        }
        if !select {
            let (xs, is) = (self.f.logical(x), self.f.logical(index));
            for k in (0..rank).filter(|&k| k != axis) {
                let (ex, ei) = (self.class_extent_of(xs[k]), self.class_extent_of(is[k]));
                if ex != ei || self.f.ids[is[k]].kind == IterKind::Broadcast {
                    return Err(Diagnostic::new(
                        format!("`gather`: axis {k} of the index `{}` has extent {ei} and of `{}` {ex}; off the gathered axis they must be equal (torch allows a smaller index: slice x first)", name(self, index), name(self, x)),
                        Some(index_at),
                    ));
                }
            }
        }
        self.view_recomputable(func, x, x_at, &[axis])?;
        self.op(
            Op::Gather { axis, select },
            vec![Operand::Tensor(x), Operand::Tensor(index)],
            dest,
            Some(span),
        )
    }

    /// The fusion input an index is read from: `t` itself, or through copies (caches) and
    /// broadcasts; `None` when it is computed otherwise.
    pub(crate) fn index_source(&self, t: TensorId) -> Option<TensorId> {
        index_source(&self.f, t)
    }

    /// The root axes of a gather's output (see the module doc).
    pub(super) fn gather_root(
        &mut self,
        operands: &[TensorId],
        axis: usize,
        select: bool,
    ) -> Vec<IterId> {
        let (x, index) = (operands[0], operands[1]);
        let (xs, is) = (self.f.logical(x), self.f.logical(index));
        let mut root = Vec::with_capacity(xs.len());
        for (k, &xk) in xs.iter().enumerate() {
            let joined: Vec<IterId> = match (k == axis, select) {
                (true, true) => vec![is[0]],
                (true, false) => vec![is[k]],
                (false, true) => vec![xk],
                (false, false) => vec![xk, is[k]],
            };
            let first = joined[0];
            // A broadcast axis of the index along the gathered axis (one label per row) gives
            // an axis of extent 1 of the result, of no class but its own.
            if k == axis && self.f.ids[first].kind == IterKind::Broadcast {
                let one = Some(SizeExpr::Const(1));
                root.push(self.f.new_id(IterKind::Iteration, IterOrigin::Root, one));
                continue;
            }
            let extent = self.class_extent_of(first);
            let kind = self.f.ids[first].kind;
            let new = self.f.new_id(kind, IterOrigin::Root, Some(extent));
            for id in joined {
                self.f.union(new, id);
            }
            root.push(new);
        }
        root
    }
}

/// The fusion input an index tensor `t` is read from (see [`Builder::index_source`]).
pub fn index_source(f: &Fusion, t: TensorId) -> Option<TensorId> {
    let mut t = t;
    loop {
        let tensor = &f.tensors[t];
        let Some(def) = tensor.definition else {
            return (tensor.is_input && f.rank(t) > 0).then_some(t);
        };
        let expr = &f.exprs[def];
        match (&expr.op, &expr.inputs[..]) {
            (Op::Set | Op::Broadcast { .. }, [Operand::Tensor(p)]) => t = *p,
            _ => return None,
        }
    }
}

/// The fusion inputs read as indices of a `gather` or `index_select`, each with the extent of
/// the axis it indexes (the first such axis when it indexes several): a run draws such an input's
/// values inside `[0, extent)`, as a user's labels or token ids are (the kernel and the
/// reference clamp the others, torch raises on them).
pub fn index_bounds(f: &Fusion) -> Vec<(TensorId, SizeExpr)> {
    let mut out: Vec<(TensorId, SizeExpr)> = Vec::new();
    for e in &f.exprs {
        let (Op::Gather { axis, .. }, [Operand::Tensor(x), Operand::Tensor(index)]) =
            (&e.op, &e.inputs[..])
        else {
            continue;
        };
        let Some(source) = index_source(f, *index) else {
            continue;
        };
        let Some(&id) = f.logical(*x).get(*axis) else {
            continue;
        };
        if out.iter().all(|(t, _)| *t != source) {
            out.push((source, f.class_extent(f.class_of(id))));
        }
    }
    out
}
