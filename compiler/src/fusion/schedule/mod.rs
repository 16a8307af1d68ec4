//! Applies a schedule (the `schedule { ... }` block) to a fusion: caching, loop transformations,
//! parallelization, memory types and inlining positions. Each statement is checked as it is
//! applied; an error names the tensor, the axis and the rule.

use super::*;
use crate::diag::Diagnostic;
use crate::frontend::ast::{self, Arg, SchedStmt};

pub(crate) use super::transform::*;

mod args;
use args::{axis, cache_args, int_of, name_arg, tensor, warp_specialized, Args, CacheArgs};

type SResult<T> = Result<T, Diagnostic>;

pub fn apply(f: &mut Fusion, stmts: &[SchedStmt]) -> SResult<()> {
    match apply_all(f, stmts).into_iter().next() {
        Some(first) => Err(first),
        None => Ok(()),
    }
}

/// Applies every statement and returns every independent error (none: the whole schedule
/// applied). A statement that fails leaves the fusion as it was and is skipped; so is every
/// later statement that names a tensor a failed statement named (its errors would only follow
/// from the first one). Axes made by a statement remember it ([`IterDomain::stmt`]), so an error
/// found later, in a pass, can point at the statement that made the axis.
pub fn apply_all(f: &mut Fusion, stmts: &[SchedStmt]) -> Vec<Diagnostic> {
    let mut errors = Vec::new();
    let mut failed: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for st in stmts {
        let (loc, names) = stmt_names(st);
        if names.iter().any(|n| failed.contains(n)) {
            continue;
        }
        // The fusion as it was, to restore when the statement fails: a copy of the whole
        // fusion, so only for statements that may fail after changing it (a copy per statement
        // made long schedules of large fusions quadratic). Debug builds copy for every statement
        // and check that the others did leave it untouched.
        let keep_copy = cfg!(debug_assertions) || !checks_before_changing(st);
        let before = keep_copy.then(|| f.clone());
        let first_new = f.ids.len();
        match apply_one(f, st) {
            Ok(()) => {
                for id in &mut f.ids[first_new..] {
                    id.stmt = Some(loc);
                }
            }
            Err(e) => {
                if let Some(before) = before {
                    debug_assert!(
                        !checks_before_changing(st) || format!("{f:?}") == format!("{before:?}"),
                        "a failed `{}` changed the fusion",
                        names.first().copied().unwrap_or("schedule statement")
                    );
                    *f = before;
                }
                let bound = match st {
                    SchedStmt::Bind { name, .. } => Some(name.as_str()),
                    _ => None,
                };
                failed.extend(
                    names
                        .iter()
                        .copied()
                        .filter(|n| Some(*n) == bound || f.tensors.iter().any(|t| t.name == *n)),
                );
                errors.push(e);
            }
        }
    }
    errors
}

/// Whether a statement, when it fails, has not changed the fusion: every check comes before
/// the first change (the loop transforms, parallelization, memory, inlining, `propagate`).
/// Caching and `rfactor` build new tensors as they go, `circular_buffer` checks late: those
/// are undone from a copy.
fn checks_before_changing(st: &SchedStmt) -> bool {
    match st {
        SchedStmt::Method { method, .. } => matches!(
            method.as_str(),
            "split"
                | "merge"
                | "reorder"
                | "parallelize"
                | "vectorize"
                | "set_memory"
                | "inline_at"
                | "compute_at"
        ),
        SchedStmt::Call { func, .. } => {
            matches!(
                func.as_str(),
                "inline_most" | "propagate" | "cluster" | "persistent"
            )
        }
        SchedStmt::Bind { .. } => false,
    }
}

/// A statement's span and the names it mentions (the tensor it acts on, names in its
/// arguments, the name it binds).
fn stmt_names(st: &SchedStmt) -> (Span, Vec<&str>) {
    fn arg_names<'a>(args: &'a [Arg], out: &mut Vec<&'a str>) {
        for a in args {
            let e = match a {
                Arg::Pos(e) | Arg::Named { value: e, .. } => e,
            };
            if let ast::Expr::Name(n, _) = e {
                out.push(n.as_str());
            }
        }
    }
    let mut names = Vec::new();
    let loc = match st {
        SchedStmt::Bind {
            name, args, loc, ..
        } => {
            names.push(name.as_str());
            arg_names(args, &mut names);
            loc.0
        }
        SchedStmt::Method {
            tensor, args, loc, ..
        } => {
            names.push(tensor.as_str());
            arg_names(args, &mut names);
            loc.0
        }
        SchedStmt::Call { args, loc, .. } => {
            arg_names(args, &mut names);
            loc.0
        }
    };
    (loc, names)
}

