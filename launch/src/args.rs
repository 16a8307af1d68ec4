//! Kernel arguments as `cuLaunchKernel` takes them: one pointer per parameter, to an 8-byte
//! word (a device pointer, a size or a scalar in its low bytes) or to a 128-byte TMA tensor map
//! passed by value. Built in the launch plan's parameter order by the caller; nothing here
//! touches the driver.

use cudarc::driver::sys;
use hopfuse::plan::{Param, SizeExpr};
use hopfuse::{DType, IndexType, LaunchPlan};
use std::collections::BTreeMap;
use std::ffi::c_void;

/// Kernel arguments: one 8-byte slot per parameter (device pointer, size or scalar in its low
/// bytes) and the pointer array `cuLaunchKernel` reads them through.
pub struct KernelArgs {
    // Never touched after construction: `ptrs` point into these allocations.
    _slots: Box<[u64]>,
    _maps: Box<[sys::CUtensorMap]>,
    ptrs: Vec<*mut c_void>,
}

/// One kernel argument: an 8-byte word, or a 128-byte TMA tensor map passed by value.
pub enum Arg {
    Word(u64),
    Map(Box<sys::CUtensorMap>),
}

impl KernelArgs {
    pub fn new(slots: Vec<u64>) -> KernelArgs {
        KernelArgs::from_args(slots.into_iter().map(Arg::Word).collect())
    }

    /// Arguments in parameter order; a tensor map's slot points at its 128 bytes (64-byte
    /// aligned, as the kernel's `__grid_constant__` parameter expects).
    pub fn from_args(args: Vec<Arg>) -> KernelArgs {
        let mut words = Vec::new();
        let mut maps = Vec::new();
        let mut order = Vec::new();
        for a in args {
            match a {
                Arg::Word(w) => {
                    order.push((false, words.len()));
                    words.push(w);
                }
                Arg::Map(m) => {
                    order.push((true, maps.len()));
                    maps.push(*m);
                }
            }
        }
        let mut slots = words.into_boxed_slice();
        let mut maps = maps.into_boxed_slice();
        let ptrs = order
            .into_iter()
            .map(|(is_map, i)| {
                if is_map {
                    &mut maps[i] as *mut sys::CUtensorMap as *mut c_void
                } else {
                    &mut slots[i] as *mut u64 as *mut c_void
                }
            })
            .collect();
        KernelArgs {
            _slots: slots,
            _maps: maps,
            ptrs,
        }
    }

    /// The pointer array `cuLaunchKernel` reads (`kernelParams`), one per parameter.
    pub fn pointers(&mut self) -> &mut [*mut c_void] {
        &mut self.ptrs
    }
}

/// A scalar kernel parameter's 8-byte slot: the kernel declares a scalar input of type `dtype`
/// with its compute type (`float` for f16 and bf16), in the slot's low bytes.
pub fn scalar_slot(dtype: DType, value: f64) -> u64 {
    match dtype.compute() {
        DType::F64 => value.to_bits(),
        DType::I64 => value as i64 as u64,
        DType::I32 => value as i32 as u32 as u64,
        DType::I8 => value as i8 as u8 as u64,
        DType::U8 => value as u8 as u64,
        DType::Bool => u64::from(value != 0.0),
        _ => (value as f32).to_bits() as u64,
    }
}

