//! The fusion as FlexAttention (`torch.nn.attention.flex_attention`), for the runner's peers:
//! what a PyTorch user runs for an attention variant SDPA has no flag for (a softcap, ALiBi, a
//! sliding window, a document mask), and for plain and causal attention too (FlexAttention is
//! what those users compare against).
//!
//! Takes the unscheduled fusion and the attention [`crate::fusion::attention::find`] recognises
//! in it: `q`, `k`, `v` of bf16, f16 or f32, a scale with a value in the program (FlexAttention's
//! `scale` is a Python float), one output, and
//! - the score modification ([`ScoreMod`]) as a `score_mod(score, b, h, q_idx, kv_idx)`: the
//!   path's exprs printed by the torch twin's own printer, the scaled scores read as `score`;
//! - the mask `where(keep, s, -inf)` as a `mask_mod(b, h, q_idx, kv_idx)` returning `keep`, made
//!   into a block mask with `create_block_mask`.
//!
//! In both, `iota` along the queries is `q_idx`, along the keys `kv_idx`, along the batch axis
//! `h`; an input read through broadcasts is indexed by the axes it has (`slope[h]`,
//! `doc_q[h, q_idx]`, `bias[q_idx, kv_idx]`); a scalar input is its 0-dim tensor; literals,
//! casts and elementwise math are the twin's. Anything else on the path or in the mask (a
//! reduction, a view other than a broadcast, `rand`, an input read along two different score
//! axes) has no FlexAttention form: `None`, never a wrong twin. So is the log-sum-exp as a
//! second output (FlexAttention's way of returning it differs between PyTorch versions).
//!
//! Emits, as FlexAttention's documentation writes it: `flex_attention` compiled once with
//! `torch.compile` at module level, and a function taking every fusion input (as the torch
//! twin does) that calls it on the `[1, B, S, D]` layout (the fusion's batch axis on
//! FlexAttention's heads, `[1, 1, S, D]` unbatched; grouped-query attention's `q [B?, G, S, D]`
//! as `[B, G, S, D]` with `k`, `v` as `[B, 1, T, D]` and `enable_gqa=True`, the batch axis then
//! FlexAttention's `b` and the group axis its `h`), the result squeezed back and converted to
//! the output's dtype when it differs from `q`'s. The block mask is made once per shape, as the
//! docs recommend (`create_block_mask` evaluates the mask over every block; per call it would be
//! timed as part of attention), and again for other tensors read by the mask (a batch's document
//! ids: a user makes the batch's block mask once for every layer); see [`block_mask_helper`].
//!
//! One difference is FlexAttention's and stays: a query whose keys are all masked is 0 in
//! FlexAttention and NaN (`0 / 0`) in the fusion; the runner's validation reports it.

use super::{Emitter, Twin};
use crate::dtype::DType;
use crate::fusion::attention::{find, Attention, Mask, ScoreMod};
use crate::fusion::{Fusion, IterKind, Op, Operand, TensorId, TernaryOp};
use rustc_hash::FxHashMap;
use std::fmt::Write;

/// The names the emitted Python defines around the fusion's tensors: an input named so is
/// renamed (`h` would be the `score_mod`'s head index inside it).
const RESERVED: &[&str] = &[
    "flex_attention",
    "create_block_mask",
    "score_mod",
    "mask_mod",
    "block_mask",
    "_block_mask",
    "_block_masks",
    "score",
    "b",
    "h",
    "q_idx",
    "kv_idx",
];

/// How many block masks the twin keeps (the oldest dropped first): a benchmark's rotated copies
/// of the mask's tensors each have theirs (the runner rotates at most 16 sets).
const KEPT_BLOCK_MASKS: usize = 16;

