//! The contract between the service and the playground: the `done` events the service sends
//! (docs/api.md), serialized from the runner's own types into `web/tests/fixtures/`, where the
//! playground's unit tests read them (`web/src/runner/tests.rs`). A change to a result type
//! fails here first; `HOPFUSE_BLESS=1 cargo test -p hopfuse-runner --test api_fixtures` rewrites
//! the files, and the playground's tests then say whether it still reads them.

use hopfuse::plan::ConcreteLaunch;
use hopfuse::{DType, IndexType};
use hopfuse_api::run::ClockReading;
use hopfuse_runner::engine::{
    CeilingWhen, CopyCeiling, GemmCeiling, L2Policy, Progress, RunError, RunResult, Stage,
};
use hopfuse_runner::gpu::{DeviceInfo, KernelAttributes, Timing};
use hopfuse_runner::queue::{JobEvent, JobResult, JobStage, JobStatus, WorkerInfo};
use hopfuse_runner::validate::Check;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../web/tests/fixtures/{name}"))
}

/// Compares `event` (as the SSE data of a `done` event) with the fixture, or rewrites it.
fn check(name: &str, event: &JobEvent) {
    let value = serde_json::to_value(event).unwrap();
    let path = fixture_path(name);
    if std::env::var_os("HOPFUSE_BLESS").is_some() {
        let text = serde_json::to_string_pretty(&value).unwrap() + "\n";
        std::fs::write(&path, text).unwrap();
        return;
    }
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (HOPFUSE_BLESS=1 writes it)", path.display()));
    let stored: Value = serde_json::from_str(&text).unwrap();
    // Both sides through the same text and parse: a float written and read back (serde_json
    // without `float_roundtrip`) may differ in its last bit from the one computed.
    let value: Value =
        serde_json::from_str(&serde_json::to_string_pretty(&value).unwrap()).unwrap();
    assert!(
        stored == value,
        "{} is not what the service sends now; if the change is meant, rerun with \
         HOPFUSE_BLESS=1 and check the playground still reads it (cargo test -p hopfuse-web \
         --lib). Now:\n{}",
        path.display(),
        serde_json::to_string_pretty(&value).unwrap()
    );
}

fn done(result: JobResult) -> JobEvent {
    JobEvent {
        stage: JobStage::Done,
        step: None,
        position: None,
        elapsed_ms: 1650.25,
        result: Some(Arc::new(result)),
        tune: None,
    }
}

fn job(status: JobStatus) -> JobResult {
    JobResult {
        job_id: "j1f0c2d3e4a5b6c7".into(),
        status,
        fake: false,
        message: None,
        result: None,
        cubin_cached: None,
        error: None,
        compile: None,
        progress: vec![],
        stderr: None,
        b: None,
        comparison: None,
        worker: Some(WorkerInfo {
            pid: 4242,
            job_in_process: 3,
            spawn_ms: None,
            startup_ms: 310.5,
            ended: None,
        }),
        agent: None,
        tune: None,
        queued_ms: 0.5,
        worker_ms: 21.25,
    }
}

fn check_of(output: &str, passed: bool) -> Check {
    Check {
        output: output.into(),
        dtype: DType::F32,
        elements: 1_024_000,
        rel_l2: if passed { 1.25e-8 } else { 0.5 },
        max_abs: if passed { 4.75e-7 } else { 3.0 },
        tolerance: 1e-5,
        non_finite: if passed { 0 } else { 512 },
        reference_non_finite: 0,
        reference_non_finite_mismatched: 0,
        first_bad: None,
        passed,
    }
}

