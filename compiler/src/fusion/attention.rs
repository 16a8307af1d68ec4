//! Attention in a fusion, `softmax(q k^T * scale) v`: what the attention scheduler
//! (`crate::auto`) takes and, narrowed, what the SDPA peers (`crate::backend::torch::sdpa`)
//! compute.
//!
//! Takes the unscheduled fusion. [`find`] recognises one output that is (a cast of) the result
//! of the one softmax the fusion computes online-legally ([`super::online_softmax::find_all`],
//! normalised or not, with `exp`), and optionally a second output `m + log(l)`, the rows'
//! log-sum-exp, where
//! - the scores `s` are `sum(q k, axis=D) * c`, `c * sum(...)` or the sum alone (`c` = 1),
//!   `c` a literal or a scalar input (its value when the program gives one), then optionally
//!   modified by elementwise math ([`ScoreMod`]: a softcap's `tanh`, a bias), then optionally
//!   under a mask `where(keep, s, -inf)` whose `keep` reads no product or factor of one
//!   ([`Mask::on_indices`] when it is computed from `iota`s and scalars only; [`Mask::causal`]
//!   when it is `iota(s, axis=T) <= iota(s, axis=S)`, or `>=` with the operands swapped: key
//!   `j` kept for query `i` when `j <= i`);
//! - the sum is a matrix product `q @ k^T` ([`super::contraction`]) of inputs `q [B?, S, D]`
//!   (the product's first factor), `k [B?, T, D]`, and the softmax runs over `T`, the last
//!   axis of `s`;
//! - the probabilities (the first factor) multiply an input `v [B?, T, D]` summed over `T`
//!   (`p @ v`);
//! - `q`, `k`, `v` are distinct, of one floating dtype; batched (`[B, S, D]`, one leading batch
//!   axis) or not; grouped (`q [B?, G, S, D]` against `k`, `v [B?, T, D]` broadcast over `G`:
//!   grouped-query attention's query heads sharing one K/V head) or not.
//!
//! Guarantees every tensor in the [`Attention`] it answers plays the part its field names;
//! anything else (`exp2`, a mask reading the scores, another output) is `None`.

use super::contraction;
use super::online_softmax::{self, Exponential};
use super::{BinaryOp, ExprId, Fusion, Op, Operand, ReduceOp, TensorId, TernaryOp, UnaryOp};

/// What the recognised attention is: what the attention scheduler (`crate::auto::attention`)
/// reads, and enough to write the SDPA call.
#[derive(Clone, Debug, PartialEq)]
pub struct Attention {
    pub q: TensorId,
    pub k: TensorId,
    pub v: TensorId,
    /// The leading batch axes of `q`, `k` and `v` (0 or 1).
    pub batch: usize,
    /// The group axes of `q` after the batch axes, over which `k` and `v` are broadcast (0,
    /// or 1 for grouped-query attention's `G` query heads per K/V head).
    pub groups: usize,
    /// The mask `where(keep, s, -inf)` on the scores, if any.
    pub mask: Option<Mask>,
    /// Elementwise math on the scaled scores before the mask and the softmax (a softcap's
    /// `tanh`, ALiBi's bias), if any.
    pub score_mod: Option<ScoreMod>,
    /// The factor of the scores; None for a scalar input without a value in the program.
    pub scale: Option<f64>,
    /// The scores' product `q k^T` (the `sum` over `D`).
    pub product: TensorId,
    /// The online softmax and its product with `v`.
    pub softmax: online_softmax::OnlineSoftmax,
    pub out: TensorId,
    /// A second output `m + log(l)`: each row's log-sum-exp, for a backward pass.
    pub lse: Option<TensorId>,
}

/// A mask `where(keep, s, -inf)` on the scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mask {
    /// The `where`'s result.
    pub masked: TensorId,
    /// Its condition, computed from `iota`s and scalars only.
    pub keep: TensorId,
    /// `keep` is `iota(s, axis=T) <= iota(s, axis=S)` (or `>=` swapped): key `j` kept for
    /// query `i` when `j <= i`, SDPA's `is_causal=True` (top-left aligned).
    pub causal: bool,
    /// `keep` is computed from `iota`s and scalars only, so the tiles it keeps, drops and
    /// cuts are known before the kernel runs (`passes::causal_tiles`); otherwise it reads
    /// input tensors (a document mask comparing per-query and per-key ids).
    pub on_indices: bool,
}

