//! The log-sum-exp that `online_logsumexp(lse)` may compute in one pass over its operand: the
//! shape the builder gives `logsumexp`, found from its result.
//!
//! Takes a fusion and the tensor an `online_logsumexp(lse)` statement names. Guarantees, when
//! [`find`] accepts: `lse = log(s) + u`, `s = sum(e)`, `e = exp(d)`, `d = x' - w`, `w` the
//! broadcast of `u = where(isinf(m), 0, m)`, `m = max(x)` over the same axes as `s`, `x'` being
//! `x` or a `recompute` copy of it, `s` and `m` f32, and nothing but that chain reads `w`, `d`
//! or `e`. The two-pass form reads `x` twice (the maximum, then the shifted exponentials); the
//! one pass (`passes::online_logsumexp`) keeps each thread's running maximum and its sum of
//! exponentials shifted by it, rescaled when the maximum grows, so the broadcast `w` is not
//! computed. Each refusal says why, naming `lse` as the user wrote it.

use super::{Fusion, Op, Operand, TensorId};
use crate::fusion::ops::{BinaryOp, CompositeOp, ReduceOp, TernaryOp, UnaryOp};

/// A log-sum-exp's tensors (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnlineLogSumExp {
    /// `m = max(x)`.
    pub max: TensorId,
    /// `u = where(isinf(m), 0, m)`, the shift the exponentials subtract.
    pub shift: TensorId,
    /// `w`, `u` broadcast back over the reduced axes (not computed by the one pass).
    pub broadcast: TensorId,
    /// `d = x' - w`.
    pub sub: TensorId,
    /// `e = exp(d)`.
    pub exp: TensorId,
    /// `s = sum(exp(d))`.
    pub sum: TensorId,
}

/// The tensor operands of `t`'s definition when its op satisfies `op`.
fn operands(f: &Fusion, t: TensorId, op: &dyn Fn(&Op) -> bool) -> Option<Vec<Operand>> {
    let e = &f.exprs[f.tensors[t].definition?];
    op(&e.op).then(|| e.inputs.clone())
}

fn tensor(o: Option<&Operand>) -> Option<TensorId> {
    match o? {
        Operand::Tensor(t) => Some(*t),
        _ => None,
    }
}

fn reduce_axes(f: &Fusion, t: TensorId, want: ReduceOp) -> Option<Vec<usize>> {
    match &f.exprs[f.tensors[t].definition?].op {
        Op::Reduce { op, axes } if *op == want => Some(axes.clone()),
        _ => None,
    }
}

/// The log-sum-exp `lse`'s tensors, or why `online_logsumexp(lse)` cannot compute it in one
/// pass.
pub fn find(f: &Fusion, lse: TensorId) -> Result<OnlineLogSumExp, String> {
    let name = &f.tensors[lse].name;
    if !f.tensors[lse]
        .composite
        .as_ref()
        .is_some_and(|c| c.op == CompositeOp::LogSumExp)
    {
        return Err(format!(
            "`{name}` is not a log-sum-exp: name the tensor a `logsumexp(...)` gives"
        ));
    }
    let binary = |b: BinaryOp| move |op: &Op| matches!(op, Op::Binary(o) if *o == b);
    let unary = |u: UnaryOp| move |op: &Op| matches!(op, Op::Unary(o) if *o == u);
    let shape = || -> Option<OnlineLogSumExp> {
        let add = operands(f, lse, &binary(BinaryOp::Add))?;
        let (log, shift) = (tensor(add.first())?, tensor(add.get(1))?);
        let sum = tensor(operands(f, log, &unary(UnaryOp::Log))?.first())?;
        let exp = tensor(operands(f, sum, &|op| matches!(op, Op::Reduce { .. }))?.first())?;
        let sum_axes = reduce_axes(f, sum, ReduceOp::Sum)?;
        let sub = tensor(operands(f, exp, &unary(UnaryOp::Exp))?.first())?;
        let d = operands(f, sub, &binary(BinaryOp::Sub))?;
        let (x_copy, broadcast) = (tensor(d.first())?, tensor(d.get(1))?);
        let wide = operands(f, broadcast, &|op| matches!(op, Op::Broadcast { .. }))?;
        (tensor(wide.first())? == shift).then_some(())?;
        let sel = operands(f, shift, &|op| matches!(op, Op::Ternary(TernaryOp::Where)))?;
        let (inf, max) = (tensor(sel.first())?, tensor(sel.get(2))?);
        (tensor(operands(f, inf, &unary(UnaryOp::IsInf))?.first())? == max).then_some(())?;
        let x = tensor(operands(f, max, &|op| matches!(op, Op::Reduce { .. }))?.first())?;
        (reduce_axes(f, max, ReduceOp::Max)? == sum_axes).then_some(())?;
        (x_copy == x || f.tensors[x_copy].copy_of == Some(x)).then_some(())?;
        Some(OnlineLogSumExp {
            max,
            shift,
            broadcast,
            sub,
            exp,
            sum,
        })
    };
    let Some(l) = shape() else {
        return Err(format!(
            "`{name}` is not computed as logsumexp's maximum and sum of shifted exponentials any more (a schedule statement before this one changed its tensors); write online_logsumexp({name}) before it"
        ));
    };
    for t in [l.max, l.sum] {
        let dtype = f.tensors[t].dtype;
        if dtype != crate::dtype::DType::F32 {
            return Err(format!(
                "`{name}` reduces in {dtype}: the running statistics are f32 (take the log-sum-exp of an f32 operand, logsumexp(cast(x, f32), ...))"
            ));
        }
    }
    // The chain is the builder's own (no name reaches it), unless a schedule made readers.
    for (t, reader) in [(l.broadcast, l.sub), (l.sub, l.exp), (l.exp, l.sum)] {
        let only = f.tensors[reader].definition;
        if f.uses(t).into_iter().any(|e| Some(e) != only) {
            return Err(format!(
                "`{}` of `{name}`'s two-pass form has another reader: the one pass does not compute it",
                f.tensors[t].name
            ));
        }
    }
    Ok(l)
}
