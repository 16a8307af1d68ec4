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
//! Also recognises DeepSeek-V3's block-scaled form with no other scale: each operand the
//! product `cast(q, f32) * expand_blocks(s, block=...)` of an FP8 input `q` and an f32 input
//! `s`, with `block=[1, 128]` on A (`sa[M, K/128]`) and `block=[128, 128]` on B
//! (`sb[N/128, K/128]`); other blocks are not recognised.
//! Emits: per-tensor scales (`scale_a`, `scale_b` 0-dim: two scalars in the order written,
//! else their product and ones) when there are no row or column scales, else row-wise ones (`scale_a` [M, 1], `scale_b` [1, N], a scalar folded into
//! `scale_a`, a missing one all ones); block scales in the layouts cuBLAS's block-scaled path
//! takes (every other is refused with "Invalid scaling configuration."): `scale_a` column-major
//! (`sa.t().contiguous().t()`, a copy) and `scale_b` the transposed view `sb.t()`. The twin is
//! one function of the inputs with no set-up step, so the copy of `sa` (M x K/128 f32, 2 MiB at
//! M = 4096, K = 16384) is timed with the call. None for anything else.

use super::{Contraction, Emitter, Factor, Twin};
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
        // The output's type (a copy when it is the sum's).
        Some(x) if matches!(x.op, Op::Cast(_) | Op::Set) => match x.inputs[..] {
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
    if scales.is_empty() {
        if let Some(twin) = block_scaled(&e, c, torch_out) {
            return Some(twin);
        }
    }
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
    Some(twin(&e, (a, &mm.b), (&scale_a, &scale_b), torch_out))
}

/// The `_scaled_mm` call of a product of block-dequantized operands (see the module doc).
fn block_scaled(e: &Emitter, c: &Contraction, torch_out: &str) -> Option<Twin> {
    let f = e.f;
    // A factor `cast(q, f32) * expand_blocks(s, block)`: (q, s, block).
    let dequantized = |factor: &Factor| -> Option<(TensorId, TensorId, Vec<i64>)> {
        if !factor.casts.is_empty() {
            return None;
        }
        let def = |t: TensorId| f.tensors[t].definition.map(|d| &f.exprs[d]);
        let x = def(factor.base)?;
        let (Op::Binary(BinaryOp::Mul), [Operand::Tensor(p), Operand::Tensor(q)]) =
            (&x.op, &x.inputs[..])
        else {
            return None;
        };
        let input = |t: TensorId, fp8: bool| {
            let tensor = &f.tensors[t];
            tensor.is_input
                && f.rank(t) == 2
                && (tensor.dtype.is_fp8() == fp8)
                && (fp8 || tensor.dtype == DType::F32)
        };
        let operand = |t: TensorId| match def(t) {
            Some(x) if matches!(x.op, Op::Cast(DType::F32)) => match x.inputs[..] {
                [Operand::Tensor(q)] if input(q, true) => Some(q),
                _ => None,
            },
            _ => None,
        };
        let scale = |t: TensorId| match def(t) {
            Some(x) => match (&x.op, &x.inputs[..]) {
                (Op::ExpandBlocks { block }, [Operand::Tensor(s)]) if input(*s, false) => {
                    Some((*s, block.clone()))
                }
                _ => None,
            },
            None => None,
        };
        let (q, (s, block)) = match (operand(*p), scale(*q)) {
            (Some(o), Some(sc)) => (o, sc),
            _ => (operand(*q)?, scale(*p)?),
        };
        Some((q, s, block))
    };
    let [fx, fy] = &c.factors;
    let (qx, sx, bx) = dequantized(fx)?;
    let (qy, sy, by) = dequantized(fy)?;
    let raw = |t: TensorId| super::Py::new(e.names[t].clone(), super::ATOM, f.tensors[t].dtype);
    let mm = e.matmul(c, (raw(qx), raw(qy)))?;
    if mm.batch != 0 || mm.a.ends_with(".t()") || !mm.b.ends_with(".t()") {
        return None;
    }
    // `matmul` puts the operand with M first, whichever factor it was.
    let ((sa, block_a), (sb, block_b)) = if mm.a == e.names[qx] {
        ((sx, bx), (sy, by))
    } else {
        ((sy, by), (sx, bx))
    };
    if block_a[..] != [1, 128] || block_b[..] != [128, 128] {
        return None;
    }
    let scale_a = format!("{}.t().contiguous().t()", e.names[sa]);
    let scale_b = format!("{}.t()", e.names[sb]);
    Some(twin(e, (&mm.a, &mm.b), (&scale_a, &scale_b), torch_out))
}

