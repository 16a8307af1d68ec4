//! Pass `online_logsumexp`: each log-sum-exp an `online_logsumexp(lse)` statement names
//! computed in one pass over its operand: a running maximum and a rescaled sum of exponentials
//! per thread instead of the builder's two reductions (the maximum, then the shifted sum).
//!
//! Requires: `reduction` (the maximum's and the sum's accumulators with their init, update,
//! block reduction and write; [`Accumulators`] finds them), and the two loop nests a
//! `recompute` of the operand gives, in one block: `alloc m_acc` and its init, the nest `L_m`
//! holding m's update, m's block reduction and write and the shift's computes (`isinf`,
//! `where`), then `alloc s_acc` and its init, the nest `L_s` holding the shift's broadcast `w`,
//! the subtraction `d = x' - w` alone in its loop (the step: the vector of 8 of
//! examples/fusions/cross_entropy_labels.hf), the exponential and s's update, then s's block
//! reduction and write. Takes the fusion's [`crate::fusion::Fusion::online_logsumexp`] requests
//! and finds each one's tensors again on the scheduled fusion
//! ([`crate::fusion::logsumexp::find`]).
//!
//! Guarantees, with `shift(v) = where(isinf(v), 0, v)` (the builder's rule for an infinite
//! maximum):
//! - `L_m` is gone, with the buffers only it wrote: the row is read once;
//! - in `L_s`, before the step loop: `{lse}_prev = m_acc`, a copy of the step loop updating
//!   `m_acc = max(m_acc, x')`, `{lse}_neg_log2 = shift(m_acc) * -log2(e)`, then `s_acc = s_acc *
//!   exp2(fma({lse}_prev, log2(e), {lse}_neg_log2))` (one exponential per step); the
//!   subtraction becomes `fma(x', log2(e), {lse}_neg_log2)` and its exponential `exp2`, the
//!   base-2 form of `row_math` (its module doc has the error analysis; one FFMA and one
//!   `ex2.approx` per element where `x' - m` and `expf` took about five instructions); both
//!   exponentials are `exp2_ftz` in f32 (`row_math::shifted_exp2`: at most 1, summed next to
//!   the maximum's 1, a subnormal flushed to 0 is below the sum's rounding), and `w` is
//!   not computed. Where something besides the exponential reads the subtraction, both stay
//!   in base e (`d = x' - shift(m_acc)`, `exp({lse}_prev - shift(m_acc))`);
//! - after `L_s`: `{lse}_thread = m_acc`, m's block reduction, write and shift (moved from
//!   before `L_s`), then `s_acc = s_acc * exp({lse}_thread - u)`, `u` the block's shift, before
//!   s's block reduction.
//!
//! A thread or step with no element keeps `m = -inf` and `s = 0`: `exp(-inf - shift)` is 0, so
//! it rescales an empty sum to 0, never `0 * inf`. The rescales are `OnlineRescale` computes
//! (outside the reduction loops: no bounds predicate). Emits a located error, naming `lse` as
//! the user wrote it, when the kernel is not in that shape (with what to schedule instead).

use super::context::{Change, Ctx};
use super::reduction::Accumulators;
use super::row_math::{log2_fma, neg_log2, shifted_exp2};
use super::welford::{one_row_accumulators, read, reg};
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::fusion::logsumexp::{find, OnlineLogSumExp};
use crate::fusion::ops::{BinaryOp, TernaryOp, UnaryOp};
use crate::fusion::{ExprId, LogSumExpRewrite, TensorId};
use crate::kir::{BufferId, Compute, ComputeRole, Data, Kernel, Stmt};
use rustc_hash::FxHashSet;

pub fn used(cx: &Ctx) -> bool {
    !cx.fusion.online_logsumexp.is_empty()
}

pub fn run(
    cx: &mut Ctx,
    accumulators: &Accumulators,
    k: &mut Kernel,
) -> Result<Change, Diagnostic> {
    for request in cx.fusion.online_logsumexp.clone() {
        rewrite(cx, accumulators, k, &request)?;
    }
    Ok(Change::Changed)
}

/// What the restructuring of one log-sum-exp's block needs.
struct Plan {
    max_acc: BufferId,
    sum_acc: BufferId,
    /// `{lse}_prev`, `{lse}_thread` and `{lse}_neg_log2`.
    prev: BufferId,
    thread: BufferId,
    neg_log2: BufferId,
    max_expr: ExprId,
    sum_expr: ExprId,
    /// The exprs computed between the two nests (moved after `L_s`): m's write, `isinf`, the
    /// shift.
    between: [ExprId; 3],
    shift_expr: ExprId,
    broadcast_expr: ExprId,
    sub_expr: ExprId,
}

