//! Pass `online_softmax`: the running statistics of each online softmax
//! ([`crate::fusion::Fusion::online_softmax`], written `online_softmax(o)`).
//!
//! Requires: `loop_nest`, which placed the softmax's tensors inside the loop over `T` tiles
//! ([`tile_loops`]: the product's first loop over `T`, serial, with the tile inside it), and
//! `reduction`, which gave the row maximum `m`, the row sum `l` and the product `o` register
//! accumulators initialised before that loop. In the loop, each reduction's update loop over
//! the tile runs in program order: `m`'s, then the exponentials, `l`'s and `o`'s.
//!
//! Guarantees, per iteration of the tile loop (docs/attention.md, section 2; when the update
//! is inside a thread binding of the tile loop, a consumer warp group's `threadIdx.y`, the row
//! statements are inside it too, around the update):
//! - before `m`'s update loop, `m_prev = m_acc` (the maximum of the earlier tiles);
//! - after it, `m = m_acc`, or 0 while `m_acc` is `-inf` (every key so far masked: `-inf - -inf`
//!   would be NaN), the value the exponentials subtract; then `m_scale = exp(m_prev - m)` and
//!   `l_acc *= m_scale`, `o_acc *= m_scale`;
//! - an `exp` softmax is computed in base 2, as FlashAttention does: per row `m_neg_log2 =
//!   -m log2(e)` once, then per element `e = exp2(fma(x, log2(e), m_neg_log2))` (in PTX one
//!   `fma.rn.f32` and one `ex2.approx.ftz.f32`: in SASS an FFMA and the MUFU.EX2, where the
//!   subtraction and `expf` took 8 on the online_wgmma kernels and CUDA's `exp2f` adds a
//!   compare and two multiplies for subnormal results) and `m_scale = exp2(fma(m_prev, log2(e), m_neg_log2))`,
//!   both `exp2_ftz` in f32 (`row_math::shifted_exp2`: each at most 1, summed or rescaled next
//!   to the maximum's 1, so a result below 2^-126 flushed to 0 is below the sum's rounding); the
//!   views of `m` that the subtraction read read `m_neg_log2` instead. Within tolerance: the
//!   argument `x log2(e) - m log2(e)` is off by the rounding of `m log2(e)` (2^-24 of `|m|
//!   log2(e)`) and of the FFMA, a relative error of about 2^-24 |m| in the exponential, and
//!   `ex2.approx` is within 2 ulp; the exponentials are rounded to bf16 (2^-9) or summed in
//!   f32 next to `l >= 1` (the row's maximum gives `exp2(0) = 1`), so neither shows until
//!   `|m|` is about 2^15. `-inf` scores still give 0 and `m_prev = -inf` a factor of 0. A
//!   softmax written with `exp2` keeps `exp2(s - m)` and `exp2(m_prev - m)`;
//! - a `tanh` in f32 whose value reaches the scores only through sums, differences, products,
//!   divisions of it and copies (a softcap, `cap * tanh(s / cap)`) is `tanh_abs`
//!   ([`absolute_tanhs`]): within about 2^-21 of tanh in absolute terms, one `ex2.approx` and one
//!   `rcp.approx` where `tanhf` evaluates two ranges (the softcap kernel's loop: 4,096 SASS
//!   instructions -> 3,448). The scores' error is then about `|F| 2^-21`, `F` the product of the
//!   factors on the way, while the term `F tanh(.)`, at most `|F|`, is itself rounded to
//!   `|F| 2^-24` in f32: a few ulp of the term's scale, whatever the cap;
//! - the division `p = e / l` inside the loop becomes `p = e`, and `o`'s write after the loop
//!   multiplies by the final `1 / l_acc` (`o_acc * reciprocal(l_acc)`: within 1.5 ulp of the
//!   division while `l_acc` is normal, `row_math`'s argument, and `l_acc >= 1` holds the row
//!   maximum's 1; a row masked throughout has `l_acc = 0` and `o_acc = 0`, NaN either way).
//!   NVVM computes the reciprocal once per row (the fragment loop is unrolled and the same
//!   `1.0f / l_acc[r]` merged; a serial loop's is invariant and hoisted), where the IEEE
//!   division was a `MUFU.RCP`, a few FFMAs and a call to a slow path per element (64 per
//!   thread at D = 128: auto/attention.hf's kernel 2,480 -> 1,600 SASS instructions, 64 -> 2
//!   such calls; 3,312 -> 1,568 at D = 256); `l` and the views of it the division read keep no
//!   buffer;
//! - tensors without `T` that read the final `m` and `l` after the loop (the log-sum-exp
//!   `m + log(l)`, FlashAttention's second output) read `m_acc` (unguarded: `-inf` for a row
//!   masked throughout, as the plain form's maximum) and `l_acc`.
//!
//! Out-of-range keys of a ragged last tile are the `predicate` pass's bounds: their updates of
//! `m`, `l` and `o` are skipped, so they never raise `m` and add nothing.
//! Emits: two register scalars per softmax (`{m}_prev`, `{m}_scale`), a third for an `exp`
//! softmax (`{m}_neg_log2`), each an array over the accumulator's rows when it has any; the
//! computes of `m_prev`, `m_neg_log2`, `m_scale` and the rescales carry `m`'s, `l`'s and `o`'s
//! expressions with the role [`ComputeRole::OnlineRescale`], the guarded `m` is `m`'s
//! `ReductionWrite`, now in the loop.

