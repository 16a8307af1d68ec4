//! The loop transforms: `split`, `merge` and `reorder` of a tensor's loop axes, `rfactor` of a
//! reduction, and `propagate`, which replays one tensor's transforms on every other.

use super::*;

/// `t.split(axis, factor[, inner|outer])`.
pub(super) fn split(f: &mut Fusion, t: TensorId, a: &Args) -> SResult<()> {
    let tname = &f.tensors[t].name;
    let ax = a.axis_of(f, t, "axis")?;
    let factor = a.int("factor");
    let factor_at = a.get("factor").map(|g| g.at);
    if factor < 1 {
        return a.err(
            format!("split factor must be at least 1, got {factor}"),
            factor_at,
        );
    }
    let inner_split = match a.ident("part") {
        None | Some(("inner", _)) => true,
        Some(("outer", _)) => false,
        Some((other, sp)) => {
            return a.err(
                format!("expected `inner` or `outer`, got `{other}`"),
                Some(sp),
            )
        }
    };
    let id = f.tensors[t].loop_domain[ax];
    if f.ids[id].parallel != ParallelType::Serial {
        return a.err(
            format!(
                "axis {ax} of `{tname}` is parallelized ({}); split it before parallelizing",
                f.ids[id].parallel
            ),
            None,
        );
    }
    if f.tensors[t].loop_domain.len() >= MAX_LOOP_AXES {
        return a.err(
            format!(
                "`{tname}` already has {} loop axes; at most {MAX_LOOP_AXES} are supported",
                f.tensors[t].loop_domain.len()
            ),
            None,
        );
    }
    let size = derivation_size(f, id) + 1;
    if size > MAX_DERIVATION_SIZE {
        return a.err(format!("this split would make an axis of `{tname}` stand for {size} splits and merges (counted along every path to its roots); at most {MAX_DERIVATION_SIZE} are supported"), None);
    }
    crate::fusion::transform::split(f, t, ax, factor, inner_split);
    Ok(())
}

/// `t.merge(a[, b])`.
pub(super) fn merge(f: &mut Fusion, t: TensorId, a: &Args) -> SResult<()> {
    let tname = &f.tensors[t].name;
    let ax = a.axis_of(f, t, "a")?;
    let bx = match a.get("b") {
        Some(g) => a.axis(f, t, g)?,
        None if ax + 1 >= f.tensors[t].loop_domain.len() => {
            return a.err(
                format!("axis {ax} is the last axis of `{tname}`: nothing to merge it with"),
                None,
            );
        }
        None => ax + 1,
    };
    if ax == bx {
        return a.err("cannot merge an axis with itself", None);
    }
    let (ia, ib) = (f.tensors[t].loop_domain[ax], f.tensors[t].loop_domain[bx]);
    let (ka, kb) = (f.ids[ia].kind, f.ids[ib].kind);
    if (ka == IterKind::Reduction) != (kb == IterKind::Reduction) {
        return a.err(
            format!("cannot merge a reduction axis with an iteration axis of `{tname}`"),
            None,
        );
    }
    for (x, i) in [(ax, ia), (bx, ib)] {
        if f.ids[i].parallel != ParallelType::Serial {
            return a.err(
                format!("axis {x} of `{tname}` is parallelized; merge before parallelizing"),
                None,
            );
        }
    }
    let size = derivation_size(f, ia) + derivation_size(f, ib) + 1;
    if size > MAX_DERIVATION_SIZE {
        return a.err(format!("this merge would make an axis of `{tname}` stand for {size} splits and merges (counted along every path to its roots); at most {MAX_DERIVATION_SIZE} are supported"), None);
    }
    crate::fusion::transform::merge(f, t, ax, bx);
    Ok(())
}

/// `t.reorder(p0, p1, ...)`: the new order of all loop axes, as old positions.
pub(super) fn reorder(f: &mut Fusion, t: TensorId, a: &Args) -> SResult<()> {
    let n = f.tensors[t].loop_domain.len();
    let given = a.all("old_positions");
    if given.len() != n {
        return a.err(
            format!(
                "give a permutation of all {n} loop axes of `{}` (new order, old positions)",
                f.tensors[t].name
            ),
            None,
        );
    }
    let mut perm = Vec::new();
    for &g in given {
        let ax = a.axis(f, t, g)?;
        if perm.contains(&ax) {
            return a.err(
                format!("axis {ax} appears twice in the permutation"),
                Some(g.at),
            );
        }
        perm.push(ax);
    }
    let old = f.tensors[t].loop_domain.clone();
    f.tensors[t].loop_domain = perm.iter().map(|&p| old[p]).collect();
    Ok(())
}

/// `t.rfactor(axis, ...)`: a new tensor `t_rf` reduces the listed axes, then `t` reduces it.
pub(super) fn rfactor(f: &mut Fusion, t: TensorId, a: &Args) -> SResult<()> {
    let tname = f.tensors[t].name.clone();
    if !matches!(
        f.tensors[t].definition.map(|d| &f.exprs[d].op),
        Some(Op::Reduce { .. })
    ) {
        return a.err(format!("`{tname}` is not a reduction"), None);
    }
    let mut axes = Vec::new();
    for &g in a.all("axis").iter().chain(a.all("more_axes")) {
        let ax = a.axis(f, t, g)?;
        let id = f.tensors[t].loop_domain[ax];
        if f.ids[id].kind != IterKind::Reduction {
            return a.err(
                format!("axis {ax} of `{tname}` is not a reduction axis"),
                Some(g.at),
            );
        }
        if axes.contains(&ax) {
            return a.err(format!("axis {ax} is listed twice"), Some(g.at));
        }
        axes.push(ax);
    }
    let remaining = f.tensors[t]
        .loop_domain
        .iter()
        .enumerate()
        .filter(|&(p, &id)| f.ids[id].kind == IterKind::Reduction && !axes.contains(&p))
        .count();
    if remaining == 0 {
        return a.err(format!("every reduction axis of `{tname}` is listed: leave at least one for `{tname}` to reduce"), None);
    }
    let name = format!("{tname}_rf");
    new_name(f, &name, a.span)?;
    crate::fusion::transform::rfactor(f, t, &axes, &name, a.span);
    Ok(())
}

/// `propagate(t)`: replays `t`'s loop transforms and parallel types on every computed tensor.
pub(super) fn propagate(f: &mut Fusion, a: &Args) -> SResult<()> {
    let (reference, n, sp) = a.tensor(f, "reference")?;
    if f.tensors[reference].is_input {
        return a.err(
            format!("`{n}` is an input: propagate from a computed tensor"),
            Some(sp),
        );
    }
    let targets: Vec<TensorId> = (f.tensor_ids())
        .filter(|&t| t != reference && !f.tensors[t].is_input)
        .collect();
    let needed = f.axes_between(reference);
    let axes = needed.len();
    let work = targets.len() * axes;
    let limit = crate::fusion::transform::MAX_PROPAGATE_WORK;
    if f.propagate_work + work > limit {
        return a.err(
            format!(
                "the schedule's propagates would replay more than {limit} axes in all (this one replays the {axes} axes of `{n}` on {} tensors, after {} replayed by the propagates before it); propagate once, after the transforms it should copy",
                targets.len(),
                f.propagate_work
            ),
            None,
        );
    }
    f.propagate_work += work;
    for t in targets {
        crate::fusion::transform::replay_along(f, reference, &needed, t);
    }
    Ok(())
}
