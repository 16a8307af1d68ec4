//! A run of a fusion split into several kernels ([`hopfuse::segment`]): each segment's program
//! compiled for the run's sizes as any program is (`hopfuse_launch::specialize`), NVRTC for
//! each, one device buffer per tensor by name (the fusion's inputs filled from the seed, the
//! intermediates and outputs poisoned, each kernel's scratch its own), the kernels launched in
//! order, the fusion's final outputs validated against the float64 reference of the whole
//! fusion, then timed: all the kernels in order (the run's `timing`, interleaved with the torch
//! peers when asked for) and each kernel alone. The L2 is flushed before every timed launch
//! sequence when the tensors would fit in it (no rotated copies: the kernels share buffers).
//!
//! Takes a request whose program [`hopfuse::segment::decide`] splits; emits a [`RunResult`]
//! with [`hopfuse_api::run::SegmentsRun`]. A clock probe (`--clock`) is refused: it measures
//! one kernel. Staged in halves as a run of one kernel is ([`stage_split_host`], then
//! [`stage_split_device`] into a [`SplitStaged`], timed, finished), so an A/B run (`ab.rs`)
//! times a split side as one launch of all its kernels in order against the other side.

use super::*;
use hopfuse::segment::Segmentation;
use hopfuse_api::run::{IntermediateRun, SegmentRun, SegmentsRun};

/// The program's split for the request's sizes, when it is one ([`run_on`] runs it here).
/// None also when the program does not compile: the one-kernel path reports its errors as it
/// always has.
pub(super) fn split_of(req: &RunRequest) -> Option<Segmentation> {
    match hopfuse::segment::decide(&req.source, Some(&req.sizes)) {
        Ok(hopfuse::segment::Decision::Split(s)) => Some(s),
        _ => None,
    }
}

/// One segment compiled for the run.
struct Kernel {
    segment: hopfuse::segment::Segment,
    plan: LaunchPlan,
    cuda: String,
    setup: Setup,
}

/// A split program compiled for a request, no GPU (what the fake worker reports): the split
/// and each segment's kernel, in order.
pub struct SplitCompiled {
    pub split: Segmentation,
    pub kernels: Vec<Prepared>,
}

impl SplitCompiled {
    /// Bytes of every tensor of the run once: inputs, intermediates and outputs by name, each
    /// kernel's scratch its own.
    pub fn working_set_bytes(&self, sizes: &BTreeMap<String, i64>) -> u64 {
        let mut seen = std::collections::BTreeSet::new();
        let mut bytes = 0u64;
        for (k, p) in self.kernels.iter().enumerate() {
            for (name, dtype, role, shape) in p.plan.tensors() {
                let own = matches!(role, TensorRole::Scratch | TensorRole::Workspace);
                if !seen.insert(if own {
                    format!("{k}/{name}")
                } else {
                    name.to_string()
                }) {
                    continue;
                }
                let n = tensor_elements(shape, sizes).unwrap_or(0);
                bytes = bytes.saturating_add(n.saturating_mul(dtype.size_bytes() as u64));
            }
        }
        bytes
    }

    /// The intermediate tensors with their bytes at `sizes`.
    pub fn intermediates(
        &self,
        sizes: &BTreeMap<String, i64>,
    ) -> Result<Vec<IntermediateRun>, RunError> {
        intermediates(&self.split, sizes)
    }

    /// One sentence: how many kernels, each one's name and scheduler, and why the split.
    pub fn describe(&self) -> String {
        let kernels: Vec<String> = self
            .split
            .segments
            .iter()
            .zip(&self.kernels)
            .map(|(s, p)| format!("{} ({})", p.plan.kernel_name, s.scheduler))
            .collect();
        format!(
            "runs as {} kernels in order, {} ({})",
            kernels.len(),
            kernels.join(", then "),
            self.split.reason
        )
    }
}

/// The request's program compiled as the kernels of its split, when it is split.
pub fn compile_split(req: &RunRequest) -> Result<Option<SplitCompiled>, RunError> {
    let Some(split) = split_of(req) else {
        return Ok(None);
    };
    let kernels = compile(req, &split)?
        .into_iter()
        .map(|k| Prepared {
            cuda: k.cuda,
            plan: k.plan,
            setup: k.setup,
        })
        .collect();
    Ok(Some(SplitCompiled { split, kernels }))
}

