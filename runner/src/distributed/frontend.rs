//! The front-end side of the distributed mode (`hopfuse serve --queue nats://...`).
//!
//! Takes jobs admitted by the service's [`Queue`] (its per-client and local caps, its job
//! records and SSE streams) and, instead of a local worker, publishes each to the JetStream
//! stream, holding the job's [`Ticket`] until its result comes back. Guarantees: a job is
//! accepted only once JetStream stored it (else 429 when the stream is at its cap, 503 when
//! NATS does not answer, and the job is forgotten); every accepted job ends exactly once, with
//! the result an agent stored (events on this front-end's subject; after a reconnect, or for a
//! job quiet for long, the results bucket is read); the result goes into the run history before
//! `done` is announced, as for a local job. A job's client and request wait in the pending-runs
//! bucket until then; a job whose result has waited there past [`ADOPT_AFTER`] lost its
//! front-end, and any front-end's sweep stores its run (the history takes a run once).

use super::wire::{AgentEvent, AgentStatus, PendingRun, WireJob, EVENTS_HEADER};
use super::NatsArgs;
use crate::queue::{Job, JobResult, JobStage, JobStatus, Queue, QueueFull, Ticket};
use async_nats::jetstream::{self, kv, message::PublishMessage};
use futures_util::StreamExt;
pub use hopfuse_api::distributed::DistributedHealth;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tracing::{info, warn};

/// How long a publish may wait for JetStream's acknowledgement.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// How often in-flight jobs are checked against the results bucket.
const SWEEP_EVERY: Duration = Duration::from_secs(5);
/// A started job without an event for this long is looked up in the results bucket.
const QUIET_STARTED: Duration = Duration::from_secs(5);
/// Any job without an event for this long is looked up too.
const QUIET_ANY: Duration = Duration::from_secs(30);
/// Another front-end's job whose result has been seen for this long while the job is still in
/// the pending-runs bucket: its front-end died (its own sweep would have stored the run by
/// now), so this one stores it.
pub const ADOPT_AFTER: Duration = Duration::from_secs(35);
/// How long `/api/health` waits for NATS.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a job was not accepted.
#[derive(Debug)]
pub enum SubmitError {
    /// A cap was reached: this front-end's (or the client's), or the stream's (429).
    Full(QueueFull),
    /// NATS did not take the job (503).
    Unavailable(String),
    /// The job's message is over NATS's payload limit even without its compiled programs
    /// (413: a retry cannot succeed).
    TooLarge(String),
}

/// Bytes kept free under NATS's `max_payload` for the message's headers.
const HEADER_ROOM: usize = 1024;

/// The job's stream message within `max_payload` bytes: whole (with the compiled programs, so
/// the agent does not lower them again), else without them (the agent's worker lowers the
/// program itself, as a one-shot worker does), else the size it would need.
pub fn encode_within(wire: &WireJob, max_payload: usize) -> Result<Vec<u8>, usize> {
    let limit = max_payload.saturating_sub(HEADER_ROOM);
    let whole = serde_json::to_vec(wire).expect("jobs serialize");
    if whole.len() <= limit {
        return Ok(whole);
    }
    if wire.spec.prepared.is_none() && wire.spec.prepared_b.is_none() {
        return Err(whole.len());
    }
    let mut lean = wire.clone();
    lean.spec.prepared = None;
    lean.spec.prepared_b = None;
    let lean = serde_json::to_vec(&lean).expect("jobs serialize");
    if lean.len() <= limit {
        Ok(lean)
    } else {
        Err(lean.len())
    }
}

/// A job published and not yet ended.
struct InFlight {
    ticket: Ticket,
    /// When an agent started it (milliseconds after submission): the job's queue time.
    started_ms: Option<f64>,
    last_event: Instant,
}