fn untransformed(f: &Fusion, t: TensorId, a: &Args) -> SResult<()> {
    if f.tensors[t].loop_domain != f.tensors[t].root
        || f.tensors[t]
            .root
            .iter()
            .any(|&i| f.ids[i].parallel != ParallelType::Serial)
    {
        return a.err(
            format!("`{}` is already scheduled: cache it before splitting, merging, reordering or parallelizing it", f.tensors[t].name),
            None,
        );
    }
    Ok(())
}

fn new_name(f: &Fusion, name: &str, span: Span) -> SResult<()> {
    crate::fusion::build::check_identifier(name, span)?;
    if f.tensor_by_name(name).is_some() {
        return Err(Diagnostic::new(
            format!("`{name}` is already defined"),
            Some(span),
        ));
    }
    Ok(())
}

/// Fresh root axes joined to the logical axes of `like` (reduction axes dropped).
pub(super) fn fresh_logical_root(f: &mut Fusion, like: TensorId) -> Vec<IterId> {
    let logical = f.logical(like);
    logical
        .into_iter()
        .map(|id| {
            let (kind, ext) = (f.ids[id].kind, f.ids[id].root_extent.clone());
            let new = f.new_id(kind, IterOrigin::Root, ext);
            f.union(new, id);
            new
        })
        .collect()
}

