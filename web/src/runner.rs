//! The runner service's API (issue 5): health, runs streamed as server-sent events, short links.
//! Same origin by default, or a runner URL and bearer token from the settings dialog (kept in
//! this browser's localStorage, never in a shared link). Bodies are the service's own types
//! (`hopfuse_api`), serialised by serde; answers are read field by field from the parsed JSON
//! (the accessor layer below, `Fields`: the playground's reading of each api type, tested
//! against the recorded answers); the views ([`RunView`], [`Measured`], ...) are what the Run
//! pane shows of them.

use crate::js;
use crate::torch_pane::{PeerView, PeersView};
use hopfuse::IndexType;
use hopfuse_api as api;
use hopfuse_api::service::{Link, LinkBody, RunBody};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use wasm_bindgen::JsValue;

/// Where the runner is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
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
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .and_then(|v| {
                let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                v.is_object().then(|| Settings {
                    url: text("url"),
                    token: text("token"),
                })
            })
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

/// The sentence of an error body (`api::service::ErrorBody`: an object with `error`).
fn error_of(body: &str) -> Option<String> {
    let v: Value = serde_json::from_str(body).ok()?;
    Fields::of(&v, "").ok()?.str("error").ok().map(String::from)
}

/// The message of an error body, or the text itself (a proxy's error page).
fn message_of(body: &str) -> String {
    match error_of(body) {
        Some(e) => e,
        None => {
            let t = body.trim();
            if t.len() > 300 {
                format!("{}…", &t[..t.floor_char_boundary(300)])
            } else {
                t.to_string()
            }
        }
    }
}

