//! One run: compile a program, launch its kernel on the GPU, validate the outputs against the
//! float64 reference and time it. `hopfuse run` is a thin wrapper; the service and `hopfuse
//! bench` send each [`RunRequest`] to a warm `hopfuse worker --serve` child process, which keeps
//! a [`Device`] between runs, and read back a [`RunResult`].
//!
//! A run: the program lowered once for the sizes (`prepare::compile_for_run`: aligned vectors
//! for those sizes, a 32-bit index when every tensor has fewer than 2^31 elements), NVRTC to a
//! CUBIN for `sm_90a`, the plan's constraints checked, inputs filled with seeded random values
//! (never zeros; a gather's indices and the request's `documents` as `data::InputFill` says),
//! outputs poisoned (`data.rs`), the kernel launched and validated against the
//! float64 reference (`validate.rs`; the reference runs in pieces on every core,
//! `host_parallel.rs`, and for a matrix product with M N K >= 2^27 on the GPU,
//! `gemm_reference.rs`), then timed with CUDA events (warm-up, then the median of many) and
//! reported against a device-to-device copy measured in the same process and, for a matrix
//! product (`plan.matmul`), cuBLAS on the same shape, layouts, types and L2 policy
//! (`cublas.rs`, timed in alternating rounds: `timing.rs`). Tensor maps are re-validated with
//! the real sizes and device addresses and encoded for every tensor set (`tensor_map.rs`).
//!
//! [`Hooks`] carry what the engine must not know about: progress steps and the CUBIN source,
//! so a worker reports stages and caches CUBINs. A run is staged (host: `host.rs`; device:
//! load, upload, first launch validated, L2 policy), timed and finished (validated again), which
//! lets `run_ab_on` (`ab.rs`) stage two programs and time them interleaved (`Gpu::time_pairs`).

use crate::data;
use crate::gpu::{self, Gpu, KernelArgs, KernelAttributes, Spin, Timing};
use crate::nvrtc;
use crate::validate::{self, Check, Tolerances};
use hopfuse::plan::{Param, SizeExpr, TensorRole};
use hopfuse::{DType, IndexType, LaunchPlan};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tracing::{debug, info, warn};

// The run's wire types are defined in `hopfuse-api` (shared with the playground).
pub use hopfuse_api::run::{
    CeilingWhen, CopyCeiling, GemmCeiling, L2Policy, Progress, RunError, RunRequest, RunResult,
    Stage,
};

/// The float64 reference of a run: what computes the expected outputs, and how close each
/// output must come to them.
pub struct Reference<'a> {
    pub evaluate: Box<Evaluate<'a>>,
    /// Each output's relative-L2 tolerance: what a fusion's computation earns
    /// ([`Tolerances::of_fusion`]), a hand-written kernel's dtypes' otherwise.
    pub tolerances: Tolerances,
}

/// The float64 reference's values: sizes and input values (tensors and scalars by name) to
/// outputs.
pub type Evaluate<'a> = dyn Fn(
        &BTreeMap<String, i64>,
        &BTreeMap<String, Vec<f64>>,
    ) -> Result<BTreeMap<String, Vec<f64>>, String>
    + 'a;

// The host half of staging (`host.rs`), timing and finishing a staged run (`timing.rs`) and A/B
// runs (`ab.rs`) are parts of the engine.
mod ab;
mod host;
mod segmented;
mod timing;
pub use ab::{run_ab_on, AbRun, PairRatios};
use host::{check_reference_outputs, host_reference_note, stage_host, Expected, HostStaged};
pub use segmented::{compile_split, SplitCompiled};

// Preparing a run (no GPU) is `crate::prepare`; re-exported for the engine's callers.
pub use crate::prepare::{
    choose_index_type, compile_for_run, lower, lowerings, prepare, tensor_elements, PrepareError,
    Prepared, Setup,
};

/// A program ready to run: compiled for the request (here, or by the service) and its
/// unscheduled fusion for the reference.
struct ForRun {
    prepared: Prepared,
    fusion: hopfuse::fusion::Fusion,
}

