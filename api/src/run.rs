//! One run: what to run ([`RunRequest`]), what it measured ([`RunResult`]) or why it could not
//! ([`RunError`]), and the pieces of a measurement: the device ([`DeviceInfo`]), timings
//! ([`Timing`]), the kernel's attributes, validations against the float64 reference
//! ([`Check`]), the copy and cuBLAS ceilings and the torch peers ([`PeersReport`]).
//!
//! Moved here from the runner's `engine`, `gpu.rs`, `validate.rs` and `peers.rs` (which
//! re-export them), unchanged: the JSON is the one docs/api.md describes.

use hopfuse::plan::ConcreteLaunch;
use hopfuse::{DType, IndexType};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;

/// Everything one run needs; the program travels as text so a service can send it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// The program's file name, for diagnostics and the report.
    pub file: String,
    pub source: String,
    pub sizes: BTreeMap<String, i64>,
    /// Values of scalar inputs (`input eps: f32`) by name, replacing the program's `= value`
    /// or the seeded draw (the CLI's `--scalar eps=1e-6`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scalars: BTreeMap<String, f64>,
    pub iters: u32,
    pub warmup: u32,
    pub seed: u64,
    /// `None`: `i32` when every tensor has fewer than 2^31 elements, else `i64`.
    pub index: Option<IndexType>,
    /// Measure the device-to-device copy ceiling.
    pub copy_ceiling: bool,
    /// Also time the fusion's torch twin, eagerly and under `torch.compile`, interleaved with
    /// the kernel (the runner's `peers.rs`; single-program runs only, A/B runs ignore it).
    #[serde(default)]
    pub peers: bool,
    /// Compile the kernel with a clock probe (`CompileOptions::clock_probe`) and report the SM
    /// clock of its last timed launch (`RunResult::clock`; single-program runs: an A/B run
    /// compiles the probe in but reports no reading).
    #[serde(default)]
    pub clock: bool,
    /// Compile the kernel generic over its sizes (read from its size parameters at run time)
    /// rather than specialised to `sizes` (the default: `CompileOptions::specialize`, the size
    /// symbols constants), to compare the two (the CLI's `--generic`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub generic: bool,
    /// Integer inputs filled with packed-document ids instead of seeded values (the CLI's
    /// `--documents doc_q,doc_k:512`): by input name, the documents' mean length. Along the
    /// input's last axis the ids run 0,0,..,1,1,..; inputs given the same mean length share
    /// their documents position by position (the runner's `data::DocumentIds`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub documents: BTreeMap<String, NonZeroU32>,
}

impl RunRequest {
    /// The most timed (and warm-up) launches the engine takes.
    pub const MAX_ITERS: u32 = 100_000;

    /// Refuses iteration counts outside `1..=MAX_ITERS` (warm-up: `0..=MAX_ITERS`).
    pub fn check(&self) -> Result<(), RunError> {
        if self.iters == 0 || self.iters > Self::MAX_ITERS {
            return Err(RunError::new(
                Stage::Request,
                format!("iters must be in 1..={}", Self::MAX_ITERS),
            ));
        }
        if self.warmup > Self::MAX_ITERS {
            return Err(RunError::new(
                Stage::Request,
                format!("warmup must be at most {}", Self::MAX_ITERS),
            ));
        }
        Ok(())
    }
}

/// Which part of a run failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Request,
    Compile,
    Sizes,
    Nvrtc,
    Cuda,
    Reference,
}

impl Stage {
    /// The name in the JSON (`error.stage`).
    pub fn name(self) -> &'static str {
        match self {
            Stage::Request => "request",
            Stage::Compile => "compile",
            Stage::Sizes => "sizes",
            Stage::Nvrtc => "nvrtc",
            Stage::Cuda => "cuda",
            Stage::Reference => "reference",
        }
    }
}

/// A run that could not produce a result (a failed validation is a result, not an error).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub struct RunError {
    pub stage: Stage,
    pub message: String,
}

