//! The bodies and answers of the service's endpoints (docs/api.md), other than a run's result
//! ([`crate::job`]) and inspection ([`crate::inspect`]): `GET /api/health`, `POST
//! /api/compile`, `POST /api/run`, `GET /api/jobs/{id}` while a job runs, a job's cancel,
//! short links, the run history, and the JSON error every 4xx/5xx carries (a tune job's body
//! and result are in [`crate::tune`]).
//!
//! Request bodies deny unknown fields (a typo is a 400, not a silently ignored option); optional
//! fields are left out when unset, so the playground's bodies are as small as docs/api.md shows.

use crate::distributed::DistributedHealth;
use crate::job::{JobStage, QueueStats};
use crate::run::{DeviceInfo, Fault};
use hopfuse::{Diagnostic, IndexType, LaunchPlan};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Every error status under `/api`: a sentence, and for some errors the limit that was
/// exceeded, the program's diagnostics or when to retry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    /// The limit that was exceeded (`max_program_bytes`, `queue_cap`, `compile_timeout_s`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// Its value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<serde_json::Number>,
    /// Program errors (a program that does not compile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<Vec<Diagnostic>>,
    /// Seconds until a retry may succeed (429; also the `Retry-After` header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u64>,
}

/// `GET /api/health`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// Always `ok`.
    pub status: String,
    pub version: String,
    /// `gpu` (runs execute on the GPU), `fake` (compiled and checked only) or `agents` (the
    /// distributed mode: runs go to `hopfuse agent`s, listed in `distributed`).
    pub worker: String,
    pub gpu: Option<DeviceInfo>,
    /// Why there is no GPU.
    pub gpu_reason: Option<String>,
    /// NVRTC's `major.minor`; none: it cannot be loaded.
    pub nvrtc: Option<String>,
    pub run_available: bool,
    /// The sentence `POST /api/run` answers its 503 with.
    pub run_unavailable_reason: Option<String>,
    pub queue: QueueStats,
    /// The distributed mode (`hopfuse serve --queue`): the stream's depth, the agents and
    /// their GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distributed: Option<DistributedHealth>,
    /// (Default: zeros, as a service from before compile slots answered; its health, recorded
    /// in docs/recordings/h100_health.json, still reads.)
    #[serde(default)]
    pub compiles: CompileStats,
    /// Finished runs waiting in memory for an unreachable database. (Default: zeros, as a
    /// service from before the backlog answered.)
    #[serde(default)]
    pub run_backlog: RunBacklog,
    pub limits: Limits,
    pub uptime_s: f64,
}

/// `Health::compiles`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CompileStats {
    /// Compiles running now, abandoned ones included.
    pub running: usize,
    pub slots: usize,
    /// Programs this service has lowered.
    pub lowered: u64,
}

/// `Health::run_backlog`: runs finished while the database did not answer, written oldest
/// first once it does.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunBacklog {
    /// Runs waiting now.
    pub waiting: usize,
    /// Seconds the oldest waiting run has waited; none: nothing waits.
    pub oldest_age_s: Option<f64>,
    /// Runs dropped since the start: the oldest when `limit` runs waited already, or one the
    /// database refused.
    pub dropped: u64,
    /// Runs that may wait at once (`hopfuse serve --run-backlog`).
    pub limit: usize,
}

/// `Health::limits`: the service's limits (the options of `hopfuse serve`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_program_bytes: usize,
    pub max_iters: u32,
    pub max_warmup: u32,
    pub max_tensor_bytes: u64,
    pub queue_cap: usize,
    pub client_queue_cap: usize,
    pub runs_per_minute: u32,
    pub requests_per_minute: u32,
    pub job_timeout_s: f64,
    // The limits added after the first recorded health (docs/recordings/h100_health.json):
    // zero when a service from before them does not name them.
    #[serde(default)]
    pub compile_timeout_s: f64,
    /// The longest search of a tune job (`POST /api/tune`); its default.
    #[serde(default)]
    pub tune_budget_s: f64,
    #[serde(default)]
    pub keep_runs: u64,
    #[serde(default)]
    pub keep_runs_days: u64,
    #[serde(default)]
    pub keep_runs_bytes: u64,
    pub token_required: bool,
}

/// `POST /api/compile`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompileBody {
    pub program: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<IndexType>,
}

