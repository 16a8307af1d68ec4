//! `GET /api/health`: version, worker kind, GPU and NVRTC (or why there is none), whether runs
//! are available, the queue and compile slots, the distributed mode's agents, the runs waiting
//! for the database, and every limit.

use super::App;
use crate::engine;
use axum::extract::State;
use axum::Json;
use hopfuse_api::service::{CompileStats, Health, Limits};
use std::sync::Arc;

pub(super) async fn health(State(app): State<Arc<App>>) -> Json<Health> {
    let a = &app.args;
    let distributed = match &app.remote {
        Some(remote) => Some(remote.health().await),
        None => None,
    };
    Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        worker: if app.remote.is_some() {
            "agents"
        } else if a.fake_worker {
            "fake"
        } else {
            "gpu"
        }
        .into(),
        gpu: app.gpu.gpu.clone(),
        gpu_reason: app.gpu.reason.clone(),
        nvrtc: app.gpu.nvrtc.clone(),
        run_available: app.run_unavailable().is_none(),
        run_unavailable_reason: app.run_unavailable(),
        queue: app.queue.stats(),
        distributed,
        compiles: CompileStats {
            running: app.compiles.running(),
            slots: app.compiles.total(),
            lowered: engine::lowerings(),
        },
        run_backlog: app.store.backlog(),
        limits: Limits {
            max_body_bytes: a.max_body_bytes,
            max_program_bytes: a.max_program_bytes,
            max_iters: a.max_iters,
            max_warmup: a.max_warmup,
            max_tensor_bytes: a.max_tensor_bytes,
            queue_cap: a.queue_cap,
            client_queue_cap: a.client_queue_cap,
            runs_per_minute: a.runs_per_minute,
            requests_per_minute: a.requests_per_minute,
            job_timeout_s: a.job_timeout,
            compile_timeout_s: a.compile_timeout,
            tune_budget_s: a.tune_budget,
            keep_runs: a.keep_runs,
            keep_runs_days: a.keep_runs_days,
            keep_runs_bytes: a.keep_runs_bytes,
            token_required: a.token.is_some(),
        },
        uptime_s: app.started.elapsed().as_secs_f64(),
    })
}