/// Elementwise math between the scaled scores `q k^T * scale` and the mask (or the softmax):
/// FlexAttention's `score_mod`. One path of exprs runs from the scaled scores to
/// [`ScoreMod::result`], each reading the previous tensor of the path once and otherwise only
/// literals, `iota`s and inputs other than `q`, `k` and `v` (through broadcasts and math);
/// no tensor of the path is read outside it.
#[derive(Clone, Debug, PartialEq)]
pub struct ScoreMod {
    /// The scaled scores the path starts from (the product itself when the scale is 1).
    pub scaled: TensorId,
    /// The path's last tensor: what the mask (or the softmax) reads.
    pub result: TensorId,
    /// The path's exprs, from the one reading `scaled` to the one defining `result`.
    pub path: Vec<ExprId>,
}

impl Attention {
    /// Whether the mask is SDPA's `is_causal`.
    pub fn causal(&self) -> bool {
        self.mask.is_some_and(|m| m.causal)
    }
}

/// The attention `f` computes, wider than SDPA's: any mask written on `iota`s, a scale with
/// or without a value, and the log-sum-exp `m + log(l)` as an optional second output (what
/// the attention scheduler takes; the SDPA peer narrows it to what SDPA computes).
pub fn find(f: &Fusion) -> Option<Attention> {
    let def = |t: TensorId| f.tensors[t].definition.map(|d| &f.exprs[d]);
    let [os] = &online_softmax::find_all(f)[..] else {
        return None;
    };
    if os.exponential != Exponential::Exp {
        return None;
    }
    // The outputs: the softmax's result (or a cast of it), and optionally its log-sum-exp.
    let (out, lse) = match f.outputs[..] {
        [out] => (out, None),
        [a, b] if is_log_sum_exp(f, b, os) => (a, Some(b)),
        [a, b] if is_log_sum_exp(f, a, os) => (b, Some(a)),
        _ => return None,
    };
    let result_of_out = match def(out) {
        Some(x) if out != os.result && matches!(x.op, Op::Cast(_)) => match x.inputs[..] {
            [Operand::Tensor(t)] => t,
            _ => return None,
        },
        _ => out,
    };
    if result_of_out != os.result || !f.tensors[out].dtype.is_float() {
        return None;
    }
    let (contractions, _) = contraction::find_all(f, &f.live());
    let input = |t: TensorId| f.tensors[t].is_input && f.tensors[t].dtype.is_float();

    // The scores: the mask, then the scale, then the product q k^T.
    let mut scores = os.scores;
    let mut mask = None;
    // The products' factors and results and what is computed from them: what a mask or a
    // bias may not read.
    let from_products = f.computed_from(
        contractions
            .iter()
            .enumerate()
            .filter_map(|(t, c)| c.as_ref().map(|c| (TensorId::new(t), c)))
            .flat_map(|(t, c)| c.factors.iter().map(|fa| fa.base).chain([t])),
    );
    let reads_products = |t: TensorId| from_products[t];
    if let Some(x) = def(scores) {
        if let (
            Op::Ternary(TernaryOp::Where),
            [Operand::Tensor(keep), Operand::Tensor(kept), Operand::Scalar(masked)],
        ) = (&x.op, &x.inputs[..])
        {
            if *masked != f64::NEG_INFINITY || reads_products(*keep) {
                return None;
            }
            mask = Some(Mask {
                masked: scores,
                keep: *keep,
                causal: is_causal_mask(f, *keep, f.rank(scores)),
                on_indices: on_indices_only(f, *keep),
            });
            scores = *kept;
        }
    }
    let (scaled, score_mod) = score_mod(f, &contractions, &from_products, scores)?;
    scores = scaled;
    // A literal (Some(value)) or a scalar input (its value when the program gives one).
    let scalar_value = |o: &Operand| match *o {
        Operand::Scalar(v) => Some(Some(v)),
        Operand::Tensor(t) if f.tensors[t].is_input && f.rank(t) == 0 => {
            Some(f.tensors[t].value.map(|v| f.tensors[t].dtype.round(v)))
        }
        _ => None,
    };
    let (sum, scale) = match def(scores) {
        Some(x) if contractions[scores].is_none() && x.op == Op::Binary(BinaryOp::Mul) => {
            match &x.inputs[..] {
                [Operand::Tensor(t), c] | [c, Operand::Tensor(t)] if scalar_value(c).is_some() => {
                    (*t, scalar_value(c)?)
                }
                _ => return None,
            }
        }
        _ => (scores, Some(1.0)),
    };
    // q k^T: `q` the first factor, as stored; `k` transposed.
    let qk = contractions[sum].as_ref()?;
    let [fq, fk] = &qk.factors;
    let (q, k) = (fq.base, fk.base);
    let (mm, groups) = qk.matmul_layout_grouped()?;
    if mm.batch > 1 || groups > 1 || mm.a != 0 || mm.a_transposed || !mm.b_transposed {
        return None;
    }
    // The axes before the queries in `q`, the scores and the output.
    let lead = mm.batch + groups;
    // The softmax runs over the keys: the last axis of the scores.
    let max_axes = match def(os.max).map(|x| &x.op) {
        Some(Op::Reduce {
            op: ReduceOp::Max,
            axes,
        }) => axes.clone(),
        _ => return None,
    };
    if max_axes != [lead + 1] || f.rank(os.scores) != lead + 2 {
        return None;
    }
    // p @ v: the product over the keys, `p` the first factor (as `q` is), neither transposed.
    let pv = contractions
        .iter()
        .flatten()
        .find(|c| c.factors.iter().any(|fa| fa.base == os.values))?;
    let v = pv.factors[1].base;
    let (mm_pv, pv_groups) = pv.matmul_layout_grouped()?;
    if v != os.values
        || mm_pv.batch != mm.batch
        || pv_groups != groups
        || mm_pv.a != 0
        || mm_pv.a_transposed
        || mm_pv.b_transposed
    {
        return None;
    }
    let dtype = f.tensors[q].dtype;
    let distinct = q != k && k != v && q != v;
    if !distinct
        || ![q, k, v]
            .iter()
            .all(|&t| input(t) && f.tensors[t].dtype == dtype)
    {
        return None;
    }
    Some(Attention {
        q,
        k,
        v,
        batch: mm.batch,
        groups,
        mask,
        score_mod,
        scale,
        product: sum,
        softmax: os.clone(),
        out,
        lse,
    })
}

