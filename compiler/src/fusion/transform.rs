//! The loop-domain transformations a schedule applies (split, merge, replay of one tensor's
//! transformations on another, rfactor) and the facts about derived axes they rest on
//! (extents, the size of an axis's derivation, the loops two tensors share). `schedule` parses
//! and checks the statements and calls these.

use super::*;
use rustc_hash::FxHashMap as HashMap;

/// Constant extent of an axis, when it has one.
pub fn extent_const(f: &Fusion, id: IterId) -> Option<i64> {
    extent_of(f, id).as_const()
}

/// Splits loop axis `ax` of `t` into (outer, inner).
pub(crate) fn split(
    f: &mut Fusion,
    t: TensorId,
    ax: usize,
    factor: i64,
    inner_split: bool,
) -> (IterId, IterId) {
    let id = f.tensors[t].loop_domain[ax];
    let kind = f.ids[id].kind;
    let o = f.new_id(
        kind,
        IterOrigin::Split {
            parent: id,
            factor,
            inner_split,
            is_outer: true,
        },
        None,
    );
    let i = f.new_id(
        kind,
        IterOrigin::Split {
            parent: id,
            factor,
            inner_split,
            is_outer: false,
        },
        None,
    );
    f.tensors[t].loop_domain.splice(ax..=ax, [o, i]);
    (o, i)
}

/// Merges loop axes `ax` (outer) and `bx` (inner) of `t`; the result takes the lower position.
pub(crate) fn merge(f: &mut Fusion, t: TensorId, ax: usize, bx: usize) -> IterId {
    let (ia, ib) = (f.tensors[t].loop_domain[ax], f.tensors[t].loop_domain[bx]);
    let kind = if f.ids[ia].kind == IterKind::Broadcast && f.ids[ib].kind == IterKind::Broadcast {
        IterKind::Broadcast
    } else if f.ids[ia].kind == IterKind::Reduction {
        IterKind::Reduction
    } else {
        IterKind::Iteration
    };
    let m = f.new_id(
        kind,
        IterOrigin::Merge {
            outer: ia,
            inner: ib,
        },
        None,
    );
    let at = ax.min(bx);
    let ld = &mut f.tensors[t].loop_domain;
    ld.retain(|&x| x != ia && x != ib);
    ld.insert(at, m);
    m
}

/// Replays the transformations and parallel types of `reference` onto `target`, matching root
/// axes by class. Axes of `target` that `reference` lacks keep their place. Returns the map from
/// `reference`'s axes to `target`'s.
pub(crate) fn replay(
    f: &mut Fusion,
    reference: TensorId,
    target: TensorId,
) -> Vec<(IterId, IterId)> {
    let needed = f.axes_between(reference);
    replay_along(f, reference, &needed, target)
}

