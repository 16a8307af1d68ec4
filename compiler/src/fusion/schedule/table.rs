//! The schedule primitives as data: one [`PRIMITIVES`] entry per primitive says its name, how it
//! is written (a tensor method, a statement or a binding: the variant of its [`Apply`]), its
//! parameters with their kinds and defaults, its documentation and the function that applies
//! it. The interpreter ([`super::apply_all`]) dispatches through it, [`super::args`] checks
//! every statement's arguments against it (arity, names, kinds, keyword values) before the
//! apply function runs, and the playground's reference (`web/src/reference.rs`, and from it
//! `docs/language.md` and the editor's completion) lists it.

use super::args::Args;
pub use super::params::{either, ArgKind, IfAbsent, Nested, Param, Passing};
use super::params::{named, opt, pos};
use super::{
    grid, inlining, loops, memory, online, parallel, pipeline, recompute, welford, SResult,
};
use crate::diag::{Diagnostic, Span};
use crate::fusion::{Fusion, TensorId};

/// A primitive's documentation. The playground's page runs the compiler in wasm32 but shows the
/// reference from `web/reference.json` (generated from this table by native builds), so wasm32
/// builds leave the text out of the binary: it would only add to the page's cold load.
#[cfg(not(target_arch = "wasm32"))]
macro_rules! doc {
    ($text:literal) => {
        $text
    };
}
#[cfg(target_arch = "wasm32")]
macro_rules! doc {
    ($text:literal) => {
        ""
    };
}

/// How a primitive is written, and the function that applies it to the fusion once its
/// arguments are checked against its parameters.
#[derive(Clone, Copy)]
pub(super) enum Apply {
    /// `t.split(1, 128)`: acts on tensor `t` (a tensor of the fusion, already looked up).
    Method(fn(&mut Fusion, TensorId, &Args) -> SResult<()>),
    /// `propagate(t)`: acts on the whole fusion.
    Statement(fn(&mut Fusion, &Args) -> SResult<()>),
    /// `x_c = cache_after(x)`: makes the tensor the statement names (not yet defined).
    Binding(fn(&mut Fusion, &str, &Args) -> SResult<()>),
}

/// How a primitive is written (the variants of [`Apply`] without their functions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    Method,
    Statement,
    Binding,
}

impl Form {
    /// The primitives of this form, as the unknown-name message calls them.
    pub fn noun(self) -> &'static str {
        match self {
            Form::Method => "schedule method",
            Form::Statement | Form::Binding => "schedule function",
        }
    }
}

/// A schedule primitive.
#[derive(Clone, Copy)]
pub struct Primitive {
    pub name: &'static str,
    /// How it is written, as the reference shows it.
    pub written: &'static str,
    pub params: &'static [Param],
    /// What it does, for the reference (empty in wasm32 builds, see `doc!`).
    pub doc: &'static str,
    pub(super) apply: Apply,
    /// Whether a failed application leaves the fusion untouched (every check comes before the
    /// first change), so the interpreter need not keep a copy to restore.
    pub checks_first: bool,
    /// Whether a method may act on a fusion input (`set_memory`); the others need a computed
    /// tensor.
    pub on_inputs: bool,
}

impl Primitive {
    pub fn form(&self) -> Form {
        match self.apply {
            Apply::Method(_) => Form::Method,
            Apply::Statement(_) => Form::Statement,
            Apply::Binding(_) => Form::Binding,
        }
    }
    /// The nested calls its arguments may be (`warp_specialized` of `circular_buffer`).
    pub fn nested(&self) -> impl Iterator<Item = &'static Nested> + '_ {
        self.params.iter().filter_map(|p| match p.kind {
            ArgKind::Call(n) => Some(n),
            _ => None,
        })
    }
}

