//! The classifier and the decisions of the schedulers on small fusions (the texts themselves
//! are golden-tested in `tests/tests/auto.rs`).

use super::*;
use std::collections::BTreeMap;

fn fusion(body: &str) -> Fusion {
    let program = crate::frontend::parse(&format!("fusion f {{\n{body}\n}}\n")).unwrap();
    crate::fusion::build(&program.fusion).unwrap()
}

fn class_name(body: &str) -> Result<&'static str, String> {
    classify(&fusion(body)).map(|c| c.name())
}

fn sized(pairs: &[(&str, i64)]) -> Sizes {
    let values: BTreeMap<String, i64> = pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    Sizes::resolve(Some(&values), "")
}

#[test]
fn fusions_are_classified() {
    let x = "input x: f32[M, N]\n";
    assert_eq!(
        class_name(&format!("{x}y = exp(x)\noutput y")),
        Ok("pointwise")
    );
    assert_eq!(
        class_name(&format!("{x}s = sum(x, axis=1)\noutput s")),
        Ok("inner reduction")
    );
    assert_eq!(
        class_name(&format!("{x}s = sum(x, axis=0)\noutput s")),
        Ok("outer reduction")
    );
    assert_eq!(
        class_name(&format!(
            "{x}s = sum(x, axis=1)\ny = x / broadcast(s, axis=1)\noutput y"
        )),
        Ok("normalization")
    );
    // A row's statistic that is not read back over the row is a reduction, however derived.
    assert_eq!(
        class_name(&format!(
            "{x}s = sum(x * x, axis=1) / 4.0\nr = rsqrt(s)\noutput r"
        )),
        Ok("inner reduction")
    );
    assert_eq!(
        class_name(
            "input a: bf16[M, K]\ninput b: bf16[N, K]\n\
             s = sum(cast(broadcast(a, axis=1), f32) * cast(broadcast(b, axis=0), f32), axis=2)\n\
             c = cast(s, bf16)\noutput c"
        ),
        Ok("matrix product")
    );
}

#[test]
fn swapped_inner_axes_of_inputs_are_transposes_other_permutations_pointwise() {
    let x = "input x: f32[M, N]\n";
    assert_eq!(
        class_name(&format!("{x}y = transpose(x, 0, 1) * 2.0\noutput y")),
        Ok("transpose")
    );
    assert_eq!(
        class_name("input x: f32[B, M, N]\ny = permute(x, dims=[0, 2, 1])\noutput y"),
        Ok("transpose")
    );
    // The contiguous axis stays innermost: rows are still read along.
    assert_eq!(
        class_name("input x: f32[B, M, N]\ny = permute(x, dims=[1, 0, 2])\noutput y"),
        Ok("pointwise")
    );
    // A permuted computed tensor, or an input also read unpermuted: one layout per cache.
    assert_eq!(
        class_name(&format!("{x}y = transpose(exp(x), 0, 1)\noutput y")),
        Ok("pointwise")
    );
    assert_eq!(
        class_name(&format!(
            "{x}y = transpose(x, 0, 1)\nz = x * 2.0\noutput y\noutput z"
        )),
        Ok("pointwise")
    );
}

#[test]
fn a_transpose_with_too_many_row_tiles_for_the_grid_is_declined() {
    let f = fusion("input x: f32[M, N]\ny = transpose(x, 0, 1)\noutput y");
    let d = choose(&f, &sized(&[("M", 8), ("N", 4_000_000)])).unwrap_err();
    assert_eq!(d.class, Some("transpose"));
    assert!(
        d.reason.contains("more than blockIdx.y counts"),
        "{}",
        d.reason
    );
    assert!(choose(&f, &sized(&[("M", 4_000_000), ("N", 8)])).is_ok());
}

