//! Grid reductions in the generated CUDA ([`Stmt::GridReduce`], the scheme is
//! [`crate::passes::grid`]'s): the workspace parameter (one ticket counter and one partial
//! array per grid reduction) and the call of the `hf_grid_reduce` helper ([`PRELUDE`]).
//! Split-K's (a `GridReduce` with `split_k`): its workspace (a counter per output tile, then
//! each tile's partial fragments) and the call of `hf_split_k` ([`SPLIT_K_PRELUDE`]).

use super::Emitter;
use crate::dtype::DType;
use crate::kir::{GridReduce, Kernel, Stmt};
use crate::plan::{Constraint, Param, SizeExpr, TensorRole};
use crate::target::GRID_REDUCTION_MAX_BLOCKS;

/// The kernel parameter of the grid reductions' workspace.
const GRID_WORKSPACE: &str = "hf_grid_workspace";

/// 4-byte words of a counter or a partial value: 8 bytes, so a partial of any type up to 8
/// bytes (f64) is aligned.
const SLOT_WORDS: i64 = 2;

/// The helper: stage 1 (publish and take a ticket), stage 2 in the last block (combine in
/// block order, reset the counter). Uses `hf_block_reduce` ([`super::prelude::BLOCK_REDUCE`]).
pub const PRELUDE: &str =
    "// Grid reduction (two stages, deterministic): thread 0 of each block stores the block's
// value `val` (the same in every thread) in the block's slot of `partials` and, after a fence,
// takes a ticket from `counter`. The block that takes the last ticket reads every slot (volatile
// loads, not from L1) in block order, combines them with a block reduction and sets the counter
// back to zero for the next launch. Returns whether this block finished last (the same in
// every thread of the block); there `val` becomes the grid's value in every thread. Every
// thread of the block must call it (it has barriers).
template <typename T, typename Op>
__device__ __forceinline__ bool hf_grid_reduce(T& val, Op op, T identity, T* partials,
                                               unsigned* counter, T* scratch) {
  __shared__ bool hf_last;
  const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  if (tid == 0u) {
    partials[block] = val;
    __threadfence();
    hf_last = atomicAdd(counter, 1u) == blocks - 1u;
  }
  __syncthreads();
  const bool last = hf_last;
  // Every thread has read the flag before a later grid reduction's thread 0 writes it again.
  __syncthreads();
  if (!last) return false;
  __threadfence();
  T r = identity;
  // Volatile loads: another SM's stores never reach this SM's L1 (bool has no __ldcg).
  const volatile T* slots = partials;
  for (unsigned i = tid; i < blocks; i += threads) r = op(r, static_cast<T>(slots[i]));
  val = blockDim.y * blockDim.z == 1u ? hf_block_reduce<true, false, false>(r, op, scratch)
                                      : hf_block_reduce<true, true, true>(r, op, scratch);
  if (tid == 0u) *counter = 0u;
  return true;
}
";

/// The helpers of a warp-specialized kernel's grid reductions, where only the `N` consumer
/// threads (the block's first `N`) take part: their barriers are named barrier 1 over them
/// (`hf_bar_sync<N>`, [`super::prelude::BAR_SYNC`]), not the block's.
pub const CONSUMERS_PRELUDE: &str =
    "// Warp-specialized kernels: `val` reduced over the N consumer threads (the block's first N,
// whole warps; named barrier 1) and returned to every one of them. `scratch` holds one T per warp.
template <unsigned N, typename T, typename Op>
__device__ __forceinline__ T hf_consumers_reduce(T val, Op op, T* scratch) {
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
#pragma unroll
  for (unsigned offset = 16; offset > 0; offset >>= 1) val = op(val, __shfl_xor_sync(0xffffffffu, val, offset));
  if ((tid & 31u) == 0u) scratch[tid / 32u] = val;
  hf_bar_sync<N>();
  T r = scratch[0];
  for (unsigned w = 1; w < N / 32u; ++w) r = op(r, scratch[w]);
  hf_bar_sync<N>();
  return r;
}

// hf_grid_reduce for the N consumer threads of a warp-specialized kernel (the producer warps
// take no part): the same two stages, its barriers named barrier 1 over the consumers, and the
// last block's combine hf_consumers_reduce. `val` is the block's value in every consumer thread.
template <typename T, unsigned N, typename Op>
__device__ __forceinline__ bool hf_grid_reduce_consumers(T& val, Op op, T identity, T* partials,
                                                         unsigned* counter, T* scratch) {
  __shared__ bool hf_last;
  const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  if (tid == 0u) {
    partials[block] = val;
    __threadfence();
    hf_last = atomicAdd(counter, 1u) == blocks - 1u;
  }
  hf_bar_sync<N>();
  const bool last = hf_last;
  // Every consumer has read the flag before a later grid reduction's thread 0 writes it again.
  hf_bar_sync<N>();
  if (!last) return false;
  __threadfence();
  T r = identity;
  // Volatile loads: another SM's stores never reach this SM's L1.
  const volatile T* slots = partials;
  for (unsigned i = tid; i < blocks; i += N) r = op(r, static_cast<T>(slots[i]));
  val = hf_consumers_reduce<N>(r, op, scratch);
  if (tid == 0u) *counter = 0u;
  return true;
}
";

