//! Pass `row_math`: a row softmax's exponentials in base 2 and divisions by a row value as one
//! reciprocal per row, as FlashAttention and torch.compile's Triton kernels compute them; a
//! division by a scalar as one reciprocal per kernel, the row being the whole kernel.
//!
//! Requires: `allocation` (the row value's register and the axes it spans), before `indexing`
//! (the statements it adds are indexed as the row value's own write). Takes, from the fusion,
//! the **row values read through broadcasts**: a tensor `R` (f32) read by `broadcast(R, ...)`
//! (one or more broadcasts, each read only by the next), so `R` is constant along the axes the
//! broadcasts add: the loops over them, vectorized or serial, that read it. Two forms use one:
//! - **exponential**: `e = exp(a - broadcast(R))` (f32; the subtraction read by the
//!   exponential only), a softmax's `exp(x - broadcast(m))` or a log-sum-exp's shifted sum;
//! - **division**: `q = a / broadcast(R)` (f32), a softmax's `e / broadcast(s)`, a norm's
//!   `x / broadcast(norm)`.
//!
//! and the **scalar divisors**: `q = a / c` (f32, `q` with axes) where `c` is
//! - a scalar input (`input cap: f32 = 50.0`), a kernel parameter: softcap's `s / cap`;
//! - or a 0-dim tensor the kernel computes (`loop_nest` places it outside the loops of the
//!   tensors that read it), dropout's `x / (1.0 - p)`; its reader reads its register as it is,
//!   with no broadcast between.
//!
//! A division by a scalar is taken where a thread runs it more than once (inside a serial,
//! unrolled, vectorized or fragment loop): one a thread runs once (one element per thread, or a
//! division of two scalars, `1.0 / cap`) would pay the reciprocal's division and a product for
//! the one division it had, and is left as it is.
//!
//! The kernel must hold them as `loop_nest` writes them: each expression its own statement, the
//! broadcast a copy of `R` (`e_broadcast[*] = m[*]`), the subtraction or division reading the
//! broadcast's register (a 0-dim divisor's own register, a scalar input's parameter), the
//! exponential the subtraction's; `R` in a register (not shared memory, not a tensor-core
//! fragment), never written inside a vectorized loop. Where a form's statements are not so (an
//! online softmax or log-sum-exp rewrote them: those are left out of the fusion's forms as well)
//! the form is left as it is. The dividend may be anything, a tensor-core fragment included (the
//! attention kernel's `s / cap` reads the S accumulator): only the divisor changes.
//!
//! Guarantees:
//! - right after each write of `R` (in the same loops, with the same role, so predicated as that
//!   write is), a register of `R`'s shape holds `R_neg_log2 = R * -log2(e)` for an exponential
//!   form, `R_recip = 1 / R` (IEEE, CUDA's `1.0f / x`) for a division form: once per row (once
//!   where it is computed for a 0-dim `R`);
//! - for each division by a scalar input `c`, a 0-dim register `c_recip = 1 / c` (IEEE)
//!   allocated and written first in the kernel body, outside every loop and branch (a
//!   warp-specialized kernel's consumer warps compute it once, its producer warps not at all):
//!   once per thread, guarded as the division's bounds that the thread and block indices alone
//!   decide (`place_param_twins` says why that is enough: one register per division);
//! - the broadcast reads that register instead of `R` (a 0-dim divisor's reader reads it
//!   itself); the subtraction becomes `fma(a, log2(e), R_neg_log2)` and the exponential `exp2`
//!   of it (in PTX one `fma.rn.f32` and one `ex2.approx.f32`, CUDA's `exp2f`, the base-2 form
//!   `online_softmax` uses, with the same helpers); the division becomes `a * R_recip` (one
//!   FMUL where the IEEE division was a subroutine of about 10 instructions with a `MUFU.RCP`
//!   and a branch to a slow path).
//!
//! Within tolerance (an f32 output is validated at a relative L2 of 1e-5, bf16 at 1e-2):
//! - the exponential's argument `a log2(e) - R log2(e)` is off by the rounding of `R log2(e)`
//!   (2^-24 of `|R| log2(e)`) and of the FFMA (2^-24 of the argument), and `ex2.approx` is
//!   within 2 ulp: a relative error of about 2^-24 (|R| + |a - R|) + 2^-22 in the exponential,
//!   where `expf(a - R)` had 2^-24 |a - R| + 2^-23: under 1e-6 while the row values are within
//!   16 (the runner's inputs are in [-1, 1)); a softmax's f32 probabilities carry it through one
//!   multiplication;
//! - `a * (1 / R)` is rounded twice, within 1.5 ulp (1.8e-7) of the correctly rounded `a / R`
//!   while `R` and `1 / R` are normal (2^-126 < |R| < 2^126: a softmax's sum is at least 1, a
//!   norm's at least its epsilon's square root, a softcap's cap is 50, a dropout's `1 - p` in
//!   (0, 1]); the same holds for a scalar divisor, which is one `R` for the whole kernel;
//! - the special rows are the plain form's. A row masked throughout (`R = -inf`): `expf(-inf -
//!   -inf)` is NaN and so is `exp2f(fma(-inf, log2(e), +inf))`, as the float64 reference's
//!   `exp(-inf + inf)`; no guard (an online softmax's running maximum is guarded because its
//!   factor `exp(m_prev - m)` must be 0 for earlier masked tiles; here NaN is what the plain form
//!   and the reference give). An `R = +inf` gives NaN at its own element and 0 at finite ones
//!   in both forms; a NaN row value NaN everywhere. Division, by a row value or a scalar alike:
//!   `a * (1 / ±0)` is `±inf` or NaN as `a / ±0` (a softcap's `cap = 0`: `0 * tanh(±inf)` is 0
//!   and `tanh(NaN)` at `s = 0` NaN, in both forms), `a * (1 / inf)` 0 as `a / inf` (`cap =
//!   inf`: `inf * tanh(0)`, NaN in both), `inf * 0` NaN as `inf / inf`, and a NaN divisor NaN
//!   everywhere in both. Unlike the plain form, a row value of magnitude 2^128 / log2(e)
//!   (2.4e38) or more overflows `R log2(e)`, and a divisor below 2^-126 in magnitude
//!   (subnormal) has a reciprocal that overflows to inf or loses bits where the division did
//!   not.
//!
//! Emits: one register per row value and form (`{R}_neg_log2`, `{R}_recip`), its `alloc` right
//! after `R`'s, its compute after each of `R`'s writes (`R`'s expression and role); one 0-dim
//! register per division by a scalar input (`{c}_recip`), its `alloc` and compute first in the
//! kernel body (labelled with that division's expression).

