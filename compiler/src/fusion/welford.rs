//! The variance that `welford(v)` may compute in one pass (Welford's running statistics):
//! the shape the builder gives `var` and `var_mean`'s variance, found from the variance.
//!
//! Takes a fusion and the tensor a `welford(v)` statement names. Guarantees, when [`find`]
//! accepts: `v = ss / dof`, `ss = sum(sq)` over the same axes as `s = sum(x)`, `sq = d * d`,
//! `d = x - broadcast(m)`, `m = s / n`, both sums f32, and nothing but that chain reads the
//! mean's broadcast, the deviations or their squares. The two-pass form reads `x` twice (the
//! sum, then the squared deviations from the mean); the one-pass form gets `s` as `mean * count`
//! and `ss` as `m2` from one update per element, so the chain between them is not computed
//! (`passes::welford` removes it). Each refusal says why, naming `v` as the user wrote it.

use super::{Fusion, Op, Operand, TensorId};
use crate::fusion::ops::{BinaryOp, CompositeOp, ReduceOp};

/// A variance's two sums and what lies between them (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WelfordVar {
    /// The variance, `ss / dof`.
    pub var: TensorId,
    /// The operand's sum, the mean's numerator (`m = s / n`).
    pub sum: TensorId,
    /// The sum of the squared deviations from the mean.
    pub squares: TensorId,
    /// The mean, `s / n` (read by the chain's broadcast; by the user too when it is var_mean's).
    pub mean: TensorId,
    /// The mean broadcast back, the deviations and their squares: computed by the two-pass form
    /// alone.
    pub between: [TensorId; 3],
}

/// The single tensor operand `i` of `t`'s definition when that is `op`.
fn operand(f: &Fusion, t: TensorId, op: &dyn Fn(&Op) -> bool, i: usize) -> Option<TensorId> {
    let e = &f.exprs[f.tensors[t].definition?];
    if !op(&e.op) {
        return None;
    }
    match e.inputs.get(i)? {
        Operand::Tensor(t) => Some(*t),
        _ => None,
    }
}

fn is_sum(op: &Op) -> bool {
    matches!(
        op,
        Op::Reduce {
            op: ReduceOp::Sum,
            ..
        }
    )
}

fn is_binary(b: BinaryOp) -> impl Fn(&Op) -> bool {
    move |op| matches!(op, Op::Binary(o) if *o == b)
}

fn axes(f: &Fusion, t: TensorId) -> Option<&[usize]> {
    match &f.exprs[f.tensors[t].definition?].op {
        Op::Reduce { axes, .. } => Some(axes),
        _ => None,
    }
}

/// The variance `v`'s sums, or why `welford(v)` cannot compute it in one pass.
pub fn find(f: &Fusion, v: TensorId) -> Result<WelfordVar, String> {
    let name = &f.tensors[v].name;
    if !f.tensors[v]
        .composite
        .as_ref()
        .is_some_and(|c| c.op == CompositeOp::Var)
    {
        return Err(format!(
            "`{name}` is not a variance: name the tensor a `var(...)` gives, or the first name of `v, m = var_mean(...)`"
        ));
    }
    let shape = || -> Option<WelfordVar> {
        let div = |t| operand(f, t, &is_binary(BinaryOp::Div), 0);
        let squares = div(v)?;
        let sq = operand(f, squares, &is_sum, 0)?;
        let d = operand(f, sq, &is_binary(BinaryOp::Mul), 0)?;
        (operand(f, sq, &is_binary(BinaryOp::Mul), 1)? == d).then_some(())?;
        let x = operand(f, d, &is_binary(BinaryOp::Sub), 0)?;
        let broadcast = operand(f, d, &is_binary(BinaryOp::Sub), 1)?;
        let mean = operand(f, broadcast, &|op| matches!(op, Op::Broadcast { .. }), 0)?;
        let sum = div(mean)?;
        (operand(f, sum, &is_sum, 0)? == x && axes(f, sum)? == axes(f, squares)?).then_some(())?;
        Some(WelfordVar {
            var: v,
            sum,
            squares,
            mean,
            between: [broadcast, d, sq],
        })
    };
    let Some(w) = shape() else {
        return Err(format!(
            "`{name}` is not computed as var's sum of squared deviations from its mean any more (a schedule statement before this one changed its tensors); write welford({name}) before it"
        ));
    };
    for t in [w.sum, w.squares] {
        let dtype = f.tensors[t].dtype;
        if dtype != crate::dtype::DType::F32 {
            return Err(format!(
                "`{name}` sums in {dtype}: Welford's statistics are f32 (take the variance of an f32 operand, var(cast(x, f32), ...))"
            ));
        }
    }
    // The chain is the builder's own (no name reaches it), unless a schedule made readers.
    let readers = [
        (w.between[0], w.between[1]),
        (w.between[1], w.between[2]),
        (w.between[2], w.squares),
    ];
    for (t, reader) in readers {
        let only = f.tensors[reader].definition;
        if f.uses(t).into_iter().any(|e| Some(e) != only) {
            return Err(format!(
                "`{}` of `{name}`'s two-pass form has another reader: the one pass does not compute it",
                f.tensors[t].name
            ));
        }
    }
    Ok(w)
}
