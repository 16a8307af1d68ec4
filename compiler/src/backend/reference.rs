//! Reference evaluator: runs a fusion's math on the CPU in float64, ignoring the schedule.
//! Casts round to their target type, so a bf16 output is compared with a bf16-rounded reference.
//!
//! Each step (one expression over its whole output) is cut into pieces that write disjoint
//! ranges of that output, and the pieces go to an [`Executor`]. The cut depends only on the
//! shapes, never on who runs the pieces, so every executor gives bit-identical results:
//! [`evaluate`] runs them in order (this crate stays pure Rust and builds for wasm32), the
//! runner runs them on threads ([`evaluate_with`]). A reduction folds the reduced indices of
//! each output element in row-major order (a summed product over a contiguous innermost axis
//! as a dot product with four partial sums), reading its input row by row when the innermost
//! axis is kept. A tensor's values are dropped after their last use. [`online`] evaluates a
//! softmax and its product in the online form (running statistics over tiles).

use crate::fusion::{BinaryOp, Fusion, IterKind, Op, Operand, TensorId};
use crate::id::IdVec;
use std::borrow::Cow;
use std::collections::BTreeMap;

pub mod online;
pub mod tolerance;

/// One piece of a step: writes its own part of the step's output.
pub type Piece<'a> = Box<dyn FnOnce() + Send + 'a>;

/// Runs the pieces of a step.
pub trait Executor: Sync {
    /// Runs every piece (in any order, on any threads) and returns once all have run.
    fn run<'a>(&self, pieces: Vec<Piece<'a>>);
}

/// Runs the pieces one after another on the calling thread.
pub struct InOrder;

impl Executor for InOrder {
    fn run<'a>(&self, pieces: Vec<Piece<'a>>) {
        for piece in pieces {
            piece();
        }
    }
}

/// Output elements of an elementwise piece, and input elements a reduction piece visits.
const PIECE_ELEMENTS: usize = 1 << 16;
const PIECE_VISITS: usize = 1 << 18;

/// Runs the fusion. `inputs` maps each input tensor (or scalar) name to its row-major values;
/// returns each output's row-major values.
pub fn evaluate(
    fusion: &Fusion,
    sizes: &BTreeMap<String, i64>,
    inputs: &BTreeMap<String, Vec<f64>>,
) -> Result<BTreeMap<String, Vec<f64>>, String> {
    evaluate_with(fusion, sizes, inputs, &InOrder)
}

/// [`evaluate`] with the pieces of each step run by `executor`.
pub fn evaluate_with(
    fusion: &Fusion,
    sizes: &BTreeMap<String, i64>,
    inputs: &BTreeMap<String, Vec<f64>>,
    executor: &dyn Executor,
) -> Result<BTreeMap<String, Vec<f64>>, String> {
    // A slice that would read outside its input is refused before anything is read.
    for c in &fusion.constraints {
        c.check(sizes).map_err(|e| e.to_string())?;
    }
    let mut ev = Evaluation {
        fusion,
        sizes,
        executor,
        values: vec![None; fusion.tensors.len()].into(),
        fused: fused_products(fusion),
    };
    for &t in &fusion.inputs {
        let name = &fusion.tensors[t].name;
        let v = inputs
            .get(name)
            .ok_or_else(|| format!("no values for input `{name}`"))?;
        let n: usize = ev.shape(t)?.iter().product();
        if v.len() != n {
            return Err(format!(
                "input `{name}` has {} values, expected {n}",
                v.len()
            ));
        }
        ev.values[t] = Some(Cow::Borrowed(&v[..]));
    }
    let order = fusion.topo_exprs();
    // Reads left of each tensor (an operand read twice by one expression counts twice).
    let mut reads: IdVec<TensorId, usize> = vec![0; fusion.tensors.len()].into();
    for &e in &order {
        for o in &fusion.exprs[e].inputs {
            if let Operand::Tensor(t) = o {
                reads[*t] += 1;
            }
        }
    }
    for e in order {
        let expr = &fusion.exprs[e];
        if ev.fused.contains(&expr.output) {
            continue;
        }
        // The tensors this step reads (for the fused product: the product's operands).
        let mut read: Vec<&Operand> = expr.inputs.iter().collect();
        let result = ev.step(e, &mut read)?;
        // Drop what no later step reads (large references hold many tensors of 2^28 values).
        for o in read {
            if let Operand::Tensor(t) = o {
                reads[*t] -= 1;
                if reads[*t] == 0 && !fusion.tensors[*t].is_output {
                    ev.values[*t] = None;
                }
            }
        }
        ev.values[expr.output] = Some(Cow::Owned(result));
    }
    let mut out = BTreeMap::new();
    for &t in &fusion.outputs {
        out.insert(
            fusion.tensors[t].name.clone(),
            ev.values[t]
                .take()
                .ok_or("output not computed")?
                .into_owned(),
        );
    }
    Ok(out)
}

/// The products evaluated inside their reduction: a binary op's result that feeds only one
/// reduction, without the intermediate (a matrix product's [M, N, K] products would not fit in
/// memory).
fn fused_products(fusion: &Fusion) -> std::collections::HashSet<TensorId> {
    let use_index = fusion.use_index();
    fusion
        .tensor_ids()
        .filter(|&t| {
            let binary = fusion.tensors[t]
                .definition
                .is_some_and(|d| matches!(fusion.exprs[d].op, Op::Binary(_)));
            let uses = &use_index[t];
            binary
                && !fusion.tensors[t].is_output
                && uses.len() == 1
                && matches!(fusion.exprs[uses[0]].op, Op::Reduce { .. })
        })
        .collect()
}