use super::context::{Change, Ctx};
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::fusion::{
    BinaryOp, ExprId, MemoryType, Op, Operand, ParallelType, TensorId, TernaryOp, UnaryOp,
};
use crate::kir::{Access, BufferId, Compute, ComputeRole, Data, Kernel, Stmt};
use rustc_hash::FxHashSet;

/// `x log2(e) + y` with one rounding: the argument of a base-2 exponential (`y` is `-m log2(e)`).
pub fn log2_fma(x: Data, y: Data, dtype: DType) -> Data {
    Data::Ternary(
        TernaryOp::Fma,
        dtype,
        Box::new([x, Data::Literal(std::f64::consts::LOG2_E, dtype), y]),
    )
}

/// `-m log2(e)`: what a base-2 exponential adds to `x log2(e)` for `exp(x - m)`.
pub fn neg_log2(m: Data, dtype: DType) -> Data {
    Data::Binary(
        BinaryOp::Mul,
        dtype,
        Box::new(m),
        Box::new(Data::Literal(-std::f64::consts::LOG2_E, dtype)),
    )
}

/// The exponential of an online softmax or log-sum-exp in base 2 (its elements `exp2(x - m)`
/// and its rescale factor `exp2(m_prev - m)`, `m` the running maximum): in f32 `exp2_ftz`, one
/// MUFU.EX2 where `exp2f` adds a compare and two multiplies for subnormal results. Each value
/// is at most 1 and joins a sum (or a product's accumulator) that holds the maximum's own
/// `exp2(0) = 1` (or is rescaled next to it), so a result below 2^-126 flushed to 0 changes
/// that sum by less than its rounding (2^-24). Not here: a row softmax's exponentials
/// divided into outputs, where a subnormal probability is a value of its own.
pub fn shifted_exp2(dtype: DType) -> UnaryOp {
    if dtype == DType::F32 {
        UnaryOp::Exp2Ftz
    } else {
        UnaryOp::Exp2
    }
}

/// What a row value's register holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum RowForm {
    /// `-R log2(e)`, for `exp(a - broadcast(R))`.
    NegLog2,
    /// `1 / R`, for `a / broadcast(R)`.
    Reciprocal,
}

