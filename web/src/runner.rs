//! The runner service's API (issue 5): health, runs streamed as server-sent events, short links.
//! Same origin by default, or a runner URL and bearer token from the settings dialog (kept in
//! this browser's localStorage, never in a shared link). Bodies and answers are the service's
//! own types (`hopfuse_api`), serialised and deserialised by serde; the views below
//! ([`RunView`], [`Measured`], ...) are what the Run pane shows of them.

use crate::js;
use hopfuse::plan::ConcreteLaunch;
use hopfuse::IndexType;
use hopfuse_api as api;
use hopfuse_api::distributed::DistributedHealth;
use hopfuse_api::job::{JobEvent, JobResult, JobStatus};
use hopfuse_api::run::{L2Policy, RunResult};
use hopfuse_api::service::{ErrorBody, Health, Link, LinkBody, LinkCreated, RunAccepted, RunBody};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use wasm_bindgen::JsValue;

/// Where the runner is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// Empty: the page's own origin.
    #[serde(default)]
    pub url: String,
    #[serde(default)]
    pub token: String,
}

const STORAGE_KEY: &str = "hopfuse.runner";

impl Settings {
    pub fn load() -> Settings {
        crate::storage_get(STORAGE_KEY)
            .and_then(|s| crate::json_read::from_str(&s).ok())
            .unwrap_or_default()
    }
    pub fn save(&self) {
        crate::storage_set(STORAGE_KEY, &serde_json::to_string(self).unwrap());
    }
    /// The API root without a trailing slash ("" for the same origin).
    pub fn base(&self) -> String {
        self.url.trim().trim_end_matches('/').to_string()
    }
    /// Where requests go, in words.
    pub fn place(&self) -> String {
        if self.base().is_empty() {
            "this page's origin".into()
        } else {
            self.base()
        }
    }
}

/// One HTTP answer.
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// What went wrong with a request.
#[derive(Clone, Debug, PartialEq)]
pub enum ApiError {
    /// Nothing answered (network error, CORS refusal, timeout) or what answered is not a runner.
    Unreachable(String),
    /// The runner answered with an error status.
    Http(u16, String),
}

impl ApiError {
    pub fn describe(&self, settings: &Settings) -> String {
        match self {
            ApiError::Unreachable(why) => format!(
                "No runner reachable at {} ({why}). Compiling keeps working in the page; set a \
                 runner URL in Settings to run on a GPU.",
                settings.place()
            ),
            ApiError::Http(503, msg) => format!(
                "The runner cannot run programs right now: {}. Compiling works in the page as usual.",
                plain_reason(msg)
            ),
            ApiError::Http(401, msg) => {
                format!("The runner needs a token ({msg}): set it in Settings.")
            }
            ApiError::Http(s, msg) => format!("The runner answered HTTP {s}: {msg}"),
        }
    }
}

/// A refusal's reason without what the service says to API clients: "runs are unavailable:
/// no usable GPU (...); compiling works (POST /api/compile)" → "no usable GPU (...)".
fn plain_reason(msg: &str) -> &str {
    let m = msg.strip_prefix("runs are unavailable: ").unwrap_or(msg);
    m.split("; compiling works")
        .next()
        .unwrap_or(m)
        .trim_end_matches('.')
}

/// The message of an error body ([`ErrorBody`]), or the text itself (a proxy's error page).
fn message_of(body: &str) -> String {
    match read_json::<ErrorBody>(body) {
        Ok(e) => e.error,
        Err(_) => {
            let t = body.trim();
            if t.len() > 300 {
                format!("{}…", &t[..t.floor_char_boundary(300)])
            } else {
                t.to_string()
            }
        }
    }
}

/// Sends a request (`body`: a JSON body) and reads the answer as `T`, one of the service's
/// answer types (`hopfuse_api`).
pub async fn request<T: DeserializeOwned>(
    settings: &Settings,
    method: &str,
    path: &str,
    body: Option<&impl Serialize>,
    timeout_ms: u32,
) -> Result<T, ApiError> {
    let url = format!("{}{path}", settings.base());
    let body = body.map(|b| serde_json::to_string(b).expect("request bodies serialize"));
    let answer = js::api_request(method, &url, settings.token.trim(), body, timeout_ms)
        .await
        .map_err(|e| ApiError::Unreachable(e.as_string().unwrap_or_else(|| format!("{e:?}"))))?;
    let get = |k: &str| js_sys::Reflect::get(&answer, &JsValue::from_str(k)).ok();
    let a = Answer {
        status: get("status").and_then(|v| v.as_f64()).unwrap_or(0.0) as u16,
        body: get("body").and_then(|v| v.as_string()).unwrap_or_default(),
    };
    // A static file server (no API) answers 404/405/501 for /api/...: that is no runner.
    if matches!(a.status, 404 | 405 | 501) && read_json::<ErrorBody>(&a.body).is_err() {
        return Err(ApiError::Unreachable(format!(
            "HTTP {} for {path}: this server has no runner API",
            a.status
        )));
    }
    if !(200..300).contains(&a.status) {
        return Err(ApiError::Http(a.status, message_of(&a.body)));
    }
    let not_ours = |e: serde_json::Error| {
        ApiError::Unreachable(format!(
            "{path} did not answer what this playground reads ({e})"
        ))
    };
    read_json(&a.body).map_err(not_ours)
}

