//! The launch plan: everything a runner needs to launch the emitted kernel.
//!
//! It is serde-serialisable (the playground shows it, `hopfuse compile --plan` prints it as JSON,
//! the runner reads it). Sizes that depend on the problem (grid, block, shared memory, tensor
//! shapes) are [`SizeExpr`]s over the fusion's size symbols and are evaluated by the runner with
//! the real sizes.
//!
//! The plan's checks live with it: [`Constraint::check`] evaluates one constraint,
//! [`LaunchPlan::launch_limits`] lists CUDA's limits ([`MAX_GRID`], [`MAX_BLOCK`],
//! [`MAX_DYNAMIC_SMEM_BYTES`]) that depend on the sizes, and [`LaunchPlan::concretize`] checks
//! both (what the runner calls); the playground's Launch plan pane shows the same checks, one
//! row each (`tests/tests/launch_plan.rs` keeps the two in agreement). A persistent grid is
//! sized here too ([`persistent_grid`], [`stream_k_grid`]), as is the size arithmetic the
//! compiler shares ([`mul`], [`ceil_div`], [`split_extent`]).

use crate::dtype::DType;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// An integer expression over the fusion's size symbols (`M`, `N`, ...).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SizeExpr {
    Const(i64),
    Sym(String),
    Add(Box<SizeExpr>, Box<SizeExpr>),
    Mul(Box<SizeExpr>, Box<SizeExpr>),
    CeilDiv(Box<SizeExpr>, Box<SizeExpr>),
    Max(Box<SizeExpr>, Box<SizeExpr>),
}

/// Why a [`SizeExpr`] could not be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    #[error("size symbol `{0}` has no value (pass it with --size {0}=...)")]
    Unbound(String),
    #[error("division by zero while evaluating `{0}`")]
    DivByZero(String),
    #[error("integer overflow while evaluating `{0}`")]
    Overflow(String),
}

impl SizeExpr {
    pub fn sym(name: &str) -> SizeExpr {
        SizeExpr::Sym(name.to_string())
    }

    /// Evaluates with the given symbol values.
    pub fn eval(&self, sizes: &BTreeMap<String, i64>) -> Result<i64, EvalError> {
        let overflow = || EvalError::Overflow(self.to_string());
        Ok(match self {
            SizeExpr::Const(c) => *c,
            SizeExpr::Sym(s) => *sizes.get(s).ok_or_else(|| EvalError::Unbound(s.clone()))?,
            SizeExpr::Add(a, b) => a
                .eval(sizes)?
                .checked_add(b.eval(sizes)?)
                .ok_or_else(overflow)?,
            SizeExpr::Mul(a, b) => a
                .eval(sizes)?
                .checked_mul(b.eval(sizes)?)
                .ok_or_else(overflow)?,
            SizeExpr::Max(a, b) => a.eval(sizes)?.max(b.eval(sizes)?),
            SizeExpr::CeilDiv(a, b) => {
                let (a, b) = (a.eval(sizes)?, b.eval(sizes)?);
                if b == 0 {
                    return Err(EvalError::DivByZero(self.to_string()));
                }
                a.checked_add(b - 1).ok_or_else(overflow)?.div_euclid(b)
            }
        })
    }

    /// The constant of its value with `sizes` when they give every symbol one, else itself
    /// (what a kernel specialised to `sizes` uses).
    pub fn specialized(&self, sizes: &BTreeMap<String, i64>) -> SizeExpr {
        self.eval(sizes)
            .map_or_else(|_| self.clone(), SizeExpr::Const)
    }

    /// The value when the expression has no symbols.
    pub fn as_const(&self) -> Option<i64> {
        self.eval(&BTreeMap::new()).ok()
    }
}

