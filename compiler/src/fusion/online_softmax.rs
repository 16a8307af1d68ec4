//! Recognises a softmax over an axis `T` that a sum of products over the same `T` consumes (the
//! shape of attention's second half), and states when it may be computed *online*: as running
//! statistics over a serial loop of `T` tiles instead of over the whole of `T` at once.
//!
//! Takes the unscheduled fusion and the tensor the product defines. The shape recognised, with
//! casts and broadcasts allowed wherever a tensor is read (the names are the ones the messages
//! use for the roles, not required names):
//!
//! ```text
//! m = max(s, axis=T)                      the row maximum
//! e = exp(s - broadcast(m, axis=T))       or exp2(...)
//! l = sum(e, axis=T)                      the row sum
//! p = e / broadcast(l, axis=T)            (normalised form)
//! o = sum(broadcast(p) * broadcast(v), axis=T)
//! ```
//!
//! or the unnormalised form `o = sum(broadcast(e) * broadcast(v), axis=T) / broadcast(l)`.
//!
//! The legality rule ([`find`]), which every error names a tensor of:
//! - `m` is a `max` and `l` a `sum` over one axis each, of the same class `T` as the product's
//!   summed axis, and `m` reduces the very tensor `s` that `e` subtracts `m` from;
//! - `e` is `exp` or `exp2` of exactly `s - broadcast(m)`, and `l` sums `e`;
//! - `e`, `p` and the product's factor are read by the pattern only (the online form never
//!   holds a whole row of them); `m` and `l` may also be read by tensors that do not iterate
//!   over `T` (the log-sum-exp `m + log(l)`: the final statistics exist after the loop);
//! - `s` and the other factor `v` are computed without a reduction over `T` and without any
//!   of the softmax's tensors (one tile of `T` at a time is all the loop has).
//!
//! What the rewrite then computes, per row and tile `j` of `T`, is the classic recurrence
//! (FlashAttention's): `m' = max(m, max_j s)`, `a = exp(m - m')`, `l' = a l + sum_j exp(s - m')`,
//! `acc' = a acc + sum_j exp(s - m') v`, and `o = acc / l` after the last tile. A row whose
//! running maximum is still `-inf` subtracts 0 instead (`-inf - -inf` would be NaN and poison
//! later tiles); a row that is `-inf` throughout ends as `0 / 0`, NaN, as the plain form does.
//! [`crate::backend::reference::online`] evaluates exactly that in float64.

use super::{BinaryOp, Fusion, IterId, IterKind, Op, Operand, ReduceOp, TensorId, UnaryOp};

/// Every tensor's readers ([`Fusion::use_index`]).
type Uses = crate::id::IdVec<TensorId, Vec<crate::fusion::ExprId>>;

/// The exponential the softmax uses (the rescale factor uses the same one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exponential {
    Exp,
    Exp2,
}

/// A softmax over `T` and the product over `T` that consumes it, legal to compute online.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnlineSoftmax {
    /// The scores `s` (logical axes include `T`).
    pub scores: TensorId,
    /// `m = max(s, axis=T)`.
    pub max: TensorId,
    /// `e = exp(s - broadcast(m))`.
    pub exp: TensorId,
    pub exponential: Exponential,
    /// `l = sum(e, axis=T)`.
    pub sum: TensorId,
    /// `p = e / broadcast(l)`, in the normalised form.
    pub probs: Option<TensorId>,
    /// The sum over `T` of products.
    pub product: TensorId,
    /// The product's other factor `v` (before its broadcasts and casts).
    pub values: TensorId,
    /// The tensor holding `sum_T(p v)`: the product itself in the normalised form, else the
    /// division of the product by `l`.
    pub result: TensorId,
    /// The class of the axis `T` the softmax and the product reduce.
    pub axis: IterId,
}

/// The tensor `t` reads through copies, casts and broadcasts.
fn through_views(f: &Fusion, mut t: TensorId) -> TensorId {
    while let Some(e) = f.tensors[t].definition.map(|e| &f.exprs[e]) {
        match (&e.op, &e.inputs[..]) {
            (Op::Set | Op::Cast(_) | Op::Broadcast { .. }, [Operand::Tensor(i)]) => t = *i,
            _ => break,
        }
    }
    t
}

