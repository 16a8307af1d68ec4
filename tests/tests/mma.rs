//! Tensor cores: what the `mma` pass makes of a schedule (one wgmma per k16 step on
//! descriptors, accumulator fragments read by the epilogue) and every rule it checks, each
//! error located at the tensor it is about. The examples in `examples/matmul/` are the golden
//! tests; these are small edits of step 1.

use hopfuse::Diagnostic;

const STEP1: &str = include_str!("../../examples/matmul/step1_one_warp_group.hf");
const STEP4: &str = include_str!("../../examples/matmul/step4_two_consumers.hf");

fn cuda(src: &str) -> String {
    match hopfuse::compile(src, &Default::default()) {
        Ok(c) => c.cuda,
        Err(e) => panic!("{}", e.render(src, "test.hf")),
    }
}

/// The first error, which must have a location.
fn error(src: &str) -> Diagnostic {
    match hopfuse::compile(src, &Default::default()) {
        Ok(_) => panic!("expected an error for:\n{src}"),
        Err(e) => {
            let d = e.0.into_iter().next().expect("an error");
            assert!(d.span.is_some(), "no location: {}", d.message);
            d
        }
    }
}

fn edit(src: &str, from: &str, to: &str) -> String {
    assert!(src.contains(from), "`{from}` is not in the program");
    src.replacen(from, to, 1)
}

#[test]
fn step1_is_four_wgmmas_per_k_step_on_128b_k_major_descriptors() {
    let c = cuda(STEP1);
    // K-major, 128-byte swizzle: LBO 16 (unused), SBO 1024, mode 1.
    let bits = hopfuse::target::descriptor_bits(16, 1024, 128).unwrap();
    assert_eq!(bits, 0x4000_0040_0001_0000);
    // Each descriptor is built once per k step, at k_io = 0; a k16 step adds 32 bytes (2 in the
    // descriptor's 16-byte units) to its start address.
    assert!(c.contains(&format!(
        "hf_wgmma_m64n128k16_bf16_nn(&s_acc[0], (hf_wgmma_desc(&a_s[0], {bits:#x}ull) + 2 * k_io), (hf_wgmma_desc(&b_s[0], {bits:#x}ull) + 2 * k_io), s_acc_started[0]);"
    )), "{c}");
    // One group per k step: fence, the unrolled k16 loop, commit, wait.
    let fence = c.find("hf_wgmma_fence();").unwrap();
    let group = c.find("for (index_t k_io = 0; k_io < 4; ++k_io)").unwrap();
    let commit = c.find("hf_wgmma_commit();").unwrap();
    assert!(fence < group && group < commit, "{c}");
    assert!(c.contains("hf_wgmma_wait<0>();"));
    // No zero fill: scale-d is off until the first wgmma has run.
    assert!(c.contains("s_acc_started[0] = 0;"));
    assert!(!c.contains("s_acc[r] = 0"), "{c}");
    // The epilogue reads the fragment by register, at the register's row and column, and
    // stores the two adjacent columns of registers 2j and 2j + 1 as one vector.
    assert!(
        c.contains("for (index_t r_pair = 0; r_pair < 32; ++r_pair)"),
        "{c}"
    );
    assert!(
        c.contains("c_pair[r_lane] = hf_float_to_bf16(s_acc[2 * r_pair + r_lane]);"),
        "{c}"
    );
    assert!(c.contains("16 * (((index_t)threadIdx.x) / 32) + ((index_t)threadIdx.x) % 32 / 4 + 8 * (2 * r_pair / 2 % 2)"), "{c}");
    assert!(
        c.contains("*reinterpret_cast<hf_vec<hf_bf16, 2>*>(&c["),
        "{c}"
    );
    // One warp group.
    assert!(c.contains("__launch_bounds__(128)"), "{c}");
}

