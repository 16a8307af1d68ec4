//! The fusion as one `torch.nn.functional.scaled_dot_product_attention` call, for the runner's
//! peers: what a PyTorch user runs for attention (PyTorch's own choice of kernel, flash on the
//! H100, and cuDNN's under `sdpa_kernel(SDPBackend.CUDNN_ATTENTION)`).
//!
//! Takes the unscheduled fusion, and the attention [`crate::fusion::attention::find`] recognises
//! in it, narrowed to what SDPA computes: no mask or the causal one (SDPA's `is_causal=True`,
//! top-left aligned when `S != T`), a scale with a value in the program (SDPA's `scale` is a
//! Python float: reading a 0-dim GPU tensor with `.item()` would synchronise every call), one
//! output. Anything else (a second output such as the log-sum-exp, another mask, a scale without
//! a value) has no SDPA peer: `None`.
//!
//! Emits: `scaled_dot_product_attention(q, k, v, is_causal=..., scale=...)` on the `[B, H, S, D]`
//! layout SDPA takes (a heads axis of 1 unsqueezed; `[1, 1, S, D]` for an unbatched fusion) and
//! the result squeezed back and converted to the output's dtype when it differs from `q`'s (SDPA
//! returns `q`'s). Grouped-query attention (`q [B?, G, S, D]`, `k`, `v [B?, T, D]`) is
//! `enable_gqa=True` with `q`'s group axis as SDPA's query heads and one K/V head (`[B, 1, T, D]`),
//! as a PyTorch user of a GQA model calls it. The function takes every fusion input, as the torch
//! twin does.

use super::{Emitter, Twin};
use crate::fusion::attention::{find, Attention};
use crate::fusion::Fusion;

/// Which SDPA kernel the peer asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SdpaBackend {
    /// PyTorch's default dispatch (flash attention on the H100 where it applies).
    Default,
    /// `torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION)`.
    Cudnn,
}

/// The attention `f` computes, as SDPA computes it (no mask or the top-left causal one, a
/// scale with a value, one output); `None` for anything else (module doc).
fn recognise(f: &Fusion) -> Option<Attention> {
    let at = find(f)?;
    let sdpa_mask = at.mask.is_none_or(|m| m.causal);
    (at.lse.is_none() && at.scale.is_some() && sdpa_mask && at.score_mod.is_none()).then_some(at)
}

/// The fusion as `scaled_dot_product_attention` on `backend`'s kernel.
pub fn emit_sdpa(fusion: &Fusion, backend: SdpaBackend) -> Option<Twin> {
    let f = fusion;
    let at = recognise(f)?;
    let scale = at.scale?;
    let e = Emitter::new(f, &[]);
    let layout = super::HeadsLayout::sdpa(&at);
    let q = format!("{}{}", e.names[at.q], layout.q);
    let [k, v] = [at.k, at.v].map(|t| format!("{}{}", e.names[t], layout.kv));
    let mut call = format!(
        "scaled_dot_product_attention({q}, {k}, {v}, is_causal={}, scale={:?}{}){}",
        if at.causal() { "True" } else { "False" },
        scale,
        layout.gqa_arg(),
        layout.out
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
            // Grouped-query attention: q's G heads share k's and v's one.
            ("online_wgmma_gqa.hf", "return scaled_dot_product_attention(q, k.unsqueeze(1), v.unsqueeze(1), is_causal=False, scale=0.0883883461356163, enable_gqa=True)"),
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
