//! The transpose scheduler: a pointwise fusion that reads an input with its two innermost axes
//! swapped (`transpose(x, 0, 1)`, or `[B, M, N] -> [B, N, M]`), so the input's contiguous
//! axis is the output's outer one. Reading it through the pointwise schedule would touch one
//! element per 32-byte sector in one of the two directions; this scheduler moves
//! [`TILE`] x [`TILE`] tiles through shared memory instead (examples/ops/transpose.hf's
//! schedule): each permuted input is read into a shared tile with `threadIdx.x` along its own
//! contiguous axis, and everything else is computed and written with `threadIdx.x` along the
//! output's, so both global accesses are coalesced. The tile's rows are padded by one element
//! (`row_pad=1`), so reading down its columns touches 32 banks, not one.
//!
//! Two-byte types move only 64 bytes per warp access that way; for them ([`Tiling::choose`])
//! the tiles are [`WIDE_TILE`] x [`WIDE_TILE`] with vector accesses on both sides (up to four
//! elements, 8 bytes) and the rows padded by one vector, which keeps the tile's vectors aligned.
//!
//! Takes a [`super::Class::Transpose`]; emits the schedule text and a reason with the tile.

use super::text::ScheduleText;
use super::{dtype_names, AutoSchedule, Facts, Scheduler};
use crate::fusion::TensorId;

/// The tile's side, in elements: a warp's 32 threads across one row.
pub const TILE: i64 = 32;
/// Rows of threads per tile: each thread moves `TILE / TILE_ROWS` elements per tile (4 rows:
/// 95.6% of the copy for f32 on the H200, where 8 rows gave 91.5% and 2 rows 94.5%).
const TILE_ROWS: i64 = 4;
/// The tile's side for 2-byte types, with vectors: 64 x 64 tiles of bf16 with 4-element vectors
/// and 16 rows of threads reach 96.7% of the copy on the H200 at 16384^2 (32 x 32 tiles with
/// 2-element vectors 81.4%, 64 x 64 with 2-, 4- or 8-element vectors and 4 to 8 rows of threads
/// 95.3-95.9%; docs/benchmarks.md).
pub const WIDE_TILE: i64 = 64;
/// Threads per block with [`WIDE_TILE`]: the rows of threads follow the vector.
const WIDE_THREADS: i64 = 256;
/// The widest vector of a wide tile, in elements.
const WIDE_VECTOR: i64 = 4;

/// How tiles are cut: the side, the rows of threads down a tile, elements per vector access
/// along each side's contiguous axis, and the shared tile's row padding in elements.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Tiling {
    side: i64,
    rows: i64,
    vector: i64,
    pad: i64,
}

impl Tiling {
    /// 2-byte tensors whose contiguous extents take a vector get wide tiles with vectors;
    /// everything else the 32 x 32 scalar tiles.
    fn choose(facts: &Facts, accessed: &[TensorId], extents: [Option<i64>; 2]) -> Tiling {
        let vector = extents
            .iter()
            .map(|&e| facts.vector_width(accessed, e))
            .min()
            .unwrap_or(1)
            .min(WIDE_VECTOR);
        if facts.widest(accessed) == 2 && vector > 1 {
            Tiling {
                side: WIDE_TILE,
                rows: WIDE_THREADS / (WIDE_TILE / vector),
                vector,
                pad: vector,
            }
        } else {
            Tiling {
                side: TILE,
                rows: TILE_ROWS,
                vector: 1,
                pad: 1,
            }
        }
    }
}

/// The most tiles `blockIdx.y` (or `.z`) can count.
const MAX_GRID_YZ: i64 = 65_535;

