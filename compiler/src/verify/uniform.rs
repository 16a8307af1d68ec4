//! Which threads reach what: the uniformity of index values and conditions, warp-collective
//! operations under warp-uniform conditions, block barriers where every thread taking part
//! arrives, and the ids and thread counts of named barriers.
//!
//! A value is block-uniform (sizes, block indices, loop variables over such extents), warp-
//! uniform (the warp index; a thread index whose lower dims fill whole warps) or per-thread.
//! A statement is reached as uniformly as the least uniform enclosing condition (a `&&` is
//! evaluated left to right, so `warp == 0 && elect_one()` elects among a whole warp) or loop
//! extent; thread-bound loops are bindings that every thread runs once.

use super::{EventKind, Group, Rule, VerifyError, Walk};
use crate::fusion::ParallelType;
use crate::kir::{Kernel, Val};
use std::collections::HashMap;

/// How many threads agree on a value, or reach a statement together (ordered: `Thread` <
/// `Warp` < `Block`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Uniformity {
    /// May differ between the lanes of a warp.
    Thread,
    /// The same in every lane of a warp.
    Warp,
    /// The same in every thread of the block (of the threads taking part).
    Block,
}

/// Codegen's barriers: `__syncthreads()` is barrier 0 over the block; inside warp roles the
/// consumers' barriers are `bar.sync 1, consumer_threads` (`hf_bar_sync` in the prelude).
pub const BLOCK_BARRIER_ID: u32 = 0;
pub const CONSUMER_BARRIER_ID: u32 = 1;
pub use crate::target::GROUP_BARRIER_BASE;
pub use crate::target::NAMED_BARRIERS;

/// One block barrier as the hardware sees it: a named barrier id and the threads it counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BarrierUse {
    pub id: u32,
    /// `None` when the block size is known only at launch.
    pub threads: Option<i64>,
    /// The statement (preorder number) and its dump line.
    pub stmt: usize,
    pub text: String,
}

/// Threads per block when the block size is a compile-time constant.
pub(super) fn block_threads(k: &Kernel) -> Option<i64> {
    k.block.iter().map(|d| d.as_const()).product()
}

/// How uniform a thread or block index is: `threadIdx.y` is warp-uniform when `blockDim.x`
/// is whole warps (warps are consecutive in x-fastest linear order), a dim of extent 1 is 0.
pub fn of_hw(k: &Kernel, p: ParallelType) -> Uniformity {
    if !p.is_thread() {
        return Uniformity::Block;
    }
    let d = p.dim().unwrap_or(0);
    if k.block[d].as_const() == Some(1) {
        return Uniformity::Block;
    }
    let below: Option<i64> = k.block[..d].iter().map(|e| e.as_const()).product();
    if below.is_some_and(|n| n % crate::target::WARP_THREADS == 0) {
        Uniformity::Warp
    } else {
        Uniformity::Thread
    }
}

/// The value of an index expression that uses only constants and the warp index (`warp`).
pub(super) fn eval(v: &Val, warp: Option<i64>) -> Option<i64> {
    v.eval_with(&|leaf| match leaf {
        Val::Warp => warp,
        _ => None,
    })
}

impl<'k> Walk<'k> {
    /// Checks an index value reached with uniformity `ctx` (its variables are bound, its
    /// warp-collective parts reached by whole warps) and returns how uniform it is.
    pub(super) fn value(&mut self, v: &Val, ctx: Uniformity) -> Uniformity {
        match v {
            // A scalar parameter's sign is the same in every thread of the grid.
            Val::Int(_) | Val::Size(_) | Val::True | Val::Ctas | Val::Positive(_) => {
                Uniformity::Block
            }
            Val::Hw(p) => of_hw(self.k, *p),
            Val::Var(name) => match self.vars.iter().rev().find(|(n, _)| n == name) {
                Some(&(_, u)) => u,
                None => {
                    self.error(
                        Rule::UnboundVariable,
                        format!(
                            "`{name}` is not bound here (no enclosing loop, earlier `let` or thread/block binding)"
                        ),
                    );
                    // Reported once; assumed uniform so it does not cascade.
                    Uniformity::Block
                }
            },
            Val::Warp => {
                // Computed at entry by a full-warp shuffle.
                self.whole_warps("the warp index (a `__shfl_sync` over the full warp)");
                Uniformity::Warp
            }
            Val::Elect => {
                self.warp_collective(ctx, "`elect.sync`");
                Uniformity::Thread
            }
            // Short-circuit: the right side runs only where the left side holds.
            Val::And(a, b) => {
                let left = self.value(a, ctx);
                let right = self.value(b, ctx.min(left));
                left.min(right)
            }
            _ => match v.operands() {
                Some((a, b)) => {
                    let a = self.value(a, ctx);
                    a.min(self.value(b, ctx))
                }
                None => Uniformity::Thread,
            },
        }
    }

