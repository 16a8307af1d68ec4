//! The `hopfuse` binary end to end, without a GPU. The NVRTC tests need libnvrtc (CUDA 13) on
//! the library path (`eval "$(scripts/setup-nvrtc.sh)"`, as .ci/run does); without it they are
//! reported as not run, and fail where `HOPFUSE_REQUIRE_NVRTC` is set (`not_run.rs`).

mod common;

use common::{hopfuse, text};
use std::path::PathBuf;
use std::process::Command;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cuda")
        .join(name)
        .display()
        .to_string()
}

fn tmp_file(name: &str, contents: &str) -> String {
    let dir = std::env::temp_dir().join(format!("hopfuse-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path.display().to_string()
}

/// Whether to skip an NVRTC test (reported as not run; a failure under
/// `HOPFUSE_REQUIRE_NVRTC`, which scripts/test.sh sets).
fn nvrtc_missing() -> bool {
    hopfuse_runner::not_run::nvrtc_missing("hopfuse nvrtc-check")
}

#[test]
fn compile_errors_are_rendered_and_exit_1() {
    let file = tmp_file("bad.hf", "@@@ this is not a hopfuse program\n");
    let out = hopfuse(&["compile", &file]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("error"), "{err}");
    assert!(err.contains("bad.hf"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn missing_files_are_a_clear_error() {
    let out = hopfuse(&["compile", "/nonexistent/x.hf"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("cannot read /nonexistent/x.hf"),
        "{}",
        text(&out)
    );
}

#[test]
fn bad_sizes_are_a_clear_error() {
    let file = tmp_file("s.hf", "fusion\n");
    for (size, needle) in [
        ("M", "not NAME=VALUE"),
        ("M=x", "not an integer"),
        ("M=1,M=2", "given twice"),
    ] {
        let out = hopfuse(&["run", &file, "--size", size]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(text(&out).contains(needle), "{size}: {}", text(&out));
        assert!(!text(&out).contains("panicked"), "{}", text(&out));
    }
    // Without --size, a fusion with symbols is told which one is missing.
    let sym = tmp_file(
        "sym.hf",
        "fusion f {\n  input x: f32[N]\n  y = exp(x)\n  output y\n}\n",
    );
    let out = hopfuse(&["run", &sym, "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["error"]["stage"], "sizes", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`N` has no value"),
        "{v}"
    );
    // A zero iteration count is refused before anything runs.
    let out = hopfuse(&["run", &file, "--size", "M=1", "--iters", "0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("iters must be"), "{}", text(&out));
}

#[test]
fn scalar_values_are_checked_and_set() {
    let file = tmp_file(
        "scalar.hf",
        "fusion f {\n  input x: f32[N]\n  input eps: f32 = 1e-6\n  input k: i32\n  y = x * eps + k\n  output y\n}\n",
    );
    // compile --plan prints the given values in place of the program's.
    let out = hopfuse(&[
        "compile", &file, "--plan", "--scalar", "eps=0.5", "--scalar", "k=3",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the plan as JSON");
    let value = |name: &str| {
        plan["params"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .map(|p| p["value"].clone())
    };
    assert_eq!(value("eps"), Some(serde_json::json!(0.5)));
    assert_eq!(value("k"), Some(serde_json::json!(3.0)));
    // A run checks them before it opens a device (this machine may have none).
    for (scalar, needle) in [
        (
            "ep=1",
            "not a scalar input of the program (its scalar inputs: eps, k)",
        ),
        ("k=0.5", "`k` is i32, which holds whole numbers"),
        ("eps", "not NAME=VALUE"),
    ] {
        let out = hopfuse(&["run", &file, "--size", "N=8", "--scalar", scalar, "--json"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(text(&out).contains(needle), "{scalar}: {}", text(&out));
    }
}

/// A fusion whose extents are all constants needs no `--size` (and takes an empty one): it
/// gets past the sizes to NVRTC / the GPU, which this machine may lack.
#[test]
fn constant_fusions_run_without_sizes() {
    let file = tmp_file(
        "const.hf",
        "fusion f {\n  input x: f32[4, 64]\n  y = exp(x)\n  output y\n}\n",
    );
    for args in [
        vec!["run", &file, "--json"],
        vec!["run", &file, "--size", "", "--json"],
    ] {
        let out = hopfuse(&args);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
        match v.get("error") {
            // No GPU or NVRTC here: the run got past compiling and the sizes.
            Some(e) => {
                let stage = e["stage"].as_str().unwrap();
                assert!(stage == "cuda" || stage == "nvrtc", "{args:?}: {v}");
                assert_eq!(out.status.code(), Some(1));
            }
            None => {
                assert_eq!(v["sizes"], serde_json::json!({}), "{v}");
                assert_eq!(v["passed"], true, "{v}");
            }
        }
    }
}

/// Without a GPU (hidden here, so also on a GPU machine), a program that compiles is told that
/// a run needs one: before NVRTC is asked for, the float64 reference computed or a log line
/// coloured for a terminal.
#[test]
fn run_without_a_gpu_says_so_first() {
    let file = tmp_file(
        "nogpu.hf",
        "fusion f {\n  input x: f32[4, 64]\n  y = exp(x)\n  output y\n}\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_hopfuse"))
        .args(["-v", "run", &file, "--json"])
        .env("CUDA_VISIBLE_DEVICES", "")
        // No NVRTC either: the GPU is what the run is told about.
        .env("LD_LIBRARY_PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["error"]["stage"], "cuda", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        !message.contains("NVRTC") && !message.contains("nvrtc"),
        "{message}"
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        !log.contains("NVRTC") && !log.contains("reference"),
        "{log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "no colour codes in a redirected log: {log:?}"
    );
}

/// `run --cuda-file`: the edited source is read before anything else (a missing one is named),
/// the run says which kernel it replaces, and options that rebuild the kernel are refused.
#[test]
fn run_with_an_edited_cuda_file() {
    let file = tmp_file(
        "edited.hf",
        "fusion f {\n  input x: f32[4, 64]\n  y = exp(x)\n  output y\n}\n",
    );
    let missing = hopfuse(&["run", &file, "--cuda-file", "/nonexistent/k.cu"]);
    assert_eq!(missing.status.code(), Some(1), "{}", text(&missing));
    assert!(
        text(&missing).contains("cannot read /nonexistent/k.cu"),
        "{}",
        text(&missing)
    );
    for clash in ["--profile", "--clock"] {
        let out = hopfuse(&["run", &file, "--cuda-file", &file, clash]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains("cannot be used with"), "{}", text(&out));
    }
    let cuda = tmp_file("edited.cu", "extern \"C\" __global__ void f_kernel() {}\n");
    let out = Command::new(env!("CARGO_BIN_EXE_hopfuse"))
        .args(["run", &file, "--cuda-file", &cuda, "--json"])
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains(&format!(
            "{cuda} runs in place of the kernel generated from {file}"
        )),
        "{log}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["error"]["stage"], "cuda", "{v}");
}

#[test]
fn run_reports_errors_as_json_with_json() {
    let file = tmp_file("j.hf", "@@@\n");
    let out = hopfuse(&["run", &file, "--size", "M=4", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["error"]["stage"], "compile");
}

#[test]
fn nvrtc_check_builds_hopper_features() {
    if nvrtc_missing() {
        return;
    }
    let out = hopfuse(&["nvrtc-check", "--cuda", &fixture("hopper_features.cu")]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("OK   ") && t.contains("CUBIN"), "{t}");
    assert!(t.contains("1 passed, 0 failed"), "{t}");
}

#[test]
fn nvrtc_check_fails_on_warnings() {
    if nvrtc_missing() {
        return;
    }
    let out = hopfuse(&["nvrtc-check", "--cuda", &fixture("unused_variable.cu")]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("warning #177-D"), "{t}");
    // ptxas advisories printed as "info" count too.
    let out = hopfuse(&["nvrtc-check", "--cuda", &fixture("setmaxnreg_ignored.cu")]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("C7508"), "{t}");
}

#[test]
fn nvrtc_check_fails_on_errors_and_checks_every_file() {
    if nvrtc_missing() {
        return;
    }
    let out = hopfuse(&[
        "nvrtc-check",
        "--cuda",
        &fixture("syntax_error.cu"),
        &fixture("hopper_features.cu"),
        "/nonexistent/k.cu",
    ]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("identifier \"undefined_name\" is undefined"),
        "{t}"
    );
    assert!(t.contains("1 passed, 2 failed"), "{t}");
}

/// `hopfuse schedule` prints the automatic schedule with its scheduler and reason; pasted
/// under the fusion it compiles, as the program's own schedule.
#[test]
fn schedule_prints_the_automatic_schedule_and_it_compiles() {
    let file = examples_dir().join("auto/softmax.hf").display().to_string();
    let out = hopfuse(&["schedule", &file, "--size", "M=1000,N=1000"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        printed.starts_with("// scheduler: normalization\n")
            && printed.contains("rows of 1000 bf16 for M=1000,N=1000")
            // A row kept in registers reads its input with L2's evict_last (auto/l2.rs).
            && printed.contains("schedule {\n  x_c = cache_after(x, l2=evict_last)\n"),
        "{printed}"
    );
    let source = std::fs::read_to_string(&file).unwrap();
    let pasted = tmp_file("pasted.hf", &format!("{source}{printed}"));
    let out = hopfuse(&["compile", &pasted]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // With its own schedule the program gets no note about an automatic one.
    assert!(out.stderr.is_empty(), "{}", text(&out));
    let out = hopfuse(&["compile", &file]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("note: no schedule in")
            && err.contains("the automatic normalization schedule"),
        "{err}"
    );
    // `compile --size` decides the automatic schedule for those sizes.
    let out = hopfuse(&["compile", "--plan", &file, "--size", "M=64,N=100"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(plan.contains("rows of 100 bf16 for M=64,N=100"), "{plan}");
    // A fusion no scheduler takes whole is split: each segment's fusion and schedule, exit 0.
    let both = tmp_file(
        "both.hf",
        "fusion f {\n  input x: f32[M, N]\n  a = sum(x, axis=1)\n  b = sum(x, axis=0)\n  output a\n  output b\n}\n",
    );
    let out = hopfuse(&["schedule", &both]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.starts_with(
            "// no scheduler takes the fusion whole (`a` and `b` reduce different axes"
        ) && printed.contains("// ==== segment 1 of 2: f_s1 (inner reduction): ends before `b`")
            && printed.contains("// ==== segment 2 of 2: f_s2 (outer reduction): the last segment")
            && printed.contains(
                "fusion f_s2 {\n  input x: f32[M, N]\n  b = sum(x, axis=0)\n  output b\n}"
            ),
        "{printed}"
    );
    // A statistic of every element read back: a grid reduction, then the pointwise kernel.
    let total = tmp_file(
        "total.hf",
        "fusion f {\n  input x: f32[M, N]\n  t = sum(x, axis=[0, 1])\n  y = x / broadcast(t, axis=[0, 1])\n  output y\n}\n",
    );
    let out = hopfuse(&["schedule", &total]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("// ==== segment 1 of 2: f_s1 (full reduction): ends before `y`")
            && printed.contains("t.parallelize(0, BIDx)")
            && printed.contains("input t: f32[]"),
        "{printed}"
    );
    // One that cannot be split either: both reasons, exit 1.
    let rank3 = tmp_file(
        "rank3.hf",
        "fusion f {\n  input x: f32[B, M, N]\n  s = sum(x, axis=1)\n  y = x / broadcast(s, axis=1)\n  output y\n}\n",
    );
    let out = hopfuse(&["schedule", &rank3]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("reduces a rank-3 tensor")
            && text(&out)
                .contains("not split into kernels either: no scheduler takes `s` on its own"),
        "{}",
        text(&out)
    );
}

/// Every example of basics/, ops/ and tma/ with its schedule deleted, and every example of
/// auto/, compiles with its automatic schedule through NVRTC without warnings.
#[test]
fn nvrtc_check_builds_automatic_schedules() {
    if nvrtc_missing() {
        return;
    }
    let mut files = Vec::new();
    for e in hopfuse::examples::list(&examples_dir()).unwrap() {
        if !["basics", "ops", "tma", "auto"].contains(&e.group.as_str()) {
            continue;
        }
        let source = std::fs::read_to_string(&e.path).unwrap();
        let name = format!("auto_{}_{}.hf", e.group, e.name);
        files.push(tmp_file(
            &name,
            &hopfuse::examples::without_schedule(&source),
        ));
    }
    let mut args = vec!["nvrtc-check", "--index", "i32"];
    args.extend(files.iter().map(String::as_str));
    let out = hopfuse(&args);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains(" passed, 0 failed") && files.len() >= 35, "{t}");
}

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

#[test]
fn bench_runs_every_example_with_its_bench_sizes() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let data = std::env::temp_dir().join(format!("hopfuse-bench-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_hopfuse"))
        .args(["bench", "--fake-worker", "--no-cubin-cache", "--data-dir"])
        .arg(&data)
        .current_dir(&root)
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    let lines: Vec<&str> = t.lines().collect();
    assert!(
        lines[0]
            .starts_with("| example | size | time (us): median (min-max) | throughput | ceiling"),
        "{t}"
    );
    // Every example of every group (examples/<group>/<name>.hf), a row per `// bench:` line.
    let rows: usize = hopfuse::examples::list(&root.join("examples"))
        .unwrap()
        .iter()
        .map(|e| {
            let source = std::fs::read_to_string(&e.path).unwrap();
            hopfuse_runner::bench::bench_sizes(&source)
                .unwrap()
                .len()
                .max(1)
        })
        .sum();
    assert_eq!(lines.len(), 2 + rows, "{t}");
    assert!(
        t.contains("| matmul/step4_two_consumers | K=8192,M=8192,N=8192 |"),
        "{t}"
    );
    assert!(
        t.contains("| basics/add | M=16384,N=16384 |") && t.contains("fake worker"),
        "{t}"
    );
    assert!(
        t.contains("| basics/softmax_shared | M=4096,N=8192 |"),
        "{t}"
    );
}

#[test]
fn bench_takes_sizes_and_reports_programs_it_cannot_run() {
    let no_line = tmp_file(
        "nobench.hf",
        "fusion f {\n  input x: f32[N]\n  y = x\n  output y\n}\n",
    );
    let add = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/basics/add.hf");
    let add = add.display().to_string();
    let out = hopfuse(&["bench", "--fake-worker", "--no-cubin-cache", &add, &no_line]);
    let t = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(t.contains("| basics/add | M=16384,N=16384 |"), "{t}");
    assert!(
        t.contains("no `// bench: M=...,N=...` line for its sizes (N); give --size"),
        "{t}"
    );
    // Constant fusions need no bench line, or take an empty one.
    let constant = "fusion f {\n  input x: f32[8, 32]\n  y = exp(x)\n  output y\n}\n";
    let bare = tmp_file("const_bare.hf", constant);
    let empty = tmp_file("const_empty.hf", &format!("// bench:\n{constant}"));
    let out = hopfuse(&["bench", "--fake-worker", "--no-cubin-cache", &bare, &empty]);
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    for name in ["const_bare", "const_empty"] {
        assert!(
            t.lines().any(|l| l.contains(name)
                && l.contains("| (constant shapes) |")
                && l.contains("fake worker")),
            "{t}"
        );
    }
    let out = hopfuse(&[
        "bench",
        "--fake-worker",
        "--no-cubin-cache",
        "--size",
        "M=64,N=64",
        &add,
    ]);
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(t.contains("| basics/add | M=64,N=64 |"), "{t}");
    // Sizes the program cannot take: an error row, not a panic.
    let out = hopfuse(&["bench", "--fake-worker", "--size", "M=-1,N=4", &add]);
    let t = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        t.contains("| basics/add | M=-1,N=4 |") && t.contains("error:"),
        "{t}"
    );
}

#[test]
fn compile_torch_prints_the_twin_and_locates_errors() {
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/basics");
    let softmax = examples.join("softmax.hf").display().to_string();
    let out = hopfuse(&["compile", "--torch", &softmax]);
    assert!(out.status.success(), "{}", text(&out));
    let twin = String::from_utf8_lossy(&out.stdout);
    assert!(
        twin.contains("def softmax(x: torch.Tensor) -> torch.Tensor:"),
        "{twin}"
    );
    assert!(twin.contains("    m = torch.amax(x, dim=1)\n"), "{twin}");
    // The schedule is not needed: a program whose schedule is wrong still has a twin.
    let file = tmp_file(
        "twin.hf",
        "fusion f {\n  input x: f32[N]\n  y = exp(x)\n  output y\n}\nschedule {\n  y.split(7, 4)\n}\n",
    );
    let out = hopfuse(&["compile", "--torch", &file]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("y = torch.exp(x)"));
    let file = tmp_file(
        "bad_twin.hf",
        "fusion f {\n  input x: f32[N]\n  y = nope(x)\n  output y\n}\n",
    );
    let out = hopfuse(&["compile", "--torch", &file]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("unknown function `nope`"),
        "{}",
        text(&out)
    );
    let out = hopfuse(&["compile", "--torch", "--plan", &softmax]);
    assert!(!out.status.success(), "--torch and --plan conflict");
}

/// `compile --size` prints the kernel a run with those sizes builds: specialised to them
/// (constants for the size symbols, the sizes in the plan), or generic with --generic.
#[test]
fn compile_with_sizes_prints_the_specialised_kernel_unless_generic() {
    let file = examples_dir().join("auto/softmax.hf").display().to_string();
    let at = ["--size", "M=8192,N=16384"];
    let out = hopfuse(&[&["compile", &file][..], &at].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let cuda = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        cuda.contains("m2 * 16384") && !cuda.contains("m2 * N"),
        "{cuda}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("note: specialised to M=8192,N=16384"),
        "{}",
        text(&out)
    );
    let out = hopfuse(&[&["compile", &file, "--generic"][..], &at].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let cuda = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(cuda.contains("m2 * N"), "{cuda}");
    assert!(!text(&out).contains("note: specialised"), "{}", text(&out));
    let out = hopfuse(&[&["compile", &file, "--plan"][..], &at].concat());
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let equals: Vec<_> = plan["constraints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "equals")
        .map(|c| {
            (
                c["value"]["sym"].as_str().unwrap(),
                c["expected"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(equals, [("M", 8192), ("N", 16384)], "{plan}");
    // --generic needs sizes to be generic over.
    let out = hopfuse(&["compile", &file, "--generic"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

const SOFTMAX_BF16: &str = "fusion softmax {
  input x: bf16[M, N]
  xf = cast(x, f32)
  m = max(xf, axis=1)
  e = exp(xf - broadcast(m, axis=1))
  s = sum(e, axis=1)
  y = cast(e / broadcast(s, axis=1), bf16)
  output y
}
// bench: M=8192,N=16384
";

/// `hopfuse tune` through the fake worker (which compiles and checks but times nothing): a row
/// per candidate, the default first, each compiled on the host and checked by the worker; a
/// budget spent before a candidate's turn lists it as not reached; sizes from the bench line
/// or --size; a fusion no scheduler takes is an error with the scheduler's reason.
#[test]
fn tune_lists_every_candidate_and_keeps_to_its_budget() {
    let file = tmp_file("tune_softmax.hf", SOFTMAX_BF16);
    let data = std::env::temp_dir().join(format!("hopfuse-tune-{}", std::process::id()));
    let data = data.display().to_string();
    let candidates = hopfuse::auto_candidates(SOFTMAX_BF16, None)
        .unwrap()
        .unwrap();
    let out = hopfuse(&["tune", "--fake-worker", "--data-dir", &data, &file]);
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    let rows: Vec<&str> = t
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| #") && !l.starts_with("| ---"))
        .collect();
    assert_eq!(rows.len(), candidates.len(), "{t}");
    assert!(rows[0].starts_with("| 1 | default |"), "{t}");
    for (row, c) in rows.iter().zip(&candidates) {
        assert!(row.contains(&format!(" {} |", c.knobs.describe())), "{row}");
        assert!(row.contains("compiled and checked (fake worker"), "{row}");
    }
    assert!(t.contains("no winner"), "{t}");

    // A budget spent at once: nothing reached the worker.
    let out = hopfuse(&[
        "tune",
        "--fake-worker",
        "--data-dir",
        &data,
        "--budget",
        "0.000001",
        "--size",
        "M=100,N=1001",
        &file,
    ]);
    let t = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        t.lines()
            .filter(|l| l.contains("not reached (the budget was spent)"))
            .count()
            >= 2,
        "{t}"
    );

    let bad = hopfuse(&["tune", "--fake-worker", "--budget=-1", &file]);
    assert!(
        text(&bad).contains("--budget must be a positive number"),
        "{}",
        text(&bad)
    );
    let total = tmp_file("tune_total.hf", "fusion total {\n  input x: f32[B, M, N]\n  s = sum(x, axis=[1, 2])\n  output s\n}\n// bench: B=2,M=3,N=4\n");
    let out = hopfuse(&["tune", "--fake-worker", &total]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("no automatic scheduler takes the fusion"),
        "{}",
        text(&out)
    );
    let no_sizes = tmp_file(
        "tune_unsized.hf",
        "fusion f {\n  input x: f32[N]\n  y = x * 2.0\n  output y\n}\n",
    );
    let out = hopfuse(&["tune", "--fake-worker", "--size", "M=64,K=3", &file]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("no candidate compiles for K=3,M=64: "),
        "{}",
        text(&out)
    );
    let out = hopfuse(&["tune", "--fake-worker", &no_sizes]);
    assert!(
        text(&out).contains("no sizes to tune for: give --size"),
        "{}",
        text(&out)
    );
}

/// `--documents`: a malformed value is a usage error, an input the program cannot fill is told
/// before any device opens (naming the integer inputs), and a good one gets to the device; bench
/// and tune say which inputs hold documents.
#[test]
fn documents_fill_integer_inputs_and_bad_ones_are_told() {
    let file = examples_dir()
        .join("auto/attention_document.hf")
        .display()
        .to_string();
    let run = |documents: &[&str]| {
        let mut args = vec!["run", &file, "--size", "B=2,S=64,T=80", "--json"];
        for d in documents {
            args.extend(["--documents", d]);
        }
        Command::new(env!("CARGO_BIN_EXE_hopfuse"))
            .args(&args)
            .env("CUDA_VISIBLE_DEVICES", "")
            .output()
            .unwrap()
    };
    for (value, needle) in [
        ("doc_q:0", "the documents' mean length must be at least 1"),
        ("doc_q:x", "mean length `x` is not a whole number"),
        ("doc_q", "not NAME[,NAME...]:L"),
    ] {
        let out = run(&[value]);
        assert_eq!(out.status.code(), Some(2), "{value}: {}", text(&out));
        assert!(text(&out).contains(needle), "{value}: {}", text(&out));
    }
    let given_twice = run(&["doc_q:4", "doc_q,doc_k:8"]);
    assert_eq!(given_twice.status.code(), Some(1), "{}", text(&given_twice));
    assert!(text(&given_twice).contains("input `doc_q` is given twice"));
    for (value, needle) in [
        (
            "doc:4",
            "--documents `doc`: not an input of the program (its integer inputs: doc_q, doc_k)",
        ),
        ("q:4", "`q` is bf16; document ids fill integer inputs"),
        ("scale:4", "`scale` is f32"),
    ] {
        let out = run(&[value]);
        assert_eq!(out.status.code(), Some(1), "{value}: {}", text(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
        assert_eq!(v["error"]["stage"], "request", "{value}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{value}: {message}");
        assert!(!text(&out).contains("panicked"), "{}", text(&out));
    }
    // Taken: the run goes on to the device, which is hidden here.
    let out = run(&["doc_q,doc_k:16"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["error"]["stage"], "cuda", "{v}");

    // bench: the line above the table, and a program without the input fails its row.
    let add = examples_dir().join("basics/add.hf").display().to_string();
    let out = hopfuse(&[
        "bench",
        "--fake-worker",
        "--no-cubin-cache",
        "--documents",
        "doc_q,doc_k:16",
        &file,
        &add,
    ]);
    let t = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        t.contains(
            "Inputs: --documents doc_k,doc_q:16 (packed-document ids; the other inputs seeded)."
        ),
        "{t}"
    );
    let rows = |name: &str| t.lines().filter(|l| l.contains(name)).collect::<Vec<_>>();
    // One row per `// bench:` line of the document mask, each compiled and checked.
    let document_rows = rows("| auto/attention_document |");
    assert_eq!(document_rows.len(), 3, "{t}");
    assert!(
        document_rows.iter().all(|r| r.contains("fake worker")),
        "{t}"
    );
    let add_rows = rows("| basics/add |");
    assert!(
        add_rows.len() == 1
            && add_rows[0].contains(
                "--documents `doc_k`: not an input of the program (it has no integer tensor input)"
            ),
        "{t}"
    );
    // tune: told once, before any candidate.
    let out = hopfuse(&[
        "tune",
        "--fake-worker",
        "--size",
        "B=2,S=64,T=80",
        "--documents",
        "q:16",
        &file,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("`q` is bf16"), "{}", text(&out));
    assert!(!text(&out).contains("| 1 |"), "{}", text(&out));
}
