//! Warp specialization, for the `tma` and `circular_buffer` passes: planning (the padded block,
//! one 128-thread producer warp group along the specialised thread dim, the warp-uniform
//! producer condition, one full/empty mbarrier pair per producer role, the `setmaxnreg`
//! register rules) and the transformation into `WarpRoles`: the producer branch walks, per role,
//! the projection of the loop nest that leads to its loads, with perfect serial nests merged
//! into one flat loop over their linear count (a persistent kernel's (tile, k) pairs), run by
//! one elected lane (wait empty, `expect_tx`, copies); the consumer branch is the kernel without
//! the copies (wait every role's full barrier, compute, release every empty barrier per warp).
//! A flat loop carries the merged loops' indices as counters (`Loop::digits`: the innermost
//! steps at the end of each iteration and carries into the next), so no index is divided out
//! of the linear count.
//!
//! Ping-pong (`WsPlan::turns` > 1: the loads sit inside the consumers' loop over the
//! specialised dim): the producer walks that loop serially within its linear count, each stage
//! is released by one group's warps, and the groups hand a turn on around the buffered loop
//! (`Stmt::Turn`: `bar.sync` on the group's turn barrier before, `bar.arrive` on the next
//! group's after; ids from `target::turn_barrier`). The last group passes the first turn at
//! entry and group 0 takes the last at exit, so every barrier phase completes and no group
//! waits on a stage more than one ring phase ahead of the producer. At most
//! `target::MAX_TURNS` groups, each of whole warps.
//!
//! `turns=products` (`WsPlan::product_turns`): groups along the specialised dim that share
//! every stage (`turns` is 1) take turns issuing their tensor-core products instead; planned
//! and checked here, placed by the `mma` pass around each wgmma group.

use super::stage::{contains_copy, fills, issue, linear, shift_reads};
#[allow(unused_imports)]
use super::*;
use crate::kir::{TurnStep, VisitorMut, WarpRoles};
use std::convert::Infallible;

/// The block of a warp-specialized kernel, planned once for every pipe that is: the consumers'
/// thread dims, the producer warp group padded along the specialised one, and where its warps
/// are in the block.
#[derive(Clone, Debug)]
pub(crate) struct WsBlock {
    spec: crate::fusion::WarpSpecialized,
    /// The consumers' block (before the padding).
    dims: [i64; 3],
    /// Threads the producer warp group adds along the specialised dim per period.
    pad: i64,
    /// Consecutive threads along the dims before the specialised one (x before y).
    inner: i64,
    /// Warps per period of the specialised dim, the consumers' warps first, and the producer's.
    period: i64,
    base: i64,
    chunk: i64,
    is_producer: Val,
    consumer_threads: i64,
}

