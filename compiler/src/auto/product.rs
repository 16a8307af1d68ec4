//! The matrix-product scheduler: reuses the hand-tuned schedules of `examples/matmul/` for a
//! fusion [`crate::fusion::matmul::detect`] recognises, with the tensors renamed to the
//! fusion's own.
//!
//! bf16 or f16 operands `a[M, K]` and `b[N, K]` (K-major, as the tensor-core ladder takes
//! them) with a narrowing cast of the f32 sum: step 15's persistent warp-specialized kernel
//! (128 x 256 tiles, 3 stages, a grouped raster over a grid sized to the GPU), or step 11's
//! for small M (at most 128 rows: 64 x 128 tiles, 8 stages, so B streams at full width). f32
//! operands `a[M, K]` and `b[K, N]`: examples/basics/matmul.hf's register tiling. Any other
//! product is declined with what it has that the schedules do not take.

use super::{AutoSchedule, Facts, Scheduler};
use crate::dtype::DType;
use crate::fusion::{Fusion, Op, TensorId};
use crate::plan::{MatmulShape, OperandLayout};
use std::collections::BTreeMap;

/// The hand schedules reused, as their example files hold them.
const PERSISTENT: &str = include_str!("../../../examples/matmul/step15_persistent_raster.hf");
const SMALL_M: &str = include_str!("../../../examples/matmul/step11_small_m_decode.hf");
const REGISTER_TILES: &str = include_str!("../../../examples/basics/matmul.hf");

/// Rows from which the persistent 128 x 256 tiles are used instead of step 11's.
const SMALL_M_ROWS: i64 = 128;

pub fn schedule(facts: &Facts, shape: &MatmulShape) -> Result<AutoSchedule, String> {
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
    let (template, names, why) = if sixteen_bit(shape.a_dtype)
        && shape.a_dtype == shape.b_dtype
        && layouts == (OperandLayout::Normal, OperandLayout::Transposed)
        && sum != c
        && sum_position(f, sum) == Some(2)
    {
        if m.is_some_and(|m| m <= SMALL_M_ROWS) {
            (
                SMALL_M,
                vec![("a", a), ("b", b), ("s", sum), ("c", c)],
                format!("matrix product {describe} with small M: step 11's warp-specialized kernel, 64 x 128 tiles, 8 stages"),
            )
        } else {
            (
                PERSISTENT,
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
            REGISTER_TILES,
            vec![("a", a), ("b", b), ("c", c)],
            format!("f32 matrix product {describe}: basics/matmul's register tiling, 64 x 64 per block, 4 x 4 per thread (no f32 tensor-core schedule)"),
        )
    } else {
        return Err(format!(
            "a matrix product of {} [{}] by {} [{}] into {}: the reused schedules take bf16 or f16 a[M, K] by b[N, K] cast from the f32 sum, or f32 a[M, K] by b[K, N]",
            shape.a_dtype.name(),
            layout_text(shape.a_layout, "M"),
            shape.b_dtype.name(),
            layout_text(shape.b_layout, "N"),
            shape.c_dtype.name()
        ));
    };
    let renames: BTreeMap<&str, &str> = names
        .iter()
        .map(|&(from, t)| (from, f.tensors[t].name.as_str()))
        .collect();
    let text = schedule_block(template)
        .ok_or("the reused example has no schedule block")?
        .lines()
        .map(|l| rename(l.trim(), &renames, facts))
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    Ok(AutoSchedule {
        scheduler: Scheduler::MatrixProduct,
        text,
        reason: why,
    })
}

impl super::Sizes {
    fn values_of(&self, e: &crate::plan::SizeExpr) -> Option<i64> {
        self.value(e)
    }
}

fn layout_text(l: OperandLayout, other: &str) -> String {
    match l {
        OperandLayout::Normal => format!("{other}, K"),
        OperandLayout::Transposed => format!("K, {other}"),
    }
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
