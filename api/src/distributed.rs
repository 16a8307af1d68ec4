//! The distributed mode's part of `GET /api/health` (`hopfuse serve --queue`, docs/deploy.md):
//! the JetStream stream's depth and cap, and the `hopfuse agent`s with their GPUs
//! ([`DistributedHealth`]). [`AgentStatus`] is also what an agent writes into the agents
//! bucket, so the front-end passes it through unchanged.

use crate::job::WarmStatus;
use serde::{Deserialize, Serialize};

/// `Health::distributed`: present only on a front-end of the distributed mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DistributedHealth {
    /// The NATS servers (without credentials).
    pub nats: String,
    pub connected: bool,
    pub arch: String,
    /// Jobs in the stream (all front-ends): waiting for an agent or running.
    pub depth: Option<u64>,
    /// Of those, not yet taken by an agent.
    pub waiting: Option<u64>,
    /// Taken by an agent and not yet acknowledged (running).
    pub running: Option<u64>,
    /// The stream's cap (429 past it).
    pub cap: Option<i64>,
    /// Jobs of this front-end waiting or running.
    pub in_flight: usize,
    pub agents: Vec<AgentStatus>,
    /// GPUs of the agents.
    pub gpus: usize,
    /// What could not be read from NATS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An agent's entry in the agents bucket (and in `/api/health`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentStatus {
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub arch: String,
    pub gpus: usize,
    /// Runs with the fake worker (nothing is measured).
    pub fake: bool,
    /// Jobs running now.
    pub running: usize,
    /// Jobs this agent ended with a result since it started.
    pub completed: u64,
    /// Of those, jobs that had been delivered to an agent before.
    pub redelivered: u64,
    /// Seconds since the Unix epoch when it started.
    pub started_at: i64,
    /// Each GPU's warm worker.
    pub workers: Vec<Option<WarmStatus>>,
}
