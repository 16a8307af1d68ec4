//! `online_softmax(o, overlap=products)`: FlashAttention-3's order of the two products around
//! the softmax inside one warp group, so that the previous tile's `O += P V` runs on the tensor
//! cores while this tile's softmax runs on the CUDA cores.
//!
//! Takes, after [`super::groups::batch`] (each unrolled loop of wgmmas one group), the
//! consumers' loop over the key tiles of each online softmax that asks for it
//! ([`TileLoops`]). Its iteration, inside the consumer warp group's binding or not, must be
//! `head, fence, S = Q K^T, commit, wait 0, softmax, fence, O += P V, commit, wait 0, releases`:
//! P from registers (the RS form), the stages' full waits in `head` and one empty-mbarrier
//! arrive per producer role at the end (a warp-specialized circular buffer: the P V product of
//! tile `j - 1` reads V's stage while tile `j`'s is in use, which a block barrier at the end of
//! the iteration could not express). Elsewhere a located error says what is missing.
//!
//! Guarantees, with `n` the loop's extent and `j` the tile (a `Let` of the loop's variable, so
//! the passes after this one, `mask_tiles` among them, see the tile index they know):
//! - prologue (when `0 < n`, tile 0): S_0 issued and waited for, tile 0's softmax (no
//!   rescale of O: nothing is in it yet, and the first P V runs with `scale-d` off);
//! - loop (`j` from 1 to `n - 1`): S_j issued (commit), then the full waits of barriers only
//!   the P V product reads (for tile `j - 1`), P_{j-1} converted into P's registers and
//!   O += P_{j-1} V_{j-1} issued (commit), `wait_group 1` (S_j is done, the P V product still
//!   runs), the empty arrives of barriers only S reads for tile `j` (K's stage is free), tile
//!   j's softmax statistics (maximum, exponentials, sum; the arrive of a stage they also read,
//!   a mask's per-key ids cached beside K, right after the last statement that reads it),
//!   `wait_group 0`, the other empty
//!   arrives for tile `j - 1` (V's stage, or the joint K/V stage), then O rescaled;
//! - epilogue (when `0 < n`, tile `n - 1`): its conversion, P V product, `wait_group 0` and
//!   late arrives.
//!
//! The f32 probabilities (and P's bf16 fragment) are allocated before the prologue: they carry
//! tile `j - 1`'s P into iteration `j`. P is converted right before its product, while S_j runs
//! on the tensor cores, so the fragment is written just before the group's fence (as in the
//! kernels without the overlap) and the rescale and conversion do not both wait for the
//! drain at the end of the iteration. With one producer role for K and V (one joint stage),
//! a stage is released one iteration later than without the overlap, so the consumer holds two
//! stages at a time: three stages keep a load in flight (K and V on separate producer warps,
//! `warp=1` on V's circular buffer, release K's stage at `wait_group 1` and need two).
//!
//! With `warp_specialized(..., turns=products)` (consumer groups that share every stage take
//! turns issuing their products: FlashAttention-3's ping-pong) this form is what the turns
//! see ([`super::groups::take_product_turns`] runs after this): a turn covers the wgmma groups
//! issued back to back, so the loop's S_j and P_{j-1} V_{j-1} are one turn (the wait before
//! S's fence after K's full wait; V's full wait and P's conversion inside it; the pass right
//! after the P V product's commit, before `wait_group 1`), and the prologue's S_0 and the
//! epilogue's last P V a turn each. Every group runs the same loop (the key tiles are the
//! block's: the groups' binding is inside the loop), so each issues the same turns, and the
//! stage releases are those above: the turns move no arrive.
//!
//! Emits, in place of the loop, the carried `Alloc`s, the prologue (a loop over `{var}_first` of
//! `min(n, 1)` iterations: a scope for its `Let` that `simplify` keeps), the loop over
//! `{var}_pv` (the tile whose P V product it issues) and the epilogue (over `{var}_last`, as
//! the prologue).

use super::*;
use crate::passes::online_softmax::TileLoops;

