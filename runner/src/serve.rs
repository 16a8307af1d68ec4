//! `hopfuse serve`: the playground's static files and the HTTP API (see `docs/api.md`).
//!
//! Compiles run in the server (a blocking thread per request in a compile slot, as many at
//! once as there are cores, each request within a deadline: `compile_slots.rs`); runs go
//! through the [`Queue`] to warm `hopfuse worker --serve` child processes. Every error is a
//! JSON `{"error": ...}` with a 4xx/5xx status.

use crate::compile_slots::{CompileSlots, Refused};
use crate::engine::{self, RunRequest};
use crate::faults::Fault;
use crate::gpu::DeviceInfo;
use crate::queue::{JobEvent, JobSpec, JobStage, Queue, QueueConfig, QueueStats};
use crate::rate_limit::ClientRateLimiter;
use crate::store::Store;
use crate::worker::FakeBehaviour;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use hopfuse::{CompileOptions, IndexType};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::broadcast;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tracing::{info, warn};

/// `hopfuse serve` options.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// The playground's static files (a short HTML note is served while it does not exist).
    #[arg(long, default_value = "dist")]
    pub static_dir: PathBuf,
    /// Directory of the database and the CUBIN cache [default: $XDG_DATA_HOME/hopfuse or
    /// ~/.local/share/hopfuse].
    #[arg(long, env = "HOPFUSE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Database: a SQLite file path, or a URL (sqlite://..., postgres://...)
    /// [default: DATA_DIR/hopfuse.db].
    #[arg(long, env = "HOPFUSE_DB")]
    pub db: Option<String>,
    /// Runs kept in the history, newest first (0: no limit).
    #[arg(long, default_value_t = 10_000)]
    pub keep_runs: u64,
    /// Days a run is kept in the history (0: no limit).
    #[arg(long, default_value_t = 30)]
    pub keep_runs_days: u64,
    /// Bytes of run history kept (each run's request and result JSON), newest first (0: no
    /// limit).
    #[arg(long, default_value_t = 256 << 20)]
    pub keep_runs_bytes: u64,
    /// Wall-clock limit of one job in seconds; the worker is killed (SIGKILL) past it.
    #[arg(long, default_value_t = 10.0)]
    pub job_timeout: f64,
    /// Jobs waiting or running at most; more get 429.
    #[arg(long, default_value_t = 64)]
    pub queue_cap: usize,
    /// Jobs one client (IP address) may have waiting or running; more get 429 (0: no limit).
    #[arg(long, default_value_t = 16)]
    pub client_queue_cap: usize,
    /// GPUs to run on, one job at a time on each.
    #[arg(long, default_value_t = 1)]
    pub gpus: usize,
    /// Require `Authorization: Bearer TOKEN` on every API call but GET /api/health.
    #[arg(long, env = "HOPFUSE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Origins allowed to call the API from a browser (repeat; `*` for any).
    #[arg(long = "cors-origin")]
    pub cors_origins: Vec<String>,
    /// Largest request body in bytes (413 past it).
    #[arg(long, default_value_t = 256 * 1024)]
    pub max_body_bytes: usize,
    /// Largest program text in bytes (413 past it).
    #[arg(long, default_value_t = 64 * 1024)]
    pub max_program_bytes: usize,
    /// Most timed launches of one run.
    #[arg(long, default_value_t = 10_000)]
    pub max_iters: u32,
    /// Most warm-up launches of one run.
    #[arg(long, default_value_t = 1_000)]
    pub max_warmup: u32,
    /// Most bytes of all the tensors of one run together.
    #[arg(long, default_value_t = 4 << 30)]
    pub max_tensor_bytes: u64,
    /// Runs one client may start per minute (0: no limit).
    #[arg(long, default_value_t = 60)]
    pub runs_per_minute: u32,
    /// Other POST requests (compile, links) one client may make per minute (0: no limit).
    #[arg(long, default_value_t = 600)]
    pub requests_per_minute: u32,
    /// Run jobs with the fake worker: programs are compiled and checked, nothing is executed or
    /// measured (CI without a GPU).
    #[arg(long)]
    pub fake_worker: bool,
    /// Test hook of the fake worker.
    #[arg(long, value_enum, requires = "fake_worker")]
    pub fake_behaviour: Option<FakeBehaviour>,
    /// Accept `"fault": "deadlock" | "illegal_address" | "nvrtc_error"` in POST /api/run:
    /// kernels that fail on purpose, to check the fault handling on a GPU.
    #[arg(long)]
    pub fault_kernels: bool,
    /// Do not cache CUBINs on disk.
    #[arg(long)]
    pub no_cubin_cache: bool,
    /// Seconds one request may spend compiling (waiting for a compile slot included); past it
    /// the request is answered with an error (422, or 503 when no slot came free).
    #[arg(long, default_value_t = 10.0)]
    pub compile_timeout: f64,
    /// Compiles at once (abandoned ones included) [default: the number of cores].
    #[arg(long)]
    pub compile_slots: Option<usize>,
    /// Test hook: every compile first sleeps this long on its blocking thread.
    #[arg(long, hide = true, default_value_t = 0)]
    pub compile_test_delay_ms: u64,
    /// The binary run as `hopfuse worker` [default: this one].
    #[arg(long, hide = true)]
    pub worker_exe: Option<PathBuf>,
}

