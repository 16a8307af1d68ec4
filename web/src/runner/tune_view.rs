//! What the Tune section shows of a tune job (`POST /api/tune`, `api::tune`): a progress line
//! from its events' `tune` steps while it runs, and its `done` event as a [`TuneView`]: the
//! status and the service's sentence, one [`TuneRow`] per candidate (the winner marked) with
//! the schedule block "Use" puts in the editor, and the winner's schedule.

use hopfuse_api::job::{JobEvent, JobStatus};
use hopfuse_api::tune::{TuneOutcome, TuneProgress, TuneResult, TuneStep};

/// A finished tune job.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneView {
    pub status: JobStatus,
    /// The service's sentence (how many candidates, the winner, or what went wrong).
    pub message: String,
    pub rows: Vec<TuneRow>,
    /// The winner's schedule block, for "Use the winner's schedule".
    pub winner_schedule: Option<String>,
    /// The winner against the default, interleaved: `winner / default time 0.84 (0.80-0.88)
    /// over 100 launch pairs`.
    pub confirmation: Option<String>,
    /// The table as `hopfuse tune` prints it (Markdown), for copying.
    pub table: String,
}

/// One candidate of a [`TuneView`].
#[derive(Clone, Debug, PartialEq)]
pub struct TuneRow {
    /// 1-based, as the events and the table number them.
    pub number: usize,
    pub parameters: String,
    /// What became of it, in words.
    pub outcome: String,
    /// The median time (`41.2 us`), or empty.
    pub time: String,
    /// GB/s or TFLOP/s with the fraction of its ceiling, or empty.
    pub throughput: String,
    /// The default's time over this one's (`x1.18`), or empty.
    pub vs_default: String,
    pub winner: bool,
    /// Its schedule block when it can be used: it passed validation, or the fake worker checked
    /// it (then nothing was timed, but it compiles for the sizes).
    pub schedule: Option<String>,
    /// `passed`, `failed`, `refused`, `checked` or `skipped`: the row's CSS class.
    pub class: &'static str,
}

/// A tune job's `done` event as the Tune section shows it; why not when it is not one.
pub fn parse_tune_done(data: &str) -> Result<TuneView, String> {
    let event: JobEvent = super::read::from_str(data)
        .map_err(|e| format!("the runner's done event is not one this page reads: {e}"))?;
    let job = event
        .result
        .ok_or("the runner's done event holds no result")?;
    let message = job.message.clone().unwrap_or_default();
    Ok(match &job.tune {
        Some(tune) => view(job.status, message, tune),
        // Ended before a search: a program error, a job cancelled while it waited.
        None => TuneView {
            status: job.status,
            message,
            rows: Vec::new(),
            winner_schedule: None,
            confirmation: None,
            table: String::new(),
        },
    })
}

