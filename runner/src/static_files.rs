//! The playground's static files for `hopfuse serve`: everything under `--static-dir` (dist/),
//! through tower-http's `ServeDir`.
//!
//! Takes a request for a path outside `/api`; answers with the file, preferring the precompressed
//! sibling that `scripts/build-web.sh` writes next to each file (`x.br`, then `x.gz`) when the
//! browser accepts that encoding (with `Vary: Accept-Encoding`). Every answer carries ServeDir's
//! `ETag` and `Last-Modified` and `Cache-Control: no-cache`: the file names are not content-hashed,
//! so a browser revalidates each file (a `304 Not Modified` without a body when it is unchanged)
//! and never runs an old wasm next to a new page after a rebuild. While the directory does not
//! exist, `/` answers a short HTML note saying so.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use std::path::Path;
use tower::ServiceExt;
use tower_http::services::ServeDir;

const NO_PLAYGROUND: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>hopfuse</title></head>
<body style="font-family: sans-serif; max-width: 42em; margin: 3em auto">
<h1>hopfuse serve</h1>
<p>The playground's files are not built yet (no <code>STATIC_DIR</code>). The API works:
see <code>docs/api.md</code>, or try <a href="/api/health"><code>GET /api/health</code></a>.</p>
</body></html>
"#;

/// Answers `req` from the files under `dir`.
pub async fn serve(dir: &Path, req: Request) -> Response {
    if !dir.is_dir() {
        return if req.uri().path() == "/" || req.uri().path() == "/index.html" {
            Html(NO_PLAYGROUND.replace("STATIC_DIR", &dir.display().to_string())).into_response()
        } else {
            (StatusCode::NOT_FOUND, "not found").into_response()
        };
    }
    let files = ServeDir::new(dir)
        .append_index_html_on_directories(true)
        .precompressed_br()
        .precompressed_gzip();
    let mut resp = match files.oneshot(req).await {
        Ok(resp) => resp.map(Body::new),
        Err(e) => match e {},
    };
    if resp.status().is_success() || resp.status() == StatusCode::NOT_MODIFIED {
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    fn get(path: &str, headers: &[(header::HeaderName, &str)]) -> Request {
        let mut b = Request::builder().method(Method::GET).uri(path);
        for (k, v) in headers {
            b = b.header(k, *v);
        }
        b.body(Body::empty()).unwrap()
    }

    async fn body(resp: Response) -> Vec<u8> {
        axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap()
            .to_vec()
    }

    /// A dist/ of the test's own: tests run at once, and rewriting a shared one changes the
    /// ETags another test compares.
    fn dist(test: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("hopfuse-static-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("index.html"), "<h1>page</h1>").unwrap();
        std::fs::write(dir.join("app.wasm"), b"plain wasm").unwrap();
        std::fs::write(dir.join("app.wasm.br"), b"brotli wasm").unwrap();
        std::fs::write(dir.join("app.wasm.gz"), b"gzip wasm").unwrap();
        std::fs::write(dir.join("style.css"), "body {}").unwrap();
        std::fs::write(dir.join("style.css.gz"), b"gzip css").unwrap();
        dir
    }

    #[tokio::test]
    async fn precompressed_files_are_chosen_by_accept_encoding() {
        let dir = dist("encoding");
        let br = serve(
            &dir,
            get(
                "/app.wasm",
                &[(header::ACCEPT_ENCODING, "gzip, deflate, br")],
            ),
        )
        .await;
        assert_eq!(br.status(), StatusCode::OK);
        assert_eq!(br.headers()[header::CONTENT_ENCODING], "br");
        assert_eq!(br.headers()[header::CONTENT_TYPE], "application/wasm");
        assert_eq!(br.headers()[header::VARY], "accept-encoding");
        assert_eq!(br.headers()[header::CACHE_CONTROL], "no-cache");
        assert_eq!(body(br).await, b"brotli wasm");

        let gz = serve(&dir, get("/app.wasm", &[(header::ACCEPT_ENCODING, "gzip")])).await;
        assert_eq!(gz.headers()[header::CONTENT_ENCODING], "gzip");
        assert_eq!(body(gz).await, b"gzip wasm");

        let plain = serve(&dir, get("/app.wasm", &[])).await;
        assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
        assert_eq!(body(plain).await, b"plain wasm");

        // No .br sibling: gzip even when brotli is accepted.
        let css = serve(
            &dir,
            get("/style.css", &[(header::ACCEPT_ENCODING, "br, gzip")]),
        )
        .await;
        assert_eq!(css.headers()[header::CONTENT_ENCODING], "gzip");
        assert_eq!(body(css).await, b"gzip css");
    }

    #[tokio::test]
    async fn an_unchanged_file_is_not_sent_again() {
        let dir = dist("etag");
        let first = serve(&dir, get("/", &[])).await;
        assert_eq!(first.status(), StatusCode::OK);
        let etag = first.headers()[header::ETAG].to_str().unwrap().to_string();
        assert_eq!(body(first).await, b"<h1>page</h1>");
        let again = serve(&dir, get("/index.html", &[(header::IF_NONE_MATCH, &etag)])).await;
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(again.headers()[header::CACHE_CONTROL], "no-cache");
        assert!(body(again).await.is_empty());
        let other = serve(
            &dir,
            get("/", &[(header::IF_NONE_MATCH, "\"something-else\"")]),
        )
        .await;
        assert_eq!(other.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn missing_files_and_a_missing_directory() {
        let dir = dist("missing");
        let missing = serve(&dir, get("/nothing.js", &[])).await;
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        assert!(missing.headers().get(header::CACHE_CONTROL).is_none());
        let none = dir.join("no-such-dist");
        let note = serve(&none, get("/", &[])).await;
        assert_eq!(note.status(), StatusCode::OK);
        assert!(String::from_utf8(body(note).await)
            .unwrap()
            .contains("not built yet"));
        assert_eq!(
            serve(&none, get("/x.js", &[])).await.status(),
            StatusCode::NOT_FOUND
        );
    }
}
