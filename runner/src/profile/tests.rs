//! Reading ncu's raw page, the report a run gets, and the roofline picture.

use super::*;
use crate::profile::report::Geometry;

/// A raw page as `ncu --import R --csv --page raw --print-units base` writes it for
/// `tma/exp_2d` at 8192 x 8192 on an H100: hand-written with ncu's metric names (no recorded
/// page was kept yet; `scripts/profile-device-check.sh` records one next to it).
const HANDWRITTEN: &str = include_str!("../../tests/fixtures/ncu/exp_2d_8192_handwritten.csv");

/// What a Warp State section without the metrics named outright gives: the stalls of the
/// older family, FP instructions and DRAM bytes only as rates.
const RATES_ONLY: &str = "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\",\"dram__bytes.sum.per_second\",\"smsp__cycles_elapsed.avg.per_second\",\"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed\",\"smsp__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed\",\"smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio\",\"smsp__average_warp_latency_issue_stalled_barrier.ratio\",\"smsp__average_warp_latency_issue_stalled_selected.ratio\",\"smsp__average_warp_latency_issue_stalled_barrier_not_issued.ratio\"\n\
\"\",\"\",\"ns\",\"byte/second\",\"cycle/second\",\"inst/cycle\",\"inst/cycle\",\"\",\"\",\"\",\"\"\n\
\"0\",\"k_kernel\",\"2,000\",\"1,000,000,000,000\",\"1,500,000,000\",\"100\",\"50\",\"9.5\",\"1.25\",\"4\",\"30\"\n";

#[test]
fn the_handwritten_h100_page_gives_every_metric_of_the_issue() {
    let p = parse_raw_csv(HANDWRITTEN, "exp_2d_kernel").unwrap();
    assert_eq!(p.kernel, "exp_2d_kernel");
    assert_eq!(p.duration_ns, Some(212_384.0));
    assert_eq!(p.dram_bytes, Some(268_701_952.0 + 268_468_224.0));
    assert_eq!(p.dram_throughput_pct, Some(75.48));
    assert_eq!(p.l2_hit_rate_pct, Some(49.93));
    assert_eq!(p.sm_throughput_pct, Some(21.84));
    assert_eq!(p.tensor_pipe_pct, Some(0.0));
    assert_eq!(p.achieved_occupancy_pct, Some(86.52));
    assert_eq!(p.shared_bank_conflicts, Some(0.0));
    assert_eq!(p.warp_cycles_per_issued, Some(31.98));
    // The Warp State section's family; `selected` (issuing) and `_not_issued` left out, zeros
    // dropped, largest first, at most TOP_STALLS.
    let reasons: Vec<(&str, f64)> = p
        .stalls
        .iter()
        .map(|s| (s.reason.as_str(), s.value))
        .collect();
    assert_eq!(
        reasons,
        [
            ("long_scoreboard", 18.42),
            ("barrier", 6.17),
            ("wait", 2.06),
            ("lg_throttle", 1.34),
            ("short_scoreboard", 0.87),
            ("drain", 0.82),
        ]
    );
    assert_eq!(p.stall_unit, "warp cycles per issued instruction");
    // fadd + fmul + 2 ffma, f16 and f64 all zero.
    assert_eq!(p.flops, Some(67_108_864.0 * 2.0 + 2.0 * 268_435_456.0));
    assert!(p.metrics.contains_key("sm__cycles_elapsed.avg.per_second"));
    assert!(!p.metrics.contains_key("Block Size"));
}

