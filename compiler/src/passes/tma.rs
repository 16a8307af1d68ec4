//! TMA and bulk copies between global and shared memory, and circular buffering. Three passes,
//! run only when the fusion has a cache filled by `load=tma|bulk`, an output written by
//! `cache_before(y, memory=shared, store=tma)`, or a circular-buffered cache.
//!
//! `tma` (after `loop_nest`): checks every TMA rule that the sizes known at compile time allow
//! (box dims 1..256 elements, inner box row a multiple of 16 bytes, rank 1..5, global dims below
//! 2^32, strides multiples of 16 bytes below 2^40, bulk runs contiguous), derives each box from
//! the `Bulk` axes (each a whole dimension of constant extent or the inner part of a split of
//! one, in the dimension order of the tensor), the tensor-map encode arguments (innermost
//! first; rows that must be multiples of 16 bytes at run time become plan constraints), and
//! groups the loads of each serial loop into one pipeline with its mbarrier arrays ("full":
//! one per stage, one arrival; "empty" with `war=mbarrier`: one arrival per warp). Errors name
//! the tensor and the rule.
//!
//! `tma_issue` (after `indexing`): replaces the `Bulk` loops of each copy by one `TmaLoad` or
//! `TmaStore` of the whole box: coordinates are the global tensor's root indices with the box
//! axes at 0.
//!
//! `circular_buffer` (after `predicate`): builds each pipeline around its serial loop (the
//! buffered loop; `i` is the linear iteration over every serial loop around it): prologue
//! `[0, prefetch)` issues loads; main iteration `i` issues the loads of `i + prefetch`, waits
//! on `full[i % stages]` for parity `(i / stages) % 2` and computes; epilogue runs the last
//! `prefetch` iterations. One elected lane of warp 0 (`elect.sync` under a warp-uniform
//! predicate) waits for the slot to be empty (`war=mbarrier`), arrives with `expect_tx` = the
//! full box bytes of every copy of the stage (also at a ragged edge: TMA fills the
//! out-of-bounds part with zeros) and issues the copies. Plain loads of a circular-buffered
//! cache are moved the same way, by every thread, with no mbarrier. Reads of a cache and plain
//! writes of it add the slot's offset. The mbarriers are initialised once at kernel entry
//! (fence, block barrier) and invalidated at kernel exit after a block barrier. TMA stores are
//! issued by the same elected lane, committed as a bulk group and waited on
//! (`wait_group.read 0`) before the shared buffer can be written again.
//!
//! Write-after-read of slots refilled by copies is left to the `sync` pass (a block barrier at
//! the end of an iteration that read a slot) unless the pipeline has empty mbarriers: then each
//! warp arrives on `empty[i % stages]` after its reads. Read-after-write of copied slots needs
//! no block barrier: the mbarrier wait orders the copy before the reads. The async-proxy fence
//! before a TMA store is placed by the `sync` pass (or here, for the non-default placements).

use super::indexing::consumer_roots;
use super::{mul, Ctx, LoopKey};
use crate::diag::Diagnostic;
use crate::fusion::{
    FenceMode, IterId, IterOrigin, LoadKind, MemoryType, ParallelType, TensorId, WarMode,
};
use crate::kir::{
    Access, BufferId, CopyKind, Data, Kernel, Loop, MbarArray, Stmt, TmaLoad, TmaStore, Val,
};
use crate::plan::{Constraint, SizeExpr, TensorMapSpec};
use std::collections::HashMap;

/// Alignment of a TMA box in shared memory (and of every stage of it).
pub const SMEM_ALIGN: i64 = 128;

/// Alignment of a box in shared memory: the swizzle pattern repeats every 8 rows of 128 bytes
/// (address bits 4..7 are XORed with bits 7..10), so a swizzled box starts at a multiple of 1024
/// bytes and the pattern is the same relative to its start.
pub fn stage_align(swizzle: u32) -> i64 {
    if swizzle == 0 {
        SMEM_ALIGN
    } else {
        1024
    }
}

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
#[derive(Clone, Debug)]
pub struct TmaInfo {
    pub tensor: TensorId,
    pub src: TensorId,
    /// `Plain` for a circular-buffered cache filled by ordinary loads.
    pub kind: LoadKind,
    /// Elements of one stage in shared memory (the box, padded to [`SMEM_ALIGN`] bytes); None
    /// for plain loads (the allocation pass sizes them).
    pub stage_elems: Option<i64>,
    /// Bytes of one box (the expected transaction count); 0 for plain loads.
    pub bytes: i64,
    /// Index into `Kernel::tensor_maps` (tile copies).
    pub map: Option<usize>,
    /// Rank of the source and the box, innermost first (bulk copies: only `box_dims[0]` > 1).
    pub box_dims: Vec<i64>,
    pub global_dims: Vec<SizeExpr>,
    /// Index into `Ctx::pipes`.
    pub pipe: usize,
    pub circular: Option<crate::fusion::CircularBuffer>,
    /// Shared-memory swizzle of the box in bytes (0: none).
    pub swizzle: u32,
}

impl TmaInfo {
    /// The warp specialization of its circular buffer.
    pub fn ws(&self) -> Option<crate::fusion::WarpSpecialized> {
        self.circular.and_then(|c| c.ws)
    }
}

/// The loads of one serial loop, pipelined together: they share slots, barriers and phases.
#[derive(Clone, Debug)]
pub struct Pipe {
    /// The innermost serial loop around the loads (None: no serial loop, one load).
    pub loop_key: Option<LoopKey>,
    pub stages: i64,
    pub prefetch: i64,
    pub war: WarMode,
    /// "Full" mbarriers (index into `Kernel::mbarriers`) when a copy fills the slots.
    pub full: Option<usize>,
    /// "Empty" mbarriers with `war=mbarrier`.
    pub empty: Option<usize>,
    /// Indices into `Ctx::tma`.
    pub members: Vec<usize>,
    /// Warp specialization (`warp_specialized(...)`), planned by `tma`.
    pub ws: Option<WsPlan>,
}

/// A warp-specialized pipeline: the padded block, who produces, who issues which loads.
#[derive(Clone, Debug)]
pub struct WsPlan {
    pub spec: crate::fusion::WarpSpecialized,
    /// Warp-uniform: this warp belongs to the producer warp group.
    pub is_producer: Val,
    pub consumer_threads: i64,
    /// One per producer warp that issues loads, each with its own full and empty barriers.
    pub roles: Vec<WsRole>,
}

#[derive(Clone, Debug)]
pub struct WsRole {
    /// Producer warp (0..4) as scheduled.
    pub warp: u32,
    /// Its warp index in the block.
    pub block_warp: i64,
    pub full: usize,
    pub empty: usize,
    /// Indices into `Ctx::tma`.
    pub members: Vec<usize>,
}

/// A TMA store of an output from its shared-memory cache.
#[derive(Clone, Debug)]
pub struct StoreInfo {
    /// The global output.
    pub tensor: TensorId,
    /// Its shared-memory cache (`cache_before`).
    pub cache: TensorId,
    pub map: usize,
    pub bytes: i64,
    pub box_dims: Vec<i64>,
    pub fence: FenceMode,
    /// Shared-memory swizzle of the box in bytes (0: none).
    pub swizzle: u32,
}

/// Whether the fusion has TMA or bulk copies or circular buffering (the three passes run only
/// then).
pub fn used(cx: &Ctx) -> bool {
    cx.fusion
        .tensors
        .iter()
        .any(|t| t.load != LoadKind::Plain || t.store != LoadKind::Plain || t.circular.is_some())
}

/// Checks the constant parts of a tensor map: the rules of `cuTensorMapEncodeTiled`.
/// `what` names the tensor in messages.
pub fn check_box(what: &str, elem: i64, box_dims: &[i64], swizzle: u32) -> Result<(), String> {
    if box_dims.is_empty() || box_dims.len() > 5 {
        return Err(format!(
            "{what}: a TMA box has rank 1 to 5, this one has rank {}",
            box_dims.len()
        ));
    }
    for (d, &b) in box_dims.iter().enumerate() {
        if !(1..=256).contains(&b) {
            return Err(format!(
                "{what}: box dimension {d} (innermost first) is {b} elements; a TMA box has 1 to 256 elements per dimension"
            ));
        }
    }
    let row = box_dims[0] * elem;
    if row % 16 != 0 {
        return Err(format!(
            "{what}: the inner box row is {row} bytes ({} x {elem}); TMA needs a multiple of 16 bytes",
            box_dims[0]
        ));
    }
    match swizzle {
        0 => {}
        32 | 64 | 128 => {
            if row != swizzle as i64 {
                return Err(format!(
                    "{what}: with {swizzle}-byte swizzle the inner box row must be exactly {swizzle} bytes, it is {row}"
                ));
            }
        }
        s => {
            return Err(format!(
                "{what}: swizzle must be none, 32, 64 or 128 bytes, got {s}"
            ))
        }
    }
    Ok(())
}

