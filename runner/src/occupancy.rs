//! How many CTAs, or clusters, of one launch the GPU holds at once, and so in how many waves the
//! grid runs ([`Residency`], `RunResult::residency`), and the warning for a persistent grid that
//! needs more than one (`RunResult::warnings`).
//!
//! Takes a loaded kernel whose dynamic shared memory limit is already raised as for its launch
//! (the calculator reads that limit: below the launch's shared memory it counts no CTA) and its
//! concrete launch, and asks the driver:
//! - a kernel launched in clusters: `cuOccupancyMaxActiveClusters`, the clusters of that shape
//!   resident at once (the GPU schedules a cluster whole, onto SMs of one GPC, so this is not the
//!   CTA count divided by the cluster size);
//! - otherwise `cuOccupancyMaxActiveBlocksPerMultiprocessor` times the SM count (through
//!   cudarc, which calls its `WithFlags` form with the default flags: the same answer).
//!
//! The cluster shape counted is the one the runner's plain `cuLaunchKernel` forms: the kernel's
//! compiled-in `__cluster_dims__` (`CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_*`). The query passes it as
//! the config's one `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION` attribute: the driver API's
//! documentation of `cuOccupancyMaxActiveClusters` says that for a kernel with a required
//! (compiled-in) cluster size the config's must be unspecified or equal to it, and must be given
//! for a kernel without one. Should a driver refuse even the equal attribute, the query is asked
//! again with none, which leaves the compiled-in dims in force. Which form answered is logged
//! (debug).
//!
//! Guarantees: never fails a run and never panics. A query that fails (a driver without the
//! call: its symbol is looked up before it is called, since cudarc's dynamic loading panics on
//! a missing one; an error from the driver) gives a [`Residency`] whose `resident` and `waves`
//! are unknown, with the reason, logged as a warning. The arithmetic, the persistent test and
//! the warning text are pure functions, tested without a GPU.

use crate::gpu::{self, Gpu};
use cudarc::driver::sys::{self, CUfunction_attribute};
use cudarc::driver::CudaFunction;
use hopfuse::plan::ConcreteLaunch;
use hopfuse::LaunchPlan;
use hopfuse_api::run::{Residency, ResidentUnit};
use tracing::{debug, info, warn};

/// The driver calls, by the names the report shows.
pub const MAX_ACTIVE_CLUSTERS: &str = "cuOccupancyMaxActiveClusters";
pub const MAX_ACTIVE_BLOCKS: &str = "cuOccupancyMaxActiveBlocksPerMultiprocessor";

/// Waves a grid of `grid` units runs in when `resident` fit at once; none when none fit.
pub fn waves(grid: u64, resident: u64) -> Option<u64> {
    (resident > 0).then(|| grid.div_ceil(resident))
}

/// Whether the plan's grid is the same for every problem size, or a persistent grid
/// (`LaunchPlan::persistent`): a persistent kernel, whose CTAs loop over the work themselves and
/// so should all be resident at once. A kernel specialised to its sizes has a constant grid
/// whatever its program wrote, so only its `persistent` says.
pub fn is_persistent(plan: &LaunchPlan) -> bool {
    plan.persistent.is_some()
        || (plan.specialized_sizes().is_none()
            && plan.grid.iter().all(|extent| extent.as_const().is_some()))
}

