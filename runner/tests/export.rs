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
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
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
