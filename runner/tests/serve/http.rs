//! The API's surface: compile answers and diagnostics, static files, request limits (400, 413),
//! the token, CORS, the queue cap and rate limits (429 with Retry-After), and a service without a
//! GPU (runs 503, compile works).

use crate::support::*;
use serde_json::{json, Value};

#[tokio::test]
async fn compile_reports_cuda_passes_and_located_diagnostics() {
    let dir = temp_dir("compile");
    let s = Server::start(&dir, &["--fake-worker"]);
    let c = client();
    let good = json!({"program": example("softmax.hf")}).to_string();
    let (status, v, _) = post(&c, s.url("/api/compile"), good).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["cuda"].as_str().unwrap().contains("__global__"));
    assert!(v["passes"].as_array().unwrap().len() >= 5);
    assert!(v["passes"][0]["name"].is_string() && v["passes"][0]["ir"].is_string());
    assert!(v["plan"]["kernel_name"].is_string());
    assert_eq!(v["diagnostics"], json!([]));
    assert!(v["lower_ms"].as_f64().unwrap() >= 0.0);

    // A fusion no scheduler takes whole: every kernel's CUDA under its header line, the first
    // kernel's plan.
    let split = json!({"program": include_str!("../../../examples/auto/col_norm.hf")});
    let (status, v, _) = post(&c, s.url("/api/compile"), split.to_string()).await;
    assert_eq!(status, 200, "{v}");
    let cuda = v["cuda"].as_str().unwrap();
    assert!(
        cuda.starts_with(
            "// ==== kernel 1 of 2: col_norm_s1_kernel (outer reduction): ends before `y`"
        ) && cuda.contains(
            "\n// ==== kernel 2 of 2: col_norm_s2_kernel (pointwise): the last segment\n"
        ),
        "{cuda}"
    );
    assert_eq!(v["plan"]["kernel_name"], "col_norm_s1_kernel");

    // A program error is a 200 with located diagnostics (the playground shows them).
    let bad = json!({"program": "fusion f {\n  input x: f32[N]\n  y = exp(x\n  output y\n}"});
    let (status, v, _) = post(&c, s.url("/api/compile"), bad.to_string()).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["cuda"].is_null());
    let d = &v["diagnostics"][0];
    assert!(d["message"].as_str().unwrap().contains("expected"), "{d}");
    // At the unclosed `(`.
    assert_eq!(
        (d["line"].as_u64(), d["column"].as_u64()),
        (Some(3), Some(10)),
        "{d}"
    );

    // Malformed JSON, wrong shapes and unknown fields: 400 with a message.
    for body in [
        "{bad",
        "",
        "[]",
        r#"{"program": 5}"#,
        r#"{"program": "x", "nope": 1}"#,
    ] {
        let (status, v, _) = post(&c, s.url("/api/compile"), body.to_string()).await;
        assert_eq!(status, 400, "{body}: {v}");
        assert!(v["error"].as_str().unwrap().contains("JSON"), "{v}");
    }
    // Unknown endpoints and methods answer JSON too.
    let (status, v) = get(&c, s.url("/api/nope")).await;
    assert_eq!(status, 404, "{v}");
    let (status, v) = get(&c, s.url("/api/compile")).await;
    assert_eq!(status, 405, "{v}");
    // Without dist/, the root says so in HTML.
    let root = c.get(s.url("/")).send().await.unwrap();
    assert_eq!(root.status(), 200);
    assert!(root.text().await.unwrap().contains("not built yet"));
    s.stop();
}

