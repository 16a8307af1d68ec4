//! The dequantized product a user writes, `sum(cast(a, f32) * sa_b * (cast(b, f32) * sb_b),
//! axis=k)`, rewritten so its scales leave the sum: `sum(cast(a, f32) * cast(b, f32), axis=k)`
//! times the scales after it (the epilogue of a tensor-core product, whose tile multiplies two
//! operands and nothing else).
//!
//! Takes a parsed program. A `Let` `s = sum(x, axis=k)` (one axis, a non-negative number)
//! whose `x` is a product of factors (through `*`, and through names of tensors that only this
//! product reads, that are not outputs and that the schedule does not name) is rewritten when
//! its factors are exactly two operands, each `cast(x, ...)` (directly or through a name: the
//! widened quantized values), and at least one scale. A factor is a **scale** when
//! it is constant along `k`, which is read from how it is written: a number, a scalar input,
//! or `broadcast(e, axis=k)` (the broadcast that makes the summed axis: `e` has the sum's
//! output axes), directly or through a name. Legality: `sum_k(x_k * c * y_k * d) = (sum_k
//! x_k * y_k) * c * d` for `c`, `d` that do not depend on `k`; the rewrite only moves such
//! factors, so the value is the same in exact arithmetic (the tensor cores' f32 sum of the
//! unscaled products is one rounding closer to it than the scaled one).
//!
//! Guarantees: the sum keeps its name (the schedule's statements about it still apply) and
//! sums the product of the two operands; a new tensor `<s>_scaled` (a fresh name) right after
//! it is the sum times the scales (`e` for `broadcast(e, axis=k)`), and every later reader of
//! `s` reads it instead; the tensors the product went through that nothing else reads are
//! removed. A sum that is itself an output, a factor that varies along `k` (a scale with the
//! summed axis, e.g. per-K-block scales), or another shape is left as written: the product is
//! then computed as written; in a tensor-core tile, the `mma` pass applies scales constant
//! along blocks of K to each block's sum (`passes/mma/block_scale.rs`) and refuses others.
//! Emits: the rewritten program; the reference evaluator reads the program as written.

use super::ast::{Arg, BinOp, Expr, FusionDef, Item, Loc, Program, SchedStmt};
use std::collections::{HashMap, HashSet};

/// `program` with every dequantized product's scales moved after its sum.
pub fn hoist_scales(program: &Program) -> Program {
    let mut out = program.clone();
    let scheduled = schedule_names(&program.schedule);
    // After a rewrite the items have moved: look again from the start (a rewritten sum has no
    // scales left, so this ends).
    let mut i = 0;
    while i < out.fusion.items.len() {
        match hoist_one(&out.fusion, i, &scheduled) {
            Some(rewritten) => {
                out.fusion = rewritten;
                i = 0;
            }
            None => i += 1,
        }
    }
    out
}

/// Every name the schedule mentions.
fn schedule_names(schedule: &[SchedStmt]) -> HashSet<String> {
    let mut names = Vec::new();
    for s in schedule {
        let args = match s {
            SchedStmt::Bind { name, args, .. } => {
                names.push(name.clone());
                args
            }
            SchedStmt::Method { tensor, args, .. } => {
                names.push(tensor.clone());
                args
            }
            SchedStmt::Call { args, .. } => args,
        };
        for a in args {
            match a {
                Arg::Pos(e) | Arg::Named { value: e, .. } => collect_reads(e, &mut names),
            }
        }
    }
    names.into_iter().collect()
}

/// How many times each name is read in the fusion (outputs count).
fn reads(f: &FusionDef) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for item in &f.items {
        let mut names = Vec::new();
        match item {
            Item::Let { value, .. } | Item::LetTuple { value, .. } => {
                collect_reads(value, &mut names)
            }
            Item::Output { name, .. } => names.push(name.clone()),
            Item::Input { .. } => {}
        }
        for n in names {
            *counts.entry(n).or_insert(0) += 1;
        }
    }
    counts
}

/// Every name `e` reads, once per read.
fn collect_reads(e: &Expr, out: &mut Vec<String>) {
    match e {
        Expr::Name(n, _) => out.push(n.clone()),
        Expr::Neg(x, _) => collect_reads(x, out),
        Expr::Binary(_, x, y, _) => {
            collect_reads(x, out);
            collect_reads(y, out);
        }
        Expr::Call { args, .. } => {
            for a in args {
                match a {
                    Arg::Pos(x) | Arg::Named { value: x, .. } => collect_reads(x, out),
                }
            }
        }
        Expr::List(xs, _) => xs.iter().for_each(|x| collect_reads(x, out)),
        Expr::Int(..) | Expr::Float(..) => {}
    }
}

/// The single non-negative axis of `sum(x, axis=k)`, with `x`.
fn sum_of(e: &Expr) -> Option<(&Expr, i64)> {
    let Expr::Call { func, args, .. } = e else {
        return None;
    };
    if func != "sum" {
        return None;
    }
    let [Arg::Pos(x), Arg::Named { name, value, .. }] = &args[..] else {
        return None;
    };
    match (name.as_str(), value) {
        ("axis" | "axes", Expr::Int(k, _)) => Some((x, *k)),
        _ => None,
    }
}

