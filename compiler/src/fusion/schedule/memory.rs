//! Where tensors live: `cache_after` and `cache_before` (a new tensor between a fusion input
//! and its readers, or between a computation and its output, with how it is filled or written
//! out) and `set_memory`.

use super::*;

/// The most elements `row_pad=` may add after a row (one 128-byte line of bytes).
const MAX_PAD: i64 = 128;

/// What both caches read of their arguments: the tensor cached (its id, name and span) and
/// the options, checked against each other.
struct CacheOptions<'a> {
    src: TensorId,
    src_name: &'a str,
    src_span: Span,
    memory: MemoryType,
    load: LoadKind,
    store: LoadKind,
    fence: Option<FenceMode>,
    swizzle: u32,
    pad: u32,
    l2: L2Policy,
}

/// Reads `name = {func}(x, ...)`: the tensor cached, the new name (checked free), the options
/// (those that belong to the other cache rejected).
fn cache_options<'a>(
    f: &Fusion,
    name: &str,
    a: &Args<'a>,
    func: &str,
) -> SResult<CacheOptions<'a>> {
    let (src, src_name, src_span) = a.tensor(f, "x")?;
    new_name(f, name, a.span)?;
    let memory = a.choice("memory", MemoryType::parse)?;
    let load = a.choice("load", LoadKind::parse)?;
    let store = a.choice("store", LoadKind::parse)?;
    let l2 = a.choice("l2", L2Policy::parse)?;
    if l2 != L2Policy::Normal {
        let at = a.get("l2").map(|g| g.at);
        if func != "cache_after" {
            return a.err(
                "l2= says how an input's loads use L2: use it with cache_after",
                at,
            );
        }
        let input = &f.tensors[src];
        if !input.is_input || input.memory != MemoryType::Global || load != LoadKind::Plain {
            return a.err(
                format!("l2= sets the L2 policy of plain loads of a fusion input in global memory, and `{src_name}` is not one (or load= is not plain)"),
                at,
            );
        }
        if input.l2 != L2Policy::Normal && input.l2 != l2 {
            return a.err(
                format!(
                    "`{src_name}`'s loads already have l2={}: one policy per input",
                    input.l2.name()
                ),
                at,
            );
        }
    }
    let fence = match a.get("fence") {
        Some(_) => Some(a.choice("fence", FenceMode::parse)?),
        None => None,
    };
    let swizzle = a.swizzle("swizzle");
    if let Some((_, sp)) = swizzle {
        if load != LoadKind::Tma && store != LoadKind::Tma {
            return a.err(
                "swizzle= lays out a TMA box in shared memory: use it with load=tma (cache_after) or store=tma (cache_before)",
                Some(sp),
            );
        }
    }
    let pad = match a.get("row_pad") {
        None => 0,
        Some(g) => {
            let n = a.int("row_pad");
            if !(0..=MAX_PAD).contains(&n) {
                return a.err(
                    format!("row_pad= is a number of elements from 0 to {MAX_PAD}, not {n}"),
                    Some(g.at),
                );
            }
            if memory != MemoryType::Shared || load != LoadKind::Plain || store != LoadKind::Plain {
                return a.err(
                    "row_pad= spaces the rows of a shared-memory cache that threads fill and read: use it with memory=shared and plain loads and stores (a TMA box has its layout: swizzle= instead)",
                    Some(g.at),
                );
            }
            n as u32
        }
    };
    if load != LoadKind::Plain && func != "cache_after" {
        return a.err(
            format!(
                "load={} fills a cache from global memory: use it with cache_after",
                load.name()
            ),
            None,
        );
    }
    if (store != LoadKind::Plain || fence.is_some()) && func != "cache_before" {
        return a.err(
            "store= and fence= say how an output is written from its cache: use them with cache_before",
            None,
        );
    }
    Ok(CacheOptions {
        src,
        src_name,
        src_span,
        memory,
        load,
        store,
        fence,
        swizzle: swizzle.map(|s| s.0).unwrap_or(0),
        pad,
        l2,
    })
}

