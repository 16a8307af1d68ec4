//! Tune jobs (`POST /api/tune`) with the fake worker: each candidate's steps as events, the
//! result's table and candidates, the checks of the body, cancelling a tune on a worker and a
//! job that waits, and a run that cannot be cancelled.

use crate::support::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn tune_body(extra_comment: &str) -> Value {
    json!({
        "program": format!("{extra_comment}\n{}", example("add.hf")),
        "sizes": {"M": 256, "N": 256},
        "iters": 5,
    })
}

async fn submit_tune(s: &Server, c: &reqwest::Client, body: &Value) -> String {
    let (status, v, _) = post(c, s.url("/api/tune"), body.to_string()).await;
    assert_eq!(status, 202, "{v}");
    assert_eq!(
        v["events"],
        format!("/api/jobs/{}/events", v["job_id"].as_str().unwrap())
    );
    v["job_id"].as_str().unwrap().to_string()
}

/// The `tune` objects of a job's events, in order.
fn tune_steps(events: &[(String, Value)]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|(_, e)| e.get("tune").cloned())
        .collect()
}

#[tokio::test]
async fn a_tune_job_reports_each_candidate_and_ends_with_the_table() {
    let dir = temp_dir("tune-fake");
    let s = Server::start(&dir, &["--fake-worker"]);
    let c = client();
    let id = submit_tune(&s, &c, &tune_body("")).await;
    let (events, result) = events_with_data(&s, &c, &id).await;
    assert_eq!(events.first().unwrap().0, "queued");
    assert_eq!(events.last().unwrap().0, "done");

    // The fake worker times nothing: every candidate is compiled, then checked (or refused).
    assert_eq!(result["status"], "fake", "{result}");
    assert_eq!(result["fake"], true);
    let tune = &result["tune"];
    let candidates = tune["candidates"].as_array().unwrap();
    assert!(candidates.len() > 1, "{tune}");
    let of = candidates.len();
    assert_eq!(tune["winner"], Value::Null);
    assert_eq!(tune["cancelled"], false);
    assert_eq!(tune["budget_s"], 60.0);
    assert!(tune["table"]
        .as_str()
        .unwrap()
        .starts_with("| # | parameters |"));
    for (i, cand) in candidates.iter().enumerate() {
        let schedule = cand["schedule"].as_str().unwrap();
        assert!(schedule.starts_with("schedule {\n"), "{cand}");
        assert!(!cand["parameters"].as_str().unwrap().is_empty() || i == 0);
        assert!(
            ["checked", "refused"].contains(&cand["outcome"].as_str().unwrap()),
            "{cand}"
        );
    }

    // Each candidate: compiled then checked, or refused with why; candidate i of n.
    let steps = tune_steps(&events);
    for (i, cand) in candidates.iter().enumerate() {
        let mine: Vec<&Value> = steps.iter().filter(|p| p["candidate"] == i + 1).collect();
        assert!(mine.iter().all(|p| p["of"] == of), "{mine:?}");
        let names: Vec<&str> = mine.iter().map(|p| p["step"].as_str().unwrap()).collect();
        match cand["outcome"].as_str().unwrap() {
            "checked" => assert_eq!(names, ["compiled", "checked"], "{mine:?}"),
            _ => {
                assert_eq!(names, ["refused"], "{mine:?}");
                assert!(!mine[0]["why"].as_str().unwrap().is_empty());
            }
        }
    }
    // The events of a step have its stage's name.
    for (name, e) in &events {
        match e["tune"]["step"].as_str() {
            Some("compiled" | "refused") => assert_eq!(name, "compiling"),
            Some("checked") => assert_eq!(name, "running"),
            _ => {}
        }
    }
    // The job's result is kept as a run's is.
    let (status, v) = get(&c, s.url(&format!("/api/jobs/{id}"))).await;
    assert_eq!(status, 200);
    assert_eq!(v["tune"]["candidates"].as_array().unwrap().len(), of);
    let (_, runs) = get(&c, s.url("/api/runs")).await;
    assert_eq!(
        runs["runs"][0]["request"]["tune"]["budget_s"], 60.0,
        "{runs}"
    );
}