/// [`replay`] given `needed`, `reference`'s axes between its root and loop domain in creation
/// order ([`Fusion::axes_between`]): one walk of the reference for a replay on every tensor.
pub(crate) fn replay_along(
    f: &mut Fusion,
    reference: TensorId,
    needed: &[IterId],
    target: TensorId,
) -> Vec<(IterId, IterId)> {
    let mut map: HashMap<IterId, IterId> = HashMap::default();
    let target_root = f.tensors[target].root.clone();
    for &r in &f.tensors[reference].root.clone() {
        let c = f.class_of(r);
        if let Some(&u) = target_root.iter().find(|&&u| f.class_of(u) == c) {
            map.insert(r, u);
        }
    }
    for &id in needed {
        match f.ids[id].origin.clone() {
            IterOrigin::Root => {}
            IterOrigin::Split {
                parent,
                factor,
                inner_split,
                is_outer,
            } => {
                if !is_outer || map.contains_key(&id) {
                    continue;
                }
                let Some(&u) = map.get(&parent) else { continue };
                let Some(ax) = f.tensors[target].loop_domain.iter().position(|&x| x == u) else {
                    continue;
                };
                let sibling = f.split_inner(id);
                let (o, i) = split(f, target, ax, factor, inner_split);
                map.insert(id, o);
                if let Some(s) = sibling {
                    map.insert(s, i);
                }
            }
            IterOrigin::Merge { outer, inner } => {
                let (Some(&uo), Some(&ui)) = (map.get(&outer), map.get(&inner)) else {
                    continue;
                };
                let ld = &f.tensors[target].loop_domain;
                let (Some(ao), Some(ai)) = (
                    ld.iter().position(|&x| x == uo),
                    ld.iter().position(|&x| x == ui),
                ) else {
                    continue;
                };
                let kinds_ok = (f.ids[uo].kind == IterKind::Reduction)
                    == (f.ids[ui].kind == IterKind::Reduction);
                if !kinds_ok {
                    continue;
                }
                let m = merge(f, target, ao, ai);
                map.insert(id, m);
            }
        }
    }
    // Order target's loop axes like reference's; unmapped axes follow their left neighbour.
    let ref_loop = f.tensors[reference].loop_domain.clone();
    let inverse: HashMap<IterId, usize> = ref_loop
        .iter()
        .enumerate()
        .filter_map(|(p, r)| map.get(r).map(|&u| (u, p)))
        .collect();
    let mut keyed = Vec::new();
    let mut last = -1.0f64;
    for (k, &u) in f.tensors[target].loop_domain.iter().enumerate() {
        let key = match inverse.get(&u) {
            Some(&p) => p as f64,
            None => last + 0.5,
        };
        last = key;
        keyed.push((key, k, u));
    }
    // The keys are halves from -0.5 up, so `2 key + 1` orders them as whole numbers; ties keep
    // the target's order (`k`), which the stable sort does.
    crate::id::sort_by_position(&mut keyed, |&(key, _, _)| (2.0 * key + 1.0) as usize);
    f.tensors[target].loop_domain = keyed.into_iter().map(|(_, _, u)| u).collect();
    for &r in &ref_loop {
        if let Some(&u) = map.get(&r) {
            let p = f.ids[r].parallel;
            // A parallel type already used by another axis of the target stays where it is (Mma
            // marks the three axes of the instruction tile; several loops may be unrolled).
            let clash = f.tensors[target].loop_domain.iter().any(|&x| {
                x != u
                    && f.ids[x].parallel == p
                    && !matches!(
                        p,
                        ParallelType::Serial | ParallelType::Mma | ParallelType::Unroll
                    )
            });
            // A block binding reaches a reduction axis only from a reduction axis (a sibling
            // of a grid reduction): from a consumer's iteration axis it would make an
            // unintended grid reduction.
            let grid_reduction = p.is_block()
                && f.ids[u].kind == IterKind::Reduction
                && f.ids[r].kind != IterKind::Reduction;
            if !clash && !grid_reduction {
                f.ids[u].parallel = p;
            }
        }
    }
    map.into_iter().collect()
}

/// How many leading loop axes of `producer` are the same loops as the first `pos` loop axes of
/// `consumer`: derived by the same splits and merges from the same axis classes (what the passes
/// later hash into one loop key).
pub(super) fn shared_prefix(
    f: &Fusion,
    producer: TensorId,
    consumer: TensorId,
    pos: usize,
) -> usize {
    let (p, c) = (
        &f.tensors[producer].loop_domain,
        &f.tensors[consumer].loop_domain,
    );
    p.iter()
        .zip(&c[..pos.min(c.len())])
        .take_while(|(&a, &b)| same_loop(f, a, b))
        .count()
}

/// Whether two axes are derived the same way from the same axis classes.
fn same_loop(f: &Fusion, a: IterId, b: IterId) -> bool {
    // Iterative over the pair stack: derivation chains are as deep as the schedule is long.
    let mut stack = vec![(a, b)];
    while let Some((a, b)) = stack.pop() {
        match (&f.ids[a].origin, &f.ids[b].origin) {
            (IterOrigin::Root, IterOrigin::Root) => {
                if f.class_of(a) != f.class_of(b) {
                    return false;
                }
            }
            (
                IterOrigin::Split {
                    parent: pa,
                    factor: fa,
                    inner_split: ia,
                    is_outer: oa,
                },
                IterOrigin::Split {
                    parent: pb,
                    factor: fb,
                    inner_split: ib,
                    is_outer: ob,
                },
            ) => {
                if (fa, ia, oa) != (fb, ib, ob) {
                    return false;
                }
                stack.push((*pa, *pb));
            }
            (
                IterOrigin::Merge {
                    outer: oa,
                    inner: ia,
                },
                IterOrigin::Merge {
                    outer: ob,
                    inner: ib,
                },
            ) => {
                stack.push((*oa, *ob));
                stack.push((*ia, *ib));
            }
            _ => return false,
        }
    }
    true
}

