//! The float64 reference of a matrix-product fusion (`plan.matmul`) on the GPU: cuBLAS DGEMM
//! (`cublasDgemm_v2`) on the operands widened to f64, then the fusion's final cast, as the host
//! reference computes it: a matrix product's operands reach the product through broadcasts and
//! widening casts only (`fusion/matmul.rs`), so their float64 values are the inputs' values,
//! and the sum is rounded only by a cast to the output type.
//!
//! Takes the shape, the sizes and the inputs' float64 values; gives the output's values,
//! row-major. The argument mapping is [`crate::cublas::gemm_args`] (the same call as the
//! cuBLAS ceiling, in f64). [`compute`] takes the GEMM as a function, so the host test below
//! runs the whole path through the column-major definition of GEMM and compares it with
//! `hopfuse::backend::reference::evaluate`; [`cross_check`] (`hopfuse selftest`) compares cuBLAS with
//! the host reference at small sizes on the GPU.

use crate::cublas::{self, Blas, GemmArgs};
use crate::data;
use crate::gpu::{self, Gpu};
use hopfuse::plan::{MatmulShape, SizeExpr};
use hopfuse::DType;
use hopfuse_api::run::{RunError, Stage};
use std::collections::BTreeMap;

/// `M * N * K` from which the reference of a matrix product runs on the GPU (below it the host
/// reference takes well under a second).
pub const GPU_FROM_MNK: f64 = (1u64 << 27) as f64;

/// Whether the reference of `shape` at these sizes runs on the GPU.
pub fn wanted(shape: &MatmulShape, sizes: &BTreeMap<String, i64>) -> bool {
    shape
        .flops(sizes)
        .is_ok_and(|flops| flops / 2.0 >= GPU_FROM_MNK)
}

/// `(M, N, K)` of `shape` with these sizes, and the call.
fn call(
    shape: &MatmulShape,
    sizes: &BTreeMap<String, i64>,
) -> Result<(usize, usize, usize, GemmArgs), RunError> {
    let sizes_err = |e: String| RunError::new(Stage::Sizes, e);
    let eval = |e: &SizeExpr| e.eval(sizes).map_err(|e| sizes_err(e.to_string()));
    let (m, n, k) = (eval(&shape.m)?, eval(&shape.n)?, eval(&shape.k)?);
    let args = cublas::gemm_args(shape, m, n, k)
        .ok_or_else(|| sizes_err("a size does not fit cuBLAS's 32-bit int".into()))?;
    Ok((m as usize, n as usize, k as usize, args))
}

/// The reference output of `shape`'s product: `gemm(args, first, second)` must return the
/// column-major GEMM of the two operands (`ldc * n` values); the result is the fusion's output
/// (row-major `[M, N]`, rounded by its final cast).
pub fn compute(
    shape: &MatmulShape,
    sizes: &BTreeMap<String, i64>,
    inputs: &BTreeMap<String, Vec<f64>>,
    gemm: impl FnOnce(&GemmArgs, &[f64], &[f64]) -> Result<Vec<f64>, RunError>,
) -> Result<Vec<f64>, RunError> {
    let (m, n, k, args) = call(shape, sizes)?;
    let operand = |name: &str, len: usize| {
        let v = inputs.get(name).ok_or_else(|| {
            RunError::new(Stage::Reference, format!("no values for input `{name}`"))
        })?;
        if v.len() != len {
            return Err(RunError::new(
                Stage::Reference,
                format!("input `{name}` has {} values, expected {len}", v.len()),
            ));
        }
        Ok(v)
    };
    let (a, b) = (operand(&shape.a, m * k)?, operand(&shape.b, k * n)?);
    let (first, second) = args.operands(&a[..], &b[..]);
    // Column-major C^T [N, M] with ldc = N is row-major C [M, N].
    let mut c = gemm(&args, first, second)?;
    if c.len() != m * n {
        return Err(RunError::new(
            Stage::Reference,
            format!("the GEMM gave {} values, expected {}", c.len(), m * n),
        ));
    }
    // The sum is accumulated in `accumulate`; a different output type means a final cast.
    if shape.c_dtype != shape.accumulate {
        for x in &mut c {
            *x = shape.c_dtype.round(*x);
        }
    }
    Ok(c)
}

