//! Timing and finishing a staged run ([`Staged`]): the timed launches (after the L2 flush, if
//! any), cuBLAS's ceiling on a matrix product's shape timed in rounds alternating with the
//! kernel's, interleaved with the torch peers' rounds when asked for, and the finish: the
//! outputs validated again after the timed launches, the rates and ceilings, the result.
//!
//! Why rounds: a sustained matrix product holds an H100 at its power limit, where the clock
//! falls as the board heats. Timed one after the other, the second program would run on a
//! hotter, slower GPU (measured: a kernel at parity in short runs read as 104% of cuBLAS in
//! 25,000-launch runs). Alternating rounds, the order flipped every round, give both the same
//! GPU state.

use super::{
    check_outputs, CopyCeiling, GemmCeiling, Hooks, Progress, RunError, RunResult, Stage, Staged,
};
use crate::data;
use crate::gpu::{self, Gpu, Timing};
use crate::validate;
use hopfuse::plan::SizeExpr;
use tracing::info;

impl<'a> Staged<'a> {
    /// Enqueues the untimed work before one timed launch (the L2 flush, if any).
    pub(super) fn before(
        flush: &Option<cudarc::driver::CudaSlice<u8>>,
        gpu: &Gpu,
    ) -> Result<(), RunError> {
        match flush {
            Some(buf) => gpu.memset(buf, 0),
            None => Ok(()),
        }
    }

    /// Times the launches alone; also returns the last one's time (what a clock probe saw).
    fn time(&mut self) -> Result<(Timing, f64), RunError> {
        let gpu = &self.dev.gpu;
        let (func, launch) = (&self.func, &self.launch);
        let flush = &self.flush;
        let args = &mut self.args;
        let nsets = args.len() as u64;
        info!(l2_policy = %self.l2_policy, "timing {} launches after {} warm-up launches", self.req.iters, self.req.warmup);
        let us = gpu.time_samples(
            Some(&self.dev.spin),
            self.req.warmup,
            self.req.iters,
            || Staged::before(flush, gpu),
            |k| gpu.launch(func, launch, &mut args[(k % nsets) as usize]),
        )?;
        let last = us.last().copied().unwrap_or(f64::NAN);
        let timing = Timing::from_samples(us)
            .ok_or_else(|| RunError::new(Stage::Cuda, "no valid timing samples"))?;
        Ok((timing, last))
    }

    /// The kernel's timing, with cuBLAS's ceiling (for a matrix product, unless ceilings are
    /// off) and the torch peers (when asked for) timed in rounds alternating with it: each
    /// round times the kernel and cuBLAS, in turn first, then every peer. Without either, the
    /// launches are timed in one block ([`Staged::time`]). A cuBLAS failure never fails the
    /// run: the ceiling is then `Err(why)`.
    pub(super) fn time_rounds(&mut self, hooks: &mut dyn Hooks) -> Result<Timed, RunError> {
        let (mut bench, mut cublas_error) = match self.cublas_bench() {
            Some(Ok(b)) => (Some(b), None),
            Some(Err(why)) => (None, Some(why)),
            None => (None, None),
        };
        if !self.req.peers && bench.is_none() {
            let (timing, last_launch_us) = self.time()?;
            return Ok(Timed {
                timing,
                last_launch_us,
                peers: None,
                cublas: cublas_error.map(Err),
            });
        }
        let gpu = &self.dev.gpu;
        let (func, launch, flush, args) = (&self.func, &self.launch, &self.flush, &mut self.args);
        let nsets = args.len() as u64;
        let spin = &self.dev.spin;
        let mut turn = 0u32;
        let mut last_launch_us = f64::NAN;
        let mut round = |warmup: u32, iters: u32| -> Result<Vec<f64>, RunError> {
            let mut kernel = || {
                let us = gpu.time_samples(
                    Some(spin),
                    warmup,
                    iters,
                    || Staged::before(flush, gpu),
                    |k| gpu.launch(func, launch, &mut args[(k % nsets) as usize]),
                )?;
                last_launch_us = us.last().copied().unwrap_or(f64::NAN);
                Ok(us)
            };
            let first = turn.is_multiple_of(2);
            turn += 1;
            let Some(b) = bench.as_mut().filter(|_| cublas_error.is_none()) else {
                return kernel();
            };
            let us = if first { Some(kernel()?) } else { None };
            if let Err(why) = b.time_round(gpu, spin, flush, warmup, iters) {
                cublas_error = Some(why);
            }
            match us {
                Some(us) => Ok(us),
                None => kernel(),
            }
        };
        let (timing, peers) = if self.req.peers {
            let mut own = None;
            let peers = match hooks.peers() {
                Some(p) => p,
                None => own.insert(crate::peers::Peers::new()),
            };
            let run = crate::peers::PeerRun {
                req: self.req,
                expected: &self.expected,
                tolerances: self.tolerances,
                l2: &self.l2_policy,
            };
            let (timing, report) = peers.interleave(&run, &mut round)?;
            (timing, Some(report))
        } else {
            let rounds = crate::peers::ROUNDS.min(self.req.iters).max(1);
            let mut us = Vec::new();
            for r in 0..rounds {
                let (warmup, iters) =
                    crate::peers::round_share(self.req.warmup, self.req.iters, rounds, r);
                us.extend(round(warmup, iters)?);
            }
            let timing = Timing::from_samples(us)
                .ok_or_else(|| RunError::new(Stage::Cuda, "no valid timing samples"))?;
            (timing, None)
        };
        let cublas = match (bench, cublas_error) {
            (_, Some(why)) => Some(Err(why)),
            (Some(b), None) => Some(b.ceiling()),
            (None, None) => None,
        };
        Ok(Timed {
            timing,
            last_launch_us,
            peers,
            cublas,
        })
    }

