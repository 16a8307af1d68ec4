//! Probing index expressions at sampled values: the passes decide layout facts (lanes
//! consecutive in memory, a stride, a fragment's addresses) by evaluating an index at a few
//! points with every other variable and size set from a seed.
//!
//! Takes a [`Val`] and the leaves that vary; [`eval`] evaluates once, [`eval_at`] once with
//! several variables set, [`Probe`] prepares an expression for evaluation at many points (the
//! leaves that do not vary folded once per seed, the rest a flat program with one instruction
//! per distinct subtree: no tree rebuilt or allocation per point, no repeated subtree
//! evaluated twice). All give the same value as substituting the point's integers into the
//! tree and evaluating it with [`eval`]: `None` when any operation of the tree fails (a
//! division by zero, an overflowing product) or the tree holds a leaf that has no integer
//! value (`true`, `&&`, the warp index; for a [`Probe`], also an index read from data).

use crate::kir::Val;

/// Deterministic pseudo-random values for probing index expressions.
fn sample(seed: u64) -> i64 {
    let mut x = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(0x632B_E59B_D9B4_E019);
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 32;
    (x % 997) as i64
}

/// The value of a leaf other than `var`: loop variables and hardware indices sampled from
/// `seed` by name, sizes from 1000 up (those listed in `multiples` made multiples of `mult`).
/// `None` for a node that is not such a leaf.
fn leaf(v: &Val, seed: u64, multiples: &[String], mult: i64) -> Option<i64> {
    let h = |s: &str| {
        s.bytes()
            .fold(seed, |a, b| a.wrapping_mul(31).wrapping_add(b as u64))
    };
    Some(match v {
        Val::Int(i) => *i,
        Val::Var(v) => sample(h(v)),
        Val::Hw(p) => sample(h(p.name())),
        Val::Size(s) => {
            let base = 1000 + sample(h(s));
            if multiples.contains(s) {
                base / mult * mult
            } else {
                base
            }
        }
        Val::Ctas => sample(h("gridDim.x")),
        _ => return None,
    })
}

/// The operations a probe evaluates (comparisons count as 1 or 0: a stream-K piece's
/// selections).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Xor,
    Min,
    Lt,
    Eq,
    CeilDiv,
    /// Division by `2^k` (a constant divisor, the usual `/ 32` of an index), rounding toward
    /// zero as [`Op::Div`] does: shifts instead of a hardware division per point.
    DivPow2(u32),
    /// Remainder by `2^k`, with the dividend's sign as [`Op::Mod`].
    ModPow2(u32),
}

impl Op {
    fn of(v: &Val) -> Option<Op> {
        Some(match v {
            Val::Add(..) => Op::Add,
            Val::Sub(..) => Op::Sub,
            Val::Mul(..) => Op::Mul,
            Val::Div(..) => Op::Div,
            Val::Mod(..) => Op::Mod,
            Val::Xor(..) => Op::Xor,
            Val::Min(..) => Op::Min,
            Val::Lt(..) => Op::Lt,
            Val::Eq(..) => Op::Eq,
            Val::CeilDiv(..) => Op::CeilDiv,
            _ => return None,
        })
    }

    #[inline(always)]
    fn apply(self, a: i64, b: i64) -> Option<i64> {
        Some(match self {
            Op::Add => a + b,
            Op::Sub => a - b,
            Op::Mul => a.checked_mul(b)?,
            Op::Div => a.checked_div(b)?,
            Op::Mod => a.checked_rem(b)?,
            Op::Xor => a ^ b,
            Op::Min => a.min(b),
            Op::Lt => (a < b) as i64,
            Op::Eq => (a == b) as i64,
            Op::CeilDiv => (a + b - 1).checked_div(b)?,
            // A negative dividend is biased by 2^k - 1 first, so the shift rounds toward zero.
            Op::DivPow2(k) => (a + ((a >> 63) & ((1 << k) - 1))) >> k,
            Op::ModPow2(k) => a - (((a + ((a >> 63) & ((1 << k) - 1))) >> k) << k),
        })
    }
}

