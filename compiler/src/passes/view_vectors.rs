//! Pass `view_vectors`: a view's reads of global memory inside a vectorized loop become one
//! aligned vector load per operand, issued before the loop into registers.
//!
//! A view that moves indices (`slice`, `pad`, `cat`, `reshape`, a gather) is recomputed from
//! its operands where it is read, so a compute of a vectorized tensor that reads one stays in
//! an unrolled loop over the vector's lanes and reads each lane's element with a scalar load
//! (rotary's `cat(-slice(x, start=64), slice(x, stop=64))` issues 8 predicated `LDG.U16` per 8
//! elements where one 16-byte load does). Each operand read is clamped into its operand
//! (`indexing`'s `view_roots`: `min(i, last)`, `i - min(i, 0)`), because it is also issued
//! where its `where` does not take it.
//!
//! Requires: the kernel's values final and simplified (`simplify`), a specialised kernel's
//! sizes substituted (`specialize`). Takes each `@Unroll` loop over the lanes of a vector: its
//! key is the loop key of an axis the schedule parallelized `Vectorize` (the honest marker: a
//! vectorized axis whose compute `predicate` did not make one vector access stays such a
//! loop), its extent a constant `W >= 2`, and its body one compute, alone or under
//! conditionals without `else` (bounds predicates). In that compute it takes each read of a
//! global buffer that a view reads (inside a `view@`, or any read of a compute that is itself
//! a view) at an index that mentions the lane variable `v`, where it proves, by the lane
//! analysis below:
//!
//! - the read's guard is uniform over the lanes: the guard is the conjunction of the
//!   conditionals around the compute (each a `<` of index values, or a condition without
//!   `v`, else the loop is left alone: the read is in bounds only where they hold) and the
//!   conditions of the `where`s whose taken branch holds the read (a condition for its
//!   `then`, its negation for its `else`: integer comparisons, `index@1[i] < 64`, `i >= b`,
//!   `&&` of those). A `where` condition not understood or not uniform is left out of the
//!   guard: the clamps keep the read inside its tensor without it, so the load is only
//!   issued more often (its facts are then not known, and a clamp they would resolve stays);
//! - where the guard holds, the index is `s + v` with `s` a multiple of `W` (so lane `v` reads
//!   element `s + v`, and the vector of `W` elements at `s` is `W * size` bytes aligned; the
//!   buffer's base is, as every vector access assumes); the clamps are resolved under the
//!   guard: `min(a, b)` is `a` where `b - a >= 0` follows from one fact of the guard (or from
//!   no fact), `b` where `a - b >= 0` does.
//!
//! The lane analysis, in the style of Triton's AxisInfo: a value is `c * v + e` with `e` the
//! same in every lane ([`Form`]: the coefficient `c`, a divisor of `e`, whether `e >= 0`),
//! through sums, differences and products by constants (affine terms); `(e + v) / M` is the
//! same in every lane and `(e + v) % M` is `e % M + v` when `W` divides `e` and `M` and
//! `e >= 0` (the lanes stay inside one block of `M`). A comparison `x < y` is the same in
//! every lane when `d = y - x - 1` is (`c = 0`), or is `e + v` with `W | e` (`d >= 0` in every
//! lane or in none), or `e - v` with `W | e + 1`. Divisors come from constants only: a size
//! symbol of a generic kernel divides nothing, so there the pass declines unless the extents
//! involved are constants of the fusion.
//!
//! The facts are the comparisons' as index values; the `where` compares `index@1[i]` as an
//! i32, as `iota` does, so the two agree while an axis's index fits an i32 (where they did not,
//! the load would still stay in bounds).
//!
//! Guarantees: where the guard holds at lane 0 it holds in every lane, every clamp is
//! inactive, and the vector holds exactly the `W` elements the lanes read (so no access leaves
//! its tensor: the clamped reads were inside it); where it does not, no lane takes the read
//! and no load is issued. Anything not proved leaves the read as it is. A width of more than
//! 16 bytes, or not a power of two bytes, is declined.
//!
//! Emits: for each taken read (one per distinct buffer, start and guard), a register array
//! `{out}_{buffer}` of `W` elements of the buffer's type, allocated before the lane loop and
//! filled there by `if guard(0): vector<W> over v: a[0] = buffer[s]` `else:` zeros (an
//! unrolled loop, so a lane the `where` does not take reads a defined value); the read becomes
//! `a[v]`. Reads of one type whose guards exclude each other (one has a comparison the other
//! negates: a cat's two operands, rotary's halves) share one array (named after the first),
//! filled by `if g1: load1 else: if g2: load2 else: zeros`: where the `where` takes one, the
//! array holds its elements.

use super::context::{Change, Ctx, LoopKey};
use super::simplify::simplify;
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::fusion::{BinaryOp, IterId, MemoryType, ParallelType, TernaryOp};
use crate::kir::{
    for_each_block_mut, Access, Buffer, BufferId, Compute, ComputeRole, Data, Kernel, Loop, Stmt,
    Val,
};
use rustc_hash::FxHashSet;

/// Whether the fusion has a vectorized axis and a view that moves indices.
pub fn used(cx: &Ctx) -> bool {
    let f = cx.fusion;
    f.ids.iter().any(|a| a.parallel == ParallelType::Vectorize)
        && f.exprs.iter().any(|e| e.op.moves_indices())
}

pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<Change, Diagnostic> {
    let vector_keys: FxHashSet<LoopKey> = (0..cx.fusion.ids.len())
        .map(IterId::new)
        .filter(|&id| cx.fusion.ids[id].parallel == ParallelType::Vectorize)
        .filter_map(|id| cx.keys.of_axis.get(&id).copied())
        .collect();
    let signed = signed_lets(k);
    let mut body = std::mem::take(&mut k.body);
    let mut hoist = Hoist {
        cx,
        buffers: &mut k.buffers,
        vector_keys,
        signed,
        changed: false,
    };
    for_each_block_mut(&mut body, &mut |block| hoist.block(block));
    let changed = hoist.changed;
    k.body = body;
    Ok(Change::from_changed(changed))
}

/// The `let` variables of the kernel (its statements' and a stream-K split's constants) whose
/// value is not known to be `>= 0` (loop variables are).
fn signed_lets(k: &Kernel) -> Vec<String> {
    let mut lets: Vec<(String, Val)> = crate::kir::stream_k(k)
        .map(|sk| sk.consts.clone())
        .unwrap_or_default();
    crate::kir::for_each_stmt(&k.body, &mut |s| {
        if let Stmt::Let { var, value, .. } = s {
            lets.push((var.clone(), value.clone()));
        }
    });
    // A let's value may read another let: drop those known non-negative, to a fixpoint.
    let mut signed: Vec<String> = lets.iter().map(|(n, _)| n.clone()).collect();
    loop {
        let next: Vec<String> = lets
            .iter()
            .filter(|(n, v)| signed.contains(n) && !nonneg(v, &signed))
            .map(|(n, _)| n.clone())
            .collect();
        if next.len() == signed.len() {
            return signed;
        }
        signed = next;
    }
}

/// What the analysis knows of an index value over the lanes `v` in `[0, W)`: it is
/// `coef * v + e`, `e` the same in every lane, a multiple of `div` (0: `e` is 0), and `e >= 0`
/// when `nonneg`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Form {
    pub coef: i64,
    pub div: i64,
    pub nonneg: bool,
}

fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    i64::try_from(a).unwrap_or(1)
}

/// `a` divides `b` (every `b` when `b` is 0).
fn divides(a: i64, b: i64) -> bool {
    a != 0 && b % a == 0
}

/// Whether the value is never negative: loop variables (not those of `signed`, the `let`s
/// whose value may be negative), indices, sizes and the sums, products, quotients,
/// remainders and minimums of such.
pub fn nonneg(v: &Val, signed: &[String]) -> bool {
    match v {
        Val::Int(i) => *i >= 0,
        Val::Var(n) => !signed.contains(n),
        Val::Sub(..) => false,
        _ => match v.operands() {
            Some((a, b)) => nonneg(a, signed) && nonneg(b, signed),
            None => true,
        },
    }
}

/// The lane analysis of one lane loop: its variable, width, and the facts known where a read
/// is taken (values `>= 0` in every lane, as sums of terms).
pub struct Lanes<'a> {
    pub var: &'a str,
    pub width: i64,
    pub facts: Facts,
    /// The variables that may be negative (`let`s whose value is not known not to be).
    pub signed: &'a [String],
}

/// Values `>= 0` in every lane where a read is taken, each as the sum of its terms.
pub type Facts = Vec<Vec<(i64, Val)>>;

/// `v`'s affine terms with equal terms added up and zero coefficients dropped.
fn terms(v: &Val) -> Option<Vec<(i64, Val)>> {
    let mut out: Vec<(i64, Val)> = Vec::new();
    for (c, t) in v.affine_terms()? {
        match out.iter_mut().find(|(_, u)| *u == t) {
            Some((d, _)) => *d = d.checked_add(c)?,
            None => out.push((c, t)),
        }
    }
    out.retain(|(c, _)| *c != 0);
    Some(out)
}

