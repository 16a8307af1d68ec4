//! A/B runs: two programs staged on the same device with the same sizes, seed and options,
//! then timed interleaved launch pair by launch pair ([`run_ab_on`]), with B/A per pair
//! ([`PairRatios`]). Built from the engine's stages (host, device, timing, finish); split from
//! the engine's former single file without change.

use super::*;

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
/// A/B runs interleave one kernel against one kernel: a program split into several is refused.
fn one_kernel(req: &RunRequest) -> Result<(), RunError> {
    match super::segmented::split_of(req) {
        Some(split) => Err(RunError::new(
            Stage::Request,
            format!(
                "`{}` runs as {} kernels ({}); A/B runs compare one kernel with another: run it alone",
                req.file,
                split.segments.len(),
                split.reason
            ),
        )),
        None => Ok(()),
    }
}

pub fn run_ab_on(
    slot: &mut Option<Device>,
    (req_a, prepared_a): (&RunRequest, Option<&Prepared>),
    (req_b, prepared_b): (&RunRequest, Option<&Prepared>),
    hooks: &mut dyn Hooks,
) -> AbRun {
    let pa = one_kernel(req_a).and_then(|()| for_run(req_a, prepared_a, hooks));
    let pb = one_kernel(req_b).and_then(|()| for_run(req_b, prepared_b, hooks));
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
                let timed = s.time_rounds(hooks)?;
                let r = s.finish(timed.timing, None, timed.cublas, hooks)?;
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
        let (fa, la, flush_a, args_a) = (&sa.func, &sa.launch, &sa.flush, &mut sa.args);
        let (fb, lb, flush_b, args_b) = (&sb.func, &sb.launch, &sb.flush, &mut sb.args);
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
    // Each program's cuBLAS ceiling in one block after the pairs (the pairs already give both
    // programs the same GPU state).
    let (cublas_a, cublas_b) = (sa.cublas_alone(), sb.cublas_alone());
    let a = Timing::from_samples(a_us)
        .ok_or_else(no_samples)
        .and_then(|t| sa.finish(t, None, cublas_a, hooks));
    let b = Timing::from_samples(b_us)
        .ok_or_else(no_samples)
        .and_then(|t| sb.finish(t, None, cublas_b, hooks));
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
    let timed = s.time_rounds(hooks)?;
    let r = s.finish(timed.timing, None, timed.cublas, hooks)?;
    Ok(with_ceiling(r, ceiling_for(dev, req, bytes, hooks)?))
}
