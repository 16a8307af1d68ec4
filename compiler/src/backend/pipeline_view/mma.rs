//! The tensor-core part of the pipeline view: who issues `wgmma.mma_async`, on which shared
//! operands (and so which pipeline stage), into which accumulator registers, grouped how, and
//! what reads the accumulator afterwards.
//!
//! Takes the walk's events (in program order, with their guards and loops) and the pipelines'
//! loops; emits one [`Mma`] per (role, accumulator, operands, shape). A commit group is the
//! wgmmas between a `wgmma.fence` (or the first wgmma) and the next `wgmma.commit_group` of the
//! same role; the `wgmma.wait_group` and the empty-barrier arrival that follow it belong to it.
//! The same product issued in several loops (a pipeline's main loop and its epilogue) is one
//! [`Mma`] with several phases, shown as issued in the steady-state loop.

use super::flight::{self, Flight, InFlight, Turns};
use super::walk::{role_index, same_product, within};
use super::{Event, PhaseKind, Place, Role, ThreadLoop, Walk, What};
use crate::fusion::MemoryType;
use crate::kir::{BufferId, Kernel, MmaOperand, Val, Wgmma};
use crate::passes::PipelinePlan;
use crate::target;
use serde::Serialize;

/// One tensor-core product: the wgmmas of one role into one accumulator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mma {
    /// Index into [`super::PipelineView::roles`]: the warp groups that issue it.
    pub role: usize,
    /// Warp groups issuing it (128 threads each), when the role's size is known.
    pub warp_groups: Option<i64>,
    /// Thread-bound loops around the wgmma: each warp group takes its own tile along them
    /// (a TIDy axis over M).
    pub warp_group_axes: Vec<WarpGroupAxis>,
    /// Ping-pong: how the warp groups take turns, with whole stages each (the matmul's) or
    /// issuing their products on shared stages (`turns=products`, attention's); None when they
    /// do not (cooperative).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turns: Option<Turns>,
    /// The turn (numbered in its loop's iteration) whose wait and pass enclose its group:
    /// products in one turn share it; None outside turns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<usize>,
    /// The instruction shape, `m64n256k16` (`k32` for 8-bit operands).
    pub shape: String,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    /// The operands' type (`bf16`, `f16`, `f8e4m3`; `f8e4m3.f8e5m2` when A's and B's differ).
    pub input: String,
    pub a: MmaInput,
    pub b: MmaInput,
    pub accumulator: Accumulator,
    /// Wgmmas each warp group issues per commit group (the unrolled loops around the wgmma
    /// inside the group, times the wgmma statements); None when an extent is not a constant.
    pub per_group: Option<i64>,
    /// A `wgmma.fence` opens the group.
    pub fence: bool,
    /// The `N` of the first `wgmma.wait_group N` after the group's commit (None: no wait
    /// follows).
    pub wait_group: Option<u32>,
    /// The wait that drains its group and what runs meanwhile (`pipeline_view/flight.rs`).
    pub in_flight: InFlight,
    /// The loop that issues one group per iteration (the K loop), if any.
    pub loop_var: Option<String>,
    /// The phases of the operands' pipeline it is issued in.
    pub phases: Vec<PhaseKind>,
    /// The full-barrier wait before the group: the stage its operands were loaded into.
    pub stage: Option<StageWait>,
    /// The arrival after the wait that drains the group (else after its first wait) that gives
    /// the stage back to the producer.
    pub release: Option<StageRelease>,
    /// What reads the accumulator after the product (the epilogue over its registers).
    pub epilogue: Option<Epilogue>,
}

/// How a wgmma operand lies in shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Major {
    /// K is contiguous: a row of the tile is one swizzle span.
    KMajor,
    /// M (for A) or N (for B) is contiguous: the transposed (`imm-trans`) operand.
    MnMajor,
}

/// A shared-memory operand of a wgmma (its matrix descriptor).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MmaInput {
    pub buffer: String,
    /// The global tensor loaded into the buffer, when a load fills it.
    pub tensor: Option<String>,
    pub major: Major,
    /// Swizzle of the buffer's layout in bytes (0: none).
    pub swizzle: u32,
    /// The element index of the operand tile's first element (the descriptor's start).
    pub tile: String,
    /// Index into [`super::PipelineView::pipelines`]: the pipeline that loads the buffer.
    pub pipeline: Option<usize>,
}

