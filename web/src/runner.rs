//! The runner service's API (issue 5): health, runs streamed as server-sent events, short links.
//! Same origin by default, or a runner URL and bearer token from the settings dialog (kept in
//! this browser's localStorage, never in a shared link).

use crate::js;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use wasm_bindgen::JsValue;

/// Where the runner is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
            .and_then(|s| serde_json::from_str(&s).ok())
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
            ApiError::Http(503, msg) => format!("The runner has no GPU available: {msg}"),
            ApiError::Http(401, msg) => {
                format!("The runner wants a token (HTTP 401): {msg}. Set it in Settings.")
            }
            ApiError::Http(s, msg) => format!("The runner answered HTTP {s}: {msg}"),
        }
    }
}

/// The message of an error body: its `error` or `message` field, or the text itself.
fn message_of(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            ["error", "message", "reason"]
                .iter()
                .find_map(|k| v.get(*k).and_then(Value::as_str).map(str::to_string))
        })
        .unwrap_or_else(|| {
            let t = body.trim();
            if t.len() > 300 {
                format!("{}…", &t[..t.floor_char_boundary(300)])
            } else {
                t.to_string()
            }
        })
}

pub async fn request(
    settings: &Settings,
    method: &str,
    path: &str,
    body: Option<&Value>,
    timeout_ms: u32,
) -> Result<Value, ApiError> {
    let url = format!("{}{path}", settings.base());
    let answer = js::api_request(
        method,
        &url,
        settings.token.trim(),
        body.map(|b| b.to_string()),
        timeout_ms,
    )
    .await
    .map_err(|e| ApiError::Unreachable(e.as_string().unwrap_or_else(|| format!("{e:?}"))))?;
    let get = |k: &str| js_sys::Reflect::get(&answer, &JsValue::from_str(k)).ok();
    let a = Answer {
        status: get("status").and_then(|v| v.as_f64()).unwrap_or(0.0) as u16,
        body: get("body").and_then(|v| v.as_string()).unwrap_or_default(),
    };
    // A static file server (no API) answers 404/405/501 for /api/...: that is no runner.
    if matches!(a.status, 404 | 405 | 501) && serde_json::from_str::<Value>(&a.body).is_err() {
        return Err(ApiError::Unreachable(format!(
            "HTTP {} for {path}: this server has no runner API",
            a.status
        )));
    }
    if !(200..300).contains(&a.status) {
        return Err(ApiError::Http(a.status, message_of(&a.body)));
    }
    serde_json::from_str(&a.body)
        .map_err(|_| ApiError::Unreachable(format!("{path} did not answer JSON")))
}

/// `GET /api/health`, described in one line, and whether a GPU is there.
pub async fn health(settings: &Settings) -> Result<(String, bool), ApiError> {
    let v = request(settings, "GET", "/api/health", None, 4000).await?;
    let gpu = v.get("gpu").filter(|g| !g.is_null());
    let name = gpu
        .and_then(|g| g.as_str().or_else(|| g.get("name").and_then(Value::as_str)))
        .or_else(|| v.get("gpu_name").and_then(Value::as_str));
    let version = v.get("version").and_then(Value::as_str).unwrap_or("");
    match name {
        Some(n) => Ok((format!("runner {version} · {n}").replace("  ", " "), true)),
        None => {
            let why = v
                .get("reason")
                .or_else(|| v.get("gpu_error"))
                .and_then(Value::as_str)
                .unwrap_or("no GPU");
            Ok((
                format!("runner {version} · {why}").replace("  ", " "),
                false,
            ))
        }
    }
}

/// `POST /api/run` -> the job id.
pub async fn start_run(
    settings: &Settings,
    program: &str,
    sizes: &BTreeMap<String, i64>,
    iters: u32,
    seed: u64,
) -> Result<String, ApiError> {
    let body =
        serde_json::json!({ "program": program, "sizes": sizes, "iters": iters, "seed": seed });
    let v = request(settings, "POST", "/api/run", Some(&body), 15000).await?;
    v.get("job_id")
        .or_else(|| v.get("id"))
        .and_then(|id| {
            id.as_str()
                .map(str::to_string)
                .or_else(|| id.as_u64().map(|n| n.to_string()))
        })
        .ok_or_else(|| ApiError::Unreachable("/api/run answered without a job_id".into()))
}

/// The URL of a job's events.
pub fn events_url(settings: &Settings, job: &str) -> String {
    format!(
        "{}/api/jobs/{}/events",
        settings.base(),
        js_sys::encode_uri_component(job)
    )
}

/// `POST /api/links` with the versioned state -> the short id.
pub async fn create_link(settings: &Settings, state: &str) -> Result<String, ApiError> {
    let v = request(
        settings,
        "POST",
        "/api/links",
        Some(&serde_json::json!({ "state": state })),
        8000,
    )
    .await?;
    v.get("id")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| ApiError::Unreachable("/api/links answered without an id".into()))
}

/// `GET /api/links/{id}` -> the versioned state it holds.
pub async fn get_link(settings: &Settings, id: &str) -> Result<String, ApiError> {
    let path = format!("/api/links/{}", js_sys::encode_uri_component(id));
    let v = request(settings, "GET", &path, None, 8000).await?;
    match v.get("state") {
        Some(Value::String(s)) => Ok(s.clone()),
        // A state stored as an object: encode it the way a fragment holds it.
        Some(o @ Value::Object(_)) => serde_json::from_value::<crate::share::State>(o.clone())
            .map(|s| crate::share::encode(&s))
            .map_err(|e| {
                ApiError::Unreachable(format!("link {id} holds no playground state: {e}"))
            }),
        _ => Err(ApiError::Unreachable(format!("link {id} holds no state"))),
    }
}