    /// cuBLAS staged for this run ([`Staged::stage_cublas`]) when it is a matrix product and
    /// asks for ceilings, or why it could not be staged.
    fn cublas_bench(&self) -> Option<Result<CublasBench<'a>, String>> {
        let shape = self
            .plan
            .matmul
            .as_ref()
            .filter(|_| self.req.copy_ceiling)?;
        Some(self.stage_cublas(shape).map_err(|e| e.to_string()))
    }

    /// Stages cuBLAS on the fusion's matrix product: the call's arguments, one output buffer
    /// of its own per tensor set (the kernel's outputs stay the kernel's), and one call on set
    /// 0 whose output is checked against the reference.
    fn stage_cublas(
        &self,
        shape: &hopfuse::plan::MatmulShape,
    ) -> Result<CublasBench<'a>, RunError> {
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
        let dev: &'a super::Device = self.dev;
        let blas = dev.blas()?;
        let index = |name: &str| {
            self.tensors
                .iter()
                .position(|t| t.name == name)
                .ok_or_else(|| RunError::new(Stage::Compile, format!("no tensor `{name}`")))
        };
        let (ia, ib, ic) = (index(&shape.a)?, index(&shape.b)?, index(&shape.c)?);
        let c = &self.tensors[ic];
        let outputs = self
            .sets
            .iter()
            .map(|_| gpu.alloc(c.bytes))
            .collect::<Result<Vec<_>, RunError>>()?;
        let slot = |buf: &cudarc::driver::CudaSlice<u8>| gpu::pointer_slot(buf, &gpu.stream);
        let pointers: Vec<(u64, u64, u64)> = self
            .sets
            .iter()
            .zip(&outputs)
            .map(|(set, out)| (slot(&set[ia]), slot(&set[ib]), slot(out)))
            .collect();
        // SAFETY: a and b are this run's operands and c cuBLAS's own output, all allocated for
        // these sizes.
        unsafe { blas.gemm(&args, types, pointers[0]) }?;
        gpu.sync("the cuBLAS call")?;
        let out = data::decode(c.dtype, &gpu.download(&outputs[0], c.bytes as usize)?);
        // cuBLAS computes the product the kernel does: the same output's tolerance.
        let validation = self
            .tolerances
            .of(&c.name)
            .and_then(|tolerance| {
                validate::check(
                    &format!("cuBLAS {}", c.name),
                    c.dtype,
                    tolerance,
                    &out,
                    &self.expected[&c.name],
                )
            })
            .map_err(|e| RunError::new(Stage::Reference, e))?;
        Ok(CublasBench {
            blas,
            args,
            types,
            pointers,
            _outputs: outputs,
            call: crate::cublas::describe(&args, shape, types.2),
            flops: shape
                .flops(&self.req.sizes)
                .map_err(|e| sizes_err(e.to_string()))?,
            validation,
            samples: Vec::new(),
            rounds: 0,
        })
    }

    /// cuBLAS's ceiling timed alone, in one block after the kernel's launches (A/B runs, whose
    /// kernel launches are interleaved pair by pair with the other program's).
    pub(super) fn cublas_alone(&self) -> Option<Result<GemmCeiling, String>> {
        let mut bench = match self.cublas_bench()? {
            Ok(b) => b,
            Err(why) => return Some(Err(why)),
        };
        let (warmup, iters) = (self.req.warmup, self.req.iters);
        Some(
            bench
                .time_round(&self.dev.gpu, &self.dev.spin, &self.flush, warmup, iters)
                .and_then(|()| bench.ceiling()),
        )
    }

    /// Checks the outputs again, frees the tensors and assembles the result; `cublas` is the
    /// ceiling [`Staged::time_rounds`] or [`Staged::cublas_alone`] measured.
    pub(super) fn finish(
        self,
        timing: Timing,
        copy: Option<CopyCeiling>,
        cublas: Option<Result<GemmCeiling, String>>,
        hooks: &mut dyn Hooks,
    ) -> Result<RunResult, RunError> {
        let gpu = &self.dev.gpu;
        hooks.progress(Progress::Validate);
        let validation_after_timing = check_outputs(
            gpu,
            &self.tensors,
            &self.expected,
            self.tolerances,
            &self.sets[0],
        )?;
        let (cublas, cublas_skipped) = match (&self.plan.matmul, self.req.copy_ceiling, cublas) {
            (Some(_), false, _) => (None, Some("ceilings not requested".to_string())),
            (_, _, Some(Ok(c))) => (Some(c), None),
            (_, _, Some(Err(why))) => (None, Some(why)),
            (_, _, None) => (None, None),
        };
        let Staged {
            req,
            plan,
            setup,
            launch,
            attributes,
            residency,
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
            launch,
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
            warnings: crate::occupancy::warnings(&residency),
            clock: None,
            segments: None,
            residency: Some(residency),
            documents: req.documents.clone(),
        })
    }
}

