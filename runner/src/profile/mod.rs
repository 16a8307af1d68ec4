//! Profiles a run's kernel with Nsight Compute (`ncu`) on the GPU host: DRAM throughput, L2 hit
//! rate, SM and tensor-pipe utilisation, achieved occupancy, the top warp-stall reasons and
//! shared-memory bank conflicts, plus a roofline point against the ceilings the run measured.
//!
//! `ncu` profiles a process, so the kernel is run again in a child: `ncu --export REPORT ...
//! hopfuse run FILE --size ... --iters 1 --warmup 0 --no-ceiling`, restricted to the program's
//! kernel (`--kernel-name`, the first launch: the validated one), with the sections that hold
//! those metrics and the few metrics read here named outright ([`METRICS`]; an ncu that does
//! not know one of them, or one of the sections, is asked again without them, within the same
//! time limit). The report is then read back as its raw page ([`raw_page`]). ncu and the
//! profiled run are a process group of their own, killed as a whole past the wall-clock limit;
//! ncu also dies with its parent. In the service's worker the limit ends before the job's own
//! (the service would kill the worker, not the group), see [`ProfileLimits`]. A host without `ncu`
//! or without permission for the GPU's performance counters (`ERR_NVGPUCTRPERM`) says so.
//!
//! Used by `hopfuse run --profile` and by the service's worker for a run with `"profile":
//! true` ([`profile_program`]); either way the answer is a [`ProfileReport`] in
//! `result.profile` (types in [`report`]: `hopfuse_api::profile`, shared with the playground).

pub mod raw_page;
pub mod tensor_roof;
// The report's types and its SVG are wire data, defined in `hopfuse-api` (the playground draws
// the same report with the same code).
pub use hopfuse_api::profile as report;

use crate::engine::{CopyCeiling, RunResult};
use hopfuse::IndexType;
pub use raw_page::parse_raw_csv;
pub use report::{Profile, ProfileReport, Roofline, Stall, Unavailable};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
pub use tensor_roof::TensorRoof;

/// Environment variable naming the `ncu` executable.
pub const NCU_ENV: &str = "HOPFUSE_NCU";

/// The ncu sections that hold the metrics read here.
pub const SECTIONS: [&str; 7] = [
    "SpeedOfLight",
    "SpeedOfLight_RooflineChart",
    "MemoryWorkloadAnalysis",
    "MemoryWorkloadAnalysis_Tables",
    "Occupancy",
    "WarpStateStats",
    "ComputeWorkloadAnalysis",
];

/// Metrics read here, named outright besides the sections (a section may collect only a rate of
/// them, e.g. the roofline's FP instruction counts per cycle).
pub const METRICS: [&str; 15] = [
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "smsp__average_warp_latency_per_inst_issued.ratio",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum",
];

/// The sections every ncu of the last years has; used again when one of [`SECTIONS`] is not
/// known to this ncu (the roofline FLOP counts and bank-conflict tables are then missing).
pub const CORE_SECTIONS: [&str; 5] = [
    "SpeedOfLight",
    "MemoryWorkloadAnalysis",
    "Occupancy",
    "WarpStateStats",
    "ComputeWorkloadAnalysis",
];

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// A run that cannot be profiled as asked (the request's own fault).
    #[error("{0}")]
    Request(String),
    #[error(
        "Nsight Compute (ncu) not found: set {NCU_ENV}, put ncu on PATH, or install a CUDA \
         toolkit with it (/usr/local/cuda/bin/ncu)"
    )]
    NoNcu,
    #[error(
        "ncu may not read the GPU's performance counters on this host (ERR_NVGPUCTRPERM): run \
         as root or set the driver option NVreg_RestrictProfilingToAdminUsers=0"
    )]
    NoPermission,
    #[error("ncu did not finish in {0} s (killed)")]
    TimedOut(f64),
    /// The run took the job's time: nothing was left for ncu.
    #[error("no profile: the run took the job's time limit, none was left for ncu")]
    NoTimeLeft,
    #[error("ncu profiled no launch of {kernel}:\n{log}")]
    NoKernel { kernel: String, log: String },
    #[error("ncu failed: {0}")]
    Failed(String),
}

