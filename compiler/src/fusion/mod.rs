//! The fusion IR: tensors, the expressions that define them, and iteration domains.
//!
//! Every tensor has a *root* domain (its logical axes, plus the axes it reduces) and a *loop*
//! domain derived from the root by split / merge / reorder. Root axes that ops align (the same
//! axis of an operand and of the result, a reduced axis and the reduction's input axis, a
//! broadcast axis and the axis it is combined with) are joined into one *axis class*; loops of
//! different tensors are the same loop when they are derived the same way from the same classes
//! (see `passes::loop_nest`): the hash-consed loop key, `passes::KeyNode`. This is what lets a
//! producer share a consumer's loops, and a warp-specialized producer walk a loop nest other
//! than its consumers' over the same linear iteration space.
//!
//! Ops ([`Op`]): `Set` (a copy; what caching inserts), `Unary`, `Binary`, `Cast`, `Broadcast`,
//! `Reduce`, and `Mma` (a place for a wgmma product; no syntax produces it yet: a matrix product
//! is written as a sum of broadcast products, which `matmul` recognises for the runner's
//! cuBLAS comparison and whose tile a schedule marks with `Mma` axes). `rfactor(axes)` splits a
//! reduction `t` into `t_rf` (reducing only the listed loop axes) and `t = reduce(t_rf)`; the
//! reduction roots left to `t` alias the matching axes of `t_rf` ([`IterDomain::alias`]), so
//! both get the same loop keys without a special case in the passes. Use lists
//! ([`Fusion::use_index`]) and class extents are computed in linear time.

pub mod attention;
pub mod build;
pub mod contraction;
pub mod logsumexp;
pub mod matmul;
pub mod online_softmax;
pub mod ops;
pub mod philox;
pub mod schedule;
mod transform;
pub mod welford;

pub use build::build;
pub use ops::{BinaryOp, CompositeOp, ReduceOp, TernaryOp, UnaryOp};

use crate::diag::Span;
use crate::dtype::DType;
use crate::plan::SizeExpr;
use std::fmt;

crate::id::define_id!(
    /// A tensor: its place in [`Fusion::tensors`].
    pub TensorId => Tensor
);
crate::id::define_id!(
    /// An iteration domain (axis): its place in [`Fusion::ids`].
    pub IterId => IterDomain
);
crate::id::define_id!(
    /// An expression: its place in [`Fusion::exprs`].
    pub ExprId => Expr
);
crate::id::define_id!(
    /// A count of elements: its place in [`Fusion::counts`].
    pub CountId => Count
);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum ParallelType {
    Serial,
    BIDx,
    BIDy,
    BIDz,
    TIDx,
    TIDy,
    TIDz,
    Vectorize,
    Unroll,
    /// Axes covered by one TMA box (lowered by the TMA issue; rejected until then).
    Bulk,
    /// The instruction tile of a tensor-core product (`wgmma`): the M, N and K axes of one
    /// `m64nNk16` instruction on the sum of products, and the M and N axes of the tensors
    /// that read its accumulator fragment (lowered by the `mma` pass).
    Mma,
}

impl ParallelType {
    pub const ALL: [ParallelType; 11] = [
        ParallelType::Serial,
        ParallelType::BIDx,
        ParallelType::BIDy,
        ParallelType::BIDz,
        ParallelType::TIDx,
        ParallelType::TIDy,
        ParallelType::TIDz,
        ParallelType::Vectorize,
        ParallelType::Unroll,
        ParallelType::Bulk,
        ParallelType::Mma,
    ];
    pub fn name(self) -> &'static str {
        match self {
            ParallelType::Serial => "Serial",
            ParallelType::BIDx => "BIDx",
            ParallelType::BIDy => "BIDy",
            ParallelType::BIDz => "BIDz",
            ParallelType::TIDx => "TIDx",
            ParallelType::TIDy => "TIDy",
            ParallelType::TIDz => "TIDz",
            ParallelType::Vectorize => "Vectorize",
            ParallelType::Unroll => "Unroll",
            ParallelType::Bulk => "Bulk",
            ParallelType::Mma => "Mma",
        }
    }
    pub fn parse(s: &str) -> Option<ParallelType> {
        ParallelType::ALL.into_iter().find(|p| p.name() == s)
    }
    pub fn is_thread(self) -> bool {
        matches!(
            self,
            ParallelType::TIDx | ParallelType::TIDy | ParallelType::TIDz
        )
    }
    pub fn is_block(self) -> bool {
        matches!(
            self,
            ParallelType::BIDx | ParallelType::BIDy | ParallelType::BIDz
        )
    }
    /// Bound to a hardware index (no loop is emitted).
    pub fn is_hw(self) -> bool {
        self.is_thread() || self.is_block()
    }
    /// 0, 1, 2 for x, y, z of thread and block indices.
    pub fn dim(self) -> Option<usize> {
        match self {
            ParallelType::BIDx | ParallelType::TIDx => Some(0),
            ParallelType::BIDy | ParallelType::TIDy => Some(1),
            ParallelType::BIDz | ParallelType::TIDz => Some(2),
            _ => None,
        }
    }
    /// The CUDA index variable (`threadIdx.x`, ...).
    pub fn cuda_index(self) -> Option<&'static str> {
        Some(match self {
            ParallelType::BIDx => "blockIdx.x",
            ParallelType::BIDy => "blockIdx.y",
            ParallelType::BIDz => "blockIdx.z",
            ParallelType::TIDx => "threadIdx.x",
            ParallelType::TIDy => "threadIdx.y",
            ParallelType::TIDz => "threadIdx.z",
            _ => return None,
        })
    }
}

impl fmt::Display for ParallelType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryType {
    Global,
    Shared,
    Local,
}

