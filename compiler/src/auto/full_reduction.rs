//! The full-reduction scheduler: reductions of every element of a tensor (`sum(x, axis=0)` of
//! a vector, `max(abs(x), axis=[0, 1])` of a matrix) into scalars, across the whole grid
//! (`passes::grid`: each block reduces its part, the last block to finish combines the
//! blocks' values).
//!
//! Every axis merged into one, split into 16-byte vectors, a block of threads, a few vectors
//! per thread per step (unrolled: independent loads in flight) and a serial loop of steps, so
//! that the grid is about one full wave of the GPU ([`WAVE_BLOCKS`] blocks) at any size: each
//! block reads a contiguous run, and the last block combines about a thousand partial values,
//! not one per 4 KiB of input.

use super::text::ScheduleText;
use super::{ceil_div, dtype_names, AutoSchedule, Facts, Scheduler};
use crate::fusion::TensorId;

/// Threads per block.
const THREADS: i64 = 256;
/// Vectors a thread loads per step of its serial loop (unrolled).
const UNROLL: i64 = 4;
/// The blocks of one full wave of 256-thread blocks on an H100 (2048 resident threads per SM).
const WAVE_BLOCKS: i64 = crate::target::SM_COUNT * (2048 / THREADS);

pub fn schedule(
    facts: &Facts,
    reduction: TensorId,
    input: TensorId,
) -> Result<AutoSchedule, String> {
    let f = facts.fusion;
    let logical = f.logical(input);
    let rank = logical.len();
    let inputs = facts.full_inputs(rank);
    let total: i64 = logical
        .iter()
        .map(|&a| facts.extent_or_default(a))
        .fold(1i64, |acc, e| acc.saturating_mul(e));
    // The merged axis is the tensor's contiguous elements: every vector but the last is whole
    // and aligned at any size (the last one's lanes are predicated), so the width is 16 bytes
    // whether or not the size is a multiple of it.
    let v = facts.vector_width(&inputs, None);
    let threads = facts
        .knobs
        .threads
        .unwrap_or(THREADS)
        .clamp(32, crate::target::MAX_THREADS_PER_BLOCK);
    let unroll = facts.knobs.per_thread.unwrap_or(UNROLL).clamp(1, 16);
    let per_step = v * threads * unroll;
    let steps = ceil_div(total, per_step);
    let serial = ceil_div(steps, WAVE_BLOCKS).max(1);
    let blocks = ceil_div(steps, serial);
    let steps_text = format!("{serial} step{}", if serial == 1 { "" } else { "s" });

    let mut s = ScheduleText::new(facts.name(reduction));
    s.caches(facts, &inputs, &[], "");
    if rank > 1 {
        s.comment("One flat axis over every element.");
    }
    for _ in 1..rank {
        s.merge(0);
    }
    s.comment(&format!(
        "{v}-element vectors, {threads} threads, {unroll} vectors per thread per step (unrolled), {steps_text} per block: about {blocks} blocks, whose values the last block to finish combines (a grid reduction)."
    ));
    // [blocks, steps, unrolled, threads, (v)]
    let mut axes = vec![(0, "BIDx"), (2, "Unroll"), (3, "TIDx")];
    if v > 1 {
        s.split(0, v, false);
        axes.push((4, "Vectorize"));
    }
    s.split(0, threads, false);
    s.split(0, unroll, false);
    s.split(0, serial, false);
    s.parallelize(&axes);
    s.propagate_and_inline();
    let reason = format!(
        "full reduction of {total} elements of {} {}: a grid reduction over {blocks} blocks of {threads} threads, {v}-element vectors, {unroll} per thread per step, {steps_text} per block",
        dtype_names(f, &inputs),
        facts.sizes.describe(),
    );
    Ok(AutoSchedule {
        scheduler: Scheduler::FullReduction,
        text: s.finish(),
        reason,
    })
}
