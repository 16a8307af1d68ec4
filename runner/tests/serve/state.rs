//! What outlives a request: links and the run history across a restart, the retention flags,
//! an abandoned compile that keeps its slot without holding shutdown, and the compile deadline.

use crate::support::*;
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
async fn links_and_run_history_persist_across_a_restart() {
    let dir = temp_dir("restart");
    let c = client();
    let s = Server::start(&dir, &["--fake-worker"]);
    let body = json!({"program": example("add.hf"), "state": {"sizes": {"M": 1024, "N": 1024}}});
    let (status, a, _) = post(&c, s.url("/api/links"), body.to_string()).await;
    assert_eq!(status, 200, "{a}");
    let (_, b, _) = post(&c, s.url("/api/links"), body.to_string()).await;
    assert_eq!(a["id"], b["id"], "same program and state, same id");
    let other = json!({"program": example("add.hf"), "state": {"sizes": {"M": 8, "N": 8}}});
    let (_, o, _) = post(&c, s.url("/api/links"), other.to_string()).await;
    assert_ne!(a["id"], o["id"]);
    let job = submit(&s, &c, &add_run("")).await;
    events(&s, &c, &job).await;
    // The run history is written just after the `done` event: wait for it before the restart.
    let t = Instant::now();
    loop {
        let (_, runs) = get(&c, s.url("/api/runs")).await;
        if runs["runs"][0]["id"] == job.as_str() {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{runs}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.stop();

    let s = Server::start(&dir, &["--fake-worker"]);
    let id = a["id"].as_str().unwrap();
    let (status, link) = get(&c, s.url(&format!("/api/links/{id}"))).await;
    assert_eq!(status, 200, "{link}");
    assert_eq!(link["program"], body["program"]);
    assert_eq!(link["state"], body["state"]);
    let (_, again, _) = post(&c, s.url("/api/links"), body.to_string()).await;
    assert_eq!(again["id"], a["id"]);
    // The finished job is in the run history.
    let (status, r) = get(&c, s.url(&format!("/api/jobs/{job}"))).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["status"], "fake");
    let (_, replay) = events(&s, &c, &job).await;
    assert_eq!(replay["job_id"], job.as_str());
    let (_, runs) = get(&c, s.url("/api/runs")).await;
    assert_eq!(runs["runs"][0]["id"], job.as_str());
    s.stop();
    assert!(s_dir_has_db(&dir));
}

/// A compile whose client went away is cancelled: its slot is free again at once, not when the
/// compile would have finished (the test delay stands for a slow compile).
#[tokio::test]
async fn an_abandoned_compile_is_cancelled_and_frees_its_slot() {
    let dir = temp_dir("abandoned-compile");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--compile-slots",
            "1",
            "--compile-timeout",
            "120",
            "--compile-test-delay-ms",
            "60000",
        ],
    );
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let body = json!({"program": example("add.hf")}).to_string();
    let gone = impatient
        .post(s.url("/api/compile"))
        .body(body)
        .send()
        .await;
    assert!(gone.is_err(), "the client gives up: {gone:?}");
    let c = client();
    let (_, h) = get(&c, s.url("/api/health")).await;
    assert_eq!(h["compiles"]["slots"], 1, "{h}");
    slot_freed_within(&s, &c, Duration::from_secs(3)).await;
    s.stop();
}

