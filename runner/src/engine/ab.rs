//! A/B runs: two programs staged on the same device with the same sizes, seed and options,
//! then timed interleaved launch pair by launch pair ([`run_ab_on`]), with B/A per pair
//! ([`PairRatios`]). Either side may be a fusion split into several kernels: one launch of it is
//! all its kernels in order (`segmented.rs` stages, launches and finishes it). Built from the
//! engine's stages (host, device, timing, finish).

use super::segmented::{self, SplitHost, SplitStaged};
use super::*;
use hopfuse::segment::Segmentation;

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

/// A side's program, checked and compiled: one kernel, or a fusion split into several
/// ([`super::segmented`]), whose kernels are compiled when it is staged.
pub(super) enum Program {
    One(Box<ForRun>),
    Split(Segmentation),
}

impl Program {
    pub(super) fn of(
        req: &RunRequest,
        prepared: Option<&Prepared>,
        hooks: &mut dyn Hooks,
    ) -> Result<Program, RunError> {
        req.check()?;
        // The service's `prepared` is the one-kernel compile: a split program does not use it.
        match segmented::split_of(req) {
            Some(split) => Ok(Program::Split(split)),
            None => for_run(req, prepared, hooks).map(|p| Program::One(Box::new(p))),
        }
    }

    fn ready(&self) -> Ready<'_> {
        match self {
            Program::One(p) => Ready::One(p, p.reference()),
            Program::Split(s) => Ready::Split(s),
        }
    }
}

/// A side's program with what staging borrows from it (a one-kernel program's reference).
enum Ready<'a> {
    One(&'a ForRun, Reference<'a>),
    Split(&'a Segmentation),
}

impl<'a> Ready<'a> {
    /// Runs it alone, as a run of it would (when the other side does not compile).
    fn run_alone(
        &self,
        slot: &mut Option<Device>,
        req: &RunRequest,
        hooks: &mut dyn Hooks,
    ) -> Result<RunResult, RunError> {
        match self {
            Ready::One(program, reference) => {
                let p = &program.prepared;
                execute_on(slot, req, &p.cuda, &p.plan, &p.setup, reference, hooks)
            }
            Ready::Split(split) => segmented::run_split(slot, req, split, hooks),
        }
    }

    fn stage_host(
        &'a self,
        slot: &mut Option<Device>,
        req: &'a RunRequest,
        hooks: &mut dyn Hooks,
    ) -> Result<SideHost<'a>, RunError> {
        match self {
            Ready::One(program, reference) => {
                let p = &program.prepared;
                stage_host(req, &p.cuda, &p.plan, &p.setup, reference, hooks).map(SideHost::One)
            }
            Ready::Split(split) => {
                segmented::stage_split_host(slot, req, split, hooks).map(SideHost::Split)
            }
        }
    }
}

