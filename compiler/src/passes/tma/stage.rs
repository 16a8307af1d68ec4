//! The parts of a pipeline stage that both of its schedules build from: the plain
//! circular buffer (`circular.rs`) and the warp-specialized roles (`warp_specialize.rs`). Which
//! buffers a statement fills, whether it holds a copy, the linear iteration over nested serial
//! loops, the issuing thread's fill of one slot (wait for empty, `expect_tx`, the copies at the
//! stage's offset) and the shift of a stage's accesses to its slot.

#[allow(unused_imports)]
use super::*;

/// Buffers a statement writes (copies included).
pub(crate) fn writes(s: &Stmt, out: &mut Vec<BufferId>) {
    crate::kir::for_each_stmt(std::slice::from_ref(s), &mut |s| match s {
        Stmt::TmaLoad(t) => out.push(t.dst.buffer),
        Stmt::Compute(c) => out.push(c.out.buffer),
        _ => {}
    });
}

pub(crate) fn fills(s: &Stmt, buffers: &[BufferId]) -> bool {
    let mut w = Vec::new();
    writes(s, &mut w);
    w.iter().any(|b| buffers.contains(b))
}

pub(crate) fn contains_copy(s: &Stmt) -> bool {
    let mut found = false;
    crate::kir::for_each_stmt(std::slice::from_ref(s), &mut |s| {
        found |= matches!(s, Stmt::TmaLoad(_));
    });
    found
}

/// `outer * extent + v`, or `v` at the outermost serial loop.
pub(crate) fn linear(outer: &Val, extent: &Val, v: &Val, in_loop: bool) -> Val {
    if in_loop {
        Val::add(Val::mul(outer.clone(), extent.clone()), v.clone())
    } else {
        v.clone()
    }
}

/// The issuing thread fills `slot` (linear iteration `lin`) with `loads`: it waits until the
/// slot is empty (empty barriers), announces the bytes and issues the copies.
#[allow(clippy::too_many_arguments)]
pub(crate) fn issue(
    cx: &Ctx,
    plan: &PipelinePlan,
    stages: i64,
    full: MbarId,
    empty: Option<MbarId>,
    loads: &[Stmt],
    slot: &Val,
    lin: &Val,
    issuer: &Val,
) -> Stmt {
    let mut out = Vec::new();
    if let Some(empty) = empty {
        // Slot `lin % stages` was last read in iteration `lin - stages`: phase
        // `lin / stages - 1` of its empty barrier. A fresh barrier counts its preceding phase
        // (parity 1) as complete, so the first `stages` loads pass at once.
        out.push(Stmt::MbarWait {
            bars: empty,
            slot: slot.clone(),
            parity: Val::rem(
                Val::add(Val::div(lin.clone(), Val::Int(stages)), Val::Int(1)),
                Val::Int(2),
            ),
        });
    }
    let mut unconditional = Vec::new();
    let mut bytes = 0;
    for st in loads {
        let Stmt::TmaLoad(t) = st else { continue };
        let info = plan
            .loads
            .iter()
            .find(|i| cx.layout.tensor_buffer[&i.tensor] == t.dst.buffer)
            .expect("a load of the pipe");
        let mut t = t.clone();
        // The stage's start, plus the box's place in the stage (several boxes side by side).
        let stage = Val::mul(
            slot.clone(),
            Val::Int(info.stage_elems.expect("copies have a stage size")),
        );
        t.dst.index = Some(match t.dst.index.take() {
            None | Some(Val::Int(0)) => stage,
            Some(at) => Val::add(stage, at),
        });
        t.slot = slot.clone();
        if info.kind == LoadKind::Bulk {
            // A bulk copy must stay inside the tensor: a run outside it is not copied and
            // announces no bytes. (The innermost dimension is a multiple of the run.)
            let inside = Val::all(
                t.coords
                    .iter()
                    .zip(&info.global_dims)
                    .map(|(c, g)| Val::lt(c.clone(), Val::from_size(g))),
            );
            if inside != Val::True {
                // Announced before the arrival below, so the phase cannot complete without it.
                out.push(Stmt::If {
                    cond: inside,
                    then: vec![
                        Stmt::MbarExpectTx {
                            bars: full,
                            slot: slot.clone(),
                            bytes: info.bytes,
                        },
                        Stmt::TmaLoad(t),
                    ],
                    els: Vec::new(),
                });
                continue;
            }
        }
        // A multicast copy lands a slice in every CTA of the cluster, each CTA issuing one.
        bytes += t.bytes * t.multicast.unwrap_or(1);
        unconditional.push(Stmt::TmaLoad(t));
    }
    out.push(Stmt::MbarArriveExpectTx {
        bars: full,
        slot: slot.clone(),
        bytes,
    });
    out.extend(unconditional);
    guard(issuer.clone(), out)
}

/// Adds `offset` to every read of `buffer`.
pub(crate) fn shift_reads(body: &mut [Stmt], buffer: BufferId, offset: &Val) {
    crate::kir::for_each_stmt_mut(body, &mut |s| {
        match s {
            Stmt::Compute(c) => c.value.for_each_read_mut(&mut |a| {
                if a.buffer == buffer {
                    shift(a, offset)
                }
            }),
            Stmt::TmaStore(t) if t.src.buffer == buffer => shift(&mut t.src, offset),
            _ => {}
        }
        Flow::Descend
    });
}

pub(crate) fn shift(a: &mut Access, offset: &Val) {
    let i = a.index.take().unwrap_or(Val::Int(0));
    a.index = Some(Val::add(offset.clone(), i));
}

/// Adds `offset` to every plain write of `buffer`.
pub(crate) fn shift_writes(s: &mut Stmt, buffer: BufferId, offset: &Val) {
    crate::kir::for_each_stmt_mut(std::slice::from_mut(s), &mut |s| {
        if let Stmt::Compute(c) = s {
            if c.out.buffer == buffer {
                shift(&mut c.out, offset);
            }
        }
        Flow::Descend
    });
}
