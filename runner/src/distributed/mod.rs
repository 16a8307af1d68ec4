//! The distributed mode: several `hopfuse serve` front-ends and many GPU hosts (`hopfuse agent`)
//! around NATS JetStream; links and the run history in a shared PostgreSQL (`--db`).
//!
//! Takes `--queue nats://HOST:PORT` (and a token or a credentials file) on both sides and
//! guarantees, through JetStream rather than a broker of our own:
//! - a front-end answers `POST /api/run` with 202 only once the job is stored in the work-queue
//!   stream [`STREAM`] (file storage, at most `--queue-cap` messages: past it 429), on the
//!   subject of its GPU architecture (`hopfuse.jobs.sm_90a`), with the job id as its message id
//!   (a retried publish is not a second job);
//! - agents pull from one durable consumer per architecture, one job per free GPU, and run it
//!   through the same local [`Queue`](crate::queue::Queue) and warm workers as a single
//!   `hopfuse serve` (isolation, time limit, SIGKILL); the message is acked after the result is
//!   stored. Its ack wait exceeds the job's time limit, and the agent marks it in progress while
//!   it works, so only a dead agent's job is delivered again (to any agent), at most
//!   `--max-attempts` runs;
//! - a job's result is written once, by job id, into the key-value bucket [`RESULTS_BUCKET`]
//!   (create, never overwrite): a delivered-again job whose result exists is answered with that
//!   result and not run, and two agents that both ran a job agree on the first result;
//! - progress and results go back to the submitting front-end on its own subject (core NATS),
//!   which feeds the job's SSE stream as a local job's; a front-end also reads results it may
//!   have missed (a reconnect) from the bucket;
//! - a job's client and request wait in [`PENDING_BUCKET`] from its publication until its run
//!   is in the history: when its front-end dies first, another (or its restart) stores the run
//!   once the result is in the results bucket;
//! - agents announce themselves in [`AGENTS_BUCKET`] (entries expire when an agent stops
//!   heart-beating), which `/api/health` lists with the stream's depth.
//!
//! `wire` holds the messages, `frontend` the serve side, `agent` the GPU-host side. A front-end's
//! `Queue` is `QueueConfig::remote` (no local dispatchers or workers); an agent's is local.

pub mod agent;
pub mod frontend;
pub mod wire;

// The NATS options are flags of `hopfuse serve` too, so they live with its flags (the service
// names this module, not the other way round).
pub use crate::serve_args::{NatsArgs, DEFAULT_ARCH};

use async_nats::jetstream::{self, consumer, kv, stream};
use std::time::Duration;

/// The work-queue stream of jobs.
pub const STREAM: &str = "HOPFUSE_JOBS";
/// Jobs for architecture `A` are published on `hopfuse.jobs.A`.
pub const JOBS_PREFIX: &str = "hopfuse.jobs";
/// A front-end receives its jobs' events on `hopfuse.events.<front-end id>`.
pub const EVENTS_PREFIX: &str = "hopfuse.events";
/// Job id -> result JSON, written once.
pub const RESULTS_BUCKET: &str = "hopfuse_results";
/// Job id -> what its run in the history needs besides the result ([`wire::PendingRun`]), from
/// its publication until its run is stored: any front-end stores the run of a job whose own
/// front-end died.
pub const PENDING_BUCKET: &str = "hopfuse_pending";
/// Agent id -> its status, refreshed every [`HEARTBEAT`].
pub const AGENTS_BUCKET: &str = "hopfuse_agents";
/// How often an agent refreshes its status.
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// An agent not heard of for this long is gone from `/api/health`.
pub const AGENT_TTL: Duration = Duration::from_secs(15);
/// How long results stay in the bucket (the run history in the database keeps them longer).
pub const RESULTS_MAX_AGE: Duration = Duration::from_secs(7 * 86_400);
/// Messages the stream holds when an agent creates it before any front-end sets `--queue-cap`.
const DEFAULT_STREAM_CAP: i64 = 10_000;
/// Publishes a front-end retries within JetStream's duplicate window are one job.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// How often an agent looks for acknowledged job messages the stream still holds
/// ([`sweep_acknowledged`]).
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// Checks an architecture name: one subject token.
pub fn check_arch(arch: &str) -> anyhow::Result<()> {
    if arch.is_empty()
        || !arch
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        anyhow::bail!("--arch `{arch}`: expected a name such as sm_90a (letters, digits, _ or -)");
    }
    Ok(())
}

