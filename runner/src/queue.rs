//! The service's job queue: jobs wait in a FIFO with a cap; each GPU has one warm `hopfuse
//! worker --serve` child process that runs its jobs one at a time, each with a wall-clock limit
//! (SIGKILL on timeout). A worker that is killed, crashes, or exits after a CUDA error (which may
//! poison its context) is replaced by a fresh process; every job ends with a [`JobResult`],
//! whatever the worker did, and the next job always runs.
//!
//! Admission is counted with RAII: a queued job travels to its dispatcher as a [`Ticket`] that
//! owns its place in the queue and in its client's share ([`QueueSlot`]); dropping the ticket,
//! on any path (sent, refused by a closed channel, a dispatcher that panics or is dropped at
//! shutdown), gives both back and, if the job has no result yet, ends it with one, so every
//! subscriber gets a terminal `done` event.

use crate::engine::{PairRatios, Progress, RunRequest};
use crate::faults::Fault;
use crate::store::Store;
use crate::warm::{JobEnd, WarmWorker, WorkerCommand};
use crate::worker::{Outcome, Part, WorkerEvent, WorkerJob};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc};
use tracing::{info, warn};

/// The message of a job killed at the wall-clock limit.
pub const TIMEOUT_MESSAGE: &str =
    "timed out: the kernel did not finish (a deadlock such as an mbarrier that never completes?)";

/// Finished jobs kept in memory (older ones are still in the run history).
const KEEP_FINISHED: usize = 2000;

#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// The `hopfuse` binary that has the `worker` subcommand.
    pub worker_exe: PathBuf,
    /// Arguments after `worker` (`--fake`, `--fake-behaviour ...`).
    pub worker_args: Vec<String>,
    pub timeout: Duration,
    /// Jobs waiting or running at most; more are refused (429).
    pub cap: usize,
    /// Jobs one client may have waiting or running (0: no limit beyond `cap`).
    pub client_cap: usize,
    /// GPUs: one worker at a time on each (`CUDA_VISIBLE_DEVICES` set when more than one).
    pub gpus: usize,
    pub cubin_cache: Option<PathBuf>,
    /// Start each GPU's worker before the first job (when runs are possible at all).
    pub prespawn: bool,
    /// Jobs go to remote agents (`crate::distributed`): no local dispatchers or workers; the
    /// caller takes each admitted job's [`Ticket`] ([`Queue::admit`]) and finishes it.
    pub remote: bool,
}

// The job's wire types are defined in `hopfuse-api` (shared with the playground).
pub use hopfuse_api::job::{
    Comparison, JobEvent, JobResult, JobStage, JobStatus, QueueStats, WarmStatus, WorkerInfo,
};

/// What a job runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobSpec {
    pub request: RunRequest,
    /// A/B: the second program (same sizes, seed and options).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_b: Option<RunRequest>,
    /// A fault kernel instead of the program (`--fault-kernels`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
    /// A/B: whether both programs have the same input tensors (names, dtypes, shapes), so the
    /// seeded inputs are identical.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_inputs: Option<bool>,
    /// Profile the kernel with Nsight Compute after the run (single programs only): the job
    /// gets a second time limit for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub profile: bool,
    /// The programs as the service compiled them for the sizes, handed to the worker so it
    /// does not lower them again (not kept in the run history).
    #[serde(skip)]
    pub prepared: Option<crate::engine::Prepared>,
    #[serde(skip)]
    pub prepared_b: Option<crate::engine::Prepared>,
}

/// The job was refused: too many waiting.
#[derive(Clone, Debug)]
pub struct QueueFull {
    pub cap: usize,
    /// The client's own cap was reached (not the queue's).
    pub per_client: bool,
    pub retry_after_s: u64,
}

/// The queue's counts: jobs waiting or running in all, and per client. Only [`QueueSlot`]s
/// change them, so each increment has exactly one decrement (its drop).
#[derive(Default)]
struct Admission {
    /// Waiting + running.
    pending: AtomicUsize,
    /// Waiting + running per client (clients with none are removed).
    per_client: Mutex<HashMap<String, usize>>,
}

/// One job's place in the queue and in its client's share; released when dropped.
pub struct QueueSlot {
    admission: Arc<Admission>,
    client: String,
}

