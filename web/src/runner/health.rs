//! `GET /api/health` (`api::service::Health`) in one line for the status bar and the Run pane,
//! and what the runner can do with a run ([`RunMode`]): measure it on a GPU, only check it (the
//! fake worker), or nothing (no usable GPU); a distributed front-end is described by its agents.

use super::{request, ApiError, Settings, NO_BODY};
use hopfuse_api::distributed::DistributedHealth;
use hopfuse_api::service::Health;

/// What the runner can do with a run, from `GET /api/health`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunMode {
    /// Runs execute on a GPU and are measured.
    Gpu,
    /// The fake worker (`--fake-worker`): runs are compiled and checked, never executed.
    Fake,
    /// No usable GPU: runs answer 503 (compiling works).
    Unavailable,
}

/// `GET /api/health` (docs/api.md), described in one line.
pub async fn health(settings: &Settings) -> Result<(String, RunMode), ApiError> {
    let h: Health = request(settings, "GET", "/api/health", NO_BODY, 4000).await?;
    Ok(describe_health(&h))
}

/// The line of a health answer.
pub(super) fn describe_health(h: &Health) -> (String, RunMode) {
    let version = &h.version;
    if !h.run_available {
        let why = match (&h.gpu_reason, &h.run_unavailable_reason) {
            (Some(g), _) => format!("no usable GPU ({g})"),
            (None, Some(r)) => r.clone(),
            (None, None) => "runs are unavailable".into(),
        };
        return (format!("runner {version} · {why}"), RunMode::Unavailable);
    }
    if h.worker == "agents" {
        if let Some(d) = &h.distributed {
            return describe_agents(version, d);
        }
    }
    if h.worker == "fake" {
        return (
            format!("runner {version} · fake worker, no GPU: runs are compiled and checked, not measured"),
            RunMode::Fake,
        );
    }
    let (name, sms) = match &h.gpu {
        Some(g) => (g.name.as_str(), format!(" ({} SMs)", g.sm_count)),
        None => ("GPU", String::new()),
    };
    (format!("runner {version} · {name}{sms}"), RunMode::Gpu)
}

/// A front-end of the distributed mode (`hopfuse serve --queue`): its runs go to the agents
/// listed in its health (`api::distributed::DistributedHealth`), whose GPUs (or fake workers)
/// decide what a run measures.
fn describe_agents(version: &str, d: &DistributedHealth) -> (String, RunMode) {
    if !d.connected {
        // Its runs answer 503 until NATS is back.
        return (
            format!(
                "runner {version} · distributed, NATS not connected ({})",
                d.nats
            ),
            RunMode::Unavailable,
        );
    }
    let n = d.agents.len();
    if n == 0 {
        return (
            format!("runner {version} · distributed, no agent connected: runs wait in the queue"),
            RunMode::Gpu,
        );
    }
    let fake = d.agents.iter().filter(|a| a.fake).count();
    // The GPUs' names as their warm workers opened them (none before a worker started; a
    // worker slot is null until its warm worker has started).
    // (Sorted and without repeats as they are collected: a binary search, not a sort.)
    let mut names: Vec<&str> = Vec::new();
    for name in (d.agents.iter())
        .flat_map(|a| a.workers.iter().flatten())
        .filter_map(|w| w.gpu.as_deref())
    {
        if let Err(at) = names.binary_search(&name) {
            names.insert(at, name);
        }
    }
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    if fake == n {
        return (
            format!(
                "runner {version} · distributed, {} with fake workers, no GPU: runs are compiled and checked, not measured",
                plural(n, "agent")
            ),
            RunMode::Fake,
        );
    }
    let names = if names.is_empty() {
        String::new()
    } else {
        format!(" ({})", names.join(", "))
    };
    let fake = if fake > 0 {
        format!(", {fake} of them fake")
    } else {
        String::new()
    };
    (
        format!(
            "runner {version} · distributed, {}{fake}, {}{names}",
            plural(n, "agent"),
            plural(d.gpus, "GPU")
        ),
        RunMode::Gpu,
    )
}
