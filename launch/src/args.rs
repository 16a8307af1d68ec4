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

/// The arguments of every launch of one specialization of `plan`'s kernel, built once: the
/// size words and the tensor maps' encode arguments are evaluated here, so a launch
/// ([`PlanArgs::fill`]) only writes the device addresses and scalar values into the slots, and
/// re-encodes a TMA tensor map only when its tensor's address changed since the last launch
/// (torch's caching allocator hands the same addresses back, so most launches encode none).
pub struct PlanArgs {
    args: KernelArgs,
    /// Per tensor parameter ([`LaunchPlan::tensors`] order): its parameter slot and the index
    /// of its address in what [`PlanArgs::fill`] is given.
    tensors: Vec<(usize, usize)>,
    /// Per scalar parameter (plan order): its slot, name, dtype and the program's value.
    scalars: Vec<ScalarParam>,
    maps: Vec<MapParam>,
    addresses: usize,
}

struct ScalarParam {
    slot: usize,
    name: String,
    dtype: DType,
    value: Option<f64>,
}

struct MapParam {
    slot: usize,
    /// The index of its tensor's address in what [`PlanArgs::fill`] is given.
    address: usize,
    encode: crate::tensor_map::EncodeArgs,
    /// The address the slot's map was encoded for (none yet: encode at the first launch).
    encoded_for: Option<u64>,
}

// SAFETY: the raw pointers in `args` point into `args`' own heap allocations, which move with
// it; nothing else holds them.
unsafe impl Send for PlanArgs {}

impl PlanArgs {
    /// The arguments of `plan`'s kernel for `sizes` (every size symbol). A launch gives
    /// `addresses` device addresses; tensor parameter `t` ([`LaunchPlan::tensors`] order) reads
    /// the one at `address_of[t]` (the identity for addresses in the plan's order). The tensor
    /// maps are checked against the sizes here (their addresses at each launch).
    pub fn new(
        plan: &LaunchPlan,
        sizes: &BTreeMap<String, i64>,
        address_of: &[usize],
        addresses: usize,
    ) -> Result<PlanArgs, String> {
        let tensor_count = plan.tensors().count();
        if address_of.len() != tensor_count {
            return Err(format!(
                "{} address positions for the kernel's {tensor_count} tensor parameters",
                address_of.len()
            ));
        }
        if let Some(&bad) = address_of.iter().find(|&&a| a >= addresses) {
            return Err(format!(
                "address position {bad} is outside the {addresses} addresses of a launch"
            ));
        }
        let mut tensors = Vec::with_capacity(tensor_count);
        let mut scalars = Vec::new();
        let mut maps = Vec::new();
        let mut words = Vec::with_capacity(plan.params.len());
        for (slot, p) in plan.params.iter().enumerate() {
            words.push(match p {
                Param::Tensor { .. } => {
                    tensors.push((slot, address_of[tensors.len()]));
                    Arg::Word(0)
                }
                Param::Size { symbol } => Arg::Word(size_word(plan.index_type, symbol, sizes)?),
                Param::Scalar { name, dtype, value } => {
                    scalars.push(ScalarParam {
                        slot,
                        name: name.clone(),
                        dtype: *dtype,
                        value: *value,
                    });
                    Arg::Word(0)
                }
                Param::TensorMap { name, map } => {
                    let spec = plan
                        .tensor_maps
                        .get(*map)
                        .ok_or_else(|| format!("tensor map `{name}` is missing from the plan"))?;
                    let tensor = plan
                        .tensors()
                        .position(|(t, ..)| t == spec.tensor)
                        .ok_or_else(|| {
                            format!(
                                "tensor map `{name}` reads `{}`, which is not a tensor parameter",
                                spec.tensor
                            )
                        })?;
                    maps.push(MapParam {
                        slot,
                        address: address_of[tensor],
                        encode: crate::tensor_map::encode_args(spec, sizes, 0)?,
                        encoded_for: None,
                    });
                    Arg::Map(Box::new(sys::CUtensorMap { opaque: [0; 16] }))
                }
            });
        }
        Ok(PlanArgs {
            args: KernelArgs::from_args(words),
            tensors,
            scalars,
            maps,
            addresses,
        })
    }

