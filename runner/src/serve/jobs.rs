//! A job after `POST /api/run`: its result or its stage (`GET /api/jobs/{id}`), its server-sent
//! events (`GET /api/jobs/{id}/events`: the history, then live events up to `done`), from the
//! queue while it is known there, else from the run history or the distributed mode's results
//! bucket; its cancel (`POST /api/jobs/{id}/cancel`); and the run history itself (`GET
//! /api/runs`).

use super::middleware::{limit, not_found, Client};
use super::{ApiError, App};
use crate::queue::{Cancelled, JobEvent, JobStage};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::Json;
use hopfuse_api::service::{CancelAnswer, JobPending, Runs};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::broadcast;

fn done_json(result: &impl Serialize) -> Value {
    let mut v = serde_json::to_value(result).unwrap_or_default();
    v["done"] = json!(true);
    v
}

pub(super) async fn job(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if let Some(job) = app.queue.get(&id) {
        return Ok(Json(match job.result() {
            Some(r) => done_json(&*r),
            None => {
                let (events, _) = job.subscribe();
                let stage = events.last().map(|e| e.stage).unwrap_or(JobStage::Queued);
                serde_json::to_value(JobPending {
                    job_id: id.clone(),
                    done: false,
                    stage,
                })
                .map_err(ApiError::internal)?
            }
        }));
    }
    match app.store.get_run(&id).await.map_err(ApiError::internal)? {
        Some(rec) => Ok(Json(done_json(&rec.result))),
        None => match remote_result(&app, &id).await {
            Some(r) => Ok(Json(done_json(&r))),
            None => Err(not_found("job", &id)),
        },
    }
}

/// Cancels a job of this service: a waiting one ends at once (`cancelled`), a tune job on a
/// worker stops after the candidate in progress (`stopping`), an ended one is left as it is
/// (`finished`); a run already on a worker, or sent to an agent, is not interrupted (409: it
/// ends within its time limit).
pub(super) async fn cancel(
    State(app): State<Arc<App>>,
    client: Client,
    Path(id): Path<String>,
) -> Result<Json<CancelAnswer>, ApiError> {
    limit(&app.post_limiter, &client, "requests")?;
    let state = match app.queue.cancel(&id).await {
        Some(Cancelled::Ended) => "cancelled",
        Some(Cancelled::Stopping) => "stopping",
        Some(Cancelled::Finished) => "finished",
        Some(Cancelled::NotCancellable) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "job {id} is a run already on a worker (or an agent): it is not interrupted, \
                     and ends within its time limit"
                ),
            ))
        }
        // Not in memory: an ended job of the history, or no such job.
        None => match app.store.get_run(&id).await.map_err(ApiError::internal)? {
            Some(_) => "finished",
            None => return Err(not_found("job", &id)),
        },
    };
    Ok(Json(CancelAnswer {
        job_id: id,
        state: state.to_string(),
    }))
}

/// A job another front-end of the distributed mode ran (or this one before a restart), from
/// the results bucket.
async fn remote_result(app: &App, id: &str) -> Option<crate::queue::JobResult> {
    app.remote.as_ref()?.stored_result(id).await
}

fn sse_event(e: &JobEvent) -> Event {
    Event::default()
        .event(e.stage.name())
        .json_data(e)
        .unwrap_or_else(|_| Event::default().event("error").data("unserializable event"))
}

pub(super) async fn job_events(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>>, ApiError> {
    type Live = Option<broadcast::Receiver<JobEvent>>;
    let (history, live): (Vec<JobEvent>, Live) = match app.queue.get(&id) {
        Some(job) => {
            let (h, rx) = job.subscribe();
            (h, Some(rx))
        }
        None => match app.store.get_run(&id).await.map_err(ApiError::internal)? {
            Some(rec) => (
                vec![JobEvent {
                    stage: JobStage::Done,
                    step: None,
                    position: None,
                    elapsed_ms: 0.0,
                    result: serde_json::from_value(rec.result).ok().map(Arc::new),
                    tune: None,
                }],
                None,
            ),
            None => match remote_result(&app, &id).await {
                Some(r) => (
                    vec![JobEvent {
                        stage: JobStage::Done,
                        step: None,
                        position: None,
                        elapsed_ms: 0.0,
                        result: Some(Arc::new(r)),
                        tune: None,
                    }],
                    None,
                ),
                None => return Err(not_found("job", &id)),
            },
        },
    };
    let stream = futures_util::stream::unfold(
        (history.into_iter(), live, false),
        |(mut history, live, finished)| async move {
            if finished {
                return None;
            }
            if let Some(e) = history.next() {
                let fin = e.stage == JobStage::Done;
                return Some((Ok(sse_event(&e)), (history, live, fin)));
            }
            let mut rx = live?;
            loop {
                match rx.recv().await {
                    Ok(e) => {
                        let fin = e.stage == JobStage::Done;
                        return Some((Ok(sse_event(&e)), (history, Some(rx), fin)));
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

#[derive(Deserialize)]
pub(super) struct RunsQuery {
    limit: Option<i64>,
}

pub(super) async fn runs(
    State(app): State<Arc<App>>,
    Query(q): Query<RunsQuery>,
) -> Result<Json<Runs>, ApiError> {
    let limit = q.limit.unwrap_or(20).clamp(1, 100);
    let runs = app
        .store
        .recent_runs(limit)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(Runs { runs }))
}
