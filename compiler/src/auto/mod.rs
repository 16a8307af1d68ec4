//! Automatic schedules: nvFuser-style schedulers that write a fusion's schedule as text in the
//! schedule language, so a program without a `schedule { }` block still compiles to a parallel
//! kernel, and the user sees, edits and shares what was chosen (`hopfuse schedule FILE`).
//!
//! Takes the unscheduled fusion ([`crate::fusion::build`]'s) and the sizes to decide for
//! ([`Sizes`]: the run's, else the program's first `// bench:` line, else symbolic-safe
//! defaults). [`classify::classify`] names the fusion's class; one scheduler per class
//! ([`pointwise`], [`transpose`], [`reduction`] for inner and outer reductions,
//! [`normalization`], [`product`], [`full_reduction`] for reductions of every element,
//! [`attention`])
//! decides the parameters (vector width, threads, rows per block, unrolling, where a persistent
//! row lives) and writes the statements. Guarantees: [`choose`] never panics and is cheap (a
//! few walks over the fusion, no lowering); a fusion no scheduler takes gets a [`Declined`]
//! with the reason, and the caller keeps the serial default. Emits an [`AutoSchedule`]: the
//! schedule's text (statements only, one per line, without `schedule {`), the scheduler and a
//! one-sentence reason with the decided parameters (what the launch plan records).

pub mod attention;
pub mod classify;
pub mod full_reduction;
mod l2;
pub mod normalization;
pub mod pointwise;
pub mod product;
pub mod reduction;
mod text;
pub mod transpose;
pub mod tune;

use crate::dtype::DType;
use crate::fusion::{Fusion, IterId, TensorId};
use crate::plan::SizeExpr;
use std::collections::BTreeMap;

pub use classify::{classify, Class};
pub use tune::{candidates, Candidate, Knobs, RowPlacement};

/// The marker of a program's benchmark sizes (as the runner's `hopfuse bench` reads them).
pub const BENCH_PREFIX: &str = "// bench:";

/// Bytes one vector access moves (`ld.global.v4.f32`, `v8` of bf16).
pub const VECTOR_BYTES: i64 = 16;

/// The scheduler that wrote a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheduler {
    Pointwise,
    Transpose,
    InnerReduction,
    OuterReduction,
    Normalization,
    MatrixProduct,
    FullReduction,
    Attention,
}

impl Scheduler {
    pub fn name(self) -> &'static str {
        match self {
            Scheduler::Pointwise => "pointwise",
            Scheduler::Transpose => "transpose",
            Scheduler::InnerReduction => "inner reduction",
            Scheduler::OuterReduction => "outer reduction",
            Scheduler::Normalization => "normalization",
            Scheduler::MatrixProduct => "matrix product",
            Scheduler::FullReduction => "full reduction",
            Scheduler::Attention => "attention",
        }
    }
}

/// Where the sizes a schedule was decided for came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SizeSource {
    /// The sizes of the run (or `--size`).
    Given,
    /// The program's first `// bench:` line.
    Bench,
    /// Neither: symbolic extents are assumed large ([`DEFAULT_EXTENT`]) and nothing is
    /// assumed about their divisibility beyond what the kernel checks at run time.
    Default,
}

/// The extent assumed for a size symbol with no value.
pub const DEFAULT_EXTENT: i64 = 4096;

/// The sizes a schedule is decided for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sizes {
    pub values: BTreeMap<String, i64>,
    pub source: SizeSource,
}

impl Sizes {
    /// `given` when there are any, else the first well-formed `// bench:` line of `source`,
    /// else none ([`SizeSource::Default`]).
    pub fn resolve(given: Option<&BTreeMap<String, i64>>, source: &str) -> Sizes {
        if let Some(given) = given.filter(|g| !g.is_empty()) {
            return Sizes {
                values: given.clone(),
                source: SizeSource::Given,
            };
        }
        match source
            .lines()
            .filter_map(|l| l.trim().strip_prefix(BENCH_PREFIX))
            .find_map(bench_values)
        {
            Some(values) => Sizes {
                values,
                source: SizeSource::Bench,
            },
            None => Sizes {
                values: BTreeMap::new(),
                source: SizeSource::Default,
            },
        }
    }