/// Evaluates `idx` with `var = lane` and every other variable and size set from `seed`
/// (sizes listed in `multiples` are made multiples of `mult`).
pub(super) fn eval(
    idx: &Val,
    var: &str,
    lane: i64,
    seed: u64,
    multiples: &[String],
    mult: i64,
) -> Option<i64> {
    match (idx, idx.operands()) {
        (Val::Var(v), _) if v == var => Some(lane),
        // An index read from data: some value, the same for every lane when the lane variable
        // is not in its index (sampled as a variable named by its text); else unknown.
        (Val::IndexIn(..), _) => {
            let data = Val::Var(idx.text());
            (!idx.mentions(var)).then(|| leaf(&data, seed, multiples, mult))?
        }
        (_, Some((a, b))) => {
            let op = Op::of(idx)?;
            let a = eval(a, var, lane, seed, multiples, mult)?;
            let b = eval(b, var, lane, seed, multiples, mult)?;
            op.apply(a, b)
        }
        (v, None) => leaf(v, seed, multiples, mult),
    }
}

/// The value of `idx` with each variable of `at` set to its integer and every other leaf
/// sampled from `seed`: what [`eval`] gives for `idx` with those integers substituted (with no
/// lane variable), without building the substituted tree (an index read from data whose index
/// mentions a variable of `at` is the one exception: it is sampled by its substituted text).
pub(crate) fn eval_at(idx: &Val, at: &[(&str, i64)], seed: u64) -> Option<i64> {
    match (idx, idx.operands()) {
        (Val::Var(v), _) => match at.iter().find(|(name, _)| name == v) {
            Some(&(_, x)) => Some(x),
            None => leaf(idx, seed, &[], 1),
        },
        (Val::IndexIn(..), _) => {
            let substituted = at.iter().filter(|(name, _)| idx.mentions(name)).fold(
                None,
                |v: Option<Val>, &(name, x)| {
                    Some(v.as_ref().unwrap_or(idx).subst(name, &Val::Int(x)))
                },
            );
            leaf(
                &Val::Var(substituted.as_ref().unwrap_or(idx).text()),
                seed,
                &[],
                1,
            )
        }
        (_, Some((a, b))) => {
            let op = Op::of(idx)?;
            op.apply(eval_at(a, at, seed)?, eval_at(b, at, seed)?)
        }
        (v, None) => leaf(v, seed, &[], 1),
    }
}

/// Where an instruction of a probe takes an operand from.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Src {
    Const(i64),
    /// The point's value of free leaf `i`.
    Free(usize),
    /// The value of instruction `i` (an earlier one).
    Inst(usize),
}

/// One operation of a probe's program.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Inst {
    op: Op,
    a: Src,
    b: Src,
}

/// An index expression prepared for evaluation at many points of its free leaves (variables
/// or hardware indices), every other leaf sampled from one seed as [`eval`] samples it: the
/// leaves that do not vary folded, each distinct subtree that varies one instruction (index
/// expressions repeat their subtrees: a swizzled store's index holds its row three times).
pub(super) struct Probe {
    insts: Vec<Inst>,
    /// The value; `None` when some operation fails whatever the point.
    result: Option<Src>,
    /// For [`Probe::at_each`]: the column each instruction's values go in (columns are reused
    /// once their values are read for the last time), and how many there are.
    column: Vec<usize>,
    columns: usize,
}

impl Probe {
    pub(super) fn new(idx: &Val, free: &[Val], seed: u64) -> Probe {
        let mut insts = Vec::new();
        let mut seen = rustc_hash::FxHashMap::default();
        let result = Self::compile(idx, free, seed, &mut insts, &mut seen);
        let (column, columns) = Self::assign_columns(&insts, result);
        Probe {
            insts,
            result,
            column,
            columns,
        }
    }

    /// Where the value of `v` comes from, appending the instructions it needs (one per
    /// distinct operation on distinct operands: `seen`); `None` when it fails whatever the
    /// point.
    fn compile(
        v: &Val,
        free: &[Val],
        seed: u64,
        insts: &mut Vec<Inst>,
        seen: &mut rustc_hash::FxHashMap<Inst, usize>,
    ) -> Option<Src> {
        if let Some(i) = free.iter().position(|f| f == v) {
            return Some(Src::Free(i));
        }
        let Some((a, b)) = v.operands() else {
            return leaf(v, seed, &[], 1).map(Src::Const);
        };
        let op = Op::of(v)?;
        let a = Self::compile(a, free, seed, insts, seen)?;
        let b = Self::compile(b, free, seed, insts, seen)?;
        let inst = match (op, a, b) {
            (_, Src::Const(x), Src::Const(y)) => return op.apply(x, y).map(Src::Const),
            (Op::Div | Op::Mod, a, Src::Const(d)) if d > 0 && d.count_ones() == 1 => {
                let k = d.trailing_zeros();
                let op = if op == Op::Div {
                    Op::DivPow2(k)
                } else {
                    Op::ModPow2(k)
                };
                Inst {
                    op,
                    a,
                    b: Src::Const(d),
                }
            }
            _ => Inst { op, a, b },
        };
        let next = insts.len();
        let i = *seen.entry(inst).or_insert(next);
        if i == next {
            insts.push(inst);
        }
        Some(Src::Inst(i))
    }

