//! The loop tree of a kernel from the placements: each expression's computation in the loops
//! its placement names, a loop shared by the tensors whose placements name it (found through
//! producers and consumers already placed, or about to be), in an order that computes every
//! producer before its consumers.

#[allow(unused_imports)]
use super::*;
use crate::fusion::{BinaryOp, ExprId, TernaryOp, UnaryOp};
use rustc_hash::FxHashMap;

pub(super) struct LoopNode {
    key: LoopKey,
    parallel: ParallelType,
    children: Vec<Child>,
}

pub(super) enum Child {
    Loop(usize),
    Compute(Box<Compute>),
}

pub(super) fn build_tree(cx: &mut Ctx, k: &mut Kernel, order: &[ExprId]) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let mut tree = Growing::new(f.tensors.len());
    // The parallel type of each loop, from the tensors that own an axis with its key: a producer
    // placed in a consumer loop over an axis it lacks (broadcast to it) may open that loop first.
    let owned_parallel = owned_parallel(cx, order);
    for &e in order {
        let expr = &f.exprs[e];
        let t = expr.output;
        let keys = &cx.layout.placement[&t].0;
        // Parallel type of each placement entry: from the tensor's own axis when it has it
        // (a loop domain has a few axes: a list, first match, as a map would keep the last).
        let key_parallel: Vec<(LoopKey, ParallelType)> = f.tensors[t]
            .loop_domain
            .iter()
            .rev()
            .map(|&id| (cx.keys.of_axis[&id], f.ids[id].parallel))
            .collect();
        let key_parallel = |key: LoopKey| {
            key_parallel
                .iter()
                .find(|(k, _)| *k == key)
                .map(|&(_, p)| p)
        };
        let producers: Vec<TensorId> = f
            .kernel_reads(e)
            .into_iter()
            .filter(|p| f.tensors[*p].definition.is_some())
            .collect();
        let q_t = cx.layout.placement[&t].1;
        let consumers: Vec<TensorId> = cx.reads.uses[t]
            .iter()
            .map(|&u| f.exprs[u].output)
            .collect();
        let mut inst = tree.shared_loops(cx, t, &producers, &consumers)?;
        let d = inst.len();
        tree.order_producers(cx, t, &producers, &inst)?;
        check_shared_parallel(cx, t, keys, &inst, &tree.nodes, &key_parallel)?;
        for &key in &keys[d..] {
            let parallel = key_parallel(key)
                .or_else(|| owned_parallel.get(&key).copied())
                .unwrap_or(ParallelType::Serial);
            let id = tree.nodes.len();
            tree.nodes.push(LoopNode {
                key,
                parallel,
                children: Vec::new(),
            });
            tree.seq_of_node.push(tree.seq);
            tree.seq += 1;
            match inst.last() {
                Some(&parent) => tree.nodes[parent].children.push(Child::Loop(id)),
                None => tree.top.push(Child::Loop(id)),
            }
            inst.push(id);
        }
        let compute = make_compute(cx, e)?;
        tree.stmt_seq[t] = Some(tree.seq);
        tree.seq += 1;
        match inst.last() {
            Some(&parent) => tree.nodes[parent]
                .children
                .push(Child::Compute(Box::new(compute))),
            None => tree.top.push(Child::Compute(Box::new(compute))),
        }
        for c in consumers {
            // A tensor that shares no loops with its consumers (a 0-dim value computed once at
            // the kernel's top, `1.0 / cap`) opens none for them: an empty entry would read as
            // "the consumer's loops are known, and there are none", which hides the loops its
            // other producers open and makes them disagree with the producers' own loops.
            // A reader of an online softmax's final statistic after the tile loop shares
            // none of the loops the statistic is placed in (`place`).
            if q_t == 0 || !cx.layout.placement[&c].0.starts_with(&keys[..q_t]) {
                continue;
            }
            tree.any_pending = true;
            let open = tree.pending[c].get_or_insert_with(Vec::new);
            if q_t > open.len() {
                *open = inst[..q_t].to_vec();
            }
        }
        tree.instances[t] = Some(inst);
    }
    let mut hw: Vec<(String, ParallelType)> = Vec::new();
    k.body = convert(cx, &mut tree.nodes, tree.top, &mut hw);
    k.hw_vars = hw;
    Ok(())
}