impl MemoryType {
    pub fn name(self) -> &'static str {
        match self {
            MemoryType::Global => "global",
            MemoryType::Shared => "shared",
            MemoryType::Local => "local",
        }
    }
    pub fn parse(s: &str) -> Option<MemoryType> {
        Some(match s {
            "global" => MemoryType::Global,
            "shared" => MemoryType::Shared,
            "local" => MemoryType::Local,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IterKind {
    Iteration,
    Reduction,
    /// Extent 1 in memory; iterated with the extent of the axis it is combined with.
    Broadcast,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum IterOrigin {
    Root,
    /// One output of a split. `inner_split`: the factor is the inner extent (nvFuser's default);
    /// otherwise the factor is the outer extent.
    Split {
        parent: IterId,
        factor: i64,
        inner_split: bool,
        is_outer: bool,
    },
    Merge {
        outer: IterId,
        inner: IterId,
    },
}

#[derive(Clone, Debug)]
pub struct IterDomain {
    pub kind: IterKind,
    pub parallel: ParallelType,
    pub origin: IterOrigin,
    /// Memory extent of a root axis (1 for broadcast axes); None for derived axes.
    pub root_extent: Option<SizeExpr>,
    /// A root axis that stands for a derived axis of another tensor (the reduction axes left to
    /// a tensor by `rfactor` are the split-off axes of its rfactor tensor): same loop, same index.
    pub alias: Option<IterId>,
    /// The schedule statement that made this axis (a split, a merge, a cache, a propagate...),
    /// for errors found later about it; None for the fusion's own axes.
    pub stmt: Option<Span>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Copy (also what cache_after / cache_before insert).
    Set,
    Unary(UnaryOp),
    Binary(BinaryOp),
    Ternary(TernaryOp),
    Cast(DType),
    /// New broadcast axes at these output positions.
    Broadcast {
        axes: Vec<usize>,
    },
    /// A view: output axis `k` is input axis `dims[k]` (`permute`, `transpose`). The output's
    /// root axes join the input's in the permuted order, so every access is indexed from the
    /// axis classes as any other (see the module doc of `fusion::build`).
    Permute {
        dims: Vec<usize>,
    },
    /// A view: the input's broadcast axes take these extents (`expand`); the others keep theirs.
    Expand {
        shape: Vec<SizeExpr>,
    },
    /// A view that moves indices along `axis` (`slice`): output index `i` reads the input at
    /// `start + step * i`. The other axes join the input's classes; `axis` is a class of its
    /// own (see the module doc of `fusion::build`).
    Slice {
        axis: usize,
        start: SizeExpr,
        step: i64,
        /// `start=`, `stop=`, `step=` as written (Python's rules; what the torch twin writes).
        written: [Option<i64>; 3],
    },
    /// A view that widens `axis` (`pad`): output index `i` reads the input at `i - before`
    /// where that is inside it, else is `value`.
    Pad {
        axis: usize,
        before: i64,
        after: i64,
        value: f64,
    },
    /// Two inputs end to end along `axis` (`cat`): output index `i` reads the first input
    /// below its extent, else the second at `i` less that extent.
    Cat {
        axis: usize,
    },
    /// A view with other extents and the same elements in row-major order (`reshape`): the
    /// output's linear index is the input's.
    Reshape,
    /// A view where each input element covers a block (`expand_blocks`): output index `i`
    /// along axis `k` reads the input at `i / block[k]` (block scales: `sa[m, k / 128]`).
    ExpandBlocks {
        block: Vec<i64>,
    },
    /// Indexing with indices loaded from data: output index `i` along `axis` reads the first
    /// input at the value of the second (an integer fusion input, read through copies and
    /// broadcasts) clamped into the first's extent. `gather`: the index has the output's shape
    /// (every output axis joins its class); `index_select` (`select`): the index is 1-D, its axis
    /// the output's `axis`. The other axes join the first input's classes.
    Gather {
        axis: usize,
        select: bool,
    },
    /// Reduces these logical axes of the input.
    Reduce {
        op: ReduceOp,
        axes: Vec<usize>,
    },
    /// Matrix product `[M, K] x [K, N]` (lowered by the wgmma issue; no syntax produces it yet).
    Mma,
    /// The index along this logical axis of the result (an i32; no operands: its other axes
    /// are broadcast axes).
    Iota {
        axis: usize,
    },
    /// The row-major index of each element over these logical axes of the result (the later
    /// axes' extents as strides), an i64; no operands: its other axes are broadcast axes. The
    /// element index `rand` and `randn` draw at, one op rather than iotas, casts, products and
    /// sums, so the kernel's index of it simplifies to the loop's flat index where the loops
    /// merge those axes.
    ElementIndex {
        axes: Vec<usize>,
    },
    /// A tensor holding one number (no operands; `full([M, N], value)`).
    Full {
        value: f64,
    },
}

impl Op {
    /// A view that moves indices (`slice`, `pad`, `cat`, `reshape`): the kernel reads its
    /// operands in global memory at indices the op maps the output's to (`passes::indexing`).
    pub fn moves_indices(&self) -> bool {
        matches!(
            self,
            Op::Slice { .. }
                | Op::Pad { .. }
                | Op::Cat { .. }
                | Op::Reshape
                | Op::ExpandBlocks { .. }
                | Op::Gather { .. }
        )
    }

    /// An op a view that moves indices recomputes where it reads the op's result (elementwise
    /// ops, casts, the views): its value at any index is its operands' at the same or a moved
    /// index, so the view reads the fusion inputs below it at its own indices. Any other op's
    /// result (a reduction, an `iota`, a `full`) is read where it is computed.
    pub fn is_recomputed_in_views(&self) -> bool {
        match self {
            Op::Set
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Ternary(_)
            | Op::Cast(_)
            | Op::Broadcast { .. }
            | Op::Permute { .. }
            | Op::Expand { .. }
            | Op::Slice { .. }
            | Op::Pad { .. }
            | Op::Cat { .. }
            | Op::Reshape => true,
            // Block scales are read where the product needs them, from a fusion input.
            Op::Reduce { .. }
            | Op::Mma
            | Op::Iota { .. }
            | Op::ElementIndex { .. }
            | Op::Full { .. }
            | Op::ExpandBlocks { .. }
            // Its index is read from a fusion input at its own indices.
            | Op::Gather { .. } => false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Operand {
    Tensor(TensorId),
    /// A literal, converted to the op's compute type.
    Scalar(f64),
    /// A count of elements ([`Fusion::counts`]) as a number at run time (from the size
    /// symbols' values), converted to the op's compute type: what `mean` and `var` divide by.
    Count(CountId),
}

/// The product of the extents of some axes, less a constant and not below 0: `n` of a `mean`
/// over those axes, `max(n - correction, 0)` of a `var` (torch's degrees of freedom).
#[derive(Clone, Debug, PartialEq)]
pub struct Count {
    /// Root axes; their classes' extents are multiplied.
    pub axes: Vec<IterId>,
    pub minus: f64,
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub op: Op,
    pub inputs: Vec<Operand>,
    pub output: TensorId,
    pub span: Option<Span>,
}

impl Expr {
    pub fn input_tensors(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.inputs.iter().filter_map(|o| match o {
            Operand::Tensor(t) => Some(*t),
            Operand::Scalar(_) | Operand::Count(_) => None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inline {
    /// Loops [0, pos) of the loop domain are shared with the consumers.
    At(usize),
    /// As deep as legal (decided when the loop nest is built).
    Most,
}

#[derive(Clone, Debug)]
pub struct Tensor {
    pub name: String,
    pub dtype: DType,
    pub root: Vec<IterId>,
    pub loop_domain: Vec<IterId>,
    pub memory: MemoryType,
    pub inline: Inline,
    pub definition: Option<ExprId>,
    pub is_input: bool,
    pub is_output: bool,
    pub span: Option<Span>,
    /// How a shared-memory cache is filled (`cache_after(x, load=...)`).
    pub load: LoadKind,
    /// `t.circular_buffer(stages, prefetch=...)`.
    pub circular: Option<CircularBuffer>,
    /// How this global output is written from its shared cache (`cache_before(y, store=tma)`
    /// makes it `Tma`: its `Bulk` axes are the box of one TMA store).
    pub store: LoadKind,
    /// Where the async-proxy fence before a TMA store of this tensor goes.
    pub fence: FenceMode,
    /// Shared-memory swizzle (0, 32, 64 or 128 bytes) of the TMA box this tensor is loaded into
    /// (a cache) or stored from (an output's `cache_before`).
    pub swizzle: u32,
    /// Elements added after each row of a plain shared-memory cache (`cache_after(x,
    /// memory=shared, row_pad=1)`): the rows of its innermost allocated axis lie `extent + pad`
    /// apart, so threads reading down a column (a transpose's tile) hit different banks.
    pub row_pad: u32,
    /// How this input's loads use L2 (`cache_after(x, l2=evict_last)` sets it on `x`).
    pub l2: L2Policy,
    /// A scalar input's value at launch (`input eps: f32 = 1e-6`); None: the runner draws one
    /// like any input's.
    pub value: Option<f64>,
    /// A 0-d input written with empty extents (`input t: f32[]`): one element in global
    /// memory, passed as a pointer (a scalar a previous kernel wrote: a segment's
    /// intermediate), where a scalar input without extents is a value passed at launch.
    pub in_memory: bool,
    /// The call this tensor is the result of when the builder wrote it as several ops
    /// (`mean(x, axis=1)`): what the torch twin writes instead of those ops.
    pub composite: Option<Composite>,
    /// The tensor this one is a copy of, made by `recompute` for one of that tensor's consumers
    /// (see `schedule::recompute`): computed right before that consumer ([`Fusion::topo_exprs`]).
    pub copy_of: Option<TensorId>,
    /// The program text of the expression this tensor is the value of, when the builder named
    /// it (`y_cast_f32` for `cast(broadcast(w, axis=0), f32)` inside `y = ...`): messages name
    /// that text, which the user wrote, instead ([`Fusion::describe`]). None for the tensors
    /// the program names and those a schedule makes.
    pub written: Option<String>,
}

/// A call of a [`CompositeOp`] (see `ops`): the builder's ops for it made the tensors from
/// `first` to the tensor that records it, in order, and no others.
#[derive(Clone, Debug, PartialEq)]
pub struct Composite {
    pub op: CompositeOp,
    /// The operand.
    pub input: TensorId,
    /// The reduced axes of `input`.
    pub axes: Vec<usize>,
    /// `var`'s `correction=` (torch's; 1 unless given).
    pub correction: f64,
    /// The first tensor the builder made for the call.
    pub first: TensorId,
}

/// Placement of `fence.proxy.async.shared::cta` between the generic writes of a shared buffer
/// and the TMA store that reads it (`cache_before(y, ..., fence=...)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FenceMode {
    /// Chosen by the sync analysis: every thread fences once, after its writes of the buffer and
    /// before the block barrier that precedes the store (unpredicated, so warps never split).
    #[default]
    Analysis,
    /// After every shared-memory store of the buffer, inside the loops that write it.
    PerStore,
    /// After the block barrier, by the issuing warp only (a warp-uniform predicate).
    IssuingWarp,
}

impl FenceMode {
    pub fn name(self) -> &'static str {
        match self {
            FenceMode::Analysis => "analysis",
            FenceMode::PerStore => "per_store",
            FenceMode::IssuingWarp => "issuing_warp",
        }
    }
    pub fn parse(s: &str) -> Option<FenceMode> {
        [
            FenceMode::Analysis,
            FenceMode::PerStore,
            FenceMode::IssuingWarp,
        ]
        .into_iter()
        .find(|k| k.name() == s)
    }
}

/// How a circular buffer learns that a slot may be refilled (write-after-read).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WarMode {
    /// A block barrier at the end of every iteration that read a slot.
    #[default]
    Sync,
    /// "Empty" mbarriers: each warp arrives after its last read of a slot; the issuing thread
    /// waits on the slot's empty barrier before refilling it.
    Mbarrier,
}

/// How the loads of a fusion input use L2 (`cache_after(x, l2=evict_last)`): PTX's
/// `createpolicy.fractional.L2::evict_last` / `evict_first` with `ld.global.L2::cache_hint`.
/// A streaming norm reading its rows with `evict_last` ran 3.7% faster on the H200 than with
/// plain loads, level with torch.compile's Triton kernel, which reads them so
/// (docs/benchmarks.md, fourteenth session).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum L2Policy {
    #[default]
    Normal,
    EvictLast,
    EvictFirst,
}

impl L2Policy {
    pub const ALL: [L2Policy; 3] = [L2Policy::Normal, L2Policy::EvictLast, L2Policy::EvictFirst];
    pub fn name(self) -> &'static str {
        match self {
            L2Policy::Normal => "normal",
            L2Policy::EvictLast => "evict_last",
            L2Policy::EvictFirst => "evict_first",
        }
    }
    pub fn parse(s: &str) -> Option<L2Policy> {
        L2Policy::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// How a cache is filled from global memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadKind {
    /// Ordinary loads by every thread.
    Plain,
    /// A TMA tile copy (`cp.async.bulk.tensor`) of the box the `Bulk` axes cover.
    Tma,
    /// A 1-D bulk copy (`cp.async.bulk`) of one contiguous run.
    Bulk,
}

impl LoadKind {
    pub fn name(self) -> &'static str {
        match self {
            LoadKind::Plain => "plain",
            LoadKind::Tma => "tma",
            LoadKind::Bulk => "bulk",
        }
    }
    pub fn parse(s: &str) -> Option<LoadKind> {
        [LoadKind::Plain, LoadKind::Tma, LoadKind::Bulk]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

/// Circular buffering of a cache over the serial loop that encloses its load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CircularBuffer {
    pub stages: i64,
    /// Loads issued ahead of the iteration that consumes them (`0 <= prefetch < stages`).
    pub prefetch: i64,
    pub war: WarMode,
    /// `warp_specialized(...)`: a producer warp group issues the loads.
    pub ws: Option<WarpSpecialized>,
    /// (Not in the plan's JSON: where the statement is, not what it decides.)
    #[serde(skip)]
    pub span: Span,
}

/// An `online_softmax(o)` statement's rewrite: the pattern [`online_softmax::find`] accepted,
/// and the statement (for the passes' errors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnlineRewrite {
    pub pattern: online_softmax::OnlineSoftmax,
    /// `overlap=products`: the previous tile's P V product runs during this tile's softmax
    /// (the `mma` pass's `overlap` module).
    pub overlap: bool,
    pub span: Option<Span>,
}

/// A `welford(v)` statement: the variance `v` computed in one pass, Welford's running
/// statistics (see [`welford::find`], which the passes call again on the scheduled fusion).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WelfordRewrite {
    pub var: TensorId,
    pub span: Option<Span>,
}

/// An `online_logsumexp(lse)` statement: the log-sum-exp `lse` computed in one pass (see
/// [`logsumexp::find`], which the passes call again on the scheduled fusion).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSumExpRewrite {
    pub lse: TensorId,
    pub span: Option<Span>,
}

/// `warp_specialized(on, registers=[producer, consumer], warp=N)` of a circular buffer: the block
/// gets a 128-thread producer warp group along `on`; warp `warp` of it issues this tensor's loads
/// (different warps = different producer roles, each with its own barriers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct WarpSpecialized {
    pub on: ParallelType,
    pub registers: Option<(u32, u32)>,
    pub warp: u32,
    /// `turns=products`: the consumer groups along `on`, which share every stage, take turns
    /// issuing their tensor-core products (ping-pong through named barriers), so that one
    /// group's work between products overlaps the other's products.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub product_turns: bool,
}

#[derive(Clone, Debug)]
pub struct Fusion {
    pub name: String,
    pub tensors: Vec<Tensor>,
    pub exprs: Vec<Expr>,
    pub ids: Vec<IterDomain>,
    /// Size symbols in order of first appearance.
    pub symbols: Vec<String>,
    /// The counts [`Operand::Count`] reads.
    pub counts: crate::id::IdVec<CountId, Count>,
    pub inputs: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
    /// Union-find parent of each root axis (axis classes); derived axes point to themselves.
    pub(crate) class_parent: crate::id::IdVec<IterId, IterId>,
    /// Per class root: its lowest-numbered member that is not a broadcast and has a root
    /// extent (the member whose extent is the class's), kept up to date by `new_id` and `union`
    /// so that [`Fusion::class_extent`] is a lookup.
    pub(crate) class_extent_member: crate::id::IdVec<IterId, Option<IterId>>,
    /// Thread-block clusters (`cluster(BIDy, 2)` in the schedule).
    pub cluster: Option<Cluster>,
    /// A persistent grid walking the tiles in a grouped raster (`persistent(BIDy, 8)`).
    pub persistent: Option<Persistent>,
    /// The online softmaxes the schedule asked for (`online_softmax(o)`), for the passes: each
    /// softmax over `T` and its product computed as running statistics over the serial loop of
    /// the product's `T` tiles.
    pub online_softmax: Vec<OnlineRewrite>,
    /// The variances the schedule asked to compute in one pass (`welford(v)`), for
    /// `passes::welford`.
    pub welford: Vec<WelfordRewrite>,
    /// The log-sum-exps the schedule asked to compute in one pass (`online_logsumexp(lse)`),
    /// for `passes::online_logsumexp`.
    pub online_logsumexp: Vec<LogSumExpRewrite>,
    /// Conditions on the sizes that the views need (a slice reads inside its input), checked
    /// before a launch and by the reference.
    pub constraints: Vec<crate::plan::Constraint>,
    /// Axis replays the schedule's `propagate`s have done so far (at most
    /// [`transform::MAX_PROPAGATE_WORK`]).
    pub(crate) propagate_work: usize,
}

/// A persistent kernel: the grid-bound axes span a space of tiles, and a grid of as many CTAs
/// as are resident walks it, CTA `b` of `G` taking linear tiles `b, b + G, b + 2G, ...`. The
/// linear order is a grouped raster: runs of `group` tiles along `along` (consecutive linear
/// tiles step along `along` first), the groups in order along the other grid axis, so the
/// tiles resident at once cover a compact block of the output and share their operands in L2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Persistent {
    /// The grid axis (BIDx or BIDy) the groups run along.
    pub along: ParallelType,
    /// Tiles per group along `along` (in clusters when `along` is the clustered axis).
    pub group: i64,
    /// Stream-K (`persistent(BIDy, 8, stream_k)`): the CTAs split the tiles' k steps evenly
    /// instead of taking whole tiles; a tile split between CTAs is summed by the CTA that has
    /// its first k step, from partial sums the others leave in a global workspace.
    pub stream_k: bool,
    pub span: Option<Span>,
}

/// CTAs launched together as a cluster along one grid axis: they may write each other's
/// shared memory, so a TMA load whose box is the same for every CTA of the cluster is
/// multicast (each CTA issues a slice into all of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// The grid axis (BIDx, BIDy or BIDz) whose consecutive CTAs form a cluster.
    pub on: ParallelType,
    /// CTAs per cluster (2..=8, the portable maximum).
    pub ctas: i64,
    pub span: Option<Span>,
}

impl Fusion {
    /// Whether some computed tensor has an axis on the tensor cores (`Mma`): the `mma` pass's
    /// work, which earlier passes check for too.
    pub fn uses_tensor_cores(&self) -> bool {
        self.tensors.iter().any(|t| {
            t.definition.is_some()
                && t.loop_domain
                    .iter()
                    .any(|&id| self.ids[id].parallel == ParallelType::Mma)
        })
    }

    /// The id of every tensor, in order.
    pub fn tensor_ids(&self) -> impl Iterator<Item = TensorId> + use<> {
        (0..self.tensors.len()).map(TensorId::new)
    }

    /// The id of every expression, in order.
    pub fn expr_ids(&self) -> impl Iterator<Item = ExprId> + use<> {
        (0..self.exprs.len()).map(ExprId::new)
    }

    pub fn tensor_by_name(&self, name: &str) -> Option<TensorId> {
        self.tensors
            .iter()
            .position(|t| t.name == name)
            .map(TensorId::new)
    }

    /// The shape of `t` as declared: its root axes' extents (1 for a broadcast axis); empty
    /// for a scalar. An input's is the shape a caller passes.
    pub fn root_shape(&self, t: TensorId) -> Vec<SizeExpr> {
        self.tensors[t]
            .root
            .iter()
            .map(|&id| {
                self.ids[id]
                    .root_extent
                    .clone()
                    .unwrap_or(SizeExpr::Const(1))
            })
            .collect()
    }

    /// Logical axes: the root without reduction axes.
    pub fn logical(&self, t: TensorId) -> Vec<IterId> {
        self.tensors[t]
            .root
            .iter()
            .copied()
            .filter(|&i| self.ids[i].kind != IterKind::Reduction)
            .collect()
    }

    /// Whether `t` is a scalar input passed by value at launch (a rank-0 input not written
    /// `f32[]`, which is one element in global memory).
    pub fn is_scalar_param(&self, t: TensorId) -> bool {
        let tensor = &self.tensors[t];
        tensor.is_input && !tensor.in_memory && self.rank(t) == 0
    }

    /// The number of logical axes (counted, not collected: asked for every operand).
    pub fn rank(&self, t: TensorId) -> usize {
        self.tensors[t]
            .root
            .iter()
            .filter(|&&i| self.ids[i].kind != IterKind::Reduction)
            .count()
    }

    /// Axis class of a root axis.
    pub fn class_of(&self, mut id: IterId) -> IterId {
        while self.class_parent[id] != id {
            id = self.class_parent[id];
        }
        id
    }

    pub(crate) fn union(&mut self, a: IterId, b: IterId) {
        let (ra, rb) = (self.class_of(a), self.class_of(b));
        if ra != rb {
            let (lo, hi) = if ra < rb { (ra, rb) } else { (rb, ra) };
            self.class_parent[hi] = lo;
            let best = match (self.class_extent_member[lo], self.class_extent_member[hi]) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            self.class_extent_member[lo] = best;
        }
    }

    pub(crate) fn new_id(
        &mut self,
        kind: IterKind,
        origin: IterOrigin,
        root_extent: Option<SizeExpr>,
    ) -> IterId {
        let id = IterId::new(self.ids.len());
        self.class_extent_member
            .push((kind != IterKind::Broadcast && root_extent.is_some()).then_some(id));
        self.ids.push(IterDomain {
            kind,
            parallel: ParallelType::Serial,
            origin,
            root_extent,
            alias: None,
            stmt: None,
        });
        self.class_parent.push(id);
        id
    }

    /// Every axis on the paths from `t`'s root to its loop domain, oldest first (parents
    /// before the axes split or merged from them).
    pub fn axes_between(&self, t: TensorId) -> Vec<IterId> {
        // Each axis is walked once (both children of a split reach their parent, so walking
        // every path made a deep split quadratic), then the axes are sorted.
        let mut seen: rustc_hash::FxHashSet<IterId> = Default::default();
        let mut stack: Vec<IterId> = self.tensors[t].loop_domain.clone();
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            match self.ids[id].origin {
                IterOrigin::Root => {}
                IterOrigin::Split { parent, .. } => stack.push(parent),
                IterOrigin::Merge { outer, inner } => {
                    stack.push(outer);
                    stack.push(inner);
                }
            }
        }
        // Sorted as `(usize, usize)` pairs: the instance of the sort that
        // `id::sort_by_position` already has (one copy in the wasm).
        let mut order: Vec<(usize, usize)> = seen.iter().map(|a| (a.index(), 0)).collect();
        order.sort_unstable();
        order.into_iter().map(|(i, _)| IterId::new(i)).collect()
    }

    /// The inner axis made by the same split as `outer` (splits create the pair together).
    pub fn split_inner(&self, outer: IterId) -> Option<IterId> {
        let IterOrigin::Split {
            parent,
            is_outer: true,
            ..
        } = self.ids[outer].origin
        else {
            return None;
        };
        let inner = IterId::new(outer.index() + 1);
        match self.ids.get(inner.index()).map(|d| &d.origin) {
            Some(IterOrigin::Split {
                parent: p,
                is_outer: false,
                ..
            }) if *p == parent => Some(inner),
            _ => None,
        }
    }

    /// Appends `output = op(inputs)` and makes it `output`'s definition.
    pub(crate) fn define(
        &mut self,
        op: Op,
        inputs: Vec<Operand>,
        output: TensorId,
        span: Option<Span>,
    ) -> ExprId {
        let e = ExprId::new(self.exprs.len());
        self.exprs.push(Expr {
            op,
            inputs,
            output,
            span,
        });
        self.tensors[output].definition = Some(e);
        e
    }

    /// For every tensor, the exprs reading it (one pass; for walks that ask for many tensors,
    /// where [`Fusion::uses`] per tensor would be quadratic).
    pub fn use_index(&self) -> crate::id::IdVec<TensorId, Vec<ExprId>> {
        let mut uses = vec![Vec::new(); self.tensors.len()];
        for (e, expr) in self.expr_ids().zip(&self.exprs) {
            for t in expr.input_tensors() {
                if uses[t.index()].last() != Some(&e) {
                    uses[t.index()].push(e);
                }
            }
        }
        uses.into()
    }

    /// The tensors the kernel reads to compute expression `e`: its operands, except that a
    /// view that moves indices recomputes an operand computed by an op it recomputes
    /// ([`Op::is_recomputed_in_views`]) and reads that op's operands instead, down to fusion
    /// inputs and tensors computed otherwise (`passes::loop_nest` inlines them).
    pub fn kernel_reads(&self, e: ExprId) -> Vec<TensorId> {
        let expr = &self.exprs[e];
        if !expr.op.moves_indices() {
            return expr.input_tensors().collect();
        }
        let mut reads = Vec::new();
        let mut stack: Vec<TensorId> = expr.input_tensors().collect();
        let mut seen = vec![false; self.tensors.len()];
        for t in &stack {
            seen[t.index()] = true;
        }
        while let Some(t) = stack.pop() {
            match self.tensors[t].definition {
                Some(d) if self.exprs[d].op.is_recomputed_in_views() => {
                    for p in self.exprs[d].input_tensors() {
                        if !seen[p.index()] {
                            seen[p.index()] = true;
                            stack.push(p);
                        }
                    }
                }
                _ => reads.push(t),
            }
        }
        crate::id::sort_by_position(&mut reads, |t| t.index());
        reads
    }

    /// The computed tensors that only views that move indices read, directly or through other
    /// such tensors (not outputs): the views recompute them ([`Fusion::kernel_reads`]), so the
    /// kernel never computes them on their own.
    pub fn recomputed_only_in_views(&self) -> crate::id::IdVec<TensorId, bool> {
        let mut only: crate::id::IdVec<TensorId, bool> = vec![false; self.tensors.len()].into();
        let uses = self.use_index();
        for e in self.topo_exprs().into_iter().rev() {
            let t = self.exprs[e].output;
            let tensor = &self.tensors[t];
            only[t] = !tensor.is_output
                && self.exprs[e].op.is_recomputed_in_views()
                && !uses[t].is_empty()
                && uses[t]
                    .iter()
                    .all(|&u| self.exprs[u].op.moves_indices() || only[self.exprs[u].output]);
        }
        only
    }

    /// Tensor `t` as a message names it: `` `y` `` for a tensor the program names, or for one
    /// the builder named inside an expression, the expression's text (`` the expression
    /// `cast(broadcast(w, axis=0), f32)` ``; [`Tensor::written`]).
    pub fn describe(&self, t: TensorId) -> String {
        match &self.tensors[t].written {
            Some(text) => format!("the expression `{text}`"),
            None => format!("`{}`", self.tensors[t].name),
        }
    }

    /// Which tensors an output depends on (the outputs included).
    pub fn live(&self) -> crate::id::IdVec<TensorId, bool> {
        let mut live: crate::id::IdVec<TensorId, bool> = vec![false; self.tensors.len()].into();
        let mut stack: Vec<TensorId> = self.outputs.clone();
        while let Some(t) = stack.pop() {
            if std::mem::replace(&mut live[t], true) {
                continue;
            }
            if let Some(d) = self.tensors[t].definition {
                stack.extend(self.exprs[d].input_tensors());
            }
        }
        live
    }

    /// Each tensor marked when it is one of `roots` or computed from one (in one pass over the
    /// exprs in their topological order).
    pub fn computed_from(
        &self,
        roots: impl IntoIterator<Item = TensorId>,
    ) -> crate::id::IdVec<TensorId, bool> {
        let mut from: crate::id::IdVec<TensorId, bool> = vec![false; self.tensors.len()].into();
        for t in roots {
            from[t] = true;
        }
        for e in self.topo_exprs() {
            let x = &self.exprs[e];
            if x.input_tensors().any(|i| from[i]) {
                from[x.output] = true;
            }
        }
        from
    }

    /// Exprs reading tensor `t`.
    pub fn uses(&self, t: TensorId) -> Vec<ExprId> {
        self.expr_ids()
            .filter(|&e| self.exprs[e].input_tensors().any(|i| i == t))
            .collect()
    }

    /// Exprs in an order where every producer comes before its consumers: in sweeps over the
    /// exprs in their order, then each `recompute` copy moved to right before its first
    /// consumer, so the loops of that consumer, not a nest of their own made before it, hold
    /// the copies (a copy of a cache reads only fusion inputs: a sweep would place it first).
    pub fn topo_exprs(&self) -> Vec<ExprId> {
        let mut done = vec![false; self.tensors.len()];
        for &i in &self.inputs {
            done[i.index()] = true;
        }
        let mut order = Vec::new();
        let mut placed = vec![false; self.exprs.len()];
        loop {
            let mut progress = false;
            for (e, expr) in self.expr_ids().zip(&self.exprs) {
                if !placed[e.index()] && expr.input_tensors().all(|t| done[t.index()]) {
                    placed[e.index()] = true;
                    done[expr.output.index()] = true;
                    order.push(e);
                    progress = true;
                }
            }
            if !progress {
                break;
            }
        }
        if self.tensors.iter().any(|t| t.copy_of.is_some()) {
            // Consumers before producers, so a chain of copies moves as one, in order.
            let mut i = order.len();
            while i > 0 {
                i -= 1;
                let e = order[i];
                if self.tensors[self.exprs[e].output].copy_of.is_none() {
                    continue;
                }
                let out = self.exprs[e].output;
                let first_use = order[i + 1..]
                    .iter()
                    .position(|&u| self.exprs[u].input_tensors().any(|t| t == out));
                if let Some(j) = first_use {
                    let e = order.remove(i);
                    order.insert(i + j, e);
                }
            }
        }
        order
    }

    /// Extent of a root axis class: the extent of any non-broadcast member, else 1.
    pub fn class_extent(&self, class: IterId) -> SizeExpr {
        self.class_extent_member[self.class_of(class)]
            .and_then(|id| self.ids[id].root_extent.clone())
            .unwrap_or(SizeExpr::Const(1))
    }

    /// The type expression `e` computes in (its operands are converted to it): its result's
    /// arithmetic type, except for the ops whose result is bool (a comparison computes in its
    /// operands' promoted type, a logical op in bool) and for `where`, whose condition is
    /// converted to bool by the op itself.
    pub fn compute_type(&self, e: ExprId) -> DType {
        let expr = &self.exprs[e];
        let out = self.tensors[expr.output].dtype.compute();
        let typing = match &expr.op {
            Op::Unary(u) => u.def().typing,
            Op::Binary(b) => b.def().typing,
            _ => return out,
        };
        let (types, literals) = build::operand_types(self, &expr.inputs);
        ops::result_type(typing, &types, &literals).map_or(out, |(compute, _)| compute)
    }

    /// The product of a count's extents (without its `minus`), as sizes.
    pub fn count_size(&self, c: CountId) -> SizeExpr {
        let mut extents = self.counts[c]
            .axes
            .iter()
            .map(|&id| self.class_extent(self.class_of(id)));
        let first = extents.next().unwrap_or(SizeExpr::Const(1));
        extents.fold(first, |a, b| SizeExpr::Mul(Box::new(a), Box::new(b)))
    }

    /// Human-readable description of an axis of a tensor (for messages).
    pub fn describe_axis(&self, t: TensorId, axis: usize) -> String {
        format!("axis {axis} of `{}`", self.tensors[t].name)
    }
}