/// Rewrites the tile loop of every online softmax with `overlap=products`.
pub(super) fn overlap_products(
    cx: &mut Ctx,
    plan: &PipelinePlan,
    tiles: &TileLoops,
    body: &mut Vec<Stmt>,
) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    for (r, &tile) in f.online_softmax.iter().zip(&tiles.0) {
        if !r.overlap {
            continue;
        }
        let o_name = &f.tensors[r.pattern.result].name;
        let err = |what: String| {
            Diagnostic::new(
                format!("online_softmax({o_name}, overlap=products): {what}"),
                r.span,
            )
        };
        let o_expr = f.tensors[r.pattern.product]
            .definition
            .expect("a computed tensor");
        let mut found = 0;
        let mut failure = None;
        crate::kir::rewrite_post(body, &mut |s| match s {
            Stmt::Loop(l) if l.key == tile && has_wgmma(&l.body) && failure.is_none() => {
                match rewrite_loop(cx, plan, o_expr, l.clone()) {
                    Ok(out) => {
                        found += 1;
                        out
                    }
                    Err(why) => {
                        failure = Some(why);
                        vec![Stmt::Loop(l)]
                    }
                }
            }
            s => vec![s],
        });
        if let Some(why) = failure {
            return Err(err(why));
        }
        if found == 0 {
            return Err(err(format!(
                "the loop over `{}` tiles issues no tensor-core products (S = Q K^T and O += P V as wgmma: parallelize their M, N and K axes Mma)",
                cx.fusion.class_extent(r.pattern.axis)
            )));
        }
    }
    Ok(())
}

fn has_wgmma(body: &[Stmt]) -> bool {
    crate::kir::any_stmt(body, &mut |s| matches!(s, Stmt::Wgmma(_)))
}

/// The wgmmas of `stmts`.
fn wgmmas(stmts: &[Stmt]) -> Vec<&Wgmma> {
    let mut out = Vec::new();
    crate::kir::for_each_stmt(stmts, &mut |s| {
        if let Stmt::Wgmma(w) = s {
            out.push(w);
        }
    });
    out
}

/// The shared buffers each producer role's (or pipe's) mbarriers guard: the caches its loads
/// fill.
fn guarded_buffers(cx: &Ctx, plan: &PipelinePlan, bars: crate::kir::MbarId) -> Vec<BufferId> {
    let members: Vec<usize> = plan
        .pipes
        .iter()
        .flat_map(|p| {
            let roles = p.ws.iter().flat_map(|w| &w.roles);
            roles
                .filter(|r| r.full == bars || r.empty == bars)
                .flat_map(|r| r.members.clone())
                .chain(
                    (p.full == Some(bars) || p.empty == Some(bars))
                        .then(|| p.members.clone())
                        .into_iter()
                        .flatten(),
                )
                .collect::<Vec<_>>()
        })
        .collect();
    members
        .iter()
        .filter_map(|&m| cx.layout.tensor_buffer.get(&plan.loads[m].tensor).copied())
        .collect()
}

/// The statements of one tile iteration, sorted by where the overlapped order puts them.
struct Iteration {
    /// A thread binding around the products (the consumer warp group's `threadIdx.y`), its
    /// body emptied: each part is wrapped in a copy.
    binding: Option<Loop>,
    /// Before the products (pointers, accumulators, the full waits S needs).
    head: Vec<Stmt>,
    /// Full waits on barriers only the P V product reads.
    late_waits: Vec<Stmt>,
    /// `fence, S = Q K^T, commit`.
    scores: Vec<Stmt>,
    /// The softmax between the products, without O's rescale and P's conversion.
    stats: Vec<Stmt>,
    /// O's rescale.
    rescale: Vec<Stmt>,
    /// P's conversion into the product's A registers.
    convert: Vec<Stmt>,
    /// The `Alloc`s of P's register fragment and of the f32 probabilities it converts, which
    /// carry tile `j - 1`'s P into iteration `j`.
    carried: Vec<Stmt>,
    /// `fence, O += P V, commit`.
    product: Vec<Stmt>,
    /// Empty arrives of barriers only S reads.
    early_arrives: Vec<Stmt>,
    /// Empty arrives of barriers whose stages S and the softmax statistics read: placed in
    /// `stats` at `released_at`, after the last statement that reads one of their stages.
    after_reads_arrives: Vec<Stmt>,
    released_at: usize,
    /// The other empty arrives.
    late_arrives: Vec<Stmt>,
    /// The stages only the P V product reads (V's).
    product_only: Vec<BufferId>,
}

