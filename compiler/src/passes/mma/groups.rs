//! wgmma groups: one commit group per unrolled loop of wgmmas, one group kept in flight
//! across k steps where an empty mbarrier frees the stage, and the turns of consumer groups
//! that take turns issuing their groups (`turns=products`: a turn covers the groups a consumer
//! group issues back to back, both products of an overlapped attention iteration, `overlap.rs`).

#[allow(unused_imports)]
use super::*;
use crate::diag::Span;
use crate::kir::TurnStep;

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

/// A loop (not a thread or block binding) whose body ends with `commit, wait_group 0, arrive`
/// on a slot that moves with the loop (the peeled last tile of `overlap.rs`, a loop of one
/// iteration that names its tile with a `Let`, releases a slot of that tile, not of its own
/// variable, and has no later iteration to defer to).
fn releases_after_its_group(l: &Loop) -> bool {
    let n = l.body.len();
    n >= 3
        && !l.parallel.is_hw()
        && l.body[n - 3] == Stmt::WgmmaCommit
        && l.body[n - 2] == Stmt::WgmmaWait(0)
        && matches!(&l.body[n - 1], Stmt::MbarArrive { slot, .. } if slot.mentions(&l.var))
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

/// `turns=products` (ping-pong between consumer groups that share every stage): in the
/// consumers' branch, the wgmma groups a thread group issues back to back are issued in its
/// turn: `Turn::Wait` before the first one's fence, `Turn::Pass` to the next group right after
/// the last one's commit (the products are issued, not retired: the next group's products queue
/// behind them on the tensor cores while this group waits for its results and runs what
/// follows, the softmax). Back to back means that no `wgmma.wait_group` (nor anything else
/// holding a wgmma) comes between one group's commit and the next group's fence in the same
/// block: with `online_softmax(o, overlap=products)` that is S_j and P_{j-1} V_{j-1}, issued in
/// one turn as FlashAttention-3 does (the V stage's full wait and P's conversion between them
/// stay in the turn); without it each wgmma group is a turn of its own. The last group passes
/// the first turn at entry and group 0 takes the last group's final pass at exit, so every
/// barrier phase completes; each group issues the same products, so the turns alternate.
pub(super) fn take_product_turns(
    ws: &crate::passes::tma::WsPlan,
    span: Option<Span>,
    body: &mut [Stmt],
) -> Result<(), Diagnostic> {
    let mut done = None;
    crate::kir::for_each_stmt_mut(body, &mut |s| match s {
        Stmt::WarpRoles(w) if done.is_none() => {
            done = Some(turns_in_consumer(ws, &mut w.consumer));
            Flow::Skip
        }
        _ => Flow::Descend,
    });
    done.unwrap_or(Err("the consumers' branch was not found"))
        .map_err(|what| {
            Diagnostic::new(
                format!(
                    "internal: warp_specialized({}, turns=products): {what}",
                    ws.spec.on
                ),
                span,
            )
        })
}

/// [`take_product_turns`] in the consumers' branch.
fn turns_in_consumer(
    ws: &crate::passes::tma::WsPlan,
    consumer: &mut Vec<Stmt>,
) -> Result<(), &'static str> {
    let groups = ws.product_turns.expect("a plan with product turns");
    let on = ws.spec.on;
    let turn = |step| Stmt::Turn {
        step,
        on,
        groups,
        threads: ws.consumer_threads / groups,
    };
    crate::kir::for_each_block_mut(consumer, &mut |block| {
        let stmts = std::mem::take(block);
        let mut out = Vec::with_capacity(stmts.len() + 2);
        let mut in_turn = false;
        for (i, s) in stmts.iter().enumerate() {
            match s {
                Stmt::WgmmaFence if !in_turn => {
                    out.push(turn(TurnStep::Wait));
                    out.push(Stmt::WgmmaFence);
                    in_turn = true;
                }
                Stmt::WgmmaCommit => {
                    out.push(Stmt::WgmmaCommit);
                    in_turn = issues_next_group(&stmts[i + 1..]);
                    if !in_turn {
                        out.push(turn(TurnStep::Pass));
                    }
                }
                other => out.push(other.clone()),
            }
        }
        *block = out;
    });
    // In program order the turns alternate, each wait closed by a pass: a fence without its
    // commit (or the reverse) would leave a group waiting on a turn never passed.
    let mut steps = Vec::new();
    crate::kir::for_each_stmt(consumer, &mut |s| {
        if let Stmt::Turn { step, .. } = s {
            steps.push(*step);
        }
    });
    let alternate = !steps.is_empty()
        && steps.len() % 2 == 0
        && steps
            .chunks(2)
            .all(|p| p == [TurnStep::Wait, TurnStep::Pass]);
    if !alternate {
        return Err("the consumers' wgmma fences and commits do not pair up in program order");
    }
    let group = Val::Hw(on);
    consumer.insert(
        0,
        Stmt::If {
            cond: Val::eq(group.clone(), Val::Int(groups - 1)),
            then: vec![turn(TurnStep::Pass)],
            els: Vec::new(),
        },
    );
    consumer.push(Stmt::If {
        cond: Val::eq(group, Val::Int(0)),
        then: vec![turn(TurnStep::Wait)],
        els: Vec::new(),
    });
    Ok(())
}

/// Whether the statements after a wgmma group's commit issue the next group before waiting for
/// any: the first of them that holds a wgmma statement is the next group's fence, in the same
/// block (one in a nested block, or a `wait_group`, ends the turn).
fn issues_next_group(rest: &[Stmt]) -> bool {
    let holds_wgmma = |s: &Stmt| {
        crate::kir::any_stmt(std::slice::from_ref(s), &mut |x| {
            matches!(
                x,
                Stmt::Wgmma(_) | Stmt::WgmmaFence | Stmt::WgmmaCommit | Stmt::WgmmaWait(_)
            )
        })
    };
    rest.iter().find(|s| holds_wgmma(s)) == Some(&Stmt::WgmmaFence)
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
