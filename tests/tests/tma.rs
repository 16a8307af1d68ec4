//! TMA loads and circular buffering: properties of the lowered kernel that the golden outputs
//! show only for the examples.

fn compile(src: &str) -> hopfuse::Compilation {
    hopfuse::compile(src, &Default::default())
        .unwrap_or_else(|e| panic!("{}", e.render(src, "t.hf")))
}

/// exp over [M, N]: blocks over 32-row groups, a serial loop over 4 row tiles of 8, and the
/// pipelined serial loop over the column tiles of 64 inside it.
const NESTED: &str = "fusion exp_nested {\n  input x: f32[M, N]\n  y = exp(x)\n  output y\n}\nschedule {\n  x_s = cache_after(x, memory=shared, load=tma)\n  y.split(1, 64)\n  y.split(0, 8)\n  y.split(0, 4)\n  y.reorder(0, 1, 3, 2, 4)\n  y.parallelize(0, BIDx)\n  y.parallelize(3, TIDy)\n  y.parallelize(4, TIDx)\n  propagate(y)\n  x_s.parallelize(3, Bulk)\n  x_s.parallelize(4, Bulk)\n  x_s.circular_buffer(3)\n  inline_most()\n}\n";

#[test]
fn slot_and_parity_use_the_linear_iteration_over_every_enclosing_serial_loop() {
    let c = compile(NESTED);
    let lin = "m_oi * hf_ceil_div<index_t>(N, 64) + n_o";
    assert!(
        c.cuda.contains(&format!(
            "hf_mbarrier_wait(&x_s_full[({lin}) % 3], (unsigned)(({lin}) / 3 % 2));"
        )),
        "{}",
        c.cuda
    );
    // The next row tile's prologue refills slots the epilogue read: a barrier ends each one.
    let after_epilogue = c.cuda.split("n_o_epi").last().unwrap();
    assert!(
        after_epilogue.contains("__syncthreads();\n    }"),
        "{}",
        c.cuda
    );
}

#[test]
fn tma_data_needs_no_block_barrier_before_it_is_read() {
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/tma/exp_2d.hf"
    ))
    .unwrap();
    let c = compile(&src);
    let sync = c.passes.iter().find(|p| p.name == "sync").unwrap();
    // Main loop: issue, wait, compute, then one barrier (write-after-read) and nothing between
    // the wait and the reads.
    let main = sync.ir.split("@Serial key ").nth(2).unwrap();
    let wait = main.find("mbarrier_wait").unwrap();
    let read = main.find("exp(x_s[").unwrap();
    assert!(!main[wait..read].contains("__syncthreads"), "{}", sync.ir);
    assert!(main[read..].contains("__syncthreads"), "{}", sync.ir);
    // Init: one thread, fence, then the same thread starts fetching the tensor map, barrier;
    // inval after a barrier at the end.
    assert!(c.cuda.contains(
        "hf_fence_mbarrier_init();\n    hf_prefetch_tensormap(&x_s_map);\n  }\n  __syncthreads();"
    ));
    assert!(c.cuda.contains("__syncthreads();\n  if (hf_warp == 0 && hf_elect_one()) {\n    for (int hf_s = 0; hf_s < 4; ++hf_s) hf_mbarrier_inval(&x_s_full[hf_s]);"));
    // expect_tx is the full box (8 x 64 floats), also for ragged tiles.
    assert!(c
        .cuda
        .contains("hf_mbarrier_arrive_expect_tx(&x_s_full[n_o % 4], 2048u);"));
}

#[test]
fn without_circular_buffering_a_tma_load_is_issued_and_waited_each_iteration() {
    let src = "fusion f {\n  input x: f32[N]\n  y = x\n  output y\n}\nschedule {\n  x_s = cache_after(x, memory=shared, load=tma)\n  y.split(0, 256)\n  y.split(0, 4)\n  y.parallelize(0, BIDx)\n  y.parallelize(2, TIDx)\n  propagate(y)\n  x_s.parallelize(2, Bulk)\n  inline_most()\n}\n";
    let c = compile(src);
    assert!(
        c.cuda
            .contains("hf_mbarrier_wait(&x_s_full[0], (unsigned)(n_oi % 2));"),
        "{}",
        c.cuda
    );
    assert!(!c.cuda.contains("_epi"));
}

