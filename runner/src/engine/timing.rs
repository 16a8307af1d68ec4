//! Timing and finishing a staged run ([`Staged`]): the timed launches alone (after the L2
//! flush, if any), interleaved with the torch peers' rounds when asked for, cuBLAS's ceiling on
//! a matrix product's shape, and the finish: the outputs validated again after the timed
//! launches, the rates and ceilings, the result.

use super::{
    check_outputs, CopyCeiling, GemmCeiling, Hooks, Progress, RunError, RunResult, Stage, Staged,
};
use crate::data;
use crate::gpu::{self, Gpu, Timing};
use crate::validate;
use hopfuse::plan::SizeExpr;
use tracing::info;

impl Staged<'_> {
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

    /// Times the launches alone.
    pub(super) fn time(&mut self) -> Result<Timing, RunError> {
        let gpu = &self.dev.gpu;
        let (func, launch) = (&self.func, &self.launch);
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
    pub(super) fn time_with_peers(
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
        let (func, launch, flush, args) = (&self.func, &self.launch, &self.flush, &mut self.args);
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
    pub(super) fn finish(
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
            residency: Some(residency),
        })
    }
}