/// The overlapped form of the tile loop `l` (the module doc), or why it cannot be made.
fn rewrite_loop(
    cx: &mut Ctx,
    plan: &PipelinePlan,
    o_expr: ExprId,
    l: Loop,
) -> Result<Vec<Stmt>, String> {
    let it = split_iteration(cx, plan, o_expr, &l)?;
    let var = l.var.clone();
    let n = l.extent.clone();
    let tile = |v: Val| Stmt::Let {
        var: var.clone(),
        value: v,
        broadcast: false,
    };
    let wrap = |stmts: Vec<Stmt>| -> Vec<Stmt> {
        match &it.binding {
            Some(b) => {
                let mut b = b.clone();
                b.body = stmts;
                vec![Stmt::Loop(b)]
            }
            None => stmts,
        }
    };
    let pv_var = cx.fresh_name(&format!("{var}_pv"));
    // The peeled tiles run in loops of one iteration (none when the loop has none): a scope
    // for their `Let` that `simplify` keeps when the extent is a constant.
    let once = |name: &str, body: Vec<Stmt>| {
        Stmt::Loop(Loop {
            key: l.key,
            var: name.to_string(),
            extent: Val::min(n.clone(), Val::Int(1)),
            parallel: l.parallel,
            body,
            digits: Vec::new(),
        })
    };
    let (first_var, last_var) = (
        cx.fresh_name(&format!("{var}_first")),
        cx.fresh_name(&format!("{var}_last")),
    );
    let at_previous = |stmts: &[Stmt]| -> Vec<Stmt> {
        stmts
            .iter()
            .map(|s| {
                let mut s = s.clone();
                s.map_vals(&mut |v| v.subst(&var, &Val::Var(pv_var.clone())));
                s
            })
            .collect()
    };
    // The pointers and accumulators the product reads, for the epilogue.
    let product_reads: Vec<BufferId> = wgmmas(&it.product)
        .iter()
        .flat_map(|w| {
            [w.a.tile.buffer, w.b.tile.buffer, w.acc.buffer]
                .into_iter()
                .chain(w.accumulate.as_ref().map(|a| a.buffer))
        })
        .collect();
    let product_allocs: Vec<Stmt> = it
        .head
        .iter()
        .filter(|s| matches!(s, Stmt::Alloc(b) if product_reads.contains(b)))
        .cloned()
        .collect();
    let cat = |parts: &[&[Stmt]]| -> Vec<Stmt> { parts.iter().flat_map(|p| p.to_vec()).collect() };

    // The prologue declares only the stages S reads (V's pointer would be unused).
    let s_head: Vec<Stmt> = it
        .head
        .iter()
        .filter(|s| !matches!(s, Stmt::Alloc(b) if it.product_only.contains(b)))
        .cloned()
        .collect();
    let prologue = once(
        &first_var,
        cat(&[
            &[tile(Val::Int(0))],
            &wrap(cat(&[
                &s_head,
                &it.scores,
                &[Stmt::WgmmaWait(0)],
                &it.early_arrives,
                &it.stats[..it.released_at],
                &it.after_reads_arrives,
                &it.stats[it.released_at..],
            ])),
        ]),
    );
    let main = Stmt::Loop(Loop {
        key: l.key,
        var: pv_var.clone(),
        extent: Val::sub(n.clone(), Val::Int(1)),
        parallel: l.parallel,
        body: cat(&[
            &[tile(Val::add(Val::Var(pv_var.clone()), Val::Int(1)))],
            &wrap(cat(&[
                &it.head,
                &it.scores,
                &at_previous(&it.late_waits),
                &it.convert,
                &at_previous(&it.product),
                &[Stmt::WgmmaWait(1)],
                &it.early_arrives,
                &it.stats[..it.released_at],
                &it.after_reads_arrives,
                &it.stats[it.released_at..],
                &[Stmt::WgmmaWait(0)],
                &at_previous(&it.late_arrives),
                &it.rescale,
            ])),
        ]),
        digits: l.digits.clone(),
    });
    let epilogue = once(
        &last_var,
        cat(&[
            &[tile(Val::sub(n.clone(), Val::Int(1)))],
            &wrap(cat(&[
                &product_allocs,
                &it.late_waits,
                &it.convert,
                &it.product,
                &[Stmt::WgmmaWait(0)],
                &it.late_arrives,
            ])),
        ]),
    );
    let mut out = it.carried;
    out.extend([prologue, main, epilogue]);
    Ok(out)
}

