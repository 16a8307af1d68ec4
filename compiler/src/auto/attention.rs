//! The attention scheduler: FlashAttention's kernel for `softmax(q k^T * scale) v`, as the hand
//! schedules of `examples/attention/` write it, with the fusion's own tensor names.
//!
//! Takes an attention [`crate::backend::torch::sdpa::find`] recognises (the recognition the
//! SDPA peers use, widened to any mask on `iota`s, a scale without a value and the log-sum-exp
//! as a second output): bf16 or f16 `q [B?, S, D]`, `k [B?, T, D]`, `v [B?, T, D]` of one
//! dtype, `D` a constant 64 or 128, the probabilities cast to that dtype before `p v`, and the
//! output a cast of the normalised result. Emits online_wgmma_batched.hf's schedule (D = 64)
//! or online_wgmma_d128.hf's (D = 128: q's and k's tiles as two 64-column slabs, two TMA boxes
//! each), without the batch axis when there is none: the online softmax over key tiles of 64,
//! 64 queries per block, S = Q K^T and O += P V on wgmma with P from registers, the softmax's
//! tensors at the tile loop. A mask needs nothing more here: `passes::causal_tiles` bounds the
//! key loop and masks only the boundary tiles. Anything else is declined with what it has
//! that the kernel does not take.

use super::{AutoSchedule, Facts, Scheduler};
use crate::backend::torch::sdpa::Attention;
use crate::dtype::DType;
use crate::fusion::{Fusion, Op, Operand, TensorId};
use crate::plan::SizeExpr;
use std::collections::BTreeSet;

/// Queries per block and keys per tile (one wgmma M of 64 rows; a 64-key N).
const TILE: i64 = 64;

pub fn schedule(facts: &Facts, at: &Attention) -> Result<AutoSchedule, String> {
    let f = facts.fusion;
    let name = |t: TensorId| f.tensors[t].name.as_str();
    let dtype = f.tensors[at.q].dtype;
    if !matches!(dtype, DType::BF16 | DType::F16) {
        return Err(format!(
            "`{}` is attention of {} `{}`, `{}`, `{}`; its tensor-core kernel takes bf16 or f16 (wgmma): cast them, or write its schedule by hand (examples/attention/attention.hf)",
            name(at.softmax.result),
            dtype.name(),
            name(at.q),
            name(at.k),
            name(at.v)
        ));
    }
    let head_dim = |t: TensorId| {
        let axes = f.logical(t);
        f.class_extent(f.class_of(axes[axes.len() - 1]))
    };
    let d = match head_dim(at.q) {
        SizeExpr::Const(d @ (64 | 128)) => d,
        other => {
            return Err(format!(
                "`{}` has head dimension {}; the attention kernel takes a constant 64 or 128 (write it in the type, `{}: {}[.., 64]`)",
                name(at.q),
                other,
                name(at.q),
                dtype.name()
            ))
        }
    };
    if head_dim(at.v) != SizeExpr::Const(d) {
        return Err(format!(
            "`{}` has head dimension {} and `{}` {}; the attention kernel takes one",
            name(at.q),
            d,
            name(at.v),
            head_dim(at.v)
        ));
    }
    let os = &at.softmax;
    if os.probs.is_none() || os.result != os.product {
        return Err(format!(
            "`{}` divides by the row sum after the product; the attention kernel takes the normalised form `p = e / broadcast(l)` before it",
            name(os.result)
        ));
    }
    if at.out == os.result {
        return Err(format!(
            "`{}` is the f32 sum of the product; the attention kernel writes it cast to {} (`cast({}, {})`)",
            name(at.out),
            dtype.name(),
            name(at.out),
            dtype.name()
        ));
    }
    let chain = product_tile(f, os.product);
    if !chain.iter().any(|&t| casts_probabilities_to(f, t, dtype)) {
        return Err(format!(
            "`{}` multiplies the probabilities in f32; wgmma takes them as a {} operand from registers: cast them (`pb = cast(p, {})`) before the broadcast",
            name(os.product),
            dtype.name(),
            dtype.name()
        ));
    }
    let b = at.batch;
    let text = text(facts, at, d, &chain);
    let mask = match at.mask {
        None => String::new(),
        Some(m) if m.causal => format!(", the causal mask `{}` (key tiles past the diagonal skipped, only diagonal tiles masked)", name(m.keep)),
        Some(m) => format!(", the mask `{}` (its tiles classified by passes mask_bounds and mask_tiles)", name(m.keep)),
    };
    let lse = at
        .lse
        .map(|t| {
            format!(
                ", the log-sum-exp `{}` from the running statistics",
                name(t)
            )
        })
        .unwrap_or_default();
    let layout = if d == 128 {
        "online_wgmma_d128's kernel: q's and k's tiles as two 64-column slabs (two TMA boxes each)"
    } else {
        "online_wgmma_batched's kernel"
    };
    Ok(AutoSchedule {
        scheduler: Scheduler::Attention,
        text,
        reason: format!(
            "attention `{}` over {}{} {} with D = {d} {}{mask}{lse}; {layout}: one warp group, {TILE} queries per block{}, key tiles of {TILE} by TMA (128-byte swizzle), the online softmax, S = Q K^T and O += P V on wgmma with P from registers",
            name(at.out),
            if b == 1 { "a batch of " } else { "" },
            if b == 1 { "[B, S, D]" } else { "[S, D]" },
            dtype.name(),
            facts.sizes.describe(),
            if b == 1 { " (the batch on blockIdx.y)" } else { "" },
        ),
    })
}