fn measured(passed: bool) -> RunResult {
    RunResult {
        file: "playground.hf".into(),
        kernel: "add_kernel".into(),
        sizes: BTreeMap::from([("M".into(), 1000), ("N".into(), 1024)]),
        seed: 7,
        index_type: IndexType::I32,
        index_reason: "every tensor has fewer than 2^31 elements".into(),
        launch: ConcreteLaunch {
            grid: [2000, 1, 1],
            block: [128, 1, 1],
            dynamic_smem_bytes: 0,
            cluster: None,
        },
        attributes: KernelAttributes {
            registers_per_thread: 24,
            local_bytes_per_thread: 0,
            static_smem_bytes: 0,
            max_threads_per_block: 1024,
            binary_version: 90,
        },
        cubin_bytes: 5120,
        nvrtc_ms: 41.5,
        device: DeviceInfo {
            name: "NVIDIA H100 80GB HBM3".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            l2_bytes: 52_428_800,
            max_dynamic_smem_optin: 232_448,
            driver_version: 13000,
            total_memory_bytes: 85_045_477_376,
            max_sm_clock_mhz: Some(1980),
        },
        working_set_bytes: 12_288_000,
        l2_policy: L2Policy::Rotate { sets: 9 },
        warmup: 10,
        timing: Timing {
            samples: 100,
            min_us: 2.25,
            median_us: 2.5,
            max_us: 3.0,
        },
        min_global_bytes: 12_288_000,
        gbps: 4915.2,
        copy: Some(CopyCeiling {
            buffer_bytes: 1 << 28,
            timing: Timing {
                samples: 20,
                min_us: 160.0,
                median_us: 170.0,
                max_us: 180.0,
            },
            gbps: 3158.0,
            measured: CeilingWhen::WorkerStart,
            age_s: 12.5,
        }),
        fraction_of_copy: Some(0.9356),
        flops: None,
        tflops: None,
        cublas: None,
        fraction_of_cublas: None,
        cublas_skipped: None,
        reference: None,
        validation: vec![check_of("c", passed)],
        validation_after_timing: vec![check_of("c", passed)],
        passed,
        peers: None,
        profile: None,
        // Not in the playground's fixtures yet (the playground does not show them).
        residency: None,
        warnings: vec![],
        clock: None,
        segments: None,
        documents: Default::default(),
    }
}

/// A passed job with its measurement (a CUBIN compiled for it).
fn passed(result: RunResult) -> JobResult {
    let mut j = job(JobStatus::Passed);
    j.result = Some(Box::new(result));
    j.cubin_cached = Some(false);
    j
}

#[test]
fn a_passed_run() {
    let mut j = passed(measured(true));
    j.progress = vec![
        Progress::Lowering,
        Progress::Reference,
        Progress::Nvrtc,
        Progress::Launch,
        Progress::Validate,
        Progress::Time,
        Progress::Validate,
        Progress::Ceiling,
    ];
    check("done-passed.json", &done(j));
}

