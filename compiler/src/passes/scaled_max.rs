//! Pass `scaled_max`: a row maximum of scaled scores taken before the scale, and the scale
//! folded into the exponential's FMA, as FlashAttention does (`softmax_scale_log2`).
//!
//! Requires: `mma` (the fragment loops final: a product's epilogue `s = acc * scale` written
//! into the accumulator in place, the row maximum a partial per thread combined across the
//! quad). Takes, in any block, the statements
//!
//! ```text
//! for r: X[r] = mul(X[r], c)                      // the scores, scaled in place
//! ...
//! for r2: P[i] = max(P[i], X[r2])                 // the row maximum's partials
//! quad_max(P[0]) ...                              // combined across the quad
//! ...
//! e_sub = fma(X[r4], log2(e), m_neg_log2)         // the base-2 exponential's argument
//! ```
//!
//! with `c` a float scalar parameter (a scalar input such as attention's `scale`), where the
//! block's other statements after the scaling neither read nor write `X` (so the scaled
//! scores feed only the maximum and the exponentials: plain attention and a row softmax of a
//! scaled product, not a mask or a score modification, which read them too). Not a softcap's
//! `cap * tanh(...)`: its maximum under the branch would no longer share a basic block with the
//! tanh's MUFU instructions, and ptxas could not overlap the two (measured on the H200, the
//! softcap's kernel with its scales merged and a quarter of its exponentials on the FMA pipe:
//! 573.8 us with that branch, 546.6 us without; docs/benchmarks.md, eighteenth session).
//!
//! Guarantees: the scaling loop is gone, one FMUL per score fewer where `c > 0` (the plain
//! attention kernel at B = 128, S = T = 2048 on the H200: 461 -> 442 us, x0.91 -> x0.93 of
//! cuDNN; docs/benchmarks.md, seventeenth session). The maximum's loop and its quad
//! combination are under `if positive(c)`:
//! - `c > 0`: the maximum of `X` unscaled, then `P *= c` once per row: exactly the maximum of
//!   the scaled scores, since rounding `c * x` is monotone in `x` for `c > 0` (and `-inf * c`
//!   is `-inf`);
//! - else (`c <= 0` or NaN): the maximum of `X * c`, as before.
//!
//! and the exponential's argument is `fma(X, c * log2(e), m_neg_log2)` (`c * log2(e)` rounded
//! once, which NVVM computes once per kernel): within a rounding of `c log2(e)` (2^-24
//! relative) of `fma(X * c, log2(e), m_neg_log2)`, the class of error `online_softmax`'s base-2
//! form already has. Emits nothing else.

use super::context::{Change, Ctx};
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::fusion::{BinaryOp, ReduceOp, TernaryOp};
use crate::kir::{BufferId, Compute, Data, Kernel, Loop, Stmt, Val};

/// log2(e) as the passes write it in the exponential's FMA (`row_math::log2_fma`).
const LOG2_E: f64 = std::f64::consts::LOG2_E;

/// Whether the kernel can have the form: tensor-core fragments (the quad combination), a
/// scalar input, a row maximum and an exponential.
pub fn used(cx: &Ctx) -> bool {
    use crate::fusion::{Op, ParallelType, UnaryOp};
    let f = cx.fusion;
    f.ids.iter().any(|a| a.parallel == ParallelType::Mma)
        && f.inputs
            .iter()
            .any(|&t| f.tensors[t].root.is_empty() && !f.tensors[t].in_memory)
        && f.exprs.iter().any(|e| {
            matches!(
                e.op,
                Op::Reduce {
                    op: ReduceOp::Max,
                    ..
                }
            )
        })
        && f.exprs
            .iter()
            .any(|e| matches!(e.op, Op::Unary(UnaryOp::Exp | UnaryOp::Exp2)))
}

pub fn run(_cx: &mut Ctx, k: &mut Kernel) -> Result<Change, Diagnostic> {
    let mut changed = false;
    crate::kir::for_each_block_mut(&mut k.body, &mut |block| {
        while let Some(form) = find(block) {
            apply(block, form);
            changed = true;
        }
    });
    Ok(Change::from_changed(changed))
}