/// [`compute`] with cuBLAS DGEMM (`blas`, on `g`'s stream).
pub fn on_device(
    g: &Gpu,
    blas: &Blas,
    shape: &MatmulShape,
    sizes: &BTreeMap<String, i64>,
    inputs: &BTreeMap<String, Vec<f64>>,
) -> Result<Vec<f64>, RunError> {
    compute(shape, sizes, inputs, |args, first, second| {
        let up = |v: &[f64]| g.upload(&data::encode(DType::F64, v));
        let (da, db) = (up(first)?, up(second)?);
        let c_bytes = args.ldc as u64 * args.n as u64 * 8;
        let dc = g.alloc(c_bytes)?;
        let p = |b: &cudarc::driver::CudaSlice<u8>| gpu::pointer_slot(b, &g.stream);
        // SAFETY: the buffers hold the operands and the result of the shapes `args` was made
        // for (first: m x k or k x m per transa, ...), all f64.
        unsafe { blas.dgemm(args, (p(&da), p(&db), p(&dc))) }?; // da, db: first, second
        g.sync("the float64 reference (cublasDgemm)")?;
        Ok(data::decode(
            DType::F64,
            &g.download(&dc, c_bytes as usize)?,
        ))
    })
}

/// How the reference was computed, for the report.
pub fn describe(shape: &MatmulShape, sizes: &BTreeMap<String, i64>) -> String {
    match call(shape, sizes) {
        Ok((.., args)) => format!(
            "float64 on the GPU: cublasDgemm({}, {}, m={}, n={}, k={}) on the operands widened to f64",
            if args.transa { "T" } else { "N" },
            if args.transb { "T" } else { "N" },
            args.m,
            args.n,
            args.k
        ),
        Err(_) => "float64 on the GPU (cublasDgemm)".into(),
    }
}

/// The matrix-product examples' shape in every layout, small: cuBLAS DGEMM against the host
/// reference (`hopfuse selftest`). Returns one line per case; an error when one differs by
/// more than 1e-12 relative L2.
pub fn cross_check(g: &Gpu, blas: &Blas) -> Result<Vec<String>, RunError> {
    let mut lines = Vec::new();
    for (name, source) in test_programs() {
        let sizes: BTreeMap<String, i64> =
            [("M".into(), 67), ("N".into(), 45), ("K".into(), 129)].into();
        let (fusion, shape) = product_of(name, &source)?;
        let inputs = seeded_inputs(&shape, &sizes, 1)?;
        let host = hopfuse::backend::reference::evaluate(&fusion, &sizes, &inputs)
            .map_err(|e| RunError::new(Stage::Reference, e))?;
        let device = on_device(g, blas, &shape, &sizes, &inputs)?;
        // Both in float64 on the same float64 inputs: f64's tolerance, whatever the operands'
        // dtype (no low-precision arithmetic here).
        let (f64_tolerance, c) = (DType::F64.tolerance(), &shape.c);
        let check = crate::validate::check(c, DType::F64, f64_tolerance, &device, &host[c])
            .map_err(|e| RunError::new(Stage::Reference, e))?;
        let line = format!(
            "{name}: cublasDgemm vs host float64 reference, rel_l2 {:.2e}, max_abs {:.2e}",
            check.rel_l2, check.max_abs
        );
        if check.rel_l2 > 1e-12 || check.non_finite > 0 {
            return Err(RunError::new(Stage::Reference, format!("{line}: differs")));
        }
        lines.push(line);
    }
    Ok(lines)
}

/// A matrix-product program's fusion (front end only: no schedule needed) and its product.
fn product_of(
    name: &str,
    source: &str,
) -> Result<(hopfuse::fusion::Fusion, MatmulShape), RunError> {
    let fusion = hopfuse::reference_fusion(source)
        .map_err(|d| RunError::new(Stage::Compile, format!("{name}: {d}")))?;
    let shape = hopfuse::fusion::matmul::detect(&fusion)
        .ok_or_else(|| RunError::new(Stage::Compile, format!("{name} is not a matrix product")))?;
    Ok((fusion, shape))
}

