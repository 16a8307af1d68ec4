//! The matrix-product scheduler: reuses the hand-tuned schedules of `examples/matmul/` for a
//! fusion [`crate::fusion::matmul::detect`] recognises, with the tensors renamed to the
//! fusion's own.
//!
//! bf16 or f16 operands `a[M, K]` and `b[N, K]` (K-major, as the tensor-core ladder takes
//! them) with a narrowing cast of the f32 sum: step 15's persistent warp-specialized kernel
//! (128 x 256 tiles, 3 stages, a grouped raster over a grid sized to the GPU), or for small M
//! (at most 128 rows) step 11's (64 x 128 or 64 x 64 tiles, a deep pipeline) or step 20's
//! split-K, whichever fills three quarters of the SMs with the fewest K chunks, so B streams
//! through most of the GPU ([`DecodeTiles::choose`]).
//! e4m3 or e5m2 operands `a[M, K]` and `b[N, K]`, plain or with per-tensor or row-wise
//! dequantization scales multiplied into the f32 sum before the cast: step 16's kernel (step
//! 15's with a 128-wide K tile of m64n256k32 wgmma; the scales are applied in the epilogue),
//! step 17's with one row and one column vector (each tile's pieces of them staged in shared
//! memory by a 1-D TMA copy issued before its k loop), or for small M the bf16 decode choice with
//! FP8's K tile (128 in k32 steps: a stage holds as many bytes as the bf16 one). An FP8 operand stored MN-major is declined with
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
const SMALL_M_SPLIT_K: &str = include_str!("../../../examples/matmul/step20_split_k_decode.hf");
const REGISTER_TILES: &str = include_str!("../../../examples/basics/matmul.hf");

/// Step 11's and step 20's K split (64 in k16 steps: one 128-byte swizzled row of bf16) and
/// FP8's (128 in k32 steps: one row of e4m3 / e5m2), so the decode schedules carry over to FP8.
const SMALL_M_K_SPLIT: [(&str, &str); 2] = [
    (
        "s.split(4, 64)\n  s.split(5, 16)\n",
        "s.split(4, 128)\n  s.split(5, 32)\n",
    ),
    (
        "s.split(5, 64)\n  s.split(6, 16)\n",
        "s.split(5, 128)\n  s.split(6, 32)\n",
    ),
];

/// CTAs from which a decode grid counts as filling the GPU: three quarters of the SMs. Below
/// it B streams through too few SMs (step 11's 64 x 128 tiles give 32 CTAs at N = 4096).
const DECODE_FILL: i64 = crate::target::SM_COUNT * 3 / 4;

/// A small-M product's tiling: the N tile, the K chunks (split-K on blockIdx.z when more
/// than one) and the stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DecodeTiles {
    tile_n: i64,
    /// K per chunk, a multiple of the K tile; `None`: one chunk (no split-K).
    chunk: Option<i64>,
    stages: i64,
    /// The M tiles on blockIdx.x (launched next to each other) and the N tiles on blockIdx.y,
    /// when there are several M tiles: the CTAs that read one tile of the weight then run
    /// together, so its second read hits L2. Measured on the H200 at 128 x 4096 x 4096 bf16:
    /// 18.77-18.91 us against 20.32-20.50 with the N tiles first (docs/benchmarks.md,
    /// twenty-second session).
    m_tiles_first: bool,
}

