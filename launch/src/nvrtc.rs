//! NVRTC: CUDA C++ → CUBIN for `sm_90a`, through `cudarc::nvrtc::{result, sys}`.
//!
//! cudarc's safe `compile_ptx` returns PTX only and drops the log of a successful compile, so
//! this module calls `nvrtcCreateProgram` / `nvrtcCompileProgram` / `nvrtcGetProgramLog` through
//! `cudarc::nvrtc::result` and `nvrtcGetCUBINSize` / `nvrtcGetCUBIN` through `cudarc::nvrtc::sys`.
//! Nothing here touches the driver API, so it works on a machine without a GPU.

use cudarc::nvrtc::{result, sys};
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The architecture every kernel is built for (wgmma and setmaxnreg exist only on sm_90a).
pub const ARCH: &str = "sm_90a";

/// Environment variable naming the directory that holds `cuda_fp16.h` / `cuda_bf16.h`.
pub const INCLUDE_ENV: &str = "HOPFUSE_CUDA_INCLUDE";

const SETUP_HINT: &str = "run `eval \"$(scripts/setup-nvrtc.sh)\"` (or put CUDA 13's lib64 on \
                          LD_LIBRARY_PATH)";

#[derive(Debug, thiserror::Error)]
pub enum NvrtcError {
    #[error("libnvrtc (CUDA 13) cannot be loaded: {SETUP_HINT}")]
    LibraryMissing,
    #[error("{0}")]
    Setup(String),
    #[error("NVRTC failed to compile {name} ({code}):\n{log}{hint}")]
    Compile {
        name: String,
        code: String,
        log: String,
        hint: &'static str,
    },
    #[error("NVRTC compiled {name} with warnings (warnings are errors here):\n{log}")]
    Warnings { name: String, log: String },
    #[error("NVRTC call {call} failed: {code}")]
    Call { call: &'static str, code: String },
}

/// A successful NVRTC compilation.
#[derive(Clone, Debug)]
pub struct Cubin {
    pub image: Vec<u8>,
    /// The program log (empty for a clean compile).
    pub log: String,
    /// Log lines that are warnings (ptxas warnings such as C7508 included).
    pub warnings: Vec<String>,
    pub options: Vec<String>,
    pub compile_ms: f64,
}

impl Cubin {
    /// Turns a compile that produced warnings into an error.
    pub fn deny_warnings(self, name: &str) -> Result<Cubin, NvrtcError> {
        if self.warnings.is_empty() {
            Ok(self)
        } else {
            Err(NvrtcError::Warnings {
                name: name.to_string(),
                log: self.log,
            })
        }
    }
}

/// Whether libnvrtc can be loaded (cudarc would panic on first use otherwise).
pub fn available() -> bool {
    // SAFETY: only tries to dlopen the candidate names.
    unsafe { sys::is_culib_present() }
}

/// `(major, minor)` of the loaded NVRTC.
pub fn version() -> Result<(i32, i32), NvrtcError> {
    if !available() {
        return Err(NvrtcError::LibraryMissing);
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| NvrtcError::Call {
            call: "nvrtcVersion",
            code: format!("{:?}", e.0),
        })?;
    Ok((major, minor))
}

/// The directory holding the CUDA headers NVRTC lacks (NVRTC 13.0 has no built-in
/// `cuda_fp16.h` / `cuda_bf16.h`): `$HOPFUSE_CUDA_INCLUDE`, else `$CUDA_HOME/include`,
/// `$CUDA_PATH/include`, `/usr/local/cuda/include`, the first that has `cuda_fp16.h`.
/// `$HOPFUSE_CUDA_INCLUDE` set to a directory without it is an error.
pub fn include_dir() -> Result<Option<PathBuf>, NvrtcError> {
    let has_headers =
        |dir: &Path| dir.join("cuda_fp16.h").is_file() && dir.join("cuda_bf16.h").is_file();
    if let Some(dir) = std::env::var_os(INCLUDE_ENV).filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        if !has_headers(&dir) {
            return Err(NvrtcError::Setup(format!(
                "{INCLUDE_ENV}={} has no cuda_fp16.h and cuda_bf16.h",
                dir.display()
            )));
        }
        return Ok(Some(dir));
    }
    let candidates = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).filter(|v| !v.is_empty()))
        .map(|v| PathBuf::from(v).join("include"))
        .chain(std::iter::once(PathBuf::from("/usr/local/cuda/include")));
    Ok(candidates.into_iter().find(|d| has_headers(d)))
}

/// The options every compile uses: IEEE math (no `--use_fast_math`, no flush to zero), C++17,
/// `__device__` by default, line info for compute-sanitizer reports.
pub fn options(include: Option<&Path>) -> Vec<String> {
    let mut opts = vec![
        format!("--gpu-architecture={ARCH}"),
        "-std=c++17".to_string(),
        "-default-device".to_string(),
        "-lineinfo".to_string(),
    ];
    if let Some(dir) = include {
        opts.push(format!("--include-path={}", dir.display()));
    }
    opts
}

/// Compiles `source` (named `name` in messages) to a CUBIN for [`ARCH`].
pub fn compile(source: &str, name: &str) -> Result<Cubin, NvrtcError> {
    compile_with(source, name, &[], false).map(|(cubin, _)| cubin)
}