/// The subject of jobs for `arch`.
pub fn jobs_subject(arch: &str) -> String {
    format!("{JOBS_PREFIX}.{arch}")
}

/// The agents' durable consumer for `arch`.
pub fn consumer_name(arch: &str) -> String {
    format!("hopfuse-agents-{arch}")
}

/// Connects to NATS: a clear error when it cannot be reached now; once connected, it
/// reconnects for ever (a restarted NATS server is waited for), and `on_event` hears of it.
pub async fn connect(
    args: &NatsArgs,
    name: &str,
    on_event: impl Fn(async_nats::Event) + Send + Sync + 'static,
) -> anyhow::Result<async_nats::Client> {
    let url = args
        .queue
        .as_deref()
        .ok_or_else(|| anyhow::anyhow!("--queue nats://HOST:PORT is required"))?;
    check_arch(&args.arch)?;
    let shown = args.display_url();
    let mut options = async_nats::ConnectOptions::new()
        .name(name)
        .connection_timeout(Duration::from_secs(5))
        .max_reconnects(None)
        .event_callback(move |event| {
            on_event(event);
            async {}
        });
    if let Some(token) = &args.nats_token {
        options = options.token(token.clone());
    }
    if let Some(creds) = &args.nats_creds {
        options = options.credentials_file(creds).await.map_err(|e| {
            anyhow::anyhow!("cannot read the NATS credentials {}: {e}", creds.display())
        })?;
    }
    let servers: Vec<async_nats::ServerAddr> = url
        .split(',')
        .map(|u| u.trim().parse())
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("--queue {shown}: {e}"))?;
    options
        .connect(servers)
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to NATS at {shown}: {e}"))
}

/// The jobs stream. A front-end sets its cap (`Some(--queue-cap)`: the last front-end started
/// decides); an agent takes the stream as it is, creating it with a default cap when missing.
pub async fn ensure_stream(
    js: &jetstream::Context,
    cap: Option<usize>,
) -> anyhow::Result<stream::Stream> {
    let config = stream::Config {
        name: STREAM.to_string(),
        subjects: vec![format!("{JOBS_PREFIX}.>")],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        max_messages: cap.map_or(DEFAULT_STREAM_CAP, |c| c.max(1) as i64),
        discard: stream::DiscardPolicy::New,
        duplicate_window: DUPLICATE_WINDOW,
        ..Default::default()
    };
    // Front-ends and agents starting together race to create it: the loser finds it made.
    let mut attempt = 0;
    loop {
        let made = match cap {
            Some(_) => js
                .create_or_update_stream(config.clone())
                .await
                .map(drop)
                .map_err(|e| e.to_string()),
            None => js
                .get_or_create_stream(config.clone())
                .await
                .map(drop)
                .map_err(|e| e.to_string()),
        };
        match made {
            Ok(()) => break,
            Err(e) if attempt >= 2 => {
                anyhow::bail!("cannot create the JetStream stream {STREAM}: {e}")
            }
            Err(_) => attempt += 1,
        }
    }
    js.get_stream(STREAM)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open the JetStream stream {STREAM}: {e}"))
}

/// The agents' durable pull consumer of `arch`: explicit acks, `ack_wait` (longer than a job's
/// time limit), deliveries unbounded on the server (agents bound the runs of a job).
pub async fn ensure_consumer(
    stream: &stream::Stream,
    arch: &str,
    ack_wait: Duration,
) -> anyhow::Result<consumer::PullConsumer> {
    let name = consumer_name(arch);
    let config = consumer::pull::Config {
        durable_name: Some(name.clone()),
        filter_subject: jobs_subject(arch),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait,
        max_deliver: -1,
        ..Default::default()
    };
    let consumer: consumer::PullConsumer = stream
        .get_or_create_consumer(&name, config)
        .await
        .map_err(|e| anyhow::anyhow!("cannot create the JetStream consumer {name}: {e}"))?;
    // The first agent made it (agents mark running jobs in progress at a third of its ack
    // wait, whatever their own --job-timeout).
    let made_with = consumer.cached_info().config.ack_wait;
    if made_with != ack_wait {
        tracing::warn!(
            "the consumer {name} has an ack wait of {} s, not this agent's {} s: its agents \
             have different --job-timeout values; give every agent the same",
            made_with.as_secs_f64(),
            ack_wait.as_secs_f64()
        );
    }
    Ok(consumer)
}

