//! Peers: what a user would run instead of the hopfuse kernel, timed in the same run.
//!
//! Takes a run (its request, the float64 reference outputs, its L2 policy) and a closure that
//! times a round of kernel launches. The peers are the fusion's torch twin
//! (`compiler/src/backend/torch/`) run eagerly and under `torch.compile`, and where the fusion
//! has a library form, that call: cuBLASLt's fused epilogue, `torch._scaled_mm`, or for
//! attention SDPA (as PyTorch dispatches it and on cuDNN) and FlexAttention (also for the
//! variants: a softcap, ALiBi, a sliding window, a document mask); all in a Python subprocess
//! (`runner/peers/peers.py`, embedded in the binary, driven over stdin/stdout JSON lines; the
//! interpreter is `$HOPFUSE_PYTHON`, default `python3`). The subprocess gets the run's exact
//! input data (regenerated from the seed the way the engine generates it, written as raw
//! little-endian files in a temporary directory), calls each peer once (torch.compile compiles
//! and autotunes then: reported as `compile_s`, never timed) and writes its outputs, which are
//! validated here against the same reference as the kernel. Timing alternates: a round of
//! kernel launches, then a round of every peer, [`ROUNDS`] times, so both see the same GPU
//! state; each side times with CUDA events on a held stream, with the run's L2 policy.
//!
//! Guarantees: a peer failure never fails the run. Without torch (or CUDA in torch) the kernel
//! is timed as without peers and the report says `unavailable` and why.

use crate::data;
use crate::gpu::Timing;
use crate::validate::{self, Check, Tolerances};
use hopfuse::fusion::{Fusion, IterKind, TensorId};
use hopfuse::DType;
use hopfuse_api::run::{L2Policy, RunError, RunRequest, Stage};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use tracing::{info, warn};

/// The driver script (written next to the session's files when the subprocess starts).
pub const SCRIPT: &str = include_str!("../peers/peers.py");

/// Rounds of kernel timing alternated with rounds of peer timing.
pub const ROUNDS: u32 = 5;

/// Round `round`'s share of a run's warm-up and timed launches split over `rounds` rounds:
/// the iterations evenly, the first round with the full warm-up and every later one with a
/// share of it (at least one launch, to settle the GPU after the other side's round).
pub fn round_share(warmup: u32, iters: u32, rounds: u32, round: u32) -> (u32, u32) {
    let share = iters / rounds + u32::from(round < iters % rounds);
    let warm = if round == 0 {
        warmup
    } else {
        (warmup / rounds).max(1)
    };
    (warm, share)
}

/// The peers every run times.
pub const PEERS: [&str; 2] = ["eager", "torch.compile"];

/// The peer of a matrix product with a bias (and ReLU or GELU) epilogue: one cuBLASLt call
/// with the epilogue fused (`torch.addmm` / `torch._addmm_activation`, see
/// `hopfuse::backend::torch::emit_cublaslt`).
pub const CUBLASLT: &str = "cuBLASLt epilogue";

/// The peer of an FP8 matrix product with per-tensor, row-wise or DeepSeek-V3 block scales (1 x
/// 128 on A, 128 x 128 on B): `torch._scaled_mm` (`hopfuse::backend::torch::emit_scaled_mm`),
/// cuBLASLt's FP8 GEMM as a PyTorch user calls it. Where cuBLAS refuses the shape (block
/// scales need K a multiple of 128), the peer is not timed and says torch's message.
pub const SCALED_MM: &str = "torch._scaled_mm";

/// The peers of attention (softmax over the keys of `q k^T * scale`, optionally causal, times
/// `v`): `torch.nn.functional.scaled_dot_product_attention` as PyTorch dispatches it (flash
/// attention on the H100) and on cuDNN's kernel (`hopfuse::backend::torch::emit_sdpa`).
pub const SDPA: &str = "SDPA";
pub const CUDNN_SDPA: &str = "cuDNN SDPA";

/// The peer of attention and of its variants SDPA has no flag for (a softcap, ALiBi, a sliding
/// window, a document mask): `torch.nn.attention.flex_attention` compiled once, the variant as
/// its `score_mod` and the mask as a block mask (`hopfuse::backend::torch::emit_flex`).
pub const FLEX: &str = "FlexAttention";

/// The `_scaled_mm` twin of a program, its scales moved after the product as the compiler
/// moves them (a dequantized product written with the scales inside the sum has one too).
fn scaled_mm(program: &hopfuse::frontend::Program) -> Option<hopfuse::backend::torch::Twin> {
    let hoisted = hopfuse::frontend::dequantize::hoist_scales(program);
    let fusion = hopfuse::fusion::build(&hoisted.fusion).ok()?;
    hopfuse::backend::torch::emit_scaled_mm(&fusion)
}

/// How long the subprocess may take to start (importing torch), to set up (the first call of
/// every peer: torch.compile compiles and autotunes), and to time one round.
const START_LIMIT: Duration = Duration::from_secs(120);
const SETUP_LIMIT: Duration = Duration::from_secs(900);
const ROUND_LIMIT: Duration = Duration::from_secs(300);

// Defined in `hopfuse-api` (`RunResult::peers`).
pub use hopfuse_api::run::{PeerResult, PeersReport};

/// What the engine shares of one run.
pub struct PeerRun<'a> {
    pub req: &'a RunRequest,
    /// The float64 reference's outputs, by name.
    pub expected: &'a BTreeMap<String, Vec<f64>>,
    /// Each output's tolerance: the kernel's (a peer computes the same thing).
    pub tolerances: &'a Tolerances,
    pub l2: &'a L2Policy,
}

/// Times `warmup` then `iters` kernel launches and returns the timed ones' microseconds.
pub type KernelRound<'a> = dyn FnMut(u32, u32) -> Result<Vec<f64>, RunError> + 'a;

/// How the peer subprocess is started: `$HOPFUSE_PYTHON` (default `python3`) by default.
#[derive(Clone, Debug)]
pub struct PythonCommand {
    pub program: String,
    /// Arguments before the script.
    pub args: Vec<String>,
    /// Extra environment (tests point `PYTHONPATH` at `runner/peers/fake_torch`).
    pub env: Vec<(String, String)>,
}

impl Default for PythonCommand {
    fn default() -> PythonCommand {
        PythonCommand {
            program: std::env::var("HOPFUSE_PYTHON").unwrap_or_else(|_| "python3".into()),
            args: Vec::new(),
            env: Vec::new(),
        }
    }
}