impl WsBlock {
    /// Plans the block for `spec` (the first warp-specialized pipe's, `name` its first cache).
    pub(crate) fn plan(
        k: &Kernel,
        spec: crate::fusion::WarpSpecialized,
        diag: &dyn Fn(String) -> Diagnostic,
    ) -> Result<WsBlock, Diagnostic> {
        let err = |m: String| Err(diag(m));
        let d = spec.on.dim().expect("a thread dim");
        let mut dims = [0i64; 3];
        for (i, b) in k.block.iter().enumerate() {
            match b.as_const() {
                Some(v) => dims[i] = v,
                None => {
                    return err(format!(
                        "warp_specialized({}) needs a block size known at compile time, and thread dim {} is {b}: split the axes bound to threads by constants",
                        spec.on,
                        ["x", "y", "z"][i]
                    ))
                }
            }
        }
        let others: i64 = (0..3).filter(|&i| i != d).map(|i| dims[i]).product();
        if crate::target::WARPGROUP_THREADS % others != 0 {
            return err(format!(
                "warp_specialized({}) adds a 128-thread producer warp group along {}, so the other thread dims must multiply to a divisor of 128; they multiply to {others}",
                spec.on,
                ["x", "y", "z"][d]
            ));
        }
        let pad = crate::target::WARPGROUP_THREADS / others;
        let consumer_threads: i64 = dims.iter().product();
        // Warps in linear thread order (x fastest): one period of the specialised dim holds the
        // consumer part then the producer part; each part must be whole warps.
        let inner: i64 = dims[..d].iter().product();
        let (consumer_part, producer_part) = (inner * dims[d], inner * pad);
        if consumer_part % crate::target::WARP_THREADS != 0
            || producer_part % crate::target::WARP_THREADS != 0
        {
            return err(format!(
                "warp_specialized({}): each warp must have one role, but along {} the consumers take {consumer_part} and the producers {producer_part} consecutive threads (not multiples of 32)",
                spec.on,
                ["x", "y", "z"][d]
            ));
        }
        let period = (consumer_part + producer_part) / crate::target::WARP_THREADS;
        let base = consumer_part / crate::target::WARP_THREADS;
        let chunk = producer_part / crate::target::WARP_THREADS;
        let is_producer = if d == 2 {
            Val::lt(Val::Int(base - 1), Val::Warp)
        } else {
            Val::lt(Val::Int(base - 1), Val::rem(Val::Warp, Val::Int(period)))
        };
        let threads = consumer_threads + crate::target::WARPGROUP_THREADS;
        if let Some((p, c)) = spec.registers {
            crate::target::check_register_sharing(p, c, threads, crate::target::WARPGROUP_THREADS)
                .map_err(diag)?;
        }
        if threads > crate::target::MAX_THREADS_PER_BLOCK {
            return err(format!(
                "warp_specialized adds 128 producer threads to the {consumer_threads} of the block: {threads} is more than 1024"
            ));
        }
        Ok(WsBlock {
            spec,
            dims,
            pad,
            inner,
            period,
            base,
            chunk,
            is_producer,
            consumer_threads,
        })
    }

    /// Pads the kernel's block with the producer warp group and sets its register sharing.
    pub(crate) fn apply(&self, k: &mut Kernel) {
        let d = self.spec.on.dim().expect("a thread dim");
        k.block[d] = SizeExpr::Const(self.dims[d] + self.pad);
        k.register_sharing = self.spec.registers;
    }

    /// Checks that a second warp-specialized pipe's `spec` splits the block alike.
    pub(crate) fn check_same(
        &self,
        spec: crate::fusion::WarpSpecialized,
        diag: &dyn Fn(String) -> Diagnostic,
    ) -> Result<(), Diagnostic> {
        if spec.on != self.spec.on {
            return Err(diag(format!(
                "warp specialization splits the block once: this loop is specialised on {} and another on {}; specialise both on one thread dim",
                spec.on, self.spec.on
            )));
        }
        if spec.registers.is_some() && spec.registers != self.spec.registers {
            return Err(diag(format!(
                "warp specialization splits the block once: this loop asks for registers={} and another for {}; give both the same (or one of them none)",
                registers_text(spec.registers),
                registers_text(self.spec.registers)
            )));
        }
        Ok(())
    }
}

/// `[producer, consumer]` as written, or `none`.
fn registers_text(r: Option<(u32, u32)>) -> String {
    r.map_or("none".into(), |(p, c)| format!("[{p}, {c}]"))
}

