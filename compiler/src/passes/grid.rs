//! Grid reductions: a reduction whose reduced axes are bound to `blockIdx` (every block
//! reduces its part, then the parts are combined across the grid), for the `reduction` pass.
//!
//! The design is nvFuser's deterministic two-stage grid reduction rather than atomics into a
//! pre-initialised output: each block's value goes to its own slot of a partial array in a
//! global workspace, thread 0 takes a ticket from the array's counter after a fence, and the
//! block that takes the last ticket combines every slot in block order and writes the result
//! ([`crate::kir::GridReduce`]). So the result is the same bits at every launch (an `atomicAdd`
//! of floats is not), `max`/`min` combine exactly as a block reduction does, the output may
//! have any dtype (the write is an ordinary store, cast as any reduction's), and the output
//! needs no identity fill before each launch: the last block resets the counter, so the
//! workspace, zeroed once when allocated ([`crate::plan::TensorRole::Workspace`]), is zero
//! again for the next launch (a re-launched bench needs nothing between launches). The cost is
//! one extra pass of the last block over the partials (a few microseconds at most) and a bound
//! on the grid ([`crate::target::GRID_REDUCTION_MAX_BLOCKS`], a launch constraint).
//!
//! A persistent kernel's CTA walks several tiles: since every block dim is bound to a reduction
//! axis, the tile loop (inside the grid-bound bindings) is inside the reduction's loops, so the
//! CTA's value spans all of its tiles and each CTA still takes one slot. In a warp-specialized
//! kernel only the consumer threads take part (the producer warps leave after their copies):
//! the block's value is reduced over every consumer thread and the grid's combined with
//! barriers over them alone (`hf_consumers_reduce`, `hf_grid_reduce_consumers` in
//! `backend/codegen/grid.rs`), so every thread dim the kernel uses must be reduced (an Mma axis
//! counts as x, the warp group's threads that hold the fragment). This is how the amax of a
//! tensor-core product's output is reduced in the product's kernel
//! (examples/matmul/step19_fp8_out_amax.hf).
//!
//! Takes the scheduled fusion ([`check`] runs before `reduction` lowers anything); guarantees
//! that a grid reduction reduces every axis of its tensor (a scalar), that every block of the
//! grid takes part (each block dim of the kernel is bound to one of its reduction axes), and
//! that nothing in the kernel reads the result (it is complete only in the last block): a
//! fusion that reads it (`x / sum(x)`) is split into kernels by `segment`. Emits, after the
//! block reduction, a [`Stmt::GridReduce`] and the write under its `last` flag ([`tail`]).
//!
//! **Split-K** (a tensor-core product's sum whose K has a part bound to a block dim, e.g.
//! `s.split(4, 1024)` then `s.parallelize(2, BIDz)`, [`split_k_products`]) is the same scheme
//! per output tile instead of per grid: the blocks that differ only along that dim (a tile's
//! chunks of K) each accumulate their chunk in the tensor cores' f32 fragment (for block-scaled
//! FP8, the promoted accumulator), store it in their chunk's slot of the tile's partials and
//! take a ticket from the tile's counter; the last block of the tile sums the slots in chunk
//! order into its fragment (so the bits do not depend on which block finished last), resets
//! the counter and alone runs the epilogue (casts, bias, scales, the stores). [`check`] takes
//! one such product per kernel, its K's outer part (the first reduction axis) on one block dim,
//! no `persistent(...)` (stream-K's or not: a CTA would walk several tiles) and no other grid
//! reduction (the other blocks of a tile skip the epilogue it would reduce). [`split_k`] runs
//! at the end of the `mma` pass, when the fragment and its epilogue are final: it puts a
//! [`Stmt::GridReduce`] with `split_k` set after the statements that finish the sum (the k
//! loop, the wgmma waits) and the epilogue (from the first statement after them that touches
//! the fragment to the end of its block) under the flag. The workspace (a counter per tile,
//! then splits x the fragment's registers x its threads floats per tile) and the memory
//! ordering (fence, ticket, fence, loads from L2) are `backend/codegen/grid.rs`'s.

