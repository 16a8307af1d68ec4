//! One program compiled for one set of sizes: the aligned-vector specialisation and the index
//! type those sizes need ([`crate::index::choose_index_type`]), the sizes checked against the
//! plan (its constraints and CUDA's launch limits) and against its TMA tensor maps (with a
//! placeholder address: the real one is checked when the map is encoded). What the runner's
//! `prepare` and the Python package call before NVRTC; [`compile_segments_for_sizes`] does it
//! for each kernel of a fusion split into several (the runner's segmented run, `hopfuse
//! export`).

use crate::index::choose_index_type;
use hopfuse::plan::ConcreteLaunch;
use hopfuse::{Compilation, CompileOptions, IndexType};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How a compiled program is launched with its sizes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    pub index_type: IndexType,
    /// Why that index type.
    pub index_reason: String,
    pub launch: ConcreteLaunch,
}

/// Why a program cannot be compiled for its sizes.
#[derive(Clone, Debug)]
pub enum PrepareError {
    /// It does not compile.
    Compile(hopfuse::Diagnostics),
    /// The sizes do not fit its plan.
    Sizes(String),
}

/// Compiles `source` for `sizes`, lowering it once: vector accesses these sizes keep aligned
/// are specialised ([`CompileOptions::aligned_for`]), and with `specialize` the whole kernel
/// is ([`CompileOptions::specialize`]: constants for the size symbols; its plan refuses other
/// sizes), the index type is the one the sizes need unless `index` names one (a named type
/// too small for the sizes is an error), and the sizes are checked against the plan and its
/// TMA tensor maps.
pub fn compile_for_sizes(
    source: &str,
    sizes: &BTreeMap<String, i64>,
    index: Option<IndexType>,
    specialize: bool,
    clock_probe: bool,
) -> Result<(Compilation, Setup), PrepareError> {
    let sizes_err = PrepareError::Sizes;
    // A kernel is specialised only to sizes a launch may have: the others are refused as the
    // plan refuses them.
    if specialize {
        if let Some((symbol, &actual)) = sizes.iter().find(|(_, &v)| v < 1) {
            return Err(sizes_err(
                hopfuse::plan::LaunchError::NotPositive {
                    value: symbol.clone(),
                    actual,
                    reason: "every size must be positive".into(),
                }
                .to_string(),
            ));
        }
    }
    let options = CompileOptions {
        index_type: index.unwrap_or(IndexType::I64),
        assume_aligned_vectors: false,
        aligned_for: Some(sizes.clone()),
        specialize,
        clock_probe,
    };
    let mut needed = None;
    let compilation = hopfuse::compile_choosing_index(source, &options, |plan| {
        let choice = choose_index_type(plan, sizes);
        let emit = match (index, &choice) {
            (Some(requested), _) => requested,
            (None, Ok((t, _))) => *t,
            // The sizes are refused below; any type will do.
            (None, Err(_)) => IndexType::I64,
        };
        needed = Some(choice);
        emit
    })
    .map_err(PrepareError::Compile)?;
    let launch = compilation
        .plan
        .concretize(sizes)
        .map_err(|e| sizes_err(e.to_string()))?;
    let (wanted, reason) = needed
        .expect("the index type is chosen during the compile")
        .map_err(sizes_err)?;
    let (index_type, index_reason) = match index {
        None => (wanted, reason),
        Some(IndexType::I32) if wanted == IndexType::I64 => {
            return Err(sizes_err(format!("--index i32 is too small: {reason}")));
        }
        Some(i) => (i, "requested".to_string()),
    };
    // TMA tensor maps with the real sizes (the device address is checked when it is encoded).
    for spec in &compilation.plan.tensor_maps {
        crate::tensor_map::encode_args(spec, sizes, 0).map_err(sizes_err)?;
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

/// One segment of a split fusion compiled for the sizes ([`compile_segments_for_sizes`]).
#[derive(Clone, Debug)]
pub struct SegmentCompiled {
    pub segment: hopfuse::segment::Segment,
    /// The sizes of the segment's own symbols (a product's `K` is not its softmax's).
    pub sizes: BTreeMap<String, i64>,
    pub compilation: Compilation,
    pub setup: Setup,
}

/// Why a segment of a split fusion cannot be compiled for the sizes: which one (its index in
/// the split) and why.
#[derive(Clone, Debug)]
pub struct SegmentError {
    pub segment: usize,
    pub error: PrepareError,
}

impl SegmentError {
    /// The error in words, naming the segment (a compile error rendered against the segment's
    /// program, which is the compiler's, not the user's).
    pub fn describe(&self, split: &hopfuse::segment::Segmentation) -> String {
        let seg = &split.segments[self.segment];
        match &self.error {
            PrepareError::Compile(d) => format!(
                "segment `{}` does not compile:\n{}",
                seg.name,
                d.render(&seg.source, &seg.name)
            ),
            PrepareError::Sizes(e) => format!("segment `{}`: {e}", seg.name),
        }
    }
}

/// Each segment of `split` compiled for `sizes` as [`compile_for_sizes`] compiles a program,
/// in the order they run, each with the sizes of the symbols its own program has.
pub fn compile_segments_for_sizes(
    split: &hopfuse::segment::Segmentation,
    sizes: &BTreeMap<String, i64>,
    index: Option<IndexType>,
    specialize: bool,
) -> Result<Vec<SegmentCompiled>, SegmentError> {
    split
        .segments
        .iter()
        .enumerate()
        .map(|(k, seg)| {
            let symbols = hopfuse::reference_fusion(&seg.source)
                .map(|f| f.symbols)
                .unwrap_or_default();
            let own: BTreeMap<String, i64> = sizes
                .iter()
                .filter(|(s, _)| symbols.contains(s))
                .map(|(s, v)| (s.clone(), *v))
                .collect();
            let (compilation, setup) =
                compile_for_sizes(&seg.source, &own, index, specialize, false)
                    .map_err(|error| SegmentError { segment: k, error })?;
            Ok(SegmentCompiled {
                segment: seg.clone(),
                sizes: own,
                compilation,
                setup,
            })
        })
        .collect()
}
