//! wgmma groups: one commit group per unrolled loop of wgmmas, and one group kept in flight
//! across k steps where an empty mbarrier frees the stage.

#[allow(unused_imports)]
use super::*;

/// In a loop whose body ends with `commit, wait_group 0, release the stage` (a stage tracked
/// by an empty mbarrier), the wait becomes `wait_group 1` and the release moves one iteration
/// later: the stage read by the previous iteration's group, whose wgmmas have finished, is
/// released while this iteration's group still runs, so the tensor cores never drain between
/// two k steps. After the loop, `wait_group 0` and the release of the last stage (after a
/// ping-pong turn pass that follows the loop, moved before them). (A stage
/// freed by a block barrier keeps `wait_group 0`: the barrier would not wait for the group.)
pub(super) fn keep_one_group_in_flight(mut body: Vec<Stmt>) -> Vec<Stmt> {
    crate::kir::for_each_block_mut(&mut body, &mut |block| {
        let mut out = Vec::with_capacity(block.len());
        let mut rest = block.drain(..).peekable();
        while let Some(s) = rest.next() {
            let s = match s {
                Stmt::Loop(mut l) => {
                    end_group_after_binding(&mut l);
                    Stmt::Loop(l)
                }
                other => other,
            };
            match s {
                Stmt::Loop(l) if releases_after_its_group(&l) => {
                    let mut drained = defer_release(l);
                    // A ping-pong group passes its turn once its last wgmmas are issued, not
                    // retired: the next group's first stage is another slot, and its wgmmas
                    // overlap this group's last ones.
                    if matches!(
                        rest.peek(),
                        Some(Stmt::Turn {
                            step: crate::kir::TurnStep::Pass,
                            ..
                        })
                    ) {
                        let pass = rest.next().expect("peeked");
                        drained.insert(1, pass);
                    }
                    out.extend(drained);
                }
                other => out.push(other),
            }
        }
        drop(rest);
        *block = out;
    });
    body
}

/// In a loop (not a binding) whose body ends with `binding { ..., commit, wait_group 0 },
/// arrive` (the products of consumer warp group `threadIdx.y` inside its binding), the commit
/// and the wait move out of the binding, before the arrive: a thread or block binding runs
/// once per thread, so this is the same program, and the loop then ends as
/// [`releases_after_its_group`] asks.
fn end_group_after_binding(l: &mut Loop) {
    let n = l.body.len();
    if n < 2 || l.parallel.is_hw() || !matches!(l.body[n - 1], Stmt::MbarArrive { .. }) {
        return;
    }
    let Stmt::Loop(binding) = &mut l.body[n - 2] else {
        return;
    };
    let m = binding.body.len();
    if binding.parallel.is_hw()
        && m >= 2
        && binding.body[m - 2] == Stmt::WgmmaCommit
        && binding.body[m - 1] == Stmt::WgmmaWait(0)
    {
        let end: Vec<Stmt> = binding.body.drain(m - 2..).collect();
        l.body.splice(n - 1..n - 1, end);
    }
}

/// A loop (not a thread or block binding) whose body ends with `commit, wait_group 0, arrive`.
fn releases_after_its_group(l: &Loop) -> bool {
    let n = l.body.len();
    n >= 3
        && !l.parallel.is_hw()
        && l.body[n - 3] == Stmt::WgmmaCommit
        && l.body[n - 2] == Stmt::WgmmaWait(0)
        && matches!(l.body[n - 1], Stmt::MbarArrive { .. })
}

/// The loop with `wait_group 1` and the previous iteration's release, then the drain after it.
fn defer_release(mut l: Loop) -> Vec<Stmt> {
    let Some(Stmt::MbarArrive {
        bars,
        slot,
        per_warp,
    }) = l.body.pop()
    else {
        unreachable!("releases_after_its_group checked the tail")
    };
    let minus_one = |v: Val| Val::Sub(Box::new(v), Box::new(Val::Int(1)));
    let var = Val::Var(l.var.clone());
    let previous = slot.subst(&l.var, &minus_one(var.clone()));
    let last = slot.subst(&l.var, &minus_one(l.extent.clone()));
    let release = |cond: Val, slot: Val| Stmt::If {
        cond,
        then: vec![Stmt::MbarArrive {
            bars,
            slot,
            per_warp,
        }],
        els: Vec::new(),
    };
    let n = l.body.len();
    l.body[n - 1] = Stmt::WgmmaWait(1);
    l.body.push(release(Val::lt(Val::Int(0), var), previous));
    let extent = l.extent.clone();
    vec![
        Stmt::Loop(l),
        Stmt::WgmmaWait(0),
        release(Val::lt(Val::Int(0), extent), last),
    ]
}

/// One group per unrolled loop of wgmmas: an unrolled loop (or a thread or block index
/// binding) whose body is `fence, wgmmas, commit, wait` becomes `fence, loop { wgmmas },
/// commit, wait`, innermost loops first.
pub(super) fn batch(mut body: Vec<Stmt>) -> Vec<Stmt> {
    crate::kir::for_each_block_mut(&mut body, &mut |block| {
        let mut out = Vec::with_capacity(block.len());
        for s in block.drain(..) {
            match s {
                Stmt::Loop(mut l) if one_group(&l) => {
                    let n = l.body.len();
                    l.body = l.body.drain(1..n - 2).collect();
                    out.push(Stmt::WgmmaFence);
                    out.push(Stmt::Loop(l));
                    out.push(Stmt::WgmmaCommit);
                    out.push(Stmt::WgmmaWait(0));
                }
                other => out.push(other),
            }
        }
        *block = out;
    });
    body
}

/// An unrolled loop (or binding) whose body is one group: `fence, wgmmas, commit, wait 0`.
fn one_group(l: &Loop) -> bool {
    let n = l.body.len();
    n >= 4
        && (l.parallel == ParallelType::Unroll || l.parallel.is_hw())
        && l.body[0] == Stmt::WgmmaFence
        && l.body[n - 2] == Stmt::WgmmaCommit
        && l.body[n - 1] == Stmt::WgmmaWait(0)
        && l.body[1..n - 2]
            .iter()
            .all(|s| !matches!(s, Stmt::WgmmaFence | Stmt::WgmmaCommit | Stmt::WgmmaWait(_)))
}
