//! The kernel IR: a tree of loops, conditionals, allocations, computations and barriers over
//! buffers, with index arithmetic as [`Val`] trees. Every pass takes and returns a [`Kernel`];
//! [`Kernel::print`] is the dump the playground shows after each pass.

use crate::dtype::DType;
use crate::fusion::{BinaryOp, ExprId, MemoryType, ParallelType, ReduceOp, TensorId, UnaryOp};
use crate::plan::SizeExpr;

mod print;

pub use print::{access_text, IrLines};

crate::id::define_id!(
    /// A buffer: its place in [`Kernel::buffers`].
    pub BufferId => Buffer
);
crate::id::define_id!(
    /// A loop key (see `passes::Keys`): loops with equal keys iterate the same index space.
    pub LoopKey =>
);

/// Integer index arithmetic.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Val {
    Int(i64),
    /// A size parameter (`M`).
    Size(String),
    /// A loop index variable, by name.
    Var(String),
    /// threadIdx.x, blockIdx.y, ...
    Hw(ParallelType),
    Add(Box<Val>, Box<Val>),
    Sub(Box<Val>, Box<Val>),
    Mul(Box<Val>, Box<Val>),
    Div(Box<Val>, Box<Val>),
    Mod(Box<Val>, Box<Val>),
    CeilDiv(Box<Val>, Box<Val>),
    Lt(Box<Val>, Box<Val>),
    Eq(Box<Val>, Box<Val>),
    And(Box<Val>, Box<Val>),
    /// Bitwise exclusive or (the shared-memory swizzle of TMA boxes).
    Xor(Box<Val>, Box<Val>),
    /// The smaller of two values (the last, partial group of a persistent grid's raster).
    Min(Box<Val>, Box<Val>),
    /// CTAs in the (one-dimensional) grid, `gridDim.x`: a persistent kernel's stride over its
    /// tiles, fixed only at launch.
    Ctas,
    True,
    /// The thread's warp index in the block, made warp-uniform (`__shfl_sync` from lane 0):
    /// predicates around warp-collective instructions are built from it.
    Warp,
    /// `elect.sync`: true on exactly one lane of the (whole, converged) warp.
    Elect,
}

#[allow(clippy::should_implement_trait)]
impl Val {
    pub fn add(a: Val, b: Val) -> Val {
        Val::Add(Box::new(a), Box::new(b))
    }
    pub fn mul(a: Val, b: Val) -> Val {
        Val::Mul(Box::new(a), Box::new(b))
    }
    pub fn div(a: Val, b: Val) -> Val {
        Val::Div(Box::new(a), Box::new(b))
    }
    pub fn rem(a: Val, b: Val) -> Val {
        Val::Mod(Box::new(a), Box::new(b))
    }
    pub fn ceil_div(a: Val, b: Val) -> Val {
        Val::CeilDiv(Box::new(a), Box::new(b))
    }
    pub fn lt(a: Val, b: Val) -> Val {
        Val::Lt(Box::new(a), Box::new(b))
    }
    pub fn sub(a: Val, b: Val) -> Val {
        Val::Sub(Box::new(a), Box::new(b))
    }
    pub fn min(a: Val, b: Val) -> Val {
        Val::Min(Box::new(a), Box::new(b))
    }
    pub fn eq(a: Val, b: Val) -> Val {
        Val::Eq(Box::new(a), Box::new(b))
    }
    pub fn and(a: Val, b: Val) -> Val {
        match (a, b) {
            (Val::True, x) | (x, Val::True) => x,
            (a, b) => Val::And(Box::new(a), Box::new(b)),
        }
    }
    pub fn all(vals: impl IntoIterator<Item = Val>) -> Val {
        vals.into_iter().fold(Val::True, Val::and)
    }

    pub fn from_size(e: &SizeExpr) -> Val {
        match e {
            SizeExpr::Const(c) => Val::Int(*c),
            SizeExpr::Sym(s) => Val::Size(s.clone()),
            SizeExpr::Add(a, b) => Val::add(Val::from_size(a), Val::from_size(b)),
            SizeExpr::Mul(a, b) => Val::mul(Val::from_size(a), Val::from_size(b)),
            SizeExpr::CeilDiv(a, b) => Val::ceil_div(Val::from_size(a), Val::from_size(b)),
            SizeExpr::Max(a, _) => Val::from_size(a),
        }
    }