use super::context::{Change, Ctx, LoopKey};
use super::reduction::Accumulators;
use super::row_math::{log2_fma, neg_log2, shifted_exp2};
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::fusion::online_softmax::Exponential;
use crate::fusion::{
    BinaryOp, ExprId, IterKind, OnlineRewrite, Operand, ParallelType, TensorId, TernaryOp, UnaryOp,
};
use crate::kir::{Access, BufferId, Compute, ComputeRole, Data, Flow, Kernel, Stmt};
use rustc_hash::{FxHashMap, FxHashSet};

/// The loop over `T` tiles of each online softmax, in [`crate::fusion::Fusion::online_softmax`]'s
/// order ([`tile_loops`]): made by `loop_nest`, read by this pass.
#[derive(Clone, Debug, Default)]
pub struct TileLoops(pub Vec<LoopKey>);

/// The loop over `T` tiles of each online softmax, in [`crate::fusion::Fusion::online_softmax`]'s
/// order: the product's first loop axis over `T`, which must be serial and have the tile (a later
/// loop axis over `T`) inside it.
pub fn tile_loops(cx: &mut Ctx) -> Result<TileLoops, Diagnostic> {
    let f = cx.fusion;
    let mut out = Vec::new();
    for r in &f.online_softmax {
        let o = &f.tensors[r.pattern.product];
        // The statement names the result (the product, or its division in the unnormalised
        // form).
        let err = |msg: String| {
            Err(Diagnostic::new(
                format!(
                    "online_softmax({}): {msg}",
                    f.tensors[r.pattern.result].name
                ),
                r.span,
            ))
        };
        if let Err(msg) = check_lowerable(cx, r) {
            return err(msg);
        }
        if r.overlap && !f.uses_tensor_cores() {
            return err(format!(
                "overlap=products overlaps the softmax with the P V product on tensor cores, and `{}` has no tensor-core tile (parallelize its M, N and K axes Mma)",
                o.name
            ));
        }
        let mut over_t = Vec::new();
        for (p, &id) in o.loop_domain.iter().enumerate() {
            let key = cx.key(id);
            if cx.key_classes(key).contains(&r.pattern.axis) {
                over_t.push(p);
            }
        }
        let t_name = axis_name(cx, r);
        let [outer, .., _tile] = over_t[..] else {
            return err(format!(
                "`{}` sums over `{t_name}` in one loop; split it into the serial loop over tiles and the tile (`{}.split({}, 64)`)",
                o.name,
                o.name,
                over_t.first().copied().unwrap_or(0)
            ));
        };
        let id = o.loop_domain[outer];
        if f.ids[id].parallel != ParallelType::Serial {
            return err(format!(
                "the loop over `{t_name}` tiles (axis {outer} of `{}`) is bound to {}; the online softmax runs it serially",
                o.name, f.ids[id].parallel
            ));
        }
        if f.ids[id].kind != IterKind::Reduction {
            return err(format!(
                "axis {outer} of `{}` is not its sum over `{t_name}`",
                o.name
            ));
        }
        out.push(cx.key(id));
    }
    Ok(TileLoops(out))
}

