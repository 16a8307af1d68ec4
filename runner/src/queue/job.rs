//! One job: its id, client and spec, its events so far (a broadcast for the rest), and whether
//! it was cancelled; the first event with a result ends it, and later ones are dropped.

use super::{JobEvent, JobResult, JobSpec, JobStage};
use crate::engine::Progress;
use hopfuse_api::tune::{TuneProgress, TuneStep};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::broadcast;

pub struct Job {
    pub id: String,
    pub client: String,
    pub spec: JobSpec,
    pub(super) submitted: Instant,
    pub(super) state: Mutex<JobState>,
    /// [`QUEUED`], [`TAKEN`] by a dispatcher, or [`CANCELLED`] before one took it.
    pub(super) turn: AtomicU8,
    /// Set by a cancel: a tune job stops after the candidate in progress.
    pub(super) cancel: AtomicBool,
}

/// [`Job::turn`]: waiting in the queue.
pub(super) const QUEUED: u8 = 0;
/// [`Job::turn`]: a dispatcher took it to run.
pub(super) const TAKEN: u8 = 1;
/// [`Job::turn`]: cancelled while it waited; no dispatcher runs it.
pub(super) const CANCELLED: u8 = 2;

pub(super) struct JobState {
    pub(super) events: Vec<JobEvent>,
    pub(super) tx: broadcast::Sender<JobEvent>,
    pub(super) result: Option<Arc<JobResult>>,
    /// Claimed by the one [`Queue::finish`](super::Queue) that stores and announces its result.
    pub(super) finishing: bool,
}

impl Job {
    /// A job just submitted: no events yet, not cancelled.
    pub(super) fn new(id: String, client: &str, spec: JobSpec) -> Job {
        let (tx, _) = broadcast::channel(256);
        Job {
            id,
            client: client.to_string(),
            spec,
            submitted: Instant::now(),
            state: Mutex::new(JobState {
                events: Vec::new(),
                tx,
                result: None,
                finishing: false,
            }),
            turn: AtomicU8::new(QUEUED),
            cancel: AtomicBool::new(false),
        }
    }

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
            tune: None,
        });
    }

    /// Takes the job for a dispatcher to run: false when it was cancelled while it waited.
    pub(super) fn take(&self) -> bool {
        self.turn
            .compare_exchange(QUEUED, TAKEN, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Cancels the job: true when it was still waiting (then no dispatcher will run it and the
    /// caller ends it); false when a dispatcher has it (a tune job then stops after the
    /// candidate in progress).
    pub(super) fn cancel(&self) -> bool {
        self.cancel.store(true, Ordering::SeqCst);
        self.turn
            .compare_exchange(QUEUED, CANCELLED, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// A tune job's candidate step, as an event of the stage it belongs to.
    pub(super) fn tune_step(&self, progress: TuneProgress) {
        let stage = match progress.step {
            TuneStep::Compiled | TuneStep::Refused { .. } => JobStage::Compiling,
            TuneStep::Validated { .. } => JobStage::Validating,
            TuneStep::Timed { .. } | TuneStep::Checked | TuneStep::NotRun { .. } => {
                JobStage::Running
            }
        };
        self.push(JobEvent {
            stage,
            step: None,
            position: None,
            elapsed_ms: self.elapsed_ms(),
            result: None,
            tune: Some(progress),
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
