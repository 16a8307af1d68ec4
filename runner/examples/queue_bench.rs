//! Jobs through the in-process queue against jobs through NATS JetStream, with fake workers
//! (a benchmark, not a test; results in docs/benchmarks.md):
//!
//! ```sh
//! cargo build --release -p hopfuse-runner --example queue_bench
//! target/release/examples/queue_bench [--jobs 2000] [--latency-jobs 200] [--gpus 4] [--concurrency 64]
//! ```
//!
//! It starts both set-ups side by side, as real processes on loopback: `hopfuse serve
//! --fake-worker --gpus G` (in-process), and a `nats-server -js` (file storage) with `hopfuse
//! serve --queue` and G `hopfuse agent --fake-worker` (one GPU each); SQLite run history in
//! both. Then, through the HTTP API as a client sees it: the latency of one job at a time (POST
//! /api/run to its `done` SSE event; median and 90th percentile of `--latency-jobs` jobs after
//! 20 warm-up jobs, the two set-ups' jobs interleaved so the machine's other work weighs on
//! both alike), and the throughput of `--jobs` jobs submitted `--concurrency` at a time, each
//! followed to its `done` event (three rounds each, alternating). The fake worker compiles nothing on the GPU, so the numbers are the queue's and
//! the service's own costs. The added latency of JetStream is the difference of the medians,
//! both as the client sees it and of the queue's cost inside the service (from the `done`
//! event: the time from queueing the job to `done` less the worker's time, so the same
//! compile of the request in both modes is left out).
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
/// Returns the time the client saw, and the service's own time from queueing the job to `done`
/// less the worker's time (the queue's cost: dispatch, transport, storing the run).
async fn one_job(c: &reqwest::Client, base: &str, i: usize) -> (Duration, f64) {
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
    let done: Value = text
        .split("\n\n")
        .find(|block| block.starts_with("event: done"))
        .and_then(|block| block.lines().find_map(|l| l.strip_prefix("data: ")))
        .and_then(|data| serde_json::from_str(data).ok())
        .unwrap_or_else(|| panic!("no done event: {text}"));
    assert_eq!(done["result"]["status"], json!("fake"), "{done}");
    let overhead =
        done["elapsed_ms"].as_f64().unwrap() - done["result"]["worker_ms"].as_f64().unwrap();
    (took, overhead)
}

struct Measured {
    median_ms: f64,
    p90_ms: f64,
    /// Median of the service's time from queueing to `done` less the worker's.
    overhead_ms: f64,
    /// Each throughput round's jobs per second.
    jobs_per_s: Vec<f64>,
}

fn client(o: &Options) -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(o.concurrency * 2)
        .build()
        .unwrap()
}

/// The latency of one job at a time, the two services' jobs interleaved (A, B, A, B, ...), so
/// that whatever else the machine does weighs on both alike.
async fn latencies(bases: [&str; 2], o: &Options) -> [(f64, f64, f64); 2] {
    let c = client(o);
    for i in 0..20 {
        for base in bases {
            one_job(&c, base, i).await;
        }
    }
    let mut samples: [(Vec<f64>, Vec<f64>); 2] = Default::default();
    for i in 0..o.latency_jobs {
        for (base, (times, overheads)) in bases.iter().zip(samples.iter_mut()) {
            let (took, overhead) = one_job(&c, base, 100 + i).await;
            times.push(took.as_secs_f64() * 1e3);
            overheads.push(overhead);
        }
    }
    samples.map(|(mut times, mut overheads)| {
        times.sort_by(f64::total_cmp);
        overheads.sort_by(f64::total_cmp);
        let at = |v: &[f64], q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        (at(&times, 0.5), at(&times, 0.9), at(&overheads, 0.5))
    })
}

/// Jobs per second of `--jobs` jobs, `--concurrency` at a time, each followed to `done`.
async fn throughput(base: &str, o: &Options, round: usize) -> f64 {
    let c = client(o);
    let gate = Arc::new(tokio::sync::Semaphore::new(o.concurrency));
    let start = Instant::now();
    let tasks: Vec<_> = (0..o.jobs)
        .map(|i| {
            let (c, base, gate) = (c.clone(), base.to_string(), gate.clone());
            tokio::spawn(async move {
                let _permit = gate.acquire_owned().await.unwrap();
                one_job(&c, &base, (round + 1) * 1_000_000 + i).await
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    o.jobs as f64 / start.elapsed().as_secs_f64()
}

/// Latencies interleaved, then three throughput rounds per service, alternating.
async fn measure(bases: [&str; 2], o: &Options) -> [Measured; 2] {
    let lat = latencies(bases, o).await;
    let mut rates: [Vec<f64>; 2] = Default::default();
    for round in 0..3 {
        for (base, r) in bases.iter().zip(rates.iter_mut()) {
            r.push(throughput(base, o, round).await);
        }
    }
    let [l0, l1] = lat;
    let [r0, r1] = rates;
    [(l0, r0), (l1, r1)].map(|((median_ms, p90_ms, overhead_ms), jobs_per_s)| Measured {
        median_ms,
        p90_ms,
        overhead_ms,
        jobs_per_s,
    })
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
    let (_local, local_base) = serve(&local_dir, &["--fake-worker", "--gpus", &gpus]);

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
    let (_front, remote_base) = serve(&nats_dir, &["--queue", &url]);
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
    let [local, remote] = measure([&local_base, &remote_base], &o).await;

    println!(
        "{} jobs ({} at a time), {} GPU(s) of fake workers; latency: {} jobs one at a time\n",
        o.jobs, o.concurrency, o.gpus, o.latency_jobs
    );
    println!(
        "| queue | jobs/s (3 rounds) | median latency (ms) | p90 latency (ms) | median queue cost (ms) |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (name, m) in [("in-process", &local), ("NATS JetStream", &remote)] {
        println!(
            "| {name} | {} | {:.2} | {:.2} | {:.2} |",
            m.jobs_per_s
                .iter()
                .map(|r| format!("{r:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
            m.median_ms,
            m.p90_ms,
            m.overhead_ms
        );
    }
    println!(
        "\nadded median latency per job through JetStream: {:.2} ms as the client sees it, {:.2} ms \
         of queue cost in the service",
        remote.median_ms - local.median_ms,
        remote.overhead_ms - local.overhead_ms
    );
    let _ = std::fs::remove_dir_all(&dir);
}
