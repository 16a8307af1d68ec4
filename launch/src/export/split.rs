//! The export of a fusion split into several kernels ([`hopfuse::segment`]): for each segment
//! compiled for the sizes ([`crate::specialize::compile_segments_for_sizes`]) and its CUBIN, the
//! files that run the whole fusion with neither Rust nor hopfuse at run time:
//!
//! - `KERNEL.cu` and `KERNEL.cubin` for every kernel;
//! - `NAME.h` (NAME: the fusion's name): each kernel's launch numbers, `load` and `launch` in a
//!   namespace of its own (what a one-kernel export's header holds), then `Kernels`, a `load`
//!   of every CUBIN from a directory, and a `launch` that takes the fusion's inputs and outputs
//!   and its scalars, allocates the intermediates and each kernel's scratch and workspace on
//!   the caller's stream (`cuMemAllocAsync`; workspaces zeroed), launches the kernels in order
//!   on it and frees those buffers after the last (`cuMemFreeAsync`, in stream order);
//! - `NAME_main.cpp`: that launcher run once on inputs read from raw files (its first argument
//!   is the directory of the CUBINs);
//! - `NAME.py`: the Python launcher on torch tensors: the inputs checked as a one-kernel
//!   export's are, every other tensor of the run allocated with torch (on the current stream,
//!   so torch's caching allocator keeps it until the kernels that use it are done), each kernel
//!   launched in order on torch's current stream, the outputs returned;
//! - `NAME_torch.py` (the whole fusion's twin), `plan.json` and `README.md`.
//!
//! Guarantees: every tensor parameter of every kernel is bound to one buffer of the run (the
//! fusion's inputs, outputs and intermediates by name, a kernel's scratch and workspace its
//! own), or the export is an error saying which is not.

use super::{
    c_identifier, cpp_kernel_functions, cpp_main, cpp_preamble, cpp_scalar_params,
    cpp_tensor_bytes, kernel_parts, python_launch_arg, python_literal, python_scalars_dict,
    python_sizes_dict, python_tensor_line, scalars, ExportFile, Kernel, LaunchArg, MainProgram,
    TensorArg, PY_CHECK_AND_ALLOCATE, PY_DRIVER, PY_LOAD_CONTEXT,
};
use crate::specialize::SegmentCompiled;
use cudarc::driver::sys;
use hopfuse::fusion::Fusion;
use hopfuse::plan::TensorRole;
use hopfuse::segment::Segmentation;
use hopfuse::{DType, IndexType};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Where a tensor of the run lives.
#[derive(Clone, Debug, PartialEq)]
enum Place {
    /// The fusion's input or output: a parameter of the whole launch.
    Input,
    Output,
    /// Written by kernel `producer`, read by the `consumers` (indices), allocated by the launch.
    Intermediate {
        producer: usize,
        consumers: Vec<usize>,
    },
    /// Kernel `kernel`'s own scratch or workspace, allocated by the launch.
    Own {
        kernel: usize,
        role: TensorRole,
    },
}

/// A buffer of the run: its key (the tensor's name, or `hf_kN_NAME` for kernel N's own), its
/// type and shape, and where it lives.
struct RunTensor<'a> {
    key: String,
    arg: TensorArg<'a>,
    place: Place,
}

