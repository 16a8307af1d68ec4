//! The kernel-IR verifier: checks that a pass left the [`Kernel`] well-formed.
//!
//! Takes a kernel and the [`Stage`] of the pipeline it comes from (which guarantees the passes
//! so far have established: allocations placed, indices computed, mbarriers initialised) and
//! returns every broken invariant as a [`VerifyError`]: the [`Rule`], the statement (its
//! preorder number, the numbering of [`Kernel::print_with_lines`] and of the CUDA line map, and
//! its line in the dump) and what is wrong. It changes nothing.
//!
//! [`after_pass`] is the hook the pipeline calls after every pass: on in debug builds (so in
//! `cargo test`), off in release unless `HOPFUSE_VERIFY_IR=1` asks for it (`HOPFUSE_VERIFY_IR=0`
//! turns it off in debug builds). A kernel that fails is a compiler bug, reported as an
//! internal error naming the pass and the rule, never as a panic.
//!
//! The rules by concern: scope and structure here (ids, variables, allocation scope, indices,
//! memory spaces, warp roles), memory sizes and layout in `memory.rs`, which threads reach
//! warp- and block-collective operations and the counts of named barriers in `uniform.rs`, the
//! mbarrier life cycle in `mbarrier.rs`. One walk over the statements gathers what the last two
//! check. Cluster signalling (`Rule::Cluster`) is checked by the last two as well, and the
//! shared memory that TMA stores read (`Rule::StoreReuse`, after `sync`) in `stores.rs`.
//! `tests/tests/verify.rs` checks every example after every pass ([`verified_on_this_thread`]
//! counts the hook's runs) and plants one fault per rule in a real lowered kernel.

mod mbarrier;
mod memory;
mod stores;
mod uniform;

use crate::diag::Diagnostics;
use crate::fusion::MemoryType;
use crate::id::IdVec;
use crate::kir::{
    Access, BufferId, CopyKind, Flow, Kernel, Loop, MbarId, Stmt, TensorMapId, TmaLoad, Val,
    Visitor,
};
pub use uniform::{barrier_uses, check_barrier_uses, of_hw, BarrierUse, Uniformity};

/// One invariant of the kernel IR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// A buffer, mbarrier array or tensor map the kernel does not have.
    UnknownId,
    /// A variable that no enclosing loop, earlier `let` or thread/block binding defines, or a
    /// loop bound to a hardware index whose variable is not that index's binding.
    UnboundVariable,
    /// A register or shared buffer used outside the scope of its `alloc` (after `allocation`).
    UseBeforeAlloc,
    /// A buffer allocated again while its allocation is in scope (a redeclaration in CUDA).
    DoubleAlloc,
    /// An access without an index (after `indexing`).
    UnindexedAccess,
    /// An operand in the wrong memory space: TMA loads go global to shared, TMA stores shared
    /// to global, block reductions accumulate in registers, allocations are of register or
    /// shared buffers.
    MemorySpace,
    /// A register array without a constant size from 1 to 1024 (after `allocation`).
    RegisterArraySize,
    /// More dynamic shared memory than a Hopper block has (227 KiB).
    SharedMemoryLimit,
    /// A shared buffer, mbarrier array or the block-reduction scratch without a place, at a
    /// misaligned offset, or reaching past the kernel's dynamic shared memory.
    SharedMemoryLayout,
    /// An mbarrier used without one initialisation before it, followed by a block barrier
    /// (after `circular_buffer`).
    MbarrierInit,
    /// An mbarrier not invalidated exactly once after its last use, behind a block barrier
    /// (after `circular_buffer`).
    MbarrierInval,
    /// A warp-collective operation (`elect.sync`, the warp index's shuffle, the `__syncwarp` of
    /// a per-warp arrive, the `setmaxnreg` of warp roles) where the lanes of a warp may not all
    /// reach it, or in a block of partial warps.
    WarpCollective,
    /// A block barrier (`__syncthreads`, a named barrier, a block reduction) where not every
    /// thread taking part reaches it.
    BlockBarrier,
    /// A named barrier used with two thread counts, or a count that is not whole warps or not
    /// the number of threads that reach it.
    NamedBarrierCount,
    /// A named barrier id outside the hardware's 16.
    NamedBarrierId,
    /// Warp roles nested in warp roles, or register counts that `setmaxnreg` does not take or
    /// that differ from the kernel's.
    WarpRoles,
    /// Shared memory written while a TMA store may still read it (no wait by the issuing
    /// thread and barrier in between), or an exit with a store still reading (after `sync`).
    StoreReuse,
    /// Cluster signalling in a kernel launched without clusters (a multicast copy, an mbarrier
    /// released across the cluster), a multicast to more CTAs than the cluster has, or a cluster
    /// barrier that not every thread of the CTA reaches.
    Cluster,
}