impl ServeArgs {
    /// The run history's retention policy from `--keep-runs*`.
    pub fn retention(&self) -> crate::store::Retention {
        let limit = |n: u64| (n > 0).then_some(n);
        crate::store::Retention {
            max_runs: limit(self.keep_runs),
            max_age: limit(self.keep_runs_days)
                .map(|d| Duration::from_secs(d.saturating_mul(86_400))),
            max_bytes: limit(self.keep_runs_bytes),
        }
    }
}

/// What the startup probe found.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GpuStatus {
    pub gpu: Option<DeviceInfo>,
    pub reason: Option<String>,
    pub nvrtc: Option<String>,
    /// Why NVRTC cannot be loaded (runs need it as much as the GPU).
    #[serde(default)]
    pub nvrtc_reason: Option<String>,
}

pub struct App {
    args: ServeArgs,
    queue: Arc<Queue>,
    store: Store,
    gpu: GpuStatus,
    compiles: CompileSlots,
    run_limiter: ClientRateLimiter,
    post_limiter: ClientRateLimiter,
    started: Instant,
    /// `hopfuse worker --inspect` runs as this binary; its cache directory.
    worker_exe: PathBuf,
    inspect_cache: Option<PathBuf>,
    /// Inspection children at once (one per compile slot: each is NVRTC plus nvdisasm).
    inspect_slots: Arc<tokio::sync::Semaphore>,
}

/// `$XDG_DATA_HOME/hopfuse`, `~/.local/share/hopfuse`, or `./hopfuse-data`.
pub fn default_data_dir() -> PathBuf {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty());
    match std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("hopfuse"),
        None => match home {
            Some(h) => PathBuf::from(h).join(".local/share/hopfuse"),
            None => PathBuf::from("hopfuse-data"),
        },
    }
}

