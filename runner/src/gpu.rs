//! The driver-API side of a run, through cudarc's safe `driver` layer (context, stream, module,
//! function, events, device buffers) plus `cudarc::driver::result` where the safe layer has no
//! call (raw `cuLaunchKernel` with a parameter array, `cuMemsetD8Async`, `cuMemcpyDtoDAsync`).
//!
//! The context runs with cudarc's event tracking off: one stream does everything, and the
//! tracking events would otherwise be recorded between a kernel and its timing event.

use cudarc::driver::result as cu;
use cudarc::driver::sys::{self, CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DriverError,
};
use hopfuse_api::run::{RunError, Stage};
use std::sync::Arc;

// Defined in `hopfuse-api` (they are part of every run's result).
pub use hopfuse_api::run::{DeviceInfo, KernelAttributes, Timing};

pub(crate) fn cuda_err(what: impl std::fmt::Display) -> impl FnOnce(DriverError) -> RunError {
    move |e| {
        RunError::new(
            Stage::Cuda,
            format!("{what}: {}", hopfuse_launch::driver::describe(&e)),
        )
    }
}

/// Device 0 with one stream.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub info: DeviceInfo,
}

/// How many GPUs this process sees (`CUDA_VISIBLE_DEVICES` applied); 0 without a driver.
pub fn visible_count() -> usize {
    // SAFETY: only tries to dlopen the driver library.
    if !unsafe { sys::is_culib_present() } {
        return 0;
    }
    CudaContext::device_count()
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0)
}

/// The `CUDA_VISIBLE_DEVICES` that gives a worker the `index`-th GPU this process sees: the
/// `index`-th entry of this process's own `CUDA_VISIBLE_DEVICES` (`parent`) when it has one (an
/// index, a UUID or a MIG name), else the index itself.
pub fn visible_device(index: usize, parent: Option<&str>) -> String {
    parent
        .and_then(|list| list.split(',').map(str::trim).nth(index))
        .filter(|d| !d.is_empty())
        .map_or_else(|| index.to_string(), str::to_string)
}

