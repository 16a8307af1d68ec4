//! The mbarrier life cycle (after `circular_buffer`): each array that is used is initialised
//! once, before its first use, with a block barrier in between (one thread initialises; the
//! barrier publishes the init to the others; the initialising thread's own uses later in the
//! same guarded body need none), and invalidated once, after its last use, with a
//! block barrier in between (no thread may still wait on it), in statement order. An array
//! released across the cluster needs the cluster's barrier in both places: peers signal it.

use super::{error_at, Event, EventKind, Rule, VerifyError};
use crate::kir::{Kernel, MbarId};

pub(super) fn check(k: &Kernel, events: &[Event], errors: &mut Vec<VerifyError>) {
    for (bars, m) in k.mbarrier_ids().zip(&k.mbarriers) {
        let barrier_between = |from: usize, to: usize| {
            events.iter().any(|e| {
                let meets = match e.kind {
                    EventKind::ClusterBarrier => true,
                    EventKind::Barrier => !m.cluster_wide,
                    _ => false,
                };
                meets && from < e.stmt && e.stmt < to
            })
        };
        let barrier = if m.cluster_wide {
            "cluster barrier"
        } else {
            "block barrier"
        };
        let of = |want: fn(MbarId) -> EventKind| -> Vec<&Event> {
            events.iter().filter(|e| e.kind == want(bars)).collect()
        };
        let (inits, invals, uses) = (
            of(EventKind::Init),
            of(EventKind::Inval),
            of(EventKind::Use),
        );
        let mut error = |rule: Rule, e: &Event, detail: String| {
            errors.push(error_at(k, rule, Some((e.stmt, e.st)), detail));
        };
        let name = &m.name;
        if m.cluster_wide && k.cluster.is_none() {
            if let Some(at) = inits.first().or(uses.first()) {
                error(
                    Rule::Cluster,
                    at,
                    format!("`{name}` is released across the cluster, but the kernel is launched without clusters"),
                );
            }
        }
        match (inits.as_slice(), uses.first().or(invals.first())) {
            ([], Some(first)) => error(
                Rule::MbarrierInit,
                first,
                format!("`{name}` is used but never initialised"),
            ),
            ([init], _) => {
                // The initialising thread's own uses after the init in the same guarded body
                // (a copy the issuer starts with the init) need no barrier: program order.
                let own = |u: &&Event| u.parent.is_some() && u.parent == init.parent;
                if let Some(first) = uses.first() {
                    if first.stmt < init.stmt {
                        error(
                            Rule::MbarrierInit,
                            first,
                            format!(
                                "`{name}` is used before its initialisation (statement {})",
                                init.stmt
                            ),
                        );
                    } else if let Some(first) = uses.iter().find(|u| !own(u)) {
                        if !barrier_between(init.stmt, first.stmt) {
                            error(
                                Rule::MbarrierInit,
                                first,
                                format!(
                                    "no {barrier} between the initialisation of `{name}` (statement {}) and its first use: other threads may see it uninitialised",
                                    init.stmt
                                ),
                            );
                        }
                    }
                }
            }
            ([_, again, ..], _) => error(
                Rule::MbarrierInit,
                again,
                format!("`{name}` is initialised a second time"),
            ),
            ([], None) => {}
        }
        match (invals.as_slice(), inits.first()) {
            ([], Some(init)) => error(
                Rule::MbarrierInval,
                init,
                format!("`{name}` is initialised but never invalidated"),
            ),
            ([inval], init) => {
                if init.is_some_and(|i| inval.stmt < i.stmt) {
                    error(
                        Rule::MbarrierInval,
                        inval,
                        format!("`{name}` is invalidated before its initialisation"),
                    );
                }
                if let Some(last) = uses.last() {
                    if last.stmt > inval.stmt {
                        error(
                            Rule::MbarrierInval,
                            last,
                            format!(
                                "`{name}` is used after its invalidation (statement {})",
                                inval.stmt
                            ),
                        );
                    } else if !barrier_between(last.stmt, inval.stmt) {
                        error(
                            Rule::MbarrierInval,
                            inval,
                            format!(
                                "no {barrier} between the last use of `{name}` (statement {}) and its invalidation: a thread may still be waiting on it",
                                last.stmt
                            ),
                        );
                    }
                }
            }
            ([_, again, ..], _) => error(
                Rule::MbarrierInval,
                again,
                format!("`{name}` is invalidated a second time"),
            ),
            ([], None) => {}
        }
    }
}