/// One evaluation: the tensors' values so far, and how each step is computed.
struct Evaluation<'a> {
    fusion: &'a Fusion,
    sizes: &'a BTreeMap<String, i64>,
    executor: &'a dyn Executor,
    values: IdVec<TensorId, Option<Cow<'a, [f64]>>>,
    /// Products evaluated inside their reduction (see [`fused_products`]).
    fused: std::collections::HashSet<TensorId>,
}

type Shaped<'v> = (Cow<'v, [f64]>, Vec<usize>);

impl<'a> Evaluation<'a> {
    /// A tensor's shape at the sizes (a broadcast axis has extent 1).
    fn shape(&self, t: TensorId) -> Result<Vec<usize>, String> {
        let fusion = self.fusion;
        fusion
            .logical(t)
            .iter()
            .map(|&id| {
                if fusion.ids[id].kind == IterKind::Broadcast {
                    return Ok(1);
                }
                let e = fusion.ids[id]
                    .root_extent
                    .clone()
                    .ok_or("axis without extent")?;
                let v = e.eval(self.sizes).map_err(|e| e.to_string())?;
                usize::try_from(v).map_err(|_| format!("size {e} = {v} is negative"))
            })
            .collect()
    }

    /// The values of an operand with its shape (a literal is one value of shape []).
    fn operand(&self, o: &Operand) -> Result<Shaped<'_>, String> {
        match o {
            Operand::Scalar(v) => Ok((Cow::Owned(vec![*v]), vec![])),
            Operand::Count(c) => {
                let n = self
                    .fusion
                    .count_size(*c)
                    .eval(self.sizes)
                    .map_err(|e| e.to_string())?;
                let minus = self.fusion.counts[*c].minus;
                Ok((Cow::Owned(vec![(n as f64 - minus).max(0.0)]), vec![]))
            }
            Operand::Tensor(t) => Ok((
                Cow::Borrowed(self.values[*t].as_deref().ok_or_else(|| {
                    format!(
                        "`{}` used before it is computed",
                        self.fusion.tensors[*t].name
                    )
                })?),
                self.shape(*t)?,
            )),
        }
    }

    /// An operand where the op computes in `compute`: a literal is first rounded to that type,
    /// as the kernel writes it (`0.9f`) and torch converts a Python number to the tensor's
    /// type. (In float64 `x < 0.9` and `x < 0.9f` differ for x = 0.9f.)
    fn computed(&self, o: &Operand, compute: crate::DType) -> Result<Shaped<'_>, String> {
        self.operand(o).map(|(v, sh)| match o {
            Operand::Scalar(x) => (Cow::Owned(vec![compute.round(*x)]), sh),
            // (The kernel converts the count to `compute` too.)
            Operand::Count(_) => (Cow::Owned(vec![compute.round(v[0])]), sh),
            Operand::Tensor(_) => (v, sh),
        })
    }

    /// The values of expression `e`'s output; `read` gains what a fused product read.
    fn step(
        &self,
        e: crate::fusion::ExprId,
        read: &mut Vec<&'a Operand>,
    ) -> Result<Vec<f64>, String> {
        let expr = &self.fusion.exprs[e];
        let out_shape = self.shape(expr.output)?;
        let n: usize = out_shape.iter().product();
        Ok(match &expr.op {
            Op::Set | Op::Broadcast { .. } => {
                map(self.executor, &self.operand(&expr.inputs[0])?.0, |x| x)
            }
            Op::Permute { .. }
            | Op::Expand { .. }
            | Op::Slice { .. }
            | Op::Pad { .. }
            | Op::Cat { .. }
            | Op::ExpandBlocks { .. }
            | Op::Gather { .. }
            | Op::Reshape => self.view_step(e, &out_shape)?,
            Op::Cast(_) | Op::Unary(_) | Op::Binary(_) | Op::Ternary(_) => {
                self.arithmetic_step(e, &out_shape)?
            }
            Op::Reduce { op, axes } => self.reduce_step(e, *op, axes, n, read)?,
            Op::Mma => return Err("matrix products are not evaluated yet".into()),
            Op::Full { value } => vec![*value; n],
            // The other axes have extent 1: the flat index is the row-major one over `axes`.
            Op::ElementIndex { .. } => (0..n).map(|i| i as f64).collect(),
            Op::Iota { axis } => {
                let stride: usize = out_shape[axis + 1..].iter().product();
                let extent = out_shape[*axis].max(1);
                (0..n)
                    .map(|i| ((i / stride.max(1)) % extent) as f64)
                    .collect()
            }
        })
    }

    /// A view's values: each output element from the input element it reads.
    fn view_step(&self, e: crate::fusion::ExprId, out_shape: &[usize]) -> Result<Vec<f64>, String> {
        let expr = &self.fusion.exprs[e];
        let n: usize = out_shape.iter().product();
        let out_dtype = self.fusion.tensors[expr.output].dtype;
        Ok(match &expr.op {
            // Views: each output element reads the input through strides (0 along an expanded
            // broadcast axis, the input's own permuted for a permute).
            Op::Permute { dims } => {
                let (v, s) = self.operand(&expr.inputs[0])?;
                let input = strides_in(&s, s.len());
                let strides: Vec<usize> = dims.iter().map(|&d| input[d]).collect();
                let mut out = vec![0.0; n];
                view(self.executor, out_shape, &v, &strides, &mut out);
                out
            }
            Op::Expand { .. } => {
                let (v, s) = self.operand(&expr.inputs[0])?;
                let mut out = vec![0.0; n];
                view(
                    self.executor,
                    out_shape,
                    &v,
                    &strides_in(&s, s.len()),
                    &mut out,
                );
                out
            }
            // Views that move indices: each output element from the input element it maps to.
            Op::Slice {
                axis, start, step, ..
            } => {
                let (v, s) = self.operand(&expr.inputs[0])?;
                let start = start.eval(self.sizes).map_err(|e| e.to_string())? as usize;
                let (axis, step, strides) = (*axis, *step as usize, row_major(&s));
                remap(self.executor, out_shape, |idx| {
                    let along = start + step * idx[axis];
                    v[offset(idx, &strides) + (along - idx[axis]) * strides[axis]]
                })
            }
            Op::Pad {
                axis,
                before,
                value,
                ..
            } => {
                let (v, s) = self.operand(&expr.inputs[0])?;
                let (axis, before, strides) = (*axis, *before as usize, row_major(&s));
                let (extent, value) = (s[axis], out_dtype.round(*value));
                remap(self.executor, out_shape, |idx| {
                    let i = idx[axis];
                    if i < before || i >= before + extent {
                        return value;
                    }
                    v[offset(idx, &strides) - before * strides[axis]]
                })
            }
            Op::Cat { axis } => {
                let ((va, sa), (vb, sb)) = (
                    self.operand(&expr.inputs[0])?,
                    self.operand(&expr.inputs[1])?,
                );
                let (axis, ta, tb) = (*axis, row_major(&sa), row_major(&sb));
                let first = sa[axis];
                remap(self.executor, out_shape, |idx| {
                    if idx[axis] < first {
                        va[offset(idx, &ta)]
                    } else {
                        vb[offset(idx, &tb) - first * tb[axis]]
                    }
                })
            }
            Op::ExpandBlocks { block } => {
                let (v, s) = self.operand(&expr.inputs[0])?;
                let strides = row_major(&s);
                remap(self.executor, out_shape, |idx| {
                    let at: usize = idx
                        .iter()
                        .zip(block)
                        .zip(&strides)
                        .map(|((&i, &b), &st)| i / b as usize * st)
                        .sum();
                    v[at]
                })
            }
            // The index read at the output's element (a broadcast axis of it at 0), clamped
            // into x's extent as the kernel clamps it (torch raises instead).
            Op::Gather { axis, select } => {
                let ((vx, sx), (vi, si)) = (
                    self.operand(&expr.inputs[0])?,
                    self.operand(&expr.inputs[1])?,
                );
                let (axis, select, tx, ti) = (*axis, *select, row_major(&sx), row_major(&si));
                let extent = sx[axis];
                remap(self.executor, out_shape, |idx| {
                    let at = if select {
                        vi[idx[axis]]
                    } else {
                        let along = idx.iter().zip(&si).zip(&ti);
                        vi[along
                            .map(|((&i, &s), &t)| if s == 1 { 0 } else { i * t })
                            .sum::<usize>()]
                    };
                    vx[offset(idx, &tx) - idx[axis] * tx[axis]
                        + index_within(at, extent) * tx[axis]]
                })
            }
            // Row-major order is the same: the values are.
            Op::Reshape => self.operand(&expr.inputs[0])?.0.into_owned(),
            _ => unreachable!("view_step takes views"),
        })
    }

    /// A cast's, a unary's, a binary's or a ternary's values, in the op's compute type.
    fn arithmetic_step(
        &self,
        e: crate::fusion::ExprId,
        out_shape: &[usize],
    ) -> Result<Vec<f64>, String> {
        let expr = &self.fusion.exprs[e];
        let n: usize = out_shape.iter().product();
        let out_dtype = self.fusion.tensors[expr.output].dtype;
        Ok(match &expr.op {
            Op::Cast(d) => {
                let from = match expr.inputs[0] {
                    Operand::Tensor(t) => self.fusion.tensors[t].dtype,
                    Operand::Scalar(_) | Operand::Count(_) => crate::DType::F64,
                };
                let d = *d;
                map(self.executor, &self.operand(&expr.inputs[0])?.0, move |x| {
                    d.convert_from(from, x)
                })
            }
            Op::Unary(u) => {
                let u = *u;
                map(self.executor, &self.operand(&expr.inputs[0])?.0, move |x| {
                    out_dtype.arithmetic_result(u.eval(x))
                })
            }
            Op::Binary(b) => {
                let compute = self.fusion.compute_type(e);
                let (va, sa) = self.computed(&expr.inputs[0], compute)?;
                let (vb, sb) = self.computed(&expr.inputs[1], compute)?;
                let rank = out_shape.len();
                let mut out = vec![0.0; n];
                binary(
                    self.executor,
                    out_shape,
                    (&va, &strides_in(&sa, rank)),
                    (&vb, &strides_in(&sb, rank)),
                    *b,
                    out_dtype,
                    &mut out,
                );
                out
            }
            Op::Ternary(t) => {
                let compute = self.fusion.compute_type(e);
                // (A tensor operand is read as it is: the generator's integer operands are
                // exact in float64, and `where` tests non-zero in any type.)
                let (va, sa) = self.computed(&expr.inputs[0], t.operand_type(0, compute))?;
                let (vb, sb) = self.computed(&expr.inputs[1], t.operand_type(1, compute))?;
                let (vc, sc) = self.computed(&expr.inputs[2], t.operand_type(2, compute))?;
                let rank = out_shape.len();
                let mut out = vec![0.0; n];
                let t = *t;
                ternary(
                    self.executor,
                    out_shape,
                    [
                        (&va, &strides_in(&sa, rank)),
                        (&vb, &strides_in(&sb, rank)),
                        (&vc, &strides_in(&sc, rank)),
                    ],
                    move |x, y, z| out_dtype.arithmetic_result(t.eval(x, y, z)),
                    &mut out,
                );
                out
            }
            _ => unreachable!("arithmetic_step takes casts and elementwise ops"),
        })
    }

    /// A reduction's values; a reduction of a fused product reads the product's operands.
    fn reduce_step(
        &self,
        e: crate::fusion::ExprId,
        op: crate::fusion::ReduceOp,
        axes: &[usize],
        n: usize,
        read: &mut Vec<&'a Operand>,
    ) -> Result<Vec<f64>, String> {
        let expr = &self.fusion.exprs[e];
        let product = match expr.inputs[0] {
            Operand::Tensor(t) if self.fused.contains(&t) => Some(t),
            _ => None,
        };
        let mut out = vec![op.identity(); n];
        match product {
            Some(product) => {
                let def =
                    &self.fusion.exprs[self.fusion.tensors[product].definition.expect("binary")];
                let Op::Binary(b) = def.op else {
                    unreachable!("`fused` holds products of binary ops only")
                };
                read.extend(def.inputs.iter());
                let (va, sa) = self.operand(&def.inputs[0])?;
                let (vb, sb) = self.operand(&def.inputs[1])?;
                let ps = self.shape(product)?;
                let reduced: Vec<bool> = (0..ps.len()).map(|k| axes.contains(&k)).collect();
                let source = Source {
                    a: (&va, strides_in(&sa, ps.len())),
                    b: Some((
                        &vb,
                        strides_in(&sb, ps.len()),
                        b,
                        self.fusion.tensors[product].dtype,
                    )),
                };
                reduce(
                    self.executor,
                    &ps,
                    &reduced,
                    &source,
                    op.combine(),
                    &mut out,
                );
            }
            None => {
                let (v, s) = self.operand(&expr.inputs[0])?;
                let reduced: Vec<bool> = (0..s.len()).map(|k| axes.contains(&k)).collect();
                let source = Source {
                    a: (&v, strides_in(&s, s.len())),
                    b: None,
                };
                reduce(self.executor, &s, &reduced, &source, op.combine(), &mut out);
            }
        }
        Ok(out)
    }
}

