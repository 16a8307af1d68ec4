//! Pass `mma`: lowers tensor-core tiles (loop axes parallelized `Mma`) to `wgmma`.
//!
//! Requires: `sync`. It runs after every pass that moves, pipelines, guards or orders
//! statements, so an instruction tile went through them as an ordinary loop nest: its operand
//! reads got their circular-buffer slot offsets and mbarrier waits, and the barriers that
//! protect its shared-memory operands are in place.
//!
//! Takes every nest of `Mma` loops:
//! - **Three loops (M, N, K) around the update of a sum of products** `acc += cast(x) *
//!   cast(y)` of two f16/bf16 shared-memory caches of one type, or two e4m3/e5m2 caches in any
//!   mix (reached through the register temporaries the other passes made): one
//!   `wgmma.mma_async.m64nNk16` (`k32` on 8-bit operands: 32 bytes of each row) whose
//!   operands are matrix descriptors at the tile's first element (its logical index, with slot
//!   offsets; the descriptor's swizzle mode applies the cache's swizzle in hardware). The
//!   operand whose index moves with M is A, the one moving with N is B. An operand is K-major when K is
//!   contiguous and a row of the tile is one swizzle span (`LBO` unused, `SBO` = 8 rows), or
//!   MN-major (transposed) when M or N is contiguous within one swizzle span and K steps by
//!   rows (`SBO` = 8 rows of K); only 16-bit operands may be MN-major (PTX has no transpose for
//!   8-bit ones). The bounds predicates inside the tile are dropped: TMA fills
//!   out-of-bounds operand elements with zeros, which add nothing. Other factors of the
//!   product, read from global memory, are block scales (`block_scale.rs`): the wgmmas write
//!   a block accumulator, promoted with the scales into the sum's after each block of K.
//!   A may instead be a 16-bit register fragment of another tile with the same M whose
//!   columns are this product's K (P in attention): the RS form, A from the fragment's
//!   registers as they are (`product.rs`, `register_operand`).
//! - **One loop (M)**: a nest over the rows of a tile, whose register arrays over M alone are
//!   row fragments (`rows.rs`): a loop over the thread's two rows. In fragment loops a row
//!   fragment is read at the register's row half, and a reduction over N into one keeps its
//!   bounds guard and goes through a partial combined across the quad (`Stmt::QuadReduce`).
//! - **Two loops (M, N)** around anything else (the accumulator's initialisation, its copies
//!   and the fused epilogue that reads it): one unrolled loop over the thread's N / 2
//!   accumulator registers, with M and N replaced by register `i`'s row and column
//!   (`target::fragment_row_col`) and every access to an accumulator fragment indexed by `i`.
//!   The accumulator's initialisation becomes its flag and the sum's copy of the accumulator is
//!   dropped (the sum reads the accumulator), so a fused epilogue reads the fragment directly;
//!   a nest over a column slice of the tile (an inner split of N, e.g. one TMA-store box) reads
//!   its registers of the tile. Register arithmetic in these loops carries no bounds guard
//!   (memory accesses keep theirs), and an epilogue array computed register by register from
//!   the accumulator is written into the accumulator in place. An epilogue ending in a global
//!   store stores registers `2j`, `2j + 1` (adjacent columns) as one vector where both are in
//!   bounds and aligned; one ending in a 16-bit shared cache that only a TMA store reads
//!   becomes one `stmatrix.x4` per 8 registers (`fragment.rs`).
//!
//! Guarantees: no `Mma` loop is left; accumulator arrays are indexed by unrolled loop
//! variables and constants only; each wgmma is preceded by `wgmma.fence` and followed by a
//! commit and `wait_group 0` before anything reads its accumulator or refills its operands
//! (an overlapped block-scaled product reads the half of its block accumulator that the group
//! before the last wrote, after `wait_group 1`: `block_scale.rs`);
//! the wgmmas of one unrolled loop form one group. The first wgmma on an accumulator runs
//! with `scale-d` off (a per-accumulator flag), so it needs no zero fill. Where an empty
//! mbarrier frees a stage, the k loop keeps one group in flight (`wait_group 1`) and releases
//! the previous stage (`groups.rs`). An online softmax with `overlap=products` gets
//! FlashAttention-3's order of its two products around the softmax (`overlap.rs`: S_j, then
//! P_{j-1} V_{j-1} in flight during tile j's softmax, the first S and the last P V peeled);
//! with `turns=products` the groups issued back to back are one turn (`groups.rs`: S_j and
//! P_{j-1} V_{j-1} in one turn, FlashAttention-3's ping-pong). A stream-K fixup after a k loop
//! gets that loop's accumulator; a split-K product's fragment is combined across its tile's
//! blocks before its epilogue, which only the tile's last block runs (`passes::grid::split_k`).
//! Errors (located at the tensor): an instruction shape other than M = 64,
//! K = 16 (32 on 8-bit operands), N a multiple of 8 up to 256; operands that are not swizzled
//! f16/bf16/e4m3/e5m2 shared caches, of types no wgmma pairs, MN-major 8-bit operands (saying
//! how to make them K-major) or another layout; an accumulator read outside a tile.
//! Emits: `Wgmma`, `WgmmaFence`, `WgmmaCommit`, `WgmmaWait`, `QuadReduce`; accumulator flags.

