//! Pass `tma` (after `loop_nest`; runs only when [`used`]): checks every TMA rule that the
//! sizes known at compile time allow (box dims 1..256 elements, inner box row a multiple of 16
//! bytes, rank 1..5, global dims below 2^32, strides multiples of 16 bytes below 2^40, bulk runs
//! contiguous), derives each box from the `Bulk` axes (each a whole dimension of constant extent
//! or the inner part of a split of one, split further only by inner splits, outer pieces first,
//! in the dimension order of the tensor; leading pieces of a dimension that comes again further
//! in count boxes laid side by side), the tensor-map encode arguments (innermost first; rows
//! that must be multiples of 16 bytes at run time become plan constraints), and groups the loads
//! of each serial loop into one pipeline with its mbarrier arrays ("full": one per stage, one
//! arrival; "empty" with `war=mbarrier`: one arrival per warp); warp-specialized pipelines are
//! planned by [`super::warp_specialize`]. Errors name the tensor and the rule. Emits: the
//! [`PipelinePlan`] (all but its stage sizes), tensor maps and mbarrier arrays on the kernel.

use super::warp_specialize::plan_ws;
#[allow(unused_imports)]
use super::*;

/// One Bulk axis of a box: its path of inner splits from its dimension's root (0 = outer part,
/// 1 = inner part), the axis, its extent and its loop position.
pub(crate) struct BoxPiece {
    path: Vec<u8>,
    id: IterId,
    extent: i64,
    pos: usize,
}

/// The shape a tensor's `Bulk` axes cover: one box, or several of the same box side by side.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub(crate) struct BoxShape {
    /// The box, innermost dimension first.
    pub dims: Vec<i64>,
    /// Boxes per copy (1: one). Several when the leading Bulk axes are outer pieces of a
    /// dimension whose inner pieces come later: e.g. a K tile of two 128-byte swizzle spans,
    /// `[K/64, rows, 64]` in shared memory, is two boxes of `{64, rows}` one after the other.
    pub count: i64,
    /// How many leading Bulk axes count the boxes (0 when `count` is 1).
    pub count_axes: usize,
    /// The dimension (innermost first) the boxes step along, by `dims[dim]` elements each.
    pub dim: usize,
}