impl Lanes<'_> {
    /// The form of a value with no minimum of the lane variable left (see [`Lanes::resolve`]);
    /// `None` where the lane variable appears in any other way than the module doc's.
    pub fn form(&self, v: &Val) -> Option<Form> {
        if !v.mentions(self.var) {
            return Some(constant_form(v, self.signed));
        }
        let w = self.width;
        match v {
            Val::Var(_) => Some(Form {
                coef: 1,
                div: 0,
                nonneg: true,
            }),
            Val::Div(a, m) | Val::Mod(a, m) => {
                let (&Val::Int(m), f) = (&**m, self.form(a)?) else {
                    return None;
                };
                // The lanes of `e + v` stay in one block of `m`.
                let one_block = f.coef == 1 && f.nonneg && divides(w, f.div) && divides(w, m);
                if !one_block {
                    return None;
                }
                Some(match v {
                    Val::Div(..) => Form {
                        coef: 0,
                        div: match f.div {
                            0 => 0,
                            d if d % m == 0 => d / m,
                            _ => 1,
                        },
                        nonneg: true,
                    },
                    _ => Form {
                        coef: 1,
                        div: gcd(f.div, m),
                        nonneg: true,
                    },
                })
            }
            Val::Add(..) | Val::Sub(..) | Val::Mul(..) => {
                let mut sum = Form {
                    coef: 0,
                    div: 0,
                    nonneg: true,
                };
                // Equal terms added up first: `(64 - x - 1) + 1` is `64 - x`.
                for (c, t) in terms(v)? {
                    let f = match t {
                        Val::Int(1) => constant_form(&Val::Int(1), self.signed),
                        // A product of two values (not by a constant) of the lane.
                        Val::Add(..) | Val::Sub(..) | Val::Mul(..) if t.mentions(self.var) => {
                            return None
                        }
                        _ => self.form(&t)?,
                    };
                    sum.coef = sum.coef.checked_add(c.checked_mul(f.coef)?)?;
                    sum.div = gcd(sum.div, c.checked_mul(f.div).unwrap_or(1));
                    sum.nonneg &= c >= 0 && f.nonneg;
                }
                Some(sum)
            }
            _ => None,
        }
    }

    /// The value with each minimum that involves the lane variable replaced by the operand it
    /// is where the facts hold (the clamps of a view's read, inactive where it is taken);
    /// `None` where one is not decided.
    pub fn resolve(&self, v: &Val) -> Option<Val> {
        if !v.mentions(self.var) {
            return Some(v.clone());
        }
        match (v, v.operands()) {
            (Val::Min(a, b), _) => {
                let (a, b) = (self.resolve(a)?, self.resolve(b)?);
                if self.proves_nonneg(&Val::sub(b.clone(), a.clone())) {
                    Some(a)
                } else if self.proves_nonneg(&Val::sub(a, b.clone())) {
                    Some(b)
                } else {
                    None
                }
            }
            (_, Some((a, b))) => Some(v.with_operands(self.resolve(a)?, self.resolve(b)?)),
            (_, None) => Some(v.clone()),
        }
    }

    /// Whether `d >= 0` in every lane where the facts hold: its terms' bounds alone say so, or
    /// `d` minus one fact does.
    pub fn proves_nonneg(&self, d: &Val) -> bool {
        let Some(dt) = terms(d) else {
            return false;
        };
        if self.lower_bound(&dt).is_some_and(|lo| lo >= 0) {
            return true;
        }
        self.facts.iter().any(|fact| {
            let mut rest = dt.clone();
            for (c, t) in fact {
                match rest.iter_mut().find(|(_, u)| u == t) {
                    Some((d, _)) => *d -= c,
                    None => rest.push((-c, t.clone())),
                }
            }
            rest.retain(|(c, _)| *c != 0);
            self.lower_bound(&rest).is_some_and(|lo| lo >= 0)
        })
    }

    /// The least value of `Σ c * t` from each term's bounds.
    fn lower_bound(&self, terms: &[(i64, Val)]) -> Option<i64> {
        terms.iter().try_fold(0i64, |sum, (c, t)| {
            let (lo, hi) = self.bounds(t);
            let end = if *c > 0 { lo } else { hi }?;
            sum.checked_add(c.checked_mul(end)?)
        })
    }

    /// The least and greatest value of a term, where known.
    fn bounds(&self, t: &Val) -> (Option<i64>, Option<i64>) {
        match t {
            Val::Int(i) => (Some(*i), Some(*i)),
            Val::Var(n) if n == self.var => (Some(0), Some(self.width - 1)),
            Val::Mod(x, m) => match **m {
                Val::Int(m) if m > 0 && nonneg(x, self.signed) => (Some(0), Some(m - 1)),
                Val::Int(m) if m > 0 => (Some(1 - m), Some(m - 1)),
                _ => (None, None),
            },
            Val::Min(a, b) => {
                let ((la, ha), (lb, hb)) = (self.bounds(a), self.bounds(b));
                let hi = match (ha, hb) {
                    (Some(x), Some(y)) => Some(x.min(y)),
                    (x, y) => x.or(y),
                };
                (la.zip(lb).map(|(x, y)| x.min(y)), hi)
            }
            _ => (nonneg(t, self.signed).then_some(0), None),
        }
    }

    /// Whether `lhs < rhs` has the same truth in every lane (module doc).
    pub fn uniform_less(&self, lhs: &Val, rhs: &Val) -> bool {
        let d = Val::sub(Val::sub(rhs.clone(), lhs.clone()), Val::Int(1));
        let Some(f) = self.form(&d) else {
            return false;
        };
        match f.coef {
            0 => true,
            1 => divides(self.width, f.div),
            -1 => self
                .form(&Val::add(d, Val::Int(1)))
                .is_some_and(|g| divides(self.width, g.div)),
            _ => false,
        }
    }
}

/// The form of a value the same in every lane: its divisor and sign.
pub fn constant_form(v: &Val, signed: &[String]) -> Form {
    let div = |v: &Val| constant_form(v, signed).div;
    let d = match v {
        Val::Int(i) => *i,
        Val::Add(a, b) | Val::Sub(a, b) | Val::Min(a, b) => gcd(div(a), div(b)),
        Val::Mul(a, b) => {
            let (x, y) = (div(a), div(b));
            x.checked_mul(y).unwrap_or(x)
        }
        Val::Div(a, m) => match (div(a), &**m) {
            (0, _) => 0,
            (d, Val::Int(m)) if *m != 0 && d % m == 0 => d / m,
            _ => 1,
        },
        Val::Mod(a, m) => match &**m {
            Val::Int(m) => gcd(div(a), *m),
            _ => 1,
        },
        _ => 1,
    };
    Form {
        coef: 0,
        div: d.abs(),
        nonneg: nonneg(v, signed),
    }
}

/// One condition of a read's guard: `lhs < rhs`, or a condition that does not mention the lane
/// variable (true or false in every lane; no fact is drawn from it).
#[derive(Clone, Debug, PartialEq)]
pub enum Atom {
    Less(Val, Val),
    Other(Val),
}

impl Atom {
    /// The condition as a value.
    fn val(&self) -> Val {
        match self {
            Atom::Less(a, b) => Val::lt(a.clone(), b.clone()),
            Atom::Other(c) => c.clone(),
        }
    }

    /// `not (a < b)`, that is `b - 1 < a` (integers).
    fn negated(a: Val, b: Val) -> Atom {
        Atom::Less(plus(b, -1), a)
    }

    /// Whether `other` is this comparison's negation as [`Atom::negated`] writes it.
    fn negates(&self, other: &Atom) -> bool {
        match self {
            Atom::Less(a, b) => *other == Atom::negated(a.clone(), b.clone()),
            Atom::Other(_) => false,
        }
    }
}

