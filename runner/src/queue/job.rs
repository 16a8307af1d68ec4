//! One job: its id, client and spec, and its events so far (a broadcast for the rest); the
//! first event with a result ends it, and later ones are dropped.

use super::{JobEvent, JobResult, JobSpec, JobStage};
use crate::engine::Progress;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::broadcast;

pub struct Job {
    pub id: String,
    pub client: String,
    pub spec: JobSpec,
    pub(super) submitted: Instant,
    pub(super) state: Mutex<JobState>,
}

pub(super) struct JobState {
    pub(super) events: Vec<JobEvent>,
    pub(super) tx: broadcast::Sender<JobEvent>,
    pub(super) result: Option<Arc<JobResult>>,
    /// Claimed by the one [`Queue::finish`](super::Queue) that stores and announces its result.
    pub(super) finishing: bool,
}

impl Job {
    pub(crate) fn elapsed_ms(&self) -> f64 {
        self.submitted.elapsed().as_secs_f64() * 1e3
    }

    pub(super) fn push(&self, event: JobEvent) {
        let mut st = self.state.lock().expect("job state lock");
        if st.result.is_some() {
            return;
        }
        if let Some(r) = &event.result {
            st.result = Some(r.clone());
        }
        st.events.push(event.clone());
        // No receivers is fine: nobody is watching.
        let _ = st.tx.send(event);
    }

    pub(crate) fn stage(&self, stage: JobStage, step: Option<Progress>) {
        self.push(JobEvent {
            stage,
            step,
            position: None,
            elapsed_ms: self.elapsed_ms(),
            result: None,
        });
    }

    /// Claims the job's finishing for the caller: false when it has a result or another caller
    /// is finishing it (a job's result is stored and announced once).
    pub(super) fn claim_finish(&self) -> bool {
        let mut st = self.state.lock().expect("job state lock");
        let free = st.result.is_none() && !st.finishing;
        st.finishing = true;
        free
    }

    pub fn result(&self) -> Option<Arc<JobResult>> {
        self.state.lock().expect("job state lock").result.clone()
    }

    /// The events so far and a receiver for the rest (atomically: none is missed or repeated).
    pub fn subscribe(&self) -> (Vec<JobEvent>, broadcast::Receiver<JobEvent>) {
        let st = self.state.lock().expect("job state lock");
        (st.events.clone(), st.tx.subscribe())
    }
}