/// The box a tensor's `Bulk` axes (loop axes `pos..`) cover, innermost dimension first.
///
/// The rule: each box dimension is a contiguous part of one dimension of the tensor, the whole
/// dimension or the inner part of a split of it (the outer part is a loop), possibly cut into
/// pieces by further inner splits, every piece Bulk and the outer pieces first; dimensions in
/// order. Shared memory then holds the box row-major, as TMA writes it. The leading Bulk axes
/// may instead be outer pieces of a dimension that comes again further in: they count boxes
/// ([`BoxShape::count`]), each a copy of its own, laid out one after the other.
pub(crate) fn box_of(cx: &Ctx, t: TensorId, pos: usize) -> Result<BoxShape, Diagnostic> {
    let f = cx.fusion;
    let tensor = &f.tensors[t];
    let name = &tensor.name;
    let err = |m: String| Err(Diagnostic::new(m, tensor.span));
    let logical = f.logical(t);
    let mut box_outer_first = vec![1i64; logical.len()];
    let mut groups: Vec<(usize, Vec<BoxPiece>)> = Vec::new();
    let mut pieces_in_order: Vec<(usize, BoxPiece)> = Vec::new();
    for (p, &id) in tensor.loop_domain.iter().enumerate().skip(pos) {
        let mut path = Vec::new();
        let mut cur = id;
        while let IterOrigin::Split {
            parent,
            inner_split,
            is_outer,
            ..
        } = f.ids[cur].origin
        {
            if !inner_split {
                return err(format!(
                    "Bulk axis {p} of `{name}` comes from an outer split (split(.., .., outer)): a box dimension is a whole dimension of constant extent or the inner part of a split of one, split further only by inner splits"
                ));
            }
            path.push(u8::from(!is_outer));
            cur = parent;
        }
        if !matches!(f.ids[cur].origin, IterOrigin::Root) {
            return err(format!(
                "Bulk axis {p} of `{name}` comes from a merge: a box dimension is a whole dimension of constant extent or the inner part of a split of one, split further only by inner splits"
            ));
        }
        path.reverse();
        let Some(extent) = crate::fusion::schedule::extent_const(f, id) else {
            return err(format!(
                "Bulk axis {p} of `{name}` has no constant extent: split the dimension by the box size and make the inner part Bulk"
            ));
        };
        let Some(dim) = logical.iter().position(|&r| r == cur) else {
            return err(format!(
                "Bulk axis {p} of `{name}` is not a dimension of it"
            ));
        };
        let piece = BoxPiece {
            path,
            id,
            extent,
            pos: p,
        };
        pieces_in_order.push((dim, piece));
    }
    // Leading pieces of a dimension that comes again after another dimension count boxes.
    let lead_dim = pieces_in_order.first().map(|(d, _)| *d);
    let lead = pieces_in_order
        .iter()
        .take_while(|(d, _)| Some(*d) == lead_dim)
        .count();
    let repeats = pieces_in_order[lead..]
        .iter()
        .any(|(d, _)| Some(*d) == lead_dim);
    let mut count_pieces: Vec<BoxPiece> = Vec::new();
    for (i, (dim, piece)) in pieces_in_order.into_iter().enumerate() {
        if repeats && i < lead {
            count_pieces.push(piece);
            continue;
        }
        let p = piece.pos;
        match groups.last_mut() {
            Some((d, pieces)) if *d == dim => pieces.push(piece),
            Some((d, pieces)) if *d > dim => {
                return err(format!(
                    "the Bulk axes of `{name}` must follow its dimension order, outermost dimension first, each dimension's pieces together: Bulk axis {p} (dimension {dim}) comes after Bulk axis {} (dimension {d}); shared memory holds the box row-major (only the leading Bulk axes may be outer pieces of a dimension that comes again further in: they lay several boxes side by side)",
                    pieces.last().map_or(p, |x| x.pos)
                ))
            }
            _ => groups.push((dim, vec![piece])),
        }
    }
    let count: i64 = count_pieces.iter().map(|x| x.extent).product();
    let count_axes = count_pieces.len();
    let mut count_dim = 0;
    for (dim, mut pieces) in groups {
        let in_box: i64 = pieces.iter().map(|x| x.extent).product();
        if count_axes > 0 && Some(dim) == lead_dim {
            // The counting pieces and the box's pieces of this dimension together must cover
            // one contiguous part of it, the counting ones outermost.
            count_dim = dim;
            pieces.splice(0..0, std::mem::take(&mut count_pieces));
        }
        let axes: Vec<usize> = pieces.iter().map(|x| x.pos).collect();
        // The part of the dimension the pieces share: reached from the root through inner
        // parts only, else the box would skip what the outer loop's sibling covers.
        let mut prefix = pieces[0].path.clone();
        for x in &pieces[1..] {
            let common = prefix
                .iter()
                .zip(&x.path)
                .take_while(|(a, b)| a == b)
                .count();
            prefix.truncate(common);
        }
        if prefix.contains(&0) {
            return err(format!(
                "Bulk axes {axes:?} of `{name}` lie in the outer part of a split of dimension {dim} whose inner part is not in the box: a box row must be contiguous, so make the inner part Bulk too (after them), or make only the inner part Bulk"
            ));
        }
        let sorted = pieces.windows(2).all(|w| w[0].path < w[1].path);
        let product: i64 = pieces.iter().map(|x| x.extent).product();
        let mut top = pieces[0].id;
        for _ in prefix.len()..pieces[0].path.len() {
            if let IterOrigin::Split { parent, .. } = f.ids[top].origin {
                top = parent;
            }
        }
        let whole = crate::fusion::schedule::extent_const(f, top);
        if !sorted || whole != Some(product) {
            return err(format!(
                "the Bulk axes {axes:?} of `{name}` must together cover one contiguous part of dimension {dim} (the whole dimension or the inner part of a split), every piece of it Bulk, outer pieces first"
            ));
        }
        box_outer_first[dim] = in_box;
    }
    let rank = box_outer_first.len();
    Ok(BoxShape {
        dims: box_outer_first.into_iter().rev().collect(),
        count,
        count_axes,
        dim: if count_axes > 0 {
            rank - 1 - count_dim
        } else {
            0
        },
    })
}