/// A persistent grid (`LaunchPlan::persistent`) sized to this GPU: no more CTAs than are
/// resident at once (whole clusters), and of those the fewest that take the tiles in as few
/// rounds (`hopfuse::plan::persistent_grid`); `r` is recounted for it. `plan.grid[0]` (the
/// tiles in CTAs) is evaluated again, since `concretize` sized the grid for an H100. Any grid
/// size is correct for such a kernel (each CTA takes every `gridDim.x`-th tile), so the launch
/// keeps `concretize`'s choice when the residency is unknown; other plans are left as they are.
pub fn fit_persistent(
    plan: &LaunchPlan,
    sizes: &std::collections::BTreeMap<String, i64>,
    launch: &mut ConcreteLaunch,
    r: &mut Residency,
) {
    let Some(resident) = r.resident.filter(|&n| n > 0 && plan.persistent.is_some()) else {
        return;
    };
    let Some(tiles) = plan.grid[0]
        .eval(sizes)
        .ok()
        .and_then(|t| u32::try_from(t).ok())
    else {
        return;
    };
    let cluster = i64::from(r.unit_ctas.max(1));
    let stream_k = plan.persistent.as_ref().and_then(|p| p.stream_k.as_ref());
    let grid = match stream_k.map(|w| w.eval(sizes)) {
        Some(Ok(work)) => hopfuse::plan::stream_k_grid(work, resident as i64),
        Some(Err(_)) => return,
        None => hopfuse::plan::persistent_grid(tiles, cluster, resident as i64),
    };
    if grid == launch.grid[0] {
        return;
    }
    launch.grid[0] = grid;
    r.grid = grid_units(launch.grid, launch.cluster);
    r.waves = waves(r.grid, resident);
    info!(
        "persistent grid of {} for this GPU ({} resident at once)",
        r.units(r.grid),
        r.units(resident)
    );
}

/// Units in a grid: CTAs, or clusters of `cluster` (each grid extent is a multiple of its
/// cluster extent; a partial cluster, were there one, counts whole).
pub fn grid_units(grid: [u32; 3], cluster: Option<[u32; 3]>) -> u64 {
    let cluster = cluster.unwrap_or([1, 1, 1]);
    grid.iter()
        .zip(cluster)
        .map(|(&g, c)| u64::from(g).div_ceil(u64::from(c.max(1))))
        .product()
}

/// The record of one launch: `resident` is the driver's answer (and, for single CTAs, the
/// per-SM figure it came from) or why there is none.
pub fn record(
    unit: ResidentUnit,
    unit_ctas: u32,
    grid: u64,
    persistent: bool,
    resident: Result<(u64, Option<u32>), String>,
) -> Residency {
    let query = match unit {
        ResidentUnit::Cluster => MAX_ACTIVE_CLUSTERS,
        ResidentUnit::Cta => MAX_ACTIVE_BLOCKS,
    };
    let (resident, per_sm, unknown) = match resident {
        Ok((n, per_sm)) => (Some(n), per_sm, None),
        Err(why) => (None, None, Some(why)),
    };
    Residency {
        unit,
        unit_ctas,
        grid,
        resident,
        per_sm,
        waves: resident.and_then(|r| waves(grid, r)),
        query: query.to_string(),
        persistent,
        unknown,
    }
}

/// The warning for a persistent grid that needs more than one wave (its later waves start only
/// when CTAs of the first finish, which for a persistent kernel is when their whole share of
/// the work is done, so the kernel takes about twice as long); none otherwise.
pub fn warning(r: &Residency) -> Option<String> {
    let (resident, waves) = (r.resident?, r.waves?);
    if !r.persistent || waves <= 1 {
        return None;
    }
    let late = r.grid - resident;
    let verb = if late == 1 { "runs" } else { "run" };
    let when = if waves == 2 {
        format!("{late} {verb} as a second wave")
    } else {
        format!(
            "{late} {verb} after the first wave, in {} more waves",
            waves - 1
        )
    };
    let fit = match r.unit {
        ResidentUnit::Cta => hopfuse_api::run::count(resident, "CTA"),
        ResidentUnit::Cluster => format!(
            "{} ({})",
            hopfuse_api::run::count(resident, "cluster"),
            hopfuse_api::run::count(resident * u64::from(r.unit_ctas), "CTA")
        ),
    };
    Some(format!(
        "persistent grid of {}, but at most {resident} {} resident on this GPU ({}): {when}; \
         make the grid at most {fit}",
        r.units(r.grid),
        if resident == 1 { "is" } else { "are" },
        r.source(),
    ))
}

/// The run's warnings about its launch.
pub fn warnings(r: &Residency) -> Vec<String> {
    warning(r).into_iter().collect()
}

