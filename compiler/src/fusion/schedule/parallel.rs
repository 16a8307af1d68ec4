//! Parallelization: `parallelize` binds a loop axis to a parallel type, `vectorize` is its
//! shorthand for vector lanes.

use super::*;

/// `t.parallelize(axis, type)`.
pub(super) fn parallelize(f: &mut Fusion, t: TensorId, a: &Args) -> SResult<()> {
    let tname = &f.tensors[t].name;
    let ax = a.axis_of(f, t, "axis")?;
    let p = a.choice("type", ParallelType::parse)?;
    let psp = a.get("type").map(|g| g.at);
    if p == ParallelType::Bulk
        && f.tensors[t].load == LoadKind::Plain
        && f.tensors[t].store == LoadKind::Plain
    {
        return a.err(format!("the Bulk parallel type marks the box of a TMA or bulk copy, and `{tname}` is not one (cache it with cache_after(x, memory=shared, load=tma), or write an output with cache_before(y, memory=shared, store=tma))"), psp);
    }
    let id = f.tensors[t].loop_domain[ax];
    // A box spans several Bulk axes and a nest may unroll several loops; other parallel types
    // bind one axis each.
    if !matches!(
        p,
        ParallelType::Serial | ParallelType::Bulk | ParallelType::Mma | ParallelType::Unroll
    ) {
        if let Some(other) = f.tensors[t]
            .loop_domain
            .iter()
            .position(|&i| i != id && f.ids[i].parallel == p)
        {
            return a.err(
                format!("axis {other} of `{tname}` is already bound to {p}"),
                psp,
            );
        }
    }
    if p == ParallelType::Vectorize && extent_const(f, id).is_none() {
        return a.err(
            format!("axis {ax} of `{tname}` has no constant extent; split it by 2, 4 or 8 and vectorize the inner axis"),
            psp,
        );
    }
    // A reduction axis bound to blockIdx makes a grid reduction: `passes::grid` checks what it
    // needs (a scalar output nothing else in the kernel reads).
    f.ids[id].parallel = p;
    Ok(())
}

/// `t.vectorize(axis)`.
pub(super) fn vectorize(f: &mut Fusion, t: TensorId, a: &Args) -> SResult<()> {
    let ax = a.axis_of(f, t, "axis")?;
    let id = f.tensors[t].loop_domain[ax];
    if extent_const(f, id).is_none() {
        return a.err(
            format!(
                "axis {ax} of `{}` has no constant extent; split it first",
                f.tensors[t].name
            ),
            None,
        );
    }
    f.ids[id].parallel = ParallelType::Vectorize;
    Ok(())
}
