//! Loops over the accumulator fragment: each register's index, the sum's copy of the
//! accumulator read as the accumulator itself, and epilogue stores of adjacent columns paired
//! into vector stores.

#[allow(unused_imports)]
use super::*;
use crate::passes::probe::Probe;

/// The store a fragment loop's body ends with, and its guard (`true` when unguarded).
fn final_store(body: &[Stmt]) -> Option<(Val, Compute)> {
    store_of(body.last()?)
}

/// The store `s` is, and its guard (`true` when unguarded).
fn store_of(s: &Stmt) -> Option<(Val, Compute)> {
    match s {
        Stmt::If { cond, then, els } if els.is_empty() => match then.as_slice() {
            [Stmt::Compute(c)] => Some((cond.clone(), c.clone())),
            _ => None,
        },
        Stmt::Compute(c) => Some((Val::True, c.clone())),
        _ => None,
    }
}

/// `body` with its last store to global memory moved to the end, past statements that neither
/// read nor write the stored buffer (e.g. a scalar reduction's update of the same registers,
/// the amax of a quantized output), so that the store can pair with its neighbour's; None when
/// there is no such store or a later statement touches its buffer.
fn global_store_last(k: &Kernel, body: &[Stmt]) -> Option<Vec<Stmt>> {
    let at = body.iter().rposition(|s| {
        store_of(s).is_some_and(|(_, c)| k.buffers[c.out.buffer].memory == MemoryType::Global)
    })?;
    let (_, store) = store_of(&body[at])?;
    let buffer = store.out.buffer;
    let touches = crate::kir::any_stmt(&body[at + 1..], &mut |s| match s {
        Stmt::Compute(c) => {
            let mut found = c.out.buffer == buffer;
            c.value.for_each_read(&mut |a| found |= a.buffer == buffer);
            found
        }
        Stmt::Alloc(..) | Stmt::If { .. } | Stmt::Loop(..) => false,
        _ => true,
    });
    if touches {
        return None;
    }
    let mut out = body.to_vec();
    let store = out.remove(at);
    out.push(store);
    Some(out)
}

/// Registers `n g .. n g + n` of a fragment loop's body computed into an `n`-element register
/// array (`(g, n)` = `group`): the array (named after the store's buffer with `suffix`), the
/// lane variable, and the body with register `reg` = `n g + lane` whose last statement writes
/// the array's lane instead of the store's buffer.
fn lanes(
    cx: &mut Ctx,
    k: &mut Kernel,
    body: &[Stmt],
    store: &Compute,
    reg: &str,
    (group, n): (&str, i64),
    suffix: &str,
) -> (BufferId, String, Vec<Stmt>) {
    let array = BufferId::new(k.buffers.len());
    k.buffers.push(Buffer {
        name: cx.fresh_name(&format!("{}_{suffix}", k.buffers[store.out.buffer].name)),
        dtype: k.buffers[store.out.buffer].dtype,
        memory: MemoryType::Local,
        tensor: None,
        size: Some(Val::Int(n)),
        smem_offset: None,
        global_shape: Vec::new(),
        is_input: false,
        l2: crate::fusion::L2Policy::Normal,
    });
    let lane = cx.fresh_name(&format!("{reg}_lane"));
    let at_lane = Val::add(
        Val::mul(Val::Int(n), Val::Var(group.to_string())),
        Val::Var(lane.clone()),
    );
    let mut lanes_body: Vec<Stmt> = body[..body.len() - 1].to_vec();
    lanes_body.push(Stmt::Compute(Compute {
        out: Access {
            buffer: array,
            index: Some(Val::Var(lane.clone())),
        },
        ..store.clone()
    }));
    for s in &mut lanes_body {
        s.map_vals(&mut |v| v.subst(reg, &at_lane));
    }
    (array, lane, lanes_body)
}

/// Whether `buffer` is a shared-memory cache that only a TMA store reads (its box is clipped
/// to the tensor, so what a thread writes outside the tensor is never read).
fn only_tma_stored(cx: &Ctx, plan: &PipelinePlan, buffer: BufferId) -> bool {
    plan.stores
        .iter()
        .any(|s| cx.layout.tensor_buffer.get(&s.cache) == Some(&buffer))
}