    /// The column of each instruction's values: a fresh one unless a column whose values
    /// were read for the last time by an earlier instruction is free (never one of the
    /// instruction's own operands: an instruction writes a column it does not read).
    fn assign_columns(insts: &[Inst], result: Option<Src>) -> (Vec<usize>, usize) {
        let mut last_use: Vec<usize> = (0..insts.len()).collect();
        for (i, inst) in insts.iter().enumerate() {
            for src in [inst.a, inst.b] {
                if let Src::Inst(j) = src {
                    last_use[j] = i;
                }
            }
        }
        if let Some(Src::Inst(j)) = result {
            last_use[j] = usize::MAX;
        }
        let (mut column, mut free, mut columns) = (Vec::with_capacity(insts.len()), Vec::new(), 0);
        for (i, inst) in insts.iter().enumerate() {
            let c = free.pop().unwrap_or_else(|| {
                columns += 1;
                columns - 1
            });
            column.push(c);
            for src in [inst.a, inst.b] {
                if let Src::Inst(j) = src {
                    if last_use[j] == i && !free.contains(&column[j]) {
                        free.push(column[j]);
                    }
                }
            }
        }
        (column, columns)
    }

    /// The value at `point` (the free leaves' values, in the order given to [`Probe::new`]);
    /// `values` is scratch space, reused across calls.
    pub(super) fn at(&self, point: &[i64], values: &mut Vec<i64>) -> Option<i64> {
        values.clear();
        let get = |src: Src, values: &[i64]| match src {
            Src::Const(c) => c,
            Src::Free(i) => point[i],
            Src::Inst(i) => values[i],
        };
        for inst in &self.insts {
            let v = inst.op.apply(get(inst.a, values), get(inst.b, values))?;
            values.push(v);
        }
        Some(get(self.result?, values))
    }

    /// The values at many points at once: point `j` gives free leaf `i` the value
    /// `columns[i][j]` (every column as long as the first). One pass over the program, each
    /// instruction over every point: the instruction's dispatch is paid once, not once per
    /// point.
    pub(super) fn at_each(&self, columns: &[&[i64]]) -> Vec<Option<i64>> {
        let n = columns.first().map_or(1, |c| c.len());
        let Some(result) = self.result else {
            return vec![None; n];
        };
        // A point whose evaluation failed (its values are then 0 from there on).
        let mut failed = vec![false; n];
        let mut values: Vec<Vec<i64>> = vec![Vec::new(); self.columns];
        for (inst, &c) in self.insts.iter().zip(&self.column) {
            let mut out = std::mem::take(&mut values[c]);
            out.resize(n, 0);
            let slice = |src: Src| match src {
                Src::Const(_) => None,
                Src::Free(i) => Some(columns[i]),
                Src::Inst(i) => Some(values[self.column[i]].as_slice()),
            };
            let constant = |src: Src| match src {
                Src::Const(c) => c,
                _ => 0,
            };
            match (slice(inst.a), slice(inst.b)) {
                (Some(a), Some(b)) => lanes(inst.op, &mut out, &mut failed, |j| a[j], |j| b[j]),
                (Some(a), None) => {
                    let y = constant(inst.b);
                    lanes(inst.op, &mut out, &mut failed, |j| a[j], |_| y)
                }
                (None, Some(b)) => {
                    let x = constant(inst.a);
                    lanes(inst.op, &mut out, &mut failed, |_| x, |j| b[j])
                }
                // (The probe folds an operation on two constants when it is made.)
                (None, None) => match inst.op.apply(constant(inst.a), constant(inst.b)) {
                    Some(v) => out.fill(v),
                    None => {
                        out.fill(0);
                        failed.fill(true);
                    }
                },
            }
            values[c] = out;
        }
        match result {
            Src::Const(v) => vec![Some(v); n],
            Src::Free(i) => columns[i].iter().map(|&v| Some(v)).collect(),
            Src::Inst(i) => values[self.column[i]]
                .iter()
                .zip(&failed)
                .map(|(&v, &f)| (!f).then_some(v))
                .collect(),
        }
    }
}