/// Where a tensor of the run lives: its device buffer is shared by name between the kernels
/// (inputs, intermediates, outputs); scratch and workspace are per kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Input,
    Intermediate,
    Output,
    /// A kernel's own scratch (poisoned) or workspace (zeroed).
    Own,
}

struct Buffer {
    key: String,
    name: String,
    dtype: DType,
    kind: Kind,
    bytes: u64,
    init: Vec<u8>,
}

/// Compiles each segment for the request
/// ([`hopfuse_launch::specialize::compile_segments_for_sizes`]) and checks its scalars.
fn compile(req: &RunRequest, split: &Segmentation) -> Result<Vec<Kernel>, RunError> {
    let compiled = hopfuse_launch::specialize::compile_segments_for_sizes(
        split,
        &req.sizes,
        req.index,
        !req.generic,
    )
    .map_err(|e| {
        let stage = match e.error {
            PrepareError::Compile(_) => Stage::Compile,
            PrepareError::Sizes(_) => Stage::Sizes,
        };
        RunError::new(stage, e.describe(split))
    })?;
    let plans: Vec<LaunchPlan> = compiled
        .iter()
        .map(|c| c.compilation.plan.clone())
        .collect();
    crate::scalars::resolve_all(&plans, &req.scalars)
        .map_err(|e| RunError::new(Stage::Request, e))?;
    Ok(compiled
        .into_iter()
        .map(|c| Kernel {
            segment: c.segment,
            plan: c.compilation.plan,
            cuda: c.compilation.cuda,
            setup: c.setup,
        })
        .collect())
}

/// Where tensor parameter `name` (of `role`) of kernel `k` lives, and its buffer's key: the
/// fusion's inputs and outputs and the intermediates by name, a kernel's scratch its own.
fn place(
    split: &Segmentation,
    outputs: &[String],
    k: usize,
    name: &str,
    role: TensorRole,
) -> (Kind, String) {
    let kind = if outputs.iter().any(|o| o == name) {
        Kind::Output
    } else if split.intermediates.iter().any(|m| m.name == name) {
        Kind::Intermediate
    } else {
        match role {
            TensorRole::Input => Kind::Input,
            TensorRole::Output => Kind::Output,
            TensorRole::Scratch | TensorRole::Workspace => Kind::Own,
        }
    };
    let key = match kind {
        Kind::Own => format!("{k}/{name}"),
        _ => name.to_string(),
    };
    (kind, key)
}

/// The run's buffers (each once, in order of first use), the fusion's input values by name
/// (tensors and scalars, for the reference) and the scalar values.
#[allow(clippy::type_complexity)]
fn host_data(
    req: &RunRequest,
    split: &Segmentation,
    outputs: &[String],
    kernels: &[Kernel],
) -> Result<
    (
        Vec<Buffer>,
        BTreeMap<String, Vec<f64>>,
        BTreeMap<String, f64>,
    ),
    RunError,
> {
    let mut buffers: Vec<Buffer> = Vec::new();
    // The whole fusion's inputs keep their names in every segment.
    let mut seeded = host::SeededInputs::new(req)?;
    let plans: Vec<LaunchPlan> = kernels.iter().map(|k| k.plan.clone()).collect();
    let values = crate::scalars::resolve_all(&plans, &req.scalars)
        .map_err(|e| RunError::new(Stage::Request, e))?;
    for (k, kernel) in kernels.iter().enumerate() {
        for p in &kernel.plan.params {
            match p {
                Param::Tensor {
                    name,
                    dtype,
                    role,
                    shape,
                } => {
                    let (kind, key) = place(split, outputs, k, name, *role);
                    if buffers.iter().any(|b| b.key == key) {
                        continue;
                    }
                    let (_, n) = host::tensor_len(name, shape, &req.sizes)?;
                    let init = match (kind, role) {
                        (Kind::Input, _) => seeded.tensor(name, *dtype, n),
                        (Kind::Own, TensorRole::Workspace) => {
                            vec![0; n * dtype.size_bytes() as usize]
                        }
                        _ => data::poison(*dtype, n),
                    };
                    buffers.push(Buffer {
                        key,
                        name: name.clone(),
                        dtype: *dtype,
                        kind,
                        bytes: init.len() as u64,
                        init,
                    });
                }
                Param::Scalar { name, dtype, .. } => {
                    if !seeded.scalars.contains_key(name) {
                        seeded.scalar(name, *dtype, values[name.as_str()]);
                    }
                }
                Param::Size { .. } | Param::TensorMap { .. } => {}
            }
        }
    }
    Ok((buffers, seeded.values, seeded.scalars))
}

