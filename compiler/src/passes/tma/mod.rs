//! TMA and bulk copies between global and shared memory, and circular buffering: the three
//! passes `tma` ([`plan`]), `tma_issue` ([`issue`]) and `circular_buffer` ([`circular`]), run
//! only when the fusion has a cache filled by `load=tma|bulk`, an output written by
//! `cache_before(y, memory=shared, store=tma)`, or a circular-buffered cache; warp
//! specialization in [`warp_specialize`]. This module holds what they share: the parts of the
//! [`PipelinePlan`] that `tma` computes and hands on ([`TmaInfo`], [`Pipe`], [`WsPlan`],
//! [`StoreInfo`]; the plan itself in [`pipeline_plan`]) and small helpers.

pub mod circular;
pub mod cluster;
pub mod issue;
pub mod pipeline_plan;
pub mod plan;
pub mod stage;
pub mod warp_specialize;

pub use circular::run as run_circular;
pub use issue::run as run_issue;
pub use pipeline_plan::PipelinePlan;
pub use plan::run as run_plan;

use super::context::{mul, Change, Ctx, LoopKey};
use super::indexing::consumer_roots;
use crate::diag::Diagnostic;
use crate::fusion::{
    FenceMode, IterId, IterOrigin, LoadKind, MemoryType, ParallelType, TensorId, WarMode,
};
use crate::kir::{
    Access, BufferId, CopyKind, Data, Flow, Kernel, Loop, MbarArray, MbarId, Step, Stmt,
    TensorMapId, TmaLoad, TmaStore, Val,
};
use crate::plan::{Constraint, SizeExpr, TensorMapSpec};
use std::collections::HashMap;

/// The shared-memory element a swizzled box puts logical element `e` at: 16-byte chunk
/// `c = e / (16 / elem)` becomes `c ^ ((e * elem / 128) % (swizzle / 16))` (CUTLASS's
/// `Swizzle<log2(swizzle / 16), 4, 3>` on byte addresses), the element within the chunk stays.
pub fn swizzled_index(e: Val, elem: i64, swizzle: u32) -> Val {
    let per_chunk = 16 / elem;
    let per_line = 128 / elem;
    let chunk = Val::div(e.clone(), Val::Int(per_chunk));
    let line = Val::rem(
        Val::div(e.clone(), Val::Int(per_line)),
        Val::Int(swizzle as i64 / 16),
    );
    Val::add(
        Val::mul(
            Val::Xor(Box::new(chunk), Box::new(line)),
            Val::Int(per_chunk),
        ),
        Val::rem(e, Val::Int(per_chunk)),
    )
}

/// What the `tma` pass decided for one cache that a pipeline fills.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TmaInfo {
    pub tensor: TensorId,
    pub src: TensorId,
    /// `Plain` for a circular-buffered cache filled by ordinary loads.
    pub kind: LoadKind,
    /// Elements of one stage in shared memory (the box, padded to [`SMEM_ALIGN`] bytes); None
    /// for plain loads (the allocation pass sizes them).
    pub stage_elems: Option<i64>,
    /// Bytes of one stage's copies (the expected transaction count: every box of
    /// [`TmaInfo::boxes`]); 0 for plain loads.
    pub bytes: i64,
    /// Index into `Kernel::tensor_maps` (tile copies).
    pub map: Option<TensorMapId>,
    /// Rank of the source and the box, innermost first (bulk copies: only `box_dims[0]` > 1).
    pub box_dims: Vec<i64>,
    /// The box and how many of them one stage holds side by side.
    pub(crate) boxes: plan::BoxShape,
    pub global_dims: Vec<SizeExpr>,
    pub pipe: PipeId,
    pub circular: Option<crate::fusion::CircularBuffer>,
    /// Shared-memory swizzle of the box in bytes (0: none).
    pub swizzle: u32,
    /// Multicast to the CTAs of the cluster (their count): the box is the same for all of them,
    /// so each issues one slice of it ([`cluster`]).
    pub multicast: Option<i64>,
}

impl TmaInfo {
    /// The warp specialization of its circular buffer.
    pub fn ws(&self) -> Option<crate::fusion::WarpSpecialized> {
        self.circular.and_then(|c| c.ws)
    }
}

crate::id::define_id!(
    /// A pipe: its place in [`PipelinePlan::pipes`].
    pub PipeId => Pipe
);

/// The loads of one serial loop, pipelined together: they share slots, barriers and phases.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Pipe {
    /// The innermost serial loop around the loads (None: no serial loop, one load).
    pub loop_key: Option<LoopKey>,
    pub stages: i64,
    pub prefetch: i64,
    pub war: WarMode,
    /// "Full" mbarriers when a copy fills the slots.
    pub full: Option<MbarId>,
    /// "Empty" mbarriers with `war=mbarrier`.
    pub empty: Option<MbarId>,
    /// Indices into [`PipelinePlan::loads`].
    pub members: Vec<usize>,
    /// Warp specialization (`warp_specialized(...)`), planned by `tma`.
    pub ws: Option<WsPlan>,
}