#[tokio::test]
async fn static_files_are_served_from_the_static_dir() {
    let dir = temp_dir("static");
    let dist = dir.join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    std::fs::write(dist.join("index.html"), "<h1>playground</h1>").unwrap();
    let dist_arg = dist.display().to_string();
    let s = Server::start(&dir, &["--fake-worker", "--static-dir", &dist_arg]);
    let c = client();
    let text = c
        .get(s.url("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text, "<h1>playground</h1>");
    assert_eq!(
        c.get(s.url("/missing.js")).send().await.unwrap().status(),
        404
    );
    s.stop();
}

/// Issue 39 item 11: every answer has `nosniff`, a Referrer-Policy and a CSP: the page's allows
/// no inline script (and the repository's page has none: its start is `boot.js`), lets the wasm
/// compile, and frames only on its own origin except the embed view; the API's allows nothing.
#[tokio::test]
async fn every_answer_has_security_headers_and_the_page_no_inline_script() {
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let page = std::fs::read_to_string(repo.join("index.html")).unwrap();
    for tag in page.split("<script").skip(1) {
        let open = tag.split('>').next().unwrap();
        assert!(
            open.contains("src="),
            "an inline script in index.html: <script{open}>"
        );
    }
    assert!(
        !has_inline_handler(&page),
        "an inline event handler in index.html"
    );
    assert!(repo.join("web/boot.js").is_file());

    let dir = temp_dir("security-headers");
    let dist = dir.join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    std::fs::write(dist.join("index.html"), &page).unwrap();
    let dist_arg = dist.display().to_string();
    let s = Server::start(&dir, &["--fake-worker", "--static-dir", &dist_arg]);
    let c = client();
    let headers = |path: &'static str| {
        let (c, url) = (c.clone(), s.url(path));
        async move { c.get(url).send().await.unwrap().headers().clone() }
    };
    let csp =
        |h: &reqwest::header::HeaderMap| h["content-security-policy"].to_str().unwrap().to_string();
    for path in ["/", "/?embed=cuda", "/api/health", "/api/nothing"] {
        let h = headers(path).await;
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["referrer-policy"], "same-origin", "{path}");
    }
    let page_csp = csp(&headers("/").await);
    let directive = |csp: &str, name: &str| {
        csp.split(';')
            .map(str::trim)
            .find(|d| d.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {csp}"))
            .to_string()
    };
    assert_eq!(
        directive(&page_csp, "script-src"),
        "script-src 'self' 'wasm-unsafe-eval'"
    );
    assert_eq!(
        directive(&page_csp, "frame-ancestors"),
        "frame-ancestors 'self'"
    );
    assert_eq!(directive(&page_csp, "object-src"), "object-src 'none'");
    // The page calls a runner on another origin when it is set to one.
    assert!(
        directive(&page_csp, "connect-src").contains("https:"),
        "{page_csp}"
    );
    let embed_csp = csp(&headers("/?embed=cuda").await);
    assert_eq!(
        directive(&embed_csp, "frame-ancestors"),
        "frame-ancestors *"
    );
    let api_csp = csp(&headers("/api/health").await);
    assert_eq!(api_csp, "default-src 'none'; frame-ancestors 'none'");
    s.stop();
}

/// Whether `html` has an inline event handler attribute (` onclick=`, ` onload=`, ...).
fn has_inline_handler(html: &str) -> bool {
    html.match_indices(" on").any(|(i, _)| {
        let rest = &html[i + 3..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect();
        !name.is_empty() && rest[name.len()..].starts_with('=')
    })
}

#[tokio::test]
async fn run_errors_are_400_with_the_limit_named() {
    let dir = temp_dir("run-errors");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--max-iters",
            "50",
            "--max-tensor-bytes",
            "1000000",
        ],
    );
    let c = client();
    let mut body = add_run("");
    body["iters"] = json!(51);
    let (status, v, _) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["limit"], "max_iters", "{v}");
    assert!(v["error"].as_str().unwrap().contains("max_iters"), "{v}");

    let mut body = add_run("");
    body["sizes"] = json!({"M": 4096, "N": 4096});
    let (status, v, _) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["limit"], "max_tensor_bytes", "{v}");

    // A program that does not compile: 400 with located diagnostics.
    let body = json!({"program": "fusion f {\n  @@@\n}", "sizes": {}, "iters": 5});
    let (status, v, _) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["diagnostics"][0]["line"].as_u64() >= Some(1), "{v}");

    // Missing and negative sizes.
    let mut body = add_run("");
    body["sizes"] = json!({"M": 16});
    let (status, v, _) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains('N'), "{v}");
    body["sizes"] = json!({"M": -16, "N": 4});
    let (status, v, _) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 400, "{v}");
    body["sizes"] = json!({"M": "big", "N": 4});
    let (status, v, _) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 400, "{v}");
    let (status, v) = get(&c, s.url("/api/jobs/nope")).await;
    assert_eq!(status, 404, "{v}");

    // Scalar values: a name that is no scalar input, a value its dtype does not hold, and a
    // value that is no number are 4xx answers in JSON naming the scalar; good ones are taken.
    let scaled = "fusion scaled {\n  input x: f32[N]\n  input k: i32\n  y = x + k\n  output y\n}\n";
    let run = |scalars: Value| json!({"program": scaled, "sizes": {"N": 64}, "iters": 5, "scalars": scalars});
    let (status, v, _) = post(&c, s.url("/api/run"), run(json!({"kk": 1})).to_string()).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(
        v["error"], "scalars: `kk`: not a scalar input of the program (its scalar inputs: k)",
        "{v}"
    );
    let (status, v, _) = post(&c, s.url("/api/run"), run(json!({"k": 0.5})).to_string()).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("`k` is i32, which holds whole numbers"),
        "{v}"
    );
    let (status, v, _) = post(
        &c,
        s.url("/api/run"),
        run(json!({"k": "three"})).to_string(),
    )
    .await;
    assert!((400..500).contains(&status), "{status} {v}");
    assert!(v["error"].as_str().unwrap().contains("`scalars.k`"), "{v}");
    let (status, v, _) = post(&c, s.url("/api/run"), run(json!({"k": 3})).to_string()).await;
    assert_eq!(status, 202, "{v}");
    s.stop();
}

