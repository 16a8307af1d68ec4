//! `POST /api/run`'s body made into the job's [`JobSpec`], and every rule it must pass, in the
//! order the service answers them (each unit-tested below):
//!
//! 1. [`job_spec`], before any compile: each program within `--max-program-bytes` (413), runs
//!    available at all (503 with the reason), a fault kernel only with `--fault-kernels`, without
//!    `program_b` and on the GPU worker, a profile of one program only, `iters` and `warmup`
//!    within `--max-iters` and `--max-warmup` (400, naming the limit); unset options take the
//!    service's defaults (docs/api.md), program B its own file name and A's options.
//! 2. [`compile`], in a compile slot: each program compiled once for the run's sizes (400 with
//!    diagnostics when it does not compile, or when the sizes do not fit its plan; B's messages
//!    start `program_b: `), the tensors within `--max-tensor-bytes` (a fault kernel's too), each
//!    of `scalars` a scalar input of the program with a value its dtype holds (400 naming the
//!    scalar and the rule), each of `documents` an integer tensor input it can fill with
//!    packed-document ids (400 naming the input), and
//!    for A/B whether both programs have the same inputs. The compiled programs travel with the
//!    job, so the worker does not lower them again.
//!
//! `POST /api/tune`'s body passes the same rules where they apply ([`tune_job_spec`], then
//! [`check_tune`] in a compile slot), plus its budget within `--tune-budget`.

use crate::api_error::ApiError;
use crate::job_spec::JobSpec;
use crate::prepare;
use crate::serve_args::ServeArgs;
use axum::http::StatusCode;
use hopfuse_api::run::{RunError, RunRequest, Stage};
use hopfuse_api::service::RunBody;
use hopfuse_api::tune::TuneBody;
use std::collections::BTreeMap;

/// The file name of a run whose body names none (or one that is empty or over
/// [`MAX_FILE_NAME_BYTES`]).
pub(crate) const DEFAULT_FILE: &str = "playground.hf";
/// The longest file name a run body may give.
const MAX_FILE_NAME_BYTES: usize = 200;

/// 413 for a program over `--max-program-bytes` (every endpoint that takes a program).
pub(crate) fn check_program(program: &str, max: usize) -> Result<(), ApiError> {
    if program.len() > max {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the program is {} bytes; the limit is {max} bytes (max_program_bytes)",
                program.len()
            ),
        )
        .limit("max_program_bytes")
        .max(max));
    }
    Ok(())
}

/// A body's file name, or [`DEFAULT_FILE`] for none, an empty one or one too long.
fn file_name(file: Option<String>) -> String {
    file.filter(|f| !f.is_empty() && f.len() <= MAX_FILE_NAME_BYTES)
        .unwrap_or_else(|| DEFAULT_FILE.into())
}

/// The job a run body asks for, not yet compiled (see the module doc for the rules), or the
/// first rule it breaks. `unavailable`: why this service cannot run anything now.
pub(crate) fn job_spec(
    body: RunBody,
    args: &ServeArgs,
    unavailable: Option<String>,
) -> Result<JobSpec, ApiError> {
    for program in std::iter::once(&body.program).chain(&body.program_b) {
        check_program(program, args.max_program_bytes)?;
    }
    if let Some(reason) = unavailable {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, reason));
    }
    let fault = body.fault;
    let has_b = body.program_b.is_some();
    if fault.is_some() && !args.fault_kernels {
        return Err(ApiError::bad_request(
            "fault kernels are a device-test hook: start the service with --fault-kernels",
        ));
    }
    if fault.is_some() && has_b {
        return Err(ApiError::bad_request("a fault run takes no program_b"));
    }
    let profile = body.profile.unwrap_or(false);
    if profile && (has_b || fault.is_some()) {
        return Err(ApiError::bad_request(
            "profile takes one program: a run with program_b or a fault kernel cannot be profiled",
        ));
    }
    if fault.is_some() && args.fake_worker {
        return Err(ApiError::bad_request("fault kernels need the GPU worker"));
    }
    let request = RunRequest {
        file: file_name(body.file),
        source: body.program,
        sizes: body.sizes,
        scalars: body.scalars,
        iters: body.iters.unwrap_or(100),
        warmup: body.warmup.unwrap_or(10),
        seed: body.seed.unwrap_or(1),
        index: body.index,
        copy_ceiling: body.copy_ceiling.unwrap_or(true),
        peers: body.peers.unwrap_or(false),
        clock: body.clock.unwrap_or(false),
        generic: body.generic.unwrap_or(false),
        documents: body.documents,
    };
    within("iters", request.iters, 1, args.max_iters)?;
    within("warmup", request.warmup, 0, args.max_warmup)?;
    let request_b = body.program_b.map(|source| RunRequest {
        file: format!("{} (B)", request.file),
        source,
        ..request.clone()
    });
    Ok(JobSpec {
        request,
        request_b,
        fault,
        same_inputs: None,
        profile,
        prepared: None,
        prepared_b: None,
        tune: None,
    })
}

