//! The attention scheduler (`hopfuse::auto::attention`): the hand examples of
//! `examples/attention/` with their schedule deleted get the hand schedule back (the same CUDA
//! and launch plan), the `examples/auto/` attention programs' schedules are the ping-pong hand
//! examples' with the programs' own names, every fusion shape at D = 128 (batched or not, f16,
//! the log-sum-exp) gets the ping-pong kernel and D = 64 the one-group kernel, and attention it
//! does not take is declined with the reason. The variants (`examples/auto/attention_softcap`,
//! `_alibi`, `_sliding_window`, `_document`) get the kernel with their tensors placed in the S
//! fragment (their schedules are snapshots), lower at D = 128 and D = 64, and compute the
//! plain form's math online (float64, on the host).

use hopfuse::auto::Scheduler;
use hopfuse::examples::without_schedule;
use hopfuse_tests::{compile, example, values};
use std::collections::BTreeMap;

/// The hand examples whose schedule the attention scheduler writes: FlashAttention-3's
/// kernel at D = 128, and the one-group kernel at D = 64 on 128-key tiles (the fastest
/// measured there) and under a sliding window on 64-key tiles (its loop starts at the window
/// only without circular buffers). online_wgmma.hf, the first tensor-core example, keeps its
/// 64-key tiles (docs/attention.md section 2 walks through them), so it is not among them.
const HAND: [&str; 7] = [
    "attention/online_wgmma_overlap_pingpong.hf",
    "attention/online_wgmma_overlap_pingpong_causal.hf",
    "attention/online_wgmma_gqa.hf",
    "attention/online_wgmma_sliding_window.hf",
    "attention/online_wgmma_batched.hf",
    "attention/online_wgmma_causal.hf",
    "attention/online_wgmma_causal_bottom_right.hf",
];

/// The statements of a schedule's text, in order, without comments and blank lines.
fn statements(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .map(String::from)
        .collect()
}

/// The statements inside a program's `schedule { }` block.
fn schedule_block(program: &str) -> &str {
    let block = &program[program.find("\nschedule {\n").expect("a schedule block") + 12..];
    &block[..block.find("\n}").unwrap()]
}

#[test]
fn the_hand_examples_without_their_schedule_lower_to_the_same_kernel() {
    for path in HAND {
        let hand = example(path);
        let auto = without_schedule(&hand);
        let chosen = hopfuse::auto_schedule(&auto, None).unwrap().unwrap();
        assert_eq!(chosen.scheduler, Scheduler::Attention, "{path}");
        let (h, a) = (compile(&hand), compile(&auto));
        let note = a.plan.auto_schedule.clone().expect("a note");
        assert_eq!(
            note.scheduler.as_deref(),
            Some("attention"),
            "{path}: {}",
            note.reason
        );
        assert!(
            a.cuda == h.cuda,
            "{path}: the automatic schedule's CUDA differs from the hand schedule's:\n{}",
            chosen.block()
        );
        // The statements themselves are the hand schedule's, in its order (comments aside).
        assert_eq!(
            statements(&chosen.text),
            statements(schedule_block(&hand)),
            "{path}"
        );
    }
}

/// `examples/auto/attention*.hf` write the product inline, so the builder names its tensors;
/// the ping-pong hand examples name them. Each pair: the auto example's name, the hand's.
const HAND_NAMES: [(&str, &str); 6] = [
    ("out", "ob"),
    ("o_mul", "pv"),
    ("o_cast_f32", "pf"),
    ("o_cast_f322", "vf"),
    ("o_broadcast", "pf_broadcast"),
    ("o_broadcast2", "vf_broadcast"),
];

#[test]
fn the_auto_examples_schedule_is_the_ping_pong_hand_schedule_with_their_names() {
    for (auto, hand) in [
        (
            "auto/attention.hf",
            "attention/online_wgmma_overlap_pingpong.hf",
        ),
        (
            "auto/attention_causal.hf",
            "attention/online_wgmma_overlap_pingpong_causal.hf",
        ),
    ] {
        let chosen = attention_schedule(&example(auto));
        // The auto example's statements with its tensors renamed to the hand example's: the
        // tensor a statement acts on is the name before its first `.`.
        let renamed: Vec<String> = statements(&chosen.text)
            .into_iter()
            .map(|line| match line.split_once('.') {
                Some((tensor, rest)) => match HAND_NAMES.iter().find(|(a, _)| *a == tensor) {
                    Some((_, h)) => format!("{h}.{rest}"),
                    None => line,
                },
                None => line,
            })
            .collect();
        let hand_source = example(hand);
        assert_eq!(
            renamed,
            statements(schedule_block(&hand_source)),
            "{auto} against {hand}"
        );
        // Applied to the hand example's fusion, that schedule lowers to the hand's CUDA.
        let fusion = &hand_source[..hand_source.find("\nschedule {\n").unwrap()];
        let applied = format!("{fusion}\nschedule {{\n{}\n}}\n", renamed.join("\n"));
        assert!(
            compile(&applied).cuda == compile(&hand_source).cuda,
            "{auto}'s schedule on {hand}'s fusion lowers to other CUDA"
        );
    }
}

/// The automatic schedule of `source` (bench sizes), which must be the attention scheduler's.
fn attention_schedule(source: &str) -> hopfuse::auto::AutoSchedule {
    let chosen = hopfuse::auto_schedule(source, None)
        .unwrap()
        .unwrap_or_else(|d| panic!("declined: {}", d.reason));
    assert_eq!(chosen.scheduler, Scheduler::Attention, "{}", chosen.reason);
    chosen
}

