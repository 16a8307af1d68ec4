//! What the GPU runs: a program's PTX and SASS, each line tied to the CUDA line it came from
//! (and through the compiler's line map to the kernel-IR statement and the pass), and ptxas's
//! resource usage and warnings. No GPU needed.
//!
//! Takes program text (and optionally the sizes of a run, to build the same variant a run
//! builds: index type and aligned-vector specialisation, `engine::prepare`). Compiles the CUDA
//! with NVRTC as runs do ([`nvrtc::options`]: `-lineinfo` included) plus
//! [`nvrtc::PTXAS_VERBOSE`], keeps NVRTC's PTX (its `.loc` directives name CUDA lines) and
//! disassembles the CUBIN with `nvdisasm -c -gi` (CUDA line info with inlining chains; from
//! the `nvidia-cuda-nvdisasm` wheel that `scripts/setup-nvrtc.sh` installs, or a CUDA toolkit).
//! Code inlined from the prelude's helpers is attributed to the kernel line that called it
//! (the outermost location of the chain), with the helper's line kept as `inlined`.
//!
//! [`machine_code`] is the part that loads NVRTC and runs nvdisasm: the service runs it in a
//! child process (`hopfuse worker --inspect`, so a crash or hang there cannot take the service
//! down), the CLI in-process. Its result is cached by content hash (SHA-256 of the tools'
//! versions, the options and the CUDA source) as CUBINs are (the service's under
//! `DATA_DIR/inspect/`). [`assemble`] turns it into an [`Inspection`]: listings with per-line
//! CUDA lines, resources, warnings. `hopfuse nvrtc-check --inspect` (CI) checks every example:
//! every SASS instruction and every PTX instruction with line info has a CUDA line, and the
//! SASS reaches kernel-IR statements.

use crate::engine::{RunError, RunRequest, Stage};
use crate::nvrtc;
use hopfuse::backend::codegen::lines::CudaLine;
use hopfuse::{Compilation, CompileOptions, IndexType};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Environment variable naming the `nvdisasm` executable.
pub const NVDISASM_ENV: &str = "HOPFUSE_NVDISASM";

/// What to inspect.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InspectRequest {
    /// The program's file name, for diagnostics.
    pub file: String,
    pub source: String,
    /// The sizes of a run: inspect the variant a run with them builds. Empty: the variant
    /// `hopfuse compile` prints (`index`, default i64; run-time vector alignment checks).
    #[serde(default)]
    pub sizes: BTreeMap<String, i64>,
    #[serde(default)]
    pub index: Option<IndexType>,
    /// With sizes: the kernel generic over them (`RunRequest::generic`), not specialised.
    #[serde(default)]
    pub generic: bool,
}

// Reading NVRTC's PTX and nvdisasm's SASS is `crate::listing`.
use crate::listing::{is_instruction, warning_line};
pub use crate::listing::{parse_ptx, parse_resources, parse_sass};

// The answer's types are defined in `hopfuse-api` (the playground reads them).
pub use hopfuse_api::inspect::{Inspection, Listing, Resources, Variant, Warning};

/// Lowers the program to the variant the request asks for.
pub fn lower(req: &InspectRequest) -> Result<(Compilation, Variant), RunError> {
    lower_with_diagnostics(req).map_err(|(e, _)| e)
}

/// Why [`lower_with_diagnostics`] has no compilation: the error, with the compiler's diagnostics
/// when the program does not compile (none when the sizes do not fit it).
pub type LowerError = (RunError, Option<Vec<hopfuse::Diagnostic>>);

