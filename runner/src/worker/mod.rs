//! `hopfuse worker`: runs jobs in a process of their own so the service can kill it.
//!
//! A job carries its programs as the service compiled them for its sizes (`prepare::Prepared`:
//! CUDA, plan, index type and launch), so a run is lowered once; the worker rebuilds only the
//! unscheduled fusion for the reference (`hopfuse::reference_fusion`, the front end). A job
//! without them (`hopfuse bench`, a one-shot worker) is compiled here.
//!
//! Protocol: a job ([`WorkerJob`]) as JSON; on stdout, one JSON object per line: zero or more
//! `{"event":"progress",...}` lines, then one `{"event":"outcome",...}` line per program. The
//! service reads the lines as they come (progress for the SSE stream, the outcome as the
//! result). Anything else goes to stderr, which the service keeps the tail of.
//!
//! One-shot (`hopfuse worker`): one job, all of stdin, then exit. Warm (`hopfuse worker
//! --serve`, what the service and `hopfuse bench` run): the worker opens the GPU and measures the
//! device-copy ceiling once, says `{"event":"ready",...}`, then reads one job per line on stdin
//! and ends each with `{"event":"job_end","exit":...}`. It keeps the CUDA context, the spin
//! kernel, the ceiling and an in-memory CUBIN cache between jobs. After a job with a CUDA error
//! (an illegal address poisons the context for good) or when the context fails a health check
//! it says `"exit": true` and exits, so the next job gets a fresh process. A hung kernel is the
//! service's business: it kills the worker with SIGKILL and starts another.
//!
//! `--fake` compiles the program for real (hopfuse compile, the size checks, the launch
//! configuration) but runs nothing: its outcome is `{"status":"fake", ...}` with no timing,
//! bandwidth or validation, for CI machines without a GPU. `--fake-behaviour hang|crash|
//! cuda-error` (fake mode only) lets tests exercise the service's kill, crash and
//! fresh-process-after-a-fault paths.
//!
//! This module holds the protocol and the job loop; `fake` the fake worker and its test hooks,
//! `hooks` the engine's hooks here (progress events, peers, the CUBIN caches).

use crate::engine::{
    self, CopyCeiling, Device, Hooks, PairRatios, Progress, RunError, RunResult, Stage,
};
use crate::faults;
use crate::gpu::DeviceInfo;
use crate::job_spec::JobSpec;
use crate::profile::ProfileLimits;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::path::PathBuf;
use std::time::Instant;
mod fake;
mod hooks;
mod probe;
#[cfg(test)]
mod tests;

pub use fake::FakeBehaviour;
use fake::{fake, fake_delay};
pub(crate) use hooks::write_atomically;
use hooks::WorkerHooks;
pub use hooks::{cubin_key, hex};
pub use probe::{probe, probe_in_child, GpuStatus};

/// What the service sends a worker: the job's [`JobSpec`] (its fields at the top of the JSON),
/// and what only this worker needs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerJob {
    #[serde(flatten)]
    pub spec: JobSpec,
    /// Where CUBINs are cached by content hash (none: no cache).
    #[serde(default)]
    pub cubin_cache: Option<PathBuf>,
    /// ncu's time limits for the profile `spec.profile` asks for, after a measured
    /// single-program run (`result.profile`; [`crate::profile::profile_program`]).
    #[serde(default)]
    pub profile_limits: ProfileLimits,
}

/// What a warm worker says once it is ready for jobs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Ready {
    pub pid: u32,
    pub fake: bool,
    /// The GPU it opened (none: fake, or `gpu_error`).
    pub gpu: Option<DeviceInfo>,
    /// Why it has no GPU (its jobs will fail with this error).
    pub gpu_error: Option<String>,
    /// The device-copy ceiling measured at start (reused by every job of this process).
    pub ceiling: Option<CopyCeiling>,
    /// From process start to ready (CUDA context, spin kernel, ceiling).
    pub startup_ms: f64,
}

