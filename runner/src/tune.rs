//! The tuner: the automatic scheduler's parameters searched on the GPU for one program and one
//! set of sizes, for `hopfuse tune` and the service's tune jobs (`POST /api/tune`, run on a
//! GPU's warm worker by the queue).
//!
//! Takes a program (its own schedule, if any, is set aside: the tuner searches the automatic
//! scheduler's parameters) and sizes. The candidates are [`hopfuse::auto_candidates`]'s, the
//! scheduler's own choice first. Each is compiled for the sizes on the host, all of them at
//! once on every core ([`compile_all`]: a candidate that does not lower is refused with the
//! compiler's message), then run one after the other through one warm worker as `hopfuse
//! bench` runs programs: validated against the float64 reference, timed with the bench's method
//! (warm-up, medians, the L2 flushed between memory-bound launches). The search stops at the
//! time budget, or after the candidate in progress when cancelled; the candidates not reached
//! are listed as such. Each candidate's steps are reported as they happen ([`TuneProgress`]:
//! compiled, refused, validated, timed, checked, not run). The fastest candidate that
//! passed validation wins; when it is not the default, the two are timed again interleaved,
//! launch pair by launch pair ([`Confirmation`]), so the gain is measured under one GPU state.
//! Emits a [`TuneReport`]: one [`Trial`] per candidate, the winner and the confirmation; its
//! wire form ([`TuneReport::to_wire`]) is a tune job's result.

use crate::bench::{RowOutcome, WarmRuns};
use crate::engine::{PairRatios, RunRequest, RunResult};
use crate::job_spec::JobSpec;
use crate::prepare::Prepared;
use crate::profile::ProfileLimits;
use crate::worker::WorkerJob;
use hopfuse::auto::{AutoSchedule, Knobs};
use hopfuse_api::tune::{
    TuneCandidate, TuneConfirmation, TuneOutcome, TuneProgress, TuneResult, TuneStep,
};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What the tuner searches and how it runs each candidate.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    /// The program's file name, for messages.
    pub file: String,
    pub source: String,
    pub sizes: BTreeMap<String, i64>,
    /// Wall time for the whole search, from the first candidate's compile: no candidate starts
    /// after it.
    pub budget: Duration,
    /// Each candidate's timed launches, warm-up and input seed, as the bench's.
    pub iters: u32,
    pub warmup: u32,
    pub seed: u64,
    /// Integer inputs filled with packed-document ids (`RunRequest::documents`).
    pub documents: BTreeMap<String, NonZeroU32>,
    pub cubin_cache: Option<PathBuf>,
}

/// One candidate and what became of it.
#[derive(Clone, Debug)]
pub struct Trial {
    pub knobs: Knobs,
    pub schedule: AutoSchedule,
    /// The program with this candidate's schedule.
    pub program: String,
    pub outcome: TrialOutcome,
}

#[derive(Clone, Debug)]
pub enum TrialOutcome {
    /// It did not lower for the sizes (the compiler's message).
    Refused(String),
    /// The budget was spent (or the search cancelled) before its turn.
    NotReached,
    /// Run on the worker: measured, compiled and checked by the fake worker, or not run (why).
    Ran(RowOutcome),
}

impl Trial {
    /// The measured result when it ran and passed validation.
    pub fn passed(&self) -> Option<&RunResult> {
        match &self.outcome {
            TrialOutcome::Ran(RowOutcome::Measured(r)) if r.passed => Some(r),
            _ => None,
        }
    }
}

/// The default and the winner timed again interleaved (B = the winner, A = the default).
#[derive(Clone, Debug)]
pub struct Confirmation {
    pub ratios: PairRatios,
}

#[derive(Clone, Debug)]
pub struct TuneReport {
    pub trials: Vec<Trial>,
    /// Index into `trials` of the fastest candidate that passed; None when none was timed.
    pub winner: Option<usize>,
    /// Set when the winner is not the default and both were timed again interleaved.
    pub confirmation: Option<Confirmation>,
    /// Seconds the search took.
    pub elapsed_s: f64,
    pub budget_s: f64,
    /// The search was cancelled: the candidates after the one in progress were not run.
    pub cancelled: bool,
}

impl TuneReport {
    /// The program with the winner's schedule, as a user would save it.
    pub fn winning_program(&self) -> Option<&str> {
        self.winner.map(|w| self.trials[w].program.as_str())
    }

    /// Whether the fake worker compiled and checked some candidate (then nothing is timed and
    /// there is no winner, but the search did what it could).
    pub fn checked_by_fake_worker(&self) -> bool {
        self.trials
            .iter()
            .any(|t| matches!(t.outcome, TrialOutcome::Ran(RowOutcome::Fake)))
    }

