//! Where a tensor is computed among its consumers' loops: `inline_at`, `compute_at` and
//! `inline_most`.

use super::*;

/// `t.inline_at(pos)`.
pub(super) fn inline_at(f: &mut Fusion, t: TensorId, a: &Args) -> SResult<()> {
    let pos = a.int("pos");
    let n = f.tensors[t].loop_domain.len() as i64;
    if pos < 0 || pos > n {
        return a.err(
            format!(
                "position {pos} is out of range 0..={n} for `{}`",
                f.tensors[t].name
            ),
            a.get("pos").map(|g| g.at),
        );
    }
    f.tensors[t].inline = Inline::At(pos as usize);
    Ok(())
}

/// `p.compute_at(consumer, pos)`.
pub(super) fn compute_at(f: &mut Fusion, t: TensorId, a: &Args) -> SResult<()> {
    let tname = f.tensors[t].name.clone();
    let (c, cname, csp) = a.tensor(f, "consumer")?;
    if !f.uses(t).iter().any(|&e| f.exprs[e].output == c) {
        return a.err(format!("`{cname}` does not read `{tname}`"), Some(csp));
    }
    let pos = a.int("pos");
    let pos_at = a.get("pos").map(|g| g.at);
    let n = f.tensors[c].loop_domain.len() as i64;
    if pos < 0 || pos > n {
        return a.err(
            format!("position {pos} is out of range 0..={n} for `{cname}`"),
            pos_at,
        );
    }
    let pos = pos as usize;
    if f.tensors[t].loop_domain != f.tensors[t].root {
        // Already transformed (by `propagate` or its own splits): replaying the consumer again
        // would find none of its roots in the loop domain, so the loops are matched by how they
        // are derived instead.
        let k = shared_prefix(f, t, c, pos);
        if k < pos {
            let why = match f.tensors[t].loop_domain.get(k) {
                Some(_) => format!("axis {k} of `{tname}` is not the same loop as axis {k} of `{cname}` (they are split, merged or ordered differently)"),
                None => format!("`{tname}` has only {k} loop axes"),
            };
            return a.err(format!("`{tname}` is already transformed, so it is computed inside the loops of `{cname}` only where its loop axes are the same loops, in the same order: {why}; use a position of at most {k}, or write compute_at before the transforms of `{tname}` (before propagate)"), pos_at);
        }
        f.tensors[t].inline = Inline::At(k);
        return Ok(());
    }
    let map = replay(f, c, t);
    let shared: Vec<IterId> = f.tensors[c].loop_domain[..pos].to_vec();
    let k = f.tensors[t]
        .loop_domain
        .iter()
        .take_while(|id| {
            map.iter()
                .any(|(from, to)| to == *id && shared.contains(from))
        })
        .count();
    f.tensors[t].inline = Inline::At(k);
    Ok(())
}

/// `inline_most()` (every tensor) or `inline_most(t, ...)`.
pub(super) fn inline_most(f: &mut Fusion, a: &Args) -> SResult<()> {
    let listed = a.all("tensors");
    let targets: Vec<TensorId> = if listed.is_empty() {
        f.tensor_ids().collect()
    } else {
        listed
            .iter()
            .map(|&g| a.tensor_of(f, g).map(|(t, _, _)| t))
            .collect::<SResult<_>>()?
    };
    for t in targets {
        f.tensors[t].inline = Inline::Most;
    }
    Ok(())
}
