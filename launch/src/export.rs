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

use crate::specialize::Setup;
use crate::tensor_map::encode_args;
use cudarc::driver::sys;
use hopfuse::plan::{LaunchPlan, Param, TensorRole};
use hopfuse::{Compilation, DType, IndexType};
use std::collections::BTreeMap;
use std::fmt::Write;

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
    torch_twin: &hopfuse::torch::Twin,
    source_name: &str,
) -> Result<Vec<ExportFile>, String> {
    let plan = &compilation.plan;
    let name = c_identifier(&plan.kernel_name);
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
    let launch = Launch {
        grid: setup.launch.grid,
        block: setup.launch.block,
        smem: setup.launch.dynamic_smem_bytes,
        needs_resident: plan
            .persistent
            .as_ref()
            .is_some_and(|p| p.stream_k.is_some()),
    };
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
        file(
            format!("{name}.h"),
            cpp_launcher(
                plan,
                &name,
                &header,
                sizes,
                setup.index_type,
                &tensors,
                &launch,
            )?,
        ),
        file(
            format!("{name}_main.cpp"),
            cpp_main(plan, &name, &header, &tensors),
        ),
        file(
            format!("{name}.py"),
            python_launcher(
                plan,
                &name,
                &header,
                sizes,
                setup.index_type,
                &tensors,
                &launch,
            )?,
        ),
        file(format!("{name}_torch.py"), torch_twin.source.clone()),
        file("plan.json".into(), plan_json),
        file(
            "README.md".into(),
            readme(plan, &name, &header, &tensors, &torch_twin.function),
        ),
    ])
}

