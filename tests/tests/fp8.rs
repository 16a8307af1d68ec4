//! FP8 products: `wgmma.m64nNk32` on e4m3 / e5m2 shared caches (either type for each operand),
//! their descriptors, the instruction-K and K-major rules with their errors, the FP8 example
//! `examples/matmul/step16_fp8.hf` (per-tensor scales in the epilogue) and its row-wise variant
//! `step17_fp8_rowwise.hf`, and the float64 reference of an FP8 product (exact on FP8 inputs).

use hopfuse::DType;
use hopfuse_tests::{compile, error, example, fp8_values};
use std::collections::BTreeMap;

const STEP1: &str = include_str!("../../examples/matmul/step1_one_warp_group.hf");

/// Step 1 with FP8 operands of types `a` and `b`: the K tile of 64 bf16 (one 128-byte row)
/// becomes 128 FP8 elements, the instruction's K 32.
fn step1_fp8(a: &str, b: &str) -> String {
    edit(
        &edit(
            &edit(
                &edit(STEP1, "input a: bf16[M, K]", &format!("input a: {a}[M, K]")),
                "input b: bf16[N, K]",
                &format!("input b: {b}[N, K]"),
            ),
            "s.split(4, 64)",
            "s.split(4, 128)",
        ),
        "s.split(5, 16)",
        "s.split(5, 32)",
    )
}

fn edit(src: &str, from: &str, to: &str) -> String {
    assert!(src.contains(from), "`{from}` is not in the program");
    src.replacen(from, to, 1)
}

#[test]
fn an_e4m3_product_is_m64n_k32_on_k_major_descriptors_without_transpose_immediates() {
    let c = compile(&step1_fp8("f8e4m3", "f8e4m3"));
    // The PTX form of 8-bit operands: both types named, no imm-trans operands.
    assert!(
        c.cuda.contains(
            "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;"
        ),
        "{}",
        c.cuda
    );
    // A 128-byte row holds 128 FP8 elements: K-major, SBO = 8 rows = 1024 bytes, as for
    // bf16; a K step of 32 elements is 32 bytes (2 in the descriptor's 16-byte units).
    let bits = hopfuse::target::descriptor_bits(16, 1024, 128).unwrap();
    assert!(
        c.cuda.contains(&format!(
            "hf_wgmma_m64n128k32_e4m3_e4m3(&s_acc[0], (hf_wgmma_desc(&a_s[0], {bits:#x}ull) + 2 * k_io), (hf_wgmma_desc(&b_s[0], {bits:#x}ull) + 2 * k_io), s_acc_started[0]);"
        )),
        "{}",
        c.cuda
    );
    // Four k32 wgmmas per 128-wide K tile.
    assert!(c.cuda.contains("k_io < 4"), "{}", c.cuda);
    let ir = &c.passes.last().unwrap().ir;
    assert!(
        ir.contains("wgmma.m64n128k32.f32.f8e4m3 s_acc"),
        "the kernel IR names the FP8 shape: {ir}"
    );
    assert_eq!(c.pipeline.mmas[0].shape, "m64n128k32");
    assert_eq!(c.pipeline.mmas[0].k, 32);
    assert_eq!(c.pipeline.mmas[0].input, "f8e4m3");
}

#[test]
fn e4m3_and_e5m2_operands_mix() {
    for (a, b, ptx) in [
        ("f8e4m3", "f8e5m2", "e4m3.e5m2"),
        ("f8e5m2", "f8e4m3", "e5m2.e4m3"),
        ("f8e5m2", "f8e5m2", "e5m2.e5m2"),
    ] {
        let c = compile(&step1_fp8(a, b));
        assert!(
            c.cuda.contains(&format!(
                "wgmma.mma_async.sync.aligned.m64n128k32.f32.{ptx} {{"
            )),
            "{a} x {b}: {}",
            c.cuda
        );
        let ir = &c.passes.last().unwrap().ir;
        let shown = if a == b {
            a.to_string()
        } else {
            format!("{a}.{b}")
        };
        assert!(ir.contains(&format!("k32.f32.{shown} s_acc")), "{ir}");
    }
}

#[test]
fn an_fp8_product_with_a_16_bit_operand_is_an_error() {
    // An e4m3 A in K tiles of 64 (64-byte rows, swizzle 64) against a bf16 B in 128-byte rows:
    // both boxes are valid, the instruction is not.
    let src = edit(
        &edit(
            &edit(STEP1, "input a: bf16[M, K]", "input a: f8e4m3[M, K]"),
            "a_s = cache_after(a, memory=shared, load=tma, swizzle=128)",
            "a_s = cache_after(a, memory=shared, load=tma, swizzle=64)",
        ),
        "s.split(5, 16)",
        "s.split(5, 32)",
    );
    let e = error(&src);
    assert!(
        e.contains("`s`: the operands are f8e4m3 and bf16; a wgmma multiplies two operands of the same 16-bit type, or two 8-bit floats (f8e4m3, f8e5m2, either mix)"),
        "{e}"
    );
}