impl fmt::Display for SizeExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeExpr::Const(c) => write!(f, "{c}"),
            SizeExpr::Sym(s) => write!(f, "{s}"),
            SizeExpr::Add(a, b) => match **b {
                SizeExpr::Const(c) if c < 0 => write!(f, "({a} - {})", -c),
                _ => write!(f, "({a} + {b})"),
            },
            SizeExpr::Mul(a, b) => write!(f, "{a} * {b}"),
            SizeExpr::CeilDiv(a, b) => write!(f, "ceilDiv({a}, {b})"),
            SizeExpr::Max(a, b) => write!(f, "max({a}, {b})"),
        }
    }
}

/// What a tensor parameter is to the runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorRole {
    /// Filled with seeded random data by the runner.
    Input,
    /// Poisoned with NaN before the launch, validated after.
    Output,
    /// A global intermediate: allocated, never validated.
    Scratch,
    /// Zeroed once when allocated, never validated; the kernel leaves it as it found it
    /// (stream-K's partial sums and flags).
    Workspace,
}

/// One kernel parameter, in the order the kernel declares them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Param {
    /// A pointer to a dense, row-major tensor in global memory.
    Tensor {
        name: String,
        dtype: DType,
        role: TensorRole,
        /// Logical shape, outermost first (reduction axes removed, broadcast axes as 1).
        shape: Vec<SizeExpr>,
    },
    /// A size symbol passed by value as the kernel's index type.
    Size { symbol: String },
    /// A scalar input passed by value: `value` when the program gives it (`input eps: f32 =
    /// 1e-6`), else the runner draws one as for any input.
    Scalar {
        name: String,
        dtype: DType,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<f64>,
    },
    /// A TMA tensor map (`LaunchPlan::tensor_maps[map]`), 128 bytes passed by value.
    TensorMap { name: String, map: usize },
}

/// Integer type of index arithmetic and size parameters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexType {
    I32,
    #[default]
    I64,
}

impl IndexType {
    pub fn cuda(self) -> &'static str {
        match self {
            IndexType::I32 => "int",
            IndexType::I64 => "long long",
        }
    }
}

/// A condition the runner checks with the real sizes before it launches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Constraint {
    /// `value % divisor == 0` (vector accesses need aligned rows).
    Divisible {
        value: SizeExpr,
        divisor: i64,
        reason: String,
    },
    /// `value <= max` (thread block limits, grid y/z limits).
    AtMost {
        value: SizeExpr,
        max: i64,
        reason: String,
    },
    /// `value >= 1`.
    Positive { value: SizeExpr, reason: String },
    /// `value == expected`: a kernel specialised to its sizes ([`specialized_constraints`])
    /// runs at those sizes only.
    Equals {
        value: SizeExpr,
        expected: i64,
        reason: String,
    },
}

/// Why a launch of a specialised kernel is refused at other sizes.
pub const SPECIALIZED_REASON: &str =
    "the kernel is specialised to its sizes (compile it for these sizes, or generic)";

/// The constraints of a kernel specialised to `sizes`: each of the fusion's `symbols` that has
/// a value equals it, in the order of `symbols`.
pub fn specialized_constraints(
    symbols: &[String],
    sizes: &BTreeMap<String, i64>,
) -> Vec<Constraint> {
    symbols
        .iter()
        .filter_map(|s| {
            Some(Constraint::Equals {
                value: SizeExpr::sym(s),
                expected: *sizes.get(s)?,
                reason: SPECIALIZED_REASON.to_string(),
            })
        })
        .collect()
}