/// What to profile: a program file and its sizes, as `hopfuse run` takes them.
#[derive(Clone, Debug)]
pub struct ProfileRequest {
    pub file: PathBuf,
    pub sizes: BTreeMap<String, i64>,
    pub seed: u64,
    /// `--index` of the run (none: as the run picks).
    pub index: Option<String>,
    /// The run's packed-document inputs (`--documents`), so the kernel profiled reads the
    /// run's inputs.
    pub documents: BTreeMap<String, std::num::NonZeroU32>,
    pub kernel: String,
    pub time_limit: Duration,
    /// Where to keep ncu's raw page (CSV), e.g. to record it as a test fixture.
    pub keep_csv: Option<PathBuf>,
}

/// ncu's time limits in a worker job (`WorkerJob::profile_limits`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileLimits {
    /// Seconds ncu may take, all attempts together (killed past it).
    pub time_limit_s: f64,
    /// The whole job's wall-clock limit as the service enforces it (by killing the worker):
    /// the profile is given at most what is left of it, less [`JOB_MARGIN`], so ncu's group
    /// is always killed by the profile's own limit first and nothing outlives the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_limit_s: Option<f64>,
}

/// What a profile leaves of its job's limit (for the worker to report and exit normally).
pub const JOB_MARGIN: Duration = Duration::from_secs(5);

/// Seconds ncu may take when nothing says otherwise (`hopfuse run --profile-timeout`, a
/// worker job without limits).
pub const DEFAULT_TIME_LIMIT_S: f64 = 300.0;

impl Default for ProfileLimits {
    fn default() -> ProfileLimits {
        ProfileLimits {
            time_limit_s: DEFAULT_TIME_LIMIT_S,
            job_limit_s: None,
        }
    }
}

impl ProfileLimits {
    /// The profile's limit for a job that has run for `elapsed` (zero: no time left).
    pub fn limit_after(&self, elapsed: Duration) -> Duration {
        let own = Duration::try_from_secs_f64(self.time_limit_s).unwrap_or(Duration::ZERO);
        match self
            .job_limit_s
            .and_then(|j| Duration::try_from_secs_f64(j).ok())
        {
            Some(job) => own.min(job.saturating_sub(elapsed).saturating_sub(JOB_MARGIN)),
            None => own,
        }
    }
}

impl ProfileError {
    /// The reason as the report names it.
    pub fn unavailable(&self) -> Unavailable {
        match self {
            ProfileError::NoNcu => Unavailable::NoNcu,
            ProfileError::NoPermission => Unavailable::NoPermission,
            ProfileError::TimedOut(_) | ProfileError::NoTimeLeft => Unavailable::TimedOut,
            ProfileError::NoKernel { .. } => Unavailable::NoKernel,
            ProfileError::Failed(_) | ProfileError::Request(_) => Unavailable::Failed,
        }
    }
}

/// `$HOPFUSE_NCU`, else `ncu` on PATH, in `$CUDA_HOME/bin` or `/usr/local/cuda/bin`.
pub fn find_ncu() -> Result<PathBuf, ProfileError> {
    if let Some(p) = std::env::var_os(NCU_ENV).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(ProfileError::NoNcu)
        };
    }
    let path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    path.into_iter()
        .chain(
            std::env::var_os("CUDA_HOME")
                .filter(|v| !v.is_empty())
                .map(|v| PathBuf::from(v).join("bin")),
        )
        .chain(std::iter::once(PathBuf::from("/usr/local/cuda/bin")))
        .map(|d| d.join("ncu"))
        .find(|p| p.is_file())
        .ok_or(ProfileError::NoNcu)
}