fn view(status: JobStatus, message: String, tune: &TuneResult) -> TuneView {
    let default_us = tune.candidates.first().and_then(|c| c.outcome.passed_us());
    let rows = tune
        .candidates
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut row = TuneRow {
                number: i + 1,
                parameters: if c.parameters.is_empty() {
                    "the scheduler's choice".to_string()
                } else {
                    c.parameters.clone()
                },
                outcome: String::new(),
                time: String::new(),
                throughput: String::new(),
                vs_default: String::new(),
                winner: tune.winner == Some(i),
                schedule: None,
                class: "skipped",
            };
            match &c.outcome {
                TuneOutcome::Refused { why } => {
                    row.outcome = format!("refused: {why}");
                    row.class = "refused";
                }
                TuneOutcome::NotReached { why } => row.outcome = format!("not reached: {why}"),
                TuneOutcome::NotRun { why } => row.outcome = format!("not run: {why}"),
                TuneOutcome::Checked => {
                    row.outcome = "compiled and checked (fake runner: not timed)".to_string();
                    row.schedule = Some(c.schedule.clone());
                    row.class = "checked";
                }
                TuneOutcome::Measured {
                    median_us,
                    gbps,
                    tflops,
                    fraction_of_copy,
                    fraction_of_cublas,
                    passed,
                } => {
                    row.time = format!("{median_us:.1} us");
                    let rate = match tflops {
                        Some(t) => format!("{t:.0} TFLOP/s"),
                        None => format!("{gbps:.0} GB/s"),
                    };
                    row.throughput = match (fraction_of_cublas, fraction_of_copy) {
                        (Some(f), _) => format!("{rate} ({:.1}% of cuBLAS)", f * 100.0),
                        (None, Some(f)) => format!("{rate} ({:.1}% of copy)", f * 100.0),
                        (None, None) => rate,
                    };
                    if *passed {
                        row.outcome = "passed".to_string();
                        row.class = "passed";
                        row.schedule = Some(c.schedule.clone());
                        if let Some(d) = default_us {
                            row.vs_default = format!("x{:.2}", d / median_us);
                        }
                    } else {
                        row.outcome = "FAILED validation".to_string();
                        row.class = "failed";
                    }
                }
            }
            row
        })
        .collect();
    TuneView {
        status,
        message,
        rows,
        winner_schedule: tune.winner_schedule.clone(),
        confirmation: tune.confirmation.as_ref().map(|c| {
            format!(
                "winner / default time {:.3} ({:.3}-{:.3}) over {} interleaved launch pairs",
                c.winner_over_default_median,
                c.winner_over_default_range[0],
                c.winner_over_default_range[1],
                c.pairs
            )
        }),
        table: tune.table.clone(),
    }
}