/// Asks the driver how many units of `launch` of `func` are resident at once. `func` must have
/// its dynamic shared memory limit raised for `launch` already.
pub fn residency(
    gpu: &Gpu,
    func: &CudaFunction,
    launch: &ConcreteLaunch,
    plan: &LaunchPlan,
) -> Residency {
    let persistent = is_persistent(plan);
    let r = match launch_cluster(func, launch) {
        Some(dims) => {
            let ctas = dims.iter().product::<u32>();
            let resident = max_active_clusters(gpu, func, launch, dims).map(|n| (n, None));
            let grid = grid_units(launch.grid, Some(dims));
            record(ResidentUnit::Cluster, ctas, grid, persistent, resident)
        }
        None => {
            let threads: u32 = launch.block.iter().product();
            let sms = u64::try_from(gpu.info.sm_count).unwrap_or(0);
            let resident = func
                .occupancy_max_active_blocks_per_multiprocessor(
                    threads,
                    launch.dynamic_smem_bytes as usize,
                    None,
                )
                .map(|per_sm| (u64::from(per_sm) * sms, Some(per_sm)))
                .map_err(|e| gpu::cuda_err(MAX_ACTIVE_BLOCKS)(e).message);
            let grid = grid_units(launch.grid, None);
            record(ResidentUnit::Cta, 1, grid, persistent, resident)
        }
    };
    match (&r.resident, &r.unknown) {
        (Some(resident), _) => info!(
            "{} resident at once ({}); the grid of {} runs in {} wave(s)",
            r.units(*resident),
            r.source(),
            r.units(r.grid),
            r.waves.map_or("no".to_string(), |w| w.to_string())
        ),
        (None, why) => warn!(
            "how many CTAs of the launch are resident at once is unknown: {}",
            why.as_deref().unwrap_or("no reason given")
        ),
    }
    r
}

/// The cluster shape the plain launch forms: the kernel's `__cluster_dims__`. When the driver
/// cannot say (an attribute it does not know), the plan's, which the compiler wrote there.
fn launch_cluster(func: &CudaFunction, launch: &ConcreteLaunch) -> Option<[u32; 3]> {
    let get = |a: CUfunction_attribute| func.get_attribute(a).map(|v| v.max(0) as u32);
    let compiled = (|| {
        Ok::<_, cudarc::driver::DriverError>([
            get(CUfunction_attribute::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH)?,
            get(CUfunction_attribute::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT)?,
            get(CUfunction_attribute::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH)?,
        ])
    })();
    match compiled {
        // 0 in every dimension: no __cluster_dims__.
        Ok([0, 0, 0]) => {
            if let Some(plan) = launch.cluster {
                warn!(
                    "the plan launches clusters of {plan:?} but the kernel has no __cluster_dims__: \
                     the plain launch runs single CTAs, and they are counted so"
                );
            }
            None
        }
        Ok(dims) => {
            let dims = dims.map(|d| d.max(1));
            if launch.cluster.is_some_and(|plan| plan != dims) {
                warn!(
                    "the plan's cluster {:?} is not the kernel's __cluster_dims__ {dims:?}; \
                     counting the kernel's, which the launch forms",
                    launch.cluster
                );
            }
            Some(dims)
        }
        Err(e) => {
            debug!(
                "the kernel's __cluster_dims__ are unknown ({}); using the plan's",
                gpu::cuda_err("cuFuncGetAttribute")(e).message
            );
            launch.cluster
        }
    }
}

/// `cuOccupancyMaxActiveClusters` for `launch` in clusters of `dims`: with the cluster
/// attribute, then, if the driver refuses it, without (see the module's doc).
fn max_active_clusters(
    gpu: &Gpu,
    func: &CudaFunction,
    launch: &ConcreteLaunch,
    dims: [u32; 3],
) -> Result<u64, String> {
    // SAFETY: only looks the symbol up in the driver library, which `Gpu::open` loaded.
    let present = unsafe { sys::culib().get::<unsafe extern "C" fn()>(MAX_ACTIVE_CLUSTERS) };
    if present.is_err() {
        return Err(format!(
            "the driver has no {MAX_ACTIVE_CLUSTERS} (drivers of CUDA 11.8 and later have it)"
        ));
    }
    match max_active_clusters_with(gpu, func, launch, Some(dims)) {
        Ok(n) => {
            debug!("{MAX_ACTIVE_CLUSTERS} with the cluster attribute {dims:?}: {n}");
            Ok(n)
        }
        Err(with) => match max_active_clusters_with(gpu, func, launch, None) {
            Ok(n) => {
                debug!(
                    "{MAX_ACTIVE_CLUSTERS} refused the cluster attribute {dims:?} ({with}); \
                     without it (the kernel's __cluster_dims__): {n}"
                );
                Ok(n)
            }
            Err(without) => Err(format!(
                "{with}; again without the cluster attribute: {without}"
            )),
        },
    }
}

