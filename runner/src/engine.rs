//! One run: compile a program, launch its kernel on the GPU, validate the outputs against the
//! float64 reference and time it. `hopfuse run` is a thin wrapper; the service and `hopfuse
//! bench` send each [`RunRequest`] to a warm `hopfuse worker --serve` child process, which keeps
//! a [`Device`] between runs, and read back a [`RunResult`].

use crate::data;
use crate::gpu::{self, DeviceInfo, Gpu, KernelArgs, KernelAttributes, Spin, Timing};
use crate::nvrtc;
use crate::validate::{self, Check};
use hopfuse::plan::{ConcreteLaunch, Param, SizeExpr, TensorRole};
use hopfuse::{Compilation, CompileOptions, DType, IndexType, LaunchPlan};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use tracing::{debug, info, warn};

/// Everything one run needs; the program travels as text so a service can send it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// The program's file name, for diagnostics and the report.
    pub file: String,
    pub source: String,
    pub sizes: BTreeMap<String, i64>,
    pub iters: u32,
    pub warmup: u32,
    pub seed: u64,
    /// `None`: `i32` when every tensor has fewer than 2^31 elements, else `i64`.
    pub index: Option<IndexType>,
    /// Measure the device-to-device copy ceiling.
    pub copy_ceiling: bool,
    /// Also time the fusion's torch twin, eagerly and under `torch.compile`, interleaved with
    /// the kernel ([`crate::peers`]; single-program runs only, A/B runs ignore it).
    #[serde(default)]
    pub peers: bool,
}

impl RunRequest {
    pub const MAX_ITERS: u32 = 100_000;

    fn check(&self) -> Result<(), RunError> {
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
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum L2Policy {
    /// The working set is larger than twice the L2: nothing needed.
    None,
    /// Launches cycle through `sets` copies of every tensor.
    Rotate { sets: u32 },
    /// A `bytes` scratch buffer is written (untimed) before every launch.
    Flush { bytes: u64 },
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

/// The cuBLAS ceiling of a matrix-product fusion (see [`crate::cublas`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GemmCeiling {
    /// The call, e.g. `cublasGemmEx(N, T, m=4096, n=4096, k=4096) f32 x f32 -> f32, compute 32F`.
    pub call: String,
    pub timing: Timing,
    pub tflops: f64,
    /// cuBLAS's output on tensor set 0 against the same float64 reference as the kernel.
    pub validation: Check,
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
    /// `2 M N K` when the fusion is a matrix product ([`LaunchPlan::matmul`]).
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
    /// (`hopfuse run --peers`; [`crate::peers`]). Absent unless asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peers: Option<crate::peers::PeersReport>,
    /// The kernel profiled with Nsight Compute after the run (`hopfuse run --profile`, a
    /// service run with `"profile": true`; [`crate::profile`]), or why it could not be.
    /// Absent unless asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<crate::profile::ProfileReport>,
}

/// The float64 reference: sizes and input values (tensors and scalars by name) to outputs.
pub type Reference<'a> = dyn Fn(
        &BTreeMap<String, i64>,
        &BTreeMap<String, Vec<f64>>,
    ) -> Result<BTreeMap<String, Vec<f64>>, String>
    + 'a;

/// Number of elements of a tensor shape with these sizes.
pub fn tensor_elements(shape: &[SizeExpr], sizes: &BTreeMap<String, i64>) -> Result<u64, String> {
    shape.iter().try_fold(1u64, |acc, dim| {
        let d = dim.eval(sizes).map_err(|e| e.to_string())?;
        let d = u64::try_from(d).map_err(|_| format!("dimension {dim} = {d} is negative"))?;
        acc.checked_mul(d)
            .ok_or_else(|| "tensor element count overflows".to_string())
    })
}

/// `I32` when every tensor has fewer than 2^31 elements and every size fits an `int`, else
/// `I64`; with the reason.
pub fn choose_index_type(
    plan: &LaunchPlan,
    sizes: &BTreeMap<String, i64>,
) -> Result<(IndexType, String), String> {
    const LIMIT: u64 = 1 << 31;
    for (name, _, _, shape) in plan.tensors() {
        let n = tensor_elements(shape, sizes).map_err(|e| format!("tensor `{name}`: {e}"))?;
        if n >= LIMIT {
            return Ok((
                IndexType::I64,
                format!("tensor `{name}` has {n} elements (>= 2^31)"),
            ));
        }
    }
    if let Some((k, v)) = sizes.iter().find(|(_, &v)| v > i32::MAX as i64) {
        return Ok((
            IndexType::I64,
            format!("size {k} = {v} does not fit in 32 bits"),
        ));
    }
    Ok((
        IndexType::I32,
        "every tensor has fewer than 2^31 elements".into(),
    ))
}

/// How a compiled program is launched with the request's sizes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    pub index_type: IndexType,
    /// Why that index type.
    pub index_reason: String,
    pub launch: ConcreteLaunch,
}

/// A program compiled for a run: what the service computes once and hands to the worker in
/// the job, so the worker does not lower the program again (it rebuilds only the unscheduled
/// fusion for the reference, from the front end: [`hopfuse::reference_fusion`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    pub cuda: String,
    pub plan: LaunchPlan,
    pub setup: Setup,
}

/// Why a program cannot be prepared for a run.
#[derive(Clone, Debug)]
pub enum PrepareError {
    /// It does not compile.
    Compile(hopfuse::Diagnostics),
    /// The sizes do not fit its plan.
    Sizes(String),
}

/// Lowerings this process has done through [`lower`] and [`compile_for_run`].
static LOWERINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many programs this process has lowered (through [`lower`] and [`compile_for_run`]).
pub fn lowerings() -> u64 {
    LOWERINGS.load(std::sync::atomic::Ordering::Relaxed)
}

/// `hopfuse::compile`, counted in [`lowerings`].
pub fn lower(source: &str, options: &CompileOptions) -> Result<Compilation, hopfuse::Diagnostics> {
    LOWERINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    hopfuse::compile(source, options)
}

/// Compiles the program for the request's sizes, lowering it once: vector accesses these sizes
/// keep aligned are specialised ([`CompileOptions::aligned_for`]), the index type is the one the
/// sizes need ([`choose_index_type`]) unless the request names one, and the sizes are checked
/// against the plan and its TMA tensor maps.
pub fn compile_for_run(req: &RunRequest) -> Result<(Compilation, Setup), PrepareError> {
    let options = CompileOptions {
        index_type: req.index.unwrap_or(IndexType::I64),
        assume_aligned_vectors: false,
        aligned_for: Some(req.sizes.clone()),
    };
    let mut needed = None;
    LOWERINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let compilation = hopfuse::compile_choosing_index(&req.source, &options, |plan| {
        let choice = choose_index_type(plan, &req.sizes);
        let emit = match (req.index, &choice) {
            (Some(requested), _) => requested,
            (None, Ok((t, _))) => *t,
            // The sizes are refused below; any type will do.
            (None, Err(_)) => IndexType::I64,
        };
        needed = Some(choice);
        emit
    })
    .map_err(PrepareError::Compile)?;
    let sizes_err = PrepareError::Sizes;
    let launch = compilation
        .plan
        .concretize(&req.sizes)
        .map_err(|e| sizes_err(e.to_string()))?;
    let (wanted, reason) = needed
        .expect("the index type is chosen during the compile")
        .map_err(sizes_err)?;
    let (index_type, index_reason) = match req.index {
        None => (wanted, reason),
        Some(IndexType::I32) if wanted == IndexType::I64 => {
            return Err(sizes_err(format!("--index i32 is too small: {reason}")));
        }
        Some(i) => (i, "requested".to_string()),
    };
    // TMA tensor maps with the real sizes (the device address is checked when it is encoded).
    for spec in &compilation.plan.tensor_maps {
        crate::tensor_map::encode_args(spec, &req.sizes, 0).map_err(sizes_err)?;
    }
    Ok((
        compilation,
        Setup {
            index_type,
            index_reason,
            launch,
        },
    ))
}

