//! `hopfuse worker`: runs one job in its own process so the service can kill it.
//!
//! Protocol: the job ([`WorkerJob`]) as JSON on stdin; on stdout, one JSON object per line:
//! zero or more `{"event":"progress",...}` lines, then exactly one `{"event":"outcome",...}`
//! line. The service reads the lines as they come (progress for the SSE stream, the outcome as
//! the result). Anything else goes to stderr, which the service keeps the tail of.
//!
//! `--fake` compiles the program for real (hopfuse compile, the size checks, the launch
//! configuration) but runs nothing: its outcome is `{"status":"fake", ...}` with no timing,
//! bandwidth or validation, for CI machines without a GPU. `--fake-behaviour hang|crash` (fake
//! mode only) lets tests exercise the service's kill and crash paths.

use crate::engine::{self, Hooks, Progress, RunError, RunRequest, RunResult, Stage};
use crate::faults::{self, Fault};
use crate::gpu::{DeviceInfo, Gpu};
use crate::nvrtc;
use hopfuse::plan::ConcreteLaunch;
use hopfuse::IndexType;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What the service sends a worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerJob {
    pub request: RunRequest,
    /// A/B: a second program run after the first in the same process, same seed.
    #[serde(default)]
    pub request_b: Option<RunRequest>,
    /// Run a fault kernel instead of the program (device tests of the service).
    #[serde(default)]
    pub fault: Option<Fault>,
    /// Where CUBINs are cached by content hash (none: no cache).
    #[serde(default)]
    pub cubin_cache: Option<PathBuf>,
}

/// One line of a worker's stdout.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorkerEvent {
    Progress {
        step: Progress,
    },
    /// A CUBIN came from the cache instead of NVRTC.
    CubinCached {
        key: String,
    },
    Outcome {
        outcome: Box<Outcome>,
        /// Which program of an A/B job (`a` for a single program).
        #[serde(default)]
        part: Part,
    },
}

/// Which program of a job an outcome belongs to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    #[default]
    A,
    B,
}

/// How a job ended, as the worker saw it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// The kernel ran: measured on the GPU (validation may still have failed: `result.passed`).
    Measured {
        result: Box<RunResult>,
        /// The CUBIN came from the cache (`result.nvrtc_ms` is then the time to read it).
        cubin_cached: bool,
    },
    /// The run could not produce a result (compile error, NVRTC error, CUDA error, ...).
    Error { error: RunError },
    /// `--fake`: compiled and checked, not run; no numbers.
    Fake {
        fake: bool,
        compile: Box<FakeCompile>,
    },
}

/// What a fake worker checked: everything before the GPU.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FakeCompile {
    pub note: String,
    pub kernel: String,
    pub index_type: IndexType,
    pub index_reason: String,
    pub launch: ConcreteLaunch,
    pub working_set_bytes: u64,
    pub cuda_bytes: usize,
}

pub const FAKE_NOTE: &str = "fake worker: the program was compiled and its sizes checked, but \
                             nothing ran on a GPU and nothing was measured";

/// Test hooks of the fake worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum FakeBehaviour {
    /// Compile and report.
    Ok,
    /// Report `launch`, then never finish (like a deadlocked kernel).
    Hang,
    /// Report `launch`, then abort (like a driver crash).
    Crash,
    /// Taken from a `// fake-behaviour: hang|crash|ok` line in the program (tests only).
    FromProgram,
}

impl FakeBehaviour {
    fn resolve(self, source: &str) -> FakeBehaviour {
        if self != FakeBehaviour::FromProgram {
            return self;
        }
        for line in source.lines() {
            if let Some(rest) = line.trim().strip_prefix("// fake-behaviour:") {
                return match rest.trim() {
                    "hang" => FakeBehaviour::Hang,
                    "crash" => FakeBehaviour::Crash,
                    _ => FakeBehaviour::Ok,
                };
            }
        }
        FakeBehaviour::Ok
    }
}

/// Options of `hopfuse worker`.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    pub fake: bool,
    pub behaviour: FakeBehaviour,
}

fn emit(out: &mut impl Write, event: &WorkerEvent) {
    // A closed stdout means the service is gone; nothing to do but stop.
    let line = serde_json::to_string(event).expect("events serialize");
    if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
        std::process::exit(3);
    }
}

