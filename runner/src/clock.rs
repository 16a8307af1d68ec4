//! `hopfuse run --clock`: the SM clock a kernel ran at, from the clock probe the compiler adds
//! when asked (`CompileOptions::clock_probe`). Thread 0 of each of the first
//! [`CLOCK_PROBE_CTAS`] CTAs writes the SM cycles (`%clock64`) and nanoseconds (`%globaltimer`)
//! of its run into the module global [`CLOCK_PROBE_SYMBOL`]; each launch overwrites them, so
//! after the timed launches they are the last one's.
//!
//! Why inside the kernel: while the tensor cores are busy the H100's SM clock drops (to about
//! 1,610-1,680 MHz in a 4096^3 bf16 product, from 1,980), and it is back within microseconds of
//! the work stopping. A probe kernel after the launches, or `nvidia-smi`, sees the recovered
//! clock (docs/benchmarks.md, "The public reference kernel on this H100, the SM clock").

use crate::gpu::Gpu;
use cudarc::driver::CudaModule;
use hopfuse::backend::codegen::clock_probe::{
    CTAS as CLOCK_PROBE_CTAS, SYMBOL as CLOCK_PROBE_SYMBOL,
};
use hopfuse_api::run::{ClockReading, RunError, Stage};
use std::sync::Arc;

/// The probe's slots of the launch's first `ctas` CTAs, as (cycles, nanoseconds); `None` when
/// the module has no probe (a hand-written kernel).
pub fn read_slots(
    gpu: &Gpu,
    module: &Arc<CudaModule>,
    ctas: u64,
) -> Result<Option<Vec<(u64, u64)>>, RunError> {
    let Ok(symbol) = module.get_global(CLOCK_PROBE_SYMBOL, &gpu.stream) else {
        return Ok(None);
    };
    let mut bytes = vec![0u8; symbol.len()];
    gpu.stream
        .memcpy_dtoh(&symbol, &mut bytes)
        .map_err(|e| RunError::new(Stage::Cuda, format!("reading the clock probe: {e:?}")))?;
    gpu.sync("reading the clock probe")?;
    let n = (ctas as usize).min(CLOCK_PROBE_CTAS).min(bytes.len() / 16);
    let word = |i: usize| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    Ok(Some(
        (0..n).map(|c| (word(2 * c), word(2 * c + 1))).collect(),
    ))
}

/// MHz from `cycles` SM cycles in `ns` nanoseconds; `None` for a reading no SM clock gives (no
/// time passed, or outside 10 MHz..10 GHz).
pub fn sm_clock_mhz(cycles: u64, ns: u64) -> Option<f64> {
    if ns == 0 {
        return None;
    }
    let mhz = cycles as f64 * 1e3 / ns as f64;
    (10.0..10_000.0).contains(&mhz).then_some(mhz)
}

/// What the slots say, for the launch they are from (the last timed one, which took
/// `launch_us`) on a device of `sm_count` SMs: the clock (cycles over nanoseconds, summed over
/// the CTAs), and for a matrix product `(flops, peak)`, its FLOP per SM-cycle in that launch and,
/// when the operand types have one (`target::tensor_flop_per_sm_cycle`), that against the
/// tensor cores' peak. (Not the median launch's: under
/// sustained load the clock falls from launch to launch.) `None` when no CTA recorded a run
/// (nanoseconds 0: never written).
pub fn reading(
    slots: &[(u64, u64)],
    launch_us: f64,
    sm_count: i32,
    product: Option<(f64, Option<f64>)>,
) -> Option<ClockReading> {
    let ran: Vec<(u64, u64)> = slots.iter().copied().filter(|&(_, ns)| ns > 0).collect();
    let cycles: u64 = ran.iter().map(|&(c, _)| c).sum();
    let ns: u64 = ran.iter().map(|&(_, ns)| ns).sum();
    let sm_clock_mhz = sm_clock_mhz(cycles, ns)?;
    let cta_median_us =
        hopfuse_api::run::median(ran.iter().map(|&(_, ns)| ns as f64 / 1e3).collect())?;
    let flop_per_sm_cycle = product
        .map(|(flops, _)| flops / (launch_us * 1e-6 * sm_clock_mhz * 1e6 * sm_count.max(1) as f64))
        .filter(|f| f.is_finite());
    let fraction_of_tensor_peak = match (product, flop_per_sm_cycle) {
        (Some((_, Some(peak))), Some(f)) => Some(f / peak),
        _ => None,
    };
    Some(ClockReading {
        sm_clock_mhz,
        ctas: ran.len() as u32,
        cta_median_us,
        launch_us,
        flop_per_sm_cycle,
        fraction_of_tensor_peak,
    })
}

