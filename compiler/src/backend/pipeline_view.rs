//! The software pipelines of a lowered kernel as plain data (the playground's Pipeline pane
//! draws it): the thread roles that issue loads and wait on them, and for every circular buffer
//! its stages, the loads into its slots, the mbarriers that say a slot is full (and, once the
//! kernel has them, empty), and how a slot is given back to the producer.
//!
//! What the `tma` pass planned is read from the [`PipelinePlan`]: which pipelines there are (one
//! per stream of copies on one full barrier: a pipe's, or a warp-specialized producer role's),
//! their stages, prefetch distance and empty barriers, the boxes per stage and tensor maps of
//! the loads, the warp roles' thread counts and registers, and the TMA stores' tensor maps,
//! boxes and issuing thread. Where things happen is read from the final kernel IR, by walking
//! its statements: `TmaLoad`, `MbarArriveExpectTx`, `MbarWait` and `Sync`, with the `If` guards
//! and the serial loops around them (the phases, slots, parities, arrivals and releases). A guard's conjuncts that depend on the thread index select a role (today one thread,
//! `threadIdx.x == 0 && ...`, issues every load and every thread waits); the others (bounds) are
//! kept as the load's guard. Statement kinds it does not know are skipped, so statements added to
//! the kernel IR later do not break it (loads nested inside such statements are not seen until
//! the walk learns them).
//!
//! Tensor cores (`pipeline_view/mma.rs`): the same walk sees `Wgmma`, `WgmmaFence`, `WgmmaCommit`,
//! `WgmmaWait`, the consumers' `MbarArrive` and the computes that read an accumulator; the
//! warp groups that issue wgmma are a role like the others (`Role::mma`); with `Turn`, how their
//! groups take turns and, per product, what runs while it is in flight.
//!
//! The staged epilogue and the loop nests (`pipeline_view/epilogue.rs`): `StMatrix`,
//! `TmaStore`, `BulkCommit`, `BulkWaitRead` and `FenceProxyAsync`, and the loops around the
//! producer's and the consumers' side of a warp-specialized pipeline.

mod epilogue;
mod flight;
mod mma;
mod walk;

use crate::fusion::ParallelType;
use crate::kir::{BufferId, Compute, CopyKind, Kernel, MbarId, TmaLoad, TmaStore, Val, Wgmma};
use crate::passes::tma::pipeline_plan::Stream;
use crate::passes::PipelinePlan;
use crate::target;
use serde::Serialize;
use walk::{conjuncts, has_wgmma};

pub use epilogue::{Level, LoopNest, StagedEpilogue, StoreWait, StoreWaitAt};
pub use flight::{InFlight, TurnKind, Turns};
pub use mma::{
    Accumulator, Epilogue, Major, Mma, MmaInput, StageRelease, StageWait, WarpGroupAxis,
};

/// Every pipeline of one kernel; empty when it has no TMA or bulk loads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PipelineView {
    /// The roles that issue, wait or run wgmma, producers first.
    pub roles: Vec<Role>,
    pub pipelines: Vec<Pipeline>,
    /// The tensor-core products (one per accumulator and role), in program order; empty without
    /// wgmma.
    pub mmas: Vec<Mma>,
    /// The loops of the pipelines whose producer walks its own loop.
    pub nests: Vec<LoopNest>,
    /// The accumulator's store paths through shared memory (`stmatrix`, TMA store).
    pub staged: Vec<StagedEpilogue>,
    /// CTAs per cluster along x, y, z when the kernel runs in clusters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<[i64; 3]>,
    /// A persistent kernel's tile order (`persistent(BIDy, 16)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tiles: Option<TileOrder>,
}

/// The order in which a persistent kernel's CTAs take its tiles: CTA `b` of `gridDim.x` takes
/// linear tiles `b, b + gridDim.x, ...` in loop `var`, and a grouped raster maps each to the
/// grid-bound indices (the producer and the consumers both index through `var`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TileOrder {
    /// The tile loop's variable and how many tiles there are (clusters of tiles in a cluster
    /// kernel).
    pub var: String,
    pub tiles: String,
    /// The grid axis the raster's groups run along, and the tiles per group.
    pub along: String,
    pub group: i64,
    /// Each grid-bound variable (with its axis) and its value.
    pub indices: Vec<(String, String, String)>,
    /// Stream-K: after the whole rounds, the CTAs split the k steps of the tiles left.
    pub stream_k: bool,
}

