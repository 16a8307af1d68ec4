//! The kernel IR: a tree of loops, conditionals, allocations, computations and barriers over
//! buffers, with index arithmetic as [`Val`] trees. Every pass takes and returns a [`Kernel`];
//! [`Kernel::print`] is the dump the playground shows after each pass.
//!
//! Statements ([`Stmt`]): `Loop`, `If`, `Alloc`, `Compute`, `BlockReduce`, `BlockWelford`, `GridReduce`, `Let`, and the
//! barriers `Sync`, `GroupSync`, `Turn`, `ClusterSync`; the Hopper ones: mbarriers (`MbarInit`,
//! `MbarInval`, `MbarArriveExpectTx`, `MbarExpectTx`, `MbarWait`, `MbarArrive` per warp or per
//! thread), TMA (`TmaLoad`, `TmaStore`, `BulkCommit`, `BulkWaitRead`, `FenceProxyAsync`), tensor
//! cores (`Wgmma` with its [`MmaOperand`]s, `WgmmaFence`, `WgmmaCommit`, `WgmmaWait`,
//! `StMatrix`), `StreamKFixup`, and `WarpRoles` (the warp-specialized split: `setmaxnreg` at the
//! start of each branch, named barriers in the consumer branch). Loops bound to
//! `threadIdx`/`blockIdx` are bindings, not loops. A flat loop carries the merged loops' indices
//! as [`Loop::digits`], printed `for i in N @Serial carrying a in A, b in B:` and emitted as
//! counters stepped by one carry line at the end of its body. Index arithmetic is [`Val`]
//! (with `Val::Warp`, the warp-uniform warp index, and `Val::Elect`, `elect.sync`); data values
//! are `Data` trees. [`Stmt::map_vals`] rewrites every index of a statement tree (used to move
//! a load to another iteration); [`Kernel::stmt_head`] is one statement's line of the dump (how
//! the verifier quotes a statement).

use crate::dtype::DType;
use crate::fusion::{
    BinaryOp, ExprId, MemoryType, ParallelType, ReduceOp, TensorId, TernaryOp, UnaryOp,
};
use crate::plan::SizeExpr;

mod parse;
mod print;
mod val;
mod visit;

pub use parse::{parse, ParseError, MAX_BLOCK_DEPTH, MAX_DEPTH};
pub use print::{access_text, IrLines};
pub use val::Val;
pub use visit::{
    any_stmt, find_mut, for_each_block_mut, for_each_in_loops, for_each_stmt, for_each_stmt_mut,
    reduce_scratch_per_thread, rewrite_post, rewrite_pre, try_rewrite_post, try_rewrite_pre, visit,
    visit_mut, visit_stmt_mut, walk, Flow, Step, Visitor, VisitorMut,
};

crate::id::define_id!(
    /// A buffer: its place in [`Kernel::buffers`].
    pub BufferId => Buffer
);
crate::id::define_id!(
    /// An mbarrier array: its place in [`Kernel::mbarriers`].
    pub MbarId => MbarArray
);
crate::id::define_id!(
    /// A tensor map: its place in [`Kernel::tensor_maps`].
    pub TensorMapId => crate::plan::TensorMapSpec
);
crate::id::define_id!(
    /// A loop key (see `passes::Keys`): loops with equal keys iterate the same index space.
    pub LoopKey =>
);

/// A read or write of a buffer element. `index` is None until the indexing pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Access {
    pub buffer: BufferId,
    pub index: Option<Val>,
}

/// What a [`Data::Index`] is the index of.
#[derive(Clone, Debug, PartialEq)]
pub enum IndexOf {
    /// Along one logical axis (an `iota`), an i32.
    Axis(usize),
    /// The row-major index over these logical axes, the later axes' extents as strides, an
    /// i64 (`rand`'s element index, `fusion::Op::ElementIndex`): one value, so where the loops
    /// merge the axes it simplifies to the merged loop's index.
    Element(Vec<usize>),
    /// An integer combination of the indices, no one axis's (an i32): a pass's split of an
    /// index expression (`passes::index_float`: the part of an iota difference one unrolled
    /// loop does not change, or the part it does). Written by passes after `indexing`, so it
    /// always has its value.
    Value,
}

impl IndexOf {
    pub fn dtype(&self) -> DType {
        match self {
            IndexOf::Axis(_) | IndexOf::Value => DType::I32,
            IndexOf::Element(_) => DType::I64,
        }
    }
}

