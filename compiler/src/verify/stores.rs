//! Shared memory that TMA stores read (after `sync`, [`super::Stage::synchronised`]): a TMA
//! store reads its source asynchronously after it is issued, so before anything writes that
//! buffer again the issuing thread waits for its bulk groups to have read shared memory
//! (`cp.async.bulk.wait_group.read 0`) and a block barrier (or the consumers' named barrier)
//! then tells the other threads; and the kernel does not exit while a store may still read its
//! shared memory.
//!
//! The walk follows the issuing thread: guards are transparent (the stores and their waits sit
//! under the issuer's condition), a loop is walked twice so that a store at the end of an
//! iteration meets the writes at the start of the next (once per state it is entered with, so
//! a deep nest costs no more than twice its size per distinct state), and warp roles are walked
//! one after the other. Kernels without TMA stores are not walked.

use super::{error_at, Rule, VerifyError};
use crate::kir::{BufferId, Flow, Kernel, Loop, Stmt, Visitor};
use std::collections::HashSet;

#[derive(Clone, Default, PartialEq)]
struct State {
    /// Read by stores issued since the last wait.
    pending: HashSet<BufferId>,
    /// Waited for, but no barrier since: other threads may not write yet.
    waited: HashSet<BufferId>,
}

pub(super) fn check(k: &Kernel, errors: &mut Vec<VerifyError>) {
    let mut stores = false;
    crate::kir::for_each_stmt(&k.body, &mut |s| stores |= matches!(s, Stmt::TmaStore(_)));
    if !stores {
        return;
    }
    let mut found: Vec<VerifyError> = Vec::new();
    let mut w = Walk {
        k,
        next: 0,
        out: &mut found,
        seen: Vec::new(),
        state: State::default(),
    };
    crate::kir::visit(&k.body, &mut w);
    let state = w.state;
    if let Some(&b) = state.pending.iter().min() {
        found.push(error_at(
            k,
            Rule::StoreReuse,
            None,
            format!(
                "the kernel can exit while a TMA store still reads `{}`: the issuing thread waits for its stores (cp.async.bulk.wait_group.read 0) before it exits",
                k.buffers[b].name
            ),
        ));
    }
    for e in found {
        if !errors.contains(&e) {
            errors.push(e);
        }
    }
}

/// The walk: statement numbers in preorder, the errors, and each loop already walked from a
/// given state with the state it ended in (a loop nest is walked twice per level only once:
/// walking it again from a state seen before repeats the same result).
struct Walk<'k, 'o> {
    k: &'k Kernel,
    next: usize,
    out: &'o mut Vec<VerifyError>,
    seen: Vec<(*const Loop, State, State)>,
    /// The state where the walk stands.
    state: State,
}

/// Statements in program order, the state carried through: conditionals' and warp roles'
/// bodies one after the other, a thread-bound loop's once; [`Walk::statement`] walks a serial
/// loop's body twice itself.
impl<'a> Visitor<'a> for Walk<'_, '_> {
    fn stmt(&mut self, st: &'a Stmt, _at: usize) -> Flow {
        let mut s = std::mem::take(&mut self.state);
        let flow = self.statement(st, &mut s);
        self.state = s;
        flow
    }
}

impl Walk<'_, '_> {
    /// Walks `body` from state `s`, leaving the state it ends in there.
    fn block(&mut self, body: &[Stmt], s: &mut State) {
        let outer = std::mem::replace(&mut self.state, std::mem::take(s));
        crate::kir::visit(body, self);
        *s = std::mem::replace(&mut self.state, outer);
    }

    /// The number of statements `body` holds (what a skipped walk leaves out of the numbering).
    fn count(body: &[Stmt]) -> usize {
        let mut n = 0;
        crate::kir::for_each_stmt(body, &mut |_| n += 1);
        n
    }

    /// One statement from state `s`: whether the walk enters its bodies (a serial loop's it
    /// walks here).
    fn statement(&mut self, st: &Stmt, s: &mut State) -> Flow {
        let me = self.next;
        self.next += 1;
        let k = self.k;
        let write = |out: &mut Vec<VerifyError>, b: BufferId| {
            let why = if s.pending.contains(&b) {
                Some("no wait for them (cp.async.bulk.wait_group.read 0) by the issuing thread")
            } else if s.waited.contains(&b) {
                Some("the issuing thread waited for them, but no barrier since tells the other threads")
            } else {
                None
            };
            if let Some(why) = why {
                out.push(error_at(
                    k,
                    Rule::StoreReuse,
                    Some((me, st)),
                    format!(
                        "`{}` is written while TMA stores may still read it: {why}",
                        k.buffers[b].name
                    ),
                ));
            }
        };
        match st {
            // A loop bound to hardware indices is a binding each thread runs once (a thread
            // group's own store), not an iteration after iteration: walked once below.
            Stmt::Loop(l) if !l.parallel.is_hw() => {
                let key = l as *const Loop;
                if let Some((_, _, end)) = self
                    .seen
                    .iter()
                    .find(|(p, start, _)| *p == key && start == s)
                {
                    *s = end.clone();
                    self.next += Self::count(&l.body);
                    return Flow::Skip;
                }
                let start = s.clone();
                // Twice: the second walk starts where an iteration ends. Statement numbers are
                // those of the first walk.
                let first = self.next;
                self.block(&l.body, s);
                let end = self.next;
                self.next = first;
                self.block(&l.body, s);
                self.next = end;
                self.seen.push((key, start, s.clone()));
                return Flow::Skip;
            }
            Stmt::TmaStore(t) => {
                s.pending.insert(t.src.buffer);
            }
            Stmt::BulkWaitRead(0) => {
                let pending = std::mem::take(&mut s.pending);
                s.waited.extend(pending);
            }
            Stmt::Sync
            | Stmt::GroupSync { .. }
            | Stmt::BlockReduce { .. }
            | Stmt::BlockWelford { .. }
            | Stmt::GridReduce(_) => s.waited.clear(),
            Stmt::Compute(c) => write(self.out, c.out.buffer),
            Stmt::StMatrix { dst, .. } => write(self.out, dst.buffer),
            Stmt::TmaLoad(t) => write(self.out, t.dst.buffer),
            _ => {}
        }
        Flow::Descend
    }
}