/// The accumulator of a product: a register array of each thread of the warp group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Accumulator {
    pub buffer: String,
    /// `f32`.
    pub dtype: String,
    /// Registers per thread of one wgmma's fragment (M x N / 128 = N / 2).
    pub registers: i64,
    /// The register array's length, when constant (several fragments when it is longer).
    pub allocated: Option<i64>,
    /// The fragment's first register.
    pub index: String,
    /// The flag that turns `scale-d` on after the first wgmma (no zero fill); None: always on.
    pub started: Option<String>,
}

/// A thread index that gives each warp group its own tile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WarpGroupAxis {
    pub var: String,
    /// `threadIdx.y`
    pub thread: String,
    pub extent: Option<i64>,
    /// The operands (`A`, `B`) whose tile moves with it.
    pub operands: Vec<String>,
}

/// A wait on a pipeline's full barrier.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StageWait {
    /// Index into [`super::PipelineView::pipelines`].
    pub pipeline: usize,
    pub barrier: String,
    pub slot: String,
    pub parity: String,
}

/// An arrival on an empty barrier.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StageRelease {
    pub barrier: String,
    pub slot: String,
    /// Lane 0 of each warp arrives (else every thread).
    pub per_warp: bool,
}

/// The loop over the accumulator's registers after the product.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Epilogue {
    /// The outermost loop variable indexing the accumulator (`r`, or `r_pair` when the
    /// registers are stored in pairs).
    pub var: String,
    pub extent: String,
    /// Global tensors written inside it (directly, or staged in shared memory by `stmatrix` for
    /// a TMA store).
    pub outputs: Vec<String>,
}

/// The statements of one commit group, as event indices.
struct Group<'k> {
    role: usize,
    fence: bool,
    /// The fence, or the first wgmma without one.
    start: usize,
    mmas: Vec<usize>,
    commit: Option<usize>,
    wait: Option<u32>,
    release: Option<usize>,
    /// What is in flight with it, from its commit to the wait that drains it.
    flight: Flight<'k>,
}

/// The commit groups of the kernel, in the order of their commits.
fn groups<'k>(walk: &Walk<'k>, roles: &[Role]) -> Vec<Group<'k>> {
    let mut open: Vec<Option<Group>> = (0..roles.len()).map(|_| None).collect();
    let mut closed: Vec<Group> = Vec::new();
    for (i, e) in walk.events.iter().enumerate() {
        let role = match e.what {
            What::Fence
            | What::Mma { .. }
            | What::Commit
            | What::MmaWait(_)
            | What::Release { .. } => role_index(roles, e),
            _ => None,
        };
        let Some(role) = role else { continue };
        let group = |fence| Group {
            role,
            fence,
            start: i,
            mmas: Vec::new(),
            commit: None,
            wait: None,
            release: None,
            flight: Flight::default(),
        };
        match e.what {
            What::Fence => open[role] = Some(group(true)),
            What::Mma { .. } => open[role].get_or_insert_with(|| group(false)).mmas.push(i),
            What::Commit => {
                if let Some(mut g) = open[role].take() {
                    g.commit = Some(i);
                    closed.push(g);
                }
            }
            // The first wait after each group (two groups of one iteration share it).
            What::MmaWait(n) if open[role].is_none() => {
                for g in closed
                    .iter_mut()
                    .filter(|g| g.role == role && g.wait.is_none())
                {
                    g.wait = Some(n);
                }
            }
            _ => {}
        }
    }
    let accumulators: Vec<BufferId> = walk
        .events
        .iter()
        .filter_map(|e| match e.what {
            What::Mma { w, .. } => Some(w.acc.buffer),
            _ => None,
        })
        .collect();
    for g in &mut closed {
        if let Some(c) = g.commit {
            g.flight = flight::flight(walk, roles, g.role, c, &accumulators);
        }
    }
    assign_releases(walk, roles, &mut closed);
    // Groups never committed (the mma pass commits every group it opens) last.
    closed.extend(open.into_iter().flatten().filter(|g| !g.mmas.is_empty()));
    closed
}

