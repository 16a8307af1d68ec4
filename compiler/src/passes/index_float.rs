//! Pass `index_float`: an integer computed from indices and converted to f32 inside an
//! unrolled loop becomes a float computed once before the loop plus a constant of each
//! unrolled iteration, where that is exact. ALiBi's `cast(iota(s, axis=2) - iota(s, axis=1),
//! f32)` on the S fragment is the case it was written for: each score's index difference is a
//! per-thread, per-tile base plus a function of the fragment's register index, so after it the
//! key loop has no `I2FP` per score, one `I2FP` per tile and an `FADD` of a constant per
//! distinct score offset.
//!
//! Requires: the kernel's values final (after `simplify`, and after the passes that rewrite
//! values after it: `mask_tiles`, `longest_first`, `tile_values`), a specialised kernel's sizes
//! substituted (`specialize`). Takes, in the body of each `@Unroll` loop of constant extent
//! `n` (its statements and those of its branches, such as bounds predicates; not those of
//! loops inside it), every `cast<f32>(x)` of an integer value `x` that is, through the
//! one-element integer registers written before it in the same iteration (`dist_sub[0] =
//! sub(dist_iota[0], dist_iota2[0])`; one written under branch conditions only where its
//! reader is under the same conditions, so the write ran whenever the read does),
//! a sum, difference, negation and product by constants of indices (`index@2[...]`, integer
//! literals). That is an index expression `V`; its affine terms split it into `V = base + c`,
//! `c` the terms that mention only the loop's variable `r` and constants (a constant once the
//! loop is unrolled), `base` the terms without `r` (the same in every iteration).
//!
//! Exactness: every integer of magnitude below 2^24 ([`F32_EXACT`]) is an f32, and the f32 sum
//! of two such integers whose exact sum is also below 2^24 is that sum (the exact result is
//! representable, and IEEE addition returns it). So `float(base) + float(c) = float(base + c) =
//! float(V)`, bit for bit, when each of `base`, `c` and `base + c` has magnitude below 2^24 for
//! every value its variables take. The pass proves it from ranges: a loop variable in `[0,
//! extent)` (a loop bound to a thread or block index in `[0, max(extent, launch dimension))`,
//! since the launch may have more threads than the loop), a thread or block index in its
//! launch dimension, the warp index in the block's warps, a `let` in its value's range, `r` in
//! `[0, n)`; sums, differences, products, truncating quotients and remainders by positive
//! constants, and minimums bounded from their operands. It requires the bound of every node of
//! `V`, of `base`, of `c` and of each index read (so the integers the kernel computed were not
//! wrapped either: the new value is the old one's, not just close to it). It declines, leaving
//! the conversion, where a range is unknown or too wide: a size symbol (a generic kernel,
//! whose extents are not bounded), a launch dimension that is not a constant, a persistent
//! kernel's tile coordinates (bound to its raster, not to the block index), a variable defined
//! inside the loop, an index read from data; and where it would gain nothing: `c` without `r`
//! (the value is the same in every iteration, which the unrolled code shares already) or
//! `base` without a variable (the whole value is a constant once unrolled).
//!
//! Guarantees: the same f32 values, so the same results bit for bit; per unrolled iteration
//! an `FADD` of a constant where the integer add and `I2FP.F32.S32` were (NVRTC folds
//! `float(c)` once the loop is unrolled and shares equal constants); a multiply-add of the
//! value (`s + slope * dist`) is contracted to one `FFMA` by NVRTC as before. The integer
//! registers only the converted value read are removed with their writes (and the branches
//! those leave empty).
//!
//! Emits: for each taken conversion, a one-element f32 register `{out}_base` (`out` the
//! converting statement's buffer) whose `alloc` and write `{out}_base[0] =
//! cast<f32>(index@value[base])` stand right before the unrolled loop (with the conversion's
//! expression), and the conversion becomes `add({out}_base[0], cast<f32>(index@value[c]))`.