/// Why the automatic schedulers decline `source`.
fn declined(source: &str) -> String {
    match hopfuse::auto_schedule(source, None).unwrap() {
        Ok(a) => panic!("scheduled by {}:\n{}", a.scheduler.name(), a.block()),
        Err(d) => d.reason,
    }
}

#[test]
fn the_log_sum_exp_output_gets_the_ping_pong_kernel() {
    // online_wgmma_lse.hf's fusion (the same tensor names as online_wgmma_overlap_pingpong.hf)
    // with the ping-pong hand schedule: the automatic schedule lowers to the same CUDA.
    let lse = example("attention/online_wgmma_lse.hf");
    let fusion = &lse[..lse.find("\nschedule {\n").unwrap()];
    let pingpong = example("attention/online_wgmma_overlap_pingpong.hf");
    let hand = format!("{fusion}\nschedule {{\n{}\n}}\n", schedule_block(&pingpong));
    let auto = without_schedule(&lse);
    let chosen = attention_schedule(&auto);
    assert!(
        chosen.reason.contains("the log-sum-exp `lse`")
            && chosen
                .reason
                .contains("online_wgmma_overlap_pingpong's kernel"),
        "{}",
        chosen.reason
    );
    let c = compile(&auto);
    assert!(c.cuda == compile(&hand).cuda);
    // The log-sum-exp is written from the running statistics after the tile loop.
    assert!(c.cuda.contains("logf("), "no log in the kernel");
}

#[test]
fn unbatched_and_f16_fusions_at_d128_get_the_ping_pong_kernel() {
    let batched = without_schedule(&example("attention/online_wgmma_overlap_pingpong.hf"));
    // online_wgmma.hf's fusion ([S, 64], no batch axis) at D = 128.
    let unbatched = without_schedule(&example("attention/online_wgmma.hf")).replace("64]", "128]");
    for (source, shape, dtype) in [
        (batched.replace("bf16", "f16"), "[B, S, D] f16", "f16"),
        (unbatched.clone(), "[S, D] bf16", "bf16"),
        (unbatched.replace("bf16", "f16"), "[S, D] f16", "f16"),
    ] {
        let chosen = attention_schedule(&source);
        assert!(
            chosen.reason.contains(&format!("{shape} with D = 128"))
                && chosen
                    .reason
                    .contains("2 consumer warp groups of 64 queries"),
            "{}",
            chosen.reason
        );
        let c = compile(&source);
        assert!(c.cuda.contains("__launch_bounds__(384, 1)"), "{shape}");
        assert!(
            c.cuda.contains("setmaxnreg.inc.sync.aligned.u32 240;"),
            "{shape}"
        );
        assert!(
            c.cuda.contains(&format!(
                "wgmma.mma_async.sync.aligned.m64n128k16.f32.{dtype}.{dtype}"
            )),
            "{shape}"
        );
    }
    // Without the batch axis the query tile is on blockIdx.x alone: the positions shift by one.
    let chosen = attention_schedule(&unbatched);
    assert!(
        chosen.text.contains("s_sum.parallelize(2, TIDy)\n"),
        "{}",
        chosen.text
    );
    assert!(!chosen.text.contains("BIDy"), "{}", chosen.text);
}

#[test]
fn a_sliding_window_at_d128_keeps_the_one_group_kernel() {
    // With circular buffers the key loop starts at 0, so the window's skipped tiles would run.
    let window = without_schedule(&example("attention/online_wgmma_sliding_window.hf"))
        .replace("64]", "128]");
    let chosen = attention_schedule(&window);
    assert!(
        chosen
            .reason
            .contains("online_wgmma_d128's kernel, one warp group without a producer"),
        "{}",
        chosen.reason
    );
    assert!(!chosen.text.contains("circular_buffer"), "{}", chosen.text);
    // The causal mask has no lower side: the ping-pong kernel.
    let causal =
        without_schedule(&example("attention/online_wgmma_causal.hf")).replace("64]", "128]");
    assert!(attention_schedule(&causal).text.contains("turns=products"));
}

#[test]
fn the_auto_examples_compile_with_the_attention_scheduler() {
    for (path, causal) in [
        ("auto/attention.hf", false),
        ("auto/attention_causal.hf", true),
    ] {
        let source = example(path);
        let chosen = attention_schedule(&source);
        assert!(chosen.reason.contains("with D = 128"), "{}", chosen.reason);
        // The product written inline: its tile's tensors are the builder's names.
        assert!(chosen.text.contains("o_broadcast2.parallelize(7, Mma)\n"));
        let c = compile(&source);
        let ran = |name: &str| c.passes.iter().any(|p| p.name == name);
        // The causal mask bounds the key loop at the diagonal; no mask, no bound.
        assert_eq!(ran("mask_bounds"), causal, "{path}");
        assert_eq!(
            c.cuda
                .contains("hf_min<index_t>(hf_ceil_div<index_t>(T, 128), s2_o + 1)"),
            causal,
            "{path}"
        );
        // The bench sizes include a ragged one (S and T not multiples of the tile).
        assert!(source.contains("// bench: B=3,S=1000,T=1037"), "{path}");
    }
}

