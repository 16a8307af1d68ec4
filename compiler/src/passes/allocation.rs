//! Pass `allocation`: sizes and places register and shared-memory buffers.
//!
//! Requires: `loop_nest` placements. A tensor computed at position `p` is allocated in the
//! innermost loop it shares with its consumers, over its own loop axes after `p` (reduction axes
//! never take space; registers skip axes bound to thread and block indices; shared memory skips
//! block indices but keeps every thread-bound axis, so threads can exchange values). Guarantees:
//! register arrays have a constant size, shared buffers have 16-byte aligned offsets in dynamic
//! shared memory, the total fits the 227 KB of an H100 block when it is known at compile time.
//! TMA-filled buffers come first (aligned to `target::TMA_BOX_ALIGN`, or to the swizzle
//! pattern's repeat when swizzled); a pipelined buffer holds `stages` copies of its stage (a
//! plain circular buffer's padded to 16 bytes); an accumulator fragment holds one thread's
//! share of the warp group's tile; the block reduction's scratch follows the buffers; a
//! ping-pong cache takes no space for the specialised axis (the consumer groups take turns with
//! whole stages); a padded shared cache (`row_pad=`) has its rows (the axes of its contiguous
//! axis) `row + pad` elements apart ([`Ctx::row_padding`], which `indexing` strides by). Completes the [`PipelinePlan`] with each pipelined
//! buffer's stage size (`PipelinePlan::stage_elems`).
//! Emits: `alloc` statements and the kernel's dynamic shared memory size.

use super::context::{add, mul, Change, Ctx};
use super::reduction::Accumulators;
use super::tma::PipelinePlan;
use crate::diag::Diagnostic;
use crate::fusion::{IterId, IterKind, MemoryType, ParallelType, TensorId};
use crate::kir::{
    visit, visit_mut, Buffer, BufferId, Flow, Kernel, Stmt, Val, Visitor, VisitorMut,
};
use crate::plan::SizeExpr;
use rustc_hash::FxHashMap as HashMap;
use std::convert::Infallible;

