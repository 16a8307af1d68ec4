use super::health::describe_health;
use super::*;
use hopfuse_api::job::JobEvent;
use hopfuse_api::service::{Health, Link, LinkBody};

#[test]
fn refusals_are_in_plain_words() {
    let s = Settings::default();
    let msg = ApiError::Http(
        503,
        "runs are unavailable: no usable GPU (CUDA_VISIBLE_DEVICES is empty); compiling works (POST /api/compile)".into(),
    )
    .describe(&s);
    assert_eq!(
        msg,
        "The runner cannot run programs right now: no usable GPU (CUDA_VISIBLE_DEVICES is empty). \
         Compiling works in the page as usual."
    );
    let msg = ApiError::Http(401, "wrong token".into()).describe(&s);
    assert!(
        !msg.contains("HTTP") && msg.contains("wrong token"),
        "{msg}"
    );
}

// The `done` events the service sends, serialized from the runner's types by
// runner/tests/api_fixtures.rs.
const PASSED: &str = include_str!("../../tests/fixtures/done-passed.json");
const FAILED: &str = include_str!("../../tests/fixtures/done-failed.json");
const ERROR: &str = include_str!("../../tests/fixtures/done-error.json");
const TIMED_OUT: &str = include_str!("../../tests/fixtures/done-timed-out.json");
const FAKE: &str = include_str!("../../tests/fixtures/done-fake.json");
const AB: &str = include_str!("../../tests/fixtures/done-ab.json");
const MATMUL: &str = include_str!("../../tests/fixtures/done-matmul.json");
const CLOCK: &str = include_str!("../../tests/fixtures/done-clock.json");
const SPLIT: &str = include_str!("../../tests/fixtures/done-split.json");
const SPLIT_FAKE: &str = include_str!("../../tests/fixtures/done-split-fake.json");

#[test]
fn reads_a_fusion_run_as_several_kernels_with_a_row_per_kernel() {
    let m = parse_result(SPLIT).measured.expect("a measurement");
    // The whole: every kernel launched in order.
    assert_eq!(m.median_us, Some(2.5));
    let k = m.kernels.expect("the kernels of the split");
    assert!(
        k.reason.starts_with("`y` reads the column reductions back"),
        "{}",
        k.reason
    );
    assert_eq!(
        k.rows
            .iter()
            .map(|r| (r.kernel.as_str(), r.scheduler.as_str(), r.median_us, r.gbps))
            .collect::<Vec<_>>(),
        [
            (
                "col_norm_s1_kernel",
                "outer reduction",
                Some(184.25),
                Some(2914.0)
            ),
            ("col_norm_s2_kernel", "pointwise", Some(355.5), Some(3020.5)),
        ]
    );
    assert_eq!(k.rows[0].launch, "grid (512, 1, 1)  block (256, 1, 1)");
    assert!(
        k.rows[0].reason.starts_with("ends before `y`"),
        "{}",
        k.rows[0].reason
    );
    assert_eq!(k.rows[1].reason, "the last segment");
    assert_eq!(k.intermediates, ["y_sum: f32, 32.0 KiB"]);
    // One kernel has no rows.
    assert!(parse_result(PASSED).measured.unwrap().kernels.is_none());
}

#[test]
fn a_fake_split_run_lists_each_kernel_without_numbers() {
    let v = parse_result(SPLIT_FAKE);
    assert!(v.measured.is_none());
    let k = v
        .fake
        .expect("what the fake worker checked")
        .kernels
        .expect("the kernels of the split");
    assert_eq!(
        k.rows
            .iter()
            .map(|r| (r.kernel.as_str(), r.launch.as_str(), r.median_us, r.gbps))
            .collect::<Vec<_>>(),
        [
            (
                "col_norm_s1_kernel",
                "grid (4, 1, 1)  block (256, 1, 1)",
                None,
                None
            ),
            (
                "col_norm_s2_kernel",
                "grid (4, 1, 1)  block (128, 1, 1)",
                None,
                None
            ),
        ]
    );
    assert_eq!(k.intermediates, ["y_sum: f32, 128 B"]);
    assert!(parse_result(FAKE).fake.unwrap().kernels.is_none());
}

#[test]
fn reads_a_run_with_a_clock_reading() {
    // `hopfuse run --clock` adds `result.clock`, which the playground does not show; such a
    // result still reads as the same measurement.
    assert!(CLOCK.contains("\"sm_clock_mhz\""));
    let m = parse_result(CLOCK).measured.expect("a measurement");
    assert_eq!(m.tflops, parse_result(MATMUL).measured.unwrap().tflops);
}