/// A set of threads of the block with one job in the pipelines.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Role {
    /// `producer`, `consumers`, or `producer + consumer` (numbered when several differ).
    pub name: String,
    /// The thread condition that selects the role (`threadIdx.x == 0 && threadIdx.y == 0`);
    /// None: every thread of the block.
    pub condition: Option<String>,
    /// Threads of one block in the role, when the block size is a constant.
    pub thread_count: Option<i64>,
    /// The role's threads in words (`1 thread: threadIdx.x == 0`).
    pub threads: String,
    /// Registers per thread the role asks for (`setmaxnreg`); None: the kernel's allocation.
    pub registers: Option<u32>,
    pub issues: bool,
    pub waits: bool,
    /// It issues `wgmma.mma_async` (the consumer warp groups).
    pub mma: bool,
    /// Warp groups (128 threads each) of a role that issues wgmma, when its size is known.
    pub warp_groups: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadKind {
    /// `cp.async.bulk.tensor` through a tensor map.
    Tile,
    /// `cp.async.bulk` of one contiguous run.
    Bulk,
}

/// Where in the pipelined loop a load or a wait happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseKind {
    /// Loads of the first `prefetch` iterations, before any wait.
    Prologue,
    /// Load iteration `i + prefetch`, wait for iteration `i`, compute on it.
    Main,
    /// The last `prefetch` iterations: waits, no loads.
    Epilogue,
    /// Not in a serial loop: one load, waited on once.
    Once,
    /// A loop of loads only, with no main loop: a producer that walks its own loop (warp
    /// specialization), running ahead as far as the empty barriers let it.
    Produce,
    /// A loop of waits only, with no main loop: the consumers' own loop.
    Consume,
}

/// One loop of the pipeline (or the straight-line code of a [`PhaseKind::Once`] load).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Phase {
    pub kind: PhaseKind,
    /// The loop variable and extent (None for `Once`).
    pub var: Option<String>,
    pub extent: Option<String>,
}

/// One asynchronous copy into the buffer's slots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Load {
    pub kind: LoadKind,
    /// The shared-memory buffer it fills.
    pub buffer: String,
    /// The global tensor it reads.
    pub tensor: String,
    /// The tensor-map parameter (tile copies).
    pub tensor_map: Option<String>,
    /// Coordinates of the box origin (1 for bulk copies).
    pub rank: usize,
    /// Bytes one copy writes into a slot.
    pub bytes: i64,
    /// Copies of this box per stage: several when a stage holds boxes side by side (a K tile
    /// wider than one swizzle span), each its own copy at the next box's place in the slot.
    pub boxes: i64,
    /// Multicast to this many CTAs of the cluster: each CTA copies its slice (`bytes`) into
    /// the slot of every CTA, so a slot receives `bytes` from each of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multicast: Option<i64>,
    /// Bytes announced by the `mbarrier.arrive.expect_tx` before the copy.
    pub expect_tx: Option<i64>,
    /// Which arrival announces it, numbered within the pipeline: loads with the same number
    /// share one `expect_tx` (it counts once: one arrival for both operands of a matmul stage).
    pub arrival: Option<usize>,
    /// Index into [`PipelineView::roles`]: who issues it.
    pub role: usize,
    /// The slot it fills (in the main loop when there is one), e.g. `(n_o + 3) % 4`.
    pub slot: String,
    /// Conditions besides the role's (bounds), as text.
    pub guard: Option<String>,
    /// When it is issued, in order.
    pub phases: Vec<PhaseKind>,
}

/// A wait for a slot to be full.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Wait {
    /// Index into [`PipelineView::roles`]: who waits.
    pub role: usize,
    pub barrier: String,
    pub slot: String,
    pub parity: String,
    pub phases: Vec<PhaseKind>,
}

/// How the consumers give a slot back before the producer refills it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Release {
    /// `__syncthreads()` after the reads of each main-loop iteration: the producer refills a
    /// slot only after every thread has passed it.
    SyncThreads,
    /// The producer waits on [`Pipeline::empty_barrier`] before it refills a slot.
    EmptyBarrier,
    /// No slot is refilled (no main loop).
    NotReused,
    /// Slots are refilled, but neither a block barrier after the reads nor an empty barrier was
    /// found.
    NotFound,
}