/// What [`Staged::time_rounds`] measured.
pub(super) struct Timed {
    pub timing: Timing,
    /// The kernel's last timed launch, in microseconds: the launch a clock probe recorded.
    pub last_launch_us: f64,
    pub peers: Option<crate::peers::PeersReport>,
    /// cuBLAS's ceiling, or why there is none; `None` when not asked for or not a product.
    pub cublas: Option<Result<GemmCeiling, String>>,
}

/// cuBLAS staged for rounds alternating with the kernel's ([`Staged::cublas_bench`]).
struct CublasBench<'a> {
    blas: &'a crate::cublas::Blas,
    args: crate::cublas::GemmArgs,
    types: crate::cublas::GemmTypes,
    /// `(a, b, c)` per tensor set: the run's operands, cuBLAS's own output.
    pointers: Vec<(u64, u64, u64)>,
    /// Owns the outputs `pointers` name.
    _outputs: Vec<cudarc::driver::CudaSlice<u8>>,
    call: String,
    flops: f64,
    validation: crate::validate::Check,
    samples: Vec<f64>,
    rounds: u32,
}

impl CublasBench<'_> {
    /// Times one round of calls like the kernel's launches: the same warm-up, count and L2
    /// flush, the tensor sets in turn. An error is said as the ceiling's reason.
    fn time_round(
        &mut self,
        gpu: &Gpu,
        spin: &gpu::Spin,
        flush: &Option<cudarc::driver::CudaSlice<u8>>,
        warmup: u32,
        iters: u32,
    ) -> Result<(), String> {
        let n = self.pointers.len() as u64;
        let us = gpu
            .time_samples(
                Some(spin),
                warmup,
                iters,
                || Staged::before(flush, gpu),
                // SAFETY: the pointers are the run's operands and cuBLAS's outputs for these sizes.
                |i| unsafe {
                    self.blas
                        .gemm(&self.args, self.types, self.pointers[(i % n) as usize])
                },
            )
            .map_err(|e| format!("timing cuBLAS: {e}"))?;
        self.samples.extend(us);
        self.rounds += 1;
        Ok(())
    }

    fn ceiling(self) -> Result<GemmCeiling, String> {
        let timing = Timing::from_samples(self.samples)
            .ok_or_else(|| "no valid timing samples".to_string())?;
        Ok(GemmCeiling {
            call: self.call,
            tflops: timing.tflops(self.flops),
            timing,
            validation: self.validation,
            rounds: self.rounds,
        })
    }
}