/// The arguments of the profiling child: ncu, its options, then this binary's `run`.
pub fn ncu_args(
    req: &ProfileRequest,
    exe: &Path,
    report: &Path,
    sections: &[&str],
    metrics: &[&str],
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "--export".into(),
        report.display().to_string(),
        "--force-overwrite".into(),
        "--target-processes".into(),
        "all".into(),
        "--kernel-name".into(),
        req.kernel.clone(),
        "--launch-count".into(),
        "1".into(),
    ];
    for s in sections {
        a.push("--section".into());
        a.push(s.to_string());
    }
    if !metrics.is_empty() {
        a.push("--metrics".into());
        a.push(metrics.join(","));
    }
    let sizes: Vec<String> = req.sizes.iter().map(|(k, v)| format!("{k}={v}")).collect();
    a.extend([
        exe.display().to_string(),
        "run".into(),
        req.file.display().to_string(),
        "--size".into(),
        sizes.join(","),
        "--iters".into(),
        "1".into(),
        "--warmup".into(),
        "0".into(),
        "--seed".into(),
        req.seed.to_string(),
        "--no-ceiling".into(),
    ]);
    if let Some(i) = &req.index {
        a.extend(["--index".into(), i.clone()]);
    }
    for value in crate::documents::flag_values(&req.documents) {
        a.extend(["--documents".into(), value]);
    }
    a
}

/// Runs `cmd` in its own process group, which dies with this process; kills the group past
/// `deadline`. Returns whether it succeeded, and its stdout + stderr.
fn run_limited(mut cmd: Command, deadline: Instant) -> Result<(bool, String), ProfileError> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: the closure only calls prctl, which is async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| ProfileError::Failed(format!("cannot start ncu: {e}")))?;
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let reader_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() > deadline => {
                // SAFETY: signals the process group this function created.
                unsafe { libc::killpg(child.id() as libc::pid_t, libc::SIGKILL) };
                let _ = child.wait();
                return Err(ProfileError::TimedOut(0.0));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(ProfileError::Failed(format!("waiting for ncu: {e}"))),
        }
    };
    let text = reader.join().unwrap_or_default() + &reader_err.join().unwrap_or_default();
    Ok((status.success(), text))
}

/// Whether a failed ncu run says it does not know a metric or section it was asked for (then
/// it is asked again with fewer).
fn unknown_name(log: &str) -> bool {
    let l = log.to_ascii_lowercase();
    !log.contains("ERR_NVGPUCTRPERM") && (l.contains("metric") || l.contains("section"))
}

/// Profiles the request's kernel (`exe` is this binary): every attempt together within
/// `req.time_limit`.
pub fn profile(req: &ProfileRequest, exe: &Path) -> Result<Profile, ProfileError> {
    profile_with(&find_ncu()?, req, exe)
}

/// [`profile`] with this `ncu`.
pub fn profile_with(ncu: &Path, req: &ProfileRequest, exe: &Path) -> Result<Profile, ProfileError> {
    let deadline = Instant::now() + req.time_limit;
    let timed_out = |e: ProfileError| match e {
        ProfileError::TimedOut(_) => ProfileError::TimedOut(req.time_limit.as_secs_f64()),
        e => e,
    };
    let version = Command::new(ncu)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .last()
                .map(|l| l.trim().to_string())
        })
        .unwrap_or_default();
    let dir = tempdir("report")?;
    let report = dir.join("report");
    // Everything, then the sections alone, then the core sections.
    let attempts: [(&[&str], &[&str]); 3] = [
        (&SECTIONS, &METRICS),
        (&SECTIONS, &[]),
        (&CORE_SECTIONS, &[]),
    ];
    let mut last = (false, String::new());
    for (sections, metrics) in attempts {
        let mut cmd = Command::new(ncu);
        cmd.args(ncu_args(req, exe, &report, sections, metrics));
        last = run_limited(cmd, deadline).map_err(timed_out)?;
        if last.0 || !unknown_name(&last.1) {
            break;
        }
    }
    let (ok, log) = last;
    check_log(&log, &req.kernel, ok)?;
    let mut cmd = Command::new(ncu);
    cmd.arg("--import")
        .arg(report.with_extension("ncu-rep"))
        .args(["--csv", "--page", "raw", "--print-units", "base"]);
    let (ok, csv) = run_limited(cmd, deadline).map_err(timed_out)?;
    let _ = std::fs::remove_dir_all(&dir);
    if !ok {
        return Err(ProfileError::Failed(tail(&csv)));
    }
    if let Some(path) = &req.keep_csv {
        std::fs::write(path, &csv)
            .map_err(|e| ProfileError::Failed(format!("cannot write {}: {e}", path.display())))?;
    }
    let mut p = parse_raw_csv(&csv, &req.kernel)?;
    p.ncu = version;
    Ok(p)
}