/// One circular buffer: the loads completing on one mbarrier array.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Pipeline {
    pub buffers: Vec<String>,
    pub tensors: Vec<String>,
    /// Slots (the mbarrier array's size).
    pub stages: i64,
    /// Iterations loaded ahead (the prologue's extent); None when it is not a constant, or when
    /// the producer has a loop of its own.
    pub prefetch: Option<i64>,
    /// The pipelined loop's variable (its main loop's, else the producer's).
    pub loop_var: Option<String>,
    pub phases: Vec<Phase>,
    pub loads: Vec<Load>,
    /// Bytes of all loads of one stage.
    pub stage_bytes: i64,
    /// The mbarrier array a slot's loads complete on (`x_s_bars`).
    pub full_barrier: String,
    /// The mbarrier array the producer waits on before refilling a slot, when there is one.
    pub empty_barrier: Option<String>,
    pub waits: Vec<Wait>,
    pub release: Release,
}

/// A condition on the path to a statement, shared by the events under it. Its text is made
/// when first asked for: most guards are bounds around computes that no pipeline reads, and a
/// large kernel has thousands of them.
#[derive(Debug)]
struct Guard<'k> {
    cond: &'k Val,
    /// An `else` branch: the condition is negated.
    negated: bool,
    /// Depends on the thread index (it selects a role).
    on_thread: bool,
    text: std::cell::OnceCell<String>,
}

impl Guard<'_> {
    fn text(&self) -> &str {
        self.text.get_or_init(|| {
            let plain = self.cond.text();
            if self.negated {
                format!("!({plain})")
            } else {
                plain
            }
        })
    }

    /// The condition and whether it is negated, when it selects a role.
    fn thread(&self) -> Option<(Val, bool)> {
        self.on_thread.then(|| (self.cond.clone(), self.negated))
    }
}

/// Guards are equal when their texts are, and so are their role conditions.
impl PartialEq for Guard<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.text() == other.text()
            && self.on_thread == other.on_thread
            && (!self.on_thread || (self.cond == other.cond && self.negated == other.negated))
    }
}

type Guards<'k> = Vec<std::rc::Rc<Guard<'k>>>;

enum What<'k> {
    Arrive {
        bars: MbarId,
        bytes: i64,
    },
    Load(&'k TmaLoad),
    Wait {
        bars: MbarId,
        slot: &'k Val,
        parity: &'k Val,
    },
    Sync,
    Fence,
    /// A wgmma with the thread-bound loops around it (a TIDy axis: one tile per warp group).
    Mma {
        w: &'k Wgmma,
        threads: Vec<ThreadLoop<'k>>,
    },
    Commit,
    MmaWait(u32),
    /// Ping-pong groups wait for their turn or pass it (`Stmt::Turn`).
    Turn(crate::kir::TurnStep),
    /// An arrival that gives a slot back (`mbarrier.arrive` on an empty barrier).
    Release {
        bars: MbarId,
        slot: &'k Val,
        per_warp: bool,
    },
    Compute(&'k Compute),
    /// A `stmatrix` into a shared-memory cache from a register array (their buffers).
    Staged {
        cache: BufferId,
        from: BufferId,
    },
    Store(&'k TmaStore),
    BulkCommit,
    BulkWait(u32),
    ProxyFence,
}

/// A loop bound to a thread index (a binding in the CUDA, not a loop).
#[derive(Clone, Copy)]
struct ThreadLoop<'k> {
    var: &'k str,
    parallel: ParallelType,
    extent: &'k Val,
}

/// A serial (or unrolled) loop of the walk.
struct LoopInfo<'k> {
    var: &'k str,
    extent: &'k Val,
    /// The loop around it (index into `Walk::loops`).
    parent: Option<usize>,
}

struct Event<'k> {
    what: What<'k>,
    guards: Guards<'k>,
    /// The innermost serial loop around it (index into `Walk::loops`).
    lp: Option<usize>,
}

struct Walk<'k> {
    /// Loop variables bound to thread indices.
    thread_vars: Vec<(&'k str, ParallelType)>,
    loops: Vec<LoopInfo<'k>>,
    /// The thread-bound loops around the statement being walked.
    threads: Vec<ThreadLoop<'k>>,
    events: Vec<Event<'k>>,
    /// The guards around the statement being walked.
    guards: Guards<'k>,
    /// The (non-hardware) loop around it: its place in `loops`.
    lp: Option<usize>,
    /// What entering each body around it changed, innermost last.
    scopes: Vec<Scope>,
    /// Whether computes are events: only the epilogues of wgmma products read them, and a
    /// large kernel without any has thousands.
    computes: bool,
}