/// `POST /api/tune`'s body made into its job, not yet checked against the program: the
/// program within `--max-program-bytes` (413), runs available (503), `budget_s` positive and
/// within `--tune-budget` (its default; 400 naming `tune_budget_s`), `iters` and `warmup`
/// within their limits as a run's. Each candidate runs as a run with these options would.
pub(crate) fn tune_job_spec(
    body: TuneBody,
    args: &ServeArgs,
    unavailable: Option<String>,
) -> Result<JobSpec, ApiError> {
    check_program(&body.program, args.max_program_bytes)?;
    if let Some(reason) = unavailable {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, reason));
    }
    let budget_s = body.budget_s.unwrap_or(args.tune_budget);
    if !(budget_s.is_finite() && budget_s > 0.0 && budget_s <= args.tune_budget) {
        return Err(ApiError::bad_request(format!(
            "budget_s = {budget_s} is outside the limit (0, {}] seconds (tune_budget_s)",
            args.tune_budget
        ))
        .limit("tune_budget_s")
        .max_seconds(args.tune_budget));
    }
    let request = RunRequest {
        file: file_name(body.file),
        source: body.program,
        sizes: body.sizes,
        scalars: BTreeMap::new(),
        iters: body.iters.unwrap_or(100),
        warmup: body.warmup.unwrap_or(10),
        seed: body.seed.unwrap_or(1),
        index: None,
        copy_ceiling: true,
        peers: false,
        clock: false,
        generic: false,
        documents: Default::default(),
    };
    within("iters", request.iters, 1, args.max_iters)?;
    within("warmup", request.warmup, 0, args.max_warmup)?;
    Ok(JobSpec::tune_request(request, budget_s))
}

/// A tune job checked against its program (blocking: run it in a compile slot): it parses and
/// an automatic scheduler takes it (400 with the diagnostics, or the scheduler's reason), and
/// a candidate compiles for the sizes with its tensors within `--max-tensor-bytes` (400 with
/// the first candidate's error when none does; the candidates share the fusion, so its
/// tensors are every candidate's). The candidates are compiled again by the job, each reported.
pub(crate) fn check_tune(spec: &JobSpec, max_tensor_bytes: u64) -> Result<(), ApiError> {
    let req = &spec.request;
    let trials = crate::tune::candidates(&req.source, &req.sizes).map_err(|e| match e {
        crate::tune::NoCandidates::Program(d) => {
            ApiError::bad_request(format!("the program does not compile: {d}").trim_end())
                .diagnostics(d.0)
        }
        declined => ApiError::bad_request(declined.render(&req.source, &req.file)),
    })?;
    let mut first_error = None;
    for trial in trials {
        let candidate = RunRequest {
            source: trial.program,
            ..req.clone()
        };
        match check_run(&candidate, max_tensor_bytes, "") {
            Ok(_) => return Ok(()),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    let Some(e) = first_error else {
        return Err(ApiError::bad_request(
            "the automatic scheduler gave no candidate for the fusion",
        ));
    };
    Err(e.prefixed("no candidate of the automatic scheduler compiles for these sizes; the first: "))
}

/// 400 naming `max_{name}` for a count outside `min..=max`.
fn within(name: &str, value: u32, min: u32, max: u32) -> Result<(), ApiError> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "{name} = {value} is outside the limit {min}..={max} (max_{name})"
    ))
    .limit(format!("max_{name}"))
    .max(max))
}