/// The latest step of a running tune job: `candidate 3 of 12 (threads=256): timed, 41.2 us`.
pub fn progress_line(steps: &[TuneProgress]) -> String {
    let Some(p) = steps.last() else {
        return "compiling the candidates on the runner".to_string();
    };
    let what = match &p.step {
        TuneStep::Compiled => "compiled".to_string(),
        TuneStep::Refused { why } => format!("refused ({why})"),
        TuneStep::Validated { passed: true } => "validated".to_string(),
        TuneStep::Validated { passed: false } => "failed validation".to_string(),
        TuneStep::Timed { median_us } => format!("timed, {median_us:.1} us"),
        TuneStep::Checked => "checked (fake runner)".to_string(),
        TuneStep::NotRun { why } => format!("not run ({why})"),
    };
    let parameters = if p.parameters.is_empty() {
        String::new()
    } else {
        format!(" ({})", p.parameters)
    };
    format!("candidate {} of {}{parameters}: {what}", p.candidate, p.of)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn done(result: Value) -> String {
        json!({"stage": "done", "elapsed_ms": 10.0, "result": result}).to_string()
    }

    fn candidate(parameters: &str, block: &str, outcome: Value) -> Value {
        let mut c = outcome;
        c["parameters"] = json!(parameters);
        c["schedule"] = json!(block);
        c["reason"] = json!("the pointwise scheduler");
        c
    }

    fn measured(us: f64, passed: bool) -> Value {
        json!({"outcome": "measured", "median_us": us, "gbps": 2000.0,
               "fraction_of_copy": 0.7, "passed": passed})
    }

    fn job(status: &str, tune: Value) -> Value {
        json!({"job_id": "j1", "status": status, "fake": status == "fake",
               "progress": ["lowering"], "message": "the service's sentence",
               "queued_ms": 0.0, "worker_ms": 3000.0, "tune": tune})
    }

    #[test]
    fn a_finished_tune_has_a_row_per_candidate_and_the_winner_marked() {
        let tune = json!({
            "candidates": [
                candidate("", "schedule {\n  a\n}\n", measured(20.0, true)),
                candidate("threads=256", "schedule {\n  b\n}\n", measured(10.0, true)),
                candidate("threads=64", "schedule {\n  c\n}\n", measured(5.0, false)),
                candidate("threads=1024", "s", json!({"outcome": "refused", "why": "too many registers"})),
                candidate("threads=32", "s", json!({"outcome": "not_reached", "why": "the budget was spent"})),
            ],
            "winner": 1, "winner_schedule": "schedule {\n  b\n}\n",
            "confirmation": {"winner_over_default_median": 0.5,
                             "winner_over_default_range": [0.45, 0.55], "pairs": 100},
            "table": "| # |", "elapsed_s": 3.0, "budget_s": 60.0, "cancelled": false
        });
        let v = parse_tune_done(&done(job("passed", tune))).unwrap();
        assert_eq!(v.status, JobStatus::Passed);
        assert_eq!(v.message, "the service's sentence");
        assert_eq!(v.rows.len(), 5);
        let r = &v.rows;
        assert_eq!(r[0].parameters, "the scheduler's choice");
        assert_eq!((r[0].winner, r[1].winner), (false, true));
        assert_eq!(r[1].time, "10.0 us");
        assert_eq!(r[1].throughput, "2000 GB/s (70.0% of copy)");
        assert_eq!(r[1].vs_default, "x2.00");
        assert_eq!(r[1].schedule.as_deref(), Some("schedule {\n  b\n}\n"));
        // A failed, refused or unreached candidate offers no schedule.
        assert_eq!((r[2].class, r[2].schedule.as_ref()), ("failed", None));
        assert_eq!(r[2].vs_default, "");
        assert_eq!(r[3].outcome, "refused: too many registers");
        assert_eq!(r[4].outcome, "not reached: the budget was spent");
        assert!(r[3].schedule.is_none() && r[4].schedule.is_none());
        assert_eq!(v.winner_schedule.as_deref(), Some("schedule {\n  b\n}\n"));
        assert_eq!(
            v.confirmation.as_deref(),
            Some("winner / default time 0.500 (0.450-0.550) over 100 interleaved launch pairs")
        );
    }

    #[test]
    fn a_fake_tune_offers_the_checked_schedules_and_no_times() {
        let tune = json!({
            "candidates": [candidate("", "schedule {\n  a\n}\n", json!({"outcome": "checked"}))],
            "winner": null, "winner_schedule": null, "confirmation": null,
            "table": "| # |", "elapsed_s": 0.2, "budget_s": 60.0, "cancelled": false
        });
        let v = parse_tune_done(&done(job("fake", tune))).unwrap();
        assert_eq!(v.status, JobStatus::Fake);
        assert_eq!(v.rows[0].class, "checked");
        assert_eq!(v.rows[0].time, "");
        assert!(v.rows[0].schedule.is_some());
        assert_eq!(v.winner_schedule, None);
    }

    #[test]
    fn a_job_that_ended_before_its_search_has_its_message_and_no_rows() {
        let mut j = job("cancelled", Value::Null);
        j.as_object_mut().unwrap().remove("tune");
        j["message"] = json!("cancelled before it ran");
        let v = parse_tune_done(&done(j)).unwrap();
        assert_eq!(v.status, JobStatus::Cancelled);
        assert_eq!(v.message, "cancelled before it ran");
        assert!(v.rows.is_empty());
        let e = parse_tune_done("{\"stage\": \"done\"}").unwrap_err();
        assert!(e.contains("missing field"), "{e}");
    }

    #[test]
    fn the_progress_line_names_the_candidate_and_its_latest_step() {
        assert_eq!(progress_line(&[]), "compiling the candidates on the runner");
        let p = |step| TuneProgress {
            candidate: 3,
            of: 12,
            parameters: "threads=256".into(),
            step,
        };
        assert_eq!(
            progress_line(&[
                p(TuneStep::Compiled),
                p(TuneStep::Timed { median_us: 41.25 })
            ]),
            "candidate 3 of 12 (threads=256): timed, 41.2 us"
        );
        assert_eq!(
            progress_line(&[p(TuneStep::Refused { why: "no".into() })]),
            "candidate 3 of 12 (threads=256): refused (no)"
        );
    }
}
