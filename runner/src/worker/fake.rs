//! The fake worker (`hopfuse worker --fake`, for machines without a GPU): the program is
//! compiled and its sizes and input fills checked for real, nothing runs, and the outcome says so with no
//! numbers (a split program's kernels, when a profile is asked for, each say why they have
//! none, where a GPU runner's carry their profiles); its test hooks (`--fake-behaviour`) hang, crash or fail like a kernel would, so the
//! service's kill, crash and fresh-process paths can be tested.

use super::{emit, FakeCompile, Outcome, WorkerEvent, FAKE_NOTE};
use crate::engine::{self, Prepared, Progress, RunError, RunRequest, Stage};
use hopfuse::LaunchPlan;
use hopfuse_api::job::{FakeKernel, FakeSegments};
use hopfuse_api::profile::{ProfileReport, Unavailable};
use serde::{Deserialize, Serialize};
use std::io::Write;

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
    /// Report `launch`, then a CUDA error outcome (like an illegal address): a warm worker
    /// exits after it.
    CudaError,
    /// Taken from a `// fake-behaviour: hang|crash|cuda-error|ok` line in the program (tests
    /// only).
    FromProgram,
}

impl FakeBehaviour {
    pub(super) fn resolve(self, source: &str) -> FakeBehaviour {
        if self != FakeBehaviour::FromProgram {
            return self;
        }
        for line in source.lines() {
            if let Some(rest) = line.trim().strip_prefix("// fake-behaviour:") {
                return match rest.trim() {
                    "hang" => FakeBehaviour::Hang,
                    "crash" => FakeBehaviour::Crash,
                    "cuda-error" => FakeBehaviour::CudaError,
                    _ => FakeBehaviour::Ok,
                };
            }
        }
        FakeBehaviour::Ok
    }
}

/// With `--fake-behaviour from-program`, a `// fake-delay-ms: N` line in the program makes the
/// fake worker take N milliseconds (at most a minute) in its "launch" (tests only).
pub(super) fn fake_delay(behaviour: FakeBehaviour, source: &str) -> Option<std::time::Duration> {
    if behaviour != FakeBehaviour::FromProgram {
        return None;
    }
    source.lines().find_map(|line| {
        let ms = line
            .trim()
            .strip_prefix("// fake-delay-ms:")?
            .trim()
            .parse::<u64>()
            .ok()?;
        Some(std::time::Duration::from_millis(ms.min(60_000)))
    })
}

/// What `req` (and the job's `profile`) asked for that a fake worker does not do, with why.
pub(super) fn not_done(req: &RunRequest, profile: bool) -> Vec<String> {
    [
        (
            profile,
            "profile: Nsight Compute profiles a kernel that ran, and none ran",
        ),
        (
            req.clock,
            "clock: the clock probe reads the GPU's cycle counters while the kernel runs",
        ),
        (
            req.peers,
            "peers: the PyTorch and cuBLAS comparisons run on the GPU",
        ),
    ]
    .into_iter()
    .filter(|(asked, _)| *asked)
    .map(|(_, why)| why.to_string())
    .collect()
}

