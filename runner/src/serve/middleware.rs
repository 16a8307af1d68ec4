//! What wraps the handlers: the bearer token (401), CORS for other origins, a JSON error body for
//! every error status under `/api` (axum's own are plain text), the JSON body extractor
//! ([`ApiJson`]: 413 over the body limit, 400 with serde's message), the client's address
//! ([`Client`]) and its per-client rate limits (429 with `Retry-After`), the 404 of a
//! missing resource, and the security headers of every response ([`security_headers`]).

use super::{ApiError, App};
use crate::rate_limit::ClientRateLimiter;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tower_http::cors::{AllowOrigin, CorsLayer};

/// A JSON body: 413 over the body limit, 400 (with serde's message and the path of the field it
/// is about) when it is not the JSON the endpoint takes. No content type is required.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<App>> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &Arc<App>) -> Result<Self, ApiError> {
        let limit = app.limits.body_timeout;
        let read = tokio::time::timeout(limit, Bytes::from_request(req, app))
            .await
            .map_err(|_| {
                ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the request body did not arrive within {} s (body_timeout_s)",
                        limit.as_secs_f64()
                    ),
                )
                .limit("body_timeout_s")
            })?;
        let bytes = read.map_err(|r| {
            if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                let max = app.args.max_body_bytes;
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "the request body is larger than the limit of {max} bytes (max_body_bytes)"
                    ),
                )
                .limit("max_body_bytes")
                .max(max)
            } else {
                ApiError::new(r.status(), r.body_text())
            }
        })?;
        // The field's path (`scalars.k`) in the message: which value of the body is wrong.
        let malformed = |e: String| ApiError::bad_request(format!("malformed JSON request: {e}"));
        let mut de = serde_json::Deserializer::from_slice(&bytes);
        let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            match path.as_str() {
                "." => malformed(e.into_inner().to_string()),
                _ => malformed(format!("`{path}`: {}", e.into_inner())),
            }
        })?;
        de.end().map_err(|e| malformed(e.to_string()))?;
        Ok(ApiJson(value))
    }
}

/// The client a request came from (its IP address), for rate limits and the run history.
pub struct Client(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Client {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(Client(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip().to_string())
                .unwrap_or_else(|| "local".into()),
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Rate limiting

pub(super) fn limit(
    limiter: &ClientRateLimiter,
    client: &Client,
    what: &str,
) -> Result<(), ApiError> {
    limiter.check(&client.0).map_err(|s| {
        ApiError::too_many(
            format!(
                "rate limit: at most {} {what} per minute per client; retry in {s} s",
                limiter.per_minute()
            ),
            s,
        )
    })
}

pub(super) fn not_found(what: &str, id: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no {what} with id `{id}`"))
}

pub(super) fn cors_layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok()),
        )
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION])
            .expose_headers([header::RETRY_AFTER])
            .max_age(Duration::from_secs(3600)),
    )
}

pub(super) async fn auth(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    if let Some(token) = &app.args.token {
        let header = req.headers().get(header::AUTHORIZATION);
        let given = header.and_then(|v| v.to_str().ok()).and_then(bearer_token);
        let ok = given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes()));
        if !ok {
            let msg = match (header, given) {
                (None, _) => "this service requires a token: send `Authorization: Bearer <token>`",
                (Some(_), None) => {
                    "malformed Authorization header: send `Authorization: Bearer <token>` (one \
                     space, no other whitespace)"
                }
                (Some(_), Some(_)) => "wrong token",
            };
            return ApiError::new(StatusCode::UNAUTHORIZED, msg).into_response();
        }
    }
    next.run(req).await
}

/// The token of an `Authorization: Bearer <token>` value, parsed strictly (RFC 6750): the
/// scheme (any case), one space, then a token of visible characters; anything else (two spaces,
/// a tab, trailing whitespace, an empty token) is none.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    let visible = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic());
    (scheme.eq_ignore_ascii_case("bearer") && visible(token)).then_some(token)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The playground page's Content-Security-Policy, less `frame-ancestors`: its scripts are
/// files of its own origin (`index.html` has no inline script: `web/boot.js` starts it), the
/// wasm is compiled by `WebAssembly.instantiateStreaming` (`'wasm-unsafe-eval'`), styles may be
/// inline (Leptos sets `style` attributes, CodeMirror adds style elements, the pipeline and
/// profile panes are HTML with `style`), the favicon is a `data:` URL, and the page calls the
/// runner it is set to, which may be another origin (`connect-src` http and https).
pub const PAGE_CSP: &str = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; \
                            style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
                            connect-src 'self' http: https:; object-src 'none'; \
                            base-uri 'none'; form-action 'none'";

/// The API's Content-Security-Policy: its answers are data, never a page.
pub const API_CSP: &str = "default-src 'none'; frame-ancestors 'none'";

/// Security headers on every response: `X-Content-Type-Options: nosniff`, `Referrer-Policy:
/// same-origin`, and a Content-Security-Policy: [`API_CSP`] under `/api`, else [`PAGE_CSP`]
/// with `frame-ancestors 'self'`, or `*` for the embed view (`?embed=PANE`), which other sites
/// frame.
pub(super) async fn security_headers(req: Request, next: Next) -> Response {
    let api = req.uri().path().starts_with("/api");
    let embed = req
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv.split('=').next() == Some("embed")));
    let mut resp = next.run(req).await;
    let headers = resp.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    let csp = match (api, embed) {
        (true, _) => API_CSP.to_string(),
        (false, true) => format!("{PAGE_CSP}; frame-ancestors *"),
        (false, false) => format!("{PAGE_CSP}; frame-ancestors 'self'"),
    };
    if let Ok(v) = HeaderValue::from_str(&csp) {
        headers.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    resp
}

/// Every error status under /api has a JSON body (axum's own 404/405/413 are plain text).
pub(super) async fn json_errors(req: Request, next: Next) -> Response {
    let api = req.uri().path().starts_with("/api");
    let resp = next.run(req).await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/event-stream"));
    if !api || status.as_u16() < 400 || is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let mut json_resp = ApiError::new(status, message).into_response();
    for (k, v) in parts.headers.iter() {
        if k != header::CONTENT_TYPE && k != header::CONTENT_LENGTH {
            json_resp.headers_mut().insert(k.clone(), v.clone());
        }
    }
    json_resp
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    /// Issue 39 item 12: `Bearer  TOKEN` (two spaces) was accepted (the token was trimmed).
    #[test]
    fn the_bearer_header_is_parsed_strictly() {
        assert_eq!(bearer_token("Bearer s3cret"), Some("s3cret"));
        assert_eq!(bearer_token("bearer s3cret"), Some("s3cret"));
        for bad in [
            "Bearer  s3cret",
            "Bearer s3cret ",
            "Bearer\ts3cret",
            "Bearer ",
            "Bearer",
            "Basic s3cret",
            "Bearer s3 cret",
            " Bearer s3cret",
        ] {
            assert_eq!(bearer_token(bad), None, "{bad:?}");
        }
    }
}