/// Whether `t` is `m + log(l)` (either order) of the softmax `os`: its log-sum-exp.
fn is_log_sum_exp(f: &Fusion, t: TensorId, os: &online_softmax::OnlineSoftmax) -> bool {
    let def = |t: TensorId| f.tensors[t].definition.map(|d| &f.exprs[d]);
    let is_log_l = |o: &Operand| match *o {
        Operand::Tensor(x) => def(x).is_some_and(|x| {
            x.op == Op::Unary(UnaryOp::Log) && x.inputs[..] == [Operand::Tensor(os.sum)]
        }),
        _ => false,
    };
    let m = Operand::Tensor(os.max);
    def(t).is_some_and(|x| {
        x.op == Op::Binary(BinaryOp::Add)
            && match &x.inputs[..] {
                [a, b] => (*a == m && is_log_l(b)) || (*b == m && is_log_l(a)),
                _ => false,
            }
    })
}

/// Whether `keep` is computed from `iota`s and scalars only: a mask written on indices, which
/// the reference evaluates and `passes::causal_tiles` classifies tiles by.
fn on_indices_only(f: &Fusion, keep: TensorId) -> bool {
    let mut stack = vec![keep];
    while let Some(t) = stack.pop() {
        if f.tensors[t].is_input {
            if f.rank(t) > 0 {
                return false;
            }
            continue;
        }
        let Some(x) = f.tensors[t].definition.map(|d| &f.exprs[d]) else {
            return false;
        };
        stack.extend(x.input_tensors());
    }
    true
}

/// The scaled product that `scores` (the mask's kept scores, or the softmax's) is computed
/// from, and the [`ScoreMod`] path between them when there is one: walked back along the one
/// operand that reads the products (`from_products`: their factors and results and what is
/// computed from them), each step an
/// elementwise expr of the scores' rank whose result nothing else reads. `None` when the walk
/// meets anything else (a reduction, the scores read twice, a tensor read off the path).
fn score_mod(
    f: &Fusion,
    contractions: &crate::id::IdVec<TensorId, Option<contraction::Contraction>>,
    from_products: &crate::id::IdVec<TensorId, bool>,
    scores: TensorId,
) -> Option<(TensorId, Option<ScoreMod>)> {
    let def = |t: TensorId| f.tensors[t].definition.map(|d| &f.exprs[d]);
    let is_scaled_product = |t: TensorId| {
        contractions[t].is_some()
            || def(t).is_some_and(|x| {
                x.op == Op::Binary(BinaryOp::Mul)
                    && x.input_tensors().any(|i| contractions[i].is_some())
            })
    };
    let mut scaled = scores;
    let mut path = Vec::new();
    while !is_scaled_product(scaled) {
        let d = f.tensors[scaled].definition?;
        let x = &f.exprs[d];
        if !matches!(
            x.op,
            Op::Unary(_) | Op::Binary(_) | Op::Ternary(_) | Op::Cast(_)
        ) || f.rank(scaled) != f.rank(scores)
        {
            return None;
        }
        let mut on_path = x.input_tensors().filter(|&t| from_products[t]);
        let (Some(prev), None) = (on_path.next(), on_path.next()) else {
            return None;
        };
        if x.input_tensors().filter(|&t| t == prev).count() != 1 {
            return None;
        }
        path.push(d);
        scaled = prev;
    }
    path.reverse();
    // Nothing outside the path reads its tensors (the last is read by the mask or softmax).
    let inner = path.iter().map(|&d| f.exprs[d].output);
    for t in std::iter::once(scaled).chain(inner).take(path.len()) {
        if f.uses(t).len() != 1 {
            return None;
        }
    }
    let score_mod = (!path.is_empty()).then_some(ScoreMod {
        scaled,
        result: scores,
        path,
    });
    Some((scaled, score_mod))
}