#[test]
fn an_fp8_instruction_k_other_than_32_is_an_error() {
    for split in [16, 64] {
        let e = error(&edit(
            &step1_fp8("f8e4m3", "f8e4m3"),
            "s.split(5, 32)",
            &format!("s.split(5, {split})"),
        ));
        assert!(
            e.contains(&format!("`s`: its Mma K axis `k_ii` has {split} elements; a wgmma on 8-bit inputs has K = 32 (f8e4m3: 32 bytes of each operand row): split K by 32 and make the inner part Mma")),
            "{e}"
        );
    }
    // A bf16 product keeps K = 16.
    let e = error(&edit(STEP1, "s.split(5, 16)", "s.split(5, 32)"));
    assert!(
        e.contains("a wgmma on 16-bit inputs has K = 16 (bf16: 32 bytes of each operand row)"),
        "{e}"
    );
}

/// A product of a[M, K] by b[K, N]: B's tile has N contiguous (MN-major), of type `t`, in
/// K tiles of `k_tile`, instructions of `k_step` and N tiles of `n_tile`.
fn mn_major_b(t: &str, k_tile: i64, k_step: i64, n_tile: i64) -> String {
    format!(
        "fusion mixed {{\n  input a: {t}[M, K]\n  input b: {t}[K, N]\n  ab = cast(broadcast(a, axis=2), f32)\n  bb = cast(broadcast(b, axis=0), f32)\n  p = ab * bb\n  s = sum(p, axis=1)\n  c = cast(s, bf16)\n  output c\n}}\nschedule {{\n  a_s = cache_after(a, memory=shared, load=tma, swizzle=128)\n  b_s = cache_after(b, memory=shared, load=tma, swizzle=128)\n  s.split(0, 64)\n  s.split(2, {k_tile})\n  s.split(3, {k_step})\n  s.split(5, {n_tile})\n  s.reorder(0, 5, 2, 3, 1, 6, 4)\n  s.parallelize(0, BIDy)\n  s.parallelize(1, BIDx)\n  s.parallelize(3, Unroll)\n  s.parallelize(4, Mma)\n  s.parallelize(5, Mma)\n  s.parallelize(6, Mma)\n  propagate(s)\n  a_s.reorder(0, 1, 3, 2, 4)\n  a_s.parallelize(2, Bulk)\n  a_s.parallelize(3, Bulk)\n  a_s.parallelize(4, Bulk)\n  b_s.reorder(0, 1, 2, 4, 3)\n  b_s.parallelize(2, Bulk)\n  b_s.parallelize(3, Bulk)\n  b_s.parallelize(4, Bulk)\n  inline_most()\n}}\n"
    )
}

#[test]
fn an_mn_major_fp8_operand_is_rejected_with_how_to_make_it_k_major() {
    // The same layout in bf16 is a transposed B (the `imm-trans-b` wgmma).
    let c = compile(&mn_major_b("bf16", 64, 16, 64));
    assert!(c.cuda.contains("p, 1, 1, 0, 1;"), "{}", c.cuda);
    // An FP8 B of 128-wide N tiles: rows of 128 bytes, a valid box, an invalid operand.
    let src = mn_major_b("f8e4m3", 128, 32, 128);
    let e = error(&src);
    assert!(
        e.contains("`s`: operand `b_s` is f8e4m3 and MN-major (its N axis is contiguous in shared memory); wgmma transposes only f16 and bf16 operands, so an 8-bit operand must be K-major: give the input with K as its last (contiguous) axis"),
        "{e}"
    );
    // Located at the sum, the tensor the tile computes.
    let line = src
        .lines()
        .position(|l| l.starts_with("  s = sum("))
        .unwrap()
        + 1;
    assert!(e.contains(&format!("t.hf:{line}:3")), "{e}");
}

/// The compilation of an FP8 example: e4m3 operands, one m64n256k32 wgmma shape.
fn fp8_example(path: &str) -> hopfuse::Compilation {
    let c = compile(&example(path));
    assert!(
        c.cuda
            .contains("wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3"),
        "{path}: {}",
        c.cuda
    );
    c
}