/// What the rule accepts but this lowering does not do yet, each said as such: the unnormalised
/// form, readers of the final statistics (the log-sum-exp), and reductions over `T` spread
/// over threads (a tile's statistics would need block reductions per tile).
fn check_lowerable(cx: &Ctx, r: &OnlineRewrite) -> Result<(), String> {
    let f = cx.fusion;
    let p = &r.pattern;
    let name = |t: TensorId| &f.tensors[t].name;
    if p.probs.is_none() {
        return Err(format!(
            "the unnormalised form (`{}` divides the product by `{}` after it) is not lowered yet; divide before the product: p = e / broadcast({}, axis=T), {} = sum(broadcast(p) * broadcast(v), axis=T)",
            name(p.result),
            name(p.sum),
            name(p.sum),
            name(p.result)
        ));
    }
    for t in [p.max, p.sum, p.product] {
        let tensor = &f.tensors[t];
        if let Some(&id) = tensor
            .loop_domain
            .iter()
            .find(|&&id| f.ids[id].kind == IterKind::Reduction && f.ids[id].parallel.is_hw())
        {
            return Err(format!(
                "`{}` reduces over `{}` along {}; the online softmax's statistics are per thread (the tile's keys serial in each thread)",
                tensor.name,
                cx.fusion.class_extent(p.axis),
                f.ids[id].parallel
            ));
        }
    }
    Ok(())
}

/// The summed axis `T` as the program writes its extent.
fn axis_name(cx: &Ctx, r: &OnlineRewrite) -> String {
    cx.fusion.class_extent(r.pattern.axis).to_string()
}

/// The tensors computed inside each softmax's tile loop (`tiles`): the scores, the maximum, the
/// exponentials, the sum, the probabilities and the product.
pub fn tile_of_tensors(cx: &Ctx, tiles: &TileLoops) -> FxHashMap<TensorId, LoopKey> {
    let f = cx.fusion;
    let mut out = FxHashMap::default();
    for (r, &tile) in f.online_softmax.iter().zip(&tiles.0) {
        let p = &r.pattern;
        for t in [p.scores, p.max, p.exp, p.sum, p.product]
            .into_iter()
            .chain(p.probs)
        {
            out.insert(t, tile);
        }
    }
    out
}

/// Whether the schedule asked for an online softmax (the pass is skipped otherwise).
pub fn used(cx: &Ctx) -> bool {
    !cx.fusion.online_softmax.is_empty()
}

/// Whether the grid is not persistent (whose query tile is no loop variable) and some online
/// softmax's scores carry a mask `masked` recognises (given the fusion, the scores and the key
/// axis): the `applies` of the passes that classify a masked softmax's key tiles.
pub fn some_masked(
    cx: &Ctx,
    masked: impl Fn(&crate::fusion::Fusion, crate::fusion::TensorId, crate::fusion::IterId) -> bool,
) -> bool {
    let f = cx.fusion;
    f.persistent.is_none()
        && f.online_softmax
            .iter()
            .any(|r| masked(f, r.pattern.scores, r.pattern.axis))
}

