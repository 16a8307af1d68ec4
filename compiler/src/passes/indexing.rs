//! Pass `indexing`: gives every buffer access its index expression.
//!
//! Requires: `allocation` (the axes each register/shared buffer spans). For a computation of
//! tensor `C`, the loop variables in scope give `C`'s loop axes; walking `C`'s splits and merges
//! backwards gives its root indices (an inner split `(o, i)` of extent factor `f` is
//! `o * f + i`; a merge `m` of `(a, b)` is `a = m / ext(b)`, `b = m % ext(b)`). A producer's
//! root index is the consumer's root index of the same axis class (0 on broadcast axes of global
//! tensors). Global tensors are dense row-major over their logical axes; register and shared
//! buffers are row-major over their allocated axes, each found from a loop variable of the same
//! key or forwards from the roots. Guarantees: every `Access` has `index: Some(..)`, with constants
//! folded (the `simplify` pass later uses loop-bound facts too).
//!
//! A computation sees every enclosing serial loop but only its own thread and block bindings:
//! a producer written with another thread layout is indexed from the consumer's root indices,
//! and reading another thread's registers or what another block writes is an error that names
//! both tensors, the axis and the rule.

use super::context::{Change, Ctx, LoopKey, LoopScope};
use crate::diag::Diagnostic;
use crate::fusion::{IterId, IterKind, IterOrigin, MemoryType, ParallelType, TensorId};
use crate::kir::{
    visit_mut, Access, Data, Flow, GridReduce, IndexOf, Kernel, Stmt, Val, VisitorMut,
};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<Change, Diagnostic> {
    let env: HashMap<LoopKey, Val> = cx.hw_env(k);
    let hw: HashSet<LoopKey> = env.keys().copied().collect();
    let buffers = k.buffers.clone();
    let mut body = std::mem::take(&mut k.body);
    let mut walk = Index {
        cx,
        buffers: &buffers,
        hw: &hw,
        env,
        scope: LoopScope::default(),
    };
    visit_mut(&mut body, &mut walk)?;
    k.body = body;
    Ok(Change::Changed)
}

/// The index variables of the loops around a statement, by loop key.
pub trait LoopVars {
    fn var(&self, key: LoopKey) -> Option<&Val>;
}

impl<S: std::hash::BuildHasher> LoopVars for std::collections::HashMap<LoopKey, Val, S> {
    fn var(&self, key: LoopKey) -> Option<&Val> {
        self.get(&key)
    }
}

/// The loop variables that index a computation: every enclosing serial loop, but
/// of the thread and block bindings only those of the consumer's own loop axes (`own`). A binding of
/// another tensor's axis (a producer written with another thread layout) names where *that*
/// tensor's thread stands, not where the consumer reads: the producer's index is then derived
/// from the consumer's root indices instead. (A view of the walk's variables: no copy per
/// statement.)
struct ConsumerEnv<'a> {
    own: &'a OwnLoops,
    hw: &'a HashSet<LoopKey>,
    env: &'a HashMap<LoopKey, Val>,
}

impl LoopVars for ConsumerEnv<'_> {
    fn var(&self, key: LoopKey) -> Option<&Val> {
        let v = self.env.get(&key)?;
        (!self.hw.contains(&key) || self.own.get(key).is_some()).then_some(v)
    }
}

/// The loops of a tensor and how each is bound (a loop domain has a few axes: a list).
struct OwnLoops(Vec<(LoopKey, ParallelType)>);

impl OwnLoops {
    fn new(cx: &mut Ctx, t: TensorId) -> OwnLoops {
        let f = cx.fusion;
        OwnLoops(
            f.tensors[t]
                .loop_domain
                .iter()
                .map(|&id| (cx.key(id), f.ids[id].parallel))
                .collect(),
        )
    }

    /// How loop `key` is bound (the last axis with that key, as a map built from the list
    /// would keep).
    fn get(&self, key: LoopKey) -> Option<ParallelType> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|&(_, p)| p)
    }
}