    /// The value of `e` with these sizes, if every symbol it names has one.
    fn value(&self, e: &SizeExpr) -> Option<i64> {
        e.eval(&self.values).ok()
    }

    /// `M=4096,N=4096 (from the bench line)`: what the reason sentence says.
    pub fn describe(&self) -> String {
        let list = || {
            self.values
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        match self.source {
            SizeSource::Given => format!("for {}", list()),
            SizeSource::Bench => format!("for {} (the `// bench:` line)", list()),
            SizeSource::Default => {
                format!("with no sizes given (symbols assumed {DEFAULT_EXTENT})")
            }
        }
    }
}

/// The values of one `// bench:` line (`M=16384, N=1_000`); None when it is not well formed
/// (the runner reports those).
fn bench_values(rest: &str) -> Option<BTreeMap<String, i64>> {
    let mut values = BTreeMap::new();
    for item in rest.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, value) = item.split_once('=')?;
        let digits: String = value.trim().chars().filter(|&c| c != '_').collect();
        values.insert(name.trim().to_string(), digits.parse().ok()?);
    }
    (!values.is_empty()).then_some(values)
}

/// A schedule a scheduler wrote.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AutoSchedule {
    pub scheduler: Scheduler,
    /// The statements, one per line (with `//` comments), without `schedule {` and `}`.
    pub text: String,
    /// One sentence: what was decided and why, with the parameters.
    pub reason: String,
}

impl AutoSchedule {
    /// The schedule block as a program would hold it.
    pub fn block(&self) -> String {
        let mut s = String::from("schedule {\n");
        for line in self.text.lines() {
            s.push_str("  ");
            s.push_str(line);
            s.push('\n');
        }
        s.push_str("}\n");
        s
    }
}

/// Why no scheduler took a fusion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declined {
    /// The class the fusion was found to be ([`Class::name`]), when it got that far.
    pub class: Option<&'static str>,
    pub reason: String,
}

/// Classifies `fusion` (unscheduled) and writes its schedule for `sizes`.
pub fn choose(fusion: &Fusion, sizes: &Sizes) -> Result<AutoSchedule, Declined> {
    choose_with(fusion, sizes, &Knobs::default())
}

/// [`choose`] with some of the scheduler's parameters set ([`Knobs`], the tuner's).
pub fn choose_with(
    fusion: &Fusion,
    sizes: &Sizes,
    knobs: &Knobs,
) -> Result<AutoSchedule, Declined> {
    let class = classify(fusion).map_err(|reason| Declined {
        class: None,
        reason,
    })?;
    let facts = Facts {
        fusion,
        sizes,
        class: &class,
        knobs,
    };
    let chosen = match &class {
        Class::Pointwise { reference } => Ok(pointwise::schedule(&facts, *reference)),
        Class::Transpose {
            reference,
            permuted,
        } => transpose::schedule(&facts, *reference, permuted),
        Class::InnerReduction { reduction, input } => reduction::inner(&facts, *reduction, *input),
        Class::OuterReduction { reduction, input } => reduction::outer(&facts, *reduction, *input),
        Class::Normalization { reference, row } => {
            normalization::schedule(&facts, *reference, *row)
        }
        Class::MatrixProduct(shape, scales) => product::schedule(&facts, shape, scales),
        Class::FullReduction { reduction, input } => {
            full_reduction::schedule(&facts, *reduction, *input)
        }
        Class::Attention(attention) => attention::schedule(&facts, attention),
    };
    chosen.map_err(|reason| Declined {
        class: Some(class.name()),
        reason,
    })
}

/// What a scheduler reads: the fusion, the sizes and the class.
pub struct Facts<'a> {
    pub fusion: &'a Fusion,
    pub sizes: &'a Sizes,
    pub class: &'a Class,
    /// The parameters set in place of the scheduler's own choice (none but the tuner's).
    pub knobs: &'a Knobs,
}

