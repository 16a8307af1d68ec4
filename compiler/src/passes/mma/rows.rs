//! Row fragments: register arrays over a tensor-core tile's M axis alone (a row statistic of
//! an accumulator, e.g. attention's running maximum and sum, and what is computed per row
//! from them). A thread holds rows `16 warp + lane / 4` and that plus 8 of the warp group's
//! 64 (`target::fragment_row_col`), so such an array is two registers per thread: register
//! `i` of an accumulator fragment is in row half `(i / 2) % 2`.
//!
//! - A nest over M alone becomes a loop over the thread's two rows.
//! - In a nest over M and N (a fragment loop), a row fragment is read and written at the row
//!   half of the register. A reduction over N into a row fragment (`m[M] = max(m[M], s[M,
//!   N])`) keeps its bounds guard (a key out of range adds nothing and never raises the
//!   maximum) and goes into a partial of the loop's columns, which the quad of four lanes that
//!   holds the row combines (`Stmt::QuadReduce`, two shuffles) before it is combined into the
//!   row's value: each column counts once however many loops (tiles) reduce into the row.

#[allow(unused_imports)]
use super::*;
use crate::fusion::{Op, ReduceOp};

/// The type reduction `e` combines in (its tensor's compute type).
fn k_dtype(f: &crate::fusion::Fusion, e: ExprId) -> DType {
    f.tensors[f.exprs[e].output].dtype.compute()
}

/// Rows of a tile each thread holds.
const ROWS_PER_THREAD: i64 = 2;

/// The row half (0 or 1) of accumulator register `i`: `(i / 2) % 2`.
pub(super) fn half_of_register(i: &Val) -> Val {
    Val::rem(Val::div(i.clone(), Val::Int(2)), Val::Int(2))
}

/// The row in the warp group's 64-row tile of the thread's row half `h`:
/// `16 warp + lane / 4 + 8 h`.
pub(super) fn row_of_half(h: &Val) -> Val {
    let tid = Val::Hw(ParallelType::TIDx);
    let warp = Val::div(tid.clone(), Val::Int(target::WARP_THREADS));
    let lane = Val::rem(tid, Val::Int(target::WARP_THREADS));
    Val::add(
        Val::add(Val::mul(Val::Int(16), warp), Val::div(lane, Val::Int(4))),
        Val::mul(Val::Int(8), h.clone()),
    )
}

/// One row reduction of a fragment loop: the row fragment, the reduction, the type it
/// combines in and its update's expression.
pub(super) struct RowReduction {
    buffer: BufferId,
    op: ReduceOp,
    dtype: DType,
    expr: ExprId,
}

/// The partials of a fragment loop's row reductions `reduced`: each update in `body` goes
/// into a fresh two-register partial (its columns of the thread's rows) instead of the row
/// fragment; returns what comes before the loop (the partials at the identity) and after it
/// (each partial combined across the quad, then into the row fragment). Exact for any
/// reduction and any number of loops over the columns (slices, or one per tile of a serial
/// loop): each column of a row is counted once.
pub(super) fn partials(
    cx: &mut Ctx,
    k: &mut Kernel,
    reduced: &[RowReduction],
    body: &mut [Stmt],
) -> (Vec<Stmt>, Vec<Stmt>) {
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for r in reduced {
        let part = BufferId::new(k.buffers.len());
        k.buffers.push(Buffer {
            name: cx.fresh_name(&format!("{}_part", k.buffers[r.buffer].name)),
            dtype: r.dtype,
            memory: MemoryType::Local,
            tensor: None,
            size: Some(Val::Int(ROWS_PER_THREAD)),
            smem_offset: None,
            global_shape: Vec::new(),
            is_input: false,
            l2: crate::fusion::L2Policy::Normal,
        });
        crate::kir::for_each_stmt_mut(body, &mut |s| {
            if let Stmt::Compute(c) = s {
                let mut rename = |a: &mut Access| {
                    if a.buffer == r.buffer {
                        a.buffer = part;
                    }
                };
                rename(&mut c.out);
                c.value.for_each_read_mut(&mut rename);
            }
            Flow::Descend
        });
        let at = |buffer: BufferId, h: i64| Access {
            buffer,
            index: Some(Val::Int(h)),
        };
        let compute = |h: i64, value: Data| {
            Stmt::Compute(Compute {
                expr: r.expr,
                out: at(part, h),
                value,
                role: ComputeRole::ReductionInit,
                vector: None,
            })
        };
        before.push(Stmt::Alloc(part));
        for h in 0..ROWS_PER_THREAD {
            before.push(compute(h, Data::Literal(r.op.identity(), r.dtype)));
        }
        for h in 0..ROWS_PER_THREAD {
            after.push(Stmt::QuadReduce {
                acc: at(part, h),
                op: r.op,
                dtype: r.dtype,
            });
        }
        for h in 0..ROWS_PER_THREAD {
            after.push(Stmt::Compute(Compute {
                expr: r.expr,
                out: at(r.buffer, h),
                value: Data::Binary(
                    r.op.combine(),
                    r.dtype,
                    Box::new(Data::Read(at(r.buffer, h))),
                    Box::new(Data::Read(at(part, h))),
                ),
                role: ComputeRole::ReductionUpdate,
                vector: None,
            }));
        }
    }
    (before, after)
}