impl Constraint {
    /// Whether `sizes` satisfy it: the one evaluation of a constraint, used by
    /// [`LaunchPlan::concretize`] and the playground's Launch plan pane. An expression that
    /// cannot be evaluated (a missing size) is [`LaunchError::Eval`].
    pub fn check(&self, sizes: &BTreeMap<String, i64>) -> Result<(), LaunchError> {
        match self {
            Constraint::Divisible {
                value,
                divisor,
                reason,
            } => {
                let actual = value.eval(sizes)?;
                if actual % divisor != 0 {
                    return Err(LaunchError::NotDivisible {
                        value: value.to_string(),
                        actual,
                        divisor: *divisor,
                        reason: reason.clone(),
                    });
                }
            }
            Constraint::AtMost { value, max, reason } => {
                let actual = value.eval(sizes)?;
                if actual > *max {
                    return Err(LaunchError::TooLarge {
                        value: value.to_string(),
                        actual,
                        max: *max,
                        reason: reason.clone(),
                    });
                }
            }
            Constraint::Positive { value, reason } => {
                let actual = value.eval(sizes)?;
                if actual < 1 {
                    return Err(LaunchError::NotPositive {
                        value: value.to_string(),
                        actual,
                        reason: reason.clone(),
                    });
                }
            }
            Constraint::Equals {
                value,
                expected,
                reason,
            } => {
                let actual = value.eval(sizes)?;
                if actual != *expected {
                    return Err(LaunchError::NotEqual {
                        value: value.to_string(),
                        actual,
                        expected: *expected,
                        reason: reason.clone(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// CUDA's launch limits on sm_90, which [`LaunchPlan::concretize`] checks: blocks per grid
/// dimension (x, y, z), threads per block dimension, threads per block, and the dynamic shared
/// memory one H100 block may opt in to.
pub const MAX_GRID: [i64; 3] = [(1 << 31) - 1, 65535, 65535];
pub const MAX_BLOCK: [i64; 3] = [MAX_THREADS_PER_BLOCK, MAX_THREADS_PER_BLOCK, 64];
pub const MAX_THREADS_PER_BLOCK: i64 = crate::target::MAX_THREADS_PER_BLOCK;
pub const MAX_DYNAMIC_SMEM_BYTES: i64 = crate::target::SMEM_PER_BLOCK;

/// A TMA tensor map the runner encodes with `cuTensorMapEncodeTiled` (filled by the TMA lowering).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorMapSpec {
    pub param: String,
    pub tensor: String,
    pub dtype: DType,
    /// Innermost first.
    pub global_dims: Vec<SizeExpr>,
    /// Bytes, innermost first, rank - 1 entries.
    pub global_strides: Vec<SizeExpr>,
    pub box_dims: Vec<i64>,
    pub element_strides: Vec<i64>,
    pub swizzle_bytes: u32,
}

/// `setmaxnreg` settings of a warp-specialized kernel (filled by the warp-specialization lowering).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterSharing {
    pub producer: u32,
    pub consumer: u32,
}

/// How an operand of a matrix product is stored (row-major, by its axes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperandLayout {
    /// `[rows, K]` for the left operand, `[K, cols]` for the right one: no transpose.
    Normal,
    /// `[K, rows]` for the left operand, `[cols, K]` for the right one.
    Transposed,
}

/// A fusion that is exactly one matrix product `c[M, N] = sum_k a[M, K] * b[K, N]` (each operand
/// in either layout, optionally widened by a cast, the result optionally cast), found by
/// [`crate::fusion::matmul::detect`]. The runner times cuBLAS on the same shape, layouts and
/// types as the ceiling and reports TFLOP/s (`2 M N K` floating-point operations).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatmulShape {
    /// Input tensor names: the left operand (the one with the `M` axis) and the right one.
    pub a: String,
    pub b: String,
    /// The output tensor.
    pub c: String,
    pub m: SizeExpr,
    pub n: SizeExpr,
    pub k: SizeExpr,
    pub a_layout: OperandLayout,
    pub b_layout: OperandLayout,
    pub a_dtype: DType,
    pub b_dtype: DType,
    pub c_dtype: DType,
    /// The type products are summed in.
    pub accumulate: DType,
}

impl MatmulShape {
    /// `2 M N K` with these sizes.
    pub fn flops(&self, sizes: &BTreeMap<String, i64>) -> Result<f64, EvalError> {
        let (m, n, k) = (
            self.m.eval(sizes)?,
            self.n.eval(sizes)?,
            self.k.eval(sizes)?,
        );
        Ok(2.0 * m as f64 * n as f64 * k as f64)
    }
}

impl fmt::Display for MatmulShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let layout = |l: OperandLayout| match l {
            OperandLayout::Normal => "N",
            OperandLayout::Transposed => "T",
        };
        write!(
            f,
            "{}[{}, {}] = {}{} x {}{} ({}{}, {} {} -> {}, accumulate {})",
            self.c,
            self.m,
            self.n,
            self.a,
            if self.a_layout == OperandLayout::Transposed {
                "^T"
            } else {
                ""
            },
            self.b,
            if self.b_layout == OperandLayout::Transposed {
                "^T"
            } else {
                ""
            },
            layout(self.a_layout),
            layout(self.b_layout),
            self.a_dtype.name(),
            self.b_dtype.name(),
            self.c_dtype.name(),
            self.accumulate.name(),
        )?;
        write!(f, ", K = {}", self.k)
    }
}

/// Everything needed to launch the kernel of one compilation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchPlan {
    pub kernel_name: String,
    pub index_type: IndexType,
    /// Size symbols of the fusion, in order of first appearance.
    pub symbols: Vec<String>,
    pub params: Vec<Param>,
    pub grid: [SizeExpr; 3],
    pub block: [SizeExpr; 3],
    /// Dynamic shared memory in bytes.
    pub dynamic_smem_bytes: SizeExpr,
    pub constraints: Vec<Constraint>,
    pub tensor_maps: Vec<TensorMapSpec>,
    pub register_sharing: Option<RegisterSharing>,
    /// CTAs per cluster along x, y, z (the kernel's `__cluster_dims__`: a plain launch forms
    /// the clusters; each grid dimension is a multiple of its cluster dimension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<[i64; 3]>,
    /// Bytes moved through global memory at the minimum (each input read once, each output
    /// written once): the numerator of GB/s.
    pub min_global_bytes: SizeExpr,
    /// Set when the fusion is one matrix product: the runner then reports TFLOP/s against cuBLAS.
    #[serde(default)]
    pub matmul: Option<MatmulShape>,
    /// Set for a persistent kernel (`persistent(BIDy, 8)`): `grid` is then its tiles in CTAs,
    /// the most a launch uses, and a launch uses no more than are resident at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent: Option<PersistentGrid>,
    /// Set when the program has no schedule of its own: which automatic scheduler wrote the
    /// schedule and why, or why none did ([`crate::auto`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_schedule: Option<AutoScheduleNote>,
}

/// What [`crate::auto`] decided for a program without a schedule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoScheduleNote {
    /// The scheduler that wrote the schedule (`pointwise`, `normalization`, ...); None when
    /// none did and the kernel is the serial default.
    pub scheduler: Option<String>,
    /// One sentence: the decided parameters and why, or why no scheduler took the fusion.
    pub reason: String,
    /// The schedule's statements (what `hopfuse schedule` prints), when one was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
}

