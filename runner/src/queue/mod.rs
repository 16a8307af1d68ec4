//! The service's job queue: jobs wait in a FIFO with a cap; each GPU has one warm `hopfuse
//! worker --serve` child process that runs its jobs one at a time, each with a wall-clock limit
//! (SIGKILL on timeout). A worker that is killed, crashes, or exits after a CUDA error (which may
//! poison its context) is replaced by a fresh process; every job ends with a [`JobResult`],
//! whatever the worker did, and the next job always runs. Statuses: `passed`, `failed`,
//! `error`, `timed_out`, `crashed`, `fake` (`hopfuse_api::job::JobStatus`); an A/B job's
//! comparison comes from the worker's per-pair ratios.
//!
//! Admission is counted with RAII: a queued job travels to its dispatcher as a [`Ticket`] that
//! owns its place in the queue and in its client's share ([`QueueSlot`]); dropping the ticket,
//! on any path (sent, refused by a closed channel, a dispatcher that panics or is dropped at
//! shutdown), gives both back and, if the job has no result yet, ends it with one, so every
//! subscriber gets a terminal `done` event.
//!
//! This module holds the queue itself (configuration, submission, statistics, finishing a job
//! into the run history); `admission` the RAII counts, `job` one job's events and result, `run`
//! one job on a GPU's warm worker.

use crate::store::Store;
use crate::warm::WarmWorker;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::{info, warn};

/// The message of a job killed at the wall-clock limit.
pub const TIMEOUT_MESSAGE: &str =
    "timed out: the kernel did not finish (a deadlock such as an mbarrier that never completes?)";

/// The message of a job that the service ended because it stopped (SIGTERM, Ctrl-C).
pub const STOPPED_MESSAGE: &str = "error: the service stopped (SIGTERM or Ctrl-C) before this job \
                                   ended, so it was not run to the end; submit it again";

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

pub use crate::job_spec::JobSpec;

/// The message of a job cancelled while it waited.
pub const CANCELLED_MESSAGE: &str = "cancelled before it ran";

/// What a cancel did ([`Queue::cancel`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancelled {
    /// It was waiting: it ended at once, not run.
    Ended,
    /// A tune job on a worker: it stops after the candidate in progress.
    Stopping,
    /// It had ended already.
    Finished,
    /// A run on a worker, or a job of the distributed mode: not interrupted (it ends within
    /// its time limit).
    NotCancellable,
}

/// The job was refused: too many waiting.
#[derive(Clone, Debug)]
pub struct QueueFull {
    pub cap: usize,
    /// The client's own cap was reached (not the queue's).
    pub per_client: bool,
    pub retry_after_s: u64,
}
mod admission;
mod job;
mod run;
#[cfg(test)]
mod tests;
mod tune;

use admission::{Admission, Running};
pub use admission::{QueueSlot, Ticket, NOT_RUN_MESSAGE};
pub use job::Job;
use run::warm_status;

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
    /// Set by [`Queue::stop`]: the service is stopping and takes no more runs.
    stopping: std::sync::atomic::AtomicBool,
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
            stopping: Default::default(),
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
                    if !ticket.job.take() {
                        // Cancelled while it waited: ended by the cancel.
                        continue;
                    }
                    let running = Running::start(&q.running);
                    let result = if ticket.job.spec.tune.is_some() {
                        q.run_tune(&ticket.job, gpu, &mut warm).await
                    } else {
                        q.run_job(&ticket.job, gpu, &mut warm).await
                    };
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
        let job = Arc::new(Job::new(self.new_id(), client, spec));
        job.push(JobEvent {
            stage: JobStage::Queued,
            step: None,
            position: Some(ahead),
            elapsed_ms: 0.0,
            result: None,
            tune: None,
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

    /// Stores the run of a job this queue does not hold (the distributed mode: a job whose
    /// front-end died before its result came), as [`Queue::finish`] stores its own.
    pub async fn store_run(
        &self,
        result: &JobResult,
        client: &str,
        request: &serde_json::Value,
    ) -> Result<(), crate::store::Error> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let value = serde_json::to_value(result).unwrap_or_default();
        store
            .put_run(
                &result.job_id,
                result.status.name(),
                client,
                request,
                &value,
            )
            .await
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

    /// Cancels a job (`POST /api/jobs/{id}/cancel`); None when this queue does not hold it.
    pub async fn cancel(&self, id: &str) -> Option<Cancelled> {
        let job = self.get(id)?;
        if job.result().is_some() {
            return Some(Cancelled::Finished);
        }
        if self.config.remote {
            return Some(Cancelled::NotCancellable);
        }
        if job.cancel() {
            let r = JobResult::empty(
                &job.id,
                JobStatus::Cancelled,
                Some(CANCELLED_MESSAGE.to_string()),
                job.elapsed_ms(),
            );
            self.finish(&job, r).await;
            return Some(Cancelled::Ended);
        }
        Some(if job.spec.tune.is_some() {
            Cancelled::Stopping
        } else {
            Cancelled::NotCancellable
        })
    }

    /// Whether [`Queue::stop`] was called (`POST /api/run` then answers 503).
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// The service is stopping: ends every local job that has no result yet (waiting, or
    /// running on a worker) with an `error` result ([`STOPPED_MESSAGE`]), stored in the run
    /// history as any result is, so each event stream ends with `done` and each job answers
    /// `GET /api/jobs/{id}` after a restart. A job run remotely is left to its agent (its
    /// result is answered from the results bucket). Returns how many jobs it ended; call it
    /// again after the connections are drained for a run admitted meanwhile.
    pub async fn stop(&self) -> usize {
        self.stopping.store(true, Ordering::SeqCst);
        if self.config.remote {
            return 0;
        }
        let unfinished: Vec<Arc<Job>> = self
            .jobs
            .lock()
            .expect("jobs lock")
            .values()
            .filter(|j| j.result().is_none())
            .cloned()
            .collect();
        let mut ended = 0;
        for job in unfinished {
            // A tune on a worker stops after its candidate in progress.
            job.cancel.store(true, Ordering::SeqCst);
            let stopped = JobResult::empty(
                &job.id,
                JobStatus::Error,
                Some(STOPPED_MESSAGE.to_string()),
                job.elapsed_ms(),
            );
            ended += self.finish(&job, stopped).await as usize;
        }
        ended
    }

    /// Stores and announces a job's result, once: false when the job has one already or is
    /// being finished (a job the service stopped, whose worker ends later).
    async fn finish(&self, job: &Arc<Job>, result: JobResult) -> bool {
        if !job.claim_finish() {
            return false;
        }
        let ms = result.worker_ms.max(1.0) as u64;
        let old = self.mean_ms.load(Ordering::Relaxed);
        self.mean_ms.store((old * 7 + ms) / 8, Ordering::Relaxed);
        let result = Arc::new(result);
        info!(job = %job.id, status = result.status.name(), ms = result.worker_ms, "job finished");
        // Stored before `done` is announced: whoever sees `done` can rely on the history.
        if let Some(store) = &self.store {
            let request = job.spec.history();
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
            tune: None,
        });
        self.finished.fetch_add(1, Ordering::SeqCst);
        let mut order = self.finished_order.lock().expect("order lock");
        order.push_back(job.id.clone());
        if order.len() > KEEP_FINISHED {
            if let Some(old) = order.pop_front() {
                self.jobs.lock().expect("jobs lock").remove(&old);
            }
        }
        true
    }
}