/// The job with its programs compiled for its sizes (a fault kernel: its tensors counted), or
/// the first program error or byte cap it breaks. Blocking: run it in a compile slot.
pub(crate) fn compile(mut spec: JobSpec, max_tensor_bytes: u64) -> Result<JobSpec, ApiError> {
    if spec.fault.is_some() {
        let bytes = 4 * crate::faults::elements(&spec.request).max(0) as u64;
        check_bytes(bytes, max_tensor_bytes)?;
        return Ok(spec);
    }
    let (inputs_a, prepared) = check_run(&spec.request, max_tensor_bytes, "")?;
    spec.prepared = prepared;
    if let Some(b) = &spec.request_b {
        let (inputs_b, prepared_b) = check_run(b, max_tensor_bytes, "program_b: ")?;
        spec.same_inputs = Some(inputs_a == inputs_b);
        spec.prepared_b = prepared_b;
    }
    Ok(spec)
}

fn check_bytes(total: u64, max_tensor_bytes: u64) -> Result<(), ApiError> {
    if total > max_tensor_bytes {
        return Err(ApiError::bad_request(format!(
            "the tensors need {total} bytes; the limit is {max_tensor_bytes} bytes (max_tensor_bytes)"
        ))
        .limit("max_tensor_bytes")
        .max(max_tensor_bytes));
    }
    Ok(())
}

/// The input tensors and scalars of a run: name, dtype and concrete shape.
type Inputs = Vec<(String, hopfuse::DType, Vec<u64>)>;

/// Everything that can be known before a worker, from one compile of the program for the
/// run's sizes: it compiles (400 with diagnostics), the sizes fit its plan, the tensors fit the
/// byte cap, the given scalar values are scalar inputs its dtypes hold, the `documents` integer
/// tensor inputs. Returns the run's inputs and the compiled program, which the worker then runs.
/// A program split into several kernels is checked kernel by kernel and has no `Prepared` (one
/// kernel's): the worker compiles its kernels.
fn check_run(
    req: &RunRequest,
    max_tensor_bytes: u64,
    which: &str,
) -> Result<(Inputs, Option<prepare::Prepared>), ApiError> {
    let split = crate::engine::compile_split(req)
        .map_err(|e| ApiError::bad_request(format!("{which}{}", api_wording(&e.to_string()))))?;
    if let Some(split) = split {
        check_bytes(split.working_set_bytes(&req.sizes), max_tensor_bytes)?;
        check_documents(req, which)?;
        return Ok((split_inputs(&split, &req.sizes), None));
    }
    let (compilation, setup) = prepare::compile_for_run(req).map_err(|e| match e {
        prepare::PrepareError::Compile(d) => {
            ApiError::bad_request(format!("{which}the program does not compile: {d}").trim_end())
                .diagnostics(d.0)
        }
        prepare::PrepareError::Sizes(e) => ApiError::bad_request(format!(
            "{which}{}",
            api_wording(&RunError::new(Stage::Sizes, e).to_string())
        )),
    })?;
    let mut total: u64 = 0;
    let mut inputs = Vec::new();
    for p in &compilation.plan.params {
        match p {
            hopfuse::plan::Param::Tensor {
                name,
                dtype,
                role,
                shape,
            } => {
                let n = prepare::tensor_elements(shape, &req.sizes).map_err(|e| {
                    ApiError::bad_request(format!("{which}tensor `{name}`: {}", api_wording(&e)))
                })?;
                total = total.saturating_add(n.saturating_mul(dtype.size_bytes() as u64));
                if *role == hopfuse::plan::TensorRole::Input {
                    let dims = shape
                        .iter()
                        .map(|d| d.eval(&req.sizes).unwrap_or(-1) as u64)
                        .collect();
                    inputs.push((name.clone(), *dtype, dims));
                }
            }
            hopfuse::plan::Param::Scalar { name, dtype, .. } => {
                inputs.push((name.clone(), *dtype, vec![]))
            }
            hopfuse::plan::Param::Size { .. } | hopfuse::plan::Param::TensorMap { .. } => {}
        }
    }
    check_bytes(total, max_tensor_bytes)?;
    crate::scalars::resolve(&compilation.plan, &req.scalars)
        .map_err(|e| ApiError::bad_request(format!("{which}{}", api_wording(&e))))?;
    check_documents(req, which)?;
    Ok((inputs, Some(prepare::Prepared::new(&compilation, setup))))
}

