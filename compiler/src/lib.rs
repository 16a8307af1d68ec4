//! hopfuse: a lowering compiler for NVIDIA Hopper fusion kernels.
//!
//! Data flow (see `docs/ARCHITECTURE.md`):
//! program text → [`frontend`] (AST) → [`fusion`] (fusion IR + schedule) → [`passes`] (kernel IR,
//! one named pass at a time, printed after each) → [`codegen`] (CUDA source + [`plan::LaunchPlan`]).
//! [`reference`] evaluates the fusion's math in float64 for validation.

pub mod diag;
pub mod dtype;
pub mod plan;

pub use diag::{Diagnostic, Diagnostics};
pub use dtype::DType;
pub use plan::{IndexType, LaunchPlan};

/// Options that change the emitted code.
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// Integer type of indices and size parameters. The runner picks `I32` when every tensor has
    /// fewer than 2^31 elements.
    pub index_type: IndexType,
}

/// The kernel IR after one pass of the pipeline.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PassDump {
    pub name: &'static str,
    pub summary: &'static str,
    pub ir: String,
}

/// Everything one compilation produces.
#[derive(Clone, Debug)]
pub struct Compilation {
    pub cuda: String,
    pub plan: LaunchPlan,
    pub passes: Vec<PassDump>,
    /// The fusion as written (before scheduling): what [`reference::evaluate`] runs.
    pub fusion: fusion::Fusion,
}

pub mod fusion {
    //! Placeholder until the fusion IR lands.
    #[derive(Clone, Debug)]
    pub struct Fusion;
}

pub mod reference {
    //! Placeholder until the reference evaluator lands.
    use std::collections::BTreeMap;
    /// Runs the fusion's math in float64. `inputs` maps each input tensor (or scalar) name to its
    /// row-major values; returns each output's row-major values.
    pub fn evaluate(
        _fusion: &crate::fusion::Fusion,
        _sizes: &BTreeMap<String, i64>,
        _inputs: &BTreeMap<String, Vec<f64>>,
    ) -> Result<BTreeMap<String, Vec<f64>>, String> {
        Err("reference evaluator not built yet".into())
    }
}

/// Parses, schedules and lowers a program.
pub fn compile(_source: &str, _options: &CompileOptions) -> Result<Compilation, Diagnostics> {
    Err(Diagnostic::new("compiler not built yet", None).into())
}