use super::context::Ctx;
use crate::diag::Diagnostic;
use crate::fusion::{ExprId, Fusion, IterKind, Op, ParallelType, ReduceOp, TensorId};
use crate::kir::{Access, BufferId, GridReduce, Kernel, Stmt, Val};

/// The block dims bound to reduction axes of `t`'s loop domain (x, y, z).
pub fn block_dims(f: &Fusion, t: TensorId) -> [bool; 3] {
    let mut dims = [false; 3];
    for &id in &f.tensors[t].loop_domain {
        let ax = &f.ids[id];
        if ax.kind == IterKind::Reduction && ax.parallel.is_block() {
            if let Some(d) = ax.parallel.dim() {
                dims[d] = true;
            }
        }
    }
    dims
}

/// Whether `t` is a tensor-core product's sum: it keeps a tensor-core axis (`Mma`: M or N)
/// and reduces one (K). (A reduction of a product's output, an amax, reduces all of them.)
fn is_product(f: &Fusion, t: TensorId) -> bool {
    let mma = |kind: bool| {
        f.tensors[t].loop_domain.iter().any(|&id| {
            f.ids[id].parallel == ParallelType::Mma
                && (f.ids[id].kind == IterKind::Reduction) == kind
        })
    };
    mma(true) && mma(false)
}

/// The grid reductions of `f` in expression order: each one's slot of the workspace is its
/// position here. (A product's sum with a block-bound K is split-K, [`split_k_products`].)
pub fn reductions(f: &Fusion) -> Vec<ExprId> {
    f.expr_ids()
        .filter(|&e| {
            matches!(f.exprs[e].op, Op::Reduce { .. })
                && block_dims(f, f.exprs[e].output).iter().any(|&d| d)
                && !is_product(f, f.exprs[e].output)
        })
        .collect()
}

/// The tensor-core products of `f` whose K is split across blocks (split-K): sums with an
/// `Mma` axis and a reduction axis bound to a block dim.
pub fn split_k_products(f: &Fusion) -> Vec<TensorId> {
    f.expr_ids()
        .filter(|&e| matches!(f.exprs[e].op, Op::Reduce { .. }))
        .map(|e| f.exprs[e].output)
        .filter(|&t| is_product(f, t) && block_dims(f, t).iter().any(|&d| d))
        .collect()
}

/// Checks the split-K product of the kernel, if any (see the module doc).
fn check_split_k(f: &Fusion) -> Result<(), Diagnostic> {
    let Some(&t) = split_k_products(f).first() else {
        return Ok(());
    };
    let tensor = &f.tensors[t];
    let name = &tensor.name;
    let err = |msg: String| Err(Diagnostic::new(msg, tensor.span));
    let intro = format!("`{name}`'s K is split across blocks (split-K: the last block of each output tile sums the tile's partials and runs the epilogue)");
    let products: Vec<&str> = f
        .expr_ids()
        .filter(|&e| matches!(f.exprs[e].op, Op::Reduce { .. }))
        .map(|e| f.exprs[e].output)
        .filter(|&u| is_product(f, u) && u != t)
        .map(|u| f.tensors[u].name.as_str())
        .collect();
    if let Some(other) = products.first() {
        return err(format!(
            "{intro}, and `{other}` is a second tensor-core product in the kernel: split-K takes a kernel with one product"
        ));
    }
    let dims = block_dims(f, t);
    let bound = dims.iter().filter(|&&d| d).count();
    if bound > 1 {
        return err(format!(
            "{intro}, but {bound} of its reduction axes are bound to block dims: bind one part of K (its outer split) to one block dim"
        ));
    }
    let first = tensor
        .loop_domain
        .iter()
        .find(|&&id| f.ids[id].kind == IterKind::Reduction);
    if first.is_some_and(|&id| !f.ids[id].parallel.is_block()) {
        return err(format!(
            "{intro}, but the reduction axis bound to a block dim is not its first: bind the outer part of K (the first of its splits, outside the k loop) to the block dim"
        ));
    }
    if let Some(p) = &f.persistent {
        let what = if p.stream_k {
            "`persistent(..., stream_k)` splits the tiles' k steps between CTAs another way"
        } else {
            "`persistent(...)` makes each CTA walk several tiles"
        };
        return err(format!(
            "{intro}, and {what}: use split-K or the persistent grid, not both"
        ));
    }
    if let Some(&g) = reductions(f).first() {
        let other = &f.tensors[f.exprs[g].output].name;
        return err(format!(
            "{intro}, and `{other}` is reduced across the grid in the same kernel, which every block must take part in while only a tile's last block runs the epilogue: compute `{other}` in a separate fusion, or leave K unsplit"
        ));
    }
    Ok(())
}

