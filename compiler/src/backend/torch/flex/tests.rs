use super::*;
use std::process::Command;

fn fusion(src: &str) -> Fusion {
    let program = crate::frontend::parse(src).unwrap();
    crate::fusion::build(&program.fusion).unwrap()
}

fn example(path: &str) -> String {
    std::fs::read_to_string(format!("{}/../examples/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

const SCORES: &str = "  m = max(s, axis=2)\n  e = exp(s - ";
const SCALE: &str = "  input scale: f32 = 0.08838834764831845\n";

/// `base` (an attention of `examples/auto/`) with `inputs` declared after the scale and the
/// softmax reading `x`, which `lines` define from the scores `s`.
fn modified(base: &str, inputs: &str, lines: &str) -> String {
    assert!(base.contains(SCALE) && base.contains(SCORES));
    base.replacen(SCALE, &format!("{SCALE}{inputs}"), 1)
        .replacen(
            SCORES,
            &format!("{lines}  m = max(x, axis=2)\n  e = exp(x - "),
            1,
        )
}

/// `examples/auto/attention.hf` (batched, bf16, D 128) modified (see [`modified`]).
fn variant(inputs: &str, lines: &str) -> Fusion {
    fusion(&modified(&example("auto/attention.hf"), inputs, lines))
}

/// A softcap on the scaled scores: `cap * tanh(s / cap)`, `cap` a scalar input.
fn softcap() -> Fusion {
    variant("  input cap: f32 = 50.0\n", "  x = cap * tanh(s / cap)\n")
}

/// ALiBi: a per-batch (FlexAttention's per-head) slope times the key's distance.
fn alibi() -> Fusion {
    variant(
        "  input slope: f32[B]\n",
        "  dist = cast(iota(s, axis=2) - iota(s, axis=1), f32)\n  x = s + broadcast(broadcast(slope, axis=1), axis=2) * dist\n",
    )
}

/// A document mask: per-query and per-key ids of each batch compared.
fn document() -> Fusion {
    variant(
        "  input doc_q: i32[B, S]\n  input doc_k: i32[B, T]\n",
        "  same = broadcast(doc_q, axis=2) == broadcast(doc_k, axis=1)\n  x = where(same, s, -1.0 / 0.0)\n",
    )
}

/// Grouped-query attention (`examples/attention/online_wgmma_gqa.hf`: `q [B, G, S, D]`, `k`, `v
/// [B, T, D]`), with `lines` defining `x` from the scores `s` where given.
fn gqa(inputs: &str, lines: &str) -> Fusion {
    let base = example("attention/online_wgmma_gqa.hf");
    const GQA_SCORES: &str = "  m = max(s, axis=3)\n  e = exp(s - ";
    assert!(base.contains(SCALE) && base.contains(GQA_SCORES));
    if lines.is_empty() {
        return fusion(&base);
    }
    fusion(
        &base
            .replacen(SCALE, &format!("{SCALE}{inputs}"), 1)
            .replacen(
                GQA_SCORES,
                &format!("{lines}  m = max(x, axis=3)\n  e = exp(x - "),
                1,
            ),
    )
}

/// A document mask on grouped-query attention: ids per batch (K/V head), the same for its G
/// query heads: FlexAttention's `b`.
fn gqa_document() -> Fusion {
    gqa(
        "  input doc_q: i32[B, S]\n  input doc_k: i32[B, T]\n",
        "  same = broadcast(doc_q, axis=[1, 3]) == broadcast(doc_k, axis=[1, 2])\n  x = where(same, s, -1.0 / 0.0)\n",
    )
}

/// ALiBi on grouped-query attention: a slope per query head of a group: FlexAttention's `h`.
fn gqa_alibi() -> Fusion {
    gqa(
        "  input slope: f32[G]\n",
        "  dist = cast(iota(s, axis=3) - iota(s, axis=2), f32)\n  x = s + broadcast(slope, axis=[0, 2, 3]) * dist\n",
    )
}

/// The twins the tests read, by snapshot name.
fn cases() -> Vec<(&'static str, Fusion)> {
    vec![
        ("plain", fusion(&example("auto/attention.hf"))),
        ("causal", fusion(&example("auto/attention_causal.hf"))),
        (
            "sliding_window",
            fusion(&example("attention/online_wgmma_sliding_window.hf")),
        ),
        ("softcap", softcap()),
        (
            "softcap_unbatched_f32",
            fusion(&example("attention/softcap.hf")),
        ),
        ("alibi", alibi()),
        ("document", document()),
        ("gqa", gqa("", "")),
        ("gqa_document", gqa_document()),
        ("gqa_alibi", gqa_alibi()),
    ]
}

#[test]
fn attention_variants_are_flex_attention_calls() {
    for (name, f) in cases() {
        let twin = emit_flex(&f).unwrap_or_else(|| panic!("{name}: no FlexAttention twin"));
        assert_eq!(twin.function, format!("{}_flex", f.name));
        insta::assert_snapshot!(name, twin.source);
    }
}

#[test]
fn the_score_mod_and_mask_mod_read_the_indices_and_inputs() {
    let line = |f: &Fusion, start: &str| {
        let source = emit_flex(f).unwrap().source;
        let at = source
            .lines()
            .position(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no `{start}` in\n{source}"));
        source.lines().nth(at + 1).unwrap().trim().to_string()
    };
    assert_eq!(
        line(&softcap(), "def score_mod"),
        "return cap * torch.tanh(score / cap)"
    );
    assert_eq!(
        line(&alibi(), "def score_mod"),
        "return score + slope[h] * (kv_idx - q_idx).float()"
    );
    assert_eq!(
        line(&document(), "def mask_mod"),
        "return (doc_q[h, q_idx] == doc_k[h, kv_idx])"
    );
    let causal = fusion(&example("auto/attention_causal.hf"));
    assert_eq!(line(&causal, "def mask_mod"), "return (kv_idx <= q_idx)");
    // The document mask's block mask is per head (batch) and made again for other ids; the
    // causal one is one for every head and depends on the shape only.
    let doc = emit_flex(&document()).unwrap().source;
    assert!(
        doc.contains("block_mask = _block_mask(mask_mod, (doc_q, doc_k), None, q.shape[0], q.shape[-2], k.shape[-2], q.device)"),
        "{doc}"
    );
    let causal = emit_flex(&causal).unwrap().source;
    assert!(
        causal.contains(
            "block_mask = _block_mask(mask_mod, (), None, None, q.shape[-2], k.shape[-2], q.device)"
        ),
        "{causal}"
    );
    // Grouped-query attention: the batch is FlexAttention's `b`, the group axis its `h`; K and V
    // have one head; a mask reading only the batch has a block mask per batch, not per head.
    assert_eq!(
        line(&gqa_document(), "def mask_mod"),
        "return (doc_q[b, q_idx] == doc_k[b, kv_idx])"
    );
    let doc = emit_flex(&gqa_document()).unwrap().source;
    assert!(
        doc.contains("block_mask = _block_mask(mask_mod, (doc_q, doc_k), q.shape[0], None, q.shape[-2], k.shape[-2], q.device)"),
        "{doc}"
    );
    assert!(
        doc.contains("flex_attention(q, k.unsqueeze(1), v.unsqueeze(1), block_mask=block_mask, scale=0.0883883461356163, enable_gqa=True)"),
        "{doc}"
    );
    assert_eq!(
        line(&gqa_alibi(), "def score_mod"),
        "return score + slope[h] * (kv_idx - q_idx).float()"
    );
    // Plain attention: no score_mod, no block mask, nothing to import for them.
    let plain = emit_flex(&fusion(&example("auto/attention.hf")))
        .unwrap()
        .source;
    assert!(
        !plain.contains("score_mod") && !plain.contains("block_mask"),
        "{plain}"
    );
}

#[test]
fn every_flex_twin_is_python() {
    let mut script = String::from("import ast\n");
    for (name, f) in cases() {
        let source = emit_flex(&f).unwrap().source;
        let _ = writeln!(script, "ast.parse({source:?}, {name:?})");
    }
    let out = Command::new("python3")
        .args(["-c", &script])
        .output()
        .expect("python3 is needed to parse the FlexAttention twins (CI machines have it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn inputs_named_as_flex_attention_names_are_renamed() {
    // `h` and `b` are the score_mod's indices inside it; `score` its scores.
    let f = variant(
        "  input h: f32[B]\n",
        "  x = s + broadcast(broadcast(h, axis=1), axis=2)\n",
    );
    let twin = emit_flex(&f).unwrap().source;
    assert!(twin.contains("        return score + h_[h]\n"), "{twin}");
    assert!(
        twin.contains("v: torch.Tensor, scale: torch.Tensor, h_: torch.Tensor)"),
        "{twin}"
    );
}

#[test]
fn what_flex_attention_cannot_compute_has_no_twin() {
    // The log-sum-exp as a second output, a scale without a value, a matrix product alone.
    assert_eq!(
        emit_flex(&fusion(&example("attention/online_wgmma_lse.hf"))),
        None
    );
    let no_value = example("auto/attention.hf").replacen(SCALE, "  input scale: f32\n", 1);
    assert_eq!(emit_flex(&fusion(&no_value)), None);
    let gemm = "fusion g {\n  input a: f32[M, K]\n  input b: f32[K, N]\n  c = sum(broadcast(a, axis=2) * broadcast(b, axis=0), axis=1)\n  output c\n}\n";
    assert_eq!(emit_flex(&fusion(gemm)), None);
    // A bias that reduces an input, or reads one along two different axes of the scores.
    let with_bias = |inputs: &str, bias: &str| {
        // Self-attention (T = S), so that a tensor over S may stand along the keys too.
        let base = example("auto/attention.hf").replace(", T, 128]", ", S, 128]");
        emit_flex(&fusion(&modified(
            &base,
            inputs,
            &format!("  x = s + {bias}\n"),
        )))
    };
    assert_eq!(
        with_bias(
            "  input w: f32[B, S, 4]\n",
            "broadcast(sum(w, axis=2), axis=2)"
        ),
        None
    );
    assert_eq!(
        with_bias(
            "  input w: f32[B, S]\n",
            "broadcast(w, axis=2) * broadcast(w, axis=1)"
        ),
        None
    );
    // The same bias read along the queries only is one.
    assert!(with_bias("  input w: f32[B, S]\n", "broadcast(w, axis=2)").is_some());
}
