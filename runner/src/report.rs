//! The human-readable report of `hopfuse run`.

use crate::engine::RunResult;
use crate::validate::Check;
use std::fmt::Write;

pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// `--clock`: the SM clock the kernel's probe measured, and a product's work per SM-cycle.
fn clock_lines(r: &RunResult) -> Vec<String> {
    let Some(c) = &r.clock else {
        return Vec::new();
    };
    let max = r
        .device
        .max_sm_clock_mhz
        .map(|m| format!("; the GPU's maximum {m} MHz"))
        .unwrap_or_default();
    let mut lines = vec![format!(
        "  clock       {:.0} MHz SM clock during the last timed launch (thread 0 of {} CTAs, %clock64 over %globaltimer{max})",
        c.sm_clock_mhz, c.ctas
    )];
    if let Some(f) = c.flop_per_sm_cycle {
        let peak = match c.fraction_of_tensor_peak {
            Some(p) => format!(
                ": {:.1}% of the tensor cores' dense 16-bit peak ({})",
                p * 100.0,
                hopfuse::target::TENSOR_FLOP_PER_SM_CYCLE_16BIT
            ),
            None => String::new(),
        };
        lines.push(format!(
            "  per cycle   {f:.1} FLOP per SM-cycle over the device's {} SMs{peak}",
            r.device.sm_count
        ));
    }
    lines
}

/// A segmented run: why, each kernel timed alone, and the intermediates.
fn segment_lines(r: &RunResult) -> Vec<String> {
    let Some(seg) = &r.segments else {
        return Vec::new();
    };
    let mut lines = vec![format!(
        "  segments    {} kernels run in order (time above: all of them): {}",
        seg.kernels.len(),
        seg.reason
    )];
    for (k, g) in seg.kernels.iter().enumerate() {
        let (gr, b) = (g.launch.grid, g.launch.block);
        lines.push(format!(
            "    {}. {:<28} {:<16} median {:.2} us  {:.1} GB/s  grid ({},{},{}) block ({},{},{})",
            k + 1,
            g.kernel,
            g.scheduler,
            g.timing.median_us,
            g.gbps,
            gr[0],
            gr[1],
            gr[2],
            b[0],
            b[1],
            b[2]
        ));
        lines.push(format!("       {}", g.reason));
    }
    for m in &seg.intermediates {
        lines.push(format!(
            "    intermediate {} {} ({})",
            m.name,
            m.dtype.name(),
            bytes(m.bytes)
        ));
    }
    lines
}

fn check_line(c: &Check) -> String {
    let mut line = format!(
        "    {:<12} {:<5} {:>11} elements  rel_l2 {:.3e}  max_abs {:.3e}  tol {:.0e}  {}",
        c.output,
        c.dtype.name(),
        c.elements,
        c.rel_l2,
        c.max_abs,
        c.tolerance,
        if c.passed { "PASS" } else { "FAIL" }
    );
    if c.non_finite > 0 {
        let _ = write!(
            line,
            "  ({} NaN/inf where the reference is finite)",
            c.non_finite
        );
    }
    if c.reference_non_finite > 0 {
        let _ = write!(
            line,
            "  ({} reference NaN/inf, {} not matched)",
            c.reference_non_finite, c.reference_non_finite_mismatched
        );
    }
    if let (false, Some(b)) = (c.passed, &c.first_bad) {
        let _ = write!(
            line,
            "\n      e.g. element {}: got {:e}, expected {:e}",
            b.index, b.output, b.reference
        );
    }
    line
}

