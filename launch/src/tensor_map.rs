//! TMA tensor maps: the plan's [`TensorMapSpec`]s evaluated with the real sizes and the tensor's
//! device address, re-validated (the compiler checked what it could without the sizes), and
//! encoded with `cuTensorMapEncodeTiled`. The map is a kernel parameter passed by value.

use hopfuse::plan::TensorMapSpec;
use hopfuse::DType;
use std::collections::BTreeMap;

use cudarc::driver::sys;

/// The arguments of one `cuTensorMapEncodeTiled` call (every array innermost first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodeArgs {
    pub data_type: sys::CUtensorMapDataType,
    pub rank: u32,
    pub global_address: u64,
    pub global_dims: Vec<u64>,
    /// Bytes, `rank - 1` entries (the innermost stride is the element size).
    pub global_strides: Vec<u64>,
    pub box_dims: Vec<u32>,
    pub element_strides: Vec<u32>,
    pub interleave: sys::CUtensorMapInterleave,
    pub swizzle: sys::CUtensorMapSwizzle,
    pub l2_promotion: sys::CUtensorMapL2promotion,
    pub oob_fill: sys::CUtensorMapFloatOOBfill,
}

fn data_type(d: DType) -> Result<sys::CUtensorMapDataType, String> {
    use sys::CUtensorMapDataType as T;
    Ok(match d {
        DType::F32 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        DType::F16 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DType::BF16 => T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::F64 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
        DType::I32 => T::CU_TENSOR_MAP_DATA_TYPE_INT32,
        DType::I64 => T::CU_TENSOR_MAP_DATA_TYPE_INT64,
        // A TMA copy moves bytes: 1-byte types travel as uint8.
        DType::Bool | DType::U8 | DType::I8 | DType::F8E4M3 | DType::F8E5M2 => {
            T::CU_TENSOR_MAP_DATA_TYPE_UINT8
        }
    })
}

