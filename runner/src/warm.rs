//! The caller's side of a warm `hopfuse worker --serve` process (the service's queue and
//! `hopfuse bench`): start it and wait until it is ready, send it jobs one line each, read its
//! events until the job's `job_end`, and kill it (SIGKILL) when a job runs past its limit. A
//! worker that exits (a crash, or on purpose after a CUDA error) or is killed is dropped; the
//! caller starts a fresh one for the next job.

use crate::worker::{Ready, WorkerEvent, WorkerJob};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::task::JoinHandle;

/// Bytes of a worker's stderr kept.
pub const STDERR_TAIL: usize = 8 * 1024;
/// Longest stdout line read from a worker.
const MAX_LINE: usize = 16 << 20;

/// How to start a worker.
#[derive(Clone, Debug)]
pub struct WorkerCommand {
    /// The `hopfuse` binary.
    pub exe: PathBuf,
    /// Arguments after `worker --serve` (`--fake`, `--fake-behaviour ...`).
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// From start to the `ready` line (CUDA context, spin kernel, copy ceiling).
    pub startup_timeout: Duration,
}

#[derive(Default)]
struct Tail {
    /// Bytes read so far.
    total: u64,
    /// The last of them (at most 2 * STDERR_TAIL).
    bytes: Vec<u8>,
}

/// A started, ready worker process.
pub struct WarmWorker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<Mutex<Tail>>,
    stderr_task: Option<JoinHandle<()>>,
    /// What it said when it was ready.
    pub ready: Ready,
    pub started: Instant,
    /// Jobs sent to it so far.
    pub jobs: u64,
}

/// How a job on a warm worker ended.
#[derive(Debug)]
pub enum JobEnd {
    /// The worker ended the job; `exit`: it exits now, and why.
    Done { exit: Option<String> },
    /// Past the limit (the caller kills the worker).
    TimedOut,
    /// The worker's stdout closed before the job ended (it crashed or was killed).
    Died,
}

/// Why a worker could not be started.
#[derive(Debug)]
pub struct SpawnError {
    pub message: String,
    pub stderr: String,
}