#[test]
fn reads_a_matrix_product_against_cublas() {
    let m = parse_result(MATMUL).measured.expect("a measurement");
    let t = 2.0 * 2048f64.powi(3);
    assert_eq!(m.tflops, Some(t / 2000.0e6));
    assert_eq!(m.cublas_tflops, Some(t / 400.0e6));
    assert_eq!(m.cublas_ratio, Some(0.2));
    let call = m.cublas_call.unwrap();
    assert!(call.starts_with("cublasGemmEx(T, N"), "{call}");
    // How cuBLAS was timed against the kernel.
    assert!(
        call.ends_with("compute 32F (5 rounds alternating with the kernel's)"),
        "{call}"
    );
    let c = m.cublas_check.expect("cuBLAS's own check");
    assert!(c.passed && c.output == "cuBLAS c");
    assert!(m.cublas_skipped.is_none());
    // A run that is not a matrix product has none of it.
    let p = parse_result(PASSED).measured.unwrap();
    assert!(p.tflops.is_none() && p.cublas_tflops.is_none() && p.cublas_check.is_none());
}

#[test]
fn a_cluster_launch_shows_its_cluster() {
    let with = PASSED.replacen(
        "\"dynamic_smem_bytes\": 0",
        "\"dynamic_smem_bytes\": 0, \"cluster\": [1, 2, 1]",
        1,
    );
    assert_ne!(
        with, PASSED,
        "the fixture's launch has no dynamic shared memory field"
    );
    let m = parse_result(&with).measured.expect("a measurement");
    assert_eq!(
        m.launch.as_deref(),
        Some("grid (2000, 1, 1)  block (128, 1, 1)  cluster (1, 2, 1)")
    );
}