/// The twin module: one function of the fusion's inputs returning the `_scaled_mm` call.
fn twin(
    e: &Emitter,
    (a, b): (&str, &str),
    (scale_a, scale_b): (&str, &str),
    torch_out: &str,
) -> Twin {
    let f = e.f;
    let function = format!("{}_scaled_mm", f.name);
    let params = e.input_params();
    let source = format!(
        "# The hopfuse fusion `{}` as one torch._scaled_mm call: the FP8 matrix product with its\n\
         # scales, as a PyTorch user writes it (a peer of `hopfuse run --peers`).\n\
         import torch\n\n\n\
         def {function}({}) -> torch.Tensor:\n    return torch._scaled_mm({a}, {b}, scale_a={scale_a}, scale_b={scale_b}, out_dtype={torch_out})\n",
        f.name,
        params.join(", "),
    );
    Twin { source, function }
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

    fn block_scaled(block_a: &str, block_b: &str, out: &str) -> String {
        // A scale's rows: one per row where the block is 1 row high, else one per block.
        let rows = |block: &str, x: &str| {
            if block.starts_with("[1,") {
                x.to_string()
            } else {
                format!("{x}B")
            }
        };
        let (sa_rows, sb_rows) = (rows(block_a, "M"), rows(block_b, "N"));
        format!(
            "fusion g {{\n  input a: f8e4m3[M, K]\n  input b: f8e5m2[N, K]\n  input sa: f32[{sa_rows}, KB]\n  input sb: f32[{sb_rows}, KB]\n  ad = cast(a, f32) * expand_blocks(sa, block={block_a}, shape=[M, K])\n  bd = expand_blocks(sb, block={block_b}, shape=[N, K]) * cast(b, f32)\n  s = sum(broadcast(ad, axis=1) * broadcast(bd, axis=0), axis=2)\n  c = {out}\n  output c\n}}\n"
        )
    }

    #[test]
    fn deepseek_block_scales_are_the_block_scaled_call() {
        let t = twin(&block_scaled("[1, 128]", "[128, 128]", "cast(s, f16)"))
            .expect("a _scaled_mm peer");
        assert!(
            t.contains("return torch._scaled_mm(a, b.t(), scale_a=sa.t().contiguous().t(), scale_b=sb.t(), out_dtype=torch.float16)"),
            "{t}"
        );
        // An f32 result: no cast.
        let t = twin(&block_scaled("[1, 128]", "[128, 128]", "s")).expect("a _scaled_mm peer");
        assert!(t.contains("out_dtype=torch.float32)"), "{t}");
    }

    #[test]
    fn other_block_shapes_have_no_scaled_mm_peer() {
        for (ba, bb) in [
            ("[1, 64]", "[128, 128]"),
            ("[128, 128]", "[128, 128]"),
            ("[1, 128]", "[1, 128]"),
            ("[1, 128]", "[64, 128]"),
        ] {
            assert_eq!(
                twin(&block_scaled(ba, bb, "cast(s, bf16)")),
                None,
                "{ba} {bb}"
            );
        }
        // A further scale after the block-scaled sum, and an output in FP8: no peer.
        let src = block_scaled("[1, 128]", "[128, 128]", "cast(s * 2.0, bf16)");
        assert_eq!(twin(&src), None);
        let src = block_scaled("[1, 128]", "[128, 128]", "cast(s, f8e4m3)");
        assert_eq!(twin(&src), None);
    }
}