#[test]
fn a_matrix_product_against_cublas() {
    let mut r = measured(true);
    r.file = "basics/matmul.hf".into();
    r.kernel = "matmul_kernel".into();
    r.sizes = [("M", 2048), ("N", 2048), ("K", 2048)]
        .map(|(k, v)| (k.to_string(), v))
        .into();
    r.flops = Some(2.0 * 2048f64.powi(3));
    r.timing.median_us = 2000.0;
    r.tflops = Some(2.0 * 2048f64.powi(3) / 2000.0e6);
    r.cublas = Some(GemmCeiling {
        call: "cublasGemmEx(T, N, m=2048, n=2048, k=2048) f32 x f32 -> f32, compute 32F".into(),
        timing: Timing {
            samples: 20,
            min_us: 390.0,
            median_us: 400.0,
            max_us: 420.0,
        },
        tflops: 2.0 * 2048f64.powi(3) / 400.0e6,
        validation: check_of("cuBLAS c", true),
        rounds: 5,
    });
    r.fraction_of_cublas = Some(0.2);
    // The report says how cuBLAS was timed against the kernel: in rounds alternating with the
    // kernel's, or (one round) in one block after it.
    let text = hopfuse_runner::report::render(&r);
    assert!(
        text.contains("compute 32F (in 5 rounds alternating with the kernel's)"),
        "{text}"
    );
    let mut one = r.clone();
    one.cublas.as_mut().unwrap().rounds = 1;
    let text = hopfuse_runner::report::render(&one);
    assert!(text.contains("compute 32F\n"), "{text}");
    // With `--clock`: the SM clock the kernel ran at, and for a product of 16-bit operands its
    // work per SM-cycle against the tensor cores' peak.
    // This f32 product's 2 x 2048^3 in 2,000 us at 1,674.6 MHz over 132 SMs: 38.9 FLOP per
    // SM-cycle, and no tensor-core peak to hold it against.
    let mut clocked = r.clone();
    clocked.clock = Some(ClockReading {
        sm_clock_mhz: 1674.6,
        ctas: 128,
        cta_median_us: 1998.0,
        launch_us: 2000.0,
        flop_per_sm_cycle: Some(38.86),
        fraction_of_tensor_peak: None,
    });
    let text = hopfuse_runner::report::render(&clocked);
    assert!(
        text.contains(
            "\n  clock       1675 MHz SM clock during the last timed launch (thread 0 of 128 CTAs, \
             %clock64 over %globaltimer; the GPU's maximum 1980 MHz)\n  per cycle   38.9 FLOP \
             per SM-cycle over the device's 132 SMs\n"
        ),
        "{text}"
    );
    // A bf16 product's line holds it against the tensor cores' dense 16-bit peak.
    let mut tensor = clocked.clone();
    if let Some(c) = tensor.clock.as_mut() {
        c.flop_per_sm_cycle = Some(3603.6);
        c.fraction_of_tensor_peak = Some(3603.6 / 4096.0);
    }
    let text = hopfuse_runner::report::render(&tensor);
    assert!(
        text.contains(
            "\n  per cycle   3603.6 FLOP per SM-cycle over the device's 132 SMs: 88.0% of the \
             tensor cores' dense 16-bit peak (4096)\n"
        ),
        "{text}"
    );
    check("done-clock.json", &done(passed(clocked)));
    check("done-matmul.json", &done(passed(r)));
}

/// A cluster kernel's launch names its cluster in the CLI report and in the JSON; a kernel
/// without one writes no `cluster` field (the fixtures above are unchanged).
#[test]
fn a_cluster_launch_is_reported() {
    let mut r = measured(true);
    assert!(!hopfuse_runner::report::render(&r).contains("cluster"));
    assert!(serde_json::to_value(&r).unwrap()["launch"]
        .get("cluster")
        .is_none());
    r.launch.cluster = Some([1, 2, 1]);
    let text = hopfuse_runner::report::render(&r);
    assert!(
        text.contains("  cluster     (1,2,1) CTAs (__cluster_dims__)"),
        "{text}"
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["launch"]["cluster"], serde_json::json!([1, 2, 1]));
}

#[test]
fn a_run_with_peers() {
    use hopfuse_runner::peers::{PeerResult, PeersReport};
    let mut r = measured(true);
    let peer = |name: &str, median_us: f64, compile_s: Option<f64>| PeerResult {
        name: name.into(),
        timing: Some(Timing {
            samples: 100,
            min_us: median_us - 0.25,
            median_us,
            max_us: median_us + 0.5,
        }),
        validation: vec![check_of(&format!("{name} c"), true)],
        passed: true,
        compile_s,
        speedup: Some(median_us / 2.5),
        error: None,
    };
    r.peers = Some(PeersReport {
        unavailable: None,
        torch: Some("2.11.0+cu130".into()),
        rounds: 5,
        peers: vec![
            peer("eager", 4.0, None),
            peer("torch.compile", 3.25, Some(14.5)),
        ],
        best: Some("torch.compile".into()),
        speedup: Some(1.3),
        speedup_min: Some(1.25),
        speedup_max: Some(1.34),
    });
    check("done-peers.json", &done(passed(r)));
}

#[test]
fn a_failed_validation() {
    let mut j = job(JobStatus::Failed);
    j.result = Some(Box::new(measured(false)));
    j.cubin_cached = Some(true);
    j.message = Some("the kernel ran but its outputs do not match the float64 reference".into());
    j.progress = vec![Progress::Lowering, Progress::Launch, Progress::Validate];
    check("done-failed.json", &done(j));
}

