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
