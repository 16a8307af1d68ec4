//! The matrix-product scheduler: reuses the hand-tuned schedules of `examples/matmul/` for a
//! fusion [`crate::fusion::matmul::detect`] recognises, with the tensors renamed to the
//! fusion's own.
//!
//! bf16 or f16 operands `a[M, K]` and `b[N, K]` (K-major, as the tensor-core ladder takes
//! them) with a narrowing cast of the f32 sum: step 15's persistent warp-specialized kernel
//! (128 x 256 tiles, 3 stages, a grouped raster over a grid sized to the GPU), or step 11's
//! for small M (at most 128 rows: 64 x 128 tiles, 8 stages, so B streams at full width).
//! e4m3 or e5m2 operands `a[M, K]` and `b[N, K]`, plain or with per-tensor or row-wise
//! dequantization scales multiplied into the f32 sum before the cast: step 16's kernel (step
//! 15's with a 128-wide K tile of m64n256k32 wgmma; the scales are applied in the epilogue),
//! step 17's with one row and one column vector (each tile's pieces of them staged in shared
//! memory by a 1-D TMA copy issued before its k loop), or for small M step 11's with FP8's K
//! tile (128 in k32 steps: a stage is the same 24 KiB as step 11's bf16 one). An FP8 operand stored MN-major is declined with
//! the rule (FP8 wgmma has no transpose), naming it; scales with 16-bit operands are declined.
//! f32 operands `a[M, K]` and `b[K, N]`: examples/basics/matmul.hf's register tiling. Any
//! other product is declined with what it has that the schedules do not take.

use super::{AutoSchedule, Facts, Scheduler};
use crate::dtype::DType;
use crate::fusion::matmul::Scale;
use crate::fusion::{Fusion, Op, TensorId};
use crate::plan::{MatmulShape, OperandLayout};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The hand schedules reused, as their example files hold them.
const PERSISTENT: &str = include_str!("../../../examples/matmul/step15_persistent_raster.hf");
const PERSISTENT_FP8: &str = include_str!("../../../examples/matmul/step16_fp8.hf");
const PERSISTENT_FP8_ROWWISE: &str = include_str!("../../../examples/matmul/step17_fp8_rowwise.hf");
const SMALL_M: &str = include_str!("../../../examples/matmul/step11_small_m_decode.hf");
const REGISTER_TILES: &str = include_str!("../../../examples/basics/matmul.hf");

/// Step 11's K split (64 in k16 steps: one 128-byte swizzled row of bf16) and FP8's (128 in
/// k32 steps: one row of e4m3 / e5m2), so the decode schedule carries over to FP8.
const SMALL_M_K_SPLIT: (&str, &str) = (
    "s.split(4, 64)\n  s.split(5, 16)\n",
    "s.split(4, 128)\n  s.split(5, 32)\n",
);

/// Step 11's schedule with FP8's K tile.
fn small_m_fp8() -> Result<String, String> {
    let (bf16, fp8) = SMALL_M_K_SPLIT;
    if !SMALL_M.contains(bf16) {
        return Err(
            "step 11's example no longer splits K as the FP8 decode schedule expects".into(),
        );
    }
    Ok(SMALL_M.replace(bf16, fp8))
}

/// Rows from which the persistent 128 x 256 tiles are used instead of step 11's.
const SMALL_M_ROWS: i64 = 128;