/// Sends a request (`body`: a JSON body) and reads the answer as JSON (the playground reads its
/// fields with [`Fields`]).
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
    if matches!(a.status, 404 | 405 | 501) && error_of(&a.body).is_none() {
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

/// A JSON text as `T` (the playground asks only for [`Value`]s and reads their fields itself).
pub fn read_json<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    serde_json::from_str(text)
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

/// An answer of the service read with the accessors below ([`Fields`]), or why it is not one
/// this playground reads.
fn answer<T>(path: &str, v: &Value, read: impl FnOnce(Fields) -> Read<T>) -> Result<T, ApiError> {
    Fields::of(v, "the answer").and_then(read).map_err(|e| {
        ApiError::Unreachable(format!(
            "{path} did not answer what this playground reads ({e})"
        ))
    })
}

/// `GET /api/health` (docs/api.md), described in one line.
pub async fn health(settings: &Settings) -> Result<(String, RunMode), ApiError> {
    let h: Value = request(settings, "GET", "/api/health", NO_BODY, 4000).await?;
    answer("/api/health", &h, |_| describe_health(&h))
}

/// The line of a health answer (`api::service::Health`; read field by field like a job result,
/// see [`Fields`], so that the page carries no serde reader for its many nested types).
fn describe_health(h: &Value) -> Read<(String, RunMode)> {
    let h = Fields::of(h, "the health answer")?;
    let version = h.str("version")?;
    if !h.bool("run_available")? {
        let why = match (
            h.opt_str("gpu_reason")?,
            h.opt_str("run_unavailable_reason")?,
        ) {
            (Some(g), _) => format!("no usable GPU ({g})"),
            (None, Some(r)) => r,
            (None, None) => "runs are unavailable".into(),
        };
        return Ok((format!("runner {version} · {why}"), RunMode::Unavailable));
    }
    if h.str("worker")? == "agents" {
        if let Some(d) = h.opt_obj("distributed")? {
            return describe_agents(version, d);
        }
    }
    if h.str("worker")? == "fake" {
        return Ok((
            format!("runner {version} · fake worker, no GPU: runs are compiled and checked, not measured"),
            RunMode::Fake,
        ));
    }
    let (name, sms) = match h.opt_obj("gpu")? {
        Some(g) => (g.str("name")?, format!(" ({} SMs)", g.u64("sm_count")?)),
        None => ("GPU", String::new()),
    };
    Ok((format!("runner {version} · {name}{sms}"), RunMode::Gpu))
}

/// A front-end of the distributed mode (`hopfuse serve --queue`): its runs go to the agents
/// listed in its health (`api::distributed::DistributedHealth`), whose GPUs (or fake workers)
/// decide what a run measures.
fn describe_agents(version: &str, d: Fields) -> Read<(String, RunMode)> {
    if !d.bool("connected")? {
        // Its runs answer 503 until NATS is back.
        return Ok((
            format!(
                "runner {version} · distributed, NATS not connected ({})",
                d.str("nats")?
            ),
            RunMode::Unavailable,
        ));
    }
    let list = d.list("agents")?;
    if list.is_empty() {
        return Ok((
            format!("runner {version} · distributed, no agent connected: runs wait in the queue"),
            RunMode::Gpu,
        ));
    }
    let agents: Vec<Fields> = list
        .iter()
        .map(|a| Fields::of(a, "agents"))
        .collect::<Read<_>>()?;
    let mut fake = 0;
    // The GPUs' names as their warm workers opened them (none before a worker started).
    let mut names: Vec<&str> = Vec::new();
    for a in &agents {
        if a.bool("fake")? {
            fake += 1;
        }
        // A worker slot is null until its warm worker has started.
        for w in a.list("workers")?.iter().filter(|w| !w.is_null()) {
            if let Some(name) = Fields::of(w, "workers")?.opt("gpu", Value::as_str)? {
                names.push(name);
            }
        }
    }
    let n = agents.len();
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    if fake == n {
        return Ok((
            format!(
                "runner {version} · distributed, {} with fake workers, no GPU: runs are compiled and checked, not measured",
                plural(n, "agent")
            ),
            RunMode::Fake,
        ));
    }
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
    Ok((
        format!(
            "runner {version} · distributed, {}{fake}, {}{names}",
            plural(n, "agent"),
            plural(d.u64("gpus")? as usize, "GPU")
        ),
        RunMode::Gpu,
    ))
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
    // `api::service::RunAccepted`
    let accepted: Value = request(settings, "POST", "/api/run", Some(body), 15000).await?;
    answer("/api/run", &accepted, |a| Ok(a.str("job_id")?.to_string()))
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
    crate::share::State::read(&Value::Object(state))
        .map_err(|e| format!("the link holds no playground state: {e}"))
}

/// `POST /api/links` -> the short id.
pub async fn create_link(
    settings: &Settings,
    state: &crate::share::State,
) -> Result<String, ApiError> {
    // `api::service::LinkCreated`
    let created: Value = request(
        settings,
        "POST",
        "/api/links",
        Some(&link_body(state)),
        8000,
    )
    .await?;
    answer("/api/links", &created, |c| Ok(c.str("id")?.to_string()))
}

/// `GET /api/links/{id}` -> the state it holds.
pub async fn get_link(settings: &Settings, id: &str) -> Result<crate::share::State, ApiError> {
    let path = format!("/api/links/{}", js_sys::encode_uri_component(id));
    let link: Value = request(settings, "GET", &path, NO_BODY, 8000).await?;
    let link = answer(&path, &link, |l| {
        Ok(Link {
            id: l.str("id")?.to_string(),
            program: l.str("program")?.to_string(),
            state: l.0.get("state").cloned().unwrap_or(Value::Null),
            created_at: l.req("created_at", Value::as_i64)?,
        })
    })?;
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

fn launch_text(l: Fields) -> Read<String> {
    let dims = |k: &str| -> Read<String> {
        let d = l.list(k)?;
        let n: Option<Vec<String>> = d
            .iter()
            .map(|x| x.as_u64().map(|n| n.to_string()))
            .collect();
        n.filter(|n| n.len() == 3)
            .map(|n| n.join(", "))
            .ok_or_else(|| format!("`{k}` is not three numbers"))
    };
    let mut t = format!("grid ({})  block ({})", dims("grid")?, dims("block")?);
    let smem = l.u64("dynamic_smem_bytes")?;
    if smem > 0 {
        t.push_str(&format!(
            "  {} dynamic shared memory",
            crate::model::bytes(smem as f64)
        ));
    }
    Ok(t)
}

// The playground's reading of a job result: `api::job::JobResult` with its `api::run::RunResult`
// (docs/api.md), and of the health and inspect answers, pulled field by field out of the parsed JSON in this one place instead of
// through serde's derived readers: those are monomorphised for every one of the ~45 nested
// types and cost the page's wasm tens of KiB (the cold-load budget, scripts/test-web.sh). Every
// field named here is one the service writes; the tests below read the recorded `done` events
// (web/tests/fixtures, docs/recordings), so a renamed or retyped field fails them; the profile
// is built into the runner's own `ProfileReport` (its pane draws it with the runner's code) and
// a test compares that with serde's reading of the same JSON.

/// Why a job result could not be read.
type Read<T> = Result<T, String>;

/// One JSON object of a job result, read by field name.
#[derive(Clone, Copy)]
struct Fields<'a>(&'a serde_json::Map<String, Value>);

impl<'a> Fields<'a> {
    fn of(v: &'a Value, what: &str) -> Read<Fields<'a>> {
        v.as_object()
            .map(Fields)
            .ok_or_else(|| format!("`{what}` is not an object"))
    }
    /// A field that may be missing or null.
    fn opt<T>(self, k: &str, read: impl Fn(&'a Value) -> Option<T>) -> Read<Option<T>> {
        match self.0.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => read(v)
                .map(Some)
                .ok_or_else(|| format!("`{k}` has the wrong type")),
        }
    }
    /// A field that must be there.
    fn req<T>(self, k: &str, read: impl Fn(&'a Value) -> Option<T>) -> Read<T> {
        self.opt(k, read)?
            .ok_or_else(|| format!("missing field `{k}`"))
    }
    fn str(self, k: &str) -> Read<&'a str> {
        self.req(k, Value::as_str)
    }
    fn f64(self, k: &str) -> Read<f64> {
        self.req(k, Value::as_f64)
    }
    fn u64(self, k: &str) -> Read<u64> {
        self.req(k, Value::as_u64)
    }
    fn bool(self, k: &str) -> Read<bool> {
        self.req(k, Value::as_bool)
    }
    fn list(self, k: &str) -> Read<&'a [Value]> {
        self.req(k, |v| v.as_array().map(Vec::as_slice))
    }
    fn obj(self, k: &str) -> Read<Fields<'a>> {
        self.req(k, |v| v.as_object().map(Fields))
    }
    fn opt_obj(self, k: &str) -> Read<Option<Fields<'a>>> {
        self.opt(k, |v| v.as_object().map(Fields))
    }
    fn opt_str(self, k: &str) -> Read<Option<String>> {
        self.opt(k, |v| v.as_str().map(String::from))
    }
    fn opt_f64(self, k: &str) -> Read<Option<f64>> {
        self.opt(k, Value::as_f64)
    }
}