impl DecodeTiles {
    /// The first of 64 x 128 tiles, 64 x 64 tiles, and 64 x 64 tiles in two or four K chunks
    /// (64 x 32 in two for full M tiles) whose grid fills [`DECODE_FILL`] CTAs, keeping each chunk at least 16 K tiles long (the pipeline's fill
    /// is paid per chunk). Measured on the H200 at 64 x 4096 x 4096 bf16: 64 x 128 tiles
    /// without split 18.61 us, 64 x 64 tiles 17.82, 64 x 64 tiles in two K chunks 15.87, in
    /// four 17.23 (docs/benchmarks.md, twelfth session). Sizes without values: step 11's.
    fn choose(m: Option<i64>, n: Option<i64>, k: Option<i64>, k_tile: i64) -> DecodeTiles {
        let step11 = DecodeTiles {
            tile_n: 128,
            chunk: None,
            stages: 8,
            m_tiles_first: false,
        };
        let (Some(m), Some(n), Some(k)) = (m, n, k) else {
            return step11;
        };
        let m_tiles = (m + 63) / 64;
        let m_tiles_first = m_tiles > 1;
        let k_tiles = (k + k_tile - 1) / k_tile;
        // Wider tiles first, then more chunks: 64 x 128 tiles in four chunks measured slower
        // than 64 x 64 tiles in two (19.41 against 15.87 us).
        for (tile_n, chunks) in [(128, 1), (64, 1), (64, 2), (64, 4)] {
            let ctas = m_tiles * ((n + tile_n - 1) / tile_n) * chunks;
            let fills = ctas >= DECODE_FILL;
            if fills && (chunks == 1 || k_tiles / chunks >= 16) {
                let chunk = (chunks > 1).then(|| (k_tiles + chunks - 1) / chunks * k_tile);
                // Step 11's 24 KiB stages hold 8 in shared memory, 64 x 64 tiles' 16 KiB 12;
                // split-K's shorter chunks take 8. With several M tiles a weight tile's second
                // read comes from L2, and 8 stages of 64 x 64 were faster than 10, 12 or 13
                // (128 x 4096 x 4096 bf16 on the H200: 17.97-18.11 us against 18.56-18.85).
                // 64 x 128 tiles in more CTAs than SMs take 4 stages, so two CTAs share an SM
                // and the grid runs in one wave (128 x 14336 x 4096: 39.1 us against 41.8 with
                // 8 stages, 44.7 with 6; 96 x 14336 x 4096: 41.0 against 46.3).
                let stages = match (tile_n, chunk) {
                    (128, None) if ctas > crate::target::SM_COUNT => 4,
                    (_, Some(_)) | (128, None) => 8,
                    _ if m_tiles_first => 8,
                    _ => 12,
                };
                // Two chunks of full 64-row M tiles: 64 x 32 tiles, twice the CTAs (64 x 4096 x
                // 4096: bf16 16.0-16.5 us against 16.6-16.7, FP8 11.9 against 12.5-12.8). Not
                // with a partial M tile: at M = 16-48 every CTA reads the same small tile of
                // the activations at once, one L2 slice is the hot spot, and twice the CTAs
                // made it worse (M = 16: 23.9-24.1 us against 19.5-19.9).
                let tile_n = if chunks == 2 && m % 64 == 0 {
                    32
                } else {
                    tile_n
                };
                return DecodeTiles {
                    tile_n,
                    chunk,
                    stages,
                    m_tiles_first,
                };
            }
        }
        // Too little work to fill the GPU at any split: the smallest tiles, one chunk.
        DecodeTiles {
            tile_n: 64,
            chunk: None,
            stages: 12,
            m_tiles_first,
        }
    }

    /// [`DecodeTiles::choose`] at the sizes of the product `shape`.
    fn of(facts: &Facts, shape: &MatmulShape, k_tile: i64) -> DecodeTiles {
        let size = |e| facts.sizes.values_of(e);
        DecodeTiles::choose(size(&shape.m), size(&shape.n), size(&shape.k), k_tile)
    }

    /// Step 11's schedule (one chunk) or step 20's (split-K) with these tiles, and FP8's K
    /// tile when `fp8`.
    fn template(self, fp8: bool) -> Result<String, String> {
        let (example, name, n_split, k_split) = match self.chunk {
            None => (SMALL_M, "step 11", "s.split(2, 128)", SMALL_M_K_SPLIT[0]),
            Some(_) => (
                SMALL_M_SPLIT_K,
                "step 20",
                "s.split(2, 128)",
                SMALL_M_K_SPLIT[1],
            ),
        };
        let chunk_split = "s.split(4, 1024)";
        let stages = ["circular_buffer(8,", "circular_buffer(4,"];
        let grid = ["s.parallelize(0, BIDy)", "s.parallelize(1, BIDx)"];
        let has = |t: &str| example.contains(t);
        if !has(n_split)
            || !has(k_split.0)
            || !grid.iter().all(|g| has(g))
            || (self.chunk.is_some() && !has(chunk_split))
            || !stages.iter().any(|s| has(s))
        {
            return Err(format!(
                "{name}'s example no longer splits N, K or its stages as the decode schedule expects"
            ));
        }
        let mut text = example.replace(n_split, &format!("s.split(2, {})", self.tile_n));
        if let Some(chunk) = self.chunk {
            text = text.replace(chunk_split, &format!("s.split(4, {chunk})"));
        }
        for s in stages {
            text = text.replace(s, &format!("circular_buffer({},", self.stages));
        }
        if fp8 {
            text = text.replace(k_split.0, k_split.1);
        }
        if self.m_tiles_first {
            text = text
                .replace(grid[0], "s.parallelize(0, BIDx)")
                .replace(grid[1], "s.parallelize(1, BIDy)");
        }
        Ok(text)
    }