    /// The wire form of the report (`JobResult::tune`), with the table [`render`] prints.
    pub fn to_wire(&self) -> TuneResult {
        let not_reached = if self.cancelled {
            "the job was cancelled"
        } else {
            "the budget was spent"
        };
        TuneResult {
            candidates: self
                .trials
                .iter()
                .map(|t| TuneCandidate {
                    parameters: t.knobs.describe(),
                    schedule: t.schedule.block(),
                    reason: t.schedule.reason.clone(),
                    outcome: match &t.outcome {
                        TrialOutcome::Refused(why) => TuneOutcome::Refused { why: why.clone() },
                        TrialOutcome::NotReached => TuneOutcome::NotReached {
                            why: not_reached.into(),
                        },
                        TrialOutcome::Ran(RowOutcome::Fake) => TuneOutcome::Checked,
                        TrialOutcome::Ran(RowOutcome::NotRun(why)) => {
                            TuneOutcome::NotRun { why: why.clone() }
                        }
                        TrialOutcome::Ran(RowOutcome::Measured(r)) => TuneOutcome::Measured {
                            median_us: r.timing.median_us,
                            gbps: r.gbps,
                            tflops: r.tflops,
                            fraction_of_copy: r.fraction_of_copy,
                            fraction_of_cublas: r.fraction_of_cublas,
                            passed: r.passed,
                        },
                    },
                })
                .collect(),
            winner: self.winner,
            winner_schedule: self.winner.map(|w| self.trials[w].schedule.block()),
            confirmation: self.confirmation.as_ref().map(|c| TuneConfirmation {
                winner_over_default_median: c.ratios.median,
                winner_over_default_range: [c.ratios.min, c.ratios.max],
                pairs: c.ratios.pairs,
            }),
            table: render(self),
            elapsed_s: self.elapsed_s,
            budget_s: self.budget_s,
            cancelled: self.cancelled,
        }
    }
}

/// Why a program has no candidates.
#[derive(Clone, Debug)]
pub enum NoCandidates {
    /// It does not parse or build.
    Program(hopfuse::Diagnostics),
    /// No automatic scheduler takes the fusion: why.
    Declined(String),
}

impl NoCandidates {
    /// The message for a terminal, with the program's `file` name.
    pub fn render(&self, source: &str, file: &str) -> String {
        match self {
            NoCandidates::Program(d) => d.render(source, file),
            NoCandidates::Declined(why) => {
                format!("no automatic scheduler takes the fusion: {why}")
            }
        }
    }
}

/// The candidates of a program for its sizes: the program with each candidate's schedule, the
/// scheduler's own choice first.
pub fn candidates(source: &str, sizes: &BTreeMap<String, i64>) -> Result<Vec<Trial>, NoCandidates> {
    let candidates = hopfuse::auto_candidates(source, Some(sizes))
        .map_err(NoCandidates::Program)?
        .map_err(|declined| NoCandidates::Declined(declined.reason))?;
    let base = hopfuse::examples::without_schedule(source);
    Ok(candidates
        .into_iter()
        .map(|c| Trial {
            program: format!("{base}{}", c.schedule.block()),
            knobs: c.knobs,
            schedule: c.schedule,
            outcome: TrialOutcome::NotReached,
        })
        .collect())
}

