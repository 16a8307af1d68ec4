//! Pass `welford`: each variance a `welford(v)` statement names computed in one pass over its
//! operand, Welford's running statistics instead of the builder's two sums.
//!
//! Requires: `reduction` (the variance's two sums lowered to accumulators with their init,
//! update, block reduction and write; [`Accumulators`] finds them). Takes the fusion's
//! [`crate::fusion::Fusion::welford`] requests and finds each variance's shape again on the
//! scheduled fusion ([`crate::fusion::welford::find`]). Guarantees: the operand's sum `s` (the
//! mean's numerator) accumulates Welford's statistics per thread instead (`count += 1; m2 +=
//! (x - mean) * (x - mean'); mean' = mean + (x - mean) * (1 / count)` per element); the squared
//! deviations' sum has no accumulator, loop or block reduction left, and the mean's broadcast,
//! the deviations and their squares are not computed (loops left empty are removed).
//!
//! Independent partial states: one update per element is one dependent chain (each mean needs
//! the previous one), so a thread's elements are spread over several states, one per
//! iteration of the outermost serial reduction loop of 2 to [`MAX_PARTIAL_STATES`] iterations
//! (the statistics `{v}_part_mean`, `{v}_part_m2` and `{v}_part_count`, arrays over that loop;
//! the loop is unrolled, so the chains interleave and each state's count is a constant at each
//! step, its reciprocal folded). After the reduction loops the states are combined in the
//! thread into `{v}_mean`, `{v}_m2` and `{v}_count` by the two-pass form of Chan's formula
//! (the count and the mean from the states' sums, then `m2 = sum(m2_j + count_j * (mean_j -
//! mean)^2)`: exact, no division per state). Without such a loop the thread's one state is
//! `{v}_mean`, `{v}_m2`, `{v}_count` itself. Those are combined across the reduced thread dims
//! by one [`Stmt::BlockWelford`] (Chan's formula) where the sum had its `BlockReduce`; `s` is
//! written as `mean * count` and the squared deviations' sum as `m2`. When nothing but the
//! two-pass chain reads the mean `s / n` (a plain `var`), neither the mean nor `s` is computed. Emits a located error,
//! naming the variance as the user wrote it, when a thread would hold several rows'
//! statistics, the two sums are not reduced over the same thread dims or are computed in
//! different loop nests.

use super::context::{Change, Ctx};
use super::reduction::{accumulator_loops, Accumulators};
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::fusion::ops::{BinaryOp, TernaryOp, UnaryOp};
use crate::fusion::welford::{find, WelfordVar};
use crate::fusion::{ExprId, IterId, IterKind, ParallelType, TensorId, WelfordRewrite};
use crate::kir::{Access, BufferId, Compute, ComputeRole, Data, Flow, Kernel, Stmt};

pub fn used(cx: &Ctx) -> bool {
    !cx.fusion.welford.is_empty()
}

/// The most partial states a thread keeps (three f32 registers each, the count's folded to a
/// constant when the loop is unpredicated): enough independent chains to cover the latency of
/// the add and the fused multiply-add each element's update waits on.
pub const MAX_PARTIAL_STATES: i64 = 8;

/// The per-thread statistics that replace the sum's accumulator: combined across the block.
#[derive(Clone, Copy)]
struct Stats {
    mean: BufferId,
    m2: BufferId,
    count: BufferId,
}

/// A thread's independent partial states (see the module doc): statistics over `axis`, one
/// per iteration of its loop, combined into [`Stats`] after the reduction loops.
struct Partials {
    axis: IterId,
    states: Stats,
}

/// Where each element's update goes and what replaces the sum's init and block reduction.
struct Plan {
    /// The statistics the updates accumulate (the partial states, or the thread's one).
    updated: Stats,
    /// The thread's statistics (the block combine's, the writes').
    stats: Stats,
    /// The allocations, then the inits (where the sum's init was).
    init: Vec<Stmt>,
    /// The partial states combined into the thread's (empty without partial states).
    combine: Vec<Stmt>,
}

