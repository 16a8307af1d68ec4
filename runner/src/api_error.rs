//! The service's JSON errors: every 4xx/5xx under `/api` is an [`ErrorBody`] (`{"error": ...}`
//! plus, for some, the limit that was exceeded, the program's diagnostics or when to retry),
//! with `Retry-After` on 429/503 and `WWW-Authenticate` on 401. Split from `serve.rs`.

use crate::distributed::frontend::SubmitError;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use hopfuse_api::service::ErrorBody;

/// A JSON error response ([`ErrorBody`]).
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    /// Boxed: handlers return `Result<_, ApiError>` on their hot path.
    body: Box<ErrorBody>,
    retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: Box::new(ErrorBody {
                error: message.into(),
                ..ErrorBody::default()
            }),
            retry_after: None,
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// Names the limit that was exceeded.
    pub(crate) fn limit(mut self, name: impl Into<String>) -> ApiError {
        self.body.limit = Some(name.into());
        self
    }

    /// The limit's value.
    pub(crate) fn max(mut self, max: impl Into<serde_json::Number>) -> ApiError {
        self.body.max = Some(max.into());
        self
    }

    /// A limit in seconds (a JSON float, as `--compile-timeout` is).
    pub(crate) fn max_seconds(mut self, seconds: f64) -> ApiError {
        self.body.max = serde_json::Number::from_f64(seconds);
        self
    }

    pub(crate) fn diagnostics(mut self, diagnostics: Vec<hopfuse::Diagnostic>) -> ApiError {
        self.body.diagnostics = Some(diagnostics);
        self
    }

    /// The same error with its sentence after `prefix` (its limit and diagnostics kept).
    pub(crate) fn prefixed(mut self, prefix: &str) -> ApiError {
        self.body.error = format!("{prefix}{}", self.body.error);
        self
    }

    pub(crate) fn internal(what: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: {what}"),
        )
    }

    pub(crate) fn retry_after(mut self, seconds: u64) -> ApiError {
        self.retry_after = Some(seconds);
        self
    }

    /// The status and body, for unit tests of the rules that make errors.
    #[cfg(test)]
    pub(crate) fn parts(&self) -> (StatusCode, &ErrorBody) {
        (self.status, &self.body)
    }

    pub(crate) fn too_many(message: String, retry_after: u64) -> ApiError {
        let mut e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, message);
        e.body.retry_after_s = Some(retry_after);
        e.retry_after = Some(retry_after);
        e
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, Json(self.body)).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

/// A job that was not queued: 429 at a cap (this service's, the client's, or the distributed
/// mode's stream), 503 when NATS did not take it.
impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> ApiError {
        let full = match e {
            SubmitError::Full(full) => full,
            SubmitError::Unavailable(why) => {
                return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why).retry_after(5)
            }
            SubmitError::TooLarge(why) => {
                return ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, why).limit("max_payload")
            }
        };
        let whose = if full.per_client {
            "you have the most jobs one client may have"
        } else {
            "the queue is full"
        };
        ApiError::too_many(
            format!(
                "{whose} ({} waiting or running); retry in {} s",
                full.cap, full.retry_after_s
            ),
            full.retry_after_s,
        )
        .limit(if full.per_client {
            "client_queue_cap"
        } else {
            "queue_cap"
        })
    }
}