/// One output's check (`api::run::Check`).
fn check(c: Fields) -> Read<Check> {
    Ok(Check {
        output: c.str("output")?.to_string(),
        passed: c.bool("passed")?,
        rel_l2: Some(c.f64("rel_l2")?),
        max_abs: Some(c.f64("max_abs")?),
        tolerance: Some(c.f64("tolerance")?),
        elements: Some(c.u64("elements")?),
        non_finite: c.u64("non_finite")?,
    })
}

fn checks(r: Fields, k: &str) -> Read<Vec<Check>> {
    r.list(k)?
        .iter()
        .map(|c| check(Fields::of(c, k)?))
        .collect()
}

/// `index_type` (`i32` | `i64`) and why.
fn index_text(r: Fields) -> Read<String> {
    let t = r.str("index_type")?;
    Ok(match r.str("index_reason")? {
        "" => t.to_string(),
        reason => format!("{t} ({reason})"),
    })
}

/// `l2_policy` (`api::run::L2Policy`, tagged by `kind`).
fn l2_text(p: Fields) -> Read<String> {
    Ok(match p.str("kind")? {
        "none" => "none (working set > 2x L2)".to_string(),
        "rotate" => format!("rotating {} copies of every tensor", p.u64("sets")?),
        "flush" => format!(
            "L2 flushed ({}) before each launch",
            crate::model::bytes(p.u64("bytes")? as f64)
        ),
        other => return Err(format!("unknown L2 policy `{other}`")),
    })
}

