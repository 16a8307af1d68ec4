//! A kernel taken out of hopfuse (`hopfuse export`): for a program compiled for its sizes
//! ([`crate::specialize::compile_for_sizes`]) and its CUBIN, the files that launch it with
//! neither Rust nor hopfuse at run time:
//!
//! - `NAME.cu`, the CUDA source, and `NAME.cubin`, NVRTC's `sm_90a` image of it;
//! - `NAME.h`, a C++ launcher on the CUDA driver API alone (`#include <cuda.h>`, `-lcuda`):
//!   `load` reads the CUBIN into the current context (and opts in to the kernel's dynamic
//!   shared memory), `launch` encodes the TMA tensor maps from the buffers' addresses and calls
//!   `cuLaunchKernel` on the caller's stream;
//! - `NAME_main.cpp`, a program on that launcher: it reads each input from a raw file,
//!   launches once and writes each output to a raw file (how to call it, and the test's way in);
//! - `NAME.py`, a Python launcher on torch tensors (torch and the driver through ctypes): checks
//!   dtypes, shapes, placement and alignment, allocates the outputs, launches on torch's current
//!   stream in torch's context;
//! - `NAME_torch.py`, the fusion as PyTorch code (the playground's twin), to check it against;
//! - `plan.json` and `README.md`.
//!
//! The kernel is specialised for the sizes it was exported with (its index type, aligned
//! vector accesses, the plan's checks); the launchers refuse other shapes. The tensor maps'
//! arguments come from [`crate::tensor_map::encode_args`], the runner's own, so the exported
//! encodings are the ones the runner validated.
//!
//! A fusion split into several kernels is exported by [`export_split`] (`split.rs`), from the
//! same pieces: each kernel's launch functions, the C++ main and the Python launcher's checks.

use crate::specialize::Setup;
use crate::tensor_map::{encode_args, EncodeArgs};
use cudarc::driver::sys;
use hopfuse::plan::{LaunchPlan, Param, TensorRole};
use hopfuse::{Compilation, DType, IndexType};
use std::collections::BTreeMap;
use std::fmt::Write;

mod split;
pub use split::export_split;

/// One file of an export: its name in the output directory and its bytes.
pub struct ExportFile {
    pub name: String,
    pub bytes: Vec<u8>,
}

/// The launch's numbers as the generated launchers state them.
struct Launch {
    grid: [u32; 3],
    block: [u32; 3],
    smem: u32,
    /// A stream-K grid must be resident at once: the launchers check the device has as many SMs
    /// as CTAs (one CTA per SM always fits).
    needs_resident: bool,
}

/// What both launchers are written from.
#[derive(Clone, Copy)]
struct Kernel<'a> {
    plan: &'a LaunchPlan,
    /// The kernel's name as a C identifier: the files' stem, the C++ namespace's suffix.
    name: &'a str,
    /// What was exported, from where, for which sizes (the files' first line).
    header: &'a str,
    sizes: &'a BTreeMap<String, i64>,
    index: IndexType,
    tensors: &'a [TensorArg<'a>],
    launch: &'a Launch,
    args: &'a [LaunchArg<'a>],
}

/// A tensor parameter of the kernel, concrete.
struct TensorArg<'a> {
    name: &'a str,
    dtype: DType,
    role: TensorRole,
    shape: Vec<i64>,
}

impl TensorArg<'_> {
    fn bytes(&self) -> i64 {
        self.shape.iter().product::<i64>() * i64::from(self.dtype.size_bytes())
    }

    fn declared(&self) -> String {
        let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        format!("{}[{}]", self.dtype.name(), dims.join(", "))
    }
}

fn role_name(r: TensorRole) -> &'static str {
    match r {
        TensorRole::Input => "input",
        TensorRole::Output => "output",
        TensorRole::Scratch => "scratch (allocated, contents free)",
        TensorRole::Workspace => "workspace (zeroed once; the kernel leaves it zeroed)",
    }
}

/// The C++ type a scalar parameter is passed as: what the kernel declares, its compute type.
fn scalar_cpp(d: DType) -> &'static str {
    d.compute().cuda()
}

/// The ctypes type of a scalar parameter (its compute type) and the Python conversion its
/// value takes first.
fn scalar_ctypes(d: DType) -> (&'static str, &'static str) {
    match d.compute() {
        DType::F64 => ("ctypes.c_double", "float"),
        DType::I64 => ("ctypes.c_int64", "int"),
        DType::I32 => ("ctypes.c_int32", "int"),
        DType::I8 => ("ctypes.c_int8", "int"),
        DType::U8 => ("ctypes.c_uint8", "int"),
        DType::Bool => ("ctypes.c_bool", "bool"),
        // compute() gives f32 for every narrower float.
        DType::F32 | DType::BF16 | DType::F16 | DType::F8E4M3 | DType::F8E5M2 => {
            ("ctypes.c_float", "float")
        }
    }
}

/// A C++ literal of a scalar value of type `d` (`<cmath>`'s macros where not finite).
fn scalar_literal(d: DType, v: f64) -> String {
    match d.compute() {
        DType::I64 | DType::I32 | DType::I8 | DType::U8 => format!("{}", v as i64),
        DType::Bool => (v != 0.0).to_string(),
        _ if v.is_nan() => "NAN".into(),
        _ if v.is_infinite() => format!("{}HUGE_VAL", if v < 0.0 { "-" } else { "" }),
        DType::F64 => format!("{v:?}"),
        _ => format!("{:?}f", v as f32),
    }
}