/// [`compile_for_run`] with its errors as a [`RunError`] (a compile error rendered with the
/// file name and locations).
pub fn prepare(req: &RunRequest) -> Result<(Compilation, Setup), RunError> {
    compile_for_run(req).map_err(|e| match e {
        PrepareError::Compile(d) => RunError::new(Stage::Compile, d.render(&req.source, &req.file)),
        PrepareError::Sizes(e) => RunError::new(Stage::Sizes, e),
    })
}

impl Prepared {
    pub fn new(compilation: &Compilation, setup: Setup) -> Prepared {
        Prepared {
            cuda: compilation.cuda.clone(),
            plan: compilation.plan.clone(),
            setup,
        }
    }
}

/// A program ready to run: compiled for the request (here, or by the service) and its
/// unscheduled fusion for the reference.
struct ForRun {
    prepared: Prepared,
    fusion: hopfuse::fusion::Fusion,
}

impl ForRun {
    /// Uses `prepared` when the caller has it (then only the front end runs, for the reference
    /// fusion), else compiles the request.
    fn of(req: &RunRequest, prepared: Option<&Prepared>) -> Result<ForRun, RunError> {
        match prepared {
            Some(p) => {
                let fusion = hopfuse::reference_fusion(&req.source)
                    .map_err(|d| RunError::new(Stage::Compile, d.render(&req.source, &req.file)))?;
                Ok(ForRun {
                    prepared: p.clone(),
                    fusion,
                })
            }
            None => {
                let (c, setup) = prepare(req)?;
                Ok(ForRun {
                    prepared: Prepared::new(&c, setup),
                    fusion: c.fusion,
                })
            }
        }
    }

    /// The float64 reference of the fusion, on every core.
    fn reference(&self) -> Box<Reference<'_>> {
        Box::new(move |sizes, inputs| {
            hopfuse::reference::evaluate_with(
                &self.fusion,
                sizes,
                inputs,
                &crate::host_parallel::Threads::all(),
            )
        })
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

/// What a caller of [`run_with`] / [`execute_with`] may change: progress reports and how the
/// CUDA becomes a CUBIN (the worker caches CUBINs by content hash).
pub trait Hooks {
    fn progress(&mut self, _step: Progress) {}
    /// Must return a CUBIN for [`nvrtc::ARCH`] built with [`nvrtc::options`], warnings denied.
    fn cubin(&mut self, cuda: &str, name: &str) -> Result<nvrtc::Cubin, nvrtc::NvrtcError> {
        nvrtc::compile(cuda, name).and_then(|c| c.deny_warnings(name))
    }
    /// The peer process kept by the caller for runs that ask for peers (a warm worker keeps
    /// one, so torch is imported once); none: such a run starts its own.
    fn peers(&mut self) -> Option<&mut crate::peers::Peers> {
        None
    }
}

/// No progress reports, NVRTC every time.
pub struct NoHooks;

impl Hooks for NoHooks {}

/// Compiles, launches, validates and times the request's program.
pub fn run(req: &RunRequest) -> Result<RunResult, RunError> {
    run_with(req, &mut NoHooks)
}

/// [`run`] with progress reports and a CUBIN source (a device of its own).
pub fn run_with(req: &RunRequest, hooks: &mut dyn Hooks) -> Result<RunResult, RunError> {
    run_on(&mut None, req, None, hooks)
}

struct Tensor {
    name: String,
    dtype: DType,
    role: TensorRole,
    elements: u64,
    bytes: u64,
    /// Host bytes to upload (inputs: data; outputs and scratch: poison); emptied once uploaded.
    init: Vec<u8>,
}

/// A GPU context kept across runs: the context and stream, the spin kernel that holds the stream
/// while timed work is enqueued, and, once measured, the device-copy ceiling. `hopfuse run`
/// opens one per run; a warm `hopfuse worker --serve` keeps one for its whole life and
/// measures the ceiling once, when it starts.
pub struct Device {
    /// Created on the first matrix product; declared first so it is destroyed before the stream.
    blas: std::cell::OnceCell<Result<crate::cublas::Blas, RunError>>,
    pub gpu: Gpu,
    spin: Spin,
    ceiling: Option<(CopyCeiling, std::time::Instant)>,
}

impl Device {
    /// Device 0, a stream and the spin kernel (NVRTC, once).
    pub fn open() -> Result<Device, RunError> {
        let gpu = Gpu::open()?;
        let spin = Spin::new(&gpu)?;
        Ok(Device {
            blas: std::cell::OnceCell::new(),
            gpu,
            spin,
            ceiling: None,
        })
    }

    /// Measures the device-to-device copy ceiling now (1 GiB buffers, or as much as fits) and
    /// keeps it: later runs on this device report it with its age instead of measuring again.
    pub fn measure_ceiling(
        &mut self,
        warmup: u32,
        iters: u32,
    ) -> Result<Option<CopyCeiling>, RunError> {
        let mut c = copy_ceiling(&self.gpu, Some(&self.spin), 0, warmup, iters)?;
        if let Some(c) = &mut c {
            c.measured = CeilingWhen::WorkerStart;
            self.ceiling = Some((c.clone(), std::time::Instant::now()));
        }
        Ok(c)
    }

    /// The kept ceiling, with its age.
    pub fn kept_ceiling(&self) -> Option<CopyCeiling> {
        self.ceiling.as_ref().map(|(c, at)| CopyCeiling {
            age_s: at.elapsed().as_secs_f64(),
            ..c.clone()
        })
    }

    /// The cuBLAS handle on this device's stream (created once).
    pub(crate) fn blas(&self) -> Result<&crate::cublas::Blas, RunError> {
        self.blas
            .get_or_init(|| crate::cublas::Blas::new(&self.gpu.stream))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Whether the context still works: a fault such as an illegal address poisons it for good
    /// (every later call fails), so a warm worker checks this after every job.
    pub fn check_health(&self) -> Result<(), RunError> {
        self.gpu.sync("the job")?;
        self.gpu
            .ctx
            .synchronize()
            .map_err(gpu::cuda_err("cuCtxSynchronize after the job"))?;
        let probe = self.gpu.alloc(4096)?;
        self.gpu.memset(&probe, 0)?;
        self.gpu.sync("the health check")
    }
}

/// The host half of a run: inputs, the float64 reference and the CUBIN (no GPU needed yet).
struct HostStaged<'a> {
    req: &'a RunRequest,
    plan: &'a LaunchPlan,
    setup: &'a Setup,
    tensors: Vec<Tensor>,
    scalars: BTreeMap<String, f64>,
    expected: Expected<'a>,
    cubin: nvrtc::Cubin,
    working_set: u64,
    min_global_bytes: u64,
}

/// The reference outputs, or what computes them on the device.
enum Expected<'a> {
    /// Computed on the host.
    Host(BTreeMap<String, Vec<f64>>),
    /// A large matrix product: cuBLAS DGEMM once the device is open ([`crate::gemm_reference`]),
    /// the host reference if that fails.
    Gemm {
        shape: hopfuse::plan::MatmulShape,
        inputs: BTreeMap<String, Vec<f64>>,
        reference: &'a Reference<'a>,
    },
}