#[test]
fn rates_and_the_older_stall_family_are_read_when_the_counts_are_missing() {
    let p = parse_raw_csv(RATES_ONLY, "k_kernel").unwrap();
    // 1e12 B/s over 2 us.
    assert!((p.dram_bytes.unwrap() - 2e6).abs() < 1e-6);
    // (100 ffma * 2 + 50 fadd) per cycle over 1.5e9 cycles/s * 2e-6 s = 3000 cycles.
    let flops = p.flops.unwrap();
    assert!((flops - 250.0 * 3000.0).abs() < 1e-6, "{flops}");
    let reasons: Vec<&str> = p.stalls.iter().map(|s| s.reason.as_str()).collect();
    assert_eq!(reasons, ["long_scoreboard", "barrier"]);
    assert!(matches!(
        parse_raw_csv(RATES_ONLY, "other_kernel"),
        Err(ProfileError::NoKernel { .. })
    ));
    assert!(matches!(
        parse_raw_csv("==PROF== nothing\n", "k"),
        Err(ProfileError::Failed(_))
    ));
    assert_eq!(raw_page::kernel_names(RATES_ONLY), ["k_kernel"]);
}

/// Every raw page under `runner/tests/fixtures/ncu/` (hand-written or recorded on the H100 by
/// `scripts/profile-device-check.sh`) must give the issue's metrics, so a recorded page with
/// names this reader does not know fails here.
#[test]
fn every_kept_raw_page_gives_the_issues_metrics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ncu");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("csv") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let kernel = raw_page::kernel_names(&text)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("{}: no launch", path.display()));
        let p = parse_raw_csv(&text, &kernel).unwrap();
        let name = path.display();
        assert!(p.duration_ns.is_some(), "{name}: duration");
        assert!(p.dram_bytes.is_some_and(|b| b > 0.0), "{name}: DRAM bytes");
        assert!(p.dram_throughput_pct.is_some(), "{name}: DRAM throughput");
        assert!(p.l2_hit_rate_pct.is_some(), "{name}: L2 hit rate");
        assert!(p.sm_throughput_pct.is_some(), "{name}: SM throughput");
        assert!(p.tensor_pipe_pct.is_some(), "{name}: tensor pipes");
        assert!(p.achieved_occupancy_pct.is_some(), "{name}: occupancy");
        assert!(!p.stalls.is_empty(), "{name}: warp stalls");
        assert!(p.shared_bank_conflicts.is_some(), "{name}: bank conflicts");
        assert!(p.flops.is_some(), "{name}: FP instruction counts");
        seen += 1;
    }
    assert!(seen >= 1, "no raw page in {}", dir.display());
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
    // Unknown names are retried with fewer; a permission error never is.
    assert!(unknown_name(
        "==ERROR== Failed to find metric dram__bytes_read.sum"
    ));
    assert!(unknown_name("==ERROR== Could not find section 'X'"));
    assert!(!unknown_name(
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU \
         Performance Counters (metrics)"
    ));
}

#[test]
fn the_profiling_child_runs_this_binary_once_for_the_kernel() {
    let req = ProfileRequest {
        file: "examples/tma/exp_2d.hf".into(),
        sizes: [("M".to_string(), 4096), ("N".to_string(), 4096)].into(),
        seed: 1,
        index: None,
        documents: Default::default(),
        kernel: "exp_2d_kernel".into(),
        time_limit: Duration::from_secs(60),
        keep_csv: None,
    };
    let exe = Path::new("/bin/hopfuse");
    let a = ncu_args(&req, exe, Path::new("/tmp/r"), &SECTIONS, &METRICS).join(" ");
    assert!(a.starts_with("--export /tmp/r --force-overwrite --target-processes all"));
    assert!(a.contains("--kernel-name exp_2d_kernel --launch-count 1"));
    assert!(a.contains("--section WarpStateStats"));
    assert!(a.contains("--metrics gpu__time_duration.sum,dram__bytes_read.sum,"));
    assert!(a.ends_with(
        "/bin/hopfuse run examples/tma/exp_2d.hf --size M=4096,N=4096 --iters 1 --warmup 0 \
         --seed 1 --no-ceiling"
    ));
    let fewer = ncu_args(&req, exe, Path::new("/tmp/r"), &CORE_SECTIONS, &[]).join(" ");
    assert!(!fewer.contains("--metrics") && !fewer.contains("RooflineChart"));
    // A run on packed documents is profiled on the same inputs.
    let eight = std::num::NonZeroU32::new(8).unwrap();
    let documents = ProfileRequest {
        documents: [("doc_q".to_string(), eight), ("doc_k".to_string(), eight)].into(),
        ..req
    };
    let a = ncu_args(&documents, exe, Path::new("/tmp/r"), &SECTIONS, &METRICS).join(" ");
    assert!(
        a.ends_with("--seed 1 --no-ceiling --documents doc_k,doc_q:8"),
        "{a}"
    );
}

