//! The diagram and table text of real kernels (the examples).

use super::*;

fn view(name: &str) -> PipelineView {
    crate::model::compile(
        crate::examples::source(&crate::examples::find(name).unwrap()),
        &Default::default(),
    )
    .unwrap()
    .pipeline
}

#[test]
fn exp_2d_has_four_slots_and_its_roles() {
    let v = view("tma/exp_2d");
    let svg = svg(&v, 0);
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    assert_eq!(svg.matches(r#"class="pl-slot""#).count(), 4, "{svg}");
    for k in 0..4 {
        assert!(svg.contains(&format!(r#"data-slot="{k}""#)));
        assert!(svg.contains(&format!(">slot {k}<")));
        assert!(svg.contains(&format!(">x_s_full[{k}]<")));
        assert!(svg.contains(&format!(">wait x_s_full[{k}]<")));
        assert!(svg.contains(&format!(">read x_s[{k}]<")));
    }
    assert!(svg.contains(">load x → x_s[3]<"));
    assert!(svg.contains(">TMA 2-D · 2.0 KiB<"));
    assert_eq!(svg.matches(">expect_tx 2048 B<").count(), 4);
    // Role captions; the condition's `&&` is escaped.
    assert!(svg.contains(
        ">producer</tspan><tspan dx=\"8\" class=\"pl-small\">1 thread: warp == 0 &amp;&amp; elect_one()<"
    ), "{svg}");
    assert!(svg.contains(
        ">consumers</tspan><tspan dx=\"8\" class=\"pl-small\">all 512 threads of the block (64 × 8) · wait parity n_o / 4 % 2<"
    ), "{svg}");
    assert!(svg.contains(">x_s: 4 × 2.0 KiB · full barriers x_s_full<"));
    assert!(!svg.contains("&&"));
    // Slots 0..3 are filled first by the prologue (3 ahead), slot 3 by the main loop.
    assert_eq!(svg.matches(">first: prologue<").count(), 3);
    assert_eq!(svg.matches(">first: main loop<").count(), 1);
    assert!(svg.contains(">__syncthreads() after the reads: refill with n_o + 4<"));
    assert_eq!(svg.matches("pl-release").count(), 4);
    assert_eq!(
        summary(&v.pipelines[0]),
        "x → x_s: 4 stages of 2.0 KiB, 3 loaded ahead, loop n_o: prologue (for n_o in 3) → \
         main (for n_o in ceilDiv(N, 64) - 3) → epilogue (for n_o_epi in 3)"
    );
}

#[test]
fn a_bulk_copy_and_three_slots() {
    let v = view("tma/copy_1d_bulk");
    let svg = svg(&v, 0);
    assert_eq!(svg.matches(r#"class="pl-slot""#).count(), 3);
    assert!(svg.contains(">bulk · 1.0 KiB<"));
    assert!(svg.contains(">n_oi % 3 == 2<"));
    assert!(release_text(&v.pipelines[0]).starts_with("__syncthreads()"));
    let rows = details(&v, &v.pipelines[0]);
    let kinds: Vec<&str> = rows.iter().map(|r| r.0).collect();
    assert_eq!(kinds, ["role", "role", "load", "wait", "release"]);
    assert_eq!(rows[0].1, "producer: 1 thread: warp == 0 && elect_one()");
    assert_eq!(rows[1].1, "consumers: all 256 threads of the block");
    assert_eq!(
        rows[2].1,
        "producer issues x → x_s[(n_oi + 2) % 3] (bulk copy, 1024 B, expect_tx 1024 B) on \
         x_s_full[(n_oi + 2) % 3] if (n_oo * 16 + (n_oi + 2)) * 256 < N; in prologue, main"
    );
    assert_eq!(
        rows[3].1,
        "consumers wait on x_s_full[n_oi % 3] for parity n_oi / 3 % 2; in main, epilogue"
    );
}

#[test]
fn the_pane_holds_a_section_per_pipeline_or_says_there_is_none() {
    let v = view("tma/exp_2d");
    let page = html(&v);
    assert_eq!(page.matches("<section").count(), 1);
    assert!(page.contains(&svg(&v, 0)));
    assert!(page.contains("<th>load</th>") && page.contains("<th>release</th>"));
    // Conditions are escaped in the table too.
    assert!(page.contains("1 thread: warp == 0 &amp;&amp; elect_one()"));
    let none = html(&view("basics/softmax"));
    assert_eq!(
        none,
        r#"<p class="note" id="no-pipeline">no pipeline: this kernel has no TMA / circular-buffered loads</p>"#
    );
}

#[test]
fn text_is_escaped() {
    assert_eq!(
        esc("a < b && \"c\" > d"),
        "a &lt; b &amp;&amp; &quot;c&quot; &gt; d"
    );
}

#[test]
fn two_consumer_warp_groups_each_issue_wgmma_into_their_accumulator() {
    let v = view("matmul/step4_two_consumers");
    let svg = svg(&v, 0);
    // A row per warp group, each under its caption: its thread index, then the role's.
    for wg in 0..2 {
        assert!(svg.contains(&format!(
            ">consumer warp group {wg}</tspan><tspan dx=\"8\" class=\"pl-small\">threadIdx.y == {wg}, 128 of 256 threads: !(7 &lt; warp % 12) · 232 registers · wait parity k_o / 4 % 2<"
        )), "{svg}");
    }
    // Per slot and warp group: the wait, one commit group of four k16 steps on the slot's
    // operands (the warp group's 64 rows of A), its wait and the release.
    assert_eq!(svg.matches(">4 × wgmma m64n256k16.bf16<").count(), 8);
    assert_eq!(svg.matches(">commit · wait_group 1<").count(), 8);
    assert_eq!(svg.matches(r#"class="pl-box pl-wait pl-mma""#).count(), 8);
    for k in 0..4 {
        assert_eq!(svg.matches(&format!(">wait a_s_b_s_full[{k}]<")).count(), 2);
        assert!(svg.contains(&format!(">A a_s[{k}] rows 0–63 · K-major<")));
        assert!(svg.contains(&format!(">A a_s[{k}] rows 64–127 · K-major<")));
        assert_eq!(svg.matches(&format!(">B b_s[{k}] · K-major<")).count(), 2);
        assert_eq!(
            svg.matches(&format!(">arrive a_s_b_s_empty[{k}]<")).count(),
            2
        );
    }
    // The full barrier reaches the second warp group around each column's right side.
    let routes = svg
        .split("<path ")
        .skip(1)
        .filter(|p| {
            p.split('>')
                .next()
                .unwrap()
                .contains(r#"class="pl-arrow" marker"#)
        })
        .count();
    assert_eq!(routes, 4, "{svg}");
    // The accumulators: a box per warp group, fed by the slots.
    assert_eq!(svg.matches(r#"class="pl-acc""#).count(), 2);
    assert_eq!(svg.matches(">s_acc[0..127]<").count(), 2);
    assert_eq!(svg.matches(">128 × f32 per thread<").count(), 2);
    assert_eq!(svg.matches(">64 × 256 tile<").count(), 2);
    assert_eq!(svg.matches(">(+)=<").count(), 2);
    assert!(svg.contains(">accumulator<"));
    assert!(svg.contains(">after the loop, for r_pair in 64: the 128 registers of s_acc → c<"));
    // One arrival announces both boxes of a stage: 48 KiB, not twice that.
    assert_eq!(svg.matches(">expect_tx 49152 B<").count(), 4, "{svg}");
    assert!(!svg.contains("&&&"));
}

#[test]
fn the_table_says_what_the_tensor_cores_do() {
    let v = view("matmul/step4_two_consumers");
    let rows = details(&v, &v.pipelines[0]);
    let kinds: Vec<&str> = rows.iter().map(|r| r.0).collect();
    assert_eq!(
        kinds,
        [
            "role",
            "role",
            "load",
            "load",
            "wait",
            "release",
            "wgmma",
            "warp groups",
            "accumulator",
            "epilogue",
            "producer loop",
            "consumer loops"
        ]
    );
    // Not persistent: the consumers walk only the k loop, like the producer.
    assert_eq!(rows[10].1, "k_o in ceilDiv(K, 64)");
    assert_eq!(rows[11].1, "k_o in ceilDiv(K, 64)");
    assert_eq!(
        rows[6].1,
        "consumer warp groups issue 4 × wgmma.m64n256k16.f32.bf16 per k_o iteration after \
         waiting on a_s_b_s_full[k_o % 4]: A = a_s[k_o % 4 * 8192 + (m_io * 64 * 4 + k_io) * \
         16] (from a), K-major, swizzle 128 B; B = b_s[k_o % 4 * 16384 + k_io * 16] (from b), \
         K-major, swizzle 128 B; wgmma.fence, commit_group, wait_group 1; then arrive on \
         a_s_b_s_empty[(k_o - 1) % 4] (lane 0 of each warp); in consumer loop"
    );
    assert_eq!(
        rows[7].1,
        "2 × 128 threads; m_io = threadIdx.y (2): each warp group its own tile of A"
    );
    assert_eq!(
        rows[8].1,
        "s_acc: 128 f32 registers per thread (m64 × n256 / 128 threads), a 64 × 256 tile per \
         warp group; scale-d from s_acc_started[0] (the first wgmma overwrites: no zero fill)"
    );
    assert_eq!(
        rows[9].1,
        "for r_pair in 64: the 128 registers of s_acc → c"
    );
}

#[test]
fn one_warp_group_has_one_row_and_mn_major_operands_say_so() {
    let v = view("matmul/step1_one_warp_group");
    let svg = svg(&v, 0);
    assert!(svg.contains(
        ">consumer warp group</tspan><tspan dx=\"8\" class=\"pl-small\">all 128 threads of the block · wait parity k_o % 2<"
    ), "{svg}");
    assert_eq!(svg.matches(">4 × wgmma m64n128k16.bf16<").count(), 1);
    assert!(svg.contains(">A a_s[0] · K-major<") && svg.contains(">B b_s[0] · K-major<"));
    assert!(
        !svg.contains(">arrive "),
        "no empty barrier: __syncthreads() releases"
    );
    assert_eq!(svg.matches(r#"class="pl-acc""#).count(), 1);
    assert!(svg.contains(">s_acc[0..63]<") && svg.contains(">scale-d: s_acc_started[0]<"));
    // Step 5: two consumer warp groups, each A its own atom; B four atoms side by side.
    let mn = svg_of(&view("matmul/step5_mn_major"));
    assert!(
        mn.contains(">A a_s[0] rows 64–127 · MN-major<") && mn.contains(">B b_s[3] · MN-major<"),
        "{mn}"
    );
    assert!(mn.contains(">128 × f32 per thread<"));
    assert!(mn.contains(">TMA 2-D · 2 × 8.0 KiB<") && mn.contains(">TMA 2-D · 4 × 8.0 KiB<"));
}

/// The seed kernel: the store column after the accumulators, the store path and its
/// deferred wait, and the producer's flat loop against the consumers' nested loops.
#[test]
fn the_staged_epilogue_and_the_loops_are_drawn() {
    for name in [
        "matmul/step9_tma_store_epilogue",
        "matmul/step10_bias_gelu_tma_store",
    ] {
        let v = view(name);
        let svg = svg(&v, 0);
        assert_eq!(svg.matches(r#"class="pl-staged""#).count(), 1, "{svg}");
        for line in [
            ">store<",
            ">c_s · shared<",
            ">16 × stmatrix.x4 / warp<",
            ">4 × TMA store → c<",
            ">read-wait: next tile<",
        ] {
            assert!(svg.contains(line), "{name}: {line}");
        }
        // One stmatrix arrow per warp group, from its accumulator.
        assert_eq!(svg.matches(">st<").count(), 2);
        assert!(svg.contains(
            ">one loop over (tile, k): m_oi_n_oi_k_o in ceilDiv(ceilDiv(M, 128), 16) * \
             (ceilDiv(ceilDiv(N, 256), 8) * ceilDiv(K, 64))<"
        ));
        assert!(svg.contains(
            ">m_oi in ceilDiv(ceilDiv(M, 128), 16) → n_oi in ceilDiv(ceilDiv(N, 256), 8) → \
             k_o in ceilDiv(K, 64), then the epilogue per n_oi<"
        ));
        let rows = details(&v, &v.pipelines[0]);
        let row = |what: &str| &rows.iter().find(|r| r.0 == what).unwrap().1;
        assert_eq!(
            row("store"),
            "s_acc → 16 × stmatrix.x4 per warp → c_s (64.0 KiB) → fence.proxy.async → \
             barrier → warp == 0 && elect_one(): 4 × TMA store of 16.0 KiB through c_map → \
             c, 4 × commit per n_oi"
        );
        assert_eq!(
            row("store wait"),
            "wait_group.read 0 before c_s is written again (the stores overlap the next \
             tile's main loop); wait_group.read 0 at exit"
        );
        // The footers say the same, escaped.
        assert!(svg.contains(">s_acc → 16 × stmatrix.x4 per warp → c_s (64.0 KiB) → fence.proxy.async → barrier → warp == 0 &amp;&amp; elect_one(): 4 × TMA store"));
    }
    // Without a staged epilogue: no store column, no store rows.
    let page = html(&view("matmul/step8_wide_k_tile"));
    assert!(!page.contains("pl-staged"), "{page}");
    assert!(!page.contains("stmatrix"), "{page}");
    assert!(!page.contains("<th>store</th>") && page.contains("<th>consumer loops</th>"));
}

fn svg_of(v: &PipelineView) -> String {
    svg(v, 0)
}

/// Every matmul example draws its wgmma and accumulators; kernels without tensor cores
/// draw neither.
#[test]
fn every_matmul_example_draws_its_tensor_cores() {
    let mut n = 0;
    for e in crate::examples::ALL.iter().filter(|e| e.group == "matmul") {
        let v = view(&crate::examples::key(e));
        let page = html(&v);
        let groups = v.roles[v.mmas[0].role].warp_groups.unwrap();
        assert_eq!(
            page.matches(r#"class="pl-acc""#).count() as i64,
            groups,
            "{}",
            e.name
        );
        assert!(page.contains("<th>wgmma</th>") && page.contains("<th>accumulator</th>"));
        let input = &v.mmas[0].input;
        assert!(page.contains(&format!(" × wgmma {}.{input}<", v.mmas[0].shape)));
        // Ping-pong is said where the groups take turns, and only there.
        assert_eq!(
            page.contains("ping-pong: the 2 groups take turns"),
            e.name == "step14_ping_pong",
            "{}",
            e.name
        );
        n += 1;
    }
    assert!(n >= 7);
    let plain = html(&view("tma/exp_2d"));
    assert!(!plain.contains("wgmma") && !plain.contains("pl-acc"));
}

#[test]
fn a_cluster_kernel_shows_the_cluster_and_its_multicast_slice() {
    let v = view("matmul/step12_cluster_multicast");
    let svg = svg(&v, 0);
    assert!(
        svg.contains(">TMA 2-D · 16.0 KiB slice, multicast to 2 CTAs<"),
        "{svg}"
    );
    assert!(svg.contains(">TMA 2-D · 16.0 KiB<"), "{svg}");
    let rows = details(&v, &v.pipelines[0]);
    assert_eq!(rows[0].0, "cluster");
    assert!(rows[0].1.starts_with("1 × 2 × 1 CTAs"), "{rows:?}");
    assert!(
        rows.iter().any(|(what, t)| *what == "load"
            && t.contains("multicast: its slice to the same slot of all 2 CTAs")),
        "{rows:?}"
    );
    assert!(
        summary(&v.pipelines[0]).contains("3 stages of 48.0 KiB"),
        "{}",
        summary(&v.pipelines[0])
    );
}

#[test]
fn a_persistent_kernel_shows_its_tile_order() {
    let v = view("matmul/step15_persistent_raster");
    let rows = details(&v, &v.pipelines[0]);
    assert_eq!(rows[0].0, "tile order", "{rows:?}");
    let t = &rows[0].1;
    assert!(
        t.contains("CTA b of gridDim.x takes tiles b, b + gridDim.x, … of the ceilDiv(M, 128) * ceilDiv(N, 256) (loop tile, producer and consumers alike)"),
        "{t}"
    );
    assert!(
        t.contains("groups of 16 along BIDy, stepping along BIDy first → m_o (BIDy), n_o (BIDx)"),
        "{t}"
    );
    assert!(!t.contains("stream-K"), "{t}");
    // With stream_k the row says how the tiles left after the whole rounds are split.
    let src =
        crate::examples::source(&crate::examples::find("matmul/step15_persistent_raster").unwrap())
            .replace("persistent(BIDy, 16)", "persistent(BIDy, 16, stream_k)");
    let sk = crate::model::compile(&src, &Default::default())
        .unwrap()
        .pipeline;
    let rows = details(&sk, &sk.pipelines[0]);
    assert!(
        rows[0]
            .1
            .contains("stream-K: whole rounds, then the k steps of the tiles left split evenly"),
        "{rows:?}"
    );
    // A kernel with a fixed grid has no such row.
    let fixed = view("matmul/step9_tma_store_epilogue");
    assert!(details(&fixed, &fixed.pipelines[0])
        .iter()
        .all(|(what, _)| *what != "tile order"));
}

/// The rows of one kind in the tables of every pipeline of `v`, in order.
fn rows_of(v: &PipelineView, kind: &str) -> Vec<String> {
    v.pipelines
        .iter()
        .flat_map(|p| details(v, p))
        .filter(|(k, _)| *k == kind)
        .map(|(_, t)| t)
        .collect()
}

/// FlashAttention-3's kernel: the table says who issues what in which turn and what overlaps
/// what; the diagrams draw the producer's warps, the two consumer warp groups, and say the
/// turns and the overlap under them.
#[test]
fn attention_says_its_turns_and_the_softmax_under_the_products() {
    let v = view("attention/online_wgmma_overlap_pingpong");
    let turns = "turns=products: the 2 consumer groups share every stage of k and v and take \
                 turns issuing S_j and P_{j-1} V_{j-1}, all in one turn (named barriers pass the \
                 turn)";
    let groups = rows_of(&v, "warp groups");
    assert_eq!(groups.len(), 2);
    assert!(groups.iter().all(|g| g.ends_with(turns)), "{groups:?}");
    assert_eq!(
        rows_of(&v, "in flight"),
        [
            "S_j is in flight while the group issues P_{j-1} V_{j-1}; wait_group 1 drains it",
            "each group's softmax of tile j (on s_sum_acc) runs while its P_{j-1} V_{j-1} and \
             the other group's products are in flight; wait_group 0 drains it",
        ]
    );
    // Not the matmul's ping-pong.
    assert!(!html(&v).contains("whole stages"));
    // k's diagram: the producer warp of k, a row per consumer warp group, the turns and S's
    // overlap under it; v's: P V's.
    let k = svg(&v, 0);
    assert!(
        k.contains(">producer 1<") && !k.contains(">producer 2<"),
        "{k}"
    );
    assert_eq!(k.matches(">consumer warp group ").count(), 2, "{k}");
    assert!(k.contains(&esc(turns)), "{k}");
    assert!(k.contains("S_j is in flight while the group issues P_{j-1} V_{j-1}"));
    let pv = svg(&v, 1);
    assert!(pv.contains(">producer 2<"), "{pv}");
    assert!(pv.contains(&esc(
        "each group's softmax of tile j (on s_sum_acc) runs while its P_{j-1} V_{j-1} and the \
         other group's products are in flight"
    )));
}

/// Without the overlap the pane says the softmax waits for S; without turns it says none.
#[test]
fn attention_without_the_overlap_says_the_softmax_waits_for_s() {
    let v = view("attention/online_wgmma");
    assert_eq!(
        rows_of(&v, "in flight")[0],
        "nothing runs while S_j is in flight: wait_group 0 drains it right after its commit, so \
         the softmax waits for it"
    );
    assert!(!html(&v).contains("turns"));
    let v = view("attention/online_wgmma_pingpong");
    assert!(rows_of(&v, "warp groups")[0]
        .ends_with("take turns issuing S_j and P_j V_j, each in a turn of its own (named barriers pass the turn)"));
    assert_eq!(
        rows_of(&v, "in flight")[1],
        "P_j V_j is in flight while the group issues S_{j+1}; wait_group 0 in the next t_o \
         iteration drains it"
    );
}

/// Step 14 keeps its own ping-pong sentence, in the table and under the diagram, and has no
/// in-flight row (one product).
#[test]
fn the_matmul_ping_pong_says_whole_stages() {
    let v = view("matmul/step14_ping_pong");
    let sentence = "ping-pong: the 2 groups take turns, each with whole stages of its own tile, \
                    one's epilogue under the next one's wgmmas";
    assert!(rows_of(&v, "warp groups")[0].ends_with(sentence));
    assert!(svg(&v, 0).contains(&esc(sentence)));
    assert!(rows_of(&v, "in flight").is_empty());
}