impl ForRun {
    /// Uses `prepared` when the caller has it (then only the front end runs, for the reference
    /// fusion; its plan must take the request's sizes: a kernel specialised to other sizes is
    /// refused), else compiles the request. The request's input fills are checked too, so a
    /// bad `documents` entry is told before any device opens.
    fn of(req: &RunRequest, prepared: Option<&Prepared>) -> Result<ForRun, RunError> {
        let program = match prepared {
            Some(p) => {
                p.plan
                    .concretize(&req.sizes)
                    .map_err(|e| RunError::new(Stage::Sizes, e.to_string()))?;
                let fusion = hopfuse::reference_fusion(&req.source)
                    .map_err(|d| RunError::new(Stage::Compile, d.render(&req.source, &req.file)))?;
                ForRun {
                    prepared: p.clone(),
                    fusion,
                }
            }
            None => {
                let (c, setup) = prepare(req)?;
                ForRun {
                    prepared: Prepared::new(&c, setup),
                    fusion: c.fusion,
                }
            }
        };
        host::input_fills(req)?;
        Ok(program)
    }

    /// The float64 reference of the fusion, on every core, and the tolerances its outputs earn.
    fn reference(&self) -> Reference<'_> {
        Reference {
            evaluate: Box::new(move |sizes, inputs| {
                hopfuse::backend::reference::evaluate_with(
                    &self.fusion,
                    sizes,
                    inputs,
                    &crate::host_parallel::Threads::all(),
                )
            }),
            tolerances: Tolerances::of_fusion(&self.fusion),
        }
    }
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

/// [`run`] with the kernel's CUDA replaced by `cuda` (the CLI's `run --cuda-file`): a hand
/// edit of the generated source, launched with the program's own launch plan and inputs, then
/// validated and timed as the generated kernel is. This is how a change to a kernel is measured
/// before the compiler is taught to make it. A fusion run as several kernels is refused. NVRTC's
/// warnings on the edit (a variable the edit left unused) go to `warned` and the run goes on:
/// the generated kernel's are errors, since the compiler must not make them, but a hand edit is
/// an experiment.
pub fn run_edited(
    req: &RunRequest,
    cuda: &str,
    warned: &mut dyn FnMut(&str),
) -> Result<RunResult, RunError> {
    req.check()?;
    if segmented::split_of(req).is_some() {
        return Err(RunError::new(
            Stage::Request,
            "this fusion runs as several kernels; an edited CUDA source replaces one kernel",
        ));
    }
    let program = for_run(req, None, &mut NoHooks)?;
    execute_program(
        &mut None,
        req,
        &program,
        Some(cuda),
        &mut EditedHooks { warned },
    )
}

/// [`run_edited`]'s hooks: NVRTC's warnings reported, not refused.
pub struct EditedHooks<'w> {
    pub warned: &'w mut dyn FnMut(&str),
}

impl Hooks for EditedHooks<'_> {
    fn cubin(&mut self, cuda: &str, name: &str) -> Result<nvrtc::Cubin, nvrtc::NvrtcError> {
        let cubin = nvrtc::compile(cuda, name)?;
        if !cubin.warnings.is_empty() {
            (self.warned)(&cubin.log);
        }
        Ok(cubin)
    }
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

/// One timed launch of a side for [`Gpu::time_pairs`] (`ab.rs`): its untimed work before the launch (an
/// L2 flush) and the launch itself (one kernel, or every kernel of a split fusion in order).
type TimedOps<'s> = (
    Box<dyn FnMut() -> Result<(), RunError> + 's>,
    Box<dyn FnMut(u64) -> Result<(), RunError> + 's>,
);