/// One Bulk axis of a box: its path of inner splits from its dimension's root (0 = outer part,
/// 1 = inner part), the axis, its extent and its loop position.
struct BoxPiece {
    path: Vec<u8>,
    id: IterId,
    extent: i64,
    pos: usize,
}

/// The box a tensor's `Bulk` axes (loop axes `pos..`) cover, innermost dimension first.
///
/// The rule: each box dimension is a contiguous part of one dimension of the tensor, the whole
/// dimension or the inner part of a split of it (the outer part is a loop), possibly cut into
/// pieces by further inner splits, every piece Bulk and the outer pieces first; dimensions in
/// order. Shared memory then holds the box row-major, as TMA writes it.
fn box_of(cx: &Ctx, t: TensorId, pos: usize) -> Result<Vec<i64>, Diagnostic> {
    let f = cx.fusion;
    let tensor = &f.tensors[t];
    let name = &tensor.name;
    let err = |m: String| Err(Diagnostic::new(m, tensor.span));
    let logical = f.logical(t);
    let mut box_outer_first = vec![1i64; logical.len()];
    let mut groups: Vec<(usize, Vec<BoxPiece>)> = Vec::new();
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
        match groups.last_mut() {
            Some((d, pieces)) if *d == dim => pieces.push(piece),
            Some((d, pieces)) if *d > dim => {
                return err(format!(
                    "the Bulk axes of `{name}` must follow its dimension order, outermost dimension first, each dimension's pieces together: Bulk axis {p} (dimension {dim}) comes after Bulk axis {} (dimension {d}); shared memory holds the box row-major",
                    pieces.last().map_or(p, |x| x.pos)
                ))
            }
            _ => groups.push((dim, vec![piece])),
        }
    }
    for (dim, pieces) in groups {
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
        box_outer_first[dim] = product;
    }
    Ok(box_outer_first.into_iter().rev().collect())
}

/// Global dims and byte strides of a global tensor (innermost first), checked where constant;
/// rows that must be multiples of 16 bytes at run time become plan constraints.
fn global_layout(
    cx: &mut Ctx,
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
            cx,
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

fn need_divisible(
    cx: &mut Ctx,
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
            if !cx.constraints.contains(&c) {
                cx.constraints.push(c);
            }
            Ok(())
        }
    }
}

/// Innermost serial (non-hardware) loop among `keys`.
fn serial_loop(body: &[Stmt], keys: &[LoopKey]) -> Option<LoopKey> {
    keys.iter()
        .rev()
        .find(|&&key| loop_parallel(body, key).is_some_and(|p| !p.is_hw()))
        .copied()
}

pub fn run_plan(cx: &mut Ctx, k: &mut Kernel) -> Result<(), Diagnostic> {
    cx.issuer = issuer(k);
    let f = cx.fusion;
    for t in 0..f.tensors.len() {
        if !cx.placement.contains_key(&t) {
            continue;
        }
        if f.tensors[t].load != LoadKind::Plain || f.tensors[t].circular.is_some() {
            plan_load(cx, k, t)?;
        }
        if f.tensors[t].store != LoadKind::Plain {
            plan_store(cx, k, t)?;
        }
    }
    // Barriers of each pipeline: full when a copy fills its slots, empty with war=mbarrier.
    let threads: Option<i64> = k.block.iter().map(|b| b.as_const()).product();
    if cx
        .pipes
        .iter()
        .filter(|p| cx.tma[p.members[0]].ws().is_some())
        .count()
        > 1
    {
        return Err(Diagnostic::new(
            "warp specialization splits the block once: only one loop may be warp-specialized",
            None,
        ));
    }
    for p in 0..cx.pipes.len() {
        let pipe = cx.pipes[p].clone();
        let first = &f.tensors[cx.tma[pipe.members[0]].tensor];
        if let Some(spec) = cx.tma[pipe.members[0]].ws() {
            let plan = plan_ws(cx, k, &pipe, spec)?;
            cx.pipes[p].ws = Some(plan);
            continue;
        }
        let copies = pipe
            .members
            .iter()
            .any(|&m| cx.tma[m].kind != LoadKind::Plain);
        let base = match pipe.loop_key {
            Some(key) if pipe.members.len() > 1 => cx.keys.names[key].clone(),
            _ => first.name.clone(),
        };
        if copies {
            k.mbarriers.push(MbarArray {
                name: cx.fresh_name(&format!("{base}_full")),
                count: pipe.stages,
                arrivals: 1,
                smem_offset: None,
            });
            cx.pipes[p].full = Some(k.mbarriers.len() - 1);
        }
        if pipe.war == WarMode::Mbarrier {
            let Some(threads) = threads else {
                return Err(Diagnostic::new(
                    format!("`{}`: war=mbarrier counts one arrival per warp, so the block size must be known at compile time", first.name),
                    first.circular.map(|c| c.span),
                ));
            };
            k.mbarriers.push(MbarArray {
                name: cx.fresh_name(&format!("{base}_empty")),
                count: pipe.stages,
                arrivals: if threads % 32 == 0 {
                    threads / 32
                } else {
                    threads
                },
                smem_offset: None,
            });
            cx.pipes[p].empty = Some(k.mbarriers.len() - 1);
        }
    }
    Ok(())
}