fn example(path: &str) -> String {
    std::fs::read_to_string(format!("{}/../examples/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn the_issuing_thread_is_an_elected_lane_under_a_warp_uniform_predicate() {
    let c = compile(&example("tma/exp_2d.hf"));
    // The warp index is broadcast from lane 0; elect.sync runs only in warp 0, all of it.
    assert!(c.cuda.contains(
        "const unsigned hf_warp = __shfl_sync(0xffffffffu, (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) / 32u, 0);"
    ));
    assert!(c
        .cuda
        .contains("if (hf_warp == 0 && hf_elect_one()) {\n        hf_mbarrier_arrive_expect_tx("));
    assert!(!c.cuda.contains("threadIdx.x) == 0"), "{}", c.cuda);
    // A block that is not made of whole warps falls back to thread 0 (elect.sync needs a full warp).
    let odd = example("tma/exp_2d.hf")
        .replace("y.split(1, 64)", "y.split(1, 36)")
        .replace("y.split(0, 8)", "y.split(0, 3)");
    let c = compile(&odd);
    assert!(
        c.cuda
            .contains("if (((index_t)threadIdx.x) == 0 && ((index_t)threadIdx.y) == 0) {"),
        "{}",
        c.cuda
    );
    assert!(!c.cuda.contains("&& hf_elect_one()"), "{}", c.cuda);
}

#[test]
fn two_tma_loads_in_one_loop_share_one_pipeline() {
    let c = compile(&example("tma/add_2d.hf"));
    // One full barrier per stage, one arrival announcing both boxes, two copies into the slot.
    assert!(
        c.cuda.contains("hf_mbarrier_init(&n_o_full[hf_s], 1);"),
        "{}",
        c.cuda
    );
    assert!(c.cuda.contains(
        "hf_mbarrier_arrive_expect_tx(&n_o_full[(n_o + 3) % 4], 4096u);\n        hf_tma_load_2d(&a_s[(n_o + 3) % 4 * 512], &a_s_map, (int)((n_o + 3) * 64), (int)(m_o * 8), &n_o_full[(n_o + 3) % 4]);\n        hf_tma_load_2d(&b_s[(n_o + 3) % 4 * 512], &b_s_map, (int)((n_o + 3) * 64), (int)(m_o * 8), &n_o_full[(n_o + 3) % 4]);"
    ), "{}", c.cuda);
    assert_eq!(
        c.cuda.matches("hf_mbarrier_wait(&").count(),
        2,
        "{}",
        c.cuda
    );
}

#[test]
fn empty_mbarriers_replace_the_block_barrier_of_a_pipeline() {
    let src = example("tma/exp_2d.hf").replace(
        "x_s.circular_buffer(4)",
        "x_s.circular_buffer(4, war=mbarrier)",
    );
    let c = compile(&src);
    // 512 threads = 16 warps: one arrival per warp completes a phase of an empty barrier.
    assert!(
        c.cuda.contains("hf_mbarrier_init(&x_s_empty[hf_s], 16);"),
        "{}",
        c.cuda
    );
    // The issuer waits for the slot it refills: iteration i + 3 reuses the slot read in i - 1.
    assert!(
        c.cuda.contains(
            "hf_mbarrier_wait(&x_s_empty[(n_o + 3) % 4], (unsigned)(((n_o + 3) / 4 + 1) % 2));"
        ),
        "{}",
        c.cuda
    );
    assert!(c
        .cuda
        .contains("hf_mbarrier_arrive_per_warp(&x_s_empty[n_o % 4]);"));
    // The loops need no block barrier at all.
    let main = c
        .cuda
        .split("for (index_t n_o = 0; n_o < hf_ceil_div")
        .nth(1)
        .unwrap();
    let main = main.split("n_o_epi").next().unwrap();
    assert!(!main.contains("__syncthreads"), "{}", c.cuda);
}

#[test]
fn plain_loads_are_circular_buffered_without_mbarriers() {
    let src = "fusion f {\n  input x: f32[N]\n  y = x\n  output y\n}\nschedule {\n  x_s = cache_after(x, memory=shared)\n  y.split(0, 256)\n  y.split(0, 16)\n  y.parallelize(0, BIDx)\n  y.parallelize(2, TIDx)\n  propagate(y)\n  x_s.circular_buffer(2)\n  inline_most()\n}\n";
    let c = compile(src);
    assert!(!c.cuda.contains("mbarrier"), "{}", c.cuda);
    // Two stages of 256 floats; iteration i loads i + 1 into the other slot and reads its own.
    assert!(c
        .cuda
        .contains("float* x_s = reinterpret_cast<float*>(hf_smem + 0);  // 512 elements"));
    assert!(
        c.cuda
            .contains("x_s[(n_oi + 1) % 2 * 256 + n_i] = x[(n_oo * 16 + (n_oi + 1)) * 256 + n_i];"),
        "{}",
        c.cuda
    );
    assert!(c
        .cuda
        .contains("y[(n_oo * 16 + n_oi) * 256 + n_i] = x_s[n_oi % 2 * 256 + n_i];"));
    // In registers: each thread's own slots, no barrier.
    let local = compile(&src.replace("memory=shared", "memory=local"));
    assert!(local.cuda.contains("float x_s[2];"), "{}", local.cuda);
    assert!(!local.cuda.contains("__syncthreads"), "{}", local.cuda);
}

#[test]
fn a_tma_store_is_fenced_by_every_writer_before_the_barrier() {
    let c = compile(&example("tma/exp_store.hf"));
    // Writes of y_s, then the fence (no predicate), the barrier, and the elected store that is
    // committed; the issuer waits for it to have read y_s only before y_s is written again (a
    // barrier after the wait), and before the kernel exits.
    assert!(c.cuda.contains(
        "      hf_fence_proxy_async();\n      __syncthreads();\n      if (hf_warp == 0 && hf_elect_one()) {\n        hf_tma_store_2d(&y_map, (int)(n_o * 64), (int)(m_o * 8), &y_s[0]);\n        hf_bulk_commit_group();\n      }\n"
    ), "{}", c.cuda);
    let drain = "if (hf_warp == 0 && hf_elect_one()) {\n        hf_bulk_wait_group_read<0>();\n      }\n      __syncthreads();\n      {  // m_i = threadIdx.y\n        {  // n_i = threadIdx.x\n          if (m_o * 8 + m_i < M && n_o * 64 + n_i < N) {\n            y_s[";
    assert!(c.cuda.contains(drain), "{}", c.cuda);
    let exit = c.cuda.rfind("hf_bulk_wait_group_read<0>();").unwrap();
    let inval = c.cuda.rfind("hf_mbarrier_inval(").unwrap();
    assert!(exit < inval && c.cuda[exit..inval].contains("__syncthreads();"));
    assert_eq!(
        c.cuda.matches("hf_bulk_wait_group_read").count(),
        3 + 1,
        "main loop, epilogue, exit (and the helper's definition): {}",
        c.cuda
    );
    // Every fence is executed by all threads: none sits inside a thread-dependent branch.
    for line in c
        .cuda
        .lines()
        .filter(|l| l.contains("hf_fence_proxy_async();"))
    {
        assert!(
            line.starts_with("      hf_fence") || line.starts_with("        hf_fence"),
            "{line}"
        );
    }
    let tm: Vec<&str> = c
        .plan
        .tensor_maps
        .iter()
        .map(|m| m.param.as_str())
        .collect();
    assert_eq!(tm, ["y_map", "x_s_map"]);
    assert_eq!(c.plan.tensor_maps[0].box_dims, vec![64, 8]);
}

#[test]
fn a_store_box_split_over_several_bulk_axes_is_row_major_and_warp_specialized() {
    // The 128 columns of the 8 x 128 store box are two Bulk axes (2 x 64) of `y`; `y_s` has the
    // same axes, so its layout (m_i * 2 + n_io) * 64 + n_ii is the row-major box.
    let src = "fusion exp_ws_store {\n  input x: f32[M, N]\n  y = exp(x)\n  output y\n}\nschedule {\n  x_s = cache_after(x, memory=shared, load=tma)\n  y_s = cache_before(y, memory=shared, store=tma)\n  y.split(1, 128)\n  y.split(2, 64)\n  y.split(0, 8)\n  y.reorder(0, 2, 1, 3, 4)\n  y.parallelize(0, BIDx)\n  propagate(y)\n  y_s.parallelize(2, TIDy)\n  y_s.parallelize(4, TIDx)\n  y.parallelize(2, Bulk)\n  y.parallelize(3, Bulk)\n  y.parallelize(4, Bulk)\n  x_s.parallelize(2, Bulk)\n  x_s.parallelize(3, Bulk)\n  x_s.parallelize(4, Bulk)\n  x_s.circular_buffer(6, warp_specialized(TIDy))\n  inline_most()\n}\n";
    let c = compile(src);
    assert_eq!(c.plan.tensor_maps[0].box_dims, vec![128, 8]);
    // Consumers write the box, fence, sync among themselves (named barrier), and one elected
    // lane stores it.
    assert!(
        c.cuda.contains("y_s[(m_i * 2 + n_io) * 64 + n_ii] = expf("),
        "{}",
        c.cuda
    );
    assert!(c.cuda.contains("hf_fence_proxy_async();\n        hf_bar_sync<512>();\n        if (hf_warp == 0 && hf_elect_one()) {\n          hf_tma_store_2d(&y_map, (int)(n_o * 128), (int)(m_o * 8), &y_s[0]);"), "{}", c.cuda);
    // The same axes in another order are not the row-major box.
    let swapped = src.replace(
        "  y_s.parallelize(2, TIDy)",
        "  y_s.reorder(0, 1, 3, 2, 4)\n  y_s.parallelize(3, TIDy)",
    );
    let e = match hopfuse::compile(&swapped, &Default::default()) {
        Ok(c) => panic!("expected a layout error:\n{}", c.cuda),
        Err(e) => e.render(&swapped, "t.hf"),
    };
    assert!(e.contains("shared-memory layout differs"), "{e}");
}

#[test]
fn the_other_fence_placements_are_where_they_say() {
    let per_store =
        compile(&example("tma/exp_store.hf").replace("store=tma)", "store=tma, fence=per_store)"));
    assert!(per_store.cuda.contains("y_s[m_i * 64 + n_i] = expf(x_s[n_o % 4 * 512 + (m_i * 64 + n_i)]);\n            hf_fence_proxy_async();"), "{}", per_store.cuda);
    assert!(!per_store
        .cuda
        .contains("hf_fence_proxy_async();\n      __syncthreads();"));
    let warp = compile(
        &example("tma/exp_store.hf").replace("store=tma)", "store=tma, fence=issuing_warp)"),
    );
    assert!(warp.cuda.contains("__syncthreads();\n      if (hf_warp == 0) {\n        hf_fence_proxy_async();\n        if (hf_elect_one()) {\n          hf_tma_store_2d("), "{}", warp.cuda);
}

#[test]
fn swizzled_boxes_are_addressed_through_the_swizzle() {
    let c = compile(&example("tma/exp_swizzle.hf"));
    assert!(c
        .cuda
        .contains("extern __shared__ __align__(1024) unsigned char hf_smem[];"));
    // Element (m_i, n_i) of a 16 x 32 f32 box: chunk (m_i * 32 + n_i) / 4 XOR row % 8.
    assert!(c.cuda.contains("y_s[(((m_i * 32 + n_i) / 4) ^ (m_i % 8)) * 4 + n_i % 4] = expf(x_s[n_o % 4 * 512 + ((((m_i * 32 + n_i) / 4) ^ (m_i % 8)) * 4 + n_i % 4)]);"), "{}", c.cuda);
    assert!(c.plan.tensor_maps.iter().all(|m| m.swizzle_bytes == 128));
    // The swizzled store cache starts at a multiple of 1024 bytes.
    assert!(c
        .cuda
        .contains("float* y_s = reinterpret_cast<float*>(hf_smem + 8192);"));
}

#[test]
fn swizzle_errors_name_the_rule() {
    let src = example("tma/exp_swizzle.hf");
    let e = hopfuse::compile(
        &src.replace("y.split(1, 32)", "y.split(1, 64)"),
        &Default::default(),
    )
    .err()
    .unwrap()
    .render(&src, "t.hf");
    assert!(
        e.contains("with 128-byte swizzle the inner box row must be exactly 128 bytes, it is 256"),
        "{e}"
    );
    let e = hopfuse::compile(
        &src.replace("swizzle=128)\n  y_s", "swizzle=48)\n  y_s"),
        &Default::default(),
    )
    .err()
    .unwrap()
    .render(&src, "t.hf");
    assert!(e.contains("swizzle is none, 32, 64 or 128 (bytes)"), "{e}");
    let e = hopfuse::compile(
        &src.replace("load=tma, swizzle=128", "swizzle=128"),
        &Default::default(),
    )
    .err()
    .unwrap()
    .render(&src, "t.hf");
    assert!(
        e.contains("swizzle= lays out a TMA box in shared memory: use it with load=tma"),
        "{e}"
    );
}

#[test]
fn a_buffered_loop_outside_the_block_loops_cannot_be_pipelined() {
    // The serial column loop is outermost and the blockIdx loop sits between it and the load.
    let src = example("tma/exp_2d.hf")
        .replace("y.reorder(0, 2, 1, 3)", "y.reorder(2, 0, 1, 3)")
        .replace("y.parallelize(0, BIDx)", "y.parallelize(1, BIDx)");
    let e = hopfuse::compile(&src, &Default::default())
        .err()
        .unwrap()
        .render(&src, "t.hf");
    assert!(
        e.contains("the load of `x_s` is separated from the serial loop `n_o` that pipelines it by other loops: it must be issued directly in `n_o` (put block-index loops outside it)"),
        "{e}"
    );
}

#[test]
fn leading_bulk_axes_lay_boxes_side_by_side_each_its_own_copy() {
    let c = compile(&example("tma/copy_two_boxes.hf"));
    // One box of one swizzle span in the tensor map; two copies, one arrival announcing both.
    assert_eq!(c.plan.tensor_maps.len(), 1);
    assert_eq!(c.plan.tensor_maps[0].box_dims, vec![64, 8]);
    assert!(
        c.cuda
            .contains("hf_mbarrier_arrive_expect_tx(&x_s_full[0], 2048u);"),
        "{}",
        c.cuda
    );
    assert!(c.cuda.contains(
        "hf_tma_load_2d(&x_s[0], &x_s_map, (int)(k_o * 128), (int)(m_o * 8), &x_s_full[0]);"
    ));
    assert!(c.cuda.contains(
        "hf_tma_load_2d(&x_s[512], &x_s_map, (int)(k_o * 128 + 64), (int)(m_o * 8), &x_s_full[0]);"
    ));
    assert_eq!(c.cuda.matches("hf_tma_load_2d(&").count(), 2);
}

#[test]
fn boxes_side_by_side_errors_name_the_rule() {
    let src = example("tma/copy_two_boxes.hf");
    let err = |s: String| {
        hopfuse::compile(&s, &Default::default())
            .err()
            .unwrap_or_else(|| panic!("compiles:\n{s}"))
            .render(&s, "t.hf")
    };
    // Boxes of 4 rows of 128 bytes: the second would not start on the swizzle's 1 KiB repeat.
    let e = err(src.replace("y.split(0, 8)", "y.split(0, 4)"));
    assert!(
        e.contains("lay 2 boxes of 512 bytes side by side; each box starts where the previous one ends and a box in shared memory starts on a multiple of 1024 bytes (the swizzle pattern's repeat), so a box must be a multiple of 1024 bytes"),
        "{e}"
    );
    // A bulk copy has no tensor map to address the next box with.
    let e = err(src.replace("load=tma, swizzle=128", "load=bulk"));
    assert!(
        e.contains("the leading Bulk axes lay 2 boxes side by side, which takes one tensor-map copy per box: use load=tma"),
        "{e}"
    );
    // The counting axis must come first: here the column pieces are split around the rows in
    // the wrong order (the inner piece first).
    let e = err(src.replace("x_s.reorder(0, 1, 3, 2, 4)", "x_s.reorder(0, 1, 4, 2, 3)"));
    assert!(
        e.contains("must together cover one contiguous part of dimension 1"),
        "{e}"
    );
    // A TMA store writes one box per store: 16 x 64 f32 (two 128-byte spans) is two boxes.
    let store = example("tma/exp_swizzle.hf")
        .replace("y.split(1, 32)", "y.split(1, 64)")
        .replace(
            "  y.parallelize(2, Bulk)\n  y.parallelize(3, Bulk)\n  x_s.parallelize(2, Bulk)\n  x_s.parallelize(3, Bulk)",
            "  y.split(3, 32)\n  y.reorder(0, 1, 3, 2, 4)\n  y.parallelize(2, Bulk)\n  y.parallelize(3, Bulk)\n  y.parallelize(4, Bulk)\n  x_s.split(3, 32)\n  x_s.reorder(0, 1, 3, 2, 4)\n  x_s.parallelize(2, Bulk)\n  x_s.parallelize(3, Bulk)\n  x_s.parallelize(4, Bulk)",
        );
    let e = err(store);
    assert!(
        e.contains("`y` (TMA store from `y_s`): the leading Bulk axes lay 2 boxes side by side, which TMA stores do not do"),
        "{e}"
    );
}

#[test]
fn a_tma_store_in_a_thread_y_loop_is_issued_by_each_row_of_threads() {
    // Each threadIdx.y row (two warps) writes its own row of y_s and stores it: one elected
    // lane of the row's first warp issues, waits and is waited for; the barriers count only
    // the row's 64 threads (named barriers 2 + threadIdx.y).
    let c = compile(&example("tma/exp_row_stores.hf"));
    assert_eq!(c.plan.tensor_maps[0].box_dims, vec![64, 1]);
    assert!(c.cuda.contains(
        "        hf_fence_proxy_async();\n        hf_bar_sync_group<64>(2u + threadIdx.y);\n        if (hf_warp % 2 == 0 && hf_elect_one()) {\n          hf_tma_store_2d(&y_map, (int)(n_o * 64), (int)(m_o * 8 + m_i), &y_s[m_i * 64]);\n          hf_bulk_commit_group();\n        }\n"
    ), "{}", c.cuda);
    assert!(c.cuda.contains(
        "      if (hf_warp % 2 == 0 && hf_elect_one()) {\n        hf_bulk_wait_group_read<0>();\n      }\n      hf_bar_sync_group<64>(2u + threadIdx.y);\n"
    ), "{}", c.cuda);
    assert!(!c.cuda.contains("__syncthreads"), "{}", c.cuda);
    assert_eq!(
        hopfuse::verify::verify(&c.kernel, hopfuse::verify::Stage::LOWERED),
        Ok(())
    );
}

#[test]
fn a_row_store_of_data_other_rows_wrote_keeps_the_block_barrier() {
    // y_s computed outside the threadIdx.y loop, each column by one thread of x: a row's store
    // reads what other rows' threads wrote, so the barriers are the block's, and each row still
    // issues its own store.
    let src = example("tma/exp_row_stores.hf")
        .replace("  y_s.parallelize(2, TIDy)", "  y_s.parallelize(2, Serial)")
        .replace("  inline_most()", "  inline_most()\n  y_s.inline_at(2)");
    match hopfuse::compile(&src, &Default::default()) {
        Ok(c) => {
            assert!(!c.cuda.contains("hf_bar_sync_group"), "{}", c.cuda);
            assert!(c.cuda.contains("__syncthreads();"), "{}", c.cuda);
            assert!(
                c.cuda.contains(
                    "if (hf_warp % 2 == 0 && hf_elect_one()) {\n          hf_tma_store_2d("
                ),
                "{}",
                c.cuda
            );
        }
        Err(e) => panic!("{}", e.render(&src, "t.hf")),
    }
}