/// The launch plan of a fusion split into several kernels ([`crate::segment`]): the kernels in
/// the order they run, each with its own [`LaunchPlan`], and the tensors passed between them
/// through global memory. A fusion compiled to one kernel has a plain [`LaunchPlan`] instead
/// (serialised as before segmentation existed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentedPlan {
    /// The fusion's name as written.
    pub fusion: String,
    /// Why the fusion is not one kernel (the automatic scheduler's decline of the whole).
    pub reason: String,
    pub kernels: Vec<SegmentKernel>,
    /// Tensors one kernel writes and a later one reads, in the order they are written.
    pub intermediates: Vec<IntermediateTensor>,
}

/// One kernel of a [`SegmentedPlan`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentKernel {
    /// The sub-fusion's name (`<fusion>_s1`, ...).
    pub segment: String,
    /// The automatic scheduler that wrote its schedule.
    pub scheduler: String,
    /// Why the segment ends where it does.
    pub reason: String,
    /// Tensors it reads (fusion inputs and intermediates), as written.
    pub reads: Vec<String>,
    /// Tensors it writes (intermediates and the fusion's outputs).
    pub writes: Vec<String>,
    pub plan: LaunchPlan,
}

/// A tensor in global memory between two kernels of a [`SegmentedPlan`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IntermediateTensor {
    pub name: String,
    pub dtype: DType,
    /// Extents, outermost first.
    pub shape: Vec<SizeExpr>,
    /// Its size: the product of the extents and the element's bytes.
    pub bytes: SizeExpr,
    /// The index of the kernel that writes it.
    pub producer: usize,
    /// The indices of the kernels that read it.
    pub consumers: Vec<usize>,
}

