//! `hopfuse serve`: the playground's static files and the HTTP API (see `docs/api.md`).
//!
//! Compiles run in the server (a blocking thread per request in a compile slot, as many at
//! once as there are cores, each request within a deadline: `compile_slots.rs`); runs go
//! through the [`Queue`](crate::queue::Queue) to warm `hopfuse worker --serve` child processes.
//! Every error is a JSON `{"error": ...}` with a 4xx/5xx status.
//!
//! This module starts and stops the service; the rest is one module per concern:
//! - `state`: [`App`], what every handler shares (options, queue, store, GPU probe, compile
//!   slots, rate limiters), built once at start;
//! - `router`: the routes, which of them need the token, and the layers around them;
//! - `middleware`: bearer token, CORS, JSON errors for every status under `/api`, the JSON body
//!   extractor with its size limit (413), the client's address and its rate limits (429);
//! - `health`: `GET /api/health`;
//! - `compile`: `POST /api/compile` and `POST /api/inspect`;
//! - `run`: `POST /api/run` and `POST /api/tune`, their checks and their job;
//! - `jobs`: a job's result, its server-sent events and its cancel, and the run history (`GET
//!   /api/runs`);
//! - `links`: short links (`POST /api/links`, `GET /api/links/{id}`);
//! - `connections`: accepting and serving connections, with their read timeouts and cap.

mod compile;
pub mod connections;
mod health;
mod jobs;
mod links;
mod middleware;
mod router;
mod run;
mod state;

// The service's parts in their own modules (split from this file without change); re-exported
// where they were public here.
pub use crate::api_error::ApiError;
pub use crate::serve_args::{default_data_dir, ServeArgs};
pub use connections::ConnectionLimits;
pub use middleware::{ApiJson, Client};
pub use router::router;
pub use state::{App, GpuStatus};

use tracing::info;

/// Runs the service until Ctrl-C or SIGTERM.
pub fn main(args: ServeArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let served = runtime.block_on(serve(args));
    // Compiles whose clients went away may still be running on blocking threads (they cannot
    // be interrupted); dropping the runtime would wait for them. Exit without them.
    runtime.shutdown_background();
    served
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let addr = args.addr;
    let app = App::new(args).await?;
    let limits = app.limits;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr()?;
    // Tests and scripts read this line for the port.
    println!("hopfuse serve: listening on http://{local}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let store = app.store.clone();
    let queue = app.queue.clone();
    // Accepting goes on while the jobs are ended (a run is then refused with a 503), so that
    // the streams watching them get their `done` before the connections are drained.
    let stop = async {
        shutdown_signal().await;
        let ended = queue.stop().await;
        info!("{ended} jobs ended: the service stopped");
    };
    connections::serve(listener, router(app), limits, stop).await;
    // A run admitted while the first jobs were being ended.
    queue.stop().await;
    store.close().await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    info!("shutting down");
}
