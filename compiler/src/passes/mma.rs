//! Pass `mma`: lowers tensor-core tiles (loop axes parallelized `Mma`) to `wgmma`.
//!
//! Requires: `sync`. It runs after every pass that moves, pipelines, guards or orders
//! statements, so an instruction tile went through them as an ordinary loop nest: its operand
//! reads got their circular-buffer slot offsets and mbarrier waits, and the barriers that
//! protect its shared-memory operands are in place.
//!
//! Takes every nest of `Mma` loops:
//! - **Three loops (M, N, K) around the update of a sum of products** `acc += cast(x) *
//!   cast(y)` of two f16/bf16 shared-memory caches (reached through the register temporaries
//!   the other passes made): one `wgmma.mma_async.m64nNk16` whose operands are matrix
//!   descriptors at the tile's first element (its logical index, with slot offsets; the
//!   descriptor's swizzle mode applies the cache's swizzle in hardware). The operand whose
//!   index moves with M is A, the one moving with N is B. An operand is K-major when K is
//!   contiguous and a row of the tile is one swizzle span (`LBO` unused, `SBO` = 8 rows), or
//!   MN-major (transposed) when M or N is contiguous within one swizzle span and K steps by
//!   rows (`SBO` = 8 rows of K). The bounds predicates inside the tile are dropped: TMA fills
//!   out-of-bounds operand elements with zeros, which add nothing.
//! - **Two loops (M, N)** around anything else (the accumulator's initialisation, its copies
//!   and the fused epilogue that reads it): one unrolled loop over the thread's N / 2
//!   accumulator registers, with M and N replaced by register `i`'s row and column
//!   (`target::fragment_row_col`) and every access to an accumulator fragment indexed by `i`.
//!
//! Guarantees: no `Mma` loop is left; accumulator arrays are indexed by unrolled loop
//! variables and constants only; each wgmma is preceded by `wgmma.fence` and followed by a
//! commit and `wait_group 0` before anything reads its accumulator or refills its operands;
//! the wgmmas of one unrolled loop form one group. The first wgmma on an accumulator runs
//! with `scale-d` off (a per-accumulator flag), so it needs no zero fill.
//! Emits: `Wgmma`, `WgmmaFence`, `WgmmaCommit`, `WgmmaWait`; accumulator flags.

use super::predicate::eval;
use super::{Ctx, LoopKey};
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::fusion::{BinaryOp, MemoryType, ParallelType};
use crate::kir::{
    Access, Buffer, BufferId, Compute, ComputeRole, Data, Kernel, Loop, MmaOperand, Stmt, Val,
    Wgmma,
};
use crate::target;
use std::collections::{HashMap, HashSet};

/// Whether the fusion has a tensor-core tile (the pass runs only then).
pub fn used(cx: &Ctx) -> bool {
    let f = cx.fusion;
    f.tensors.iter().any(|t| {
        t.definition.is_some()
            && t.loop_domain
                .iter()
                .any(|&id| f.ids[id].parallel == ParallelType::Mma)
    })
}

/// One loop of an `Mma` nest.
#[derive(Clone)]
struct TileLoop {
    key: LoopKey,
    var: String,
    extent: Option<i64>,
}

/// The M and N loops of a product's tile, which the loops over its accumulator share.
#[derive(Clone)]
struct Tile {
    m: LoopKey,
    n: LoopKey,
    n_extent: i64,
}

pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<(), Diagnostic> {
    // Register arrays over Mma axes: the accumulator fragments (allocation divided them by the
    // warp group's threads).
    let fragments: HashSet<BufferId> = cx
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
        fragments,
        tiles: Vec::new(),
        accumulators: HashSet::new(),
        started: HashMap::new(),
        aliases: HashMap::new(),
    };
    for nest in &products {
        let (tile, acc) = lower.analyse_tile(cx, k, nest)?;
        if !lower.tiles.iter().any(|t| (t.m, t.n) == (tile.m, tile.n)) {
            lower.tiles.push(tile);
        }
        lower.accumulators.insert(acc);
    }
    check_accumulator_registers(cx, k, &lower.accumulators)?;
    let mut body = lower.block(cx, k, body)?;
    if !lower.aliases.is_empty() {
        unalias(&mut body, &lower.aliases);
    }
    k.body = keep_one_group_in_flight(batch(body));
    Ok(())
}

