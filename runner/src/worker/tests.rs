use super::*;

#[test]
fn cubins_are_cached_by_content_hash() {
    if crate::not_run::nvrtc_missing("the CUBIN cache") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("hopfuse-cubin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cuda = crate::faults::cuda(crate::faults::Fault::IllegalAddress);
    let mut out = Vec::new();
    let mut hooks = WorkerHooks {
        out: &mut out,
        cache: Some(dir.clone()),
        memory: None,
        cached: false,
        peers: None,
    };
    let first = hooks.cubin(cuda, "a.cu").unwrap();
    assert!(!hooks.cached);
    let second = hooks.cubin(cuda, "b.cu").unwrap();
    assert!(hooks.cached);
    assert_eq!(first.image, second.image);
    let events = read_events(&out[..]);
    assert!(
        matches!(events[..], [WorkerEvent::CubinCached { .. }]),
        "{events:?}"
    );
    // Another source is another entry.
    let mut hooks = WorkerHooks {
        out: &mut out,
        cache: Some(dir.clone()),
        memory: None,
        cached: false,
        peers: None,
    };
    hooks.cubin(crate::gpu::SPIN_SOURCE, "spin.cu").unwrap();
    assert!(!hooks.cached);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_warm_worker_keeps_cubins_in_memory() {
    if crate::not_run::nvrtc_missing("the CUBIN cache") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("hopfuse-cubin-mem-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cuda = crate::faults::cuda(crate::faults::Fault::Deadlock);
    let mut memory = HashMap::new();
    let mut out = Vec::new();
    let mut hooks = WorkerHooks {
        out: &mut out,
        cache: Some(dir.clone()),
        memory: Some(&mut memory),
        cached: false,
        peers: None,
    };
    let first = hooks.cubin(cuda, "a.cu").unwrap();
    assert!(!hooks.cached);
    // Gone from disk: the memory layer still has it.
    std::fs::remove_dir_all(&dir).unwrap();
    let second = hooks.cubin(cuda, "a.cu").unwrap();
    assert!(hooks.cached);
    assert_eq!(first.image, second.image);
    let events = read_events(&out[..]);
    assert!(
        matches!(&events[..], [WorkerEvent::CubinCached { from, .. }] if from == "memory"),
        "{events:?}"
    );
    assert_eq!(memory.len(), 1);
}

#[test]
fn fake_delay_from_the_program_only() {
    let source = "// fake-delay-ms: 250\nfusion";
    assert_eq!(
        fake_delay(FakeBehaviour::FromProgram, source),
        Some(std::time::Duration::from_millis(250))
    );
    assert_eq!(fake_delay(FakeBehaviour::Ok, source), None);
    assert_eq!(fake_delay(FakeBehaviour::FromProgram, "fusion"), None);
}

#[test]
fn fake_behaviour_from_the_program() {
    let b = FakeBehaviour::FromProgram;
    assert_eq!(
        b.resolve("// fake-behaviour: hang\nfusion"),
        FakeBehaviour::Hang
    );
    assert_eq!(b.resolve("fusion"), FakeBehaviour::Ok);
    assert_eq!(
        b.resolve("// fake-behaviour: cuda-error"),
        FakeBehaviour::CudaError
    );
    assert_eq!(
        FakeBehaviour::Crash.resolve("// fake-behaviour: ok"),
        FakeBehaviour::Crash
    );
}

/// The job line is the job's spec with the worker's own fields beside it: a profiled job keeps
/// `"profile": true` and its ncu limits; a line with only a `request` (a one-shot worker, the
/// tests) is a plain job whose profile limits are the CLI's default.
#[test]
fn a_job_line_is_the_spec_and_the_workers_own_fields() {
    let request = serde_json::json!({
        "file": "t.hf", "source": "fusion f {}", "sizes": {}, "iters": 1, "warmup": 0,
        "seed": 1, "index": null, "copy_ceiling": false, "peers": false, "clock": false,
    });
    let plain: WorkerJob =
        serde_json::from_value(serde_json::json!({ "request": request })).unwrap();
    assert!(!plain.spec.profile && plain.spec.request_b.is_none());
    assert_eq!(plain.profile_limits, ProfileLimits::default());
    let mut spec = JobSpec::single(plain.spec.request.clone());
    spec.profile = true;
    let job = WorkerJob {
        spec,
        cubin_cache: None,
        profile_limits: ProfileLimits {
            time_limit_s: 30.0,
            job_limit_s: Some(60.0),
        },
    };
    let line = serde_json::to_value(&job).unwrap();
    assert_eq!(line["request"], request);
    assert_eq!(line["profile"], true);
    assert_eq!(line["profile_limits"]["job_limit_s"], 60.0);
    let back: WorkerJob = serde_json::from_value(line).unwrap();
    assert!(back.spec.profile);
    assert_eq!(back.profile_limits, job.profile_limits);
}

/// Issue 39 item 12: the fake worker took `profile`, `clock` and `peers` and said nothing of
/// them; its result now says each was not done, and why, in `not_done` and in its note.
#[test]
fn the_fake_worker_says_what_it_did_not_do() {
    use crate::engine::RunRequest;
    let request = |clock: bool, peers: bool| -> RunRequest {
        serde_json::from_value(serde_json::json!({
            "file": "add.hf", "source": include_str!("../../../examples/basics/add.hf"),
            "sizes": {"M": 64, "N": 64}, "iters": 1, "warmup": 0, "seed": 1, "index": null,
            "copy_ceiling": false, "peers": peers, "clock": clock,
        }))
        .unwrap()
    };
    let compile = |req: &RunRequest, profile: bool| match fake::fake(
        req,
        None,
        FakeBehaviour::Ok,
        profile,
        &mut Vec::new(),
    ) {
        Outcome::Fake { compile, .. } => compile,
        other => panic!("not a fake outcome: {other:?}"),
    };
    let all = compile(&request(true, true), true);
    assert_eq!(all.not_done.len(), 3, "{:?}", all.not_done);
    for (what, entry) in ["profile", "clock", "peers"].iter().zip(&all.not_done) {
        assert!(entry.starts_with(what), "{entry}");
        assert!(all.note.contains(entry.as_str()), "{}", all.note);
    }
    let clock_only = compile(&request(true, false), false);
    assert_eq!(clock_only.not_done.len(), 1);
    let plain = compile(&request(false, false), false);
    assert!(plain.not_done.is_empty());
    assert_eq!(plain.note, FAKE_NOTE);
    let json = serde_json::to_value(&*plain).unwrap();
    assert!(json.get("not_done").is_none(), "{json}");
}

/// `examples/auto/col_norm.hf` (no scheduler takes it whole) at 64 x 32.
fn col_norm_request() -> crate::engine::RunRequest {
    serde_json::from_value(serde_json::json!({
        "file": "col_norm.hf", "source": include_str!("../../../examples/auto/col_norm.hf"),
        "sizes": {"M": 64, "N": 32}, "iters": 1, "warmup": 0, "seed": 1, "index": null,
        "copy_ceiling": false, "peers": false, "clock": false,
    }))
    .unwrap()
}

fn split_on_the_fake_worker(req: &crate::engine::RunRequest, profile: bool) -> Box<FakeCompile> {
    match fake::fake(req, None, FakeBehaviour::Ok, profile, &mut Vec::new()) {
        Outcome::Fake { compile, .. } => compile,
        other => panic!("not a fake outcome: {other:?}"),
    }
}

/// Issue 34: a split program run with a profile asked for on the fake worker: each kernel's
/// `profile` (where a GPU runner's carries its metrics) says it never ran and holds no figure;
/// without a profile asked for, the kernels carry none.
#[test]
fn the_fake_worker_says_why_each_kernel_of_a_split_program_has_no_profile() {
    use hopfuse_api::profile::{ProfileReport, Unavailable};
    let compile = split_on_the_fake_worker(&col_norm_request(), true);
    let kernels = &compile.segments.as_ref().expect("two kernels").kernels;
    assert_eq!(kernels.len(), 2);
    for k in kernels {
        match &k.profile {
            Some(ProfileReport::Unavailable { reason, message }) => {
                assert_eq!(*reason, Unavailable::NotRun);
                assert_eq!(message, fake::NOT_RUN);
            }
            other => panic!("{}: {other:?}", k.kernel),
        }
    }
    let json = serde_json::to_value(&*compile).unwrap();
    assert_eq!(
        json["segments"]["kernels"][1]["profile"],
        serde_json::json!({"unavailable": {"reason": "not_run", "message":
            "fake worker: the kernels were compiled and checked but never ran, so Nsight \
             Compute had no launch to profile"}})
    );
    let unprofiled = split_on_the_fake_worker(&col_norm_request(), false);
    let json = serde_json::to_value(&*unprofiled).unwrap();
    let kernels = json["segments"]["kernels"].as_array().unwrap();
    assert!(
        kernels.len() == 2 && kernels.iter().all(|k| k.get("profile").is_none()),
        "{json}"
    );
}

/// A program no scheduler takes whole: the fake worker compiles each of its kernels, names
/// them all and counts every tensor once (the intermediate included).
#[test]
fn the_fake_worker_compiles_each_kernel_of_a_split_program() {
    let compile = split_on_the_fake_worker(&col_norm_request(), false);
    assert_eq!(compile.kernel, "col_norm_s1_kernel + col_norm_s2_kernel");
    // x and y (64 x 32 f32) and the column sums y_sum (32 f32).
    assert_eq!(compile.working_set_bytes, 2 * 64 * 32 * 4 + 32 * 4);
    assert!(
        compile.note.contains(
            "the program runs as 2 kernels in order, col_norm_s1_kernel (outer reduction), then \
             col_norm_s2_kernel (pointwise) (`y` reads the column reductions back over the columns"
        ),
        "{}",
        compile.note
    );
}