#[test]
fn step16_scales_the_fp8_product_per_tensor_in_the_epilogue() {
    let c = fp8_example("matmul/step16_fp8.hf");
    // The scales are kernel arguments, read in the epilogue only (never in the k loop).
    assert!(
        c.cuda.contains("    float sa,\n    float sb,"),
        "{}",
        c.cuda
    );
    let scale = c.cuda.find("* sa").expect("sa is applied");
    let last_wgmma = c.cuda.rfind("hf_wgmma_m64n256k32_e4m3_e4m3(").unwrap();
    let staged = c
        .cuda
        .find("hf_stmatrix_x4(&c_s")
        .expect("a stmatrix epilogue");
    assert!(last_wgmma < scale && scale < staged, "{}", c.cuda);
    assert!(c.cuda.contains("s_acc[r] = c_mul[0] * sb;"), "{}", c.cuda);
    let fp8: Vec<&str> = c
        .plan
        .tensors()
        .filter(|t| t.1 == DType::F8E4M3)
        .map(|t| t.0)
        .collect();
    assert_eq!(fp8, ["a", "b"]);
}

#[test]
fn step17_caches_its_scale_vectors_in_either_order() {
    // The row scales cached first used to be refused by loop_nest (their copy, in the M tile's
    // loop only, opened a loop the column scales' copy could not share); the pass now places the
    // copies of inputs that share more loops first, whatever the schedule's order. The kernel
    // differs only in lines of what is declared in that order: the tensor maps (parameters,
    // prefetches) and the two buffers' offsets.
    let src = example("matmul/step17_fp8_rowwise.hf");
    let swapped = edit(
        &src,
        "  sb_s = cache_after(sb, memory=shared, load=tma)\n  sa_s = cache_after(sa, memory=shared, load=tma)\n",
        "  sa_s = cache_after(sa, memory=shared, load=tma)\n  sb_s = cache_after(sb, memory=shared, load=tma)\n",
    );
    let (a, b) = (compile(&src).cuda, compile(&swapped).cuda);
    assert_eq!(a.lines().count(), b.lines().count());
    let differ: Vec<(&str, &str)> = a.lines().zip(b.lines()).filter(|(x, y)| x != y).collect();
    assert!(!differ.is_empty());
    assert!(
        differ.iter().all(|(x, y)| [x, y]
            .iter()
            .all(|l| l.contains("sa_s") || l.contains("sb_s"))),
        "{differ:#?}"
    );
}

#[test]
fn step17_scales_rows_and_columns_in_the_epilogue() {
    let c = fp8_example("matmul/step17_fp8_rowwise.hf");
    assert!(
        c.cuda.contains("const float* __restrict__ sa"),
        "{}",
        c.cuda
    );
    assert!(
        c.cuda.contains("const float* __restrict__ sb"),
        "{}",
        c.cuda
    );
    // Each tile's scales are staged in shared memory by one 1-D TMA copy each, issued by a
    // consumer before the tile's k loop and waited for (one mbarrier phase per tile) after it,
    // just before the epilogue reads them from shared memory, so the copies overlap the k loop.
    let consumer = hopfuse_tests::consumer_code(&c.cuda);
    let at = |s: &str| hopfuse_tests::position(consumer, s);
    let copy_a = at("hf_tma_load_1d(&sa_s[0], &sa_s_map, (int)(tile_v0), &tile2_full[0]);");
    let copy_b = at("hf_tma_load_1d(&sb_s[0], &sb_s_map, (int)(tile_v1), &tile2_full[0]);");
    let k_loop = at("for (index_t k_o = 0;");
    let last_wgmma = at("hf_wgmma_wait<0>();");
    let wait = at("hf_mbarrier_wait(&tile2_full[0], (unsigned)(tile % 2));");
    let read_a = at("c_broadcast[0] = sa_s[");
    let read_b = at("c_broadcast2[0] = sb_s[");
    assert!(
        copy_a.max(copy_b) < k_loop && k_loop < last_wgmma,
        "{consumer}"
    );
    assert!(last_wgmma < wait && wait < read_a.min(read_b), "{consumer}");
    assert!(c
        .cuda
        .contains("hf_mbarrier_arrive_expect_tx(&tile2_full[0], 1536u);"));
    assert!(
        !consumer.contains("= sa[") && !consumer.contains("= sb["),
        "{consumer}"
    );
}

