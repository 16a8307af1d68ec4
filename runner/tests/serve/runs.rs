//! Jobs and workers: a hanging worker killed at the limit, a crashing one reported, fake results
//! without numbers, many concurrent runs, A/B runs, profile requests, fault kernels, warm workers
//! serving many jobs, a worker that cannot start, and one compile per run.

use crate::support::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_hanging_worker_is_killed_at_the_limit_and_the_service_keeps_answering() {
    let dir = temp_dir("hang");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--fake-behaviour",
            "from-program",
            "--job-timeout",
            "1.5",
        ],
    );
    let c = client();
    let start = Instant::now();
    let hung = submit(&s, &c, &add_run("// fake-behaviour: hang")).await;
    let next = submit(&s, &c, &add_run("")).await;
    // While the worker hangs, the service answers.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    let (status, h) = get(&c, s.url("/api/health")).await;
    assert_eq!(status, 200);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(h["queue"]["running"], 1, "{h}");
    let (status, v) = get(&c, s.url(&format!("/api/jobs/{hung}"))).await;
    assert_eq!(status, 200);
    assert_eq!(v["done"], false, "{v}");

    let (names, result) = events(&s, &c, &hung).await;
    let elapsed = start.elapsed();
    assert_eq!(
        names,
        ["queued", "compiling", "running", "done"],
        "{result}"
    );
    assert_eq!(result["status"], "timed_out", "{result}");
    assert_eq!(result["message"], TIMEOUT_MESSAGE);
    // What the worker reported before it was killed.
    assert_eq!(
        result["progress"],
        json!(["lowering", "launch"]),
        "{result}"
    );
    assert!(elapsed >= Duration::from_millis(1400), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");

    // The next job runs.
    let (_, result) = events(&s, &c, &next).await;
    assert_eq!(result["status"], "fake", "{result}");
    let (status, v) = get(&c, s.url(&format!("/api/jobs/{hung}"))).await;
    assert_eq!(status, 200);
    assert_eq!(
        (v["done"].clone(), v["status"].clone()),
        (json!(true), json!("timed_out"))
    );
    s.stop();
}

#[tokio::test]
async fn a_crashing_worker_is_reported_and_the_next_job_runs() {
    let dir = temp_dir("crash");
    let s = Server::start(&dir, &["--fake-worker", "--fake-behaviour", "from-program"]);
    let c = client();
    let crashed = submit(&s, &c, &add_run("// fake-behaviour: crash")).await;
    let (names, result) = events(&s, &c, &crashed).await;
    assert_eq!(names.last().unwrap(), "done");
    assert_eq!(result["status"], "crashed", "{result}");
    let msg = result["message"].as_str().unwrap();
    assert!(msg.contains("signal 6 (SIGABRT)"), "{msg}");
    assert!(
        result["stderr"]
            .as_str()
            .unwrap()
            .contains("crashing on purpose"),
        "{result}"
    );
    let ok = submit(&s, &c, &add_run("")).await;
    let (_, result) = events(&s, &c, &ok).await;
    assert_eq!(result["status"], "fake");
    s.stop();
}

#[tokio::test]
async fn fake_results_are_marked_and_carry_no_measurements() {
    let dir = temp_dir("fake");
    let s = Server::start(&dir, &["--fake-worker"]);
    let c = client();
    let id = submit(&s, &c, &add_run("")).await;
    let (names, r) = events(&s, &c, &id).await;
    assert_eq!(names, ["queued", "compiling", "done"]);
    assert_eq!(r["fake"], true);
    assert_eq!(r["status"], "fake");
    assert!(r.get("result").is_none(), "{r}");
    assert!(
        !r.to_string().contains("gbps") && !r.to_string().contains("median"),
        "{r}"
    );
    assert_eq!(r["compile"]["kernel"], "add_kernel");
    assert_eq!(r["compile"]["launch"]["block"], json!([128, 1, 1]));
    assert_eq!(r["compile"]["working_set_bytes"], 3 * 256 * 256 * 4);
    // Replaying the stream of a finished job gives the same events.
    let (again, _) = events(&s, &c, &id).await;
    assert_eq!(again, names);
    let (_, h) = get(&c, s.url("/api/health")).await;
    assert_eq!(h["worker"], "fake");
    assert_eq!(h["queue"]["finished"], 1);
    s.stop();
}

