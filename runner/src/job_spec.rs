//! What a job runs ([`JobSpec`]): the one description of a run request inside the runner, from
//! the checks of `POST /api/run` (`run_checks.rs`, which builds it) to the worker that runs it.
//!
//! It travels whole, never copied field by field: the queue's `Job` holds it, the worker's stdin
//! line (`worker::WorkerJob`) and the distributed mode's stream message
//! (`distributed::wire::WireJob`) embed it (`#[serde(flatten)]`: its fields sit at the top of
//! those messages), each adding only what is its own (the CUBIN cache and ncu's time limits; the
//! job's id and events subject). Its JSON without the compiled programs is the run history's
//! `request` ([`JobSpec::history`], docs/api.md).

use crate::engine::{Prepared, RunRequest};
use crate::faults::Fault;
use serde::{Deserialize, Serialize};

/// What a job runs: the program (or an A/B pair, or a fault kernel), its sizes and options, and
/// the programs as the service compiled them for those sizes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobSpec {
    pub request: RunRequest,
    /// A/B: the second program (same sizes, seed and options).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_b: Option<RunRequest>,
    /// A fault kernel instead of the program (`--fault-kernels`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
    /// A/B: whether both programs have the same input tensors (names, dtypes, shapes), so the
    /// seeded inputs are identical.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_inputs: Option<bool>,
    /// Profile the kernel with Nsight Compute after the run (single programs only): the job
    /// gets a second time limit for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub profile: bool,
    /// The programs as the service compiled them for the sizes (then the worker does not lower
    /// them again); `None`: the worker compiles (`hopfuse bench`, a one-shot worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepared: Option<Prepared>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepared_b: Option<Prepared>,
}

impl JobSpec {
    /// One program, nothing else: no B, fault kernel or profile, compiled by the worker.
    pub fn single(request: RunRequest) -> JobSpec {
        JobSpec {
            request,
            request_b: None,
            fault: None,
            same_inputs: None,
            profile: false,
            prepared: None,
            prepared_b: None,
        }
    }

    /// The programs the worker runs: 1, or 2 for A/B.
    pub fn programs(&self) -> u32 {
        1 + self.request_b.is_some() as u32
    }

    /// The run history's `request`: the spec without the compiled programs (what was asked,
    /// not what the service derived from it; the CUDA would bloat the history).
    pub fn history(&self) -> serde_json::Value {
        let asked = JobSpec {
            prepared: None,
            prepared_b: None,
            ..self.clone()
        };
        serde_json::to_value(asked).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request() -> RunRequest {
        let add = include_str!("../../examples/basics/add.hf");
        serde_json::from_value(json!({
            "file": "add.hf", "source": add, "sizes": {"M": 64, "N": 64}, "iters": 1,
            "warmup": 0, "seed": 1, "index": null, "copy_ceiling": false,
        }))
        .unwrap()
    }

    /// The history keeps what docs/api.md lists: the request, then `request_b`, `fault`,
    /// `same_inputs` and `profile` only when they apply, never the compiled programs (which do
    /// travel to the worker).
    #[test]
    fn the_history_is_the_request_without_the_compiled_programs() {
        let plain = JobSpec::single(request());
        assert_eq!(
            plain.history(),
            json!({"request": serde_json::to_value(request()).unwrap()})
        );
        let (compilation, setup) = crate::prepare::compile_for_run(&request()).unwrap();
        let mut ab = JobSpec::single(request());
        ab.request_b = Some(request());
        ab.same_inputs = Some(true);
        ab.profile = true;
        ab.prepared = Some(Prepared::new(&compilation, setup));
        ab.prepared_b = ab.prepared.clone();
        let history = ab.history();
        let mut keys: Vec<&str> = history
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort();
        assert_eq!(keys, ["profile", "request", "request_b", "same_inputs"]);
        let sent = serde_json::to_value(&ab).unwrap();
        assert!(sent["prepared"]["cuda"].is_string() && sent["prepared_b"].is_object());
        assert_eq!(ab.programs(), 2);
        assert_eq!(plain.programs(), 1);
    }
}
