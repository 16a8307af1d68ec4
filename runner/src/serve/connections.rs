//! The service's connections: accepted here (not by `axum::serve`, which has no read timeouts),
//! each served as HTTP/1.1 by hyper with the router as its service.
//!
//! Takes the listener, the router and [`ConnectionLimits`] (from `hopfuse serve`'s options).
//! Guarantees that no connection is held by a client that does not send: the request headers
//! must arrive within `header_timeout` of the connection opening or of its previous response
//! (hyper's header read timeout, which also closes a silent or idle keep-alive connection), a
//! body within `body_timeout` (`middleware::ApiJson`: 408), and at most `max_connections` are
//! open at once: past it a new connection is answered 503 with `Retry-After` and closed, so
//! the service keeps file descriptors for its database, workers and `/api/health`. On stop it
//! accepts no more and gives open connections [`DRAIN`] to finish.

pub use crate::serve_args::ConnectionLimits;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt;
use tracing::{debug, warn};

/// How long open connections (event streams above all) may go on after a stop.
pub const DRAIN: Duration = Duration::from_secs(5);

/// Accepts and serves connections until `stop` resolves, then drains them for [`DRAIN`].
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    stop: impl std::future::Future<Output = ()>,
) {
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, most likely: let some close before retrying.
                    warn!("cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        // Without it a response written in two pieces waits for the client's delayed ACK
        // (about 40 ms on Linux) before its second piece goes out.
        if let Err(e) = tcp.set_nodelay(true) {
            warn!("cannot set TCP_NODELAY on a connection: {e}");
        }
        let Ok(permit) = open.clone().try_acquire_owned() else {
            tokio::spawn(refuse(tcp, limits.max_connections));
            continue;
        };
        let service = router
            .clone()
            .map_request(move |mut request: axum::extract::Request<_>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            });
        let service = hyper_util::service::TowerToHyperService::new(service);
        let connection = graceful.watch(http.serve_connection(TokioIo::new(tcp), service));
        tokio::spawn(async move {
            let _open = permit;
            if let Err(e) = connection.await {
                debug!("connection from {peer}: {e}");
            }
        });
    }
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(DRAIN) => {
            warn!("closing connections still open after {} s", DRAIN.as_secs())
        }
    }
}

/// Answers a connection past `--max-connections` with a 503 and closes it (its request, unread,
/// is drained briefly so the close does not reset the answer away).
async fn refuse(mut tcp: TcpStream, max: usize) {
    let body = serde_json::json!({
        "error": format!(
            "the service has its maximum of {max} connections open; retry shortly"
        ),
        "limit": "max_connections",
        "max": max,
    })
    .to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        tcp.write_all(answer.as_bytes()).await?;
        tcp.shutdown().await?;
        let mut sink = [0u8; 1024];
        while tcp.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}
