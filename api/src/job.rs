//! A run as the service's queue sees it: the stages and events of a job's server-sent event
//! stream ([`JobEvent`]), how it ended ([`JobResult`], the `done` event and `GET
//! /api/jobs/{id}`), the A/B [`Comparison`], what the fake worker checked ([`FakeCompile`], a
//! split fusion's kernels in [`FakeSegments`]) and
//! the queue's counters for `GET /api/health` ([`QueueStats`]).
//!
//! Moved here from the runner's `queue.rs` and `worker.rs` (which re-export them), unchanged.

use crate::run::{Progress, RunError, RunResult};
use crate::tune::{TuneProgress, TuneResult};
use hopfuse::plan::ConcreteLaunch;
use hopfuse::IndexType;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Where a job is, as the SSE stream names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStage {
    Queued,
    Compiling,
    Running,
    Validating,
    Done,
}

impl JobStage {
    pub fn name(self) -> &'static str {
        match self {
            JobStage::Queued => "queued",
            JobStage::Compiling => "compiling",
            JobStage::Running => "running",
            JobStage::Validating => "validating",
            JobStage::Done => "done",
        }
    }

    /// The stage a worker step belongs to.
    pub fn of(step: Progress) -> JobStage {
        match step {
            Progress::Lowering | Progress::Reference | Progress::Nvrtc => JobStage::Compiling,
            Progress::Launch | Progress::Time | Progress::Ceiling | Progress::Profile => {
                JobStage::Running
            }
            Progress::Validate => JobStage::Validating,
        }
    }
}

/// One event of a job's stream.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobEvent {
    pub stage: JobStage,
    /// The worker's finer step, when it reported one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<Progress>,
    /// Jobs ahead of this one (queued only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<usize>,
    /// Milliseconds since the job was submitted.
    pub elapsed_ms: f64,
    /// The final result (done only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Arc<JobResult>>,
    /// A tune job's candidate step (`POST /api/tune`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tune: Option<TuneProgress>,
}

/// How a job ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Ran on the GPU and validated.
    Passed,
    /// Ran on the GPU; validation failed (wrong or unwritten outputs).
    Failed,
    /// Could not run: compile, NVRTC, CUDA (illegal address, launch failure, ...) errors.
    Error,
    /// Killed at the wall-clock limit.
    TimedOut,
    /// The worker died without a result.
    Crashed,
    /// Fake worker: compiled and checked, nothing ran, nothing measured.
    Fake,
    /// Cancelled (`POST /api/jobs/{id}/cancel`) before it ended.
    Cancelled,
}

impl JobStatus {
    pub fn name(self) -> &'static str {
        match self {
            JobStatus::Passed => "passed",
            JobStatus::Failed => "failed",
            JobStatus::Error => "error",
            JobStatus::TimedOut => "timed_out",
            JobStatus::Crashed => "crashed",
            JobStatus::Fake => "fake",
            JobStatus::Cancelled => "cancelled",
        }
    }
}

/// The final result of a job (`GET /api/jobs/{id}` and the `done` event).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobResult {
    pub job_id: String,
    pub status: JobStatus,
    /// True only for the fake worker: then there are no measurements at all.
    pub fake: bool,
    /// A sentence for people (errors, timeouts, crashes, fake runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The measurement (real worker only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Box<RunResult>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cubin_cached: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// What the fake worker checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compile: Option<Box<FakeCompile>>,
    /// The steps the worker reported, in order (for a timeout: how far it got).
    pub progress: Vec<Progress>,
    /// The end of the worker's stderr when it did not end normally.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// A/B: the second program's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b: Option<Box<JobResult>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparison: Option<Comparison>,
    /// The worker process that ran the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerInfo>,
    /// The agent (GPU host) that ran the job, in the distributed mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// A tune job's table, winner and winner's schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tune: Option<Box<TuneResult>>,
    pub queued_ms: f64,
    /// From sending the job to the worker to its end (not counting a worker start).
    pub worker_ms: f64,
}

impl JobResult {
    /// A result with a status and a message and nothing else yet.
    pub fn empty(
        job_id: &str,
        status: JobStatus,
        message: Option<String>,
        queued_ms: f64,
    ) -> JobResult {
        JobResult {
            job_id: job_id.to_string(),
            status,
            fake: false,
            message,
            result: None,
            cubin_cached: None,
            error: None,
            compile: None,
            progress: Vec::new(),
            stderr: None,
            b: None,
            comparison: None,
            worker: None,
            agent: None,
            tune: None,
            queued_ms,
            worker_ms: 0.0,
        }
    }
}

