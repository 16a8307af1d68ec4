//! The staged epilogue and the loop nests of a warp-specialized kernel, for the pipeline view.
//!
//! Staged epilogue: the consumers `stmatrix` accumulator registers into a shared cache, fence
//! the generic proxy against the async one (`fence.proxy.async`), pass a barrier, and one
//! thread TMA-stores the cache in boxes and commits them as bulk async-groups; before the cache
//! is written again it waits for those stores to have read it (`cp.async.bulk.wait_group.read`).
//! Takes the walk's events (`StMatrix`, `TmaStore`, `BulkCommit`, `BulkWaitRead`,
//! `FenceProxyAsync`, `Sync`, the computes that fill the `stmatrix` source) and their loops;
//! emits one [`StagedEpilogue`] per shared cache that a `stmatrix` of a wgmma accumulator
//! writes and a TMA store reads (none for other kernels). Counts are per tile: per iteration of
//! the innermost loop around both the writes and the stores.
//!
//! Loop nests: for a pipeline whose producer walks a loop of its own (warp specialization), the
//! serial loops around its loads and around its consumers' waits, outermost first
//! ([`LoopNest`]): the producer's one flat loop over (tile, k) against the consumers' tile
//! loops and k loop.

use super::{Event, PhaseKind, Place, Walk, What};
use crate::kir::{BufferId, Kernel, Val};
use crate::passes::PipelinePlan;
use serde::Serialize;

/// The store path of one shared cache (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StagedEpilogue {
    /// The shared cache (`c_s`).
    pub cache: String,
    /// Its size in bytes, when constant.
    pub cache_bytes: Option<i64>,
    /// The wgmma accumulator whose registers the `stmatrix` source is computed from.
    pub accumulator: String,
    /// `stmatrix.x4` each warp issues per tile; None when a loop extent is not constant.
    pub stmatrix: Option<i64>,
    /// A `fence.proxy.async` orders the writes before the stores.
    pub fence: bool,
    /// A block (or named) barrier between the writes and the stores.
    pub barrier: bool,
    /// The global tensor the stores write, and its tensor map.
    pub tensor: String,
    pub tensor_map: String,
    /// TMA stores (boxes) per tile, and bytes each reads.
    pub boxes: Option<i64>,
    pub box_bytes: i64,
    /// `cp.async.bulk.commit_group`s per tile.
    pub commits: Option<i64>,
    /// The thread condition of the stores' issuer (`warp == 0 && elect_one()`).
    pub issuer: Option<String>,
    /// The loop whose iterations are tiles (`n_oi`); None: one tile.
    pub tile_loop: Option<String>,
    /// Where the issuer waits for the stores to have read the cache, in program order.
    pub waits: Vec<StoreWait>,
}

/// A `cp.async.bulk.wait_group.read pending`, and where it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StoreWait {
    pub pending: u32,
    pub at: StoreWaitAt,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreWaitAt {
    /// In the tile loop before the cache is written: it waits for the previous tile's stores,
    /// which so overlap this tile's main loop.
    BeforeRewrite,
    /// In the tile loop after the stores: nothing overlaps them.
    AfterStores,
    /// After the tile loop: the last stores, before the kernel exits.
    Exit,
}

/// One serial loop: its variable and extent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Level {
    pub var: String,
    pub extent: String,
}

/// The loops of a pipeline whose producer has a loop of its own, outermost first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LoopNest {
    /// Index into [`super::PipelineView::pipelines`].
    pub pipeline: usize,
    /// Around the loads (one flat loop over (tile, k) in a persistent kernel).
    pub producer: Vec<Level>,
    /// Around the consumers' waits (tile loops, then the k loop).
    pub consumers: Vec<Level>,
}

/// The serial loops around loop `lp`, outermost first, up to (not including) `stop`.
fn chain(walk: &Walk, mut lp: Option<usize>, stop: Option<usize>) -> Vec<usize> {
    let mut out = Vec::new();
    while lp != stop {
        let Some(l) = lp else { break };
        out.push(l);
        lp = walk.loops[l].parent;
    }
    out.reverse();
    out
}

/// Executions per iteration of loop `stop` of a statement in loop `lp`.
fn per_iteration(walk: &Walk, lp: Option<usize>, stop: Option<usize>) -> Option<i64> {
    chain(walk, lp, stop)
        .iter()
        .map(|&l| match walk.loops[l].extent {
            Val::Int(n) => Some(*n),
            _ => None,
        })
        .product()
}

fn level(walk: &Walk, l: usize) -> Level {
    Level {
        var: walk.loops[l].var.to_string(),
        extent: walk.loops[l].extent.text(),
    }
}

