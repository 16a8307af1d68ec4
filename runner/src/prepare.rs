//! Preparing a run, before any GPU: the program compiled once for the request's sizes (the
//! aligned-vector specialisation and the index type those sizes need, the sizes checked against
//! the plan and its TMA tensor maps), as the service does it in its checks of `POST /api/run`
//! and hands it to the worker ([`Prepared`]), and the count of lowerings `GET /api/health`
//! reports. Moved from the engine, which re-exports it.

use hopfuse::plan::{ConcreteLaunch, SizeExpr};
use hopfuse::{Compilation, CompileOptions, IndexType, LaunchPlan};
use hopfuse_api::run::{RunError, RunRequest, Stage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Number of elements of a tensor shape with these sizes.
pub fn tensor_elements(shape: &[SizeExpr], sizes: &BTreeMap<String, i64>) -> Result<u64, String> {
    shape.iter().try_fold(1u64, |acc, dim| {
        let d = dim.eval(sizes).map_err(|e| e.to_string())?;
        let d = u64::try_from(d).map_err(|_| format!("dimension {dim} = {d} is negative"))?;
        acc.checked_mul(d)
            .ok_or_else(|| "tensor element count overflows".to_string())
    })
}

/// `I32` when every tensor has fewer than 2^31 elements and every size fits an `int`, else
/// `I64`; with the reason.
pub fn choose_index_type(
    plan: &LaunchPlan,
    sizes: &BTreeMap<String, i64>,
) -> Result<(IndexType, String), String> {
    const LIMIT: u64 = 1 << 31;
    for (name, _, _, shape) in plan.tensors() {
        let n = tensor_elements(shape, sizes).map_err(|e| format!("tensor `{name}`: {e}"))?;
        if n >= LIMIT {
            return Ok((
                IndexType::I64,
                format!("tensor `{name}` has {n} elements (>= 2^31)"),
            ));
        }
    }
    if let Some((k, v)) = sizes.iter().find(|(_, &v)| v > i32::MAX as i64) {
        return Ok((
            IndexType::I64,
            format!("size {k} = {v} does not fit in 32 bits"),
        ));
    }
    Ok((
        IndexType::I32,
        "every tensor has fewer than 2^31 elements".into(),
    ))
}

/// How a compiled program is launched with the request's sizes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    pub index_type: IndexType,
    /// Why that index type.
    pub index_reason: String,
    pub launch: ConcreteLaunch,
}

/// A program compiled for a run: what the service computes once and hands to the worker in
/// the job, so the worker does not lower the program again (it rebuilds only the unscheduled
/// fusion for the reference, from the front end: [`hopfuse::reference_fusion`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    pub cuda: String,
    pub plan: LaunchPlan,
    pub setup: Setup,
}

/// Why a program cannot be prepared for a run.
#[derive(Clone, Debug)]
pub enum PrepareError {
    /// It does not compile.
    Compile(hopfuse::Diagnostics),
    /// The sizes do not fit its plan.
    Sizes(String),
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

/// Compiles the program for the request's sizes, lowering it once: vector accesses these sizes
/// keep aligned are specialised ([`CompileOptions::aligned_for`]), the index type is the one the
/// sizes need ([`choose_index_type`]) unless the request names one, and the sizes are checked
/// against the plan and its TMA tensor maps.
pub fn compile_for_run(req: &RunRequest) -> Result<(Compilation, Setup), PrepareError> {
    let options = CompileOptions {
        index_type: req.index.unwrap_or(IndexType::I64),
        assume_aligned_vectors: false,
        aligned_for: Some(req.sizes.clone()),
        clock_probe: req.clock,
    };
    let mut needed = None;
    LOWERINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let compilation = hopfuse::compile_choosing_index(&req.source, &options, |plan| {
        let choice = choose_index_type(plan, &req.sizes);
        let emit = match (req.index, &choice) {
            (Some(requested), _) => requested,
            (None, Ok((t, _))) => *t,
            // The sizes are refused below; any type will do.
            (None, Err(_)) => IndexType::I64,
        };
        needed = Some(choice);
        emit
    })
    .map_err(PrepareError::Compile)?;
    let sizes_err = PrepareError::Sizes;
    let launch = compilation
        .plan
        .concretize(&req.sizes)
        .map_err(|e| sizes_err(e.to_string()))?;
    let (wanted, reason) = needed
        .expect("the index type is chosen during the compile")
        .map_err(sizes_err)?;
    let (index_type, index_reason) = match req.index {
        None => (wanted, reason),
        Some(IndexType::I32) if wanted == IndexType::I64 => {
            return Err(sizes_err(format!("--index i32 is too small: {reason}")));
        }
        Some(i) => (i, "requested".to_string()),
    };
    // TMA tensor maps with the real sizes (the device address is checked when it is encoded).
    for spec in &compilation.plan.tensor_maps {
        crate::tensor_map::encode_args(spec, &req.sizes, 0).map_err(sizes_err)?;
    }
    Ok((
        compilation,
        Setup {
            index_type,
            index_reason,
            launch,
        },
    ))
}

/// [`compile_for_run`] with its errors as a [`RunError`] (a compile error rendered with the
/// file name and locations).
pub fn prepare(req: &RunRequest) -> Result<(Compilation, Setup), RunError> {
    compile_for_run(req).map_err(|e| match e {
        PrepareError::Compile(d) => RunError::new(Stage::Compile, d.render(&req.source, &req.file)),
        PrepareError::Sizes(e) => RunError::new(Stage::Sizes, e),
    })
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
