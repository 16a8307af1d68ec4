//! The lowering pipeline: scheduled fusion → kernel IR → CUDA.
//!
//! [`PIPELINE`] lists every pass in order; each pass is a module whose doc comment says what it
//! requires, what it guarantees and what it emits. The kernel IR is printed after each pass.
//! A pass whose `applies` is false for the fusion (the TMA passes without copies, stores or
//! circular buffers; `persistent`, `mma`, `tile_values`, `welford`, `online_logsumexp` without their schedule statements;
//! `row_math` without a row value broadcast into an exponential or a division, or a division
//! by a scalar; `index_float` without an `iota` and an integer converted to f32; `view_vectors`
//! without a vectorized axis and a view that moves indices) is skipped and
//! not dumped; a pass returns whether it changed the kernel
//! ([`Change`]), and the dump of one that did not is the previous one's text.
//!
//! The passes share two kinds of facts, kept apart as Cranelift keeps its analyses apart from
//! the IR: the pass context [`Ctx`] ([`context`]: options, the loop-key analysis, read lists,
//! the tensors' layout, names), and what one pass hands to later ones: each such pass returns
//! a typed result ([`PipelinePlan`], [`reduction::Accumulators`], [`online_softmax::TileLoops`],
//! run-time constraints), which the driver keeps in a [`Handoff`] and [`PIPELINE`] hands to the
//! passes that read it, so who writes and who reads each is written there. This module is the
//! registry only: the passes import the context from [`context`], never from here.
//!
//! Lowering stays near-linear in the program's size: no pass searches the whole kernel per
//! statement (`reduction` finds every reduction's loop in one walk, `loop_nest` keeps the bit
//! sets of the reductions around each tensor and the loop tree's open-loop search between
//! calls), and maps keyed by compiler ids hash with FxHash, maps keyed by user names with the
//! seeded foldhash.

pub mod allocation;
pub mod causal_tiles;
pub mod context;
pub mod distributed_bias;
pub mod document_tiles;
pub mod fma_exp2;
pub mod grid;
pub mod index_float;
pub mod indexing;
pub mod longest_first;
pub mod loop_nest;
pub mod mask_list;
pub mod merged_scales;
pub mod mma;
pub mod online_logsumexp;
pub mod online_softmax;
pub mod persistent;
pub mod predicate;
pub mod probe;
pub mod reduction;
pub mod row_math;
pub mod scaled_max;
pub mod simplify;
pub mod specialize;
pub mod sync;
pub mod tile_values;
pub mod tma;
pub mod view_vectors;
pub mod welford;

use crate::diag::Diagnostic;
use crate::kir::Kernel;

pub use context::{
    ceil_div, loop_value, mul, split_extent, Change, Ctx, KeyNode, Keys, LoopEnv, LoopKey,
    PassOptions,
};
pub use tma::PipelinePlan;

pub struct Pass {
    pub name: &'static str,
    pub summary: &'static str,
    /// Runs the pass: hands it what it reads of the [`Handoff`], keeps what it returns for the
    /// passes after it, and says whether it changed the kernel.
    pub run: fn(&mut Ctx, &mut Handoff, &mut Kernel) -> Result<Change, Diagnostic>,
    /// Whether the pass runs for this fusion (passes for features a fusion does not use are
    /// skipped and not dumped).
    pub applies: fn(&Ctx) -> bool,
    /// The pass rewrites values inside statements and nothing else, so its dump has the same
    /// lines in the same order (`specialize`): the CUDA line map blames a line it changed on
    /// the pass that wrote the statement.
    pub in_place: bool,
}

fn always(_: &Ctx) -> bool {
    true
}

/// What passes hand to later ones, kept by the driver between passes: each field is a typed
/// result of the passes named, read by the passes named (the filetests run the passes before
/// the one they test for these, then replace the kernel with their own text).
#[derive(Default)]
pub struct Handoff {
    /// Computed by `tma` ([`tma::pipeline_plan`]), completed by `allocation`
    /// ([`PipelinePlan::stage_elems`]), read by `tma_issue`, `circular_buffer`, `sync`, `mma`
    /// and the pipeline view; empty when `tma` does not run.
    pub plan: PipelinePlan,
    /// The loop over tiles of each online softmax: made by `loop_nest`, read by
    /// `online_softmax` and `mma` (`overlap=products`).
    pub tile_loops: online_softmax::TileLoops,
    /// The key-tile loops bounded under a causal mask: made by `mask_bounds`, read by
    /// `mask_tiles` and `longest_first`.
    pub causal_tiles: causal_tiles::CausalTiles,
    /// The key-tile loop over a list whose first iterations are the wholly kept tiles: made by
    /// `mask_list`, read by `mask_tiles`.
    pub listed_tiles: causal_tiles::CausalTiles,
    /// The tensor of each reduction accumulator: made by `reduction`, read by
    /// `online_softmax`, `allocation` and `mma` (errors about an accumulator point at its
    /// reduction).
    pub accumulators: reduction::Accumulators,
    /// Conditions on the sizes the runner checks before launch: from `loop_nest` (clusters),
    /// `document_tiles` and `mask_list` (the list's length), `tma` (tensor-map rows) and `predicate` (aligned
    /// vectors), in that order.
    pub constraints: Vec<crate::plan::Constraint>,
}