use super::context::{Change, Ctx};
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::fusion::{BinaryOp, MemoryType, Op, ParallelType, UnaryOp};
use crate::kir::{
    for_each_block_mut, visit_mut, Access, Buffer, BufferId, Compute, ComputeRole, Data, Flow,
    IndexOf, Kernel, Loop, Stmt, Val, VisitorMut,
};
use rustc_hash::{FxHashMap, FxHashSet};
use std::convert::Infallible;

/// Integers of magnitude below 2^24 are exactly f32 values (its significand has 24 bits).
pub const F32_EXACT: i64 = 1 << 24;

/// The integer types whose arithmetic is the index arithmetic's within `(-2^24, 2^24)` (an
/// 8-bit one wraps at its own width).
fn wide_int(d: DType) -> bool {
    matches!(d, DType::I32 | DType::I64)
}

/// The values an integer may take, both ends included.
pub type Range = (i64, i64);

/// Whether the fusion converts an integer to f32 and has indices to convert (an `iota`).
pub fn used(cx: &Ctx) -> bool {
    let f = cx.fusion;
    let iota = f.exprs.iter().any(|e| matches!(e.op, Op::Iota { .. }));
    iota && f.exprs.iter().any(|e| {
        matches!(e.op, Op::Cast(DType::F32))
            && e.input_tensors().any(|t| f.tensors[t].dtype.is_integer())
    })
}

pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<Change, Diagnostic> {
    let mut body = std::mem::take(&mut k.body);
    let mut split = Split::new(cx, k);
    let Ok(()) = visit_mut(&mut body, &mut split);
    let (changed, bypassed) = (split.changed, split.bypassed);
    k.body = body;
    remove_unread(k, bypassed);
    Ok(Change::from_changed(changed))
}

/// The range of `v` when every node of it (`v` included) lies within `(-2^24, 2^24)`, from
/// the ranges `leaf` gives its variables, thread and block indices and warp index; `None`
/// where one is unknown, a node is one this does not bound, or a bound is too wide.
pub fn exact_range(v: &Val, leaf: &dyn Fn(&Val) -> Option<Range>) -> Option<Range> {
    let r = match v.operands() {
        Some((a, b)) => combine(v, exact_range(a, leaf)?, exact_range(b, leaf)?)?,
        None => match v {
            Val::Int(i) => (*i, *i),
            Val::True => (1, 1),
            Val::Var(_) | Val::Hw(_) | Val::Warp => leaf(v)?,
            _ => return None,
        },
    };
    (r.0 > -F32_EXACT && r.1 < F32_EXACT && r.0 <= r.1).then_some(r)
}

/// The range of binary node `v` over operands in ranges `a` and `b`.
fn combine(v: &Val, a: Range, b: Range) -> Option<Range> {
    // A positive constant divisor.
    let divisor = (b.0 == b.1 && b.0 > 0).then_some(b.0);
    Some(match v {
        Val::Add(..) => (a.0.checked_add(b.0)?, a.1.checked_add(b.1)?),
        Val::Sub(..) => (a.0.checked_sub(b.1)?, a.1.checked_sub(b.0)?),
        Val::Mul(..) => {
            let p = [
                a.0.checked_mul(b.0)?,
                a.0.checked_mul(b.1)?,
                a.1.checked_mul(b.0)?,
                a.1.checked_mul(b.1)?,
            ];
            (*p.iter().min()?, *p.iter().max()?)
        }
        // C's quotient truncates: monotone in the dividend for a positive divisor.
        Val::Div(..) => (a.0 / divisor?, a.1 / divisor?),
        // C's remainder has the dividend's sign and a magnitude below the divisor's.
        Val::Mod(..) => {
            let d = divisor?;
            let lo = if a.0 >= 0 { 0 } else { a.0.max(1 - d) };
            let hi = if a.1 <= 0 { 0 } else { a.1.min(d - 1) };
            (lo, hi)
        }
        Val::Min(..) => (a.0.min(b.0), a.1.min(b.1)),
        Val::Lt(..) | Val::Eq(..) | Val::And(..) => (0, 1),
        _ => return None,
    })
}

