//! Pass `sync`: block barriers for buffers that threads share.
//!
//! Requires: `predicate` (barriers go between statements, never inside a predicate). A buffer is
//! shared when it is in shared memory, or in global memory and both written and read by the
//! kernel. Read-after-write: a statement that reads a shared buffer written by an earlier
//! sibling since the last barrier gets `__syncthreads()` before it. Write-after-read: a
//! statement that writes a shared buffer read by an earlier sibling since the last barrier gets
//! one too, and a loop whose body both writes and reads a shared buffer ends each iteration
//! with one, so the next iteration's writes cannot overtake this iteration's reads.
//! Block reductions synchronise internally and count as barriers. Shared buffers filled by TMA
//! or bulk copies are read after an mbarrier wait, so read-after-write needs no block barrier
//! for them; write-after-read (a copy refilling a slot that an earlier iteration read) does.

use super::Ctx;
use crate::diag::Diagnostic;
use crate::fusion::MemoryType;
use crate::kir::{Data, Kernel, Stmt};
use std::collections::HashSet;

pub fn run(_cx: &mut Ctx, k: &mut Kernel) -> Result<(), Diagnostic> {
    let mut written = HashSet::new();
    let mut read = HashSet::new();
    collect(&k.body, &mut read, &mut written);
    let shared: HashSet<usize> = (0..k.buffers.len())
        .filter(|&b| match k.buffers[b].memory {
            MemoryType::Shared => true,
            MemoryType::Global => written.contains(&b) && read.contains(&b),
            MemoryType::Local => false,
        })
        .collect();
    if shared.is_empty() {
        return Ok(());
    }
    let body = std::mem::take(&mut k.body);
    k.body = block(body, &shared);
    Ok(())
}

fn data_reads(d: &Data, r: &mut HashSet<usize>) {
    match d {
        Data::Read(a) => {
            r.insert(a.buffer);
        }
        Data::Unary(_, _, x) | Data::Cast(_, x) => data_reads(x, r),
        Data::Binary(_, _, x, y) => {
            data_reads(x, r);
            data_reads(y, r);
        }
        _ => {}
    }
}

fn collect(body: &[Stmt], r: &mut HashSet<usize>, w: &mut HashSet<usize>) {
    for s in body {
        match s {
            Stmt::Loop(l) => collect(&l.body, r, w),
            Stmt::If { then, els, .. } => {
                collect(then, r, w);
                collect(els, r, w);
            }
            Stmt::Compute(c) => {
                w.insert(c.out.buffer);
                data_reads(&c.value, r);
            }
            Stmt::TmaLoad(t) => {
                w.insert(t.dst.buffer);
            }
            _ => {}
        }
    }
}

/// Shared buffers written by TMA or bulk copies: their readers wait on an mbarrier, so they
/// need no block barrier for read-after-write (write-after-read still does).
fn async_writes(body: &[Stmt], w: &mut HashSet<usize>) {
    for s in body {
        match s {
            Stmt::Loop(l) => async_writes(&l.body, w),
            Stmt::If { then, els, .. } => {
                async_writes(then, w);
                async_writes(els, w);
            }
            Stmt::TmaLoad(t) => {
                w.insert(t.dst.buffer);
            }
            _ => {}
        }
    }
}

fn block(body: Vec<Stmt>, shared: &HashSet<usize>) -> Vec<Stmt> {
    let mut out = Vec::new();
    let mut pending_w: HashSet<usize> = HashSet::new();
    let mut pending_r: HashSet<usize> = HashSet::new();
    for s in body {
        let (mut r, mut w) = (HashSet::new(), HashSet::new());
        collect(std::slice::from_ref(&s), &mut r, &mut w);
        r.retain(|b| shared.contains(b));
        w.retain(|b| shared.contains(b));
        let mut by_copy = HashSet::new();
        async_writes(std::slice::from_ref(&s), &mut by_copy);
        let raw = r.iter().any(|b| pending_w.contains(b));
        let war = w.iter().any(|b| pending_r.contains(b));
        if (raw || war) && !matches!(out.last(), Some(Stmt::Sync)) {
            out.push(Stmt::Sync);
        }
        if raw || war {
            pending_w.clear();
            pending_r.clear();
        }
        let s = match s {
            Stmt::Loop(mut l) => {
                l.body = block(l.body, shared);
                let (mut lr, mut lw) = (HashSet::new(), HashSet::new());
                collect(&l.body, &mut lr, &mut lw);
                let carried = lr.iter().any(|b| shared.contains(b) && lw.contains(b));
                let trips = !matches!(l.extent, crate::kir::Val::Int(1)) && !l.parallel.is_hw();
                if carried && trips && !matches!(l.body.last(), Some(Stmt::Sync)) {
                    l.body.push(Stmt::Sync);
                }
                Stmt::Loop(l)
            }
            Stmt::BlockReduce { .. } => {
                pending_w.clear();
                pending_r.clear();
                s
            }
            other => other,
        };
        pending_w.extend(w.into_iter().filter(|b| !by_copy.contains(b)));
        pending_r.extend(r);
        out.push(s);
    }
    out
}