/// The sums of one variance, as the `reduction` pass lowered them.
struct Sums {
    sum_expr: ExprId,
    squares_expr: ExprId,
    sum_acc: BufferId,
    squares_acc: BufferId,
    /// The exprs of the tensors between the sums (not computed any more).
    between: [ExprId; 3],
    /// The mean's expr when nothing but the two-pass chain reads the mean (a plain `var`):
    /// neither the mean nor the sum's write is computed any more (each would be a value set
    /// and never used).
    unread_mean: Option<ExprId>,
}

pub fn run(
    cx: &mut Ctx,
    accumulators: &Accumulators,
    k: &mut Kernel,
) -> Result<Change, Diagnostic> {
    for request in cx.fusion.welford.clone() {
        rewrite(cx, accumulators, k, &request)?;
    }
    Ok(Change::Changed)
}

fn rewrite(
    cx: &mut Ctx,
    accumulators: &Accumulators,
    k: &mut Kernel,
    request: &WelfordRewrite,
) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let name = f.tensors[request.var].name.clone();
    let err = |why: String| Diagnostic::new(format!("welford({name}): {why}"), request.span);
    let w: WelfordVar = find(f, request.var).map_err(err)?;
    let def = |t: crate::fusion::TensorId| {
        f.tensors[t]
            .definition
            .expect("find checked the definitions")
    };
    let [sum_acc, squares_acc] =
        one_row_accumulators(cx, accumulators, [w.sum, w.squares], &name, "sums").map_err(err)?;
    let sums = Sums {
        sum_expr: def(w.sum),
        squares_expr: def(w.squares),
        sum_acc,
        squares_acc,
        between: w.between.map(def),
        unread_mean: mean_unread(f, &w).then(|| def(w.mean)),
    };
    let dims_of = |acc: BufferId| {
        let mut dims = None;
        crate::kir::for_each_stmt(&k.body, &mut |s| {
            if let Stmt::BlockReduce {
                acc: a, dims: d, ..
            } = s
            {
                if a.buffer == acc {
                    dims = Some(*d);
                }
            }
        });
        dims
    };
    let sum_dims = dims_of(sum_acc);
    if sum_dims != dims_of(squares_acc) {
        return Err(err(format!(
            "the sum of `{name}`'s operand and its squared deviations are reduced over different thread dims; schedule both alike (propagate from one tensor)"
        )));
    }
    // The statistics live where the operand's sum did: its squared deviations' sum, written
    // from m2, must be written within that scope (not in a loop nest of its own).
    let squares_write = |s: &Stmt| matches!(s, Stmt::Compute(c) if c.expr == sums.squares_expr && c.role == ComputeRole::ReductionWrite);
    if !in_scope_of(&k.body, sum_acc, &mut |s| squares_write(s)) {
        return Err(err(format!(
            "`{}` and `{}` (the sum of `{name}`'s operand and of its squared deviations) are computed in different loop nests; Welford's statistics are one per thread in one loop nest, so schedule both alike (propagate from one tensor)",
            f.tensors[w.sum].name, f.tensors[w.squares].name
        )));
    }
    let stats = new_stats(cx, k, &name, Vec::new());
    let partials = partial_axis(cx, w.sum).map(|axis| Partials {
        axis,
        states: new_stats(cx, k, &format!("{name}_part"), vec![axis]),
    });
    let plan = plan(cx, sums.sum_expr, stats, partials);
    // The sums' accumulators and the tensors between them get no allocation.
    cx.layout.alloc_ids.remove(&sum_acc);
    cx.layout.alloc_ids.remove(&squares_acc);
    for t in w.between {
        cx.layout.tensor_buffer.remove(&t);
    }
    if sums.unread_mean.is_some() {
        cx.layout.tensor_buffer.remove(&w.mean);
        cx.layout.tensor_buffer.remove(&w.sum);
    }
    // Without a block reduction the partial states are combined before the sum's write.
    let block_combined = sum_dims.is_some();
    let mut missing_update = true;
    crate::kir::rewrite_post(&mut k.body, &mut |s| {
        replace(s, &sums, &plan, block_combined, &mut missing_update)
    });
    if missing_update {
        return Err(err(format!(
            "internal: the update of `{}`'s accumulator was not found",
            f.tensors[w.sum].name
        )));
    }
    Ok(())
}