pub const WARP_SPECIALIZED: Nested = Nested {
    name: "warp_specialized",
    written: "warp_specialized(TIDx|TIDy|TIDz, registers=[producer, consumer], warp=N, turns=products)",
    params: &[
        pos("on", ArgKind::Parallel),
        named(
            "registers",
            ArgKind::IntPair("producer", "consumer"),
            IfAbsent::Off,
        ),
        named("warp", ArgKind::Int, IfAbsent::Is("0")),
        named("turns", ArgKind::Keyword(&["products"]), IfAbsent::Off),
    ],
    doc: doc!("An argument of circular_buffer: the producer warp group is added along that thread dim; `registers` rebalances registers with setmaxnreg; caches with different `warp` are separate producer roles. Loads inside the consumers' loop over that dim make its thread groups take turns with whole stages (ping-pong: examples/matmul/step14_ping_pong.hf). With turns=products, thread groups along that dim that share every stage take turns issuing their tensor-core products instead (named barriers), so one group's softmax runs while the other's products do (examples/attention/online_wgmma_pingpong.hf). Caches buffered over different loops (a persistent kernel's tile loop and the key-tile loop inside it) may each be warp-specialized on the same dim: one producer warp group, each loop's loads on warps of their own (examples/attention/online_wgmma_persistent.hf)."),
};

/// The named options of `cache_after` and `cache_before` (each rejects those of the other
/// with the reason).
const CACHE_OPTIONS: [Param; 7] = [
    named("memory", ArgKind::Memory, IfAbsent::Is("local")),
    named("load", ArgKind::Load, IfAbsent::Is("plain")),
    named("store", ArgKind::Store, IfAbsent::Is("plain")),
    named("fence", ArgKind::Fence, IfAbsent::Is("analysis")),
    named("swizzle", ArgKind::Swizzle, IfAbsent::Is("none")),
    named("row_pad", ArgKind::Int, IfAbsent::Is("0")),
    named(
        "l2",
        ArgKind::Keyword(&["normal", "evict_last", "evict_first"]),
        IfAbsent::Is("normal"),
    ),
];

const fn cache_params() -> [Param; 8] {
    let o = CACHE_OPTIONS;
    [
        pos("x", ArgKind::Tensor),
        o[0],
        o[1],
        o[2],
        o[3],
        o[4],
        o[5],
        o[6],
    ]
}

