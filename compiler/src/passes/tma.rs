//! TMA and bulk loads into shared memory, and their circular buffering. Three passes, run only
//! when the fusion has a cache made with `cache_after(x, memory=shared, load=tma|bulk)`.
//!
//! `tma` (after `loop_nest`): checks every TMA rule that the sizes known at compile time allow
//! (box dims 1..256 elements, inner box row a multiple of 16 bytes, rank 1..5, global dims below
//! 2^32, strides multiples of 16 bytes below 2^40, bulk runs contiguous), derives the box from
//! the `Bulk` axes (each a whole dimension of constant extent or the inner part of a split of
//! one, in the dimension order of the tensor), the tensor-map encode arguments (innermost
//! first; rows that must be multiples of 16 bytes at run time become plan constraints), and
//! the mbarrier array of each load. Errors name the tensor and the rule.
//!
//! `tma_issue` (after `indexing`): replaces the `Bulk` loops of each such cache by one
//! `TmaLoad` of the whole box: coordinates are the tensor's root indices with the box axes at 0.
//!
//! `circular_buffer` (after `predicate`): builds the pipeline around the serial loop that
//! encloses each load (the buffered loop; `i` is the linear iteration over every serial loop
//! around it): prologue `[0, prefetch)` issues loads; main iteration `i` issues the load of
//! `i + prefetch`, waits on `bars[i % stages]` for parity `(i / stages) % 2` and computes;
//! epilogue runs the last `prefetch` iterations. One thread (the block's thread 0) arrives with
//! `expect_tx` = the full box bytes (also at a ragged edge: TMA fills the out-of-bounds part
//! with zeros) and issues the copy. The mbarriers are initialised once at kernel entry (fence,
//! block barrier) and invalidated at kernel exit after a block barrier. Reads of the cache add
//! the slot's offset. Write-after-read is left to the `sync` pass (a block barrier at the end of
//! an iteration that reads a slot, before the slot is refilled); read-after-write needs no
//! block barrier: the mbarrier wait orders the copy before the reads.

use super::indexing::consumer_roots;
use super::{mul, Ctx, LoopKey};
use crate::diag::Diagnostic;
use crate::fusion::{IterOrigin, LoadKind, MemoryType, ParallelType, TensorId};
use crate::kir::{Access, CopyKind, Data, Kernel, Loop, MbarArray, Stmt, TmaLoad, Val};
use crate::plan::{Constraint, SizeExpr, TensorMapSpec};
use std::collections::HashMap;

/// Alignment of a TMA box in shared memory (and of every stage of it).
pub const SMEM_ALIGN: i64 = 128;

/// What the `tma` pass decided for one cache.
#[derive(Clone, Debug)]
pub struct TmaInfo {
    pub tensor: TensorId,
    pub src: TensorId,
    pub kind: LoadKind,
    /// Elements of one stage in shared memory (the box, padded to [`SMEM_ALIGN`] bytes).
    pub stage_elems: i64,
    /// Bytes of one box (the expected transaction count).
    pub bytes: i64,
    pub stages: i64,
    pub prefetch: i64,
    /// Index into `Kernel::tensor_maps` (tile copies).
    pub map: Option<usize>,
    /// Index into `Kernel::mbarriers`.
    pub bars: usize,
    /// Rank of the source and the box, innermost first (bulk copies: only `box_dims[0]` > 1).
    pub box_dims: Vec<i64>,
    pub global_dims: Vec<SizeExpr>,
    /// The innermost serial loop around the load (the one it pipelines).
    pub loop_key: Option<LoopKey>,
}

/// Whether the fusion has TMA or bulk loads (the three passes run only then).
pub fn used(cx: &Ctx) -> bool {
    cx.fusion.tensors.iter().any(|t| t.load != LoadKind::Plain)
}