/// `v` as `(base, c)`, `v = base + c`: `c` its terms that mention only `var` and constants,
/// `base` the others (without `var`); `None` where a term mixes `var` with another value,
/// where `c` does not mention `var` or `base` mentions no variable.
pub fn split_on(v: &Val, var: &str) -> Option<(Val, Val)> {
    let (mut base, mut step): (Option<Val>, Option<Val>) = (None, None);
    let mut varies = false;
    for (c, t) in v.affine_terms()? {
        let sum = if t.mentions(var) {
            if !t.only_mentions(var) {
                return None;
            }
            varies = true;
            &mut step
        } else if t == Val::Int(1) {
            &mut step
        } else {
            &mut base
        };
        *sum = Some(add_term(sum.take(), c, t)?);
    }
    Some((base?, step.filter(|_| varies)?))
}

/// `sum + c * t` (`sum - |c| * t` for a negative `c`), a constant term (`t = 1`) as `c`.
fn add_term(sum: Option<Val>, c: i64, t: Val) -> Option<Val> {
    let term = |c: i64| match (c, &t) {
        (c, Val::Int(1)) => Val::Int(c),
        (1, _) => t.clone(),
        (c, _) => Val::mul(Val::Int(c), t.clone()),
    };
    Some(match sum {
        None => term(c),
        Some(s) if c < 0 => Val::sub(s, term(c.checked_neg()?)),
        Some(s) => Val::add(s, term(c)),
    })
}

/// The walk: the ranges of the variables in scope, and the rewrite of each unrolled loop.
struct Split<'c, 'f> {
    cx: &'c mut Ctx<'f>,
    buffers: &'c mut Vec<Buffer>,
    /// Launch dimensions that are constants: grid then block, x y z.
    grid: [Option<i64>; 3],
    block: [Option<i64>; 3],
    /// Variables in scope and their ranges (`None`: not bounded), innermost last.
    scope: Vec<(String, Option<Range>)>,
    /// The scope's length when each body entered was entered.
    marks: Vec<usize>,
    changed: bool,
    /// Integer registers a taken conversion read through (removed if nothing else reads them).
    bypassed: Vec<BufferId>,
}

impl<'c, 'f> Split<'c, 'f> {
    fn new(cx: &'c mut Ctx<'f>, k: &'c mut Kernel) -> Split<'c, 'f> {
        let dims = |e: &[crate::plan::SizeExpr; 3]| [0, 1, 2].map(|d| e[d].as_const());
        let (grid, block) = (dims(&k.grid), dims(&k.block));
        // A persistent kernel's grid-bound variables are its raster's tile coordinates.
        let raster: FxHashSet<&str> = k
            .persistent
            .iter()
            .flat_map(|p| &p.bindings)
            .map(|b| b.0.as_str())
            .collect();
        let mut split = Split {
            cx,
            buffers: &mut k.buffers,
            grid,
            block,
            scope: Vec::new(),
            marks: Vec::new(),
            changed: false,
            bypassed: Vec::new(),
        };
        let scope = k
            .hw_vars
            .iter()
            .map(|(v, p)| {
                let r = (!raster.contains(v.as_str()))
                    .then(|| split.launch_range(*p))
                    .flatten();
                (v.clone(), r)
            })
            .collect();
        split.scope = scope;
        split
    }

    /// `[0, launch dimension)` of a thread or block index.
    fn launch_range(&self, p: ParallelType) -> Option<Range> {
        let d = p.dim()?;
        let n = if p.is_block() {
            self.grid[d]
        } else {
            self.block[d]
        }?;
        (n > 0).then_some((0, n - 1))
    }

    /// The range of a leaf in the current scope.
    fn leaf(&self, v: &Val) -> Option<Range> {
        match v {
            Val::Var(n) => self.scope.iter().rev().find(|(s, _)| s == n)?.1,
            Val::Hw(p) => self.launch_range(*p),
            Val::Warp => {
                let threads: i64 = self
                    .block
                    .iter()
                    .try_fold(1i64, |a, d| a.checked_mul((*d)?))?;
                (threads > 0).then(|| (0, (threads + 31) / 32 - 1))
            }
            _ => None,
        }
    }

