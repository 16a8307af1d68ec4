//! `GET /api/health` (`api::service::Health`) in one line for the status bar and the Run pane,
//! and what the runner can do with a run ([`RunMode`]): measure it on a GPU, only check it (the
//! fake worker), or nothing (no usable GPU); a distributed front-end is described by its agents.

use super::fields::{Fields, Read};
use super::{answer, request, ApiError, Settings, NO_BODY};
use serde_json::Value;

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
    let h: Value = request(settings, "GET", "/api/health", NO_BODY, 4000).await?;
    answer("/api/health", &h, |_| describe_health(&h))
}

/// The line of a health answer (`api::service::Health`; read field by field like a job result,
/// see [`Fields`], so that the page carries no serde reader for its many nested types).
pub(super) fn describe_health(h: &Value) -> Read<(String, RunMode)> {
    let h = Fields::of(h, "the health answer")?;
    let version = h.str("version")?;
    if !h.bool("run_available")? {
        let why = match (
            h.opt_str("gpu_reason")?,
            h.opt_str("run_unavailable_reason")?,
        ) {
            (Some(g), _) => format!("no usable GPU ({g})"),
            (None, Some(r)) => r,
            (None, None) => "runs are unavailable".into(),
        };
        return Ok((format!("runner {version} · {why}"), RunMode::Unavailable));
    }
    if h.str("worker")? == "agents" {
        if let Some(d) = h.opt_obj("distributed")? {
            return describe_agents(version, d);
        }
    }
    if h.str("worker")? == "fake" {
        return Ok((
            format!("runner {version} · fake worker, no GPU: runs are compiled and checked, not measured"),
            RunMode::Fake,
        ));
    }
    let (name, sms) = match h.opt_obj("gpu")? {
        Some(g) => (g.str("name")?, format!(" ({} SMs)", g.u64("sm_count")?)),
        None => ("GPU", String::new()),
    };
    Ok((format!("runner {version} · {name}{sms}"), RunMode::Gpu))
}

/// A front-end of the distributed mode (`hopfuse serve --queue`): its runs go to the agents
/// listed in its health (`api::distributed::DistributedHealth`), whose GPUs (or fake workers)
/// decide what a run measures.
fn describe_agents(version: &str, d: Fields) -> Read<(String, RunMode)> {
    if !d.bool("connected")? {
        // Its runs answer 503 until NATS is back.
        return Ok((
            format!(
                "runner {version} · distributed, NATS not connected ({})",
                d.str("nats")?
            ),
            RunMode::Unavailable,
        ));
    }
    let list = d.list("agents")?;
    if list.is_empty() {
        return Ok((
            format!("runner {version} · distributed, no agent connected: runs wait in the queue"),
            RunMode::Gpu,
        ));
    }
    let agents: Vec<Fields> = list
        .iter()
        .map(|a| Fields::of(a, "agents"))
        .collect::<Read<_>>()?;
    let mut fake = 0;
    // The GPUs' names as their warm workers opened them (none before a worker started).
    let mut names: Vec<&str> = Vec::new();
    for a in &agents {
        if a.bool("fake")? {
            fake += 1;
        }
        // A worker slot is null until its warm worker has started.
        for w in a.list("workers")?.iter().filter(|w| !w.is_null()) {
            if let Some(name) = Fields::of(w, "workers")?.opt("gpu", Value::as_str)? {
                names.push(name);
            }
        }
    }
    let n = agents.len();
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    if fake == n {
        return Ok((
            format!(
                "runner {version} · distributed, {} with fake workers, no GPU: runs are compiled and checked, not measured",
                plural(n, "agent")
            ),
            RunMode::Fake,
        ));
    }
    names.sort_unstable();
    names.dedup();
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
    Ok((
        format!(
            "runner {version} · distributed, {}{fake}, {}{names}",
            plural(n, "agent"),
            plural(d.u64("gpus")? as usize, "GPU")
        ),
        RunMode::Gpu,
    ))
}