impl RunError {
    pub fn new(stage: Stage, message: impl Into<String>) -> RunError {
        RunError {
            stage,
            message: message.into(),
        }
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stage = match self.stage {
            Stage::Request => "bad request",
            Stage::Compile => "compile error",
            Stage::Sizes => "sizes",
            Stage::Nvrtc => "NVRTC",
            Stage::Cuda => "CUDA",
            Stage::Reference => "reference evaluator",
        };
        write!(f, "{stage}: {}", self.message)
    }
}

/// How the timed launches keep the working set from being served out of L2.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", try_from = "L2PolicyRecord")]
pub enum L2Policy {
    /// The working set is larger than twice the L2: nothing needed.
    None,
    /// Launches cycle through `sets` copies of every tensor.
    Rotate { sets: u32 },
    /// A `bytes` scratch buffer is written (untimed) before every launch.
    Flush { bytes: u64 },
}

/// An [`L2Policy`]'s JSON read as one flat record (the same JSON as the tagged enum; serde's
/// reader for internally tagged enums costs the playground's wasm far more).
#[derive(Deserialize)]
struct L2PolicyRecord {
    kind: L2PolicyKind,
    #[serde(default)]
    sets: Option<u32>,
    #[serde(default)]
    bytes: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum L2PolicyKind {
    None,
    Rotate,
    Flush,
}

impl TryFrom<L2PolicyRecord> for L2Policy {
    type Error = &'static str;

    fn try_from(r: L2PolicyRecord) -> Result<L2Policy, &'static str> {
        Ok(match r.kind {
            L2PolicyKind::None => L2Policy::None,
            L2PolicyKind::Rotate => L2Policy::Rotate {
                sets: r.sets.ok_or("a `rotate` L2 policy needs `sets`")?,
            },
            L2PolicyKind::Flush => L2Policy::Flush {
                bytes: r.bytes.ok_or("a `flush` L2 policy needs `bytes`")?,
            },
        })
    }
}

impl fmt::Display for L2Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            L2Policy::None => write!(f, "none (working set > 2x L2)"),
            L2Policy::Rotate { sets } => write!(f, "rotating {sets} copies of every tensor"),
            L2Policy::Flush { bytes } => write!(
                f,
                "L2 flushed by writing {} MiB before each launch",
                bytes >> 20
            ),
        }
    }
}

/// The device-to-device copy ceiling.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CopyCeiling {
    /// Size of one copy; it moves twice this (read + written).
    pub buffer_bytes: u64,
    pub timing: Timing,
    pub gbps: f64,
    /// `run`: measured by this run; `worker_start`: measured once when the worker process
    /// started and reused by every run of that process (see `age_s`).
    #[serde(default)]
    pub measured: CeilingWhen,
    /// Seconds from the measurement to this run (0 for `run`).
    #[serde(default)]
    pub age_s: f64,
}

/// When a copy ceiling was measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CeilingWhen {
    /// By the run that reports it.
    #[default]
    Run,
    /// Once, when the (warm) worker process started.
    WorkerStart,
}

/// The cuBLAS ceiling of a matrix-product fusion (the runner's `cublas.rs`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GemmCeiling {
    /// The call, e.g. `cublasGemmEx(N, T, m=4096, n=4096, k=4096) f32 x f32 -> f32, compute 32F`.
    pub call: String,
    pub timing: Timing,
    pub tflops: f64,
    /// cuBLAS's output on tensor set 0 against the same float64 reference as the kernel.
    pub validation: Check,
    /// Rounds cuBLAS was timed in, alternating with the kernel's (the order flipped every
    /// round, so both see the same GPU state); 1: in one block after the kernel's launches
    /// (an A/B run, and results from before rounds).
    #[serde(default = "one_round")]
    pub rounds: u32,
}

fn one_round() -> u32 {
    1
}

