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
//! use, and the cluster runs along x; the launch sizes it to the GPU (`LaunchPlan::persistent`:
//! the fewest resident CTAs that take the tiles in as few rounds, `plan::persistent_grid`, with
//! the residency the runner asks the driver for, `occupancy::fit_persistent` in the runner).
//!
//! Stream-K (`persistent(along, group, stream_k)`, a [`crate::kir::StreamK`] in
//! `Kernel::persistent.stream_k`): every resident CTA is launched (`plan::stream_k_grid`); whole
//! tiles for `tiles / G` rounds, then the k steps of the tiles left split into runs that differ
//! by at most one step. The CTA's constants are `let`s at the top of the kernel, so the
//! per-step values are sums and products of loop variables. The split k loop walks its piece
//! `[lo, hi)` of the tile (extent `hi - lo`, its index offset by `lo` through `Ctx::hw_env`),
//! and a `Stmt::StreamKFixup` after it hands the partial sums on (`codegen/stream_k.rs`): a
//! piece that does not end its tile writes its accumulator to the CTA's workspace slot and
//! raises its flag; the piece that ends it waits for the flags of the lower CTAs holding the
//! tile, adds their slots and alone runs the TMA stores. A CTA hands on at most its first
//! piece, so one slot per CTA suffices (`target::STREAM_K_MAX_CTAS`), and it waits only for
//! lower CTAs, which all run at once. The `tma` pass hands the split on to the pipelines
//! (`PipelinePlan::stream_k`), which count their slots by the run.
//!
//! Errors (located at the `persistent(...)` statement): an axis bound to BIDz, no axis on the
//! group's axis, more than one loop nest over the grid (each would walk all of a CTA's tiles
//! before the next); for stream-K also a cluster, an output not written by TMA stores, operands
//! not loaded by a warp-specialized circular buffer, and no k loop of a tensor-core product.

use super::context::{Change, Ctx, KeyNode, LoopKey};
use crate::diag::Diagnostic;
use crate::fusion::ParallelType;
use crate::kir::{Flow, Kernel, Loop, Persistent, Step, Stmt, StreamK, Val};
use crate::plan::SizeExpr;

pub fn used(cx: &Ctx) -> bool {
    cx.fusion.persistent.is_some()
}

pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<Change, Diagnostic> {
    let f = cx.fusion;
    let Some(p) = f.persistent else {
        return Ok(Change::Unchanged);
    };
    let what = format!("persistent({}, {})", p.along, p.group);
    let err = |m: String| Err(Diagnostic::new(m, p.span));
    // Tiles per axis, in clusters along the clustered one.
    let ctas = f.cluster.map_or(1, |c| c.ctas);
    let clustered = f.cluster.map(|c| c.on);
    let grid = TileGrid::of(k, &p, &what, ctas, clustered)?;
    let tiles = grid.tiles.clone();

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
    if p.stream_k {
        check_stream_k(f, &what, ctas)?;
    }
    // Stream-K: the CTA's run of k steps, the first tile it touches and the pieces.
    let tiles_val = Val::from_size(&tiles);
    let split = match p.stream_k {
        true => Some(split(cx, k, &what, &tiles, &tiles_val, &var)?),
        false => None,
    };
    let linear = match &split {
        Some(sp) => sp.linear.clone(),
        None => Val::add(
            Val::mul(Val::Var(var.clone()), stride.clone()),
            cluster.clone(),
        ),
    };
    let bindings = grid.raster(&p, linear, rank.as_ref(), ctas, clustered);
    let extent = match &split {
        Some(sp) => sp.extent.clone(),
        None => Val::ceil_div(Val::sub(tiles_val.clone(), cluster), stride),
    };
    let body = std::mem::take(&mut k.body);
    k.body = wrap(body, &|inner| {
        Stmt::Loop(Loop {
            key,
            var: var.clone(),
            extent: extent.clone(),
            parallel: ParallelType::Serial,
            digits: Vec::new(),
            body: inner,
        })
    });
    join_placements(cx, &grid.bound, key);
    k.hw_vars.retain(|(_, q)| !q.is_block());
    k.grid = [
        SizeExpr::Mul(Box::new(tiles.clone()), Box::new(SizeExpr::Const(ctas))),
        SizeExpr::Const(1),
        SizeExpr::Const(1),
    ];
    if ctas > 1 {
        k.cluster = Some([ctas, 1, 1]);
    }
    let stream_k = split.map(|sp| sp.apply(k, key));
    k.persistent = Some(Persistent {
        var,
        tiles,
        along: p.along,
        group: p.group,
        bindings,
        stream_k,
    });
    Ok(Change::Changed)
}