impl WarmWorker {
    /// Starts `hopfuse worker --serve` and waits for its `ready` line.
    pub async fn spawn(cmd: &WorkerCommand) -> Result<WarmWorker, SpawnError> {
        let started = Instant::now();
        let mut command = tokio::process::Command::new(&cmd.exe);
        command
            .args(["worker", "--serve"])
            .args(&cmd.args)
            .envs(cmd.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| SpawnError {
            message: format!("cannot start the worker {}: {e}", cmd.exe.display()),
            stderr: String::new(),
        })?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut stderr_pipe = child.stderr.take().expect("piped stderr");
        let stderr = Arc::new(Mutex::new(Tail::default()));
        let tail = stderr.clone();
        let stderr_task = tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr_pipe.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut t = tail.lock().expect("stderr lock");
                t.total += n as u64;
                t.bytes.extend_from_slice(&buf[..n]);
                if t.bytes.len() > 2 * STDERR_TAIL {
                    let cut = t.bytes.len() - STDERR_TAIL;
                    t.bytes.drain(..cut);
                }
            }
        });
        let mut w = WarmWorker {
            child,
            stdin,
            stdout,
            stderr,
            stderr_task: Some(stderr_task),
            ready: Ready {
                pid: 0,
                fake: false,
                gpu: None,
                gpu_error: None,
                ceiling: None,
                startup_ms: 0.0,
            },
            started,
            jobs: 0,
        };
        let first = async {
            loop {
                match w.next_event().await {
                    Some(WorkerEvent::Ready { ready }) => return Some(*ready),
                    Some(_) => continue,
                    None => return None,
                }
            }
        };
        match tokio::time::timeout(cmd.startup_timeout, first).await {
            Ok(Some(ready)) => {
                w.ready = ready;
                Ok(w)
            }
            Ok(None) => {
                let how = w.wait_exit().await;
                Err(SpawnError {
                    message: format!("the worker {how} before it was ready"),
                    stderr: w.stderr_since(0),
                })
            }
            Err(_) => {
                let _ = w.child.start_kill();
                let _ = w.wait_exit().await;
                Err(SpawnError {
                    message: format!(
                        "the worker was not ready after {:.0} s (opening the GPU and measuring \
                         the copy ceiling) and was killed",
                        cmd.startup_timeout.as_secs_f64()
                    ),
                    stderr: w.stderr_since(0),
                })
            }
        }
    }

    /// The next event on stdout (lines that are not events are skipped); `None` at the end.
    async fn next_event(&mut self) -> Option<WorkerEvent> {
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = (&mut self.stdout)
                .take(MAX_LINE as u64)
                .read_until(b'\n', &mut line)
                .await
                .unwrap_or(0);
            if n == 0 {
                return None;
            }
            if let Some(e) = crate::worker::parse_event(&String::from_utf8_lossy(&line)) {
                return Some(e);
            }
        }
    }

    /// Sends a job and hands its events to `on_event` until its `job_end`, the limit, or the
    /// end of the worker's output.
    pub async fn run(
        &mut self,
        job: &WorkerJob,
        limit: Duration,
        on_event: &mut (dyn FnMut(WorkerEvent) + Send),
    ) -> JobEnd {
        self.jobs += 1;
        let mut line = serde_json::to_vec(job).expect("jobs serialize");
        line.push(b'\n');
        let work = async {
            if self.stdin.write_all(&line).await.is_err() || self.stdin.flush().await.is_err() {
                return JobEnd::Died;
            }
            loop {
                match self.next_event().await {
                    None => return JobEnd::Died,
                    Some(WorkerEvent::JobEnd { exit, reason, .. }) => {
                        return JobEnd::Done {
                            exit: exit.then(|| reason.unwrap_or_else(|| "no reason given".into())),
                        }
                    }
                    Some(e) => on_event(e),
                }
            }
        };
        tokio::time::timeout(limit, work)
            .await
            .unwrap_or(JobEnd::TimedOut)
    }

    /// Whether the process is still running (a warm worker that died while idle is replaced
    /// before a job is sent to it).
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Stderr bytes so far (a mark for [`WarmWorker::stderr_since`]).
    pub fn stderr_mark(&self) -> u64 {
        self.stderr.lock().expect("stderr lock").total
    }

    /// What the worker wrote to stderr since `mark` (at most the last 8 KiB).
    pub fn stderr_since(&self, mark: u64) -> String {
        let t = self.stderr.lock().expect("stderr lock");
        let new = (t.total.saturating_sub(mark) as usize).min(t.bytes.len());
        let from = t.bytes.len() - new.min(STDERR_TAIL);
        String::from_utf8_lossy(&t.bytes[from..]).into_owned()
    }

    /// Kills the worker (SIGKILL: a hung kernel cannot be stopped from inside its process) and
    /// waits for it and the rest of its stderr.
    pub async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.wait_exit().await;
    }

    /// Waits for the worker to exit (killing it after 5 s) and for the rest of its stderr;
    /// says how it ended.
    pub async fn wait_exit(&mut self) -> String {
        let status = match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
            Ok(s) => s,
            Err(_) => {
                let _ = self.child.start_kill();
                self.child.wait().await
            }
        };
        if let Some(task) = self.stderr_task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
        }
        match status {
            Ok(s) => describe_exit(&s),
            Err(e) => format!("could not be waited for: {e}"),
        }
    }
}

/// "exited with status 3", "was killed by signal 6 (SIGABRT)".
pub fn describe_exit(status: &std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            let name = match sig {
                4 => " (SIGILL)",
                6 => " (SIGABRT)",
                7 => " (SIGBUS)",
                8 => " (SIGFPE)",
                9 => " (SIGKILL)",
                11 => " (SIGSEGV)",
                15 => " (SIGTERM)",
                _ => "",
            };
            return format!("was killed by signal {sig}{name}");
        }
    }
    match status.code() {
        Some(c) => format!("exited with status {c}"),
        None => "exited".to_string(),
    }
}
