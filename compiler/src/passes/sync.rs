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
//! for them; write-after-read (a copy refilling a slot that an earlier iteration read) does,
//! unless the pipeline tracks it with empty mbarriers (`war=mbarrier`): such buffers need no
//! block barrier at all.
//!
//! TMA stores read shared memory asynchronously after their issue: write-after-read on a cache
//! a TMA store reads is ordered by the issuing thread waiting for its bulk groups to have read
//! shared memory (`cp.async.bulk.wait_group.read 0`) and then a barrier, placed right before the
//! next write of the cache (in a loop, before the first write of the next iteration), so the
//! store overlaps whatever comes between (e.g. the next tile's main loop).
//!
//! Async-proxy fences: a TMA store reads shared memory through the async proxy. When a block
//! barrier orders generic writes of a buffer before a TMA store of it (and the store's fence
//! mode is `analysis`), `fence.proxy.async.shared::cta` goes right before that barrier, executed
//! by every thread with no predicate: each writer fences after its own writes, and no
//! lane-dependent condition splits a warp in front of the `bar.sync`.
//!
//! Inside `WarpRoles` the barrier is the consumers' named barrier (the producer warp group does
//! not take part), and barriers inside block-uniform conditions are placed as at the top level.
//! A TMA store issued per thread group (`StoreGroup`: the store sits in `threadIdx.y`/`z`
//! loops) whose every write is in the same thread loops (`StoreGroup::local`) is ordered by
//! the group's own barrier (`Stmt::GroupSync`, ids from `target::GROUP_BARRIER_BASE`) when
//! nothing else is pending. (The wait before exit is `circular_buffer`'s.)

use super::context::{Change, Ctx};
use super::tma::PipelinePlan;
use crate::diag::Diagnostic;
use crate::fusion::{FenceMode, MemoryType};
use crate::kir::{visit_mut, BufferId, Flow, Kernel, Stmt, Val, VisitorMut};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::HashSet;
use std::convert::Infallible;

pub fn run(cx: &mut Ctx, plan: &PipelinePlan, k: &mut Kernel) -> Result<Change, Diagnostic> {
    let mut all = Touched::default();
    collect(&k.body, &mut all);
    // Slots ordered by full and empty mbarriers on both sides.
    let tracked: FxHashSet<BufferId> = plan
        .loads
        .iter()
        .filter(|i| plan.pipes[i.pipe].empty.is_some() || plan.pipes[i.pipe].ws.is_some())
        .map(|i| cx.layout.tensor_buffer[&i.tensor])
        .collect();
    let shared: FxHashSet<BufferId> = k
        .buffer_ids()
        .filter(|&b| match k.buffers[b].memory {
            MemoryType::Shared => !tracked.contains(&b),
            MemoryType::Global => all.writes.contains(&b) && all.reads.contains(&b),
            MemoryType::Local => false,
        })
        .collect();
    if shared.is_empty() {
        return Ok(Change::Unchanged);
    }
    let fenced: FxHashSet<BufferId> = plan
        .stores
        .iter()
        .filter(|s| s.fence == FenceMode::Analysis)
        .map(|s| cx.layout.tensor_buffer[&s.cache])
        .collect();
    let body = std::mem::take(&mut k.body);
    let thread_vars = k
        .hw_vars
        .iter()
        .filter(|(_, p)| p.is_thread())
        .map(|(v, _)| v.clone())
        .collect();
    let mut body = body;
    let sets = Sets {
        shared,
        thread_vars,
        fenced,
        store_issuers: plan
            .stores
            .iter()
            .map(|s| (cx.layout.tensor_buffer[&s.cache], &s.issuer))
            .collect(),
        group_local: plan
            .stores
            .iter()
            .filter_map(|s| {
                let g = s.group.as_ref().filter(|g| g.local)?;
                Some((
                    cx.layout.tensor_buffer[&s.cache],
                    Stmt::GroupSync {
                        dims: g.dims.clone(),
                        threads: g.threads,
                    },
                ))
            })
            .collect(),
    };
    let Ok(()) = visit_mut(&mut body, &mut Barriers { sets: &sets });
    k.body = body;
    Ok(Change::Changed)
}

struct Sets<'p> {
    shared: FxHashSet<BufferId>,
    /// Variables bound to thread indices (conditions on them differ between threads).
    thread_vars: HashSet<String>,
    /// Caches read by TMA stores whose fence the analysis places.
    fenced: FxHashSet<BufferId>,
    /// The threads that issue (and wait for) the TMA stores of each cache, in plan order.
    store_issuers: Vec<(BufferId, &'p Val)>,
    /// Caches stored per thread group whose every write is by the storing group: the barrier
    /// (a `GroupSync`) that orders their accesses when nothing else is pending.
    group_local: FxHashMap<BufferId, Stmt>,
}