use super::context::{Change, Ctx, LoopKey};
use super::probe::eval;
use super::reduction::Accumulators;
use super::tma::PipelinePlan;
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::fusion::{BinaryOp, ExprId, MemoryType, ParallelType};
use crate::kir::{
    Access, Buffer, BufferId, Compute, ComputeRole, Data, Flow, Kernel, Loop, MmaOperand, Step,
    Stmt, Val, Wgmma,
};
use crate::target;
use std::collections::{HashMap, HashSet};

mod block_scale;
mod fragment;
mod groups;
mod overlap;
mod product;
mod rows;

use fragment::{
    fragment_accesses, fragment_base, pair_store, reusable_accumulators, stmatrix_store, unalias,
    unguard_register_arithmetic,
};
use groups::{batch, keep_one_group_in_flight};

/// Whether the fusion has a tensor-core tile (the pass runs only then).
pub fn used(cx: &Ctx) -> bool {
    cx.fusion.uses_tensor_cores()
}

/// One loop of an `Mma` nest.
#[derive(Clone)]
pub(super) struct TileLoop {
    pub(super) key: LoopKey,
    pub(super) var: String,
    pub(super) extent: Option<i64>,
}

/// The M and N loops of a product's tile, which the loops over its accumulator share.
#[derive(Clone)]
pub(super) struct Tile {
    pub(super) m: LoopKey,
    pub(super) n: LoopKey,
    pub(super) n_extent: i64,
}

