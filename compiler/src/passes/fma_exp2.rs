//! Pass `fma_exp2`: a quarter of an online softmax's exponentials computed on the FMA pipe
//! (FlashAttention-4's software `exp2`) where the scores already take a MUFU op each, so the
//! MUFU is the softmax's bound.
//!
//! Requires: `mma` (the fragment loops final, the exponentials `exp2_ftz` in an unrolled loop
//! over the accumulator's registers). Takes, in any block, an unrolled loop whose extent is a
//! multiple of 4 with a statement `E[r] = exp2_ftz(a)` (its body, or the body of the bounds
//! guard that is its body), where an earlier loop of the block computes an op that compiles
//! to a MUFU instruction (`UnaryOp::mufu_ops`: a softcap's `tanh_approx` or `tanh_abs`), other
//! than an exponential of the same softmax.
//!
//! Guarantees: the statement becomes `if (r % 4 == 3) E[r] = exp2_fma(a) else E[r] =
//! exp2_ftz(a)` (the unrolled loop folds the branch): one exponential in four on the FMA pipe.
//! Per score the MUFU issues 1.75 results where it issued 2 (3 with `tanh_abs`: 2.75); the FMA
//! pipe, 8 times its rate, takes ten instructions for each. Measured with hand edits on the
//! H200 (docs/benchmarks.md, eighteenth session): the softcap with the hardware tanh (its
//! scales merged) 568.9 -> 557.4 us with one in four, 598.5 us with one in two; plain
//! attention, one MUFU op per score, loses 2.6% with one in eight and 7.2% with one in four
//! (so the pass leaves it). `exp2_fma` is within 7.5e-5
//! (relative) of `2^a` and flushes results below 2^-125 to 0 where `exp2_ftz` flushes those
//! below 2^-126: each is at most 1 in a sum holding the row maximum's 1. Emits nothing else.

use super::context::{Change, Ctx};
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::fusion::{Op, ParallelType, UnaryOp};
use crate::kir::{Compute, Data, Kernel, Loop, Stmt, Val};

/// The FMA pipe takes one exponential in this many.
const ONE_IN: i64 = 4;

/// Whether the fusion has, on tensor-core fragments, a softmax (a row maximum and an
/// exponential) and an op the code generator writes as a MUFU instruction besides it.
pub fn used(cx: &Ctx) -> bool {
    let f = cx.fusion;
    let has = |p: &dyn Fn(&Op) -> bool| f.exprs.iter().any(|e| p(&e.op));
    f.ids.iter().any(|a| a.parallel == ParallelType::Mma)
        && has(&|op| matches!(op, Op::Unary(u) if is_exp(*u)))
        && has(&|op| {
            matches!(
                op,
                Op::Reduce {
                    op: crate::fusion::ReduceOp::Max,
                    ..
                }
            )
        })
        && has(&|op| matches!(op, Op::Unary(u) if !is_exp(*u) && u.mufu_ops() > 0))
}

fn is_exp(u: UnaryOp) -> bool {
    matches!(u, UnaryOp::Exp | UnaryOp::Exp2 | UnaryOp::Exp2Ftz)
}

pub fn run(_cx: &mut Ctx, k: &mut Kernel) -> Result<Change, Diagnostic> {
    let mut changed = false;
    crate::kir::for_each_block_mut(&mut k.body, &mut |block| {
        let mut mufu_before = false;
        for s in block.iter_mut() {
            if let Stmt::Loop(l) = s {
                if mufu_before {
                    changed |= split(l);
                }
                mufu_before |= l.parallel == ParallelType::Unroll && computes_mufu(&l.body);
            }
        }
    });
    Ok(Change::from_changed(changed))
}

/// Whether `body` computes an f32 op that is a MUFU instruction, an exponential aside.
fn computes_mufu(body: &[Stmt]) -> bool {
    let mut found = false;
    crate::kir::for_each_stmt(body, &mut |s| {
        if let Stmt::Compute(c) = s {
            found |= has_mufu(&c.value);
        }
    });
    found
}

fn has_mufu(d: &Data) -> bool {
    d.any(&mut |n| matches!(n, Data::Unary(u, DType::F32, _) if !is_exp(*u) && u.mufu_ops() > 0))
}