impl RunTensor<'_> {
    /// Allocated by the launch (not one of its parameters).
    fn allocated(&self) -> bool {
        !matches!(self.place, Place::Input | Place::Output)
    }

    fn role_text(&self) -> String {
        match &self.place {
            Place::Input => "input".into(),
            Place::Output => "output".into(),
            Place::Intermediate {
                producer,
                consumers,
            } => format!(
                "intermediate: written by kernel {}, read by kernel {}",
                producer + 1,
                consumers
                    .iter()
                    .map(|c| (c + 1).to_string())
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
            Place::Own {
                kernel,
                role: TensorRole::Workspace,
            } => format!(
                "workspace of kernel {} (zeroed before it; it leaves it zeroed)",
                kernel + 1
            ),
            Place::Own { kernel, .. } => {
                format!(
                    "scratch of kernel {} (allocated, contents free)",
                    kernel + 1
                )
            }
        }
    }

    /// Its role in the Python launcher's `TENSORS`.
    fn python_role(&self) -> &'static str {
        match self.place {
            Place::Input => "input",
            Place::Output => "output",
            Place::Intermediate { .. } => "intermediate",
            Place::Own {
                role: TensorRole::Workspace,
                ..
            } => "workspace",
            Place::Own { .. } => "scratch",
        }
    }
}

/// The key of the buffer kernel `k`'s tensor parameter `name` (of `role`) is bound to.
fn key_of(k: usize, name: &str, role: TensorRole) -> String {
    match role {
        TensorRole::Scratch | TensorRole::Workspace => format!("hf_k{}_{name}", k + 1),
        TensorRole::Input | TensorRole::Output => name.to_string(),
    }
}

/// One kernel of the export: its segment and what its launchers are written from.
struct Part<'a> {
    compiled: &'a SegmentCompiled,
    /// The kernel's name as a C identifier (its files' stem).
    name: String,
    /// Its namespace in the header (`hf_<segment>`).
    namespace: String,
    tensors: Vec<TensorArg<'a>>,
    args: Vec<LaunchArg<'a>>,
    launch: super::Launch,
}

impl<'a> Part<'a> {
    fn kernel<'b>(&'b self, header: &'b str) -> Kernel<'b> {
        Kernel {
            plan: &self.compiled.compilation.plan,
            name: &self.name,
            header,
            sizes: &self.compiled.sizes,
            index: self.compiled.setup.index_type,
            tensors: &self.tensors,
            launch: &self.launch,
            args: &self.args,
        }
    }
}

/// The buffers of the run in the launch's order: the fusion's tensor inputs and outputs (as
/// declared), then the intermediates and each kernel's own, each found among the kernels'
/// parameters with its shape at the sizes.
fn run_tensors<'a>(
    split: &Segmentation,
    fusion: &Fusion,
    parts: &'a [Part<'a>],
) -> Result<Vec<RunTensor<'a>>, String> {
    let param = |name: &str| {
        parts
            .iter()
            .flat_map(|p| &p.tensors)
            .find(|t| t.name == name)
    };
    let copy = |t: &TensorArg<'a>| TensorArg {
        name: t.name,
        dtype: t.dtype,
        role: t.role,
        shape: t.shape.clone(),
    };
    let mut run = Vec::new();
    for (&id, place) in fusion
        .inputs
        .iter()
        .map(|id| (id, Place::Input))
        .chain(fusion.outputs.iter().map(|id| (id, Place::Output)))
    {
        let name = &fusion.tensors[id].name;
        // A fusion input no kernel takes as a tensor is a scalar (a launch parameter by value).
        match param(name) {
            Some(t) => run.push(RunTensor {
                key: name.clone(),
                arg: copy(t),
                place,
            }),
            None if place == Place::Input => {}
            None => return Err(format!("no kernel writes the output `{name}`")),
        }
    }
    for m in &split.intermediates {
        if run.iter().any(|r| r.key == m.name) {
            // An output a later kernel also reads: the caller's buffer.
            continue;
        }
        let t =
            param(&m.name).ok_or_else(|| format!("no kernel has the intermediate `{}`", m.name))?;
        run.push(RunTensor {
            key: m.name.clone(),
            arg: copy(t),
            place: Place::Intermediate {
                producer: m.producer,
                consumers: m.consumers.clone(),
            },
        });
    }
    for (k, p) in parts.iter().enumerate() {
        for t in &p.tensors {
            let key = key_of(k, t.name, t.role);
            if run.iter().any(|r| r.key == key) {
                continue;
            }
            match t.role {
                TensorRole::Scratch | TensorRole::Workspace => run.push(RunTensor {
                    key,
                    arg: copy(t),
                    place: Place::Own {
                        kernel: k,
                        role: t.role,
                    },
                }),
                _ => {
                    return Err(format!(
                        "tensor `{}` of kernel `{}` is neither an input, an output nor an intermediate of the fusion",
                        t.name, p.name
                    ))
                }
            }
        }
    }
    Ok(run)
}