fn rewrite(
    cx: &mut Ctx,
    accumulators: &Accumulators,
    k: &mut Kernel,
    request: &LogSumExpRewrite,
) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let name = f.tensors[request.lse].name.clone();
    let err =
        |why: String| Diagnostic::new(format!("online_logsumexp({name}): {why}"), request.span);
    let l: OnlineLogSumExp = find(f, request.lse).map_err(err)?;
    let def = |t: TensorId| f.tensors[t].definition;
    let [max_acc, sum_acc] =
        one_row_accumulators(cx, accumulators, [l.max, l.sum], &name, "maximum and sum")
            .map_err(err)?;
    let (Some(max_expr), Some(sum_expr), Some(shift_expr), Some(broadcast_expr), Some(sub_expr)) = (
        def(l.max),
        def(l.sum),
        def(l.shift),
        def(l.broadcast),
        def(l.sub),
    ) else {
        return Err(err(
            "internal: a tensor of the log-sum-exp has no definition".into(),
        ));
    };
    let Some(inf_expr) = f.exprs[shift_expr].input_tensors().next().and_then(def) else {
        return Err(err("internal: the shift reads no isinf".into()));
    };
    let broadcast = l.broadcast;
    let prev = cx.new_register(k, &format!("{name}_prev"), DType::F32, Vec::new());
    let thread = cx.new_register(k, &format!("{name}_thread"), DType::F32, Vec::new());
    let neg_log2 = cx.new_register(k, &format!("{name}_neg_log2"), DType::F32, Vec::new());
    let plan = Plan {
        max_acc,
        sum_acc,
        prev,
        thread,
        neg_log2,
        max_expr,
        sum_expr,
        between: [max_expr, inf_expr, shift_expr],
        shift_expr,
        broadcast_expr,
        sub_expr,
    };
    let mut outcome: Option<Result<Vec<ExprId>, String>> = None;
    crate::kir::for_each_block_mut(&mut k.body, &mut |block| {
        let holds = |b: BufferId| block.iter().any(|s| matches!(s, Stmt::Alloc(a) if *a == b));
        if outcome.is_none() && holds(max_acc) && holds(sum_acc) {
            outcome = Some(restructure(block, &plan));
        }
    });
    let gone = match outcome {
        Some(r) => r.map_err(err)?,
        None => {
            return Err(err(format!(
                "its maximum and sum are not computed in one block of the kernel (schedule both alike: propagate from `{}`)",
                f.tensors[l.sum].name
            )))
        }
    };
    // The broadcast and what only `L_m` computed get no allocation.
    cx.layout.tensor_buffer.remove(&broadcast);
    for e in gone {
        cx.layout.tensor_buffer.remove(&f.exprs[e].output);
    }
    Ok(())
}

fn f32_binary(op: BinaryOp, a: Data, b: Data) -> Data {
    Data::Binary(op, DType::F32, Box::new(a), Box::new(b))
}

fn exp(x: Data) -> Data {
    Data::Unary(UnaryOp::Exp, DType::F32, Box::new(x))
}

/// `where(isinf(m), 0, m)` of the running maximum `m`.
fn shift(m: BufferId) -> Data {
    Data::Ternary(
        TernaryOp::Where,
        DType::F32,
        Box::new([
            Data::Unary(UnaryOp::IsInf, DType::F32, Box::new(read(m))),
            Data::Literal(0.0, DType::F32),
            read(m),
        ]),
    )
}

fn rescale(expr: ExprId, out: BufferId, value: Data) -> Stmt {
    Stmt::Compute(Compute {
        expr,
        out: reg(out),
        value,
        role: ComputeRole::OnlineRescale,
        vector: None,
    })
}

fn holds(s: &Stmt, pred: &mut dyn FnMut(&Stmt) -> bool) -> bool {
    crate::kir::any_stmt(std::slice::from_ref(s), pred)
}

fn is_update(s: &Stmt, expr: ExprId) -> bool {
    matches!(s, Stmt::Compute(c) if c.expr == expr && c.role == ComputeRole::ReductionUpdate)
}

/// The buffers `d` reads.
fn data_reads(d: &Data, out: &mut FxHashSet<BufferId>) {
    d.for_each_read(&mut |a| {
        out.insert(a.buffer);
    });
}