impl Admission {
    /// Takes a place for `client` unless the client's cap or the queue's cap is reached; on
    /// success also returns how many jobs are ahead.
    fn admit(
        self: &Arc<Self>,
        client: &str,
        cap: usize,
        client_cap: usize,
    ) -> Result<(QueueSlot, usize), (bool, usize)> {
        let mut per_client = self.per_client.lock().expect("per-client lock");
        let mine = per_client.get(client).copied().unwrap_or(0);
        if client_cap > 0 && mine >= client_cap {
            return Err((true, mine));
        }
        let ahead = self
            .pending
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < cap).then_some(n + 1)
            })
            .map_err(|n| (false, n))?;
        *per_client.entry(client.to_string()).or_insert(0) += 1;
        Ok((
            QueueSlot {
                admission: self.clone(),
                client: client.to_string(),
            },
            ahead,
        ))
    }

    fn of_client(&self, client: &str) -> usize {
        let per_client = self.per_client.lock().expect("per-client lock");
        per_client.get(client).copied().unwrap_or(0)
    }
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        let mut per_client = self.admission.per_client.lock().expect("per-client lock");
        if let Some(n) = per_client.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                per_client.remove(&self.client);
            }
        }
        self.admission.pending.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A queued job on its way to (and in the hands of) a dispatcher. Dropping it releases the
/// job's [`QueueSlot`] and, when the job has no result yet (it was never run: the service is
/// shutting down, or its dispatcher died), ends it with an `error` result so that nobody
/// waits on it forever.
pub struct Ticket {
    job: Arc<Job>,
    _slot: QueueSlot,
}

impl Ticket {
    pub fn job(&self) -> &Arc<Job> {
        &self.job
    }
}

/// The message of a job that ended without being run.
pub const NOT_RUN_MESSAGE: &str =
    "the job was not run: the service is shutting down (or its dispatcher stopped)";

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.job.result().is_none() {
            let r = JobResult::empty(
                &self.job.id,
                JobStatus::Error,
                Some(NOT_RUN_MESSAGE.to_string()),
                self.job.elapsed_ms(),
            );
            self.job.push(JobEvent {
                stage: JobStage::Done,
                step: None,
                position: None,
                elapsed_ms: self.job.elapsed_ms(),
                result: Some(Arc::new(r)),
            });
        }
    }
}

/// Counts a job as running while it lives.
struct Running<'a>(&'a AtomicUsize);

