//! Pass `circular_buffer` (after `predicate`): builds each pipeline around its serial loop (the
//! buffered loop; `i` is the linear iteration over every serial loop around it): prologue
//! `[0, prefetch)` issues loads; main iteration `i` issues the loads of `i + prefetch`, waits
//! on `full[i % stages]` for parity `(i / stages) % 2` and computes; epilogue runs the last
//! `prefetch` iterations. One elected lane of warp 0 (`elect.sync` under a warp-uniform
//! predicate) waits for the slot to be empty (`war=mbarrier`), arrives with `expect_tx` = the
//! full box bytes of every copy of the stage (also at a ragged edge: TMA fills the
//! out-of-bounds part with zeros) and issues the copies. Plain loads of a circular-buffered
//! cache are moved the same way, by every thread, with no mbarrier. Reads of a cache and plain
//! writes of it add the slot's offset. The mbarriers are initialised once at kernel entry
//! (fence, block barrier) and invalidated at kernel exit after a block barrier. TMA stores are
//! issued by the same elected lane, committed as a bulk group and waited on
//! (`wait_group.read 0`) before the shared buffer can be written again. Warp-specialized
//! pipelines are split into roles by [`super::warp_specialize`].
//!
//! A single-stage pipeline (a cache copied once per iteration of its loop, no circular buffer)
//! issues its copies at the top of the iteration and waits where the iteration first reads
//! them, when a serial loop comes before that read: a persistent tile's row and column scales
//! (examples/matmul/step17_fp8_rowwise.hf) are copied by one 1-D TMA each before the tile's k
//! loop and waited for by its epilogue, so the copies run during the k loop. That is the form
//! the hardware does best here: the TMA engine moves the vectors with no thread instructions,
//! zero-fills a ragged edge and signals one mbarrier; loaded into registers before the k loop
//! they would not fit beside the accumulators (128 of the 168 registers ptxas gives each of
//! 384 threads, and a thread needs 66 scales); issued by the producer warp with the tile's
//! first stage they would arrive up to a tile early, while the previous tile's epilogue still
//! reads the buffer (a second buffer and an empty barrier per tile), where the consumer's own
//! program order already keeps one buffer safe (the `sync` pass's barrier below).
//!
//! Write-after-read of slots refilled by copies is left to the `sync` pass (a block barrier at
//! the end of an iteration that read a slot) unless the pipeline has empty mbarriers: then each
//! warp arrives on `empty[i % stages]` after its reads. Read-after-write of copied slots needs
//! no block barrier: the mbarrier wait orders the copy before the reads. The async-proxy fence
//! before a TMA store is placed by the `sync` pass (or here, for the non-default placements).
//!
//! Clusters: where a pipeline's barriers are signalled across the cluster (multicast copies,
//! cluster-wide releases), the barrier after the mbarrier init and before the invalidation at
//! exit is `Stmt::ClusterSync` (every thread of both roles, after the roles rejoin), and
//! `expect_tx` counts a multicast copy's slice once per CTA of the cluster. Otherwise, in a
//! warp-specialized kernel, the consumers invalidate the barriers after their named barrier.
//! Stream-K: the linear iteration of a piece's k loop is the CTA's run so far
//! (`PipelinePlan::buffered_linear`), and a TMA store runs only in the piece that ends its tile.
//!
//! A kernel that lists its visited key tiles before the body (`Kernel::visited`, documents and
//! `mask_list`): the consumers' one-shot copies ahead of their loops (Q's tile), which need no
//! list, move into the mbarriers' init guard, and the CUDA makes the list after that guard, so
//! they are in flight while the list is made (`one_shot_loads`).

use super::stage::{contains_copy, fills, issue, linear, shift_reads, shift_writes};
#[allow(unused_imports)]
use super::*;