/// Every schedule primitive, in the order the reference lists them.
pub const PRIMITIVES: &[Primitive] = &[
    Primitive {
        name: "cache_after",
        written: "x_c = cache_after(x, memory=local|shared|global, load=plain|tma|bulk, swizzle=none|32|64|128, row_pad=0, l2=normal|evict_last|evict_first)",
        params: &cache_params(),
        doc: doc!("A copy of input x that its consumers read instead. load=tma fills a shared cache with TMA box copies (the box: the cache's Bulk axes); load=bulk with 1-D bulk copies. row_pad=n (a plain shared cache) puts n elements after each row of its innermost axis, so threads reading down a column hit different banks (a transpose's tile: examples/ops/transpose.hf). l2=evict_last (plain loads of a fusion input) asks L2 to keep the lines read and evict others first (examples/fusions/add_rmsnorm.hf)."),
        apply: Apply::Binding(memory::cache_after),
        checks_first: false,
        on_inputs: true,
    },
    Primitive {
        name: "cache_before",
        written: "y_c = cache_before(y, memory=..., store=plain|tma, fence=analysis|per_store|issuing_warp, swizzle=...)",
        params: &cache_params(),
        doc: doc!("y is computed into y_c, which is then copied out to y. store=tma writes a shared cache with TMA stores (the box: y's Bulk axes). With a register cache (the default memory), the fusion's other readers of an output y read y_c, where it is computed, instead of rereading y from global memory (examples/fusions/quantize_fp8.hf: the scale output divides its row)."),
        apply: Apply::Binding(memory::cache_before),
        checks_first: false,
        on_inputs: true,
    },
    Primitive {
        name: "split",
        written: "t.split(axis, factor[, inner|outer])",
        params: &[
            pos("axis", ArgKind::Axis),
            pos("factor", ArgKind::Int),
            opt("part", ArgKind::Keyword(&["inner", "outer"]), IfAbsent::Is("inner")),
        ],
        doc: doc!("Splits a loop axis in two: the inner part has extent `factor` (inner, the default), or the outer part does (outer). The axes after it move one to the right."),
        apply: Apply::Method(loops::split),
        checks_first: true,
        on_inputs: false,
    },
    Primitive {
        name: "merge",
        written: "t.merge(a[, b])",
        params: &[
            pos("a", ArgKind::Axis),
            opt("b", ArgKind::Axis, IfAbsent::Computed("a + 1")),
        ],
        doc: doc!("Merges loop axes a and b (default a + 1) into one axis at a's position."),
        apply: Apply::Method(loops::merge),
        checks_first: true,
        on_inputs: false,
    },
    Primitive {
        name: "reorder",
        written: "t.reorder(p0, p1, ...)",
        params: &[opt("old_positions", ArgKind::Axis, IfAbsent::Many)],
        doc: doc!("Reorders the loop axes: the new order as old positions, a permutation of all of them."),
        apply: Apply::Method(loops::reorder),
        checks_first: true,
        on_inputs: false,
    },
    Primitive {
        name: "parallelize",
        written: "t.parallelize(axis, TIDx)",
        params: &[pos("axis", ArgKind::Axis), pos("type", ArgKind::Parallel)],
        doc: doc!("Binds a loop axis to a parallel type (a block or thread index, vector lanes, unrolling, a TMA box)."),
        apply: Apply::Method(parallel::parallelize),
        checks_first: true,
        on_inputs: false,
    },
    Primitive {
        name: "vectorize",
        written: "t.vectorize(axis)",
        params: &[pos("axis", ArgKind::Axis)],
        doc: doc!("Same as parallelize(axis, Vectorize): the axis (constant extent, at most 16 bytes) becomes one vector access."),
        apply: Apply::Method(parallel::vectorize),
        checks_first: true,
        on_inputs: false,
    },
    Primitive {
        name: "set_memory",
        written: "t.set_memory(local|shared|global)",
        params: &[pos("memory", ArgKind::Memory)],
        doc: doc!("Where an intermediate tensor lives."),
        apply: Apply::Method(memory::set_memory),
        checks_first: true,
        on_inputs: true,
    },
    Primitive {
        name: "inline_at",
        written: "t.inline_at(pos)",
        params: &[pos("pos", ArgKind::Int)],
        doc: doc!("Computes t inside the first `pos` loops of its consumers (0: its own loop nest)."),
        apply: Apply::Method(inlining::inline_at),
        checks_first: true,
        on_inputs: false,
    },
    Primitive {
        name: "compute_at",
        written: "p.compute_at(consumer, pos)",
        params: &[pos("consumer", ArgKind::Tensor), pos("pos", ArgKind::Int)],
        doc: doc!("Computes p inside the first `pos` loops of `consumer`."),
        apply: Apply::Method(inlining::compute_at),
        checks_first: true,
        on_inputs: false,
    },
    Primitive {
        name: "recompute",
        written: "t.recompute() | t.recompute(from=p)",
        params: &[named("from", ArgKind::Tensor, IfAbsent::Off)],
        doc: doc!("Gives each consumer of t after the first its own copy of t's computation (back to fusion inputs and reductions: t_r2, t_r3, ...), so each copy inlines into its consumer's loops and no row is kept between them: a row read by two reductions and an output is read again from memory (L2) instead of held in registers. With from=p the copies stop at p, a tensor t is computed from, which is kept instead (a bf16 cache of the row, read from memory once). Before any transform of the chain."),
        apply: Apply::Method(recompute::recompute),
        checks_first: true,
        on_inputs: false,
    },
    Primitive {
        name: "rfactor",
        written: "t.rfactor(axis, ...)",
        params: &[
            pos("axis", ArgKind::Axis),
            opt("more_axes", ArgKind::Axis, IfAbsent::Many),
        ],
        doc: doc!("Splits reduction t in two: t_rf reduces the listed loop axes (its other reduction axes hold partial results), then t reduces t_rf."),
        apply: Apply::Method(loops::rfactor),
        checks_first: false,
        on_inputs: false,
    },
    Primitive {
        name: "circular_buffer",
        written: "t.circular_buffer(stages, prefetch=stages-1, war=sync|mbarrier) | t.circular_buffer(stages, warp_specialized(TIDy, registers=[40, 232], warp=0))",
        params: &[
            pos("stages", ArgKind::Int),
            Param {
                name: "prefetch",
                kind: ArgKind::Int,
                passing: Passing::Either,
                default: IfAbsent::Computed("stages - 1"),
            },
            opt("warp_specialized", ArgKind::Call(&WARP_SPECIALIZED), IfAbsent::Off),
            named("war", ArgKind::War, IfAbsent::Is("sync")),
        ],
        doc: doc!("Pipelines the serial loop around a cache's load over `stages` slots, `prefetch` loads ahead. With warp_specialized, a 128-thread producer warp group issues the loads."),
        apply: Apply::Method(pipeline::circular_buffer),
        checks_first: false,
        on_inputs: false,
    },
    Primitive {
        name: "propagate",
        written: "propagate(t)",
        params: &[pos("reference", ArgKind::Tensor)],
        doc: doc!("Replays t's splits, merges, reorders and parallel types on every other computed tensor."),
        apply: Apply::Statement(loops::propagate),
        checks_first: true,
        on_inputs: false,
    },
    Primitive {
        name: "inline_most",
        written: "inline_most() | inline_most(t, ...)",
        params: &[opt("tensors", ArgKind::Tensor, IfAbsent::Many)],
        doc: doc!("Inlines every tensor (or those listed) as deep into its consumers' loops as is legal."),
        apply: Apply::Statement(inlining::inline_most),
        checks_first: true,
        on_inputs: false,
    },
    Primitive {
        name: "persistent",
        written: "persistent(BIDy, 16)",
        params: &[
            pos("along", ArgKind::Parallel),
            pos("group", ArgKind::Int),
            opt("split", ArgKind::Keyword(&["stream_k"]), IfAbsent::Off),
        ],
        doc: doc!("Makes the kernel persistent: the grid-bound axes span the tiles, and a one-dimensional grid of as many CTAs as are resident (the fewest for as few rounds) walks them, CTA b taking tiles b, b + gridDim.x, ...; a grouped raster maps each to its indices: groups of 16 tiles along BIDy, stepping along BIDy first (examples/matmul/step15_persistent_raster.hf). With cluster(...), tiles of clusters. With stream_k: whole rounds, then the k steps of the tiles left split over every CTA (docs/variants/s15_stream_k.hf)."),
        apply: Apply::Statement(grid::persistent),
        checks_first: true,
        on_inputs: false,
    },
    Primitive {
        name: "cluster",
        written: "cluster(BIDy, 2)",
        params: &[pos("on", ArgKind::Parallel), pos("ctas", ArgKind::Int)],
        doc: doc!("Launches the kernel in clusters of 2..8 consecutive CTAs along a grid axis; a load=tma box that every CTA of a cluster loads alike is multicast, each CTA copying its slice of it into all of them (its pipeline needs empty mbarriers)."),
        apply: Apply::Statement(grid::cluster),
        checks_first: true,
        on_inputs: false,
    },
    Primitive {
        name: "online_softmax",
        written: "online_softmax(o, overlap=products)",
        params: &[
            pos("product", ArgKind::Tensor),
            named("overlap", ArgKind::Keyword(&["products"]), IfAbsent::Off),
        ],
        doc: doc!("Computes the softmax over T that o = sum(broadcast(p) * broadcast(v), axis=T) consumes online (FlashAttention's recurrence): the row maximum, the exponentials, the row sum and the product share the serial loop over o's tiles of T, the sum and o's accumulator rescaled by exp(m_old - m_new) when the maximum grows, o divided by the sum after the loop. The tile is the inner part of a split of T on o; ragged T is predicated (out-of-range keys add nothing). Not lowered yet, each refused with a message: the unnormalised form o = sum(broadcast(e) * broadcast(v), axis=T) / broadcast(l), readers of the final maximum or sum (the log-sum-exp). With overlap=products (tensor cores, K and V warp-specialized with empty mbarriers), FlashAttention-3's order inside a warp group: iteration j issues S_j = Q K_j^T, then O += P_{j-1} V_{j-1}, waits for S_j alone (wait_group 1) and runs tile j's softmax while the P V product runs, then waits for it, releases its stage, rescales O and converts P_j; the first S is peeled before the loop and the last P V after it (examples/attention/online_wgmma_overlap.hf). examples/attention/online.hf, docs/attention.md."),
        apply: Apply::Statement(online::online_softmax),
        checks_first: true,
        on_inputs: false,
    },
    Primitive {
        name: "welford",
        written: "welford(v)",
        params: &[pos("variance", ArgKind::Tensor)],
        doc: doc!("Computes the variance v (a var, or the first name of v, m = var_mean(...)) in one pass over its operand instead of two (the sum for the mean, then the squared deviations from it): each thread keeps Welford's running mean, m2 (the sum of squared deviations) and count of its elements in independent partial states, one per iteration of its outermost serial reduction loop of 2 to 8 iterations (so its updates are that many interleaved chains, not one; without such a loop, one state), combined in the thread by the two-pass form of Chan's formula, then across threads by Chan's parallel formula, across the warp by shuffles and across warps through shared memory; the mean's sum is then mean * count and v is m2 / (count - correction). Reads the operand once, has one block combine of the three statistics where the two-pass form has two block reductions one after the other, and is numerically stable (no E[x^2] - E[x]^2). Which to use: for a row a block keeps in registers, the two-pass form (leave the statement out) was faster on the H200 (LayerNorm at 32768 x 4096 bf16: 133.9 us in two passes, 141.2 us with welford(v)),, and the automatic normalization scheduler keeps it. welford refuses a thread holding several rows' statistics (a serial axis outside the reduction) and two sums scheduled in different loop nests. The sums are f32. examples/fusions/layernorm.hf (one pass), examples/fusions/layernorm_two_pass.hf (two)."),
        apply: Apply::Statement(welford::welford),
        checks_first: true,
        on_inputs: false,
    },
    Primitive {
        name: "online_logsumexp",
        written: "online_logsumexp(lse)",
        params: &[pos("logsumexp", ArgKind::Tensor)],
        doc: doc!("Computes the log-sum-exp lse (a logsumexp(...)) in one pass over its operand instead of two (the maximum, then the sum of exponentials shifted by it): each thread keeps its running maximum m and its sum s of exp(x - m), and per step of its loop (the innermost loop around the subtraction: a vector of 8 in examples/fusions/cross_entropy_labels.hf) first raises m over the step's elements and rescales s by exp(m_old - m_new), one exponential per step (the exponentials in base 2: m's shift times -log2(e) once per step, each element one FMA and one exp2); after the loop the block's maximum M is reduced, each thread rescales s by exp(m - M) and the sums are reduced. Reads a row once however wide (no row kept in registers or shared memory); an infinite maximum is shifted by 0 as in the two-pass form. Both statistics f32, one row's per thread, their loop nests those of `recompute` (the sum's chain reading its own copy of the operand)."),
        apply: Apply::Statement(welford::online_logsumexp),
        checks_first: true,
        on_inputs: false,
    },
];