#[test]
fn reads_a_measured_run() {
    let v = parse_result(PASSED);
    assert_eq!(v.status, "passed");
    assert!(v.fake.is_none() && v.error.is_none());
    let m = v.measured.expect("a measurement");
    assert!(m.passed);
    assert_eq!(m.median_us, Some(2.5));
    assert_eq!(
        (m.min_us, m.max_us, m.samples),
        (Some(2.25), Some(3.0), Some(100))
    );
    assert_eq!(m.gbps, Some(4915.2));
    assert_eq!(m.ceiling_gbps, Some(3158.0));
    assert_eq!(m.ratio, Some(0.9356));
    assert_eq!(m.registers, Some(24));
    assert_eq!(
        (m.static_smem, m.dynamic_smem, m.local_bytes),
        (Some(0), Some(0), Some(0))
    );
    assert_eq!(m.device.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(
        m.launch.as_deref(),
        Some("grid (2000, 1, 1)  block (128, 1, 1)")
    );
    assert_eq!(m.seed, Some(7));
    assert_eq!(m.nvrtc_ms, Some(41.5));
    assert_eq!(m.cubin_cached, Some(false));
    assert_eq!(
        m.index.as_deref(),
        Some("i32 (every tensor has fewer than 2^31 elements)")
    );
    assert_eq!(
        m.l2_policy.as_deref(),
        Some("rotating 9 copies of every tensor")
    );
    assert_eq!(m.checks.len(), 1);
    let c = &m.checks[0];
    assert!(c.passed && c.output == "c");
    assert_eq!(
        (c.rel_l2, c.tolerance, c.elements),
        (Some(1.25e-8), Some(1e-5), Some(1_024_000))
    );
    assert_eq!(m.checks_after_timing.len(), 1);
    assert_eq!(v.progress.first().map(String::as_str), Some("lowering"));
    assert_eq!(v.job_id.as_deref(), Some("j1f0c2d3e4a5b6c7"));
    // GET /api/jobs/{id} answers the result itself (with "done": true).
    let job: Value = serde_json::from_str(PASSED).unwrap();
    let direct = parse_result(&job["result"].to_string());
    assert_eq!(direct, parse_result(PASSED));
}

#[test]
fn reads_a_failed_validation() {
    let v = parse_result(FAILED);
    assert_eq!(v.status, "failed");
    let m = v.measured.expect("a failed run is still measured");
    assert!(!m.passed && !m.checks[0].passed);
    assert_eq!(m.checks[0].non_finite, 512);
    assert_eq!(m.cubin_cached, Some(true));
    assert!(v.message.unwrap().contains("do not match"));
}

#[test]
fn reads_errors_and_timeouts() {
    let e = parse_result(ERROR);
    assert_eq!(e.status, "error");
    assert_eq!(e.error_stage.as_deref(), Some("nvrtc"));
    assert!(e.error.unwrap().contains("identifier \"x\" is undefined"));
    assert!(e.measured.is_none() && e.fake.is_none());
    assert_eq!(
        parse_result(ERROR).headline(),
        "could not run (nvrtc error)"
    );
    let t = parse_result(TIMED_OUT);
    assert_eq!(t.status, "timed_out");
    assert!(t
        .message
        .unwrap()
        .starts_with("timed out: the kernel did not finish"));
    assert_eq!(t.progress, ["lowering", "nvrtc", "launch"]);
    assert!(parse_result("not json").error.is_some());
}

#[test]
fn a_fake_result_has_no_numbers() {
    let v = parse_result(FAKE);
    assert_eq!(v.status, "fake");
    assert!(v.measured.is_none(), "a fake result is never a measurement");
    let f = v.fake.clone().expect("what the fake worker checked");
    assert_eq!(f.kernel.as_deref(), Some("add_kernel"));
    assert_eq!(
        f.launch.as_deref(),
        Some("grid (2000, 1, 1)  block (128, 1, 1)")
    );
    assert_eq!(f.working_set_bytes, Some(12_288_000.0));
    assert!(f.note.contains("nothing was measured"));
    assert!(v.headline().contains("fake worker"));
    // Even with a `result` in it, a fake status shows no numbers.
    let mut j: Value = serde_json::from_str(FAKE).unwrap();
    let passed: Value = serde_json::from_str(PASSED).unwrap();
    j["result"]["result"] = passed["result"]["result"].clone();
    assert!(parse_result(&j.to_string()).measured.is_none());
}

#[test]
fn reads_an_ab_comparison() {
    let v = parse_result(AB);
    assert_eq!(v.status, "passed");
    assert_eq!(v.measured.as_ref().unwrap().median_us, Some(2.5));
    let b = v.b.as_ref().expect("B's result");
    assert_eq!(b.status, "passed");
    assert_eq!(b.measured.as_ref().unwrap().median_us, Some(2.25));
    assert!(b.b.is_none() && b.comparison.is_none());
    let c = v.comparison.clone().expect("the comparison");
    assert_eq!(c.median, 0.9);
    assert_eq!(c.range, Some((0.875, 0.9375)));
    assert_eq!(c.pairs, Some(100));
    assert_eq!((c.a_median_us, c.b_median_us), (Some(2.5), Some(2.25)));
    assert_eq!(c.same_inputs, Some(true));
    assert_eq!(c.order.as_deref(), Some("AB,BA alternating"));
    assert_eq!(
        c.text(),
        "B/A = 0.900 (0.875–0.938 over 100 pairs): B is 10.0% faster than A"
    );
    let slower = Comparison {
        median: 1.25,
        ..Comparison::default()
    };
    assert_eq!(slower.text(), "B/A = 1.250: B is 25.0% slower than A");
    // A single run has neither.
    let one = parse_result(PASSED);
    assert!(one.b.is_none() && one.comparison.is_none());
    // Two one-kernel programs: no kernel counts.
    assert_eq!(c.kernels, None);
}

/// An A/B run whose A is a fusion split into kernels: the comparison says how many kernels
/// each side launches per pair.
#[test]
fn an_ab_comparison_of_a_split_fusion_counts_its_kernels() {
    let mut job: serde_json::Value = serde_json::from_str(AB).unwrap();
    let comparison = job
        .pointer_mut("/result/comparison")
        .expect("the fixture's comparison");
    comparison["a_kernels"] = serde_json::json!(3);
    let c = parse_result(&job.to_string())
        .comparison
        .expect("the comparison");
    assert_eq!(c.kernels, Some((3, 1)));
    assert_eq!(
        c.text(),
        "B/A = 0.900 (0.875–0.938 over 100 pairs): B is 10.0% faster than A \
         (3 kernels per launch of A, 1 kernel of B)"
    );
}

/// Issue 34: an A/B job whose B is a split fusion keeps B's kernels, each timed alone, in B's
/// result; a profile of each kernel, were a side to carry them, is read into its rows too (the
/// service profiles single programs only, so A/B results carry none and draw none).
#[test]
fn an_ab_job_keeps_a_split_side_s_kernels_and_their_profiles() {
    let split: serde_json::Value = serde_json::from_str(SPLIT).unwrap();
    let segments = &split["result"]["result"]["segments"];
    let mut job: serde_json::Value = serde_json::from_str(AB).unwrap();
    job["result"]["b"]["result"]["segments"] = segments.clone();
    let b = parse_result(&job.to_string()).b.expect("B's result");
    let k = b
        .measured
        .expect("B measured")
        .kernels
        .expect("B's kernels");
    assert_eq!(
        k.rows
            .iter()
            .map(|r| (r.kernel.as_str(), r.median_us))
            .collect::<Vec<_>>(),
        [
            ("col_norm_s1_kernel", Some(184.25)),
            ("col_norm_s2_kernel", Some(355.5))
        ]
    );
    assert!(crate::profile_view::kernels_profile_html(&k, false).is_none());
    let no_ncu = serde_json::json!({"unavailable": {"reason": "no_ncu", "message": "no ncu here"}});
    job["result"]["b"]["result"]["segments"]["kernels"][1]["profile"] = no_ncu;
    let b = parse_result(&job.to_string()).b.unwrap();
    let k = b.measured.unwrap().kernels.unwrap();
    assert!(k.rows[0].profile.is_none() && k.rows[1].profile.is_some());
    let html = crate::profile_view::kernels_profile_html(&k, false).expect("B's profiles");
    assert!(
        html.contains("No profile: no ncu here") && !html.contains(" id="),
        "{html}"
    );
}

#[test]
fn an_ab_run_sends_program_b() {
    let sizes = [("N".to_string(), 1024)].into();
    let scalars = [("eps".to_string(), 0.5)].into();
    let ab = serde_json::to_value(run_body(
        "fusion a {}",
        Some("fusion b {}"),
        &sizes,
        &scalars,
        20,
        3,
    ))
    .unwrap();
    assert_eq!(ab["program"], "fusion a {}");
    assert_eq!(ab["program_b"], "fusion b {}");
    assert_eq!(
        (&ab["sizes"]["N"], &ab["iters"], &ab["seed"]),
        (&1024.into(), &20.into(), &3.into())
    );
    assert_eq!(ab["scalars"]["eps"], 0.5);
    let one = serde_json::to_value(run_body(
        "fusion a {}",
        None,
        &sizes,
        &Default::default(),
        20,
        3,
    ))
    .unwrap();
    // Only what the page sets: the service's defaults apply to the rest.
    let keys: Vec<&str> = one
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["iters", "program", "seed", "sizes"], "{one}");
}