impl Rule {
    /// Every rule (the tests plant a fault for each).
    pub const ALL: [Rule; 18] = [
        Rule::UnknownId,
        Rule::UnboundVariable,
        Rule::UseBeforeAlloc,
        Rule::DoubleAlloc,
        Rule::UnindexedAccess,
        Rule::MemorySpace,
        Rule::RegisterArraySize,
        Rule::SharedMemoryLimit,
        Rule::SharedMemoryLayout,
        Rule::MbarrierInit,
        Rule::MbarrierInval,
        Rule::WarpCollective,
        Rule::BlockBarrier,
        Rule::NamedBarrierCount,
        Rule::NamedBarrierId,
        Rule::WarpRoles,
        Rule::StoreReuse,
        Rule::Cluster,
    ];

    /// The rule's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Rule::UnknownId => "unknown-id",
            Rule::UnboundVariable => "unbound-variable",
            Rule::UseBeforeAlloc => "use-before-alloc",
            Rule::DoubleAlloc => "double-alloc",
            Rule::UnindexedAccess => "unindexed-access",
            Rule::MemorySpace => "memory-space",
            Rule::RegisterArraySize => "register-array-size",
            Rule::SharedMemoryLimit => "shared-memory-limit",
            Rule::SharedMemoryLayout => "shared-memory-layout",
            Rule::MbarrierInit => "mbarrier-init",
            Rule::MbarrierInval => "mbarrier-inval",
            Rule::WarpCollective => "warp-collective",
            Rule::BlockBarrier => "block-barrier",
            Rule::NamedBarrierCount => "named-barrier-count",
            Rule::NamedBarrierId => "named-barrier-id",
            Rule::WarpRoles => "warp-roles",
            Rule::StoreReuse => "store-reuse",
            Rule::Cluster => "cluster",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A broken invariant: the rule, where, and what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rule `{rule}` at {}: {detail}", match stmt { Some(n) => format!("statement {n} `{text}`"), None => "the kernel's declarations".to_string() })]
pub struct VerifyError {
    pub rule: Rule,
    /// Preorder number of the statement (`None`: the kernel's buffers, mbarriers and sizes).
    pub stmt: Option<usize>,
    /// The statement's line in the dump (empty for the kernel).
    pub text: String,
    pub detail: String,
}

/// What the passes run so far guarantee, so what may be checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stage {
    /// `allocation` ran: every register and shared buffer is allocated, sized and placed.
    pub allocated: bool,
    /// `indexing` ran: every access has an index.
    pub indexed: bool,
    /// `circular_buffer` ran: mbarriers are initialised at entry and invalidated at exit.
    pub barriers_placed: bool,
    /// `sync` ran: block barriers order shared memory, and the issuing thread waits for its
    /// TMA stores before their buffers are written again.
    pub synchronised: bool,
}

/// The pass after which each [`Stage`] fact holds (a unit test checks they are in the pipeline).
const ALLOCATION_PASS: &str = "allocation";
const INDEXING_PASS: &str = "indexing";
const BARRIER_PASS: &str = "circular_buffer";
const SYNC_PASS: &str = "sync";

impl Stage {
    /// After the whole pipeline.
    pub const LOWERED: Stage = Stage {
        allocated: true,
        indexed: true,
        barriers_placed: true,
        synchronised: true,
    };

    /// After pass `pass` of [`crate::passes::PIPELINE`] (and the passes before it). A name not
    /// in the pipeline gets every fact (the strictest check).
    pub fn after(pass: &str) -> Stage {
        let position = |name: &str| crate::passes::PIPELINE.iter().position(|p| p.name == name);
        let reached = |anchor: &str| match (position(pass), position(anchor)) {
            (Some(at), Some(needed)) => at >= needed,
            _ => true,
        };
        Stage {
            allocated: reached(ALLOCATION_PASS),
            indexed: reached(INDEXING_PASS),
            barriers_placed: reached(BARRIER_PASS),
            synchronised: reached(SYNC_PASS),
        }
    }
}

/// Whether [`after_pass`] verifies: in debug builds unless `HOPFUSE_VERIFY_IR=0`, in release
/// builds when `HOPFUSE_VERIFY_IR` is set to anything else; never for wasm32.
pub fn enabled() -> bool {
    // Never in the playground's wasm (no environment, and the verifier's code would count
    // against the page's download budget).
    if cfg!(target_arch = "wasm32") {
        return false;
    }
    match std::env::var("HOPFUSE_VERIFY_IR") {
        Ok(v) => !matches!(v.as_str(), "0" | "false" | "off" | ""),
        Err(_) => cfg!(debug_assertions),
    }
}