#[test]
fn d256_gets_the_ping_pong_kernel_on_64_key_tiles() {
    let source = example("auto/attention_d256.hf");
    let chosen = attention_schedule(&source);
    assert!(
        chosen.reason.contains("with D = 256")
            && chosen
                .reason
                .contains("online_wgmma_overlap_pingpong's kernel on 64-key tiles")
            && chosen
                .reason
                .contains("q's and k's tiles as four 64-column slabs"),
        "{}",
        chosen.reason
    );
    // The D = 128 schedule but for the key tile: 64 keys, so the slab splits and the groups'
    // turns are the same statements.
    let d128 = attention_schedule(&example("auto/attention.hf"));
    let narrowed = d128
        .text
        .replace("s_sum.split(4, 128)", "s_sum.split(4, 64)");
    assert_eq!(statements(&chosen.text), statements(&narrowed));
    let c = compile(&source);
    for wgmma in ["m64n64k16.f32.bf16.bf16", "m64n256k16.f32.bf16.bf16"] {
        assert!(
            c.cuda
                .contains(&format!("wgmma.mma_async.sync.aligned.{wgmma}")),
            "{wgmma}"
        );
    }
    assert!(c.cuda.contains("setmaxnreg.inc.sync.aligned.u32 240;"));
    // q's 128 x 256 tile and two stages of K's and V's 64 x 256 tiles: 192 KiB.
    assert!(
        c.cuda.contains("hf_smem + 196608);  // 1 mbarriers"),
        "shared memory layout"
    );
    // Causal and under a window too (the window keeps the one-group kernel).
    let causal = source.replace(
        "  m = max(s, axis=2)\n  e = exp(s - broadcast(m, axis=2))",
        "  keep = iota(s, axis=2) <= iota(s, axis=1)\n  sm = where(keep, s, -1.0 / 0.0)\n  m = max(sm, axis=2)\n  e = exp(sm - broadcast(m, axis=2))",
    );
    assert!(causal.contains("keep ="), "the causal form was written");
    assert!(attention_schedule(&causal).text.contains("turns=products"));
    assert!(compile(&causal)
        .passes
        .iter()
        .any(|p| p.name == "mask_bounds"));
}

#[test]
fn d64_keeps_the_one_group_kernel_and_says_why() {
    let source =
        without_schedule(&example("attention/online_wgmma_causal.hf")).replace("bf16", "f16");
    let chosen = attention_schedule(&source);
    assert!(
        chosen.reason.contains("[S, D] f16 with D = 64")
            && chosen.reason.contains(
                "online_wgmma_batched's kernel, one warp group without a producer, the fastest measured at D = 64"
            ),
        "{}",
        chosen.reason
    );
    assert!(!chosen.text.contains("circular_buffer"), "{}", chosen.text);
    let c = compile(&source);
    assert!(c
        .cuda
        .contains("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"));
    assert!(!c.cuda.contains("setmaxnreg"));
}

#[test]
fn attention_the_kernel_does_not_take_is_declined_with_the_reason() {
    // f32 inputs (examples/attention/attention.hf without its schedule).
    let f32 = declined(&without_schedule(&example("attention/attention.hf")));
    assert!(
        f32.contains(
            "`o` is attention of f32 `q`, `k`, `v`; its tensor-core kernel takes bf16 or f16"
        ),
        "{f32}"
    );
    let d128 = without_schedule(&example("attention/online_wgmma_d128.hf"));
    // A head dimension the kernel has no tiling for, and one given as a size symbol.
    let d96 = declined(&d128.replace("128]", "96]"));
    assert!(
        d96.contains(
            "`q` has head dimension 96; the attention kernel takes a constant 64, 128 or 256"
        ),
        "{d96}"
    );
    let symbolic = declined(&d128.replace("128]", "D]"));
    assert!(symbolic.contains("`q` has head dimension D;"), "{symbolic}");
    // The probabilities multiplied in f32.
    let f32_p = declined(&d128.replace(
        "pb = cast(p, bf16)\n  pf = cast(broadcast(pb, axis=3), f32)",
        "pf = broadcast(p, axis=3)",
    ));
    assert!(
        f32_p.contains("`o` multiplies the probabilities in f32"),
        "{f32_p}"
    );
    // The f32 result written without a cast.
    let uncast = declined(&d128.replace("  ob = cast(o, bf16)\n  output ob", "  output o"));
    assert!(
        uncast.contains("`o` is the f32 sum of the product"),
        "{uncast}"
    );
}

/// The variants of `examples/auto/` FlexAttention users write (a score modification or a
/// mask), each with the tensors its schedule places besides the softmax's.
const VARIANTS: [&str; 5] = [
    "auto/attention_softcap.hf",
    "auto/attention_alibi.hf",
    "auto/attention_sliding_window.hf",
    "auto/attention_document.hf",
    "auto/attention_document_causal.hf",
];

#[test]
fn the_variants_schedules_place_their_tensors_in_the_s_fragment() {
    for path in VARIANTS {
        let chosen = attention_schedule(&example(path));
        let name = path.trim_start_matches("auto/").trim_end_matches(".hf");
        insta::assert_snapshot!(
            format!("auto_attention__{name}"),
            format!("// {}\n{}", chosen.reason, chosen.text)
        );
    }
    // The softcap's result and ALiBi's biased scores at the tile loop with the softmax's
    // tensors (the ping-pong kernel's position 4); the slope's per-query broadcast once per
    // block before the tile loop (position 2: the batch and the query tile).
    let softcap = attention_schedule(&example(VARIANTS[0]));
    assert!(softcap.text.contains("\ns.inline_at(4)\nsc.inline_at(4)\n"));
    assert!(softcap
        .reason
        .contains("the scores' modification `sc` of `s`"));
    let alibi = attention_schedule(&example(VARIANTS[1]));
    assert!(alibi.text.contains("\nsb.inline_at(4)\n"));
    assert!(
        alibi.text.ends_with("\nsb_broadcast.inline_at(2)\n"),
        "{}",
        alibi.text
    );
    // `dist` (over queries and keys, from iotas) is computed where `sb` reads it.
    assert!(!alibi.text.contains("dist."), "{}", alibi.text);
    // The document masks: the ping-pong kernel, each block visiting the key tiles it lists, and
    // the reason says so.
    for path in [VARIANTS[3], VARIANTS[4]] {
        let doc = attention_schedule(&example(path));
        assert!(doc.text.contains("turns=products"));
        assert!(
            doc.reason.contains("the document mask `")
                && doc
                    .reason
                    .contains("visiting only the key tiles whose ids' range meets"),
            "{}",
            doc.reason
        );
    }
}

