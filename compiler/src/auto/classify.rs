//! The class of a fusion, as the schedulers divide the work: pointwise (no reduction), transpose
//! (pointwise, with inputs read with their two innermost axes swapped), inner
//! reduction (rows reduced along their contiguous axis, nothing reads the result back over
//! the row), outer reduction (columns reduced along the outer axis), normalization (a row's
//! reductions broadcast back over the same row, so the row is a persistent buffer: softmax,
//! RMSNorm, LayerNorm, cross-entropy) matrix product (a sum of broadcast products, scaled
//! or not, as [`crate::fusion::matmul::detect_scaled`] recognises it), attention (as the SDPA
//! peers' [`crate::fusion::attention::find`] recognises it; another product over a
//! softmax's axis, as [`crate::fusion::online_softmax::find`] finds it, is named as such in the
//! reason) and full reduction (every output a reduction of all of its input's elements: a grid
//! reduction).
//!
//! Takes the unscheduled fusion; answers a [`Class`] or, for a fusion no scheduler takes, the
//! reason in one sentence.

use crate::fusion::attention::{self, Attention};
use crate::fusion::matmul::{self, Scale};
use crate::fusion::online_softmax::{self, OnlineSoftmax};
use crate::fusion::{Fusion, IterId, Op, TensorId};
use crate::plan::MatmulShape;

/// A fusion's class, with what its scheduler needs.
#[derive(Clone, Debug, PartialEq)]
pub enum Class {
    /// No reduction: `reference` is the output of highest rank.
    Pointwise { reference: TensorId },
    /// No reduction, and the `permuted` fusion inputs are read only with their last two axes
    /// swapped (their contiguous axis is `reference`'s second to last), `reference` of rank 2
    /// or 3.
    Transpose {
        reference: TensorId,
        permuted: Vec<TensorId>,
    },
    /// `reduction` (a rank-1 result) reduces the last axis of its rank-2 `input`.
    InnerReduction {
        reduction: TensorId,
        input: TensorId,
    },
    /// `reduction` reduces the first axis of its rank-2 `input`.
    OuterReduction {
        reduction: TensorId,
        input: TensorId,
    },
    /// Rows reduced and read again: `reference` is a full-rank output (or, when every output
    /// is a row's value, the last reduction), `row` a root axis of the reduced class.
    Normalization { reference: TensorId, row: IterId },
    /// A matrix product, with the dequantization scales its f32 sum is multiplied by before
    /// the cast (none for a plain product).
    MatrixProduct(MatmulShape, Vec<Scale>),
    /// Attention, `softmax(q k^T * scale) v` with an optional mask on indices and log-sum-exp
    /// output, as [`crate::fusion::attention::find`] recognises it.
    Attention(Box<Attention>),
    /// Every output a scalar, each the reduction of every element of a tensor shaped as
    /// `input` (sum, max, amax = max(abs(x)), ...), nothing reading them back: `reduction` is
    /// the last of them.
    FullReduction {
        reduction: TensorId,
        input: TensorId,
    },
}

impl Class {
    pub fn name(&self) -> &'static str {
        match self {
            Class::Pointwise { .. } => "pointwise",
            Class::Transpose { .. } => "transpose",
            Class::InnerReduction { .. } => "inner reduction",
            Class::OuterReduction { .. } => "outer reduction",
            Class::Normalization { .. } => "normalization",
            Class::MatrixProduct(..) => "matrix product",
            Class::FullReduction { .. } => "full reduction",
            Class::Attention(_) => "attention",
        }
    }
}

