//! `hopfuse serve`'s options ([`ServeArgs`], clap) and the data directory they default to.
//! Split from `serve.rs` without change.

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
