//! `POST /api/run`: the body made into a job and checked (`run_checks.rs`: the limits, the
//! fault-kernel and profile rules, each program compiled once for its sizes in a compile slot),
//! then submitted to the queue or to the distributed front-end (202 with the job's paths;
//! 429/503 when it is full).

use super::middleware::{limit, ApiJson, Client};
use super::{ApiError, App};
use crate::distributed::frontend::SubmitError;
use crate::run_checks;
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
    if app.queue.stopping() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the service is stopping and takes no more runs; retry in a moment",
        )
        .retry_after(5));
    }
    let spec = run_checks::job_spec(body, &app.args, app.run_unavailable())?;
    let max_tensor_bytes = app.args.max_tensor_bytes;
    let spec = app
        .compile(move || run_checks::compile(spec, max_tensor_bytes))
        .await??;
    let job = match &app.remote {
        Some(remote) => remote.submit(spec, &client.0).await,
        None => app.queue.submit(spec, &client.0).map_err(SubmitError::Full),
    }?;
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