/// The primitive named `name`, if any.
pub fn primitive(name: &str) -> Option<&'static Primitive> {
    PRIMITIVES.iter().find(|p| p.name == name)
}

/// The primitive a statement written as `form` names: an unknown name is an error listing the
/// near names and the primitives of that form.
pub(super) fn lookup(
    form: Form,
    name: &str,
    what: &str,
    span: Span,
) -> SResult<&'static Primitive> {
    primitive(name).ok_or_else(|| {
        let of_form: Vec<&str> = PRIMITIVES
            .iter()
            .filter(|p| p.form() == form)
            .map(|p| p.name)
            .collect();
        let near = crate::text::near_names(name, PRIMITIVES.iter().map(|p| p.name));
        let quoted: Vec<String> = near.iter().map(|n| format!("`{n}`")).collect();
        let hint = match quoted.as_slice() {
            [] => String::new(),
            _ => format!(
                ": did you mean {}?",
                either(&quoted.iter().map(String::as_str).collect::<Vec<_>>())
            ),
        };
        Diagnostic::new(
            format!(
                "{what}: unknown {} `{name}`{hint} ({})",
                form.noun(),
                of_form.join(", ")
            ),
            Some(span),
        )
    })
}

/// The error for a primitive written in another form than its own: how it is written.
pub(super) fn wrong_form(p: &Primitive, what: &str, span: Span) -> Diagnostic {
    let msg = match p.form() {
        Form::Binding => format!("bind the result: `name = {}(tensor)`", p.name),
        Form::Method => format!("`{}` is a tensor method: write `{}`", p.name, p.written),
        Form::Statement => format!("`{}` is a statement: write `{}`", p.name, p.written),
    };
    Diagnostic::new(format!("{what}: {msg}"), Some(span))
}