/// The CTAs of a persistent grid over `tiles` CTAs' worth of tiles in clusters of `cluster`,
/// when `resident` clusters fit at once: the fewest that take the tiles in as few rounds as
/// the resident ones would (`ceil(units / ceil(units / resident))` clusters), so no CTA waits
/// for a last round that only some take (4096^3 in 128 x 256 tiles: 512 tiles, 4 rounds of
/// 128 CTAs rather than 3.9 of 132), in whole clusters.
pub fn persistent_grid(tiles: u32, cluster: i64, resident: i64) -> u32 {
    let cluster = cluster.max(1) as u64;
    let units = u64::from(tiles).div_ceil(cluster);
    let rounds = units.div_ceil(resident.max(1) as u64).max(1);
    let grid = units.div_ceil(rounds) * cluster;
    u32::try_from(grid).unwrap_or(u32::MAX)
}

/// How a persistent kernel walks its tiles. Its one-dimensional grid has at most one CTA per
/// tile (`LaunchPlan::grid`) and at most as many as are resident at once, a multiple of the
/// cluster size, and of those the fewest that take the same number of rounds
/// ([`persistent_grid`]): [`LaunchPlan::concretize`] assumes one CTA per SM of an H100
/// ([`crate::target::SM_COUNT`]); the runner asks the device and sizes the grid to what it
/// holds. Any grid size is correct: CTA `b` of `G` takes tiles `b, b + G, ...`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersistentGrid {
    /// The grid axis the raster's tile groups run along (`BIDy`) and the tiles per group.
    pub along: String,
    pub group: i64,
    /// Stream-K: the k steps of all tiles, which the CTAs split evenly. The grid is then every
    /// resident CTA ([`stream_k_grid`]), since a run may end anywhere in a tile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_k: Option<SizeExpr>,
}

/// The CTAs of a stream-K grid over `work` k steps when `resident` CTAs fit at once: all of
/// them, at most one per step and at most [`crate::target::STREAM_K_MAX_CTAS`] (the
/// workspace's slots). Every CTA must be resident: the first piece of a tile waits for the
/// CTAs that hold its other pieces.
pub fn stream_k_grid(work: i64, resident: i64) -> u32 {
    let g = work
        .min(resident)
        .clamp(1, crate::target::STREAM_K_MAX_CTAS);
    u32::try_from(g).unwrap_or(1)
}

/// A launch configuration evaluated with real sizes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConcreteLaunch {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_smem_bytes: u32,
    /// CTAs per cluster (x, y, z) when the kernel runs in clusters (its `__cluster_dims__`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<[u32; 3]>,
}

/// Why a plan cannot be launched with the given sizes.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Eval(#[from] EvalError),
    #[error("{reason}: {value} = {actual} is not a multiple of {divisor}")]
    NotDivisible {
        value: String,
        actual: i64,
        divisor: i64,
        reason: String,
    },
    #[error("{reason}: {value} = {actual} exceeds {max}")]
    TooLarge {
        value: String,
        actual: i64,
        max: i64,
        reason: String,
    },
    #[error("{reason}: {value} = {actual} must be at least 1")]
    NotPositive {
        value: String,
        actual: i64,
        reason: String,
    },
    #[error("{reason}: {value} = {actual}, but it was compiled for {value} = {expected}")]
    NotEqual {
        value: String,
        actual: i64,
        expected: i64,
        reason: String,
    },
    #[error("unknown size symbol `{0}` (the fusion's symbols are: {1})")]
    UnknownSymbol(String, String),
}