    /// The two operands of a binary node.
    pub fn operands(&self) -> Option<(&Val, &Val)> {
        match self {
            Val::Add(a, b)
            | Val::Sub(a, b)
            | Val::Mul(a, b)
            | Val::Div(a, b)
            | Val::Mod(a, b)
            | Val::CeilDiv(a, b)
            | Val::Lt(a, b)
            | Val::Eq(a, b)
            | Val::And(a, b)
            | Val::Xor(a, b)
            | Val::Min(a, b) => Some((a, b)),
            _ => None,
        }
    }

    /// The same binary node over new operands.
    pub fn with_operands(&self, a: Val, b: Val) -> Val {
        let (a, b) = (Box::new(a), Box::new(b));
        match self {
            Val::Add(..) => Val::Add(a, b),
            Val::Sub(..) => Val::Sub(a, b),
            Val::Mul(..) => Val::Mul(a, b),
            Val::Div(..) => Val::Div(a, b),
            Val::Mod(..) => Val::Mod(a, b),
            Val::CeilDiv(..) => Val::CeilDiv(a, b),
            Val::Lt(..) => Val::Lt(a, b),
            Val::Eq(..) => Val::Eq(a, b),
            Val::And(..) => Val::And(a, b),
            Val::Xor(..) => Val::Xor(a, b),
            Val::Min(..) => Val::Min(a, b),
            v => v.clone(),
        }
    }

    /// The value, with `leaf` giving the value of each leaf that is not a constant (`None`: not
    /// known, and so neither is the whole; so is a division by zero or an overflow). Comparisons
    /// and `&&` are 1 or 0.
    pub fn eval_with(&self, leaf: &dyn Fn(&Val) -> Option<i64>) -> Option<i64> {
        let bin = |f: fn(i64, i64) -> Option<i64>| {
            let (a, b) = self.operands()?;
            f(a.eval_with(leaf)?, b.eval_with(leaf)?)
        };
        match self {
            Val::Int(i) => Some(*i),
            Val::True => Some(1),
            Val::Add(..) => bin(i64::checked_add),
            Val::Sub(..) => bin(i64::checked_sub),
            Val::Mul(..) => bin(i64::checked_mul),
            Val::Div(..) => bin(i64::checked_div),
            Val::Mod(..) => bin(i64::checked_rem),
            Val::CeilDiv(..) => bin(|a, b| a.checked_add(b.checked_sub(1)?)?.checked_div(b)),
            Val::Lt(..) => bin(|a, b| Some((a < b) as i64)),
            Val::Eq(..) => bin(|a, b| Some((a == b) as i64)),
            Val::And(..) => bin(|a, b| Some((a != 0 && b != 0) as i64)),
            Val::Xor(..) => bin(|a, b| Some(a ^ b)),
            Val::Min(..) => bin(|a, b| Some(a.min(b))),
            Val::Size(_) | Val::Var(_) | Val::Hw(_) | Val::Warp | Val::Elect | Val::Ctas => {
                leaf(self)
            }
        }
    }

    /// Whether `leaf` holds for some leaf of the tree.
    pub fn any_leaf(&self, leaf: &dyn Fn(&Val) -> bool) -> bool {
        match self.operands() {
            Some((a, b)) => a.any_leaf(leaf) || b.any_leaf(leaf),
            None => leaf(self),
        }
    }

    /// Replaces hardware index `p` (e.g. `threadIdx.x`) by `with`.
    pub fn subst_hw(&self, p: ParallelType, with: &Val) -> Val {
        match (self, self.operands()) {
            (Val::Hw(q), _) if *q == p => with.clone(),
            (_, Some((a, b))) => self.with_operands(a.subst_hw(p, with), b.subst_hw(p, with)),
            (v, None) => v.clone(),
        }
    }

    /// Replaces variable `name` by `with`.
    pub fn subst(&self, name: &str, with: &Val) -> Val {
        match (self, self.operands()) {
            (Val::Var(n), _) if n == name => with.clone(),
            (_, Some((a, b))) => self.with_operands(a.subst(name, with), b.subst(name, with)),
            (v, None) => v.clone(),
        }
    }

    pub fn mentions(&self, name: &str) -> bool {
        self.any_leaf(&|v| matches!(v, Val::Var(n) if n == name))
    }

