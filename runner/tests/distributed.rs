//! The distributed mode end to end, without a GPU: real `nats-server`s (JetStream, file
//! storage; each test starts, stops and restarts its own on a free loopback port), PostgreSQL
//! (`HOPFUSE_TEST_POSTGRES_URL`; each test makes a database of its own), `hopfuse serve
//! --queue` front-ends and `hopfuse agent --fake-worker` GPU hosts, all as real processes.
//! `scripts/setup-distributed.sh` provides the servers; without them the tests report that they
//! did not run (and fail where `HOPFUSE_REQUIRE_NATS` / `HOPFUSE_REQUIRE_POSTGRES` is set).

use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const HOPFUSE: &str = env!("CARGO_BIN_EXE_hopfuse");
/// The agents of the first test.
const AGENTS: [&str; 3] = ["a1", "a2", "a3"];

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hopfuse-dist-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A process killed (SIGKILL) when dropped.
struct Proc(Child);

impl Proc {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// SIGTERM, then waits for the exit: its status, or `None` when it was still running
    /// after 10 s (then it is killed).
    fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Ok(Some(status)) = self.0.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A nats-server with JetStream on a loopback port, its store in `dir`.
struct Nats {
    exe: PathBuf,
    dir: PathBuf,
    port: u16,
    /// Clients must present this token (`--auth`).
    token: Option<String>,
    proc: Option<Proc>,
}

impl Nats {
    fn start(exe: PathBuf, dir: &Path) -> Nats {
        Nats::start_with(exe, dir, None)
    }

    fn start_with(exe: PathBuf, dir: &Path, token: Option<&str>) -> Nats {
        let mut nats = Nats {
            exe,
            dir: dir.join("nats"),
            port: free_port(),
            token: token.map(str::to_string),
            proc: None,
        };
        nats.restart();
        nats
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts it (again, on the same port and store) and waits until it takes connections.
    fn restart(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.with_extension("log"))
            .unwrap();
        let child = Command::new(&self.exe)
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(&self.dir)
            .args(self.token.iter().flat_map(|t| ["--auth", t]))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nats-server");
        self.proc = Some(Proc(child));
        let until = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < until, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops it the way a service manager does (SIGTERM).
    fn stop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            assert!(
                p.terminate().is_some(),
                "nats-server did not stop on SIGTERM"
            );
        }
    }
}

fn database_name(name: &str) -> String {
    format!("hopfuse_dist_{}_{name}", std::process::id())
}

/// A database of this test's own on the PostgreSQL server of `HOPFUSE_TEST_POSTGRES_URL`.
async fn database(url: &str, name: &str) -> String {
    use sqlx::Executor;
    let name = database_name(name);
    let pool = sqlx::PgPool::connect(url)
        .await
        .expect("connect to PostgreSQL");
    pool.execute(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name}"
    )))
    .await
    .unwrap();
    pool.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .await
        .unwrap();
    pool.close().await;
    let base = &url[..url.rfind('/').expect("a database in the URL")];
    format!("{base}/{name}")
}

/// Removes a passed test's database (connections and all) and files.
async fn clean_up(url: &str, name: &str, dir: &Path) {
    use sqlx::Executor;
    let pool = sqlx::PgPool::connect(url)
        .await
        .expect("connect to PostgreSQL");
    pool.execute(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {} WITH (FORCE)",
        database_name(name)
    )))
    .await
    .unwrap();
    pool.close().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Starts `hopfuse` with `args` (output to `log`) and waits for the stdout line starting with