/// What entering a body changed in the [`Walk`]: the guards before it, the loop around it, and
/// whether it is a thread-bound loop's (a binding pushed on `threads`).
struct Scope {
    guards: usize,
    lp: Option<usize>,
    thread: bool,
}

/// The role part (thread conditions) of a guard list: None for every thread.
fn role_key(guards: &Guards) -> Option<String> {
    let parts: Vec<&str> = guards
        .iter()
        .filter(|g| g.on_thread)
        .map(|g| g.text())
        .collect();
    (!parts.is_empty()).then(|| parts.join(" && "))
}

/// The other conditions (bounds), as one text.
fn other_guards(guards: &Guards) -> Option<String> {
    let parts: Vec<&str> = guards
        .iter()
        .filter(|g| !g.on_thread)
        .map(|g| g.text())
        .collect();
    (!parts.is_empty()).then(|| parts.join(" && "))
}

struct RoleAcc {
    key: Option<String>,
    conds: Vec<(Val, bool)>,
    issues: bool,
    waits: bool,
    mma: bool,
}

/// Threads of a block that satisfy `conds`, when countable: conjunctions of `thread index ==
/// constant`, or the negation of one such conjunction.
fn count_threads(walk: &Walk, k: &Kernel, conds: &[(Val, bool)]) -> Option<i64> {
    match conds {
        [(c, true)] => {
            let mut parts = Vec::new();
            conjuncts(c, &mut parts);
            Some(count_pinned(walk, k, &[])? - count_pinned(walk, k, &parts)?)
        }
        _ if conds.iter().any(|(_, negated)| *negated) => None,
        _ => {
            let parts: Vec<&Val> = conds.iter().map(|(c, _)| c).collect();
            count_pinned(walk, k, &parts)
        }
    }
}

/// Threads of a block with every condition of `eqs` (each `thread index == constant`).
fn count_pinned(walk: &Walk, k: &Kernel, eqs: &[&Val]) -> Option<i64> {
    let mut pinned = [false; 3];
    for c in eqs {
        let Val::Eq(a, b) = c else { return None };
        let p = match (walk.thread_of(a), walk.thread_of(b), &**a, &**b) {
            (Some(p), None, _, Val::Int(_)) | (None, Some(p), Val::Int(_), _) => p,
            _ => return None,
        };
        pinned[p.dim()?] = true;
    }
    (0..3)
        .filter(|&d| !pinned[d])
        .map(|d| k.block[d].as_const())
        .product()
}

fn role_of(roles: &[RoleAcc], guards: &Guards) -> usize {
    let key = role_key(guards);
    roles
        .iter()
        .position(|r| r.key == key)
        .expect("every role was collected")
}

