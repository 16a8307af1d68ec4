//! Pass `loop_nest`: builds the loop nests from the loop domains and inlining positions.
//!
//! Requires: a scheduled fusion. Decides every tensor's placement (the loops enclosing its
//! computation): a tensor inlined at position `p` shares the loops of its consumers that its
//! first `p` loop axes map to (consumer loops over axes the tensor lacks, i.e. broadcast to it,
//! are shared too); `inline_most` picks the deepest legal position. Checks that inlining keeps
//! every producer before its consumers, that loops shared by two tensors agree on their parallel
//! type, and that every thread/block dimension has one extent.
//! Emits: loops (hardware-bound loops are bindings of threadIdx/blockIdx, not loops) and one
//! unindexed `Compute` per fusion expression; creates a buffer per tensor; sets grid and block.

use super::{Ctx, LoopKey};
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::fusion::{Fusion, Inline, IterKind, MemoryType, Op, Operand, ParallelType, TensorId};
use crate::kir::{Access, Buffer, Compute, ComputeRole, Data, Kernel, Loop, Stmt};
use crate::plan::SizeExpr;
use std::collections::{HashMap, HashSet};

pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<(), Diagnostic> {
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
    let computed: Vec<TensorId> = order.iter().map(|&e| f.exprs[e].output).collect();
    for &t in &computed {
        for &id in &f.tensors[t].loop_domain {
            cx.key(id);
        }
    }
    create_buffers(cx, k);
    let restricted = restricted_classes(f);
    // Placements, consumers first.
    for &t in computed.iter().rev() {
        let placement = place(cx, t, &restricted)?;
        cx.placement.insert(t, placement);
    }
    check_parallel_extents(cx, k)?;
    build_tree(cx, k, &order)
}