/// Runs the pass; `reductions` (the accumulators `reduction` made) locate the errors about an
/// accumulator.
pub fn run(
    cx: &mut Ctx,
    plan: &PipelinePlan,
    reductions: &Accumulators,
    tiles: &crate::passes::online_softmax::TileLoops,
    k: &mut Kernel,
) -> Result<Change, Diagnostic> {
    // Register arrays over Mma axes: the accumulator fragments (allocation divided them by the
    // warp group's threads).
    let fragments: HashSet<BufferId> = cx
        .layout
        .alloc_ids
        .iter()
        .filter(|(&b, ids)| {
            k.buffers[b].memory == MemoryType::Local
                && ids
                    .iter()
                    .any(|&id| cx.fusion.ids[id].parallel == ParallelType::Mma)
        })
        .map(|(&b, _)| b)
        .collect();
    let body = std::mem::take(&mut k.body);
    let mut products = Vec::new();
    find_products(&body, &mut products);
    let mut lower = Lower {
        plan,
        fragments,
        tiles: Vec::new(),
        accumulators: HashSet::new(),
        started: HashMap::new(),
        aliases: HashMap::new(),
        promoted: HashMap::new(),
        scales_ahead: HashMap::new(),
        overlapped: Vec::new(),
        rows: HashSet::new(),
    };
    for nest in &products {
        let (tile, acc) = lower.analyse_tile(cx, k, nest)?;
        if !lower.tiles.iter().any(|t| (t.m, t.n) == (tile.m, tile.n)) {
            lower.tiles.push(tile);
        }
        lower.accumulators.insert(acc);
    }
    lower.find_rows(cx, k);
    let mut body = body;
    lower.promote_block_scales(cx, k, &mut body)?;
    let held: HashSet<BufferId> = lower
        .accumulators
        .iter()
        .chain(lower.promoted.keys())
        .copied()
        .collect();
    check_accumulator_registers(cx, reductions, k, &held)?;
    let mut body = lower.block(cx, k, body)?;
    let flags = lower.started.clone();
    let promoted = lower.promoted.clone();
    let scales_ahead = lower.scales_ahead.clone();
    crate::kir::for_each_block_mut(&mut body, &mut |block| {
        // (A loop whose body was all accumulator copies, now aliases, is left empty.)
        block.retain(|s| !matches!(s, Stmt::Loop(l) if l.body.is_empty()));
        let mut i = 0;
        while i < block.len() {
            if let Stmt::Alloc(b) = block[i] {
                // A block accumulator beside its sum's (its flags then beside it).
                if let Some(&blk) = promoted.get(&b) {
                    block.insert(i + 1, Stmt::Alloc(blk));
                }
                if let Some(&flag) = flags.get(&b) {
                    block.insert(i + 1, Stmt::Alloc(flag));
                    i += 1;
                }
                // A block accumulator's scales, loaded ahead of its promotion, beside its flags.
                for &scale in scales_ahead.get(&b).into_iter().flatten().rev() {
                    block.insert(i + 1, Stmt::Alloc(scale));
                }
            }
            i += 1;
        }
    });
    if !lower.aliases.is_empty() {
        unalias(&mut body, &lower.aliases);
    }
    // (A block accumulator is read by its promotion after every block: never reused.)
    let reusable: HashSet<BufferId> = lower
        .accumulators
        .iter()
        .filter(|b| !lower.promoted.values().any(|blk| blk == *b))
        .copied()
        .collect();
    let reuse = reusable_accumulators(&body, k, &reusable);
    if !reuse.is_empty() {
        unalias(&mut body, &reuse);
    }
    let mut body = batch(body);
    overlap::overlap_products(cx, plan, tiles, &mut body)?;
    block_scale::overlap_promotions(cx, k, &mut body, &lower.overlapped);
    k.body = keep_one_group_in_flight(body);
    if let Some((pipe, ws)) = plan
        .pipes
        .iter()
        .filter_map(|p| Some((p, p.ws.as_ref()?)))
        .find(|(_, ws)| ws.product_turns.is_some())
    {
        let span = cx.fusion.tensors[plan.loads[pipe.members[0]].tensor]
            .circular
            .map(|c| c.span);
        groups::take_product_turns(ws, span, &mut k.body)?;
    }
    name_stream_k_accumulators(&mut k.body);
    // Split-K's combine goes after the final fragment's sum, before its epilogue.
    super::grid::split_k(cx, |t| reductions.of_tensor(t), k)?;
    Ok(Change::Changed)
}

/// A stream-K fixup hands on the accumulator of the wgmmas in the k loop before it.
fn name_stream_k_accumulators(body: &mut Vec<Stmt>) {
    crate::kir::for_each_block_mut(body, &mut |block| {
        for i in 0..block.len() {
            if !matches!(block[i], Stmt::StreamKFixup { acc: None }) {
                continue;
            }
            let mut acc = None;
            for s in block[..i].iter().rev() {
                crate::kir::for_each_stmt(std::slice::from_ref(s), &mut |x| {
                    if let Stmt::Wgmma(w) = x {
                        acc.get_or_insert(w.acc.buffer);
                    }
                });
                if acc.is_some() {
                    break;
                }
            }
            block[i] = Stmt::StreamKFixup { acc };
        }
    });
}

/// The wgmma tile (the index of its `scale-d` flag) that accumulator register `base` starts.
fn tile_of_register(base: &Val, n: i64) -> Val {
    crate::passes::simplify::simplify(
        &Val::div(base.clone(), Val::Int(target::wgmma_accumulators(n))),
        &HashMap::new(),
    )
}