pub fn run(cx: &mut Ctx, plan: &PipelinePlan, k: &mut Kernel) -> Result<Change, Diagnostic> {
    let issuer = plan.issuer.clone();
    let mut body = std::mem::take(&mut k.body);
    for p in 0..plan.pipes.len() {
        if plan.pipes[p].ws.is_some() {
            continue;
        }
        if !pipeline(cx, plan, &mut body, p, &Val::Int(0), false)? {
            let f = cx.fusion;
            let t = plan.loads[plan.pipes[p].members[0]].tensor;
            return Err(Diagnostic::new(
                format!(
                    "internal: the load of `{}` was not found",
                    f.tensors[t].name
                ),
                None,
            ));
        }
    }
    let stores = plan.stores.clone();
    for s in &stores {
        issue_stores(cx, &mut body, s, &s.issuer, plan.stream_k.as_ref());
    }
    // Before the kernel exits, each issuer waits until its stores have read shared memory.
    let drain = store_waits(stores.iter().map(|s| &s.issuer));
    if k.mbarriers.is_empty() {
        body.extend(drain);
        k.body = body;
        return Ok(Change::Changed);
    }
    // Init once at entry, invalidate once at exit (by the consumers when the producers have
    // left: their last barrier is a named one, and they waited on every copy).
    let init = k
        .mbarrier_ids()
        .map(|bars| Stmt::MbarInit { bars })
        .collect();
    let inval: Vec<Stmt> = k
        .mbarrier_ids()
        .map(|bars| Stmt::MbarInval { bars })
        .collect();
    // In a cluster whose CTAs signal each other's barriers (multicast copies, cluster-wide
    // releases), the barrier after init and before exit is the cluster's: no peer signals a
    // barrier before it is initialised, and no CTA leaves (or invalidates its barriers) while
    // a peer may still arrive on them or copy into its shared memory.
    let meet = if k.mbarriers.iter().any(|m| m.cluster_wide) {
        Stmt::ClusterSync
    } else {
        Stmt::Sync
    };
    let mut out = vec![guard(issuer.clone(), init), meet.clone()];
    let exit = [meet, guard(issuer, inval)];
    let specialized: Vec<usize> = (0..plan.pipes.len())
        .filter(|&p| plan.pipes[p].ws.is_some())
        .collect();
    if !specialized.is_empty() {
        let mut roles = super::warp_specialize::warp_specialize(cx, plan, body, &specialized)?;
        if k.visited.is_some() && k.persistent.is_none() {
            // The CTA makes its list of visited key tiles after the init (every thread, before
            // the roles split: `codegen::write_visited`), and no key tile is loaded before the
            // list is whole; the consumers' one-shot loads (Q) need no list, so the issuer
            // starts them with the init and they are in flight while the list is made (document
            // masks at 2k: 289 -> 283 us, 224.5 -> 218 us; docs/benchmarks.md).
            let hoisted = one_shot_loads(k, &plan.issuer, &mut roles.consumer);
            if let Some(Stmt::If { then, .. }) = out.first_mut() {
                then.extend(hoisted);
            }
        }
        roles.consumer.extend(drain);
        if exit[0] == Stmt::ClusterSync {
            // Every thread of both roles meets the peers, after the roles rejoin.
            out.push(Stmt::WarpRoles(roles));
            out.extend(exit);
        } else {
            // The producers have left: the consumers' named barrier is the block's.
            roles.consumer.extend(exit);
            out.push(Stmt::WarpRoles(roles));
        }
    } else {
        out.extend(body);
        out.extend(drain);
        out.extend(exit);
    }
    k.body = out;
    Ok(Change::Changed)
}

