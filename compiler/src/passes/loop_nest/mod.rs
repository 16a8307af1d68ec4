//! Pass `loop_nest`: builds the loop nests from the loop domains and inlining positions.
//!
//! Requires: a scheduled fusion. Decides every tensor's placement (the loops enclosing its
//! computation): a tensor inlined at position `p` shares the loops of its consumers that its
//! first `p` loop axes map to (consumer loops over axes the tensor lacks, i.e. broadcast to it,
//! are shared too); `inline_most` picks the deepest legal position. Checks that inlining keeps
//! every producer before its consumers, that loops shared by two tensors agree on their parallel
//! type, and that every thread/block dimension has one extent. An inlining position may not
//! pass a loop that is a reduction axis, a vectorized or `Bulk` axis, or a loop over which a
//! reduction is broadcast back to a consumer that reads the tensor again (a persistent buffer);
//! a circular-buffered cache's innermost shared loop must be serial. The tensors of an online
//! softmax may pass its loop over `T` tiles (`passes::online_softmax`). With `cluster(..)` the
//! clustered grid extent must be a multiple of the cluster: an error when it is a constant, a
//! launch constraint when it depends on the sizes.
//! Emits: loops (hardware-bound loops are bindings of threadIdx/blockIdx, not loops) and one
//! unindexed `Compute` per fusion expression; creates a buffer per tensor; sets grid, block
//! and the cluster dims (`Kernel::cluster`).

use super::context::{Ctx, LoopKey};
use super::online_softmax::TileLoops;
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::fusion::{
    ExprId, Fusion, Inline, IterId, IterKind, MemoryType, Op, Operand, ParallelType, TensorId,
};
use crate::id::IdVec;
use crate::kir::{
    Access, Buffer, BufferId, Compute, ComputeRole, Data, IndexOf, Kernel, Loop, Stmt,
};
use crate::plan::{Constraint, SizeExpr};
use std::collections::{HashMap, HashSet};

mod tree;

use tree::build_tree;

/// `order` with the copies of fusion inputs (`cache_after` of an input), which depend on
/// nothing computed, in the slots they held but sorted by the number of loops each shares with
/// its consumers (most first; stable). The tree places a copy in the loops it shares with the
/// copies placed before it, so one that shares fewer (step 17's row scales, in the M tile's loop
/// only) placed first would open loops that a later one (the column scales, in the M and N tile
/// loops) cannot share: the schedule's order of `cache_after`s no longer matters.
fn input_copies_by_shared_loops(cx: &Ctx, mut order: Vec<ExprId>) -> Vec<ExprId> {
    let f = cx.fusion;
    let is_input_copy = |e: ExprId| {
        matches!(f.exprs[e].op, Op::Set)
            && f.exprs[e].input_tensors().all(|p| f.tensors[p].is_input)
    };
    let slots: Vec<usize> = (0..order.len())
        .filter(|&i| is_input_copy(order[i]))
        .collect();
    let mut copies: Vec<ExprId> = slots.iter().map(|&i| order[i]).collect();
    copies.sort_by_key(|&e| std::cmp::Reverse(cx.layout.placement[&f.exprs[e].output].1));
    for (&i, e) in slots.iter().zip(copies) {
        order[i] = e;
    }
    order
}

