//! Pass `tma_issue` (after `indexing`): replaces the `Bulk` loops of each copy by one `TmaLoad`
//! or `TmaStore` of the whole box: coordinates are the global tensor's root indices with the box
//! axes at 0; a store checks that its cache is laid out as the row-major box (which may start
//! anywhere in the cache). Every access to a swizzled box goes through [`swizzled_index`] (the
//! 16-byte chunks of each 128-byte line permuted), except the operands of a tensor-core
//! product, which wgmma reads through descriptors.
//!
//! When the outermost `Bulk` axes count boxes laid side by side (a K tile of two swizzle spans),
//! the cache gets one copy per box, each at its box's offset in the stage and its coordinates.
//! A multicast box (`TmaInfo::multicast`, from `cluster.rs`) becomes this CTA's slice: the
//! CTA's rank in the cluster (`kir::CTA_RANK`) times the slice in the outermost coordinate and
//! the stage offset.

#[allow(unused_imports)]
use super::*;
use crate::kir::VisitorMut;
use crate::passes::context::LoopScope;

pub fn run(cx: &mut Ctx, plan: &PipelinePlan, k: &mut Kernel) -> Result<Change, Diagnostic> {
    let env = cx.hw_env(k);
    let mut body = std::mem::take(&mut k.body);
    let mut walk = Issue {
        cx,
        plan,
        k,
        env,
        scope: LoopScope::default(),
    };
    crate::kir::visit_mut(&mut body, &mut walk)?;
    // Swizzled boxes: every element access of the buffer goes through the swizzle (the copies
    // address the box's start, which the swizzle keeps in place).
    let swizzled: HashMap<BufferId, (i64, u32)> = k
        .buffer_ids()
        .filter_map(|b| {
            let sw = plan.box_swizzle(&cx.layout.tensor_buffer, b)?;
            Some((b, (k.buffers[b].dtype.size_bytes() as i64, sw)))
        })
        .collect();
    if !swizzled.is_empty() {
        let mut swizzle = |a: &mut Access| {
            if let Some(&(elem, sw)) = swizzled.get(&a.buffer) {
                let i = a.index.take().unwrap_or(Val::Int(0));
                a.index = Some(swizzled_index(i, elem, sw));
            }
        };
        // Inside a tensor-core product's tile (three Mma loops) the operands are read through
        // matrix descriptors, whose swizzle mode applies the same mapping in hardware (the
        // `mma` pass reads the logical index there).
        crate::kir::for_each_stmt_mut(&mut body, &mut |s| match s {
            Stmt::Loop(l) if crate::passes::mma::is_product_tile(l) => Flow::Skip,
            Stmt::Compute(c) => {
                swizzle(&mut c.out);
                c.value.for_each_read_mut(&mut swizzle);
                Flow::Descend
            }
            _ => Flow::Descend,
        });
    }
    k.body = body;
    Ok(Change::Changed)
}

/// The walk of [`run`]: each nest of `Bulk` loops becomes its copies ([`box_copy`]); `env`
/// binds the keys of the loops around it.
struct Issue<'s, 'c> {
    cx: &'s mut Ctx<'c>,
    plan: &'s PipelinePlan,
    k: &'s Kernel,
    env: HashMap<LoopKey, Val>,
    scope: LoopScope,
}

impl VisitorMut for Issue<'_, '_> {
    type Error = Diagnostic;

