//! Pass `reduction`: lowers each reduction into accumulate / combine / write.
//!
//! Requires: `loop_nest` (one `ReductionUpdate` compute per reduction, inside the reduction's
//! own loops). Guarantees: the update accumulates into a register accumulator `{t}_acc` that is
//! initialised to the identity right before the first reduction loop; when reduction axes are
//! bound to thread dims, a `BlockReduce` after the loops (outside every predicate, so every
//! thread of the block reaches it) leaves the result in every thread; a `ReductionWrite` then
//! stores it to the tensor. A reduction with axes bound to block dims (a grid reduction, checked
//! and built by [`super::grid`]) combines the blocks' values with a `GridReduce` before the
//! write, which only the last block to finish runs.
//! Returns the tensor of each accumulator ([`Accumulators`], for `online_softmax`,
//! `allocation` and `mma`).

use super::context::{Change, Ctx, LoopKey};
use crate::diag::Diagnostic;
use crate::fusion::{ExprId, IterId, IterKind, Op, ParallelType, TensorId};
use crate::kir::{
    Access, BufferId, Compute, ComputeRole, Data, Flow, Kernel, Loop, Stmt, Val, Visitor,
    VisitorMut,
};
use rustc_hash::FxHashMap;
use std::convert::Infallible;

/// The tensor each reduction accumulator buffer accumulates (the pass's result), so that
/// later passes find a statistic's accumulator and point errors about an accumulator at its
/// reduction. One accumulator per reduction.
#[derive(Clone, Debug, Default)]
pub struct Accumulators {
    tensor_of: FxHashMap<BufferId, TensorId>,
    of_tensor: FxHashMap<TensorId, BufferId>,
}

impl Accumulators {
    /// The reduction whose accumulator `b` is.
    pub fn tensor_of(&self, b: BufferId) -> Option<TensorId> {
        self.tensor_of.get(&b).copied()
    }

    /// The accumulator of reduction `t`.
    pub fn of_tensor(&self, t: TensorId) -> Option<BufferId> {
        self.of_tensor.get(&t).copied()
    }

    fn insert(&mut self, b: BufferId, t: TensorId) {
        self.tensor_of.insert(b, t);
        self.of_tensor.insert(t, b);
    }
}

/// One reduction's rewrite: the loop it hooks onto and what surrounds that loop.
struct Lowered {
    expr: ExprId,
    first_key: LoopKey,
    acc: BufferId,
    out_buf: BufferId,
    /// The allocation and the init, before the reduction loop; the block reduction and the
    /// write, after it.
    before: Vec<Stmt>,
    after: Vec<Stmt>,
}

pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<(Accumulators, Change), Diagnostic> {
    let f = cx.fusion;
    super::grid::check(cx)?;
    let grid = super::grid::reductions(f);
    let mut lowered: Vec<Lowered> = Vec::new();
    for e in f.expr_ids() {
        let grid_slot = grid.iter().position(|&g| g == e);
        lowered.extend(lower(cx, k, e, grid_slot));
    }
    if lowered.is_empty() {
        return Ok((Accumulators::default(), Change::Unchanged));
    }
    let mut accumulators = Accumulators::default();
    for l in &lowered {
        accumulators.insert(l.acc, f.exprs[l.expr].output);
    }
    // Each reduction hooks onto the outermost loop with its first reduction key that holds
    // its update (only loops hold statements at this stage). One walk finds every such loop (numbered in
    // preorder); a second rewrites the body around them.
    let of_expr: rustc_hash::FxHashMap<ExprId, usize> = lowered
        .iter()
        .enumerate()
        .map(|(i, l)| (l.expr, i))
        .collect();
    let mut find = FindHooks {
        lowered: &lowered,
        of_expr: &of_expr,
        path: Vec::new(),
        next_loop: 0,
        hooks: vec![None; lowered.len()],
    };
    crate::kir::visit(&k.body, &mut find);
    let hooks = find.hooks;
    if let Some(missing) = hooks.iter().position(|h| h.is_none()) {
        let tensor = &f.tensors[f.exprs[lowered[missing].expr].output];
        return Err(Diagnostic::new(
            format!(
                "internal: the reduction loop of `{}` was not found",
                tensor.name
            ),
            tensor.span,
        ));
    }
    // Per hooked loop, its reductions in program order (a later one's statements go nearer
    // the loop: each was placed around the loop as the previous ones left it).
    let mut at_loop: rustc_hash::FxHashMap<usize, Vec<usize>> = Default::default();
    for (i, h) in hooks.iter().enumerate() {
        at_loop.entry(h.expect("checked")).or_default().push(i);
    }
    let mut lowered: Vec<Option<Lowered>> = lowered.into_iter().map(Some).collect();
    let mut hook = Hook {
        lowered: &mut lowered,
        at_loop: &at_loop,
        next_loop: 0,
        open: Vec::new(),
    };
    let Ok(()) = crate::kir::visit_mut(&mut k.body, &mut hook);
    Ok((accumulators, Change::Changed))
}