/// Global dims and byte strides of a global tensor (innermost first), checked where constant;
/// rows that must be multiples of 16 bytes at run time become plan constraints.
pub(crate) fn global_layout(
    cx: &mut Ctx,
    constraints: &mut Vec<Constraint>,
    global: TensorId,
    elem: i64,
    what: &str,
    rule_owner: &str,
    span: Option<crate::diag::Span>,
) -> Result<(Vec<SizeExpr>, Vec<SizeExpr>), Diagnostic> {
    let f = cx.fusion;
    let err = |m: String| Err(Diagnostic::new(m, span));
    let global_dims: Vec<SizeExpr> = f
        .logical(global)
        .iter()
        .rev()
        .map(|&id| f.ids[id].root_extent.clone().unwrap_or(SizeExpr::Const(1)))
        .collect();
    let gname = &f.tensors[global].name;
    for (d, g) in global_dims.iter().enumerate() {
        if let Some(v) = g.as_const() {
            if !(1..=1i64 << 32).contains(&v) {
                return err(format!(
                    "{what}: dimension {d} (innermost first) of `{gname}` is {v}; a tensor map dimension is 1 to 2^32"
                ));
            }
        }
    }
    let rank = global_dims.len();
    let mut strides = Vec::new();
    let mut stride = SizeExpr::Const(elem);
    for g in &global_dims[..rank - 1] {
        stride = mul(stride, g.clone());
        if let Some(s) = stride.as_const() {
            if s >= 1i64 << 40 {
                return err(format!(
                    "{what}: a global stride of `{gname}` is {s} bytes; tensor map strides are below 2^40"
                ));
            }
        }
        strides.push(stride.clone());
    }
    if rank > 1 {
        need_divisible(
            constraints,
            &global_dims[0],
            16 / elem,
            what,
            rule_owner,
            "the rows of the tensor must be multiples of 16 bytes (tensor map strides and bulk-copy alignment)",
            span,
        )?;
    }
    Ok((global_dims, strides))
}

pub(crate) fn need_divisible(
    constraints: &mut Vec<Constraint>,
    value: &SizeExpr,
    divisor: i64,
    what: &str,
    rule_owner: &str,
    rule: &str,
    span: Option<crate::diag::Span>,
) -> Result<(), Diagnostic> {
    match value.as_const() {
        Some(v) if v % divisor != 0 => Err(Diagnostic::new(
            format!("{what}: {rule} ({value} is not a multiple of {divisor})"),
            span,
        )),
        Some(_) => Ok(()),
        None => {
            let c = Constraint::Divisible {
                value: value.clone(),
                divisor,
                reason: format!("{rule_owner}: {rule}"),
            };
            if !constraints.contains(&c) {
                constraints.push(c);
            }
            Ok(())
        }
    }
}

/// Runs the pass: the pipeline plan, and the launch constraints of the tensor maps' rows.
pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<(PipelinePlan, Vec<Constraint>), Diagnostic> {
    let mut constraints = Vec::new();
    let mut plan = PipelinePlan {
        issuer: issuer(k),
        stream_k: crate::kir::stream_k(k).cloned(),
        ..PipelinePlan::default()
    };
    let plan = &mut plan;
    let f = cx.fusion;
    for t in f.tensor_ids() {
        if !cx.layout.placement.contains_key(&t) {
            continue;
        }
        if f.tensors[t].load != LoadKind::Plain || f.tensors[t].circular.is_some() {
            plan_load(cx, &mut constraints, plan, k, t)?;
        }
        if f.tensors[t].store != LoadKind::Plain {
            plan_store(cx, &mut constraints, plan, k, t)?;
        }
    }
    // Barriers of each pipeline: full when a copy fills its slots, empty with war=mbarrier.
    let threads: Option<i64> = k.block.iter().map(|b| b.as_const()).product();
    // Warp specialization splits the block once; each buffered loop it covers (a persistent
    // kernel's tile loop and the loop over k tiles inside it) has producer warps of its own.
    // The block is planned once, from the loop that asks for register counts if one does.
    let specialized = || {
        plan.pipes
            .iter()
            .filter_map(|p| Some((p, plan.loads[p.members[0]].ws()?)))
    };
    let lead = specialized()
        .find(|(_, s)| s.registers.is_some())
        .or_else(|| specialized().next());
    let ws_block = match lead {
        Some((pipe, spec)) => {
            let first = &f.tensors[plan.loads[pipe.members[0]].tensor];
            let span = first.circular.map(|c| c.span);
            let diag = |m: String| Diagnostic::new(format!("`{}`: {m}", first.name), span);
            Some(super::warp_specialize::WsBlock::plan(k, spec, &diag)?)
        }
        None => None,
    };
    for p in 0..plan.pipes.len() {
        let pipe = plan.pipes[p].clone();
        let first = &f.tensors[plan.loads[pipe.members[0]].tensor];
        if let Some(spec) = plan.loads[pipe.members[0]].ws() {
            let span = first.circular.map(|c| c.span);
            let diag = |m: String| Diagnostic::new(format!("`{}`: {m}", first.name), span);
            let block = ws_block
                .as_ref()
                .expect("planned from a warp-specialized pipe");
            block.check_same(spec, &diag)?;
            let ws = plan_ws(cx, plan, k, &pipe, spec, block)?;
            check_ws_pipes(f, plan, &ws, &diag)?;
            plan.pipes[p].ws = Some(ws);
            continue;
        }
        let copies = pipe
            .members
            .iter()
            .any(|&m| plan.loads[m].kind != LoadKind::Plain);
        let base = match pipe.loop_key {
            Some(key) if pipe.members.len() > 1 => cx.keys.names[key].clone(),
            _ => first.name.clone(),
        };
        if copies {
            let full = k.push_mbarriers(MbarArray {
                name: cx.fresh_name(&format!("{base}_full")),
                count: pipe.stages,
                arrivals: 1,
                smem_offset: None,
                cluster_wide: false,
            });
            plan.pipes[p].full = Some(full);
        }
        if pipe.war == WarMode::Mbarrier {
            let Some(threads) = threads else {
                return Err(Diagnostic::new(
                    format!("`{}`: war=mbarrier counts one arrival per warp, so the block size must be known at compile time", first.name),
                    first.circular.map(|c| c.span),
                ));
            };
            let empty = k.push_mbarriers(MbarArray {
                name: cx.fresh_name(&format!("{base}_empty")),
                count: pipe.stages,
                arrivals: if threads % crate::target::WARP_THREADS == 0 {
                    threads / crate::target::WARP_THREADS
                } else {
                    threads
                },
                smem_offset: None,
                cluster_wide: false,
            });
            plan.pipes[p].empty = Some(empty);
        }
    }
    if let Some(block) = &ws_block {
        block.apply(k);
    }
    super::cluster::plan_multicast(cx, k, plan)?;
    Ok((std::mem::take(plan), constraints))
}

