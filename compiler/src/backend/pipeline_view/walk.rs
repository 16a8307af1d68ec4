//! The walk of the final kernel IR that the view is derived from: statements in program order
//! as [`Event`]s under their guards and loops, thread-bound loops as bindings.

use super::{role_key, Event, Guard, Guards, LoopInfo, Role, Scope, ThreadLoop, Walk, What};
use crate::fusion::ParallelType;
use crate::kir::{Flow, MmaOperand, Stmt, Val, Visitor, Wgmma};

/// Whether a wgmma appears anywhere in `body`.
pub(super) fn has_wgmma(body: &[Stmt]) -> bool {
    let mut found = false;
    crate::kir::for_each_stmt(body, &mut |s| found |= matches!(s, Stmt::Wgmma(_)));
    found
}

pub(super) fn conjuncts<'v>(v: &'v Val, out: &mut Vec<&'v Val>) {
    match v {
        Val::And(a, b) => {
            conjuncts(a, out);
            conjuncts(b, out);
        }
        Val::True => {}
        v => out.push(v),
    }
}

/// The walk: each statement that says something about the pipelines is an event under the
/// guards and inside the loop around it; a statement with bodies walks each under its guards
/// ([`Walk::body_guards`]), a loop's inside it (a thread-bound loop is a binding).
impl<'k> Visitor<'k> for Walk<'k> {
    fn stmt(&mut self, st: &'k Stmt, _at: usize) -> Flow {
        match self.what(st) {
            Some(what) => {
                self.events.push(Event {
                    what,
                    guards: self.guards.clone(),
                    lp: self.lp,
                });
                Flow::Skip
            }
            None => Flow::Descend,
        }
    }

    fn enter(&mut self, st: &'k Stmt, body: usize) -> Flow {
        let mut thread = false;
        let mut inner = self.lp;
        if let Stmt::Loop(l) = st {
            if l.parallel.is_hw() {
                thread = l.parallel.is_thread();
                if thread {
                    self.threads.push(ThreadLoop {
                        var: &l.var,
                        parallel: l.parallel,
                        extent: &l.extent,
                    });
                }
            } else {
                self.loops.push(LoopInfo {
                    var: &l.var,
                    extent: &l.extent,
                    parent: self.lp,
                });
                inner = Some(self.loops.len() - 1);
            }
        }
        self.scopes.push(Scope {
            guards: self.guards.len(),
            lp: self.lp,
            thread,
        });
        self.lp = inner;
        let mut guards = std::mem::take(&mut self.guards);
        self.body_guards(st, body, &mut guards);
        self.guards = guards;
        Flow::Descend
    }

    fn leave(&mut self, _st: &'k Stmt, _body: usize) {
        let scope = self.scopes.pop().expect("pushed on entering");
        self.guards.truncate(scope.guards);
        self.lp = scope.lp;
        if scope.thread {
            self.threads.pop();
        }
    }
}

impl<'k> Walk<'k> {
    pub(super) fn thread_of(&self, v: &Val) -> Option<ParallelType> {
        match v {
            Val::Hw(p) if p.is_thread() => Some(*p),
            Val::Var(n) => self
                .thread_vars
                .iter()
                .find(|(name, _)| name == n)
                .map(|(_, p)| *p),
            _ => None,
        }
    }

    pub(super) fn guard(&self, v: &'k Val, negated: bool) -> std::rc::Rc<Guard<'k>> {
        // Depends on the thread index (read from the tree, not its text): a thread index, a
        // variable bound to one, the warp index or an election.
        let on_thread = v.any_leaf(&|leaf| {
            matches!(leaf, Val::Hw(p) if p.is_thread())
                || matches!(leaf, Val::Elect | Val::Warp)
                || matches!(leaf, Val::Var(n) if self.thread_vars.iter().any(|(name, _)| name == n))
        });
        std::rc::Rc::new(Guard {
            cond: v,
            negated,
            on_thread,
            text: std::cell::OnceCell::new(),
        })
    }

    /// The guards a statement adds for its body `i`: a conditional's conjuncts for `then`, its
    /// negation for `els`; warp roles' condition for the producers, its negation for the
    /// consumers.
    fn body_guards(&self, st: &'k Stmt, i: usize, guards: &mut Guards<'k>) {
        match st {
            Stmt::If { cond, .. } if i == 0 => {
                let mut parts = Vec::new();
                conjuncts(cond, &mut parts);
                for c in parts {
                    guards.push(self.guard(c, false));
                }
            }
            Stmt::If { cond, .. } => guards.push(self.guard(cond, true)),
            Stmt::WarpRoles(w) => guards.push(self.guard(&w.is_producer, i == 1)),
            _ => {}
        }
    }

    /// The event of a statement that says something about the pipelines.
    fn what(&self, st: &'k Stmt) -> Option<What<'k>> {
        Some(match st {
            Stmt::MbarArriveExpectTx { bars, bytes, .. }
            | Stmt::MbarExpectTx { bars, bytes, .. } => What::Arrive {
                bars: *bars,
                bytes: *bytes,
            },
            Stmt::TmaLoad(t) => What::Load(t),
            Stmt::MbarWait { bars, slot, parity } => What::Wait {
                bars: *bars,
                slot,
                parity,
            },
            Stmt::Sync | Stmt::GroupSync { .. } => What::Sync,
            Stmt::WgmmaFence => What::Fence,
            Stmt::Wgmma(w) => What::Mma {
                w,
                threads: self.threads.clone(),
            },
            Stmt::WgmmaCommit => What::Commit,
            Stmt::WgmmaWait(n) => What::MmaWait(*n),
            Stmt::Turn { step, .. } => What::Turn(*step),
            Stmt::MbarArrive {
                bars,
                slot,
                per_warp,
            } => What::Release {
                bars: *bars,
                slot,
                per_warp: *per_warp,
            },
            Stmt::Compute(c) if self.computes => What::Compute(c),
            Stmt::StMatrix { dst, src } => What::Staged {
                cache: dst.buffer,
                from: src.buffer,
            },
            Stmt::TmaStore(t) => What::Store(t),
            Stmt::BulkCommit => What::BulkCommit,
            Stmt::BulkWaitRead(n) => What::BulkWait(*n),
            Stmt::FenceProxyAsync => What::ProxyFence,
            // Statements that say nothing about the pipelines, those with bodies, and
            // kinds added later.
            _ => return None,
        })
    }
}

/// The role an event's guards select (every role of an event with a wgmma was collected).
pub(super) fn role_index(roles: &[Role], e: &Event) -> Option<usize> {
    let key = role_key(&e.guards);
    roles.iter().position(|r| r.condition == key)
}

/// Whether loop `inner` is `outer` or inside it.
pub(super) fn within(walk: &Walk, mut inner: Option<usize>, outer: Option<usize>) -> bool {
    loop {
        if inner == outer {
            return true;
        }
        match inner {
            Some(l) => inner = walk.loops[l].parent,
            None => return false,
        }
    }
}

/// What makes two wgmmas the same product: role, accumulator, operands and shape.
pub(super) fn same_product(a: &Wgmma, b: &Wgmma) -> bool {
    let operand = |o: &MmaOperand| (o.tile.buffer, o.transposed, o.swizzle);
    let key = |w: &Wgmma| {
        (
            w.acc.buffer,
            w.n,
            w.a_type,
            w.b_type,
            operand(&w.a),
            operand(&w.b),
        )
    };
    key(a) == key(b)
}