/// Throughput, ceiling and ratio cells: TFLOP/s against cuBLAS for a matrix product, else
/// GB/s against the device copy.
pub fn throughput(r: &RunResult) -> (String, String, String) {
    if let Some(t) = r.tflops {
        return match (&r.cublas, r.fraction_of_cublas) {
            (Some(c), Some(f)) => (
                format!("{t:.2} TFLOP/s"),
                format!("cuBLAS {:.2} TFLOP/s", c.tflops),
                format!("{:.1}% of cuBLAS", f * 100.0),
            ),
            _ => (
                format!("{t:.2} TFLOP/s"),
                format!(
                    "cuBLAS not measured: {}",
                    r.cublas_skipped.as_deref().unwrap_or("no reason given")
                ),
                "-".into(),
            ),
        };
    }
    (
        format!("{:.1} GB/s", r.gbps),
        r.copy
            .as_ref()
            .map(|c| format!("copy {:.1} GB/s", c.gbps))
            .unwrap_or_else(|| "copy not measured".into()),
        r.fraction_of_copy
            .map(|f| format!("{:.1}% of copy", f * 100.0))
            .unwrap_or_else(|| "-".into()),
    )
}

pub fn render(r: &RunResult) -> String {
    let mut s = String::new();
    let sizes = match crate::sizes::format_sizes(&r.sizes) {
        none if none.is_empty() => String::new(),
        some => format!("  --size {some}"),
    };
    // The packed-document inputs, as the flags that give them: a logged run says its ids.
    let documents = match crate::documents::flags(&r.documents) {
        none if none.is_empty() => String::new(),
        some => format!("  {some}"),
    };
    let _ = writeln!(
        s,
        "hopfuse run {}{sizes}  --seed {}{documents}",
        r.file, r.seed
    );
    write_kernel(&mut s, r);
    let t = &r.timing;
    let _ = writeln!(
        s,
        "  time        min {:.2} us  median {:.2} us  max {:.2} us  ({} timed launches after {} warm-up)",
        t.min_us, t.median_us, t.max_us, t.samples, r.warmup
    );
    for line in segment_lines(r) {
        let _ = writeln!(s, "{line}");
    }
    for line in clock_lines(r) {
        let _ = writeln!(s, "{line}");
    }
    let _ = writeln!(
        s,
        "  L2          working set {}; {}",
        bytes(r.working_set_bytes),
        r.l2_policy
    );
    let _ = writeln!(
        s,
        "  bandwidth   {:.1} GB/s ({} bytes at least, / median time)",
        r.gbps, r.min_global_bytes
    );
    write_ceilings(&mut s, r);
    write_validation(&mut s, r);
    if let Some(p) = &r.peers {
        s.push_str(&peers(p));
    }
    for w in &r.warnings {
        let _ = writeln!(s, "  warning     {w}");
    }
    let _ = write!(
        s,
        "  result      {}",
        if r.passed { "PASS" } else { "FAIL" }
    );
    s
}

/// The device, the kernel with its index type, its launch, waves and resources.
fn write_kernel(s: &mut String, r: &RunResult) {
    let d = &r.device;
    let _ = writeln!(
        s,
        "  device      {} (sm_{}{}, {} SMs, L2 {}, driver {}.{})",
        d.name,
        d.compute_capability.0,
        d.compute_capability.1,
        d.sm_count,
        bytes(d.l2_bytes),
        d.driver_version / 1000,
        d.driver_version % 1000 / 10
    );
    let _ = writeln!(
        s,
        "  kernel      {}  index {} ({})",
        r.kernel,
        r.index_type.cuda(),
        r.index_reason
    );
    let (g, b) = (r.launch.grid, r.launch.block);
    let _ = writeln!(
        s,
        "  launch      grid ({},{},{})  block ({},{},{})  dynamic smem {}",
        g[0],
        g[1],
        g[2],
        b[0],
        b[1],
        b[2],
        bytes(r.launch.dynamic_smem_bytes as u64)
    );
    if let Some(c) = r.launch.cluster {
        let _ = writeln!(
            s,
            "  cluster     ({},{},{}) CTAs (__cluster_dims__)",
            c[0], c[1], c[2]
        );
    }
    if let Some(w) = &r.residency {
        let _ = writeln!(s, "  waves       {}", w.text());
    }
    let a = &r.attributes;
    let _ = writeln!(
        s,
        "  resources   {} registers/thread, {} local memory/thread, {} static smem; CUBIN {} (NVRTC {:.1} ms)",
        a.registers_per_thread,
        bytes(a.local_bytes_per_thread.max(0) as u64),
        bytes(a.static_smem_bytes.max(0) as u64),
        bytes(r.cubin_bytes as u64),
        r.nvrtc_ms
    );
}