/// A consumer that reads a producer written with another thread or block layout reads elements
/// other threads wrote: a thread-bound axis of the producer that is not a loop of the consumer.
/// Shared and global memory make that visible within the block (the `sync` pass inserts the
/// barrier), registers never do, and nothing orders writes of one block before reads of another.
fn check_layout_change(
    cx: &mut Ctx,
    producer: TensorId,
    consumer: TensorId,
    own: &OwnLoops,
    memory: MemoryType,
) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    for (pos, &id) in f.tensors[producer].loop_domain.iter().enumerate() {
        let par = f.ids[id].parallel;
        // Reduction axes are combined before anyone reads the result (every thread holds it).
        if !par.is_hw() || f.ids[id].kind != IterKind::Iteration || own.get(cx.key(id)) == Some(par)
        {
            continue;
        }
        // Named as the user wrote them (an unnamed expression by its text).
        let (pn, cn) = (f.describe(producer), f.describe(consumer));
        let rule = if par.is_block() {
            format!("blocks cannot read what other blocks write within one kernel; parallelize {pn} and {cn} over {par} the same way (propagate)")
        } else if memory == MemoryType::Local {
            format!("a thread cannot read another thread's registers; keep {pn} in shared memory (set_memory(shared)) or give both the same {par} axis")
        } else {
            continue;
        };
        return Err(Diagnostic::new(
            format!("{cn} reads {pn} with another thread layout: axis {pos} of {pn} is bound to {par}, and {cn} does not bind that loop to {par}, so it reads elements other threads wrote; {rule}"),
            f.tensors[consumer].span.or(f.tensors[producer].span),
        ));
    }
    Ok(())
}

/// Indexes a block collective's register accesses (the thread's own: no consumer's roots).
fn index_registers<'a>(
    cx: &mut Ctx,
    env: &HashMap<LoopKey, Val>,
    buffers: &[crate::kir::Buffer],
    accesses: impl IntoIterator<Item = &'a mut Access>,
) -> Result<(), Diagnostic> {
    let roots = HashMap::default();
    let mut ix = Indexer {
        cx,
        env,
        roots: &roots,
        buffers,
        consumer: None,
    };
    for a in accesses {
        ix.access(a)?;
    }
    Ok(())
}

/// The walk of [`run`]: indexes every access of a statement without a body; `env` binds the
/// keys of the loops around it.
struct Index<'s, 'c> {
    cx: &'s mut Ctx<'c>,
    buffers: &'s [crate::kir::Buffer],
    hw: &'s HashSet<LoopKey>,
    env: HashMap<LoopKey, Val>,
    scope: LoopScope,
}

impl VisitorMut for Index<'_, '_> {
    type Error = Diagnostic;

    fn stmt(&mut self, s: &mut Stmt, _at: usize) -> Result<Flow, Diagnostic> {
        let (cx, buffers, hw, env) = (&mut *self.cx, self.buffers, self.hw, &self.env);
        match s {
            Stmt::Compute(c) => {
                let consumer = cx.fusion.exprs[c.expr].output;
                let own = OwnLoops::new(cx, consumer);
                let mut reads = Vec::new();
                c.value.for_each_read(&mut |a| reads.push(a.buffer));
                for b in reads {
                    if let Some(p) = buffers[b].tensor {
                        check_layout_change(cx, p, consumer, &own, buffers[b].memory)?;
                    }
                }
                let env = ConsumerEnv { own: &own, hw, env };
                let roots = consumer_roots(cx, consumer, &env);
                let maps = view_roots(cx, c.expr, &roots)?;
                index_compute(cx, &env, buffers, consumer, &roots, maps.as_deref(), c)?;
            }
            Stmt::BlockReduce { acc, .. } | Stmt::GridReduce(GridReduce { acc, .. }) => {
                index_registers(cx, env, buffers, [acc])?
            }
            Stmt::BlockWelford {
                mean, m2, count, ..
            } => index_registers(cx, env, buffers, [mean, m2, count])?,
            _ => {}
        }
        Ok(Flow::Descend)
    }

