//! The fusion as one `torch._scaled_mm` call, for the runner's peers: what a PyTorch user runs
//! for an FP8 matrix product with per-tensor or row-wise scales (cuBLASLt's FP8 GEMM).
//!
//! Takes the unscheduled fusion. Recognises one output `cast(S * s1 * s2 ..., t)` (`t` bf16,
//! f16 or f32) where `S` is a matrix product (no batch axes) of two FP8 inputs `a[M, K]`,
//! `b[N, K]` (the layout `_scaled_mm(a, b.t())` takes: A row-major, B column-major), and each
//! scale is a scalar input, `broadcast(v, axis=1)` of an f32 input `v[M]` (a row scale) or
//! `broadcast(v, axis=0)` of an f32 input `v[N]` (a column scale), at most one of each. The
//! scales multiply after the product, as `_scaled_mm` applies them (a dequantized product
//! written with its scales inside the sum has this form after
//! `frontend::dequantize::hoist_scales`, which the runner applies first).
//! Emits: per-tensor scales (`scale_a`, `scale_b` 0-dim: two scalars in the order written,
//! else their product and ones) when there are no row or column scales, else row-wise ones (`scale_a` [M, 1], `scale_b` [1, N], a scalar folded into
//! `scale_a`, a missing one all ones). None for anything else.

use super::{Emitter, Twin};
use crate::dtype::DType;
use crate::fusion::{BinaryOp, Fusion, Op, Operand, TensorId};

/// A scale of the product.
enum Scale {
    Scalar(TensorId),
    Row(TensorId),
    Column(TensorId),
}

