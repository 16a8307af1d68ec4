//! The `hopfuse worker` protocol: job JSON on stdin, JSON lines on stdout, the outcome last.
//! Without a GPU the real worker must still end with a clear error outcome.

use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};

fn worker(args: &[&str], stdin: &str) -> (Vec<Value>, std::process::ExitStatus) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopfuse"))
        .arg("worker")
        .args(args)
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
    if o["status"] == "measured" {
        eprintln!("SKIPPED: this machine has a GPU");
        return;
    }
    assert_eq!(o["status"], "error", "{o}");
    let stage = o["error"]["stage"].as_str().unwrap();
    // NVRTC missing, or no driver: either way a stage and a message.
    assert!(stage == "cuda" || stage == "nvrtc", "{o}");
    assert!(!o["error"]["message"].as_str().unwrap().is_empty());
    let steps: Vec<&str> = lines.iter().filter_map(|l| l["step"].as_str()).collect();
    assert_eq!(&steps[..2], ["lowering", "reference"], "{lines:?}");
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
