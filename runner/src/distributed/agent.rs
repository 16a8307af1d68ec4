//! `hopfuse agent`: a GPU host of the distributed mode.
//!
//! Pulls jobs from the agents' durable consumer of its architecture, one per free GPU (a job is
//! never held by a busy host), and runs each through a local [`Queue`] with one warm `hopfuse
//! worker --serve` per GPU: the same isolation, time limit and SIGKILL as `hopfuse serve`
//! alone. Guarantees per job message: the job's events go to the front-end that submitted it;
//! the message is marked in progress while the job runs (a long worker start does not get it
//! redelivered) and acknowledged only after the result is stored in the results bucket, once
//! per job id; a job that already has a result is answered with it and not run again; a job
//! delivered more than `--max-attempts` times (every agent that took it died) ends `crashed`
//! without running. Its status (GPUs, warm workers, jobs) is refreshed in the agents bucket.

use super::wire::{AgentEvent, AgentStatus, JobAddress, WireJob};
use super::NatsArgs;
use crate::job_spec::decode_message;
use crate::queue::{JobResult, JobStage, JobStatus, Queue, QueueConfig};
use crate::worker::FakeBehaviour;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{self, kv, AckKind};
use clap::ValueEnum;
use futures_util::StreamExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, watch};
use tracing::{info, warn};

/// How long one pull request waits for a job.
const PULL_EXPIRES: Duration = Duration::from_secs(5);
/// How much longer than that the agent waits for the pull's end before making a new one.
const PULL_GRACE: Duration = Duration::from_secs(2);

/// How long an agent keeps trying to store a job's result while JetStream does not take it;
/// past it the job is left unacknowledged, to be delivered again.
pub const STORE_PATIENCE: Duration = Duration::from_secs(60);

/// `hopfuse agent` options.
#[derive(clap::Args, Clone, Debug)]
pub struct AgentArgs {
    #[command(flatten)]
    pub nats: NatsArgs,
    /// GPUs of this host, one job at a time on each (`CUDA_VISIBLE_DEVICES` per worker when
    /// more than one) [default: every GPU a probe sees; 1 with `--fake-worker`].
    #[arg(long)]
    pub gpus: Option<usize>,
    /// Wall-clock limit of one job in seconds (an A/B job gets twice this); the worker is
    /// killed (SIGKILL) past it. The consumer's ack wait is twice this plus 5 s.
    #[arg(long, default_value_t = 10.0)]
    pub job_timeout: f64,
    /// Runs of one job at most: a job delivered again after its agent died is run again up to
    /// this many times in all, then ends `crashed`.
    #[arg(long, default_value_t = 3)]
    pub max_attempts: u32,
    /// This agent's name in `/api/health` and in its jobs' results [default: HOST-PID].
    #[arg(long)]
    pub name: Option<String>,
    /// Directory of the CUBIN cache [default: $XDG_DATA_HOME/hopfuse or ~/.local/share/hopfuse].
    #[arg(long, env = "HOPFUSE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Do not cache CUBINs on disk.
    #[arg(long)]
    pub no_cubin_cache: bool,
    /// Run jobs with the fake worker (compiled and checked, nothing executed or measured).
    #[arg(long)]
    pub fake_worker: bool,
    /// Test hook of the fake worker.
    #[arg(long, value_enum, requires = "fake_worker")]
    pub fake_behaviour: Option<FakeBehaviour>,
    /// The binary run as `hopfuse worker` [default: this one].
    #[arg(long, hide = true)]
    pub worker_exe: Option<PathBuf>,
}

impl AgentArgs {
    /// A job's time limit (twice for A/B) plus a margin: the consumer's ack wait.
    pub fn ack_wait(&self) -> Duration {
        Duration::from_secs_f64(2.0 * self.job_timeout) + Duration::from_secs(5)
    }
}