pub struct FrontEnd {
    args: NatsArgs,
    client: async_nats::Client,
    js: jetstream::Context,
    results: kv::Store,
    /// Job id -> [`PendingRun`], until the job's run is stored.
    pending: kv::Store,
    /// Jobs not this front-end's, in the pending bucket with a result: since when.
    orphans: Mutex<HashMap<String, Instant>>,
    agents: kv::Store,
    /// `hopfuse.jobs.<arch>`.
    subject: String,
    /// This front-end's events subject.
    events: String,
    cap: usize,
    queue: Arc<Queue>,
    in_flight: Mutex<HashMap<String, InFlight>>,
    /// Wakes the sweeper at once (after a reconnect or a slow-consumer warning).
    sweep_all: Arc<Notify>,
}

impl FrontEnd {
    /// Connects, makes the stream (cap `cap`) and the buckets, and starts listening for this
    /// front-end's events.
    pub async fn start(
        args: &NatsArgs,
        queue: Arc<Queue>,
        cap: usize,
    ) -> anyhow::Result<Arc<FrontEnd>> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        // Unique among front-ends: a restarted one does not get its predecessor's events.
        let id = format!("{}-{nanos:x}", std::process::id());
        let sweep_all = Arc::new(Notify::new());
        let wake = sweep_all.clone();
        let client = super::connect(
            args,
            &format!("hopfuse serve {id}"),
            move |event| match event {
                async_nats::Event::Connected => {
                    info!("NATS: connected");
                    wake.notify_one();
                }
                async_nats::Event::SlowConsumer(_) => {
                    warn!("NATS: events were dropped (slow consumer); reading results");
                    wake.notify_one();
                }
                other => warn!("NATS: {other}"),
            },
        )
        .await?;
        let js = jetstream::new(client.clone());
        super::ensure_stream(&js, Some(cap)).await?;
        let results = super::results_bucket(&js).await?;
        let pending = super::pending_bucket(&js).await?;
        let agents = super::agents_bucket(&js).await?;
        let events = format!("{}.{id}", super::EVENTS_PREFIX);
        let mut subscription = client
            .subscribe(events.clone())
            .await
            .map_err(|e| anyhow::anyhow!("cannot subscribe to {events}: {e}"))?;
        let front = Arc::new(FrontEnd {
            args: args.clone(),
            subject: super::jobs_subject(&args.arch),
            client,
            js,
            results,
            pending,
            orphans: Mutex::new(HashMap::new()),
            agents,
            events,
            cap,
            queue,
            in_flight: Mutex::new(HashMap::new()),
            sweep_all,
        });
        let f = front.clone();
        tokio::spawn(async move {
            while let Some(message) = subscription.next().await {
                match serde_json::from_slice::<AgentEvent>(&message.payload) {
                    Ok(event) => f.on_event(event),
                    Err(e) => warn!("an event that is not one (dropped): {e}"),
                }
            }
        });
        let f = front.clone();
        tokio::spawn(async move {
            let mut full = false;
            loop {
                f.sweep(full).await;
                full = tokio::select! {
                    _ = f.sweep_all.notified() => true,
                    _ = tokio::time::sleep(SWEEP_EVERY) => false,
                };
            }
        });
        info!(
            "distributed mode: jobs to {} on {}",
            front.subject,
            args.display_url()
        );
        Ok(front)
    }

    /// Admits a job (the queue's caps), publishes it, and keeps its ticket until its result.
    pub async fn submit(
        &self,
        spec: crate::queue::JobSpec,
        client: &str,
    ) -> Result<Arc<Job>, SubmitError> {
        if self.client.connection_state() != async_nats::connection::State::Connected {
            // A publish now would wait in the client and reach the stream after the 503.
            return Err(SubmitError::Unavailable(format!(
                "the job queue (NATS at {}) is not connected; retry shortly",
                self.args.display_url()
            )));
        }
        let (job, ticket) = self.queue.admit(spec, client).map_err(SubmitError::Full)?;
        let max_payload = self.client.server_info().max_payload;
        let payload = match encode_within(&WireJob::of(&job, &self.events), max_payload) {
            Ok(p) => p,
            Err(needed) => {
                // Never queued: forget it (dropping its ticket ends it and frees its counts).
                self.queue.forget(&job.id);
                drop(ticket);
                return Err(SubmitError::TooLarge(format!(
                    "the job's message needs {needed} bytes even without its compiled CUDA, over \
                     the job queue's (NATS) payload limit of {max_payload} bytes"
                )));
            }
        };
        // In the map before it is published: an agent may answer at once.
        self.in_flight.lock().expect("in-flight lock").insert(
            job.id.clone(),
            InFlight {
                ticket,
                started_ms: None,
                last_event: Instant::now(),
            },
        );
        let publish = PublishMessage::build()
            .payload(payload.into())
            .message_id(job.id.clone())
            .header(EVENTS_HEADER, self.events.as_str());
        let record = PendingRun {
            client: client.to_string(),
            request: job.spec.history(),
        };
        let record = serde_json::to_vec(&record).expect("pending runs serialize");
        // Recorded before it is published: a job in the stream always has its record.
        let published = async {
            self.pending
                .put(job.id.as_str(), record.into())
                .await
                .map_err(|e| format!("cannot record the job: {e}"))?;
            let sent = self.js.send_publish(self.subject.clone(), publish);
            let ack = sent.await.map_err(|e| e.to_string())?;
            ack.await.map_err(|e| e.to_string())
        };
        let refused = match tokio::time::timeout(PUBLISH_TIMEOUT, published).await {
            Ok(Ok(_)) => return Ok(job),
            Ok(Err(e)) => e,
            Err(_) => format!(
                "no answer from JetStream in {} s",
                PUBLISH_TIMEOUT.as_secs()
            ),
        };
        // Not queued anywhere: forget it (dropping its ticket ends it and frees its counts).
        let entry = self
            .in_flight
            .lock()
            .expect("in-flight lock")
            .remove(&job.id);
        self.queue.forget(&job.id);
        drop(entry);
        if refused.contains("maximum messages") {
            let depth = self.stream_depth().await.unwrap_or(self.cap as u64);
            return Err(SubmitError::Full(QueueFull {
                cap: self.cap,
                per_client: false,
                retry_after_s: self.retry_after(depth).await,
            }));
        }
        warn!(job = %job.id, "JetStream did not take the job: {refused}");
        // The publish may still reach the stream (an acknowledgement lost, a reconnect): a
        // result stored under the job's id first makes an agent answer with it, not run it.
        // Its client was answered 503: no run of it goes into the history.
        let (results, pending, id) = (self.results.clone(), self.pending.clone(), job.id.clone());
        let not_run = JobResult::empty(
            &id,
            JobStatus::Error,
            Some(format!("the job was refused (503): {refused}")),
            job.elapsed_ms(),
        );
        tokio::spawn(async move {
            let bytes = serde_json::to_vec(&not_run).expect("results serialize");
            let _ = tokio::time::timeout(PUBLISH_TIMEOUT, results.create(&id, bytes.into())).await;
            let _ = tokio::time::timeout(PUBLISH_TIMEOUT, pending.delete(&id)).await;
        });
        Err(SubmitError::Unavailable(format!(
            "the job queue (NATS JetStream at {}) did not take the job: {refused}",
            self.args.display_url()
        )))
    }

    fn on_event(self: &Arc<Self>, event: AgentEvent) {
        let mut in_flight = self.in_flight.lock().expect("in-flight lock");
        let Some(entry) = in_flight.get_mut(event.job_id()) else {
            // Ended already (a late or repeated event), or another front-end's.
            return;
        };
        entry.last_event = Instant::now();
        let job = entry.ticket.job().clone();
        match event {
            AgentEvent::Started {
                agent, delivery, ..
            } => {
                entry.started_ms = Some(job.elapsed_ms());
                if delivery > 1 {
                    info!(job = %job.id, %agent, delivery, "job delivered again");
                }
            }
            AgentEvent::Stage { stage, step, .. } => {
                if stage != JobStage::Done && stage != JobStage::Queued {
                    job.stage(stage, step);
                }
            }
            AgentEvent::Done { job_id, result } => {
                if let Some(entry) = in_flight.remove(&job_id) {
                    drop(in_flight);
                    let f = self.clone();
                    // Off the subscription's task: storing the run takes a database round trip.
                    tokio::spawn(async move { f.complete(entry, *result).await });
                }
            }
        }
    }

    async fn complete(&self, entry: InFlight, mut result: JobResult) {
        let job = entry.ticket.job().clone();
        result.job_id = job.id.clone();
        if let Some(b) = result.b.as_mut() {
            b.job_id = job.id.clone();
        }
        if let Some(queued) = entry.started_ms {
            result.queued_ms = queued;
        }
        self.queue.finish_remote(entry.ticket, result).await;
        self.stored(&job.id).await;
    }

    /// The job's run is in the history (or waits for the database in this process): its
    /// pending entry goes.
    async fn stored(&self, id: &str) {
        match tokio::time::timeout(PUBLISH_TIMEOUT, self.pending.delete(id)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(job = %id, "cannot remove the job's pending entry: {e}"),
            Err(_) => warn!(job = %id, "cannot remove the job's pending entry: no answer"),
        }
    }

    /// Stores the runs of jobs whose front-end died: pending entries of jobs not this
    /// front-end's whose result has been in the results bucket for [`ADOPT_AFTER`].
    async fn adopt_orphans(&self) {
        let mut keys = match self.pending.keys().await {
            Ok(keys) => keys,
            Err(e) => return info!("cannot list the pending runs: {e}"),
        };
        let mut ids = Vec::new();
        while let Some(key) = keys.next().await {
            match key {
                Ok(id) => ids.push(id),
                Err(e) => return info!("cannot list the pending runs: {e}"),
            }
        }
        let mut due = Vec::new();
        {
            let in_flight = self.in_flight.lock().expect("in-flight lock");
            ids.retain(|id| !in_flight.contains_key(id));
        }
        for id in &ids {
            // A job still queued or running has no result yet: not an orphan (yet).
            if self.stored_result(id).await.is_none() {
                continue;
            }
            let mut orphans = self.orphans.lock().expect("orphans lock");
            let seen = *orphans.entry(id.clone()).or_insert_with(Instant::now);
            if seen.elapsed() >= ADOPT_AFTER {
                due.push(id.clone());
            }
        }
        self.orphans
            .lock()
            .expect("orphans lock")
            .retain(|id, _| ids.contains(id));
        for id in due {
            let record = match self.pending.get(&id).await {
                Ok(Some(bytes)) => serde_json::from_slice::<PendingRun>(&bytes),
                // Stored and removed meanwhile.
                _ => continue,
            };
            let (Ok(record), Some(result)) = (record, self.stored_result(&id).await) else {
                warn!(job = %id, "an unreadable pending run (removed)");
                self.stored(&id).await;
                continue;
            };
            match self
                .queue
                .store_run(&result, &record.client, &record.request)
                .await
            {
                Ok(()) => {
                    info!(job = %id, "stored the run of a job whose front-end is gone");
                    self.stored(&id).await;
                }
                Err(e) => warn!(job = %id, "cannot store the run of an orphaned job: {e}"),
            }
            self.orphans.lock().expect("orphans lock").remove(&id);
        }
    }

    /// Ends in-flight jobs whose result is in the bucket but whose `done` event never came:
    /// started jobs quiet for a while (every sweep), or every job (`all`: after a reconnect).
    async fn sweep(self: &Arc<Self>, all: bool) {
        self.adopt_orphans().await;
        let due: Vec<String> = {
            let in_flight = self.in_flight.lock().expect("in-flight lock");
            in_flight
                .iter()
                .filter(|(_, e)| {
                    let quiet = e.last_event.elapsed();
                    all || quiet > QUIET_ANY || (e.started_ms.is_some() && quiet > QUIET_STARTED)
                })
                .map(|(id, _)| id.clone())
                .collect()
        };
        for id in due {
            let Some(result) = self.stored_result(&id).await else {
                continue;
            };
            let entry = self.in_flight.lock().expect("in-flight lock").remove(&id);
            if let Some(entry) = entry {
                info!(job = %id, "result read from the results bucket (its event was missed)");
                self.complete(entry, result).await;
            }
        }
    }

    /// A job's result from the results bucket (any front-end's job), if it has one.
    pub async fn stored_result(&self, id: &str) -> Option<JobResult> {
        if id.is_empty() || id.len() > 64 || !id.chars().all(|c| c.is_ascii_alphanumeric()) {
            return None;
        }
        match self.results.get(id).await {
            Ok(Some(bytes)) => match serde_json::from_slice(&bytes) {
                Ok(r) => Some(r),
                Err(e) => {
                    warn!(job = %id, "an unreadable result in the bucket: {e}");
                    None
                }
            },
            Ok(None) => None,
            Err(e) => {
                warn!(job = %id, "cannot read the results bucket: {e}");
                None
            }
        }
    }

    async fn stream_depth(&self) -> Option<u64> {
        let mut stream = self.js.get_stream(super::STREAM).await.ok()?;
        Some(stream.info().await.ok()?.state.messages)
    }

    /// Seconds until the stream likely has room: its depth at the recent mean job time over
    /// the agents' GPUs.
    async fn retry_after(&self, depth: u64) -> u64 {
        let gpus = self.agents().await.0.iter().map(|a| a.gpus).sum::<usize>();
        let mean_s = self.queue.mean_job_ms() as f64 / 1e3;
        ((depth as f64 / gpus.max(1) as f64 * mean_s).ceil() as u64).clamp(1, 600)
    }

    /// The agents heard of within [`super::AGENT_TTL`], by id.
    async fn agents(&self) -> (Vec<AgentStatus>, Option<String>) {
        let mut agents = Vec::new();
        let mut keys = match self.agents.keys().await {
            Ok(k) => k,
            Err(e) => return (agents, Some(format!("cannot list the agents: {e}"))),
        };
        let mut names = Vec::new();
        while let Some(key) = keys.next().await {
            match key {
                Ok(k) => names.push(k),
                Err(e) => return (agents, Some(format!("cannot list the agents: {e}"))),
            }
        }
        for name in names {
            if let Ok(Some(bytes)) = self.agents.get(&name).await {
                if let Ok(status) = serde_json::from_slice::<AgentStatus>(&bytes) {
                    agents.push(status);
                }
            }
        }
        agents.sort_by(|a, b| a.id.cmp(&b.id));
        (agents, None)
    }

    pub async fn health(&self) -> DistributedHealth {
        let in_flight = self.in_flight.lock().expect("in-flight lock").len();
        let mut health = DistributedHealth {
            nats: self.args.display_url(),
            connected: self.client.connection_state() == async_nats::connection::State::Connected,
            arch: self.args.arch.clone(),
            depth: None,
            waiting: None,
            running: None,
            cap: None,
            in_flight,
            agents: Vec::new(),
            gpus: 0,
            error: None,
        };
        let read = async {
            let mut stream = self.js.get_stream(super::STREAM).await?;
            let info = stream.info().await?;
            health.depth = Some(info.state.messages);
            health.cap = Some(info.config.max_messages);
            let mut consumer: jetstream::consumer::PullConsumer = stream
                .get_consumer(&super::consumer_name(&self.args.arch))
                .await?;
            let c = consumer.info().await?;
            health.waiting = Some(c.num_pending);
            health.running = Some(c.num_ack_pending as u64);
            Ok::<(), async_nats::Error>(())
        };
        match tokio::time::timeout(HEALTH_TIMEOUT, read).await {
            Ok(Ok(())) => {}
            // No agent has made its consumer yet: nothing is running.
            Ok(Err(e)) if health.depth.is_some() => {
                health.error = Some(format!("no agents' consumer yet: {e}"));
            }
            Ok(Err(e)) => health.error = Some(format!("cannot read the stream: {e}")),
            Err(_) => health.error = Some("NATS did not answer in 2 s".into()),
        }
        match tokio::time::timeout(HEALTH_TIMEOUT, self.agents()).await {
            Ok((agents, error)) => {
                health.gpus = agents.iter().map(|a| a.gpus).sum();
                health.agents = agents;
                if error.is_some() {
                    health.error = error;
                }
            }
            Err(_) => health.error = Some("NATS did not answer in 2 s".into()),
        }
        health
    }
}
