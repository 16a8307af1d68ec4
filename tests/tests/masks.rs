//! The masks users write on attention scores (`passes/causal_tiles.rs`): the bottom-right
//! aligned causal mask (`iota(k) <= iota(q) + T - S`) and the causal sliding window
//! (`logical_and(j <= i, i - j < W)`) bound the key loop and mask only the boundary tiles, at
//! ragged sizes too; SDPA is their peer only for the top-left causal mask (the others are
//! compared with the PyTorch twin, which evaluates the mask as written); a mask the band does
//! not describe is left to mask every tile. Causal kernels take their longest query tiles first
//! (`passes/longest_first.rs`).

use hopfuse::backend::torch::{emit_sdpa, SdpaBackend};
use hopfuse_tests::{compile, example};

fn fusion(src: &str) -> hopfuse::fusion::Fusion {
    let program = hopfuse::frontend::parse(src).unwrap();
    hopfuse::fusion::build(&program.fusion).unwrap()
}

fn ran(c: &hopfuse::Compilation) -> Vec<&str> {
    c.passes.iter().map(|p| p.name).collect()
}

fn sdpa_call(src: &str) -> Option<String> {
    emit_sdpa(&fusion(src), SdpaBackend::Default).map(|t| t.source)
}

#[test]
fn the_bottom_right_mask_bounds_the_key_loop_by_its_offset() {
    let src = example("attention/online_wgmma_causal_bottom_right.hf");
    let c = compile(&src);
    assert!(ran(&c).contains(&"mask_bounds") && ran(&c).contains(&"mask_tiles"));
    // Query tile s2_o sees keys through 64 s2_o + 63 + T - S: at least one tile (a row with
    // no key, S > T, ends as 0 / 0 as the reference's).
    assert!(
        c.cuda.contains("t_o < hf_min<index_t>(hf_ceil_div<index_t>(T, 64), 0 - hf_min<index_t>(-1, 0 - hf_ceil_div<index_t>(64 * (s2_o + 1) + T - S, 64)))"),
        "{}",
        c.cuda
    );
    // The tiles before the shifted diagonal run the scores unmasked.
    assert!(c.cuda.contains("if (t_o < (64 * s2_o + T - S + 1) / 64) {"));
    // SDPA's is_causal is top-left aligned: no SDPA peer for this mask.
    assert_eq!(sdpa_call(&src), None);
    let top_left = sdpa_call(&example("attention/online_wgmma_causal.hf")).unwrap();
    assert!(top_left.contains("is_causal=True"));
}

#[test]
fn the_sliding_window_masks_only_the_tiles_on_its_two_edges() {
    let src = example("attention/online_wgmma_sliding_window.hf");
    let c = compile(&src);
    assert!(ran(&c).contains(&"mask_bounds") && ran(&c).contains(&"mask_tiles"));
    // The loop starts at the tile holding key 64 s2_o - 1023 (the window's lower edge for the
    // tile's first query) and stops at the diagonal (the causal side); at least one tile. It
    // counts its iterations in t_o_n (the mbarrier's phase) and names the tile t_o.
    let first = "(0 - hf_min<index_t>(0, 0 - (64 * s2_o - 1023) / 64))";
    assert!(
        c.cuda.contains(&format!("for (index_t t_o_n = 0; t_o_n < 0 - hf_min<index_t>(-1, 0 - (hf_min<index_t>(hf_ceil_div<index_t>(T, 64), s2_o + 1) - {first})); ++t_o_n) {{\n      const index_t t_o = t_o_n + {first};\n")),
        "{}",
        c.cuda
    );
    assert!(c
        .cuda
        .contains("hf_mbarrier_wait(&t_o_full[0], (unsigned)(t_o_n % 2));"));
    assert!(c
        .cuda
        .contains("hf_tma_load_2d(&ks[0], &ks_map, (int)(0), (int)(t_o * 64), &t_o_full[0]);"));
    // Unmasked: the tiles below the diagonal whose keys are all within 1023 of every query
    // of the tile (from tile s2_o - 15 on).
    assert!(
        c.cuda
            .contains("if (t_o < s2_o && hf_ceil_div<index_t>(64 * s2_o - 960, 64) - 1 < t_o) {"),
        "{}",
        c.cuda
    );
    assert_eq!(sdpa_call(&src), None);
}

#[test]
fn the_masked_examples_compile_at_ragged_sizes() {
    for path in [
        "attention/online_wgmma_causal_bottom_right.hf",
        "attention/online_wgmma_sliding_window.hf",
    ] {
        let src = example(path);
        for sizes in [[("S", 1000), ("T", 1037)], [("S", 1037), ("T", 1000)]] {
            let options = hopfuse::CompileOptions {
                aligned_for: Some(sizes.iter().map(|(k, v)| (k.to_string(), *v)).collect()),
                ..Default::default()
            };
            let c = hopfuse::compile(&src, &options)
                .unwrap_or_else(|e| panic!("{}", e.render(&src, path)));
            assert!(ran(&c).contains(&"mask_tiles"), "{path}");
        }
    }
}