/// Gives every producer role (warp) of `pipe` its own full and empty barriers, in the block
/// `block` planned (and padded) once for every warp-specialized pipe.
pub(crate) fn plan_ws(
    cx: &mut Ctx,
    plan: &PipelinePlan,
    k: &mut Kernel,
    pipe: &Pipe,
    spec: crate::fusion::WarpSpecialized,
    block: &WsBlock,
) -> Result<WsPlan, Diagnostic> {
    let f = cx.fusion;
    let first = &f.tensors[plan.loads[pipe.members[0]].tensor];
    let span = first.circular.map(|c| c.span);
    let diag = |m: String| Diagnostic::new(format!("`{}`: {m}", first.name), span);
    let err = |m: String| Err(diag(m));
    let d = spec.on.dim().expect("a thread dim");
    let WsBlock {
        dims,
        inner,
        period,
        base,
        chunk,
        consumer_threads,
        ..
    } = *block;
    // Ping-pong: the buffered loop inside the consumers' loop over the specialised dim.
    let buffer = cx.layout.tensor_buffer[&plan.loads[pipe.members[0]].tensor];
    let around = super::loops_around_write(&k.body, buffer).unwrap_or_default();
    let outside = around
        .iter()
        .position(|(key, _)| Some(*key) == pipe.loop_key)
        .unwrap_or(around.len());
    let turns = if around[..outside].iter().any(|(_, p)| *p == spec.on) {
        dims[d]
    } else {
        1
    };
    if turns > crate::target::MAX_TURNS {
        return err(format!(
            "the loads are inside the consumers' loop over {}, so its {turns} thread groups would take turns with the stages (ping-pong); at most {} groups can (each has a turn barrier)",
            spec.on,
            crate::target::MAX_TURNS
        ));
    }
    // Each group releases its stages warp by warp, so a warp may not span two groups.
    if turns > 1 && inner % crate::target::WARP_THREADS != 0 {
        return err(format!(
            "the loads are inside the consumers' loop over {}, so its {turns} thread groups take turns with the stages (ping-pong), and each group releases a stage warp by warp; but a group has {inner} consecutive threads, not whole warps",
            spec.on
        ));
    }
    if spec.product_turns {
        check_product_turns(f, spec, turns, dims[d], consumer_threads).map_err(diag)?;
    }
    // Roles: one per producer warp named by the loads (warp, its loads).
    let mut warps: Vec<(u32, Vec<usize>)> = Vec::new();
    for &m in &pipe.members {
        let w = plan.loads[m].ws().map(|w| w.warp).unwrap_or(0);
        match warps.iter_mut().find(|(warp, _)| *warp == w) {
            Some((_, members)) => members.push(m),
            None => warps.push((w, vec![m])),
        }
    }
    warps.sort_by_key(|&(w, _)| w);
    let mut roles: Vec<WsRole> = Vec::new();
    for (w, members) in warps {
        let names: Vec<&str> = members
            .iter()
            .map(|&m| f.tensors[plan.loads[m].tensor].name.as_str())
            .collect();
        let base_name = names.join("_");
        let full = k.push_mbarriers(MbarArray {
            name: cx.fresh_name(&format!("{base_name}_full")),
            count: pipe.stages,
            arrivals: 1,
            smem_offset: None,
            cluster_wide: false,
        });
        let empty = k.push_mbarriers(MbarArray {
            name: cx.fresh_name(&format!("{base_name}_empty")),
            count: pipe.stages,
            // Every consumer warp releases each stage; with turns, one group's warps.
            arrivals: consumer_threads / crate::target::WARP_THREADS / turns,
            smem_offset: None,
            cluster_wide: false,
        });
        roles.push(WsRole {
            warp: w,
            block_warp: (w as i64 / chunk) * period + base + w as i64 % chunk,
            full,
            empty,
            members,
        });
    }
    Ok(WsPlan {
        spec,
        is_producer: block.is_producer.clone(),
        consumer_threads,
        turns,
        product_turns: spec.product_turns.then_some(dims[d]),
        roles,
    })
}