/// The pipelines of `k` (the kernel after the last pass), which `plan` planned.
pub fn extract(k: &Kernel, plan: &PipelinePlan) -> PipelineView {
    let mut walk = Walk {
        thread_vars: k
            .hw_vars
            .iter()
            .filter(|(_, p)| p.is_thread())
            .map(|(v, p)| (v.as_str(), *p))
            .collect(),
        loops: Vec::new(),
        threads: Vec::new(),
        events: Vec::new(),
        guards: Vec::new(),
        lp: None,
        scopes: Vec::new(),
        computes: has_wgmma(&k.body),
    };
    crate::kir::visit(&k.body, &mut walk);
    let events = &walk.events;

    // The pipelines: the plan's streams of copies (each completes on one full barrier), in the
    // order the kernel first issues them.
    let first_load = |bars: MbarId| {
        events
            .iter()
            .position(|e| matches!(e.what, What::Load(t) if t.bars == bars))
    };
    let mut streams: Vec<Stream> = plan
        .streams()
        .into_iter()
        .filter(|s| first_load(s.full).is_some())
        .collect();
    // (Every stream kept has a first load.)
    crate::id::sort_by_position(&mut streams, |s| first_load(s.full).unwrap_or(usize::MAX));
    let full: Vec<MbarId> = streams.iter().map(|s| s.full).collect();
    // Roles: those that issue loads first, then those that wait on a full barrier, then those
    // that issue wgmma (they usually wait too, and are then that role).
    #[derive(Clone, Copy, PartialEq)]
    enum Job {
        Issue,
        Wait,
        Mma,
    }
    let mut roles: Vec<RoleAcc> = Vec::new();
    for job in [Job::Issue, Job::Wait, Job::Mma] {
        for e in events {
            let counts = match e.what {
                What::Load(_) => job == Job::Issue,
                What::Wait { bars, .. } => job == Job::Wait && full.contains(&bars),
                What::Mma { .. } => job == Job::Mma,
                _ => false,
            };
            if !counts {
                continue;
            }
            let key = role_key(&e.guards);
            let i = match roles.iter().position(|r| r.key == key) {
                Some(i) => i,
                None => {
                    roles.push(RoleAcc {
                        key,
                        conds: e.guards.iter().filter_map(|g| g.thread()).collect(),
                        issues: false,
                        waits: false,
                        mma: false,
                    });
                    roles.len() - 1
                }
            };
            match job {
                Job::Issue => roles[i].issues = true,
                Job::Wait => roles[i].waits = true,
                Job::Mma => roles[i].mma = true,
            }
        }
    }

    let (pipelines, places): (Vec<Pipeline>, Vec<Vec<Place>>) = streams
        .iter()
        .map(|stream| pipeline(k, plan, &walk, &roles, stream))
        .unzip();
    let roles = name_roles(k, plan, &walk, &roles);
    let mmas = mma::extract(k, plan, &walk, &roles, &full, &places);
    PipelineView {
        roles,
        pipelines,
        mmas,
        nests: epilogue::nests(&walk, &places),
        staged: epilogue::staged(k, plan, &walk),
        cluster: k.cluster,
        tiles: k.persistent.as_ref().map(|p| TileOrder {
            var: p.var.clone(),
            tiles: p.tiles.to_string(),
            along: p.along.to_string(),
            group: p.group,
            indices: p
                .bindings
                .iter()
                .map(|(v, axis, value)| (v.clone(), axis.to_string(), value.text()))
                .collect(),
            stream_k: p.stream_k.is_some(),
        }),
    }
}

/// A loop of a pipeline (None: straight-line code) and its phase.
type Place = (Option<usize>, PhaseKind);

fn name_roles(k: &Kernel, plan: &PipelinePlan, walk: &Walk, roles: &[RoleAcc]) -> Vec<Role> {
    let counts: Vec<Option<i64>> = roles
        .iter()
        .map(|r| count_threads(walk, k, &r.conds).or_else(|| warp_role_count(plan, r)))
        .collect();
    // A role that runs wgmma is whole warp groups.
    let warp_groups: Vec<Option<i64>> = roles
        .iter()
        .zip(&counts)
        .map(|(r, n)| {
            n.filter(|n| r.mma && n % target::WARPGROUP_THREADS == 0)
                .map(|n| n / target::WARPGROUP_THREADS)
        })
        .collect();
    let bases: Vec<&str> = roles
        .iter()
        .zip(&warp_groups)
        .map(|(r, wg)| match (r.issues, r.waits, r.mma) {
            (true, true, _) => "producer + consumer",
            (true, false, _) => "producer",
            (false, _, true) if *wg == Some(1) => "consumer warp group",
            (false, _, true) => "consumer warp groups",
            _ => "consumers",
        })
        .collect();
    roles
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let (count, base) = (counts[i], bases[i]);
            let same = bases.iter().filter(|&&b| b == base).count();
            let nth = bases[..i].iter().filter(|&&b| b == base).count() + 1;
            let name = if same > 1 {
                format!("{base} {nth}")
            } else {
                base.to_string()
            };
            let threads = match (&r.key, count) {
                (None, Some(n)) => {
                    let dims: Vec<String> = k
                        .block
                        .iter()
                        .filter(|d| d.as_const() != Some(1))
                        .map(|d| d.to_string())
                        .collect();
                    if dims.len() > 1 {
                        format!("all {n} threads of the block ({})", dims.join(" × "))
                    } else {
                        format!("all {n} threads of the block")
                    }
                }
                (None, None) => "every thread of the block".to_string(),
                (Some(c), Some(1)) => format!("1 thread: {c}"),
                (Some(c), Some(n)) => format!("{n} threads: {c}"),
                (Some(c), None) => format!("the threads where {c}"),
            };
            Role {
                name,
                condition: r.key.clone(),
                thread_count: count,
                threads,
                registers: warp_role_registers(plan, r),
                issues: r.issues,
                waits: r.waits,
                mma: r.mma,
                warp_groups: warp_groups[i],
            }
        })
        .collect()
}