    /// `c` when the value is `c * name + (terms without name)` with a constant `c` (0 when
    /// `name` does not appear); `None` when `name` appears in any other way (under a division,
    /// a remainder, a product with another variable).
    pub fn linear_coefficient(&self, name: &str) -> Option<i64> {
        match self {
            Val::Var(n) if n == name => Some(1),
            Val::Add(a, b) => a
                .linear_coefficient(name)?
                .checked_add(b.linear_coefficient(name)?),
            Val::Sub(a, b) => a
                .linear_coefficient(name)?
                .checked_sub(b.linear_coefficient(name)?),
            Val::Mul(a, b) => match (&**a, &**b) {
                (x, Val::Int(k)) | (Val::Int(k), x) => x.linear_coefficient(name)?.checked_mul(*k),
                _ => (!self.mentions(name)).then_some(0),
            },
            _ => (!self.mentions(name)).then_some(0),
        }
    }

    fn prec(&self) -> u8 {
        match self {
            Val::And(..) => 1,
            Val::Lt(..) | Val::Eq(..) => 2,
            Val::Add(..) | Val::Sub(..) => 3,
            Val::Mul(..) | Val::Div(..) | Val::Mod(..) => 4,
            _ => 5,
        }
    }

    /// C-like text; `hw` names hardware indices.
    /// Readable text (the kernel IR dump).
    pub fn text(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, false);
        out
    }

    /// Appends the expression to `out`; `cuda` selects the CUDA spelling of hardware indices
    /// and ceiling division. One buffer, no allocation per node: this runs for every access of
    /// every pass dump.
    pub fn write(&self, out: &mut String, cuda: bool) {
        let bin = |a: &Val, op: &str, b: &Val, p: u8, out: &mut String| {
            let (pl, pr) = (a.prec() < p, b.prec() <= p);
            if pl {
                out.push('(');
            }
            a.write(out, cuda);
            if pl {
                out.push(')');
            }
            out.push(' ');
            out.push_str(op);
            out.push(' ');
            if pr {
                out.push('(');
            }
            b.write(out, cuda);
            if pr {
                out.push(')');
            }
        };
        match self {
            Val::Int(i) => write_int(*i, out),
            Val::Size(s) | Val::Var(s) => out.push_str(s),
            Val::Hw(p) => {
                let name = p.cuda_index().unwrap_or("0");
                if cuda {
                    out.push_str("((index_t)");
                    out.push_str(name);
                    out.push(')');
                } else {
                    out.push_str(name);
                }
            }
            Val::Add(a, b) => bin(a, "+", b, 3, out),
            Val::Sub(a, b) => bin(a, "-", b, 3, out),
            Val::Mul(a, b) => bin(a, "*", b, 4, out),
            Val::Div(a, b) => bin(a, "/", b, 4, out),
            Val::Mod(a, b) => bin(a, "%", b, 4, out),
            Val::CeilDiv(a, b) | Val::Min(a, b) => {
                out.push_str(match (self, cuda) {
                    (Val::Min(..), true) => "hf_min<index_t>(",
                    (Val::Min(..), false) => "min(",
                    (_, true) => "hf_ceil_div<index_t>(",
                    (_, false) => "ceilDiv(",
                });
                a.write(out, cuda);
                out.push_str(", ");
                b.write(out, cuda);
                out.push(')');
            }
            Val::Ctas => out.push_str(if cuda {
                "((index_t)gridDim.x)"
            } else {
                "gridDim.x"
            }),
            Val::Lt(a, b) => bin(a, "<", b, 2, out),
            Val::Eq(a, b) => bin(a, "==", b, 2, out),
            Val::And(a, b) => bin(a, "&&", b, 1, out),
            // Always parenthesized: C binds `^` below `==` and `<`.
            Val::Xor(a, b) => {
                out.push('(');
                bin(a, "^", b, 5, out);
                out.push(')');
            }
            Val::True => out.push_str("true"),
            Val::Warp => out.push_str(if cuda { "hf_warp" } else { "warp" }),
            Val::Elect => out.push_str(if cuda {
                "hf_elect_one()"
            } else {
                "elect_one()"
            }),
        }
    }

    /// Whether the warp index appears (the kernel then computes it once at entry).
    pub fn mentions_warp(&self) -> bool {
        self.any_leaf(&|v| matches!(v, Val::Warp))
    }

    /// Whether a ceiling division appears (the CUDA prelude then needs its helper).
    pub fn has_ceil_div(&self) -> bool {
        match self.operands() {
            Some((a, b)) => {
                matches!(self, Val::CeilDiv(..)) || a.has_ceil_div() || b.has_ceil_div()
            }
            None => false,
        }
    }

    /// Whether a minimum appears (the CUDA prelude then needs its helper).
    pub fn has_min(&self) -> bool {
        match self.operands() {
            Some((a, b)) => matches!(self, Val::Min(..)) || a.has_min() || b.has_min(),
            None => false,
        }
    }
}