    fn enter(&mut self, s: &Stmt, _body: usize) -> Result<Flow, Diagnostic> {
        self.scope.enter(&mut self.env, s);
        Ok(Flow::Descend)
    }

    fn leave(&mut self, s: &mut Stmt, _body: usize) -> Result<(), Diagnostic> {
        self.scope.leave(&mut self.env, s);
        Ok(())
    }
}

/// For a view that moves indices (`slice`, `pad`, `cat`, `reshape`), the root indices each
/// operand is read at, by axis class: the consumer's with the moved axes replaced. A pad or
/// cat reads its operand only where the index falls inside it (`loop_nest` makes the compute a
/// `where`), but every read is clamped into the operand so that none leaves its buffer.
/// `None` for any other expression.
fn view_roots(
    cx: &mut Ctx,
    e: crate::fusion::ExprId,
    roots: &HashMap<IterId, Val>,
) -> Result<Option<Vec<HashMap<IterId, Val>>>, Diagnostic> {
    use crate::fusion::{Op, Operand};
    let f = cx.fusion;
    let expr = &f.exprs[e];
    if !expr.op.moves_indices() {
        return Ok(None);
    }
    let out = expr.output;
    let out_axes = f.logical(out);
    let missing = || {
        Diagnostic::new(
            format!(
                "cannot index `{}`: an index of the view is not available where it is computed (check the inlining positions)",
                f.tensors[out].name
            ),
            f.tensors[out].span,
        )
    };
    let out_index: Vec<Val> = out_axes
        .iter()
        .map(|&id| roots.get(&f.class_of(id)).cloned().ok_or_else(missing))
        .collect::<Result<_, _>>()?;
    let extent = |id: IterId| Val::from_size(&f.class_extent(f.class_of(id)));
    // max(v, 0) with the one minimum the index language has.
    let non_negative = |v: Val| Val::sub(v.clone(), Val::min(v, Val::Int(0)));
    let mut maps = Vec::with_capacity(expr.inputs.len());
    for (k, o) in expr.inputs.iter().enumerate() {
        let Operand::Tensor(input) = *o else {
            continue;
        };
        let in_axes = f.logical(input);
        let mut map = roots.clone();
        let mut set = |axis: usize, v: Val| {
            map.insert(f.class_of(in_axes[axis]), v);
        };
        match &expr.op {
            Op::Slice {
                axis, start, step, ..
            } => {
                let along = Val::add(
                    Val::from_size(start),
                    Val::mul(Val::Int(*step), out_index[*axis].clone()),
                );
                set(*axis, along);
            }
            Op::Pad { axis, before, .. } => {
                // (Without a `before`, the index is never below the input's first.)
                let inside = match *before {
                    0 => out_index[*axis].clone(),
                    b => non_negative(Val::sub(out_index[*axis].clone(), Val::Int(b))),
                };
                let last = Val::sub(extent(in_axes[*axis]), Val::Int(1));
                set(*axis, Val::min(inside, last));
            }
            Op::Cat { axis } if k == 0 => {
                let last = Val::sub(extent(in_axes[*axis]), Val::Int(1));
                set(*axis, Val::min(out_index[*axis].clone(), last));
            }
            Op::Cat { axis } => {
                let Operand::Tensor(first) = expr.inputs[0] else {
                    continue;
                };
                let first_extent = extent(f.logical(first)[*axis]);
                set(
                    *axis,
                    non_negative(Val::sub(out_index[*axis].clone(), first_extent)),
                );
            }
            Op::ExpandBlocks { block } => {
                for (axis, &b) in block.iter().enumerate() {
                    if b != 1 {
                        set(axis, Val::div(out_index[axis].clone(), Val::Int(b)));
                    }
                }
            }
            // The index operand is read at the output's own indices (by the value below).
            Op::Gather { .. } if k == 1 => {}
            // `x` is read along `axis` at the index's value, clamped into `x`.
            Op::Gather { axis, select } => {
                let Operand::Tensor(index) = expr.inputs[1] else {
                    continue;
                };
                let source = crate::fusion::build::index_source(f, index)
                    .expect("fusion::build reads an index from a fusion input");
                // `index_select`'s 1-D index is read at the output's index along `axis`.
                let at: HashMap<IterId, Val> = if *select {
                    let only = f.class_of(f.logical(index)[0]);
                    HashMap::from_iter([(only, out_index[*axis].clone())])
                } else {
                    roots.clone()
                };
                let i = global_index(f, source, &at).map_err(|_| missing())?;
                let n = extent(in_axes[*axis]);
                set(
                    *axis,
                    Val::IndexIn(f.tensors[source].name.clone(), Box::new(i), Box::new(n)),
                );
            }
            // The linear index of the output is the input's.
            Op::Reshape => {
                let mut linear: Option<Val> = None;
                for (&id, v) in out_axes.iter().zip(&out_index) {
                    linear = Some(match linear {
                        None => v.clone(),
                        Some(l) => Val::add(Val::mul(l, extent(id)), v.clone()),
                    });
                }
                let mut rest = linear.unwrap_or(Val::Int(0));
                for axis in (0..in_axes.len()).rev() {
                    if axis == 0 {
                        set(axis, rest.clone());
                    } else {
                        let e = extent(in_axes[axis]);
                        set(axis, Val::rem(rest.clone(), e.clone()));
                        rest = Val::div(rest, e);
                    }
                }
            }
            _ => unreachable!("matched above"),
        }
        maps.push(map);
    }
    Ok(Some(maps))
}