/// What one run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub file: String,
    pub kernel: String,
    pub sizes: BTreeMap<String, i64>,
    pub seed: u64,
    pub index_type: IndexType,
    /// Why that index type (with `--index`: "requested").
    pub index_reason: String,
    pub launch: ConcreteLaunch,
    pub attributes: KernelAttributes,
    pub cubin_bytes: usize,
    pub nvrtc_ms: f64,
    pub device: DeviceInfo,
    /// Bytes of every tensor of one launch.
    pub working_set_bytes: u64,
    pub l2_policy: L2Policy,
    pub warmup: u32,
    pub timing: Timing,
    /// `LaunchPlan::min_global_bytes` with these sizes.
    pub min_global_bytes: u64,
    pub gbps: f64,
    pub copy: Option<CopyCeiling>,
    /// `gbps / copy.gbps`.
    pub fraction_of_copy: Option<f64>,
    /// `2 M N K` when the fusion is a matrix product ([`hopfuse::LaunchPlan::matmul`]).
    #[serde(default)]
    pub flops: Option<f64>,
    /// `flops` / median time, in 1e12 per second.
    #[serde(default)]
    pub tflops: Option<f64>,
    /// cuBLAS on the same shape, layouts and types, timed the same way in the same process.
    #[serde(default)]
    pub cublas: Option<GemmCeiling>,
    /// `tflops / cublas.tflops`.
    #[serde(default)]
    pub fraction_of_cublas: Option<f64>,
    /// Why a matrix product has no cuBLAS ceiling (unsupported types, cuBLAS missing, ...).
    #[serde(default)]
    pub cublas_skipped: Option<String>,
    /// How the float64 reference was computed (on the host, or cuBLAS DGEMM for a large
    /// matrix product).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Outputs of the first launch against the reference.
    pub validation: Vec<Check>,
    /// The outputs of the first tensor set checked again after every timed launch (catches
    /// races that show up only sometimes).
    pub validation_after_timing: Vec<Check>,
    pub passed: bool,
    /// The torch twin eager and under `torch.compile`, timed interleaved with the kernel
    /// (`hopfuse run --peers`; the runner's `peers.rs`). Absent unless asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peers: Option<PeersReport>,
    /// The kernel profiled with Nsight Compute after the run (`hopfuse run --profile`, a
    /// service run with `"profile": true`; the runner's `profile/`), or why it could not be.
    /// Absent unless asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<crate::profile::ProfileReport>,
    /// How many of the grid's CTAs (or clusters) the GPU holds at once and so in how many
    /// waves the grid runs (the runner's `occupancy.rs`). Absent from results of runners older
    /// than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub residency: Option<Residency>,
    /// Sentences about the launch the user should act on, e.g. a persistent grid that does not
    /// fit the resident clusters. Absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The SM clock the kernel ran at, from its clock probe (a run with `clock`). Absent
    /// unless asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockReading>,
    /// Set when the fusion ran as several kernels in order (no scheduler takes it whole: the
    /// compiler's `segment` module): why, and each kernel timed alone. `kernel`, `launch` and
    /// `attributes` are then the first kernel's, `timing` the kernels launched in order, and
    /// `min_global_bytes` the whole fusion's (its inputs read and outputs written once, the
    /// intermediates not counted). Absent for one kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segments: Option<SegmentsRun>,
    /// The inputs filled with packed-document ids, and their documents' mean length (the
    /// request's [`RunRequest::documents`]). Absent when every input was seeded as usual.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub documents: BTreeMap<String, NonZeroU32>,
}

impl RunResult {
    /// Kernels the run launched each time: those of its `segments`, else one.
    pub fn kernel_count(&self) -> usize {
        self.segments.as_ref().map_or(1, |s| s.kernels.len())
    }
}

/// The kernels of a segmented run ([`RunResult::segments`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentsRun {
    /// Why the fusion is not one kernel.
    pub reason: String,
    pub kernels: Vec<SegmentRun>,
    /// The tensors passed between kernels through global memory, with their bytes at the
    /// run's sizes.
    pub intermediates: Vec<IntermediateRun>,
}

/// One kernel of a segmented run, timed alone (with the run's L2 policy).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentRun {
    pub segment: String,
    pub kernel: String,
    pub scheduler: String,
    /// Why the segment ends where it does.
    pub reason: String,
    pub launch: ConcreteLaunch,
    pub timing: Timing,
    /// Its own inputs read and outputs written once, intermediates included.
    pub min_global_bytes: u64,
    pub gbps: f64,
    /// This kernel's Nsight Compute profile, when the run asked for one (each kernel of the
    /// run is profiled; `RunResult::profile` is then none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<crate::profile::ProfileReport>,
}