/// The products' accumulators must fit a thread's registers with room for the rest: the
/// consumers' `setmaxnreg` count, else what the launch gives every thread. (Copies of an
/// accumulator are dropped, and epilogue values are one register each.)
pub(super) fn check_accumulator_registers(
    cx: &Ctx,
    reductions: &Accumulators,
    k: &Kernel,
    accumulators: &HashSet<BufferId>,
) -> Result<(), Diagnostic> {
    let mut held: Vec<(BufferId, i64)> = accumulators
        .iter()
        .filter_map(|&b| match k.buffers[b].size {
            Some(Val::Int(n)) => Some((b, n)),
            _ => None,
        })
        .collect();
    // (Each buffer once: its index orders them as the pair did.)
    crate::id::sort_by_position(&mut held, |&(b, _)| b.index());
    let total: i64 = held.iter().map(|&(_, n)| n).sum();
    let (budget, whose) = register_budget(k);
    if total + target::NON_ACCUMULATOR_REGISTERS <= budget {
        return Ok(());
    }
    let f = cx.fusion;
    let (first, _) = held[0];
    let span = k.buffers[first]
        .tensor
        .or_else(|| reductions.tensor_of(first))
        .and_then(|t| f.tensors[t].span);
    let list: Vec<String> = held
        .iter()
        .map(|&(b, n)| format!("`{}` {n}", k.buffers[b].name))
        .collect();
    Err(Diagnostic::new(
        format!(
            "the tensor-core accumulators take {total} f32 registers per thread ({}), and a thread has {budget} ({whose}) of which wgmma needs about {} for everything else: use a smaller N per warp group, or give each warp group its own rows of M (a TIDy axis) instead of several M blocks",
            list.join(", "),
            target::NON_ACCUMULATOR_REGISTERS
        ),
        span,
    ))
}

/// The registers a consumer thread has, and whose count that is: the consumers' `setmaxnreg`
/// count, else what the launch gives every thread.
pub(super) fn register_budget(k: &Kernel) -> (i64, String) {
    match (k.register_sharing, launch_registers(k)) {
        (Some((_, consumer)), _) => (
            consumer as i64,
            "the consumers' setmaxnreg count".to_string(),
        ),
        (None, Some((t, entry))) => (entry, format!("what a launch of {t} threads gives each")),
        (None, None) => (
            target::MAX_REGISTERS_PER_THREAD,
            "the per-thread limit".to_string(),
        ),
    }
}

/// The block's threads and the registers a launch of them gives each (the register file's
/// share, in whole allocation units of 8), when the block size is a constant.
pub(super) fn launch_registers(k: &Kernel) -> Option<(i64, i64)> {
    let threads: i64 = k
        .block
        .iter()
        .map(|b| b.as_const())
        .product::<Option<i64>>()?;
    let entry = (65536 / threads).min(target::MAX_REGISTERS_PER_THREAD) / 8 * 8;
    Some((threads, entry))
}

/// Every three-deep Mma nest (the products), as their loops.
pub(super) fn find_products(body: &[Stmt], out: &mut Vec<Vec<Stmt>>) {
    crate::kir::walk(body, &mut |s| match s {
        Stmt::Loop(l) if l.parallel == ParallelType::Mma => {
            let (loops, _) = chain(l);
            if loops.len() == 3 {
                out.push(vec![s.clone()]);
            }
            Flow::Skip
        }
        _ => Flow::Descend,
    });
}

/// Whether `l` opens a tensor-core product's tile (three or more Mma loops in a row), whose
/// operands wgmma reads through descriptors.
pub(crate) fn is_product_tile(l: &Loop) -> bool {
    l.parallel == ParallelType::Mma && chain(l).0.len() >= 3
}

/// The loops of an Mma nest (each the only statement of the one before) and its body.
pub(super) fn chain(l: &Loop) -> (Vec<TileLoop>, &[Stmt]) {
    let mut loops = Vec::new();
    let mut cur = l;
    loop {
        loops.push(TileLoop {
            key: cur.key,
            var: cur.var.clone(),
            extent: match cur.extent {
                Val::Int(e) => Some(e),
                _ => None,
            },
        });
        match cur.body.as_slice() {
            [Stmt::Loop(inner)] if inner.parallel == ParallelType::Mma => cur = inner,
            body => return (loops, body),
        }
    }
}

/// The computations of a tile body, predicates dropped, in order; None if it holds anything
/// but allocations, computations and conditionals.
pub(super) fn computes(body: &[Stmt], out: &mut Vec<Compute>) -> bool {
    // Whether every statement so far is one of those (the walk stops at the first that is not).
    let mut only = true;
    crate::kir::walk(body, &mut |s| {
        if !only {
            return Flow::Skip;
        }
        match s {
            Stmt::Alloc(_) | Stmt::If { .. } => {}
            Stmt::Compute(c) => out.push(c.clone()),
            _ => {
                only = false;
                return Flow::Skip;
            }
        }
        Flow::Descend
    });
    only
}