#[test]
fn masks_outside_the_band_are_listed_instead() {
    let base = example("attention/online_wgmma_causal.hf");
    let causal = "keep = iota(s, axis=1) <= iota(s, axis=0)";
    assert!(base.contains(causal));
    for other in [
        // Not a band on j - i.
        "keep = iota(s, axis=1) <= iota(s, axis=0) + iota(s, axis=0)",
        // A lower side alone: no bound on the loop.
        "keep = iota(s, axis=0) - iota(s, axis=1) < 1024",
        // Two upper sides.
        "keep = logical_and(iota(s, axis=1) <= iota(s, axis=0), iota(s, axis=1) < iota(s, axis=0) + 5)",
    ] {
        let c = compile(&base.replace(causal, other));
        assert!(!ran(&c).contains(&"mask_bounds"), "{other}");
        // Pass mask_list bounds them per pair of tiles and lists the tiles they may keep.
        assert!(ran(&c).contains(&"mask_list"), "{other}");
        assert!(c.cuda.contains("hf_visit_mask_tiles<"), "{other}");
        assert_eq!(sdpa_call(&base.replace(causal, other)), None, "{other}");
    }
    // A constant shift is a band too.
    let shifted = compile(&base.replace(causal, "keep = iota(s, axis=1) <= iota(s, axis=0) + 64"));
    assert!(shifted
        .cuda
        .contains("0 - hf_min<index_t>(-1, 0 - hf_ceil_div<index_t>(64 * (s2_o + 1) + 64, 64))"));
}

#[test]
fn a_circular_buffer_leaves_the_window_to_the_list() {
    // The prologue of a circular buffer loads the first tiles outside the loop body, so the
    // loop cannot start at the window: pass mask_list lists the window's tiles instead (those
    // wholly inside it first), and the loops run over the list.
    let src = example("attention/online_wgmma_sliding_window.hf").replace(
        "  inline_most()\n",
        "  ks.circular_buffer(2)\n  vs.circular_buffer(2)\n  inline_most()\n",
    );
    let c = compile(&src);
    assert!(!ran(&c).contains(&"mask_bounds"));
    assert!(ran(&c).contains(&"mask_list"));
    assert!(ran(&c).contains(&"mask_tiles"));
    assert!(!c.cuda.contains("t_o_n"), "{}", c.cuda);
    assert!(
        c.cuda.contains("hf_visit_mask_tiles<64, 64, 1024>("),
        "{}",
        c.cuda
    );
    assert!(c.cuda.contains("hf_visited_n"), "{}", c.cuda);
    assert!(c.cuda.contains("hf_visited_kept"));
    // Without the circular buffer the loop starts at the window (pass mask_bounds).
    let plain = compile(&example("attention/online_wgmma_sliding_window.hf"));
    assert!(ran(&plain).contains(&"mask_bounds"));
    assert!(!ran(&plain).contains(&"mask_list"));
}

/// The block-bound query-tile binding and the query tile each loop over it takes, as the CUDA
/// writes them.
fn longest_first_lines(extent: &str, indent: &str) -> String {
    format!(
        "{{  // s2_o_block = blockIdx.x\n{indent}const index_t s2_o = {extent} - 1 - s2_o_block;\n"
    )
}

#[test]
fn causal_kernels_take_the_longest_query_tile_first() {
    // FlashAttention-3's ping-pong kernel, by hand and from the automatic scheduler: block x
    // takes query tile ceilDiv(S, 128) - 1 - x, in the producer's two warps and the consumers.
    for path in [
        "attention/online_wgmma_overlap_pingpong_causal.hf",
        "auto/attention_causal.hf",
    ] {
        let c = compile(&example(path));
        assert!(ran(&c).contains(&"longest_first"), "{path}");
        assert!(c
            .cuda
            .contains("  const index_t s2_o_block = blockIdx.x;\n"));
        assert!(
            !c.cuda.contains("const index_t s2_o = blockIdx.x;"),
            "{path}"
        );
        let reversed = "const index_t s2_o = hf_ceil_div<index_t>(S, 128) - 1 - s2_o_block;";
        assert_eq!(c.cuda.matches(reversed).count(), 3, "{path}: {}", c.cuda);
        // The key loop's causal bound and the stores read the query tile, not the block.
        assert!(c
            .cuda
            .contains("t_o < hf_min<index_t>(hf_ceil_div<index_t>(T, 128), s2_o + 1)"));
        assert!(
            c.cuda.contains("[(b * S + (s2_o * 128 + (s2_io * 64 + "),
            "{path}"
        );
        assert!(!c.cuda.contains("s2_o_block * 128"), "{path}");
    }
    // The CUDA-core kernel too, its whole scope under the reversed tile.
    let c = compile(&example("attention/online_causal.hf"));
    assert!(c
        .cuda
        .contains(&longest_first_lines("hf_ceil_div<index_t>(S, 64)", "    ")));
    // Without a mask the blocks keep their order.
    for path in [
        "attention/online_wgmma_overlap_pingpong.hf",
        "auto/attention.hf",
    ] {
        let c = compile(&example(path));
        assert!(!ran(&c).contains(&"longest_first"), "{path}");
        assert!(
            c.cuda.contains("const index_t s2_o = blockIdx.x;"),
            "{path}"
        );
    }
}