/// Every output of the run has reference values.
fn check_reference_outputs(
    tensors: &[Tensor],
    expected: &BTreeMap<String, Vec<f64>>,
) -> Result<(), RunError> {
    for t in tensors.iter().filter(|t| t.role == TensorRole::Output) {
        if !expected.contains_key(&t.name) {
            return Err(RunError::new(
                Stage::Reference,
                format!("the reference computed no output `{}`", t.name),
            ));
        }
    }
    Ok(())
}

/// How a host reference was computed, for the report.
fn host_reference_note() -> String {
    format!(
        "float64 on the host ({} threads)",
        crate::host_parallel::Threads::all().threads
    )
}

fn stage_host<'a>(
    req: &'a RunRequest,
    cuda: &str,
    plan: &'a LaunchPlan,
    setup: &'a Setup,
    reference: &'a Reference<'a>,
    hooks: &mut dyn Hooks,
) -> Result<HostStaged<'a>, RunError> {
    req.check()?;
    let sizes = &req.sizes;
    let sizes_err = |e: String| RunError::new(Stage::Sizes, e);
    let index_type = setup.index_type;
    if plan.index_type != index_type {
        return Err(RunError::new(
            Stage::Compile,
            "the plan's index type differs from the one compiled for",
        ));
    }

    // Host data, in parameter order.
    let mut tensors = Vec::new();
    let mut inputs: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut scalars: BTreeMap<String, f64> = BTreeMap::new();
    for p in &plan.params {
        match p {
            Param::Tensor {
                name,
                dtype,
                role,
                shape,
            } => {
                let elements = tensor_elements(shape, sizes)
                    .map_err(|e| sizes_err(format!("tensor `{name}`: {e}")))?;
                let bytes = elements
                    .checked_mul(dtype.size_bytes() as u64)
                    .ok_or_else(|| sizes_err(format!("tensor `{name}` is too large")))?;
                let n = usize::try_from(elements)
                    .map_err(|_| sizes_err(format!("tensor `{name}` is too large")))?;
                let init = match role {
                    TensorRole::Input => {
                        let values = data::seeded_values(*dtype, n, req.seed, name);
                        let init = data::encode(*dtype, &values);
                        // The reference gets exactly what the device reads.
                        inputs.insert(name.clone(), data::decode(*dtype, &init));
                        init
                    }
                    TensorRole::Output | TensorRole::Scratch => data::poison(*dtype, n),
                };
                tensors.push(Tensor {
                    name: name.clone(),
                    dtype: *dtype,
                    role: *role,
                    elements,
                    bytes,
                    init,
                });
            }
            Param::TensorMap { name, map } => {
                // Checked with the real sizes (the address is checked when it is encoded).
                let spec = plan.tensor_maps.get(*map).ok_or_else(|| {
                    RunError::new(
                        Stage::Compile,
                        format!("tensor map `{name}` is missing from the plan"),
                    )
                })?;
                crate::tensor_map::encode_args(spec, sizes, 0).map_err(sizes_err)?;
            }
            Param::Scalar { name, dtype } => {
                let v = data::seeded_values(*dtype, 1, req.seed, name)[0];
                inputs.insert(name.clone(), vec![v]);
                scalars.insert(name.clone(), v);
            }
            Param::Size { symbol } => {
                let v = SizeExpr::sym(symbol)
                    .eval(sizes)
                    .map_err(|e| sizes_err(e.to_string()))?;
                if index_type == IndexType::I32 && i32::try_from(v).is_err() {
                    return Err(sizes_err(format!(
                        "size {symbol} = {v} does not fit the kernel's 32-bit index type"
                    )));
                }
            }
        }
    }
    let working_set: u64 = tensors.iter().map(|t| t.bytes).sum();
    let min_global_bytes = plan
        .min_global_bytes
        .eval(sizes)
        .map_err(|e| sizes_err(e.to_string()))?;
    let min_global_bytes = u64::try_from(min_global_bytes)
        .map_err(|_| sizes_err("min_global_bytes is negative".into()))?;

    // The reference, before the GPU work (it needs only the inputs); a large matrix product's
    // on the GPU, as soon as it is open.
    let expected = match plan
        .matmul
        .as_ref()
        .filter(|shape| crate::gemm_reference::wanted(shape, sizes))
    {
        Some(shape) => Expected::Gemm {
            shape: shape.clone(),
            inputs,
            reference,
        },
        None => {
            info!("evaluating the float64 reference");
            hooks.progress(Progress::Reference);
            let expected =
                reference(sizes, &inputs).map_err(|e| RunError::new(Stage::Reference, e))?;
            check_reference_outputs(&tensors, &expected)?;
            Expected::Host(expected)
        }
    };

    info!(
        "compiling {} with NVRTC for {}",
        plan.kernel_name,
        nvrtc::ARCH
    );
    hooks.progress(Progress::Nvrtc);
    let cubin = hooks
        .cubin(cuda, &format!("{}.cu", req.file))
        .map_err(|e| RunError::new(Stage::Nvrtc, e.to_string()))?;
    Ok(HostStaged {
        req,
        plan,
        setup,
        tensors,
        scalars,
        expected,
        cubin,
        working_set,
        min_global_bytes,
    })
}

/// A run ready to be timed: the kernel loaded, its tensor sets on the device, the first launch
/// validated, the L2 policy chosen.
struct Staged<'a> {
    dev: &'a Device,
    req: &'a RunRequest,
    plan: &'a LaunchPlan,
    setup: &'a Setup,
    func: cudarc::driver::CudaFunction,
    attributes: KernelAttributes,
    cubin_bytes: usize,
    nvrtc_ms: f64,
    tensors: Vec<Tensor>,
    expected: BTreeMap<String, Vec<f64>>,
    sets: Vec<Vec<cudarc::driver::CudaSlice<u8>>>,
    args: Vec<KernelArgs>,
    flush: Option<cudarc::driver::CudaSlice<u8>>,
    l2_policy: L2Policy,
    working_set: u64,
    min_global_bytes: u64,
    validation: Vec<Check>,
    reference_note: String,
}

