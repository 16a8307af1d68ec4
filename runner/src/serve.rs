//! `hopfuse serve`: the playground's static files and the HTTP API (see `docs/api.md`).
//!
//! Compiles run in the server (a blocking thread per request in a compile slot, as many at
//! once as there are cores, each request within a deadline: `compile_slots.rs`); runs go
//! through the [`Queue`] to warm `hopfuse worker --serve` child processes. Every error is a
//! JSON `{"error": ...}` with a 4xx/5xx status.

use crate::compile_slots::{CompileSlots, Refused};
use crate::distributed::frontend::{FrontEnd, SubmitError};
use crate::engine::{self, RunRequest};
use crate::gpu::DeviceInfo;
use crate::queue::{JobEvent, JobSpec, JobStage, Queue, QueueConfig};
use crate::rate_limit::ClientRateLimiter;
use crate::store::Store;
use crate::worker::FakeBehaviour;
// The service's parts in their own modules (split from this file without change); re-exported
// where they were public here.
pub use crate::api_error::ApiError;
use crate::run_checks::{check_bytes, check_run, Checked};
pub use crate::serve_args::{default_data_dir, ServeArgs};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use hopfuse::CompileOptions;
use hopfuse_api::inspect::InspectBody;
use hopfuse_api::service::{
    CompileAnswer, CompileBody, CompileStats, Health, JobPending, Limits, LinkBody, LinkCreated,
    PassIr, RunAccepted, RunBody, Runs,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
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
    /// The distributed mode's front-end (`--queue`): jobs go to agents.
    remote: Option<Arc<FrontEnd>>,
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
        let gpu = if args.nats.queue.is_some() {
            GpuStatus {
                gpu: None,
                reason: Some(format!(
                    "distributed mode: runs go to hopfuse agents through NATS JetStream at {}",
                    args.nats.display_url()
                )),
                nvrtc: None,
                nvrtc_reason: None,
            }
        } else if args.fake_worker {
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
                prespawn: args.nats.queue.is_none() && (args.fake_worker || gpu.gpu.is_some()),
                remote: args.nats.queue.is_some(),
            },
            Some(store.clone()),
        );
        let remote = match &args.nats.queue {
            Some(_) => Some(FrontEnd::start(&args.nats, queue.clone(), args.queue_cap).await?),
            None => None,
        };
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
            remote,
        }))
    }

    fn run_unavailable(&self) -> Option<String> {
        if self.args.fake_worker || self.remote.is_some() {
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
                .limit("compile_timeout_s")
                .retry_after(deadline.as_secs().max(1)),
                Refused::Deadline { deadline } => ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!(
                        "compiling this program took longer than the deadline of {} s \
                     (compile_timeout_s)",
                        deadline.as_secs_f64()
                    ),
                )
                .limit("compile_timeout_s")
                .max_seconds(deadline.as_secs_f64()),
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
            .limit("max_program_bytes")
            .max(max));
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
                .limit("max_body_bytes")
                .max(max)
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

async fn health(State(app): State<Arc<App>>) -> Json<Health> {
    let a = &app.args;
    let distributed = match &app.remote {
        Some(remote) => Some(remote.health().await),
        None => None,
    };
    Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        worker: if app.remote.is_some() {
            "agents"
        } else if a.fake_worker {
            "fake"
        } else {
            "gpu"
        }
        .into(),
        gpu: app.gpu.gpu.clone(),
        gpu_reason: app.gpu.reason.clone(),
        nvrtc: app.gpu.nvrtc.clone(),
        run_available: app.run_unavailable().is_none(),
        run_unavailable_reason: app.run_unavailable(),
        queue: app.queue.stats(),
        distributed,
        compiles: CompileStats {
            running: app.compiles.running(),
            slots: app.compiles.total(),
            lowered: engine::lowerings(),
        },
        limits: Limits {
            max_body_bytes: a.max_body_bytes,
            max_program_bytes: a.max_program_bytes,
            max_iters: a.max_iters,
            max_warmup: a.max_warmup,
            max_tensor_bytes: a.max_tensor_bytes,
            queue_cap: a.queue_cap,
            client_queue_cap: a.client_queue_cap,
            runs_per_minute: a.runs_per_minute,
            requests_per_minute: a.requests_per_minute,
            job_timeout_s: a.job_timeout,
            compile_timeout_s: a.compile_timeout,
            keep_runs: a.keep_runs,
            keep_runs_days: a.keep_runs_days,
            keep_runs_bytes: a.keep_runs_bytes,
            token_required: a.token.is_some(),
        },
        uptime_s: app.started.elapsed().as_secs_f64(),
    })
}