/// A warp-specialized pipe `ws` among those planned before it: each producer warp loads for one
/// buffered loop, and at most one loop is consumed in turns by the groups (ping-pong over
/// tiles), whose turn barriers the kernel passes once at entry and exit.
fn check_ws_pipes(
    f: &crate::fusion::Fusion,
    plan: &PipelinePlan,
    ws: &super::WsPlan,
    diag: &dyn Fn(String) -> Diagnostic,
) -> Result<(), Diagnostic> {
    let earlier = || plan.pipes.iter().filter_map(|p| p.ws.as_ref());
    for role in &ws.roles {
        let other = earlier()
            .flat_map(|w| &w.roles)
            .find(|r| r.warp == role.warp);
        if let Some(other) = other {
            let t = plan.loads[other.members[0]].tensor;
            return Err(diag(format!(
                "producer warp {} loads `{}` for another buffered loop: give each loop's loads their own warps (warp=...)",
                role.warp, f.tensors[t].name
            )));
        }
    }
    if ws.turns > 1 && earlier().any(|w| w.turns > 1) {
        return Err(diag(
            "the consumer groups take turns with whole stages of one buffered loop only (ping-pong); buffer this one without turns".into(),
        ));
    }
    Ok(())
}

/// The thread that issues copies and initialises barriers: one elected lane of warp 0 when the
/// block is made of whole warps (the predicate is warp-uniform up to `elect.sync`, which the
/// whole warp executes), thread 0 otherwise.
pub(crate) fn issuer(k: &Kernel) -> Val {
    let threads: Option<i64> = k.block.iter().map(|b| b.as_const()).product();
    if threads.is_some_and(|n| n % crate::target::WARP_THREADS == 0) {
        return Val::and(Val::eq(Val::Warp, Val::Int(0)), Val::Elect);
    }
    Val::all(
        (0..3)
            .filter(|&d| k.block[d] != SizeExpr::Const(1))
            .map(|d| {
                let p = [ParallelType::TIDx, ParallelType::TIDy, ParallelType::TIDz][d];
                Val::eq(Val::Hw(p), Val::Int(0))
            }),
    )
}