/// Reads a job's result: the data of the `done` event (an `api::job::JobEvent` with its result)
/// or the answer of `GET /api/jobs/{id}` (the `JobResult` itself, with `"done": true`).
pub fn parse_result(data: &str) -> RunView {
    let read = || -> Read<RunView> {
        let v: Value = serde_json::from_str(data).map_err(|e| e.to_string())?;
        let top = Fields::of(&v, "the answer")?;
        if top.0.contains_key("job_id") {
            return job_view(top);
        }
        match top.opt_obj("result")? {
            Some(job) => job_view(job),
            None => Err("the runner's done event holds no result".into()),
        }
    };
    read().unwrap_or_else(|e| RunView {
        status: "error".into(),
        error: Some(format!(
            "the runner's result is not one this playground reads ({e}): {data}"
        )),
        ..RunView::default()
    })
}

/// `comparison` of an A/B job (`api::job::Comparison`).
fn comparison(c: Fields) -> Read<Comparison> {
    let range = c.list("b_over_a_range")?;
    let range = match range {
        [lo, hi] => lo.as_f64().zip(hi.as_f64()),
        _ => None,
    };
    Ok(Comparison {
        median: c.f64("b_over_a_median")?,
        range: Some(range.ok_or("`b_over_a_range` is not two numbers")?),
        pairs: Some(c.u64("pairs")?),
        order: Some(c.str("order")?.to_string()),
        a_median_us: Some(c.f64("a_median_us")?),
        b_median_us: Some(c.f64("b_median_us")?),
        same_inputs: c.opt("same_inputs", Value::as_bool)?,
    })
}

/// `result.peers` (`api::run::PeersReport`): the torch twin timed in the same run.
fn peers(p: Fields) -> Read<PeersView> {
    let peer = |q: &Value| -> Read<PeerView> {
        let q = Fields::of(q, "peers")?;
        let timing = q.opt_obj("timing")?;
        let t = |k: &str| timing.map(|t| t.f64(k)).transpose();
        Ok(PeerView {
            name: q.str("name")?.to_string(),
            median_us: t("median_us")?,
            min_us: t("min_us")?,
            max_us: t("max_us")?,
            passed: q.bool("passed")?,
            compile_s: q.opt_f64("compile_s")?,
            speedup: q.opt_f64("speedup")?,
            error: q.opt_str("error")?,
        })
    };
    Ok(PeersView {
        unavailable: p.opt_str("unavailable")?,
        torch: p.opt_str("torch")?,
        rounds: p.opt("rounds", Value::as_u64)?.filter(|&r| r > 0),
        peers: match p.opt("peers", Value::as_array)? {
            Some(list) => list.iter().map(peer).collect::<Read<_>>()?,
            None => Vec::new(),
        },
        best: p.opt_str("best")?,
        speedup: p.opt_f64("speedup")?,
        spread: p.opt_f64("speedup_min")?.zip(p.opt_f64("speedup_max")?),
    })
}

/// `result.peers` as a JSON value (the torch pane's tests).
#[cfg(test)]
pub(crate) fn read_peers(v: &Value) -> Read<PeersView> {
    peers(Fields::of(v, "peers")?)
}

