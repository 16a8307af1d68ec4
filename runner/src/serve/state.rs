//! The service's shared state ([`App`]), built once at start from the options: the store (links
//! and run history), the queue of runs (or the distributed front-end), what the GPU probe found
//! (a `hopfuse worker --probe` child, so a broken driver cannot take the server down), the
//! compile slots with their deadline, the rate limiters and the inspection slots. It also says
//! whether runs are available and why not, and checks a program's size (413).

use super::{default_data_dir, ApiError, ServeArgs};
use crate::compile_slots::{CompileSlots, Refused};
use crate::distributed::frontend::FrontEnd;
use crate::queue::{Queue, QueueConfig};
use crate::rate_limit::ClientRateLimiter;
use crate::store::Store;
pub use crate::worker::GpuStatus;
use crate::worker::{probe_in_child, FakeBehaviour};
use axum::http::StatusCode;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

pub struct App {
    pub(super) args: ServeArgs,
    /// The connections' read timeouts and cap (`connections.rs`).
    pub(super) limits: super::ConnectionLimits,
    pub(super) queue: Arc<Queue>,
    pub(super) store: Store,
    pub(super) gpu: GpuStatus,
    pub(super) compiles: CompileSlots,
    pub(super) run_limiter: ClientRateLimiter,
    pub(super) post_limiter: ClientRateLimiter,
    pub(super) started: Instant,
    /// `hopfuse worker --inspect` runs as this binary; its cache directory.
    pub(super) worker_exe: PathBuf,
    pub(super) inspect_cache: Option<PathBuf>,
    /// Inspection children at once (one per compile slot: each is NVRTC plus nvdisasm).
    pub(super) inspect_slots: Arc<tokio::sync::Semaphore>,
    /// Whether libnvrtc loads on this host (checked once at start): without it
    /// `POST /api/inspect` answers 503 before it compiles anything.
    pub(super) inspect_nvrtc: bool,
    /// The distributed mode's front-end (`--queue`): jobs go to agents.
    pub(super) remote: Option<Arc<FrontEnd>>,
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
            .map_err(|e| anyhow::anyhow!("cannot open the database {db}: {e}"))?
            .with_link_quota(args.link_quota())
            .with_backlog_limit(args.run_backlog);
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
                gpus: 0,
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
                gpus: 0,
            }
        } else {
            probe_in_child(&worker_exe).await
        };
        // What Run does here, said once at start (scripts/run.sh leaves it to this line).
        let why = |reason: &Option<String>| reason.clone().unwrap_or_else(|| "unknown".into());
        match &gpu.gpu {
            _ if args.nats.queue.is_some() => info!("runs: {}", why(&gpu.reason)),
            _ if args.fake_worker => warn!(
                "fake worker (--fake-worker): Run works but only compiles and checks programs; \
                 nothing is executed or measured"
            ),
            Some(g) if gpu.nvrtc.is_none() => warn!(
                "compile-only: GPU {}, but no NVRTC for runs ({}); Run answers 503 with the \
                 reason, which the page shows",
                g.name,
                why(&gpu.nvrtc_reason)
            ),
            Some(g) => info!("runs on GPU {} ({} SMs)", g.name, g.sm_count),
            None => warn!(
                "compile-only: no usable GPU ({}); the page compiles, Run answers 503 with the \
                 reason, which the page shows",
                why(&gpu.reason)
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
        if !(args.tune_budget.is_finite() && args.tune_budget > 0.0) {
            anyhow::bail!("--tune-budget must be a positive number of seconds");
        }
        let inspect_cache = (!args.no_cubin_cache).then(|| data_dir.join("inspect"));
        let queue = Queue::start(
            QueueConfig {
                worker_exe: worker_exe.clone(),
                worker_args,
                timeout: Duration::from_secs_f64(args.job_timeout),
                cap: args.queue_cap,
                client_cap: args.client_queue_cap,
                gpus: gpu.gpus_to_use(args.gpus),
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
        // dlopen only (no NVRTC call): whether the inspect children can build anything.
        let inspect_nvrtc = tokio::task::spawn_blocking(crate::nvrtc::available)
            .await
            .unwrap_or(false);
        Ok(Arc::new(App {
            limits: args.connection_limits()?,
            inspect_nvrtc,
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

    pub(super) fn run_unavailable(&self) -> Option<String> {
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
    pub(super) async fn compile<T: Send + 'static>(
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

    /// 413 for a program over `--max-program-bytes`.
    pub(super) fn check_program(&self, program: &str) -> Result<(), ApiError> {
        crate::run_checks::check_program(program, self.args.max_program_bytes)
    }
}