    /// The range of loop `l`'s variable, and of its digits.
    fn loop_ranges(&self, l: &Loop) -> Vec<(String, Option<Range>)> {
        let upto = |extent: &Val| exact_range(extent, &|v| self.leaf(v)).map(|e| e.1);
        let mut hi = upto(&l.extent);
        if l.parallel.is_hw() {
            // The launch may have more threads or blocks than the loop has iterations.
            hi = hi
                .zip(self.launch_range(l.parallel).map(|r| r.1 + 1))
                .map(|(a, b)| a.max(b));
        }
        let mut ranges = vec![(l.var.clone(), hi.filter(|&h| h > 0).map(|h| (0, h - 1)))];
        for d in &l.digits {
            ranges.push((
                d.var.clone(),
                upto(&d.extent).filter(|&h| h > 0).map(|h| (0, h - 1)),
            ));
        }
        ranges
    }

    /// Rewrites the conversions in unrolled loop `l`'s body; the statements to put before it.
    fn split_loop(&mut self, l: &mut Loop) -> Vec<Stmt> {
        let mut hoisted = Vec::new();
        let Val::Int(n) = l.extent else {
            return hoisted;
        };
        if n < 1 {
            return hoisted;
        }
        let mut it = Iteration {
            at: Unrolled { var: &l.var, n },
            guards: Vec::new(),
            regs: FxHashMap::default(),
        };
        self.split_block(&mut l.body, &mut it, &mut hoisted);
        hoisted
    }

    /// [`Split::split_loop`] on one block of the iteration: its statements and its branches'.
    fn split_block(&mut self, body: &mut [Stmt], it: &mut Iteration, hoisted: &mut Vec<Stmt>) {
        for st in body {
            match st {
                Stmt::Alloc(_) => {}
                Stmt::Compute(c) if c.vector.is_none() => {
                    let (expr, out) = (c.expr, self.buffers[c.out.buffer].name.clone());
                    self.split_casts(&mut c.value, it, (expr, &out), hoisted);
                    let b = c.out.buffer;
                    let register = self.buffers[b].memory == MemoryType::Local
                        && wide_int(self.buffers[b].dtype)
                        && self.buffers[b].size == Some(Val::Int(1))
                        && c.out.index == Some(Val::Int(0));
                    let mut through = Vec::new();
                    match register
                        .then(|| self.int_val(&c.value, it, &mut through))
                        .flatten()
                    {
                        Some(value) => {
                            let guards = it.guards.clone();
                            it.regs.insert(
                                b,
                                Known {
                                    value,
                                    through,
                                    guards,
                                },
                            )
                        }
                        None => it.regs.remove(&b),
                    };
                }
                // A branch (a bounds predicate): its writes are known under its condition, which
                // is as true at the read as at the write (`elect.sync` excepted: it is not a
                // value of the iteration's indices).
                Stmt::If { cond, then, els } if !cond.any_leaf(&|v| matches!(v, Val::Elect)) => {
                    it.guards.push(cond.clone());
                    self.split_block(then, it, hoisted);
                    it.guards.pop();
                    it.guards.push(Val::eq(cond.clone(), Val::Int(0)));
                    self.split_block(els, it, hoisted);
                    it.guards.pop();
                }
                // Anything else may write a register: what was known is no longer.
                _ => it.regs.clear(),
            }
        }
    }

    /// Rewrites each `cast<f32>` in `d` whose operand splits (outermost first).
    fn split_casts(
        &mut self,
        d: &mut Data,
        it: &Iteration,
        (expr, out): (crate::fusion::ExprId, &str),
        hoisted: &mut Vec<Stmt>,
    ) {
        if let Data::Cast(DType::F32, x) = d {
            let mut through = Vec::new();
            if let Some((base, step)) = self.exact_split(x, it, &mut through) {
                let b = self.base_register(out);
                let read = || Access {
                    buffer: b,
                    index: Some(Val::Int(0)),
                };
                let float = |v: Val| {
                    Box::new(Data::Cast(
                        DType::F32,
                        Box::new(Data::Index(IndexOf::Value, Some(v))),
                    ))
                };
                hoisted.push(Stmt::Alloc(b));
                hoisted.push(Stmt::Compute(Compute {
                    expr,
                    out: read(),
                    value: *float(base),
                    role: ComputeRole::Normal,
                    vector: None,
                }));
                *d = Data::Binary(
                    BinaryOp::Add,
                    DType::F32,
                    Box::new(Data::Read(read())),
                    float(step),
                );
                self.bypassed.extend(through);
                self.changed = true;
                return;
            }
        }
        d.each_operand_mut(&mut |x| self.split_casts(x, it, (expr, out), hoisted));
    }