    /// A warp-collective operation reached with uniformity `ctx`.
    pub(super) fn warp_collective(&mut self, ctx: Uniformity, what: &str) {
        if ctx < Uniformity::Warp {
            self.error(
                Rule::WarpCollective,
                format!("{what} is warp-collective but the lanes of a warp may disagree on reaching it (a condition or loop bound varies between lanes)"),
            );
        }
        self.whole_warps(what);
    }

    fn whole_warps(&mut self, what: &str) {
        if let Some(n) = block_threads(self.k).filter(|n| n % crate::target::WARP_THREADS != 0) {
            self.error(
                Rule::WarpCollective,
                format!(
                    "{what} needs whole warps, but the block's {n} threads end in a partial warp"
                ),
            );
        }
    }

    /// A block barrier (or an operation holding one) reached with uniformity `ctx`.
    pub(super) fn block_barrier(&mut self, ctx: Uniformity, what: &str) {
        self.event(EventKind::Barrier);
        let (id, threads) = match self.group {
            Group::Producers => {
                self.error(
                    Rule::BlockBarrier,
                    format!("{what} in the producer branch of warp roles: the consumer warps never reach it"),
                );
                return;
            }
            Group::Block => (BLOCK_BARRIER_ID, block_threads(self.k)),
            Group::Consumers(n) => (CONSUMER_BARRIER_ID, Some(n)),
        };
        if ctx < Uniformity::Block {
            self.error(
                Rule::BlockBarrier,
                format!("{what} under a condition or loop bound that differs between threads: the threads that skip it never arrive"),
            );
        }
        if let Some((stmt, st)) = self.current {
            self.barriers.push(BarrierUse {
                id,
                threads,
                stmt,
                text: super::head(self.k, st),
            });
        }
    }
}

impl Walk<'_> {
    /// What a barrier among thread groups needs (a group barrier, a ping-pong turn): consumer
    /// warps only, every warp of a group reaches it (a warp-uniform context: groups are selected
    /// by thread dims that fill whole warps), and it counts whole warps. Returns the groups
    /// along `dims` (the block's rows along them), or None after an error.
    fn group_rules(
        &mut self,
        ctx: Uniformity,
        what: &str,
        dims: &[ParallelType],
        threads: i64,
    ) -> Option<i64> {
        self.event(EventKind::Barrier);
        if self.group == Group::Producers {
            self.error(
                Rule::BlockBarrier,
                format!(
                    "{what} in the producer branch of warp roles: the producers only issue copies"
                ),
            );
            return None;
        }
        if ctx < Uniformity::Warp {
            self.error(
                Rule::BlockBarrier,
                format!("{what} under a condition or loop bound that differs between the lanes of a warp: the lanes that skip it never arrive"),
            );
        }
        if threads <= 0 || threads % crate::target::WARP_THREADS != 0 {
            self.error(
                Rule::NamedBarrierCount,
                format!(
                    "{what} counts {threads} threads per group: a named barrier counts whole warps"
                ),
            );
            return None;
        }
        let mut groups = 1i64;
        for p in dims {
            if !matches!(p, ParallelType::TIDy | ParallelType::TIDz)
                || of_hw(self.k, *p) < Uniformity::Warp
            {
                self.error(
                    Rule::NamedBarrierCount,
                    format!("{what} over {p}: groups are selected by threadIdx.y or threadIdx.z over whole warps"),
                );
                return None;
            }
            groups *= self.k.block[p.dim().expect("a thread dim")]
                .as_const()
                .unwrap_or(1);
        }
        Some(groups)
    }

    /// Records named barrier `id(g)` over `threads` for each of `groups` groups.
    fn group_ids(&mut self, groups: i64, threads: i64, id: impl Fn(i64) -> u32) {
        if let Some((stmt, st)) = self.current {
            for g in 0..groups {
                self.barriers.push(BarrierUse {
                    id: id(g),
                    threads: Some(threads),
                    stmt,
                    text: super::head(self.k, st),
                });
            }
        }
    }

    /// A barrier among one thread group's threads (named barrier `GROUP_BARRIER_BASE + g`):
    /// the group rules, and the groups fit the block.
    pub(super) fn group_barrier(&mut self, ctx: Uniformity, dims: &[ParallelType], threads: i64) {
        let Some(groups) = self.group_rules(ctx, "a group barrier", dims, threads) else {
            return;
        };
        if let Some(block) = block_threads(self.k) {
            if threads * groups > block {
                self.error(
                    Rule::NamedBarrierCount,
                    format!("a group barrier counts {threads} threads in each of {groups} groups, more than the block's {block}"),
                );
            }
        }
        self.group_ids(groups, threads, |g| GROUP_BARRIER_BASE + g as u32);
    }

    /// A ping-pong turn hand-over (`bar.sync` / `bar.arrive` on the turn barriers): the group
    /// rules, and the turn barriers' ids within the hardware's, each counting two groups.
    pub(super) fn turn_barrier(
        &mut self,
        ctx: Uniformity,
        on: ParallelType,
        groups: i64,
        threads: i64,
    ) {
        if self
            .group_rules(ctx, "a turn barrier", &[on], threads)
            .is_none()
        {
            return;
        }
        if !(2..=crate::target::MAX_TURNS).contains(&groups) {
            self.error(
                Rule::NamedBarrierId,
                format!(
                    "{groups} groups take turns: at most {} have turn barriers",
                    crate::target::MAX_TURNS
                ),
            );
            return;
        }
        self.group_ids(groups, 2 * threads, crate::target::turn_barrier);
    }

    /// `barrier.cluster` arrive + wait: every thread of every CTA of the cluster must reach it,
    /// so not inside warp roles nor under a condition that differs between threads.
    pub(super) fn cluster_barrier(&mut self, ctx: Uniformity) {
        self.event(EventKind::ClusterBarrier);
        if self.group != Group::Block {
            self.error(
                Rule::Cluster,
                "a cluster barrier inside warp roles: the other role's threads never arrive".into(),
            );
        } else if ctx < Uniformity::Block {
            self.error(
                Rule::Cluster,
                "a cluster barrier under a condition or loop bound that differs between threads: the threads that skip it never arrive".into(),
            );
        }
    }
}

