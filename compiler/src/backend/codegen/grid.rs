//! Grid reductions in the generated CUDA ([`Stmt::GridReduce`], the scheme is
//! [`crate::passes::grid`]'s): the workspace parameter (one ticket counter and one partial
//! array per grid reduction) and the call of the `hf_grid_reduce` helper ([`PRELUDE`]).

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
    if slots(k) == 0 {
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
}
