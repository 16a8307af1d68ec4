//! The relative-L2 tolerance each output of a fusion earns against the float64 reference.
//!
//! Takes the fusion as written (what [`super::evaluate`] runs). Guarantees: every output gets
//! at least its dtype's tolerance ([`DType::tolerance`]), and more only when it is computed from
//! a **low-precision product**; emits one tolerance per output, in output order
//! ([`output_tolerances`]).
//!
//! A low-precision product is a `sum` of a `*` whose two operands are each a broadcast of
//! 8-bit or 16-bit float values: the operands of a matrix product, what the tensor cores (and
//! cuBLAS, and torch's peers) take. An operand is followed back through copies, casts,
//! broadcasts, views and multiplications by a scale (a literal, or a fusion input read through
//! copies, casts, broadcasts and views: the dequantization scales of FP8's per-tensor,
//! row-wise and block forms) to a float tensor of at most 16 bits (an input, or a narrowing
//! cast's result such as attention's `cast(p, bf16)`); a product computed in f64 is none. Its
//! error is the tensor cores' accumulation, not the operands' (exact in the reference):
//! - **8-bit float operands: 2e-2.** Hopper accumulates FP8 products with reduced precision
//!   (about 14 bits kept, DeepSeek-V3's report; DeepGEMM promotes every 128 of K into f32 for
//!   that reason). Step 19's f32 `amax` of an e4m3 product measured 8.9e-5 (200 x 264 x 160),
//!   9.5e-4 (1000 x 1032 x 1040), 2.2e-4 (4096^3) and 4.6e-3 (8192^3) against its 1e-5; the
//!   error grows with K, so 2e-2, e4m3's own step (which the same product's e4m3 output already
//!   passes at), leaves room for K = 16k and still fails a product missing one 128-wide K block
//!   of 8192 (about 1e-1). A bf16 output of an FP8 product gets it too (over bf16's 1e-2).
//! - **16-bit float operands (bf16, f16): 1e-3.** wgmma accumulates them in f32, with truncation
//!   when a k16 step's products are aligned and added, so the error of an f32 result grows with
//!   K past f32's 1e-5 (up to about 2^-23 per k16 step: 6e-5 at K = 8192). 1e-3 covers that
//!   with room and still fails an f32 result that went through bf16 (a rounding to bf16 is
//!   about 1.6e-3 relative L2); bf16 outputs keep their 1e-2.
//!
//! A `tanh(x, approximate=hardware)` in f32 (PTX `tanh.approx.f32`, relative error at most about
//! 2^-11) earns 1e-3 the same way: f32's 1e-5 would fail the approximation the user chose.
//!
//! The product's tolerance is carried to everything computed from it (an epilogue, an `amax`,
//! a softmax of the product): those ops are taken not to amplify its error (a cancellation
//! such as `s - s2` of two products could; no example computes one). A sum or max of
//! low-precision values without a product earns nothing: it is computed in f32 (or its own
//! dtype, whose tolerance covers it), as is a product without the broadcasts of a matrix
//! product (`sum(xf * xf)`, a mean square). Integer and bool outputs stay exact: a product's
//! error changes them only at near-ties, which a relative L2 over indices does not measure.

use crate::dtype::DType;
use crate::fusion::{BinaryOp, Fusion, Op, Operand, ReduceOp, TensorId, UnaryOp};
use crate::id::IdVec;

/// The tolerance of an f32 (or wider) result of a product of `operand`'s values on the
/// tensor cores (the module doc says why these numbers); `None` for operands that are not
/// 8-bit or 16-bit floats.
pub fn product_tolerance(operand: DType) -> Option<f64> {
    match operand {
        DType::F8E4M3 | DType::F8E5M2 => Some(2e-2),
        DType::BF16 | DType::F16 => Some(1e-3),
        DType::F32 | DType::F64 | DType::Bool | DType::U8 | DType::I8 | DType::I32 | DType::I64 => {
            None
        }
    }
}

/// Each output of `f` by name with the relative-L2 tolerance it is validated with: the larger
/// of its dtype's and that of every low-precision product it is computed from (floats only).
pub fn output_tolerances(f: &Fusion) -> Vec<(String, f64)> {
    let earned = earned(f);
    f.outputs
        .iter()
        .map(|&t| {
            let dtype = f.tensors[t].dtype;
            let own = dtype.tolerance();
            let tolerance = if dtype.is_float() {
                own.max(earned[t])
            } else {
                own
            };
            (f.tensors[t].name.clone(), tolerance)
        })
        .collect()
}