#[test]
fn an_nvrtc_error() {
    let mut j = job(JobStatus::Error);
    let error = RunError::new(
        Stage::Nvrtc,
        "NVRTC failed to compile add_kernel (NVRTC_ERROR_COMPILATION):\nk.cu(3): error: identifier \"x\" is undefined",
    );
    j.message = Some(error.to_string());
    j.error = Some(error);
    j.progress = vec![Progress::Lowering, Progress::Reference, Progress::Nvrtc];
    check("done-error.json", &done(j));
}

#[test]
fn a_timeout() {
    let mut j = job(JobStatus::TimedOut);
    j.message = Some(hopfuse_runner::queue::TIMEOUT_MESSAGE.into());
    j.progress = vec![Progress::Lowering, Progress::Nvrtc, Progress::Launch];
    check("done-timed-out.json", &done(j));
}

#[test]
fn a_fake_run() {
    use hopfuse_runner::worker::{FakeCompile, FAKE_NOTE};
    let mut j = job(JobStatus::Fake);
    j.fake = true;
    j.message = Some(FAKE_NOTE.into());
    j.compile = Some(Box::new(FakeCompile {
        note: FAKE_NOTE.into(),
        kernel: "add_kernel".into(),
        index_type: IndexType::I32,
        index_reason: "every tensor has fewer than 2^31 elements".into(),
        launch: ConcreteLaunch {
            grid: [2000, 1, 1],
            block: [128, 1, 1],
            dynamic_smem_bytes: 0,
            cluster: None,
        },
        working_set_bytes: 12_288_000,
        cuda_bytes: 2077,
        not_done: vec![],
        segments: None,
    }));
    j.progress = vec![Progress::Lowering];
    check("done-fake.json", &done(j));
}

fn launch(grid: u32, block: u32) -> ConcreteLaunch {
    ConcreteLaunch {
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        dynamic_smem_bytes: 0,
        cluster: None,
    }
}

const COL_NORM_REASON: &str = "`y` reads the column reductions back over the columns (a \
                               normalization over the outer axis); the normalization scheduler \
                               takes rows";

/// `examples/auto/col_norm.hf` at M=16384,N=8192 run as its two kernels (the numbers as the
/// H100 gives them; docs/api.md's example).
#[test]
fn a_split_fusion_run_as_two_kernels() {
    check("done-split.json", &done(passed(split_run())));
}

/// That split run with a profile asked for (issue 34): each kernel profiled alone into its
/// `segments.kernels[].profile` by the runner's own per-kernel report
/// (`profile::segment_report`, the roofline over the kernel's own median against the run's
/// copy ceiling). The metrics are the hand-written exp_2d raw page's
/// (runner/tests/fixtures/ncu/) read by the runner's reader, with each kernel's name,
/// duration and DRAM traffic written in (hand-written figures, as the page says: not measured).
/// Then the same run with the second kernel's ncu past its time limit: that kernel says why.
#[test]
fn a_split_fusion_profiled_kernel_by_kernel() {
    use hopfuse_runner::profile::{self, ProfileError};
    let csv = include_str!("fixtures/ncu/exp_2d_8192_handwritten.csv");
    let exp_2d = recorded_exp_2d().result.unwrap().kernel;
    let page = |kernel: &str, duration_ns: f64, dram_bytes: f64, dram_pct: f64| {
        let mut p = profile::parse_raw_csv(csv, &exp_2d).unwrap();
        p.ncu = "2025.3 (hand-written page)".into();
        p.kernel = kernel.into();
        p.duration_ns = Some(duration_ns);
        p.dram_bytes = Some(dram_bytes);
        p.dram_throughput_pct = Some(dram_pct);
        p
    };
    let mut r = split_run();
    let copy = r.copy.clone();
    let kernels = &mut r.segments.as_mut().unwrap().kernels;
    let pages = [
        page("col_norm_s1_kernel", 212_384.0, 537_170_176.0, 75.48),
        page("col_norm_s2_kernel", 424_768.0, 1_073_741_824.0, 80.0),
    ];
    for (k, p) in kernels.iter_mut().zip(pages) {
        let report = profile::segment_report(Ok(p), k, copy.as_ref(), None);
        assert!(
            matches!(
                &report,
                profile::ProfileReport::Measured {
                    roofline: Some(_),
                    ..
                }
            ),
            "{report:?}"
        );
        k.profile = Some(report);
    }
    let mut j = passed(r.clone());
    j.progress = vec![Progress::Launch, Progress::Profile];
    check("done-split-profile.json", &done(j));
    let second = &mut r.segments.as_mut().unwrap().kernels[1];
    second.profile = Some(profile::segment_report(
        Err(ProfileError::TimedOut(60.0)),
        second,
        copy.as_ref(),
        None,
    ));
    let mut j = passed(r);
    j.progress = vec![Progress::Launch, Progress::Profile];
    check("done-split-profile-partial.json", &done(j));
}