fn stage_device<'a>(
    host: HostStaged<'a>,
    dev: &'a Device,
    hooks: &mut dyn Hooks,
) -> Result<Staged<'a>, RunError> {
    let gpu = &dev.gpu;
    let HostStaged {
        req,
        plan,
        setup,
        mut tensors,
        scalars,
        expected,
        cubin,
        working_set,
        min_global_bytes,
    } = host;
    let sizes = &req.sizes;
    let sizes_err = |e: String| RunError::new(Stage::Sizes, e);
    let (cubin_bytes, nvrtc_ms) = (cubin.image.len(), cubin.compile_ms);
    let launch = &setup.launch;
    let index_type = setup.index_type;
    info!(
        "device: {} (sm_{}{})",
        gpu.info.name, gpu.info.compute_capability.0, gpu.info.compute_capability.1
    );
    let func = gpu.load(cubin.image, &plan.kernel_name)?;
    let attributes = gpu::attributes(&func)?;
    let smem = launch.dynamic_smem_bytes;
    let static_smem = attributes.static_smem_bytes.max(0) as u32;
    if smem + static_smem > gpu.info.max_dynamic_smem_optin {
        return Err(sizes_err(format!(
            "the kernel needs {smem} bytes of dynamic + {static_smem} bytes of static shared memory; \
             the device allows {} per block",
            gpu.info.max_dynamic_smem_optin
        )));
    }
    if smem > 48 * 1024 {
        gpu::allow_dynamic_smem(&func, smem)?;
    }
    let threads: u32 = launch.block.iter().product();
    if threads as i32 > attributes.max_threads_per_block {
        return Err(sizes_err(format!(
            "the block has {threads} threads but the compiled kernel allows at most {}",
            attributes.max_threads_per_block
        )));
    }
    let (free, _) = gpu.memory()?;
    if working_set > free {
        return Err(RunError::new(
            Stage::Cuda,
            format!("the tensors need {working_set} bytes but the device has {free} bytes free"),
        ));
    }
    let (expected, reference_note) = match expected {
        Expected::Host(e) => (e, host_reference_note()),
        Expected::Gemm {
            shape,
            inputs,
            reference,
        } => {
            // Before the kernel's first launch: a faulting kernel may poison the context.
            info!("evaluating the float64 reference with cuBLAS DGEMM");
            hooks.progress(Progress::Reference);
            let (expected, note) =
                match crate::gemm_reference::on_device(dev, &shape, sizes, &inputs) {
                    Ok(c) => (
                        BTreeMap::from([(shape.c.clone(), c)]),
                        crate::gemm_reference::describe(&shape, sizes),
                    ),
                    Err(e) => {
                        warn!("the GPU reference failed ({e}); computing it on the host");
                        let expected = reference(sizes, &inputs)
                            .map_err(|e| RunError::new(Stage::Reference, e))?;
                        let note =
                            format!("{} (the GPU reference failed: {e})", host_reference_note());
                        (expected, note)
                    }
                };
            check_reference_outputs(&tensors, &expected)?;
            (expected, note)
        }
    };

    // Tensor set 0, from the host.
    let mut sets: Vec<Vec<cudarc::driver::CudaSlice<u8>>> = vec![tensors
        .iter()
        .map(|t| gpu.upload(&t.init))
        .collect::<Result<_, _>>()?];
    for t in &mut tensors {
        t.init = Vec::new();
    }
    let args_for = |set: &[cudarc::driver::CudaSlice<u8>]| -> Result<KernelArgs, RunError> {
        let pointers: Vec<u64> = set
            .iter()
            .map(|b| gpu::pointer_slot(b, &gpu.stream))
            .collect();
        let mut tensor_ptrs = pointers.iter();
        let mut args = Vec::new();
        for p in &plan.params {
            args.push(match p {
                Param::Tensor { .. } => {
                    gpu::Arg::Word(*tensor_ptrs.next().expect("one buffer per tensor"))
                }
                Param::Size { symbol } => {
                    let v = sizes[symbol];
                    gpu::Arg::Word(match index_type {
                        IndexType::I32 => v as i32 as u32 as u64,
                        IndexType::I64 => v as u64,
                    })
                }
                Param::Scalar { name, dtype } => {
                    gpu::Arg::Word(data::scalar_slot(*dtype, scalars[name]))
                }
                Param::TensorMap { name, map } => {
                    gpu::Arg::Map(Box::new(encode_map(plan, *map, name, sizes, &pointers)?))
                }
            });
        }
        Ok(KernelArgs::from_args(args))
    };

    // First launch: correctness.
    hooks.progress(Progress::Launch);
    let mut args0 = args_for(&sets[0])?;
    gpu.launch(&func, launch, &mut args0)?;
    gpu.sync("the first launch of the kernel")?;
    hooks.progress(Progress::Validate);
    let validation = check_outputs(gpu, &tensors, &expected, &sets[0])?;
    debug!(
        elements = tensors.iter().map(|t| t.elements).sum::<u64>(),
        "first launch validated"
    );

    // L2: rotate copies of the tensors when a few suffice, else flush.
    let l2 = gpu.info.l2_bytes;
    let l2_policy = if working_set > 2 * l2 {
        L2Policy::None
    } else {
        let sets_needed = (2 * l2).div_ceil(working_set.max(1)) + 1;
        if sets_needed <= 16 {
            L2Policy::Rotate {
                sets: sets_needed as u32,
            }
        } else {
            L2Policy::Flush { bytes: 2 * l2 }
        }
    };
    let mut flush = None;
    match &l2_policy {
        L2Policy::None => {}
        L2Policy::Rotate { sets: n } => {
            for _ in 1..*n {
                let copy = sets[0]
                    .iter()
                    .map(|src| {
                        let dst = gpu.alloc(src.len() as u64)?;
                        gpu.copy(&dst, src, src.len())?;
                        Ok(dst)
                    })
                    .collect::<Result<Vec<_>, RunError>>()?;
                sets.push(copy);
            }
            gpu.sync("copying tensor sets")?;
        }
        L2Policy::Flush { bytes } => flush = Some(gpu.alloc(*bytes)?),
    }
    let args: Vec<KernelArgs> = sets.iter().map(|s| args_for(s)).collect::<Result<_, _>>()?;
    Ok(Staged {
        dev,
        req,
        plan,
        setup,
        func,
        attributes,
        cubin_bytes,
        nvrtc_ms,
        tensors,
        expected,
        sets,
        args,
        flush,
        l2_policy,
        working_set,
        min_global_bytes,
        validation,
        reference_note,
    })
}

fn check_outputs(
    gpu: &Gpu,
    tensors: &[Tensor],
    expected: &BTreeMap<String, Vec<f64>>,
    set: &[cudarc::driver::CudaSlice<u8>],
) -> Result<Vec<Check>, RunError> {
    let mut checks = Vec::new();
    for (t, buf) in tensors.iter().zip(set) {
        if t.role != TensorRole::Output {
            continue;
        }
        let out = data::decode(t.dtype, &gpu.download(buf, t.bytes as usize)?);
        let check = validate::check(&t.name, t.dtype, &out, &expected[&t.name])
            .map_err(|e| RunError::new(Stage::Reference, e))?;
        debug!(?check, "validated");
        checks.push(check);
    }
    Ok(checks)
}

