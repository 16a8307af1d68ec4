//! Pass `persistent`: a persistent kernel's loop over its tiles, in a grouped raster.
//!
//! Requires: `loop_nest`, and `persistent(along, group)` in the schedule. The grid-bound loops
//! (BIDx, BIDy) span a space of tiles. Instead of one CTA per tile, a one-dimensional grid of
//! `G` CTAs (as many as are resident at once; the launch picks `G`) walks it: CTA `b` takes the
//! linear tiles `b, b + G, b + 2G, ...` in a serial loop of `ceilDiv(tiles - b, G)` iterations,
//! so whatever `G` is, every tile is taken exactly once and no CTA steps past the last. A
//! linear tile becomes the grid-bound indices through a grouped raster (Triton's grouped
//! ordering, CUTLASS's swizzle): groups of `group` tiles along `along`, inside a group
//! consecutive tiles step along `along` first, groups follow each other along the other axis,
//! and the last group along `along` may be shorter. So the `G` tiles in flight at once cover a
//! compact block of the output, and their operand rows and columns are read from DRAM about once.
//! In a cluster kernel the space is counted in clusters of tiles: a cluster takes a tile of
//! clusters, and the clustered axis's index is that tile's times the cluster size plus the CTA's
//! rank (`blockIdx.x % ctas`: the clusters run along x).
//!
//! Guarantees: the grid-bound indices stay in range (the last group's length is a minimum; a
//! clustered axis's extent is a multiple of the cluster, `loop_nest`'s constraint). The
//! producer and the consumers of a warp-specialized pipeline take the same tiles, since both
//! index through the one tile loop, which the later passes treat like any serial loop (the
//! producer's flat loop includes it, and the pipeline's stage count runs on across tiles). The
//! CTAs of a cluster walk in step: the loop's extent depends on the cluster, not the CTA.
//!
//! Emits: a serial tile loop (key [`KeyNode::Tiles`]) as the body of each innermost grid-bound
//! loop of the outermost chain of them; those loops stay as bindings, but their variables are
//! no longer `blockIdx`: [`Kernel::persistent`] holds their values, which [`Ctx::hw_env`] hands
//! to every index walk (so no variable of theirs is left after `indexing`), and they leave
//! [`Kernel::hw_vars`]. The grid becomes `[tiles x cluster, 1, 1]`, the most CTAs a launch may
//! use, and the cluster runs along x.

use super::{Ctx, KeyNode};
use crate::diag::Diagnostic;
use crate::fusion::ParallelType;
use crate::kir::{Kernel, Loop, Persistent, Stmt, Val};
use crate::plan::SizeExpr;

pub fn used(cx: &Ctx) -> bool {
    cx.fusion.persistent.is_some()
}

pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let Some(p) = f.persistent else {
        return Ok(());
    };
    let what = format!("persistent({}, {})", p.along, p.group);
    let err = |m: String| Err(Diagnostic::new(m, p.span));
    let bound: Vec<(String, ParallelType)> = k
        .hw_vars
        .iter()
        .filter(|(_, q)| q.is_block())
        .cloned()
        .collect();
    if let Some((v, _)) = bound.iter().find(|(_, q)| *q == ParallelType::BIDz) {
        return err(format!(
            "{what}: `{v}` is bound to BIDz; a persistent grid's tiles span BIDx and BIDy only"
        ));
    }
    let across = match p.along {
        ParallelType::BIDy => ParallelType::BIDx,
        _ => ParallelType::BIDy,
    };
    let var_of = |q: ParallelType| bound.iter().find(|(_, b)| *b == q).map(|(v, _)| v.clone());
    let Some(along_var) = var_of(p.along) else {
        return err(format!(
            "{what}: no axis is parallelized on {}, so there are no tiles along it to group",
            p.along
        ));
    };
    let across_var = var_of(across);
    let extent = |q: ParallelType| k.grid[q.dim().expect("a grid axis")].clone();
    // Tiles per axis, in clusters along the clustered one.
    let ctas = f.cluster.map_or(1, |c| c.ctas);
    let clustered = f.cluster.map(|c| c.on);
    let units = |q: ParallelType| {
        let e = extent(q);
        if clustered == Some(q) {
            SizeExpr::CeilDiv(Box::new(e), Box::new(SizeExpr::Const(ctas)))
        } else {
            e
        }
    };
    let (along_units, across_units) = (
        units(p.along),
        if across_var.is_some() {
            units(across)
        } else {
            SizeExpr::Const(1)
        },
    );
    let tiles = SizeExpr::Mul(
        Box::new(along_units.clone()),
        Box::new(across_units.clone()),
    );

    // One tile loop must hold every computation of a tile: nests that walk the grid one after
    // the other would each walk all of the CTA's tiles before the next starts, and a buffer
    // one of them fills for the next would hold only the last tile's values.
    let nests = grid_nests(&k.body);
    if nests != 1 {
        return err(format!(
            "{what}: the kernel has {nests} separate loop nests over the grid; a persistent grid walks the tiles of one (inline the tensors into one nest: inline_most(), inline_at, compute_at)"
        ));
    }
    let var = cx.fresh_name("tile");
    let key = cx.loop_only_key(KeyNode::Tiles(tiles.clone()));
    let cta = Val::Hw(ParallelType::BIDx);
    let (cluster, stride, rank) = if ctas > 1 {
        (
            Val::div(cta.clone(), Val::Int(ctas)),
            Val::div(Val::Ctas, Val::Int(ctas)),
            Some(Val::rem(cta, Val::Int(ctas))),
        )
    } else {
        (cta, Val::Ctas, None)
    };
    let linear = Val::add(
        Val::mul(Val::Var(var.clone()), stride.clone()),
        cluster.clone(),
    );
    // The grouped raster of `linear`.
    let (ua, uo) = (Val::from_size(&along_units), Val::from_size(&across_units));
    let group = Val::Int(p.group);
    let per_group = Val::mul(group.clone(), uo);
    let first = Val::mul(Val::div(linear.clone(), per_group.clone()), group.clone());
    let length = Val::min(Val::sub(ua, first.clone()), group);
    let within = Val::rem(linear, per_group);
    let along_unit = Val::add(first, Val::rem(within.clone(), length.clone()));
    let across_unit = Val::div(within, length);
    let index = |q: ParallelType, unit: Val| match (&rank, clustered == Some(q)) {
        (Some(r), true) => Val::add(Val::mul(unit, Val::Int(ctas)), r.clone()),
        _ => unit,
    };
    let mut bindings = vec![(along_var, p.along, index(p.along, along_unit))];
    if let Some(v) = across_var {
        bindings.push((v, across, index(across, across_unit)));
    }
    let extent = Val::ceil_div(Val::sub(Val::from_size(&tiles), cluster), stride);
    let body = std::mem::take(&mut k.body);
    k.body = wrap(body, &|inner| {
        Stmt::Loop(Loop {
            key,
            var: var.clone(),
            extent: extent.clone(),
            parallel: ParallelType::Serial,
            body: inner,
        })
    });
    // The tile loop encloses every computation inside the grid-bound loops: it joins their
    // placements after the last grid-bound loop (allocation places buffers by them).
    let grid_keys: Vec<super::LoopKey> =
        bound.iter().filter_map(|(v, _)| cx.key_named(v)).collect();
    for (keys, q) in cx.placement.values_mut() {
        if let Some(i) = keys.iter().rposition(|key| grid_keys.contains(key)) {
            keys.insert(i + 1, key);
            if *q > i {
                *q += 1;
            }
        }
    }
    k.hw_vars.retain(|(_, q)| !q.is_block());
    k.grid = [
        SizeExpr::Mul(Box::new(tiles.clone()), Box::new(SizeExpr::Const(ctas))),
        SizeExpr::Const(1),
        SizeExpr::Const(1),
    ];
    if ctas > 1 {
        k.cluster = Some([ctas, 1, 1]);
    }
    k.persistent = Some(Persistent {
        var,
        tiles,
        along: p.along,
        group: p.group,
        bindings,
    });
    Ok(())
}

/// How many outermost grid-bound loops `body` has (each the start of a nest over the grid).
fn grid_nests(body: &[Stmt]) -> usize {
    body.iter()
        .map(|s| match s {
            Stmt::Loop(l) if l.parallel.is_block() => 1,
            Stmt::Loop(l) => grid_nests(&l.body),
            Stmt::If { then, els, .. } => grid_nests(then) + grid_nests(els),
            _ => 0,
        })
        .sum()
}

/// Puts the tile loop (`tile_loop` of a body) around the body of the innermost grid-bound
/// loop of every outermost chain of them.
fn wrap(body: Vec<Stmt>, tile_loop: &dyn Fn(Vec<Stmt>) -> Stmt) -> Vec<Stmt> {
    body.into_iter()
        .map(|s| match s {
            Stmt::Loop(mut l) if l.parallel.is_block() => {
                l.body = innermost(l.body, tile_loop);
                Stmt::Loop(l)
            }
            Stmt::Loop(mut l) => {
                l.body = wrap(l.body, tile_loop);
                Stmt::Loop(l)
            }
            Stmt::If { cond, then, els } => Stmt::If {
                cond,
                then: wrap(then, tile_loop),
                els: wrap(els, tile_loop),
            },
            other => other,
        })
        .collect()
}

fn innermost(body: Vec<Stmt>, tile_loop: &dyn Fn(Vec<Stmt>) -> Stmt) -> Vec<Stmt> {
    match <[Stmt; 1]>::try_from(body) {
        Ok([Stmt::Loop(mut l)]) if l.parallel.is_block() => {
            l.body = innermost(l.body, tile_loop);
            vec![Stmt::Loop(l)]
        }
        Ok([s]) => vec![tile_loop(vec![s])],
        Err(body) => vec![tile_loop(body)],
    }
}