/// `turns=products`: the `groups` consumer groups along the specialised dim share every stage
/// (`stage_turns` is 1), there are two to four of them, each of whole warps (a named barrier
/// counts warps), and the kernel has tensor-core products to take turns with.
fn check_product_turns(
    f: &crate::fusion::Fusion,
    spec: crate::fusion::WarpSpecialized,
    stage_turns: i64,
    groups: i64,
    consumer_threads: i64,
) -> Result<(), String> {
    let on = spec.on;
    if stage_turns > 1 {
        return Err(format!(
            "turns=products: the loads are inside the consumers' loop over {on}, so its groups already take turns with whole stages (ping-pong over tiles); bind {on} inside the buffered loop for groups that share every stage"
        ));
    }
    if !(2..=crate::target::MAX_TURNS).contains(&groups) {
        return Err(format!(
            "turns=products: the consumers have {groups} thread group(s) along {on}; two to {} can take turns (each has a turn barrier)",
            crate::target::MAX_TURNS
        ));
    }
    let threads = consumer_threads / groups;
    if threads % crate::target::WARP_THREADS != 0 {
        return Err(format!(
            "turns=products: a consumer group along {on} has {threads} threads, not whole warps (a named barrier counts warps)"
        ));
    }
    let products = f.tensors.iter().any(|t| {
        t.loop_domain
            .iter()
            .any(|&id| f.ids[id].parallel == ParallelType::Mma)
    });
    if !products {
        return Err(
            "turns=products orders the consumer groups' tensor-core products, and the kernel has none (no Mma axis)".into(),
        );
    }
    Ok(())
}

/// Splits the kernel into the producer warp group and the consumers around the
/// warp-specialized pipes `pipes` (one per buffered loop; their producer warps differ).
/// Producer role `r`: one elected lane of its warp walks the loops that enclose its loads
/// (projected from the kernel: every other statement dropped) and, for each iteration `i` of
/// the buffered loop, waits until slot `i % stages` is empty, announces its bytes on its full
/// barrier and issues its copies. Consumers: the kernel without the copies; each iteration of
/// a buffered loop waits on the full barrier of every role of its pipe and releases every
/// empty one (lane 0 of each warp). Slot and parity come from the same linear iteration on
/// both sides.
pub(crate) fn warp_specialize(
    cx: &Ctx,
    plan: &PipelinePlan,
    body: Vec<Stmt>,
    pipes: &[usize],
) -> Result<WarpRoles, Diagnostic> {
    let f = cx.fusion;
    let first = &plan.pipes[pipes[0]];
    let lead = first.ws.as_ref().expect("a warp-specialized pipe");
    let span = f.tensors[plan.loads[first.members[0]].tensor].span;
    if contains_reduce_over(&body, lead.spec.on) {
        let name = &f.tensors[plan.loads[first.members[0]].tensor].name;
        return Err(Diagnostic::new(
            format!(
                "`{name}` is warp-specialized on {} and the kernel reduces across {}: the producer warps would take part; specialise another thread dim",
                lead.spec.on, lead.spec.on
            ),
            span,
        ));
    }
    let mut producer = Vec::new();
    let mut consumer = body;
    for &p in pipes {
        let pipe = &plan.pipes[p];
        let ws = pipe.ws.as_ref().expect("a warp-specialized pipe");
        producer.extend(producer_roles(cx, plan, pipe, ws, &consumer)?);
        consume_pipe(cx, plan, pipe, ws, &mut consumer)?;
    }
    let mut registers = None;
    for &p in pipes {
        let ws = plan.pipes[p].ws.as_ref().expect("a warp-specialized pipe");
        registers = registers.or(ws.spec.registers);
        for role in &ws.roles {
            let reads = role.members.iter().any(|&m| {
                let b = cx.layout.tensor_buffer[&plan.loads[m].tensor];
                reads_buffer(&consumer, b)
            });
            if !reads {
                let t = &f.tensors[plan.loads[role.members[0]].tensor].name;
                return Err(Diagnostic::new(
                    format!(
                        "producer warp {} loads `{t}`, which no consumer reads",
                        role.warp
                    ),
                    span,
                ));
            }
        }
    }
    Ok(WarpRoles {
        is_producer: lead.is_producer.clone(),
        producer,
        consumer,
        registers,
        consumer_threads: lead.consumer_threads,
    })
}

