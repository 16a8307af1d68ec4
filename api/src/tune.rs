//! A tune job (`POST /api/tune`, docs/api.md): the automatic scheduler's candidates for one
//! program and one set of sizes, each compiled, run, validated and timed on the service's GPU
//! worker, the fastest that passed the winner.
//!
//! Takes [`TuneBody`]; while the job runs, each event of its stream may carry a
//! [`TuneProgress`] (candidate i of n: compiled, refused with why, validated, timed, checked by
//! the fake worker, not run); its result (`JobResult::tune`) is a [`TuneResult`]: one
//! [`TuneCandidate`] per candidate in the scheduler's order (its own choice first), the winner
//! and the winner's schedule block, the text a user pastes over the program's own.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /api/tune`: the program (its own schedule, if any, is set aside: the tuner searches
/// the automatic scheduler's parameters), its sizes and the run options of each candidate.
/// Unset options take the service's defaults (docs/api.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuneBody {
    #[serde(default)]
    pub program: String,
    #[serde(default)]
    pub sizes: BTreeMap<String, i64>,
    /// Timed launches per candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iters: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Seconds of search: no candidate starts after it (default and maximum: the service's
    /// `--tune-budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_s: Option<f64>,
    /// A name for messages (default `playground.hf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// What happened to one candidate, as the job's events report it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneProgress {
    /// 1-based.
    pub candidate: usize,
    /// Candidates in all.
    pub of: usize,
    /// The scheduler's parameters of this candidate (`threads=256,vectors=2`).
    pub parameters: String,
    #[serde(flatten)]
    pub step: TuneStep,
}

/// A candidate's step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum TuneStep {
    /// It lowered for the sizes on the host.
    Compiled,
    /// It did not lower for the sizes: the compiler's message.
    Refused { why: String },
    /// It ran on the GPU and its outputs were compared with the float64 reference.
    Validated { passed: bool },
    /// It was timed (after passing validation).
    Timed { median_us: f64 },
    /// The fake worker compiled and checked it; nothing ran.
    Checked,
    /// It was sent to the worker but did not run: why (an error, a timeout, a crash).
    NotRun { why: String },
}

/// The result of a tune job (`JobResult::tune`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneResult {
    /// In the scheduler's order: its own choice (the default) first.
    pub candidates: Vec<TuneCandidate>,
    /// Index into `candidates` of the fastest candidate that passed validation.
    pub winner: Option<usize>,
    /// The winner's schedule block (`schedule { ... }`), to replace the program's own.
    pub winner_schedule: Option<String>,
    /// The winner and the default timed again interleaved, when the winner is not the default.
    pub confirmation: Option<TuneConfirmation>,
    /// The table as `hopfuse tune` prints it (Markdown).
    pub table: String,
    /// Seconds the search took.
    pub elapsed_s: f64,
    /// The search's budget in seconds.
    pub budget_s: f64,
    /// The job was cancelled: the candidates after the one in progress were not run.
    pub cancelled: bool,
}

/// One candidate of a [`TuneResult`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneCandidate {
    /// The scheduler's parameters (`threads=256,vectors=2`).
    pub parameters: String,
    /// Its schedule block (`schedule { ... }`).
    pub schedule: String,
    /// The scheduler's sentence: what it decided and why.
    pub reason: String,
    #[serde(flatten)]
    pub outcome: TuneOutcome,
}

/// What became of a candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum TuneOutcome {
    /// It did not lower for the sizes.
    Refused { why: String },
    /// Its turn did not come: the budget was spent, or the job was cancelled.
    NotReached { why: String },
    /// The fake worker compiled and checked it; nothing was measured.
    Checked,
    /// Sent to the worker, not run: why.
    NotRun { why: String },
    /// Run, validated and (when it passed) timed.
    Measured {
        median_us: f64,
        /// Bytes moved per second (GB/s).
        gbps: f64,
        /// A matrix product's rate.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tflops: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fraction_of_copy: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fraction_of_cublas: Option<f64>,
        passed: bool,
    },
}

impl TuneOutcome {
    /// The median time of a candidate that ran and passed validation.
    pub fn passed_us(&self) -> Option<f64> {
        match self {
            TuneOutcome::Measured {
                median_us,
                passed: true,
                ..
            } => Some(*median_us),
            _ => None,
        }
    }
}

/// The default and the winner timed again interleaved, launch pair by launch pair.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneConfirmation {
    /// The median over pairs of the winner's time / the default's (below 1: the winner is
    /// faster).
    pub winner_over_default_median: f64,
    /// The smallest and largest per-pair ratio.
    pub winner_over_default_range: [f64; 2],
    pub pairs: usize,
}