/// 400 for a `documents` entry the program cannot take: not an integer tensor input, a
/// gather's indices, or a last axis too long for its dtype's ids ([`crate::data::InputFills`]).
fn check_documents(req: &RunRequest, which: &str) -> Result<(), ApiError> {
    crate::data::InputFills::resolve(&req.source, &req.sizes, &req.documents)
        .map(|_| ())
        .map_err(|e| ApiError::bad_request(format!("{which}{}", api_wording(&e.to_string()))))
}

/// The fusion inputs and scalars a split program's kernels read (not the intermediates one
/// writes for another), each once, in order of first use.
fn split_inputs(split: &crate::engine::SplitCompiled, sizes: &BTreeMap<String, i64>) -> Inputs {
    let mut inputs: Inputs = Vec::new();
    for kernel in &split.kernels {
        for p in &kernel.plan.params {
            let (name, dtype, dims) = match p {
                hopfuse::plan::Param::Tensor {
                    name,
                    dtype,
                    role: hopfuse::plan::TensorRole::Input,
                    shape,
                } => (
                    name,
                    dtype,
                    shape
                        .iter()
                        .map(|d| d.eval(sizes).unwrap_or(-1) as u64)
                        .collect(),
                ),
                hopfuse::plan::Param::Scalar { name, dtype, .. } => (name, dtype, vec![]),
                _ => continue,
            };
            let intermediate = split.split.intermediates.iter().any(|m| &m.name == name);
            if !intermediate && inputs.iter().all(|(n, ..)| n != name) {
                inputs.push((name.clone(), *dtype, dims));
            }
        }
    }
    inputs
}