/// The statements around reduction `e` (None when `e` is no reduction over a loop axis): its
/// accumulator (a new buffer of `k`) and its init before the reduction loops, the cross-thread
/// reduction and the write after them (`grid_slot`: its workspace slot when it is a grid
/// reduction).
fn lower(cx: &mut Ctx, k: &mut Kernel, e: ExprId, grid_slot: Option<usize>) -> Option<Lowered> {
    let f = cx.fusion;
    let expr = &f.exprs[e];
    let Op::Reduce { op, .. } = expr.op else {
        return None;
    };
    let t = expr.output;
    let tensor = &f.tensors[t];
    let first = tensor
        .loop_domain
        .iter()
        .position(|&id| f.ids[id].kind == IterKind::Reduction)?;
    let first_key = cx.keys.of_axis[&tensor.loop_domain[first]];
    let after = &tensor.loop_domain[first..];
    let serial_iter: Vec<IterId> = after
        .iter()
        .copied()
        .filter(|&id| f.ids[id].kind != IterKind::Reduction && !f.ids[id].parallel.is_hw())
        .collect();
    let mut dims = [false; 3];
    for &id in after {
        if f.ids[id].kind == IterKind::Reduction && f.ids[id].parallel.is_thread() {
            if let Some(d) = f.ids[id].parallel.dim() {
                dims[d] = true;
            }
        }
        // A grid reduction over a tensor-core fragment (the amax of a product's output in its
        // epilogue): the fragment's rows and columns are spread over the warp group's threads
        // along x, so the block's value combines them too.
        if grid_slot.is_some()
            && f.ids[id].kind == IterKind::Reduction
            && f.ids[id].parallel == ParallelType::Mma
        {
            dims[0] = true;
        }
    }
    let dtype = tensor.dtype.compute();
    let acc = cx.new_register(
        k,
        &format!("{}_acc", tensor.name),
        dtype,
        serial_iter.clone(),
    );
    let out_buf = cx.layout.tensor_buffer[&t];
    let loops_over = |cx: &Ctx, inner: Vec<Stmt>| accumulator_loops(cx, &serial_iter, inner);
    let acc_access = Access {
        buffer: acc,
        index: None,
    };
    let mut before = vec![Stmt::Alloc(acc)];
    before.extend(loops_over(
        cx,
        vec![Stmt::Compute(Compute {
            expr: e,
            out: acc_access.clone(),
            value: Data::Literal(op.identity(), dtype),
            role: ComputeRole::ReductionInit,
            vector: None,
        })],
    ));
    let mut tail = Vec::new();
    if dims.iter().any(|&d| d) {
        tail.extend(loops_over(
            cx,
            vec![Stmt::BlockReduce {
                acc: acc_access.clone(),
                op,
                dtype,
                dims,
            }],
        ));
    }
    let write = Stmt::Compute(Compute {
        expr: e,
        out: Access {
            buffer: out_buf,
            index: None,
        },
        value: Data::Read(acc_access.clone()),
        role: ComputeRole::ReductionWrite,
        vector: None,
    });
    // A grid reduction's tensor is a scalar (`grid::check`): no accumulator loops.
    tail.extend(match grid_slot {
        Some(slot) => {
            super::grid::tail(f, &tensor.name, acc_access.clone(), op, dtype, slot, write)
        }
        None => loops_over(cx, vec![write]),
    });
    Some(Lowered {
        expr: e,
        first_key,
        acc,
        out_buf,
        before,
        after: tail,
    })
}

