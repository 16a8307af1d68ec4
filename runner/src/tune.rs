//! `hopfuse tune`: the automatic scheduler's parameters searched on the GPU for one program and
//! one set of sizes.
//!
//! Takes a program (its own schedule, if any, is set aside: the tuner searches the automatic
//! scheduler's parameters) and sizes. The candidates are [`hopfuse::auto_candidates`]'s, the
//! scheduler's own choice first. Each is compiled for the sizes on the host, all of them at
//! once on every core ([`compile_all`]: a candidate that does not lower is refused with the
//! compiler's message), then run one after the other through one warm worker as `hopfuse
//! bench` runs programs: validated against the float64 reference, timed with the bench's method
//! (warm-up, medians, the L2 flushed between memory-bound launches). The search stops at the
//! time budget; the candidates not reached are listed as such. The fastest candidate that
//! passed validation wins; when it is not the default, the two are timed again interleaved,
//! launch pair by launch pair ([`Confirmation`]), so the gain is measured under one GPU state.
//! Emits a [`TuneReport`]: one [`Trial`] per candidate, the winner and the confirmation.

use crate::bench::{self, BenchOptions, RowOutcome};
use crate::engine::{PairRatios, RunRequest, RunResult};
use crate::job_spec::JobSpec;
use crate::prepare::Prepared;
use crate::profile::ProfileLimits;
use crate::warm::{JobEnd, WarmWorker};
use crate::worker::{WorkerEvent, WorkerJob};
use hopfuse::auto::{AutoSchedule, Knobs};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

/// What `hopfuse tune` searches and how it runs each candidate.
pub struct TuneOptions {
    /// The program's file name, for messages.
    pub file: String,
    pub source: String,
    pub sizes: BTreeMap<String, i64>,
    /// Wall time for the whole search, from the first candidate's compile.
    pub budget: Duration,
    /// Iterations, warm-up, seed, per-run timeout, worker and CUBIN cache, as the bench's.
    pub bench: BenchOptions,
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
    /// The budget was spent before its turn.
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
}

impl TuneReport {
    /// The program with the winner's schedule, as a user would save it.
    pub fn winning_program(&self) -> Option<&str> {
        self.winner.map(|w| self.trials[w].program.as_str())
    }
}

/// Runs the search. Errors are the program's own (it does not parse or build, or no scheduler
/// takes it), rendered for the terminal.
pub async fn run(
    options: &TuneOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<TuneReport, String> {
    let started = Instant::now();
    let candidates = hopfuse::auto_candidates(&options.source, Some(&options.sizes))
        .map_err(|d| d.render(&options.source, &options.file))?
        .map_err(|declined| {
            format!(
                "no automatic scheduler takes the fusion: {}",
                declined.reason
            )
        })?;
    let base = hopfuse::examples::without_schedule(&options.source);
    let requests: Vec<RunRequest> = candidates
        .iter()
        .map(|c| request(options, format!("{base}{}", c.schedule.block())))
        .collect();
    progress(&format!(
        "tune: {} candidates, compiling on the host",
        candidates.len()
    ));
    let compiled = compile_all(&requests);
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
    let mut trials: Vec<Trial> = candidates
        .into_iter()
        .zip(&requests)
        .zip(&compiled)
        .map(|((c, req), compiled)| Trial {
            knobs: c.knobs,
            schedule: c.schedule,
            program: req.source.clone(),
            outcome: match compiled {
                Ok(_) => TrialOutcome::NotReached,
                Err(e) => TrialOutcome::Refused(e.clone()),
            },
        })
        .collect();

    let mut warm: Option<WarmWorker> = None;
    for (i, (req, compiled)) in requests.iter().zip(compiled).enumerate() {
        let Ok(prepared) = compiled else { continue };
        if started.elapsed() >= options.budget {
            break;
        }
        let mut spec = JobSpec::single(req.clone());
        spec.prepared = Some(prepared);
        let job = WorkerJob {
            spec,
            cubin_cache: options.bench.cubin_cache.clone(),
            profile_limits: ProfileLimits::default(),
        };
        let outcome = bench::run_one(&options.bench, &mut warm, &job).await;
        progress(&format!(
            "tune: {} ({}) done",
            i + 1,
            trials[i].knobs.describe()
        ));
        trials[i].outcome = TrialOutcome::Ran(outcome);
    }

    let winner = trials
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.passed().map(|r| (i, r.timing.median_us)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i);
    let mut confirmation = None;
    if let Some(w) = winner.filter(|&w| w != 0 && trials[0].passed().is_some()) {
        progress("tune: the winner and the default timed again, interleaved");
        let mut spec = JobSpec::single(requests[0].clone());
        spec.request_b = Some(requests[w].clone());
        spec.same_inputs = Some(true);
        let job = WorkerJob {
            spec,
            cubin_cache: options.bench.cubin_cache.clone(),
            profile_limits: ProfileLimits::default(),
        };
        confirmation = confirm(&options.bench, &mut warm, &job).await;
    }
    if let Some(mut w) = warm {
        w.kill().await;
    }
    Ok(TuneReport {
        trials,
        winner,
        confirmation,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

/// The run request of one candidate program, as the bench makes them.
fn request(options: &TuneOptions, source: String) -> RunRequest {
    RunRequest {
        file: options.file.clone(),
        source,
        sizes: options.sizes.clone(),
        scalars: Default::default(),
        iters: options.bench.iters,
        warmup: options.bench.warmup,
        seed: options.bench.seed,
        index: None,
        copy_ceiling: true,
        peers: false,
        clock: false,
        generic: false,
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

/// Runs an A/B job and returns its per-pair ratios (None when either side did not run).
async fn confirm(
    options: &BenchOptions,
    warm: &mut Option<WarmWorker>,
    job: &WorkerJob,
) -> Option<Confirmation> {
    let w = bench::ensure_worker(options, warm).await.ok()?;
    let mut ratios = None;
    let end = w
        .run(job, options.timeout, &mut |e| {
            if let WorkerEvent::Comparison { ratios: r } = e {
                ratios = Some(r.clone());
            }
        })
        .await;
    if !matches!(end, JobEnd::Done { exit: None }) {
        w.kill().await;
        *warm = None;
    }
    ratios.map(|ratios| Confirmation { ratios })
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