/// Deletes the job messages of `arch` that the stream still holds at or below its consumer's
/// ack floor (every message there was acknowledged); returns how many. A work-queue stream
/// removes a message when it is acknowledged, but a nats-server killed (SIGKILL) before its
/// file store wrote those removals brings the messages back while the consumer keeps the
/// acknowledgements: they are never delivered again and stay, counting against `--queue-cap`
/// and the health's depth for good (issue 39). Deleting one twice (two agents sweeping) is
/// harmless.
pub async fn sweep_acknowledged(
    stream: &stream::Stream,
    consumer: &consumer::PullConsumer,
    arch: &str,
) -> anyhow::Result<u64> {
    let floor = consumer.get_info().await?.ack_floor.stream_sequence;
    let first = stream.get_info().await?.state.first_sequence;
    let subject = jobs_subject(arch);
    let mut deleted = 0;
    for seq in first.max(1)..=floor {
        // Missing (removed as it should be) or another architecture's: left alone.
        let Ok(message) = stream.get_raw_message(seq).await else {
            continue;
        };
        if message.subject.as_str() == subject && stream.delete_message(seq).await.is_ok() {
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// The results bucket (created when missing).
pub async fn results_bucket(js: &jetstream::Context) -> anyhow::Result<kv::Store> {
    bucket(
        js,
        RESULTS_BUCKET,
        "hopfuse: job id -> result, written once",
        RESULTS_MAX_AGE,
        stream::StorageType::File,
    )
    .await
}

/// The pending-runs bucket (created when missing): entries older than the results are gone.
pub async fn pending_bucket(js: &jetstream::Context) -> anyhow::Result<kv::Store> {
    bucket(
        js,
        PENDING_BUCKET,
        "hopfuse: job id -> client and request, until its run is stored",
        RESULTS_MAX_AGE,
        stream::StorageType::File,
    )
    .await
}

/// The agents bucket (created when missing): entries expire after [`AGENT_TTL`].
pub async fn agents_bucket(js: &jetstream::Context) -> anyhow::Result<kv::Store> {
    bucket(
        js,
        AGENTS_BUCKET,
        "hopfuse: agent id -> status, refreshed while it runs",
        AGENT_TTL,
        // On file, as everything here: a restarted NATS server still has it.
        stream::StorageType::File,
    )
    .await
}

/// A key-value bucket with one value per key. Its stream is made here with the layout
/// async-nats's `create_key_value` gives it, because that call first reads the account's
/// JetStream info in a form only NATS 2.10 and later send (Debian's nats-server is 2.9).
async fn bucket(
    js: &jetstream::Context,
    name: &str,
    description: &str,
    max_age: Duration,
    storage: stream::StorageType,
) -> anyhow::Result<kv::Store> {
    let config = stream::Config {
        name: format!("KV_{name}"),
        description: Some(description.to_string()),
        subjects: vec![format!("$KV.{name}.>")],
        max_messages_per_subject: 1,
        max_age,
        storage,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: stream::DiscardPolicy::New,
        num_replicas: 1,
        ..Default::default()
    };
    js.get_or_create_stream(config)
        .await
        .map_err(|e| anyhow::anyhow!("cannot create the key-value bucket {name}: {e}"))?;
    js.get_key_value(name)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open the key-value bucket {name}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_credentials() {
        let args = |u: &str| NatsArgs {
            queue: Some(u.into()),
            ..NatsArgs::default()
        };
        assert_eq!(
            args("nats://user:secret@h1:4222,nats://h2:4222").display_url(),
            "nats://h1:4222,nats://h2:4222"
        );
        assert_eq!(args("nats://h:4222").display_url(), "nats://h:4222");
    }

    #[test]
    fn architectures_are_one_subject_token() {
        assert!(check_arch("sm_90a").is_ok());
        for bad in ["", "sm.90", "sm_90a.>", "a b", "*"] {
            assert!(check_arch(bad).is_err(), "{bad}");
        }
        assert_eq!(jobs_subject("sm_90a"), "hopfuse.jobs.sm_90a");
    }
}