/// Runs the pass; `accumulators` (from `reduction`) locate the errors about an accumulator.
pub fn run(
    cx: &mut Ctx,
    accumulators: &Accumulators,
    plan: &mut PipelinePlan,
    k: &mut Kernel,
) -> Result<Change, Diagnostic> {
    let f = cx.fusion;
    place_allocations(cx, plan, k)?;
    // Sizes.
    let mut offset = SizeExpr::Const(0);
    // TMA boxes first: each stage starts at a multiple of 128 bytes. Circular buffers hold
    // `stages` copies of their stage (plain ones padded to 16 bytes, for vector accesses).
    let tma_stages: HashMap<BufferId, i64> = plan
        .loads
        .iter()
        .filter_map(|i| Some((cx.layout.tensor_buffer[&i.tensor], i.stage_elems?)))
        .collect();
    let stages_of: HashMap<BufferId, i64> = plan
        .loads
        .iter()
        .map(|i| {
            (
                cx.layout.tensor_buffer[&i.tensor],
                plan.pipes[i.pipe].stages,
            )
        })
        .collect();
    let order: Vec<BufferId> = k
        .buffer_ids()
        .filter(|b| tma_stages.contains_key(b))
        .chain(k.buffer_ids().filter(|b| !tma_stages.contains_key(b)))
        .collect();
    // The largest shared buffer and the statement that made it (the cache_after), for the error.
    let mut largest_shared: Option<(i64, Option<crate::diag::Span>)> = None;
    for b in order {
        let Some(ids) = cx.layout.alloc_ids.get(&b).cloned() else {
            continue;
        };
        let stage = match tma_stages.get(&b) {
            Some(&n) => SizeExpr::Const(n),
            None => {
                // A padded buffer: its rows `stride` apart (the last row's padding too).
                let (rows, stride) =
                    match cx.row_padding(k.buffers[b].tensor, k.buffers[b].memory, &ids) {
                        Some(p) => (ids.len() - p.row_axes, Some(p.stride)),
                        None => (ids.len(), None),
                    };
                let mut base = ids[..rows]
                    .iter()
                    .fold(SizeExpr::Const(1), |acc, &id| mul(acc, cx.id_extent(id)));
                if let Some(stride) = stride {
                    base = mul(base, stride);
                }
                // An accumulator fragment: the warp group's threads share its M x N tile.
                if k.buffers[b].memory == MemoryType::Local
                    && ids
                        .iter()
                        .any(|&id| f.ids[id].parallel == ParallelType::Mma)
                {
                    base = super::context::ceil_div(base, crate::target::WARPGROUP_THREADS);
                }
                match stages_of.get(&b) {
                    Some(_) if k.buffers[b].memory == MemoryType::Shared => {
                        let per16 = (16 / k.buffers[b].dtype.size_bytes() as i64).max(1);
                        mul(
                            super::context::ceil_div(base, per16),
                            SizeExpr::Const(per16),
                        )
                    }
                    _ => base,
                }
            }
        };
        let size = match stages_of.get(&b) {
            Some(&n) => {
                plan.stage_elems.insert(b, Val::from_size(&stage));
                mul(stage, SizeExpr::Const(n))
            }
            None => stage,
        };
        let buf = &k.buffers[b];
        if buf.memory == MemoryType::Shared {
            let bytes = size.as_const().unwrap_or(0) * buf.dtype.size_bytes() as i64;
            let span = buf.tensor.and_then(|t| f.tensors[t].span);
            if largest_shared.is_none_or(|(most, _)| bytes > most) {
                largest_shared = Some((bytes, span));
            }
        }
        match buf.memory {
            MemoryType::Local => check_registers(cx, accumulators, buf, b, &size)?,
            MemoryType::Shared => {
                let bytes = mul(size.clone(), SizeExpr::Const(buf.dtype.size_bytes() as i64));
                let align = match plan.box_swizzle(&cx.layout.tensor_buffer, b) {
                    Some(sw) => crate::target::swizzle_repeat(sw),
                    None if tma_stages.contains_key(&b) => crate::target::TMA_BOX_ALIGN,
                    None => 16,
                };
                let aligned = mul(
                    super::context::ceil_div(bytes, align),
                    SizeExpr::Const(align),
                );
                // The start too (a 128-byte aligned box may precede a 1024-byte aligned one).
                if align > 16 {
                    offset = mul(
                        super::context::ceil_div(offset, align),
                        SizeExpr::Const(align),
                    );
                }
                k.buffers[b].smem_offset = Some(Val::from_size(&offset));
                offset = add(offset, aligned);
            }
            MemoryType::Global => {}
        }
        k.buffers[b].size = Some(Val::from_size(&size));
    }
    // mbarrier arrays (8 bytes each), 16-byte aligned.
    for m in &mut k.mbarriers {
        m.smem_offset = Some(Val::from_size(&offset));
        offset = add(offset, SizeExpr::Const((m.count * 8 + 15) / 16 * 16));
    }
    // The list of key tiles a CTA visits (document masks, masks on indices).
    if let Some(v) = &mut k.visited {
        v.smem_offset = Some(Val::from_size(&offset));
        offset = add(offset, SizeExpr::Const(v.smem_bytes()));
    }
    // Scratch for block reductions: one slot per thread, after the buffers.
    if let Some(slot) = crate::kir::reduce_scratch_per_thread(&k.body) {
        let threads = k.block.iter().cloned().fold(SizeExpr::Const(1), mul);
        let scratch = mul(threads, SizeExpr::Const(slot));
        k.reduce_scratch = Some(offset.clone());
        offset = add(offset, scratch);
    }
    if let Some(total) = offset.as_const() {
        if total > crate::target::SMEM_PER_BLOCK {
            return Err(Diagnostic::new(
                format!("the kernel needs {total} bytes of shared memory; an H100 block has at most {} (227 KB)", crate::target::SMEM_PER_BLOCK),
                largest_shared.and_then(|(_, span)| span),
            ));
        }
    }
    k.dynamic_smem = offset;
    Ok(Change::Changed)
}

