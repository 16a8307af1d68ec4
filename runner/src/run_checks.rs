//! What `POST /api/run` checks before it queues a job, from one compile of each program for
//! the run's sizes ([`check_run`]): it compiles (400 with diagnostics), the sizes fit its plan,
//! the tensors fit `--max-tensor-bytes`; the compiled program then travels with the job
//! ([`Checked`]). Split from `serve.rs` without change.

use crate::api_error::ApiError;
use crate::prepare;
use hopfuse_api::run::{RunError, RunRequest, Stage};

pub(crate) fn check_bytes(total: u64, max_tensor_bytes: u64) -> Result<(), ApiError> {
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
pub(crate) type Inputs = Vec<(String, hopfuse::DType, Vec<u64>)>;

/// What the checks of a run found: the programs compiled for its sizes, and for A/B whether
/// both have the same inputs.
#[derive(Default)]
pub(crate) struct Checked {
    pub(crate) prepared: Option<prepare::Prepared>,
    pub(crate) prepared_b: Option<prepare::Prepared>,
    pub(crate) same_inputs: Option<bool>,
}

/// Everything that can be known before a worker, from one compile of the program for the
/// run's sizes: it compiles (400 with diagnostics), the sizes fit its plan, the tensors fit the
/// byte cap. Returns the run's inputs and the compiled program, which the worker then runs.
pub(crate) fn check_run(
    req: &RunRequest,
    max_tensor_bytes: u64,
    which: &str,
) -> Result<(Inputs, prepare::Prepared), ApiError> {
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
    Ok((inputs, prepare::Prepared::new(&compilation, setup)))
}

/// The engine's messages speak of the CLI's `--size`; the API takes `sizes`.
pub(crate) fn api_wording(message: &str) -> String {
    message.replace("(pass it with --size ", "(give it in `sizes`, e.g. ")
}