/// `e` of `broadcast(e, axis=k)`.
fn broadcast_along(e: &Expr, k: i64) -> Option<&Expr> {
    let Expr::Call { func, args, .. } = e else {
        return None;
    };
    if func != "broadcast" {
        return None;
    }
    match &args[..] {
        [Arg::Pos(x), Arg::Named { name, value, .. }]
            if matches!(name.as_str(), "axis" | "axes")
                && matches!(value, Expr::Int(a, _) if *a == k) =>
        {
            Some(x)
        }
        _ => None,
    }
}

/// What a sum's program around it says: the definitions by name, the scalar inputs, who reads
/// what, the names the schedule holds on to.
struct Scope<'a> {
    defs: HashMap<&'a str, &'a Expr>,
    scalars: HashSet<&'a str>,
    outputs: HashSet<&'a str>,
    reads: HashMap<String, usize>,
    scheduled: &'a HashSet<String>,
}

impl<'a> Scope<'a> {
    fn new(f: &'a FusionDef, scheduled: &'a HashSet<String>) -> Self {
        let mut defs = HashMap::new();
        let mut scalars = HashSet::new();
        let mut outputs = HashSet::new();
        for item in &f.items {
            match item {
                Item::Let { name, value, .. } => {
                    defs.insert(name.as_str(), value);
                }
                Item::Input {
                    name, dims: None, ..
                } => {
                    scalars.insert(name.as_str());
                }
                Item::Output { name, .. } => {
                    outputs.insert(name.as_str());
                }
                // (A tuple's call is no product the rewrite looks through.)
                Item::Input { .. } | Item::LetTuple { .. } => {}
            }
        }
        Scope {
            defs,
            scalars,
            outputs,
            reads: reads(f),
            scheduled,
        }
    }

    /// The definition of `name` when the product may look through it: only the product reads
    /// it, it is no output, the schedule does not name it.
    fn private(&self, name: &str) -> Option<&'a Expr> {
        let def = self.defs.get(name)?;
        (self.reads.get(name) == Some(&1)
            && !self.outputs.contains(name)
            && !self.scheduled.contains(name))
        .then_some(*def)
    }

    /// The factors of product `e`, and the private names it went through.
    fn factors(&self, e: &'a Expr, out: &mut Vec<&'a Expr>, through: &mut Vec<String>) {
        match e {
            Expr::Binary(BinOp::Mul, x, y, _) => {
                self.factors(x, out, through);
                self.factors(y, out, through);
            }
            Expr::Name(n, _) => match self.private(n) {
                Some(def @ Expr::Binary(BinOp::Mul, ..)) => {
                    through.push(n.clone());
                    self.factors(def, out, through);
                }
                _ => out.push(e),
            },
            _ => out.push(e),
        }
    }

    /// Whether `e` is `cast(x, ...)`, directly or through a name.
    fn is_cast(&self, e: &Expr) -> bool {
        match e {
            Expr::Call { func, .. } => func == "cast",
            Expr::Name(n, _) => self.defs.get(n.as_str()).is_some_and(|d| self.is_cast(d)),
            _ => false,
        }
    }

    /// What factor `e` contributes after the sum over axis `k` when it is constant along `k`.
    fn scale(&self, e: &'a Expr, k: i64) -> Option<Expr> {
        match e {
            Expr::Int(..) | Expr::Float(..) => Some(e.clone()),
            Expr::Neg(x, _) if matches!(**x, Expr::Int(..) | Expr::Float(..)) => Some(e.clone()),
            Expr::Name(n, _) if self.scalars.contains(n.as_str()) => Some(e.clone()),
            Expr::Name(n, _) => self.defs.get(n.as_str()).and_then(|d| self.scale(d, k)),
            _ => broadcast_along(e, k).cloned(),
        }
    }
}