/// Checks every grid reduction of the kernel (see the module doc).
pub fn check(cx: &Ctx) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    check_split_k(f)?;
    let grid = reductions(f);
    if grid.is_empty() {
        return Ok(());
    }
    // Every block dim any tensor of the kernel is bound to.
    let mut used = [false; 3];
    for tensor in &f.tensors {
        for &id in &tensor.loop_domain {
            let p = f.ids[id].parallel;
            if p.is_block() {
                if let Some(d) = p.dim() {
                    used[d] = true;
                }
            }
        }
    }
    for e in grid {
        let t = f.exprs[e].output;
        let tensor = &f.tensors[t];
        let err = |msg: String| Err(Diagnostic::new(msg, tensor.span));
        let name = &tensor.name;
        let warp_specialized = f
            .tensors
            .iter()
            .any(|t| t.circular.is_some_and(|c| c.ws.is_some()));
        if super::tma::used(cx) && !warp_specialized {
            // A plain pipeline's copies are issued by one thread under the block's barriers,
            // which the reduction's barriers would interleave with; not built.
            return err(format!(
                "`{name}` is reduced across blocks in a kernel with TMA or bulk copies or circular buffers that is not warp-specialized; a grid reduction there is built for warp-specialized kernels only (the consumers reduce, the producer warps take no part)"
            ));
        }
        if warp_specialized {
            // The consumers reduce over all of their threads (`hf_consumers_reduce`): every
            // thread dim of the kernel must be reduced, or replicated values would be combined
            // again (a sum counted twice).
            let reduced = reduced_thread_dims(f, t);
            if let Some(d) = (0..3).find(|&d| thread_dims(f)[d] && !reduced[d]) {
                let p = [ParallelType::TIDx, ParallelType::TIDy, ParallelType::TIDz][d];
                return err(format!(
                    "`{name}` is reduced across blocks in a warp-specialized kernel, where the consumer threads reduce it all together, but none of its reduction axes is bound to {p}, which the kernel uses: bind one to it (propagate does)"
                ));
            }
        }
        let rank = f.rank(t);
        if rank != 0 {
            return err(format!(
                "`{name}` is reduced across blocks (a reduction axis bound to blockIdx), but it keeps {rank} axis{}: a grid reduction reduces every axis to one value (reduce the others within blocks, or in a separate fusion)",
                if rank == 1 { "" } else { "es" }
            ));
        }
        if !tensor.is_output {
            return err(format!(
                "`{name}` is reduced across blocks: a grid reduction's value is complete only in the last block to finish, so it must be an output (`output {name}`)"
            ));
        }
        if let Some(&reader) = cx.reads.uses[t].first() {
            return err(format!(
                "`{name}` is reduced across blocks, so its value is complete only in the last block to finish, and `{}` reads it in the same kernel: leave out the schedule (the automatic one splits the fusion into a grid reduction and a second kernel that reads it)",
                f.tensors[f.exprs[reader].output].name
            ));
        }
        let dims = block_dims(f, t);
        if let Some(d) = (0..3).find(|&d| used[d] && !dims[d]) {
            let p = [ParallelType::BIDx, ParallelType::BIDy, ParallelType::BIDz][d];
            return err(format!(
                "`{name}` is reduced across the blocks along its reduction axes, but the kernel's grid also spans {p}, which none of them is bound to: every block of the grid must take part in a grid reduction"
            ));
        }
        if f.tensors[t].dtype.compute().size_bytes() > 8 {
            return err(format!(
                "`{name}`: a grid reduction's partial values are at most 8 bytes each"
            ));
        }
    }
    Ok(())
}

