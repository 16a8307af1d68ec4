//! The messages of the distributed mode, as JSON: a job in the stream ([`WireJob`]), an agent's
//! events for the submitting front-end ([`AgentEvent`]), an agent's status in the agents bucket
//! ([`AgentStatus`], defined in `hopfuse-api`), a job's entry in the pending-runs bucket
//! ([`PendingRun`]). Both sides are the same binary. A job message
//! that does not decode is answered as failed: its job id and events subject travel in its
//! headers too ([`JobAddress`]), so it is answerable whatever its payload; only a message that
//! names no job is terminated unanswered (no front-end waits for it).

use crate::engine::Progress;
use crate::job_spec::JobSpec;
use crate::queue::{Job, JobResult, JobStage};
// The agents bucket holds what `/api/health` shows (the API crate defines it).
pub use hopfuse_api::distributed::AgentStatus;
use serde::{Deserialize, Serialize};

/// A job as published to the stream: its [`JobSpec`] (its fields at the top of the message,
/// the compiled programs included: the agent does not lower them again), and where it goes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WireJob {
    pub job_id: String,
    /// Where the agent sends the job's events (the submitting front-end's subject).
    pub events: String,
    #[serde(flatten)]
    pub spec: JobSpec,
}

impl WireJob {
    pub fn of(job: &Job, events: &str) -> WireJob {
        WireJob {
            job_id: job.id.clone(),
            events: events.to_string(),
            spec: job.spec.clone(),
        }
    }
}

/// A published job's entry in the pending-runs bucket: what its run in the history needs
/// besides its result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingRun {
    /// The client (IP address) that submitted it.
    pub client: String,
    /// [`JobSpec::history`].
    pub request: serde_json::Value,
}

/// The header that carries a job message's events subject (its id is in `Nats-Msg-Id`).
pub const EVENTS_HEADER: &str = "Hopfuse-Events";

/// Which job a message is and where its events go, read without the rest of the message: what
/// an agent that cannot decode a job needs to answer it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct JobAddress {
    pub job_id: String,
    pub events: String,
}

impl JobAddress {
    /// From the message's headers, else from its two fields alone (serde_json skips the
    /// others without a depth limit).
    pub fn of(headers: Option<&async_nats::HeaderMap>, payload: &[u8]) -> Option<JobAddress> {
        let header = |name: &str| {
            headers
                .and_then(|h| h.get(name))
                .map(|v| v.as_str().to_string())
        };
        match (header("Nats-Msg-Id"), header(EVENTS_HEADER)) {
            (Some(job_id), Some(events)) => Some(JobAddress { job_id, events }),
            _ => serde_json::from_slice(payload).ok(),
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
        assert!(!plain.spec.profile);
        job["profile"] = true.into();
        let profiled: WireJob = serde_json::from_value(job).unwrap();
        let text = serde_json::to_string(&profiled).unwrap();
        let back: WireJob = serde_json::from_str(&text).unwrap();
        assert!(back.spec.profile, "{text}");
        // The spec's fields sit at the top of the message, as before it was one struct: front
        // ends and agents of either side of that change read each other's jobs.
        let fields: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(fields["request"]["file"], "t.hf", "{text}");
        assert_eq!(fields["profile"], true, "{text}");
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

    /// A message whose spec does not decode still names its job, from its headers or from
    /// its payload's two fields, however deep the rest.
    #[test]
    fn a_job_address_reads_from_the_headers_or_the_payload_alone() {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", "j1");
        headers.insert(EVENTS_HEADER, "hopfuse.events.fe1");
        let address = JobAddress {
            job_id: "j1".into(),
            events: "hopfuse.events.fe1".into(),
        };
        assert_eq!(JobAddress::of(Some(&headers), b"not json"), Some(address));
        let deep = format!(
            r#"{{"spec": {}1{}, "job_id": "j2", "events": "e"}}"#,
            "[".repeat(5_000),
            "]".repeat(5_000)
        );
        assert_eq!(
            JobAddress::of(None, deep.as_bytes()),
            Some(JobAddress {
                job_id: "j2".into(),
                events: "e".into()
            })
        );
        assert_eq!(JobAddress::of(None, b"{\"job_id\": 1}"), None);
    }
}
