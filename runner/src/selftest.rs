//! `hopfuse selftest`: the runner checked on hand-written kernels with hand-written launch plans
//! and float64 references, independent of the compiler. Needs a GPU. Two cases must fail
//! validation (an unwritten element, wrong math), which shows that failures are caught.

use crate::engine::{self, Reference, RunError, RunRequest, RunResult, Setup, Stage};
use crate::validate::Tolerances;
use hopfuse::plan::{Param, SizeExpr as E, TensorRole};
use hopfuse::{DType, IndexType, LaunchPlan};
use std::collections::BTreeMap;

pub struct Case {
    pub name: &'static str,
    pub cuda: &'static str,
    pub plan: LaunchPlan,
    pub sizes: BTreeMap<String, i64>,
    /// Whether validation should pass.
    pub expect_pass: bool,
    pub reference: Reference<'static>,
}

fn c(v: i64) -> E {
    E::Const(v)
}
fn s(name: &str) -> E {
    E::sym(name)
}
fn mul(a: E, b: E) -> E {
    E::Mul(Box::new(a), Box::new(b))
}
fn ceil_div(a: E, b: E) -> E {
    E::CeilDiv(Box::new(a), Box::new(b))
}
fn tensor(name: &str, dtype: DType, role: TensorRole, shape: Vec<E>) -> Param {
    Param::Tensor {
        name: name.into(),
        dtype,
        role,
        shape,
    }
}
fn size(symbol: &str) -> Param {
    Param::Size {
        symbol: symbol.into(),
    }
}

/// A plan with 256-thread blocks and no shared memory; `grid` and `bytes` (min global bytes).
fn plan(
    kernel: &str,
    index_type: IndexType,
    symbols: &[&str],
    params: Vec<Param>,
    grid: [E; 3],
    bytes: E,
) -> LaunchPlan {
    LaunchPlan {
        kernel_name: kernel.into(),
        index_type,
        symbols: symbols.iter().map(|s| s.to_string()).collect(),
        params,
        grid,
        block: [c(256), c(1), c(1)],
        dynamic_smem_bytes: c(0),
        constraints: vec![],
        tensor_maps: vec![],
        register_sharing: None,
        cluster: None,
        matmul: None,
        persistent: None,
        auto_schedule: None,
        min_global_bytes: bytes,
    }
}

fn sizes(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// An elementwise reference `out = f(inputs...)` over same-shaped tensors, validated at
/// `dtype`'s tolerance.
fn elementwise(
    out: &'static str,
    ins: &'static [&'static str],
    dtype: DType,
    f: fn(&[f64], &BTreeMap<String, Vec<f64>>) -> f64,
) -> Reference<'static> {
    let evaluate = Box::new(
        move |_sizes: &BTreeMap<String, i64>, inputs: &BTreeMap<String, Vec<f64>>| {
            let n = inputs[ins[0]].len();
            let y = (0..n)
                .map(|i| {
                    let args: Vec<f64> = ins.iter().map(|name| inputs[*name][i]).collect();
                    dtype.round(f(&args, inputs))
                })
                .collect();
            Ok([(out.to_string(), y)].into())
        },
    );
    Reference {
        evaluate,
        tolerances: Tolerances::of_dtypes([(out, dtype)]),
    }
}

const SCALE_F32: &str = r#"
extern "C" __global__ void __launch_bounds__(256) scale_f32(float* __restrict__ y, const float* __restrict__ x, float s, int M, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M * N) y[i] = x[i] * 2.0f + s;
}
"#;

const ADD_MIXED: &str = r#"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
// Each block stages 16384 elements of one row in 64 KiB of dynamic shared memory and writes them
// back with a different thread mapping.
extern "C" __global__ void __launch_bounds__(256) add_mixed(__nv_bfloat16* __restrict__ z, const __nv_bfloat16* __restrict__ x, const __half* __restrict__ y, long long M, long long N) {
    extern __shared__ float stage[];
    long long row = blockIdx.y;
    long long col0 = (long long)blockIdx.x * 16384;
    for (int j = threadIdx.x; j < 16384; j += 256) {
        long long col = col0 + j;
        if (col < N) stage[j] = __bfloat162float(x[row * N + col]) + __half2float(y[row * N + col]);
    }
    __syncthreads();
    for (int j = 255 - threadIdx.x; j < 16384; j += 256) {
        long long col = col0 + j;
        if (col < N) z[row * N + col] = __float2bfloat16(stage[j]);
    }
}
"#;

const AFFINE_I32: &str = r#"
extern "C" __global__ void affine_i32(int* __restrict__ y, const int* __restrict__ x, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) y[i] = x[i] * 3 - 1;
}
"#;

const SKIP_LAST: &str = r#"
extern "C" __global__ void skip_last(float* __restrict__ y, const float* __restrict__ x, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N - 1) y[i] = x[i];
}
"#;

const WRONG_MATH: &str = r#"
extern "C" __global__ void wrong_math(float* __restrict__ y, const float* __restrict__ x, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) y[i] = x[i] * 1.001f;
}
"#;

