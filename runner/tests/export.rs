//! `hopfuse export` without a GPU: the files it writes, the C++ launcher and its program
//! compiled by g++ against the CUDA headers (scripts/setup-nvrtc.sh's), the Python launcher
//! imported on the project's torch stand-in and refusing what the kernel was not exported for.
//! Running the exported kernels is the device check's (scripts/export-device-check.sh).

mod common;

use common::{hopfuse, root, text};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn nvrtc_missing() -> bool {
    hopfuse_runner::not_run::nvrtc_missing("hopfuse export")
}

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hopfuse-export-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Exports `example` for `sizes` into a fresh directory; returns it.
fn export(example: &str, sizes: &str) -> PathBuf {
    let dir = out_dir(&example.replace('/', "_"));
    let out = hopfuse(&[
        "export",
        &format!("examples/{example}"),
        "--size",
        sizes,
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    dir
}

/// The exported kernel's file stem (`NAME` of `NAME_main.cpp`).
fn kernel_in(dir: &Path) -> String {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find_map(|n| n.strip_suffix("_main.cpp").map(str::to_string))
        .expect("a main program")
}

/// The names of the files in `dir`, sorted.
fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// g++ compiles the launcher's program (syntax and types; linking needs libcuda).
fn compiles_with_gxx(dir: &Path, kernel: &str) {
    let include = std::env::var("HOPFUSE_CUDA_INCLUDE").expect("setup-nvrtc.sh sets it");
    let out = Command::new("g++")
        .args([
            "-std=c++17",
            "-Wall",
            "-Werror",
            "-fsyntax-only",
            "-I",
            &include,
        ])
        .arg(dir.join(format!("{kernel}_main.cpp")))
        .output()
        .expect("run g++");
    assert!(out.status.success(), "g++: {}", text(&out));
}

/// Runs `code` in Python with the exported module and the torch stand-in on the path.
fn python(dir: &Path, code: &str) -> Output {
    Command::new("python3")
        .arg("-c")
        .arg(code)
        .env(
            "PYTHONPATH",
            format!(
                "{}:{}",
                dir.display(),
                root().join("runner/peers/fake_torch").display()
            ),
        )
        .output()
        .expect("run python3")
}

#[test]
fn a_pointwise_kernel_exports_every_file() {
    if nvrtc_missing() {
        return;
    }
    let dir = export("basics/add.hf", "M=1000,N=1000");
    assert_eq!(
        files_in(&dir),
        [
            "README.md",
            "add_kernel.cu",
            "add_kernel.cubin",
            "add_kernel.h",
            "add_kernel.py",
            "add_kernel_main.cpp",
            "add_kernel_torch.py",
            "plan.json"
        ]
    );
    let cubin = std::fs::read(dir.join("add_kernel.cubin")).unwrap();
    assert_eq!(&cubin[..4], b"\x7fELF", "a CUBIN is an ELF image");
    let header = read(&dir, "add_kernel.h");
    assert!(header.contains("constexpr long long M = 1000;"), "{header}");
    assert!(header.contains("inline CUresult launch(const Kernel& hf_kernel, CUstream hf_stream, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c)"), "{header}");
    // 1000 x 1000 f32 fits 32-bit indices: the size parameters are ints.
    assert!(header.contains("int hf_size_M = M;"), "{header}");
    compiles_with_gxx(&dir, "add_kernel");
    let plan: serde_json::Value = serde_json::from_str(&read(&dir, "plan.json")).unwrap();
    assert_eq!(plan["sizes"]["N"], 1000);
    assert_eq!(plan["index_type"], "i32");
    // The Python launcher refuses what it was not exported for, naming the tensor.
    let out = python(
        &dir,
        "import torch, add_kernel\n\
         a = torch.empty((1000, 1000), dtype=torch.float32, device='cuda')\n\
         b = torch.empty((1000, 999), dtype=torch.float32, device='cuda')\n\
         for args in ((a,), (a, b), (a, torch.empty((1000, 1000)))):\n\
         \x20   try:\n\
         \x20       add_kernel.launch(*args)\n\
         \x20   except (TypeError, ValueError) as e:\n\
         \x20       print(e)\n",
    );
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    assert!(
        printed.contains("launch takes 2 tensors (a, b), got 1"),
        "{printed}"
    );
    assert!(
        printed.contains("input `b` is torch.float32 [1000, 999]; the kernel was exported for torch.float32 [1000, 1000]"),
        "{printed}"
    );
    assert!(
        printed.contains("input `b` must be a torch CUDA tensor"),
        "{printed}"
    );
}

#[test]
fn a_grid_reduction_exports_its_scalar_output_and_its_workspace() {
    if nvrtc_missing() {
        return;
    }
    let dir = export("auto/total_sum.hf", "N=1000037");
    // The scalar output is a 0-d tensor of one element; the workspace is zeroed once (the
    // kernel leaves it zeroed: its last block resets the counter).
    let torch = read(&dir, "total_sum_kernel.py");
    assert!(
        torch.contains("(\"t\", torch.float32, (), \"output\"),"),
        "{torch}"
    );
    assert!(
        torch.contains("(\"hf_grid_workspace\", torch.float32, (131074,), \"workspace\"),"),
        "{torch}"
    );
    let header = read(&dir, "total_sum_kernel.h");
    assert!(header.contains("constexpr size_t t_BYTES = 4;"), "{header}");
    compiles_with_gxx(&dir, "total_sum_kernel");
}

#[test]
fn a_tma_kernel_encodes_its_tensor_maps_in_both_launchers() {
    if nvrtc_missing() {
        return;
    }
    let dir = export("tma/add_2d.hf", "M=512,N=1024");
    let kernel = kernel_in(&dir);
    let header = read(&dir, &format!("{kernel}.h"));
    assert_eq!(
        header.matches("cuTensorMapEncodeTiled(").count(),
        2,
        "{header}"
    );
    assert!(
        header.contains("CU_TENSOR_MAP_DATA_TYPE_FLOAT32"),
        "{header}"
    );
    assert!(
        header.contains("const cuuint64_t dims[] = {1024, 512};"),
        "{header}"
    );
    assert!(
        header.contains("const cuuint64_t strides[] = {4096};"),
        "{header}"
    );
    compiles_with_gxx(&dir, &kernel);
    let py = read(&dir, &format!("{kernel}.py"));
    assert_eq!(py.matches("arg(_tensor_map(").count(), 2, "{py}");
    let out = python(&dir, &format!("import {kernel}"));
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn scalars_keep_the_programs_values_as_defaults() {
    if nvrtc_missing() {
        return;
    }
    let dir = export("fusions/rmsnorm.hf", "M=100");
    let header = read(&dir, "rmsnorm_kernel.h");
    assert!(header.contains("float eps = 1e-6f)"), "{header}");
    compiles_with_gxx(&dir, "rmsnorm_kernel");
    let out = python(
        &dir,
        "import rmsnorm_kernel as k\nprint(k.SCALARS)\n\
         try:\n    k.launch(None, None, scale=2.0)\nexcept TypeError as e:\n    print(e)\n",
    );
    let printed = text(&out);
    assert!(printed.contains("{'eps': 1e-06}"), "{printed}");
    assert!(
        printed.contains("no scalar scale (the kernel's: eps)"),
        "{printed}"
    );
}

#[test]
fn sizes_the_plan_refuses_are_an_error() {
    if nvrtc_missing() {
        return;
    }
    let dir = out_dir("refused");
    let out = hopfuse(&[
        "export",
        "examples/tma/add_2d.hf",
        "--size",
        "M=512,N=1023",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("the rows of the tensor must be multiples of 16 bytes"),
        "{}",
        text(&out)
    );
    assert!(!dir.exists(), "nothing is written for a refused export");
}

#[test]
fn a_tensor_core_kernel_opts_in_to_its_shared_memory() {
    if nvrtc_missing() {
        return;
    }
    let dir = export("matmul/step12_cluster_multicast.hf", "M=1920,N=4096,K=1024");
    let kernel = kernel_in(&dir);
    let header = read(&dir, &format!("{kernel}.h"));
    assert!(
        header.contains(
            "cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES"
        ),
        "{header}"
    );
    assert!(header.contains("CU_TENSOR_MAP_SWIZZLE_128B"), "{header}");
    compiles_with_gxx(&dir, &kernel);
    let py = read(&dir, &format!("{kernel}.py"));
    assert!(
        py.contains("cuFuncSetAttribute(function, _ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES"),
        "{py}"
    );
}

#[test]
fn a_split_fusion_exports_every_kernel_and_a_launcher_that_runs_them_in_order() {
    if nvrtc_missing() {
        return;
    }
    let dir = export("auto/col_norm.hf", "M=1000,N=1000");
    assert_eq!(
        files_in(&dir),
        [
            "README.md",
            "col_norm.h",
            "col_norm.py",
            "col_norm_main.cpp",
            "col_norm_s1_kernel.cu",
            "col_norm_s1_kernel.cubin",
            "col_norm_s2_kernel.cu",
            "col_norm_s2_kernel.cubin",
            "col_norm_torch.py",
            "plan.json"
        ]
    );
    for kernel in ["col_norm_s1_kernel", "col_norm_s2_kernel"] {
        let cubin = std::fs::read(dir.join(format!("{kernel}.cubin"))).unwrap();
        assert_eq!(&cubin[..4], b"\x7fELF", "{kernel}: a CUBIN is an ELF image");
    }
    let header = read(&dir, "col_norm.h");
    // The column sums between the kernels: f32[N], allocated by the launch on its stream.
    assert!(
        header.contains(
            "//   y_sum: f32[1000], 4000 bytes, intermediate: written by kernel 1, read by kernel 2\nconstexpr size_t y_sum_BYTES = 4000;"
        ),
        "{header}"
    );
    assert!(
        header.contains("inline CUresult launch(const Kernels& hf_kernels, CUstream hf_stream, CUdeviceptr x, CUdeviceptr y)"),
        "{header}"
    );
    assert!(
        header.contains(
            "  if ((hf_r = hf_buffers.alloc(&y_sum, y_sum_BYTES)) != CUDA_SUCCESS) return hf_r;"
        ),
        "{header}"
    );
    // Each kernel in its namespace, launched in order on the buffers of the run.
    let first = header
        .find("  if ((hf_r = hf_col_norm_s1::launch(hf_kernels.k1, hf_stream, x, y_sum)) != CUDA_SUCCESS) return hf_r;")
        .unwrap_or_else(|| panic!("{header}"));
    let second = header
        .find("  if ((hf_r = hf_col_norm_s2::launch(hf_kernels.k2, hf_stream, ")
        .unwrap_or_else(|| panic!("{header}"));
    assert!(first < second, "{header}");
    assert!(
        header.contains("(std::string(directory) + \"/col_norm_s2_kernel.cubin\").c_str()"),
        "{header}"
    );
    compiles_with_gxx(&dir, "col_norm");
    let main = read(&dir, "col_norm_main.cpp");
    assert!(main.contains("usage: %s CUBIN_DIR DIR"), "{main}");
    assert!(
        !main.contains("y_sum"),
        "the launch allocates the intermediate: {main}"
    );

    let plan: serde_json::Value = serde_json::from_str(&read(&dir, "plan.json")).unwrap();
    assert_eq!(plan["kernels"][0]["kernel"], "col_norm_s1_kernel");
    assert_eq!(plan["kernels"][0]["scheduler"], "outer reduction");
    assert_eq!(plan["kernels"][1]["scheduler"], "pointwise");
    assert_eq!(plan["kernels"][1]["index_type"], "i32");
    assert_eq!(plan["torch_twin"]["arguments"], serde_json::json!(["x"]));

    // The Python launcher: every tensor of the run, the kernels in order with their tensors
    // bound to the run's; it refuses what the fusion was not exported for.
    let py = read(&dir, "col_norm.py");
    assert!(
        py.contains("    (\"y_sum\", torch.float32, (1000,), \"intermediate\"),"),
        "{py}"
    );
    let out = python(
        &dir,
        "import torch, col_norm\n\
         print([t[0] + ':' + t[3] for t in col_norm.TENSORS])\n\
         print([(k[0], k[1], k[6]) for k in col_norm.KERNELS])\n\
         print(len(col_norm._ARGUMENTS))\n\
         try:\n\
         \x20   col_norm.launch(torch.empty((1000, 999), dtype=torch.float32, device='cuda'))\n\
         except ValueError as e:\n\
         \x20   print(e)\n",
    );
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    assert!(
        printed.contains("['x:input', 'y:output', 'y_sum:intermediate']"),
        "{printed}"
    );
    assert!(
        printed.contains(
            "('col_norm_s1_kernel', 'col_norm_s1_kernel.cubin', {'x': 'x', 'y_sum': 'y_sum'})"
        ),
        "{printed}"
    );
    assert!(printed.contains("\n2\n"), "{printed}");
    assert!(
        printed.contains("input `x` is torch.float32 [1000, 999]; the kernel was exported for torch.float32 [1000, 1000]"),
        "{printed}"
    );
}

#[test]
fn a_split_fusions_grid_reduction_gets_its_own_zeroed_workspace() {
    if nvrtc_missing() {
        return;
    }
    let dir = export("auto/normalize_by_total.hf", "M=1000,N=1037");
    let header = read(&dir, "normalize_by_total.h");
    // Kernel 1's workspace is its own buffer, zeroed on the stream before the kernel runs; the
    // scalar between the kernels is a one-element intermediate.
    assert!(
        header.contains("  if ((hf_r = cuMemsetD8Async(hf_k1_hf_grid_workspace, 0, hf_k1_hf_grid_workspace_BYTES, hf_stream)) != CUDA_SUCCESS) return hf_r;"),
        "{header}"
    );
    assert!(
        header.contains("constexpr size_t y_sum_BYTES = 4;"),
        "{header}"
    );
    assert!(
        header.contains("hf_normalize_by_total_s1::launch(hf_kernels.k1, hf_stream, x, y_sum, hf_k1_hf_grid_workspace)"),
        "{header}"
    );
    compiles_with_gxx(&dir, "normalize_by_total");
    let py = read(&dir, "normalize_by_total.py");
    assert!(
        py.contains("{\"x\": \"x\", \"y_sum\": \"y_sum\", \"hf_grid_workspace\": \"hf_k1_hf_grid_workspace\"}"),
        "{py}"
    );
    let out = python(&dir, "import normalize_by_total");
    assert!(out.status.success(), "{}", text(&out));
}