    /// What the reason says about the kernel.
    fn describe(self, fp8: bool) -> String {
        let (k_tile, wgmma) = if fp8 {
            (128, format!("m64n{}k32", self.tile_n))
        } else {
            (64, format!("m64n{}k16", self.tile_n))
        };
        let fp8_k = if fp8 { " with FP8's K tile" } else { "" };
        let split = match self.chunk {
            None => format!("step 11's warp-specialized kernel{fp8_k}"),
            Some(c) => format!(
                "step 20's warp-specialized kernel{fp8_k}, K split in chunks of {c} over blockIdx.z (the partial sums added in chunk order by each tile's last block)"
            ),
        };
        let raster = if self.m_tiles_first {
            ", the M tiles on blockIdx.x (those reading one tile of the weight launched together)"
        } else {
            ""
        };
        format!(
            "{split}, 64 x {} tiles, a K tile of {k_tile} ({wgmma} wgmma), {} stages{raster}",
            self.tile_n, self.stages
        )
    }
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
    let decode = |k_tile| DecodeTiles::of(facts, shape, k_tile);
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
            let tiles = decode(128);
            (
                tiles.template(true)?.into(),
                vec![("a", a), ("b", b), ("s", sum), ("c", c)],
                format!(
                    "FP8 matrix product {describe}{scaled}; small M: {}",
                    tiles.describe(true)
                ),
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
            let tiles = decode(64);
            (
                tiles.template(false)?.into(),
                vec![("a", a), ("b", b), ("s", sum), ("c", c)],
                format!(
                    "matrix product {describe} with small M: {}",
                    tiles.describe(false)
                ),
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

#[cfg(test)]
mod tests {
    use super::DecodeTiles;

    /// The decode tiling at the shapes measured, and the split's chunk rounded to K tiles.
    #[test]
    fn decode_tiles_fill_the_gpu_with_the_fewest_chunks() {
        let choose = |m, n, k, k_tile| {
            let t = DecodeTiles::choose(Some(m), Some(n), Some(k), k_tile);
            (t.tile_n, t.chunk, t.stages)
        };
        // 32 CTAs of 64 x 128, 64 of 64 x 64: two K chunks give 128, and with a full M tile
        // the N tile halves (256 CTAs).
        assert_eq!(choose(64, 4096, 4096, 64), (32, Some(2048), 8));
        assert_eq!(choose(16, 4096, 4096, 64), (64, Some(2048), 8));
        assert_eq!(choose(64, 14336, 4096, 64), (128, None, 8));
        // 224 CTAs of 64 x 128: two an SM, so 4 stages of 24 KiB.
        assert_eq!(choose(128, 14336, 4096, 64), (128, None, 4));
        assert_eq!(choose(96, 14336, 4096, 64), (128, None, 4));
        assert_eq!(choose(128, 4096, 4096, 64), (64, None, 8));
        // A chunk is whole K tiles: 4100 is 65 tiles of 64, 33 per chunk.
        assert_eq!(choose(48, 4096, 4100, 64), (64, Some(33 * 64), 8));
        // Chunks shorter than 16 K tiles are not worth their pipeline fill.
        assert_eq!(choose(64, 4096, 1024, 64), (64, None, 12));
        // Sizes without values: step 11's.
        let unknown = DecodeTiles::choose(Some(64), None, Some(4096), 64);
        assert_eq!((unknown.tile_n, unknown.chunk), (128, None));
    }

    /// With several M tiles the M tiles go on blockIdx.x, so the CTAs sharing a weight tile
    /// launch together; with one, the N tiles keep blockIdx.x.
    #[test]
    fn decode_tiles_with_several_m_tiles_put_them_on_blockidx_x() {
        let text = |m| {
            let t = DecodeTiles::choose(Some(m), Some(4096), Some(4096), 64);
            (
                t.m_tiles_first,
                t.template(false).expect("the decode template"),
            )
        };
        let (first, two) = text(128);
        assert!(first);
        assert!(two.contains("s.parallelize(0, BIDx)") && two.contains("s.parallelize(1, BIDy)"));
        let (first, one) = text(64);
        assert!(!first);
        assert!(one.contains("s.parallelize(0, BIDy)") && one.contains("s.parallelize(1, BIDx)"));
        let split = DecodeTiles::choose(Some(100), Some(1000), Some(8192), 64);
        assert!(split.chunk.is_some() && split.m_tiles_first);
        let split = split.template(true).expect("the split-K template");
        assert!(
            split.contains("s.parallelize(0, BIDx)") && split.contains("s.parallelize(2, BIDz)")
        );
    }
}