/// Runs the pass over the tile loops `loop_nest` made and the accumulators `reduction` made.
pub fn run(
    cx: &mut Ctx,
    tiles: &TileLoops,
    accumulators: &Accumulators,
    k: &mut Kernel,
) -> Result<Change, Diagnostic> {
    let f = cx.fusion;
    for (r, &tile) in f.online_softmax.iter().zip(&tiles.0) {
        rewrite(cx, accumulators, k, r, tile)?;
    }
    Ok(Change::Changed)
}

fn read(buffer: BufferId) -> Data {
    Data::Read(Access {
        buffer,
        index: None,
    })
}

fn rescale(expr: ExprId, out: BufferId, value: Data) -> Stmt {
    Stmt::Compute(Compute {
        expr,
        out: Access {
            buffer: out,
            index: None,
        },
        value,
        role: ComputeRole::OnlineRescale,
        vector: None,
    })
}

/// One online softmax's rewrite (the module doc's guarantees).
fn rewrite(
    cx: &mut Ctx,
    accumulators: &Accumulators,
    k: &mut Kernel,
    r: &OnlineRewrite,
    tile: LoopKey,
) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let p = &r.pattern;
    let internal = |what: &str| {
        Diagnostic::new(
            format!(
                "internal: online_softmax({}): {what}",
                f.tensors[p.product].name
            ),
            r.span,
        )
    };
    let def = |t: TensorId| f.tensors[t].definition.expect("a computed tensor");
    let (m_expr, l_expr, o_expr) = (def(p.max), def(p.sum), def(p.product));
    let (Some(m_acc), Some(l_acc), Some(o_acc)) = (
        accumulators.of_tensor(p.max),
        accumulators.of_tensor(p.sum),
        accumulators.of_tensor(p.product),
    ) else {
        return Err(internal("a reduction has no accumulator"));
    };
    let probs = p
        .probs
        .ok_or_else(|| internal("the unnormalised form reached the rewrite"))?;
    let m_buf = cx.layout.tensor_buffer[&p.max];
    let o_dtype = k.buffers[o_acc].dtype;
    if !divide_final_write(k, [m_expr, l_expr], o_expr, l_acc, o_dtype) {
        return Err(internal("the product's write was not found"));
    }
    let rows = row_statements(cx, k, p, [m_expr, l_expr, o_expr], [m_acc, l_acc, o_acc]);
    // The division by `l` in the loop goes (o's write divides instead), and with it the views
    // of `l` it read.
    let p_expr = def(probs);
    let denominator_views = match f.exprs[p_expr].inputs[..] {
        [_, Operand::Tensor(den)] => view_exprs(f, den, p.sum)
            .ok_or_else(|| internal("the row sum is read through a non-view"))?,
        _ => return Err(internal("the probabilities are not a division of tensors")),
    };
    // The base-2 form's statements in the tile: the exponential, the subtraction it reads and
    // the views of `m` the subtraction reads (`e_broadcast = m`), which read `-m log2(e)`.
    let exp_expr = def(p.exp);
    let diff = match f.exprs[exp_expr].inputs[..] {
        [Operand::Tensor(d)] => d,
        _ => return Err(internal("the exponential does not read one tensor")),
    };
    let diff_expr = def(diff);
    let m_views = match f.exprs[diff_expr].inputs[..] {
        [_, Operand::Tensor(m_view)] => view_exprs(f, m_view, p.max)
            .ok_or_else(|| internal("the row maximum is read through a non-view"))?,
        _ => return Err(internal("the exponential's argument is not a subtraction")),
    };
    let edits = TileEdits {
        m_expr,
        m_buf,
        m_neg_log2: rows.m_neg_log2,
        denominator_views: &denominator_views,
        exp_expr,
        diff_expr,
        m_views: &m_views,
        p_expr,
    };
    let done = edits.apply(k, tile, rows.before, rows.after);
    if !done.placed || !done.divided {
        return Err(internal(
            "the maximum's update or the division by the sum is not in the tile loop",
        ));
    }
    if !done.exp_folded || !done.sub_folded {
        return Err(internal(
            "the exponential of the scores minus their maximum is not in the tile loop",
        ));
    }
    read_final_statistics(cx, k, p, tile, m_buf, [m_acc, l_acc]);
    let tanhs = absolute_tanhs(f, p.scores);
    if !tanhs.is_empty() {
        crate::kir::for_each_stmt_mut(&mut k.body, &mut |s| {
            if let Stmt::Compute(c) = s {
                if let (true, Data::Unary(op @ UnaryOp::Tanh, DType::F32, _)) =
                    (tanhs.contains(&c.expr), &mut c.value)
                {
                    *op = UnaryOp::TanhAbs;
                }
            }
            Flow::Descend
        });
    }
    // `l` and its views exist only as the accumulator now: nothing writes their buffers, so
    // `allocation` does not place them.
    for e in denominator_views.iter().chain([&l_expr]) {
        cx.layout.tensor_buffer.remove(&f.exprs[*e].output);
    }
    Ok(())
}