/// `v + k`, folded when `v` is a constant.
fn plus(v: Val, k: i64) -> Val {
    match v {
        Val::Int(i) => Val::Int(i.saturating_add(k)),
        v if k < 0 => Val::sub(v, Val::Int(-k)),
        v => Val::add(v, Val::Int(k)),
    }
}

/// The atoms of a conditional's condition (a `&&` of comparisons), `None` where one mentions
/// `var` and is not a `<` (an `elect.sync` is no function of the indices: also declined).
pub fn val_atoms(cond: &Val, var: &str, out: &mut Vec<Atom>) -> Option<()> {
    if cond.any_leaf(&|l| matches!(l, Val::Elect)) {
        return None;
    }
    match cond {
        Val::And(a, b) => {
            val_atoms(a, var, out)?;
            val_atoms(b, var, out)
        }
        Val::Lt(a, b) => {
            out.push(Atom::Less((**a).clone(), (**b).clone()));
            Some(())
        }
        Val::True => Some(()),
        c if !c.mentions(var) => {
            out.push(Atom::Other(c.clone()));
            Some(())
        }
        _ => None,
    }
}

/// An integer index value a `where` condition compares: an index, an integer literal, a size
/// (a symbol of `symbols`), and sums, differences and products of those.
fn data_val(d: &Data, symbols: &[String]) -> Option<Val> {
    match d {
        Data::Index(_, Some(v)) => Some(v.clone()),
        Data::Literal(x, _) if x.fract() == 0.0 && x.abs() < 9.0e15 => Some(Val::Int(*x as i64)),
        Data::Param(n, _) if symbols.contains(n) => Some(Val::Size(n.clone())),
        Data::Binary(
            op @ (BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul),
            DType::I32 | DType::I64,
            x,
            y,
        ) => {
            let (x, y) = (data_val(x, symbols)?, data_val(y, symbols)?);
            Some(match op {
                BinaryOp::Add => Val::add(x, y),
                BinaryOp::Sub => Val::sub(x, y),
                _ => Val::mul(x, y),
            })
        }
        _ => None,
    }
}

/// The atoms of a `where` condition (`taken`: its `then` branch, else its `else`): integer
/// comparisons and their `&&` (whose negation is no conjunction: declined).
pub fn data_atoms(cond: &Data, taken: bool, symbols: &[String], out: &mut Vec<Atom>) -> Option<()> {
    match cond {
        Data::Binary(BinaryOp::LogicalAnd, _, a, b) if taken => {
            data_atoms(a, true, symbols, out)?;
            data_atoms(b, true, symbols, out)
        }
        Data::Binary(
            op @ (BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge),
            DType::I32 | DType::I64,
            a,
            b,
        ) => {
            let (a, b) = (data_val(a, symbols)?, data_val(b, symbols)?);
            // As `x < y` where the comparison holds (`a >= b` as `b - 1 < a`).
            let (x, y) = match op {
                BinaryOp::Lt => (a, b),
                BinaryOp::Le => (a, plus(b, 1)),
                BinaryOp::Gt => (b, a),
                _ => (plus(b, -1), a),
            };
            out.push(if taken {
                Atom::Less(x, y)
            } else {
                Atom::negated(x, y)
            });
            Some(())
        }
        _ => None,
    }
}

/// The guard of a read: the conditions of the conditionals around its compute (`conds`: the
/// read is issued only where they hold, so each must be understood), and those of the
/// `where` branches that hold it (`wheres`: its clamps keep it inside its tensor without
/// them, so one not understood or not the same in every lane is left out of the guard,
/// which then holds in more places: the load is issued more often, never out of bounds).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Guard {
    pub conds: Vec<Atom>,
    pub wheres: Vec<Atom>,
}

/// The atoms of `guard` kept (all of `conds`, the uniform ones of `wheres`) and the facts
/// they give (each `y - x - 1 >= 0` of `x < y`), or `None` where a condition of `conds` is
/// not the same in every lane or a fact's terms overflow.
pub fn guard_facts(lanes: &Lanes, guard: &Guard) -> Option<(Vec<Atom>, Facts)> {
    let (mut kept, mut facts) = (Vec::new(), Vec::new());
    let required = guard.conds.iter().map(|a| (a, true));
    for (atom, required) in required.chain(guard.wheres.iter().map(|a| (a, false))) {
        let uniform = match atom {
            Atom::Less(x, y) => lanes.uniform_less(x, y),
            Atom::Other(c) => !c.mentions(lanes.var),
        };
        if !uniform {
            if required {
                return None;
            }
            continue;
        }
        if let Atom::Less(x, y) = atom {
            facts.push(terms(&Val::sub(
                Val::sub(y.clone(), x.clone()),
                Val::Int(1),
            ))?);
        }
        kept.push(atom.clone());
    }
    Some((kept, facts))
}

/// A proven vector read: where it starts at lane 0, and the guard at lane 0 (`true`: none).
#[derive(Clone, Debug, PartialEq)]
pub struct VectorRead {
    pub start: Val,
    pub guard: Val,
    /// The guard's atoms (in every lane's terms).
    pub atoms: Vec<Atom>,
}

impl VectorRead {
    /// Whether the two reads are never both taken: one's guard has a comparison whose negation
    /// the other's has (a cat's two operands).
    fn excludes(&self, other: &VectorRead) -> bool {
        self.atoms
            .iter()
            .any(|a| other.atoms.iter().any(|b| a.negates(b) || b.negates(a)))
    }
}