#[test]
fn the_reference_of_an_fp8_product_is_the_exact_product_of_its_values() {
    for (file, row_wise) in [
        ("matmul/step16_fp8.hf", false),
        ("matmul/step17_fp8_rowwise.hf", true),
    ] {
        let src = example(file);
        let f =
            hopfuse::reference_fusion(&src).unwrap_or_else(|e| panic!("{}", e.render(&src, file)));
        // Ragged sizes: nothing about the tiles matters to the reference.
        let (m, n, k) = (3usize, 5usize, 70usize);
        let a = fp8_values(m * k, 1);
        let b = fp8_values(n * k, 2);
        for v in a.iter().chain(&b) {
            assert_eq!(DType::F8E4M3.round(*v), *v, "{v} is an e4m3 value");
        }
        let (sa, sb): (Vec<f64>, Vec<f64>) = if row_wise {
            (
                (0..m).map(|i| 0.5 + i as f64).collect(),
                (0..n).map(|j| 0.25 * (j + 1) as f64).collect(),
            )
        } else {
            (vec![0.5], vec![3.0])
        };
        let sizes = BTreeMap::from([
            ("M".to_string(), m as i64),
            ("N".to_string(), n as i64),
            ("K".to_string(), k as i64),
        ]);
        let inputs = BTreeMap::from([
            ("a".to_string(), a.clone()),
            ("b".to_string(), b.clone()),
            ("sa".to_string(), sa.clone()),
            ("sb".to_string(), sb.clone()),
        ]);
        let got = hopfuse::backend::reference::evaluate(&f, &sizes, &inputs).unwrap()["c"].clone();
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k).map(|kk| a[i * k + kk] * b[j * k + kk]).sum();
                let scale = if row_wise {
                    sa[i] * sb[j]
                } else {
                    sa[0] * sb[0]
                };
                let want = DType::BF16.round(dot * scale);
                assert_eq!(got[i * n + j], want, "{file}: c[{i}, {j}]");
            }
        }
    }
}

/// Step 16's fusion written as a user dequantizes: each operand widened and multiplied by its
/// scale (`scale_a`, `scale_b`: how the scales reach the summed axis) before the product.
fn dequantized(inputs: &str, scale_a: &str, scale_b: &str) -> String {
    dequantized_with("matmul/step16_fp8.hf", inputs, scale_a, scale_b)
}

/// [`dequantized`] with the schedule of `example`.
fn dequantized_with(example_file: &str, inputs: &str, scale_a: &str, scale_b: &str) -> String {
    let source = example(example_file);
    let schedule = &source[source.find("schedule {").unwrap()..];
    format!(
        "fusion dequantized {{\n  input a: f8e4m3[M, K]\n  input b: f8e4m3[N, K]\n{inputs}  ab = cast(broadcast(a, axis=1), f32)\n  bb = cast(broadcast(b, axis=0), f32)\n  ad = ab * {scale_a}\n  bd = bb * {scale_b}\n  p = ad * bd\n  s = sum(p, axis=2)\n  c = cast(s, bf16)\n  output c\n}}\n{schedule}"
    )
}

/// The CUDA of a `dequantized` program as the example with its scales written after the sum
/// would name things (the kernel, and the epilogue's temporaries after the tensor they are of).
fn as_example(c: &hopfuse::Compilation, example_fusion: &str) -> String {
    c.cuda
        .replace("dequantized", example_fusion)
        .replace("s_scaled_", "c_")
}

#[test]
fn dequantized_per_tensor_scales_leave_the_sum_for_the_epilogue() {
    let src = dequantized("  input sa: f32\n  input sb: f32\n", "sa", "sb");
    let c = compile(&src);
    // The rewrite: the sum multiplies the two widened operands, `s_scaled` scales it, and the
    // product's scaled factors are gone.
    let fusion = hopfuse::fusion::print(&c.fusion);
    assert!(fusion.contains("s_scaled"), "{fusion}");
    assert!(!fusion.contains("ad ="), "{fusion}");
    // The same kernel as step 16, which applies the scales in its epilogue as written.
    assert_eq!(
        as_example(&c, "matmul_fp8"),
        compile(&example("matmul/step16_fp8.hf")).cuda
    );
}

#[test]
fn dequantized_row_and_column_scales_leave_the_sum_for_the_epilogue() {
    // With step 17's schedule, which stages the scales (`sa_s`, `sb_s` cache the inputs).
    let src = dequantized_with(
        "matmul/step17_fp8_rowwise.hf",
        "  input sa: f32[M]\n  input sb: f32[N]\n",
        "broadcast(broadcast(sa, axis=1), axis=2)",
        "broadcast(broadcast(sb, axis=0), axis=2)",
    );
    let c = compile(&src);
    assert_eq!(
        as_example(&c, "matmul_fp8_rowwise"),
        compile(&example("matmul/step17_fp8_rowwise.hf")).cuda
    );
}