/// A tensor between two kernels of a segmented run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IntermediateRun {
    pub name: String,
    pub dtype: DType,
    pub bytes: u64,
}

/// What a kernel's clock probe recorded in its last timed launch: thread 0 of each of the first
/// CTAs (at most 1024) counted `%clock64` cycles and `%globaltimer` nanoseconds from the
/// kernel's entry to its end. The clock drops while the tensor cores are busy and is back
/// within microseconds of the work stopping, so only a probe inside the kernel sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClockReading {
    /// The SM clock in MHz: the CTAs' cycles over their nanoseconds, summed.
    pub sm_clock_mhz: f64,
    /// CTAs whose thread 0 recorded.
    pub ctas: u32,
    /// The median CTA's lifetime as thread 0 saw it, in microseconds.
    pub cta_median_us: f64,
    /// The launch the probe recorded (the last timed one), in microseconds.
    pub launch_us: f64,
    /// For a matrix product: 2 M N K over (that launch's time x clock x the device's SMs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flop_per_sm_cycle: Option<f64>,
    /// For a product of 16-bit operands: `flop_per_sm_cycle` over the tensor cores' dense
    /// 16-bit FLOP per SM per cycle (`hopfuse::target::TENSOR_FLOP_PER_SM_CYCLE_16BIT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction_of_tensor_peak: Option<f64>,
}

/// What a [`Residency`] counts: single CTAs, or clusters of CTAs for a kernel launched in
/// clusters (which the GPU schedules whole).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResidentUnit {
    Cta,
    Cluster,
}

/// How many units (CTAs or clusters) of one launch the GPU holds at once, from the driver's
/// occupancy calculator for this kernel, block and shared memory, and so how many waves the
/// grid runs in: a grid of `grid` units runs in `ceil(grid / resident)` waves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Residency {
    pub unit: ResidentUnit,
    /// CTAs per unit: 1, or the CTAs of one cluster.
    pub unit_ctas: u32,
    /// Units in the grid.
    pub grid: u64,
    /// The most units resident at once on this GPU; absent when the driver could not say
    /// (`unknown` says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident: Option<u64>,
    /// CTAs resident per SM (`cuOccupancyMaxActiveBlocksPerMultiprocessor`; `resident` is this
    /// times the SM count). Only for single CTAs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_sm: Option<u32>,
    /// `ceil(grid / resident)`; absent when `resident` is unknown or 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waves: Option<u64>,
    /// The driver call that answered `resident` (or failed): `cuOccupancyMaxActiveClusters` or
    /// `cuOccupancyMaxActiveBlocksPerMultiprocessor`.
    pub query: String,
    /// The grid does not depend on the problem sizes (every extent of the plan's grid is a
    /// constant): a persistent kernel, which loops over its work itself. Such a grid should fit
    /// in one wave; the runner warns (`RunResult::warnings`) when it does not.
    pub persistent: bool,
    /// Why `resident` is unknown (the occupancy query failed, e.g. on a driver without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown: Option<String>,
}

impl Residency {
    /// `32 clusters of 4 CTAs`, `128 CTAs`: `n` units of this record.
    pub fn units(&self, n: u64) -> String {
        match self.unit {
            ResidentUnit::Cta => count(n, "CTA"),
            ResidentUnit::Cluster => format!(
                "{} of {}",
                count(n, "cluster"),
                count(u64::from(self.unit_ctas), "CTA")
            ),
        }
    }

    /// Where `resident` came from: `cuOccupancyMaxActiveClusters`, or
    /// `cuOccupancyMaxActiveBlocksPerMultiprocessor: 1 per SM x 132 SMs`.
    pub fn source(&self) -> String {
        match (self.per_sm, self.resident) {
            (Some(per_sm), Some(resident)) if per_sm > 0 => format!(
                "{}: {per_sm} per SM x {} SMs",
                self.query,
                resident / u64::from(per_sm)
            ),
            _ => self.query.clone(),
        }
    }