/// The peer subprocess, started on first use and kept (a warm worker keeps it between jobs,
/// so torch is imported once).
#[derive(Default)]
pub struct Peers {
    python: PythonCommand,
    driver: Option<Driver>,
    /// Set when the subprocess said torch is unusable: not asked again.
    unavailable: Option<String>,
}

impl Peers {
    pub fn new() -> Peers {
        Peers::default()
    }

    pub fn with_python(python: PythonCommand) -> Peers {
        Peers {
            python,
            ..Peers::default()
        }
    }

    /// Times the kernel in [`ROUNDS`] rounds alternated with rounds of every peer. Returns the
    /// kernel's timing over all rounds and the peers' report. Errors are the kernel's only.
    pub fn interleave(
        &mut self,
        run: &PeerRun,
        kernel: &mut KernelRound,
    ) -> Result<(Timing, PeersReport), RunError> {
        let req = run.req;
        let alone = |kernel: &mut KernelRound, why: String| -> Result<_, RunError> {
            warn!("peers unavailable: {why}");
            let timing = timing(kernel(req.warmup, req.iters)?)?;
            Ok((timing, PeersReport::unavailable(why)))
        };
        if let Some(why) = &self.unavailable {
            return alone(kernel, why.clone());
        }
        let session = match self.setup(run) {
            Ok(s) => s,
            Err(why) => return alone(kernel, why),
        };
        let Session {
            dir: _dir,
            torch,
            mut peers,
        } = session;
        let rounds = ROUNDS.min(req.iters).max(1);
        let mut kernel_us = Vec::new();
        let mut kernel_round_medians = Vec::new();
        let mut peer_round_medians: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        let mut peer_us: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        let mut failure = None;
        let timed: Vec<String> = peers
            .iter()
            .filter(|p| p.error.is_none())
            .map(|p| p.name.clone())
            .collect();
        for round in 0..rounds {
            let (warmup, iters) = round_share(req.warmup, req.iters, rounds, round);
            let us = kernel(warmup, iters)?;
            kernel_round_medians.push(median(&us));
            kernel_us.extend(us);
            if failure.is_some() || timed.is_empty() {
                continue;
            }
            let cmd = json!({"cmd": "time", "warmup": warmup, "iters": iters, "round": round});
            match self.request(&cmd, "timed", ROUND_LIMIT) {
                Ok(reply) => {
                    for name in &timed {
                        let us: Vec<f64> = reply["samples"][name]
                            .as_array()
                            .map(|a| a.iter().filter_map(Value::as_f64).collect())
                            .unwrap_or_default();
                        peer_round_medians
                            .entry(name.clone())
                            .or_default()
                            .push(median(&us));
                        peer_us.entry(name.clone()).or_default().extend(us);
                    }
                }
                Err(e) => failure = Some(e),
            }
        }
        if failure.is_none() {
            if let Err(e) = self.request(&json!({"cmd": "end"}), "ended", ROUND_LIMIT) {
                failure = Some(e);
            }
        }
        let kernel_timing = timing(kernel_us)?;
        if let Some(e) = &failure {
            warn!("peers failed while timing: {e}");
        }
        for p in peers.iter_mut().filter(|p| p.error.is_none()) {
            match (
                &failure,
                peer_us.remove(&p.name).and_then(Timing::from_samples),
            ) {
                (None, Some(t)) => {
                    p.speedup = Some(t.median_us / kernel_timing.median_us);
                    p.timing = Some(t);
                }
                (Some(e), _) => p.error = Some(format!("timing: {e}")),
                (None, None) => p.error = Some("no valid timing samples".into()),
            }
        }
        let best = peers
            .iter()
            .filter(|p| p.passed && p.timing.is_some())
            .min_by(|a, b| median_of(a).total_cmp(&median_of(b)))
            .map(|p| p.name.clone());
        let per_round: Vec<f64> = best
            .as_ref()
            .and_then(|b| peer_round_medians.get(b))
            .map(|m| {
                m.iter()
                    .zip(&kernel_round_medians)
                    .map(|(p, k)| p / k)
                    .filter(|r| r.is_finite())
                    .collect()
            })
            .unwrap_or_default();
        let speedup = best
            .as_ref()
            .and_then(|b| peers.iter().find(|p| &p.name == b))
            .and_then(|p| p.speedup);
        Ok((
            kernel_timing,
            PeersReport {
                unavailable: None,
                torch: Some(torch),
                rounds,
                peers,
                best,
                speedup,
                speedup_min: per_round.iter().copied().reduce(f64::min),
                speedup_max: per_round.iter().copied().reduce(f64::max),
            },
        ))
    }