/// The scalars of every kernel, each once, in order of first use: name, type, the program's
/// value.
fn run_scalars<'a>(parts: &'a [Part<'a>]) -> Vec<(&'a str, DType, Option<f64>)> {
    let mut all: Vec<(&str, DType, Option<f64>)> = Vec::new();
    for s in parts.iter().flat_map(|p| scalars(&p.args)) {
        if all.iter().all(|(n, ..)| *n != s.0) {
            all.push(s);
        }
    }
    all
}

/// The files of an export of a fusion `split` into `kernels` (each compiled for `sizes`, with
/// its CUBIN in `cubins`), the whole `fusion` as written and its `torch_twin`; `source_name` is
/// what the program was read from.
pub fn export_split(
    split: &Segmentation,
    kernels: &[SegmentCompiled],
    cubins: &[Vec<u8>],
    fusion: &Fusion,
    sizes: &BTreeMap<String, i64>,
    torch_twin: &hopfuse::backend::torch::Twin,
    source_name: &str,
) -> Result<Vec<ExportFile>, String> {
    if kernels.len() != split.segments.len() || cubins.len() != kernels.len() {
        return Err(format!(
            "{} segments, {} kernels compiled and {} CUBINs",
            split.segments.len(),
            kernels.len(),
            cubins.len()
        ));
    }
    let mut parts = Vec::new();
    for c in kernels {
        let (tensors, args, launch) = kernel_parts(&c.compilation.plan, &c.setup, &c.sizes)
            .map_err(|e| format!("segment `{}`: {e}", c.segment.name))?;
        parts.push(Part {
            compiled: c,
            name: c_identifier(&c.compilation.plan.kernel_name),
            namespace: format!("hf_{}", c_identifier(&c.segment.name)),
            tensors,
            args,
            launch,
        });
    }
    let run = run_tensors(split, fusion, &parts)?;
    let scalars = run_scalars(&parts);
    let name = c_identifier(&fusion.name);
    let sizes_text = sizes
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let kernels_text = parts
        .iter()
        .map(|p| {
            format!(
                "{} ({} indices)",
                p.compiled.compilation.plan.kernel_name,
                p.compiled.setup.index_type.cuda()
            )
        })
        .collect::<Vec<_>>()
        .join(", then ");
    let header = format!(
        "`{}` from {source_name} for {sizes_text} as {} kernels run in order, {kernels_text}, sm_90a",
        fusion.name,
        parts.len()
    );
    let exported = Exported {
        split,
        name: &name,
        header: &header,
        sizes,
        parts: &parts,
        run: &run,
        scalars: &scalars,
    };
    let mut files = Vec::new();
    for (p, cubin) in parts.iter().zip(cubins) {
        files.push(ExportFile {
            name: format!("{}.cu", p.name),
            bytes: p.compiled.compilation.cuda.clone().into_bytes(),
        });
        files.push(ExportFile {
            name: format!("{}.cubin", p.name),
            bytes: cubin.clone(),
        });
    }
    let main_tensors: Vec<TensorArg> = run
        .iter()
        .filter(|r| !r.allocated())
        .map(|r| TensorArg {
            name: r.arg.name,
            dtype: r.arg.dtype,
            role: if r.place == Place::Input {
                TensorRole::Input
            } else {
                TensorRole::Output
            },
            shape: r.arg.shape.clone(),
        })
        .collect();
    let kernel_names = parts
        .iter()
        .map(|p| p.compiled.compilation.plan.kernel_name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let main = cpp_main(&MainProgram {
        name: &name,
        what: "fusion",
        header: &header,
        cubin_arg: "CUBIN_DIR",
        cubin_example: ".",
        loaded: "Kernels",
        tensors: &main_tensors,
        scalars: scalars.iter().map(|&(_, d, v)| (d, v)).collect(),
        ran: &kernel_names,
    });
    let text = |n: String, t: String| ExportFile {
        name: n,
        bytes: t.into_bytes(),
    };
    files.push(text(format!("{name}.h"), cpp_launcher(&exported)));
    files.push(text(format!("{name}_main.cpp"), main));
    files.push(text(format!("{name}.py"), python_launcher(&exported)));
    files.push(text(format!("{name}_torch.py"), torch_twin.source.clone()));
    files.push(text(
        "plan.json".into(),
        plan_json(&exported, fusion, torch_twin)?,
    ));
    files.push(text(
        "README.md".into(),
        readme(&exported, &torch_twin.function),
    ));
    Ok(files)
}

/// What the split's launchers are written from.
struct Exported<'a> {
    split: &'a Segmentation,
    /// The fusion's name as a C identifier: the files' stem, the namespace's suffix.
    name: &'a str,
    header: &'a str,
    sizes: &'a BTreeMap<String, i64>,
    parts: &'a [Part<'a>],
    run: &'a [RunTensor<'a>],
    scalars: &'a [(&'a str, DType, Option<f64>)],
}