/// A fragment loop (over register `reg`) that ends with a store to global memory, or of 8-bit
/// values into a shared-memory cache that only a TMA store reads (`stmatrix` stores 16-bit
/// elements only): registers `2j` and `2j + 1` hold adjacent columns, so their two results go
/// out as one vector store (half the store instructions and memory transactions of the
/// epilogue). A global pair is stored so when both are in bounds and the pair is aligned, else
/// one by one. A shared pair is always stored whole and unguarded, as `stmatrix` is: the TMA
/// store clips the box, and the pair's alignment is checked here at every register (the
/// 128-byte swizzle moves 16-byte chunks, so a pair never straddles one). The rest of the body
/// runs per register as before, into a two-element register array. None when the loop has
/// another shape.
pub(super) fn pair_store(
    cx: &mut Ctx,
    plan: &PipelinePlan,
    k: &mut Kernel,
    body: &[Stmt],
    reg: &str,
    key: LoopKey,
    width: i64,
) -> Option<Stmt> {
    let staged = |k: &Kernel, body: &[Stmt]| {
        let (_, store) = final_store(body)?;
        let out = &k.buffers[store.out.buffer];
        (out.memory == MemoryType::Shared
            && out.dtype.size_bytes() == 1
            && only_tma_stored(cx, plan, store.out.buffer))
        .then(|| body.to_vec())
    };
    let body = &match staged(k, body) {
        Some(body) => body,
        None => global_store_last(k, body)?,
    };
    let (cond, store) = final_store(body)?;
    let out = &k.buffers[store.out.buffer];
    let shared = out.memory == MemoryType::Shared;
    if !(shared || out.memory == MemoryType::Global) || store.vector.is_some() || width % 4 != 0 {
        return None;
    }
    let idx = store.out.index.clone()?;
    // Register 2j + 1 is the element after register 2j (and, staged, 2j's is even).
    let adjacent = (0..4u64).all(|seed| {
        let regs: Vec<i64> = if shared {
            (0..target::wgmma_accumulators(width)).step_by(2).collect()
        } else {
            vec![0, 2, 6]
        };
        regs.iter().all(|&r| {
            let at = |x| eval(&idx, reg, x, seed, &[], 1);
            matches!((at(r), at(r + 1)), (Some(a), Some(b)) if b == a + 1 && (!shared || a % 2 == 0))
        })
    });
    if !adjacent {
        return None;
    }
    let pair_var = cx.fresh_name(&format!("{reg}_pair"));
    let (pair, lane, lanes_body) = lanes(cx, k, body, &store, reg, (&pair_var, 2), "pair");
    let at_lane = |l: Val| Val::add(Val::mul(Val::Int(2), Val::Var(pair_var.clone())), l);
    let on = |v: &Val, l: Val| v.subst(reg, &at_lane(l));
    let lane_of = |l: i64| Access {
        buffer: pair,
        index: Some(Val::Int(l)),
    };
    let store_at = |l: i64| Access {
        buffer: store.out.buffer,
        index: Some(on(&idx, Val::Int(l))),
    };
    let vector = Stmt::Compute(Compute {
        out: store_at(0),
        value: Data::Read(lane_of(0)),
        vector: Some((lane.clone(), 2)),
        ..store.clone()
    });
    let store_pair = if shared {
        vector
    } else {
        let scalar: Vec<Stmt> = (0..2)
            .map(|l| Stmt::If {
                cond: on(&cond, Val::Int(l)),
                then: vec![Stmt::Compute(Compute {
                    out: store_at(l),
                    value: Data::Read(lane_of(l)),
                    ..store.clone()
                })],
                els: Vec::new(),
            })
            .collect();
        let aligned = Val::eq(Val::rem(on(&idx, Val::Int(0)), Val::Int(2)), Val::Int(0));
        Stmt::If {
            cond: Val::and(
                Val::and(on(&cond, Val::Int(0)), on(&cond, Val::Int(1))),
                aligned,
            ),
            then: vec![vector],
            els: scalar,
        }
    };
    Some(Stmt::Loop(Loop {
        key,
        var: pair_var.clone(),
        extent: Val::Int(target::wgmma_accumulators(width) / 2),
        parallel: ParallelType::Unroll,
        digits: Vec::new(),
        body: vec![
            Stmt::Alloc(pair),
            Stmt::Loop(Loop {
                key,
                var: lane.clone(),
                extent: Val::Int(2),
                parallel: ParallelType::Unroll,
                digits: Vec::new(),
                body: lanes_body,
            }),
            store_pair,
        ],
    }))
}