/// Element strides of an operand of shape `s` seen through an iteration of rank `rank`: 0
/// along its broadcast (extent 1) axes, and everywhere for scalars, so one running offset per
/// operand walks it in step (no per-element allocation: references run at 2^28 elements).
fn strides_in(s: &[usize], rank: usize) -> Vec<usize> {
    if s.is_empty() {
        return vec![0; rank];
    }
    let mut st = vec![0; s.len()];
    let mut acc = 1;
    for k in (0..s.len()).rev() {
        st[k] = if s[k] == 1 { 0 } else { acc };
        acc *= s[k];
    }
    st
}

/// Cuts `out` into pieces of `per_piece` elements and runs `f(index of the piece's first
/// element, piece)` for each on `executor`.
fn in_pieces(
    executor: &dyn Executor,
    out: &mut [f64],
    per_piece: usize,
    f: impl Fn(usize, &mut [f64]) + Sync,
) {
    let f = &f;
    let pieces = out
        .chunks_mut(per_piece)
        .enumerate()
        .map(|(p, out)| Box::new(move || f(p * per_piece, out)) as Piece)
        .collect();
    executor.run(pieces);
}

/// `f` of every value, in pieces.
fn map(executor: &dyn Executor, src: &[f64], f: impl Fn(f64) -> f64 + Sync) -> Vec<f64> {
    let mut out = vec![0.0; src.len()];
    in_pieces(executor, &mut out, PIECE_ELEMENTS, |start, out| {
        for (o, &x) in out.iter_mut().zip(&src[start..]) {
            *o = f(x);
        }
    });
    out
}