#[test]
fn the_variants_lower_on_their_kernels() {
    for path in VARIANTS {
        let source = example(path);
        let c = compile(&source);
        let ran = |name: &str| c.passes.iter().any(|p| p.name == name);
        let window = path.ends_with("sliding_window.hf");
        // The sliding window keeps the one-group kernel, its tiles classified; the others run
        // the ping-pong kernel, with no tile classification.
        assert_eq!(c.cuda.contains("setmaxnreg"), !window, "{path}");
        assert_eq!(ran("mask_bounds"), window, "{path}");
        assert_eq!(ran("mask_tiles"), window, "{path}");
        assert!(source.contains("// bench: B=3,S=1000,T=1037"), "{path}");
        assert!(source.contains("// bench: B=128,S=2048,T=2048\n// bench: B=32,S=8192,T=8192"));
    }
    let cuda = |path: &str| compile(&example(path)).cuda;
    // The cap on each score, in the tile loop (after the first key tile's wgmma), its tanh
    // in the absolute form (pass online_softmax).
    let softcap = cuda(VARIANTS[0]);
    assert!(
        softcap.contains("= hf_tanh_abs(")
            && softcap.find("= hf_tanh_abs(") > softcap.find("wgmma.mma_async")
    );
    // `s / cap` as a product by the cap's reciprocal (pass row_math), computed once by the
    // consumer warps before their key loops.
    let recip = softcap
        .find("cap_recip[0] = 1.0f / (cap);")
        .expect("the cap's reciprocal");
    assert!(recip > softcap.find("consumer warps").unwrap());
    assert!(recip < softcap.find("for (index_t t_o_first").unwrap());
    // The scale and the reciprocal merged into one product (pass merged_scales).
    assert!(softcap.contains("s_sum_acc[r] = s_sum_acc[r] * (scale * cap_recip[0]);"));
    assert!(softcap.contains("sc_div[0] = s_sum_acc[r2];"));
    assert!(!softcap.contains("/ cap;"));
    // The slope read once per block, before the producer's and consumers' key loops.
    let alibi = cuda(VARIANTS[1]);
    let slope = alibi
        .find("sb_broadcast[h] = slope[b];")
        .expect("the slope's row fragment");
    assert!(slope < alibi.find("for (index_t t_o_first").unwrap());
    assert!(alibi.contains("sb_broadcast[r2 / 2 % 2]"));
    // The ids compared per score: the query's read from global memory, the key's from their
    // cache beside K (the bench sizes' schedule).
    let doc = cuda(VARIANTS[3]);
    assert!(doc.contains("doc_q[") && doc.contains("doc_ks[") && !doc.contains("doc_k["));
}

#[test]
fn the_variants_at_d64_get_the_one_group_kernel() {
    for path in [VARIANTS[0], VARIANTS[1], VARIANTS[3], VARIANTS[4]] {
        let source = example(path).replace("128]", "64]");
        let chosen = attention_schedule(&source);
        assert!(
            chosen.reason.contains("with D = 64")
                && chosen.reason.contains("online_wgmma_batched's kernel"),
            "{path}: {}",
            chosen.reason
        );
        let c = compile(&source);
        assert!(
            c.cuda
                .contains("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"),
            "{path}"
        );
        assert!(!c.cuda.contains("setmaxnreg"), "{path}");
    }
    // ALiBi's slope before the tile loop of the one-group kernel: position 2 there too.
    let alibi = attention_schedule(&example(VARIANTS[1]).replace("128]", "64]"));
    assert!(
        alibi.text.contains("\nsb.inline_at(3)\n")
            && alibi.text.ends_with("\nsb_broadcast.inline_at(2)\n")
    );
}

#[test]
fn a_score_modification_keeps_the_causal_tile_classification() {
    // ALiBi under the causal mask: the bias, then the mask on iotas, whose tiles are classified.
    let source = example(VARIANTS[1]).replace(
        "  m = max(sb, axis=2)\n  e = exp(sb - ",
        "  keep = iota(s, axis=2) <= iota(s, axis=1)\n  sk = where(keep, sb, -1.0 / 0.0)\n  m = max(sk, axis=2)\n  e = exp(sk - ",
    );
    let chosen = attention_schedule(&source);
    assert!(
        chosen
            .reason
            .contains("the scores' modification `sb` of `s`")
            && chosen
                .reason
                .contains("the causal mask `keep` (key tiles past the diagonal skipped"),
        "{}",
        chosen.reason
    );
    let c = compile(&source);
    assert!(c.passes.iter().any(|p| p.name == "mask_bounds"));
    assert!(c
        .cuda
        .contains("hf_min<index_t>(hf_ceil_div<index_t>(T, 128), s2_o + 1)"));
}