/// Takes out of the consumers' code the first issuer-guarded group of TMA loads that runs once,
/// before any loop of theirs (under the grid-bound loops only, which a non-persistent kernel's
/// bindings stand for): an arrive with its byte count and the copies completing on it, whose
/// coordinates read nothing but the kernel's bindings. Returns the group's statements, with
/// the allocations of the buffers they fill, for the init guard; nothing when there is none.
fn one_shot_loads(k: &Kernel, issuer: &Val, body: &mut Vec<Stmt>) -> Vec<Stmt> {
    let bound = |v: &Val| {
        !v.any_leaf(&|l| matches!(l, Val::Var(n) if !k.hw_vars.iter().any(|(h, _)| h == n)))
    };
    let group = |then: &[Stmt]| {
        matches!(then.first(), Some(Stmt::MbarArriveExpectTx { slot, .. }) if bound(slot))
            && then[1..].iter().all(|s| {
                matches!(s, Stmt::TmaLoad(t)
                    if t.multicast.is_none() && bound(&t.slot) && t.coords.iter().all(&bound))
            })
            && then.len() > 1
    };
    for at in 0..body.len() {
        let hoist = match &body[at] {
            Stmt::If { cond, then, els } => cond == issuer && els.is_empty() && group(then),
            Stmt::Loop(l) if l.parallel.is_block() => {
                let Stmt::Loop(l) = &mut body[at] else {
                    unreachable!("matched above")
                };
                return one_shot_loads(k, issuer, &mut l.body);
            }
            // What runs before the group must not be a loop of the consumers' own.
            Stmt::Loop(_) => return Vec::new(),
            _ => false,
        };
        if !hoist {
            continue;
        }
        let Stmt::If { then, .. } = body.remove(at) else {
            unreachable!("matched above")
        };
        let filled: Vec<BufferId> = then
            .iter()
            .filter_map(|s| match s {
                Stmt::TmaLoad(t) => Some(t.dst.buffer),
                _ => None,
            })
            .collect();
        let mut out: Vec<Stmt> = body[..at]
            .iter()
            .filter(|s| matches!(s, Stmt::Alloc(b) if filled.contains(b)))
            .cloned()
            .collect();
        out.extend(then);
        return out;
    }
    Vec::new()
}

/// Finds the loads of pipe `p` under `body`, following at each level the first loop that fills
/// a member buffer (the chain of loops that leads to them); `outer` is the linear iteration of
/// the serial loops entered so far. Rewrites the innermost serial loop around them into the
/// pipeline.
pub(crate) fn pipeline(
    cx: &mut Ctx,
    plan: &PipelinePlan,
    body: &mut Vec<Stmt>,
    p: usize,
    outer: &Val,
    in_loop: bool,
) -> Result<bool, Diagnostic> {
    let pipe = &plan.pipes[p];
    let f = cx.fusion;
    let members: Vec<&TmaInfo> = pipe.members.iter().map(|&m| &plan.loads[m]).collect();
    let buffers: Vec<BufferId> = members
        .iter()
        .map(|i| cx.layout.tensor_buffer[&i.tensor])
        .collect();
    let name = &f.tensors[members[0].tensor].name;
    let span = f.tensors[members[0].tensor].span;
    let mut body = body;
    let mut outer = outer.clone();
    let mut in_loop = in_loop;
    // Down the chain of loops to the one that holds the loads (or to the loads themselves).
    let i = loop {
        let Some(i) = body.iter().position(|s| match s {
            Stmt::Loop(_) | Stmt::TmaLoad(_) => fills(s, &buffers),
            _ => false,
        }) else {
            return Ok(false);
        };
        if !matches!(&body[i], Stmt::Loop(l) if Some(l.key) != pipe.loop_key) {
            break i;
        }
        let Stmt::Loop(l) = &mut body[i] else {
            unreachable!("matched above")
        };
        if !l.parallel.is_hw() {
            outer = linear(&outer, &l.extent, &Val::Var(l.var.clone()), in_loop);
            in_loop = true;
        }
        body = &mut l.body;
    };
    if let Stmt::TmaLoad(_) = &body[i] {
        if pipe.loop_key.is_some() {
            return Err(Diagnostic::new(
                format!(
                    "the load of `{name}` is separated from the serial loop around it by block-index loops: put the serial loops inside the blockIdx-bound ones"
                ),
                span,
            ));
        }
        loads_without_loop(cx, plan, pipe, &buffers, body, i);
        return Ok(true);
    }
    // `body[i]` is the buffered loop: its direct children that fill a member buffer are the
    // loads.
    let Stmt::Loop(l) = body.remove(i) else {
        unreachable!("a loop or a load, and a load returned above")
    };
    let out = buffered_loop(cx, plan, pipe, &buffers, l, &outer, in_loop, (name, span))?;
    body.splice(i..i, out);
    Ok(true)
}