/// Row-major strides of `shape` (every axis, extent 1 included).
fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * shape[k + 1];
    }
    strides
}

/// A view that moves indices: each element of `shape` from `at(its multi-index)`.
fn remap(
    executor: &dyn Executor,
    shape: &[usize],
    at: impl Fn(&[usize]) -> f64 + Sync,
) -> Vec<f64> {
    let mut out = vec![0.0; shape.iter().product()];
    in_pieces(executor, &mut out, PIECE_ELEMENTS, |start, out| {
        for (k, o) in out.iter_mut().enumerate() {
            *o = at(&unravel(start + k, shape));
        }
    });
    out
}

/// The multi-index of row-major position `flat` in `shape`.
fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for k in (0..shape.len()).rev() {
        if shape[k] > 0 {
            idx[k] = flat % shape[k];
            flat /= shape[k];
        }
    }
    idx
}

fn offset(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}

/// Advances a multi-index like an odometer, keeping the offsets of `strides` in step.
#[inline]
fn advance<const N: usize>(
    idx: &mut [usize],
    shape: &[usize],
    offsets: &mut [usize; N],
    strides: [&[usize]; N],
) {
    for k in (0..idx.len()).rev() {
        idx[k] += 1;
        for j in 0..N {
            offsets[j] += strides[j][k];
        }
        if idx[k] < shape[k] {
            return;
        }
        for j in 0..N {
            offsets[j] -= strides[j][k] * shape[k];
        }
        idx[k] = 0;
    }
}