/// ptxas reports its resource usage per kernel (registers, barriers, shared and constant
/// memory, stack frame, spills) in the program log. It changes nothing in the CUBIN.
pub const PTXAS_VERBOSE: &str = "--ptxas-options=-v";

/// [`compile`] with `extra` options after [`options`]; with `want_ptx`, also the PTX that
/// NVRTC made on the way (with `.loc` line info from `-lineinfo`).
pub fn compile_with(
    source: &str,
    name: &str,
    extra: &[&str],
    want_ptx: bool,
) -> Result<(Cubin, Option<String>), NvrtcError> {
    if !available() {
        return Err(NvrtcError::LibraryMissing);
    }
    let include = include_dir()?;
    let mut opts = options(include.as_deref());
    opts.extend(extra.iter().map(|o| o.to_string()));
    let src = CString::new(source)
        .map_err(|_| NvrtcError::Setup(format!("{name} contains a NUL byte")))?;
    let cname = CString::new(name.replace('\0', "")).expect("NULs removed");
    let call_err = |call: &'static str| {
        move |e: result::NvrtcError| NvrtcError::Call {
            call,
            code: format!("{:?}", e.0),
        }
    };

    let start = Instant::now();
    let prog =
        result::create_program(&src, Some(&cname)).map_err(call_err("nvrtcCreateProgram"))?;
    let program = Program(prog);
    // SAFETY: `prog` is live until `program` drops.
    let compiled = unsafe { result::compile_program(program.0, &opts) };
    let log =
        unsafe { result::get_program_log(program.0) }.map_err(call_err("nvrtcGetProgramLog"))?;
    let log = c_chars_to_string(&log);
    if let Err(e) = compiled {
        let hint = if log.contains("could not open source file") && include.is_none() {
            "\nhint: NVRTC 13.0 has no built-in cuda_fp16.h/cuda_bf16.h: set HOPFUSE_CUDA_INCLUDE \
             (scripts/setup-nvrtc.sh prints it) or CUDA_HOME"
        } else {
            ""
        };
        return Err(NvrtcError::Compile {
            name: name.to_string(),
            code: format!("{:?}", e.0),
            log,
            hint,
        });
    }
    let mut size = 0usize;
    // SAFETY: the program compiled; `image` has the size NVRTC reported.
    unsafe { sys::nvrtcGetCUBINSize(program.0, &mut size) }
        .result()
        .map_err(call_err("nvrtcGetCUBINSize"))?;
    let mut image = vec![0u8; size];
    unsafe { sys::nvrtcGetCUBIN(program.0, image.as_mut_ptr().cast()) }
        .result()
        .map_err(call_err("nvrtcGetCUBIN"))?;
    let ptx = if want_ptx {
        // SAFETY: the program compiled and is live.
        let raw = unsafe { result::get_ptx(program.0) }.map_err(call_err("nvrtcGetPTX"))?;
        Some(c_chars_to_string(&raw))
    } else {
        None
    };
    let compile_ms = start.elapsed().as_secs_f64() * 1e3;
    if image.is_empty() {
        return Err(NvrtcError::Setup(format!(
            "NVRTC produced an empty CUBIN for {name}"
        )));
    }
    let warnings = warning_lines(&log);
    Ok((
        Cubin {
            image,
            log,
            warnings,
            options: opts,
            compile_ms,
        },
        ptx,
    ))
}

/// Lines of an NVRTC log that count as warnings: front-end `warning #177-D: ...`, ptxas
/// warnings, and ptxas "Potential Performance Loss" advisories, which ptxas prints as *info*
/// (e.g. `ptxas info : (C7508) Potential Performance Loss: 'setmaxnreg' ignored; ...` or C7515,
/// wgmma serialized): the kernel still builds but not as written.
pub fn warning_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| {
            let lower = l.to_ascii_lowercase();
            lower.contains("warning") || lower.contains("potential performance loss")
        })
        .map(str::to_string)
        .collect()
}

fn c_chars_to_string(raw: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = raw.iter().map(|&c| c as u8).collect();
    match CStr::from_bytes_until_nul(&bytes) {
        Ok(s) => s.to_string_lossy().trim_end().to_string(),
        Err(_) => String::from_utf8_lossy(&bytes).trim_end().to_string(),
    }
}

struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram and destroyed once.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_found_in_logs() {
        let log = "k.cu(4): warning #177-D: variable \"unused\" was declared but never referenced\n  int unused;\n\nRemark: ...";
        assert_eq!(warning_lines(log).len(), 1);
        assert_eq!(
            warning_lines("ptxas warning : (C7508) setmaxnreg ignored").len(),
            1
        );
        assert!(warning_lines("").is_empty());
    }

    #[test]
    fn options_keep_ieee_math() {
        let opts = options(Some(Path::new("/x/include")));
        assert!(opts.contains(&"--gpu-architecture=sm_90a".to_string()));
        assert!(opts.contains(&"--include-path=/x/include".to_string()));
        assert!(!opts
            .iter()
            .any(|o| o.contains("fast_math") || o.contains("ftz")));
    }
}