#[test]
fn fusions_no_scheduler_takes_say_why() {
    let x = "input x: f32[M, N]\n";
    let both = class_name(&format!(
        "{x}a = sum(x, axis=1)\nb = sum(x, axis=0)\noutput a\noutput b"
    ))
    .unwrap_err();
    assert!(both.contains("reduce different axes"), "{both}");
    let full = class_name("input x: f32[B, M, N]\ns = sum(x, axis=[1, 2])\noutput s").unwrap_err();
    assert!(full.contains("several axes"), "{full}");
    let cube = class_name("input x: f32[B, M, N]\ns = sum(x, axis=2)\noutput s").unwrap_err();
    assert!(cube.contains("rank-3 tensor"), "{cube}");
    let epilogue = class_name(
        "input a: bf16[M, K]\ninput b: bf16[N, K]\ninput bias: bf16[N]\n\
         s = sum(cast(broadcast(a, axis=1), f32) * cast(broadcast(b, axis=0), f32), axis=2)\n\
         c = cast(s + cast(broadcast(bias, axis=0), f32), bf16)\noutput c",
    )
    .unwrap_err();
    assert!(epilogue.contains("sums a rank-3 product"), "{epilogue}");
    let column_norm = class_name(&format!(
        "{x}s = sum(x, axis=0)\ny = x / broadcast(s, axis=0)\noutput y"
    ))
    .unwrap_err();
    assert!(column_norm.contains("outer axis"), "{column_norm}");
}

#[test]
fn the_bench_line_gives_the_sizes_unless_sizes_are_given() {
    let source = "// bench: M=oops\n// bench: M=16_384, N=1000\nfusion f {}\n";
    let from_bench = Sizes::resolve(None, source);
    assert_eq!(from_bench.source, SizeSource::Bench);
    assert_eq!(from_bench.values["M"], 16384);
    assert_eq!(from_bench.values["N"], 1000);
    let given: BTreeMap<String, i64> = [("M".to_string(), 8)].into();
    assert_eq!(
        Sizes::resolve(Some(&given), source).source,
        SizeSource::Given
    );
    assert_eq!(
        Sizes::resolve(None, "fusion f {}").source,
        SizeSource::Default
    );
}

#[test]
fn vectors_are_sixteen_bytes_of_the_widest_element_and_keep_rows_aligned() {
    let f = fusion("input x: bf16[M, N]\ninput y: f32[M, N]\nz = cast(x, f32) + y\noutput z");
    let sizes = sized(&[]);
    let class = classify(&f).unwrap();
    let facts = Facts {
        fusion: &f,
        sizes: &sizes,
        class: &class,
        knobs: &Knobs::default(),
    };
    let x = f.tensor_by_name("x").unwrap();
    let y = f.tensor_by_name("y").unwrap();
    assert_eq!(facts.vector_width(&[x], None), 8);
    assert_eq!(facts.vector_width(&[x, y], None), 4);
    assert_eq!(facts.vector_width(&[x], Some(1000)), 8);
    assert_eq!(facts.vector_width(&[x], Some(1004)), 4);
    assert_eq!(facts.vector_width(&[x], Some(1001)), 1);
}

#[test]
fn a_persistent_row_stays_within_the_register_file() {
    // Softmax over f32 rows of 16384 (8 bytes of buffer per element): 512 threads of 32.
    let f = fusion(
        "input x: f32[M, N]\nm = max(x, axis=1)\ne = exp(x - broadcast(m, axis=1))\n\
         s = sum(e, axis=1)\ny = e / broadcast(s, axis=1)\noutput y",
    );
    let chosen = choose(&f, &sized(&[("M", 4), ("N", 16384)])).unwrap();
    assert_eq!(chosen.scheduler, Scheduler::Normalization);
    assert!(
        chosen.reason.contains("512 threads per row"),
        "{}",
        chosen.reason
    );
    assert!(
        chosen.text.contains("y.split(1, 8, outer)"),
        "{}",
        chosen.text
    );
    // 32768 f32 elements would take 1024 threads of 32 in registers, and 256 KiB of shared
    // memory: the row is streamed, `x_c` (read by the max and by `e`) and `e` recomputed.
    let wide = choose(&f, &sized(&[("M", 4), ("N", 32768)])).unwrap();
    assert!(
        wide.reason.contains("16384 elements per block") && wide.reason.contains("streamed"),
        "{}",
        wide.reason
    );
    assert!(
        wide.text.contains("x_c.recompute()\ne.recompute()"),
        "{}",
        wide.text
    );
}

#[test]
fn short_rows_share_a_block() {
    let f = fusion("input x: f32[M, N]\ns = sum(x, axis=1)\noutput s");
    let chosen = choose(&f, &sized(&[("M", 65536), ("N", 64)])).unwrap();
    assert!(
        chosen.text.contains("s.parallelize(1, TIDy)"),
        "{}",
        chosen.text
    );
    assert!(
        chosen.reason.contains("4 rows per block"),
        "{}",
        chosen.reason
    );
}

