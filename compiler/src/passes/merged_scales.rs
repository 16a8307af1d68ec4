//! Pass `merged_scales`: two multiplications of the scores by uniform scalars, one after the
//! other, made one (a softcap's `tanh(s * scale / cap)`: `s * (scale * (1 / cap))`).
//!
//! Requires: `mma` (a product's epilogue `s = acc * scale` written into the accumulator in
//! place) and `row_math` (a division by a scalar input `s / cap` made `s * cap_recip`, the
//! reciprocal a register written once). Takes, in any block,
//!
//! ```text
//! for r: X[r] = mul(X[r], c1)                     // the scores, scaled in place
//! ...
//! for r2: ... mul(X[r2], c2) ...                  // their one reader, scaling them again
//! ```
//!
//! with `c1` and `c2` each a float scalar parameter or a **kernel constant** (a register
//! written once in the kernel, from parameters and literals alone: `cap_recip = 1 / cap`),
//! where no other statement of the block after the scaling reads or writes `X`.
//!
//! Guarantees: the scaling loop multiplies by `c1 * c2` (NVVM computes the product once per
//! kernel) and the reader reads `X` as it is: one FMUL per score fewer. The softcap with the
//! hardware tanh at B = 128, S = T = 2048 on the H200, as a hand edit: 584.6 -> 568.9 us
//! (docs/benchmarks.md, eighteenth session).
//! `x * (c1 * c2)` is within a rounding (2^-24 relative) of `(x * c1) * c2`. Emits nothing else.

use super::context::{Change, Ctx};
use super::scaled_max::{only_compute, reads, touches};
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::fusion::BinaryOp;
use crate::fusion::MemoryType;
use crate::kir::{BufferId, Data, Kernel, Stmt};
use rustc_hash::FxHashSet;

/// Whether the kernel can have the form: tensor-core fragments and two products or divisions
/// by 0-dim tensors (a scalar input, or a scalar the kernel computes from them).
pub fn used(cx: &Ctx) -> bool {
    use crate::fusion::{Op, Operand};
    let f = cx.fusion;
    let by_scalar = f
        .exprs
        .iter()
        .filter(|e| {
            matches!(e.op, Op::Binary(BinaryOp::Mul | BinaryOp::Div))
                && e.inputs
                    .iter()
                    .any(|o| matches!(o, Operand::Tensor(t) if f.rank(*t) == 0))
        })
        .count();
    f.ids
        .iter()
        .any(|a| a.parallel == crate::fusion::ParallelType::Mma)
        && by_scalar >= 2
}

pub fn run(_cx: &mut Ctx, k: &mut Kernel) -> Result<Change, Diagnostic> {
    let constants = kernel_constants(k);
    let mut changed = false;
    crate::kir::for_each_block_mut(&mut k.body, &mut |block| {
        while let Some((scale_at, x, c2)) = find(block, &constants) {
            apply(block, scale_at, x, c2);
            changed = true;
        }
    });
    Ok(Change::from_changed(changed))
}

/// Registers written once in the kernel, by one compute from parameters and literals that is
/// not a literal alone (`cap_recip = 1 / cap`; an accumulator's zero fill, which a wgmma writes
/// after it, is a literal).
fn kernel_constants(k: &Kernel) -> FxHashSet<BufferId> {
    let mut writes: rustc_hash::FxHashMap<BufferId, (usize, bool)> = Default::default();
    crate::kir::for_each_stmt(&k.body, &mut |s| {
        if let Stmt::Compute(c) = s {
            let mut from_params = !matches!(c.value, Data::Literal(..)) && !has_index(&c.value);
            c.value.for_each_read(&mut |_| from_params = false);
            let w = writes.entry(c.out.buffer).or_insert((0, true));
            w.0 += 1;
            w.1 &= from_params;
        }
    });
    writes
        .into_iter()
        .filter(|&(b, (n, ok))| n == 1 && ok && k.buffers[b].memory == MemoryType::Local)
        .map(|(b, _)| b)
        .collect()
}