/// Runs the agent until Ctrl-C or SIGTERM.
pub fn main(args: AgentArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

/// What the GPU loops share.
struct Agent {
    id: String,
    client: async_nats::Client,
    results: kv::Store,
    queue: Arc<Queue>,
    max_attempts: u32,
    /// How often a running job's message is marked in progress (a third of the consumer's ack
    /// wait).
    progress_every: Duration,
    running: AtomicUsize,
    completed: AtomicU64,
    redelivered: AtomicU64,
}

/// The agent: connected to NATS, its queue of warm workers started, its status kept fresh in
/// the agents bucket, one loop pulling jobs per GPU until Ctrl-C or SIGTERM.
pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    check_args(&args)?;
    let host = hostname();
    let id = args
        .name
        .clone()
        .unwrap_or_else(|| format!("{host}-{}", std::process::id()));
    let client = super::connect(
        &args.nats,
        &format!("hopfuse agent {id}"),
        |event| match event {
            async_nats::Event::Connected => info!("NATS: connected"),
            other => warn!("NATS: {other}"),
        },
    )
    .await?;
    let js = jetstream::new(client.clone());
    let stream = super::ensure_stream(&js, None).await?;
    let consumer = super::ensure_consumer(&stream, &args.nats.arch, args.ack_wait()).await?;
    let results = super::results_bucket(&js).await?;
    let agents = super::agents_bucket(&js).await?;
    spawn_sweeper(stream, consumer.clone(), args.nats.arch.clone());

    let worker_exe = match &args.worker_exe {
        Some(p) => p.clone(),
        None => std::env::current_exe()?,
    };
    let gpus = match (args.gpus, args.fake_worker) {
        (Some(n), _) => n,
        (None, true) => 1,
        (None, false) => crate::worker::probe_in_child(&worker_exe)
            .await
            .gpus_to_use(None),
    };
    let agent = Arc::new(Agent {
        id: id.clone(),
        client,
        results,
        queue: start_queue(&args, worker_exe, gpus),
        max_attempts: args.max_attempts,
        progress_every: (consumer.cached_info().config.ack_wait / 3)
            .max(Duration::from_millis(500)),
        running: AtomicUsize::new(0),
        completed: AtomicU64::new(0),
        redelivered: AtomicU64::new(0),
    });

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    let started_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let status = {
        let (agent, host, arch) = (agent.clone(), host.clone(), args.nats.arch.clone());
        let fake = args.fake_worker;
        move || AgentStatus {
            id: agent.id.clone(),
            host: host.clone(),
            pid: std::process::id(),
            arch: arch.clone(),
            gpus,
            fake,
            running: agent.running.load(Ordering::SeqCst),
            completed: agent.completed.load(Ordering::SeqCst),
            redelivered: agent.redelivered.load(Ordering::SeqCst),
            started_at,
            workers: agent.queue.stats().workers,
        }
    };
    let heartbeat = spawn_heartbeat(agents.clone(), id.clone(), status);
    println!(
        "hopfuse agent: {id} pulling {} with {} GPU(s)",
        super::jobs_subject(&args.nats.arch),
        gpus
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();

    let loops: Vec<_> = (0..gpus)
        .map(|_| tokio::spawn(pull_jobs(agent.clone(), consumer.clone(), stop_rx.clone())))
        .collect();
    for l in loops {
        let _ = l.await;
    }
    heartbeat.abort();
    let _ = agents.delete(&id).await;
    info!("agent {id} stopped");
    Ok(())
}

/// The options an agent cannot run with, as an error.
fn check_args(args: &AgentArgs) -> anyhow::Result<()> {
    if !(args.job_timeout.is_finite() && args.job_timeout > 0.0) {
        anyhow::bail!("--job-timeout must be a positive number of seconds");
    }
    if args.gpus == Some(0) {
        anyhow::bail!("--gpus must be at least 1");
    }
    if args.max_attempts == 0 {
        anyhow::bail!("--max-attempts must be at least 1");
    }
    Ok(())
}

/// Removes, every [`super::SWEEP_EVERY`], the acknowledged job messages the stream still holds
/// (NATS loses their removal when it is killed).
fn spawn_sweeper(stream: jetstream::stream::Stream, consumer: PullConsumer, arch: String) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(super::SWEEP_EVERY).await;
            match super::sweep_acknowledged(&stream, &consumer, &arch).await {
                Ok(0) => {}
                Ok(n) => warn!(
                    "removed {n} acknowledged job messages the stream still held (NATS lost \
                     their removal, as a killed nats-server does)"
                ),
                // NATS is away: the next sweep tries again.
                Err(e) => info!("cannot sweep the job stream: {e}"),
            }
        }
    });
}

/// The agent's local queue: one warm worker per GPU (`worker_exe`, fake when asked for), the
/// job time limit and the CUBIN cache of the options.
fn start_queue(args: &AgentArgs, worker_exe: PathBuf, gpus: usize) -> Arc<Queue> {
    let mut worker_args = Vec::new();
    if args.fake_worker {
        worker_args.push("--fake".to_string());
        if let Some(b) = args.fake_behaviour.and_then(|b| b.to_possible_value()) {
            worker_args.extend(["--fake-behaviour".to_string(), b.get_name().to_string()]);
        }
    }
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(crate::serve_args::default_data_dir);
    Queue::start(
        QueueConfig {
            worker_exe,
            worker_args,
            timeout: Duration::from_secs_f64(args.job_timeout),
            // One job per GPU is pulled at a time; the slack covers a ticket released just
            // after its result.
            cap: 2 * gpus,
            client_cap: 0,
            gpus,
            cubin_cache: (!args.no_cubin_cache).then(|| data_dir.join("cubin")),
            prespawn: true,
            remote: false,
        },
        None,
    )
}