/// A fusion no scheduler takes whole goes through the service's run job as its kernels: the
/// fake worker compiles each and the result lists them in order with the tensor between them
/// (a GPU worker runs, validates and times the whole and each: `result.segments`).
#[tokio::test]
async fn a_split_fusion_runs_as_its_kernels_through_the_service() {
    let dir = temp_dir("split");
    let s = Server::start(&dir, &["--fake-worker"]);
    let c = client();
    let body = json!({
        "program": include_str!("../../../examples/auto/col_norm.hf"),
        "sizes": {"M": 64, "N": 32},
        "iters": 5,
    });
    let id = submit(&s, &c, &body).await;
    let (names, r) = events(&s, &c, &id).await;
    assert_eq!(names, ["queued", "compiling", "done"]);
    assert_eq!(r["status"], "fake", "{r}");
    assert_eq!(r["progress"], json!(["lowering"]), "{r}");
    let compile = &r["compile"];
    assert_eq!(
        compile["kernel"], "col_norm_s1_kernel + col_norm_s2_kernel",
        "{r}"
    );
    let segments = &compile["segments"];
    assert!(
        segments["reason"]
            .as_str()
            .unwrap()
            .starts_with("`y` reads the column reductions back over the columns"),
        "{r}"
    );
    let kernels = segments["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 2, "{r}");
    assert_eq!(
        (
            &kernels[0]["kernel"],
            &kernels[0]["scheduler"],
            &kernels[1]["kernel"],
            &kernels[1]["scheduler"]
        ),
        (
            &json!("col_norm_s1_kernel"),
            &json!("outer reduction"),
            &json!("col_norm_s2_kernel"),
            &json!("pointwise")
        ),
        "{r}"
    );
    assert_eq!(kernels[1]["reason"], "the last segment");
    assert_eq!(kernels[0]["index_type"], "i32");
    assert!(
        kernels[1]["launch"]["grid"][0].as_u64().unwrap() >= 1,
        "{r}"
    );
    // The column sums: 32 f32 between the kernels, counted once in the working set.
    assert_eq!(
        segments["intermediates"],
        json!([{"name": "y_sum", "dtype": "f32", "bytes": 128}])
    );
    assert_eq!(compile["working_set_bytes"], 2 * 64 * 32 * 4 + 32 * 4);
    // A scalar the first kernel does not read is a scalar of the run all the same.
    let with_eps = json!({
        "program": "fusion col_norm_eps {\n  input x: f32[M, N]\n  input eps: f32 = 1e-6\n  y = x / (broadcast(sum(x * x, axis=0), axis=0) + eps)\n  output y\n}\n",
        "sizes": {"M": 64, "N": 32},
        "scalars": {"eps": 0.5},
        "iters": 5,
    });
    let id = submit(&s, &c, &with_eps).await;
    let (_, r) = events(&s, &c, &id).await;
    assert_eq!(r["status"], "fake", "{r}");
    assert_eq!(
        r["compile"]["segments"]["kernels"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{r}"
    );
    s.stop();
}

#[tokio::test]
async fn two_hundred_concurrent_runs_all_get_a_result() {
    let dir = temp_dir("concurrent");
    let s = std::sync::Arc::new(Server::start(
        &dir,
        &[
            "--fake-worker",
            "--queue-cap",
            "256",
            "--client-queue-cap",
            "0",
            "--runs-per-minute",
            "0",
        ],
    ));
    let c = client();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let (s, c) = (s.clone(), c.clone());
        tasks.push(tokio::spawn(async move {
            let mut body = add_run("");
            body["seed"] = json!(i);
            let id = submit(&s, &c, &body).await;
            let (_, result) = events(&s, &c, &id).await;
            (id, result)
        }));
    }
    let mut ids = std::collections::BTreeSet::new();
    for t in tasks {
        let (id, result) = t.await.unwrap();
        assert_eq!(result["status"], "fake", "{result}");
        assert_eq!(result["job_id"], id.as_str());
        ids.insert(id);
    }
    assert_eq!(ids.len(), 200);
    let (_, h) = get(&c, s.url("/api/health")).await;
    assert_eq!(h["queue"]["finished"], 200, "{h}");
    assert_eq!(h["queue"]["queued"], 0, "{h}");
    let _ = &s.dir;
}

#[tokio::test]
async fn ab_runs_report_both_programs() {
    let dir = temp_dir("ab");
    let s = Server::start(&dir, &["--fake-worker"]);
    let c = client();
    let mut body = add_run("");
    body["program_b"] = json!(format!("// B\n{}", example("add.hf")));
    let id = submit(&s, &c, &body).await;
    let (_, r) = events(&s, &c, &id).await;
    assert_eq!(r["status"], "fake", "{r}");
    assert_eq!(r["b"]["status"], "fake", "{r}");
    assert_eq!(r["b"]["compile"]["kernel"], "add_kernel", "{r}");
    // Fake runs measure nothing, so there is nothing to compare.
    assert!(r.get("comparison").is_none(), "{r}");
    let (_, rec) = get(&c, s.url("/api/runs")).await;
    assert_eq!(rec["runs"][0]["request"]["same_inputs"], true, "{rec}");

    // B must compile too; its errors say which program.
    body["program_b"] = json!("fusion f {\n  @@@\n}");
    let (status, v, _) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap().starts_with("program_b: "),
        "{v}"
    );
    s.stop();
}

