//! The reduction schedulers, for a rank-2 input reduced along one axis with nothing reading the
//! result back over it (that is [`super::normalization`]).
//!
//! Inner (rows, examples/basics/row_sum.hf): each row is read in 16-byte vectors by a row of
//! threads that accumulate in registers, then combined by a block reduction; short rows share
//! a block (rows on TIDy) so a block keeps at least 128 threads.
//!
//! Outer (columns): a block owns a strip of columns, up to 32 threads across it each with one
//! vector of columns (fewer when the strips would not fill the GPU), and the block's other
//! threads walk the rows, four rows each per unrolled step; the block combines the partial sums
//! of each column at the end. Few columns over many rows leave SMs idle: reductions across
//! blocks are not supported yet.

use super::text::ScheduleText;
use super::{dtype_names, AutoSchedule, Facts, Scheduler};
use crate::fusion::TensorId;

/// Most threads along a row (a block reduction over them).
const MAX_ROW_THREADS: i64 = 512;
/// Fewest threads in a block of the inner reduction.
const MIN_BLOCK_THREADS: i64 = 128;
/// The outer reduction's block: its threads, the fewest blocks it aims for (four per SM, so
/// the SMs stay busy while the slowest blocks finish), and the rows a thread reads per step of
/// its row loop (independent loads in flight).
const OUTER_BLOCK_THREADS: i64 = 256;
const MIN_OUTER_BLOCKS: i64 = 4 * crate::target::SM_COUNT;
const ROW_UNROLL: i64 = 4;

pub fn inner(facts: &Facts, reduction: TensorId, input: TensorId) -> Result<AutoSchedule, String> {
    let f = facts.fusion;
    let [rows, row] = f.logical(input)[..] else {
        return Err(format!("`{}` is not rank 2", facts.name(input)));
    };
    let n = facts.extent(row);
    let n_or = facts.extent_or_default(row);
    // The fusion's inputs over the same rows (the reduction's own input may be computed).
    let inputs = facts.full_inputs(2);
    let v = facts.vector_width(&inputs, n);
    let vectors = super::ceil_div(n_or, v);
    let threads = match facts.knobs.threads {
        Some(t) => t.clamp(32, crate::target::MAX_THREADS_PER_BLOCK),
        None => (vectors as u64)
            .next_power_of_two()
            .clamp(32, MAX_ROW_THREADS as u64) as i64,
    };
    let rows_per_block = (MIN_BLOCK_THREADS / threads).max(1);

    let mut s = ScheduleText::new(facts.name(reduction));
    s.caches(facts, &inputs, &[], "");
    s.comment(&format!(
        "{v}-element vectors, {threads} threads per row{}; a block reduction combines them.",
        if rows_per_block > 1 {
            format!(", {rows_per_block} rows per block")
        } else {
            String::new()
        }
    ));
    // [rows, (rows in a block,) steps, threads, (v)]
    let row_axis = usize::from(rows_per_block > 1);
    let mut axes = vec![(0, "BIDx")];
    if rows_per_block > 1 {
        axes.push((1, "TIDy"));
    }
    axes.push((row_axis + 2, "TIDx"));
    if v > 1 {
        s.split(1, v, false);
        axes.push((row_axis + 3, "Vectorize"));
    }
    s.split(1, threads, false);
    if rows_per_block > 1 {
        s.split(0, rows_per_block, false);
    }
    s.parallelize(&axes);
    s.propagate_and_inline();
    let reason = format!(
        "inner reduction of {} rows of {} {} {}: {v}-element vectors, {threads} threads per row, {rows_per_block} row{} per block",
        extent_text(facts.extent(rows)),
        extent_text(n),
        dtype_names(f, &inputs),
        facts.sizes.describe(),
        if rows_per_block > 1 { "s" } else { "" },
    );
    Ok(AutoSchedule {
        scheduler: Scheduler::InnerReduction,
        text: s.finish(),
        reason,
    })
}

pub fn outer(facts: &Facts, reduction: TensorId, input: TensorId) -> Result<AutoSchedule, String> {
    let f = facts.fusion;
    let [rows, columns] = f.logical(input)[..] else {
        return Err(format!("`{}` is not rank 2", facts.name(input)));
    };
    let n = facts.extent(columns);
    // The fusion's inputs over the same rows (the reduction's own input may be computed).
    let inputs = facts.full_inputs(2);
    let v = facts.vector_width(&inputs, n);
    // Narrow strips when the columns are few for the GPU: every block walks all the rows, so
    // the blocks (one per strip) must fill the SMs; a row of a strip stays at least 64 bytes
    // (two 32-byte sectors) so the rows' reads stay whole sectors.
    let bytes = facts.widest(&inputs);
    let column_threads = match facts.knobs.threads {
        // A power of two that divides the block.
        Some(t) => (t.clamp(1, 32) as u64).next_power_of_two() as i64,
        None => [32, 16, 8, 4]
            .into_iter()
            .find(|&c| {
                let blocks = super::ceil_div(facts.extent_or_default(columns), c * v);
                blocks >= MIN_OUTER_BLOCKS || c * v * bytes <= 64
            })
            .unwrap_or(4),
    };
    let row_threads = OUTER_BLOCK_THREADS / column_threads;
    let row_unroll = facts.knobs.per_thread.unwrap_or(ROW_UNROLL).clamp(1, 16);

    let mut s = ScheduleText::new(facts.name(reduction));
    s.caches(facts, &inputs, &[], "");
    s.comment(&format!(
        "A block owns {} columns: {column_threads} threads of {v}-element vectors across them, {row_threads} rows of threads down the rows ({row_unroll} rows each per step, unrolled), combined at the end.",
        column_threads * v
    ));
    // [column strips, row steps, unrolled rows, row threads, column threads, (v)]
    let mut axes = vec![(0, "BIDx"), (2, "Unroll"), (3, "TIDy"), (4, "TIDx")];
    if v > 1 {
        s.split(1, v, false);
        axes.push((5, "Vectorize"));
    }
    s.split(1, column_threads, false);
    s.split(0, row_threads, false);
    s.split(0, row_unroll, false);
    s.reorder(if v > 1 {
        &[3, 0, 1, 2, 4, 5]
    } else {
        &[3, 0, 1, 2, 4]
    });
    s.parallelize(&axes);
    s.propagate_and_inline();
    let reason = format!(
        "outer reduction of {} rows of {} {} {}: {} columns per block in {v}-element vectors, {column_threads} x {row_threads} threads, {row_unroll} rows per thread per step",
        extent_text(facts.extent(rows)),
        extent_text(n),
        dtype_names(f, &inputs),
        facts.sizes.describe(),
        column_threads * v,
    );
    Ok(AutoSchedule {
        scheduler: Scheduler::OuterReduction,
        text: s.finish(),
        reason,
    })
}

/// An extent for a reason: its value, or "a symbolic number of".
pub(super) fn extent_text(e: Option<i64>) -> String {
    e.map_or_else(|| "a symbolic number of".to_string(), |e| e.to_string())
}
