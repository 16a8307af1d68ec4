//! `rand` and `randn` in a loop: the iterations of a thread's loop whose elements share a
//! Philox call (`fusion::philox`: four uniforms or two normals per call, by the element's
//! index) compute it once.
//!
//! Takes an ordinary loop being written (not a thread or block binding, not a flat loop);
//! guarantees that each `rand` / `randn` whose innermost enclosing ordinary loop is that loop
//! draws through an `hf_philox_memo` of its own, declared empty just before the loop, so an
//! iteration calls Philox only when its element's call (`index >> 2`, `index >> 1`) differs from
//! the previous iteration's. The values are unchanged whatever the order of the indices (the
//! memo compares the call, so any pattern stays exact, with more calls). A `rand` outside any
//! such loop (a lone lane) calls `hf_rand` / `hf_randn`, which compute their call each time.
//! Emits the memo's declaration (`hf_philox_memo hf_philox0 = {};`) before the loop's
//! `#pragma unroll`, and in [`Emitter::data`] `hf_rand_memo(hf_philox0, seed, offset, index)`.
//!
//! A memo is keyed by the call only: seed and offset are rank-0 values (one per launch), the
//! same at every iteration. In an unrolled loop of 8 lanes at an index that is a multiple of 4
//! (the dropout's vectors) that is 2 calls per 8 uniforms. With a 64-bit index NVRTC sees that
//! the lanes' indices (`(lin / N) * N + lin % N`, from the `iota`s) are consecutive and folds
//! the memo to those 2 calls; with a 32-bit one the `int` to `long long` conversions hide it,
//! so it keeps one guarded call per lane and a warp-uniform branch skips 6 of 8 at run time
//! (`docs/benchmarks.md` has the SASS counts).

use super::Emitter;
use crate::fusion::TernaryOp;
use crate::kir::{Data, Flow, Loop, Stmt};

impl Emitter<'_> {
    /// Declares a memo for each `rand` / `randn` whose innermost enclosing ordinary loop is `l`
    /// (before the loop's lines), and records which draw reads which.
    pub(super) fn philox_memos(&mut self, l: &Loop, depth: usize) {
        let mut draws: Vec<*const Data> = Vec::new();
        crate::kir::walk(&l.body, &mut |s| match s {
            // An inner ordinary loop keeps its own memos.
            Stmt::Loop(inner) if !inner.parallel.is_hw() => Flow::Skip,
            Stmt::Compute(c) if c.vector.is_none() => {
                draws_in(&c.value, &mut draws);
                Flow::Descend
            }
            _ => Flow::Descend,
        });
        for draw in draws {
            let name = format!("hf_philox{}", self.philox_memos.len());
            self.line_parts(depth, &["hf_philox_memo ", &name, " = {};"]);
            self.philox_memos.push((draw, name));
        }
    }

    /// The memo `draw` (a `rand` / `randn` node) reads, if it sits in an ordinary loop.
    pub(super) fn philox_memo(&self, draw: &Data) -> Option<&str> {
        self.philox_memos
            .iter()
            .find(|(d, _)| std::ptr::eq(*d, draw))
            .map(|(_, name)| name.as_str())
    }
}

/// The `rand` / `randn` nodes of `d`, in the order [`Emitter::data`] writes them (operands
/// first).
fn draws_in(d: &Data, out: &mut Vec<*const Data>) {
    d.each_operand(&mut |x| draws_in(x, out));
    if let Data::Ternary(TernaryOp::Rand | TernaryOp::RandN, ..) = d {
        out.push(d);
    }
}
