//! A job's result (`api::job::JobResult` with its `api::run::RunResult`: the `done` event's data
//! or the answer of `GET /api/jobs/{id}`), read by serde into the api types and made into a
//! [`RunView`] (a split fusion's kernels, with their profiles, into a [`KernelsView`]); a result
//! this playground cannot read becomes an `error` view with serde's reason (a missing field is
//! named), never a quietly empty pane. A `fake` result never yields numbers.

use super::read;
use super::view::{
    index_name, Check, Comparison, FakeView, KernelRow, KernelsView, Measured, RunView,
};
use crate::torch_pane::PeersView;
use hopfuse::plan::ConcreteLaunch;
use hopfuse::IndexType;
use hopfuse_api::job::{self, JobEvent, JobResult};
use hopfuse_api::run::{self, L2Policy, RunResult};

fn launch_text(l: &ConcreteLaunch) -> String {
    let dims = |d: &[u32; 3]| format!("{}, {}, {}", d[0], d[1], d[2]);
    let mut t = format!("grid ({})  block ({})", dims(&l.grid), dims(&l.block));
    if l.dynamic_smem_bytes > 0 {
        t.push_str(&format!(
            "  {} dynamic shared memory",
            crate::model::bytes(l.dynamic_smem_bytes as f64)
        ));
    }
    if let Some(c) = &l.cluster {
        t.push_str(&format!("  cluster ({})", dims(c)));
    }
    t
}

impl From<&run::Check> for Check {
    fn from(c: &run::Check) -> Check {
        Check {
            output: c.output.clone(),
            passed: c.passed,
            rel_l2: Some(c.rel_l2),
            max_abs: Some(c.max_abs),
            tolerance: Some(c.tolerance),
            elements: Some(c.elements as u64),
            non_finite: c.non_finite as u64,
        }
    }
}

/// `index_type` (`i32` | `i64`) and why.
fn index_text(t: IndexType, reason: &str) -> String {
    match reason {
        "" => index_name(t).to_string(),
        reason => format!("{} ({reason})", index_name(t)),
    }
}

fn l2_text(p: &L2Policy) -> String {
    match p {
        L2Policy::None => "none (working set > 2x L2)".to_string(),
        L2Policy::Rotate { sets } => format!("rotating {sets} copies of every tensor"),
        L2Policy::Flush { bytes } => format!(
            "L2 flushed ({}) before each launch",
            crate::model::bytes(*bytes as f64)
        ),
    }
}

/// Reads a job's result: the data of the `done` event (an `api::job::JobEvent` with its result)
/// or the answer of `GET /api/jobs/{id}` (the `JobResult` itself, with `"done": true`).
pub fn parse_result(data: &str) -> RunView {
    let read = || -> Result<RunView, String> {
        let job = match read::from_str::<JobEvent>(data) {
            Ok(JobEvent {
                result: Some(job), ..
            }) => job,
            Ok(_) => return Err("the runner's done event holds no result".into()),
            // Not an event: the result itself, or the event's reason.
            Err(e) => match read::from_str::<JobResult>(data) {
                Ok(job) => job.into(),
                Err(_) => return Err(e.to_string()),
            },
        };
        Ok(RunView::from(&*job))
    };
    read().unwrap_or_else(|e| RunView {
        status: "error".into(),
        error: Some(format!(
            "the runner's result is not one this playground reads ({e}): {data}"
        )),
        ..RunView::default()
    })
}

impl From<&job::Comparison> for Comparison {
    fn from(c: &job::Comparison) -> Comparison {
        let [lo, hi] = c.b_over_a_range;
        Comparison {
            median: c.b_over_a_median,
            range: Some((lo, hi)),
            pairs: Some(c.pairs as u64),
            order: Some(c.order.clone()),
            a_median_us: Some(c.a_median_us),
            b_median_us: Some(c.b_median_us),
            same_inputs: c.same_inputs,
            kernels: (c.a_kernels > 1 || c.b_kernels > 1).then_some((c.a_kernels, c.b_kernels)),
        }
    }
}