impl App {
    pub async fn new(args: ServeArgs) -> anyhow::Result<Arc<App>> {
        let data_dir = args.data_dir.clone().unwrap_or_else(default_data_dir);
        std::fs::create_dir_all(&data_dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", data_dir.display()))?;
        let db = args
            .db
            .clone()
            .unwrap_or_else(|| data_dir.join("hopfuse.db").display().to_string());
        let store = Store::open(&db, args.retention())
            .await
            .map_err(|e| anyhow::anyhow!("cannot open the database {db}: {e}"))?;
        let worker_exe = match &args.worker_exe {
            Some(p) => p.clone(),
            None => std::env::current_exe()?,
        };
        let gpu = if args.fake_worker {
            GpuStatus {
                gpu: None,
                reason: Some(
                    "fake worker mode (--fake-worker): runs are compiled and checked, never \
                     executed or measured"
                        .into(),
                ),
                nvrtc: None,
                nvrtc_reason: None,
            }
        } else {
            probe(&worker_exe).await
        };
        match &gpu.gpu {
            Some(g) if gpu.nvrtc.is_none() => warn!(
                "GPU {}, but no NVRTC for runs: {}",
                g.name,
                gpu.nvrtc_reason.as_deref().unwrap_or("unknown")
            ),
            Some(g) => info!("GPU: {} ({} SMs)", g.name, g.sm_count),
            None => warn!(
                "no GPU for runs: {}",
                gpu.reason.as_deref().unwrap_or("unknown")
            ),
        }
        let mut worker_args = Vec::new();
        if args.fake_worker {
            worker_args.push("--fake".to_string());
            if let Some(b) = args.fake_behaviour {
                worker_args.push("--fake-behaviour".to_string());
                let name = match b {
                    FakeBehaviour::Ok => "ok",
                    FakeBehaviour::Hang => "hang",
                    FakeBehaviour::Crash => "crash",
                    FakeBehaviour::CudaError => "cuda-error",
                    FakeBehaviour::FromProgram => "from-program",
                };
                worker_args.push(name.to_string());
            }
        }
        if !(args.job_timeout.is_finite() && args.job_timeout > 0.0) {
            anyhow::bail!("--job-timeout must be a positive number of seconds");
        }
        let inspect_cache = (!args.no_cubin_cache).then(|| data_dir.join("inspect"));
        let queue = Queue::start(
            QueueConfig {
                worker_exe: worker_exe.clone(),
                worker_args,
                timeout: Duration::from_secs_f64(args.job_timeout),
                cap: args.queue_cap,
                client_cap: args.client_queue_cap,
                gpus: args.gpus.max(1),
                cubin_cache: (!args.no_cubin_cache).then(|| data_dir.join("cubin")),
                prespawn: args.fake_worker || gpu.gpu.is_some(),
            },
            Some(store.clone()),
        );
        let compile_timeout = Duration::try_from_secs_f64(args.compile_timeout)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                anyhow::anyhow!("--compile-timeout must be a positive number of seconds")
            })?;
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        let slots = args.compile_slots.unwrap_or(cores).max(1);
        let compiles = CompileSlots::new(
            args.compile_slots.unwrap_or(cores),
            compile_timeout,
            Duration::from_millis(args.compile_test_delay_ms),
        );
        Ok(Arc::new(App {
            run_limiter: ClientRateLimiter::new(args.runs_per_minute),
            post_limiter: ClientRateLimiter::new(args.requests_per_minute),
            args,
            queue,
            store,
            gpu,
            compiles,
            started: Instant::now(),
            worker_exe,
            inspect_cache,
            inspect_slots: Arc::new(tokio::sync::Semaphore::new(slots)),
        }))
    }

    fn run_unavailable(&self) -> Option<String> {
        if self.args.fake_worker {
            return None;
        }
        if self.gpu.gpu.is_none() {
            return Some(format!(
                "runs are unavailable: no usable GPU ({}); compiling works (POST /api/compile)",
                self.gpu.reason.as_deref().unwrap_or("unknown reason")
            ));
        }
        if self.gpu.nvrtc.is_none() {
            return Some(format!(
                "runs are unavailable: NVRTC cannot be loaded ({}); compiling works (POST \
                 /api/compile)",
                self.gpu.nvrtc_reason.as_deref().unwrap_or("unknown reason")
            ));
        }
        None
    }

    /// Runs a compile in a compile slot within the deadline (`compile_slots.rs`).
    async fn compile<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        self.compiles
            .run(work)
            .await
            .map_err(|refused| match refused {
                Refused::Busy { deadline } => ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                    "every compile slot stayed busy for the compile deadline of {} s; retry later",
                    deadline.as_secs_f64()
                ),
                )
                .with("limit", json!("compile_timeout_s"))
                .retry_after(deadline.as_secs().max(1)),
                Refused::Deadline { deadline } => ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!(
                        "compiling this program took longer than the deadline of {} s \
                     (compile_timeout_s)",
                        deadline.as_secs_f64()
                    ),
                )
                .with("limit", json!("compile_timeout_s"))
                .with("max", json!(deadline.as_secs_f64())),
                Refused::Panicked => ApiError::internal(
                    "the compiler panicked on this program (a bug: please report it)",
                ),
            })
    }

    fn check_program(&self, program: &str) -> Result<(), ApiError> {
        let max = self.args.max_program_bytes;
        if program.len() > max {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the program is {} bytes; the limit is {max} bytes (max_program_bytes)",
                    program.len()
                ),
            )
            .with("limit", json!("max_program_bytes"))
            .with("max", json!(max)));
        }
        Ok(())
    }
}