async fn compile(
    State(app): State<Arc<App>>,
    client: Client,
    ApiJson(body): ApiJson<CompileBody>,
) -> Result<Json<CompileAnswer>, ApiError> {
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
                Ok(c) => CompileAnswer {
                    passes: c.passes.iter().map(PassIr::from).collect(),
                    cuda: Some(c.cuda),
                    plan: Some(c.plan),
                    diagnostics: vec![],
                    lower_ms,
                },
                Err(d) => CompileAnswer {
                    cuda: None,
                    passes: vec![],
                    plan: None,
                    diagnostics: d.0,
                    lower_ms,
                },
            }
        })
        .await?;
    Ok(Json(out))
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
                    Some(d) => e.diagnostics(d),
                    None => e,
                }
            }
            ServiceError::Unavailable(m) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, m),
            ServiceError::Unprocessable(m) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, m),
            ServiceError::Internal(m) => ApiError::internal(m),
        })
}

async fn run(
    State(app): State<Arc<App>>,
    client: Client,
    ApiJson(body): ApiJson<RunBody>,
) -> Result<(StatusCode, Json<RunAccepted>), ApiError> {
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
            .limit(format!("max_{name}"))
            .max(max))
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
    let submitted = match &app.remote {
        Some(remote) => remote.submit(spec, &client.0).await,
        None => app.queue.submit(spec, &client.0).map_err(SubmitError::Full),
    };
    let job = submitted?;
    let id = &job.id;
    Ok((
        StatusCode::ACCEPTED,
        Json(RunAccepted {
            job_id: id.clone(),
            events: format!("/api/jobs/{id}/events"),
            result: format!("/api/jobs/{id}"),
        }),
    ))
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
                serde_json::to_value(JobPending {
                    job_id: id.clone(),
                    done: false,
                    stage,
                })
                .map_err(ApiError::internal)?
            }
        }));
    }
    match app.store.get_run(&id).await.map_err(ApiError::internal)? {
        Some(rec) => Ok(Json(done_json(&rec.result))),
        None => match remote_result(&app, &id).await {
            Some(r) => Ok(Json(done_json(&r))),
            None => Err(not_found("job", &id)),
        },
    }
}

/// A job another front-end of the distributed mode ran (or this one before a restart), from
/// the results bucket.
async fn remote_result(app: &App, id: &str) -> Option<crate::queue::JobResult> {
    app.remote.as_ref()?.stored_result(id).await
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
            None => match remote_result(&app, &id).await {
                Some(r) => (
                    vec![JobEvent {
                        stage: JobStage::Done,
                        step: None,
                        position: None,
                        elapsed_ms: 0.0,
                        result: Some(Arc::new(r)),
                    }],
                    None,
                ),
                None => return Err(not_found("job", &id)),
            },
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

async fn put_link(
    State(app): State<Arc<App>>,
    client: Client,
    ApiJson(body): ApiJson<LinkBody>,
) -> Result<Json<LinkCreated>, ApiError> {
    limit(&app.post_limiter, &client, "requests")?;
    app.check_program(&body.program)?;
    let link = app
        .store
        .put_link(&body.program, &body.state)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(LinkCreated {
        path: format!("/api/links/{}", link.id),
        id: link.id,
        created_at: link.created_at,
    }))
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
) -> Result<Json<Runs>, ApiError> {
    let limit = q.limit.unwrap_or(20).clamp(1, 100);
    let runs = app
        .store
        .recent_runs(limit)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(Runs { runs }))
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
    // Without it a response written in two pieces waits for the client's delayed ACK (about
    // 40 ms on Linux) before its second piece goes out.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            warn!("cannot set TCP_NODELAY on a connection: {e}");
        }
    });
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
