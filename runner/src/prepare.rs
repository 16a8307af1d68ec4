//! Preparing a run, before any GPU: the program compiled once for the request's sizes (the
//! aligned-vector specialisation and the index type those sizes need, the sizes checked against
//! the plan and its TMA tensor maps), as the service does it in its checks of `POST /api/run`
//! and hands it to the worker ([`Prepared`]), and the count of lowerings `GET /api/health`
//! reports. Moved from the engine, which re-exports it.

use hopfuse::{Compilation, CompileOptions, LaunchPlan};
use hopfuse_api::run::{RunError, RunRequest, Stage};
use serde::{Deserialize, Serialize};

pub use hopfuse_launch::index::{choose_index_type, tensor_elements};

pub use hopfuse_launch::specialize::{PrepareError, Setup};

/// A program compiled for a run: what the service computes once and hands to the worker in
/// the job, so the worker does not lower the program again (it rebuilds only the unscheduled
/// fusion for the reference, from the front end: [`hopfuse::reference_fusion`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    pub cuda: String,
    pub plan: LaunchPlan,
    pub setup: Setup,
}

/// Lowerings this process has done through [`lower`] and [`compile_for_run`].
static LOWERINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many programs this process has lowered (through [`lower`] and [`compile_for_run`]).
pub fn lowerings() -> u64 {
    LOWERINGS.load(std::sync::atomic::Ordering::Relaxed)
}

/// `hopfuse::compile`, counted in [`lowerings`].
pub fn lower(source: &str, options: &CompileOptions) -> Result<Compilation, hopfuse::Diagnostics> {
    LOWERINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    hopfuse::compile(source, options)
}

/// `hopfuse::compile_program` (a fusion no scheduler takes whole as several kernels), counted
/// in [`lowerings`].
pub fn lower_program(
    source: &str,
    options: &CompileOptions,
) -> Result<hopfuse::Compiled, hopfuse::Diagnostics> {
    LOWERINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    hopfuse::compile_program(source, options)
}

/// Compiles the program for the request's sizes, lowering it once
/// ([`hopfuse_launch::specialize::compile_for_sizes`]: the aligned-vector specialisation and
/// index type these sizes need, unless the request names the index type; specialised to the
/// sizes unless the request asks for the generic kernel; the sizes checked against the plan
/// and its TMA tensor maps).
pub fn compile_for_run(req: &RunRequest) -> Result<(Compilation, Setup), PrepareError> {
    LOWERINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    hopfuse_launch::specialize::compile_for_sizes(
        &req.source,
        &req.sizes,
        req.index,
        !req.generic,
        req.clock,
    )
}

/// [`compile_for_run`] with its errors as a [`RunError`] (a compile error rendered with the
/// file name and locations), and the request's scalar values checked against the plan (before
/// any device is opened).
pub fn prepare(req: &RunRequest) -> Result<(Compilation, Setup), RunError> {
    let (compilation, setup) = compile_for_run(req).map_err(|e| match e {
        PrepareError::Compile(d) => RunError::new(Stage::Compile, d.render(&req.source, &req.file)),
        PrepareError::Sizes(e) => RunError::new(Stage::Sizes, e),
    })?;
    crate::scalars::resolve(&compilation.plan, &req.scalars)
        .map_err(|e| RunError::new(Stage::Request, e))?;
    Ok((compilation, setup))
}

impl Prepared {
    pub fn new(compilation: &Compilation, setup: Setup) -> Prepared {
        Prepared {
            cuda: compilation.cuda.clone(),
            plan: compilation.plan.clone(),
            setup,
        }
    }
}