/// Indexes a computation at the consumer's `roots`; a view that moves indices (`maps`, the
/// operands' indices in operand order) reads its operands at those instead, and only its
/// condition (a pad's or cat's) and output at `roots`.
fn index_compute(
    cx: &mut Ctx,
    env: &dyn LoopVars,
    buffers: &[crate::kir::Buffer],
    consumer: TensorId,
    roots: &HashMap<IterId, Val>,
    maps: Option<&[HashMap<IterId, Val>]>,
    c: &mut crate::kir::Compute,
) -> Result<(), Diagnostic> {
    let mut ix = Indexer {
        cx,
        env,
        roots,
        buffers,
        consumer: Some(consumer),
    };
    ix.access(&mut c.out)?;
    match maps {
        None => ix.data(&mut c.value),
        Some(maps) => index_view(cx, env, buffers, consumer, roots, maps, &mut c.value),
    }
}

/// Indexes the value of a view that moves indices (of `view`, its output): its condition (a
/// pad's or cat's) at the output's `roots`, operand `k` at `maps[k]`. A buffer an operand reads
/// that is not a global one holds a tensor the view does not recompute (a reduction's result,
/// see `Op::is_recomputed_in_views`): it is read at the consumer's own indices, so the view
/// must not move any of its axes (`fusion::build` refuses such a view first).
fn index_view(
    cx: &mut Ctx,
    env: &dyn LoopVars,
    buffers: &[crate::kir::Buffer],
    view: TensorId,
    roots: &HashMap<IterId, Val>,
    maps: &[HashMap<IterId, Val>],
    value: &mut Data,
) -> Result<(), Diagnostic> {
    let at = |cx: &mut Ctx, map: &HashMap<IterId, Val>, d: &mut Data| {
        check_unmoved_reads(cx, buffers, view, roots, map, d)?;
        Indexer {
            cx,
            env,
            roots: map,
            buffers,
            consumer: Some(view),
        }
        .data(d)
    };
    match value {
        Data::Ternary(_, _, xs) => {
            let [cond, a, b] = &mut **xs;
            at(cx, roots, cond)?;
            at(cx, &maps[0], a)?;
            at(cx, maps.get(1).unwrap_or(roots), b)
        }
        other => at(cx, &maps[0], other),
    }
}