/// Runs the pass; returns the loop over tiles of each online softmax (for pass
/// `online_softmax`) and the launch constraints a cluster needs.
pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<(TileLoops, Vec<Constraint>), Diagnostic> {
    let f = cx.fusion;
    let order = f.topo_exprs();
    if order.len() != f.exprs.len() {
        return Err(Diagnostic::new("the fusion has a cycle", None));
    }
    for e in &f.exprs {
        if matches!(e.op, Op::Mma) {
            return Err(Diagnostic::new(
                "matrix products are not lowered by this compiler yet",
                e.span,
            ));
        }
    }
    // A tensor only views read is recomputed in them (`tree::make_compute`), not computed.
    let order: Vec<_> = order
        .into_iter()
        .filter(|&e| !cx.reads.recomputed[f.exprs[e].output])
        .collect();
    let computed: Vec<TensorId> = order.iter().map(|&e| f.exprs[e].output).collect();
    for &t in &computed {
        for &id in &f.tensors[t].loop_domain {
            cx.key(id);
        }
    }
    create_buffers(cx, k);
    let restricted = restricted_classes(f);
    let tile_loops = super::online_softmax::tile_loops(cx)?;
    let online = super::online_softmax::tile_of_tensors(cx, &tile_loops);
    // Placements, consumers first.
    for &t in computed.iter().rev() {
        let placement = place(cx, t, &restricted, online.get(&t).copied())?;
        cx.layout.placement.insert(t, placement);
    }
    let constraints = check_parallel_extents(cx, k)?;
    let order = input_copies_by_shared_loops(cx, order);
    build_tree(cx, k, &order)?;
    Ok((tile_loops, constraints))
}