/// The engine's messages speak of the CLI's `--size` and `--scalar`; the API takes `sizes`
/// and `scalars`.
pub(crate) fn api_wording(message: &str) -> String {
    message
        .replace("(pass it with --size ", "(give it in `sizes`, e.g. ")
        .replace("--scalar ", "scalars: ")
        .replace("--documents ", "documents: ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::{json, Value};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ServeArgs,
    }

    /// `hopfuse serve` with these flags.
    fn args(flags: &[&str]) -> ServeArgs {
        Cli::parse_from(std::iter::once("serve").chain(flags.iter().copied())).args
    }

    const ADD: &str = include_str!("../../examples/basics/add.hf");
    const BIAS_ADD: &str = include_str!("../../examples/basics/bias_add.hf");

    fn body(fields: Value) -> RunBody {
        let mut body = json!({"program": ADD, "sizes": {"M": 64, "N": 64}});
        for (k, v) in fields.as_object().unwrap() {
            body[k] = v.clone();
        }
        serde_json::from_value(body).unwrap()
    }

    fn spec(fields: Value, flags: &[&str]) -> Result<JobSpec, ApiError> {
        job_spec(body(fields), &args(flags), None)
    }

    /// The status, message, limit and its value of an error.
    fn refused(r: Result<JobSpec, ApiError>) -> (u16, String, Option<String>, Option<u64>) {
        let e = r.expect_err("refused");
        let (status, body) = e.parts();
        let max = body.max.as_ref().and_then(|m| m.as_u64());
        (status.as_u16(), body.error.clone(), body.limit.clone(), max)
    }

    #[test]
    fn unset_options_take_the_service_defaults() {
        let s = spec(json!({}), &[]).unwrap();
        let r = &s.request;
        assert_eq!(r.file, "playground.hf");
        assert_eq!(r.source, ADD);
        assert_eq!(r.sizes.get("M"), Some(&64));
        assert_eq!((r.iters, r.warmup, r.seed), (100, 10, 1));
        assert_eq!(
            (r.copy_ceiling, r.peers, r.clock, r.index),
            (true, false, false, None)
        );
        assert!(s.request_b.is_none() && s.fault.is_none() && !s.profile);
        assert!(s.prepared.is_none() && s.same_inputs.is_none());
    }

    #[test]
    fn given_options_are_kept() {
        let fields = json!({"iters": 7, "warmup": 0, "seed": 9, "index": "i64",
            "copy_ceiling": false, "peers": true, "clock": true, "file": "mine.hf", "profile": true});
        let s = spec(fields, &[]).unwrap();
        let r = &s.request;
        assert_eq!((r.iters, r.warmup, r.seed), (7, 0, 9));
        assert_eq!(r.index, Some(hopfuse::IndexType::I64));
        assert_eq!((r.copy_ceiling, r.peers, r.clock), (false, true, true));
        assert_eq!(r.file, "mine.hf");
        assert!(s.profile);
    }

    #[test]
    fn an_empty_or_overlong_file_name_is_the_default() {
        let file = |name: &str| spec(json!({"file": name}), &[]).unwrap().request.file;
        assert_eq!(file(""), DEFAULT_FILE);
        assert_eq!(file(&"x".repeat(MAX_FILE_NAME_BYTES + 1)), DEFAULT_FILE);
        let longest = "x".repeat(MAX_FILE_NAME_BYTES);
        assert_eq!(file(&longest), longest);
    }

    #[test]
    fn program_b_takes_its_own_name_and_the_options_of_a() {
        let fields = json!({"program_b": BIAS_ADD, "file": "k.hf", "iters": 3, "seed": 5});
        let s = spec(fields, &[]).unwrap();
        let b = s.request_b.unwrap();
        assert_eq!(b.file, "k.hf (B)");
        assert_eq!(b.source, BIAS_ADD);
        let a_options = RunRequest {
            file: b.file.clone(),
            source: b.source.clone(),
            ..s.request
        };
        assert_eq!(b, a_options);
    }

    #[test]
    fn each_program_is_within_max_program_bytes() {
        let max = ADD.len().to_string();
        assert!(spec(json!({}), &["--max-program-bytes", &max]).is_ok());
        let tight = (ADD.len() - 1).to_string();
        let flags = ["--max-program-bytes", tight.as_str()];
        let too_big = |fields| refused(spec(fields, &flags));
        let (status, error, limit, value) = too_big(json!({}));
        assert_eq!((status, limit.as_deref()), (413, Some("max_program_bytes")));
        assert_eq!(value, Some(ADD.len() as u64 - 1));
        assert!(
            error.contains(&format!("the program is {} bytes", ADD.len())),
            "{error}"
        );
        let b_too_big = too_big(json!({"program": "", "program_b": ADD}));
        assert_eq!(b_too_big.0, 413);
    }

    /// 503 with the reason, after the size limits (a program too large is 413 either way).
    #[test]
    fn no_run_when_runs_are_unavailable() {
        let why = "runs are unavailable: no usable GPU".to_string();
        let (status, error, ..) = refused(job_spec(body(json!({})), &args(&[]), Some(why)));
        assert_eq!(
            (status, error.as_str()),
            (503, "runs are unavailable: no usable GPU")
        );
        let flags = args(&["--max-program-bytes", "1"]);
        let first = refused(job_spec(body(json!({})), &flags, Some("down".into())));
        assert_eq!(first.0, 413);
    }

    #[test]
    fn fault_kernels_need_the_flag() {
        let fault = json!({"fault": "deadlock", "program": ""});
        let (status, error, ..) = refused(spec(fault.clone(), &[]));
        assert_eq!(status, 400);
        assert!(error.contains("--fault-kernels"), "{error}");
        let s = spec(fault, &["--fault-kernels"]).unwrap();
        assert_eq!(s.fault, Some(crate::faults::Fault::Deadlock));
    }

    #[test]
    fn a_fault_run_takes_no_program_b() {
        let fields = json!({"fault": "deadlock", "program_b": ADD});
        let (status, error, ..) = refused(spec(fields, &["--fault-kernels"]));
        assert_eq!(
            (status, error.as_str()),
            (400, "a fault run takes no program_b")
        );
    }

    #[test]
    fn a_profile_takes_one_program() {
        for fields in [
            json!({"profile": true, "program_b": ADD}),
            json!({"profile": true, "fault": "illegal_address"}),
        ] {
            let (status, error, ..) = refused(spec(fields, &["--fault-kernels"]));
            assert_eq!(status, 400);
            assert!(error.starts_with("profile takes one program"), "{error}");
        }
        assert!(spec(json!({"profile": false, "program_b": ADD}), &[]).is_ok());
    }

    #[test]
    fn fault_kernels_need_the_gpu_worker() {
        let fields = json!({"fault": "nvrtc_error"});
        let (status, error, ..) = refused(spec(fields, &["--fault-kernels", "--fake-worker"]));
        assert_eq!(
            (status, error.as_str()),
            (400, "fault kernels need the GPU worker")
        );
    }

    #[test]
    fn iters_and_warmup_are_within_their_limits() {
        let flags = ["--max-iters", "50", "--max-warmup", "20"];
        assert!(spec(json!({"iters": 50, "warmup": 20}), &flags).is_ok());
        assert!(spec(json!({"iters": 1, "warmup": 0}), &flags).is_ok());
        for (fields, limit, max) in [
            (json!({"iters": 51}), "max_iters", 50),
            (json!({"iters": 0}), "max_iters", 50),
            (json!({"iters": 50, "warmup": 21}), "max_warmup", 20),
        ] {
            let (status, error, got_limit, got_max) = refused(spec(fields.clone(), &flags));
            assert_eq!(status, 400, "{fields}");
            assert_eq!((got_limit.as_deref(), got_max), (Some(limit), Some(max)));
            assert!(error.contains(&format!("({limit})")), "{error}");
        }
        // The defaults (100 launches, 10 warm-up) are checked as given ones are.
        let (_, error, ..) = refused(spec(json!({}), &flags));
        assert_eq!(error, "iters = 100 is outside the limit 1..=50 (max_iters)");
    }

    fn compiled(fields: Value, max_tensor_bytes: u64) -> Result<JobSpec, ApiError> {
        compile(
            spec(fields, &["--fault-kernels"]).unwrap(),
            max_tensor_bytes,
        )
    }

    /// add.hf at 64 x 64: three f32 tensors.
    const ADD_BYTES: u64 = 3 * 64 * 64 * 4;

    /// A program split into kernels is checked kernel by kernel: every tensor counted once
    /// (the intermediate too), no one-kernel `Prepared` (the worker compiles the kernels).
    #[test]
    fn a_split_program_is_checked_kernel_by_kernel() {
        let program = include_str!("../../examples/auto/col_norm.hf");
        let fields = json!({"program": program, "sizes": {"M": 64, "N": 32}});
        let s = compiled(fields.clone(), u64::MAX).unwrap();
        assert!(s.prepared.is_none());
        // x and y (64 x 32 f32) and the column sums (32 f32).
        let bytes = 2 * 64 * 32 * 4 + 32 * 4;
        assert!(compiled(fields.clone(), bytes).is_ok());
        let refused = compiled(fields, bytes - 1).expect_err("over the cap");
        let (_, body) = refused.parts();
        assert!(body.error.contains("max_tensor_bytes"), "{}", body.error);
    }

    const SCALED: &str = "fusion scaled {\n  input x: f32[N]\n  input eps: f32 = 1e-6\n  input k: i32\n  y = x * eps + k\n  output y\n}\n";

    #[test]
    fn scalar_values_travel_with_the_run() {
        let fields =
            json!({"program": SCALED, "sizes": {"N": 64}, "scalars": {"k": 3, "eps": 0.5}});
        let s = compiled(fields, u64::MAX).unwrap();
        assert_eq!(s.request.scalars.get("k"), Some(&3.0));
        assert_eq!(s.request.scalars.get("eps"), Some(&0.5));
        assert!(spec(json!({}), &[]).unwrap().request.scalars.is_empty());
    }

    #[test]
    fn a_bad_scalar_name_or_value_is_a_400_naming_it() {
        let refused_scalars = |scalars: Value| {
            let fields = json!({"program": SCALED, "sizes": {"N": 64}, "scalars": scalars});
            let e = compiled(fields, u64::MAX).expect_err("refused");
            let (status, body) = e.parts();
            (status.as_u16(), body.error.clone())
        };
        let (status, error) = refused_scalars(json!({"epsilon": 1}));
        assert_eq!(status, 400);
        assert_eq!(
            error,
            "scalars: `epsilon`: not a scalar input of the program (its scalar inputs: eps, k)"
        );
        let (status, error) = refused_scalars(json!({"k": 2.5}));
        assert_eq!(status, 400);
        assert!(
            error.starts_with("scalars: k=2.5: `k` is i32, which holds whole numbers"),
            "{error}"
        );
        let (status, error) = refused_scalars(json!({"eps": 1e300}));
        assert_eq!(status, 400);
        assert!(error.contains("beyond the largest finite f32"), "{error}");
        // A program without scalar inputs says so.
        let e = compiled(json!({"scalars": {"k": 1}}), u64::MAX).expect_err("refused");
        assert_eq!(
            e.parts().1.error,
            "scalars: `k`: the program has no scalar input"
        );
        // A non-number is refused by the JSON body itself (a 4xx before any rule).
        let bad: Result<RunBody, _> =
            serde_json::from_value(json!({"program": SCALED, "scalars": {"k": "three"}}));
        assert!(bad.is_err());
    }

    #[test]
    fn documents_travel_with_the_run_and_a_bad_one_is_a_400_naming_it() {
        let document = include_str!("../../examples/auto/attention_document.hf");
        let fields = |documents: Value| {
            json!({"program": document, "sizes": {"B": 2, "S": 64, "T": 64},
                "documents": documents})
        };
        let s = compiled(fields(json!({"doc_q": 16, "doc_k": 16})), u64::MAX).unwrap();
        let sixteen = std::num::NonZeroU32::new(16).unwrap();
        assert_eq!(s.request.documents.get("doc_k"), Some(&sixteen));
        assert_eq!(s.request.documents.len(), 2);
        assert!(spec(json!({}), &[]).unwrap().request.documents.is_empty());
        let e = compiled(fields(json!({"doc": 16})), u64::MAX).expect_err("refused");
        let (status, body) = e.parts();
        assert_eq!(status.as_u16(), 400);
        assert_eq!(
            body.error,
            "documents: `doc`: not an input of the program (its integer inputs: doc_q, doc_k)"
        );
        // A zero mean length, or a negative one, is refused by the JSON body itself.
        for bad in [json!({"doc_q": 0}), json!({"doc_q": -2})] {
            let body: Result<RunBody, _> = serde_json::from_value(fields(bad));
            assert!(body.is_err());
        }
    }

    #[test]
    fn each_program_is_compiled_once_for_its_sizes() {
        let s = compiled(json!({}), ADD_BYTES).unwrap();
        let prepared = s.prepared.expect("A compiled");
        assert!(prepared.cuda.contains("__global__"), "{}", prepared.cuda);
        assert!(s.prepared_b.is_none() && s.same_inputs.is_none());
    }

    #[test]
    fn a_b_says_whether_both_programs_have_the_same_inputs() {
        let same = compiled(json!({"program_b": format!("// B\n{ADD}")}), u64::MAX).unwrap();
        assert!(same.prepared_b.is_some());
        assert_eq!(same.same_inputs, Some(true));
        let other = compiled(json!({"program_b": BIAS_ADD}), u64::MAX).unwrap();
        assert_eq!(other.same_inputs, Some(false));
    }

    #[test]
    fn a_program_that_does_not_compile_is_a_400_with_diagnostics() {
        let broken = "fusion f {\n  @@@\n}";
        for (fields, prefix) in [
            (json!({"program": broken}), "the program does not compile"),
            (
                json!({"program_b": broken}),
                "program_b: the program does not compile",
            ),
        ] {
            let e = compiled(fields, u64::MAX).expect_err("does not compile");
            let (status, body) = e.parts();
            assert_eq!(status, StatusCode::BAD_REQUEST);
            assert!(body.error.starts_with(prefix), "{}", body.error);
            assert!(!body.diagnostics.as_ref().unwrap().is_empty());
        }
    }

    #[test]
    fn a_missing_size_names_the_api_field() {
        let e = compiled(json!({"sizes": {"M": 64}}), u64::MAX).expect_err("no N");
        let error = &e.parts().1.error;
        assert!(
            error.contains("`N`") && error.contains("give it in `sizes`"),
            "{error}"
        );
    }

    #[test]
    fn the_tensors_are_within_max_tensor_bytes() {
        assert!(compiled(json!({}), ADD_BYTES).is_ok());
        let e = compiled(json!({}), ADD_BYTES - 1).expect_err("over the cap");
        let (status, body) = e.parts();
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body.limit.as_deref(), Some("max_tensor_bytes"));
        assert!(
            body.error.contains(&format!("need {ADD_BYTES} bytes")),
            "{}",
            body.error
        );
    }

    /// A fault kernel is not compiled here; its tensors (4 bytes per element of `N`) are capped.
    #[test]
    fn a_fault_kernel_counts_its_tensors_only() {
        let fault = json!({"fault": "deadlock", "program": "", "sizes": {"N": 1024}});
        let s = compiled(fault.clone(), 4096).unwrap();
        assert!(s.prepared.is_none());
        let e = compiled(fault, 4095).expect_err("over the cap");
        assert_eq!(e.parts().1.limit.as_deref(), Some("max_tensor_bytes"));
    }
}