    /// Starts the subprocess if needed, writes the inputs, and runs every peer once; `Err` is
    /// why there are no peers.
    fn setup(&mut self, run: &PeerRun) -> Result<Session, String> {
        let req = run.req;
        let twin =
            hopfuse::torch_twin(&req.source).map_err(|d| d.render(&req.source, &req.file))?;
        let program = hopfuse::frontend::parse(&req.source).map_err(|d| d.message)?;
        let fusion = hopfuse::fusion::build(&program.fusion).map_err(|d| d.message)?;
        let torch = self.start()?;
        let dir = TempDir::new().map_err(|e| format!("cannot make a temporary directory: {e}"))?;
        let inputs = write_inputs(req, &fusion, &dir.path)?;
        let (mut outputs, mut outputs_json) = (Vec::new(), Vec::new());
        for &t in &fusion.outputs {
            let (name, dtype, shape) = describe(&fusion, t, &req.sizes)?;
            outputs_json.push(json!({"name": name, "dtype": torch_name(dtype), "shape": shape}));
            outputs.push((name, dtype));
        }
        let l2 = match run.l2 {
            L2Policy::None => json!({"kind": "none"}),
            L2Policy::Rotate { sets } => json!({"kind": "rotate", "sets": sets}),
            L2Policy::Flush { bytes } => json!({"kind": "flush", "bytes": bytes}),
        };
        // A matrix product with a bias epilogue: also cuBLASLt's fused epilogue; an FP8 one with
        // its scales (per tensor, per row / column, or in blocks): also torch._scaled_mm;
        // attention: also SDPA (PyTorch's choice and cuDNN's) where SDPA computes it, and
        // FlexAttention, which also computes its variants.
        use hopfuse::backend::torch::{emit_flex, emit_sdpa, SdpaBackend};
        let extra: Vec<Value> = [
            (
                CUBLASLT,
                hopfuse::backend::torch::emit_cublaslt(&fusion).map(|(lt, _)| lt),
            ),
            (SCALED_MM, scaled_mm(&program)),
            (SDPA, emit_sdpa(&fusion, SdpaBackend::Default)),
            (CUDNN_SDPA, emit_sdpa(&fusion, SdpaBackend::Cudnn)),
            (FLEX, emit_flex(&fusion)),
        ]
        .into_iter()
        .filter_map(|(name, twin)| {
            twin.map(|t| json!({"name": name, "twin": t.source, "function": t.function}))
        })
        .collect();
        let cmd = json!({
            "cmd": "setup",
            "extra": extra,
            "dir": dir.path,
            "twin": twin.source,
            "function": twin.function,
            "inputs": inputs,
            "outputs": outputs_json,
            "l2": l2,
            "peers": PEERS,
        });
        info!("peers: setting up {} ({})", twin.function, PEERS.join(", "));
        let reply = self.request(&cmd, "setup", SETUP_LIMIT)?;
        let mut peers = Vec::new();
        for p in reply["peers"].as_array().into_iter().flatten() {
            let name = p["name"].as_str().unwrap_or("?").to_string();
            let mut result = PeerResult {
                name: name.clone(),
                timing: None,
                validation: Vec::new(),
                passed: false,
                compile_s: p["compile_s"].as_f64(),
                speedup: None,
                error: p["error"].as_str().map(String::from),
            };
            if result.error.is_none() {
                match validate_peer(&name, p, &outputs, run.expected, run.tolerances) {
                    Ok(checks) => {
                        result.passed = checks.iter().all(|c| c.passed);
                        result.validation = checks;
                    }
                    Err(e) => result.error = Some(e),
                }
            }
            peers.push(result);
        }
        Ok(Session { dir, torch, peers })
    }

    /// The running subprocess's torch version, starting it if needed.
    fn start(&mut self) -> Result<String, String> {
        if let Some(d) = &self.driver {
            return Ok(d.torch.clone());
        }
        let started = Driver::start(&self.python);
        match started {
            Ok(d) => {
                let torch = d.torch.clone();
                self.driver = Some(d);
                Ok(torch)
            }
            Err(Start::Unavailable(why)) => {
                self.unavailable = Some(why.clone());
                Err(why)
            }
            Err(Start::Failed(why)) => Err(why),
        }
    }

    /// Sends one command and waits for the reply `event`; on any failure the subprocess is
    /// stopped (the next run starts a fresh one).
    fn request(&mut self, cmd: &Value, event: &str, limit: Duration) -> Result<Value, String> {
        let Some(d) = &mut self.driver else {
            return Err("the peer process is not running".into());
        };
        let reply = d.request(cmd, limit);
        let reply = match reply {
            Ok(r) if r["event"] == event => Ok(r),
            Ok(r) if r["event"] == "error" => Err(format!(
                "peers.py: {}",
                r["message"].as_str().unwrap_or("an error")
            )),
            Ok(r) => Err(format!("peers.py answered {r} instead of `{event}`")),
            Err(e) => Err(e),
        };
        if reply.is_err() {
            self.driver = None;
        }
        reply
    }
}

/// A set-up peer session: its files and the peers' first-call results.
struct Session {
    dir: TempDir,
    torch: String,
    peers: Vec<PeerResult>,
}

/// A peer's first-call outputs against the reference.
fn validate_peer(
    name: &str,
    reply: &Value,
    outputs: &[(String, DType)],
    expected: &BTreeMap<String, Vec<f64>>,
    tolerances: &Tolerances,
) -> Result<Vec<Check>, String> {
    let files = reply["outputs"].as_array().cloned().unwrap_or_default();
    let mut checks = Vec::new();
    for (output, dtype) in outputs {
        let file = files
            .iter()
            .find(|f| f["name"] == output.as_str())
            .and_then(|f| f["file"].as_str())
            .ok_or_else(|| format!("no output `{output}` from {name}"))?;
        let bytes = std::fs::read(file).map_err(|e| format!("reading {file}: {e}"))?;
        let want = expected
            .get(output)
            .ok_or_else(|| format!("no reference for `{output}`"))?;
        let out = data::decode(*dtype, &bytes);
        checks.push(validate::check(
            &format!("{name} {output}"),
            *dtype,
            tolerances.of(output)?,
            &out,
            want,
        )?);
    }
    Ok(checks)
}

/// Name, dtype and shape (broadcast axes 1, scalars `[]`) of a fusion tensor at these sizes.
fn describe(
    f: &Fusion,
    t: TensorId,
    sizes: &BTreeMap<String, i64>,
) -> Result<(String, DType, Vec<usize>), String> {
    let tensor = &f.tensors[t];
    let shape = f
        .logical(t)
        .iter()
        .map(|&id| match f.ids[id].kind {
            IterKind::Broadcast => Ok(1),
            _ => {
                let e = f.class_extent(f.class_of(id));
                let v = e.eval(sizes).map_err(|e| e.to_string())?;
                usize::try_from(v).map_err(|_| format!("size {e} = {v} is negative"))
            }
        })
        .collect::<Result<_, String>>()?;
    Ok((tensor.name.clone(), tensor.dtype, shape))
}

fn torch_name(d: DType) -> &'static str {
    d.torch()
}

/// Writes each input of `fusion` for `req` into `dir` (`input_0.bin`, ...), as the engine makes
/// it: filled as the request's [`data::InputFills`] say, a scalar input given in the program
/// with that value. Returns the peers' `setup` entries (name, file, dtype, shape).
pub(crate) fn write_inputs(
    req: &RunRequest,
    fusion: &Fusion,
    dir: &Path,
) -> Result<Vec<Value>, String> {
    let fills = data::InputFills::resolve(&req.source, &req.sizes, &req.documents)
        .map_err(|e| e.to_string())?;
    let mut inputs = Vec::new();
    for &t in &fusion.inputs {
        let (name, dtype, shape) = describe(fusion, t, &req.sizes)?;
        let file = dir.join(format!("input_{}.bin", inputs.len()));
        // A scalar input's value given in the program, as the engine passes it.
        let written = match fusion.tensors[t].value {
            Some(v) => std::fs::write(&file, data::encode(dtype, &[dtype.round(v)])),
            None => {
                let n = shape.iter().product();
                write_input(&file, req.seed, &name, dtype, fills.of(&name), n)
            }
        };
        written.map_err(|e| format!("writing input `{name}`: {e}"))?;
        inputs
            .push(json!({"name": name, "file": file, "dtype": torch_name(dtype), "shape": shape}));
    }
    Ok(inputs)
}