#[test]
fn a_side_value_computed_over_neither_queries_nor_keys_gets_the_attention_kernel() {
    // The softcap's reciprocal written out (a 0-dim tensor computed from the scalar input:
    // it once opened no loops for the product reading it, which hid the scores' loops from
    // `s`), inline and named, and ALiBi's slope computed per head first (`[B]`).
    let softcap = example(VARIANTS[0]);
    let alibi = example(VARIANTS[1]);
    let forms = [
        softcap.replace("s / cap", "s * (1.0 / cap)"),
        softcap.replace(
            "  sc = cap * tanh(s / cap)",
            "  rc = 1.0 / cap\n  sc = cap * tanh(s * rc)",
        ),
        alibi.replace(
            "  sb = s + broadcast(broadcast(slope, axis=1), axis=2) * dist",
            "  hs = slope * 0.5\n  sb = s + broadcast(broadcast(hs, axis=1), axis=2) * dist",
        ),
    ];
    let mut kernels = Vec::new();
    for source in &forms {
        assert!(*source != softcap && *source != alibi);
        let c = compile(source);
        let note = c.plan.auto_schedule.clone().expect("a note");
        assert_eq!(
            note.scheduler.as_deref(),
            Some("attention"),
            "{}",
            note.reason
        );
        assert!(c.cuda.contains("setmaxnreg") && c.cuda.contains("wgmma.mma_async"));
        kernels.push(c.cuda);
    }
    // The reciprocal computed once by the consumer warps before their key loops, the scores
    // multiplied by it; the per-head value once per block, before the key loops too.
    let [inline, named, per_head] = &kernels[..] else {
        unreachable!()
    };
    for (cuda, r) in [(inline, "sc_div"), (named, "rc")] {
        let once = cuda
            .find(&format!("{r}[0] = 1.0f / cap;"))
            .unwrap_or_else(|| panic!("{r} computed once"));
        assert!(once > cuda.find("consumer warps").unwrap());
        assert!(once < cuda.find("for (index_t t_o_first").unwrap());
        assert!(cuda.contains(&format!("s_sum_acc[r] = s_sum_acc[r] * (scale * {r}[0]);")));
        assert!(cuda.contains("sc_mul[0] = s_sum_acc[r2];"));
    }
    let half = per_head.find("hs[0] = slope[b] * 0.5f;").expect("hs");
    assert!(half < per_head.find("for (index_t t_o_first").unwrap());
}

#[test]
fn a_value_computed_per_key_alone_is_declined_with_the_reason() {
    // The slope broadcast over the keys first: a [B, T] tensor, which no fragment holds.
    let source = example(VARIANTS[1]).replace(
        "broadcast(broadcast(slope, axis=1), axis=2)",
        "broadcast(broadcast(slope, axis=1), axis=1)",
    );
    let reason = declined(&source);
    assert!(
        reason.contains("the expression `broadcast(slope, axis=1)` is computed per key, before a broadcast over the queries")
            && reason.contains("`broadcast(broadcast(slope, axis=1), axis=2)`"),
        "{reason}"
    );
}

#[test]
fn the_variants_online_form_computes_their_plain_math() {
    // The float64 reference of the plain form against the online form over tiles of the key
    // axis (what the kernel computes), at a ragged size: the modification and the mask are
    // computed per tile as the plain form computes them.
    let sizes: BTreeMap<String, i64> = [("B", 2), ("S", 13), ("T", 37)]
        .map(|(k, v)| (k.to_string(), v))
        .into();
    for path in VARIANTS {
        // In float64 throughout (the online form applies no cast, the plain form rounds at
        // each), the result itself as the output.
        let source = example(path)
            .replace("  out = cast(o, bf16)\n  output out", "  output o")
            .replace("bf16", "f64")
            .replace("f32", "f64");
        let f = hopfuse::reference_fusion(&source).unwrap();
        let mut inputs = BTreeMap::new();
        for (k, &x) in f.inputs.iter().enumerate() {
            let t = &f.tensors[x];
            let n: i64 = f
                .logical(x)
                .iter()
                .map(|&a| f.class_extent(f.class_of(a)).eval(&sizes).unwrap())
                .product();
            // Documents of 4 positions (queries and keys alike); ALiBi's slopes and the other
            // inputs in [-2, 2).
            let v = match (t.value, t.name.as_str()) {
                (Some(v), _) => vec![v],
                (None, "doc_q" | "doc_k") => {
                    let len = n / sizes["B"];
                    (0..n).map(|i| ((i % len) / 4) as f64).collect()
                }
                (None, _) => values(n as usize, k as u64 + 1),
            };
            inputs.insert(t.name.clone(), v);
        }
        let plain = hopfuse::backend::reference::evaluate(&f, &sizes, &inputs).unwrap();
        let p = hopfuse::fusion::online_softmax::find_all(&f).remove(0);
        let plain = &plain[&f.tensors[p.result].name];
        assert!(plain.iter().all(|x| x.is_finite()), "{path}");
        for tile in [8, 16] {
            let online =
                hopfuse::backend::reference::online::evaluate(&f, &p, tile, &sizes, &inputs)
                    .unwrap();
            assert_eq!(plain.len(), online.len(), "{path}");
            for (i, (a, b)) in plain.iter().zip(&online).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-12 * a.abs().max(1.0),
                    "{path}, tile {tile}: element {i}: plain {a}, online {b}"
                );
            }
        }
    }
}