/// How many of its loops producer `p` shares with its consumer `t`: the loops its placement
/// shares with its consumers, except that a reader of an online softmax's final statistic
/// (`m`, `l`) after the tile loop shares only the loops outside the tile loop with it
/// (`place`).
fn loops_shared(cx: &Ctx, p: TensorId, t: TensorId) -> usize {
    let (p_keys, q) = &cx.layout.placement[&p];
    p_keys[..*q]
        .iter()
        .zip(&cx.layout.placement[&t].0)
        .take_while(|(a, b)| a == b)
        .count()
}

/// The loop tree as [`build_tree`] grows it, one expression at a time.
struct Growing {
    nodes: Vec<LoopNode>,
    top: Vec<Child>,
    /// Per tensor (indexed by id, not hashed: these are read for every expression): the loop
    /// instances of its placement once placed, its statement's sequence number, and the loops
    /// opened for it by a producer placed earlier.
    instances: IdVec<TensorId, Option<Vec<usize>>>,
    stmt_seq: IdVec<TensorId, Option<usize>>,
    pending: IdVec<TensorId, Option<Vec<usize>>>,
    /// Sequence number of the outermost own element of each tensor at each depth.
    seq_of_node: Vec<usize>,
    search: OpenLoopSearch,
    /// Whether any loops are open for a tensor yet: until then every search finds none (the
    /// first expression of a long chain would otherwise walk the whole chain to learn that).
    any_pending: bool,
    seq: usize,
}

impl Growing {
    fn new(n_tensors: usize) -> Growing {
        Growing {
            nodes: Vec::new(),
            top: Vec::new(),
            instances: vec![None; n_tensors].into(),
            stmt_seq: vec![None; n_tensors].into(),
            pending: vec![None; n_tensors].into(),
            seq_of_node: Vec::new(),
            search: OpenLoopSearch::default(),
            any_pending: false,
            seq: 0,
        }
    }

    fn placed(&self, p: TensorId) -> &[usize] {
        self.instances[p]
            .as_deref()
            .expect("producers are placed first")
    }

    /// The loop instances `t` shares: those of its producer shared deepest, or the deeper
    /// ones a sibling producer already opened for one of its `consumers`; an error when the
    /// two disagree.
    fn shared_loops(
        &mut self,
        cx: &Ctx,
        t: TensorId,
        producers: &[TensorId],
        consumers: &[TensorId],
    ) -> Result<Vec<usize>, Diagnostic> {
        let f = cx.fusion;
        let mut d = 0;
        let mut best: Option<TensorId> = None;
        let keys = &cx.layout.placement[&t].0;
        for &p in producers {
            let q = loops_shared(cx, p, t);
            if q > d {
                d = q;
                best = Some(p);
            }
        }
        let mut inst: Vec<usize> = best
            .map(|b| self.placed(b)[..d].to_vec())
            .unwrap_or_default();
        // Loops already opened for a consumer of `t` by a sibling producer are shared too.
        let q_t = cx.layout.placement[&t].1;
        for c in consumers {
            let open = if self.any_pending {
                self.search
                    .open_loops(cx, &self.pending, &self.instances, *c, q_t)
            } else {
                None
            };
            if let Some(open) = open {
                // Only the opened loops of `t`'s own keys: a sibling that is an online
                // softmax's statistic opened the tile loop, which a reader of its final value
                // after that loop does not share.
                let n = q_t.min(
                    open.iter()
                        .zip(keys)
                        .take_while(|(&i, &key)| self.nodes[i].key == key)
                        .count(),
                );
                let common = n.min(inst.len());
                if open[..common] != inst[..common] {
                    return Err(Diagnostic::new(
                        match &f.tensors[t].written {
                            // The user never wrote this tensor's name: say what to write.
                            Some(text) => format!("the expression `{text}` cannot share loops both with its producers and with its consumer {}; name it (`t = {text}`) and lower the inlining position of `t`", f.describe(*c)),
                            None => format!("`{}` cannot share loops both with its producers and with its consumer {}; lower its inlining position", f.tensors[t].name, f.describe(*c)),
                        },
                        f.tensors[t].span,
                    ));
                }
                if n > inst.len() {
                    inst = open[..n].to_vec();
                }
            }
        }
        Ok(inst)
    }