/// No serial loop around the loads of `pipe` (the first at `body[i]`): one load of each,
/// issued there and waited on once.
fn loads_without_loop(
    cx: &Ctx,
    plan: &PipelinePlan,
    pipe: &Pipe,
    buffers: &[BufferId],
    body: &mut Vec<Stmt>,
    i: usize,
) {
    let is_load = |s: &Stmt| matches!(s, Stmt::TmaLoad(t) if buffers.contains(&t.dst.buffer));
    let loads: Vec<Stmt> = body.iter().filter(|s| is_load(s)).cloned().collect();
    body.retain(|s| !is_load(s));
    let stmts = vec![
        issue(
            cx,
            plan,
            pipe.stages,
            pipe.full.expect("copies have full barriers"),
            pipe.empty,
            &loads,
            &Val::Int(0),
            &Val::Int(0),
            &plan.issuer,
        ),
        Stmt::MbarWait {
            bars: pipe.full.expect("copies have full barriers"),
            slot: Val::Int(0),
            parity: Val::Int(0),
        },
    ];
    body.splice(i..i, stmts);
}

/// The pipeline of `pipe` over its buffered loop `l` (whose direct children that fill one of
/// `buffers` are the loads), in place of `l`: each iteration waits for its slot, reads it and
/// releases it, the loads are issued `prefetch` iterations ahead (with a prologue and an
/// epilogue when that is more than 0). `outer` and `in_loop` as for [`pipeline`]; `cache`
/// names and locates the first member for errors.
#[allow(clippy::too_many_arguments)]
fn buffered_loop(
    cx: &mut Ctx,
    plan: &PipelinePlan,
    pipe: &Pipe,
    buffers: &[BufferId],
    l: Loop,
    outer: &Val,
    in_loop: bool,
    cache: (&str, Option<crate::diag::Span>),
) -> Result<Vec<Stmt>, Diagnostic> {
    let (name, span) = cache;
    let (s, pf) = (pipe.stages, pipe.prefetch);
    let var = l.var.clone();
    let at = |v: &Val| plan.buffered_linear(outer, &l, v, in_loop);
    let slot = |lin: &Val| {
        if s == 1 {
            Val::Int(0)
        } else {
            Val::rem(lin.clone(), Val::Int(s))
        }
    };
    let parity = |lin: &Val| {
        if s == 1 {
            Val::rem(lin.clone(), Val::Int(2))
        } else {
            Val::rem(Val::div(lin.clone(), Val::Int(s)), Val::Int(2))
        }
    };
    let Parts {
        copies,
        plain,
        allocs,
        mut rest,
    } = parts(&l, buffers, name, span)?;
    let stage_of = |b: BufferId| plan.stage_elems[&b].clone();
    // Moves the loads to iteration `v`, each into its slot.
    let issue_at = |v: &Val| -> Vec<Stmt> {
        let sl = slot(&at(v));
        let mut out = Vec::new();
        let moved: Vec<Stmt> = copies
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c.map_vals(&mut |x| x.subst(&var, v));
                c
            })
            .collect();
        if !moved.is_empty() {
            out.push(issue(
                cx,
                plan,
                pipe.stages,
                pipe.full.expect("copies have full barriers"),
                pipe.empty,
                &moved,
                &sl,
                &at(v),
                &plan.issuer,
            ));
        }
        for st in &plain {
            let mut st = st.clone();
            st.map_vals(&mut |x| x.subst(&var, v));
            for &b in buffers {
                shift_writes(&mut st, b, &Val::mul(sl.clone(), stage_of(b)));
            }
            out.push(st);
        }
        out
    };
    let v = Val::Var(var.clone());
    for &b in buffers {
        shift_reads(&mut rest, b, &Val::mul(slot(&at(&v)), stage_of(b)));
    }
    let mut iteration = Vec::new();
    if !copies.is_empty() {
        let wait = Stmt::MbarWait {
            bars: pipe.full.expect("copies have full barriers"),
            slot: slot(&at(&v)),
            parity: parity(&at(&v)),
        };
        // A single-stage copy issued at the top of its iteration is waited for where it is
        // first read, so the loops before that (a tile's k loop, before the epilogue reads the
        // tile's scales) run while it is in flight.
        let at_first_read = if (s, pf) == (1, 0) {
            first_read_after_a_loop(&rest, buffers)
        } else {
            None
        };
        match at_first_read {
            Some(i) => {
                rest.insert(i, wait);
            }
            None => iteration.push(wait),
        }
    }
    iteration.extend(rest);
    if let Some(empty) = pipe.empty {
        iteration.push(Stmt::MbarArrive {
            bars: empty,
            slot: slot(&at(&v)),
            per_warp: plan.issuer != Val::True && matches!(plan.issuer, Val::And(..)),
        });
    }
    let mut out: Vec<Stmt> = allocs;
    if pf == 0 {
        let mut b = issue_at(&v);
        b.extend(iteration);
        out.push(Stmt::Loop(Loop { body: b, ..l }));
    } else {
        let first = issue_at(&v);
        let next = issue_at(&Val::add(v.clone(), Val::Int(pf)));
        out.extend(prefetched(cx, &l, pf, first, next, iteration));
    }
    Ok(out)
}