/// A fragment loop (over register `reg`) that ends with a store of a 16-bit value into a
/// shared-memory cache that only a TMA store reads: every 8 registers of a thread are two
/// adjacent columns of four 8 x 8 blocks of the warp's tile (`target::fragment_row_col`), which
/// is what one `stmatrix.x4` writes. The loop becomes one over groups of 8 registers: the
/// values into an 8-element register array, then one `stmatrix` whose lane `l` addresses row
/// `l % 8` of block `l / 8`. The bounds guard goes: the TMA store clips the box, so what lies
/// outside the tensor is never read. The layout is checked at every lane, register and warp;
/// None when the loop has another shape or the cache another layout.
pub(super) fn stmatrix_store(
    cx: &mut Ctx,
    plan: &PipelinePlan,
    k: &mut Kernel,
    body: &[Stmt],
    reg: &str,
    key: LoopKey,
    width: i64,
) -> Option<Stmt> {
    let (_, store) = final_store(body)?;
    let out = &k.buffers[store.out.buffer];
    if out.memory != MemoryType::Shared
        || !matches!(out.dtype, DType::BF16 | DType::F16)
        || store.vector.is_some()
        || !only_tma_stored(cx, plan, store.out.buffer)
    {
        return None;
    }
    let regs = target::wgmma_accumulators(width);
    if regs % 8 != 0 {
        return None;
    }
    let idx = store.out.index.clone()?;
    let tid = Val::Hw(ParallelType::TIDx);
    let group = cx.fresh_name(&format!("{reg}_x4"));
    // Lane l addresses row l % 8 of block q = l / 8: the element of register
    // 8 g + 4 (q / 2) + 2 (q % 2) of lane 4 (l % 8) of the same warp (column pair 0 of that row).
    let lane = Val::rem(tid.clone(), Val::Int(crate::target::WARP_THREADS));
    let q = Val::div(lane.clone(), Val::Int(8));
    let holder = Val::add(
        Val::mul(
            Val::div(tid.clone(), Val::Int(crate::target::WARP_THREADS)),
            Val::Int(crate::target::WARP_THREADS),
        ),
        Val::mul(Val::rem(lane, Val::Int(8)), Val::Int(4)),
    );
    let holder_reg = Val::add(
        Val::add(
            Val::mul(Val::Int(8), Val::Var(group.clone())),
            Val::mul(Val::Int(4), Val::div(q.clone(), Val::Int(2))),
        ),
        Val::mul(Val::Int(2), Val::rem(q, Val::Int(2))),
    );
    let address = idx
        .subst_hw(ParallelType::TIDx, &holder)
        .subst(reg, &holder_reg);
    // Check: what lane t's values land on, through the addresses stmatrix reads, is where the
    // loop's own index puts them (every warp, lane, block and register; other variables probed).
    // Probes: both indices evaluated at every thread and register of a group at once.
    let reg_var = Val::Var(reg.to_string());
    let group_var = Val::Var(group.clone());
    let threads: Vec<i64> = (0..4 * crate::target::WARP_THREADS).collect();
    let ok = (0..2u64).all(|seed| {
        let own = Probe::new(&idx, &[tid.clone(), reg_var.clone()], seed);
        let read = Probe::new(&address, &[tid.clone(), group_var.clone()], seed);
        (0..regs / 8).all(|g| {
            // Thread t's register 8 g + j is point 8 t + j; the row address of thread t is
            // point t.
            let (ts, rs): (Vec<i64>, Vec<i64>) = threads
                .iter()
                .flat_map(|&t| (0..8).map(move |j| (t, 8 * g + j)))
                .unzip();
            let own = own.at_each(&[&ts, &rs]);
            let read = read.at_each(&[&threads, &vec![g; threads.len()]]);
            (0..4).all(|warp| {
                (0..4).all(|blk| {
                    // Lanes 4 j .. 4 j + 3 read row j of the block at one address.
                    (0..8).all(|row| {
                        let row_addr = read[(warp * target::WARP_THREADS + 8 * blk + row) as usize];
                        row_addr.is_some_and(|a| a % 8 == 0)
                            && (4 * row..4 * row + 4).all(|l| {
                                (0..2).all(|e| {
                                    let t = warp * target::WARP_THREADS + l;
                                    own[(8 * t + 2 * blk + e) as usize]
                                        == row_addr.map(|a| a + 2 * (l % 4) + e)
                                })
                            })
                    })
                })
            })
        })
    });
    if !ok {
        return None;
    }
    let (regs_buf, lane_var, lanes_body) = lanes(cx, k, body, &store, reg, (&group, 8), "x4");
    Some(Stmt::Loop(Loop {
        key,
        var: group,
        extent: Val::Int(regs / 8),
        parallel: ParallelType::Unroll,
        digits: Vec::new(),
        body: vec![
            Stmt::Alloc(regs_buf),
            Stmt::Loop(Loop {
                key,
                var: lane_var,
                extent: Val::Int(8),
                parallel: ParallelType::Unroll,
                digits: Vec::new(),
                body: lanes_body,
            }),
            Stmt::StMatrix {
                dst: Access {
                    buffer: store.out.buffer,
                    index: Some(address),
                },
                src: Access {
                    buffer: regs_buf,
                    index: Some(Val::Int(0)),
                },
            },
        ],
    }))
}

