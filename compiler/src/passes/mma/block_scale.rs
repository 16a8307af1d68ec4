//! Block-scaled products: two-level accumulation of a sum whose product has scales constant
//! along blocks of K (DeepSeek-V3's FP8 recipe: `sa[m, k / 128]` for the activations,
//! `sb[n / 128, k / 128]` for the weights, written with `expand_blocks`).
//!
//! Takes every product tile whose update multiplies, besides its two operands, factors read from
//! global memory (the scales; `product.rs`). Legality: `sum_k x_k y_k c_k = sum_B c_B sum_{k in
//! B} x_k y_k` when `c_k = c_B` is constant on each block `B` of K. The blocks are the
//! iterations of a serial loop over K (the block loop, e.g. the pipeline's k loop): the scales
//! must be constant along every K loop inside it (the instruction's K and the unrolled steps
//! of the K tile). Then, per block, the tensor cores sum the tile into a fresh block
//! accumulator (`<acc>_block`, `scale-d` off on its first wgmma of each block), and after the
//! block's wgmmas have completed (`wait_group 0`) each thread adds its registers, scaled at
//! their rows and columns, into the sum's accumulator: `acc[i] += block[i] * (sa[row] *
//! sb[col])` on the CUDA cores (the promotion: one FFMA a register). The tensor cores' FP8 sums (held with fewer bits than
//! f32) then never run past one block of K, which keeps the accuracy at K = 16k.
//!
//! Guarantees: the block accumulator has the sum's accumulator's size and fragment layout;
//! the sum's accumulator is zero-filled (it is no wgmma's output), promoted at the end of
//! every iteration of the block loop with the K indices inside the block at 0 (the block's
//! first column of the scales). A scale the same along the tile's M or N loop is read at the
//! tile's first row or column (a 128 x 128 weight block's scale: one load a block, not one a
//! register). Scale reads of global tensors are clamped into them and the promotion has no
//! bounds guard (ptxas then loads each scale once, unpredicated, at the block's start); it writes
//! registers of a ragged tile's rows and columns past M and N too, values of no element that
//! every reader skips under its own guard. Other scales (their loads and the update) keep the
//! update's guard. Errors (at the sum, naming the scale as written): a scale that varies
//! inside one instruction's K or inside the schedule's K tile (an unrolled K loop), with the
//! block and the tile; scales constant along all of K (they belong after the sum); a product
//! tile in no serial K loop.
//! Where an empty mbarrier frees the stage and the block accumulator fits twice beside the
//! sum's (in the registers ptxas gives a thread), the promotion overlaps the next block's
//! wgmmas ([`overlap_promotions`]): two halves, block k's wgmmas into half k % 2, `wait_group
//! 1` before block k - 1's promotion, four blocks per iteration of the block loop (the fourth
//! promoted after `wait_group 0`); else the promotion waits for its block (`wait_group 0`).
//!
//! The scales are loaded ahead of the promotion: at the start of each block (before its stage
//! is waited for and its wgmmas issued) into scale registers (`<acc>_block_<scale>`, one array
//! a scale, in `Lower::scales_ahead`, two halves where the block accumulator has two), which
//! the promotion reads after the block's `wait_group`. Why: `wgmma.wait_group` and the
//! mbarrier waits are `asm volatile` with a memory clobber, so a scale load written after them
//! cannot be issued before them, and each promotion stalled on global memory (the long
//! scoreboard stalls of step 21 at the decode shape, `docs/fp8.md`). In registers rather than
//! staged in shared memory by the producer: a thread needs three values a block (its two rows
//! of `sa`, its tile's `sb`), which ptxas keeps in three registers (it merges the array's
//! copies of one load), no shared memory, TMA box or mbarrier is added, and a load issued a
//! whole stage wait and wgmma group before its use is as hidden as a staged copy; a staged
//! copy would also need the scale caches outside the Mma nest, which `loop_nest` refuses
//! (`docs/fp8.md`, "Scales' layout"). A block's scales are loaded only under the condition
//! that issues its wgmmas (`k < blocks` in the overlapped loop), each read clamped into its
//! tensor as the promotion's was: no load reaches past the scales of the last block.
//! Emits: the block accumulators and their flags (in `Lower::promoted` and `Lower::started`),
//! the scales' loads (a nest of two `Mma` loops) and the flags' reset at the start of each
//! block and the promotion nest at its end (both lowered by `fragment_nest` like an
//! epilogue); after `batch`, the overlapped block loops (`Let` of the block index, an empty
//! commit group past the last block).

use super::product::Product;
#[allow(unused_imports)]
use super::*;
use crate::fusion::{Op, Operand};
use crate::kir::{visit_stmt_mut, VisitorMut};
use crate::passes::context::KeyNode;
use crate::passes::probe::eval_at;