/// Where a form's row value is read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RowSource {
    /// A tensor's register, written by the kernel (a row's statistic, a 0-dim tensor).
    Register,
    /// A scalar input, read as a kernel parameter (a division form only): its row is the
    /// whole kernel.
    Param,
}

/// One exponential or division form of the fusion (the module doc).
#[derive(Debug)]
struct Site {
    form: RowForm,
    source: RowSource,
    /// The row value `R` (a scalar input when `source` is [`RowSource::Param`]).
    row: TensorId,
    /// The broadcasts from `R` to the operand, `R`'s reader first; none for a division by a
    /// scalar (a scalar input or a 0-dim tensor, which an operand of any shape reads as it is).
    views: Vec<ExprId>,
    /// The subtraction (exponential form) or the division.
    op_expr: ExprId,
    /// The exponential (exponential form).
    exp_expr: Option<ExprId>,
}

/// Whether the fusion has a form whose row value and broadcasts `allocation` placed in
/// registers or shared memory (the pass is skipped otherwise: a row value read from global
/// memory, as a segment's input or an output read back, is not one).
pub fn used(cx: &Ctx) -> bool {
    let placed = |t: TensorId| {
        cx.layout
            .tensor_buffer
            .get(&t)
            .is_some_and(|b| cx.layout.alloc_ids.contains_key(b))
    };
    sites(cx).iter().any(|s| match s.source {
        RowSource::Register => {
            placed(s.row) && s.views.iter().all(|&e| placed(cx.fusion.exprs[e].output))
        }
        RowSource::Param => placed(cx.fusion.exprs[s.op_expr].output),
    })
}

/// Runs the pass: each form whose statements are as the module doc says is rewritten.
pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<Change, Diagnostic> {
    // In the order made, so the statements' order does not depend on hashing.
    let mut twins: Vec<((TensorId, RowForm), BufferId)> = Vec::new();
    // A scalar input's reciprocal for one division, labelled with it (see `place_param_twins`).
    let mut param_twins: Vec<(TensorId, BufferId, ExprId)> = Vec::new();
    let mut changed = false;
    for site in sites(cx) {
        // A division by a scalar that a thread runs once gains nothing from a reciprocal.
        if site.views.is_empty() && !repeats_per_thread(k, site.op_expr) {
            continue;
        }
        if site.source == RowSource::Param {
            let name = &cx.fusion.tensors[site.row].name;
            if !param_division_fits(k, &site, name) {
                continue;
            }
            let twin = cx.new_register(k, &format!("{name}_recip"), DType::F32, Vec::new());
            k.buffers[twin].size = Some(crate::kir::Val::Int(1));
            param_twins.push((site.row, twin, site.op_expr));
            rewrite_param_division(k, &site, twin);
            changed = true;
            continue;
        }
        let Some(bufs) = SiteBuffers::of(cx, k, &site) else {
            continue;
        };
        if !bufs.statements_fit(k, &site) {
            continue;
        }
        let key = (site.row, site.form);
        let twin = match twins.iter().find(|(made, _)| *made == key) {
            Some(&(_, b)) => b,
            None => {
                let b = new_twin(cx, k, &site, bufs.row);
                twins.push((key, b));
                b
            }
        };
        rewrite_site(k, &site, &bufs, twin);
        changed = true;
    }
    for &((row, form), twin) in &twins {
        place_twin(k, cx.layout.tensor_buffer[&row], twin, form);
    }
    place_param_twins(cx, k, &param_twins);
    Ok(if changed {
        Change::Changed
    } else {
        Change::Unchanged
    })
}

/// Whether every statement of expression `e` runs more than once per thread: inside a loop
/// that is not a thread or block binding (serial, unrolled, vectorized, a fragment's).
fn repeats_per_thread(k: &Kernel, e: ExprId) -> bool {
    let (mut every, mut any) = (true, false);
    crate::kir::for_each_in_loops(&k.body, &mut |s, loops| {
        if let Stmt::Compute(c) = s {
            if c.expr == e {
                any = true;
                every &= loops.iter().any(|l| !l.parallel.is_hw());
            }
        }
    });
    any && every
}

