//! What a job runs ([`JobSpec`]): the one description of a run request inside the runner, from
//! the checks of `POST /api/run` (`run_checks.rs`, which builds it) to the worker that runs it.
//!
//! It travels whole, never copied field by field: the queue's `Job` holds it, the worker's stdin
//! line (`worker::WorkerJob`) and the distributed mode's stream message
//! (`distributed::wire::WireJob`) embed it (`#[serde(flatten)]`: its fields sit at the top of
//! those messages), each adding only what is its own (the CUBIN cache and ncu's time limits; the
//! job's id and events subject). Its JSON without the compiled programs is the run history's
//! `request` ([`JobSpec::history`], docs/api.md).
//!
//! Those messages are decoded with [`decode_message`], not `serde_json::from_slice`: the
//! compiled plan's size expressions nest one level per tensor (`min_global_bytes` sums every
//! tensor's bytes, left to right), so a program with 61 global tensors is deeper than
//! serde_json's fixed limit of 128.

use crate::engine::{Prepared, RunRequest};
use crate::faults::Fault;
use serde::de::DeserializeOwned;
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
    /// A tune job (`POST /api/tune`): `request` is the program and the run options of each
    /// candidate; the queue runs the search ([`crate::tune`]) on the GPU's warm worker, one
    /// candidate job at a time, instead of sending this spec to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tune: Option<TuneSpec>,
}

/// What a tune job searches within.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneSpec {
    /// Seconds of search: no candidate starts after it.
    pub budget_s: f64,
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
            tune: None,
        }
    }

    /// A tune job: the search's settings.
    pub fn tune_request(program: RunRequest, budget_s: f64) -> JobSpec {
        JobSpec {
            tune: Some(TuneSpec { budget_s }),
            ..JobSpec::single(program)
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

/// The deepest nesting a job message may have: far above what a program within the service's
/// source limit produces (about two levels per global tensor), low enough that the stack it
/// takes to decode is bounded ([`STACK_PER_LEVEL`]).
pub const MAX_MESSAGE_DEPTH: usize = 20_000;

/// Stack reserved per level of nesting when a message is decoded: generous (a level of a
/// flattened struct's buffered content takes well under 1 KiB), and only reserved address space
/// until it is touched.
const STACK_PER_LEVEL: usize = 4 << 10;

/// Nesting that serde_json decodes on the caller's stack with its own limit (128) in force.
const SHALLOW_DEPTH: usize = 100;

/// Decodes a message that carries a [`JobSpec`] (a worker's job line, a stream message), whatever
/// the nesting of its compiled plan up to [`MAX_MESSAGE_DEPTH`]: a deep one is decoded without
/// serde_json's recursion limit on a thread whose stack fits its depth.
pub fn decode_message<T: DeserializeOwned + Send>(bytes: &[u8]) -> Result<T, String> {
    let depth = json_depth(bytes);
    if depth <= SHALLOW_DEPTH {
        return serde_json::from_slice(bytes).map_err(|e| e.to_string());
    }
    if depth > MAX_MESSAGE_DEPTH {
        return Err(format!(
            "the message nests {depth} levels deep (at most {MAX_MESSAGE_DEPTH})"
        ));
    }
    let decode = || {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        de.disable_recursion_limit();
        let value = T::deserialize(&mut de).map_err(|e| e.to_string())?;
        de.end().map_err(|e| e.to_string())?;
        Ok(value)
    };
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("decode-job".into())
            .stack_size((1 << 20) + depth * STACK_PER_LEVEL)
            .spawn_scoped(scope, decode)
            .map_err(|e| format!("cannot start a thread to decode the message: {e}"))?
            .join()
            .unwrap_or_else(|_| Err("decoding the message panicked".to_string()))
    })
}

/// The deepest nesting of arrays and objects in JSON text (brackets inside strings do not
/// count; text that is not JSON gives some depth, and then its decode fails).
fn json_depth(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
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

    /// A program summing `tensors` global inputs into one output.
    fn many_tensors(tensors: usize) -> RunRequest {
        let inputs: String = (0..tensors)
            .map(|i| format!("  input t{i}: f32[N]\n"))
            .collect();
        // Partial sums of 50 terms (an expression has at most 512 operations).
        let names: Vec<String> = (0..tensors).map(|i| format!("t{i}")).collect();
        let partials: Vec<String> = names.chunks(50).map(|c| c.join(" + ")).collect();
        let statements: String = partials
            .iter()
            .enumerate()
            .map(|(i, sum)| format!("  p{i} = {sum}\n"))
            .collect();
        let sum = (0..partials.len())
            .map(|i| format!("p{i}"))
            .collect::<Vec<_>>()
            .join(" + ");
        let source = format!(
            "fusion many {{\n{inputs}{statements}  y = {sum}\n  output y\n}}\nschedule {{\n  \
             y.split(0, 128)\n  y.parallelize(0, BIDx)\n  y.parallelize(1, TIDx)\n  \
             propagate(y)\n  inline_most()\n}}\n"
        );
        serde_json::from_value(json!({
            "file": "many.hf", "source": source, "sizes": {"N": 256}, "iters": 1,
            "warmup": 0, "seed": 1, "index": null, "copy_ceiling": false,
        }))
        .unwrap()
    }

    /// A message that embeds the spec flattened, as the worker's job line and the stream's
    /// message do.
    #[derive(Serialize, Deserialize)]
    struct Wrapped {
        job_id: String,
        #[serde(flatten)]
        spec: JobSpec,
    }

    /// Issue 39 item 4: 61 global tensors nest the plan deeper than serde_json's limit (the job
    /// failed with "bad job JSON"); such jobs, and far bigger ones, decode whole.
    #[test]
    fn a_job_with_many_global_tensors_decodes() {
        for tensors in [61, 1_000] {
            let request = many_tensors(tensors);
            let (compilation, setup) = crate::prepare::compile_for_run(&request).unwrap();
            let mut spec = JobSpec::single(request);
            spec.prepared = Some(Prepared::new(&compilation, setup));
            let message = serde_json::to_vec(&Wrapped {
                job_id: "j".into(),
                spec: spec.clone(),
            })
            .unwrap();
            assert!(
                serde_json::from_slice::<Wrapped>(&message).is_err(),
                "{tensors} tensors: deeper than serde_json's own limit"
            );
            let back: Wrapped = decode_message(&message).unwrap();
            assert_eq!(back.spec.prepared, spec.prepared, "{tensors} tensors");
        }
    }

    #[test]
    fn the_depth_counts_brackets_outside_strings_and_too_deep_is_an_error() {
        assert_eq!(json_depth(br#"{"a": [1, {"b": "]]\"[[["}]}"#), 3);
        let deep = format!(
            "{}{}",
            "[".repeat(MAX_MESSAGE_DEPTH + 1),
            "]".repeat(MAX_MESSAGE_DEPTH + 1)
        );
        let err = decode_message::<serde_json::Value>(deep.as_bytes()).unwrap_err();
        assert!(err.contains("20001 levels deep"), "{err}");
        assert!(decode_message::<Vec<u8>>(b"[1, 2").is_err());
    }
}
