//! Load and limits: 1,000 jobs across two front-ends and three agents end exactly once (and a
//! restarted front-end still answers for them); a full stream answers 429 with Retry-After.

use crate::support::*;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// Two front-ends on one PostgreSQL, three agents, 1,000 jobs submitted across both: every job
/// ends exactly once (one result each, one run in the shared history each, 1,000 jobs counted
/// by the agents in all), every SSE stream ends with its result. Then a front-end is killed and
/// started again: its finished jobs and links still answer, there and on the other one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thousand_jobs_across_two_front_ends_and_three_agents_end_once() {
    let Some((nats_exe, pg)) = servers("the distributed mode: 1,000 jobs") else {
        return;
    };
    let dir = temp_dir("thousand");
    let nats = Nats::start(nats_exe, &dir);
    let db = database(&pg, "thousand").await;
    let cap = ["--queue-cap", "2000"];
    // Started together: they race to migrate the fresh database and to make the stream.
    let (mut fe1, fe2) = std::thread::scope(|s| {
        let one = s.spawn(|| FrontEnd::start(&dir, "fe1", &nats.url(), &db, &cap));
        let two = s.spawn(|| FrontEnd::start(&dir, "fe2", &nats.url(), &db, &cap));
        (one.join().unwrap(), two.join().unwrap())
    });
    let _agents: Vec<Proc> = AGENTS
        .iter()
        .map(|n| agent(&dir, n, &nats.url(), "20"))
        .collect();
    let c = client();
    let h = health_until(&c, &fe1, Duration::from_secs(20), |d| {
        d["agents"].as_array().is_some_and(|a| a.len() == 3)
    })
    .await;
    assert_eq!(h["gpus"], json!(3), "{h}");
    assert_eq!(h["connected"], json!(true), "{h}");

    const JOBS: usize = 1000;
    let fronts = Arc::new([fe1.base.clone(), fe2.base.clone()]);
    let gate = Arc::new(tokio::sync::Semaphore::new(64));
    let mut tasks = Vec::new();
    for i in 0..JOBS {
        let (c, fronts, gate) = (c.clone(), fronts.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await.unwrap();
            let base = &fronts[i % 2];
            let r = c
                .post(format!("{base}/api/run"))
                .body(run_body(&format!("// job {i}")))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 202);
            let v: Value = r.json().await.unwrap();
            let id = v["job_id"].as_str().unwrap().to_string();
            let (names, result) = events(&c, format!("{base}/api/jobs/{id}/events"), None).await;
            (i % 2, id, names, result)
        }));
    }
    let mut ids = HashSet::new();
    let mut by_front: HashMap<usize, Vec<String>> = HashMap::new();
    let mut per_agent: HashMap<String, u64> = HashMap::new();
    for t in tasks {
        let (front, id, names, result) = t.await.unwrap();
        check_stream(&id, &names, &result, &AGENTS);
        *per_agent
            .entry(result["agent"].as_str().unwrap().to_string())
            .or_default() += 1;
        assert!(ids.insert(id.clone()), "job id {id} given twice");
        by_front.entry(front).or_default().push(id);
    }
    assert_eq!(ids.len(), JOBS);
    // Every agent took part.
    assert_eq!(per_agent.len(), 3, "{per_agent:?}");

    // Exactly once in the shared history.
    let pool = sqlx::PgPool::connect(&db).await.unwrap();
    let stored: Vec<(String,)> = sqlx::query_as("SELECT id FROM runs")
        .fetch_all(&pool)
        .await
        .unwrap();
    let stored: HashSet<String> = stored.into_iter().map(|(id,)| id).collect();
    assert_eq!(stored, ids);
    pool.close().await;
    // The agents ended 1,000 jobs in all, none of them twice, none delivered again.
    let h = health_until(&c, &fe2, Duration::from_secs(15), |d| {
        total(d, "completed") >= JOBS as u64
    })
    .await;
    assert_eq!(total(&h, "completed"), JOBS as u64, "{h}");
    assert_eq!(total(&h, "redelivered"), 0, "{h}");
    for a in h["agents"].as_array().unwrap() {
        let id = a["id"].as_str().unwrap();
        assert_eq!(a["completed"].as_u64(), per_agent.get(id).copied(), "{a}");
    }
    assert_eq!(h["depth"], json!(0), "{h}");
    assert_eq!(h["in_flight"], json!(0), "{h}");

    // A link made on one front-end answers on the other.
    let r = c
        .post(fe1.url("/api/links"))
        .body(json!({"program": program("// linked"), "state": {"M": 1}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let link: Value = r.json().await.unwrap();
    let link_path = link["path"].as_str().unwrap().to_string();
    let (status, on_fe2) = get(&c, fe2.url(&link_path)).await;
    assert_eq!(status, 200, "{on_fe2}");
    assert_eq!(on_fe2["program"], json!(program("// linked")));

    // A front-end restarted: its finished jobs and links still answer.
    fe1.restart();
    let mine = &by_front[&0];
    for id in mine.iter().take(20) {
        let (status, v) = get(&c, fe1.url(&format!("/api/jobs/{id}"))).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(
            (v["done"].clone(), v["job_id"].clone()),
            (json!(true), json!(id))
        );
        let (status, v) = get(&c, fe2.url(&format!("/api/jobs/{id}"))).await;
        assert_eq!((status, v["done"].clone()), (200, json!(true)), "{v}");
    }
    let (names, result) = events(&c, job_events(&fe1, &mine[0]), None).await;
    assert_eq!(names, ["done"]);
    assert_eq!(result["job_id"], json!(mine[0]));
    let (status, again) = get(&c, fe1.url(&link_path)).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again, on_fe2);
    // And it takes new jobs.
    let id = submit(&c, &fe1, "// after the restart").await;
    let (names, result) = events(&c, job_events(&fe1, &id), None).await;
    check_stream(&id, &names, &result, &AGENTS);
    clean_up(&pg, "thousand", &dir).await;
}

/// The stream holds `--queue-cap` jobs for all front-ends together: past it a run gets 429
/// with Retry-After, whichever front-end it comes to. NATS requires a token here: without it a
/// front-end does not start, and says why. (The SQLite default database: the distributed mode
/// does not need PostgreSQL for one front-end.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_stream_answers_429_with_retry_after() {
    let Some(nats_exe) = hopfuse_runner::not_run::nats_server("the distributed mode: 429") else {
        return;
    };
    let dir = temp_dir("full");
    let nats = Nats::start_with(nats_exe, &dir, Some("s3cret"));
    let refused = Command::new(HOPFUSE)
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--queue",
            &nats.url(),
            "--data-dir",
        ])
        .arg(dir.join("refused"))
        .env_remove("HOPFUSE_NATS_TOKEN")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("cannot connect to NATS"), "{stderr}");
    let cap = ["--queue-cap", "3", "--nats-token", "s3cret"];
    let sqlite = |name: &str| dir.join(name).join("hopfuse.db").display().to_string();
    let fe1 = FrontEnd::start(&dir, "fe1", &nats.url(), &sqlite("fe1"), &cap);
    let fe2 = FrontEnd::start(&dir, "fe2", &nats.url(), &sqlite("fe2"), &cap);
    let c = client();
    for i in 0..3 {
        submit(&c, &fe1, &format!("// {i}")).await;
    }
    // fe2 has no job of its own: the stream's cap refuses it.
    let (status, v, retry) = post_run(&c, &fe2, run_body("// one too many")).await;
    assert_eq!(status, 429, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("queue is full"),
        "{v}"
    );
    let retry = retry.expect("a Retry-After header");
    assert!((1..=600).contains(&retry), "{retry}");
    assert_eq!(v["retry_after_s"], json!(retry));
    let h = health_until(&c, &fe2, Duration::from_secs(5), |d| d["depth"] == json!(3)).await;
    assert_eq!(
        (h["depth"].clone(), h["cap"].clone()),
        (json!(3), json!(3)),
        "{h}"
    );
    // Once an agent drains the stream, runs are taken again.
    let mut drain = agent_with(
        &dir,
        "drain",
        &nats.url(),
        "20",
        &["--nats-token", "s3cret"],
    );
    health_until(&c, &fe2, Duration::from_secs(20), |d| {
        d["depth"] == json!(0)
    })
    .await;
    let id = submit(&c, &fe2, "// room again").await;
    let (names, result) = events(&c, job_events(&fe2, &id), None).await;
    check_stream(&id, &names, &result, &["drain"]);
    // SIGTERM: the agent stops pulling, exits cleanly and leaves the agents bucket.
    let stopped = drain.terminate();
    assert!(stopped.is_some_and(|s| s.success()), "{stopped:?}");
    let h = health_until(&c, &fe2, Duration::from_secs(5), |d| d["gpus"] == json!(0)).await;
    assert_eq!(h["agents"], json!([]), "{h}");
    let _ = std::fs::remove_dir_all(&dir);
}