/// `NAME.h`: the sizes, every buffer of the run, each kernel in its namespace, `Kernels`,
/// `load` and the whole `launch`.
fn cpp_launcher(e: &Exported) -> String {
    let n = e.parts.len();
    let mut w = cpp_preamble("fusion", e.header, e.name, e.sizes, "kernels were");
    w.push_str(
        "\n// The tensors of the run: dense row-major, 16-byte aligned device buffers. `launch` takes\n// the fusion's inputs and outputs; it allocates the others on its stream and frees them after\n// the last kernel.\n",
    );
    for r in e.run {
        cpp_tensor_bytes(&mut w, &r.key, &r.arg, &r.role_text());
    }
    for (k, (p, seg)) in e.parts.iter().zip(&e.split.segments).enumerate() {
        let _ = writeln!(
            w,
            "\n// Kernel {} of {n}: {} ({}): {}.\nnamespace {} {{",
            k + 1,
            p.compiled.compilation.plan.kernel_name,
            seg.scheduler,
            seg.reason.trim_end_matches('.'),
            p.namespace
        );
        cpp_kernel_functions(&mut w, &p.kernel(e.header));
        let _ = writeln!(w, "\n}}  // namespace {}", p.namespace);
    }
    w.push_str("\n// Every kernel, loaded.\nstruct Kernels {\n");
    for (k, p) in e.parts.iter().enumerate() {
        let _ = writeln!(w, "  {}::Kernel k{};", p.namespace, k + 1);
    }
    w.push_str(
        "};\n\n// Loads each kernel's CUBIN (`<kernel>.cubin` in `directory`) into the current context.\ninline CUresult load(Kernels& k, const char* directory) {\n  CUresult r;\n",
    );
    for (k, p) in e.parts.iter().enumerate() {
        let _ = writeln!(
            w,
            "  if ((r = {}::load(k.k{}, (std::string(directory) + \"/{}.cubin\").c_str())) != CUDA_SUCCESS) return r;",
            p.namespace,
            k + 1,
            p.name
        );
    }
    w.push_str(CPP_STREAM_BUFFERS);
    let params: Vec<String> = [
        "const Kernels& hf_kernels".to_string(),
        "CUstream hf_stream".to_string(),
    ]
    .into_iter()
    .chain(
        e.run
            .iter()
            .filter(|r| !r.allocated())
            .map(|r| format!("CUdeviceptr {}", c_identifier(&r.key))),
    )
    .chain(cpp_scalar_params(e.scalars))
    .collect();
    let _ = writeln!(
        w,
        "// Runs the kernels in order on `stream`: allocates the intermediates and each kernel's\n// scratch and workspace on it (workspaces zeroed), launches each kernel, and frees those\n// buffers after the last one (in stream order: `launch` does not wait for the kernels).\ninline CUresult launch({}) {{\n  hf_StreamBuffers hf_buffers(hf_stream);\n  CUresult hf_r;",
        params.join(", ")
    );
    for r in e.run.iter().filter(|r| r.allocated()) {
        let id = c_identifier(&r.key);
        let _ = writeln!(
            w,
            "  CUdeviceptr {id};\n  if ((hf_r = hf_buffers.alloc(&{id}, {id}_BYTES)) != CUDA_SUCCESS) return hf_r;"
        );
        if matches!(
            r.place,
            Place::Own {
                role: TensorRole::Workspace,
                ..
            }
        ) {
            let _ = writeln!(
                w,
                "  if ((hf_r = cuMemsetD8Async({id}, 0, {id}_BYTES, hf_stream)) != CUDA_SUCCESS) return hf_r;"
            );
        }
    }
    for (k, p) in e.parts.iter().enumerate() {
        let args: Vec<String> = [format!("hf_kernels.k{}", k + 1), "hf_stream".into()]
            .into_iter()
            .chain(
                p.tensors
                    .iter()
                    .map(|t| c_identifier(&key_of(k, t.name, t.role))),
            )
            .chain(scalars(&p.args).map(|(n, ..)| c_identifier(n)))
            .collect();
        let _ = writeln!(
            w,
            "  if ((hf_r = {}::launch({})) != CUDA_SUCCESS) return hf_r;",
            p.namespace,
            args.join(", ")
        );
    }
    let _ = write!(
        w,
        "  return CUDA_SUCCESS;\n}}\n\n}}  // namespace hopfuse_export_{}\n",
        e.name
    );
    w
}

