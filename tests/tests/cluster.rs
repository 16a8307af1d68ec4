//! Thread-block clusters and TMA multicast (`cluster(BIDy, 2)`): what the lowered kernel and the
//! launch plan hold, and the errors for schedules that cannot be clustered.

use hopfuse::plan::Constraint;

use hopfuse_tests::{compile, error, example};

/// Step 2 (a non-persistent pipelined product: grid ceil(M/64) x ceil(N/128)) with `edit`
/// applied to its schedule text.
fn step2(edit: impl Fn(String) -> String) -> String {
    edit(example("matmul/step2_pipelined.hf"))
}

#[test]
fn the_shared_operand_is_multicast_in_slices_and_released_by_both_ctas() {
    let c = compile(&example("matmul/step12_cluster_multicast.hf"));
    let cuda = &c.cuda;
    assert!(
        cuda.contains("__global__ void __cluster_dims__(1, 2, 1) __launch_bounds__(384, 1)"),
        "{cuda}"
    );
    assert_eq!(c.plan.cluster, Some([1, 2, 1]));
    // b_s (N x K tile, the same for both CTAs of a pair along BIDy) is two 128-row slices;
    // a_s (depends on BIDy) stays one 128-row box per CTA.
    let boxes: Vec<(&str, &[i64])> = c
        .plan
        .tensor_maps
        .iter()
        .map(|m| (m.param.as_str(), m.box_dims.as_slice()))
        .collect();
    assert!(boxes.contains(&("b_s_map", &[64, 128][..])), "{boxes:?}");
    assert!(boxes.contains(&("a_s_map", &[64, 128][..])), "{boxes:?}");
    let load = cuda
        .lines()
        .find(|l| l.contains("hf_tma_load_2d_multicast(&b_s["))
        .expect("the multicast load");
    assert!(load.contains("* 16384 + hf_cta_rank * 8192]"), "{load}");
    assert!(load.contains("* 256 + hf_cta_rank * 128)"), "{load}");
    assert!(load.ends_with("(unsigned short)0x3);"), "{load}");
    assert!(!cuda.contains("hf_tma_load_2d_multicast(&a_s["), "{cuda}");
    // Each CTA still expects the whole stage: its A box, its B slice and its peer's.
    assert!(cuda.contains("], 49152u);"), "{cuda}");
    // 8 consumer warps in each of 2 CTAs release every slot.
    assert!(
        cuda.contains("hf_mbarrier_init(&a_s_b_s_empty[hf_s], 16);"),
        "{cuda}"
    );
    assert!(
        cuda.contains("hf_mbarrier_arrive_cluster_per_warp(&a_s_b_s_empty["),
        "{cuda}"
    );
    // The cluster meets after the init and before the barriers are invalidated at exit.
    let body = &cuda[cuda.find("matmul_tc12_kernel(").unwrap()..];
    let syncs: Vec<usize> = body
        .match_indices("hf_cluster_sync();")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(syncs.len(), 2, "{body}");
    let init = body.find("hf_fence_mbarrier_init();").unwrap();
    let inval = body.find("hf_mbarrier_inval(").unwrap();
    assert!(init < syncs[0] && syncs[1] < inval, "{body}");
    assert!(!body.contains("__syncthreads();"), "{body}");
}

#[test]
fn a_kernel_without_cluster_has_no_cluster_code() {
    let c = compile(&example("matmul/step9_tma_store_epilogue.hf"));
    assert_eq!(c.plan.cluster, None);
    for word in ["__cluster_dims__", "hf_cluster", "multicast", "hf_cta_rank"] {
        assert!(!c.cuda.contains(word), "{word}");
    }
}

#[test]
fn a_grid_axis_of_symbolic_extent_becomes_a_launch_constraint() {
    let src = step2(|s| {
        s.replace("circular_buffer(4)", "circular_buffer(4, war=mbarrier)")
            .replace("  inline_most()", "  cluster(BIDy, 2)\n  inline_most()")
    });
    let c = compile(&src);
    assert_eq!(c.plan.cluster, Some([1, 2, 1]));
    assert!(
        c.plan.constraints.iter().any(|k| matches!(
            k,
            Constraint::Divisible { divisor: 2, reason, .. } if reason.contains("cluster(BIDy, 2)")
        )),
        "{:?}",
        c.plan.constraints
    );
    // B's 128 x 64 box is sliced; the war=mbarrier release is cluster-wide (4 warps x 2 CTAs).
    assert!(
        c.cuda.contains("hf_tma_load_2d_multicast(&b_s["),
        "{}",
        c.cuda
    );
    assert!(c.cuda.contains("_empty[hf_s], 8);"), "{}", c.cuda);
    let sizes = [("M", 128), ("N", 256), ("K", 64)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    assert!(c.plan.concretize(&sizes).is_ok());
    let odd = [("M", 192), ("N", 256), ("K", 64)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let e = c.plan.concretize(&odd).expect_err("3 CTAs along y");
    assert!(e.to_string().contains("cluster"), "{e}");
}

#[test]
fn schedules_that_cannot_be_clustered_are_errors_naming_the_rule() {
    let with = |line: &str| {
        example("matmul/step12_cluster_multicast.hf").replace("  cluster(BIDy, 2)", line)
    };
    let cases: [(String, &str); 6] = [
        (with("  cluster(TIDy, 2)"), "takes a grid axis (BIDx, BIDy or BIDz)"),
        (with("  cluster(BIDy, 9)"), "a cluster has 2 to 8 CTAs"),
        (
            with("  cluster(BIDy, 2)\n  cluster(BIDx, 2)"),
            "clusters along one grid axis only",
        ),
        (
            with("  cluster(BIDz, 2)"),
            "no axis is parallelized on BIDz",
        ),
        (
            with("  cluster(BIDx, 3)"),
            "the grid has 8 CTAs along BIDx, not a multiple of the cluster's 3",
        ),
        (
            step2(|s| s.replace("  inline_most()", "  cluster(BIDy, 2)\n  inline_most()")),
            "`b_s` is loaded alike by the 2 CTAs of each cluster (cluster(BIDy, 2)), so it is multicast: a peer then refills this CTA's slots, so its pipeline needs empty mbarriers",
        ),
    ];
    for (src, want) in &cases {
        let e = error(src);
        assert!(e.contains(want), "expected `{want}` in:\n{e}");
        assert!(e.contains("t.hf:"), "no location in:\n{e}");
    }
}

#[test]
fn a_slice_that_breaks_the_swizzle_repeat_is_an_error() {
    // Four CTAs along BIDx (N tiles) share A: a 16-row A box in 4 slices of 4 rows (512 bytes)
    // would start slices inside the 128-byte swizzle's 1024-byte repeat.
    let src = step2(|s| {
        s.replace("circular_buffer(4)", "circular_buffer(4, war=mbarrier)")
            .replace("s.split(0, 64)", "s.split(0, 16)")
            .replace("  inline_most()", "  cluster(BIDx, 4)\n  inline_most()")
    });
    let e = error(&src);
    assert!(
        e.contains("`a_s` is loaded alike by the 4 CTAs of each cluster")
            && e.contains("slices of whole rows, each a multiple of 1024 bytes"),
        "{e}"
    );
}
