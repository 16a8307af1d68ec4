//! Short links: `POST /api/links` stores a program and the client's state (the same content
//! gets the same id; a new link counts against the client's hourly bytes, 429 past it, and the
//! store's total, 507 past it: `store::LinkQuota`) and `GET /api/links/{id}` gives them back.

use super::middleware::{limit, not_found, ApiJson, Client};
use super::{ApiError, App};
use crate::store::LinkError;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use hopfuse_api::service::{LinkBody, LinkCreated};
use std::sync::Arc;

pub(super) async fn put_link(
    State(app): State<Arc<App>>,
    client: Client,
    ApiJson(body): ApiJson<LinkBody>,
) -> Result<Json<LinkCreated>, ApiError> {
    limit(&app.post_limiter, &client, "requests")?;
    app.check_program(&body.program)?;
    let link = app
        .store
        .put_link(&body.program, &body.state, &client.0)
        .await
        .map_err(|e| match e {
            LinkError::ClientQuota {
                quota,
                retry_after_s,
                ..
            } => ApiError::too_many(
                format!("links quota: {e} (link_bytes_per_client); retry in {retry_after_s} s"),
                retry_after_s,
            )
            .limit("link_bytes_per_client")
            .max(quota),
            LinkError::Full { max, .. } => ApiError::new(
                StatusCode::INSUFFICIENT_STORAGE,
                format!("links are full: {e} (max_link_bytes); no new link can be stored"),
            )
            .limit("max_link_bytes")
            .max(max),
            LinkError::Store(e) => ApiError::internal(e),
        })?;
    Ok(Json(LinkCreated {
        path: format!("/api/links/{}", link.id),
        id: link.id,
        created_at: link.created_at,
    }))
}

pub(super) async fn get_link(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Json<crate::store::Link>, ApiError> {
    if id.len() > 64 {
        return Err(not_found("link", "(too long)"));
    }
    match app.store.get_link(&id).await.map_err(ApiError::internal)? {
        Some(link) => Ok(Json(link)),
        None => Err(not_found("link", &id)),
    }
}