pub fn schedule(
    facts: &Facts,
    shape: &MatmulShape,
    scales: &[Scale],
) -> Result<AutoSchedule, String> {
    let f = facts.fusion;
    let (Some(a), Some(b), Some(c)) = (
        f.tensor_by_name(&shape.a),
        f.tensor_by_name(&shape.b),
        f.tensor_by_name(&shape.c),
    ) else {
        return Err("the product's operands are not tensors of the fusion".into());
    };
    let sum = sum_tensor(f).ok_or("the product has no sum")?;
    let layouts = (shape.a_layout, shape.b_layout);
    let sixteen_bit = |d: DType| matches!(d, DType::BF16 | DType::F16);
    let m = facts.sizes.values_of(&shape.m);
    let describe = format!(
        "{} x {} x {} {}",
        m.map_or("M".to_string(), |m| m.to_string()),
        facts
            .sizes
            .values_of(&shape.n)
            .map_or("N".to_string(), |n| n.to_string()),
        facts
            .sizes
            .values_of(&shape.k)
            .map_or("K".to_string(), |k| k.to_string()),
        facts.sizes.describe()
    );
    let fp8 = shape.a_dtype.is_fp8() || shape.b_dtype.is_fp8();
    let k_major = layouts == (OperandLayout::Normal, OperandLayout::Transposed);
    let (template, names, why): (Cow<str>, Vec<_>, String) = if fp8
        && shape.a_dtype.is_fp8()
        && shape.b_dtype.is_fp8()
        && k_major
        && sum != c
        && sum_position(f, sum) == Some(2)
    {
        let scaled = scales_text(f, scales);
        if m.is_some_and(|m| m <= SMALL_M_ROWS) {
            (
                small_m_fp8()?.into(),
                vec![("a", a), ("b", b), ("s", sum), ("c", c)],
                format!("FP8 matrix product {describe}{scaled}; small M: step 11's warp-specialized kernel with FP8's K tile, 64 x 128 tiles, a K tile of 128 (m64n128k32 wgmma), 8 stages"),
            )
        } else if let Some((row, column)) = row_and_column(scales) {
            (
                PERSISTENT_FP8_ROWWISE.into(),
                vec![("a", a), ("b", b), ("s", sum), ("c", c), ("sa", row), ("sb", column)],
                format!("FP8 matrix product {describe}{scaled}; step 17's persistent warp-specialized kernel, 128 x 256 tiles, a K tile of 128 (m64n256k32 wgmma), 3 stages, a grouped raster of 16 M tiles, each tile's row and column scales staged in shared memory by a 1-D TMA copy during its k loop"),
            )
        } else {
            (
                PERSISTENT_FP8.into(),
                vec![("a", a), ("b", b), ("s", sum), ("c", c)],
                format!("FP8 matrix product {describe}{scaled}; step 16's persistent warp-specialized kernel, 128 x 256 tiles, a K tile of 128 (m64n256k32 wgmma), 3 stages, a grouped raster of 16 M tiles"),
            )
        }
    } else if fp8 && !k_major {
        // `Normal` is row-major as the product's axes run: a[M, K] and b[K, N].
        let (operand, layout) = if shape.a_layout == OperandLayout::Transposed {
            (&shape.a, axes_text(shape.a_layout, "M, K", "K, M"))
        } else {
            (&shape.b, axes_text(shape.b_layout, "K, N", "N, K"))
        };
        return Err(format!(
            "FP8 wgmma reads both operands K-major (it has no transpose): `{operand}` is [{layout}]; store it with K as its last axis (a[M, K], b[N, K], as torch._scaled_mm reads b.t() of a row-major [N, K] weight)"
        ));
    } else if !scales.is_empty() {
        return Err(format!(
            "a matrix product of {} by {}{}: the scaled schedule (examples/matmul/step16_fp8.hf) takes e4m3 or e5m2 operands; write the schedule of this one by hand",
            shape.a_dtype.name(),
            shape.b_dtype.name(),
            scales_text(f, scales)
        ));
    } else if sixteen_bit(shape.a_dtype)
        && shape.a_dtype == shape.b_dtype
        && layouts == (OperandLayout::Normal, OperandLayout::Transposed)
        && sum != c
        && sum_position(f, sum) == Some(2)
    {
        if m.is_some_and(|m| m <= SMALL_M_ROWS) {
            (
                SMALL_M.into(),
                vec![("a", a), ("b", b), ("s", sum), ("c", c)],
                format!("matrix product {describe} with small M: step 11's warp-specialized kernel, 64 x 128 tiles, 8 stages"),
            )
        } else {
            (
                PERSISTENT.into(),
                vec![("a", a), ("b", b), ("s", sum), ("c", c)],
                format!("matrix product {describe}: step 15's persistent warp-specialized kernel, 128 x 256 tiles, 3 stages, a grouped raster of 16 M tiles"),
            )
        }
    } else if shape.a_dtype == DType::F32
        && shape.b_dtype == DType::F32
        && layouts == (OperandLayout::Normal, OperandLayout::Normal)
        && sum == c
        && sum_position(f, sum) == Some(1)
    {
        (
            REGISTER_TILES.into(),
            vec![("a", a), ("b", b), ("c", c)],
            format!("f32 matrix product {describe}: basics/matmul's register tiling, 64 x 64 per block, 4 x 4 per thread (no f32 tensor-core schedule)"),
        )
    } else {
        return Err(format!(
            "a matrix product of {} [{}] by {} [{}] into {}: the reused schedules take bf16, f16, e4m3 or e5m2 a[M, K] by b[N, K] (both of one width) cast from the f32 sum, or f32 a[M, K] by b[K, N]",
            shape.a_dtype.name(),
            axes_text(shape.a_layout, "M, K", "K, M"),
            shape.b_dtype.name(),
            axes_text(shape.b_layout, "K, N", "N, K"),
            shape.c_dtype.name()
        ));
    };
    let renames: BTreeMap<&str, &str> = names
        .iter()
        .map(|&(from, t)| (from, f.tensors[t].name.as_str()))
        .collect();
    let knobs = facts.knobs;
    let text = schedule_block(&template)
        .ok_or("the reused example has no schedule block")?
        .lines()
        .map(|l| tuned(&rename(l.trim(), &renames, facts), knobs))
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    let why = if knobs.stages.is_some() || knobs.raster.is_some() {
        format!("{why}; tuned: {}", knobs.describe())
    } else {
        why
    };
    Ok(AutoSchedule {
        scheduler: Scheduler::MatrixProduct,
        text,
        reason: why,
    })
}