#[test]
fn grouped_query_attention_gets_the_kernel_with_its_heads_on_a_block_axis() {
    // online_wgmma_gqa.hf without its schedule lowers to the hand kernel (`HAND`); here the
    // reason, the form without a batch axis, a causal mask, and the peers that decline it.
    let auto = without_schedule(&example("attention/online_wgmma_gqa.hf"));
    let chosen = attention_schedule(&auto);
    assert!(
        chosen.reason.contains(
            "[B, G, S, D] (G query heads per K/V head of [B, T, D], on blockIdx.z) bf16 with D = 128"
        ),
        "{}",
        chosen.reason
    );
    assert!(
        chosen.text.contains("s_sum.parallelize(1, BIDz)\n"),
        "{}",
        chosen.text
    );
    // Without the batch axis the heads take blockIdx.y.
    let unbatched = auto
        .replace("bf16[B, G, S, 128]", "bf16[G, S, 128]")
        .replace("bf16[B, T, 128]", "bf16[T, 128]")
        .replace("axis=[1, 2]", "axis=[0, 1]")
        .replace("axis=3", "axis=2")
        .replace("axis=4", "axis=3")
        .replace("// bench: B=16,G=4,", "// bench: G=4,")
        .replace("// bench: B=2,G=3,", "// bench: G=3,");
    let chosen = attention_schedule(&unbatched);
    assert!(
        chosen
            .reason
            .contains("[G, S, D] (G query heads sharing one K/V head of [T, D], on blockIdx.y)"),
        "{}",
        chosen.reason
    );
    assert!(
        chosen.text.contains("s_sum.parallelize(0, BIDy)\n"),
        "{}",
        chosen.text
    );
    let c = compile(&unbatched);
    assert!(
        c.cuda.contains("const index_t g = blockIdx.y;"),
        "the heads on blockIdx.y"
    );
    // A causal mask over the group's queries: the key loop bounded at the diagonal.
    let causal = auto.replace(
        "  m = max(s, axis=3)\n  e = exp(s - broadcast(m, axis=3))",
        "  keep = iota(s, axis=3) <= iota(s, axis=2)\n  sm = where(keep, s, -1.0 / 0.0)\n  m = max(sm, axis=3)\n  e = exp(sm - broadcast(m, axis=3))",
    );
    assert!(causal.contains("keep ="), "the causal form was written");
    assert!(attention_schedule(&causal)
        .reason
        .contains("the causal mask `keep`"));
    assert!(compile(&causal)
        .passes
        .iter()
        .any(|p| p.name == "mask_bounds"));
    // D = 64 (the one-group kernel) and a sliding window (the one-group kernel at D = 128).
    let d64 = auto.replace(", 128]", ", 64]");
    assert!(attention_schedule(&d64)
        .reason
        .contains("online_wgmma_batched's kernel"));
    assert!(compile(&d64)
        .cuda
        .contains("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"));
    let window = auto.replace(
        "  m = max(s, axis=3)\n  e = exp(s - broadcast(m, axis=3))",
        "  qi = iota(s, axis=2)\n  kj = iota(s, axis=3)\n  keep = logical_and(kj <= qi, qi - kj < 256)\n  sw = where(keep, s, -1.0 / 0.0)\n  m = max(sw, axis=3)\n  e = exp(sw - broadcast(m, axis=3))",
    );
    assert!(attention_schedule(&window)
        .reason
        .contains("online_wgmma_d128's kernel, one warp group without a producer"));
    assert!(compile(&window)
        .passes
        .iter()
        .any(|p| p.name == "mask_bounds"));
    // The SDPA and FlexAttention peers take the group axis as query heads of one K/V head
    // (enable_gqa=True), batched or not.
    let fusion = |src: &str| {
        let program = hopfuse::frontend::parse(src).unwrap();
        hopfuse::fusion::build(&program.fusion).unwrap()
    };
    for (src, q, kv) in [
        (&auto, "q", "k.unsqueeze(1)"),
        (&unbatched, "q.unsqueeze(0)", "k.unsqueeze(0).unsqueeze(0)"),
    ] {
        let f = fusion(src);
        let sdpa =
            hopfuse::backend::torch::emit_sdpa(&f, hopfuse::backend::torch::SdpaBackend::Default)
                .unwrap()
                .source;
        assert!(
            sdpa.contains(&format!("scaled_dot_product_attention({q}, {kv}, "))
                && sdpa.contains("enable_gqa=True"),
            "{sdpa}"
        );
        let flex = hopfuse::backend::torch::emit_flex(&f).unwrap().source;
        assert!(
            flex.contains(&format!("flex_attention({q}, {kv}, "))
                && flex.contains("enable_gqa=True"),
            "{flex}"
        );
    }
}

/// A per-key input the mask reads (the document ids of the keys, `doc_k: i32[B, T]`) is cached
/// in shared memory in K's stages, filled by K's producer warp, where each score read it from
/// global memory after S's wait; K's stage is then released after the last read of the ids,
/// not when S is done. Only where TMA can load it: T = 1037 (rows of 4148 bytes) keeps the
/// loads.
#[test]
fn a_per_key_input_of_the_mask_is_cached_beside_k() {
    let source = example("auto/attention_document.hf");
    let chosen = attention_schedule(&source);
    let lines = statements(&chosen.text);
    for line in [
        "doc_ks = cache_after(doc_k, memory=shared, load=tma)",
        "doc_ks.parallelize(2, Bulk)",
        "doc_ks.circular_buffer(2, warp_specialized(TIDy, registers=[24, 240], turns=products))",
    ] {
        assert!(lines.iter().any(|l| l == line), "{line}:\n{}", chosen.text);
    }
    assert!(
        chosen
            .reason
            .contains("`doc_k` (per key) cached in shared memory beside K"),
        "{}",
        chosen.reason
    );
    let at = |t: i64| BTreeMap::from([("B".into(), 3), ("S".into(), 1000), ("T".into(), t)]);
    let ragged = hopfuse::auto_schedule(&source, Some(&at(1037)))
        .unwrap()
        .unwrap();
    assert!(!ragged.text.contains("doc_ks"), "{}", ragged.text);
    assert!(!ragged.reason.contains("cached in shared memory"));
    let aligned = hopfuse::auto_schedule(&source, Some(&at(1040)))
        .unwrap()
        .unwrap();
    assert!(aligned.text.contains("doc_ks = cache_after"));

    // The kernel: one box of the tile's ids per K stage, on K's barriers, and in the key loop
    // K's stage released after the ids are compared, before the P V product's wait.
    let options = hopfuse::CompileOptions {
        specialize: true,
        aligned_for: Some(at(2048)),
        ..Default::default()
    };
    let cuda = hopfuse::compile(&source, &options).unwrap().cuda;
    assert!(
        cuda.contains("hf_tma_load_2d(&doc_ks[t_o % 2 * 128], &doc_ks_map")
            && cuda.contains("&ks_doc_ks_full[t_o % 2]);"),
        "{cuda}"
    );
    assert!(
        !cuda.contains("doc_k["),
        "the ids are not read from global memory"
    );
    let main = &cuda[cuda.find("for (index_t t_o_pv").expect("the key loop")..];
    let main = &main[..main.find("for (index_t t_o_last").unwrap()];
    let read = main.rfind("doc_ks[t_o % 2 * 128").expect("the ids read");
    let release = main
        .find("hf_mbarrier_arrive_per_warp(&ks_doc_ks_empty[t_o % 2]);")
        .expect("K's stage released");
    let s_done = main.find("hf_wgmma_wait<1>();").unwrap();
    let pv_done = main.find("hf_wgmma_wait<0>();").unwrap();
    assert!(
        s_done < read && read < release && release < pv_done,
        "{main}"
    );
}