/// The copy ceiling and the ratio to it, or a matrix product's rate against cuBLAS.
fn write_ceilings(s: &mut String, r: &RunResult) {
    match &r.copy {
        Some(c) => {
            let _ = writeln!(
                s,
                "  copy        {:.1} GB/s device-to-device ({} buffer, read + written; median {:.2} us)",
                c.gbps,
                bytes(c.buffer_bytes),
                c.timing.median_us
            );
        }
        None => {
            let _ = writeln!(s, "  copy        not measured");
        }
    }
    // A matrix product is compute-bound: its ratio is the one to cuBLAS below.
    if let (Some(f), None) = (r.fraction_of_copy, r.tflops) {
        let _ = writeln!(s, "  ratio       {:.1}% of the copy", f * 100.0);
    }
    if let (Some(flops), Some(t)) = (r.flops, r.tflops) {
        let _ = writeln!(
            s,
            "  compute     {t:.2} TFLOP/s ({flops:.3e} floating-point operations = 2 M N K, / median time)"
        );
        match (&r.cublas, &r.cublas_skipped) {
            (Some(c), _) => {
                let when = if c.rounds > 1 {
                    format!(" (in {} rounds alternating with the kernel's)", c.rounds)
                } else {
                    String::new()
                };
                let _ = writeln!(
                    s,
                    "  cuBLAS      {:.2} TFLOP/s, median {:.2} us: {}{when}",
                    c.tflops, c.timing.median_us, c.call
                );
                let _ = writeln!(s, "{}", check_line(&c.validation));
            }
            (None, Some(why)) => {
                let _ = writeln!(s, "  cuBLAS      not measured: {why}");
            }
            (None, None) => {}
        }
        if let Some(f) = r.fraction_of_cublas {
            let _ = writeln!(s, "  ratio       {:.1}% of cuBLAS", f * 100.0);
        }
    }
}

/// The first launch's validation, the reference, and the outputs re-checked after timing.
fn write_validation(s: &mut String, r: &RunResult) {
    let first_ok = r.validation.iter().all(|c| c.passed);
    let _ = writeln!(
        s,
        "  validation  {} (first launch, against the float64 reference)",
        if first_ok { "PASS" } else { "FAIL" }
    );
    for c in &r.validation {
        let _ = writeln!(s, "{}", check_line(c));
    }
    if let Some(how) = &r.reference {
        let _ = writeln!(s, "  reference   {how}");
    }
    let after_ok = r.validation_after_timing.iter().all(|c| c.passed);
    let _ = writeln!(
        s,
        "  re-checked  {} (outputs of tensor set 0 after the timed launches)",
        if after_ok { "PASS" } else { "FAIL" }
    );
    if !after_ok {
        for c in r.validation_after_timing.iter().filter(|c| !c.passed) {
            let _ = writeln!(s, "{}", check_line(c));
        }
    }
}

/// The peers' lines of the report: each peer's time, speed-up and validation, then hopfuse
/// against the best one with the per-round spread.
fn peers(p: &crate::peers::PeersReport) -> String {
    let mut s = String::new();
    if let Some(why) = &p.unavailable {
        let _ = writeln!(s, "  peers       unavailable: {why}");
        return s;
    }
    let _ = writeln!(
        s,
        "  peers       torch {}, the twin timed in {} rounds alternating with the kernel's",
        p.torch.as_deref().unwrap_or("?"),
        p.rounds
    );
    for peer in &p.peers {
        let compile = peer
            .compile_s
            .map(|c| format!("  (compile {c:.1} s, not timed)"))
            .unwrap_or_default();
        match (&peer.timing, &peer.error) {
            (Some(t), _) => {
                let _ = writeln!(
                    s,
                    "    {:<14} median {:.2} us  min {:.2} us  max {:.2} us  hopfuse x{:.2}  {}{compile}",
                    peer.name,
                    t.median_us,
                    t.min_us,
                    t.max_us,
                    peer.speedup.unwrap_or(f64::NAN),
                    if peer.passed { "PASS" } else { "FAIL" }
                );
            }
            (None, error) => {
                let _ = writeln!(
                    s,
                    "    {:<14} not timed: {}",
                    peer.name,
                    error.as_deref().unwrap_or("no reason given")
                );
            }
        }
        for c in peer.validation.iter().filter(|c| !c.passed) {
            let _ = writeln!(s, "{}", check_line(c));
        }
    }
    let _ = writeln!(s, "  vs peers    {}", speedup(p));
    s
}