#[test]
fn products_reuse_the_hand_schedules_with_the_fusions_names() {
    let f = fusion(
        "input a: bf16[M, K]\ninput a_s: bf16[N, K]\n\
         acc = sum(cast(broadcast(a, axis=1), f32) * cast(broadcast(a_s, axis=0), f32), axis=2)\n\
         c = cast(acc, bf16)\noutput c",
    );
    let big = choose(&f, &sized(&[("M", 4096), ("N", 4096), ("K", 4096)])).unwrap();
    // `a_s` is the right operand here, so the left one's cache is `a_s2`.
    assert!(
        big.text.contains("a_s2 = cache_after(a, memory=shared")
            && big.text.contains("a_s_s = cache_after(a_s, memory=shared")
            && big.text.contains("persistent(BIDy, 16)")
            && big.text.contains("acc.split(0, 128)"),
        "{}",
        big.text
    );
    let decode = choose(&f, &sized(&[("M", 64), ("N", 4096), ("K", 4096)])).unwrap();
    assert!(decode.text.contains("circular_buffer(8"), "{}", decode.text);
}

#[test]
fn reductions_of_every_element_are_full_reductions_sized_to_a_wave() {
    let x = "input x: bf16[M, N]\n";
    assert_eq!(
        class_name(&format!(
            "{x}t = sum(cast(x, f32), axis=[0, 1])\nm = max(abs(x), axis=[0, 1])\noutput t\noutput m"
        )),
        Ok("full reduction")
    );
    // Read again in the same fusion: a kernel of its own first (segmentation splits it).
    let read = class_name(&format!(
        "{x}t = sum(cast(x, f32), axis=[0, 1])\ny = cast(x, f32) / broadcast(t, axis=[0, 1])\noutput y"
    ))
    .unwrap_err();
    assert!(
        read.contains("`t`, a reduction of every element, is read again"),
        "{read}"
    );
    // Next to a row reduction: two kernels.
    let mixed = class_name(&format!(
        "{x}t = sum(cast(x, f32), axis=[0, 1])\nr = sum(cast(x, f32), axis=1)\noutput t\noutput r"
    ))
    .unwrap_err();
    assert!(mixed.contains("reduces rows or columns"), "{mixed}");

    let f = fusion("input x: f32[N]\nt = sum(x, axis=0)\noutput t");
    // 2^24 floats: 4-element vectors, 256 threads, 4 per step: 4096 steps over about one wave
    // (132 SMs x 8 blocks of 256 threads) of blocks.
    let big = choose(&f, &sized(&[("N", 1 << 24)])).unwrap();
    assert_eq!(big.scheduler, Scheduler::FullReduction);
    assert!(big.text.contains("t.parallelize(0, BIDx)"), "{}", big.text);
    assert!(
        big.reason.contains("over 1024 blocks") && big.reason.contains("4 steps per block"),
        "{}",
        big.reason
    );
    // A small vector: one step per block, as many blocks as steps.
    let small = choose(&f, &sized(&[("N", 100_000)])).unwrap();
    assert!(
        small.reason.contains("over 25 blocks") && small.reason.contains("1 step per block"),
        "{}",
        small.reason
    );
}

/// The `cache_after` lines of a schedule text.
fn cache_after_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.contains("cache_after("))
        .collect()
}

/// Whether `chosen` reads its cached inputs with `l2=evict_last`, and says so in its reason
/// (asserted to agree).
fn evicts_last(chosen: &AutoSchedule) -> bool {
    let caches = cache_after_lines(&chosen.text);
    let in_text = caches.iter().any(|l| l.contains("l2=evict_last"));
    assert!(!caches.is_empty(), "no cache_after\n{}", chosen.text);
    assert_eq!(
        in_text,
        caches.iter().all(|l| l.contains("l2=evict_last")),
        "every cached input or none\n{}",
        chosen.text
    );
    assert_eq!(
        in_text,
        chosen.reason.contains("inputs read with l2=evict_last"),
        "the reason says it\n{}\n{}",
        chosen.reason,
        chosen.text
    );
    in_text
}

