//! The fusion as one `torch.nn.functional.scaled_dot_product_attention` call, for the runner's
//! peers: what a PyTorch user runs for attention (PyTorch's own choice of kernel, flash on the
//! H100, and cuDNN's under `sdpa_kernel(SDPBackend.CUDNN_ATTENTION)`).
//!
//! Takes the unscheduled fusion. Recognises one output that is (a cast of) the result of the
//! one softmax the fusion computes online-legally ([`crate::fusion::online_softmax::find_all`],
//! normalised or not, with `exp`), where
//! - the scores `s` are `sum(q k, axis=D) * c`, `c * sum(...)` or the sum alone (`c` = 1),
//!   `c` a literal or a scalar input with a value in the program (SDPA's `scale` is a Python
//!   float: reading a 0-dim GPU tensor with `.item()` would synchronise every call), optionally
//!   under the causal mask `where(iota(s, axis=T) <= iota(s, axis=S), s, -inf)` (or `>=` with
//!   the operands swapped): key `j` kept for query `i` when `j <= i`, SDPA's `is_causal=True`
//!   (top-left aligned when `S != T`);
//! - the sum is a matrix product `q @ k^T` of inputs `q [B?, S, D]`, `k [B?, T, D]` and the
//!   softmax runs over `T`, the last axis of `s`;
//! - the probabilities multiply an input `v [B?, T, D]` summed over `T` (`p @ v`);
//! - `q`, `k`, `v` have one floating dtype; batched (`[B, S, D]`, one leading batch axis) or not.
//!
//! Anything else (a second output such as the log-sum-exp, `exp2`, another mask, a softcap, a
//! scale without a value) has no SDPA peer: `None`.
//!
//! Emits: `scaled_dot_product_attention(q, k, v, is_causal=..., scale=...)` on the `[B, H, S, D]`
//! layout SDPA takes (a heads axis of 1 unsqueezed; `[1, 1, S, D]` for an unbatched fusion) and
//! the result squeezed back and converted to the output's dtype when it differs from `q`'s (SDPA
//! returns `q`'s). The function takes every fusion input, as the torch twin does.

use super::{Emitter, Twin, ATOM};
use crate::fusion::online_softmax::{self, Exponential};
use crate::fusion::{BinaryOp, Fusion, Op, Operand, ReduceOp, TensorId, TernaryOp, UnaryOp};

/// Which SDPA kernel the peer asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SdpaBackend {
    /// PyTorch's default dispatch (flash attention on the H100 where it applies).
    Default,
    /// `torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION)`.
    Cudnn,
}

/// What the recognised attention is: enough to write the SDPA call, and what the attention
/// scheduler (`crate::auto::attention`) reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Attention {
    pub q: TensorId,
    pub k: TensorId,
    pub v: TensorId,
    /// The leading batch axes of `q`, `k` and `v` (0 or 1).
    pub batch: usize,
    /// The mask `where(keep, s, -inf)` on the scores, if any.
    pub mask: Option<Mask>,
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
}

impl Attention {
    /// Whether the mask is SDPA's `is_causal`.
    pub fn causal(&self) -> bool {
        self.mask.is_some_and(|m| m.causal)
    }
}

/// The attention `f` computes, as SDPA computes it (no mask or the top-left causal one, a
/// scale with a value, one output); `None` for anything else (module doc).
pub fn recognise(f: &Fusion) -> Option<Attention> {
    let at = find(f)?;
    let sdpa_mask = at.mask.is_none_or(|m| m.causal);
    (at.lse.is_none() && at.scale.is_some() && sdpa_mask).then_some(at)
}