/// In a loop whose body ends with `commit, wait_group 0, release the stage` (a stage tracked
/// by an empty mbarrier), the wait becomes `wait_group 1` and the release moves one iteration
/// later: the stage read by the previous iteration's group, whose wgmmas have finished, is
/// released while this iteration's group still runs, so the tensor cores never drain between
/// two k steps. After the loop, `wait_group 0` and the release of the last stage. (A stage
/// freed by a block barrier keeps `wait_group 0`: the barrier would not wait for the group.)
fn keep_one_group_in_flight(body: Vec<Stmt>) -> Vec<Stmt> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::Loop(mut l) => {
                l.body = keep_one_group_in_flight(l.body);
                let n = l.body.len();
                let tail = n >= 3
                    && !l.parallel.is_hw()
                    && l.body[n - 3] == Stmt::WgmmaCommit
                    && l.body[n - 2] == Stmt::WgmmaWait(0)
                    && matches!(l.body[n - 1], Stmt::MbarArrive { .. });
                if !tail {
                    out.push(Stmt::Loop(l));
                    continue;
                }
                let Some(Stmt::MbarArrive {
                    bars,
                    slot,
                    per_warp,
                }) = l.body.pop()
                else {
                    unreachable!("checked above")
                };
                let var = Val::Var(l.var.clone());
                let previous = slot.subst(
                    &l.var,
                    &Val::Sub(Box::new(var.clone()), Box::new(Val::Int(1))),
                );
                let last = slot.subst(
                    &l.var,
                    &Val::Sub(Box::new(l.extent.clone()), Box::new(Val::Int(1))),
                );
                let n = l.body.len();
                l.body[n - 1] = Stmt::WgmmaWait(1);
                l.body.push(Stmt::If {
                    cond: Val::lt(Val::Int(0), var),
                    then: vec![Stmt::MbarArrive {
                        bars,
                        slot: previous,
                        per_warp,
                    }],
                    els: Vec::new(),
                });
                let extent = l.extent.clone();
                out.push(Stmt::Loop(l));
                out.push(Stmt::WgmmaWait(0));
                out.push(Stmt::If {
                    cond: Val::lt(Val::Int(0), extent),
                    then: vec![Stmt::MbarArrive {
                        bars,
                        slot: last,
                        per_warp,
                    }],
                    els: Vec::new(),
                });
            }
            Stmt::If { cond, then, els } => out.push(Stmt::If {
                cond,
                then: keep_one_group_in_flight(then),
                els: keep_one_group_in_flight(els),
            }),
            Stmt::WarpRoles {
                is_producer,
                producer,
                consumer,
                registers,
                consumer_threads,
            } => out.push(Stmt::WarpRoles {
                is_producer,
                producer,
                consumer: keep_one_group_in_flight(consumer),
                registers,
                consumer_threads,
            }),
            other => out.push(other),
        }
    }
    out
}

