//! `POST /api/run` and `POST /api/tune`: the body made into a job and checked
//! (`run_checks.rs`: the limits, the fault-kernel and profile rules, each program compiled once
//! for its sizes in a compile slot; a tune's program, scheduler and budget), then submitted to
//! the queue (a run also to the distributed front-end; a tune only to this service's own
//! workers) and answered 202 with the job's paths; 429/503 when it is full.

use super::middleware::{limit, ApiJson, Client};
use super::{ApiError, App};
use crate::distributed::frontend::SubmitError;
use crate::queue::Job;
use crate::run_checks;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use hopfuse_api::service::{RunAccepted, RunBody};
use hopfuse_api::tune::TuneBody;
use std::sync::Arc;

pub(super) async fn run(
    State(app): State<Arc<App>>,
    client: Client,
    ApiJson(body): ApiJson<RunBody>,
) -> Result<(StatusCode, Json<RunAccepted>), ApiError> {
    admit(&app, &client)?;
    let spec = run_checks::job_spec(body, &app.args, app.run_unavailable())?;
    let max_tensor_bytes = app.args.max_tensor_bytes;
    let spec = app
        .compile(move || run_checks::compile(spec, max_tensor_bytes))
        .await??;
    let job = match &app.remote {
        Some(remote) => remote.submit(spec, &client.0).await,
        None => app.queue.submit(spec, &client.0).map_err(SubmitError::Full),
    }?;
    Ok(accepted(&job))
}

pub(super) async fn tune(
    State(app): State<Arc<App>>,
    client: Client,
    ApiJson(body): ApiJson<TuneBody>,
) -> Result<(StatusCode, Json<RunAccepted>), ApiError> {
    admit(&app, &client)?;
    if app.remote.is_some() {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "tune jobs run on the service's own GPU workers, and this one sends runs to agents \
             (--queue): run `hopfuse tune FILE --size ...` on a GPU host instead",
        ));
    }
    let spec = run_checks::tune_job_spec(body, &app.args, app.run_unavailable())?;
    let max_tensor_bytes = app.args.max_tensor_bytes;
    let spec = app
        .compile(move || run_checks::check_tune(&spec, max_tensor_bytes).map(|()| spec))
        .await??;
    let job = app
        .queue
        .submit(spec, &client.0)
        .map_err(SubmitError::Full)?;
    Ok(accepted(&job))
}

/// The rate limit of runs (tunes count as runs) and the service's stop (503).
fn admit(app: &App, client: &Client) -> Result<(), ApiError> {
    limit(&app.run_limiter, client, "runs")?;
    if app.queue.stopping() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the service is stopping and takes no more runs; retry in a moment",
        )
        .retry_after(5));
    }
    Ok(())
}

/// 202 with the job's paths.
fn accepted(job: &Job) -> (StatusCode, Json<RunAccepted>) {
    let id = &job.id;
    (
        StatusCode::ACCEPTED,
        Json(RunAccepted {
            job_id: id.clone(),
            events: format!("/api/jobs/{id}/events"),
            result: format!("/api/jobs/{id}"),
        }),
    )
}
