//! Admission counted by RAII: the queue's and each client's counts ([`Admission`]) change only
//! through a [`QueueSlot`] (one increment, one decrement on drop); a queued job travels as a
//! [`Ticket`] that owns its slot and, dropped without a result, ends its job with one; and
//! [`Running`] counts a job as running while it lives.

use super::{Job, JobEvent, JobResult, JobStage, JobStatus};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The queue's counts: jobs waiting or running in all, and per client. Only [`QueueSlot`]s
/// change them, so each increment has exactly one decrement (its drop).
#[derive(Default)]
pub(super) struct Admission {
    /// Waiting + running.
    pub(super) pending: AtomicUsize,
    /// Waiting + running per client (clients with none are removed).
    pub(super) per_client: Mutex<HashMap<String, usize>>,
}

/// One job's place in the queue and in its client's share; released when dropped.
pub struct QueueSlot {
    admission: Arc<Admission>,
    client: String,
}

impl Admission {
    /// Takes a place for `client` unless the client's cap or the queue's cap is reached; on
    /// success also returns how many jobs are ahead.
    pub(super) fn admit(
        self: &Arc<Self>,
        client: &str,
        cap: usize,
        client_cap: usize,
    ) -> Result<(QueueSlot, usize), (bool, usize)> {
        let mut per_client = self.per_client.lock().expect("per-client lock");
        let mine = per_client.get(client).copied().unwrap_or(0);
        if client_cap > 0 && mine >= client_cap {
            return Err((true, mine));
        }
        let ahead = self
            .pending
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < cap).then_some(n + 1)
            })
            .map_err(|n| (false, n))?;
        *per_client.entry(client.to_string()).or_insert(0) += 1;
        Ok((
            QueueSlot {
                admission: self.clone(),
                client: client.to_string(),
            },
            ahead,
        ))
    }

    pub(super) fn of_client(&self, client: &str) -> usize {
        let per_client = self.per_client.lock().expect("per-client lock");
        per_client.get(client).copied().unwrap_or(0)
    }
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        let mut per_client = self.admission.per_client.lock().expect("per-client lock");
        if let Some(n) = per_client.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                per_client.remove(&self.client);
            }
        }
        self.admission.pending.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A queued job on its way to (and in the hands of) a dispatcher. Dropping it releases the
/// job's [`QueueSlot`] and, when the job has no result yet (it was never run: the service is
/// shutting down, or its dispatcher died), ends it with an `error` result so that nobody
/// waits on it forever.
pub struct Ticket {
    pub(super) job: Arc<Job>,
    pub(super) _slot: QueueSlot,
}

impl Ticket {
    pub fn job(&self) -> &Arc<Job> {
        &self.job
    }
}

/// The message of a job that ended without being run.
pub const NOT_RUN_MESSAGE: &str =
    "the job was not run: the service is shutting down (or its dispatcher stopped)";

impl Drop for Ticket {
    fn drop(&mut self) {
        // Unless someone else ends it (the dispatcher, a cancel, the service's stop).
        if self.job.claim_finish() {
            let r = JobResult::empty(
                &self.job.id,
                JobStatus::Error,
                Some(NOT_RUN_MESSAGE.to_string()),
                self.job.elapsed_ms(),
            );
            self.job.push(JobEvent {
                stage: JobStage::Done,
                step: None,
                position: None,
                elapsed_ms: self.job.elapsed_ms(),
                result: Some(Arc::new(r)),
                tune: None,
            });
        }
    }
}

/// Counts a job as running while it lives.
pub(super) struct Running<'a>(&'a AtomicUsize);

impl<'a> Running<'a> {
    pub(super) fn start(count: &'a AtomicUsize) -> Running<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Running(count)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