/// Sorts the statements of `l`'s iteration ([`Iteration`]), or says which part is missing.
fn split_iteration(
    cx: &Ctx,
    plan: &PipelinePlan,
    o_expr: ExprId,
    l: &Loop,
) -> Result<Iteration, String> {
    if !l.digits.is_empty() || l.parallel.is_hw() {
        return Err("the loop over key tiles is not a plain serial loop".into());
    }
    let (block, binding) = one_block(l);
    let find = |s: &Stmt, from: usize, block: &[Stmt]| {
        block[from..].iter().position(|x| x == s).map(|i| i + from)
    };
    let shape = "its iteration is not `fence, S = Q K^T, commit, wait, softmax, fence, O += P V, commit, wait` on tensor cores";
    let f1 = find(&Stmt::WgmmaFence, 0, &block).ok_or(shape)?;
    let c1 = find(&Stmt::WgmmaCommit, f1, &block).ok_or(shape)?;
    let f2 = find(&Stmt::WgmmaFence, c1, &block).ok_or(shape)?;
    let c2 = find(&Stmt::WgmmaCommit, f2, &block).ok_or(shape)?;
    if block.get(c1 + 1) != Some(&Stmt::WgmmaWait(0))
        || block.get(c2 + 1) != Some(&Stmt::WgmmaWait(0))
        || find(&Stmt::WgmmaFence, c2, &block).is_some()
        || has_wgmma(&block[..f1])
        || has_wgmma(&block[c1 + 2..f2])
    {
        return Err(shape.into());
    }
    let scores = block[f1..=c1].to_vec();
    let product = block[f2..=c2].to_vec();
    let s_wgmmas = wgmmas(&scores);
    let pv_wgmmas = wgmmas(&product);
    let Some(p_buf) = pv_wgmmas
        .first()
        .filter(|w| w.a.registers)
        .map(|w| w.a.tile.buffer)
    else {
        return Err(
            "the second product does not take P from registers (the RS form of wgmma)".into(),
        );
    };
    if s_wgmmas.iter().any(|w| w.a.registers) {
        return Err("the scores' product takes an operand from registers".into());
    }
    // Which stages each product reads.
    let s_reads: Vec<BufferId> = s_wgmmas
        .iter()
        .flat_map(|w| [w.a.tile.buffer, w.b.tile.buffer])
        .collect();
    let pv_reads: Vec<BufferId> = pv_wgmmas.iter().map(|w| w.b.tile.buffer).collect();
    let only_product = |bars| {
        let guarded = guarded_buffers(cx, plan, bars);
        !guarded.is_empty()
            && guarded.iter().all(|b| !s_reads.contains(b))
            && guarded.iter().any(|b| pv_reads.contains(b))
    };
    let only_scores = |bars| {
        let guarded = guarded_buffers(cx, plan, bars);
        !guarded.is_empty() && guarded.iter().all(|b| !pv_reads.contains(b))
    };
    let (mut head, mut late_waits) = (Vec::new(), Vec::new());
    for s in &block[..f1] {
        match s {
            Stmt::MbarWait { bars, .. } if only_product(*bars) => late_waits.push(s.clone()),
            _ => head.push(s.clone()),
        }
    }
    let no_empty_barriers = "the value tiles' stages are not released by empty mbarriers: circular-buffer k's and v's caches with warp_specialized(...), so the P V product of tile j - 1 can read V's stage while tile j's S = Q K^T runs";
    let tail = &block[c2 + 2..];
    if !tail.iter().any(|s| matches!(s, Stmt::MbarArrive { .. })) {
        return Err(no_empty_barriers.into());
    }
    let (mut early_arrives, mut late_arrives) = (Vec::new(), Vec::new());
    for s in tail {
        match s {
            Stmt::MbarArrive { bars, .. } if only_scores(*bars) => early_arrives.push(s.clone()),
            Stmt::MbarArrive { .. } => late_arrives.push(s.clone()),
            _ => {
                return Err(
                    "its iteration does more after the P V product than release its stages".into(),
                )
            }
        }
    }
    if late_arrives.is_empty() {
        return Err(no_empty_barriers.into());
    }
    let Between {
        stats,
        rescale,
        convert,
        carried,
    } = between(&block[c1 + 2..f2], o_expr, p_buf)?;
    // A stage the softmax statistics also read (a document mask's ids of the key tile, cached
    // beside K) is released after the last statement reading it, not when S is done: the
    // producer would refill it under the reads.
    let reads_stage = |stmts: &[Stmt], bars| {
        guarded_buffers(cx, plan, bars)
            .iter()
            .any(|&b| crate::passes::tma::warp_specialize::reads_buffer(stmts, b))
    };
    let (after_reads_arrives, early_arrives): (Vec<Stmt>, Vec<Stmt>) = early_arrives
        .into_iter()
        .partition(|s| matches!(s, Stmt::MbarArrive { bars, .. } if reads_stage(&stats, *bars)));
    let released_at = stats
        .iter()
        .rposition(|s| {
            after_reads_arrives.iter().any(|a| {
                matches!(a, Stmt::MbarArrive { bars, .. } if reads_stage(std::slice::from_ref(s), *bars))
            })
        })
        .map_or(0, |i| i + 1);
    Ok(Iteration {
        binding,
        head,
        late_waits,
        scores,
        stats,
        rescale,
        convert,
        carried,
        product,
        early_arrives,
        after_reads_arrives,
        released_at,
        late_arrives,
        product_only: pv_reads
            .iter()
            .filter(|b| !s_reads.contains(b))
            .copied()
            .collect(),
    })
}

