//! The messages of the distributed mode, as JSON: a job in the stream ([`WireJob`]), an agent's
//! events for the submitting front-end ([`AgentEvent`]), an agent's status in the agents bucket
//! ([`AgentStatus`], defined in `hopfuse-api`). Both sides are the same binary; a message that
//! does not parse is an error of the sender, reported and dropped (a job: terminated, not
//! redelivered).

use crate::engine::{Prepared, Progress, RunRequest};
use crate::faults::Fault;
use crate::queue::{Job, JobResult, JobSpec, JobStage};
// The agents bucket holds what `/api/health` shows (the API crate defines it).
pub use hopfuse_api::distributed::AgentStatus;
use serde::{Deserialize, Serialize};

/// A job as published to the stream: what a local job carries, the compiled programs included
/// (the agent does not lower them again).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WireJob {
    pub job_id: String,
    /// Where the agent sends the job's events (the submitting front-end's subject).
    pub events: String,
    pub request: RunRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_b: Option<RunRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_inputs: Option<bool>,
    /// Profile the kernel with Nsight Compute after the run (the agent's host needs ncu).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub profile: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepared: Option<Prepared>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepared_b: Option<Prepared>,
}

impl WireJob {
    pub fn of(job: &Job, events: &str) -> WireJob {
        let spec = &job.spec;
        WireJob {
            job_id: job.id.clone(),
            events: events.to_string(),
            request: spec.request.clone(),
            request_b: spec.request_b.clone(),
            fault: spec.fault,
            same_inputs: spec.same_inputs,
            profile: spec.profile,
            prepared: spec.prepared.clone(),
            prepared_b: spec.prepared_b.clone(),
        }
    }

    /// The job for the agent's local queue.
    pub fn spec(&self) -> JobSpec {
        JobSpec {
            request: self.request.clone(),
            request_b: self.request_b.clone(),
            fault: self.fault,
            same_inputs: self.same_inputs,
            profile: self.profile,
            prepared: self.prepared.clone(),
            prepared_b: self.prepared_b.clone(),
        }
    }
}

/// What an agent tells the submitting front-end about a job.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AgentEvent {
    /// An agent took the job (`delivery`: 1 the first time, more after an agent died with it).
    Started {
        job_id: String,
        agent: String,
        delivery: i64,
    },
    /// A step of the job, as the local queue's SSE stream names it.
    Stage {
        job_id: String,
        stage: JobStage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<Progress>,
    },
    /// The job's result (the one stored in the results bucket).
    Done {
        job_id: String,
        result: Box<JobResult>,
    },
}

impl AgentEvent {
    pub fn job_id(&self) -> &str {
        match self {
            AgentEvent::Started { job_id, .. }
            | AgentEvent::Stage { job_id, .. }
            | AgentEvent::Done { job_id, .. } => job_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `profile` (main's profile branch) reaches the agent's local queue; a message without it
    /// is an unprofiled job.
    #[test]
    fn a_profiled_job_stays_profiled_on_the_wire() {
        let mut job = serde_json::json!({
            "job_id": "j1", "events": "hopfuse.events.f",
            "request": {"file": "t.hf", "source": "fusion f {}", "sizes": {}, "iters": 1,
                        "warmup": 0, "seed": 1, "index": null, "copy_ceiling": false},
        });
        let plain: WireJob = serde_json::from_value(job.clone()).unwrap();
        assert!(!plain.spec().profile);
        job["profile"] = true.into();
        let profiled: WireJob = serde_json::from_value(job).unwrap();
        let text = serde_json::to_string(&profiled).unwrap();
        let back: WireJob = serde_json::from_str(&text).unwrap();
        assert!(back.spec().profile, "{text}");
    }

    #[test]
    fn events_round_trip_with_their_kind() {
        let e = AgentEvent::Stage {
            job_id: "j1".into(),
            stage: JobStage::Running,
            step: Some(Progress::Launch),
        };
        let text = serde_json::to_string(&e).unwrap();
        assert!(text.contains(r#""kind":"stage""#), "{text}");
        let back: AgentEvent = serde_json::from_str(&text).unwrap();
        assert_eq!(back.job_id(), "j1");
        assert!(matches!(
            back,
            AgentEvent::Stage {
                stage: JobStage::Running,
                step: Some(Progress::Launch),
                ..
            }
        ));
    }
}