/// The check of [`index_view`]: every read of `d` (indexed at `map`) that is not of a global
/// buffer reads its tensor at the view's output indices `roots`.
fn check_unmoved_reads(
    cx: &Ctx,
    buffers: &[crate::kir::Buffer],
    view: TensorId,
    roots: &HashMap<IterId, Val>,
    map: &HashMap<IterId, Val>,
    d: &Data,
) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let mut moved: Option<(String, &'static str, usize)> = None;
    d.for_each_read(&mut |a| {
        let buf = &buffers[a.buffer];
        let Some(t) = buf.tensor.filter(|_| buf.memory != MemoryType::Global) else {
            return;
        };
        for (axis, &id) in f.logical(t).iter().enumerate() {
            let class = f.class_of(id);
            if map.get(&class) != roots.get(&class) && moved.is_none() {
                moved = Some((buf.name.clone(), buf.memory.name(), axis));
            }
        }
    });
    match moved {
        None => Ok(()),
        Some((held, memory, axis)) => Err(Diagnostic::new(
            format!("`{}` is a view that moves indices, and it would read `{held}` (held in {memory} memory where it is computed) at a moved index along its axis {axis}: a view recomputes elementwise ops from the fusion inputs, not a reduction's result; apply the view before the reduction", f.tensors[view].name),
            f.tensors[view].span,
        )),
    }
}

/// Root indices of the consumer, by axis class, from the loop variables in scope. (`dyn`: one
/// copy of this large function in the playground's wasm instead of one per environment type.)
pub fn consumer_roots(cx: &mut Ctx, c: TensorId, env: &dyn LoopVars) -> HashMap<IterId, Val> {
    let f = cx.fusion;
    // Axes between root and loop domain, newest first (children before parents).
    let mut between = f.axes_between(c);
    between.reverse();
    let mut vals: HashMap<IterId, Val> = HashMap::with_capacity_and_hasher(
        f.tensors[c].loop_domain.len() + between.len() + f.tensors[c].root.len(),
        Default::default(),
    );
    for &id in &f.tensors[c].loop_domain {
        if let Some(v) = env.var(cx.key(id)) {
            vals.insert(id, v.clone());
        }
    }
    for &id in &between {
        if let Some(v) = env.var(cx.key(id)) {
            vals.entry(id).or_insert_with(|| v.clone());
        }
        match f.ids[id].origin.clone() {
            IterOrigin::Root => {}
            IterOrigin::Split {
                parent,
                factor,
                inner_split,
                is_outer,
            } => {
                if !is_outer || vals.contains_key(&parent) {
                    continue;
                }
                let Some(sibling) = f.split_inner(id) else {
                    continue;
                };
                if !vals.contains_key(&id) || !vals.contains_key(&sibling) {
                    continue;
                }
                // The pair's values move into their parent's: nothing reads a split's
                // children after it (they are newer than every axis still to come, and
                // neither is a root). Cloning them made a deep split quadratic.
                let (Some(o), Some(i)) = (vals.remove(&id), vals.remove(&sibling)) else {
                    continue;
                };
                let inner_extent = if inner_split {
                    Val::Int(factor)
                } else {
                    let pk = cx.key(parent);
                    Val::ceil_div(Val::from_size(cx.key_extent(pk)), Val::Int(factor))
                };
                vals.insert(parent, Val::add(Val::mul(o, inner_extent), i));
            }
            IterOrigin::Merge { outer, inner } => {
                let Some(m) = vals.get(&id).cloned() else {
                    continue;
                };
                let ik = cx.key(inner);
                let ext = Val::from_size(cx.key_extent(ik));
                vals.entry(outer)
                    .or_insert_with(|| Val::div(m.clone(), ext.clone()));
                vals.entry(inner).or_insert_with(|| Val::rem(m, ext));
            }
        }
    }
    // The root values move out (a root is listed once; `vals` is dropped next).
    let mut by_class = HashMap::default();
    for &r in &f.tensors[c].root {
        if let Some(v) = vals.remove(&r) {
            by_class.insert(f.class_of(r), v);
        }
    }
    by_class
}