/// The split run of col_norm as a GPU runner reports it (no profile).
fn split_run() -> RunResult {
    use hopfuse_api::run::{IntermediateRun, SegmentRun, SegmentsRun};
    let mut r = measured(true);
    r.file = "col_norm.hf".into();
    r.kernel = "col_norm_s1_kernel + col_norm_s2_kernel".into();
    r.sizes = BTreeMap::from([("M".into(), 16384), ("N".into(), 8192)]);
    r.validation = vec![check_of("y", true)];
    r.validation_after_timing = vec![check_of("y", true)];
    r.segments = Some(SegmentsRun {
        reason: COL_NORM_REASON.into(),
        kernels: vec![
            SegmentRun {
                segment: "col_norm_s1".into(),
                kernel: "col_norm_s1_kernel".into(),
                scheduler: "outer reduction".into(),
                reason: format!("ends before `y`: with it, {COL_NORM_REASON}"),
                launch: launch(512, 256),
                timing: Timing {
                    samples: 100,
                    min_us: 180.5,
                    median_us: 184.25,
                    max_us: 190.0,
                },
                min_global_bytes: 536_903_680,
                gbps: 2914.0,
                profile: None,
            },
            SegmentRun {
                segment: "col_norm_s2".into(),
                kernel: "col_norm_s2_kernel".into(),
                scheduler: "pointwise".into(),
                reason: "the last segment".into(),
                launch: launch(262_144, 128),
                timing: Timing {
                    samples: 100,
                    min_us: 350.0,
                    median_us: 355.5,
                    max_us: 362.0,
                },
                min_global_bytes: 1_073_774_592,
                gbps: 3020.5,
                profile: None,
            },
        ],
        intermediates: vec![IntermediateRun {
            name: "y_sum".into(),
            dtype: DType::F32,
            bytes: 32768,
        }],
    });
    r
}

#[test]
fn a_split_fusion_on_the_fake_worker() {
    use hopfuse_api::job::{FakeKernel, FakeSegments};
    use hopfuse_api::run::IntermediateRun;
    use hopfuse_runner::worker::{FakeCompile, FAKE_NOTE};
    let mut j = job(JobStatus::Fake);
    j.fake = true;
    j.message = Some(FAKE_NOTE.into());
    let kernel = |segment: &str, scheduler: &str, reason: String, launch| FakeKernel {
        segment: segment.into(),
        kernel: format!("{segment}_kernel"),
        scheduler: scheduler.into(),
        reason,
        index_type: IndexType::I32,
        launch,
        profile: None,
    };
    j.compile = Some(Box::new(FakeCompile {
        note: FAKE_NOTE.into(),
        kernel: "col_norm_s1_kernel + col_norm_s2_kernel".into(),
        index_type: IndexType::I32,
        index_reason: "every tensor has fewer than 2^31 elements".into(),
        launch: launch(4, 256),
        working_set_bytes: 2 * 64 * 32 * 4 + 32 * 4,
        cuda_bytes: 6144,
        not_done: vec![],
        segments: Some(FakeSegments {
            reason: COL_NORM_REASON.into(),
            kernels: vec![
                kernel(
                    "col_norm_s1",
                    "outer reduction",
                    format!("ends before `y`: with it, {COL_NORM_REASON}"),
                    launch(4, 256),
                ),
                kernel(
                    "col_norm_s2",
                    "pointwise",
                    "the last segment".into(),
                    launch(4, 128),
                ),
            ],
            intermediates: vec![IntermediateRun {
                name: "y_sum".into(),
                dtype: DType::F32,
                bytes: 128,
            }],
        }),
    }));
    j.progress = vec![Progress::Lowering];
    check("done-split-fake.json", &done(j));
}