/// A kernel loaded and its arguments bound to the run's buffers.
struct Ready {
    func: cudarc::driver::CudaFunction,
    launch: hopfuse::plan::ConcreteLaunch,
    attributes: KernelAttributes,
    residency: hopfuse_api::run::Residency,
    args: KernelArgs,
    cubin_bytes: usize,
    nvrtc_ms: f64,
}

/// What [`load`] binds a kernel's arguments to.
struct Bound<'a> {
    split: &'a Segmentation,
    outputs: &'a [String],
    buffers: &'a [Buffer],
    slices: &'a [cudarc::driver::CudaSlice<u8>],
    scalars: &'a BTreeMap<String, f64>,
}

fn load(
    dev: &Device,
    req: &RunRequest,
    k: usize,
    kernel: &Kernel,
    cubin: nvrtc::Cubin,
    bound: &Bound,
) -> Result<Ready, RunError> {
    let gpu = &dev.gpu;
    let sizes = &req.sizes;
    let plan = &kernel.plan;
    let sizes_err = |e: String| {
        RunError::new(
            Stage::Sizes,
            format!("segment `{}`: {e}", kernel.segment.name),
        )
    };
    let (cubin_bytes, nvrtc_ms) = (cubin.image.len(), cubin.compile_ms);
    let mut launch = kernel.setup.launch.clone();
    let super::Loaded {
        func,
        attributes,
        residency,
        ..
    } = super::load_kernel(gpu, cubin.image, plan, sizes, &mut launch, sizes_err)?;
    // One pointer per tensor parameter, in order, from the run's buffers.
    let mut pointers = Vec::new();
    for p in &plan.params {
        if let Param::Tensor { name, role, .. } = p {
            let (_, wanted) = place(bound.split, bound.outputs, k, name, *role);
            let i = bound
                .buffers
                .iter()
                .position(|b| b.key == wanted)
                .ok_or_else(|| RunError::new(Stage::Cuda, format!("no buffer for `{name}`")))?;
            pointers.push(gpu::pointer_slot(&bound.slices[i], &gpu.stream));
        }
    }
    let args = super::bind_args(
        plan,
        sizes,
        kernel.setup.index_type,
        bound.scalars,
        &pointers,
    )?;
    Ok(Ready {
        func,
        launch,
        attributes,
        residency,
        args,
        cubin_bytes,
        nvrtc_ms,
    })
}

/// The final outputs against the reference.
fn check_final(
    gpu: &Gpu,
    buffers: &[Buffer],
    slices: &[cudarc::driver::CudaSlice<u8>],
    whole: &WholeReference,
) -> Result<Vec<Check>, RunError> {
    let mut checks = Vec::new();
    for (b, slice) in buffers.iter().zip(slices) {
        if b.kind != Kind::Output {
            continue;
        }
        let reference = whole.expected.get(&b.name).ok_or_else(|| {
            RunError::new(
                Stage::Reference,
                format!("the reference computed no output `{}`", b.name),
            )
        })?;
        let out = data::decode(b.dtype, &gpu.download(slice, b.bytes as usize)?);
        checks.push(
            whole
                .tolerances
                .of(&b.name)
                .and_then(|tolerance| validate::check(&b.name, b.dtype, tolerance, &out, reference))
                .map_err(|e| RunError::new(Stage::Reference, e))?,
        );
    }
    Ok(checks)
}

/// The float64 reference of the whole fusion: its final outputs' values and tolerances.
struct WholeReference {
    expected: BTreeMap<String, Vec<f64>>,
    /// What each final output's computation earns ([`Tolerances::of_fusion`]).
    tolerances: Tolerances,
}

/// The host half of a segmented run: each segment's kernel compiled, the run's buffers (the
/// inputs drawn from the seed), the float64 reference of the whole fusion and the CUBINs.
pub(super) struct SplitHost<'a> {
    req: &'a RunRequest,
    split: &'a Segmentation,
    kernels: Vec<Kernel>,
    /// The fusion's outputs by name.
    outputs: Vec<String>,
    buffers: Vec<Buffer>,
    scalars: BTreeMap<String, f64>,
    reference: WholeReference,
    cubins: Vec<nvrtc::Cubin>,
}