impl Staged<'_> {
    /// Enqueues the untimed work before one timed launch (the L2 flush, if any).
    fn before(flush: &Option<cudarc::driver::CudaSlice<u8>>, gpu: &Gpu) -> Result<(), RunError> {
        match flush {
            Some(buf) => gpu.memset(buf, 0),
            None => Ok(()),
        }
    }

    /// Times the launches alone.
    fn time(&mut self) -> Result<Timing, RunError> {
        let gpu = &self.dev.gpu;
        let (func, launch) = (&self.func, &self.setup.launch);
        let flush = &self.flush;
        let args = &mut self.args;
        let nsets = args.len() as u64;
        info!(l2_policy = %self.l2_policy, "timing {} launches after {} warm-up launches", self.req.iters, self.req.warmup);
        gpu.time(
            Some(&self.dev.spin),
            self.req.warmup,
            self.req.iters,
            || Staged::before(flush, gpu),
            |k| gpu.launch(func, launch, &mut args[(k % nsets) as usize]),
        )
    }

    /// [`Staged::time`], or, when the request asks for peers, the launches in rounds
    /// alternated with rounds of the peers (see [`crate::peers`]).
    fn time_with_peers(
        &mut self,
        hooks: &mut dyn Hooks,
    ) -> Result<(Timing, Option<crate::peers::PeersReport>), RunError> {
        if !self.req.peers {
            return Ok((self.time()?, None));
        }
        let mut own = None;
        let peers = match hooks.peers() {
            Some(p) => p,
            None => own.insert(crate::peers::Peers::new()),
        };
        let gpu = &self.dev.gpu;
        let (func, launch, flush, args) =
            (&self.func, &self.setup.launch, &self.flush, &mut self.args);
        let nsets = args.len() as u64;
        let spin = &self.dev.spin;
        let mut round = |warmup: u32, iters: u32| {
            gpu.time_samples(
                Some(spin),
                warmup,
                iters,
                || Staged::before(flush, gpu),
                |k| gpu.launch(func, launch, &mut args[(k % nsets) as usize]),
            )
        };
        let run = crate::peers::PeerRun {
            req: self.req,
            expected: &self.expected,
            l2: &self.l2_policy,
        };
        let (timing, report) = peers.interleave(&run, &mut round)?;
        Ok((timing, Some(report)))
    }

    /// Times cuBLAS on the fusion's matrix product with this run's tensor sets and L2 policy,
    /// after one call on set 0 whose output is checked against the reference.
    fn gemm_ceiling(&self, shape: &hopfuse::plan::MatmulShape) -> Result<GemmCeiling, RunError> {
        let gpu = &self.dev.gpu;
        let sizes_err = |e: String| RunError::new(Stage::Sizes, e);
        let eval = |e: &SizeExpr| {
            e.eval(&self.req.sizes)
                .map_err(|e| sizes_err(e.to_string()))
        };
        let (m, n, k) = (eval(&shape.m)?, eval(&shape.n)?, eval(&shape.k)?);
        let args = crate::cublas::gemm_args(shape, m, n, k)
            .ok_or_else(|| sizes_err("a size does not fit cuBLAS's 32-bit int".into()))?;
        let types = crate::cublas::gemm_types(shape).map_err(|e| RunError::new(Stage::Cuda, e))?;
        let blas = self.dev.blas()?;
        let index = |name: &str| {
            self.tensors
                .iter()
                .position(|t| t.name == name)
                .ok_or_else(|| RunError::new(Stage::Compile, format!("no tensor `{name}`")))
        };
        let (ia, ib, ic) = (index(&shape.a)?, index(&shape.b)?, index(&shape.c)?);
        let pointers = |set: &[cudarc::driver::CudaSlice<u8>]| {
            let p = |i: usize| gpu::pointer_slot(&set[i], &gpu.stream);
            (p(ia), p(ib), p(ic))
        };
        // SAFETY (both calls): the pointers are this run's a, b and c, allocated for these sizes.
        unsafe { blas.gemm(&args, types, pointers(&self.sets[0])) }?;
        gpu.sync("the cuBLAS call")?;
        let c = &self.tensors[ic];
        let out = data::decode(c.dtype, &gpu.download(&self.sets[0][ic], c.bytes as usize)?);
        let validation = validate::check(
            &format!("cuBLAS {}", c.name),
            c.dtype,
            &out,
            &self.expected[&c.name],
        )
        .map_err(|e| RunError::new(Stage::Reference, e))?;
        let (flush, sets) = (&self.flush, &self.sets);
        let nsets = sets.len() as u64;
        let timing = gpu.time(
            Some(&self.dev.spin),
            self.req.warmup,
            self.req.iters,
            || Staged::before(flush, gpu),
            |i| unsafe { blas.gemm(&args, types, pointers(&sets[(i % nsets) as usize])) },
        )?;
        let flops = shape
            .flops(&self.req.sizes)
            .map_err(|e| sizes_err(e.to_string()))?;
        Ok(GemmCeiling {
            call: crate::cublas::describe(&args, shape, types.2),
            tflops: timing.tflops(flops),
            timing,
            validation,
        })
    }

    /// Checks the outputs again, frees the tensors and assembles the result.
    fn finish(
        self,
        timing: Timing,
        copy: Option<CopyCeiling>,
        hooks: &mut dyn Hooks,
    ) -> Result<RunResult, RunError> {
        let gpu = &self.dev.gpu;
        hooks.progress(Progress::Validate);
        let validation_after_timing =
            check_outputs(gpu, &self.tensors, &self.expected, &self.sets[0])?;
        // cuBLAS writes the outputs of every tensor set: only after they were checked.
        let (cublas, cublas_skipped) = match (&self.plan.matmul, self.req.copy_ceiling) {
            (Some(shape), true) => {
                hooks.progress(Progress::Ceiling);
                match self.gemm_ceiling(shape) {
                    Ok(c) => (Some(c), None),
                    Err(e) => (None, Some(e.to_string())),
                }
            }
            (Some(_), false) => (None, Some("ceilings not requested".to_string())),
            (None, _) => (None, None),
        };
        let Staged {
            req,
            plan,
            setup,
            attributes,
            cubin_bytes,
            nvrtc_ms,
            sets,
            flush,
            l2_policy,
            working_set,
            min_global_bytes,
            validation,
            reference_note,
            ..
        } = self;
        drop(flush);
        drop(sets);
        gpu.sync("freeing the tensors")?;
        let gbps = timing.gbps(min_global_bytes);
        let fraction_of_copy = copy.as_ref().map(|c| gbps / c.gbps);
        let flops = match &plan.matmul {
            Some(shape) => Some(
                shape
                    .flops(&req.sizes)
                    .map_err(|e| RunError::new(Stage::Sizes, e.to_string()))?,
            ),
            None => None,
        };
        let tflops = flops.map(|f| timing.tflops(f));
        let fraction_of_cublas = match (tflops, &cublas) {
            (Some(t), Some(c)) => Some(t / c.tflops),
            _ => None,
        };
        let passed = validation
            .iter()
            .chain(&validation_after_timing)
            .all(|c| c.passed);
        Ok(RunResult {
            file: req.file.clone(),
            kernel: plan.kernel_name.clone(),
            sizes: req.sizes.clone(),
            seed: req.seed,
            index_type: setup.index_type,
            index_reason: setup.index_reason.clone(),
            launch: setup.launch.clone(),
            attributes,
            cubin_bytes,
            nvrtc_ms,
            device: gpu.info.clone(),
            working_set_bytes: working_set,
            l2_policy,
            warmup: req.warmup,
            timing,
            min_global_bytes,
            gbps,
            copy,
            fraction_of_copy,
            flops,
            tflops,
            cublas,
            fraction_of_cublas,
            cublas_skipped,
            reference: Some(reference_note),
            validation,
            validation_after_timing,
            passed,
            peers: None,
            profile: None,
        })
    }
}

