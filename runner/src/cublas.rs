//! The cuBLAS ceiling of a matrix-product fusion: the same `M, N, K`, operand layouts and types
//! through `cublasGemmEx`, timed like the kernel, its output checked against the same float64
//! reference (which proves the call computes the same product).
//!
//! cuBLAS is column-major; the fusion's tensors are row-major. A row-major `C[M, N]` is the
//! column-major `C^T[N, M]`, and `C^T = B^T A^T`, so the call is `gemm(N, M, K)` with the right
//! operand first. [`gemm_args`] works out the transposes and leading dimensions; the host test
//! below runs those arguments through the column-major definition of GEMM.

use cudarc::cublas::{result, sys};
use hopfuse::plan::{MatmulShape, OperandLayout};
use hopfuse::DType;
use hopfuse_api::run::{RunError, Stage};
use std::ffi::c_void;

/// Which fusion operand a cuBLAS operand slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    A,
    B,
}

/// Arguments of one `cublasGemmEx` call (column-major), without the pointers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmArgs {
    pub transa: bool,
    pub transb: bool,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    /// The fusion operand passed as cuBLAS's `A` (and `B`).
    pub first: Which,
    pub second: Which,
    pub lda: i32,
    pub ldb: i32,
    pub ldc: i32,
}

impl GemmArgs {
    /// cuBLAS's `transa` and `transb`.
    fn ops(&self) -> (sys::cublasOperation_t, sys::cublasOperation_t) {
        let op = |t: bool| {
            if t {
                sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        (op(self.transa), op(self.transb))
    }

    /// cuBLAS's `A` and `B`, given the fusion's operands `a` and `b`.
    pub fn operands<T: Copy>(&self, a: T, b: T) -> (T, T) {
        let pick = |w: Which| match w {
            Which::A => a,
            Which::B => b,
        };
        (pick(self.first), pick(self.second))
    }
}

/// The call computing row-major `c[M, N] = a x b` for `shape`'s layouts; `None` when a size does
/// not fit cuBLAS's 32-bit integers.
pub fn gemm_args(shape: &MatmulShape, m: i64, n: i64, k: i64) -> Option<GemmArgs> {
    let (m, n, k) = (
        i32::try_from(m).ok()?,
        i32::try_from(n).ok()?,
        i32::try_from(k).ok()?,
    );
    // cuBLAS A := the fusion's b seen column-major: b[K, N] row-major is b^T (N x K, ld N);
    // b[N, K] row-major is b (K x N, ld K), transposed by the call.
    let (transa, lda) = match shape.b_layout {
        OperandLayout::Normal => (false, n),
        OperandLayout::Transposed => (true, k),
    };
    // cuBLAS B := the fusion's a: a[M, K] row-major is a^T (K x M, ld K); a[K, M] is a (M x K).
    let (transb, ldb) = match shape.a_layout {
        OperandLayout::Normal => (false, k),
        OperandLayout::Transposed => (true, m),
    };
    Some(GemmArgs {
        transa,
        transb,
        m: n,
        n: m,
        k,
        first: Which::B,
        second: Which::A,
        lda: lda.max(1),
        ldb: ldb.max(1),
        ldc: n.max(1),
    })
}

/// The call as the report shows it, e.g.
/// `cublasGemmEx(N, T, m=4096, n=4096, k=4096) f32 x f32 -> f32, compute 32F`.
pub fn describe(args: &GemmArgs, shape: &MatmulShape, compute: sys::cublasComputeType_t) -> String {
    let op = |t: bool| if t { "T" } else { "N" };
    let compute = if compute == sys::cublasComputeType_t::CUBLAS_COMPUTE_64F {
        "64F"
    } else {
        "32F"
    };
    format!(
        "cublasGemmEx({}, {}, m={}, n={}, k={}) {} x {} -> {}, compute {compute}",
        op(args.transa),
        op(args.transb),
        args.m,
        args.n,
        args.k,
        shape.a_dtype.name(),
        shape.b_dtype.name(),
        shape.c_dtype.name(),
    )
}

/// `cublasGemmEx` types for these operand and result types, or why cuBLAS has none.
/// The operands' and output's data type and the compute type of a `cublasGemmEx` call.
pub type GemmTypes = (
    sys::cudaDataType,
    sys::cudaDataType,
    sys::cublasComputeType_t,
);

pub fn gemm_types(shape: &MatmulShape) -> Result<GemmTypes, String> {
    use sys::cudaDataType::*;
    let t = |d: DType| match d {
        DType::F32 => Some(CUDA_R_32F),
        DType::F16 => Some(CUDA_R_16F),
        DType::BF16 => Some(CUDA_R_16BF),
        DType::F64 => Some(CUDA_R_64F),
        _ => None,
    };
    let unsupported = || {
        format!(
            "cublasGemmEx has no {} x {} -> {} product accumulated in {}",
            shape.a_dtype.name(),
            shape.b_dtype.name(),
            shape.c_dtype.name(),
            shape.accumulate.name()
        )
    };
    if shape.a_dtype != shape.b_dtype {
        return Err(unsupported());
    }
    let (ab, c) = (
        t(shape.a_dtype).ok_or_else(unsupported)?,
        t(shape.c_dtype).ok_or_else(unsupported)?,
    );
    // The combinations of the cublasGemmEx table (CUDA 13) with a float accumulator.
    let compute = match (shape.a_dtype, shape.c_dtype, shape.accumulate) {
        (DType::F64, DType::F64, DType::F64) => sys::cublasComputeType_t::CUBLAS_COMPUTE_64F,
        (DType::F32, DType::F32, DType::F32) => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        (DType::F16 | DType::BF16, c, DType::F32) if c == shape.a_dtype || c == DType::F32 => {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        }
        _ => return Err(unsupported()),
    };
    Ok((ab, c, compute))
}

/// A cuBLAS handle on the device's stream.
pub struct Blas {
    handle: sys::cublasHandle_t,
}

impl Blas {
    /// Loads cuBLAS and binds a handle to `stream`.
    pub fn new(stream: &cudarc::driver::CudaStream) -> Result<Blas, RunError> {
        // SAFETY: only tries to dlopen the library.
        if !unsafe { sys::is_culib_present() } {
            return Err(RunError::new(
                Stage::Cuda,
                "cuBLAS (libcublas) cannot be loaded: no cuBLAS ceiling",
            ));
        }
        let err = |what: &'static str| {
            move |e: result::CublasError| RunError::new(Stage::Cuda, format!("{what}: {e:?}"))
        };
        let handle = result::create_handle().map_err(err("cublasCreate"))?;
        // SAFETY: the handle was just created; the stream outlives it (both belong to the Device,
        // which drops the handle first).
        unsafe { result::set_stream(handle, stream.cu_stream() as sys::cudaStream_t) }
            .map_err(err("cublasSetStream"))?;
        Ok(Blas { handle })
    }

    /// Enqueues `c = a x b` (`alpha = 1`, `beta = 0`) with these arguments and types.
    ///
    /// # Safety
    /// `a`, `b` and `c` must be device pointers to tensors of the shape `args` was made for.
    pub unsafe fn gemm(
        &self,
        args: &GemmArgs,
        types: GemmTypes,
        (a, b, c): (u64, u64, u64),
    ) -> Result<(), RunError> {
        let ((transa, transb), (first, second)) = (args.ops(), args.operands(a, b));
        let (ab, ct, compute) = types;
        // alpha and beta in the compute type.
        let (one64, zero64) = (1.0f64, 0.0f64);
        let (one32, zero32) = (1.0f32, 0.0f32);
        let (alpha, beta): (*const c_void, *const c_void) =
            if compute == sys::cublasComputeType_t::CUBLAS_COMPUTE_64F {
                (&one64 as *const f64 as _, &zero64 as *const f64 as _)
            } else {
                (&one32 as *const f32 as _, &zero32 as *const f32 as _)
            };
        result::gemm_ex(
            self.handle,
            transa,
            transb,
            args.m,
            args.n,
            args.k,
            alpha,
            first as *const c_void,
            ab,
            args.lda,
            second as *const c_void,
            ab,
            args.ldb,
            beta,
            c as *mut c_void,
            ct,
            args.ldc,
            compute,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
        .map_err(|e| RunError::new(Stage::Cuda, format!("cublasGemmEx: {e:?}")))
    }
}

impl Blas {
    /// Enqueues `c = a x b` in float64 (`cublasDgemm_v2`, `alpha = 1`, `beta = 0`): the GPU
    /// reference of a matrix product ([`crate::gemm_reference`]).
    ///
    /// # Safety
    /// `first`, `second` (the operands in the order of [`GemmArgs::operands`]) and `c` must be
    /// device pointers to f64 tensors of the shapes `args` was made for.
    pub unsafe fn dgemm(
        &self,
        args: &GemmArgs,
        (first, second, c): (u64, u64, u64),
    ) -> Result<(), RunError> {
        // The operands come in cuBLAS's order already ([`GemmArgs::operands`] was applied by the
        // caller, who uploaded them that way): ordering them again would swap them back.
        let (transa, transb) = args.ops();
        let (one, zero) = (1.0f64, 0.0f64);
        result::dgemm(
            self.handle,
            transa,
            transb,
            args.m,
            args.n,
            args.k,
            &one,
            first as *const f64,
            args.lda,
            second as *const f64,
            args.ldb,
            &zero,
            c as *mut f64,
            args.ldc,
        )
        .map_err(|e| RunError::new(Stage::Cuda, format!("cublasDgemm: {e:?}")))
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: created by `Blas::new`, destroyed once.
        let _ = unsafe { result::destroy_handle(self.handle) };
    }
}

/// GEMM as cuBLAS defines it: column-major, `C = op(A) op(B)` (cuBLAS of the host tests).
#[cfg(test)]
pub(crate) fn column_major_gemm(g: &GemmArgs, a: &[f64], b: &[f64]) -> Vec<f64> {
    let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
    let (lda, ldb, ldc) = (g.lda as usize, g.ldb as usize, g.ldc as usize);
    let op_a = |i: usize, l: usize| {
        if g.transa {
            a[l + i * lda]
        } else {
            a[i + l * lda]
        }
    };
    let op_b = |l: usize, j: usize| {
        if g.transb {
            b[j + l * ldb]
        } else {
            b[l + j * ldb]
        }
    };
    let mut c = vec![f64::NAN; ldc * n];
    for i in 0..m {
        for j in 0..n {
            c[i + j * ldc] = (0..k).map(|l| op_a(i, l) * op_b(l, j)).sum();
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopfuse::plan::SizeExpr;

    fn shape(a_layout: OperandLayout, b_layout: OperandLayout) -> MatmulShape {
        MatmulShape {
            a: "a".into(),
            b: "b".into(),
            c: "c".into(),
            m: SizeExpr::sym("M"),
            n: SizeExpr::sym("N"),
            k: SizeExpr::sym("K"),
            a_layout,
            b_layout,
            a_dtype: DType::F32,
            b_dtype: DType::F32,
            c_dtype: DType::F32,
            accumulate: DType::F32,
        }
    }

    #[test]
    fn the_call_computes_the_row_major_product_in_every_layout() {
        use OperandLayout::{Normal, Transposed};
        let (m, n, k) = (3usize, 5usize, 7usize);
        // Logical a[i][l] and b[l][j], with values no wrong index reproduces.
        let a_at = |i: usize, l: usize| (i * 31 + l * 7 + 1) as f64;
        let b_at = |l: usize, j: usize| (l * 13 + j * 3 + 2) as f64 * 0.5;
        for (la, lb) in [
            (Normal, Normal),
            (Normal, Transposed),
            (Transposed, Normal),
            (Transposed, Transposed),
        ] {
            // Row-major storage per layout.
            let a: Vec<f64> = match la {
                Normal => (0..m * k).map(|x| a_at(x / k, x % k)).collect(),
                Transposed => (0..k * m).map(|x| a_at(x % m, x / m)).collect(),
            };
            let b: Vec<f64> = match lb {
                Normal => (0..k * n).map(|x| b_at(x / n, x % n)).collect(),
                Transposed => (0..n * k).map(|x| b_at(x % k, x / k)).collect(),
            };
            let g = gemm_args(&shape(la, lb), m as i64, n as i64, k as i64).unwrap();
            let (first, second) = g.operands(&a, &b);
            let c = column_major_gemm(&g, first, second);
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k).map(|l| a_at(i, l) * b_at(l, j)).sum();
                    assert_eq!(c[i * n + j], want, "{la:?} {lb:?} at ({i}, {j})");
                }
            }
        }
        // Sizes beyond cuBLAS's int.
        assert!(gemm_args(&shape(Normal, Normal), 1 << 31, 2, 2).is_none());
    }

    #[test]
    fn the_call_is_described_as_cublas_sees_it() {
        let s = shape(OperandLayout::Normal, OperandLayout::Transposed);
        let g = gemm_args(&s, 3, 5, 7).unwrap();
        assert_eq!(
            describe(&g, &s, sys::cublasComputeType_t::CUBLAS_COMPUTE_32F),
            "cublasGemmEx(T, N, m=5, n=3, k=7) f32 x f32 -> f32, compute 32F"
        );
    }

    #[test]
    fn types_follow_the_gemm_ex_table() {
        let mut s = shape(OperandLayout::Normal, OperandLayout::Normal);
        assert!(gemm_types(&s).is_ok());
        s.a_dtype = DType::BF16;
        assert!(gemm_types(&s).unwrap_err().contains("bf16 x f32 -> f32"));
        s.b_dtype = DType::BF16;
        assert!(gemm_types(&s).is_ok());
        s.c_dtype = DType::BF16;
        assert!(gemm_types(&s).is_ok());
        s.c_dtype = DType::F16;
        assert!(gemm_types(&s).is_err());
        s.c_dtype = DType::F32;
        s.accumulate = DType::F64;
        assert!(gemm_types(&s).is_err());
    }
}
