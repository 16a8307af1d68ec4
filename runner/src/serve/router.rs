//! The routes: every endpoint under `/api` but health needs the token when one is set; an unknown
//! `/api` path is a JSON 404; anything else is the playground's files. Around them: the body
//! limit, JSON errors, a caught panic as a 500, when asked for, CORS, and the security headers.

use super::middleware::{auth, cors_layer, json_errors, security_headers};
use super::{compile, health, jobs, links, run};
use super::{ApiError, App};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::Router;
use std::sync::Arc;
use tower_http::catch_panic::CatchPanicLayer;

pub fn router(app: Arc<App>) -> Router {
    let protected = Router::new()
        .route("/api/compile", post(compile::compile))
        .route("/api/inspect", post(compile::inspect))
        .route("/api/run", post(run::run))
        .route("/api/tune", post(run::tune))
        .route("/api/jobs/{id}", get(jobs::job))
        .route("/api/jobs/{id}/events", get(jobs::job_events))
        .route("/api/jobs/{id}/cancel", post(jobs::cancel))
        .route("/api/links", post(links::put_link))
        .route("/api/links/{id}", get(links::get_link))
        .route("/api/runs", get(jobs::runs))
        .route_layer(middleware::from_fn_with_state(app.clone(), auth));
    let mut router = Router::new()
        .merge(protected)
        .route("/api/health", get(health::health))
        .route("/api", any(api_not_found))
        .route("/api/{*rest}", any(api_not_found))
        .fallback(static_files)
        .layer(axum::extract::DefaultBodyLimit::max(
            app.args.max_body_bytes,
        ))
        .layer(middleware::from_fn(json_errors))
        .layer(CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                ApiError::internal("the server panicked on this request (a bug: please report it)")
                    .into_response()
            },
        ))
        .with_state(app.clone());
    if let Some(cors) = cors_layer(&app.args.cors_origins) {
        router = router.layer(cors);
    }
    // Outermost: on every answer, CORS preflights and panics included.
    router.layer(middleware::from_fn(security_headers))
}

async fn api_not_found(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no such API endpoint: {method} {}", uri.path()),
    )
}

/// The playground's files (`crate::static_files`): precompressed, with ETags.
async fn static_files(State(app): State<Arc<App>>, req: Request) -> Response {
    crate::static_files::serve(&app.args.static_dir, req).await
}