/// The fusion's forms (the module doc), in expression order, without those an online softmax
/// or an online log-sum-exp computes (their passes rewrite those statements).
fn sites(cx: &Ctx) -> Vec<Site> {
    let f = cx.fusion;
    let mut online: FxHashSet<TensorId> = FxHashSet::default();
    for r in &f.online_softmax {
        online.insert(r.pattern.exp);
        online.extend(r.pattern.probs);
    }
    for r in &f.online_logsumexp {
        if let Ok(l) = crate::fusion::logsumexp::find(f, r.lse) {
            online.insert(l.exp);
        }
    }
    let f32_tensor = |t: TensorId| f.tensors[t].dtype == DType::F32;
    let mut out = Vec::new();
    for e in f.expr_ids() {
        let expr = &f.exprs[e];
        if online.contains(&expr.output) || !f32_tensor(expr.output) {
            continue;
        }
        let site = match (&expr.op, &expr.inputs[..]) {
            (Op::Unary(UnaryOp::Exp), [Operand::Tensor(d)]) => {
                let Some(sub) = f.tensors[*d].definition else {
                    continue;
                };
                let (Op::Binary(BinaryOp::Sub), [Operand::Tensor(_), Operand::Tensor(b)]) =
                    (&f.exprs[sub].op, &f.exprs[sub].inputs[..])
                else {
                    continue;
                };
                if !f32_tensor(*d) || !only_reader(cx, *d, e) {
                    continue;
                }
                broadcast_chain(cx, *b, sub).map(|(row, views)| Site {
                    form: RowForm::NegLog2,
                    source: RowSource::Register,
                    row,
                    views,
                    op_expr: sub,
                    exp_expr: Some(e),
                })
            }
            (Op::Binary(BinaryOp::Div), [Operand::Tensor(_), Operand::Tensor(b)]) => {
                let site = |source, row, views| Site {
                    form: RowForm::Reciprocal,
                    source,
                    row,
                    views,
                    op_expr: e,
                    exp_expr: None,
                };
                // A scalar divisor of a division with axes: its row is the whole kernel (a
                // division of two scalars is computed once anyway).
                let scalar = f.rank(*b) == 0 && f.rank(expr.output) > 0;
                if scalar && f.is_scalar_param(*b) {
                    Some(site(RowSource::Param, *b, Vec::new()))
                } else if scalar {
                    Some(site(RowSource::Register, *b, Vec::new()))
                } else {
                    broadcast_chain(cx, *b, e)
                        .map(|(row, views)| site(RowSource::Register, row, views))
                }
            }
            _ => None,
        };
        out.extend(site.filter(|s| f32_tensor(s.row)));
    }
    out
}

/// Whether `reader` is the only expression the kernel computes that reads `t`, and `t` is not
/// an output.
fn only_reader(cx: &Ctx, t: TensorId, reader: ExprId) -> bool {
    let uses = &cx.reads.uses[t];
    !cx.fusion.tensors[t].is_output && !uses.is_empty() && uses.iter().all(|&u| u == reader)
}

/// The row value `t` is a broadcast of (through one or more broadcasts, each read only by the
/// next, the last by `reader`) and the broadcasts, the row value's reader first; `None` when
/// `t` is not a broadcast.
fn broadcast_chain(cx: &Ctx, t: TensorId, reader: ExprId) -> Option<(TensorId, Vec<ExprId>)> {
    let f = cx.fusion;
    let (mut t, mut reader) = (t, reader);
    let mut views = Vec::new();
    while let Some(e) = f.tensors[t].definition {
        let (Op::Broadcast { .. }, [Operand::Tensor(input)]) =
            (&f.exprs[e].op, &f.exprs[e].inputs[..])
        else {
            break;
        };
        if !only_reader(cx, t, reader) {
            return None;
        }
        views.push(e);
        reader = e;
        t = *input;
    }
    views.reverse();
    (!views.is_empty()).then_some((t, views))
}

/// The registers of one form's tensors.
struct SiteBuffers {
    row: BufferId,
    /// The broadcasts' registers, `R`'s reader first.
    views: Vec<BufferId>,
    /// The subtraction's register (exponential form).
    diff: Option<BufferId>,
}