/// `idx(var = j) - idx(var = 0)` if it is `j * stride` for every probe (the index is affine in
/// `var`), else None.
pub(super) fn stride(idx: &Val, var: &str) -> Option<i64> {
    let mut found = None;
    for seed in 0..6u64 {
        let base = eval(idx, var, 0, seed, &[], 1)?;
        let one = eval(idx, var, 1, seed, &[], 1)? - base;
        for j in [2, 3, 7] {
            if eval(idx, var, j, seed, &[], 1)? - base != j * one {
                return None;
            }
        }
        if found.is_some_and(|f| f != one) {
            return None;
        }
        found = Some(one);
    }
    found
}

pub(super) fn zero(idx: &Val, vars: &[&str]) -> Val {
    let zero = Val::Int(0);
    let with: Vec<(&str, &Val)> = vars.iter().map(|&var| (var, &zero)).collect();
    super::simplify::simplify(&idx.subst_vars(&with), &HashMap::new())
}

pub(super) struct Lower<'p> {
    /// The pipeline plan (which buffers hold swizzled boxes, which a TMA store reads).
    pub(super) plan: &'p PipelinePlan,
    pub(super) fragments: HashSet<BufferId>,
    pub(super) tiles: Vec<Tile>,
    /// Accumulators of the products.
    pub(super) accumulators: HashSet<BufferId>,
    /// Each accumulator's flags, one per wgmma tile of it (an accumulator may hold several,
    /// e.g. two 64-row halves of a warp group's 128-row tile): set once the tile's first wgmma
    /// has run (`scale-d`). Allocated beside the accumulator, so that they live as long.
    pub(super) started: HashMap<BufferId, BufferId>,
    /// Fragments that are copies of an accumulator, read as the accumulator itself.
    pub(super) aliases: HashMap<BufferId, BufferId>,
    /// Sums of block-scaled products (`block_scale.rs`): each accumulator and the block
    /// accumulator its wgmmas write, promoted into it after every block of K.
    pub(super) promoted: HashMap<BufferId, BufferId>,
    /// Each block accumulator's scale registers (`block_scale.rs`): one array per scale of its
    /// promotion, loaded at the start of the block, read by the promotion after its wgmmas.
    pub(super) scales_ahead: HashMap<BufferId, Vec<BufferId>>,
    /// Block loops whose promotions overlap the next block's wgmmas (`block_scale.rs`).
    overlapped: Vec<block_scale::Overlap>,
    /// Row fragments (`rows.rs`): register arrays over a tile's M axis alone, two per thread.
    pub(super) rows: HashSet<BufferId>,
}