#[test]
fn a_warp_specialized_consumer_keeps_one_group_in_flight() {
    let c = cuda(STEP4);
    assert!(c.contains("hf_wgmma_wait<1>();"), "{c}");
    // The stage the previous group read is released one iteration late, the last after the
    // loop once every group has finished.
    assert!(c.contains("if (0 < k_o) {"), "{c}");
    let after = c.find("hf_wgmma_wait<1>();").unwrap();
    assert!(c[after..].contains("hf_wgmma_wait<0>();"), "{c}");
    // Two consumer warp groups, each on its 64 rows of the A stage.
    assert!(
        c.contains("m_io * 64 * 4 * 16], 0x4000004000010000ull) + 2 * k_io)"),
        "{c}"
    );
    assert!(c.contains("setmaxnreg.inc.sync.aligned.u32 232"), "{c}");
}

#[test]
fn the_instruction_tile_has_m64_k16_and_n_a_multiple_of_8() {
    let e = error(&edit(STEP1, "s.split(0, 64)", "s.split(0, 32)"));
    assert!(
        e.message.contains("has 32 rows; a wgmma tile has M = 64"),
        "{}",
        e.message
    );
    let e = error(&edit(STEP1, "s.split(5, 16)", "s.split(5, 32)"));
    assert!(
        e.message
            .contains("has 32 elements; a wgmma on 16-bit inputs has K = 16"),
        "{}",
        e.message
    );
    let e = error(&edit(STEP1, "s.split(2, 128)", "s.split(2, 132)"));
    assert!(
        e.message
            .contains("has 132 columns; a wgmma tile has N a multiple of 8 from 8 to 256"),
        "{}",
        e.message
    );
    let sum_line = STEP1
        .lines()
        .position(|l| l.starts_with("  s = sum("))
        .unwrap()
        + 1;
    assert_eq!(
        (e.line, e.column),
        (sum_line, 3),
        "at the sum: {}",
        e.message
    );
}

#[test]
fn operands_are_swizzled_half_precision_caches_in_shared_memory() {
    let e = error(&edit(
        STEP1,
        "a_s = cache_after(a, memory=shared, load=tma, swizzle=128)",
        "a_s = cache_after(a, memory=shared, load=tma)",
    ));
    assert!(
        e.message.contains("operand `a_s` is not swizzled"),
        "{}",
        e.message
    );
    // f32 inputs in K slabs of 32 (rows of 128 bytes, as the swizzle needs).
    let f32_inputs = STEP1
        .replace("input a: bf16[M, K]", "input a: f32[M, K]")
        .replace("input b: bf16[N, K]", "input b: f32[N, K]")
        .replace("s.split(4, 64)", "s.split(4, 32)");
    let e = error(&f32_inputs);
    assert!(
        e.message.contains(
            "operand `a_s` is f32 in shared memory; a wgmma operand is an f16, bf16, f8e4m3 or f8e5m2 cache"
        ),
        "{}",
        e.message
    );
}

#[test]
fn an_mn_major_operand_wider_than_a_swizzle_span_is_atoms_side_by_side() {
    // b stored [K, N] with a 128-wide N tile as one box: 256 bytes along N, two 128-byte spans
    // in one row, which neither TMA's swizzle nor a wgmma atom allows.
    // The program of the `mma` pass's MN-major filetest (its `;; program` section).
    let case = include_str!("../filetests/mma/mn_major.kir");
    let program = case
        .split(";; program\n")
        .nth(1)
        .and_then(|rest| rest.split(";; before\n").next())
        .expect("a filetest's program section");
    let src = program.replace("s.split(5, 64)", "s.split(5, 128)");
    let e = error(&src);
    assert!(
        e.message.contains(
            "with 128-byte swizzle the inner box row must be exactly 128 bytes, it is 256"
        ),
        "{}",
        e.message
    );
    // The same tile with the cache's N split into atoms of 64, the atoms as boxes side by
    // side: LBO is the step from atom to atom (64 K rows x 128 bytes = 8 KiB, encoded 512).
    let src = src.replace(
        "  b_s.reorder(0, 1, 2, 4, 3)\n",
        "  b_s.parallelize(3, Serial)\n  b_s.split(3, 64)\n  b_s.reorder(0, 1, 3, 2, 5, 4)\n  b_s.parallelize(5, Bulk)\n",
    );
    let cuda = cuda(&src);
    assert!(
        cuda.contains("hf_wgmma_m64n128k16_bf16_tt(&s_acc[0], (hf_wgmma_desc(&a_s[0], 0x4000004000400000ull) + 128 * k_io), (hf_wgmma_desc(&b_s[0], 0x4000004002000000ull) + 128 * k_io), s_acc_started[0]);"),
        "{cuda}"
    );
    assert_eq!(cuda.matches("hf_tma_load_2d(&b_s[").count(), 2, "{cuda}");
}

