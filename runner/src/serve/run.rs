//! `POST /api/run`: the request's limits (rate, program size, iterations, warm-up, tensor bytes),
//! the fault-kernel and profile rules, each program compiled once for its sizes (what the worker
//! then runs), and the job submitted to the queue or to the distributed front-end (202 with the
//! job's paths; 429/503 when it is full).

use super::middleware::{limit, ApiJson, Client};
use super::{ApiError, App};
use crate::distributed::frontend::SubmitError;
use crate::engine::RunRequest;
use crate::queue::JobSpec;
use crate::run_checks::{check_bytes, check_run, Checked};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use hopfuse_api::service::{RunAccepted, RunBody};
use std::sync::Arc;

pub(super) async fn run(
    State(app): State<Arc<App>>,
    client: Client,
    ApiJson(body): ApiJson<RunBody>,
) -> Result<(StatusCode, Json<RunAccepted>), ApiError> {
    limit(&app.run_limiter, &client, "runs")?;
    app.check_program(&body.program)?;
    if let Some(b) = &body.program_b {
        app.check_program(b)?;
    }
    if let Some(reason) = app.run_unavailable() {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, reason));
    }
    let a = &app.args;
    if body.fault.is_some() && !a.fault_kernels {
        return Err(ApiError::bad_request(
            "fault kernels are a device-test hook: start the service with --fault-kernels",
        ));
    }
    if body.fault.is_some() && body.program_b.is_some() {
        return Err(ApiError::bad_request("a fault run takes no program_b"));
    }
    let profile = body.profile.unwrap_or(false);
    if profile && (body.program_b.is_some() || body.fault.is_some()) {
        return Err(ApiError::bad_request(
            "profile takes one program: a run with program_b or a fault kernel cannot be profiled",
        ));
    }
    if body.fault.is_some() && a.fake_worker {
        return Err(ApiError::bad_request("fault kernels need the GPU worker"));
    }
    let file = body
        .file
        .filter(|f| !f.is_empty() && f.len() <= 200)
        .unwrap_or_else(|| "playground.hf".into());
    let request = RunRequest {
        file: file.clone(),
        source: body.program,
        sizes: body.sizes,
        iters: body.iters.unwrap_or(100),
        warmup: body.warmup.unwrap_or(10),
        seed: body.seed.unwrap_or(1),
        index: body.index,
        copy_ceiling: body.copy_ceiling.unwrap_or(true),
        peers: body.peers.unwrap_or(false),
        clock: body.clock.unwrap_or(false),
    };
    let request_b = body.program_b.map(|source| RunRequest {
        file: format!("{file} (B)"),
        source,
        ..request.clone()
    });
    let cap = |name: &str, value: u64, min: u64, max: u64| {
        if value < min || value > max {
            Err(ApiError::bad_request(format!(
                "{name} = {value} is outside the limit {min}..={max} (max_{name})"
            ))
            .limit(format!("max_{name}"))
            .max(max))
        } else {
            Ok(())
        }
    };
    cap("iters", request.iters as u64, 1, a.max_iters as u64)?;
    cap("warmup", request.warmup as u64, 0, a.max_warmup as u64)?;
    let max_tensor_bytes = a.max_tensor_bytes;
    let fault = body.fault;
    // Each program is compiled once, here, for these sizes; the worker gets the result.
    let checked = {
        let (request, request_b) = (request.clone(), request_b.clone());
        app.compile(move || -> Result<Checked, ApiError> {
            if fault.is_some() {
                let bytes = 4 * crate::faults::elements(&request).max(0) as u64;
                check_bytes(bytes, max_tensor_bytes)?;
                return Ok(Checked::default());
            }
            let (inputs_a, prepared) = check_run(&request, max_tensor_bytes, "")?;
            let mut checked = Checked {
                prepared: Some(prepared),
                ..Checked::default()
            };
            if let Some(b) = &request_b {
                let (inputs_b, prepared_b) = check_run(b, max_tensor_bytes, "program_b: ")?;
                checked.same_inputs = Some(inputs_a == inputs_b);
                checked.prepared_b = Some(prepared_b);
            }
            Ok(checked)
        })
        .await??
    };
    let spec = JobSpec {
        request,
        request_b,
        fault,
        same_inputs: checked.same_inputs,
        profile,
        prepared: checked.prepared,
        prepared_b: checked.prepared_b,
    };
    let submitted = match &app.remote {
        Some(remote) => remote.submit(spec, &client.0).await,
        None => app.queue.submit(spec, &client.0).map_err(SubmitError::Full),
    };
    let job = submitted?;
    let id = &job.id;
    Ok((
        StatusCode::ACCEPTED,
        Json(RunAccepted {
            job_id: id.clone(),
            events: format!("/api/jobs/{id}/events"),
            result: format!("/api/jobs/{id}"),
        }),
    ))
}
