//! One job on a GPU's warm worker: the worker started (or restarted after a fault) with the
//! GPU's environment, the job sent, its progress forwarded as events, and its outcome (or the
//! worker's timeout, crash or exit) made into the job's [`JobResult`], an A/B job's with its
//! comparison.

use super::{
    Comparison, Job, JobResult, JobStage, JobStatus, Queue, WarmStatus, WorkerInfo, TIMEOUT_MESSAGE,
};
use crate::engine::{PairRatios, Progress};
use crate::profile::ProfileLimits;
use crate::warm::{JobEnd, WarmWorker, WorkerCommand};
use crate::worker::{Outcome, Part, WorkerEvent, WorkerJob};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A GPU's warm worker as `GET /api/health` shows it.
pub(super) fn warm_status(w: &WarmWorker) -> WarmStatus {
    WarmStatus {
        pid: w.ready.pid,
        jobs: w.jobs,
        uptime_s: w.started.elapsed().as_secs_f64(),
        startup_ms: w.ready.startup_ms,
        ceiling_gbps: w.ready.ceiling.as_ref().map(|c| c.gbps),
        gpu_error: w.ready.gpu_error.clone(),
        gpu: w.ready.gpu.as_ref().map(|g| g.name.clone()),
    }
}

impl Queue {
    pub(super) fn worker_command(&self, gpu: usize) -> WorkerCommand {
        let mut env = Vec::new();
        if self.config.gpus > 1 {
            let parent = std::env::var("CUDA_VISIBLE_DEVICES").ok();
            env.push((
                "CUDA_VISIBLE_DEVICES".to_string(),
                crate::gpu::visible_device(gpu, parent.as_deref()),
            ));
        }
        WorkerCommand {
            exe: self.config.worker_exe.clone(),
            args: self.config.worker_args.clone(),
            env,
            startup_timeout: self.config.timeout.max(Duration::from_secs(60)),
        }
    }