/// The fusion as a `flex_attention` call (module doc); `None` when FlexAttention cannot compute
/// what it computes.
pub fn emit_flex(fusion: &Fusion) -> Option<Twin> {
    let f = fusion;
    let at = find(f)?;
    let scale = at.scale?;
    let dtype = f.tensors[at.q].dtype;
    if at.lse.is_some() || !matches!(dtype, DType::BF16 | DType::F16 | DType::F32) {
        return None;
    }
    let function = format!("{}_flex", f.name);
    let reserved: Vec<&str> = RESERVED
        .iter()
        .copied()
        .chain([function.as_str()])
        .collect();
    let mut e = Emitter::reserving(f, &[], &reserved);
    // A score_mod or mask_mod is one expression: nothing is named in it.
    e.inline_all();
    let mut space = ScoreSpace::new(f, &at);
    let score_mod = match &at.score_mod {
        Some(sm) => Some(space.score_mod(&mut e, sm)?),
        None => None,
    };
    let mask = match at.mask {
        Some(m) => Some(space.mask_mod(&mut e, m)?),
        None => None,
    };
    let body = call_body(&e, &at, scale, score_mod.as_deref(), mask.as_ref());
    let layout = if at.groups == 0 {
        "[1, B, S, D] (the fusion's batch axis, if any, as its heads)"
    } else {
        "[B, G, S, D] with K and V of one head\n# (grouped-query attention: enable_gqa)"
    };
    let mut source = format!(
        "# FlexAttention peer (`hopfuse run --peers`) of the hopfuse fusion `{}`,\n\
         # as a PyTorch user writes it: flex_attention compiled once, at module level, as its docs\n\
         # say, and called on {layout}.\n\
         import torch\n",
        f.name
    );
    if mask.is_some() {
        source.push_str(
            "from torch.nn.attention.flex_attention import create_block_mask, flex_attention\n",
        );
    } else {
        source.push_str("from torch.nn.attention.flex_attention import flex_attention\n");
    }
    source.push_str("\nflex_attention = torch.compile(flex_attention)\n");
    if mask.is_some() {
        source.push_str(&block_mask_helper());
    }
    let _ = write!(
        source,
        "\n\ndef {function}({}) -> torch.Tensor:\n{body}",
        e.input_params().join(", ")
    );
    Some(Twin { source, function })
}