/// Whether `keep` is `iota(axis=T) <= iota(axis=S)` (or `iota(axis=S) >= iota(axis=T)`) on
/// scores of rank `rank` (`T` the last axis, `S` the one before).
fn is_causal_mask(f: &Fusion, keep: TensorId, rank: usize) -> bool {
    let Some(x) = f.tensors[keep].definition.map(|d| &f.exprs[d]) else {
        return false;
    };
    let iota_axis = |o: &Operand| match *o {
        Operand::Tensor(t) if f.rank(t) == rank => {
            f.tensors[t].definition.and_then(|d| match f.exprs[d].op {
                Op::Iota { axis } => Some(axis),
                _ => None,
            })
        }
        _ => None,
    };
    let (Op::Binary(op), [a, b]) = (&x.op, &x.inputs[..]) else {
        return false;
    };
    let (key, query) = (Some(rank - 1), Some(rank - 2));
    match op {
        BinaryOp::Le => iota_axis(a) == key && iota_axis(b) == query,
        BinaryOp::Ge => iota_axis(a) == query && iota_axis(b) == key,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fusion(src: &str) -> Fusion {
        let program = crate::frontend::parse(src).unwrap();
        crate::fusion::build(&program.fusion).unwrap()
    }

    fn example(path: &str) -> String {
        std::fs::read_to_string(format!(
            "{}/../examples/attention/{path}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    fn name(f: &Fusion, t: TensorId) -> &str {
        &f.tensors[t].name
    }

    #[test]
    fn the_examples_parts_are_found() {
        let f = fusion(&example("causal.hf"));
        let at = find(&f).unwrap();
        let qkv = [at.q, at.k, at.v].map(|t| name(&f, t));
        assert_eq!(qkv, ["q", "k", "v"]);
        assert_eq!((at.batch, at.scale, at.lse), (0, Some(0.125), None));
        assert_eq!(name(&f, at.out), "o");
        assert!(at.causal());
        assert_eq!(name(&f, at.mask.unwrap().keep), "keep");

        let f = fusion(&example("online_wgmma_lse.hf"));
        let at = find(&f).unwrap();
        assert_eq!((at.batch, at.mask), (1, None));
        assert_eq!(name(&f, at.out), "ob");
        assert_eq!(at.lse.map(|t| name(&f, t)), Some("lse"));

        // A mask on indices other than the causal one.
        let f = fusion(&example("online_wgmma_sliding_window.hf"));
        let mask = find(&f).unwrap().mask.unwrap();
        assert!(!mask.causal);
    }

    #[test]
    fn grouped_query_attention_is_found_with_its_group_axis() {
        let src = example("online_wgmma_gqa.hf");
        let f = fusion(&src);
        let at = find(&f).unwrap();
        assert_eq!((at.batch, at.groups), (1, 1));
        assert_eq!([at.q, at.k, at.v].map(|t| name(&f, t)), ["q", "k", "v"]);
        assert_eq!(name(&f, at.out), "ob");
        let plain = fusion(&example("online_wgmma_overlap_pingpong.hf"));
        assert_eq!(find(&plain).unwrap().groups, 0);
        // Without the batch axis: q [G, S, D] against k, v [T, D].
        let unbatched = src
            .replace("bf16[B, G, S, 128]", "bf16[G, S, 128]")
            .replace("bf16[B, T, 128]", "bf16[T, 128]")
            .replace("axis=[1, 2]", "axis=[0, 1]")
            .replace("axis=3", "axis=2")
            .replace("axis=4", "axis=3");
        let at = find(&fusion(&unbatched)).unwrap();
        assert_eq!((at.batch, at.groups), (0, 1));
        // k with the group axis too but v without: not one attention's layout.
        let mixed = src
            .replace("input k: bf16[B, T, 128]", "input k: bf16[B, G, T, 128]")
            .replace("broadcast(k, axis=[1, 2])", "broadcast(k, axis=2)");
        assert!(find(&fusion(&mixed)).is_none());
    }

    #[test]
    fn score_modifications_and_masks_on_inputs_are_found() {
        let base = example("online_wgmma_overlap_pingpong.hf");
        let with = |from: &str, to: &str| {
            assert!(base.contains(from), "{from}");
            fusion(&base.replacen(from, to, 1))
        };
        // A softcap: cap * tanh(s / cap), the scale kept.
        let f = with(
            "  m = max(s, axis=2)\n  e = exp(s - ",
            "  sc = 50.0 * tanh(s / 50.0)\n  m = max(sc, axis=2)\n  e = exp(sc - ",
        );
        let at = find(&f).unwrap();
        let sm = at.score_mod.unwrap();
        assert_eq!((name(&f, sm.scaled), name(&f, sm.result)), ("s", "sc"));
        assert_eq!(sm.path.len(), 3);
        assert_eq!(at.scale, Some(0.125));
        // ALiBi: a bias from iotas and a per-batch slope.
        let alibi = base
            .replacen(
                "  input scale: f32 = 0.125\n",
                "  input scale: f32 = 0.125\n  input slope: f32[B]\n",
                1,
            )
            .replacen(
                "  m = max(s, axis=2)\n  e = exp(s - ",
                "  dist = cast(iota(s, axis=2) - iota(s, axis=1), f32)\n  sb = s + broadcast(broadcast(slope, axis=1), axis=2) * dist\n  m = max(sb, axis=2)\n  e = exp(sb - ",
                1,
            );
        let f = fusion(&alibi);
        let sm = find(&f).unwrap().score_mod.unwrap();
        assert_eq!((name(&f, sm.scaled), name(&f, sm.result)), ("s", "sb"));
        // A document mask: per-query and per-key ids compared.
        let doc = base
            .replacen(
                "  input scale: f32 = 0.125\n",
                "  input scale: f32 = 0.125\n  input doc_q: i32[B, S]\n  input doc_k: i32[B, T]\n",
                1,
            )
            .replacen(
                "  m = max(s, axis=2)\n  e = exp(s - ",
                "  same = broadcast(doc_q, axis=2) == broadcast(doc_k, axis=1)\n  sm = where(same, s, -1.0 / 0.0)\n  m = max(sm, axis=2)\n  e = exp(sm - ",
                1,
            );
        let f = fusion(&doc);
        let at = find(&f).unwrap();
        let mask = at.mask.unwrap();
        assert!(!mask.on_indices && !mask.causal);
        assert_eq!((name(&f, mask.keep), at.score_mod), ("same", None));
        // The scores read twice on the path, or a mask reading them, are not attention.
        assert_eq!(
            find(&with(
                "  m = max(s, axis=2)\n  e = exp(s - ",
                "  sq = s * s\n  m = max(sq, axis=2)\n  e = exp(sq - "
            )),
            None
        );
        assert_eq!(
            find(&with(
                "  m = max(s, axis=2)\n  e = exp(s - ",
                "  sm = where(s > 0.0, s, -1.0 / 0.0)\n  m = max(sm, axis=2)\n  e = exp(sm - "
            )),
            None
        );
    }

    #[test]
    fn other_forms_are_not_attention() {
        let base = example("causal.hf");
        let variant = |from: &str, to: &str| {
            assert!(base.contains(from), "{from}");
            find(&fusion(&base.replacen(from, to, 1)))
        };
        // A scale without a value is still attention (the SDPA peer is what needs one).
        let at = variant("input scale: f32 = 0.125", "input scale: f32").unwrap();
        assert_eq!(at.scale, None);
        // The products written with `k` or `v` first.
        assert_eq!(
            variant(
                "broadcast(q, axis=1) * broadcast(k, axis=0)",
                "broadcast(k, axis=0) * broadcast(q, axis=1)"
            ),
            None
        );
        assert_eq!(
            variant(
                "broadcast(p, axis=2) * broadcast(v, axis=0)",
                "broadcast(v, axis=0) * broadcast(p, axis=2)"
            ),
            None
        );
        // `exp2`, a mask that is not -inf, values computed in the fusion.
        assert_eq!(variant("e = exp(", "e = exp2("), None);
        assert_eq!(variant("s, -1.0 / 0.0)", "s, -1000.0)"), None);
        assert_eq!(
            variant("broadcast(v, axis=0)", "broadcast(exp(v), axis=0)"),
            None
        );
    }
}