/// [`lower`], with the compiler's diagnostics beside the error when the program does not
/// compile (the service answers them). Every lowering goes through `prepare` (counted in
/// `GET /api/health`'s `compiles.lowered`).
pub fn lower_with_diagnostics(req: &InspectRequest) -> Result<(Compilation, Variant), LowerError> {
    let compile_error = |d: hopfuse::Diagnostics| {
        let error = RunError::new(Stage::Compile, d.render(&req.source, &req.file));
        (error, Some(d.0))
    };
    if req.sizes.is_empty() {
        let index_type = req.index.unwrap_or_default();
        let options = CompileOptions {
            index_type,
            assume_aligned_vectors: false,
            aligned_for: None,
            specialize: false,
            clock_probe: false,
        };
        let c = crate::prepare::lower(&req.source, &options).map_err(compile_error)?;
        return Ok((
            c,
            Variant {
                index_type,
                assume_aligned_vectors: false,
                reason: "no sizes given: the CUDA `hopfuse compile` prints".into(),
            },
        ));
    }
    let run = RunRequest {
        file: req.file.clone(),
        source: req.source.clone(),
        sizes: req.sizes.clone(),
        scalars: Default::default(),
        iters: 1,
        warmup: 0,
        seed: 1,
        index: req.index,
        copy_ceiling: false,
        peers: false,
        clock: false,
        generic: req.generic,
        documents: Default::default(),
    };
    let (compilation, setup) = crate::prepare::compile_for_run(&run).map_err(|e| match e {
        crate::prepare::PrepareError::Compile(d) => compile_error(d),
        crate::prepare::PrepareError::Sizes(e) => (RunError::new(Stage::Sizes, e), None),
    })?;
    let sizes: Vec<String> = req.sizes.iter().map(|(k, v)| format!("{k}={v}")).collect();
    // prepare picks the aligned-vector specialisation when the sizes allow it; it matters only
    // where the two variants differ. Compared on the generic kernel (a specialised one is
    // neither of the variants without sizes).
    let cuda_of = |assume_aligned_vectors, aligned_for| {
        let options = CompileOptions {
            index_type: setup.index_type,
            assume_aligned_vectors,
            aligned_for,
            specialize: false,
            clock_probe: false,
        };
        crate::prepare::lower(&req.source, &options)
            .map(|c| c.cuda)
            .ok()
    };
    let generic = if req.generic {
        Some(compilation.cuda.clone())
    } else {
        cuda_of(false, Some(req.sizes.clone()))
    };
    let aligned = cuda_of(true, None) == generic && cuda_of(false, None) != generic;
    let variant = Variant {
        index_type: setup.index_type,
        assume_aligned_vectors: aligned,
        reason: format!(
            "what a run with {} builds ({}; {})",
            sizes.join(","),
            if req.generic {
                "generic over the sizes"
            } else {
                "specialised to them"
            },
            setup.index_reason
        ),
    };
    Ok((compilation, variant))
}

/// NVRTC's and nvdisasm's output for one CUDA source: what [`machine_code`] caches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineCode {
    /// `major.minor` of NVRTC.
    pub nvrtc: String,
    /// nvdisasm's version (none: not found).
    pub nvdisasm: Option<String>,
    pub options: Vec<String>,
    /// The program log: front-end warnings and ptxas's `-v` report.
    pub log: String,
    pub ptx: String,
    /// `nvdisasm -c -gi` of the CUBIN.
    pub sass: Option<String>,
    /// Why there is no SASS.
    pub sass_error: Option<String>,
    pub cubin_bytes: usize,
    pub nvrtc_ms: f64,
}