/// The twin's function body: the `score_mod`, the `mask_mod` and its block mask, the call.
fn call_body(
    e: &Emitter,
    at: &Attention,
    scale: f64,
    score_mod: Option<&str>,
    mask: Option<&MaskMod>,
) -> String {
    let f = e.f;
    let [q, k, v] = [at.q, at.k, at.v].map(|t| e.names[t].as_str());
    let mut body = String::new();
    let mut args = String::new();
    if let Some(text) = score_mod {
        let _ = writeln!(
            body,
            "    def score_mod(score, b, h, q_idx, kv_idx):\n        return {text}\n"
        );
        args.push_str(", score_mod=score_mod");
    }
    if let Some(m) = mask {
        let reads = match &m.reads[..] {
            [one] => format!("({},)", e.names[*one]),
            all => format!(
                "({})",
                all.iter()
                    .map(|&t| e.names[t].as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        // A block mask per batch or per head only where the mask reads that axis (the
        // fusion's axes before the queries, as FlexAttention's `b` and `h`).
        let extent = |axis: usize| match m.reads_axis.get(axis) {
            Some(true) => format!("{q}.shape[{axis}]"),
            _ => "None".into(),
        };
        let (batch, heads) = match m.reads_axis.len() {
            2 => (extent(0), extent(1)),
            _ => ("None".into(), extent(0)),
        };
        let _ = writeln!(
            body,
            "    def mask_mod(b, h, q_idx, kv_idx):\n        return {}\n\n    \
             block_mask = _block_mask(mask_mod, {reads}, {batch}, {heads}, {q}.shape[-2], {k}.shape[-2], {q}.device)",
            m.text
        );
        args.push_str(", block_mask=block_mask");
    }
    let layout = super::HeadsLayout::flex(at);
    let (ql, kvl) = (layout.q, layout.kv);
    let mut call = format!(
        "flex_attention({q}{ql}, {k}{kvl}, {v}{kvl}{args}, scale={}{}){}",
        crate::text::float_literal(scale),
        layout.gqa_arg(),
        layout.out
    );
    let out = f.tensors[at.out].dtype;
    if out != f.tensors[at.q].dtype {
        call = format!("{call}.to({})", super::torch_dtype(out));
    }
    let _ = writeln!(body, "    return {call}");
    body
}

/// The module-level cache of block masks and the function that reads it.
fn block_mask_helper() -> String {
    format!(
        "\n# create_block_mask evaluates the mask over every block: FlexAttention's docs make a block\n\
         # mask once and reuse it. One per shape, and per tensors the mask reads as they are (another\n\
         # tensor, or one written since, is another key: a batch's document ids, made once for every\n\
         # layer); the last {KEPT_BLOCK_MASKS} kept.\n\
         _block_masks = {{}}\n\n\n\
         def _block_mask(mask_mod, reads, batch, heads, q_len, kv_len, device):\n    \
             key = (batch, heads, q_len, kv_len) + tuple((id(t), t._version) for t in reads)\n    \
             if key not in _block_masks:\n        \
                 if len(_block_masks) == {KEPT_BLOCK_MASKS}:\n            \
                     del _block_masks[next(iter(_block_masks))]\n        \
                 # The entry holds the tensors read, so no other tensor takes their ids.\n        \
                 block_mask = create_block_mask(mask_mod, batch, heads, q_len, kv_len, device=device)\n        \
                 _block_masks[key] = (reads, block_mask)\n    \
             return _block_masks[key][1]\n"
    )
}

/// A `mask_mod`'s returned expression and what its block mask depends on.
struct MaskMod {
    text: String,
    /// The inputs the mask reads (its block mask is made again for other ones).
    reads: Vec<TensorId>,
    /// Whether it reads each of the scores' axes before the queries (the batch, then the group
    /// axis of grouped-query attention): a block mask per batch or head, else one for all.
    reads_axis: Vec<bool>,
}

/// The tensors a `score_mod` or `mask_mod` reads, each with the score axis each of its logical
/// axes stands for: the scores' axes `[B?, S, T]` are FlexAttention's `h`, `q_idx`, `kv_idx`;
/// grouped-query attention's `[B?, G, S, T]` its `b`, `h`, `q_idx`, `kv_idx`.
struct ScoreSpace<'f> {
    f: &'f Fusion,
    /// The index names of the scores' axes.
    names: &'static [&'static str],
    /// The scores' axes before the queries (the batch, the group axis).
    outer: usize,
    /// Each tensor reached, with the score axis of each of its logical axes.
    axes: FxHashMap<TensorId, Vec<usize>>,
}

impl<'f> ScoreSpace<'f> {
    fn new(f: &'f Fusion, at: &Attention) -> ScoreSpace<'f> {
        let names: &'static [&'static str] = match (at.batch, at.groups) {
            (0, 0) => &["q_idx", "kv_idx"],
            (1, 1) => &["b", "h", "q_idx", "kv_idx"],
            _ => &["h", "q_idx", "kv_idx"],
        };
        ScoreSpace {
            f,
            names,
            outer: names.len() - 2,
            axes: FxHashMap::default(),
        }
    }

    /// The `score_mod`'s returned expression: the path from the scaled scores (`score`).
    fn score_mod(&mut self, e: &mut Emitter, sm: &ScoreMod) -> Option<String> {
        let f = self.f;
        // FlexAttention's scores are f32 and it takes the modified ones as such.
        if f.tensors[sm.scaled].dtype != DType::F32 || f.tensors[sm.result].dtype != DType::F32 {
            return None;
        }
        e.set_override(sm.scaled, "score".into(), DType::F32);
        let reached = self.reach(sm.result, Some(sm.scaled))?;
        self.index(e, &reached)?;
        Some(e.value(sm.result).text)
    }

    /// The `mask_mod`'s returned expression: the mask's condition `keep`.
    fn mask_mod(&mut self, e: &mut Emitter, m: Mask) -> Option<MaskMod> {
        let f = self.f;
        if f.tensors[m.keep].dtype != DType::Bool {
            return None;
        }
        let reached = self.reach(m.keep, None)?;
        let reads_axis = self.index(e, &reached)?;
        let reads = reached
            .into_iter()
            .filter(|&t| f.tensors[t].is_input)
            .collect();
        Some(MaskMod {
            text: e.value(m.keep).text,
            reads,
            reads_axis,
        })
    }

    /// Every tensor `root` (of the scores' shape) reads, down to `stop`, with its score axes
    /// recorded; `None` for an op a score_mod cannot hold (module doc) or a tensor reached
    /// along two different axes. In the order of their ids.
    fn reach(&mut self, root: TensorId, stop: Option<TensorId>) -> Option<Vec<TensorId>> {
        let f = self.f;
        if f.rank(root) != self.names.len() {
            return None;
        }
        let mut reached = Vec::new();
        let mut seen = rustc_hash::FxHashSet::default();
        let mut stack = vec![(root, (0..self.names.len()).collect::<Vec<_>>())];
        while let Some((t, axes)) = stack.pop() {
            if Some(t) == stop {
                continue;
            }
            // Reached before (here or by the other function) along the same axes only.
            match self.axes.get(&t) {
                Some(known) if *known != axes => return None,
                Some(_) => {}
                None => {
                    self.axes.insert(t, axes.clone());
                }
            }
            if !seen.insert(t) {
                continue;
            }
            reached.push(t);
            let tensor = &f.tensors[t];
            if tensor.is_input {
                continue;
            }
            let expr = &f.exprs[tensor.definition?];
            if tensor.composite.is_some() {
                return None;
            }
            match &expr.op {
                Op::Set | Op::Cast(_) | Op::Unary(_) | Op::Binary(_) => {}
                Op::Ternary(op) if !matches!(op, TernaryOp::Rand | TernaryOp::RandN) => {}
                Op::Broadcast { axes: new } => {
                    let [Operand::Tensor(o)] = expr.inputs[..] else {
                        return None;
                    };
                    let kept = (0..axes.len()).filter(|k| !new.contains(k));
                    stack.push((o, kept.map(|k| axes[k]).collect()));
                    continue;
                }
                Op::Iota { .. } => continue,
                _ => return None,
            }
            // Elementwise: an operand has the result's axes, or none (a scalar).
            for o in expr.input_tensors() {
                match f.rank(o) {
                    r if r == axes.len() => stack.push((o, axes.clone())),
                    0 => stack.push((o, Vec::new())),
                    _ => return None,
                }
            }
        }
        reached.sort();
        Some(reached)
    }

    /// Overrides for the `reached` tensors that are not written as the twin writes them: an
    /// input indexed by its axes' names, an iota as its axis's name, a broadcast as its
    /// operand (the operands are scalars here). Returns whether any reads each of the axes
    /// before the queries.
    fn index(&self, e: &mut Emitter, reached: &[TensorId]) -> Option<Vec<bool>> {
        let f = self.f;
        let mut reads_axis = vec![false; self.outer];
        let mut name = |axis: usize| {
            if let Some(read) = reads_axis.get_mut(axis) {
                *read = true;
            }
            self.names[axis]
        };
        for &t in reached {
            let tensor = &f.tensors[t];
            let logical = f.logical(t);
            let axes = &self.axes[&t];
            if tensor.is_input && !axes.is_empty() {
                // An axis of extent 1 in the input itself is read at 0.
                let index: Vec<&str> = logical
                    .iter()
                    .zip(axes)
                    .map(|(&id, &a)| match f.ids[id].kind {
                        IterKind::Broadcast => "0",
                        _ => name(a),
                    })
                    .collect();
                let text = format!("{}[{}]", e.names[t], index.join(", "));
                e.set_override(t, text, tensor.dtype);
            } else if let Some(Op::Iota { axis }) = tensor.definition.map(|d| &f.exprs[d].op) {
                if f.ids[logical[*axis]].kind == IterKind::Broadcast {
                    return None;
                }
                e.set_override(t, name(axes[*axis]).into(), tensor.dtype);
            }
        }
        // Broadcasts in the order they are computed: an operand's override is set first.
        for x in f.topo_exprs() {
            let expr = &f.exprs[x];
            if let (Op::Broadcast { .. }, [Operand::Tensor(o)]) = (&expr.op, &expr.inputs[..]) {
                if reached.binary_search(&expr.output).is_ok() {
                    let p = e.value(*o);
                    let dtype = p.dtype.unwrap_or(f.tensors[expr.output].dtype);
                    e.set_override(expr.output, p.at(super::ATOM), dtype);
                }
            }
        }
        Some(reads_axis)
    }
}

#[cfg(test)]
mod tests;