fn roofline(tensor: Option<f64>) -> Roofline {
    let p = parse_raw_csv(HANDWRITTEN, "exp_2d_kernel").unwrap();
    // The recorded run's median, copy 3007 GB/s.
    Roofline::new(&p, None, 204.672e-6, Some(3.007e12), tensor).unwrap()
}

#[test]
fn the_roofline_point_is_the_runs_flops_over_ncus_bytes() {
    let r = roofline(None);
    let flops = 67_108_864.0 * 2.0 + 2.0 * 268_435_456.0;
    let bytes = 268_701_952.0 + 268_468_224.0;
    assert!((r.intensity - flops / bytes).abs() < 1e-12);
    assert!((r.flops_per_s - flops / 204.672e-6).abs() < 1.0);
    assert!((r.bytes_per_s - bytes / 204.672e-6).abs() < 1.0);
    assert_eq!(r.flops_from, "sass");
    // Memory-bound: the roof at its intensity is the copy slope.
    assert!((r.roof(r.intensity) - 3.007e12 * r.intensity).abs() < 1.0);
    assert!(r.fraction_of_roof() > 0.8 && r.fraction_of_roof() < 1.0);
    // A matrix product counts the plan's 2 M N K.
    let p = parse_raw_csv(HANDWRITTEN, "exp_2d_kernel").unwrap();
    let mm = Roofline::new(&p, Some(1e12), 1e-3, Some(3e12), Some(600e12)).unwrap();
    assert_eq!(mm.flops_from, "plan");
    assert_eq!(mm.ridge(), Some(200.0));
    assert_eq!(mm.roof(1e6), 600e12);
}

#[test]
fn a_missing_number_is_named_instead_of_a_roofline() {
    let p = parse_raw_csv(HANDWRITTEN, "exp_2d_kernel").unwrap();
    let why = |p: &Profile, copy| Roofline::new(p, None, 1e-4, copy, None).unwrap_err();
    assert!(why(&p, None).contains("no copy ceiling"));
    let no_flops = Profile {
        flops: None,
        ..p.clone()
    };
    assert!(why(&no_flops, Some(3e12)).contains("no FLOP count"));
    let zero = Profile {
        flops: Some(0.0),
        ..p.clone()
    };
    assert!(why(&zero, Some(3e12)).contains("FLOP = 0"));
    let no_bytes = Profile {
        dram_bytes: None,
        ..p
    };
    assert!(why(&no_bytes, Some(3e12)).contains("DRAM"));
}

