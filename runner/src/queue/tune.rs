//! A tune job on a GPU's warm worker: the search of [`crate::tune`] run by the GPU's
//! dispatcher, each candidate a job of its own on the worker within `--job-timeout`, the whole
//! search within the job's budget; each candidate's steps become the job's events, and the
//! report its result (`JobResult::tune`), with a status: `cancelled`, `passed` (a winner),
//! `fake` (the fake worker checked the candidates), `failed` (some ran, none passed) or `error`.

use super::{Job, JobResult, JobStage, JobStatus, Queue};
use crate::bench::WarmRuns;
use crate::engine::Progress;
use crate::tune::{self, TuneOptions, TuneReport};
use crate::warm::WarmWorker;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Queue {
    pub(super) async fn run_tune(
        &self,
        job: &Arc<Job>,
        gpu: usize,
        warm: &mut Option<WarmWorker>,
    ) -> JobResult {
        let queued_ms = job.elapsed_ms();
        let req = &job.spec.request;
        let budget_s = job.spec.tune.as_ref().map_or(0.0, |t| t.budget_s);
        let options = TuneOptions {
            file: req.file.clone(),
            source: req.source.clone(),
            sizes: req.sizes.clone(),
            budget: Duration::from_secs_f64(budget_s),
            iters: req.iters,
            warmup: req.warmup,
            seed: req.seed,
            documents: req.documents.clone(),
            cubin_cache: self.config.cubin_cache.clone(),
        };
        job.stage(JobStage::Compiling, Some(Progress::Lowering));
        let command = self.worker_command(gpu);
        let mut runs = WarmRuns {
            command: &command,
            timeout: self.config.timeout,
            warm,
        };
        let start = Instant::now();
        let report = tune::run(&options, &mut runs, &job.cancel, &mut |p| job.tune_step(p)).await;
        let mut r = match report {
            Err(message) => JobResult::empty(&job.id, JobStatus::Error, Some(message), queued_ms),
            Ok(report) => {
                let status = status(&report);
                let mut r = JobResult::empty(&job.id, status, Some(summary(&report)), queued_ms);
                r.fake = status == JobStatus::Fake;
                r.tune = Some(Box::new(report.to_wire()));
                r
            }
        };
        r.progress = vec![Progress::Lowering];
        r.worker_ms = start.elapsed().as_secs_f64() * 1e3;
        r
    }
}

/// A finished search's status.
fn status(report: &TuneReport) -> JobStatus {
    let ran_and_failed = report.trials.iter().any(|t| {
        matches!(&t.outcome, tune::TrialOutcome::Ran(crate::bench::RowOutcome::Measured(r)) if !r.passed)
    });
    if report.cancelled {
        JobStatus::Cancelled
    } else if report.winner.is_some() {
        JobStatus::Passed
    } else if report.checked_by_fake_worker() {
        JobStatus::Fake
    } else if ran_and_failed {
        JobStatus::Failed
    } else {
        JobStatus::Error
    }
}

/// One sentence: how many candidates, how long, and the winner (or why none).
fn summary(report: &TuneReport) -> String {
    let n = report.trials.len();
    let head = format!(
        "{n} candidate{} in {:.1} s{}",
        if n == 1 { "" } else { "s" },
        report.elapsed_s,
        if report.cancelled { " (cancelled)" } else { "" }
    );
    match report.winner {
        Some(w) => {
            let t = &report.trials[w];
            let gain = match &report.confirmation {
                Some(c) => format!(
                    "; {:.2}x the default's time, interleaved over {} launch pairs",
                    c.ratios.median, c.ratios.pairs
                ),
                None if w == 0 => "; the scheduler's own choice".to_string(),
                None => String::new(),
            };
            format!("{head}: the winner is #{} ({}){gain}", w + 1, t.knobs.describe())
        }
        None if report.checked_by_fake_worker() => format!(
            "{head}: the fake worker compiled and checked them; nothing was timed, so there is no winner"
        ),
        None => format!("{head}: no candidate was timed and passed validation"),
    }
}