/// A/B runs take a fusion split into several kernels on either side or both: the service
/// checks each program (a split one kernel by kernel) and the fake worker compiles each side,
/// a split side reported with its kernels in order (a GPU worker times each side's kernels as
/// one launch, interleaved: `engine::run_ab_on`).
#[tokio::test]
async fn ab_runs_take_split_fusions_on_either_side() {
    let dir = temp_dir("ab-split");
    let s = Server::start(&dir, &["--fake-worker"]);
    let c = client();
    let split = include_str!("../../../examples/auto/col_norm.hf");
    let single = "fusion col_scale {\n  input x: f32[M, N]\n  y = x * x\n  output y\n}\n";
    let kernels = |r: &serde_json::Value| -> Vec<String> {
        match r["compile"]["segments"]["kernels"].as_array() {
            Some(ks) => ks
                .iter()
                .map(|k| k["kernel"].as_str().unwrap().to_string())
                .collect(),
            None => vec![r["compile"]["kernel"].as_str().unwrap().to_string()],
        }
    };
    let two = ["col_norm_s1_kernel", "col_norm_s2_kernel"];
    for (a, b, a_kernels, b_kernels) in [
        (split, single, &two[..], &["col_scale_kernel"][..]),
        (single, split, &["col_scale_kernel"][..], &two[..]),
        (split, split, &two[..], &two[..]),
    ] {
        let body = json!({
            "program": a,
            "program_b": format!("// B\n{b}"),
            "sizes": {"M": 64, "N": 32},
            "iters": 5,
        });
        let id = submit(&s, &c, &body).await;
        let (_, r) = events(&s, &c, &id).await;
        assert_eq!(r["status"], "fake", "{r}");
        assert_eq!(r["b"]["status"], "fake", "{r}");
        assert_eq!(kernels(&r), a_kernels, "{r}");
        assert_eq!(kernels(&r["b"]), b_kernels, "{r}");
        assert!(r.get("comparison").is_none(), "{r}");
    }
    s.stop();
}