/// Where the form is in a block: the scaling loop, the maximum's loop and the quad
/// combinations after it, the exponential's loop.
struct Form {
    scale_at: usize,
    max_at: usize,
    quads: usize,
    exp_at: usize,
    x: BufferId,
    c: String,
}

/// The single compute of a loop (not a thread binding), the loop's only statement or the
/// only statement of a conditional without `else` that is (a bounds guard of a ragged tile).
pub(super) fn only_compute(s: &Stmt) -> Option<(&Loop, &Compute)> {
    let Stmt::Loop(l) = s else {
        return None;
    };
    let body = match &l.body[..] {
        [Stmt::If { then, els, .. }] if els.is_empty() => &then[..],
        body => body,
    };
    match body {
        [Stmt::Compute(c)] if !l.parallel.is_hw() => Some((l, c)),
        _ => None,
    }
}

/// `X[i] = mul(X[i], c)` (or `mul(c, X[i])`), `c` a float parameter: `(X, c)`.
fn in_place_scale(c: &Compute) -> Option<(BufferId, String)> {
    let Data::Binary(BinaryOp::Mul, DType::F32, a, b) = &c.value else {
        return None;
    };
    let ((Data::Read(x), Data::Param(name, DType::F32))
    | (Data::Param(name, DType::F32), Data::Read(x))) = (&**a, &**b)
    else {
        return None;
    };
    (*x == c.out).then(|| (x.buffer, name.clone()))
}

/// `P[i] = max(P[i], X[j])`: `P`.
fn max_partial(c: &Compute, x: BufferId) -> Option<BufferId> {
    match &c.value {
        Data::Binary(BinaryOp::Max, DType::F32, p, v)
            if matches!(&**p, Data::Read(a) if *a == c.out)
                && matches!(&**v, Data::Read(a) if a.buffer == x) =>
        {
            Some(c.out.buffer)
        }
        _ => None,
    }
}

/// Whether `s`, a statement in the loop of the exponentials, is `fma(X[j], log2(e), m)`.
fn is_exp_argument(s: &Stmt, x: BufferId) -> bool {
    matches!(s, Stmt::Compute(c) if matches!(&c.value,
        Data::Ternary(TernaryOp::Fma, DType::F32, ops)
            if matches!(&ops[0], Data::Read(a) if a.buffer == x)
                && matches!(ops[1], Data::Literal(l, _) if l == LOG2_E)
                && !reads(&ops[2], x)))
}

pub(super) fn reads(d: &Data, x: BufferId) -> bool {
    let mut found = false;
    d.for_each_read(&mut |a| found |= a.buffer == x);
    found
}

/// How many statements of `stmts` (at any depth) may read or write `x`: computes that do,
/// quad reductions of it, and every statement that moves data other than those (a wgmma, a
/// TMA copy, a block reduction: counted whatever they access, so the form is not taken).
pub(super) fn touches(stmts: &[Stmt], x: BufferId) -> usize {
    let mut n = 0;
    crate::kir::for_each_stmt(stmts, &mut |s| {
        n += usize::from(match s {
            Stmt::Compute(c) => c.out.buffer == x || reads(&c.value, x),
            Stmt::QuadReduce { acc, .. } => acc.buffer == x,
            Stmt::Loop(_)
            | Stmt::If { .. }
            | Stmt::Alloc(_)
            | Stmt::Let { .. }
            | Stmt::Sync
            | Stmt::GroupSync { .. }
            | Stmt::Turn { .. }
            | Stmt::MbarWait { .. }
            | Stmt::MbarArrive { .. }
            | Stmt::WgmmaFence
            | Stmt::WgmmaCommit
            | Stmt::WgmmaWait(_) => false,
            _ => true,
        })
    });
    n
}