#[test]
fn threadidx_x_belongs_to_the_warp_group() {
    let src = edit(STEP1, "s.parallelize(3, Unroll)", "s.parallelize(3, TIDx)");
    let e = error(&src);
    assert!(
        e.message
            .contains("threadIdx.x is the 128 threads of a warp group"),
        "{}",
        e.message
    );
}

#[test]
fn accumulators_must_leave_registers_for_the_rest() {
    // Two M blocks of 64 x 256 in one warp group: 256 accumulator registers per thread.
    let src = STEP4
        .replace("s.parallelize(4, TIDy)", "s.parallelize(4, Serial)")
        .replace(
            "a_s.circular_buffer(4, warp_specialized(TIDy, registers=[40, 232]))",
            "a_s.circular_buffer(4)",
        )
        .replace(
            "b_s.circular_buffer(4, warp_specialized(TIDy, registers=[40, 232]))",
            "b_s.circular_buffer(4)",
        );
    let e = error(&src);
    assert!(
        e.message
            .contains("the tensor-core accumulators take 256 f32 registers per thread"),
        "{}",
        e.message
    );
}

#[test]
fn an_accumulator_is_read_only_inside_its_tile() {
    // `c` keeps plain loops over M and N: it would read other threads' registers.
    let src = edit(
        STEP1,
        "  inline_most()",
        "  c.parallelize(2, Serial)\n  c.parallelize(3, Serial)\n  inline_most()",
    );
    let e = error(&src);
    assert!(
        e.message
            .contains("reads or writes a tensor-core accumulator outside its tile"),
        "{}",
        e.message
    );
}

const STEP3: &str = include_str!("../../examples/matmul/step3_warp_specialized.hf");

#[test]
fn f16_inputs_and_an_f32_result() {
    let f16 = STEP3
        .replace("bf16[", "f16[")
        .replace("cast(s, bf16)", "cast(s, f16)");
    let c = cuda(&f16);
    assert!(
        c.contains("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"),
        "{c}"
    );
    // An f32 result: the operands are still bf16 buffers, read only through descriptors, and
    // their storage type must still be declared.
    let c = cuda(&STEP3.replace("c = cast(s, bf16)", "c = s"));
    assert!(c.contains("struct __align__(2) hf_bf16"), "{c}");
    assert!(c.contains("float* __restrict__ c"), "{c}");
}

#[test]
fn narrower_k_tiles_use_the_64_and_32_byte_swizzles() {
    // K tiles of 32 and 16 bf16 are rows of 64 and 32 bytes: SBO = 8 rows, mode 2 and 3.
    for (k, sw, mode) in [(32, 64, 2u64), (16, 32, 3u64)] {
        let src = STEP3
            .replace("s.split(4, 64)", &format!("s.split(4, {k})"))
            .replace("swizzle=128", &format!("swizzle={sw}"));
        let c = cuda(&src);
        let bits = hopfuse::target::descriptor_bits(16, 8 * sw, sw as u32).unwrap();
        assert_eq!(bits >> 62, mode);
        assert!(c.contains(&format!("{bits:#x}ull")), "{c}");
    }
}