/// The schedule of a rank-2 or rank-3 `reference` whose `permuted` inputs are read with their
/// last two axes swapped.
pub fn schedule(
    facts: &Facts,
    reference: TensorId,
    permuted: &[TensorId],
) -> Result<AutoSchedule, String> {
    let f = facts.fusion;
    let rank = f.rank(reference);
    let logical = f.logical(reference);
    // [batch?, rows, columns] of the reference (the output's layout): the rows on blockIdx.y.
    let batch = (rank == 3).then(|| logical[0]);
    let rows = logical[rank - 2];
    let others: Vec<TensorId> = facts
        .full_inputs(rank)
        .into_iter()
        .filter(|t| !permuted.contains(t))
        .collect();
    let outputs = facts.full_outputs(rank);
    let accessed: Vec<TensorId> = permuted
        .iter()
        .chain(&others)
        .chain(&outputs)
        .copied()
        .collect();
    let tiling = Tiling::choose(
        facts,
        &accessed,
        [facts.extent(rows), facts.extent(logical[rank - 1])],
    );
    let Tiling {
        side,
        rows: thread_rows,
        vector,
        pad,
    } = tiling;
    let row_tiles = facts.extent(rows).map(|e| super::ceil_div(e, side));
    if row_tiles.is_some_and(|t| t > MAX_GRID_YZ) {
        return Err(format!(
            "`{}` has {} tiles of {side} rows, more than blockIdx.y counts ({MAX_GRID_YZ})",
            facts.name(reference),
            row_tiles.unwrap_or(0)
        ));
    }
    if let Some(b) = batch.and_then(|b| facts.extent(b)) {
        if b > MAX_GRID_YZ {
            return Err(format!(
                "`{}` has a batch of {b}, more than blockIdx.z counts ({MAX_GRID_YZ})",
                facts.name(reference)
            ));
        }
    }

    let mut s = ScheduleText::new(facts.name(reference));
    let mut tiles = Vec::new();
    for &x in permuted {
        let name = facts.fresh(facts.name(x), "s");
        s.line(format!(
            "{name} = cache_after({}, memory=shared, row_pad={pad})",
            facts.name(x)
        ));
        tiles.push(name);
    }
    s.caches(facts, &others, &outputs, "");
    let b = usize::from(batch.is_some());
    let across = side / vector;
    s.comment(&format!(
        "Tiles of {side} x {side}: the output's rows on blockIdx.y, its columns on blockIdx.x{}, {across} threads across a tile's row{} and {thread_rows} down it.",
        if batch.is_some() { ", the batch on blockIdx.z" } else { "" },
        if vector > 1 { format!(" in {vector}-element vectors") } else { String::new() },
    ));
    // [batch?, row tiles, column tiles, rows in a tile (steps x threads), columns in a tile]
    let tile_axes = |s: &mut ScheduleText, reorder: &[usize]| {
        s.split(b + 1, side, false);
        s.split(b, side, false);
        s.reorder(reorder);
        s.split(b + 2, thread_rows, false);
        let mut axes = vec![
            (b, "BIDy"),
            (b + 1, "BIDx"),
            (b + 3, "TIDy"),
            (b + 4, "TIDx"),
        ];
        if vector > 1 {
            s.split(b + 4, vector, false);
            axes.push((b + 5, "Vectorize"));
        }
        if b == 1 {
            axes.insert(0, (0, "BIDz"));
        }
        s.parallelize(&axes);
    };
    let keep =
        |v: &[usize]| -> Vec<usize> { (0..b).chain(v.iter().map(|&a| a + b)).collect::<Vec<_>>() };
    // The reference: [rows/T, rows%T, cols/T, cols%T] -> [rows/T, cols/T, rows%T, cols%T].
    tile_axes(&mut s, &keep(&[0, 2, 1, 3]));
    for tile in &tiles {
        // The input's axes are the output's swapped: [cols/T, cols%T, rows/T, rows%T] ->
        // [rows/T, cols/T, cols%T, rows%T], so its own contiguous axis (the output's rows)
        // is on threadIdx.x. The block index and the loop order match the reference's, so the
        // tile is computed inside the block's two (three) block-index loops.
        s.comment(&format!(
            "`{tile}` is read with threadIdx.x along the input's contiguous axis, in the same blocks."
        ));
        let mut t = ScheduleText::new(tile);
        tile_axes(&mut t, &keep(&[2, 0, 1, 3]));
        t.line(format!("{tile}.inline_at({})", b + 2));
        s.append(t);
    }
    s.propagate_and_inline();
    let access = if vector > 1 {
        format!("{vector}-element vectors, rows padded by one vector")
    } else {
        "rows padded by one element".to_string()
    };
    let reason = format!(
        "transpose of {} {} {}: {side} x {side} tiles through shared memory ({access}), {across} x {thread_rows} threads",
        permuted
            .iter()
            .map(|&t| format!("`{}`", facts.name(t)))
            .collect::<Vec<_>>()
            .join(" and "),
        dtype_names(f, permuted),
        facts.sizes.describe(),
    );
    Ok(AutoSchedule {
        scheduler: Scheduler::Transpose,
        text: s.finish(),
        reason,
    })
}