impl Sets<'_> {
    /// The barrier that orders the accesses of `buffers`: their group's barrier when all are
    /// group-local caches of one thread group, else the block's (consumers') barrier.
    fn barrier<'a>(&self, buffers: impl IntoIterator<Item = &'a BufferId>) -> Stmt {
        let mut group: Option<&Stmt> = None;
        for b in buffers {
            match self.group_local.get(b) {
                Some(g) if group.is_none_or(|h| h == g) => group = Some(g),
                _ => return Stmt::Sync,
            }
        }
        group.cloned().unwrap_or(Stmt::Sync)
    }
}

/// Whether barrier `have` (already in place) orders what barrier `need` would: the block's
/// barrier orders everything, a group barrier only what the same group barrier would.
fn covers(have: Option<&Stmt>, need: &Stmt) -> bool {
    match have {
        Some(Stmt::Sync) => true,
        Some(g @ Stmt::GroupSync { .. }) => g == need,
        _ => false,
    }
}

/// The barrier that orders what `need` and a barrier ending `out` both order (the same one,
/// else the block's), taken off `out`.
fn take_barrier(out: &mut Vec<Stmt>, need: Stmt) -> Stmt {
    match out.last() {
        Some(Stmt::Sync | Stmt::GroupSync { .. }) => {
            let have = out.pop().expect("a barrier");
            if have == need {
                have
            } else {
                Stmt::Sync
            }
        }
        _ => need,
    }
}

/// The issuers' waits for their TMA stores of `caches` to have read shared memory (the caches
/// may be written again after the barrier that follows).
fn store_waits(sets: &Sets, caches: &FxHashSet<BufferId>) -> Vec<Stmt> {
    super::tma::circular::store_waits(
        sets.store_issuers
            .iter()
            .filter(|(b, _)| caches.contains(b))
            .map(|(_, issuer)| *issuer),
    )
}

/// Whether `s` is a loop that waits for the stores before its first write of `buffers` in
/// every iteration (its own drain covers the enclosing loop's previous iteration too).
fn drains_first(s: &Stmt, buffers: &FxHashSet<BufferId>) -> bool {
    let Stmt::Loop(l) = s else { return false };
    let drain = l.body.iter().position(|s| {
        matches!(s, Stmt::If { then, .. } if matches!(then.as_slice(), [Stmt::BulkWaitRead(0)]))
    });
    let write = l.body.iter().position(|s| writes_any(s, buffers));
    matches!((drain, write), (Some(d), Some(w)) if d < w)
}

/// Whether `s` writes one of `buffers` (anywhere inside it).
fn writes_any(s: &Stmt, buffers: &FxHashSet<BufferId>) -> bool {
    let mut t = Touched::default();
    collect(std::slice::from_ref(s), &mut t);
    t.writes.iter().any(|b| buffers.contains(b))
}

/// The buffers a statement tree touches, gathered in one walk.
#[derive(Default)]
struct Touched {
    reads: FxHashSet<BufferId>,
    writes: FxHashSet<BufferId>,
    /// Written by TMA or bulk copies: their readers wait on an mbarrier, so they need no block
    /// barrier for read-after-write (write-after-read still does).
    by_copy: FxHashSet<BufferId>,
    /// Read through the async proxy (TMA stores).
    by_store: FxHashSet<BufferId>,
}

fn collect(body: &[Stmt], t: &mut Touched) {
    crate::kir::for_each_stmt(body, &mut |s| match s {
        Stmt::Compute(c) => {
            t.writes.insert(c.out.buffer);
            c.value.for_each_read(&mut |a| {
                t.reads.insert(a.buffer);
            });
        }
        Stmt::TmaLoad(l) => {
            t.writes.insert(l.dst.buffer);
            t.by_copy.insert(l.dst.buffer);
        }
        Stmt::TmaStore(st) => {
            t.reads.insert(st.src.buffer);
            t.by_store.insert(st.src.buffer);
        }
        _ => {}
    });
}

/// The walk of [`run`]: places the barriers of each block it enters ([`barriers`]), inner
/// blocks first. Barriers go into loop bodies, into the consumers' branch of warp roles (the
/// producer branch only issues copies and waits on mbarriers) and into conditionals every
/// thread of the block evaluates alike, nowhere else.
struct Barriers<'s> {
    sets: &'s Sets<'s>,
}

impl VisitorMut for Barriers<'_> {
    type Error = Infallible;

    fn enter(&mut self, s: &Stmt, body: usize) -> Result<Flow, Infallible> {
        let enters = match s {
            Stmt::WarpRoles(_) => body == 1,
            Stmt::If { cond, .. } => uniform(cond, &self.sets.thread_vars),
            _ => true,
        };
        Ok(if enters { Flow::Descend } else { Flow::Skip })
    }

    fn block(&mut self, body: &mut Vec<Stmt>) -> Result<(), Infallible> {
        *body = barriers(std::mem::take(body), self.sets);
        Ok(())
    }
}