/// Compiles `cuda` (named `name` in line info and messages) and disassembles it; from the
/// cache in `cache` when it is there. Returns whether it came from the cache.
pub fn machine_code(
    cuda: &str,
    name: &str,
    cache: Option<&Path>,
) -> Result<(MachineCode, bool), nvrtc::NvrtcError> {
    let (major, minor) = nvrtc::version()?;
    let nvrtc_version = format!("{major}.{minor}");
    let disasm = find_nvdisasm().and_then(|p| {
        let v = nvdisasm_version(&p)?;
        Ok((p, v))
    });
    let options = {
        let mut o = nvrtc::options(nvrtc::include_dir()?.as_deref());
        o.push(nvrtc::PTXAS_VERBOSE.into());
        o
    };
    let key = {
        let mut h = Sha256::new();
        h.update(format!("inspect 1\nnvrtc {nvrtc_version}\n").as_bytes());
        if let Ok((_, v)) = &disasm {
            h.update(format!("nvdisasm {v}\n").as_bytes());
        }
        for o in &options {
            h.update(o.as_bytes());
            h.update(b"\n");
        }
        h.update(name.as_bytes());
        h.update(b"\0");
        h.update(cuda.as_bytes());
        crate::worker::hex(&h.finalize())
    };
    let path = cache.map(|dir| dir.join(format!("{key}.json")));
    if let Some(p) = &path {
        if let Some(mc) = std::fs::read(p)
            .ok()
            .and_then(|b| serde_json::from_slice::<MachineCode>(&b).ok())
        {
            return Ok((mc, true));
        }
    }
    let (cubin, ptx) = nvrtc::compile_with(cuda, name, &[nvrtc::PTXAS_VERBOSE], true)?;
    let (sass, sass_error) = match &disasm {
        Ok((p, _)) => match disassemble(p, &cubin.image) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e)),
        },
        Err(e) => (None, Some(e.clone())),
    };
    let mc = MachineCode {
        nvrtc: nvrtc_version,
        nvdisasm: disasm.ok().map(|(_, v)| v),
        options: cubin.options,
        log: cubin.log,
        ptx: ptx.unwrap_or_default(),
        sass,
        sass_error,
        cubin_bytes: cubin.image.len(),
        nvrtc_ms: cubin.compile_ms,
    };
    // Only complete results are kept: a missing nvdisasm may be installed later.
    if let (Some(p), Some(dir), true) = (&path, cache, mc.sass.is_some()) {
        let bytes = serde_json::to_vec(&mc).expect("machine code serializes");
        // Best effort: an unwritable cache only costs the next request a compile.
        let _ = crate::worker::write_atomically(dir, p, &bytes);
    }
    Ok((mc, false))
}

/// `$HOPFUSE_NVDISASM`, else `nvdisasm` on `PATH`, in `$CUDA_HOME/bin`, `$CUDA_PATH/bin` or
/// `/usr/local/cuda/bin`.
pub fn find_nvdisasm() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(NVDISASM_ENV).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{NVDISASM_ENV}={} is not a file", p.display()))
        };
    }
    let path_dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let cuda_dirs = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).filter(|v| !v.is_empty()))
        .map(|v| PathBuf::from(v).join("bin"))
        .chain(std::iter::once(PathBuf::from("/usr/local/cuda/bin")));
    path_dirs
        .into_iter()
        .chain(cuda_dirs)
        .map(|d| d.join("nvdisasm"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "nvdisasm not found (no {NVDISASM_ENV}, not on PATH, not in a CUDA toolkit): \
                 run `eval \"$(scripts/setup-nvrtc.sh)\"`, which installs it from PyPI"
            )
        })
}

/// `V13.2.86` from `nvdisasm --version`.
fn nvdisasm_version(exe: &Path) -> Result<String, String> {
    let out = Command::new(exe)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .find(|w| w.starts_with('V') && w[1..].starts_with(|c: char| c.is_ascii_digit()))
        .map(str::to_string)
        .ok_or_else(|| format!("{} --version printed no version", exe.display()))
}