/// A data value (in the compute type of its op).
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    Read(Access),
    /// A scalar kernel parameter.
    Param(String, DType),
    Literal(f64, DType),
    Unary(UnaryOp, DType, Box<Data>),
    Binary(BinaryOp, DType, Box<Data>, Box<Data>),
    /// Operands in order (`where`'s condition first); the DType is the values' compute type.
    Ternary(TernaryOp, DType, Box<[Data; 3]>),
    Cast(DType, Box<Data>),
    /// The computed tensor's index `.0` (see [`IndexOf`]); `.1` is filled by the `indexing`
    /// pass from the consumer's root indices.
    Index(IndexOf, Option<Val>),
    /// The value of the view expression `.0` (a `slice`, `pad`, `cat` or `reshape`) where the
    /// enclosing value reads it, recomputed from `.1` instead of read from a buffer: a view
    /// of a view or of a computed tensor (`loop_nest` inlines its operands). The `indexing`
    /// pass indexes `.1`'s `Index` nodes at the reader's indices of the view's output and its
    /// operands' reads at the indices the view maps those to; code is `.1`'s.
    View(ExprId, Box<Data>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ComputeRole {
    Normal,
    /// `acc = identity` before the reduction loops.
    ReductionInit,
    /// `acc = op(acc, x)` inside them.
    ReductionUpdate,
    /// `out = acc` after them (and after the cross-thread reduction).
    ReductionWrite,
    /// An online softmax's running statistics between its tile's reduction loops
    /// (`passes::online_softmax`): the previous maximum, the rescale factor, the rescaled sum
    /// and accumulator. Outside the reduction loops, as a write is.
    OnlineRescale,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Compute {
    /// The fusion expression this computes (for the dump and the messages).
    pub expr: ExprId,
    pub out: Access,
    pub value: Data,
    pub role: ComputeRole,
    /// Width when the compute is one vector access (a loop variable ranging over the lanes).
    pub vector: Option<(String, u32)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Loop {
    /// The loop key (see `passes::Keys`): loops with equal keys iterate the same index space.
    pub key: LoopKey,
    pub var: String,
    pub extent: Val,
    pub parallel: ParallelType,
    pub body: Vec<Stmt>,
    /// A flat loop's digits (warp specialization merges a producer's perfect serial nest into
    /// one loop over the linear count): the merged loops' indices, outermost first, kept as
    /// counters the loop carries. The body reads them as they were; each iteration steps the
    /// innermost and carries into the next, so no index is divided out of the linear count.
    /// Empty for every other loop.
    pub digits: Vec<Digit>,
}

/// One index of a flat loop (`Loop::digits`): its variable and the extent it wraps at.
#[derive(Clone, Debug, PartialEq)]
pub struct Digit {
    pub var: String,
    pub extent: Val,
}

/// The two halves of a turn hand-over between ping-pong groups (`Stmt::Turn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TurnStep {
    /// Wait until the group before has passed the turn (`bar.sync`).
    Wait,
    /// Pass the turn to the next group (`bar.arrive`, not waiting).
    Pass,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Loop(Loop),
    If {
        cond: Val,
        then: Vec<Stmt>,
        els: Vec<Stmt>,
    },
    Alloc(BufferId),
    Compute(Compute),
    /// Every thread gets the reduction of `acc` over the threads that differ only in the
    /// reduced thread dims (`dims[0..3]` = x, y, z).
    BlockReduce {
        acc: Access,
        op: ReduceOp,
        dtype: DType,
        dims: [bool; 3],
    },
    /// A reduction across the blocks of the grid (a reduction axis bound to `blockIdx`):
    /// every thread of every block reaches it with the block's value in `acc` (after a
    /// [`Stmt::BlockReduce`]); afterwards `last` is true in the one block that finished last,
    /// and there every thread's `acc` holds the grid's value. See [`GridReduce`].
    GridReduce(GridReduce),
    /// Every thread of a quad (four consecutive lanes: the threads that hold one row of a
    /// tensor-core accumulator fragment) gets the reduction of its four `acc` values: two
    /// butterfly shuffles (`__shfl_xor_sync` by 1, then 2). Warp-collective: every lane reaches it.
    QuadReduce {
        acc: Access,
        op: ReduceOp,
        dtype: DType,
    },
    /// Every thread gets the Welford statistics of the values of the threads that differ only
    /// in the reduced thread dims (`dims` as [`Stmt::BlockReduce`]'s): each thread's `mean`,
    /// `m2` (the sum of squared deviations from `mean`) and `count` (f32 registers) combined by
    /// Chan's parallel formula, across the warp by shuffles and across warps through the
    /// reduction scratch (`passes::welford`).
    BlockWelford {
        mean: Access,
        m2: Access,
        count: Access,
        dims: [bool; 3],
    },
    /// `__syncthreads()`
    Sync,
    /// A barrier among the threads of one thread group: named barrier
    /// `GROUP_BARRIER_BASE + g` over `threads` threads, `g` the linear index of the thread's
    /// `dims` (`threadIdx.y`, `threadIdx.z`). Placed where every shared access it orders is
    /// group-local (a group writes and reads only its own part: a warp group's epilogue).
    GroupSync {
        dims: Vec<ParallelType>,
        threads: i64,
    },
    /// Ping-pong consumer groups take turns with the buffered loop. `Wait` is `bar.sync` on the
    /// thread's group `g`'s turn barrier (`target::turn_barrier(g)`), `Pass` is `bar.arrive`
    /// on group `(g + 1) % groups`'s; both count two groups' `threads`, so a group's wait
    /// returns once the group before it has passed. `g` is the thread's index along `on`.
    Turn {
        step: TurnStep,
        on: ParallelType,
        groups: i64,
        threads: i64,
    },
    /// `barrier.cluster.arrive` + `barrier.cluster.wait`: every thread of every CTA of the
    /// cluster meets here (after mbarrier init, so no peer signals an uninitialised barrier, and
    /// before exit, so no CTA leaves while a peer may still write its shared memory).
    ClusterSync,
    /// `const index_t var = value;`. With `broadcast`, the value is the same in every lane of
    /// the warp and every lane is here: it is computed once and broadcast from lane 0
    /// (`__shfl_sync`), which pins where it is computed and tells ptxas it is warp-uniform
    /// (the verifier checks both).
    Let {
        var: String,
        value: Val,
        broadcast: bool,
    },
    /// Initialises every mbarrier of array `bars` to its arrival count and fences the init
    /// (issued by one thread; a block barrier follows).
    MbarInit {
        bars: MbarId,
    },
    /// Invalidates every mbarrier of array `bars` (one thread, after a block barrier).
    MbarInval {
        bars: MbarId,
    },
    /// Arrives on `bars[slot]` and announces `bytes` of asynchronous copies to it.
    MbarArriveExpectTx {
        bars: MbarId,
        slot: Val,
        bytes: i64,
    },
    /// Announces `bytes` more of asynchronous copies to `bars[slot]` without arriving (a copy
    /// that is issued only under a condition).
    MbarExpectTx {
        bars: MbarId,
        slot: Val,
        bytes: i64,
    },
    /// Every thread waits until phase `parity` of `bars[slot]` has completed.
    MbarWait {
        bars: MbarId,
        slot: Val,
        parity: Val,
    },
    /// Releases `bars[slot]`: every thread arrives, or (`per_warp`) each warp converges with
    /// `__syncwarp` and its lane 0 arrives once for it.
    MbarArrive {
        bars: MbarId,
        slot: Val,
        per_warp: bool,
    },
    /// An asynchronous copy of one box from global to shared memory completing on `bars[slot]`.
    TmaLoad(TmaLoad),
    /// An asynchronous TMA copy of one box from shared to global memory (a bulk async-group).
    TmaStore(TmaStore),
    /// `cp.async.bulk.commit_group`: closes the bulk async-group of the stores issued so far.
    BulkCommit,
    /// Stream-K ([`Persistent::stream_k`]), after a piece of a tile's k steps, with the
    /// accumulator `acc` final: a piece that does not end its tile writes its partial sums to
    /// the CTA's slot of the workspace and raises the CTA's flag; the piece that ends a tile
    /// the CTAs before it began waits for each of their flags and adds their partial sums.
    /// `acc` is set by the `mma` pass (the fragment of the product before it).
    StreamKFixup {
        acc: Option<BufferId>,
    },
    /// `cp.async.bulk.wait_group.read N`: waits until at most `N` groups still read shared memory.
    BulkWaitRead(u32),
    /// `fence.proxy.async.shared::cta`: orders this thread's generic shared-memory writes before
    /// later async-proxy reads (TMA stores).
    FenceProxyAsync,
    /// One tensor-core product `m64nNk16` (16-bit operands) or `m64nNk32` (8-bit) of the warp
    /// group (`wgmma.mma_async`), asynchronous
    /// until a [`Stmt::WgmmaWait`] covers its group.
    Wgmma(Wgmma),
    /// `stmatrix.sync.aligned.m8n8.x4.shared.b16`: the warp stores four 8 x 8 matrices of 16-bit
    /// values from registers (`src`: 8 consecutive elements of a local array, 2 per matrix) to
    /// shared memory; each lane gives the address of one matrix row (`dst`: 16 bytes, aligned).
    /// Warp-collective.
    StMatrix {
        dst: Access,
        src: Access,
    },
    /// `wgmma.fence`: orders the warp group's register accesses before the next wgmma.
    WgmmaFence,
    /// `wgmma.commit_group`: closes a group of the wgmmas issued so far.
    WgmmaCommit,
    /// `wgmma.wait_group N`: waits until at most `N` groups are pending (their accumulators may
    /// then be read and their shared-memory operands overwritten).
    WgmmaWait(u32),
    /// Warp specialization: producer warps (a warp-uniform condition) run `producer`, the other
    /// warps run `consumer`. Register counts move with `setmaxnreg` at the start of each branch;
    /// block barriers inside `consumer` are named barriers over its `consumer_threads`.
    WarpRoles(WarpRoles),
}

/// A grid reduction ([`Stmt::GridReduce`]), the deterministic two-stage scheme of nvFuser's
/// grid reductions: thread 0 of each block stores the block's value in the block's slot of
/// partial array `slot` of the kernel's grid workspace and takes a ticket from that array's
/// counter (after a fence); the block that takes the last ticket combines every slot in block
/// order (so the value does not depend on which block finished when), and resets the counter,
/// so the workspace is zero again for the next launch.
#[derive(Clone, Debug, PartialEq)]
pub struct GridReduce {
    pub acc: Access,
    pub op: ReduceOp,
    pub dtype: DType,
    /// The partial array and counter of the workspace (one per grid reduction of the kernel).
    pub slot: usize,
    /// The block-uniform flag the statement declares: this block finished last.
    pub last: String,
    /// Split-K ([`crate::passes::grid`]'s `split_k`): `acc` is a tensor-core product's
    /// accumulator fragment, each block holding the sum over one chunk of K, and this is the
    /// block dim the chunks are bound to. The blocks that differ only along it form a tile:
    /// each publishes its fragment, and the last of the tile to finish sums the tile's partials
    /// in chunk order into its fragment. `None`: a reduction to one value over the whole grid.
    pub split_k: Option<usize>,
}

/// Warp specialization ([`Stmt::WarpRoles`]): producer warps (a warp-uniform condition) run
/// `producer`, the other warps run `consumer`.
#[derive(Clone, Debug, PartialEq)]
pub struct WarpRoles {
    pub is_producer: Val,
    pub producer: Vec<Stmt>,
    pub consumer: Vec<Stmt>,
    /// setmaxnreg counts (producer, consumer), set at the start of each branch.
    pub registers: Option<(u32, u32)>,
    pub consumer_threads: i64,
}

/// A wgmma operand in shared memory, read through a matrix descriptor.
#[derive(Clone, Debug, PartialEq)]
pub struct MmaOperand {
    /// The shared buffer, indexed at the operand tile's first element (its logical position:
    /// the descriptor's swizzle mode applies the swizzle).
    pub tile: Access,
    /// The descriptor without its start address (LBO, SBO, swizzle mode):
    /// [`crate::target::descriptor_bits`].
    pub desc_bits: u64,
    /// MN-major (the `imm-trans` operand): the tile's rows run along K.
    pub transposed: bool,
    /// Swizzle of the operand's layout in bytes (for the dump).
    pub swizzle: u32,
    /// A from registers (the RS form): `tile` is the thread's 16-bit register fragment at the
    /// instruction's first register, eight values (four `.b32` pairs) laid out as the rows and
    /// columns of an f32 accumulator fragment of N = 16 (`target::fragment_row_col`); no
    /// descriptor (`desc_bits` 0, not transposed, swizzle 0).
    pub registers: bool,
}

/// `D (+)= A x B` on one `m64nNkK` tile (K = [`crate::target::wgmma_k`] of the operand type:
/// 16 for f16 / bf16, 32 for e4m3 / e5m2): A is 64 x K, B is K x N, D the f32 accumulator
/// fragment (N / 2 registers per thread of the warp group).
#[derive(Clone, Debug, PartialEq)]
pub struct Wgmma {
    /// The fusion expression (the sum of products) this computes.
    pub expr: ExprId,
    /// The accumulator register array, indexed at the fragment's first register.
    pub acc: Access,
    pub n: i64,
    pub a: MmaOperand,
    pub b: MmaOperand,
    /// A's element type: f16, bf16, e4m3 or e5m2 ([`crate::target::wgmma_types_pair`] with
    /// `b_type`).
    pub a_type: DType,
    /// B's element type.
    pub b_type: DType,
    /// Whether to add to the accumulator (`scale-d`): a flag that is 0 until the first wgmma
    /// on it has run (which then needs no zero fill); None: always.
    pub accumulate: Option<Access>,
}

/// What a [`Stmt::TmaLoad`] issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyKind {
    /// `cp.async.bulk.tensor.Nd` through tensor map `map` (an index into `Kernel::tensor_maps`).
    Tile { map: TensorMapId },
    /// `cp.async.bulk` of one contiguous run.
    Bulk,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TmaLoad {
    pub kind: CopyKind,
    /// The shared buffer; the index is the element offset of the box (its stage).
    pub dst: Access,
    /// The global tensor; for bulk copies the index is the first element of the run.
    pub src: Access,
    /// Box origin in elements, innermost dimension first (tile copies).
    pub coords: Vec<Val>,
    /// Bytes this copy writes into each CTA it writes to.
    pub bytes: i64,
    pub bars: MbarId,
    pub slot: Val,
    /// `.multicast::cluster` to the first `ctas` CTAs of the cluster (mask `(1 << ctas) - 1`):
    /// the copy lands at the same offset in each, completing on the same barrier in each.
    pub multicast: Option<i64>,
}

/// A TMA store of one box: shared memory at `src` to the tensor of map `map` at `coords`.
#[derive(Clone, Debug, PartialEq)]
pub struct TmaStore {
    pub map: TensorMapId,
    pub src: Access,
    /// Box origin in elements, innermost dimension first.
    pub coords: Vec<Val>,
    pub bytes: i64,
}

/// An array of mbarriers in dynamic shared memory.
#[derive(Clone, Debug, PartialEq)]
pub struct MbarArray {
    pub name: String,
    pub count: i64,
    /// Arrivals that complete one phase of each barrier.
    pub arrivals: i64,
    /// Byte offset in dynamic shared memory (8-byte aligned), set by the allocation pass.
    pub smem_offset: Option<Val>,
    /// Released across the cluster: every arrival is made on this barrier in each CTA of the
    /// cluster (its slots are also filled by peers' multicast copies, so a peer may refill them
    /// only when this CTA's readers are done too); `arrivals` counts them all.
    pub cluster_wide: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub name: String,
    pub dtype: DType,
    pub memory: MemoryType,
    /// The fusion tensor stored here (None for reduction accumulators).
    pub tensor: Option<TensorId>,
    /// Elements (local and shared buffers), set by the allocation pass.
    pub size: Option<Val>,
    /// Byte offset in dynamic shared memory, set by the allocation pass.
    pub smem_offset: Option<Val>,
    /// Global tensors: logical extents (outermost first) and whether each axis is broadcast.
    pub global_shape: Vec<(SizeExpr, bool)>,
    /// Global buffers: kernel parameter role.
    pub is_input: bool,
    /// Global inputs: how their loads use L2 (`cache_after(x, l2=evict_last)`).
    pub l2: crate::fusion::L2Policy,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub buffers: Vec<Buffer>,
    pub body: Vec<Stmt>,
    pub block: [SizeExpr; 3],
    pub grid: [SizeExpr; 3],
    /// Loop variables bound to hardware indices, declared once at the top.
    pub hw_vars: Vec<(String, ParallelType)>,
    /// Scratch for block reductions (bytes, at the end of dynamic shared memory).
    pub reduce_scratch: Option<SizeExpr>,
    pub dynamic_smem: SizeExpr,
    /// mbarrier arrays (circular buffers and TMA loads).
    pub mbarriers: Vec<MbarArray>,
    /// Tensor maps of TMA tile loads, passed as kernel parameters in this order.
    pub tensor_maps: Vec<crate::plan::TensorMapSpec>,
    /// setmaxnreg counts (producer, consumer) of a warp-specialized kernel.
    pub register_sharing: Option<(u32, u32)>,
    /// CTAs per cluster along x, y, z (`__cluster_dims__`), when the kernel runs in clusters.
    pub cluster: Option<[i64; 3]>,
    /// A persistent kernel's walk over its tiles (pass `persistent`).
    pub persistent: Option<Persistent>,
    /// The key tiles each CTA visits under a mask that drops whole tiles (passes
    /// `document_tiles`, `mask_list`).
    pub visited: Option<VisitedTiles>,
}

/// The key tiles a CTA visits under a mask that drops whole tiles (passes `document_tiles`,
/// `mask_list`). Before the body, the CTA lists, in order, the key tiles of `key_tile` keys
/// (`j < keys`) that its query tile (`first_query <= i < min(first_query + query_tile,
/// queries)`) may keep a pair of, by the test ([`TileTest`]). The list is in shared memory
/// ([`VISITED_TABLE`], at `smem_offset`), and [`VISITED_COUNT`] holds its length, at least one
/// tile when there is one (tile 0, masked whole, when the test lists none: a row with no key
/// still ends as `0 / 0`). The loop over `var` runs that many iterations, and the index walks
/// read its tile as entry `var` of the list ([`VisitedTiles::tile`]), so the copies, the mask
/// and the bounds follow the tile while the pipeline's slots and phases count iterations.
#[derive(Clone, Debug, PartialEq)]
pub struct VisitedTiles {
    pub var: String,
    pub key_tile: i64,
    pub query_tile: i64,
    pub first_query: Val,
    pub queries: Val,
    pub keys: Val,
    pub test: TileTest,
    /// Byte offset of the list in dynamic shared memory, set by the allocation pass.
    pub smem_offset: Option<Val>,
}

/// Which key tiles [`VisitedTiles`] lists.
#[derive(Clone, Debug, PartialEq)]
pub enum TileTest {
    /// A document mask (pass `document_tiles`): the tiles whose ids (`key_ids[key_row + j]`)
    /// meet the range of the query tile's ids (`query_ids[query_row + i]`) and, with a band,
    /// hold a pair `(i, j)` with `lower <= j - i <= upper`. Every thread of the CTA reads ids.
    Ids {
        query_ids: String,
        query_row: Val,
        key_ids: String,
        key_row: Val,
        /// The band's sides on `j - i`, if the mask has them.
        upper: Option<Val>,
        lower: Option<Val>,
    },
    /// A mask on the query and key indices (pass `mask_list`): the tiles for which `may`, a
    /// condition on the query tile's first and last query ([`TILE_BOUNDS`] 0 and 1) and the key
    /// tile's first and last key (2 and 3), holds. It is false only where the mask keeps no
    /// pair of the two tiles (interval bounds of the mask's expression); `must` holds only
    /// where it keeps every pair. First, in order, the tiles where `must` holds,
    /// [`VISITED_KEPT`] of them (pass `mask_tiles` runs them without the mask), then the
    /// others in order. One warp evaluates the two per tile; no memory is read.
    Bounds { may: Val, must: Val },
}

/// The variables a [`TileTest::Bounds`] condition reads: the query tile's first and last
/// query, the key tile's first and last key.
pub const TILE_BOUNDS: [&str; 4] = ["hf_q0", "hf_q1", "hf_k0", "hf_k1"];

/// The shared-memory list of [`VisitedTiles`] and the variable that holds its length.
pub const VISITED_TABLE: &str = "hf_visited";
pub const VISITED_COUNT: &str = "hf_visited_n";
/// How many of the list's first tiles are wholly kept ([`TileTest::Bounds`]).
pub const VISITED_KEPT: &str = "hf_visited_kept";
/// Key tiles the list holds at most (a launch constraint of the pass).
pub const VISITED_CAPACITY: i64 = 1024;

impl VisitedTiles {
    /// The key tile visited at iteration `n`: entry `n` of the list, clamped into the tiles.
    pub fn tile(&self, n: Val) -> Val {
        Val::IndexIn(
            VISITED_TABLE.to_string(),
            Box::new(n),
            Box::new(self.tiles()),
        )
    }

    /// Key tiles in all: `ceilDiv(keys, key_tile)`.
    pub fn tiles(&self) -> Val {
        Val::ceil_div(self.keys.clone(), Val::Int(self.key_tile))
    }

    /// Shared-memory bytes: the list, its length and kept tiles (16 bytes with padding) and, for ids, each
    /// warp's marks of the tiles its key ids meet (a bit per tile, for up to 32 warps).
    pub fn smem_bytes(&self) -> i64 {
        let marks = match self.test {
            TileTest::Ids { .. } => 32 * (VISITED_CAPACITY / 32) * 4,
            TileTest::Bounds { .. } => 0,
        };
        VISITED_CAPACITY * 4 + 16 + marks
    }

    fn map_vals(&mut self, f: &mut dyn FnMut(&Val) -> Val) {
        let test: Vec<&mut Val> = match &mut self.test {
            TileTest::Ids {
                query_row,
                key_row,
                upper,
                lower,
                ..
            } => [query_row, key_row]
                .into_iter()
                .chain(upper.as_mut())
                .chain(lower.as_mut())
                .collect(),
            TileTest::Bounds { may, must } => vec![may, must],
        };
        for v in [&mut self.first_query, &mut self.queries, &mut self.keys]
            .into_iter()
            .chain(test)
            .chain(self.smem_offset.as_mut())
        {
            *v = f(v);
        }
    }
}

/// How a persistent kernel's CTAs walk the tiles (pass `persistent`): a serial loop over the
/// CTA's tiles stands inside the grid-bound loops, whose variables are not `blockIdx` but the
/// grouped raster of the linear tile.
#[derive(Clone, Debug, PartialEq)]
pub struct Persistent {
    /// The tile loop's variable: how many tiles this CTA (cluster) has taken before.
    pub var: String,
    /// Tiles in the grid-bound space, counted in clusters of tiles in a cluster kernel.
    pub tiles: SizeExpr,
    /// The grid axis the raster's groups run along, and the group size (`persistent(BIDy, 8)`).
    pub along: ParallelType,
    pub group: i64,
    /// The grid-bound loop variables and their values in terms of `var`.
    pub bindings: Vec<(String, ParallelType, Val)>,
    /// Stream-K: the CTAs split the k steps instead of the tiles.
    pub stream_k: Option<StreamK>,
}

/// A stream-K split (`persistent(..., stream_k)`). With `G` CTAs, the first `R = tiles / G`
/// rounds are whole tiles as in a plain persistent grid. The k steps of the tiles left are one
/// linear space of `work` steps, and CTA `b` takes the run `[start(b), start(b + 1))` of it,
/// `start(b) = b * (work / G) + min(b, work % G)`, so runs differ by at most one step. `var`
/// (the tile loop) walks the run's tiles from its last to its first, so that the CTAs stay at
/// about the same k step (and share operands in L2): each run begins at k step 0 of its last
/// tile. In each, the k loop (`k_var`) walks the piece `[lo, hi)` of the tile's `kt` steps,
/// its index offset by `lo`. The piece that ends a tile (`hi = kt`) stores it, after adding the
/// partial sums of the CTAs before it that hold the tile's other pieces, each their first.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamK {
    /// The k loop's variable: the step within the piece (the k index is `k_var + lo`).
    pub k_var: String,
    /// The CTA's constants the values below use (`let`s at the top of the kernel, in order).
    pub consts: Vec<(String, Val)>,
    /// k steps per tile, and in all (also as the launch evaluates it).
    pub kt: Val,
    pub work: Val,
    pub work_size: SizeExpr,
    /// The piece of the current tile: `lo = max(start - t * kt, 0)`, `hi = min(end - t * kt,
    /// kt)` for linear tile `t`.
    pub lo: Val,
    pub hi: Val,
    /// The run's count of k steps before the piece's first (the pipelines' slot and parity).
    pub before: Val,
    /// The split's k step where the current tile starts (a CTA before this one holds a piece
    /// of the tile when its run ends after it).
    pub tile_start: Val,
}

impl StreamK {
    /// Where CTA `cta`'s run starts in the split's k steps (`cta = G`: where they end).
    pub fn run_start(&self, cta: Val) -> Val {
        Val::add(
            Val::mul(cta.clone(), Val::div(self.work.clone(), Val::Ctas)),
            Val::min(cta, Val::rem(self.work.clone(), Val::Ctas)),
        )
    }

    /// Whether the current piece ends its tile (and so stores it).
    pub fn ends_tile(&self) -> Val {
        Val::eq(self.hi.clone(), self.kt.clone())
    }
}

/// Whether a persistent kernel splits its tiles' k steps (stream-K).
pub fn stream_k(k: &Kernel) -> Option<&StreamK> {
    k.persistent.as_ref().and_then(|p| p.stream_k.as_ref())
}

/// The CTA's rank in its cluster (`%cluster_ctarank`), declared at the top of a cluster kernel.
pub const CTA_RANK: &str = "hf_cta_rank";

impl Kernel {
    /// Adds an mbarrier array; its id.
    pub fn push_mbarriers(&mut self, bars: MbarArray) -> MbarId {
        self.mbarriers.push(bars);
        MbarId::new(self.mbarriers.len() - 1)
    }

    /// Every mbarrier array's id, in order.
    pub fn mbarrier_ids(&self) -> impl Iterator<Item = MbarId> {
        (0..self.mbarriers.len()).map(MbarId::new)
    }

    /// Adds a tensor map; its id.
    pub fn push_tensor_map(&mut self, map: crate::plan::TensorMapSpec) -> TensorMapId {
        self.tensor_maps.push(map);
        TensorMapId::new(self.tensor_maps.len() - 1)
    }

    /// Rewrites every value of the kernel: the statements' ([`Stmt::map_vals`]), the buffers'
    /// sizes and offsets, the mbarriers' offsets and the persistent grid's bindings and
    /// stream-K values (the header's size expressions are not values).
    pub fn map_vals(&mut self, f: &mut dyn FnMut(&Val) -> Val) {
        for st in &mut self.body {
            st.map_vals(f);
        }
        for b in &mut self.buffers {
            for v in b.size.iter_mut().chain(b.smem_offset.iter_mut()) {
                *v = f(v);
            }
        }
        for m in &mut self.mbarriers {
            if let Some(v) = &mut m.smem_offset {
                *v = f(v);
            }
        }
        if let Some(v) = &mut self.visited {
            v.map_vals(f);
        }
        if let Some(p) = &mut self.persistent {
            for (_, _, v) in &mut p.bindings {
                *v = f(v);
            }
            if let Some(sk) = &mut p.stream_k {
                for (_, v) in &mut sk.consts {
                    *v = f(v);
                }
                for v in [
                    &mut sk.kt,
                    &mut sk.work,
                    &mut sk.lo,
                    &mut sk.hi,
                    &mut sk.before,
                    &mut sk.tile_start,
                ] {
                    *v = f(v);
                }
            }
        }
    }

    /// A kernel with nothing in it yet: one thread, one block, no buffers, no shared memory
    /// (what the first pass starts from, and what the dump's parser fills in).
    pub fn empty(name: String) -> Kernel {
        let one = || SizeExpr::Const(1);
        Kernel {
            name,
            buffers: Vec::new(),
            body: Vec::new(),
            block: [one(), one(), one()],
            grid: [one(), one(), one()],
            hw_vars: Vec::new(),
            reduce_scratch: None,
            dynamic_smem: SizeExpr::Const(0),
            mbarriers: Vec::new(),
            tensor_maps: Vec::new(),
            register_sharing: None,
            cluster: None,
            persistent: None,
            visited: None,
        }
    }

    /// CTAs per cluster (1 when the kernel is not launched in clusters).
    pub fn cluster_ctas(&self) -> i64 {
        self.cluster.map_or(1, |c| c.iter().product())
    }

    /// The id of every buffer, in order.
    pub fn buffer_ids(&self) -> impl Iterator<Item = BufferId> + use<> {
        (0..self.buffers.len()).map(BufferId::new)
    }
}

fn map_access(a: &mut Access, f: &mut dyn FnMut(&Val) -> Val) {
    if let Some(i) = &a.index {
        a.index = Some(f(i));
    }
}

impl Data {
    /// Calls `f` on each operand of the node, in order (none for a leaf): with
    /// [`Data::each_operand_mut`], the one place that knows which nodes hold values.
    pub fn each_operand<'d>(&'d self, f: &mut dyn FnMut(&'d Data)) {
        match self {
            Data::Unary(_, _, x) | Data::Cast(_, x) | Data::View(_, x) => f(x),
            Data::Binary(_, _, x, y) => {
                f(x);
                f(y);
            }
            Data::Ternary(_, _, xs) => xs.iter().for_each(f),
            Data::Read(_) | Data::Param(..) | Data::Literal(..) | Data::Index(..) => {}
        }
    }

    /// [`Data::each_operand`], mutably.
    pub fn each_operand_mut(&mut self, f: &mut dyn FnMut(&mut Data)) {
        match self {
            Data::Unary(_, _, x) | Data::Cast(_, x) | Data::View(_, x) => f(x),
            Data::Binary(_, _, x, y) => {
                f(x);
                f(y);
            }
            Data::Ternary(_, _, xs) => xs.iter_mut().for_each(f),
            Data::Read(_) | Data::Param(..) | Data::Literal(..) | Data::Index(..) => {}
        }
    }

    /// The first `Some` that `f` gives, over the nodes of the value in pre-order.
    pub fn find_map<'d, T>(&'d self, f: &mut dyn FnMut(&'d Data) -> Option<T>) -> Option<T> {
        if let Some(t) = f(self) {
            return Some(t);
        }
        let mut found = None;
        self.each_operand(&mut |x| {
            if found.is_none() {
                found = x.find_map(f);
            }
        });
        found
    }

    /// Whether `f` holds for some node of the value (pre-order, stopping at the first).
    pub fn any(&self, f: &mut dyn FnMut(&Data) -> bool) -> bool {
        self.find_map(&mut |n| f(n).then_some(())).is_some()
    }

    /// Rewrites the value in pre-order: `f` may replace a node and says whether it did, in
    /// which case the walk does not enter what it put there.
    pub fn rewrite(&mut self, f: &mut dyn FnMut(&mut Data) -> bool) {
        if !f(self) {
            self.each_operand_mut(&mut |x| x.rewrite(f));
        }
    }

    /// Visits every read.
    pub fn for_each_read(&self, f: &mut dyn FnMut(&Access)) {
        match self {
            Data::Read(a) => f(a),
            d => d.each_operand(&mut |x| x.for_each_read(f)),
        }
    }

    /// Visits every read, mutably.
    pub fn for_each_read_mut(&mut self, f: &mut dyn FnMut(&mut Access)) {
        match self {
            Data::Read(a) => f(a),
            d => d.each_operand_mut(&mut |x| x.for_each_read_mut(f)),
        }
    }

    /// Applies `f` to the index of every read.
    pub fn map_vals(&mut self, f: &mut dyn FnMut(&Val) -> Val) {
        self.for_each_read_mut(&mut |a| map_access(a, f));
        self.for_each_index_mut(&mut |v| *v = f(v));
    }

    /// Visits the value of every [`Data::Index`] that has one.
    pub fn for_each_index_mut(&mut self, f: &mut dyn FnMut(&mut Val)) {
        match self {
            Data::Index(_, Some(v)) => f(v),
            d => d.each_operand_mut(&mut |x| x.for_each_index_mut(f)),
        }
    }
}

impl Stmt {
    /// The statement's bodies, in the order they print: a loop's body, a conditional's `then`
    /// and `els`, warp roles' `producer` and `consumer`. The one place that knows which
    /// statements hold statements; every walk of the tree goes through it (see `visit`).
    pub fn children(&self) -> impl Iterator<Item = &[Stmt]> {
        let (a, b): (Option<&[Stmt]>, Option<&[Stmt]>) = match self {
            Stmt::Loop(l) => (Some(&l.body), None),
            Stmt::If { then, els, .. } => (Some(then), Some(els)),
            Stmt::WarpRoles(w) => (Some(&w.producer), Some(&w.consumer)),
            _ => (None, None),
        };
        a.into_iter().chain(b)
    }

    /// [`Stmt::children`], mutably (a body may grow or shrink).
    pub fn children_mut(&mut self) -> impl Iterator<Item = &mut Vec<Stmt>> {
        let (a, b) = match self {
            Stmt::Loop(l) => (Some(&mut l.body), None),
            Stmt::If { then, els, .. } => (Some(then), Some(els)),
            Stmt::WarpRoles(w) => (Some(&mut w.producer), Some(&mut w.consumer)),
            _ => (None, None),
        };
        a.into_iter().chain(b)
    }

    /// Applies `f` to every index value of the statement tree: loop extents, conditions,
    /// accesses, slots, parities and coordinates (used to move a statement to another iteration).
    pub fn map_vals(&mut self, f: &mut dyn FnMut(&Val) -> Val) {
        self.map_own_vals(f);
        for body in self.children_mut() {
            for s in body {
                s.map_vals(f);
            }
        }
    }

    /// [`Stmt::map_vals`] on this statement's own values, not its bodies'.
    fn map_own_vals(&mut self, f: &mut dyn FnMut(&Val) -> Val) {
        match self {
            Stmt::Loop(l) => {
                l.extent = f(&l.extent);
                for d in &mut l.digits {
                    d.extent = f(&d.extent);
                }
            }
            Stmt::If { cond, .. } => *cond = f(cond),
            Stmt::Compute(c) => {
                map_access(&mut c.out, f);
                c.value.map_vals(f);
            }
            Stmt::WarpRoles(w) => w.is_producer = f(&w.is_producer),
            Stmt::BlockReduce { acc, .. } | Stmt::QuadReduce { acc, .. } => map_access(acc, f),
            Stmt::BlockWelford {
                mean, m2, count, ..
            } => {
                for a in [mean, m2, count] {
                    map_access(a, f);
                }
            }
            Stmt::GridReduce(g) => map_access(&mut g.acc, f),
            Stmt::Let { value, .. } => *value = f(value),
            Stmt::MbarArriveExpectTx { slot, .. }
            | Stmt::MbarExpectTx { slot, .. }
            | Stmt::MbarArrive { slot, .. } => *slot = f(slot),
            Stmt::MbarWait { slot, parity, .. } => {
                *slot = f(slot);
                *parity = f(parity);
            }
            Stmt::TmaLoad(t) => {
                map_access(&mut t.dst, f);
                map_access(&mut t.src, f);
                t.coords = t.coords.iter().map(&mut *f).collect();
                t.slot = f(&t.slot);
            }
            Stmt::TmaStore(t) => {
                map_access(&mut t.src, f);
                t.coords = t.coords.iter().map(&mut *f).collect();
            }
            Stmt::Wgmma(w) => {
                map_access(&mut w.acc, f);
                map_access(&mut w.a.tile, f);
                map_access(&mut w.b.tile, f);
                if let Some(a) = &mut w.accumulate {
                    map_access(a, f);
                }
            }
            Stmt::StMatrix { dst, src } => {
                map_access(dst, f);
                map_access(src, f);
            }
            Stmt::WgmmaFence | Stmt::WgmmaCommit | Stmt::WgmmaWait(_) => {}
            Stmt::Alloc(_)
            | Stmt::Sync
            | Stmt::GroupSync { .. }
            | Stmt::Turn { .. }
            | Stmt::ClusterSync
            | Stmt::MbarInit { .. }
            | Stmt::MbarInval { .. }
            | Stmt::BulkCommit
            | Stmt::BulkWaitRead(_)
            | Stmt::FenceProxyAsync
            | Stmt::StreamKFixup { .. } => {}
        }
    }
}