/// The product's write after the tile loop multiplies by the reciprocal of the sum's
/// accumulator (the module doc: one reciprocal per row); the statistics' own writes there go (`m` is written in the loop, what the exponentials subtract; `l` is read
/// from its accumulator by `o`'s write). False when the product's write is not found.
fn divide_final_write(
    k: &mut Kernel,
    stats: [ExprId; 2],
    o_expr: ExprId,
    l_acc: BufferId,
    o_dtype: crate::dtype::DType,
) -> bool {
    let mut o_written = false;
    crate::kir::rewrite_post(&mut k.body, &mut |s| match s {
        Stmt::Compute(c) if c.role == ComputeRole::ReductionWrite && stats.contains(&c.expr) => {
            Vec::new()
        }
        Stmt::Compute(mut c) if c.role == ComputeRole::ReductionWrite && c.expr == o_expr => {
            c.value = Data::Binary(
                BinaryOp::Mul,
                o_dtype,
                Box::new(c.value),
                Box::new(Data::Unary(
                    UnaryOp::Reciprocal,
                    o_dtype,
                    Box::new(read(l_acc)),
                )),
            );
            o_written = true;
            vec![Stmt::Compute(c)]
        }
        s => vec![s],
    });
    o_written
}

/// The per-row statements around the maximum's update in the tile loop.
struct RowStatements {
    /// Before the update: `m_prev = m`.
    before: Vec<Stmt>,
    /// After it: the guarded `m`, `-m log2(e)`, the rescale factor, `l *= factor`, `o *= factor`.
    after: Vec<Stmt>,
    /// The register holding `-m log2(e)` for an `exp` softmax (computed in base 2).
    m_neg_log2: Option<BufferId>,
}