/// Drops the allocations of aliased fragments and reads the accumulators they copied instead.
pub(super) fn unalias(body: &mut Vec<Stmt>, aliases: &HashMap<BufferId, BufferId>) {
    crate::kir::for_each_block_mut(body, &mut |block| {
        block.retain(|s| !matches!(s, Stmt::Alloc(b) if aliases.contains_key(b)));
        for s in block.iter_mut() {
            if let Stmt::Compute(c) = s {
                let mut rename = |a: &mut Access| {
                    if let Some(&to) = aliases.get(&a.buffer) {
                        a.buffer = to;
                    }
                };
                rename(&mut c.out);
                c.value.for_each_read_mut(&mut rename);
            }
        }
    });
}

/// The fragment register of an accumulator element at M = N = 0 of a nest, whose index in the
/// accumulator array is `tile * 64 N + column` (`N` = `width`, the tile's columns): tiles are
/// N / 2 registers per thread apart, and column `c` (a multiple of 8) starts at register
/// `c / 8 * 4` of its tile (`target::fragment_row_col`).
pub(super) fn fragment_base(idx: Option<&Val>, m: &str, n: &str, width: i64) -> Val {
    let base = zero(idx.unwrap_or(&Val::Int(0)), &[m, n]);
    let tile_elems = Val::Int(target::WGMMA_M * width);
    let reg = Val::add(
        Val::mul(
            Val::div(base.clone(), tile_elems.clone()),
            Val::Int(target::wgmma_accumulators(width)),
        ),
        Val::mul(
            Val::div(Val::rem(base, tile_elems), Val::Int(8)),
            Val::Int(4),
        ),
    );
    crate::passes::simplify::simplify(&reg, &HashMap::new())
}

/// Indexes every accumulator access of `s` by register `i` (at its tile's base); records a
/// buffer whose index is not its M x N tile in `bad`.
pub(super) fn fragment_accesses(
    s: &mut Stmt,
    fragments: &HashSet<BufferId>,
    m: &str,
    n: &str,
    i: &Val,
    width: i64,
    bad: &mut Option<BufferId>,
) {
    let mut fix = |a: &mut Access| {
        if !fragments.contains(&a.buffer) {
            return;
        }
        let idx = a.index.clone().unwrap_or(Val::Int(0));
        if stride(&idx, n) != Some(1) || stride(&idx, m) != Some(width) {
            *bad = Some(a.buffer);
        }
        a.index = Some(Val::add(fragment_base(Some(&idx), m, n, width), i.clone()));
    };
    crate::kir::for_each_stmt_mut(std::slice::from_mut(s), &mut |s| {
        if let Stmt::Compute(c) = s {
            fix(&mut c.out);
            c.value.for_each_read_mut(&mut fix);
        }
        Flow::Descend
    });
}

/// Epilogue arrays that can live in their accumulator's registers: `F[i] = f(A[i], ...)` in one
/// unrolled fragment loop that reads the accumulator `A` only at the `i` it writes, after every
/// read of `A[i]` in the iteration, with no other read of `A` in the kernel (the next product
/// starts with `scale-d` off, so it does not read `A` either). `F` is then written into `A` in
/// place and the epilogue needs no second array of N / 2 registers, which ptxas would spill.
/// Returns the arrays to rename, each to its accumulator.
pub(super) fn reusable_accumulators(
    body: &[Stmt],
    k: &Kernel,
    accumulators: &HashSet<BufferId>,
) -> HashMap<BufferId, BufferId> {
    let mut out: HashMap<BufferId, BufferId> = HashMap::new();
    let size = |b: BufferId| match k.buffers[b].size {
        Some(Val::Int(n)) => Some(n),
        _ => None,
    };
    let mut accs: Vec<BufferId> = accumulators.iter().copied().collect();
    crate::id::sort_by_position(&mut accs, |b| b.index());
    for f in k.buffer_ids() {
        let buf = &k.buffers[f];
        if buf.memory != MemoryType::Local
            || buf.dtype != DType::F32
            || accumulators.contains(&f)
            || size(f).is_none()
        {
            continue;
        }
        if let Some(&a) = accs.iter().find(|&&a| {
            size(a) == size(f) && !out.values().any(|&v| v == a) && reusable(body, f, a)
        }) {
            out.insert(f, a);
        }
    }
    out
}

