//! The `hopfuse worker` protocol: job JSON on stdin, JSON lines on stdout, the outcome last.
//! Without a GPU the real worker must still end with a clear error outcome. The workers here
//! see no GPU (`CUDA_VISIBLE_DEVICES` empty), so these tests run the same on a GPU machine.

use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};

fn worker(args: &[&str], stdin: &str) -> (Vec<Value>, std::process::ExitStatus) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopfuse"))
        .arg("worker")
        .args(args)
        .env("CUDA_VISIBLE_DEVICES", "")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
        .collect();
    (lines, out.status)
}

fn job(source: &str) -> String {
    json!({"request": {
        "file": "t.hf", "source": source, "sizes": {"M": 64, "N": 64},
        "iters": 2, "warmup": 0, "seed": 1, "index": null, "copy_ceiling": false,
    }})
    .to_string()
}

fn add() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/basics/add.hf"
    ))
    .unwrap()
}

#[test]
fn bad_job_json_gets_an_error_outcome() {
    let (lines, status) = worker(&[], "{not json");
    assert_eq!(status.code(), Some(2));
    let last = lines.last().unwrap();
    assert_eq!(last["event"], "outcome");
    assert_eq!(last["outcome"]["status"], "error");
    assert_eq!(last["outcome"]["error"]["stage"], "request");
}

#[test]
fn a_compile_error_is_an_error_outcome() {
    let (lines, status) = worker(&[], &job("fusion f {\n @@@\n}"));
    assert!(status.success());
    assert_eq!(lines[0], json!({"event": "progress", "step": "lowering"}));
    let o = &lines.last().unwrap()["outcome"];
    assert_eq!(o["status"], "error");
    assert_eq!(o["error"]["stage"], "compile");
    assert!(
        o["error"]["message"].as_str().unwrap().contains("t.hf:2:2"),
        "{o}"
    );
}

#[test]
fn the_real_worker_without_a_gpu_ends_with_a_clear_error() {
    let (lines, status) = worker(&[], &job(&add()));
    assert!(status.success());
    let o = &lines.last().unwrap()["outcome"];
    assert_eq!(o["status"], "error", "{o}");
    let stage = o["error"]["stage"].as_str().unwrap();
    // NVRTC missing, or no driver: either way a stage and a message.
    assert!(stage == "cuda" || stage == "nvrtc", "{o}");
    assert!(!o["error"]["message"].as_str().unwrap().is_empty());
    // The device is opened right after the program's own checks: no float64 reference (nor
    // NVRTC) is spent on a machine that cannot run the kernel.
    let steps: Vec<&str> = lines.iter().filter_map(|l| l["step"].as_str()).collect();
    assert_eq!(steps.first(), Some(&"lowering"), "{lines:?}");
    assert!(!steps.contains(&"reference"), "{lines:?}");
}

#[test]
fn the_fake_worker_compiles_and_measures_nothing() {
    let (lines, status) = worker(&["--fake"], &job(&add()));
    assert!(status.success());
    let o = &lines.last().unwrap()["outcome"];
    assert_eq!(o["status"], "fake");
    assert_eq!(o["fake"], true);
    assert_eq!(o["compile"]["kernel"], "add_kernel");
    assert!(!o.to_string().contains("timing"));
}