/// `body` with its barriers, the blocks inside it already given theirs (by [`Barriers`]).
fn barriers(body: Vec<Stmt>, sets: &Sets) -> Vec<Stmt> {
    let shared = &sets.shared;
    let mut out = Vec::with_capacity(body.len());
    let mut pending_w: FxHashSet<BufferId> = FxHashSet::default();
    let mut pending_r: FxHashSet<BufferId> = FxHashSet::default();
    // Read by TMA stores since the issuer last waited for them.
    let mut pending_stores: FxHashSet<BufferId> = FxHashSet::default();
    for s in body {
        let mut touched = Touched::default();
        collect(std::slice::from_ref(&s), &mut touched);
        let Touched {
            reads: mut r,
            writes: mut w,
            by_copy,
            by_store,
        } = touched;
        r.retain(|b| shared.contains(b) && !by_store.contains(b));
        w.retain(|b| shared.contains(b));
        let raw = r.iter().any(|b| pending_w.contains(b))
            || by_store.iter().any(|b| pending_w.contains(b));
        let war = w.iter().any(|b| pending_r.contains(b));
        let drain = w.iter().any(|b| pending_stores.contains(b));
        let fence = by_store
            .iter()
            .any(|b| sets.fenced.contains(b) && pending_w.contains(b));
        let need = sets.barrier(pending_w.iter().chain(pending_r.iter()));
        if fence {
            // Generic writes, then an async-proxy read: every writer fences before the barrier.
            let bar = take_barrier(&mut out, need);
            out.push(Stmt::FenceProxyAsync);
            out.push(bar);
        } else if (raw || war) && !covers(out.last(), &need) {
            let bar = take_barrier(&mut out, need);
            out.push(bar);
        }
        if raw || war {
            pending_w.clear();
            pending_r.clear();
        }
        // Whether every write and read of the statement is followed by a barrier inside it.
        let mut closed = false;
        let s = match s {
            Stmt::Loop(mut l) => {
                let mut inner = Touched::default();
                collect(&l.body, &mut inner);
                let generic_reads = inner
                    .reads
                    .difference(&inner.by_store)
                    .copied()
                    .collect::<FxHashSet<_>>();
                let carried = generic_reads
                    .iter()
                    .any(|b| shared.contains(b) && inner.writes.contains(b));
                let trips = !matches!(l.extent, crate::kir::Val::Int(1)) && !l.parallel.is_hw();
                if carried && trips && !matches!(l.body.last(), Some(Stmt::Sync)) {
                    l.body.push(Stmt::Sync);
                }
                // A cache the next iteration writes while this one's stores may still read it:
                // the issuer waits for them right before the first write.
                let stored: FxHashSet<BufferId> = inner
                    .by_store
                    .iter()
                    .filter(|b| shared.contains(b) && inner.writes.contains(b))
                    .copied()
                    .collect();
                if trips && !stored.is_empty() {
                    let first = l.body.iter().position(|s| writes_any(s, &stored));
                    if let Some(j) = first.filter(|&j| !drains_first(&l.body[j], &stored)) {
                        let j = if j > 0 && matches!(l.body[j - 1], Stmt::Sync) {
                            j - 1
                        } else {
                            j
                        };
                        let mut drain = store_waits(sets, &stored);
                        let bar = sets.barrier(&stored);
                        if !covers(l.body.get(j), &bar) {
                            drain.push(bar);
                        }
                        l.body.splice(j..j, drain);
                    }
                }
                closed = matches!(l.body.last(), Some(Stmt::Sync));
                Stmt::Loop(l)
            }
            // Consumer warps synchronise among themselves (named barriers).
            Stmt::WarpRoles(_) => {
                closed = true;
                s
            }
            // A condition every thread of the block evaluates alike: barriers went inside.
            Stmt::If { cond, then, els } if uniform(&cond, &sets.thread_vars) => {
                let ends = |b: &[Stmt]| b.is_empty() || matches!(b.last(), Some(Stmt::Sync));
                closed = ends(&then) && ends(&els);
                Stmt::If { cond, then, els }
            }
            Stmt::BlockReduce { .. } | Stmt::BlockWelford { .. } | Stmt::GridReduce(_) => {
                pending_w.clear();
                pending_r.clear();
                s
            }
            other => other,
        };
        // The stores' reads end before this statement's writes: the issuer waits, then a
        // barrier (unless a loop waits before its own first write).
        if drain && !drains_first(&s, &pending_stores) {
            let need = sets.barrier(
                pending_w
                    .iter()
                    .chain(pending_r.iter())
                    .chain(pending_stores.iter()),
            );
            let bar = take_barrier(&mut out, need);
            out.extend(store_waits(sets, &pending_stores));
            out.push(bar);
            pending_w.clear();
            pending_r.clear();
        }
        if drain {
            pending_stores.clear();
        }
        if !closed {
            pending_w.extend(w.into_iter().filter(|b| !by_copy.contains(b)));
            pending_r.extend(r);
        }
        pending_stores.extend(by_store.iter().filter(|b| shared.contains(b)));
        out.push(s);
    }
    out
}

/// Whether a condition has the same value in every thread of the block (no thread index, no
/// variable bound to one, no warp index or election).
fn uniform(v: &Val, thread_vars: &HashSet<String>) -> bool {
    !v.any_leaf(&|leaf| match leaf {
        Val::Hw(p) => p.is_thread(),
        Val::Var(n) => thread_vars.contains(n),
        Val::Warp | Val::Elect => true,
        _ => false,
    })
}