/// Runs `$body` with `$f` bound to a closure computing the binary op `$op`: one copy of the
/// body per op, so inner loops are straight-line code (`BinaryOp::eval`'s results exactly).
macro_rules! with_op {
    ($op:expr, |$f:ident| $body:expr) => {
        match $op {
            BinaryOp::Add => {
                let $f = |a: f64, b: f64| a + b;
                $body
            }
            BinaryOp::Sub => {
                let $f = |a: f64, b: f64| a - b;
                $body
            }
            BinaryOp::Mul => {
                let $f = |a: f64, b: f64| a * b;
                $body
            }
            BinaryOp::Div => {
                let $f = |a: f64, b: f64| a / b;
                $body
            }
            BinaryOp::Max => {
                let $f = crate::fusion::ops::maximum;
                $body
            }
            BinaryOp::Min => {
                let $f = crate::fusion::ops::minimum;
                $body
            }
            other => {
                let $f = move |a: f64, b: f64| other.eval(a, b);
                $body
            }
        }
    };
}

/// `out = b(a, b)` over `shape`, with each operand's strides (0 along broadcast axes); pieces
/// are ranges of the row-major output.
fn binary(
    executor: &dyn Executor,
    shape: &[usize],
    a: (&[f64], &[usize]),
    b: (&[f64], &[usize]),
    op: BinaryOp,
    out_dtype: crate::DType,
    out: &mut [f64],
) {
    with_op!(op, |f| binary_with(
        executor,
        shape,
        a,
        b,
        move |x, y| out_dtype.arithmetic_result(f(x, y)),
        out
    ))
}

/// `out[i] = v[offset of i by strides]` over `shape`.
fn view(executor: &dyn Executor, shape: &[usize], v: &[f64], strides: &[usize], out: &mut [f64]) {
    binary_with(executor, shape, (v, strides), (v, strides), |x, _| x, out)
}

fn binary_with(
    executor: &dyn Executor,
    shape: &[usize],
    (va, ta): (&[f64], &[usize]),
    (vb, tb): (&[f64], &[usize]),
    f: impl Fn(f64, f64) -> f64 + Copy + Send + Sync,
    out: &mut [f64],
) {
    let Some(last) = shape.len().checked_sub(1) else {
        if let Some(o) = out.first_mut() {
            *o = f(va[0], vb[0]);
        }
        return;
    };
    let (inner, sa, sb) = (shape[last], ta[last], tb[last]);
    in_pieces(executor, out, PIECE_ELEMENTS, |start, out| {
        let mut idx = unravel(start, shape);
        let mut at = [offset(&idx, ta), offset(&idx, tb)];
        let mut done = 0;
        // Row by row: the innermost axis is a plain loop.
        while done < out.len() {
            let run = (inner - idx[last]).min(out.len() - done);
            let (x, y) = (at[0], at[1]);
            for (j, o) in out[done..done + run].iter_mut().enumerate() {
                *o = f(va[x + j * sa], vb[y + j * sb]);
            }
            done += run;
            if done == out.len() {
                break;
            }
            // The row is done: back to its start, then the next row.
            at[0] -= idx[last] * sa;
            at[1] -= idx[last] * sb;
            idx[last] = 0;
            advance(
                &mut idx[..last],
                &shape[..last],
                &mut at,
                [&ta[..last], &tb[..last]],
            );
        }
    });
}

/// `out = f(a, b, c)` over `shape`, each operand with its strides (0 along broadcast axes).
fn ternary(
    executor: &dyn Executor,
    shape: &[usize],
    operands: [(&[f64], &[usize]); 3],
    f: impl Fn(f64, f64, f64) -> f64 + Sync,
    out: &mut [f64],
) {
    let [(va, ta), (vb, tb), (vc, tc)] = operands;
    if shape.is_empty() {
        if let Some(o) = out.first_mut() {
            *o = f(va[0], vb[0], vc[0]);
        }
        return;
    }
    in_pieces(executor, out, PIECE_ELEMENTS, |start, out| {
        let mut idx = unravel(start, shape);
        let mut at = [offset(&idx, ta), offset(&idx, tb), offset(&idx, tc)];
        for o in out.iter_mut() {
            *o = f(va[at[0]], vb[at[1]], vc[at[2]]);
            advance(&mut idx, shape, &mut at, [ta, tb, tc]);
        }
    });
}

/// What a reduction folds: one operand, or a binary op of two (a product fused into its sum),
/// each with its strides in the iteration shape, and the product's dtype (an integer product's
/// result is held in it, `DType::arithmetic_result`).
struct Source<'v> {
    a: (&'v [f64], Vec<usize>),
    b: Option<(&'v [f64], Vec<usize>, BinaryOp, crate::DType)>,
}

impl Source<'_> {
    fn b_strides(&self) -> &[usize] {
        match &self.b {
            Some((_, tb, ..)) => tb,
            None => &self.a.1,
        }
    }
}

/// `out[kept index] = combine(out, value)` over every index of `shape`, the `reduced` axes left
/// out of `out` (row-major over the kept axes). Pieces are ranges of output elements; each
/// folds the reduced indices of its elements in row-major order.
fn reduce(
    executor: &dyn Executor,
    shape: &[usize],
    reduced: &[bool],
    source: &Source,
    combine: BinaryOp,
    out: &mut [f64],
) {
    // One copy of the loops per combine (sum, max, min) and common value (an operand, a
    // product); other binary ops go through `BinaryOp::eval`.
    let va = source.a.0;
    let with = |c: BinaryOp, out: &mut [f64]| match &source.b {
        None => with_reduce(
            c,
            executor,
            shape,
            reduced,
            source,
            move |ia, _| va[ia],
            out,
        ),
        Some((vb, _, BinaryOp::Mul, d)) if !d.is_integer() => with_reduce(
            c,
            executor,
            shape,
            reduced,
            source,
            move |ia, ib| va[ia] * vb[ib],
            out,
        ),
        Some((vb, _, op, d)) => {
            let (op, d) = (*op, *d);
            let value = move |ia: usize, ib: usize| d.arithmetic_result(op.eval(va[ia], vb[ib]));
            with_reduce(c, executor, shape, reduced, source, value, out)
        }
    };
    with(combine, out)
}