/// The producer warps of `pipe`: each role's elected lane walks its projection of `body` (the
/// kernel before this pipe's loads leave the consumers).
fn producer_roles(
    cx: &Ctx,
    plan: &PipelinePlan,
    pipe: &Pipe,
    ws: &WsPlan,
    body: &[Stmt],
) -> Result<Vec<Stmt>, Diagnostic> {
    let span = cx.fusion.tensors[plan.loads[pipe.members[0]].tensor].span;
    let mut producer = Vec::new();
    for role in &ws.roles {
        let buffers: Vec<BufferId> = role
            .members
            .iter()
            .map(|&m| cx.layout.tensor_buffer[&plan.loads[m].tensor])
            .collect();
        let nest = flatten_serial_nests(project(cx, plan, pipe, role, &buffers, body));
        if !nest.iter().any(contains_copy) {
            return Err(Diagnostic::new(
                format!(
                    "internal: the loads of producer warp {} were not found",
                    role.warp
                ),
                span,
            ));
        }
        producer.push(Stmt::If {
            cond: Val::eq(Val::Warp, Val::Int(role.block_warp)),
            then: vec![Stmt::If {
                cond: Val::Elect,
                then: nest,
                els: Vec::new(),
            }],
            els: Vec::new(),
        });
    }
    Ok(producer)
}

/// Removes `pipe`'s loads from the consumers' code `consumer`, with the waits and releases of
/// its stages, and (ping-pong over tiles) the turns around its buffered loop.
fn consume_pipe(
    cx: &Ctx,
    plan: &PipelinePlan,
    pipe: &Pipe,
    ws: &WsPlan,
    consumer: &mut Vec<Stmt>,
) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let name = &f.tensors[plan.loads[pipe.members[0]].tensor].name;
    let span = f.tensors[plan.loads[pipe.members[0]].tensor].span;
    let all: Vec<BufferId> = pipe
        .members
        .iter()
        .map(|&m| cx.layout.tensor_buffer[&plan.loads[m].tensor])
        .collect();
    let mut walk = Consume {
        cx,
        plan,
        pipe,
        ws,
        buffers: &all,
        lin: vec![(Val::Int(0), false)],
        turns: vec![Vec::new()],
        found: false,
    };
    let Ok(()) = crate::kir::visit_mut(consumer, &mut walk);
    if !walk.found {
        return Err(Diagnostic::new(
            format!("the loads of `{name}` are not inside the serial loop it is buffered over"),
            span,
        ));
    }
    if ws.turns > 1 {
        // The first turn is group 0's: the last group passes it at the start, and group 0
        // takes the last group's final pass at the end, so every barrier phase completes.
        let group = Val::Hw(ws.spec.on);
        consumer.insert(
            0,
            Stmt::If {
                cond: Val::eq(group.clone(), Val::Int(ws.turns - 1)),
                then: vec![turn(ws, TurnStep::Pass)],
                els: Vec::new(),
            },
        );
        consumer.push(Stmt::If {
            cond: Val::eq(group, Val::Int(0)),
            then: vec![turn(ws, TurnStep::Wait)],
            els: Vec::new(),
        });
    }
    Ok(())
}

pub(crate) fn contains_reduce_over(body: &[Stmt], on: ParallelType) -> bool {
    let d = on.dim().expect("a thread dim");
    // A grid reduction's block reduction runs over the consumer threads only
    // (`hf_consumers_reduce`, `passes/grid.rs`).
    let mut grid = Vec::new();
    crate::kir::for_each_stmt(body, &mut |s| {
        if let Stmt::GridReduce(g) = s {
            grid.push(g.acc.clone());
        }
    });
    let mut found = false;
    crate::kir::for_each_stmt(body, &mut |s| {
        found |= matches!(s, Stmt::BlockReduce { acc, dims, .. } if dims[d] && !grid.contains(acc))
            || matches!(s, Stmt::BlockWelford { dims, .. } if dims[d]);
    });
    found
}

pub(crate) fn reads_buffer(body: &[Stmt], b: BufferId) -> bool {
    let mut found = false;
    crate::kir::for_each_stmt(body, &mut |s| match s {
        Stmt::Compute(c) => c.value.for_each_read(&mut |a| found |= a.buffer == b),
        Stmt::TmaStore(t) => found |= t.src.buffer == b,
        _ => {}
    });
    found
}