#[tokio::test]
async fn a_tune_body_is_checked_before_it_is_queued() {
    let dir = temp_dir("tune-checks");
    let s = Server::start(&dir, &["--fake-worker", "--tune-budget", "20"]);
    let c = client();
    let post_tune = |body: Value| {
        let (c, url) = (c.clone(), s.url("/api/tune"));
        async move { post(&c, url, body.to_string()).await }
    };
    let mut over = tune_body("");
    over["budget_s"] = json!(30);
    let (status, v, _) = post_tune(over).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["limit"], "tune_budget_s");
    assert_eq!(v["max"], 20.0);
    let mut zero = tune_body("");
    zero["budget_s"] = json!(0);
    assert_eq!(post_tune(zero).await.0, 400);

    let (status, v, _) = post_tune(
        json!({"program": "fusion f {\n  input x: f32[N]\n  y = x +\n}\n", "sizes": {"N": 8}}),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert!(v["diagnostics"][0]["line"].as_u64().unwrap() > 0, "{v}");

    let mut typo = tune_body("");
    typo["budget"] = json!(5);
    let (status, v, _) = post_tune(typo).await;
    assert_eq!(status, 400);
    assert!(v["error"].as_str().unwrap().contains("budget"), "{v}");

    // Sizes no candidate compiles for (a size symbol missing).
    let (status, v, _) = post_tune(json!({"program": example("add.hf"), "sizes": {"M": 64}})).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .starts_with("no candidate of the automatic scheduler compiles for these sizes"),
        "{v}"
    );
    let mut iters = tune_body("");
    iters["iters"] = json!(0);
    let (status, v, _) = post_tune(iters).await;
    assert_eq!(
        (status, v["limit"].as_str()),
        (400, Some("max_iters")),
        "{v}"
    );
    // The budget is shown with the other limits.
    let (_, h) = get(&c, s.url("/api/health")).await;
    assert_eq!(h["limits"]["tune_budget_s"], 20.0);
}

#[tokio::test]
async fn a_cancelled_tune_stops_after_the_candidate_in_progress() {
    let dir = temp_dir("tune-cancel");
    // Every candidate hangs until it is killed at the job time limit.
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--fake-behaviour",
            "from-program",
            "--job-timeout",
            "1",
        ],
    );
    let c = client();
    let id = submit_tune(&s, &c, &tune_body("// fake-behaviour: hang")).await;
    // Wait for the candidates to be compiled (the first is then on the worker).
    let start = Instant::now();
    loop {
        let (_, v) = get(&c, s.url(&format!("/api/jobs/{id}"))).await;
        if v["stage"] != "queued" {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, v, _) = post(&c, s.url(&format!("/api/jobs/{id}/cancel")), String::new()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["state"], "stopping");
    let (events, result) = events_with_data(&s, &c, &id).await;
    assert_eq!(result["status"], "cancelled", "{result}");
    let tune = &result["tune"];
    assert_eq!(tune["cancelled"], true);
    let outcomes: Vec<&str> = tune["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["outcome"].as_str().unwrap())
        .collect();
    // At most the candidate in progress (and one cancelled during its compile) ran: killed.
    let ran = outcomes.iter().filter(|o| **o == "not_run").count();
    assert!(ran <= 1, "{outcomes:?}");
    let reached = outcomes.iter().filter(|o| **o == "not_reached").count();
    assert!(reached >= 1, "{outcomes:?}");
    assert!(tune["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["outcome"] == "not_reached")
        .all(|c| c["why"] == "the job was cancelled"));
    assert!(tune_steps(&events)
        .iter()
        .filter(|p| p["step"] == "not_run")
        .all(|p| p["why"].as_str().unwrap().starts_with("timed out")));
    // Well before every candidate's time limit had passed.
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    // Cancelling again: it has ended.
    let (status, v, _) = post(&c, s.url(&format!("/api/jobs/{id}/cancel")), String::new()).await;
    assert_eq!(
        (status, v["state"].as_str()),
        (200, Some("finished")),
        "{v}"
    );
}

#[tokio::test]
async fn a_waiting_job_is_cancelled_at_once_and_a_running_run_is_not_interrupted() {
    let dir = temp_dir("tune-cancel-queued");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--fake-behaviour",
            "from-program",
            "--job-timeout",
            "2",
        ],
    );
    let c = client();
    let hung = submit(&s, &c, &add_run("// fake-behaviour: hang")).await;
    let waiting = submit_tune(&s, &c, &tune_body("")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, v, _) = post(
        &c,
        s.url(&format!("/api/jobs/{hung}/cancel")),
        String::new(),
    )
    .await;
    assert_eq!(status, 409, "{v}");
    let (status, v, _) = post(
        &c,
        s.url(&format!("/api/jobs/{waiting}/cancel")),
        String::new(),
    )
    .await;
    assert_eq!(
        (status, v["state"].as_str()),
        (200, Some("cancelled")),
        "{v}"
    );
    let (names, result) = events(&s, &c, &waiting).await;
    assert_eq!(names, ["queued", "done"]);
    assert_eq!(result["status"], "cancelled", "{result}");
    assert_eq!(result["message"], "cancelled before it ran");
    // The run ends at its limit as ever, and the worker then serves the next job.
    let (_, result) = events(&s, &c, &hung).await;
    assert_eq!(result["status"], "timed_out", "{result}");
    let next = submit(&s, &c, &add_run("")).await;
    let (_, result) = events(&s, &c, &next).await;
    assert_eq!(result["status"], "fake", "{result}");
    let (status, v, _) = post(&c, s.url("/api/jobs/jnosuchjob/cancel"), String::new()).await;
    assert_eq!(status, 404, "{v}");
}