/// A block loop whose promotions overlap the next block's wgmmas: its block accumulator holds
/// two halves, the even blocks' and the odd blocks'.
pub(super) struct Overlap {
    /// The block loop.
    key: LoopKey,
    block: BufferId,
    flags: BufferId,
    /// Registers and `scale-d` flags of one half.
    registers: i64,
    flag_count: i64,
    /// The block's scale registers (as many as the block accumulator's, in two halves too).
    scales: Vec<BufferId>,
}

/// A loop around a product tile, as the analysis needs it.
struct LoopFrame {
    key: LoopKey,
    var: String,
    extent: Val,
    parallel: ParallelType,
}

/// One block-scaled product tile and where its promotion goes.
struct Site {
    /// The depth of the block loop (its iterations are the blocks) among the tile's loops.
    depth: usize,
    /// The sum's accumulator, promoted into.
    acc: BufferId,
    /// Its block accumulator, which the wgmmas write.
    block: BufferId,
    /// The block's start: its scales loaded into registers, its flags reset; and the promotion
    /// (at its end).
    start: Vec<Stmt>,
    promotion: Stmt,
}

/// The root loop key of `key`, following splits (None through a merge or a tile loop).
fn root(cx: &Ctx, mut key: LoopKey) -> Option<LoopKey> {
    loop {
        match &cx.keys.nodes[key] {
            KeyNode::Root(_) => return Some(key),
            KeyNode::Split { parent, .. } => key = *parent,
            KeyNode::Merge { .. } | KeyNode::Tiles(_) => return None,
        }
    }
}

/// Whether every index that `scales` read is the same for every value of the loops `vars`
/// (variable, extent) as at 0, on several probes of the other variables.
fn constant_along(scales: &[Data], vars: &[(String, i64)]) -> bool {
    let mut indices = Vec::new();
    for s in scales {
        s.for_each_read(&mut |a| indices.push(a.index.clone().unwrap_or(Val::Int(0))));
    }
    let at = |idx: &Val, values: &[i64], seed: u64| {
        let point: Vec<(&str, i64)> = vars
            .iter()
            .zip(values)
            .map(|((var, _), &x)| (var.as_str(), x))
            .collect();
        eval_at(idx, &point, seed)
    };
    // Each loop at its first, second and last value, the others at 0, and all at their last.
    let mut probes = vec![vec![0; vars.len()]];
    for (j, (_, extent)) in vars.iter().enumerate() {
        for x in [1, extent - 1] {
            let mut p = vec![0; vars.len()];
            p[j] = x;
            probes.push(p);
        }
    }
    probes.push(vars.iter().map(|(_, e)| e - 1).collect());
    indices.iter().all(|idx| {
        (0..4u64).all(|seed| {
            let first = at(idx, &probes[0], seed);
            first.is_some() && probes.iter().all(|p| at(idx, p, seed) == first)
        })
    })
}

/// `v` with every part that does not mention `var`, below its sums and products by constants,
/// made one opaque variable (named by its text), which probes sample as a non-negative value:
/// a tile's first column `X` in `(X * 128 + j) / 128` is an index, so non-negative, though an
/// expression of it (a persistent raster's `min(32 - ..., 16)`) may be negative at the values
/// probes give its own leaves.
fn opaque_except(v: &Val, var: &str) -> Val {
    let by_constant = |a: &Val, b: &Val| matches!(a, Val::Int(_)) || matches!(b, Val::Int(_));
    match (v, v.operands()) {
        (Val::Int(_), _) => v.clone(),
        (Val::Add(..), Some((a, b))) => {
            v.with_operands(opaque_except(a, var), opaque_except(b, var))
        }
        (Val::Mul(..), Some((a, b))) if by_constant(a, b) => {
            v.with_operands(opaque_except(a, var), opaque_except(b, var))
        }
        _ if !v.mentions(var) => Val::Var(v.text()),
        (_, Some((a, b))) => v.with_operands(opaque_except(a, var), opaque_except(b, var)),
        (_, None) => v.clone(),
    }
}

/// The fusion input a scale reads (the first), and the `expand_blocks` over it, for messages:
/// "`sa` (expand_blocks(sa, block=[1, 128]))".
fn scale_as_written(cx: &Ctx, k: &Kernel, scales: &[Data]) -> String {
    let f = cx.fusion;
    let mut read = None;
    for s in scales {
        s.for_each_read(&mut |a| {
            read.get_or_insert(a.buffer);
        });
    }
    let Some(t) = read.and_then(|b| k.buffers[b].tensor) else {
        return "a scale".into();
    };
    let name = &f.tensors[t].name;
    let view = f
        .exprs
        .iter()
        .find_map(|e| match (&e.op, e.inputs.first()) {
            (Op::ExpandBlocks { block }, Some(Operand::Tensor(x))) if *x == t => {
                Some(block.clone())
            }
            _ => None,
        });
    match view {
        Some(block) => format!("`{name}` (expand_blocks({name}, block={block:?}))"),
        None => format!("`{name}`"),
    }
}