/// Runs the search on `runs`' warm worker; `progress` gets each candidate's steps. Setting
/// `cancel` stops it after the candidate in progress (the rest are not reached, and the default
/// is not timed again). Errors are the program's own, rendered for the terminal.
pub async fn run(
    options: &TuneOptions,
    runs: &mut WarmRuns<'_>,
    cancel: &AtomicBool,
    progress: &mut (dyn FnMut(TuneProgress) + Send),
) -> Result<TuneReport, String> {
    let started = Instant::now();
    let mut trials = candidates(&options.source, &options.sizes)
        .map_err(|e| e.render(&options.source, &options.file))?;
    let of = trials.len();
    let requests: Vec<RunRequest> = trials
        .iter()
        .map(|t| request(options, t.program.clone()))
        .collect();
    let compiled = {
        let requests = requests.clone();
        tokio::task::spawn_blocking(move || compile_all(&requests))
            .await
            .map_err(|e| format!("compiling the candidates failed: {e}"))?
    };
    // Every candidate refused: the sizes (or the program) are wrong for all of them; say it once.
    if let Some(Err(first)) = compiled
        .first()
        .filter(|_| compiled.iter().all(Result::is_err))
    {
        return Err(format!(
            "{}: no candidate compiles for {}: {first}",
            options.file,
            crate::sizes::label(&options.sizes)
        ));
    }
    let mut say = |i: usize, trials: &[Trial], step: TuneStep| {
        progress(TuneProgress {
            candidate: i + 1,
            of,
            parameters: trials[i].knobs.describe(),
            step,
        })
    };
    for (i, c) in compiled.iter().enumerate() {
        let step = match c {
            Ok(_) => TuneStep::Compiled,
            Err(why) => {
                trials[i].outcome = TrialOutcome::Refused(why.clone());
                TuneStep::Refused { why: why.clone() }
            }
        };
        say(i, &trials, step);
    }

    let mut cancelled = false;
    for (i, (req, compiled)) in requests.iter().zip(compiled).enumerate() {
        let Ok(prepared) = compiled else { continue };
        if cancel.load(Ordering::SeqCst) {
            cancelled = true;
            break;
        }
        if started.elapsed() >= options.budget {
            break;
        }
        let mut spec = JobSpec::single(req.clone());
        spec.prepared = Some(prepared);
        let outcome = runs.run_one(&worker_job(options, spec)).await;
        for step in steps(&outcome) {
            say(i, &trials, step);
        }
        trials[i].outcome = TrialOutcome::Ran(outcome);
    }
    // A cancel that came during the last candidate also skips the confirmation.
    cancelled |= cancel.load(Ordering::SeqCst);

    let winner = trials
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.passed().map(|r| (i, r.timing.median_us)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i);
    let mut confirmation = None;
    if let Some(w) = winner.filter(|&w| w != 0 && trials[0].passed().is_some() && !cancelled) {
        let mut spec = JobSpec::single(requests[0].clone());
        spec.request_b = Some(requests[w].clone());
        spec.same_inputs = Some(true);
        confirmation = runs
            .compare(&worker_job(options, spec))
            .await
            .map(|ratios| Confirmation { ratios });
    }
    Ok(TuneReport {
        trials,
        winner,
        confirmation,
        elapsed_s: started.elapsed().as_secs_f64(),
        budget_s: options.budget.as_secs_f64(),
        cancelled,
    })
}

/// The steps a candidate's run reports: validated then timed, checked, or not run.
fn steps(outcome: &RowOutcome) -> Vec<TuneStep> {
    match outcome {
        RowOutcome::Measured(r) if r.passed => vec![
            TuneStep::Validated { passed: true },
            TuneStep::Timed {
                median_us: r.timing.median_us,
            },
        ],
        RowOutcome::Measured(_) => vec![TuneStep::Validated { passed: false }],
        RowOutcome::Fake => vec![TuneStep::Checked],
        RowOutcome::NotRun(why) => vec![TuneStep::NotRun { why: why.clone() }],
    }
}

/// One line for a terminal: `tune: 3/12 (threads=256): timed, 41.2 us`.
pub fn describe(p: &TuneProgress) -> String {
    let what = match &p.step {
        TuneStep::Compiled => "compiled".to_string(),
        TuneStep::Refused { why } => format!("refused: {why}"),
        TuneStep::Validated { passed: true } => "validated".to_string(),
        TuneStep::Validated { passed: false } => "FAILED validation".to_string(),
        TuneStep::Timed { median_us } => format!("timed, {median_us:.1} us"),
        TuneStep::Checked => "compiled and checked (fake worker: nothing timed)".to_string(),
        TuneStep::NotRun { why } => format!("not run: {why}"),
    };
    format!("tune: {}/{} ({}): {what}", p.candidate, p.of, p.parameters)
}

fn worker_job(options: &TuneOptions, spec: JobSpec) -> WorkerJob {
    WorkerJob {
        spec,
        cubin_cache: options.cubin_cache.clone(),
        profile_limits: ProfileLimits::default(),
    }
}

/// The run request of one candidate program, as the bench makes them.
fn request(options: &TuneOptions, source: String) -> RunRequest {
    RunRequest {
        file: options.file.clone(),
        source,
        sizes: options.sizes.clone(),
        scalars: Default::default(),
        iters: options.iters,
        warmup: options.warmup,
        seed: options.seed,
        index: None,
        copy_ceiling: true,
        peers: false,
        clock: false,
        generic: false,
        documents: options.documents.clone(),
    }
}

