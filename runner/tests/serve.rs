//! `hopfuse serve` end to end, without a GPU: each test starts the real binary on a free port
//! (with the fake worker where it runs jobs) and talks HTTP to it.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TIMEOUT_MESSAGE: &str =
    "timed out: the kernel did not finish (a deadlock such as an mbarrier that never completes?)";

struct Server {
    child: Child,
    base: String,
    dir: PathBuf,
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hopfuse-serve-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Server {
    /// Starts `hopfuse serve` with its data in `dir` and these extra arguments.
    fn start(dir: &Path, extra: &[&str]) -> Server {
        Server::start_env(dir, extra, &[])
    }

    /// [`Server::start`] with extra environment variables.
    fn start_env(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("serve.log"))
            .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_hopfuse"))
            .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .args(if extra.contains(&"--static-dir") {
                vec![]
            } else {
                vec!["--static-dir".into(), dir.join("no-dist").into_os_string()]
            })
            .args(extra)
            .env_remove("HOPFUSE_TOKEN")
            .env_remove("HOPFUSE_DB")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start hopfuse serve");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let base = loop {
            let line = lines
                .next()
                .and_then(|l| l.ok())
                .unwrap_or_else(|| panic!("hopfuse serve exited; see {}", dir.display()));
            if let Some(addr) = line.strip_prefix("hopfuse serve: listening on ") {
                break addr.trim().to_string();
            }
        };
        // Keep draining stdout so the server never blocks on it.
        std::thread::spawn(move || for _ in lines {});
        Server {
            child,
            base,
            dir: dir.to_path_buf(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

fn example(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/basics")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

fn add_run(extra_comment: &str) -> Value {
    json!({
        "program": format!("{extra_comment}\n{}", example("add.hf")),
        "sizes": {"M": 256, "N": 256},
        "iters": 5,
    })
}

async fn post(
    c: &reqwest::Client,
    url: String,
    body: String,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let r = c.post(url).body(body).send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"));
    (status, v, headers)
}

async fn get(c: &reqwest::Client, url: String) -> (u16, Value) {
    let r = c.get(url).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"));
    (status, v)
}

/// Submits a run and returns its job id (asserting 202).
async fn submit(s: &Server, c: &reqwest::Client, body: &Value) -> String {
    let (status, v, _) = post(c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 202, "{v}");
    v["job_id"].as_str().unwrap().to_string()
}

/// Reads a job's SSE stream to its `done` event: the event names in order and the result.
async fn events(s: &Server, c: &reqwest::Client, id: &str) -> (Vec<String>, Value) {
    let mut r = c
        .get(s.url(&format!("/api/jobs/{id}/events")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut text = String::new();
    while let Some(chunk) = r.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
        if text.contains("event: done") && text.ends_with("\n\n") {
            break;
        }
    }
    let names = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .map(str::to_string)
        .collect();
    let done = text
        .split("\n\n")
        .find(|block| block.starts_with("event: done"))
        .and_then(|block| block.lines().find_map(|l| l.strip_prefix("data: ")))
        .unwrap_or_else(|| panic!("no done event in {text}"));
    let event: Value = serde_json::from_str(done).unwrap();
    (names, event["result"].clone())
}

#[tokio::test]
async fn compile_reports_cuda_passes_and_located_diagnostics() {
    let dir = temp_dir("compile");
    let s = Server::start(&dir, &["--fake-worker"]);
    let c = client();
    let good = json!({"program": example("softmax.hf")}).to_string();
    let (status, v, _) = post(&c, s.url("/api/compile"), good).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["cuda"].as_str().unwrap().contains("__global__"));
    assert!(v["passes"].as_array().unwrap().len() >= 5);
    assert!(v["passes"][0]["name"].is_string() && v["passes"][0]["ir"].is_string());
    assert!(v["plan"]["kernel_name"].is_string());
    assert_eq!(v["diagnostics"], json!([]));
    assert!(v["lower_ms"].as_f64().unwrap() >= 0.0);

    // A program error is a 200 with located diagnostics (the playground shows them).
    let bad = json!({"program": "fusion f {\n  input x: f32[N]\n  y = exp(x\n  output y\n}"});
    let (status, v, _) = post(&c, s.url("/api/compile"), bad.to_string()).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["cuda"].is_null());
    let d = &v["diagnostics"][0];
    assert!(d["message"].as_str().unwrap().contains("expected"), "{d}");
    // At the unclosed `(`.
    assert_eq!(
        (d["line"].as_u64(), d["column"].as_u64()),
        (Some(3), Some(10)),
        "{d}"
    );

    // Malformed JSON, wrong shapes and unknown fields: 400 with a message.
    for body in [
        "{bad",
        "",
        "[]",
        r#"{"program": 5}"#,
        r#"{"program": "x", "nope": 1}"#,
    ] {
        let (status, v, _) = post(&c, s.url("/api/compile"), body.to_string()).await;
        assert_eq!(status, 400, "{body}: {v}");
        assert!(v["error"].as_str().unwrap().contains("JSON"), "{v}");
    }
    // Unknown endpoints and methods answer JSON too.
    let (status, v) = get(&c, s.url("/api/nope")).await;
    assert_eq!(status, 404, "{v}");
    let (status, v) = get(&c, s.url("/api/compile")).await;
    assert_eq!(status, 405, "{v}");
    // Without dist/, the root says so in HTML.
    let root = c.get(s.url("/")).send().await.unwrap();
    assert_eq!(root.status(), 200);
    assert!(root.text().await.unwrap().contains("not built yet"));
    s.stop();
}

#[tokio::test]
async fn static_files_are_served_from_the_static_dir() {
    let dir = temp_dir("static");
    let dist = dir.join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    std::fs::write(dist.join("index.html"), "<h1>playground</h1>").unwrap();
    let dist_arg = dist.display().to_string();
    let s = Server::start(&dir, &["--fake-worker", "--static-dir", &dist_arg]);
    let c = client();
    let text = c
        .get(s.url("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text, "<h1>playground</h1>");
    assert_eq!(
        c.get(s.url("/missing.js")).send().await.unwrap().status(),
        404
    );
    s.stop();
}

#[tokio::test]
async fn run_errors_are_400_with_the_limit_named() {
    let dir = temp_dir("run-errors");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--max-iters",
            "50",
            "--max-tensor-bytes",
            "1000000",
        ],
    );
    let c = client();
    let mut body = add_run("");
    body["iters"] = json!(51);
    let (status, v, _) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["limit"], "max_iters", "{v}");
    assert!(v["error"].as_str().unwrap().contains("max_iters"), "{v}");

    let mut body = add_run("");
    body["sizes"] = json!({"M": 4096, "N": 4096});
    let (status, v, _) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["limit"], "max_tensor_bytes", "{v}");

    // A program that does not compile: 400 with located diagnostics.
    let body = json!({"program": "fusion f {\n  @@@\n}", "sizes": {}, "iters": 5});
    let (status, v, _) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["diagnostics"][0]["line"].as_u64() >= Some(1), "{v}");