/// A fresh private directory for one profile.
fn tempdir(what: &str) -> Result<PathBuf, ProfileError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "hopfuse-profile-{}-{}-{what}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)
        .map_err(|e| ProfileError::Failed(format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}

/// The profile of a run's kernel as its report: the metrics and the roofline against the run's
/// ceilings (`copy`: the run's, or the one its worker measured at start; the tensor-core roof:
/// cuBLAS on the run's shape for a matrix product, else `tensor`), or why there is none.
pub fn report(
    profiled: Result<Profile, ProfileError>,
    result: &RunResult,
    copy: Option<&CopyCeiling>,
    tensor: Option<&TensorRoof>,
) -> ProfileReport {
    let cublas = result.cublas.as_ref().map(|c| {
        (
            c.tflops * 1e12,
            format!("{} (this product's shape)", c.call),
        )
    });
    let tensor = cublas.or_else(|| tensor.map(|t| (t.flops_per_s, t.call.clone())));
    kernel_report(
        profiled,
        result.flops,
        result.timing.median_us * 1e-6,
        copy,
        tensor,
    )
}

/// One kernel's profile as its report: the roofline point is `flops` (none: ncu's count) over
/// `seconds` against `copy` and `tensor` (the roof and what measured it).
fn kernel_report(
    profiled: Result<Profile, ProfileError>,
    flops: Option<f64>,
    seconds: f64,
    copy: Option<&CopyCeiling>,
    tensor: Option<(f64, String)>,
) -> ProfileReport {
    match profiled {
        Ok(p) => {
            let roofline = Roofline::new(
                &p,
                flops,
                seconds,
                copy.map(|c| c.gbps * 1e9),
                tensor.as_ref().map(|t| t.0),
            );
            let (roofline, roofline_missing) = match roofline {
                Ok(r) => (
                    Some(Roofline {
                        tensor_ceiling: tensor.map(|t| t.1),
                        ..r
                    }),
                    None,
                ),
                Err(why) => (None, Some(why)),
            };
            ProfileReport::Measured {
                profile: Box::new(p),
                roofline,
                roofline_missing,
            }
        }
        Err(e) => unavailable(&e),
    }
}

/// Profiles each kernel of a fusion run as several kernels (`result.segments`), one after the
/// other, each `hopfuse run FILE` under ncu restricted to that kernel, all within
/// `request.time_limit`, into its segment's `profile` (each roofline point is that kernel's own
/// time against `copy` and, when some kernel was profiled, the tensor-core roof `tensor()`
/// gives). Does nothing for a run of one kernel. `request` is [`request_for`]'s; a kept raw
/// page is written per kernel, at its path with `.KERNEL` added.
pub fn profile_segments(
    result: &mut RunResult,
    request: &ProfileRequest,
    exe: &Path,
    copy: Option<&CopyCeiling>,
    tensor: &mut dyn FnMut() -> Option<TensorRoof>,
) {
    profile_segments_with(result, request, copy, tensor, &mut |req| profile(req, exe));
}

/// [`profile_segments`] with `profile_one` profiling each kernel's request.
fn profile_segments_with(
    result: &mut RunResult,
    request: &ProfileRequest,
    copy: Option<&CopyCeiling>,
    tensor: &mut dyn FnMut() -> Option<TensorRoof>,
    profile_one: &mut dyn FnMut(&ProfileRequest) -> Result<Profile, ProfileError>,
) {
    let Some(segments) = result.segments.as_mut() else {
        return;
    };
    let deadline = Instant::now() + request.time_limit;
    let profiled: Vec<Result<Profile, ProfileError>> = segments
        .kernels
        .iter()
        .map(|k| {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ProfileError::NoTimeLeft);
            }
            profile_one(&ProfileRequest {
                kernel: k.kernel.clone(),
                time_limit: left,
                keep_csv: request
                    .keep_csv
                    .as_ref()
                    .map(|p| PathBuf::from(format!("{}.{}", p.display(), k.kernel))),
                ..request.clone()
            })
        })
        .collect();
    let roof = if profiled.iter().any(Result::is_ok) {
        tensor()
    } else {
        None
    };
    for (k, p) in segments.kernels.iter_mut().zip(profiled) {
        k.profile = Some(segment_report(p, k, copy, roof.as_ref()));
    }
}