/// `hopfuse worker`: one job from stdin, events and the outcome on stdout. Returns the exit code.
pub fn main(options: &WorkerOptions) -> i32 {
    die_with_parent();
    let mut input = String::new();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let job: WorkerJob = match std::io::stdin()
        .lock()
        .take(64 << 20)
        .read_to_string(&mut input)
        .map_err(|e| e.to_string())
        .and_then(|_| serde_json::from_str(&input).map_err(|e| e.to_string()))
    {
        Ok(job) => job,
        Err(e) => {
            let error = RunError::new(Stage::Request, format!("worker: bad job JSON: {e}"));
            emit(
                &mut out,
                &WorkerEvent::Outcome {
                    outcome: Box::new(Outcome::Error { error }),
                    part: Part::A,
                },
            );
            return 2;
        }
    };
    let parts = [
        (Part::A, Some(&job.request)),
        (Part::B, job.request_b.as_ref()),
    ];
    for (part, request) in parts {
        let Some(request) = request else { continue };
        let outcome = if options.fake {
            let behaviour = options.behaviour.resolve(&request.source);
            if job.fault.is_some() {
                Outcome::Error {
                    error: RunError::new(Stage::Request, "fault kernels need the GPU worker"),
                }
            } else {
                fake(request, behaviour, &mut out)
            }
        } else {
            let mut hooks = WorkerHooks {
                out: &mut out,
                cache: job.cubin_cache.clone(),
                cached: false,
            };
            let result = match job.fault {
                Some(fault) => faults::run(fault, request, &mut hooks),
                None => engine::run_with(request, &mut hooks),
            };
            match result {
                Ok(result) => Outcome::Measured {
                    result: Box::new(result),
                    cubin_cached: hooks.cached,
                },
                Err(error) => Outcome::Error { error },
            }
        };
        emit(
            &mut out,
            &WorkerEvent::Outcome {
                outcome: Box::new(outcome),
                part,
            },
        );
    }
    0
}

/// A worker whose service died (even by SIGKILL) must not keep the GPU: ask Linux to kill it.
fn die_with_parent() {
    #[cfg(target_os = "linux")]
    {
        let parent = std::os::unix::process::parent_id();
        // SAFETY: prctl with PR_SET_PDEATHSIG only sets a flag of this process.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        }
        // The parent may have died before the flag was set.
        if std::os::unix::process::parent_id() != parent {
            std::process::exit(4);
        }
    }
}

fn fake(req: &RunRequest, behaviour: FakeBehaviour, out: &mut impl Write) -> Outcome {
    emit(
        out,
        &WorkerEvent::Progress {
            step: Progress::Lowering,
        },
    );
    let (compilation, setup) = match engine::prepare(req) {
        Ok(x) => x,
        Err(error) => return Outcome::Error { error },
    };
    let working_set_bytes = compilation
        .plan
        .tensors()
        .map(|(_, dtype, _, shape)| {
            engine::tensor_elements(shape, &req.sizes)
                .unwrap_or(0)
                .saturating_mul(dtype.size_bytes() as u64)
        })
        .fold(0u64, u64::saturating_add);
    if behaviour != FakeBehaviour::Ok {
        emit(
            out,
            &WorkerEvent::Progress {
                step: Progress::Launch,
            },
        );
    }
    match behaviour {
        FakeBehaviour::Hang => loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        },
        FakeBehaviour::Crash => {
            eprintln!("fake worker: crashing on purpose (--fake-behaviour crash)");
            std::process::abort();
        }
        FakeBehaviour::Ok | FakeBehaviour::FromProgram => {}
    }
    Outcome::Fake {
        fake: true,
        compile: Box::new(FakeCompile {
            note: FAKE_NOTE.to_string(),
            kernel: compilation.plan.kernel_name.clone(),
            index_type: setup.index_type,
            index_reason: setup.index_reason,
            launch: setup.launch,
            working_set_bytes,
            cuda_bytes: compilation.cuda.len(),
        }),
    }
}

struct WorkerHooks<'a, W: Write> {
    out: &'a mut W,
    cache: Option<PathBuf>,
    cached: bool,
}

impl<W: Write> Hooks for WorkerHooks<'_, W> {
    fn progress(&mut self, step: Progress) {
        emit(self.out, &WorkerEvent::Progress { step });
    }

    fn cubin(&mut self, cuda: &str, name: &str) -> Result<nvrtc::Cubin, nvrtc::NvrtcError> {
        let Some(dir) = self.cache.clone() else {
            return nvrtc::compile(cuda, name).and_then(|c| c.deny_warnings(name));
        };
        let key = cubin_key(cuda)?;
        let path = dir.join(format!("{key}.cubin"));
        let start = Instant::now();
        if let Ok(image) = std::fs::read(&path) {
            if !image.is_empty() {
                self.cached = true;
                emit(self.out, &WorkerEvent::CubinCached { key });
                return Ok(nvrtc::Cubin {
                    image,
                    log: String::new(),
                    warnings: Vec::new(),
                    options: nvrtc::options(nvrtc::include_dir()?.as_deref()),
                    compile_ms: start.elapsed().as_secs_f64() * 1e3,
                });
            }
        }
        let cubin = nvrtc::compile(cuda, name).and_then(|c| c.deny_warnings(name))?;
        // Best effort: a cache that cannot be written only costs the next run a compile.
        let _ = write_atomically(&dir, &path, &cubin.image);
        Ok(cubin)
    }
}