/// Most loop axes a tensor may have (a loop nest deeper than this has no use on a GPU, and
/// keeps every walk over loop nests shallow).
pub const MAX_LOOP_AXES: usize = 24;
/// Most splits and merges one axis may stand for, counted along every path to its roots (a
/// merge of the two parts of one split reaches that split twice): walks over an axis's
/// derivation (loop keys, extents, indices) recurse along every such path.
pub const MAX_DERIVATION_SIZE: usize = 256;

/// Most axis replays the `propagate`s of one schedule may do together. A propagate replays the
/// reference's derivation (its axes from root to loop domain) on every computed tensor, so it
/// costs tensors x axes; a 64 KiB schedule repeating one over a 3,000-statement chain split 23
/// times took 80 s (issue 39). This allows a dozen propagates of the largest such derivation
/// over the largest such chain (about 0.3 s), hundreds over fusions of realistic size.
pub const MAX_PROPAGATE_WORK: usize = 2_000_000;

/// How many split and merge steps the walks from `id` to its roots take, counted along every
/// path (saturating), computed once per ancestor in creation order (parents come first).
pub(super) fn derivation_size(f: &Fusion, id: IterId) -> usize {
    let mut ancestors = vec![id];
    let mut seen = std::collections::HashSet::from([id]);
    let mut i = 0;
    while i < ancestors.len() {
        let parents = match f.ids[ancestors[i]].origin {
            IterOrigin::Root => vec![],
            IterOrigin::Split { parent, .. } => vec![parent],
            IterOrigin::Merge { outer, inner } => vec![outer, inner],
        };
        for p in parents {
            if seen.insert(p) {
                ancestors.push(p);
            }
        }
        i += 1;
    }
    crate::id::sort_by_position(&mut ancestors, |a| a.index());
    let mut size: HashMap<IterId, usize> = HashMap::default();
    for &a in &ancestors {
        let n = match f.ids[a].origin {
            IterOrigin::Root => 0,
            IterOrigin::Split { parent, .. } => 1 + size[&parent],
            IterOrigin::Merge { outer, inner } => 1 + size[&outer] + size[&inner],
        };
        size.insert(a, n.min(usize::MAX / 4));
    }
    size[&id]
}

/// Extent of any axis as a size expression.
pub fn extent_of(f: &Fusion, id: IterId) -> SizeExpr {
    match &f.ids[id].origin {
        IterOrigin::Root => match f.ids[id].alias {
            Some(target) => extent_of(f, target),
            None => f.class_extent(f.class_of(id)),
        },
        IterOrigin::Split {
            parent,
            factor,
            inner_split,
            is_outer,
        } => crate::plan::split_extent(extent_of(f, *parent), *factor, *inner_split, *is_outer),
        IterOrigin::Merge { outer, inner } => {
            crate::plan::mul(extent_of(f, *outer), extent_of(f, *inner))
        }
    }
}

