//! Pass `simplify`: folds index arithmetic and drops predicates that are always true.
//!
//! Requires: nothing beyond a well-formed kernel. Guarantees the same values with fewer
//! operations: constant folding, `x + 0`, `x * 1`, `x * 0`, `x / 1`, `x % 1`, `(x % e) < e`,
//! `v < extent(v)` for a loop variable `v`, `(a * f + b) / f = a` and `(a * f + b) % f = b` when
//! `b` is a loop variable of extent `f`, `(a * k f + b) % f = b % f`, `(x / e) * e + x % e = x`,
//! `x / d < e` as `x < e * d` (indices are non-negative, `d` positive); `if true` disappears.
//! `rand`'s element index `x * 2^s + v` (a lane `v` below `2^s`) is written `x * 2^s ^ v`,
//! which NVVM folds the lanes' shared Philox call through (see `lane_as_xor`).
//! Hardware-bound variables range over their launch dimension. A kernel where nothing became
//! simpler is left as it was and says so ([`Change::Unchanged`]).

use super::context::Change;
use crate::kir::{visit_mut, Access, Data, Flow, IndexOf, Kernel, Stmt, Val, VisitorMut};
use std::collections::HashMap;
use std::convert::Infallible;

pub fn run(k: &mut Kernel) -> Change {
    let mut extents: HashMap<String, Val> = HashMap::new();
    // Whether anything became simpler (else the kernel is as it was, and says so).
    let mut changed = false;
    for b in &mut k.buffers {
        if let Some(s) = b.size.take() {
            b.size = Some(simplified(&s, &extents, &mut changed));
        }
        if let Some(s) = b.smem_offset.take() {
            b.smem_offset = Some(simplified(&s, &extents, &mut changed));
        }
    }
    // Hardware-bound variables range over their launch dimension.
    for (var, p) in &k.hw_vars {
        let d = p.dim().unwrap_or(0);
        let e = if p.is_block() {
            &k.grid[d]
        } else {
            &k.block[d]
        };
        extents.insert(var.clone(), Val::from_size(e));
    }
    let mut walk = Simplify {
        extents: &mut extents,
        changed,
        hidden: Vec::new(),
    };
    let Ok(()) = visit_mut(&mut k.body, &mut walk);
    Change::from_changed(walk.changed)
}

/// [`simplify`], noting in `changed` when the result differs.
fn simplified(v: &Val, ext: &HashMap<String, Val>, changed: &mut bool) -> Val {
    let s = simplify(v, ext);
    if s != *v {
        *changed = true;
    }
    s
}

/// Simplifies a kernel's statements in place (a rebuilt list is fresh memory for the whole
/// block); only a block where an `if` became `if true` is rebuilt, with that `if`'s statements
/// in its place. `extents` holds the range of each variable in scope: a loop's variable ranges
/// over its extent in its body.
struct Simplify<'e> {
    extents: &'e mut HashMap<String, Val>,
    changed: bool,
    /// The binding each loop entered hid (restored on leaving it), innermost last.
    hidden: Vec<Option<Val>>,
}