/// Gives every non-global tensor's buffer its allocation axes (`Layout::alloc_ids`) and puts its
/// `alloc` before the statement that holds its first write, at its placement's depth.
fn place_allocations(cx: &mut Ctx, plan: &PipelinePlan, k: &mut Kernel) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let mut placements: Vec<(TensorId, BufferId)> = cx
        .layout
        .tensor_buffer
        .iter()
        .map(|(&t, &b)| (t, b))
        .collect();
    // (Each tensor once: its index orders them as the pair did.)
    crate::id::sort_by_position(&mut placements, |&(t, _)| t.index());
    // Ping-pong caches: the consumer groups take turns with whole stages, so the loop over the
    // specialised dim outside the cache's position selects a stage, not a part of one.
    let turns: HashMap<TensorId, ParallelType> = plan
        .loads
        .iter()
        .filter_map(|i| {
            let ws = plan.pipes[i.pipe].ws.as_ref().filter(|w| w.turns > 1)?;
            Some((i.tensor, ws.spec.on))
        })
        .collect();
    let mut allocs = Vec::new();
    for (t, b) in placements {
        let tensor = &f.tensors[t];
        if tensor.memory == MemoryType::Global {
            continue;
        }
        let q = cx.layout.placement[&t].1;
        let pos = cx.own_axes_from(t);
        let ids: Vec<IterId> = tensor
            .loop_domain
            .iter()
            .enumerate()
            .filter(|&(p, &id)| {
                let ax = &f.ids[id];
                if ax.kind == IterKind::Reduction {
                    return false;
                }
                if p < pos && turns.get(&t) == Some(&ax.parallel) {
                    return false;
                }
                match tensor.memory {
                    MemoryType::Local => p >= pos && !ax.parallel.is_hw(),
                    _ => (p >= pos && !ax.parallel.is_block()) || ax.parallel.is_thread(),
                }
            })
            .map(|(_, &id)| id)
            .collect();
        cx.layout.alloc_ids.insert(b, ids);
        allocs.push((b, q, t));
    }
    insert_allocs(&mut k.body, &allocs).map_err(|t| {
        Diagnostic::new(
            format!("internal: no place to allocate `{}`", f.tensors[t].name),
            f.tensors[t].span,
        )
    })?;
    Ok(())
}

/// A register array has a constant size of at most 1024 elements per thread.
fn check_registers(
    cx: &Ctx,
    accumulators: &Accumulators,
    buf: &Buffer,
    b: BufferId,
    size: &SizeExpr,
) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    // A reduction's accumulator has no tensor of its own: the reduction's locates it.
    let span = buf
        .tensor
        .or_else(|| accumulators.tensor_of(b))
        .and_then(|t| f.tensors[t].span);
    // Named as the user wrote it: a tensor the builder named by its expression's text.
    let what = match buf.tensor.and_then(|t| f.tensors[t].written.as_ref()) {
        Some(text) => format!("the expression `{text}`"),
        None => format!("register tensor `{}`", buf.name),
    };
    let Some(n) = size.as_const() else {
        return Err(Diagnostic::new(
            format!(
                "{what} needs {size} elements per thread: a register array needs a constant size (split by a constant, inline it further, or use shared memory)"
            ),
            span,
        ));
    };
    if n > 1024 {
        return Err(Diagnostic::new(
            format!("{what} needs {n} elements per thread (at most 1024)"),
            span,
        ));
    }
    Ok(())
}

/// Inserts `alloc b` for every `(b, q, tensor)`: at loop depth `q` (or shallower, where a
/// non-loop statement holds the write) right before the statement that holds the first write
/// of `b`, allocations at one place in the order given. One walk finds every first write and
/// one rebuild per block inserts them, so this is linear in the kernel's size. Fails with the
/// tensor of a buffer nothing writes.
fn insert_allocs(
    body: &mut Vec<Stmt>,
    allocs: &[(BufferId, usize, TensorId)],
) -> Result<(), TensorId> {
    // Path to the first write of each buffer: (index, whether that statement is a loop).
    let wanted: HashMap<BufferId, usize> =
        allocs.iter().enumerate().map(|(i, a)| (a.0, i)).collect();
    let mut walk = FirstWrites {
        wanted: &wanted,
        path: Vec::new(),
        first: HashMap::default(),
    };
    visit(body, &mut walk);
    let first = walk.first;
    // Insertions per block (keyed by the loop indices leading to it): (index, order, buffer).
    let mut at: HashMap<Vec<usize>, Vec<(usize, usize, BufferId)>> = HashMap::default();
    for (order, &(b, q, t)) in allocs.iter().enumerate() {
        let path = first.get(&b).ok_or(t)?;
        let mut depth = 0;
        while depth < q && depth + 1 < path.len() && path[depth].1 {
            depth += 1;
        }
        let prefix = path[..depth].iter().map(|p| p.0).collect();
        at.entry(prefix)
            .or_default()
            .push((path[depth].0, order, b));
    }
    let Ok(()) = visit_mut(
        body,
        &mut Place {
            at: &mut at,
            prefix: Vec::new(),
        },
    );
    Ok(())
}

