//! The clock probe (`CompileOptions::clock_probe`, `hopfuse run --clock`), in one place: the
//! module global the runner reads (`runner/src/clock.rs`), the prelude that defines it, the
//! line that reads the clocks at the kernel's entry and the one that records them, and where
//! that record goes.
//!
//! Placement matters to the kernel's speed (measured on the H100, docs/benchmarks.md): a branch
//! at entry, or a record in a tail both warp roles join or in the producers' branch, makes ptxas
//! move a matrix product's main-loop address arithmetic off the uniform registers (6% slower).
//! So every thread reads the clocks at entry without a branch, and in a warp-specialized kernel
//! the record ends the consumers' branch, where thread 0 is.

use crate::kir::{Kernel, Stmt};

/// The module global (`[CTAS][2]` of cycles, nanoseconds) the runner reads after the timed
/// launches, and how many CTAs it has slots for.
pub const SYMBOL: &str = "hf_clock_probe";
pub const CTAS: usize = 1024;

#[cfg(feature = "clock-probe")]
pub(super) const PRELUDE: &str =
    "// Clock probe (`hopfuse run --clock`): every thread reads the clocks at entry (no branch:
// one there costs ptxas uniform registers in the main loop); thread 0 of each of the first
// HF_CLOCK_CTAS CTAs writes the SM cycles (%clock64) and nanoseconds (%globaltimer) since then
// into its slot at its end. The runner reads the last launch's after the timed launches. Each
// pair of reads is in the same order, so their skews cancel.
#define HF_CLOCK_CTAS 1024
__device__ unsigned long long hf_clock_probe[HF_CLOCK_CTAS][2];
__device__ __forceinline__ unsigned long long hf_clock64() {
  unsigned long long c;
  asm volatile(\"mov.u64 %0, %%clock64;\" : \"=l\"(c));
  return c;
}
__device__ __forceinline__ unsigned long long hf_globaltimer() {
  unsigned long long t;
  asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t));
  return t;
}
__device__ __forceinline__ void hf_clock_record(unsigned long long t0, unsigned long long c0) {
  const unsigned cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0 && cta < HF_CLOCK_CTAS) {
    const unsigned long long t1 = hf_globaltimer(), c1 = hf_clock64();
    hf_clock_probe[cta][0] = c1 - c0;
    hf_clock_probe[cta][1] = t1 - t0;
  }
}
";

/// The kernel's first line: every thread reads the clocks (no branch).
pub(super) const ENTRY: &str =
    "  const unsigned long long hf_clock_t0 = hf_globaltimer(), hf_clock_c0 = hf_clock64();\n";

/// The record (thread 0 of each of the first `CTAS` CTAs writes its slot), without indent.
pub(super) const RECORD: &str = "hf_clock_record(hf_clock_t0, hf_clock_c0);";

/// The warp roles whose consumers' branch ends with the record: the kernel's last top-level
/// ones (thread 0 is a consumer: the producers are the last warps of each period,
/// `passes::tma::warp_specialize`; a cluster's exit barrier after them is left out). `None`:
/// the record is the kernel's last line.
pub(super) fn record_in_roles(k: &Kernel) -> Option<&Stmt> {
    k.body
        .iter()
        .rev()
        .find(|s| matches!(s, Stmt::WarpRoles(_)))
}