/// Asks a `hopfuse worker --probe` child which GPU there is (a broken driver cannot take the
/// server down with it).
async fn probe(worker_exe: &std::path::Path) -> GpuStatus {
    let failed = |reason: String| GpuStatus {
        gpu: None,
        reason: Some(reason),
        nvrtc: None,
        nvrtc_reason: None,
    };
    let out = tokio::process::Command::new(worker_exe)
        .args(["worker", "--probe"])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(Duration::from_secs(30), out).await {
        Err(_) => failed("the GPU probe did not finish in 30 s".into()),
        Ok(Err(e)) => failed(format!("cannot start the GPU probe: {e}")),
        Ok(Ok(o)) => {
            let text = String::from_utf8_lossy(&o.stdout);
            match serde_json::from_str::<GpuStatus>(text.trim()) {
                Ok(s) => s,
                Err(_) => failed(format!(
                    "the GPU probe failed ({}): {}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr).trim()
                )),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors and extractors

/// A JSON error response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: Value,
    retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: json!({ "error": message.into() }),
            retry_after: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    fn with(mut self, key: &str, value: Value) -> ApiError {
        self.body[key] = value;
        self
    }

    fn internal(what: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: {what}"),
        )
    }

    fn retry_after(mut self, seconds: u64) -> ApiError {
        self.retry_after = Some(seconds);
        self
    }

    fn too_many(message: String, retry_after: u64) -> ApiError {
        let mut e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, message)
            .with("retry_after_s", json!(retry_after));
        e.retry_after = Some(retry_after);
        e
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, Json(self.body)).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

/// A JSON body: 413 over the body limit, 400 (with serde's message) when it is not the JSON
/// the endpoint takes. No content type is required.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<App>> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &Arc<App>) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, app).await.map_err(|r| {
            if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                let max = app.args.max_body_bytes;
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "the request body is larger than the limit of {max} bytes (max_body_bytes)"
                    ),
                )
                .with("limit", json!("max_body_bytes"))
                .with("max", json!(max))
            } else {
                ApiError::new(r.status(), r.body_text())
            }
        })?;
        serde_json::from_slice(&bytes)
            .map(ApiJson)
            .map_err(|e| ApiError::bad_request(format!("malformed JSON request: {e}")))
    }
}

/// The client a request came from (its IP address), for rate limits and the run history.
pub struct Client(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Client {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(Client(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip().to_string())
                .unwrap_or_else(|| "local".into()),
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Rate limiting

fn limit(limiter: &ClientRateLimiter, client: &Client, what: &str) -> Result<(), ApiError> {
    limiter.check(&client.0).map_err(|s| {
        ApiError::too_many(
            format!(
                "rate limit: at most {} {what} per minute per client; retry in {s} s",
                limiter.per_minute()
            ),
            s,
        )
    })
}

// ---------------------------------------------------------------------------------------------
// Router

pub fn router(app: Arc<App>) -> Router {
    let protected = Router::new()
        .route("/api/compile", post(compile))
        .route("/api/inspect", post(inspect))
        .route("/api/run", post(run))
        .route("/api/jobs/{id}", get(job))
        .route("/api/jobs/{id}/events", get(job_events))
        .route("/api/links", post(put_link))
        .route("/api/links/{id}", get(get_link))
        .route("/api/runs", get(runs))
        .route_layer(middleware::from_fn_with_state(app.clone(), auth));
    let mut router = Router::new()
        .merge(protected)
        .route("/api/health", get(health))
        .route("/api", any(api_not_found))
        .route("/api/{*rest}", any(api_not_found))
        .fallback(static_files)
        .layer(axum::extract::DefaultBodyLimit::max(
            app.args.max_body_bytes,
        ))
        .layer(middleware::from_fn(json_errors))
        .layer(CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                ApiError::internal("the server panicked on this request (a bug: please report it)")
                    .into_response()
            },
        ))
        .with_state(app.clone());
    if let Some(cors) = cors_layer(&app.args.cors_origins) {
        router = router.layer(cors);
    }
    router
}

fn cors_layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok()),
        )
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION])
            .expose_headers([header::RETRY_AFTER])
            .max_age(Duration::from_secs(3600)),
    )
}

async fn auth(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    if let Some(token) = &app.args.token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let ok = given.is_some_and(|g| constant_time_eq(g.trim().as_bytes(), token.as_bytes()));
        if !ok {
            let msg = if given.is_none() {
                "this service requires a token: send `Authorization: Bearer <token>`"
            } else {
                "wrong token"
            };
            return ApiError::new(StatusCode::UNAUTHORIZED, msg).into_response();
        }
    }
    next.run(req).await
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Every error status under /api has a JSON body (axum's own 404/405/413 are plain text).
async fn json_errors(req: Request, next: Next) -> Response {
    let api = req.uri().path().starts_with("/api");
    let resp = next.run(req).await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/event-stream"));
    if !api || status.as_u16() < 400 || is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let mut json_resp = ApiError::new(status, message).into_response();
    for (k, v) in parts.headers.iter() {
        if k != header::CONTENT_TYPE && k != header::CONTENT_LENGTH {
            json_resp.headers_mut().insert(k.clone(), v.clone());
        }
    }
    json_resp
}

async fn api_not_found(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no such API endpoint: {method} {}", uri.path()),
    )
}

