//! Probing index expressions at sampled values: the passes decide layout facts (lanes
//! consecutive in memory, a stride, a fragment's addresses) by evaluating an index at a few
//! points with every other variable and size set from a seed.
//!
//! Takes a [`Val`] and the leaves that vary; [`eval`] evaluates once, [`Probe`] prepares an
//! expression for evaluation at many points (the leaves that do not vary folded once per
//! seed, the rest a flat program: no tree rebuilt or allocation per point). Both give the same
//! value as substituting the point's integers into the tree and evaluating it with [`eval`]:
//! `None` when any operation of the tree fails (a division by zero, an overflowing product)
//! or the tree holds a leaf that has no integer value (`true`, `&&`, the warp index).

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
#[derive(Clone, Copy)]
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

/// One step of a probe's postfix program.
#[derive(Clone, Copy)]
enum Step {
    Const(i64),
    /// The point's value of free leaf `i`.
    Free(usize),
    Apply(Op),
}

/// An index expression prepared for evaluation at many points of its free leaves (variables
/// or hardware indices), every other leaf sampled from one seed as [`eval`] samples it.
pub(super) struct Probe {
    /// Postfix; empty when some operation fails whatever the point (the value is `None`).
    steps: Vec<Step>,
}

impl Probe {
    pub(super) fn new(idx: &Val, free: &[Val], seed: u64) -> Probe {
        let mut steps = Vec::new();
        match Self::compile(idx, free, seed, &mut steps) {
            Some(Some(c)) => Probe {
                steps: vec![Step::Const(c)],
            },
            Some(None) => Probe { steps },
            None => Probe { steps: Vec::new() },
        }
    }

    /// Appends the steps of `v` to `steps`, or returns its constant value (`Some(Some(c))`,
    /// nothing appended) when no free leaf appears in it; `None` when it fails whatever the
    /// point.
    fn compile(v: &Val, free: &[Val], seed: u64, steps: &mut Vec<Step>) -> Option<Option<i64>> {
        if let Some(i) = free.iter().position(|f| f == v) {
            steps.push(Step::Free(i));
            return Some(None);
        }
        let Some((a, b)) = v.operands() else {
            return leaf(v, seed, &[], 1).map(Some);
        };
        let op = Op::of(v)?;
        let mark = steps.len();
        let ca = Self::compile(a, free, seed, steps)?;
        let cb = Self::compile(b, free, seed, steps)?;
        match (ca, cb) {
            (Some(x), Some(y)) => Some(Some(op.apply(x, y)?)),
            (ca, cb) => {
                // A constant operand goes in as a step, where its subtree would have been.
                if let Some(x) = ca {
                    steps.insert(mark, Step::Const(x));
                }
                if let Some(y) = cb {
                    steps.push(Step::Const(y));
                }
                steps.push(Step::Apply(op));
                Some(None)
            }
        }
    }

    /// The value at `point` (the free leaves' values, in the order given to [`Probe::new`]);
    /// `stack` is scratch space, reused across calls.
    pub(super) fn at(&self, point: &[i64], stack: &mut Vec<i64>) -> Option<i64> {
        stack.clear();
        for step in &self.steps {
            let v = match *step {
                Step::Const(c) => c,
                Step::Free(i) => point[i],
                Step::Apply(op) => {
                    let b = stack.pop()?;
                    let a = stack.pop()?;
                    op.apply(a, b)?
                }
            };
            stack.push(v);
        }
        match stack.as_slice() {
            [v] => Some(*v),
            _ => None,
        }
    }
}

impl Probe {
    /// The values at many points at once: point `j` gives free leaf `i` the value
    /// `columns[i][j]` (every column as long as the first). One pass over the program, each
    /// step over every point: the step's dispatch is paid once, not once per point.
    pub(super) fn at_each(&self, columns: &[&[i64]]) -> Vec<Option<i64>> {
        let n = columns.first().map_or(1, |c| c.len());
        if self.steps.is_empty() {
            return vec![None; n];
        }
        // A point whose evaluation failed (its lanes of `stack` then hold 0).
        let mut failed = vec![false; n];
        let mut stack: Vec<Vec<i64>> = Vec::new();
        for step in &self.steps {
            match *step {
                Step::Const(c) => stack.push(vec![c; n]),
                Step::Free(i) => stack.push(columns[i].to_vec()),
                Step::Apply(op) => {
                    let (Some(b), Some(a)) = (stack.pop(), stack.last_mut()) else {
                        return vec![None; n];
                    };
                    // One loop per operation (the operation a constant in each): the
                    // compiler specialises `apply` instead of branching on it per point.
                    let lanes = |a: &mut [i64], failed: &mut [bool], op: Op| {
                        for ((x, &y), failed) in a.iter_mut().zip(&b).zip(failed) {
                            match op.apply(*x, y) {
                                Some(v) => *x = v,
                                None => (*x, *failed) = (0, true),
                            }
                        }
                    };
                    match op {
                        Op::Add => lanes(a, &mut failed, Op::Add),
                        Op::Sub => lanes(a, &mut failed, Op::Sub),
                        Op::Mul => lanes(a, &mut failed, Op::Mul),
                        Op::Div => lanes(a, &mut failed, Op::Div),
                        Op::Mod => lanes(a, &mut failed, Op::Mod),
                        Op::Xor => lanes(a, &mut failed, Op::Xor),
                        Op::Min => lanes(a, &mut failed, Op::Min),
                        Op::Lt => lanes(a, &mut failed, Op::Lt),
                        Op::Eq => lanes(a, &mut failed, Op::Eq),
                        Op::CeilDiv => lanes(a, &mut failed, Op::CeilDiv),
                    }
                }
            }
        }
        match stack.as_slice() {
            [v] => v
                .iter()
                .zip(&failed)
                .map(|(&v, &f)| (!f).then_some(v))
                .collect(),
            _ => vec![None; n],
        }
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