/// Splits reduction `t` in two: a new tensor `name` computes `t`'s expression but reduces only
/// the loop axes `axes` (its other reduction axes become iteration axes: one partial result
/// each), and `t` reduces those partials over its remaining reduction axes. The remaining
/// reduction axes of `t` become roots that alias the new tensor's axes, so the two share loops.
pub(crate) fn rfactor(
    f: &mut Fusion,
    t: TensorId,
    axes: &[usize],
    name: &str,
    span: Span,
) -> TensorId {
    let def = f.tensors[t]
        .definition
        .expect("a reduction has a definition");
    // The new tensor: t's root (reduction axes included) with t's transformations.
    let root: Vec<IterId> = f.tensors[t]
        .root
        .clone()
        .into_iter()
        .map(|id| {
            let (kind, ext) = (f.ids[id].kind, f.ids[id].root_extent.clone());
            let new = f.new_id(kind, IterOrigin::Root, ext);
            f.union(new, id);
            new
        })
        .collect();
    let rf = push_tensor(
        f,
        name,
        f.tensors[t].dtype.compute(),
        root,
        MemoryType::Local,
        Some(span),
    );
    let map: HashMap<IterId, IterId> = replay(f, t, rf).into_iter().collect();
    let old_loop = f.tensors[t].loop_domain.clone();
    for (p, &id) in old_loop.iter().enumerate() {
        if f.ids[id].kind == IterKind::Reduction && !axes.contains(&p) {
            if let Some(&r) = map.get(&id) {
                f.ids[r].kind = IterKind::Iteration;
            }
        }
    }
    f.exprs[def].output = rf;
    f.tensors[rf].definition = Some(def);
    // t keeps its logical axes and gets one aliasing reduction root per remaining axis.
    let mut new_root = fresh_logical_root(f, t);
    let mut reduced = Vec::new();
    for (p, &id) in old_loop.iter().enumerate() {
        if f.ids[id].kind != IterKind::Reduction || axes.contains(&p) {
            continue;
        }
        let Some(&target) = map.get(&id) else {
            continue;
        };
        let ext = extent_of(f, target);
        let r = f.new_id(IterKind::Reduction, IterOrigin::Root, Some(ext));
        f.ids[r].alias = Some(target);
        reduced.push(new_root.len());
        new_root.push(r);
    }
    let op = match &f.exprs[def].op {
        Op::Reduce { op, .. } => *op,
        _ => unreachable!("checked by the caller"),
    };
    f.tensors[t].root = new_root.clone();
    f.tensors[t].loop_domain = new_root;
    f.tensors[t].inline = Inline::Most;
    f.define(
        Op::Reduce { op, axes: reduced },
        vec![Operand::Tensor(rf)],
        t,
        Some(span),
    );
    // Loop order and parallel types of t follow the rfactor tensor.
    let back: HashMap<IterId, IterId> = replay(f, rf, t).into_iter().map(|(a, b)| (b, a)).collect();
    let rf_loop = f.tensors[rf].loop_domain.clone();
    let position = |f: &Fusion, id: IterId| -> usize {
        let target = f.ids[id].alias.or_else(|| back.get(&id).copied());
        target
            .and_then(|x| rf_loop.iter().position(|&y| y == x))
            .unwrap_or(usize::MAX)
    };
    let mut ld = f.tensors[t].loop_domain.clone();
    crate::id::sort_by_position(&mut ld, |&id| position(f, id));
    for &id in &ld {
        if let Some(target) = f.ids[id].alias {
            f.ids[id].parallel = f.ids[target].parallel;
        }
    }
    f.tensors[t].loop_domain = ld;
    rf
}

/// Whether a tensor has iteration axes split off a reduction axis (made by `rfactor`).
pub(super) fn has_rfactor_axes(f: &Fusion, t: TensorId) -> bool {
    fn from_reduction(f: &Fusion, id: IterId) -> bool {
        match f.ids[id].origin {
            IterOrigin::Root => f.ids[id].kind == IterKind::Reduction,
            IterOrigin::Split { parent, .. } => from_reduction(f, parent),
            IterOrigin::Merge { outer, inner } => {
                from_reduction(f, outer) || from_reduction(f, inner)
            }
        }
    }
    f.tensors[t]
        .loop_domain
        .iter()
        .any(|&id| f.ids[id].kind == IterKind::Iteration && from_reduction(f, id))
}

/// Fresh root axes joined to the logical axes of `like` (reduction axes dropped).
pub(crate) fn fresh_logical_root(f: &mut Fusion, like: TensorId) -> Vec<IterId> {
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

/// A new tensor (a cache or an rfactor's partial result) with `root` as its root and loop
/// domain, computed nowhere yet.
pub(crate) fn push_tensor(
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
        row_pad: 0,
        l2: L2Policy::Normal,
        value: None,
        in_memory: false,
        composite: None,
        copy_of: None,
        written: None,
    });
    TensorId::new(f.tensors.len() - 1)
}
