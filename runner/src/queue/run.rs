//! One job on a GPU's warm worker: the worker started (or restarted after a fault) with the
//! GPU's environment, the job sent, its progress forwarded as events, and its outcome (or the
//! worker's timeout, crash or exit) made into the job's [`JobResult`], an A/B job's with its
//! comparison.

use super::{
    Comparison, Job, JobResult, JobStage, JobStatus, Queue, WarmStatus, WorkerInfo, TIMEOUT_MESSAGE,
};
use crate::engine::{PairRatios, Progress};
use crate::profile::ProfileLimits;
use crate::warm::{JobEnd, SpawnError, WarmWorker, WorkerCommand};
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

    /// Runs `job` on GPU `gpu`'s warm worker (started, or replaced after a fault, here) and
    /// makes what the worker said, or how it ended, into the job's result.
    pub(super) async fn run_job(
        &self,
        job: &Arc<Job>,
        gpu: usize,
        warm: &mut Option<WarmWorker>,
    ) -> JobResult {
        let queued_ms = job.elapsed_ms();
        let mut events = WorkerEvents::default();
        if job.spec.prepared.is_some() {
            // The service lowered the program(s) before queueing the job (once, for its
            // sizes); the job reports it as its first step, as a worker that lowers does.
            job.stage(JobStage::Compiling, Some(Progress::Lowering));
            events.progress.push(Progress::Lowering);
        }
        let spawn_ms = match self.ensure_worker(gpu, warm).await {
            Ok(ms) => ms,
            Err(e) => {
                let mut r = JobResult::empty(
                    &job.id,
                    JobStatus::Crashed,
                    Some(format!("crashed: the worker did not start: {}", e.message)),
                    queued_ms,
                );
                r.stderr = (!e.stderr.trim().is_empty()).then_some(e.stderr);
                return r;
            }
        };
        let w = warm.as_mut().expect("a worker");
        let mark = w.stderr_mark();
        let start = Instant::now();
        let end = self.send(job, w, &mut events).await;
        let worker_ms = start.elapsed().as_secs_f64() * 1e3;
        let mut info = WorkerInfo {
            pid: w.ready.pid,
            job_in_process: w.jobs,
            spawn_ms,
            startup_ms: w.ready.startup_ms,
            ended: None,
        };
        let ending = settle(w, end, &mut info).await;
        let stderr = w.stderr_since(mark);
        if info.ended.is_some() {
            *warm = None;
        }
        let made = Made {
            job_id: &job.id,
            queued_ms,
            progress: &events.progress,
            cubin_cached: events.cubin_cached,
            stderr: (!stderr.trim().is_empty()).then_some(stderr),
            ending,
        };
        let mut r = made.result(events.outcome_a);
        if job.spec.request_b.is_some() {
            let b = made.result(events.outcome_b);
            if let (Some(a), Some(b), Some(p)) = (&r.result, &b.result, &events.ratios) {
                r.comparison = Some(Comparison {
                    b_over_a_median: p.median,
                    b_over_a_range: [p.min, p.max],
                    pairs: p.pairs,
                    order: p.order.clone(),
                    a_median_us: a.timing.median_us,
                    b_median_us: b.timing.median_us,
                    same_inputs: job.spec.same_inputs,
                    interleaved: true,
                    a_kernels: a.kernel_count(),
                    b_kernels: b.kernel_count(),
                });
            }
            r.b = Some(Box::new(b));
        }
        r.progress = events.progress;
        r.worker_ms = worker_ms;
        r.worker = Some(info);
        r
    }

    /// A live warm worker for GPU `gpu` in `warm`: the one there, or a new one (a dead one is
    /// dropped first); the milliseconds a new one took to start.
    async fn ensure_worker(
        &self,
        gpu: usize,
        warm: &mut Option<WarmWorker>,
    ) -> Result<Option<f64>, SpawnError> {
        if warm.as_mut().is_some_and(|w| !w.is_alive()) {
            *warm = None;
        }
        if warm.is_some() {
            return Ok(None);
        }
        let t = Instant::now();
        *warm = Some(WarmWorker::spawn(&self.worker_command(gpu)).await?);
        Ok(Some(t.elapsed().as_secs_f64() * 1e3))
    }

    /// Sends `job` to worker `w` within the job's time limit, forwarding its progress as the
    /// job's stages and keeping its outcomes in `events`; how the job ended.
    async fn send(&self, job: &Arc<Job>, w: &mut WarmWorker, events: &mut WorkerEvents) -> JobEnd {
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
        w.run(&payload, limit, &mut |event| match event {
            WorkerEvent::Progress { step } => {
                if events.progress.last() != Some(&step) || step == Progress::Validate {
                    job.stage(JobStage::of(step), Some(step));
                }
                events.progress.push(step);
            }
            WorkerEvent::CubinCached { .. } => events.cubin_cached = true,
            WorkerEvent::Comparison { ratios } => events.ratios = Some(ratios),
            WorkerEvent::Outcome { outcome, part } => match part {
                Part::A => events.outcome_a = Some(*outcome),
                Part::B => events.outcome_b = Some(*outcome),
            },
            WorkerEvent::Ready { .. } | WorkerEvent::JobEnd { .. } => {}
        })
        .await
    }
}