/// One kernel of a split run's profile as its report (what [`profile_segments`] puts in its
/// `profile`): the roofline point is ncu's FLOP count over that kernel's own median time alone,
/// against `copy` and `tensor`.
pub fn segment_report(
    profiled: Result<Profile, ProfileError>,
    segment: &hopfuse_api::run::SegmentRun,
    copy: Option<&CopyCeiling>,
    tensor: Option<&TensorRoof>,
) -> ProfileReport {
    kernel_report(
        profiled,
        None,
        segment.timing.median_us * 1e-6,
        copy,
        tensor.map(|t| (t.flops_per_s, t.call.clone())),
    )
}

/// The request that profiles `result`'s kernel again from `file` (same sizes, seed, index,
/// packed-document inputs).
pub fn request_for(
    file: PathBuf,
    result: &RunResult,
    time_limit: Duration,
    keep_csv: Option<PathBuf>,
) -> ProfileRequest {
    ProfileRequest {
        file,
        sizes: result.sizes.clone(),
        seed: result.seed,
        // The same kernel as the run: its index type.
        index: Some(
            match result.index_type {
                IndexType::I32 => "i32",
                IndexType::I64 => "i64",
            }
            .into(),
        ),
        documents: result.documents.clone(),
        kernel: result.kernel.clone(),
        time_limit,
        keep_csv,
    }
}

/// The tensor-core roof of `dev`, measured the first time this process asks ([`tensor_roof`]);
/// None when it cannot be (no cuBLAS, ...), with the reason logged.
pub fn tensor_roof_once(dev: &crate::engine::Device) -> Option<&'static TensorRoof> {
    static ROOF: std::sync::OnceLock<Option<TensorRoof>> = std::sync::OnceLock::new();
    ROOF.get_or_init(|| {
        tensor_roof::measure(dev)
            .map_err(|e| tracing::warn!("no tensor-core roof: {e}"))
            .ok()
    })
    .as_ref()
}

/// A program written to a private file to be profiled by this binary: the request that
/// profiles `result`'s kernel from it within `limit`, and the directory to remove after.
struct Written {
    exe: PathBuf,
    dir: PathBuf,
    request: ProfileRequest,
}

fn written_program(
    source: &str,
    result: &RunResult,
    limit: Duration,
) -> Result<Written, ProfileError> {
    if limit.is_zero() {
        return Err(ProfileError::NoTimeLeft);
    }
    let exe = std::env::current_exe()
        .map_err(|e| ProfileError::Failed(format!("cannot find this binary: {e}")))?;
    let dir = tempdir("program")?;
    let file = dir.join("program.hf");
    std::fs::write(&file, source)
        .map_err(|e| ProfileError::Failed(format!("cannot write {}: {e}", file.display())))?;
    Ok(Written {
        exe,
        dir,
        request: request_for(file, result, limit, None),
    })
}

/// Why there is no profile, as a report.
pub fn unavailable(e: &ProfileError) -> ProfileReport {
    ProfileReport::Unavailable {
        reason: e.unavailable(),
        message: e.to_string(),
    }
}

/// The worker's half of a run with `"profile": true`, into the result: [`profile_program`]'s
/// report in `result.profile` for a run of one kernel, each segment's `profile` for a fusion
/// run as several ([`profile_segments`], the program written to a private file as
/// [`profile_program`] writes it).
pub fn profile_program_into(
    source: &str,
    result: &mut RunResult,
    copy: Option<&CopyCeiling>,
    limit: Duration,
    dev: Option<&crate::engine::Device>,
) {
    if result.segments.is_some() {
        let written = written_program(source, result, limit);
        match written {
            Ok(w) => {
                profile_segments(result, &w.request, &w.exe, copy, &mut || {
                    dev.and_then(tensor_roof_once).cloned()
                });
                let _ = std::fs::remove_dir_all(&w.dir);
            }
            Err(e) => {
                for k in result.segments.iter_mut().flat_map(|s| &mut s.kernels) {
                    k.profile = Some(unavailable(&e));
                }
            }
        }
        return;
    }
    result.profile = Some(profile_program(source, result, copy, limit, dev));
}