/// The products' accumulators must fit a thread's registers with room for the rest: the
/// consumers' `setmaxnreg` count, else what the launch gives every thread. (Copies of an
/// accumulator are dropped, and epilogue values are one register each.)
fn check_accumulator_registers(
    cx: &Ctx,
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
    held.sort_unstable();
    let total: i64 = held.iter().map(|&(_, n)| n).sum();
    let threads: Option<i64> = k.block.iter().map(|b| b.as_const()).product();
    let (budget, whose) = match (k.register_sharing, threads) {
        (Some((_, consumer)), _) => (
            consumer as i64,
            "the consumers' setmaxnreg count".to_string(),
        ),
        (None, Some(t)) => {
            let entry = (65536 / t).min(target::MAX_REGISTERS_PER_THREAD) / 8 * 8;
            (entry, format!("what a launch of {t} threads gives each"))
        }
        (None, None) => (
            target::MAX_REGISTERS_PER_THREAD,
            "the per-thread limit".to_string(),
        ),
    };
    if total + target::NON_ACCUMULATOR_REGISTERS <= budget {
        return Ok(());
    }
    let f = cx.fusion;
    let (first, _) = held[0];
    let span = k.buffers[first]
        .tensor
        .or_else(|| cx.accumulator_of.get(&first).copied())
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

/// Every three-deep Mma nest (the products), as their loops.
fn find_products(body: &[Stmt], out: &mut Vec<Vec<Stmt>>) {
    for s in body {
        match s {
            Stmt::Loop(l) if l.parallel == ParallelType::Mma => {
                let (loops, _) = chain(l);
                if loops.len() == 3 {
                    out.push(vec![s.clone()]);
                }
            }
            Stmt::Loop(l) => find_products(&l.body, out),
            Stmt::If { then, els, .. } => {
                find_products(then, out);
                find_products(els, out);
            }
            Stmt::WarpRoles {
                producer, consumer, ..
            } => {
                find_products(producer, out);
                find_products(consumer, out);
            }
            _ => {}
        }
    }
}

/// The loops of an Mma nest (each the only statement of the one before) and its body.
fn chain(l: &Loop) -> (Vec<TileLoop>, &[Stmt]) {
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
fn computes(body: &[Stmt], out: &mut Vec<Compute>) -> bool {
    for s in body {
        match s {
            Stmt::Alloc(_) => {}
            Stmt::Compute(c) => out.push(c.clone()),
            Stmt::If { then, els, .. } => {
                if !computes(then, out) || !computes(els, out) {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

/// `idx(var = j) - idx(var = 0)` if it is `j * stride` for every probe (the index is affine in
/// `var`), else None.
fn stride(idx: &Val, var: &str) -> Option<i64> {
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

fn zero(idx: &Val, vars: &[&str]) -> Val {
    let v = vars
        .iter()
        .fold(idx.clone(), |acc, var| acc.subst(var, &Val::Int(0)));
    super::simplify::simplify(&v, &HashMap::new())
}

/// `x` with every read of a register temporary defined earlier in the tile replaced by its
/// definition.
fn resolve(d: &Data, defs: &HashMap<BufferId, Data>) -> Data {
    match d {
        Data::Read(a) => match defs.get(&a.buffer) {
            Some(def) => resolve(def, defs),
            None => d.clone(),
        },
        Data::Unary(op, t, x) => Data::Unary(*op, *t, Box::new(resolve(x, defs))),
        Data::Binary(op, t, x, y) => Data::Binary(
            *op,
            *t,
            Box::new(resolve(x, defs)),
            Box::new(resolve(y, defs)),
        ),
        Data::Cast(t, x) => Data::Cast(*t, Box::new(resolve(x, defs))),
        other => other.clone(),
    }
}

struct Lower {
    fragments: HashSet<BufferId>,
    tiles: Vec<Tile>,
    /// Accumulators of the products.
    accumulators: HashSet<BufferId>,
    /// Each accumulator's flag: set once its first wgmma has run (`scale-d`).
    started: HashMap<BufferId, BufferId>,
    /// Fragments that are copies of an accumulator, read as the accumulator itself.
    aliases: HashMap<BufferId, BufferId>,
}

impl Lower {
    fn err(&self, cx: &Ctx, expr: usize, m: String) -> Diagnostic {
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

    /// The sum of products a three-deep tile computes, checked against the instruction.
    fn product(
        &self,
        cx: &Ctx,
        k: &Kernel,
        loops: &[TileLoop],
        body: &[Stmt],
    ) -> Result<Product, Diagnostic> {
        let f = cx.fusion;
        let mut cs = Vec::new();
        let any_expr = first_expr(body);
        let what = |e: Option<usize>| {
            e.map(|e| format!("`{}`", f.tensors[f.exprs[e].output].name))
                .unwrap_or_else(|| "a tensor".into())
        };
        let span = |e: Option<usize>| e.and_then(|e| f.tensors[f.exprs[e].output].span);
        if !computes(body, &mut cs) {
            return Err(Diagnostic::new(
                format!(
                    "the Mma tile of {} holds more than computations: a tensor-core tile is one instruction",
                    what(any_expr)
                ),
                span(any_expr),
            ));
        }
        let Some(update) = cs
            .iter()
            .rev()
            .find(|c| c.role == ComputeRole::ReductionUpdate)
        else {
            return Err(Diagnostic::new(
                format!(
                    "{} has three Mma axes but is not a sum: the M, N and K axes of a tensor-core tile belong to the sum of products (other tensors in the tile have its M and N axes only)",
                    what(any_expr)
                ),
                span(any_expr),
            ));
        };
        let expr = update.expr;
        let sum = &f.tensors[f.exprs[expr].output];
        let bad = |m: String| Err(self.err(cx, expr, format!("`{}`: {m}", sum.name)));
        let defs: HashMap<BufferId, Data> = cs
            .iter()
            .filter(|c| {
                k.buffers[c.out.buffer].memory == MemoryType::Local
                    && !self.fragments.contains(&c.out.buffer)
            })
            .map(|c| (c.out.buffer, c.value.clone()))
            .collect();
        let acc = update.out.clone();
        let Data::Binary(BinaryOp::Add, DType::F32, x, y) = &update.value else {
            return bad("a tensor-core product accumulates in f32: the sum must be f32".into());
        };
        let product = match (&**x, &**y) {
            (Data::Read(a), other) | (other, Data::Read(a)) if a == &acc => resolve(other, &defs),
            _ => return bad("internal: the reduction update does not read its accumulator".into()),
        };
        let Data::Binary(BinaryOp::Mul, _, x, y) = &product else {
            return bad(
                "a tensor-core tile computes a sum of products of two operands, and this sum is of something else".into(),
            );
        };
        let operand = |d: &Data| -> Option<(Access, DType)> {
            match d {
                Data::Cast(DType::F32, inner) => match &**inner {
                    Data::Read(a) => Some((a.clone(), k.buffers[a.buffer].dtype)),
                    _ => None,
                },
                _ => None,
            }
        };
        let (Some((xa, xt)), Some((ya, yt))) = (operand(x), operand(y)) else {
            return bad("the tensor cores multiply f16 or bf16 operands widened to f32: each factor must be `cast(x, f32)` of an f16 or bf16 cache in shared memory".into());
        };
        for (a, t) in [(&xa, xt), (&ya, yt)] {
            let buf = &k.buffers[a.buffer];
            if buf.memory != MemoryType::Shared || !matches!(t, DType::BF16 | DType::F16) {
                return bad(format!(
                    "operand `{}` is {} in {} memory; a wgmma operand is an f16 or bf16 cache in shared memory (cache_after(x, memory=shared, load=tma, swizzle=128))",
                    buf.name,
                    t,
                    buf.memory.name()
                ));
            }
        }
        if xt != yt {
            return bad(format!(
                "the operands are {xt} and {yt}; both factors of a wgmma have the same type"
            ));
        }
        // Which loop is which: K is the one the accumulator does not move with; A moves with
        // M, B with N.
        let acc_index = acc.index.clone().unwrap_or(Val::Int(0));
        let moves = |idx: &Val, l: &TileLoop| idx.mentions(&l.var);
        let ks: Vec<&TileLoop> = loops.iter().filter(|l| !moves(&acc_index, l)).collect();
        let [kl] = ks[..] else {
            return bad("internal: the Mma tile has no single K axis".into());
        };
        let mn: Vec<&TileLoop> = loops.iter().filter(|l| l.key != kl.key).collect();
        let (xi, yi) = (
            xa.index.clone().unwrap_or(Val::Int(0)),
            ya.index.clone().unwrap_or(Val::Int(0)),
        );
        let only = |idx: &Val, a: &TileLoop, b: &TileLoop| moves(idx, a) && !moves(idx, b);
        let (ml, nl, a, b) = if only(&xi, mn[0], mn[1]) && only(&yi, mn[1], mn[0]) {
            (mn[0], mn[1], xa, ya)
        } else if only(&xi, mn[1], mn[0]) && only(&yi, mn[0], mn[1]) {
            (mn[1], mn[0], xa, ya)
        } else {
            return bad("each operand of a tensor-core product must vary with exactly one of the tile's M and N axes (and with K)".into());
        };
        let (a, b) = if moves(a.index.as_ref().unwrap_or(&Val::Int(0)), ml) {
            (a, b)
        } else {
            (b, a)
        };
        if ml.extent != Some(target::WGMMA_M) {
            return bad(format!(
                "its Mma M axis `{}` has {} rows; a wgmma tile has M = {}: split M by {} and make the inner part Mma",
                ml.var,
                ml.extent.map_or("a symbolic number of".into(), |e| e.to_string()),
                target::WGMMA_M,
                target::WGMMA_M
            ));
        }
        if kl.extent != Some(target::WGMMA_K) {
            return bad(format!(
                "its Mma K axis `{}` has {} elements; a wgmma on 16-bit inputs has K = {}: split K by {} and make the inner part Mma",
                kl.var,
                kl.extent.map_or("a symbolic number of".into(), |e| e.to_string()),
                target::WGMMA_K,
                target::WGMMA_K
            ));
        }
        let n_extent = match nl.extent {
            Some(n) if target::wgmma_n_valid(n) => n,
            other => {
                return bad(format!(
                    "its Mma N axis `{}` has {} columns; a wgmma tile has N a multiple of 8 from 8 to 256",
                    nl.var,
                    other.map_or("a symbolic number of".into(), |e| e.to_string())
                ))
            }
        };
        // The accumulator: N consecutive, rows N apart (the fragment's tile inside the array).
        if stride(&acc_index, &nl.var) != Some(1) || stride(&acc_index, &ml.var) != Some(n_extent) {
            return bad("internal: the accumulator is not laid out as its M x N tile".into());
        }
        let elem = xt.size_bytes() as i64;
        let bad_op = |m: String| -> Result<MmaOperand, Diagnostic> {
            Err(self.err(cx, expr, format!("`{}`: {m}", sum.name)))
        };
        let desc = |o: &Access, row: &TileLoop| -> Result<MmaOperand, Diagnostic> {
            let buf = &k.buffers[o.buffer];
            let idx = o.index.clone().unwrap_or(Val::Int(0));
            let sw = cx.box_swizzle(o.buffer).unwrap_or(0);
            if sw == 0 {
                return bad_op(format!(
                    "operand `{}` is not swizzled; wgmma reads shared memory in 8 x 16-byte core matrices, which a TMA box gives with swizzle=128 (or 64, 32) on the cache",
                    buf.name
                ));
            }
            let span_elems = sw as i64 / elem;
            let (sr, sk) = (stride(&idx, &row.var), stride(&idx, &kl.var));
            let tile = Access {
                buffer: o.buffer,
                index: Some(zero(&idx, &[&ml.var, &nl.var, &kl.var])),
            };
            match (sr, sk) {
                // K-major: K contiguous, one swizzle span per row; SBO = 8 rows.
                (Some(r), Some(1)) if r == span_elems => Ok(MmaOperand {
                    tile,
                    desc_bits: target::descriptor_bits(16, 8 * sw as i64, sw)
                        .expect("a valid swizzle"),
                    transposed: false,
                    swizzle: sw,
                }),
                // MN-major: the row axis contiguous within one swizzle span, K by rows.
                (Some(1), Some(kr)) if kr == span_elems => {
                    let rows = if row.key == ml.key {
                        target::WGMMA_M
                    } else {
                        n_extent
                    };
                    if rows > span_elems {
                        return bad_op(format!(
                            "operand `{}` is MN-major (its {} axis is contiguous) with {rows} elements along it, more than one {sw}-byte swizzle span ({span_elems}); a box row holds one span, so keep that axis at most {span_elems} or store the operand K-major",
                            buf.name,
                            if row.key == ml.key { "M" } else { "N" }
                        ));
                    }
                    Ok(MmaOperand {
                        tile,
                        // One swizzle atom along M or N, so LBO (the step to the next atom)
                        // is unused; SBO steps 8 rows of K.
                        desc_bits: target::descriptor_bits(8 * sw as i64, 8 * sw as i64, sw)
                        .expect("a valid swizzle"),
                        transposed: true,
                        swizzle: sw,
                    })
                }
                _ => bad_op(format!(
                    "operand `{}` is laid out with {} elements per step of {} and {} per step of K in shared memory; a wgmma operand is K-major (K contiguous, rows of one {sw}-byte swizzle span, i.e. {span_elems} elements) or MN-major (M or N contiguous, K rows of {span_elems})",
                    buf.name,
                    sr.map_or("varying".into(), |s| s.to_string()),
                    if row.key == ml.key { "M" } else { "N" },
                    sk.map_or("varying".into(), |s| s.to_string()),
                )),
            }
        };
        let a_op = desc(&a, ml)?;
        let b_op = desc(&b, nl)?;
        Ok(Product {
            expr,
            m: ml.clone(),
            n: nl.clone(),
            n_extent,
            acc,
            a: a_op,
            b: b_op,
            input: xt,
        })
    }

    fn block(
        &mut self,
        cx: &mut Ctx,
        k: &mut Kernel,
        body: Vec<Stmt>,
    ) -> Result<Vec<Stmt>, Diagnostic> {
        let mut out = Vec::new();
        for s in body {
            match s {
                Stmt::Loop(l) if l.parallel == ParallelType::Mma => {
                    out.extend(self.nest(cx, k, l)?);
                }
                Stmt::Loop(mut l) => {
                    l.body = self.block(cx, k, l.body)?;
                    out.push(Stmt::Loop(l));
                }
                Stmt::If { cond, then, els } => {
                    let then = self.block(cx, k, then)?;
                    let els = self.block(cx, k, els)?;
                    out.push(Stmt::If { cond, then, els });
                }
                Stmt::WarpRoles {
                    is_producer,
                    producer,
                    consumer,
                    registers,
                    consumer_threads,
                } => {
                    let producer = self.block(cx, k, producer)?;
                    let consumer = self.block(cx, k, consumer)?;
                    out.push(Stmt::WarpRoles {
                        is_producer,
                        producer,
                        consumer,
                        registers,
                        consumer_threads,
                    });
                }
                Stmt::Compute(c) => {
                    let mut touches = self.fragments.contains(&c.out.buffer);
                    c.value
                        .for_each_read(&mut |a| touches |= self.fragments.contains(&a.buffer));
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
                    out.push(Stmt::Compute(c));
                }
                other => out.push(other),
            }
        }
        Ok(out)
    }

    fn nest(&mut self, cx: &mut Ctx, k: &mut Kernel, l: Loop) -> Result<Vec<Stmt>, Diagnostic> {
        let (loops, body) = chain(&l);
        match loops.len() {
            3 => {
                let p = self.product(cx, k, &loops, body)?;
                let started = match self.started.get(&p.acc.buffer) {
                    Some(&b) => b,
                    None => {
                        return Err(self.err(
                            cx,
                            p.expr,
                            "internal: the accumulator's initialisation was not found before its first product".into(),
                        ))
                    }
                };
                let flag = Access {
                    buffer: started,
                    index: Some(Val::Int(0)),
                };
                let acc = Access {
                    buffer: p.acc.buffer,
                    index: Some(fragment_base(
                        p.acc.index.as_ref(),
                        &p.m.var,
                        &p.n.var,
                        p.n_extent,
                    )),
                };
                Ok(vec![
                    Stmt::WgmmaFence,
                    Stmt::Wgmma(Wgmma {
                        expr: p.expr,
                        acc,
                        n: p.n_extent,
                        a: p.a,
                        b: p.b,
                        input: p.input,
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
            2 => {
                let f = cx.fusion;
                let expr = first_expr(body);
                let name = expr
                    .map(|e| f.tensors[f.exprs[e].output].name.clone())
                    .unwrap_or_default();
                let span = expr.and_then(|e| f.tensors[f.exprs[e].output].span);
                // The tile's M and N loops, or M and an inner part of N (a column slice of the
                // accumulator, e.g. one box of a TMA-stored epilogue).
                let n_part = |key: LoopKey, t: &Tile| -> Option<i64> {
                    if key == t.n {
                        return Some(t.n_extent);
                    }
                    match cx.keys.nodes[key] {
                        super::KeyNode::Split {
                            parent,
                            factor,
                            is_outer: false,
                            ..
                        } if parent == t.n && factor % 8 == 0 && t.n_extent % factor == 0 => {
                            Some(factor)
                        }
                        _ => None,
                    }
                };
                let found = self.tiles.iter().find_map(|t| {
                    if loops[0].key == t.m {
                        n_part(loops[1].key, t).map(|w| (t.clone(), 0, 1, w))
                    } else if loops[1].key == t.m {
                        n_part(loops[0].key, t).map(|w| (t.clone(), 1, 0, w))
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
                        c.role == ComputeRole::ReductionInit
                            && self.accumulators.contains(&c.out.buffer)
                    });
                // A copy of an accumulator into the sum's own fragment (the reduction's final
                // write): the sum is the accumulator, so the copy and its registers go.
                let copies = !cs.is_empty()
                    && cs.iter().all(|c| {
                        c.role == ComputeRole::ReductionWrite
                            && self.fragments.contains(&c.out.buffer)
                            && matches!(&c.value, Data::Read(a) if self.accumulators.contains(&a.buffer))
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
                    let mut out = Vec::new();
                    for c in cs {
                        let flag = k.buffers.len();
                        k.buffers.push(Buffer {
                            name: cx
                                .fresh_name(&format!("{}_started", k.buffers[c.out.buffer].name)),
                            dtype: DType::I32,
                            memory: MemoryType::Local,
                            tensor: None,
                            size: Some(Val::Int(1)),
                            smem_offset: None,
                            global_shape: Vec::new(),
                            is_input: false,
                        });
                        self.started.insert(c.out.buffer, flag);
                        out.push(Stmt::Alloc(flag));
                        out.push(Stmt::Compute(Compute {
                            expr: c.expr,
                            out: Access {
                                buffer: flag,
                                index: Some(Val::Int(0)),
                            },
                            value: Data::Literal(0.0, DType::I32),
                            role: ComputeRole::Normal,
                            vector: None,
                        }));
                    }
                    return Ok(out);
                }
                let reg = cx.fresh_name("r");
                let tid = Val::Hw(ParallelType::TIDx);
                let i = Val::Var(reg.clone());
                let warp = Val::div(tid.clone(), Val::Int(32));
                let lane = Val::rem(tid, Val::Int(32));
                // row = 16 warp + lane / 4 + 8 ((i / 2) % 2), col = 8 (i / 4) + 2 (lane % 4) + i % 2
                let row = Val::add(
                    Val::add(
                        Val::mul(Val::Int(16), warp),
                        Val::div(lane.clone(), Val::Int(4)),
                    ),
                    Val::mul(
                        Val::Int(8),
                        Val::rem(Val::div(i.clone(), Val::Int(2)), Val::Int(2)),
                    ),
                );
                let col = Val::add(
                    Val::add(
                        Val::mul(Val::Int(8), Val::div(i.clone(), Val::Int(4))),
                        Val::mul(Val::Int(2), Val::rem(lane, Val::Int(4))),
                    ),
                    Val::rem(i.clone(), Val::Int(2)),
                );
                let mut body = body;
                let fragments = self.fragments.clone();
                let mut bad = None;
                for s in &mut body {
                    fragment_accesses(s, &fragments, &mv, &nv, &i, tile.n_extent, &mut bad);
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
                Ok(vec![Stmt::Loop(Loop {
                    key: loops[ni].key,
                    var: reg,
                    extent: Val::Int(target::wgmma_accumulators(width)),
                    parallel: ParallelType::Unroll,
                    body,
                })])
            }
            n => {
                let f = cx.fusion;
                let expr = first_expr(body);
                Err(Diagnostic::new(
                    format!(
                        "`{}` has {n} Mma axes in a row; a tensor-core product has three (M, N, K: the instruction tile) and the tensors that read its accumulator two (M, N)",
                        expr.map(|e| f.tensors[f.exprs[e].output].name.clone()).unwrap_or_default()
                    ),
                    expr.and_then(|e| f.tensors[f.exprs[e].output].span),
                ))
            }
        }
    }
}

/// What [`Lower::product`] found.
struct Product {
    expr: usize,
    m: TileLoop,
    n: TileLoop,
    n_extent: i64,
    acc: Access,
    a: MmaOperand,
    b: MmaOperand,
    input: DType,
}

/// Drops the allocations of aliased fragments and reads the accumulators they copied instead.
fn unalias(body: &mut Vec<Stmt>, aliases: &HashMap<BufferId, BufferId>) {
    body.retain(|s| !matches!(s, Stmt::Alloc(b) if aliases.contains_key(b)));
    for s in body.iter_mut() {
        match s {
            Stmt::Loop(l) => unalias(&mut l.body, aliases),
            Stmt::If { then, els, .. } => {
                unalias(then, aliases);
                unalias(els, aliases);
            }
            Stmt::WarpRoles {
                producer, consumer, ..
            } => {
                unalias(producer, aliases);
                unalias(consumer, aliases);
            }
            Stmt::Compute(c) => {
                let mut rename = |a: &mut Access| {
                    if let Some(&to) = aliases.get(&a.buffer) {
                        a.buffer = to;
                    }
                };
                rename(&mut c.out);
                c.value.for_each_read_mut(&mut rename);
            }
            _ => {}
        }
    }
}

/// The fragment register of an accumulator element at M = N = 0 of a nest, whose index in the
/// accumulator array is `tile * 64 N + column` (`N` = `width`, the tile's columns): tiles are
/// N / 2 registers per thread apart, and column `c` (a multiple of 8) starts at register
/// `c / 8 * 4` of its tile (`target::fragment_row_col`).
fn fragment_base(idx: Option<&Val>, m: &str, n: &str, width: i64) -> Val {
    let base = zero(idx.unwrap_or(&Val::Int(0)), &[m, n]);
    let tile_elems = Val::Int(target::WGMMA_M * width);
    let reg = Val::add(
        Val::mul(
            Val::div(base.clone(), tile_elems.clone()),
            Val::Int(target::wgmma_accumulators(width)),
        ),
        Val::mul(
            Val::div(Val::rem(base, tile_elems), Val::Int(8)),
            Val::Int(4),
        ),
    );
    super::simplify::simplify(&reg, &HashMap::new())
}

/// Indexes every accumulator access of `s` by register `i` (at its tile's base); records a
/// buffer whose index is not its M x N tile in `bad`.
fn fragment_accesses(
    s: &mut Stmt,
    fragments: &HashSet<BufferId>,
    m: &str,
    n: &str,
    i: &Val,
    width: i64,
    bad: &mut Option<BufferId>,
) {
    let mut fix = |a: &mut Access| {
        if !fragments.contains(&a.buffer) {
            return;
        }
        let idx = a.index.clone().unwrap_or(Val::Int(0));
        if stride(&idx, n) != Some(1) || stride(&idx, m) != Some(width) {
            *bad = Some(a.buffer);
        }
        a.index = Some(Val::add(fragment_base(Some(&idx), m, n, width), i.clone()));
    };
    match s {
        Stmt::Compute(c) => {
            fix(&mut c.out);
            c.value.for_each_read_mut(&mut fix);
        }
        Stmt::Loop(l) => {
            for s in &mut l.body {
                fragment_accesses(s, fragments, m, n, i, width, bad);
            }
        }
        Stmt::If { then, els, .. } => {
            for s in then.iter_mut().chain(els.iter_mut()) {
                fragment_accesses(s, fragments, m, n, i, width, bad);
            }
        }
        _ => {}
    }
}

fn first_expr(body: &[Stmt]) -> Option<usize> {
    body.iter().find_map(|s| match s {
        Stmt::Compute(c) => Some(c.expr),
        Stmt::If { then, els, .. } => first_expr(then).or_else(|| first_expr(els)),
        Stmt::Loop(l) => first_expr(&l.body),
        _ => None,
    })
}

/// One group per unrolled loop of wgmmas: an unrolled loop (or a thread or block index
/// binding) whose body is `fence, wgmmas, commit, wait` becomes `fence, loop { wgmmas },
/// commit, wait`, innermost loops first.
fn batch(body: Vec<Stmt>) -> Vec<Stmt> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::Loop(mut l) => {
                l.body = batch(l.body);
                let n = l.body.len();
                let grouped = n >= 4
                    && (l.parallel == ParallelType::Unroll || l.parallel.is_hw())
                    && l.body[0] == Stmt::WgmmaFence
                    && l.body[n - 2] == Stmt::WgmmaCommit
                    && l.body[n - 1] == Stmt::WgmmaWait(0)
                    && l.body[1..n - 2].iter().all(|s| {
                        !matches!(s, Stmt::WgmmaFence | Stmt::WgmmaCommit | Stmt::WgmmaWait(_))
                    });
                if grouped {
                    let inner: Vec<Stmt> = l.body.drain(1..n - 2).collect();
                    l.body = inner;
                    out.push(Stmt::WgmmaFence);
                    out.push(Stmt::Loop(l));
                    out.push(Stmt::WgmmaCommit);
                    out.push(Stmt::WgmmaWait(0));
                } else {
                    out.push(Stmt::Loop(l));
                }
            }
            Stmt::If { cond, then, els } => out.push(Stmt::If {
                cond,
                then: batch(then),
                els: batch(els),
            }),
            Stmt::WarpRoles {
                is_producer,
                producer,
                consumer,
                registers,
                consumer_threads,
            } => out.push(Stmt::WarpRoles {
                is_producer,
                producer: batch(producer),
                consumer: batch(consumer),
                registers,
                consumer_threads,
            }),
            other => out.push(other),
        }
    }
    out
}