impl LaunchPlan {
    /// Checks every constraint and evaluates grid, block and shared memory.
    pub fn concretize(&self, sizes: &BTreeMap<String, i64>) -> Result<ConcreteLaunch, LaunchError> {
        for name in sizes.keys() {
            if !self.symbols.contains(name) {
                return Err(LaunchError::UnknownSymbol(
                    name.clone(),
                    self.symbols.join(", "),
                ));
            }
        }
        for symbol in &self.symbols {
            let value = SizeExpr::Sym(symbol.clone());
            let actual = value.eval(sizes)?;
            if actual < 1 {
                return Err(LaunchError::NotPositive {
                    value: symbol.clone(),
                    actual,
                    reason: "every size must be positive".into(),
                });
            }
        }
        for c in &self.constraints {
            c.check(sizes)?;
        }
        let dim = |e: &SizeExpr, max: i64, what: &str| -> Result<u32, LaunchError> {
            let actual = e.eval(sizes)?;
            if actual < 1 {
                return Err(LaunchError::NotPositive {
                    value: e.to_string(),
                    actual,
                    reason: what.to_string(),
                });
            }
            if actual > max {
                return Err(LaunchError::TooLarge {
                    value: e.to_string(),
                    actual,
                    max,
                    reason: what.to_string(),
                });
            }
            Ok(actual as u32)
        };
        let mut grid = [
            dim(&self.grid[0], MAX_GRID[0], "grid x")?,
            dim(&self.grid[1], MAX_GRID[1], "grid y")?,
            dim(&self.grid[2], MAX_GRID[2], "grid z")?,
        ];
        if let Some(p) = &self.persistent {
            let cluster = self.cluster.map_or(1, |c| c[0].max(1));
            let resident = (crate::target::SM_COUNT / cluster).max(1);
            grid[0] = match &p.stream_k {
                Some(work) => {
                    let steps = work.eval(sizes)?;
                    if steps < 1 {
                        return Err(LaunchError::NotPositive {
                            value: work.to_string(),
                            actual: steps,
                            reason: "a stream-K grid splits the k steps of its tiles, and there are none".into(),
                        });
                    }
                    stream_k_grid(steps, resident)
                }
                None => persistent_grid(grid[0], cluster, resident),
            };
        }
        let block = [
            dim(&self.block[0], MAX_BLOCK[0], "block x")?,
            dim(&self.block[1], MAX_BLOCK[1], "block y")?,
            dim(&self.block[2], MAX_BLOCK[2], "block z")?,
        ];
        let threads = block.iter().map(|&b| b as i64).product::<i64>();
        if threads > MAX_THREADS_PER_BLOCK {
            return Err(LaunchError::TooLarge {
                value: "threads per block".into(),
                actual: threads,
                max: MAX_THREADS_PER_BLOCK,
                reason: "a thread block has at most 1024 threads".into(),
            });
        }
        let smem = self.dynamic_smem_bytes.eval(sizes)?;
        if smem > MAX_DYNAMIC_SMEM_BYTES {
            return Err(LaunchError::TooLarge {
                value: "dynamic shared memory".into(),
                actual: smem,
                max: MAX_DYNAMIC_SMEM_BYTES,
                reason: "an H100 block has at most 227 KB of shared memory".into(),
            });
        }
        Ok(ConcreteLaunch {
            grid,
            block,
            dynamic_smem_bytes: smem.max(0) as u32,
            cluster: self.cluster.map(|c| c.map(|d| d as u32)),
        })
    }