/// Checks the request (a clock probe is refused: it measures one kernel) and stages the host
/// half of its split run. Opens the device after compiling, as a run of one kernel does.
pub(super) fn stage_split_host<'a>(
    slot: &mut Option<Device>,
    req: &'a RunRequest,
    split: &'a Segmentation,
    hooks: &mut dyn Hooks,
) -> Result<SplitHost<'a>, RunError> {
    req.check()?;
    if req.clock {
        return Err(RunError::new(
            Stage::Request,
            format!(
                "the clock probe measures one kernel, and this fusion runs as {} ({})",
                split.segments.len(),
                split.reason
            ),
        ));
    }
    hooks.progress(Progress::Lowering);
    let kernels = compile(req, split)?;
    host::input_fills(req)?;
    device(slot)?;
    let fusion = hopfuse::reference_fusion(&req.source)
        .map_err(|d| RunError::new(Stage::Compile, d.render(&req.source, &req.file)))?;
    let outputs: Vec<String> = fusion
        .outputs
        .iter()
        .map(|&t| fusion.tensors[t].name.clone())
        .collect();
    let (buffers, inputs, scalars) = host_data(req, split, &outputs, &kernels)?;
    info!("evaluating the float64 reference of the whole fusion");
    hooks.progress(Progress::Reference);
    let expected = hopfuse::backend::reference::evaluate_with(
        &fusion,
        &req.sizes,
        &inputs,
        &crate::host_parallel::Threads::all(),
    )
    .map_err(|e| RunError::new(Stage::Reference, e))?;
    hooks.progress(Progress::Nvrtc);
    let mut cubins = Vec::new();
    for k in &kernels {
        cubins.push(
            hooks
                .cubin(&k.cuda, &format!("{}.{}.cu", req.file, k.segment.name))
                .map_err(|e| RunError::new(Stage::Nvrtc, e.to_string()))?,
        );
    }
    Ok(SplitHost {
        req,
        split,
        kernels,
        outputs,
        buffers,
        scalars,
        reference: WholeReference {
            expected,
            tolerances: Tolerances::of_fusion(&fusion),
        },
        cubins,
    })
}

/// Launches every kernel once, in order.
fn launch_all(gpu: &Gpu, loaded: &mut [Ready]) -> Result<(), RunError> {
    for l in loaded.iter_mut() {
        gpu.launch(&l.func, &l.launch, &mut l.args)?;
    }
    Ok(())
}

/// A split run ready to be timed: its buffers on the device (allocated once, shared by the
/// kernels), every kernel loaded with its arguments bound, the first launch of the kernels in
/// order validated on the final outputs, the L2 policy chosen. The kernels share buffers, so
/// the L2 is flushed (not rotated) before each timed launch sequence when the tensors fit in it.
pub(super) struct SplitStaged<'a> {
    dev: &'a Device,
    req: &'a RunRequest,
    split: &'a Segmentation,
    kernels: Vec<Kernel>,
    buffers: Vec<Buffer>,
    slices: Vec<cudarc::driver::CudaSlice<u8>>,
    loaded: Vec<Ready>,
    reference: WholeReference,
    working_set: u64,
    validation: Vec<Check>,
    l2_policy: L2Policy,
    flush: Option<cudarc::driver::CudaSlice<u8>>,
}

/// Uploads the buffers of `host`, loads its kernels, launches them once in order and validates
/// the final outputs.
pub(super) fn stage_split_device<'a>(
    host: SplitHost<'a>,
    dev: &'a Device,
    hooks: &mut dyn Hooks,
) -> Result<SplitStaged<'a>, RunError> {
    let SplitHost {
        req,
        split,
        kernels,
        outputs,
        buffers,
        scalars,
        reference,
        cubins,
    } = host;
    let gpu = &dev.gpu;
    let working_set: u64 = buffers.iter().map(|b| b.bytes).sum();
    let (free, _) = gpu.memory()?;
    if working_set > free {
        return Err(RunError::new(
            Stage::Cuda,
            format!("the tensors need {working_set} bytes but the device has {free} bytes free"),
        ));
    }
    let slices: Vec<_> = buffers
        .iter()
        .map(|b| gpu.upload(&b.init))
        .collect::<Result<_, _>>()?;
    let bound = Bound {
        split,
        outputs: &outputs,
        buffers: &buffers,
        slices: &slices,
        scalars: &scalars,
    };
    let mut loaded = Vec::new();
    for (k, (kernel, cubin)) in kernels.iter().zip(cubins).enumerate() {
        loaded.push(load(dev, req, k, kernel, cubin, &bound)?);
    }
    hooks.progress(Progress::Launch);
    launch_all(gpu, &mut loaded)?;
    gpu.sync("the first launch of the kernels")?;
    hooks.progress(Progress::Validate);
    let validation = check_final(gpu, &buffers, &slices, &reference)?;
    let l2 = gpu.info.l2_bytes;
    let (l2_policy, flush) = if working_set > 2 * l2 {
        (L2Policy::None, None)
    } else {
        (L2Policy::Flush { bytes: 2 * l2 }, Some(gpu.alloc(2 * l2)?))
    };
    Ok(SplitStaged {
        dev,
        req,
        split,
        kernels,
        buffers,
        slices,
        loaded,
        reference,
        working_set,
        validation,
        l2_policy,
        flush,
    })
}