/// The answer of `POST /api/compile`: what the in-page compiler shows. A program error is
/// still this answer, with `diagnostics` and no CUDA or plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompileAnswer {
    pub cuda: Option<String>,
    pub passes: Vec<PassIr>,
    pub plan: Option<LaunchPlan>,
    pub diagnostics: Vec<Diagnostic>,
    pub lower_ms: f64,
}

/// The kernel IR after one pass (`hopfuse::PassDump`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PassIr {
    pub name: String,
    pub summary: String,
    pub ir: String,
}

impl From<&hopfuse::PassDump> for PassIr {
    fn from(p: &hopfuse::PassDump) -> PassIr {
        PassIr {
            name: p.name.to_string(),
            summary: p.summary.to_string(),
            ir: p.ir.clone(),
        }
    }
}

/// `POST /api/run`: a program (with `program_b`, an A/B comparison), its sizes and options.
/// Unset options take the service's defaults (docs/api.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunBody {
    #[serde(default)]
    pub program: String,
    /// A/B: a second program, run after the first on the same inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_b: Option<String>,
    #[serde(default)]
    pub sizes: BTreeMap<String, i64>,
    /// Values of scalar inputs (`input eps: f32`) by name, replacing the program's `= value`
    /// or the seeded draw; each checked against its dtype (400 naming the scalar).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scalars: BTreeMap<String, f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iters: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<IndexType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_ceiling: Option<bool>,
    /// Also time the torch twin (eager, torch.compile) interleaved with the kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peers: Option<bool>,
    /// Compile the kernel with a clock probe and report the SM clock it ran at
    /// (`result.clock`; single programs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<bool>,
    /// Compile the kernel generic over its sizes instead of specialised to them (the
    /// default; `RunRequest::generic`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generic: Option<bool>,
    /// Integer inputs filled with packed-document ids, by name, each with the documents' mean
    /// length (`RunRequest::documents`; 400 naming an input that is not an integer tensor).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub documents: BTreeMap<String, std::num::NonZeroU32>,
    /// After the run, profile the kernel with Nsight Compute (`result.profile`; single
    /// programs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<bool>,
    /// A name for messages (default `playground.hf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// A fault kernel instead of the program (only with `--fault-kernels`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
}

/// The 202 answer of `POST /api/run`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunAccepted {
    pub job_id: String,
    /// The path of the job's server-sent events.
    pub events: String,
    /// The path of its result.
    pub result: String,
}

/// `GET /api/jobs/{id}` of a job that has not finished (a finished one answers its
/// [`crate::job::JobResult`] with `"done": true`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobPending {
    pub job_id: String,
    /// Always false.
    pub done: bool,
    pub stage: JobStage,
}

/// The answer of `POST /api/jobs/{id}/cancel`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CancelAnswer {
    pub job_id: String,
    /// `cancelled`: it was waiting and ended at once; `stopping`: a tune job on a worker, which
    /// stops after the candidate in progress and ends with the candidates so far; `finished`:
    /// it had ended already.
    pub state: String,
}

/// `POST /api/links`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkBody {
    pub program: String,
    /// Whatever the client wants to restore with the program (the playground: its state).
    #[serde(default)]
    pub state: Value,
}

/// The answer of `POST /api/links`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkCreated {
    pub id: String,
    /// `/api/links/{id}`.
    pub path: String,
    /// Seconds since the Unix epoch (the first time this content was stored).
    pub created_at: i64,
}

/// A stored short link: the answer of `GET /api/links/{id}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub id: String,
    pub program: String,
    /// Whatever the playground wants to restore (sizes, options, open panes), as JSON (a link
    /// stored without one reads as `null`).
    #[serde(default)]
    pub state: Value,
    /// Seconds since the Unix epoch.
    pub created_at: i64,
}

/// One finished job in the run history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: String,
    pub created_at: i64,
    pub status: String,
    pub client: String,
    /// What the worker was given (`{"request": ..., "request_b", "fault", "same_inputs"}`).
    pub request: Value,
    /// The job's result ([`crate::job::JobResult`]), as stored.
    pub result: Value,
}

/// `GET /api/runs`: the newest finished jobs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Runs {
    pub runs: Vec<RunRecord>,
}
