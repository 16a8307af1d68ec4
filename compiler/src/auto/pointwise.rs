//! The pointwise scheduler: every axis merged into one, split into 16-byte vectors, threads and
//! blocks (examples/basics/add.hf's schedule), with each full-rank input read through a
//! register cache and each full-rank output written from one, so loads and stores are vector
//! accesses. Large problems unroll two vectors per thread (more loads in flight per thread,
//! half the blocks), also along a row when a lower-rank input is broadcast over the rows
//! (fusions/gelu_exact at 16384 x 16384 on the H200: 365.9 -> 334.6 us), four there from 2^26
//! elements (318.3 us). A map that reads each input element once at its own index (no view),
//! with full-rank outputs and broadcast inputs of at most one axis, reads its cached inputs
//! with `l2=evict_last` (the rule and its measurements: `auto/l2.rs`).

use super::l2::{self, Form};
use super::text::ScheduleText;
use super::{dtype_names, AutoSchedule, Facts, Scheduler};
use crate::fusion::TensorId;

/// Threads per block.
pub const THREADS: i64 = 128;

/// Elements from which a thread takes two vectors instead of one (about 16 waves of 128-thread
/// blocks on 132 SMs at one vector per thread).
const UNROLL_FROM: i64 = 1 << 22;

/// Elements from which a thread takes four vectors along a row (the by-rows form).
const UNROLL_FOUR_FROM: i64 = 1 << 26;

pub fn schedule(facts: &Facts, reference: TensorId) -> AutoSchedule {
    let f = facts.fusion;
    let rank = f.rank(reference);
    let logical = f.logical(reference);
    let inputs = facts.full_inputs(rank);
    let outputs = facts.full_outputs(rank);
    let accessed: Vec<TensorId> = inputs.iter().chain(&outputs).copied().collect();
    let inner = logical.last().and_then(|&a| facts.extent(a));
    // A permuted input (`transpose`) is read across its rows: its accesses cannot be vectors
    // along the output's inner axis. One element per thread keeps the output's writes
    // coalesced; a tiled transpose through shared memory is a hand schedule
    // (examples/ops/transpose.hf), not yet an automatic one.
    let permuted = f
        .exprs
        .iter()
        .any(|e| matches!(e.op, crate::fusion::Op::Permute { .. }));
    let v = if permuted {
        1
    } else {
        let aligned = facts.vector_width(&accessed, inner);
        facts.knobs.vector.map_or(aligned, |k| k.clamp(1, aligned))
    };
    let threads = facts
        .knobs
        .threads
        .unwrap_or(THREADS)
        .clamp(32, crate::target::MAX_THREADS_PER_BLOCK);
    let total: i64 = logical
        .iter()
        .map(|&a| facts.extent_or_default(a))
        .fold(1i64, |acc, e| acc.saturating_mul(e));
    // A lower-rank input broadcast over the rows (a bias) is indexed by the row's own axis
    // when the rows are split rather than flattened (examples/fusions/gelu_exact.hf), unless a
    // row is shorter than a block's vectors.
    let broadcast_inputs = f.inputs.iter().any(|&t| (1..rank).contains(&f.rank(t)));
    let by_rows = rank > 1 && broadcast_inputs && inner.is_none_or(|n| n >= v * threads);
    // By rows, a very large problem takes four vectors per thread (bias + exact GELU at 16384
    // x 16384 bf16 on the H200: one vector 365.9 us, two 334.6, four 318.3), and a thread's
    // vectors are along its row: no more of them than a row holds.
    let default = match total {
        t if by_rows && t >= UNROLL_FOUR_FROM => 4,
        t if t >= UNROLL_FROM => 2,
        _ => 1,
    };
    let unroll = facts.knobs.per_thread.unwrap_or(default).clamp(1, 16);
    let unroll = match inner {
        Some(n) if by_rows => unroll.min((n / (v * threads)).max(1)),
        _ => unroll,
    };

    let policy = l2::policy(facts, Form::Pointwise, rank);
    let l2_reason = l2::reason_clause(facts, Form::Pointwise, policy);
    let mut s = ScheduleText::new(facts.name(reference));
    s.caches(facts, &inputs, &outputs, &l2::cache_option(policy));
    if by_rows {
        rows(&mut s, rank, v, threads, unroll);
        s.propagate_and_inline();
        return AutoSchedule {
            scheduler: Scheduler::Pointwise,
            text: s.finish(),
            reason: format!(
                "pointwise over {total} elements of {} {} with a row-broadcast input: each row in blocks of {threads} threads, {v}-element vectors, {unroll} vector{} per thread{l2_reason}",
                dtype_names(f, &accessed),
                facts.sizes.describe(),
                if unroll > 1 { "s" } else { "" },
            ),
        };
    }
    if rank > 1 {
        s.comment("One flat axis over every element.");
    }
    for _ in 1..rank {
        s.merge(0);
    }
    let vector_bytes = v * facts.widest(&accessed);
    // Threads' own axes, outermost first: the grid, unrolled vectors, threads, vector lanes.
    let mut axes = vec![(0, "BIDx")];
    if unroll > 1 {
        axes.push((axes.len(), "Unroll"));
    }
    axes.push((axes.len(), "TIDx"));
    s.comment(&format!(
        "{}{threads} threads per block{}.",
        if v > 1 {
            format!("{v}-element vectors ({vector_bytes} bytes), ")
        } else {
            format!(
                "One element per thread ({}), ",
                if permuted {
                    "a permuted input is read across its rows"
                } else {
                    "the rows are not a multiple of a vector"
                }
            )
        },
        apart(unroll, threads)
    ));
    if v > 1 {
        s.split(0, v, false);
        axes.push((axes.len(), "Vectorize"));
    }
    s.split(0, threads, false);
    if unroll > 1 {
        s.split(0, unroll, false);
    }
    s.parallelize(&axes);
    s.propagate_and_inline();
    let reason = format!(
        "pointwise over {} elements of {} {}: {v}-element vectors, {threads} threads per block, {unroll} vector{} per thread{l2_reason}",
        total,
        dtype_names(f, &accessed),
        facts.sizes.describe(),
        if unroll > 1 { "s" } else { "" },
    );
    AutoSchedule {
        scheduler: Scheduler::Pointwise,
        text: s.finish(),
        reason,
    }
}

/// ", N vectors per thread T vectors apart", or nothing for one vector.
fn apart(unroll: i64, threads: i64) -> String {
    if unroll > 1 {
        format!(", {unroll} vectors per thread {threads} vectors apart")
    } else {
        String::new()
    }
}

/// The by-rows form's statements: [rows..., blocks of a row, (unrolled), threads, (v)], then
/// the rows and blocks merged onto one grid axis.
fn rows(s: &mut ScheduleText, rank: usize, v: i64, threads: i64, unroll: i64) {
    s.comment(&format!(
        "Each row in blocks of {threads} threads{}; the rows and their blocks on one grid axis.",
        apart(unroll, threads)
    ));
    if v > 1 {
        s.split(rank - 1, v, false);
    }
    s.split(rank - 1, threads, false);
    if unroll > 1 {
        s.split(rank - 1, unroll, false);
    }
    for _ in 1..rank {
        s.merge(0);
    }
    let mut axes = vec![(0, "BIDx")];
    if unroll > 1 {
        axes.push((1, "Unroll"));
    }
    axes.push((axes.len(), "TIDx"));
    if v > 1 {
        axes.push((axes.len(), "Vectorize"));
    }
    s.parallelize(&axes);
}