impl<'a> SplitStaged<'a> {
    /// How many kernels one launch of the run is.
    pub(super) fn kernel_count(&self) -> usize {
        self.loaded.len()
    }

    /// One timed launch for an interleaved timer: the L2 flush (untimed), then all the kernels
    /// in order.
    pub(super) fn timed_op(&mut self) -> TimedOps<'_> {
        let gpu = &self.dev.gpu;
        let (flush, loaded) = (&self.flush, &mut self.loaded);
        (
            Box::new(move || Staged::before(flush, gpu)),
            Box::new(move |_| launch_all(gpu, loaded)),
        )
    }

    /// Times all the kernels in order, interleaved with the torch peers when asked for.
    pub(super) fn time_sequence(
        &mut self,
        hooks: &mut dyn Hooks,
    ) -> Result<(Timing, Option<hopfuse_api::run::PeersReport>), RunError> {
        let (dev, req) = (self.dev, self.req);
        let gpu = &dev.gpu;
        let (flush, loaded) = (&self.flush, &mut self.loaded);
        hooks.progress(Progress::Time);
        let mut round = |warmup: u32, iters: u32| -> Result<Vec<f64>, RunError> {
            gpu.time_samples(
                Some(&dev.spin),
                warmup,
                iters,
                || Staged::before(flush, gpu),
                |_| launch_all(gpu, loaded),
            )
        };
        if req.peers {
            let mut own = None;
            let peers = match hooks.peers() {
                Some(p) => p,
                None => own.insert(crate::peers::Peers::new()),
            };
            let run = crate::peers::PeerRun {
                req,
                expected: &self.reference.expected,
                tolerances: &self.reference.tolerances,
                l2: &self.l2_policy,
            };
            let (timing, report) = peers.interleave(&run, &mut round)?;
            Ok((timing, Some(report)))
        } else {
            let us = round(req.warmup, req.iters)?;
            let timing = Timing::from_samples(us)
                .ok_or_else(|| RunError::new(Stage::Cuda, "no valid timing samples"))?;
            Ok((timing, None))
        }
    }

    /// Each kernel timed alone (after the L2 flush, if any).
    fn time_each(&mut self) -> Result<Vec<SegmentRun>, RunError> {
        let (dev, req) = (self.dev, self.req);
        let gpu = &dev.gpu;
        let mut segment_runs = Vec::new();
        for (kernel, l) in self.kernels.iter().zip(self.loaded.iter_mut()) {
            let timing = gpu.time(
                Some(&dev.spin),
                req.warmup,
                req.iters,
                || Staged::before(&self.flush, gpu),
                |_| gpu.launch(&l.func, &l.launch, &mut l.args),
            )?;
            let bytes = kernel
                .plan
                .min_global_bytes
                .eval(&req.sizes)
                .map_err(|e| RunError::new(Stage::Sizes, e.to_string()))?
                .max(0) as u64;
            segment_runs.push(SegmentRun {
                segment: kernel.segment.name.clone(),
                kernel: kernel.plan.kernel_name.clone(),
                scheduler: kernel.segment.scheduler.clone(),
                reason: kernel.segment.reason.clone(),
                launch: l.launch.clone(),
                gbps: timing.gbps(bytes),
                timing,
                min_global_bytes: bytes,
                profile: None,
            });
        }
        Ok(segment_runs)
    }

    /// The run's result for `timing` (all the kernels in order): each kernel timed alone, the
    /// final outputs validated again, the copy ceiling.
    pub(super) fn finish(
        mut self,
        timing: Timing,
        peers: Option<hopfuse_api::run::PeersReport>,
        hooks: &mut dyn Hooks,
    ) -> Result<RunResult, RunError> {
        let segment_runs = self.time_each()?;
        let SplitStaged {
            dev,
            req,
            split,
            kernels,
            buffers,
            slices,
            loaded,
            reference,
            working_set,
            validation,
            l2_policy,
            flush,
        } = self;
        let gpu = &dev.gpu;
        hooks.progress(Progress::Validate);
        // Each kernel alone after the sequence leaves the final outputs as the sequence wrote them.
        let validation_after_timing = check_final(gpu, &buffers, &slices, &reference)?;
        drop(slices);
        drop(flush);
        gpu.sync("freeing the tensors")?;
        // The whole fusion's minimum: its inputs read and outputs written once.
        let min_global_bytes: u64 = buffers
            .iter()
            .filter(|b| matches!(b.kind, Kind::Input | Kind::Output))
            .map(|b| b.bytes)
            .sum();
        let passed = validation
            .iter()
            .chain(&validation_after_timing)
            .all(|c| c.passed);
        let first = &loaded[0];
        let warnings = loaded
            .iter()
            .flat_map(|l| crate::occupancy::warnings(&l.residency))
            .collect();
        let intermediates = intermediates(split, &req.sizes)?;
        let result = RunResult {
            file: req.file.clone(),
            kernel: kernels
                .iter()
                .map(|k| k.plan.kernel_name.as_str())
                .collect::<Vec<_>>()
                .join(" + "),
            sizes: req.sizes.clone(),
            seed: req.seed,
            index_type: kernels[0].setup.index_type,
            index_reason: kernels[0].setup.index_reason.clone(),
            launch: first.launch.clone(),
            attributes: first.attributes.clone(),
            cubin_bytes: loaded.iter().map(|l| l.cubin_bytes).sum(),
            nvrtc_ms: loaded.iter().map(|l| l.nvrtc_ms).sum(),
            device: gpu.info.clone(),
            working_set_bytes: working_set,
            l2_policy,
            warmup: req.warmup,
            gbps: timing.gbps(min_global_bytes),
            timing,
            min_global_bytes,
            copy: None,
            fraction_of_copy: None,
            flops: None,
            tflops: None,
            cublas: None,
            fraction_of_cublas: None,
            cublas_skipped: None,
            reference: Some(host::host_reference_note()),
            validation,
            validation_after_timing,
            passed,
            peers,
            profile: None,
            residency: Some(first.residency.clone()),
            warnings,
            clock: None,
            segments: Some(SegmentsRun {
                reason: split.reason.clone(),
                kernels: segment_runs,
                intermediates,
            }),
            documents: req.documents.clone(),
        };
        let copy = ceiling_for(dev, req, min_global_bytes, hooks)?;
        Ok(with_ceiling(result, copy))
    }

    /// Timed alone (all the kernels in order, then each), as [`run_split`] times it.
    pub(super) fn time_alone(mut self, hooks: &mut dyn Hooks) -> Result<RunResult, RunError> {
        let (timing, peers) = self.time_sequence(hooks)?;
        self.finish(timing, peers, hooks)
    }
}