/// The arguments of one launch of `plan`'s kernel, in its parameter order: `pointers` holds
/// one device address per tensor parameter ([`LaunchPlan::tensors`] order), `scalars` a value
/// for every scalar parameter, `sizes` every size symbol. The TMA tensor maps are encoded here
/// from the tensors' addresses, so the driver must be loaded (see [`crate::driver`]).
pub fn for_plan(
    plan: &LaunchPlan,
    sizes: &BTreeMap<String, i64>,
    pointers: &[u64],
    scalars: &BTreeMap<String, f64>,
) -> Result<KernelArgs, String> {
    let tensors = plan.tensors().count();
    if pointers.len() != tensors {
        return Err(format!(
            "{} device addresses for the kernel's {tensors} tensor parameters",
            pointers.len()
        ));
    }
    let mut next_tensor = pointers.iter();
    let mut args = Vec::with_capacity(plan.params.len());
    for p in &plan.params {
        args.push(match p {
            Param::Tensor { .. } => Arg::Word(*next_tensor.next().expect("counted above")),
            Param::Size { symbol } => {
                let v = SizeExpr::sym(symbol)
                    .eval(sizes)
                    .map_err(|e| e.to_string())?;
                Arg::Word(match plan.index_type {
                    IndexType::I32 => {
                        let v = i32::try_from(v).map_err(|_| {
                            format!(
                                "size {symbol} = {v} does not fit the kernel's 32-bit index type"
                            )
                        })?;
                        v as u32 as u64
                    }
                    IndexType::I64 => v as u64,
                })
            }
            Param::Scalar { name, dtype, value } => {
                // A value given at the call wins over the one the program gives.
                let v =
                    scalars.get(name).copied().or(*value).ok_or_else(|| {
                        format!("scalar `{name}` ({}) has no value", dtype.name())
                    })?;
                Arg::Word(scalar_slot(*dtype, v))
            }
            Param::TensorMap { name, map } => {
                let spec = plan
                    .tensor_maps
                    .get(*map)
                    .ok_or_else(|| format!("tensor map `{name}` is missing from the plan"))?;
                let index = plan
                    .tensors()
                    .position(|(t, ..)| t == spec.tensor)
                    .ok_or_else(|| {
                        format!(
                            "tensor map `{name}` reads `{}`, which is not a tensor parameter",
                            spec.tensor
                        )
                    })?;
                let encode = crate::tensor_map::encode_args(spec, sizes, pointers[index])?;
                Arg::Map(Box::new(crate::tensor_map::encode(&encode)?))
            }
        });
    }
    Ok(KernelArgs::from_args(args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopfuse::plan::TensorRole;

    fn plan() -> LaunchPlan {
        let source = "fusion scale {\n  input x: f32[N]\n  y = x * 2.0\n  output y\n}\n";
        let mut plan = hopfuse::compile(source, &Default::default()).unwrap().plan;
        // A scalar parameter as the compiler emits one for a rank-0 input (from JSON: the
        // parameter's optional fields keep their defaults).
        plan.params.push(
            serde_json::from_str(r#"{"kind": "scalar", "name": "eps", "dtype": "bf16"}"#).unwrap(),
        );
        plan
    }

    #[test]
    fn slots_follow_the_parameter_order() {
        let plan = plan();
        assert!(plan
            .tensors()
            .all(|(_, _, role, _)| role != TensorRole::Scratch));
        let sizes = [("N".to_string(), 1000)].into();
        let scalars = [("eps".to_string(), 0.5)].into();
        let mut args = for_plan(&plan, &sizes, &[0x1000, 0x2000], &scalars).unwrap();
        let words: Vec<u64> = args
            .pointers()
            .iter()
            .map(|&p| unsafe { *(p as *const u64) })
            .collect();
        let expected: Vec<u64> = plan
            .params
            .iter()
            .map(|p| match p {
                Param::Tensor { role, .. } if *role == TensorRole::Input => 0x1000,
                Param::Tensor { .. } => 0x2000,
                Param::Size { .. } => 1000,
                Param::Scalar { .. } => 0.5f32.to_bits() as u64,
                Param::TensorMap { .. } => unreachable!("no TMA in this plan"),
            })
            .collect();
        assert_eq!(words, expected);
    }

    #[test]
    fn a_missing_scalar_or_address_is_an_error() {
        let plan = plan();
        let sizes = [("N".to_string(), 1000)].into();
        let e = for_plan(&plan, &sizes, &[0x1000, 0x2000], &BTreeMap::new())
            .err()
            .unwrap();
        assert_eq!(e, "scalar `eps` (bf16) has no value");
        let e = for_plan(&plan, &sizes, &[0x1000], &BTreeMap::new())
            .err()
            .unwrap();
        assert!(e.contains("1 device addresses for the kernel's 2"), "{e}");
    }

    #[test]
    fn scalars_use_the_compute_type() {
        assert_eq!(scalar_slot(DType::F32, 1.0), 1.0f32.to_bits() as u64);
        assert_eq!(scalar_slot(DType::BF16, 1.0), 1.0f32.to_bits() as u64);
        assert_eq!(scalar_slot(DType::F64, 2.0), 2.0f64.to_bits());
        assert_eq!(scalar_slot(DType::I32, -1.0), 0xffff_ffff);
        assert_eq!(scalar_slot(DType::I64, -1.0), u64::MAX);
        assert_eq!(scalar_slot(DType::I8, -1.0), 0xff);
        assert_eq!(scalar_slot(DType::U8, 200.0), 200);
        // An 8-bit float scalar is passed as the f32 it computes in.
        assert_eq!(scalar_slot(DType::F8E4M3, 1.0), 1.0f32.to_bits() as u64);
    }
}