#[test]
fn a_k_major_a_with_an_mn_major_b() {
    // a[M, K] and b[K, N]: the product's axes are [M, K, N], B's tile has N contiguous.
    let src = "fusion mixed {\n  input a: bf16[M, K]\n  input b: bf16[K, N]\n  ab = cast(broadcast(a, axis=2), f32)\n  bb = cast(broadcast(b, axis=0), f32)\n  p = ab * bb\n  s = sum(p, axis=1)\n  c = cast(s, bf16)\n  output c\n}\nschedule {\n  a_s = cache_after(a, memory=shared, load=tma, swizzle=128)\n  b_s = cache_after(b, memory=shared, load=tma, swizzle=128)\n  s.split(0, 64)\n  s.split(2, 64)\n  s.split(3, 16)\n  s.split(5, 64)\n  s.reorder(0, 5, 2, 3, 1, 6, 4)\n  s.parallelize(0, BIDy)\n  s.parallelize(1, BIDx)\n  s.parallelize(3, Unroll)\n  s.parallelize(4, Mma)\n  s.parallelize(5, Mma)\n  s.parallelize(6, Mma)\n  propagate(s)\n  a_s.reorder(0, 1, 3, 2, 4)\n  a_s.parallelize(2, Bulk)\n  a_s.parallelize(3, Bulk)\n  a_s.parallelize(4, Bulk)\n  b_s.reorder(0, 1, 2, 4, 3)\n  b_s.parallelize(2, Bulk)\n  b_s.parallelize(3, Bulk)\n  b_s.parallelize(4, Bulk)\n  inline_most()\n}\n";
    let c = cuda(src);
    assert!(c.contains("hf_wgmma_m64n64k16_bf16_nt("), "{c}");
    assert!(
        c.contains("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0"),
        "{c}"
    );
    assert!(c.contains("p, 1, 1, 0, 1;"), "transposed B only: {c}");
}

#[test]
fn an_mn_major_a_with_a_k_major_b_is_the_transposed_product() {
    // a[K, M] with b[N, K]: the product's axes are [N, K, M] and the result is c[N, M]; the
    // tile's first Mma axis (64 rows of N) makes b the wgmma's A (K-major), a its B (MN-major).
    let src = "fusion tn {\n  input a: bf16[K, M]\n  input b: bf16[N, K]\n  ab = cast(broadcast(a, axis=0), f32)\n  bb = cast(broadcast(b, axis=2), f32)\n  p = ab * bb\n  s = sum(p, axis=1)\n  c = cast(s, bf16)\n  output c\n}\nschedule {\n  a_s = cache_after(a, memory=shared, load=tma, swizzle=128)\n  b_s = cache_after(b, memory=shared, load=tma, swizzle=128)\n  s.split(0, 64)\n  s.split(2, 64)\n  s.split(3, 16)\n  s.split(5, 64)\n  s.reorder(0, 5, 2, 3, 1, 6, 4)\n  s.parallelize(0, BIDy)\n  s.parallelize(1, BIDx)\n  s.parallelize(3, Unroll)\n  s.parallelize(4, Mma)\n  s.parallelize(5, Mma)\n  s.parallelize(6, Mma)\n  propagate(s)\n  a_s.reorder(0, 1, 2, 4, 3)\n  a_s.parallelize(2, Bulk)\n  a_s.parallelize(3, Bulk)\n  a_s.parallelize(4, Bulk)\n  b_s.reorder(0, 1, 3, 2, 4)\n  b_s.parallelize(2, Bulk)\n  b_s.parallelize(3, Bulk)\n  b_s.parallelize(4, Bulk)\n  inline_most()\n}\n";
    let c = cuda(src);
    assert!(
        c.contains("hf_wgmma_m64n64k16_bf16_nt(&s_acc[0], (hf_wgmma_desc(&b_s["),
        "{c}"
    );
}