/// The intermediate tensors with their bytes at the run's sizes.
fn intermediates(
    split: &Segmentation,
    sizes: &BTreeMap<String, i64>,
) -> Result<Vec<IntermediateRun>, RunError> {
    split
        .intermediates
        .iter()
        .map(|m| {
            Ok(IntermediateRun {
                name: m.name.clone(),
                dtype: m.dtype,
                bytes: m
                    .bytes()
                    .eval(sizes)
                    .map_err(|e| RunError::new(Stage::Sizes, e.to_string()))?
                    .max(0) as u64,
            })
        })
        .collect()
}

/// Runs the staged host half of a split run on `dev`: staged on the device, timed, finished.
pub(super) fn run_split_host(
    host: SplitHost,
    dev: &Device,
    hooks: &mut dyn Hooks,
) -> Result<RunResult, RunError> {
    stage_split_device(host, dev, hooks)?.time_alone(hooks)
}

/// Runs the segments of `split` for `req` on the device in `slot`.
pub(super) fn run_split(
    slot: &mut Option<Device>,
    req: &RunRequest,
    split: &Segmentation,
    hooks: &mut dyn Hooks,
) -> Result<RunResult, RunError> {
    let host = stage_split_host(slot, req, split, hooks)?;
    run_split_host(host, device(slot)?, hooks)
}