/// A run ready to be timed: the kernel loaded, its tensor sets on the device, the first launch
/// validated, the L2 policy chosen.
struct Staged<'a> {
    dev: &'a Device,
    req: &'a RunRequest,
    plan: &'a LaunchPlan,
    setup: &'a Setup,
    /// The launch: `setup`'s, with a persistent grid fitted to the CTAs resident at once.
    launch: hopfuse::plan::ConcreteLaunch,
    func: cudarc::driver::CudaFunction,
    /// The kernel's module, for its clock probe (`crate::clock`).
    module: std::sync::Arc<cudarc::driver::CudaModule>,
    attributes: KernelAttributes,
    /// CTAs (or clusters) resident at once and the grid's waves (`crate::occupancy`).
    residency: hopfuse_api::run::Residency,
    cubin_bytes: usize,
    nvrtc_ms: f64,
    tensors: Vec<Tensor>,
    expected: BTreeMap<String, Vec<f64>>,
    /// Each output's tolerance (the reference's).
    tolerances: &'a Tolerances,
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
        tolerances,
        cubin,
        working_set,
        min_global_bytes,
    } = host;
    let sizes = &req.sizes;
    let sizes_err = |e: String| RunError::new(Stage::Sizes, e);
    let (cubin_bytes, nvrtc_ms) = (cubin.image.len(), cubin.compile_ms);
    let mut launch = setup.launch.clone();
    info!(
        "device: {} (sm_{}{})",
        gpu.info.name, gpu.info.compute_capability.0, gpu.info.compute_capability.1
    );
    let Loaded {
        module,
        func,
        attributes,
        residency,
    } = load_kernel(gpu, cubin.image, plan, sizes, &mut launch, sizes_err)?;
    let (free, _) = gpu.memory()?;
    if working_set > free {
        return Err(RunError::new(
            Stage::Cuda,
            format!("the tensors need {working_set} bytes but the device has {free} bytes free"),
        ));
    }
    let (expected, reference_note) = reference_on_device(expected, dev, &tensors, sizes, hooks)?;

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
        bind_args(plan, sizes, setup.index_type, &scalars, &pointers)
    };

    // First launch: correctness.
    hooks.progress(Progress::Launch);
    let mut args0 = args_for(&sets[0])?;
    gpu.launch(&func, &launch, &mut args0)?;
    gpu.sync("the first launch of the kernel")?;
    hooks.progress(Progress::Validate);
    let validation = check_outputs(gpu, &tensors, &expected, tolerances, &sets[0])?;
    debug!(
        elements = tensors.iter().map(|t| t.elements).sum::<u64>(),
        "first launch validated"
    );

    let (l2_policy, flush) = prepare_l2(gpu, working_set, &mut sets)?;
    let args: Vec<KernelArgs> = sets.iter().map(|s| args_for(s)).collect::<Result<_, _>>()?;
    Ok(Staged {
        dev,
        req,
        plan,
        setup,
        launch,
        func,
        module,
        attributes,
        residency,
        cubin_bytes,
        nvrtc_ms,
        tensors,
        expected,
        tolerances,
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

/// The reference outputs and how they were computed: the host's, or a large matrix product's
/// by cuBLAS DGEMM now that the device is open (before the kernel's first launch: a faulting
/// kernel may poison the context), the host's when that fails.
fn reference_on_device(
    expected: Expected<'_>,
    dev: &Device,
    tensors: &[Tensor],
    sizes: &BTreeMap<String, i64>,
    hooks: &mut dyn Hooks,
) -> Result<(BTreeMap<String, Vec<f64>>, String), RunError> {
    let (shape, inputs, reference) = match expected {
        Expected::Host(e) => return Ok((e, host_reference_note())),
        Expected::Gemm {
            shape,
            inputs,
            reference,
        } => (shape, inputs, reference),
    };
    info!("evaluating the float64 reference with cuBLAS DGEMM");
    hooks.progress(Progress::Reference);
    let on_gpu = dev
        .blas()
        .and_then(|blas| crate::gemm_reference::on_device(&dev.gpu, blas, &shape, sizes, &inputs));
    let (expected, note) = match on_gpu {
        Ok(c) => (
            BTreeMap::from([(shape.c.clone(), c)]),
            crate::gemm_reference::describe(&shape, sizes),
        ),
        Err(e) => {
            warn!("the GPU reference failed ({e}); computing it on the host");
            let expected = (reference.evaluate)(sizes, &inputs)
                .map_err(|e| RunError::new(Stage::Reference, e))?;
            let note = format!("{} (the GPU reference failed: {e})", host_reference_note());
            (expected, note)
        }
    };
    check_reference_outputs(tensors, &expected)?;
    Ok((expected, note))
}

/// A kernel's arguments in its plan's order: each tensor parameter's device address from
/// `pointers` (in order), the sizes in the kernel's index type, the scalars' values and the
/// TMA tensor maps encoded from the addresses. Used by a run of one kernel and by each kernel
/// of a split fusion (`segmented.rs`).
pub(super) fn bind_args(
    plan: &LaunchPlan,
    sizes: &BTreeMap<String, i64>,
    index_type: IndexType,
    scalars: &BTreeMap<String, f64>,
    pointers: &[u64],
) -> Result<KernelArgs, RunError> {
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
            Param::Scalar { name, dtype, .. } => {
                gpu::Arg::Word(data::scalar_slot(*dtype, scalars[name]))
            }
            Param::TensorMap { name, map } => {
                gpu::Arg::Map(Box::new(encode_map(plan, *map, name, sizes, pointers)?))
            }
        });
    }
    Ok(KernelArgs::from_args(args))
}

/// The L2 between timed launches: copies of the tensors rotated when a few suffice (added to
/// `sets`), else a buffer to flush it with; nothing when the tensors are over twice its size.
fn prepare_l2(
    gpu: &Gpu,
    working_set: u64,
    sets: &mut Vec<Vec<cudarc::driver::CudaSlice<u8>>>,
) -> Result<(L2Policy, Option<cudarc::driver::CudaSlice<u8>>), RunError> {
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
    Ok((l2_policy, flush))
}

