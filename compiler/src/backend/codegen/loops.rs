//! Loops in the generated CUDA: a loop bound to a thread or block index is a scope holding its
//! binding's comment; a flat loop (`kir::Loop::digits`) declares and steps its digits; a serial
//! loop is unrolled where it indexes register arrays (which stay in registers only when
//! indexed by compile-time constants) or where the schedule says so.

use super::{strip_parens_str, Close, Emitter};
use crate::fusion::MemoryType;
use crate::kir::{Access, Data, Kernel, Loop, Stmt, Val};

impl Emitter<'_> {
    /// A loop's lines before its body; what it writes after it.
    pub(super) fn loop_stmt(&mut self, l: &Loop, depth: usize) -> Close {
        if l.parallel.is_hw() {
            // A persistent kernel's grid-bound index is its tile loop's raster.
            let tile = self.k.persistent.as_ref().filter(|p| {
                p.bindings
                    .iter()
                    .any(|(v, q, _)| *v == l.var && *q == l.parallel)
            });
            let value = match tile {
                Some(p) => format!("the raster of tile `{}` ({})", p.var, l.parallel),
                None => l.parallel.cuda_index().unwrap_or("").to_string(),
            };
            self.line_parts(depth, &["{  // ", &l.var, " = ", &value]);
            return Close::Brace;
        }
        if !l.digits.is_empty() {
            self.flat_loop(l, depth);
            return Close::Flat;
        }
        self.philox_memos(l, depth);
        // Register arrays stay in registers only when indexed by compile-time
        // constants, so loops that index them are unrolled.
        let indexes_registers =
            matches!(l.extent, Val::Int(n) if n <= 64) && indexes_local(self.k, &l.body, &l.var);
        let unroll = indexes_registers
            || matches!(
                l.parallel,
                crate::fusion::ParallelType::Unroll | crate::fusion::ParallelType::Vectorize
            );
        if unroll {
            self.line(depth, "#pragma unroll");
        }
        let constant = unroll && matches!(l.extent, Val::Int(_));
        if constant {
            self.unrolled.push(l.var.clone());
        }
        let ext = self.val(&l.extent);
        let v = l.var.as_str();
        self.line_parts(
            depth,
            &[
                "for (index_t ",
                v,
                " = 0; ",
                v,
                " < ",
                &ext,
                "; ++",
                v,
                ") {",
            ],
        );
        Close::For { unrolled: constant }
    }

    /// A flat loop (`kir::Loop::digits`): its count and its digits declared in its `for`, and at
    /// the end of each iteration the digits' step: the innermost counts up and, at its extent,
    /// wraps to 0 and carries into the one outside it. The outermost never wraps: the loop's
    /// count ends first. (Never unrolled: the warp-specialized producer's loop.)
    fn flat_loop(&mut self, l: &Loop, depth: usize) {
        let mut s = String::from("for (index_t ");
        s.push_str(&l.var);
        s.push_str(" = 0");
        for d in &l.digits {
            s.push_str(", ");
            s.push_str(&d.var);
            s.push_str(" = 0");
        }
        let ext = self.val(&l.extent);
        for part in ["; ", &l.var, " < ", &ext, "; ++", &l.var, ") {"] {
            s.push_str(part);
        }
        self.line(depth, &s);
    }

    /// The end of a flat loop's iteration: its digits' step, then `}`.
    pub(super) fn flat_loop_steps(&mut self, l: &Loop, depth: usize) {
        let mut s = String::new();
        for d in l.digits[1..].iter().rev() {
            let ext = self.val(&d.extent);
            for part in [
                "if (++",
                &d.var,
                " == ",
                strip_parens_str(&ext),
                ") { ",
                &d.var,
                " = 0; ",
            ] {
                s.push_str(part);
            }
        }
        s.push_str("++");
        s.push_str(&l.digits[0].var);
        s.push(';');
        for _ in 1..l.digits.len() {
            s.push_str(" }");
        }
        self.line(depth + 1, &s);
        self.line(depth, "}");
    }
}

/// Whether a register buffer is indexed with `var` anywhere in `body`.
fn indexes_local(k: &Kernel, body: &[Stmt], var: &str) -> bool {
    fn data(k: &Kernel, d: &Data, var: &str) -> bool {
        d.any(&mut |n| match n {
            Data::Read(a) => access(k, a, var),
            Data::Index(_, v) => v.as_ref().is_some_and(|i| i.mentions(var)),
            _ => false,
        })
    }
    fn access(k: &Kernel, a: &Access, var: &str) -> bool {
        k.buffers[a.buffer].memory == MemoryType::Local
            && a.index.as_ref().is_some_and(|i| i.mentions(var))
    }
    crate::kir::any_stmt(body, &mut |s| match s {
        Stmt::Compute(c) => access(k, &c.out, var) || data(k, &c.value, var),
        Stmt::BlockReduce { acc, .. } | Stmt::QuadReduce { acc, .. } => access(k, acc, var),
        Stmt::BlockWelford {
            mean, m2, count, ..
        } => [mean, m2, count].iter().any(|a| access(k, a, var)),
        Stmt::GridReduce(g) => access(k, &g.acc, var),
        _ => false,
    })
}