/// Pass `scaled_max`: plain attention's scores feed only the row maximum and the exponentials,
/// so the maximum is taken before the scale (under `scale > 0`, the scaled form otherwise) and
/// the scale joins the exponential's FMA; a softcap's scores also feed the cap, so its kernel
/// keeps the scaling (merged with the cap's reciprocal: pass merged_scales) and its maximum is
/// of the capped scores, with no branch.
#[test]
fn the_plain_kernel_takes_the_maximum_before_the_scale() {
    let plain = compile(&example("auto/attention.hf")).cuda;
    assert_eq!(plain.matches("if (scale > 0.0f) {").count(), 2, "{plain}");
    assert_eq!(
        plain
            .matches("fmaf(s_sum_acc[r4], (scale * 1.442695f), e_broadcast[0])")
            .count(),
        2
    );
    assert!(!plain.contains("s_sum_acc[r] = s_sum_acc[r] * scale;"));
    let unscaled = plain.find("if (scale > 0.0f) {").unwrap();
    let branch = &plain[unscaled..plain[unscaled..].find("} else {").unwrap() + unscaled];
    assert!(
        branch.contains("hf_maximum(m_acc_part[r2 / 2 % 2], s_sum_acc[r2])")
            && branch.contains("m_acc_part[0] = m_acc_part[0] * scale;"),
        "{branch}"
    );
    let softcap = compile(&example("auto/attention_softcap.hf")).cuda;
    assert!(softcap.contains("s_sum_acc[r] = s_sum_acc[r] * (scale * cap_recip[0]);"));
    assert!(!softcap.contains("> 0.0f"));
}

/// Pass `fma_exp2`: where the scores take a MUFU op of their own (a softcap's tanh), one
/// exponential in four is computed on the FMA pipe; plain attention keeps every exponential
/// on the MUFU.
#[test]
fn a_quarter_of_the_softcaps_exponentials_go_to_the_fma_pipe() {
    for path in [
        "auto/attention_softcap.hf",
        "auto/attention_softcap_hardware_tanh.hf",
    ] {
        let cuda = compile(&example(path)).cuda;
        assert_eq!(cuda.matches("if (r5 % 4 == 3) {").count(), 2, "{path}");
        assert_eq!(cuda.matches("e[r5] = hf_exp2_fma(e_sub[0]);").count(), 2);
        assert_eq!(cuda.matches("e[r5] = hf_exp2_ftz(e_sub[0]);").count(), 2);
        assert!(cuda.contains("__device__ __forceinline__ float hf_exp2_fma(float x)"));
    }
    let plain = compile(&example("auto/attention.hf")).cuda;
    assert!(!plain.contains("hf_exp2_fma"));
}

/// Pass `distributed_bias`: specialised (so that `index_float` splits the index difference into
/// a base and a constant), ALiBi's bias is the slope times the base once per key tile and one
/// FMA per score; generic, the index stays one conversion and the pass leaves it.
#[test]
fn alibis_bias_is_one_fma_per_score_once_specialised() {
    let source = example("auto/attention_alibi.hf");
    let sizes = BTreeMap::from([("B".into(), 128), ("S".into(), 2048), ("T".into(), 2048)]);
    let options = hopfuse::CompileOptions {
        specialize: true,
        aligned_for: Some(sizes),
        ..Default::default()
    };
    let cuda = hopfuse::compile(&source, &options).unwrap().cuda;
    assert_eq!(
        cuda.matches("[1] = sb_broadcast[1] * dist_base").count(),
        2,
        "{cuda}"
    );
    assert_eq!(
        cuda.matches("sb_mul[0] = fmaf(sb_broadcast2[0], ").count(),
        2
    );
    assert!(!cuda.contains("dist[0] ="));
    let generic = compile(&source).cuda;
    assert!(
        generic.contains("sb_mul[0] = sb_broadcast2[0] * dist[0];"),
        "{generic}"
    );
}