impl<'a> Running<'a> {
    fn start(count: &'a AtomicUsize) -> Running<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Running(count)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

pub struct Job {
    pub id: String,
    pub client: String,
    pub spec: JobSpec,
    submitted: Instant,
    state: Mutex<JobState>,
}

struct JobState {
    events: Vec<JobEvent>,
    tx: broadcast::Sender<JobEvent>,
    result: Option<Arc<JobResult>>,
}

impl Job {
    pub(crate) fn elapsed_ms(&self) -> f64 {
        self.submitted.elapsed().as_secs_f64() * 1e3
    }

    fn push(&self, event: JobEvent) {
        let mut st = self.state.lock().expect("job state lock");
        if st.result.is_some() {
            return;
        }
        if let Some(r) = &event.result {
            st.result = Some(r.clone());
        }
        st.events.push(event.clone());
        // No receivers is fine: nobody is watching.
        let _ = st.tx.send(event);
    }

    pub(crate) fn stage(&self, stage: JobStage, step: Option<Progress>) {
        self.push(JobEvent {
            stage,
            step,
            position: None,
            elapsed_ms: self.elapsed_ms(),
            result: None,
        });
    }

    pub fn result(&self) -> Option<Arc<JobResult>> {
        self.state.lock().expect("job state lock").result.clone()
    }

    /// The events so far and a receiver for the rest (atomically: none is missed or repeated).
    pub fn subscribe(&self) -> (Vec<JobEvent>, broadcast::Receiver<JobEvent>) {
        let st = self.state.lock().expect("job state lock");
        (st.events.clone(), st.tx.subscribe())
    }
}

/// A GPU's warm worker as `GET /api/health` shows it.
fn warm_status(w: &WarmWorker) -> WarmStatus {
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

pub struct Queue {
    config: QueueConfig,
    jobs: Mutex<HashMap<String, Arc<Job>>>,
    finished_order: Mutex<VecDeque<String>>,
    admission: Arc<Admission>,
    tx: mpsc::UnboundedSender<Ticket>,
    running: AtomicUsize,
    finished: AtomicU64,
    /// Mean worker time of recent jobs in milliseconds (for Retry-After).
    mean_ms: AtomicU64,
    next_id: AtomicU64,
    store: Option<Store>,
    /// Each GPU's warm worker as its dispatcher last saw it.
    workers: Mutex<Vec<Option<(WarmStatus, Instant)>>>,
}

impl Queue {
    /// Starts one dispatcher per GPU.
    pub fn start(config: QueueConfig, store: Option<Store>) -> Arc<Queue> {
        let (tx, rx) = mpsc::unbounded_channel();
        // Remote jobs have no local workers to show.
        let config_gpus = if config.remote { 0 } else { config.gpus.max(1) };
        let queue = Arc::new(Queue {
            config,
            jobs: Mutex::new(HashMap::new()),
            finished_order: Mutex::new(VecDeque::new()),
            admission: Arc::default(),
            tx,
            running: AtomicUsize::new(0),
            finished: AtomicU64::new(0),
            workers: Mutex::new(vec![None; config_gpus]),
            mean_ms: AtomicU64::new(1000),
            next_id: AtomicU64::new(0),
            store,
        });
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        let dispatchers = if queue.config.remote {
            0
        } else {
            queue.config.gpus.max(1)
        };
        for gpu in 0..dispatchers {
            let (q, rx) = (queue.clone(), rx.clone());
            tokio::spawn(async move {
                let mut warm: Option<WarmWorker> = None;
                loop {
                    if warm.is_none() && q.config.prespawn {
                        // Ready before the next job arrives; a failure is retried (and
                        // reported) by that job.
                        warm = WarmWorker::spawn(&q.worker_command(gpu)).await.ok();
                    }
                    q.note_worker(gpu, warm.as_ref());
                    let ticket = { rx.lock().await.recv().await };
                    let Some(ticket) = ticket else { break };
                    let running = Running::start(&q.running);
                    let result = q.run_job(&ticket.job, gpu, &mut warm).await;
                    q.note_worker(gpu, warm.as_ref());
                    q.finish(&ticket.job, result).await;
                    drop(running);
                    // Releases the job's place in the queue and in its client's share.
                    drop(ticket);
                }
            });
        }
        queue
    }

    fn note_worker(&self, gpu: usize, w: Option<&WarmWorker>) {
        if let Some(slot) = self.workers.lock().expect("workers lock").get_mut(gpu) {
            *slot = w.map(|w| (warm_status(w), Instant::now()));
        }
    }

    pub fn stats(&self) -> QueueStats {
        let pending = self.admission.pending.load(Ordering::SeqCst);
        let running = self.running.load(Ordering::SeqCst);
        QueueStats {
            queued: pending.saturating_sub(running),
            running,
            cap: self.config.cap,
            gpus: self.config.gpus.max(1),
            finished: self.finished.load(Ordering::SeqCst),
            job_timeout_s: self.config.timeout.as_secs_f64(),
            workers: self
                .workers
                .lock()
                .expect("workers lock")
                .iter()
                .map(|w| {
                    w.as_ref().map(|(s, at)| WarmStatus {
                        uptime_s: s.uptime_s + at.elapsed().as_secs_f64(),
                        ..s.clone()
                    })
                })
                .collect(),
        }
    }

    fn new_id(&self) -> String {
        let n = self.next_id.fetch_add(1, Ordering::SeqCst);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mut h = <sha2::Sha256 as sha2::Digest>::new();
        sha2::Digest::update(&mut h, format!("{t}/{n}/{}", std::process::id()).as_bytes());
        let digest = sha2::Digest::finalize(h);
        format!("j{}", crate::worker::hex(&digest[..8]))
    }

    /// Queues a run; `QueueFull` when `cap` jobs are already waiting or running, or the client
    /// already has `client_cap`. The job's counts are held by its [`Ticket`] from here on.
    pub fn submit(&self, spec: JobSpec, client: &str) -> Result<Arc<Job>, QueueFull> {
        let (job, ticket) = self.admit(spec, client)?;
        // When the dispatchers are gone (shutting down), the refused ticket is dropped here:
        // that ends the job with a result and releases its counts.
        let _ = self.tx.send(ticket);
        Ok(job)
    }

    /// Admits a run as [`Queue::submit`] does, but hands its [`Ticket`] to the caller instead of
    /// a local dispatcher (the distributed mode sends the job to an agent and ends it with
    /// [`Queue::finish_remote`]).
    pub fn admit(&self, spec: JobSpec, client: &str) -> Result<(Arc<Job>, Ticket), QueueFull> {
        let (cap, client_cap) = (self.config.cap, self.config.client_cap);
        let (slot, ahead) =
            self.admission
                .admit(client, cap, client_cap)
                .map_err(|(per_client, n)| QueueFull {
                    cap: if per_client { client_cap } else { cap },
                    per_client,
                    retry_after_s: self.retry_after(n),
                })?;
        let (tx, _) = broadcast::channel(256);
        let job = Arc::new(Job {
            id: self.new_id(),
            client: client.to_string(),
            spec,
            submitted: Instant::now(),
            state: Mutex::new(JobState {
                events: Vec::new(),
                tx,
                result: None,
            }),
        });
        job.push(JobEvent {
            stage: JobStage::Queued,
            step: None,
            position: Some(ahead),
            elapsed_ms: 0.0,
            result: None,
        });
        self.jobs
            .lock()
            .expect("jobs lock")
            .insert(job.id.clone(), job.clone());
        let ticket = Ticket {
            job: job.clone(),
            _slot: slot,
        };
        Ok((job, ticket))
    }

    /// Forgets a job that was admitted but never queued anywhere (its ticket is dropped by the
    /// caller): it no longer answers `GET /api/jobs/{id}`.
    pub fn forget(&self, id: &str) {
        self.jobs.lock().expect("jobs lock").remove(id);
    }

    /// Ends a job run elsewhere with its result (stored, then announced, as a local job's) and
    /// releases its counts.
    pub async fn finish_remote(&self, ticket: Ticket, result: JobResult) {
        self.finish(&ticket.job, result).await;
        drop(ticket);
    }

    /// The mean worker time of recent jobs in milliseconds.
    pub fn mean_job_ms(&self) -> u64 {
        self.mean_ms.load(Ordering::Relaxed)
    }

    /// Jobs `client` has waiting or running.
    pub fn client_jobs(&self, client: &str) -> usize {
        self.admission.of_client(client)
    }

    /// Seconds until a slot is likely free with `pending` jobs ahead.
    pub fn retry_after(&self, pending: usize) -> u64 {
        let mean = self.mean_ms.load(Ordering::Relaxed) as f64 / 1e3;
        let per_gpu = pending as f64 / self.config.gpus.max(1) as f64;
        ((per_gpu * mean).ceil() as u64).clamp(1, 600)
    }

    pub fn get(&self, id: &str) -> Option<Arc<Job>> {
        self.jobs.lock().expect("jobs lock").get(id).cloned()
    }

    async fn finish(&self, job: &Arc<Job>, result: JobResult) {
        let ms = result.worker_ms.max(1.0) as u64;
        let old = self.mean_ms.load(Ordering::Relaxed);
        self.mean_ms.store((old * 7 + ms) / 8, Ordering::Relaxed);
        let result = Arc::new(result);
        info!(job = %job.id, status = result.status.name(), ms = result.worker_ms, "job finished");
        // Stored before `done` is announced: whoever sees `done` can rely on the history.
        if let Some(store) = &self.store {
            let request = serde_json::to_value(&job.spec).unwrap_or_default();
            let value = serde_json::to_value(&*result).unwrap_or_default();
            if let Err(e) = store
                .put_run(&job.id, result.status.name(), &job.client, &request, &value)
                .await
            {
                warn!(job = %job.id, "cannot store the run: {e}");
            }
        }
        job.push(JobEvent {
            stage: JobStage::Done,
            step: None,
            position: None,
            elapsed_ms: job.elapsed_ms(),
            result: Some(result.clone()),
        });
        self.finished.fetch_add(1, Ordering::SeqCst);
        let mut order = self.finished_order.lock().expect("order lock");
        order.push_back(job.id.clone());
        if order.len() > KEEP_FINISHED {
            if let Some(old) = order.pop_front() {
                self.jobs.lock().expect("jobs lock").remove(&old);
            }
        }
    }

    fn worker_command(&self, gpu: usize) -> WorkerCommand {
        let mut env = Vec::new();
        if self.config.gpus > 1 {
            env.push(("CUDA_VISIBLE_DEVICES".to_string(), gpu.to_string()));
        }
        WorkerCommand {
            exe: self.config.worker_exe.clone(),
            args: self.config.worker_args.clone(),
            env,
            startup_timeout: self.config.timeout.max(Duration::from_secs(60)),
        }
    }

    async fn run_job(
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
        let runs = 1 + job.spec.request_b.is_some() as u32 + job.spec.profile as u32;
        let limit = self.config.timeout * runs;
        let payload = WorkerJob {
            request: job.spec.request.clone(),
            request_b: job.spec.request_b.clone(),
            fault: job.spec.fault,
            cubin_cache: self.config.cubin_cache.clone(),
            prepared: job.spec.prepared.clone(),
            prepared_b: job.spec.prepared_b.clone(),
            // ncu gets the job's time limit of its own, after the run's, ending before the
            // whole job's.
            profile: job.spec.profile.then_some(crate::profile::ProfileJob {
                time_limit_s: self.config.timeout.as_secs_f64(),
                job_limit_s: Some(limit.as_secs_f64()),
            }),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(cap: usize, client_cap: usize) -> QueueConfig {
        QueueConfig {
            worker_exe: PathBuf::from("/nonexistent/hopfuse"),
            worker_args: vec![],
            timeout: Duration::from_secs(1),
            cap,
            client_cap,
            gpus: 1,
            cubin_cache: None,
            prespawn: false,
            remote: false,
        }
    }

    fn spec() -> JobSpec {
        JobSpec {
            request: RunRequest {
                file: "t.hf".into(),
                source: String::new(),
                sizes: Default::default(),
                iters: 1,
                warmup: 0,
                seed: 1,
                index: None,
                copy_ceiling: false,
                peers: false,
            },
            request_b: None,
            fault: None,
            same_inputs: None,
            profile: false,
            prepared: None,
            prepared_b: None,
        }
    }

    /// The dispatchers are gone (their runtime was dropped, as at shutdown): a submitted job
    /// must still end with a result, and its counts must come back.
    #[test]
    fn a_job_the_dispatchers_cannot_take_ends_and_releases_its_counts() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let queue = rt.block_on(async { Queue::start(config(4, 1), None) });
        // Dropping the runtime drops the dispatcher tasks and the receiver with them.
        drop(rt);
        for _ in 0..3 {
            // With a leaked per-client count the second submit would be refused (cap 1).
            let job = queue.submit(spec(), "10.0.0.1").expect("admitted");
            let (events, _) = job.subscribe();
            let last = events.last().expect("events");
            assert_eq!(last.stage, JobStage::Done, "{events:?}");
            let result = job.result().expect("a result");
            assert_eq!(result.status, JobStatus::Error);
            assert_eq!(result.message.as_deref(), Some(NOT_RUN_MESSAGE));
            assert_eq!(queue.client_jobs("10.0.0.1"), 0);
            let stats = queue.stats();
            assert_eq!((stats.queued, stats.running), (0, 0));
        }
    }

    #[test]
    fn slots_count_per_client_and_in_all_until_dropped() {
        let admission: Arc<Admission> = Arc::default();
        let (a1, ahead) = admission.admit("a", 3, 2).unwrap();
        assert_eq!(ahead, 0);
        let (a2, ahead) = admission.admit("a", 3, 2).unwrap();
        assert_eq!(ahead, 1);
        // The client's cap, then the queue's.
        assert_eq!(admission.admit("a", 3, 2).err(), Some((true, 2)));
        let (b1, _) = admission.admit("b", 3, 2).unwrap();
        assert_eq!(admission.admit("c", 3, 2).err(), Some((false, 3)));
        // A refused admission takes nothing.
        assert_eq!(admission.of_client("c"), 0);
        assert_eq!(admission.pending.load(Ordering::SeqCst), 3);
        drop(a1);
        assert_eq!(admission.of_client("a"), 1);
        drop((a2, b1));
        assert_eq!(admission.pending.load(Ordering::SeqCst), 0);
        assert!(admission.per_client.lock().unwrap().is_empty());
    }

    /// A ticket dropped by a dispatcher that fails mid-job (a panic unwinds through it) still
    /// ends the job and releases its counts.
    #[test]
    fn a_ticket_dropped_without_a_result_ends_its_job() {
        let admission: Arc<Admission> = Arc::default();
        let (slot, _) = admission.admit("a", 1, 0).unwrap();
        let (tx, _) = broadcast::channel(4);
        let job = Arc::new(Job {
            id: "j1".into(),
            client: "a".into(),
            spec: spec(),
            submitted: Instant::now(),
            state: Mutex::new(JobState {
                events: Vec::new(),
                tx,
                result: None,
            }),
        });
        let (_, mut rx) = job.subscribe();
        let ticket = Ticket {
            job: job.clone(),
            _slot: slot,
        };
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _held = ticket;
            panic!("a dispatcher bug");
        }));
        assert!(panicked.is_err());
        let done = rx.try_recv().expect("a terminal event");
        assert_eq!(done.stage, JobStage::Done);
        assert_eq!(done.result.unwrap().status, JobStatus::Error);
        assert_eq!(admission.pending.load(Ordering::SeqCst), 0);
        assert_eq!(admission.of_client("a"), 0);
    }
}
