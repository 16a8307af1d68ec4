//! The harness: a `hopfuse serve` child on a free port with its data in a temporary directory
//! (killed on drop), an HTTP client, the example programs as run bodies, and readers for a
//! run's job id and its event stream.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub(crate) const TIMEOUT_MESSAGE: &str =
    "timed out: the kernel did not finish (a deadlock such as an mbarrier that never completes?)";

pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) base: String,
    pub(crate) dir: PathBuf,
}

pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hopfuse-serve-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Server {
    /// Starts `hopfuse serve` with its data in `dir` and these extra arguments.
    pub(crate) fn start(dir: &Path, extra: &[&str]) -> Server {
        Server::start_env(dir, extra, &[])
    }

    /// [`Server::start`] with extra environment variables.
    pub(crate) fn start_env(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
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

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) fn stop(mut self) {
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

pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

pub(crate) fn example(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/basics")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

pub(crate) fn add_run(extra_comment: &str) -> Value {
    json!({
        "program": format!("{extra_comment}\n{}", example("add.hf")),
        "sizes": {"M": 256, "N": 256},
        "iters": 5,
    })
}

pub(crate) async fn post(
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

pub(crate) async fn get(c: &reqwest::Client, url: String) -> (u16, Value) {
    let r = c.get(url).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"));
    (status, v)
}

/// Submits a run and returns its job id (asserting 202).
pub(crate) async fn submit(s: &Server, c: &reqwest::Client, body: &Value) -> String {
    let (status, v, _) = post(c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 202, "{v}");
    v["job_id"].as_str().unwrap().to_string()
}

/// Reads a job's SSE stream to its `done` event: the event names in order and the result.
pub(crate) async fn events(s: &Server, c: &reqwest::Client, id: &str) -> (Vec<String>, Value) {
    let (all, result) = events_with_data(s, c, id).await;
    (all.into_iter().map(|(name, _)| name).collect(), result)
}

/// Reads a job's SSE stream to its `done` event: each event's name and data in order, and the
/// result.
pub(crate) async fn events_with_data(
    s: &Server,
    c: &reqwest::Client,
    id: &str,
) -> (Vec<(String, Value)>, Value) {
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
    let all: Vec<(String, Value)> = text
        .split("\n\n")
        .filter_map(|block| {
            let name = block.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((name.to_string(), serde_json::from_str(data).unwrap()))
        })
        .collect();
    let result = all
        .iter()
        .find(|(name, _)| name == "done")
        .map(|(_, event)| event["result"].clone())
        .unwrap_or_else(|| panic!("no done event in {text}"));
    (all, result)
}

pub(crate) fn s_dir_has_db(dir: &Path) -> bool {
    dir.join("hopfuse.db").is_file()
}

/// A PostgreSQL cluster of one test's own on `port`, made, started and stopped by
/// scripts/setup-distributed.sh (left running when the test ends, like the suite's).
pub(crate) struct PgCluster {
    port: u16,
}

impl PgCluster {
    /// Starts it (made on first use); `HOPFUSE_TEST_POSTGRES_URL` must be set (the suite's
    /// PostgreSQL is there), else `None` after reporting `check` as not run.
    pub(crate) fn start(port: u16, check: &str) -> Option<(PgCluster, String)> {
        hopfuse_runner::not_run::postgres_url(check)?;
        let cluster = PgCluster { port };
        let exports = cluster.setup(None);
        let url = exports
            .lines()
            .find_map(|l| l.strip_prefix("export HOPFUSE_TEST_POSTGRES_URL="))
            .expect("setup-distributed.sh names the database")
            .to_string();
        Some((cluster, url))
    }

    /// Stops it (`pg_ctl stop -m fast`): connections are refused until [`PgCluster::restart`].
    pub(crate) fn stop(&self) {
        self.setup(Some("stop"));
    }

    pub(crate) fn restart(&self) {
        self.setup(None);
    }

    /// Runs scripts/setup-distributed.sh with `command` on this port; its stdout.
    fn setup(&self, command: Option<&str>) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/setup-distributed.sh");
        let out = Command::new("bash")
            .arg(script)
            .args(command)
            .env("HOPFUSE_TEST_PG_PORT", self.port.to_string())
            .output()
            .expect("run setup-distributed.sh");
        assert!(
            out.status.success(),
            "setup-distributed.sh {command:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}