/// The class of the unscheduled fusion `f`, or why it has none a scheduler takes.
pub fn classify(f: &Fusion) -> Result<Class, String> {
    if f.exprs.iter().any(|e| e.op == Op::Mma) {
        return Err(
            "the fusion has an explicit tensor-core op; its schedule is written by hand".into(),
        );
    }
    if let Some((shape, scales)) = matmul::detect_scaled(f) {
        return Ok(Class::MatrixProduct(shape, scales));
    }
    if let Some(attention) = attention::find(f) {
        return Ok(Class::Attention(Box::new(attention)));
    }
    if let Some(attention) = online_softmax::find_all(f).first() {
        return Err(format!(
            "`{}` is attention (the softmax `{}` over axis {} of `{}`, times `{}` summed over that axis) of a form the attention scheduler does not take (it takes softmax(q k^T * scale) v with exp, q, k, v inputs of one dtype, at most a mask on iota and the log-sum-exp m + log(l) as a second output): write its schedule (examples/attention/attention.hf, docs/attention.md)",
            f.tensors[attention.result].name,
            f.tensors[attention.probs.unwrap_or(attention.exp)].name,
            attention_axis(f, attention),
            f.tensors[attention.scores].name,
            f.tensors[attention.values].name,
        ));
    }
    let Some(reference) = f
        .outputs
        .iter()
        .copied()
        .max_by_key(|&t| (f.rank(t), std::cmp::Reverse(t.index())))
    else {
        return Err("the fusion has no output".into());
    };
    // Every reduction: (its output, its input, the reduced position of the input); those of
    // every element apart.
    let mut reductions = Vec::new();
    let mut full = Vec::new();
    for e in &f.exprs {
        let Op::Reduce { axes, .. } = &e.op else {
            continue;
        };
        let Some(input) = e.input_tensors().next() else {
            continue;
        };
        if f.rank(e.output) == 0 && f.rank(input) > 0 {
            full.push((e.output, input));
            continue;
        }
        let [axis] = axes[..] else {
            return Err(format!(
                "`{}` reduces several axes at once; the automatic schedulers take one reduced axis",
                f.tensors[e.output].name
            ));
        };
        // A sum over one element is a squeeze (a gather's one picked column per row, summed
        // to drop it): computed where its row is, not a reduction to schedule.
        if f.class_extent(f.class_of(f.logical(input)[axis])) == crate::plan::SizeExpr::Const(1) {
            continue;
        }
        if f.rank(input) == 3 && is_broadcast_product(f, input) {
            return Err(format!(
                "`{}` sums a rank-3 product, a matrix product with more than a cast around it (an epilogue, other operands, a layout or dtype the tensor-core schedules do not take); write its schedule by hand (examples/matmul/step10_bias_gelu_tma_store.hf)",
                f.tensors[e.output].name
            ));
        }
        reductions.push((e.output, input, axis));
    }
    if let Some(&(first, input)) = full.first() {
        return full_reduction(f, &full, &reductions, first, input);
    }
    if reductions.is_empty() {
        if f.rank(reference) == 0 {
            return Err("every output is a scalar; there is nothing to parallelize".into());
        }
        let permuted = swapped_inputs(f, f.rank(reference));
        if !permuted.is_empty() {
            return Ok(Class::Transpose {
                reference,
                permuted,
            });
        }
        return Ok(Class::Pointwise { reference });
    }
    let (first_out, first_in, axis) = reductions[0];
    let rank = f.rank(first_in);
    if rank != 2 {
        return Err(format!(
            "`{}` reduces a rank-{rank} tensor; the automatic reduction schedulers take rank-2 rows and columns, or every axis at once",
            f.tensors[first_out].name
        ));
    }
    let reduced = f.class_of(f.logical(first_in)[axis]);
    for &(out, input, a) in &reductions[1..] {
        if f.rank(input) != 2 || f.class_of(f.logical(input)[a]) != reduced {
            return Err(format!(
                "`{}` and `{}` reduce different axes; one kernel with one schedule reduces one",
                f.tensors[first_out].name, f.tensors[out].name
            ));
        }
    }
    if let Some(reader) = reads_back(f, reduced) {
        if axis != 1 {
            return Err(format!(
                "`{}` reads the column reductions back over the columns (a normalization over the outer axis); the normalization scheduler takes rows",
                f.tensors[reader].name
            ));
        }
        // Every output a row's value (cross-entropy): the last reduction that is an output,
        // else the last one.
        let reference = if f.rank(reference) == 2 {
            reference
        } else {
            reductions
                .iter()
                .rev()
                .find(|r| f.tensors[r.0].is_output)
                .unwrap_or(&reductions[reductions.len() - 1])
                .0
        };
        return Ok(Class::Normalization {
            reference,
            row: f.logical(first_in)[axis],
        });
    }
    let (reduction, input, _) = reductions[reductions.len() - 1];
    Ok(if axis == 1 {
        Class::InnerReduction { reduction, input }
    } else {
        Class::OuterReduction { reduction, input }
    })
}