fn cpp_launcher(
    plan: &LaunchPlan,
    name: &str,
    header: &str,
    sizes: &BTreeMap<String, i64>,
    index: IndexType,
    tensors: &[TensorArg],
    launch: &Launch,
) -> Result<String, String> {
    let mut s = String::new();
    let w = &mut s;
    let _ = writeln!(w, "// Generated by `hopfuse export`: kernel {header}.");
    let _ = writeln!(
        w,
        "// Needs only the CUDA driver API: #include this header, link with -lcuda."
    );
    let _ = writeln!(
        w,
        "#pragma once\n#include <cuda.h>\n#include <cmath>\n#include <cstdio>\n#include <vector>\n"
    );
    let _ = writeln!(w, "namespace hopfuse_export_{name} {{\n");
    let _ = writeln!(w, "// The sizes the kernel was compiled and checked for.");
    for (k, v) in sizes {
        let _ = writeln!(w, "constexpr long long {k} = {v};");
    }
    let _ = writeln!(
        w,
        "\n// Tensor parameters: dense row-major, 16-byte aligned device buffers."
    );
    for t in tensors {
        let _ = writeln!(
            w,
            "//   {}: {}, {} bytes, {}",
            t.name,
            t.declared(),
            t.bytes(),
            role_name(t.role)
        );
        let _ = writeln!(
            w,
            "constexpr size_t {}_BYTES = {};",
            c_identifier(t.name),
            t.bytes()
        );
    }
    let [gx, gy, gz] = launch.grid;
    let [bx, by, bz] = launch.block;
    let _ = writeln!(
        w,
        "\nconstexpr unsigned GRID[3] = {{{gx}, {gy}, {gz}}};\nconstexpr unsigned BLOCK[3] = {{{bx}, {by}, {bz}}};\nconstexpr unsigned DYNAMIC_SMEM_BYTES = {};\n",
        launch.smem
    );
    let _ = writeln!(
        w,
        "struct Kernel {{\n  CUmodule module = nullptr;\n  CUfunction function = nullptr;\n}};\n"
    );
    let _ = writeln!(
        w,
        "// Loads the CUBIN at `cubin_path` into the current context and finds the kernel."
    );
    let _ = writeln!(
        w,
        "inline CUresult load(Kernel& k, const char* cubin_path) {{"
    );
    let _ = writeln!(w, "  FILE* f = std::fopen(cubin_path, \"rb\");");
    let _ = writeln!(w, "  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;");
    let _ = writeln!(w, "  std::vector<char> image;");
    let _ = writeln!(w, "  char chunk[65536];");
    let _ = writeln!(
        w,
        "  for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, f)) > 0;) image.insert(image.end(), chunk, chunk + n);"
    );
    let _ = writeln!(w, "  std::fclose(f);");
    let _ = writeln!(
        w,
        "  CUresult r = cuModuleLoadData(&k.module, image.data());"
    );
    let _ = writeln!(w, "  if (r != CUDA_SUCCESS) return r;");
    let _ = writeln!(
        w,
        "  r = cuModuleGetFunction(&k.function, k.module, \"{}\");",
        plan.kernel_name
    );
    let _ = writeln!(w, "  if (r != CUDA_SUCCESS) return r;");
    if launch.smem > 48 * 1024 {
        let _ = writeln!(
            w,
            "  r = cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, DYNAMIC_SMEM_BYTES);"
        );
        let _ = writeln!(w, "  if (r != CUDA_SUCCESS) return r;");
    }
    if launch.needs_resident {
        let _ = writeln!(
            w,
            "  // A stream-K grid: every CTA must be resident at once (one per SM always fits)."
        );
        let _ = writeln!(w, "  CUdevice dev;\n  int sms = 0;");
        let _ = writeln!(
            w,
            "  if ((r = cuCtxGetDevice(&dev)) != CUDA_SUCCESS) return r;"
        );
        let _ = writeln!(
            w,
            "  if ((r = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) != CUDA_SUCCESS) return r;"
        );
        let _ = writeln!(
            w,
            "  if (unsigned(sms) < GRID[0]) return CUDA_ERROR_INVALID_VALUE;"
        );
    }
    let _ = writeln!(w, "  return CUDA_SUCCESS;\n}}\n");

    // launch(): the tensors in the kernel's order, then the scalars.
    // Locals and the kernel and stream parameters are `hf_`-prefixed: the tensors and scalars
    // keep the names the program gives them.
    let mut params = vec![
        "const Kernel& hf_kernel".to_string(),
        "CUstream hf_stream".to_string(),
    ];
    for t in tensors {
        params.push(format!("CUdeviceptr {}", c_identifier(t.name)));
    }
    for p in &plan.params {
        if let Param::Scalar {
            name: n,
            dtype,
            value,
        } = p
        {
            let mut text = format!("{} {}", scalar_cpp(*dtype), c_identifier(n));
            if let Some(v) = value {
                let _ = write!(text, " = {}", scalar_literal(*dtype, *v));
            }
            params.push(text);
        }
    }
    let _ = writeln!(
        w,
        "// Launches the kernel on `stream`: encodes its TMA tensor maps from the buffers'\n// addresses, then cuLaunchKernel."
    );
    let _ = writeln!(w, "inline CUresult launch({}) {{", params.join(", "));
    let index_cpp = index.cuda();
    let mut args = Vec::new();
    for p in &plan.params {
        match p {
            Param::Tensor { name: n, .. } => args.push(format!("&{}", c_identifier(n))),
            Param::Size { symbol } => {
                let _ = writeln!(w, "  {index_cpp} hf_size_{symbol} = {symbol};");
                args.push(format!("&hf_size_{symbol}"));
            }
            Param::Scalar { name: n, .. } => args.push(format!("&{}", c_identifier(n))),
            Param::TensorMap { name: n, map } => {
                let spec = plan
                    .tensor_maps
                    .get(*map)
                    .ok_or_else(|| format!("tensor map `{n}` is missing from the plan"))?;
                let a = encode_args(spec, sizes, 0)?;
                let var = c_identifier(n);
                let list = |v: &[u64]| {
                    v.iter()
                        .map(|x| x.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let list32 = |v: &[u32]| {
                    v.iter()
                        .map(|x| x.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let _ = writeln!(w, "  alignas(64) CUtensorMap {var};");
                let _ = writeln!(w, "  {{");
                let _ = writeln!(
                    w,
                    "    const cuuint64_t dims[] = {{{}}};",
                    list(&a.global_dims)
                );
                // A rank-1 map has no strides; the array still needs an element.
                let strides = if a.global_strides.is_empty() {
                    "0".to_string()
                } else {
                    list(&a.global_strides)
                };
                let _ = writeln!(w, "    const cuuint64_t strides[] = {{{strides}}};");
                let _ = writeln!(
                    w,
                    "    const cuuint32_t box[] = {{{}}};",
                    list32(&a.box_dims)
                );
                let _ = writeln!(
                    w,
                    "    const cuuint32_t element_strides[] = {{{}}};",
                    list32(&a.element_strides)
                );
                let _ = writeln!(
                    w,
                    "    CUresult hf_r = cuTensorMapEncodeTiled(&{var}, {:?}, {}, reinterpret_cast<void*>({}), dims, strides, box, element_strides, {:?}, {:?}, {:?}, {:?});",
                    a.data_type,
                    a.rank,
                    c_identifier(spec.tensor.as_str()),
                    a.interleave,
                    a.swizzle,
                    a.l2_promotion,
                    a.oob_fill
                );
                let _ = writeln!(w, "    if (hf_r != CUDA_SUCCESS) return hf_r;");
                let _ = writeln!(w, "  }}");
                args.push(format!("&{var}"));
            }
        }
    }
    let _ = writeln!(w, "  void* hf_args[] = {{{}}};", args.join(", "));
    let _ = writeln!(
        w,
        "  return cuLaunchKernel(hf_kernel.function, GRID[0], GRID[1], GRID[2], BLOCK[0], BLOCK[1], BLOCK[2], DYNAMIC_SMEM_BYTES, hf_stream, hf_args, nullptr);"
    );
    let _ = writeln!(w, "}}\n\n}}  // namespace hopfuse_export_{name}");
    Ok(s)
}

fn cpp_main(plan: &LaunchPlan, name: &str, header: &str, tensors: &[TensorArg]) -> String {
    let mut s = String::new();
    let w = &mut s;
    let ns = format!("hopfuse_export_{name}");
    let _ = writeln!(
        w,
        "// Generated by `hopfuse export`: runs kernel {header} once."
    );
    let _ = writeln!(
        w,
        "//   g++ -std=c++17 -I$CUDA_HOME/include {name}_main.cpp -lcuda -o {name}_main"
    );
    let _ = writeln!(w, "//   ./{name}_main {name}.cubin DIR");
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
    let _ = writeln!(w, "  if (argc != 3) {{ std::fprintf(stderr, \"usage: %s CUBIN DIR\\n\", argv[0]); return 2; }}");
    let _ = writeln!(w, "  const std::string dir = argv[2];");
    let _ = writeln!(w, "  CUdevice dev;\n  CUcontext ctx;");
    let _ = writeln!(w, "  CHECK(cuInit(0));\n  CHECK(cuDeviceGet(&dev, 0));\n  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));\n  CHECK(cuCtxSetCurrent(ctx));");
    let _ = writeln!(w, "  {ns}::Kernel k;\n  CHECK({ns}::load(k, argv[1]));");
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
    for p in &plan.params {
        if let Param::Scalar { value: None, .. } = p {
            call.push("1".into());
        }
    }
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
    let _ = writeln!(
        w,
        "  std::printf(\"ran {} once\\n\");\n  return 0;\n}}",
        plan.kernel_name
    );
    s
}

/// The torch dtype of a fusion dtype (`torch.float32`).
fn torch_dtype(d: DType) -> String {
    hopfuse::torch::torch_dtype(d)
}

fn python_launcher(
    plan: &LaunchPlan,
    name: &str,
    header: &str,
    sizes: &BTreeMap<String, i64>,
    index: IndexType,
    tensors: &[TensorArg],
    launch: &Launch,
) -> Result<String, String> {
    let mut s = String::new();
    let w = &mut s;
    let inputs: Vec<&TensorArg> = tensors
        .iter()
        .filter(|t| t.role == TensorRole::Input)
        .collect();
    let scalars: Vec<(&str, DType, Option<f64>)> = plan
        .params
        .iter()
        .filter_map(|p| match p {
            Param::Scalar { name, dtype, value } => Some((name.as_str(), *dtype, *value)),
            _ => None,
        })
        .collect();
    let input_names: Vec<&str> = inputs.iter().map(|t| t.name).collect();
    let _ = writeln!(w, "\"\"\"Kernel {header}: generated by `hopfuse export`.");
    let _ = writeln!(
        w,
        "Needs torch with CUDA and the NVIDIA driver; not hopfuse.\n"
    );
    let _ = writeln!(w, "    import {name}");
    let _ = writeln!(
        w,
        "    outputs = {name}.launch({}{})\n",
        input_names.join(", "),
        scalars
            .iter()
            .map(|(n, ..)| format!(", {n}=..."))
            .collect::<String>()
    );
    let _ = writeln!(
        w,
        "The inputs are torch CUDA tensors of the shapes in TENSORS, in that order (dense, 16-byte\naligned); scalars are keyword arguments (SCALARS: name -> default, None where the program\ngives none). The outputs are allocated here and returned (a tuple when there are several). The\nkernel runs on torch's current stream.\n\"\"\"\n"
    );
    let _ = writeln!(w, "import ctypes\nimport os\n\nimport torch\n");
    let _ = writeln!(
        w,
        "SIZES = {{{}}}",
        sizes
            .iter()
            .map(|(k, v)| format!("{k:?}: {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        w,
        "# (name, dtype, shape, role) of every tensor parameter, in the kernel's order."
    );
    let _ = writeln!(w, "TENSORS = [");
    for t in tensors {
        let role = match t.role {
            TensorRole::Input => "input",
            TensorRole::Output => "output",
            TensorRole::Scratch => "scratch",
            TensorRole::Workspace => "workspace",
        };
        let shape: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
        let _ = writeln!(
            w,
            "    ({:?}, {}, ({}{}), {role:?}),",
            t.name,
            torch_dtype(t.dtype),
            shape.join(", "),
            if t.shape.len() == 1 { "," } else { "" }
        );
    }
    let _ = writeln!(w, "]");
    let _ = writeln!(
        w,
        "SCALARS = {{{}}}",
        scalars
            .iter()
            .map(|(n, d, v)| {
                let value = v.map_or("None".to_string(), |v| python_literal(*d, v));
                format!("{n:?}: {value}")
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    let [gx, gy, gz] = launch.grid;
    let [bx, by, bz] = launch.block;
    let _ = writeln!(
        w,
        "GRID = ({gx}, {gy}, {gz})\nBLOCK = ({bx}, {by}, {bz})\nDYNAMIC_SMEM_BYTES = {}\nKERNEL = {:?}\nCUBIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), {:?})\n",
        launch.smem,
        plan.kernel_name,
        format!("{name}.cubin")
    );
    let _ = writeln!(
        w,
        "_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = {}\n_ATTRIBUTE_MULTIPROCESSOR_COUNT = {}",
        sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as u32,
        sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT as u32
    );
    let _ = writeln!(
        w,
        "_driver = []\n_functions = {{}}  # device index -> (context, CUfunction)\n"
    );
    let _ = writeln!(w, "{}", PY_DRIVER);
    let _ = writeln!(w, "def _load(index):");
    let _ = writeln!(w, "    found = _functions.get(index)");
    let _ = writeln!(w, "    if found is not None:\n        return found");
    let _ = writeln!(w, "    cuda = _cuda()");
    let _ = writeln!(w, "    ctx = ctypes.c_void_p()");
    let _ = writeln!(w, "    dev = ctypes.c_int()");
    let _ = writeln!(
        w,
        "    _check(cuda.cuDeviceGet(ctypes.byref(dev), index), \"cuDeviceGet\")"
    );
    let _ = writeln!(
        w,
        "    # torch's context on that device: the device's primary context."
    );
    let _ = writeln!(w, "    _check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), \"cuDevicePrimaryCtxRetain\")");
    let _ = writeln!(w, "    with _Current(cuda, ctx):");
    let _ = writeln!(
        w,
        "        with open(CUBIN, \"rb\") as f:\n            image = f.read()"
    );
    let _ = writeln!(w, "        module = ctypes.c_void_p()");
    let _ = writeln!(
        w,
        "        _check(cuda.cuModuleLoadData(ctypes.byref(module), image), \"cuModuleLoadData\")"
    );
    let _ = writeln!(w, "        function = ctypes.c_void_p()");
    let _ = writeln!(w, "        _check(cuda.cuModuleGetFunction(ctypes.byref(function), module, KERNEL.encode()), \"cuModuleGetFunction\")");
    if launch.smem > 48 * 1024 {
        let _ = writeln!(w, "        _check(cuda.cuFuncSetAttribute(function, _ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, DYNAMIC_SMEM_BYTES), \"cuFuncSetAttribute\")");
    }
    if launch.needs_resident {
        let _ = writeln!(w, "    sms = ctypes.c_int()");
        let _ = writeln!(w, "    _check(cuda.cuDeviceGetAttribute(ctypes.byref(sms), _ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), \"cuDeviceGetAttribute\")");
        let _ = writeln!(w, "    if sms.value < GRID[0]:");
        let _ = writeln!(w, "        raise RuntimeError(\"this stream-K kernel needs %d resident CTAs; the device has %d SMs\" % (GRID[0], sms.value))");
    }
    let _ = writeln!(
        w,
        "    found = _functions[index] = (ctx, function)\n    return found\n\n"
    );

    let _ = writeln!(w, "def launch(*inputs, **scalars):");
    let _ = writeln!(
        w,
        "    \"\"\"Runs the kernel on torch's current stream; returns the outputs.\"\"\""
    );
    let _ = writeln!(
        w,
        "    names = [t[0] for t in TENSORS if t[3] == \"input\"]"
    );
    let _ = writeln!(w, "    if len(inputs) != len(names):");
    let _ = writeln!(w, "        raise TypeError(\"launch takes %d tensors (%s), got %d\" % (len(names), \", \".join(names), len(inputs)))");
    let _ = writeln!(w, "    unknown = sorted(set(scalars) - set(SCALARS))");
    let _ = writeln!(w, "    if unknown:");
    let _ = writeln!(w, "        raise TypeError(\"no scalar %s (the kernel's: %s)\" % (\", \".join(unknown), \", \".join(SCALARS) or \"none\"))");
    let _ = writeln!(w, "    values = {{}}");
    let _ = writeln!(w, "    for name, default in SCALARS.items():");
    let _ = writeln!(w, "        value = scalars.get(name, default)");
    let _ = writeln!(w, "        if value is None:");
    let _ = writeln!(
        w,
        "            raise TypeError(\"launch needs the scalar keyword argument `%s`\" % name)"
    );
    let _ = writeln!(w, "        values[name] = value");
    let _ = writeln!(w, "    given = dict(zip(names, inputs))");
    let _ = writeln!(w, "    device = None");
    let _ = writeln!(w, "    for name, dtype, shape, role in TENSORS:");
    let _ = writeln!(w, "        if role != \"input\":\n            continue");
    let _ = writeln!(w, "        t = given[name]");
    let _ = writeln!(
        w,
        "        if not isinstance(t, torch.Tensor) or not t.is_cuda:"
    );
    let _ = writeln!(
        w,
        "            raise ValueError(\"input `%s` must be a torch CUDA tensor\" % name)"
    );
    let _ = writeln!(w, "        if t.dtype != dtype or tuple(t.shape) != shape:");
    let _ = writeln!(w, "            raise ValueError(\"input `%s` is %s %s; the kernel was exported for %s %s\" % (name, t.dtype, list(t.shape), dtype, list(shape)))");
    let _ = writeln!(w, "        if not t.is_contiguous() or t.data_ptr() % 16:");
    let _ = writeln!(w, "            raise ValueError(\"input `%s` must be contiguous and 16-byte aligned\" % name)");
    let _ = writeln!(
        w,
        "        if device is None:\n            device = t.device"
    );
    let _ = writeln!(w, "        elif t.device != device:");
    let _ = writeln!(
        w,
        "            raise ValueError(\"input `%s` is on %s, not %s\" % (name, t.device, device))"
    );
    let _ = writeln!(w, "    if device is None:\n        device = torch.device(\"cuda\", torch.cuda.current_device())");
    let _ = writeln!(
        w,
        "    index = device.index if device.index is not None else torch.cuda.current_device()"
    );
    let _ = writeln!(w, "    buffers, outputs = {{}}, []");
    let _ = writeln!(w, "    for name, dtype, shape, role in TENSORS:");
    let _ = writeln!(
        w,
        "        if role == \"input\":\n            buffers[name] = given[name]"
    );
    let _ = writeln!(w, "        elif role == \"workspace\":\n            buffers[name] = torch.zeros(shape, dtype=dtype, device=device)");
    let _ = writeln!(
        w,
        "        else:\n            buffers[name] = torch.empty(shape, dtype=dtype, device=device)"
    );
    let _ = writeln!(
        w,
        "            if role == \"output\":\n                outputs.append(buffers[name])"
    );
    let _ = writeln!(w, "    cuda = _cuda()");
    let _ = writeln!(w, "    ctx, function = _load(index)");
    let _ = writeln!(
        w,
        "    keep = []  # the argument storage, alive until the launch returns"
    );
    let _ = writeln!(w, "    args = []\n");
    let _ = writeln!(w, "    def arg(value):\n        keep.append(value)\n        args.append(ctypes.cast(ctypes.pointer(value), ctypes.c_void_p))\n");
    let _ = writeln!(w, "    with _Current(cuda, ctx):");
    let index_ctype = match index {
        IndexType::I32 => "ctypes.c_int32",
        IndexType::I64 => "ctypes.c_int64",
    };
    let mut body = 0;
    for p in &plan.params {
        body += 1;
        match p {
            Param::Tensor { name: n, .. } => {
                let _ = writeln!(w, "        arg(ctypes.c_uint64(buffers[{n:?}].data_ptr()))");
            }
            Param::Size { symbol } => {
                let _ = writeln!(w, "        arg({index_ctype}(SIZES[{symbol:?}]))");
            }
            Param::Scalar { name: n, dtype, .. } => {
                let (ctype, convert) = scalar_ctypes(*dtype);
                let _ = writeln!(w, "        arg({ctype}({convert}(values[{n:?}])))");
            }
            Param::TensorMap { name: n, map } => {
                let spec = plan
                    .tensor_maps
                    .get(*map)
                    .ok_or_else(|| format!("tensor map `{n}` is missing from the plan"))?;
                let a = encode_args(spec, sizes, 0)?;
                let _ = writeln!(
                    w,
                    "        arg(_tensor_map(cuda, {}, {}, buffers[{:?}].data_ptr(), {:?}, {:?}, {:?}, {:?}, {}, {}, {}, {}))",
                    a.data_type as u32,
                    a.rank,
                    spec.tensor,
                    a.global_dims,
                    a.global_strides,
                    a.box_dims,
                    a.element_strides,
                    a.interleave as u32,
                    a.swizzle as u32,
                    a.l2_promotion as u32,
                    a.oob_fill as u32,
                );
            }
        }
    }
    if body == 0 {
        let _ = writeln!(w, "        pass");
    }
    let _ = writeln!(w, "        params = (ctypes.c_void_p * len(args))(*args)");
    let _ = writeln!(
        w,
        "        stream = ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)"
    );
    let _ = writeln!(w, "        _check(cuda.cuLaunchKernel(function, *GRID, *BLOCK, DYNAMIC_SMEM_BYTES, stream, params, None), \"cuLaunchKernel\")");
    let _ = writeln!(
        w,
        "    return outputs[0] if len(outputs) == 1 else tuple(outputs)"
    );
    Ok(s)
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

fn readme(
    plan: &LaunchPlan,
    name: &str,
    header: &str,
    tensors: &[TensorArg],
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
    let scalars: Vec<String> = plan
        .params
        .iter()
        .filter_map(|p| match p {
            Param::Scalar { name, dtype, value } => Some(format!(
                "`{name}` ({}{})",
                dtype.name(),
                value.map(|v| format!(", default {v}")).unwrap_or_default()
            )),
            _ => None,
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