/// Split-K's helper (`passes::grid`'s scheme; one call per kernel, after the k loop).
pub const SPLIT_K_PRELUDE: &str =
    "// Split-K (deterministic): the blocks that differ only along grid dim D form an output tile,
// each holding the sum over one chunk of K in its accumulator fragment (E registers in each of
// the T threads that take part, the block's first T). Each stores its fragment in its chunk's
// slot of the tile's partials (register group i of every thread one coalesced run of float4s,
// to L2), fences, meets the others (hf_bar_sync<BAR>: 0, the block; n, named barrier 1 over the
// n consumer threads) and one thread takes a ticket from the tile's counter. The block that
// takes the last ticket, after a fence, sums the tile's slots in chunk order into its fragment
// (loads from L2, where the other SMs' stores are; the same bits at every launch, whichever
// block finished last), sets the counter back to zero for the next launch and returns true in
// every thread. Workspace: a counter per tile (rounded up to 4), then per tile splits x E x T.
template <unsigned BAR, int E, int T, int D>
__device__ __forceinline__ bool hf_split_k(float* acc, float* workspace) {
  static_assert(E % 4 == 0, \"a fragment is whole float4s\");
  __shared__ bool hf_split_k_last;
  const unsigned split = D == 0 ? blockIdx.x : D == 1 ? blockIdx.y : blockIdx.z;
  const unsigned splits = D == 0 ? gridDim.x : D == 1 ? gridDim.y : gridDim.z;
  const unsigned tile = D == 0   ? blockIdx.y + gridDim.y * blockIdx.z
                        : D == 1 ? blockIdx.x + gridDim.x * blockIdx.z
                                 : blockIdx.x + gridDim.x * blockIdx.y;
  const unsigned tiles = gridDim.x * gridDim.y * gridDim.z / splits;
  unsigned* counter = reinterpret_cast<unsigned*>(workspace) + tile;
  float4* slots = reinterpret_cast<float4*>(workspace + (tiles + 3u) / 4u * 4u) +
                  (size_t)tile * splits * (E / 4) * T;
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  float4* mine = slots + (size_t)split * (E / 4) * T + tid;
#pragma unroll
  for (int i = 0; i < E / 4; ++i)
    __stcg(mine + i * T, make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
  __threadfence();
  hf_bar_sync<BAR>();
  if (tid == 0u) hf_split_k_last = atomicAdd(counter, 1u) == splits - 1u;
  hf_bar_sync<BAR>();
  if (!hf_split_k_last) return false;
  __threadfence();
#pragma unroll
  for (int i = 0; i < E / 4; ++i) {
    const float4 v = __ldcg(slots + i * T + tid);
    acc[4 * i] = v.x; acc[4 * i + 1] = v.y; acc[4 * i + 2] = v.z; acc[4 * i + 3] = v.w;
  }
  for (unsigned c = 1u; c < splits; ++c) {
    const float4* chunk = slots + (size_t)c * (E / 4) * T + tid;
#pragma unroll
    for (int i = 0; i < E / 4; ++i) {
      const float4 v = __ldcg(chunk + i * T);
      acc[4 * i] += v.x; acc[4 * i + 1] += v.y; acc[4 * i + 2] += v.z; acc[4 * i + 3] += v.w;
    }
  }
  if (tid == 0u) *counter = 0u;
  return true;
}
";

/// The split-K combine of a kernel, if it has one: its block dim, and its fragment's registers
/// per thread and the threads that hold them (the consumers of a warp-specialized kernel, else
/// the block).
fn split_k_shape(k: &Kernel) -> Option<(usize, i64, i64)> {
    let mut found = None;
    let mut consumers = None;
    crate::kir::for_each_stmt(&k.body, &mut |s| match s {
        Stmt::GridReduce(g) => {
            if let (Some(d), Some(crate::kir::Val::Int(regs))) =
                (g.split_k, &k.buffers[g.acc.buffer].size)
            {
                found = Some((d, *regs));
            }
        }
        Stmt::WarpRoles(w) => consumers = Some(w.consumer_threads),
        _ => {}
    });
    let threads = consumers.or_else(|| k.block.iter().map(|b| b.as_const()).product())?;
    found.map(|(d, regs)| (d, regs, threads))
}

/// The workspace parameter of a split-K kernel: a counter per tile (the grid without the split
/// dim), rounded up to 4 words, then per tile `splits` x the fragment's floats.
fn split_k_workspace(k: &Kernel) -> Option<Param> {
    let (dim, regs, threads) = split_k_shape(k)?;
    let tiles = k
        .grid
        .iter()
        .enumerate()
        .filter(|&(d, _)| d != dim)
        .map(|(_, g)| g.clone())
        .reduce(crate::passes::mul)
        .unwrap_or(SizeExpr::Const(1));
    let counters = SizeExpr::Mul(
        Box::new(SizeExpr::CeilDiv(
            Box::new(tiles.clone()),
            Box::new(SizeExpr::Const(4)),
        )),
        Box::new(SizeExpr::Const(4)),
    );
    let partials = crate::passes::mul(
        crate::passes::mul(tiles, k.grid[dim].clone()),
        SizeExpr::Const(regs * threads),
    );
    Some(Param::Tensor {
        name: GRID_WORKSPACE.into(),
        dtype: DType::F32,
        role: TensorRole::Workspace,
        shape: vec![SizeExpr::Add(Box::new(counters), Box::new(partials))],
    })
}

/// Whether `acc` is the accumulator of one of the kernel's grid reductions.
pub(super) fn is_grid_accumulator(k: &Kernel, acc: &crate::kir::Access) -> bool {
    let mut found = false;
    crate::kir::for_each_stmt(&k.body, &mut |s| {
        found |= matches!(s, Stmt::GridReduce(g) if g.acc == *acc);
    });
    found
}

/// The grid reductions' slots (how many `GridReduce`s the kernel has: one per reduction).
fn slots(k: &Kernel) -> i64 {
    let mut n = 0;
    crate::kir::for_each_stmt(&k.body, &mut |s| {
        if let Stmt::GridReduce(g) = s {
            n = n.max(g.slot as i64 + 1);
        }
    });
    n
}

/// The workspace parameter of a kernel with grid reductions and its declaration: a counter per
/// grid reduction, then its partial array of [`GRID_REDUCTION_MAX_BLOCKS`] slots.
pub(super) fn workspace_param(k: &Kernel) -> Option<(Param, String)> {
    if let Some(param) = split_k_workspace(k) {
        return Some((param, format!("float* __restrict__ {GRID_WORKSPACE}")));
    }
    let n = slots(k);
    if n == 0 {
        return None;
    }
    let words = n * SLOT_WORDS * (1 + GRID_REDUCTION_MAX_BLOCKS);
    let param = Param::Tensor {
        name: GRID_WORKSPACE.into(),
        dtype: DType::F32,
        role: TensorRole::Workspace,
        shape: vec![SizeExpr::Const(words)],
    };
    Some((param, format!("float* __restrict__ {GRID_WORKSPACE}")))
}

/// The launch constraint of a kernel with grid reductions: its blocks fit the partial arrays.
pub(super) fn constraint(k: &Kernel) -> Option<Constraint> {
    // (Split-K's workspace grows with the grid: no bound.)
    if slots(k) == 0 || split_k_shape(k).is_some() {
        return None;
    }
    let blocks = k
        .grid
        .iter()
        .cloned()
        .reduce(crate::passes::mul)
        .unwrap_or(SizeExpr::Const(1));
    Some(Constraint::AtMost {
        value: blocks,
        max: GRID_REDUCTION_MAX_BLOCKS,
        reason: format!(
            "a grid reduction has a partial-value slot for at most {GRID_REDUCTION_MAX_BLOCKS} blocks (give each thread more elements: a serial split)"
        ),
    })
}

impl Emitter<'_> {
    /// `const bool last = hf_grid_reduce(...)` (see [`PRELUDE`]).
    pub(super) fn grid_reduce(&mut self, g: &GridReduce, depth: usize) {
        if g.split_k.is_some() {
            return self.split_k(g, depth);
        }
        self.uses.grid_reduce = true;
        let (a, f, scratch) = self.reduction_operands(&g.acc, g.op);
        let slots = slots(self.k);
        let counter = g.slot as i64 * SLOT_WORDS;
        let partials = SLOT_WORDS * (slots + g.slot as i64 * GRID_REDUCTION_MAX_BLOCKS);
        let ty = g.dtype.cuda();
        let identity = Self::literal(g.op.identity(), g.dtype);
        let helper = match self.consumer_threads {
            Some(n) => {
                self.uses.grid_reduce_consumers = true;
                format!("hf_grid_reduce_consumers<{ty}, {n}u>")
            }
            None => format!("hf_grid_reduce<{ty}>"),
        };
        self.line(
            depth,
            &format!(
                "const bool {} = {helper}({a}, {f}(), {identity}, reinterpret_cast<{ty}*>({GRID_WORKSPACE} + {partials}), reinterpret_cast<unsigned*>({GRID_WORKSPACE} + {counter}), reinterpret_cast<{ty}*>(hf_smem + {scratch}));",
                g.last
            ),
        );
    }

    /// `const bool {last} = hf_split_k<...>(&{acc}[0], workspace)` (see [`SPLIT_K_PRELUDE`]).
    fn split_k(&mut self, g: &GridReduce, depth: usize) {
        let Some((dim, regs, threads)) = split_k_shape(self.k) else {
            self.line(
                depth,
                "#error \"internal: a split-K combine whose fragment size is not known\"",
            );
            return;
        };
        self.uses.split_k = true;
        // hf_bar_sync's prelude.
        self.uses.named_barrier = true;
        let bar = self.consumer_threads.unwrap_or(0);
        let acc = &self.k.buffers[g.acc.buffer].name;
        self.line(
            depth,
            &format!(
                "const bool {} = hf_split_k<{bar}u, {regs}, {threads}, {dim}>(&{acc}[0], {GRID_WORKSPACE});",
                g.last
            ),
        );
    }
}