/// The element of global tensor `t` (dense, row-major over its logical axes; 0 along a
/// broadcast axis) at the root indices `roots` (by axis class); `Err` names an axis whose index
/// `roots` lacks.
fn global_index(
    f: &crate::fusion::Fusion,
    t: TensorId,
    roots: &HashMap<IterId, Val>,
) -> Result<Val, usize> {
    let mut idx: Option<Val> = None;
    for (p, &r) in f.logical(t).iter().enumerate() {
        let broadcast = f.ids[r].kind == IterKind::Broadcast;
        let v = if broadcast {
            Val::Int(0)
        } else {
            roots.get(&f.class_of(r)).cloned().ok_or(p)?
        };
        idx = Some(match idx {
            None => v,
            Some(prev) => {
                let e = match (&f.ids[r].root_extent, broadcast) {
                    (Some(ext), false) => Val::from_size(ext),
                    _ => Val::Int(1),
                };
                Val::add(Val::mul(prev, e), v)
            }
        });
    }
    Ok(idx.unwrap_or(Val::Int(0)))
}

struct Indexer<'a, 'b> {
    cx: &'a mut Ctx<'b>,
    env: &'a dyn LoopVars,
    roots: &'a HashMap<IterId, Val>,
    buffers: &'a [crate::kir::Buffer],
    /// The tensor a computation computes (its `Data::Index` values are its root indices).
    consumer: Option<TensorId>,
}

impl Indexer<'_, '_> {
    fn data(&mut self, d: &mut Data) -> Result<(), Diagnostic> {
        match d {
            Data::Read(a) => self.access(a),
            Data::Unary(_, _, x) | Data::Cast(_, x) => self.data(x),
            Data::Binary(_, _, x, y) => {
                self.data(x)?;
                self.data(y)
            }
            Data::Ternary(_, _, xs) => xs.iter_mut().try_for_each(|x| self.data(x)),
            Data::Param(..) | Data::Literal(..) => Ok(()),
            Data::View(e, x) => {
                let view = self.cx.fusion.exprs[*e].output;
                let maps = view_roots(self.cx, *e, self.roots)?
                    .expect("a `Data::View` is of a view that moves indices");
                index_view(self.cx, self.env, self.buffers, view, self.roots, &maps, x)
            }
            Data::Index(of, v) => {
                let t = self
                    .consumer
                    .expect("an index is computed by a computation");
                *v = Some(match of {
                    IndexOf::Axis(axis) => self.root_index(t, *axis)?,
                    // Horner's form over the axes: ((i0 * e1 + i1) * e2 + i2) ...; where a
                    // merge made i0 = m / e1 and i1 = m % e1, `simplify` turns it back into m.
                    IndexOf::Element(axes) => {
                        let mut sum = self.root_index(t, axes[0])?;
                        for &axis in &axes[1..] {
                            let root = self.cx.fusion.logical(t)[axis];
                            let key = self.cx.key(root);
                            let extent = Val::from_size(self.cx.key_extent(key));
                            sum = Val::add(Val::mul(sum, extent), self.root_index(t, axis)?);
                        }
                        sum
                    }
                    // Made after this pass, with its value.
                    IndexOf::Value => return Ok(()),
                });
                Ok(())
            }
        }
    }