/// The fusion as `torch._scaled_mm(a, b.t(), scale_a=..., scale_b=..., out_dtype=...)`.
pub fn emit_scaled_mm(fusion: &Fusion) -> Option<Twin> {
    let f = fusion;
    let [out] = f.outputs[..] else {
        return None;
    };
    let def = |t: TensorId| f.tensors[t].definition.map(|d| &f.exprs[d]);
    let out_dtype = f.tensors[out].dtype;
    let torch_out = match out_dtype {
        DType::BF16 => "torch.bfloat16",
        DType::F16 => "torch.float16",
        DType::F32 => "torch.float32",
        _ => return None,
    };
    let top = match def(out) {
        Some(x) if matches!(x.op, Op::Cast(_)) => match x.inputs[..] {
            [Operand::Tensor(t)] => t,
            _ => return None,
        },
        _ => out,
    };
    let e = Emitter::new(f, &[]);
    let input_vector =
        |t: TensorId| f.tensors[t].is_input && f.rank(t) == 1 && f.tensors[t].dtype == DType::F32;
    let scale = |t: TensorId| -> Option<Scale> {
        if f.tensors[t].is_input && f.rank(t) == 0 && f.tensors[t].dtype == DType::F32 {
            return Some(Scale::Scalar(t));
        }
        let x = def(t)?;
        let [Operand::Tensor(v)] = x.inputs[..] else {
            return None;
        };
        match &x.op {
            Op::Broadcast { axes } if axes[..] == [1] && input_vector(v) => Some(Scale::Row(v)),
            Op::Broadcast { axes } if axes[..] == [0] && input_vector(v) => Some(Scale::Column(v)),
            _ => None,
        }
    };
    // Down the chain of products from `top` to the contraction, collecting the scales.
    let mut scales = Vec::new();
    let mut t = top;
    let sum = loop {
        if e.contractions[t].is_some() {
            break t;
        }
        let x = def(t)?;
        let (Op::Binary(BinaryOp::Mul), [Operand::Tensor(p), Operand::Tensor(q)]) =
            (&x.op, &x.inputs[..])
        else {
            return None;
        };
        let (next, s) = match (scale(*p), scale(*q)) {
            (_, Some(s)) => (*p, s),
            (Some(s), None) => (*q, s),
            (None, None) => return None,
        };
        scales.push(s);
        t = next;
    };
    let c = e.contractions[sum].as_ref()?;
    let [fa, fb] = &c.factors;
    let fp8 = |t: TensorId| f.tensors[t].is_input && f.tensors[t].dtype.is_fp8();
    if !fp8(fa.base) || !fp8(fb.base) || f.rank(fa.base) != 2 || f.rank(fb.base) != 2 {
        return None;
    }
    // The operands as the inputs themselves: `_scaled_mm` takes A row-major, B column-major.
    let raw = |t: TensorId| super::Py::new(e.names[t].clone(), super::ATOM, f.tensors[t].dtype);
    let mm = e.matmul(c, (raw(fa.base), raw(fb.base)))?;
    if mm.batch != 0 || mm.a.ends_with(".t()") || !mm.b.ends_with(".t()") {
        return None;
    }
    let (mut scalars, mut row, mut column) = (Vec::new(), None, None);
    // In the order written (the chain was walked from the outermost product).
    for s in scales.into_iter().rev() {
        match s {
            Scale::Scalar(t) => scalars.push(e.names[t].clone()),
            Scale::Row(t) if row.is_none() => row = Some(e.names[t].clone()),
            Scale::Column(t) if column.is_none() => column = Some(e.names[t].clone()),
            _ => return None,
        }
    }
    let a = &mm.a;
    let ones = |shape: &str| format!("torch.ones({shape}, dtype=torch.float32, device={a}.device)");
    let scalar = (!scalars.is_empty()).then(|| scalars.join(" * "));
    let (scale_a, scale_b) = if row.is_none() && column.is_none() {
        match &scalars[..] {
            // `s * sa * sb`: A's scale, then B's.
            [sa, sb] => (sa.clone(), sb.clone()),
            _ => (scalar.unwrap_or_else(|| ones("()")), ones("()")),
        }
    } else {
        let m = format!("{a}.shape[0]");
        let n = format!("{}.shape[1]", mm.b);
        let rows = row.map_or_else(
            || ones(&format!("({m}, 1)")),
            |r| format!("{r}.unsqueeze(1)"),
        );
        let rows = match scalar {
            Some(s) => format!("({rows} * {s}).contiguous()"),
            None => rows,
        };
        let columns = column.map_or_else(
            || ones(&format!("(1, {n})")),
            |c| format!("{c}.unsqueeze(0)"),
        );
        (rows, columns)
    };
    let function = format!("{}_scaled_mm", f.name);
    let params = e.input_params();
    let source = format!(
        "# The hopfuse fusion `{}` as one torch._scaled_mm call: the FP8 matrix product with its\n\
         # scales, as a PyTorch user writes it (a peer of `hopfuse run --peers`).\n\
         import torch\n\n\n\
         def {function}({}) -> torch.Tensor:\n    return torch._scaled_mm({a}, {}, scale_a={scale_a}, scale_b={scale_b}, out_dtype={torch_out})\n",
        f.name,
        params.join(", "),
        mm.b,
    );
    Some(Twin { source, function })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn twin(src: &str) -> Option<String> {
        let program = crate::frontend::parse(src).unwrap();
        let f = crate::fusion::build(&program.fusion).unwrap();
        emit_scaled_mm(&f).map(|t| t.source)
    }

    fn fusion(inputs: &str, epilogue: &str) -> String {
        format!(
            "fusion g {{\n  input a: f8e4m3[M, K]\n  input b: f8e4m3[N, K]\n{inputs}  ab = cast(broadcast(a, axis=1), f32)\n  bb = cast(broadcast(b, axis=0), f32)\n  s = sum(ab * bb, axis=2)\n  c = cast({epilogue}, bf16)\n  output c\n}}\n"
        )
    }

    #[test]
    fn per_tensor_scales_are_scaled_mm_scalars() {
        let src = fusion("  input sa: f32\n  input sb: f32\n", "s * sa * sb");
        let t = twin(&src).expect("a _scaled_mm peer");
        assert!(
            t.contains("return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)"),
            "{t}"
        );
    }

    #[test]
    fn row_and_column_scales_are_row_wise() {
        let src = fusion(
            "  input sa: f32[M]\n  input sb: f32[N]\n",
            "s * broadcast(sa, axis=1) * broadcast(sb, axis=0)",
        );
        let t = twin(&src).expect("a _scaled_mm peer");
        assert!(
            t.contains(
                "scale_a=sa.unsqueeze(1), scale_b=sb.unsqueeze(0), out_dtype=torch.bfloat16"
            ),
            "{t}"
        );
    }

    #[test]
    fn other_products_have_no_scaled_mm_peer() {
        // bf16 operands, an addition, a K-major-less B, a scale that is no input.
        let bf16 = fusion("  input sa: f32\n", "s * sa")
            .replace("f8e4m3[M, K]", "bf16[M, K]")
            .replace("f8e4m3[N, K]", "bf16[N, K]");
        assert_eq!(twin(&bf16), None);
        assert_eq!(twin(&fusion("  input sa: f32\n", "s + sa")), None);
        assert_eq!(twin(&fusion("", "s * 2.0")), None);
        let mn_major = "fusion g {\n  input a: f8e4m3[M, K]\n  input b: f8e4m3[K, N]\n  input sa: f32\n  ab = cast(broadcast(a, axis=2), f32)\n  bb = cast(broadcast(b, axis=0), f32)\n  s = sum(ab * bb, axis=1)\n  c = cast(s * sa, bf16)\n  output c\n}\n";
        assert_eq!(twin(mn_major), None);
    }
}