pub(crate) use crate::text::write_int;

/// A read or write of a buffer element. `index` is None until the indexing pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Access {
    pub buffer: BufferId,
    pub index: Option<Val>,
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
    Cast(DType, Box<Data>),
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
    /// `const index_t var = value;`
    Let {
        var: String,
        value: Val,
    },
    /// Initialises every mbarrier of array `bars` to its arrival count and fences the init
    /// (issued by one thread; a block barrier follows).
    MbarInit {
        bars: usize,
    },
    /// Invalidates every mbarrier of array `bars` (one thread, after a block barrier).
    MbarInval {
        bars: usize,
    },
    /// Arrives on `bars[slot]` and announces `bytes` of asynchronous copies to it.
    MbarArriveExpectTx {
        bars: usize,
        slot: Val,
        bytes: i64,
    },
    /// Announces `bytes` more of asynchronous copies to `bars[slot]` without arriving (a copy
    /// that is issued only under a condition).
    MbarExpectTx {
        bars: usize,
        slot: Val,
        bytes: i64,
    },
    /// Every thread waits until phase `parity` of `bars[slot]` has completed.
    MbarWait {
        bars: usize,
        slot: Val,
        parity: Val,
    },
    /// Releases `bars[slot]`: every thread arrives, or (`per_warp`) each warp converges with
    /// `__syncwarp` and its lane 0 arrives once for it.
    MbarArrive {
        bars: usize,
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
    /// One tensor-core product `m64nNk16` of the warp group (`wgmma.mma_async`), asynchronous
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
    WarpRoles {
        is_producer: Val,
        producer: Vec<Stmt>,
        consumer: Vec<Stmt>,
        registers: Option<(u32, u32)>,
        consumer_threads: i64,
    },
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
}

/// `D (+)= A x B` on one `m64nNk16` tile: A is 64 x 16, B is 16 x N, D the f32 accumulator
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
    /// f16 or bf16.
    pub input: DType,
    /// Whether to add to the accumulator (`scale-d`): a flag that is 0 until the first wgmma
    /// on it has run (which then needs no zero fill); None: always.
    pub accumulate: Option<Access>,
}

/// What a [`Stmt::TmaLoad`] issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyKind {
    /// `cp.async.bulk.tensor.Nd` through tensor map `map` (an index into `Kernel::tensor_maps`).
    Tile { map: usize },
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
    pub bars: usize,
    pub slot: Val,
    /// `.multicast::cluster` to the first `ctas` CTAs of the cluster (mask `(1 << ctas) - 1`):
    /// the copy lands at the same offset in each, completing on the same barrier in each.
    pub multicast: Option<i64>,
}

/// A TMA store of one box: shared memory at `src` to the tensor of map `map` at `coords`.
#[derive(Clone, Debug, PartialEq)]
pub struct TmaStore {
    pub map: usize,
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
    /// CTAs per cluster (1 when the kernel is not launched in clusters).
    pub fn cluster_ctas(&self) -> i64 {
        self.cluster.map_or(1, |c| c.iter().product())
    }

    /// The id of every buffer, in order.
    pub fn buffer_ids(&self) -> impl Iterator<Item = BufferId> + use<> {
        (0..self.buffers.len()).map(BufferId::new)
    }
}

/// Calls `f` on every statement of `body` and of the bodies inside it, outer ones first.
pub fn for_each_stmt<'a>(body: &'a [Stmt], f: &mut dyn FnMut(&'a Stmt)) {
    for st in body {
        f(st);
        match st {
            Stmt::Loop(l) => for_each_stmt(&l.body, f),
            Stmt::If { then, els, .. } => {
                for_each_stmt(then, f);
                for_each_stmt(els, f);
            }
            Stmt::WarpRoles {
                producer, consumer, ..
            } => {
                for_each_stmt(producer, f);
                for_each_stmt(consumer, f);
            }
            _ => {}
        }
    }
}