fn has_index(d: &Data) -> bool {
    match d {
        Data::Index(..) | Data::View(..) => true,
        Data::Unary(_, _, v) | Data::Cast(_, v) => has_index(v),
        Data::Binary(_, _, a, b) => has_index(a) || has_index(b),
        Data::Ternary(_, _, vs) => vs.iter().any(has_index),
        Data::Read(_) | Data::Param(..) | Data::Literal(..) => false,
    }
}

/// A uniform scalar: a float parameter or a kernel constant's register.
fn uniform(d: &Data, constants: &FxHashSet<BufferId>) -> bool {
    match d {
        Data::Param(_, DType::F32) => true,
        Data::Read(a) => constants.contains(&a.buffer),
        _ => false,
    }
}

/// `mul(X[..], c)` or `mul(c, X[..])` with `c` uniform: `c`.
fn scaled_read<'d>(d: &'d Data, x: BufferId, constants: &FxHashSet<BufferId>) -> Option<&'d Data> {
    let Data::Binary(BinaryOp::Mul, DType::F32, a, b) = d else {
        return None;
    };
    match (&**a, &**b) {
        (Data::Read(r), c) | (c, Data::Read(r)) if r.buffer == x && uniform(c, constants) => {
            Some(c)
        }
        _ => None,
    }
}

/// The one scaled read of `x` in `d`, wherever it is in the expression.
fn find_scaled_read<'d>(
    d: &'d Data,
    x: BufferId,
    constants: &FxHashSet<BufferId>,
) -> Option<&'d Data> {
    d.find_map(&mut |n| scaled_read(n, x, constants))
}

/// The in-place scaling's loop, the scores and the second scale.
fn find(block: &[Stmt], constants: &FxHashSet<BufferId>) -> Option<(usize, BufferId, Data)> {
    for (scale_at, s) in block.iter().enumerate() {
        let Some((_, c)) = only_compute(s) else {
            continue;
        };
        let Data::Binary(BinaryOp::Mul, DType::F32, a, b) = &c.value else {
            continue;
        };
        let x = c.out.buffer;
        let in_place = match (&**a, &**b) {
            (Data::Read(r), c1) | (c1, Data::Read(r)) => r == &c.out && uniform(c1, constants),
            _ => false,
        };
        if !in_place {
            continue;
        }
        let rest = &block[scale_at + 1..];
        if touches(rest, x) != 1 {
            continue;
        }
        let mut second = None;
        crate::kir::for_each_stmt(rest, &mut |s| {
            if let Stmt::Compute(c) = s {
                if reads(&c.value, x) {
                    second = find_scaled_read(&c.value, x, constants).cloned();
                }
            }
        });
        if let Some(c2) = second {
            return Some((scale_at, x, c2));
        }
    }
    None
}

fn apply(block: &mut [Stmt], scale_at: usize, x: BufferId, c2: Data) {
    crate::kir::for_each_stmt_mut(&mut block[scale_at..=scale_at], &mut |s| {
        if let Stmt::Compute(c) = s {
            if let Data::Binary(BinaryOp::Mul, _, a, b) = &mut c.value {
                let c1 = if matches!(&**a, Data::Read(r) if r.buffer == x) {
                    b
                } else {
                    a
                };
                let merged =
                    Data::Binary(BinaryOp::Mul, DType::F32, c1.clone(), Box::new(c2.clone()));
                **c1 = merged;
            }
        }
        crate::kir::Flow::Descend
    });
    crate::kir::for_each_stmt_mut(&mut block[scale_at + 1..], &mut |s| {
        if let Stmt::Compute(c) = s {
            unscale(&mut c.value, x);
        }
        crate::kir::Flow::Descend
    });
}

/// The scaled read of `x` in `d` becomes the read.
fn unscale(d: &mut Data, x: BufferId) {
    d.rewrite(&mut |n| {
        let Data::Binary(BinaryOp::Mul, DType::F32, a, b) = n else {
            return false;
        };
        let read = match (&**a, &**b) {
            (Data::Read(r), _) | (_, Data::Read(r)) if r.buffer == x => r.clone(),
            _ => return false,
        };
        *n = Data::Read(read);
        true
    });
}
