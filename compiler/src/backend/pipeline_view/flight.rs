//! What runs while a tensor-core product is in flight, and how the warp groups that issue it
//! take turns.
//!
//! Takes the walk's events and one commit group (its role and its `wgmma.commit_group`);
//! guarantees, from the statements alone: the `wgmma.wait_group N` that drains the group is the
//! first after its commit with at least `N` of the role's groups committed after it (scanning the
//! rest of its loop's body, then, when the group stays in flight across the back edge, the next
//! iteration's body); the products the role issues and the accumulators the
//! computes read in between are what overlaps it (attention's softmax of S_j reads S's
//! accumulator while P_{j-1} V_{j-1} is in flight). Emits [`Flight`] per group, resolved to
//! product indices by [`super::mma`].
//!
//! Turns: the plan says whether the consumer groups take turns with whole stages
//! (`WsPlan::turns`, the matmul ping-pong) or issuing their products (`WsPlan::product_turns`,
//! `turns=products`); the `Turn` statements say in which turn each group is issued.

use super::walk::{role_index, same_product, within};
use super::{Role, Walk, What};
use crate::kir::{BufferId, TurnStep, Wgmma};
use crate::passes::PipelinePlan;
use serde::Serialize;

/// How the warp groups of the consumers take turns (named barriers pass the turn on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Turns {
    pub kind: TurnKind,
    /// The groups that take turns.
    pub groups: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnKind {
    /// Each group consumes whole stages for its own tile while the others run their epilogues
    /// (the matmul ping-pong: the loads sit inside the consumers' loop over the groups).
    Stages,
    /// The groups share every stage and take turns issuing their products (`turns=products`:
    /// FlashAttention-3's ping-pong, one group's softmax under the other's products).
    Products,
}

/// What runs while one product's commit group is in flight.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InFlight {
    /// The `N` of the `wgmma.wait_group N` that drains the group; None when no wait in its loop
    /// (or after its commit, outside a loop) does.
    pub drained_by: Option<u32>,
    /// That wait is in the next iteration of the group's loop: the group stays in flight across
    /// the back edge.
    pub next_iteration: bool,
    /// Products (indices into [`super::PipelineView::mmas`]) whose wgmmas the role issues while
    /// it is in flight (itself when its next iteration's group is).
    pub products: Vec<usize>,
    /// Products whose accumulators the computes read while it is in flight: their epilogue (the
    /// softmax of an attention kernel's S) runs under it.
    pub epilogues: Vec<usize>,
}

/// A group's [`InFlight`] before the products are numbered.
#[derive(Clone, Default)]
pub(super) struct Flight<'k> {
    /// The event of the wait that drains the group, and its `N`.
    pub drain: Option<(usize, u32)>,
    pub next_iteration: bool,
    pub issued: Vec<&'k Wgmma>,
    pub read: Vec<BufferId>,
}

/// The turns of the plan's warp-specialized pipelines, when the consumer groups take turns.
pub(super) fn turns(plan: &PipelinePlan) -> Option<Turns> {
    let ws = || plan.pipes.iter().filter_map(|p| p.ws.as_ref());
    let stages = ws().map(|w| w.turns).find(|&t| t > 1).map(|groups| Turns {
        kind: TurnKind::Stages,
        groups,
    });
    stages.or_else(|| {
        ws().find_map(|w| w.product_turns).map(|groups| Turns {
            kind: TurnKind::Products,
            groups,
        })
    })
}

/// The events of the body of loop `lp` (the whole kernel for None), as a range.
fn body(walk: &Walk, lp: Option<usize>) -> std::ops::Range<usize> {
    let inside = |i: &usize| within(walk, walk.events[*i].lp, lp);
    let start = (0..walk.events.len()).find(inside).unwrap_or(0);
    let end = (0..walk.events.len())
        .rev()
        .find(inside)
        .map_or(0, |i| i + 1);
    start..end
}

/// What is in flight with the group committed at event `commit` of role `role` (see the module
/// doc); `accumulators` are the products' accumulator registers.
pub(super) fn flight<'k>(
    walk: &Walk<'k>,
    roles: &[Role],
    role: usize,
    commit: usize,
    accumulators: &[BufferId],
) -> Flight<'k> {
    let events = &walk.events;
    let lp = events[commit].lp;
    let range = body(walk, lp);
    // The rest of this iteration, then (in a loop) the next one, whose own commit counts.
    let rest = (commit + 1..range.end).map(|i| (i, false));
    let next = lp
        .map(|_| range.clone().map(|i| (i, true)))
        .into_iter()
        .flatten();
    let mut out = Flight::default();
    let mut later = 0;
    for (i, next_iteration) in rest.chain(next) {
        let e = &events[i];
        let mine = || role_index(roles, e) == Some(role);
        match e.what {
            What::Commit if mine() => later += 1,
            What::Mma { w, .. } if mine() && !out.issued.iter().any(|o| same_product(o, w)) => {
                out.issued.push(w)
            }
            What::MmaWait(n) if mine() && later >= n => {
                out.drain = Some((i, n));
                out.next_iteration = next_iteration;
                return out;
            }
            What::Compute(c) => c.value.for_each_read(&mut |a| {
                if accumulators.contains(&a.buffer) && !out.read.contains(&a.buffer) {
                    out.read.push(a.buffer);
                }
            }),
            _ => {}
        }
    }
    // Not drained in its loop: nothing is known to run under it.
    Flight::default()
}

/// The turn the group starting at event `start` is issued in: numbered among the turns its
/// role waits for in the body of the wait's loop; None when it is not between a turn's wait
/// and its pass.
pub(super) fn turn(walk: &Walk, roles: &[Role], role: usize, start: usize) -> Option<usize> {
    let events = &walk.events;
    let step = |i: usize| match events[i].what {
        What::Turn(s) if role_index(roles, &events[i]) == Some(role) => Some(s),
        _ => None,
    };
    let last = (0..start).rev().find(|&i| step(i).is_some())?;
    if step(last) != Some(TurnStep::Wait) {
        return None;
    }
    let range = body(walk, events[last].lp);
    Some(
        (range.start..last)
            .filter(|&i| step(i) == Some(TurnStep::Wait))
            .count(),
    )
}