/// `from` and the copies, casts and broadcasts between it and `to` (which it reads through
/// them); empty when `from` is `to`: the views a pattern holds between two of its tensors.
fn views_to(f: &Fusion, from: TensorId, to: TensorId) -> Vec<TensorId> {
    let mut out = Vec::new();
    let mut t = from;
    while t != to {
        out.push(t);
        match f.tensors[t].definition.map(|e| &f.exprs[e].inputs[..]) {
            Some([Operand::Tensor(i)]) => t = *i,
            _ => break,
        }
    }
    out
}

/// The tensor a reader `t` feeds through copies, casts and broadcasts read once: the tensor a
/// message names, as the user wrote it (`d = s - broadcast(m)` rather than `d_broadcast`).
fn past_views(f: &Fusion, uses: &Uses, mut t: TensorId) -> TensorId {
    while let (Some(e), [r]) = (f.tensors[t].definition, &uses[t][..]) {
        if !matches!(f.exprs[e].op, Op::Set | Op::Cast(_) | Op::Broadcast { .. }) {
            break;
        }
        t = f.exprs[*r].output;
    }
    t
}

/// `t`'s definition as a reduction of one axis: (op, input, the class of the reduced axis).
fn reduction(f: &Fusion, t: TensorId) -> Option<(ReduceOp, TensorId, IterId)> {
    let e = &f.exprs[f.tensors[t].definition?];
    let (Op::Reduce { op, .. }, [Operand::Tensor(input)]) = (&e.op, &e.inputs[..]) else {
        return None;
    };
    let reduced: Vec<IterId> = f.tensors[t]
        .root
        .iter()
        .copied()
        .filter(|&a| f.ids[a].kind == IterKind::Reduction)
        .collect();
    let [axis] = reduced[..] else { return None };
    Some((*op, *input, f.class_of(axis)))
}

/// `t`'s definition as a binary op on two tensors.
fn binary(f: &Fusion, t: TensorId) -> Option<(BinaryOp, TensorId, TensorId)> {
    let e = &f.exprs[f.tensors[t].definition?];
    match (&e.op, &e.inputs[..]) {
        (Op::Binary(b), [Operand::Tensor(x), Operand::Tensor(y)]) => Some((*b, *x, *y)),
        _ => None,
    }
}

fn name(f: &Fusion, t: TensorId) -> &str {
    &f.tensors[t].name
}

/// Whether `t` iterates over the class `axis`.
fn iterates(f: &Fusion, t: TensorId, axis: IterId) -> bool {
    f.logical(t).iter().any(|&a| f.class_of(a) == axis)
}

/// The softmax `product` (a sum over `T` of a product) consumes, checked against the legality
/// rule of the module doc; the error names the tensor that breaks it.
pub fn find(f: &Fusion, product: TensorId) -> Result<OnlineSoftmax, String> {
    find_with(f, &f.use_index(), product)
}

