//! PTX and SASS of real programs (NVRTC and nvdisasm, no GPU): `hopfuse compile --sass/--ptx`
//! and `POST /api/inspect` of the service. Skipped without libnvrtc or nvdisasm, unless
//! `HOPFUSE_REQUIRE_NVRTC` is set (scripts/test.sh), which fails them instead.

mod common;

use common::{hopfuse, text};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

fn tools_missing() -> bool {
    let nvrtc = hopfuse_runner::nvrtc::available();
    let nvdisasm = hopfuse_runner::inspect::find_nvdisasm();
    if nvrtc && nvdisasm.is_ok() {
        return false;
    }
    let why = format!(
        "libnvrtc {}, nvdisasm {:?}; run `eval \"$(scripts/setup-nvrtc.sh)\"`",
        if nvrtc { "found" } else { "missing" },
        nvdisasm.err()
    );
    if std::env::var_os("HOPFUSE_REQUIRE_NVRTC").is_some() {
        panic!("HOPFUSE_REQUIRE_NVRTC is set but: {why}");
    }
    eprintln!("SKIPPED: {why}");
    true
}

fn example(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(path)
}

#[test]
fn compile_sass_heads_each_run_of_instructions_with_its_cuda_line_and_ir() {
    if tools_missing() {
        return;
    }
    let file = example("tma/exp_2d.hf");
    let out = hopfuse(&[
        "compile",
        "--sass",
        file.to_str().unwrap(),
        "--size",
        "M=512,N=512",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("// exp_2d_kernel: ") && lines[0].contains(" registers"));
    assert!(lines[1].starts_with("// int index"), "{}", lines[1]);
    // The TMA copy instruction sits under the CUDA line of the copy and its IR statement.
    let copy = lines
        .iter()
        .position(|l| l.contains("UTMALDG.2D"))
        .expect("a UTMALDG instruction");
    let heading = lines[..copy]
        .iter()
        .rposition(|l| l.trim_start().starts_with("// exp_2d_kernel.cu:"))
        .unwrap();
    assert!(
        lines[heading].contains("hf_tma_load_2d("),
        "{}",
        lines[heading]
    );
    assert!(
        lines[heading + 1].contains("(circular_buffer): x_s[")
            && lines[heading + 1].contains("<- tma_load_2d"),
        "{}",
        lines[heading + 1]
    );
    // The mbarrier wait's try-wait loop, under the wait.
    let wait = lines
        .iter()
        .position(|l| l.contains("SYNCS.PHASECHK.TRANS64.TRYWAIT"))
        .expect("an mbarrier try-wait");
    let heading = lines[..wait]
        .iter()
        .rposition(|l| l.trim_start().starts_with("// exp_2d_kernel.cu:"))
        .unwrap();
    assert!(
        lines[heading].contains("hf_mbarrier_wait("),
        "{}",
        lines[heading]
    );

    let out = hopfuse(&["compile", "--ptx", file.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("cp.async.bulk.tensor.2d"), "{text}");
    assert!(!text.contains("\t.loc\t"), "the .loc lines become headings");
    assert!(text.contains("// long long index"));
}

#[test]
fn compile_sass_without_nvdisasm_says_what_it_needs() {
    if tools_missing() {
        return;
    }
    let file = example("basics/add.hf");
    let out = Command::new(env!("CARGO_BIN_EXE_hopfuse"))
        .args(["compile", "--sass", file.to_str().unwrap()])
        .env("HOPFUSE_NVDISASM", "/nonexistent/nvdisasm")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no SASS: HOPFUSE_NVDISASM=/nonexistent/nvdisasm is not a file"),
        "{err}"
    );
    // Without --ptx/--sass, --size picks the variant a run builds (here, aligned vectors).
    let out = hopfuse(&["compile", "--size", "M=4,N=8", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("__global__"));
}

struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(dir: &Path, env: &[(&str, &str)]) -> Server {
        Server::start_with(dir, &[], env)
    }

    /// [`Server::start`] with extra arguments of `hopfuse serve`.
    fn start_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hopfuse"));
        cmd.args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--fake-worker",
            "--data-dir",
        ])
        .arg(dir)
        .arg("--static-dir")
        .arg(dir.join("no-dist"))
        .args(args)
        .env_remove("HOPFUSE_TOKEN")
        .env_remove("HOPFUSE_DB")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let base = loop {
            let line = lines.next().unwrap().unwrap();
            if let Some(a) = line.strip_prefix("hopfuse serve: listening on ") {
                break a.trim().to_string();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Server { child, base }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn post(base: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}/api/inspect"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}")),
    )
}