const RMSNORM: &str = "input x: bf16[M, N]\ninput w: bf16[N]\nxf = cast(x, f32)\n\
     r = rsqrt(sum(xf * xf, axis=1) / 4096.0 + 0.000001)\n\
     y = cast(xf * broadcast(r, axis=1) * cast(broadcast(w, axis=0), f32), bf16)\noutput y";

const SOFTMAX_F32: &str =
    "input x: f32[M, N]\nm = max(x, axis=1)\ne = exp(x - broadcast(m, axis=1))\n\
     s = sum(e, axis=1)\ny = e / broadcast(s, axis=1)\noutput y";

#[test]
fn a_row_kept_in_registers_reads_its_inputs_with_evict_last() {
    let chosen = choose(&fusion(RMSNORM), &sized(&[("M", 32768), ("N", 4096)])).unwrap();
    assert!(chosen.reason.contains("persistent in registers"));
    assert!(evicts_last(&chosen));
    assert!(
        chosen
            .text
            .contains("x_c = cache_after(x, l2=evict_last)\ny_c = cache_before(y)\n"),
        "{}",
        chosen.text
    );
    assert!(
        chosen.reason.contains("3-4% faster on the H200"),
        "{}",
        chosen.reason
    );
    // Two full-rank outputs (add + RMSNorm's h and y): still rows.
    let add_norm = fusion(
        "input x: bf16[M, N]\ninput res: bf16[M, N]\nh = cast(cast(x, f32) + cast(res, f32), bf16)\n\
         hf = cast(h, f32)\nr = rsqrt(sum(hf * hf, axis=1) / 4096.0)\n\
         y = cast(hf * broadcast(r, axis=1), bf16)\noutput h\noutput y",
    );
    let chosen = choose(&add_norm, &sized(&[("M", 32768), ("N", 4096)])).unwrap();
    assert!(evicts_last(&chosen), "{}", chosen.text);
    assert!(chosen
        .text
        .contains("res_c = cache_after(res, l2=evict_last)"));
}

#[test]
fn rows_in_shared_memory_or_streamed_and_rows_with_a_row_value_output_keep_plain_loads() {
    let f = fusion(SOFTMAX_F32);
    // 28000 f32 elements with two persistent buffers: past the register file (16 vectors a
    // thread would take 438 threads of 160 registers), within shared memory (224000 bytes).
    let shared = choose(&f, &sized(&[("M", 64), ("N", 28000)])).unwrap();
    assert!(
        shared.reason.contains("persistent in shared memory"),
        "{}",
        shared.reason
    );
    assert!(!evicts_last(&shared));
    assert!(shared
        .text
        .contains("x_c = cache_after(x, memory=shared)\n"));
    let streamed = choose(&f, &sized(&[("M", 4), ("N", 65536)])).unwrap();
    assert!(streamed.reason.contains("streamed"), "{}", streamed.reason);
    assert!(!evicts_last(&streamed));
    // A per-row value among the outputs (FP8 quantization's scale): measured slower.
    let quantize = fusion(
        "input x: bf16[M, N]\nxf = cast(x, f32)\nscale = max(abs(xf), axis=1) / 448.0\n\
         q = cast(xf / broadcast(scale, axis=1), f8e4m3, saturate=true)\noutput q\noutput scale",
    );
    let chosen = choose(&quantize, &sized(&[("M", 32768), ("N", 4096)])).unwrap();
    assert!(chosen.reason.contains("persistent in registers"));
    assert!(!evicts_last(&chosen), "{}", chosen.text);
}