/// `result.profile` (`api::profile::ProfileReport`, externally tagged), built into the runner's
/// own type: the Profile pane draws it with the runner's code (`profile_view.rs`).
fn profile(p: Fields) -> Read<api::profile::ProfileReport> {
    use api::profile::{Profile, ProfileReport, Roofline, Stall, Unavailable};
    if let Some(u) = p.opt_obj("unavailable")? {
        let reason = match u.str("reason")? {
            "no_ncu" => Unavailable::NoNcu,
            "no_permission" => Unavailable::NoPermission,
            "timed_out" => Unavailable::TimedOut,
            "no_kernel" => Unavailable::NoKernel,
            "failed" => Unavailable::Failed,
            other => return Err(format!("unknown profile `reason` `{other}`")),
        };
        let message = u.str("message")?.to_string();
        return Ok(ProfileReport::Unavailable { reason, message });
    }
    let m = p.obj("measured")?;
    let f = m.obj("profile")?;
    let stalls = match f.opt("stalls", Value::as_array)? {
        Some(list) => list
            .iter()
            .map(|s| {
                let s = Fields::of(s, "stalls")?;
                Ok(Stall {
                    reason: s.str("reason")?.to_string(),
                    value: s.f64("value")?,
                })
            })
            .collect::<Read<_>>()?,
        None => Vec::new(),
    };
    let metrics = match f.opt_obj("metrics")? {
        Some(ms) => (ms.0.keys())
            .map(|k| Ok((k.clone(), ms.f64(k)?)))
            .collect::<Read<_>>()?,
        None => Default::default(),
    };
    let profile = Profile {
        kernel: f.str("kernel")?.to_string(),
        duration_ns: f.opt_f64("duration_ns")?,
        dram_throughput_pct: f.opt_f64("dram_throughput_pct")?,
        dram_bytes: f.opt_f64("dram_bytes")?,
        l2_hit_rate_pct: f.opt_f64("l2_hit_rate_pct")?,
        sm_throughput_pct: f.opt_f64("sm_throughput_pct")?,
        tensor_pipe_pct: f.opt_f64("tensor_pipe_pct")?,
        achieved_occupancy_pct: f.opt_f64("achieved_occupancy_pct")?,
        stalls,
        stall_unit: f.opt_str("stall_unit")?.unwrap_or_default(),
        warp_cycles_per_issued: f.opt_f64("warp_cycles_per_issued")?,
        shared_bank_conflicts: f.opt_f64("shared_bank_conflicts")?,
        flops: f.opt_f64("flops")?,
        metrics,
        ncu: f.opt_str("ncu")?.unwrap_or_default(),
    };
    let roofline = match m.opt_obj("roofline")? {
        Some(r) => Some(Roofline {
            intensity: r.f64("intensity")?,
            flops_per_s: r.f64("flops_per_s")?,
            bytes_per_s: r.f64("bytes_per_s")?,
            flops_from: r.opt_str("flops_from")?.unwrap_or_default(),
            copy_bytes_per_s: r.f64("copy_bytes_per_s")?,
            tensor_flops_per_s: r.opt_f64("tensor_flops_per_s")?,
            tensor_ceiling: r.opt_str("tensor_ceiling")?,
        }),
        None => None,
    };
    Ok(ProfileReport::Measured {
        profile: Box::new(profile),
        roofline,
        roofline_missing: m.opt_str("roofline_missing")?,
    })
}

/// The answer of `POST /api/inspect` (`api::inspect::Inspection`), built into the runner's own
/// type (the PTX and SASS panes draw it, `inspect_panes.rs`).
pub(crate) fn read_inspection(v: &Value) -> Read<api::inspect::Inspection> {
    use api::inspect::{Inspection, Listing, Resources, Variant, Warning};
    use hopfuse::codegen::lines::{CudaLine, LineMap};
    let i = Fields::of(v, "the inspection")?;
    let line = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
    let lines_of = |l: Fields, k: &str| -> Read<Vec<Option<u32>>> {
        (l.list(k)?.iter())
            .map(|n| match n {
                Value::Null => Ok(None),
                n => line(n)
                    .map(Some)
                    .ok_or(format!("`{k}` is not line numbers")),
            })
            .collect()
    };
    let listing = |l: Fields| -> Read<Listing> {
        Ok(Listing {
            text: l.str("text")?.to_string(),
            cuda_lines: lines_of(l, "cuda_lines")?,
            inlined: lines_of(l, "inlined")?,
            no_source_line: l.opt("no_source_line", Value::as_u64)?.unwrap_or(0) as usize,
        })
    };
    let variant = i.obj("variant")?;
    let index_type = match variant.str("index_type")? {
        "i32" => IndexType::I32,
        "i64" => IndexType::I64,
        other => return Err(format!("unknown `index_type` `{other}`")),
    };
    let cuda_line = |l: &Value| -> Read<CudaLine> {
        let l = Fields::of(l, "lines")?;
        let ir_line = || l.u64("ir_line").map(|n| n as usize);
        Ok(match l.str("kind")? {
            "prelude" => CudaLine::Prelude,
            "signature" => CudaLine::Signature,
            "setup" => CudaLine::Setup,
            "binding" => CudaLine::Binding {
                ir_line: ir_line()?,
                pass: l.opt_str("pass")?,
            },
            "stmt" => CudaLine::Stmt {
                stmt: l.u64("stmt")? as usize,
                ir_line: ir_line()?,
                pass: l.opt_str("pass")?,
            },
            other => return Err(format!("unknown CUDA line kind `{other}`")),
        })
    };
    let r = i.obj("resources")?;
    let u32_of = |k: &str| r.opt(k, line);
    let warning = |w: &Value| -> Read<Warning> {
        let w = Fields::of(w, "warnings")?;
        Ok(Warning {
            text: w.str("text")?.to_string(),
            cuda_line: w.opt("cuda_line", line)?,
        })
    };
    let strings = |k: &str| -> Read<Vec<String>> {
        (i.list(k)?.iter())
            .map(|s| {
                s.as_str()
                    .map(String::from)
                    .ok_or(format!("`{k}` is not strings"))
            })
            .collect()
    };
    Ok(Inspection {
        kernel: i.str("kernel")?.to_string(),
        variant: Variant {
            index_type,
            assume_aligned_vectors: variant.bool("assume_aligned_vectors")?,
            reason: variant.str("reason")?.to_string(),
        },
        cuda: i.str("cuda")?.to_string(),
        ir: i.str("ir")?.to_string(),
        lines: LineMap {
            lines: (i.obj("lines")?.list("lines")?.iter())
                .map(cuda_line)
                .collect::<Read<_>>()?,
        },
        ptx: listing(i.obj("ptx")?)?,
        sass: i.opt_obj("sass")?.map(listing).transpose()?,
        sass_unavailable: i.opt_str("sass_unavailable")?,
        resources: Resources {
            registers: u32_of("registers")?,
            barriers: u32_of("barriers")?,
            shared_bytes: r.opt("shared_bytes", Value::as_u64)?,
            stack_bytes: r.opt("stack_bytes", Value::as_u64)?,
            spill_store_bytes: r.opt("spill_store_bytes", Value::as_u64)?,
            spill_load_bytes: r.opt("spill_load_bytes", Value::as_u64)?,
            local_bytes: r.opt("local_bytes", Value::as_u64)?,
            constant_bytes: r.opt("constant_bytes", Value::as_u64)?,
        },
        warnings: i
            .list("warnings")?
            .iter()
            .map(warning)
            .collect::<Read<_>>()?,
        log: i.str("log")?.to_string(),
        nvrtc: i.str("nvrtc")?.to_string(),
        nvdisasm: i.opt_str("nvdisasm")?,
        options: strings("options")?,
        cubin_bytes: i.u64("cubin_bytes")? as usize,
        cached: i.bool("cached")?,
        nvrtc_ms: i.f64("nvrtc_ms")?,
    })
}

