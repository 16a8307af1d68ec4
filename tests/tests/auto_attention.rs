//! The attention scheduler (`hopfuse::auto::attention`): the hand examples of
//! `examples/attention/` with their schedule deleted get the hand schedule back (the same CUDA
//! and launch plan), the `examples/auto/` attention programs compile with it, and attention it
//! does not take is declined with the reason.

use hopfuse::auto::Scheduler;
use hopfuse::examples::without_schedule;
use hopfuse_tests::{compile, example};

/// The hand examples whose schedule the attention scheduler writes.
const HAND: [&str; 6] = [
    "attention/online_wgmma.hf",
    "attention/online_wgmma_batched.hf",
    "attention/online_wgmma_causal.hf",
    "attention/online_wgmma_causal_bottom_right.hf",
    "attention/online_wgmma_sliding_window.hf",
    "attention/online_wgmma_d128.hf",
];

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
        let statements = |text: &str| -> Vec<String> {
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("//"))
                .map(String::from)
                .collect()
        };
        let hand_block = &hand[hand.find("\nschedule {\n").unwrap() + 12..];
        let hand_block = &hand_block[..hand_block.find("\n}").unwrap()];
        assert_eq!(statements(&chosen.text), statements(hand_block), "{path}");
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
fn the_log_sum_exp_output_is_the_hand_kernel_without_its_producer_warp_group() {
    // online_wgmma_lse.hf is online_wgmma_d128.hf's schedule plus K and V in a warp-specialized
    // circular buffer; the scheduler writes d128's (the faster one, docs/benchmarks.md), so its
    // CUDA is the hand example's with those two lines deleted.
    let hand = example("attention/online_wgmma_lse.hf");
    let buffers = [
        "  ks.circular_buffer(2, warp_specialized(TIDy))\n",
        "  vs.circular_buffer(2, warp_specialized(TIDy))\n",
    ];
    let mut one_group = hand.clone();
    for line in buffers {
        assert!(one_group.contains(line), "{line}");
        one_group = one_group.replace(line, "");
    }
    let auto = without_schedule(&hand);
    let chosen = attention_schedule(&auto);
    assert!(
        chosen.reason.contains("the log-sum-exp `lse`"),
        "{}",
        chosen.reason
    );
    assert!(compile(&auto).cuda == compile(&one_group).cuda);
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
        assert!(chosen.text.contains("o_broadcast2.parallelize(6, Mma)\n"));
        let c = compile(&source);
        let ran = |name: &str| c.passes.iter().any(|p| p.name == name);
        // The causal mask bounds the key loop at the diagonal; no mask, no bound.
        assert_eq!(ran("mask_bounds"), causal, "{path}");
        assert_eq!(
            c.cuda
                .contains("hf_min<index_t>(hf_ceil_div<index_t>(T, 64), s2_o + 1)"),
            causal,
            "{path}"
        );
        // The bench sizes include a ragged one (S and T not multiples of the tile).
        assert!(source.contains("// bench: B=3,S=1000,T=1037"), "{path}");
    }
}

#[test]
fn f16_and_unbatched_inputs_get_the_kernel_too() {
    let source =
        without_schedule(&example("attention/online_wgmma_causal.hf")).replace("bf16", "f16");
    let chosen = attention_schedule(&source);
    assert!(
        chosen.reason.contains("[S, D] f16 with D = 64"),
        "{}",
        chosen.reason
    );
    let c = compile(&source);
    assert!(c
        .cuda
        .contains("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"));
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
    // A head dimension of 256, and one given as a size symbol.
    let d256 = declined(&d128.replace("128]", "256]"));
    assert!(
        d256.contains(
            "`q` has head dimension 256; the attention kernel takes a constant 64 or 128"
        ),
        "{d256}"
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
