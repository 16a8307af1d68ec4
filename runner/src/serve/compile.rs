//! `POST /api/compile` (the program lowered in a compile slot: the CUDA, the IR after every
//! pass, the launch plan, or the diagnostics) and `POST /api/inspect` (PTX and SASS with their
//! line map, built in a `hopfuse worker --inspect` child, at most one per compile slot).

use super::middleware::{limit, ApiJson, Client};
use super::{ApiError, App};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use hopfuse::CompileOptions;
use hopfuse_api::inspect::InspectBody;
use hopfuse_api::service::{CompileAnswer, CompileBody, PassIr};
use std::sync::Arc;
use std::time::Instant;

pub(super) async fn compile(
    State(app): State<Arc<App>>,
    client: Client,
    ApiJson(body): ApiJson<CompileBody>,
) -> Result<Json<CompileAnswer>, ApiError> {
    limit(&app.post_limiter, &client, "requests")?;
    app.check_program(&body.program)?;
    let index_type = body.index.unwrap_or_default();
    let program = body.program;
    let out = app
        .compile(move || {
            let start = Instant::now();
            let options = CompileOptions {
                index_type,
                ..CompileOptions::default()
            };
            let result = crate::prepare::lower_program(&program, &options);
            let lower_ms = start.elapsed().as_secs_f64() * 1e3;
            match result.map(one_answer) {
                Ok(c) => CompileAnswer {
                    passes: c.passes.iter().map(PassIr::from).collect(),
                    cuda: Some(c.cuda),
                    plan: Some(c.plan),
                    diagnostics: vec![],
                    lower_ms,
                },
                Err(d) => CompileAnswer {
                    cuda: None,
                    passes: vec![],
                    plan: None,
                    diagnostics: d.0,
                    lower_ms,
                },
            }
        })
        .await?;
    Ok(Json(out))
}

/// The answer's one compilation: a fusion split into kernels answers every kernel's CUDA in
/// turn, each under a header line naming it, its scheduler and why it ends there, with the
/// first kernel's passes and plan.
fn one_answer(compiled: hopfuse::Compiled) -> hopfuse::Compilation {
    match compiled {
        hopfuse::Compiled::One { compilation, .. } => *compilation,
        hopfuse::Compiled::Segmented(s) => {
            let cuda = s.cuda_listing();
            let mut first = s.kernels.into_iter().next().expect("a split has kernels");
            first.cuda = cuda;
            first
        }
    }
}

/// PTX and SASS of a program (`crate::inspect`): 503 at once without NVRTC; else lowered in a
/// compile slot within the compile deadline (as `POST /api/compile` and `POST /api/run`), then
/// built in a child process (an inspection slot, waited for within the same deadline).
pub(super) async fn inspect(
    State(app): State<Arc<App>>,
    client: Client,
    ApiJson(body): ApiJson<InspectBody>,
) -> Result<Json<crate::inspect::Inspection>, ApiError> {
    use crate::inspect::ServiceError;
    limit(&app.post_limiter, &client, "requests")?;
    app.check_program(&body.program)?;
    let service_error = |e| match e {
        ServiceError::BadRequest {
            message,
            diagnostics,
        } => {
            let e = ApiError::bad_request(message);
            match diagnostics {
                Some(d) => e.diagnostics(d),
                None => e,
            }
        }
        ServiceError::Unavailable(m) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, m),
        ServiceError::Unprocessable(m) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, m),
        ServiceError::Internal(m) => ApiError::internal(m),
    };
    if !app.inspect_nvrtc {
        return Err(service_error(ServiceError::Unavailable(format!(
            "PTX and SASS are unavailable on this service: {}",
            crate::nvrtc::NvrtcError::LibraryMissing
        ))));
    }
    let request = crate::inspect::InspectRequest {
        file: "playground.hf".into(),
        source: body.program,
        sizes: body.sizes,
        index: body.index,
        generic: false,
    };
    let (compilation, variant) = app
        .compile(move || crate::inspect::lower_for_service(&request))
        .await?
        .map_err(service_error)?;
    let deadline = app.compiles.deadline();
    let _permit = tokio::time::timeout(deadline, app.inspect_slots.acquire())
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "every inspection slot stayed busy for the compile deadline of {} s; retry \
                     later",
                    deadline.as_secs_f64()
                ),
            )
            .limit("compile_timeout_s")
            .retry_after(deadline.as_secs().max(1))
        })?
        .map_err(ApiError::internal)?;
    crate::inspect::build_in_child(
        &app.worker_exe,
        app.inspect_cache.clone(),
        compilation,
        variant,
    )
    .await
    .map(Json)
    .map_err(service_error)
}
