//! Recognises a fusion that is exactly one matrix product, so the runner can compare it with
//! cuBLAS on the same problem.
//!
//! Takes the unscheduled fusion. Finds the shape
//! `c = [cast](sum(x * y, axis=r))` where `x` and `y` are rank-3 broadcasts (one new axis each,
//! reached through copies and widening casts) of the fusion's only inputs `a` and `b`, rank 2.
//! The product's axes are positional, so the axes left after the sum, in order, are `M` and `N`;
//! the operand without `N` is the left one. Each operand's layout follows from where its
//! broadcast axis sits. Anything else (an epilogue, a second output, a narrowing cast before the
//! product, a product used twice) is not a plain matrix product and gets `None`: a cuBLAS
//! ceiling would then time different work.
//!
//! [`detect_scaled`] also takes the sum multiplied by dequantization scales before the cast
//! (`cast(s * sa * sb, bf16)`, FP8's per-tensor and row-wise forms, as
//! `frontend::dequantize` leaves them) and names each [`Scale`]: what the automatic product
//! scheduler reads, where the epilogue is part of the kernel.

use super::{BinaryOp, Fusion, Op, Operand, ReduceOp, TensorId};
use crate::dtype::DType;
use crate::plan::{MatmulShape, OperandLayout};

/// A dequantization scale a product's f32 sum is multiplied by before the cast.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scale {
    /// A scalar input: one scale for the whole operand.
    PerTensor(TensorId),
    /// A rank-1 input over M (`broadcast(sa, axis=1)`): a scale per row of `a`.
    PerRow(TensorId),
    /// A rank-1 input over N (`broadcast(sb, axis=0)`): a scale per row of `b`, a column of
    /// the result.
    PerColumn(TensorId),
}

impl Scale {
    pub fn input(&self) -> TensorId {
        match *self {
            Scale::PerTensor(t) | Scale::PerRow(t) | Scale::PerColumn(t) => t,
        }
    }

    /// What the scale varies with, as a reason names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Scale::PerTensor(_) => "per tensor",
            Scale::PerRow(_) => "per row",
            Scale::PerColumn(_) => "per column",
        }
    }
}

/// The matrix product `f` computes, if it is exactly one.
pub fn detect(f: &Fusion) -> Option<MatmulShape> {
    match detect_scaled(f)? {
        (shape, scales) if scales.is_empty() => Some(shape),
        _ => None,
    }
}