/// The thread dims reduction `t`'s reduction axes are bound to (x, y, z); an axis of a
/// tensor-core fragment (`Mma`) counts as x, the warp group's threads that hold it.
fn reduced_thread_dims(f: &Fusion, t: TensorId) -> [bool; 3] {
    let mut dims = [false; 3];
    for &id in &f.tensors[t].loop_domain {
        let ax = &f.ids[id];
        if ax.kind != IterKind::Reduction {
            continue;
        }
        if ax.parallel == ParallelType::Mma {
            dims[0] = true;
        } else if let Some(d) = ax.parallel.dim().filter(|_| ax.parallel.is_thread()) {
            dims[d] = true;
        }
    }
    dims
}

/// The thread dims any tensor of `f` is bound to (x, y, z).
fn thread_dims(f: &Fusion) -> [bool; 3] {
    let mut dims = [false; 3];
    for tensor in &f.tensors {
        for &id in &tensor.loop_domain {
            if let Some(d) = f.ids[id]
                .parallel
                .dim()
                .filter(|_| f.ids[id].parallel.is_thread())
            {
                dims[d] = true;
            }
        }
    }
    dims
}

/// The statements after a grid reduction's block reduction: the [`Stmt::GridReduce`] of `acc`
/// (slot `slot`), then `write` (the reduction's store) by the first thread of the block that
/// finished last (the value is a scalar: one writer; `predicate` does not look inside the
/// condition).
pub fn tail(
    f: &Fusion,
    name: &str,
    acc: Access,
    op: ReduceOp,
    dtype: crate::dtype::DType,
    slot: usize,
    write: Stmt,
) -> Vec<Stmt> {
    let last = format!("{name}_last");
    let tids = [ParallelType::TIDx, ParallelType::TIDy, ParallelType::TIDz];
    let used = thread_dims(f);
    let first_thread = used
        .iter()
        .zip(tids)
        .filter(|(&used, _)| used)
        .map(|(_, p)| Val::eq(Val::Hw(p), Val::Int(0)));
    let cond = Val::all(std::iter::once(Val::Var(last.clone())).chain(first_thread));
    vec![
        Stmt::GridReduce(GridReduce {
            acc,
            op,
            dtype,
            slot,
            last: last.clone(),
            split_k: None,
        }),
        Stmt::If {
            cond,
            then: vec![write],
            els: Vec::new(),
        },
    ]
}