impl SiteBuffers {
    /// The registers, when `R` and every tensor of the form has one as the module doc asks.
    fn of(cx: &Ctx, k: &Kernel, site: &Site) -> Option<SiteBuffers> {
        let f = cx.fusion;
        let buffer = |t: TensorId| cx.layout.tensor_buffer.get(&t).copied();
        let row = buffer(site.row)?;
        let held = |b: BufferId| {
            k.buffers[b].memory == MemoryType::Local && cx.layout.alloc_ids.contains_key(&b)
        };
        let fragment = |b: BufferId| {
            cx.layout.alloc_ids[&b]
                .iter()
                .any(|&id| f.ids[id].parallel == ParallelType::Mma)
        };
        if !held(row) || fragment(row) || k.buffers[row].dtype != DType::F32 {
            return None;
        }
        let views = site
            .views
            .iter()
            .map(|&e| buffer(f.exprs[e].output).filter(|&b| held(b)))
            .collect::<Option<Vec<_>>>()?;
        let diff = match site.form {
            RowForm::NegLog2 => Some(buffer(f.exprs[site.op_expr].output).filter(|&b| held(b))?),
            RowForm::Reciprocal => None,
        };
        Some(SiteBuffers { row, views, diff })
    }

    /// Whether the kernel's statements of the form are as the module doc says: `R` written
    /// (outside vectorized loops) and allocated; each broadcast a copy of the register before it,
    /// read by the next statement of the form only; the subtraction or division reading the last
    /// broadcast's register as its right operand, its left operand reading none of the form's
    /// registers; the exponential of the subtraction's register, its only reader.
    fn statements_fit(&self, k: &Kernel, site: &Site) -> bool {
        let mut fits = true;
        let (mut row_writes, mut row_alloc) = (0, false);
        let mut counts = vec![0usize; site.views.len() + 2];
        let form_regs: Vec<BufferId> = std::iter::once(self.row)
            .chain(self.views.iter().copied())
            .chain(self.diff)
            .collect();
        // The register the subtraction or division reads: `R`'s own for a 0-dim divisor.
        let last_view = self.views.last().copied().unwrap_or(self.row);
        crate::kir::for_each_in_loops(&k.body, &mut |s, loops| {
            let c = match s {
                Stmt::Alloc(b) if *b == self.row => {
                    row_alloc = true;
                    return;
                }
                Stmt::Compute(c) => c,
                _ => return,
            };
            if c.out.buffer == self.row {
                row_writes += 1;
                fits &= !loops.iter().any(|l| l.parallel == ParallelType::Vectorize);
            }
            let reads = |d: &Data, b: BufferId| {
                let mut found = false;
                d.for_each_read(&mut |a| found |= a.buffer == b);
                found
            };
            // Who may read each register of the form: the next statement of the form.
            for (i, &v) in self.views.iter().enumerate() {
                let next = site.views.get(i + 1).copied().unwrap_or(site.op_expr);
                fits &= !reads(&c.value, v) || c.expr == next;
            }
            if let (Some(d), Some(exp)) = (self.diff, site.exp_expr) {
                fits &= !reads(&c.value, d) || c.expr == exp;
            }
            if let Some(i) = site.views.iter().position(|&e| e == c.expr) {
                let source = if i == 0 { self.row } else { self.views[i - 1] };
                fits &= matches!(&c.value, Data::Read(a) if a.buffer == source);
                counts[i] += 1;
            } else if c.expr == site.op_expr {
                let op = match site.form {
                    RowForm::NegLog2 => BinaryOp::Sub,
                    RowForm::Reciprocal => BinaryOp::Div,
                };
                fits &= matches!(&c.value, Data::Binary(o, DType::F32, a, b)
                    if *o == op
                        && matches!(&**b, Data::Read(r) if r.buffer == last_view)
                        && !form_regs.iter().any(|&r| reads(a, r)));
                counts[site.views.len()] += 1;
            } else if Some(c.expr) == site.exp_expr {
                fits &= matches!(&c.value, Data::Unary(UnaryOp::Exp, DType::F32, x)
                    if matches!(&**x, Data::Read(r) if Some(r.buffer) == self.diff));
                counts[site.views.len() + 1] += 1;
            }
        });
        let exp_count_ok = site.exp_expr.is_none() || counts[site.views.len() + 1] > 0;
        fits && row_alloc
            && row_writes > 0
            && counts[..=site.views.len()].iter().all(|&n| n > 0)
            && exp_count_ok
    }
}

/// The register of `site`'s row value in its form: `R`'s axes and size, named after `R`.
fn new_twin(cx: &mut Ctx, k: &mut Kernel, site: &Site, row: BufferId) -> BufferId {
    let suffix = match site.form {
        RowForm::NegLog2 => "neg_log2",
        RowForm::Reciprocal => "recip",
    };
    let name = format!("{}_{suffix}", cx.fusion.tensors[site.row].name);
    let ids = cx.layout.alloc_ids[&row].clone();
    let twin = cx.new_register(k, &name, DType::F32, ids);
    k.buffers[twin].size = k.buffers[row].size.clone();
    twin
}