/// The walk of [`Lower::promote_block_scales`]: finds the sites inside the loops `stack`, and
/// on leaving a loop inserts the sites whose block loop it is into it.
struct BlockScales<'w, 'p, 'c> {
    lower: &'w mut Lower<'p>,
    cx: &'w mut Ctx<'c>,
    k: &'w mut Kernel,
    /// The loops around the statement walked, outermost first.
    stack: Vec<LoopFrame>,
    /// The sites found whose block loop has not been left yet, in program order.
    sites: Vec<Site>,
}

impl VisitorMut for BlockScales<'_, '_, '_> {
    type Error = Diagnostic;

    fn stmt(&mut self, s: &mut Stmt, _at: usize) -> Result<Flow, Diagnostic> {
        match s {
            Stmt::Loop(l) if l.parallel == ParallelType::Mma => {
                let (loops, tile_body) = chain(l);
                if loops.len() == 3 {
                    let site = self
                        .lower
                        .site(self.cx, self.k, &loops, tile_body, &self.stack)?;
                    self.sites.extend(site);
                }
                Ok(Flow::Skip)
            }
            _ => Ok(Flow::Descend),
        }
    }

    fn enter(&mut self, s: &Stmt, _body: usize) -> Result<Flow, Diagnostic> {
        if let Stmt::Loop(l) = s {
            self.stack.push(LoopFrame {
                key: l.key,
                var: l.var.clone(),
                extent: l.extent.clone(),
                parallel: l.parallel,
            });
        }
        Ok(Flow::Descend)
    }

    fn leave(&mut self, s: &mut Stmt, _body: usize) -> Result<(), Diagnostic> {
        let Stmt::Loop(l) = s else {
            return Ok(());
        };
        self.stack.pop();
        let depth = self.stack.len();
        // Only sites inside this loop can have it as their block loop (those found beside it
        // have theirs further out).
        let (here, others): (Vec<Site>, Vec<Site>) = std::mem::take(&mut self.sites)
            .into_iter()
            .partition(|site| site.depth == depth);
        self.sites = others;
        let mut promoted: Vec<BufferId> = Vec::new();
        for site in here {
            // (Several nests of one accumulator in a block promote once.)
            if promoted.contains(&site.acc) {
                continue;
            }
            promoted.push(site.acc);
            // The stage freed by an empty mbarrier (warp specialization): the next block's
            // wgmmas may run while this one's are promoted. (A block barrier would not wait
            // for a group in flight.)
            if matches!(l.body.last(), Some(Stmt::MbarArrive { .. })) {
                self.lower.overlap(self.k, l.key, site.block);
            }
            l.body.splice(0..0, site.start);
            l.body.push(site.promotion);
        }
        Ok(())
    }
}

