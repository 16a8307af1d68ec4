//! Reads the raw page of an Nsight Compute report (`ncu --import R --csv --page raw
//! --print-units base`: a header row of metric names, a row of units, one row per profiled
//! launch) into the metrics ([`Profile`]).
//!
//! Metric names differ between ncu versions and between sections, so each figure is looked up
//! under every name it is known by, and derived from a rate when only the rate was collected:
//! - warp stalls: the Warp State section's `smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio`
//!   (what ncu 2022-2025 collect; warp cycles per issued instruction), else the older
//!   `smsp__average_warp_latency_issue_stalled_<reason>.ratio`, else the sampled
//!   `smsp__pcsamp_warps_issue_stalled_<reason>` counts;
//! - executed FP instructions: `smsp__sass_thread_inst_executed_op_<p><op>_pred_on.sum`, else
//!   the roofline section's `.sum.per_cycle_elapsed` times the elapsed cycles;
//! - DRAM bytes: `dram__bytes.sum`, else read + write, else `dram__bytes.sum.per_second` times
//!   the duration.

use super::report::{Profile, Stall};
use super::ProfileError;
use std::collections::BTreeMap;

/// Stall reasons reported (the largest ones).
pub const TOP_STALLS: usize = 6;

/// The launch of `kernel` in the raw page (its first row whose kernel name starts with it).
pub fn parse_raw_csv(text: &str, kernel: &str) -> Result<Profile, ProfileError> {
    // ncu may print its own `==PROF==` lines before the table.
    let start = text
        .lines()
        .position(|l| l.starts_with('"'))
        .ok_or_else(|| ProfileError::Failed(format!("no CSV table in:\n{}", super::tail(text))))?;
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
        if !kernel.is_empty() && name.starts_with(kernel) {
            row = Some(rec);
            break;
        }
    }
    let row = row.ok_or_else(|| ProfileError::NoKernel {
        kernel: kernel.into(),
        log: super::tail(text),
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

/// The kernel names of a raw page's launches (for a recorded report whose kernel is unknown).
pub fn kernel_names(text: &str) -> Vec<String> {
    let Some(start) = text.lines().position(|l| l.starts_with('"')) else {
        return Vec::new();
    };
    let body: String = text.lines().skip(start).collect::<Vec<_>>().join("\n");
    let mut rdr = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(body.as_bytes());
    let Some(col) = rdr
        .headers()
        .ok()
        .and_then(|h| h.iter().position(|h| h == "Kernel Name"))
    else {
        return Vec::new();
    };
    rdr.records()
        .filter_map(Result::ok)
        .filter_map(|r| r.get(col).map(str::to_string))
        .filter(|n| !n.is_empty())
        .collect()
}

/// The stall families, best first: (prefix, suffix, unit).
const STALL_FAMILIES: [(&str, &str, &str); 3] = [
    (
        "smsp__average_warps_issue_stalled_",
        "_per_issue_active.ratio",
        "warp cycles per issued instruction",
    ),
    (
        "smsp__average_warp_latency_issue_stalled_",
        ".ratio",
        "warp cycles per issued instruction",
    ),
    (
        "smsp__pcsamp_warps_issue_stalled_",
        "",
        "sampled warps (count)",
    ),
];

/// The top stall reasons of the first family the metrics have, and its unit.
fn stalls(metrics: &BTreeMap<String, f64>) -> (Vec<Stall>, String) {
    for (prefix, suffix, unit) in STALL_FAMILIES {
        let mut found: Vec<Stall> = metrics
            .iter()
            .filter_map(|(k, v)| {
                let reason = k.strip_prefix(prefix)?.strip_suffix(suffix)?;
                // `selected` is the warp issuing, not a stall; `*_not_issued` are the same
                // reasons counted another way; a name with a dot is another rollup.
                let real = !reason.is_empty()
                    && reason != "selected"
                    && !reason.ends_with("_not_issued")
                    && !reason.contains('.');
                real.then(|| Stall {
                    reason: reason.to_string(),
                    value: *v,
                })
            })
            .collect();
        if found.is_empty() {
            continue;
        }
        found.sort_by(|a, b| b.value.total_cmp(&a.value).then(a.reason.cmp(&b.reason)));
        found.retain(|s| s.value > 0.0);
        found.truncate(TOP_STALLS);
        return (found, unit.to_string());
    }
    (Vec::new(), String::new())
}

/// Picks the metrics out of a launch's metrics.
pub fn summarize(kernel: &str, metrics: BTreeMap<String, f64>) -> Profile {
    let get = |names: &[&str]| names.iter().find_map(|n| metrics.get(*n).copied());
    let duration_ns = get(&["gpu__time_duration.sum"]);
    let seconds = duration_ns.map(|d| d * 1e-9);
    let dram_bytes = get(&["dram__bytes.sum"])
        .or_else(|| Some(get(&["dram__bytes_read.sum"])? + get(&["dram__bytes_write.sum"])?))
        .or_else(|| Some(get(&["dram__bytes.sum.per_second"])? * seconds?));
    let tensor_pipe_pct = metrics
        .iter()
        .filter(|(k, _)| {
            (k.starts_with("sm__pipe_tensor") || k.starts_with("sm__inst_executed_pipe_tensor"))
                && k.ends_with("pct_of_peak_sustained_active")
        })
        .map(|(_, v)| *v)
        .reduce(f64::max);
    let (stalls, stall_unit) = stalls(&metrics);
    let shared_bank_conflicts = get(&["l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"])
        .or_else(|| {
            let ld = get(&["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"]);
            let st = get(&["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"]);
            match (ld, st) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
            }
        });
    // Executed instructions of one kind: the count, else its rate per elapsed cycle times the
    // cycles (the roofline section collects the rates).
    let cycles = get(&["smsp__cycles_elapsed.avg"]).or_else(|| {
        Some(
            get(&[
                "smsp__cycles_elapsed.avg.per_second",
                "sm__cycles_elapsed.avg.per_second",
            ])? * seconds?,
        )
    });
    let executed = |name: &str| {
        get(&[&format!("{name}.sum")])
            .or_else(|| Some(get(&[&format!("{name}.sum.per_cycle_elapsed")])? * cycles?))
    };
    // Per precision: add + mul + 2 fma.
    let mut flops = None;
    for p in ["h", "f", "d"] {
        let n = |op: &str| {
            executed(&format!(
                "smsp__sass_thread_inst_executed_op_{p}{op}_pred_on"
            ))
        };
        let (add, mul, fma) = (n("add"), n("mul"), n("fma"));
        if add.is_some() || mul.is_some() || fma.is_some() {
            *flops.get_or_insert(0.0) +=
                add.unwrap_or(0.0) + mul.unwrap_or(0.0) + 2.0 * fma.unwrap_or(0.0);
        }
    }
    Profile {
        kernel: kernel.into(),
        duration_ns,
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
        stall_unit,
        warp_cycles_per_issued: get(&["smsp__average_warp_latency_per_inst_issued.ratio"]),
        shared_bank_conflicts,
        flops,
        metrics,
        ncu: String::new(),
    }
}
