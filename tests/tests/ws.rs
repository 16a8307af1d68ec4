//! Warp specialization: the structure of the lowered kernels and every error the issue lists.

fn compile(src: &str) -> hopfuse::Compilation {
    hopfuse::compile(src, &Default::default())
        .unwrap_or_else(|e| panic!("{}", e.render(src, "t.hf")))
}

fn err(src: &str) -> String {
    match hopfuse::compile(src, &Default::default()) {
        Ok(_) => panic!("expected an error for:\n{src}"),
        Err(e) => e.render(src, "t.hf"),
    }
}

fn example(path: &str) -> String {
    std::fs::read_to_string(format!("{}/../examples/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn the_block_gets_a_producer_warp_group_and_consumers_use_named_barriers() {
    let c = compile(&example("ws/exp_tidy.hf"));
    // 64 x 4 consumers + 128 producers along y: blockDim (64, 6, 1), warps 8..11 produce.
    assert_eq!(c.plan.block[1].as_const(), Some(6));
    assert!(
        c.cuda
            .contains("if (7 < hf_warp % 12) {  // producer warp group"),
        "{}",
        c.cuda
    );
    assert!(
        c.cuda
            .contains("    if (hf_warp == 8) {\n      if (hf_elect_one()) {"),
        "{}",
        c.cuda
    );
    // The producer has no prologue: it waits for an empty slot (parity trick: the first
    // `stages` waits pass on fresh barriers) before announcing the box.
    assert!(
        c.cuda
            .contains("hf_mbarrier_wait(&x_s_empty[n_o % 32], (unsigned)((n_o / 32 + 1) % 2));"),
        "{}",
        c.cuda
    );
    // One 4 x 256 f32 box per stage.
    assert!(c
        .cuda
        .contains("hf_mbarrier_arrive_expect_tx(&x_s_full[n_o % 32], 4096u);"));
    // Consumers: wait full, compute, release (one arrival per warp: 8 warps).
    assert!(c.cuda.contains("hf_mbarrier_init(&x_s_empty[hf_s], 8);"));
    assert!(c
        .cuda
        .contains("hf_mbarrier_arrive_per_warp(&x_s_empty[n_o % 32]);"));
    // No block-wide barrier after the split: the producers have left.
    let consumer = c.cuda.split("// consumer warps").nth(1).unwrap();
    assert!(!consumer.contains("__syncthreads"), "{}", c.cuda);
    assert!(consumer.contains("hf_bar_sync<256>();"), "{}", c.cuda);
    assert!(c.cuda.contains("__launch_bounds__(384) "), "{}", c.cuda);
    assert!(c.plan.register_sharing.is_none());
}

#[test]
fn register_sharing_uses_setmaxnreg_and_one_block_per_sm() {
    let c = compile(&example("ws/mul_two_roles.hf"));
    assert!(c.cuda.contains("__launch_bounds__(384, 1) "), "{}", c.cuda);
    assert!(c
        .cuda
        .contains("asm volatile(\"setmaxnreg.dec.sync.aligned.u32 152;\");"));
    assert!(c
        .cuda
        .contains("asm volatile(\"setmaxnreg.inc.sync.aligned.u32 176;\");"));
    let rs = c.plan.register_sharing.as_ref().unwrap();
    assert_eq!((rs.producer, rs.consumer), (152, 176));
}

#[test]
fn each_producer_role_has_its_own_barriers_and_consumers_wait_on_all() {
    let c = compile(&example("ws/mul_two_roles.hf"));
    // 256 consumer threads on x, producers are warps 8..11; t2 by warp 8, t3 by warp 9.
    assert!(c.cuda.contains("if (hf_warp == 8) {"), "{}", c.cuda);
    assert!(c.cuda.contains("if (hf_warp == 9) {"), "{}", c.cuda);
    for t in ["t2_s", "t3_s"] {
        assert!(c
            .cuda
            .contains(&format!("hf_mbarrier_init(&{t}_full[hf_s], 1);")));
        assert!(c
            .cuda
            .contains(&format!("hf_mbarrier_init(&{t}_empty[hf_s], 8);")));
        assert!(
            c.cuda.contains(&format!(
                "hf_mbarrier_wait(&{t}_full[n_o % 4], (unsigned)(n_o / 4 % 2));"
            )),
            "{}",
            c.cuda
        );
        assert!(c.cuda.contains(&format!(
            "hf_mbarrier_arrive_per_warp(&{t}_empty[n_o % 4]);"
        )));
        // Each role announces only its own box (8 x 256 floats).
        assert!(c.cuda.contains(&format!(
            "hf_mbarrier_arrive_expect_tx(&{t}_full[n_o % 4], 8192u);"
        )));
    }
    let three = compile(&example("ws/add_three_roles.hf"));
    assert_eq!(
        three.cuda.matches("hf_mbarrier_arrive_expect_tx(&").count(),
        3,
        "{}",
        three.cuda
    );
}

#[test]
fn a_persistent_kernel_keeps_slot_and_parity_in_step_across_tiles() {
    let c = compile(&example("ws/row_sum_persistent.hf"));
    assert_eq!(c.plan.grid[0].as_const(), Some(132));
    let lin = "m_oi * hf_ceil_div<index_t>(N, 256) + n_o";
    // The producer walks one flat loop over the (tile, column block) pairs; the consumers keep
    // the tile loop, the block loop and the per-tile epilogue. Both count the same linear
    // iteration.
    let producer = c.cuda.split("// producer warp group").nth(1).unwrap();
    let producer = producer.split("// consumer warps").next().unwrap();
    // It carries the tile and the block as digits, stepped at the end of each iteration.
    assert!(
        producer.contains("for (index_t m_oi_n_o = 0, m_oi = 0, n_o = 0; m_oi_n_o < hf_ceil_div<index_t>(hf_ceil_div<index_t>(M, 8), 132) * hf_ceil_div<index_t>(N, 256); ++m_oi_n_o) {"),
        "{producer}"
    );
    assert!(
        producer.contains("if (++n_o == hf_ceil_div<index_t>(N, 256)) { n_o = 0; ++m_oi; }"),
        "{producer}"
    );
    assert_eq!(producer.matches("for (").count(), 1, "{producer}");
    // Slot and parity from the same linear iteration as the consumers'.
    assert!(
        producer.contains(&format!(
            "hf_mbarrier_wait(&x_s_empty[({lin}) % 6], (unsigned)((({lin}) / 6 + 1) % 2));"
        )),
        "{producer}"
    );
    assert!(producer.contains("(int)(n_o * 256)"), "{producer}");
    assert!(
        c.cuda.contains(&format!(
            "hf_mbarrier_wait(&x_s_full[({lin}) % 6], (unsigned)(({lin}) / 6 % 2));"
        )),
        "{}",
        c.cuda
    );
    // The per-tile epilogue reduces over the consumers only.
    assert!(
        c.cuda
            .contains("hf_block_reduce<true, false, false, 512u>("),
        "{}",
        c.cuda
    );
}

const EXP: &str = "fusion f {\n  input x: f32[M, N]\n  y = exp(x)\n  output y\n}\n";

fn ws(split_cols: i64, split_rows: i64, extra: &str, cb: &str) -> String {
    format!(
        "{EXP}schedule {{\n  x_s = cache_after(x, memory=shared, load=tma)\n  y.split(1, {split_cols})\n  y.split(0, {split_rows})\n  y.reorder(0, 2, 1, 3)\n  y.parallelize(0, BIDx)\n  y.parallelize(2, TIDy)\n  y.parallelize(3, TIDx)\n  propagate(y)\n  x_s.parallelize(2, Bulk)\n  x_s.parallelize(3, Bulk)\n{extra}  x_s.circular_buffer({cb})\n  inline_most()\n}}\n"
    )
}

/// setmaxnreg's `.inc` needs only what the `.dec` freed (one register pool per CTA): the
/// counts may leave registers unused. 384 threads start with 168 registers each (64,512 of the
/// 65,536): [64, 192] takes 24 x 256 of the 104 x 128 it frees; [40, 232] takes exactly what
/// it frees; [48, 232] would take 16,384 of 15,360 (a block total of exactly 65,536, which is
/// still more than the 64,512 the block holds).
#[test]
fn register_counts_may_leave_registers_in_the_pool_but_not_take_more_than_it_holds() {
    for (regs, ok) in [
        ("[64, 192]", true),
        ("[40, 232]", true),
        ("[24, 240]", true),
        ("[48, 224]", true),
        ("[48, 232]", false),
        ("[24, 248]", false),
    ] {
        let src = ws(
            64,
            4,
            "",
            &format!("4, warp_specialized(TIDy, registers={regs})"),
        );
        match hopfuse::compile(&src, &Default::default()) {
            Ok(c) => {
                assert!(ok, "{regs} accepted");
                let (p, n) = regs[1..regs.len() - 1].split_once(", ").unwrap();
                for want in [
                    format!("setmaxnreg.dec.sync.aligned.u32 {p};"),
                    format!("setmaxnreg.inc.sync.aligned.u32 {n};"),
                ] {
                    assert!(c.cuda.contains(&want), "{regs}: no `{want}`");
                }
            }
            Err(e) => {
                let e = e.render(&src, "t.hf");
                assert!(!ok, "{regs} rejected: {e}");
                assert!(e.contains("so .inc would wait forever"), "{e}");
            }
        }
    }
}

#[test]
fn warp_specialization_errors_name_the_tensor_and_the_rule() {
    // Other thread dims must multiply to a divisor of 128.
    let e = err(&ws(96, 8, "", "4, warp_specialized(TIDy)"));
    assert!(e.contains("`x_s`: warp_specialized(TIDy) adds a 128-thread producer warp group along y, so the other thread dims must multiply to a divisor of 128; they multiply to 96"), "{e}");
    // Each warp must have one role.
    let e = err(&ws(4, 4, "", "4, warp_specialized(TIDy)"));
    assert!(e.contains("each warp must have one role"), "{e}");
    // Register rules.
    let e = err(&ws(
        64,
        8,
        "",
        "4, warp_specialized(TIDy, registers=[30, 112])",
    ));
    assert!(
        e.contains(
            "the producer register count is 30; setmaxnreg takes a multiple of 8 from 24 to 256"
        ),
        "{e}"
    );
    let e = err(&ws(
        64,
        8,
        "",
        "4, warp_specialized(TIDy, registers=[120, 232])",
    ));
    assert!(e.contains("registers=[120, 232]: with 640 threads every thread starts with 96 registers, and setmaxnreg needs producer <= 96 <= consumer"), "{e}");
    let e = err(&ws(
        64,
        8,
        "",
        "4, warp_specialized(TIDy, registers=[40, 232])",
    ));
    assert!(e.contains("the 512 consumer threads' setmaxnreg.inc takes (232 - 96) x 512 = 69632 registers, but the 128 producer threads' setmaxnreg.dec frees only (96 - 40) x 128 = 7168"), "{e}");
    // 640 threads start with 96 registers: 24 + 4 x 112 leaves 1024 in the pool (accepted);
    // 120 needs 4096 more than the producers free.
    compile(&ws(
        64,
        8,
        "",
        "4, warp_specialized(TIDy, registers=[24, 112])",
    ));
    let e = err(&ws(
        64,
        8,
        "",
        "4, warp_specialized(TIDy, registers=[24, 120])",
    ));
    assert!(e.contains("registers=[24, 120]: with 640 threads every thread starts with 96 registers; the 512 consumer threads' setmaxnreg.inc takes (120 - 96) x 512 = 12288 registers, but the 128 producer threads' setmaxnreg.dec frees only (96 - 24) x 128 = 9216, so .inc would wait forever for the rest (the block is launched with 96 x 640 = 61440 registers); with producer 24 the consumer count can be at most 112"), "{e}");
    // Arguments.
    let e = err(&ws(64, 8, "", "4, warp_specialized(BIDx)"));
    assert!(
        e.contains("warp_specialized: `BIDx` is not a thread dim (TIDx, TIDy or TIDz)"),
        "{e}"
    );
    let e = err(&ws(64, 8, "", "4, warp_specialized(TIDy, warp=4)"));
    assert!(e.contains("warp is the producer warp (0 to 3)"), "{e}");
    let e = err(&ws(64, 8, "", "4, 2, warp_specialized(TIDy)"));
    assert!(
        e.contains("a warp-specialized pipeline has no prefetch distance"),
        "{e}"
    );
}

#[test]
fn a_dynamic_thread_dim_cannot_be_specialised() {
    // A second output binds TIDz to the symbolic K: the block size is known only at run time.
    let src = "fusion f {\n  input x: f32[M, N]\n  input w: f32[K]\n  y = exp(x)\n  z = w * 2.0\n  output y\n  output z\n}\nschedule {\n  x_s = cache_after(x, memory=shared, load=tma)\n  y.split(1, 64)\n  y.split(0, 8)\n  y.reorder(0, 2, 1, 3)\n  y.parallelize(0, BIDx)\n  y.parallelize(2, TIDy)\n  y.parallelize(3, TIDx)\n  propagate(y)\n  x_s.parallelize(2, Bulk)\n  x_s.parallelize(3, Bulk)\n  x_s.circular_buffer(4, warp_specialized(TIDy))\n  z.parallelize(0, TIDz)\n  inline_most()\n}\n";
    let e = err(src);
    assert!(
        e.contains("`x_s`: warp_specialized(TIDy) needs a block size known at compile time, and thread dim z is K"),
        "{e}"
    );
}

#[test]
fn a_thread_parallel_tma_load_cannot_be_issued_by_the_elected_lane() {
    // The serial loop inside the TIDy loop, without warp specialization: the load would sit in
    // a thread-parallel loop that one elected thread issues for.
    let src = format!(
        "{EXP}schedule {{\n  x_s = cache_after(x, memory=shared, load=tma)\n  y.split(1, 64)\n  y.split(0, 8)\n  y.parallelize(0, BIDx)\n  y.parallelize(1, TIDy)\n  y.parallelize(3, TIDx)\n  propagate(y)\n  x_s.parallelize(3, Bulk)\n  x_s.circular_buffer(4)\n  inline_most()\n}}\n"
    );
    let e = err(&src);
    assert!(
        e.contains("`x_s` is loaded by tma, which one thread issues for the whole block: it cannot be inside the thread-parallel loop `m_i` (TIDy)"),
        "{e}"
    );
}

/// Warp-specialized on TIDy with the loads inside the consumers' TIDy loop: the rows of threads
/// take turns with the stages (ping-pong). The producer walks the TIDy loop serially, each stage
/// is released by one group's warps, the slots hold one group's box, not one per group, and the
/// groups hand the turn on around the buffered loop (named barriers from the top id down).
#[test]
fn loads_inside_the_specialised_loop_make_groups_take_turns() {
    let sched = |rows: i64, tidx: i64| {
        format!(
            "{EXP}schedule {{\n  x_s = cache_after(x, memory=shared, load=tma)\n  y.split(1, {tidx})\n  y.split(0, {rows})\n  y.parallelize(0, BIDx)\n  y.parallelize(1, TIDy)\n  y.parallelize(3, TIDx)\n  propagate(y)\n  x_s.parallelize(3, Bulk)\n  x_s.circular_buffer(4, warp_specialized(TIDy))\n  inline_most()\n}}\n"
        )
    };
    let c = compile(&sched(4, 64));
    let ws = c.pipeline_plan.pipes[0]
        .ws
        .as_ref()
        .expect("warp-specialized");
    assert_eq!(ws.turns, 4);
    let cuda = &c.cuda;
    // 4 groups of 64 threads: two warps release each stage.
    assert!(
        cuda.contains("hf_mbarrier_init(&x_s_empty[hf_s], 2);"),
        "{cuda}"
    );
    // One group's 64-column box per slot.
    assert!(
        cuda.contains("x_s = reinterpret_cast<float*>(hf_smem + 0);  // 256 elements"),
        "{cuda}"
    );
    // The producer's one loop walks every group's column blocks in turn.
    assert!(
        cuda.contains(
            "for (index_t m_i_n_o = 0, m_i = 0, n_o = 0; m_i_n_o < 4 * hf_ceil_div<index_t>(N, 64); ++m_i_n_o)"
        ),
        "{cuda}"
    );
    // The last group passes the first turn to group 0, each group waits for its turn before
    // its column loop and passes it after, and group 0 takes the last pass at the end.
    let at = |s: &str| {
        cuda.find(s)
            .unwrap_or_else(|| panic!("no `{s}` in\n{cuda}"))
    };
    let prime = at("if (((index_t)threadIdx.y) == 3) {\n      hf_bar_arrive_group<128>(15u - (threadIdx.y + 1u) % 4u);");
    let wait = at("hf_bar_sync_group<128>(15u - threadIdx.y);\n        for (index_t n_o = 0;");
    let pass = cuda[wait..]
        .find("hf_bar_arrive_group<128>(15u - (threadIdx.y + 1u) % 4u);")
        .map(|p| p + wait)
        .expect("a pass after the loop");
    let drain =
        at("if (((index_t)threadIdx.y) == 0) {\n      hf_bar_sync_group<128>(15u - threadIdx.y);");
    assert!(prime < wait && wait < pass && pass < drain, "{cuda}");
    // A group of 16 threads would share its warps with the next group; 8 groups are more than
    // the turn barriers.
    let e = err(&sched(4, 16));
    assert!(
        e.contains("its 4 thread groups take turns with the stages (ping-pong)")
            && e.contains("a group has 16 consecutive threads, not whole warps"),
        "{e}"
    );
    let e = err(&sched(8, 64));
    assert!(e.contains("its 8 thread groups would take turns with the stages (ping-pong); at most 4 groups can"), "{e}");
}

#[test]
fn a_reduction_across_the_specialised_dim_is_rejected() {
    let src = "fusion f {\n  input x: f32[M, N]\n  s = sum(x, axis=1)\n  output s\n}\nschedule {\n  x_s = cache_after(x, memory=shared, load=tma)\n  s.split(1, 128)\n  s.split(0, 4)\n  s.reorder(0, 2, 1, 3)\n  s.parallelize(0, BIDx)\n  s.parallelize(2, TIDy)\n  s.parallelize(3, TIDx)\n  propagate(s)\n  x_s.parallelize(2, Bulk)\n  x_s.parallelize(3, Bulk)\n  x_s.circular_buffer(4, warp_specialized(TIDx))\n  inline_most()\n}\n";
    let e = err(src);
    assert!(
        e.contains("is warp-specialized on TIDx and the kernel reduces across TIDx"),
        "{e}"
    );
}

#[test]
fn a_producer_role_that_no_consumer_reads_is_rejected() {
    // `z` is declared and cached but nothing reads the cache: warp 1's role would fill slots that
    // no consumer waits on or releases.
    let src = "fusion f {\n  input x: f32[M, N]\n  input z: f32[M, N]\n  y = exp(x)\n  output y\n}\nschedule {\n  x_s = cache_after(x, memory=shared, load=tma)\n  z_s = cache_after(z, memory=shared, load=tma)\n  y.split(1, 128)\n  y.split(0, 4)\n  y.reorder(0, 2, 1, 3)\n  y.parallelize(0, BIDx)\n  y.parallelize(2, TIDy)\n  y.parallelize(3, TIDx)\n  propagate(y)\n  x_s.parallelize(2, Bulk)\n  x_s.parallelize(3, Bulk)\n  z_s.split(1, 128)\n  z_s.split(0, 4)\n  z_s.reorder(0, 2, 1, 3)\n  z_s.parallelize(0, BIDx)\n  z_s.parallelize(2, Bulk)\n  z_s.parallelize(3, Bulk)\n  x_s.circular_buffer(4, warp_specialized(TIDy, warp=0))\n  z_s.circular_buffer(4, warp_specialized(TIDy, warp=1))\n  inline_most()\n}\n";
    let e = err(src);
    assert!(
        e.contains("t.hf:9:3: error: `z_s` (tma load of `z`) is read by nothing (its producer role would fill slots that no consumer reads or releases)"),
        "{e}"
    );
    // Without warp specialization the same cache is still an error, without the role.
    let plain = src
        .replace(
            "  x_s.circular_buffer(4, warp_specialized(TIDy, warp=0))\n",
            "",
        )
        .replace(
            "  z_s.circular_buffer(4, warp_specialized(TIDy, warp=1))\n",
            "",
        );
    let e = err(&plain);
    assert!(
        e.contains(
            "`z_s` (tma load of `z`) is read by nothing: use it in the fusion or remove the cache"
        ),
        "{e}"
    );
}

#[test]
fn thread_indices_are_broadcast_only_where_a_warp_has_one_value() {
    // 256 x 2 threads (+ the producer group): every warp has one threadIdx.y, so the binding is
    // a broadcast from lane 0 and ptxas keeps what depends on it in uniform registers.
    let c = compile(&example("matmul/step13_warp_group_epilogue.hf"));
    assert!(
        c.cuda
            .contains("const index_t m_io = __shfl_sync(0xffffffffu, (index_t)threadIdx.y, 0);"),
        "{}",
        c.cuda
    );
    // 16 x 16 threads: a warp spans two values of threadIdx.y, so it stays a plain read.
    let plain = compile(&example("basics/matmul.hf"));
    assert!(plain.cuda.contains(" = threadIdx.y;"), "{}", plain.cuda);
    assert!(
        !plain.cuda.contains("__shfl_sync(0xffffffffu, (index_t)"),
        "{}",
        plain.cuda
    );
}

/// The ping-pong attention kernel made persistent, with `q`'s tile double-buffered by a
/// producer warp of its own over the tile loop while warps 0 and 1 buffer K and V over the key
/// tiles inside it (`variant`: the line after K's and V's `circular_buffer`s).
fn persistent_attention(q_buffer: &str) -> String {
    let base = example("attention/online_wgmma_overlap_pingpong.hf");
    let online = "  online_softmax(o, overlap=products)\n";
    let v_buffer =
        "  vs.circular_buffer(2, warp_specialized(TIDy, registers=[24, 240], warp=1, turns=products))\n";
    assert!(base.contains(online) && base.contains(v_buffer));
    base.replacen(online, &format!("{online}  persistent(BIDx, 16)\n"), 1)
        .replacen(v_buffer, &format!("{v_buffer}{q_buffer}"), 1)
}

#[test]
fn two_buffered_loops_each_have_their_producer_warps() {
    let c = compile(&persistent_attention(
        "  qs.circular_buffer(2, warp_specialized(TIDy, registers=[24, 240], warp=2))\n",
    ));
    let cuda = &c.cuda;
    let (producer, consumer) = cuda.split_once("// consumer warps").unwrap();
    // Warp 10 (producer warp 2) walks the tile loop alone: two stages of q's 128 x 128 tile.
    let q_warp = producer.split("if (hf_warp == 10) {").nth(1).unwrap();
    let q_warp = q_warp.split("if (hf_warp == 8) {").next().unwrap();
    assert!(
        q_warp.contains("for (index_t tile = 0; tile < ")
            && q_warp
                .contains("hf_mbarrier_wait(&qs_empty[tile % 2], (unsigned)((tile / 2 + 1) % 2));")
            && q_warp.contains("hf_mbarrier_arrive_expect_tx(&qs_full[tile % 2], 32768u);")
            && !q_warp.contains("ks_map"),
        "{cuda}"
    );
    // Warps 8 and 9 keep K's and V's flat (tile, key tile) loops.
    for (warp, buffer) in [(8, "ks"), (9, "vs")] {
        let role = producer
            .split(&format!("if (hf_warp == {warp}) {{"))
            .nth(1)
            .unwrap();
        assert!(
            role.contains(&format!(
                "hf_mbarrier_wait(&{buffer}_empty[(tile * hf_ceil_div<index_t>(T, 128) + t_o) % 2]"
            )),
            "{cuda}"
        );
    }
    // The consumers wait for q's stage at each tile, read it there, and release it per warp
    // at the tile's end: no block barrier orders q's reuse any more.
    assert!(
        consumer.contains("hf_mbarrier_wait(&qs_full[tile % 2], (unsigned)(tile / 2 % 2));")
            && consumer.contains("hf_wgmma_desc(&qs[tile % 2 * 16384 + s2_io * 64 * 4 * 16]")
            && consumer.contains("hf_mbarrier_arrive_per_warp(&qs_empty[tile % 2]);")
            && !consumer.contains("hf_tma_load"),
        "{cuda}"
    );
    assert!(
        cuda.contains("hf_mbarrier_init(&qs_empty[hf_s], 8);"),
        "{cuda}"
    );
    let tile_loop = consumer.split("for (index_t tile = 0;").nth(1).unwrap();
    assert_eq!(
        tile_loop.matches("hf_bar_sync<256>();").count(),
        1,
        "one block barrier, at the exit: {cuda}"
    );
    assert_eq!(c.plan.block[1].as_const(), Some(3));
}

#[test]
fn two_buffered_loops_split_the_block_alike_and_share_no_warp() {
    let q = |spec: &str| persistent_attention(&format!("  qs.circular_buffer(2, {spec})\n"));
    let e = err(&q("warp_specialized(TIDy, registers=[24, 240], warp=1)"));
    assert!(
        e.contains("`ks`: producer warp 1 loads `qs` for another buffered loop: give each loop's loads their own warps (warp=...)"),
        "{e}"
    );
    let e = err(&q("warp_specialized(TIDy, registers=[40, 232], warp=2)"));
    assert!(
        e.contains("`ks`: warp specialization splits the block once: this loop asks for registers=[24, 240] and another for [40, 232]; give both the same (or one of them none)"),
        "{e}"
    );
    let e = err(&q("warp_specialized(TIDx, warp=2)"));
    assert!(
        e.contains("`qs`: warp specialization splits the block once: this loop is specialised on TIDx and another on TIDy; specialise both on one thread dim"),
        "{e}"
    );
    // Without registers the pipe takes the kernel's.
    compile(&q("warp_specialized(TIDy, warp=2)"));
}