/// Evaluates and validates a spec for a tensor at `address`: every rule of
/// `cuTensorMapEncodeTiled` (rank 1..5, 16-byte aligned address, dims 1..2^32, strides multiples
/// of 16 bytes below 2^40, box dims 1..256 with a 16-byte multiple inner row, element strides
/// 1..8, swizzle none/32/64/128 with a matching inner row).
pub fn encode_args(
    spec: &TensorMapSpec,
    sizes: &BTreeMap<String, i64>,
    address: u64,
) -> Result<EncodeArgs, String> {
    let what = format!("tensor map `{}` of `{}`", spec.param, spec.tensor);
    let rank = spec.global_dims.len();
    if !(1..=5).contains(&rank) {
        return Err(format!("{what}: rank {rank} is outside 1..5"));
    }
    if spec.box_dims.len() != rank
        || spec.element_strides.len() != rank
        || spec.global_strides.len() != rank - 1
    {
        return Err(format!(
            "{what}: the box, element strides and global strides do not match rank {rank}"
        ));
    }
    if !address.is_multiple_of(16) {
        return Err(format!(
            "{what}: the global address {address:#x} is not 16-byte aligned"
        ));
    }
    let elem = spec.dtype.size_bytes() as i64;
    let mut global_dims = Vec::with_capacity(rank);
    for (d, e) in spec.global_dims.iter().enumerate() {
        let v = e.eval(sizes).map_err(|e| format!("{what}: {e}"))?;
        if !(1..=1i64 << 32).contains(&v) {
            return Err(format!("{what}: dimension {d} = {v} is outside 1..2^32"));
        }
        global_dims.push(v as u64);
    }
    let mut global_strides = Vec::with_capacity(rank - 1);
    let mut expected = elem;
    for (d, e) in spec.global_strides.iter().enumerate() {
        let v = e.eval(sizes).map_err(|e| format!("{what}: {e}"))?;
        expected = expected.saturating_mul(global_dims[d] as i64);
        if v % 16 != 0 {
            return Err(format!(
                "{what}: stride {} = {v} bytes is not a multiple of 16 (rows of a tensor read by TMA must be multiples of 16 bytes)",
                d + 1
            ));
        }
        if !(1..1i64 << 40).contains(&v) {
            return Err(format!(
                "{what}: stride {} = {v} bytes is outside 1..2^40",
                d + 1
            ));
        }
        if v != expected {
            return Err(format!(
                "{what}: stride {} = {v} bytes does not match a dense row-major tensor ({expected})",
                d + 1
            ));
        }
        global_strides.push(v as u64);
    }
    hopfuse::target::check_tma_box(&what, elem, &spec.box_dims, spec.swizzle_bytes)?;
    for (d, &s) in spec.element_strides.iter().enumerate() {
        if !(1..=8).contains(&s) {
            return Err(format!(
                "{what}: element stride {d} is {s}; element strides are 1 to 8"
            ));
        }
    }
    use sys::CUtensorMapSwizzle as S;
    let swizzle = match spec.swizzle_bytes {
        0 => S::CU_TENSOR_MAP_SWIZZLE_NONE,
        32 => S::CU_TENSOR_MAP_SWIZZLE_32B,
        64 => S::CU_TENSOR_MAP_SWIZZLE_64B,
        _ => S::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    Ok(EncodeArgs {
        data_type: data_type(spec.dtype)?,
        rank: rank as u32,
        global_address: address,
        global_dims,
        global_strides,
        box_dims: spec.box_dims.iter().map(|&b| b as u32).collect(),
        element_strides: spec.element_strides.iter().map(|&s| s as u32).collect(),
        interleave: sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzle,
        l2_promotion: sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        // Out-of-bounds elements of a box are filled with zeros.
        oob_fill: sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    })
}

/// Calls `cuTensorMapEncodeTiled` (the driver must be loaded: call after `Gpu::open`).
pub fn encode(args: &EncodeArgs) -> Result<sys::CUtensorMap, String> {
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: every array has `rank` entries (`rank - 1` for the strides), as `encode_args`
    // checked; the driver writes only the 128-byte map.
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            args.data_type,
            args.rank,
            args.global_address as *mut std::ffi::c_void,
            args.global_dims.as_ptr(),
            args.global_strides.as_ptr(),
            args.box_dims.as_ptr(),
            args.element_strides.as_ptr(),
            args.interleave,
            args.swizzle,
            args.l2_promotion,
            args.oob_fill,
        )
    };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(format!(
            "cuTensorMapEncodeTiled failed with {r:?} for {args:?}"
        ));
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopfuse::plan::SizeExpr;

    fn spec() -> TensorMapSpec {
        TensorMapSpec {
            param: "x_s_map".into(),
            tensor: "x".into(),
            dtype: DType::F32,
            global_dims: vec![SizeExpr::sym("N"), SizeExpr::sym("M")],
            global_strides: vec![SizeExpr::Mul(
                Box::new(SizeExpr::Const(4)),
                Box::new(SizeExpr::sym("N")),
            )],
            box_dims: vec![64, 8],
            element_strides: vec![1, 1],
            swizzle_bytes: 0,
        }
    }

    fn sizes(m: i64, n: i64) -> BTreeMap<String, i64> {
        [("M".to_string(), m), ("N".to_string(), n)].into()
    }

    #[test]
    fn a_2d_spec_becomes_innermost_first_encode_arguments() {
        let a = encode_args(&spec(), &sizes(100, 1000), 0x7f00_0000_0100).unwrap();
        assert_eq!(
            a,
            EncodeArgs {
                data_type: sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                rank: 2,
                global_address: 0x7f00_0000_0100,
                global_dims: vec![1000, 100],
                global_strides: vec![4000],
                box_dims: vec![64, 8],
                element_strides: vec![1, 1],
                interleave: sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle: sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
                l2_promotion: sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                oob_fill: sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            }
        );
    }

    #[test]
    fn real_sizes_are_checked_again() {
        let e = encode_args(&spec(), &sizes(100, 1001), 0x1000).unwrap_err();
        assert!(
            e.contains("stride 1 = 4004 bytes is not a multiple of 16"),
            "{e}"
        );
        let e = encode_args(&spec(), &sizes(100, 1000), 0x1008).unwrap_err();
        assert!(e.contains("not 16-byte aligned"), "{e}");
        let e = encode_args(&spec(), &sizes(0, 1000), 0x1000).unwrap_err();
        assert!(e.contains("dimension 1 = 0 is outside 1..2^32"), "{e}");
        let mut s = spec();
        s.box_dims = vec![512, 8];
        let e = encode_args(&s, &sizes(100, 1000), 0x1000).unwrap_err();
        assert!(e.contains("1 to 256 elements"), "{e}");
        let mut s = spec();
        s.box_dims = vec![2, 8];
        let e = encode_args(&s, &sizes(100, 1000), 0x1000).unwrap_err();
        assert!(e.contains("multiple of 16 bytes"), "{e}");
        let mut s = spec();
        s.swizzle_bytes = 128;
        let e = encode_args(&s, &sizes(100, 1000), 0x1000).unwrap_err();
        assert!(e.contains("exactly 128 bytes, it is 256"), "{e}");
        let mut s = spec();
        s.element_strides = vec![1, 9];
        let e = encode_args(&s, &sizes(100, 1000), 0x1000).unwrap_err();
        assert!(e.contains("element strides are 1 to 8"), "{e}");
    }

    #[test]
    fn a_1d_spec_has_no_strides() {
        let s = TensorMapSpec {
            param: "x_s_map".into(),
            tensor: "x".into(),
            dtype: DType::BF16,
            global_dims: vec![SizeExpr::sym("N")],
            global_strides: vec![],
            box_dims: vec![256],
            element_strides: vec![1],
            swizzle_bytes: 0,
        };
        let a = encode_args(&s, &[("N".to_string(), 12345)].into(), 0x2000).unwrap();
        assert_eq!(a.rank, 1);
        assert_eq!(a.global_dims, vec![12345]);
        assert!(a.global_strides.is_empty());
        assert_eq!(
            a.data_type,
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
        );
    }
}
