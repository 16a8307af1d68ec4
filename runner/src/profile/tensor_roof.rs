//! The tensor-core roof of a roofline for a program that is not a matrix product (a matrix
//! product has its own: cuBLAS on its shape, `RunResult::cublas`): cuBLAS's bf16 GEMM with f32
//! accumulation at 8192 x 8192 x 8192, timed on the device that ran the kernel, in the same
//! process. A warm worker measures it once, when a profile first needs it, and keeps it.
//!
//! The operands are filled with a constant byte (every bf16 element is 0x3c3c, about 0.0115):
//! the timing does not depend on the values the way a validated run's would, and nothing is
//! checked (this is a speed, not a result).

use crate::engine::{Device, RunError, Stage};
use hopfuse::plan::{MatmulShape, OperandLayout, SizeExpr};
use hopfuse::DType;

/// M = N = K of the GEMM.
pub const SIZE: i64 = 8192;

/// The measured tensor-core roof.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorRoof {
    /// The call, e.g. `cublasGemmEx(N, N, m=8192, n=8192, k=8192) bf16 x bf16 -> bf16, compute
    /// 32F`.
    pub call: String,
    pub flops_per_s: f64,
}

/// The GEMM as a matrix product of the plan's kind.
fn shape() -> MatmulShape {
    MatmulShape {
        a: "a".into(),
        b: "b".into(),
        c: "c".into(),
        m: SizeExpr::Const(SIZE),
        n: SizeExpr::Const(SIZE),
        k: SizeExpr::Const(SIZE),
        a_layout: OperandLayout::Normal,
        b_layout: OperandLayout::Normal,
        a_dtype: DType::BF16,
        b_dtype: DType::BF16,
        c_dtype: DType::BF16,
        accumulate: DType::F32,
    }
}

/// Times the GEMM on `dev` (3 untimed calls, then the median of 20).
pub fn measure(dev: &Device) -> Result<TensorRoof, RunError> {
    let shape = shape();
    let args = crate::cublas::gemm_args(&shape, SIZE, SIZE, SIZE)
        .ok_or_else(|| RunError::new(Stage::Sizes, "8192 does not fit cuBLAS's int"))?;
    let types = crate::cublas::gemm_types(&shape).map_err(|e| RunError::new(Stage::Cuda, e))?;
    let blas = dev.blas()?;
    let gpu = &dev.gpu;
    let bytes = (SIZE * SIZE) as u64 * DType::BF16.size_bytes() as u64;
    let (a, b, c) = (gpu.alloc(bytes)?, gpu.alloc(bytes)?, gpu.alloc(bytes)?);
    for buf in [&a, &b, &c] {
        gpu.memset(buf, 0x3c)?;
    }
    let p = |buf| crate::gpu::pointer_slot(buf, &gpu.stream);
    let pointers = (p(&a), p(&b), p(&c));
    // SAFETY: a, b and c are bf16 tensors of 8192 x 8192 elements, what `args` was made for.
    let timing = gpu.time(
        None,
        3,
        20,
        || Ok(()),
        |_| unsafe { blas.gemm(&args, types, pointers) },
    )?;
    gpu.sync("the tensor-core roof")?;
    Ok(TensorRoof {
        call: crate::cublas::describe(&args, &shape, types.2),
        flops_per_s: timing.tflops(2.0 * (SIZE as f64).powi(3)) * 1e12,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cuBLAS takes the GEMM (bf16 in and out, f32 accumulate: tensor cores) as the kernels'
    /// products are described.
    #[test]
    fn the_roof_is_a_bf16_gemm_cublas_takes() {
        let shape = shape();
        let args = crate::cublas::gemm_args(&shape, SIZE, SIZE, SIZE).unwrap();
        let types = crate::cublas::gemm_types(&shape).unwrap();
        assert_eq!(
            crate::cublas::describe(&args, &shape, types.2),
            "cublasGemmEx(N, N, m=8192, n=8192, k=8192) bf16 x bf16 -> bf16, compute 32F"
        );
    }
}