/// A Python literal of a scalar value of type `d`: an f32 value written as its shortest f32
/// form (`1e-6`, not the f64 expansion of the rounded value).
fn python_literal(d: DType, v: f64) -> String {
    match d.compute() {
        DType::I64 | DType::I32 | DType::I8 | DType::U8 => format!("{}", v as i64),
        DType::Bool => if v != 0.0 { "True" } else { "False" }.into(),
        _ if !v.is_finite() => format!("float({:?})", v.to_string()),
        DType::F64 => format!("{v:?}"),
        _ => format!("{:?}", v as f32),
    }
}

fn c_identifier(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The files of an export of `compilation` (compiled for `sizes`, launched as `setup` says)
/// with its CUBIN; `source_name` is what the program was read from (for the files' headers).
pub fn export(
    compilation: &Compilation,
    setup: &Setup,
    sizes: &BTreeMap<String, i64>,
    cubin: &[u8],
    torch_twin: &hopfuse::backend::torch::Twin,
    source_name: &str,
) -> Result<Vec<ExportFile>, String> {
    let plan = &compilation.plan;
    let name = c_identifier(&plan.kernel_name);
    let (tensors, args, launch) = kernel_parts(plan, setup, sizes)?;
    let sizes_text = sizes
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let header = format!(
        "`{}` from {source_name} for {sizes_text} ({} indices), sm_90a",
        plan.kernel_name,
        setup.index_type.cuda()
    );
    let plan_json = serde_json::to_string_pretty(&serde_json::json!({
        "sizes": sizes,
        "index_type": setup.index_type,
        "launch": setup.launch,
        "plan": plan,
        "torch_twin": {
            "module": format!("{name}_torch"),
            "function": torch_twin.function,
            "arguments": compilation
                .fusion
                .inputs
                .iter()
                .map(|&t| compilation.fusion.tensors[t].name.as_str())
                .collect::<Vec<_>>(),
        },
    }))
    .map_err(|e| e.to_string())?;
    let kernel = Kernel {
        plan,
        name: &name,
        header: &header,
        sizes,
        index: setup.index_type,
        tensors: &tensors,
        launch: &launch,
        args: &args,
    };
    let file = |n: String, text: String| ExportFile {
        name: n,
        bytes: text.into_bytes(),
    };
    Ok(vec![
        file(format!("{name}.cu"), compilation.cuda.clone()),
        ExportFile {
            name: format!("{name}.cubin"),
            bytes: cubin.to_vec(),
        },
        file(format!("{name}.h"), cpp_launcher(&kernel)),
        file(
            format!("{name}_main.cpp"),
            cpp_main(&MainProgram {
                name: &name,
                what: "kernel",
                header: &header,
                cubin_arg: "CUBIN",
                cubin_example: &format!("{name}.cubin"),
                loaded: "Kernel",
                tensors: &tensors,
                scalars: scalars(&args).map(|(_, d, v)| (d, v)).collect(),
                ran: &plan.kernel_name,
            }),
        ),
        file(format!("{name}.py"), python_launcher(&kernel)),
        file(format!("{name}_torch.py"), torch_twin.source.clone()),
        file("plan.json".into(), plan_json),
        file(
            "README.md".into(),
            readme(&name, &header, &tensors, &args, &torch_twin.function),
        ),
    ])
}

/// A kernel's tensors with their shapes at `sizes`, its launch arguments and its launch's
/// numbers: what [`Kernel`] borrows.
fn kernel_parts<'a>(
    plan: &'a LaunchPlan,
    setup: &Setup,
    sizes: &BTreeMap<String, i64>,
) -> Result<(Vec<TensorArg<'a>>, Vec<LaunchArg<'a>>, Launch), String> {
    let tensors = plan
        .tensors()
        .map(|(tensor, dtype, role, shape)| {
            let shape = shape
                .iter()
                .map(|e| e.eval(sizes))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("tensor `{tensor}`: {e}"))?;
            Ok(TensorArg {
                name: tensor,
                dtype,
                role,
                shape,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let args = launch_args(plan, sizes)?;
    let launch = Launch {
        grid: setup.launch.grid,
        block: setup.launch.block,
        smem: setup.launch.dynamic_smem_bytes,
        needs_resident: plan
            .persistent
            .as_ref()
            .is_some_and(|p| p.stream_k.is_some()),
    };
    Ok((tensors, args, launch))
}

/// One argument of the kernel's launch, in the plan's order: what both launchers pass.
enum LaunchArg<'a> {
    /// A tensor's device address.
    Buffer { name: &'a str },
    /// A size symbol's value, of the plan's index type.
    Size { symbol: &'a str },
    /// A scalar, of its compute type; the program's value is the launchers' default.
    Scalar {
        name: &'a str,
        dtype: DType,
        default: Option<f64>,
    },
    /// A TMA tensor map of `tensor`'s buffer, encoded with `encoding` (its address aside).
    TensorMap {
        name: &'a str,
        tensor: &'a str,
        encoding: EncodeArgs,
    },
}

/// The plan's parameters as launch arguments, the tensor maps' encodings computed for `sizes`.
fn launch_args<'a>(
    plan: &'a LaunchPlan,
    sizes: &BTreeMap<String, i64>,
) -> Result<Vec<LaunchArg<'a>>, String> {
    plan.params
        .iter()
        .map(|p| {
            Ok(match p {
                Param::Tensor { name, .. } => LaunchArg::Buffer { name },
                Param::Size { symbol } => LaunchArg::Size { symbol },
                Param::Scalar { name, dtype, value } => LaunchArg::Scalar {
                    name,
                    dtype: *dtype,
                    default: *value,
                },
                Param::TensorMap { name, map } => {
                    let spec = plan
                        .tensor_maps
                        .get(*map)
                        .ok_or_else(|| format!("tensor map `{name}` is missing from the plan"))?;
                    LaunchArg::TensorMap {
                        name,
                        tensor: spec.tensor.as_str(),
                        encoding: encode_args(spec, sizes, 0)?,
                    }
                }
            })
        })
        .collect()
}

/// The scalar arguments: name, type and default.
fn scalars<'a>(
    args: &'a [LaunchArg<'a>],
) -> impl Iterator<Item = (&'a str, DType, Option<f64>)> + 'a {
    args.iter().filter_map(|a| match a {
        LaunchArg::Scalar {
            name,
            dtype,
            default,
        } => Some((*name, *dtype, *default)),
        _ => None,
    })
}

/// `v`'s items separated by `, `.
fn comma_list<T: std::fmt::Display>(v: &[T]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `NAME.h`: the sizes, the tensors, the launch's numbers, `load` (with the shared-memory
/// opt-in and the residency check where the kernel needs them) and `launch`.
fn cpp_launcher(kernel: &Kernel) -> String {
    let mut w = cpp_preamble(
        "kernel",
        kernel.header,
        kernel.name,
        kernel.sizes,
        "kernel was",
    );
    w.push_str("\n// Tensor parameters: dense row-major, 16-byte aligned device buffers.\n");
    for t in kernel.tensors {
        cpp_tensor_bytes(&mut w, t.name, t, role_name(t.role));
    }
    cpp_kernel_functions(&mut w, kernel);
    let _ = writeln!(w, "\n}}  // namespace hopfuse_export_{}", kernel.name);
    w
}

/// A C++ header's first lines up to its sizes, inside `namespace hopfuse_export_NAME`: `what`
/// (`kernel`, `fusion`) `header` was generated, for the sizes the `compiled` (`kernel was`,
/// `kernels were`) compiled and checked for.
fn cpp_preamble(
    what: &str,
    header: &str,
    name: &str,
    sizes: &BTreeMap<String, i64>,
    compiled: &str,
) -> String {
    let mut w = String::new();
    let _ = write!(
        w,
        r#"// Generated by `hopfuse export`: {what} {header}.
// Needs only the CUDA driver API: #include this header, link with -lcuda.
#pragma once
#include <cuda.h>
#include <cmath>
#include <cstdio>
{string}#include <vector>

namespace hopfuse_export_{name} {{

// The sizes the {compiled} compiled and checked for.
"#,
        // A fusion's `load` builds each CUBIN's path.
        string = if what == "fusion" {
            "#include <string>\n"
        } else {
            ""
        },
    );
    for (k, v) in sizes {
        let _ = writeln!(w, "constexpr long long {k} = {v};");
    }
    w
}

/// A tensor's comment line (its key, dtype and shape, bytes and `role`) and its `KEY_BYTES`.
fn cpp_tensor_bytes(w: &mut String, key: &str, t: &TensorArg, role: &str) {
    let _ = writeln!(
        w,
        "//   {key}: {}, {} bytes, {role}\nconstexpr size_t {}_BYTES = {};",
        t.declared(),
        t.bytes(),
        c_identifier(key),
        t.bytes()
    );
}

/// One kernel's launch numbers, `Kernel`, `load` and `launch` (the namespace's sizes in scope).
fn cpp_kernel_functions(w: &mut String, kernel: &Kernel) {
    let Kernel {
        plan,
        index,
        tensors,
        launch,
        args,
        ..
    } = *kernel;
    let [gx, gy, gz] = launch.grid;
    let [bx, by, bz] = launch.block;
    let _ = write!(
        w,
        r#"
constexpr unsigned GRID[3] = {{{gx}, {gy}, {gz}}};
constexpr unsigned BLOCK[3] = {{{bx}, {by}, {bz}}};
constexpr unsigned DYNAMIC_SMEM_BYTES = {smem};

struct Kernel {{
  CUmodule module = nullptr;
  CUfunction function = nullptr;
}};

// Loads the CUBIN at `cubin_path` into the current context and finds the kernel.
inline CUresult load(Kernel& k, const char* cubin_path) {{
  FILE* f = std::fopen(cubin_path, "rb");
  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
  std::vector<char> image;
  char chunk[65536];
  for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, f)) > 0;) image.insert(image.end(), chunk, chunk + n);
  std::fclose(f);
  CUresult r = cuModuleLoadData(&k.module, image.data());
  if (r != CUDA_SUCCESS) return r;
  r = cuModuleGetFunction(&k.function, k.module, "{kernel}");
  if (r != CUDA_SUCCESS) return r;
"#,
        smem = launch.smem,
        kernel = plan.kernel_name,
    );
    if launch.smem > 48 * 1024 {
        w.push_str(
            "  r = cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, DYNAMIC_SMEM_BYTES);\n  if (r != CUDA_SUCCESS) return r;\n",
        );
    }
    if launch.needs_resident {
        w.push_str(
            r#"  // A stream-K grid: every CTA must be resident at once (one per SM always fits).
  CUdevice dev;
  int sms = 0;
  if ((r = cuCtxGetDevice(&dev)) != CUDA_SUCCESS) return r;
  if ((r = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) != CUDA_SUCCESS) return r;
  if (unsigned(sms) < GRID[0]) return CUDA_ERROR_INVALID_VALUE;
"#,
        );
    }
    w.push_str("  return CUDA_SUCCESS;\n}\n\n");

    // launch(): the tensors in the kernel's order, then the scalars. Locals and the kernel and
    // stream parameters are `hf_`-prefixed: the tensors and scalars keep the names the program
    // gives them.
    let params: Vec<String> = [
        "const Kernel& hf_kernel".into(),
        "CUstream hf_stream".into(),
    ]
    .into_iter()
    .chain(
        tensors
            .iter()
            .map(|t| format!("CUdeviceptr {}", c_identifier(t.name))),
    )
    .chain(cpp_scalar_params(&scalars(args).collect::<Vec<_>>()))
    .collect();
    let _ = writeln!(
        w,
        "// Launches the kernel on `stream`: encodes its TMA tensor maps from the buffers'\n// addresses, then cuLaunchKernel.\ninline CUresult launch({}) {{",
        params.join(", ")
    );
    let pointers: Vec<String> = args
        .iter()
        .map(|arg| cpp_launch_arg(w, arg, index))
        .collect();
    let _ = write!(
        w,
        "  void* hf_args[] = {{{}}};\n  return cuLaunchKernel(hf_kernel.function, GRID[0], GRID[1], GRID[2], BLOCK[0], BLOCK[1], BLOCK[2], DYNAMIC_SMEM_BYTES, hf_stream, hf_args, nullptr);\n}}\n",
        pointers.join(", ")
    );
}

/// The scalars as C++ parameters (name, type, the program's value as the default): a default
/// only where every later scalar has one too, as C++ requires.
fn cpp_scalar_params(scalars: &[(&str, DType, Option<f64>)]) -> Vec<String> {
    let first_default = scalars
        .iter()
        .rposition(|(_, _, default)| default.is_none())
        .map_or(0, |i| i + 1);
    scalars
        .iter()
        .enumerate()
        .map(|(i, &(n, dtype, default))| {
            let declared = format!("{} {}", scalar_cpp(dtype), c_identifier(n));
            match default {
                Some(v) if i >= first_default => {
                    format!("{declared} = {}", scalar_literal(dtype, v))
                }
                _ => declared,
            }
        })
        .collect()
}

/// One launch argument in C++: writes the local it needs (a size at the index type, an
/// encoded tensor map) and gives the pointer `cuLaunchKernel` takes.
fn cpp_launch_arg(w: &mut String, arg: &LaunchArg, index: IndexType) -> String {
    match arg {
        LaunchArg::Buffer { name } | LaunchArg::Scalar { name, .. } => {
            format!("&{}", c_identifier(name))
        }
        LaunchArg::Size { symbol } => {
            let _ = writeln!(w, "  {} hf_size_{symbol} = {symbol};", index.cuda());
            format!("&hf_size_{symbol}")
        }
        LaunchArg::TensorMap {
            name,
            tensor,
            encoding: a,
        } => {
            let var = c_identifier(name);
            // A rank-1 map has no strides; the array still needs an element.
            let strides = if a.global_strides.is_empty() {
                "0".to_string()
            } else {
                comma_list(&a.global_strides)
            };
            let _ = write!(
                w,
                r#"  alignas(64) CUtensorMap {var};
  {{
    const cuuint64_t dims[] = {{{dims}}};
    const cuuint64_t strides[] = {{{strides}}};
    const cuuint32_t box[] = {{{boxes}}};
    const cuuint32_t element_strides[] = {{{element_strides}}};
    CUresult hf_r = cuTensorMapEncodeTiled(&{var}, {:?}, {}, reinterpret_cast<void*>({}), dims, strides, box, element_strides, {:?}, {:?}, {:?}, {:?});
    if (hf_r != CUDA_SUCCESS) return hf_r;
  }}
"#,
                a.data_type,
                a.rank,
                c_identifier(tensor),
                a.interleave,
                a.swizzle,
                a.l2_promotion,
                a.oob_fill,
                dims = comma_list(&a.global_dims),
                boxes = comma_list(&a.box_dims),
                element_strides = comma_list(&a.element_strides),
            );
            format!("&{var}")
        }
    }
}

/// What `NAME_main.cpp` runs: one kernel, or a fusion's kernels in order.
struct MainProgram<'a> {
    /// The files' stem and the namespace's suffix.
    name: &'a str,
    /// `kernel` or `fusion`, as the header names what was exported.
    what: &'a str,
    header: &'a str,
    /// The program's first argument: the CUBIN, or the directory of the kernels' CUBINs.
    cubin_arg: &'a str,
    /// How the usage example names it (`NAME.cubin`, `.`).
    cubin_example: &'a str,
    /// The loaded type (`Kernel`, `Kernels`).
    loaded: &'a str,
    /// The tensors `launch` takes, in its order: the program allocates each, fills the inputs
    /// from files and writes the outputs to files.
    tensors: &'a [TensorArg<'a>],
    /// Each scalar `launch` takes, in its order: its type and the program's value.
    scalars: Vec<(DType, Option<f64>)>,
    /// What it ran, for its last line.
    ran: &'a str,
}

fn cpp_main(m: &MainProgram) -> String {
    let MainProgram {
        name,
        what,
        header,
        cubin_arg,
        cubin_example,
        loaded,
        tensors,
        ran,
        ..
    } = *m;
    let mut s = String::new();
    let w = &mut s;
    let ns = format!("hopfuse_export_{name}");
    let _ = writeln!(
        w,
        "// Generated by `hopfuse export`: runs {what} {header} once."
    );
    let _ = writeln!(
        w,
        "//   g++ -std=c++17 -I$CUDA_HOME/include {name}_main.cpp -lcuda -o {name}_main"
    );
    let _ = writeln!(w, "//   ./{name}_main {cubin_example} DIR");
    let _ = writeln!(
        w,
        "// reads each input from DIR/<tensor>.bin (raw bytes, row-major), writes each output to\n// DIR/<tensor>.out.bin. Scalars take the program's values (or 1 where it gives none)."
    );
    let _ = writeln!(
        w,
        "#include \"{name}.h\"\n#include <cstdlib>\n#include <string>\n"
    );
    let _ = writeln!(
        w,
        "#define CHECK(call) do {{ CUresult r_ = (call); if (r_ != CUDA_SUCCESS) {{ const char* s_ = nullptr; cuGetErrorName(r_, &s_); std::fprintf(stderr, \"%s failed: %s\\n\", #call, s_ ? s_ : \"?\"); return 1; }} }} while (0)\n"
    );
    let _ = writeln!(
        w,
        "static bool read_file(const std::string& path, std::vector<char>& bytes, size_t n) {{"
    );
    let _ = writeln!(
        w,
        "  FILE* f = std::fopen(path.c_str(), \"rb\");\n  if (!f) return false;"
    );
    let _ = writeln!(w, "  bytes.resize(n);\n  size_t got = std::fread(bytes.data(), 1, n, f);\n  std::fclose(f);\n  return got == n;\n}}\n");
    let _ = writeln!(w, "int main(int argc, char** argv) {{");
    let _ = writeln!(w, "  if (argc != 3) {{ std::fprintf(stderr, \"usage: %s {cubin_arg} DIR\\n\", argv[0]); return 2; }}");
    let _ = writeln!(w, "  const std::string dir = argv[2];");
    let _ = writeln!(w, "  CUdevice dev;\n  CUcontext ctx;");
    let _ = writeln!(w, "  CHECK(cuInit(0));\n  CHECK(cuDeviceGet(&dev, 0));\n  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));\n  CHECK(cuCtxSetCurrent(ctx));");
    let _ = writeln!(w, "  {ns}::{loaded} k;\n  CHECK({ns}::load(k, argv[1]));");
    let mut call = vec!["k".to_string(), "nullptr".to_string()];
    for t in tensors {
        // `t_`: a tensor may be named like a local (`dir`, `k`).
        let id = c_identifier(t.name);
        let v = format!("t_{id}");
        let _ = writeln!(
            w,
            "  CUdeviceptr {v};\n  CHECK(cuMemAlloc(&{v}, {ns}::{id}_BYTES));"
        );
        match t.role {
            TensorRole::Input => {
                let _ = writeln!(w, "  {{\n    std::vector<char> host;");
                let _ = writeln!(
                    w,
                    "    if (!read_file(dir + \"/{}.bin\", host, {ns}::{id}_BYTES)) {{ std::fprintf(stderr, \"cannot read %s/{}.bin (%zu bytes)\\n\", dir.c_str(), size_t({ns}::{id}_BYTES)); return 1; }}",
                    t.name, t.name
                );
                let _ = writeln!(
                    w,
                    "    CHECK(cuMemcpyHtoD({v}, host.data(), host.size()));\n  }}"
                );
            }
            TensorRole::Workspace => {
                let _ = writeln!(w, "  CHECK(cuMemsetD8({v}, 0, {ns}::{id}_BYTES));");
            }
            TensorRole::Output | TensorRole::Scratch => {}
        }
        call.push(v);
    }
    // Every scalar explicitly: a default in `launch` may be followed by a scalar without one.
    call.extend(
        m.scalars
            .iter()
            .map(|&(dtype, value)| scalar_literal(dtype, value.unwrap_or(1.0))),
    );
    let _ = writeln!(w, "  CHECK({ns}::launch({}));", call.join(", "));
    let _ = writeln!(w, "  CHECK(cuCtxSynchronize());");
    for t in tensors.iter().filter(|t| t.role == TensorRole::Output) {
        let id = c_identifier(t.name);
        let v = format!("t_{id}");
        let _ = writeln!(w, "  {{\n    std::vector<char> host({ns}::{id}_BYTES);");
        let _ = writeln!(w, "    CHECK(cuMemcpyDtoH(host.data(), {v}, host.size()));");
        let _ = writeln!(
            w,
            "    FILE* f = std::fopen((dir + \"/{}.out.bin\").c_str(), \"wb\");",
            t.name
        );
        let _ = writeln!(w, "    if (!f || std::fwrite(host.data(), 1, host.size(), f) != host.size()) {{ std::fprintf(stderr, \"cannot write %s/{}.out.bin\\n\", dir.c_str()); return 1; }}", t.name);
        let _ = writeln!(w, "    std::fclose(f);\n  }}");
    }
    let _ = writeln!(w, "  std::printf(\"ran {ran} once\\n\");\n  return 0;\n}}");
    s
}

/// The torch dtype of a fusion dtype (`torch.float32`).
fn torch_dtype(d: DType) -> String {
    hopfuse::backend::torch::torch_dtype(d)
}

fn python_launcher(kernel: &Kernel) -> String {
    let Kernel {
        plan,
        name,
        header,
        sizes,
        index,
        tensors,
        launch,
        args,
    } = *kernel;
    let mut w = String::new();
    let inputs: Vec<&str> = tensors
        .iter()
        .filter(|t| t.role == TensorRole::Input)
        .map(|t| t.name)
        .collect();
    let keywords: String = scalars(args).map(|(n, ..)| format!(", {n}=...")).collect();
    let sizes_dict = python_sizes_dict(sizes);
    let _ = write!(
        w,
        r#""""Kernel {header}: generated by `hopfuse export`.
Needs torch with CUDA and the NVIDIA driver; not hopfuse.

    import {name}
    outputs = {name}.launch({inputs}{keywords})

The inputs are torch CUDA tensors of the shapes in TENSORS, in that order (dense, 16-byte
aligned); scalars are keyword arguments (SCALARS: name -> default, None where the program
gives none). The outputs are allocated here and returned (a tuple when there are several). The
kernel runs on torch's current stream.
"""

import ctypes
import os

import torch

SIZES = {{{sizes_dict}}}
# (name, dtype, shape, role) of every tensor parameter, in the kernel's order.
TENSORS = [
"#,
        inputs = inputs.join(", "),
    );
    for t in tensors {
        let role = match t.role {
            TensorRole::Input => "input",
            TensorRole::Output => "output",
            TensorRole::Scratch => "scratch",
            TensorRole::Workspace => "workspace",
        };
        python_tensor_line(&mut w, t.name, t, role);
    }
    let scalars_dict = python_scalars_dict(&scalars(args).collect::<Vec<_>>());
    let [gx, gy, gz] = launch.grid;
    let [bx, by, bz] = launch.block;
    let _ = write!(
        w,
        r#"]
SCALARS = {{{scalars_dict}}}
GRID = ({gx}, {gy}, {gz})
BLOCK = ({bx}, {by}, {bz})
DYNAMIC_SMEM_BYTES = {smem}
KERNEL = {kernel:?}
CUBIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), {cubin:?})

_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = {max_smem_attribute}
_ATTRIBUTE_MULTIPROCESSOR_COUNT = {sm_count_attribute}
_driver = []
_functions = {{}}  # device index -> (context, CUfunction)

{PY_DRIVER}
{PY_LOAD_CONTEXT}{PY_LOAD}"#,
        smem = launch.smem,
        kernel = plan.kernel_name,
        cubin = format!("{name}.cubin"),
        max_smem_attribute =
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as u32,
        sm_count_attribute =
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT as u32,
    );
    if launch.smem > 48 * 1024 {
        w.push_str("        _check(cuda.cuFuncSetAttribute(function, _ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, DYNAMIC_SMEM_BYTES), \"cuFuncSetAttribute\")\n");
    }
    if launch.needs_resident {
        w.push_str(
            r#"    sms = ctypes.c_int()
    _check(cuda.cuDeviceGetAttribute(ctypes.byref(sms), _ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute")
    if sms.value < GRID[0]:
        raise RuntimeError("this stream-K kernel needs %d resident CTAs; the device has %d SMs" % (GRID[0], sms.value))
"#,
        );
    }
    w.push_str("    found = _functions[index] = (ctx, function)\n    return found\n\n\n");
    w.push_str(PY_LAUNCH);
    w.push_str(PY_CHECK_AND_ALLOCATE);
    w.push_str(PY_LAUNCH_ONE);
    let index_ctype = match index {
        IndexType::I32 => "ctypes.c_int32",
        IndexType::I64 => "ctypes.c_int64",
    };
    for arg in args {
        let _ = writeln!(w, "        arg({})", python_launch_arg(arg, index_ctype));
    }
    if args.is_empty() {
        w.push_str("        pass\n");
    }
    w.push_str(
        r#"        params = (ctypes.c_void_p * len(args))(*args)
        stream = ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)
        _check(cuda.cuLaunchKernel(function, *GRID, *BLOCK, DYNAMIC_SMEM_BYTES, stream, params, None), "cuLaunchKernel")
    return outputs[0] if len(outputs) == 1 else tuple(outputs)
"#,
    );
    w
}

/// `SIZES`' entries.
fn python_sizes_dict(sizes: &BTreeMap<String, i64>) -> String {
    sizes
        .iter()
        .map(|(k, v)| format!("{k:?}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One entry of `TENSORS`: `(key, dtype, shape, role)`.
fn python_tensor_line(w: &mut String, key: &str, t: &TensorArg, role: &str) {
    let shape: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
    let _ = writeln!(
        w,
        "    ({key:?}, {}, ({}{}), {role:?}),",
        torch_dtype(t.dtype),
        shape.join(", "),
        if t.shape.len() == 1 { "," } else { "" }
    );
}

/// `SCALARS`' entries: name -> the program's value (None where it gives none).
fn python_scalars_dict(scalars: &[(&str, DType, Option<f64>)]) -> String {
    scalars
        .iter()
        .map(|&(n, d, v)| {
            let value = v.map_or("None".to_string(), |v| python_literal(d, v));
            format!("{n:?}: {value}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One launch argument in Python: the ctypes value `arg(...)` keeps and points to.
fn python_launch_arg(arg: &LaunchArg, index_ctype: &str) -> String {
    match arg {
        LaunchArg::Buffer { name } => format!("ctypes.c_uint64(buffers[{name:?}].data_ptr())"),
        LaunchArg::Size { symbol } => format!("{index_ctype}(SIZES[{symbol:?}])"),
        LaunchArg::Scalar { name, dtype, .. } => {
            let (ctype, convert) = scalar_ctypes(*dtype);
            format!("{ctype}({convert}(values[{name:?}]))")
        }
        LaunchArg::TensorMap {
            tensor,
            encoding: a,
            ..
        } => format!(
            "_tensor_map(cuda, {}, {}, buffers[{tensor:?}].data_ptr(), {:?}, {:?}, {:?}, {:?}, {}, {}, {}, {})",
            a.data_type as u32,
            a.rank,
            a.global_dims,
            a.global_strides,
            a.box_dims,
            a.element_strides,
            a.interleave as u32,
            a.swizzle as u32,
            a.l2_promotion as u32,
            a.oob_fill as u32,
        ),
    }
}

/// The driver through ctypes: the library, error names, the current-context guard and the TMA
/// tensor map (128 bytes, 64-byte aligned).
const PY_DRIVER: &str = r#"def _cuda():
    if not _driver:
        cuda = ctypes.CDLL("libcuda.so.1")
        cuda.cuModuleGetFunction.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p]
        cuda.cuModuleLoadData.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        cuda.cuFuncSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        cuda.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
        cuda.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        cuda.cuTensorMapEncodeTiled.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
        cuda.cuTensorMapEncodeTiled.argtypes += [ctypes.c_void_p] * 4 + [ctypes.c_int] * 4
        _check(cuda.cuInit(0), "cuInit", cuda)
        _driver.append(cuda)
    return _driver[0]


def _check(result, what, cuda=None):
    if result != 0:
        cuda = cuda or _driver[0]
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(result, ctypes.byref(name))
        raise RuntimeError("%s failed: %s" % (what, (name.value or b"?").decode()))


class _Current:
    """Makes `ctx` current on this thread, putting back the one that was."""

    def __init__(self, cuda, ctx):
        self.cuda, self.ctx, self.previous = cuda, ctx, ctypes.c_void_p()

    def __enter__(self):
        _check(self.cuda.cuCtxGetCurrent(ctypes.byref(self.previous)), "cuCtxGetCurrent")
        _check(self.cuda.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def __exit__(self, *exc):
        self.cuda.cuCtxSetCurrent(self.previous)


class _TensorMap(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint8 * 192)]

    def aligned(self):
        base = ctypes.addressof(self)
        return base + (-base % 64)


def _tensor_map(cuda, dtype, rank, address, dims, strides, box, element_strides, interleave, swizzle, l2, oob):
    # The map is encoded into a 64-byte aligned 128 bytes inside a larger buffer; the kernel
    # argument is a copy of those bytes.
    scratch = _TensorMap()
    u64 = ctypes.c_uint64 * max(len(dims), 1)
    u32 = ctypes.c_uint32 * max(len(box), 1)
    _check(
        cuda.cuTensorMapEncodeTiled(
            ctypes.c_void_p(scratch.aligned()), dtype, rank, ctypes.c_void_p(address),
            u64(*dims), (ctypes.c_uint64 * max(len(strides), 1))(*strides), u32(*box), u32(*element_strides),
            interleave, swizzle, l2, oob,
        ),
        "cuTensorMapEncodeTiled",
    )
    out = (ctypes.c_uint8 * 128)()
    ctypes.memmove(out, scratch.aligned(), 128)
    return out

"#;

/// `_load(index)` up to the device's primary context (torch's), `ctx`, retained: a loaded
/// device's entry of `_functions`, else `cuda`, `dev` and `ctx`.
const PY_LOAD_CONTEXT: &str = r#"def _load(index):
    found = _functions.get(index)
    if found is not None:
        return found
    cuda = _cuda()
    ctx = ctypes.c_void_p()
    dev = ctypes.c_int()
    _check(cuda.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
    # torch's context on that device: the device's primary context.
    _check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
"#;

/// The rest of `_load(index)` up to the kernel's function: the CUBIN loaded into the context.
/// What follows depends on the kernel (`python_launcher`).
const PY_LOAD: &str = r#"    with _Current(cuda, ctx):
        with open(CUBIN, "rb") as f:
            image = f.read()
        module = ctypes.c_void_p()
        _check(cuda.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
        function = ctypes.c_void_p()
        _check(cuda.cuModuleGetFunction(ctypes.byref(function), module, KERNEL.encode()), "cuModuleGetFunction")
"#;

/// `launch(*inputs, **scalars)` up to its arguments: the inputs and scalars checked, the
/// outputs, scratch and workspace allocated ([`PY_CHECK_AND_ALLOCATE`]), `arg` to keep each
/// argument alive.
const PY_LAUNCH: &str = r#"def launch(*inputs, **scalars):
    """Runs the kernel on torch's current stream; returns the outputs."""
"#;

/// The body of `launch` that checks the inputs and scalars against `TENSORS` and `SCALARS`
/// (into `values`) and allocates every other tensor (`buffers` by name, `outputs` in order):
/// workspaces zeroed, the rest uninitialised.
const PY_CHECK_AND_ALLOCATE: &str = r#"    names = [t[0] for t in TENSORS if t[3] == "input"]
    if len(inputs) != len(names):
        raise TypeError("launch takes %d tensors (%s), got %d" % (len(names), ", ".join(names), len(inputs)))
    unknown = sorted(set(scalars) - set(SCALARS))
    if unknown:
        raise TypeError("no scalar %s (the kernel's: %s)" % (", ".join(unknown), ", ".join(SCALARS) or "none"))
    values = {}
    for name, default in SCALARS.items():
        value = scalars.get(name, default)
        if value is None:
            raise TypeError("launch needs the scalar keyword argument `%s`" % name)
        values[name] = value
    given = dict(zip(names, inputs))
    device = None
    for name, dtype, shape, role in TENSORS:
        if role != "input":
            continue
        t = given[name]
        if not isinstance(t, torch.Tensor) or not t.is_cuda:
            raise ValueError("input `%s` must be a torch CUDA tensor" % name)
        if t.dtype != dtype or tuple(t.shape) != shape:
            raise ValueError("input `%s` is %s %s; the kernel was exported for %s %s" % (name, t.dtype, list(t.shape), dtype, list(shape)))
        if not t.is_contiguous() or t.data_ptr() % 16:
            raise ValueError("input `%s` must be contiguous and 16-byte aligned" % name)
        if device is None:
            device = t.device
        elif t.device != device:
            raise ValueError("input `%s` is on %s, not %s" % (name, t.device, device))
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device())
    index = device.index if device.index is not None else torch.cuda.current_device()
    buffers, outputs = {}, []
    for name, dtype, shape, role in TENSORS:
        if role == "input":
            buffers[name] = given[name]
        elif role == "workspace":
            buffers[name] = torch.zeros(shape, dtype=dtype, device=device)
        else:
            buffers[name] = torch.empty(shape, dtype=dtype, device=device)
            if role == "output":
                outputs.append(buffers[name])
"#;

/// The one kernel's launch, up to its arguments.
const PY_LAUNCH_ONE: &str = r#"    cuda = _cuda()
    ctx, function = _load(index)
    keep = []  # the argument storage, alive until the launch returns
    args = []

    def arg(value):
        keep.append(value)
        args.append(ctypes.cast(ctypes.pointer(value), ctypes.c_void_p))

    with _Current(cuda, ctx):
"#;

fn readme(
    name: &str,
    header: &str,
    tensors: &[TensorArg],
    args: &[LaunchArg],
    twin: &str,
) -> String {
    let mut s = String::new();
    let w = &mut s;
    let _ = writeln!(w, "# {name}: exported by hopfuse\n");
    let _ = writeln!(
        w,
        "Kernel {header}. Nothing here needs Rust or hopfuse at run time.\n"
    );
    let _ = writeln!(
        w,
        "| tensor | dtype and shape | role |\n| --- | --- | --- |"
    );
    for t in tensors {
        let _ = writeln!(
            w,
            "| `{}` | {} | {} |",
            t.name,
            t.declared(),
            role_name(t.role)
        );
    }
    let scalars: Vec<String> = scalars(args)
        .map(|(name, dtype, default)| {
            format!(
                "`{name}` ({}{})",
                dtype.name(),
                default
                    .map(|v| format!(", default {v}"))
                    .unwrap_or_default()
            )
        })
        .collect();
    if !scalars.is_empty() {
        let _ = writeln!(w, "\nScalars: {}.", scalars.join(", "));
    }
    let _ = writeln!(
        w,
        "\n## Files\n\n- `{name}.cu`: the CUDA source; `{name}.cubin`: NVRTC's sm_90a image of it.\n- `{name}.h`: C++ launcher on the CUDA driver API (`#include <cuda.h>`, link `-lcuda`):\n  `load(kernel, \"{name}.cubin\")` in the current context, then\n  `launch(kernel, stream, <device pointers in the table's order>, <scalars>)`.\n- `{name}_main.cpp`: runs it once on inputs read from raw files:\n  `g++ -std=c++17 -I$CUDA_HOME/include {name}_main.cpp -lcuda -o {name}_main && ./{name}_main {name}.cubin DIR`\n  reads `DIR/<input>.bin`, writes `DIR/<output>.out.bin`.\n- `{name}.py`: Python launcher on torch tensors (torch + the driver through ctypes):\n  `import {name}; out = {name}.launch(...)` on torch's current stream.\n- `{name}_torch.py`: the fusion in PyTorch (function `{twin}`), to compare with.\n- `plan.json`: the launch plan and sizes.\n\nThe kernel is specialised for these sizes; the launchers refuse other shapes. Export again\nfor other sizes (`hopfuse export FILE --size ... --out DIR`)."
    );
    s
}