#[test]
fn the_seed_epilogue_is_stmatrix_then_overlapped_tma_stores() {
    let c = cuda(include_str!(
        "../../examples/matmul/step9_tma_store_epilogue.hf"
    ));
    // Per 64-column slice, 4 stmatrix.x4 per thread (32 registers): no bounds guard (the TMA
    // store clips), no scalar shared-memory store of the accumulator.
    assert_eq!(c.matches("hf_stmatrix_x4(&c_s[").count(), 1, "{c}");
    assert!(
        c.contains("for (index_t r_x4 = 0; r_x4 < 4; ++r_x4) {"),
        "{c}"
    );
    assert!(
        !c.lines().any(|l| l.trim_start().starts_with("c_s[")),
        "{c}"
    );
    // The accumulator is indexed by constants only once unrolled (no tile index in it): else
    // ptxas would serialise the wgmmas (C7514).
    let read = c
        .lines()
        .find(|l| l.contains("c_s_x4[r_lane] = hf_float_to_bf16(s_acc["))
        .unwrap_or_else(|| panic!("{c}"));
    assert!(!read.contains("n_oi") && !read.contains("n_oo"), "{read}");
    // Order in the tile loop: the issuer's wait for the previous tile's stores, the named
    // barrier, the stmatrix writes, the fence, the barrier, then the four stores committed
    // without waiting.
    let at = |s: &str| c.find(s).unwrap_or_else(|| panic!("no {s} in {c}"));
    let wait = at("hf_bulk_wait_group_read<0>();");
    let write = at("hf_stmatrix_x4(&c_s[");
    let fence = at("hf_fence_proxy_async();\n            hf_bar_sync<256>();");
    let store = at("hf_tma_store_2d(&c_map");
    assert!(wait < write && write < fence && fence < store, "{c}");
    let after_store = &c[store..];
    let commit = after_store.find("hf_bulk_commit_group();").unwrap();
    let next_wait = after_store.find("hf_bulk_wait_group_read<0>();").unwrap();
    // The next wait is the kernel's exit drain, after the tile loops.
    assert!(commit < next_wait);
    assert!(
        after_store[..next_wait].matches('}').count() >= 4,
        "{after_store}"
    );
}

#[test]
fn stmatrix_needs_a_cache_only_a_tma_store_reads() {
    // Step 6's epilogue stores to global memory: pairs of registers, no stmatrix.
    let c = cuda(include_str!("../../examples/matmul/step6_persistent.hf"));
    assert!(!c.contains("hf_stmatrix_x4(&"), "{c}");
    assert!(c.contains("hf_vec<hf_bf16, 2>"), "{c}");
}

#[test]
fn a_fused_epilogue_is_computed_in_the_accumulator_registers_without_guards() {
    let c = cuda(include_str!(
        "../../examples/matmul/step10_bias_gelu_tma_store.hf"
    ));
    // The GELU of register r goes back into s_acc[r]: one 128-register array, no second one.
    assert_eq!(c.matches("alignas(16) float s_acc[128];").count(), 1, "{c}");
    assert!(!c.contains("float c_mul2[128]"), "{c}");
    assert!(c.contains("s_acc[r] = c_mul[0] * c_add[0];"), "{c}");
    // Register arithmetic is not guarded; the bias load (global memory) is.
    let gelu = &c[c
        .find("alignas(16) float x_cast_f32[1];")
        .unwrap_or_else(|| panic!("{c}"))..];
    let gelu = &gelu[..gelu.find("s_acc[r] = ").unwrap()];
    assert!(!gelu.contains("if ("), "{gelu}");
    let bias = c.find("x_broadcast[0] = bias[").unwrap();
    assert!(
        c[..bias].trim_end().ends_with('{'),
        "the bias load keeps its guard"
    );
    // The staged epilogue as in step 9.
    assert_eq!(c.matches("hf_stmatrix_x4(&c_s[").count(), 1, "{c}");
}