/// Checks the constant parts of a tensor map: the rules of `cuTensorMapEncodeTiled`.
/// `what` names the tensor in messages.
pub fn check_box(what: &str, elem: i64, box_dims: &[i64], swizzle: u32) -> Result<(), String> {
    if box_dims.is_empty() || box_dims.len() > 5 {
        return Err(format!(
            "{what}: a TMA box has rank 1 to 5, this one has rank {}",
            box_dims.len()
        ));
    }
    for (d, &b) in box_dims.iter().enumerate() {
        if !(1..=256).contains(&b) {
            return Err(format!(
                "{what}: box dimension {d} (innermost first) is {b} elements; a TMA box has 1 to 256 elements per dimension"
            ));
        }
    }
    let row = box_dims[0] * elem;
    if row % 16 != 0 {
        return Err(format!(
            "{what}: the inner box row is {row} bytes ({} x {elem}); TMA needs a multiple of 16 bytes",
            box_dims[0]
        ));
    }
    match swizzle {
        0 => {}
        32 | 64 | 128 => {
            if row != swizzle as i64 {
                return Err(format!(
                    "{what}: with {swizzle}-byte swizzle the inner box row must be exactly {swizzle} bytes, it is {row}"
                ));
            }
        }
        s => {
            return Err(format!(
                "{what}: swizzle must be none, 32, 64 or 128 bytes, got {s}"
            ))
        }
    }
    Ok(())
}

