//! The normalization scheduler: rows reduced and read again (softmax, RMSNorm, LayerNorm). One
//! block per row; the row is a persistent buffer, read from global memory once.
//!
//! In registers when it fits (examples/basics/softmax.hf): the row split into 16-byte vectors,
//! `k` of them per thread (`split(1, k, outer)`: ceilDiv(N, v k) threads), about 32 elements per
//! thread and at most 1024 threads, within the register file (each persistent buffer's
//! elements per thread, plus about 32 registers of the thread's own, times the threads, at most
//! 64 K registers). Else in shared memory (examples/basics/softmax_shared.hf): the inputs
//! cached there and every intermediate read more than once placed there, when the row's buffers
//! fit in a block's shared memory. Wider rows are streamed: every intermediate read more than
//! once is recomputed for each reader (`recompute`), so nothing of the row is kept and each
//! loop over it reads the inputs again (from L2 after the first loop, for a row just read).
//! A row kept in registers whose outputs are all rows reads its inputs with `l2=evict_last`
//! (the rule and its measurements: `auto/l2.rs`); shared and streamed rows keep plain loads.

use super::l2::{self, Form};
use super::text::ScheduleText;
use super::{dtype_names, AutoSchedule, Facts, RowPlacement, Scheduler};
use crate::fusion::{IterId, TensorId};
use crate::target;

/// Elements of the row each thread aims to hold.
const ELEMENTS_PER_THREAD: i64 = 32;
const MAX_THREADS: i64 = target::MAX_THREADS_PER_BLOCK;
/// Fewest threads along a row.
const MIN_THREADS: i64 = target::WARP_THREADS;
/// Registers a thread needs besides its persistent buffers.
const OWN_REGISTERS: i64 = target::NON_ACCUMULATOR_REGISTERS;
const MAX_REGISTERS: i64 = target::MAX_REGISTERS_PER_THREAD;
/// Registers in one SM's register file (one block per SM at the least).
const REGISTER_FILE: i64 = 65536;
/// Threads along a streamed row (measured on the H200 for softmax at 8192 x 16384 and
/// 32768 x 4096 bf16: 256 threads 433 / 496 us, 512 641 / 911, 1024 603 / 1389: a block walks
/// its row three times, each a serial chain of loads and a block reduction, so smaller
/// blocks, more of them per SM, keep more rows in flight).
const STREAM_THREADS: i64 = 256;

pub fn schedule(facts: &Facts, reference: TensorId, row: IterId) -> Result<AutoSchedule, String> {
    let f = facts.fusion;
    // The rows are rank 2 (the classifier's rule); the reference may be a row's value.
    let inputs = facts.full_inputs(2);
    let outputs = facts.full_outputs(2);
    let accessed: Vec<TensorId> = inputs.iter().chain(&outputs).copied().collect();
    let n = facts.extent(row);
    let n_or = facts.extent_or_default(row);
    let v = facts.vector_width(&accessed, n);
    let buffers = persistent_buffers(facts, row);
    // Bytes of persistent buffer per element of the row: the cached inputs and each
    // intermediate read twice.
    let bytes_per_element: i64 = inputs
        .iter()
        .chain(&buffers)
        .map(|&t| i64::from(f.tensors[t].dtype.size_bytes()))
        .sum::<i64>()
        .max(4);
    let row_text = format!(
        "rows of {} {}",
        super::reduction::extent_text(n),
        dtype_names(f, &accessed)
    );
    let r = Row {
        facts,
        reference,
        inputs,
        outputs,
        buffers,
        n_or,
        v,
        bytes_per_element,
        vectors: super::ceil_div(n_or, v),
        row_text,
    };

    let placement = facts.knobs.row;
    let in_registers = match placement {
        None | Some(RowPlacement::Registers) => {
            registers_plan(r.vectors, v, bytes_per_element, facts.knobs.per_thread)
        }
        Some(_) => None,
    };
    if placement == Some(RowPlacement::Registers) && in_registers.is_none() {
        return Err(format!(
            "the row ({}) does not fit in registers with {} vectors per thread",
            r.row_text,
            facts
                .knobs
                .per_thread
                .map_or("any number of".to_string(), |k| k.to_string())
        ));
    }
    if let Some((k, threads, registers)) = in_registers {
        return Ok(r.in_registers(k, threads, registers));
    }
    let shared = n_or.saturating_mul(bytes_per_element);
    let limit = target::SMEM_PER_BLOCK;
    if placement == Some(RowPlacement::Shared) && shared > limit {
        return Err(format!(
            "the row ({shared} bytes of persistent buffers) does not fit in shared memory ({limit} bytes)"
        ));
    }
    if shared <= limit && placement != Some(RowPlacement::Streamed) {
        return Ok(r.in_shared(shared));
    }
    Ok(r.streamed(shared))
}