/// `"profile": true` is taken for one program and kept with the run; with `program_b` or a
/// fault kernel it is a 400 that says why. (What the worker does with it needs a GPU:
/// scripts/profile-device-check.sh.)
#[tokio::test]
async fn a_profile_is_asked_for_one_program() {
    let dir = temp_dir("profile");
    let s = Server::start(&dir, &["--fake-worker", "--fault-kernels"]);
    let c = client();
    let mut body = add_run("");
    body["profile"] = json!(true);
    let id = submit(&s, &c, &body).await;
    let (_, r) = events(&s, &c, &id).await;
    assert_eq!(r["status"], "fake", "{r}");
    let (_, rec) = get(&c, s.url("/api/runs")).await;
    assert_eq!(rec["runs"][0]["request"]["profile"], true, "{rec}");
    // Without it, the history says nothing of a profile.
    let plain = submit(&s, &c, &add_run("// plain")).await;
    events(&s, &c, &plain).await;
    let (_, rec) = get(&c, s.url("/api/runs")).await;
    let unprofiled = rec["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|run| run["id"] == plain.as_str())
        .unwrap_or_else(|| panic!("{rec}"));
    assert!(unprofiled["request"].get("profile").is_none(), "{rec}");
    for extra in [
        json!({"program_b": example("add.hf")}),
        json!({"fault": "deadlock", "program": ""}),
    ] {
        let mut b = body.clone();
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        let (status, v, _) = post(&c, s.url("/api/run"), b.to_string()).await;
        assert_eq!(status, 400, "{v}");
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .contains("profile takes one program"),
            "{v}"
        );
    }
    body["profile"] = json!("yes");
    let (status, _, _) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 400);
    s.stop();
}

#[tokio::test]
async fn fault_kernels_need_the_flag_and_a_gpu_worker() {
    let dir = temp_dir("faults");
    let s = Server::start(&dir, &["--fake-worker"]);
    let c = client();
    let body = json!({"fault": "deadlock", "sizes": {"N": 1024}, "iters": 5});
    let (status, v, _) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("--fault-kernels"),
        "{v}"
    );
    s.stop();
    let s = Server::start(&dir, &["--fake-worker", "--fault-kernels"]);
    let (status, v, _) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("GPU worker"), "{v}");
    let bad = json!({"fault": "melt", "sizes": {"N": 1024}});
    let (status, _, _) = post(&c, s.url("/api/run"), bad.to_string()).await;
    assert_eq!(status, 400);
    s.stop();
}

#[tokio::test]
async fn one_warm_worker_serves_many_jobs_and_a_fault_gets_a_fresh_process() {
    let dir = temp_dir("warm");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--fake-behaviour",
            "from-program",
            "--job-timeout",
            "1.5",
        ],
    );
    let c = client();
    let run = |comment: &'static str| {
        let (s, c) = (&s, &c);
        async move {
            let id = submit(s, c, &add_run(comment)).await;
            events(s, c, &id).await.1
        }
    };
    let first = run("").await;
    let second = run("").await;
    assert_eq!(first["status"], "fake", "{first}");
    let (w1, w2) = (&first["worker"], &second["worker"]);
    // The same process, warm: the second job is its next one and started nothing.
    assert_eq!(w1["pid"], w2["pid"], "{first}\n{second}");
    assert_eq!(
        w2["job_in_process"].as_u64().unwrap(),
        w1["job_in_process"].as_u64().unwrap() + 1
    );
    assert!(w2.get("spawn_ms").is_none(), "{second}");
    assert!(w2.get("ended").is_none(), "{second}");

    // A CUDA error may poison the context: that worker exits after the job ...
    let fault = run("// fake-behaviour: cuda-error").await;
    assert_eq!(fault["status"], "error", "{fault}");
    assert_eq!(fault["error"]["stage"], "cuda", "{fault}");
    assert_eq!(fault["worker"]["pid"], w1["pid"]);
    assert!(
        fault["worker"]["ended"]
            .as_str()
            .unwrap()
            .contains("poisoned the context"),
        "{fault}"
    );
    // ... and the next job runs in a fresh process.
    let after = run("").await;
    assert_eq!(after["status"], "fake", "{after}");
    assert_ne!(after["worker"]["pid"], w1["pid"], "{after}");
    assert_eq!(after["worker"]["job_in_process"], 1, "{after}");

    // A hang is killed at the limit, a crash is reported; each time the next job runs in
    // another fresh process.
    let hung = run("// fake-behaviour: hang").await;
    assert_eq!(hung["status"], "timed_out", "{hung}");
    assert!(
        hung["worker"]["ended"]
            .as_str()
            .unwrap()
            .contains("SIGKILL"),
        "{hung}"
    );
    let next = run("").await;
    assert_eq!(next["status"], "fake", "{next}");
    assert_ne!(next["worker"]["pid"], hung["worker"]["pid"]);
    let crashed = run("// fake-behaviour: crash").await;
    assert_eq!(crashed["status"], "crashed", "{crashed}");
    assert!(
        crashed["stderr"]
            .as_str()
            .unwrap()
            .contains("crashing on purpose"),
        "{crashed}"
    );
    let last = run("").await;
    assert_eq!(last["status"], "fake", "{last}");
    assert_ne!(last["worker"]["pid"], crashed["worker"]["pid"]);
    let (status, h) = get(&c, s.url("/api/health")).await;
    assert_eq!(status, 200);
    // Health names the warm worker that ran the last job.
    assert_eq!(
        h["queue"]["workers"][0]["pid"], last["worker"]["pid"],
        "{h}"
    );
    s.stop();
}