/// The ceiling a run reports: the device's kept one (a warm worker), else measured now.
fn ceiling_for(
    dev: &Device,
    req: &RunRequest,
    kernel_bytes: u64,
    hooks: &mut dyn Hooks,
) -> Result<Option<CopyCeiling>, RunError> {
    if !req.copy_ceiling {
        return Ok(None);
    }
    if let Some(c) = dev.kept_ceiling() {
        return Ok(Some(c));
    }
    hooks.progress(Progress::Ceiling);
    copy_ceiling(
        &dev.gpu,
        Some(&dev.spin),
        kernel_bytes,
        req.warmup,
        req.iters,
    )
}

/// Opens the device into `slot` unless it is open.
fn device(slot: &mut Option<Device>) -> Result<&Device, RunError> {
    if slot.is_none() {
        *slot = Some(Device::open()?);
    }
    Ok(slot.as_ref().expect("just opened"))
}

/// Launches `cuda`'s kernel as `plan` describes; `reference` computes the expected outputs.
/// Used by [`run`] and by the self-test, which brings hand-written kernels.
pub fn execute(
    req: &RunRequest,
    cuda: &str,
    plan: &LaunchPlan,
    setup: &Setup,
    reference: &Reference,
) -> Result<RunResult, RunError> {
    execute_with(req, cuda, plan, setup, reference, &mut NoHooks)
}

/// [`execute`] with progress reports and a CUBIN source (a device of its own).
pub fn execute_with(
    req: &RunRequest,
    cuda: &str,
    plan: &LaunchPlan,
    setup: &Setup,
    reference: &Reference,
    hooks: &mut dyn Hooks,
) -> Result<RunResult, RunError> {
    execute_on(&mut None, req, cuda, plan, setup, reference, hooks)
}

/// [`execute_with`] on a device kept by the caller (opened into `slot` when it is `None`,
/// after the host work, so a machine without a GPU still gets as far as NVRTC).
pub fn execute_on(
    slot: &mut Option<Device>,
    req: &RunRequest,
    cuda: &str,
    plan: &LaunchPlan,
    setup: &Setup,
    reference: &Reference,
    hooks: &mut dyn Hooks,
) -> Result<RunResult, RunError> {
    let host = stage_host(req, cuda, plan, setup, reference, hooks)?;
    let dev = device(slot)?;
    let mut staged = stage_device(host, dev, hooks)?;
    hooks.progress(Progress::Time);
    let (timing, peers) = staged.time_with_peers(hooks)?;
    let bytes = staged.min_global_bytes;
    // The ceiling is measured (when not kept) after the tensors are freed.
    let mut result = staged.finish(timing, None, hooks)?;
    result.peers = peers;
    let copy = ceiling_for(dev, req, bytes, hooks)?;
    Ok(with_ceiling(result, copy))
}

fn with_ceiling(mut r: RunResult, copy: Option<CopyCeiling>) -> RunResult {
    r.fraction_of_copy = copy.as_ref().map(|c| r.gbps / c.gbps);
    r.copy = copy;
    r
}

/// Checks the request and gets its program ready: `prepared` (compiled by the service) when
/// given, else compiled here (reported as [`Progress::Lowering`]).
fn for_run(
    req: &RunRequest,
    prepared: Option<&Prepared>,
    hooks: &mut dyn Hooks,
) -> Result<ForRun, RunError> {
    req.check()?;
    if prepared.is_none() {
        hooks.progress(Progress::Lowering);
    }
    ForRun::of(req, prepared)
}

/// [`run_with`] on a device kept by the caller (a warm worker), with the program compiled by
/// the caller when it gives `prepared`.
pub fn run_on(
    slot: &mut Option<Device>,
    req: &RunRequest,
    prepared: Option<&Prepared>,
    hooks: &mut dyn Hooks,
) -> Result<RunResult, RunError> {
    let program = for_run(req, prepared, hooks)?;
    let p = &program.prepared;
    let reference = program.reference();
    execute_on(slot, req, &p.cuda, &p.plan, &p.setup, &reference, hooks)
}

/// B/A over launch pairs of an interleaved A/B run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairRatios {
    /// Timed pairs (one launch of A and one of B each).
    pub pairs: usize,
    /// Median, smallest and largest of the per-pair ratios B time / A time.
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// How each pair was ordered: `"AB,BA alternating"`.
    pub order: String,
}

impl PairRatios {
    pub fn from_samples(a_us: &[f64], b_us: &[f64]) -> Option<PairRatios> {
        let ratios: Vec<f64> = a_us
            .iter()
            .zip(b_us)
            .filter(|(a, _)| **a > 0.0)
            .map(|(a, b)| b / a)
            .collect();
        let t = Timing::from_samples(ratios)?;
        Some(PairRatios {
            pairs: t.samples,
            median: t.median_us,
            min: t.min_us,
            max: t.max_us,
            order: "AB,BA alternating".into(),
        })
    }
}

/// An A/B run: each program's result or error, and the per-pair ratios when both ran.
pub struct AbRun {
    pub a: Result<RunResult, RunError>,
    pub b: Result<RunResult, RunError>,
    pub ratios: Option<PairRatios>,
}