/// Per tensor, the largest tolerance of the low-precision products it is computed from (0
/// when none).
fn earned(f: &Fusion) -> IdVec<TensorId, f64> {
    let mut earned: IdVec<TensorId, f64> = vec![0.0; f.tensors.len()].into();
    for e in f.topo_exprs() {
        let expr = &f.exprs[e];
        let from_inputs = expr.input_tensors().map(|t| earned[t]).fold(0.0, f64::max);
        let own = low_precision_product(f, expr)
            .or_else(|| approximation(f, expr))
            .unwrap_or(0.0);
        earned[expr.output] = from_inputs.max(own);
    }
    earned
}

/// The tolerance `expr` earns when it is an f32 hardware approximation the user asked for
/// (`tanh(x, approximate=hardware)`, relative error at most about 2^-11): 1e-3, a bf16
/// product's, which covers it twice over.
fn approximation(f: &Fusion, expr: &crate::fusion::Expr) -> Option<f64> {
    let approximated = matches!(expr.op, Op::Unary(UnaryOp::TanhApprox))
        && f.tensors[expr.output].dtype != DType::F64;
    approximated.then_some(1e-3)
}

/// The tolerance `expr` earns when it is the sum of a low-precision product.
fn low_precision_product(f: &Fusion, expr: &crate::fusion::Expr) -> Option<f64> {
    let Op::Reduce {
        op: ReduceOp::Sum, ..
    } = expr.op
    else {
        return None;
    };
    let [Operand::Tensor(product)] = expr.inputs[..] else {
        return None;
    };
    let mul = &f.exprs[f.tensors[product].definition?];
    let (Op::Binary(BinaryOp::Mul), [Operand::Tensor(x), Operand::Tensor(y)]) =
        (&mul.op, &mul.inputs[..])
    else {
        return None;
    };
    if f.tensors[product].dtype == DType::F64 {
        return None;
    }
    let (x, y) = (broadcast_operand(f, *x)?, broadcast_operand(f, *y)?);
    let (tx, ty) = (product_tolerance(x)?, product_tolerance(y)?);
    Some(tx.max(ty))
}

/// The 8-bit or 16-bit float type of the values `t` holds (the first such type met going back
/// from `t` through copies, casts, views and scales), when `t` is a broadcast of them (a matrix
/// product's operand).
fn broadcast_operand(f: &Fusion, mut t: TensorId) -> Option<DType> {
    let (mut values, mut broadcast) = (None, false);
    loop {
        let dtype = f.tensors[t].dtype;
        if values.is_none() && product_tolerance(dtype).is_some() {
            values = Some(dtype);
        }
        let Some(e) = f.tensors[t].definition else {
            break;
        };
        let expr = &f.exprs[e];
        t = match (&expr.op, &expr.inputs[..]) {
            (Op::Broadcast { .. }, [Operand::Tensor(from)]) => {
                broadcast = true;
                *from
            }
            (op, [Operand::Tensor(from)]) if is_value_view(op) => *from,
            (Op::Binary(BinaryOp::Mul), [x, y]) => match (x, y) {
                (Operand::Tensor(v), s) | (s, Operand::Tensor(v)) if is_scale(f, *s) => *v,
                _ => break,
            },
            _ => break,
        };
    }
    values.filter(|_| broadcast)
}

/// Whether `op` gives its one operand's values unchanged, or rounded by a cast (the values a
/// product reads are then the narrower type's, which the walk stops at).
fn is_value_view(op: &Op) -> bool {
    match op {
        Op::Set
        | Op::Cast(_)
        | Op::Permute { .. }
        | Op::Expand { .. }
        | Op::Slice { .. }
        | Op::Reshape
        | Op::ExpandBlocks { .. } => true,
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Ternary(_)
        | Op::Broadcast { .. }
        | Op::Pad { .. }
        | Op::Cat { .. }
        | Op::Gather { .. }
        | Op::Reduce { .. }
        | Op::Mma
        | Op::Iota { .. }
        | Op::ElementIndex { .. }
        | Op::Full { .. } => false,
    }
}