/// Whether nothing but the two-pass chain's broadcast reads `w`'s mean (a plain `var`'s; not
/// var_mean's, whose mean is the user's).
fn mean_unread(f: &crate::fusion::Fusion, w: &WelfordVar) -> bool {
    let broadcast = f.tensors[w.between[0]].definition;
    !f.tensors[w.mean].is_output && f.uses(w.mean).into_iter().all(|e| Some(e) == broadcast)
}

/// Three new f32 registers `{prefix}_mean`, `{prefix}_m2`, `{prefix}_count` over `ids`.
fn new_stats(cx: &mut Ctx, k: &mut Kernel, prefix: &str, ids: Vec<IterId>) -> Stats {
    let mut register =
        |what: &str| cx.new_register(k, &format!("{prefix}_{what}"), DType::F32, ids.clone());
    Stats {
        mean: register("mean"),
        m2: register("m2"),
        count: register("count"),
    }
}

/// The axis of the partial states of `sum` (the operand's sum): its outermost serial reduction
/// axis whose loop has a constant 2 to [`MAX_PARTIAL_STATES`] iterations, if any.
fn partial_axis(cx: &Ctx, sum: TensorId) -> Option<IterId> {
    let f = cx.fusion;
    f.tensors[sum].loop_domain.iter().copied().find(|&id| {
        f.ids[id].kind == IterKind::Reduction
            && matches!(
                f.ids[id].parallel,
                ParallelType::Serial | ParallelType::Unroll
            )
            && cx
                .key_extent(cx.keys.of_axis[&id])
                .as_const()
                .is_some_and(|n| (2..=MAX_PARTIAL_STATES).contains(&n))
    })
}

/// The statements of the statistics of the sum `e` (see [`Plan`]).
fn plan(cx: &Ctx, e: ExprId, stats: Stats, partials: Option<Partials>) -> Plan {
    let zero = |b: BufferId| {
        compute(
            e,
            b,
            Data::Literal(0.0, DType::F32),
            ComputeRole::ReductionInit,
        )
    };
    let each = |s: Stats| [s.mean, s.m2, s.count];
    let mut init: Vec<Stmt> = each(stats).into_iter().map(Stmt::Alloc).collect();
    let Some(Partials { axis, states }) = partials else {
        init.extend(each(stats).map(zero));
        return Plan {
            updated: stats,
            stats,
            init,
            combine: Vec::new(),
        };
    };
    init.extend(each(states).map(Stmt::Alloc));
    init.extend(each(stats).map(zero));
    init.extend(accumulator_loops(
        cx,
        &[axis],
        each(states).map(zero).to_vec(),
    ));
    let Stats { mean, m2, count } = stats;
    let role = ComputeRole::ReductionWrite;
    let update = |b: BufferId, add: Data| compute(e, b, binary(BinaryOp::Add, read(b), add), role);
    // The count and the sum of the states' means weighted by their counts, then the mean (0
    // when no state has an element), then m2 around it.
    let mut combine = accumulator_loops(
        cx,
        &[axis],
        vec![
            update(count, read(states.count)),
            update(
                mean,
                binary(BinaryOp::Mul, read(states.count), read(states.mean)),
            ),
        ],
    );
    // `count > 0 ? sum / count : 0` (a thread past a ragged row's end has no element); no
    // helper call, so a constant count folds the test and the division.
    let any = binary(BinaryOp::Gt, read(count), Data::Literal(0.0, DType::F32));
    let quotient = binary(BinaryOp::Div, read(mean), read(count));
    let zero = Data::Literal(0.0, DType::F32);
    combine.push(compute(
        e,
        mean,
        Data::Ternary(
            TernaryOp::Where,
            DType::F32,
            Box::new([any, quotient, zero]),
        ),
        role,
    ));
    let deviation = || binary(BinaryOp::Sub, read(states.mean), read(mean));
    let spread = binary(
        BinaryOp::Mul,
        read(states.count),
        binary(BinaryOp::Mul, deviation(), deviation()),
    );
    combine.extend(accumulator_loops(
        cx,
        &[axis],
        vec![update(m2, binary(BinaryOp::Add, read(states.m2), spread))],
    ));
    Plan {
        updated: states,
        stats,
        init,
        combine,
    }
}