/// The grid a persistent kernel walks, before its tile loop: the block-bound variables, the
/// variable along the grouped axis and the one across it (if any), and the tiles along,
/// across (in clusters along the clustered axis) and in all.
struct TileGrid {
    bound: Vec<(String, ParallelType)>,
    along_var: String,
    across: ParallelType,
    across_var: Option<String>,
    along_units: SizeExpr,
    across_units: SizeExpr,
    tiles: SizeExpr,
}

impl TileGrid {
    /// The grid of `k` as `loop_nest` bound it; an error when it has no axis along `p.along`
    /// or binds BIDz.
    fn of(
        k: &Kernel,
        p: &crate::fusion::Persistent,
        what: &str,
        ctas: i64,
        clustered: Option<ParallelType>,
    ) -> Result<TileGrid, Diagnostic> {
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
        Ok(TileGrid {
            bound,
            along_var,
            across,
            across_var,
            along_units,
            across_units,
            tiles,
        })
    }

    /// The grid variables' values for the tile at `linear` in the grouped raster: groups of
    /// `p.group` tiles along `p.along`, walked across first; in a cluster, the CTA's `rank`
    /// picks its CTA of the clustered unit.
    fn raster(
        &self,
        p: &crate::fusion::Persistent,
        linear: Val,
        rank: Option<&Val>,
        ctas: i64,
        clustered: Option<ParallelType>,
    ) -> Vec<(String, ParallelType, Val)> {
        let (ua, uo) = (
            Val::from_size(&self.along_units),
            Val::from_size(&self.across_units),
        );
        let group = Val::Int(p.group);
        let per_group = Val::mul(group.clone(), uo);
        let first = Val::mul(Val::div(linear.clone(), per_group.clone()), group.clone());
        let length = Val::min(Val::sub(ua, first.clone()), group);
        let within = Val::rem(linear, per_group);
        let along_unit = Val::add(first, Val::rem(within.clone(), length.clone()));
        let across_unit = Val::div(within, length);
        let index = |q: ParallelType, unit: Val| match (rank, clustered == Some(q)) {
            (Some(r), true) => Val::add(Val::mul(unit, Val::Int(ctas)), r.clone()),
            _ => unit,
        };
        let mut bindings = vec![(self.along_var.clone(), p.along, index(p.along, along_unit))];
        if let Some(v) = &self.across_var {
            bindings.push((v.clone(), self.across, index(self.across, across_unit)));
        }
        bindings
    }
}

/// The tile loop `key` encloses every computation inside the grid-bound loops (`bound`'s
/// variables): it joins their placements after the last grid-bound loop (allocation places
/// buffers by them).
fn join_placements(cx: &mut Ctx, bound: &[(String, ParallelType)], key: LoopKey) {
    let grid_keys: Vec<LoopKey> = bound.iter().filter_map(|(v, _)| cx.keys.named(v)).collect();
    for (keys, q) in cx.layout.placement.values_mut() {
        if let Some(i) = keys.iter().rposition(|k| grid_keys.contains(k)) {
            keys.insert(i + 1, key);
            if *q > i {
                *q += 1;
            }
        }
    }
}

