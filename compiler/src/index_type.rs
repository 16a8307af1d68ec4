//! The index type a kernel needs for its sizes: 32-bit when every tensor has fewer than 2^31
//! elements and every size fits an `int`, else 64-bit. One rule for every caller that picks it
//! from the sizes: the runner and the Python package (through `hopfuse-launch`) before they
//! compile a specialization, and the playground, whose CUDA and Launch plan panes show the
//! variant Run and the SASS pane build for the same sizes.

use crate::plan::SizeExpr;
use crate::{IndexType, LaunchPlan};
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