    pub(super) async fn run_job(
        &self,
        job: &Arc<Job>,
        gpu: usize,
        warm: &mut Option<WarmWorker>,
    ) -> JobResult {
        let queued_ms = job.elapsed_ms();
        let mut progress = Vec::new();
        if job.spec.prepared.is_some() {
            // The service lowered the program(s) before queueing the job (once, for its
            // sizes); the job reports it as its first step, as a worker that lowers does.
            job.stage(JobStage::Compiling, Some(Progress::Lowering));
            progress.push(Progress::Lowering);
        }
        let (mut outcome_a, mut outcome_b): (Option<Outcome>, Option<Outcome>) = (None, None);
        let mut cubin_cached = None;
        let mut ratios: Option<PairRatios> = None;
        let result =
            |status, message: Option<String>| JobResult::empty(&job.id, status, message, queued_ms);

        let mut spawn_ms = None;
        if warm.as_mut().is_some_and(|w| !w.is_alive()) {
            *warm = None;
        }
        if warm.is_none() {
            let t = Instant::now();
            match WarmWorker::spawn(&self.worker_command(gpu)).await {
                Ok(w) => {
                    *warm = Some(w);
                    spawn_ms = Some(t.elapsed().as_secs_f64() * 1e3);
                }
                Err(e) => {
                    let mut r = result(
                        JobStatus::Crashed,
                        Some(format!("crashed: the worker did not start: {}", e.message)),
                    );
                    r.stderr = (!e.stderr.trim().is_empty()).then_some(e.stderr);
                    return r;
                }
            }
        }
        let w = warm.as_mut().expect("a worker");
        // An A/B job runs two programs; a profiled one runs its program twice.
        let runs = job.spec.programs() + job.spec.profile as u32;
        let limit = self.config.timeout * runs;
        let payload = WorkerJob {
            spec: job.spec.clone(),
            cubin_cache: self.config.cubin_cache.clone(),
            // ncu gets the job's time limit of its own, after the run's, ending before the
            // whole job's.
            profile_limits: ProfileLimits {
                time_limit_s: self.config.timeout.as_secs_f64(),
                job_limit_s: Some(limit.as_secs_f64()),
            },
        };
        let mark = w.stderr_mark();
        let start = Instant::now();
        let end = w
            .run(&payload, limit, &mut |event| match event {
                WorkerEvent::Progress { step } => {
                    if progress.last() != Some(&step) || step == Progress::Validate {
                        job.stage(JobStage::of(step), Some(step));
                    }
                    progress.push(step);
                }
                WorkerEvent::CubinCached { .. } => cubin_cached = Some(true),
                WorkerEvent::Comparison { ratios: r } => ratios = Some(r),
                WorkerEvent::Outcome { outcome: o, part } => match part {
                    Part::A => outcome_a = Some(*o),
                    Part::B => outcome_b = Some(*o),
                },
                WorkerEvent::Ready { .. } | WorkerEvent::JobEnd { .. } => {}
            })
            .await;
        let worker_ms = start.elapsed().as_secs_f64() * 1e3;
        let mut info = WorkerInfo {
            pid: w.ready.pid,
            job_in_process: w.jobs,
            spawn_ms,
            startup_ms: w.ready.startup_ms,
            ended: None,
        };
        // (timed out, how the worker died)
        let (timed_out, died) = match end {
            JobEnd::Done { exit: None } => (false, None),
            JobEnd::Done { exit: Some(reason) } => {
                let how = w.wait_exit().await;
                info.ended = Some(format!("{reason}; the worker {how}"));
                (false, None)
            }
            JobEnd::TimedOut => {
                w.kill().await;
                info.ended = Some("killed (SIGKILL) at the job's time limit".into());
                (true, None)
            }
            JobEnd::Died => {
                let how = w.wait_exit().await;
                info.ended = Some(format!("the worker {how}"));
                (false, Some(how))
            }
        };
        let stderr_tail = w.stderr_since(mark);
        if info.ended.is_some() {
            *warm = None;
        }
        let stderr_opt = (!stderr_tail.trim().is_empty()).then(|| stderr_tail.clone());

        let from_outcome = |outcome: Option<Outcome>| match outcome {
            Some(Outcome::Measured {
                result: run,
                cubin_cached: cached,
            }) => {
                let mut r = result(
                    if run.passed {
                        JobStatus::Passed
                    } else {
                        JobStatus::Failed
                    },
                    (!run.passed).then(|| {
                        "the kernel ran but its outputs do not match the float64 reference"
                            .to_string()
                    }),
                );
                r.result = Some(run);
                r.cubin_cached = Some(cached || cubin_cached.unwrap_or(false));
                r
            }
            Some(Outcome::Error { error }) => {
                let mut r = result(JobStatus::Error, Some(error.to_string()));
                r.error = Some(error);
                r.stderr = stderr_opt.clone();
                r
            }
            Some(Outcome::Fake { compile, .. }) => {
                let mut r = result(JobStatus::Fake, Some(compile.note.clone()));
                r.fake = true;
                r.compile = Some(compile);
                r
            }
            None if timed_out => {
                // Before any launch the time went to the host (the float64 reference, NVRTC):
                // say so instead of suspecting the kernel.
                let before_launch = match progress.last() {
                    Some(Progress::Lowering) => Some("lowering"),
                    Some(Progress::Reference) => Some("the float64 reference"),
                    Some(Progress::Nvrtc) => Some("NVRTC"),
                    _ => None,
                };
                let profiling = progress.last() == Some(&Progress::Profile);
                let message = match before_launch {
                    Some(step) => format!(
                        "timed out before the kernel was launched, in {step}: the sizes need more than the job's time limit"
                    ),
                    None if profiling => "timed out while profiling the kernel with Nsight \
                                          Compute, after its run"
                        .to_string(),
                    None => TIMEOUT_MESSAGE.to_string(),
                };
                let mut r = result(JobStatus::TimedOut, Some(message));
                r.stderr = stderr_opt.clone();
                r
            }
            None => {
                let how = died.clone().unwrap_or_else(|| "ended the job".to_string());
                let mut r = result(
                    JobStatus::Crashed,
                    Some(format!("crashed: the worker {how} without a result")),
                );
                r.stderr = stderr_opt.clone();
                r
            }
        };
        let mut r = from_outcome(outcome_a);
        if job.spec.request_b.is_some() {
            let b = from_outcome(outcome_b);
            if let (Some(a), Some(b), Some(p)) = (&r.result, &b.result, &ratios) {
                r.comparison = Some(Comparison {
                    b_over_a_median: p.median,
                    b_over_a_range: [p.min, p.max],
                    pairs: p.pairs,
                    order: p.order.clone(),
                    a_median_us: a.timing.median_us,
                    b_median_us: b.timing.median_us,
                    same_inputs: job.spec.same_inputs,
                    interleaved: true,
                });
            }
            r.b = Some(Box::new(b));
        }
        r.progress = progress;
        r.worker_ms = worker_ms;
        r.worker = Some(info);
        r
    }
}
