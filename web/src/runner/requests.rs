//! The requests the page makes besides health and inspect: the body of `POST /api/run` (with
//! `program_b`, an A/B comparison) and of `POST /api/tune`, the job id they answer, the URL of
//! a job's events, a job's cancel (`POST /api/jobs/{id}/cancel`), and short links (`POST /api/links` with the program and a versioned state, `GET
//! /api/links/{id}` back to a [`crate::share::State`]).

use super::{request, ApiError, Settings, NO_BODY};
use hopfuse_api::service::{CancelAnswer, Link, LinkBody, LinkCreated, RunAccepted, RunBody};
use hopfuse_api::tune::TuneBody;
use serde_json::Value;
use std::collections::BTreeMap;

/// The body of `POST /api/run`; with `program_b`, an A/B comparison (docs/api.md); `scalars`:
/// values for scalar inputs (none: the programs' own).
pub fn run_body(
    program: &str,
    program_b: Option<&str>,
    sizes: &BTreeMap<String, i64>,
    scalars: &BTreeMap<String, f64>,
    iters: u32,
    seed: u64,
) -> RunBody {
    RunBody {
        program: program.to_string(),
        program_b: program_b.map(str::to_string),
        sizes: sizes.clone(),
        scalars: scalars.clone(),
        iters: Some(iters),
        seed: Some(seed),
        ..RunBody::default()
    }
}

/// `POST /api/run` -> the job id.
pub async fn start_run(settings: &Settings, body: &RunBody) -> Result<String, ApiError> {
    let accepted: RunAccepted = request(settings, "POST", "/api/run", Some(body), 15000).await?;
    Ok(accepted.job_id)
}

/// The body of `POST /api/tune`: the program (the tuner sets its schedule aside), the sizes of
/// its symbols, each candidate's iterations and seed; the service's budget.
pub fn tune_body(program: &str, sizes: &BTreeMap<String, i64>, iters: u32, seed: u64) -> TuneBody {
    TuneBody {
        program: program.to_string(),
        sizes: sizes.clone(),
        iters: Some(iters),
        seed: Some(seed),
        ..TuneBody::default()
    }
}

/// `POST /api/tune` -> the job id.
pub async fn start_tune(settings: &Settings, body: &TuneBody) -> Result<String, ApiError> {
    let accepted: RunAccepted = request(settings, "POST", "/api/tune", Some(body), 15000).await?;
    Ok(accepted.job_id)
}

/// `POST /api/jobs/{id}/cancel` -> what the cancel did (`cancelled`, `stopping`, `finished`).
pub async fn cancel_job(settings: &Settings, job: &str) -> Result<String, ApiError> {
    let path = format!("/api/jobs/{}/cancel", js_sys::encode_uri_component(job));
    let answer: CancelAnswer = request(settings, "POST", &path, NO_BODY, 8000).await?;
    Ok(answer.state)
}

/// The URL of a job's events.
pub fn events_url(settings: &Settings, job: &str) -> String {
    format!(
        "{}/api/jobs/{}/events",
        settings.base(),
        js_sys::encode_uri_component(job)
    )
}

/// The body of `POST /api/links`: the program, and the rest of the state as a JSON object with
/// a version (`"v": 1`), so the same program and state always get the same id.
pub fn link_body(state: &crate::share::State) -> LinkBody {
    let mut rest = serde_json::to_value(state).expect("state serializes");
    let obj = rest.as_object_mut().expect("state is an object");
    obj.remove("program");
    obj.insert("v".into(), Value::from(1));
    LinkBody {
        program: state.program.clone(),
        state: rest,
    }
}

/// The state a `GET /api/links/{id}` answer holds (the inverse of [`link_body`]).
pub fn state_of_link(link: &Link) -> Result<crate::share::State, String> {
    let mut state = match &link.state {
        Value::Object(o) => o.clone(),
        Value::Null => serde_json::Map::new(),
        _ => return Err("the link's state is not a playground state".into()),
    };
    match state.remove("v") {
        None => {}
        Some(n) if n == 1 => {}
        Some(n) => {
            return Err(format!(
                "the link's state has version {n}; this playground reads version 1"
            ))
        }
    }
    state.insert("program".into(), Value::from(link.program.as_str()));
    crate::share::State::read(&Value::Object(state))
        .map_err(|e| format!("the link holds no playground state: {e}"))
}

/// `POST /api/links` -> the short id.
pub async fn create_link(
    settings: &Settings,
    state: &crate::share::State,
) -> Result<String, ApiError> {
    let created: LinkCreated = request(
        settings,
        "POST",
        "/api/links",
        Some(&link_body(state)),
        8000,
    )
    .await?;
    Ok(created.id)
}

/// `GET /api/links/{id}` -> the state it holds.
pub async fn get_link(settings: &Settings, id: &str) -> Result<crate::share::State, ApiError> {
    let path = format!("/api/links/{}", js_sys::encode_uri_component(id));
    let link: Link = request(settings, "GET", &path, NO_BODY, 8000).await?;
    state_of_link(&link).map_err(|e| ApiError::Unreachable(format!("link {id}: {e}")))
}