/// The vector read of `index` under `guard` in a lane loop over `var` of `width` lanes (the
/// variables of `signed` may be negative), or `None` where the module doc's conditions are
/// not proved.
pub fn vector_read(
    (var, width): (&str, i64),
    signed: &[String],
    guard: &Guard,
    index: &Val,
) -> Option<VectorRead> {
    let mut lanes = Lanes {
        var,
        width,
        facts: Vec::new(),
        signed,
    };
    let (kept, facts) = guard_facts(&lanes, guard)?;
    lanes.facts = facts;
    let resolved = lanes.resolve(index)?;
    let f = lanes.form(&resolved)?;
    if f.coef != 1 || !divides(width, f.div) {
        return None;
    }
    let no_facts = Default::default();
    let lane0 = |v: &Val| simplify(&v.subst(var, &Val::Int(0)), &no_facts);
    Some(VectorRead {
        start: lane0(&resolved),
        guard: lane0(&Val::all(kept.iter().map(Atom::val))),
        atoms: kept,
    })
}

/// The rewrite: finds the lane loops of each block and hoists their compute's view reads.
struct Hoist<'c, 'f> {
    cx: &'c mut Ctx<'f>,
    buffers: &'c mut Vec<Buffer>,
    vector_keys: FxHashSet<LoopKey>,
    /// The `let` variables whose value may be negative.
    signed: Vec<String>,
    changed: bool,
}

/// One lane loop's hoisted reads: the register arrays and the statements that fill them.
struct Taken {
    arrays: Vec<Array>,
    stmts: Vec<Stmt>,
}

/// A register array of hoisted reads: the reads (each global buffer and vector read, under
/// guards that exclude each other), the array, and the place in [`Taken::stmts`] of the
/// statement that fills it.
struct Array {
    reads: Vec<(BufferId, VectorRead)>,
    buffer: BufferId,
    fill: usize,
}

impl Hoist<'_, '_> {
    fn block(&mut self, block: &mut Vec<Stmt>) {
        let mut at = 0;
        while at < block.len() {
            let hoisted = match &mut block[at] {
                Stmt::Loop(l) => self.lane_loop(l),
                _ => Vec::new(),
            };
            let n = hoisted.len();
            block.splice(at..at, hoisted);
            at += n + 1;
        }
    }

    /// The statements to put before loop `l` (none when it is no lane loop or nothing is
    /// taken), its compute rewritten to read them.
    fn lane_loop(&mut self, l: &mut Loop) -> Vec<Stmt> {
        let Val::Int(width) = l.extent else {
            return Vec::new();
        };
        if l.parallel != ParallelType::Unroll
            || !self.vector_keys.contains(&l.key)
            || width < 2
            || !l.digits.is_empty()
        {
            return Vec::new();
        }
        // The one compute, under conditionals without `else`.
        let mut guard = Guard::default();
        let mut body = &mut l.body;
        let c = loop {
            match body.as_mut_slice() {
                [Stmt::Compute(c)] if c.vector.is_none() => break c,
                [Stmt::If { cond, then, els }] if els.is_empty() => {
                    if val_atoms(cond, &l.var, &mut guard.conds).is_none() {
                        return Vec::new();
                    }
                    body = then;
                }
                _ => return Vec::new(),
            }
        };
        let mut taken = Taken {
            arrays: Vec::new(),
            stmts: Vec::new(),
        };
        let own_view = self.cx.fusion.exprs[c.expr].op.moves_indices();
        let site = Site {
            var: &l.var,
            key: l.key,
            width,
            expr: c.expr,
            out: self.buffers[c.out.buffer].name.clone(),
        };
        self.reads(&site, &mut c.value, own_view, &mut guard, &mut taken);
        self.changed |= !taken.stmts.is_empty();
        taken.stmts
    }

    /// Takes the view reads of `d` (`in_view`: inside a view) under `guard`.
    fn reads(
        &mut self,
        site: &Site,
        d: &mut Data,
        in_view: bool,
        guard: &mut Guard,
        taken: &mut Taken,
    ) {
        match d {
            Data::Read(a) if in_view => {
                if let Some(local) = self.take(site, a, guard, taken) {
                    *a = local;
                }
            }
            Data::View(_, x) => self.reads(site, x, true, guard, taken),
            Data::Unary(_, _, x) | Data::Cast(_, x) => self.reads(site, x, in_view, guard, taken),
            Data::Binary(_, _, x, y) => {
                self.reads(site, x, in_view, guard, taken);
                self.reads(site, y, in_view, guard, taken);
            }
            Data::Ternary(TernaryOp::Where, _, xs) => {
                let [cond, a, b] = &mut **xs;
                self.reads(site, cond, in_view, guard, taken);
                for (x, branch) in [(a, true), (b, false)] {
                    let mark = guard.wheres.len();
                    // A condition not understood is left out (see `Guard`).
                    let symbols = &self.cx.fusion.symbols;
                    if data_atoms(cond, branch, symbols, &mut guard.wheres).is_none() {
                        guard.wheres.truncate(mark);
                    }
                    self.reads(site, x, in_view, guard, taken);
                    guard.wheres.truncate(mark);
                }
            }
            Data::Ternary(_, _, xs) => {
                for x in xs.iter_mut() {
                    self.reads(site, x, in_view, guard, taken);
                }
            }
            Data::Read(_) | Data::Param(..) | Data::Literal(..) | Data::Index(..) => {}
        }
    }