/// [`reduce_with`] with `combine` as a closure (sum, max and min get their own copies).
fn with_reduce(
    combine: BinaryOp,
    executor: &dyn Executor,
    shape: &[usize],
    reduced: &[bool],
    source: &Source,
    value: impl Fn(usize, usize) -> f64 + Copy + Send + Sync,
    out: &mut [f64],
) {
    match combine {
        BinaryOp::Add => reduce_with(
            executor,
            shape,
            reduced,
            source,
            |a, b| a + b,
            true,
            value,
            out,
        ),
        BinaryOp::Max => reduce_with(
            executor,
            shape,
            reduced,
            source,
            crate::fusion::ops::maximum,
            false,
            value,
            out,
        ),
        BinaryOp::Min => reduce_with(
            executor,
            shape,
            reduced,
            source,
            crate::fusion::ops::minimum,
            false,
            value,
            out,
        ),
        op => reduce_with(
            executor,
            shape,
            reduced,
            source,
            move |a, b| op.eval(a, b),
            false,
            value,
            out,
        ),
    }
}

/// [`reduce`]'s loops; `sum` says `combine` is `+` (then summed products over a contiguous
/// innermost axis are dot products).
#[allow(clippy::too_many_arguments)]
fn reduce_with(
    executor: &dyn Executor,
    shape: &[usize],
    reduced: &[bool],
    source: &Source,
    combine: impl Fn(f64, f64) -> f64 + Copy + Send + Sync,
    sum: bool,
    value: impl Fn(usize, usize) -> f64 + Copy + Send + Sync,
    out: &mut [f64],
) {
    if shape.contains(&0) || out.is_empty() {
        return;
    }
    let (ta, tb) = (&source.a.1[..], source.b_strides());
    let pick = |keep: bool| -> (Vec<usize>, Vec<usize>, Vec<usize>) {
        let axes = (0..shape.len()).filter(|&k| reduced[k] != keep);
        let (mut e, mut sa, mut sb) = (Vec::new(), Vec::new(), Vec::new());
        for k in axes {
            e.push(shape[k]);
            sa.push(ta[k]);
            sb.push(tb[k]);
        }
        (e, sa, sb)
    };
    let (kept, ka, kb) = pick(true);
    let (red, ra, rb) = pick(false);
    let visits: usize = red.iter().product();
    let innermost_reduced = reduced.last().copied().unwrap_or(false);
    // A summed product over a contiguous innermost axis: dot products.
    let dot = innermost_reduced
        && sum
        && matches!(source.b, Some((_, _, BinaryOp::Mul, d)) if !d.is_integer())
        && ra.last() == Some(&1)
        && rb.last() == Some(&1);
    let per_piece = if innermost_reduced {
        (PIECE_VISITS / visits.max(1)).max(1)
    } else {
        // Read the input row by row: enough outputs for whole cache lines of every row.
        (PIECE_VISITS / visits.max(1)).max(256)
    };
    let (kept, ka, kb, red, ra, rb) = (&kept, &ka, &kb, &red, &ra, &rb);
    in_pieces(executor, out, per_piece, |start, out| {
        // Offsets of each output element's first visit.
        let mut idx = unravel(start, kept);
        let mut at = [offset(&idx, ka), offset(&idx, kb)];
        let mut bases = Vec::with_capacity(out.len());
        for _ in 0..out.len() {
            bases.push(at);
            advance(&mut idx, kept, &mut at, [ka, kb]);
        }
        let mut ridx = vec![0usize; red.len()];
        if innermost_reduced {
            let last = red.len() - 1;
            let len = red[last];
            let outer_visits = visits / len.max(1);
            for (o, base) in out.iter_mut().zip(&bases) {
                let mut acc = *o;
                ridx.iter_mut().for_each(|i| *i = 0);
                let mut r = [0usize, 0usize];
                for _ in 0..outer_visits {
                    let (ia, ib) = (base[0] + r[0], base[1] + r[1]);
                    if dot {
                        let vb = source.b.as_ref().expect("dot has two operands").0;
                        acc += dot_product(&source.a.0[ia..ia + len], &vb[ib..ib + len]);
                    } else {
                        let (sa, sb) = (ra[last], rb[last]);
                        for j in 0..len {
                            acc = combine(acc, value(ia + j * sa, ib + j * sb));
                        }
                    }
                    // The outer reduced axes (the innermost is walked above).
                    advance(
                        &mut ridx[..last],
                        &red[..last],
                        &mut r,
                        [&ra[..last], &rb[..last]],
                    );
                }
                *o = acc;
            }
        } else {
            let mut r = [0usize, 0usize];
            for _ in 0..visits {
                let (x, y) = (r[0], r[1]);
                for (o, base) in out.iter_mut().zip(&bases) {
                    *o = combine(*o, value(base[0] + x, base[1] + y));
                }
                advance(&mut ridx, red, &mut r, [ra, rb]);
            }
        }
    });
}

/// `sum x[i] * y[i]` with four partial sums.
#[inline]
fn dot_product(x: &[f64], y: &[f64]) -> f64 {
    let mut partial = [0.0f64; 4];
    let (xc, yc) = (x.chunks_exact(4), y.chunks_exact(4));
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (p, q) in xc.zip(yc) {
        for l in 0..4 {
            partial[l] += p[l] * q[l];
        }
    }
    let tail: f64 = xr.iter().zip(yr).map(|(p, q)| p * q).sum();
    (partial[0] + partial[1]) + (partial[2] + partial[3]) + tail
}