/// Polls `/api/health` until no compile runs, failing after `limit`.
async fn slot_freed_within(s: &Server, c: &reqwest::Client, limit: Duration) {
    let start = Instant::now();
    loop {
        let (_, h) = get(c, s.url("/api/health")).await;
        if h["compiles"]["running"] == 0 {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "the compile still holds its slot: {h}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A compile past the deadline answers 422 at the deadline and is cancelled, so its slot is free
/// soon after; while a compile holds the only slot, another request answers 503 with
/// Retry-After at its own deadline (compile and run alike).
#[tokio::test]
async fn compiles_past_the_deadline_get_an_error_at_the_deadline() {
    let dir = temp_dir("compile-deadline");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--compile-slots",
            "1",
            "--compile-timeout",
            "1",
            "--compile-test-delay-ms",
            "4000",
        ],
    );
    let c = client();
    let body = json!({"program": example("add.hf")}).to_string();
    let start = Instant::now();
    let (status, v, _) = post(&c, s.url("/api/compile"), body.clone()).await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["limit"], "compile_timeout_s", "{v}");
    assert!(v["error"].as_str().unwrap().contains("deadline"), "{v}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    slot_freed_within(&s, &c, Duration::from_secs(2)).await;
    // Two at once for the one slot: one compiles past its deadline (422), the other waits for
    // the slot until its own deadline (503). The second's deadline ends just after the first's
    // compile is cancelled; under load its request may start late enough to take the freed
    // slot and compile past its own deadline too (422 and 422): tried again, a few times.
    let mut waited = false;
    for _ in 0..5 {
        let (a, b) = tokio::join!(
            post(&c, s.url("/api/compile"), body.clone()),
            post(&c, s.url("/api/run"), add_run("").to_string())
        );
        assert_eq!(a.1["limit"], "compile_timeout_s", "{}", a.1);
        assert_eq!(b.1["limit"], "compile_timeout_s", "{}", b.1);
        let mut statuses = [a.0, b.0];
        statuses.sort();
        if statuses == [422, 422] {
            slot_freed_within(&s, &c, Duration::from_secs(2)).await;
            continue;
        }
        assert_eq!(statuses, [422, 503], "{} {}", a.1, b.1);
        let busy = if a.0 == 503 { &a } else { &b };
        assert!(busy.2.contains_key("retry-after"), "{:?}", busy.2);
        waited = true;
        break;
    }
    assert!(
        waited,
        "no request waited for the slot to its deadline in five tries"
    );
    let (_, h) = get(&c, s.url("/api/health")).await;
    assert_eq!(h["limits"]["compile_timeout_s"], 1.0, "{h}");
    s.stop();
}

/// `--keep-runs` bounds the run history: after four runs with a limit of two, the two newest
/// are left.
#[tokio::test]
async fn the_run_history_keeps_what_the_retention_flags_say() {
    let dir = temp_dir("retention");
    let s = Server::start(&dir, &["--fake-worker", "--keep-runs", "2"]);
    let c = client();
    let mut jobs = Vec::new();
    for _ in 0..4 {
        let job = submit(&s, &c, &add_run("")).await;
        events(&s, &c, &job).await;
        jobs.push(job);
    }
    let t = Instant::now();
    let runs = loop {
        let (_, runs) = get(&c, s.url("/api/runs?limit=100")).await;
        // Written just after `done`, pruned in the background: wait for both.
        if runs["runs"][0]["id"] == jobs[3].as_str() && runs["runs"].as_array().unwrap().len() == 2
        {
            break runs;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{runs}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let ids: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{runs}");
    assert!(
        ids.contains(&jobs[3].as_str()) && ids.contains(&jobs[2].as_str()),
        "{ids:?} {jobs:?}"
    );
    let (_, h) = get(&c, s.url("/api/health")).await;
    assert_eq!(h["limits"]["keep_runs"], 2, "{h}");
    s.stop();
}

/// Issue 39 item 7: SIGTERM with a job running and one waiting behind it: both event streams
/// end with `done` (an `error` result saying the service stopped) before the service exits,
/// and both jobs answer after a restart (they were cut with no `done` and answered 404).
#[tokio::test]
async fn sigterm_ends_running_and_queued_jobs_with_a_stored_result() {
    let dir = temp_dir("sigterm-jobs");
    let args = ["--fake-worker", "--fake-behaviour", "from-program"];
    let mut s = Server::start(&dir, &args);
    let c = client();
    let running = submit(&s, &c, &add_run("// fake-delay-ms: 30000")).await;
    let queued = submit(&s, &c, &add_run("// fake-delay-ms: 30000")).await;
    let t = Instant::now();
    loop {
        let (_, h) = get(&c, s.url("/api/health")).await;
        if h["queue"]["running"] == 1 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{h}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let base = s.base.clone();
    let watch = |id: String| {
        let (c, base) = (c.clone(), base.clone());
        tokio::spawn(async move {
            let mut r = c
                .get(format!("{base}/api/jobs/{id}/events"))
                .send()
                .await
                .unwrap();
            let mut text = String::new();
            while let Ok(Some(chunk)) = r.chunk().await {
                text.push_str(&String::from_utf8_lossy(&chunk));
            }
            text
        })
    };
    let streams = [watch(running.clone()), watch(queued.clone())];
    tokio::time::sleep(Duration::from_millis(200)).await;
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(
        unsafe { libc::kill(s.child.id() as libc::pid_t, libc::SIGTERM) },
        0
    );
    for (id, stream) in [&running, &queued].into_iter().zip(streams) {
        let text = stream.await.unwrap();
        let done = text
            .split("\n\n")
            .find(|block| block.starts_with("event: done"))
            .unwrap_or_else(|| panic!("{id}: the stream ended without `done`: {text}"));
        assert!(done.contains("\"status\":\"error\""), "{done}");
        assert!(done.contains("the service stopped"), "{done}");
    }
    let status = s.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());

    let s = Server::start(&dir, &args);
    for id in [&running, &queued] {
        let (status, r) = get(&c, s.url(&format!("/api/jobs/{id}"))).await;
        assert_eq!(status, 200, "{id}: {r}");
        assert_eq!(r["status"], "error", "{r}");
        assert!(r["message"].as_str().unwrap().contains("service stopped"));
    }
    s.stop();
}

/// Issue 39 item 9: links have a quota. Past `--max-link-bytes` of links in all, a new link is a
/// 507; past `--link-bytes-per-client` within an hour (counted in the database, so across a
/// restart), a 429 with Retry-After. A link already stored is answered whatever the quotas (its
/// id is its content's hash) and costs nothing.
#[tokio::test]
async fn links_past_the_total_are_507_and_past_the_clients_hour_429() {
    let dir = temp_dir("link-quota");
    let c = client();
    let link = |n: usize| json!({"program": format!("// {n}\n{}", "x".repeat(2000)), "state": {}});
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--max-link-bytes",
            "5000",
            "--link-bytes-per-client",
            "100000",
        ],
    );
    for n in 0..2 {
        let (status, v, _) = post(&c, s.url("/api/links"), link(n).to_string()).await;
        assert_eq!(status, 200, "{v}");
    }
    let (status, v, _) = post(&c, s.url("/api/links"), link(2).to_string()).await;
    assert_eq!(status, 507, "{v}");
    assert_eq!(v["limit"], "max_link_bytes", "{v}");
    let (status, again, _) = post(&c, s.url("/api/links"), link(0).to_string()).await;
    assert_eq!(status, 200, "a stored link is answered: {again}");
    s.stop();

    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--max-link-bytes",
            "0",
            "--link-bytes-per-client",
            "5000",
        ],
    );
    let (status, v, headers) = post(&c, s.url("/api/links"), link(2).to_string()).await;
    assert_eq!(status, 429, "the client's 4 KB of this hour count: {v}");
    assert_eq!(v["limit"], "link_bytes_per_client", "{v}");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((3000..=3600).contains(&retry), "{retry}");
    let (status, _, _) = post(&c, s.url("/api/links"), link(1).to_string()).await;
    assert_eq!(status, 200);
    s.stop();
}