    /// The register read replacing global read `a` under `guard` when it is taken (its array
    /// filled by statements pushed on `taken`).
    fn take(
        &mut self,
        site: &Site,
        a: &Access,
        guard: &Guard,
        taken: &mut Taken,
    ) -> Option<Access> {
        let buf = &self.buffers[a.buffer];
        let index = a.index.as_ref()?;
        let bytes = site.width.checked_mul(buf.dtype.size_bytes() as i64)?;
        if buf.memory != MemoryType::Global
            || !index.mentions(site.var)
            || bytes > 16
            || !(bytes as u64).is_power_of_two()
        {
            return None;
        }
        let read = vector_read((site.var, site.width), &self.signed, guard, index)?;
        let lane = |b: BufferId| Access {
            buffer: b,
            index: Some(Val::Var(site.var.to_string())),
        };
        let global = a.buffer;
        let same = |x: &(BufferId, VectorRead)| x.0 == global && x.1 == read;
        if let Some(x) = taken.arrays.iter().find(|x| x.reads.iter().any(same)) {
            return Some(lane(x.buffer));
        }
        let dtype = buf.dtype;
        let compute = |out: Access, value: Data, vector| {
            Stmt::Compute(Compute {
                expr: site.expr,
                out,
                value,
                role: ComputeRole::Normal,
                vector,
            })
        };
        let load = |b: BufferId| {
            compute(
                Access {
                    buffer: b,
                    index: Some(Val::Int(0)),
                },
                Data::Read(Access {
                    buffer: global,
                    index: Some(read.start.clone()),
                }),
                Some((site.var.to_string(), site.width as u32)),
            )
        };
        // A read never taken where the array's others are (a cat's other operand) shares their
        // array: its load is the `else` of theirs.
        let exclusive = |x: &Array| {
            self.buffers[x.buffer].dtype == dtype && x.reads.iter().all(|r| r.1.excludes(&read))
        };
        if let Some(x) = taken.arrays.iter_mut().find(|x| exclusive(x)) {
            chain(&mut taken.stmts[x.fill], read.guard.clone(), load(x.buffer));
            x.reads.push((global, read));
            return Some(lane(x.buffer));
        }
        let name = self.fresh(&format!("{}_{}", site.out, buf.name));
        let b = BufferId::new(self.buffers.len());
        self.buffers.push(Buffer {
            name,
            dtype,
            memory: MemoryType::Local,
            tensor: None,
            size: Some(Val::Int(site.width)),
            smem_offset: None,
            global_shape: Vec::new(),
            is_input: false,
            l2: crate::fusion::L2Policy::Normal,
        });
        taken.stmts.push(Stmt::Alloc(b));
        taken.stmts.push(if read.guard == Val::True {
            load(b)
        } else {
            let zeros = Stmt::Loop(Loop {
                key: site.key,
                var: site.var.to_string(),
                extent: Val::Int(site.width),
                parallel: ParallelType::Unroll,
                body: vec![compute(lane(b), Data::Literal(0.0, dtype.compute()), None)],
                digits: Vec::new(),
            });
            Stmt::If {
                cond: read.guard.clone(),
                then: vec![load(b)],
                els: vec![zeros],
            }
        });
        taken.arrays.push(Array {
            reads: vec![(global, read)],
            buffer: b,
            fill: taken.stmts.len() - 1,
        });
        Some(lane(b))
    }

    /// A fresh buffer name (no buffer of the kernel has it).
    fn fresh(&mut self, base: &str) -> String {
        let mut name = self.cx.fresh_name(base);
        while self.buffers.iter().any(|b| b.name == name) {
            name = self.cx.fresh_name(base);
        }
        name
    }
}

/// Puts `if cond: load` before the zeros at the end of the `else` chain of `fill` (an array's
/// `if g1: load1 else: ... else: zeros`).
fn chain(fill: &mut Stmt, cond: Val, load: Stmt) {
    let Stmt::If { els, .. } = fill else {
        return;
    };
    match els.as_mut_slice() {
        [inner @ Stmt::If { .. }] => chain(inner, cond, load),
        _ => {
            let zeros = std::mem::take(els);
            *els = vec![Stmt::If {
                cond,
                then: vec![load],
                els: zeros,
            }];
        }
    }
}