/// Gives each stage release (an arrival on an empty barrier) to a group: the one drained by the
/// wait before it (attention's K stage after S's wait, V's after P V's), else the last group
/// committed before it whose wait is in its loop (a stage both products of an iteration read,
/// released a step late).
fn assign_releases(walk: &Walk, roles: &[Role], closed: &mut [Group]) {
    let events = &walk.events;
    for (r, e) in events.iter().enumerate() {
        if !matches!(e.what, What::Release { .. }) {
            continue;
        }
        let Some(role) = role_index(roles, e) else {
            continue;
        };
        let mine = |i: usize| role_index(roles, &events[i]) == Some(role);
        let wait = (0..r)
            .rev()
            .take_while(|&i| !(matches!(events[i].what, What::Commit) && mine(i)))
            .find(|&i| matches!(events[i].what, What::MmaWait(_)) && mine(i))
            .filter(|&w| events[w].lp == e.lp);
        let drained = wait.and_then(|w| {
            closed.iter().position(|g| {
                g.role == role && g.release.is_none() && g.flight.drain.map(|d| d.0) == Some(w)
            })
        });
        let last = closed
            .iter()
            .rposition(|g| g.role == role && g.commit.is_some_and(|c| c < r))
            .filter(|&j| {
                let g = &closed[j];
                g.wait.is_some()
                    && g.release.is_none()
                    && g.commit.map(|c| events[c].lp) == Some(e.lp)
            });
        if let Some(j) = drained.or(last) {
            closed[j].release = Some(r);
        }
    }
}

/// A loop of at most one iteration (a prologue peeled off the steady state: `min(n, 1)`).
fn at_most_once(extent: &Val) -> bool {
    match extent {
        Val::Int(n) => *n <= 1,
        Val::Min(a, b) => at_most_once(a) || at_most_once(b),
        _ => false,
    }
}

fn operand(k: &Kernel, walk: &Walk, full: &[crate::kir::MbarId], o: &MmaOperand) -> MmaInput {
    // The load that fills the buffer: its tensor and pipeline.
    let load = walk.events.iter().find_map(|e| match e.what {
        What::Load(t) if t.dst.buffer == o.tile.buffer => Some(t),
        _ => None,
    });
    let tensor = load.map(|t| match t.kind {
        crate::kir::CopyKind::Tile { map } => k.tensor_maps[map].tensor.clone(),
        crate::kir::CopyKind::Bulk => k.buffers[t.src.buffer].name.clone(),
    });
    MmaInput {
        buffer: k.buffers[o.tile.buffer].name.clone(),
        tensor,
        major: if o.transposed {
            Major::MnMajor
        } else {
            Major::KMajor
        },
        swizzle: o.swizzle,
        tile: o.tile.index.as_ref().map_or("0".into(), Val::text),
        pipeline: load.and_then(|t| full.iter().position(|&b| b == t.bars)),
    }
}

/// Wgmmas one warp group issues for the wgmma event `e` per group issued in loop `lp`: the
/// product of the loops between them.
fn issues_per_group(walk: &Walk, e: &Event, lp: Option<usize>) -> Option<i64> {
    let mut n = 1;
    let mut at = e.lp;
    while at != lp {
        let l = &walk.loops[at?];
        match l.extent {
            Val::Int(x) => n *= x,
            _ => return None,
        }
        at = l.parent;
    }
    Some(n)
}