impl VisitorMut for Simplify<'_> {
    type Error = Infallible;

    fn stmt(&mut self, s: &mut Stmt, _at: usize) -> Result<Flow, Infallible> {
        let (ext, changed) = (&*self.extents, &mut self.changed);
        match s {
            Stmt::Loop(l) => l.extent = simplified(&l.extent, ext, changed),
            Stmt::If { cond, .. } => *cond = simplified(cond, ext, changed),
            Stmt::WarpRoles(w) => w.is_producer = simplified(&w.is_producer, ext, changed),
            Stmt::Compute(c) => {
                access(&mut c.out, ext, changed);
                data(&mut c.value, ext, changed);
            }
            Stmt::BlockReduce { acc, .. }
            | Stmt::QuadReduce { acc, .. }
            | Stmt::GridReduce(crate::kir::GridReduce { acc, .. }) => access(acc, ext, changed),
            Stmt::BlockWelford {
                mean, m2, count, ..
            } => {
                for a in [mean, m2, count] {
                    access(a, ext, changed);
                }
            }
            Stmt::Let { value, .. } => *value = simplified(value, ext, changed),
            // Statements without a body: every index they hold.
            _ => s.map_vals(&mut |v| simplified(v, ext, changed)),
        }
        Ok(Flow::Descend)
    }

    fn enter(&mut self, s: &Stmt, _body: usize) -> Result<Flow, Infallible> {
        if let Stmt::Loop(l) = s {
            self.hidden
                .push(self.extents.insert(l.var.clone(), l.extent.clone()));
        }
        Ok(Flow::Descend)
    }

    fn leave(&mut self, s: &mut Stmt, _body: usize) -> Result<(), Infallible> {
        if let Stmt::Loop(l) = s {
            match self.hidden.pop().expect("pushed on entering") {
                Some(p) => self.extents.insert(l.var.clone(), p),
                None => self.extents.remove(&l.var),
            };
        }
        Ok(())
    }

    fn block(&mut self, body: &mut Vec<Stmt>) -> Result<(), Infallible> {
        let always_true = |s: &Stmt| {
            matches!(
                s,
                Stmt::If {
                    cond: Val::True,
                    ..
                }
            )
        };
        if !body.iter().any(always_true) {
            return Ok(());
        }
        self.changed = true;
        let old = std::mem::take(body);
        for s in old {
            match s {
                Stmt::If {
                    cond: Val::True,
                    then,
                    ..
                } => body.extend(then),
                s => body.push(s),
            }
        }
        Ok(())
    }
}

fn access(a: &mut Access, ext: &HashMap<String, Val>, changed: &mut bool) {
    if let Some(i) = a.index.take() {
        a.index = Some(simplified(&i, ext, changed));
    }
}

fn data(d: &mut Data, ext: &HashMap<String, Val>, changed: &mut bool) {
    match d {
        Data::Read(a) => access(a, ext, changed),
        Data::Index(of, Some(v)) => {
            let mut s = simplify(v, ext);
            if matches!(of, IndexOf::Element(_)) {
                s = lane_as_xor(s, ext);
            }
            if s != *v {
                *v = s;
                *changed = true;
            }
        }
        d => d.each_operand_mut(&mut |x| data(x, ext, changed)),
    }
}