/// The thread that issues copies and initialises barriers: one elected lane of warp 0 when the
/// block is made of whole warps (the predicate is warp-uniform up to `elect.sync`, which the
/// whole warp executes), thread 0 otherwise.
fn issuer(k: &Kernel) -> Val {
    let threads: Option<i64> = k.block.iter().map(|b| b.as_const()).product();
    if threads.is_some_and(|n| n % 32 == 0) {
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

fn plan_load(cx: &mut Ctx, k: &mut Kernel, t: TensorId) -> Result<(), Diagnostic> {
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
    if tensor.load != LoadKind::Plain && cx.uses[t].is_empty() {
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
    let (keys, q) = cx.placement[&t].clone();
    let pos = tensor.loop_domain.len() - (keys.len() - q);
    let elem = tensor.dtype.size_bytes() as i64;
    let mut info = TmaInfo {
        tensor: t,
        src,
        kind: tensor.load,
        stage_elems: None,
        bytes: 0,
        map: None,
        box_dims: Vec::new(),
        global_dims: Vec::new(),
        pipe: 0,
        circular: tensor.circular,
        swizzle: tensor.swizzle,
    };
    if tensor.load != LoadKind::Plain {
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
        let box_dims = box_of(cx, t, pos)?;
        let what = format!(
            "`{name}` ({} load of `{}`)",
            tensor.load.name(),
            f.tensors[src].name
        );
        check_box(&what, elem, &box_dims, tensor.swizzle).or_else(err)?;
        if tensor.load == LoadKind::Bulk && box_dims[1..].iter().any(|&b| b != 1) {
            return err(format!(
                "{what}: a bulk copy moves one contiguous run, so only the innermost dimension may be Bulk (use load=tma for boxes of several dimensions)"
            ));
        }
        let src_name = f.tensors[src].name.clone();
        let owner = format!("{} load of `{src_name}` into `{name}`", tensor.load.name());
        let (global_dims, global_strides) =
            global_layout(cx, src, elem, &what, &owner, tensor.span)?;
        if tensor.load == LoadKind::Bulk {
            need_divisible(
                cx,
                &global_dims[0],
                box_dims[0],
                &what,
                &owner,
                "a bulk copy has no out-of-bounds handling, so the innermost dimension must be a multiple of the run",
                tensor.span,
            )?;
        }
        // Enclosing loops: none bound to threads (one thread issues the copy for the block).
        for &key in &keys[..q] {
            if let Some(p) = loop_parallel(&k.body, key) {
                if p.is_thread() {
                    return err(format!(
                        "`{name}` is loaded by {}, which one thread issues for the whole block: it cannot be inside the thread-parallel loop `{}` ({p}); inline it further out",
                        tensor.load.name(),
                        cx.keys.names[key]
                    ));
                }
            }
        }
        let box_elems: i64 = box_dims.iter().product();
        info.bytes = box_elems * elem;
        let align = stage_align(tensor.swizzle);
        info.stage_elems = Some((info.bytes + align - 1) / align * align / elem);
        if tensor.load == LoadKind::Tma {
            k.tensor_maps.push(TensorMapSpec {
                param: cx.fresh_name(&format!("{name}_map")),
                tensor: src_name,
                dtype: tensor.dtype,
                global_dims: global_dims.clone(),
                global_strides,
                box_dims: box_dims.clone(),
                element_strides: vec![1; box_dims.len()],
                swizzle_bytes: tensor.swizzle,
            });
            info.map = Some(k.tensor_maps.len() - 1);
        }
        info.box_dims = box_dims;
        info.global_dims = global_dims;
    }
    // The pipeline: the innermost serial loop around the load.
    let loop_key = serial_loop(&k.body, &keys[..q]);
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
        if let Some(e) = cx.key_extent(bk).as_const() {
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
    let same_loop = loop_key.and_then(|key| cx.pipes.iter().position(|p| p.loop_key == Some(key)));
    match same_loop {
        Some(p) => {
            let pipe = &cx.pipes[p];
            let other_ws = cx.tma[pipe.members[0]].ws().map(|w| (w.on, w.registers));
            let this_ws = tensor
                .circular
                .and_then(|c| c.ws)
                .map(|w| (w.on, w.registers));
            if other_ws != this_ws {
                let other = &f.tensors[cx.tma[pipe.members[0]].tensor].name;
                return err(format!(
                    "`{name}` and `{other}` are loaded in the same loop `{}`: warp-specialize both, on the same thread dim with the same registers (only warp= may differ)",
                    cx.keys.names[loop_key.expect("same loop")]
                ));
            }
            if (pipe.stages, pipe.prefetch, pipe.war) != (stages, prefetch, war) {
                let other = &f.tensors[cx.tma[pipe.members[0]].tensor].name;
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
            info.pipe = p;
            cx.pipes[p].members.push(cx.tma.len());
        }
        None => {
            info.pipe = cx.pipes.len();
            cx.pipes.push(Pipe {
                loop_key,
                stages,
                prefetch,
                war,
                full: None,
                empty: None,
                members: vec![cx.tma.len()],
                ws: None,
            });
        }
    }
    cx.tma.push(info);
    Ok(())
}

/// An output written by TMA from its shared cache: the box of its `Bulk` axes.
fn plan_store(cx: &mut Ctx, k: &mut Kernel, y: TensorId) -> Result<(), Diagnostic> {
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
    let (keys, _) = cx.placement[&y].clone();
    for &key in &keys[..pos] {
        if let Some(p) = loop_parallel(&k.body, key) {
            if p.is_thread() {
                return err(format!(
                    "`{name}` is written by a TMA store, which one thread issues for the whole block: it cannot be inside the thread-parallel loop `{}` ({p})",
                    cx.keys.names[key]
                ));
            }
        }
    }
    let box_dims = box_of(cx, y, pos)?;
    let elem = tensor.dtype.size_bytes() as i64;
    let what = format!("`{name}` (TMA store from `{}`)", f.tensors[cache].name);
    check_box(&what, elem, &box_dims, tensor.swizzle).or_else(err)?;
    let owner = format!("TMA store of `{}` into `{name}`", f.tensors[cache].name);
    let (global_dims, global_strides) = global_layout(cx, y, elem, &what, &owner, tensor.span)?;
    k.tensor_maps.push(TensorMapSpec {
        param: cx.fresh_name(&format!("{name}_map")),
        tensor: name.clone(),
        dtype: tensor.dtype,
        global_dims,
        global_strides,
        box_dims: box_dims.clone(),
        element_strides: vec![1; box_dims.len()],
        swizzle_bytes: tensor.swizzle,
    });
    cx.stores.push(StoreInfo {
        tensor: y,
        cache,
        map: k.tensor_maps.len() - 1,
        bytes: box_dims.iter().product::<i64>() * elem,
        box_dims,
        fence: tensor.fence,
        swizzle: tensor.swizzle,
    });
    Ok(())
}

/// Parallel type of the loop with key `key`, if the kernel has one.
fn loop_parallel(body: &[Stmt], key: LoopKey) -> Option<ParallelType> {
    for s in body {
        match s {
            Stmt::Loop(l) => {
                if l.key == key {
                    return Some(l.parallel);
                }
                if let Some(p) = loop_parallel(&l.body, key) {
                    return Some(p);
                }
            }
            Stmt::If { then, els, .. } => {
                if let Some(p) = loop_parallel(then, key).or_else(|| loop_parallel(els, key)) {
                    return Some(p);
                }
            }
            _ => {}
        }
    }
    None
}

pub fn run_issue(cx: &mut Ctx, k: &mut Kernel) -> Result<(), Diagnostic> {
    let mut env = cx.hw_env(k);
    let mut body = std::mem::take(&mut k.body);
    issue_block(cx, k, &mut body, &mut env)?;
    // Swizzled boxes: every element access of the buffer goes through the swizzle (the copies
    // address the box's start, which the swizzle keeps in place).
    let swizzled: HashMap<BufferId, (i64, u32)> = (0..k.buffers.len())
        .filter_map(|b| {
            let sw = cx.box_swizzle(b)?;
            Some((b, (k.buffers[b].dtype.size_bytes() as i64, sw)))
        })
        .collect();
    if !swizzled.is_empty() {
        let mut swizzle = |a: &mut Access| {
            if let Some(&(elem, sw)) = swizzled.get(&a.buffer) {
                let i = a.index.take().unwrap_or(Val::Int(0));
                a.index = Some(swizzled_index(i, elem, sw));
            }
        };
        // Inside a tensor-core product's tile (three Mma loops) the operands are read through
        // matrix descriptors, whose swizzle mode applies the same mapping in hardware (the
        // `mma` pass reads the logical index there).
        fn product_tile(l: &Loop) -> bool {
            let mut depth = 0;
            let mut cur = l;
            loop {
                depth += 1;
                match cur.body.as_slice() {
                    [Stmt::Loop(inner)] if inner.parallel == ParallelType::Mma => cur = inner,
                    _ => return depth >= 3,
                }
            }
        }
        fn outside_mma(body: &mut [Stmt], f: &mut dyn FnMut(&mut crate::kir::Compute)) {
            for s in body {
                match s {
                    Stmt::Loop(l) if l.parallel == ParallelType::Mma && product_tile(l) => {}
                    Stmt::Loop(l) => outside_mma(&mut l.body, f),
                    Stmt::If { then, els, .. } => {
                        outside_mma(then, f);
                        outside_mma(els, f);
                    }
                    Stmt::WarpRoles {
                        producer, consumer, ..
                    } => {
                        outside_mma(producer, f);
                        outside_mma(consumer, f);
                    }
                    Stmt::Compute(c) => f(c),
                    _ => {}
                }
            }
        }
        outside_mma(&mut body, &mut |c| {
            swizzle(&mut c.out);
            c.value.for_each_read_mut(&mut swizzle);
        });
    }
    k.body = body;
    Ok(())
}

fn issue_block(
    cx: &mut Ctx,
    k: &Kernel,
    body: &mut [Stmt],
    env: &mut HashMap<LoopKey, Val>,
) -> Result<(), Diagnostic> {
    for s in body.iter_mut() {
        match s {
            Stmt::Loop(l) if l.parallel == ParallelType::Bulk => {
                *s = box_copy(cx, k, l, env)?;
            }
            Stmt::Loop(l) => {
                let prev = env.insert(l.key, Val::Var(l.var.clone()));
                issue_block(cx, k, &mut l.body, env)?;
                match prev {
                    Some(p) => env.insert(l.key, p),
                    None => env.remove(&l.key),
                };
            }
            Stmt::If { then, els, .. } => {
                issue_block(cx, k, then, env)?;
                issue_block(cx, k, els, env)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// The copy of the whole box that a nest of `Bulk` loops around one copy stands for: a load
/// into a cache, or a store of an output from its cache.
fn box_copy(
    cx: &mut Ctx,
    k: &Kernel,
    l: &Loop,
    env: &HashMap<LoopKey, Val>,
) -> Result<Stmt, Diagnostic> {
    let mut env = env.clone();
    let mut vars = Vec::new();
    let mut extents = Vec::new();
    let mut cur = l;
    let compute = loop {
        env.insert(cur.key, Val::Var(cur.var.clone()));
        vars.push(cur.var.clone());
        extents.push(match cur.extent {
            Val::Int(e) => e,
            _ => 0,
        });
        match cur.body.as_slice() {
            [Stmt::Loop(inner)] if inner.parallel == ParallelType::Bulk => cur = inner,
            [Stmt::Compute(c)] => break c,
            _ => {
                return Err(Diagnostic::new(
                    format!(
                        "internal: the Bulk loop `{}` does not hold exactly one copy",
                        l.var
                    ),
                    None,
                ))
            }
        }
    };
    let f = cx.fusion;
    let t = f.exprs[compute.expr].output;
    let zero = |v: &Val| {
        let z = vars
            .iter()
            .fold(v.clone(), |acc, var| acc.subst(var, &Val::Int(0)));
        super::simplify::simplify(&z, &HashMap::new())
    };
    // Box origin: the global tensor's root indices with the box axes at 0.
    let roots = consumer_roots(cx, t, &env);
    let mut coords = Vec::new();
    for r in f.logical(t).into_iter().rev() {
        let v = roots.get(&f.class_of(r)).ok_or_else(|| {
            Diagnostic::new(
                format!(
                    "cannot index the box of `{}`: a dimension has no index where it is copied",
                    f.tensors[t].name
                ),
                f.tensors[t].span,
            )
        })?;
        coords.push(zero(v));
    }
    let Data::Read(src) = &compute.value else {
        return Err(Diagnostic::new(
            "internal: a cache copy reads a tensor",
            None,
        ));
    };
    if let Some(store) = cx.stores.iter().find(|s| s.tensor == t).cloned() {
        check_box_layout(cx, k, &store, src, &vars, &extents)?;
        return Ok(Stmt::TmaStore(TmaStore {
            map: store.map,
            src: Access {
                buffer: src.buffer,
                index: src.index.as_ref().map(zero),
            },
            coords,
            bytes: store.bytes,
        }));
    }
    let Some(info) = cx.tma.iter().find(|i| i.tensor == t).cloned() else {
        return Err(Diagnostic::new(
            format!(
                "`{}` has Bulk axes but is not a TMA or bulk copy",
                f.tensors[t].name
            ),
            f.tensors[t].span,
        ));
    };
    let src = Access {
        buffer: src.buffer,
        index: src.index.as_ref().map(zero),
    };
    Ok(Stmt::TmaLoad(TmaLoad {
        kind: match info.map {
            Some(map) => CopyKind::Tile { map },
            None => CopyKind::Bulk,
        },
        dst: Access {
            buffer: compute.out.buffer,
            index: Some(Val::Int(0)),
        },
        src,
        coords,
        bytes: info.bytes,
        bars: full_of(cx, t),
        slot: Val::Int(0),
    }))
}

/// The full barriers a load of cache `t` completes on (its role's, when warp-specialized).
fn full_of(cx: &Ctx, t: TensorId) -> usize {
    let m = cx
        .tma
        .iter()
        .position(|i| i.tensor == t)
        .expect("a planned load");
    let pipe = &cx.pipes[cx.tma[m].pipe];
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

/// A TMA store reads its box row-major from shared memory: the cache must be laid out that way
/// (its index at the box axes must step by the row-major strides of the box).
fn check_box_layout(
    cx: &Ctx,
    k: &Kernel,
    store: &StoreInfo,
    src: &Access,
    vars: &[String],
    extents: &[i64],
) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    let index = src.index.clone().unwrap_or(Val::Int(0));
    // `vars` are the Bulk loops, outermost first, with their constant `extents` (several may
    // split one box dimension). Row-major over the box is row-major over these loops when the
    // loops cover the box in order; the box's element count must match too.
    let box_elements: i64 = store.box_dims.iter().product();
    let loop_elements: i64 = extents.iter().product();
    let (vars, extents): (Vec<String>, Vec<i64>) = vars
        .iter()
        .cloned()
        .zip(extents.iter().copied())
        .filter(|&(_, e)| e != 1)
        .unzip();
    // The element of the box at `point` relative to its first one (the same for every value
    // of the loops around the box: probed), so a box may start anywhere in the buffer (one of
    // several boxes of a tile).
    let point_index = |point: &[i64]| {
        vars.iter()
            .zip(point)
            .fold(index.clone(), |acc, (var, &x)| acc.subst(var, &Val::Int(x)))
    };
    let zero = vec![0i64; vars.len()];
    let origin = point_index(&zero);
    let at = |point: &[i64]| -> Option<i64> {
        let v = point_index(point);
        let mut found = None;
        for seed in 0..4u64 {
            let d = super::predicate::eval(&v, "", 0, seed, &[], 1)?
                - super::predicate::eval(&origin, "", 0, seed, &[], 1)?;
            if found.is_some_and(|f| f != d) {
                return None;
            }
            found = Some(d);
        }
        found
    };
    // A swizzled box starts on its pattern's repeat (1024 bytes), whatever the loops around.
    let elem = k.buffers[src.buffer].dtype.size_bytes() as i64;
    let repeat = stage_align(store.swizzle) / elem;
    let aligned_start = (0..4u64).all(|seed| {
        super::predicate::eval(&origin, "", 0, seed, &[], 1).is_some_and(|o| o % repeat == 0)
    });
    let mut ok = box_elements == loop_elements && at(&zero) == Some(0) && aligned_start;
    let mut stride = 1i64;
    for d in (0..vars.len()).rev() {
        if !ok {
            break;
        }
        let mut point = zero.clone();
        point[d] = extents[d] - 1;
        ok = at(&point) == Some((extents[d] - 1) * stride);
        stride *= extents[d];
    }
    let last: Vec<i64> = extents.iter().map(|e| e - 1).collect();
    ok = ok && at(&last) == Some(stride - 1);
    if ok {
        return Ok(());
    }
    let cache = &f.tensors[store.cache];
    Err(Diagnostic::new(
        format!(
            "`{}` is read by the TMA store of `{}` as a row-major box of {:?} (innermost first), but its shared-memory layout differs ({} in {}): schedule its own axes like the Bulk axes of `{}`, in the same order",
            cache.name,
            f.tensors[store.tensor].name,
            store.box_dims,
            k.buffers[src.buffer].name,
            index.text(),
            f.tensors[store.tensor].name
        ),
        cache.span,
    ))
}

pub fn run_circular(cx: &mut Ctx, k: &mut Kernel) -> Result<(), Diagnostic> {
    let issuer = cx.issuer.clone();
    let mut body = std::mem::take(&mut k.body);
    for p in 0..cx.pipes.len() {
        if cx.pipes[p].ws.is_some() {
            continue;
        }
        if !pipeline(cx, &mut body, p, &Val::Int(0), false)? {
            let f = cx.fusion;
            let t = cx.tma[cx.pipes[p].members[0]].tensor;
            return Err(Diagnostic::new(
                format!(
                    "internal: the load of `{}` was not found",
                    f.tensors[t].name
                ),
                None,
            ));
        }
    }
    let stores = cx.stores.clone();
    for s in &stores {
        issue_stores(cx, &mut body, s, &issuer);
    }
    if k.mbarriers.is_empty() {
        k.body = body;
        return Ok(());
    }
    // Init once at entry, invalidate once at exit (by the consumers when the producers have
    // left: their last barrier is a named one, and they waited on every copy).
    let init = (0..k.mbarriers.len())
        .map(|bars| Stmt::MbarInit { bars })
        .collect();
    let inval: Vec<Stmt> = (0..k.mbarriers.len())
        .map(|bars| Stmt::MbarInval { bars })
        .collect();
    let mut out = vec![guard(issuer.clone(), init), Stmt::Sync];
    match cx.pipes.iter().position(|p| p.ws.is_some()) {
        Some(p) => {
            let mut roles = warp_specialize(cx, body, p)?;
            if let Stmt::WarpRoles { consumer, .. } = &mut roles {
                consumer.push(Stmt::Sync);
                consumer.push(guard(issuer, inval));
            }
            out.push(roles);
        }
        None => {
            out.extend(body);
            out.push(Stmt::Sync);
            out.push(guard(issuer, inval));
        }
    }
    k.body = out;
    Ok(())
}

fn guard(cond: Val, body: Vec<Stmt>) -> Stmt {
    if cond == Val::True && body.len() == 1 {
        return body.into_iter().next().expect("one statement");
    }
    Stmt::If {
        cond,
        then: body,
        els: Vec::new(),
    }
}

/// Buffers a statement writes (copies included).
fn writes(s: &Stmt, out: &mut Vec<BufferId>) {
    match s {
        Stmt::TmaLoad(t) => out.push(t.dst.buffer),
        Stmt::Compute(c) => out.push(c.out.buffer),
        Stmt::Loop(l) => l.body.iter().for_each(|s| writes(s, out)),
        Stmt::If { then, els, .. } => then.iter().chain(els).for_each(|s| writes(s, out)),
        _ => {}
    }
}

fn fills(s: &Stmt, buffers: &[BufferId]) -> bool {
    let mut w = Vec::new();
    writes(s, &mut w);
    w.iter().any(|b| buffers.contains(b))
}

/// Finds the loads of pipe `p` under `body`; `outer` is the linear iteration of the serial
/// loops entered so far. Rewrites the innermost serial loop around them into the pipeline.
fn pipeline(
    cx: &mut Ctx,
    body: &mut Vec<Stmt>,
    p: usize,
    outer: &Val,
    in_loop: bool,
) -> Result<bool, Diagnostic> {
    let pipe = &cx.pipes[p];
    let f = cx.fusion;
    let members: Vec<&TmaInfo> = pipe.members.iter().map(|&m| &cx.tma[m]).collect();
    let buffers: Vec<BufferId> = members
        .iter()
        .map(|i| cx.tensor_buffer[&i.tensor])
        .collect();
    let name = &f.tensors[members[0].tensor].name;
    let span = f.tensors[members[0].tensor].span;
    let Some(i) = body.iter().position(|s| match s {
        Stmt::Loop(_) | Stmt::TmaLoad(_) => fills(s, &buffers),
        _ => false,
    }) else {
        return Ok(false);
    };
    if let Stmt::TmaLoad(_) = &body[i] {
        if pipe.loop_key.is_some() {
            return Err(Diagnostic::new(
                format!(
                    "the load of `{name}` is separated from the serial loop around it by block-index loops: put the serial loops inside the blockIdx-bound ones"
                ),
                span,
            ));
        }
        // No serial loop around the loads: one load of each, waited on once.
        let is_load = |s: &Stmt| matches!(s, Stmt::TmaLoad(t) if buffers.contains(&t.dst.buffer));
        let loads: Vec<Stmt> = body.iter().filter(|s| is_load(s)).cloned().collect();
        body.retain(|s| !is_load(s));
        let stmts = vec![
            issue(
                cx,
                pipe.stages,
                pipe.full.expect("copies have full barriers"),
                pipe.empty,
                &loads,
                &Val::Int(0),
                &Val::Int(0),
                &cx.issuer,
            ),
            Stmt::MbarWait {
                bars: pipe.full.expect("copies have full barriers"),
                slot: Val::Int(0),
                parity: Val::Int(0),
            },
        ];
        body.splice(i..i, stmts);
        return Ok(true);
    }
    let Stmt::Loop(l) = &mut body[i] else {
        unreachable!()
    };
    if Some(l.key) != pipe.loop_key {
        if l.parallel.is_hw() {
            return pipeline(cx, &mut l.body, p, outer, in_loop);
        }
        let lin = linear(outer, &l.extent, &Val::Var(l.var.clone()), in_loop);
        return pipeline(cx, &mut l.body, p, &lin, true);
    }
    // `l` is the buffered loop: its direct children that fill a member buffer are the loads.
    let Stmt::Loop(l) = body.remove(i) else {
        unreachable!()
    };
    let (s, pf) = (pipe.stages, pipe.prefetch);
    let var = l.var.clone();
    let at = |v: &Val| linear(outer, &l.extent, v, in_loop);
    let slot = |lin: &Val| {
        if s == 1 {
            Val::Int(0)
        } else {
            Val::rem(lin.clone(), Val::Int(s))
        }
    };
    let parity = |lin: &Val| {
        if s == 1 {
            Val::rem(lin.clone(), Val::Int(2))
        } else {
            Val::rem(Val::div(lin.clone(), Val::Int(s)), Val::Int(2))
        }
    };
    let mut copies = Vec::new();
    let mut plain = Vec::new();
    let mut allocs = Vec::new();
    let mut rest = Vec::new();
    for st in l.body.iter().cloned() {
        match &st {
            Stmt::TmaLoad(t) if buffers.contains(&t.dst.buffer) => copies.push(st),
            Stmt::Alloc(b) if buffers.contains(b) => allocs.push(st),
            _ if fills(&st, &buffers) => {
                if contains_copy(&st) {
                    return Err(Diagnostic::new(
                        format!(
                            "the load of `{name}` is separated from the serial loop `{var}` that pipelines it by other loops: it must be issued directly in `{var}` (put block-index loops outside it)"
                        ),
                        span,
                    ));
                }
                plain.push(st)
            }
            _ => rest.push(st),
        }
    }
    let stage_of = |b: BufferId| cx.stage_elems[&b].clone();
    // Moves the loads to iteration `v`, each into its slot.
    let issue_at = |v: &Val| -> Vec<Stmt> {
        let sl = slot(&at(v));
        let mut out = Vec::new();
        let moved: Vec<Stmt> = copies
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c.map_vals(&mut |x| x.subst(&var, v));
                c
            })
            .collect();
        if !moved.is_empty() {
            out.push(issue(
                cx,
                pipe.stages,
                pipe.full.expect("copies have full barriers"),
                pipe.empty,
                &moved,
                &sl,
                &at(v),
                &cx.issuer,
            ));
        }
        for st in &plain {
            let mut st = st.clone();
            st.map_vals(&mut |x| x.subst(&var, v));
            for &b in &buffers {
                shift_writes(&mut st, b, &Val::mul(sl.clone(), stage_of(b)));
            }
            out.push(st);
        }
        out
    };
    let v = Val::Var(var.clone());
    for &b in &buffers {
        shift_reads(&mut rest, b, &Val::mul(slot(&at(&v)), stage_of(b)));
    }
    let mut iteration = Vec::new();
    if !copies.is_empty() {
        iteration.push(Stmt::MbarWait {
            bars: pipe.full.expect("copies have full barriers"),
            slot: slot(&at(&v)),
            parity: parity(&at(&v)),
        });
    }
    iteration.extend(rest);
    if let Some(empty) = pipe.empty {
        iteration.push(Stmt::MbarArrive {
            bars: empty,
            slot: slot(&at(&v)),
            per_warp: cx.issuer != Val::True && matches!(cx.issuer, Val::And(..)),
        });
    }
    let mut out: Vec<Stmt> = allocs;
    let extent = l.extent.clone();
    if pf == 0 {
        let mut b = issue_at(&v);
        b.extend(iteration);
        out.push(Stmt::Loop(Loop { body: b, ..l }));
    } else {
        let known = match extent {
            Val::Int(e) => Some(e),
            _ => None,
        };
        // Prologue: loads of iterations [0, prefetch).
        let first = issue_at(&v);
        let pro_body = if known.is_some_and(|e| e >= pf) {
            first
        } else {
            vec![guard(Val::lt(v.clone(), extent.clone()), first)]
        };
        out.push(Stmt::Loop(Loop {
            key: l.key,
            var: var.clone(),
            extent: Val::Int(pf),
            parallel: ParallelType::Serial,
            body: pro_body,
        }));
        // Main: issue iteration i + prefetch, then run iteration i.
        let main_extent = match known {
            Some(e) => Val::Int(e - pf),
            None => Val::Sub(Box::new(extent.clone()), Box::new(Val::Int(pf))),
        };
        let mut main = issue_at(&Val::add(v.clone(), Val::Int(pf)));
        main.extend(iteration.clone());
        out.push(Stmt::Loop(Loop {
            key: l.key,
            var: var.clone(),
            extent: main_extent.clone(),
            parallel: l.parallel,
            body: main,
        }));
        // Epilogue: the last `prefetch` iterations, no loads.
        let epi = cx.fresh_name(&format!("{var}_epi"));
        let mut epi_body = vec![Stmt::Let {
            var: var.clone(),
            value: Val::add(main_extent, Val::Var(epi.clone())),
        }];
        if known.is_some_and(|e| e >= pf) {
            epi_body.extend(iteration);
        } else {
            epi_body.push(Stmt::If {
                cond: Val::lt(Val::Int(-1), v.clone()),
                then: iteration,
                els: Vec::new(),
            });
        }
        out.push(Stmt::Loop(Loop {
            key: l.key,
            var: epi,
            extent: Val::Int(pf),
            parallel: ParallelType::Serial,
            body: epi_body,
        }));
    }
    body.splice(i..i, out);
    Ok(true)
}

fn contains_copy(s: &Stmt) -> bool {
    match s {
        Stmt::TmaLoad(_) => true,
        Stmt::Loop(l) => l.body.iter().any(contains_copy),
        Stmt::If { then, els, .. } => then.iter().chain(els).any(contains_copy),
        _ => false,
    }
}

/// `outer * extent + v`, or `v` at the outermost serial loop.
fn linear(outer: &Val, extent: &Val, v: &Val, in_loop: bool) -> Val {
    if in_loop {
        Val::add(Val::mul(outer.clone(), extent.clone()), v.clone())
    } else {
        v.clone()
    }
}

/// The issuing thread fills `slot` (linear iteration `lin`) with `loads`: it waits until the
/// slot is empty (empty barriers), announces the bytes and issues the copies.
#[allow(clippy::too_many_arguments)]
fn issue(
    cx: &Ctx,
    stages: i64,
    full: usize,
    empty: Option<usize>,
    loads: &[Stmt],
    slot: &Val,
    lin: &Val,
    issuer: &Val,
) -> Stmt {
    let mut out = Vec::new();
    if let Some(empty) = empty {
        // Slot `lin % stages` was last read in iteration `lin - stages`: phase
        // `lin / stages - 1` of its empty barrier. A fresh barrier counts its preceding phase
        // (parity 1) as complete, so the first `stages` loads pass at once.
        out.push(Stmt::MbarWait {
            bars: empty,
            slot: slot.clone(),
            parity: Val::rem(
                Val::add(Val::div(lin.clone(), Val::Int(stages)), Val::Int(1)),
                Val::Int(2),
            ),
        });
    }
    let mut unconditional = Vec::new();
    let mut bytes = 0;
    for st in loads {
        let Stmt::TmaLoad(t) = st else { continue };
        let info = cx
            .tma
            .iter()
            .find(|i| cx.tensor_buffer[&i.tensor] == t.dst.buffer)
            .expect("a load of the pipe");
        let mut t = t.clone();
        t.dst.index = Some(Val::mul(
            slot.clone(),
            Val::Int(info.stage_elems.expect("copies have a stage size")),
        ));
        t.slot = slot.clone();
        if info.kind == LoadKind::Bulk {
            // A bulk copy must stay inside the tensor: a run outside it is not copied and
            // announces no bytes. (The innermost dimension is a multiple of the run.)
            let inside = Val::all(
                t.coords
                    .iter()
                    .zip(&info.global_dims)
                    .map(|(c, g)| Val::lt(c.clone(), Val::from_size(g))),
            );
            if inside != Val::True {
                // Announced before the arrival below, so the phase cannot complete without it.
                out.push(Stmt::If {
                    cond: inside,
                    then: vec![
                        Stmt::MbarExpectTx {
                            bars: full,
                            slot: slot.clone(),
                            bytes: info.bytes,
                        },
                        Stmt::TmaLoad(t),
                    ],
                    els: Vec::new(),
                });
                continue;
            }
        }
        bytes += info.bytes;
        unconditional.push(Stmt::TmaLoad(t));
    }
    out.push(Stmt::MbarArriveExpectTx {
        bars: full,
        slot: slot.clone(),
        bytes,
    });
    out.extend(unconditional);
    guard(issuer.clone(), out)
}

/// Wraps every TMA store of `s` in the issuing thread's guard, commits it as a bulk group and
/// waits until shared memory has been read (the cache may then be written again), with the
/// async-proxy fence where the store's fence mode puts it.
fn issue_stores(cx: &Ctx, body: &mut Vec<Stmt>, s: &StoreInfo, issuer: &Val) {
    let cache = cx.tensor_buffer[&s.cache];
    let mut i = 0;
    while i < body.len() {
        match &mut body[i] {
            Stmt::TmaStore(t) if t.map == s.map => {
                let store = body.remove(i);
                let elected = vec![store, Stmt::BulkCommit, Stmt::BulkWaitRead(0)];
                let issue = match (s.fence, issuer) {
                    (FenceMode::IssuingWarp, Val::And(warp, elect)) => Stmt::If {
                        cond: (**warp).clone(),
                        then: vec![Stmt::FenceProxyAsync, guard((**elect).clone(), elected)],
                        els: Vec::new(),
                    },
                    (FenceMode::IssuingWarp, _) => {
                        let mut v = vec![Stmt::FenceProxyAsync];
                        v.extend(elected);
                        guard(issuer.clone(), v)
                    }
                    _ => guard(issuer.clone(), elected),
                };
                body.insert(i, issue);
            }
            Stmt::Compute(c) if s.fence == FenceMode::PerStore && c.out.buffer == cache => {
                body.insert(i + 1, Stmt::FenceProxyAsync);
                i += 1;
            }
            Stmt::Loop(l) => issue_stores(cx, &mut l.body, s, issuer),
            Stmt::If { then, els, .. } => {
                issue_stores(cx, then, s, issuer);
                issue_stores(cx, els, s, issuer);
            }
            _ => {}
        }
        i += 1;
    }
}

/// Adds `offset` to every read of `buffer`.
fn shift_reads(body: &mut [Stmt], buffer: usize, offset: &Val) {
    for s in body {
        match s {
            Stmt::Compute(c) => c.value.for_each_read_mut(&mut |a| {
                if a.buffer == buffer {
                    shift(a, offset)
                }
            }),
            Stmt::TmaStore(t) if t.src.buffer == buffer => shift(&mut t.src, offset),
            Stmt::Loop(l) => shift_reads(&mut l.body, buffer, offset),
            Stmt::If { then, els, .. } => {
                shift_reads(then, buffer, offset);
                shift_reads(els, buffer, offset);
            }
            _ => {}
        }
    }
}

fn shift(a: &mut Access, offset: &Val) {
    let i = a.index.take().unwrap_or(Val::Int(0));
    a.index = Some(Val::add(offset.clone(), i));
}

/// Adds `offset` to every plain write of `buffer`.
fn shift_writes(s: &mut Stmt, buffer: usize, offset: &Val) {
    match s {
        Stmt::Compute(c) if c.out.buffer == buffer => shift(&mut c.out, offset),
        Stmt::Loop(l) => l
            .body
            .iter_mut()
            .for_each(|s| shift_writes(s, buffer, offset)),
        Stmt::If { then, els, .. } => then
            .iter_mut()
            .chain(els.iter_mut())
            .for_each(|s| shift_writes(s, buffer, offset)),
        _ => {}
    }
}

/// Register counts of `setmaxnreg`: multiples of 8 in 24..256, producer <= the count every
/// thread starts with <= consumer, and the block's total within the 64K register file and
/// equal to what it is launched with.
pub fn check_registers(
    producer: u32,
    consumer: u32,
    threads: i64,
    producer_threads: i64,
) -> Result<(), String> {
    for (who, r) in [("producer", producer), ("consumer", consumer)] {
        if !(24..=256).contains(&r) || r % 8 != 0 {
            return Err(format!(
                "the {who} register count is {r}; setmaxnreg takes a multiple of 8 from 24 to 256"
            ));
        }
    }
    let entry = ((65536 / threads).min(255) / 8 * 8) as u32;
    if producer > entry || entry > consumer {
        return Err(format!(
            "registers=[{producer}, {consumer}]: with {threads} threads every thread starts with {entry} registers, and setmaxnreg needs producer <= {entry} <= consumer"
        ));
    }
    let total = producer as i64 * producer_threads + consumer as i64 * (threads - producer_threads);
    if total > 65536 {
        return Err(format!(
            "registers=[{producer}, {consumer}]: {producer} x {producer_threads} producer threads + {consumer} x {} consumer threads = {total} registers, more than the 65536 of an SM",
            threads - producer_threads
        ));
    }
    // setmaxnreg moves registers between warp groups of one allocation: what the producers
    // give up must be what the consumers take, else `.inc` can wait forever for registers no
    // one frees (the CUTLASS hang with 24/232/232 against 3 x 168).
    let launch = entry as i64 * threads;
    if total != launch {
        let groups = threads / 128;
        return Err(format!(
            "registers=[{producer}, {consumer}]: {producer} x {producer_threads} producer threads + {consumer} x {} consumer threads = {total} registers, but the block is launched with {entry} x {threads} = {launch}; the counts must move registers between warp groups, not add any (e.g. producer + {} x consumer = {} per thread of each group)",
            threads - producer_threads,
            groups - 1,
            entry as i64 * groups
        ));
    }
    Ok(())
}

/// Pads the specialised thread dim with a 128-thread producer warp group and gives every
/// producer role (warp) its own full and empty barriers.
fn plan_ws(
    cx: &mut Ctx,
    k: &mut Kernel,
    pipe: &Pipe,
    spec: crate::fusion::WarpSpecialized,
) -> Result<WsPlan, Diagnostic> {
    let f = cx.fusion;
    let first = &f.tensors[cx.tma[pipe.members[0]].tensor];
    let span = first.circular.map(|c| c.span);
    let diag = |m: String| Diagnostic::new(format!("`{}`: {m}", first.name), span);
    let err = |m: String| Err(diag(m));
    let d = spec.on.dim().expect("a thread dim");
    let mut dims = [0i64; 3];
    for (i, b) in k.block.iter().enumerate() {
        match b.as_const() {
            Some(v) => dims[i] = v,
            None => {
                return err(format!(
                    "warp_specialized({}) needs a block size known at compile time, and thread dim {} is {b}: split the axes bound to threads by constants",
                    spec.on,
                    ["x", "y", "z"][i]
                ))
            }
        }
    }
    let others: i64 = (0..3).filter(|&i| i != d).map(|i| dims[i]).product();
    if 128 % others != 0 {
        return err(format!(
            "warp_specialized({}) adds a 128-thread producer warp group along {}, so the other thread dims must multiply to a divisor of 128; they multiply to {others}",
            spec.on,
            ["x", "y", "z"][d]
        ));
    }
    let pad = 128 / others;
    let consumer_threads: i64 = dims.iter().product();
    // Warps in linear thread order (x fastest): one period of the specialised dim holds the
    // consumer part then the producer part; each part must be whole warps.
    let inner: i64 = dims[..d].iter().product();
    let (consumer_part, producer_part) = (inner * dims[d], inner * pad);
    if consumer_part % 32 != 0 || producer_part % 32 != 0 {
        return err(format!(
            "warp_specialized({}): each warp must have one role, but along {} the consumers take {consumer_part} and the producers {producer_part} consecutive threads (not multiples of 32)",
            spec.on,
            ["x", "y", "z"][d]
        ));
    }
    let period = (consumer_part + producer_part) / 32;
    let base = consumer_part / 32;
    let chunk = producer_part / 32;
    let is_producer = if d == 2 {
        Val::lt(Val::Int(base - 1), Val::Warp)
    } else {
        Val::lt(Val::Int(base - 1), Val::rem(Val::Warp, Val::Int(period)))
    };
    let threads = consumer_threads + 128;
    if let Some((p, c)) = spec.registers {
        check_registers(p, c, threads, 128).map_err(diag)?;
    }
    if threads > 1024 {
        return err(format!(
            "warp_specialized adds 128 producer threads to the {consumer_threads} of the block: {threads} is more than 1024"
        ));
    }
    k.block[d] = SizeExpr::Const(dims[d] + pad);
    k.register_sharing = spec.registers;
    // Roles: one per producer warp named by the loads.
    let mut roles: Vec<WsRole> = Vec::new();
    for &m in &pipe.members {
        let w = cx.tma[m].ws().map(|w| w.warp).unwrap_or(0);
        match roles.iter_mut().find(|r| r.warp == w) {
            Some(r) => r.members.push(m),
            None => roles.push(WsRole {
                warp: w,
                block_warp: (w as i64 / chunk) * period + base + w as i64 % chunk,
                full: 0,
                empty: 0,
                members: vec![m],
            }),
        }
    }
    roles.sort_by_key(|r| r.warp);
    for r in &mut roles {
        let names: Vec<&str> = r
            .members
            .iter()
            .map(|&m| f.tensors[cx.tma[m].tensor].name.as_str())
            .collect();
        let base_name = names.join("_");
        k.mbarriers.push(MbarArray {
            name: cx.fresh_name(&format!("{base_name}_full")),
            count: pipe.stages,
            arrivals: 1,
            smem_offset: None,
        });
        r.full = k.mbarriers.len() - 1;
        k.mbarriers.push(MbarArray {
            name: cx.fresh_name(&format!("{base_name}_empty")),
            count: pipe.stages,
            arrivals: consumer_threads / 32,
            smem_offset: None,
        });
        r.empty = k.mbarriers.len() - 1;
    }
    Ok(WsPlan {
        spec,
        is_producer,
        consumer_threads,
        roles,
    })
}

/// Splits the kernel into the producer warp group and the consumers around pipe `p`.
/// Producer role `r`: one elected lane of its warp walks the loops that enclose its loads
/// (projected from the kernel: every other statement dropped) and, for each iteration `i` of
/// the buffered loop, waits until slot `i % stages` is empty, announces its bytes on its full
/// barrier and issues its copies. Consumers: the kernel without the copies; each iteration of
/// the buffered loop waits on the full barrier of every role and releases every empty one
/// (lane 0 of each warp). Slot and parity come from the same linear iteration on both sides.
fn warp_specialize(cx: &Ctx, body: Vec<Stmt>, p: usize) -> Result<Stmt, Diagnostic> {
    let pipe = &cx.pipes[p];
    let ws = pipe.ws.as_ref().expect("a warp-specialized pipe");
    let f = cx.fusion;
    let name = &f.tensors[cx.tma[pipe.members[0]].tensor].name;
    let span = f.tensors[cx.tma[pipe.members[0]].tensor].span;
    if contains_reduce_over(&body, ws.spec.on) {
        return Err(Diagnostic::new(
            format!(
                "`{name}` is warp-specialized on {} and the kernel reduces across {}: the producer warps would take part; specialise another thread dim",
                ws.spec.on, ws.spec.on
            ),
            span,
        ));
    }
    let mut producer = Vec::new();
    for role in &ws.roles {
        let buffers: Vec<BufferId> = role
            .members
            .iter()
            .map(|&m| cx.tensor_buffer[&cx.tma[m].tensor])
            .collect();
        let nest = flatten_serial_nests(project(
            cx,
            pipe,
            role,
            &buffers,
            &body,
            &Val::Int(0),
            false,
        ));
        if !nest.iter().any(contains_copy) {
            return Err(Diagnostic::new(
                format!(
                    "internal: the loads of producer warp {} were not found",
                    role.warp
                ),
                span,
            ));
        }
        producer.push(Stmt::If {
            cond: Val::eq(Val::Warp, Val::Int(role.block_warp)),
            then: vec![Stmt::If {
                cond: Val::Elect,
                then: nest,
                els: Vec::new(),
            }],
            els: Vec::new(),
        });
    }
    let all: Vec<BufferId> = pipe
        .members
        .iter()
        .map(|&m| cx.tensor_buffer[&cx.tma[m].tensor])
        .collect();
    let mut consumer = body;
    let mut found = false;
    consume(
        cx,
        pipe,
        ws,
        &all,
        &mut consumer,
        &Val::Int(0),
        false,
        &mut found,
    );
    if !found {
        return Err(Diagnostic::new(
            format!("the loads of `{name}` are not inside the serial loop it is buffered over"),
            span,
        ));
    }
    for role in &ws.roles {
        let reads = role.members.iter().any(|&m| {
            let b = cx.tensor_buffer[&cx.tma[m].tensor];
            reads_buffer(&consumer, b)
        });
        if !reads {
            let t = &f.tensors[cx.tma[role.members[0]].tensor].name;
            return Err(Diagnostic::new(
                format!(
                    "producer warp {} loads `{t}`, which no consumer reads",
                    role.warp
                ),
                span,
            ));
        }
    }
    Ok(Stmt::WarpRoles {
        is_producer: ws.is_producer.clone(),
        producer,
        consumer,
        registers: ws.spec.registers,
        consumer_threads: ws.consumer_threads,
    })
}

fn contains_reduce_over(body: &[Stmt], on: ParallelType) -> bool {
    let d = on.dim().expect("a thread dim");
    body.iter().any(|s| match s {
        Stmt::BlockReduce { dims, .. } => dims[d],
        Stmt::Loop(l) => contains_reduce_over(&l.body, on),
        Stmt::If { then, els, .. } => {
            contains_reduce_over(then, on) || contains_reduce_over(els, on)
        }
        _ => false,
    })
}

fn reads_buffer(body: &[Stmt], b: BufferId) -> bool {
    body.iter().any(|s| match s {
        Stmt::Compute(c) => {
            let mut found = false;
            c.value.for_each_read(&mut |a| found |= a.buffer == b);
            found
        }
        Stmt::TmaStore(t) => t.src.buffer == b,
        Stmt::Loop(l) => reads_buffer(&l.body, b),
        Stmt::If { then, els, .. } => reads_buffer(then, b) || reads_buffer(els, b),
        _ => false,
    })
}

/// Turns every perfect nest of serial loops (a loop whose whole body is one serial loop) into
/// one loop over the linear iteration `outer * inner_extent + inner`, recovering both indices
/// by division: a persistent producer walks one flat sequence of (tile, block) pairs, and its
/// slot and parity are that linear count directly.
fn flatten_serial_nests(nest: Vec<Stmt>) -> Vec<Stmt> {
    nest.into_iter()
        .map(|s| match s {
            Stmt::Loop(mut l) => {
                l.body = flatten_serial_nests(std::mem::take(&mut l.body));
                let merge = l.parallel == ParallelType::Serial
                    && matches!(&l.body[..], [Stmt::Loop(inner)]
                        if inner.parallel == ParallelType::Serial && !inner.extent.mentions(&l.var));
                if !merge {
                    return Stmt::Loop(l);
                }
                let Some(Stmt::Loop(inner)) = l.body.pop() else {
                    unreachable!("checked above")
                };
                let var = format!("{}_{}", l.var, inner.var);
                let lin = Val::Var(var.clone());
                let outer_index = Val::div(lin.clone(), inner.extent.clone());
                let inner_index = Val::rem(lin, inner.extent.clone());
                let mut body = inner.body;
                for st in &mut body {
                    st.map_vals(&mut |x| {
                        x.subst(&l.var, &outer_index)
                            .subst(&inner.var, &inner_index)
                    });
                }
                Stmt::Loop(Loop {
                    key: inner.key,
                    var,
                    extent: Val::mul(l.extent, inner.extent),
                    parallel: ParallelType::Serial,
                    body,
                })
            }
            Stmt::If { cond, then, els } => Stmt::If {
                cond,
                then: flatten_serial_nests(then),
                els: flatten_serial_nests(els),
            },
            other => other,
        })
        .collect()
}

/// The loops of `body` that lead to the loads of `role`, with only those loads (issued in the
/// buffered loop) and the declarations they need.
fn project(
    cx: &Ctx,
    pipe: &Pipe,
    role: &WsRole,
    buffers: &[BufferId],
    body: &[Stmt],
    outer: &Val,
    in_loop: bool,
) -> Vec<Stmt> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::Alloc(b) if buffers.contains(b) => out.push(s.clone()),
            Stmt::Let { .. } => out.push(s.clone()),
            Stmt::Loop(l) if fills(s, buffers) => {
                let mut l2 = Loop {
                    key: l.key,
                    var: l.var.clone(),
                    extent: l.extent.clone(),
                    parallel: l.parallel,
                    body: Vec::new(),
                };
                if Some(l.key) == pipe.loop_key {
                    let v = Val::Var(l.var.clone());
                    let lin = linear(outer, &l.extent, &v, in_loop);
                    let slot = Val::rem(lin.clone(), Val::Int(pipe.stages));
                    let loads: Vec<Stmt> = l
                        .body
                        .iter()
                        .filter(
                            |s| matches!(s, Stmt::TmaLoad(t) if buffers.contains(&t.dst.buffer)),
                        )
                        .cloned()
                        .collect();
                    l2.body = l
                        .body
                        .iter()
                        .filter(|s| matches!(s, Stmt::Alloc(b) if buffers.contains(b)))
                        .cloned()
                        .collect();
                    l2.body.push(issue(
                        cx,
                        pipe.stages,
                        role.full,
                        Some(role.empty),
                        &loads,
                        &slot,
                        &lin,
                        &Val::True,
                    ));
                } else if l.parallel.is_hw() {
                    l2.body = project(cx, pipe, role, buffers, &l.body, outer, in_loop);
                } else {
                    let lin = linear(outer, &l.extent, &Val::Var(l.var.clone()), in_loop);
                    l2.body = project(cx, pipe, role, buffers, &l.body, &lin, true);
                }
                out.push(Stmt::Loop(l2));
            }
            Stmt::If { cond, then, els } if fills(s, buffers) => out.push(Stmt::If {
                cond: cond.clone(),
                then: project(cx, pipe, role, buffers, then, outer, in_loop),
                els: project(cx, pipe, role, buffers, els, outer, in_loop),
            }),
            _ => {}
        }
    }
    out
}

/// Removes the loads of the pipe from the consumers' code and makes each iteration of the
/// buffered loop wait on every role's full barrier and release every role's empty barrier.
#[allow(clippy::too_many_arguments)]
fn consume(
    cx: &Ctx,
    pipe: &Pipe,
    ws: &WsPlan,
    buffers: &[BufferId],
    body: &mut [Stmt],
    outer: &Val,
    in_loop: bool,
    found: &mut bool,
) {
    for s in body.iter_mut() {
        let Stmt::Loop(l) = s else {
            if let Stmt::If { then, els, .. } = s {
                consume(cx, pipe, ws, buffers, then, outer, in_loop, found);
                consume(cx, pipe, ws, buffers, els, outer, in_loop, found);
            }
            continue;
        };
        if Some(l.key) == pipe.loop_key
            && l.body
                .iter()
                .any(|s| matches!(s, Stmt::TmaLoad(t) if buffers.contains(&t.dst.buffer)))
        {
            *found = true;
            let v = Val::Var(l.var.clone());
            let lin = linear(outer, &l.extent, &v, in_loop);
            let slot = Val::rem(lin.clone(), Val::Int(pipe.stages));
            let parity = Val::rem(Val::div(lin, Val::Int(pipe.stages)), Val::Int(2));
            l.body
                .retain(|s| !matches!(s, Stmt::TmaLoad(t) if buffers.contains(&t.dst.buffer)));
            let mut allocs = Vec::new();
            l.body.retain(|s| {
                let keep = !matches!(s, Stmt::Alloc(b) if buffers.contains(b));
                if !keep {
                    allocs.push(s.clone());
                }
                keep
            });
            for &m in &pipe.members {
                let b = cx.tensor_buffer[&cx.tma[m].tensor];
                let stage = Val::Int(cx.tma[m].stage_elems.expect("copies have a stage size"));
                shift_reads(&mut l.body, b, &Val::mul(slot.clone(), stage));
            }
            let mut it: Vec<Stmt> = allocs;
            it.extend(ws.roles.iter().map(|r| Stmt::MbarWait {
                bars: r.full,
                slot: slot.clone(),
                parity: parity.clone(),
            }));
            it.append(&mut l.body);
            it.extend(ws.roles.iter().map(|r| Stmt::MbarArrive {
                bars: r.empty,
                slot: slot.clone(),
                per_warp: true,
            }));
            l.body = it;
        } else if l.parallel.is_hw() {
            consume(cx, pipe, ws, buffers, &mut l.body, outer, in_loop, found);
        } else {
            let lin = linear(outer, &l.extent, &Val::Var(l.var.clone()), in_loop);
            consume(cx, pipe, ws, buffers, &mut l.body, &lin, true, found);
        }
    }
}