/// The first loop after event `after` that reads accumulator `acc` indexed by its own variable,
/// and the global tensors written inside it.
fn epilogue(
    k: &Kernel,
    plan: &PipelinePlan,
    walk: &Walk,
    acc: BufferId,
    after: usize,
) -> Option<Epilogue> {
    let events = &walk.events;
    let reads_acc = |e: &Event| -> Option<usize> {
        let What::Compute(c) = e.what else {
            return None;
        };
        let mut found = None;
        c.value.for_each_read(&mut |a| {
            if a.buffer != acc || found.is_some() {
                return;
            }
            // The outermost loop around the read whose variable indexes the accumulator (the
            // epilogue may walk the registers in pairs: `2 * r_pair + r_lane`).
            let mut at = e.lp;
            while let Some(l) = at {
                if a.index
                    .as_ref()
                    .is_some_and(|i| i.mentions(walk.loops[l].var))
                {
                    found = Some(l);
                }
                at = walk.loops[l].parent;
            }
        });
        found
    };
    let lp = events[after..].iter().find_map(reads_acc)?;
    // Every loop that reads the accumulator (an epilogue computed in place reads it twice).
    let loops: Vec<usize> = events[after..].iter().filter_map(reads_acc).collect();
    let mut outputs: Vec<String> = Vec::new();
    for e in &events[after..] {
        if !loops.iter().any(|&l| within(walk, e.lp, Some(l))) {
            continue;
        }
        let name = match e.what {
            What::Compute(c) if k.buffers[c.out.buffer].memory == MemoryType::Global => {
                Some(k.buffers[c.out.buffer].name.clone())
            }
            // Staged in shared memory (by stmatrix, or by vector stores of 8-bit pairs): the
            // tensor its TMA store writes.
            What::Staged { cache, .. } => tma_stored(k, plan, cache),
            What::Compute(c) if k.buffers[c.out.buffer].memory == MemoryType::Shared => {
                tma_stored(k, plan, c.out.buffer)
            }
            _ => None,
        };
        if let Some(name) = name.filter(|n| !outputs.contains(n)) {
            outputs.push(name);
        }
    }
    Some(Epilogue {
        var: walk.loops[lp].var.to_string(),
        extent: walk.loops[lp].extent.text(),
        outputs,
    })
}

/// The global tensor a planned TMA store of shared buffer `b` writes.
fn tma_stored(k: &Kernel, plan: &PipelinePlan, b: BufferId) -> Option<String> {
    let store = plan
        .stores
        .iter()
        .find(|s| k.buffers[b].tensor == Some(s.cache))?;
    Some(k.tensor_maps[store.map].tensor.clone())
}

/// The thread loops around a wgmma (its warp groups' axes) and the operands each moves.
fn warp_group_axes(w: &Wgmma, threads: &[ThreadLoop]) -> Vec<WarpGroupAxis> {
    threads
        .iter()
        .map(|t| {
            let moves = |o: &MmaOperand| o.tile.index.as_ref().is_some_and(|i| i.mentions(t.var));
            let operands = [("A", moves(&w.a)), ("B", moves(&w.b))]
                .into_iter()
                .filter(|(_, m)| *m)
                .map(|(name, _)| name.to_string())
                .collect();
            WarpGroupAxis {
                var: t.var.to_string(),
                thread: Val::Hw(t.parallel).text(),
                extent: match t.extent {
                    Val::Int(x) => Some(*x),
                    _ => None,
                },
                operands,
            }
        })
        .collect()
}

/// A wgmma's accumulator: its register array and what says it has started.
fn accumulator(k: &Kernel, w: &Wgmma) -> Accumulator {
    let acc = &k.buffers[w.acc.buffer];
    Accumulator {
        buffer: acc.name.clone(),
        dtype: acc.dtype.name().to_string(),
        registers: target::wgmma_accumulators(w.n),
        allocated: match acc.size {
            Some(Val::Int(n)) => Some(n),
            _ => None,
        },
        index: w.acc.index.as_ref().map_or("0".into(), Val::text),
        started: w.accumulate.as_ref().map(|a| crate::kir::access_text(k, a)),
    }
}