/// A JSON text as `T`, through a [`Value`]: serde's readers then run over the parsed value
/// instead of each carrying its own copy of the text parser, and read only the shapes the
/// service writes ([`crate::json_read`]), which keeps the page's wasm tens of KiB smaller for
/// the same types.
pub fn read_json<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    crate::json_read::from_str(text)
}

/// No request body (a GET).
const NO_BODY: Option<&()> = None;

/// What the runner can do with a run, from `GET /api/health`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunMode {
    /// Runs execute on a GPU and are measured.
    Gpu,
    /// The fake worker (`--fake-worker`): runs are compiled and checked, never executed.
    Fake,
    /// No usable GPU: runs answer 503 (compiling works).
    Unavailable,
}

/// `GET /api/health` (docs/api.md), described in one line.
pub async fn health(settings: &Settings) -> Result<(String, RunMode), ApiError> {
    let h: Health = request(settings, "GET", "/api/health", NO_BODY, 4000).await?;
    Ok(describe_health(&h))
}

pub fn describe_health(h: &Health) -> (String, RunMode) {
    let version = &h.version;
    if !h.run_available {
        let why = match (&h.gpu_reason, &h.run_unavailable_reason) {
            (Some(g), _) => format!("no usable GPU ({g})"),
            (None, Some(r)) => r.clone(),
            (None, None) => "runs are unavailable".into(),
        };
        return (format!("runner {version} · {why}"), RunMode::Unavailable);
    }
    if let Some(d) = h.distributed.as_ref().filter(|_| h.worker == "agents") {
        return describe_agents(version, d);
    }
    if h.worker == "fake" {
        return (
            format!("runner {version} · fake worker, no GPU: runs are compiled and checked, not measured"),
            RunMode::Fake,
        );
    }
    let (name, sms) = match &h.gpu {
        Some(g) => (g.name.as_str(), format!(" ({} SMs)", g.sm_count)),
        None => ("GPU", String::new()),
    };
    (format!("runner {version} · {name}{sms}"), RunMode::Gpu)
}

/// A front-end of the distributed mode (`hopfuse serve --queue`): its runs go to the agents
/// listed in its health, whose GPUs (or fake workers) decide what a run measures.
fn describe_agents(version: &str, d: &DistributedHealth) -> (String, RunMode) {
    if !d.connected {
        // Its runs answer 503 until NATS is back.
        return (
            format!(
                "runner {version} · distributed, NATS not connected ({})",
                d.nats
            ),
            RunMode::Unavailable,
        );
    }
    if d.agents.is_empty() {
        return (
            format!("runner {version} · distributed, no agent connected: runs wait in the queue"),
            RunMode::Gpu,
        );
    }
    let agents = d.agents.len();
    let fake = d.agents.iter().filter(|a| a.fake).count();
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    if fake == agents {
        return (
            format!(
                "runner {version} · distributed, {} with fake workers, no GPU: runs are compiled and checked, not measured",
                plural(agents, "agent")
            ),
            RunMode::Fake,
        );
    }
    // The GPUs' names as their warm workers opened them (none before a worker started).
    let mut names: Vec<&str> = d
        .agents
        .iter()
        .flat_map(|a| a.workers.iter().flatten())
        .filter_map(|w| w.gpu.as_deref())
        .collect();
    names.sort_unstable();
    names.dedup();
    let names = if names.is_empty() {
        String::new()
    } else {
        format!(" ({})", names.join(", "))
    };
    let fake = if fake > 0 {
        format!(", {fake} of them fake")
    } else {
        String::new()
    };
    (
        format!(
            "runner {version} · distributed, {}{fake}, {}{names}",
            plural(agents, "agent"),
            plural(d.gpus, "GPU")
        ),
        RunMode::Gpu,
    )
}

/// The body of `POST /api/run`; with `program_b`, an A/B comparison (docs/api.md).
pub fn run_body(
    program: &str,
    program_b: Option<&str>,
    sizes: &BTreeMap<String, i64>,
    iters: u32,
    seed: u64,
) -> RunBody {
    RunBody {
        program: program.to_string(),
        program_b: program_b.map(str::to_string),
        sizes: sizes.clone(),
        iters: Some(iters),
        seed: Some(seed),
        ..RunBody::default()
    }
}

