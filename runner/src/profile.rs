//! Profiles a run's kernel with Nsight Compute (`ncu`) on the GPU host: DRAM throughput, L2 hit
//! rate, SM and tensor-pipe utilisation, achieved occupancy, the top warp-stall reasons and
//! shared-memory bank conflicts, plus a roofline picture against the measured ceilings.
//!
//! `ncu` profiles a process, so the kernel is run again in a child: `ncu --export REPORT ...
//! hopfuse run FILE --size ... --iters 1 --warmup 0 --no-ceiling`, restricted to the program's
//! kernel (`--kernel-name`, the first launch: the validated one), with the sections that hold
//! those metrics. The report is then read back with `ncu --import REPORT --csv --page raw
//! --print-units base` (one row per profiled kernel, a column per metric) and the metrics picked
//! by name, tolerating the ones a device or ncu version does not have (an ncu that does not know
//! one of the sections is asked again with the core ones). The child runs under a
//! wall-clock limit in its own process group (killed as a whole past it); a host without `ncu`
//! or without permission for the GPU's performance counters (`ERR_NVGPUCTRPERM`) says so.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
    #[error("ncu did not finish in {0:.0} s (killed)")]
    TimedOut(f64),
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
    pub kernel: String,
    pub time_limit: Duration,
}

/// One warp-stall reason: average warps stalled for it per issued instruction (ncu's
/// `smsp__average_warp_latency_issue_stalled_<reason>` family).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    pub reason: String,
    pub value: f64,
}

/// The metrics of one profiled launch (None: not reported by this device / ncu).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub kernel: String,
    pub duration_ns: Option<f64>,
    pub dram_throughput_pct: Option<f64>,
    pub dram_bytes: Option<f64>,
    pub l2_hit_rate_pct: Option<f64>,
    pub sm_throughput_pct: Option<f64>,
    /// The busiest tensor pipe (`sm__pipe_tensor*` / `sm__inst_executed_pipe_tensor*`, % of
    /// peak while active).
    pub tensor_pipe_pct: Option<f64>,
    pub achieved_occupancy_pct: Option<f64>,
    /// The top warp-stall reasons, largest first.
    pub stalls: Vec<Stall>,
    pub shared_bank_conflicts: Option<f64>,
    /// Floating-point operations (FP16/32/64 adds, multiplies, 2 per FMA) the SASS executed;
    /// tensor-core work is not in it.
    pub flops: Option<f64>,
    /// Every metric of the row, by ncu's name (base units).
    pub metrics: BTreeMap<String, f64>,
    pub ncu: String,
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
pub fn ncu_args(req: &ProfileRequest, exe: &Path, report: &Path, sections: &[&str]) -> Vec<String> {
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
    a
}

/// Runs `cmd` in its own process group; kills the group past `limit`. Returns stdout + stderr.
fn run_limited(mut cmd: Command, limit: Duration) -> Result<(bool, String), ProfileError> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
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
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() > limit => {
                // SAFETY: signals the process group this function created.
                unsafe { libc::killpg(child.id() as libc::pid_t, libc::SIGKILL) };
                let _ = child.wait();
                return Err(ProfileError::TimedOut(limit.as_secs_f64()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(ProfileError::Failed(format!("waiting for ncu: {e}"))),
        }
    };
    let text = reader.join().unwrap_or_default() + &reader_err.join().unwrap_or_default();
    Ok((status.success(), text))
}