/// The tensor-core products of `k` (see the module doc).
pub(super) fn extract(
    k: &Kernel,
    plan: &PipelinePlan,
    walk: &Walk,
    roles: &[Role],
    full: &[crate::kir::MbarId],
    places: &[Vec<Place>],
) -> Vec<Mma> {
    let events = &walk.events;
    let mut out: Vec<Mma> = Vec::new();
    // Per product: its first wgmma (for `same_product`), whether the instance shown is the
    // steady-state one, and the last event of its groups (where its epilogue starts).
    let mut seen: Vec<(&Wgmma, bool, usize)> = Vec::new();
    // Per product, what is in flight with the instance shown.
    let mut flights: Vec<Flight> = Vec::new();
    for g in groups(walk, roles) {
        let lp = g.commit.map_or(events[g.start].lp, |c| events[c].lp);
        let last = g.release.or(g.commit).unwrap_or(g.start);
        // The wait on a full barrier before the group, in its loop.
        let stage = events[..g.start].iter().rev().find_map(|e| match e.what {
            What::Wait { bars, slot, parity }
                if e.lp == lp && role_index(roles, e) == Some(g.role) =>
            {
                Some(StageWait {
                    pipeline: full.iter().position(|&b| b == bars)?,
                    barrier: k.mbarriers[bars].name.clone(),
                    slot: slot.text(),
                    parity: parity.text(),
                })
            }
            _ => None,
        });
        let release = g.release.and_then(|i| match events[i].what {
            What::Release {
                bars,
                slot,
                per_warp,
            } => Some(StageRelease {
                barrier: k.mbarriers[bars].name.clone(),
                slot: slot.text(),
                per_warp,
            }),
            _ => None,
        });
        let mut done: Vec<&Wgmma> = Vec::new();
        for &i in &g.mmas {
            let What::Mma { w, ref threads } = events[i].what else {
                continue;
            };
            if done.iter().any(|d| same_product(d, w)) {
                continue;
            }
            done.push(w);
            let per_group = g
                .mmas
                .iter()
                .filter(
                    |&&j| matches!(events[j].what, What::Mma { w: o, .. } if same_product(o, w)),
                )
                .map(|&j| issues_per_group(walk, &events[j], lp))
                .sum::<Option<i64>>();
            let a = operand(k, walk, full, &w.a);
            let b = operand(k, walk, full, &w.b);
            let pipeline = stage
                .as_ref()
                .map(|s| s.pipeline)
                .or(a.pipeline)
                .or(b.pipeline);
            let phase = pipeline.and_then(|p| {
                places[p]
                    .iter()
                    .find(|(l, _)| *l == lp)
                    .map(|(_, kind)| *kind)
            });
            let steady = matches!(
                phase,
                Some(PhaseKind::Main | PhaseKind::Consume | PhaseKind::Once)
            ) && !lp.is_some_and(|l| at_most_once(walk.loops[l].extent));
            let warp_group_axes = warp_group_axes(w, threads);
            let k_extent = target::wgmma_k(w.a_type).unwrap_or(0);
            let mma = Mma {
                role: g.role,
                warp_groups: roles[g.role].warp_groups,
                warp_group_axes,
                turns: flight::turns(plan),
                turn: flight::turn(walk, roles, g.role, g.start),
                shape: format!("m{}n{}k{k_extent}", target::WGMMA_M, w.n),
                m: target::WGMMA_M,
                n: w.n,
                k: k_extent,
                input: if w.a_type == w.b_type {
                    w.a_type.name().to_string()
                } else {
                    format!("{}.{}", w.a_type.name(), w.b_type.name())
                },
                a,
                b,
                accumulator: accumulator(k, w),
                per_group,
                fence: g.fence,
                wait_group: g.wait,
                in_flight: InFlight::default(),
                loop_var: lp.map(|l| walk.loops[l].var.to_string()),
                phases: phase.into_iter().collect(),
                stage: stage.clone(),
                release: release.clone(),
                epilogue: None,
            };
            let known = seen
                .iter()
                .zip(&out)
                .position(|((o, ..), m)| same_product(o, w) && m.role == g.role);
            match known {
                Some(j) => {
                    if let Some(p) = phase {
                        if !out[j].phases.contains(&p) {
                            out[j].phases.push(p);
                        }
                    }
                    if steady && !seen[j].1 {
                        let phases = std::mem::take(&mut out[j].phases);
                        out[j] = Mma { phases, ..mma };
                        flights[j] = g.flight.clone();
                        seen[j].1 = true;
                    }
                    seen[j].2 = seen[j].2.max(last);
                }
                None => {
                    seen.push((w, steady, last));
                    flights.push(g.flight.clone());
                    out.push(mma);
                }
            }
        }
    }
    for (m, (w, _, last)) in out.iter_mut().zip(&seen) {
        m.epilogue = epilogue(k, plan, walk, w.acc.buffer, *last);
    }
    for (j, f) in flights.iter().enumerate() {
        out[j].in_flight = in_flight(&seen, &out, out[j].role, f);
    }
    out
}