/// The named barriers of warp roles count their consumer threads: whole warps, and exactly the
/// warps for which the producer condition is false (when it depends on the warp index alone).
pub(super) fn check_consumer_count(w: &mut Walk, is_producer: &Val, consumer_threads: i64) {
    if consumer_threads <= 0 || consumer_threads % crate::target::WARP_THREADS != 0 {
        w.error(
            Rule::NamedBarrierCount,
            format!("the consumers' named barrier counts {consumer_threads} threads: a named barrier counts whole warps"),
        );
        return;
    }
    let Some(threads) = block_threads(w.k) else {
        return;
    };
    let warps = (threads + crate::target::WARP_THREADS - 1) / crate::target::WARP_THREADS;
    let producers: Option<i64> = (0..warps)
        .map(|warp| eval(is_producer, Some(warp)).map(|p| (p != 0) as i64))
        .sum();
    if let Some(producers) = producers {
        let consumers = (warps - producers) * crate::target::WARP_THREADS;
        if consumers != consumer_threads {
            w.error(
                Rule::NamedBarrierCount,
                format!(
                    "the consumers' named barrier counts {consumer_threads} threads, but {consumers} threads ({} of the block's {warps} warps) are consumers",
                    warps - producers
                ),
            );
        }
    }
}

/// Every use of a named barrier id counts the same threads; ids are within the hardware's 16.
pub fn check_barrier_uses(uses: &[BarrierUse]) -> Vec<VerifyError> {
    let mut errors = Vec::new();
    let mut first: HashMap<u32, &BarrierUse> = HashMap::new();
    let at = |u: &BarrierUse, rule: Rule, detail: String| VerifyError {
        rule,
        stmt: Some(u.stmt),
        text: u.text.clone(),
        detail,
    };
    for u in uses {
        if u.id >= NAMED_BARRIERS {
            errors.push(at(
                u,
                Rule::NamedBarrierId,
                format!(
                    "named barrier {} does not exist: a block has barriers 0 to {}",
                    u.id,
                    NAMED_BARRIERS - 1
                ),
            ));
            continue;
        }
        match first.get(&u.id) {
            Some(f) if f.threads != u.threads => errors.push(at(
                u,
                Rule::NamedBarrierCount,
                format!(
                    "named barrier {} counts {} threads here but {} at statement {} `{}`",
                    u.id,
                    count(u.threads),
                    count(f.threads),
                    f.stmt,
                    f.text
                ),
            )),
            Some(_) => {}
            None => {
                first.insert(u.id, u);
            }
        }
    }
    errors
}

fn count(threads: Option<i64>) -> String {
    threads.map_or_else(|| "all the block's".into(), |n| n.to_string())
}

/// The block barriers of a kernel as named barriers (id, count), in statement order.
pub fn barrier_uses(k: &Kernel) -> Vec<BarrierUse> {
    let mut w = Walk::new(k, super::Stage::LOWERED);
    w.kernel_body(&k.body);
    w.barriers
}
