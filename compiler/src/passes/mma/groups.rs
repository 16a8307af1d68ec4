//! wgmma groups: one commit group per unrolled loop of wgmmas, and one group kept in flight
//! across k steps where an empty mbarrier frees the stage.

#[allow(unused_imports)]
use super::*;

/// In a loop whose body ends with `commit, wait_group 0, release the stage` (a stage tracked
/// by an empty mbarrier), the wait becomes `wait_group 1` and the release moves one iteration
/// later: the stage read by the previous iteration's group, whose wgmmas have finished, is
/// released while this iteration's group still runs, so the tensor cores never drain between
/// two k steps. After the loop, `wait_group 0` and the release of the last stage. (A stage
/// freed by a block barrier keeps `wait_group 0`: the barrier would not wait for the group.)
pub(super) fn keep_one_group_in_flight(body: Vec<Stmt>) -> Vec<Stmt> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::Loop(mut l) => {
                l.body = keep_one_group_in_flight(l.body);
                let n = l.body.len();
                let tail = n >= 3
                    && !l.parallel.is_hw()
                    && l.body[n - 3] == Stmt::WgmmaCommit
                    && l.body[n - 2] == Stmt::WgmmaWait(0)
                    && matches!(l.body[n - 1], Stmt::MbarArrive { .. });
                if !tail {
                    out.push(Stmt::Loop(l));
                    continue;
                }
                let Some(Stmt::MbarArrive {
                    bars,
                    slot,
                    per_warp,
                }) = l.body.pop()
                else {
                    unreachable!("checked above")
                };
                let var = Val::Var(l.var.clone());
                let previous = slot.subst(
                    &l.var,
                    &Val::Sub(Box::new(var.clone()), Box::new(Val::Int(1))),
                );
                let last = slot.subst(
                    &l.var,
                    &Val::Sub(Box::new(l.extent.clone()), Box::new(Val::Int(1))),
                );
                let n = l.body.len();
                l.body[n - 1] = Stmt::WgmmaWait(1);
                l.body.push(Stmt::If {
                    cond: Val::lt(Val::Int(0), var),
                    then: vec![Stmt::MbarArrive {
                        bars,
                        slot: previous,
                        per_warp,
                    }],
                    els: Vec::new(),
                });
                let extent = l.extent.clone();
                out.push(Stmt::Loop(l));
                out.push(Stmt::WgmmaWait(0));
                out.push(Stmt::If {
                    cond: Val::lt(Val::Int(0), extent),
                    then: vec![Stmt::MbarArrive {
                        bars,
                        slot: last,
                        per_warp,
                    }],
                    els: Vec::new(),
                });
            }
            Stmt::If { cond, then, els } => out.push(Stmt::If {
                cond,
                then: keep_one_group_in_flight(then),
                els: keep_one_group_in_flight(els),
            }),
            Stmt::WarpRoles {
                is_producer,
                producer,
                consumer,
                registers,
                consumer_threads,
            } => out.push(Stmt::WarpRoles {
                is_producer,
                producer,
                consumer: keep_one_group_in_flight(consumer),
                registers,
                consumer_threads,
            }),
            other => out.push(other),
        }
    }
    out
}

/// One group per unrolled loop of wgmmas: an unrolled loop (or a thread or block index
/// binding) whose body is `fence, wgmmas, commit, wait` becomes `fence, loop { wgmmas },
/// commit, wait`, innermost loops first.
pub(super) fn batch(body: Vec<Stmt>) -> Vec<Stmt> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::Loop(mut l) => {
                l.body = batch(l.body);
                let n = l.body.len();
                let grouped = n >= 4
                    && (l.parallel == ParallelType::Unroll || l.parallel.is_hw())
                    && l.body[0] == Stmt::WgmmaFence
                    && l.body[n - 2] == Stmt::WgmmaCommit
                    && l.body[n - 1] == Stmt::WgmmaWait(0)
                    && l.body[1..n - 2].iter().all(|s| {
                        !matches!(s, Stmt::WgmmaFence | Stmt::WgmmaCommit | Stmt::WgmmaWait(_))
                    });
                if grouped {
                    let inner: Vec<Stmt> = l.body.drain(1..n - 2).collect();
                    l.body = inner;
                    out.push(Stmt::WgmmaFence);
                    out.push(Stmt::Loop(l));
                    out.push(Stmt::WgmmaCommit);
                    out.push(Stmt::WgmmaWait(0));
                } else {
                    out.push(Stmt::Loop(l));
                }
            }
            Stmt::If { cond, then, els } => out.push(Stmt::If {
                cond,
                then: batch(then),
                els: batch(els),
            }),
            Stmt::WarpRoles {
                is_producer,
                producer,
                consumer,
                registers,
                consumer_threads,
            } => out.push(Stmt::WarpRoles {
                is_producer,
                producer: batch(producer),
                consumer: batch(consumer),
                registers,
                consumer_threads,
            }),
            other => out.push(other),
        }
    }
    out
}