/// `out[j] = op(a(j), b(j))` for every point `j`, failed points marked in `failed` (and 0). One
/// loop per operation, the operation a constant in each: the compiler specialises `apply`
/// (and the operands' kinds) instead of branching on them per point.
#[inline(always)]
fn lanes(
    op: Op,
    out: &mut [i64],
    failed: &mut [bool],
    a: impl Fn(usize) -> i64,
    b: impl Fn(usize) -> i64,
) {
    let each = |out: &mut [i64], failed: &mut [bool], op: Op| {
        for (j, (x, failed)) in out.iter_mut().zip(failed).enumerate() {
            match op.apply(a(j), b(j)) {
                Some(v) => *x = v,
                None => (*x, *failed) = (0, true),
            }
        }
    };
    match op {
        Op::Add => each(out, failed, Op::Add),
        Op::Sub => each(out, failed, Op::Sub),
        Op::Mul => each(out, failed, Op::Mul),
        Op::Div => each(out, failed, Op::Div),
        Op::Mod => each(out, failed, Op::Mod),
        Op::Xor => each(out, failed, Op::Xor),
        Op::Min => each(out, failed, Op::Min),
        Op::Lt => each(out, failed, Op::Lt),
        Op::Eq => each(out, failed, Op::Eq),
        Op::CeilDiv => each(out, failed, Op::CeilDiv),
        Op::DivPow2(k) => each(out, failed, Op::DivPow2(k)),
        Op::ModPow2(k) => each(out, failed, Op::ModPow2(k)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fusion::ParallelType;

    fn var(n: &str) -> Val {
        Val::Var(n.into())
    }

    /// A probe's value at every point is the value of the tree with the point substituted.
    #[test]
    fn a_probe_agrees_with_substitution() {
        let tid = Val::Hw(ParallelType::TIDx);
        // ((tid % 32) / 8 * 4 + r) * N + m * 7 - ceilDiv(K, 3) + min(r, 5) ^ (tid < 64)
        let idx = Val::add(
            Val::sub(
                Val::add(
                    Val::mul(
                        Val::add(
                            Val::mul(
                                Val::div(Val::rem(tid.clone(), Val::Int(32)), Val::Int(8)),
                                Val::Int(4),
                            ),
                            var("r"),
                        ),
                        Val::Size("N".into()),
                    ),
                    Val::mul(var("m"), Val::Int(7)),
                ),
                Val::ceil_div(Val::Size("K".into()), Val::Int(3)),
            ),
            Val::Xor(
                Box::new(Val::min(var("r"), Val::Int(5))),
                Box::new(Val::lt(tid.clone(), Val::Int(64))),
            ),
        );
        for seed in 0..3 {
            let probe = Probe::new(&idx, &[tid.clone(), var("r")], seed);
            let mut stack = Vec::new();
            for t in [0, 5, 31, 64, 127] {
                for r in [0, 1, 6, 63] {
                    let direct = idx
                        .subst_hw(ParallelType::TIDx, &Val::Int(t))
                        .subst("r", &Val::Int(r));
                    assert_eq!(
                        probe.at(&[t, r], &mut stack),
                        eval(&direct, "", 0, seed, &[], 1),
                        "seed {seed}, tid {t}, r {r}"
                    );
                }
            }
        }
    }

    /// Many points at once are the points one by one.
    #[test]
    fn points_at_once_are_points_one_by_one() {
        let idx = Val::add(
            Val::mul(var("r"), Val::Size("N".into())),
            Val::div(Val::Int(12), Val::sub(var("t"), Val::Int(3))),
        );
        let probe = Probe::new(&idx, &[var("t"), var("r")], 1);
        let (ts, rs): (Vec<i64>, Vec<i64>) =
            (0..6).flat_map(|t| (0..4).map(move |r| (t, r))).unzip();
        let each = probe.at_each(&[&ts, &rs]);
        let mut stack = Vec::new();
        let one_by_one: Vec<_> = ts
            .iter()
            .zip(&rs)
            .map(|(&t, &r)| probe.at(&[t, r], &mut stack))
            .collect();
        assert_eq!(each, one_by_one);
        // t = 3 divides by zero.
        assert_eq!(each.iter().filter(|v| v.is_none()).count(), 4);
    }

    /// Division and remainder by a power of two (shifts in a probe) round toward zero, as the
    /// tree's division does, negative dividends included.
    #[test]
    fn power_of_two_divisors_round_like_division() {
        let r = var("r");
        let shifted = Val::sub(r.clone(), Val::Int(7));
        let idx = Val::add(
            Val::add(
                Val::div(shifted.clone(), Val::Int(4)),
                Val::mul(Val::rem(shifted.clone(), Val::Int(8)), Val::Int(100)),
            ),
            Val::add(
                Val::div(shifted.clone(), Val::Int(1)),
                Val::rem(shifted, Val::Int(1)),
            ),
        );
        let probe = Probe::new(&idx, std::slice::from_ref(&r), 0);
        let points: Vec<i64> = (-40..40).collect();
        let each = probe.at_each(&[&points]);
        for (&x, got) in points.iter().zip(each) {
            let direct = eval(&idx.subst("r", &Val::Int(x)), "", 0, 0, &[], 1);
            assert_eq!(got, direct, "r = {x}");
            assert_eq!(probe.at(&[x], &mut Vec::new()), direct, "r = {x}");
        }
    }

    /// A subtree that appears several times is one instruction of the probe.
    #[test]
    fn a_repeated_subtree_is_computed_once() {
        let row = Val::add(Val::mul(var("t"), Val::Int(3)), Val::Int(1));
        let idx = Val::add(row.clone(), Val::mul(row, Val::Size("N".into())));
        let probe = Probe::new(&idx, &[var("t")], 0);
        // t * 3, + 1, * N, and the sum.
        assert_eq!(probe.insts.len(), 4);
        let n = 1000
            + sample(
                "N".bytes()
                    .fold(0u64, |a, b| a.wrapping_mul(31).wrapping_add(b as u64)),
            );
        assert_eq!(probe.at(&[2], &mut Vec::new()), Some(7 + 7 * n));
    }

    /// Setting several variables at once is substituting them and evaluating the tree, an
    /// index read from data included (sampled by its substituted text).
    #[test]
    fn eval_at_agrees_with_substitution() {
        let gathered =
            |i: Val| Val::IndexIn("ids".into(), Box::new(i), Box::new(Val::Size("V".into())));
        let idx = Val::add(
            Val::add(
                Val::mul(var("a"), Val::Size("N".into())),
                Val::rem(var("b"), Val::Int(3)),
            ),
            Val::add(
                gathered(Val::add(var("a"), Val::Int(1))),
                gathered(var("c")),
            ),
        );
        for seed in 0..4 {
            for (a, b) in [(0, 0), (3, 5), (7, 2)] {
                let direct = idx.subst("a", &Val::Int(a)).subst("b", &Val::Int(b));
                assert_eq!(
                    eval_at(&idx, &[("a", a), ("b", b)], seed),
                    eval(&direct, "", 0, seed, &[], 1),
                    "seed {seed}, a {a}, b {b}"
                );
            }
        }
        // A division by zero fails as in the tree.
        let by_b = Val::div(Val::Int(6), var("b"));
        assert_eq!(eval_at(&by_b, &[("b", 0)], 0), None);
        assert_eq!(eval_at(&by_b, &[("b", 2)], 0), Some(3));
    }

    /// A failing operation fails the whole probe, whether it is folded or at the point.
    #[test]
    fn a_failing_operation_fails_the_probe() {
        let by_zero = Val::add(var("r"), Val::div(Val::Int(1), Val::Int(0)));
        assert_eq!(
            Probe::new(&by_zero, &[var("r")], 0).at(&[1], &mut Vec::new()),
            None
        );
        let by_r = Val::add(Val::Int(1), Val::div(Val::Int(1), var("r")));
        let probe = Probe::new(&by_r, &[var("r")], 0);
        assert_eq!(probe.at(&[0], &mut Vec::new()), None);
        assert_eq!(probe.at(&[1], &mut Vec::new()), Some(2));
        let not_integer = Val::add(var("r"), Val::True);
        assert_eq!(
            Probe::new(&not_integer, &[var("r")], 0).at(&[1], &mut Vec::new()),
            None
        );
        assert_eq!(eval(&not_integer, "r", 1, 0, &[], 1), None);
    }
}