/// A health answer (`GET /api/health`) as JSON.
fn health_json(worker: &str, gpu: Option<&str>, gpu_reason: Option<&str>, run: bool) -> Value {
    let v = serde_json::json!({
        "status": "ok", "version": "0.1.0", "worker": worker,
        "gpu": gpu.map(|name| serde_json::json!({
            "name": name, "compute_capability": [9, 0], "sm_count": 132,
            "l2_bytes": 52428800, "max_dynamic_smem_optin": 232448,
            "driver_version": 13000, "total_memory_bytes": 85045477376u64,
        })),
        "gpu_reason": gpu_reason, "nvrtc": "13.0",
        "run_available": run,
        "run_unavailable_reason": (!run).then(|| format!(
            "runs are unavailable: no usable GPU ({}); compiling works (POST /api/compile)",
            gpu_reason.unwrap_or("?")
        )),
        "queue": {"queued": 0, "running": 0, "cap": 64, "gpus": 1, "finished": 0,
                  "job_timeout_s": 10.0, "workers": [null]},
        "compiles": {"running": 0, "slots": 2, "lowered": 0},
        "run_backlog": {"waiting": 0, "oldest_age_s": null, "dropped": 0, "limit": 10000},
        "limits": {"max_body_bytes": 262144, "max_program_bytes": 65536,
                   "max_iters": 10000, "max_warmup": 1000, "max_tensor_bytes": 4294967296u64,
                   "queue_cap": 64, "client_queue_cap": 16, "runs_per_minute": 60,
                   "requests_per_minute": 600, "job_timeout_s": 10.0,
                   "compile_timeout_s": 10.0, "tune_budget_s": 60.0, "keep_runs": 10000,
                   "keep_runs_days": 30, "keep_runs_bytes": 268435456, "token_required": false},
        "uptime_s": 1.5,
    });
    // Every field of the service's type is there: the test's answer is one the service sends.
    let h: Health = serde_json::from_value(v.clone()).expect("a health answer");
    assert_eq!(serde_json::to_value(h).unwrap(), v);
    v
}