impl Gpu {
    pub fn open() -> Result<Gpu, RunError> {
        // SAFETY: only tries to dlopen the driver library.
        if !unsafe { sys::is_culib_present() } {
            return Err(RunError::new(
                Stage::Cuda,
                "no NVIDIA GPU driver: the driver library (libcuda.so.1) cannot be loaded",
            ));
        }
        let ctx = CudaContext::new(0).map_err(cuda_err("opening device 0"))?;
        // SAFETY: called before any buffer or stream of this context exists.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(cuda_err("creating a stream"))?;
        let attr =
            |a: CUdevice_attribute| ctx.attribute(a).map_err(cuda_err("cuDeviceGetAttribute"));
        let mut driver_version = 0;
        // SAFETY: plain out-parameter.
        unsafe { sys::cuDriverGetVersion(&mut driver_version) }
            .result()
            .map_err(cuda_err("cuDriverGetVersion"))?;
        let info = DeviceInfo {
            name: ctx.name().map_err(cuda_err("cuDeviceGetName"))?,
            compute_capability: ctx
                .compute_capability()
                .map_err(cuda_err("compute capability"))?,
            sm_count: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            l2_bytes: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?.max(0) as u64,
            max_dynamic_smem_optin: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )?
            .max(0) as u32,
            driver_version,
            total_memory_bytes: ctx.total_mem().map_err(cuda_err("cuDeviceTotalMem"))? as u64,
            // kHz; deprecated in CUDA 13, so a driver without it only loses the report's maximum.
            max_sm_clock_mhz: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)
                .ok()
                .filter(|&khz| khz > 0)
                .map(|khz| (khz / 1000) as u32),
        };
        if info.compute_capability != (9, 0) {
            return Err(RunError::new(
                Stage::Cuda,
                format!(
                    "device 0 ({}) is sm_{}{}; kernels are built for sm_90a and need a Hopper (H100/H200) GPU",
                    info.name, info.compute_capability.0, info.compute_capability.1
                ),
            ));
        }
        Ok(Gpu { ctx, stream, info })
    }

    /// Loads a CUBIN and looks up one `extern "C"` kernel of it.
    pub fn load(&self, cubin: Vec<u8>, kernel: &str) -> Result<CudaFunction, RunError> {
        self.load_module(cubin, kernel).map(|(_, f)| f)
    }

    /// [`Gpu::load`], with the module (for its globals, e.g. a clock probe).
    pub fn load_module(
        &self,
        cubin: Vec<u8>,
        kernel: &str,
    ) -> Result<(Arc<CudaModule>, CudaFunction), RunError> {
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
            .map_err(cuda_err("cuModuleLoadData (loading the CUBIN)"))?;
        let func = module
            .load_function(kernel)
            .map_err(cuda_err(format!("cuModuleGetFunction `{kernel}`")))?;
        Ok((module, func))
    }

    /// Free and total device memory in bytes.
    pub fn memory(&self) -> Result<(u64, u64), RunError> {
        let (free, total) = self.ctx.mem_get_info().map_err(cuda_err("cuMemGetInfo"))?;
        Ok((free as u64, total as u64))
    }

    /// A device buffer of at least one byte holding `bytes`.
    pub fn upload(&self, bytes: &[u8]) -> Result<CudaSlice<u8>, RunError> {
        let mut buf = self.alloc(bytes.len() as u64)?;
        if !bytes.is_empty() {
            self.stream
                .memcpy_htod(bytes, &mut buf)
                .map_err(cuda_err("cuMemcpyHtoD"))?;
        }
        Ok(buf)
    }

    /// An uninitialised device buffer of `bytes` (at least 1) bytes.
    pub fn alloc(&self, bytes: u64) -> Result<CudaSlice<u8>, RunError> {
        let len = usize::try_from(bytes.max(1)).map_err(|_| {
            RunError::new(Stage::Cuda, format!("{bytes} bytes do not fit this host"))
        })?;
        // SAFETY: u8 has no invalid bit patterns; every buffer is written before it is read.
        unsafe { self.stream.alloc::<u8>(len) }
            .map_err(cuda_err(format!("allocating {bytes} bytes")))
    }

    pub fn download(&self, buf: &CudaSlice<u8>, bytes: usize) -> Result<Vec<u8>, RunError> {
        let mut host = vec![0u8; buf.len()];
        self.stream
            .memcpy_dtoh(buf, &mut host)
            .map_err(cuda_err("cuMemcpyDtoH"))?;
        self.sync("downloading outputs")?;
        host.truncate(bytes);
        Ok(host)
    }

    pub fn copy(
        &self,
        dst: &CudaSlice<u8>,
        src: &CudaSlice<u8>,
        bytes: usize,
    ) -> Result<(), RunError> {
        // SAFETY: both buffers hold at least `bytes` bytes and belong to this context.
        unsafe {
            cu::memcpy_dtod_async(
                ptr(dst, &self.stream),
                ptr(src, &self.stream),
                bytes,
                self.stream.cu_stream(),
            )
        }
        .map_err(cuda_err("cuMemcpyDtoDAsync"))
    }

    pub fn memset(&self, buf: &CudaSlice<u8>, value: u8) -> Result<(), RunError> {
        // SAFETY: the whole buffer belongs to this context.
        unsafe {
            cu::memset_d8_async(
                ptr(buf, &self.stream),
                value,
                buf.len(),
                self.stream.cu_stream(),
            )
        }
        .map_err(cuda_err("cuMemsetD8Async"))
    }

    pub fn sync(&self, what: &str) -> Result<(), RunError> {
        self.stream
            .synchronize()
            .map_err(cuda_err(format!("synchronizing after {what}")))
    }

    /// Launches `func` with the argument pointers of `args`.
    pub fn launch(
        &self,
        func: &CudaFunction,
        launch: &hopfuse::plan::ConcreteLaunch,
        args: &mut KernelArgs,
    ) -> Result<(), RunError> {
        let [gx, gy, gz] = launch.grid;
        let [bx, by, bz] = launch.block;
        // SAFETY: the argument slots match the kernel's parameters in order and type (the launch
        // plan says so); every pointer slot holds a live device buffer of the tensor's size.
        unsafe {
            cu::launch_kernel(
                func.cu_function(),
                (gx, gy, gz),
                (bx, by, bz),
                launch.dynamic_smem_bytes,
                self.stream.cu_stream(),
                args.pointers(),
            )
        }
        .map_err(cuda_err("cuLaunchKernel"))
    }

    /// Runs `op(k)` `warmup` times, then `iters` times between a pair of events each, with
    /// `before()` enqueued (untimed) ahead of every run. A spin kernel holds the stream first so
    /// that the host enqueues everything before the GPU starts and no host latency lands
    /// between an event pair.
    pub fn time(
        &self,
        spin: Option<&Spin>,
        warmup: u32,
        iters: u32,
        before: impl FnMut() -> Result<(), RunError>,
        op: impl FnMut(u64) -> Result<(), RunError>,
    ) -> Result<Timing, RunError> {
        let us = self.time_samples(spin, warmup, iters, before, op)?;
        Timing::from_samples(us)
            .ok_or_else(|| RunError::new(Stage::Cuda, "no valid timing samples"))
    }

    /// [`Gpu::time`]'s samples, in microseconds, in launch order (several rounds of them make
    /// one timing when the kernel is timed interleaved with its torch peers).
    pub fn time_samples(
        &self,
        spin: Option<&Spin>,
        warmup: u32,
        iters: u32,
        mut before: impl FnMut() -> Result<(), RunError>,
        mut op: impl FnMut(u64) -> Result<(), RunError>,
    ) -> Result<Vec<f64>, RunError> {
        let event = || {
            self.ctx
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(cuda_err("cuEventCreate"))
        };
        let events: Vec<(CudaEvent, CudaEvent)> = (0..iters)
            .map(|_| Ok((event()?, event()?)))
            .collect::<Result<_, RunError>>()?;
        if let Some(spin) = spin {
            // About 20 us of host work per enqueued run, at most 200 ms.
            let ns = ((warmup as u64 + iters as u64) * 20_000 + 1_000_000).min(200_000_000);
            spin.hold(self, ns)?;
        }
        let mut k = 0u64;
        for _ in 0..warmup {
            before()?;
            op(k)?;
            k += 1;
        }
        for (start, end) in &events {
            before()?;
            start
                .record(&self.stream)
                .map_err(cuda_err("cuEventRecord"))?;
            op(k)?;
            end.record(&self.stream)
                .map_err(cuda_err("cuEventRecord"))?;
            k += 1;
        }
        self.sync("the timed runs")?;
        let mut us = Vec::with_capacity(events.len());
        for (start, end) in &events {
            us.push(
                start
                    .elapsed_ms(end)
                    .map_err(cuda_err("cuEventElapsedTime"))? as f64
                    * 1e3,
            );
        }
        Ok(us)
    }
}