/// Each request compiled for its sizes as a run compiles it ([`crate::prepare::prepare`]), on
/// every core; an error is the first line of its message.
pub fn compile_all(requests: &[RunRequest]) -> Vec<Result<Prepared, String>> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(requests.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<Prepared, String>>>> = requests
        .iter()
        .map(|_| std::sync::Mutex::new(None))
        .collect();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(req) = requests.get(i) else { break };
                let r = crate::prepare::prepare(req)
                    .map(|(c, setup)| Prepared::new(&c, setup))
                    .map_err(|e| e.message.lines().next().unwrap_or_default().to_string());
                *results[i].lock().expect("not poisoned") = Some(r);
            });
        }
    });
    results
        .into_iter()
        .map(|r| {
            r.into_inner()
                .expect("not poisoned")
                .expect("every request compiled")
        })
        .collect()
}

/// The Markdown table of the trials, then the winner.
pub fn render(report: &TuneReport) -> String {
    let mut s = String::new();
    let default_us = report
        .trials
        .first()
        .and_then(|t| t.passed())
        .map(|r| r.timing.median_us);
    s.push_str(
        "| # | parameters | time (us) | throughput | of ceiling | vs default | validation |\n",
    );
    s.push_str("| --- | --- | --- | --- | --- | --- | --- |\n");
    for (i, t) in report.trials.iter().enumerate() {
        let mark = if Some(i) == report.winner {
            " (winner)"
        } else {
            ""
        };
        let cells = match &t.outcome {
            TrialOutcome::Refused(why) => format!("| | | | | refused: {} |", cell(why)),
            TrialOutcome::NotReached => {
                "| | | | | not reached (the budget was spent) |".to_string()
            }
            TrialOutcome::Ran(RowOutcome::Fake) => {
                "| | | | | compiled and checked (fake worker: nothing timed) |".to_string()
            }
            TrialOutcome::Ran(RowOutcome::NotRun(why)) => format!("| | | | | {} |", cell(why)),
            // A product's rate and cuBLAS; otherwise bandwidth and the copy.
            TrialOutcome::Ran(RowOutcome::Measured(r)) => format!(
                "| {:.1} | {} | {} | {} | {} |",
                r.timing.median_us,
                r.tflops.map_or_else(
                    || format!("{:.0} GB/s", r.gbps),
                    |t| format!("{t:.0} TFLOP/s")
                ),
                match (r.fraction_of_cublas, r.fraction_of_copy) {
                    (Some(f), _) => format!("{:.1}% of cuBLAS", f * 100.0),
                    (None, Some(f)) => format!("{:.1}% of copy", f * 100.0),
                    (None, None) => String::new(),
                },
                default_us.map_or(String::new(), |d| format!("x{:.2}", d / r.timing.median_us)),
                if r.passed { "PASS" } else { "FAIL" },
            ),
        };
        let _ = writeln!(s, "| {}{mark} | {} {cells}", i + 1, t.knobs.describe());
    }
    match report.winner {
        Some(w) => {
            let t = &report.trials[w];
            let _ = writeln!(
                s,
                "\nwinner: #{} ({}): {}",
                w + 1,
                t.knobs.describe(),
                t.schedule.reason
            );
            if let Some(c) = &report.confirmation {
                let _ = writeln!(
                    s,
                    "interleaved with the default over {} launch pairs: winner / default time median {:.3} (min {:.3}, max {:.3})",
                    c.ratios.pairs, c.ratios.median, c.ratios.min, c.ratios.max
                );
            }
        }
        None => s.push_str("\nno winner: no candidate was timed and passed validation\n"),
    }
    if report.cancelled {
        s.push_str("cancelled: the candidates after the one in progress were not run\n");
    }
    let _ = writeln!(s, "searched in {:.1} s", report.elapsed_s);
    s
}

/// A table cell: one line, no pipes.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(source: &str) -> RunRequest {
        RunRequest {
            file: "t.hf".into(),
            source: source.into(),
            sizes: [("M".to_string(), 1000), ("N".to_string(), 1000)].into(),
            scalars: Default::default(),
            iters: 1,
            warmup: 0,
            seed: 0,
            index: None,
            copy_ceiling: false,
            peers: false,
            clock: false,
            generic: false,
            documents: Default::default(),
        }
    }

    #[test]
    fn candidates_compile_on_every_core_and_a_bad_one_is_refused_with_its_message() {
        let good = "fusion add {\n  input a: f32[M, N]\n  c = a * 2.0\n  output c\n}\n";
        let bad = "fusion add {\n  input a: f32[M, N]\n  c = a * 2.0\n  output c\n}\nschedule {\n  c.split(7, 4)\n}\n";
        let out = compile_all(&[req(good), req(bad), req(good)]);
        assert!(out[0].is_ok() && out[2].is_ok());
        let e = out[1].as_ref().unwrap_err();
        assert!(e.contains("split"), "{e}");
        assert_eq!(out[0].as_ref().unwrap().cuda, out[2].as_ref().unwrap().cuda);
    }
}