/// The cache key of a CUDA source: SHA-256 of the NVRTC version, the options and the source.
pub fn cubin_key(cuda: &str) -> Result<String, nvrtc::NvrtcError> {
    let (major, minor) = nvrtc::version()?;
    let options = nvrtc::options(nvrtc::include_dir()?.as_deref());
    let mut h = Sha256::new();
    h.update(format!("nvrtc {major}.{minor}\n").as_bytes());
    for o in &options {
        h.update(o.as_bytes());
        h.update(b"\n");
    }
    h.update(b"\0");
    h.update(cuda.as_bytes());
    Ok(hex(&h.finalize()))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// CUBINs kept in the cache; past this the oldest half is removed.
const CACHE_ENTRIES: usize = 4096;

fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    prune(dir);
    let tmp = dir.join(format!(".tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Keeps the cache directory bounded (oldest entries go first).
fn prune(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "cubin"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if files.len() < CACHE_ENTRIES {
        return;
    }
    files.sort();
    for (_, path) in files.iter().take(files.len() / 2) {
        let _ = std::fs::remove_file(path);
    }
}

/// `hopfuse worker --probe`: the GPU the service would run on, as JSON on stdout, or why none.
pub fn probe() -> i32 {
    #[derive(Serialize)]
    struct Probe {
        gpu: Option<DeviceInfo>,
        reason: Option<String>,
        nvrtc: Option<String>,
        nvrtc_reason: Option<String>,
    }
    let (nvrtc, nvrtc_reason) = match nvrtc::version() {
        Ok((major, minor)) => (Some(format!("{major}.{minor}")), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let probe = match Gpu::open() {
        Ok(gpu) => Probe {
            gpu: Some(gpu.info.clone()),
            reason: None,
            nvrtc,
            nvrtc_reason,
        },
        Err(e) => Probe {
            gpu: None,
            reason: Some(e.to_string()),
            nvrtc,
            nvrtc_reason,
        },
    };
    println!(
        "{}",
        serde_json::to_string(&probe).expect("probe serializes")
    );
    0
}

/// Parses a worker's stdout line; `None` for a line that is not an event.
pub fn parse_event(line: &str) -> Option<WorkerEvent> {
    serde_json::from_str(line.trim()).ok()
}

/// Reads events from a worker's stdout (for tests and tools).
pub fn read_events(reader: impl BufRead) -> Vec<WorkerEvent> {
    reader
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| parse_event(&l))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cubins_are_cached_by_content_hash() {
        if !nvrtc::available() {
            eprintln!("SKIPPED: libnvrtc cannot be loaded");
            return;
        }
        let dir = std::env::temp_dir().join(format!("hopfuse-cubin-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cuda = crate::faults::Fault::IllegalAddress.cuda();
        let mut out = Vec::new();
        let mut hooks = WorkerHooks {
            out: &mut out,
            cache: Some(dir.clone()),
            cached: false,
        };
        let first = hooks.cubin(cuda, "a.cu").unwrap();
        assert!(!hooks.cached);
        let second = hooks.cubin(cuda, "b.cu").unwrap();
        assert!(hooks.cached);
        assert_eq!(first.image, second.image);
        let events = read_events(&out[..]);
        assert!(
            matches!(events[..], [WorkerEvent::CubinCached { .. }]),
            "{events:?}"
        );
        // Another source is another entry.
        let mut hooks = WorkerHooks {
            out: &mut out,
            cache: Some(dir.clone()),
            cached: false,
        };
        hooks.cubin(crate::gpu::SPIN_SOURCE, "spin.cu").unwrap();
        assert!(!hooks.cached);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn fake_behaviour_from_the_program() {
        let b = FakeBehaviour::FromProgram;
        assert_eq!(
            b.resolve("// fake-behaviour: hang\nfusion"),
            FakeBehaviour::Hang
        );
        assert_eq!(b.resolve("fusion"), FakeBehaviour::Ok);
        assert_eq!(
            FakeBehaviour::Crash.resolve("// fake-behaviour: ok"),
            FakeBehaviour::Crash
        );
    }
}