/// The attention `f` computes, wider than SDPA's: any mask written on `iota`s, a scale with
/// or without a value, and the log-sum-exp `m + log(l)` as an optional second output (what
/// the attention scheduler takes; [`recognise`] narrows it to what SDPA computes).
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
    let e = Emitter::new(f, &[]);
    let raw = |t: TensorId| super::Py::new(e.names[t].clone(), ATOM, f.tensors[t].dtype);
    let input = |t: TensorId| f.tensors[t].is_input && f.tensors[t].dtype.is_float();

    // The scores: the mask, then the scale, then the product q k^T.
    let mut scores = os.scores;
    let mut mask = None;
    if let Some(x) = def(scores) {
        if let (
            Op::Ternary(TernaryOp::Where),
            [Operand::Tensor(keep), Operand::Tensor(kept), Operand::Scalar(masked)],
        ) = (&x.op, &x.inputs[..])
        {
            if *masked != f64::NEG_INFINITY || !on_indices_only(f, *keep) {
                return None;
            }
            mask = Some(Mask {
                masked: scores,
                keep: *keep,
                causal: is_causal_mask(f, *keep, f.rank(scores)),
            });
            scores = *kept;
        }
    }
    // A literal (Some(value)) or a scalar input (its value when the program gives one).
    let scalar_value = |o: &Operand| match *o {
        Operand::Scalar(v) => Some(Some(v)),
        Operand::Tensor(t) if f.tensors[t].is_input && f.rank(t) == 0 => {
            Some(f.tensors[t].value.map(|v| f.tensors[t].dtype.round(v)))
        }
        _ => None,
    };
    let (sum, scale) = match def(scores) {
        Some(x) if e.contractions[scores].is_none() && x.op == Op::Binary(BinaryOp::Mul) => {
            match &x.inputs[..] {
                [Operand::Tensor(t), c] | [c, Operand::Tensor(t)] if scalar_value(c).is_some() => {
                    (*t, scalar_value(c)?)
                }
                _ => return None,
            }
        }
        _ => (scores, Some(1.0)),
    };
    let qk = e.contractions[sum].as_ref()?;
    let [fq, fk] = &qk.factors;
    let (q, k) = (fq.base, fk.base);
    let mm = e.matmul(qk, (raw(q), raw(k)))?;
    let k_t = if mm.batch == 0 {
        ".t()"
    } else {
        ".transpose(-2, -1)"
    };
    if mm.batch > 1 || mm.a != e.names[q] || mm.b != format!("{}{k_t}", e.names[k]) {
        return None;
    }
    // The softmax runs over the keys: the last axis of the scores.
    let max_axes = match def(os.max).map(|x| &x.op) {
        Some(Op::Reduce {
            op: ReduceOp::Max,
            axes,
        }) => axes.clone(),
        _ => return None,
    };
    if max_axes != [mm.batch + 1] || f.rank(os.scores) != mm.batch + 2 {
        return None;
    }
    // p @ v: the product over the keys, `v` not transposed.
    let pv = e
        .contractions
        .iter()
        .flatten()
        .find(|c| c.factors.iter().any(|fa| fa.base == os.values))?;
    let [fp, fv] = &pv.factors;
    let (p, v) = if fv.base == os.values {
        (fp.base, fv.base)
    } else {
        (fv.base, fp.base)
    };
    let mm_pv = e.matmul(pv, (raw(p), raw(v)))?;
    if mm_pv.batch != mm.batch || mm_pv.a != e.names[p] || mm_pv.b != e.names[v] {
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
        mask,
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

/// The fusion as `scaled_dot_product_attention` on `backend`'s kernel.
pub fn emit_sdpa(fusion: &Fusion, backend: SdpaBackend) -> Option<Twin> {
    let f = fusion;
    let at = recognise(f)?;
    let scale = at.scale?;
    let e = Emitter::new(f, &[]);
    let (heads, squeeze) = if at.batch == 1 {
        (".unsqueeze(1)", ".squeeze(1)")
    } else {
        (".unsqueeze(0).unsqueeze(0)", ".squeeze(0).squeeze(0)")
    };
    let [q, k, v] = [at.q, at.k, at.v].map(|t| format!("{}{heads}", e.names[t]));
    let mut call = format!(
        "scaled_dot_product_attention({q}, {k}, {v}, is_causal={}, scale={:?}){squeeze}",
        if at.causal() { "True" } else { "False" },
        scale
    );
    let out_dtype = f.tensors[at.out].dtype;
    if out_dtype != f.tensors[at.q].dtype {
        call = format!("{call}.to({})", super::torch_dtype(out_dtype));
    }
    let (suffix, what, body) = match backend {
        SdpaBackend::Default => (
            "sdpa",
            "PyTorch's choice of kernel",
            format!("    return {call}\n"),
        ),
        SdpaBackend::Cudnn => (
            "cudnn_sdpa",
            "cuDNN's kernel",
            format!("    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):\n        return {call}\n"),
        ),
    };
    let function = format!("{}_{suffix}", f.name);
    let source = format!(
        "# The hopfuse fusion `{}` as one scaled_dot_product_attention call ({what}): attention as\n\
         # a PyTorch user writes it (a peer of `hopfuse run --peers`).\n\
         import torch\n\
         from torch.nn.attention import SDPBackend, sdpa_kernel\n\
         from torch.nn.functional import scaled_dot_product_attention\n\n\n\
         def {function}({}) -> torch.Tensor:\n{body}",
        f.name,
        e.input_params().join(", "),
    );
    Some(Twin { source, function })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fusion(src: &str) -> Fusion {
        let program = crate::frontend::parse(src).unwrap();
        crate::fusion::build(&program.fusion).unwrap()
    }

    fn example(path: &str) -> Fusion {
        let src = std::fs::read_to_string(format!(
            "{}/../examples/attention/{path}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        fusion(&src)
    }

    fn body(f: &Fusion, backend: SdpaBackend) -> Option<String> {
        emit_sdpa(f, backend).map(|t| t.source.lines().last().unwrap().trim().to_string())
    }

    #[test]
    fn the_attention_examples_are_one_sdpa_call() {
        let cases = [
            ("attention.hf", "return scaled_dot_product_attention(q.unsqueeze(0).unsqueeze(0), k.unsqueeze(0).unsqueeze(0), v.unsqueeze(0).unsqueeze(0), is_causal=False, scale=0.125).squeeze(0).squeeze(0)"),
            ("causal.hf", "return scaled_dot_product_attention(q.unsqueeze(0).unsqueeze(0), k.unsqueeze(0).unsqueeze(0), v.unsqueeze(0).unsqueeze(0), is_causal=True, scale=0.125).squeeze(0).squeeze(0)"),
            ("online_wgmma_causal.hf", "return scaled_dot_product_attention(q.unsqueeze(0).unsqueeze(0), k.unsqueeze(0).unsqueeze(0), v.unsqueeze(0).unsqueeze(0), is_causal=True, scale=0.125).squeeze(0).squeeze(0)"),
            ("online_wgmma_batched.hf", "return scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), is_causal=False, scale=0.125).squeeze(1)"),
            ("online_wgmma_ws.hf", "return scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), is_causal=False, scale=0.125).squeeze(1)"),
        ];
        for (path, want) in cases {
            let f = example(path);
            assert_eq!(
                body(&f, SdpaBackend::Default).as_deref(),
                Some(want),
                "{path}"
            );
            assert_eq!(
                body(&f, SdpaBackend::Cudnn).as_deref(),
                Some(want),
                "{path}"
            );
        }
        let t = emit_sdpa(&example("online_wgmma_batched.hf"), SdpaBackend::Cudnn).unwrap();
        assert_eq!(t.function, "attention_online_wgmma_batched_cudnn_sdpa");
        assert!(
            t.source.contains(
                "def attention_online_wgmma_batched_cudnn_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:\n    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):\n"
            ),
            "{}",
            t.source
        );
        let t = emit_sdpa(&example("online_wgmma.hf"), SdpaBackend::Default).unwrap();
        assert_eq!(t.function, "attention_online_wgmma_sdpa");
    }

    #[test]
    fn other_fusions_have_no_sdpa_peer() {
        // The softcap, the log-sum-exp as a second output, a product that is no attention.
        assert_eq!(body(&example("softcap.hf"), SdpaBackend::Default), None);
        assert_eq!(
            body(&example("online_wgmma_lse.hf"), SdpaBackend::Default),
            None
        );
        let gemm = "fusion g {\n  input a: f32[M, K]\n  input b: f32[K, N]\n  c = sum(broadcast(a, axis=2) * broadcast(b, axis=0), axis=1)\n  output c\n}\n";
        assert_eq!(body(&fusion(gemm), SdpaBackend::Default), None);
        let base = std::fs::read_to_string(format!(
            "{}/../examples/attention/causal.hf",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let variant = |from: &str, to: &str| {
            assert!(base.contains(from), "{from}");
            body(&fusion(&base.replacen(from, to, 1)), SdpaBackend::Default)
        };
        // The causal mask's variants SDPA has no flag for: the diagonal left out, anti-causal,
        // a mask on the wrong axes, masked scores that are not -inf.
        assert_eq!(
            variant(
                "iota(s, axis=1) <= iota(s, axis=0)",
                "iota(s, axis=1) < iota(s, axis=0)"
            ),
            None
        );
        assert_eq!(
            variant(
                "iota(s, axis=1) <= iota(s, axis=0)",
                "iota(s, axis=0) <= iota(s, axis=1)"
            ),
            None
        );
        assert_eq!(
            variant(
                "iota(s, axis=1) <= iota(s, axis=0)",
                "iota(s, axis=1) <= iota(s, axis=1)"
            ),
            None
        );
        assert_eq!(variant("s, -1.0 / 0.0)", "s, -1000.0)"), None);
        // The same mask written the other way round is causal.
        let ge = variant(
            "iota(s, axis=1) <= iota(s, axis=0)",
            "iota(s, axis=0) >= iota(s, axis=1)",
        );
        assert!(ge.unwrap().contains("is_causal=True"));
        // A scale without a value in the program would need a synchronising `.item()`.
        assert_eq!(
            variant("input scale: f32 = 0.125", "input scale: f32"),
            None
        );
    }
}
