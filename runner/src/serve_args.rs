//! `hopfuse serve`'s options ([`ServeArgs`], clap) and the data directory they default to.
//! Split from `serve.rs` without change; the distributed mode's NATS options ([`NatsArgs`],
//! shared with `hopfuse agent`, used by `crate::distributed`) are here too, and the connection
//! limits they give ([`ConnectionLimits`], which `serve::connections` enforces).

use crate::worker::FakeBehaviour;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Finished runs kept in memory while the database does not answer, written once it does;
    /// past it the oldest waiting run is dropped from the history (GET /api/health:
    /// run_backlog).
    #[arg(long, default_value_t = crate::store::BACKLOG_RUNS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub run_backlog: usize,
    /// Wall-clock limit of one job in seconds; the worker is killed (SIGKILL) past it.
    #[arg(long, default_value_t = 10.0)]
    pub job_timeout: f64,
    /// Seconds of search of one tune job (`POST /api/tune`): its default and its maximum. No
    /// candidate starts after it; each runs within --job-timeout.
    #[arg(long, default_value_t = 60.0)]
    pub tune_budget: f64,
    /// Jobs waiting or running at most; more get 429.
    #[arg(long, default_value_t = 64)]
    pub queue_cap: usize,
    /// Jobs one client (IP address) may have waiting or running; more get 429 (0: no limit).
    #[arg(long, default_value_t = 16)]
    pub client_queue_cap: usize,
    /// GPUs to run on, one job at a time on each [default: every GPU the startup probe sees,
    /// `CUDA_VISIBLE_DEVICES` applied].
    #[arg(long)]
    pub gpus: Option<usize>,
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
    /// Bytes of new links (program and state text) one client may add within an hour; 429
    /// past it (0: no limit). A link already stored costs nothing.
    #[arg(long, default_value_t = 16 << 20)]
    pub link_bytes_per_client: u64,
    /// Bytes of all links together; 507 past it (0: no limit).
    #[arg(long, default_value_t = 1 << 30)]
    pub max_link_bytes: u64,
    /// Seconds a connection may take to send a request's headers, counted from when it opens
    /// or its previous response went out (an idle keep-alive connection too); past it the
    /// connection is closed.
    #[arg(long, default_value_t = 10.0)]
    pub header_timeout: f64,
    /// Seconds a request may take to send its whole body (408 past it, and the connection is
    /// closed).
    #[arg(long, default_value_t = 30.0)]
    pub body_timeout: f64,
    /// Connections open at once; past it a new connection gets a 503 and is closed [default:
    /// half the open-files limit, between 16 and 4096].
    #[arg(long)]
    pub max_connections: Option<usize>,
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
    /// The distributed mode (`--queue nats://...`: jobs to `hopfuse agent`s).
    #[command(flatten)]
    pub nats: NatsArgs,
}

impl ServeArgs {
    /// `--header-timeout`, `--body-timeout` and `--max-connections`, checked.
    pub fn connection_limits(&self) -> anyhow::Result<ConnectionLimits> {
        let seconds = |value: f64, flag: &str| {
            Duration::try_from_secs_f64(value)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| anyhow::anyhow!("{flag} must be a positive number of seconds"))
        };
        Ok(ConnectionLimits {
            header_timeout: seconds(self.header_timeout, "--header-timeout")?,
            body_timeout: seconds(self.body_timeout, "--body-timeout")?,
            max_connections: self
                .max_connections
                .unwrap_or_else(default_max_connections)
                .max(1),
        })
    }

    /// The links' quota from `--link-bytes-per-client` and `--max-link-bytes`.
    pub fn link_quota(&self) -> crate::store::LinkQuota {
        crate::store::LinkQuota {
            per_client: Some(self.link_bytes_per_client).filter(|&b| b > 0),
            total: Some(self.max_link_bytes).filter(|&b| b > 0),
        }
    }

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

/// The architecture hopfuse compiles for.
pub const DEFAULT_ARCH: &str = "sm_90a";

/// How to reach NATS (`hopfuse serve` and `hopfuse agent`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct NatsArgs {
    /// Distributed mode: NATS server(s) with JetStream, `nats://HOST:PORT` (several separated
    /// by commas). Jobs go to `hopfuse agent`s on GPU hosts instead of local workers.
    #[arg(long = "queue", env = "HOPFUSE_QUEUE")]
    pub queue: Option<String>,
    /// Token for NATS (`authorization { token: ... }` in the server's configuration).
    #[arg(long, env = "HOPFUSE_NATS_TOKEN", hide_env_values = true)]
    pub nats_token: Option<String>,
    /// NATS credentials file (`.creds`: a user JWT and its NKey seed).
    #[arg(long, env = "HOPFUSE_NATS_CREDS")]
    pub nats_creds: Option<PathBuf>,
    /// GPU architecture of the jobs (front-end) or of this host (agent): the subject
    /// `hopfuse.jobs.ARCH` and the agents' consumer.
    #[arg(long, default_value = DEFAULT_ARCH)]
    pub arch: String,
}

impl NatsArgs {
    /// The servers to show in `/api/health` and logs (without any user or password in them).
    pub fn display_url(&self) -> String {
        let url = self.queue.as_deref().unwrap_or("");
        url.split(',')
            .map(|u| match (u.find("://"), u.rfind('@')) {
                (Some(scheme), Some(at)) if at > scheme => {
                    format!("{}{}", &u[..scheme + 3], &u[at + 1..])
                }
                _ => u.to_string(),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// What a connection may take (`hopfuse serve --header-timeout`, `--body-timeout`,
/// `--max-connections`; docs/deploy.md).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConnectionLimits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub max_connections: usize,
}

/// The default of `--max-connections`: half the soft open-files limit (the other half for the
/// database, the workers' pipes, the caches), between 16 and 4096.
pub fn default_max_connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    };
    (soft / 2).clamp(16, 4096)
}
