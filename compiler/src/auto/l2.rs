//! The L2 policy of the inputs an automatic schedule caches (`cache_after(x, l2=evict_last)`),
//! decided in one place from the fusion's facts, with the measurements that justify it.
//!
//! Takes the schedule's [`Facts`] and the [`Form`] of kernel its scheduler writes. Guarantees
//! `evict_last` only where the rule below holds or the tuner's [`super::Knobs::l2`] asks for
//! it, plain loads everywhere else (only the pointwise and normalization schedulers ask).
//! Emits the policy, the `cache_after` option that writes it and the clause the
//! schedule's reason sentence ends with.
//!
//! **The rule**: a kernel that streams its inputs through registers reads the inputs it caches
//! with `l2=evict_last`: a pointwise map or a row kept in registers, every output full-rank,
//! every input element read once at its own index (no view moves or permutes indices) and every
//! broadcast input a scalar or of one axis.
//!
//! **Measured** on the H200, plain loads against `evict_last` at the bench sizes
//! (docs/benchmarks.md, "Inputs read with an L2 evict_last policy (run E, `runE.sh`)", in the
//! fourteenth session's section):
//! - rows in registers, every output a row: add_rmsnorm -3.7%, rmsnorm -3.7%,
//!   layernorm_two_pass -3.4%, causal_softmax -3.1%, softmax_scale -0.5%. The automatic
//!   schedule of fusions/layernorm.hf is layernorm_two_pass's (the scheduler never writes
//!   `welford(v)`, whose one pass measured +0.3%).
//! - a row's value among the outputs: quantize_fp8 (its per-row scale) +1.3%,
//!   cross_entropy_labels (its per-row loss; a streamed row) 0: plain loads.
//! - pointwise: gelu_exact (with a bias of one axis broadcast over the rows) -6.1%, swiglu
//!   -0.8%, dropout_residual -0.4%; rotary, whose rotate_half reads its input again at moved
//!   columns, +0.6%: plain loads.
//! - transpose_bf16 +2.1%: the transpose scheduler keeps plain loads.
//!
//! Not measured, so plain loads: rows in shared memory or streamed, reductions, products,
//! attention, and broadcast inputs of more than one axis (a rotary's cos and sin tables over
//! batch and heads, which every block re-reads from L2, where the rows' evict_last lines would
//! crowd them out). A segment of a split fusion (docs/segmentation.md) is scheduled as any
//! fusion, so the rule takes the pointwise segments of auto/col_norm.hf,
//! auto/normalize_by_total.hf and ops/quantize_fp8_tensor.hf and the row segment of
//! auto/product_softmax.hf (not measured as segments).

use super::Facts;
use crate::fusion::{L2Policy, Op};

/// The kernel a scheduler writes, as far as the policy depends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Form {
    /// The pointwise scheduler's: every element read and written once.
    Pointwise,
    /// A normalization's row read once into registers.
    RowInRegisters,
    /// A normalization's row kept in shared memory or streamed (not measured).
    RowElsewhere,
}

/// Most axes of a broadcast input next to `evict_last` loads: a bias or a per-row scale
/// (gelu_exact's bias, measured), not a table every block re-reads (not measured).
const MAX_BROADCAST_AXES: usize = 1;

/// The policy of the inputs a schedule of `form` caches, in a fusion whose full-rank tensors
/// have `rank` axes: the tuner's knob when set, else the rule of the module doc.
pub(super) fn policy(facts: &Facts, form: Form, rank: usize) -> L2Policy {
    if let Some(p) = facts.knobs.l2 {
        return p;
    }
    let measured_form = matches!(form, Form::Pointwise | Form::RowInRegisters);
    if measured_form && streams(facts, rank) {
        L2Policy::EvictLast
    } else {
        L2Policy::Normal
    }
}

/// Whether the fusion streams its inputs: every output of `rank` axes, no view that moves or
/// permutes indices (each input element read once, at its own index), every broadcast input a
/// scalar or of at most [`MAX_BROADCAST_AXES`] axes.
fn streams(facts: &Facts, rank: usize) -> bool {
    let f = facts.fusion;
    let outputs_full = f.outputs.iter().all(|&t| f.rank(t) == rank);
    let no_views = !f
        .exprs
        .iter()
        .any(|e| e.op.moves_indices() || matches!(e.op, Op::Permute { .. }));
    let small_broadcasts = f.inputs.iter().all(|&t| {
        let r = f.rank(t);
        r == rank || r <= MAX_BROADCAST_AXES
    });
    outputs_full && no_views && small_broadcasts
}

/// The `cache_after` option that writes `policy` (empty for plain loads).
pub(super) fn cache_option(policy: L2Policy) -> String {
    match policy {
        L2Policy::Normal => String::new(),
        p => format!("l2={}", p.name()),
    }
}

/// `options` and the option of `policy`, comma-separated (`memory=shared, l2=evict_last`).
pub(super) fn with_option(options: &str, policy: L2Policy) -> String {
    let l2 = cache_option(policy);
    match (options.is_empty(), l2.is_empty()) {
        (_, true) => options.to_string(),
        (true, false) => l2,
        (false, false) => format!("{options}, {l2}"),
    }
}

/// The clause a schedule's reason ends with: why its inputs are read with `policy` (empty for
/// plain loads).
pub(super) fn reason_clause(facts: &Facts, form: Form, policy: L2Policy) -> String {
    if policy == L2Policy::Normal {
        return String::new();
    }
    let why = match (facts.knobs.l2, form) {
        (None, Form::RowInRegisters) => {
            "keeps the row's lines in L2: 3-4% faster on the H200 for RMSNorm, LayerNorm and causal softmax rows"
        }
        (None, Form::Pointwise) => {
            "keeps their lines in L2: 0.4-6% faster on the H200 for streaming maps"
        }
        // The rule takes no other form: the tuner's knob asked for it.
        _ => "the tuner's choice",
    };
    format!(", inputs read with l2={} ({why})", policy.name())
}