/// Restructures the block that allocates both accumulators (see the module doc); returns the
/// exprs only the removed nest `L_m` computed.
fn restructure(block: &mut Vec<Stmt>, p: &Plan) -> Result<Vec<ExprId>, String> {
    let find = |pred: &mut dyn FnMut(&Stmt) -> bool| block.iter().position(|s| holds(s, pred));
    let alloc_of = |b: BufferId| move |s: &Stmt| matches!(s, Stmt::Alloc(a) if *a == b);
    let (Some(i_alloc_max), Some(i_alloc_sum), Some(i_max), Some(i_sum)) = (
        block.iter().position(alloc_of(p.max_acc)),
        block.iter().position(alloc_of(p.sum_acc)),
        find(&mut |s| is_update(s, p.max_expr)),
        find(&mut |s| is_update(s, p.sum_expr)),
    ) else {
        return Err("internal: the maximum's or the sum's update was not found".into());
    };
    let nest = |i: usize| matches!(block[i], Stmt::Loop(_));
    if !(i_alloc_max < i_max
        && i_max < i_alloc_sum
        && i_alloc_sum < i_sum
        && nest(i_max)
        && nest(i_sum))
    {
        return Err("the maximum and the sum are not two loop nests one after the other; give the sum's chain its own copy of the operand (`x.recompute()` before the splits) and schedule both alike (propagate from the sum)".into());
    }
    // Between the nests: only the maximum's block reduction, write and shift.
    for s in &block[i_max + 1..i_alloc_sum] {
        let ok = match s {
            Stmt::BlockReduce { acc, .. } => acc.buffer == p.max_acc,
            Stmt::Compute(c) => p.between.contains(&c.expr),
            Stmt::Alloc(_) => true,
            _ => false,
        };
        if !ok {
            return Err("other statements lie between the maximum's loop nest and the sum's (the one pass moves the maximum's block reduction after the sum's loop); schedule the log-sum-exp's tensors alike (propagate from the sum)".into());
        }
    }
    let Some(shift_out) = block[i_max + 1..i_alloc_sum].iter().find_map(|s| match s {
        Stmt::Compute(c) if c.expr == p.shift_expr => Some(c.out.clone()),
        _ => None,
    }) else {
        return Err("the shift of the maximum is not computed between the two loop nests; schedule the log-sum-exp's tensors alike (propagate from the sum)".into());
    };
    // `L_m`: nothing it writes but m's accumulator is read outside it.
    let mut written = FxHashSet::default();
    let mut gone = Vec::new();
    crate::kir::for_each_stmt(std::slice::from_ref(&block[i_max]), &mut |s| {
        if let Stmt::Compute(c) = s {
            if c.expr != p.max_expr {
                written.insert(c.out.buffer);
                gone.push(c.expr);
            }
        }
    });
    let mut read_elsewhere = FxHashSet::default();
    for (i, s) in block.iter().enumerate() {
        if i != i_max {
            crate::kir::for_each_stmt(std::slice::from_ref(s), &mut |s| {
                if let Stmt::Compute(c) = s {
                    data_reads(&c.value, &mut read_elsewhere);
                }
            });
        }
    }
    if written.iter().any(|b| read_elsewhere.contains(b)) {
        return Err("what the maximum's loop nest computes is read after it (the row is kept); give the sum's chain its own copy of the operand (`x.recompute()` before the splits)".into());
    }
    // `L_s`: the step before the subtraction, the broadcast dropped.
    let mut sum_nest = vec![block[i_sum].clone()];
    if !edit_step(&mut sum_nest, p)? {
        return Err("internal: the subtraction was not found in the sum's loop nest".into());
    }
    crate::kir::rewrite_post(&mut sum_nest, &mut |s| match s {
        Stmt::Compute(c) if c.expr == p.broadcast_expr => Vec::new(),
        Stmt::Loop(l) if l.body.is_empty() => Vec::new(),
        s => vec![s],
    });
    let mut out: Vec<Stmt> = Vec::with_capacity(block.len() + 4);
    let mut moved = Vec::new();
    for (i, s) in std::mem::take(block).into_iter().enumerate() {
        if i == i_max {
            continue;
        }
        if i > i_max && i < i_alloc_sum {
            moved.push(s);
            continue;
        }
        if i == i_sum {
            out.push(Stmt::Alloc(p.prev));
            out.push(Stmt::Alloc(p.thread));
            out.push(Stmt::Alloc(p.neg_log2));
            out.append(&mut sum_nest);
            out.push(rescale(p.max_expr, p.thread, read(p.max_acc)));
            out.append(&mut moved);
            out.push(rescale(
                p.sum_expr,
                p.sum_acc,
                f32_binary(
                    BinaryOp::Mul,
                    read(p.sum_acc),
                    exp(f32_binary(
                        BinaryOp::Sub,
                        read(p.thread),
                        Data::Read(shift_out.clone()),
                    )),
                ),
            ));
            continue;
        }
        out.push(s);
    }
    *block = out;
    Ok(gone)
}