impl Facts<'_> {
    /// The extent of a root axis's class with these sizes; None when it depends on a symbol
    /// with no value.
    pub fn extent(&self, axis: IterId) -> Option<i64> {
        let f = self.fusion;
        self.sizes.value(&f.class_extent(f.class_of(axis)))
    }

    /// The extent of a root axis's class, or [`DEFAULT_EXTENT`] for each unknown symbol.
    pub fn extent_or_default(&self, axis: IterId) -> i64 {
        let f = self.fusion;
        let e = f.class_extent(f.class_of(axis));
        let mut values = self.sizes.values.clone();
        for s in &f.symbols {
            values.entry(s.clone()).or_insert(DEFAULT_EXTENT);
        }
        e.eval(&values).unwrap_or(DEFAULT_EXTENT).max(1)
    }

    /// The fusion inputs with `rank` logical axes (at least one), in the fusion's order:
    /// those a schedule caches with `cache_after` (the lower-rank ones, a broadcast bias or
    /// weight, stay loads of their own, as do inputs a view that moves indices reads: it reads
    /// them in global memory).
    pub fn full_inputs(&self, rank: usize) -> Vec<TensorId> {
        let f = self.fusion;
        let viewed = |t: TensorId| {
            f.exprs.iter().any(|e| {
                e.op.moves_indices() && e.inputs.contains(&crate::fusion::Operand::Tensor(t))
            })
        };
        f.inputs
            .iter()
            .copied()
            .filter(|&t| rank > 0 && f.rank(t) == rank && !viewed(t))
            .collect()
    }

    /// The outputs with `rank` logical axes: those a schedule writes through `cache_before`.
    pub fn full_outputs(&self, rank: usize) -> Vec<TensorId> {
        self.fusion
            .outputs
            .iter()
            .copied()
            .filter(|&t| self.fusion.rank(t) == rank)
            .collect()
    }

    /// The widest element, in bytes, of `tensors` (at least 1).
    pub fn widest(&self, tensors: &[TensorId]) -> i64 {
        tensors
            .iter()
            .map(|&t| i64::from(self.fusion.tensors[t].dtype.size_bytes()))
            .max()
            .unwrap_or(4)
            .max(1)
    }

    /// The vector width in elements for accesses of `tensors` along an axis of extent
    /// `inner` (None: unknown): 16 bytes of the widest element, halved while the extent is
    /// known and not a multiple (so rows stay aligned and take the vector path).
    pub fn vector_width(&self, tensors: &[TensorId], inner: Option<i64>) -> i64 {
        let mut v = (VECTOR_BYTES / self.widest(tensors)).max(1);
        if let Some(n) = inner {
            while v > 1 && n % v != 0 {
                v /= 2;
            }
        }
        v
    }

    /// `name`'s name as written.
    pub fn name(&self, t: TensorId) -> &str {
        &self.fusion.tensors[t].name
    }

    /// A name for a new tensor (`x_c`) that no tensor of the fusion has.
    pub fn fresh(&self, base: &str, suffix: &str) -> String {
        let mut name = format!("{base}_{suffix}");
        let mut n = 2;
        while self.fusion.tensor_by_name(&name).is_some() {
            name = format!("{base}_{suffix}{n}");
            n += 1;
        }
        name
    }
}

/// `ceil(a / b)` of positive extents.
pub(crate) fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b.max(1)
}

/// The dtypes' names, for reasons: `bf16`, `f32 and bf16`.
pub(crate) fn dtype_names(f: &Fusion, tensors: &[TensorId]) -> String {
    let mut names: Vec<DType> = tensors.iter().map(|&t| f.tensors[t].dtype).collect();
    names.dedup();
    names.sort_by_key(|d| d.name());
    names.dedup();
    names
        .iter()
        .map(|d| d.name())
        .collect::<Vec<_>>()
        .join(" and ")
}

#[cfg(test)]
mod tests;