/// A health answer as the page reads it.
fn health(worker: &str, gpu: Option<&str>, gpu_reason: Option<&str>, run: bool) -> Health {
    read_json(&health_json(worker, gpu, gpu_reason, run).to_string()).expect("the page reads it")
}

#[test]
fn reads_health() {
    let gpu = health("gpu", Some("NVIDIA H100 80GB HBM3"), None, true);
    assert_eq!(
        describe_health(&gpu),
        (
            "runner 0.1.0 · NVIDIA H100 80GB HBM3 (132 SMs)".into(),
            RunMode::Gpu
        )
    );
    let fake = health("fake", None, Some("fake worker mode"), true);
    assert_eq!(describe_health(&fake).1, RunMode::Fake);
    let none = health("gpu", None, Some("no driver"), false);
    let (text, mode) = describe_health(&none);
    // A renamed field is an error that names it.
    let renamed = health_json("gpu", Some("NVIDIA H100 80GB HBM3"), None, true)
        .to_string()
        .replacen("\"sm_count\"", "\"sms\"", 1);
    let e = read_json::<Health>(&renamed).unwrap_err();
    assert!(e.to_string().contains("missing field `sm_count`"), "{e}");
    assert_eq!(mode, RunMode::Unavailable);
    assert_eq!(text, "runner 0.1.0 · no usable GPU (no driver)");
    // An error body's sentence; a proxy's page as text.
    assert_eq!(
        message_of(r#"{"error": "wrong token", "limit": null}"#),
        "wrong token"
    );
    assert_eq!(message_of(" Bad Gateway \n"), "Bad Gateway");
}

/// A front-end of the distributed mode: its agents decide what the page says and whether
/// runs are measured.
#[test]
fn reads_a_distributed_front_end() {
    let agent = |id: &str, fake: bool, gpu: Option<&str>| {
        serde_json::json!({
            "id": id, "host": "gpu-host", "pid": 7, "arch": "sm_90a", "gpus": 2,
            "fake": fake, "running": 0, "completed": 3, "redelivered": 0,
            "started_at": 1_763_870_000,
            "workers": [gpu.map(|name| serde_json::json!({
                "pid": 9, "jobs": 3, "uptime_s": 5.0, "startup_ms": 310.5,
                "ceiling_gbps": null, "gpu_error": null, "gpu": name,
            })), null],
        })
    };
    let front_end = |connected: bool, agents: Vec<Value>| {
        let mut h = health_json("agents", None, Some("distributed mode"), true);
        h["distributed"] = serde_json::json!({
            "nats": "nats://10.0.0.5:4222", "connected": connected, "arch": "sm_90a",
            "depth": 0, "waiting": 0, "running": 0, "cap": 1000, "in_flight": 0,
            "gpus": 2 * agents.len(), "agents": agents,
        });
        let h: Health = read_json(&h.to_string()).expect("a distributed front-end's health");
        describe_health(&h)
    };
    let h100 = "NVIDIA H100 80GB HBM3";
    assert_eq!(
        front_end(
            true,
            vec![agent("a", false, Some(h100)), agent("b", false, None)]
        ),
        (
            format!("runner 0.1.0 · distributed, 2 agents, 4 GPUs ({h100})"),
            RunMode::Gpu
        )
    );
    let (text, mode) = front_end(true, vec![agent("a", true, None)]);
    assert_eq!(mode, RunMode::Fake);
    assert!(text.contains("1 agent with fake workers"), "{text}");
    let (text, mode) = front_end(true, vec![agent("a", true, None), agent("b", false, None)]);
    assert_eq!(mode, RunMode::Gpu);
    assert!(text.ends_with("2 agents, 1 of them fake, 4 GPUs"), "{text}");
    let (text, mode) = front_end(true, Vec::new());
    assert_eq!(mode, RunMode::Gpu);
    assert!(text.contains("no agent connected"), "{text}");
    let (text, mode) = front_end(false, vec![agent("a", false, Some(h100))]);
    assert_eq!(mode, RunMode::Unavailable);
    assert!(
        text.contains("NATS not connected (nats://10.0.0.5:4222)"),
        "{text}"
    );
    // A result names the agent that ran it.
    let mut j: Value = serde_json::from_str(FAKE).unwrap();
    assert_eq!(parse_result(&j.to_string()).agent, None);
    j["result"]["agent"] = "gpu-host-1-4711".into();
    assert_eq!(
        parse_result(&j.to_string()).agent.as_deref(),
        Some("gpu-host-1-4711")
    );
}

#[test]
fn a_link_holds_the_program_and_the_state() {
    let state = crate::share::State {
        program: "fusion f {}\n".into(),
        sizes: [("M".to_string(), 1000)].into(),
        pane: crate::share::Pane::Passes,
        pass: Some("predicate".into()),
        iters: 50,
        seed: 3,
        ..Default::default()
    };
    let body = link_body(&state);
    assert_eq!(body.program, "fusion f {}\n");
    assert!(body.state.get("program").is_none());
    assert_eq!(body.state["v"], 1);
    // What GET /api/links/{id} answers.
    let answer = |body: &LinkBody| Link {
        id: "k3n".into(),
        program: body.program.clone(),
        state: body.state.clone(),
        created_at: 1,
    };
    assert_eq!(state_of_link(&answer(&body)), Ok(state.clone()));
    let future = LinkBody {
        program: String::new(),
        state: serde_json::json!({"v": 2}),
    };
    assert!(state_of_link(&answer(&future))
        .unwrap_err()
        .contains("version 2"));
    // Program B and the tab travel in the state; a state without them has neither key.
    assert!(body.state.get("program_b").is_none() && body.state.get("tab").is_none());
    let ab = crate::share::State {
        program_b: Some("fusion g {}\n".into()),
        tab: crate::share::Tab::B,
        ..state
    };
    let body = link_body(&ab);
    assert_eq!(body.state["program_b"], "fusion g {}\n");
    assert_eq!(state_of_link(&answer(&body)), Ok(ab));
}

/// The run and link answers read into their `hopfuse-api` types: what the service serialises
/// reads back equal, and a field it dropped is an error that names it.
#[test]
fn the_run_and_link_answers_read_as_their_api_types() {
    use hopfuse_api::service::{LinkCreated, RunAccepted};
    let without = |v: &Value, k: &str| {
        let mut v = v.clone();
        v.as_object_mut().unwrap().remove(k);
        v.to_string()
    };
    let accepted = RunAccepted {
        job_id: "j1f0".into(),
        events: "/api/jobs/j1f0/events".into(),
        result: "/api/jobs/j1f0".into(),
    };
    let v = serde_json::to_value(&accepted).unwrap();
    assert_eq!(read_json::<RunAccepted>(&v.to_string()).unwrap(), accepted);
    let e = read_json::<RunAccepted>(&without(&v, "events")).unwrap_err();
    assert!(e.to_string().contains("missing field `events`"), "{e}");

    let created = LinkCreated {
        id: "k3n".into(),
        path: "/api/links/k3n".into(),
        created_at: 1_763_870_000,
    };
    let v = serde_json::to_value(&created).unwrap();
    assert_eq!(read_json::<LinkCreated>(&v.to_string()).unwrap(), created);
    let mut v = v.clone();
    v["created_at"] = "yesterday".into();
    let e = read_json::<LinkCreated>(&v.to_string()).unwrap_err();
    assert!(
        e.to_string().contains("invalid type: string \"yesterday\""),
        "{e}"
    );

    let stored = Link {
        id: "k3n".into(),
        program: "fusion f {}\n".into(),
        state: serde_json::json!({"v": 1, "iters": 50}),
        created_at: 1_763_870_000,
    };
    let v = serde_json::to_value(&stored).unwrap();
    assert_eq!(read_json::<Link>(&v.to_string()).unwrap(), stored);
    // A link stored without a state holds none.
    let read = read_json::<Link>(&without(&v, "state")).unwrap();
    assert_eq!(read.state, Value::Null);
    assert_eq!(read.program, stored.program);
    // An error body's sentence, whatever else it holds.
    let body = r#"{"error": "program does not compile", "diagnostics": [{"message": "unknown op",
        "span": {"start": 3, "end": 5}, "line": 1, "column": 4}], "limit": null}"#;
    assert_eq!(message_of(body), "program does not compile");
}