/// `name = cache_after(x, ...)`: a copy of `x` that every reader of `x` reads instead.
pub(super) fn cache_after(f: &mut Fusion, name: &str, a: &Args) -> SResult<()> {
    let CacheOptions {
        src,
        src_name,
        src_span,
        memory,
        load,
        swizzle,
        pad,
        l2,
        ..
    } = cache_options(f, name, a, "cache_after")?;
    if load != LoadKind::Plain {
        if memory != MemoryType::Shared {
            return a.err(
                format!(
                    "load={} copies into shared memory: add memory=shared",
                    load.name()
                ),
                None,
            );
        }
        if !f.tensors[src].is_input || f.tensors[src].memory != MemoryType::Global {
            return a.err(
                format!(
                    "load={} reads a fusion input in global memory, and `{src_name}` is not one",
                    load.name()
                ),
                Some(src_span),
            );
        }
    }
    if f.rank(src) == 0 {
        return a.err(
            format!("`{src_name}` is a scalar; only tensors with axes can be cached"),
            None,
        );
    }
    let root = fresh_logical_root(f, src);
    let uses = f.uses(src);
    let t = push_tensor(f, name, f.tensors[src].dtype, root, memory, Some(a.span));
    f.define(Op::Set, vec![Operand::Tensor(src)], t, Some(a.span));
    f.tensors[t].load = load;
    f.tensors[t].swizzle = swizzle;
    f.tensors[t].row_pad = pad;
    if l2 != L2Policy::Normal {
        f.tensors[src].l2 = l2;
    }
    for u in uses {
        for op in &mut f.exprs[u].inputs {
            if *op == Operand::Tensor(src) {
                *op = Operand::Tensor(t);
            }
        }
    }
    Ok(())
}

/// `name = cache_before(y, ...)`: `y` is computed into the new tensor and copied out from it.
pub(super) fn cache_before(f: &mut Fusion, name: &str, a: &Args) -> SResult<()> {
    let CacheOptions {
        src,
        src_name,
        src_span,
        memory,
        store,
        fence,
        swizzle,
        pad,
        ..
    } = cache_options(f, name, a, "cache_before")?;
    let Some(def) = f.tensors[src].definition else {
        return a.err(
            format!("`{src_name}` is an input; cache_before needs a computed tensor"),
            None,
        );
    };
    untransformed(f, src, a)?;
    if store == LoadKind::Tma {
        if memory != MemoryType::Shared {
            return a.err(
                "store=tma copies from shared memory: add memory=shared",
                None,
            );
        }
        if !f.tensors[src].is_output {
            return a.err(
                format!(
                    "store=tma writes a fusion output in global memory, and `{src_name}` is not one"
                ),
                Some(src_span),
            );
        }
    } else if fence.is_some() {
        return a.err(
            "fence= places the fence before a TMA store: add store=tma",
            None,
        );
    }
    // The new tensor takes over the definition (and the root, reduction axes included); the
    // original becomes a copy of it.
    let old_root = f.tensors[src].root.clone();
    let t = push_tensor(
        f,
        name,
        f.tensors[src].dtype,
        old_root,
        memory,
        Some(a.span),
    );
    f.exprs[def].output = t;
    f.tensors[t].definition = Some(def);
    let new_root = fresh_logical_root(f, t);
    f.tensors[src].root = new_root.clone();
    f.tensors[src].loop_domain = new_root;
    // The output's readers inside the fusion read the cache too: the same values, where they
    // are computed (a register) rather than reread from the output in global memory behind a
    // barrier (a quantization's per-row scale, both an output and the divisor of its row).
    let readers: Vec<_> = f.uses(src);
    f.define(Op::Set, vec![Operand::Tensor(t)], src, Some(a.span));
    if memory == MemoryType::Local {
        for u in readers {
            for op in &mut f.exprs[u].inputs {
                if *op == Operand::Tensor(src) {
                    *op = Operand::Tensor(t);
                }
            }
        }
    }
    f.tensors[t].row_pad = pad;
    f.tensors[src].store = store;
    f.tensors[src].fence = fence.unwrap_or_default();
    f.tensors[src].swizzle = swizzle;
    Ok(())
}

/// `t.set_memory(m)`.
pub(super) fn set_memory(f: &mut Fusion, t: TensorId, a: &Args) -> SResult<()> {
    let tname = &f.tensors[t].name;
    let m = a.choice("memory", MemoryType::parse)?;
    let msp = a.get("memory").map(|g| g.at);
    if (f.tensors[t].is_input || f.tensors[t].is_output) && m != MemoryType::Global {
        return a.err(
            format!(
                "`{tname}` is a fusion input or output and lives in global memory; cache it to use {}",
                m.name()
            ),
            msp,
        );
    }
    if m == MemoryType::Global && has_rfactor_axes(f, t) {
        return a.err(
            format!("`{tname}` holds partial reductions (an rfactor tensor): it lives in registers or shared memory, not global memory"),
            msp,
        );
    }
    if m != MemoryType::Shared && f.tensors[t].row_pad != 0 {
        return a.err(
            format!(
                "`{tname}` has row_pad={} (the row spacing of a shared-memory cache); it stays in shared memory",
                f.tensors[t].row_pad
            ),
            msp,
        );
    }
    f.tensors[t].memory = m;
    Ok(())
}