/// The form's statements read the register instead of `R` (checked by
/// [`SiteBuffers::statements_fit`]): the first broadcast copies it, the subtraction is the
/// base-2 argument and the exponential `exp2`, or the division a multiplication.
fn rewrite_site(k: &mut Kernel, site: &Site, bufs: &SiteBuffers, twin: BufferId) {
    let first_view = site.views.first().copied();
    let to_twin = |d: &mut Data| {
        d.for_each_read_mut(&mut |a| {
            if a.buffer == bufs.row {
                a.buffer = twin;
            }
        })
    };
    crate::kir::for_each_stmt_mut(&mut k.body, &mut |s| {
        let Stmt::Compute(c) = s else {
            return crate::kir::Flow::Descend;
        };
        if Some(c.expr) == first_view {
            to_twin(&mut c.value);
        } else if c.expr == site.op_expr {
            let value = std::mem::replace(&mut c.value, Data::Literal(0.0, DType::F32));
            c.value = match value {
                Data::Binary(BinaryOp::Sub, dt, a, b) => log2_fma(*a, *b, dt),
                // A 0-dim divisor is read as it is (no broadcast reads the twin for it).
                Data::Binary(BinaryOp::Div, dt, a, mut b) => {
                    if first_view.is_none() {
                        to_twin(&mut b);
                    }
                    Data::Binary(BinaryOp::Mul, dt, a, b)
                }
                other => other,
            };
        } else if Some(c.expr) == site.exp_expr {
            if let Data::Unary(op @ UnaryOp::Exp, _, _) = &mut c.value {
                *op = UnaryOp::Exp2;
            }
        }
        crate::kir::Flow::Descend
    });
}

/// The register's `alloc` after `R`'s and its compute after each of `R`'s writes.
fn place_twin(k: &mut Kernel, row: BufferId, twin: BufferId, form: RowForm) {
    crate::kir::rewrite_post(&mut k.body, &mut |s| match s {
        Stmt::Alloc(b) if b == row => vec![s, Stmt::Alloc(twin)],
        Stmt::Compute(c) if c.out.buffer == row => {
            let read = Data::Read(Access {
                buffer: row,
                index: None,
            });
            let value = match form {
                RowForm::NegLog2 => neg_log2(read, DType::F32),
                RowForm::Reciprocal => Data::Unary(UnaryOp::Reciprocal, DType::F32, Box::new(read)),
            };
            let twin_write = Compute {
                out: Access {
                    buffer: twin,
                    index: None,
                },
                value,
                vector: None,
                ..c.clone()
            };
            vec![Stmt::Compute(c), Stmt::Compute(twin_write)]
        }
        s => vec![s],
    });
}

/// Whether the kernel computes the division of a scalar input's form (`a / cap`) as
/// `loop_nest` writes it: each of its statements an f32 `div` whose right operand is the
/// parameter `name`.
fn param_division_fits(k: &Kernel, site: &Site, name: &str) -> bool {
    let (mut fits, mut count) = (true, 0);
    crate::kir::for_each_in_loops(&k.body, &mut |s, _| {
        let Stmt::Compute(c) = s else { return };
        if c.expr != site.op_expr {
            return;
        }
        count += 1;
        fits &= matches!(&c.value, Data::Binary(BinaryOp::Div, DType::F32, _, b)
            if matches!(&**b, Data::Param(n, DType::F32) if n == name));
    });
    fits && count > 0
}

/// The division by a scalar input (checked by [`param_division_fits`]) becomes a
/// multiplication by the register holding its reciprocal.
fn rewrite_param_division(k: &mut Kernel, site: &Site, twin: BufferId) {
    crate::kir::for_each_stmt_mut(&mut k.body, &mut |s| {
        if let Stmt::Compute(c) = s {
            if c.expr == site.op_expr {
                if let Data::Binary(op @ BinaryOp::Div, _, _, b) = &mut c.value {
                    *op = BinaryOp::Mul;
                    **b = Data::Read(Access {
                        buffer: twin,
                        index: None,
                    });
                }
            }
        }
        crate::kir::Flow::Descend
    });
}