/// What a stream-K split needs of the fusion: no clusters, warp-specialized operand
/// pipelines (the consumers hold the accumulator while a producer keeps loading the next
/// piece), outputs written by TMA stores.
fn check_stream_k(f: &crate::fusion::Fusion, what: &str, ctas: i64) -> Result<(), Diagnostic> {
    let span = f.persistent.and_then(|p| p.span);
    let err = |m: String| Err(Diagnostic::new(m, span));
    if ctas > 1 {
        return err(format!(
            "{what}, stream_k: a stream-K split does not combine with cluster(...)"
        ));
    }
    // The hand-over is built for (and validated with) warp-specialized operand pipelines:
    // the consumers hold the accumulator while a producer keeps loading the next piece.
    if !f
        .tensors
        .iter()
        .any(|t| t.circular.is_some_and(|c| c.ws.is_some()))
    {
        return err(format!(
            "{what}, stream_k: the operands are not loaded by a warp-specialized circular buffer"
        ));
    }
    if let Some(t) = f
        .tensor_ids()
        .find(|&t| f.tensors[t].is_output && f.tensors[t].store != crate::fusion::LoadKind::Tma)
    {
        return err(format!(
            "{what}, stream_k: output `{}` is not written by TMA stores (cache_before(..., store=tma))",
            f.tensors[t].name
        ));
    }
    Ok(())
}

/// The stream-K split of the tiles' k steps, over the k loop inside the grid-bound loops.
fn split(
    cx: &mut Ctx,
    k: &Kernel,
    what: &str,
    tiles: &SizeExpr,
    tiles_val: &Val,
    var: &str,
) -> Result<Split, Diagnostic> {
    let span = cx.fusion.persistent.and_then(|p| p.span);
    let err = |m: String| Err(Diagnostic::new(m, span));
    let (kt, kt_size) = match find_k_loop(&k.body) {
        Some(l) if has_mma(&l.body) => (l.extent.clone(), cx.key_extent(l.key).clone()),
        Some(_) => {
            return err(format!(
                "{what}, stream_k: the split k loop has no tensor-core product (Mma axes)"
            ))
        }
        None => {
            return err(format!(
            "{what}, stream_k: no k loop of a matrix product directly inside the grid-bound loops"
        ))
        }
    };
    Ok(Split::new(cx, tiles, tiles_val, kt, kt_size, var))
}

/// The first serial loop of a reduction (a `ReductionUpdate` inside it) directly in the body of
/// the innermost grid-bound loops: the k loop a stream-K split divides.
fn find_k_loop(body: &[Stmt]) -> Option<&Loop> {
    let mut found = None;
    crate::kir::walk(body, &mut |s| match s {
        Stmt::Loop(l) if l.parallel.is_block() => Flow::Descend,
        Stmt::Loop(l) if found.is_none() && is_k_loop(l) => {
            found = Some(l);
            Flow::Skip
        }
        _ => Flow::Skip,
    });
    found
}

fn has_mma(body: &[Stmt]) -> bool {
    let mut found = false;
    crate::kir::for_each_stmt(body, &mut |s| {
        found |= matches!(s, Stmt::Loop(l) if l.parallel == ParallelType::Mma)
    });
    found
}

/// A serial loop around a reduction's update (a `ReductionUpdate` inside it).
fn is_k_loop(l: &Loop) -> bool {
    let mut found = false;
    crate::kir::for_each_stmt(
        &l.body,
        &mut |s| {
            found |=
                matches!(s, Stmt::Compute(c) if c.role == crate::kir::ComputeRole::ReductionUpdate)
        },
    );
    l.parallel == ParallelType::Serial && found
}

/// A stream-K split after whole rounds: with `G` CTAs, the first `R = tiles / G` rounds are
/// whole tiles as in a plain persistent grid (CTA `b` takes linear tile `r * G + b` in round
/// `r`), so the tiles in flight stay a compact block of the output; the k steps of the
/// `tiles - R * G` tiles left are split evenly, CTA `b` taking the run `[start(b), start(b +
/// 1))` of them. Every CTA then ends at the same step count, give or take one, and the tiles
/// of the split, the raster's last, are also a compact block. All values are in terms of the
/// tile loop's iteration `i`; `d = (i < R)` is 1 in the whole-tile rounds.
struct Split {
    /// The tile loop's extent: `R` rounds, then the tiles the run touches.
    extent: Val,
    /// The linear tile of iteration `i`.
    linear: Val,
    kt: Val,
    /// The k steps of the split tiles, in the loop's values and as the launch evaluates them.
    work: Val,
    work_size: SizeExpr,
    lo: Val,
    hi: Val,
    before: Val,
    tile_start: Val,
    /// The CTA's constants, as `let`s at the top of the kernel.
    consts: Vec<(String, Val)>,
}