/// `nvdisasm -c -gi` of a CUBIN (through a temporary file: nvdisasm reads files only).
fn disassemble(exe: &Path, cubin: &[u8]) -> Result<String, String> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let file = std::env::temp_dir().join(format!(
        "hopfuse-inspect-{}-{}.cubin",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&file, cubin).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    let out = Command::new(exe)
        .args(["-c", "-gi"])
        .arg(&file)
        .stdin(Stdio::null())
        .output();
    let _ = std::fs::remove_file(&file);
    let out = out.map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!(
            "nvdisasm failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    String::from_utf8(out.stdout).map_err(|_| "nvdisasm printed invalid UTF-8".into())
}

// ---------------------------------------------------------------------------------------------
// The inspection

/// The name NVRTC gets for a kernel's source (it names the file in line info).
pub fn cuda_name(c: &Compilation) -> String {
    format!("{}.cu", c.plan.kernel_name)
}

/// Puts a compilation and its machine code together.
pub fn assemble(c: &Compilation, variant: Variant, mc: MachineCode, cached: bool) -> Inspection {
    let name = cuda_name(c);
    let in_kernel = |line: u32| {
        c.lines
            .get(line as usize)
            .is_some_and(|l| !matches!(l, CudaLine::Prelude))
    };
    let ptx = parse_ptx(&mc.ptx, &name, &in_kernel);
    let sass = mc.sass.as_deref().map(|s| parse_sass(s, &name, &in_kernel));
    let warnings = nvrtc::warning_lines(&mc.log)
        .into_iter()
        .map(|text| Warning {
            cuda_line: warning_line(&text, &name),
            text,
        })
        .collect();
    Inspection {
        kernel: c.plan.kernel_name.clone(),
        variant,
        cuda: c.cuda.clone(),
        ir: c.passes.last().map(|p| p.ir.clone()).unwrap_or_default(),
        lines: c.lines.clone(),
        ptx,
        sass,
        sass_unavailable: mc.sass_error.clone(),
        resources: parse_resources(&mc.log),
        warnings,
        log: mc.log,
        nvrtc: mc.nvrtc,
        nvdisasm: mc.nvdisasm,
        options: mc.options,
        cubin_bytes: mc.cubin_bytes,
        cached,
        nvrtc_ms: mc.nvrtc_ms,
    }
}

/// Lowers, compiles and disassembles in this process (the CLI).
pub fn inspect(req: &InspectRequest, cache: Option<&Path>) -> Result<Inspection, RunError> {
    let (c, variant) = lower(req)?;
    let (mc, cached) = machine_code(&c.cuda, &cuda_name(&c), cache)
        .map_err(|e| RunError::new(Stage::Nvrtc, e.to_string()))?;
    Ok(assemble(&c, variant, mc, cached))
}

// ---------------------------------------------------------------------------------------------
// The CLI's listings

/// The PTX or SASS listing with each run of lines from one CUDA line headed by that line, its
/// IR statement and the pass that made it: `// kernel.cu:42  y[i] = ...` /
/// `//   IR 17 (circular_buffer): y[...] = ...`.
pub fn annotate(ins: &Inspection, listing: &Listing) -> String {
    let cuda: Vec<&str> = ins.cuda.lines().collect();
    let ir: Vec<&str> = ins.ir.lines().collect();
    let mut out = String::new();
    let mut last = None;
    for (i, line) in listing.text.lines().enumerate() {
        let at = listing.cuda_lines.get(i).copied().flatten();
        if let Some(n) = at.filter(|_| at != last) {
            let text = cuda
                .get((n as usize).saturating_sub(1))
                .map(|s| s.trim())
                .unwrap_or("");
            out.push_str(&format!("\t// {}.cu:{n}  {text}\n", ins.kernel));
            if let Some(l) = ins.lines.get(n as usize) {
                if let Some(ir_line) = l.ir_line() {
                    let ir_text = ir
                        .get(ir_line.saturating_sub(1))
                        .map(|s| s.trim())
                        .unwrap_or("");
                    out.push_str(&format!(
                        "\t//   IR {ir_line} ({}): {ir_text}\n",
                        l.pass().unwrap_or("?")
                    ));
                }
            }
            last = at;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The resource summary in one comment line.
pub fn resource_line(ins: &Inspection) -> String {
    let r = &ins.resources;
    let n = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "?".into());
    format!(
        "// {}: {} registers, {} bytes static shared memory, {} barriers, stack {} bytes, \
         spills {} bytes stored / {} loaded; NVRTC {}{}",
        ins.kernel,
        n(r.registers.map(u64::from)),
        n(r.shared_bytes),
        n(r.barriers.map(u64::from)),
        n(r.stack_bytes),
        n(r.spill_store_bytes),
        n(r.spill_load_bytes),
        ins.nvrtc,
        ins.nvdisasm
            .as_deref()
            .map(|v| format!(", nvdisasm {v}"))
            .unwrap_or_default()
    )
}

// ---------------------------------------------------------------------------------------------
// The service's child process

/// What the service sends `hopfuse worker --inspect` on stdin.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InspectJob {
    pub cuda: String,
    pub name: String,
    /// Cache directory (none: no cache).
    #[serde(default)]
    pub cache: Option<PathBuf>,
}

/// What it answers on stdout (one JSON line).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InspectAnswer {
    Machine {
        machine: MachineCode,
        cached: bool,
    },
    /// NVRTC missing or failing.
    Error {
        error: String,
        nvrtc_missing: bool,
    },
}

/// `hopfuse worker --inspect`: one [`InspectJob`] on stdin, one [`InspectAnswer`] on stdout.
pub fn worker_main() -> i32 {
    let mut input = String::new();
    let answer = match std::io::stdin()
        .lock()
        .take(16 << 20)
        .read_to_string(&mut input)
        .map_err(|e| e.to_string())
        .and_then(|_| serde_json::from_str::<InspectJob>(&input).map_err(|e| e.to_string()))
    {
        Err(e) => InspectAnswer::Error {
            error: format!("bad inspect job: {e}"),
            nvrtc_missing: false,
        },
        Ok(job) => match machine_code(&job.cuda, &job.name, job.cache.as_deref()) {
            Ok((machine, cached)) => InspectAnswer::Machine { machine, cached },
            Err(e) => InspectAnswer::Error {
                nvrtc_missing: matches!(e, nvrtc::NvrtcError::LibraryMissing),
                error: e.to_string(),
            },
        },
    };
    let line = serde_json::to_string(&answer).expect("answers serialize");
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
        return 3;
    }
    0
}