/// The fake worker's outcome for `examples/<example>` at size `N = n`.
fn fake_outcome(example: &str, n: i64) -> Value {
    let path = format!("{}/../examples/{example}", env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(path).unwrap();
    let job = json!({"request": {
        "file": "t.hf", "source": source, "sizes": {"N": n},
        "iters": 2, "warmup": 0, "seed": 1, "index": null, "copy_ceiling": false,
    }})
    .to_string();
    let (lines, status) = worker(&["--fake"], &job);
    assert!(status.success(), "{lines:?}");
    lines.last().unwrap()["outcome"].clone()
}

#[test]
fn a_scalar_output_of_a_grid_reduction_runs_through_the_fake_worker() {
    // The full-reduction scheduler's grid at the ragged bench size: one wave of blocks, a
    // one-element output and the zeroed workspace counted in the working set.
    let outcome = fake_outcome("auto/total_sum.hf", 1000037);
    let o = &outcome;
    assert_eq!(o["status"], "fake", "{o}");
    assert_eq!(o["compile"]["kernel"], "total_sum_kernel");
    // ceil(1000037 / (4 * 256 * 4)) = 245 steps of one block each.
    assert_eq!(o["compile"]["launch"]["grid"], json!([245, 1, 1]), "{o}");
    // x, t (4 bytes) and the workspace (a counter and 65536 partials of 8 bytes).
    let working_set = o["compile"]["working_set_bytes"].as_u64().unwrap();
    assert_eq!(working_set, 4 * 1000037 + 4 + 8 * (1 + 65536), "{o}");
}

#[test]
fn per_tensor_quantization_runs_as_two_kernels_through_the_fake_worker() {
    // The amax kernel (a grid reduction into the scalar `amax`, an output the second kernel
    // reads) and the quantizing kernel.
    let outcome = fake_outcome("ops/quantize_fp8_tensor.hf", 1000037);
    let o = &outcome;
    assert_eq!(o["status"], "fake", "{o}");
    // x (bf16), amax once for both kernels, q (e4m3) and the first kernel's workspace.
    let working_set = o["compile"]["working_set_bytes"].as_u64().unwrap();
    assert_eq!(
        working_set,
        2 * 1000037 + 4 + 1000037 + 8 * (1 + 65536),
        "{o}"
    );
}

#[test]
fn the_fake_behaviours_hook_only_in_fake_mode() {
    let out = Command::new(env!("CARGO_BIN_EXE_hopfuse"))
        .args(["worker", "--fake-behaviour", "crash"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fake"));
    let (lines, status) = worker(&["--fake", "--fake-behaviour", "crash"], &job(&add()));
    assert!(!status.success());
    assert!(lines.iter().all(|l| l["event"] != "outcome"));
}

#[test]
fn the_probe_says_what_it_found() {
    let out = Command::new(env!("CARGO_BIN_EXE_hopfuse"))
        .args(["worker", "--probe"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["gpu"].is_object() || v["reason"].is_string(), "{v}");
}

/// `hopfuse worker --serve`: the events of all jobs written at once, stdin then closed.
fn serve(args: &[&str], jobs: &[String]) -> (Vec<Value>, std::process::ExitStatus) {
    let mut full = vec!["--serve"];
    full.extend_from_slice(args);
    worker(&full, &(jobs.join("\n") + "\n"))
}

#[test]
fn a_warm_worker_runs_one_job_per_line_until_stdin_closes() {
    let jobs = [job(&add()), "{not json".to_string(), job(&add())];
    let (lines, status) = serve(&["--fake"], &jobs);
    assert!(status.success());
    assert_eq!(lines[0]["event"], "ready", "{lines:?}");
    assert_eq!(lines[0]["ready"]["fake"], true);
    let ends: Vec<&Value> = lines.iter().filter(|l| l["event"] == "job_end").collect();
    assert_eq!(ends.len(), 3, "{lines:?}");
    assert!(ends.iter().all(|e| e["exit"] == false));
    assert_eq!(ends[2]["jobs"], 3);
    let outcomes: Vec<&str> = lines
        .iter()
        .filter(|l| l["event"] == "outcome")
        .map(|l| l["outcome"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["fake", "error", "fake"]);
}

#[test]
fn a_warm_worker_exits_after_a_cuda_error() {
    let jobs = [job(&add()), job(&add())];
    let (lines, status) = serve(&["--fake", "--fake-behaviour", "cuda-error"], &jobs);
    assert!(status.success());
    let ends: Vec<&Value> = lines.iter().filter(|l| l["event"] == "job_end").collect();
    // The second job is never read.
    assert_eq!(ends.len(), 1, "{lines:?}");
    assert_eq!(ends[0]["exit"], true);
    assert!(ends[0]["reason"].as_str().unwrap().contains("poisoned"));
}

#[test]
fn a_warm_real_worker_without_a_gpu_says_why_and_exits_after_the_job() {
    let (lines, status) = serve(&[], &[job(&add()), job(&add())]);
    assert!(status.success());
    let ready = &lines[0]["ready"];
    assert!(ready["gpu"].is_null(), "{ready}");
    assert!(ready["gpu_error"].is_string(), "{ready}");
    let o = lines
        .iter()
        .find(|l| l["event"] == "outcome")
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(o["outcome"]["status"], "error", "{o}");
    let stage = o["outcome"]["error"]["stage"].as_str().unwrap();
    let end = lines.iter().find(|l| l["event"] == "job_end").unwrap();
    // A CUDA error (no driver) ends the worker; an NVRTC error (no libnvrtc) does not.
    assert_eq!(end["exit"], stage == "cuda", "{lines:?}");
}

/// A job that carries its compilation (as the service sends it) is run as given: the worker
/// does not lower the program (no `lowering` step) and uses the CUDA and plan it got.
#[test]
fn a_job_with_its_compilation_is_not_lowered_again() {
    use hopfuse_runner::engine::{self, Prepared, RunRequest};
    let request: RunRequest = serde_json::from_value(
        serde_json::from_str::<Value>(&job(&add())).unwrap()["request"].clone(),
    )
    .unwrap();
    let (compilation, setup) = engine::prepare(&request).unwrap();
    let mut prepared = Prepared::new(&compilation, setup);
    // Marked, so the outcome shows which CUDA the worker took.
    prepared.cuda = format!("// compiled by the service\n{}", prepared.cuda);
    let cuda_bytes = prepared.cuda.len();
    let job = json!({"request": request, "prepared": prepared}).to_string();
    let (lines, status) = worker(&["--fake"], &job);
    assert!(status.success());
    assert!(
        lines.iter().all(|l| l["step"] != "lowering"),
        "the worker lowered the program again: {lines:?}"
    );
    let o = &lines.last().unwrap()["outcome"];
    assert_eq!(o["status"], "fake", "{o}");
    assert_eq!(o["compile"]["cuda_bytes"], cuda_bytes, "{o}");
    assert_eq!(o["compile"]["index_type"], "i32", "{o}");
    // Without it, the worker compiles (and says so).
    let (lines, _) = worker(&["--fake"], &json!({"request": request}).to_string());
    assert_eq!(lines[0], json!({"event": "progress", "step": "lowering"}));
}