/// The matrix product `f` computes, if it is exactly one, with the scales its f32 sum is
/// multiplied by before the optional cast (none for a plain product).
pub fn detect_scaled(f: &Fusion) -> Option<(MatmulShape, Vec<Scale>)> {
    let [c] = f.outputs[..] else { return None };
    // An optional cast of the sum (e.g. a bf16 result).
    let mut sum_out = c;
    if let Op::Cast(_) = definition(f, c)?.op {
        sum_out = only_tensor_input(f, c)?;
    }
    // Scale factors multiplied into the sum: (the scale input, its broadcast axis if rank 1).
    let mut factors = Vec::new();
    while let (Op::Binary(BinaryOp::Mul), [Operand::Tensor(x), Operand::Tensor(y)]) = {
        let e = definition(f, sum_out)?;
        (&e.op, &e.inputs[..])
    } {
        if f.uses(sum_out).len() != 1 && sum_out != c {
            return None;
        }
        if let Some(factor) = scale_factor(f, *y) {
            factors.push(factor);
            sum_out = *x;
        } else {
            factors.push(scale_factor(f, *x)?);
            sum_out = *y;
        }
    }
    let Op::Reduce {
        op: ReduceOp::Sum,
        axes,
    } = &definition(f, sum_out)?.op
    else {
        return None;
    };
    let [r] = axes[..] else { return None };
    let product = only_tensor_input(f, sum_out)?;
    if f.rank(product) != 3 || f.uses(product).len() != 1 || f.tensors[product].is_output {
        return None;
    }
    let mul = definition(f, product)?;
    let (Op::Binary(BinaryOp::Mul), [Operand::Tensor(x), Operand::Tensor(y)]) =
        (&mul.op, &mul.inputs[..])
    else {
        return None;
    };
    let accumulate = f.tensors[product].dtype;
    if !matches!(accumulate, DType::F32 | DType::F64)
        || f.tensors[sum_out].dtype != accumulate
        || !f.tensors[c].dtype.is_float()
    {
        return None;
    }
    // Positions of the product's axes: the two kept ones are M then N.
    let kept: Vec<usize> = (0..3).filter(|&p| p != r).collect();
    let (pm, pn) = (kept[0], kept[1]);
    let (ix, bx) = broadcast_input(f, *x)?;
    let (iy, by) = broadcast_input(f, *y)?;
    // The left operand lacks N, the right one lacks M.
    let (a, b) = if (bx, by) == (pn, pm) {
        (ix, iy)
    } else if (bx, by) == (pm, pn) {
        (iy, ix)
    } else {
        return None;
    };
    let logical = f.logical(product);
    let scales = factors
        .into_iter()
        .map(|(input, axis)| match axis {
            None => Some(Scale::PerTensor(input)),
            Some(axis) => {
                let along = f.class_of(f.logical(input)[0]);
                match axis {
                    1 if along == f.class_of(logical[pm]) => Some(Scale::PerRow(input)),
                    0 if along == f.class_of(logical[pn]) => Some(Scale::PerColumn(input)),
                    _ => None,
                }
            }
        })
        .collect::<Option<Vec<_>>>()?;
    let mut inputs = f.inputs.clone();
    crate::id::sort_by_position(&mut inputs, |t| t.index());
    let mut used = vec![a, b];
    used.extend(scales.iter().map(Scale::input));
    crate::id::sort_by_position(&mut used, |t| t.index());
    used.dedup();
    if inputs != used || f.rank(a) != 2 || f.rank(b) != 2 {
        return None;
    }
    // Row-major axes of each operand: the product's positions without its broadcast axis.
    let a_layout = if pm < r {
        OperandLayout::Normal
    } else {
        OperandLayout::Transposed
    };
    let b_layout = if r < pn {
        OperandLayout::Normal
    } else {
        OperandLayout::Transposed
    };
    let extent = |p: usize| f.class_extent(f.class_of(logical[p]));
    let shape = MatmulShape {
        a: f.tensors[a].name.clone(),
        b: f.tensors[b].name.clone(),
        c: f.tensors[c].name.clone(),
        m: extent(pm),
        n: extent(pn),
        k: extent(r),
        a_layout,
        b_layout,
        a_dtype: f.tensors[a].dtype,
        b_dtype: f.tensors[b].dtype,
        c_dtype: f.tensors[c].dtype,
        accumulate,
    };
    Some((shape, scales))
}

/// `t` as a scale factor of the sum: an f32 scalar input (no axis) or the broadcast of an
/// f32 rank-1 input over a rank-2 result (the broadcast axis).
fn scale_factor(f: &Fusion, t: TensorId) -> Option<(TensorId, Option<usize>)> {
    let f32_input = |t: TensorId, rank: usize| {
        f.tensors[t].is_input && f.tensors[t].dtype == DType::F32 && f.rank(t) == rank
    };
    if f32_input(t, 0) {
        return Some((t, None));
    }
    let Op::Broadcast { axes } = &definition(f, t)?.op else {
        return None;
    };
    let input = only_tensor_input(f, t)?;
    match axes[..] {
        [axis] if f32_input(input, 1) && f.rank(t) == 2 => Some((input, Some(axis))),
        _ => None,
    }
}

fn definition(f: &Fusion, t: TensorId) -> Option<&super::Expr> {
    f.tensors[t].definition.map(|e| &f.exprs[e])
}

fn only_tensor_input(f: &Fusion, t: TensorId) -> Option<TensorId> {
    match definition(f, t)?.inputs[..] {
        [Operand::Tensor(i)] => Some(i),
        _ => None,
    }
}