impl Lower<'_> {
    fn err(&self, cx: &Ctx, expr: ExprId, m: String) -> Diagnostic {
        let f = cx.fusion;
        Diagnostic::new(m, f.tensors[f.exprs[expr].output].span)
    }

    /// Checks a product's tile and finds its M, N and K loops and its accumulator.
    fn analyse_tile(
        &self,
        cx: &Ctx,
        k: &Kernel,
        nest: &[Stmt],
    ) -> Result<(Tile, BufferId), Diagnostic> {
        let Some(Stmt::Loop(l)) = nest.first() else {
            unreachable!("find_products keeps loops")
        };
        let (loops, body) = chain(l);
        let p = self.product(cx, k, &loops, body)?;
        Ok((
            Tile {
                m: p.m.key,
                n: p.n.key,
                n_extent: p.n_extent,
            },
            p.acc.buffer,
        ))
    }

    fn block(
        &mut self,
        cx: &mut Ctx,
        k: &mut Kernel,
        body: Vec<Stmt>,
    ) -> Result<Vec<Stmt>, Diagnostic> {
        let mut out = body;
        crate::kir::try_rewrite_pre(&mut out, &mut |s| {
            Ok(match s {
                Stmt::Loop(l) if l.parallel == ParallelType::Mma => {
                    Step::Keep(self.nest(cx, k, l)?)
                }
                Stmt::Compute(c) => {
                    let held = |b: &BufferId| self.fragments.contains(b) || self.rows.contains(b);
                    let mut touches = held(&c.out.buffer);
                    c.value.for_each_read(&mut |a| touches |= held(&a.buffer));
                    if touches {
                        let f = cx.fusion;
                        let t = f.exprs[c.expr].output;
                        return Err(Diagnostic::new(
                            format!(
                                "`{}` reads or writes a tensor-core accumulator outside its tile: the accumulator lives in the warp group's registers, so a tensor that reads it needs the product's M and N axes as Mma axes (propagate does that)",
                                f.tensors[t].name
                            ),
                            f.tensors[t].span,
                        ));
                    }
                    Step::Keep(vec![Stmt::Compute(c)])
                }
                other => Step::Descend(vec![other]),
            })
        })?;
        Ok(out)
    }

    fn nest(&mut self, cx: &mut Ctx, k: &mut Kernel, l: Loop) -> Result<Vec<Stmt>, Diagnostic> {
        let (loops, body) = chain(&l);
        match loops.len() {
            3 => self.product_nest(cx, k, &loops, body),
            2 => self.fragment_nest(cx, k, &loops, body),
            1 if self.tiles.iter().any(|t| t.m == loops[0].key) => {
                self.row_nest(cx, k, &loops[0], body)
            }
            n => Err(mma_axes_in_a_row(cx, n, &loops, body)),
        }
    }

    /// A product's tile (M, N, K loops): one wgmma, its started flag set after it.
    fn product_nest(
        &mut self,
        cx: &mut Ctx,
        k: &mut Kernel,
        loops: &[TileLoop],
        body: &[Stmt],
    ) -> Result<Vec<Stmt>, Diagnostic> {
        let p = self.product(cx, k, loops, body)?;
        let target = self
            .promoted
            .get(&p.acc.buffer)
            .copied()
            .unwrap_or(p.acc.buffer);
        let started = match self.started.get(&target) {
            Some(&b) => b,
            None => return Err(self.err(
                cx,
                p.expr,
                "internal: the accumulator's initialisation was not found before its first product"
                    .into(),
            )),
        };
        let base = fragment_base(p.acc.index.as_ref(), &p.m.var, &p.n.var, p.n_extent);
        let flag = Access {
            buffer: started,
            index: Some(tile_of_register(&base, p.n_extent)),
        };
        let acc = Access {
            buffer: target,
            index: Some(base),
        };
        Ok(vec![
            Stmt::WgmmaFence,
            Stmt::Wgmma(Wgmma {
                expr: p.expr,
                acc,
                n: p.n_extent,
                a: p.a,
                b: p.b,
                a_type: p.a_type,
                b_type: p.b_type,
                accumulate: Some(flag.clone()),
            }),
            Stmt::Compute(Compute {
                expr: p.expr,
                out: flag,
                value: Data::Literal(1.0, DType::I32),
                role: ComputeRole::Normal,
                vector: None,
            }),
            Stmt::WgmmaCommit,
            Stmt::WgmmaWait(0),
        ])
    }

    /// A nest over an accumulator's M and N (or a column slice of N): its zero fill becomes the
    /// started flags, a copy of the accumulator goes, anything else becomes a loop over the
    /// thread's registers of the fragment (or a paired or stmatrix store).
    fn fragment_nest(
        &mut self,
        cx: &mut Ctx,
        k: &mut Kernel,
        loops: &[TileLoop],
        body: &[Stmt],
    ) -> Result<Vec<Stmt>, Diagnostic> {
        let (name, span) = nest_tensor(cx, body);
        // The tile's M and N loops, or M and an inner part of N (a column slice of the
        // accumulator, e.g. one box of a TMA-stored epilogue).
        let found = self.tiles.iter().find_map(|t| {
            if loops[0].key == t.m {
                n_part(cx, loops[1].key, t).map(|w| (t.clone(), 0, 1, w))
            } else if loops[1].key == t.m {
                n_part(cx, loops[0].key, t).map(|w| (t.clone(), 1, 0, w))
            } else {
                None
            }
        });
        let Some((tile, mi, ni, width)) = found else {
            return Err(Diagnostic::new(
                format!("`{name}` has two Mma axes that are not the M and N axes of a tensor-core product's tile in the same loops: Mma axes are the product's instruction tile and the tensors that read its accumulator"),
                span,
            ));
        };
        let (mv, nv) = (loops[mi].var.clone(), loops[ni].var.clone());
        let body = body.to_vec();
        // The accumulator's zero fill: replaced by its flag (scale-d off at first).
        let mut cs = Vec::new();
        let inits = computes(&body, &mut cs)
            && !cs.is_empty()
            && cs.iter().all(|c| {
                c.role == ComputeRole::ReductionInit && self.accumulators.contains(&c.out.buffer)
            });
        // A copy of an accumulator into the sum's own fragment (the reduction's final
        // write): the sum is the accumulator, so the copy and its registers go.
        let copies = !cs.is_empty()
            && cs.iter().all(|c| {
                c.role == ComputeRole::ReductionWrite
                    && self.fragments.contains(&c.out.buffer)
                    && matches!(&c.value, Data::Read(a) if self.accumulators.contains(&a.buffer) || self.promoted.contains_key(&a.buffer))
            });
        if copies {
            for c in cs {
                if let Data::Read(a) = &c.value {
                    self.aliases.insert(c.out.buffer, a.buffer);
                }
            }
            return Ok(Vec::new());
        }
        if inits {
            return self.start_flags(cx, k, cs, (&mv, &nv), tile.n_extent, span);
        }
        let reg = cx.fresh_name("r");
        let i = Val::Var(reg.clone());
        let (row, col) = fragment_position(&i);
        let mut body = body;
        let fragments = self.fragments.clone();
        let mut bad = None;
        let reduced = self.row_reductions(cx, &body);
        for s in &mut body {
            fragment_accesses(s, &fragments, &mv, &nv, &i, tile.n_extent, &mut bad);
            self.row_accesses(s, &mv, Some(&nv), &rows::half_of_register(&i), &mut bad);
            s.map_vals(&mut |v| v.subst(&mv, &row).subst(&nv, &col));
        }
        if let Some(b) = bad {
            return Err(Diagnostic::new(
                format!(
                    "internal: the accumulator `{}` is not laid out as its M x N tile in `{name}`",
                    k.buffers[b].name
                ),
                span,
            ));
        }
        // (A row statistic's update keeps its guard: keys out of range add nothing to it; so
        // does the update of a scalar, a grid reduction's such as the amax of the output,
        // which accumulates every position of every tile.)
        let fusion = cx.fusion;
        unguard_register_arithmetic(k, &mut body, &|c: &Compute| {
            c.role == ComputeRole::ReductionUpdate
                && (self.rows.contains(&c.out.buffer)
                    || fusion.rank(fusion.exprs[c.expr].output) == 0)
        });
        if reduced.is_empty() {
            if let Some(x4) = stmatrix_store(cx, self.plan, k, &body, &reg, loops[ni].key, width) {
                return Ok(vec![x4]);
            }
            if let Some(paired) = pair_store(cx, self.plan, k, &body, &reg, loops[ni].key, width) {
                return Ok(vec![paired]);
            }
        }
        // A row reduction goes into a partial of this loop's columns, combined across the
        // quad and then into the row's value.
        let (before, after) = rows::partials(cx, k, &reduced, &mut body);
        let mut out = before;
        out.push(Stmt::Loop(Loop {
            key: loops[ni].key,
            var: reg,
            extent: Val::Int(target::wgmma_accumulators(width)),
            parallel: ParallelType::Unroll,
            digits: Vec::new(),
            body,
        }));
        out.extend(after);
        Ok(out)
    }

    /// The started flags of the accumulators a zero fill `cs` wrote (made on first use), set to 0.
    fn start_flags(
        &mut self,
        cx: &mut Ctx,
        k: &mut Kernel,
        cs: Vec<Compute>,
        (mv, nv): (&str, &str),
        n_extent: i64,
        span: Option<crate::diag::Span>,
    ) -> Result<Vec<Stmt>, Diagnostic> {
        let mut out = Vec::new();
        let per_tile = target::wgmma_accumulators(n_extent);
        for c in cs {
            let acc = c.out.buffer;
            let flag = match self.started.get(&acc) {
                Some(&flag) => flag,
                None => {
                    let Some(Val::Int(regs)) = k.buffers[acc].size else {
                        return Err(Diagnostic::new(
                            format!(
                                "internal: the accumulator `{}` has no constant size",
                                k.buffers[acc].name
                            ),
                            span,
                        ));
                    };
                    let flag = BufferId::new(k.buffers.len());
                    k.buffers.push(Buffer {
                        name: cx.fresh_name(&format!("{}_started", k.buffers[acc].name)),
                        dtype: DType::I32,
                        memory: MemoryType::Local,
                        tensor: None,
                        size: Some(Val::Int((regs / per_tile).max(1))),
                        smem_offset: None,
                        global_shape: Vec::new(),
                        is_input: false,
                        l2: crate::fusion::L2Policy::Normal,
                    });
                    self.started.insert(acc, flag);
                    flag
                }
            };
            let base = fragment_base(c.out.index.as_ref(), mv, nv, n_extent);
            out.push(Stmt::Compute(Compute {
                expr: c.expr,
                out: Access {
                    buffer: flag,
                    index: Some(tile_of_register(&base, n_extent)),
                },
                value: Data::Literal(0.0, DType::I32),
                role: ComputeRole::Normal,
                vector: None,
            }));
        }
        Ok(out)
    }
}