    // Missing and negative sizes.
    let mut body = add_run("");
    body["sizes"] = json!({"M": 16});
    let (status, v, _) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains('N'), "{v}");
    body["sizes"] = json!({"M": -16, "N": 4});
    let (status, v, _) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 400, "{v}");
    body["sizes"] = json!({"M": "big", "N": 4});
    let (status, v, _) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 400, "{v}");
    let (status, v) = get(&c, s.url("/api/jobs/nope")).await;
    assert_eq!(status, 404, "{v}");
    s.stop();
}

#[tokio::test]
async fn oversize_bodies_and_programs_are_413() {
    let dir = temp_dir("oversize");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--max-body-bytes",
            "4000",
            "--max-program-bytes",
            "2000",
        ],
    );
    let c = client();
    let big = json!({"program": "x".repeat(5000)}).to_string();
    let (status, v, _) = post(&c, s.url("/api/compile"), big).await;
    assert_eq!(status, 413, "{v}");
    assert_eq!(v["limit"], "max_body_bytes", "{v}");
    let long = json!({"program": "x".repeat(3000)}).to_string();
    for path in ["/api/compile", "/api/run", "/api/links"] {
        let (status, v, _) = post(&c, s.url(path), long.clone()).await;
        assert_eq!(status, 413, "{path}: {v}");
        assert_eq!(v["limit"], "max_program_bytes", "{v}");
    }
    s.stop();
}