/// A kernel loaded for a launch.
struct Loaded {
    module: std::sync::Arc<cudarc::driver::CudaModule>,
    func: cudarc::driver::CudaFunction,
    attributes: KernelAttributes,
    /// CTAs (or clusters) resident at once and the grid's waves (`crate::occupancy`).
    residency: hopfuse_api::run::Residency,
}

/// Loads `plan`'s kernel from its CUBIN and readies `launch` for it: its shared memory checked
/// against the device (and the 48 KiB default raised when it needs more), its block against
/// the compiled kernel's limit, and a persistent grid fitted to the CTAs resident at once.
/// Used by a run of one kernel and by each kernel of a split fusion (`segmented.rs`).
fn load_kernel(
    gpu: &Gpu,
    cubin: Vec<u8>,
    plan: &LaunchPlan,
    sizes: &BTreeMap<String, i64>,
    launch: &mut hopfuse::plan::ConcreteLaunch,
    sizes_err: impl Fn(String) -> RunError,
) -> Result<Loaded, RunError> {
    let (module, func) = gpu.load_module(cubin, &plan.kernel_name)?;
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
    // After the shared memory limit is raised: the occupancy calculator reads it.
    let mut residency = crate::occupancy::residency(gpu, &func, launch, plan);
    crate::occupancy::fit_persistent(plan, sizes, launch, &mut residency);
    Ok(Loaded {
        module,
        func,
        attributes,
        residency,
    })
}

fn check_outputs(
    gpu: &Gpu,
    tensors: &[Tensor],
    expected: &BTreeMap<String, Vec<f64>>,
    tolerances: &Tolerances,
    set: &[cudarc::driver::CudaSlice<u8>],
) -> Result<Vec<Check>, RunError> {
    let mut checks = Vec::new();
    for (t, buf) in tensors.iter().zip(set) {
        if t.role != TensorRole::Output {
            continue;
        }
        let out = data::decode(t.dtype, &gpu.download(buf, t.bytes as usize)?);
        let check = tolerances
            .of(&t.name)
            .and_then(|tolerance| {
                validate::check(&t.name, t.dtype, tolerance, &out, &expected[&t.name])
            })
            .map_err(|e| RunError::new(Stage::Reference, e))?;
        debug!(?check, "validated");
        checks.push(check);
    }
    Ok(checks)
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
    let timed = staged.time_rounds(hooks)?;
    let bytes = staged.min_global_bytes;
    let clock_slots = match req.clock {
        true => {
            let ctas: u64 = staged.launch.grid.iter().map(|&g| g as u64).product();
            crate::clock::read_slots(&dev.gpu, &staged.module, ctas)?
        }
        false => None,
    };
    // The copy ceiling is measured (when not kept) after the tensors are freed.
    let mut result = staged.finish(timed.timing, None, timed.cublas, hooks)?;
    result.peers = timed.peers;
    if let Some(slots) = clock_slots {
        let peak = plan
            .matmul
            .as_ref()
            .and_then(|m| hopfuse::target::tensor_flop_per_sm_cycle(m.a_dtype, m.b_dtype));
        let product = result.flops.map(|f| (f, peak));
        result.clock = crate::clock::reading(
            &slots,
            timed.last_launch_us,
            result.device.sm_count,
            product,
        );
    }
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
    // A fusion no scheduler takes whole runs as several kernels (the service's `prepared`
    // is the one-kernel compile, so it is not used).
    req.check()?;
    if let Some(split) = segmented::split_of(req) {
        return segmented::run_split(slot, req, &split, hooks);
    }
    let program = for_run(req, prepared, hooks)?;
    execute_program(slot, req, &program, None, hooks)
}

/// Runs `program` (its own CUDA, or `cuda` in place of it) on the device in `slot`.
fn execute_program(
    slot: &mut Option<Device>,
    req: &RunRequest,
    program: &ForRun,
    cuda: Option<&str>,
    hooks: &mut dyn Hooks,
) -> Result<RunResult, RunError> {
    // The GPU before the float64 reference and NVRTC: on a machine without one, a program that
    // compiles is told that, not asked for NVRTC or kept waiting for its reference.
    device(slot)?;
    let p = &program.prepared;
    let reference = program.reference();
    let cuda = cuda.unwrap_or(&p.cuda);
    execute_on(slot, req, cuda, &p.plan, &p.setup, &reference, hooks)
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
mod tests;
