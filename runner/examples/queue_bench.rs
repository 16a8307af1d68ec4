//! Jobs through the in-process queue against jobs through NATS JetStream, with fake workers
//! (a benchmark, not a test; results in docs/benchmarks.md):
//!
//! ```sh
//! cargo build --release -p hopfuse-runner --example queue_bench
//! target/release/examples/queue_bench [--jobs 2000] [--latency-jobs 200] [--gpus 4] [--concurrency 64]
//! ```
//!
//! For each mode it starts the real processes on loopback: `hopfuse serve --fake-worker --gpus
//! G` (in-process), or a `nats-server -js` (file storage), `hopfuse serve --queue` and G
//! `hopfuse agent --fake-worker` (one GPU each); SQLite run history in both. Then, through the
//! HTTP API as a client sees it: the latency of one job at a time (POST /api/run to its `done`
//! SSE event; median and 90th percentile of `--latency-jobs` jobs after 20 warm-up jobs), and
//! the throughput of `--jobs` jobs submitted `--concurrency` at a time, each followed to its
//! `done` event. The fake worker compiles nothing on the GPU, so the numbers are the queue's and
//! the service's own costs. The added latency of JetStream is the difference of the medians.
//! `nats-server` comes from `HOPFUSE_TEST_NATS_SERVER` or the PATH (scripts/setup-distributed.sh).

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Options {
    jobs: usize,
    latency_jobs: usize,
    gpus: usize,
    concurrency: usize,
}

