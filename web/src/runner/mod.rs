//! The runner service's API (issue 5): health, runs streamed as server-sent events, short links.
//! Same origin by default, or a runner URL and bearer token from the settings dialog (kept in
//! this browser's localStorage, never in a shared link). Bodies and answers are the service's
//! own types (`hopfuse_api`): the bodies serialised by serde, the answers deserialised by
//! serde's derived readers (`read::from_str`); the views ([`RunView`], [`Measured`], ...) are
//! built from those typed values and are what the Run pane shows of them.
//!
//! This module is the HTTP client (settings, [`request`], [`ApiError`]); the rest is one module
//! per concern:
//! - `read`: the one JSON reader every answer goes through (and why it is not `from_value`);
//! - `health`: `GET /api/health` (`api::service::Health`) as the status bar's line and a
//!   [`RunMode`];
//! - `requests`: the bodies of a run, a tune and a short link, the job id, cancel and link
//!   answers;
//! - `tune_view`: what the Tune section shows of a tune job's events and result ([`TuneView`]);
//! - `view`: what the Run pane shows of a job result ([`RunView`], [`Measured`], ...);
//! - `result`: a job result (`api::job::JobResult`) made into a [`RunView`];
//! - `peers_profile`: `result.peers` (`api::run::PeersReport`) made into its view.
//!
//! The HTTP exchange itself is `fetch` (over `js::HttpAnswer`), also used to load examples.
//! The tests (`tests.rs`) read every recorded `done` event and health answer
//! (`web/tests/fixtures/`, written by `runner/tests/api_fixtures.rs`, and `docs/recordings/`)
//! into the api types and check what the Run pane shows, compare the reader with serde_json's
//! on every one, and check that a renamed field is serde's error that names it.

mod health;
mod peers_profile;
pub(crate) mod read;
mod requests;
mod result;
#[cfg(test)]
mod tests;
mod tune_view;
mod view;

pub use health::{health, RunMode};
pub use read::from_str as read_json;
pub use requests::{
    cancel_job, create_link, events_url, get_link, link_body, run_body, start_run, start_tune,
    state_of_link, tune_body,
};
pub use result::parse_result;
pub use tune_view::{parse_tune_done, progress_line, TuneRow, TuneView};
pub use view::{
    index_name, Check, Comparison, FakeView, KernelRow, KernelsView, Measured, RunView,
};

use crate::js;
use hopfuse_api::service::ErrorBody;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use wasm_bindgen::JsCast;

/// Where the runner is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Settings {
    /// Empty: the page's own origin.
    #[serde(default)]
    pub url: String,
    #[serde(default)]
    pub token: String,
}

const STORAGE_KEY: &str = "hopfuse.runner";

impl Settings {
    pub fn load() -> Settings {
        crate::storage_get(STORAGE_KEY)
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .and_then(|v| {
                let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                v.is_object().then(|| Settings {
                    url: text("url"),
                    token: text("token"),
                })
            })
            .unwrap_or_default()
    }
    pub fn save(&self) {
        crate::storage_set(STORAGE_KEY, &serde_json::to_string(self).unwrap());
    }
    /// The API root without a trailing slash ("" for the same origin).
    pub fn base(&self) -> String {
        self.url.trim().trim_end_matches('/').to_string()
    }
    /// Where requests go, in words.
    pub fn place(&self) -> String {
        if self.base().is_empty() {
            "this page's origin".into()
        } else {
            self.base()
        }
    }
}

/// One HTTP answer.
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// One HTTP exchange through the page's `fetch` (`js::api_request`, the bearer `token` when not
/// empty): the answer, whatever its status, or why nothing answered.
pub async fn fetch(
    method: &str,
    url: &str,
    token: &str,
    body: Option<String>,
    timeout_ms: u32,
) -> Result<Answer, String> {
    let answer: js::HttpAnswer = js::api_request(method, url, token, body, timeout_ms)
        .await
        .map_err(|e| e.as_string().unwrap_or_else(|| format!("{e:?}")))?
        .unchecked_into();
    Ok(Answer {
        status: answer.status() as u16,
        body: answer.body().unwrap_or_default(),
    })
}

/// What went wrong with a request.
#[derive(Clone, Debug, PartialEq)]
pub enum ApiError {
    /// Nothing answered (network error, CORS refusal, timeout) or what answered is not a runner.
    Unreachable(String),
    /// The runner answered with an error status.
    Http(u16, String),
}

impl ApiError {
    pub fn describe(&self, settings: &Settings) -> String {
        match self {
            ApiError::Unreachable(why) => format!(
                "No runner reachable at {} ({why}). Compiling keeps working in the page; set a \
                 runner URL in Settings to run on a GPU.",
                settings.place()
            ),
            ApiError::Http(503, msg) => format!(
                "The runner cannot run programs right now: {}. Compiling works in the page as usual.",
                plain_reason(msg)
            ),
            ApiError::Http(401, msg) => {
                format!("The runner needs a token ({msg}): set it in Settings.")
            }
            ApiError::Http(s, msg) => format!("The runner answered HTTP {s}: {msg}"),
        }
    }
}

/// A refusal's reason without what the service says to API clients: "runs are unavailable:
/// no usable GPU (...); compiling works (POST /api/compile)" → "no usable GPU (...)".
fn plain_reason(msg: &str) -> &str {
    let m = msg.strip_prefix("runs are unavailable: ").unwrap_or(msg);
    m.split("; compiling works")
        .next()
        .unwrap_or(m)
        .trim_end_matches('.')
}

/// The sentence of an error body (`api::service::ErrorBody`).
fn error_of(body: &str) -> Option<String> {
    read_json::<ErrorBody>(body).ok().map(|e| e.error)
}

/// The message of an error body, or the text itself (a proxy's error page).
fn message_of(body: &str) -> String {
    match error_of(body) {
        Some(e) => e,
        None => {
            let t = body.trim();
            if t.len() > 300 {
                format!("{}…", &t[..t.floor_char_boundary(300)])
            } else {
                t.to_string()
            }
        }
    }
}

/// Sends a request (`body`: a JSON body) and reads the answer as `T` (an answer type of
/// `hopfuse_api`); an answer that is not one is [`ApiError::Unreachable`] with serde's reason
/// (a missing field is named).
pub async fn request<T: DeserializeOwned>(
    settings: &Settings,
    method: &str,
    path: &str,
    body: Option<&impl Serialize>,
    timeout_ms: u32,
) -> Result<T, ApiError> {
    let url = format!("{}{path}", settings.base());
    let body = body.map(|b| serde_json::to_string(b).expect("request bodies serialize"));
    let a = fetch(method, &url, settings.token.trim(), body, timeout_ms)
        .await
        .map_err(ApiError::Unreachable)?;
    // A static file server (no API) answers 404/405/501 for /api/...: that is no runner.
    if matches!(a.status, 404 | 405 | 501) && error_of(&a.body).is_none() {
        return Err(ApiError::Unreachable(format!(
            "HTTP {} for {path}: this server has no runner API",
            a.status
        )));
    }
    if !(200..300).contains(&a.status) {
        return Err(ApiError::Http(a.status, message_of(&a.body)));
    }
    let not_ours = |e: serde_json::Error| {
        ApiError::Unreachable(format!(
            "{path} did not answer what this playground reads ({e})"
        ))
    };
    read_json(&a.body).map_err(not_ours)
}

/// No request body (a GET).
const NO_BODY: Option<&()> = None;