/// Compiles and stages both programs on the same device with the same sizes, seed and options
/// (inputs are seeded by tensor name, so equally named and shaped inputs are identical), then
/// times them interleaved: pair k launches A then B for even k and B then A for odd k, each
/// between its own pair of events, with each program's L2 flush or tensor rotation before its
/// launch. When only one program can run, it is timed alone and there are no ratios.
pub fn run_ab_on(
    slot: &mut Option<Device>,
    (req_a, prepared_a): (&RunRequest, Option<&Prepared>),
    (req_b, prepared_b): (&RunRequest, Option<&Prepared>),
    hooks: &mut dyn Hooks,
) -> AbRun {
    let pa = for_run(req_a, prepared_a, hooks);
    let pb = for_run(req_b, prepared_b, hooks);
    let (ca, cb) = match (pa, pb) {
        (Ok(a), Ok(b)) => (a, b),
        // One cannot even compile: run the other alone.
        (a, b) => {
            let alone = |p: Result<ForRun, RunError>,
                         req: &RunRequest,
                         slot: &mut Option<Device>,
                         hooks: &mut dyn Hooks| {
                let program = p?;
                let p = &program.prepared;
                let reference = program.reference();
                execute_on(slot, req, &p.cuda, &p.plan, &p.setup, &reference, hooks)
            };
            let a = alone(a, req_a, slot, hooks);
            let b = alone(b, req_b, slot, hooks);
            return AbRun { a, b, ratios: None };
        }
    };
    let (ref_a, ref_b) = (ca.reference(), cb.reference());
    let (pa, pb) = (&ca.prepared, &cb.prepared);
    let ha = stage_host(req_a, &pa.cuda, &pa.plan, &pa.setup, &ref_a, hooks);
    let hb = stage_host(req_b, &pb.cuda, &pb.plan, &pb.setup, &ref_b, hooks);
    let (ha, hb) = match (ha, hb) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => {
            let a = a.and_then(|h| time_alone(slot, h, hooks));
            let b = b.and_then(|h| time_alone(slot, h, hooks));
            return AbRun { a, b, ratios: None };
        }
    };
    let dev = match device(slot) {
        Ok(d) => d,
        Err(e) => {
            return AbRun {
                a: Err(e.clone()),
                b: Err(e),
                ratios: None,
            }
        }
    };
    let sa = stage_device(ha, dev, hooks);
    let sb = stage_device(hb, dev, hooks);
    let (mut sa, mut sb) = match (sa, sb) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => {
            let alone = |s: Result<Staged, RunError>, hooks: &mut dyn Hooks| {
                let mut s = s?;
                let req = s.req;
                let bytes = s.min_global_bytes;
                hooks.progress(Progress::Time);
                let timing = s.time()?;
                let r = s.finish(timing, None, hooks)?;
                Ok(with_ceiling(r, ceiling_for(dev, req, bytes, hooks)?))
            };
            let a = alone(a, hooks);
            let b = alone(b, hooks);
            return AbRun { a, b, ratios: None };
        }
    };
    hooks.progress(Progress::Time);
    let gpu = &dev.gpu;
    let timed = {
        let (fa, la, flush_a, args_a) = (&sa.func, &sa.setup.launch, &sa.flush, &mut sa.args);
        let (fb, lb, flush_b, args_b) = (&sb.func, &sb.setup.launch, &sb.flush, &mut sb.args);
        let (na, nb) = (args_a.len() as u64, args_b.len() as u64);
        gpu.time_pairs(
            Some(&dev.spin),
            req_a.warmup,
            req_a.iters,
            gpu::TimedOp {
                before: &mut || Staged::before(flush_a, gpu),
                op: &mut |k| gpu.launch(fa, la, &mut args_a[(k % na) as usize]),
            },
            gpu::TimedOp {
                before: &mut || Staged::before(flush_b, gpu),
                op: &mut |k| gpu.launch(fb, lb, &mut args_b[(k % nb) as usize]),
            },
        )
    };
    let (a_us, b_us) = match timed {
        Ok(x) => x,
        Err(e) => {
            return AbRun {
                a: Err(e.clone()),
                b: Err(e),
                ratios: None,
            }
        }
    };
    let ratios = PairRatios::from_samples(&a_us, &b_us);
    let no_samples = || RunError::new(Stage::Cuda, "no valid timing samples");
    let (bytes_a, bytes_b) = (sa.min_global_bytes, sb.min_global_bytes);
    let a = Timing::from_samples(a_us)
        .ok_or_else(no_samples)
        .and_then(|t| sa.finish(t, None, hooks));
    let b = Timing::from_samples(b_us)
        .ok_or_else(no_samples)
        .and_then(|t| sb.finish(t, None, hooks));
    let a = a.and_then(|r| Ok(with_ceiling(r, ceiling_for(dev, req_a, bytes_a, hooks)?)));
    let b = b.and_then(|r| Ok(with_ceiling(r, ceiling_for(dev, req_b, bytes_b, hooks)?)));
    AbRun { a, b, ratios }
}

fn time_alone(
    slot: &mut Option<Device>,
    host: HostStaged,
    hooks: &mut dyn Hooks,
) -> Result<RunResult, RunError> {
    let req = host.req;
    let dev = device(slot)?;
    let mut s = stage_device(host, dev, hooks)?;
    let bytes = s.min_global_bytes;
    hooks.progress(Progress::Time);
    let timing = s.time()?;
    let r = s.finish(timing, None, hooks)?;
    Ok(with_ceiling(r, ceiling_for(dev, req, bytes, hooks)?))
}

/// Times `cuMemcpyDtoDAsync` of max(1 GiB, half the kernel's bytes), as much as fits in free
/// memory; `None` when less than 64 MiB could be had.
/// Encodes tensor map `map` of the plan for the tensors at `pointers` (one per tensor parameter,
/// in order).
fn encode_map(
    plan: &hopfuse::LaunchPlan,
    map: usize,
    name: &str,
    sizes: &BTreeMap<String, i64>,
    pointers: &[u64],
) -> Result<sys_map::CUtensorMap, RunError> {
    let err = |m: String| RunError::new(Stage::Cuda, m);
    let spec = plan
        .tensor_maps
        .get(map)
        .ok_or_else(|| err(format!("tensor map `{name}` is missing from the plan")))?;
    let index = plan
        .tensors()
        .position(|(t, ..)| t == spec.tensor)
        .ok_or_else(|| {
            err(format!(
                "tensor map `{name}` reads `{}`, which is not a tensor parameter",
                spec.tensor
            ))
        })?;
    let args = crate::tensor_map::encode_args(spec, sizes, pointers[index]).map_err(err)?;
    crate::tensor_map::encode(&args).map_err(err)
}

use cudarc::driver::sys as sys_map;