impl Lower<'_> {
    /// Finds the block-scaled products of `body`, makes their block accumulators and inserts
    /// their flags' resets and promotions into their block loops (before the tiles are
    /// lowered).
    pub(super) fn promote_block_scales(
        &mut self,
        cx: &mut Ctx,
        k: &mut Kernel,
        body: &mut [Stmt],
    ) -> Result<(), Diagnostic> {
        let mut walk = BlockScales {
            lower: self,
            cx,
            k,
            stack: Vec::new(),
            sites: Vec::new(),
        };
        for (at, s) in body.iter_mut().enumerate() {
            visit_stmt_mut(s, at, &mut walk)?;
        }
        debug_assert!(walk.sites.is_empty(), "every site's block loop encloses it");
        Ok(())
    }

    /// The promotion of one product tile, when it has scales.
    fn site(
        &mut self,
        cx: &mut Ctx,
        k: &mut Kernel,
        loops: &[TileLoop],
        body: &[Stmt],
        stack: &[LoopFrame],
    ) -> Result<Option<Site>, Diagnostic> {
        let p = self.product(cx, k, loops, body)?;
        if p.scales.is_empty() {
            return Ok(None);
        }
        let f = cx.fusion;
        let sum = f.tensors[f.exprs[p.expr].output].name.clone();
        let scale = scale_as_written(cx, k, &p.scales);
        let instruction_k = p.k.extent.unwrap_or(0);
        let mut inside = vec![(p.k.var.clone(), instruction_k)];
        if !constant_along(&p.scales, &inside) {
            return Err(self.err(cx, p.expr, format!(
                "`{sum}`: the scale {scale} varies along K inside one wgmma (K = {instruction_k}); a scale inside a tensor-core product must be constant along blocks of K at least as wide as the schedule's K tile (a block scale: `expand_blocks(s, block=[..., 128], shape=[..., K])` with K split by 128), and is then applied to each block's sum"
            )));
        }
        let depth = self.block_loop(cx, &p, stack, &mut inside, &sum, &scale)?;
        let blk = self.block_accumulator(cx, k, p.acc.buffer, p.expr, p.n_extent)?;
        let flag = self.started[&blk];
        let Some(Val::Int(flags)) = k.buffers[flag].size else {
            unreachable!("block_accumulator sizes the flags")
        };
        let reset: Vec<Stmt> = (0..flags)
            .map(|j| {
                Stmt::Compute(Compute {
                    expr: p.expr,
                    out: Access {
                        buffer: flag,
                        index: Some(Val::Int(j)),
                    },
                    value: Data::Literal(0.0, DType::I32),
                    role: ComputeRole::Normal,
                    vector: None,
                })
            })
            .collect();
        let names: Vec<String> = p
            .scales
            .iter()
            .map(|scale| {
                let mut read = None;
                scale.for_each_read(&mut |a| {
                    read.get_or_insert(a.buffer);
                });
                read.map_or("scale".into(), |b| k.buffers[b].name.clone())
            })
            .collect();
        let registers = self.scale_registers(cx, k, blk, &names);
        let (loads, guarded) = promotion_update(k, &p, blk, &registers, body, &inside);
        let mma_loop = |l: &TileLoop, body: Vec<Stmt>| {
            Stmt::Loop(Loop {
                key: l.key,
                var: l.var.clone(),
                extent: Val::Int(l.extent.unwrap_or(0)),
                parallel: ParallelType::Mma,
                digits: Vec::new(),
                body,
            })
        };
        // The loops between the block loop and the tile that are not over K (e.g. a warp
        // group's rows, TIDy) hold the scales' loads and the promotion as they hold the tile.
        let in_tile = |inner: Vec<Stmt>| {
            stack[depth + 1..]
                .iter()
                .rev()
                .filter(|l| !inside.iter().any(|(var, _)| *var == l.var))
                .fold(mma_loop(&p.m, vec![mma_loop(&p.n, inner)]), |inner, l| {
                    Stmt::Loop(Loop {
                        key: l.key,
                        var: l.var.clone(),
                        extent: l.extent.clone(),
                        parallel: l.parallel,
                        digits: Vec::new(),
                        body: vec![inner],
                    })
                })
        };
        let mut start = vec![in_tile(loads)];
        start.extend(reset);
        Ok(Some(Site {
            depth,
            acc: p.acc.buffer,
            block: blk,
            start,
            promotion: in_tile(vec![guarded]),
        }))
    }

    /// The registers that hold block accumulator `blk`'s scales (one a tensor of `names`) from
    /// the block's start to its promotion (made on first use): one array a scale, as many
    /// registers as the block accumulator (each register's scale at its row and column). ptxas
    /// keeps one register per distinct load (a thread's two rows of `sa`, one `sb`).
    fn scale_registers(
        &mut self,
        cx: &mut Ctx,
        k: &mut Kernel,
        blk: BufferId,
        names: &[String],
    ) -> Vec<BufferId> {
        let count = names.len();
        let made = self.scales_ahead.entry(blk).or_default().len();
        for tensor in &names[made.min(count)..] {
            let name = cx.fresh_name(&format!("{}_{tensor}", k.buffers[blk].name));
            k.buffers.push(Buffer {
                name,
                dtype: DType::F32,
                memory: MemoryType::Local,
                tensor: None,
                size: k.buffers[blk].size.clone(),
                smem_offset: None,
                global_shape: Vec::new(),
                is_input: false,
                l2: crate::fusion::L2Policy::Normal,
            });
            let b = BufferId::new(k.buffers.len() - 1);
            self.fragments.insert(b);
            self.scales_ahead.entry(blk).or_default().push(b);
        }
        self.scales_ahead[&blk][..count].to_vec()
    }

    /// The block loop of product `p`'s scales (its depth in `stack`): the innermost serial
    /// loop over K the scales vary with. `inside` gains the loops over K inside it (the K
    /// tile's unrolled steps), along which the scales are constant.
    fn block_loop(
        &self,
        cx: &Ctx,
        p: &Product,
        stack: &[LoopFrame],
        inside: &mut Vec<(String, i64)>,
        sum: &str,
        scale: &str,
    ) -> Result<usize, Diagnostic> {
        // The loops over K around the tile, innermost first: the K tile's unrolled steps are
        // inside the block, the first loop the scales vary with is the block loop.
        let k_root = root(cx, p.k.key);
        let mut block_loop = None;
        for (depth, l) in stack.iter().enumerate().rev() {
            if root(cx, l.key).is_none() || root(cx, l.key) != k_root {
                continue;
            }
            let Val::Int(extent) = l.extent else {
                block_loop = Some(depth);
                break;
            };
            inside.push((l.var.clone(), extent));
            if !constant_along(&p.scales, inside) {
                inside.pop();
                block_loop = Some(depth);
                break;
            }
        }
        let Some(depth) = block_loop else {
            return Err(self.err(cx, p.expr, format!(
                "`{sum}`: the scale {scale} is constant along K in this product's tile and is in no serial loop over K: a scale constant along all of K belongs after the sum (`s = sum(cast(a, f32) * cast(b, f32), axis=k)`, then `s * scale`)"
            )));
        };
        let block_loop = &stack[depth];
        if block_loop.parallel != ParallelType::Serial {
            let tile: i64 = inside.iter().map(|(_, e)| e).product::<i64>()
                * match block_loop.extent {
                    Val::Int(e) => e,
                    _ => 1,
                };
            return Err(self.err(cx, p.expr, format!(
                "`{sum}`: the scale {scale} changes inside the schedule's K tile ({tile} elements of K, loop `{}` is {}): its blocks along K must be at least as wide as the K tile, each tile inside one block, so that the tensor cores sum a whole tile before it is scaled; split K by the block size (or a divisor of it) for the K tile",
                block_loop.var,
                block_loop.parallel.name()
            )));
        }
        Ok(depth)
    }

    /// Gives block accumulator `blk` of block loop `key` a second half, so that each block's
    /// wgmmas write the half the previous block's promotion does not read, when the three
    /// arrays (the sum's accumulator and two halves) fit the consumers' registers; else the
    /// promotion waits for its block's wgmmas (`wait_group 0`).
    fn overlap(&mut self, k: &mut Kernel, key: LoopKey, blk: BufferId) {
        let size = |b: BufferId| match k.buffers[b].size {
            Some(Val::Int(n)) => n,
            _ => 0,
        };
        let flags = self.started[&blk];
        let (registers, flag_count) = (size(blk), size(flags));
        let held: HashSet<BufferId> = self
            .accumulators
            .iter()
            .chain(self.promoted.keys())
            .copied()
            .collect();
        let total: i64 = held.iter().map(|&b| size(b)).sum::<i64>() + registers;
        // ptxas allocates every thread the launch's share (`__launch_bounds__`), also after
        // `setmaxnreg.inc`: with more, the halves spill (ptxas -v on step 18's 64 x 128 per
        // warp group: 168 registers, 296 bytes of spill stores).
        let launch = launch_registers(k).map_or(target::MAX_REGISTERS_PER_THREAD, |(_, r)| r);
        let budget = register_budget(k).0.min(launch);
        if total + target::NON_ACCUMULATOR_REGISTERS > budget {
            return;
        }
        // (The scale registers are not counted: ptxas holds one register per distinct
        // scale of a thread, three for a 64-row warp group's tile, not one per accumulator.)
        let scales = self.scales_ahead.get(&blk).cloned().unwrap_or_default();
        for &b in [blk].iter().chain(&scales) {
            k.buffers[b].size = Some(Val::Int(2 * registers));
        }
        k.buffers[flags].size = Some(Val::Int(2 * flag_count));
        self.overlapped.push(Overlap {
            key,
            block: blk,
            flags,
            registers,
            flag_count,
            scales,
        });
    }

    /// The block accumulator of `acc` (made on first use) with its flags.
    fn block_accumulator(
        &mut self,
        cx: &mut Ctx,
        k: &mut Kernel,
        acc: BufferId,
        expr: ExprId,
        n_extent: i64,
    ) -> Result<BufferId, Diagnostic> {
        if let Some(&blk) = self.promoted.get(&acc) {
            return Ok(blk);
        }
        let Some(Val::Int(regs)) = k.buffers[acc].size else {
            return Err(self.err(
                cx,
                expr,
                format!(
                    "internal: the accumulator `{}` has no constant size",
                    k.buffers[acc].name
                ),
            ));
        };
        let base = k.buffers[acc].name.clone();
        let name = cx.fresh_name(&format!("{base}_block"));
        let flag_name = cx.fresh_name(&format!("{base}_block_started"));
        let mut buffer = |name: String, dtype: DType, size: i64| {
            k.buffers.push(Buffer {
                name,
                dtype,
                memory: MemoryType::Local,
                tensor: None,
                size: Some(Val::Int(size)),
                smem_offset: None,
                global_shape: Vec::new(),
                is_input: false,
                l2: crate::fusion::L2Policy::Normal,
            });
            BufferId::new(k.buffers.len() - 1)
        };
        let blk = buffer(name, DType::F32, regs);
        let per_tile = target::wgmma_accumulators(n_extent);
        let flag = buffer(flag_name, DType::I32, (regs / per_tile).max(1));
        self.promoted.insert(acc, blk);
        self.started.insert(blk, flag);
        self.fragments.insert(blk);
        self.accumulators.remove(&acc);
        self.accumulators.insert(blk);
        Ok(blk)
    }
}