/// Turns every perfect nest of serial loops (a loop whose whole body is one serial loop) into
/// one loop over the linear iteration `outer * inner_extent + inner`, which carries the nest's
/// indices as its digits (`Loop::digits`): a persistent producer walks one flat sequence of
/// (tile, block) pairs, and the body reads each index as before, stepped by a carry at the end
/// of an iteration instead of divided out of the linear count. (Division by run-time extents
/// put about a hundred instructions, reciprocal and all, on the one producer thread's path for
/// each stage; and how ptxas scheduled them moved 4096^3 by up to 5%: docs/benchmarks.md.)
pub(crate) fn flatten_serial_nests(mut nest: Vec<Stmt>) -> Vec<Stmt> {
    crate::kir::rewrite_post(&mut nest, &mut |s| {
        vec![match s {
            Stmt::Loop(mut l) => {
                let merge = l.parallel == ParallelType::Serial
                    && l.digits.is_empty()
                    && matches!(&l.body[..], [Stmt::Loop(inner)]
                        if inner.parallel == ParallelType::Serial && !inner.extent.mentions(&l.var));
                if !merge {
                    return vec![Stmt::Loop(l)];
                }
                let Some(Stmt::Loop(inner)) = l.body.pop() else {
                    unreachable!("checked above")
                };
                let mut digits = vec![crate::kir::Digit {
                    var: l.var.clone(),
                    extent: l.extent.clone(),
                }];
                if inner.digits.is_empty() {
                    digits.push(crate::kir::Digit {
                        var: inner.var.clone(),
                        extent: inner.extent.clone(),
                    });
                } else {
                    digits.extend(inner.digits);
                }
                Stmt::Loop(Loop {
                    key: inner.key,
                    var: format!("{}_{}", l.var, inner.var),
                    extent: Val::mul(l.extent, inner.extent),
                    parallel: ParallelType::Serial,
                    body: inner.body,
                    digits,
                })
            }
            other => other,
        }]
    });
    nest
}

/// The producer's code for `role`'s loads of pipe `pipe` (a walk of a copy of the consumers'
/// code): the loops and conditionals that fill `buffers`, with the allocations of the buffers
/// and the `let`s; in the buffered loop, the copies' issue into their stage. A thread-bound
/// loop stays a binding; a serial loop, or the consumers' loop over the specialised dim
/// (ping-pong), is walked serially, filling each group's stages in turn.
struct Project<'s, 'c> {
    cx: &'s Ctx<'c>,
    plan: &'s PipelinePlan,
    pipe: &'s Pipe,
    role: &'s WsRole,
    buffers: &'s [BufferId],
    /// Per loop around the statement walked, the linear iteration of the serial loops
    /// entered so far and whether there is one; the first entry is the kernel's.
    lin: Vec<(Val, bool)>,
}

impl VisitorMut for Project<'_, '_> {
    type Error = Infallible;

    fn splice(&mut self, s: &mut Stmt, _at: usize) -> Result<Option<Vec<Stmt>>, Infallible> {
        let kept = match s {
            Stmt::Alloc(b) => self.buffers.contains(b),
            Stmt::Let { .. } => true,
            Stmt::Loop(_) | Stmt::If { .. } => fills(s, self.buffers),
            _ => false,
        };
        Ok((!kept).then(Vec::new))
    }