/// The class of a fusion with reductions of every element (`full`, (output, input) each):
/// a full reduction when they are all there is to schedule.
fn full_reduction(
    f: &Fusion,
    full: &[(TensorId, TensorId)],
    others: &[(TensorId, TensorId, usize)],
    first: TensorId,
    input: TensorId,
) -> Result<Class, String> {
    let name = |t: TensorId| &f.tensors[t].name;
    if let Some(&(other, ..)) = others.first() {
        return Err(format!(
            "`{}` reduces every element (a grid reduction) and `{}` reduces rows or columns; one kernel with one schedule does one of them",
            name(first),
            name(other)
        ));
    }
    let classes =
        |t: TensorId| -> Vec<IterId> { f.logical(t).iter().map(|&a| f.class_of(a)).collect() };
    for &(t, i) in &full[1..] {
        if classes(i) != classes(input) {
            return Err(format!(
                "`{}` and `{}` reduce tensors of different shapes; one grid covers one shape",
                name(first),
                name(t)
            ));
        }
    }
    // A grid reduction's value is complete only when the last block finishes.
    for &(t, _) in full {
        if f.exprs.iter().any(|e| e.input_tensors().any(|i| i == t)) {
            return Err(format!(
                "`{}`, a reduction of every element, is read again in the fusion, but it is complete only when every block of its grid has finished (a grid reduction): it needs a kernel of its own",
                name(t)
            ));
        }
    }
    if let Some(&out) = f.outputs.iter().find(|&&o| f.rank(o) > 0) {
        return Err(format!(
            "`{}` is an output with axes next to the reductions of every element; a grid reduction's kernel writes scalars only",
            name(out)
        ));
    }
    Ok(Class::FullReduction {
        reduction: full[full.len() - 1].0,
        input,
    })
}

/// The fusion inputs of `rank` (2 or 3) read only through a permutation that swaps their last
/// two axes (batch first): what the transpose scheduler moves through shared tiles. Empty when
/// any permutation is of another kind or of a computed tensor, or a swapped input is also read
/// directly (one layout per cache): those stay with the pointwise scheduler.
fn swapped_inputs(f: &Fusion, rank: usize) -> Vec<TensorId> {
    let swap: Vec<usize> = match rank {
        2 => vec![1, 0],
        3 => vec![0, 2, 1],
        _ => return Vec::new(),
    };
    let mut inputs = Vec::new();
    for e in &f.exprs {
        let Op::Permute { dims } = &e.op else {
            continue;
        };
        match e.input_tensors().next() {
            Some(x) if *dims == swap && f.tensors[x].is_input && f.rank(x) == rank => {
                if !inputs.contains(&x) {
                    inputs.push(x);
                }
            }
            _ => return Vec::new(),
        }
    }
    let read_directly = |x: TensorId| {
        f.exprs
            .iter()
            .any(|e| !matches!(e.op, Op::Permute { .. }) && e.input_tensors().any(|t| t == x))
    };
    if inputs
        .iter()
        .any(|&x| read_directly(x) || f.tensors[x].is_output)
    {
        return Vec::new();
    }
    inputs
}

/// Whether `t` is a product of tensors with broadcast axes (a matrix product written as the
/// sum of broadcast products).
fn is_broadcast_product(f: &Fusion, t: TensorId) -> bool {
    let Some(e) = f.tensors[t].definition.map(|e| &f.exprs[e]) else {
        return false;
    };
    e.op == Op::Binary(crate::fusion::BinaryOp::Mul)
        && e.input_tensors().any(|i| {
            f.tensors[i]
                .root
                .iter()
                .any(|&a| f.ids[a].kind == crate::fusion::IterKind::Broadcast)
        })
}

/// A tensor computed from a reduction's result that still iterates the reduced class (a
/// reduction broadcast back over its row), if any.
fn reads_back(f: &Fusion, reduced: IterId) -> Option<TensorId> {
    let mut after = vec![false; f.tensors.len()];
    for e in f.topo_exprs() {
        let expr = &f.exprs[e];
        let from_reduction =
            matches!(expr.op, Op::Reduce { .. }) || expr.input_tensors().any(|t| after[t.index()]);
        after[expr.output.index()] = from_reduction;
        if from_reduction
            && !matches!(expr.op, Op::Reduce { .. } | Op::Broadcast { .. })
            && f.logical(expr.output)
                .iter()
                .any(|&a| f.class_of(a) == reduced)
        {
            return Some(expr.output);
        }
    }
    None
}

/// The position of the softmax's axis among the scores' logical axes.
fn attention_axis(f: &Fusion, a: &OnlineSoftmax) -> usize {
    f.logical(a.scores)
        .iter()
        .position(|&x| f.class_of(x) == a.axis)
        .unwrap_or(0)
}