/// The `done` event's data in a recorded event stream (docs/recordings).
fn done_of(sse: &str) -> &str {
    let at = sse.find("event: done\ndata: ").expect("a done event") + "event: done\ndata: ".len();
    sse[at..].lines().next().unwrap()
}

/// Every recorded result reads completely: the accessor layer above is the playground's
/// reading of `api::job::JobResult`, and these are the service's own answers (the fixtures
/// are serialized from the runner's types by runner/tests/api_fixtures.rs; the recordings
/// are real H100 jobs).
#[test]
fn every_recorded_result_reads() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let mut texts = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("done-") && name.ends_with(".json") {
            texts.push((name, std::fs::read_to_string(&path).unwrap()));
        }
    }
    assert!(texts.len() >= 8, "only {} done fixtures", texts.len());
    for rec in [
        "exp_2d_h100.sse",
        "exp_2d_profile_h100.sse",
        "matmul_h100.sse",
        "ab_pingpong_h100.sse",
    ] {
        let sse = std::fs::read_to_string(
            [env!("CARGO_MANIFEST_DIR"), "/../docs/recordings/", rec].concat(),
        )
        .unwrap();
        texts.push((rec.into(), done_of(&sse).to_string()));
    }
    for (name, text) in &texts {
        let v = parse_result(text);
        assert!(v.job_id.is_some(), "{name}: {:?}", v.error);
        let measured = matches!(v.status.as_str(), "passed" | "failed");
        assert_eq!(v.measured.is_some(), measured, "{name}: {:?}", v.error);
        assert_eq!(v.fake.is_some(), v.status == "fake", "{name}");
        assert_eq!(
            v.error.is_some(),
            v.status == "error",
            "{name}: {:?}",
            v.error
        );
    }
    // The real matrix product on the H100: its cuBLAS ceiling reads.
    let matmul = &texts.last().unwrap().1;
    let m = parse_result(matmul).measured.expect("measured");
    assert!(m.tflops.unwrap() > 0.0 && m.cublas_tflops.unwrap() > 0.0);
    assert!(m.device.unwrap().contains("H100"));
}