    fn stmt(&mut self, s: &mut Stmt, _at: usize) -> Result<Flow, Infallible> {
        let (cx, plan, pipe, buffers) = (self.cx, self.plan, self.pipe, self.buffers);
        let Stmt::Loop(l) = s else {
            return Ok(match s {
                Stmt::If { .. } => Flow::Descend,
                _ => Flow::Skip,
            });
        };
        if Some(l.key) == pipe.loop_key {
            let (outer, in_loop) = self.lin.last().expect("the kernel's entry");
            let v = Val::Var(l.var.clone());
            let lin = plan.buffered_linear(outer, l, &v, *in_loop);
            let slot = Val::rem(lin.clone(), Val::Int(pipe.stages));
            let loads: Vec<Stmt> = l
                .body
                .iter()
                .filter(|s| matches!(s, Stmt::TmaLoad(t) if buffers.contains(&t.dst.buffer)))
                .cloned()
                .collect();
            l.body
                .retain(|s| matches!(s, Stmt::Alloc(b) if buffers.contains(b)));
            l.body.push(issue(
                cx,
                plan,
                pipe.stages,
                self.role.full,
                Some(self.role.empty),
                &loads,
                &slot,
                &lin,
                &Val::True,
            ));
            l.digits.clear();
            return Ok(Flow::Skip);
        }
        l.digits.clear();
        if !(l.parallel.is_hw() && Some(l.parallel) != turn_dim(pipe)) {
            l.parallel = ParallelType::Serial;
        }
        Ok(Flow::Descend)
    }

    fn enter(&mut self, s: &Stmt, _body: usize) -> Result<Flow, Infallible> {
        if let Stmt::Loop(l) = s {
            let (outer, in_loop) = self.lin.last().expect("the kernel's entry");
            // A binding keeps the linear iteration; a loop walked serially extends it.
            let inner = if l.parallel.is_hw() {
                (outer.clone(), *in_loop)
            } else {
                let lin = linear(outer, &l.extent, &Val::Var(l.var.clone()), *in_loop);
                (lin, true)
            };
            self.lin.push(inner);
        }
        Ok(Flow::Descend)
    }

    fn leave(&mut self, s: &mut Stmt, _body: usize) -> Result<(), Infallible> {
        if let Stmt::Loop(_) = s {
            self.lin.pop();
        }
        Ok(())
    }
}

/// [`Project`] of `body` for `role`.
fn project(
    cx: &Ctx,
    plan: &PipelinePlan,
    pipe: &Pipe,
    role: &WsRole,
    buffers: &[BufferId],
    body: &[Stmt],
) -> Vec<Stmt> {
    let mut nest = body.to_vec();
    let mut walk = Project {
        cx,
        plan,
        pipe,
        role,
        buffers,
        lin: vec![(Val::Int(0), false)],
    };
    let Ok(()) = crate::kir::visit_mut(&mut nest, &mut walk);
    nest
}

/// The thread dim whose groups take turns in pipe `pipe` (ping-pong), if they do.
fn turn_dim(pipe: &Pipe) -> Option<ParallelType> {
    pipe.ws.as_ref().filter(|w| w.turns > 1).map(|w| w.spec.on)
}

/// Removes the loads of the pipe from the consumers' code and makes each iteration of the
/// buffered loop wait on every role's full barrier and release every role's empty barrier (a
/// walk of the consumers' code through its loops and conditionals).
struct Consume<'s, 'c> {
    cx: &'s Ctx<'c>,
    plan: &'s PipelinePlan,
    pipe: &'s Pipe,
    ws: &'s WsPlan,
    buffers: &'s [BufferId],
    /// Per loop around the statement walked, the linear iteration of the serial loops
    /// entered so far and whether there is one; the first entry is the kernel's.
    lin: Vec<(Val, bool)>,
    /// Per block entered, the indices of its buffered loops (where the turns go).
    turns: Vec<Vec<usize>>,
    found: bool,
}

impl Consume<'_, '_> {
    /// Whether `l` is the buffered loop with the pipe's loads.
    fn buffered(&self, l: &Loop) -> bool {
        Some(l.key) == self.pipe.loop_key
            && l.body
                .iter()
                .any(|s| matches!(s, Stmt::TmaLoad(t) if self.buffers.contains(&t.dst.buffer)))
    }