impl Measured {
    /// `result` of a job.
    fn of(r: &RunResult, cubin_cached: Option<bool>) -> Measured {
        let cublas = r.cublas.as_ref();
        let a = &r.attributes;
        Measured {
            passed: r.passed,
            device: Some(r.device.name.clone()),
            launch: Some(launch_text(&r.launch)),
            index: Some(index_text(r.index_type, &r.index_reason)),
            l2_policy: Some(l2_text(&r.l2_policy)),
            min_us: Some(r.timing.min_us),
            median_us: Some(r.timing.median_us),
            max_us: Some(r.timing.max_us),
            samples: Some(r.timing.samples as u64),
            gbps: Some(r.gbps),
            ceiling_gbps: r.copy.as_ref().map(|c| c.gbps),
            ratio: r.fraction_of_copy,
            tflops: r.tflops,
            cublas_tflops: cublas.map(|c| c.tflops),
            cublas_ratio: r.fraction_of_cublas,
            cublas_call: cublas.map(|c| match c.rounds {
                0 | 1 => c.call.clone(),
                n => format!("{} ({n} rounds alternating with the kernel's)", c.call),
            }),
            cublas_check: cublas.map(|c| Check::from(&c.validation)),
            cublas_skipped: r.cublas_skipped.clone(),
            checks: r.validation.iter().map(Check::from).collect(),
            checks_after_timing: r.validation_after_timing.iter().map(Check::from).collect(),
            seed: Some(r.seed),
            registers: Some(i64::from(a.registers_per_thread)),
            static_smem: Some(i64::from(a.static_smem_bytes)),
            dynamic_smem: Some(i64::from(r.launch.dynamic_smem_bytes)),
            local_bytes: Some(i64::from(a.local_bytes_per_thread)),
            nvrtc_ms: Some(r.nvrtc_ms),
            cubin_cached,
            peers: r.peers.as_ref().map(PeersView::from),
            profile: r.profile.clone(),
            waves: r.residency.as_ref().map(|w| w.text()),
            warnings: r.warnings.clone(),
            kernels: r.segments.as_ref().map(KernelsView::from),
        }
    }
}

fn intermediate_text(m: &run::IntermediateRun) -> String {
    format!(
        "{}: {}, {}",
        m.name,
        m.dtype.name(),
        crate::model::bytes(m.bytes as f64)
    )
}

/// One kernel of a split fusion as a row; `timed`: its median time alone and bandwidth.
fn kernel_row(
    kernel: &str,
    scheduler: &str,
    reason: &str,
    launch: &ConcreteLaunch,
    timed: Option<(f64, f64)>,
) -> KernelRow {
    KernelRow {
        kernel: kernel.to_string(),
        scheduler: scheduler.to_string(),
        reason: reason.to_string(),
        launch: launch_text(launch),
        median_us: timed.map(|t| t.0),
        gbps: timed.map(|t| t.1),
        profile: None,
    }
}

/// The kernels of a measured split run, each timed alone (and profiled, when the run asked).
impl From<&run::SegmentsRun> for KernelsView {
    fn from(s: &run::SegmentsRun) -> KernelsView {
        KernelsView {
            reason: s.reason.clone(),
            rows: s
                .kernels
                .iter()
                .map(|k| KernelRow {
                    profile: k.profile.clone(),
                    ..kernel_row(
                        &k.kernel,
                        &k.scheduler,
                        &k.reason,
                        &k.launch,
                        Some((k.timing.median_us, k.gbps)),
                    )
                })
                .collect(),
            intermediates: s.intermediates.iter().map(intermediate_text).collect(),
        }
    }
}

/// The kernels of a split fusion as the fake worker compiled them: no times; when the run asked
/// for a profile, each kernel's says why there is none (it never ran).
impl From<&job::FakeSegments> for KernelsView {
    fn from(s: &job::FakeSegments) -> KernelsView {
        KernelsView {
            reason: s.reason.clone(),
            rows: s
                .kernels
                .iter()
                .map(|k| KernelRow {
                    profile: k.profile.clone(),
                    ..kernel_row(&k.kernel, &k.scheduler, &k.reason, &k.launch, None)
                })
                .collect(),
            intermediates: s.intermediates.iter().map(intermediate_text).collect(),
        }
    }
}

/// One job result (A's, or `b` of an A/B job).
impl From<&JobResult> for RunView {
    fn from(job: &JobResult) -> RunView {
        let fake = job.status == job::JobStatus::Fake;
        RunView {
            job_id: Some(job.job_id.clone()),
            status: job.status.name().to_string(),
            message: job.message.clone(),
            error_stage: job.error.as_ref().map(|e| e.stage.name().to_string()),
            error: job.error.as_ref().map(|e| e.message.clone()),
            progress: job.progress.iter().map(|p| p.name().to_string()).collect(),
            stderr: job.stderr.clone().filter(|e| !e.trim().is_empty()),
            // A fake result never shows numbers, whatever else it holds.
            measured: match &job.result {
                Some(r) if !fake => Some(Measured::of(r, job.cubin_cached)),
                _ => None,
            },
            fake: match &job.compile {
                Some(c) if fake => Some(FakeView {
                    note: c.note.clone(),
                    kernel: Some(c.kernel.clone()),
                    index: Some(index_text(c.index_type, &c.index_reason)),
                    launch: Some(launch_text(&c.launch)),
                    working_set_bytes: Some(c.working_set_bytes as f64),
                    cuda_bytes: Some(c.cuda_bytes as f64),
                    kernels: c.segments.as_ref().map(KernelsView::from),
                }),
                _ => fake.then(FakeView::default),
            },
            worker_ms: Some(job.worker_ms),
            agent: job.agent.clone(),
            stages: Vec::new(),
            b: job.b.as_deref().map(|b| Box::new(RunView::from(b))),
            comparison: job.comparison.as_ref().map(Comparison::from),
        }
    }
}