    /// `x` as `(base, c)` (see [`split_on`]) when the split is exact: `x`'s value, `base`, `c`
    /// and `base + c` all within `(-2^24, 2^24)`.
    fn exact_split(
        &self,
        x: &Data,
        it: &Iteration,
        through: &mut Vec<BufferId>,
    ) -> Option<(Val, Val)> {
        let (at, v) = (it.at, self.int_val(x, it, through)?);
        let (base, step) = split_on(&v, at.var)?;
        // The base is computed before the loop: its variables are those in scope there.
        let b = exact_range(&base, &|l| self.leaf(l))?;
        let c = exact_range(&step, &|l| at.leaf(l))?;
        let sum = (b.0 + c.0, b.1 + c.1);
        (sum.0 > -F32_EXACT && sum.1 < F32_EXACT).then_some((base, step))
    }

    /// The integer value of `d` as an index expression, every node and every index read within
    /// `(-2^24, 2^24)` (the registers read through pushed on `through`).
    fn int_val(&self, d: &Data, it: &Iteration, through: &mut Vec<BufferId>) -> Option<Val> {
        let v = match d {
            Data::Index(IndexOf::Axis(_) | IndexOf::Value, Some(v)) => v.clone(),
            Data::Literal(x, dt)
                if wide_int(*dt) && x.fract() == 0.0 && x.abs() < F32_EXACT as f64 =>
            {
                Val::Int(*x as i64)
            }
            Data::Read(a) if a.index == Some(Val::Int(0)) => {
                // Written in this iteration, under conditions the reader is under too.
                let known = it.regs.get(&a.buffer)?;
                if !it.guards.starts_with(&known.guards) {
                    return None;
                }
                through.push(a.buffer);
                through.extend(&known.through);
                known.value.clone()
            }
            Data::Cast(to, x) if wide_int(*to) => self.int_val(x, it, through)?,
            Data::Unary(UnaryOp::Neg, dt, x) if wide_int(*dt) => {
                Val::sub(Val::Int(0), self.int_val(x, it, through)?)
            }
            Data::Binary(op @ (BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul), dt, x, y)
                if wide_int(*dt) =>
            {
                let (x, y) = (self.int_val(x, it, through)?, self.int_val(y, it, through)?);
                match op {
                    BinaryOp::Add => Val::add(x, y),
                    BinaryOp::Sub => Val::sub(x, y),
                    _ => Val::mul(x, y),
                }
            }
            _ => return None,
        };
        // Checked in this iteration's scope: the loop's variable in [0, n), the rest outside.
        exact_range(&v, &|l| it.at.leaf(l).or_else(|| self.leaf(l)))?;
        Some(v)
    }

    /// A new one-element f32 register for the base of a conversion into `out`.
    fn base_register(&mut self, out: &str) -> BufferId {
        let mut name = self.cx.fresh_name(&format!("{out}_base"));
        while self.buffers.iter().any(|b| b.name == name) {
            name = self.cx.fresh_name(&format!("{out}_base"));
        }
        let b = BufferId::new(self.buffers.len());
        self.buffers.push(Buffer {
            name,
            dtype: DType::F32,
            memory: MemoryType::Local,
            tensor: None,
            size: Some(Val::Int(1)),
            smem_offset: None,
            global_shape: Vec::new(),
            is_input: false,
            l2: crate::fusion::L2Policy::Normal,
        });
        b
    }
}

/// What is known in one iteration of an unrolled loop, where the walk of its body is.
struct Iteration<'a> {
    at: Unrolled<'a>,
    /// The conditions of the branches around the statement (an `else` as `cond == 0`).
    guards: Vec<Val>,
    /// The integer value each one-element register written so far in this iteration holds.
    regs: FxHashMap<BufferId, Known>,
}