#[test]
fn longest_first_at_a_ragged_size_keeps_every_query_tile_once() {
    // S = 1037: 9 query tiles of 128, the last one of 13 rows. Specialised, block x takes tile
    // 8 - x: block 0 the partial tile, whose rows past S keep their bound on the query index.
    let options = hopfuse::CompileOptions {
        aligned_for: Some(
            [("B", 3), ("S", 1037), ("T", 1037)]
                .map(|(k, v)| (k.to_string(), v))
                .into(),
        ),
        specialize: true,
        ..hopfuse::CompileOptions::default()
    };
    let src = example("attention/online_wgmma_overlap_pingpong_causal.hf");
    let c = hopfuse::compile(&src, &options).unwrap();
    assert_eq!(c.plan.grid[0], hopfuse::plan::SizeExpr::Const(9));
    assert_eq!(
        c.cuda
            .matches("const index_t s2_o = 8 - s2_o_block;")
            .count(),
        3,
        "{}",
        c.cuda
    );
    assert!(c.cuda.contains("(s2_io * 64 + (16 * (((index_t)threadIdx.x) / 32) + ((index_t)threadIdx.x) % 32 / 4 + 8 * (2 * r10_pair / 2 % 2))) < 1037"));
}

#[test]
fn a_query_loop_not_bound_to_blocks_keeps_its_order() {
    // The query tiles in a serial loop of one block: bounded and split as before, no block
    // index to reverse.
    let src = example("attention/online_causal.hf").replace("  o.parallelize(0, BIDx)\n", "");
    let c = compile(&src);
    assert!(ran(&c).contains(&"mask_tiles"));
    assert!(!c.cuda.contains("blockIdx.x"), "{}", c.cuda);
    assert!(!c.cuda.contains("s2_o_block"), "{}", c.cuda);
    assert!(
        c.cuda
            .contains("for (index_t s2_o = 0; s2_o < hf_ceil_div<index_t>(S, 64); ++s2_o) {"),
        "{}",
        c.cuda
    );
}

#[test]
fn the_overlapped_loop_runs_the_kept_tiles_without_the_mask() {
    // FlashAttention-3's two key loops: the tiles before the diagonal in a loop with no mask
    // code, then the diagonal tiles (one of 128 keys per 128-query tile; two of 64 in the
    // one-group kernel) in a loop that runs it, naming its iteration t_o_pv as before.
    for (path, kept) in [
        (
            "attention/online_wgmma_overlap_pingpong_causal.hf",
            "s2_o - 1",
        ),
        ("auto/attention_causal.hf", "s2_o - 1"),
        ("attention/online_wgmma_overlap_causal.hf", "2 * s2_o - 1"),
    ] {
        let c = compile(&example(path));
        let code = hopfuse_tests::consumer_code(&c.cuda);
        let kept_loop = hopfuse_tests::position(
            code,
            "for (index_t t_o_pv = 0; t_o_pv < 0 - hf_min<index_t>(0, 0 - hf_min<index_t>(",
        );
        let diagonal_loop = hopfuse_tests::position(code, "for (index_t t_o_pv_diag = 0; ");
        let last = hopfuse_tests::position(code, "for (index_t t_o_last = 0; ");
        assert!(kept_loop < diagonal_loop && diagonal_loop < last, "{path}");
        assert!(
            code[kept_loop..diagonal_loop].contains(&format!(", {kept})); ++t_o_pv) {{")),
            "{path}"
        );
        assert!(
            !code[kept_loop..diagonal_loop].contains("keep_iota"),
            "{path}"
        );
        assert!(
            code[kept_loop..diagonal_loop].contains("sm[r2] = s_sum_acc[r2];"),
            "{path}"
        );
        assert!(
            code[diagonal_loop..last].contains(
                "const index_t t_o_pv = t_o_pv_diag + (0 - hf_min<index_t>(0, 0 - hf_min<index_t>("
            ),
            "{path}"
        );
        assert!(
            code[diagonal_loop..last].contains("keep[0] = keep_iota[0] <= keep_iota2[0];"),
            "{path}"
        );
        // The product stays in flight over the softmax in both loops.
        for part in [&code[kept_loop..diagonal_loop], &code[diagonal_loop..last]] {
            assert_eq!(part.matches("hf_wgmma_wait<1>();").count(), 1, "{path}");
            assert!(!part.contains("if (t_o <"), "{path}");
        }
    }
}