/// Runs [`worker_main`] in a child process of `exe` with a time limit (the child is killed past
/// it).
pub async fn in_child(
    exe: &Path,
    job: &InspectJob,
    limit: std::time::Duration,
) -> Result<InspectAnswer, String> {
    use tokio::io::AsyncWriteExt;
    let start = Instant::now();
    let mut child = tokio::process::Command::new(exe)
        .args(["worker", "--inspect"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the inspect worker: {e}"))?;
    let mut stdin = child.stdin.take().expect("piped");
    let body = serde_json::to_vec(job).expect("jobs serialize");
    let run = async move {
        stdin
            .write_all(&body)
            .await
            .map_err(|e| format!("cannot send the job: {e}"))?;
        drop(stdin);
        child
            .wait_with_output()
            .await
            .map_err(|e| format!("the inspect worker failed: {e}"))
    };
    let out = match tokio::time::timeout(limit, run).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(format!(
                "NVRTC and nvdisasm did not finish in {:.0} s (killed)",
                limit.as_secs_f64()
            ))
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).map_err(|_| {
        format!(
            "the inspect worker ended ({}) after {:.0} ms without an answer: {}",
            out.status,
            start.elapsed().as_secs_f64() * 1e3,
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })
}

/// Line-info coverage of an inspection, for `hopfuse nvrtc-check --inspect`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coverage {
    pub ptx_instructions: usize,
    pub ptx_mapped: usize,
    /// PTX instructions without line info, first few.
    pub ptx_unmapped: Vec<String>,
    pub sass_instructions: usize,
    pub sass_mapped: usize,
    /// Kernel-IR statements with at least one SASS instruction.
    pub statements_with_sass: usize,
    /// SASS instructions without line info, first few.
    pub unmapped: Vec<String>,
}

/// Counts instructions and those with a CUDA line. SASS instructions after the kernel's last
/// mapped one (the `BRA` to itself and the `NOP` padding that ends every function) do not count.
pub fn coverage(ins: &Inspection) -> Coverage {
    let count = |l: &Listing, sass: bool| {
        let code: Vec<(usize, &str)> = l
            .text
            .lines()
            .enumerate()
            .filter(|(_, t)| {
                if sass {
                    let t = t.trim();
                    t.starts_with("/*") && is_instruction(t)
                } else {
                    is_instruction(t)
                }
            })
            .collect();
        let last = code
            .iter()
            .rposition(|(i, _)| l.cuda_lines[*i].is_some())
            .map_or(0, |p| p + 1);
        let code = if sass { &code[..last] } else { &code[..] };
        let unmapped: Vec<String> = code
            .iter()
            .filter(|(i, _)| l.cuda_lines[*i].is_none())
            .map(|(_, t)| t.trim().to_string())
            .collect();
        (code.len(), code.len() - unmapped.len(), unmapped)
    };
    let (ptx_instructions, ptx_mapped, ptx_unmapped) = count(&ins.ptx, false);
    let (sass_instructions, sass_mapped, unmapped, statements_with_sass) = match &ins.sass {
        Some(s) => {
            let (n, m, u) = count(s, true);
            let stmts: std::collections::BTreeSet<usize> = s
                .cuda_lines
                .iter()
                .flatten()
                .filter_map(|&l| match ins.lines.get(l as usize) {
                    Some(CudaLine::Stmt { stmt, .. }) => Some(*stmt),
                    _ => None,
                })
                .collect();
            (n, m, u, stmts.len())
        }
        None => (0, 0, Vec::new(), 0),
    };
    Coverage {
        ptx_instructions,
        ptx_mapped,
        ptx_unmapped: ptx_unmapped.into_iter().take(5).collect(),
        sass_instructions,
        sass_mapped,
        statements_with_sass,
        unmapped: unmapped.into_iter().take(5).collect(),
    }
}

// ---------------------------------------------------------------------------------------------
// The service's endpoint

/// How long NVRTC and nvdisasm may take for one `POST /api/inspect` (the child is killed past
/// it).
pub const SERVICE_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Why `POST /api/inspect` has no inspection.
#[derive(Debug)]
pub enum ServiceError {
    /// 400: the program does not compile (with the compiler's diagnostics) or the sizes do
    /// not fit it.
    BadRequest {
        message: String,
        diagnostics: Option<Vec<hopfuse::Diagnostic>>,
    },
    /// 503: no NVRTC on this host.
    Unavailable(String),
    /// 422: NVRTC rejected the CUDA (with its log in the message).
    Unprocessable(String),
    /// 500: the child crashed or ran past [`SERVICE_TIME_LIMIT`].
    Internal(String),
}

/// `POST /api/inspect`'s lowering (the service runs it in a compile slot): the program lowered
/// once to the variant asked for, or a 400 with the compiler's diagnostics or the sizes' error.
pub fn lower_for_service(req: &InspectRequest) -> Result<(Compilation, Variant), ServiceError> {
    lower_with_diagnostics(req).map_err(|(e, diagnostics)| match diagnostics {
        Some(d) => {
            let d = hopfuse::Diagnostics(d);
            ServiceError::BadRequest {
                message: format!("the program does not compile: {d}")
                    .trim_end()
                    .to_string(),
                diagnostics: Some(d.0),
            }
        }
        None => ServiceError::BadRequest {
            message: e
                .message
                .replace("(pass it with --size ", "(give it in `sizes`, e.g. "),
            diagnostics: None,
        },
    })
}

/// `POST /api/inspect` after [`lower_for_service`]: builds and disassembles the CUDA in a child
/// process (`hopfuse worker --inspect`, killed past [`SERVICE_TIME_LIMIT`]).
pub async fn build_in_child(
    exe: &Path,
    cache: Option<PathBuf>,
    c: Compilation,
    variant: Variant,
) -> Result<Inspection, ServiceError> {
    let job = InspectJob {
        cuda: c.cuda.clone(),
        name: cuda_name(&c),
        cache,
    };
    match in_child(exe, &job, SERVICE_TIME_LIMIT).await {
        Ok(InspectAnswer::Machine { machine, cached }) => {
            Ok(assemble(&c, variant, machine, cached))
        }
        Ok(InspectAnswer::Error {
            error,
            nvrtc_missing: true,
        }) => Err(ServiceError::Unavailable(format!(
            "PTX and SASS are unavailable on this service: {error}"
        ))),
        Ok(InspectAnswer::Error { error, .. }) => Err(ServiceError::Unprocessable(error)),
        Err(e) => Err(ServiceError::Internal(e)),
    }
}