/// One side of [`Gpu::time_pairs`]: untimed work before each launch (an L2 flush) and the
/// timed launch `op(k)`.
pub struct TimedOp<'a> {
    pub before: &'a mut dyn FnMut() -> Result<(), RunError>,
    pub op: &'a mut dyn FnMut(u64) -> Result<(), RunError>,
}

impl Gpu {
    /// Interleaved timing of two operations (an A/B comparison): `warmup` untimed pairs, then
    /// `iters` timed pairs; pair k runs `a(k)` then `b(k)` for even k and `b(k)` then `a(k)`
    /// for odd k (so neither always goes first), each between its own pair of events and each
    /// preceded (untimed) by its `before` (`before_a` / `before_b`: an L2 flush). Returns
    /// the samples of A and of B in microseconds, pair by pair. The spin kernel holds the stream
    /// while everything is enqueued, as in [`Gpu::time`].
    pub fn time_pairs(
        &self,
        spin: Option<&Spin>,
        warmup: u32,
        iters: u32,
        a: TimedOp,
        b: TimedOp,
    ) -> Result<(Vec<f64>, Vec<f64>), RunError> {
        let (before_a, a) = (a.before, a.op);
        let (before_b, b) = (b.before, b.op);
        let event = || {
            self.ctx
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(cuda_err("cuEventCreate"))
        };
        type Pair = (CudaEvent, CudaEvent);
        let events: Vec<(Pair, Pair)> = (0..iters)
            .map(|_| Ok(((event()?, event()?), (event()?, event()?))))
            .collect::<Result<_, RunError>>()?;
        if let Some(spin) = spin {
            let ns = ((warmup as u64 + iters as u64) * 40_000 + 1_000_000).min(200_000_000);
            spin.hold(self, ns)?;
        }
        let mut k = 0u64;
        for _ in 0..warmup {
            before_a()?;
            a(k)?;
            before_b()?;
            b(k)?;
            k += 1;
        }
        let timed = |before: &mut dyn FnMut() -> Result<(), RunError>,
                     op: &mut dyn FnMut(u64) -> Result<(), RunError>,
                     (start, end): &Pair,
                     k: u64|
         -> Result<(), RunError> {
            before()?;
            start
                .record(&self.stream)
                .map_err(cuda_err("cuEventRecord"))?;
            op(k)?;
            end.record(&self.stream).map_err(cuda_err("cuEventRecord"))
        };
        for (i, (ea, eb)) in events.iter().enumerate() {
            if i % 2 == 0 {
                timed(before_a, a, ea, k)?;
                timed(before_b, b, eb, k)?;
            } else {
                timed(before_b, b, eb, k)?;
                timed(before_a, a, ea, k)?;
            }
            k += 1;
        }
        self.sync("the interleaved timed runs")?;
        let us = |(start, end): &Pair| -> Result<f64, RunError> {
            Ok(start
                .elapsed_ms(end)
                .map_err(cuda_err("cuEventElapsedTime"))? as f64
                * 1e3)
        };
        let mut out = (
            Vec::with_capacity(events.len()),
            Vec::with_capacity(events.len()),
        );
        for (ea, eb) in &events {
            out.0.push(us(ea)?);
            out.1.push(us(eb)?);
        }
        Ok(out)
    }
}