#[test]
fn an_epilogue_may_store_a_column_slice_of_a_column_slice() {
    // Step 9 with c_s holding half of the tile's 256 columns (two 128 x 64 boxes) and four
    // stages: N split in halves, each in slices of one box; c_s is computed per half.
    let src = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/matmul/step9_tma_store_epilogue.hf"),
    )
    .unwrap();
    let mut src = src;
    for (from, to) in [
        ("  c_s.split(6, 64)\n", "  c_s.split(6, 128)\n  c_s.split(7, 64)\n"),
        ("  c.split(6, 64)\n", "  c.split(6, 128)\n  c.split(7, 64)\n"),
        (
            "  c_s.reorder(0, 1, 2, 3, 6, 4, 5, 7)\n  c_s.parallelize(7, Mma)\n",
            "  c_s.reorder(0, 1, 2, 3, 6, 7, 4, 5, 8)\n  c_s.parallelize(8, Mma)\n",
        ),
        (
            "  c.reorder(0, 1, 2, 3, 6, 4, 5, 7)\n  c.parallelize(5, Bulk)\n  c.parallelize(6, Bulk)\n  c.parallelize(7, Bulk)\n",
            "  c.reorder(0, 1, 2, 3, 6, 7, 4, 5, 8)\n  c.parallelize(6, Bulk)\n  c.parallelize(7, Bulk)\n  c.parallelize(8, Bulk)\n",
        ),
        ("c_s.inline_at(4)", "c_s.inline_at(5)"),
        ("a_s.circular_buffer(3,", "a_s.circular_buffer(4,"),
        ("b_s.circular_buffer(3,", "b_s.circular_buffer(4,"),
    ] {
        src = edit(&src, from, to);
    }
    let c = cuda(&src);
    // One stmatrix per 8 registers, the registers of column (half * 128 + slice * 64).
    assert!(c.contains("hf_stmatrix_x4("), "{c}");
    assert!(
        c.contains("s_acc[(n_io * 128 + n_iio * 64) % 256 / 16384 * 128 + (n_io * 128 + n_iio * 64) % 256 % 16384 / 8 * 4 + (8 * r_x4 + r_lane)]"),
        "{c}"
    );
    // c_s is one half: 128 x 128 bf16 after the four 48 KiB stages.
    assert!(c.contains("196608"), "{c}");
}

/// The schedule variants docs/benchmarks.md measures (`docs/variants/`) still compile, and to
/// the launches their headers describe: a `cluster(...)` variant launches clusters, the others
/// do not; step 13's 1 x 4 blocks run 128 CTAs in a 32 x 4 grid at 4096^3.
#[test]
fn the_measured_variants_compile_to_the_launches_they_describe() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/variants");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "hf"))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "{files:?}");
    let sizes: std::collections::BTreeMap<String, i64> = [("M", 4096), ("N", 4096), ("K", 4096)]
        .map(|(k, v)| (k.to_string(), v))
        .into();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        let c = hopfuse_tests::compile(&src);
        assert!(
            src.starts_with("// Variant of examples/matmul/"),
            "{}",
            f.display()
        );
        let clustered = src.contains("\n  cluster(");
        assert_eq!(
            c.cuda.contains("__cluster_dims__"),
            clustered,
            "{}",
            f.display()
        );
        let launch = c.plan.concretize(&sizes).unwrap();
        if f.ends_with("s13_rows.hf") {
            assert_eq!(launch.grid, [4, 32, 1]);
        }
        // cuBLAS's tile: two m64n128 products per warp group and k16 step, four stages.
        if f.ends_with("s13_256x128.hf") {
            assert_eq!(launch.grid, [8, 16, 1]);
            assert!(c
                .cuda
                .contains("hf_wgmma_m64n128k16_bf16_nn(&s_acc[m_iio * "));
            assert!(c.cuda.contains("// 4 mbarriers"));
        }
    }
}