impl Split {
    fn new(
        cx: &mut Ctx,
        tiles: &SizeExpr,
        tiles_val: &Val,
        kt: Val,
        kt_size: SizeExpr,
        var: &str,
    ) -> Split {
        let g = Val::Ctas;
        let b = Val::Hw(ParallelType::BIDx);
        // The CTA's constants, computed once (`consts`): every per-step value below is then
        // additions, products and comparisons of loop variables and these, which the pipelines
        // evaluate every k step.
        let mut consts = Vec::new();
        let mut constant = |base: &str, value: Val| {
            let name = cx.fresh_name(base);
            consts.push((name.clone(), value));
            Val::Var(name)
        };
        let rounds = constant("sk_rounds", Val::div(tiles_val.clone(), g.clone()));
        let whole = Val::mul(rounds.clone(), g.clone());
        let work = Val::mul(Val::sub(tiles_val.clone(), whole.clone()), kt.clone());
        // `work_size`: the launch picks G, so it bounds the split by all tiles' steps.
        let work_size = SizeExpr::Mul(Box::new(tiles.clone()), Box::new(kt_size));
        let (per, extra) = (
            Val::div(work.clone(), g.clone()),
            Val::rem(work.clone(), g.clone()),
        );
        let start = constant(
            "sk_start",
            Val::add(
                Val::mul(b.clone(), per.clone()),
                Val::min(b.clone(), extra.clone()),
            ),
        );
        let len = constant("sk_len", Val::add(per, Val::lt(b, extra)));
        let off = constant("sk_off", Val::rem(start.clone(), kt.clone()));
        let first = constant("sk_first", Val::div(start, kt.clone()));
        let touched = Val::min(
            Val::ceil_div(Val::add(len.clone(), off.clone()), kt.clone()),
            len.clone(),
        );
        let i = Val::Var(var.to_string());
        let d = Val::lt(i.clone(), rounds.clone());
        let e = Val::sub(Val::Int(1), d.clone());
        // The run's tiles from its last: piece q = i - R is tile `touched - 1 - q` of the run.
        let back = Val::sub(
            Val::sub(touched.clone(), Val::Int(1)),
            Val::sub(i.clone(), rounds.clone()),
        );
        let j = Val::add(first, back.clone());
        let linear = Val::add(
            Val::mul(
                d.clone(),
                Val::add(Val::mul(i.clone(), g), Val::Hw(ParallelType::BIDx)),
            ),
            Val::mul(e.clone(), Val::add(whole, j.clone())),
        );
        let lo = Val::mul(Val::eq(back.clone(), Val::Int(0)), off.clone());
        // The run's steps from the piece's tile start on: len + off - back * kt.
        let left = Val::sub(
            Val::add(len.clone(), off.clone()),
            Val::mul(back, kt.clone()),
        );
        let hi = Val::add(
            Val::mul(d.clone(), kt.clone()),
            Val::mul(e.clone(), Val::min(left.clone(), kt.clone())),
        );
        // Whole rounds: i * kt. Then the run's steps in the tiles after this one, taken first:
        // max(left - kt, 0).
        let later = Val::sub(left.clone(), kt.clone());
        let before = Val::add(
            Val::mul(d, Val::mul(i, kt.clone())),
            Val::mul(
                e,
                Val::add(
                    Val::mul(rounds.clone(), kt.clone()),
                    Val::sub(later.clone(), Val::min(later, Val::Int(0))),
                ),
            ),
        );
        let tile_start = Val::mul(j, kt.clone());
        Split {
            extent: Val::add(rounds, touched),
            linear,
            kt,
            work,
            work_size,
            lo,
            hi,
            before,
            tile_start,
            consts,
        }
    }