/// Text of the fusion IR: each tensor with its root and loop domains, then each expression.
pub fn print(f: &Fusion) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "fusion {}", f.name);
    for tensor in &f.tensors {
        print_tensor(f, tensor, &mut s);
    }
    for e in &f.exprs {
        print_expr(f, e, &mut s);
    }
    if let Some(c) = f.cluster {
        let _ = writeln!(s, "  cluster({}, {})", c.on, c.ctas);
    }
    if let Some(p) = f.persistent {
        let split = if p.stream_k { ", stream_k" } else { "" };
        let _ = writeln!(s, "  persistent({}, {}{split})", p.along, p.group);
    }
    s
}

/// One axis, written straight into the text (this runs for every axis of every tensor).
fn print_axis(f: &Fusion, id: IterId, s: &mut String) {
    use std::fmt::Write;
    let d = &f.ids[id];
    let kind = match d.kind {
        IterKind::Iteration => "",
        IterKind::Reduction => "r",
        IterKind::Broadcast => "b",
    };
    let int = |i: usize, s: &mut String| crate::text::write_int(i as i64, s);
    int(id.index(), s);
    s.push(':');
    s.push_str(kind);
    match &d.origin {
        IterOrigin::Root => match f.class_extent(f.class_of(id)) {
            SizeExpr::Sym(name) => s.push_str(&name),
            SizeExpr::Const(c) => crate::text::write_int(c, s),
            extent => {
                let _ = write!(s, "{extent}");
            }
        },
        IterOrigin::Split {
            parent,
            factor,
            inner_split,
            is_outer,
        } => {
            s.push_str(if *is_outer { "o" } else { "i" });
            s.push_str(if *inner_split { "/" } else { "|" });
            crate::text::write_int(*factor, s);
            s.push('@');
            int(parent.index(), s);
        }
        IterOrigin::Merge { outer, inner } => {
            int(outer.index(), s);
            s.push('*');
            int(inner.index(), s);
        }
    }
    if d.parallel != ParallelType::Serial {
        s.push(' ');
        s.push_str(d.parallel.name());
    }
}