/// Item `i` of `f` rewritten, when it is a dequantized product's sum.
fn hoist_one(f: &FusionDef, i: usize, scheduled: &HashSet<String>) -> Option<FusionDef> {
    let Item::Let {
        name: sum_name,
        value,
        loc,
    } = &f.items[i]
    else {
        return None;
    };
    let (x, k) = sum_of(value)?;
    let scope = Scope::new(f, scheduled);
    if scope.outputs.contains(sum_name.as_str()) {
        return None;
    }
    let mut factors = Vec::new();
    let mut through = Vec::new();
    scope.factors(x, &mut factors, &mut through);
    let mut operands = Vec::new();
    let mut scales = Vec::new();
    for e in factors {
        match scope.scale(e, k) {
            Some(s) => scales.push(s),
            None => operands.push(e.clone()),
        }
    }
    // Two widened operands (the dequantize form) and something to move.
    let [a, b] = &operands[..] else {
        return None;
    };
    if scales.is_empty() || !scope.is_cast(a) || !scope.is_cast(b) {
        return None;
    }
    let at = Loc(value.loc());
    let product = Expr::Binary(BinOp::Mul, Box::new(a.clone()), Box::new(b.clone()), at);
    let taken: HashSet<&str> = f
        .items
        .iter()
        .flat_map(|item| match item {
            Item::Input { name, .. } | Item::Let { name, .. } | Item::Output { name, .. } => {
                vec![name.as_str()]
            }
            Item::LetTuple { names, .. } => names.iter().map(|(n, _)| n.as_str()).collect(),
        })
        .chain(scheduled.iter().map(String::as_str))
        .collect();
    let scaled = fresh(&format!("{sum_name}_scaled"), &taken);
    let mut scaled_value = Expr::Name(sum_name.clone(), at);
    for s in scales {
        scaled_value = Expr::Binary(BinOp::Mul, Box::new(scaled_value), Box::new(s), at);
    }
    // The sum reads the product through its first private name (kept, with the operands'
    // product as its value, so a schedule statement about it still finds it), else inline.
    let (kept, sum_arg) = match x {
        Expr::Name(n, l) if through.first() == Some(n) => {
            (Some(n.clone()), Expr::Name(n.clone(), *l))
        }
        _ => (None, product.clone()),
    };
    let removed: HashSet<&String> = through
        .iter()
        .filter(|n| Some(*n) != kept.as_ref())
        .collect();
    let mut items = Vec::new();
    for (j, item) in f.items.iter().enumerate() {
        match item {
            Item::Let { name, .. } if removed.contains(name) => {}
            Item::Let { name, loc: l, .. } if Some(name) == kept.as_ref() => {
                items.push(Item::Let {
                    name: name.clone(),
                    value: product.clone(),
                    loc: *l,
                })
            }
            _ if j == i => {
                items.push(Item::Let {
                    name: sum_name.clone(),
                    value: with_sum_arg(value, sum_arg.clone()),
                    loc: *loc,
                });
                items.push(Item::Let {
                    name: scaled.clone(),
                    value: scaled_value.clone(),
                    loc: *loc,
                });
            }
            Item::Let {
                name,
                value: v,
                loc: l,
            } if j > i => items.push(Item::Let {
                name: name.clone(),
                value: renamed(v, sum_name, &scaled),
                loc: *l,
            }),
            other => items.push(other.clone()),
        }
    }
    let mut out = FusionDef {
        name: f.name.clone(),
        items,
    };
    remove_dead(&mut out, &scope.reads, scheduled);
    Some(out)
}

/// Removes the tensors that the rewrite left unread (read before it, not now, no output, not
/// in the schedule), and those they alone read.
fn remove_dead(f: &mut FusionDef, before: &HashMap<String, usize>, scheduled: &HashSet<String>) {
    loop {
        let now = reads(f);
        let dead = |name: &String| {
            !now.contains_key(name) && before.contains_key(name) && !scheduled.contains(name)
        };
        let n = f.items.len();
        f.items
            .retain(|item| !matches!(item, Item::Let { name, .. } if dead(name)));
        if f.items.len() == n {
            return;
        }
    }
}

/// A name from `base` that nothing in `taken` has.
fn fresh(base: &str, taken: &HashSet<&str>) -> String {
    if !taken.contains(base) {
        return base.to_string();
    }
    (2..)
        .map(|i| format!("{base}{i}"))
        .find(|n| !taken.contains(n.as_str()))
        .expect("a free name")
}

/// `sum(x, axis=k)` with `arg` for `x`.
fn with_sum_arg(sum: &Expr, arg: Expr) -> Expr {
    let Expr::Call { func, args, loc } = sum else {
        unreachable!("sum_of matched a call")
    };
    let mut args = args.clone();
    args[0] = Arg::Pos(arg);
    Expr::Call {
        func: func.clone(),
        args,
        loc: *loc,
    }
}

/// `e` with every read of `from` reading `to`.
fn renamed(e: &Expr, from: &str, to: &str) -> Expr {
    let arg = |a: &Arg| match a {
        Arg::Pos(x) => Arg::Pos(renamed(x, from, to)),
        Arg::Named { name, value, loc } => Arg::Named {
            name: name.clone(),
            value: renamed(value, from, to),
            loc: *loc,
        },
    };
    match e {
        Expr::Name(n, l) if n == from => Expr::Name(to.to_string(), *l),
        Expr::Neg(x, l) => Expr::Neg(Box::new(renamed(x, from, to)), *l),
        Expr::Binary(op, x, y, l) => Expr::Binary(
            *op,
            Box::new(renamed(x, from, to)),
            Box::new(renamed(y, from, to)),
            *l,
        ),
        Expr::Call { func, args, loc } => Expr::Call {
            func: func.clone(),
            args: args.iter().map(arg).collect(),
            loc: *loc,
        },
        Expr::List(xs, l) => Expr::List(xs.iter().map(|x| renamed(x, from, to)).collect(), *l),
        other => other.clone(),
    }
}