/// Issue 39 item 8's backlog in `GET /api/health`: with the PostgreSQL cluster (one of this
/// test's own) stopped, finished runs wait in memory and health shows how many, the oldest's
/// age and the run dropped past `--run-backlog`; once the cluster is back, the backlog drains
/// into the run history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_shows_the_runs_waiting_for_postgres_until_they_drain() {
    // Below the ephemeral ports: one of those could be taken while the cluster is down.
    let Some((pg, db)) = PgCluster::start(25440, "the run backlog in /api/health") else {
        return;
    };
    let dir = temp_dir("pg-backlog");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--db",
            &db,
            "--run-backlog",
            "3",
            "--runs-per-minute",
            "0",
        ],
    );
    let c = client();
    let backlog = |c: reqwest::Client, url: String| async move {
        let (status, h) = get(&c, url).await;
        assert_eq!(status, 200, "{h}");
        h["run_backlog"].clone()
    };
    let health = s.url("/api/health");
    let stored_before = submit(&s, &c, &add_run("// stored at once")).await;
    events(&s, &c, &stored_before).await;
    assert_eq!(
        backlog(c.clone(), health.clone()).await,
        json!({"waiting": 0, "oldest_age_s": null, "dropped": 0, "limit": 3})
    );

    pg.stop();
    let mut during = Vec::new();
    for i in 0..4 {
        let job = submit(&s, &c, &add_run(&format!("// during the outage {i}"))).await;
        let (_, result) = events(&s, &c, &job).await;
        assert_eq!(result["status"], "fake", "{result}");
        during.push(job);
    }
    let b = backlog(c.clone(), health.clone()).await;
    assert_eq!(
        (&b["waiting"], &b["dropped"]),
        (&json!(3), &json!(1)),
        "{b}"
    );
    let first_age = b["oldest_age_s"].as_f64().expect("an age while runs wait");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let b = backlog(c.clone(), health.clone()).await;
    let later_age = b["oldest_age_s"].as_f64().expect("an age while runs wait");
    assert!(later_age >= first_age + 2.0, "{first_age} then {b}");

    pg.restart();
    let t = Instant::now();
    let b = loop {
        let b = backlog(c.clone(), health.clone()).await;
        if b["waiting"] == 0 {
            break b;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "not drained: {b}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        b,
        json!({"waiting": 0, "oldest_age_s": null, "dropped": 1, "limit": 3})
    );
    let (_, runs) = get(&c, s.url("/api/runs?limit=100")).await;
    let stored: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    for job in std::iter::once(&stored_before).chain(&during[1..]) {
        assert!(stored.contains(&job.as_str()), "{job} not stored: {runs}");
    }
    assert!(
        !stored.contains(&during[0].as_str()),
        "the dropped run was stored: {runs}"
    );
    s.stop();
}