/// Seeded values of the two operands (as a run's inputs).
fn seeded_inputs(
    shape: &MatmulShape,
    sizes: &BTreeMap<String, i64>,
    seed: u64,
) -> Result<BTreeMap<String, Vec<f64>>, RunError> {
    let (m, n, k, _) = call(shape, sizes)?;
    let values = |t: &str, dtype: DType, len: usize| data::seeded_values(dtype, len, seed, t);
    Ok([
        (shape.a.clone(), values(&shape.a, shape.a_dtype, m * k)),
        (shape.b.clone(), values(&shape.b, shape.b_dtype, k * n)),
    ]
    .into())
}

/// Matrix products in the layouts the language has, f32, and a bf16 one with a final cast.
fn test_programs() -> Vec<(&'static str, String)> {
    let product = |a: &str, b: &str, ba: usize, bb: usize, r: usize| {
        format!(
            "fusion mm {{\n  input a: f32[{a}]\n  input b: f32[{b}]\n  c = sum(broadcast(a, axis={ba}) * broadcast(b, axis={bb}), axis={r})\n  output c\n}}\n"
        )
    };
    vec![
        ("a[M,K] x b[K,N]", product("M, K", "K, N", 2, 0, 1)),
        ("a[M,K] x b[N,K]", product("M, K", "N, K", 1, 0, 2)),
        ("a[K,M] x b[K,N]", product("K, M", "K, N", 2, 1, 0)),
        // c[N, M]: detected as the product of b[N, K] and a[K, M].
        ("a[K,M] x b[N,K]", product("K, M", "N, K", 0, 2, 1)),
        (
            "bf16 a[M,K] x b[N,K] -> bf16",
            "fusion mm {\n  input a: bf16[M, K]\n  input b: bf16[N, K]\n  p = cast(broadcast(a, axis=1), f32) * cast(broadcast(b, axis=0), f32)\n  s = sum(p, axis=2)\n  c = cast(s, bf16)\n  output c\n}\n"
                .to_string(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole GPU path but the device (the argument mapping, the operands, the final cast)
    /// gives the host reference's values, in every layout.
    #[test]
    fn the_gemm_path_gives_the_host_reference_in_every_layout() {
        let sizes: BTreeMap<String, i64> =
            [("M".into(), 7), ("N".into(), 5), ("K".into(), 11)].into();
        for (name, source) in test_programs() {
            let (fusion, shape) = product_of(name, &source).unwrap();
            let inputs = seeded_inputs(&shape, &sizes, 3).unwrap();
            let host = hopfuse::backend::reference::evaluate(&fusion, &sizes, &inputs).unwrap();
            let gemm = compute(&shape, &sizes, &inputs, |g, a, b| {
                Ok(cublas::column_major_gemm(g, a, b))
            })
            .unwrap();
            let want = &host[&shape.c];
            assert_eq!(gemm.len(), want.len(), "{name}");
            for (g, w) in gemm.iter().zip(want) {
                assert!(
                    (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                    "{name}: {g} vs {w}"
                );
            }
            if shape.c_dtype == DType::BF16 {
                assert!(
                    gemm.iter().all(|&x| DType::BF16.round(x) == x),
                    "{name}: rounded"
                );
            }
        }
    }

    #[test]
    fn only_large_products_go_to_the_gpu() {
        let (_, shape) = product_of("nn", &test_programs()[0].1).unwrap();
        let sizes = |s: i64| -> BTreeMap<String, i64> {
            [("M".into(), s), ("N".into(), s), ("K".into(), s)].into()
        };
        assert!(!wanted(&shape, &sizes(256)));
        assert!(wanted(&shape, &sizes(512)));
        assert!(describe(&shape, &sizes(4096)).contains("m=4096, n=4096, k=4096"));
    }
}