/// [`find`] with the fusion's use lists made once ([`find_all`] asks for every sum).
fn find_with(f: &Fusion, uses: &Uses, product: TensorId) -> Result<OnlineSoftmax, String> {
    let o = name(f, product);
    let Some((ReduceOp::Sum, mul, axis)) = reduction(f, product) else {
        return Err(format!(
            "`{o}` is not a sum over one axis; the online softmax rewrites a product summed over the softmax's axis (o = sum(broadcast(p) * broadcast(v), axis=T))"
        ));
    };
    let Some((BinaryOp::Mul, x, y)) = binary(f, mul) else {
        return Err(format!(
            "`{o}` sums `{}`, which is not a product of two tensors",
            name(f, mul)
        ));
    };
    // Which factor is the softmax: the one that is a division by a row sum, or an exponential.
    let (weights, values) = {
        let (wx, wy) = (through_views(f, x), through_views(f, y));
        let is_softmax = |w: TensorId| {
            matches!(binary(f, w), Some((BinaryOp::Div, ..))) || exponential(f, w).is_some()
        };
        match (is_softmax(wx), is_softmax(wy)) {
            (true, _) => ((x, wx), y),
            (false, true) => ((y, wy), x),
            (false, false) => {
                return Err(format!(
                    "neither factor of `{o}` (`{}`, `{}`) is a softmax over the summed axis (e / broadcast(sum(e)) with e = exp(s - broadcast(max(s)))) or its exponential",
                    name(f, wx),
                    name(f, wy)
                ))
            }
        }
    };
    let (factor, w) = weights;
    // The normalised form divides e by l before the product; the other divides the product.
    let (exp, sum, probs, result) = match binary(f, w) {
        Some((BinaryOp::Div, num, den)) => {
            let e = through_views(f, num);
            (e, through_views(f, den), Some(w), product)
        }
        _ => {
            let readers = &uses[product];
            let divided = match readers[..] {
                [r] => match binary(f, f.exprs[r].output) {
                    Some((BinaryOp::Div, n, den)) if n == product => Some((f.exprs[r].output, den)),
                    _ => None,
                },
                _ => None,
            };
            let Some((d, den)) = divided else {
                return Err(format!(
                    "`{o}` sums unnormalised exponentials `{}`: its only reader must divide it by their row sum (`{o} / broadcast(l)`)",
                    name(f, w)
                ));
            };
            (w, through_views(f, den), None, d)
        }
    };
    let Some((exponential, diff)) = exponential(f, exp) else {
        return Err(format!(
            "`{}` is not exp or exp2 of the scores minus their row maximum",
            name(f, exp)
        ));
    };
    let e = name(f, exp);
    let Some((BinaryOp::Sub, s_view, m_view)) = binary(f, diff) else {
        return Err(format!(
            "`{e}` takes the exponential of `{}`, not of the scores minus their row maximum (exp(s - broadcast(m, axis=T)))",
            name(f, diff)
        ));
    };
    let (scores, max) = (through_views(f, s_view), through_views(f, m_view));
    match reduction(f, max) {
        Some((ReduceOp::Max, input, a)) if input == scores && a == axis => {}
        Some((ReduceOp::Max, input, a)) if a == axis => {
            return Err(format!(
                "`{}` is the maximum of `{}`, but `{e}` subtracts it from `{}`; the online softmax needs the maximum of the very scores it exponentiates",
                name(f, max),
                name(f, input),
                name(f, scores)
            ))
        }
        Some((ReduceOp::Max, ..)) => {
            return Err(format!(
                "`{}` is a maximum over another axis than the one `{o}` sums over",
                name(f, max)
            ))
        }
        _ => {
            return Err(format!(
                "`{e}` subtracts `{}` from the scores, which is not their maximum over the summed axis (max(s, axis=T))",
                name(f, max)
            ))
        }
    }
    match reduction(f, sum) {
        Some((ReduceOp::Sum, input, a)) if through_views(f, input) == exp && a == axis => {}
        _ => {
            return Err(format!(
                "`{}` divides by `{}`, which is not the sum of `{e}` over the summed axis (sum(e, axis=T))",
                name(f, probs.unwrap_or(result)),
                name(f, sum)
            ))
        }
    }
    let pattern = OnlineSoftmax {
        scores,
        max,
        exp,
        exponential,
        sum,
        probs,
        product,
        values: through_views(f, values),
        result,
        axis,
    };
    check_readers(f, uses, &pattern, factor)?;
    check_independent(f, &pattern)?;
    Ok(pattern)
}

/// `t` as `exp(x)` or `exp2(x)`: (which, x).
fn exponential(f: &Fusion, t: TensorId) -> Option<(Exponential, TensorId)> {
    let e = &f.exprs[f.tensors[t].definition?];
    let which = match e.op {
        Op::Unary(UnaryOp::Exp) => Exponential::Exp,
        Op::Unary(UnaryOp::Exp2) => Exponential::Exp2,
        _ => return None,
    };
    match e.inputs[..] {
        [Operand::Tensor(x)] => Some((which, x)),
        _ => None,
    }
}