fn create_buffers(cx: &mut Ctx, k: &mut Kernel) {
    let f = cx.fusion;
    for (t, tensor) in f.tensor_ids().zip(&f.tensors) {
        let used = (tensor.definition.is_some() && !cx.reads.recomputed[t])
            || !cx.reads.uses[t].is_empty();
        if !used || f.is_scalar_param(t) {
            continue;
        }
        let global_shape = if tensor.memory == MemoryType::Global {
            f.logical(t)
                .iter()
                .map(|&id| {
                    (
                        f.ids[id].root_extent.clone().unwrap_or(SizeExpr::Const(1)),
                        f.ids[id].kind == IterKind::Broadcast,
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        cx.layout
            .tensor_buffer
            .insert(t, BufferId::new(k.buffers.len()));
        k.buffers.push(Buffer {
            name: tensor.name.clone(),
            dtype: tensor.dtype,
            memory: tensor.memory,
            tensor: Some(t),
            size: None,
            smem_offset: None,
            global_shape,
            is_input: tensor.is_input,
            l2: tensor.l2,
        });
    }
}

/// Classes along which a tensor may not be inlined: it is read both by the path into a
/// reduction and by a consumer after that reduction's result is broadcast back (a persistent
/// buffer, as in softmax), so the two consumers cannot share those loops.
///
/// That is: `p` is restricted by reduction `r` when `p` comes before `r` and one of its
/// consumers comes after it, i.e. when an edge `p -> c` passes over `r`. Per tensor, the
/// reductions before it and after it are bit sets (one pass in each direction over the
/// expressions); an edge's reductions are then one intersection, so the whole is near-linear
/// where a walk per reduction was quadratic.
fn restricted_classes(f: &Fusion) -> HashMap<TensorId, HashSet<IterId>> {
    let mut out: HashMap<TensorId, HashSet<IterId>> = HashMap::new();
    let n = f.tensors.len();
    // Each reduction's output and the classes it reduces over.
    let mut reduction_of: IdVec<TensorId, Option<usize>> = vec![None; n].into();
    let mut classes: Vec<HashSet<IterId>> = Vec::new();
    for e in &f.exprs {
        let Op::Reduce { .. } = e.op else { continue };
        let r = e.output;
        reduction_of[r] = Some(classes.len());
        classes.push(
            f.tensors[r]
                .root
                .iter()
                .filter(|&&id| f.ids[id].kind == IterKind::Reduction)
                .map(|&id| f.class_of(id))
                .collect(),
        );
    }
    if classes.is_empty() {
        return out;
    }
    let words = classes.len().div_ceil(64);
    let set = |bits: &mut [u64], t: TensorId| {
        if let Some(i) = reduction_of[t] {
            bits[i / 64] |= 1 << (i % 64);
        }
    };
    let order = f.topo_exprs();
    // The reductions each tensor comes strictly after, then strictly before.
    let mut above = vec![0u64; n * words];
    for &e in &order {
        let c = f.exprs[e].output;
        for p in f.exprs[e].input_tensors() {
            let mut bits = above[p.index() * words..(p.index() + 1) * words].to_vec();
            set(&mut bits, p);
            for (w, b) in above[c.index() * words..(c.index() + 1) * words]
                .iter_mut()
                .zip(bits)
            {
                *w |= b;
            }
        }
    }
    let mut below = vec![0u64; n * words];
    for &e in order.iter().rev() {
        let c = f.exprs[e].output;
        let mut bits = below[c.index() * words..(c.index() + 1) * words].to_vec();
        set(&mut bits, c);
        for p in f.exprs[e].input_tensors() {
            for (w, &b) in below[p.index() * words..(p.index() + 1) * words]
                .iter_mut()
                .zip(&bits)
            {
                *w |= b;
            }
        }
    }
    // The reductions some tensor downstream of each tensor comes after (itself included): a
    // consumer `c` of `p` that is neither before nor after reduction `r` but joins `r`'s result
    // further down (`x = q * 2` and `y = x * broadcast(sum(q))`) is computed inside the loops of
    // that join when it is inlined there, after `r`: `p` feeding both `r` and `c` is then
    // restricted as if `c` itself came after `r` (else `p`, `r` and the join share one loop over
    // `r`'s axis and the join reads `r` before it is complete).
    let mut joined = above.clone();
    for &e in order.iter().rev() {
        let c = f.exprs[e].output;
        let bits = joined[c.index() * words..(c.index() + 1) * words].to_vec();
        for p in f.exprs[e].input_tensors() {
            for (w, &b) in joined[p.index() * words..(p.index() + 1) * words]
                .iter_mut()
                .zip(&bits)
            {
                *w |= b;
            }
        }
    }
    for &e in &order {
        let c = f.exprs[e].output;
        for p in f.exprs[e].input_tensors() {
            let (pb, cb, cj) = (
                &below[p.index() * words..(p.index() + 1) * words],
                &above[c.index() * words..(c.index() + 1) * words],
                &joined[c.index() * words..(c.index() + 1) * words],
            );
            let c_below = &below[c.index() * words..(c.index() + 1) * words];
            for (w, (&x, &y)) in pb.iter().zip(cb).enumerate() {
                // `c` after `r`, or joining it downstream without being before it (nor `r`).
                let mut joins = cj[w] & !c_below[w];
                if let Some(i) = reduction_of[c].filter(|i| i / 64 == w) {
                    joins &= !(1 << (i % 64));
                }
                let mut both = x & (y | joins);
                while both != 0 {
                    let r = w * 64 + both.trailing_zeros() as usize;
                    both &= both - 1;
                    out.entry(p).or_default().extend(classes[r].iter().copied());
                }
            }
        }
    }
    out
}

/// Matches the first `pos` loop axes of `t` into a consumer's placement; returns how many of the
/// consumer's loops are shared, or why not.
/// `own` are the loop keys of `t`'s loop axes, `t_classes` the classes of its root axes.
fn match_prefix(
    cx: &Ctx,
    t: TensorId,
    pos: usize,
    consumer_keys: &[LoopKey],
    (own, t_classes): (&[LoopKey], &[IterId]),
) -> Result<usize, String> {
    let f = cx.fusion;
    let mut j = 0;
    for (kpos, &key) in own.iter().enumerate().take(pos) {
        loop {
            let Some(&ck) = consumer_keys.get(j) else {
                return Err(format!(
                    "loop {kpos} of `{}` has no matching loop in its consumer",
                    f.tensors[t].name
                ));
            };
            j += 1;
            if ck == key {
                break;
            }
            if cx.key_classes(ck).iter().any(|c| t_classes.contains(c)) {
                return Err(format!(
                    "loop {kpos} of `{}` ({}) does not match its consumer's loop `{}`",
                    f.tensors[t].name, cx.keys.names[key], cx.keys.names[ck]
                ));
            }
        }
    }
    Ok(j)
}

/// `online_tile`: the loop over `T` tiles of the online softmax `t` belongs to, which `t` may be
/// computed inside although it reduces over `T` or is read again after a reduction over it (the
/// rewrite keeps running statistics instead: `passes::online_softmax`).
fn place(
    cx: &mut Ctx,
    t: TensorId,
    restricted: &HashMap<TensorId, HashSet<IterId>>,
    online_tile: Option<LoopKey>,
) -> Result<(Vec<LoopKey>, usize), Diagnostic> {
    let f = cx.fusion;
    let tensor = &f.tensors[t];
    let own: Vec<LoopKey> = tensor.loop_domain.iter().map(|&id| cx.key(id)).collect();
    // A tensor has a few root axes: a list.
    let t_classes: Vec<IterId> = tensor.root.iter().map(|&id| f.class_of(id)).collect();
    // An online softmax's row statistic (`m`, `l`) placed in the tile loop is read there by
    // the softmax and, after the loop, by readers of its final value (the log-sum-exp): those
    // share none of the tile's loops, so they do not constrain its placement.
    let statistic = online_tile.filter(|_| {
        f.online_softmax
            .iter()
            .any(|r| r.pattern.max == t || r.pattern.sum == t)
    });
    let consumers: Vec<TensorId> = {
        let mut v: Vec<TensorId> = cx.reads.uses[t]
            .iter()
            .map(|&e| f.exprs[e].output)
            .filter(|c| statistic.is_none_or(|tile| cx.layout.placement[c].0.contains(&tile)))
            .collect();
        v.dedup();
        v
    };
    if consumers.is_empty() {
        return Ok((own, 0));
    }
    let cplacements: Vec<Vec<LoopKey>> = consumers
        .iter()
        .map(|c| cx.layout.placement[c].0.clone())
        .collect();
    // The deepest position allowed by the axes themselves.
    let mut limit = 0;
    for (p, &id) in tensor.loop_domain.iter().enumerate() {
        let ax = &f.ids[id];
        let k = own[p];
        if online_tile == Some(k) {
            limit = p + 1;
            continue;
        }
        let blocked = ax.kind == IterKind::Reduction
            || ax.parallel == ParallelType::Vectorize
            || ax.parallel == ParallelType::Bulk
            || restricted
                .get(&t)
                .is_some_and(|r| cx.key_classes(k).iter().any(|c| r.contains(c)));
        if blocked {
            break;
        }
        limit = p + 1;
    }
    // A circular-buffered cache filled by plain loads is pipelined over the innermost loop it
    // shares with its consumers, which must therefore be a serial one: its own loops after it
    // are the loads that move to another iteration.
    let mut buffered_limit = None;
    if tensor.circular.is_some() && tensor.load == crate::fusion::LoadKind::Plain {
        let serial = (0..limit)
            .rev()
            .find(|&p| !f.ids[tensor.loop_domain[p]].parallel.is_hw());
        if let Some(p) = serial {
            buffered_limit = Some(p + 1);
            limit = p + 1;
        }
    }
    // A consumer's Bulk loops stand for one copy of its whole box (a TMA store): a producer
    // cannot run inside them.
    let consumer_bulk: Vec<Vec<LoopKey>> = consumers
        .iter()
        .map(|&c| {
            f.tensors[c]
                .loop_domain
                .iter()
                .filter(|&&id| f.ids[id].parallel == ParallelType::Bulk)
                .map(|&id| cx.key(id))
                .collect()
        })
        .collect();
    let try_pos = |cx: &mut Ctx, pos: usize| -> Result<(Vec<LoopKey>, usize), String> {
        let mut shared: Option<Vec<LoopKey>> = None;
        for (cp, bulk) in cplacements.iter().zip(&consumer_bulk) {
            let mut q = match_prefix(cx, t, pos, cp, (&own, &t_classes))?;
            if let Some(b) = cp[..q].iter().position(|k| bulk.contains(k)) {
                if pos > b {
                    return Err(format!(
                        "loop {b} of its consumer is a Bulk axis (one copy covers the whole box)"
                    ));
                }
                q = b;
            }
            let prefix = cp[..q].to_vec();
            match &shared {
                None => shared = Some(prefix),
                Some(s) if *s == prefix => {}
                Some(_) => {
                    return Err(format!(
                        "the consumers of `{}` do not share the same outer loops",
                        f.tensors[t].name
                    ))
                }
            }
        }
        let prefix = shared.unwrap_or_default();
        let q = prefix.len();
        let mut keys = prefix;
        keys.extend_from_slice(&own[pos..]);
        Ok((keys, q))
    };
    match tensor.inline {
        Inline::At(pos) => {
            if pos > limit {
                let id = tensor.loop_domain[limit.min(tensor.loop_domain.len() - 1)];
                let why = if buffered_limit == Some(limit) {
                    "the innermost loop a circular-buffered cache shares with its consumers is the one it is pipelined over, and must be serial"
                } else if f.ids[id].kind == IterKind::Reduction {
                    "it is a reduction axis (the result is complete only after the loop)"
                } else if f.ids[id].parallel == ParallelType::Vectorize {
                    "it is vectorized (one access covers the whole axis)"
                } else if f.ids[id].parallel == ParallelType::Bulk {
                    "it is a Bulk axis (one copy covers the whole box)"
                } else {
                    "a consumer reads the tensor again after a reduction over this axis is broadcast back (keep it as a persistent buffer)"
                };
                return Err(Diagnostic::new(
                    format!(
                        "`{}`.inline_at({pos}): cannot inline past loop {limit}: {why}",
                        tensor.name
                    ),
                    tensor.span,
                ));
            }
            try_pos(cx, pos).map_err(|m| {
                Diagnostic::new(
                    format!("`{}`.inline_at({pos}): {m}", tensor.name),
                    tensor.span,
                )
            })
        }
        Inline::Most => {
            for pos in (0..=limit).rev() {
                if let Ok(p) = try_pos(cx, pos) {
                    return Ok(p);
                }
            }
            Ok((own, 0))
        }
    }
}

/// The kernel's cluster dims (`Kernel::cluster`): the grid along the clustered axis must be a
/// whole number of clusters (checked now when constant, else the launch constraint returned).
fn set_cluster(
    k: &mut Kernel,
    c: crate::fusion::Cluster,
) -> Result<Option<Constraint>, Diagnostic> {
    let d = c.on.dim().expect("a cluster is along a grid axis");
    let what = format!("cluster({}, {})", c.on, c.ctas);
    let mut constraint = None;
    match k.grid[d].as_const() {
        Some(1) => {
            return Err(Diagnostic::new(
                format!("{what}: no axis is parallelized on {}, so there are no CTAs along it to group", c.on),
                c.span,
            ))
        }
        Some(e) if e % c.ctas != 0 => {
            return Err(Diagnostic::new(
                format!("{what}: the grid has {e} CTAs along {}, not a multiple of the cluster's {} (the driver launches whole clusters only)", c.on, c.ctas),
                c.span,
            ))
        }
        Some(_) => {}
        None => {
            constraint = Some(Constraint::Divisible {
                value: k.grid[d].clone(),
                divisor: c.ctas,
                reason: format!("{what}: the CTAs along {} must be a multiple of the cluster size (the driver launches whole clusters only)", c.on),
            });
        }
    }
    let mut dims = [1; 3];
    dims[d] = c.ctas;
    k.cluster = Some(dims);
    Ok(constraint)
}

/// Checks that every hardware dimension has one extent and sets grid, block and cluster; the
/// launch constraints the cluster needs.
fn check_parallel_extents(cx: &mut Ctx, k: &mut Kernel) -> Result<Vec<Constraint>, Diagnostic> {
    let f = cx.fusion;
    let mut bound: HashMap<ParallelType, (SizeExpr, String)> = HashMap::new();
    // A loop variable is one index of the kernel: `n = blockIdx.x` cannot also be `blockIdx.y`.
    let mut key_bound: HashMap<LoopKey, (ParallelType, String)> = HashMap::new();
    for (t, tensor) in f.tensor_ids().zip(&f.tensors) {
        if tensor.definition.is_none() || cx.reads.recomputed[t] {
            continue;
        }
        for &id in &tensor.loop_domain {
            let p = f.ids[id].parallel;
            if !p.is_hw() {
                let is_copy = tensor
                    .definition
                    .is_some_and(|d| matches!(f.exprs[d].op, Op::Set));
                if p == ParallelType::Vectorize && is_copy {
                    let w = cx.id_extent(id).as_const().unwrap_or(0);
                    let bytes = w * tensor.dtype.size_bytes() as i64;
                    if !(w as u64).is_power_of_two() || bytes > 16 {
                        return Err(Diagnostic::new(
                            format!(
                                "`{}`: a vectorized axis must have a power-of-two extent of at most 16 bytes ({} x {} = {bytes} bytes)",
                                tensor.name, w, tensor.dtype
                            ),
                            tensor.span,
                        ));
                    }
                }
                continue;
            }
            let key = cx.keys.of_axis[&id];
            match key_bound.get(&key) {
                Some((q, who)) if *q != p => {
                    return Err(Diagnostic::new(
                        format!(
                            "loop `{}` is bound to {q} in `{who}` and to {p} in `{}`; a loop is bound to one thread or block index in a kernel (propagate helps)",
                            cx.keys.names[key], tensor.name
                        ),
                        tensor.span,
                    ))
                }
                Some(_) => {}
                None => {
                    key_bound.insert(key, (p, tensor.name.clone()));
                }
            }
            let e = cx.id_extent(id);
            match bound.get(&p) {
                Some((prev, who)) if *prev != e => {
                    return Err(Diagnostic::new(
                        format!("{p} is bound to two different extents: {prev} (in `{who}`) and {e} (in `{}`)", tensor.name),
                        tensor.span,
                    ))
                }
                Some(_) => {}
                None => {
                    bound.insert(p, (e, tensor.name.clone()));
                }
            }
        }
        let _ = t;
    }
    let get = |p: ParallelType| {
        bound
            .get(&p)
            .map(|b| b.0.clone())
            .unwrap_or(SizeExpr::Const(1))
    };
    k.grid = [
        get(ParallelType::BIDx),
        get(ParallelType::BIDy),
        get(ParallelType::BIDz),
    ];
    let mut constraints = Vec::new();
    if let Some(c) = f.cluster {
        constraints.extend(set_cluster(k, c)?);
    }
    k.block = [
        get(ParallelType::TIDx),
        get(ParallelType::TIDy),
        get(ParallelType::TIDz),
    ];
    // A tensor-core product runs on a warp group: threadIdx.x is its 128 threads (the
    // accumulator fragment's layout is fixed by the instruction, not by the schedule).
    let mma_user = f.tensors.iter().find(|t| {
        t.definition.is_some()
            && t.loop_domain
                .iter()
                .any(|&id| f.ids[id].parallel == ParallelType::Mma)
    });
    if let Some(user) = mma_user {
        if let Some((e, who)) = bound.get(&ParallelType::TIDx) {
            return Err(Diagnostic::new(
                format!(
                    "`{}` has Mma axes, so threadIdx.x is the {} threads of a warp group, but `{who}` binds TIDx to {e}; use TIDy or TIDz for other thread axes",
                    user.name,
                    crate::target::WARPGROUP_THREADS
                ),
                user.span,
            ));
        }
        k.block[0] = SizeExpr::Const(crate::target::WARPGROUP_THREADS);
    }
    let threads = k
        .block
        .iter()
        .map(|e| e.as_const())
        .collect::<Option<Vec<i64>>>();
    if let Some(th) = threads {
        let n: i64 = th.iter().product();
        if n > crate::target::MAX_THREADS_PER_BLOCK {
            // At the first schedule statement that made a thread axis (the split that chose
            // its extent; its copies made by propagate come later).
            let made_by = f
                .ids
                .iter()
                .filter(|id| {
                    matches!(
                        id.parallel,
                        ParallelType::TIDx | ParallelType::TIDy | ParallelType::TIDz
                    )
                })
                .filter_map(|id| id.stmt)
                .min_by_key(|s| s.start);
            return Err(Diagnostic::new(
                format!(
                    "the block has {n} threads ({}); at most 1024 are allowed",
                    k.block
                        .iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join(" x ")
                ),
                made_by,
            ));
        }
    }
    Ok(constraints)
}