#[tokio::test]
async fn a_token_is_required_when_set() {
    let dir = temp_dir("token");
    let s = Server::start(&dir, &["--fake-worker", "--token", "s3cret"]);
    let c = client();
    let body = json!({"program": example("add.hf")}).to_string();
    let r = c
        .post(s.url("/api/compile"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    let v: Value = r.json().await.unwrap();
    assert!(v["error"].as_str().unwrap().contains("token"), "{v}");
    let r = c
        .post(s.url("/api/compile"))
        .bearer_auth("wrong")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = c
        .post(s.url("/api/compile"))
        .bearer_auth("s3cret")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for path in [
        "/api/links/abc",
        "/api/jobs/abc",
        "/api/jobs/abc/events",
        "/api/runs",
    ] {
        assert_eq!(
            c.get(s.url(path)).send().await.unwrap().status(),
            401,
            "{path}"
        );
    }
    // Health stays open (monitoring), and says a token is needed.
    let (status, v) = get(&c, s.url("/api/health")).await;
    assert_eq!(status, 200);
    assert_eq!(v["limits"]["token_required"], true);
    s.stop();
}

#[tokio::test]
async fn cors_allows_only_listed_origins() {
    let dir = temp_dir("cors");
    let s = Server::start(
        &dir,
        &["--fake-worker", "--cors-origin", "https://play.example"],
    );
    let c = client();
    let preflight = |origin: &'static str| {
        c.request(reqwest::Method::OPTIONS, s.url("/api/compile"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type,authorization",
            )
            .send()
    };
    let ok = preflight("https://play.example").await.unwrap();
    assert_eq!(
        ok.headers()["access-control-allow-origin"],
        "https://play.example"
    );
    let other = preflight("https://evil.example").await.unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
    s.stop();
}

#[tokio::test]
async fn the_queue_cap_and_the_rate_limit_answer_429_with_retry_after() {
    let dir = temp_dir("queue-full");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--fake-behaviour",
            "hang",
            "--job-timeout",
            "2",
            "--queue-cap",
            "2",
        ],
    );
    let c = client();
    let body = add_run("");
    submit(&s, &c, &body).await;
    submit(&s, &c, &body).await;
    let (status, v, headers) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 429, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("queue is full"),
        "{v}"
    );
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1);
    let (_, h) = get(&c, s.url("/api/health")).await;
    assert_eq!(
        h["queue"]["queued"].as_u64().unwrap() + h["queue"]["running"].as_u64().unwrap(),
        2
    );
    s.stop();

    // One client's own cap.
    let dir = temp_dir("client-cap");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--fake-behaviour",
            "hang",
            "--job-timeout",
            "2",
            "--client-queue-cap",
            "1",
        ],
    );
    submit(&s, &c, &body).await;
    let (status, v, headers) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 429, "{v}");
    assert_eq!(v["limit"], "client_queue_cap", "{v}");
    assert!(headers.contains_key("retry-after"));
    s.stop();

    let dir = temp_dir("rate-limit");
    let s = Server::start(&dir, &["--fake-worker", "--runs-per-minute", "2"]);
    submit(&s, &c, &body).await;
    submit(&s, &c, &body).await;
    let (status, v, headers) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 429, "{v}");
    assert!(v["error"].as_str().unwrap().contains("rate limit"), "{v}");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    s.stop();
}

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

#[tokio::test]
async fn without_a_gpu_runs_answer_503_and_compile_works() {
    let dir = temp_dir("no-gpu");
    // No GPU visible to the service's probe, also on a machine that has one.
    let s = Server::start_env(&dir, &[], &[("CUDA_VISIBLE_DEVICES", "")]);
    let c = client();
    let (_, h) = get(&c, s.url("/api/health")).await;
    assert!(h["gpu"].is_null(), "{h}");
    assert_eq!(h["run_available"], false, "{h}");
    assert!(h["gpu_reason"].is_string(), "{h}");
    let (status, v, _) = post(&c, s.url("/api/run"), add_run("").to_string()).await;
    assert_eq!(status, 503, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("no usable GPU"),
        "{v}"
    );
    let body = json!({"program": example("add.hf")}).to_string();
    let (status, _, _) = post(&c, s.url("/api/compile"), body).await;
    assert_eq!(status, 200);
    s.stop();
}