async fn health(base: &str) -> Value {
    let r = reqwest::get(format!("{base}/api/health")).await.unwrap();
    serde_json::from_str(&r.text().await.unwrap()).unwrap()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hopfuse-inspect-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn the_service_answers_ptx_and_sass_mapped_to_cuda_ir_and_passes() {
    if tools_missing() {
        return;
    }
    let dir = temp_dir("api");
    let server = Server::start(&dir, &[]);
    let program = std::fs::read_to_string(example("tma/exp_2d.hf")).unwrap();
    let body = json!({"program": program, "sizes": {"M": 512, "N": 512}});
    let (status, v) = post(&server.base, body.clone()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["kernel"], "exp_2d_kernel");
    assert_eq!(v["variant"]["index_type"], "i32", "{}", v["variant"]);
    assert_eq!(v["cached"], false);
    assert!(v["resources"]["registers"].as_u64().unwrap() > 0);
    let cuda: Vec<&str> = v["cuda"].as_str().unwrap().lines().collect();
    let sass = &v["sass"];
    let sass_text: Vec<&str> = sass["text"].as_str().unwrap().lines().collect();
    let sass_lines = sass["cuda_lines"].as_array().unwrap();
    assert_eq!(sass_text.len(), sass_lines.len());
    let copy = sass_text
        .iter()
        .position(|l| l.contains("UTMALDG.2D"))
        .unwrap();
    let line = sass_lines[copy].as_u64().expect("the copy has a CUDA line") as usize;
    assert!(
        cuda[line - 1].contains("hf_tma_load_2d("),
        "{}",
        cuda[line - 1]
    );
    // The line map: that CUDA line is an IR statement made by circular_buffer.
    let entry = &v["lines"]["lines"][line - 1];
    assert_eq!(entry["kind"], "stmt", "{entry}");
    assert_eq!(entry["pass"], "circular_buffer", "{entry}");
    let ir: Vec<&str> = v["ir"].as_str().unwrap().lines().collect();
    let ir_line = entry["ir_line"].as_u64().unwrap() as usize;
    assert!(
        ir[ir_line - 1].contains("<- tma_load_2d"),
        "{}",
        ir[ir_line - 1]
    );
    // PTX: the copy is there, mapped to the same CUDA line.
    let ptx_text: Vec<&str> = v["ptx"]["text"].as_str().unwrap().lines().collect();
    let p = ptx_text
        .iter()
        .position(|l| l.contains("cp.async.bulk.tensor.2d"))
        .unwrap();
    assert_eq!(v["ptx"]["cuda_lines"][p].as_u64(), Some(line as u64));

    // Again: from the cache, the same listings.
    let (status, again) = post(&server.base, body).await;
    assert_eq!(status, 200);
    assert_eq!(again["cached"], true);
    assert_eq!(again["sass"], v["sass"]);
    assert!(std::fs::read_dir(dir.join("inspect")).unwrap().count() >= 1);

    // Without sizes: the i64 variant `hopfuse compile` prints.
    let (status, v) = post(&server.base, json!({"program": program})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["variant"]["index_type"], "i64");

    // Bad programs and bodies: 400 with the compiler's diagnostics, or serde's message.
    let (status, v) = post(
        &server.base,
        json!({"program": "fusion f {\n  y = exp(x\n}"}),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("does not compile"));
    assert!(v["diagnostics"][0]["line"].as_u64().is_some(), "{v}");
    let (status, v) = post(&server.base, json!({"program": program, "bogus": 1})).await;
    assert_eq!(status, 400);
    assert!(v["error"].as_str().unwrap().contains("bogus"), "{v}");
    let (status, v) = post(
        &server.base,
        json!({"program": program, "sizes": {"M": 512}}),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("`N`"), "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_service_without_nvdisasm_still_answers_ptx_and_says_why_there_is_no_sass() {
    if tools_missing() {
        return;
    }
    let dir = temp_dir("no-nvdisasm");
    let server = Server::start(&dir, &[("HOPFUSE_NVDISASM", "/nonexistent/nvdisasm")]);
    let program = std::fs::read_to_string(example("basics/add.hf")).unwrap();
    let (status, v) = post(&server.base, json!({"program": program})).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["sass"].is_null());
    assert!(
        v["sass_unavailable"]
            .as_str()
            .unwrap()
            .contains("HOPFUSE_NVDISASM=/nonexistent/nvdisasm is not a file"),
        "{v}"
    );
    assert!(v["ptx"]["text"]
        .as_str()
        .unwrap()
        .contains(".entry add_kernel"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The playground reads `web/tests/fixtures/inspect-exp-2d.json` (web/src/inspect_panes.rs): a
/// real answer for tma/exp_2d at M=N=512. It must still be what the runner's type is:
/// `HOPFUSE_BLESS=1` rewrites it from a fresh inspection (NVRTC and nvdisasm needed).
#[test]
fn the_playgrounds_inspect_fixture_is_the_runners_type() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../web/tests/fixtures/inspect-exp-2d.json");
    if std::env::var_os("HOPFUSE_BLESS").is_some() {
        assert!(!tools_missing(), "blessing needs NVRTC and nvdisasm");
        let req = hopfuse_runner::inspect::InspectRequest {
            file: "exp_2d.hf".into(),
            source: std::fs::read_to_string(example("tma/exp_2d.hf")).unwrap(),
            sizes: [("M".to_string(), 512), ("N".to_string(), 512)].into(),
            index: None,
            generic: false,
        };
        let ins = hopfuse_runner::inspect::inspect(&req, None).unwrap();
        std::fs::write(&path, serde_json::to_string_pretty(&ins).unwrap() + "\n").unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let ins: hopfuse_runner::inspect::Inspection = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{}: {e} (HOPFUSE_BLESS=1 rewrites it)", path.display()));
    // Round trip: nothing of it is lost or renamed.
    let again: Value = serde_json::to_value(&ins).unwrap();
    assert_eq!(again, serde_json::from_str::<Value>(&text).unwrap());
    assert_eq!(ins.kernel, "exp_2d_kernel");
    assert!(ins.sass.is_some());
}

/// Issue 39 item 2: the inspection's lowering takes a compile slot and keeps the compile
/// deadline (it took neither: a slow program held a core past every deadline, unseen by
/// `compiles.running`), lowering once, counted in `compiles.lowered` (it lowered twice,
/// uncounted); past the deadline it is cancelled and frees the slot (item 1). Without NVRTC
/// the answer is a 503 before anything is compiled.
#[tokio::test]
async fn inspect_lowers_once_in_a_compile_slot_within_the_deadline() {
    if tools_missing() {
        return;
    }
    let program = std::fs::read_to_string(example("basics/add.hf")).unwrap();
    let dir = temp_dir("slots");
    let slow = Server::start_with(
        &dir,
        &[
            "--compile-slots",
            "1",
            "--compile-timeout",
            "1",
            "--compile-test-delay-ms",
            "2000",
        ],
        &[],
    );
    let start = std::time::Instant::now();
    let (status, v) = post(&slow.base, json!({"program": program})).await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["limit"], "compile_timeout_s", "{v}");
    assert!(start.elapsed().as_secs_f64() < 1.9, "{:?}", start.elapsed());
    // The lowering is cancelled at the deadline (issue 39 item 1): the slot is free again
    // well before the 2 s test delay would have ended, and the lowering is counted once.
    let h = loop {
        let h = health(&slow.base).await;
        if h["compiles"]["running"] == 0 {
            break h;
        }
        assert!(start.elapsed().as_secs_f64() < 1.9, "{h}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(h["compiles"]["lowered"], 1, "{h}");
    drop(slow);

    let dir = temp_dir("no-nvrtc");
    let bare = Server::start_with(&dir, &[], &[("LD_LIBRARY_PATH", "")]);
    let (status, v) = post(&bare.base, json!({"program": program})).await;
    if status == 200 {
        eprintln!("libnvrtc loads without LD_LIBRARY_PATH here: the 503 is not checked");
    } else {
        assert_eq!(status, 503, "{v}");
        let error = v["error"].as_str().unwrap();
        assert!(error.contains("libnvrtc (CUDA 13) cannot be loaded"), "{v}");
        let h = health(&bare.base).await;
        assert_eq!(
            h["compiles"]["lowered"], 0,
            "compiled before the check: {h}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