fn create_buffers(cx: &mut Ctx, k: &mut Kernel) {
    let f = cx.fusion;
    for (t, tensor) in f.tensors.iter().enumerate() {
        let used = tensor.definition.is_some() || !cx.uses[t].clone().is_empty();
        if !used || (tensor.is_input && f.rank(t) == 0) {
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
        cx.tensor_buffer.insert(t, k.buffers.len());
        k.buffers.push(Buffer {
            name: tensor.name.clone(),
            dtype: tensor.dtype,
            memory: tensor.memory,
            tensor: Some(t),
            size: None,
            smem_offset: None,
            global_shape,
            is_input: tensor.is_input,
        });
    }
}

/// Classes along which a tensor may not be inlined: it is read both by the path into a
/// reduction and by a consumer after that reduction's result is broadcast back (a persistent
/// buffer, as in softmax), so the two consumers cannot share those loops.
fn restricted_classes(f: &Fusion) -> HashMap<TensorId, HashSet<usize>> {
    let mut out: HashMap<TensorId, HashSet<usize>> = HashMap::new();
    let n = f.tensors.len();
    let uses = f.use_index();
    let consumers: Vec<Vec<TensorId>> = (0..n)
        .map(|t| uses[t].iter().map(|&e| f.exprs[e].output).collect())
        .collect();
    let producers: Vec<Vec<TensorId>> = (0..n)
        .map(|t| match f.tensors[t].definition {
            Some(d) => f.exprs[d].input_tensors().collect(),
            None => Vec::new(),
        })
        .collect();
    // Every tensor reachable from `start` along `edges` (not `start` itself unless on a cycle),
    // as marks: one linear walk per reduction.
    let reach = |start: TensorId, edges: &[Vec<TensorId>]| -> Vec<bool> {
        let mut seen = vec![false; n];
        let mut stack = edges[start].clone();
        while let Some(t) = stack.pop() {
            if !seen[t] {
                seen[t] = true;
                stack.extend(edges[t].iter().copied());
            }
        }
        seen
    };
    for e in &f.exprs {
        let Op::Reduce { .. } = e.op else { continue };
        let r = e.output;
        let classes: HashSet<usize> = f.tensors[r]
            .root
            .iter()
            .filter(|&&id| f.ids[id].kind == IterKind::Reduction)
            .map(|&id| f.class_of(id))
            .collect();
        let after = reach(r, &consumers);
        let before = reach(r, &producers);
        for p in (0..n).filter(|&p| before[p]) {
            if consumers[p].iter().any(|&c| after[c]) {
                out.entry(p).or_default().extend(classes.iter().copied());
            }
        }
    }
    out
}

/// Matches the first `pos` loop axes of `t` into a consumer's placement; returns how many of the
/// consumer's loops are shared, or why not.
fn match_prefix(
    cx: &mut Ctx,
    t: TensorId,
    pos: usize,
    consumer_keys: &[LoopKey],
) -> Result<usize, String> {
    let f = cx.fusion;
    let own: Vec<LoopKey> = f.tensors[t]
        .loop_domain
        .clone()
        .into_iter()
        .map(|id| cx.key(id))
        .collect();
    let t_classes: HashSet<usize> = f.tensors[t].root.iter().map(|&id| f.class_of(id)).collect();
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

fn place(
    cx: &mut Ctx,
    t: TensorId,
    restricted: &HashMap<TensorId, HashSet<usize>>,
) -> Result<(Vec<LoopKey>, usize), Diagnostic> {
    let f = cx.fusion;
    let tensor = &f.tensors[t];
    let own: Vec<LoopKey> = tensor
        .loop_domain
        .clone()
        .into_iter()
        .map(|id| cx.key(id))
        .collect();
    let consumers: Vec<TensorId> = {
        let mut v: Vec<TensorId> = cx.uses[t]
            .clone()
            .into_iter()
            .map(|e| f.exprs[e].output)
            .collect();
        v.dedup();
        v
    };
    if consumers.is_empty() {
        return Ok((own, 0));
    }
    let cplacements: Vec<Vec<LoopKey>> = consumers
        .iter()
        .map(|c| cx.placement[c].0.clone())
        .collect();
    // The deepest position allowed by the axes themselves.
    let mut limit = 0;
    for (p, &id) in tensor.loop_domain.iter().enumerate() {
        let ax = &f.ids[id];
        let k = own[p];
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
            let mut q = match_prefix(cx, t, pos, cp)?;
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

fn check_parallel_extents(cx: &mut Ctx, k: &mut Kernel) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let mut bound: HashMap<ParallelType, (SizeExpr, String)> = HashMap::new();
    for (t, tensor) in f.tensors.iter().enumerate() {
        if tensor.definition.is_none() {
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
        if n > 1024 {
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
    Ok(())
}

struct LoopNode {
    key: LoopKey,
    parallel: ParallelType,
    children: Vec<Child>,
}

enum Child {
    Loop(usize),
    Compute(Box<Compute>),
}

fn build_tree(cx: &mut Ctx, k: &mut Kernel, order: &[usize]) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let mut nodes: Vec<LoopNode> = Vec::new();
    let mut top: Vec<Child> = Vec::new();
    // Loop instances of each tensor's placement, and when each was created.
    let mut instances: HashMap<TensorId, Vec<usize>> = HashMap::new();
    // Sequence number of the outermost own element of each tensor at each depth.
    let mut seq_of_node: Vec<usize> = Vec::new();
    let mut stmt_seq: HashMap<TensorId, usize> = HashMap::new();
    let mut pending: HashMap<TensorId, Vec<usize>> = HashMap::new();
    let mut seq = 0usize;
    // The parallel type of each loop, from the tensors that own an axis with its key: a producer
    // placed in a consumer loop over an axis it lacks (broadcast to it) may open that loop first.
    let mut owned_parallel: HashMap<LoopKey, ParallelType> = HashMap::new();
    for &e in order {
        for &id in &f.tensors[f.exprs[e].output].loop_domain {
            let p = f.ids[id].parallel;
            let slot = owned_parallel
                .entry(cx.id_keys[&id])
                .or_insert(ParallelType::Serial);
            if *slot == ParallelType::Serial {
                *slot = p;
            }
        }
    }
    for &e in order {
        let expr = &f.exprs[e];
        let t = expr.output;
        let (keys, _) = cx.placement[&t].clone();
        let own_ids = f.tensors[t].loop_domain.clone();
        // Parallel type of each placement entry: from the tensor's own axis when it has it.
        let key_parallel: HashMap<LoopKey, ParallelType> = own_ids
            .iter()
            .map(|&id| (cx.id_keys[&id], f.ids[id].parallel))
            .collect();
        let producers: Vec<TensorId> = expr
            .input_tensors()
            .filter(|p| f.tensors[*p].definition.is_some())
            .collect();
        let mut d = 0;
        let mut best: Option<TensorId> = None;
        for &p in &producers {
            let q = cx.placement[&p].1;
            if q > d {
                d = q;
                best = Some(p);
            }
        }
        let mut inst: Vec<usize> = best
            .map(|b| instances[&b][..d].to_vec())
            .unwrap_or_default();
        // Loops already opened for a consumer of `t` by a sibling producer are shared too.
        let q_t = cx.placement[&t].1;
        let consumers: Vec<TensorId> = cx.uses[t]
            .clone()
            .into_iter()
            .map(|u| f.exprs[u].output)
            .collect();
        for c in &consumers {
            if let Some(open) = open_loops(cx, &pending, &instances, *c, q_t) {
                let n = q_t.min(open.len());
                let common = n.min(inst.len());
                if open[..common] != inst[..common] {
                    return Err(Diagnostic::new(
                        format!("`{}` cannot share loops both with its producers and with its consumer `{}`; lower its inlining position", f.tensors[t].name, f.tensors[*c].name),
                        f.tensors[t].span,
                    ));
                }
                if n > inst.len() {
                    inst = open[..n].to_vec();
                }
            }
        }
        let d = inst.len();
        for &p in &producers {
            let q = cx.placement[&p].1;
            if instances[&p][..q] != inst[..q] {
                return Err(Diagnostic::new(
                    format!(
                        "`{}` is inlined into `{}` but the loops it shares are not the loops `{}` runs in; lower its inlining position",
                        f.tensors[p].name, f.tensors[t].name, f.tensors[t].name
                    ),
                    f.tensors[p].span,
                ));
            }
            // A producer computed outside the shared loops must come before them.
            if q < d {
                let outer_of_p = if instances[&p].len() > q {
                    seq_of_node[instances[&p][q]]
                } else {
                    stmt_seq[&p]
                };
                // The shared loop `inst[q]` was opened (by a sibling inlined deeper) before
                // `p` was computed: move that loop after `p` when nothing computed since
                // needs what it holds.
                if outer_of_p > seq_of_node[inst[q]]
                    && !move_after_siblings(
                        cx,
                        &mut nodes,
                        &mut top,
                        &inst,
                        q,
                        &instances,
                        &mut seq_of_node,
                        &mut stmt_seq,
                        &mut seq,
                    )
                {
                    return Err(Diagnostic::new(
                        format!(
                            "inlining breaks a dependency: `{}` would be computed inside loops that run before its producer `{}` is computed",
                            f.tensors[t].name, f.tensors[p].name
                        ),
                        f.tensors[t].span,
                    ));
                }
            }
        }
        for (depth, &i) in inst.iter().enumerate() {
            let want = key_parallel.get(&keys[depth]).copied();
            if let Some(w) = want {
                if w != nodes[i].parallel {
                    return Err(Diagnostic::new(
                        format!(
                            "`{}` shares loop `{}` with a tensor that parallelizes it as {}, but `{}` uses {}; parallelize both the same way (propagate helps)",
                            f.tensors[t].name, cx.keys.names[keys[depth]], nodes[i].parallel, f.tensors[t].name, w
                        ),
                        f.tensors[t].span,
                    ));
                }
            }
        }
        for &key in &keys[d..] {
            let parallel = key_parallel
                .get(&key)
                .or_else(|| owned_parallel.get(&key))
                .copied()
                .unwrap_or(ParallelType::Serial);
            let id = nodes.len();
            nodes.push(LoopNode {
                key,
                parallel,
                children: Vec::new(),
            });
            seq_of_node.push(seq);
            seq += 1;
            match inst.last() {
                Some(&parent) => nodes[parent].children.push(Child::Loop(id)),
                None => top.push(Child::Loop(id)),
            }
            inst.push(id);
        }
        let compute = make_compute(cx, e)?;
        stmt_seq.insert(t, seq);
        seq += 1;
        match inst.last() {
            Some(&parent) => nodes[parent]
                .children
                .push(Child::Compute(Box::new(compute))),
            None => top.push(Child::Compute(Box::new(compute))),
        }
        for c in consumers {
            let open = pending.entry(c).or_default();
            if q_t > open.len() {
                *open = inst[..q_t].to_vec();
            }
        }
        instances.insert(t, inst);
    }
    let mut hw: Vec<(String, ParallelType)> = Vec::new();
    fn convert(
        cx: &Ctx,
        nodes: &mut [LoopNode],
        children: Vec<Child>,
        hw: &mut Vec<(String, ParallelType)>,
    ) -> Vec<Stmt> {
        children
            .into_iter()
            .map(|c| match c {
                Child::Compute(c) => Stmt::Compute(*c),
                Child::Loop(i) => {
                    let kids = std::mem::take(&mut nodes[i].children);
                    let key = nodes[i].key;
                    let var = cx.keys.names[key].clone();
                    let parallel = nodes[i].parallel;
                    if parallel.is_hw() && !hw.iter().any(|(v, _)| *v == var) {
                        hw.push((var.clone(), parallel));
                    }
                    Stmt::Loop(Loop {
                        key,
                        var,
                        extent: crate::kir::Val::from_size(&cx.key_extent(key)),
                        parallel,
                        body: convert(cx, nodes, kids, hw),
                    })
                }
            })
            .collect()
    }
    k.body = convert(cx, &mut nodes, top, &mut hw);
    k.hw_vars = hw;
    Ok(())
}

/// Moves the loop `inst[q]` (and everything in it) to the end of its parent's statements,
/// renumbering it as created now. Legal when no tensor computed after the loop was opened,
/// outside it, reads a tensor computed inside it; returns whether it moved.
#[allow(clippy::too_many_arguments)]
fn move_after_siblings(
    cx: &Ctx,
    nodes: &mut [LoopNode],
    top: &mut Vec<Child>,
    inst: &[usize],
    q: usize,
    instances: &HashMap<TensorId, Vec<usize>>,
    seq_of_node: &mut [usize],
    stmt_seq: &mut HashMap<TensorId, usize>,
    seq: &mut usize,
) -> bool {
    let f = cx.fusion;
    let root = inst[q];
    let opened = seq_of_node[root];
    let inside: HashSet<TensorId> = instances
        .iter()
        .filter(|(_, i)| i.get(q) == Some(&root))
        .map(|(&t, _)| t)
        .collect();
    let reads_inside = stmt_seq.iter().any(|(&u, &s)| {
        s > opened
            && !inside.contains(&u)
            && f.tensors[u]
                .definition
                .is_some_and(|d| f.exprs[d].input_tensors().any(|x| inside.contains(&x)))
    });
    if reads_inside {
        return false;
    }
    let siblings = match q {
        0 => top,
        _ => &mut nodes[inst[q - 1]].children,
    };
    let Some(at) = siblings
        .iter()
        .position(|c| matches!(c, Child::Loop(n) if *n == root))
    else {
        return false;
    };
    let moved = siblings.remove(at);
    siblings.push(moved);
    // Renumber the loop's nodes and statements after everything created so far, in order.
    let mut stack = vec![root];
    let mut subtree = Vec::new();
    while let Some(n) = stack.pop() {
        subtree.push(n);
        stack.extend(nodes[n].children.iter().filter_map(|c| match c {
            Child::Loop(i) => Some(*i),
            Child::Compute(_) => None,
        }));
    }
    let last = subtree
        .iter()
        .map(|&n| seq_of_node[n])
        .chain(inside.iter().filter_map(|t| stmt_seq.get(t).copied()))
        .max()
        .unwrap_or(opened);
    let shift = *seq - opened;
    for n in subtree {
        seq_of_node[n] += shift;
    }
    for t in &inside {
        if let Some(s) = stmt_seq.get_mut(t) {
            *s += shift;
        }
    }
    *seq += last - opened + 1;
    true
}

fn make_compute(cx: &Ctx, e: usize) -> Result<Compute, Diagnostic> {
    let f = cx.fusion;
    let expr = &f.exprs[e];
    let t = expr.output;
    let out_dtype = f.tensors[t].dtype;
    let operand = |o: &Operand, dtype: DType| -> Data {
        match *o {
            Operand::Scalar(v) => Data::Literal(v, dtype),
            Operand::Tensor(p) => {
                if f.tensors[p].is_input && f.rank(p) == 0 {
                    Data::Param(f.tensors[p].name.clone(), f.tensors[p].dtype)
                } else {
                    Data::Read(Access {
                        buffer: cx.tensor_buffer[&p],
                        index: None,
                    })
                }
            }
        }
    };
    let out = Access {
        buffer: cx.tensor_buffer[&t],
        index: None,
    };
    let compute_type = out_dtype.compute();
    let (value, role) = match &expr.op {
        Op::Set | Op::Broadcast { .. } => {
            (operand(&expr.inputs[0], out_dtype), ComputeRole::Normal)
        }
        Op::Cast(d) => (
            Data::Cast(*d, Box::new(operand(&expr.inputs[0], *d))),
            ComputeRole::Normal,
        ),
        Op::Unary(u) => (
            Data::Unary(
                *u,
                compute_type,
                Box::new(operand(&expr.inputs[0], compute_type)),
            ),
            ComputeRole::Normal,
        ),
        Op::Binary(b) => (
            Data::Binary(
                *b,
                compute_type,
                Box::new(operand(&expr.inputs[0], compute_type)),
                Box::new(operand(&expr.inputs[1], compute_type)),
            ),
            ComputeRole::Normal,
        ),
        Op::Reduce { op, .. } => (
            Data::Binary(
                op.combine(),
                compute_type,
                Box::new(Data::Read(out.clone())),
                Box::new(operand(&expr.inputs[0], compute_type)),
            ),
            ComputeRole::ReductionUpdate,
        ),
        Op::Mma => {
            return Err(Diagnostic::new(
                "matrix products are not lowered by this compiler yet",
                expr.span,
            ))
        }
    };
    Ok(Compute {
        expr: e,
        out,
        value,
        role,
        vector: None,
    })
}

/// Loop instances already opened for the outer `depth` loops of tensor `c`: by a producer of `c`
/// placed earlier, or, when `c` is itself inlined, for the loops it shares with its consumers
/// (the first consumer, in use order, that has some).
///
/// The consumers form a DAG (softmax-like chains reach one tensor along many paths), so the
/// search memoises each (tensor, depth) and keeps its own stack instead of recursing.
fn open_loops(
    cx: &Ctx,
    pending: &HashMap<TensorId, Vec<usize>>,
    placed: &HashMap<TensorId, Vec<usize>>,
    c: TensorId,
    depth: usize,
) -> Option<Vec<usize>> {
    let f = cx.fusion;
    // The loops found for (c, depth) without looking at consumers. They may cover fewer than
    // `depth` loops (a sibling inlined less deeply); the consumers may then know deeper ones.
    let direct = |c: TensorId, depth: usize| -> Option<Vec<usize>> {
        if depth == 0 {
            return None;
        }
        if let Some(open) = pending.get(&c) {
            return Some(open[..depth.min(open.len())].to_vec());
        }
        // A producer of `c` not placed yet will run in the loops already open for it (by its
        // own producers), as deep as it is inlined into `c`; so, through producers not placed
        // yet, will `c`.
        let mut stack = vec![(c, depth)];
        let mut seen = HashSet::new();
        while let Some((t, d)) = stack.pop() {
            let Some(def) = f.tensors[t].definition else {
                continue;
            };
            for p in f.exprs[def].input_tensors() {
                let Some(&(_, q_p)) = cx.placement.get(&p) else {
                    continue;
                };
                let n = d.min(q_p);
                if n == 0 || !seen.insert((p, n)) {
                    continue;
                }
                if let Some(open) = pending.get(&p) {
                    return Some(open[..n.min(open.len())].to_vec());
                }
                if !placed.contains_key(&p) {
                    stack.push((p, n));
                }
            }
        }
        None
    };
    // The longer of two answers (both are prefixes of the loops the tensor will run in).
    fn longer(a: Option<Vec<usize>>, b: Option<Vec<usize>>) -> Option<Vec<usize>> {
        match (a, b) {
            (Some(a), Some(b)) => Some(if b.len() > a.len() { b } else { a }),
            (a, b) => a.or(b),
        }
    }
    let mut memo: HashMap<(TensorId, usize), Option<Vec<usize>>> = HashMap::new();
    // What `direct` found for a tensor still exploring its consumers.
    let mut partial: HashMap<(TensorId, usize), Option<Vec<usize>>> = HashMap::new();
    // Frames: (tensor, depth, index of the next consumer to try).
    let mut stack = vec![(c, depth, 0usize)];
    while let Some(&mut (t, d, ref mut next)) = stack.last_mut() {
        if memo.contains_key(&(t, d)) {
            stack.pop();
            continue;
        }
        if *next == 0 {
            let found = direct(t, d);
            if d == 0 || found.as_ref().is_some_and(|o| o.len() >= d) {
                memo.insert((t, d), found);
                stack.pop();
                continue;
            }
            partial.insert((t, d), found);
        }
        let child_depth = d.min(cx.placement[&t].1);
        // The consumer tried last, once its answer is known.
        if *next > 0 {
            let prev = f.exprs[cx.uses[t][*next - 1]].output;
            if let Some(Some(open)) = memo.get(&(prev, child_depth)) {
                let open = longer(partial.remove(&(t, d)).flatten(), Some(open.clone()));
                memo.insert((t, d), open);
                stack.pop();
                continue;
            }
        }
        match cx.uses[t].get(*next) {
            Some(&u) => {
                *next += 1;
                let consumer = f.exprs[u].output;
                stack.push((consumer, child_depth, 0));
            }
            None => {
                memo.insert((t, d), partial.remove(&(t, d)).flatten());
                stack.pop();
            }
        }
    }
    memo.remove(&(c, depth)).flatten()
}