/// The playground's files (`crate::static_files`): precompressed, with ETags.
async fn static_files(State(app): State<Arc<App>>, req: Request) -> Response {
    crate::static_files::serve(&app.args.static_dir, req).await
}

// ---------------------------------------------------------------------------------------------
// Handlers

#[derive(Serialize)]
struct Health {
    status: &'static str,
    version: &'static str,
    /// "gpu" (runs execute on the GPU) or "fake" (compiled and checked only).
    worker: &'static str,
    gpu: Option<DeviceInfo>,
    /// Why there is no GPU.
    gpu_reason: Option<String>,
    nvrtc: Option<String>,
    run_available: bool,
    run_unavailable_reason: Option<String>,
    queue: QueueStats,
    /// Compiles running (abandoned ones included), the slots for them, and the programs this
    /// service has lowered.
    compiles: Value,
    limits: Value,
    uptime_s: f64,
}

async fn health(State(app): State<Arc<App>>) -> Json<Health> {
    let a = &app.args;
    Json(Health {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
        worker: if a.fake_worker { "fake" } else { "gpu" },
        gpu: app.gpu.gpu.clone(),
        gpu_reason: app.gpu.reason.clone(),
        nvrtc: app.gpu.nvrtc.clone(),
        run_available: app.run_unavailable().is_none(),
        run_unavailable_reason: app.run_unavailable(),
        queue: app.queue.stats(),
        compiles: json!({
            "running": app.compiles.running(),
            "slots": app.compiles.total(),
            "lowered": engine::lowerings(),
        }),
        limits: json!({
            "max_body_bytes": a.max_body_bytes,
            "max_program_bytes": a.max_program_bytes,
            "max_iters": a.max_iters,
            "max_warmup": a.max_warmup,
            "max_tensor_bytes": a.max_tensor_bytes,
            "queue_cap": a.queue_cap,
            "client_queue_cap": a.client_queue_cap,
            "runs_per_minute": a.runs_per_minute,
            "requests_per_minute": a.requests_per_minute,
            "job_timeout_s": a.job_timeout,
            "compile_timeout_s": a.compile_timeout,
            "keep_runs": a.keep_runs,
            "keep_runs_days": a.keep_runs_days,
            "keep_runs_bytes": a.keep_runs_bytes,
            "token_required": a.token.is_some(),
        }),
        uptime_s: app.started.elapsed().as_secs_f64(),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CompileBody {
    program: String,
    #[serde(default)]
    index: Option<IndexType>,
}

async fn compile(
    State(app): State<Arc<App>>,
    client: Client,
    ApiJson(body): ApiJson<CompileBody>,
) -> Result<Json<Value>, ApiError> {
    limit(&app.post_limiter, &client, "requests")?;
    app.check_program(&body.program)?;
    let index_type = body.index.unwrap_or_default();
    let program = body.program;
    let out = app
        .compile(move || {
            let start = Instant::now();
            let options = CompileOptions {
                index_type,
                ..CompileOptions::default()
            };
            let result = engine::lower(&program, &options);
            let lower_ms = start.elapsed().as_secs_f64() * 1e3;
            match result {
                Ok(c) => json!({
                    "cuda": c.cuda,
                    "passes": c.passes,
                    "plan": c.plan,
                    "diagnostics": [],
                    "lower_ms": lower_ms,
                }),
                Err(d) => json!({
                    "cuda": null,
                    "passes": [],
                    "plan": null,
                    "diagnostics": d.0,
                    "lower_ms": lower_ms,
                }),
            }
        })
        .await?;
    Ok(Json(out))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InspectBody {
    program: String,
    #[serde(default)]
    sizes: BTreeMap<String, i64>,
    index: Option<IndexType>,
}

/// PTX and SASS of a program (`crate::inspect`), built in a child process.
async fn inspect(
    State(app): State<Arc<App>>,
    client: Client,
    ApiJson(body): ApiJson<InspectBody>,
) -> Result<Json<crate::inspect::Inspection>, ApiError> {
    use crate::inspect::ServiceError;
    limit(&app.post_limiter, &client, "requests")?;
    app.check_program(&body.program)?;
    let _permit = app
        .inspect_slots
        .acquire()
        .await
        .map_err(ApiError::internal)?;
    let request = crate::inspect::InspectRequest {
        file: "playground.hf".into(),
        source: body.program,
        sizes: body.sizes,
        index: body.index,
    };
    crate::inspect::serve(&app.worker_exe, app.inspect_cache.clone(), request)
        .await
        .map(Json)
        .map_err(|e| match e {
            ServiceError::BadRequest {
                message,
                diagnostics,
            } => {
                let e = ApiError::bad_request(message);
                match diagnostics {
                    Some(d) => e.with("diagnostics", d),
                    None => e,
                }
            }
            ServiceError::Unavailable(m) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, m),
            ServiceError::Unprocessable(m) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, m),
            ServiceError::Internal(m) => ApiError::internal(m),
        })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunBody {
    #[serde(default)]
    program: String,
    /// A/B: a second program, run after the first on the same inputs.
    program_b: Option<String>,
    #[serde(default)]
    sizes: BTreeMap<String, i64>,
    iters: Option<u32>,
    warmup: Option<u32>,
    seed: Option<u64>,
    index: Option<IndexType>,
    copy_ceiling: Option<bool>,
    /// Also time the torch twin (eager, torch.compile) interleaved with the kernel.
    peers: Option<bool>,
    /// After the run, profile the kernel with Nsight Compute (`result.profile`).
    profile: Option<bool>,
    /// A name for messages (default `playground.hf`).
    file: Option<String>,
    /// A fault kernel instead of the program (only with `--fault-kernels`).
    fault: Option<Fault>,
}

async fn run(
    State(app): State<Arc<App>>,
    client: Client,
    ApiJson(body): ApiJson<RunBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    limit(&app.run_limiter, &client, "runs")?;
    app.check_program(&body.program)?;
    if let Some(b) = &body.program_b {
        app.check_program(b)?;
    }
    if let Some(reason) = app.run_unavailable() {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, reason));
    }
    let a = &app.args;
    if body.fault.is_some() && !a.fault_kernels {
        return Err(ApiError::bad_request(
            "fault kernels are a device-test hook: start the service with --fault-kernels",
        ));
    }
    if body.fault.is_some() && body.program_b.is_some() {
        return Err(ApiError::bad_request("a fault run takes no program_b"));
    }
    let profile = body.profile.unwrap_or(false);
    if profile && (body.program_b.is_some() || body.fault.is_some()) {
        return Err(ApiError::bad_request(
            "profile takes one program: a run with program_b or a fault kernel cannot be profiled",
        ));
    }
    if body.fault.is_some() && a.fake_worker {
        return Err(ApiError::bad_request("fault kernels need the GPU worker"));
    }
    let file = body
        .file
        .filter(|f| !f.is_empty() && f.len() <= 200)
        .unwrap_or_else(|| "playground.hf".into());
    let request = RunRequest {
        file: file.clone(),
        source: body.program,
        sizes: body.sizes,
        iters: body.iters.unwrap_or(100),
        warmup: body.warmup.unwrap_or(10),
        seed: body.seed.unwrap_or(1),
        index: body.index,
        copy_ceiling: body.copy_ceiling.unwrap_or(true),
        peers: body.peers.unwrap_or(false),
    };
    let request_b = body.program_b.map(|source| RunRequest {
        file: format!("{file} (B)"),
        source,
        ..request.clone()
    });
    let cap = |name: &str, value: u64, min: u64, max: u64| {
        if value < min || value > max {
            Err(ApiError::bad_request(format!(
                "{name} = {value} is outside the limit {min}..={max} (max_{name})"
            ))
            .with("limit", json!(format!("max_{name}")))
            .with("max", json!(max)))
        } else {
            Ok(())
        }
    };
    cap("iters", request.iters as u64, 1, a.max_iters as u64)?;
    cap("warmup", request.warmup as u64, 0, a.max_warmup as u64)?;
    let max_tensor_bytes = a.max_tensor_bytes;
    let fault = body.fault;
    // Each program is compiled once, here, for these sizes; the worker gets the result.
    let checked = {
        let (request, request_b) = (request.clone(), request_b.clone());
        app.compile(move || -> Result<Checked, ApiError> {
            if fault.is_some() {
                let bytes = 4 * crate::faults::elements(&request).max(0) as u64;
                check_bytes(bytes, max_tensor_bytes)?;
                return Ok(Checked::default());
            }
            let (inputs_a, prepared) = check_run(&request, max_tensor_bytes, "")?;
            let mut checked = Checked {
                prepared: Some(prepared),
                ..Checked::default()
            };
            if let Some(b) = &request_b {
                let (inputs_b, prepared_b) = check_run(b, max_tensor_bytes, "program_b: ")?;
                checked.same_inputs = Some(inputs_a == inputs_b);
                checked.prepared_b = Some(prepared_b);
            }
            Ok(checked)
        })
        .await??
    };
    let spec = JobSpec {
        request,
        request_b,
        fault,
        same_inputs: checked.same_inputs,
        profile,
        prepared: checked.prepared,
        prepared_b: checked.prepared_b,
    };
    let job = app.queue.submit(spec, &client.0).map_err(|full| {
        let whose = if full.per_client {
            "you have the most jobs one client may have"
        } else {
            "the queue is full"
        };
        ApiError::too_many(
            format!(
                "{whose} ({} waiting or running); retry in {} s",
                full.cap, full.retry_after_s
            ),
            full.retry_after_s,
        )
        .with(
            "limit",
            json!(if full.per_client {
                "client_queue_cap"
            } else {
                "queue_cap"
            }),
        )
    })?;
    let id = &job.id;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "job_id": id,
            "events": format!("/api/jobs/{id}/events"),
            "result": format!("/api/jobs/{id}"),
        })),
    ))
}