/// A warp-specialized pipeline: the padded block, who produces, who issues which loads.
#[derive(Clone, Debug, serde::Serialize)]
pub struct WsPlan {
    pub spec: crate::fusion::WarpSpecialized,
    /// Warp-uniform: this warp belongs to the producer warp group.
    pub is_producer: Val,
    pub consumer_threads: i64,
    /// Consumer groups that take turns (ping-pong): when the buffered loop sits inside the
    /// consumers' loop bound to the specialised dim, each of its `turns` groups consumes whole
    /// stages of its own tile in turn (the producer walks that loop serially, and each stage is
    /// released by one group's warps); 1 when every consumer reads every stage (cooperative).
    pub turns: i64,
    /// `turns=products`: the consumer groups along the specialised dim that take turns issuing
    /// their tensor-core products (the `mma` pass places the turns), while sharing every stage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product_turns: Option<i64>,
    /// One per producer warp that issues loads, each with its own full and empty barriers.
    pub roles: Vec<WsRole>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct WsRole {
    /// Producer warp (0..4) as scheduled.
    pub warp: u32,
    /// Its warp index in the block.
    pub block_warp: i64,
    pub full: MbarId,
    pub empty: MbarId,
    /// Indices into [`PipelinePlan::loads`].
    pub members: Vec<usize>,
}

/// A TMA store of an output from its shared-memory cache.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StoreInfo {
    /// The global output.
    pub tensor: TensorId,
    /// Its shared-memory cache (`cache_before`).
    pub cache: TensorId,
    pub map: TensorMapId,
    pub bytes: i64,
    pub box_dims: Vec<i64>,
    pub fence: FenceMode,
    /// Shared-memory swizzle of the box in bytes (0: none).
    pub swizzle: u32,
    /// Who issues the store, commits it and waits for it to have read shared memory: the
    /// kernel's issuer, or one elected thread per thread group when the store sits in
    /// thread-parallel loops (see [`StoreGroup`]).
    pub issuer: Val,
    /// The thread groups that each store their own boxes, when the store sits in loops bound
    /// to `threadIdx.y` / `threadIdx.z` (a warp group's half of a tile, say).
    pub group: Option<StoreGroup>,
}

/// A TMA store issued per thread group: one elected thread per value of the thread dims that
/// enclose the store issues that group's boxes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct StoreGroup {
    /// The thread dims that select the group (`TIDy`, `TIDz`), outermost first.
    pub dims: Vec<ParallelType>,
    /// Loop keys of those thread-parallel loops.
    pub keys: Vec<LoopKey>,
    /// Threads per group (the block's threads over the groups).
    pub threads: i64,
    /// Every write of the cache is in the same thread-parallel loops as the store, so a group
    /// writes and stores only its own part: the barriers between the writes and the store (and
    /// before the next writes) need count only the group's threads.
    pub local: bool,
}

/// Whether the fusion has TMA or bulk copies or circular buffering (the three passes run only
/// then).
pub fn used(cx: &Ctx) -> bool {
    cx.fusion
        .tensors
        .iter()
        .any(|t| t.load != LoadKind::Plain || t.store != LoadKind::Plain || t.circular.is_some())
}

/// The loops around the first statement that writes `buffer` (a computation or a copy),
/// outermost first.
pub(crate) fn loops_around_write(
    body: &[Stmt],
    buffer: BufferId,
) -> Option<Vec<(LoopKey, ParallelType)>> {
    let mut found = None;
    crate::kir::for_each_in_loops(body, &mut |s, around| {
        if found.is_none() && writes_buffer(s, buffer) {
            found = Some(around.iter().map(|l| (l.key, l.parallel)).collect());
        }
    });
    found
}

/// Whether `s` is a computation or a copy writing `buffer`.
fn writes_buffer(s: &Stmt, buffer: BufferId) -> bool {
    match s {
        Stmt::Compute(c) => c.out.buffer == buffer,
        Stmt::TmaLoad(l) => l.dst.buffer == buffer,
        _ => false,
    }
}

/// The thread-parallel loops around every statement that writes `buffer`, one list per write.
pub(crate) fn thread_loops_of_writes(
    body: &[Stmt],
    buffer: BufferId,
) -> Vec<Vec<(LoopKey, ParallelType)>> {
    let mut out = Vec::new();
    crate::kir::for_each_in_loops(body, &mut |s, around| {
        if writes_buffer(s, buffer) {
            let bound = around.iter().filter(|l| l.parallel.is_thread());
            out.push(bound.map(|l| (l.key, l.parallel)).collect());
        }
    });
    out
}

pub(crate) fn guard(cond: Val, body: Vec<Stmt>) -> Stmt {
    if cond == Val::True && body.len() == 1 {
        return body.into_iter().next().expect("one statement");
    }
    Stmt::If {
        cond,
        then: body,
        els: Vec::new(),
    }
}