    /// The waves figure in words: `2 (32 clusters of 4 CTAs, at most 30 resident:
    /// cuOccupancyMaxActiveClusters; persistent grid)`, or why it is unknown (the CLI's
    /// `waves` line and the playground's).
    pub fn text(&self) -> String {
        let persistent = if self.persistent {
            "; persistent grid"
        } else {
            ""
        };
        let grid = self.units(self.grid);
        match (self.resident, self.waves) {
            (Some(resident), Some(waves)) => format!(
                "{waves} ({grid}, at most {resident} resident: {}{persistent})",
                self.source()
            ),
            (Some(resident), None) => format!(
                "none ({grid}, but {resident} resident: {}{persistent})",
                self.source()
            ),
            (None, _) => format!(
                "unknown ({grid}{persistent}): {}",
                self.unknown.as_deref().unwrap_or("no reason given")
            ),
        }
    }
}

/// `n` and the noun, in the plural unless `n` is 1.
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Where a run is, for a caller that reports progress (the service's worker).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Progress {
    /// hopfuse compile (program text to CUDA and plan).
    Lowering,
    /// The float64 reference on the host.
    Reference,
    /// NVRTC to a CUBIN.
    Nvrtc,
    /// The first launch.
    Launch,
    /// Outputs against the reference.
    Validate,
    /// The timed launches.
    Time,
    /// The device-to-device copy ceiling.
    Ceiling,
    /// The kernel again under Nsight Compute (runs that ask for a profile).
    Profile,
}

impl Progress {
    /// The name in the JSON (an event's `step`, a result's `progress`).
    pub fn name(self) -> &'static str {
        match self {
            Progress::Lowering => "lowering",
            Progress::Reference => "reference",
            Progress::Nvrtc => "nvrtc",
            Progress::Launch => "launch",
            Progress::Validate => "validate",
            Progress::Time => "time",
            Progress::Ceiling => "ceiling",
            Progress::Profile => "profile",
        }
    }
}

/// The device a run used.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub sm_count: i32,
    pub l2_bytes: u64,
    pub max_dynamic_smem_optin: u32,
    /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0.
    pub driver_version: i32,
    pub total_memory_bytes: u64,
    /// The SM clock's maximum in MHz (`CU_DEVICE_ATTRIBUTE_CLOCK_RATE`); absent from results
    /// from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sm_clock_mhz: Option<u32>,
}

/// Statistics of timed samples, in microseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub samples: usize,
    pub min_us: f64,
    pub median_us: f64,
    pub max_us: f64,
}

impl Timing {
    pub fn from_samples(mut us: Vec<f64>) -> Option<Timing> {
        if us.is_empty() || us.iter().any(|t| !t.is_finite()) {
            return None;
        }
        us.sort_by(f64::total_cmp);
        let n = us.len();
        Some(Timing {
            samples: n,
            min_us: us[0],
            median_us: median_of_sorted(&us),
            max_us: us[n - 1],
        })
    }

    /// GB/s (1e9 bytes per second) of moving `bytes` in the median time.
    pub fn gbps(&self, bytes: u64) -> f64 {
        bytes as f64 / (self.median_us * 1e3)
    }

    /// TFLOP/s (1e12 floating-point operations per second) of `flops` in the median time.
    pub fn tflops(&self, flops: f64) -> f64 {
        flops / (self.median_us * 1e6)
    }
}

/// The median of finite values; `None` when there are none or one is not finite.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(median_of_sorted(&values))
}

fn median_of_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `cuFuncGetAttribute` of a loaded kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelAttributes {
    pub registers_per_thread: i32,
    pub local_bytes_per_thread: i32,
    pub static_smem_bytes: i32,
    pub max_threads_per_block: i32,
    /// `CU_FUNC_ATTRIBUTE_BINARY_VERSION`: 90 for sm_90a.
    pub binary_version: i32,
}