/// `POST /api/run` -> the job id.
pub async fn start_run(settings: &Settings, body: &RunBody) -> Result<String, ApiError> {
    let accepted: RunAccepted = request(settings, "POST", "/api/run", Some(body), 15000).await?;
    Ok(accepted.job_id)
}

/// The URL of a job's events.
pub fn events_url(settings: &Settings, job: &str) -> String {
    format!(
        "{}/api/jobs/{}/events",
        settings.base(),
        js_sys::encode_uri_component(job)
    )
}

/// The body of `POST /api/links`: the program, and the rest of the state as a JSON object with
/// a version (`"v": 1`), so the same program and state always get the same id.
pub fn link_body(state: &crate::share::State) -> LinkBody {
    let mut rest = serde_json::to_value(state).expect("state serializes");
    let obj = rest.as_object_mut().expect("state is an object");
    obj.remove("program");
    obj.insert("v".into(), Value::from(1));
    LinkBody {
        program: state.program.clone(),
        state: rest,
    }
}

/// The state a `GET /api/links/{id}` answer holds (the inverse of [`link_body`]).
pub fn state_of_link(link: &Link) -> Result<crate::share::State, String> {
    let mut state = match &link.state {
        Value::Object(o) => o.clone(),
        Value::Null => serde_json::Map::new(),
        _ => return Err("the link's state is not a playground state".into()),
    };
    match state.remove("v") {
        None => {}
        Some(n) if n == 1 => {}
        Some(n) => {
            return Err(format!(
                "the link's state has version {n}; this playground reads version 1"
            ))
        }
    }
    state.insert("program".into(), Value::from(link.program.as_str()));
    crate::json_read::from_value(Value::Object(state))
        .map_err(|e| format!("the link holds no playground state: {e}"))
}

/// `POST /api/links` -> the short id.
pub async fn create_link(
    settings: &Settings,
    state: &crate::share::State,
) -> Result<String, ApiError> {
    let created: LinkCreated = request(
        settings,
        "POST",
        "/api/links",
        Some(&link_body(state)),
        8000,
    )
    .await?;
    Ok(created.id)
}

/// `GET /api/links/{id}` -> the state it holds.
pub async fn get_link(settings: &Settings, id: &str) -> Result<crate::share::State, ApiError> {
    let path = format!("/api/links/{}", js_sys::encode_uri_component(id));
    let link: Link = request(settings, "GET", &path, NO_BODY, 8000).await?;
    state_of_link(&link).map_err(|e| ApiError::Unreachable(format!("link {id}: {e}")))
}

/// One output's validation.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    pub output: String,
    pub passed: bool,
    pub rel_l2: Option<f64>,
    pub max_abs: Option<f64>,
    pub tolerance: Option<f64>,
    pub elements: Option<u64>,
    pub non_finite: u64,
}

/// What the fake worker checked (`compile` of a `fake` result): no numbers were measured.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct FakeView {
    pub note: String,
    pub kernel: Option<String>,
    pub index: Option<String>,
    pub launch: Option<String>,
    pub working_set_bytes: Option<f64>,
    pub cuda_bytes: Option<f64>,
}

/// The measurement of a `passed` or `failed` run (`result`, the runner's `RunResult`).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Measured {
    pub passed: bool,
    pub device: Option<String>,
    pub launch: Option<String>,
    pub index: Option<String>,
    pub l2_policy: Option<String>,
    pub min_us: Option<f64>,
    pub median_us: Option<f64>,
    pub max_us: Option<f64>,
    pub samples: Option<u64>,
    pub gbps: Option<f64>,
    pub ceiling_gbps: Option<f64>,
    pub ratio: Option<f64>,
    /// A matrix product: its TFLOP/s, and cuBLAS's on the same shape (with the call, its own
    /// check against the reference, and the kernel's fraction of it), or why cuBLAS was not run.
    pub tflops: Option<f64>,
    pub cublas_tflops: Option<f64>,
    pub cublas_ratio: Option<f64>,
    pub cublas_call: Option<String>,
    pub cublas_check: Option<Check>,
    pub cublas_skipped: Option<String>,
    pub checks: Vec<Check>,
    /// The re-check after timing (races that show up only sometimes).
    pub checks_after_timing: Vec<Check>,
    pub seed: Option<u64>,
    pub registers: Option<i64>,
    pub static_smem: Option<i64>,
    pub dynamic_smem: Option<i64>,
    pub local_bytes: Option<i64>,
    pub nvrtc_ms: Option<f64>,
    pub cubin_cached: Option<bool>,
    /// The torch twin timed in the same run (`result.peers`; `torch_pane.rs`).
    pub peers: Option<crate::torch_pane::PeersView>,
    /// Nsight Compute's profile of the kernel, or why there is none (`result.profile`;
    /// `profile_view.rs`).
    pub profile: Option<api::profile::ProfileReport>,
}