#[test]
fn a_document_mask_visits_only_the_listed_key_tiles() {
    // Pass document_tiles (docs/attention.md section 6): the kernel lists its key tiles before
    // the body, every loop over them counts the list, and every copy, bound and id read takes
    // the tile from it; the pipeline's slots and phases still count iterations.
    for (path, band) in [
        ("auto/attention_document.hf", None),
        ("auto/attention_document_causal.hf", Some(", j - i <= 0")),
    ] {
        let c = compile(&example(path));
        let v = c.kernel.visited.as_ref().expect("a list of key tiles");
        assert_eq!((v.query_tile, v.key_tile), (128, 128), "{path}");
        let hopfuse::kir::TileTest::Ids {
            query_ids,
            key_ids,
            upper,
            ..
        } = &v.test
        else {
            panic!("{path}: a list by ids");
        };
        assert_eq!((query_ids.as_str(), key_ids.as_str()), ("doc_q", "doc_k"));
        assert_eq!(upper.is_some(), band.is_some(), "{path}");
        let ir = &c.passes.last().unwrap().ir;
        let header = ir.lines().find(|l| l.contains("visited(")).unwrap();
        assert_eq!(
            header,
            format!(
                "  visited(t_o, 128, 128): doc_q[b * S] from s2_o * 128 of S, doc_k[b * T] of T{} at smem 164944",
                band.unwrap_or("")
            ),
            "{path}"
        );
        let cuda = &c.cuda;
        assert!(cuda.contains("hf_visit_document_tiles<128, 128, 1024>(doc_q + (b * S), s2_o * 128, S, doc_k + (b * T), T, "), "{path}");
        // The producer's two loops, the consumers' first, main and last: all bounded by the list.
        assert_eq!(cuda.matches("t_o < hf_visited_n;").count(), 2, "{path}");
        assert!(cuda.contains("t_o_pv < hf_visited_n - 1;"), "{path}");
        assert!(
            cuda.contains("const index_t t_o = hf_visited_n - 1;"),
            "{path}"
        );
        // No key tile index but the list's: every `t_o * 128` became the listed tile's.
        let tile = "hf_index_in<index_t>(hf_visited[t_o], hf_ceil_div<index_t>(T, 128)) * 128";
        assert!(!cuda.contains("(t_o * 128"), "{path}");
        assert_eq!(cuda.matches(&format!("(int)({tile})")).count(), 5, "{path}");
        // Slots and phases from the iteration.
        assert!(
            cuda.contains("hf_mbarrier_wait(&ks_doc_ks_full[t_o % 2], (unsigned)(t_o / 2 % 2));")
        );
        assert_eq!(
            c.plan
                .constraints
                .iter()
                .filter(|k| matches!(k, hopfuse::plan::Constraint::AtMost { max: 1024, .. }))
                .count(),
            1,
            "{path}"
        );
    }
    // The one-group kernel at D = 64 lists its tiles too; the plain causal mask keeps its own
    // classification, and no list.
    let d64 = compile(&example(VARIANTS[3]).replace("128]", "64]"));
    assert!(d64.kernel.visited.is_some());
    let causal = compile(&example("auto/attention_causal.hf"));
    assert!(causal.kernel.visited.is_none());
}

#[test]
fn masks_on_indices_visit_only_the_tiles_they_may_keep() {
    // Pass mask_list (docs/attention.md section 7): a mask on iotas that is no band is bounded
    // per pair of tiles; the kernel lists, before the body, the key tiles the query tile may
    // keep a pair of, and its loops run over the list as under a document mask.
    for (path, may, must) in [
        (
            "auto/attention_prefix_lm.hf",
            "0 < (hf_k0 < hf_q1 + 1) + (hf_k0 < 512)",
            "0 < (hf_k1 < hf_q0 + 1) + (hf_k1 < 512)",
        ),
        (
            "auto/attention_chunked_causal.hf",
            "hf_k0 < hf_q1 + 1 && (hf_q0 / 1024 < hf_k1 / 1024 + 1 && hf_k0 / 1024 < hf_q1 / 1024 + 1)",
            "hf_k1 < hf_q0 + 1 && (hf_q0 / 1024 == hf_q1 / 1024 && hf_k0 / 1024 == hf_k1 / 1024 && hf_q0 / 1024 == hf_k0 / 1024)",
        ),
    ] {
        let c = compile(&example(path));
        let v = c.kernel.visited.as_ref().expect("a list of key tiles");
        assert_eq!((v.query_tile, v.key_tile), (128, 128), "{path}");
        assert!(matches!(v.test, hopfuse::kir::TileTest::Bounds { .. }), "{path}");
        let ir = &c.passes.last().unwrap().ir;
        let header = ir.lines().find(|l| l.contains("visited(")).unwrap();
        assert!(
            header.starts_with(&format!(
                "  visited(t_o, 128, 128): queries from s2_o * 128 of S, keys of T, where {may}, kept where {must} at smem "
            )),
            "{path}: {header}"
        );
        let cuda = &c.cuda;
        assert!(
            cuda.contains("hf_visit_mask_tiles<128, 128, 1024>(s2_o * 128, S, T, [&](long long hf_q0, long long hf_q1, long long hf_k0, long long hf_k1) -> int { return "),
            "{path}"
        );
        // The overlapped loop in two (FlashAttention-3's form, as for causal tiles): the
        // wholly kept tiles first, without the mask's code, then the others with it.
        assert!(cuda.contains("hf_visited_kept"), "{path}");
        // No ids to read: the helper by ids is not in the kernel.
        assert!(!cuda.contains("hf_visit_document_tiles"), "{path}");
        assert_eq!(cuda.matches("t_o < hf_visited_n;").count(), 2, "{path}");
        let tile = "hf_index_in<index_t>(hf_visited[t_o], hf_ceil_div<index_t>(T, 128)) * 128";
        assert!(!cuda.contains("(t_o * 128"), "{path}");
        assert!(cuda.contains(&format!("(int)({tile})")), "{path}");
        assert!(c.plan.constraints.iter().any(|k| matches!(
            k,
            hopfuse::plan::Constraint::AtMost { max: 1024, reason, .. } if reason.starts_with("the mask's list")
        )));
    }
}