fn check_bytes(total: u64, max_tensor_bytes: u64) -> Result<(), ApiError> {
    if total > max_tensor_bytes {
        return Err(ApiError::bad_request(format!(
            "the tensors need {total} bytes; the limit is {max_tensor_bytes} bytes (max_tensor_bytes)"
        ))
        .with("limit", json!("max_tensor_bytes"))
        .with("max", json!(max_tensor_bytes)));
    }
    Ok(())
}

/// The input tensors and scalars of a run: name, dtype and concrete shape.
type Inputs = Vec<(String, hopfuse::DType, Vec<u64>)>;

/// What the checks of a run found: the programs compiled for its sizes, and for A/B whether
/// both have the same inputs.
#[derive(Default)]
struct Checked {
    prepared: Option<engine::Prepared>,
    prepared_b: Option<engine::Prepared>,
    same_inputs: Option<bool>,
}

/// Everything that can be known before a worker, from one compile of the program for the
/// run's sizes: it compiles (400 with diagnostics), the sizes fit its plan, the tensors fit the
/// byte cap. Returns the run's inputs and the compiled program, which the worker then runs.
fn check_run(
    req: &RunRequest,
    max_tensor_bytes: u64,
    which: &str,
) -> Result<(Inputs, engine::Prepared), ApiError> {
    let (compilation, setup) = engine::compile_for_run(req).map_err(|e| match e {
        engine::PrepareError::Compile(d) => {
            ApiError::bad_request(format!("{which}the program does not compile: {d}").trim_end())
                .with("diagnostics", json!(d.0))
        }
        engine::PrepareError::Sizes(e) => ApiError::bad_request(format!(
            "{which}{}",
            api_wording(&engine::RunError::new(engine::Stage::Sizes, e).to_string())
        )),
    })?;
    let mut total: u64 = 0;
    let mut inputs = Vec::new();
    for p in &compilation.plan.params {
        match p {
            hopfuse::plan::Param::Tensor {
                name,
                dtype,
                role,
                shape,
            } => {
                let n = engine::tensor_elements(shape, &req.sizes).map_err(|e| {
                    ApiError::bad_request(format!("{which}tensor `{name}`: {}", api_wording(&e)))
                })?;
                total = total.saturating_add(n.saturating_mul(dtype.size_bytes() as u64));
                if *role == hopfuse::plan::TensorRole::Input {
                    let dims = shape
                        .iter()
                        .map(|d| d.eval(&req.sizes).unwrap_or(-1) as u64)
                        .collect();
                    inputs.push((name.clone(), *dtype, dims));
                }
            }
            hopfuse::plan::Param::Scalar { name, dtype } => {
                inputs.push((name.clone(), *dtype, vec![]))
            }
            hopfuse::plan::Param::Size { .. } | hopfuse::plan::Param::TensorMap { .. } => {}
        }
    }
    check_bytes(total, max_tensor_bytes)?;
    Ok((inputs, engine::Prepared::new(&compilation, setup)))
}

