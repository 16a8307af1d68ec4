//! Loops over the accumulator fragment: each register's index, the sum's copy of the
//! accumulator read as the accumulator itself, and epilogue stores of adjacent columns paired
//! into vector stores.

#[allow(unused_imports)]
use super::*;

/// A fragment loop (over register `reg`) that ends with a store to global memory: registers
/// `2j` and `2j + 1` hold adjacent columns, so their two results go out as one vector store
/// (half the store instructions and memory transactions of the epilogue) when both are in
/// bounds and the pair is aligned, else one by one. The rest of the body runs per register as
/// before, into a two-element register array. None when the loop has another shape.
pub(super) fn pair_global_store(
    cx: &mut Ctx,
    k: &mut Kernel,
    body: &[Stmt],
    reg: &str,
    key: LoopKey,
    width: i64,
) -> Option<Stmt> {
    let (cond, store) = match body.last()? {
        Stmt::If { cond, then, els } if els.is_empty() => match then.as_slice() {
            [Stmt::Compute(c)] => (cond.clone(), c.clone()),
            _ => return None,
        },
        Stmt::Compute(c) => (Val::True, c.clone()),
        _ => return None,
    };
    let out = &k.buffers[store.out.buffer];
    if out.memory != MemoryType::Global || store.vector.is_some() || width % 4 != 0 {
        return None;
    }
    let idx = store.out.index.clone()?;
    // Register 2j + 1 is the element after register 2j.
    let adjacent = (0..4u64).all(|seed| {
        [0, 2, 6].iter().all(|&r| {
            let at = |x| eval(&idx, reg, x, seed, &[], 1);
            matches!((at(r), at(r + 1)), (Some(a), Some(b)) if b == a + 1)
        })
    });
    if !adjacent {
        return None;
    }
    let dtype = out.dtype;
    let pair_var = cx.fresh_name(&format!("{reg}_pair"));
    let lane = cx.fresh_name(&format!("{reg}_lane"));
    let pair = k.buffers.len();
    k.buffers.push(Buffer {
        name: cx.fresh_name(&format!("{}_pair", k.buffers[store.out.buffer].name)),
        dtype,
        memory: MemoryType::Local,
        tensor: None,
        size: Some(Val::Int(2)),
        smem_offset: None,
        global_shape: Vec::new(),
        is_input: false,
    });
    let at_lane = |l: Val| Val::add(Val::mul(Val::Int(2), Val::Var(pair_var.clone())), l);
    let on = |v: &Val, l: Val| v.subst(reg, &at_lane(l));
    // Each register's value into its lane of the pair.
    let mut lanes_body: Vec<Stmt> = body[..body.len() - 1].to_vec();
    lanes_body.push(Stmt::Compute(Compute {
        out: Access {
            buffer: pair,
            index: Some(Val::Var(lane.clone())),
        },
        ..store.clone()
    }));
    for s in &mut lanes_body {
        s.map_vals(&mut |v| on(v, Val::Var(lane.clone())));
    }
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
    Some(Stmt::Loop(Loop {
        key,
        var: pair_var.clone(),
        extent: Val::Int(target::wgmma_accumulators(width) / 2),
        parallel: ParallelType::Unroll,
        body: vec![
            Stmt::Alloc(pair),
            Stmt::Loop(Loop {
                key,
                var: lane.clone(),
                extent: Val::Int(2),
                parallel: ParallelType::Unroll,
                body: lanes_body,
            }),
            Stmt::If {
                cond: Val::and(
                    Val::and(on(&cond, Val::Int(0)), on(&cond, Val::Int(1))),
                    aligned,
                ),
                then: vec![vector],
                els: scalar,
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
    match s {
        Stmt::Compute(c) => {
            fix(&mut c.out);
            c.value.for_each_read_mut(&mut fix);
        }
        Stmt::Loop(l) => {
            for s in &mut l.body {
                fragment_accesses(s, fragments, m, n, i, width, bad);
            }
        }
        Stmt::If { then, els, .. } => {
            for s in then.iter_mut().chain(els.iter_mut()) {
                fragment_accesses(s, fragments, m, n, i, width, bad);
            }
        }
        _ => {}
    }
}