fn apply_one(f: &mut Fusion, st: &SchedStmt) -> SResult<()> {
    match st {
        SchedStmt::Bind {
            name,
            func,
            args,
            loc,
        } => {
            let a = Args::new(format!("{name} = {func}(...)"), args, loc.0);
            a.count(1, 1)?;
            let (src_name, src_span) = a.ident(0)?;
            let src = tensor(f, src_name, src_span)?;
            new_name(f, name, loc.0)?;
            let CacheArgs {
                memory,
                load,
                store,
                fence,
                swizzle,
            } = cache_args(&a)?;
            if let Some((_, sp)) = swizzle {
                if load != LoadKind::Tma && store != LoadKind::Tma {
                    return a.err(
                        "swizzle= lays out a TMA box in shared memory: use it with load=tma (cache_after) or store=tma (cache_before)",
                        Some(sp),
                    );
                }
            }
            let swizzle = swizzle.map(|s| s.0).unwrap_or(0);
            let memory = memory.unwrap_or(MemoryType::Local);
            if load != LoadKind::Plain && func != "cache_after" {
                return a.err(
                    format!(
                        "load={} fills a cache from global memory: use it with cache_after",
                        load.name()
                    ),
                    None,
                );
            }
            if (store != LoadKind::Plain || fence.is_some()) && func != "cache_before" {
                return a.err(
                    "store= and fence= say how an output is written from its cache: use them with cache_before",
                    None,
                );
            }
            match func.as_str() {
                "cache_after" => {
                    if load != LoadKind::Plain {
                        if memory != MemoryType::Shared {
                            return a.err(
                                format!(
                                    "load={} copies into shared memory: add memory=shared",
                                    load.name()
                                ),
                                None,
                            );
                        }
                        if !f.tensors[src].is_input || f.tensors[src].memory != MemoryType::Global {
                            return a.err(
                                format!("load={} reads a fusion input in global memory, and `{src_name}` is not one", load.name()),
                                Some(src_span),
                            );
                        }
                    }
                    if f.rank(src) == 0 {
                        return a.err(
                            format!(
                                "`{src_name}` is a scalar; only tensors with axes can be cached"
                            ),
                            None,
                        );
                    }
                    let root = fresh_logical_root(f, src);
                    let uses = f.uses(src);
                    let t = push_tensor(f, name, f.tensors[src].dtype, root, memory, Some(loc.0));
                    f.define(Op::Set, vec![Operand::Tensor(src)], t, Some(loc.0));
                    f.tensors[t].load = load;
                    f.tensors[t].swizzle = swizzle;
                    for u in uses {
                        for op in &mut f.exprs[u].inputs {
                            if *op == Operand::Tensor(src) {
                                *op = Operand::Tensor(t);
                            }
                        }
                    }
                    Ok(())
                }
                "cache_before" => {
                    let Some(def) = f.tensors[src].definition else {
                        return a.err(
                            format!(
                                "`{src_name}` is an input; cache_before needs a computed tensor"
                            ),
                            None,
                        );
                    };
                    untransformed(f, src, &a)?;
                    if store == LoadKind::Tma {
                        if memory != MemoryType::Shared {
                            return a.err(
                                "store=tma copies from shared memory: add memory=shared",
                                None,
                            );
                        }
                        if !f.tensors[src].is_output {
                            return a.err(
                                format!("store=tma writes a fusion output in global memory, and `{src_name}` is not one"),
                                Some(src_span),
                            );
                        }
                    } else if fence.is_some() {
                        return a.err(
                            "fence= places the fence before a TMA store: add store=tma",
                            None,
                        );
                    }
                    // The new tensor takes over the definition (and the root, reduction axes
                    // included); the original becomes a copy of it.
                    let old_root = f.tensors[src].root.clone();
                    let t =
                        push_tensor(f, name, f.tensors[src].dtype, old_root, memory, Some(loc.0));
                    f.exprs[def].output = t;
                    f.tensors[t].definition = Some(def);
                    let new_root = fresh_logical_root(f, t);
                    f.tensors[src].root = new_root.clone();
                    f.tensors[src].loop_domain = new_root;
                    f.define(Op::Set, vec![Operand::Tensor(t)], src, Some(loc.0));
                    f.tensors[src].store = store;
                    f.tensors[src].fence = fence.unwrap_or_default();
                    f.tensors[src].swizzle = swizzle;
                    Ok(())
                }
                other => a.err(
                    format!("unknown function `{other}` (expected cache_after or cache_before)"),
                    None,
                ),
            }
        }
        SchedStmt::Method {
            tensor: tname,
            method,
            args,
            loc,
        } => {
            let t = tensor(f, tname, loc.0)?;
            let a = Args::new(format!("{tname}.{method}"), args, loc.0);
            if f.tensors[t].is_input && method != "set_memory" {
                return a.err(
                    format!("`{tname}` is an input and is never computed; schedule a cache of it (x_c = cache_after({tname}))"),
                    None,
                );
            }
            match method.as_str() {
                "split" => {
                    a.count(2, 3)?;
                    a.no_named()?;
                    let ax = axis(f, t, &a, 0)?;
                    let factor = a.int(1)?;
                    if factor < 1 {
                        return a.err(format!("split factor must be at least 1, got {factor}"), Some(a.pos[1].loc()));
                    }
                    let inner_split = if a.pos.len() == 3 {
                        match a.ident(2)?.0 {
                            "inner" => true,
                            "outer" => false,
                            other => return a.err(format!("expected `inner` or `outer`, got `{other}`"), Some(a.pos[2].loc())),
                        }
                    } else {
                        true
                    };
                    let id = f.tensors[t].loop_domain[ax];
                    if f.ids[id].parallel != ParallelType::Serial {
                        return a.err(format!("axis {ax} of `{tname}` is parallelized ({}); split it before parallelizing", f.ids[id].parallel), None);
                    }
                    if f.tensors[t].loop_domain.len() >= MAX_LOOP_AXES {
                        return a.err(format!("`{tname}` already has {} loop axes; at most {MAX_LOOP_AXES} are supported", f.tensors[t].loop_domain.len()), None);
                    }
                    let size = derivation_size(f, id) + 1;
                    if size > MAX_DERIVATION_SIZE {
                        return a.err(format!("this split would make an axis of `{tname}` stand for {size} splits and merges (counted along every path to its roots); at most {MAX_DERIVATION_SIZE} are supported"), None);
                    }
                    split(f, t, ax, factor, inner_split);
                    Ok(())
                }
                "merge" => {
                    a.count(1, 2)?;
                    a.no_named()?;
                    let ax = axis(f, t, &a, 0)?;
                    let bx = if a.pos.len() == 2 {
                        axis(f, t, &a, 1)?
                    } else {
                        if ax + 1 >= f.tensors[t].loop_domain.len() {
                            return a.err(format!("axis {ax} is the last axis of `{tname}`: nothing to merge it with"), None);
                        }
                        ax + 1
                    };
                    if ax == bx {
                        return a.err("cannot merge an axis with itself", None);
                    }
                    let (ia, ib) = (f.tensors[t].loop_domain[ax], f.tensors[t].loop_domain[bx]);
                    let (ka, kb) = (f.ids[ia].kind, f.ids[ib].kind);
                    if (ka == IterKind::Reduction) != (kb == IterKind::Reduction) {
                        return a.err(format!("cannot merge a reduction axis with an iteration axis of `{tname}`"), None);
                    }
                    for (x, i) in [(ax, ia), (bx, ib)] {
                        if f.ids[i].parallel != ParallelType::Serial {
                            return a.err(format!("axis {x} of `{tname}` is parallelized; merge before parallelizing"), None);
                        }
                    }
                    let size = derivation_size(f, ia) + derivation_size(f, ib) + 1;
                    if size > MAX_DERIVATION_SIZE {
                        return a.err(format!("this merge would make an axis of `{tname}` stand for {size} splits and merges (counted along every path to its roots); at most {MAX_DERIVATION_SIZE} are supported"), None);
                    }
                    merge(f, t, ax, bx);
                    Ok(())
                }
                "reorder" => {
                    a.no_named()?;
                    let n = f.tensors[t].loop_domain.len();
                    if a.pos.len() != n {
                        return a.err(format!("give a permutation of all {n} loop axes of `{tname}` (new order, old positions)"), None);
                    }
                    let mut perm = Vec::new();
                    for i in 0..n {
                        let ax = axis(f, t, &a, i)?;
                        if perm.contains(&ax) {
                            return a.err(format!("axis {ax} appears twice in the permutation"), Some(a.pos[i].loc()));
                        }
                        perm.push(ax);
                    }
                    let old = f.tensors[t].loop_domain.clone();
                    f.tensors[t].loop_domain = perm.iter().map(|&p| old[p]).collect();
                    Ok(())
                }
                "parallelize" => {
                    a.count(2, 2)?;
                    a.no_named()?;
                    let ax = axis(f, t, &a, 0)?;
                    let (pname, psp) = a.ident(1)?;
                    let p = ParallelType::parse(pname).ok_or_else(|| {
                        Diagnostic::new(
                            format!("{}: unknown parallel type `{pname}` (BIDx, BIDy, BIDz, TIDx, TIDy, TIDz, Vectorize, Unroll, Serial, Bulk, Mma)", a.what),
                            Some(psp),
                        )
                    })?;
                    if p == ParallelType::Bulk && f.tensors[t].load == LoadKind::Plain && f.tensors[t].store == LoadKind::Plain {
                        return a.err(format!("the Bulk parallel type marks the box of a TMA or bulk copy, and `{tname}` is not one (cache it with cache_after(x, memory=shared, load=tma), or write an output with cache_before(y, memory=shared, store=tma))"), Some(psp));
                    }
                    let id = f.tensors[t].loop_domain[ax];
                    // A box spans several Bulk axes and a nest may unroll several loops; other
                    // parallel types bind one axis each.
                    if !matches!(p, ParallelType::Serial | ParallelType::Bulk | ParallelType::Mma | ParallelType::Unroll) {
                        if let Some(other) = f.tensors[t].loop_domain.iter().position(|&i| i != id && f.ids[i].parallel == p) {
                            return a.err(format!("axis {other} of `{tname}` is already bound to {p}"), Some(psp));
                        }
                    }
                    if p == ParallelType::Vectorize && extent_const(f, id).is_none() {
                        return a.err(
                            format!("axis {ax} of `{tname}` has no constant extent; split it by 2, 4 or 8 and vectorize the inner axis"),
                            Some(psp),
                        );
                    }
                    if p.is_block() && f.ids[id].kind == IterKind::Reduction {
                        return a.err(format!("axis {ax} of `{tname}` is a reduction axis: reductions across blocks (grid reductions) are not supported"), Some(psp));
                    }
                    f.ids[id].parallel = p;
                    Ok(())
                }
                "vectorize" => {
                    a.count(1, 1)?;
                    a.no_named()?;
                    let ax = axis(f, t, &a, 0)?;
                    let id = f.tensors[t].loop_domain[ax];
                    if extent_const(f, id).is_none() {
                        return a.err(format!("axis {ax} of `{tname}` has no constant extent; split it first"), None);
                    }
                    f.ids[id].parallel = ParallelType::Vectorize;
                    Ok(())
                }
                "set_memory" => {
                    a.count(1, 1)?;
                    a.no_named()?;
                    let (m, msp) = a.ident(0)?;
                    let m = MemoryType::parse(m).ok_or_else(|| {
                        Diagnostic::new(format!("{}: unknown memory `{m}` (global, shared or local)", a.what), Some(msp))
                    })?;
                    if (f.tensors[t].is_input || f.tensors[t].is_output) && m != MemoryType::Global {
                        return a.err(format!("`{tname}` is a fusion input or output and lives in global memory; cache it to use {}", m.name()), Some(msp));
                    }
                    if m == MemoryType::Global && has_rfactor_axes(f, t) {
                        return a.err(
                            format!("`{tname}` holds partial reductions (an rfactor tensor): it lives in registers or shared memory, not global memory"),
                            Some(msp),
                        );
                    }
                    f.tensors[t].memory = m;
                    Ok(())
                }
                "inline_at" => {
                    a.count(1, 1)?;
                    a.no_named()?;
                    let pos = a.int(0)?;
                    let n = f.tensors[t].loop_domain.len() as i64;
                    if pos < 0 || pos > n {
                        return a.err(format!("position {pos} is out of range 0..={n} for `{tname}`"), Some(a.pos[0].loc()));
                    }
                    f.tensors[t].inline = Inline::At(pos as usize);
                    Ok(())
                }
                "compute_at" => {
                    a.count(2, 2)?;
                    a.no_named()?;
                    let (cname, csp) = a.ident(0)?;
                    let c = tensor(f, cname, csp)?;
                    if !f.uses(t).iter().any(|&e| f.exprs[e].output == c) {
                        return a.err(format!("`{cname}` does not read `{tname}`"), Some(csp));
                    }
                    let pos = a.int(1)?;
                    let n = f.tensors[c].loop_domain.len() as i64;
                    if pos < 0 || pos > n {
                        return a.err(format!("position {pos} is out of range 0..={n} for `{cname}`"), Some(a.pos[1].loc()));
                    }
                    let pos = pos as usize;
                    if f.tensors[t].loop_domain != f.tensors[t].root {
                        // Already transformed (by `propagate` or its own splits): replaying the
                        // consumer again would find none of its roots in the loop domain, so the
                        // loops are matched by how they are derived instead.
                        let k = shared_prefix(f, t, c, pos);
                        if k < pos {
                            let why = match f.tensors[t].loop_domain.get(k) {
                                Some(_) => format!("axis {k} of `{tname}` is not the same loop as axis {k} of `{cname}` (they are split, merged or ordered differently)"),
                                None => format!("`{tname}` has only {k} loop axes"),
                            };
                            return a.err(format!("`{tname}` is already transformed, so it is computed inside the loops of `{cname}` only where its loop axes are the same loops, in the same order: {why}; use a position of at most {k}, or write compute_at before the transforms of `{tname}` (before propagate)"), Some(a.pos[1].loc()));
                        }
                        f.tensors[t].inline = Inline::At(k);
                        return Ok(());
                    }
                    let map = replay(f, c, t);
                    let shared: Vec<IterId> = f.tensors[c].loop_domain[..pos].to_vec();
                    let k = f.tensors[t]
                        .loop_domain
                        .iter()
                        .take_while(|id| map.iter().any(|(from, to)| to == *id && shared.contains(from)))
                        .count();
                    f.tensors[t].inline = Inline::At(k);
                    Ok(())
                }
                "rfactor" => {
                    a.no_named()?;
                    if !matches!(f.tensors[t].definition.map(|d| &f.exprs[d].op), Some(Op::Reduce { .. })) {
                        return a.err(format!("`{tname}` is not a reduction"), None);
                    }
                    if a.pos.is_empty() {
                        return a.err("give the loop axes the new tensor reduces", None);
                    }
                    let mut axes = Vec::new();
                    for i in 0..a.pos.len() {
                        let ax = axis(f, t, &a, i)?;
                        let id = f.tensors[t].loop_domain[ax];
                        if f.ids[id].kind != IterKind::Reduction {
                            return a.err(format!("axis {ax} of `{tname}` is not a reduction axis"), Some(a.pos[i].loc()));
                        }
                        if axes.contains(&ax) {
                            return a.err(format!("axis {ax} is listed twice"), Some(a.pos[i].loc()));
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
                    new_name(f, &name, loc.0)?;
                    rfactor(f, t, &axes, &name, loc.0);
                    Ok(())
                }
                "circular_buffer" => {
                    a.count(1, 3)?;
                    let stages = a.int(0)?;
                    let mut prefetch = None;
                    let mut war = WarMode::Sync;
                    let mut ws = None;
                    for e in &a.pos[1..] {
                        match e {
                            ast::Expr::Call { func, args, loc } if func == "warp_specialized" => {
                                ws = Some(warp_specialized(&a, args, loc.0)?);
                            }
                            e => match int_of(e) {
                                Some(v) if prefetch.is_none() => prefetch = Some((v, e.loc())),
                                _ => return a.err("expected the prefetch distance (an integer) or warp_specialized(...)", Some(e.loc())),
                            },
                        }
                    }
                    for (n, v, sp) in &a.named {
                        match *n {
                            "prefetch" => {
                                prefetch = Some((int_of(v).ok_or(()).or_else(|_| a.err("prefetch must be an integer", Some(*sp)))?, *sp))
                            }
                            "war" => {
                                war = name_arg(&a, v, *sp, "write-after-read mode", "sync or mbarrier", |k| match k {
                                    "sync" => Some(WarMode::Sync),
                                    "mbarrier" => Some(WarMode::Mbarrier),
                                    _ => None,
                                })?
                            }
                            other => return a.err(format!("unknown argument `{other}` (prefetch, war)"), Some(*sp)),
                        }
                    }
                    if let (Some(_), Some((_, sp))) = (ws, prefetch) {
                        return a.err("a warp-specialized pipeline has no prefetch distance: the producer warp runs ahead until every one of the stages is full", Some(sp));
                    }
                    if ws.is_some() {
                        // Consumers release slots through empty mbarriers.
                        war = WarMode::Mbarrier;
                        if f.tensors[t].load == LoadKind::Plain {
                            return a.err(format!("warp_specialized: `{tname}` is filled by plain loads; a producer warp issues TMA or bulk copies (load=tma|bulk)"), None);
                        }
                    }
                    let prefetch = prefetch.map(|p| p.0).unwrap_or(stages - 1);
                    let tensor = &f.tensors[t];
                    let is_cache = tensor.definition.is_some_and(|d| {
                        f.exprs[d].op == Op::Set
                            && f.exprs[d].input_tensors().next().is_some_and(|s| f.tensors[s].is_input)
                    });
                    if !is_cache || tensor.memory == MemoryType::Global {
                        return a.err(format!("`{tname}` is not a cache of a fusion input: circular buffering pipelines the loads of a cache made with cache_after(x, memory=shared|local, load=...)"), None);
                    }
                    if war == WarMode::Mbarrier && tensor.load == LoadKind::Plain {
                        return a.err(format!("war=mbarrier: `{tname}` is filled by plain loads of every thread, which a block barrier must order; empty mbarriers track slots filled by TMA or bulk copies (load=tma|bulk)"), None);
                    }
                    if stages < 2 {
                        return a.err(format!("`{tname}` needs at least 2 stages to be circular-buffered, got {stages}"), Some(a.pos[0].loc()));
                    }
                    if stages > 32 {
                        return a.err(format!("`{tname}`: at most 32 stages, got {stages}"), Some(a.pos[0].loc()));
                    }
                    if prefetch < 0 || prefetch >= stages {
                        return a.err(format!("prefetch of `{tname}` must be in 0..{stages} (0 <= prefetch < stages), got {prefetch}"), None);
                    }
                    if f.tensors[t].circular.is_some() {
                        return a.err(format!("`{tname}` is already circular-buffered"), None);
                    }
                    f.tensors[t].circular = Some(CircularBuffer { stages, prefetch, war, ws, span: loc.0 });
                    Ok(())
                }
                other => a.err(
                    format!("unknown schedule method `{other}` (split, merge, reorder, parallelize, vectorize, set_memory, inline_at, compute_at, rfactor, circular_buffer)"),
                    None,
                ),
            }
        }
        SchedStmt::Call { func, args, loc } => {
            let a = Args::new(format!("{func}(...)"), args, loc.0);
            match func.as_str() {
                "inline_most" => {
                    a.no_named()?;
                    let targets: Vec<TensorId> = if a.pos.is_empty() {
                        f.tensor_ids().collect()
                    } else {
                        (0..a.pos.len())
                            .map(|i| a.ident(i).and_then(|(n, sp)| tensor(f, n, sp)))
                            .collect::<SResult<_>>()?
                    };
                    for t in targets {
                        f.tensors[t].inline = Inline::Most;
                    }
                    Ok(())
                }
                "propagate" => {
                    a.count(1, 1)?;
                    a.no_named()?;
                    let (n, sp) = a.ident(0)?;
                    let reference = tensor(f, n, sp)?;
                    if f.tensors[reference].is_input {
                        return a.err(
                            format!("`{n}` is an input: propagate from a computed tensor"),
                            Some(sp),
                        );
                    }
                    for t in f.tensor_ids() {
                        if t != reference && !f.tensors[t].is_input {
                            replay(f, reference, t);
                        }
                    }
                    Ok(())
                }
                "cluster" => {
                    a.count(2, 2)?;
                    a.no_named()?;
                    let (n, sp) = a.ident(0)?;
                    let on = match ParallelType::parse(n) {
                        Some(p) if p.is_block() => p,
                        _ => {
                            return a.err(
                                format!("cluster(...) takes a grid axis (BIDx, BIDy or BIDz) and a CTA count, got `{n}`"),
                                Some(sp),
                            )
                        }
                    };
                    let ctas = a.int(1)?;
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
                    f.cluster = Some(super::Cluster {
                        on,
                        ctas,
                        span: Some(loc.0),
                    });
                    Ok(())
                }
                "persistent" => {
                    a.count(2, 3)?;
                    a.no_named()?;
                    let (n, sp) = a.ident(0)?;
                    let along = match ParallelType::parse(n) {
                        Some(p @ (ParallelType::BIDx | ParallelType::BIDy)) => p,
                        _ => {
                            return a.err(
                                format!("persistent(...) takes the grid axis its tile groups run along (BIDx or BIDy) and a group size, got `{n}`"),
                                Some(sp),
                            )
                        }
                    };
                    let group = a.int(1)?;
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
                    let stream_k = match a.pos.len() {
                        3 => match a.ident(2)? {
                            ("stream_k", _) => true,
                            (n, sp) => {
                                return a.err(
                                    format!("persistent(...)'s third argument is `stream_k` (split the k steps of the tiles evenly over the CTAs), got `{n}`"),
                                    Some(sp),
                                )
                            }
                        },
                        _ => false,
                    };
                    if f.persistent.is_some() {
                        return a.err("the kernel is already persistent", None);
                    }
                    f.persistent = Some(super::Persistent {
                        along,
                        group,
                        stream_k,
                        span: Some(loc.0),
                    });
                    Ok(())
                }
                "cache_after" | "cache_before" => {
                    a.err(format!("bind the result: `name = {func}(tensor)`"), None)
                }
                other => a.err(
                    format!(
                        "unknown schedule function `{other}` (inline_most, propagate, cluster, persistent)"
                    ),
                    None,
                ),
            }
        }
    }
}

pub(super) fn push_tensor(
    f: &mut Fusion,
    name: &str,
    dtype: DType,
    root: Vec<IterId>,
    memory: MemoryType,
    span: Option<Span>,
) -> TensorId {
    f.tensors.push(Tensor {
        name: name.to_string(),
        dtype,
        loop_domain: root.clone(),
        root,
        memory,
        inline: Inline::Most,
        definition: None,
        is_input: false,
        is_output: false,
        span,
        load: LoadKind::Plain,
        circular: None,
        store: LoadKind::Plain,
        fence: FenceMode::Analysis,
        swizzle: 0,
        value: None,
    });
    TensorId::new(f.tensors.len() - 1)
}