/// `ready`; returns the process and the rest of that line.
fn spawn_ready(args: &[String], log: &Path, ready: &str) -> (Proc, String) {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut child = Command::new(HOPFUSE)
        .args(args)
        .env_remove("HOPFUSE_TOKEN")
        .env_remove("HOPFUSE_DB")
        .env_remove("HOPFUSE_QUEUE")
        .env_remove("HOPFUSE_NATS_TOKEN")
        .env_remove("HOPFUSE_NATS_CREDS")
        .env("RUST_LOG", "hopfuse_runner=info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file)
        .spawn()
        .expect("start hopfuse");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let rest = loop {
        let line = lines
            .next()
            .and_then(|l| l.ok())
            .unwrap_or_else(|| panic!("hopfuse {} exited; see {}", args[0], log.display()));
        if let Some(rest) = line.strip_prefix(ready) {
            break rest.trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (Proc(child), rest)
}

struct FrontEnd {
    proc: Proc,
    base: String,
    args: Vec<String>,
    log: PathBuf,
}

impl FrontEnd {
    /// `hopfuse serve --queue NATS --db DB` with its data in `dir/name` and `extra` options.
    fn start(dir: &Path, name: &str, nats: &str, db: &str, extra: &[&str]) -> FrontEnd {
        let data = dir.join(name);
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--addr".into(),
            "127.0.0.1:0".into(),
            "--static-dir".into(),
            dir.join("no-dist").display().to_string(),
            "--data-dir".into(),
            data.display().to_string(),
            "--db".into(),
            db.into(),
            "--queue".into(),
            nats.into(),
            "--runs-per-minute".into(),
            "0".into(),
            "--requests-per-minute".into(),
            "0".into(),
            "--client-queue-cap".into(),
            "0".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let log = dir.join(format!("{name}.log"));
        let (proc, base) = spawn_ready(&args, &log, "hopfuse serve: listening on ");
        FrontEnd {
            proc,
            base,
            args,
            log,
        }
    }

    /// Killed (SIGKILL) and started again with the same options (on a new port).
    fn restart(&mut self) {
        self.proc.kill();
        let (proc, base) = spawn_ready(&self.args, &self.log, "hopfuse serve: listening on ");
        self.proc = proc;
        self.base = base;
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// `hopfuse agent --fake-worker` named `name`.
fn agent(dir: &Path, name: &str, nats: &str, job_timeout: &str) -> Proc {
    agent_with(dir, name, nats, job_timeout, &[])
}

/// [`agent`] with `extra` options.
fn agent_with(dir: &Path, name: &str, nats: &str, job_timeout: &str, extra: &[&str]) -> Proc {
    let args: Vec<String> = [
        "agent",
        "--queue",
        nats,
        "--name",
        name,
        "--fake-worker",
        "--fake-behaviour",
        "from-program",
        "--job-timeout",
        job_timeout,
        "--no-cubin-cache",
        "--data-dir",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([dir.join(name).display().to_string()])
    .chain(extra.iter().map(|s| s.to_string()))
    .collect();
    spawn_ready(&args, &dir.join(format!("{name}.log")), "hopfuse agent: ").0
}

/// The servers the tests need, or `None` (reported as not run).
fn servers(check: &str) -> Option<(PathBuf, String)> {
    let nats = hopfuse_runner::not_run::nats_server(check)?;
    let pg = hopfuse_runner::not_run::postgres_url(check)?;
    Some((nats, pg))
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

fn program(comment: &str) -> String {
    let add = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/basics/add.hf"),
    )
    .unwrap();
    format!("{comment}\n{add}")
}

fn run_body(comment: &str) -> String {
    json!({"program": program(comment), "sizes": {"M": 256, "N": 256}, "iters": 5}).to_string()
}

async fn get(c: &reqwest::Client, url: String) -> (u16, Value) {
    let r = c.get(url).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"));
    (status, v)
}

/// POST /api/run: status, body, Retry-After.
async fn post_run(c: &reqwest::Client, fe: &FrontEnd, body: String) -> (u16, Value, Option<u64>) {
    let r = c.post(fe.url("/api/run")).body(body).send().await.unwrap();
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"));
    (status, v, retry)
}

async fn submit(c: &reqwest::Client, fe: &FrontEnd, comment: &str) -> String {
    let (status, v, _) = post_run(c, fe, run_body(comment)).await;
    assert_eq!(status, 202, "{v}");
    v["job_id"].as_str().unwrap().to_string()
}

/// A job's SSE stream read to its end: the event names in order and the `done` event's result.
/// `until` stops reading early, after the first event of that name (then the result is null).
async fn events(c: &reqwest::Client, url: String, until: Option<&str>) -> (Vec<String>, Value) {
    let mut r = c.get(url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mut text = String::new();
    let names = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .map(str::to_string)
            .collect()
    };
    // Read to the end of the stream: the service closes it after `done`.
    while let Some(chunk) = r.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(stop) = until {
            if text.ends_with("\n\n") && names(&text).iter().any(|n| n == stop) {
                return (names(&text), Value::Null);
            }
        }
    }
    let done = text
        .split("\n\n")
        .find(|block| block.starts_with("event: done"))
        .and_then(|block| block.lines().find_map(|l| l.strip_prefix("data: ")))
        .unwrap_or_else(|| panic!("no done event in {text}"));
    let event: Value = serde_json::from_str(done).unwrap();
    (names(&text), event["result"].clone())
}

fn job_events(fe: &FrontEnd, id: &str) -> String {
    fe.url(&format!("/api/jobs/{id}/events"))
}

/// Polls `/api/health` until `ok` holds of its `distributed` part (at most `wait`).
async fn health_until(
    c: &reqwest::Client,
    fe: &FrontEnd,
    wait: Duration,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let until = Instant::now() + wait;
    loop {
        let (status, h) = get(c, fe.url("/api/health")).await;
        assert_eq!(status, 200, "{h}");
        if ok(&h["distributed"]) || Instant::now() > until {
            return h["distributed"].clone();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Checks one job's SSE stream: it ends with exactly one `done`, as its last event, carrying
/// this job's fake result from one of `agents`.
fn check_stream(id: &str, names: &[String], result: &Value, agents: &[&str]) {
    assert_eq!(
        names.first().map(String::as_str),
        Some("queued"),
        "{id}: {names:?}"
    );
    assert_eq!(
        names.last().map(String::as_str),
        Some("done"),
        "{id}: {names:?}"
    );
    assert_eq!(
        names.iter().filter(|n| *n == "done").count(),
        1,
        "{id}: {names:?}"
    );
    assert_eq!(result["job_id"], json!(id), "{result}");
    assert_eq!(result["status"], json!("fake"), "{result}");
    let agent = result["agent"].as_str().unwrap_or_default();
    assert!(agents.contains(&agent), "{id} ran on `{agent}`: {result}");
}

/// Two front-ends on one PostgreSQL, three agents, 1,000 jobs submitted across both: every job
/// ends exactly once (one result each, one run in the shared history each, 1,000 jobs counted
/// by the agents in all), every SSE stream ends with its result. Then a front-end is killed and
/// started again: its finished jobs and links still answer, there and on the other one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thousand_jobs_across_two_front_ends_and_three_agents_end_once() {
    let Some((nats_exe, pg)) = servers("the distributed mode: 1,000 jobs") else {
        return;
    };
    let dir = temp_dir("thousand");
    let nats = Nats::start(nats_exe, &dir);
    let db = database(&pg, "thousand").await;
    let cap = ["--queue-cap", "2000"];
    // Started together: they race to migrate the fresh database and to make the stream.
    let (mut fe1, fe2) = std::thread::scope(|s| {
        let one = s.spawn(|| FrontEnd::start(&dir, "fe1", &nats.url(), &db, &cap));
        let two = s.spawn(|| FrontEnd::start(&dir, "fe2", &nats.url(), &db, &cap));
        (one.join().unwrap(), two.join().unwrap())
    });
    let _agents: Vec<Proc> = AGENTS
        .iter()
        .map(|n| agent(&dir, n, &nats.url(), "20"))
        .collect();
    let c = client();
    let h = health_until(&c, &fe1, Duration::from_secs(20), |d| {
        d["agents"].as_array().is_some_and(|a| a.len() == 3)
    })
    .await;
    assert_eq!(h["gpus"], json!(3), "{h}");
    assert_eq!(h["connected"], json!(true), "{h}");

    const JOBS: usize = 1000;
    let fronts = Arc::new([fe1.base.clone(), fe2.base.clone()]);
    let gate = Arc::new(tokio::sync::Semaphore::new(64));
    let mut tasks = Vec::new();
    for i in 0..JOBS {
        let (c, fronts, gate) = (c.clone(), fronts.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await.unwrap();
            let base = &fronts[i % 2];
            let r = c
                .post(format!("{base}/api/run"))
                .body(run_body(&format!("// job {i}")))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 202);
            let v: Value = r.json().await.unwrap();
            let id = v["job_id"].as_str().unwrap().to_string();
            let (names, result) = events(&c, format!("{base}/api/jobs/{id}/events"), None).await;
            (i % 2, id, names, result)
        }));
    }
    let mut ids = HashSet::new();
    let mut by_front: HashMap<usize, Vec<String>> = HashMap::new();
    let mut per_agent: HashMap<String, u64> = HashMap::new();
    for t in tasks {
        let (front, id, names, result) = t.await.unwrap();
        check_stream(&id, &names, &result, &AGENTS);
        *per_agent
            .entry(result["agent"].as_str().unwrap().to_string())
            .or_default() += 1;
        assert!(ids.insert(id.clone()), "job id {id} given twice");
        by_front.entry(front).or_default().push(id);
    }
    assert_eq!(ids.len(), JOBS);
    // Every agent took part.
    assert_eq!(per_agent.len(), 3, "{per_agent:?}");

    // Exactly once in the shared history.
    let pool = sqlx::PgPool::connect(&db).await.unwrap();
    let stored: Vec<(String,)> = sqlx::query_as("SELECT id FROM runs")
        .fetch_all(&pool)
        .await
        .unwrap();
    let stored: HashSet<String> = stored.into_iter().map(|(id,)| id).collect();
    assert_eq!(stored, ids);
    pool.close().await;
    // The agents ended 1,000 jobs in all, none of them twice, none delivered again.
    let h = health_until(&c, &fe2, Duration::from_secs(15), |d| {
        total(d, "completed") >= JOBS as u64
    })
    .await;
    assert_eq!(total(&h, "completed"), JOBS as u64, "{h}");
    assert_eq!(total(&h, "redelivered"), 0, "{h}");
    for a in h["agents"].as_array().unwrap() {
        let id = a["id"].as_str().unwrap();
        assert_eq!(a["completed"].as_u64(), per_agent.get(id).copied(), "{a}");
    }
    assert_eq!(h["depth"], json!(0), "{h}");
    assert_eq!(h["in_flight"], json!(0), "{h}");

    // A link made on one front-end answers on the other.
    let r = c
        .post(fe1.url("/api/links"))
        .body(json!({"program": program("// linked"), "state": {"M": 1}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let link: Value = r.json().await.unwrap();
    let link_path = link["path"].as_str().unwrap().to_string();
    let (status, on_fe2) = get(&c, fe2.url(&link_path)).await;
    assert_eq!(status, 200, "{on_fe2}");
    assert_eq!(on_fe2["program"], json!(program("// linked")));

    // A front-end restarted: its finished jobs and links still answer.
    fe1.restart();
    let mine = &by_front[&0];
    for id in mine.iter().take(20) {
        let (status, v) = get(&c, fe1.url(&format!("/api/jobs/{id}"))).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(
            (v["done"].clone(), v["job_id"].clone()),
            (json!(true), json!(id))
        );
        let (status, v) = get(&c, fe2.url(&format!("/api/jobs/{id}"))).await;
        assert_eq!((status, v["done"].clone()), (200, json!(true)), "{v}");
    }
    let (names, result) = events(&c, job_events(&fe1, &mine[0]), None).await;
    assert_eq!(names, ["done"]);
    assert_eq!(result["job_id"], json!(mine[0]));
    let (status, again) = get(&c, fe1.url(&link_path)).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again, on_fe2);
    // And it takes new jobs.
    let id = submit(&c, &fe1, "// after the restart").await;
    let (names, result) = events(&c, job_events(&fe1, &id), None).await;
    check_stream(&id, &names, &result, &AGENTS);
    clean_up(&pg, "thousand", &dir).await;
}

/// The sum of a counter over the agents in `/api/health`.
fn total(distributed: &Value, counter: &str) -> u64 {
    distributed["agents"]
        .as_array()
        .map(|a| a.iter().filter_map(|a| a[counter].as_u64()).sum())
        .unwrap_or(0)
}

/// An agent killed (SIGKILL) in the middle of a job: the job is delivered again once its ack
/// wait has passed and ends on another agent, with one result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_agent_is_killed_ends_on_another_agent() {
    let Some((nats_exe, pg)) = servers("the distributed mode: an agent killed mid-job") else {
        return;
    };
    let dir = temp_dir("kill");
    let nats = Nats::start(nats_exe, &dir);
    let db = database(&pg, "kill").await;
    let fe = FrontEnd::start(&dir, "fe", &nats.url(), &db, &[]);
    // A 2 s job limit: the ack wait is 9 s.
    let mut doomed = agent(&dir, "doomed", &nats.url(), "2");
    let c = client();
    // The fake worker takes 1.5 s in its "launch".
    let body = json!({
        "program": program("// fake-delay-ms: 1500"),
        "sizes": {"M": 256, "N": 256},
    });
    let (status, v, _) = post_run(&c, &fe, body.to_string()).await;
    assert_eq!(status, 202, "{v}");
    let id = v["job_id"].as_str().unwrap().to_string();
    let (names, _) = events(&c, job_events(&fe, &id), Some("running")).await;
    assert!(names.contains(&"running".to_string()), "{names:?}");
    doomed.kill();
    let started = Instant::now();
    let _rescuer = agent(&dir, "rescuer", &nats.url(), "2");
    let (names, result) = events(&c, job_events(&fe, &id), None).await;
    check_stream(&id, &names, &result, &["rescuer"]);
    // Delivered again only after the ack wait (9 s), not at once.
    assert!(
        started.elapsed() > Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    let h = health_until(&c, &fe, Duration::from_secs(15), |d| {
        total(d, "redelivered") == 1 && total(d, "completed") == 1
    })
    .await;
    assert_eq!(total(&h, "redelivered"), 1, "{h}");
    assert_eq!(total(&h, "completed"), 1, "{h}");
    assert_eq!(h["depth"], json!(0), "{h}");
    clean_up(&pg, "kill", &dir).await;
}

/// nats-server restarts (SIGTERM, then started again on its store) while jobs wait in the
/// stream and one runs: none is lost. The agent that was pulling before the restart goes on
/// after it, every SSE stream opened before the restart ends with its result, exactly once.
/// While NATS is down, a run is refused with a 503 that says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_queued_across_a_nats_restart_are_not_lost() {
    let Some((nats_exe, pg)) = servers("the distributed mode: a NATS restart") else {
        return;
    };
    let dir = temp_dir("restart");
    let mut nats = Nats::start(nats_exe, &dir);
    let db = database(&pg, "restart").await;
    let fe = FrontEnd::start(&dir, "fe", &nats.url(), &db, &[]);
    // One GPU, 2 s job limit (ack wait 9 s); each job takes 300 ms.
    let _agent = agent(&dir, "steady", &nats.url(), "2");
    let c = client();
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(submit(&c, &fe, &format!("// queued {i}\n// fake-delay-ms: 300")).await);
    }
    let streams: Vec<_> = ids
        .iter()
        .map(|id| {
            let (c, url) = (c.clone(), job_events(&fe, id));
            tokio::spawn(async move { events(&c, url, None).await })
        })
        .collect();
    let h = health_until(&c, &fe, Duration::from_secs(5), |d| {
        d["waiting"].as_u64().is_some_and(|w| w >= 5)
    })
    .await;
    assert!(h["waiting"].as_u64().unwrap() >= 5, "{h}");
    nats.stop();
    let (status, v, retry) = post_run(&c, &fe, run_body("// while NATS is down")).await;
    assert_eq!(status, 503, "{v}");
    assert!(v["error"].as_str().unwrap().contains("NATS"), "{v}");
    assert!(retry.is_some());
    nats.restart();
    for (id, stream) in ids.iter().zip(streams) {
        let (names, result) = stream.await.unwrap();
        check_stream(id, &names, &result, &["steady"]);
    }
    let h = health_until(&c, &fe, Duration::from_secs(10), |d| {
        d["depth"] == json!(0) && total(d, "completed") >= 20
    })
    .await;
    assert_eq!(
        (h["depth"].clone(), h["in_flight"].clone()),
        (json!(0), json!(0)),
        "{h}"
    );
    // One run in the history per job.
    let pool = sqlx::PgPool::connect(&db).await.unwrap();
    let (runs,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    assert_eq!(runs, 20);
    clean_up(&pg, "restart", &dir).await;
}

/// The stream holds `--queue-cap` jobs for all front-ends together: past it a run gets 429
/// with Retry-After, whichever front-end it comes to. NATS requires a token here: without it a
/// front-end does not start, and says why. (The SQLite default database: the distributed mode
/// does not need PostgreSQL for one front-end.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_stream_answers_429_with_retry_after() {
    let Some(nats_exe) = hopfuse_runner::not_run::nats_server("the distributed mode: 429") else {
        return;
    };
    let dir = temp_dir("full");
    let nats = Nats::start_with(nats_exe, &dir, Some("s3cret"));
    let refused = Command::new(HOPFUSE)
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--queue",
            &nats.url(),
            "--data-dir",
        ])
        .arg(dir.join("refused"))
        .env_remove("HOPFUSE_NATS_TOKEN")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("cannot connect to NATS"), "{stderr}");
    let cap = ["--queue-cap", "3", "--nats-token", "s3cret"];
    let sqlite = |name: &str| dir.join(name).join("hopfuse.db").display().to_string();
    let fe1 = FrontEnd::start(&dir, "fe1", &nats.url(), &sqlite("fe1"), &cap);
    let fe2 = FrontEnd::start(&dir, "fe2", &nats.url(), &sqlite("fe2"), &cap);
    let c = client();
    for i in 0..3 {
        submit(&c, &fe1, &format!("// {i}")).await;
    }
    // fe2 has no job of its own: the stream's cap refuses it.
    let (status, v, retry) = post_run(&c, &fe2, run_body("// one too many")).await;
    assert_eq!(status, 429, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("queue is full"),
        "{v}"
    );
    let retry = retry.expect("a Retry-After header");
    assert!((1..=600).contains(&retry), "{retry}");
    assert_eq!(v["retry_after_s"], json!(retry));
    let h = health_until(&c, &fe2, Duration::from_secs(5), |d| d["depth"] == json!(3)).await;
    assert_eq!(
        (h["depth"].clone(), h["cap"].clone()),
        (json!(3), json!(3)),
        "{h}"
    );
    // Once an agent drains the stream, runs are taken again.
    let mut drain = agent_with(
        &dir,
        "drain",
        &nats.url(),
        "20",
        &["--nats-token", "s3cret"],
    );
    health_until(&c, &fe2, Duration::from_secs(20), |d| {
        d["depth"] == json!(0)
    })
    .await;
    let id = submit(&c, &fe2, "// room again").await;
    let (names, result) = events(&c, job_events(&fe2, &id), None).await;
    check_stream(&id, &names, &result, &["drain"]);
    // SIGTERM: the agent stops pulling, exits cleanly and leaves the agents bucket.
    let stopped = drain.terminate();
    assert!(stopped.is_some_and(|s| s.success()), "{stopped:?}");
    let h = health_until(&c, &fe2, Duration::from_secs(5), |d| d["gpus"] == json!(0)).await;
    assert_eq!(h["agents"], json!([]), "{h}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A job message whose job already has a result (its agent stored the result and died before
/// acknowledging) is answered with that result and acknowledged, never run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_already_has_a_result_is_not_run_again() {
    use futures_util::StreamExt;
    use hopfuse_runner::distributed::wire::{AgentEvent, WireJob};
    let Some(nats_exe) = hopfuse_runner::not_run::nats_server("the distributed mode: idempotence")
    else {
        return;
    };
    let dir = temp_dir("once");
    let nats = Nats::start(nats_exe, &dir);
    // The agent makes the stream, the buckets and the consumer.
    let _agent = agent(&dir, "once", &nats.url(), "20");
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    let results = js.get_key_value("hopfuse_results").await.unwrap();
    let stored = json!({
        "job_id": "jonce", "status": "error", "fake": false, "message": "stored first",
        "progress": [], "queued_ms": 0.0, "worker_ms": 0.0,
    });
    results
        .create("jonce", serde_json::to_vec(&stored).unwrap().into())
        .await
        .unwrap();
    let mut events = client.subscribe("hopfuse.events.test").await.unwrap();
    let job = WireJob {
        job_id: "jonce".into(),
        events: "hopfuse.events.test".into(),
        request: serde_json::from_value(json!({
            "file": "t.hf", "source": program("// would run"), "sizes": {"M": 256, "N": 256},
            "iters": 1, "warmup": 0, "seed": 1, "index": null, "copy_ceiling": false,
        }))
        .unwrap(),
        request_b: None,
        fault: None,
        same_inputs: None,
        profile: false,
        prepared: None,
        prepared_b: None,
    };
    js.publish(
        "hopfuse.jobs.sm_90a",
        serde_json::to_vec(&job).unwrap().into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(20), events.next())
        .await
        .expect("an event from the agent")
        .unwrap();
    // Its first and only event: the stored result (no `started`: it did not run).
    match serde_json::from_slice::<AgentEvent>(&first.payload).unwrap() {
        AgentEvent::Done { job_id, result } => {
            assert_eq!(job_id, "jonce");
            assert_eq!(result.message.as_deref(), Some("stored first"));
            assert_eq!(result.agent, None);
        }
        other => panic!("expected the stored result, got {other:?}"),
    }
    let mut stream = js.get_stream("HOPFUSE_JOBS").await.unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while stream.info().await.unwrap().state.messages > 0 {
        assert!(
            Instant::now() < until,
            "the job message was not acknowledged"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(500), events.next())
            .await
            .is_err(),
        "more events after the result"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A job delivered more often than `--max-attempts` (here: once, then given back by a taker
/// that did not finish it) ends `crashed` on the next agent without running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_attempts_ends_crashed_unrun() {
    use async_nats::jetstream::AckKind;
    use futures_util::StreamExt;
    use hopfuse_runner::distributed::{self as dist, wire::AgentEvent};
    let Some(nats_exe) = hopfuse_runner::not_run::nats_server("the distributed mode: attempts")
    else {
        return;
    };
    let dir = temp_dir("attempts");
    let nats = Nats::start(nats_exe, &dir);
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    let stream = dist::ensure_stream(&js, None).await.unwrap();
    // The ack wait an agent with --job-timeout 1 makes.
    let consumer = dist::ensure_consumer(&stream, "sm_90a", Duration::from_secs(7))
        .await
        .unwrap();
    let mut events = client.subscribe("hopfuse.events.attempts").await.unwrap();
    let job = json!({
        "job_id": "jtwice", "events": "hopfuse.events.attempts",
        "request": {"file": "t.hf", "source": program("// never run"), "sizes": {"M": 256, "N": 256},
                    "iters": 1, "warmup": 0, "seed": 1, "index": null, "copy_ceiling": false},
    });
    js.publish("hopfuse.jobs.sm_90a", job.to_string().into())
        .await
        .unwrap()
        .await
        .unwrap();
    // A taker that gives it back: its first delivery is spent.
    let mut batch = consumer.fetch().max_messages(1).messages().await.unwrap();
    let first = batch.next().await.unwrap().unwrap();
    assert_eq!(first.info().unwrap().delivered, 1);
    first.ack_with(AckKind::Nak(None)).await.unwrap();
    let _agent = agent_with(&dir, "last", &nats.url(), "1", &["--max-attempts", "1"]);
    let event = tokio::time::timeout(Duration::from_secs(20), events.next())
        .await
        .expect("an event from the agent")
        .unwrap();
    match serde_json::from_slice::<AgentEvent>(&event.payload).unwrap() {
        AgentEvent::Done { job_id, result } => {
            assert_eq!(job_id, "jtwice");
            assert_eq!(result.status, hopfuse_runner::queue::JobStatus::Crashed);
            let message = result.message.unwrap_or_default();
            assert!(message.contains("delivered 2 times"), "{message}");
            assert_eq!(result.agent.as_deref(), Some("last"));
            assert!(result.worker.is_none(), "it ran: {:?}", result.worker);
        }
        other => panic!("expected a crashed result, got {other:?}"),
    }
    // Stored once, as the job's result.
    let results = js.get_key_value("hopfuse_results").await.unwrap();
    let stored: Value =
        serde_json::from_slice(&results.get("jtwice").await.unwrap().unwrap()).unwrap();
    assert_eq!(stored["status"], json!("crashed"));
    let _ = std::fs::remove_dir_all(&dir);
}