/// A normalization's row: what each placement's schedule is written from.
struct Row<'a, 'f> {
    facts: &'a Facts<'f>,
    reference: TensorId,
    inputs: Vec<TensorId>,
    outputs: Vec<TensorId>,
    /// Intermediates read more than once along the row.
    buffers: Vec<TensorId>,
    /// The row's extent (a default where the sizes do not say).
    n_or: i64,
    /// Elements per vector access.
    v: i64,
    bytes_per_element: i64,
    vectors: i64,
    row_text: String,
}

impl Row<'_, '_> {
    /// One block per row, kept in registers: `k` vectors per thread.
    fn in_registers(&self, k: i64, threads: i64, registers: i64) -> AutoSchedule {
        let (facts, reference, v) = (self.facts, self.reference, self.v);
        let (inputs, outputs, row_text) = (&self.inputs, &self.outputs, &self.row_text);
        let policy = l2::policy(facts, Form::RowInRegisters, 2);
        let mut s = ScheduleText::new(facts.name(reference));
        s.caches(facts, inputs, outputs, &l2::cache_option(policy));
        s.comment(&format!(
        "One block per row, kept in registers: {v}-element vectors, {k} per thread, ceilDiv(N, {}) threads.",
        v * k
    ));
        // [rows, (k,) threads, (v)]
        let mut axes = vec![(0, "BIDx")];
        let threads_axis = if k > 1 { 2 } else { 1 };
        axes.push((threads_axis, "TIDx"));
        if v > 1 {
            s.split(1, v, false);
            axes.push((threads_axis + 1, "Vectorize"));
        }
        if k > 1 {
            s.split(1, k, true);
        }
        s.parallelize(&axes);
        s.propagate_and_inline();
        AutoSchedule {
        scheduler: Scheduler::Normalization,
        text: s.finish(),
        reason: format!(
            "normalization of {row_text} {}: the row persistent in registers, {v}-element vectors, {} elements per thread, {threads} threads per row (about {registers} registers a thread){}",
            facts.sizes.describe(),
            v * k,
            l2::reason_clause(facts, Form::RowInRegisters, policy),
        ),
    }
    }

    /// One block per row, kept in shared memory (`shared` bytes).
    fn in_shared(&self, shared: i64) -> AutoSchedule {
        let (facts, reference, n_or) = (self.facts, self.reference, self.n_or);
        let (inputs, buffers, row_text) = (&self.inputs, &self.buffers, &self.row_text);
        let most = facts
            .knobs
            .threads
            .unwrap_or(MAX_THREADS)
            .clamp(MIN_THREADS, MAX_THREADS);
        let per_thread = super::ceil_div(n_or, most).max(1);
        let threads = super::ceil_div(n_or, per_thread);
        let policy = l2::policy(facts, Form::RowElsewhere, 2);
        let mut s = ScheduleText::new(facts.name(reference));
        s.caches(
            facts,
            inputs,
            &[],
            &l2::with_option("memory=shared", policy),
        );
        s.comment(&format!(
        "One block per row, kept in shared memory ({shared} bytes): {per_thread} elements per thread, ceilDiv(N, {per_thread}) threads."
    ));
        s.split(1, per_thread, true);
        s.parallelize(&[(0, "BIDx"), (2, "TIDx")]);
        s.line(format!("propagate({})", facts.name(reference)));
        for &b in buffers {
            s.line(format!("{}.set_memory(shared)", facts.name(b)));
        }
        s.line("inline_most()".to_string());
        AutoSchedule {
        scheduler: Scheduler::Normalization,
        text: s.finish(),
        reason: format!(
            "normalization of {row_text} {}: the row too wide for registers, persistent in shared memory ({shared} bytes per block), {threads} threads per row{}",
            facts.sizes.describe(),
            l2::reason_clause(facts, Form::RowElsewhere, policy),
        ),
    }
    }