/// An attribute (a number) of the first element with `class`.
fn attr(svg: &roxmltree::Document, class: &str, name: &str) -> f64 {
    svg.descendants()
        .find(|n| {
            n.attribute("class")
                .is_some_and(|c| c.split(' ').any(|c| c == class))
        })
        .unwrap_or_else(|| panic!("no .{class}"))
        .attribute(name)
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn the_roofline_svg_draws_the_point_under_its_roofs() {
    for tensor in [None, Some(600e12)] {
        let r = roofline(tensor);
        let text = r.svg();
        let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
        let g: Geometry = r.geometry();
        let (cx, cy) = (attr(&doc, "rl-point", "cx"), attr(&doc, "rl-point", "cy"));
        assert!((cx - g.sx(r.intensity)).abs() < 0.1 && (cy - g.sy(r.flops_per_s)).abs() < 0.1);
        // Inside the plot.
        let [l, t, rt, b] = g.plot;
        assert!(
            cx > l && cx < rt && cy > t && cy < b,
            "({cx}, {cy}) outside {:?}",
            g.plot
        );
        // Below the memory roof at its intensity (y grows down): it achieves less than the copy.
        let (x1, y1, x2, y2) = (
            attr(&doc, "rl-memory", "x1"),
            attr(&doc, "rl-memory", "y1"),
            attr(&doc, "rl-memory", "x2"),
            attr(&doc, "rl-memory", "y2"),
        );
        let roof_y = y1 + (y2 - y1) * (cx - x1) / (x2 - x1);
        assert!(cy > roof_y, "point at y {cy}, roof at {roof_y}");
        // The roof's slope is one decade of FLOP/s per decade of intensity.
        let decade_x = g.sx(10.0) - g.sx(1.0);
        let decade_y = g.sy(1e12) - g.sy(1e13);
        assert!(((y1 - y2) / (x2 - x1) - decade_y / decade_x).abs() < 1e-3);
        assert!(text.contains("copy 3.01 TB/s (measured)"), "{text}");
        match tensor {
            Some(t) => {
                assert!(text.contains("cuBLAS 600 TFLOP/s"));
                // The tensor roof starts where the memory roof ends (the ridge) at its height.
                assert!((attr(&doc, "rl-tensor", "x1") - x2).abs() < 0.1);
                assert!((attr(&doc, "rl-tensor", "y1") - g.sy(t)).abs() < 0.1);
                assert!((y2 - g.sy(t)).abs() < 0.1);
            }
            None => assert!(!text.contains("rl-tensor")),
        }
        // Every decade of both axes is labelled.
        let labels: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .collect();
        for v in g.y.decades() {
            let want = report::si(v);
            assert!(labels.contains(&want.as_str()), "{want} not in {labels:?}");
        }
        assert!(labels.iter().any(|l| l.contains("arithmetic intensity")));
    }
}

#[test]
fn a_report_says_why_there_is_no_profile_without_failing_the_run() {
    let r = |e| match super::report(Err(e), &run_result(), None, None) {
        ProfileReport::Unavailable { reason, message } => (reason, message),
        other => panic!("{other:?}"),
    };
    let (reason, message) = r(ProfileError::NoNcu);
    assert_eq!(reason, Unavailable::NoNcu);
    assert!(message.contains("ncu") && message.contains(NCU_ENV));
    let (reason, message) = r(ProfileError::NoPermission);
    assert_eq!(reason, Unavailable::NoPermission);
    assert!(message.contains("ERR_NVGPUCTRPERM"));
    let json = serde_json::to_value(super::report(
        Err(ProfileError::NoNcu),
        &run_result(),
        None,
        None,
    ))
    .unwrap();
    assert_eq!(json["unavailable"]["reason"], "no_ncu", "{json}");
    // A measured one carries the roofline against the copy ceiling it was given.
    let p = parse_raw_csv(HANDWRITTEN, "exp_2d_kernel").unwrap();
    let copy = CopyCeiling {
        buffer_bytes: 1 << 30,
        timing: crate::gpu::Timing {
            samples: 50,
            min_us: 700.0,
            median_us: 714.0,
            max_us: 720.0,
        },
        gbps: 3007.0,
        measured: crate::engine::CeilingWhen::WorkerStart,
        age_s: 3.0,
    };
    let roof = TensorRoof {
        call: "cublasGemmEx(N, N, m=8192, n=8192, k=8192) bf16 x bf16 -> bf16, compute 32F".into(),
        flops_per_s: 700e12,
    };
    match super::report(Ok(p.clone()), &run_result(), Some(&copy), Some(&roof)) {
        ProfileReport::Measured {
            roofline: Some(r),
            roofline_missing: None,
            ..
        } => {
            assert_eq!(r.copy_bytes_per_s, 3007e9);
            assert_eq!(r.tensor_flops_per_s, Some(700e12));
            assert_eq!(r.tensor_ceiling.as_deref(), Some(roof.call.as_str()));
        }
        other => panic!("{other:?}"),
    }
    // A matrix product's roof is cuBLAS on its own shape, whatever else was measured.
    let mut mm = run_result();
    mm.flops = Some(1e12);
    mm.cublas = Some(crate::engine::GemmCeiling {
        call: "cublasGemmEx(N, N, m=4096, n=4096, k=4096) f32 x f32 -> f32, compute 32F".into(),
        timing: copy.timing.clone(),
        tflops: 50.0,
        validation: mm.validation[0].clone(),
        rounds: 5,
    });
    match super::report(Ok(p.clone()), &mm, Some(&copy), Some(&roof)) {
        ProfileReport::Measured {
            roofline: Some(r), ..
        } => {
            assert_eq!(r.tensor_flops_per_s, Some(50e12));
            assert!(r
                .tensor_ceiling
                .unwrap()
                .ends_with("(this product's shape)"));
            assert_eq!(r.flops_from, "plan");
        }
        other => panic!("{other:?}"),
    }
    match super::report(Ok(p), &run_result(), None, None) {
        ProfileReport::Measured {
            roofline: None,
            roofline_missing: Some(why),
            ..
        } => assert!(why.contains("copy ceiling")),
        other => panic!("{other:?}"),
    }
    assert!(render(&super::report(
        Err(ProfileError::NoNcu),
        &run_result(),
        None,
        None
    ))
    .starts_with("no profile: Nsight Compute (ncu) not found"));
}

/// The run of the recording in docs/ (exp_2d at 8192 x 8192 on the H100).
fn run_result() -> RunResult {
    let sse = include_str!("../../../docs/recordings/exp_2d_h100.sse");
    let done = sse
        .split("\n\n")
        .find(|b| b.starts_with("event: done"))
        .unwrap();
    let data: serde_json::Value =
        serde_json::from_str(done.split_once("\ndata: ").unwrap().1).unwrap();
    serde_json::from_value(data["result"]["result"].clone()).unwrap()
}

/// A stand-in for ncu: a shell script that logs each call's arguments to `calls.log` next to
/// it, then runs `body`.
fn fake_ncu(name: &str, body: &str) -> (PathBuf, PathBuf) {
    let dir = tempdir(name).unwrap();
    let script = dir.join("ncu");
    let log = dir.join("calls.log");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$*\" >> '{}'\n{body}\n", log.display()),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    (script, log)
}