/// The end of `load` and the guard of the buffers one `launch` allocates.
const CPP_STREAM_BUFFERS: &str = r#"  return CUDA_SUCCESS;
}

// The buffers one `launch` allocates on its stream (cuMemAllocAsync), freed on the stream when it
// returns (cuMemFreeAsync): after the kernels it enqueued, in stream order, also on an error.
struct hf_StreamBuffers {
  CUstream stream;
  std::vector<CUdeviceptr> held;
  explicit hf_StreamBuffers(CUstream s) : stream(s) {}
  hf_StreamBuffers(const hf_StreamBuffers&) = delete;
  hf_StreamBuffers& operator=(const hf_StreamBuffers&) = delete;
  ~hf_StreamBuffers() {
    for (CUdeviceptr p : held) cuMemFreeAsync(p, stream);
  }
  CUresult alloc(CUdeviceptr* p, size_t bytes) {
    CUresult r = cuMemAllocAsync(p, bytes, stream);
    if (r == CUDA_SUCCESS) held.push_back(*p);
    return r;
  }
};

"#;

/// `NAME.py`: `TENSORS` (every buffer of the run), `SCALARS`, `KERNELS`, each kernel's
/// arguments, and `launch`.
fn python_launcher(e: &Exported) -> String {
    let mut w = String::new();
    let inputs: Vec<&str> = e
        .run
        .iter()
        .filter(|r| r.place == Place::Input)
        .map(|r| r.key.as_str())
        .collect();
    let keywords: String = e
        .scalars
        .iter()
        .map(|(n, ..)| format!(", {n}=..."))
        .collect();
    let _ = write!(
        w,
        r#""""Fusion {header}: generated by `hopfuse export`.
Needs torch with CUDA and the NVIDIA driver; not hopfuse.

    import {name}
    outputs = {name}.launch({inputs}{keywords})

The inputs are torch CUDA tensors of the shapes in TENSORS (role "input"), in that order (dense,
16-byte aligned); scalars are keyword arguments (SCALARS: name -> default, None where the program
gives none). The outputs are allocated here and returned (a tuple when there are several), as
are the intermediates one kernel writes and a later one reads and each kernel's scratch and
workspace. The kernels (KERNELS) run in order on torch's current stream.
"""

import ctypes
import os

import torch

SIZES = {{{sizes}}}
# (name, dtype, shape, role) of every tensor of the run: the fusion's inputs and outputs, the
# intermediates between the kernels, each kernel's own scratch and workspace.
TENSORS = [
"#,
        header = e.header,
        name = e.name,
        inputs = inputs.join(", "),
        sizes = python_sizes_dict(e.sizes),
    );
    for r in e.run {
        python_tensor_line(&mut w, &r.key, &r.arg, r.python_role());
    }
    let _ = write!(
        w,
        "]\nSCALARS = {{{}}}\n# The kernels in launch order: (kernel, CUBIN file, grid, block, dynamic shared memory bytes,\n# whether every CTA must be resident at once, {{its tensor parameter: the run's tensor}}).\nKERNELS = [\n",
        python_scalars_dict(e.scalars)
    );
    for (k, p) in e.parts.iter().enumerate() {
        let [gx, gy, gz] = p.launch.grid;
        let [bx, by, bz] = p.launch.block;
        let bound: Vec<String> = p
            .tensors
            .iter()
            .map(|t| format!("{:?}: {:?}", t.name, key_of(k, t.name, t.role)))
            .collect();
        let _ = writeln!(
            w,
            "    ({:?}, {:?}, ({gx}, {gy}, {gz}), ({bx}, {by}, {bz}), {}, {}, {{{}}}),",
            p.compiled.compilation.plan.kernel_name,
            format!("{}.cubin", p.name),
            p.launch.smem,
            if p.launch.needs_resident {
                "True"
            } else {
                "False"
            },
            bound.join(", ")
        );
    }
    let _ = write!(
        w,
        r#"]
_DIRECTORY = os.path.dirname(os.path.abspath(__file__))

_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = {max_smem_attribute}
_ATTRIBUTE_MULTIPROCESSOR_COUNT = {sm_count_attribute}
_driver = []
_functions = {{}}  # device index -> (context, [the CUfunction of each kernel])

{PY_DRIVER}
{PY_LOAD_CONTEXT}{PY_LOAD_KERNELS}
"#,
        max_smem_attribute =
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as u32,
        sm_count_attribute =
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT as u32,
    );
    let mut functions = Vec::new();
    for (k, p) in e.parts.iter().enumerate() {
        let index_ctype = match p.compiled.setup.index_type {
            IndexType::I32 => "ctypes.c_int32",
            IndexType::I64 => "ctypes.c_int64",
        };
        let function = format!("_arguments_{}", k + 1);
        let _ = writeln!(
            w,
            "def {function}(cuda, buffers, values, arg):\n    \"\"\"{}'s arguments in its parameter order (`buffers`: its tensor parameters).\"\"\"",
            p.compiled.compilation.plan.kernel_name
        );
        for a in &p.args {
            let _ = writeln!(w, "    arg({})", python_launch_arg(a, index_ctype));
        }
        if p.args.is_empty() {
            w.push_str("    pass\n");
        }
        w.push_str("\n\n");
        functions.push(function);
    }
    let _ = write!(
        w,
        "_ARGUMENTS = [{}]\n\n\n{PY_ARGUMENTS}def launch(*inputs, **scalars):\n    \"\"\"Runs the kernels in order on torch's current stream; returns the outputs.\"\"\"\n{PY_CHECK_AND_ALLOCATE}{PY_LAUNCH_KERNELS}",
        functions.join(", ")
    );
    w
}

/// The rest of `_load(index)` after the context ([`PY_LOAD_CONTEXT`]): every kernel's CUBIN
/// loaded into it with its shared-memory opt-in and residency check.
const PY_LOAD_KERNELS: &str = r#"    functions = []
    with _Current(cuda, ctx):
        sms = ctypes.c_int()
        _check(cuda.cuDeviceGetAttribute(ctypes.byref(sms), _ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute")
        for kernel, cubin, grid, _, smem, resident, _ in KERNELS:
            with open(os.path.join(_DIRECTORY, cubin), "rb") as f:
                image = f.read()
            module = ctypes.c_void_p()
            _check(cuda.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
            function = ctypes.c_void_p()
            _check(cuda.cuModuleGetFunction(ctypes.byref(function), module, kernel.encode()), "cuModuleGetFunction")
            if smem > 48 * 1024:
                _check(cuda.cuFuncSetAttribute(function, _ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem), "cuFuncSetAttribute")
            if resident and sms.value < grid[0]:
                raise RuntimeError("%s is a stream-K kernel that needs %d resident CTAs; the device has %d SMs" % (kernel, grid[0], sms.value))
            functions.append(function)
    found = _functions[index] = (ctx, functions)
    return found
"#;

/// A kernel's argument list: each value kept alive until the launch, and a pointer to it.
const PY_ARGUMENTS: &str = r#"class _Arguments:
    """One kernel's arguments: each ctypes value kept alive, and the pointers cuLaunchKernel takes."""

    def __init__(self):
        self.keep, self.pointers = [], []

    def __call__(self, value):
        self.keep.append(value)
        self.pointers.append(ctypes.cast(ctypes.pointer(value), ctypes.c_void_p))


"#;

/// `launch` after the checks and the allocations: each kernel launched in order.
const PY_LAUNCH_KERNELS: &str = r#"    cuda = _cuda()
    ctx, functions = _load(index)
    stream = ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)
    with _Current(cuda, ctx):
        for function, arguments, (kernel, _, grid, block, smem, _, bound) in zip(functions, _ARGUMENTS, KERNELS):
            args = _Arguments()
            arguments(cuda, {parameter: buffers[tensor] for parameter, tensor in bound.items()}, values, args)
            params = (ctypes.c_void_p * len(args.pointers))(*args.pointers)
            _check(cuda.cuLaunchKernel(function, *grid, *block, smem, stream, params, None), "cuLaunchKernel (%s)" % kernel)
    return outputs[0] if len(outputs) == 1 else tuple(outputs)
"#;

/// `plan.json`: the sizes, the split (why, each kernel with its segment, scheduler, reason,
/// reads, writes, sizes, index type, launch and plan), the run's tensors and the twin.
fn plan_json(
    e: &Exported,
    fusion: &Fusion,
    twin: &hopfuse::backend::torch::Twin,
) -> Result<String, String> {
    let kernels: Vec<serde_json::Value> = e
        .parts
        .iter()
        .zip(&e.split.segments)
        .map(|(p, seg)| {
            serde_json::json!({
                "segment": seg.name,
                "kernel": p.compiled.compilation.plan.kernel_name,
                "scheduler": seg.scheduler,
                "reason": seg.reason,
                "reads": seg.reads,
                "writes": seg.writes,
                "cubin": format!("{}.cubin", p.name),
                "sizes": p.compiled.sizes,
                "index_type": p.compiled.setup.index_type,
                "launch": p.compiled.setup.launch,
                "plan": p.compiled.compilation.plan,
            })
        })
        .collect();
    let tensors: Vec<serde_json::Value> = e
        .run
        .iter()
        .map(|r| {
            serde_json::json!({
                "name": r.key,
                "dtype": r.arg.dtype,
                "shape": r.arg.shape,
                "bytes": r.arg.bytes(),
                "role": r.python_role(),
            })
        })
        .collect();
    serde_json::to_string_pretty(&serde_json::json!({
        "sizes": e.sizes,
        "fusion": fusion.name,
        "reason": e.split.reason,
        "kernels": kernels,
        "tensors": tensors,
        "torch_twin": {
            "module": format!("{}_torch", e.name),
            "function": twin.function,
            "arguments": fusion
                .inputs
                .iter()
                .map(|&t| fusion.tensors[t].name.as_str())
                .collect::<Vec<_>>(),
        },
    }))
    .map_err(|e| e.to_string())
}

fn readme(e: &Exported, twin: &str) -> String {
    let name = e.name;
    let mut s = String::new();
    let w = &mut s;
    let _ = writeln!(w, "# {name}: exported by hopfuse\n");
    let _ = writeln!(
        w,
        "Fusion {}. Nothing here needs Rust or hopfuse at run time.\n\nNo scheduler takes it whole ({}), so it runs as {} kernels in order:\n",
        e.header,
        e.split.reason.trim_end_matches('.'),
        e.parts.len()
    );
    for (k, (p, seg)) in e.parts.iter().zip(&e.split.segments).enumerate() {
        let _ = writeln!(
            w,
            "{}. `{}` ({}; reads {}, writes {}): {}.",
            k + 1,
            p.compiled.compilation.plan.kernel_name,
            seg.scheduler,
            seg.reads.join(", "),
            seg.writes.join(", "),
            seg.reason.trim_end_matches('.')
        );
    }
    let _ = writeln!(
        w,
        "\n| tensor | dtype and shape | role |\n| --- | --- | --- |"
    );
    for r in e.run {
        let _ = writeln!(
            w,
            "| `{}` | {} | {} |",
            r.key,
            r.arg.declared(),
            r.role_text()
        );
    }
    let scalars: Vec<String> = e
        .scalars
        .iter()
        .map(|&(n, dtype, default)| {
            format!(
                "`{n}` ({}{})",
                dtype.name(),
                default
                    .map(|v| format!(", default {}", python_literal(dtype, v)))
                    .unwrap_or_default()
            )
        })
        .collect();
    if !scalars.is_empty() {
        let _ = writeln!(w, "\nScalars: {}.", scalars.join(", "));
    }
    let kernels: Vec<String> = e.parts.iter().map(|p| format!("`{}`", p.name)).collect();
    let _ = writeln!(
        w,
        "\n## Files\n\n- `KERNEL.cu` and `KERNEL.cubin` for each kernel ({}): the CUDA source and NVRTC's sm_90a image of it.\n- `{name}.h`: C++ launcher on the CUDA driver API (`#include <cuda.h>`, link `-lcuda`):\n  `load(kernels, DIR)` loads every `KERNEL.cubin` in DIR into the current context, then\n  `launch(kernels, stream, <the inputs' and outputs' device pointers in the table's order>, <scalars>)`\n  allocates the other tensors on the stream, runs the kernels in order and frees them.\n- `{name}_main.cpp`: runs it once on inputs read from raw files:\n  `g++ -std=c++17 -I$CUDA_HOME/include {name}_main.cpp -lcuda -o {name}_main && ./{name}_main . DIR`\n  reads `DIR/<input>.bin`, writes `DIR/<output>.out.bin`.\n- `{name}.py`: Python launcher on torch tensors (torch + the driver through ctypes):\n  `import {name}; out = {name}.launch(...)` runs the kernels in order on torch's current stream.\n- `{name}_torch.py`: the fusion in PyTorch (function `{twin}`), to compare with.\n- `plan.json`: the sizes, each kernel's launch plan, the tensors of the run.\n\nThe kernels are specialised for these sizes; the launchers refuse other shapes. Export again\nfor other sizes (`hopfuse export FILE --size ... --out DIR`).",
        kernels.join(", ")
    );
    s
}