pub fn run_plan(cx: &mut Ctx, k: &mut Kernel) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    for t in 0..f.tensors.len() {
        let tensor = &f.tensors[t];
        if tensor.load == LoadKind::Plain || !cx.placement.contains_key(&t) {
            continue;
        }
        let name = &tensor.name;
        let err = |m: String| Err(Diagnostic::new(m, tensor.span));
        if tensor.memory != MemoryType::Shared {
            return err(format!(
                "`{name}` is loaded by {} and must stay in shared memory",
                tensor.load.name()
            ));
        }
        let src = f.exprs[tensor.definition.expect("a cache has a definition")]
            .input_tensors()
            .next()
            .expect("a cache reads its source");
        let (keys, q) = cx.placement[&t].clone();
        let pos = tensor.loop_domain.len() - (keys.len() - q);
        for (p, &id) in tensor.loop_domain.iter().enumerate() {
            let bulk = f.ids[id].parallel == ParallelType::Bulk;
            if p < pos && bulk {
                return err(format!(
                    "axis {p} of `{name}` is Bulk but shared with its consumers' loops: a box axis must be one of the tensor's own innermost loops"
                ));
            }
            if p >= pos && !bulk {
                return err(format!(
                    "axis {p} of `{name}` ({}) is not Bulk: every loop axis of a {} load that is not shared with its consumers must be Bulk (the copy fills the whole box at once)",
                    f.ids[id].parallel,
                    tensor.load.name()
                ));
            }
        }
        if pos == tensor.loop_domain.len() {
            return err(format!(
                "`{name}` has no Bulk axis: mark the axes the box covers with parallelize(axis, Bulk)"
            ));
        }
        // The box: one constant extent per logical dimension (1 where no Bulk axis covers it).
        let logical = f.logical(t);
        let rank = logical.len();
        let mut box_outer_first = vec![1i64; rank];
        let mut last_dim: Option<usize> = None;
        for (p, &id) in tensor.loop_domain.iter().enumerate().skip(pos) {
            let (root, extent) = match f.ids[id].origin {
                IterOrigin::Root => (id, crate::fusion::schedule::extent_const(f, id)),
                IterOrigin::Split {
                    parent,
                    factor,
                    inner_split: true,
                    is_outer: false,
                } if matches!(f.ids[parent].origin, IterOrigin::Root) => (parent, Some(factor)),
                _ => {
                    return err(format!(
                        "Bulk axis {p} of `{name}` must be a whole dimension of constant extent or the inner part of a split of one dimension"
                    ))
                }
            };
            let Some(extent) = extent else {
                return err(format!(
                    "Bulk axis {p} of `{name}` has no constant extent: split the dimension by the box size and make the inner part Bulk"
                ));
            };
            let Some(dim) = logical.iter().position(|&r| r == root) else {
                return err(format!(
                    "Bulk axis {p} of `{name}` is not a dimension of it"
                ));
            };
            if last_dim.is_some_and(|l| l >= dim) {
                return err(format!(
                    "the Bulk axes of `{name}` must follow its dimension order (outermost dimension first, each once): shared memory holds the box row-major"
                ));
            }
            last_dim = Some(dim);
            box_outer_first[dim] = extent;
        }
        let box_dims: Vec<i64> = box_outer_first.iter().rev().copied().collect();
        let elem = tensor.dtype.size_bytes() as i64;
        let what = format!(
            "`{name}` ({} load of `{}`)",
            tensor.load.name(),
            f.tensors[src].name
        );
        check_box(&what, elem, &box_dims, 0).or_else(err)?;
        if tensor.load == LoadKind::Bulk && box_dims[1..].iter().any(|&b| b != 1) {
            return err(format!(
                "{what}: a bulk copy moves one contiguous run, so only the innermost dimension may be Bulk (use load=tma for boxes of several dimensions)"
            ));
        }
        // Global dims and strides, innermost first.
        let src_logical = f.logical(src);
        let global_dims: Vec<SizeExpr> = src_logical
            .iter()
            .rev()
            .map(|&id| f.ids[id].root_extent.clone().unwrap_or(SizeExpr::Const(1)))
            .collect();
        let src_name = f.tensors[src].name.clone();
        for (d, g) in global_dims.iter().enumerate() {
            if let Some(v) = g.as_const() {
                if !(1..=1i64 << 32).contains(&v) {
                    return err(format!(
                        "{what}: dimension {d} (innermost first) of `{src_name}` is {v}; a tensor map dimension is 1 to 2^32"
                    ));
                }
            }
        }
        let mut global_strides = Vec::new();
        let mut stride = SizeExpr::Const(elem);
        for g in &global_dims[..rank - 1] {
            stride = mul(stride, g.clone());
            if let Some(s) = stride.as_const() {
                if s >= 1i64 << 40 {
                    return err(format!(
                        "{what}: a global stride of `{src_name}` is {s} bytes; tensor map strides are below 2^40"
                    ));
                }
            }
            global_strides.push(stride.clone());
        }
        let row_multiple = 16 / elem;
        let mut need_divisible =
            |value: &SizeExpr, divisor: i64, rule: &str| -> Result<(), Diagnostic> {
                match value.as_const() {
                    Some(v) if v % divisor != 0 => err(format!(
                        "{what}: {rule} ({value} is not a multiple of {divisor})"
                    )),
                    Some(_) => Ok(()),
                    None => {
                        let c = Constraint::Divisible {
                            value: value.clone(),
                            divisor,
                            reason: format!(
                                "{} load of `{src_name}` into `{name}`: {rule}",
                                tensor.load.name()
                            ),
                        };
                        if !cx.constraints.contains(&c) {
                            cx.constraints.push(c);
                        }
                        Ok(())
                    }
                }
            };
        if rank > 1 {
            need_divisible(
                &global_dims[0],
                row_multiple,
                "the rows of the tensor must be multiples of 16 bytes (tensor map strides and bulk-copy alignment)",
            )?;
        }
        if tensor.load == LoadKind::Bulk {
            need_divisible(
                &global_dims[0],
                box_dims[0],
                "a bulk copy has no out-of-bounds handling, so the innermost dimension must be a multiple of the run",
            )?;
        }
        // Enclosing loops: none bound to threads (one thread issues the copy for the block).
        for &key in &keys[..q] {
            if let Some(p) = loop_parallel(&k.body, key) {
                if p.is_thread() {
                    return err(format!(
                        "`{name}` is loaded by {}, which one thread issues for the whole block: it cannot be inside the thread-parallel loop `{}` ({p}); inline it further out",
                        tensor.load.name(),
                        cx.keys.names[key]
                    ));
                }
            }
        }
        // One load per pipelined loop for now (several tensors in one loop share the slot
        // arithmetic and need one pipeline transform: not lowered yet).
        let loop_key = keys[..q]
            .iter()
            .rev()
            .find(|&&key| loop_parallel(&k.body, key).is_some_and(|p| !p.is_hw()))
            .copied();
        if let Some(key) = loop_key {
            if let Some(other) = cx.tma.iter().find(|i| i.loop_key == Some(key)) {
                return err(format!(
                    "`{name}` and `{}` are both loaded by TMA in the serial loop `{}`: one TMA or bulk load per loop is supported so far",
                    f.tensors[other.tensor].name, cx.keys.names[key]
                ));
            }
        }
        let (stages, prefetch) = match tensor.circular {
            Some(cb) => (cb.stages, cb.prefetch),
            None => (1, 0),
        };
        if let Some(cb) = tensor.circular {
            let serial = keys[..q]
                .iter()
                .rev()
                .find(|&&key| loop_parallel(&k.body, key).is_some_and(|p| !p.is_hw()));
            let Some(&bk) = serial else {
                return Err(Diagnostic::new(
                    format!("`{name}`.circular_buffer({}): no serial loop encloses the load of `{name}`, so there is nothing to pipeline", cb.stages),
                    Some(cb.span),
                ));
            };
            if let Some(e) = cx.key_extent(bk).as_const() {
                if cb.stages > e {
                    return Err(Diagnostic::new(
                        format!(
                            "`{name}`.circular_buffer({}): {} stages is more than the {e} iterations of the buffered loop `{}`",
                            cb.stages, cb.stages, cx.keys.names[bk]
                        ),
                        Some(cb.span),
                    ));
                }
            }
        }
        let box_elems: i64 = box_dims.iter().product();
        let bytes = box_elems * elem;
        let stage_bytes = (bytes + SMEM_ALIGN - 1) / SMEM_ALIGN * SMEM_ALIGN;
        let map = if tensor.load == LoadKind::Tma {
            k.tensor_maps.push(TensorMapSpec {
                param: format!("{name}_map"),
                tensor: src_name.clone(),
                dtype: tensor.dtype,
                global_dims: global_dims.clone(),
                global_strides,
                box_dims: box_dims.clone(),
                element_strides: vec![1; rank],
                swizzle_bytes: 0,
            });
            Some(k.tensor_maps.len() - 1)
        } else {
            None
        };
        k.mbarriers.push(MbarArray {
            name: format!("{name}_bars"),
            count: stages,
            smem_offset: None,
        });
        cx.tma.push(TmaInfo {
            tensor: t,
            src,
            kind: tensor.load,
            stage_elems: stage_bytes / elem,
            bytes,
            stages,
            prefetch,
            map,
            bars: k.mbarriers.len() - 1,
            box_dims,
            global_dims,
            loop_key,
        });
    }
    Ok(())
}