    /// One block per row, streamed: the row (`shared` bytes of persistent buffers) is too wide
    /// to keep.
    fn streamed(&self, shared: i64) -> AutoSchedule {
        let (facts, reference, v) = (self.facts, self.reference, self.v);
        let (inputs, outputs, buffers) = (&self.inputs, &self.outputs, &self.buffers);
        let (f, vectors, limit) = (facts.fusion, self.vectors, target::SMEM_PER_BLOCK);
        let (row_text, bytes_per_element) = (&self.row_text, self.bytes_per_element);
        // Too wide to keep: stream it. Each intermediate read more than once is recomputed for each
        // reader, so every loop over the row reads the inputs again (from L2 after the first).
        let threads = match facts.knobs.threads {
            Some(t) => t.clamp(MIN_THREADS, MAX_THREADS),
            None => (vectors as u64)
                .next_power_of_two()
                .clamp(MIN_THREADS as u64, STREAM_THREADS as u64) as i64,
        };
        let policy = l2::policy(facts, Form::RowElsewhere, 2);
        let mut s = ScheduleText::new(facts.name(reference));
        s.caches(facts, inputs, outputs, &l2::cache_option(policy));
        s.comment(&format!(
            "One block per row, streamed: the row ({shared} bytes of persistent buffers) fits neither registers nor shared memory, so each loop over it reads the inputs again and recomputes what it needs; {threads} threads of {v}-element vectors."
        ));
        // An input read by more than one expression makes a cache with as many readers.
        let uses = f.use_index();
        for &i in inputs.iter().filter(|&&i| uses[i].len() > 1) {
            s.line(format!("{}.recompute()", facts.fresh(facts.name(i), "c")));
        }
        for &b in buffers {
            s.line(format!("{}.recompute()", facts.name(b)));
        }
        let mut axes = vec![(0, "BIDx"), (2, "TIDx")];
        if v > 1 {
            s.split(1, v, false);
            axes.push((3, "Vectorize"));
        }
        s.split(1, threads, false);
        s.parallelize(&axes);
        s.propagate_and_inline();
        AutoSchedule {
            scheduler: Scheduler::Normalization,
            text: s.finish(),
            reason: format!(
                "normalization of {row_text} {}: the row too wide to keep ({shared} bytes of persistent buffers per row, more than registers ({} elements per block) or shared memory ({limit} bytes) hold), streamed: each loop over the row reads the inputs again{}, {threads} threads per row{}",
                facts.sizes.describe(),
                largest_register_row(v, bytes_per_element),
                if buffers.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({} recomputed)",
                        buffers
                            .iter()
                            .map(|&b| format!("`{}`", facts.name(b)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
                l2::reason_clause(facts, Form::RowElsewhere, policy),
            ),
        }
    }
}

/// Vectors per thread, threads and registers per thread of a row of `vectors` vectors of `v`
/// elements in registers, if it fits.
/// `per_thread` (the tuner's) fixes the vectors per thread: None when the row then needs more
/// than a block's threads or the registers.
fn registers_plan(
    vectors: i64,
    v: i64,
    bytes_per_element: i64,
    per_thread: Option<i64>,
) -> Option<(i64, i64, i64)> {
    if let Some(k) = per_thread {
        let k = k.max(1);
        let threads = super::ceil_div(vectors, k);
        let registers = super::ceil_div(v * k * bytes_per_element, 4) + OWN_REGISTERS;
        let fits = registers <= MAX_REGISTERS
            && threads <= MAX_THREADS
            && threads * registers <= REGISTER_FILE;
        return fits.then_some((k, threads, registers));
    }
    let mut k = (ELEMENTS_PER_THREAD / v).max(1);
    // Short rows: fewer vectors per thread, so a row keeps a warp busy.
    while k > 1 && super::ceil_div(vectors, k) < MIN_THREADS {
        k /= 2;
    }
    loop {
        let threads = super::ceil_div(vectors, k);
        let registers = super::ceil_div(v * k * bytes_per_element, 4) + OWN_REGISTERS;
        if registers > MAX_REGISTERS {
            return None;
        }
        if threads <= MAX_THREADS && threads * registers <= REGISTER_FILE {
            return Some((k, threads, registers));
        }
        k *= 2;
    }
}

/// The widest row [`registers_plan`] takes, for the message of a row it does not.
fn largest_register_row(v: i64, bytes_per_element: i64) -> i64 {
    let mut best = 0;
    let mut vectors = 1i64;
    while vectors <= 1 << 20 {
        if registers_plan(vectors, v, bytes_per_element, None).is_some() {
            best = vectors * v;
        }
        vectors *= 2;
    }
    best
}

/// The computed tensors over the row that more than one expression reads: what a row kept in
/// shared memory keeps there too (the inputs are cached separately).
fn persistent_buffers(facts: &Facts, row: IterId) -> Vec<TensorId> {
    let f = facts.fusion;
    let class = f.class_of(row);
    let uses = f.use_index();
    f.tensor_ids()
        .filter(|&t| {
            let tensor = &f.tensors[t];
            !tensor.is_input
                && !tensor.is_output
                && uses[t].len() > 1
                && f.logical(t).iter().any(|&a| {
                    f.class_of(a) == class && f.ids[a].kind == crate::fusion::IterKind::Iteration
                })
        })
        .collect()
}