/// Writes input `name`'s values exactly as the engine generates them (the same blocks,
/// [`data::seeded_input_block`], of the same fill), in blocks so a 2^28-element input needs no
/// 2 GiB of doubles.
fn write_input(
    path: &Path,
    seed: u64,
    name: &str,
    dtype: DType,
    fill: data::InputFill,
    n: usize,
) -> std::io::Result<()> {
    let block = data::seed_block_len();
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    for (b, start) in (0..n).step_by(block).enumerate() {
        let k = block.min(n - start);
        file.write_all(&data::encode(
            dtype,
            &data::seeded_input_block(dtype, seed, name, fill, b, k),
        ))?;
    }
    file.flush()
}

fn timing(us: Vec<f64>) -> Result<Timing, RunError> {
    Timing::from_samples(us).ok_or_else(|| RunError::new(Stage::Cuda, "no valid timing samples"))
}

fn median(us: &[f64]) -> f64 {
    hopfuse_api::run::median(us.to_vec()).unwrap_or(f64::NAN)
}

fn median_of(p: &PeerResult) -> f64 {
    p.timing.as_ref().map_or(f64::INFINITY, |t| t.median_us)
}

/// Why the subprocess did not start.
enum Start {
    /// torch is not importable or has no CUDA: sticky for this process.
    Unavailable(String),
    /// Anything else (no python3, a crash): tried again next run.
    Failed(String),
}

/// The running `peers.py` and a thread reading its stdout lines.
struct Driver {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    torch: String,
    /// Holds `peers.py` itself.
    _script: TempDir,
}

impl Driver {
    fn start(python: &PythonCommand) -> Result<Driver, Start> {
        let script = TempDir::new().map_err(|e| Start::Failed(e.to_string()))?;
        let path = script.path.join("peers.py");
        std::fs::write(&path, SCRIPT).map_err(|e| Start::Failed(e.to_string()))?;
        let mut child = Command::new(&python.program)
            .args(&python.args)
            .envs(python.env.iter().map(|(k, v)| (k, v)))
            .arg("-u")
            .arg(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Start::Unavailable(format!("cannot start {}: {e}", python.program)))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut d = Driver {
            child,
            stdin,
            lines,
            torch: String::new(),
            _script: script,
        };
        let hello = d.read(START_LIMIT).map_err(Start::Failed)?;
        match hello["event"].as_str() {
            Some("hello") => {
                d.torch = hello["torch"].as_str().unwrap_or("?").to_string();
                info!(
                    "peers: torch {} on {}",
                    d.torch,
                    hello["device"].as_str().unwrap_or("?")
                );
                Ok(d)
            }
            Some("unavailable") => Err(Start::Unavailable(
                hello["reason"]
                    .as_str()
                    .unwrap_or("no reason given")
                    .to_string(),
            )),
            _ => Err(Start::Failed(format!("peers.py said {hello}"))),
        }
    }

    fn request(&mut self, cmd: &Value, limit: Duration) -> Result<Value, String> {
        writeln!(self.stdin, "{cmd}")
            .and_then(|_| self.stdin.flush())
            .map_err(|e| format!("the peer process is gone: {e}"))?;
        self.read(limit)
    }