#[test]
fn a_scale_that_varies_along_k_stays_in_the_product_and_the_tile_says_why() {
    // One scale per K column (a scale with the summed axis): not constant along K.
    let src = dequantized(
        "  input sa: f32\n  input sk: f32[K]\n",
        "sa",
        "broadcast(broadcast(sk, axis=0), axis=0)",
    );
    let f = hopfuse::frontend::dequantize::hoist_scales(&hopfuse::frontend::parse(&src).unwrap());
    assert_eq!(
        hopfuse::frontend::print(&f),
        hopfuse::frontend::print(&hopfuse::frontend::parse(&src).unwrap()),
        "left as written"
    );
    let e = error(&src);
    assert!(
        e.contains("`s`: the scale `sk` varies along K inside one wgmma (K = 32); a scale inside a tensor-core product must be constant along blocks of K at least as wide as the schedule's K tile (a block scale: `expand_blocks(s, block=[..., 128], shape=[..., K])` with K split by 128), and is then applied to each block's sum"),
        "{e}"
    );
}

#[test]
fn hoisting_scales_keeps_the_value_of_the_dequantized_product() {
    let src = dequantized(
        "  input sa: f32[M]\n  input sb: f32\n",
        "broadcast(broadcast(sa, axis=1), axis=2)",
        "sb",
    );
    let written = hopfuse::reference_fusion(&src).unwrap();
    let compiled = compile(&src).fusion;
    let (m, n, k) = (4usize, 3usize, 33usize);
    let sizes = BTreeMap::from([
        ("M".to_string(), m as i64),
        ("N".to_string(), n as i64),
        ("K".to_string(), k as i64),
    ]);
    let inputs = BTreeMap::from([
        ("a".to_string(), fp8_values(m * k, 3)),
        ("b".to_string(), fp8_values(n * k, 4)),
        ("sa".to_string(), vec![0.5, 0.25, 2.0, 1.5]),
        ("sb".to_string(), vec![0.125]),
    ]);
    let want =
        hopfuse::backend::reference::evaluate(&written, &sizes, &inputs).unwrap()["c"].clone();
    let got =
        hopfuse::backend::reference::evaluate(&compiled, &sizes, &inputs).unwrap()["c"].clone();
    assert_eq!(got, want);
    assert!(want.iter().any(|&v| v != 0.0));
}

#[test]
fn scales_stay_where_moving_them_would_change_what_the_program_names() {
    let unchanged = |src: &str| {
        let p = hopfuse::frontend::parse(src).unwrap();
        hopfuse::frontend::print(&hopfuse::frontend::dequantize::hoist_scales(&p))
            == hopfuse::frontend::print(&p)
    };
    let body = "fusion g {\n  input a: f8e4m3[M, K]\n  input b: f8e4m3[N, K]\n  input sa: f32\n  ab = cast(broadcast(a, axis=1), f32)\n  bb = cast(broadcast(b, axis=0), f32)\n  p = ab * sa * bb\n  s = sum(p, axis=2)\n";
    // The sum is an output: its name must stay the scaled value.
    assert!(unchanged(&format!("{body}  output s\n}}\n")));
    // The schedule names the product: it must keep its value.
    assert!(unchanged(&format!(
        "{body}  c = cast(s, bf16)\n  output c\n}}\nschedule {{\n  p.split(0, 64)\n}}\n"
    )));
    // Neither: the scale leaves the sum.
    assert!(!unchanged(&format!(
        "{body}  c = cast(s, bf16)\n  output c\n}}\n"
    )));
}

#[test]
fn the_fp8_examples_have_torch_scaled_mm_as_their_peer() {
    let peer = |path: &str| {
        let src = example(path);
        let f = hopfuse::reference_fusion(&src).unwrap();
        hopfuse::backend::torch::emit_scaled_mm(&f)
            .unwrap_or_else(|| panic!("{path}: no _scaled_mm peer"))
            .source
    };
    assert!(peer("matmul/step16_fp8.hf").contains(
        "return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)"
    ));
    assert!(peer("matmul/step17_fp8_rowwise.hf").contains(
        "return torch._scaled_mm(a, b.t(), scale_a=sa.unsqueeze(1), scale_b=sb.unsqueeze(0), out_dtype=torch.bfloat16)"
    ));
    // Block scales: cuBLAS's block-scaled path, the activation scales column-major.
    for path in [
        "matmul/step18_fp8_block.hf",
        "matmul/step18_fp8_block_overlap.hf",
        "matmul/step21_fp8_block_split_k.hf",
    ] {
        assert!(peer(path).contains(
            "return torch._scaled_mm(a, b.t(), scale_a=sa.t().contiguous().t(), scale_b=sb.t(), out_dtype=torch.bfloat16)"
        ));
    }
}
