//! What the Run pane shows of a job result: a [`RunView`] per program (status, message, error,
//! the worker's steps), with a [`Measured`] run (time, rates, ceilings, [`Check`]s, resources,
//! peers and profile) or what the fake worker checked ([`FakeView`], never a number), a fusion
//! run as several kernels ([`KernelsView`], a row per kernel), and an A/B job's [`Comparison`].
//! Plain data, filled by `result.rs`.

use hopfuse::IndexType;
use hopfuse_api as api;

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
    /// A fusion that would run as several kernels: each as compiled (no times).
    pub kernels: Option<KernelsView>,
}

/// A fusion run as several kernels in order (no scheduler takes it whole): why, one row per
/// kernel, and the tensors between them.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct KernelsView {
    pub reason: String,
    pub rows: Vec<KernelRow>,
    /// Each intermediate in words: `y_sum: f32, 32.0 KiB`.
    pub intermediates: Vec<String>,
}

/// One kernel of a split fusion: what it is and, when measured, its time alone and, when the
/// run asked for one, its Nsight Compute profile or why it has none.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct KernelRow {
    pub kernel: String,
    pub scheduler: String,
    /// Why its segment ends where it does.
    pub reason: String,
    pub launch: String,
    pub median_us: Option<f64>,
    pub gbps: Option<f64>,
    /// `segments.kernels[].profile` (`profile_view.rs` draws it); the fake worker's only ever
    /// says why there is none (the kernel never ran).
    pub profile: Option<api::profile::ProfileReport>,
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
    /// `profile_view.rs`). A split fusion's profiles are its kernels' ([`KernelRow::profile`]).
    pub profile: Option<api::profile::ProfileReport>,
    /// How many waves the grid takes on this GPU, in words (`RunResult::residency`).
    pub waves: Option<String>,
    /// What the runner warns about (a persistent grid past one wave).
    pub warnings: Vec<String>,
    /// A fusion run as several kernels: each timed alone (`result.segments`); the times above
    /// are of all of them launched in order.
    pub kernels: Option<KernelsView>,
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
    /// Kernels per launch of A and of B when either is a fusion split into several.
    pub kernels: Option<(usize, usize)>,
}

impl Comparison {
    /// The ratio in words: `B/A = 0.930 (0.900–0.970 over 100 pairs): B is 7.0% faster`, with
    /// ` (3 kernels per launch of A, 1 kernel of B)` when either side is a split fusion.
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
        let kernels = match self.kernels {
            Some((a, b)) => format!(" ({} per launch of A, {} of B)", count(a), count(b)),
            None => String::new(),
        };
        format!("B/A = {:.3}{spread}: B is {verdict}{kernels}", self.median)
    }
}

/// `1 kernel`, `3 kernels`.
fn count(kernels: usize) -> String {
    match kernels {
        1 => "1 kernel".to_string(),
        n => format!("{n} kernels"),
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