#[test]
fn streaming_maps_read_their_inputs_with_evict_last_views_and_broadcast_tables_do_not() {
    let size = sized(&[("M", 16384), ("N", 16384)]);
    // A bias of one axis broadcast over the rows (gelu_exact): the rows' input evicts last,
    // the bias is no cache of its own.
    let gelu = fusion(
        "input x: bf16[M, N]\ninput bias: bf16[N]\n\
         y = cast(gelu(cast(x, f32) + cast(broadcast(bias, axis=0), f32)), bf16)\noutput y",
    );
    let chosen = choose(&gelu, &size).unwrap();
    assert_eq!(chosen.scheduler, Scheduler::Pointwise);
    assert!(evicts_last(&chosen));
    assert_eq!(
        cache_after_lines(&chosen.text),
        ["x_c = cache_after(x, l2=evict_last)"]
    );
    let swiglu = fusion(
        "input gate: bf16[M, N]\ninput up: bf16[M, N]\n\
         y = cast(silu(cast(gate, f32)) * cast(up, f32), bf16)\noutput y",
    );
    assert!(evicts_last(&choose(&swiglu, &size).unwrap()));
    // Rotary's rotate_half reads its input again at moved columns (examples/fusions/rotary.hf).
    let rotary = fusion(
        "input q: bf16[S, 128]\ninput cos_t: bf16[S, 128]\ninput sin_t: bf16[S, 128]\n\
         x = q * 0.125\nrotated = cat(-slice(x, axis=1, start=64), slice(x, axis=1, stop=64), axis=1)\n\
         y = cast(x * cos_t + rotated * sin_t, bf16)\noutput y",
    );
    let chosen = choose(&rotary, &sized(&[("S", 262144)])).unwrap();
    assert_eq!(chosen.scheduler, Scheduler::Pointwise);
    assert!(!evicts_last(&chosen), "{}", chosen.text);
    // Cos and sin tables broadcast over the heads: every block re-reads them from L2.
    let tables = fusion(
        "input x: bf16[H, S, D]\ninput cos_t: bf16[S, D]\ninput sin_t: bf16[S, D]\n\
         y = cast(cast(x, f32) * cast(broadcast(cos_t, axis=0), f32) + cast(x, f32) * cast(broadcast(sin_t, axis=0), f32), bf16)\n\
         output y",
    );
    let chosen = choose(&tables, &sized(&[("H", 32), ("S", 4096), ("D", 128)])).unwrap();
    assert_eq!(chosen.scheduler, Scheduler::Pointwise);
    assert!(!evicts_last(&chosen), "{}", chosen.text);
    // A transpose (measured slower) keeps plain loads, in its tiles and in the other inputs.
    let transpose = fusion(
        "input x: bf16[M, N]\ninput b: bf16[N, M]\n\
         y = cast(cast(transpose(x, 0, 1), f32) + cast(b, f32), bf16)\noutput y",
    );
    let chosen = choose(&transpose, &size).unwrap();
    assert_eq!(chosen.scheduler, Scheduler::Transpose);
    assert!(!chosen.text.contains("l2="), "{}", chosen.text);
}

#[test]
fn the_tuner_tries_the_other_l2_policy() {
    let policies = |body: &str, size: &[(&str, i64)]| -> Vec<(String, bool)> {
        candidates(&fusion(body), &sized(size))
            .unwrap()
            .into_iter()
            .filter(|c| c.knobs.l2.is_some() || c.knobs == Knobs::default())
            .map(|c| {
                (
                    c.knobs.describe(),
                    c.schedule.text.contains("l2=evict_last"),
                )
            })
            .collect()
    };
    // The rule's choice first; the flipped policy next; the same policy as the rule's repeats
    // the default and is dropped.
    assert_eq!(
        policies(RMSNORM, &[("M", 32768), ("N", 4096)]),
        [
            ("default".to_string(), true),
            ("l2=normal".to_string(), false)
        ]
    );
    assert_eq!(
        policies(SOFTMAX_F32, &[("M", 64), ("N", 28000)]),
        [
            ("default".to_string(), false),
            ("l2=evict_last".to_string(), true)
        ]
    );
    let shared = candidates(&fusion(SOFTMAX_F32), &sized(&[("M", 64), ("N", 28000)])).unwrap();
    let flipped = &shared[1];
    assert_eq!(flipped.knobs.describe(), "l2=evict_last");
    assert!(
        flipped
            .schedule
            .text
            .contains("x_c = cache_after(x, memory=shared, l2=evict_last)")
            && flipped.schedule.reason.contains("(the tuner's choice)"),
        "{}\n{}",
        flipped.schedule.reason,
        flipped.schedule.text
    );
    // Not a knob of the transpose scheduler.
    let transpose = "input x: bf16[M, N]\ny = transpose(x, 0, 1)\noutput y";
    assert!(policies(transpose, &[("M", 4096), ("N", 4096)])
        .iter()
        .all(|(knobs, evict)| knobs == "default" && !evict));
}