/// `scale` with the index of every read clamped to its tensor's last element, when each read
/// is of a global tensor with no broadcast axis (None otherwise).
fn clamped_into_tensors(k: &Kernel, scale: &Data) -> Option<Data> {
    let mut scale = scale.clone();
    let mut all = true;
    scale.for_each_read_mut(&mut |a| {
        let shape = &k.buffers[a.buffer].global_shape;
        if shape.is_empty() || shape.iter().any(|(_, broadcast)| *broadcast) {
            all = false;
            return;
        }
        let elements = shape
            .iter()
            .map(|(e, _)| Val::from_size(e))
            .reduce(Val::mul)
            .expect("a non-empty shape");
        let index = a.index.take().unwrap_or(Val::Int(0));
        a.index = Some(Val::min(index, Val::sub(elements, Val::Int(1))));
    });
    all.then_some(scale)
}

/// The bounds guard of the tile's reduction update of `expr`.
fn update_guard(body: &[Stmt], expr: ExprId) -> Option<Val> {
    let mut found = None;
    crate::kir::walk(body, &mut |s| match s {
        Stmt::If { cond, then, .. } => {
            if let [Stmt::Compute(c)] = then.as_slice() {
                if c.expr == expr && c.role == ComputeRole::ReductionUpdate {
                    found = Some(cond.clone());
                }
            }
            Flow::Descend
        }
        _ => Flow::Descend,
    });
    found
}