/// Profiles the request's kernel (`exe` is this binary).
pub fn profile(req: &ProfileRequest, exe: &Path) -> Result<Profile, ProfileError> {
    let ncu = find_ncu()?;
    let version = Command::new(&ncu)
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
    let dir = std::env::temp_dir().join(format!("hopfuse-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| ProfileError::Failed(e.to_string()))?;
    let report = dir.join("report");
    let mut cmd = Command::new(&ncu);
    cmd.args(ncu_args(req, exe, &report, &SECTIONS));
    let (mut ok, mut log) = run_limited(cmd, req.time_limit)?;
    if !ok && log.to_ascii_lowercase().contains("section") && !log.contains("ERR_NVGPUCTRPERM") {
        let mut cmd = Command::new(&ncu);
        cmd.args(ncu_args(req, exe, &report, &CORE_SECTIONS));
        (ok, log) = run_limited(cmd, req.time_limit)?;
    }
    check_log(&log, &req.kernel, ok)?;
    let mut cmd = Command::new(&ncu);
    cmd.arg("--import")
        .arg(report.with_extension("ncu-rep"))
        .args(["--csv", "--page", "raw", "--print-units", "base"]);
    let (ok, csv) = run_limited(cmd, req.time_limit)?;
    let _ = std::fs::remove_dir_all(&dir);
    if !ok {
        return Err(ProfileError::Failed(tail(&csv)));
    }
    let mut p = parse_raw_csv(&csv, &req.kernel)?;
    p.ncu = version;
    Ok(p)
}

fn tail(log: &str) -> String {
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

/// The profiled launch's row of `ncu --csv --page raw --print-units base`: a header of metric
/// names, a row of units, then one row per launch.
pub fn parse_raw_csv(text: &str, kernel: &str) -> Result<Profile, ProfileError> {
    // ncu may print its own `==PROF==` lines before the table.
    let start = text
        .lines()
        .position(|l| l.starts_with('"'))
        .ok_or_else(|| ProfileError::Failed(format!("no CSV table in:\n{}", tail(text))))?;
    let body: String = text.lines().skip(start).collect::<Vec<_>>().join("\n");
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(body.as_bytes());
    let headers = rdr
        .headers()
        .map_err(|e| ProfileError::Failed(format!("ncu CSV: {e}")))?
        .clone();
    let name_col = headers.iter().position(|h| h == "Kernel Name");
    let mut row = None;
    for rec in rdr.records() {
        let rec = rec.map_err(|e| ProfileError::Failed(format!("ncu CSV: {e}")))?;
        // The units row has no kernel name.
        let name = name_col.and_then(|c| rec.get(c)).unwrap_or("");
        if name.starts_with(kernel) {
            row = Some(rec);
            break;
        }
    }
    let row = row.ok_or_else(|| ProfileError::NoKernel {
        kernel: kernel.into(),
        log: tail(text),
    })?;
    let mut metrics = BTreeMap::new();
    for (h, v) in headers.iter().zip(row.iter()) {
        if let Ok(x) = v.replace(',', "").trim().parse::<f64>() {
            if h.contains("__") {
                metrics.insert(h.to_string(), x);
            }
        }
    }
    Ok(summarize(kernel, metrics))
}

/// Picks the issue's metrics out of a launch's metrics.
pub fn summarize(kernel: &str, metrics: BTreeMap<String, f64>) -> Profile {
    let get = |names: &[&str]| names.iter().find_map(|n| metrics.get(*n).copied());
    let dram_bytes = get(&["dram__bytes.sum"]).or_else(|| {
        Some(get(&["dram__bytes_read.sum"])? + get(&["dram__bytes_write.sum"]).unwrap_or(0.0))
    });
    let tensor_pipe_pct = metrics
        .iter()
        .filter(|(k, _)| {
            (k.starts_with("sm__pipe_tensor") || k.starts_with("sm__inst_executed_pipe_tensor"))
                && k.contains("pct_of_peak_sustained_active")
        })
        .map(|(_, v)| *v)
        .reduce(f64::max);
    let mut stalls: Vec<Stall> = metrics
        .iter()
        .filter_map(|(k, v)| {
            let rest = k.strip_prefix("smsp__average_warp_latency_issue_stalled_")?;
            let reason = rest.strip_suffix(".ratio")?;
            (!reason.ends_with("_not_issued")).then(|| Stall {
                reason: reason.to_string(),
                value: *v,
            })
        })
        .collect();
    stalls.sort_by(|a, b| b.value.total_cmp(&a.value));
    stalls.truncate(5);
    let shared_bank_conflicts = get(&["l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"])
        .or_else(|| {
            let ld = get(&["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"]);
            let st = get(&["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"]);
            match (ld, st) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
            }
        });
    // The roofline section's instruction counts: per precision, add + mul + 2 fma.
    let mut flops = None;
    for p in ["h", "f", "d"] {
        let n = |op: &str| {
            get(&[&format!(
                "smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum"
            )])
        };
        if let (Some(add), Some(mul), Some(fma)) = (n("add"), n("mul"), n("fma")) {
            *flops.get_or_insert(0.0) += add + mul + 2.0 * fma;
        }
    }
    Profile {
        kernel: kernel.into(),
        duration_ns: get(&["gpu__time_duration.sum"]),
        dram_throughput_pct: get(&[
            "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
            "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        ]),
        dram_bytes,
        l2_hit_rate_pct: get(&["lts__t_sector_hit_rate.pct"]),
        sm_throughput_pct: get(&["sm__throughput.avg.pct_of_peak_sustained_elapsed"]),
        tensor_pipe_pct,
        achieved_occupancy_pct: get(&["sm__warps_active.avg.pct_of_peak_sustained_active"]),
        stalls,
        shared_bank_conflicts,
        flops,
        metrics,
        ncu: String::new(),
    }
}

/// The profile as a short report.
pub fn render(p: &Profile) -> String {
    let pct = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.1} %"));
    let num = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.0}"));
    let mut s = format!(
        "profile of {} (ncu {}):\n  duration          {}\n  DRAM throughput   {} of peak ({} bytes)\n  \
         L2 hit rate       {}\n  SM throughput     {} of peak\n  tensor pipes      {} of peak (busiest)\n  \
         achieved occupancy {}\n  shared bank conflicts {}\n",
        p.kernel,
        p.ncu,
        p.duration_ns
            .map_or("n/a".into(), |d| format!("{:.2} us", d / 1e3)),
        pct(p.dram_throughput_pct),
        num(p.dram_bytes),
        pct(p.l2_hit_rate_pct),
        pct(p.sm_throughput_pct),
        pct(p.tensor_pipe_pct),
        pct(p.achieved_occupancy_pct),
        num(p.shared_bank_conflicts),
    );
    s.push_str("  top warp stalls (warps per issued instruction):\n");
    for st in &p.stalls {
        s.push_str(&format!("    {:<20} {:.2}\n", st.reason, st.value));
    }
    s
}

/// A roofline point and its ceilings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Roofline {
    /// FLOP per DRAM byte.
    pub intensity: f64,
    /// Achieved FLOP/s.
    pub flops_per_s: f64,
    /// The measured copy bandwidth (bytes/s): the slope of the memory roof.
    pub copy_bytes_per_s: f64,
    /// The measured tensor-core (cuBLAS) FLOP/s, for a matrix product.
    pub tensor_flops_per_s: Option<f64>,
}

impl Roofline {
    /// From a profile and the run's measurements: `flops` (the plan's `2MNK` for a matrix
    /// product, else the profile's SASS count), the median time, the copy ceiling.
    pub fn new(
        p: &Profile,
        flops: Option<f64>,
        seconds: f64,
        copy_bytes_per_s: f64,
        tensor_flops_per_s: Option<f64>,
    ) -> Option<Roofline> {
        let flops = flops.or(p.flops)?;
        let bytes = p.dram_bytes?;
        (bytes > 0.0 && seconds > 0.0 && flops > 0.0).then(|| Roofline {
            intensity: flops / bytes,
            flops_per_s: flops / seconds,
            copy_bytes_per_s,
            tensor_flops_per_s,
        })
    }

    /// Log-log SVG: the memory roof (copy bandwidth), the tensor roof when known, the point.
    pub fn svg(&self) -> String {
        let (w, h, m) = (520.0, 320.0, 48.0);
        let (x0, x1) = (
            (self.intensity / 100.0).log10().floor(),
            (self.intensity * 100.0).log10().ceil(),
        );
        let top = self
            .tensor_flops_per_s
            .unwrap_or(self.copy_bytes_per_s * 10f64.powf(x1))
            .max(self.flops_per_s);
        let (y1, y0) = (
            top.log10().ceil() + 0.3,
            (self.flops_per_s / 1e3).log10().floor(),
        );
        let sx = |ai: f64| m + (ai.log10() - x0) / (x1 - x0) * (w - 2.0 * m);
        let sy = |f: f64| h - m - (f.log10() - y0) / (y1 - y0) * (h - 2.0 * m);
        let roof = |ai: f64| {
            let mem = self.copy_bytes_per_s * ai;
            self.tensor_flops_per_s.map_or(mem, |t| mem.min(t))
        };
        let mut pts = Vec::new();
        let steps = 64;
        for i in 0..=steps {
            let ai = 10f64.powf(x0 + (x1 - x0) * i as f64 / steps as f64);
            pts.push(format!("{:.1},{:.1}", sx(ai), sy(roof(ai))));
        }
        format!(
            "<svg class=\"roofline\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {h}\" \
             width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"roofline\">\
             <rect x=\"{m}\" y=\"{m}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"currentColor\" stroke-opacity=\"0.3\"/>\
             <polyline points=\"{}\" fill=\"none\" stroke=\"currentColor\" stroke-width=\"2\"/>\
             <circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"5\" fill=\"#e11d48\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"currentColor\">{:.2} TFLOP/s at {:.2} FLOP/B</text>\
             <text x=\"{m}\" y=\"{}\" font-size=\"11\" fill=\"currentColor\">FLOP per DRAM byte (log) · roof: copy {:.0} GB/s{}</text>\
             </svg>",
            w - 2.0 * m,
            h - 2.0 * m,
            pts.join(" "),
            sx(self.intensity),
            sy(self.flops_per_s),
            sx(self.intensity) + 8.0,
            sy(self.flops_per_s) - 8.0,
            self.flops_per_s / 1e12,
            self.intensity,
            h - 14.0,
            self.copy_bytes_per_s / 1e9,
            self.tensor_flops_per_s
                .map(|t| format!(", tensor {:.0} TFLOP/s", t / 1e12))
                .unwrap_or_default(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str = "==PROF== Disconnected from process 1\n\
\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"gpu__time_duration.sum\",\"dram__bytes_read.sum\",\"dram__bytes_write.sum\",\"gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed\",\"lts__t_sector_hit_rate.pct\",\"sm__throughput.avg.pct_of_peak_sustained_elapsed\",\"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active\",\"sm__warps_active.avg.pct_of_peak_sustained_active\",\"smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio\",\"smsp__average_warp_latency_issue_stalled_barrier.ratio\",\"smsp__average_warp_latency_issue_stalled_barrier_not_issued.ratio\",\"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum\",\"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum\",\"smsp__sass_thread_inst_executed_op_fadd_pred_on.sum\",\"smsp__sass_thread_inst_executed_op_fmul_pred_on.sum\",\"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum\"\n\
\"\",\"\",\"\",\"\",\"\",\"ns\",\"byte\",\"byte\",\"%\",\"%\",\"%\",\"%\",\"%\",\"\",\"\",\"\",\"\",\"\",\"inst\",\"inst\",\"inst\"\n\
\"0\",\"4242\",\"hopfuse\",\"127.0.0.1\",\"exp_2d_kernel\",\"12,345\",\"67,108,864\",\"67,108,864\",\"88.5\",\"12.5\",\"40.25\",\"0\",\"71.5\",\"9.5\",\"1.25\",\"3.0\",\"0\",\"16\",\"1000\",\"2000\",\"3000\"\n";

    #[test]
    fn the_raw_page_is_read_into_the_issues_metrics() {
        let p = parse_raw_csv(CSV, "exp_2d_kernel").unwrap();
        assert_eq!(p.duration_ns, Some(12345.0));
        assert_eq!(p.dram_bytes, Some(2.0 * 67108864.0));
        assert_eq!(p.dram_throughput_pct, Some(88.5));
        assert_eq!(p.l2_hit_rate_pct, Some(12.5));
        assert_eq!(p.sm_throughput_pct, Some(40.25));
        assert_eq!(p.tensor_pipe_pct, Some(0.0));
        assert_eq!(p.achieved_occupancy_pct, Some(71.5));
        assert_eq!(
            p.stalls,
            [
                Stall {
                    reason: "long_scoreboard".into(),
                    value: 9.5
                },
                Stall {
                    reason: "barrier".into(),
                    value: 1.25
                }
            ]
        );
        assert_eq!(p.shared_bank_conflicts, Some(16.0));
        assert_eq!(p.flops, Some(1000.0 + 2000.0 + 2.0 * 3000.0));
        assert!(matches!(
            parse_raw_csv(CSV, "other_kernel"),
            Err(ProfileError::NoKernel { .. })
        ));
        assert!(render(&p).contains("long_scoreboard"));
    }

    #[test]
    fn ncus_messages_say_why_there_is_no_profile() {
        assert!(matches!(
            check_log(
                "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission",
                "k",
                false
            ),
            Err(ProfileError::NoPermission)
        ));
        assert!(matches!(
            check_log("==WARNING== No kernels were profiled.", "k", true),
            Err(ProfileError::NoKernel { .. })
        ));
        assert!(check_log("==PROF== Report: /tmp/r.ncu-rep", "k", true).is_ok());
    }

    #[test]
    fn the_profiling_child_runs_this_binary_once_for_the_kernel() {
        let req = ProfileRequest {
            file: "examples/tma/exp_2d.hf".into(),
            sizes: [("M".to_string(), 4096), ("N".to_string(), 4096)].into(),
            seed: 1,
            index: None,
            kernel: "exp_2d_kernel".into(),
            time_limit: Duration::from_secs(60),
        };
        let a = ncu_args(
            &req,
            Path::new("/bin/hopfuse"),
            Path::new("/tmp/r"),
            &SECTIONS,
        )
        .join(" ");
        assert!(a.starts_with("--export /tmp/r --force-overwrite --target-processes all"));
        assert!(a.contains("--kernel-name exp_2d_kernel --launch-count 1"));
        assert!(a.contains("--section WarpStateStats"));
        assert!(a.ends_with(
            "/bin/hopfuse run examples/tma/exp_2d.hf --size M=4096,N=4096 --iters 1 --warmup 0 \
             --seed 1 --no-ceiling"
        ));
    }

    #[test]
    fn the_roofline_puts_the_point_under_the_memory_roof() {
        let p = parse_raw_csv(CSV, "exp_2d_kernel").unwrap();
        let r = Roofline::new(&p, None, 1e-5, 3.0e12, None).unwrap();
        assert!((r.intensity - 9000.0 / (2.0 * 67108864.0)).abs() < 1e-12);
        let svg = r.svg();
        assert!(svg.starts_with("<svg") && svg.contains("<polyline") && svg.contains("<circle"));
        assert!(svg.contains("copy 3000 GB/s"));
        let with_tensor = Roofline::new(&p, Some(1e12), 1e-3, 3.0e12, Some(600e12)).unwrap();
        assert!(with_tensor.svg().contains("tensor 600 TFLOP/s"));
        assert!(Roofline::new(&Profile::default(), None, 1.0, 1.0, None).is_none());
    }
}