/// The engine's messages speak of the CLI's `--size`; the API takes `sizes`.
fn api_wording(message: &str) -> String {
    message.replace("(pass it with --size ", "(give it in `sizes`, e.g. ")
}

fn not_found(what: &str, id: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no {what} with id `{id}`"))
}

fn done_json(result: &impl Serialize) -> Value {
    let mut v = serde_json::to_value(result).unwrap_or_default();
    v["done"] = json!(true);
    v
}

async fn job(State(app): State<Arc<App>>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    if let Some(job) = app.queue.get(&id) {
        return Ok(Json(match job.result() {
            Some(r) => done_json(&*r),
            None => {
                let (events, _) = job.subscribe();
                let stage = events.last().map(|e| e.stage).unwrap_or(JobStage::Queued);
                json!({ "job_id": id, "done": false, "stage": stage })
            }
        }));
    }
    match app.store.get_run(&id).await.map_err(ApiError::internal)? {
        Some(rec) => Ok(Json(done_json(&rec.result))),
        None => Err(not_found("job", &id)),
    }
}

fn sse_event(e: &JobEvent) -> Event {
    Event::default()
        .event(e.stage.name())
        .json_data(e)
        .unwrap_or_else(|_| Event::default().event("error").data("unserializable event"))
}

async fn job_events(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>>, ApiError> {
    type Live = Option<broadcast::Receiver<JobEvent>>;
    let (history, live): (Vec<JobEvent>, Live) = match app.queue.get(&id) {
        Some(job) => {
            let (h, rx) = job.subscribe();
            (h, Some(rx))
        }
        None => match app.store.get_run(&id).await.map_err(ApiError::internal)? {
            Some(rec) => (
                vec![JobEvent {
                    stage: JobStage::Done,
                    step: None,
                    position: None,
                    elapsed_ms: 0.0,
                    result: serde_json::from_value(rec.result).ok().map(Arc::new),
                }],
                None,
            ),
            None => return Err(not_found("job", &id)),
        },
    };
    let stream = futures_util::stream::unfold(
        (history.into_iter(), live, false),
        |(mut history, live, finished)| async move {
            if finished {
                return None;
            }
            if let Some(e) = history.next() {
                let fin = e.stage == JobStage::Done;
                return Some((Ok(sse_event(&e)), (history, live, fin)));
            }
            let mut rx = live?;
            loop {
                match rx.recv().await {
                    Ok(e) => {
                        let fin = e.stage == JobStage::Done;
                        return Some((Ok(sse_event(&e)), (history, Some(rx), fin)));
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkBody {
    program: String,
    #[serde(default)]
    state: Value,
}

async fn put_link(
    State(app): State<Arc<App>>,
    client: Client,
    ApiJson(body): ApiJson<LinkBody>,
) -> Result<Json<Value>, ApiError> {
    limit(&app.post_limiter, &client, "requests")?;
    app.check_program(&body.program)?;
    let link = app
        .store
        .put_link(&body.program, &body.state)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(json!({
        "id": link.id,
        "path": format!("/api/links/{}", link.id),
        "created_at": link.created_at,
    })))
}

async fn get_link(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Json<crate::store::Link>, ApiError> {
    if id.len() > 64 {
        return Err(not_found("link", "(too long)"));
    }
    match app.store.get_link(&id).await.map_err(ApiError::internal)? {
        Some(link) => Ok(Json(link)),
        None => Err(not_found("link", &id)),
    }
}

#[derive(Deserialize)]
struct RunsQuery {
    limit: Option<i64>,
}

async fn runs(
    State(app): State<Arc<App>>,
    Query(q): Query<RunsQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = q.limit.unwrap_or(20).clamp(1, 100);
    let runs = app
        .store
        .recent_runs(limit)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(json!({ "runs": runs })))
}

// ---------------------------------------------------------------------------------------------
// Entry point

/// Runs the service until Ctrl-C or SIGTERM.
pub fn main(args: ServeArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let served = runtime.block_on(serve(args));
    // Compiles whose clients went away may still be running on blocking threads (they cannot
    // be interrupted); dropping the runtime would wait for them. Exit without them.
    runtime.shutdown_background();
    served
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let addr = args.addr;
    let app = App::new(args).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr()?;
    // Tests and scripts read this line for the port.
    println!("hopfuse serve: listening on http://{local}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let store = app.store.clone();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let server = axum::serve(
        listener,
        router(app).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(stopped(stop_rx.clone()))
    .into_future();
    // Open event streams would hold a graceful shutdown forever: give them 5 s.
    tokio::select! {
        r = server => r?,
        _ = async {
            stopped(stop_rx).await;
            tokio::time::sleep(Duration::from_secs(5)).await;
        } => warn!("closing connections still open after 5 s"),
    }
    store.close().await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    info!("shutting down");
}