/// A group's [`Flight`] with its products numbered: those of the same role the role issued,
/// those whose accumulator was read.
fn in_flight(seen: &[(&Wgmma, bool, usize)], out: &[Mma], role: usize, f: &Flight) -> InFlight {
    let product = |w: &Wgmma| {
        seen.iter()
            .zip(out)
            .position(|((o, ..), m)| same_product(o, w) && m.role == role)
    };
    InFlight {
        drained_by: f.drain.map(|(_, n)| n),
        next_iteration: f.next_iteration,
        products: f.issued.iter().filter_map(|w| product(w)).collect(),
        epilogues: f
            .read
            .iter()
            .filter_map(|&b| seen.iter().position(|(o, ..)| o.acc.buffer == b))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{extract as view_of, PipelineView};
    use super::*;
    use crate::kir::{for_each_block_mut, Kernel, Stmt};
    use crate::passes::PipelinePlan;

    fn source(path: &str) -> String {
        let file = format!("{}/../examples/{path}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"))
    }

    fn kernel(src: &str) -> (Kernel, PipelinePlan) {
        let c = crate::compile(src, &Default::default())
            .unwrap_or_else(|e| panic!("{}", e.render(src, "t.hf")));
        (c.kernel, c.pipeline_plan)
    }

    fn view(path: &str) -> PipelineView {
        let (k, plan) = kernel(&source(path));
        view_of(&k, &plan)
    }

    fn one(v: &PipelineView) -> &Mma {
        let [m] = &v.mmas[..] else {
            panic!("one product: {:#?}", v.mmas)
        };
        m
    }

    fn k_major(buffer: &str, tensor: &str, tile: &str) -> MmaInput {
        MmaInput {
            buffer: buffer.into(),
            tensor: Some(tensor.into()),
            major: Major::KMajor,
            swizzle: 128,
            tile: tile.into(),
            pipeline: Some(0),
        }
    }

    #[test]
    fn one_warp_group_issues_four_k16_steps_per_stage_into_64_registers() {
        let v = view("matmul/step1_one_warp_group.hf");
        let m = one(&v);
        let role = &v.roles[m.role];
        assert_eq!(
            (
                &*role.name,
                role.thread_count,
                role.warp_groups,
                role.mma,
                role.waits
            ),
            ("consumer warp group", Some(128), Some(1), true, true)
        );
        assert!(!v.roles[0].mma && v.roles[0].warp_groups.is_none());
        assert_eq!(
            *m,
            Mma {
                role: 1,
                warp_groups: Some(1),
                warp_group_axes: vec![],
                turns: None,
                turn: None,
                shape: "m64n128k16".into(),
                m: 64,
                n: 128,
                k: 16,
                input: "bf16".into(),
                a: k_major("a_s", "a", "k_io * 16"),
                b: k_major("b_s", "b", "k_io * 16"),
                accumulator: Accumulator {
                    buffer: "s_acc".into(),
                    dtype: "f32".into(),
                    registers: 64,
                    allocated: Some(64),
                    index: "0".into(),
                    started: Some("s_acc_started[0]".into()),
                },
                per_group: Some(4),
                fence: true,
                wait_group: Some(0),
                // Drained at once: nothing runs under it.
                in_flight: InFlight {
                    drained_by: Some(0),
                    ..InFlight::default()
                },
                loop_var: Some("k_o".into()),
                phases: vec![PhaseKind::Main],
                stage: Some(StageWait {
                    pipeline: 0,
                    barrier: "k_o_full".into(),
                    slot: "0".into(),
                    parity: "k_o % 2".into(),
                }),
                // One stage: `__syncthreads()` gives it back (the pipeline's release).
                release: None,
                epilogue: Some(Epilogue {
                    var: "r_pair".into(),
                    extent: "32".into(),
                    outputs: vec!["c".into()],
                }),
            }
        );
    }

    #[test]
    fn a_pipelined_product_is_issued_in_the_main_loop_and_the_epilogue() {
        let v = view("matmul/step2_pipelined.hf");
        let m = one(&v);
        assert_eq!(m.phases, [PhaseKind::Main, PhaseKind::Epilogue]);
        // Shown as the main loop issues it: slot `k_o % 4` of four.
        assert_eq!(m.loop_var.as_deref(), Some("k_o"));
        let stage = m.stage.as_ref().unwrap();
        assert_eq!((&*stage.slot, &*stage.parity), ("k_o % 4", "k_o / 4 % 2"));
        assert_eq!(m.a.tile, "k_o % 4 * 4096 + k_io * 16");
        assert_eq!(v.pipelines[stage.pipeline].stages, 4);
    }

    #[test]
    fn two_consumer_warp_groups_split_m_along_thread_index_y() {
        let v = view("matmul/step4_two_consumers.hf");
        let m = one(&v);
        let role = &v.roles[m.role];
        assert_eq!(
            (
                &*role.name,
                role.thread_count,
                role.warp_groups,
                role.registers
            ),
            ("consumer warp groups", Some(256), Some(2), Some(232))
        );
        assert_eq!(v.roles[0].registers, Some(40));
        assert_eq!(m.warp_groups, Some(2));
        assert_eq!(
            m.warp_group_axes,
            [WarpGroupAxis {
                var: "m_io".into(),
                thread: "threadIdx.y".into(),
                extent: Some(2),
                operands: vec!["A".into()],
            }]
        );
        assert_eq!(
            (&*m.shape, m.n, m.accumulator.registers),
            ("m64n256k16", 256, 128)
        );
        // The stage is released by an empty mbarrier: one group stays in flight.
        assert_eq!((m.per_group, m.wait_group), (Some(4), Some(1)));
        assert_eq!(m.phases, [PhaseKind::Consume]);
        assert_eq!(m.stage.as_ref().unwrap().barrier, "a_s_b_s_full");
        assert_eq!(
            m.release,
            // The previous k step's stage, released once its group has finished.
            Some(StageRelease {
                barrier: "a_s_b_s_empty".into(),
                slot: "(k_o - 1) % 4".into(),
                per_warp: true,
            })
        );
        assert_eq!(
            v.pipelines[0].empty_barrier.as_deref(),
            Some("a_s_b_s_empty")
        );
    }

    #[test]
    fn mn_major_operands() {
        let m = one(&view("matmul/step5_mn_major.hf")).clone();
        assert_eq!((m.a.major, m.b.major), (Major::MnMajor, Major::MnMajor));
        assert_eq!((m.n, m.accumulator.registers), (256, 128));
        assert_eq!(m.a.tile, "k_o % 4 * 8192 + (m_io * 4 + k_io) * 16 * 64");
        let k = one(&view("matmul/step3_warp_specialized.hf")).clone();
        assert_eq!((k.a.major, k.b.major), (Major::KMajor, Major::KMajor));
    }

    #[test]
    fn a_fused_epilogue_reads_the_accumulator_registers_and_writes_the_output() {
        let m = one(&view("matmul/step7_bias_gelu.hf")).clone();
        let e = m.epilogue.unwrap();
        assert_eq!((&*e.var, &*e.extent), ("r_pair", "64"));
        assert_eq!(e.outputs, ["c"]);
        assert_eq!(m.accumulator.allocated, Some(128));
    }

    /// Every matmul example: one product, issued by a role of whole warp groups that waits on
    /// the stage its operands are loaded into, with N / 2 accumulator registers per thread.
    #[test]
    fn every_matmul_example_describes_its_tensor_cores() {
        let dir = format!("{}/../examples/matmul", env!("CARGO_MANIFEST_DIR"));
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "hf"))
            .collect();
        files.sort();
        assert!(files.len() >= 7, "{files:?}");
        for f in files {
            let src = std::fs::read_to_string(&f).unwrap();
            let (k, plan) = kernel(&src);
            let v = view_of(&k, &plan);
            let m = one(&v);
            let role = &v.roles[m.role];
            let name = f.display();
            assert!(role.mma && role.waits && !role.issues, "{name}: {role:?}");
            let groups = role
                .warp_groups
                .unwrap_or_else(|| panic!("{name}: {role:?}"));
            assert_eq!(role.thread_count, Some(128 * groups), "{name}");
            // Warp groups beyond one each take their own rows of A.
            let split: i64 = m.warp_group_axes.iter().filter_map(|a| a.extent).product();
            assert_eq!(split, groups, "{name}");
            assert_eq!(m.accumulator.registers * 2, m.n, "{name}");
            // k16 on bf16, k32 on FP8: 32 bytes of each operand row per wgmma.
            let elem = if m.input.starts_with("f8") { 1 } else { 2 };
            assert_eq!(m.k, target::WGMMA_K_BYTES / elem, "{name}");
            assert_eq!(m.shape, format!("m64n{}k{}", m.n, m.k), "{name}");
            let stage = m
                .stage
                .as_ref()
                .unwrap_or_else(|| panic!("{name}: no wait"));
            assert_eq!(m.a.pipeline, Some(stage.pipeline), "{name}");
            assert_eq!(m.b.pipeline, Some(stage.pipeline), "{name}");
            // wait_group 1 where an empty mbarrier frees the stage (one group in flight),
            // except in a block-scaled product whose block accumulator does not fit twice:
            // its promotion reads it right after the block's group (wait_group 0).
            let block_scaled = src.contains("expand_blocks");
            // (Step 18's overlap and step 21 allocate the block accumulator twice: one half
            // written while the other is promoted.)
            let overlapped = m.accumulator.allocated == Some(2 * m.accumulator.registers);
            let in_flight = if m.release.is_some() && (!block_scaled || overlapped) {
                1
            } else {
                0
            };
            // One wgmma per instruction K of the stage's K tile: the stage holds (M + N) x K
            // elements, M the rows of every warp group (cooperative) or of one, in 64-row
            // wgmmas (ping-pong).
            let stage_bytes = v.pipelines[stage.pipeline].stage_bytes;
            let per_group = match m.turns {
                None => stage_bytes / ((64 * groups + m.n) * elem) / m.k,
                Some(turns) => {
                    assert_eq!(turns.kind, super::super::TurnKind::Stages, "{name}");
                    assert_eq!(turns.groups, groups, "{name}");
                    // step 14: 128 x 128 per warp group, a K tile of 64: two wgmmas per k16.
                    let (rows, k_tile) = (128, 64);
                    assert_eq!(stage_bytes, (rows + m.n) * k_tile * 2, "{name}");
                    k_tile / 16 * (rows / 64)
                }
            };
            assert!(
                m.fence && m.wait_group == Some(in_flight) && m.per_group == Some(per_group),
                "{name}: {:?} {:?}",
                m.wait_group,
                m.release
            );
            assert!(v.pipelines[stage.pipeline].buffers.contains(&m.a.buffer));
            // (A block-scaled product's wgmmas write its block accumulator, which the
            // promotion reads after each block into the main accumulator: no output.)
            let outputs: &[&str] = if block_scaled { &[] } else { &["c"] };
            assert!(
                m.epilogue.as_ref().is_some_and(|e| e.outputs == outputs),
                "{name}"
            );
        }
    }

    /// The fields come from the statements: another wait depth and no fence show up as such.
    #[test]
    fn wait_depth_and_fence_are_read_from_the_ir() {
        let (mut k, plan) = kernel(&source("matmul/step3_warp_specialized.hf"));
        let mut seen = 0;
        for_each_block_mut(&mut k.body, &mut |b: &mut Vec<Stmt>| {
            b.retain(|s| !matches!(s, Stmt::WgmmaFence));
            for s in b.iter_mut() {
                if let Stmt::WgmmaWait(n) = s {
                    *n += 2;
                    seen += 1;
                }
            }
        });
        // The group's wait (1) and the drain after the k loop (0).
        assert_eq!(seen, 2);
        let v = view_of(&k, &plan);
        let m = one(&v);
        assert_eq!(
            (m.fence, m.wait_group, m.per_group),
            (false, Some(3), Some(4))
        );
    }

    #[test]
    fn kernels_without_wgmma_have_no_product_and_no_warp_groups() {
        let v = view("ws/exp_tidy_regs.hf");
        assert!(v.mmas.is_empty());
        assert!(v.roles.iter().all(|r| !r.mma && r.warp_groups.is_none()));
    }
}