    /// The index of `t` (the computed tensor) along its logical axis `axis`.
    fn root_index(&self, t: TensorId, axis: usize) -> Result<Val, Diagnostic> {
        let f = self.cx.fusion;
        let root = f.logical(t)[axis];
        self.roots.get(&f.class_of(root)).cloned().ok_or_else(|| {
            Diagnostic::new(
                format!(
                    "cannot compute `{}`: its index along axis {axis} is not available where it is computed (check the inlining positions)",
                    f.tensors[t].name
                ),
                f.tensors[t].span,
            )
        })
    }

    fn access(&mut self, a: &mut Access) -> Result<(), Diagnostic> {
        let buf = &self.buffers[a.buffer];
        let f = self.cx.fusion;
        let missing = |what: &str| {
            Diagnostic::new(
                format!("cannot index `{}`: {what} is not available where it is read (check the inlining positions)", buf.name),
                buf.tensor.and_then(|t| f.tensors[t].span),
            )
        };
        let index = if buf.memory == MemoryType::Global {
            let t = buf.tensor.ok_or_else(|| missing("the tensor"))?;
            global_index(f, t, self.roots).map_err(|p| missing(&format!("axis {p}")))?
        } else {
            let ids = self
                .cx
                .layout
                .alloc_ids
                .get(&a.buffer)
                .cloned()
                .unwrap_or_default();
            let tensor = buf.tensor;
            let memory = buf.memory;
            // Row-major over the allocated axes; a padded shared buffer's rows (its trailing
            // axes from the tensor's contiguous axis) lie `row + pad` elements apart.
            let pad = self.cx.row_padding(tensor, memory, &ids);
            let split = ids.len() - pad.as_ref().map_or(0, |p| p.row_axes);
            let mut parts = [None, None];
            for (part, ids) in [&ids[..split], &ids[split..]].into_iter().enumerate() {
                for &id in ids {
                    let key = self.cx.key(id);
                    let v = self
                        .forward(id)
                        .ok_or_else(|| missing(&format!("loop `{}`", self.cx.keys.names[key])))?;
                    parts[part] = Some(match parts[part].take() {
                        None => v,
                        Some(prev) => {
                            Val::add(Val::mul(prev, Val::from_size(&self.cx.id_extent(id))), v)
                        }
                    });
                }
            }
            match (parts, pad) {
                ([Some(rows), Some(within)], Some(pad)) => {
                    Val::add(Val::mul(rows, Val::from_size(&pad.stride)), within)
                }
                ([rows, within], _) => rows.or(within).unwrap_or(Val::Int(0)),
            }
        };
        // Fold constants now (no loop facts yet): later passes and dumps see smaller trees.
        a.index = Some(super::simplify::simplify(
            &index,
            &std::collections::HashMap::new(),
        ));
        Ok(())
    }

    /// Index of an axis of a producer: a loop variable of the same key, else from its parents.
    fn forward(&mut self, id: IterId) -> Option<Val> {
        let key = self.cx.key(id);
        if let Some(v) = self.env.var(key) {
            return Some(v.clone());
        }
        let f = self.cx.fusion;
        match f.ids[id].origin.clone() {
            IterOrigin::Root => self.roots.get(&f.class_of(id)).cloned(),
            IterOrigin::Split {
                parent,
                factor,
                inner_split,
                is_outer,
            } => {
                let p = self.forward(parent)?;
                let inner_extent = if inner_split {
                    Val::Int(factor)
                } else {
                    let pk = self.cx.key(parent);
                    Val::ceil_div(Val::from_size(self.cx.key_extent(pk)), Val::Int(factor))
                };
                Some(if is_outer {
                    Val::div(p, inner_extent)
                } else {
                    Val::rem(p, inner_extent)
                })
            }
            IterOrigin::Merge { outer, inner } => {
                let (o, i) = (self.forward(outer)?, self.forward(inner)?);
                Some(Val::add(
                    Val::mul(o, Val::from_size(&self.cx.id_extent(inner))),
                    i,
                ))
            }
        }
    }
}