/// The running statistics' statements of one online softmax (`exprs` and `accs`: the maximum's,
/// the sum's and the product's).
fn row_statements(
    cx: &mut Ctx,
    k: &mut Kernel,
    p: &crate::fusion::online_softmax::OnlineSoftmax,
    exprs: [ExprId; 3],
    accs: [BufferId; 3],
) -> RowStatements {
    let f = cx.fusion;
    let [m_expr, l_expr, o_expr] = exprs;
    let [m_acc, l_acc, o_acc] = accs;
    let m_buf = cx.layout.tensor_buffer[&p.max];
    let dtype = k.buffers[m_acc].dtype;
    let o_dtype = k.buffers[o_acc].dtype;
    let m_name = &f.tensors[p.max].name;
    // The statistics are per row: a scalar of the thread's row on CUDA cores, one per row of
    // the accumulator's axes when it has any (the M rows of a tensor-core tile: `mma` gives
    // each thread its rows of the fragment).
    let row_ids = cx.layout.alloc_ids.get(&m_acc).cloned().unwrap_or_default();
    let m_prev = cx.new_register(k, &format!("{m_name}_prev"), dtype, row_ids.clone());
    let alpha = cx.new_register(k, &format!("{m_name}_scale"), dtype, row_ids.clone());
    // An `exp` softmax is computed in base 2 (the module doc): `-m log2(e)` once per row.
    let m_neg_log2 = (p.exponential == Exponential::Exp)
        .then(|| cx.new_register(k, &format!("{m_name}_neg_log2"), dtype, row_ids.clone()));
    // The guard: 0 while every key so far is masked.
    let guarded = Data::Ternary(
        TernaryOp::Where,
        dtype,
        Box::new([
            Data::Binary(
                BinaryOp::Eq,
                dtype,
                Box::new(read(m_acc)),
                Box::new(Data::Literal(f64::NEG_INFINITY, dtype)),
            ),
            Data::Literal(0.0, dtype),
            read(m_acc),
        ]),
    );
    let mut before = vec![Stmt::Alloc(m_prev), Stmt::Alloc(alpha)];
    before.extend(m_neg_log2.map(Stmt::Alloc));
    before.extend(super::reduction::accumulator_loops(
        cx,
        &row_ids,
        vec![rescale(m_expr, m_prev, read(m_acc))],
    ));
    // The rescale factor exp(m_prev - m): exp2(m_prev log2(e) - m log2(e)) in base 2, or
    // exp2(m_prev - m) for a softmax written with exp2.
    let factor = match m_neg_log2 {
        Some(neg) => Data::Unary(
            shifted_exp2(dtype),
            dtype,
            Box::new(log2_fma(read(m_prev), read(neg), dtype)),
        ),
        None => Data::Unary(
            UnaryOp::Exp2,
            dtype,
            Box::new(Data::Binary(
                BinaryOp::Sub,
                dtype,
                Box::new(read(m_prev)),
                Box::new(read(m_buf)),
            )),
        ),
    };
    let mut per_row = vec![Stmt::Compute(Compute {
        expr: m_expr,
        out: Access {
            buffer: m_buf,
            index: None,
        },
        value: guarded,
        role: ComputeRole::ReductionWrite,
        vector: None,
    })];
    if let Some(neg) = m_neg_log2 {
        per_row.push(rescale(m_expr, neg, neg_log2(read(m_buf), dtype)));
    }
    per_row.extend([
        rescale(m_expr, alpha, factor),
        rescale(
            l_expr,
            l_acc,
            Data::Binary(
                BinaryOp::Mul,
                dtype,
                Box::new(read(l_acc)),
                Box::new(read(alpha)),
            ),
        ),
    ]);
    let mut after = super::reduction::accumulator_loops(cx, &row_ids, per_row);
    let o_ids = cx.layout.alloc_ids.get(&o_acc).cloned().unwrap_or_default();
    after.extend(super::reduction::accumulator_loops(
        cx,
        &o_ids,
        vec![rescale(
            o_expr,
            o_acc,
            Data::Binary(
                BinaryOp::Mul,
                o_dtype,
                Box::new(read(o_acc)),
                Box::new(read(alpha)),
            ),
        )],
    ));
    RowStatements {
        before,
        after,
        m_neg_log2,
    }
}

/// What the tile loop's statements become: the row statements around the maximum's update, the
/// division by `l` gone with the views of `l` it read, and for an `exp` softmax the exponential
/// in base 2 reading `-m log2(e)`.
struct TileEdits<'a> {
    m_expr: ExprId,
    m_buf: BufferId,
    m_neg_log2: Option<BufferId>,
    denominator_views: &'a [ExprId],
    exp_expr: ExprId,
    diff_expr: ExprId,
    m_views: &'a [ExprId],
    p_expr: ExprId,
}

/// Which of [`TileEdits`]' edits were made.
struct TileOutcome {
    placed: bool,
    divided: bool,
    exp_folded: bool,
    sub_folded: bool,
}