/// The box of a TMA or bulk load of cache `t` (its Bulk axes) checked against the copy and
/// the loops around it, its bytes and stage, and for a TMA load the tensor map (into `info`).
fn plan_box(
    cx: &mut Ctx,
    constraints: &mut Vec<Constraint>,
    k: &mut Kernel,
    t: TensorId,
    info: &mut TmaInfo,
) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let tensor = &f.tensors[t];
    let name = &tensor.name;
    let err = |m: String| Err(Diagnostic::new(m, tensor.span));
    let src = info.src;
    let (keys, q) = cx.layout.placement[&t].clone();
    let pos = cx.own_axes_from(t);
    let elem = tensor.dtype.size_bytes() as i64;
    if tensor.memory != MemoryType::Shared {
        return err(format!(
            "`{name}` is loaded by {} and must stay in shared memory",
            tensor.load.name()
        ));
    }
    for (p, &id) in tensor.loop_domain.iter().enumerate() {
        let bulk = f.ids[id].parallel == ParallelType::Bulk;
        if p < pos && bulk {
            return err(format!(
                "axis {p} of `{name}` is Bulk but shared with its consumers' loops: a box axis must be one of the tensor's own innermost loops"
            ));
        }
        if p >= pos && !bulk {
            return err(format!(
                "axis {p} of `{name}` ({}) is not Bulk: every loop axis of a {} load that is not shared with its consumers must be Bulk (the copy fills the whole box at once)",
                f.ids[id].parallel,
                tensor.load.name()
            ));
        }
    }
    if pos == tensor.loop_domain.len() {
        return err(format!(
            "`{name}` has no Bulk axis: mark the axes the box covers with parallelize(axis, Bulk)"
        ));
    }
    let shape = box_of(cx, t, pos)?;
    let box_dims = shape.dims.clone();
    let what = format!(
        "`{name}` ({} load of `{}`)",
        tensor.load.name(),
        f.tensors[src].name
    );
    crate::target::check_tma_box(&what, elem, &box_dims, tensor.swizzle).or_else(err)?;
    if shape.count > 1 {
        let box_bytes = box_dims.iter().product::<i64>() * elem;
        let align = crate::target::swizzle_repeat(tensor.swizzle);
        if tensor.load != LoadKind::Tma {
            return err(format!(
                "{what}: the leading Bulk axes lay {} boxes side by side, which takes one tensor-map copy per box: use load=tma",
                shape.count
            ));
        }
        if box_bytes % align != 0 {
            return err(format!(
                "{what}: the leading Bulk axes lay {} boxes of {box_bytes} bytes side by side; each box starts where the previous one ends and a box in shared memory starts on a multiple of {align} bytes{}, so a box must be a multiple of {align} bytes",
                shape.count,
                if tensor.swizzle > 0 { " (the swizzle pattern's repeat)" } else { "" }
            ));
        }
    }
    if tensor.load == LoadKind::Bulk && box_dims[1..].iter().any(|&b| b != 1) {
        return err(format!(
            "{what}: a bulk copy moves one contiguous run, so only the innermost dimension may be Bulk (use load=tma for boxes of several dimensions)"
        ));
    }
    let src_name = f.tensors[src].name.clone();
    let owner = format!("{} load of `{src_name}` into `{name}`", tensor.load.name());
    let (global_dims, global_strides) =
        global_layout(cx, constraints, src, elem, &what, &owner, tensor.span)?;
    if tensor.load == LoadKind::Bulk {
        need_divisible(
            constraints,
            &global_dims[0],
            box_dims[0],
            &what,
            &owner,
            "a bulk copy has no out-of-bounds handling, so the innermost dimension must be a multiple of the run",
            tensor.span,
        )?;
    }
    // Enclosing loops: none bound to threads (one thread issues the copy for the block).
    // (The loops around this load's own write: a key may also name a loop of another
    // parallel type elsewhere in the kernel.)
    let around =
        super::loops_around_write(&k.body, cx.layout.tensor_buffer[&t]).unwrap_or_default();
    let ws_on = tensor
        .circular
        .as_ref()
        .and_then(|c| c.ws.as_ref())
        .map(|w| w.on);
    for &(key, p) in around.iter().filter(|(key, _)| keys[..q].contains(key)) {
        // (Inside the consumers' loop over the warp-specialized dim the producer walks that
        // loop serially: ping-pong consumers take turns, each with its own stages.)
        if p.is_thread() && Some(p) != ws_on {
            return err(format!(
                "`{name}` is loaded by {}, which one thread issues for the whole block: it cannot be inside the thread-parallel loop `{}` ({p}); inline it further out",
                tensor.load.name(),
                cx.keys.names[key]
            ));
        }
    }
    let box_elems: i64 = box_dims.iter().product();
    info.bytes = box_elems * elem * shape.count;
    info.boxes = shape.clone();
    let align = crate::target::swizzle_repeat(tensor.swizzle);
    info.stage_elems = Some((info.bytes + align - 1) / align * align / elem);
    if tensor.load == LoadKind::Tma {
        let map = k.push_tensor_map(TensorMapSpec {
            param: cx.fresh_name(&format!("{name}_map")),
            tensor: src_name,
            dtype: tensor.dtype,
            global_dims: global_dims.clone(),
            global_strides,
            box_dims: box_dims.clone(),
            element_strides: vec![1; box_dims.len()],
            swizzle_bytes: tensor.swizzle,
        });
        info.map = Some(map);
    }
    info.box_dims = box_dims;
    info.global_dims = global_dims;
    Ok(())
}

