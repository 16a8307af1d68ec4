//! Pass `allocation`: sizes and places register and shared-memory buffers.
//!
//! Requires: `loop_nest` placements. A tensor computed at position `p` is allocated in the
//! innermost loop it shares with its consumers, over its own loop axes after `p` (reduction axes
//! never take space; registers skip axes bound to thread and block indices; shared memory skips
//! block indices but keeps every thread-bound axis, so threads can exchange values). Guarantees:
//! register arrays have a constant size, shared buffers have 16-byte aligned offsets in dynamic
//! shared memory, the total fits the 227 KB of an H100 block when it is known at compile time.
//! Emits: `alloc` statements and the kernel's dynamic shared memory size.

use super::{mul, Ctx};
use crate::diag::Diagnostic;
use crate::fusion::{IterKind, MemoryType, TensorId};
use crate::kir::{Kernel, Stmt, Val};
use crate::plan::SizeExpr;

pub const SMEM_LIMIT: i64 = 227 * 1024;

pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let mut placements: Vec<(TensorId, usize)> =
        cx.tensor_buffer.iter().map(|(&t, &b)| (t, b)).collect();
    placements.sort_unstable();
    for (t, b) in placements {
        let tensor = &f.tensors[t];
        if tensor.memory == MemoryType::Global {
            continue;
        }
        let (keys, q) = cx.placement[&t].clone();
        let pos = tensor.loop_domain.len() - (keys.len() - q);
        let ids: Vec<usize> = tensor
            .loop_domain
            .iter()
            .enumerate()
            .filter(|&(p, &id)| {
                let ax = &f.ids[id];
                if ax.kind == IterKind::Reduction {
                    return false;
                }
                match tensor.memory {
                    MemoryType::Local => p >= pos && !ax.parallel.is_hw(),
                    _ => (p >= pos && !ax.parallel.is_block()) || ax.parallel.is_thread(),
                }
            })
            .map(|(_, &id)| id)
            .collect();
        cx.alloc_ids.insert(b, ids);
        if !insert_alloc(&mut k.body, b, q, 0) {
            return Err(Diagnostic::new(
                format!("internal: no place to allocate `{}`", tensor.name),
                tensor.span,
            ));
        }
    }
    // Sizes.
    let mut offset = SizeExpr::Const(0);
    // TMA boxes first: each stage starts at a multiple of 128 bytes. Circular buffers hold
    // `stages` copies of their stage (plain ones padded to 16 bytes, for vector accesses).
    let tma_stages: std::collections::HashMap<usize, i64> = cx
        .tma
        .iter()
        .filter_map(|i| Some((cx.tensor_buffer[&i.tensor], i.stage_elems?)))
        .collect();
    let stages_of: std::collections::HashMap<usize, i64> = cx
        .tma
        .iter()
        .map(|i| (cx.tensor_buffer[&i.tensor], cx.pipes[i.pipe].stages))
        .collect();
    let order: Vec<usize> = (0..k.buffers.len())
        .filter(|b| tma_stages.contains_key(b))
        .chain((0..k.buffers.len()).filter(|b| !tma_stages.contains_key(b)))
        .collect();
    // The largest shared buffer and the statement that made it (the cache_after), for the error.
    let mut largest_shared: Option<(i64, Option<crate::diag::Span>)> = None;
    for b in order {
        let Some(ids) = cx.alloc_ids.get(&b).cloned() else {
            continue;
        };
        let stage = match tma_stages.get(&b) {
            Some(&n) => SizeExpr::Const(n),
            None => {
                let base = ids
                    .iter()
                    .fold(SizeExpr::Const(1), |acc, &id| mul(acc, cx.id_extent(id)));
                match stages_of.get(&b) {
                    Some(_) if k.buffers[b].memory == MemoryType::Shared => {
                        let per16 = (16 / k.buffers[b].dtype.size_bytes() as i64).max(1);
                        mul(super::ceil_div(base, per16), SizeExpr::Const(per16))
                    }
                    _ => base,
                }
            }
        };
        let size = match stages_of.get(&b) {
            Some(&n) => {
                cx.stage_elems.insert(b, Val::from_size(&stage));
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
            MemoryType::Local => {
                let Some(n) = size.as_const() else {
                    let t = buf.tensor.map(|t| f.tensors[t].span).unwrap_or(None);
                    return Err(Diagnostic::new(
                        format!(
                            "register tensor `{}` needs {size} elements per thread: a register array needs a constant size (split by a constant, inline it further, or use shared memory)",
                            buf.name
                        ),
                        t,
                    ));
                };
                if n > 1024 {
                    return Err(Diagnostic::new(
                        format!(
                            "register tensor `{}` needs {n} elements per thread (at most 1024)",
                            buf.name
                        ),
                        None,
                    ));
                }
            }
            MemoryType::Shared => {
                let bytes = mul(size.clone(), SizeExpr::Const(buf.dtype.size_bytes() as i64));
                let align = match cx.box_swizzle(b) {
                    Some(sw) => super::tma::stage_align(sw),
                    None if tma_stages.contains_key(&b) => super::tma::SMEM_ALIGN,
                    None => 16,
                };
                let aligned = mul(super::ceil_div(bytes, align), SizeExpr::Const(align));
                // The start too (a 128-byte aligned box may precede a 1024-byte aligned one).
                if align > 16 {
                    offset = mul(super::ceil_div(offset, align), SizeExpr::Const(align));
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
    // Scratch for block reductions: one 8-byte slot per thread, after the buffers.
    if contains_block_reduce(&k.body) {
        let threads = k.block.iter().cloned().fold(SizeExpr::Const(1), mul);
        let scratch = mul(threads, SizeExpr::Const(8));
        k.reduce_scratch = Some(offset.clone());
        offset = add(offset, scratch);
    }
    if let Some(total) = offset.as_const() {
        if total > SMEM_LIMIT {
            return Err(Diagnostic::new(
                format!("the kernel needs {total} bytes of shared memory; an H100 block has at most {SMEM_LIMIT} (227 KB)"),
                largest_shared.and_then(|(_, span)| span),
            ));
        }
    }
    k.dynamic_smem = offset;
    Ok(())
}

fn add(a: SizeExpr, b: SizeExpr) -> SizeExpr {
    match (a, b) {
        (SizeExpr::Const(x), SizeExpr::Const(y)) => SizeExpr::Const(x + y),
        (SizeExpr::Const(0), e) | (e, SizeExpr::Const(0)) => e,
        (a, b) => SizeExpr::Add(Box::new(a), Box::new(b)),
    }
}

fn contains_block_reduce(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::BlockReduce { .. } => true,
        Stmt::Loop(l) => contains_block_reduce(&l.body),
        Stmt::If { then, els, .. } => contains_block_reduce(then) || contains_block_reduce(els),
        _ => false,
    })
}

fn writes(body: &[Stmt], b: usize) -> bool {
    body.iter().any(|s| match s {
        Stmt::Compute(c) => c.out.buffer == b,
        Stmt::Loop(l) => writes(&l.body, b),
        Stmt::If { then, els, .. } => writes(then, b) || writes(els, b),
        _ => false,
    })
}

/// Inserts `alloc b` at loop depth `q` before the statement that holds its first write.
fn insert_alloc(body: &mut Vec<Stmt>, b: usize, q: usize, depth: usize) -> bool {
    let Some(i) = body.iter().position(|s| match s {
        Stmt::Compute(c) => c.out.buffer == b,
        Stmt::Loop(l) => writes(&l.body, b),
        Stmt::If { then, els, .. } => writes(then, b) || writes(els, b),
        _ => false,
    }) else {
        return false;
    };
    if depth == q {
        body.insert(i, Stmt::Alloc(b));
        return true;
    }
    match &mut body[i] {
        Stmt::Loop(l) => insert_alloc(&mut l.body, b, q, depth + 1),
        _ => {
            body.insert(i, Stmt::Alloc(b));
            true
        }
    }
}