impl TileEdits<'_> {
    fn apply(
        &self,
        k: &mut Kernel,
        tile: LoopKey,
        mut before: Vec<Stmt>,
        mut after: Vec<Stmt>,
    ) -> TileOutcome {
        let TileEdits {
            m_expr,
            m_buf,
            m_neg_log2,
            denominator_views,
            exp_expr,
            diff_expr,
            m_views,
            p_expr,
        } = *self;
        let (mut exp_folded, mut sub_folded) = (m_neg_log2.is_none(), m_neg_log2.is_none());
        let mut placed = false;
        let mut divided = false;
        crate::kir::for_each_stmt_mut(&mut k.body, &mut |s| {
            let Stmt::Loop(l) = s else {
                return Flow::Descend;
            };
            if l.key != tile || placed {
                return Flow::Descend;
            }
            let holds_update = |s: &Stmt| {
                crate::kir::any_stmt(
                    std::slice::from_ref(s),
                    &mut |s| matches!(s, Stmt::Compute(c) if c.expr == m_expr && c.role == ComputeRole::ReductionUpdate),
                )
            };
            let Some((block, at)) = block_of_update(&mut l.body, &holds_update) else {
                return Flow::Descend;
            };
            let body = std::mem::take(block);
            let mut new_body = Vec::with_capacity(body.len() + before.len() + after.len());
            for (i, s) in body.into_iter().enumerate() {
                if i == at {
                    new_body.append(&mut before);
                }
                new_body.push(s);
                if i == at {
                    new_body.append(&mut after);
                }
            }
            *block = new_body;
            crate::kir::rewrite_post(&mut l.body, &mut |s| match s {
                Stmt::Compute(c) if denominator_views.contains(&c.expr) => Vec::new(),
                Stmt::Compute(mut c)
                    if m_neg_log2.is_some()
                        && (c.expr == exp_expr
                            || c.expr == diff_expr
                            || m_views.contains(&c.expr)) =>
                {
                    let neg = m_neg_log2.expect("checked");
                    c.value.for_each_read_mut(&mut |a| {
                        if a.buffer == m_buf {
                            a.buffer = neg;
                        }
                    });
                    // e = exp(s - m) -> exp2(fma(s, log2(e), -m log2(e))), the subtraction in
                    // its own statement or inlined into the exponential's.
                    let fold_sub = |d: &mut Data| {
                        if let Data::Binary(BinaryOp::Sub, dt, a, b) = d {
                            *d = log2_fma((**a).clone(), (**b).clone(), *dt);
                            true
                        } else {
                            false
                        }
                    };
                    if c.expr == diff_expr {
                        sub_folded |= fold_sub(&mut c.value);
                    } else if c.expr == exp_expr {
                        if let Data::Unary(op @ UnaryOp::Exp, dt, x) = &mut c.value {
                            *op = shifted_exp2(*dt);
                            sub_folded |= fold_sub(x);
                            exp_folded = true;
                        }
                    }
                    vec![Stmt::Compute(c)]
                }
                Stmt::Compute(mut c) if c.expr == p_expr => {
                    if let Data::Binary(BinaryOp::Div, _, num, _) = c.value {
                        c.value = *num;
                        divided = true;
                    }
                    vec![Stmt::Compute(c)]
                }
                s => vec![s],
            });
            placed = true;
            Flow::Skip
        });
        TileOutcome {
            placed,
            divided,
            exp_folded,
            sub_folded,
        }
    }
}

/// The block of the tile loop's `body` whose statement holds the maximum's update, and that
/// statement's index: the body itself, or, where that statement is a thread or block binding
/// (the query rows of consumer warp group `threadIdx.y`), the binding's body, and so on inward.
/// A binding is not a loop (each thread runs its one index), so the row statements belong
/// right around the update inside it, before the exponentials that read `-m log2(e)`.
/// (`holds_update` holds for a statement whenever it holds for one inside it, so the first
/// statement outer ones first that holds it and is not a binding is that one.)
fn block_of_update<'b>(
    body: &'b mut Vec<Stmt>,
    holds_update: &dyn Fn(&Stmt) -> bool,
) -> Option<(&'b mut Vec<Stmt>, usize)> {
    crate::kir::find_mut(body, &mut |s| {
        holds_update(s) && !matches!(s, Stmt::Loop(b) if b.parallel.is_hw())
    })
}