/// The position in `rest` of the first statement that reads one of `buffers`, when a serial
/// loop that does not read them comes before it (work to overlap with the copy, e.g. a tile's
/// k loop); None otherwise, and when nothing reads them.
fn first_read_after_a_loop(rest: &[Stmt], buffers: &[BufferId]) -> Option<usize> {
    let reads = |s: &Stmt| {
        crate::kir::any_stmt(std::slice::from_ref(s), &mut |s| {
            let mut found = false;
            match s {
                Stmt::Compute(c) => c
                    .value
                    .for_each_read(&mut |a| found |= buffers.contains(&a.buffer)),
                Stmt::TmaStore(t) => found = buffers.contains(&t.src.buffer),
                _ => {}
            }
            found
        })
    };
    let first = rest.iter().position(reads)?;
    rest[..first]
        .iter()
        .any(|s| matches!(s, Stmt::Loop(l) if l.parallel == ParallelType::Serial))
        .then_some(first)
}

/// The statements of a buffered loop's body, by what the pipeline does with them.
struct Parts {
    /// Copies into a member buffer: issued `prefetch` iterations ahead, into their slot.
    copies: Vec<Stmt>,
    /// Plain loads of a member buffer (every thread): moved as the copies, by every thread.
    plain: Vec<Stmt>,
    /// Allocations of member buffers: before the pipeline's loops.
    allocs: Vec<Stmt>,
    /// The rest: the iteration, reading the slot.
    rest: Vec<Stmt>,
}

/// Sorts the body of the buffered loop `l` into [`Parts`]; a load of a member buffer nested in
/// other loops inside it is an error (it could not be issued ahead).
fn parts(
    l: &Loop,
    buffers: &[BufferId],
    name: &str,
    span: Option<crate::diag::Span>,
) -> Result<Parts, Diagnostic> {
    let mut copies = Vec::new();
    let mut plain = Vec::new();
    let mut allocs = Vec::new();
    let mut rest = Vec::new();
    for st in l.body.iter().cloned() {
        match &st {
            Stmt::TmaLoad(t) if buffers.contains(&t.dst.buffer) => copies.push(st),
            Stmt::Alloc(b) if buffers.contains(b) => allocs.push(st),
            _ if fills(&st, buffers) => {
                if contains_copy(&st) {
                    return Err(Diagnostic::new(
                        format!(
                            "the load of `{name}` is separated from the serial loop `{}` that pipelines it by other loops: it must be issued directly in `{}` (put block-index loops outside it)",
                            l.var, l.var
                        ),
                        span,
                    ));
                }
                plain.push(st)
            }
            _ => rest.push(st),
        }
    }
    Ok(Parts {
        copies,
        plain,
        allocs,
        rest,
    })
}

