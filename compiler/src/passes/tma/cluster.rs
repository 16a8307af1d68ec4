//! Thread-block clusters: TMA multicast of the boxes every CTA of a cluster loads alike (part of
//! the `tma` pass, after the pipelines and their barriers are planned).
//!
//! Takes: the kernel's cluster (`cluster(BIDy, 2)`: consecutive CTAs along one grid axis, set
//! by `loop_nest`), the planned loads and pipelines. A `load=tma` cache none of whose own loop
//! axes is the clustered grid axis holds the same box in every CTA of a cluster (a matmul's
//! operand shared by the CTAs of one row or column of tiles): it is **multicast**, each CTA
//! copying one slice of the box (its outermost dimension cut in `ctas` equal parts, slice `r`
//! by the CTA of rank `r`) into the same place of every CTA's shared memory with
//! `.multicast::cluster`, completing on the same full barrier of each. So every CTA still
//! expects the whole stage's bytes, the tensor map's box is the slice, and a slot may be
//! refilled only when the readers of **every** CTA of the cluster have released it: the
//! pipeline's empty barriers become cluster-wide (each release arrives on the barrier of every
//! CTA, `arrivals` counts them all). The cluster barrier after mbarrier init and before exit is
//! placed by `circular_buffer`.
//!
//! Guarantees (errors name the tensor and the rule): a multicast pipeline has empty barriers
//! (`war=mbarrier` or `warp_specialized`), so that no peer overwrites a slot this CTA still
//! reads; each slice is a whole number of rows and starts on the swizzle pattern's repeat.
//! The CTAs of a cluster walk their pipelines in step: loop extents do not depend on the CTA,
//! and a TMA copy is never skipped (out-of-bounds parts are zero-filled and still counted).
//! Emits: [`TmaInfo::multicast`], sliced tensor-map boxes, cluster-wide empty barriers.

#[allow(unused_imports)]
use super::*;

pub(crate) fn plan_multicast(
    cx: &Ctx,
    k: &mut Kernel,
    plan: &mut PipelinePlan,
) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let Some(cluster) = f.cluster else {
        return Ok(());
    };
    let ctas = cluster.ctas;
    // The loop bound to the clustered grid axis: a box that varies with it differs per CTA.
    let mut clustered = None;
    crate::kir::for_each_stmt(&k.body, &mut |s| {
        if let Stmt::Loop(l) = s {
            if l.parallel == cluster.on {
                clustered = Some(l.key);
            }
        }
    });
    for m in 0..plan.loads.len() {
        let info = &plan.loads[m];
        if info.kind != LoadKind::Tma {
            continue;
        }
        let tensor = &f.tensors[info.tensor];
        let per_cta = tensor.loop_domain.iter().any(|id| {
            f.ids[*id].parallel == cluster.on
                || (clustered.is_some() && cx.keys.of_axis.get(id) == clustered.as_ref())
        });
        if per_cta {
            continue;
        }
        let name = &tensor.name;
        let what = format!(
            "`{name}` is loaded alike by the {ctas} CTAs of each cluster (cluster({}, {ctas})), so it is multicast",
            cluster.on
        );
        let err = |m: String| Err(Diagnostic::new(m, tensor.span));
        let pipe = &plan.pipes[info.pipe];
        let empty = match &pipe.ws {
            Some(ws) => ws
                .roles
                .iter()
                .find(|r| r.members.contains(&m))
                .map(|r| r.empty),
            None => pipe.empty,
        };
        let Some(empty) = empty else {
            return err(format!(
                "{what}: a peer then refills this CTA's slots, so its pipeline needs empty mbarriers that every CTA releases: circular_buffer(..., war=mbarrier) or warp_specialized(...)"
            ));
        };
        let rank = info.boxes.dims.len();
        let rows = info.boxes.dims[rank - 1];
        let elem = tensor.dtype.size_bytes() as i64;
        let align = crate::target::swizzle_repeat(info.swizzle);
        let slice_bytes = info.boxes.dims.iter().product::<i64>() / ctas * elem;
        if rows % ctas != 0 || slice_bytes % align != 0 {
            return err(format!(
                "{what}: each CTA copies 1/{ctas} of the box's outermost dimension ({rows}), which must split into {ctas} slices of whole rows, each a multiple of {align} bytes{} (a slice is {slice_bytes} bytes)",
                if info.swizzle > 0 { " (the swizzle pattern's repeat)" } else { "" }
            ));
        }
        let map = info.map.expect("a tile copy has a tensor map");
        k.tensor_maps[map].box_dims[rank - 1] = rows / ctas;
        plan.loads[m].multicast = Some(ctas);
        let bars = &mut k.mbarriers[empty];
        if !bars.cluster_wide {
            bars.cluster_wide = true;
            bars.arrivals *= ctas;
        }
    }
    Ok(())
}