fn exp_2d_request() -> ProfileRequest {
    ProfileRequest {
        file: "examples/tma/exp_2d.hf".into(),
        sizes: [("M".to_string(), 8192), ("N".to_string(), 8192)].into(),
        seed: 1,
        index: Some("i32".into()),
        documents: Default::default(),
        kernel: "exp_2d_kernel".into(),
        time_limit: Duration::from_secs(30),
        keep_csv: None,
    }
}

/// An ncu that does not know a metric is asked again without the named metrics; the report is
/// read back from its raw page.
#[test]
fn an_ncu_that_lacks_a_metric_is_asked_again_and_its_raw_page_read() {
    let csv = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ncu/exp_2d_8192_handwritten.csv");
    let (ncu, log) = fake_ncu(
        "retry",
        &format!(
            "case \"$*\" in\n\
             *--version*) echo 'NVIDIA (R) Nsight Compute Command Line Profiler'; echo 'Version 2025.3.0.0 (fake)';;\n\
             *--import*) cat '{}';;\n\
             *--metrics*) echo '==ERROR== Failed to find metric dram__bytes_read.sum' >&2; exit 1;;\n\
             *) echo '==PROF== Report: r.ncu-rep';;\n\
             esac",
            csv.display()
        ),
    );
    let kept = log.with_file_name("kept.csv");
    let req = ProfileRequest {
        keep_csv: Some(kept.clone()),
        ..exp_2d_request()
    };
    let p = profile_with(&ncu, &req, Path::new("/bin/hopfuse")).unwrap();
    assert_eq!(p.ncu, "Version 2025.3.0.0 (fake)");
    assert_eq!(p.stalls[0].reason, "long_scoreboard");
    assert_eq!(
        std::fs::read_to_string(&kept).unwrap(),
        std::fs::read_to_string(&csv).unwrap()
    );
    let calls = std::fs::read_to_string(&log).unwrap();
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert!(calls[1].contains("--metrics"));
    assert!(!calls[2].contains("--metrics") && calls[2].contains("SpeedOfLight_RooflineChart"));
    assert!(calls[2].contains("/bin/hopfuse run examples/tma/exp_2d.hf --size M=8192,N=8192"));
    assert!(calls[3].starts_with("--import"));
    let _ = std::fs::remove_dir_all(log.parent().unwrap());
}