/// The exponentials of loop `l` split between the pipes; whether it had any.
fn split(l: &mut Loop) -> bool {
    let Val::Int(n) = l.extent else {
        return false;
    };
    if l.parallel != ParallelType::Unroll || n % ONE_IN != 0 {
        return false;
    }
    let var = l.var.clone();
    let body = match &mut l.body[..] {
        [Stmt::If { then, els, .. }] if els.is_empty() => then,
        _ => &mut l.body,
    };
    let mut changed = false;
    for s in body.iter_mut() {
        let Stmt::Compute(c) = s else {
            continue;
        };
        if !matches!(c.value, Data::Unary(UnaryOp::Exp2Ftz, DType::F32, _)) || c.vector.is_some() {
            continue;
        }
        let on_fma = match &c.value {
            Data::Unary(_, t, a) => Compute {
                value: Data::Unary(UnaryOp::Exp2Fma, *t, a.clone()),
                ..c.clone()
            },
            _ => unreachable!("matched an exponential"),
        };
        let on_mufu = c.clone();
        *s = Stmt::If {
            cond: Val::Eq(
                Box::new(Val::rem(Val::Var(var.clone()), Val::Int(ONE_IN))),
                Box::new(Val::Int(ONE_IN - 1)),
            ),
            then: vec![Stmt::Compute(on_fma)],
            els: vec![Stmt::Compute(on_mufu)],
        };
        changed = true;
    }
    changed
}

#[cfg(test)]
mod tests {
    /// The coefficients of the prelude's `hf_exp2_fma`, highest degree first, as it writes them.
    fn coefficients() -> [f32; 4] {
        let (_, text) = crate::backend::codegen::prelude::MATH
            .iter()
            .find(|(name, _)| *name == "exp2_fma")
            .expect("the prelude's exp2_fma");
        let line = text
            .lines()
            .find(|l| l.contains("fmaf(fmaf(fmaf("))
            .expect("the polynomial");
        let mut c = line
            .split(|ch: char| !(ch.is_ascii_digit() || ch == '.'))
            .filter(|w| w.contains('.'))
            .map(|w| w.parse::<f32>().expect("a coefficient"));
        [(); 4].map(|_| c.next().expect("four coefficients"))
    }

    /// The prelude's `hf_exp2_fma` in f32 arithmetic, step for step (round to nearest, fused
    /// multiply-adds), so the accuracy its comment and `UnaryOp::Exp2Fma` state is checked.
    fn exp2_fma([c3, c2, c1, c0]: [f32; 4], x: f32) -> f32 {
        let j = x + 12_582_912.0f32;
        let f = x - (j - 12_582_912.0f32);
        let p = c3.mul_add(f, c2).mul_add(f, c1).mul_add(f, c0);
        let r = f32::from_bits(p.to_bits().wrapping_add(j.to_bits() << 23));
        if x < -125.0 {
            0.0
        } else {
            r
        }
    }

    #[test]
    fn the_fma_exponential_is_within_its_stated_error() {
        let c = coefficients();
        let exp2_fma = |x| exp2_fma(c, x);
        let mut worst = 0.0f64;
        // The online softmax's arguments: at most 0 (a score minus its row maximum); a stale
        // maximum can leave them a little above it.
        for i in 0..=200_000 {
            let x = -125.0f32 + 130.0 * i as f32 / 200_000.0;
            let want = f64::from(x).exp2();
            let got = f64::from(exp2_fma(x));
            worst = worst.max((got / want - 1.0).abs());
        }
        assert!(worst < 7.6e-5, "relative error {worst}");
        assert!((exp2_fma(0.0) - 1.0).abs() < 7.5e-5);
        assert_eq!(exp2_fma(-125.5), 0.0);
        assert_eq!(exp2_fma(f32::NEG_INFINITY), 0.0);
        assert!(exp2_fma(f32::NAN).is_nan());
        assert_eq!(
            crate::fusion::UnaryOp::Exp2Fma.eval(-126.0),
            0.0,
            "the reference of the kernel IR flushes as the kernel does"
        );
    }
}