fn copy_ceiling(
    gpu: &Gpu,
    spin: Option<&Spin>,
    kernel_bytes: u64,
    warmup: u32,
    iters: u32,
) -> Result<Option<CopyCeiling>, RunError> {
    let (free, _) = gpu.memory()?;
    let want = (1u64 << 30).max(kernel_bytes / 2);
    let room = free.saturating_sub(512 << 20) / 2;
    let bytes = want.min(room) & !0xfff;
    if bytes < 64 << 20 {
        info!("skipping the copy ceiling: only {free} bytes free");
        return Ok(None);
    }
    let src = gpu.alloc(bytes)?;
    let dst = gpu.alloc(bytes)?;
    gpu.memset(&src, 1)?;
    gpu.memset(&dst, 0)?;
    let timing = gpu.time(
        spin,
        warmup,
        iters,
        || Ok(()),
        |_| gpu.copy(&dst, &src, bytes as usize),
    )?;
    let gbps = timing.gbps(2 * bytes);
    Ok(Some(CopyCeiling {
        buffer_bytes: bytes,
        timing,
        gbps,
        measured: CeilingWhen::Run,
        age_s: 0.0,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopfuse::plan::SizeExpr as E;

    fn plan(shapes: Vec<Vec<E>>) -> LaunchPlan {
        let params = shapes
            .into_iter()
            .enumerate()
            .map(|(i, shape)| Param::Tensor {
                name: format!("t{i}"),
                dtype: DType::F32,
                role: if i == 0 {
                    TensorRole::Output
                } else {
                    TensorRole::Input
                },
                shape,
            })
            .collect();
        LaunchPlan {
            kernel_name: "k".into(),
            index_type: IndexType::I64,
            symbols: vec!["M".into(), "N".into()],
            params,
            grid: [E::Const(1), E::Const(1), E::Const(1)],
            block: [E::Const(128), E::Const(1), E::Const(1)],
            dynamic_smem_bytes: E::Const(0),
            constraints: vec![],
            tensor_maps: vec![],
            register_sharing: None,
            matmul: None,
            min_global_bytes: E::Const(0),
        }
    }

    fn sizes(m: i64, n: i64) -> BTreeMap<String, i64> {
        [("M".to_string(), m), ("N".to_string(), n)].into()
    }

    fn mn() -> Vec<E> {
        vec![E::sym("M"), E::sym("N")]
    }

    #[test]
    fn i32_below_two_to_the_31_elements() {
        let p = plan(vec![mn(), vec![E::sym("N")]]);
        assert_eq!(
            choose_index_type(&p, &sizes(4096, 4096)).unwrap().0,
            IndexType::I32
        );
        // 2^31 - 1 elements still fit.
        let p1 = plan(vec![vec![E::sym("M")]]);
        assert_eq!(
            choose_index_type(&p1, &sizes((1 << 31) - 1, 1)).unwrap().0,
            IndexType::I32
        );
    }

    #[test]
    fn i64_from_two_to_the_31_elements() {
        let p = plan(vec![mn(), vec![E::sym("N")]]);
        let (t, why) = choose_index_type(&p, &sizes(1 << 16, 1 << 15)).unwrap();
        assert_eq!(t, IndexType::I64);
        assert!(why.contains("t0") && why.contains("2147483648"), "{why}");
        // Broadcast shapes count their own elements only.
        let p = plan(vec![vec![E::sym("N"), E::Const(1)]]);
        assert_eq!(
            choose_index_type(&p, &sizes(1 << 20, 1 << 20)).unwrap().0,
            IndexType::I32
        );
    }

    #[test]
    fn i64_when_a_size_does_not_fit_an_int() {
        let p = plan(vec![vec![E::Const(4)]]);
        let (t, why) = choose_index_type(&p, &sizes(1 << 31, 1)).unwrap();
        assert_eq!(t, IndexType::I64);
        assert!(why.contains("M = 2147483648"), "{why}");
    }

    #[test]
    fn unbound_symbols_are_reported() {
        let p = plan(vec![mn()]);
        let err = choose_index_type(&p, &[("M".to_string(), 4)].into()).unwrap_err();
        assert!(err.contains("`N`") && err.contains("t0"), "{err}");
    }

    #[test]
    fn element_counts_overflow_cleanly() {
        let shape = vec![E::sym("M"), E::sym("M"), E::sym("M")];
        assert!(tensor_elements(&shape, &sizes(1 << 30, 1))
            .unwrap_err()
            .contains("overflow"));
    }

    #[test]
    fn requests_round_trip_through_json() {
        let req = RunRequest {
            file: "a.hf".into(),
            source: "fusion".into(),
            sizes: sizes(1, 2),
            iters: 10,
            warmup: 1,
            seed: 3,
            index: Some(IndexType::I32),
            copy_ceiling: true,
            peers: false,
        };
        let json = serde_json::to_string(&req).unwrap();
        assert_eq!(serde_json::from_str::<RunRequest>(&json).unwrap(), req);
        let err = RunError::new(Stage::Nvrtc, "boom");
        assert_eq!(serde_json::to_value(&err).unwrap()["stage"], "nvrtc");
    }

    #[test]
    fn pair_ratios_are_per_pair() {
        // B is twice as slow in every pair, whatever the drift of both over time.
        let a = [10.0, 20.0, 40.0, 10.0];
        let b = [20.0, 40.0, 80.0, 21.0];
        let r = PairRatios::from_samples(&a, &b).unwrap();
        assert_eq!(r.pairs, 4);
        assert_eq!((r.min, r.max), (2.0, 2.1));
        assert_eq!(r.median, 2.0);
        assert!(PairRatios::from_samples(&[], &[]).is_none());
        assert!(PairRatios::from_samples(&[1.0], &[f64::NAN]).is_none());
    }

    #[test]
    fn ceilings_from_before_the_worker_field_still_parse() {
        let c: CopyCeiling = serde_json::from_value(serde_json::json!({
            "buffer_bytes": 1, "gbps": 2.0,
            "timing": {"samples": 1, "min_us": 1.0, "median_us": 1.0, "max_us": 1.0}
        }))
        .unwrap();
        assert_eq!((c.measured, c.age_s), (CeilingWhen::Run, 0.0));
    }

    /// One lowering for the sizes gives what the two whole-program variants gave: the aligned
    /// kernel when the sizes keep the vectors aligned, the run-time check otherwise, with the
    /// index type the sizes need.
    #[test]
    fn compile_for_run_specialises_for_the_sizes_in_one_lowering() {
        let source = include_str!("../../examples/basics/softmax.hf");
        let req = |m: i64, n: i64, index| RunRequest {
            file: "softmax.hf".into(),
            source: source.into(),
            sizes: sizes(m, n),
            iters: 1,
            warmup: 0,
            seed: 1,
            index,
            copy_ceiling: false,
            peers: false,
        };
        let variant = |index_type, assume_aligned_vectors| {
            hopfuse::compile(
                source,
                &CompileOptions {
                    index_type,
                    assume_aligned_vectors,
                    aligned_for: None,
                },
            )
            .unwrap()
        };
        let (aligned, setup) = compile_for_run(&req(64, 1024, None)).unwrap();
        assert_eq!(setup.index_type, IndexType::I32);
        assert_eq!(aligned.cuda, variant(IndexType::I32, true).cuda);
        assert!(aligned
            .plan
            .constraints
            .iter()
            .any(|c| matches!(c, hopfuse::plan::Constraint::Divisible { .. })));
        assert!(!aligned.cuda.contains("% 4 == 0"), "{}", aligned.cuda);
        let (checked, _) = compile_for_run(&req(64, 1023, None)).unwrap();
        assert!(checked.cuda.contains("m2 * N % 4 == 0"), "{}", checked.cuda);
        assert_eq!(checked.cuda, variant(IndexType::I32, false).cuda);
        assert_eq!(checked.plan, variant(IndexType::I32, false).plan);
        // 2^32 elements: a 64-bit index, chosen after the one lowering.
        let (big, setup) = compile_for_run(&req(1 << 17, 1 << 15, None)).unwrap();
        assert_eq!(
            (setup.index_type, big.plan.index_type),
            (IndexType::I64, IndexType::I64)
        );
        assert_eq!(big.cuda, variant(IndexType::I64, true).cuda);
        match compile_for_run(&req(1 << 17, 1 << 15, Some(IndexType::I32))) {
            Err(PrepareError::Sizes(e)) => assert!(e.contains("too small"), "{e}"),
            other => panic!("{other:?}"),
        }
        match compile_for_run(&req(64, 0, None)) {
            Err(PrepareError::Sizes(e)) => assert!(e.contains("positive"), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_iteration_counts_are_rejected() {
        let mut req = RunRequest {
            file: "a.hf".into(),
            source: "@@@ not a program".into(),
            sizes: BTreeMap::new(),
            iters: 0,
            warmup: 0,
            seed: 1,
            index: None,
            copy_ceiling: false,
            peers: false,
        };
        assert_eq!(run(&req).unwrap_err().stage, Stage::Request);
        req.iters = 1;
        // Not a program: fails at compile time.
        assert_eq!(run(&req).unwrap_err().stage, Stage::Compile);
    }
}