/// The error of a nest of `n` Mma loops (a product has three, its accumulator's readers two).
fn mma_axes_in_a_row(cx: &Ctx, n: usize, loops: &[TileLoop], body: &[Stmt]) -> Diagnostic {
    let f = cx.fusion;
    // The nest's computation, else (a copy's nest, e.g. a TMA store) the tensor
    // with an Mma axis on its first loop.
    let who = first_expr(body).map(|e| f.exprs[e].output).or_else(|| {
        f.tensor_ids().find(|&t| {
            f.tensors[t].loop_domain.iter().any(|&id| {
                f.ids[id].parallel == ParallelType::Mma
                    && cx.keys.of_axis.get(&id) == Some(&loops[0].key)
            })
        })
    });
    Diagnostic::new(
            format!(
                "`{}` has {n} Mma axes in a row; a tensor-core product has three (M, N, K: the instruction tile) and the tensors that read its accumulator two (M, N)",
                who.map(|t| f.tensors[t].name.clone()).unwrap_or_default()
            ),
            who.and_then(|t| f.tensors[t].span),
        )
}

/// Whether loop `key` is the N of tile `t` or an inner part of it (a column slice of the
/// accumulator, e.g. one box of a TMA-stored epilogue), and its width.
fn n_part(cx: &Ctx, key: LoopKey, t: &Tile) -> Option<i64> {
    if key == t.n {
        return Some(t.n_extent);
    }
    // An inner part of an inner part of N is a column slice as well (N split
    // into halves, each in slices of one box).
    let super::context::KeyNode::Split {
        parent,
        factor,
        is_outer: false,
        ..
    } = cx.keys.nodes[key]
    else {
        return None;
    };
    if factor % 8 != 0 || t.n_extent % factor != 0 {
        return None;
    }
    let mut up = parent;
    loop {
        if up == t.n {
            return Some(factor);
        }
        match cx.keys.nodes[up] {
            super::context::KeyNode::Split {
                parent,
                is_outer: false,
                ..
            } => up = parent,
            _ => return None,
        }
    }
}