    /// The scalar parameters' names, in the order [`PlanArgs::fill`] takes their values.
    pub fn scalar_names(&self) -> impl Iterator<Item = &str> {
        self.scalars.iter().map(|s| s.name.as_str())
    }

    /// Every scalar parameter's value in [`PlanArgs::fill`]'s order: the one in `given`, else
    /// the program's (an error names a scalar with neither).
    pub fn scalar_values(&self, given: &BTreeMap<String, f64>) -> Result<Vec<f64>, String> {
        self.scalars
            .iter()
            .map(|s| {
                given
                    .get(&s.name)
                    .copied()
                    .or(s.value)
                    .ok_or_else(|| format!("scalar `{}` ({}) has no value", s.name, s.dtype.name()))
            })
            .collect()
    }

    /// The arguments of one launch: `addresses` (as many as [`PlanArgs::new`] was told, each
    /// 16-byte aligned as the kernels' vector accesses and TMA need) and one value per scalar
    /// parameter ([`PlanArgs::scalar_names`] order). A tensor map whose address changed is
    /// encoded again, so the driver must be loaded (see [`crate::driver`]).
    pub fn fill(
        &mut self,
        addresses: &[u64],
        scalars: &[f64],
    ) -> Result<&mut [*mut c_void], String> {
        if addresses.len() != self.addresses {
            return Err(format!(
                "{} device addresses for the kernel's {} tensors",
                addresses.len(),
                self.addresses
            ));
        }
        if scalars.len() != self.scalars.len() {
            return Err(format!(
                "{} scalar values for the kernel's {} scalar parameters",
                scalars.len(),
                self.scalars.len()
            ));
        }
        if let Some(i) = first_misaligned(addresses) {
            return Err(format!(
                "device address {i} ({:#x}) is not a multiple of {ALIGNMENT} bytes",
                addresses[i]
            ));
        }
        let ptrs = self.args.pointers();
        for &(slot, address) in &self.tensors {
            // SAFETY: a word parameter's pointer points at its 8-byte slot in `self.args`.
            unsafe { *(ptrs[slot] as *mut u64) = addresses[address] };
        }
        for (s, &v) in self.scalars.iter().zip(scalars) {
            // SAFETY: as above.
            unsafe { *(ptrs[s.slot] as *mut u64) = scalar_slot(s.dtype, v) };
        }
        for m in &mut self.maps {
            let address = addresses[m.address];
            if m.encoded_for == Some(address) {
                continue;
            }
            m.encode.global_address = address;
            let map = crate::tensor_map::encode(&m.encode)?;
            // SAFETY: a tensor map parameter's pointer points at its 128-byte slot.
            unsafe { *(ptrs[m.slot] as *mut sys::CUtensorMap) = map };
            m.encoded_for = Some(address);
        }
        Ok(ptrs)
    }
}

/// Bytes every tensor's device address must be a multiple of (vector accesses and TMA).
pub const ALIGNMENT: u64 = 16;

/// The position of the first address that is not a multiple of [`ALIGNMENT`], if any.
pub fn first_misaligned(addresses: &[u64]) -> Option<usize> {
    addresses.iter().position(|a| !a.is_multiple_of(ALIGNMENT))
}