/// An index read from data as the kernel uses it (`hf_index_in`): clamped into `[0, extent)`.
pub fn index_within(v: f64, extent: usize) -> usize {
    if v.is_nan() || v <= 0.0 {
        0
    } else {
        (v as usize).min(extent.saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        src: &str,
        sizes: &[(&str, i64)],
        inputs: &[(&str, Vec<f64>)],
    ) -> BTreeMap<String, Vec<f64>> {
        let program = crate::frontend::parse(src).unwrap();
        let fusion = crate::fusion::build(&program.fusion).unwrap();
        let sizes = sizes.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let inputs = inputs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        evaluate(&fusion, &sizes, &inputs).unwrap()
    }

    #[test]
    fn broadcasts_follow_the_output_index() {
        let out = run(
            "fusion f {\n  input x: f32[M, N]\n  input b: f32[N]\n  input c: f32[M]\n  y = x + broadcast(b, axis=0) * broadcast(c, axis=1)\n  output y\n}",
            &[("M", 2), ("N", 3)],
            &[("x", vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]), ("b", vec![10.0, 20.0, 30.0]), ("c", vec![1.0, 2.0])],
        );
        assert_eq!(out["y"], vec![10.0, 21.0, 32.0, 23.0, 44.0, 65.0]);
    }

    #[test]
    fn a_literal_is_compared_in_the_ops_compute_type() {
        // 0.9 as f32 is 0.89999998: the kernel's `x < 0.9f` (and torch's `x < 0.9` on an f32
        // tensor) is false there, while float64's 0.89999998 < 0.9 is true.
        let nine = 0.9f32 as f64;
        let out = run(
            "fusion f {\n  input x: f32[N]\n  m = x < 0.9\n  y = where(m, x, 0.0)\n  output y\n}",
            &[("N", 3)],
            &[("x", vec![nine, 0.5, 1.0])],
        );
        assert_eq!(out["y"], vec![0.0, 0.5, 0.0]);
        let out = run(
            "fusion f {\n  input x: f64[N]\n  m = x < 0.9\n  y = where(m, x, 0.0)\n  output y\n}",
            &[("N", 1)],
            &[("x", vec![nine])],
        );
        assert_eq!(out["y"], vec![nine], "in f64 the literal stays 0.9");
    }

    #[test]
    fn softmax_rows_and_column_reductions() {
        let ln2 = 2f64.ln();
        let out = run(
            "fusion f {\n  input x: f32[M, N]\n  e = exp(x - broadcast(max(x, axis=1), axis=1))\n  y = e / broadcast(sum(e, axis=1), axis=1)\n  output y\n}",
            &[("M", 2), ("N", 2)],
            &[("x", vec![0.0, ln2, 5.0, 5.0])],
        );
        let want = [1.0 / 3.0, 2.0 / 3.0, 0.5, 0.5];
        for (a, b) in out["y"].iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{:?}", out["y"]);
        }
        let out = run(
            "fusion f {\n  input x: f32[M, N]\n  s = sum(x, axis=0)\n  output s\n}",
            &[("M", 2), ("N", 3)],
            &[("x", vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])],
        );
        assert_eq!(out["s"], vec![5.0, 7.0, 9.0]);
    }

    /// Small deterministic values without a pattern a wrong index could hit by luck.
    fn values(n: usize, seed: u64) -> Vec<f64> {
        (0..n)
            .map(|i| (((i as u64 + 1) * 2654435761 + seed * 97) % 1000) as f64 / 250.0 - 2.0)
            .collect()
    }

    #[test]
    fn matrix_products_in_every_layout_match_a_triple_loop() {
        let (m, n, k) = (3usize, 5usize, 11usize);
        let a = values(m * k, 1);
        let b = values(k * n, 2);
        // c[i][j] = sum_l a[i][l] * b[l][j]; the operands' element (i, l) / (l, j) stored per layout.
        let expect = |a_at: &dyn Fn(usize, usize) -> f64, b_at: &dyn Fn(usize, usize) -> f64| {
            let mut c = vec![0.0; m * n];
            for i in 0..m {
                for j in 0..n {
                    c[i * n + j] = (0..k).map(|l| a_at(i, l) * b_at(l, j)).sum();
                }
            }
            c
        };
        let sizes = [("M", m as i64), ("N", n as i64), ("K", k as i64)];
        let close = |got: &[f64], want: &[f64]| {
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
            }
        };
        // a[M, K], b[N, K]: the summed axis is innermost (dot products).
        let out = run(
            "fusion f {\n  input a: f32[M, K]\n  input b: f32[N, K]\n  c = sum(broadcast(a, axis=1) * broadcast(b, axis=0), axis=2)\n  output c\n}",
            &sizes,
            &[("a", a.clone()), ("b", b.clone())],
        );
        close(
            &out["c"],
            &expect(&|i, l| a[i * k + l], &|l, j| b[j * k + l]),
        );
        // a[M, K], b[K, N]: the summed axis is in the middle.
        let out = run(
            "fusion f {\n  input a: f32[M, K]\n  input b: f32[K, N]\n  c = sum(broadcast(a, axis=2) * broadcast(b, axis=0), axis=1)\n  output c\n}",
            &sizes,
            &[("a", a.clone()), ("b", b.clone())],
        );
        close(
            &out["c"],
            &expect(&|i, l| a[i * k + l], &|l, j| b[l * n + j]),
        );
        // a[K, M], b[K, N]: the summed axis is outermost.
        let out = run(
            "fusion f {\n  input a: f32[K, M]\n  input b: f32[K, N]\n  c = sum(broadcast(a, axis=2) * broadcast(b, axis=1), axis=0)\n  output c\n}",
            &sizes,
            &[("a", a.clone()), ("b", b.clone())],
        );
        close(
            &out["c"],
            &expect(&|i, l| a[l * m + i], &|l, j| b[l * n + j]),
        );
    }

    #[test]
    fn other_reductions_of_binary_ops() {
        // max over rows of x - bias: an inner axis that is kept, another combine, a subtraction.
        let x = values(4 * 6, 3);
        let bias = values(6, 4);
        let out = run(
            "fusion f {\n  input x: f32[M, N]\n  input bias: f32[N]\n  c = max(x - broadcast(bias, axis=0), axis=0)\n  output c\n}",
            &[("M", 4), ("N", 6)],
            &[("x", x.clone()), ("bias", bias.clone())],
        );
        let want: Vec<f64> = (0..6)
            .map(|j| {
                (0..4)
                    .map(|i| x[i * 6 + j] - bias[j])
                    .fold(f64::NEG_INFINITY, f64::max)
            })
            .collect();
        assert_eq!(out["c"], want);
        // A product that is also an output is computed, and still summed.
        let out = run(
            "fusion f {\n  input x: f32[M, N]\n  p = x * x\n  s = sum(p, axis=1)\n  output p\n  output s\n}",
            &[("M", 4), ("N", 6)],
            &[("x", x.clone())],
        );
        assert_eq!(out["p"], x.iter().map(|v| v * v).collect::<Vec<_>>());
        for i in 0..4 {
            let want: f64 = (0..6).map(|j| x[i * 6 + j] * x[i * 6 + j]).sum();
            assert!((out["s"][i] - want).abs() < 1e-12);
        }
    }

    /// Runs the pieces in reverse order on threads of their own.
    struct Reversed;

    impl Executor for Reversed {
        fn run<'a>(&self, mut pieces: Vec<Piece<'a>>) {
            pieces.reverse();
            std::thread::scope(|s| {
                for piece in pieces {
                    s.spawn(piece);
                }
            });
        }
    }

    fn both(
        src: &str,
        sizes: &[(&str, i64)],
        inputs: &[(&str, Vec<f64>)],
    ) -> (BTreeMap<String, Vec<f64>>, BTreeMap<String, Vec<f64>>) {
        let program = crate::frontend::parse(src).unwrap();
        let fusion = crate::fusion::build(&program.fusion).unwrap();
        let sizes = sizes.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let inputs = inputs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        (
            evaluate(&fusion, &sizes, &inputs).unwrap(),
            evaluate_with(&fusion, &sizes, &inputs, &Reversed).unwrap(),
        )
    }

    /// Pieces run in any order on any threads give the same bits as in order, on shapes large
    /// enough for many pieces of every kind of step.
    #[test]
    fn pieces_give_the_same_bits_whatever_runs_them() {
        for (src, m, n) in [(
            "fusion f {\n  input x: f32[M, N]\n  input v: f32[N]\n  e = exp(x - broadcast(max(x, axis=1), axis=1))\n  y = e / broadcast(sum(e, axis=1), axis=1) + broadcast(v, axis=0)\n  s = sum(x, axis=0)\n  t = cast(x * 3.0, bf16)\n  output y\n  output s\n  output t\n}",
            2000usize,
            300usize,
        ), (
            "fusion f {\n  input x: f32[M, N]\n  input v: f32[N]\n  c = sum(broadcast(x, axis=2) * broadcast(x, axis=1), axis=0)\n  d = max(x - broadcast(v, axis=0), axis=0)\n  output c\n  output d\n}",
            600,
            40,
        )] {
            let (x, v) = (values(m * n, 5), values(n, 6));
            let (a, b) = both(
                src,
                &[("M", m as i64), ("N", n as i64)],
                &[("x", x.clone()), ("v", v.clone())],
            );
            assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
            for (name, values) in &a {
                let same = values
                    .iter()
                    .zip(&b[name])
                    .all(|(p, q)| p.to_bits() == q.to_bits());
                assert!(same && values.len() == b[name].len(), "{name} differs");
            }
        }
    }

    /// Reductions over outer, middle and several axes of a 3-D tensor against a plain loop.
    #[test]
    fn reductions_over_any_axes_match_a_plain_loop() {
        let (p, q, r) = (7usize, 300usize, 400usize);
        let x = values(p * q * r, 7);
        let at = |i: usize, j: usize, k: usize| x[(i * q + j) * r + k];
        let sizes = [("P", p as i64), ("Q", q as i64), ("R", r as i64)];
        let close = |got: &[f64], want: &[f64]| {
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() <= 1e-9 * w.abs().max(1.0), "{g} vs {w}");
            }
        };
        let out = run(
            "fusion f {\n  input x: f32[P, Q, R]\n  a = sum(x, axis=0)\n  b = sum(x, axis=1)\n  c = max(x, axis=[0, 2])\n  output a\n  output b\n  output c\n}",
            &sizes,
            &[("x", x.clone())],
        );
        let mut a = vec![0.0; q * r];
        let mut b = vec![0.0; p * r];
        let mut c = vec![f64::NEG_INFINITY; q];
        for i in 0..p {
            for j in 0..q {
                for k in 0..r {
                    a[j * r + k] += at(i, j, k);
                    b[i * r + k] += at(i, j, k);
                    c[j] = c[j].max(at(i, j, k));
                }
            }
        }
        close(&out["a"], &a);
        close(&out["b"], &b);
        assert_eq!(out["c"], c);
    }
}