#[tokio::test]
async fn links_and_run_history_persist_across_a_restart() {
    let dir = temp_dir("restart");
    let c = client();
    let s = Server::start(&dir, &["--fake-worker"]);
    let body = json!({"program": example("add.hf"), "state": {"sizes": {"M": 1024, "N": 1024}}});
    let (status, a, _) = post(&c, s.url("/api/links"), body.to_string()).await;
    assert_eq!(status, 200, "{a}");
    let (_, b, _) = post(&c, s.url("/api/links"), body.to_string()).await;
    assert_eq!(a["id"], b["id"], "same program and state, same id");
    let other = json!({"program": example("add.hf"), "state": {"sizes": {"M": 8, "N": 8}}});
    let (_, o, _) = post(&c, s.url("/api/links"), other.to_string()).await;
    assert_ne!(a["id"], o["id"]);
    let job = submit(&s, &c, &add_run("")).await;
    events(&s, &c, &job).await;
    // The run history is written just after the `done` event: wait for it before the restart.
    let t = Instant::now();
    loop {
        let (_, runs) = get(&c, s.url("/api/runs")).await;
        if runs["runs"][0]["id"] == job.as_str() {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{runs}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.stop();

    let s = Server::start(&dir, &["--fake-worker"]);
    let id = a["id"].as_str().unwrap();
    let (status, link) = get(&c, s.url(&format!("/api/links/{id}"))).await;
    assert_eq!(status, 200, "{link}");
    assert_eq!(link["program"], body["program"]);
    assert_eq!(link["state"], body["state"]);
    let (_, again, _) = post(&c, s.url("/api/links"), body.to_string()).await;
    assert_eq!(again["id"], a["id"]);
    // The finished job is in the run history.
    let (status, r) = get(&c, s.url(&format!("/api/jobs/{job}"))).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["status"], "fake");
    let (_, replay) = events(&s, &c, &job).await;
    assert_eq!(replay["job_id"], job.as_str());
    let (_, runs) = get(&c, s.url("/api/runs")).await;
    assert_eq!(runs["runs"][0]["id"], job.as_str());
    s.stop();
    assert!(s_dir_has_db(&dir));
}

fn s_dir_has_db(dir: &Path) -> bool {
    dir.join("hopfuse.db").is_file()
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

/// A compile whose client went away keeps its slot while it runs (the permit follows the
/// work), and SIGTERM does not wait for it.
#[tokio::test]
async fn an_abandoned_compile_keeps_its_slot_and_does_not_hold_shutdown() {
    let dir = temp_dir("abandoned-compile");
    let mut s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--compile-slots",
            "1",
            "--compile-timeout",
            "120",
            "--compile-test-delay-ms",
            "60000",
        ],
    );
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let body = json!({"program": example("add.hf")}).to_string();
    let gone = impatient
        .post(s.url("/api/compile"))
        .body(body)
        .send()
        .await;
    assert!(gone.is_err(), "the client gives up: {gone:?}");
    let c = client();
    let (_, h) = get(&c, s.url("/api/health")).await;
    assert_eq!(h["compiles"]["slots"], 1, "{h}");
    assert_eq!(
        h["compiles"]["running"], 1,
        "the abandoned compile holds its slot: {h}"
    );
    // SIGTERM: the service exits without waiting the minute the compile still needs.
    let start = Instant::now();
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(
        unsafe { libc::kill(s.child.id() as libc::pid_t, libc::SIGTERM) },
        0
    );
    let status = loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "SIGTERM waited on the abandoned compile"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status:?}");
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
}

/// A compile past the deadline answers 422 at the deadline; while its compile still holds the
/// only slot, the next request answers 503 with Retry-After (compile and run alike).
#[tokio::test]
async fn compiles_past_the_deadline_get_an_error_at_the_deadline() {
    let dir = temp_dir("compile-deadline");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--compile-slots",
            "1",
            "--compile-timeout",
            "1",
            "--compile-test-delay-ms",
            "4000",
        ],
    );
    let c = client();
    let body = json!({"program": example("add.hf")}).to_string();
    let start = Instant::now();
    let (status, v, _) = post(&c, s.url("/api/compile"), body.clone()).await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["limit"], "compile_timeout_s", "{v}");
    assert!(v["error"].as_str().unwrap().contains("deadline"), "{v}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    let (status, v, headers) = post(&c, s.url("/api/compile"), body).await;
    assert_eq!(status, 503, "{v}");
    assert!(headers.contains_key("retry-after"), "{headers:?}");
    let (status, v, _) = post(&c, s.url("/api/run"), add_run("").to_string()).await;
    assert!(status == 503 || status == 422, "{status} {v}");
    assert_eq!(v["limit"], "compile_timeout_s", "{v}");
    let (_, h) = get(&c, s.url("/api/health")).await;
    assert_eq!(h["limits"]["compile_timeout_s"], 1.0, "{h}");
    s.stop();
}

/// `--keep-runs` bounds the run history: after four runs with a limit of two, the two newest
/// are left.
#[tokio::test]
async fn the_run_history_keeps_what_the_retention_flags_say() {
    let dir = temp_dir("retention");
    let s = Server::start(&dir, &["--fake-worker", "--keep-runs", "2"]);
    let c = client();
    let mut jobs = Vec::new();
    for _ in 0..4 {
        let job = submit(&s, &c, &add_run("")).await;
        events(&s, &c, &job).await;
        jobs.push(job);
    }
    let t = Instant::now();
    let runs = loop {
        let (_, runs) = get(&c, s.url("/api/runs?limit=100")).await;
        // Written just after `done`: wait for the last one.
        if runs["runs"][0]["id"] == jobs[3].as_str() {
            break runs;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{runs}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let ids: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{runs}");
    assert!(
        ids.contains(&jobs[3].as_str()) && ids.contains(&jobs[2].as_str()),
        "{ids:?} {jobs:?}"
    );
    let (_, h) = get(&c, s.url("/api/health")).await;
    assert_eq!(h["limits"]["keep_runs"], 2, "{h}");
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