fn print_axes(f: &Fusion, ids: &[IterId], s: &mut String) {
    for (i, &id) in ids.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        print_axis(f, id, s);
    }
}

/// A tensor's line: name, dtype, memory, role; its root and loop domains; its schedule's marks.
fn print_tensor(f: &Fusion, tensor: &Tensor, s: &mut String) {
    use std::fmt::Write;
    let role = if tensor.is_input {
        "input"
    } else if tensor.is_output {
        "output"
    } else {
        ""
    };
    let _ = write!(
        s,
        "  {}: {} {} {role}\n    root [",
        tensor.name,
        tensor.dtype,
        tensor.memory.name()
    );
    print_axes(f, &tensor.root, s);
    s.push_str("]\n    loop [");
    print_axes(f, &tensor.loop_domain, s);
    s.push_str("]  ");
    let _ = match tensor.inline {
        Inline::At(p) => write!(s, "inline_at {p}"),
        Inline::Most => write!(s, "inline_most"),
    };
    if tensor.load != LoadKind::Plain {
        let _ = write!(s, " load={}", tensor.load.name());
    }
    if tensor.swizzle != 0 {
        let _ = write!(s, " swizzle={}", tensor.swizzle);
    }
    if tensor.row_pad != 0 {
        let _ = write!(s, " row_pad={}", tensor.row_pad);
    }
    if tensor.l2 != L2Policy::Normal {
        let _ = write!(s, " l2={}", tensor.l2.name());
    }
    if tensor.store != LoadKind::Plain {
        let _ = write!(
            s,
            " store={} fence={}",
            tensor.store.name(),
            tensor.fence.name()
        );
    }
    if let Some(cb) = &tensor.circular {
        let war = match (cb.war, cb.ws) {
            (_, Some(ws)) => {
                let regs = ws
                    .registers
                    .map(|(p, c)| format!(", registers=[{p}, {c}]"))
                    .unwrap_or_default();
                format!(", warp_specialized({}{regs}, warp={})", ws.on, ws.warp)
            }
            (WarMode::Sync, None) => String::new(),
            (WarMode::Mbarrier, None) => ", war=mbarrier".into(),
        };
        let _ = write!(
            s,
            " circular_buffer(stages={}, prefetch={}{war})",
            cb.stages, cb.prefetch
        );
    }
    s.push('\n');
}