/// In `body` (inside `L_s`): finds the loop that holds the subtraction alone, puts the step's
/// maximum update and the sum's rescale before it and makes the subtraction read the running
/// shift (in base 2 where only the exponential reads it). Whether it found the subtraction.
fn edit_step(body: &mut Vec<Stmt>, p: &Plan) -> Result<bool, String> {
    let base2 = exponential_only(body, p.sub_expr);
    let is_sub = |s: &Stmt| matches!(s, Stmt::Compute(c) if c.expr == p.sub_expr);
    let is_step = &mut |s: &Stmt| matches!(s, Stmt::Loop(l) if l.body.iter().any(is_sub));
    let Some((step_block, i)) = crate::kir::find_mut(body, is_step) else {
        return Ok(false);
    };
    let Stmt::Loop(l) = &mut step_block[i] else {
        unreachable!("found as a loop")
    };
    let [Stmt::Compute(c)] = l.body.as_mut_slice() else {
        return Err("the subtraction of the shifted maximum shares its loop with other statements; leave it a loop of its own (inline_most() leaves the builder's)".into());
    };
    let Data::Binary(BinaryOp::Sub, dt, x, _) = &c.value else {
        return Err("internal: the subtraction is not one".into());
    };
    let (dt, x) = (*dt, (**x).clone());
    // The subtraction's value, the shift's base-2 factor (computed once per step) and the
    // sum's rescale: base 2 where the exponential alone reads the subtraction.
    let (shifted, neg, factor) = match base2 {
        Some(_) => (
            log2_fma(x.clone(), read(p.neg_log2), dt),
            Some(rescale(
                p.shift_expr,
                p.neg_log2,
                neg_log2(shift(p.max_acc), DType::F32),
            )),
            Data::Unary(
                shifted_exp2(DType::F32),
                DType::F32,
                Box::new(log2_fma(read(p.prev), read(p.neg_log2), DType::F32)),
            ),
        ),
        None => (
            Data::Binary(
                BinaryOp::Sub,
                dt,
                Box::new(x.clone()),
                Box::new(shift(p.max_acc)),
            ),
            None,
            exp(f32_binary(BinaryOp::Sub, read(p.prev), shift(p.max_acc))),
        ),
    };
    c.value = shifted;
    let mut update = l.clone();
    update.body = vec![Stmt::Compute(Compute {
        expr: p.max_expr,
        out: reg(p.max_acc),
        value: f32_binary(BinaryOp::Max, read(p.max_acc), x),
        role: ComputeRole::ReductionUpdate,
        vector: None,
    })];
    let mut before = vec![
        rescale(p.max_expr, p.prev, read(p.max_acc)),
        Stmt::Loop(update),
    ];
    before.extend(neg);
    before.push(rescale(
        p.sum_expr,
        p.sum_acc,
        f32_binary(BinaryOp::Mul, read(p.sum_acc), factor),
    ));
    step_block.splice(i..i, before);
    if let Some(exp_expr) = base2 {
        crate::kir::for_each_stmt_mut(body, &mut |s| {
            if let Stmt::Compute(c) = s {
                if c.expr == exp_expr {
                    if let Data::Unary(op @ UnaryOp::Exp, dt, _) = &mut c.value {
                        *op = shifted_exp2(*dt);
                    }
                }
            }
            crate::kir::Flow::Descend
        });
    }
    Ok(true)
}

/// The expression of the exponential that alone reads the subtraction `sub` in `body` (f32,
/// `exp(d)` on the subtraction's register), or None where anything else reads it.
fn exponential_only(body: &[Stmt], sub: ExprId) -> Option<ExprId> {
    let mut out = None;
    crate::kir::for_each_stmt(body, &mut |s| {
        if let Stmt::Compute(c) = s {
            if c.expr == sub {
                out = Some(c.out.buffer);
            }
        }
    });
    let sub_out = out?;
    // Each reader of the subtraction: its expression where it is the exponential, else None.
    let mut readers: Vec<Option<ExprId>> = Vec::new();
    crate::kir::for_each_stmt(body, &mut |s| {
        if let Stmt::Compute(c) = s {
            let mut reads = FxHashSet::default();
            data_reads(&c.value, &mut reads);
            if reads.contains(&sub_out) {
                readers.push(match &c.value {
                    Data::Unary(UnaryOp::Exp, DType::F32, x)
                        if matches!(&**x, Data::Read(a) if a.buffer == sub_out) =>
                    {
                        Some(c.expr)
                    }
                    _ => None,
                });
            }
        }
    });
    let first = (*readers.first()?)?;
    readers.iter().all(|r| *r == Some(first)).then_some(first)
}
