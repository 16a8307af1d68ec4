//! The loop tree of a kernel from the placements: each expression's computation in the loops
//! its placement names, a loop shared by the tensors whose placements name it (found through
//! producers and consumers already placed, or about to be), in an order that computes every
//! producer before its consumers.

#[allow(unused_imports)]
use super::*;

pub(super) struct LoopNode {
    key: LoopKey,
    parallel: ParallelType,
    children: Vec<Child>,
}

pub(super) enum Child {
    Loop(usize),
    Compute(Box<Compute>),
}

pub(super) fn build_tree(cx: &mut Ctx, k: &mut Kernel, order: &[usize]) -> Result<(), Diagnostic> {
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
pub(super) fn move_after_siblings(
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

pub(super) fn make_compute(cx: &Ctx, e: usize) -> Result<Compute, Diagnostic> {
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

/// Tensors the search for loops opened by a producer not placed yet looks at, at most.
pub(super) const UPSTREAM_WALK_LIMIT: usize = 16;

/// Loop instances already opened for the outer `depth` loops of tensor `c`: by a producer of `c`
/// placed earlier, or, when `c` is itself inlined, for the loops it shares with its consumers
/// (the first consumer, in use order, that has some).
///
/// The consumers form a DAG (softmax-like chains reach one tensor along many paths), so the
/// search memoises each (tensor, depth) and keeps its own stack instead of recursing.
pub(super) fn open_loops(
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
        // The walk is bounded (a broadcast operand is a few tensors away from its product;
        // an unbounded walk through long unplaced expressions would be quadratic).
        let mut stack = vec![(c, depth)];
        let mut seen = HashSet::new();
        while let Some((t, d)) = stack.pop() {
            if seen.len() > UPSTREAM_WALK_LIMIT {
                break;
            }
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