    /// Checks that each producer of `t` runs in the loops it shares with `t` (`inst`), and
    /// puts each one computed outside them before them: a shared loop opened (by a sibling
    /// inlined deeper) before the producer was computed moves after it when nothing computed
    /// since needs what it holds, else an error.
    fn order_producers(
        &mut self,
        cx: &Ctx,
        t: TensorId,
        producers: &[TensorId],
        inst: &[usize],
    ) -> Result<(), Diagnostic> {
        let f = cx.fusion;
        let d = inst.len();
        for &p in producers {
            let q = loops_shared(cx, p, t);
            if self.placed(p)[..q] != inst[..q] {
                return Err(Diagnostic::new(
                    format!(
                        "`{}` is inlined into `{}` but the loops it shares are not the loops `{}` runs in; lower its inlining position",
                        f.tensors[p].name, f.tensors[t].name, f.tensors[t].name
                    ),
                    f.tensors[p].span,
                ));
            }
            if q >= d {
                continue;
            }
            let outer_of_p = match self.placed(p).get(q) {
                Some(&node) => self.seq_of_node[node],
                None => self.stmt_seq[p].expect("placed"),
            };
            if outer_of_p > self.seq_of_node[inst[q]]
                && !move_after_siblings(
                    cx,
                    &mut self.nodes,
                    &mut self.top,
                    inst,
                    q,
                    &self.instances,
                    &mut self.seq_of_node,
                    &mut self.stmt_seq,
                    &mut self.seq,
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
        Ok(())
    }
}

/// The loops `t` shares (`inst`, at its placement's `keys`) are parallelized as its own axes
/// with those keys are.
fn check_shared_parallel(
    cx: &Ctx,
    t: TensorId,
    keys: &[LoopKey],
    inst: &[usize],
    nodes: &[LoopNode],
    key_parallel: &dyn Fn(LoopKey) -> Option<ParallelType>,
) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    for (depth, &i) in inst.iter().enumerate() {
        let want = key_parallel(keys[depth]);
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
    Ok(())
}

/// The parallel type of each loop, from the tensors that own an axis with its key (the first
/// one not serial, in `order`).
fn owned_parallel(cx: &Ctx, order: &[ExprId]) -> HashMap<LoopKey, ParallelType> {
    let f = cx.fusion;
    let mut owned_parallel: HashMap<LoopKey, ParallelType> = HashMap::new();
    for &e in order {
        for &id in &f.tensors[f.exprs[e].output].loop_domain {
            let p = f.ids[id].parallel;
            let slot = owned_parallel
                .entry(cx.keys.of_axis[&id])
                .or_insert(ParallelType::Serial);
            if *slot == ParallelType::Serial {
                *slot = p;
            }
        }
    }
    owned_parallel
}

/// The statements of the loop tree `children` (nodes are taken out of `nodes`), the variables
/// of hardware-bound loops collected in `hw`.
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
                    extent: crate::kir::Val::from_size(cx.key_extent(key)),
                    parallel,
                    digits: Vec::new(),
                    body: convert(cx, nodes, kids, hw),
                })
            }
        })
        .collect()
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
    instances: &IdVec<TensorId, Option<Vec<usize>>>,
    seq_of_node: &mut [usize],
    stmt_seq: &mut IdVec<TensorId, Option<usize>>,
    seq: &mut usize,
) -> bool {
    let f = cx.fusion;
    let root = inst[q];
    let opened = seq_of_node[root];
    let inside: HashSet<TensorId> = f
        .tensor_ids()
        .zip(instances.iter())
        .filter(|(_, i)| i.as_ref().and_then(|i| i.get(q)) == Some(&root))
        .map(|(t, _)| t)
        .collect();
    let reads_inside = f.tensor_ids().zip(stmt_seq.iter()).any(|(u, s)| {
        s.is_some_and(|s| s > opened)
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
        .chain(inside.iter().filter_map(|&t| stmt_seq[t]))
        .max()
        .unwrap_or(opened);
    let shift = *seq - opened;
    for n in subtree {
        seq_of_node[n] += shift;
    }
    for &t in &inside {
        if let Some(s) = &mut stmt_seq[t] {
            *s += shift;
        }
    }
    *seq += last - opened + 1;
    true
}

/// The tensor operand `k` of a view (views take tensors only).
fn operand_tensor(expr: &crate::fusion::Expr, k: usize) -> crate::fusion::TensorId {
    match expr.inputs[k] {
        Operand::Tensor(t) => t,
        _ => unreachable!("a view's operands are tensors (fusion::build)"),
    }
}

pub(super) fn make_compute(cx: &Ctx, e: ExprId) -> Result<Compute, Diagnostic> {
    let f = cx.fusion;
    let expr = &f.exprs[e];
    let out = Access {
        buffer: cx.layout.tensor_buffer[&expr.output],
        index: None,
    };
    // A view reads its operands at moved indices: one computed here is recomputed there.
    let (value, role) = if expr.op.moves_indices() {
        expr_value(cx, e, &|o, d| inlined_operand(cx, o, d))?
    } else {
        expr_value(cx, e, &|o, d| Ok(operand_read(cx, o, d)))?
    };
    Ok(Compute {
        expr: e,
        out,
        value,
        role,
        vector: None,
    })
}

/// An operand as read from where it is: a literal, a count, a scalar input's parameter or the
/// tensor's buffer.
fn operand_read(cx: &Ctx, o: &Operand, dtype: DType) -> Data {
    let f = cx.fusion;
    match *o {
        Operand::Scalar(v) => Data::Literal(v, dtype),
        Operand::Count(c) => count_data(f, c, dtype),
        Operand::Tensor(p) => {
            if f.is_scalar_param(p) {
                Data::Param(f.tensors[p].name.clone(), f.tensors[p].dtype)
            } else {
                Data::Read(Access {
                    buffer: cx.layout.tensor_buffer[&p],
                    index: None,
                })
            }
        }
    }
}

/// An operand of a view as the view reads it: a tensor computed elementwise (or a view) is
/// recomputed from its own operands, down to the fusion inputs, so that `indexing` can read
/// those at the moved indices (a nested view in a [`Data::View`]); a tensor computed otherwise
/// (a reduction, an `iota`, a `full`) is read from its buffer, which `fusion::build` allows
/// only where the view does not move its axes. The value is rounded to the tensor's type as
/// its buffer would hold it.
fn inlined_operand(cx: &Ctx, o: &Operand, dtype: DType) -> Result<Data, Diagnostic> {
    let f = cx.fusion;
    let Operand::Tensor(p) = *o else {
        return Ok(operand_read(cx, o, dtype));
    };
    let Some(def) = f.tensors[p].definition else {
        return Ok(operand_read(cx, o, dtype));
    };
    if !f.exprs[def].op.is_recomputed_in_views() {
        return Ok(operand_read(cx, o, dtype));
    }
    let (value, _) = expr_value(cx, def, &|o, d| inlined_operand(cx, o, d))?;
    let value = if f.exprs[def].op.moves_indices() {
        Data::View(def, Box::new(value))
    } else {
        value
    };
    let stored = f.tensors[p].dtype;
    Ok(if stored != stored.compute() {
        Data::Cast(stored, Box::new(value))
    } else {
        value
    })
}

/// The value expression `e` computes and its role, its operands given by `operand`.
fn expr_value(
    cx: &Ctx,
    e: ExprId,
    operand: &dyn Fn(&Operand, DType) -> Result<Data, Diagnostic>,
) -> Result<(Data, ComputeRole), Diagnostic> {
    let f = cx.fusion;
    let expr = &f.exprs[e];
    let t = expr.output;
    let out_dtype = f.tensors[t].dtype;
    // The type the op's operands are converted to (a comparison's, not its bool result's).
    let compute_type = f.compute_type(e);
    let (value, role) = match &expr.op {
        Op::Set
        | Op::Broadcast { .. }
        | Op::Permute { .. }
        | Op::Expand { .. }
        | Op::Slice { .. }
        | Op::Reshape
        | Op::ExpandBlocks { .. }
        // The index is no operand of the value: `indexing` reads it into the address of `x`.
        | Op::Gather { .. } => (operand(&expr.inputs[0], out_dtype)?, ComputeRole::Normal),
        // The input where the index falls inside it (`indexing` keeps the read in bounds
        // elsewhere), else the value.
        Op::Pad {
            axis,
            before,
            value,
            ..
        } => {
            let input = f.logical(operand_tensor(expr, 0))[*axis];
            let extent = f.class_extent(f.class_of(input));
            let end = match *before {
                0 => extent,
                b => crate::plan::SizeExpr::Add(
                    Box::new(extent),
                    Box::new(crate::plan::SizeExpr::Const(b)),
                ),
            };
            let value = Data::Ternary(
                TernaryOp::Where,
                compute_type,
                Box::new([
                    index_within(*axis, *before, &end),
                    operand(&expr.inputs[0], compute_type)?,
                    Data::Literal(*value, compute_type),
                ]),
            );
            (value, ComputeRole::Normal)
        }
        Op::Cat { axis } => {
            let first = f.logical(operand_tensor(expr, 0))[*axis];
            let value = Data::Ternary(
                TernaryOp::Where,
                compute_type,
                Box::new([
                    index_within(*axis, 0, &f.class_extent(f.class_of(first))),
                    operand(&expr.inputs[0], compute_type)?,
                    operand(&expr.inputs[1], compute_type)?,
                ]),
            );
            (value, ComputeRole::Normal)
        }
        Op::Cast(d) => (
            Data::Cast(*d, Box::new(operand(&expr.inputs[0], *d)?)),
            ComputeRole::Normal,
        ),
        Op::Unary(u) => (
            Data::Unary(
                *u,
                compute_type,
                Box::new(operand(&expr.inputs[0], compute_type)?),
            ),
            ComputeRole::Normal,
        ),
        Op::Binary(b) => (
            Data::Binary(
                *b,
                compute_type,
                Box::new(operand(&expr.inputs[0], compute_type)?),
                Box::new(operand(&expr.inputs[1], compute_type)?),
            ),
            ComputeRole::Normal,
        ),
        Op::Ternary(op) => {
            // `where`'s condition is a truth value: read in its own type, the op tests it. The
            // generator reads i64 (`TernaryOp::operand_type`).
            let cond_type = match op {
                TernaryOp::Where => match &expr.inputs[0] {
                    Operand::Tensor(c) => f.tensors[*c].dtype,
                    Operand::Scalar(_) | Operand::Count(_) => DType::Bool,
                },
                _ => op.operand_type(0, compute_type),
            };
            (
                Data::Ternary(
                    *op,
                    compute_type,
                    Box::new([
                        operand(&expr.inputs[0], cond_type)?,
                        operand(&expr.inputs[1], op.operand_type(1, compute_type))?,
                        operand(&expr.inputs[2], op.operand_type(2, compute_type))?,
                    ]),
                ),
                ComputeRole::Normal,
            )
        }
        Op::Reduce { op, .. } => (
            Data::Binary(
                op.combine(),
                compute_type,
                Box::new(Data::Read(Access {
                    buffer: cx.layout.tensor_buffer[&t],
                    index: None,
                })),
                Box::new(operand(&expr.inputs[0], compute_type)?),
            ),
            ComputeRole::ReductionUpdate,
        ),
        Op::Iota { axis } => (Data::Index(IndexOf::Axis(*axis), None), ComputeRole::Normal),
        Op::ElementIndex { axes } => (
            Data::Index(IndexOf::Element(axes.clone()), None),
            ComputeRole::Normal,
        ),
        // A half type's literal is written in f32 and converted (it has no literal of its own).
        Op::Full { value } => {
            let literal = Data::Literal(*value, out_dtype.compute());
            let value = if out_dtype == out_dtype.compute() {
                literal
            } else {
                Data::Cast(out_dtype, Box::new(literal))
            };
            (value, ComputeRole::Normal)
        }
        Op::Mma => {
            return Err(Diagnostic::new(
                "matrix products are not lowered by this compiler yet",
                expr.span,
            ))
        }
    };
    Ok((value, role))
}

/// A count of elements as a value of type `dtype`: its extents (a size symbol is the kernel's
/// parameter of that name), multiplied, less its constant (not below 0), all in `dtype`.
fn count_data(f: &crate::fusion::Fusion, c: crate::fusion::CountId, dtype: DType) -> Data {
    let n = size_data(&f.count_size(c), dtype);
    match f.counts[c].minus {
        0.0 => n,
        // max(n - m, 0): torch's degrees of freedom never go below 0. The sizes are index_t
        // parameters (`long long` with 64-bit indices): multiplied as such and converted to
        // `dtype` first, else an integer `max` has no single overload for (long long, int).
        m => Data::Binary(
            BinaryOp::Max,
            dtype,
            Box::new(Data::Binary(
                BinaryOp::Sub,
                dtype,
                Box::new(Data::Cast(dtype, Box::new(index_size(&f.count_size(c))))),
                Box::new(Data::Literal(m, dtype)),
            )),
            Box::new(Data::Literal(0.0, dtype)),
        ),
    }
}

/// A size in the kernel's index type, typed i64 (the widest it is): its parameters and their
/// products, for a conversion to another type.
fn index_size(s: &crate::plan::SizeExpr) -> Data {
    match s {
        crate::plan::SizeExpr::Sym(name) => Data::Param(name.clone(), DType::I64),
        other => size_data(other, DType::I64),
    }
}

/// A size as a value of type `dtype` (a size symbol is the kernel's parameter of that name).
fn size_data(s: &crate::plan::SizeExpr, dtype: DType) -> Data {
    use crate::plan::SizeExpr;
    let both = |op: BinaryOp, a: &SizeExpr, b: &SizeExpr| {
        Data::Binary(
            op,
            dtype,
            Box::new(size_data(a, dtype)),
            Box::new(size_data(b, dtype)),
        )
    };
    match s {
        SizeExpr::Const(v) => Data::Literal(*v as f64, dtype),
        SizeExpr::Sym(name) => Data::Param(name.clone(), DType::I32),
        SizeExpr::Add(a, b) => both(BinaryOp::Add, a, b),
        SizeExpr::Mul(a, b) => both(BinaryOp::Mul, a, b),
        SizeExpr::Max(a, b) => both(BinaryOp::Max, a, b),
        SizeExpr::CeilDiv(a, b) => {
            Data::Unary(UnaryOp::Ceil, dtype, Box::new(both(BinaryOp::Div, a, b)))
        }
    }
}

/// Whether the index of the computed tensor along `axis` is at least `lo` and below `hi`
/// (`lo` 0: only the upper bound), compared as i32 as `iota` is: where a pad or cat reads.
fn index_within(axis: usize, lo: i64, hi: &crate::plan::SizeExpr) -> Data {
    let index = || Box::new(Data::Index(IndexOf::Axis(axis), None));
    let below = Data::Binary(
        BinaryOp::Lt,
        DType::I32,
        index(),
        Box::new(size_data(hi, DType::I32)),
    );
    if lo == 0 {
        return below;
    }
    let above = Data::Binary(
        BinaryOp::Ge,
        DType::I32,
        index(),
        Box::new(Data::Literal(lo as f64, DType::I32)),
    );
    Data::Binary(
        BinaryOp::LogicalAnd,
        DType::Bool,
        Box::new(above),
        Box::new(below),
    )
}

/// Tensors the search for loops opened by a producer not placed yet looks at, at most. (An
/// attention on tensor cores reaches the key tile's loop, opened by `k`'s cache, from `v`'s
/// product through the whole softmax on the scores: about 30 tensors.)
pub(super) const UPSTREAM_WALK_LIMIT: usize = 64;

/// The search of [`OpenLoopSearch::open_loops`], with its working memory kept between calls
/// (it runs for every consumer of every expression: allocating its maps each time cost more
/// than the search).
#[derive(Default)]
pub(super) struct OpenLoopSearch {
    /// Answers for (tensor, depth) within one call.
    memo: FxHashMap<(TensorId, usize), Option<Vec<usize>>>,
    /// What `direct` found for a tensor still exploring its consumers.
    partial: FxHashMap<(TensorId, usize), Option<Vec<usize>>>,
    /// Frames of the consumer walk: (tensor, depth, index of the next consumer to try).
    frames: Vec<(TensorId, usize, usize)>,
    /// The upstream walk's stack and the (producer, depth) pairs it has seen (a list: the walk
    /// stops after [`UPSTREAM_WALK_LIMIT`] of them).
    upstream: Vec<(TensorId, usize)>,
    seen: Vec<(TensorId, usize)>,
}

impl OpenLoopSearch {
    /// Loop instances already opened for the outer `depth` loops of tensor `c`: by a producer
    /// of `c` placed earlier, or, when `c` is itself inlined, for the loops it shares with its
    /// consumers (the first consumer, in use order, that has some).
    ///
    /// The consumers form a DAG (softmax-like chains reach one tensor along many paths), so
    /// the search memoises each (tensor, depth) and keeps its own stack instead of recursing.
    pub(super) fn open_loops(
        &mut self,
        cx: &Ctx,
        pending: &IdVec<TensorId, Option<Vec<usize>>>,
        placed: &IdVec<TensorId, Option<Vec<usize>>>,
        c: TensorId,
        depth: usize,
    ) -> Option<Vec<usize>> {
        let f = cx.fusion;
        // The first answer needs no consumer walk in most calls: no maps touched then.
        let found = self.direct(cx, pending, placed, c, depth);
        if depth == 0 || found.as_ref().is_some_and(|o| o.len() >= depth) {
            return found;
        }
        // The longer of two answers (both are prefixes of the loops the tensor will run in).
        fn longer(a: Option<Vec<usize>>, b: Option<Vec<usize>>) -> Option<Vec<usize>> {
            match (a, b) {
                (Some(a), Some(b)) => Some(if b.len() > a.len() { b } else { a }),
                (a, b) => a.or(b),
            }
        }
        self.memo.clear();
        self.partial.clear();
        self.partial.insert((c, depth), found);
        self.frames.clear();
        self.frames.push((c, depth, 0));
        while let Some(&(t, d, next)) = self.frames.last() {
            if self.memo.contains_key(&(t, d)) {
                self.frames.pop();
                continue;
            }
            if next == 0 && (t, d) != (c, depth) {
                let found = self.direct(cx, pending, placed, t, d);
                if d == 0 || found.as_ref().is_some_and(|o| o.len() >= d) {
                    self.memo.insert((t, d), found);
                    self.frames.pop();
                    continue;
                }
                self.partial.insert((t, d), found);
            }
            let child_depth = d.min(cx.layout.placement[&t].1);
            // The consumer tried last, once its answer is known.
            if next > 0 {
                let prev = f.exprs[cx.reads.uses[t][next - 1]].output;
                if let Some(Some(open)) = self.memo.get(&(prev, child_depth)) {
                    let open = longer(self.partial.remove(&(t, d)).flatten(), Some(open.clone()));
                    self.memo.insert((t, d), open);
                    self.frames.pop();
                    continue;
                }
            }
            match cx.reads.uses[t].get(next) {
                Some(&u) => {
                    if let Some(frame) = self.frames.last_mut() {
                        frame.2 += 1;
                    }
                    let consumer = f.exprs[u].output;
                    self.frames.push((consumer, child_depth, 0));
                }
                None => {
                    let found = self.partial.remove(&(t, d)).flatten();
                    self.memo.insert((t, d), found);
                    self.frames.pop();
                }
            }
        }
        self.memo.remove(&(c, depth)).flatten()
    }

    /// The loops found for (c, depth) without looking at consumers. They may cover fewer than
    /// `depth` loops (a sibling inlined less deeply); the consumers may then know deeper ones.
    fn direct(
        &mut self,
        cx: &Ctx,
        pending: &IdVec<TensorId, Option<Vec<usize>>>,
        placed: &IdVec<TensorId, Option<Vec<usize>>>,
        c: TensorId,
        depth: usize,
    ) -> Option<Vec<usize>> {
        let f = cx.fusion;
        if depth == 0 {
            return None;
        }
        if let Some(open) = &pending[c] {
            return Some(open[..depth.min(open.len())].to_vec());
        }
        // A producer of `c` not placed yet will run in the loops already open for it (by its
        // own producers), as deep as it is inlined into `c`; so, through producers not placed
        // yet, will `c`.
        // The walk is bounded (a broadcast operand is a few tensors away from its product;
        // an unbounded walk through long unplaced expressions would be quadratic).
        self.upstream.clear();
        self.upstream.push((c, depth));
        self.seen.clear();
        while let Some((t, d)) = self.upstream.pop() {
            if self.seen.len() > UPSTREAM_WALK_LIMIT {
                break;
            }
            let Some(def) = f.tensors[t].definition else {
                continue;
            };
            for p in f.exprs[def].input_tensors() {
                let Some(&(_, q_p)) = cx.layout.placement.get(&p) else {
                    continue;
                };
                let n = d.min(q_p);
                if n == 0 || self.seen.contains(&(p, n)) {
                    continue;
                }
                self.seen.push((p, n));
                if let Some(open) = &pending[p] {
                    return Some(open[..n.min(open.len())].to_vec());
                }
                if placed[p].is_none() {
                    self.upstream.push((p, n));
                }
            }
        }
        None
    }
}
