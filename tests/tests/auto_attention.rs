//! The attention scheduler (`hopfuse::auto::attention`): the hand examples of
//! `examples/attention/` with their schedule deleted get the hand schedule back (the same CUDA
//! and launch plan), the `examples/auto/` attention programs' schedules are the ping-pong hand
//! examples' with the programs' own names, every fusion shape at D = 128 (batched or not, f16,
//! the log-sum-exp) gets the ping-pong kernel and D = 64 the one-group kernel, and attention it
//! does not take is declined with the reason.

use hopfuse::auto::Scheduler;
use hopfuse::examples::without_schedule;
use hopfuse_tests::{compile, example};

/// The hand examples whose schedule the attention scheduler writes: FlashAttention-3's
/// kernel at D = 128, and the one-group kernel at D = 64 (the fastest measured there) and
/// under a sliding window (its loop starts at the window only without circular buffers).
const HAND: [&str; 7] = [
    "attention/online_wgmma_overlap_pingpong.hf",
    "attention/online_wgmma_overlap_pingpong_causal.hf",
    "attention/online_wgmma_sliding_window.hf",
    "attention/online_wgmma.hf",
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