pub fn cases() -> Vec<Case> {
    use DType::*;
    use TensorRole::*;
    let n1 = |kernel, index| {
        plan(
            kernel,
            index,
            &["N"],
            vec![
                tensor("y", F32, Output, vec![s("N")]),
                tensor("x", F32, Input, vec![s("N")]),
                size("N"),
            ],
            [ceil_div(s("N"), c(256)), c(1), c(1)],
            mul(c(8), s("N")),
        )
    };
    vec![
        Case {
            name: "scale_f32 (f32, scalar param, i32 index, large)",
            cuda: SCALE_F32,
            plan: plan(
                "scale_f32",
                IndexType::I32,
                &["M", "N"],
                vec![
                    tensor("y", F32, Output, vec![s("M"), s("N")]),
                    tensor("x", F32, Input, vec![s("M"), s("N")]),
                    Param::Scalar {
                        name: "s".into(),
                        dtype: F32,
                        value: None,
                    },
                    size("M"),
                    size("N"),
                ],
                [ceil_div(mul(s("M"), s("N")), c(256)), c(1), c(1)],
                mul(c(8), mul(s("M"), s("N"))),
            ),
            sizes: sizes(&[("M", 8192), ("N", 8192)]),
            expect_pass: true,
            reference: elementwise("y", &["x"], F32, |a, inputs| {
                (a[0] as f32 * 2.0 + inputs["s"][0] as f32) as f64
            }),
        },
        Case {
            name: "add_mixed (bf16 + f16, 64 KiB dynamic smem, i64 index, L2-sized)",
            cuda: ADD_MIXED,
            plan: LaunchPlan {
                dynamic_smem_bytes: c(65536),
                ..plan(
                    "add_mixed",
                    IndexType::I64,
                    &["M", "N"],
                    vec![
                        tensor("z", BF16, Output, vec![s("M"), s("N")]),
                        tensor("x", BF16, Input, vec![s("M"), s("N")]),
                        tensor("y", F16, Input, vec![s("M"), s("N")]),
                        size("M"),
                        size("N"),
                    ],
                    [ceil_div(s("N"), c(16384)), s("M"), c(1)],
                    mul(c(6), mul(s("M"), s("N"))),
                )
            },
            sizes: sizes(&[("M", 1024), ("N", 8000)]),
            expect_pass: true,
            reference: elementwise("z", &["x", "y"], BF16, |a, _| a[0] + a[1]),
        },
        Case {
            name: "affine_i32 (i32, small: L2 flushed)",
            cuda: AFFINE_I32,
            plan: {
                let mut p = n1("affine_i32", IndexType::I32);
                p.params = vec![
                    tensor("y", I32, Output, vec![s("N")]),
                    tensor("x", I32, Input, vec![s("N")]),
                    size("N"),
                ];
                p
            },
            sizes: sizes(&[("N", 100_000)]),
            expect_pass: true,
            reference: elementwise("y", &["x"], I32, |a, _| a[0] * 3.0 - 1.0),
        },
        Case {
            name: "skip_last (leaves one element unwritten: must FAIL)",
            cuda: SKIP_LAST,
            plan: n1("skip_last", IndexType::I32),
            sizes: sizes(&[("N", 4096)]),
            expect_pass: false,
            reference: elementwise("y", &["x"], F32, |a, _| a[0]),
        },
        Case {
            name: "wrong_math (off by 0.1%: must FAIL at f32 tolerance)",
            cuda: WRONG_MATH,
            plan: n1("wrong_math", IndexType::I32),
            sizes: sizes(&[("N", 4096)]),
            expect_pass: false,
            reference: elementwise("y", &["x"], F32, |a, _| a[0]),
        },
    ]
}

/// Runs one case.
/// cuBLAS DGEMM, the GPU reference of large matrix products, against the host reference at
/// small sizes in every layout ([`crate::gemm_reference::cross_check`]): one line per case.
pub fn gemm_reference_check() -> Result<Vec<String>, RunError> {
    let dev = crate::engine::Device::open()?;
    crate::gemm_reference::cross_check(&dev.gpu, dev.blas()?)
}

pub fn run_case(
    case: &Case,
    iters: u32,
    warmup: u32,
    seed: u64,
    copy_ceiling: bool,
) -> Result<RunResult, RunError> {
    let launch = case
        .plan
        .concretize(&case.sizes)
        .map_err(|e| RunError::new(Stage::Sizes, e.to_string()))?;
    let setup = Setup {
        index_type: case.plan.index_type,
        index_reason: "fixed by the self-test".into(),
        launch,
    };
    let req = RunRequest {
        file: format!("selftest/{}", case.plan.kernel_name),
        source: String::new(),
        sizes: case.sizes.clone(),
        scalars: Default::default(),
        iters,
        warmup,
        seed,
        index: Some(case.plan.index_type),
        copy_ceiling,
        peers: false,
        clock: false,
        generic: false,
        documents: Default::default(),
    };
    engine::execute(&req, case.cuda, &case.plan, &setup, &case.reference)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_plans_concretize() {
        for case in cases() {
            let launch = case.plan.concretize(&case.sizes).unwrap();
            assert!(launch.grid[0] >= 1, "{}", case.name);
        }
    }

    #[test]
    fn case_kernels_compile_without_warnings() {
        if crate::not_run::nvrtc_missing("selftest kernels through NVRTC") {
            return;
        }
        for case in cases() {
            let cubin = crate::nvrtc::compile(case.cuda, case.name).unwrap();
            assert!(cubin.warnings.is_empty(), "{}: {}", case.name, cubin.log);
        }
        crate::nvrtc::compile(crate::gpu::SPIN_SOURCE, "spin")
            .unwrap()
            .deny_warnings("spin")
            .unwrap();
    }

    #[test]
    fn references_compute_the_documented_math() {
        let case = &cases()[2];
        let inputs = [("x".to_string(), vec![2.0, -1.0])].into();
        let out = (case.reference.evaluate)(&case.sizes, &inputs).unwrap();
        assert_eq!(out["y"], vec![5.0, -4.0]);
    }
}