/// Whether a statement for which `pred` holds lies in the scope of `alloc b`: after it in the
/// block that holds it, or inside a statement after it.
fn in_scope_of(body: &[Stmt], b: BufferId, pred: &mut dyn FnMut(&Stmt) -> bool) -> bool {
    let mut walk = InScope {
        b,
        pred,
        found: false,
    };
    crate::kir::visit(body, &mut walk);
    walk.found
}

/// The walk of [`in_scope_of`]: the blocks down to the one holding `alloc b`.
struct InScope<'p> {
    b: BufferId,
    pred: &'p mut dyn FnMut(&Stmt) -> bool,
    found: bool,
}

impl<'a> crate::kir::Visitor<'a> for InScope<'_> {
    fn block_start(&mut self, body: &'a [Stmt]) -> Flow {
        if self.found {
            return Flow::Skip;
        }
        match body
            .iter()
            .position(|s| matches!(s, Stmt::Alloc(a) if *a == self.b))
        {
            // The scope of the allocation: its block, after it (nothing inside the
            // statements before it).
            Some(i) => {
                self.found = crate::kir::any_stmt(&body[i + 1..], self.pred);
                Flow::Skip
            }
            None => Flow::Descend,
        }
    }

    fn stmt(&mut self, _s: &'a Stmt, _at: usize) -> Flow {
        if self.found {
            Flow::Skip
        } else {
            Flow::Descend
        }
    }
}

/// The accumulators of two reductions a one-pass form computes together (`passes::welford`,
/// `passes::online_logsumexp`), each one row's per thread; else why not, naming the user's
/// tensor `name` and the reductions as `what`.
pub(super) fn one_row_accumulators(
    cx: &Ctx,
    accumulators: &Accumulators,
    tensors: [TensorId; 2],
    name: &str,
    what: &str,
) -> Result<[BufferId; 2], String> {
    let [Some(a), Some(b)] = tensors.map(|t| accumulators.of_tensor(t)) else {
        return Err(format!(
            "its {what} are not over loop axes of the kernel (nothing to compute in one pass)"
        ));
    };
    for acc in [a, b] {
        if cx
            .layout
            .alloc_ids
            .get(&acc)
            .is_some_and(|ids| !ids.is_empty())
        {
            return Err(format!(
                "a thread of the kernel holds several rows' {what} of `{name}` (a serial axis outside the reduction): the one pass keeps one row's per thread, so bind those axes to threads or blocks"
            ));
        }
    }
    Ok([a, b])
}

pub(super) fn reg(b: BufferId) -> Access {
    Access {
        buffer: b,
        index: None,
    }
}

pub(super) fn read(b: BufferId) -> Data {
    Data::Read(reg(b))
}

fn binary(op: BinaryOp, a: Data, b: Data) -> Data {
    Data::Binary(op, DType::F32, Box::new(a), Box::new(b))
}