/// Whether `operand` is a scale: a literal, or an f32 or f64 fusion input's values through
/// copies, casts, broadcasts and views (no arithmetic; a low-precision input is an operand).
fn is_scale(f: &Fusion, operand: Operand) -> bool {
    let mut t = match operand {
        Operand::Scalar(_) => return true,
        Operand::Count(_) => return false,
        Operand::Tensor(t) => t,
    };
    while !f.tensors[t].is_input {
        let Some(e) = f.tensors[t].definition else {
            return false;
        };
        let expr = &f.exprs[e];
        match (&expr.op, &expr.inputs[..]) {
            (op, [Operand::Tensor(from)])
                if is_value_view(op) || matches!(op, Op::Broadcast { .. }) =>
            {
                t = *from
            }
            _ => return false,
        }
    }
    matches!(f.tensors[t].dtype, DType::F32 | DType::F64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tolerances(body: &str) -> Vec<(String, f64)> {
        let src = format!("fusion f {{\n{body}\n}}");
        let program = crate::frontend::parse(&src).unwrap();
        output_tolerances(&crate::fusion::build(&program.fusion).unwrap())
    }

    fn of(body: &str, output: &str) -> f64 {
        let all = tolerances(body);
        all.iter()
            .find(|(name, _)| name == output)
            .unwrap_or_else(|| panic!("no output `{output}` in {all:?}"))
            .1
    }

    const BF16_PRODUCT: &str = "  input a: bf16[M, K]\n  input b: bf16[N, K]\n  s = sum(cast(broadcast(a, axis=1), f32) * cast(broadcast(b, axis=0), f32), axis=2)";

    #[test]
    fn an_f32_sum_of_bf16_products_earns_the_16_bit_product_tolerance() {
        assert_eq!(of(&format!("{BF16_PRODUCT}\n  output s"), "s"), 1e-3);
        // f16 operands, written with the casts before the broadcasts.
        let f16 = "  input a: f16[M, K]\n  input b: f16[N, K]\n  s = sum(broadcast(cast(a, f32), axis=1) * broadcast(cast(b, f32), axis=0), axis=2)\n  output s";
        assert_eq!(of(f16, "s"), 1e-3);
        // Carried through an epilogue; a bf16 output keeps its own, larger tolerance.
        let epilogue = format!(
            "{BF16_PRODUCT}\n  y = exp(s) + 1.0\n  c = cast(y, bf16)\n  output y\n  output c"
        );
        assert_eq!(of(&epilogue, "y"), 1e-3);
        assert_eq!(of(&epilogue, "c"), DType::BF16.tolerance());
    }

    #[test]
    fn the_amax_of_an_fp8_product_earns_the_8_bit_product_tolerance() {
        let body = "  input a: f8e4m3[M, K]\n  input b: f8e4m3[N, K]\n  input scale: f32\n  p = cast(broadcast(a, axis=1), f32) * cast(broadcast(b, axis=0), f32)\n  y = sum(p, axis=2) * scale\n  c = cast(y, f8e4m3, saturate=true)\n  amax = max(abs(y), axis=[0, 1])\n  output c\n  output amax";
        assert_eq!(
            tolerances(body),
            [("c".to_string(), 2e-2), ("amax".to_string(), 2e-2)]
        );
        // e5m2 operands: the same accumulation.
        let e5m2 = body.replace("f8e4m3[", "f8e5m2[");
        assert_eq!(of(&e5m2, "amax"), 2e-2);
    }

    #[test]
    fn scaled_fp8_operands_are_followed_through_their_scales() {
        // Step 18's block-scaled form: each operand times its expanded block scales.
        let block = "  input a: f8e4m3[M, K]\n  input b: f8e4m3[N, K]\n  input sa: f32[M, KB]\n  input sb: f32[NB, KB]\n  ad = cast(a, f32) * expand_blocks(sa, block=[1, 128], shape=[M, K])\n  bd = cast(b, f32) * expand_blocks(sb, block=[128, 128], shape=[N, K])\n  s = sum(broadcast(ad, axis=1) * broadcast(bd, axis=0), axis=2)\n  output s";
        assert_eq!(of(block, "s"), 2e-2);
        // A per-tensor scale and a literal inside the sum.
        let scalar = "  input a: f8e4m3[M, K]\n  input b: f8e4m3[N, K]\n  input sa: f32\n  s = sum(cast(broadcast(a, axis=1), f32) * sa * (2.0 * cast(broadcast(b, axis=0), f32)), axis=2)\n  output s";
        assert_eq!(of(scalar, "s"), 2e-2);
        // A factor computed from the operand is not a scale: an f32 product.
        let computed = "  input a: f8e4m3[M, K]\n  input b: f8e4m3[N, K]\n  af = cast(a, f32)\n  s = sum(broadcast(af * af, axis=1) * cast(broadcast(b, axis=0), f32), axis=2)\n  output s";
        assert_eq!(of(computed, "s"), 1e-5);
    }

    #[test]
    fn attention_carries_both_products_tolerances() {
        // The second product's left operand is a narrowing cast's result (bf16 probabilities).
        let body = "  input q: bf16[S, D]\n  input k: bf16[T, D]\n  input v: bf16[T, D]\n  s = sum(cast(broadcast(q, axis=1), f32) * cast(broadcast(k, axis=0), f32), axis=2)\n  e = exp(s - broadcast(max(s, axis=1), axis=1))\n  l = sum(e, axis=1)\n  pb = cast(e / broadcast(l, axis=1), bf16)\n  o = sum(cast(broadcast(pb, axis=2), f32) * cast(broadcast(v, axis=0), f32), axis=1)\n  lse = log(l)\n  output o\n  output lse";
        assert_eq!(
            tolerances(body),
            [("o".to_string(), 1e-3), ("lse".to_string(), 1e-3)]
        );
    }

    #[test]
    fn outputs_without_a_low_precision_product_keep_their_dtype_tolerance() {
        for (body, output, want) in [
            // A plain f32 add.
            (
                "  input x: f32[M, N]\n  input y: f32[M, N]\n  z = x + y\n  output z",
                "z",
                1e-5,
            ),
            // An f32 product of f32 operands.
            (
                "  input a: f32[M, K]\n  input b: f32[N, K]\n  s = sum(broadcast(a, axis=1) * broadcast(b, axis=0), axis=2)\n  output s",
                "s",
                1e-5,
            ),
            // An f32 sum of bf16 values: no product.
            (
                "  input x: bf16[M, N]\n  s = sum(cast(x, f32), axis=1)\n  output s",
                "s",
                1e-5,
            ),
            // A mean square of bf16 values: a product, but not a matrix product's.
            (
                "  input x: bf16[M, N]\n  xf = cast(x, f32)\n  ms = sum(xf * xf, axis=1)\n  output ms",
                "ms",
                1e-5,
            ),
            // bf16 operands widened to f64: computed in f64.
            (
                "  input a: bf16[M, K]\n  input b: bf16[N, K]\n  s = sum(cast(broadcast(a, axis=1), f64) * cast(broadcast(b, axis=0), f64), axis=2)\n  output s",
                "s",
                1e-12,
            ),
            // A max over bf16 products (not a sum).
            (
                "  input a: bf16[M, K]\n  input b: bf16[N, K]\n  s = max(cast(broadcast(a, axis=1), f32) * cast(broadcast(b, axis=0), f32), axis=2)\n  output s",
                "s",
                1e-5,
            ),
        ] {
            assert_eq!(of(body, output), want, "{body}");
        }
        // Of two outputs, only the one computed from the product is loosened.
        let both =
            format!("{BF16_PRODUCT}\n  input x: f32[M, N]\n  z = x * 2.0\n  output s\n  output z");
        assert_eq!(
            tolerances(&both),
            [("s".to_string(), 1e-3), ("z".to_string(), 1e-5)]
        );
    }

    #[test]
    fn the_examples_loosened_are_those_computed_from_low_precision_products() {
        let mut loosened = Vec::new();
        let mut kept = 0;
        for example in crate::examples::list(&crate::examples::repo_root()).unwrap() {
            let source = std::fs::read_to_string(&example.path).unwrap();
            let f = crate::reference_fusion(&source).unwrap();
            for (&t, (name, tolerance)) in f.outputs.iter().zip(output_tolerances(&f)) {
                assert_eq!(name, f.tensors[t].name);
                if tolerance == f.tensors[t].dtype.tolerance() {
                    kept += 1;
                } else {
                    loosened.push(format!("{} {name} {tolerance:e}", example.id()));
                }
            }
        }
        assert_eq!(
            loosened,
            [
                // f32 log-sum-exp of bf16 attention scores.
                "attention/online_wgmma_lse lse 1e-3",
                // bf16 outputs of FP8 products: 2e-2 over bf16's 1e-2.
                "auto/fp8_product c 2e-2",
                "matmul/step16_fp8 c 2e-2",
                "matmul/step17_fp8_rowwise c 2e-2",
                "matmul/step18_fp8_block c 2e-2",
                "matmul/step18_fp8_block_overlap c 2e-2",
                // f32 amax of an FP8 product.
                "matmul/step19_fp8_out_amax amax 2e-2",
                "matmul/step21_fp8_block_split_k c 2e-2",
            ]
        );
        assert!(kept >= 100, "{kept} outputs keep their dtype's tolerance");
    }

    #[test]
    fn integer_outputs_stay_exact() {
        let body = format!("{BF16_PRODUCT}\n  i = argmax(s, axis=1)\n  output i");
        assert_eq!(of(&body, "i"), 0.0);
    }
}