#[tokio::test]
async fn oversize_bodies_and_programs_are_413() {
    let dir = temp_dir("oversize");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--max-body-bytes",
            "4000",
            "--max-program-bytes",
            "2000",
        ],
    );
    let c = client();
    let big = json!({"program": "x".repeat(5000)}).to_string();
    let (status, v, _) = post(&c, s.url("/api/compile"), big).await;
    assert_eq!(status, 413, "{v}");
    assert_eq!(v["limit"], "max_body_bytes", "{v}");
    let long = json!({"program": "x".repeat(3000)}).to_string();
    for path in ["/api/compile", "/api/run", "/api/links"] {
        let (status, v, _) = post(&c, s.url(path), long.clone()).await;
        assert_eq!(status, 413, "{path}: {v}");
        assert_eq!(v["limit"], "max_program_bytes", "{v}");
    }
    s.stop();
}

#[tokio::test]
async fn a_token_is_required_when_set() {
    let dir = temp_dir("token");
    let s = Server::start(&dir, &["--fake-worker", "--token", "s3cret"]);
    let c = client();
    let body = json!({"program": example("add.hf")}).to_string();
    let r = c
        .post(s.url("/api/compile"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    let v: Value = r.json().await.unwrap();
    assert!(v["error"].as_str().unwrap().contains("token"), "{v}");
    let r = c
        .post(s.url("/api/compile"))
        .bearer_auth("wrong")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = c
        .post(s.url("/api/compile"))
        .bearer_auth("s3cret")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Strictly `Bearer <token>`: two spaces are a malformed header, not the token.
    let r = c
        .post(s.url("/api/compile"))
        .header("authorization", "Bearer  s3cret")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"].as_str().unwrap().contains("malformed"), "{v}");
    for path in [
        "/api/links/abc",
        "/api/jobs/abc",
        "/api/jobs/abc/events",
        "/api/runs",
    ] {
        assert_eq!(
            c.get(s.url(path)).send().await.unwrap().status(),
            401,
            "{path}"
        );
    }
    // Health stays open (monitoring), and says a token is needed.
    let (status, v) = get(&c, s.url("/api/health")).await;
    assert_eq!(status, 200);
    assert_eq!(v["limits"]["token_required"], true);
    s.stop();
}

#[tokio::test]
async fn cors_allows_only_listed_origins() {
    let dir = temp_dir("cors");
    let s = Server::start(
        &dir,
        &["--fake-worker", "--cors-origin", "https://play.example"],
    );
    let c = client();
    let preflight = |origin: &'static str| {
        c.request(reqwest::Method::OPTIONS, s.url("/api/compile"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type,authorization",
            )
            .send()
    };
    let ok = preflight("https://play.example").await.unwrap();
    assert_eq!(
        ok.headers()["access-control-allow-origin"],
        "https://play.example"
    );
    let other = preflight("https://evil.example").await.unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
    s.stop();
}

#[tokio::test]
async fn the_queue_cap_and_the_rate_limit_answer_429_with_retry_after() {
    let dir = temp_dir("queue-full");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--fake-behaviour",
            "hang",
            "--job-timeout",
            "2",
            "--queue-cap",
            "2",
        ],
    );
    let c = client();
    let body = add_run("");
    submit(&s, &c, &body).await;
    submit(&s, &c, &body).await;
    let (status, v, headers) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 429, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("queue is full"),
        "{v}"
    );
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1);
    let (_, h) = get(&c, s.url("/api/health")).await;
    assert_eq!(
        h["queue"]["queued"].as_u64().unwrap() + h["queue"]["running"].as_u64().unwrap(),
        2
    );
    s.stop();

    // One client's own cap.
    let dir = temp_dir("client-cap");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--fake-behaviour",
            "hang",
            "--job-timeout",
            "2",
            "--client-queue-cap",
            "1",
        ],
    );
    submit(&s, &c, &body).await;
    let (status, v, headers) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 429, "{v}");
    assert_eq!(v["limit"], "client_queue_cap", "{v}");
    assert!(headers.contains_key("retry-after"));
    s.stop();

    let dir = temp_dir("rate-limit");
    let s = Server::start(&dir, &["--fake-worker", "--runs-per-minute", "2"]);
    submit(&s, &c, &body).await;
    submit(&s, &c, &body).await;
    let (status, v, headers) = post(&c, s.url("/api/run"), body.to_string()).await;
    assert_eq!(status, 429, "{v}");
    assert!(v["error"].as_str().unwrap().contains("rate limit"), "{v}");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    s.stop();
}