impl Measured {
    /// `result` of a job (`api::run::RunResult`).
    fn of(r: Fields, cubin_cached: Option<bool>) -> Read<Measured> {
        let timing = r.obj("timing")?;
        let attributes = r.obj("attributes")?;
        let launch = r.obj("launch")?;
        let cublas = r.opt_obj("cublas")?;
        Ok(Measured {
            passed: r.bool("passed")?,
            device: Some(r.obj("device")?.str("name")?.to_string()),
            launch: Some(launch_text(launch)?),
            index: Some(index_text(r)?),
            l2_policy: Some(l2_text(r.obj("l2_policy")?)?),
            min_us: Some(timing.f64("min_us")?),
            median_us: Some(timing.f64("median_us")?),
            max_us: Some(timing.f64("max_us")?),
            samples: Some(timing.u64("samples")?),
            gbps: Some(r.f64("gbps")?),
            ceiling_gbps: r.opt_obj("copy")?.map(|c| c.f64("gbps")).transpose()?,
            ratio: r.opt_f64("fraction_of_copy")?,
            tflops: r.opt_f64("tflops")?,
            cublas_tflops: cublas.map(|c| c.f64("tflops")).transpose()?,
            cublas_ratio: r.opt_f64("fraction_of_cublas")?,
            cublas_call: cublas
                .map(|c| c.str("call").map(String::from))
                .transpose()?,
            cublas_check: cublas.map(|c| check(c.obj("validation")?)).transpose()?,
            cublas_skipped: r.opt_str("cublas_skipped")?,
            checks: checks(r, "validation")?,
            checks_after_timing: checks(r, "validation_after_timing")?,
            seed: Some(r.u64("seed")?),
            registers: Some(attributes.u64("registers_per_thread")? as i64),
            static_smem: Some(attributes.u64("static_smem_bytes")? as i64),
            dynamic_smem: Some(launch.u64("dynamic_smem_bytes")? as i64),
            local_bytes: Some(attributes.u64("local_bytes_per_thread")? as i64),
            nvrtc_ms: Some(r.f64("nvrtc_ms")?),
            cubin_cached,
            peers: r.opt_obj("peers")?.map(peers).transpose()?,
            profile: r.opt_obj("profile")?.map(profile).transpose()?,
        })
    }
}