fn find(block: &[Stmt]) -> Option<Form> {
    for (scale_at, s) in block.iter().enumerate() {
        let Some((x, c)) = only_compute(s).and_then(|(_, c)| in_place_scale(c)) else {
            continue;
        };
        let rest = &block[scale_at + 1..];
        let max_at = rest.iter().position(|s| {
            only_compute(s)
                .and_then(|(_, c)| max_partial(c, x))
                .is_some()
        })?;
        let partial = only_compute(&rest[max_at]).and_then(|(_, c)| max_partial(c, x))?;
        let quads = rest[max_at + 1..]
            .iter()
            .take_while(|s| {
                matches!(s, Stmt::QuadReduce { acc, op: ReduceOp::Max, dtype: DType::F32 }
                    if acc.buffer == partial)
            })
            .count();
        let exp_at = rest.iter().position(|s| match s {
            Stmt::Loop(l) => l.body.iter().any(|b| is_exp_argument(b, x)),
            _ => false,
        })?;
        // The scaled scores feed the maximum and the exponentials' arguments, nothing else:
        // one read in each of those loops, none elsewhere in the block.
        let Stmt::Loop(exp_loop) = &rest[exp_at] else {
            continue;
        };
        let exp_reads = touches(&exp_loop.body, x);
        let elsewhere = touches(rest, x) - exp_reads - 1;
        if quads == 0 || exp_at < max_at || exp_reads != 1 || elsewhere != 0 {
            continue;
        }
        return Some(Form {
            scale_at,
            max_at: scale_at + 1 + max_at,
            quads,
            exp_at: scale_at + 1 + exp_at,
            x,
            c,
        });
    }
    None
}

fn apply(block: &mut Vec<Stmt>, form: Form) {
    let param = || Data::Param(form.c.clone(), DType::F32);
    // The exponential's argument: fma(X, c * log2(e), m).
    if let Stmt::Loop(l) = &mut block[form.exp_at] {
        for s in &mut l.body {
            if !is_exp_argument(s, form.x) {
                continue;
            }
            if let Stmt::Compute(Compute {
                value: Data::Ternary(_, _, ops),
                ..
            }) = s
            {
                ops[1] = Data::Binary(
                    BinaryOp::Mul,
                    DType::F32,
                    Box::new(param()),
                    Box::new(Data::Literal(LOG2_E, DType::F32)),
                );
            }
        }
    }
    let maximum: Vec<Stmt> = block
        .drain(form.max_at..form.max_at + 1 + form.quads)
        .collect();
    let Some(update) = only_compute(&maximum[0]).map(|(_, c)| c.clone()) else {
        unreachable!("find took a loop of one compute")
    };
    // c > 0: the maximum of the unscaled scores, scaled once per row (each combined partial).
    let mut unscaled = maximum.clone();
    for q in &maximum[1..] {
        let Stmt::QuadReduce { acc, .. } = q else {
            unreachable!("find took quad reductions")
        };
        unscaled.push(Stmt::Compute(Compute {
            out: acc.clone(),
            value: Data::Binary(
                BinaryOp::Mul,
                DType::F32,
                Box::new(Data::Read(acc.clone())),
                Box::new(param()),
            ),
            vector: None,
            ..update.clone()
        }));
    }
    // Else: the maximum of the scaled scores, as before.
    let mut scaled = maximum;
    crate::kir::for_each_stmt_mut(&mut scaled[..1], &mut |s| {
        if let Stmt::Compute(c) = s {
            scale_reads(&mut c.value, form.x, &param());
        }
        crate::kir::Flow::Descend
    });
    block.insert(
        form.max_at,
        Stmt::If {
            cond: Val::Positive(form.c.clone()),
            then: unscaled,
            els: scaled,
        },
    );
    block.remove(form.scale_at);
}

/// Each read of `x` in `d` becomes `x * c`.
fn scale_reads(d: &mut Data, x: BufferId, c: &Data) {
    d.rewrite(&mut |n| match n {
        Data::Read(a) if a.buffer == x => {
            let read = Data::Read(a.clone());
            *n = Data::Binary(
                BinaryOp::Mul,
                DType::F32,
                Box::new(read),
                Box::new(c.clone()),
            );
            true
        }
        _ => false,
    });
}