/// The write of `f` that statement `s` is (directly or under a guard), with its index.
fn write_of(s: &Stmt, f: BufferId) -> Option<&Val> {
    match s {
        Stmt::Compute(c) if c.out.buffer == f => c.out.index.as_ref(),
        Stmt::If { then, els, .. } if els.is_empty() => match then.as_slice() {
            [Stmt::Compute(c)] if c.out.buffer == f => c.out.index.as_ref(),
            _ => None,
        },
        _ => None,
    }
}

/// The indices of the reads of `b` and the number of writes of `b` in `body`.
fn uses_of(body: &[Stmt], b: BufferId) -> (Vec<Val>, usize) {
    let mut reads = Vec::new();
    let mut writes = 0;
    crate::kir::for_each_stmt(body, &mut |s| {
        if let Stmt::Compute(c) = s {
            if c.out.buffer == b {
                writes += 1;
            }
            c.value.for_each_read(&mut |a| {
                if a.buffer == b {
                    reads.push(a.index.clone().unwrap_or(Val::Int(0)));
                }
            });
        }
    });
    (reads, writes)
}

fn reusable(body: &[Stmt], f: BufferId, a: BufferId) -> bool {
    // The one unrolled loop that writes `f`, directly in its body.
    let mut loops: Vec<&Loop> = Vec::new();
    crate::kir::for_each_stmt(body, &mut |s| {
        if let Stmt::Loop(l) = s {
            if l.parallel == ParallelType::Unroll && l.body.iter().any(|s| write_of(s, f).is_some())
            {
                loops.push(l);
            }
        }
    });
    let [l] = loops[..] else { return false };
    let (_, all_writes) = uses_of(body, f);
    let (f_reads_in, writes_in) = uses_of(&l.body, f);
    let (a_reads, _) = uses_of(body, a);
    let (a_reads_in, _) = uses_of(&l.body, a);
    let Some(w) = l.body.iter().position(|s| write_of(s, f).is_some()) else {
        return false;
    };
    let index = write_of(&l.body[w], f).cloned().unwrap_or(Val::Int(0));
    let reads_a = |s: &Stmt| !uses_of(std::slice::from_ref(s), a).0.is_empty();
    all_writes == 1
        && writes_in == 1
        && f_reads_in.is_empty()
        && !a_reads_in.is_empty()
        && a_reads.len() == a_reads_in.len()
        && a_reads_in.iter().all(|i| *i == index)
        && index.mentions(&l.var)
        && l.body[w + 1..].iter().all(|s| !reads_a(s))
        && same_block_after(body, a, f)
}

/// Whether `f` is allocated in the block that allocates `a`, after it (so `a` is in scope
/// wherever `f` is).
fn same_block_after(body: &[Stmt], a: BufferId, f: BufferId) -> bool {
    let here = |b: &[Stmt]| {
        let pa = b
            .iter()
            .position(|s| matches!(s, Stmt::Alloc(x) if *x == a));
        let pf = b
            .iter()
            .position(|s| matches!(s, Stmt::Alloc(x) if *x == f));
        matches!((pa, pf), (Some(pa), Some(pf)) if pa < pf)
    };
    let mut found = here(body);
    crate::kir::for_each_stmt(body, &mut |s| {
        for child in s.children() {
            found |= here(child);
        }
    });
    found
}

/// Drops the bounds guard of register arithmetic in a fragment loop's body: a value computed
/// for a position outside the tensors (from whatever its registers hold) is only read by
/// statements that keep their guards (memory reads and writes) or lands in a staged tile's
/// out-of-bounds part, which no TMA store writes; floating-point and integer arithmetic cannot
/// fault on the GPU. Saves a comparison chain per statement per register of the unrolled loop.
pub(super) fn unguard_register_arithmetic(
    k: &Kernel,
    body: &mut [Stmt],
    keep: &dyn Fn(&Compute) -> bool,
) {
    let registers_only = |c: &Compute| {
        let mut local = k.buffers[c.out.buffer].memory == MemoryType::Local;
        c.value.for_each_read(&mut |a| {
            local &= k.buffers[a.buffer].memory == MemoryType::Local;
        });
        local
    };
    for s in body.iter_mut() {
        if let Stmt::If { then, els, .. } = s {
            if let ([Stmt::Compute(c)], true) = (then.as_slice(), els.is_empty()) {
                if registers_only(c) && !keep(c) {
                    *s = Stmt::Compute(c.clone());
                }
            }
        }
    }
}