/// Readers of the final `m` and `l` after the tile loop (the log-sum-exp) read the
/// accumulators (`accs`: the maximum's and the sum's): `m_acc` is the unguarded maximum (`-inf`
/// for a row masked throughout, as in the plain form), `l_acc` the whole sum.
fn read_final_statistics(
    cx: &Ctx,
    k: &mut Kernel,
    p: &crate::fusion::online_softmax::OnlineSoftmax,
    tile: LoopKey,
    m_buf: BufferId,
    accs: [BufferId; 2],
) {
    let [m_acc, l_acc] = accs;
    let l_buf = cx.layout.tensor_buffer.get(&p.sum).copied();
    crate::kir::for_each_stmt_mut(&mut k.body, &mut |s| match s {
        Stmt::Loop(l) if l.key == tile => Flow::Skip,
        Stmt::Compute(c) => {
            c.value.for_each_read_mut(&mut |a| {
                if a.buffer == m_buf {
                    a.buffer = m_acc;
                } else if Some(a.buffer) == l_buf {
                    a.buffer = l_acc;
                }
            });
            Flow::Descend
        }
        _ => Flow::Descend,
    });
}

/// The expressions of the views (one operand each) through which `from` reads `to`, `from`'s
/// first; `None` when something else is between them.
fn view_exprs(f: &crate::fusion::Fusion, from: TensorId, to: TensorId) -> Option<Vec<ExprId>> {
    let mut out = Vec::new();
    let mut t = from;
    while t != to {
        let e = f.tensors[t].definition?;
        out.push(e);
        match f.exprs[e].inputs[..] {
            [Operand::Tensor(i)] => t = i,
            _ => return None,
        }
    }
    Some(out)
}

/// The `tanh`s in f32 among the exprs the scores are computed from (back to the product's
/// reduction and the fusion's inputs) whose value reaches the scores only through sums,
/// differences, products, divisions of it (as the numerator) and copies, read once at each
/// step: there an absolute error in the tanh is an absolute error in the score scaled by the
/// factors on the way, as the rounding of that term is (the module doc). A tanh read in any
/// other way (exponentiated, divided by, squared, compared) keeps the precise form.
pub fn absolute_tanhs(f: &crate::fusion::Fusion, scores: TensorId) -> FxHashSet<ExprId> {
    use crate::fusion::Op;
    let mut found = FxHashSet::default();
    let mut seen = FxHashSet::default();
    let mut stack = vec![scores];
    while let Some(t) = stack.pop() {
        if !seen.insert(t) {
            continue;
        }
        let Some(e) = f.tensors[t].definition else {
            continue;
        };
        let expr = &f.exprs[e];
        match expr.op {
            Op::Reduce { .. } => continue,
            Op::Unary(UnaryOp::Tanh)
                if f.tensors[t].dtype == DType::F32 && reaches_linearly(f, t, scores) =>
            {
                found.insert(e);
            }
            _ => {}
        }
        stack.extend(expr.input_tensors());
    }
    found
}

/// Whether `t`'s value reaches `to` through a chain of single reads, each a sum, difference,
/// product, division (`t` the numerator), copy or cast to f32.
fn reaches_linearly(f: &crate::fusion::Fusion, mut t: TensorId, to: TensorId) -> bool {
    use crate::fusion::Op;
    while t != to {
        let [user] = f.uses(t)[..] else {
            return false;
        };
        let expr = &f.exprs[user];
        let reads = expr.input_tensors().filter(|&i| i == t).count();
        let linear = match expr.op {
            Op::Set | Op::Cast(DType::F32) => true,
            Op::Binary(BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul) => true,
            Op::Binary(BinaryOp::Div) => expr.inputs.first() == Some(&Operand::Tensor(t)),
            _ => false,
        };
        if !linear || reads != 1 {
            return false;
        }
        t = expr.output;
    }
    true
}
