//! The host half of staging a run, before the device: the request checked, the inputs
//! generated from the seed ([`SeededInputs`], which a segmented run's staging shares), the
//! float64 reference (or, for a large matrix product, what computes it on the device) and the
//! CUBIN ([`stage_host`] -> [`HostStaged`]).

use super::*;

/// The host half of a run: inputs, the float64 reference and the CUBIN (no GPU needed yet).
pub(super) struct HostStaged<'a> {
    pub(super) req: &'a RunRequest,
    pub(super) plan: &'a LaunchPlan,
    pub(super) setup: &'a Setup,
    pub(super) tensors: Vec<Tensor>,
    pub(super) scalars: BTreeMap<String, f64>,
    pub(super) expected: Expected<'a>,
    /// Each output's tolerance (`reference`'s).
    pub(super) tolerances: &'a Tolerances,
    pub(super) cubin: nvrtc::Cubin,
    pub(super) working_set: u64,
    pub(super) min_global_bytes: u64,
}

/// The reference outputs, or what computes them on the device.
pub(super) enum Expected<'a> {
    /// Computed on the host.
    Host(BTreeMap<String, Vec<f64>>),
    /// A large matrix product: cuBLAS DGEMM once the device is open ([`crate::gemm_reference`]),
    /// the host reference if that fails.
    Gemm {
        shape: hopfuse::plan::MatmulShape,
        inputs: BTreeMap<String, Vec<f64>>,
        reference: &'a Reference<'a>,
    },
}

/// A run's inputs drawn from its seed, as the device reads them and as the reference gets them:
/// each input tensor encoded in its dtype and decoded again (the reference gets exactly what the
/// device reads), filled as its [`data::InputFill`] says (a gather's indices inside the axis
/// they index, the request's `documents` packed-document ids, else seeded values); each
/// scalar the request's value, else the program's, else a seeded one. Shared by one kernel's
/// run ([`stage_host`]) and a segmented run's (`segmented.rs`).
pub(super) struct SeededInputs {
    seed: u64,
    fills: data::InputFills,
    /// Every input tensor and scalar by name, for the reference.
    pub(super) values: BTreeMap<String, Vec<f64>>,
    /// The scalar inputs' values, for the kernels' arguments.
    pub(super) scalars: BTreeMap<String, f64>,
}

impl SeededInputs {
    pub(super) fn new(req: &RunRequest) -> Result<SeededInputs, RunError> {
        Ok(SeededInputs {
            seed: req.seed,
            fills: input_fills(req)?,
            values: BTreeMap::new(),
            scalars: BTreeMap::new(),
        })
    }

    /// Input tensor `name` of `n` elements: its bytes for the device.
    pub(super) fn tensor(&mut self, name: &str, dtype: DType, n: usize) -> Vec<u8> {
        let values = data::seeded_input(dtype, n, self.seed, name, self.fills.of(name));
        let init = data::encode(dtype, &values);
        self.values
            .insert(name.to_string(), data::decode(dtype, &init));
        init
    }

    /// Scalar input `name`: `given` (the request's or the program's value, from
    /// [`crate::scalars::resolve`]) rounded to its dtype, else a seeded value.
    pub(super) fn scalar(&mut self, name: &str, dtype: DType, given: Option<f64>) -> f64 {
        let v = match given {
            Some(v) => dtype.round(v),
            None => data::seeded_values(dtype, 1, self.seed, name)[0],
        };
        self.values.insert(name.to_string(), vec![v]);
        self.scalars.insert(name.to_string(), v);
        v
    }
}

/// The request's input fills ([`data::InputFills::resolve`]); a `documents` entry the program
/// cannot take is a request error. Checked once the program compiles, before the device opens.
pub(super) fn input_fills(req: &RunRequest) -> Result<data::InputFills, RunError> {
    data::InputFills::resolve(&req.source, &req.sizes, &req.documents)
        .map_err(|e| RunError::new(Stage::Request, e.to_string()))
}

/// A tensor's element count for the sizes, and as a `usize` (an error names the tensor).
pub(super) fn tensor_len(
    name: &str,
    shape: &[SizeExpr],
    sizes: &BTreeMap<String, i64>,
) -> Result<(u64, usize), RunError> {
    let sizes_err = |e: String| RunError::new(Stage::Sizes, e);
    let elements =
        tensor_elements(shape, sizes).map_err(|e| sizes_err(format!("tensor `{name}`: {e}")))?;
    let n = usize::try_from(elements)
        .map_err(|_| sizes_err(format!("tensor `{name}` is too large")))?;
    Ok((elements, n))
}

/// Every output of the run has reference values.
pub(super) fn check_reference_outputs(
    tensors: &[Tensor],
    expected: &BTreeMap<String, Vec<f64>>,
) -> Result<(), RunError> {
    for t in tensors.iter().filter(|t| t.role == TensorRole::Output) {
        if !expected.contains_key(&t.name) {
            return Err(RunError::new(
                Stage::Reference,
                format!("the reference computed no output `{}`", t.name),
            ));
        }
    }
    Ok(())
}