/// One line of a worker's stdout.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorkerEvent {
    /// A warm worker is ready for jobs.
    Ready {
        ready: Box<Ready>,
    },
    Progress {
        step: Progress,
    },
    /// A CUBIN came from the cache instead of NVRTC.
    CubinCached {
        key: String,
        /// `memory` (this warm worker compiled or read it before) or `disk`.
        #[serde(default)]
        from: String,
    },
    /// A/B: B/A per interleaved launch pair (before the two outcomes).
    Comparison {
        ratios: PairRatios,
    },
    Outcome {
        outcome: Box<Outcome>,
        /// Which program of an A/B job (`a` for a single program).
        #[serde(default)]
        part: Part,
    },
    /// A warm worker finished a job; with `exit` it exits now (`reason` says why).
    JobEnd {
        exit: bool,
        #[serde(default)]
        reason: Option<String>,
        /// Jobs this process has run, this one included.
        jobs: u64,
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

// Defined in `hopfuse-api` (the `compile` of a fake job result).
pub use hopfuse_api::job::FakeCompile;

pub const FAKE_NOTE: &str = "fake worker: the program was compiled and its sizes checked, but \
                             nothing ran on a GPU and nothing was measured";

/// Options of `hopfuse worker`.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    pub fake: bool,
    pub behaviour: FakeBehaviour,
    /// Warm: many jobs, one per stdin line.
    pub serve: bool,
}

fn emit(out: &mut impl Write, event: &WorkerEvent) {
    // A closed stdout means the service is gone; nothing to do but stop.
    let line = serde_json::to_string(event).expect("events serialize");
    if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
        std::process::exit(3);
    }
}

/// The longest job line (or one-shot job) read.
const MAX_JOB_BYTES: u64 = 64 << 20;
/// CUBINs a warm worker keeps in memory (past this the memory layer starts over).
const MEMORY_CUBINS: usize = 256;

/// What a worker keeps between jobs.
#[derive(Default)]
struct State {
    device: Option<Device>,
    /// CUBINs by cache key.
    memory: HashMap<String, Vec<u8>>,
    peers: crate::peers::Peers,
    jobs: u64,
}

/// `hopfuse worker`: jobs from stdin, events and outcomes on stdout. Returns the exit code.
pub fn main(options: &WorkerOptions) -> i32 {
    die_with_parent();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut state = State::default();
    if options.serve {
        return serve(options, &mut state, &mut out);
    }
    let mut input = String::new();
    let job: WorkerJob = match std::io::stdin()
        .lock()
        .take(MAX_JOB_BYTES)
        .read_to_string(&mut input)
        .map_err(|e| e.to_string())
        .and_then(|_| crate::job_spec::decode_message(input.as_bytes()))
    {
        Ok(job) => job,
        Err(e) => {
            bad_job(&mut out, &e);
            return 2;
        }
    };
    run_job(&job, options, &mut state, &mut out);
    0
}

fn bad_job(out: &mut impl Write, e: &str) {
    let error = RunError::new(Stage::Request, format!("worker: bad job JSON: {e}"));
    emit(
        out,
        &WorkerEvent::Outcome {
            outcome: Box::new(Outcome::Error { error }),
            part: Part::A,
        },
    );
}

/// `hopfuse worker --serve`: open the GPU, measure the ceiling, then one job per line.
fn serve(options: &WorkerOptions, state: &mut State, out: &mut impl Write) -> i32 {
    let start = Instant::now();
    let mut ready = Ready {
        pid: std::process::id(),
        fake: options.fake,
        gpu: None,
        gpu_error: None,
        ceiling: None,
        startup_ms: 0.0,
    };
    if !options.fake {
        match Device::open() {
            Ok(mut dev) => {
                ready.gpu = Some(dev.gpu.info.clone());
                match dev.measure_ceiling(5, 50) {
                    Ok(c) => ready.ceiling = c,
                    Err(e) => ready.gpu_error = Some(format!("measuring the copy ceiling: {e}")),
                }
                if ready.gpu_error.is_none() {
                    state.device = Some(dev);
                }
            }
            Err(e) => ready.gpu_error = Some(e.to_string()),
        }
    }
    ready.startup_ms = start.elapsed().as_secs_f64() * 1e3;
    emit(
        out,
        &WorkerEvent::Ready {
            ready: Box::new(ready),
        },
    );
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = String::new();
    loop {
        line.clear();
        match (&mut input).take(MAX_JOB_BYTES).read_line(&mut line) {
            Ok(0) => return 0,
            Ok(_) => {}
            Err(e) => {
                eprintln!("worker: cannot read stdin: {e}");
                return 2;
            }
        }
        if line.trim().is_empty() {
            continue;
        }
        let exit = if !line.ends_with('\n') && line.len() as u64 >= MAX_JOB_BYTES {
            bad_job(out, "the job line is too long");
            Some("the job line was too long to read".to_string())
        } else {
            match crate::job_spec::decode_message::<WorkerJob>(line.as_bytes()) {
                Ok(job) => run_job(&job, options, state, out),
                Err(e) => {
                    bad_job(out, &e);
                    None
                }
            }
        };
        state.jobs += 1;
        emit(
            out,
            &WorkerEvent::JobEnd {
                exit: exit.is_some(),
                reason: exit.clone(),
                jobs: state.jobs,
            },
        );
        if exit.is_some() {
            return 0;
        }
    }
}

