//! `t.recompute()`: each consumer of `t` after the first gets its own copy of `t`'s computation,
//! back to what it reads that is kept anyway (fusion inputs and reduction results). Each copy
//! then inlines into its own consumer's loops, so nothing of the chain lives from one loop to
//! the next: a row that two reductions and an output read is read from memory three times (from
//! L2 after the first, for a row just read) instead of being held in registers or shared memory
//! across the loops. What that costs is the chain's arithmetic once per consumer; what it frees
//! is the whole row's storage, so any row width fits and a block holds only one step's elements.
//!
//! With `from=p` the copies stop at `p` too, a tensor of the chain that is then kept between
//! the loops instead (nvFuser's projection of a persistent buffer onto its inputs): a row
//! cached in bf16 (`p = cache_after(x)`) is what is kept, and each consumer converts and scales
//! it again, without reading the row twice. In registers NVVM may merge the consumers' equal
//! conversions and keep the f32 values live anyway (softmax_scale: 51 registers either way,
//! docs/benchmarks.md, fourteenth session); a cache in shared memory is kept as written.
//!
//! Takes a computed tensor with two or more consumers, none of whose chain has been scheduled
//! yet (recompute first, then split and propagate). Copies `t_r2`, `t_r3`, ... (fresh names
//! when those are taken) with the originals' ops, dtypes and axis classes, each marked
//! `copy_of` so that `Fusion::topo_exprs` computes it right before its consumer; the first
//! consumer keeps `t`.

use super::*;

/// `t.recompute()`.
pub(super) fn recompute(f: &mut Fusion, t: TensorId, a: &Args) -> SResult<()> {
    let tname = f.tensors[t].name.clone();
    let uses = f.uses(t);
    if uses.len() < 2 {
        return a.err(
            format!("`{tname}` has one consumer: each consumer already computes it once"),
            None,
        );
    }
    let from = match a.get("from") {
        Some(g) => Some(a.tensor_of(f, g)?),
        None => None,
    };
    let chain = chain_of(f, t, from.map(|(p, _, _)| p), a)?;
    if let Some((p, pname, at)) = from {
        let read = chain.iter().any(|&m| {
            f.exprs[f.tensors[m].definition.expect("a chain member is computed")]
                .input_tensors()
                .any(|i| i == p)
        });
        if !read || p == t {
            return a.err(
                format!("`{pname}` is not a tensor that `{tname}` is computed from: `from=` names where the copies stop, one of the tensors `{tname}`'s computation reads"),
                Some(at),
            );
        }
    }
    for (k, &user) in uses.iter().enumerate().skip(1) {
        let mut copy_of: rustc_hash::FxHashMap<TensorId, TensorId> = Default::default();
        for &member in &chain {
            let def = f.tensors[member]
                .definition
                .expect("a chain member is computed");
            let expr = f.exprs[def].clone();
            let inputs = expr
                .inputs
                .iter()
                .map(|op| match op {
                    Operand::Tensor(i) => Operand::Tensor(*copy_of.get(i).unwrap_or(i)),
                    other => *other,
                })
                .collect();
            let name = fresh_name(f, &f.tensors[member].name, k + 1);
            let root = fresh_logical_root(f, member);
            let copy = push_tensor(
                f,
                &name,
                f.tensors[member].dtype,
                root,
                MemoryType::Local,
                Some(a.span),
            );
            f.tensors[copy].copy_of = Some(member);
            f.define(expr.op, inputs, copy, Some(a.span));
            copy_of.insert(member, copy);
        }
        let copy = copy_of[&t];
        for op in &mut f.exprs[user].inputs {
            if *op == Operand::Tensor(t) {
                *op = Operand::Tensor(copy);
            }
        }
    }
    Ok(())
}

/// `t` and the computed tensors it reads, producers first, up to what is kept anyway (and up to
/// `stop`, `from=`'s tensor); every check comes before the fusion changes.
fn chain_of(f: &Fusion, t: TensorId, stop: Option<TensorId>, a: &Args) -> SResult<Vec<TensorId>> {
    let tname = &f.tensors[t].name;
    let mut order = Vec::new();
    let mut stack = vec![(t, false)];
    let mut seen = rustc_hash::FxHashSet::default();
    while let Some((member, expanded)) = stack.pop() {
        if expanded {
            order.push(member);
            continue;
        }
        if !seen.insert(member) {
            continue;
        }
        let tensor = &f.tensors[member];
        let mname = &tensor.name;
        if tensor.loop_domain != tensor.root || tensor.inline != Inline::Most {
            return a.err(
                format!("`{mname}`, which `{tname}` is computed from, is already scheduled: recompute `{tname}` before transforming or inlining the tensors it is computed from"),
                None,
            );
        }
        if tensor.memory != MemoryType::Local {
            return a.err(
                format!("`{mname}`, which `{tname}` is computed from, is placed in {} memory: a recomputed chain lives in registers (recompute before set_memory)", tensor.memory.name()),
                None,
            );
        }
        let def = tensor.definition.expect("not an input");
        let expr = &f.exprs[def];
        match &expr.op {
            Op::Set
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Ternary(_)
            | Op::Cast(_)
            | Op::Broadcast { .. }
            | Op::Iota { .. }
            | Op::ElementIndex { .. }
            | Op::Full { .. } => {}
            Op::Reduce { .. } if member != t => continue,
            other => {
                return a.err(
                    format!("`{mname}`, which `{tname}` is computed from, is {}: recompute copies elementwise ops, casts and broadcasts (a chain stops at fusion inputs and reductions)", op_noun(other)),
                    None,
                );
            }
        }
        stack.push((member, true));
        for i in expr.input_tensors() {
            let input = &f.tensors[i];
            // Kept anyway: what the chain reads but does not copy.
            let kept = input.is_input
                || Some(i) == stop
                || matches!(
                    input.definition.map(|d| &f.exprs[d].op),
                    Some(Op::Reduce { .. })
                );
            if !kept {
                stack.push((i, false));
            }
        }
    }
    Ok(order)
}

fn op_noun(op: &Op) -> &'static str {
    match op {
        Op::Permute { .. } => "a permute (a view)",
        Op::Expand { .. } => "an expand (a view)",
        Op::Reduce { .. } => "a reduction",
        Op::Mma => "a matrix product",
        _ => "not an elementwise op",
    }
}

/// `{base}_r{k}`, or with a further suffix when a tensor already has that name.
fn fresh_name(f: &Fusion, base: &str, k: usize) -> String {
    let mut name = format!("{base}_r{k}");
    let mut more = 2;
    while f.tensor_by_name(&name).is_some() {
        name = format!("{base}_r{k}_{more}");
        more += 1;
    }
    name
}