/// The loop nests of the pipelines with a producer loop (`places`: each pipeline's loops).
pub(super) fn nests(walk: &Walk, places: &[Vec<Place>]) -> Vec<LoopNest> {
    let find = |p: &[Place], kind| p.iter().find(|pl| pl.1 == kind).and_then(|pl| pl.0);
    let levels = |l: usize| -> Vec<Level> {
        chain(walk, Some(l), None)
            .into_iter()
            .map(|l| level(walk, l))
            .collect()
    };
    places
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let producer = find(p, PhaseKind::Produce)?;
            let consumers = find(p, PhaseKind::Consume)?;
            Some(LoopNest {
                pipeline: i,
                producer: levels(producer),
                consumers: levels(consumers),
            })
        })
        .collect()
}

/// The staged epilogues of `k` (see the module doc).
pub(super) fn staged(k: &Kernel, plan: &PipelinePlan, walk: &Walk) -> Vec<StagedEpilogue> {
    let events = &walk.events;
    let accumulators: Vec<BufferId> = events
        .iter()
        .filter_map(|e| match &e.what {
            What::Mma { w, .. } => Some(w.acc.buffer),
            _ => None,
        })
        .collect();
    let mut caches: Vec<BufferId> = Vec::new();
    let mut out = Vec::new();
    for (first, e) in events.iter().enumerate() {
        let What::Staged { cache, from } = e.what else {
            continue;
        };
        if caches.contains(&cache) {
            continue;
        }
        caches.push(cache);
        // The accumulator the source registers are computed from (a cast, or fused pointwise
        // ops, of its registers).
        let mut accumulator = None;
        for c in events.iter().filter_map(|e| match e.what {
            What::Compute(c) if c.out.buffer == from => Some(c),
            _ => None,
        }) {
            c.value.for_each_read(&mut |a| {
                if accumulator.is_none() && accumulators.contains(&a.buffer) {
                    accumulator = Some(a.buffer);
                }
            });
        }
        let Some(accumulator) = accumulator else {
            continue;
        };
        let stores: Vec<(usize, &Event)> = events
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e.what, What::Store(t) if t.src.buffer == cache))
            .collect();
        let (Some(&(i0, e0)), Some(&(last, _))) = (stores.first(), stores.last()) else {
            continue;
        };
        // What the plan says of the store: its tensor map, box and issuing thread.
        let Some(store) = plan
            .stores
            .iter()
            .find(|s| k.buffers[cache].tensor == Some(s.cache))
        else {
            continue;
        };
        let map = &k.tensor_maps[store.map];
        // The tile loop: the innermost loop around both the first write and the first store.
        let writes = chain(walk, e.lp, None);
        let tile = chain(walk, e0.lp, None)
            .into_iter()
            .zip(writes)
            .take_while(|(a, b)| a == b)
            .last()
            .map(|(l, _)| l);
        let in_tile = |e: &Event| super::walk::within(walk, e.lp, tile);
        let between = |from: usize, to: usize, f: &dyn Fn(&What) -> bool| {
            events[from..to].iter().any(|e| f(&e.what) && in_tile(e))
        };
        let stmatrix_sites: Vec<&Event> = events
            .iter()
            .filter(|e| matches!(e.what, What::Staged { cache: c, .. } if c == cache))
            .collect();
        let stmatrix = stmatrix_sites
            .iter()
            .map(|e| per_iteration(walk, e.lp, tile))
            .sum::<Option<i64>>();
        let commits: Vec<&Event> = events[i0..]
            .iter()
            .filter(|e| matches!(e.what, What::BulkCommit) && in_tile(e))
            .collect();
        let waits = events
            .iter()
            .enumerate()
            .filter_map(|(i, w)| {
                let What::BulkWait(pending) = w.what else {
                    return None;
                };
                let at = match (in_tile(w), i < first) {
                    (true, true) => StoreWaitAt::BeforeRewrite,
                    (true, false) if i > last => StoreWaitAt::AfterStores,
                    (false, false) if tile.is_some() => StoreWaitAt::Exit,
                    _ => return None,
                };
                Some(StoreWait { pending, at })
            })
            .collect();
        let b = &k.buffers[cache];
        out.push(StagedEpilogue {
            cache: b.name.clone(),
            cache_bytes: b.size.as_ref().and_then(|s| match s {
                Val::Int(n) => Some(n * b.dtype.size_bytes() as i64),
                _ => None,
            }),
            accumulator: k.buffers[accumulator].name.clone(),
            stmatrix,
            fence: between(first, i0, &|w| matches!(w, What::ProxyFence)),
            barrier: between(first, i0, &|w| matches!(w, What::Sync)),
            tensor: map.tensor.clone(),
            tensor_map: map.param.clone(),
            boxes: stores
                .iter()
                .map(|(_, e)| per_iteration(walk, e.lp, tile))
                .sum(),
            box_bytes: store.bytes,
            commits: commits
                .iter()
                .map(|e| per_iteration(walk, e.lp, tile))
                .sum(),
            issuer: Some(plan.issuer.text()),
            tile_loop: tile.map(|l| walk.loops[l].var.to_string()),
            waits,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{extract, PipelineView};
    use super::*;
    use crate::kir::Stmt;
    use crate::passes::PipelinePlan;

    fn kernel(path: &str) -> (Kernel, PipelinePlan) {
        let file = format!("{}/../examples/{path}", env!("CARGO_MANIFEST_DIR"));
        let src = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
        let c = crate::compile(&src, &Default::default())
            .unwrap_or_else(|e| panic!("{}", e.render(&src, "t.hf")));
        (c.kernel, c.pipeline_plan)
    }

    fn view(path: &str) -> PipelineView {
        let (k, plan) = kernel(path);
        extract(&k, &plan)
    }

    fn step9() -> StagedEpilogue {
        StagedEpilogue {
            cache: "c_s".into(),
            cache_bytes: Some(65536),
            accumulator: "s_acc".into(),
            stmatrix: Some(16),
            fence: true,
            barrier: true,
            tensor: "c".into(),
            tensor_map: "c_map".into(),
            boxes: Some(4),
            box_bytes: 16384,
            commits: Some(4),
            issuer: Some("warp == 0 && elect_one()".into()),
            tile_loop: Some("n_oi".into()),
            waits: vec![
                StoreWait {
                    pending: 0,
                    at: StoreWaitAt::BeforeRewrite,
                },
                StoreWait {
                    pending: 0,
                    at: StoreWaitAt::Exit,
                },
            ],
        }
    }

    /// The seed kernel: 16 stmatrix.x4 per warp fill the 64 KiB cache, four boxes are stored
    /// and committed per tile, and the wait comes only before the next tile's writes, and at
    /// exit; the producer walks one flat loop against the consumers' three.
    #[test]
    fn step9_stages_its_tile_and_waits_before_the_next_writes() {
        let v = view("matmul/step9_tma_store_epilogue.hf");
        assert_eq!(v.staged, [step9()]);
        let level = |var: &str, extent: &str| Level {
            var: var.into(),
            extent: extent.into(),
        };
        assert_eq!(
            v.nests,
            [LoopNest {
                pipeline: 0,
                producer: vec![level(
                    "m_oi_n_oi_k_o",
                    "ceilDiv(ceilDiv(M, 128), 16) * (ceilDiv(ceilDiv(N, 256), 8) * ceilDiv(K, 64))"
                )],
                consumers: vec![
                    level("m_oi", "ceilDiv(ceilDiv(M, 128), 16)"),
                    level("n_oi", "ceilDiv(ceilDiv(N, 256), 8)"),
                    level("k_o", "ceilDiv(K, 64)"),
                ],
            }]
        );
    }

    /// Step 10 fuses bias + GELU into the registers: the same store path, from the same
    /// accumulator.
    #[test]
    fn step10_has_the_same_store_path() {
        let v = view("matmul/step10_bias_gelu_tma_store.hf");
        assert_eq!(v.staged, [step9()]);
        assert_eq!(v.nests.len(), 1);
    }

    /// The wait's place comes from where it is: moved right after the stores, nothing
    /// overlaps them.
    #[test]
    fn a_wait_right_after_the_stores_is_said_to_be() {
        let (mut k, plan) = kernel("matmul/step9_tma_store_epilogue.hf");
        let mut moved = 0;
        crate::kir::for_each_block_mut(&mut k.body, &mut |body| {
            let wait = body.iter().position(|s| match s {
                Stmt::If { then, .. } => matches!(then[..], [Stmt::BulkWaitRead(0)]),
                _ => false,
            });
            let store = body.iter().rposition(|s| {
                let mut found = false;
                crate::kir::for_each_stmt(std::slice::from_ref(s), &mut |s| {
                    found |= matches!(s, Stmt::TmaStore(_))
                });
                found
            });
            if let (Some(w), Some(s)) = (wait, store) {
                if w < s {
                    let st = body.remove(w);
                    body.insert(s, st);
                    moved += 1;
                }
            }
        });
        assert_eq!(moved, 1);
        let waits: Vec<StoreWaitAt> = extract(&k, &plan).staged[0]
            .waits
            .iter()
            .map(|w| w.at)
            .collect();
        assert_eq!(waits, [StoreWaitAt::AfterStores, StoreWaitAt::Exit]);
    }

    #[test]
    fn kernels_without_a_staged_epilogue_have_none() {
        for path in [
            "matmul/step4_two_consumers.hf",
            "matmul/step8_wide_k_tile.hf",
            "tma/exp_2d.hf",
            "basics/add.hf",
        ] {
            assert_eq!(view(path).staged, [], "{path}");
        }
        // Step 3 is warp-specialized but not persistent: its consumers' loop is the k loop.
        let nests = view("matmul/step3_warp_specialized.hf").nests;
        assert_eq!(nests.len(), 1);
        assert_eq!(nests[0].consumers.len(), 1);
    }
}