/// How one output compared to the reference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub output: String,
    pub dtype: DType,
    pub elements: usize,
    /// `||out - ref||_2 / ||ref||_2` over the elements where the reference is finite; when the
    /// reference is all zeros, the absolute `||out - ref||_2` (so an exact match is still 0).
    pub rel_l2: f64,
    /// `max |out - ref|` over the elements where the reference is finite.
    pub max_abs: f64,
    /// The relative-L2 tolerance the output earns: its dtype's ([`DType::tolerance`]), or larger
    /// when it is computed from a low-precision product (`hopfuse::backend::reference::tolerance`).
    pub tolerance: f64,
    /// Elements where the reference is finite but the output is NaN or infinite (unwritten
    /// elements keep the NaN poison and land here).
    pub non_finite: usize,
    /// Elements where the reference itself is NaN or infinite: they must match it exactly
    /// (NaN for NaN, the same infinity) and are left out of the L2 sums.
    pub reference_non_finite: usize,
    /// Of those, how many the output did not match.
    pub reference_non_finite_mismatched: usize,
    /// Index and values of the first element that broke a rule, for the report.
    pub first_bad: Option<BadElement>,
    pub passed: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BadElement {
    pub index: usize,
    pub output: f64,
    pub reference: f64,
}

/// One peer's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerResult {
    /// `eager` or `torch.compile`.
    pub name: String,
    /// Over all rounds (absent when the peer failed).
    #[serde(default)]
    pub timing: Option<Timing>,
    /// Its outputs of the first call against the float64 reference.
    #[serde(default)]
    pub validation: Vec<Check>,
    pub passed: bool,
    /// Seconds of the first call, which compiles (and autotunes); absent for `eager`.
    #[serde(default)]
    pub compile_s: Option<f64>,
    /// This peer's median time / the kernel's: above 1, hopfuse is faster.
    #[serde(default)]
    pub speedup: Option<f64>,
    /// Why the peer has no timing (an exception in torch, a wrong output shape, ...).
    #[serde(default)]
    pub error: Option<String>,
}

/// The peers of one run (`RunResult::peers`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PeersReport {
    /// Why no peer was timed (no torch, no CUDA in torch, the subprocess failed); the kernel's
    /// result is then exactly as without peers.
    #[serde(default)]
    pub unavailable: Option<String>,
    /// `torch.__version__`.
    #[serde(default)]
    pub torch: Option<String>,
    /// Rounds of kernel timing alternated with peer timing.
    #[serde(default)]
    pub rounds: u32,
    #[serde(default)]
    pub peers: Vec<PeerResult>,
    /// The fastest peer that validated.
    #[serde(default)]
    pub best: Option<String>,
    /// The best peer's median / the kernel's median (above 1: hopfuse is faster).
    #[serde(default)]
    pub speedup: Option<f64>,
    /// The smallest and largest of the same ratio per round (round medians): its spread.
    #[serde(default)]
    pub speedup_min: Option<f64>,
    #[serde(default)]
    pub speedup_max: Option<f64>,
}

impl PeersReport {
    /// A report of no peers, with the reason.
    pub fn unavailable(why: impl Into<String>) -> PeersReport {
        PeersReport {
            unavailable: Some(why.into()),
            ..PeersReport::default()
        }
    }
}