#[tokio::test]
async fn warm_fake_runs_are_fast_end_to_end() {
    // Not the H100 target (scripts/serve-device-check.sh measures that), but the service's
    // own part of it: with a warm worker, a small run's round trip has no process start.
    let dir = temp_dir("fast");
    let s = Server::start(&dir, &["--fake-worker"]);
    let c = client();
    let body = add_run("");
    let id = submit(&s, &c, &body).await;
    events(&s, &c, &id).await;
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let id = submit(&s, &c, &body).await;
        let (_, r) = events(&s, &c, &id).await;
        best = best.min(t.elapsed());
        assert!(r["worker"].get("spawn_ms").is_none(), "{r}");
    }
    // Generous for a loaded 2-core CI machine; a new process per job measured ~10x this.
    assert!(best < Duration::from_millis(500), "{best:?}");
    s.stop();
}

#[tokio::test]
async fn a_worker_that_cannot_start_is_reported_and_the_service_keeps_answering() {
    let dir = temp_dir("no-worker");
    let missing = dir.join("no-such-hopfuse");
    let s = Server::start(
        &dir,
        &["--fake-worker", "--worker-exe", missing.to_str().unwrap()],
    );
    let c = client();
    for _ in 0..2 {
        let id = submit(&s, &c, &add_run("")).await;
        let (_, r) = events(&s, &c, &id).await;
        assert_eq!(r["status"], "crashed", "{r}");
        assert!(
            r["message"]
                .as_str()
                .unwrap()
                .contains("the worker did not start: cannot start the worker"),
            "{r}"
        );
    }
    let (status, h) = get(&c, s.url("/api/health")).await;
    assert_eq!(status, 200);
    assert!(h["queue"]["workers"][0].is_null(), "{h}");
    s.stop();
}

/// `POST /api/run` lowers each program once, in the service, for the run's sizes (before, the
/// checks lowered it three times); the worker runs that compilation (see the worker test
/// `a_job_with_its_compilation_is_not_lowered_again`).
#[tokio::test]
async fn a_run_is_compiled_once() {
    let dir = temp_dir("compile-once");
    let s = Server::start(&dir, &["--fake-worker"]);
    let c = client();
    let lowered = |h: &Value| h["compiles"]["lowered"].as_u64().unwrap();
    let (_, h) = get(&c, s.url("/api/health")).await;
    let before = lowered(&h);
    let job = submit(&s, &c, &add_run("")).await;
    let (_, result) = events(&s, &c, &job).await;
    assert_eq!(result["status"], "fake", "{result}");
    assert_eq!(result["compile"]["index_type"], "i32", "{result}");
    // The service's lowering is the job's first step; the worker adds none.
    assert_eq!(result["progress"], json!(["lowering"]), "{result}");
    let (_, h) = get(&c, s.url("/api/health")).await;
    assert_eq!(lowered(&h), before + 1, "{h}");
    // A/B: each program once.
    let ab = json!({
        "program": example("add.hf"),
        "program_b": example("bias_add.hf"),
        "sizes": {"M": 256, "N": 256},
    });
    let job = submit(&s, &c, &ab).await;
    let (_, result) = events(&s, &c, &job).await;
    assert_eq!(result["b"]["status"], "fake", "{result}");
    let (_, h) = get(&c, s.url("/api/health")).await;
    assert_eq!(lowered(&h), before + 3, "{h}");
    s.stop();
}