/// A side's host half staged.
enum SideHost<'a> {
    One(HostStaged<'a>),
    Split(SplitHost<'a>),
}

impl<'a> SideHost<'a> {
    fn stage_device(self, dev: &'a Device, hooks: &mut dyn Hooks) -> Result<Side<'a>, RunError> {
        match self {
            SideHost::One(h) => stage_device(h, dev, hooks).map(|s| Side::One(Box::new(s))),
            SideHost::Split(h) => {
                segmented::stage_split_device(h, dev, hooks).map(|s| Side::Split(Box::new(s)))
            }
        }
    }

    /// Staged on the device and timed alone (when the other side cannot be staged).
    fn time_alone(
        self,
        slot: &mut Option<Device>,
        hooks: &mut dyn Hooks,
    ) -> Result<RunResult, RunError> {
        let dev = device(slot)?;
        self.stage_device(dev, hooks)?.time_alone(hooks)
    }
}

/// A side staged on the device, ready to be timed.
enum Side<'a> {
    One(Box<Staged<'a>>),
    Split(Box<SplitStaged<'a>>),
}

impl Side<'_> {
    fn timed_op(&mut self) -> TimedOps<'_> {
        match self {
            Side::One(s) => {
                let gpu = &s.dev.gpu;
                let (func, launch, flush, args) = (&s.func, &s.launch, &s.flush, &mut s.args);
                let sets = args.len() as u64;
                (
                    Box::new(move || Staged::before(flush, gpu)),
                    Box::new(move |k| gpu.launch(func, launch, &mut args[(k % sets) as usize])),
                )
            }
            Side::Split(s) => s.timed_op(),
        }
    }

    /// Kernels per launch of the side.
    fn kernel_count(&self) -> usize {
        match self {
            Side::One(_) => 1,
            Side::Split(s) => s.kernel_count(),
        }
    }

    /// cuBLAS's ceiling for a one-kernel matrix product, timed alone after the pairs.
    fn cublas_alone(&self) -> Option<Result<GemmCeiling, String>> {
        match self {
            Side::One(s) => s.cublas_alone(),
            Side::Split(_) => None,
        }
    }

    /// The side's result for its samples from the interleaved pairs.
    fn finish(
        self,
        us: Vec<f64>,
        cublas: Option<Result<GemmCeiling, String>>,
        hooks: &mut dyn Hooks,
    ) -> Result<RunResult, RunError> {
        let timing = Timing::from_samples(us)
            .ok_or_else(|| RunError::new(Stage::Cuda, "no valid timing samples"))?;
        match self {
            Side::One(s) => {
                let (dev, req, bytes) = (s.dev, s.req, s.min_global_bytes);
                let r = (*s).finish(timing, None, cublas, hooks)?;
                Ok(with_ceiling(r, ceiling_for(dev, req, bytes, hooks)?))
            }
            Side::Split(s) => (*s).finish(timing, None, hooks),
        }
    }

    /// Timed alone, as a run of it would be (when the other side cannot be staged).
    fn time_alone(self, hooks: &mut dyn Hooks) -> Result<RunResult, RunError> {
        match self {
            Side::One(mut s) => {
                let (dev, req, bytes) = (s.dev, s.req, s.min_global_bytes);
                hooks.progress(Progress::Time);
                let timed = s.time_rounds(hooks)?;
                let r = (*s).finish(timed.timing, None, timed.cublas, hooks)?;
                Ok(with_ceiling(r, ceiling_for(dev, req, bytes, hooks)?))
            }
            Side::Split(s) => (*s).time_alone(hooks),
        }
    }
}

/// Compiles and stages both programs on the same device with the same sizes, seed and options
/// (inputs are seeded by tensor name, so equally named and shaped inputs are identical), then
/// times them interleaved: pair k launches A then B for even k and B then A for odd k, each
/// between its own pair of events, with each program's L2 flush or tensor rotation before its
/// launch. A program split into several kernels (either side, or both) is one launch of all its
/// kernels in order, its buffers allocated once at staging, validated on its final outputs,
/// each kernel then timed alone into its result's `segments`. When only one program can run,
/// it is timed alone and there are no ratios.
pub fn run_ab_on(
    slot: &mut Option<Device>,
    (req_a, prepared_a): (&RunRequest, Option<&Prepared>),
    (req_b, prepared_b): (&RunRequest, Option<&Prepared>),
    hooks: &mut dyn Hooks,
) -> AbRun {
    let pa = Program::of(req_a, prepared_a, hooks);
    let pb = Program::of(req_b, prepared_b, hooks);
    let (pa, pb) = match (pa, pb) {
        (Ok(a), Ok(b)) => (a, b),
        // One cannot even compile: run the other alone.
        (a, b) => {
            let a = a.and_then(|p| p.ready().run_alone(slot, req_a, hooks));
            let b = b.and_then(|p| p.ready().run_alone(slot, req_b, hooks));
            return AbRun { a, b, ratios: None };
        }
    };
    let (ra, rb) = (pa.ready(), pb.ready());
    let ha = ra.stage_host(slot, req_a, hooks);
    let hb = rb.stage_host(slot, req_b, hooks);
    let (ha, hb) = match (ha, hb) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => {
            let a = a.and_then(|h| h.time_alone(slot, hooks));
            let b = b.and_then(|h| h.time_alone(slot, hooks));
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
    let sa = ha.stage_device(dev, hooks);
    let sb = hb.stage_device(dev, hooks);
    let (mut sa, mut sb) = match (sa, sb) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => {
            let a = a.and_then(|s| s.time_alone(hooks));
            let b = b.and_then(|s| s.time_alone(hooks));
            return AbRun { a, b, ratios: None };
        }
    };
    info!(
        a_kernels = sa.kernel_count(),
        b_kernels = sb.kernel_count(),
        "timing A and B interleaved"
    );
    hooks.progress(Progress::Time);
    let gpu = &dev.gpu;
    let timed = {
        let (mut before_a, mut op_a) = sa.timed_op();
        let (mut before_b, mut op_b) = sb.timed_op();
        gpu.time_pairs(
            Some(&dev.spin),
            req_a.warmup,
            req_a.iters,
            gpu::TimedOp {
                before: &mut *before_a,
                op: &mut *op_a,
            },
            gpu::TimedOp {
                before: &mut *before_b,
                op: &mut *op_b,
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
    // Each program's cuBLAS ceiling in one block after the pairs (the pairs already give both
    // programs the same GPU state).
    let (cublas_a, cublas_b) = (sa.cublas_alone(), sb.cublas_alone());
    let a = sa.finish(a_us, cublas_a, hooks);
    let b = sb.finish(b_us, cublas_b, hooks);
    AbRun { a, b, ratios }
}