/// Simplifies bottom-up.
pub fn simplify(v: &Val, ext: &HashMap<String, Val>) -> Val {
    use Val::*;
    let s = |x: &Val| simplify(x, ext);
    match v {
        Add(a, b) => match (s(a), s(b)) {
            (Int(x), Int(y)) => Int(x + y),
            (Int(0), e) | (e, Int(0)) => e,
            // (x / e) * e + x % e = x
            (Mul(q, e1), Mod(x2, e2))
                if e1 == e2 && matches!(&*q, Div(x1, e0) if x1 == &x2 && e0 == &e1) =>
            {
                *x2
            }
            (a, b) => Val::add(a, b),
        },
        Sub(a, b) => match (s(a), s(b)) {
            (Int(x), Int(y)) => Int(x - y),
            (e, Int(0)) => e,
            (a, b) => Sub(Box::new(a), Box::new(b)),
        },
        Mul(a, b) => match (s(a), s(b)) {
            (Int(x), Int(y)) => Int(x.saturating_mul(y)),
            (Int(0), _) | (_, Int(0)) => Int(0),
            (Int(1), e) | (e, Int(1)) => e,
            (a, b) => Val::mul(a, b),
        },
        Div(a, b) => {
            let (a, b) = (s(a), s(b));
            match (&a, &b) {
                (Int(x), Int(y)) if *y != 0 => Int(x / y),
                (_, Int(1)) => a,
                _ => match split_affine(&a, &b, ext) {
                    Some((hi, _)) => hi,
                    None => Val::div(a, b),
                },
            }
        }
        Mod(a, b) => {
            let (a, b) = (s(a), s(b));
            match (&a, &b) {
                (Int(x), Int(y)) if *y != 0 => Int(x % y),
                (_, Int(1)) => Int(0),
                (Mul(_, k), m) if **k == *m || multiple_of(k, m) => Int(0),
                // (a + b * k) % k = a % k, also where k is a multiple of the modulus (indices
                // are non-negative)
                (Add(x, y), m) if matches!(&**y, Mul(_, k) if **k == *m || multiple_of(k, m)) => {
                    simplify(&Val::rem((**x).clone(), m.clone()), ext)
                }
                (Add(x, y), m) if matches!(&**x, Mul(_, k) if **k == *m || multiple_of(k, m)) => {
                    simplify(&Val::rem((**y).clone(), m.clone()), ext)
                }
                _ => match split_affine(&a, &b, ext) {
                    Some((_, lo)) => lo,
                    None => Val::rem(a, b),
                },
            }
        }
        CeilDiv(a, b) => match (s(a), s(b)) {
            (Int(x), Int(y)) if y > 0 => Int((x + y - 1) / y),
            (e, Int(1)) => e,
            (a, b) => Val::ceil_div(a, b),
        },
        Lt(a, b) => {
            let (a, b) = (s(a), s(b));
            match (&a, &b) {
                (Int(x), Int(y)) => bool_val(x < y),
                (Mod(_, m), e) if **m == *e => True,
                // x / d < e  <=>  x < e * d  (non-negative indices, positive d)
                (Div(x, d), e) => simplify(
                    &Val::lt((**x).clone(), Val::mul(e.clone(), (**d).clone())),
                    ext,
                ),
                (Var(name), e) if ext.get(name).is_some_and(|x| simplify(x, ext) == *e) => True,
                _ => Val::lt(a, b),
            }
        }
        Eq(a, b) => match (s(a), s(b)) {
            (Int(x), Int(y)) => bool_val(x == y),
            (a, b) => Val::eq(a, b),
        },
        And(a, b) => Val::and(s(a), s(b)),
        Xor(a, b) => match (s(a), s(b)) {
            (Int(x), Int(y)) => Int(x ^ y),
            (e, Int(0)) | (Int(0), e) => e,
            (a, b) => Xor(Box::new(a), Box::new(b)),
        },
        Min(a, b) => match (s(a), s(b)) {
            (Int(x), Int(y)) => Int(x.min(y)),
            (a, b) if a == b => a,
            (a, b) => Val::min(a, b),
        },
        other => other.clone(),
    }
}

/// `x * 2^s + v` as `x * 2^s ^ v` where the loop variable `v` ranges within `[0, 2^s)`: the
/// same value, the bits being disjoint. For `rand`'s element index only: NVVM does not see that
/// consecutive lanes of `+ v` share `index >> 2` (their Philox call), and of `^ v` it does
/// (fusions/dropout_residual at i32 and i64, sm_90a SASS: 260 `IMAD.WIDE` with `+`, 77 with
/// `^`, the memo's four calls per eight lanes folded to straight-line code).
fn lane_as_xor(v: Val, ext: &HashMap<String, Val>) -> Val {
    if let Val::Add(x, y) = &v {
        if let (Val::Mul(_, k), Val::Var(lane)) = (&**x, &**y) {
            let extent = ext.get(lane).map(|e| simplify(e, ext));
            if let (Val::Int(k), Some(Val::Int(e))) = (&**k, extent) {
                if *k > 0 && k.count_ones() == 1 && (1..=*k).contains(&e) {
                    return Val::Xor(x.clone(), y.clone());
                }
            }
        }
    }
    v
}

/// Whether constant `k` is a multiple of constant `m`.
fn multiple_of(k: &Val, m: &Val) -> bool {
    matches!((k, m), (Val::Int(k), Val::Int(m)) if *m != 0 && k % m == 0)
}

fn bool_val(b: bool) -> Val {
    if b {
        Val::True
    } else {
        Val::Lt(Box::new(Val::Int(1)), Box::new(Val::Int(0)))
    }
}

/// `a = hi * f + lo` with `lo` a variable ranging over exactly `[0, f)`.
fn split_affine(a: &Val, f: &Val, ext: &HashMap<String, Val>) -> Option<(Val, Val)> {
    if let Val::Add(x, y) = a {
        if let (Val::Mul(hi, g), Val::Var(lo)) = (&**x, &**y) {
            if **g == *f && ext.get(lo).is_some_and(|e| simplify(e, ext) == *f) {
                return Some(((**hi).clone(), Val::Var(lo.clone())));
            }
        }
    }
    None
}