/// Every pass, in the order it runs.
pub const PIPELINE: &[Pass] = &[
    Pass {
        name: "loop_nest",
        summary: "loop nests from inlining positions",
        run: |cx, h, k| {
            let (tile_loops, constraints) = loop_nest::run(cx, k)?;
            h.tile_loops = tile_loops;
            h.constraints.extend(constraints);
            Ok(Change::Changed)
        },
        applies: always,
        in_place: false,
    },
    Pass {
        name: "mask_bounds",
        summary: "a causally masked key-tile loop stopped after the query tile's diagonal",
        run: |cx, h, k| {
            let (change, tiles) = causal_tiles::bound(cx, &h.tile_loops, k)?;
            h.causal_tiles = tiles;
            Ok(change)
        },
        applies: causal_tiles::used,
        in_place: false,
    },
    Pass {
        name: "document_tiles",
        summary: "a document-masked key-tile loop visits only the tiles whose ids meet the query tile's",
        run: |cx, h, k| {
            let (change, constraints) = document_tiles::run(cx, &h.tile_loops, k)?;
            h.constraints.extend(constraints);
            Ok(change)
        },
        applies: document_tiles::used,
        in_place: false,
    },
    Pass {
        name: "mask_list",
        summary: "a key-tile loop masked on indices visits only the tiles where the mask may keep a pair",
        run: |cx, h, k| {
            let (change, constraints, tiles) = mask_list::run(cx, &h.tile_loops, k)?;
            h.constraints.extend(constraints);
            h.listed_tiles = tiles;
            Ok(change)
        },
        applies: mask_list::used,
        in_place: false,
    },
    Pass {
        name: "persistent",
        summary: "a persistent grid's loop over its tiles, in a grouped raster",
        run: |cx, _, k| persistent::run(cx, k),
        applies: persistent::used,
        in_place: false,
    },
    Pass {
        name: "tma",
        summary: "TMA boxes, tensor maps and mbarriers (checks the TMA rules)",
        run: |cx, h, k| {
            let (plan, constraints) = tma::run_plan(cx, k)?;
            h.plan = plan;
            h.constraints.extend(constraints);
            Ok(Change::Changed)
        },
        applies: tma::used,
        in_place: false,
    },
    Pass {
        name: "reduction",
        summary: "accumulators, block reductions, reduction writes",
        run: |cx, h, k| {
            let (accumulators, change) = reduction::run(cx, k)?;
            h.accumulators = accumulators;
            Ok(change)
        },
        applies: always,
        in_place: false,
    },
    Pass {
        name: "welford",
        summary: "variances in one pass: Welford's statistics per thread, Chan's combine",
        run: |cx, h, k| welford::run(cx, &h.accumulators, k),
        applies: welford::used,
        in_place: false,
    },
    Pass {
        name: "online_logsumexp",
        summary: "log-sum-exps in one pass: a running maximum and rescaled sum per thread",
        run: |cx, h, k| online_logsumexp::run(cx, &h.accumulators, k),
        applies: online_logsumexp::used,
        in_place: false,
    },
    Pass {
        name: "online_softmax",
        summary: "running maximum and sum, rescale of the accumulator, division after the loop",
        run: |cx, h, k| online_softmax::run(cx, &h.tile_loops, &h.accumulators, k),
        applies: online_softmax::used,
        in_place: false,
    },
    Pass {
        name: "allocation",
        summary: "register and shared-memory allocations",
        run: |cx, h, k| allocation::run(cx, &h.accumulators, &mut h.plan, k),
        applies: always,
        in_place: false,
    },
    Pass {
        name: "row_math",
        summary: "exp(a - broadcast(m)) in base 2, a / broadcast(s) as a * (1 / s): once per row",
        run: |cx, _, k| row_math::run(cx, k),
        applies: row_math::used,
        in_place: false,
    },
    Pass {
        name: "indexing",
        summary: "index expressions for every access",
        run: |cx, _, k| indexing::run(cx, k),
        applies: always,
        in_place: false,
    },
    Pass {
        name: "tma_issue",
        summary: "one TMA or bulk copy per box",
        run: |cx, h, k| tma::run_issue(cx, &h.plan, k),
        applies: tma::used,
        in_place: false,
    },
    Pass {
        name: "predicate",
        summary: "bounds and thread predicates, vector tails",
        run: |cx, h, k| {
            h.constraints.extend(predicate::run(cx, k)?);
            Ok(Change::Changed)
        },
        applies: always,
        in_place: false,
    },
    Pass {
        name: "circular_buffer",
        summary: "mbarrier pipelines: prologue, main, epilogue; init and inval",
        run: |cx, h, k| tma::run_circular(cx, &h.plan, k),
        applies: tma::used,
        in_place: false,
    },
    Pass {
        name: "sync",
        summary: "block barriers for shared memory (RAW and WAR)",
        run: |cx, h, k| sync::run(cx, &h.plan, k),
        applies: always,
        in_place: false,
    },
    Pass {
        name: "mma",
        summary: "tensor-core tiles: wgmma on descriptors, accumulator fragments",
        run: |cx, h, k| mma::run(cx, &h.plan, &h.accumulators, &h.tile_loops, k),
        applies: mma::used,
        in_place: false,
    },
    Pass {
        name: "merged_scales",
        summary: "two multiplications of the scores by uniform scalars made one",
        run: |cx, _, k| merged_scales::run(cx, k),
        applies: merged_scales::used,
        in_place: false,
    },
    Pass {
        name: "scaled_max",
        summary: "a row maximum of scaled scores taken before the scale, the scale in the exponential's FMA",
        run: |cx, _, k| scaled_max::run(cx, k),
        applies: scaled_max::used,
        in_place: false,
    },
    Pass {
        name: "fma_exp2",
        summary: "a quarter of the exponentials on the FMA pipe where the scores take a MUFU op",
        run: |cx, _, k| fma_exp2::run(cx, k),
        applies: fma_exp2::used,
        in_place: false,
    },
    Pass {
        name: "specialize",
        summary: "size symbols replaced by the values the kernel is specialised to",
        run: |cx, _, k| specialize::run(cx, k),
        applies: specialize::used,
        in_place: true,
    },
    Pass {
        name: "simplify",
        summary: "index arithmetic simplification",
        run: |_, _, k| Ok(simplify::run(k)),
        applies: always,
        in_place: false,
    },
    Pass {
        name: "view_vectors",
        summary: "a view's reads in a vectorized loop as one aligned vector load per operand",
        run: |cx, _, k| view_vectors::run(cx, k),
        applies: view_vectors::used,
        in_place: false,
    },
    Pass {
        name: "mask_tiles",
        summary: "the mask only on the key tiles it does not keep whole (a causal diagonal, a listed mask's edges)",
        run: |_, h, k| {
            let causal = causal_tiles::split(&h.causal_tiles, k);
            let listed = causal_tiles::split(&h.listed_tiles, k);
            Ok(Change::from_changed(
                causal == Change::Changed || listed == Change::Changed,
            ))
        },
        applies: |cx| causal_tiles::used(cx) || mask_list::used(cx),
        in_place: false,
    },
    Pass {
        name: "longest_first",
        summary: "a causal attention's blocks take the longest query tiles first",
        run: |cx, h, k| Ok(longest_first::run(cx, &h.causal_tiles, k)),
        applies: causal_tiles::used,
        in_place: false,
    },
    Pass {
        name: "tile_values",
        summary: "a persistent kernel's tile indices computed once per tile",
        run: |cx, _, k| tile_values::run(cx, k),
        applies: tile_values::used,
        in_place: false,
    },
    Pass {
        name: "index_float",
        summary: "an index converted to f32 in an unrolled loop as a float base plus a constant",
        run: |cx, _, k| index_float::run(cx, k),
        applies: index_float::used,
        in_place: false,
    },
    Pass {
        name: "distributed_bias",
        summary: "a per-row factor times a converted index as one FMA per element",
        run: |cx, _, k| distributed_bias::run(cx, k),
        applies: distributed_bias::used,
        in_place: false,
    },
];