fn ptr(buf: &CudaSlice<u8>, stream: &CudaStream) -> sys::CUdeviceptr {
    // Event tracking is off, so the guard does nothing.
    buf.device_ptr(stream).0
}

pub use hopfuse_launch::args::{Arg, KernelArgs};

/// A device pointer as a kernel argument slot.
pub fn pointer_slot(buf: &CudaSlice<u8>, stream: &CudaStream) -> u64 {
    ptr(buf, stream)
}

/// A kernel that spins on `%globaltimer` for a given time: it holds the stream while the host
/// enqueues timed work.
pub struct Spin {
    func: CudaFunction,
}

pub const SPIN_SOURCE: &str = r#"
extern "C" __global__ void hopfuse_spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"#;

impl Spin {
    pub fn new(gpu: &Gpu) -> Result<Spin, RunError> {
        let cubin = crate::nvrtc::compile(SPIN_SOURCE, "hopfuse_spin.cu")
            .and_then(|c| c.deny_warnings("hopfuse_spin.cu"))
            .map_err(|e| RunError::new(Stage::Nvrtc, e.to_string()))?;
        Ok(Spin {
            func: gpu.load(cubin.image, "hopfuse_spin")?,
        })
    }

    fn hold(&self, gpu: &Gpu, ns: u64) -> Result<(), RunError> {
        let launch = hopfuse::plan::ConcreteLaunch {
            grid: [1, 1, 1],
            block: [1, 1, 1],
            dynamic_smem_bytes: 0,
            cluster: None,
        };
        gpu.launch(&self.func, &launch, &mut KernelArgs::new(vec![ns]))
    }
}

pub fn attributes(func: &CudaFunction) -> Result<KernelAttributes, RunError> {
    let get = |a: CUfunction_attribute| {
        func.get_attribute(a)
            .map_err(cuda_err("cuFuncGetAttribute"))
    };
    Ok(KernelAttributes {
        registers_per_thread: get(CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
        local_bytes_per_thread: get(CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
        static_smem_bytes: get(CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
        max_threads_per_block: get(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        binary_version: get(CUfunction_attribute::CU_FUNC_ATTRIBUTE_BINARY_VERSION)?,
    })
}

/// Allows a kernel more than 48 KB of dynamic shared memory.
pub fn allow_dynamic_smem(func: &CudaFunction, bytes: u32) -> Result<(), RunError> {
    func.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        bytes as i32,
    )
    .map_err(cuda_err(format!(
        "raising the kernel's dynamic shared memory limit to {bytes} bytes"
    )))
}

#[cfg(test)]
mod visible_tests {
    use super::visible_device;

    /// A worker's device is the parent's own choice of GPUs, not index `i` of all of them.
    #[test]
    fn a_workers_device_is_taken_from_the_parents_visible_devices() {
        assert_eq!(visible_device(1, None), "1");
        assert_eq!(visible_device(1, Some("2,3")), "3");
        assert_eq!(visible_device(0, Some("GPU-8f2c, GPU-77aa")), "GPU-8f2c");
        assert_eq!(visible_device(2, Some("2,3")), "2");
    }
}