    /// Makes the k loop in the tile loop (`tile_key`) walk one piece of its tile, offset by
    /// `lo` (the index walks add it: [`Ctx::hw_env`]), and puts the fixup after it.
    fn apply(self, k: &mut Kernel, tile_key: LoopKey) -> StreamK {
        let mut k_var = String::new();
        let piece = Val::sub(self.hi.clone(), self.lo.clone());
        in_tile_loop(&mut k.body, tile_key, &mut |block| {
            let i = block
                .iter()
                .position(|s| matches!(s, Stmt::Loop(l) if is_k_loop(l)));
            if let Some(i) = i {
                let Stmt::Loop(l) = &mut block[i] else {
                    unreachable!()
                };
                k_var = l.var.clone();
                l.extent = piece.clone();
                block.insert(i + 1, Stmt::StreamKFixup { acc: None });
            }
        });
        let lets = self.consts.iter().map(|(var, value)| Stmt::Let {
            var: var.clone(),
            value: value.clone(),
            broadcast: false,
        });
        k.body.splice(0..0, lets);
        StreamK {
            k_var,
            consts: self.consts,
            kt: self.kt,
            work: self.work,
            work_size: self.work_size,
            lo: self.lo,
            hi: self.hi,
            before: self.before,
            tile_start: self.tile_start,
        }
    }
}

/// Calls `f` on the body of every loop keyed `key`.
fn in_tile_loop(body: &mut [Stmt], key: LoopKey, f: &mut dyn FnMut(&mut Vec<Stmt>)) {
    crate::kir::for_each_stmt_mut(body, &mut |s| match s {
        Stmt::Loop(l) if l.key == key => {
            f(&mut l.body);
            Flow::Skip
        }
        _ => Flow::Descend,
    });
}

/// How many outermost grid-bound loops `body` has (each the start of a nest over the grid).
fn grid_nests(body: &[Stmt]) -> usize {
    let mut nests = 0;
    crate::kir::walk(body, &mut |s| match s {
        Stmt::Loop(l) if l.parallel.is_block() => {
            nests += 1;
            Flow::Skip
        }
        _ => Flow::Descend,
    });
    nests
}

/// Puts the tile loop (`tile_loop` of a body) around the body of the innermost grid-bound
/// loop of every outermost chain of them ([`innermost`]).
fn wrap(mut body: Vec<Stmt>, tile_loop: &dyn Fn(Vec<Stmt>) -> Stmt) -> Vec<Stmt> {
    crate::kir::rewrite_pre(&mut body, &mut |s| match s {
        Stmt::Loop(mut l) if l.parallel.is_block() => {
            l.body = innermost(l.body, tile_loop);
            Step::Keep(vec![Stmt::Loop(l)])
        }
        other => Step::Descend(vec![other]),
    });
    body
}

/// The tile loop around `body`, or, when `body` holds one grid-bound loop, inside it. The
/// statements beside that loop (a cache loaded per M tile, outside the loop over N tiles) move
/// into it, before or after its body as they were: a grid-bound loop is a binding that runs
/// once per block, so that is the same computation, and the tile loop then holds every
/// grid-bound binding (a copy per tile is issued in the tile loop itself).
fn innermost(body: Vec<Stmt>, tile_loop: &dyn Fn(Vec<Stmt>) -> Stmt) -> Vec<Stmt> {
    let grid_bound = |s: &Stmt| matches!(s, Stmt::Loop(l) if l.parallel.is_block());
    // The chain of single grid-bound loops from `body` inward, each emptied of its body.
    let mut chain: Vec<Loop> = Vec::new();
    let mut body = body;
    while body.iter().filter(|s| grid_bound(s)).count() == 1 {
        let mut before = Vec::new();
        let mut inner = None;
        let mut after = Vec::new();
        for s in body {
            match s {
                Stmt::Loop(l) if l.parallel.is_block() => inner = Some(l),
                s if inner.is_none() => before.push(s),
                s => after.push(s),
            }
        }
        let mut l = inner.expect("one grid-bound loop");
        before.append(&mut l.body);
        before.append(&mut after);
        body = before;
        chain.push(l);
    }
    let mut nest = vec![tile_loop(body)];
    for mut l in chain.into_iter().rev() {
        l.body = nest;
        nest = vec![Stmt::Loop(l)];
    }
    nest
}