/// A reused schedule line with the tuner's pipeline stages (the count of every
/// `circular_buffer(N, ...)`) and raster group (`persistent(AXIS, G)`) in place of the
/// example's.
fn tuned(line: &str, knobs: &super::Knobs) -> String {
    let replace_first_arg = |line: &str, call: &str, value: i64| -> Option<String> {
        let at = line.find(call)? + call.len();
        let end = at + line[at..].find(',')?;
        Some(format!("{}{value}{}", &line[..at], &line[end..]))
    };
    let replace_last_arg = |line: &str, call: &str, value: i64| -> Option<String> {
        let at = line.find(call)?;
        let comma = at + line[at..].rfind(',')?;
        let close = comma + line[comma..].find(')')?;
        Some(format!("{} {value}{}", &line[..=comma], &line[close..]))
    };
    if let Some(stages) = knobs.stages {
        if let Some(l) = replace_first_arg(line, ".circular_buffer(", stages) {
            return l;
        }
    }
    if let Some(group) = knobs.raster {
        if line.starts_with("persistent(") {
            if let Some(l) = replace_last_arg(line, "persistent(", group) {
                return l;
            }
        }
    }
    line.to_string()
}

impl super::Sizes {
    fn values_of(&self, e: &crate::plan::SizeExpr) -> Option<i64> {
        self.value(e)
    }
}

/// An operand's axes as written: `normal` (row-major as the product's axes run) or `transposed`.
fn axes_text(l: OperandLayout, normal: &'static str, transposed: &'static str) -> &'static str {
    match l {
        OperandLayout::Normal => normal,
        OperandLayout::Transposed => transposed,
    }
}

/// The inputs of a row-wise scaled product's two vectors (one per row, one per column, and no
/// other scale): step 17's schedule stages both per tile.
fn row_and_column(scales: &[Scale]) -> Option<(TensorId, TensorId)> {
    match scales {
        [Scale::PerRow(r), Scale::PerColumn(c)] | [Scale::PerColumn(c), Scale::PerRow(r)] => {
            Some((*r, *c))
        }
        _ => None,
    }
}

/// The scales as the reason names them (`, the scales `sa` (per tensor), `sb` (per tensor)
/// applied to the f32 sum in the epilogue`), or nothing for a plain product.
fn scales_text(f: &Fusion, scales: &[Scale]) -> String {
    if scales.is_empty() {
        return String::new();
    }
    let named: Vec<String> = scales
        .iter()
        .rev()
        .map(|s| format!("`{}` ({})", f.tensors[s.input()].name, s.kind()))
        .collect();
    format!(
        ", the scales {} applied to the f32 sum in the epilogue",
        named.join(", ")
    )
}

/// The one sum of the fusion's product.
fn sum_tensor(f: &Fusion) -> Option<TensorId> {
    f.exprs
        .iter()
        .find(|e| matches!(e.op, Op::Reduce { .. }))
        .map(|e| e.output)
}

/// The reduced position of the sum's root (2: the product is [M, N, K]).
fn sum_position(f: &Fusion, sum: TensorId) -> Option<usize> {
    f.tensors[sum]
        .root
        .iter()
        .position(|&a| f.ids[a].kind == crate::fusion::IterKind::Reduction)
}

/// The statements between `schedule {` and its `}` in an example's text.
fn schedule_block(program: &str) -> Option<&str> {
    let start = program.find("\nschedule {\n")? + "\nschedule {\n".len();
    let end = start + program[start..].find("\n}")?;
    Some(&program[start..end])
}

/// `line` with each identifier that `renames` maps, and each cache name derived from one
/// (`a_s`), replaced by the fusion's name; a derived name the fusion already has gets a
/// number.
fn rename(line: &str, renames: &BTreeMap<&str, &str>, facts: &Facts) -> String {
    let mut out = String::with_capacity(line.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if let Some(to) = renames.get(word.as_str()) {
            out.push_str(to);
        } else if let Some((base, suffix)) = word.split_once('_') {
            match renames.get(base) {
                Some(to) if ["s", "c"].contains(&suffix) => out.push_str(&facts.fresh(to, suffix)),
                _ => out.push_str(word),
            }
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    let mut in_comment = false;
    for ch in line.chars() {
        if in_comment {
            out.push(ch);
            continue;
        }
        if ch.is_ascii_alphanumeric() || ch == '_' {
            word.push(ch);
        } else {
            flush(&mut word, &mut out);
            out.push(ch);
            in_comment = out.ends_with("//");
        }
    }
    flush(&mut word, &mut out);
    out
}