#[cfg(test)]
mod tests {
    use super::reading;

    #[test]
    fn the_clock_is_the_ctas_cycles_over_their_nanoseconds() {
        // Two CTAs at 1,600 and 1,700 MHz for 100 and 300 us: 650,000 cycles in 400 us.
        let slots = [(160_000, 100_000), (510_000, 300_000), (0, 0)];
        let r = reading(&slots, 300.0, 132, None).unwrap();
        assert!((r.sm_clock_mhz - 1675.0).abs() < 1e-9, "{r:?}");
        assert_eq!(r.ctas, 2);
        assert_eq!(r.cta_median_us, 200.0);
        assert_eq!(r.flop_per_sm_cycle, None);
        assert_eq!(r.fraction_of_tensor_peak, None);
    }

    #[test]
    fn a_product_is_put_against_the_tensor_peak() {
        // 4096^3 in 172.5 us at 1,675 MHz over 132 SMs: 3,603.6 FLOP per SM-cycle, 88.0%.
        let slots = [(288_937, 172_500)];
        let flops = 2.0 * 4096f64.powi(3);
        let r = reading(&slots, 172.5, 132, Some((flops, Some(4096.0)))).unwrap();
        let f = r.flop_per_sm_cycle.unwrap();
        assert!((f - 3603.6).abs() < 0.1, "{r:?}");
        assert!((r.fraction_of_tensor_peak.unwrap() - f / 4096.0).abs() < 1e-12);
        // f32 operands: no tensor-core peak to compare with.
        let r = reading(&slots, 172.5, 132, Some((flops, None))).unwrap();
        assert_eq!(r.fraction_of_tensor_peak, None);
    }

    #[test]
    fn impossible_clocks_are_none() {
        assert_eq!(super::sm_clock_mhz(324_000, 200_000), Some(1620.0));
        assert_eq!(super::sm_clock_mhz(1_000, 0), None);
        assert_eq!(super::sm_clock_mhz(0, 200_000), None);
        assert_eq!(super::sm_clock_mhz(u64::MAX, 200_000), None);
    }

    /// The probe compiles without warnings into every kind of kernel: element-wise, a block
    /// reduction, TMA pipelines, warp specialisation, clusters, ping-pong and stream-K.
    #[test]
    fn probed_kernels_compile_without_warnings() {
        if crate::not_run::nvrtc_missing("clock-probed kernels through NVRTC") {
            return;
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for file in [
            "examples/basics/add.hf",
            "examples/basics/softmax.hf",
            "examples/ws/add_three_roles.hf",
            "examples/ws/row_sum_persistent.hf",
            "examples/matmul/step12_cluster_multicast.hf",
            "examples/matmul/step14_ping_pong.hf",
            "examples/matmul/step15_persistent_raster.hf",
            "docs/variants/s13_rows.hf",
            "docs/variants/s15_stream_k.hf",
        ] {
            let source = std::fs::read_to_string(root.join(file)).unwrap();
            let options = hopfuse::CompileOptions {
                clock_probe: true,
                ..Default::default()
            };
            let c = hopfuse::compile(&source, &options).unwrap_or_else(|d| panic!("{file}: {d}"));
            assert!(c.cuda.contains(super::CLOCK_PROBE_SYMBOL), "{file}");
            let cubin = crate::nvrtc::compile(&c.cuda, file).unwrap();
            assert!(cubin.warnings.is_empty(), "{file}: {}", cubin.log);
        }
    }

    #[test]
    fn no_recorded_cta_is_no_reading() {
        assert_eq!(reading(&[(0, 0), (0, 0)], 10.0, 132, None), None);
        assert_eq!(reading(&[], 10.0, 132, None), None);
    }
}
