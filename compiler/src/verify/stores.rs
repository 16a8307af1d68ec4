//! Shared memory that TMA stores read (after `circular_buffer`): a TMA store reads its source
//! asynchronously after it is issued, so before anything writes that buffer again the issuing
//! thread waits for its bulk groups to have read shared memory (`cp.async.bulk.wait_group.read
//! 0`) and a block barrier (or the consumers' named barrier) then tells the other threads; and
//! the kernel does not exit while a store may still read its shared memory.
//!
//! The walk follows the issuing thread: guards are transparent (the stores and their waits sit
//! under the issuer's condition), a loop is walked twice so that a store at the end of an
//! iteration meets the writes at the start of the next, and warp roles are walked one after
//! the other.

use super::{error_at, Rule, VerifyError};
use crate::kir::{Kernel, Stmt};
use std::collections::HashSet;

#[derive(Clone, Default)]
struct State {
    /// Read by stores issued since the last wait.
    pending: HashSet<usize>,
    /// Waited for, but no barrier since: other threads may not write yet.
    waited: HashSet<usize>,
}

pub(super) fn check(k: &Kernel, errors: &mut Vec<VerifyError>) {
    let mut state = State::default();
    let mut found: Vec<VerifyError> = Vec::new();
    let mut next = 0;
    block(k, &k.body, &mut state, &mut next, &mut found);
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

fn block(k: &Kernel, body: &[Stmt], s: &mut State, next: &mut usize, out: &mut Vec<VerifyError>) {
    for st in body {
        statement(k, st, s, next, out);
    }
}

fn statement(k: &Kernel, st: &Stmt, s: &mut State, next: &mut usize, out: &mut Vec<VerifyError>) {
    let me = *next;
    *next += 1;
    let mut write = |b: usize| {
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
        Stmt::Loop(l) => {
            // Twice: the second walk starts where an iteration ends. Statement numbers are
            // those of the first walk.
            let start = *next;
            block(k, &l.body, s, next, out);
            let end = *next;
            *next = start;
            block(k, &l.body, s, next, out);
            *next = end;
        }
        Stmt::If { then, els, .. } => {
            block(k, then, s, next, out);
            block(k, els, s, next, out);
        }
        Stmt::WarpRoles {
            producer, consumer, ..
        } => {
            block(k, producer, s, next, out);
            block(k, consumer, s, next, out);
        }
        Stmt::TmaStore(t) => {
            s.pending.insert(t.src.buffer);
        }
        Stmt::BulkWaitRead(0) => {
            let pending = std::mem::take(&mut s.pending);
            s.waited.extend(pending);
        }
        Stmt::Sync | Stmt::BlockReduce { .. } => s.waited.clear(),
        Stmt::Compute(c) => write(c.out.buffer),
        Stmt::StMatrix { dst, .. } => write(dst.buffer),
        Stmt::TmaLoad(t) => write(t.dst.buffer),
        _ => {}
    }
}