/// The worker's half of a run of one kernel with `"profile": true`: the program (as text) is
/// written to a private file and profiled as `hopfuse run` would (by this binary), within
/// `limit` ([`ProfileLimits::limit_after`]); `dev` (the worker's device) measures the
/// tensor-core roof of a program that is not a matrix product.
pub fn profile_program(
    source: &str,
    result: &RunResult,
    copy: Option<&CopyCeiling>,
    limit: Duration,
    dev: Option<&crate::engine::Device>,
) -> ProfileReport {
    let profiled = written_program(source, result, limit).and_then(|w| {
        let p = profile(&w.request, &w.exe);
        let _ = std::fs::remove_dir_all(&w.dir);
        p
    });
    let tensor = match (&profiled, &result.cublas, dev) {
        (Ok(_), None, Some(dev)) => tensor_roof_once(dev),
        _ => None,
    };
    report(profiled, result, copy, tensor)
}

/// The report in words (`hopfuse run --profile`).
pub fn render(r: &ProfileReport) -> String {
    let (p, roofline, missing) = match r {
        ProfileReport::Unavailable { message, .. } => return format!("no profile: {message}"),
        ProfileReport::Measured {
            profile,
            roofline,
            roofline_missing,
        } => (profile, roofline, roofline_missing),
    };
    let pct = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.1} %"));
    let num = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.0}"));
    let mut s = format!(
        "profile of {} (ncu {}):\n  duration           {}\n  DRAM throughput    {} of peak ({} bytes)\n  \
         L2 hit rate        {}\n  SM throughput      {} of peak\n  tensor pipes       {} of peak (busiest)\n  \
         achieved occupancy {}\n  shared bank conflicts {}\n",
        p.kernel,
        p.ncu,
        p.duration_ns
            .map_or("n/a".into(), |d| format!("{:.2} us (under ncu)", d / 1e3)),
        pct(p.dram_throughput_pct),
        num(p.dram_bytes),
        pct(p.l2_hit_rate_pct),
        pct(p.sm_throughput_pct),
        pct(p.tensor_pipe_pct),
        pct(p.achieved_occupancy_pct),
        num(p.shared_bank_conflicts),
    );
    if p.stalls.is_empty() {
        s.push_str("  top warp stalls: none reported\n");
    } else {
        s.push_str(&format!("  top warp stalls ({}):\n", p.stall_unit));
        for st in &p.stalls {
            s.push_str(&format!("    {:<20} {:.2}\n", st.reason, st.value));
        }
    }
    match (roofline, missing) {
        (Some(r), _) => s.push_str(&format!(
            "  roofline: {}FLOP/s ({} FLOP count) and {}B/s from DRAM at {:.3} FLOP/B: {:.0}% of \
             the roof (copy {}B/s{})\n",
            report::si(r.flops_per_s),
            r.flops_from,
            report::si(r.bytes_per_s),
            r.intensity,
            r.fraction_of_roof() * 100.0,
            report::si(r.copy_bytes_per_s),
            r.tensor_flops_per_s
                .map(|t| format!(", cuBLAS {}FLOP/s", report::si(t)))
                .unwrap_or_default()
        )),
        (None, Some(why)) => s.push_str(&format!("  no roofline: {why}\n")),
        (None, None) => {}
    }
    s
}

pub(crate) fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// What ncu's own messages say about the profiling run.
pub fn check_log(log: &str, kernel: &str, ok: bool) -> Result<(), ProfileError> {
    if log.contains("ERR_NVGPUCTRPERM") {
        return Err(ProfileError::NoPermission);
    }
    if log.contains("No kernels were profiled") {
        return Err(ProfileError::NoKernel {
            kernel: kernel.into(),
            log: tail(log),
        });
    }
    if !ok {
        return Err(ProfileError::Failed(tail(log)));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