impl Lower<'_> {
    /// Finds the row fragments (register arrays whose one axis is the M of a product's tile),
    /// sizes them to a thread's two rows and takes them out of the tile fragments.
    pub(super) fn find_rows(&mut self, cx: &Ctx, k: &mut Kernel) {
        let f = cx.fusion;
        let mut rows: Vec<BufferId> = Vec::new();
        for (&b, ids) in &cx.layout.alloc_ids {
            if k.buffers[b].memory != MemoryType::Local {
                continue;
            }
            let [id] = ids[..] else { continue };
            let on_m = f.ids[id].parallel == ParallelType::Mma
                && cx
                    .keys
                    .of_axis
                    .get(&id)
                    .is_some_and(|key| self.tiles.iter().any(|t| t.m == *key));
            if on_m {
                rows.push(b);
            }
        }
        for b in rows {
            k.buffers[b].size = Some(Val::Int(ROWS_PER_THREAD));
            self.fragments.remove(&b);
            self.rows.insert(b);
        }
    }

    /// The row fragments a fragment loop's body reduces into (over the tile's N).
    pub(super) fn row_reductions(&self, cx: &Ctx, body: &[Stmt]) -> Vec<RowReduction> {
        let f = cx.fusion;
        let mut out: Vec<RowReduction> = Vec::new();
        crate::kir::for_each_stmt(body, &mut |s| {
            if let Stmt::Compute(c) = s {
                if c.role != ComputeRole::ReductionUpdate || !self.rows.contains(&c.out.buffer) {
                    return;
                }
                if let Op::Reduce { op, .. } = f.exprs[c.expr].op {
                    if !out.iter().any(|r| r.buffer == c.out.buffer) {
                        out.push(RowReduction {
                            buffer: c.out.buffer,
                            op,
                            dtype: k_dtype(f, c.expr),
                            expr: c.expr,
                        });
                    }
                }
            }
        });
        out
    }

    /// Indexes every row-fragment access of `s` (a statement of a loop over M, and over N
    /// when `n` is given) by `half`; records a buffer not indexed by M alone in `bad`.
    pub(super) fn row_accesses(
        &self,
        s: &mut Stmt,
        m: &str,
        n: Option<&str>,
        half: &Val,
        bad: &mut Option<BufferId>,
    ) {
        let rows = &self.rows;
        let mut fix = |a: &mut Access| {
            if !rows.contains(&a.buffer) {
                return;
            }
            let idx = a.index.clone().unwrap_or(Val::Int(0));
            if stride(&idx, m) != Some(1) || n.is_some_and(|n| idx.mentions(n)) {
                *bad = Some(a.buffer);
            }
            a.index = Some(half.clone());
        };
        crate::kir::for_each_stmt_mut(std::slice::from_mut(s), &mut |s| {
            if let Stmt::Compute(c) = s {
                fix(&mut c.out);
                c.value.for_each_read_mut(&mut fix);
            }
            Flow::Descend
        });
    }

    /// A nest over a tile's M alone: a loop over the thread's two rows.
    pub(super) fn row_nest(
        &mut self,
        cx: &mut Ctx,
        k: &mut Kernel,
        m: &TileLoop,
        body: &[Stmt],
    ) -> Result<Vec<Stmt>, Diagnostic> {
        let (name, span) = nest_tensor(cx, body);
        let h = cx.fresh_name("h");
        let half = Val::Var(h.clone());
        let row = row_of_half(&half);
        let mut body = body.to_vec();
        let mut bad = None;
        // The first access to a tile fragment in the nest, and the tensor its statement computes.
        let mut tile_fragment = None;
        for s in &mut body {
            self.row_accesses(s, &m.var, None, &half, &mut bad);
            crate::kir::for_each_stmt(std::slice::from_ref(s), &mut |s| {
                if let Stmt::Compute(c) = s {
                    // A read first: the fragment the statement's tensor is computed from.
                    c.value.for_each_read(&mut |a: &Access| {
                        if self.fragments.contains(&a.buffer) {
                            tile_fragment = tile_fragment.or(Some((a.buffer, c.expr)));
                        }
                    });
                    if self.fragments.contains(&c.out.buffer) {
                        tile_fragment = tile_fragment.or(Some((c.out.buffer, c.expr)));
                    }
                }
            });
            s.map_vals(&mut |v| v.subst(&m.var, &row));
        }
        if let Some((b, reader)) = tile_fragment {
            let f = cx.fusion;
            let fragment = &k.buffers[b].name;
            let reader = f.exprs[reader].output;
            // A tensor over M alone inlined into another's loop over M, whose loop over N reads
            // the fragment: the loop cannot be both the row loop and a fragment loop.
            let message = if f.tensors[reader].name == name {
                format!("`{name}` reads the tensor-core fragment `{fragment}` in a loop over the tile's M axis alone; a tensor that reads the M x N fragment needs both its M and N axes as Mma axes")
            } else {
                let tensor = first_expr(&body).map(|e| f.exprs[e].output);
                format!(
                    "{} is computed inside a loop over the tile's M axis that also computes {}, which reads or writes the tensor-core fragment `{fragment}` (M x N) there: compute `{name}` in loops of its own (`{name}.inline_at(pos)` at the loops it shares with the tile, e.g. before the key-tile loop)",
                    tensor.map(|t| f.describe(t)).unwrap_or_else(|| format!("`{name}`")),
                    f.describe(reader)
                )
            };
            return Err(Diagnostic::new(message, span));
        }
        if let Some(b) = bad {
            return Err(Diagnostic::new(
                format!(
                    "internal: the row fragment `{}` is not indexed by the tile's M axis in `{name}`",
                    k.buffers[b].name
                ),
                span,
            ));
        }
        unguard_register_arithmetic(k, &mut body, &|_| false);
        Ok(vec![Stmt::Loop(Loop {
            key: m.key,
            var: h,
            extent: Val::Int(ROWS_PER_THREAD),
            parallel: ParallelType::Unroll,
            digits: Vec::new(),
            body,
        })])
    }
}