/// One output's validation.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    pub output: String,
    pub passed: bool,
    pub rel_l2: Option<f64>,
    pub max_abs: Option<f64>,
    pub tolerance: Option<f64>,
    pub elements: Option<u64>,
    pub non_finite: u64,
}

/// What a finished run shows (fields are optional: the result is read leniently).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct RunView {
    pub passed: Option<bool>,
    pub device: Option<String>,
    pub launch: Option<String>,
    pub min_us: Option<f64>,
    pub median_us: Option<f64>,
    pub max_us: Option<f64>,
    pub samples: Option<u64>,
    pub gbps: Option<f64>,
    pub tflops: Option<f64>,
    pub ceiling_gbps: Option<f64>,
    pub ratio: Option<f64>,
    pub checks: Vec<Check>,
    pub seed: Option<u64>,
    pub registers: Option<i64>,
    pub static_smem: Option<i64>,
    pub dynamic_smem: Option<i64>,
    pub local_bytes: Option<i64>,
    pub nvrtc_ms: Option<f64>,
    pub nvrtc_log: Option<String>,
    pub error: Option<String>,
}

fn f(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, k| v.get(*k))?.as_f64()
}

/// Reads the `done` event's result (the runner's `RunResult`, possibly under `result`).
pub fn parse_result(data: &str) -> RunView {
    let Ok(root) = serde_json::from_str::<Value>(data) else {
        return RunView {
            error: Some(format!("the runner's result is not JSON: {data}")),
            ..RunView::default()
        };
    };
    let r = root
        .get("result")
        .filter(|r| r.is_object())
        .unwrap_or(&root);
    let error = ["error", "message"]
        .iter()
        .find_map(|k| {
            root.get(*k).or_else(|| r.get(*k)).and_then(|e| {
                e.as_str()
                    .map(str::to_string)
                    .or_else(|| e.get("message").and_then(Value::as_str).map(str::to_string))
            })
        })
        .filter(|_| r.get("timing").is_none());
    let checks = r
        .get("validation")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|c| Check {
                    output: c
                        .get("output")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_string(),
                    passed: c.get("passed").and_then(Value::as_bool).unwrap_or(false),
                    rel_l2: f(c, &["rel_l2"]),
                    max_abs: f(c, &["max_abs"]),
                    tolerance: f(c, &["tolerance"]),
                    elements: c.get("elements").and_then(Value::as_u64),
                    non_finite: c.get("non_finite").and_then(Value::as_u64).unwrap_or(0),
                })
                .collect()
        })
        .unwrap_or_default();
    let launch = r.get("launch").map(|l| {
        let dims = |k: &str| {
            l.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|x| x.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        format!("grid ({})  block ({})", dims("grid"), dims("block"))
    });
    let i = |path: &[&str]| f(r, path).map(|x| x as i64);
    RunView {
        passed: r.get("passed").and_then(Value::as_bool),
        device: r
            .get("device")
            .and_then(|d| d.get("name").or(Some(d)))
            .and_then(Value::as_str)
            .map(str::to_string),
        launch,
        min_us: f(r, &["timing", "min_us"]),
        median_us: f(r, &["timing", "median_us"]),
        max_us: f(r, &["timing", "max_us"]),
        samples: r
            .get("timing")
            .and_then(|t| t.get("samples"))
            .and_then(Value::as_u64),
        gbps: f(r, &["gbps"]),
        tflops: f(r, &["tflops"]),
        ceiling_gbps: f(r, &["copy", "gbps"]).or_else(|| f(r, &["ceiling", "gbps"])),
        ratio: f(r, &["fraction_of_copy"]).or_else(|| f(r, &["ratio"])),
        checks,
        seed: r.get("seed").and_then(Value::as_u64),
        registers: i(&["attributes", "registers_per_thread"]),
        static_smem: i(&["attributes", "static_smem_bytes"]),
        dynamic_smem: i(&["launch", "dynamic_smem_bytes"]),
        local_bytes: i(&["attributes", "local_bytes_per_thread"]),
        nvrtc_ms: f(r, &["nvrtc_ms"]),
        nvrtc_log: ["nvrtc_log", "log"]
            .iter()
            .find_map(|k| r.get(*k).or_else(|| root.get(*k)))
            .and_then(Value::as_str)
            .map(str::to_string),
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_run_result() {
        let v = parse_result(
            r#"{"result":{"passed":true,"device":{"name":"NVIDIA H100"},"seed":1,
            "launch":{"grid":[8,1,1],"block":[128,1,1],"dynamic_smem_bytes":0},
            "attributes":{"registers_per_thread":20,"local_bytes_per_thread":0,"static_smem_bytes":0},
            "timing":{"samples":100,"min_us":1.0,"median_us":2.5,"max_us":3.0},
            "gbps":2900.5,"copy":{"gbps":3000.0},"fraction_of_copy":0.97,
            "validation":[{"output":"c","passed":true,"rel_l2":1e-7,"max_abs":2e-7,"tolerance":1e-5,"elements":64}],
            "nvrtc_log":""}}"#,
        );
        assert_eq!(v.median_us, Some(2.5));
        assert_eq!(v.ratio, Some(0.97));
        assert_eq!(v.registers, Some(20));
        assert_eq!(v.device.as_deref(), Some("NVIDIA H100"));
        assert_eq!(
            v.launch.as_deref(),
            Some("grid (8, 1, 1)  block (128, 1, 1)")
        );
        assert!(v.checks[0].passed && v.error.is_none());
        let e = parse_result(r#"{"error":"timed out: the kernel did not finish"}"#);
        assert_eq!(
            e.error.as_deref(),
            Some("timed out: the kernel did not finish")
        );
    }
}