pub(crate) fn plan_load(
    cx: &mut Ctx,
    constraints: &mut Vec<Constraint>,
    plan: &mut PipelinePlan,
    k: &mut Kernel,
    t: TensorId,
) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let tensor = &f.tensors[t];
    let name = &tensor.name;
    let err = |m: String| Err(Diagnostic::new(m, tensor.span));
    let src = f.exprs[tensor.definition.expect("a cache has a definition")]
        .input_tensors()
        .next()
        .expect("a cache reads its source");
    // A cache nothing reads would be filled for nobody; with warp specialization its producer
    // role would fill slots that no consumer ever releases.
    if tensor.load != LoadKind::Plain && cx.reads.uses[t].is_empty() {
        let role = match tensor.circular.as_ref().and_then(|c| c.ws.as_ref()) {
            Some(_) => " (its producer role would fill slots that no consumer reads or releases)",
            None => "",
        };
        return err(format!(
            "`{name}` ({} load of `{}`) is read by nothing{role}: use it in the fusion or remove the cache",
            tensor.load.name(),
            f.tensors[src].name
        ));
    }
    let (keys, q) = cx.layout.placement[&t].clone();
    let mut info = TmaInfo {
        tensor: t,
        src,
        kind: tensor.load,
        stage_elems: None,
        bytes: 0,
        map: None,
        box_dims: Vec::new(),
        boxes: BoxShape {
            dims: Vec::new(),
            count: 1,
            count_axes: 0,
            dim: 0,
        },
        global_dims: Vec::new(),
        pipe: PipeId::new(0),
        circular: tensor.circular,
        swizzle: tensor.swizzle,
        multicast: None,
    };
    if tensor.load != LoadKind::Plain {
        plan_box(cx, constraints, k, t, &mut info)?;
    }
    // The pipeline: the innermost serial loop of the placement around the load's own write (a
    // key may also name a thread or block binding in another tensor's nest).
    let loop_key = super::loops_around_write(&k.body, cx.layout.tensor_buffer[&t])
        .unwrap_or_default()
        .into_iter()
        .rev()
        .find(|(key, p)| keys[..q].contains(key) && !p.is_hw())
        .map(|(key, _)| key);
    let (stages, prefetch, war) = match tensor.circular {
        Some(cb) => (cb.stages, cb.prefetch, cb.war),
        None => (1, 0, WarMode::Sync),
    };
    if let Some(cb) = tensor.circular {
        let Some(bk) = loop_key else {
            return Err(Diagnostic::new(
                format!("`{name}`.circular_buffer({}): no serial loop encloses the load of `{name}`, so there is nothing to pipeline", cb.stages),
                Some(cb.span),
            ));
        };
        // A loop the program gives a constant trip count; a kernel specialised to its sizes
        // has constant trip counts the program did not write, and its pipeline handles fewer
        // iterations than stages as the generic kernel does at run time.
        let written = cx.options.specialized.is_none();
        if let Some(e) = cx.key_extent(bk).as_const().filter(|_| written) {
            if cb.stages > e {
                return Err(Diagnostic::new(
                    format!(
                        "`{name}`.circular_buffer({}): {} stages is more than the {e} iterations of the buffered loop `{}`",
                        cb.stages, cb.stages, cx.keys.names[bk]
                    ),
                    Some(cb.span),
                ));
            }
        }
    }
    let same_loop =
        loop_key.and_then(|key| plan.pipes.iter().position(|p| p.loop_key == Some(key)));
    match same_loop {
        Some(p) => {
            let pipe = &plan.pipes[p];
            let other_ws = plan.loads[pipe.members[0]]
                .ws()
                .map(|w| (w.on, w.registers));
            let this_ws = tensor
                .circular
                .and_then(|c| c.ws)
                .map(|w| (w.on, w.registers));
            if other_ws != this_ws {
                let other = &f.tensors[plan.loads[pipe.members[0]].tensor].name;
                return err(format!(
                    "`{name}` and `{other}` are loaded in the same loop `{}`: warp-specialize both, on the same thread dim with the same registers (only warp= may differ)",
                    cx.keys.names[loop_key.expect("same loop")]
                ));
            }
            if (pipe.stages, pipe.prefetch, pipe.war) != (stages, prefetch, war) {
                let other = &f.tensors[plan.loads[pipe.members[0]].tensor].name;
                let describe = |s: i64, p: i64, w: WarMode| {
                    if s == 1 {
                        "no circular buffering".to_string()
                    } else {
                        format!(
                            "circular_buffer({s}, prefetch={p}, war={})",
                            if w == WarMode::Sync {
                                "sync"
                            } else {
                                "mbarrier"
                            }
                        )
                    }
                };
                return err(format!(
                    "`{name}` and `{other}` are loaded in the same loop `{}` and share its pipeline, so they need the same circular buffering: `{name}` has {}, `{other}` has {}",
                    cx.keys.names[loop_key.expect("same loop")],
                    describe(stages, prefetch, war),
                    describe(pipe.stages, pipe.prefetch, pipe.war)
                ));
            }
            info.pipe = PipeId::new(p);
            plan.pipes[p].members.push(plan.loads.len());
        }
        None => {
            info.pipe = PipeId::new(plan.pipes.len());
            plan.pipes.push(Pipe {
                loop_key,
                stages,
                prefetch,
                war,
                full: None,
                empty: None,
                members: vec![plan.loads.len()],
                ws: None,
            });
        }
    }
    plan.loads.push(info);
    Ok(())
}