fn compute(expr: ExprId, out: BufferId, value: Data, role: ComputeRole) -> Stmt {
    Stmt::Compute(Compute {
        expr,
        out: reg(out),
        value,
        role,
        vector: None,
    })
}

/// The statements that replace `s` (see the module doc); a loop emptied by the removals goes.
fn replace(
    s: Stmt,
    sums: &Sums,
    plan: &Plan,
    block_combined: bool,
    missing_update: &mut bool,
) -> Vec<Stmt> {
    let Stats { mean, m2, count } = plan.stats;
    match s {
        Stmt::Alloc(b) if b == sums.sum_acc => Vec::new(),
        Stmt::Alloc(b) if b == sums.squares_acc => Vec::new(),
        Stmt::BlockReduce { acc, dims, .. } if acc.buffer == sums.sum_acc => {
            let mut out = plan.combine.clone();
            out.push(Stmt::BlockWelford {
                mean: reg(mean),
                m2: reg(m2),
                count: reg(count),
                dims,
            });
            out
        }
        Stmt::BlockReduce { acc, .. } if acc.buffer == sums.squares_acc => Vec::new(),
        Stmt::Compute(c)
            if c.expr == sums.squares_expr && c.role != ComputeRole::ReductionWrite =>
        {
            Vec::new()
        }
        Stmt::Compute(c) if sums.between.contains(&c.expr) => Vec::new(),
        Stmt::Compute(c) if sums.unread_mean == Some(c.expr) => Vec::new(),
        Stmt::Compute(mut c) if c.expr == sums.squares_expr => {
            c.value = read(m2);
            vec![Stmt::Compute(c)]
        }
        Stmt::Compute(c) if c.expr == sums.sum_expr => match c.role {
            ComputeRole::ReductionInit => plan.init.clone(),
            ComputeRole::ReductionUpdate => {
                // `acc = add(acc, x)`: the element is the right operand.
                let Data::Binary(BinaryOp::Add, _, _, x) = c.value else {
                    return vec![Stmt::Compute(c)];
                };
                *missing_update = false;
                welford_update(c.expr, c.role, *x, plan.updated)
            }
            ComputeRole::ReductionWrite => {
                let mut out = if block_combined {
                    Vec::new()
                } else {
                    plan.combine.clone()
                };
                if sums.unread_mean.is_none() {
                    let mut c = c;
                    c.value = binary(BinaryOp::Mul, read(mean), read(count));
                    out.push(Stmt::Compute(c));
                }
                out
            }
            _ => vec![Stmt::Compute(c)],
        },
        Stmt::Loop(l) if l.body.is_empty() => Vec::new(),
        s => vec![s],
    }
}

/// Welford's update of `stats` by the element `x` (the computes of expr `e` in `role`).
fn welford_update(e: ExprId, role: ComputeRole, x: Data, stats: Stats) -> Vec<Stmt> {
    let Stats { mean, m2, count } = stats;
    let delta = || binary(BinaryOp::Sub, x.clone(), read(mean));
    // `delta * (1 / count)`: in a fully unrolled loop of unpredicated updates the count is a
    // constant at each step and its reciprocal folds, so no element pays for a division.
    let new_mean = || {
        binary(
            BinaryOp::Add,
            read(mean),
            binary(
                BinaryOp::Mul,
                delta(),
                Data::Unary(UnaryOp::Reciprocal, DType::F32, Box::new(read(count))),
            ),
        )
    };
    vec![
        compute(
            e,
            count,
            binary(BinaryOp::Add, read(count), Data::Literal(1.0, DType::F32)),
            role,
        ),
        compute(
            e,
            m2,
            binary(
                BinaryOp::Add,
                read(m2),
                binary(
                    BinaryOp::Mul,
                    delta(),
                    binary(BinaryOp::Sub, x.clone(), new_mean()),
                ),
            ),
            role,
        ),
        compute(e, mean, new_mean(), role),
    ]
}