/// The block holding both products of a key tile's iteration: the loop's body, or the
/// consumer group's binding in it (its statements before and after the binding move into it:
/// a binding runs once per thread, so that is the same program), with that binding.
fn one_block(l: &Loop) -> (Vec<Stmt>, Option<Loop>) {
    let mut block = l.body.clone();
    let mut binding = None;
    let bound: Vec<usize> = block
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, Stmt::Loop(b) if b.parallel.is_hw() && has_wgmma(&b.body)))
        .map(|(i, _)| i)
        .collect();
    if let [at] = bound[..] {
        let Stmt::Loop(mut b) = block[at].clone() else {
            unreachable!("matched above")
        };
        let inner = std::mem::take(&mut b.body);
        let after = block.split_off(at + 1);
        block.pop();
        block.extend(inner);
        block.extend(after);
        binding = Some(b);
    }
    (block, binding)
}

/// The statements between the two products, sorted by what they do.
struct Between {
    /// The softmax's statistics (overlapped with the P V product in flight).
    stats: Vec<Stmt>,
    /// O's rescale.
    rescale: Vec<Stmt>,
    /// P's conversion to the product's operand type.
    convert: Vec<Stmt>,
    /// P's allocation and the f32 probabilities the conversion reads: they live from one
    /// iteration into the next.
    carried: Vec<Stmt>,
}

/// Sorts `between` (the statements between the scores' product and the P V product) into
/// [`Between`]'s parts; `p_buf` is P's register buffer.
fn between(between: &[Stmt], o_expr: ExprId, p_buf: BufferId) -> Result<Between, String> {
    let (mut stats, mut rescale, mut convert, mut p_alloc) =
        (Vec::new(), Vec::new(), Vec::new(), None);
    let mut convert_reads = Vec::new();
    for s in between {
        let rescales_o = crate::kir::any_stmt(
            std::slice::from_ref(s),
            &mut |x| matches!(x, Stmt::Compute(c) if c.expr == o_expr && c.role == ComputeRole::OnlineRescale),
        );
        let writes_p = crate::kir::any_stmt(
            std::slice::from_ref(s),
            &mut |x| matches!(x, Stmt::Compute(c) if c.out.buffer == p_buf),
        );
        match s {
            Stmt::Alloc(b) if *b == p_buf => p_alloc = Some(s.clone()),
            _ if rescales_o => rescale.push(s.clone()),
            _ if writes_p => {
                crate::kir::for_each_stmt(std::slice::from_ref(s), &mut |x| {
                    if let Stmt::Compute(c) = x {
                        c.value.for_each_read(&mut |a| convert_reads.push(a.buffer));
                    }
                });
                convert.push(s.clone())
            }
            _ => stats.push(s.clone()),
        }
    }
    let p_alloc = p_alloc.ok_or("P's registers are not allocated in the iteration")?;
    // The f32 probabilities the conversion reads live from one iteration into the next.
    let mut carried = vec![p_alloc];
    stats.retain(|s| match s {
        Stmt::Alloc(b) if convert_reads.contains(b) => {
            carried.push(s.clone());
            false
        }
        _ => true,
    });
    if rescale.is_empty() || convert.is_empty() {
        return Err("O's rescale or P's conversion to the product's operand type is not between the two products".into());
    }
    Ok(Between {
        stats,
        rescale,
        convert,
        carried,
    })
}