/// `x1.31 vs torch.compile (x1.28..x1.35 per round)`, or why there is none.
pub fn speedup(p: &crate::peers::PeersReport) -> String {
    if let Some(why) = &p.unavailable {
        return format!("peers unavailable: {why}");
    }
    match (&p.best, p.speedup) {
        (Some(best), Some(x)) => {
            let spread = match (p.speedup_min, p.speedup_max) {
                (Some(lo), Some(hi)) => format!(" (x{lo:.2}..x{hi:.2} per round)"),
                _ => String::new(),
            };
            format!("x{x:.2} vs {best}{spread}")
        }
        _ => "no peer validated".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recorded H100 run of `basics/matmul` (docs/recordings), from before residencies.
    fn recorded() -> RunResult {
        let sse = include_str!("../../docs/recordings/matmul_h100.sse");
        let data = sse
            .split("\n\n")
            .find(|b| b.starts_with("event: done"))
            .and_then(|b| b.split_once("\ndata: "))
            .expect("a done event")
            .1;
        let event: hopfuse_api::job::JobEvent = serde_json::from_str(data).unwrap();
        (*event.result.unwrap().result.clone().unwrap()).clone()
    }

    /// A split fusion's report lists its kernels, each timed alone, and the intermediates,
    /// right after the time of the whole; a one-kernel result has no such lines.
    #[test]
    fn a_segmented_run_lists_each_kernel_and_the_intermediates() {
        use hopfuse_api::run::{IntermediateRun, SegmentRun, SegmentsRun};
        let mut r = recorded();
        assert!(!render(&r).contains("segments"));
        let kernel = |name: &str, scheduler: &str, median_us: f64, gbps: f64| SegmentRun {
            segment: name.trim_end_matches("_kernel").into(),
            kernel: name.into(),
            scheduler: scheduler.into(),
            reason: format!("why {name} ends"),
            launch: r.launch.clone(),
            timing: crate::gpu::Timing {
                median_us,
                ..r.timing.clone()
            },
            min_global_bytes: 1,
            gbps,
            profile: None,
        };
        r.segments = Some(SegmentsRun {
            reason: "`y` reads the column reductions back over the columns".into(),
            kernels: vec![
                kernel("col_norm_s1_kernel", "outer reduction", 12.5, 2900.0),
                kernel("col_norm_s2_kernel", "pointwise", 30.25, 3100.0),
            ],
            intermediates: vec![IntermediateRun {
                name: "y_sum".into(),
                dtype: hopfuse::DType::F32,
                bytes: 32768,
            }],
        });
        let text = render(&r);
        let lines: Vec<&str> = text.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with("  segments"))
            .expect("a segments line");
        assert!(lines[at - 1].starts_with("  time "), "{text}");
        assert_eq!(
            lines[at],
            "  segments    2 kernels run in order (time above: all of them): `y` reads the column reductions back over the columns"
        );
        assert!(
            lines[at + 1].starts_with("    1. col_norm_s1_kernel"),
            "{text}"
        );
        assert!(lines[at + 1].contains("outer reduction"), "{text}");
        assert!(
            lines[at + 1].contains("median 12.50 us  2900.0 GB/s"),
            "{text}"
        );
        assert_eq!(lines[at + 2], "       why col_norm_s1_kernel ends");
        assert!(
            lines[at + 3].contains("median 30.25 us  3100.0 GB/s"),
            "{text}"
        );
        assert_eq!(lines[at + 5], "    intermediate y_sum f32 (32.0 KiB)");
    }

    /// A result without a residency (an older runner's) has no waves line and no warning.
    #[test]
    fn the_header_names_the_packed_document_inputs() {
        let mut r = recorded();
        let header = |r: &RunResult| render(r).lines().next().unwrap().to_string();
        assert!(!header(&r).contains("--documents"), "{}", header(&r));
        let eight = std::num::NonZeroU32::new(8).unwrap();
        r.documents = [("doc_q".to_string(), eight), ("doc_k".to_string(), eight)].into();
        assert!(
            header(&r).ends_with(&format!("--seed {}  --documents doc_k,doc_q:8", r.seed)),
            "{}",
            header(&r)
        );
    }

    #[test]
    fn an_old_result_has_no_waves_line() {
        let text = render(&recorded());
        assert!(!text.contains("waves"), "{text}");
        assert!(!text.contains("warning"), "{text}");
    }

    /// The waves line right after the launch (and cluster) lines, and the warning before the
    /// result line.
    #[test]
    fn waves_and_the_persistent_grid_warning() {
        use crate::occupancy::{record, warnings};
        use hopfuse_api::run::ResidentUnit;
        let mut r = recorded();
        r.launch.grid = [8, 16, 1];
        r.launch.cluster = Some([1, 4, 1]);
        let residency = record(ResidentUnit::Cluster, 4, 32, true, Ok((30, None)));
        r.warnings = warnings(&residency);
        r.residency = Some(residency);
        let text = render(&r);
        let lines: Vec<&str> = text.lines().collect();
        let at = |prefix: &str| {
            lines
                .iter()
                .position(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no `{prefix}` line in\n{text}"))
        };
        assert_eq!(at("  waves"), at("  cluster") + 1, "{text}");
        assert_eq!(
            lines[at("  waves")],
            "  waves       2 (32 clusters of 4 CTAs, at most 30 resident: \
             cuOccupancyMaxActiveClusters; persistent grid)"
        );
        assert_eq!(at("  warning"), at("  result") - 1, "{text}");
        assert!(
            lines[at("  warning")].starts_with(
                "  warning     persistent grid of 32 clusters of 4 CTAs, but at most 30 are \
                 resident on this GPU (cuOccupancyMaxActiveClusters): 2 run as a second wave"
            ),
            "{text}"
        );

        // A grid that follows the sizes: the figure, no warning.
        let residency = record(ResidentUnit::Cta, 1, 4096, false, Ok((264, Some(2))));
        r.warnings = warnings(&residency);
        r.residency = Some(residency);
        r.launch.cluster = None;
        let text = render(&r);
        assert!(
            text.contains(
                "\n  waves       16 (4096 CTAs, at most 264 resident: \
                 cuOccupancyMaxActiveBlocksPerMultiprocessor: 2 per SM x 132 SMs)\n"
            ),
            "{text}"
        );
        assert!(!text.contains("warning"), "{text}");

        // The query failed: unknown, with the reason.
        let residency = record(
            ResidentUnit::Cluster,
            4,
            32,
            true,
            Err(
                "the driver has no cuOccupancyMaxActiveClusters (drivers of CUDA 11.8 and \
                 later have it)"
                    .into(),
            ),
        );
        r.warnings = warnings(&residency);
        r.residency = Some(residency);
        let text = render(&r);
        assert!(
            text.contains(
                "\n  waves       unknown (32 clusters of 4 CTAs; persistent grid): the driver \
                 has no cuOccupancyMaxActiveClusters (drivers of CUDA 11.8 and later have it)\n"
            ),
            "{text}"
        );
        assert!(!text.contains("warning"), "{text}");
    }

    #[test]
    fn byte_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(50 << 20), "50.0 MiB");
        assert_eq!(bytes(1 << 30), "1.0 GiB");
    }
}