/// What a worker said during one job.
#[derive(Default)]
struct WorkerEvents {
    progress: Vec<Progress>,
    /// A CUBIN came from a cache.
    cubin_cached: bool,
    ratios: Option<PairRatios>,
    outcome_a: Option<Outcome>,
    outcome_b: Option<Outcome>,
}

/// How a job's worker ended it, beyond its outcomes.
struct Ending {
    /// Killed at the job's time limit.
    timed_out: bool,
    /// How the worker died, when it died before ending the job.
    died: Option<String>,
}

/// Settles the worker after job end `end`: one past the time limit is killed (SIGKILL), one
/// that exits or died is waited for; `info.ended` says why it will not take another job.
async fn settle(w: &mut WarmWorker, end: JobEnd, info: &mut WorkerInfo) -> Ending {
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
    Ending { timed_out, died }
}

/// What one program's result is made from, besides its outcome.
struct Made<'a> {
    job_id: &'a str,
    queued_ms: f64,
    /// The worker's steps, in order.
    progress: &'a [Progress],
    cubin_cached: bool,
    /// The worker's stderr during the job, when it wrote any.
    stderr: Option<String>,
    ending: Ending,
}

impl Made<'_> {
    fn empty(&self, status: JobStatus, message: Option<String>) -> JobResult {
        JobResult::empty(self.job_id, status, message, self.queued_ms)
    }

    /// A program's result from its outcome, or from how the worker ended without one.
    fn result(&self, outcome: Option<Outcome>) -> JobResult {
        match outcome {
            Some(Outcome::Measured {
                result: run,
                cubin_cached,
            }) => {
                let mut r = self.empty(
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
                r.cubin_cached = Some(cubin_cached || self.cubin_cached);
                r
            }
            Some(Outcome::Error { error }) => {
                let mut r = self.empty(JobStatus::Error, Some(error.to_string()));
                r.error = Some(error);
                r.stderr = self.stderr.clone();
                r
            }
            Some(Outcome::Fake { compile, .. }) => {
                let mut r = self.empty(JobStatus::Fake, Some(compile.note.clone()));
                r.fake = true;
                r.compile = Some(compile);
                r
            }
            None if self.ending.timed_out => {
                let mut r = self.empty(JobStatus::TimedOut, Some(self.timeout_message()));
                r.stderr = self.stderr.clone();
                r
            }
            None => {
                let how = self.ending.died.as_deref().unwrap_or("ended the job");
                let mut r = self.empty(
                    JobStatus::Crashed,
                    Some(format!("crashed: the worker {how} without a result")),
                );
                r.stderr = self.stderr.clone();
                r
            }
        }
    }

    /// What a timeout is put down to: before any launch the time went to the host (the
    /// float64 reference, NVRTC), so say so instead of suspecting the kernel; after the run,
    /// to the profile.
    fn timeout_message(&self) -> String {
        let before_launch = match self.progress.last() {
            Some(Progress::Lowering) => Some("lowering"),
            Some(Progress::Reference) => Some("the float64 reference"),
            Some(Progress::Nvrtc) => Some("NVRTC"),
            _ => None,
        };
        match before_launch {
            Some(step) => format!(
                "timed out before the kernel was launched, in {step}: the sizes need more than the job's time limit"
            ),
            None if self.progress.last() == Some(&Progress::Profile) => {
                "timed out while profiling the kernel with Nsight Compute, after its run"
                    .to_string()
            }
            None => TIMEOUT_MESSAGE.to_string(),
        }
    }
}