    /// The buffered loop `l`: its loads go, each iteration waits for its stage and releases it.
    fn consume(&mut self, l: &mut Loop) {
        let (cx, plan, pipe, buffers) = (self.cx, self.plan, self.pipe, self.buffers);
        let (outer, in_loop) = self.lin.last().expect("the kernel's entry");
        let v = Val::Var(l.var.clone());
        let lin = plan.buffered_linear(outer, l, &v, *in_loop);
        let slot = Val::rem(lin.clone(), Val::Int(pipe.stages));
        let parity = Val::rem(Val::div(lin, Val::Int(pipe.stages)), Val::Int(2));
        l.body
            .retain(|s| !matches!(s, Stmt::TmaLoad(t) if buffers.contains(&t.dst.buffer)));
        let mut allocs = Vec::new();
        l.body.retain(|s| {
            let keep = !matches!(s, Stmt::Alloc(b) if buffers.contains(b));
            if !keep {
                allocs.push(s.clone());
            }
            keep
        });
        for &m in &pipe.members {
            let b = cx.layout.tensor_buffer[&plan.loads[m].tensor];
            let stage = Val::Int(plan.loads[m].stage_elems.expect("copies have a stage size"));
            shift_reads(&mut l.body, b, &Val::mul(slot.clone(), stage));
        }
        let mut it: Vec<Stmt> = allocs;
        it.extend(self.ws.roles.iter().map(|r| Stmt::MbarWait {
            bars: r.full,
            slot: slot.clone(),
            parity: parity.clone(),
        }));
        it.append(&mut l.body);
        it.extend(self.ws.roles.iter().map(|r| Stmt::MbarArrive {
            bars: r.empty,
            slot: slot.clone(),
            per_warp: true,
        }));
        l.body = it;
    }
}

impl VisitorMut for Consume<'_, '_> {
    type Error = Infallible;

    fn stmt(&mut self, s: &mut Stmt, at: usize) -> Result<Flow, Infallible> {
        match s {
            Stmt::Loop(l) if self.buffered(l) => {
                self.found = true;
                self.turns.last_mut().expect("a block entered").push(at);
                self.consume(l);
                Ok(Flow::Skip)
            }
            Stmt::Loop(_) | Stmt::If { .. } => Ok(Flow::Descend),
            _ => Ok(Flow::Skip),
        }
    }

    fn enter(&mut self, s: &Stmt, _body: usize) -> Result<Flow, Infallible> {
        if let Stmt::Loop(l) = s {
            let (outer, in_loop) = self.lin.last().expect("the kernel's entry");
            let inner = if l.parallel.is_hw() && Some(l.parallel) != turn_dim(self.pipe) {
                (outer.clone(), *in_loop)
            } else {
                let lin = linear(outer, &l.extent, &Val::Var(l.var.clone()), *in_loop);
                (lin, true)
            };
            self.lin.push(inner);
        }
        self.turns.push(Vec::new());
        Ok(Flow::Descend)
    }

    fn leave(&mut self, s: &mut Stmt, _body: usize) -> Result<(), Infallible> {
        if let Stmt::Loop(_) = s {
            self.lin.pop();
        }
        Ok(())
    }

    /// Ping-pong: each group runs the buffered loop in its turn, so that no group waits on a
    /// stage more than one ring ahead of the producer (a parity wait cannot tell phases two
    /// apart): the turn passes once the group has waited on all its stages.
    fn block(&mut self, body: &mut Vec<Stmt>) -> Result<(), Infallible> {
        let turns = self.turns.pop().expect("a block entered");
        if self.ws.turns > 1 {
            for &at in turns.iter().rev() {
                body.insert(at + 1, turn(self.ws, TurnStep::Pass));
                body.insert(at, turn(self.ws, TurnStep::Wait));
            }
        }
        Ok(())
    }
}

/// A turn hand-over among the consumer groups of `ws` (ping-pong).
pub(crate) fn turn(ws: &WsPlan, step: TurnStep) -> Stmt {
    Stmt::Turn {
        step,
        on: ws.spec.on,
        groups: ws.turns,
        threads: ws.consumer_threads / ws.turns,
    }
}