pub fn for_each_block_mut(body: &mut Vec<Stmt>, f: &mut dyn FnMut(&mut Vec<Stmt>)) {
    for st in body.iter_mut() {
        match st {
            Stmt::Loop(l) => for_each_block_mut(&mut l.body, f),
            Stmt::If { then, els, .. } => {
                for_each_block_mut(then, f);
                for_each_block_mut(els, f);
            }
            Stmt::WarpRoles {
                producer, consumer, ..
            } => {
                for_each_block_mut(producer, f);
                for_each_block_mut(consumer, f);
            }
            _ => {}
        }
    }
    f(body);
}

fn map_access(a: &mut Access, f: &mut dyn FnMut(&Val) -> Val) {
    if let Some(i) = &a.index {
        a.index = Some(f(i));
    }
}

impl Data {
    /// Visits every read.
    pub fn for_each_read(&self, f: &mut dyn FnMut(&Access)) {
        match self {
            Data::Read(a) => f(a),
            Data::Unary(_, _, x) | Data::Cast(_, x) => x.for_each_read(f),
            Data::Binary(_, _, x, y) => {
                x.for_each_read(f);
                y.for_each_read(f);
            }
            Data::Param(..) | Data::Literal(..) => {}
        }
    }

    /// Visits every read, mutably.
    pub fn for_each_read_mut(&mut self, f: &mut dyn FnMut(&mut Access)) {
        match self {
            Data::Read(a) => f(a),
            Data::Unary(_, _, x) | Data::Cast(_, x) => x.for_each_read_mut(f),
            Data::Binary(_, _, x, y) => {
                x.for_each_read_mut(f);
                y.for_each_read_mut(f);
            }
            Data::Param(..) | Data::Literal(..) => {}
        }
    }

    /// Applies `f` to the index of every read.
    pub fn map_vals(&mut self, f: &mut dyn FnMut(&Val) -> Val) {
        self.for_each_read_mut(&mut |a| map_access(a, f));
    }
}

impl Stmt {
    /// Applies `f` to every index value of the statement tree: loop extents, conditions,
    /// accesses, slots, parities and coordinates (used to move a statement to another iteration).
    pub fn map_vals(&mut self, f: &mut dyn FnMut(&Val) -> Val) {
        match self {
            Stmt::Loop(l) => {
                l.extent = f(&l.extent);
                for s in &mut l.body {
                    s.map_vals(f);
                }
            }
            Stmt::If { cond, then, els } => {
                *cond = f(cond);
                for s in then.iter_mut().chain(els.iter_mut()) {
                    s.map_vals(f);
                }
            }
            Stmt::Compute(c) => {
                map_access(&mut c.out, f);
                c.value.map_vals(f);
            }
            Stmt::WarpRoles {
                is_producer,
                producer,
                consumer,
                ..
            } => {
                *is_producer = f(is_producer);
                for s in producer.iter_mut().chain(consumer.iter_mut()) {
                    s.map_vals(f);
                }
            }
            Stmt::BlockReduce { acc, .. } => map_access(acc, f),
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

#[cfg(test)]
mod tests {
    use super::Val;

    fn var(n: &str) -> Val {
        Val::Var(n.into())
    }

    #[test]
    fn the_linear_coefficient_of_a_variable_is_found_through_sums_and_constant_products() {
        // (slot % 3) * 8192 + (m * 256 + k) * 16: k steps by 16, slot does not appear linearly.
        let slot = Val::mul(Val::rem(var("slot"), Val::Int(3)), Val::Int(8192));
        let v = Val::add(
            slot,
            Val::mul(
                Val::add(Val::mul(var("m"), Val::Int(256)), var("k")),
                Val::Int(16),
            ),
        );
        assert_eq!(v.linear_coefficient("k"), Some(16));
        assert_eq!(v.linear_coefficient("m"), Some(4096));
        assert_eq!(v.linear_coefficient("absent"), Some(0));
        assert_eq!(v.linear_coefficient("slot"), None);
        // 3 * k - m: 3; m - 2k: -2; k * m and k / 2 are not linear in k.
        let sub = |a, b| Val::Sub(Box::new(a), Box::new(b));
        assert_eq!(
            sub(Val::mul(Val::Int(3), var("k")), var("m")).linear_coefficient("k"),
            Some(3)
        );
        assert_eq!(
            sub(var("m"), Val::mul(var("k"), Val::Int(2))).linear_coefficient("k"),
            Some(-2)
        );
        assert_eq!(Val::mul(var("k"), var("m")).linear_coefficient("k"), None);
        assert_eq!(
            Val::div(var("k"), Val::Int(2)).linear_coefficient("k"),
            None
        );
    }
}
