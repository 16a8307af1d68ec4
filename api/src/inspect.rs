//! `POST /api/inspect`: what the GPU runs, without a GPU. The program's PTX and SASS
//! ([`Listing`]s whose lines know their CUDA lines), the CUDA line map (to the kernel-IR
//! statement and the pass), ptxas's resource usage and NVRTC's warnings ([`Inspection`]).
//!
//! Moved here from the runner's `inspect.rs` (which builds them and re-exports them); the
//! playground's PTX and SASS panes (`web/src/inspect_panes.rs`) read them.

use hopfuse::backend::codegen::lines::LineMap;
use hopfuse::IndexType;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /api/inspect`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InspectBody {
    pub program: String,
    /// The sizes of a run: inspect the variant a run with them builds (index type, aligned
    /// vectors). Empty: what `hopfuse compile` prints.
    #[serde(default)]
    pub sizes: BTreeMap<String, i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<IndexType>,
}

/// Which CUDA of a program was built.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    pub index_type: IndexType,
    pub assume_aligned_vectors: bool,
    /// Why, in words.
    pub reason: String,
}

/// An assembly listing whose lines know their CUDA lines.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Listing {
    /// The listing without its line-info directives (PTX `.loc`, nvdisasm `//##`).
    pub text: String,
    /// Per line of `text`: the CUDA line (1-based) of the kernel it came from; for code inlined
    /// from a prelude helper, the kernel line that called it. None: not an instruction, or no
    /// line info.
    pub cuda_lines: Vec<Option<u32>>,
    /// Per line of `text`: for inlined code, the helper's own CUDA line.
    pub inlined: Vec<Option<u32>>,
    /// Instructions the compiler marked as coming from no source line (PTX `.loc F 0 0`:
    /// code it made up or hoisted); they have no CUDA line.
    #[serde(default)]
    pub no_source_line: usize,
}

impl Listing {
    /// Instruction lines (those with a CUDA line).
    pub fn mapped(&self) -> usize {
        self.cuda_lines.iter().filter(|l| l.is_some()).count()
    }
}

/// ptxas's resource usage of the kernel (`--ptxas-options=-v`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    pub registers: Option<u32>,
    /// Named barriers the kernel uses (`bar.sync` ids).
    pub barriers: Option<u32>,
    /// Static shared memory (the dynamic part is the plan's `dynamic_smem_bytes`).
    pub shared_bytes: Option<u64>,
    pub stack_bytes: Option<u64>,
    pub spill_store_bytes: Option<u64>,
    pub spill_load_bytes: Option<u64>,
    /// Local memory (lmem), when ptxas reports it.
    pub local_bytes: Option<u64>,
    /// Constant bank 0 (kernel parameters).
    pub constant_bytes: Option<u64>,
}

/// A warning of the log, at its CUDA line when it names one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Warning {
    pub text: String,
    pub cuda_line: Option<u32>,
}

/// Everything `POST /api/inspect` answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Inspection {
    pub kernel: String,
    pub variant: Variant,
    /// The CUDA that was compiled (the listings' line numbers are its lines).
    pub cuda: String,
    /// The kernel IR after the last pass (`lines`' IR lines are its lines).
    pub ir: String,
    pub lines: LineMap,
    pub ptx: Listing,
    pub sass: Option<Listing>,
    /// Why there is no SASS (nvdisasm missing or failing).
    pub sass_unavailable: Option<String>,
    pub resources: Resources,
    pub warnings: Vec<Warning>,
    pub log: String,
    pub nvrtc: String,
    pub nvdisasm: Option<String>,
    pub options: Vec<String>,
    pub cubin_bytes: usize,
    /// The PTX and SASS came from the cache (`nvrtc_ms` is then the original compile's).
    pub cached: bool,
    pub nvrtc_ms: f64,
}