fn max_active_clusters_with(
    gpu: &Gpu,
    func: &CudaFunction,
    launch: &ConcreteLaunch,
    dims: Option<[u32; 3]>,
) -> Result<u64, String> {
    let mut attrs: Vec<sys::CUlaunchAttribute> = dims
        .map(|[x, y, z]| {
            let mut value = sys::CUlaunchAttributeValue { pad: [0; 64] };
            value.clusterDim = sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x, y, z };
            sys::CUlaunchAttribute {
                id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                pad: [0; 4],
                value,
            }
        })
        .into_iter()
        .collect();
    let [gx, gy, gz] = launch.grid;
    let [bx, by, bz] = launch.block;
    let config = sys::CUlaunchConfig {
        gridDimX: gx,
        gridDimY: gy,
        gridDimZ: gz,
        blockDimX: bx,
        blockDimY: by,
        blockDimZ: bz,
        sharedMemBytes: launch.dynamic_smem_bytes,
        hStream: gpu.stream.cu_stream(),
        attrs: if attrs.is_empty() {
            std::ptr::null_mut()
        } else {
            attrs.as_mut_ptr()
        },
        numAttrs: attrs.len() as u32,
    };
    let mut clusters: std::ffi::c_int = 0;
    // SAFETY: `config` and the attributes it points to outlive the call; `func` is a live
    // kernel of this context; the symbol exists (looked up by the caller).
    unsafe { sys::cuOccupancyMaxActiveClusters(&mut clusters, func.cu_function(), &config) }
        .result()
        .map_err(|e| gpu::cuda_err(MAX_ACTIVE_CLUSTERS)(e).message)?;
    Ok(clusters.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopfuse::CompileOptions;
    use std::collections::BTreeMap;

    const STEP12: &str = include_str!("../../examples/matmul/step12_cluster_multicast.hf");

    fn plan_of(source: &str) -> LaunchPlan {
        hopfuse::compile(source, &CompileOptions::default())
            .unwrap_or_else(|d| panic!("{}", d.render(source, "test.hf")))
            .plan
    }

    fn launch_of(plan: &LaunchPlan, n: i64) -> ConcreteLaunch {
        let sizes = BTreeMap::from([("M".into(), n), ("N".into(), n), ("K".into(), n)]);
        plan.concretize(&sizes).unwrap()
    }

    /// Step 12 with clusters of four along BIDy: the variant of docs/benchmarks.md step 12.
    fn step12_cluster4() -> String {
        let four = STEP12.replace("cluster(BIDy, 2)", "cluster(BIDy, 4)");
        assert_ne!(
            four, STEP12,
            "step 12 has no `cluster(BIDy, 2)` line any more"
        );
        four
    }

    #[test]
    fn a_persistent_grid_is_sized_to_what_this_gpu_holds() {
        const STEP15: &str = include_str!("../../examples/matmul/step15_persistent_raster.hf");
        let plan = plan_of(STEP15);
        assert!(is_persistent(&plan));
        let sizes =
            |m: i64, n: i64| BTreeMap::from([("M".into(), m), ("N".into(), n), ("K".into(), 64)]);
        let fit = |m: i64, n: i64, resident: Result<(u64, Option<u32>), String>| {
            let sz = sizes(m, n);
            let mut launch = plan.concretize(&sz).unwrap();
            let grid = grid_units(launch.grid, None);
            let mut r = record(ResidentUnit::Cta, 1, grid, true, resident);
            fit_persistent(&plan, &sz, &mut launch, &mut r);
            (launch.grid, r.grid, r.waves)
        };
        // 512 tiles; an H100 (132 resident): 4 rounds of 128 CTAs, as concretize chose.
        assert_eq!(
            fit(4096, 4096, Ok((132, Some(1)))),
            ([128, 1, 1], 128, Some(1))
        );
        // A GPU holding 100: 6 rounds of 86 (not 100, 100, ... and 12).
        assert_eq!(
            fit(4096, 4096, Ok((100, Some(1)))),
            ([86, 1, 1], 86, Some(1))
        );
        // A GPU holding more than an H100 takes more than concretize's 128.
        assert_eq!(
            fit(4096, 4096, Ok((200, Some(1)))),
            ([171, 1, 1], 171, Some(1))
        );
        // Fewer tiles than CTAs: one per tile.
        assert_eq!(
            fit(128, 4096, Ok((132, Some(1)))),
            ([16, 1, 1], 16, Some(1))
        );
        // Unknown residency: concretize's grid stays.
        assert_eq!(fit(4096, 4096, Err("no driver".into())).0, [128, 1, 1]);
        // Not persistent: left alone.
        let step9 = plan_of(include_str!(
            "../../examples/matmul/step9_tma_store_epilogue.hf"
        ));
        let mut launch = launch_of(&step9, 4096);
        let mut r = record(ResidentUnit::Cta, 1, 128, true, Ok((100, Some(1))));
        fit_persistent(&step9, &sizes(4096, 4096), &mut launch, &mut r);
        assert_eq!((launch.grid, r.grid), ([8, 16, 1], 128));
    }

    #[test]
    fn waves_are_the_grid_over_the_resident_rounded_up() {
        assert_eq!(waves(128, 132), Some(1));
        assert_eq!(waves(132, 132), Some(1));
        assert_eq!(waves(133, 132), Some(2));
        assert_eq!(waves(32, 30), Some(2));
        assert_eq!(waves(100, 30), Some(4));
        assert_eq!(waves(1, 1), Some(1));
        // Nothing fits (the launch itself fails): no figure.
        assert_eq!(waves(32, 0), None);
    }

    #[test]
    fn grid_units_count_clusters_whole() {
        assert_eq!(grid_units([8, 16, 1], None), 128);
        assert_eq!(grid_units([8, 16, 1], Some([1, 2, 1])), 64);
        assert_eq!(grid_units([8, 16, 1], Some([1, 4, 1])), 32);
        assert_eq!(grid_units([3, 1, 1], Some([2, 1, 1])), 2);
        assert_eq!(grid_units([65535, 65535, 64], None), 65535 * 65535 * 64);
    }

    /// A persistent kernel's grid is constant in its plan; a tiled kernel's grid follows the
    /// sizes.
    #[test]
    fn persistent_means_a_constant_grid() {
        let step12 = plan_of(STEP12);
        assert!(is_persistent(&step12), "{:?}", step12.grid);
        let tiled = plan_of(include_str!("../../examples/matmul/step2_pipelined.hf"));
        assert!(!is_persistent(&tiled), "{:?}", tiled.grid);
        assert_ne!(
            launch_of(&tiled, 256).grid,
            launch_of(&tiled, 4096).grid,
            "a size-dependent grid"
        );
        // Specialised to its sizes, the tiled kernel's grid is a number, and still not
        // persistent (the H200 bench warned of "persistent grids" of 524288 CTAs before).
        let source = include_str!("../../examples/matmul/step2_pipelined.hf");
        let sizes = BTreeMap::from([("M".into(), 4096), ("N".into(), 4096), ("K".into(), 4096)]);
        let specialised = hopfuse::compile(
            source,
            &CompileOptions {
                aligned_for: Some(sizes),
                specialize: true,
                ..CompileOptions::default()
            },
        )
        .unwrap()
        .plan;
        assert!(specialised.grid.iter().all(|g| g.as_const().is_some()));
        assert!(!is_persistent(&specialised), "{:?}", specialised.grid);
    }

    /// The case of docs/benchmarks.md step 12: 32 clusters of four where 30 fit.
    #[test]
    fn a_persistent_grid_of_more_clusters_than_fit_is_warned_about() {
        let plan = plan_of(&step12_cluster4());
        let launch = launch_of(&plan, 4096);
        assert_eq!(launch.cluster, Some([1, 4, 1]));
        let grid = grid_units(launch.grid, launch.cluster);
        assert_eq!(grid, 32);
        let r = record(
            ResidentUnit::Cluster,
            4,
            grid,
            is_persistent(&plan),
            Ok((30, None)),
        );
        assert_eq!(r.waves, Some(2));
        assert_eq!(r.query, MAX_ACTIVE_CLUSTERS);
        assert_eq!(
            warning(&r).as_deref(),
            Some(
                "persistent grid of 32 clusters of 4 CTAs, but at most 30 are resident on this \
                 GPU (cuOccupancyMaxActiveClusters): 2 run as a second wave; make the grid at \
                 most 30 clusters (120 CTAs)"
            )
        );
        // Clusters of two: 64 of them, all resident, one wave and no warning.
        let plan2 = plan_of(STEP12);
        let launch2 = launch_of(&plan2, 4096);
        let grid2 = grid_units(launch2.grid, launch2.cluster);
        let r2 = record(ResidentUnit::Cluster, 2, grid2, true, Ok((64, None)));
        assert_eq!((grid2, r2.waves), (64, Some(1)));
        assert_eq!(warnings(&r2), Vec::<String>::new());
    }

    #[test]
    fn the_warning_names_every_number() {
        let ctas = record(ResidentUnit::Cta, 1, 264, true, Ok((132, Some(1))));
        assert_eq!(
            warning(&ctas).unwrap(),
            "persistent grid of 264 CTAs, but at most 132 are resident on this GPU \
             (cuOccupancyMaxActiveBlocksPerMultiprocessor: 1 per SM x 132 SMs): 132 run as a \
             second wave; make the grid at most 132 CTAs"
        );
        let many = record(ResidentUnit::Cluster, 2, 100, true, Ok((30, None)));
        assert_eq!(many.waves, Some(4));
        assert_eq!(
            warning(&many).unwrap(),
            "persistent grid of 100 clusters of 2 CTAs, but at most 30 are resident on this GPU \
             (cuOccupancyMaxActiveClusters): 70 run after the first wave, in 3 more waves; make \
             the grid at most 30 clusters (60 CTAs)"
        );
        let one_late = record(ResidentUnit::Cta, 1, 2, true, Ok((1, Some(1))));
        assert_eq!(
            warning(&one_late).unwrap(),
            "persistent grid of 2 CTAs, but at most 1 is resident on this GPU \
             (cuOccupancyMaxActiveBlocksPerMultiprocessor: 1 per SM x 1 SMs): 1 runs as a \
             second wave; make the grid at most 1 CTA"
        );
    }

    /// A grid that follows the sizes gets its waves figure but no warning: many waves are how
    /// it covers a large problem.
    #[test]
    fn a_size_dependent_grid_is_not_warned_about() {
        let r = record(ResidentUnit::Cta, 1, 4096, false, Ok((264, Some(2))));
        assert_eq!(r.waves, Some(16));
        assert_eq!(warning(&r), None);
    }

    /// A failed query leaves the figure unknown, with the reason, and warns about nothing.
    #[test]
    fn an_unknown_residency_has_no_waves_and_no_warning() {
        let r = record(
            ResidentUnit::Cluster,
            4,
            32,
            true,
            Err("the driver has no cuOccupancyMaxActiveClusters".into()),
        );
        assert_eq!((r.resident, r.waves, r.per_sm), (None, None, None));
        assert_eq!(
            r.unknown.as_deref(),
            Some("the driver has no cuOccupancyMaxActiveClusters")
        );
        assert_eq!(warning(&r), None);
        assert_eq!(r.source(), MAX_ACTIVE_CLUSTERS);
    }
}