/// A register's value, written under `guards`, read through the registers of `through`.
struct Known {
    value: Val,
    through: Vec<BufferId>,
    guards: Vec<Val>,
}

/// The unrolled loop a conversion is in: its variable and trip count.
#[derive(Clone, Copy)]
struct Unrolled<'a> {
    var: &'a str,
    n: i64,
}

impl Unrolled<'_> {
    fn leaf(&self, v: &Val) -> Option<Range> {
        matches!(v, Val::Var(n) if n == self.var).then_some((0, self.n - 1))
    }
}

impl VisitorMut for Split<'_, '_> {
    type Error = Infallible;

    fn stmt(&mut self, st: &mut Stmt, _: usize) -> Result<Flow, Infallible> {
        if let Stmt::Let { var, value, .. } = st {
            let r = exact_range(value, &|l| self.leaf(l));
            self.scope.push((var.clone(), r));
        }
        Ok(Flow::Descend)
    }

    fn enter(&mut self, st: &Stmt, _: usize) -> Result<Flow, Infallible> {
        self.marks.push(self.scope.len());
        if let Stmt::Loop(l) = st {
            let ranges = self.loop_ranges(l);
            self.scope.extend(ranges);
        }
        Ok(Flow::Descend)
    }

    fn leave(&mut self, _: &mut Stmt, _: usize) -> Result<(), Infallible> {
        let mark = self.marks.pop().unwrap_or(0);
        self.scope.truncate(mark);
        Ok(())
    }

    fn splice_after(&mut self, st: &mut Stmt, _: usize) -> Result<Option<Vec<Stmt>>, Infallible> {
        let Stmt::Loop(l) = st else {
            return Ok(None);
        };
        if l.parallel != ParallelType::Unroll {
            return Ok(None);
        }
        let mut hoisted = self.split_loop(l);
        if hoisted.is_empty() {
            return Ok(None);
        }
        hoisted.push(st.clone());
        Ok(Some(hoisted))
    }
}

/// Removes the registers of `candidates` that nothing reads any more, with their writes and
/// allocations (a removed register's write may have been the last read of another), and the
/// branches left empty.
pub(super) fn remove_unread(k: &mut Kernel, mut candidates: Vec<BufferId>) {
    candidates.sort_unstable();
    candidates.dedup();
    loop {
        let mut read = FxHashSet::default();
        crate::kir::for_each_stmt(&k.body, &mut |s| {
            uses(s, &mut |b| {
                read.insert(b);
            })
        });
        let unread: FxHashSet<BufferId> = candidates
            .iter()
            .copied()
            .filter(|b| !read.contains(b))
            .collect();
        if unread.is_empty() {
            return;
        }
        candidates.retain(|b| !unread.contains(b));
        // Inner blocks first, so a branch that held only removed writes is empty by its turn.
        for_each_block_mut(&mut k.body, &mut |body| {
            body.retain(|s| match s {
                Stmt::Alloc(b) => !unread.contains(b),
                Stmt::Compute(c) => !unread.contains(&c.out.buffer),
                Stmt::If { then, els, .. } => !(then.is_empty() && els.is_empty()),
                _ => true,
            })
        });
    }
}