/// A size parameter's 8-byte slot: the symbol's value in the kernel's index type.
fn size_word(index: IndexType, symbol: &str, sizes: &BTreeMap<String, i64>) -> Result<u64, String> {
    let v = SizeExpr::sym(symbol)
        .eval(sizes)
        .map_err(|e| e.to_string())?;
    Ok(match index {
        IndexType::I32 => {
            let v = i32::try_from(v).map_err(|_| {
                format!("size {symbol} = {v} does not fit the kernel's 32-bit index type")
            })?;
            v as u32 as u64
        }
        IndexType::I64 => v as u64,
    })
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

    fn words(ptrs: &[*mut c_void]) -> Vec<u64> {
        ptrs.iter()
            .map(|&p| unsafe { *(p as *const u64) })
            .collect()
    }

    #[test]
    fn slots_follow_the_parameter_order() {
        let plan = plan();
        assert!(plan
            .tensors()
            .all(|(_, _, role, _)| role != TensorRole::Scratch));
        let sizes = [("N".to_string(), 1000)].into();
        let mut args = PlanArgs::new(&plan, &sizes, &[0, 1], 2).unwrap();
        assert_eq!(args.scalar_names().collect::<Vec<_>>(), ["eps"]);
        let expected = |input: u64, output: u64, eps: f32| -> Vec<u64> {
            plan.params
                .iter()
                .map(|p| match p {
                    Param::Tensor { role, .. } if *role == TensorRole::Input => input,
                    Param::Tensor { .. } => output,
                    Param::Size { .. } => 1000,
                    Param::Scalar { .. } => eps.to_bits() as u64,
                    Param::TensorMap { .. } => unreachable!("no TMA in this plan"),
                })
                .collect()
        };
        let ptrs = args.fill(&[0x1000, 0x2000], &[0.5]).unwrap();
        assert_eq!(words(ptrs), expected(0x1000, 0x2000, 0.5));
        // A second launch rewrites the addresses and scalars, nothing else.
        let ptrs = args.fill(&[0x3000, 0x4000], &[2.0]).unwrap();
        assert_eq!(words(ptrs), expected(0x3000, 0x4000, 2.0));
    }

    #[test]
    fn addresses_come_from_their_positions() {
        let plan = plan();
        let sizes = [("N".to_string(), 7)].into();
        // Three addresses given (an input the kernel does not read among them): the kernel's
        // input is the first, its output the third.
        let mut args = PlanArgs::new(&plan, &sizes, &[0, 2], 3).unwrap();
        let ptrs = args.fill(&[0x1000, 0x5000, 0x2000], &[1.0]).unwrap();
        let tensors: Vec<u64> = plan
            .params
            .iter()
            .zip(words(ptrs))
            .filter(|(p, _)| matches!(p, Param::Tensor { .. }))
            .map(|(_, w)| w)
            .collect();
        assert_eq!(tensors, [0x1000, 0x2000]);
        let e = PlanArgs::new(&plan, &sizes, &[0, 3], 3).err().unwrap();
        assert_eq!(
            e,
            "address position 3 is outside the 3 addresses of a launch"
        );
        let e = PlanArgs::new(&plan, &sizes, &[0], 3).err().unwrap();
        assert_eq!(
            e,
            "1 address positions for the kernel's 2 tensor parameters"
        );
    }

    #[test]
    fn a_missing_scalar_or_address_is_an_error() {
        let plan = plan();
        let sizes = [("N".to_string(), 1000)].into();
        let mut args = PlanArgs::new(&plan, &sizes, &[0, 1], 2).unwrap();
        let e = args.scalar_values(&BTreeMap::new()).unwrap_err();
        assert_eq!(e, "scalar `eps` (bf16) has no value");
        assert_eq!(
            args.scalar_values(&[("eps".to_string(), 0.25)].into()),
            Ok(vec![0.25])
        );
        let e = args.fill(&[0x1000], &[1.0]).err().unwrap();
        assert!(e.contains("1 device addresses for the kernel's 2"), "{e}");
        let e = args.fill(&[0x1000, 0x2000], &[]).err().unwrap();
        assert_eq!(e, "0 scalar values for the kernel's 1 scalar parameters");
        let e = args.fill(&[0x1000, 0x2004], &[1.0]).err().unwrap();
        assert_eq!(e, "device address 1 (0x2004) is not a multiple of 16 bytes");
    }

    #[test]
    fn a_size_too_large_for_the_index_type_is_an_error() {
        let mut plan = plan();
        plan.index_type = IndexType::I32;
        let sizes = [("N".to_string(), 1i64 << 31)].into();
        let e = PlanArgs::new(&plan, &sizes, &[0, 1], 2).err().unwrap();
        assert_eq!(
            e,
            "size N = 2147483648 does not fit the kernel's 32-bit index type"
        );
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