    /// CUDA's launch limits on grid, block and dynamic shared memory as constraints on this
    /// plan's sizes (what [`LaunchPlan::concretize`] checks after [`LaunchPlan::constraints`]),
    /// for showing them next to the compiler's own. Only the limits that depend on the sizes
    /// are listed: the compiler rejects a constant that breaks one itself.
    pub fn launch_limits(&self) -> Vec<Constraint> {
        let dims = ["x", "y", "z"];
        let mut out = Vec::new();
        let mut limit = |value: &SizeExpr, max: i64, reason: String| {
            if value.as_const().is_none() {
                out.push(Constraint::AtMost {
                    value: value.clone(),
                    max,
                    reason,
                });
            }
        };
        for i in 0..3 {
            limit(
                &self.grid[i],
                MAX_GRID[i],
                format!("CUDA's limit on grid {} (blocks)", dims[i]),
            );
        }
        for i in 0..3 {
            limit(
                &self.block[i],
                MAX_BLOCK[i],
                format!("CUDA's limit on block {} (threads)", dims[i]),
            );
        }
        limit(
            &self.dynamic_smem_bytes,
            MAX_DYNAMIC_SMEM_BYTES,
            "an H100 block's shared memory (227 KB)".into(),
        );
        out
    }

    /// The sizes the kernel is specialised to (`CompileOptions::specialize`), from its
    /// [`Constraint::Equals`] on size symbols; `None` for a generic kernel.
    pub fn specialized_sizes(&self) -> Option<BTreeMap<String, i64>> {
        let sizes: BTreeMap<String, i64> = self
            .constraints
            .iter()
            .filter_map(|c| match c {
                Constraint::Equals {
                    value: SizeExpr::Sym(s),
                    expected,
                    ..
                } => Some((s.clone(), *expected)),
                _ => None,
            })
            .collect();
        (!sizes.is_empty()).then_some(sizes)
    }

    /// Input, output and scratch tensors in parameter order.
    pub fn tensors(&self) -> impl Iterator<Item = (&str, DType, TensorRole, &[SizeExpr])> {
        self.params.iter().filter_map(|p| match p {
            Param::Tensor {
                name,
                dtype,
                role,
                shape,
            } => Some((name.as_str(), *dtype, *role, shape.as_slice())),
            _ => None,
        })
    }
}

// Size arithmetic, folded where constant (the schedule and the passes build extents with it).

/// Extent of one output of a split: the factor is the inner extent of an inner split and the
/// outer extent of an outer split; the other side is the ceiling of the quotient.
pub fn split_extent(parent: SizeExpr, factor: i64, inner_split: bool, is_outer: bool) -> SizeExpr {
    if inner_split != is_outer {
        SizeExpr::Const(factor)
    } else {
        ceil_div(parent, factor)
    }
}

/// `ceil(a / b)`.
pub fn ceil_div(a: SizeExpr, b: i64) -> SizeExpr {
    match a {
        SizeExpr::Const(x) => SizeExpr::Const((x + b - 1) / b),
        a if b == 1 => a,
        a => SizeExpr::CeilDiv(Box::new(a), Box::new(SizeExpr::Const(b))),
    }
}

/// `a + b` (folded when constant or zero).
pub fn add(a: SizeExpr, b: SizeExpr) -> SizeExpr {
    match (a, b) {
        (SizeExpr::Const(x), SizeExpr::Const(y)) => SizeExpr::Const(x + y),
        (SizeExpr::Const(0), e) | (e, SizeExpr::Const(0)) => e,
        (a, b) => SizeExpr::Add(Box::new(a), Box::new(b)),
    }
}

/// `a * b` (saturating when constant).
pub fn mul(a: SizeExpr, b: SizeExpr) -> SizeExpr {
    match (a, b) {
        (SizeExpr::Const(x), SizeExpr::Const(y)) => SizeExpr::Const(x.saturating_mul(y)),
        (SizeExpr::Const(1), e) | (e, SizeExpr::Const(1)) => e,
        // Products lean left, as `Display` writes them without parentheses (`M * H * D`) and
        // they read back: a reshape's extent `H * D` times `M`.
        (a, SizeExpr::Mul(b, c)) => mul(mul(a, *b), *c),
        (a, b) => SizeExpr::Mul(Box::new(a), Box::new(b)),
    }
}