/// Split-K after the `mma` pass (see the module doc): the [`Stmt::GridReduce`] of the split
/// product's accumulator fragment after the statements that finish its sum, and the epilogue
/// after them under its flag. Nothing to do without a split-K product. `accumulator` gives a
/// reduction's accumulator buffer (`reduction::Accumulators::of_tensor`; a function, so that
/// this module, which `reduction` uses, does not use it back).
pub fn split_k(
    cx: &Ctx,
    accumulator: impl Fn(TensorId) -> Option<BufferId>,
    k: &mut Kernel,
) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let Some(&t) = split_k_products(f).first() else {
        return Ok(());
    };
    let tensor = &f.tensors[t];
    let internal = |what: &str| {
        Diagnostic::new(
            format!("internal: split-K of `{}`: {what}", tensor.name),
            tensor.span,
        )
    };
    let dims = block_dims(f, t);
    let dim = (0..3)
        .find(|&d| dims[d])
        .ok_or_else(|| internal("no block dim"))?;
    let acc = accumulator(t).ok_or_else(|| internal("no accumulator"))?;
    let last = format!("{}_last", tensor.name);
    let mut placed = false;
    crate::kir::for_each_block_mut(&mut k.body, &mut |block| {
        if placed
            || !block
                .iter()
                .any(|s| matches!(s, Stmt::Alloc(b) if *b == acc))
        {
            return;
        }
        // The sum is finished after the last statement with a wgmma or a block accumulator's
        // promotion (a read of another wgmma accumulator); the epilogue starts at the first
        // statement after it that touches the fragment.
        let wgmma_accs = wgmma_accumulators(block);
        let Some(summed) = block.iter().rposition(|s| {
            wgmma_accs.iter().any(|&b| b != acc && touches(s, b))
                || crate::kir::any_stmt(std::slice::from_ref(s), &mut |x| {
                    matches!(x, Stmt::Wgmma(_))
                })
        }) else {
            return;
        };
        let Some(epilogue) = (summed + 1..block.len()).find(|&i| touches(&block[i], acc)) else {
            return;
        };
        let mut rest = block.split_off(epilogue);
        // The output does not span the split dim, so `predicate` left its writes to the
        // blocks at 0 along it; here they are the tile's last block's, whichever that is.
        let split = [ParallelType::BIDx, ParallelType::BIDy, ParallelType::BIDz][dim];
        crate::kir::for_each_stmt_mut(&mut rest, &mut |s| {
            if let Stmt::If { cond, .. } = s {
                *cond = without_first_block_guard(cond, split);
            }
            crate::kir::Flow::Descend
        });
        block.push(Stmt::GridReduce(GridReduce {
            acc: Access {
                buffer: acc,
                index: Some(Val::Int(0)),
            },
            op: ReduceOp::Sum,
            dtype: crate::dtype::DType::F32,
            slot: 0,
            last: last.clone(),
            split_k: Some(dim),
        }));
        block.push(Stmt::If {
            cond: Val::Var(last.clone()),
            then: rest,
            els: Vec::new(),
        });
        placed = true;
    });
    if placed {
        Ok(())
    } else {
        Err(internal(
            "the epilogue of its accumulator fragment was not found",
        ))
    }
}

/// `cond` without its conjuncts `p == 0` (the guard that leaves a replicated write to the first
/// block along `p`).
fn without_first_block_guard(cond: &Val, p: ParallelType) -> Val {
    match cond {
        Val::And(a, b) => Val::and(
            without_first_block_guard(a, p),
            without_first_block_guard(b, p),
        ),
        Val::Eq(a, b) if **a == Val::Hw(p) && **b == Val::Int(0) => Val::True,
        _ => cond.clone(),
    }
}

/// The accumulators the wgmmas in `body` write.
fn wgmma_accumulators(body: &[Stmt]) -> Vec<BufferId> {
    let mut accs = Vec::new();
    crate::kir::for_each_stmt(body, &mut |s| {
        if let Stmt::Wgmma(w) = s {
            if !accs.contains(&w.acc.buffer) {
                accs.push(w.acc.buffer);
            }
        }
    });
    accs
}