pub(super) fn fake(
    req: &RunRequest,
    prepared: Option<&Prepared>,
    behaviour: FakeBehaviour,
    profile: bool,
    out: &mut impl Write,
) -> Outcome {
    // A program split into several kernels: each compiled and checked, reported as one run.
    let split = match engine::compile_split(req) {
        Ok(split) => split,
        Err(error) => return Outcome::Error { error },
    };
    let compiled = match (prepared, &split) {
        (_, Some(split)) => {
            // Its kernels were lowered here (the service prepares one kernel, not a split).
            emit(
                out,
                &WorkerEvent::Progress {
                    step: Progress::Lowering,
                },
            );
            let first = &split.kernels[0];
            Prepared {
                cuda: split
                    .kernels
                    .iter()
                    .map(|k| k.cuda.as_str())
                    .collect::<Vec<_>>()
                    .concat(),
                plan: LaunchPlan {
                    kernel_name: split
                        .kernels
                        .iter()
                        .map(|k| k.plan.kernel_name.as_str())
                        .collect::<Vec<_>>()
                        .join(" + "),
                    ..first.plan.clone()
                },
                setup: first.setup.clone(),
            }
        }
        (Some(p), None) => p.clone(),
        (None, None) => {
            emit(
                out,
                &WorkerEvent::Progress {
                    step: Progress::Lowering,
                },
            );
            match engine::prepare(req) {
                Ok((c, setup)) => Prepared::new(&c, setup),
                Err(error) => return Outcome::Error { error },
            }
        }
    };
    let Prepared { cuda, plan, setup } = compiled;
    // The request's packed-document inputs checked as a run checks them.
    if let Err(e) = crate::data::InputFills::resolve(&req.source, &req.sizes, &req.documents) {
        let error = RunError::new(Stage::Request, e.to_string());
        return Outcome::Error { error };
    }
    let working_set_bytes = match &split {
        Some(split) => split.working_set_bytes(&req.sizes),
        None => plan
            .tensors()
            .map(|(_, dtype, _, shape)| {
                engine::tensor_elements(shape, &req.sizes)
                    .unwrap_or(0)
                    .saturating_mul(dtype.size_bytes() as u64)
            })
            .fold(0u64, u64::saturating_add),
    };
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
        FakeBehaviour::CudaError => {
            return Outcome::Error {
                error: RunError::new(
                    Stage::Cuda,
                    "fake worker: a CUDA error on purpose (--fake-behaviour cuda-error)",
                ),
            }
        }
        FakeBehaviour::Ok | FakeBehaviour::FromProgram => {}
    }
    let not_done = not_done(req, profile);
    let mut note = match not_done.len() {
        0 => FAKE_NOTE.to_string(),
        _ => format!("{FAKE_NOTE}; not done either: {}", not_done.join("; ")),
    };
    let segments = match &split {
        Some(split) => {
            note = format!("{note}; the program {}", split.describe());
            match fake_segments(split, &req.sizes, profile) {
                Ok(s) => Some(s),
                Err(error) => return Outcome::Error { error },
            }
        }
        None => None,
    };
    Outcome::Fake {
        fake: true,
        compile: Box::new(FakeCompile {
            note,
            kernel: plan.kernel_name.clone(),
            index_type: setup.index_type,
            index_reason: setup.index_reason,
            launch: setup.launch,
            working_set_bytes,
            cuda_bytes: cuda.len(),
            not_done,
            segments,
        }),
    }
}

/// Why a kernel of the fake worker's has no profile (each kernel's `profile` of a split run
/// that asked for one, the shape a GPU runner's kernels carry theirs in): it never ran. Never a
/// measured figure, so the playground shows the reason where a GPU runner's kernel shows its
/// metrics.
fn not_run_profile() -> ProfileReport {
    ProfileReport::Unavailable {
        reason: Unavailable::NotRun,
        message: NOT_RUN.to_string(),
    }
}

/// Each kernel's reason in [`not_run_profile`] (the same for all, so the playground says it once).
pub(super) const NOT_RUN: &str = "fake worker: the kernels were compiled and checked but never \
                                  ran, so Nsight Compute had no launch to profile";

/// A split program's kernels as the fake worker compiled and checked them, in order; with
/// `profile` (the run asked for one), each says why it has none.
fn fake_segments(
    split: &engine::SplitCompiled,
    sizes: &std::collections::BTreeMap<String, i64>,
    profile: bool,
) -> Result<FakeSegments, RunError> {
    Ok(FakeSegments {
        reason: split.split.reason.clone(),
        kernels: split
            .split
            .segments
            .iter()
            .zip(&split.kernels)
            .map(|(s, k)| FakeKernel {
                segment: s.name.clone(),
                kernel: k.plan.kernel_name.clone(),
                scheduler: s.scheduler.clone(),
                reason: s.reason.clone(),
                index_type: k.setup.index_type,
                launch: k.setup.launch.clone(),
                profile: profile.then(not_run_profile),
            })
            .collect(),
        intermediates: split.intermediates(sizes)?,
    })
}