/// Each scalar input's reciprocal register, allocated and computed first in the kernel (a
/// parameter is available everywhere; once per thread, before every loop and branch), in the
/// order made. Its statement is labelled with the division that reads it, so `predicate`
/// guards it with the bounds of that division's tensor that the thread and block indices alone
/// decide: a subset of the division's own guard, so the register is written wherever the
/// division reads it (a register shared by divisions of tensors of other shapes could be read
/// where it was not written: one per division).
fn place_param_twins(cx: &Ctx, k: &mut Kernel, twins: &[(TensorId, BufferId, ExprId)]) {
    let top = twins.iter().flat_map(|&(param, twin, expr)| {
        let t = &cx.fusion.tensors[param];
        let recip = Compute {
            expr,
            out: Access {
                buffer: twin,
                index: None,
            },
            value: Data::Unary(
                UnaryOp::Reciprocal,
                DType::F32,
                Box::new(Data::Param(t.name.clone(), t.dtype)),
            ),
            role: ComputeRole::Normal,
            vector: None,
        };
        [Stmt::Alloc(twin), Stmt::Compute(recip)]
    });
    let body = std::mem::take(&mut k.body);
    k.body = top.chain(body).collect();
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::f64::consts::LOG2_E;

    /// An element as the plain form computes it in f32: `expf(x - m)`.
    fn plain(x: f32, m: f32) -> f32 {
        (x - m).exp()
    }

    /// An element as the base-2 form computes it in f32: `exp2f(fma(x, log2(e), -m log2(e)))`
    /// (`mul_add` is the FFMA; `exp2` stands for `ex2.approx`, which gives the same special
    /// values: NaN for NaN, 0 for -inf, inf for inf).
    fn base2(x: f32, m: f32) -> f32 {
        let neg = m * -(LOG2_E as f32);
        x.mul_add(LOG2_E as f32, neg).exp2()
    }

    #[test]
    fn a_row_masked_throughout_is_nan_in_both_forms_and_in_the_reference() {
        let inf = f32::INFINITY;
        assert!(plain(-inf, -inf).is_nan() && base2(-inf, -inf).is_nan());
        // A +inf maximum: NaN at its element, 0 at the finite ones, in both forms.
        assert!(plain(inf, inf).is_nan() && base2(inf, inf).is_nan());
        assert_eq!((plain(1.0, inf), base2(1.0, inf)), (0.0, 0.0));
        // A masked element of a row that keeps some: 0 in both.
        assert_eq!((plain(-inf, 0.5), base2(-inf, 0.5)), (0.0, 0.0));
        assert!(base2(f32::NAN, 0.5).is_nan() && base2(0.5, f32::NAN).is_nan());
        // The reference: row 0 keeps no column, so its probabilities are NaN; row 1 is finite.
        let src = "fusion f {\n  input x: f32[M, N]\n  keep = iota(x, axis=1) < iota(x, axis=0)\n  xm = where(keep, x, -1.0 / 0.0)\n  m = max(xm, axis=1)\n  e = exp(xm - broadcast(m, axis=1))\n  s = sum(e, axis=1)\n  y = e / broadcast(s, axis=1)\n  output y\n}";
        let program = crate::frontend::parse(src).unwrap();
        let f = crate::fusion::build(&program.fusion).unwrap();
        let sizes = BTreeMap::from([("M".to_string(), 2), ("N".to_string(), 3)]);
        let inputs = BTreeMap::from([("x".to_string(), vec![0.25, -0.5, 1.0, 0.75, 0.5, -1.0])]);
        let y = &crate::backend::reference::evaluate(&f, &sizes, &inputs).unwrap()["y"];
        assert!(y[..3].iter().all(|v| v.is_nan()), "{y:?}");
        assert!(y[3..].iter().all(|v| v.is_finite()), "{y:?}");
    }

    #[test]
    fn the_base_2_form_is_within_the_module_docs_bound_of_the_exponential() {
        // Row values up to 16 and shifts down to -20 (exp(-20) = 2e-9): the relative error
        // against the float64 exponential is 2^-24 (|m| + |x - m|) plus the rounding of the
        // result (exp2 here is correctly rounded; ex2.approx adds its 2 ulp on the GPU).
        let mut worst: f64 = 0.0;
        for i in 0..=64 {
            let m = -16.0 + 0.5 * i as f32 + 0.123;
            for j in 0..=200 {
                let x = m - 0.1 * j as f32;
                let exact = ((x as f64) - (m as f64)).exp();
                let rel = (base2(x, m) as f64 - exact).abs() / exact;
                let bound = 2f64.powi(-24) * ((m as f64).abs() + (x as f64 - m as f64).abs())
                    + 2f64.powi(-23);
                assert!(rel <= bound, "x {x} m {m}: {rel:e} > {bound:e}");
                worst = worst.max(rel);
            }
        }
        assert!(worst < 1e-5, "{worst:e}");
    }

    #[test]
    fn a_product_by_the_reciprocal_is_within_one_and_a_half_ulp_of_the_division() {
        let mut s = 1.0f32;
        while s < 1e6 {
            for a in [1e-30f32, 3e-5, 0.37, 1.0, 7.5, 1e20] {
                let q = a / s;
                let r = a * (1.0 / s);
                let ulp = f32::from_bits(q.to_bits() + 1) - q;
                assert!((r - q).abs() <= 1.5 * ulp, "{a} / {s}: {r} against {q}");
            }
            s = s * 1.37 + 0.01;
        }
        // The special divisors give the division's values.
        for (a, s) in [
            (1.0f32, 0.0f32),
            (0.0, 0.0),
            (1.0, f32::INFINITY),
            (f32::INFINITY, f32::INFINITY),
        ] {
            let (q, r) = (a / s, a * (1.0 / s));
            assert!(
                q == r || (q.is_nan() && r.is_nan()),
                "{a} / {s}: {r} against {q}"
            );
        }
    }

    #[test]
    fn a_scalar_divisors_reciprocal_is_the_division_for_any_normal_divisor_and_special_cap() {
        // Divisors below 1 as well (a dropout's 1 - p), down to 2^-100 and up to 2^100: within
        // 1.5 ulp of the division while the divisor, its reciprocal and the quotient are normal.
        let mut c = 2f32.powi(-100);
        while c < 2f32.powi(100) {
            for a in [1e-3f32, 0.37, 1.0, 7.5, 1e3] {
                let (q, r) = (a / c, a * (1.0 / c));
                let ulp = f32::from_bits(q.to_bits() + 1) - q;
                assert!((r - q).abs() <= 1.5 * ulp, "{a} / {c}: {r} against {q}");
            }
            c *= 3.7;
        }
        // A softcap's special caps: `cap * tanh(s * (1 / cap))` is `cap * tanh(s / cap)`,
        // NaN where that is NaN (cap = 0 at s = 0, cap = inf everywhere, a NaN cap).
        let inf = f32::INFINITY;
        let plain = |s: f32, cap: f32| cap * (s / cap).tanh();
        let recip = |s: f32, cap: f32| cap * (s * (1.0 / cap)).tanh();
        for cap in [0.0f32, -0.0, inf, -inf, f32::NAN] {
            for s in [-3.0f32, -0.0, 0.0, 1e-3, 7.0, inf, -inf] {
                let (p, r) = (plain(s, cap), recip(s, cap));
                assert!(
                    p.to_bits() == r.to_bits() || (p.is_nan() && r.is_nan()),
                    "cap {cap}, s {s}: {r} against {p}"
                );
            }
        }
        assert!(plain(0.0, 0.0).is_nan() && plain(1.0, inf).is_nan());
        assert_eq!((plain(2.0, 0.0), recip(-2.0, 0.0)), (0.0, 0.0));
    }

    #[test]
    fn a_division_by_a_scalar_a_thread_runs_once_stays_a_division() {
        // One element per thread: a reciprocal would cost the division it saves.
        let once = "fusion f {\n  input x: f32[M, N]\n  input c: f32 = 2.0\n  y = x / c + 1.0\n  output y\n}\nschedule {\n  y.merge(0)\n  y.split(0, 128)\n  y.parallelize(0, BIDx)\n  y.parallelize(1, TIDx)\n  propagate(y)\n  inline_most()\n}\n";
        let cuda = crate::compile(once, &Default::default()).unwrap().cuda;
        assert!(
            cuda.contains("y_div[0] = x[mn_o * 128 + mn_i] / c;"),
            "{cuda}"
        );
        assert!(!cuda.contains("recip"), "{cuda}");
        // Four elements per thread (an unrolled loop): one reciprocal, four products.
        let four = once.replace(
            "  y.parallelize(1, TIDx)",
            "  y.split(1, 4)\n  y.parallelize(1, TIDx)\n  y.parallelize(2, Unroll)",
        );
        let cuda = crate::compile(&four, &Default::default()).unwrap().cuda;
        assert_eq!(
            cuda.matches("c_recip[0] = 1.0f / (c);").count(),
            1,
            "{cuda}"
        );
        assert!(
            cuda.contains("] * c_recip[0];") && !cuda.contains("/ c;"),
            "{cuda}"
        );
    }
}