/// The pattern's own tensors are read by the pattern only (`m` and `l` also by tensors that do
/// not iterate over `T`), and none of them is an output.
fn check_readers(
    f: &Fusion,
    uses: &Uses,
    p: &OnlineSoftmax,
    factor: TensorId,
) -> Result<(), String> {
    let operands = |t: TensorId| -> Vec<TensorId> {
        f.tensors[t]
            .definition
            .map(|e| f.exprs[e].input_tensors().collect())
            .unwrap_or_default()
    };
    let [diff] = operands(p.exp)[..] else {
        unreachable!("an exponential has one operand")
    };
    let [mul] = operands(p.product)[..] else {
        unreachable!("a sum has one operand")
    };
    // The tensors between the scores and the result: each exists one tile of T at a time.
    let mut internal = vec![diff, p.exp, mul];
    let [s_view, m_view] = operands(diff)[..] else {
        unreachable!("a subtraction has two operands")
    };
    internal.extend(views_to(f, s_view, p.scores));
    internal.extend(views_to(f, m_view, p.max));
    if let [sum_input] = operands(p.sum)[..] {
        internal.extend(views_to(f, sum_input, p.exp));
    }
    let division = p.probs.unwrap_or(p.result);
    if let [num, den] = operands(division)[..] {
        internal.extend(views_to(
            f,
            num,
            if p.probs.is_some() { p.exp } else { p.product },
        ));
        internal.extend(views_to(f, den, p.sum));
    }
    internal.extend(views_to(f, factor, p.probs.unwrap_or(p.exp)));
    internal.extend(p.probs);
    if p.probs.is_none() {
        internal.push(p.product);
    }
    let in_pattern =
        |t: TensorId| internal.contains(&t) || [p.sum, p.product, p.result].contains(&t);
    for &t in &internal {
        if f.tensors[t].is_output {
            return Err(format!(
                "`{}` is an output, but the online softmax never holds all of it: it exists one tile of the summed axis at a time",
                name(f, t)
            ));
        }
        if let Some(&r) = uses[t].iter().find(|&&r| !in_pattern(f.exprs[r].output)) {
            return Err(format!(
                "`{}` is read by `{}`, outside the softmax and its product; the online softmax holds one tile of the summed axis at a time, so only they may read it",
                name(f, t),
                name(f, past_views(f, uses, f.exprs[r].output))
            ));
        }
    }
    // The final statistics exist once the loop is over: readers that do not iterate over T.
    for stat in [p.max, p.sum] {
        for &r in &uses[stat] {
            let reader = f.exprs[r].output;
            if !in_pattern(reader) && iterates(f, reader, p.axis) {
                return Err(format!(
                    "`{}` reads the row statistic `{}` over the summed axis; after an online softmax only its final value exists, for readers without that axis (the log-sum-exp m + log(l))",
                    name(f, past_views(f, uses, reader)),
                    name(f, stat)
                ));
            }
        }
    }
    Ok(())
}

/// The scores and the values are computed one tile of `T` at a time: neither depends on a
/// reduction over `T` or on the softmax.
fn check_independent(f: &Fusion, p: &OnlineSoftmax) -> Result<(), String> {
    let softmax = [p.max, p.exp, p.sum, p.product, p.result];
    for (role, start) in [("scores", p.scores), ("values", p.values)] {
        let mut stack = vec![start];
        let mut seen = vec![false; f.tensors.len()];
        while let Some(t) = stack.pop() {
            if std::mem::replace(&mut seen[t.index()], true) {
                continue;
            }
            if softmax.contains(&t) || Some(t) == p.probs {
                return Err(format!(
                    "the {role} `{}` depend on `{}` of the softmax they feed",
                    name(f, start),
                    name(f, t)
                ));
            }
            if let Some((_, _, a)) = reduction(f, t) {
                if a == p.axis {
                    return Err(format!(
                        "the {role} `{}` depend on `{}`, a reduction over the summed axis; the online softmax computes them one tile of that axis at a time",
                        name(f, start),
                        name(f, t)
                    ));
                }
            }
            if let Some(e) = f.tensors[t].definition {
                stack.extend(f.exprs[e].input_tensors());
            }
        }
    }
    Ok(())
}

/// Every softmax-consuming product in `f` that the rule accepts, in tensor order.
pub fn find_all(f: &Fusion) -> Vec<OnlineSoftmax> {
    let uses = f.use_index();
    f.tensor_ids()
        .filter(|&t| matches!(reduction(f, t), Some((ReduceOp::Sum, ..))))
        .filter_map(|t| find_with(f, &uses, t).ok())
        .collect()
}