    fn read(&mut self, limit: Duration) -> Result<Value, String> {
        match self.lines.recv_timeout(limit) {
            Ok(line) => {
                serde_json::from_str(&line).map_err(|e| format!("peers.py wrote `{line}`: {e}"))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => Err(format!(
                "peers.py did not answer within {} s",
                limit.as_secs()
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err("peers.py exited (its stderr says why)".into())
            }
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Closing stdin ends it; a hung one is killed.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory removed with everything in it when dropped.
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn new() -> std::io::Result<TempDir> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "hopfuse-peers-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path)?;
        Ok(TempDir { path })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_python() -> PythonCommand {
        PythonCommand {
            program: "python3".into(),
            args: Vec::new(),
            env: vec![(
                "PYTHONPATH".into(),
                concat!(env!("CARGO_MANIFEST_DIR"), "/peers/fake_torch").into(),
            )],
        }
    }

    #[test]
    fn a_peer_is_validated_at_the_tolerance_its_output_earns() {
        // An f32 output of a bf16 product, off by 5e-4 relative L2: a FAIL at f32's 1e-5, a
        // PASS at the 1e-3 the product earns (a peer computes what the kernel does).
        let dir = TempDir::new().unwrap();
        let file = dir.path.join("s.bin");
        std::fs::write(&file, data::encode(DType::F32, &[1.0, 1.0, 1.0, 1.001])).unwrap();
        let reply = json!({"outputs": [{"name": "s", "file": file}]});
        let outputs = [("s".to_string(), DType::F32)];
        let expected = BTreeMap::from([("s".to_string(), vec![1.0; 4])]);
        let product = hopfuse::reference_fusion(
            "fusion f {\n  input a: bf16[M, K]\n  input b: bf16[N, K]\n  s = sum(cast(broadcast(a, axis=1), f32) * cast(broadcast(b, axis=0), f32), axis=2)\n  output s\n}",
        )
        .unwrap();
        let earned = Tolerances::of_fusion(&product);
        let checks = validate_peer("torch", &reply, &outputs, &expected, &earned).unwrap();
        assert!(checks[0].passed, "{checks:?}");
        assert_eq!(checks[0].tolerance, 1e-3);
        let by_dtype = Tolerances::of_dtypes([("s", DType::F32)]);
        let checks = validate_peer("torch", &reply, &outputs, &expected, &by_dtype).unwrap();
        assert!(!checks[0].passed, "{checks:?}");
        // An output the tolerances do not know is an error, not a default.
        let other = Tolerances::of_dtypes([("t", DType::F32)]);
        assert!(validate_peer("torch", &reply, &outputs, &expected, &other).is_err());
    }

    #[test]
    fn input_files_hold_the_engines_values_across_blocks() {
        // More than one block of the seeded stream: a sequential stream would differ after the
        // first 2^20 values (the peers once validated against other inputs than the kernel's).
        let n = data::seed_block_len() + 5;
        let dir = std::env::temp_dir().join(format!("hopfuse-peers-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.bin");
        write_input(&path, 7, "x", DType::BF16, data::InputFill::Random, n).unwrap();
        let written = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let expected = data::encode(DType::BF16, &data::seeded_values(DType::BF16, n, 7, "x"));
        assert!(
            written == expected,
            "the input file differs from the engine's inputs"
        );
    }

    /// The tolerances of `req`'s outputs, as the engine gives them.
    fn tolerances(req: &RunRequest) -> Tolerances {
        Tolerances::of_fusion(&hopfuse::reference_fusion(&req.source).unwrap())
    }

    /// A request and its reference outputs, from inputs made as the engine makes them.
    fn softmax(seed: u64) -> (RunRequest, BTreeMap<String, Vec<f64>>) {
        let source = "fusion softmax {\n  input x: bf16[M, N]\n  m = max(x, axis=1)\n  e = exp(x - broadcast(m, axis=1))\n  y = cast(e / broadcast(sum(e, axis=1), axis=1), bf16)\n  output y\n}";
        let req = RunRequest {
            file: "softmax.hf".into(),
            source: source.into(),
            sizes: [("M".to_string(), 3), ("N".to_string(), 7)].into(),
            scalars: Default::default(),
            iters: 12,
            warmup: 2,
            seed,
            index: None,
            copy_ceiling: false,
            peers: true,
            clock: false,
            generic: false,
            documents: Default::default(),
        };
        let v = data::random_values(DType::BF16, 21, &mut data::rng_for(seed, "x"));
        let x = data::decode(DType::BF16, &data::encode(DType::BF16, &v));
        let program = hopfuse::frontend::parse(source).unwrap();
        let f = hopfuse::fusion::build(&program.fusion).unwrap();
        let expected =
            hopfuse::backend::reference::evaluate(&f, &req.sizes, &[("x".to_string(), x)].into())
                .unwrap();
        (req, expected)
    }

    #[test]
    fn rounds_share_the_launches_evenly_and_the_warm_up_first() {
        let shares: Vec<_> = (0..5).map(|r| round_share(12, 23, 5, r)).collect();
        assert_eq!(shares, [(12, 5), (2, 5), (2, 5), (2, 4), (2, 4)]);
        assert_eq!(shares.iter().map(|s| s.1).sum::<u32>(), 23);
        // A small warm-up still settles every later round with one launch.
        assert_eq!(round_share(2, 5, 5, 3), (1, 1));
    }

    #[test]
    fn peers_run_on_the_same_inputs_validate_and_alternate_with_the_kernel() {
        let (req, expected) = softmax(7);
        let mut peers = Peers::with_python(fake_python());
        let mut rounds = Vec::new();
        let mut kernel = |warmup: u32, iters: u32| {
            rounds.push((warmup, iters));
            Ok(vec![10.0; iters as usize])
        };
        let run = PeerRun {
            req: &req,
            expected: &expected,
            tolerances: &tolerances(&req),
            l2: &L2Policy::Rotate { sets: 2 },
        };
        let (timing, report) = peers.interleave(&run, &mut kernel).unwrap();
        // 12 iterations in 5 rounds, the full warm-up first.
        assert_eq!(rounds, [(2, 3), (1, 3), (1, 2), (1, 2), (1, 2)]);
        assert_eq!((timing.samples, timing.median_us), (12, 10.0));
        assert_eq!(report.unavailable, None);
        assert_eq!(report.torch.as_deref(), Some("0.0-fake"));
        assert_eq!(report.rounds, 5);
        let names: Vec<&str> = report.peers.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, PEERS);
        for p in &report.peers {
            // Validated against the reference: the files held the run's exact inputs.
            assert!(p.passed && p.error.is_none(), "{p:?}");
            assert_eq!(p.validation.len(), 1);
            assert!(p.validation[0].rel_l2 < 1e-2, "{p:?}");
            let t = p.timing.as_ref().unwrap();
            assert_eq!(t.samples, 12);
            assert_eq!(p.speedup, Some(t.median_us / 10.0));
        }
        assert!(report.peers[0].compile_s.is_none() && report.peers[1].compile_s.is_some());
        let best = report.best.as_deref().unwrap();
        let best = report.peers.iter().find(|p| p.name == best).unwrap();
        assert_eq!(report.speedup, best.speedup);
        let (lo, hi) = (report.speedup_min.unwrap(), report.speedup_max.unwrap());
        assert!(lo <= hi && lo > 0.0, "{report:?}");
        // The warm process serves the next run too, with another seed's inputs.
        let (req, expected) = softmax(8);
        let run = PeerRun {
            req: &req,
            expected: &expected,
            tolerances: &tolerances(&req),
            l2: &L2Policy::Flush { bytes: 64 },
        };
        let (_, report) = peers
            .interleave(&run, &mut |_, n| Ok(vec![5.0; n as usize]))
            .unwrap();
        assert!(report.peers.iter().all(|p| p.passed), "{report:?}");
        // Validation is real: another run's reference does not match these inputs.
        let (_, other) = softmax(9);
        let run = PeerRun {
            req: &req,
            expected: &other,
            tolerances: &tolerances(&req),
            l2: &L2Policy::None,
        };
        let (_, report) = peers
            .interleave(&run, &mut |_, n| Ok(vec![5.0; n as usize]))
            .unwrap();
        assert!(report.peers.iter().all(|p| !p.passed), "{report:?}");
        assert_eq!(report.best, None);
        assert_eq!(crate::report::speedup(&report), "no peer validated");
    }

    #[test]
    fn a_dequantized_fp8_product_has_the_scaled_mm_peer() {
        let source = "fusion q {\n  input a: f8e4m3[M, K]\n  input b: f8e4m3[N, K]\n  input sa: f32\n  input sb: f32\n  ad = cast(broadcast(a, axis=1), f32) * sa\n  bd = cast(broadcast(b, axis=0), f32) * sb\n  s = sum(ad * bd, axis=2)\n  c = cast(s, bf16)\n  output c\n}";
        let program = hopfuse::frontend::parse(source).unwrap();
        let twin = scaled_mm(&program).expect("a _scaled_mm peer");
        assert!(
            twin.source.contains(
                "torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)"
            ),
            "{}",
            twin.source
        );
        // A bf16 product has none.
        let bf16 = source.replace("f8e4m3", "bf16");
        assert!(scaled_mm(&hopfuse::frontend::parse(&bf16).unwrap()).is_none());
    }

    /// A run of `source` at `sizes` with peers, a few launches.
    fn peers_request(source: &str, sizes: &BTreeMap<String, i64>, seed: u64) -> RunRequest {
        RunRequest {
            file: "t.hf".into(),
            source: source.into(),
            sizes: sizes.clone(),
            scalars: Default::default(),
            iters: 3,
            warmup: 1,
            seed,
            index: None,
            copy_ceiling: false,
            peers: true,
            clock: false,
            generic: false,
            documents: Default::default(),
        }
    }

    /// `req`'s peers (on the fake torch) validated against `expected`, the kernel timed as 1 us.
    fn peers_report(
        peers: &mut Peers,
        req: &RunRequest,
        expected: &BTreeMap<String, Vec<f64>>,
    ) -> PeersReport {
        let run = PeerRun {
            req,
            expected,
            tolerances: &tolerances(req),
            l2: &L2Policy::None,
        };
        let (_, report) = peers
            .interleave(&run, &mut |_, n| Ok(vec![1.0; n as usize]))
            .unwrap();
        report
    }

    #[test]
    fn a_gemm_with_a_bias_epilogue_also_has_the_cublaslt_peer() {
        let source = "fusion g {\n  input a: f32[M, K]\n  input b: f32[K, N]\n  input bias: f32[N]\n  y = relu(sum(broadcast(a, axis=2) * broadcast(b, axis=0), axis=1) + broadcast(bias, axis=0))\n  output y\n}";
        let sizes: BTreeMap<String, i64> = [("M", 4), ("K", 3), ("N", 5)]
            .map(|(k, v)| (k.to_string(), v))
            .into();
        let req = peers_request(source, &sizes, 5);
        let values = |name: &str, n: usize| {
            let v = data::random_values(DType::F32, n, &mut data::rng_for(5, name));
            (name.to_string(), v)
        };
        let inputs = [values("a", 12), values("b", 15), values("bias", 5)].into();
        let program = hopfuse::frontend::parse(source).unwrap();
        let f = hopfuse::fusion::build(&program.fusion).unwrap();
        let expected = hopfuse::backend::reference::evaluate(&f, &sizes, &inputs).unwrap();
        let report = peers_report(&mut Peers::with_python(fake_python()), &req, &expected);
        let names: Vec<&str> = report.peers.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["eager", "torch.compile", CUBLASLT]);
        let lt = &report.peers[2];
        assert!(
            lt.passed && lt.timing.is_some() && lt.compile_s.is_none(),
            "{lt:?}"
        );
        assert_eq!(report.rounds, 3);
    }

    #[test]
    fn a_block_scaled_fp8_product_also_has_the_scaled_mm_peer() {
        // Step 18 as the examples write it, at a size cuBLAS's block-scaled path takes (K a
        // multiple of 128), then at one it refuses.
        let source = include_str!("../../examples/matmul/step18_fp8_block.hf");
        let run = |m: i64, n: i64, k: i64| {
            let (kb, nb) = ((k + 127) / 128, (n + 127) / 128);
            let sizes: BTreeMap<String, i64> =
                [("M", m), ("N", n), ("K", k), ("KB", kb), ("NB", nb)]
                    .map(|(s, v)| (s.to_string(), v))
                    .into();
            let req = peers_request(source, &sizes, 11);
            let values = |name: &str, dtype: DType, len: i64| {
                let v = data::seeded_values(dtype, len as usize, 11, name);
                (
                    name.to_string(),
                    data::decode(dtype, &data::encode(dtype, &v)),
                )
            };
            let inputs = [
                values("a", DType::F8E4M3, m * k),
                values("b", DType::F8E4M3, n * k),
                values("sa", DType::F32, m * kb),
                values("sb", DType::F32, nb * kb),
            ]
            .into();
            let program = hopfuse::frontend::parse(source).unwrap();
            let f = hopfuse::fusion::build(&program.fusion).unwrap();
            let expected = hopfuse::backend::reference::evaluate(&f, &sizes, &inputs).unwrap();
            peers_report(&mut Peers::with_python(fake_python()), &req, &expected)
        };
        let report = run(2, 136, 256);
        let names: Vec<&str> = report.peers.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["eager", "torch.compile", SCALED_MM]);
        for p in &report.peers {
            // Validated: a scale read from the wrong block (or the wrong layout) fails.
            assert!(p.passed && p.timing.is_some(), "{p:?}");
        }
        // K = 200: `_scaled_mm` raises as torch does; the peer says so and the run goes on.
        let report = run(2, 136, 200);
        let mm = report.peers.iter().find(|p| p.name == SCALED_MM).unwrap();
        assert_eq!(
            mm.error.as_deref(),
            Some("RuntimeError: Invalid scaling configuration.")
        );
        assert!(!mm.passed && mm.timing.is_none(), "{mm:?}");
        assert!(report.peers[..2].iter().all(|p| p.passed), "{report:?}");
    }

    #[test]
    fn causal_attention_also_has_the_sdpa_and_cudnn_sdpa_peers() {
        let source = "fusion att {\n  input q: bf16[B, S, D]\n  input k: bf16[B, T, D]\n  input v: bf16[B, T, D]\n  input scale: f32 = 0.5\n  s = sum(cast(broadcast(q, axis=2), f32) * cast(broadcast(k, axis=1), f32), axis=3) * scale\n  keep = iota(s, axis=2) <= iota(s, axis=1)\n  sm = where(keep, s, -1.0 / 0.0)\n  m = max(sm, axis=2)\n  e = exp(sm - broadcast(m, axis=2))\n  p = e / broadcast(sum(e, axis=2), axis=2)\n  o = sum(cast(broadcast(cast(p, bf16), axis=3), f32) * cast(broadcast(v, axis=1), f32), axis=2)\n  ob = cast(o, bf16)\n  output ob\n}";
        let sizes: BTreeMap<String, i64> = [("B", 2), ("S", 3), ("T", 5), ("D", 4)]
            .map(|(k, v)| (k.to_string(), v))
            .into();
        let req = peers_request(source, &sizes, 3);
        let values = |name: &str, n: usize| {
            let v = data::random_values(DType::BF16, n, &mut data::rng_for(3, name));
            let v = data::decode(DType::BF16, &data::encode(DType::BF16, &v));
            (name.to_string(), v)
        };
        let mut inputs: BTreeMap<String, Vec<f64>> =
            [values("q", 24), values("k", 40), values("v", 40)].into();
        inputs.insert("scale".into(), vec![0.5]);
        let program = hopfuse::frontend::parse(source).unwrap();
        let f = hopfuse::fusion::build(&program.fusion).unwrap();
        let expected = hopfuse::backend::reference::evaluate(&f, &sizes, &inputs).unwrap();
        let mut peers = Peers::with_python(fake_python());
        let report = peers_report(&mut peers, &req, &expected);
        let names: Vec<&str> = report.peers.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["eager", "torch.compile", SDPA, CUDNN_SDPA, FLEX]);
        for p in &report.peers {
            // Validated against the causal reference: an SDPA call without `is_causal` (or
            // FlexAttention without its block mask) fails.
            assert!(p.passed && p.timing.is_some(), "{p:?}");
        }
        // Without the mask the same reference no longer matches the peers' outputs.
        let plain = source
            .replace("  keep = iota(s, axis=2) <= iota(s, axis=1)\n", "")
            .replace("  sm = where(keep, s, -1.0 / 0.0)\n", "")
            .replace("(sm", "(s");
        let report = peers_report(&mut peers, &peers_request(&plain, &sizes, 3), &expected);
        let attention: Vec<_> = report
            .peers
            .iter()
            .filter(|p| p.name.contains(SDPA) || p.name == FLEX)
            .collect();
        assert_eq!(attention.len(), 3, "{report:?}");
        assert!(attention.iter().all(|p| !p.passed), "{report:?}");
    }

    /// The float64 reference of `source` at `sizes` on the inputs the peers get for `seed` (a
    /// scalar input's value as the program gives it).
    fn reference_of(
        source: &str,
        sizes: &BTreeMap<String, i64>,
        seed: u64,
    ) -> BTreeMap<String, Vec<f64>> {
        reference_with_documents(source, sizes, seed, &BTreeMap::new())
    }

    /// [`reference_of`] with some inputs filled with packed-document ids (`documents`).
    fn reference_with_documents(
        source: &str,
        sizes: &BTreeMap<String, i64>,
        seed: u64,
        documents: &BTreeMap<String, std::num::NonZeroU32>,
    ) -> BTreeMap<String, Vec<f64>> {
        let program = hopfuse::frontend::parse(source).unwrap();
        let f = hopfuse::fusion::build(&program.fusion).unwrap();
        let fills = data::InputFills::resolve(source, sizes, documents).unwrap();
        let mut inputs = BTreeMap::new();
        for &t in &f.inputs {
            let (name, dtype, shape) = describe(&f, t, sizes).unwrap();
            let values = match f.tensors[t].value {
                Some(v) => vec![dtype.round(v)],
                None => {
                    let n = shape.iter().product();
                    let v = data::seeded_input(dtype, n, seed, &name, fills.of(&name));
                    data::decode(dtype, &data::encode(dtype, &v))
                }
            };
            inputs.insert(name, values);
        }
        hopfuse::backend::reference::evaluate(&f, sizes, &inputs).unwrap()
    }

    #[test]
    fn attention_variants_have_the_flex_attention_peer_validated() {
        // Batched bf16 attention with a softcap, ALiBi's per-batch slope, a document mask; the
        // causal sliding window unbatched. SDPA computes none of them.
        let base = "fusion att {\n  input q: bf16[B, S, D]\n  input k: bf16[B, T, D]\n  input v: bf16[B, T, D]\n  input scale: f32 = 0.5\nINPUTS  s = sum(cast(broadcast(q, axis=2), f32) * cast(broadcast(k, axis=1), f32), axis=3) * scale\nSCORES  m = max(x, axis=2)\n  e = exp(x - broadcast(m, axis=2))\n  p = e / broadcast(sum(e, axis=2), axis=2)\n  o = sum(cast(broadcast(cast(p, bf16), axis=3), f32) * cast(broadcast(v, axis=1), f32), axis=2)\n  ob = cast(o, bf16)\n  output ob\n}";
        let variant =
            |inputs: &str, scores: &str| base.replace("INPUTS", inputs).replace("SCORES", scores);
        let softcap = variant("  input cap: f32 = 2.0\n", "  x = cap * tanh(s / cap)\n");
        let alibi = variant(
            "  input slope: f32[B]\n",
            "  x = s + broadcast(broadcast(slope, axis=1), axis=2) * cast(iota(s, axis=2) - iota(s, axis=1), f32)\n",
        );
        let document = variant(
            "  input doc_q: i32[B, S]\n  input doc_k: i32[B, T]\n",
            "  x = where(broadcast(doc_q, axis=2) == broadcast(doc_k, axis=1), s, -1.0 / 0.0)\n",
        );
        let window = include_str!("../../examples/attention/online_wgmma_sliding_window.hf")
            .replace("< 1024", "< 3");
        let sizes = |pairs: &[(&str, i64)]| -> BTreeMap<String, i64> {
            pairs.iter().map(|&(k, v)| (k.to_string(), v)).collect()
        };
        // 40 keys of 16 document ids: with seed 6 every query keeps some (else its row is NaN
        // in the fusion and 0 in FlexAttention).
        let batched = sizes(&[("B", 2), ("S", 3), ("T", 40), ("D", 4)]);
        let mut peers = Peers::with_python(fake_python());
        for (source, sizes) in [
            (&softcap, &batched),
            (&alibi, &batched),
            (&document, &batched),
            (&window, &sizes(&[("S", 6), ("T", 7)])),
        ] {
            let expected = reference_of(source, sizes, 6);
            assert!(
                expected.values().flatten().all(|x| x.is_finite()),
                "{source}"
            );
            let report = peers_report(&mut peers, &peers_request(source, sizes, 6), &expected);
            let names: Vec<&str> = report.peers.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(names, ["eager", "torch.compile", FLEX], "{source}");
            for p in &report.peers {
                assert!(p.passed && p.timing.is_some(), "{source}\n{p:?}");
            }
        }
        // Validation is real: against the reference without the document mask (or without
        // the slope), FlexAttention's output fails.
        let unmasked = variant("", "  x = s\n");
        for (source, wrong) in [(&document, &unmasked), (&alibi, &unmasked)] {
            let expected = reference_of(wrong, &batched, 6);
            let report = peers_report(&mut peers, &peers_request(source, &batched, 6), &expected);
            let flex = report.peers.iter().find(|p| p.name == FLEX).unwrap();
            assert!(!flex.passed && flex.error.is_none(), "{flex:?}");
        }
    }

    #[test]
    fn peers_take_the_runs_packed_documents() {
        // The document mask on packed documents (`--documents doc_q,doc_k:3`): the peers' input
        // files hold the ids the reference gets, so FlexAttention validates against it, and
        // not against the reference of the seeded ids.
        let source = include_str!("../../examples/auto/attention_document.hf");
        let sizes: BTreeMap<String, i64> = [("B", 2), ("S", 5), ("T", 9)]
            .map(|(k, v)| (k.to_string(), v))
            .into();
        let three = std::num::NonZeroU32::new(3).unwrap();
        let documents: BTreeMap<String, _> =
            [("doc_q".to_string(), three), ("doc_k".to_string(), three)].into();
        let req = RunRequest {
            documents: documents.clone(),
            ..peers_request(source, &sizes, 4)
        };
        let expected = reference_with_documents(source, &sizes, 4, &documents);
        // Each query sees at least the key at its own position (same document).
        assert!(expected.values().flatten().all(|x| x.is_finite()));
        let mut peers = Peers::with_python(fake_python());
        let report = peers_report(&mut peers, &req, &expected);
        let flex = report.peers.iter().find(|p| p.name == FLEX).unwrap();
        assert!(flex.passed && flex.timing.is_some(), "{flex:?}");
        assert!(report.peers.iter().all(|p| p.passed), "{report:?}");
        let seeded_ids = reference_of(source, &sizes, 4);
        let report = peers_report(&mut peers, &req, &seeded_ids);
        let flex = report.peers.iter().find(|p| p.name == FLEX).unwrap();
        assert!(!flex.passed && flex.error.is_none(), "{flex:?}");
        // A documents entry the program cannot take: no peers, and why.
        let bad = RunRequest {
            documents: [("q".to_string(), three)].into(),
            ..peers_request(source, &sizes, 4)
        };
        let run = PeerRun {
            req: &bad,
            expected: &expected,
            tolerances: &tolerances(&bad),
            l2: &L2Policy::None,
        };
        let (_, report) = peers
            .interleave(&run, &mut |_, n| Ok(vec![1.0; n as usize]))
            .unwrap();
        assert!(report.peers.is_empty(), "{report:?}");
        let why = report.unavailable.as_deref().unwrap_or_default();
        assert!(why.contains("--documents `q`: `q` is bf16"), "{why}");
    }

    #[test]
    fn grouped_query_attention_has_the_sdpa_and_flex_attention_peers_validated() {
        // q's G heads share k's and v's one head per batch: SDPA's and FlexAttention's
        // `enable_gqa=True`; a document mask per batch (FlexAttention's `b`) on FlexAttention only.
        let base = "fusion att {\n  input q: bf16[B, G, S, D]\n  input k: bf16[B, T, D]\n  input v: bf16[B, T, D]\n  input scale: f32 = 0.5\nINPUTS  s = sum(cast(broadcast(q, axis=3), f32) * cast(broadcast(k, axis=[1, 2]), f32), axis=4) * scale\nSCORES  m = max(x, axis=3)\n  e = exp(x - broadcast(m, axis=3))\n  p = e / broadcast(sum(e, axis=3), axis=3)\n  o = sum(cast(broadcast(cast(p, bf16), axis=4), f32) * cast(broadcast(v, axis=[1, 2]), f32), axis=3)\n  ob = cast(o, bf16)\n  output ob\n}";
        let variant =
            |inputs: &str, scores: &str| base.replace("INPUTS", inputs).replace("SCORES", scores);
        let plain = variant("", "").replace("(x", "(s");
        let document = variant(
            "  input doc_q: i32[B, S]\n  input doc_k: i32[B, T]\n",
            "  x = where(broadcast(doc_q, axis=[1, 3]) == broadcast(doc_k, axis=[1, 2]), s, -1.0 / 0.0)\n",
        );
        let sizes: BTreeMap<String, i64> = [("B", 2), ("G", 3), ("S", 3), ("T", 40), ("D", 4)]
            .map(|(k, v)| (k.to_string(), v))
            .into();
        let mut peers = Peers::with_python(fake_python());
        for (source, want) in [
            (
                &plain,
                &["eager", "torch.compile", SDPA, CUDNN_SDPA, FLEX][..],
            ),
            (&document, &["eager", "torch.compile", FLEX][..]),
        ] {
            let expected = reference_of(source, &sizes, 6);
            assert!(expected.values().flatten().all(|x| x.is_finite()));
            let report = peers_report(&mut peers, &peers_request(source, &sizes, 6), &expected);
            let names: Vec<&str> = report.peers.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(names, want, "{source}");
            for p in &report.peers {
                assert!(p.passed && p.timing.is_some(), "{source}\n{p:?}");
            }
        }
        // Validation is real: against the unmasked reference the document mask's peer fails.
        let expected = reference_of(&plain, &sizes, 6);
        let report = peers_report(&mut peers, &peers_request(&document, &sizes, 6), &expected);
        let flex = report.peers.iter().find(|p| p.name == FLEX).unwrap();
        assert!(!flex.passed && flex.error.is_none(), "{flex:?}");
    }

    #[test]
    fn without_torch_the_kernel_is_timed_alone_and_the_report_says_why() {
        let (req, expected) = softmax(1);
        // -S: no site-packages, so no torch even where it is installed.
        let mut peers = Peers::with_python(PythonCommand {
            program: "python3".into(),
            args: vec!["-S".into()],
            env: vec![("PYTHONPATH".into(), String::new())],
        });
        let run = PeerRun {
            req: &req,
            expected: &expected,
            tolerances: &tolerances(&req),
            l2: &L2Policy::None,
        };
        let mut calls = Vec::new();
        let (timing, report) = peers
            .interleave(&run, &mut |w, n| {
                calls.push((w, n));
                Ok(vec![3.0; n as usize])
            })
            .unwrap();
        assert_eq!(calls, [(2, 12)]);
        assert_eq!(timing.samples, 12);
        let why = report.unavailable.as_deref().unwrap();
        assert!(why.starts_with("cannot import torch"), "{why}");
        assert!(report.peers.is_empty());
        assert_eq!(
            crate::report::speedup(&report),
            format!("peers unavailable: {why}")
        );
        // Kernel errors are the run's errors.
        let err = peers
            .interleave(&run, &mut |_, _| {
                Err(RunError::new(crate::engine::Stage::Cuda, "boom"))
            })
            .unwrap_err();
        assert_eq!(err.message, "boom");
    }
}