/// Runs one job, emitting its events and outcomes. Returns why this process must not run
/// another job (a CUDA error may have poisoned the context), if it must not.
fn run_job(
    job: &WorkerJob,
    options: &WorkerOptions,
    state: &mut State,
    out: &mut impl Write,
) -> Option<String> {
    let started = Instant::now();
    let spec = &job.spec;
    let mut outcomes: Vec<(Part, Outcome)> = Vec::new();
    if options.fake {
        let parts = [
            (Part::A, Some(&spec.request), spec.prepared.as_ref()),
            (Part::B, spec.request_b.as_ref(), spec.prepared_b.as_ref()),
        ];
        for (part, request, prepared) in parts {
            let Some(request) = request else { continue };
            let behaviour = options.behaviour.resolve(&request.source);
            if let Some(delay) = fake_delay(options.behaviour, &request.source) {
                // A slow "kernel" (tests of the distributed mode kill its agent mid-job).
                emit(
                    out,
                    &WorkerEvent::Progress {
                        step: Progress::Launch,
                    },
                );
                std::thread::sleep(delay);
            }
            let outcome = if spec.fault.is_some() {
                Outcome::Error {
                    error: RunError::new(Stage::Request, "fault kernels need the GPU worker"),
                }
            } else {
                fake(request, prepared, behaviour, spec.profile, out)
            };
            emit_outcome(out, part, &outcome);
            outcomes.push((part, outcome));
        }
    } else {
        let State {
            device,
            memory,
            peers,
            ..
        } = state;
        let mut hooks = WorkerHooks {
            out,
            peers: Some(peers),
            cache: job.cubin_cache.clone(),
            memory: Some(memory),
            cached: false,
        };
        let measured = |r: Result<RunResult, RunError>, cached: bool| match r {
            Ok(result) => Outcome::Measured {
                result: Box::new(result),
                cubin_cached: cached,
            },
            Err(error) => Outcome::Error { error },
        };
        match (&spec.request_b, spec.fault) {
            (Some(b), None) => {
                let ab = engine::run_ab_on(
                    device,
                    (&spec.request, spec.prepared.as_ref()),
                    (b, spec.prepared_b.as_ref()),
                    &mut hooks,
                );
                let cached = hooks.cached;
                if let Some(ratios) = ab.ratios {
                    emit(&mut *hooks.out, &WorkerEvent::Comparison { ratios });
                }
                outcomes.push((Part::A, measured(ab.a, cached)));
                outcomes.push((Part::B, measured(ab.b, cached)));
            }
            (_, fault) => {
                let mut r = match fault {
                    Some(fault) => faults::run_on(device, fault, &spec.request, &mut hooks),
                    None => {
                        engine::run_on(device, &spec.request, spec.prepared.as_ref(), &mut hooks)
                    }
                };
                if let (true, None, Ok(result)) = (spec.profile, fault, &mut r) {
                    let limit = job.profile_limits.limit_after(started.elapsed());
                    hooks.progress(Progress::Profile);
                    // The roofline's copy ceiling: the run's, else the one this worker measured
                    // at start.
                    let copy = result
                        .copy
                        .clone()
                        .or_else(|| device.as_ref().and_then(Device::kept_ceiling));
                    crate::profile::profile_program_into(
                        &spec.request.source,
                        result,
                        copy.as_ref(),
                        limit,
                        device.as_ref(),
                    );
                }
                outcomes.push((Part::A, measured(r, hooks.cached)));
            }
        }
        for (part, outcome) in &outcomes {
            emit_outcome(&mut *hooks.out, *part, outcome);
        }
    }
    // A CUDA error may have poisoned the context: never run another job in this process.
    for (_, o) in &outcomes {
        if let Outcome::Error { error } = o {
            if error.stage == Stage::Cuda {
                return Some(format!(
                    "a CUDA error may have poisoned the context ({})",
                    error.message
                ));
            }
        }
    }
    if let Some(dev) = &state.device {
        if let Err(e) = dev.check_health() {
            return Some(format!("the CUDA context failed its health check: {e}"));
        }
    }
    None
}

fn emit_outcome(out: &mut impl Write, part: Part, outcome: &Outcome) {
    emit(
        out,
        &WorkerEvent::Outcome {
            outcome: Box::new(outcome.clone()),
            part,
        },
    );
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