    fn splice(&mut self, s: &mut Stmt, _at: usize) -> Result<Option<Vec<Stmt>>, Diagnostic> {
        match s {
            Stmt::Loop(l) if l.parallel == ParallelType::Bulk => {
                box_copy(self.cx, self.plan, self.k, l, &self.env).map(Some)
            }
            _ => Ok(None),
        }
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

/// The copy of the whole box that a nest of `Bulk` loops around one copy stands for: a load
/// into a cache, or a store of an output from its cache; one copy per box where the leading
/// Bulk loops count boxes laid side by side ([`super::plan::BoxShape::count`]).
pub(crate) fn box_copy(
    cx: &mut Ctx,
    plan: &PipelinePlan,
    k: &Kernel,
    l: &Loop,
    env: &HashMap<LoopKey, Val>,
) -> Result<Vec<Stmt>, Diagnostic> {
    let mut env = env.clone();
    let mut vars = Vec::new();
    let mut extents = Vec::new();
    let mut cur = l;
    let compute = loop {
        env.insert(cur.key, Val::Var(cur.var.clone()));
        vars.push(cur.var.clone());
        extents.push(match cur.extent {
            Val::Int(e) => e,
            _ => 0,
        });
        match cur.body.as_slice() {
            [Stmt::Loop(inner)] if inner.parallel == ParallelType::Bulk => cur = inner,
            [Stmt::Compute(c)] => break c,
            _ => {
                return Err(Diagnostic::new(
                    format!(
                        "internal: the Bulk loop `{}` does not hold exactly one copy",
                        l.var
                    ),
                    None,
                ))
            }
        }
    };
    let f = cx.fusion;
    let t = f.exprs[compute.expr].output;
    // The loops that count boxes (loads only) stay in the coordinates until each copy is made.
    let counting = plan
        .loads
        .iter()
        .find(|i| i.tensor == t)
        .map_or(0, |i| i.boxes.count_axes);
    let zero = |v: &Val| {
        let z = vars[counting..]
            .iter()
            .fold(v.clone(), |acc, var| acc.subst(var, &Val::Int(0)));
        crate::passes::simplify::simplify(&z, &HashMap::new())
    };
    // Box origin: the global tensor's root indices with the box axes at 0.
    let roots = consumer_roots(cx, t, &env);
    let mut coords = Vec::new();
    for r in f.logical(t).into_iter().rev() {
        let v = roots.get(&f.class_of(r)).ok_or_else(|| {
            Diagnostic::new(
                format!(
                    "cannot index the box of `{}`: a dimension has no index where it is copied",
                    f.tensors[t].name
                ),
                f.tensors[t].span,
            )
        })?;
        coords.push(zero(v));
    }
    let Data::Read(src) = &compute.value else {
        return Err(Diagnostic::new(
            "internal: a cache copy reads a tensor",
            None,
        ));
    };
    if let Some(store) = plan.stores.iter().find(|s| s.tensor == t).cloned() {
        check_box_layout(cx, k, &store, src, &vars, &extents)?;
        return Ok(vec![Stmt::TmaStore(TmaStore {
            map: store.map,
            src: Access {
                buffer: src.buffer,
                index: src.index.as_ref().map(zero),
            },
            coords,
            bytes: store.bytes,
        })]);
    }
    let Some(info) = plan.loads.iter().find(|i| i.tensor == t).cloned() else {
        return Err(Diagnostic::new(
            format!(
                "`{}` has Bulk axes but is not a TMA or bulk copy",
                f.tensors[t].name
            ),
            f.tensors[t].span,
        ));
    };
    let src = Access {
        buffer: src.buffer,
        index: src.index.as_ref().map(zero),
    };
    let load = TmaLoad {
        kind: match info.map {
            Some(map) => CopyKind::Tile { map },
            None => CopyKind::Bulk,
        },
        dst: Access {
            buffer: compute.out.buffer,
            index: Some(Val::Int(0)),
        },
        src,
        coords,
        bytes: info.bytes / info.boxes.count,
        bars: plan.full_of(t),
        slot: Val::Int(0),
        multicast: None,
    };
    if counting == 0 {
        return Ok(vec![Stmt::TmaLoad(multicast_slice(load, &info))]);
    }
    // Box `b` of several: the counting loops at their values for `b` (the last one fastest), in
    // the coordinates and in the cache's own index of the box's first element.
    let dst_index = zero(&compute.out.index.clone().unwrap_or(Val::Int(0)));
    let simplify = |v: Val| crate::passes::simplify::simplify(&v, &HashMap::new());
    let mut copies = Vec::new();
    for b in 0..info.boxes.count {
        let mut rest = b;
        let mut at = Vec::new();
        for (var, &e) in vars[..counting].iter().zip(&extents[..counting]).rev() {
            at.push((var, rest % e.max(1)));
            rest /= e.max(1);
        }
        let place = |v: &Val| {
            simplify(
                at.iter()
                    .fold(v.clone(), |acc, (var, x)| acc.subst(var, &Val::Int(*x))),
            )
        };
        let mut copy = load.clone();
        copy.coords = load.coords.iter().map(place).collect();
        copy.src.index = load.src.index.as_ref().map(place);
        copy.dst.index = Some(place(&dst_index));
        let box_elems = info.boxes.dims.iter().product::<i64>();
        if copy.dst.index != Some(Val::Int(b * box_elems)) {
            return Err(Diagnostic::new(
                format!(
                    "`{}`: the Bulk axes that count its boxes must be its outermost Bulk axes, so that box {b} starts at element {} of the stage (it is at {})",
                    f.tensors[t].name,
                    b * box_elems,
                    copy.dst.index.as_ref().map_or("0".into(), |v| v.text())
                ),
                f.tensors[t].span,
            ));
        }
        copies.push(Stmt::TmaLoad(multicast_slice(copy, &info)));
    }
    Ok(copies)
}

/// A multicast box ([`super::cluster`]): this CTA's slice of it, the `rank`-th of the box's
/// outermost dimension cut in `ctas` parts, at the same place in every CTA of the cluster.
fn multicast_slice(mut copy: TmaLoad, info: &TmaInfo) -> TmaLoad {
    let Some(ctas) = info.multicast else {
        return copy;
    };
    let rank = Val::Var(crate::kir::CTA_RANK.into());
    let outer = info.boxes.dims.len() - 1;
    let rows = info.boxes.dims[outer] / ctas;
    let elems = info.boxes.dims.iter().product::<i64>() / ctas;
    let at = |v: Val, step: i64| Val::add(v, Val::mul(rank.clone(), Val::Int(step)));
    copy.coords[outer] = at(copy.coords[outer].clone(), rows);
    copy.dst.index = Some(at(copy.dst.index.take().unwrap_or(Val::Int(0)), elems));
    copy.bytes /= ctas;
    copy.multicast = Some(ctas);
    copy
}

/// A TMA store reads its box row-major from shared memory: the cache must be laid out that way
/// (its index at the box axes must step by the row-major strides of the box).
pub(crate) fn check_box_layout(
    cx: &Ctx,
    k: &Kernel,
    store: &StoreInfo,
    src: &Access,
    vars: &[String],
    extents: &[i64],
) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let index = src.index.clone().unwrap_or(Val::Int(0));
    // `vars` are the Bulk loops, outermost first, with their constant `extents` (several may
    // split one box dimension). Row-major over the box is row-major over these loops when the
    // loops cover the box in order; the box's element count must match too.
    let box_elements: i64 = store.box_dims.iter().product();
    let loop_elements: i64 = extents.iter().product();
    let (vars, extents): (Vec<String>, Vec<i64>) = vars
        .iter()
        .cloned()
        .zip(extents.iter().copied())
        .filter(|&(_, e)| e != 1)
        .unzip();
    // The element of the box at `point` relative to its first one (the same for every value
    // of the loops around the box: probed), so a box may start anywhere in the buffer (one of
    // several boxes of a tile).
    let point_index = |point: &[i64]| {
        vars.iter()
            .zip(point)
            .fold(index.clone(), |acc, (var, &x)| acc.subst(var, &Val::Int(x)))
    };
    let zero = vec![0i64; vars.len()];
    let origin = point_index(&zero);
    let at = |point: &[i64]| -> Option<i64> {
        let v = point_index(point);
        let mut found = None;
        for seed in 0..4u64 {
            let d = crate::passes::probe::eval(&v, "", 0, seed, &[], 1)?
                - crate::passes::probe::eval(&origin, "", 0, seed, &[], 1)?;
            if found.is_some_and(|f| f != d) {
                return None;
            }
            found = Some(d);
        }
        found
    };
    // A swizzled box starts on its pattern's repeat (1024 bytes), whatever the loops around.
    let elem = k.buffers[src.buffer].dtype.size_bytes() as i64;
    let repeat = crate::target::swizzle_repeat(store.swizzle) / elem;
    let aligned_start = (0..4u64).all(|seed| {
        crate::passes::probe::eval(&origin, "", 0, seed, &[], 1).is_some_and(|o| o % repeat == 0)
    });
    let mut ok = box_elements == loop_elements && at(&zero) == Some(0) && aligned_start;
    let mut stride = 1i64;
    for d in (0..vars.len()).rev() {
        if !ok {
            break;
        }
        let mut point = zero.clone();
        point[d] = extents[d] - 1;
        ok = at(&point) == Some((extents[d] - 1) * stride);
        stride *= extents[d];
    }
    let last: Vec<i64> = extents.iter().map(|e| e - 1).collect();
    ok = ok && at(&last) == Some(stride - 1);
    if ok {
        return Ok(());
    }
    let cache = &f.tensors[store.cache];
    Err(Diagnostic::new(
        format!(
            "`{}` is read by the TMA store of `{}` as a row-major box of {:?} (innermost first), but its shared-memory layout differs ({} in {}): schedule its own axes like the Bulk axes of `{}`, in the same order",
            cache.name,
            f.tensors[store.tensor].name,
            store.box_dims,
            k.buffers[src.buffer].name,
            index.text(),
            f.tensors[store.tensor].name
        ),
        cache.span,
    ))
}