/// Threads of a role selected by an election (one thread) or, in a warp-specialized kernel,
/// by the warp condition (the consumers when negated, else the producer warp group).
fn warp_role_count(plan: &PipelinePlan, r: &RoleAcc) -> Option<i64> {
    if r.conds.iter().any(|(c, n)| *c == Val::Elect && !n) {
        return Some(1);
    }
    let ws = plan.warp_specialized()?;
    match r.conds.as_slice() {
        [(c, true)] if c.mentions_warp() => Some(ws.consumer_threads),
        [(c, false)] if c.mentions_warp() => Some(target::WARPGROUP_THREADS),
        _ => None,
    }
}

/// The registers (`setmaxnreg`) a role of a warp-specialized kernel asks for.
fn warp_role_registers(plan: &PipelinePlan, r: &RoleAcc) -> Option<u32> {
    let (producer, consumer) = plan.warp_specialized()?.spec.registers?;
    let negated = r
        .conds
        .first()
        .is_some_and(|(c, n)| *n && c.mentions_warp());
    Some(if negated { consumer } else { producer })
}

/// What a copy reads: its kind, the tensor and the tensor map (tile copies).
fn load_source(
    k: &Kernel,
    t: &TmaLoad,
    map: Option<&crate::plan::TensorMapSpec>,
) -> (LoadKind, String, Option<String>) {
    match (t.kind, map) {
        (CopyKind::Tile { .. }, Some(map)) => {
            (LoadKind::Tile, map.tensor.clone(), Some(map.param.clone()))
        }
        (CopyKind::Tile { map }, None) => (
            LoadKind::Tile,
            k.tensor_maps[map].tensor.clone(),
            Some(k.tensor_maps[map].param.clone()),
        ),
        (CopyKind::Bulk, _) => (LoadKind::Bulk, k.buffers[t.src.buffer].name.clone(), None),
    }
}

/// The arrival that announces copy `events[i]` on `bars` (its event and bytes): the last one
/// before it on the same barrier, under the same guards, in the same loop.
fn arrival_before(events: &[Event], i: usize, bars: MbarId) -> Option<(usize, i64)> {
    events[..i]
        .iter()
        .enumerate()
        .rev()
        .find_map(|(j, a)| match a.what {
            What::Arrive { bars: b, bytes }
                if b == bars && a.lp == events[i].lp && a.guards == events[i].guards =>
            {
                Some((j, bytes))
            }
            _ => None,
        })
}

/// Adds `load` to the loads shown, or its phase to the one it repeats (which it replaces when it
/// is the steady-state instance, `steady`, and none was shown yet: `shown`).
fn merge_load(loads: &mut Vec<Load>, shown: &mut Vec<bool>, load: Load, steady: bool) {
    let same = loads.iter().position(|o| {
        (o.kind, &o.buffer, &o.tensor, o.bytes, o.role)
            == (load.kind, &load.buffer, &load.tensor, load.bytes, load.role)
    });
    match same {
        Some(j) => {
            let phase = load.phases[0];
            if !shown[j] && steady {
                let phases = std::mem::take(&mut loads[j].phases);
                loads[j] = load;
                loads[j].phases = phases;
                shown[j] = true;
            }
            if !loads[j].phases.contains(&phase) {
                loads[j].phases.push(phase);
            }
        }
        None => {
            shown.push(steady);
            loads.push(load);
        }
    }
}

/// Adds `wait` to the waits shown (one per role), or its phase to its role's (whose slot and
/// parity it gives when it is the steady-state instance, `steady`).
fn merge_wait(waits: &mut Vec<Wait>, wait: Wait, steady: bool) {
    match waits.iter_mut().find(|w| w.role == wait.role) {
        Some(w) => {
            if steady {
                w.slot = wait.slot;
                w.parity = wait.parity;
            }
            let phase = wait.phases[0];
            if !w.phases.contains(&phase) {
                w.phases.push(phase);
            }
        }
        None => waits.push(wait),
    }
}

/// Arrivals (event indices until now) numbered in order of the loads shown.
fn number_arrivals(loads: &mut [Load]) {
    let mut arrivals: Vec<usize> = Vec::new();
    for l in loads {
        l.arrival = l
            .arrival
            .map(|j| match arrivals.iter().position(|&a| a == j) {
                Some(n) => n,
                None => {
                    arrivals.push(j);
                    arrivals.len() - 1
                }
            });
    }
}