/// Where the reads being taken are: the lane loop and its compute.
struct Site<'a> {
    var: &'a str,
    key: LoopKey,
    width: i64,
    expr: crate::fusion::ExprId,
    out: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::probe::eval_at;

    fn var(n: &str) -> Val {
        Val::Var(n.into())
    }
    fn int(i: i64) -> Val {
        Val::Int(i)
    }
    fn sub(a: Val, b: Val) -> Val {
        Val::sub(a, b)
    }

    /// `(o * 128 + t) * 8 + v`: the flat index of lane `v` of thread `t`'s vector of 8.
    fn flat() -> Val {
        Val::add(
            Val::mul(Val::add(Val::mul(var("o"), int(128)), var("t")), int(8)),
            var("v"),
        )
    }

    fn lanes(facts: Vec<Vec<(i64, Val)>>) -> Lanes<'static> {
        Lanes {
            var: "v",
            width: 8,
            facts,
            signed: &[],
        }
    }

    fn read(guard: &Guard, index: &Val) -> Option<VectorRead> {
        vector_read(("v", 8), &[], guard, index)
    }

    /// `i - min(i, 0)`: `view_roots`'s clamp from below.
    fn non_negative(i: Val) -> Val {
        sub(i.clone(), Val::min(i, int(0)))
    }

    /// Rotary's cat of two slices of a row of 128: (index, guard) of each operand's read.
    fn rotary() -> [(Val, Guard); 2] {
        let col = || Val::rem(flat(), int(128));
        let row = || Val::mul(Val::div(flat(), int(128)), int(128));
        let first = Val::add(row(), Val::add(int(64), Val::min(col(), int(63))));
        let second = Val::add(row(), non_negative(sub(col(), int(64))));
        let mut taken = Guard::default();
        data_atoms(
            &lt(Val::rem(flat(), int(128)), 64),
            true,
            &[],
            &mut taken.wheres,
        )
        .unwrap();
        let mut other = Guard::default();
        data_atoms(
            &lt(Val::rem(flat(), int(128)), 64),
            false,
            &[],
            &mut other.wheres,
        )
        .unwrap();
        [(first, taken), (second, other)]
    }

    /// `lt<i32>(index@1[i], c)`, a cat's condition.
    fn lt(i: Val, c: i64) -> Data {
        Data::Binary(
            BinaryOp::Lt,
            DType::I32,
            Box::new(Data::Index(crate::kir::IndexOf::Axis(1), Some(i))),
            Box::new(Data::Literal(c as f64, DType::I32)),
        )
    }

    /// `ge<i32>(index@1[i], c)`, a pad's lower condition.
    fn ge(i: Val, c: i64) -> Data {
        Data::Binary(
            BinaryOp::Ge,
            DType::I32,
            Box::new(Data::Index(crate::kir::IndexOf::Axis(1), Some(i))),
            Box::new(Data::Literal(c as f64, DType::I32)),
        )
    }

    #[test]
    fn a_remainder_by_a_multiple_of_the_width_keeps_the_lane_and_a_quotient_drops_it() {
        let l = lanes(Vec::new());
        let form = |v: Val| l.form(&v);
        let lane = |div| {
            Some(Form {
                coef: 1,
                div,
                nonneg: true,
            })
        };
        // (X*8 + v) % 128 = (X*8) % 128 + v; (X*8 + v) / 128 is the same in every lane.
        assert_eq!(form(Val::rem(flat(), int(128))), lane(8));
        assert_eq!(
            form(Val::div(flat(), int(128))),
            Some(Form {
                coef: 0,
                div: 1,
                nonneg: true
            })
        );
        // Row 128 * (flat / 128) + 64 + flat % 128: 8 divides the start.
        let row = Val::mul(Val::div(flat(), int(128)), int(128));
        assert_eq!(
            form(Val::add(row, Val::add(int(64), Val::rem(flat(), int(128))))),
            lane(8)
        );
        // A width that does not divide the modulus: lanes may wrap.
        assert_eq!(form(Val::rem(flat(), int(100))), None);
        assert_eq!(form(Val::div(flat(), int(100))), None);
        // A start that is not a multiple of the width: (X*8 + 4 + v) % 128 may wrap.
        assert_eq!(form(Val::rem(Val::add(flat(), int(4)), int(128))), None);
        // A negative start: C's quotient truncates toward zero, so (-128 + v) / 128 varies.
        assert_eq!(form(Val::div(sub(flat(), int(128)), int(128))), None);
        // Stride 2 (a slice with step 2) and a product of the lane with a variable.
        assert_eq!(form(Val::mul(flat(), int(2))).map(|f| f.coef), Some(2));
        assert_eq!(form(Val::mul(flat(), var("n"))), None);
        // A let that may be negative is no start a quotient keeps in one block.
        let signed = ["o".to_string()];
        let l2 = Lanes {
            signed: &signed,
            ..lanes(Vec::new())
        };
        assert_eq!(l2.form(&Val::div(flat(), int(128))), None);
    }

    #[test]
    fn a_comparison_is_uniform_when_its_lanes_cannot_straddle_the_bound() {
        let l = lanes(Vec::new());
        let col = || Val::rem(flat(), int(128));
        assert!(l.uniform_less(&col(), &int(64)));
        // Its negation `63 < col` too (an `e - v` form... here `e + v` with `e + 1` aligned).
        assert!(l.uniform_less(&int(63), &col()));
        // 60 is no multiple of 8: lanes 0..3 below it, 4..7 not.
        assert!(!l.uniform_less(&col(), &int(60)));
        assert!(!l.uniform_less(&int(59), &col()));
        // A bounds predicate against a size times 128, and against a size alone (unknown).
        let size = || Val::Size("S".into());
        assert!(l.uniform_less(&flat(), &Val::mul(size(), int(128))));
        assert!(!l.uniform_less(&flat(), &size()));
        // Without the lane: uniform whatever it is.
        assert!(l.uniform_less(&var("o"), &size()));
    }

    #[test]
    fn clamps_are_resolved_by_the_guard_and_only_by_it() {
        // min(col, 63) is col where col < 64 (col <= 63), and not without that fact.
        let col = Val::rem(flat(), int(128));
        let clamp = Val::min(col.clone(), int(63));
        assert_eq!(lanes(Vec::new()).resolve(&clamp), None);
        let fact = terms(&sub(int(63), col.clone())).unwrap();
        assert_eq!(lanes(vec![fact]).resolve(&clamp), Some(col.clone()));
        // A remainder's own range decides min(col, 127) without any fact.
        assert_eq!(
            lanes(Vec::new()).resolve(&Val::min(col.clone(), int(127))),
            Some(col)
        );
    }

    #[test]
    fn rotary_reads_become_vectors_under_their_halves() {
        let [(first, taken), (second, other)] = rotary();
        let a = read(&taken, &first).expect("the first half is a vector");
        let b = read(&other, &second).expect("the second half is a vector");
        assert!(!a.start.text().contains("min"), "{}", a.start.text());
        assert!(!b.start.text().contains("min"), "{}", b.start.text());
        assert_eq!(
            a.guard.text(),
            "(o * 128 + t) * 8 % 128 < 64",
            "the guard at lane 0"
        );
        assert_eq!(b.guard.text(), "63 < (o * 128 + t) * 8 % 128");
    }

    #[test]
    fn a_cats_two_operands_exclude_each_other_and_a_read_does_not_exclude_itself() {
        let [(first, taken), (second, other)] = rotary();
        let (a, b) = (
            read(&taken, &first).unwrap(),
            read(&other, &second).unwrap(),
        );
        assert!(a.excludes(&b) && b.excludes(&a));
        assert!(!a.excludes(&a));
        // A read without a guard excludes nothing (it may be taken anywhere).
        let slice = Val::add(
            Val::mul(Val::div(flat(), int(96)), int(128)),
            Val::add(int(16), Val::rem(flat(), int(96))),
        );
        let free = read(&Guard::default(), &slice).unwrap();
        assert!(!free.excludes(&a) && !a.excludes(&free));
    }

    #[test]
    fn reads_that_are_not_contiguous_and_aligned_are_declined() {
        let row = |stride: i64| Val::mul(Val::div(flat(), int(96)), int(stride));
        let col = || Val::rem(flat(), int(96));
        let none = Guard::default();
        // A slice with step 1 and start 16 of rows of 128 (96 columns): taken.
        let slice = Val::add(row(128), Val::add(int(16), col()));
        assert!(read(&none, &slice).is_some());
        // Step 2, start 3, rows of a size (a generic kernel's): declined.
        let step2 = Val::add(row(256), Val::mul(int(2), col()));
        assert_eq!(read(&none, &step2), None);
        let start3 = Val::add(row(128), Val::add(int(3), col()));
        assert_eq!(read(&none, &start3), None);
        let sized = Val::add(
            Val::mul(Val::div(flat(), int(96)), Val::Size("N".into())),
            col(),
        );
        assert_eq!(read(&none, &sized), None);
        // A cat at 60: its condition straddles a vector, so its clamp is not resolved.
        let at60 = Val::add(row(60), Val::min(col(), int(59)));
        let mut guard = Guard::default();
        data_atoms(&lt(col(), 60), true, &[], &mut guard.wheres).unwrap();
        assert_eq!(read(&guard, &at60), None);
        // A conditional around the compute that is not the same in every lane.
        let odd = Guard {
            conds: vec![Atom::Less(col(), int(61))],
            wheres: Vec::new(),
        };
        assert_eq!(read(&odd, &slice), None);
        let mut eq = Vec::new();
        assert_eq!(val_atoms(&Val::eq(var("v"), int(0)), "v", &mut eq), None);
    }

    /// Reads of views and their guards, each with the width it is built for: rotary's halves,
    /// a pad (8 before, 48 columns, rows of 64 after it) with a bounds predicate, a slice.
    fn cases() -> Vec<(Val, Guard)> {
        let mut cases: Vec<(Val, Guard)> = rotary().into();
        let p = || Val::rem(flat(), int(64));
        let inside = Val::min(non_negative(sub(p(), int(8))), int(47));
        let pad = Val::add(Val::mul(Val::div(flat(), int(64)), int(48)), inside);
        let mut guard = Guard::default();
        val_atoms(
            &Val::lt(flat(), Val::mul(Val::Size("S".into()), int(64))),
            "v",
            &mut guard.conds,
        )
        .unwrap();
        let within = Data::Binary(
            BinaryOp::LogicalAnd,
            DType::Bool,
            Box::new(ge(p(), 8)),
            Box::new(lt(p(), 56)),
        );
        data_atoms(&within, true, &[], &mut guard.wheres).unwrap();
        cases.push((pad, guard));
        let slice = Val::add(
            Val::mul(Val::div(flat(), int(96)), int(128)),
            Val::add(int(16), Val::rem(flat(), int(96))),
        );
        cases.push((slice, Guard::default()));
        cases
    }

    /// Whether condition `c` holds at the point (the probes give `&&` no value: its operands
    /// are evaluated one by one).
    fn truth(c: &Val, at: &[(&str, i64)], seed: u64) -> bool {
        match c {
            Val::And(a, b) => truth(a, at, seed) && truth(b, at, seed),
            Val::True => true,
            c => eval_at(c, at, seed) == Some(1),
        }
    }

    fn holds(atom: &Atom, at: &[(&str, i64)], seed: u64) -> bool {
        truth(&atom.val(), at, seed)
    }

    /// At sampled points: where the vector's guard holds at lane 0, every lane reads the
    /// element the scalar read did (clamps and all), from an aligned start; where the scalar
    /// read is taken in some lane (its whole guard holds there), the vector's guard holds.
    #[test]
    fn the_vector_reads_exactly_the_scalar_reads_where_they_are_taken() {
        let mut issued = 0;
        for (index, guard) in cases() {
            let r = read(&guard, &index).expect("each case is taken");
            for seed in 0..40u64 {
                for (o, t) in [
                    (0, 0),
                    (1, 7),
                    (3, 100),
                    (37, 127),
                    (200, 5),
                    (seed as i64, seed as i64 * 3 % 128),
                ] {
                    let point = |v: i64| [("o", o), ("t", t), ("v", v)];
                    let at0 = point(0);
                    let g0 = truth(&r.guard, &at0, seed);
                    if g0 {
                        issued += 1;
                        let start = eval_at(&r.start, &at0, seed).expect("a start");
                        assert_eq!(start % 8, 0, "aligned start");
                        for v in 0..8 {
                            let scalar = eval_at(&index, &point(v), seed);
                            assert_eq!(scalar, Some(start + v), "{} at lane {v}", index.text());
                        }
                    }
                    let all = guard.conds.iter().chain(&guard.wheres);
                    let atoms: Vec<&Atom> = all.collect();
                    for v in 0..8 {
                        if atoms.iter().all(|a| holds(a, &point(v), seed)) {
                            assert!(g0, "taken at lane {v} but not issued: {}", index.text());
                        }
                    }
                }
            }
        }
        assert!(issued > 100, "the guards held at too few points: {issued}");
    }
}