/// Calls `f` on every buffer statement `s` reads, or accesses other than by a computation's
/// write or an allocation.
fn uses(s: &Stmt, f: &mut dyn FnMut(BufferId)) {
    let mut each = |accesses: &[&Access]| accesses.iter().for_each(|a| f(a.buffer));
    match s {
        Stmt::Compute(c) => c.value.for_each_read(&mut |a| f(a.buffer)),
        Stmt::BlockReduce { acc, .. } | Stmt::QuadReduce { acc, .. } => each(&[acc]),
        Stmt::GridReduce(g) => each(&[&g.acc]),
        Stmt::BlockWelford {
            mean, m2, count, ..
        } => each(&[mean, m2, count]),
        Stmt::TmaLoad(t) => each(&[&t.dst, &t.src]),
        Stmt::TmaStore(t) => each(&[&t.src]),
        Stmt::Wgmma(w) => {
            each(&[&w.acc, &w.a.tile, &w.b.tile]);
            each(&w.accumulate.iter().collect::<Vec<_>>());
        }
        Stmt::StMatrix { dst, src } => each(&[dst, src]),
        Stmt::StreamKFixup { acc } => acc.iter().for_each(|&b| f(b)),
        Stmt::Loop(_)
        | Stmt::If { .. }
        | Stmt::Alloc(_)
        | Stmt::Sync
        | Stmt::GroupSync { .. }
        | Stmt::Turn { .. }
        | Stmt::ClusterSync
        | Stmt::Let { .. }
        | Stmt::MbarInit { .. }
        | Stmt::MbarInval { .. }
        | Stmt::MbarArriveExpectTx { .. }
        | Stmt::MbarExpectTx { .. }
        | Stmt::MbarWait { .. }
        | Stmt::MbarArrive { .. }
        | Stmt::BulkCommit
        | Stmt::BulkWaitRead(_)
        | Stmt::FenceProxyAsync
        | Stmt::WgmmaFence
        | Stmt::WgmmaCommit
        | Stmt::WgmmaWait(_)
        | Stmt::WarpRoles(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::{exact_range, split_on, Range, F32_EXACT};
    use crate::kir::Val;

    fn var(n: &str) -> Val {
        Val::Var(n.into())
    }

    /// ALiBi's key index minus its query index on the S fragment, as `simplify` leaves them:
    /// `(t_o * 128 + 8 * (r2 / 4) + 2 * (lane % 4) + r2 % 2) - (s2_o * 128 + lane / 4 + 8 * (r2
    /// / 2 % 2))`.
    fn alibi_distance() -> Val {
        let r2 = || var("r2");
        let lane = || var("lane");
        let key = Val::add(
            Val::add(
                Val::mul(var("t_o"), Val::Int(128)),
                Val::mul(Val::Int(8), Val::div(r2(), Val::Int(4))),
            ),
            Val::add(
                Val::mul(Val::Int(2), Val::rem(lane(), Val::Int(4))),
                Val::rem(r2(), Val::Int(2)),
            ),
        );
        let query = Val::add(
            Val::add(
                Val::mul(var("s2_o"), Val::Int(128)),
                Val::div(lane(), Val::Int(4)),
            ),
            Val::mul(
                Val::Int(8),
                Val::rem(Val::div(r2(), Val::Int(2)), Val::Int(2)),
            ),
        );
        Val::sub(key, query)
    }

    /// Loop ranges for T = S = `tiles * 128`: 32 lanes, 64 fragment registers.
    fn ranges(tiles: i64) -> impl Fn(&Val) -> Option<Range> {
        move |v| match v {
            Val::Var(n) if n == "t_o" || n == "s2_o" => Some((0, tiles - 1)),
            Val::Var(n) if n == "lane" => Some((0, 31)),
            Val::Var(n) if n == "r2" => Some((0, 63)),
            _ => None,
        }
    }

    #[test]
    fn alibi_distance_splits_into_a_base_and_a_constant_of_the_register_index() {
        let (base, step) = split_on(&alibi_distance(), "r2").expect("splits");
        assert_eq!(
            base.text(),
            "128 * t_o + 2 * (lane % 4) - 128 * s2_o - lane / 4"
        );
        assert_eq!(step.text(), "8 * (r2 / 4) + r2 % 2 - 8 * (r2 / 2 % 2)");
        // Each part's value for every point, summed, is the distance's.
        for (t, s, lane, r2) in [(3, 0, 5, 17), (0, 15, 31, 63), (7, 7, 0, 6)] {
            let at = |v: &Val| match v {
                Val::Var(n) if n == "t_o" => Some(t),
                Val::Var(n) if n == "s2_o" => Some(s),
                Val::Var(n) if n == "lane" => Some(lane),
                Val::Var(n) if n == "r2" => Some(r2),
                _ => None,
            };
            let whole = alibi_distance().eval_with(&at);
            assert_eq!(
                whole,
                Some(base.eval_with(&at).unwrap() + step.eval_with(&at).unwrap())
            );
        }
        // 16 tiles of 128 (S = T = 2048): every value well inside 2^24.
        assert_eq!(exact_range(&base, &ranges(16)), Some((-1927, 1926)));
        assert_eq!(exact_range(&step, &ranges(16)), Some((-8, 121)));
    }

    #[test]
    fn a_split_is_declined_where_a_range_is_unknown_or_reaches_2_pow_24() {
        // A size symbol (a generic kernel's extent) has no range.
        let generic = Val::add(Val::mul(Val::Size("T".into()), var("t_o")), var("r2"));
        assert_eq!(exact_range(&generic, &ranges(16)), None);
        // 2^16 tiles of 128 (T = 2^23): the base reaches 2^23 - 128 + 6; with 2^17 + 1 tiles
        // (T beyond 2^24) it reaches 2^24 + 6.
        let (base, _) = split_on(&alibi_distance(), "r2").unwrap();
        assert_eq!(
            exact_range(&base, &ranges(1 << 16)).map(|r| r.1),
            Some((1 << 23) - 128 + 6)
        );
        assert_eq!(exact_range(&base, &ranges((1 << 17) + 1)), None);
        // Every node is checked, not only the whole: `t_o * 2^24 - t_o * 2^24` is 0 but its
        // terms are not exact.
        let big = Val::mul(var("t_o"), Val::Int(F32_EXACT));
        assert_eq!(exact_range(&Val::sub(big.clone(), big), &ranges(16)), None);
        // A remainder or quotient by a variable is not bounded.
        assert_eq!(
            exact_range(&Val::rem(var("lane"), var("t_o")), &ranges(16)),
            None
        );
    }

    #[test]
    fn the_converted_parts_sum_to_the_converted_whole_exactly_below_2_pow_24() {
        // Every base and constant ALiBi's kernel has at S = T = 2048 (the ranges above): the
        // f32 sum is the converted difference, bit for bit.
        let (base, step) = split_on(&alibi_distance(), "r2").unwrap();
        let b = exact_range(&base, &ranges(16)).unwrap();
        let steps: Vec<i64> = (0..64)
            .map(|r2| step.eval_with(&|_| Some(r2)).unwrap())
            .collect();
        for x in b.0..=b.1 {
            for &c in &steps {
                assert_eq!((x as f32 + c as f32).to_bits(), ((x + c) as f32).to_bits());
            }
        }
        // At the edge: both parts and the sum below 2^24.
        let (x, c) = (F32_EXACT - 2, 1);
        assert_eq!(x as f32 + c as f32, (x + c) as f32);
        // Beyond it the split is not exact: 2^24 + 1 converts to 2^24, and 2^24 + 1 (f32)
        // rounds to 2^24 (to even), where the whole, 2^24 + 2, is an f32.
        let (x, c) = (F32_EXACT + 1, 1);
        assert_ne!(x as f32 + c as f32, (x + c) as f32);
    }

    #[test]
    fn a_split_needs_a_varying_part_of_the_loop_alone_and_a_variable_base() {
        // r2 * t_o mixes the loop's index with another value.
        assert_eq!(split_on(&Val::mul(var("r2"), var("t_o")), "r2"), None);
        // r2 / t_o as well.
        assert_eq!(
            split_on(&Val::add(var("t_o"), Val::div(var("r2"), var("t_o"))), "r2"),
            None
        );
        // No r2: the same in every iteration (nothing to gain).
        assert_eq!(split_on(&Val::add(var("t_o"), Val::Int(3)), "r2"), None);
        // A constant base: the whole value is a constant once unrolled.
        assert_eq!(split_on(&Val::add(var("r2"), Val::Int(3)), "r2"), None);
        // Constants go with the iteration's part.
        let (base, step) = split_on(
            &Val::sub(Val::add(var("t_o"), Val::Int(3)), var("r2")),
            "r2",
        )
        .unwrap();
        assert_eq!((base.text(), step.text()), ("t_o".into(), "3 - r2".into()));
    }
}