/// The schedule's statements (module doc), `b` the batch axes before every position.
fn text(facts: &Facts, at: &Attention, d: i64, chain: &[TensorId]) -> String {
    let f = facts.fusion;
    let name = |t: TensorId| f.tensors[t].name.clone();
    let b = at.batch;
    // A position of the unbatched schedule; a permutation of it with the batch axis first.
    let at_ = |i: usize| i + b;
    let order = |perm: &[usize]| -> String {
        (0..b)
            .chain(perm.iter().map(|&i| i + b))
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let cache = |t: TensorId| {
        let plain = format!("{}s", name(t));
        if f.tensor_by_name(&plain).is_some() {
            facts.fresh(&name(t), "s")
        } else {
            plain
        }
    };
    let (qs, ks, vs) = (cache(at.q), cache(at.k), cache(at.v));
    let sum = name(at.product);
    let o = name(at.softmax.product);
    let mut lines: Vec<String> = Vec::new();
    let mut line = |s: String| lines.push(s);
    line(format!("online_softmax({o})"));
    for (c, t) in [(&qs, at.q), (&ks, at.k), (&vs, at.v)] {
        line(format!(
            "{c} = cache_after({}, memory=shared, load=tma, swizzle=128)",
            name(t)
        ));
    }
    let batch = if b == 1 { "B (BIDy), " } else { "" };
    line(format!(
        "// {sum}[{}S, T, D] -> [{batch}S / 64 (BIDx), T / 64 (the serial tile loop), D / 16 (unrolled), 64 (Mma M), 64 (Mma N: the tile's keys), 16 (Mma K)]",
        if b == 1 { "B, " } else { "" }
    ));
    line(format!("{sum}.split({}, {TILE})", at_(0)));
    line(format!("{sum}.split({}, {TILE})", at_(2)));
    line(format!("{sum}.split({}, 16)", at_(4)));
    line(format!("{sum}.reorder({})", order(&[0, 2, 4, 1, 3, 5])));
    if b == 1 {
        line(format!("{sum}.parallelize(0, BIDy)"));
    }
    line(format!("{sum}.parallelize({}, BIDx)", at_(0)));
    line(format!("{sum}.parallelize({}, Unroll)", at_(2)));
    for i in 3..6 {
        line(format!("{sum}.parallelize({}, Mma)", at_(i)));
    }
    line(format!("propagate({sum})"));
    line(format!(
        "// {o} and the tensors of its tile: the tile's 64 keys are its K (4 unrolled x 16), M the 64 queries, N = D"
    ));
    let product_tiling = |t: &str, lines: &mut Vec<String>| {
        lines.push(format!("{t}.parallelize({}, Serial)", at_(3)));
        lines.push(format!("{t}.split({}, 16)", at_(3)));
        lines.push(format!("{t}.reorder({})", order(&[0, 1, 3, 2, 5, 4])));
        lines.push(format!("{t}.parallelize({}, Unroll)", at_(2)));
        for i in 3..6 {
            lines.push(format!("{t}.parallelize({}, Mma)", at_(i)));
        }
    };
    product_tiling(&o, &mut lines);
    lines.push(format!("{}.parallelize({}, Mma)", name(at.out), at_(2)));
    for &t in chain {
        product_tiling(&name(t), &mut lines);
    }
    lines.push("// The TMA boxes: q's tile once per block, k's and v's per key tile.".into());
    for c in [&qs, &ks] {
        if d == 128 {
            // Two 64-column slabs of 128 bytes, one box each.
            lines.push(format!("{c}.parallelize({}, Serial)", at_(1)));
            lines.push(format!("{c}.split({}, 4)", at_(1)));
            lines.push(format!("{c}.reorder({})", order(&[0, 1, 3, 2, 4])));
            for i in 1..5 {
                lines.push(format!("{c}.parallelize({}, Bulk)", at_(i)));
            }
        } else {
            lines.push(format!("{c}.reorder({})", order(&[0, 2, 1, 3])));
            for i in 1..4 {
                lines.push(format!("{c}.parallelize({}, Bulk)", at_(i)));
            }
        }
    }
    if d == 128 {
        lines.push(format!("{vs}.split({}, 64)", at_(2)));
        lines.push(format!("{vs}.reorder({})", order(&[0, 2, 1, 3])));
        for i in 1..4 {
            lines.push(format!("{vs}.parallelize({}, Bulk)", at_(i)));
        }
    } else {
        for i in 1..3 {
            lines.push(format!("{vs}.parallelize({}, Bulk)", at_(i)));
        }
    }
    lines.push("inline_most()".into());
    lines.push(
        "// The softmax's tensors at the tile loop, each in its own loops over the fragment (M, N)."
            .into(),
    );
    for t in softmax_tile(f, at, chain) {
        lines.push(format!("{}.inline_at({})", name(t), at_(2)));
    }
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

/// The tensors the second product reads in its tile (rank of its input, not fusion inputs):
/// the product `p v` itself, then breadth first the casts and broadcasts of its factors.
fn product_tile(f: &Fusion, product: TensorId) -> Vec<TensorId> {
    let def = |t: TensorId| f.tensors[t].definition.map(|d| &f.exprs[d]);
    let Some(first) = def(product).and_then(|x| x.input_tensors().next()) else {
        return Vec::new();
    };
    let rank = f.rank(first);
    let mut tile = vec![first];
    let mut next = 0;
    while next < tile.len() {
        let t = tile[next];
        next += 1;
        let Some(x) = def(t) else { continue };
        if !matches!(
            x.op,
            Op::Binary(crate::fusion::BinaryOp::Mul) | Op::Cast(_) | Op::Broadcast { .. } | Op::Set
        ) {
            continue;
        }
        for i in x.input_tensors() {
            if !f.tensors[i].is_input && f.rank(i) == rank && !tile.contains(&i) {
                tile.push(i);
            }
        }
    }
    tile
}

/// Whether `t` (of the product's tile) reads the probabilities through a cast to `dtype`.
fn casts_probabilities_to(f: &Fusion, t: TensorId, dtype: DType) -> bool {
    let def = |t: TensorId| f.tensors[t].definition.map(|d| &f.exprs[d]);
    let Some(x) = def(t) else { return false };
    let Some(i) = x.input_tensors().next() else {
        return false;
    };
    matches!(x.op, Op::Broadcast { .. }) && def(i).is_some_and(|c| c.op == Op::Cast(dtype))
}

/// The tensors of the softmax the program names (the scores, the masked scores, the row
/// maximum, the exponentials, the row sum, the probabilities and their cast), in the fusion's
/// order: those computed from the scores' product that the second product reads, outside its
/// tile. Each is placed at the key-tile loop.
fn softmax_tile(f: &Fusion, at: &Attention, chain: &[TensorId]) -> Vec<TensorId> {
    let mut from_scores = BTreeSet::from([at.product]);
    for e in f.topo_exprs() {
        let x = &f.exprs[e];
        if x.input_tensors().any(|i| from_scores.contains(&i)) {
            from_scores.insert(x.output);
        }
    }
    let mut read_by_product = BTreeSet::new();
    let mut stack: Vec<TensorId> = chain.to_vec();
    while let Some(t) = stack.pop() {
        if !read_by_product.insert(t) {
            continue;
        }
        if let Some(x) = f.tensors[t].definition.map(|d| &f.exprs[d]) {
            stack.extend(x.inputs.iter().filter_map(|o| match o {
                Operand::Tensor(i) => Some(*i),
                _ => None,
            }));
        }
    }
    f.tensor_ids()
        .filter(|&t| {
            t != at.product
                && !chain.contains(&t)
                && from_scores.contains(&t)
                && read_by_product.contains(&t)
                && f.tensors[t].written.is_none()
                && !f.tensors[t].is_input
        })
        .collect()
}
