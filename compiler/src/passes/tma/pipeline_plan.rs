//! The pipeline plan: what the `tma` pass decides about a kernel's asynchronous copies, in one
//! typed value handed explicitly to the passes that act on it (an analysis result, as a
//! dominator tree is in Cranelift, not state on [`Ctx`](crate::passes::context::Ctx)).
//!
//! It holds, for a fusion with TMA or bulk copies, TMA stores or circular buffers:
//! - [`PipelinePlan::loads`]: every cache a pipeline fills (its source tensor, copy kind, box,
//!   bytes per stage, tensor map, swizzle, circular buffering, the pipe it belongs to);
//! - [`PipelinePlan::pipes`]: one per serial loop holding such loads (stages, prefetch,
//!   write-after-read mode, its "full" and "empty" mbarrier arrays as indices into
//!   `Kernel::mbarriers`, and for `warp_specialized` the [`WsPlan`](super::WsPlan): padded
//!   block, producer condition, consumer threads, one full/empty pair per producer role);
//! - [`PipelinePlan::stores`]: every TMA store of an output from its shared cache;
//! - [`PipelinePlan::issuer`]: the thread condition of the one thread that issues copies and
//!   stores and initialises mbarriers;
//! - [`PipelinePlan::stage_elems`]: the elements of one stage of each pipelined buffer;
//! - [`PipelinePlan::stream_k`]: a stream-K split's pieces, which the pipelines count by run.
//!
//! Who computes it: the `tma` pass ([`super::plan::run`]) returns it (everything but
//! `stage_elems`, along with the tensor maps and mbarrier arrays it adds to the kernel); the
//! `allocation` pass completes it with `stage_elems` once it has sized the buffers. A fusion
//! without any of these features gets [`PipelinePlan::default`] (no loads, pipes or stores;
//! every thread issues). Who reads it: `allocation`, `tma_issue`, `circular_buffer`, `sync`,
//! `mma` ([`crate::passes::PIPELINE`] hands it to them, through [`crate::passes::Handoff`]), and after the last pass the pipeline view
//! ([`crate::backend::pipeline_view`], from [`crate::Compilation::pipeline_plan`]).

use super::{Pipe, PipeId, StoreInfo, TmaInfo};
use crate::fusion::TensorId;
use crate::kir::{BufferId, MbarId, Val};
use rustc_hash::FxHashMap;

/// See the module documentation. (Serialize: its JSON is snapshotted for the TMA and
/// warp-specialized examples, tests/tests/pipeline_plan.rs.)
#[derive(Clone, Debug, serde::Serialize)]
pub struct PipelinePlan {
    /// Caches that pipelines fill: TMA and bulk copies, and circular-buffered plain loads.
    pub loads: Vec<TmaInfo>,
    /// One per serial loop that holds such loads ([`TmaInfo::pipe`] indexes it).
    pub pipes: Vec<Pipe>,
    /// TMA stores of outputs.
    pub stores: Vec<StoreInfo>,
    /// Who issues copies and stores and initialises mbarriers (see [`super::plan::issuer`]);
    /// `true` (every thread) without copies.
    pub issuer: Val,
    /// Elements of one stage of each circular-buffered (or TMA-filled) buffer (set by the
    /// `allocation` pass).
    pub stage_elems: FxHashMap<BufferId, Val>,
    /// The kernel's stream-K split (`persistent(..., stream_k)`), if any.
    #[serde(skip)]
    pub stream_k: Option<crate::kir::StreamK>,
}

impl Default for PipelinePlan {
    fn default() -> Self {
        PipelinePlan {
            loads: Vec::new(),
            pipes: Vec::new(),
            stores: Vec::new(),
            issuer: Val::True,
            stage_elems: FxHashMap::default(),
            stream_k: None,
        }
    }
}

/// One stream of copies that completes on one "full" mbarrier array: a pipe's copies, or in a
/// warp-specialized pipe one producer role's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stream {
    pub pipe: PipeId,
    /// The "full" and (when slots are released by mbarrier) "empty" arrays.
    pub full: MbarId,
    pub empty: Option<MbarId>,
    /// Its loads, indices into [`PipelinePlan::loads`].
    pub loads: Vec<usize>,
}

impl PipelinePlan {
    /// The linear iteration, at `v`, of the buffered loop `l` of a circular buffer within the
    /// serial loops around it (`outer`, see [`super::stage::linear`]); for a stream-K
    /// piece's k loop, the CTA's count of k steps so far (its run goes on from piece to piece).
    pub fn buffered_linear(
        &self,
        outer: &Val,
        l: &crate::kir::Loop,
        v: &Val,
        in_loop: bool,
    ) -> Val {
        match &self.stream_k {
            Some(sk) if sk.k_var == l.var => Val::add(sk.before.clone(), v.clone()),
            _ => super::stage::linear(outer, &l.extent, v, in_loop),
        }
    }

    /// Every stream of copies, pipe by pipe (pipes of plain loads have none).
    pub fn streams(&self) -> Vec<Stream> {
        let mut out = Vec::new();
        for (p, pipe) in self.pipes.iter().enumerate() {
            let p = PipeId::new(p);
            match &pipe.ws {
                Some(ws) => out.extend(ws.roles.iter().map(|r| Stream {
                    pipe: p,
                    full: r.full,
                    empty: Some(r.empty),
                    loads: r.members.clone(),
                })),
                None => out.extend(pipe.full.map(|full| Stream {
                    pipe: p,
                    full,
                    empty: pipe.empty,
                    loads: pipe.members.clone(),
                })),
            }
        }
        out
    }

    /// The warp specialization of the kernel, if a pipe has one (at most one does).
    pub fn warp_specialized(&self) -> Option<&super::WsPlan> {
        self.pipes.iter().find_map(|p| p.ws.as_ref())
    }

    /// The shared-memory swizzle (bytes) of buffer `b` when it holds a swizzled TMA box: a
    /// swizzled load's cache or a swizzled store's source (`tensor_buffer`: the buffer of each
    /// tensor, `Layout::tensor_buffer`).
    pub fn box_swizzle(
        &self,
        tensor_buffer: &FxHashMap<TensorId, BufferId>,
        b: BufferId,
    ) -> Option<u32> {
        self.loads
            .iter()
            .map(|i| (i.tensor, i.swizzle))
            .chain(self.stores.iter().map(|s| (s.cache, s.swizzle)))
            .find(|&(t, sw)| sw != 0 && tensor_buffer[&t] == b)
            .map(|(_, sw)| sw)
    }

    /// The full barriers a load of cache `t` completes on (its role's, when warp-specialized).
    pub fn full_of(&self, t: TensorId) -> MbarId {
        let m = self
            .loads
            .iter()
            .position(|i| i.tensor == t)
            .expect("a planned load");
        let pipe = &self.pipes[self.loads[m].pipe];
        match &pipe.ws {
            Some(ws) => {
                ws.roles
                    .iter()
                    .find(|r| r.members.contains(&m))
                    .expect("a role of the load")
                    .full
            }
            None => pipe.full.expect("a copy has full barriers"),
        }
    }
}
