//! Launching a CUBIN's kernel on a caller's CUDA stream, in the device's *primary* context:
//! the context PyTorch (the CUDA runtime) uses, so a stream and device addresses from torch
//! are valid here. Takes a device ordinal, a CUBIN and a kernel name ([`Kernel::load`]), then
//! a [`ConcreteLaunch`], a stream handle and the kernel's parameters per launch, with the device
//! made current once by the caller ([`use_device`]). Errors are
//! messages naming the driver call; nothing here panics when there is no driver (it says so).

use cudarc::driver::result as cu;
use cudarc::driver::sys;
use hopfuse::plan::ConcreteLaunch;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Shared memory a kernel may take without opting in.
const DEFAULT_DYNAMIC_SMEM: u32 = 48 * 1024;

/// A driver error as `NAME: description` (`CUDA_ERROR_INVALID_VALUE: invalid argument`).
pub fn describe(e: &cu::DriverError) -> String {
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0));
    let text = e
        .error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{name}: {text}")
}

fn driver_err(call: &str) -> impl FnOnce(cu::DriverError) -> String + '_ {
    move |e| format!("{call}: {}", describe(&e))
}

/// Whether libcuda can be loaded (cudarc panics on first use otherwise). Asked once per
/// process: cudarc's check dlopens a list of candidate names, and the failing ones
/// (`libcuda.so` where only `libcuda.so.1` is installed, ...) each search the library path,
/// microseconds that every launch paid (issue 37's launch-overhead budget).
pub fn available() -> bool {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: only tries to dlopen the candidate names.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

/// A primary context handle (the driver's handles may be used from any thread).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Context(sys::CUcontext);
// SAFETY: a CUcontext is an opaque handle the driver lets any thread use.
unsafe impl Send for Context {}

static CONTEXTS: Mutex<Option<HashMap<i32, Context>>> = Mutex::new(None);

/// Makes device `ordinal`'s primary context current on this thread (retaining it once per
/// process, as the CUDA runtime does) until the returned guard drops, which puts back the
/// context that was current before: the caller's current device (torch's) is left as it was.
pub fn use_device(ordinal: i32) -> Result<CurrentDevice, String> {
    if !available() {
        return Err(
            "the NVIDIA driver library (libcuda.so.1) cannot be loaded: launching a kernel needs \
             an NVIDIA GPU and its driver"
                .into(),
        );
    }
    let ctx = {
        let mut contexts = CONTEXTS.lock().unwrap_or_else(|e| e.into_inner());
        let contexts = contexts.get_or_insert_with(HashMap::new);
        match contexts.get(&ordinal) {
            Some(&ctx) => ctx,
            None => {
                cu::init().map_err(driver_err("cuInit"))?;
                let dev = cu::device::get(ordinal).map_err(driver_err("cuDeviceGet"))?;
                // SAFETY: retained once and kept for the process's life.
                let ctx = Context(
                    unsafe { cu::primary_ctx::retain(dev) }
                        .map_err(driver_err("cuDevicePrimaryCtxRetain"))?,
                );
                contexts.insert(ordinal, ctx);
                ctx
            }
        }
    };
    let previous = cu::ctx::get_current().map_err(driver_err("cuCtxGetCurrent"))?;
    if previous == Some(ctx.0) {
        return Ok(CurrentDevice {
            ordinal,
            previous: None,
        });
    }
    // SAFETY: a live primary context.
    unsafe { cu::ctx::set_current(ctx.0) }.map_err(driver_err("cuCtxSetCurrent"))?;
    Ok(CurrentDevice {
        ordinal,
        previous: Some(previous.unwrap_or(std::ptr::null_mut())),
    })
}

/// The context [`use_device`] replaced, put back on drop (`None`: nothing was replaced).
pub struct CurrentDevice {
    ordinal: i32,
    previous: Option<sys::CUcontext>,
}

impl Drop for CurrentDevice {
    fn drop(&mut self) {
        if let Some(previous) = self.previous {
            // SAFETY: the context that was current (or none) when the guard was made.
            let _ = unsafe { cu::ctx::set_current(previous) };
        }
    }
}

/// A loaded kernel. The module stays loaded for the process's life (a program's
/// specializations are few, and torch may still run work that uses it).
pub struct Kernel {
    function: sys::CUfunction,
    /// The device whose primary context holds the module.
    ordinal: i32,
    /// The dynamic shared memory the kernel has opted in to so far.
    smem_opt_in: AtomicU32,
    pub name: String,
}

// SAFETY: CUmodule / CUfunction handles may be used from any thread; the opt-in is atomic.
unsafe impl Send for Kernel {}
unsafe impl Sync for Kernel {}

impl Kernel {
    /// Loads `cubin` into device `ordinal`'s primary context and finds `name` in it.
    pub fn load(ordinal: i32, cubin: &[u8], name: &str) -> Result<Kernel, String> {
        let _current = use_device(ordinal)?;
        // SAFETY: `cubin` is an image NVRTC made; the driver copies it.
        let module = unsafe { cu::module::load_data(cubin.as_ptr().cast()) }
            .map_err(driver_err("cuModuleLoadData (loading the CUBIN)"))?;
        let cname = std::ffi::CString::new(name)
            .map_err(|_| format!("kernel name `{name}` has a NUL byte"))?;
        // SAFETY: a module just loaded.
        let function = unsafe { cu::module::get_function(module, cname) }
            .map_err(driver_err("cuModuleGetFunction"))?;
        Ok(Kernel {
            function,
            ordinal,
            smem_opt_in: AtomicU32::new(DEFAULT_DYNAMIC_SMEM),
            name: name.to_string(),
        })
    }

    /// Launches on `stream` (a `CUstream` handle, 0 for the legacy default stream) of the
    /// kernel's device, made current by the caller (`on`, so that a launch asks the driver for
    /// the current context once); `params` must match the kernel's parameters (built by
    /// [`crate::args::PlanArgs`] from the plan the kernel was emitted with).
    pub fn launch(
        &self,
        on: &CurrentDevice,
        launch: &ConcreteLaunch,
        stream: u64,
        params: &mut [*mut std::ffi::c_void],
    ) -> Result<(), String> {
        if on.ordinal != self.ordinal {
            return Err(format!(
                "kernel `{}` is loaded on device {}, not on device {}",
                self.name, self.ordinal, on.ordinal
            ));
        }
        let smem = launch.dynamic_smem_bytes;
        if smem > self.smem_opt_in.load(Ordering::Relaxed) {
            // SAFETY: a live function; the attribute takes a byte count.
            unsafe {
                cu::function::set_function_attribute(
                    self.function,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    smem as i32,
                )
            }
            .map_err(driver_err(
                "raising the kernel's dynamic shared memory limit",
            ))?;
            self.smem_opt_in.fetch_max(smem, Ordering::Relaxed);
        }
        let [gx, gy, gz] = launch.grid;
        let [bx, by, bz] = launch.block;
        // SAFETY: the caller built `params` for this kernel's parameters from its plan, with
        // device addresses of live tensors of the plan's sizes.
        unsafe {
            cu::launch_kernel(
                self.function,
                (gx, gy, gz),
                (bx, by, bz),
                smem,
                stream as sys::CUstream,
                params,
            )
        }
        .map_err(driver_err("cuLaunchKernel"))
    }
}