#[test]
fn no_permission_and_no_launch_are_said_once() {
    let (ncu, log) = fake_ncu(
        "perm",
        "case \"$*\" in *--version*) echo v;; *) echo '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters (metrics)' >&2; exit 1;; esac",
    );
    let r = profile_with(&ncu, &exp_2d_request(), Path::new("/bin/hopfuse"));
    assert!(matches!(r, Err(ProfileError::NoPermission)), "{r:?}");
    // Not retried: the message names metrics but is about permission.
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 2);
    let _ = std::fs::remove_dir_all(log.parent().unwrap());
    let (ncu, log) = fake_ncu(
        "nokernel",
        "case \"$*\" in *--version*) echo v;; *) echo '==WARNING== No kernels were profiled.';; esac",
    );
    let r = profile_with(&ncu, &exp_2d_request(), Path::new("/bin/hopfuse"));
    assert!(matches!(r, Err(ProfileError::NoKernel { .. })), "{r:?}");
    let _ = std::fs::remove_dir_all(log.parent().unwrap());
    // A limit past which every attempt is killed.
    let (ncu, log) = fake_ncu(
        "slow",
        "case \"$*\" in *--version*) echo v;; *) sleep 30;; esac",
    );
    let req = ProfileRequest {
        time_limit: Duration::from_millis(400),
        ..exp_2d_request()
    };
    let r = profile_with(&ncu, &req, Path::new("/bin/hopfuse"));
    assert!(matches!(r, Err(ProfileError::TimedOut(_))), "{r:?}");
    assert!(r
        .unwrap_err()
        .to_string()
        .contains("did not finish in 0.4 s"));
    let _ = std::fs::remove_dir_all(log.parent().unwrap());
}