/// The fusion input `t` is a broadcast of, through copies and widening float casts, and the
/// position of the one broadcast axis.
fn broadcast_input(f: &Fusion, mut t: TensorId) -> Option<(TensorId, usize)> {
    let mut position = None;
    while !f.tensors[t].is_input {
        let e = definition(f, t)?;
        let from = only_tensor_input(f, t)?;
        match &e.op {
            Op::Set => {}
            Op::Cast(to) if widens(f.tensors[from].dtype, *to) => {}
            Op::Broadcast { axes } if position.is_none() && axes.len() == 1 => {
                position = Some(axes[0]);
            }
            _ => return None,
        }
        t = from;
    }
    Some((t, position?))
}

/// A cast that loses nothing: same type, or a float type to a wider one.
fn widens(from: DType, to: DType) -> bool {
    from == to
        || (from.is_float()
            && to.is_float()
            && to.size_bytes() > from.size_bytes()
            && matches!(to, DType::F32 | DType::F64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::SizeExpr;

    fn detect_in(src: &str) -> Option<MatmulShape> {
        let program = crate::frontend::parse(src).unwrap();
        detect(&crate::fusion::build(&program.fusion).unwrap())
    }

    fn fusion(inputs: &str, body: &str) -> String {
        format!("fusion f {{\n{inputs}\n{body}\n  output c\n}}")
    }

    #[test]
    fn all_four_layouts() {
        use OperandLayout::{Normal as N, Transposed as T};
        let cases = [
            // a[M, K] b[N, K]: reduce the last axis.
            (
                "  input a: f32[M, K]\n  input b: f32[N, K]",
                "  c = sum(broadcast(a, axis=1) * broadcast(b, axis=0), axis=2)",
                (N, T),
            ),
            // a[M, K] b[K, N]: reduce the middle axis.
            (
                "  input a: f32[M, K]\n  input b: f32[K, N]",
                "  c = sum(broadcast(a, axis=2) * broadcast(b, axis=0), axis=1)",
                (N, N),
            ),
            // a[K, M] b[K, N]: reduce the first axis.
            (
                "  input a: f32[K, M]\n  input b: f32[K, N]",
                "  c = sum(broadcast(a, axis=2) * broadcast(b, axis=1), axis=0)",
                (T, N),
            ),
            // a[M, K] b[K, N], operands written in the other order. (a[K, M] with b[N, K]
            // needs a transpose the language does not have.)
            (
                "  input b: f32[K, N]\n  input a: f32[M, K]",
                "  c = sum(broadcast(b, axis=0) * broadcast(a, axis=2), axis=1)",
                (N, N),
            ),
        ];
        for (inputs, body, (la, lb)) in cases {
            let src = fusion(inputs, body);
            let s = detect_in(&src).unwrap_or_else(|| panic!("not detected:\n{src}"));
            assert_eq!(
                (s.a.as_str(), s.b.as_str(), s.c.as_str()),
                ("a", "b", "c"),
                "{src}"
            );
            assert_eq!((s.a_layout, s.b_layout), (la, lb), "{src}");
            assert_eq!(
                (s.m, s.n, s.k),
                (SizeExpr::sym("M"), SizeExpr::sym("N"), SizeExpr::sym("K")),
                "{src}"
            );
        }
    }

    #[test]
    fn widening_casts_and_a_narrowing_result() {
        let s = detect_in(&fusion(
            "  input a: bf16[M, K]\n  input b: bf16[N, K]",
            "  p = broadcast(cast(a, f32), axis=1) * broadcast(cast(b, f32), axis=0)\n  c = cast(sum(p, axis=2), bf16)",
        ))
        .unwrap();
        assert_eq!(
            (s.a_dtype, s.b_dtype, s.c_dtype, s.accumulate),
            (DType::BF16, DType::BF16, DType::BF16, DType::F32)
        );
        assert_eq!(
            s.to_string(),
            "c[M, N] = a x b^T (NT, bf16 bf16 -> bf16, accumulate f32), K = K"
        );
    }

    #[test]
    fn not_a_plain_matrix_product() {
        let mm = "  c = sum(broadcast(a, axis=1) * broadcast(b, axis=0), axis=2)";
        let ab = "  input a: f32[M, K]\n  input b: f32[N, K]";
        for (inputs, body) in [
            // An epilogue after the sum.
            (
                ab,
                "  c = exp(sum(broadcast(a, axis=1) * broadcast(b, axis=0), axis=2))",
            ),
            // A sum, not a product.
            (
                ab,
                "  c = sum(broadcast(a, axis=1) + broadcast(b, axis=0), axis=2)",
            ),
            // Max instead of sum.
            (
                ab,
                "  c = max(broadcast(a, axis=1) * broadcast(b, axis=0), axis=2)",
            ),
            // Both operands lack the same axis: an outer product summed, not a matrix product.
            (
                "  input a: f32[M, K]\n  input b: f32[M, K]",
                "  c = sum(broadcast(a, axis=1) * broadcast(b, axis=1), axis=2)",
            ),
            // The broadcast axis is the summed one.
            (
                "  input a: f32[M, N]\n  input b: f32[N, K]",
                "  c = sum(broadcast(a, axis=2) * broadcast(b, axis=0), axis=2)",
            ),
            // A narrowing cast before the product.
            (
                ab,
                "  c = sum(broadcast(cast(a, f16), axis=1) * broadcast(b, axis=0), axis=2)",
            ),
            // A third input.
            (
                "  input a: f32[M, K]\n  input b: f32[N, K]\n  input s: f32[M]",
                &format!("{mm}\n  t = s"),
            ),
        ] {
            let src = fusion(inputs, body);
            assert!(detect_in(&src).is_none(), "detected:\n{src}");
        }
        // The example programs that are not matrix products.
        assert!(detect_in(&fusion(ab, mm)).is_some());
    }

    /// The scales of `src`'s product by kind and name, if it is one.
    fn scales_in(src: &str) -> Option<Vec<String>> {
        let program = crate::frontend::parse(src).unwrap();
        let f = crate::fusion::build(&program.fusion).unwrap();
        let (_, scales) = detect_scaled(&f)?;
        Some(
            scales
                .iter()
                .map(|s| format!("{} {}", s.kind(), f.tensors[s.input()].name))
                .collect(),
        )
    }

    #[test]
    fn scales_multiplied_into_the_sum() {
        let fp8 = "  input a: f8e4m3[M, K]\n  input b: f8e4m3[N, K]";
        let s =
            "  s = sum(cast(broadcast(a, axis=1), f32) * cast(broadcast(b, axis=0), f32), axis=2)";
        let with = |scales: &str, epilogue: &str| {
            fusion(&format!("{fp8}\n{scales}"), &format!("{s}\n  {epilogue}"))
        };
        let scalars = "  input sa: f32\n  input sb: f32";
        let rows = "  input sa: f32[M]\n  input sb: f32[N]";
        for (scales, epilogue, found) in [
            (
                scalars,
                "c = cast(s * sa * sb, bf16)",
                Some(vec!["per tensor sb", "per tensor sa"]),
            ),
            (
                scalars,
                "c = sb * (sa * s)",
                Some(vec!["per tensor sb", "per tensor sa"]),
            ),
            (
                rows,
                "c = cast(s * broadcast(sa, axis=1) * broadcast(sb, axis=0), bf16)",
                Some(vec!["per column sb", "per row sa"]),
            ),
            // A scale per element of the result (an epilogue operand, not a scale).
            ("  input sa: f32[M, N]", "c = cast(s * sa, bf16)", None),
            // Not a scale: an addition.
            (scalars, "c = cast(s + sa, bf16)", None),
            // A scale that is not an input.
            (scalars, "c = cast(s * (sa * sb), bf16)", None),
        ] {
            let src = with(scales, epilogue);
            let found = found.map(|v| v.iter().map(|s| s.to_string()).collect());
            assert_eq!(scales_in(&src), found, "{src}");
        }
        // A plain product keeps its cuBLAS comparison; a scaled one has none.
        assert!(detect_in(&fusion(fp8, &format!("{s}\n  c = cast(s, bf16)"))).is_some());
        assert!(detect_in(&with(scalars, "c = cast(s * sa, bf16)")).is_none());
    }
}