/// The row and column in the warp group's 64 x N tile of accumulator register `i` of the thread.
fn fragment_position(i: &Val) -> (Val, Val) {
    let tid = Val::Hw(ParallelType::TIDx);
    let lane = Val::rem(tid, Val::Int(crate::target::WARP_THREADS));
    // row = 16 warp + lane / 4 + 8 ((i / 2) % 2), col = 8 (i / 4) + 2 (lane % 4) + i % 2
    let row = rows::row_of_half(&rows::half_of_register(i));
    let col = Val::add(
        Val::add(
            Val::mul(Val::Int(8), Val::div(i.clone(), Val::Int(4))),
            Val::mul(Val::Int(2), Val::rem(lane, Val::Int(4))),
        ),
        Val::rem(i.clone(), Val::Int(2)),
    );
    (row, col)
}

/// The name and place of the tensor a nest computes first (for its messages).
pub(super) fn nest_tensor(cx: &Ctx, body: &[Stmt]) -> (String, Option<crate::diag::Span>) {
    let f = cx.fusion;
    let expr = first_expr(body);
    let name = expr
        .map(|e| f.tensors[f.exprs[e].output].name.clone())
        .unwrap_or_default();
    (name, expr.and_then(|e| f.tensors[f.exprs[e].output].span))
}

pub(super) fn first_expr(body: &[Stmt]) -> Option<ExprId> {
    let mut found = None;
    crate::kir::for_each_stmt(body, &mut |s| {
        if let Stmt::Compute(c) = s {
            found = found.or(Some(c.expr));
        }
    });
    found
}
