//! Pipelining: `circular_buffer` spreads a cache's loads over several slots, optionally with
//! `warp_specialized(...)` producer warps.

use super::*;

/// `t.circular_buffer(stages, prefetch, war=...)` or
/// `t.circular_buffer(stages, warp_specialized(...))`.
pub(super) fn circular_buffer(f: &mut Fusion, t: TensorId, a: &Args) -> SResult<()> {
    let tname = &f.tensors[t].name;
    let stages = a.int("stages");
    let stages_at = a.get("stages").map(|g| g.at);
    let prefetch = a.get("prefetch").map(|g| (a.int("prefetch"), g.at));
    let mut war = a.choice("war", |k| match k {
        "sync" => Some(WarMode::Sync),
        "mbarrier" => Some(WarMode::Mbarrier),
        _ => None,
    })?;
    let ws = match a.nested("warp_specialized")? {
        Some(inner) => Some(warp_specialized(a, &inner)?),
        None => None,
    };
    if let (Some(_), Some((_, sp))) = (ws, prefetch) {
        return a.err("a warp-specialized pipeline has no prefetch distance: the producer warp runs ahead until every one of the stages is full", Some(sp));
    }
    if ws.is_some() {
        // Consumers release slots through empty mbarriers.
        war = WarMode::Mbarrier;
        if f.tensors[t].load == LoadKind::Plain {
            return a.err(format!("warp_specialized: `{tname}` is filled by plain loads; a producer warp issues TMA or bulk copies (load=tma|bulk)"), None);
        }
    }
    let prefetch = prefetch.map(|p| p.0).unwrap_or(stages - 1);
    let tensor = &f.tensors[t];
    let is_cache = tensor.definition.is_some_and(|d| {
        f.exprs[d].op == Op::Set
            && f.exprs[d]
                .input_tensors()
                .next()
                .is_some_and(|s| f.tensors[s].is_input)
    });
    if !is_cache || tensor.memory == MemoryType::Global {
        return a.err(format!("`{tname}` is not a cache of a fusion input: circular buffering pipelines the loads of a cache made with cache_after(x, memory=shared|local, load=...)"), None);
    }
    if war == WarMode::Mbarrier && tensor.load == LoadKind::Plain {
        return a.err(format!("war=mbarrier: `{tname}` is filled by plain loads of every thread, which a block barrier must order; empty mbarriers track slots filled by TMA or bulk copies (load=tma|bulk)"), None);
    }
    if stages < 2 {
        return a.err(
            format!("`{tname}` needs at least 2 stages to be circular-buffered, got {stages}"),
            stages_at,
        );
    }
    if stages > 32 {
        return a.err(
            format!("`{tname}`: at most 32 stages, got {stages}"),
            stages_at,
        );
    }
    if prefetch < 0 || prefetch >= stages {
        return a.err(format!("prefetch of `{tname}` must be in 0..{stages} (0 <= prefetch < stages), got {prefetch}"), None);
    }
    if tensor.circular.is_some() {
        return a.err(format!("`{tname}` is already circular-buffered"), None);
    }
    f.tensors[t].circular = Some(CircularBuffer {
        stages,
        prefetch,
        war,
        ws,
        span: a.span,
    });
    Ok(())
}

/// `warp_specialized(TIDx|TIDy|TIDz, registers=[producer, consumer], warp=N, turns=products)`, an argument of
/// circular_buffer (`a`), its own arguments checked as `inner`.
fn warp_specialized(a: &Args, inner: &Args) -> SResult<WarpSpecialized> {
    let on_at = inner.get("on").map(|g| g.at);
    let on = match inner.choice("on", ParallelType::parse)? {
        p @ (ParallelType::TIDx | ParallelType::TIDy | ParallelType::TIDz) => p,
        p => {
            return a.err(
                format!("warp_specialized: `{p}` is not a thread dim (TIDx, TIDy or TIDz)"),
                on_at,
            )
        }
    };
    let registers = match inner.int_pair("registers") {
        Some(((p, c), sp)) if [p, c].iter().any(|r| !(0..=1024).contains(r)) => {
            return a.err("register counts are 24 to 256", Some(sp));
        }
        Some(((p, c), _)) => Some((p as u32, c as u32)),
        None => None,
    };
    let warp = inner.int("warp");
    if !(0..=3).contains(&warp) {
        return a.err(
            "warp is the producer warp (0 to 3) that issues this tensor's loads",
            inner.get("warp").map(|g| g.at),
        );
    }
    let product_turns = match inner.ident("turns") {
        None => false,
        Some(("products", _)) => true,
        Some((other, at)) => {
            return a.err(
                format!("warp_specialized's turns is `products` (the consumer groups take turns issuing their tensor-core products), got `{other}`"),
                Some(at),
            )
        }
    };
    Ok(WarpSpecialized {
        on,
        registers,
        warp: warp as u32,
        product_turns,
    })
}