thread_local! {
    static VERIFIED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many kernels [`after_pass`] has verified on this thread (so a test can tell that the
/// pipeline verified after each of its passes).
pub fn verified_on_this_thread() -> usize {
    VERIFIED.with(|n| n.get())
}

/// The pipeline's hook: verifies the kernel left by pass `pass` when [`enabled`]; a broken
/// invariant becomes an internal error naming the pass, the rule and the statement.
pub fn after_pass(pass: &str, k: &Kernel) -> Result<(), Diagnostics> {
    if !enabled() {
        return Ok(());
    }
    VERIFIED.with(|n| n.set(n.get() + 1));
    verify(k, Stage::after(pass)).map_err(|errors| {
        let more = match errors.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        Diagnostics::from(crate::diag::Diagnostic::new(
            format!(
                "internal error: the kernel IR after pass `{pass}` breaks {}{more}",
                errors[0]
            ),
            None,
        ))
    })
}

/// Every broken invariant of `k` at `stage`: those of the walk in statement order, then those
/// of named barriers, mbarriers and memory.
pub fn verify(k: &Kernel, stage: Stage) -> Result<(), Vec<VerifyError>> {
    let mut w = Walk::new(k, stage);
    w.kernel_body(&k.body);
    let Walk {
        mut errors,
        events,
        barriers,
        first_alloc,
        ..
    } = w;
    errors.extend(uniform::check_barrier_uses(&barriers));
    if stage.barriers_placed {
        mbarrier::check(k, &events, &mut errors);
    }
    if stage.synchronised {
        stores::check(k, &mut errors);
    }
    if stage.allocated {
        memory::check(k, &first_alloc, &mut errors);
    }
    // A statement that repeats a fault (a variable read twice) reports it once.
    errors.dedup();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Which threads a block barrier reaches, from where it stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Group {
    /// Every thread of the block (`__syncthreads`).
    Block,
    /// The producer warps of warp roles: no barrier of theirs.
    Producers,
    /// The consumer warps: their barriers are named ones over this many threads.
    Consumers(i64),
}

/// What a statement does to an mbarrier array, or that it is a block barrier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EventKind {
    Init(MbarId),
    Inval(MbarId),
    Use(MbarId),
    Barrier,
    /// Every thread of every CTA of the cluster meets (a block barrier too).
    ClusterBarrier,
}

/// An [`EventKind`] at a statement (events are in preorder).
#[derive(Clone, Copy, Debug)]
struct Event<'k> {
    kind: EventKind,
    stmt: usize,
    st: &'k Stmt,
    /// The preorder number of the statement whose body holds it (None: the kernel's body).
    parent: Option<usize>,
}

/// An error at statement `stmt` (preorder number) `st`.
fn error_at(k: &Kernel, rule: Rule, at: Option<(usize, &Stmt)>, detail: String) -> VerifyError {
    VerifyError {
        rule,
        stmt: at.map(|(n, _)| n),
        text: at.map(|(_, st)| head(k, st)).unwrap_or_default(),
        detail,
    }
}

/// A statement's dump line ([`Kernel::stmt_head`]), or its debug form when it names ids the
/// kernel does not have.
fn head(k: &Kernel, st: &Stmt) -> String {
    if ids_valid(k, st) {
        k.stmt_head(st)
    } else {
        format!("{st:?}").chars().take(120).collect()
    }
}

/// The state of one walk over the statements.
struct Walk<'k> {
    k: &'k Kernel,
    stage: Stage,
    errors: Vec<VerifyError>,
    /// The statement being checked and its preorder number.
    current: Option<(usize, &'k Stmt)>,
    next: usize,
    /// Variables in scope (innermost last) and how uniform their values are.
    vars: Vec<(String, Uniformity)>,
    /// Allocations in scope (innermost last), and how many of them each buffer has.
    allocs: Vec<BufferId>,
    in_scope: IdVec<BufferId, u32>,
    group: Group,
    events: Vec<Event<'k>>,
    barriers: Vec<BarrierUse>,
    /// The first `alloc` of each buffer (sizes and places are reported there).
    first_alloc: IdVec<BufferId, Option<(usize, &'k Stmt)>>,
    /// Per statement around the one walked, how uniformly the threads reach its bodies, the
    /// barrier group outside it, and its preorder number; the first entry is the kernel's.
    scopes: Vec<(Uniformity, Group, Option<usize>)>,
    /// Per body entered, the variables and allocations in scope before it.
    blocks: Vec<(usize, usize)>,
}

/// The walk's scopes: a statement's bodies are reached as uniformly as its check says
/// ([`Walk::check`]), in the barrier group its warp role gives, each body a block of its own;
/// a loop's variable and digits leave scope after it.
impl<'k> Visitor<'k> for Walk<'k> {
    fn stmt(&mut self, st: &'k Stmt, _at: usize) -> Flow {
        let me = self.next;
        self.next += 1;
        self.current = Some((me, st));
        let (ctx, _, _) = *self.scopes.last().expect("the kernel's scope");
        let body_ctx = self.check(me, st, ctx);
        self.scopes.push((body_ctx, self.group, Some(me)));
        Flow::Descend
    }

    fn enter(&mut self, st: &'k Stmt, body: usize) -> Flow {
        if let Stmt::WarpRoles(w) = st {
            self.group = match body {
                0 => Group::Producers,
                _ => Group::Consumers(w.consumer_threads),
            };
        }
        self.open_block();
        Flow::Descend
    }

    fn leave(&mut self, _st: &'k Stmt, _body: usize) {
        self.close_block();
    }

    fn after(&mut self, st: &'k Stmt, _at: usize) {
        let (_, outer, _) = self.scopes.pop().expect("pushed by `stmt`");
        self.group = outer;
        if let Stmt::Loop(l) = st {
            // The loop's variable and digits leave scope.
            for _ in 0..=l.digits.len() {
                self.vars.pop();
            }
        }
    }
}

impl<'k> Walk<'k> {
    fn new(k: &'k Kernel, stage: Stage) -> Walk<'k> {
        let mut vars: Vec<_> = k
            .hw_vars
            .iter()
            .map(|(v, p)| (v.clone(), uniform::of_hw(k, *p)))
            .collect();
        if k.cluster.is_some() {
            // Read once at entry, the same for every thread of the CTA.
            vars.push((crate::kir::CTA_RANK.to_string(), Uniformity::Block));
        }
        if let Some(v) = &k.visited {
            // Computed at entry by the whole CTA (`kir::VisitedTiles`).
            vars.push((crate::kir::VISITED_COUNT.to_string(), Uniformity::Block));
            if let crate::kir::TileTest::Bounds { .. } = v.test {
                vars.push((crate::kir::VISITED_KEPT.to_string(), Uniformity::Block));
            }
        }
        Walk {
            k,
            stage,
            errors: Vec::new(),
            current: None,
            next: 0,
            vars,
            allocs: Vec::new(),
            in_scope: vec![0; k.buffers.len()].into(),
            group: Group::Block,
            events: Vec::new(),
            barriers: Vec::new(),
            first_alloc: vec![None; k.buffers.len()].into(),
            scopes: vec![(Uniformity::Block, Group::Block, None)],
            blocks: Vec::new(),
        }
    }

    /// Records a broken rule at the current statement.
    fn error(&mut self, rule: Rule, detail: String) {
        self.errors
            .push(error_at(self.k, rule, self.current, detail));
    }

    fn event(&mut self, kind: EventKind) {
        if let Some((stmt, st)) = self.current {
            let parent = self.scopes.last().and_then(|s| s.2);
            self.events.push(Event {
                kind,
                stmt,
                st,
                parent,
            });
        }
    }

    /// Walks the kernel's body (its `let`s and `alloc`s are in scope until its end, as a
    /// body's are until the end of the body).
    fn kernel_body(&mut self, body: &'k [Stmt]) {
        self.open_block();
        crate::kir::visit(body, self);
        self.close_block();
    }

    fn open_block(&mut self) {
        self.blocks.push((self.vars.len(), self.allocs.len()));
    }

    fn close_block(&mut self) {
        let (vars, allocs) = self.blocks.pop().expect("a block opened");
        self.vars.truncate(vars);
        for b in self.allocs.drain(allocs..) {
            self.in_scope[b] -= 1;
        }
    }
    /// The checks of one statement, not of its bodies; returns how uniformly the threads
    /// reach its bodies.
    fn check(&mut self, me: usize, st: &'k Stmt, ctx: Uniformity) -> Uniformity {
        match st {
            Stmt::Loop(l) => return self.enter_loop(l, ctx),
            Stmt::If { cond, .. } => return ctx.min(self.value(cond, ctx)),
            Stmt::Alloc(b) => self.alloc(me, st, *b),
            Stmt::Compute(c) => self.compute(c, ctx),
            Stmt::BlockReduce { acc, .. } => self.block_reduce(acc, ctx),
            Stmt::BlockWelford {
                mean, m2, count, ..
            } => {
                for a in [mean, m2, count] {
                    self.access(a, ctx);
                    self.memory_is(
                        a.buffer,
                        MemoryType::Local,
                        "a statistic of a block Welford reduction",
                    );
                }
                self.block_barrier(ctx, "a block Welford reduction");
            }
            Stmt::GridReduce(g) => {
                self.access(&g.acc, ctx);
                self.block_barrier(ctx, "a grid reduction");
                // The flag is the same in every thread of a block.
                self.vars.push((g.last.clone(), Uniformity::Block));
            }
            Stmt::QuadReduce { acc, .. } => {
                self.access(acc, ctx);
                self.memory_is(
                    acc.buffer,
                    MemoryType::Local,
                    "the value of a quad reduction",
                );
                // Shuffles of the full warp: no lane may skip them.
                self.warp_collective(ctx, "a quad reduction (warp shuffles)");
            }
            Stmt::Sync => self.block_barrier(ctx, "a block barrier"),
            Stmt::GroupSync { dims, threads } => self.group_barrier(ctx, dims, *threads),
            Stmt::Turn {
                on,
                groups,
                threads,
                ..
            } => self.turn_barrier(ctx, *on, *groups, *threads),
            Stmt::ClusterSync => self.cluster_barrier(ctx),
            Stmt::Let {
                var,
                value,
                broadcast,
            } => self.let_stmt(var, value, *broadcast, ctx),
            Stmt::MbarInit { bars } => {
                if self.mbarrier_known(*bars) {
                    self.event(EventKind::Init(*bars));
                }
            }
            Stmt::MbarInval { bars } => {
                if self.mbarrier_known(*bars) {
                    self.event(EventKind::Inval(*bars));
                }
            }
            Stmt::MbarArriveExpectTx { bars, slot, .. } | Stmt::MbarExpectTx { bars, slot, .. } => {
                self.value(slot, ctx);
                self.mbarrier_use(*bars);
            }
            Stmt::MbarWait { bars, slot, parity } => {
                self.value(slot, ctx);
                self.value(parity, ctx);
                self.mbarrier_use(*bars);
            }
            Stmt::MbarArrive {
                bars,
                slot,
                per_warp,
            } => {
                self.value(slot, ctx);
                self.mbarrier_use(*bars);
                if *per_warp {
                    self.warp_collective(ctx, "a per-warp arrive (`__syncwarp`, then lane 0)");
                }
            }
            Stmt::TmaLoad(t) => self.tma_load(t, ctx),
            Stmt::TmaStore(t) => self.tma_store(t, ctx),
            Stmt::BulkCommit | Stmt::BulkWaitRead(_) | Stmt::FenceProxyAsync => {}
            Stmt::StreamKFixup { acc } => {
                if crate::kir::stream_k(self.k).is_none() {
                    self.error(
                        Rule::UnknownId,
                        "a stream-K fixup in a kernel without a stream-K split".into(),
                    );
                }
                if let Some(b) = acc {
                    self.memory_is(*b, MemoryType::Local, "a stream-K accumulator");
                }
            }
            Stmt::Wgmma(w) => self.wgmma(w, ctx),
            Stmt::WgmmaFence | Stmt::WgmmaCommit | Stmt::WgmmaWait(_) => {
                self.warp_collective(ctx, "a wgmma fence, commit or wait (warp-group collective)");
            }
            Stmt::StMatrix { dst, src } => self.stmatrix(dst, src, ctx),
            Stmt::WarpRoles(w) => {
                self.warp_roles(ctx, &w.is_producer, w.registers, w.consumer_threads)
            }
        }
        ctx
    }

    /// A compute's accesses (a vector compute's lanes are its own variable).
    fn compute(&mut self, c: &'k crate::kir::Compute, ctx: Uniformity) {
        // The lanes of a vector compute are its own variable.
        if let Some((lane, _)) = &c.vector {
            self.vars.push((lane.clone(), Uniformity::Block));
        }
        self.access(&c.out, ctx);
        c.value.for_each_read(&mut |a| self.access(a, ctx));
        if c.vector.is_some() {
            self.vars.pop();
        }
    }

    /// A block reduction: its accumulator in registers, reached by every thread of the block.
    fn block_reduce(&mut self, acc: &'k crate::kir::Access, ctx: Uniformity) {
        self.access(acc, ctx);
        if self.buffer_known(acc.buffer) && self.k.buffers[acc.buffer].memory != MemoryType::Local {
            self.error(
                Rule::MemorySpace,
                format!(
                    "the accumulator `{}` of a block reduction is not a register buffer",
                    self.k.buffers[acc.buffer].name
                ),
            );
        }
        self.block_barrier(ctx, "a block reduction");
    }

    /// A TMA store: from shared memory, through a tensor map of as many coordinates.
    fn tma_store(&mut self, t: &'k crate::kir::TmaStore, ctx: Uniformity) {
        self.access(&t.src, ctx);
        self.memory_is(
            t.src.buffer,
            MemoryType::Shared,
            "the source of a TMA store",
        );
        for c in &t.coords {
            self.value(c, ctx);
        }
        self.tensor_map(t.map, t.coords.len());
    }

    /// A wgmma: its accumulator in registers, its operands in shared memory or registers,
    /// issued by the whole warp group.
    fn wgmma(&mut self, w: &'k crate::kir::Wgmma, ctx: Uniformity) {
        self.access(&w.acc, ctx);
        self.memory_is(
            w.acc.buffer,
            MemoryType::Local,
            "the accumulator of a wgmma",
        );
        for o in [&w.a, &w.b] {
            self.access(&o.tile, ctx);
            if o.registers {
                self.memory_is(o.tile.buffer, MemoryType::Local, "a wgmma register operand");
            } else {
                self.memory_is(o.tile.buffer, MemoryType::Shared, "a wgmma operand");
            }
        }
        if let Some(flag) = &w.accumulate {
            self.access(flag, ctx);
        }
        // The warp group issues it together (`.sync.aligned`): no lane may skip it.
        self.warp_collective(ctx, "a wgmma (all 128 threads of the warp group)");
    }

    /// A stmatrix: registers to shared memory, by the whole warp.
    fn stmatrix(
        &mut self,
        dst: &'k crate::kir::Access,
        src: &'k crate::kir::Access,
        ctx: Uniformity,
    ) {
        self.access(dst, ctx);
        self.access(src, ctx);
        self.memory_is(
            dst.buffer,
            MemoryType::Shared,
            "the destination of a stmatrix",
        );
        self.memory_is(src.buffer, MemoryType::Local, "the registers of a stmatrix");
        // The warp stores together (`.sync.aligned`): no lane may skip it.
        self.warp_collective(ctx, "a stmatrix (warp-collective)");
    }

    /// A loop's extent and variables (in scope until the caller pops them); returns how
    /// uniformly the threads reach its body.
    fn enter_loop(&mut self, l: &'k Loop, ctx: Uniformity) -> Uniformity {
        let extent = self.value(&l.extent, ctx);
        let (var, body_ctx) = if l.parallel.is_hw() {
            // A binding: every thread runs the body once, with its own index.
            // A persistent kernel binds its grid loops to its tile raster.
            let persistent = self.k.persistent.iter().flat_map(|p| &p.bindings);
            let bound = self
                .k
                .hw_vars
                .iter()
                .map(|(v, p)| (v, p))
                .chain(persistent.map(|(v, p, _)| (v, p)))
                .any(|(v, p)| *v == l.var && *p == l.parallel);
            if !bound {
                self.error(
                    Rule::UnboundVariable,
                    format!(
                        "the loop over `{}` is bound to {} but the kernel binds no `{} = {}`",
                        l.var,
                        l.parallel,
                        l.var,
                        l.parallel.cuda_index().unwrap_or("?")
                    ),
                );
            }
            (uniform::of_hw(self.k, l.parallel), ctx)
        } else {
            // Threads that disagree on the extent run different iterations.
            (extent, ctx.min(extent))
        };
        self.vars.push((l.var.clone(), var));
        // A flat loop's digits step with its count: as uniform as their extents.
        for d in &l.digits {
            let u = self.value(&d.extent, ctx);
            self.vars.push((d.var.clone(), var.min(u)));
        }
        body_ctx
    }

    fn alloc(&mut self, me: usize, st: &'k Stmt, b: BufferId) {
        if !self.buffer_known(b) {
            return;
        }
        let buf = &self.k.buffers[b];
        if buf.memory == MemoryType::Global {
            self.error(
                Rule::MemorySpace,
                format!(
                    "`{}` is a global tensor: only register and shared buffers are allocated",
                    buf.name
                ),
            );
        }
        if self.in_scope[b] > 0 {
            self.error(
                Rule::DoubleAlloc,
                format!(
                    "`{}` is allocated again while its allocation is in scope",
                    buf.name
                ),
            );
        }
        self.allocs.push(b);
        self.in_scope[b] += 1;
        self.first_alloc[b].get_or_insert((me, st));
    }

    fn let_stmt(&mut self, var: &str, value: &Val, broadcast: bool, ctx: Uniformity) {
        let mut u = self.value(value, ctx);
        if broadcast {
            // A shuffle from lane 0: every lane must be here, and lane 0's value must
            // be every lane's.
            self.warp_collective(ctx, &format!("the broadcast of `{var}`"));
            if u < Uniformity::Warp {
                self.error(
                        Rule::WarpCollective,
                        format!(
                            "`{var}` is broadcast from lane 0, but `{}` differs between the lanes of a warp",
                            value.text()
                        ),
                    );
            }
            u = u.max(Uniformity::Warp);
        }
        self.vars.push((var.to_string(), u));
    }

    fn tma_load(&mut self, t: &TmaLoad, ctx: Uniformity) {
        self.access(&t.dst, ctx);
        self.access(&t.src, ctx);
        self.memory_is(
            t.dst.buffer,
            MemoryType::Shared,
            "the destination of a TMA load",
        );
        self.memory_is(t.src.buffer, MemoryType::Global, "the source of a TMA load");
        for c in &t.coords {
            self.value(c, ctx);
        }
        self.value(&t.slot, ctx);
        if let CopyKind::Tile { map } = t.kind {
            self.tensor_map(map, t.coords.len());
        }
        self.mbarrier_use(t.bars);
        if let Some(ctas) = t.multicast {
            let cluster = self.k.cluster_ctas();
            if !(2..=cluster).contains(&ctas) || !matches!(t.kind, CopyKind::Tile { .. }) {
                self.error(
                        Rule::Cluster,
                        format!("a TMA tile copy multicast to {ctas} CTAs in a kernel whose clusters have {cluster}: the mask would name CTAs that do not exist"),
                    );
            }
        }
    }

    /// The checks of warp roles themselves (their branches are walked by the caller).
    fn warp_roles(
        &mut self,
        ctx: Uniformity,
        is_producer: &Val,
        registers: Option<(u32, u32)>,
        consumer_threads: i64,
    ) {
        if self.group != Group::Block {
            self.error(
                Rule::WarpRoles,
                "warp roles inside warp roles: warp specialization splits the block once".into(),
            );
        }
        let condition = self.value(is_producer, ctx);
        // Every warp takes one role: the split is a warp-uniform condition that the whole block
        // reaches; `setmaxnreg.sync.aligned` is executed by whole warps.
        if condition < Uniformity::Warp {
            self.error(
                Rule::WarpCollective,
                format!(
                    "the producer condition `{}` differs between the lanes of a warp, so a warp would take both roles",
                    is_producer.text()
                ),
            );
        }
        if ctx < Uniformity::Block {
            self.error(
                Rule::BlockBarrier,
                "warp roles under a condition that differs between threads: the consumers' named barriers count every consumer thread".into(),
            );
        }
        if registers.is_some() {
            self.warp_collective(ctx, "`setmaxnreg`");
        }
        if registers != self.k.register_sharing {
            self.error(
                Rule::WarpRoles,
                format!(
                    "the roles set registers {registers:?} but the kernel's register sharing is {:?}",
                    self.k.register_sharing
                ),
            );
        }
        if let Some((p, c)) = registers {
            for (who, r) in [("producer", p), ("consumer", c)] {
                if !(24..=256).contains(&r) || r % 8 != 0 {
                    self.error(
                        Rule::WarpRoles,
                        format!("the {who} register count {r} is not a multiple of 8 from 24 to 256 (setmaxnreg)"),
                    );
                }
            }
        }
        uniform::check_consumer_count(self, is_producer, consumer_threads);
    }

    fn buffer_known(&mut self, b: BufferId) -> bool {
        let known = b.index() < self.k.buffers.len();
        if !known {
            self.error(
                Rule::UnknownId,
                format!(
                    "buffer {b} does not exist (the kernel has {})",
                    self.k.buffers.len()
                ),
            );
        }
        known
    }

    fn mbarrier_known(&mut self, bars: MbarId) -> bool {
        let known = bars.index() < self.k.mbarriers.len();
        if !known {
            self.error(
                Rule::UnknownId,
                format!(
                    "mbarrier array {bars} does not exist (the kernel has {})",
                    self.k.mbarriers.len()
                ),
            );
        }
        known
    }

    fn mbarrier_use(&mut self, bars: MbarId) {
        if self.mbarrier_known(bars) {
            self.event(EventKind::Use(bars));
        }
    }

    fn tensor_map(&mut self, map: TensorMapId, rank: usize) {
        match self.k.tensor_maps.get(map.index()) {
            None => self.error(
                Rule::UnknownId,
                format!(
                    "tensor map {map} does not exist (the kernel has {})",
                    self.k.tensor_maps.len()
                ),
            ),
            Some(m) if m.box_dims.len() != rank => self.error(
                Rule::UnknownId,
                format!(
                    "tensor map `{}` has rank {} but the copy gives {rank} coordinates",
                    m.param,
                    m.box_dims.len()
                ),
            ),
            Some(_) => {}
        }
    }

    fn memory_is(&mut self, b: BufferId, memory: MemoryType, what: &str) {
        let Some(buf) = self.k.buffers.get(b.index()) else {
            return;
        };
        if buf.memory != memory {
            self.error(
                Rule::MemorySpace,
                format!(
                    "{what} must be in {} memory; `{}` is in {}",
                    memory.name(),
                    buf.name,
                    buf.memory.name()
                ),
            );
        }
    }

    /// A read or write: the buffer exists, is allocated in scope, has an index over bound
    /// variables.
    fn access(&mut self, a: &Access, ctx: Uniformity) {
        if !self.buffer_known(a.buffer) {
            return;
        }
        let buf = &self.k.buffers[a.buffer];
        match &a.index {
            Some(i) => {
                self.value(i, ctx);
            }
            None if self.stage.indexed => self.error(
                Rule::UnindexedAccess,
                format!("an access of `{}` has no index", buf.name),
            ),
            None => {}
        }
        if self.stage.allocated && buf.memory != MemoryType::Global && self.in_scope[a.buffer] == 0
        {
            self.error(
                Rule::UseBeforeAlloc,
                format!(
                    "{} buffer `{}` is used outside the scope of any `alloc {}`",
                    buf.memory.name(),
                    buf.name,
                    buf.name
                ),
            );
        }
    }
}

/// Whether every id a statement itself names is the kernel's (so its dump line can be printed).
fn ids_valid(k: &Kernel, st: &Stmt) -> bool {
    let buffer = |a: &Access| a.buffer.index() < k.buffers.len();
    let bars = |b: MbarId| b.index() < k.mbarriers.len();
    match st {
        Stmt::Alloc(b) => b.index() < k.buffers.len(),
        Stmt::Compute(c) => {
            let mut ok = buffer(&c.out);
            c.value.for_each_read(&mut |a| ok &= buffer(a));
            ok
        }
        Stmt::BlockReduce { acc, .. } | Stmt::QuadReduce { acc, .. } => buffer(acc),
        Stmt::BlockWelford {
            mean, m2, count, ..
        } => buffer(mean) && buffer(m2) && buffer(count),
        Stmt::GridReduce(g) => buffer(&g.acc),
        Stmt::MbarInit { bars: b }
        | Stmt::MbarInval { bars: b }
        | Stmt::MbarArriveExpectTx { bars: b, .. }
        | Stmt::MbarExpectTx { bars: b, .. }
        | Stmt::MbarWait { bars: b, .. }
        | Stmt::MbarArrive { bars: b, .. } => bars(*b),
        Stmt::TmaLoad(t) => {
            buffer(&t.dst)
                && buffer(&t.src)
                && bars(t.bars)
                && match t.kind {
                    CopyKind::Tile { map } => map.index() < k.tensor_maps.len(),
                    CopyKind::Bulk => true,
                }
        }
        Stmt::TmaStore(t) => buffer(&t.src) && t.map.index() < k.tensor_maps.len(),
        Stmt::StMatrix { dst, src } => buffer(dst) && buffer(src),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stage_anchors_are_passes_of_the_pipeline() {
        for anchor in [ALLOCATION_PASS, INDEXING_PASS, BARRIER_PASS, SYNC_PASS] {
            assert!(
                crate::passes::PIPELINE.iter().any(|p| p.name == anchor),
                "`{anchor}` is not a pass of the pipeline any more: Stage::after needs its successor"
            );
        }
        let first = crate::passes::PIPELINE[0].name;
        assert_eq!(
            Stage::after(first),
            Stage {
                allocated: false,
                indexed: false,
                barriers_placed: false,
                synchronised: false,
            }
        );
        let last = crate::passes::PIPELINE.last().expect("passes").name;
        assert_eq!(Stage::after(last), Stage::LOWERED);
        let allocation = Stage::after(ALLOCATION_PASS);
        assert!(allocation.allocated && !allocation.indexed && !allocation.barriers_placed);
        let circular = Stage::after(BARRIER_PASS);
        assert!(circular.barriers_placed && !circular.synchronised);
    }

    #[test]
    fn every_rule_has_its_own_name() {
        let names: std::collections::HashSet<&str> = Rule::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), Rule::ALL.len());
    }
}