/// The `comparison` of an A/B job: B's time over A's, per launch pair, when both were measured.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Comparison {
    /// The median over the pairs of B's time / A's time (below 1: B is faster).
    pub median: f64,
    /// The smallest and largest per-pair ratio.
    pub range: Option<(f64, f64)>,
    pub pairs: Option<u64>,
    pub order: Option<String>,
    pub a_median_us: Option<f64>,
    pub b_median_us: Option<f64>,
    pub same_inputs: Option<bool>,
}

impl Comparison {
    /// The ratio in words: `B/A = 0.930 (0.900–0.970 over 100 pairs): B is 7.0% faster`.
    pub fn text(&self) -> String {
        let spread = match (self.range, self.pairs) {
            (Some((lo, hi)), Some(n)) => format!(" ({lo:.3}–{hi:.3} over {n} pairs)"),
            (Some((lo, hi)), None) => format!(" ({lo:.3}–{hi:.3})"),
            (None, Some(n)) => format!(" (median of {n} pairs)"),
            (None, None) => String::new(),
        };
        let change = (self.median - 1.0) * 100.0;
        let verdict = if change.abs() < 0.05 {
            "as fast as A".to_string()
        } else if change < 0.0 {
            format!("{:.1}% faster than A", -change)
        } else {
            format!("{change:.1}% slower than A")
        };
        format!("B/A = {:.3}{spread}: B is {verdict}", self.median)
    }
}

/// A finished job: the `done` event's `result` (or `GET /api/jobs/{id}`), see docs/api.md.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct RunView {
    pub job_id: Option<String>,
    /// passed | failed | error | timed_out | crashed | fake
    pub status: String,
    /// A sentence for every status but passed.
    pub message: Option<String>,
    /// `error.stage` of an `error` result (compile, sizes, nvrtc, cuda, reference, request).
    pub error_stage: Option<String>,
    /// `error.message` (for NVRTC errors, with the NVRTC log).
    pub error: Option<String>,
    /// The worker's steps, in order.
    pub progress: Vec<String>,
    pub stderr: Option<String>,
    pub measured: Option<Measured>,
    pub fake: Option<FakeView>,
    pub worker_ms: Option<f64>,
    /// The agent (GPU host) that ran the job, in the distributed mode.
    pub agent: Option<String>,
    /// The stages the event stream went through (set by the page).
    pub stages: Vec<String>,
    /// An A/B job: program B's result (`b`), and the comparison when both were measured.
    pub b: Option<Box<RunView>>,
    pub comparison: Option<Comparison>,
}

impl RunView {
    /// The status in words.
    pub fn headline(&self) -> String {
        match self.status.as_str() {
            "passed" => "ran on the GPU and validated".into(),
            "failed" => "ran on the GPU; the outputs differ from the float64 reference".into(),
            "fake" => {
                "compiled and checked by the fake worker: no GPU, nothing ran, nothing was measured"
                    .into()
            }
            "timed_out" => "timed out: killed at the runner's time limit".into(),
            "crashed" => "the worker crashed".into(),
            "error" => match &self.error_stage {
                Some(s) => format!("could not run ({s} error)"),
                None => "could not run".into(),
            },
            other => format!("status `{other}`"),
        }
    }
}

/// `i32` / `i64`, as the JSON names it.
pub fn index_name(t: IndexType) -> &'static str {
    match t {
        IndexType::I32 => "i32",
        IndexType::I64 => "i64",
    }
}

fn launch_text(l: &ConcreteLaunch) -> String {
    let dims = |d: &[u32; 3]| d.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
    let mut t = format!("grid ({})  block ({})", dims(&l.grid), dims(&l.block));
    if l.dynamic_smem_bytes > 0 {
        t.push_str(&format!(
            "  {} dynamic shared memory",
            crate::model::bytes(l.dynamic_smem_bytes as f64)
        ));
    }
    t
}