fn options() -> Options {
    let mut o = Options {
        jobs: 2000,
        latency_jobs: 200,
        gpus: 4,
        concurrency: 64,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = || -> usize {
            pair.get(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{} takes a number", pair[0]))
        };
        match pair[0].as_str() {
            "--jobs" => o.jobs = value(),
            "--latency-jobs" => o.latency_jobs = value(),
            "--gpus" => o.gpus = value().max(1),
            "--concurrency" => o.concurrency = value().max(1),
            other => {
                panic!("unknown option {other} (--jobs, --latency-jobs, --gpus, --concurrency)")
            }
        }
    }
    o
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `target/<profile>/hopfuse`, next to this example's directory.
fn hopfuse() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("hopfuse");
    assert!(
        bin.exists(),
        "{} is missing: cargo build --release -p hopfuse-runner",
        bin.display()
    );
    bin
}

/// Starts `hopfuse ARGS` and waits for a stdout line starting with `ready`; returns the rest.
fn spawn_ready(args: &[String], log: &Path, ready: &str) -> (Proc, String) {
    let log = std::fs::File::create(log).unwrap();
    let mut child = Command::new(hopfuse())
        .args(args)
        .env_remove("HOPFUSE_QUEUE")
        .env_remove("HOPFUSE_DB")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let rest = loop {
        let line = lines.next().and_then(|l| l.ok()).expect("it exited");
        if let Some(rest) = line.strip_prefix(ready) {
            break rest.trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (Proc(child), rest)
}

fn serve(dir: &Path, extra: &[&str]) -> (Proc, String) {
    let mut args: Vec<String> = [
        "serve",
        "--addr",
        "127.0.0.1:0",
        "--runs-per-minute",
        "0",
        "--client-queue-cap",
        "0",
        "--queue-cap",
        "100000",
        "--keep-runs",
        "0",
        "--keep-runs-bytes",
        "0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(["--data-dir".into(), dir.display().to_string()]);
    args.extend([
        "--static-dir".into(),
        dir.join("none").display().to_string(),
    ]);
    args.extend(extra.iter().map(|s| s.to_string()));
    spawn_ready(
        &args,
        &dir.join("serve.log"),
        "hopfuse serve: listening on ",
    )
}

fn body(i: usize) -> String {
    let add = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/basics/add.hf"),
    )
    .unwrap();
    json!({"program": format!("// job {i}\n{add}"), "sizes": {"M": 256, "N": 256}}).to_string()
}

/// One job from POST to its `done` event; checks it ended with the fake worker's result.
async fn one_job(c: &reqwest::Client, base: &str, i: usize) -> Duration {
    let start = Instant::now();
    let r = c
        .post(format!("{base}/api/run"))
        .body(body(i))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let v: Value = r.json().await.unwrap();
    let id = v["job_id"].as_str().unwrap();
    let mut sse = c
        .get(format!("{base}/api/jobs/{id}/events"))
        .send()
        .await
        .unwrap();
    let mut text = String::new();
    while let Some(chunk) = sse.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let took = start.elapsed();
    assert!(
        text.contains("event: done") && text.contains(r#""status":"fake""#),
        "{text}"
    );
    took
}

struct Measured {
    median_ms: f64,
    p90_ms: f64,
    jobs_per_s: f64,
}

async fn measure(base: &str, o: &Options) -> Measured {
    let c = reqwest::Client::builder()
        .pool_max_idle_per_host(o.concurrency * 2)
        .build()
        .unwrap();
    for i in 0..20 {
        one_job(&c, base, i).await;
    }
    let mut times: Vec<f64> = Vec::new();
    for i in 0..o.latency_jobs {
        times.push(one_job(&c, base, 100 + i).await.as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let gate = Arc::new(tokio::sync::Semaphore::new(o.concurrency));
    let start = Instant::now();
    let tasks: Vec<_> = (0..o.jobs)
        .map(|i| {
            let (c, base, gate) = (c.clone(), base.to_string(), gate.clone());
            tokio::spawn(async move {
                let _permit = gate.acquire_owned().await.unwrap();
                one_job(&c, &base, 1_000_000 + i).await
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    Measured {
        median_ms: at(0.5),
        p90_ms: at(0.9),
        jobs_per_s: o.jobs as f64 / start.elapsed().as_secs_f64(),
    }
}

fn nats_server() -> PathBuf {
    std::env::var_os("HOPFUSE_TEST_NATS_SERVER")
        .map(PathBuf::from)
        .or_else(|| {
            ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.exists())
        })
        .expect("no nats-server: eval \"$(scripts/setup-distributed.sh)\"")
}

#[tokio::main]
async fn main() {
    let o = options();
    let dir = std::env::temp_dir().join(format!("hopfuse-queue-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);

    let local_dir = dir.join("local");
    std::fs::create_dir_all(&local_dir).unwrap();
    let gpus = o.gpus.to_string();
    let local = {
        let (_serve, base) = serve(&local_dir, &["--fake-worker", "--gpus", &gpus]);
        measure(&base, &o).await
    };

    let nats_dir = dir.join("nats");
    std::fs::create_dir_all(&nats_dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _nats = Proc(
        Command::new(nats_server())
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(nats_dir.join("store"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(nats_dir.join("nats.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = format!("nats://127.0.0.1:{port}");
    let (_front, base) = serve(&nats_dir, &["--queue", &url]);
    let _agents: Vec<Proc> = (0..o.gpus)
        .map(|i| {
            let name = format!("agent{i}");
            let args: Vec<String> = [
                "agent",
                "--queue",
                &url,
                "--fake-worker",
                "--no-cubin-cache",
                "--name",
                &name,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            spawn_ready(
                &args,
                &nats_dir.join(format!("{name}.log")),
                "hopfuse agent: ",
            )
            .0
        })
        .collect();
    let remote = measure(&base, &o).await;

    println!(
        "{} jobs ({} at a time), {} GPU(s) of fake workers; latency: {} jobs one at a time\n",
        o.jobs, o.concurrency, o.gpus, o.latency_jobs
    );
    println!("| queue | jobs/s | median latency (ms) | p90 latency (ms) |");
    println!("|---|---:|---:|---:|");
    for (name, m) in [("in-process", &local), ("NATS JetStream", &remote)] {
        println!(
            "| {name} | {:.0} | {:.2} | {:.2} |",
            m.jobs_per_s, m.median_ms, m.p90_ms
        );
    }
    println!(
        "\nadded median latency per job through JetStream: {:.2} ms",
        remote.median_ms - local.median_ms
    );
    let _ = std::fs::remove_dir_all(&dir);
}
