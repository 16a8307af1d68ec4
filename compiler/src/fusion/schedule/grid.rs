//! The grid as a whole: `cluster` (CTAs launched in clusters along a grid axis) and
//! `persistent` (a resident grid walking the tiles, by tiles or by k steps).

use super::*;

/// `cluster(BIDx|BIDy|BIDz, ctas)`.
pub(super) fn cluster(f: &mut Fusion, a: &Args) -> SResult<()> {
    let on = match a.choice("on", ParallelType::parse)? {
        p if p.is_block() => p,
        p => {
            return a.err(
                format!(
                "cluster(...) takes a grid axis (BIDx, BIDy or BIDz) and a CTA count, got `{p}`"
            ),
                a.get("on").map(|g| g.at),
            )
        }
    };
    let ctas = a.int("ctas");
    if !(2..=crate::target::MAX_CLUSTER_CTAS).contains(&ctas) {
        return a.err(
            format!(
                "a cluster has 2 to {} CTAs (the portable maximum), got {ctas}",
                crate::target::MAX_CLUSTER_CTAS
            ),
            None,
        );
    }
    if f.cluster.is_some() {
        return a.err(
            "the kernel already has a cluster: clusters along one grid axis only",
            None,
        );
    }
    f.cluster = Some(Cluster {
        on,
        ctas,
        span: Some(a.span),
    });
    Ok(())
}

/// `persistent(BIDx|BIDy, group[, stream_k])`.
pub(super) fn persistent(f: &mut Fusion, a: &Args) -> SResult<()> {
    let along = match a.choice("along", ParallelType::parse)? {
        p @ (ParallelType::BIDx | ParallelType::BIDy) => p,
        p => {
            return a.err(
                format!("persistent(...) takes the grid axis its tile groups run along (BIDx or BIDy) and a group size, got `{p}`"),
                a.get("along").map(|g| g.at),
            )
        }
    };
    let group = a.int("group");
    if !(1..=crate::target::MAX_RASTER_GROUP).contains(&group) {
        return a.err(
            format!(
                "a raster group has 1 to {} tiles, got {group}",
                crate::target::MAX_RASTER_GROUP
            ),
            None,
        );
    }
    // A third argument splits the work by k steps instead of tiles.
    let stream_k = match a.ident("split") {
        None => false,
        Some(("stream_k", _)) => true,
        Some((n, sp)) => {
            return a.err(
                format!("persistent(...)'s third argument is `stream_k` (split the k steps of the tiles evenly over the CTAs), got `{n}`"),
                Some(sp),
            )
        }
    };
    if f.persistent.is_some() {
        return a.err("the kernel is already persistent", None);
    }
    f.persistent = Some(Persistent {
        along,
        group,
        stream_k,
        span: Some(a.span),
    });
    Ok(())
}