impl From<&api::run::Check> for Check {
    fn from(c: &api::run::Check) -> Check {
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

fn checks(list: &[api::run::Check]) -> Vec<Check> {
    list.iter().map(Check::from).collect()
}

fn index_text(t: IndexType, reason: &str) -> String {
    if reason.is_empty() {
        index_name(t).to_string()
    } else {
        format!("{} ({reason})", index_name(t))
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

/// Reads a job's result: the data of the `done` event (a [`JobEvent`] with its result) or the
/// answer of `GET /api/jobs/{id}` (the [`JobResult`] itself, with `"done": true`).
pub fn parse_result(data: &str) -> RunView {
    let failed = |error: String| RunView {
        status: "error".into(),
        error: Some(error),
        ..RunView::default()
    };
    match read_json::<JobEvent>(data) {
        Ok(JobEvent {
            result: Some(job), ..
        }) => RunView::from(&*job),
        Ok(_) => failed("the runner's done event holds no result".into()),
        Err(_) => match read_json::<JobResult>(data) {
            Ok(job) => RunView::from(&job),
            Err(e) => failed(format!(
                "the runner's result is not one this playground reads ({e}): {data}"
            )),
        },
    }
}

impl From<&api::job::Comparison> for Comparison {
    fn from(c: &api::job::Comparison) -> Comparison {
        Comparison {
            median: c.b_over_a_median,
            range: Some((c.b_over_a_range[0], c.b_over_a_range[1])),
            pairs: Some(c.pairs as u64),
            order: Some(c.order.clone()),
            a_median_us: Some(c.a_median_us),
            b_median_us: Some(c.b_median_us),
            same_inputs: c.same_inputs,
        }
    }
}

impl Measured {
    fn of(r: &RunResult, cubin_cached: Option<bool>) -> Measured {
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
            cublas_tflops: r.cublas.as_ref().map(|c| c.tflops),
            cublas_ratio: r.fraction_of_cublas,
            cublas_call: r.cublas.as_ref().map(|c| c.call.clone()),
            cublas_check: r.cublas.as_ref().map(|c| Check::from(&c.validation)),
            cublas_skipped: r.cublas_skipped.clone(),
            checks: checks(&r.validation),
            checks_after_timing: checks(&r.validation_after_timing),
            seed: Some(r.seed),
            registers: Some(r.attributes.registers_per_thread as i64),
            static_smem: Some(r.attributes.static_smem_bytes as i64),
            dynamic_smem: Some(r.launch.dynamic_smem_bytes as i64),
            local_bytes: Some(r.attributes.local_bytes_per_thread as i64),
            nvrtc_ms: Some(r.nvrtc_ms),
            cubin_cached,
            peers: r.peers.as_ref().map(crate::torch_pane::PeersView::from),
            profile: r.profile.clone(),
        }
    }
}

/// One job result (A's, or `b` of an A/B job).
impl From<&JobResult> for RunView {
    fn from(job: &JobResult) -> RunView {
        let fake = job.status == JobStatus::Fake;
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
            fake: fake.then(|| {
                job.compile
                    .as_ref()
                    .map(|c| FakeView {
                        note: c.note.clone(),
                        kernel: Some(c.kernel.clone()),
                        index: Some(index_text(c.index_type, &c.index_reason)),
                        launch: Some(launch_text(&c.launch)),
                        working_set_bytes: Some(c.working_set_bytes as f64),
                        cuda_bytes: Some(c.cuda_bytes as f64),
                    })
                    .unwrap_or_default()
            }),
            worker_ms: Some(job.worker_ms),
            agent: job.agent.clone(),
            stages: Vec::new(),
            b: job.b.as_ref().map(|b| Box::new(RunView::from(&**b))),
            comparison: job.comparison.as_ref().map(Comparison::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_in_plain_words() {
        let s = Settings::default();
        let msg = ApiError::Http(
            503,
            "runs are unavailable: no usable GPU (CUDA_VISIBLE_DEVICES is empty); compiling works (POST /api/compile)".into(),
        )
        .describe(&s);
        assert_eq!(
            msg,
            "The runner cannot run programs right now: no usable GPU (CUDA_VISIBLE_DEVICES is empty). \
             Compiling works in the page as usual."
        );
        let msg = ApiError::Http(401, "wrong token".into()).describe(&s);
        assert!(
            !msg.contains("HTTP") && msg.contains("wrong token"),
            "{msg}"
        );
    }

    // The `done` events the service sends, serialized from the runner's types by
    // runner/tests/api_fixtures.rs.
    const PASSED: &str = include_str!("../tests/fixtures/done-passed.json");
    const FAILED: &str = include_str!("../tests/fixtures/done-failed.json");
    const ERROR: &str = include_str!("../tests/fixtures/done-error.json");
    const TIMED_OUT: &str = include_str!("../tests/fixtures/done-timed-out.json");
    const FAKE: &str = include_str!("../tests/fixtures/done-fake.json");
    const AB: &str = include_str!("../tests/fixtures/done-ab.json");
    const MATMUL: &str = include_str!("../tests/fixtures/done-matmul.json");

    #[test]
    fn reads_a_matrix_product_against_cublas() {
        let m = parse_result(MATMUL).measured.expect("a measurement");
        let t = 2.0 * 2048f64.powi(3);
        assert_eq!(m.tflops, Some(t / 2000.0e6));
        assert_eq!(m.cublas_tflops, Some(t / 400.0e6));
        assert_eq!(m.cublas_ratio, Some(0.2));
        assert!(m.cublas_call.unwrap().starts_with("cublasGemmEx(T, N"));
        let c = m.cublas_check.expect("cuBLAS's own check");
        assert!(c.passed && c.output == "cuBLAS c");
        assert!(m.cublas_skipped.is_none());
        // A run that is not a matrix product has none of it.
        let p = parse_result(PASSED).measured.unwrap();
        assert!(p.tflops.is_none() && p.cublas_tflops.is_none() && p.cublas_check.is_none());
    }

    #[test]
    fn reads_a_measured_run() {
        let v = parse_result(PASSED);
        assert_eq!(v.status, "passed");
        assert!(v.fake.is_none() && v.error.is_none());
        let m = v.measured.expect("a measurement");
        assert!(m.passed);
        assert_eq!(m.median_us, Some(2.5));
        assert_eq!(
            (m.min_us, m.max_us, m.samples),
            (Some(2.25), Some(3.0), Some(100))
        );
        assert_eq!(m.gbps, Some(4915.2));
        assert_eq!(m.ceiling_gbps, Some(3158.0));
        assert_eq!(m.ratio, Some(0.9356));
        assert_eq!(m.registers, Some(24));
        assert_eq!(
            (m.static_smem, m.dynamic_smem, m.local_bytes),
            (Some(0), Some(0), Some(0))
        );
        assert_eq!(m.device.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(
            m.launch.as_deref(),
            Some("grid (2000, 1, 1)  block (128, 1, 1)")
        );
        assert_eq!(m.seed, Some(7));
        assert_eq!(m.nvrtc_ms, Some(41.5));
        assert_eq!(m.cubin_cached, Some(false));
        assert_eq!(
            m.index.as_deref(),
            Some("i32 (every tensor has fewer than 2^31 elements)")
        );
        assert_eq!(
            m.l2_policy.as_deref(),
            Some("rotating 9 copies of every tensor")
        );
        assert_eq!(m.checks.len(), 1);
        let c = &m.checks[0];
        assert!(c.passed && c.output == "c");
        assert_eq!(
            (c.rel_l2, c.tolerance, c.elements),
            (Some(1.25e-8), Some(1e-5), Some(1_024_000))
        );
        assert_eq!(m.checks_after_timing.len(), 1);
        assert_eq!(v.progress.first().map(String::as_str), Some("lowering"));
        assert_eq!(v.job_id.as_deref(), Some("j1f0c2d3e4a5b6c7"));
        // GET /api/jobs/{id} answers the result itself (with "done": true).
        let job: Value = serde_json::from_str(PASSED).unwrap();
        let direct = parse_result(&job["result"].to_string());
        assert_eq!(direct, parse_result(PASSED));
    }

    #[test]
    fn reads_a_failed_validation() {
        let v = parse_result(FAILED);
        assert_eq!(v.status, "failed");
        let m = v.measured.expect("a failed run is still measured");
        assert!(!m.passed && !m.checks[0].passed);
        assert_eq!(m.checks[0].non_finite, 512);
        assert_eq!(m.cubin_cached, Some(true));
        assert!(v.message.unwrap().contains("do not match"));
    }

    #[test]
    fn reads_errors_and_timeouts() {
        let e = parse_result(ERROR);
        assert_eq!(e.status, "error");
        assert_eq!(e.error_stage.as_deref(), Some("nvrtc"));
        assert!(e.error.unwrap().contains("identifier \"x\" is undefined"));
        assert!(e.measured.is_none() && e.fake.is_none());
        assert_eq!(
            parse_result(ERROR).headline(),
            "could not run (nvrtc error)"
        );
        let t = parse_result(TIMED_OUT);
        assert_eq!(t.status, "timed_out");
        assert!(t
            .message
            .unwrap()
            .starts_with("timed out: the kernel did not finish"));
        assert_eq!(t.progress, ["lowering", "nvrtc", "launch"]);
        assert!(parse_result("not json").error.is_some());
    }

    #[test]
    fn a_fake_result_has_no_numbers() {
        let v = parse_result(FAKE);
        assert_eq!(v.status, "fake");
        assert!(v.measured.is_none(), "a fake result is never a measurement");
        let f = v.fake.clone().expect("what the fake worker checked");
        assert_eq!(f.kernel.as_deref(), Some("add_kernel"));
        assert_eq!(
            f.launch.as_deref(),
            Some("grid (2000, 1, 1)  block (128, 1, 1)")
        );
        assert_eq!(f.working_set_bytes, Some(12_288_000.0));
        assert!(f.note.contains("nothing was measured"));
        assert!(v.headline().contains("fake worker"));
        // Even with a `result` in it, a fake status shows no numbers.
        let mut j: Value = serde_json::from_str(FAKE).unwrap();
        let passed: Value = serde_json::from_str(PASSED).unwrap();
        j["result"]["result"] = passed["result"]["result"].clone();
        assert!(parse_result(&j.to_string()).measured.is_none());
    }

    #[test]
    fn reads_an_ab_comparison() {
        let v = parse_result(AB);
        assert_eq!(v.status, "passed");
        assert_eq!(v.measured.as_ref().unwrap().median_us, Some(2.5));
        let b = v.b.as_ref().expect("B's result");
        assert_eq!(b.status, "passed");
        assert_eq!(b.measured.as_ref().unwrap().median_us, Some(2.25));
        assert!(b.b.is_none() && b.comparison.is_none());
        let c = v.comparison.clone().expect("the comparison");
        assert_eq!(c.median, 0.9);
        assert_eq!(c.range, Some((0.875, 0.9375)));
        assert_eq!(c.pairs, Some(100));
        assert_eq!((c.a_median_us, c.b_median_us), (Some(2.5), Some(2.25)));
        assert_eq!(c.same_inputs, Some(true));
        assert_eq!(c.order.as_deref(), Some("AB,BA alternating"));
        assert_eq!(
            c.text(),
            "B/A = 0.900 (0.875–0.938 over 100 pairs): B is 10.0% faster than A"
        );
        let slower = Comparison {
            median: 1.25,
            ..Comparison::default()
        };
        assert_eq!(slower.text(), "B/A = 1.250: B is 25.0% slower than A");
        // A single run has neither.
        let one = parse_result(PASSED);
        assert!(one.b.is_none() && one.comparison.is_none());
    }

    #[test]
    fn an_ab_run_sends_program_b() {
        let sizes = [("N".to_string(), 1024)].into();
        let ab = serde_json::to_value(run_body("fusion a {}", Some("fusion b {}"), &sizes, 20, 3))
            .unwrap();
        assert_eq!(ab["program"], "fusion a {}");
        assert_eq!(ab["program_b"], "fusion b {}");
        assert_eq!(
            (&ab["sizes"]["N"], &ab["iters"], &ab["seed"]),
            (&1024.into(), &20.into(), &3.into())
        );
        let one = serde_json::to_value(run_body("fusion a {}", None, &sizes, 20, 3)).unwrap();
        // Only what the page sets: the service's defaults apply to the rest.
        let keys: Vec<&str> = one
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["iters", "program", "seed", "sizes"], "{one}");
    }

    /// A health answer (`GET /api/health`).
    fn health(worker: &str, gpu: Option<&str>, gpu_reason: Option<&str>, run: bool) -> Health {
        let v = serde_json::json!({
            "status": "ok", "version": "0.1.0", "worker": worker,
            "gpu": gpu.map(|name| serde_json::json!({
                "name": name, "compute_capability": [9, 0], "sm_count": 132,
                "l2_bytes": 52428800, "max_dynamic_smem_optin": 232448,
                "driver_version": 13000, "total_memory_bytes": 85045477376u64,
            })),
            "gpu_reason": gpu_reason, "nvrtc": "13.0",
            "run_available": run,
            "run_unavailable_reason": (!run).then(|| format!(
                "runs are unavailable: no usable GPU ({}); compiling works (POST /api/compile)",
                gpu_reason.unwrap_or("?")
            )),
            "queue": {"queued": 0, "running": 0, "cap": 64, "gpus": 1, "finished": 0,
                      "job_timeout_s": 10.0, "workers": [null]},
            "compiles": {"running": 0, "slots": 2, "lowered": 0},
            "limits": {"max_body_bytes": 262144, "max_program_bytes": 65536,
                       "max_iters": 10000, "max_warmup": 1000, "max_tensor_bytes": 4294967296u64,
                       "queue_cap": 64, "client_queue_cap": 16, "runs_per_minute": 60,
                       "requests_per_minute": 600, "job_timeout_s": 10.0,
                       "compile_timeout_s": 10.0, "keep_runs": 10000, "keep_runs_days": 30,
                       "keep_runs_bytes": 268435456, "token_required": false},
            "uptime_s": 1.5,
        });
        serde_json::from_value(v).expect("a health answer")
    }

    #[test]
    fn reads_health() {
        let gpu = health("gpu", Some("NVIDIA H100 80GB HBM3"), None, true);
        assert_eq!(
            describe_health(&gpu),
            (
                "runner 0.1.0 · NVIDIA H100 80GB HBM3 (132 SMs)".into(),
                RunMode::Gpu
            )
        );
        let fake = health("fake", None, Some("fake worker mode"), true);
        assert_eq!(describe_health(&fake).1, RunMode::Fake);
        let none = health("gpu", None, Some("no driver"), false);
        let (text, mode) = describe_health(&none);
        assert_eq!(mode, RunMode::Unavailable);
        assert_eq!(text, "runner 0.1.0 · no usable GPU (no driver)");
        // An error body's sentence; a proxy's page as text.
        assert_eq!(
            message_of(r#"{"error": "wrong token", "limit": null}"#),
            "wrong token"
        );
        assert_eq!(message_of(" Bad Gateway \n"), "Bad Gateway");
    }

    /// A front-end of the distributed mode: its agents decide what the page says and whether
    /// runs are measured.
    #[test]
    fn reads_a_distributed_front_end() {
        let agent = |id: &str, fake: bool, gpu: Option<&str>| {
            serde_json::json!({
                "id": id, "host": "gpu-host", "pid": 7, "arch": "sm_90a", "gpus": 2,
                "fake": fake, "running": 0, "completed": 3, "redelivered": 0,
                "started_at": 1_763_870_000,
                "workers": [gpu.map(|name| serde_json::json!({
                    "pid": 9, "jobs": 3, "uptime_s": 5.0, "startup_ms": 310.5,
                    "ceiling_gbps": null, "gpu_error": null, "gpu": name,
                })), null],
            })
        };
        let front_end = |connected: bool, agents: Vec<Value>| {
            let mut h = health("agents", None, Some("distributed mode"), true);
            h.distributed = Some(
                crate::json_read::from_value(serde_json::json!({
                    "nats": "nats://10.0.0.5:4222", "connected": connected, "arch": "sm_90a",
                    "depth": 0, "waiting": 0, "running": 0, "cap": 1000, "in_flight": 0,
                    "gpus": 2 * agents.len(), "agents": agents,
                }))
                .expect("a distributed health section"),
            );
            describe_health(&h)
        };
        let h100 = "NVIDIA H100 80GB HBM3";
        assert_eq!(
            front_end(
                true,
                vec![agent("a", false, Some(h100)), agent("b", false, None)]
            ),
            (
                format!("runner 0.1.0 · distributed, 2 agents, 4 GPUs ({h100})"),
                RunMode::Gpu
            )
        );
        let (text, mode) = front_end(true, vec![agent("a", true, None)]);
        assert_eq!(mode, RunMode::Fake);
        assert!(text.contains("1 agent with fake workers"), "{text}");
        let (text, mode) = front_end(true, vec![agent("a", true, None), agent("b", false, None)]);
        assert_eq!(mode, RunMode::Gpu);
        assert!(text.ends_with("2 agents, 1 of them fake, 4 GPUs"), "{text}");
        let (text, mode) = front_end(true, Vec::new());
        assert_eq!(mode, RunMode::Gpu);
        assert!(text.contains("no agent connected"), "{text}");
        let (text, mode) = front_end(false, vec![agent("a", false, Some(h100))]);
        assert_eq!(mode, RunMode::Unavailable);
        assert!(
            text.contains("NATS not connected (nats://10.0.0.5:4222)"),
            "{text}"
        );
        // A result names the agent that ran it.
        let mut j: Value = serde_json::from_str(FAKE).unwrap();
        assert_eq!(parse_result(&j.to_string()).agent, None);
        j["result"]["agent"] = "gpu-host-1-4711".into();
        assert_eq!(
            parse_result(&j.to_string()).agent.as_deref(),
            Some("gpu-host-1-4711")
        );
    }

    #[test]
    fn a_link_holds_the_program_and_the_state() {
        let state = crate::share::State {
            program: "fusion f {}\n".into(),
            sizes: [("M".to_string(), 1000)].into(),
            pane: crate::share::Pane::Passes,
            pass: Some("predicate".into()),
            iters: 50,
            seed: 3,
            ..Default::default()
        };
        let body = link_body(&state);
        assert_eq!(body.program, "fusion f {}\n");
        assert!(body.state.get("program").is_none());
        assert_eq!(body.state["v"], 1);
        // What GET /api/links/{id} answers.
        let answer = |body: &LinkBody| Link {
            id: "k3n".into(),
            program: body.program.clone(),
            state: body.state.clone(),
            created_at: 1,
        };
        assert_eq!(state_of_link(&answer(&body)), Ok(state.clone()));
        let future = LinkBody {
            program: String::new(),
            state: serde_json::json!({"v": 2}),
        };
        assert!(state_of_link(&answer(&future))
            .unwrap_err()
            .contains("version 2"));
        // Program B and the tab travel in the state; a state without them has neither key.
        assert!(body.state.get("program_b").is_none() && body.state.get("tab").is_none());
        let ab = crate::share::State {
            program_b: Some("fusion g {}\n".into()),
            tab: crate::share::Tab::B,
            ..state
        };
        let body = link_body(&ab);
        assert_eq!(body.state["program_b"], "fusion g {}\n");
        assert_eq!(state_of_link(&answer(&body)), Ok(ab));
    }
}