/// An expression's line: `out = op(operands)`.
fn print_expr(f: &Fusion, e: &Expr, s: &mut String) {
    use std::fmt::Write;
    let _ = write!(s, "  {} = ", f.tensors[e.output].name);
    let _ = match &e.op {
        Op::Set => write!(s, "set"),
        Op::Unary(u) => write!(s, "{}", u.name()),
        Op::Binary(b) => write!(s, "{}", b.name()),
        Op::Ternary(t) => write!(s, "{}", t.name()),
        Op::Cast(d) => write!(s, "cast<{d}>"),
        Op::Broadcast { axes } => write!(s, "broadcast{axes:?}"),
        Op::Permute { dims } => write!(s, "permute{dims:?}"),
        Op::Expand { shape } => write!(
            s,
            "expand[{}]",
            shape
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Op::Slice {
            axis, start, step, ..
        } => write!(s, "slice@{axis}<{start}:{step}>"),
        Op::Pad {
            axis,
            before,
            after,
            value,
        } => write!(s, "pad@{axis}<{before}, {after}, {value}>"),
        Op::Cat { axis } => write!(s, "cat@{axis}"),
        Op::Reshape => write!(s, "reshape"),
        Op::ExpandBlocks { block } => write!(s, "expand_blocks{block:?}"),
        Op::Gather {
            axis,
            select: false,
        } => write!(s, "gather@{axis}"),
        Op::Gather { axis, select: true } => write!(s, "index_select@{axis}"),
        Op::Reduce { op, axes } => write!(s, "{}{axes:?}", op.name()),
        Op::Mma => write!(s, "mma"),
        Op::Iota { axis } => write!(s, "iota@{axis}"),
        Op::ElementIndex { axes } => write!(s, "element_index{axes:?}"),
        Op::Full { value } => write!(s, "full<{value}>"),
    };
    s.push('(');
    for (i, o) in e.inputs.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        let _ = match o {
            Operand::Tensor(t) => write!(s, "{}", f.tensors[*t].name),
            Operand::Scalar(v) => write!(s, "{v}"),
            Operand::Count(c) => match f.counts[*c].minus {
                0.0 => write!(s, "count({})", f.count_size(*c)),
                m => write!(s, "count({} - {m})", f.count_size(*c)),
            },
        };
    }
    s.push_str(")\n");
}