/// A kernel that fails on purpose instead of the program (`hopfuse serve --fault-kernels`, the
/// device check of the service; the runner's `faults.rs` holds the kernels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// `mbarrier.try_wait` on a barrier that expects an arrival that never comes.
    Deadlock,
    /// Stores through a pointer near address 0: `CUDA_ERROR_ILLEGAL_ADDRESS`.
    IllegalAddress,
    /// Not CUDA: NVRTC fails.
    NvrtcError,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The L2 policy reads back from the JSON it writes (a tagged object), and a record that
    /// lacks its variant's field is refused.
    #[test]
    fn l2_policies_round_trip() {
        for p in [
            L2Policy::None,
            L2Policy::Rotate { sets: 9 },
            L2Policy::Flush { bytes: 1 << 27 },
        ] {
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(
                serde_json::from_str::<L2Policy>(&json).unwrap(),
                p,
                "{json}"
            );
        }
        assert_eq!(
            serde_json::to_value(L2Policy::Rotate { sets: 9 }).unwrap(),
            serde_json::json!({"kind": "rotate", "sets": 9})
        );
        assert!(serde_json::from_str::<L2Policy>(r#"{"kind": "rotate"}"#).is_err());
        assert!(serde_json::from_str::<L2Policy>(r#"{"kind": "spill"}"#).is_err());
    }

    /// The `done` event's run result in each recorded H100 stream of docs/recordings (runs of
    /// runners older than `residency` and `warnings`).
    fn recorded_results() -> Vec<(&'static str, serde_json::Value)> {
        [
            (
                "exp_2d_h100.sse",
                include_str!("../../docs/recordings/exp_2d_h100.sse"),
            ),
            (
                "exp_2d_profile_h100.sse",
                include_str!("../../docs/recordings/exp_2d_profile_h100.sse"),
            ),
            (
                "matmul_h100.sse",
                include_str!("../../docs/recordings/matmul_h100.sse"),
            ),
        ]
        .into_iter()
        .map(|(name, sse)| {
            let data = sse
                .split("\n\n")
                .find(|b| b.starts_with("event: done"))
                .and_then(|b| b.split_once("\ndata: "))
                .unwrap_or_else(|| panic!("{name}: no done event"))
                .1;
            let event: serde_json::Value = serde_json::from_str(data).unwrap();
            (name, event["result"]["result"].clone())
        })
        .collect()
    }

    /// Results recorded before `residency` and `warnings` existed still read (as none), and
    /// write back without them.
    #[test]
    fn recorded_results_without_residency_still_read() {
        for (name, recorded) in recorded_results() {
            assert!(recorded.get("residency").is_none(), "{name}");
            let r: RunResult = serde_json::from_value(recorded)
                .unwrap_or_else(|e| panic!("{name} no longer reads: {e}"));
            assert_eq!((&r.residency, r.warnings.len()), (&None, 0), "{name}");
            let written = serde_json::to_value(&r).unwrap();
            assert!(written.get("residency").is_none(), "{name}");
            assert!(written.get("warnings").is_none(), "{name}");
            assert_eq!(serde_json::from_value::<RunResult>(written).unwrap(), r);
        }
    }

    /// A result with a residency and a warning reads back the same, both known and unknown.
    #[test]
    fn residency_round_trips() {
        let (_, recorded) = recorded_results().remove(2);
        let mut r: RunResult = serde_json::from_value(recorded).unwrap();
        let known = Residency {
            unit: ResidentUnit::Cluster,
            unit_ctas: 4,
            grid: 32,
            resident: Some(30),
            per_sm: None,
            waves: Some(2),
            query: "cuOccupancyMaxActiveClusters".into(),
            persistent: true,
            unknown: None,
        };
        let unknown = Residency {
            unit: ResidentUnit::Cta,
            unit_ctas: 1,
            grid: 4096,
            resident: None,
            per_sm: None,
            waves: None,
            query: "cuOccupancyMaxActiveBlocksPerMultiprocessor".into(),
            persistent: false,
            unknown: Some("CUDA_ERROR_NOT_SUPPORTED".into()),
        };
        for (residency, warnings, unit) in [
            (
                known,
                vec!["persistent grid of 32 clusters ...".to_string()],
                "cluster",
            ),
            (unknown, vec![], "cta"),
        ] {
            r.residency = Some(residency);
            r.warnings = warnings;
            let json = serde_json::to_value(&r).unwrap();
            assert_eq!(json["residency"]["unit"], unit);
            assert_eq!(serde_json::from_value::<RunResult>(json).unwrap(), r);
        }
    }

    /// The names the playground shows are the names in the JSON.
    #[test]
    fn names_are_the_json_names() {
        for s in [
            Stage::Request,
            Stage::Compile,
            Stage::Sizes,
            Stage::Nvrtc,
            Stage::Cuda,
            Stage::Reference,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.name());
        }
        for p in [
            Progress::Lowering,
            Progress::Reference,
            Progress::Nvrtc,
            Progress::Launch,
            Progress::Validate,
            Progress::Time,
            Progress::Ceiling,
            Progress::Profile,
        ] {
            assert_eq!(serde_json::to_value(p).unwrap(), p.name());
        }
    }
}