/// How the slots are released: the planned empty barrier where they are refilled, else a
/// block barrier after the main loop's first wait.
fn release(
    events: &[Event],
    waits: &[(usize, &Event)],
    refill: Option<usize>,
    main: Option<usize>,
    empty_barrier: bool,
) -> Release {
    match (refill, main) {
        (None, _) => Release::NotReused,
        _ if empty_barrier => Release::EmptyBarrier,
        (_, None) => Release::NotFound,
        (_, Some(m)) => {
            let first_wait = waits.iter().find(|(_, e)| e.lp == Some(m)).map(|(i, _)| *i);
            let synced = first_wait.is_some_and(|w| {
                events[w..]
                    .iter()
                    .any(|e| matches!(e.what, What::Sync) && e.lp == Some(m))
            });
            if synced {
                Release::SyncThreads
            } else {
                Release::NotFound
            }
        }
    }
}

/// The buffers and tensors of the loads, each once, in order.
fn buffers_and_tensors(loads: &[Load]) -> (Vec<String>, Vec<String>) {
    let mut buffers: Vec<String> = Vec::new();
    let mut tensors: Vec<String> = Vec::new();
    for l in loads {
        if !buffers.contains(&l.buffer) {
            buffers.push(l.buffer.clone());
        }
        if !tensors.contains(&l.tensor) {
            tensors.push(l.tensor.clone());
        }
    }
    (buffers, tensors)
}

/// The pipeline of `stream` (what the plan planned for it, and the loops its loads and waits
/// are in, with their phases).
fn pipeline(
    k: &Kernel,
    plan: &PipelinePlan,
    walk: &Walk,
    roles: &[RoleAcc],
    stream: &Stream,
) -> (Pipeline, Vec<Place>) {
    let events = &walk.events;
    let bars = stream.full;
    let pipe = &plan.pipes[stream.pipe];
    // The planned load a copy fills a slot of.
    let planned = |t: &TmaLoad| {
        stream
            .loads
            .iter()
            .map(|&m| &plan.loads[m])
            .find(|i| k.buffers[t.dst.buffer].tensor == Some(i.tensor))
    };
    let loads: Vec<(usize, &Event, &TmaLoad)> = events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e.what {
            What::Load(t) if t.bars == bars => Some((i, e, t)),
            _ => None,
        })
        .collect();
    let waits: Vec<(usize, &Event)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.what, What::Wait { bars: b, .. } if b == bars))
        .collect();

    // The loops the loads and waits are in, in order: prologue (loads), main (both), epilogue
    // (waits); without a main loop, a producer's loop and the consumers' loop; straight-line
    // code is `Once`.
    // (Events are in program order, so their loops are too.)
    let mut places: Vec<Option<usize>> = Vec::new();
    for e in events {
        let here = match e.what {
            What::Load(t) => t.bars == bars,
            What::Wait { bars: b, .. } => b == bars,
            _ => false,
        };
        if here && !places.contains(&e.lp) {
            places.push(e.lp);
        }
    }
    let issues = |lp: Option<usize>| loads.iter().any(|(_, e, _)| e.lp == lp);
    let waits_in = |lp: Option<usize>| waits.iter().any(|(_, e)| e.lp == lp);
    let has_main = places
        .iter()
        .any(|&lp| lp.is_some() && issues(lp) && waits_in(lp));
    let kind_of = |lp: Option<usize>| match (lp, issues(lp), waits_in(lp), has_main) {
        (None, ..) => PhaseKind::Once,
        (_, true, true, _) => PhaseKind::Main,
        (_, true, false, true) => PhaseKind::Prologue,
        (_, true, false, false) => PhaseKind::Produce,
        (_, false, _, true) => PhaseKind::Epilogue,
        (_, false, _, false) => PhaseKind::Consume,
    };
    let phases: Vec<Phase> = places
        .iter()
        .map(|&lp| Phase {
            kind: kind_of(lp),
            var: lp.map(|l| walk.loops[l].var.to_string()),
            extent: lp.map(|l| walk.loops[l].extent.text()),
        })
        .collect();
    let lp_of = |kind| places.iter().copied().find(|&lp| kind_of(lp) == kind);
    let main = lp_of(PhaseKind::Main).flatten();
    let prologue = lp_of(PhaseKind::Prologue).flatten();
    let produce = lp_of(PhaseKind::Produce).flatten();
    // A warp-specialized producer runs ahead as far as the empty barriers let it.
    let prefetch = pipe.ws.is_none().then_some(pipe.prefetch);
    // Where slots are refilled (loads) and waited on in the steady state.
    let refill = main.or(produce);
    let drain = main.or(lp_of(PhaseKind::Consume).flatten());
    let loop_var = refill.or(prologue).map(|l| walk.loops[l].var.to_string());
    let kind_of: &dyn Fn(Option<usize>) -> PhaseKind = &kind_of;
    let out_loads = shown_loads(k, events, bars, &loads, roles, &planned, kind_of, refill);
    let out_waits = shown_waits(k, bars, &waits, roles, kind_of, drain);

    // Release: the planned empty barrier where slots are refilled, else a block barrier after
    // the main loop's wait.
    let empty_barrier = refill
        .and(stream.empty)
        .map(|b| k.mbarriers[b].name.clone());
    let release = release(events, &waits, refill, main, empty_barrier.is_some());

    let (buffers, tensors) = buffers_and_tensors(&out_loads);
    let pipeline = Pipeline {
        buffers,
        tensors,
        stages: pipe.stages,
        prefetch,
        loop_var,
        phases,
        stage_bytes: out_loads
            .iter()
            .map(|l| l.bytes * l.boxes * l.multicast.unwrap_or(1))
            .sum(),
        loads: out_loads,
        full_barrier: k.mbarriers[bars].name.clone(),
        empty_barrier,
        waits: out_waits,
        release,
    };
    let places = places.iter().map(|&lp| (lp, kind_of(lp))).collect();
    (pipeline, places)
}