#[test]
fn an_ab_comparison() {
    use hopfuse_runner::queue::Comparison;
    let mut j = passed(measured(true));
    j.progress = vec![Progress::Lowering, Progress::Nvrtc, Progress::Launch];
    j.progress
        .extend([Progress::Validate, Progress::Time, Progress::Validate]);
    // B as the queue reports it: its own result, no worker or timing of its own.
    let mut faster = measured(true);
    faster.file = "playground.hf (B)".into();
    faster.timing.median_us = 2.25;
    let mut b = passed(faster);
    b.worker = None;
    b.worker_ms = 0.0;
    j.b = Some(Box::new(b));
    j.comparison = Some(Comparison {
        b_over_a_median: 0.9,
        b_over_a_range: [0.875, 0.9375],
        pairs: 100,
        order: "AB,BA alternating".into(),
        a_median_us: 2.5,
        b_median_us: 2.25,
        same_inputs: Some(true),
        interleaved: true,
        a_kernels: 1,
        b_kernels: 1,
    });
    check("done-ab.json", &done(j));
}

/// The H100 run of `tma/exp_2d` at 8192 x 8192 recorded in docs/ (a real result).
fn recorded_exp_2d() -> JobResult {
    let sse = include_str!("../../docs/recordings/exp_2d_h100.sse");
    let done = sse
        .split("\n\n")
        .find(|b| b.starts_with("event: done"))
        .expect("a done event");
    let event: JobEvent = serde_json::from_str(done.split_once("\ndata: ").unwrap().1).unwrap();
    (*event.result.unwrap()).clone()
}

/// That run with a profile: ncu's metrics from the hand-written raw page of the same kernel
/// and sizes (runner/tests/fixtures/ncu/), read by the runner's own reader, and the roofline
/// against the run's median and the copy ceiling its worker measured.
#[test]
fn a_profiled_run() {
    use hopfuse_runner::profile;
    let mut job = recorded_exp_2d();
    let result = job.result.as_mut().unwrap();
    let csv = include_str!("fixtures/ncu/exp_2d_8192_handwritten.csv");
    let mut p = profile::parse_raw_csv(csv, &result.kernel).unwrap();
    p.ncu = "2025.3 (hand-written page)".into();
    // No tensor-core roof: the recorded run measured none.
    let report = profile::report(Ok(p), result, result.copy.as_ref(), None);
    assert!(matches!(
        &report,
        profile::ProfileReport::Measured {
            roofline: Some(_),
            ..
        }
    ));
    result.profile = Some(report);
    job.progress.push(Progress::Profile);
    check("done-profile.json", &done(job));
}

/// A runner without ncu: the run passes, and its profile says why there is none.
#[test]
fn a_profiled_run_without_ncu() {
    use hopfuse_runner::profile;
    let mut job = recorded_exp_2d();
    let result = job.result.as_mut().unwrap();
    result.profile = Some(profile::report(
        Err(profile::ProfileError::NoNcu),
        result,
        result.copy.as_ref(),
        None,
    ));
    job.progress.push(Progress::Profile);
    check("done-profile-unavailable.json", &done(job));
}