/// How a host reference was computed, for the report.
pub(super) fn host_reference_note() -> String {
    format!(
        "float64 on the host ({} threads)",
        crate::host_parallel::Threads::all().threads
    )
}

pub(super) fn stage_host<'a>(
    req: &'a RunRequest,
    cuda: &str,
    plan: &'a LaunchPlan,
    setup: &'a Setup,
    reference: &'a Reference<'a>,
    hooks: &mut dyn Hooks,
) -> Result<HostStaged<'a>, RunError> {
    req.check()?;
    let sizes = &req.sizes;
    let sizes_err = |e: String| RunError::new(Stage::Sizes, e);
    let index_type = setup.index_type;
    if plan.index_type != index_type {
        return Err(RunError::new(
            Stage::Compile,
            "the plan's index type differs from the one compiled for",
        ));
    }

    // Host data, in parameter order.
    let mut tensors = Vec::new();
    let mut seeded = SeededInputs::new(req)?;
    let scalar_values = crate::scalars::resolve(plan, &req.scalars)
        .map_err(|e| RunError::new(Stage::Request, e))?;
    for p in &plan.params {
        match p {
            Param::Tensor {
                name,
                dtype,
                role,
                shape,
            } => {
                let (elements, n) = tensor_len(name, shape, sizes)?;
                let bytes = elements
                    .checked_mul(dtype.size_bytes() as u64)
                    .ok_or_else(|| sizes_err(format!("tensor `{name}` is too large")))?;
                let init = match role {
                    TensorRole::Input => seeded.tensor(name, *dtype, n),
                    TensorRole::Output | TensorRole::Scratch => data::poison(*dtype, n),
                    TensorRole::Workspace => vec![0; bytes as usize],
                };
                tensors.push(Tensor {
                    name: name.clone(),
                    dtype: *dtype,
                    role: *role,
                    elements,
                    bytes,
                    init,
                });
            }
            Param::TensorMap { name, map } => {
                // Checked with the real sizes (the address is checked when it is encoded).
                let spec = plan.tensor_maps.get(*map).ok_or_else(|| {
                    RunError::new(
                        Stage::Compile,
                        format!("tensor map `{name}` is missing from the plan"),
                    )
                })?;
                crate::tensor_map::encode_args(spec, sizes, 0).map_err(sizes_err)?;
            }
            Param::Scalar { name, dtype, .. } => {
                // The request's value (`--scalar eps=1e-6`), else the program's (`input eps:
                // f32 = 1e-6`), else a seeded one.
                seeded.scalar(name, *dtype, scalar_values[name.as_str()]);
            }
            Param::Size { symbol } => {
                let v = SizeExpr::sym(symbol)
                    .eval(sizes)
                    .map_err(|e| sizes_err(e.to_string()))?;
                if index_type == IndexType::I32 && i32::try_from(v).is_err() {
                    return Err(sizes_err(format!(
                        "size {symbol} = {v} does not fit the kernel's 32-bit index type"
                    )));
                }
            }
        }
    }
    let working_set: u64 = tensors.iter().map(|t| t.bytes).sum();
    let min_global_bytes = plan
        .min_global_bytes
        .eval(sizes)
        .map_err(|e| sizes_err(e.to_string()))?;
    let min_global_bytes = u64::try_from(min_global_bytes)
        .map_err(|_| sizes_err("min_global_bytes is negative".into()))?;

    let SeededInputs {
        values: inputs,
        scalars,
        ..
    } = seeded;
    // The reference, before the GPU work (it needs only the inputs); a large matrix product's
    // on the GPU, as soon as it is open.
    let expected = match plan
        .matmul
        .as_ref()
        .filter(|shape| crate::gemm_reference::wanted(shape, sizes))
    {
        Some(shape) => Expected::Gemm {
            shape: shape.clone(),
            inputs,
            reference,
        },
        None => {
            info!("evaluating the float64 reference");
            hooks.progress(Progress::Reference);
            let expected = (reference.evaluate)(sizes, &inputs)
                .map_err(|e| RunError::new(Stage::Reference, e))?;
            check_reference_outputs(&tensors, &expected)?;
            Expected::Host(expected)
        }
    };

    info!(
        "compiling {} with NVRTC for {}",
        plan.kernel_name,
        nvrtc::ARCH
    );
    hooks.progress(Progress::Nvrtc);
    let cubin = hooks
        .cubin(cuda, &format!("{}.cu", req.file))
        .map_err(|e| RunError::new(Stage::Nvrtc, e.to_string()))?;
    Ok(HostStaged {
        req,
        plan,
        setup,
        tensors,
        scalars,
        expected,
        tolerances: &reference.tolerances,
        cubin,
        working_set,
        min_global_bytes,
    })
}