/// The path to the first write of each `wanted` buffer (a walk of the kernel): per statement
/// around it and then its own, (index, whether that statement is a loop).
struct FirstWrites<'s> {
    wanted: &'s HashMap<BufferId, usize>,
    /// The statements around the one walked.
    path: Vec<(usize, bool)>,
    first: HashMap<BufferId, Vec<(usize, bool)>>,
}

impl<'a> Visitor<'a> for FirstWrites<'_> {
    fn stmt(&mut self, s: &'a Stmt, at: usize) -> Flow {
        match s {
            Stmt::Compute(c)
                if self.wanted.contains_key(&c.out.buffer)
                    && !self.first.contains_key(&c.out.buffer) =>
            {
                let mut p = self.path.clone();
                p.push((at, false));
                self.first.insert(c.out.buffer, p);
            }
            _ => {}
        }
        // A write inside a condition (any statement but a loop) is allocated before it.
        self.path.push((at, matches!(s, Stmt::Loop(_))));
        Flow::Descend
    }

    fn after(&mut self, _s: &'a Stmt, _at: usize) {
        self.path.pop();
    }
}

/// Writes the allocations `at` holds for each block (keyed by the indices of the loops
/// leading to it) in front of their statements (a walk of the kernel's loops).
struct Place<'s> {
    at: &'s mut HashMap<Vec<usize>, Vec<(usize, usize, BufferId)>>,
    /// The indices of the loops around the block walked.
    prefix: Vec<usize>,
}

impl VisitorMut for Place<'_> {
    type Error = Infallible;

    fn stmt(&mut self, s: &mut Stmt, at: usize) -> Result<Flow, Infallible> {
        // Allocations go into loop bodies (see `insert_allocs`), not into other statements'.
        if !matches!(s, Stmt::Loop(_)) {
            return Ok(Flow::Skip);
        }
        self.prefix.push(at);
        Ok(Flow::Descend)
    }

    fn splice_after(&mut self, s: &mut Stmt, _at: usize) -> Result<Option<Vec<Stmt>>, Infallible> {
        if matches!(s, Stmt::Loop(_)) {
            self.prefix.pop();
        }
        Ok(None)
    }

    fn block(&mut self, body: &mut Vec<Stmt>) -> Result<(), Infallible> {
        place(body, &self.prefix, self.at);
        Ok(())
    }
}

/// Writes `at`'s allocations for the block `body` at `prefix` in front of their statements.
fn place(
    body: &mut Vec<Stmt>,
    prefix: &[usize],
    at: &mut HashMap<Vec<usize>, Vec<(usize, usize, BufferId)>>,
) {
    let Some(mut here) = at.remove(prefix) else {
        return;
    };
    // By index; at one index in the order given (the entries were pushed in that order, so the
    // stable sort keeps it, as sorting the (index, order, buffer) triples did).
    crate::id::sort_by_position(&mut here, |&(i, _, _)| i);
    // In place, from the back: every statement moves right by the allocations that go before
    // it, and those are written in front of it (a rebuilt list was fresh memory for the whole
    // block, and a large block's page faults cost more than the moves).
    let old_len = body.len();
    body.resize_with(old_len + here.len(), || Stmt::Sync);
    let mut write = body.len();
    let mut pending = here.len();
    for i in (0..old_len).rev() {
        write -= 1;
        body.swap(write, i);
        while pending > 0 && here[pending - 1].0 == i {
            pending -= 1;
            write -= 1;
            body[write] = Stmt::Alloc(here[pending].2);
        }
    }
}