/// In the service the profile ends before the job's own limit (which kills the worker, not
/// ncu's group); with no time left there is no profile, and it says why.
#[test]
fn the_profile_fits_in_what_the_job_has_left() {
    let job = ProfileLimits {
        time_limit_s: 60.0,
        job_limit_s: Some(120.0),
    };
    let s = Duration::from_secs;
    assert_eq!(job.limit_after(s(10)), s(60));
    assert_eq!(job.limit_after(s(100)), s(15));
    assert_eq!(job.limit_after(s(118)), Duration::ZERO);
    let alone = ProfileLimits {
        job_limit_s: None,
        ..job
    };
    assert_eq!(alone.limit_after(s(1000)), s(60));
    match profile_program("", &run_result(), None, Duration::ZERO, None) {
        ProfileReport::Unavailable { reason, message } => {
            assert_eq!(reason, Unavailable::TimedOut);
            assert!(message.contains("none was left for ncu"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

/// A fusion run as two kernels: ncu once per kernel (`--kernel-name` each), each profile in its
/// segment with its roofline point over that kernel's own time; the run's own profile stays
/// empty. With no time left, each kernel says so.
#[test]
fn each_kernel_of_a_fusion_run_as_several_is_profiled() {
    let csv = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ncu/exp_2d_8192_handwritten.csv");
    // The profiling call leaves its kernel's name next to its report; the import reads the
    // page with that name in place of exp_2d's.
    let (ncu, log) = fake_ncu(
        "segments",
        &format!(
            "case \"$*\" in\n\
             *--version*) echo 'Version 2025.3.0.0 (fake)';;\n\
             *--import*) k=$(cat \"$(dirname \"$2\")/kernel\"); sed \"s/exp_2d_kernel/$k/\" '{}';;\n\
             *) while [ $# -gt 0 ]; do case \"$1\" in --export) r=\"$2\";; --kernel-name) k=\"$2\";; esac; shift; done\n\
                echo \"$k\" > \"$(dirname \"$r\")/kernel\"; echo '==PROF== Report: r.ncu-rep';;\n\
             esac",
            csv.display()
        ),
    );
    let mut r = run_result();
    let segment = |kernel: &str, median_us: f64| {
        let mut timing = r.timing.clone();
        timing.median_us = median_us;
        hopfuse_api::run::SegmentRun {
            segment: kernel.trim_end_matches("_kernel").into(),
            kernel: kernel.into(),
            scheduler: "pointwise".into(),
            reason: "r".into(),
            launch: r.launch.clone(),
            timing,
            min_global_bytes: 1 << 20,
            gbps: 1.0,
            profile: None,
        }
    };
    r.segments = Some(hopfuse_api::run::SegmentsRun {
        reason: "no scheduler takes it whole".into(),
        kernels: vec![segment("f_s1_kernel", 100.0), segment("f_s2_kernel", 50.0)],
        intermediates: vec![],
    });
    let req = request_for("f.hf".into(), &r, Duration::from_secs(30), None);
    let copy = CopyCeiling {
        gbps: 3000.0,
        ..r.copy.clone().expect("the recorded run measured its copy")
    };
    let mut roof_asked = 0;
    profile_segments_with(
        &mut r,
        &req,
        Some(&copy),
        &mut || {
            roof_asked += 1;
            None
        },
        &mut |req| profile_with(&ncu, req, Path::new("/bin/hopfuse")),
    );
    assert_eq!(
        roof_asked, 1,
        "the roof is measured once for all the kernels"
    );
    assert!(r.profile.is_none());
    let calls = std::fs::read_to_string(&log).unwrap();
    let profiled: Vec<&str> = calls
        .lines()
        .filter(|l| l.starts_with("--export"))
        .collect();
    assert_eq!(profiled.len(), 2, "{calls}");
    assert!(profiled[0].contains("--kernel-name f_s1_kernel --launch-count 1"));
    assert!(profiled[1].contains("--kernel-name f_s2_kernel --launch-count 1"));
    let kernels = &r.segments.as_ref().unwrap().kernels;
    let points: Vec<Roofline> = kernels
        .iter()
        .map(|k| match k.profile.as_ref().unwrap() {
            ProfileReport::Measured {
                profile, roofline, ..
            } => {
                assert_eq!(profile.kernel, k.kernel);
                roofline.clone().expect("a roofline point")
            }
            other => panic!("{other:?}"),
        })
        .collect();
    // The same page, each over its own kernel's time: the faster kernel moved its bytes in half
    // the time.
    let ratio = points[1].bytes_per_s / points[0].bytes_per_s;
    assert!((ratio - 2.0).abs() < 1e-9, "{ratio}");
    let _ = std::fs::remove_dir_all(log.parent().unwrap());

    // No time left: each kernel says so, and no roof is measured.
    let req = ProfileRequest {
        time_limit: Duration::ZERO,
        ..req
    };
    profile_segments_with(
        &mut r,
        &req,
        None,
        &mut || panic!("no roof without a profile"),
        &mut |_| panic!("no ncu without time"),
    );
    for k in &r.segments.as_ref().unwrap().kernels {
        match k.profile.as_ref().unwrap() {
            ProfileReport::Unavailable { reason, .. } => assert_eq!(*reason, Unavailable::TimedOut),
            other => panic!("{other:?}"),
        }
    }
}