/// Puts this agent's `status()` into the agents bucket every [`super::HEARTBEAT`].
fn spawn_heartbeat(
    agents: kv::Store,
    id: String,
    status: impl Fn() -> AgentStatus + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let bytes = serde_json::to_vec(&status()).expect("statuses serialize");
            if let Err(e) = agents.put(&id, bytes.into()).await {
                warn!("cannot refresh this agent's status: {e}");
            }
            tokio::time::sleep(super::HEARTBEAT).await;
        }
    })
}

/// One GPU's loop: pulls one job at a time and runs it to its acknowledgement, until `stop`.
async fn pull_jobs(agent: Arc<Agent>, consumer: PullConsumer, mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        let pulled = tokio::select! {
            b = consumer.fetch().max_messages(1).expires(PULL_EXPIRES).messages() => b,
            _ = stop.changed() => break,
        };
        let mut batch = match pulled {
            Ok(b) => b,
            Err(e) => {
                warn!("cannot pull jobs: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        loop {
            // A pull's end comes from the server: one that restarted meanwhile never sends it,
            // so the pull is given up and made again.
            let next = tokio::select! {
                n = tokio::time::timeout(PULL_EXPIRES + PULL_GRACE, batch.next()) => n,
                _ = stop.changed() => break,
            };
            match next {
                Ok(Some(Ok(m))) => agent.handle(m).await,
                Ok(Some(Err(e))) => {
                    warn!("pulling a job failed: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Ok(None) => break,
                Err(_) => {
                    warn!("a pull got no answer from NATS; pulling again");
                    break;
                }
            }
        }
    }
}

impl Agent {
    /// Runs one job message to its acknowledgement.
    async fn handle(&self, message: jetstream::Message) {
        let delivery = message.info().map(|i| i.delivered).unwrap_or(1);
        let wire: WireJob = match decode_message(&message.payload) {
            Ok(w) => w,
            Err(e) => return self.answer_undecodable(message, e).await,
        };
        let job_id = wire.job_id.clone();
        if let Some(stored) = self.stored(&job_id).await {
            // Ran before (its agent died between storing and acking): answer, do not run.
            info!(job = %job_id, "already has a result; not run again");
            self.send(
                &wire.events,
                &AgentEvent::Done {
                    job_id,
                    result: Box::new(stored),
                },
            )
            .await;
            let _ = message.double_ack().await;
            return;
        }
        if delivery > 1 {
            self.redelivered.fetch_add(1, Ordering::SeqCst);
        }
        self.running.fetch_add(1, Ordering::SeqCst);
        let result = if delivery > self.max_attempts as i64 {
            let mut r = JobResult::empty(
                &job_id,
                JobStatus::Crashed,
                Some(format!(
                    "crashed: the job was delivered {delivery} times and each agent that took it \
                     stopped before it ended (does it take its host down?); it is not run again"
                )),
                0.0,
            );
            r.agent = Some(self.id.clone());
            r
        } else {
            self.run(&wire, delivery, &message).await
        };
        // One line per run that ended (scripts/distributed-outage.py counts a job that ended
        // twice as run twice).
        info!(job = %job_id, delivery, status = result.status.name(), "job ended");
        let (result, stored) = self.store(result, &message).await;
        self.send(
            &wire.events,
            &AgentEvent::Done {
                job_id: job_id.clone(),
                result: Box::new(result),
            },
        )
        .await;
        // Unstored, it is delivered again: acknowledged, its front-end could miss the event
        // above (NATS restarting) and find no result, and the job would never end.
        if stored {
            if let Err(e) = message.double_ack().await {
                // The result is stored: a redelivery is answered with it.
                warn!(job = %job_id, "cannot acknowledge the job: {e}");
            }
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.completed.fetch_add(1, Ordering::SeqCst);
    }

    /// A job message this agent cannot decode: answered as failed (stored, sent, acknowledged)
    /// when it names its job, so its front-end ends it; terminated when it names none.
    async fn answer_undecodable(&self, message: jetstream::Message, error: String) {
        let Some(address) = JobAddress::of(message.headers.as_ref(), &message.payload) else {
            warn!("a job message that names no job (terminated): {error}");
            let _ = message.ack_with(AckKind::Term).await;
            return;
        };
        warn!(job = %address.job_id, "cannot decode the job; answered as failed: {error}");
        let mut result = JobResult::empty(
            &address.job_id,
            JobStatus::Error,
            Some(format!("error: the agent cannot decode the job: {error}")),
            0.0,
        );
        result.agent = Some(self.id.clone());
        let (result, stored) = self.store(result, &message).await;
        self.send(
            &address.events,
            &AgentEvent::Done {
                job_id: address.job_id.clone(),
                result: Box::new(result),
            },
        )
        .await;
        if stored {
            if let Err(e) = message.double_ack().await {
                warn!(job = %address.job_id, "cannot acknowledge the job: {e}");
            }
        }
        self.completed.fetch_add(1, Ordering::SeqCst);
    }

    /// Runs the job on a local warm worker, forwarding its events; marks the message in
    /// progress while it runs.
    async fn run(&self, wire: &WireJob, delivery: i64, message: &jetstream::Message) -> JobResult {
        self.send(
            &wire.events,
            &AgentEvent::Started {
                job_id: wire.job_id.clone(),
                agent: self.id.clone(),
                delivery,
            },
        )
        .await;
        let crashed = |why: String| {
            let mut r = JobResult::empty(&wire.job_id, JobStatus::Crashed, Some(why), 0.0);
            r.agent = Some(self.id.clone());
            r
        };
        let job = match self.queue.submit(wire.spec.clone(), "agent") {
            Ok(job) => job,
            Err(full) => {
                return crashed(format!(
                    "crashed: the agent's local queue refused the job ({} jobs)",
                    full.cap
                ))
            }
        };
        let (history, mut live) = job.subscribe();
        let mut pending = history.into_iter();
        let mut tick = tokio::time::interval(self.progress_every);
        tick.tick().await;
        let done = loop {
            let event = match pending.next() {
                Some(e) => e,
                None => tokio::select! {
                    e = live.recv() => match e {
                        Ok(e) => e,
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => break job.result(),
                    },
                    _ = tick.tick() => {
                        let _ = message.ack_with(AckKind::Progress).await;
                        continue;
                    }
                },
            };
            match event.stage {
                JobStage::Done => break event.result,
                JobStage::Queued => {}
                stage => {
                    self.send(
                        &wire.events,
                        &AgentEvent::Stage {
                            job_id: wire.job_id.clone(),
                            stage,
                            step: event.step,
                        },
                    )
                    .await
                }
            }
        };
        let Some(result) = done else {
            return crashed("crashed: the agent's queue ended the job without a result".into());
        };
        let mut result = (*result).clone();
        result.job_id = wire.job_id.clone();
        if let Some(b) = result.b.as_mut() {
            b.job_id = wire.job_id.clone();
        }
        result.agent = Some(self.id.clone());
        result
    }

    /// The job's stored result, if it has one.
    async fn stored(&self, job_id: &str) -> Option<JobResult> {
        match self.results.get(job_id).await {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes).ok(),
            Ok(None) => None,
            Err(e) => {
                warn!(job = %job_id, "cannot read the results bucket: {e}");
                None
            }
        }
    }

    /// Stores `result` as the job's result unless it has one, trying again every second while
    /// JetStream does not take it (a restarting nats-server has no buckets for a moment), the
    /// message marked in progress meanwhile, for at most [`STORE_PATIENCE`]. The result stored
    /// first (`true`), or `result` not stored (`false`: the message must not be acknowledged).
    async fn store(&self, result: JobResult, message: &jetstream::Message) -> (JobResult, bool) {
        let bytes = serde_json::to_vec(&result).expect("results serialize");
        let until = std::time::Instant::now() + STORE_PATIENCE;
        loop {
            match self
                .results
                .create(&result.job_id, bytes.clone().into())
                .await
            {
                Ok(_) => return (result, true),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                    info!(job = %result.job_id, "another agent stored this job's result first");
                    return match self.stored(&result.job_id).await {
                        Some(first) => (first, true),
                        None => (result, true),
                    };
                }
                Err(e) if std::time::Instant::now() >= until => {
                    warn!(
                        job = %result.job_id,
                        "cannot store the result ({e}); the job is not acknowledged and will be \
                         delivered again"
                    );
                    return (result, false);
                }
                Err(e) => {
                    info!(job = %result.job_id, "cannot store the result yet ({e}); trying again");
                    let _ = message.ack_with(AckKind::Progress).await;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    async fn send(&self, subject: &str, event: &AgentEvent) {
        let bytes = serde_json::to_vec(event).expect("events serialize");
        if let Err(e) = self.client.publish(subject.to_string(), bytes.into()).await {
            warn!(job = %event.job_id(), "cannot send the job's event: {e}");
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "agent".to_string())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    info!("stopping: no new jobs; the running ones finish");
}