/// Blocks per iteration of an overlapped block loop. ptxas (13.0) serializes every wgmma of a
/// kernel that reads, after `wait_group 1`, the accumulator of a group committed in the loop's
/// previous iteration (C7514: it does not follow groups across a back edge), so the groups
/// in flight stay inside one iteration: its last block's promotion waits (`wait_group 0`), the
/// others overlap the next block's wgmmas. Four: three promotions in four overlap.
const OVERLAP_UNROLL: i64 = 4;

/// Rewrites each overlapped block loop (after `batch`: its body ends `commit, wait_group 0,
/// release the stage, promote`) into iterations of [`OVERLAP_UNROLL`] blocks, block `j`'s
/// wgmmas into half `j % 2` of the block accumulator (`j` an unrolled loop, so every register
/// index is a constant):
///
/// ```text
/// for g in 0..ceilDiv(blocks, U):
///   for j in 0..U (unrolled):
///     k = U g + j
///     if k < blocks: block k's scales into half j % 2's scale registers; reset its flags;
///                    wait for the stage; wgmmas into half j % 2
///     commit                            (an empty group past the last block)
///     if 0 < j:
///       wait_group 1                    // block k - 1's group has completed
///       if k - 1 < blocks: release stage k - 1; promote half (j - 1) % 2 (block k - 1's
///                          scales, loaded in the previous step)
///   wait_group 0
///   if U g + U - 1 < blocks: release its stage; promote half (U - 1) % 2
/// ```
///
/// so the tensor cores run block k's wgmmas while block k - 1's partial sums are promoted.
/// Exact: each block's partial sums are promoted once, with its own scales, in block order;
/// a half is written again only by the block after next, whose wgmmas are issued after the
/// promotion that read it.
pub(super) fn overlap_promotions(
    cx: &mut Ctx,
    k: &mut Kernel,
    body: &mut Vec<Stmt>,
    overlaps: &[Overlap],
) {
    let mut done = vec![false; overlaps.len()];
    crate::kir::for_each_block_mut(body, &mut |block| {
        for s in std::mem::take(block) {
            let j = match &s {
                Stmt::Loop(l) => overlaps
                    .iter()
                    .position(|o| o.key == l.key && promotes_after_its_group(l, o.block)),
                _ => None,
            };
            match (s, j) {
                (Stmt::Loop(l), Some(j)) => {
                    block.extend(in_groups_of_blocks(cx, l, &overlaps[j]));
                    done[j] = true;
                }
                (s, _) => block.push(s),
            }
        }
    });
    // A block loop whose wgmmas did not become one group before the release (e.g. a K loop
    // inside the block that is not unrolled) keeps its promotion after `wait_group 0`, and
    // its block accumulator one half.
    for (o, _) in overlaps.iter().zip(&done).filter(|(_, d)| !**d) {
        for &b in [o.block].iter().chain(&o.scales) {
            k.buffers[b].size = Some(Val::Int(o.registers));
        }
        k.buffers[o.flags].size = Some(Val::Int(o.flag_count));
    }
}

/// Whether a loop's body ends `commit, wait_group 0, release the stage, promote` with the
/// promotion reading block accumulator `blk`.
fn promotes_after_its_group(l: &Loop, blk: BufferId) -> bool {
    let n = l.body.len();
    n >= 4
        && l.body[n - 4] == Stmt::WgmmaCommit
        && l.body[n - 3] == Stmt::WgmmaWait(0)
        && matches!(l.body[n - 2], Stmt::MbarArrive { .. })
        && reads(&l.body[n - 1], blk)
}