/// Replaces the first `schedule { ... }` block of `program` (from a line that is `schedule {`
/// to the next line that is `}`) with `schedule`, or appends `schedule` when there is none.
/// What "use this schedule" does to the editor's text.
pub fn with_schedule(program: &str, schedule: &str) -> String {
    let lines: Vec<&str> = program.split_inclusive('\n').collect();
    let start = lines.iter().position(|l| l.trim_end() == "schedule {");
    let end = start.and_then(|s| {
        lines[s + 1..]
            .iter()
            .position(|l| l.trim_end() == "}")
            .map(|i| s + 1 + i)
    });
    let block = if schedule.ends_with('\n') {
        schedule.to_string()
    } else {
        format!("{schedule}\n")
    };
    match (start, end) {
        (Some(s), Some(e)) => {
            let mut out: String = lines[..s].concat();
            out.push_str(&block);
            out.push_str(&lines[e + 1..].concat());
            out
        }
        _ => {
            let mut out = program.to_string();
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&block);
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn progress_is_flat_json_with_the_step_named() {
        let p = TuneProgress {
            candidate: 2,
            of: 5,
            parameters: "threads=128".into(),
            step: TuneStep::Refused {
                why: "register tensor `x` needs 64 elements".into(),
            },
        };
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v,
            json!({"candidate": 2, "of": 5, "parameters": "threads=128", "step": "refused",
                   "why": "register tensor `x` needs 64 elements"})
        );
        assert_eq!(serde_json::from_value::<TuneProgress>(v).unwrap(), p);
        let timed: TuneProgress = serde_json::from_value(json!({
            "candidate": 1, "of": 1, "parameters": "", "step": "timed", "median_us": 12.5}))
        .unwrap();
        assert_eq!(timed.step, TuneStep::Timed { median_us: 12.5 });
    }

    #[test]
    fn a_result_round_trips_and_a_candidate_names_its_outcome() {
        let r = TuneResult {
            candidates: vec![
                TuneCandidate {
                    parameters: "threads=256".into(),
                    schedule: "schedule {\n  y.split(0, 256)\n}\n".into(),
                    reason: "pointwise".into(),
                    outcome: TuneOutcome::Measured {
                        median_us: 10.0,
                        gbps: 2900.0,
                        tflops: None,
                        fraction_of_copy: Some(0.97),
                        fraction_of_cublas: None,
                        passed: true,
                    },
                },
                TuneCandidate {
                    parameters: "threads=1024".into(),
                    schedule: "schedule {\n}\n".into(),
                    reason: "pointwise".into(),
                    outcome: TuneOutcome::NotReached {
                        why: "cancelled".into(),
                    },
                },
            ],
            winner: Some(0),
            winner_schedule: Some("schedule {\n  y.split(0, 256)\n}\n".into()),
            confirmation: None,
            table: "| # |".into(),
            elapsed_s: 1.5,
            budget_s: 60.0,
            cancelled: true,
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["candidates"][0]["outcome"], "measured");
        assert_eq!(v["candidates"][0]["median_us"], 10.0);
        assert!(v["candidates"][0].get("tflops").is_none());
        assert_eq!(v["candidates"][1]["outcome"], "not_reached");
        assert_eq!(serde_json::from_value::<TuneResult>(v).unwrap(), r);
        assert_eq!(r.candidates[0].outcome.passed_us(), Some(10.0));
        assert_eq!(r.candidates[1].outcome.passed_us(), None);
    }

    #[test]
    fn a_body_denies_unknown_fields() {
        let e = serde_json::from_value::<TuneBody>(json!({"program": "p", "budget": 5}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `budget`"), "{e}");
        let b: TuneBody = serde_json::from_value(json!({"program": "p", "budget_s": 5.0})).unwrap();
        assert_eq!(b.budget_s, Some(5.0));
        assert_eq!(
            serde_json::to_value(TuneBody::default()).unwrap(),
            json!({"program": "", "sizes": {}})
        );
    }

    #[test]
    fn the_schedule_block_is_replaced_or_appended() {
        let fusion = "fusion f {\n  input x: f32[N]\n  output x\n}\n";
        let old = format!("{fusion}schedule {{\n  x.split(0, 4)\n}}\n// after\n");
        let new = "schedule {\n  x.split(0, 128)\n}\n";
        assert_eq!(
            with_schedule(&old, new),
            format!("{fusion}schedule {{\n  x.split(0, 128)\n}}\n// after\n")
        );
        assert_eq!(with_schedule(fusion, new), format!("{fusion}{new}"));
        // No final newline, and a block given without one.
        assert_eq!(
            with_schedule(fusion.trim_end(), new.trim_end()),
            format!("{fusion}{new}")
        );
    }
}