/// A buffered loop `l` that loads `pf` iterations ahead: the prologue issues the loads of
/// iterations [0, pf) (`first`: those of iteration `l.var`), the main loop issues those of
/// iteration i + pf (`next`) and runs `iteration` i, the epilogue runs the last `pf`.
fn prefetched(
    cx: &mut Ctx,
    l: &Loop,
    pf: i64,
    first: Vec<Stmt>,
    next: Vec<Stmt>,
    iteration: Vec<Stmt>,
) -> Vec<Stmt> {
    let var = l.var.clone();
    let v = Val::Var(var.clone());
    let extent = l.extent.clone();
    let mut out = Vec::new();
    let known = match extent {
        Val::Int(e) => Some(e),
        _ => None,
    };
    // Prologue: loads of iterations [0, prefetch).
    let pro_body = if known.is_some_and(|e| e >= pf) {
        first
    } else {
        vec![guard(Val::lt(v.clone(), extent.clone()), first)]
    };
    out.push(Stmt::Loop(Loop {
        key: l.key,
        var: var.clone(),
        extent: Val::Int(pf),
        parallel: ParallelType::Serial,
        digits: Vec::new(),
        body: pro_body,
    }));
    // Main: issue iteration i + prefetch, then run iteration i.
    let main_extent = match known {
        Some(e) => Val::Int(e - pf),
        None => Val::Sub(Box::new(extent.clone()), Box::new(Val::Int(pf))),
    };
    let mut main = next;
    main.extend(iteration.clone());
    out.push(Stmt::Loop(Loop {
        key: l.key,
        var: var.clone(),
        extent: main_extent.clone(),
        parallel: l.parallel,
        digits: Vec::new(),
        body: main,
    }));
    // Epilogue: the last `prefetch` iterations, no loads.
    let epi = cx.fresh_name(&format!("{var}_epi"));
    let mut epi_body = vec![Stmt::Let {
        var: var.clone(),
        value: Val::add(main_extent, Val::Var(epi.clone())),
        broadcast: false,
    }];
    if known.is_some_and(|e| e >= pf) {
        epi_body.extend(iteration);
    } else {
        epi_body.push(Stmt::If {
            cond: Val::lt(Val::Int(-1), v.clone()),
            then: iteration,
            els: Vec::new(),
        });
    }
    out.push(Stmt::Loop(Loop {
        key: l.key,
        var: epi,
        extent: Val::Int(pf),
        parallel: ParallelType::Serial,
        digits: Vec::new(),
        body: epi_body,
    }));
    out
}

/// Wraps every TMA store of `s` in the issuing thread's guard and commits it as a bulk group,
/// with the async-proxy fence where the store's fence mode puts it. The issuer waits for the
/// group to have read shared memory only before the cache is written again (`sync`) and at exit.
pub(crate) fn issue_stores(
    cx: &Ctx,
    body: &mut Vec<Stmt>,
    s: &StoreInfo,
    issuer: &Val,
    stream_k: Option<&crate::kir::StreamK>,
) {
    let cache = cx.layout.tensor_buffer[&s.cache];
    crate::kir::rewrite_pre(body, &mut |st| match st {
        Stmt::TmaStore(t) if t.map == s.map => {
            let mut store = Stmt::TmaStore(t);
            // Stream-K: only the piece that ends a tile stores it (the others hand on partial
            // sums); the commit stays, an empty group.
            if let Some(sk) = stream_k {
                store = guard(sk.ends_tile(), vec![store]);
            }
            // The wait for shared memory to be read is deferred to just before the cache is
            // written again (the `sync` pass) and to the kernel's exit, so the store runs on
            // while the threads go on (the next tile's main loop).
            let elected = vec![store, Stmt::BulkCommit];
            let issue = match (s.fence, issuer) {
                (FenceMode::IssuingWarp, Val::And(warp, elect)) => Stmt::If {
                    cond: (**warp).clone(),
                    then: vec![Stmt::FenceProxyAsync, guard((**elect).clone(), elected)],
                    els: Vec::new(),
                },
                (FenceMode::IssuingWarp, _) => {
                    let mut v = vec![Stmt::FenceProxyAsync];
                    v.extend(elected);
                    guard(issuer.clone(), v)
                }
                _ => guard(issuer.clone(), elected),
            };
            Step::Keep(vec![issue])
        }
        Stmt::Compute(c) if s.fence == FenceMode::PerStore && c.out.buffer == cache => {
            Step::Keep(vec![Stmt::Compute(c), Stmt::FenceProxyAsync])
        }
        other => Step::Descend(vec![other]),
    });
}

/// One wait per distinct issuer for its TMA stores to have read shared memory
/// (`cp.async.bulk.wait_group.read 0` under the issuer's guard), in the order given.
pub(crate) fn store_waits<'a>(issuers: impl IntoIterator<Item = &'a Val>) -> Vec<Stmt> {
    let mut waits: Vec<Stmt> = Vec::new();
    for issuer in issuers {
        let wait = guard(issuer.clone(), vec![Stmt::BulkWaitRead(0)]);
        if !waits.contains(&wait) {
            waits.push(wait);
        }
    }
    waits
}