/// Whether a computation in `s` reads buffer `b`.
fn reads(s: &Stmt, b: BufferId) -> bool {
    crate::kir::any_stmt(std::slice::from_ref(s), &mut |s| {
        let mut found = false;
        if let Stmt::Compute(c) = s {
            c.value.for_each_read(&mut |a| found |= a.buffer == b);
        }
        found
    })
}

/// Adds `offset` to the index of every access to buffer `b` in `s` (computations and wgmmas).
fn offset_accesses(s: &mut Stmt, b: BufferId, offset: &Val) {
    let mut shift = |a: &mut Access| {
        if a.buffer == b {
            a.index = Some(Val::add(
                a.index.clone().unwrap_or(Val::Int(0)),
                offset.clone(),
            ));
        }
    };
    crate::kir::for_each_stmt_mut(std::slice::from_mut(s), &mut |s| {
        match s {
            Stmt::Compute(c) => {
                shift(&mut c.out);
                c.value.for_each_read_mut(&mut shift);
            }
            Stmt::Wgmma(w) => {
                shift(&mut w.acc);
                if let Some(flag) = &mut w.accumulate {
                    shift(flag);
                }
            }
            _ => {}
        }
        Flow::Descend
    });
}

/// `s` with loop variable `var` replaced by `with`.
fn at(mut s: Stmt, var: &str, with: &Val) -> Stmt {
    s.map_vals(&mut |v| v.subst(var, with));
    s
}

/// The overlapped form of block loop `l` (see [`overlap_promotions`]).
fn in_groups_of_blocks(cx: &mut Ctx, l: Loop, o: &Overlap) -> Vec<Stmt> {
    let Loop {
        key,
        var,
        extent: blocks,
        mut body,
        ..
    } = l;
    let (Some(promotion), Some(release)) = (body.pop(), body.pop()) else {
        unreachable!("promotes_after_its_group checked the tail")
    };
    body.pop(); // wait_group 0: the next block's `wait_group 1` waits for this group
    let Some(Stmt::WgmmaCommit) = body.pop() else {
        unreachable!("promotes_after_its_group checked the tail")
    };
    let u = OVERLAP_UNROLL;
    let split = |is_outer| KeyNode::Split {
        parent: key,
        factor: u,
        inner_split: true,
        is_outer,
    };
    let outer_key = cx.loop_only_key(split(true));
    let inner_key = cx.loop_only_key(split(false));
    let outer = cx.keys.names[outer_key].clone();
    let inner = cx.keys.names[inner_key].clone();
    let j = Val::Var(inner.clone());
    let first = Val::mul(Val::Var(outer.clone()), Val::Int(u));
    let k_val = Val::Var(var.clone());
    let in_k = |b: Val| Val::lt(b, blocks.clone());
    // Block `b`'s promotion from half `h` (a value of the unrolled loop).
    let promote = |b: Val, h: Val| {
        let mut p = at(promotion.clone(), &var, &b);
        for &half in [o.block].iter().chain(&o.scales) {
            offset_accesses(&mut p, half, &Val::mul(h.clone(), Val::Int(o.registers)));
        }
        vec![at(release.clone(), &var, &b), p]
    };
    let half = Val::rem(j.clone(), Val::Int(2));
    let mut issue = Vec::new();
    for mut s in body {
        for &b in [o.block].iter().chain(&o.scales) {
            offset_accesses(&mut s, b, &Val::mul(half.clone(), Val::Int(o.registers)));
        }
        offset_accesses(
            &mut s,
            o.flags,
            &Val::mul(half.clone(), Val::Int(o.flag_count)),
        );
        issue.push(s);
    }
    let previous = Val::sub(k_val.clone(), Val::Int(1));
    let step = vec![
        Stmt::Let {
            var: var.clone(),
            value: Val::add(first.clone(), j.clone()),
            broadcast: false,
        },
        Stmt::If {
            cond: in_k(k_val.clone()),
            then: issue,
            els: Vec::new(),
        },
        Stmt::WgmmaCommit,
        Stmt::If {
            cond: Val::lt(Val::Int(0), j.clone()),
            then: vec![
                Stmt::WgmmaWait(1),
                Stmt::If {
                    cond: in_k(previous.clone()),
                    then: promote(
                        previous,
                        Val::rem(Val::sub(j.clone(), Val::Int(1)), Val::Int(2)),
                    ),
                    els: Vec::new(),
                },
            ],
            els: Vec::new(),
        },
    ];
    let last = Val::add(first, Val::Int(u - 1));
    vec![Stmt::Loop(Loop {
        key: outer_key,
        var: outer,
        extent: Val::ceil_div(blocks.clone(), Val::Int(u)),
        parallel: ParallelType::Serial,
        digits: Vec::new(),
        body: vec![
            Stmt::Loop(Loop {
                key: inner_key,
                var: inner,
                extent: Val::Int(u),
                parallel: ParallelType::Unroll,
                digits: Vec::new(),
                body: step,
            }),
            Stmt::WgmmaWait(0),
            Stmt::If {
                cond: in_k(last.clone()),
                then: promote(last, Val::Int((u - 1) % 2)),
                els: Vec::new(),
            },
        ],
    })]
}

