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
            "hf_mbarrier_wait(&x_s_bars[({lin}) % 3], (unsigned)(({lin}) / 3 % 2));"
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
    let main = sync.ir.split("@Serial:").nth(2).unwrap();
    let wait = main.find("mbarrier_wait").unwrap();
    let read = main.find("exp(x_s[").unwrap();
    assert!(!main[wait..read].contains("__syncthreads"), "{}", sync.ir);
    assert!(main[read..].contains("__syncthreads"), "{}", sync.ir);
    // Init: one thread, fence, barrier; inval after a barrier at the end.
    assert!(c
        .cuda
        .contains("hf_fence_mbarrier_init();\n  }\n  __syncthreads();"));
    assert!(c.cuda.contains("__syncthreads();\n  if (((index_t)threadIdx.x) == 0 && ((index_t)threadIdx.y) == 0) {\n    for (int s = 0; s < 4; ++s) hf_mbarrier_inval(&x_s_bars[s]);"));
    // expect_tx is the full box (8 x 64 floats), also for ragged tiles.
    assert!(c
        .cuda
        .contains("hf_mbarrier_arrive_expect_tx(&x_s_bars[n_o % 4], 2048u);"));
}

#[test]
fn without_circular_buffering_a_tma_load_is_issued_and_waited_each_iteration() {
    let src = "fusion f {\n  input x: f32[N]\n  y = x\n  output y\n}\nschedule {\n  x_s = cache_after(x, memory=shared, load=tma)\n  y.split(0, 256)\n  y.split(0, 4)\n  y.parallelize(0, BIDx)\n  y.parallelize(2, TIDx)\n  propagate(y)\n  x_s.parallelize(2, Bulk)\n  inline_most()\n}\n";
    let c = compile(src);
    assert!(
        c.cuda
            .contains("hf_mbarrier_wait(&x_s_bars[0], (unsigned)(n_oi % 2));"),
        "{}",
        c.cuda
    );
    assert!(!c.cuda.contains("_epi"));
}