/// Parallel type of the loop with key `key`, if the kernel has one.
fn loop_parallel(body: &[Stmt], key: LoopKey) -> Option<ParallelType> {
    for s in body {
        match s {
            Stmt::Loop(l) => {
                if l.key == key {
                    return Some(l.parallel);
                }
                if let Some(p) = loop_parallel(&l.body, key) {
                    return Some(p);
                }
            }
            Stmt::If { then, els, .. } => {
                if let Some(p) = loop_parallel(then, key).or_else(|| loop_parallel(els, key)) {
                    return Some(p);
                }
            }
            _ => {}
        }
    }
    None
}

pub fn run_issue(cx: &mut Ctx, k: &mut Kernel) -> Result<(), Diagnostic> {
    let mut env = cx.hw_env(k);
    let mut body = std::mem::take(&mut k.body);
    issue_block(cx, &mut body, &mut env)?;
    k.body = body;
    Ok(())
}

fn issue_block(
    cx: &mut Ctx,
    body: &mut [Stmt],
    env: &mut HashMap<LoopKey, Val>,
) -> Result<(), Diagnostic> {
    for s in body.iter_mut() {
        match s {
            Stmt::Loop(l) if l.parallel == ParallelType::Bulk => {
                *s = Stmt::TmaLoad(box_load(cx, l, env)?);
            }
            Stmt::Loop(l) => {
                let prev = env.insert(l.key, Val::Var(l.var.clone()));
                issue_block(cx, &mut l.body, env)?;
                match prev {
                    Some(p) => env.insert(l.key, p),
                    None => env.remove(&l.key),
                };
            }
            Stmt::If { then, els, .. } => {
                issue_block(cx, then, env)?;
                issue_block(cx, els, env)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// The copy of the whole box that a nest of `Bulk` loops around one copy stands for.
fn box_load(cx: &mut Ctx, l: &Loop, env: &HashMap<LoopKey, Val>) -> Result<TmaLoad, Diagnostic> {
    let mut env = env.clone();
    let mut vars = Vec::new();
    let mut cur = l;
    let compute = loop {
        env.insert(cur.key, Val::Var(cur.var.clone()));
        vars.push(cur.var.clone());
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
    let Some(info) = cx.tma.iter().find(|i| i.tensor == t).cloned() else {
        return Err(Diagnostic::new(
            format!(
                "`{}` has Bulk axes but is not a TMA or bulk load",
                f.tensors[t].name
            ),
            f.tensors[t].span,
        ));
    };
    let zero = |v: &Val| {
        let z = vars
            .iter()
            .fold(v.clone(), |acc, var| acc.subst(var, &Val::Int(0)));
        super::simplify::simplify(&z, &HashMap::new())
    };
    let roots = consumer_roots(cx, t, &env);
    let mut coords = Vec::new();
    for r in f.logical(t).into_iter().rev() {
        let v = roots.get(&f.class_of(r)).ok_or_else(|| {
            Diagnostic::new(
                format!(
                    "cannot index the box of `{}`: a dimension has no index where it is loaded",
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
    let src = Access {
        buffer: src.buffer,
        index: src.index.as_ref().map(zero),
    };
    Ok(TmaLoad {
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
        bytes: info.bytes,
        bars: info.bars,
        slot: Val::Int(0),
    })
}

pub fn run_circular(cx: &mut Ctx, k: &mut Kernel) -> Result<(), Diagnostic> {
    let infos = cx.tma.clone();
    let issuer = Val::all(
        (0..3)
            .filter(|&d| k.block[d] != SizeExpr::Const(1))
            .map(|d| {
                let p = [ParallelType::TIDx, ParallelType::TIDy, ParallelType::TIDz][d];
                Val::eq(Val::Hw(p), Val::Int(0))
            }),
    );
    let mut body = std::mem::take(&mut k.body);
    for info in &infos {
        let buffer = cx.tensor_buffer[&info.tensor];
        let done = pipeline(cx, &mut body, info, buffer, &issuer, &Val::Int(0), false)?;
        if !done {
            let f = cx.fusion;
            return Err(Diagnostic::new(
                format!(
                    "internal: the load of `{}` was not found",
                    f.tensors[info.tensor].name
                ),
                None,
            ));
        }
    }
    // Init once at entry, invalidate once at exit.
    let mut init = Vec::new();
    let mut inval = vec![Stmt::Sync];
    for info in &infos {
        init.push(Stmt::MbarInit { bars: info.bars });
        inval.push(Stmt::MbarInval { bars: info.bars });
    }
    let mut out = vec![guard(issuer.clone(), init), Stmt::Sync];
    out.extend(body);
    out.push(Stmt::Sync);
    out.push(guard(issuer, inval.split_off(1)));
    k.body = out;
    Ok(())
}

fn guard(cond: Val, body: Vec<Stmt>) -> Stmt {
    if cond == Val::True && body.len() == 1 {
        return body.into_iter().next().expect("one statement");
    }
    Stmt::If {
        cond,
        then: body,
        els: Vec::new(),
    }
}

fn contains_load(body: &[Stmt], buffer: usize) -> bool {
    body.iter().any(|s| match s {
        Stmt::TmaLoad(t) => t.dst.buffer == buffer,
        Stmt::Loop(l) => contains_load(&l.body, buffer),
        Stmt::If { then, els, .. } => contains_load(then, buffer) || contains_load(els, buffer),
        _ => false,
    })
}

/// Finds the load of `info` under `body`; `outer` is the linear iteration of the serial loops
/// entered so far. Rewrites the innermost serial loop around it into the pipeline.
#[allow(clippy::too_many_arguments)]
fn pipeline(
    cx: &Ctx,
    body: &mut Vec<Stmt>,
    info: &TmaInfo,
    buffer: usize,
    issuer: &Val,
    outer: &Val,
    in_loop: bool,
) -> Result<bool, Diagnostic> {
    let Some(i) = body.iter().position(|s| match s {
        Stmt::TmaLoad(t) => t.dst.buffer == buffer,
        Stmt::Loop(l) => contains_load(&l.body, buffer),
        _ => false,
    }) else {
        return Ok(false);
    };
    if let Stmt::TmaLoad(t) = &body[i] {
        if in_loop {
            let f = cx.fusion;
            return Err(Diagnostic::new(
                format!(
                    "the load of `{}` is separated from the serial loop around it by block-index loops: put the serial loops inside the blockIdx-bound ones",
                    f.tensors[info.tensor].name
                ),
                f.tensors[info.tensor].span,
            ));
        }
        // Not inside any serial loop: one load, waited on once.
        let t = t.clone();
        let stmts = vec![
            issue(info, issuer, t, &Val::Int(0)),
            Stmt::MbarWait {
                bars: info.bars,
                slot: Val::Int(0),
                parity: Val::Int(0),
            },
        ];
        body.splice(i..=i, stmts);
        return Ok(true);
    }
    let Stmt::Loop(l) = &mut body[i] else {
        unreachable!()
    };
    if l.parallel.is_hw() {
        return pipeline(cx, &mut l.body, info, buffer, issuer, outer, in_loop);
    }
    let lin = linear(outer, &l.extent, &Val::Var(l.var.clone()), in_loop);
    let direct = l
        .body
        .iter()
        .position(|s| matches!(s, Stmt::TmaLoad(t) if t.dst.buffer == buffer));
    let Some(j) = direct else {
        let outer = lin;
        return pipeline(cx, &mut l.body, info, buffer, issuer, &outer, true);
    };
    // `l` is the buffered loop.
    let Stmt::Loop(l) = body.remove(i) else {
        unreachable!()
    };
    let Stmt::TmaLoad(load) = l.body[j].clone() else {
        unreachable!()
    };
    let var = l.var.clone();
    let (s, p) = (info.stages, info.prefetch);
    let at = |v: &Val| linear(outer, &l.extent, v, in_loop);
    let slot = |lin: &Val| {
        if s == 1 {
            Val::Int(0)
        } else {
            Val::rem(lin.clone(), Val::Int(s))
        }
    };
    let parity = |lin: &Val| {
        if s == 1 {
            Val::rem(lin.clone(), Val::Int(2))
        } else {
            Val::rem(Val::div(lin.clone(), Val::Int(s)), Val::Int(2))
        }
    };
    let issue_at = |v: &Val| {
        let mut t = load.clone();
        t.coords = t.coords.iter().map(|c| c.subst(&var, v)).collect();
        t.src.index = t.src.index.as_ref().map(|x| x.subst(&var, v));
        issue(info, issuer, t, &slot(&at(v)))
    };
    let v = Val::Var(var.clone());
    // The body of one iteration without its own issue: wait, then the reads at the slot.
    let mut rest = l.body.clone();
    rest.remove(j);
    let mut alloc = None;
    if let Some(a) = rest
        .iter()
        .position(|s| matches!(s, Stmt::Alloc(b) if *b == buffer))
    {
        alloc = Some(rest.remove(a));
    }
    let offset = Val::mul(slot(&at(&v)), Val::Int(info.stage_elems));
    shift_reads(&mut rest, buffer, &offset);
    let wait = Stmt::MbarWait {
        bars: info.bars,
        slot: slot(&at(&v)),
        parity: parity(&at(&v)),
    };
    let mut iteration = vec![wait];
    iteration.extend(rest);
    let mut out: Vec<Stmt> = alloc.into_iter().collect();
    let extent = l.extent.clone();
    if p == 0 {
        let mut b = vec![issue_at(&v)];
        b.extend(iteration);
        out.push(Stmt::Loop(Loop { body: b, ..l }));
    } else {
        let known = match extent {
            Val::Int(e) => Some(e),
            _ => None,
        };
        // Prologue: loads of iterations [0, prefetch).
        let first = issue_at(&v);
        let pro_body = if known.is_some_and(|e| e >= p) {
            vec![first]
        } else {
            vec![guard(Val::lt(v.clone(), extent.clone()), vec![first])]
        };
        out.push(Stmt::Loop(Loop {
            key: l.key,
            var: var.clone(),
            extent: Val::Int(p),
            parallel: ParallelType::Serial,
            body: pro_body,
        }));
        // Main: issue iteration i + prefetch, then run iteration i.
        let main_extent = match known {
            Some(e) => Val::Int(e - p),
            None => Val::Sub(Box::new(extent.clone()), Box::new(Val::Int(p))),
        };
        let mut main = vec![issue_at(&Val::add(v.clone(), Val::Int(p)))];
        main.extend(iteration.clone());
        out.push(Stmt::Loop(Loop {
            key: l.key,
            var: var.clone(),
            extent: main_extent.clone(),
            parallel: l.parallel,
            body: main,
        }));
        // Epilogue: the last `prefetch` iterations, no loads.
        let epi = format!("{var}_epi");
        let mut epi_body = vec![Stmt::Let {
            var: var.clone(),
            value: Val::add(main_extent, Val::Var(epi.clone())),
        }];
        if known.is_some_and(|e| e >= p) {
            epi_body.extend(iteration);
        } else {
            epi_body.push(Stmt::If {
                cond: Val::lt(Val::Int(-1), v.clone()),
                then: iteration,
                els: Vec::new(),
            });
        }
        out.push(Stmt::Loop(Loop {
            key: l.key,
            var: epi,
            extent: Val::Int(p),
            parallel: ParallelType::Serial,
            body: epi_body,
        }));
    }
    body.splice(i..i, out);
    Ok(true)
}

/// `outer * extent + v`, or `v` at the outermost serial loop.
fn linear(outer: &Val, extent: &Val, v: &Val, in_loop: bool) -> Val {
    if in_loop {
        Val::add(Val::mul(outer.clone(), extent.clone()), v.clone())
    } else {
        v.clone()
    }
}

/// One thread arrives with the box's bytes and issues the copy into `slot`.
fn issue(info: &TmaInfo, issuer: &Val, mut t: TmaLoad, slot: &Val) -> Stmt {
    t.dst.index = Some(Val::mul(slot.clone(), Val::Int(info.stage_elems)));
    t.slot = slot.clone();
    let arrive = |bytes| Stmt::MbarArriveExpectTx {
        bars: info.bars,
        slot: slot.clone(),
        bytes,
    };
    if info.kind == LoadKind::Bulk {
        // A bulk copy must stay inside the tensor: a run outside it is not copied, and the
        // arrival then expects no bytes. (The innermost dimension is a multiple of the run.)
        let inside = Val::all(
            t.coords
                .iter()
                .zip(&info.global_dims)
                .map(|(c, g)| Val::lt(c.clone(), Val::from_size(g))),
        );
        if inside != Val::True {
            return guard(
                issuer.clone(),
                vec![Stmt::If {
                    cond: inside,
                    then: vec![arrive(info.bytes), Stmt::TmaLoad(t)],
                    els: vec![arrive(0)],
                }],
            );
        }
    }
    guard(issuer.clone(), vec![arrive(info.bytes), Stmt::TmaLoad(t)])
}

/// Adds `offset` to every read of `buffer`.
fn shift_reads(body: &mut [Stmt], buffer: usize, offset: &Val) {
    fn data(d: &mut Data, buffer: usize, offset: &Val) {
        match d {
            Data::Read(a) if a.buffer == buffer => {
                let i = a.index.take().unwrap_or(Val::Int(0));
                a.index = Some(Val::add(offset.clone(), i));
            }
            Data::Unary(_, _, x) | Data::Cast(_, x) => data(x, buffer, offset),
            Data::Binary(_, _, x, y) => {
                data(x, buffer, offset);
                data(y, buffer, offset);
            }
            _ => {}
        }
    }
    for s in body {
        match s {
            Stmt::Compute(c) => data(&mut c.value, buffer, offset),
            Stmt::Loop(l) => shift_reads(&mut l.body, buffer, offset),
            Stmt::If { then, els, .. } => {
                shift_reads(then, buffer, offset);
                shift_reads(els, buffer, offset);
            }
            _ => {}
        }
    }
}