/// `inner` inside loops over an accumulator's axes (`ids`, outermost first: the serial axes
/// of its tensor inside its reduction loops), vectorized ones unrolled.
pub(super) fn accumulator_loops(cx: &Ctx, ids: &[IterId], inner: Vec<Stmt>) -> Vec<Stmt> {
    let mut body = inner;
    for &id in ids.iter().rev() {
        let key = cx.keys.of_axis[&id];
        body = vec![Stmt::Loop(Loop {
            key,
            var: cx.keys.names[key].clone(),
            extent: Val::from_size(cx.key_extent(key)),
            parallel: match cx.fusion.ids[id].parallel {
                ParallelType::Vectorize => ParallelType::Unroll,
                p => p,
            },
            body,
            digits: Vec::new(),
        })];
    }
    body
}

/// Records, for each reduction of `lowered`, the preorder number of the outermost loop with its
/// first key that holds its update (a walk of the kernel).
struct FindHooks<'s> {
    lowered: &'s [Lowered],
    of_expr: &'s rustc_hash::FxHashMap<ExprId, usize>,
    /// The loops around the statement walked (key, number), outermost first.
    path: Vec<(LoopKey, usize)>,
    /// The next loop's number.
    next_loop: usize,
    hooks: Vec<Option<usize>>,
}

impl<'a> Visitor<'a> for FindHooks<'_> {
    fn stmt(&mut self, s: &'a Stmt, _at: usize) -> Flow {
        if let Stmt::Compute(c) = s {
            let i = self.of_expr.get(&c.expr).copied();
            if let Some(i) =
                i.filter(|&i| c.role == ComputeRole::ReductionUpdate && self.hooks[i].is_none())
            {
                self.hooks[i] = self
                    .path
                    .iter()
                    .find(|(key, _)| *key == self.lowered[i].first_key)
                    .map(|&(_, n)| n);
            }
        }
        Flow::Descend
    }

    fn enter(&mut self, s: &'a Stmt, _body: usize) -> Flow {
        // A loop's number, before those inside it (a loop has one body).
        if let Stmt::Loop(l) = s {
            self.path.push((l.key, self.next_loop));
            self.next_loop += 1;
        }
        Flow::Descend
    }

    fn leave(&mut self, s: &'a Stmt, _body: usize) {
        if let Stmt::Loop(_) = s {
            self.path.pop();
        }
    }
}

/// Redirects every hooked loop's reductions to their accumulators and puts their statements
/// around it (a walk of the kernel); loops are numbered in the preorder of [`FindHooks`].
struct Hook<'s> {
    lowered: &'s mut [Option<Lowered>],
    at_loop: &'s rustc_hash::FxHashMap<usize, Vec<usize>>,
    next_loop: usize,
    /// The numbers of the loops entered and not yet replaced, innermost last.
    open: Vec<usize>,
}

impl VisitorMut for Hook<'_> {
    type Error = Infallible;

    fn enter(&mut self, s: &Stmt, _body: usize) -> Result<Flow, Infallible> {
        if let Stmt::Loop(_) = s {
            self.open.push(self.next_loop);
            self.next_loop += 1;
        }
        Ok(Flow::Descend)
    }

    fn splice_after(&mut self, s: &mut Stmt, _at: usize) -> Result<Option<Vec<Stmt>>, Infallible> {
        let Stmt::Loop(l) = s else {
            return Ok(None);
        };
        let n = self.open.pop().expect("numbered on entering");
        let Some(here) = self.at_loop.get(&n) else {
            return Ok(None);
        };
        let mut out = Vec::new();
        let mut afters = Vec::new();
        for &i in here {
            let r = self.lowered[i].take().expect("one loop per reduction");
            redirect(&mut l.body, r.expr, r.acc, r.out_buf);
            out.extend(r.before);
            afters.push(r.after);
        }
        out.push(std::mem::replace(s, Stmt::Sync));
        for after in afters.into_iter().rev() {
            out.extend(after);
        }
        Ok(Some(out))
    }
}

fn redirect(body: &mut [Stmt], e: ExprId, acc: BufferId, out_buf: BufferId) {
    let mut found = false;
    crate::kir::for_each_stmt_mut(body, &mut |s| {
        if found {
            return Flow::Skip;
        }
        if let Stmt::Compute(c) = s {
            if c.expr == e && c.role == ComputeRole::ReductionUpdate {
                c.out = Access {
                    buffer: acc,
                    index: None,
                };
                if let Data::Binary(_, _, lhs, _) = &mut c.value {
                    if matches!(**lhs, Data::Read(Access { buffer, .. }) if buffer == out_buf) {
                        **lhs = Data::Read(Access {
                            buffer: acc,
                            index: None,
                        });
                    }
                }
                found = true;
            }
        }
        Flow::Descend
    });
}