/// An output written by TMA from its shared cache: the box of its `Bulk` axes.
pub(crate) fn plan_store(
    cx: &mut Ctx,
    constraints: &mut Vec<Constraint>,
    plan: &mut PipelinePlan,
    k: &mut Kernel,
    y: TensorId,
) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let tensor = &f.tensors[y];
    let name = &tensor.name;
    let err = |m: String| Err(Diagnostic::new(m, tensor.span));
    let cache = f.exprs[tensor.definition.expect("a stored output has a definition")]
        .input_tensors()
        .next()
        .expect("the store reads its cache");
    let Some(pos) = tensor
        .loop_domain
        .iter()
        .position(|&id| f.ids[id].parallel == ParallelType::Bulk)
    else {
        return err(format!(
            "`{name}` is written by a TMA store and has no Bulk axis: mark the axes the box covers with parallelize(axis, Bulk)"
        ));
    };
    for (p, &id) in tensor.loop_domain.iter().enumerate().skip(pos) {
        if f.ids[id].parallel != ParallelType::Bulk {
            return err(format!(
                "axis {p} of `{name}` ({}) is inside its Bulk axes: the Bulk axes of a TMA store must be its innermost loop axes",
                f.ids[id].parallel
            ));
        }
    }
    // The loops the store sits in (the write of the output's buffer, outside its Bulk axes):
    // thread-parallel ones make it a store per thread group.
    let around =
        super::loops_around_write(&k.body, cx.layout.tensor_buffer[&y]).unwrap_or_default();
    let group = store_group(cx, k, &around, cx.layout.tensor_buffer[&cache], name)
        .map_err(|m| Diagnostic::new(m, tensor.span))?;
    let store_issuer = match &group {
        Some(g) => group_leader(k, &g.dims),
        None => plan.issuer.clone(),
    };
    let shape = box_of(cx, y, pos)?;
    let box_dims = shape.dims;
    let elem = tensor.dtype.size_bytes() as i64;
    let what = format!("`{name}` (TMA store from `{}`)", f.tensors[cache].name);
    if shape.count > 1 {
        return err(format!(
            "{what}: the leading Bulk axes lay {} boxes side by side, which TMA stores do not do; give the store one box (its Bulk axes in dimension order) and loop over the boxes with an ordinary axis",
            shape.count
        ));
    }
    crate::target::check_tma_box(&what, elem, &box_dims, tensor.swizzle).or_else(err)?;
    let owner = format!("TMA store of `{}` into `{name}`", f.tensors[cache].name);
    let (global_dims, global_strides) =
        global_layout(cx, constraints, y, elem, &what, &owner, tensor.span)?;
    let map = k.push_tensor_map(TensorMapSpec {
        param: cx.fresh_name(&format!("{name}_map")),
        tensor: name.clone(),
        dtype: tensor.dtype,
        global_dims,
        global_strides,
        box_dims: box_dims.clone(),
        element_strides: vec![1; box_dims.len()],
        swizzle_bytes: tensor.swizzle,
    });
    plan.stores.push(StoreInfo {
        tensor: y,
        cache,
        map,
        bytes: box_dims.iter().product::<i64>() * elem,
        box_dims,
        fence: tensor.fence,
        swizzle: tensor.swizzle,
        issuer: store_issuer,
        group,
    });
    Ok(())
}