/// The instance shown for a load or a wait: the one in the steady-state loop `at`, else the first.
fn steady(lp: Option<usize>, at: Option<usize>) -> bool {
    at.is_some() && lp == at
}

/// The pipeline's loads as shown: one per buffer and phase, the steady state's instance first,
/// each with its arrival numbered.
#[allow(clippy::too_many_arguments)]
fn shown_loads<'k>(
    k: &Kernel,
    events: &[Event],
    bars: MbarId,
    loads: &[(usize, &Event, &TmaLoad)],
    roles: &[RoleAcc],
    planned: &dyn Fn(&TmaLoad) -> Option<&'k crate::passes::tma::TmaInfo>,
    kind_of: &dyn Fn(Option<usize>) -> PhaseKind,
    refill: Option<usize>,
) -> Vec<Load> {
    let mut out_loads: Vec<Load> = Vec::new();
    let mut shown: Vec<bool> = Vec::new();
    for &(i, e, t) in loads {
        let info = planned(t);
        let map = info.and_then(|i| i.map).map(|m| &k.tensor_maps[m]);
        let (kind, tensor, tensor_map) = load_source(k, t, map);
        let arrival = arrival_before(events, i, bars);
        let expect_tx = arrival.map(|(_, bytes)| bytes);
        // The arrival's event index for now; numbered below.
        let arrival = arrival.map(|(j, _)| j);
        let load = Load {
            kind,
            buffer: k.buffers[t.dst.buffer].name.clone(),
            tensor,
            tensor_map,
            rank: t.coords.len().max(1),
            bytes: t.bytes,
            // A stage of several boxes side by side has a copy per box.
            boxes: info.map_or(1, |i| i.boxes.count),
            multicast: t.multicast,
            expect_tx,
            arrival,
            role: role_of(roles, &e.guards),
            slot: t.slot.text(),
            guard: other_guards(&e.guards),
            phases: vec![kind_of(e.lp)],
        };
        merge_load(&mut out_loads, &mut shown, load, steady(e.lp, refill));
    }

    number_arrivals(&mut out_loads);
    out_loads
}

/// The pipeline's waits on its full barrier as shown, the steady state's instance first.
fn shown_waits(
    k: &Kernel,
    bars: MbarId,
    waits: &[(usize, &Event)],
    roles: &[RoleAcc],
    kind_of: &dyn Fn(Option<usize>) -> PhaseKind,
    drain: Option<usize>,
) -> Vec<Wait> {
    let mut out_waits: Vec<Wait> = Vec::new();
    for &(_, e) in waits {
        let What::Wait { slot, parity, .. } = e.what else {
            continue;
        };
        let wait = Wait {
            role: role_of(roles, &e.guards),
            barrier: k.mbarriers[bars].name.clone(),
            slot: slot.text(),
            parity: parity.text(),
            phases: vec![kind_of(e.lp)],
        };
        merge_wait(&mut out_waits, wait, steady(e.lp, drain));
    }
    out_waits
}

#[cfg(test)]
mod tests;
