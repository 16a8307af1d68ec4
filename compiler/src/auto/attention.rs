//! The attention scheduler: FlashAttention's kernel for `softmax(q k^T * scale) v`, as the hand
//! schedules of `examples/attention/` write it, with the fusion's own tensor names.
//!
//! Takes an attention [`crate::fusion::attention::find`] recognises (the recognition the
//! SDPA peers narrow: any mask on `iota`s, a scale without a value, the log-sum-exp as a
//! second output): bf16 or f16 `q [B?, S, D]`, `k [B?, T, D]`, `v [B?, T, D]` of one
//! dtype, `D` a constant 64 or 128, the probabilities cast to that dtype before `p v`, and the
//! output a cast of the normalised result. Emits online_wgmma_batched.hf's schedule (D = 64)
//! or online_wgmma_d128.hf's (D = 128: q's and k's tiles as two 64-column slabs, two TMA boxes
//! each), without the batch axis when there is none: the online softmax over key tiles of 64,
//! 64 queries per block, S = Q K^T and O += P V on wgmma with P from registers, the softmax's
//! tensors at the tile loop. A mask needs nothing more here: `passes::causal_tiles` bounds the
//! key loop and masks only the boundary tiles. Anything else is declined with what it has
//! that the kernel does not take.

use super::text::ScheduleText;
use super::{AutoSchedule, Facts, Scheduler};
use crate::dtype::DType;
use crate::fusion::attention::Attention;
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
    let order =
        |perm: &[usize]| -> Vec<usize> { (0..b).chain(perm.iter().map(|&i| i + b)).collect() };
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
    let mut s = ScheduleText::new(&sum);
    s.line(format!("online_softmax({o})"));
    for (c, t) in [(&qs, at.q), (&ks, at.k), (&vs, at.v)] {
        s.line(format!(
            "{c} = cache_after({}, memory=shared, load=tma, swizzle=128)",
            name(t)
        ));
    }
    let batch = if b == 1 { "B (BIDy), " } else { "" };
    s.comment(&format!(
        "{sum}[{}S, T, D] -> [{batch}S / 64 (BIDx), T / 64 (the serial tile loop), D / 16 (unrolled), 64 (Mma M), 64 (Mma N: the tile's keys), 16 (Mma K)]",
        if b == 1 { "B, " } else { "" }
    ));
    s.split(at_(0), TILE, false);
    s.split(at_(2), TILE, false);
    s.split(at_(4), 16, false);
    s.reorder(&order(&[0, 2, 4, 1, 3, 5]));
    if b == 1 {
        s.parallelize(&[(0, "BIDy")]);
    }
    s.parallelize(&[
        (at_(0), "BIDx"),
        (at_(2), "Unroll"),
        (at_(3), "Mma"),
        (at_(4), "Mma"),
        (at_(5), "Mma"),
    ]);
    s.line(format!("propagate({sum})"));
    s.comment(&format!(
        "{o} and the tensors of its tile: the tile's 64 keys are its K (4 unrolled x 16), M the 64 queries, N = D"
    ));
    // The second product's tiling, the same on each tensor of its tile.
    let product_tiling = |t: &str| {
        let mut p = ScheduleText::new(t);
        p.parallelize(&[(at_(3), "Serial")]);
        p.split(at_(3), 16, false);
        p.reorder(&order(&[0, 1, 3, 2, 5, 4]));
        p.parallelize(&[
            (at_(2), "Unroll"),
            (at_(3), "Mma"),
            (at_(4), "Mma"),
            (at_(5), "Mma"),
        ]);
        p
    };
    s.append(product_tiling(&o));
    let mut out = ScheduleText::new(&name(at.out));
    out.parallelize(&[(at_(2), "Mma")]);
    s.append(out);
    for &t in chain {
        s.append(product_tiling(&name(t)));
    }
    s.comment("The TMA boxes: q's tile once per block, k's and v's per key tile.");
    for c in [&qs, &ks] {
        let mut box_ = ScheduleText::new(c);
        if d == 128 {
            // Two 64-column slabs of 128 bytes, one box each.
            box_.parallelize(&[(at_(1), "Serial")]);
            box_.split(at_(1), 4, false);
            box_.reorder(&order(&[0, 1, 3, 2, 4]));
            box_.parallelize(&(1..5).map(|i| (at_(i), "Bulk")).collect::<Vec<_>>());
        } else {
            box_.reorder(&order(&[0, 2, 1, 3]));
            box_.parallelize(&(1..4).map(|i| (at_(i), "Bulk")).collect::<Vec<_>>());
        }
        s.append(box_);
    }
    let mut v_box = ScheduleText::new(&vs);
    if d == 128 {
        v_box.split(at_(2), 64, false);
        v_box.reorder(&order(&[0, 2, 1, 3]));
        v_box.parallelize(&(1..4).map(|i| (at_(i), "Bulk")).collect::<Vec<_>>());
    } else {
        v_box.parallelize(&(1..3).map(|i| (at_(i), "Bulk")).collect::<Vec<_>>());
    }
    s.append(v_box);
    s.line("inline_most()".into());
    s.comment(
        "The softmax's tensors at the tile loop, each in its own loops over the fragment (M, N).",
    );
    for t in softmax_tile(f, at, chain) {
        s.line(format!("{}.inline_at({})", name(t), at_(2)));
    }
    s.finish()
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