/// The thread groups of a TMA store inside thread-parallel loops `around` (see
/// [`super::StoreGroup`]), or why the store cannot be issued per group.
fn store_group(
    cx: &Ctx,
    k: &Kernel,
    around: &[(LoopKey, ParallelType)],
    cache: BufferId,
    name: &str,
) -> Result<Option<super::StoreGroup>, String> {
    let bound: Vec<(LoopKey, ParallelType)> = around
        .iter()
        .copied()
        .filter(|(_, p)| p.is_thread())
        .collect();
    if bound.is_empty() {
        return Ok(None);
    }
    if let Some((key, _)) = bound.iter().find(|(_, p)| *p == ParallelType::TIDx) {
        return Err(format!(
            "`{name}` is written by a TMA store, which one thread issues per group of threads: it cannot be inside the threadIdx.x loop `{}` (bind the loop to TIDy or TIDz, or make its axis Bulk)",
            cx.keys.names[*key]
        ));
    }
    let x = k.block[0].as_const();
    let threads: Option<i64> = k.block.iter().map(|b| b.as_const()).product();
    let (Some(x), Some(threads)) = (x, threads) else {
        return Err(format!(
            "`{name}` is written by a TMA store inside the thread-parallel loop `{}`: a store per thread group needs a block size known at compile time",
            cx.keys.names[bound[0].0]
        ));
    };
    if x % crate::target::WARP_THREADS != 0 {
        return Err(format!(
            "`{name}` is written by a TMA store inside the thread-parallel loop `{}`: a store per thread group needs threadIdx.x to span whole warps (the block's x extent {x} is not a multiple of 32)",
            cx.keys.names[bound[0].0]
        ));
    }
    let groups: i64 = bound
        .iter()
        .map(|(_, p)| {
            k.block[p.dim().expect("a thread dim")]
                .as_const()
                .unwrap_or(1)
        })
        .product();
    // Local when every write of the cache sits in the same thread-parallel loops as the store
    // (each group's writes and its store then cover only its own part of the cache).
    // (threadIdx.x loops inside a group do not change which group writes.)
    let writes = super::thread_loops_of_writes(&k.body, cache);
    // (Each group needs a named barrier of its own.)
    let ids = crate::target::NAMED_BARRIERS - crate::target::GROUP_BARRIER_BASE;
    let local = groups <= ids as i64
        && !writes.is_empty()
        && writes.iter().all(|w| {
            let groups: Vec<_> = w
                .iter()
                .copied()
                .filter(|(_, p)| *p != ParallelType::TIDx)
                .collect();
            groups == bound
        });
    Ok(Some(super::StoreGroup {
        dims: bound.iter().map(|(_, p)| *p).collect(),
        keys: bound.iter().map(|(k, _)| *k).collect(),
        threads: threads / groups,
        local,
    }))
}

/// One elected lane of the first warp of each thread group selected by `dims` (the other
/// thread dims at 0): a warp-uniform condition on the warp index, then `elect.sync`.
pub(crate) fn group_leader(k: &Kernel, dims: &[ParallelType]) -> Val {
    let ext = |d: usize| k.block[d].as_const().unwrap_or(1);
    let warps_x = ext(0) / crate::target::WARP_THREADS;
    // The warp index is x / 32 + warps_x * (y + by * z).
    let mut conds = vec![Val::eq(Val::rem(Val::Warp, Val::Int(warps_x)), Val::Int(0))];
    if !dims.contains(&ParallelType::TIDy) && ext(1) > 1 {
        conds.push(Val::eq(
            Val::rem(Val::div(Val::Warp, Val::Int(warps_x)), Val::Int(ext(1))),
            Val::Int(0),
        ));
    }
    if !dims.contains(&ParallelType::TIDz) && ext(2) > 1 {
        conds.push(Val::lt(Val::Warp, Val::Int(warps_x * ext(1))));
    }
    Val::and(Val::all(conds), Val::Elect)
}