/// One job result (A's, or `b` of an A/B job): `api::job::JobResult`.
fn job_view(job: Fields) -> Read<RunView> {
    let status = job.str("status")?;
    let fake = status == "fake";
    let error = job.opt_obj("error")?;
    let progress = job.list("progress")?;
    Ok(RunView {
        job_id: Some(job.str("job_id")?.to_string()),
        status: status.to_string(),
        message: job.opt_str("message")?,
        error_stage: error
            .map(|e| e.str("stage").map(String::from))
            .transpose()?,
        error: error
            .map(|e| e.str("message").map(String::from))
            .transpose()?,
        progress: progress
            .iter()
            .map(|p| {
                p.as_str()
                    .map(String::from)
                    .ok_or("`progress` is not names")
            })
            .collect::<Result<_, _>>()?,
        stderr: job.opt_str("stderr")?.filter(|e| !e.trim().is_empty()),
        // A fake result never shows numbers, whatever else it holds.
        measured: match job.opt_obj("result")? {
            Some(r) if !fake => Some(Measured::of(r, job.opt("cubin_cached", Value::as_bool)?)?),
            _ => None,
        },
        fake: match job.opt_obj("compile")? {
            Some(c) if fake => Some(FakeView {
                note: c.str("note")?.to_string(),
                kernel: Some(c.str("kernel")?.to_string()),
                index: Some(index_text(c)?),
                launch: Some(launch_text(c.obj("launch")?)?),
                working_set_bytes: Some(c.f64("working_set_bytes")?),
                cuda_bytes: Some(c.f64("cuda_bytes")?),
            }),
            _ => fake.then(FakeView::default),
        },
        worker_ms: Some(job.f64("worker_ms")?),
        agent: job.opt_str("agent")?,
        stages: Vec::new(),
        b: job.opt_obj("b")?.map(job_view).transpose()?.map(Box::new),
        comparison: job.opt_obj("comparison")?.map(comparison).transpose()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopfuse_api::service::Health;

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
    fn health(worker: &str, gpu: Option<&str>, gpu_reason: Option<&str>, run: bool) -> Value {
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
        // The service's own type reads it: the test's answer is one the service sends.
        let h: Health = serde_json::from_value(v.clone()).expect("a health answer");
        serde_json::to_value(h).unwrap()
    }

    #[test]
    fn reads_health() {
        let gpu = health("gpu", Some("NVIDIA H100 80GB HBM3"), None, true);
        assert_eq!(
            describe_health(&gpu).unwrap(),
            (
                "runner 0.1.0 · NVIDIA H100 80GB HBM3 (132 SMs)".into(),
                RunMode::Gpu
            )
        );
        let fake = health("fake", None, Some("fake worker mode"), true);
        assert_eq!(describe_health(&fake).unwrap().1, RunMode::Fake);
        let none = health("gpu", None, Some("no driver"), false);
        let (text, mode) = describe_health(&none).unwrap();
        // A renamed field is an error that names it.
        let mut renamed = gpu.clone();
        renamed["gpu"]["sms"] = renamed["gpu"]["sm_count"].take();
        renamed["gpu"].as_object_mut().unwrap().remove("sm_count");
        assert!(describe_health(&renamed)
            .unwrap_err()
            .contains("`sm_count`"));
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
            h["distributed"] = serde_json::json!({
                "nats": "nats://10.0.0.5:4222", "connected": connected, "arch": "sm_90a",
                "depth": 0, "waiting": 0, "running": 0, "cap": 1000, "in_flight": 0,
                "gpus": 2 * agents.len(), "agents": agents,
            });
            // The test answer is a valid `hopfuse-api` health answer.
            serde_json::from_value::<api::service::Health>(h.clone()).expect("a health answer");
            describe_health(&h).expect("a distributed front-end's health")
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

    /// The `done` event's data in a recorded event stream (docs/recordings).
    fn done_of(sse: &str) -> &str {
        let at =
            sse.find("event: done\ndata: ").expect("a done event") + "event: done\ndata: ".len();
        sse[at..].lines().next().unwrap()
    }

    /// Every recorded result reads completely: the accessor layer above is the playground's
    /// reading of `api::job::JobResult`, and these are the service's own answers (the fixtures
    /// are serialized from the runner's types by runner/tests/api_fixtures.rs; the recordings
    /// are real H100 jobs).
    #[test]
    fn every_recorded_result_reads() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
        let mut texts = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with("done-") && name.ends_with(".json") {
                texts.push((name, std::fs::read_to_string(&path).unwrap()));
            }
        }
        assert!(texts.len() >= 8, "only {} done fixtures", texts.len());
        for rec in ["exp_2d_h100.sse", "matmul_h100.sse"] {
            let sse = std::fs::read_to_string(
                [env!("CARGO_MANIFEST_DIR"), "/../docs/recordings/", rec].concat(),
            )
            .unwrap();
            texts.push((rec.into(), done_of(&sse).to_string()));
        }
        for (name, text) in &texts {
            let v = parse_result(text);
            assert!(v.job_id.is_some(), "{name}: {:?}", v.error);
            let measured = matches!(v.status.as_str(), "passed" | "failed");
            assert_eq!(v.measured.is_some(), measured, "{name}: {:?}", v.error);
            assert_eq!(v.fake.is_some(), v.status == "fake", "{name}");
            assert_eq!(
                v.error.is_some(),
                v.status == "error",
                "{name}: {:?}",
                v.error
            );
        }
        // The real matrix product on the H100: its cuBLAS ceiling reads.
        let matmul = &texts.last().unwrap().1;
        let m = parse_result(matmul).measured.expect("measured");
        assert!(m.tflops.unwrap() > 0.0 && m.cublas_tflops.unwrap() > 0.0);
        assert!(m.device.unwrap().contains("H100"));
    }

    /// A field the service renamed, dropped or retyped is an error that names it, not a
    /// quietly empty pane.
    #[test]
    fn a_renamed_field_is_an_error() {
        let cases = [
            ("\"median_us\"", "\"median\"", "missing field `median_us`"),
            (
                "\"registers_per_thread\"",
                "\"regs\"",
                "`registers_per_thread`",
            ),
            ("\"index_type\"", "\"index\"", "`index_type`"),
            ("\"worker_ms\"", "\"worker_s\"", "`worker_ms`"),
            (
                "\"kind\": \"rotate\"",
                "\"kind\": \"spin\"",
                "unknown L2 policy `spin`",
            ),
            (
                "\"gbps\": 4915.2",
                "\"gbps\": \"fast\"",
                "`gbps` has the wrong type",
            ),
        ];
        for (from, to, says) in cases {
            assert!(PASSED.contains(from), "{from}");
            let v = parse_result(&PASSED.replace(from, to));
            assert_eq!(v.status, "error", "{from}");
            let e = v.error.unwrap();
            assert!(e.contains(says), "{from}: {e}");
            assert!(e.starts_with("the runner's result is not one this playground reads"));
        }
        let v = parse_result(r#"{"stage": "done", "elapsed_ms": 1}"#);
        assert!(v.error.unwrap().contains("holds no result"));
        // The typed parts keep serde's errors.
        let mut j: Value = serde_json::from_str(PASSED).unwrap();
        j["result"]["result"]["profile"] = serde_json::json!({"unavailable": {"reason": "gone"}});
        assert!(parse_result(&j.to_string())
            .error
            .unwrap()
            .contains("`gone`"));
        j["result"]["result"]["peers"] = serde_json::json!({"rounds": "x"});
        assert!(parse_result(&j.to_string())
            .error
            .unwrap()
            .contains("`rounds`"));
    }

    /// The profile built field by field is the runner's own reading of the same JSON.
    #[test]
    fn the_profile_reads_as_the_runner_wrote_it() {
        for text in [
            include_str!("../tests/fixtures/done-profile.json"),
            include_str!("../tests/fixtures/done-profile-unavailable.json"),
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            let theirs: api::profile::ProfileReport =
                serde_json::from_value(v["result"]["result"]["profile"].clone()).unwrap();
            let ours = parse_result(text).measured.unwrap().profile;
            assert_eq!(ours, Some(theirs));
        }
    }
}