#[tokio::test]
async fn without_a_gpu_runs_answer_503_and_compile_works() {
    let dir = temp_dir("no-gpu");
    // No GPU visible to the service's probe, also on a machine that has one.
    let s = Server::start_env(&dir, &[], &[("CUDA_VISIBLE_DEVICES", "")]);
    let c = client();
    let (_, h) = get(&c, s.url("/api/health")).await;
    assert!(h["gpu"].is_null(), "{h}");
    assert_eq!(h["run_available"], false, "{h}");
    assert!(h["gpu_reason"].is_string(), "{h}");
    let (status, v, _) = post(&c, s.url("/api/run"), add_run("").to_string()).await;
    assert_eq!(status, 503, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("no usable GPU"),
        "{v}"
    );
    let body = json!({"program": example("add.hf")}).to_string();
    let (status, _, _) = post(&c, s.url("/api/compile"), body).await;
    assert_eq!(status, 200);
    s.stop();
    // Its log (stderr, a file here) says compile-only and why, in plain text: no colour codes,
    // no "this command needs a GPU" (the service serves without one).
    let log = std::fs::read_to_string(dir.join("serve.log")).unwrap();
    assert!(log.contains("compile-only: no usable GPU ("), "{log}");
    assert!(!log.contains("needs a GPU"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log file: {log:?}"
    );
}

/// The fake worker's service says Run works and measures nothing, never that Run is off.
#[tokio::test]
async fn the_fake_worker_says_what_run_does() {
    let dir = temp_dir("fake-says");
    let s = Server::start(&dir, &["--fake-worker"]);
    let (_, h) = get(&client(), s.url("/api/health")).await;
    assert_eq!(h["run_available"], true, "{h}");
    s.stop();
    let log = std::fs::read_to_string(dir.join("serve.log")).unwrap();
    assert!(
        log.contains("fake worker (--fake-worker): Run works but only compiles and checks"),
        "{log}"
    );
    for misleading in [
        "compile-only",
        "disabled",
        "no usable GPU",
        "no GPU for runs",
    ] {
        assert!(!log.contains(misleading), "{misleading}: {log}");
    }
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log file: {log:?}"
    );
}