/// The block's scales loaded into `registers` (one array a scale) and the promotion's statement
/// for one accumulator register of product `p`: `acc += blk * (the registers' product)`. Each
/// scale is read at the tile's first row (column) where it is the same along the tile's M (N)
/// loop, clamped into its tensor where it can be (else the load and the update under the
/// update's bounds guard), with the K loops `inside` the block at 0.
fn promotion_update(
    k: &Kernel,
    p: &Product,
    blk: BufferId,
    registers: &[BufferId],
    body: &[Stmt],
    inside: &[(String, i64)],
) -> (Vec<Stmt>, Stmt) {
    // Each scale read at the tile's first row (column) when it is the same along the
    // tile's M (N) loop: a weight block's scale is then one load per block, not one per
    // register (ptxas cannot see that `(n0 * 128 + j) / 128` is `n0` for j < 128).
    let tile_loops: Vec<(String, i64)> = [&p.m, &p.n]
        .into_iter()
        .filter_map(|l| Some((l.var.clone(), l.extent?)))
        .collect();
    let hoisted: Vec<Data> = p
        .scales
        .iter()
        .map(|s| {
            let mut s = s.clone();
            for (var, extent) in &tile_loops {
                let mut opaque = s.clone();
                opaque.map_vals(&mut |v| opaque_except(v, var));
                if constant_along(&[opaque], &[(var.clone(), *extent)]) {
                    s.map_vals(&mut |v| v.subst(var, &Val::Int(0)));
                }
            }
            s
        })
        .collect();
    // Scale reads clamped into their tensors need no bounds guard, so ptxas loads each
    // scale once, unpredicated, and issues the loads before the block's wgmmas complete
    // (under the guard it loads one copy per register's predicate). The promotion then
    // also writes the registers of a ragged tile's rows and columns past M and N: they
    // hold values of no element (their operands are TMA's zero fill), which every reader
    // of the accumulator skips under its own guard.
    let clamped: Option<Vec<Data>> = hoisted.iter().map(|s| clamped_into_tensors(k, s)).collect();
    let unguarded = clamped.is_some();
    let guard = update_guard(body, p.expr).filter(|_| !unguarded);
    let under_guard = |s: Stmt| match &guard {
        Some(cond) => Stmt::If {
            cond: cond.clone(),
            then: vec![s],
            els: Vec::new(),
        },
        None => s,
    };
    let at_block_start = |mut s: Stmt| {
        s.map_vals(&mut |v| {
            inside
                .iter()
                .fold(v.clone(), |v, (var, _)| v.subst(var, &Val::Int(0)))
        });
        s
    };
    // Each scale into its registers at the block's start: the loads are in flight while the
    // block's stage is waited for and its wgmmas run, so that the promotion after them does
    // not wait on global memory (see `overlap_promotions`).
    let loads = clamped
        .unwrap_or(hoisted)
        .into_iter()
        .zip(registers)
        .map(|(scale, &reg)| {
            at_block_start(under_guard(Stmt::Compute(Compute {
                expr: p.expr,
                out: Access {
                    buffer: reg,
                    index: p.acc.index.clone(),
                },
                value: scale,
                role: ComputeRole::Normal,
                vector: None,
            })))
        })
        .collect();
    // The scales' product first, then one multiply-add per register (DeepGEMM's
    // `acc += block * (sa * sb)`): one FFMA a register, the scales' product once per row.
    let scale = registers
        .iter()
        .map(|&reg| {
            Data::Read(Access {
                buffer: reg,
                index: p.acc.index.clone(),
            })
        })
        .reduce(|x, s| Data::Binary(BinaryOp::Mul, DType::F32, Box::new(x), Box::new(s)))
        .expect("a block-scaled product has a scale");
    let scaled = Data::Binary(
        BinaryOp::Mul,
        DType::F32,
        Box::new(Data::Read(Access {
            buffer: blk,
            index: p.acc.index.clone(),
        })),
        Box::new(scale),
    );
    let update = Stmt::Compute(Compute {
        expr: p.expr,
        out: p.acc.clone(),
        value: Data::Binary(
            BinaryOp::Add,
            DType::F32,
            Box::new(Data::Read(p.acc.clone())),
            Box::new(scaled),
        ),
        role: ComputeRole::Normal,
        vector: None,
    });
    // The update under the bounds guard (the scales' rows and columns inside the tensors),
    // where the reads are not clamped.
    (loads, at_block_start(under_guard(update)))
}