/// A field the service renamed, dropped or retyped is an error (serde's, naming a missing
/// field), not a quietly empty pane.
#[test]
fn a_renamed_field_is_an_error() {
    let cases = [
        ("\"median_us\"", "\"median\"", "missing field `median_us`"),
        (
            "\"registers_per_thread\"",
            "\"regs\"",
            "missing field `registers_per_thread`",
        ),
        ("\"index_type\"", "\"index\"", "missing field `index_type`"),
        ("\"worker_ms\"", "\"worker_s\"", "missing field `worker_ms`"),
        (
            "\"kind\": \"rotate\"",
            "\"kind\": \"spin\"",
            "unknown variant `spin`",
        ),
        (
            "\"gbps\": 4915.2",
            "\"gbps\": \"fast\"",
            "invalid type: string \"fast\", expected f64",
        ),
    ];
    for (from, to, says) in cases {
        assert!(PASSED.contains(from), "{from}");
        let v = parse_result(&PASSED.replace(from, to));
        assert_eq!(v.status, "error", "{from}");
        let e = v.error.unwrap();
        assert!(e.contains(says), "{from}: {e}");
        assert!(e.starts_with("the runner's result is not one this playground reads"));
    }
    let v = parse_result(r#"{"stage": "done", "elapsed_ms": 1}"#);
    assert!(v.error.unwrap().contains("holds no result"));
    let mut j: Value = serde_json::from_str(PASSED).unwrap();
    j["result"]["result"]["profile"] = serde_json::json!({"unavailable": {"reason": "gone"}});
    assert!(parse_result(&j.to_string())
        .error
        .unwrap()
        .contains("unknown variant `gone`"));
    j["result"]["result"]["peers"] = serde_json::json!({"rounds": "x"});
    assert!(parse_result(&j.to_string())
        .error
        .unwrap()
        .contains("invalid type: string \"x\", expected u32"));
}

/// The recorded runs on the H100 (docs/recordings) read into the api types, and the Run pane
/// shows their fields: a field renamed in `hopfuse-api` fails here.
#[test]
fn the_recorded_runs_read_into_the_api_types() {
    let recording = |rec: &str| {
        std::fs::read_to_string([env!("CARGO_MANIFEST_DIR"), "/../docs/recordings/", rec].concat())
            .unwrap()
    };
    for rec in [
        "exp_2d_h100.sse",
        "exp_2d_profile_h100.sse",
        "matmul_h100.sse",
    ] {
        let sse = recording(rec);
        let event: JobEvent = read_json(done_of(&sse)).expect(rec);
        let job = event.result.expect("the done event's result");
        let r = job.result.as_deref().expect("a measured run");
        let view = parse_result(done_of(&sse));
        assert_eq!(view.status, job.status.name(), "{rec}");
        assert_eq!(view.job_id.as_deref(), Some(job.job_id.as_str()));
        let m = view.measured.expect(rec);
        assert_eq!(m.device.as_deref(), Some("NVIDIA H100 80GB HBM3"), "{rec}");
        assert!(r.device.name.contains("H100") && r.device.sm_count == 132);
        assert_eq!(m.median_us, Some(r.timing.median_us));
        assert!(r.timing.median_us > 0.0 && r.timing.samples > 0, "{rec}");
        assert_eq!(m.gbps, Some(r.gbps));
        assert_eq!(
            m.registers,
            Some(i64::from(r.attributes.registers_per_thread))
        );
        assert_eq!(m.checks.len(), r.validation.len());
        assert!(
            m.checks.iter().all(|c| c.passed && c.elements > Some(0)),
            "{rec}"
        );
        assert!(m.launch.unwrap().starts_with(&format!(
            "grid ({}, {}, {})",
            r.launch.grid[0], r.launch.grid[1], r.launch.grid[2]
        )));
        assert_eq!(m.profile, r.profile);
        if rec == "exp_2d_profile_h100.sse" {
            let Some(hopfuse_api::profile::ProfileReport::Measured { profile, .. }) = &m.profile
            else {
                panic!("{rec}: no measured profile: {:?}", m.profile);
            };
            assert_eq!(profile.kernel, "exp_2d_kernel");
            assert!(profile.dram_throughput_pct.is_some() && !profile.stalls.is_empty());
        }
    }
    // A recorded A/B (cooperative step 9 against ping-pong step 14 at 4096^3): both sides
    // measured and validated, and the comparison as the Run pane words it.
    let sse = recording("ab_pingpong_h100.sse");
    let event: JobEvent = read_json(done_of(&sse)).expect("the A/B recording");
    let job = event.result.expect("the done event's result");
    let c = job.comparison.as_ref().expect("a comparison");
    let view = parse_result(done_of(&sse));
    let b = view.b.as_ref().expect("B's result");
    assert!(view
        .measured
        .as_ref()
        .is_some_and(|m| m.checks.iter().all(|c| c.passed)));
    assert!(b
        .measured
        .as_ref()
        .is_some_and(|m| m.checks.iter().all(|c| c.passed)));
    let shown = view
        .comparison
        .as_ref()
        .expect("the comparison in the view");
    assert_eq!(shown.median, c.b_over_a_median);
    assert!(c.interleaved && c.same_inputs == Some(true) && c.pairs == 30);
    assert!(
        shown
            .text()
            .starts_with(&format!("B/A = {:.3}", c.b_over_a_median))
            && shown.text().ends_with("slower than A"),
        "{}",
        shown.text()
    );
    // The recorded health answers: the first from before compile slots and the newer limits.
    for rec in ["h100_health.json", "h100_health_profile.json"] {
        let h: Health = read_json(&recording(rec)).expect(rec);
        assert_eq!(
            describe_health(&h),
            (
                "runner 0.1.0 · NVIDIA H100 80GB HBM3 (132 SMs)".into(),
                RunMode::Gpu
            ),
            "{rec}"
        );
        assert_eq!(h.limits.max_program_bytes, 65536);
    }
}

/// The runner's waves figure and warnings (a persistent grid past one wave) reach the Run pane
/// in the runner's own words (`Residency::text`, shared with the CLI report).
#[test]
fn the_waves_figure_and_the_warnings_are_read() {
    let mut j: Value = serde_json::from_str(PASSED).unwrap();
    let warning = "persistent grid of 32 clusters of 4 CTAs, but at most 30 are resident on this GPU (cuOccupancyMaxActiveClusters): 2 run as a second wave; make the grid at most 30 clusters (120 CTAs)";
    j["result"]["result"]["residency"] = serde_json::json!({
        "unit": "cluster", "unit_ctas": 4, "grid": 32, "resident": 30, "waves": 2,
        "query": "cuOccupancyMaxActiveClusters", "persistent": true
    });
    j["result"]["result"]["warnings"] = serde_json::json!([warning]);
    let v = parse_result(&j.to_string());
    let m = v.measured.expect("a measured run");
    assert_eq!(
        m.waves.as_deref(),
        Some("2 (32 clusters of 4 CTAs, at most 30 resident: cuOccupancyMaxActiveClusters; persistent grid)")
    );
    assert_eq!(m.warnings, [warning]);
    // An older runner's result has neither.
    let old = parse_result(PASSED).measured.expect("a measured run");
    assert!(old.waves.is_none() && old.warnings.is_empty());
}
