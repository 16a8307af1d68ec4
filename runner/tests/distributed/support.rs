//! The harness: nats-servers on free loopback ports (started, stopped, restarted on their
//! store), a PostgreSQL database per test, `hopfuse serve --queue` front-ends and `hopfuse agent
//! --fake-worker` agents as real processes (killed on drop), and readers for runs, event
//! streams and the health of the distributed mode.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) const HOPFUSE: &str = env!("CARGO_BIN_EXE_hopfuse");
/// The agents of the first test.
pub(crate) const AGENTS: [&str; 3] = ["a1", "a2", "a3"];

pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hopfuse-dist-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A process killed (SIGKILL) when dropped.
pub(crate) struct Proc(Child);

impl Proc {
    pub(crate) fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// SIGTERM, then waits for the exit: its status, or `None` when it was still running
    /// after 10 s (then it is killed).
    pub(crate) fn terminate(&mut self) -> Option<std::process::ExitStatus> {
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
pub(crate) struct Nats {
    exe: PathBuf,
    dir: PathBuf,
    port: u16,
    /// Clients must present this token (`--auth`).
    token: Option<String>,
    /// A configuration file's text (`-c`; the flags above take precedence).
    config: Option<String>,
    proc: Option<Proc>,
}

impl Nats {
    pub(crate) fn start(exe: PathBuf, dir: &Path) -> Nats {
        Nats::start_with(exe, dir, None)
    }

    pub(crate) fn start_with(exe: PathBuf, dir: &Path, token: Option<&str>) -> Nats {
        let mut nats = Nats {
            exe,
            dir: dir.join("nats"),
            port: free_port(),
            token: token.map(str::to_string),
            config: None,
            proc: None,
        };
        nats.restart();
        nats
    }

    /// [`Nats::start`] with a configuration file of this text (`max_payload: 16384`, ...).
    pub(crate) fn start_config(exe: PathBuf, dir: &Path, config: &str) -> Nats {
        let mut nats = Nats {
            exe,
            dir: dir.join("nats"),
            port: free_port(),
            token: None,
            config: Some(config.to_string()),
            proc: None,
        };
        nats.restart();
        nats
    }

    pub(crate) fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts it (again, on the same port and store) and waits until it takes connections.
    pub(crate) fn restart(&mut self) {
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
            .args(self.config.iter().flat_map(|text| {
                let file = self.dir.with_extension("conf");
                std::fs::write(&file, text).unwrap();
                ["-c".into(), file.into_os_string()]
            }))
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

    /// Kills it (SIGKILL): what it had not written to its store is lost.
    pub(crate) fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// Stops it the way a service manager does (SIGTERM).
    pub(crate) fn stop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            assert!(
                p.terminate().is_some(),
                "nats-server did not stop on SIGTERM"
            );
        }
    }
}

pub(crate) fn database_name(name: &str) -> String {
    format!("hopfuse_dist_{}_{name}", std::process::id())
}

/// A database of this test's own on the PostgreSQL server of `HOPFUSE_TEST_POSTGRES_URL`.
pub(crate) async fn database(url: &str, name: &str) -> String {
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
pub(crate) async fn clean_up(url: &str, name: &str, dir: &Path) {
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
pub(crate) fn spawn_ready(args: &[String], log: &Path, ready: &str) -> (Proc, String) {
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

pub(crate) struct FrontEnd {
    pub(crate) proc: Proc,
    pub(crate) base: String,
    args: Vec<String>,
    log: PathBuf,
}

impl FrontEnd {
    /// `hopfuse serve --queue NATS --db DB` with its data in `dir/name` and `extra` options.
    pub(crate) fn start(dir: &Path, name: &str, nats: &str, db: &str, extra: &[&str]) -> FrontEnd {
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
    pub(crate) fn restart(&mut self) {
        self.proc.kill();
        let (proc, base) = spawn_ready(&self.args, &self.log, "hopfuse serve: listening on ");
        self.proc = proc;
        self.base = base;
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// `hopfuse agent --fake-worker` named `name`.
pub(crate) fn agent(dir: &Path, name: &str, nats: &str, job_timeout: &str) -> Proc {
    agent_with(dir, name, nats, job_timeout, &[])
}

/// [`agent`] with `extra` options.
pub(crate) fn agent_with(
    dir: &Path,
    name: &str,
    nats: &str,
    job_timeout: &str,
    extra: &[&str],
) -> Proc {
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
pub(crate) fn servers(check: &str) -> Option<(PathBuf, String)> {
    let nats = hopfuse_runner::not_run::nats_server(check)?;
    let pg = hopfuse_runner::not_run::postgres_url(check)?;
    Some((nats, pg))
}

pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

pub(crate) fn program(comment: &str) -> String {
    let add = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/basics/add.hf"),
    )
    .unwrap();
    format!("{comment}\n{add}")
}

pub(crate) fn run_body(comment: &str) -> String {
    json!({"program": program(comment), "sizes": {"M": 256, "N": 256}, "iters": 5}).to_string()
}

pub(crate) async fn get(c: &reqwest::Client, url: String) -> (u16, Value) {
    let r = c.get(url).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"));
    (status, v)
}

/// POST /api/run: status, body, Retry-After.
pub(crate) async fn post_run(
    c: &reqwest::Client,
    fe: &FrontEnd,
    body: String,
) -> (u16, Value, Option<u64>) {
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

pub(crate) async fn submit(c: &reqwest::Client, fe: &FrontEnd, comment: &str) -> String {
    let (status, v, _) = post_run(c, fe, run_body(comment)).await;
    assert_eq!(status, 202, "{v}");
    v["job_id"].as_str().unwrap().to_string()
}

/// A job's SSE stream read to its end: the event names in order and the `done` event's result.
/// `until` stops reading early, after the first event of that name (then the result is null).
pub(crate) async fn events(
    c: &reqwest::Client,
    url: String,
    until: Option<&str>,
) -> (Vec<String>, Value) {
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

pub(crate) fn job_events(fe: &FrontEnd, id: &str) -> String {
    fe.url(&format!("/api/jobs/{id}/events"))
}

/// Polls `/api/health` until `ok` holds of its `distributed` part (at most `wait`).
pub(crate) async fn health_until(
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
pub(crate) fn check_stream(id: &str, names: &[String], result: &Value, agents: &[&str]) {
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

/// The sum of a counter over the agents in `/api/health`.
pub(crate) fn total(distributed: &Value, counter: &str) -> u64 {
    distributed["agents"]
        .as_array()
        .map(|a| a.iter().filter_map(|a| a[counter].as_u64()).sum())
        .unwrap_or(0)
}