/// Whether `s` (or a statement inside it) reads or writes buffer `b` in registers: a compute,
/// a wgmma's accumulator or register operand, an `stmatrix`'s source, a reduction's value.
fn touches(s: &Stmt, b: BufferId) -> bool {
    crate::kir::any_stmt(std::slice::from_ref(s), &mut |x| match x {
        Stmt::Compute(c) => {
            let mut read = c.out.buffer == b;
            c.value.for_each_read(&mut |a| read |= a.buffer == b);
            read
        }
        Stmt::Wgmma(w) => w.acc.buffer == b || w.a.tile.buffer == b,
        Stmt::StMatrix { src, .. } => src.buffer == b,
        Stmt::BlockReduce { acc, .. } | Stmt::QuadReduce { acc, .. } => acc.buffer == b,
        Stmt::GridReduce(g) => g.acc.buffer == b,
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    fn compile(src: &str) -> Result<crate::Compilation, String> {
        crate::compile(src, &crate::CompileOptions::default()).map_err(|d| d.to_string())
    }

    /// `t = sum(x)` (`x` of rank `rank`) with the schedule lines `schedule`.
    fn program(body: &str, schedule: &str) -> String {
        format!("fusion total {{\n  input x: f32[M, N]\n{body}\n}}\nschedule {{\n{schedule}\n}}\n")
    }

    const FLAT: &str = "  t.merge(0)\n  t.split(0, 256)\n  t.split(0, 4)\n  t.parallelize(0, BIDx)\n  t.parallelize(2, TIDx)\n  propagate(t)";

    #[test]
    fn a_reduction_over_blocks_is_a_grid_reduction_with_a_workspace() {
        let c = compile(&program("  t = max(x, axis=[0, 1])\n  output t", FLAT)).unwrap();
        let ir = &c.passes.last().unwrap().ir;
        assert!(ir.contains("block_max_over_x(t_acc[0])\n  grid_max(t_acc[0]) -> t_last, slot 0\n  if t_last && threadIdx.x == 0:"), "{ir}");
        assert!(
            c.cuda
                .contains("hf_grid_reduce<float>(t_acc[0], hf_max(), __int_as_float(0xff800000)"),
            "{}",
            c.cuda
        );
        let workspace = c.plan.params.iter().find_map(|p| match p {
            crate::plan::Param::Tensor {
                name,
                role: crate::plan::TensorRole::Workspace,
                shape,
                ..
            } => Some((name.clone(), shape.clone())),
            _ => None,
        });
        assert_eq!(
            workspace,
            Some((
                "hf_grid_workspace".to_string(),
                vec![crate::plan::SizeExpr::Const(
                    2 * (1 + crate::target::GRID_REDUCTION_MAX_BLOCKS)
                )]
            ))
        );
        // The scalar output is one element.
        assert!(c.plan.params.iter().any(|p| matches!(p, crate::plan::Param::Tensor { name, shape, .. } if name == "t" && shape.is_empty())));
        let sizes = [("M".to_string(), 65536), ("N".to_string(), 1024 + 1)].into();
        let concrete = c.plan.concretize(&sizes);
        assert!(concrete.is_err_and(|e| e.to_string().contains("at most 65536 blocks")));
    }

    #[test]
    fn a_grid_reduction_keeps_no_axis_and_nothing_reads_it() {
        let kept = compile(&program(
            "  t = sum(x, axis=1)\n  output t",
            "  t.parallelize(1, BIDy)",
        ))
        .unwrap_err();
        assert!(
            kept.contains("`t` is reduced across blocks") && kept.contains("keeps 1 axis"),
            "{kept}"
        );
        let read = compile(&program("  t = sum(x, axis=[0, 1])\n  y = x / broadcast(broadcast(t, axis=0), axis=0)\n  output y\n  output t", FLAT)).unwrap_err();
        assert!(read.contains("reads it in the same kernel"), "{read}");
        // A persistent CTA's value spans every tile it takes: the accumulator is set before
        // the tile loop (inside the grid-bound binding) and reduced after it.
        let persistent = compile(&program(
            "  t = sum(x, axis=[0, 1])\n  output t",
            &format!("{FLAT}\n  persistent(BIDx, 4)"),
        ))
        .unwrap();
        let cuda = &persistent.cuda;
        let (init, tile_loop, grid) = (
            cuda.find("t_acc[0] = 0.0f;").expect("the init"),
            cuda.find("for (index_t tile = 0;").expect("the tile loop"),
            cuda.find("hf_grid_reduce<float>(t_acc[0]")
                .expect("the grid reduction"),
        );
        assert!(init < tile_loop && tile_loop < grid, "{cuda}");
        let not_output = compile(&program(
            "  t = sum(x, axis=[0, 1])\n  u = t * 2.0\n  output u",
            FLAT,
        ))
        .unwrap_err();
        assert!(not_output.contains("must be an output"), "{not_output}");
    }

    #[test]
    fn a_bool_grid_reduction_combines_bools() {
        let schedule = FLAT.replace("t.", "a.").replace("(t)", "(a)");
        let c = compile(&program(
            "  a = any(x > 0.0, axis=[0, 1])\n  output a",
            &schedule,
        ))
        .unwrap();
        assert!(
            c.cuda
                .contains("hf_grid_reduce<bool>(a_acc[0], hf_any(), false,"),
            "{}",
            c.cuda
        );
    }

    #[test]
    fn two_grid_reductions_take_a_slot_each() {
        // The automatic schedule (the full-reduction scheduler's).
        let c = compile("fusion total {\n  input x: f32[M, N]\n  t = sum(x, axis=[0, 1])\n  m = max(abs(x), axis=[0, 1])\n  output t\n  output m\n}\n").unwrap();
        assert!(
            c.cuda.contains("hf_grid_workspace + 0)") && c.cuda.contains("hf_grid_workspace + 2)"),
            "{:?}",
            c.plan.auto_schedule
        );
        // Counters first, then each reduction's partials.
        assert!(
            c.cuda.contains("hf_grid_workspace + 4)")
                && c.cuda.contains(&format!(
                    "hf_grid_workspace + {})",
                    4 + 2 * crate::target::GRID_REDUCTION_MAX_BLOCKS
                )),
            "{}",
            c.cuda
        );
    }
}

#[cfg(test)]
mod split_k_tests {
    const STEP20: &str = include_str!("../../../examples/matmul/step20_split_k_decode.hf");

    fn compile(src: &str) -> Result<crate::Compilation, String> {
        crate::compile(src, &crate::CompileOptions::default()).map_err(|d| d.to_string())
    }

    fn workspace(c: &crate::Compilation) -> crate::plan::SizeExpr {
        c.plan
            .params
            .iter()
            .find_map(|p| match p {
                crate::plan::Param::Tensor {
                    role: crate::plan::TensorRole::Workspace,
                    shape,
                    ..
                } => Some(shape[0].clone()),
                _ => None,
            })
            .expect("a workspace")
    }

    #[test]
    fn a_split_product_is_combined_per_tile_before_its_epilogue() {
        let c = compile(STEP20).unwrap();
        let ir = &c.passes.last().unwrap().ir;
        // After the k loop's last wait and stage release, before the epilogue, which runs in
        // the tile's last block whatever its blockIdx.z.
        assert!(
            ir.contains("          mbarrier_arrive a_s_b_s_empty[3] (lane 0 of each warp)\n        grid_sum(s_acc[0]) -> s_last, slot 0, split_k over blockIdx.z\n        if s_last:\n          for r_pair in 32 @Unroll"),
            "{ir}"
        );
        assert!(!ir.contains("blockIdx.z == 0"), "{ir}");
        assert!(
            c.cuda.contains(
                "const bool s_last = hf_split_k<128u, 64, 128, 2>(&s_acc[0], hf_grid_workspace);"
            ),
            "{}",
            c.cuda
        );
        // A counter per tile (rounded up to 4), then per tile its chunks' fragments: 64
        // registers in each of the 128 consumer threads.
        let ws = workspace(&c);
        let eval = |m: i64, n: i64, k: i64| {
            let sizes = [
                ("M".to_string(), m),
                ("N".to_string(), n),
                ("K".to_string(), k),
            ];
            ws.eval(&sizes.into()).unwrap()
        };
        assert_eq!(eval(64, 4096, 4096), 32 + 32 * 4 * 64 * 128);
        assert_eq!(eval(61, 1000, 1040), 8 + 8 * 2 * 64 * 128);
        // The grid is not bounded as a grid reduction's is.
        assert!(c
            .plan
            .constraints
            .iter()
            .all(|k| !format!("{k:?}").contains("partial-value slot")));
    }

    #[test]
    fn split_k_takes_the_outer_part_of_k_and_no_other_grid_reduction() {
        let inner = STEP20.replace("s.parallelize(2, BIDz)", "s.parallelize(3, BIDz)");
        let e = compile(&inner).unwrap_err();
        assert!(
            e.contains("`s`'s K is split across blocks (split-K")
                && e.contains("is not its first: bind the outer part of K"),
            "{e}"
        );
        let amax = STEP20
            .replace(
                "  output c\n",
                "  output c\n  amax = max(abs(s), axis=[0, 1])\n  output amax\n",
            )
            .replace(
                "  inline_most()\n",
                "  inline_most()\n  amax.parallelize(0, BIDy)\n  amax.parallelize(1, BIDx)\n",
            );
        let e = compile(&amax).unwrap_err();
        assert!(
            e.contains("`s`'s K is split across blocks")
                && e.contains("`amax` is reduced across the grid in the same kernel"),
            "{e}"
        );
        // A persistent grid does not span the chunks' blockIdx.z (`persistent`'s error).
        let persistent = STEP20.replace(
            "  inline_most()\n",
            "  inline_most()\n  persistent(BIDy, 4)\n",
        );
        let e = compile(&persistent).unwrap_err();
        assert!(
            e.contains("persistent(BIDy, 4): `k_o` is bound to BIDz"),
            "{e}"
        );
    }
}

#[cfg(test)]
mod reference_tests {
    use std::collections::BTreeMap;

    /// The float64 reference of `body` over `x: f32[M, N]` (2 x 3) with `x`'s values.
    fn evaluate(body: &str, x: &[f64]) -> BTreeMap<String, Vec<f64>> {
        let src = format!("fusion f {{\n  input x: f32[M, N]\n{body}\n}}\n");
        let program = crate::frontend::parse(&src).unwrap();
        let f = crate::fusion::build(&program.fusion).unwrap();
        let sizes = [("M".to_string(), 2), ("N".to_string(), 3)].into();
        let inputs = [("x".to_string(), x.to_vec())].into();
        crate::backend::reference::evaluate(&f, &sizes, &inputs).unwrap()
    }

    #[test]
    fn a_scalar_output_is_one_value_of_every_element() {
        let x = [1.0, -7.5, 2.0, 0.25, 3.0, -1.0];
        let r = evaluate(
            "  t = sum(x, axis=[0, 1])\n  m = max(x, axis=[0, 1])\n  a = max(abs(x), axis=[0, 1])\n  n = min(x, axis=[0, 1])\n  output t\n  output m\n  output a\n  output n",
            &x,
        );
        assert_eq!(r["t"], [-2.25]);
        assert_eq!(r["m"], [3.0]);
        assert_eq!(r["a"], [7.5]);
        assert_eq!(r["n"], [-7.5]);
    }

    #[test]
    fn a_nan_in_a_full_max_propagates_as_in_torch_amax() {
        // torch.amax propagates NaN; so do the reference's max and the kernel's (max.NaN in the
        // per-thread update and in the block and grid reductions' combine, which a grid
        // reduction shares with a block one).
        let x = [1.0, f64::NAN, 2.0, 0.25, 3.0, -1.0];
        let r = evaluate(
            "  m = max(x, axis=[0, 1])\n  n = min(x, axis=[0, 1])\n  output m\n  output n",
            &x,
        );
        assert!(r["m"][0].is_nan(), "{:?}", r["m"]);
        assert!(r["n"][0].is_nan(), "{:?}", r["n"]);
        let r = evaluate("  t = sum(x, axis=[0, 1])\n  output t", &x);
        assert!(r["t"][0].is_nan());
        // Without a NaN, the identity (-inf) does not show.
        let r = evaluate("  m = max(x, axis=[0, 1])\n  output m", &[-5.0; 6]);
        assert_eq!(r["m"], [-5.0]);
    }
}