/// Which worker process ran a job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerInfo {
    pub pid: u32,
    /// The job's number in that process (1: its first job).
    pub job_in_process: u64,
    /// Set when the process was started for this job (no warm one was there): milliseconds
    /// until it was ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawn_ms: Option<f64>,
    /// The process's own startup (CUDA context, spin kernel, copy ceiling), as it reported it.
    pub startup_ms: f64,
    /// Why the process ended after this job (a CUDA error, a timeout, a crash), if it did: the
    /// next job gets a fresh process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
}

/// An A/B comparison of two measured runs, timed interleaved.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Comparison {
    /// The median over launch pairs of B's time / A's time (below 1: B is faster).
    pub b_over_a_median: f64,
    /// The smallest and largest per-pair ratio.
    pub b_over_a_range: [f64; 2],
    /// Timed pairs.
    pub pairs: usize,
    /// Launch order within pairs (`AB,BA alternating`).
    pub order: String,
    /// The medians of A's and B's interleaved launches.
    pub a_median_us: f64,
    pub b_median_us: f64,
    pub same_inputs: Option<bool>,
    /// True: A's and B's launches alternate in one worker process on one GPU.
    pub interleaved: bool,
    /// Kernels per launch of A and of B: more than one for a fusion split into several, each
    /// of whose launches is all its kernels in order (each kernel's own median is in that
    /// side's `segments`). Absent when one.
    #[serde(default = "one_kernel", skip_serializing_if = "is_one_kernel")]
    pub a_kernels: usize,
    #[serde(default = "one_kernel", skip_serializing_if = "is_one_kernel")]
    pub b_kernels: usize,
}

fn one_kernel() -> usize {
    1
}

fn is_one_kernel(n: &usize) -> bool {
    *n == 1
}

/// Counters for `/api/health`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueStats {
    pub queued: usize,
    pub running: usize,
    pub cap: usize,
    pub gpus: usize,
    pub finished: u64,
    pub job_timeout_s: f64,
    /// The warm worker of each GPU (`null`: none running now; one starts with the next job).
    pub workers: Vec<Option<WarmStatus>>,
}

/// A GPU's warm worker, for `GET /api/health`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WarmStatus {
    pub pid: u32,
    /// Jobs it has been sent.
    pub jobs: u64,
    pub uptime_s: f64,
    pub startup_ms: f64,
    /// The copy ceiling it measured when it started (reused by its jobs).
    pub ceiling_gbps: Option<f64>,
    /// Why it has no GPU, if it has none.
    pub gpu_error: Option<String>,
    /// The GPU it opened (its name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
}

/// What a fake worker checked: everything before the GPU.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FakeCompile {
    pub note: String,
    pub kernel: String,
    pub index_type: IndexType,
    pub index_reason: String,
    pub launch: ConcreteLaunch,
    pub working_set_bytes: u64,
    pub cuda_bytes: usize,
    /// What the request asked for that a fake worker does not do (`profile`, `clock`,
    /// `peers`), each with why; also said in `note`. Empty when it asked for none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_done: Vec<String>,
    /// Set when the fusion would run as several kernels in order (no scheduler takes it whole):
    /// why, each kernel as compiled and checked, and the tensors between them. `kernel` then
    /// names every kernel and `launch` is the first one's. Absent for one kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segments: Option<FakeSegments>,
}

/// The kernels of a fusion the fake worker compiled as several ([`FakeCompile::segments`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FakeSegments {
    /// Why the fusion is not one kernel.
    pub reason: String,
    pub kernels: Vec<FakeKernel>,
    /// The tensors one kernel writes and a later one reads, with their bytes at the sizes.
    pub intermediates: Vec<crate::run::IntermediateRun>,
}

/// One kernel of a split fusion as the fake worker compiled it: no numbers were measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FakeKernel {
    pub segment: String,
    pub kernel: String,
    pub scheduler: String,
    /// Why the segment ends where it does.
    pub reason: String,
    pub index_type: IndexType,
    pub launch: ConcreteLaunch,
    /// When the run asked for a profile: why this kernel has none (it never ran, so Nsight
    /// Compute had no launch to profile), where a GPU runner's result has
    /// `segments.kernels[].profile` (`crate::run::SegmentRun::profile`), so the playground
    /// draws both with the same code. Never measured figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<crate::profile::ProfileReport>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `name` (the SSE event names, the statuses the playground matches) is the JSON name.
    #[test]
    fn names_are_the_json_names() {
        use JobStage::*;
        for s in [Queued, Compiling, Running, Validating, Done] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.name());
        }
        use JobStatus::*;
        for s in [Passed, Failed, Error, TimedOut, Crashed, Fake, Cancelled] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.name());
        }
    }
}
