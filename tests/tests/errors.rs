//! Bad programs get a clear error with a location, never a panic.

fn err(src: &str) -> String {
    match hopfuse::compile(src, &Default::default()) {
        Ok(_) => panic!("expected an error for:\n{src}"),
        Err(e) => e.render(src, "t.hf"),
    }
}

const ADD: &str =
    "fusion f {\n  input a: f32[M, N]\n  input b: f32[M, N]\n  c = a + b\n  output c\n}\n";

fn with_schedule(s: &str) -> String {
    format!("{ADD}schedule {{\n{s}\n}}\n")
}

#[test]
fn syntax_error_has_line_column_and_caret() {
    let e = err("fusion f {\n  input a: f32[M, N]\n  c = a *\n  output c\n}\n");
    assert!(
        e.starts_with("t.hf:3:10: error: expected an expression, found end of line"),
        "{e}"
    );
    assert!(e.contains("^"), "{e}");
}

#[test]
fn unknown_dtype_and_names() {
    assert!(err("fusion f {\n  input a: f33[M]\n  output a\n}").contains("unknown dtype `f33`"));
    assert!(
        err("fusion f {\n  input a: f32[M]\n  c = a + q\n  output c\n}")
            .contains("unknown tensor `q`")
    );
}

#[test]
fn rank_mismatch_names_both_operands() {
    let e = err("fusion f {\n  input a: f32[M, N]\n  input b: f32[N]\n  c = a + b\n  output c\n}");
    assert!(
        e.contains("different ranks") && e.contains("`a` (rank 2)") && e.contains("`b` (rank 1)"),
        "{e}"
    );
}

#[test]
fn split_factor_zero() {
    let e = err(&with_schedule("  c.split(0, 0)"));
    assert!(
        e.contains("c.split: split factor must be at least 1, got 0"),
        "{e}"
    );
}

#[test]
fn axis_out_of_range() {
    let e = err(&with_schedule("  c.split(5, 4)"));
    assert!(
        e.contains("axis 5 is out of range: `c` has 2 loop axes"),
        "{e}"
    );
}

#[test]
fn incompatible_extents_on_one_thread_dim() {
    let e = err(&with_schedule(
        "  a_c = cache_after(a)\n  c.split(1, 128)\n  c.parallelize(2, TIDx)\n  a_c.split(1, 64)\n  a_c.parallelize(2, TIDx)\n  a_c.inline_at(0)",
    ));
    assert!(e.contains("TIDx is bound to two different extents"), "{e}");
}

/// Found by the softmax property test: `n` bound to blockIdx.x in `e`'s nest and blockIdx.y in
/// `y`'s (not shared loops) reached the verifier as an unbound variable.
#[test]
fn one_loop_bound_to_two_indices() {
    let e = err("fusion softmax {\n  input x: f32[M, N]\n  m = max(x, axis=1)\n  e = exp(x - broadcast(m, axis=1))\n  s = sum(e, axis=1)\n  y = e / broadcast(s, axis=1)\n  output y\n}\nschedule {\n  x_c = cache_after(x)\n  y_c = cache_before(y)\n  e.split(-2, 1)\n  e.parallelize(2, BIDx)\n  y_c.inline_at(0)\n  y.parallelize(-1, BIDy)\n}\n");
    assert!(
        e.starts_with("t.hf:6:3: error: loop `n` is bound to BIDx in `e` and to BIDy in `y`"),
        "{e}"
    );
}

#[test]
fn shared_memory_over_the_limit() {
    let src = "fusion f {\n  input a: f32[M, 65536]\n  c = exp(a)\n  output c\n}\nschedule {\n  a_s = cache_after(a, memory=shared)\n  c.parallelize(0, BIDx)\n  propagate(c)\n  a_s.inline_at(1)\n}\n";
    let e = err(src);
    assert!(
        e.contains("262144 bytes of shared memory") && e.contains("227 KB"),
        "{e}"
    );
}

#[test]
fn register_tensor_needs_constant_size() {
    let e = err(&with_schedule(
        "  a_c = cache_after(a)\n  c.parallelize(0, BIDx)\n  propagate(c)\n  a_c.inline_at(1)",
    ));
    assert!(
        e.contains("register tensor `a_c` needs N elements per thread"),
        "{e}"
    );
}

#[test]
fn inlining_past_a_reduction_axis() {
    let src = "fusion f {\n  input x: f32[M, N]\n  s = sum(x, axis=1)\n  y = s * 2.0\n  output y\n}\nschedule {\n  s.inline_at(2)\n}\n";
    let e = err(src);
    assert!(
        e.contains("cannot inline past loop 1") && e.contains("reduction axis"),
        "{e}"
    );
}

#[test]
fn a_grid_reduction_that_keeps_an_axis_is_rejected() {
    // A reduction over blocks reduces every axis (a scalar); rows split across blocks are not
    // taken.
    let src = "fusion f {\n  input x: f32[M, N]\n  s = sum(x, axis=1)\n  output s\n}\nschedule {\n  s.parallelize(1, BIDy)\n}\n";
    let e = err(src);
    assert!(
        e.contains("`s` is reduced across blocks")
            && e.contains("a grid reduction reduces every axis"),
        "{e}"
    );
}

#[test]
fn vector_wider_than_16_bytes() {
    let e = err(&with_schedule(
        "  a_c = cache_after(a)\n  c.merge(0)\n  c.split(0, 8)\n  c.parallelize(1, Vectorize)\n  propagate(c)",
    ));
    assert!(e.contains("at most 16 bytes"), "{e}");
}

#[test]
fn unknown_parallel_type_points_at_it() {
    let e = err(&with_schedule("  c.parallelize(0, TIDw)"));
    assert!(
        e.contains("unknown parallel type `TIDw`") && e.contains("t.hf:8:"),
        "{e}"
    );
}

#[test]
fn vectors_check_alignment_at_run_time_unless_specialised() {
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/basics/softmax.hf"
    ))
    .unwrap();
    let general = hopfuse::compile(&src, &Default::default()).unwrap();
    assert!(general.cuda.contains("m2 * N % 4 == 0"), "{}", general.cuda);
    assert!(general
        .plan
        .constraints
        .iter()
        .all(|c| !matches!(c, hopfuse::plan::Constraint::Divisible { .. })));
    let options = hopfuse::CompileOptions {
        assume_aligned_vectors: true,
        ..Default::default()
    };
    let aligned = hopfuse::compile(&src, &options).unwrap();
    assert!(!aligned.cuda.contains("% 4 == 0"), "{}", aligned.cuda);
    let sizes = |n: i64| {
        [("M".to_string(), 8), ("N".to_string(), n)]
            .into_iter()
            .collect()
    };
    assert!(aligned.plan.concretize(&sizes(1028)).is_ok());
    let err = aligned
        .plan
        .concretize(&sizes(1023))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a multiple of 4"), "{err}");
}

const ROW_SUM: &str = "fusion f {\n  input x: f32[M, N]\n  s = sum(x, axis=1)\n  output s\n}\n";

fn row_sum_with(schedule: &str) -> String {
    format!("{ROW_SUM}schedule {{\n  s.split(1, 128)\n{schedule}\n}}\n")
}

#[test]
fn rfactor_rules() {
    let e = err(&row_sum_with("  s.rfactor(0)"));
    assert!(
        e.contains("s.rfactor: axis 0 of `s` is not a reduction axis"),
        "{e}"
    );
    let e = err(&row_sum_with("  s.rfactor(1, 2)"));
    assert!(e.contains("leave at least one for `s` to reduce"), "{e}");
    let e = err(&row_sum_with("  s.rfactor(1)\n  s_rf.set_memory(global)"));
    assert!(
        e.contains("rfactor tensor") && e.contains("not global memory"),
        "{e}"
    );
    let e = err("fusion f {\n  input x: f32[M, N]\n  y = exp(x)\n  output y\n}\nschedule {\n  y.rfactor(1)\n}\n");
    assert!(e.contains("`y` is not a reduction"), "{e}");
}

#[test]
fn rfactor_splits_the_reduction_in_two() {
    let c = hopfuse::compile(
        &row_sum_with("  s.parallelize(0, BIDx)\n  s.parallelize(2, TIDx)\n  s.rfactor(1)"),
        &Default::default(),
    )
    .unwrap();
    // The partial sum of each thread is reduced serially, then across the block.
    assert!(
        c.cuda
            .contains("s_rf_acc[0] = s_rf_acc[0] + x[m * N + (n_o * 128 + n_i)]"),
        "{}",
        c.cuda
    );
    assert!(
        c.cuda.contains("s_acc[0] = s_acc[0] + s_rf[0];"),
        "{}",
        c.cuda
    );
    assert!(
        c.cuda
            .contains("hf_block_reduce<true, false, false>(s_acc[0]"),
        "{}",
        c.cuda
    );
}

// ---- TMA and circular buffering (issue 3) ----

const COPY: &str = "fusion f {\n  input x: f32[N]\n  y = x\n  output y\n}\n";

/// `y = x` over [N]: tiles of `tile`, `serial` tiles per block, the cache loaded by `load`.
fn tma_copy(load: &str, tile: i64, serial: i64, extra: &str) -> String {
    format!(
        "{COPY}schedule {{\n  x_s = cache_after(x, memory=shared, load={load})\n  y.split(0, {tile})\n  y.split(0, {serial})\n  y.parallelize(0, BIDx)\n  y.parallelize(2, TIDx)\n  propagate(y)\n  x_s.parallelize(2, Bulk)\n{extra}\n  inline_most()\n}}\n"
    )
}

#[test]
fn tma_copy_compiles_and_fills_the_plan() {
    let src = tma_copy("tma", 256, 16, "  x_s.circular_buffer(3)");
    let c = hopfuse::compile(&src, &Default::default()).unwrap();
    assert_eq!(c.plan.tensor_maps.len(), 1);
    let m = &c.plan.tensor_maps[0];
    assert_eq!((m.param.as_str(), m.tensor.as_str()), ("x_s_map", "x"));
    assert_eq!(m.box_dims, vec![256]);
    assert!(c
        .cuda
        .contains("const __grid_constant__ hf_tensor_map x_s_map"));
    assert!(c.cuda.contains("hf_tma_load_1d("));
    assert!(c
        .cuda
        .contains("hf_mbarrier_wait(&x_s_full[n_oi % 3], (unsigned)(n_oi / 3 % 2));"));
    assert!(!c.cuda.contains("#include"));
}

#[test]
fn tma_box_dims_are_1_to_256() {
    let e = err(&tma_copy("tma", 512, 4, ""));
    assert!(
        e.contains("`x_s` (tma load of `x`): box dimension 0 (innermost first) is 512 elements; a TMA box has 1 to 256 elements per dimension"),
        "{e}"
    );
}

#[test]
fn tma_inner_box_row_is_a_multiple_of_16_bytes() {
    let e = err(&tma_copy("tma", 2, 4, ""));
    assert!(
        e.contains("`x_s` (tma load of `x`): the inner box row is 8 bytes (2 x 4); TMA needs a multiple of 16 bytes"),
        "{e}"
    );
}

#[test]
fn tma_rows_must_be_multiples_of_16_bytes() {
    let src = "fusion f {\n  input x: f32[M, 6]\n  y = x\n  output y\n}\nschedule {\n  x_s = cache_after(x, memory=shared, load=tma)\n  y.split(0, 4)\n  y.parallelize(0, BIDx)\n  y.parallelize(1, TIDy)\n  y.parallelize(2, TIDx)\n  propagate(y)\n  x_s.parallelize(1, Serial)\n  x_s.parallelize(2, Serial)\n  x_s.parallelize(1, Bulk)\n  x_s.parallelize(2, Bulk)\n  inline_most()\n}\n";
    let e = err(src);
    assert!(
        e.contains("the inner box row is 24 bytes")
            || e.contains("rows of the tensor must be multiples of 16 bytes"),
        "{e}"
    );
}

#[test]
fn tma_symbolic_rows_become_a_plan_constraint() {
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/tma/exp_2d.hf"
    ))
    .unwrap();
    let c = hopfuse::compile(&src, &Default::default()).unwrap();
    let sizes = |m: i64, n: i64| -> std::collections::BTreeMap<String, i64> {
        [("M".to_string(), m), ("N".to_string(), n)].into()
    };
    assert!(c.plan.concretize(&sizes(100, 1000)).is_ok());
    let e = c
        .plan
        .concretize(&sizes(100, 1001))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rows of the tensor must be multiples of 16 bytes"),
        "{e}"
    );
}

#[test]
fn tma_load_needs_shared_memory_and_an_input() {
    let e = err(&format!(
        "{COPY}schedule {{\n  x_s = cache_after(x, load=tma)\n}}\n"
    ));
    assert!(
        e.contains("load=tma copies into shared memory: add memory=shared"),
        "{e}"
    );
    let e = err(&format!("{COPY}schedule {{\n  x_s = cache_after(x, memory=shared, load=tma)\n  x_t = cache_after(x_s, memory=shared, load=tma)\n}}\n"));
    assert!(
        e.contains("load=tma reads a fusion input in global memory, and `x_s` is not one"),
        "{e}"
    );
    let e = err(&format!(
        "{COPY}schedule {{\n  x_s = cache_after(x, memory=shared, load=async)\n}}\n"
    ));
    assert!(
        e.contains("unknown load kind `async` (plain, tma or bulk)"),
        "{e}"
    );
}

#[test]
fn a_swizzled_box_needs_rows_of_the_swizzle_width() {
    // 1-D box of 256 floats: a 1024-byte row cannot take a 128-byte swizzle.
    let e = err(&tma_copy("tma", 256, 16, "").replace("load=tma)", "load=tma, swizzle=128)"));
    assert!(
        e.contains("with 128-byte swizzle the inner box row must be exactly 128 bytes, it is 1024"),
        "{e}"
    );
}

#[test]
fn tma_swizzle_rules() {
    use hopfuse::target::check_tma_box as check_box;
    assert!(check_box("`t`", 4, &[32, 8], 128).is_ok());
    let e = check_box("`t`", 4, &[64, 8], 128).unwrap_err();
    assert!(
        e.contains("with 128-byte swizzle the inner box row must be exactly 128 bytes, it is 256"),
        "{e}"
    );
    let e = check_box("`t`", 2, &[16, 8], 64).unwrap_err();
    assert!(e.contains("exactly 64 bytes, it is 32"), "{e}");
    let e = check_box("`t`", 4, &[8, 8], 48).unwrap_err();
    assert!(
        e.contains("swizzle must be none, 32, 64 or 128 bytes"),
        "{e}"
    );
    let e = check_box("`t`", 4, &[4, 1, 1, 1, 1, 1], 0).unwrap_err();
    assert!(e.contains("rank 1 to 5"), "{e}");
}

#[test]
fn bulk_axis_needs_a_tma_cache() {
    let e = err(&format!(
        "{COPY}schedule {{\n  y.split(0, 256)\n  y.parallelize(1, Bulk)\n}}\n"
    ));
    assert!(
        e.contains(
            "the Bulk parallel type marks the box of a TMA or bulk copy, and `y` is not one"
        ),
        "{e}"
    );
}

#[test]
fn bulk_axes_must_be_split_inner_parts_in_order() {
    let src = tma_copy("tma", 256, 16, "").replace("y.split(0, 16)", "y.split(0, 16, outer)");
    // The outer split makes the serial axis 16 and the Bulk axis still the 256 inner part: fine.
    assert!(hopfuse::compile(&src, &Default::default()).is_ok());
    let src = format!("{COPY}schedule {{\n  x_s = cache_after(x, memory=shared, load=tma)\n  y.split(0, 4, outer)\n  y.parallelize(0, BIDx)\n  propagate(y)\n  x_s.parallelize(1, Bulk)\n  inline_most()\n}}\n");
    let e = err(&src);
    assert!(e.contains("Bulk axis 1 of `x_s` comes from an outer split (split(.., .., outer)): a box dimension is a whole dimension of constant extent or the inner part of a split of one"), "{e}");
    let src = "fusion f {\n  input x: f32[M, N]\n  y = x\n  output y\n}\nschedule {\n  x_s = cache_after(x, memory=shared, load=tma)\n  y.split(1, 64)\n  y.split(0, 8)\n  y.reorder(0, 2, 3, 1)\n  y.parallelize(0, BIDx)\n  propagate(y)\n  x_s.parallelize(2, Bulk)\n  x_s.parallelize(3, Bulk)\n  inline_most()\n}\n";
    let e = err(src);
    assert!(
        e.contains("the Bulk axes of `x_s` must follow its dimension order"),
        "{e}"
    );
}

#[test]
fn bulk_copies_are_one_dimensional_and_need_whole_runs() {
    let src = "fusion f {\n  input x: f32[M, N]\n  y = x\n  output y\n}\nschedule {\n  x_s = cache_after(x, memory=shared, load=bulk)\n  y.split(1, 64)\n  y.split(0, 8)\n  y.reorder(0, 2, 1, 3)\n  y.parallelize(0, BIDx)\n  propagate(y)\n  x_s.parallelize(2, Bulk)\n  x_s.parallelize(3, Bulk)\n  inline_most()\n}\n";
    let e = err(src);
    assert!(
        e.contains(
            "a bulk copy moves one contiguous run, so only the innermost dimension may be Bulk"
        ),
        "{e}"
    );
    let c = hopfuse::compile(&tma_copy("bulk", 256, 16, ""), &Default::default()).unwrap();
    let sizes =
        |n: i64| -> std::collections::BTreeMap<String, i64> { [("N".to_string(), n)].into() };
    assert!(c.plan.concretize(&sizes(4096)).is_ok());
    let e = c.plan.concretize(&sizes(4100)).unwrap_err().to_string();
    assert!(
        e.contains("a bulk copy has no out-of-bounds handling"),
        "{e}"
    );
    assert!(c.plan.tensor_maps.is_empty());
    assert!(c.cuda.contains("hf_bulk_load("));
}

#[test]
fn circular_buffer_stages_and_prefetch() {
    let e = err(&tma_copy("tma", 256, 16, "  x_s.circular_buffer(1)"));
    assert!(
        e.contains("`x_s` needs at least 2 stages to be circular-buffered, got 1"),
        "{e}"
    );
    let e = err(&tma_copy(
        "tma",
        256,
        16,
        "  x_s.circular_buffer(3, prefetch=3)",
    ));
    assert!(
        e.contains("prefetch of `x_s` must be in 0..3 (0 <= prefetch < stages), got 3"),
        "{e}"
    );
    let e = err(&tma_copy(
        "tma",
        256,
        16,
        "  x_s.circular_buffer(3, prefetch=-1)",
    ));
    assert!(e.contains("prefetch of `x_s` must be in 0..3"), "{e}");
    assert!(hopfuse::compile(
        &tma_copy("tma", 256, 16, "  x_s.circular_buffer(3, prefetch=0)"),
        &Default::default()
    )
    .is_ok());
}

#[test]
fn circular_buffer_stages_fit_the_loop() {
    let e = err(&tma_copy("tma", 256, 2, "  x_s.circular_buffer(3)"));
    assert!(
        e.contains("`x_s`.circular_buffer(3): 3 stages is more than the 2 iterations of the buffered loop `n_oi`"),
        "{e}"
    );
    let src = format!("{COPY}schedule {{\n  x_s = cache_after(x, memory=shared, load=tma)\n  y.split(0, 256)\n  y.parallelize(0, BIDx)\n  y.parallelize(1, TIDx)\n  propagate(y)\n  x_s.parallelize(1, Bulk)\n  x_s.circular_buffer(2)\n  inline_most()\n}}\n");
    let e = err(&src);
    assert!(
        e.contains("no serial loop encloses the load of `x_s`, so there is nothing to pipeline"),
        "{e}"
    );
}

#[test]
fn circular_buffer_needs_a_cache_of_an_input() {
    // `y` is computed in the loop it would be buffered over: its producer runs there too.
    let e = err(&format!(
        "{COPY}schedule {{\n  y.split(0, 256)\n  y.circular_buffer(2)\n}}\n"
    ));
    assert!(e.contains("`y` is not a cache of a fusion input"), "{e}");
    let e = err(&format!(
        "{COPY}schedule {{\n  x_s = cache_after(x, memory=shared)\n  x_s.circular_buffer(2, war=mbarrier)\n}}\n"
    ));
    assert!(
        e.contains("war=mbarrier: `x_s` is filled by plain loads"),
        "{e}"
    );
    let e = err(&format!(
        "{COPY}schedule {{\n  x_s = cache_after(x, memory=shared)\n  x_s.circular_buffer(2, war=maybe)\n}}\n"
    ));
    assert!(
        e.contains("unknown write-after-read mode `maybe` (sync or mbarrier)"),
        "{e}"
    );
}

#[test]
fn tma_cache_axes_outside_the_shared_loops_must_be_bulk() {
    let e = err(&tma_copy("tma", 256, 16, "")
        .replace("  inline_most()", "  inline_most()\n  x_s.inline_at(1)"));
    assert!(e.contains("axis 1 of `x_s` (Serial) is not Bulk"), "{e}");
}

#[test]
fn loads_sharing_a_loop_need_the_same_circular_buffering() {
    let src = format!(
        "{ADD}schedule {{\n  a_s = cache_after(a, memory=shared, load=tma)\n  b_s = cache_after(b, memory=shared, load=tma)\n  c.split(1, 64)\n  c.parallelize(0, BIDx)\n  c.parallelize(2, TIDx)\n  propagate(c)\n  a_s.parallelize(2, Bulk)\n  b_s.parallelize(2, Bulk)\n  a_s.circular_buffer(3)\n  inline_most()\n}}\n"
    );
    let e = err(&src);
    assert!(
        e.contains("`b_s` and `a_s` are loaded in the same loop `n_o` and share its pipeline, so they need the same circular buffering: `b_s` has no circular buffering, `a_s` has circular_buffer(3, prefetch=2, war=sync)"),
        "{e}"
    );
}

const STORE: &str = "fusion f {\n  input x: f32[M, N]\n  y = exp(x)\n  output y\n}\n";

fn tma_store(extra: &str) -> String {
    format!(
        "{STORE}schedule {{\n  y_s = cache_before(y, memory=shared, store=tma)\n  y.split(1, 64)\n  y.split(0, 8)\n  y.reorder(0, 2, 1, 3)\n  y.parallelize(0, BIDx)\n  propagate(y)\n  y_s.parallelize(2, TIDy)\n  y_s.parallelize(3, TIDx)\n{extra}\n  inline_most()\n}}\n"
    )
}

#[test]
fn tma_store_errors_name_the_tensor_and_the_rule() {
    let e = err(&tma_store(
        "  y.parallelize(2, Bulk)\n  y.parallelize(3, Bulk)\n  y_s.reorder(0, 1, 3, 2)",
    ));
    assert!(e.contains("`y_s` is read by the TMA store of `y` as a row-major box of [64, 8] (innermost first), but its shared-memory layout differs"), "{e}");
    let e = err(&tma_store(
        "  y.parallelize(2, TIDy)\n  y.parallelize(3, TIDx)",
    ));
    assert!(
        e.contains("`y` is written by a TMA store and has no Bulk axis"),
        "{e}"
    );
    let e = err(&tma_store(
        "  y_s.parallelize(3, Serial)\n  y_s.parallelize(2, TIDx)\n  y.parallelize(2, TIDx)\n  y.parallelize(3, Bulk)",
    ));
    assert!(e.contains("`y` is written by a TMA store, which one thread issues per group of threads: it cannot be inside the threadIdx.x loop"), "{e}");
    let e = err(&tma_store("  y.parallelize(2, Bulk)"));
    assert!(
        e.contains("axis 3 of `y` (Serial) is inside its Bulk axes"),
        "{e}"
    );
    let e = err(&format!(
        "{STORE}schedule {{\n  y_s = cache_before(y, memory=local, store=tma)\n}}\n"
    ));
    assert!(
        e.contains("store=tma copies from shared memory: add memory=shared"),
        "{e}"
    );
    let e = err(&format!(
        "{STORE}schedule {{\n  y_s = cache_before(y, memory=shared, fence=per_store)\n}}\n"
    ));
    assert!(
        e.contains("fence= places the fence before a TMA store: add store=tma"),
        "{e}"
    );
    let e = err(&format!(
        "{STORE}schedule {{\n  x_s = cache_after(x, memory=shared, store=tma)\n}}\n"
    ));
    assert!(e.contains("use them with cache_before"), "{e}");
    let e = err(&format!(
        "{STORE}schedule {{\n  y_s = cache_before(y, memory=shared, store=tma, fence=sometimes)\n}}\n"
    ));
    assert!(
        e.contains("unknown fence placement `sometimes` (analysis, per_store or issuing_warp)"),
        "{e}"
    );
}

#[test]
fn a_plain_circular_buffer_cannot_be_pipelined_over_a_thread_loop() {
    let e = err(&format!(
        "{COPY}schedule {{\n  x_s = cache_after(x, memory=shared)\n  y.split(0, 256)\n  y.split(0, 16)\n  y.parallelize(0, BIDx)\n  y.parallelize(2, TIDx)\n  propagate(y)\n  x_s.circular_buffer(2)\n  x_s.inline_at(3)\n}}\n"
    ));
    assert!(e.contains("`x_s`.inline_at(3): cannot inline past loop 2: the innermost loop a circular-buffered cache shares with its consumers is the one it is pipelined over, and must be serial"), "{e}");
}

/// Found by the long fuzz: an Mma axis on a TMA-stored output's own loops left a nest with no
/// computation, and the error named no tensor and had no location.
#[test]
fn an_mma_axis_on_a_tma_store_names_the_output() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/matmul/step9_tma_store_epilogue.hf"
    );
    let src = std::fs::read_to_string(path)
        .unwrap()
        .replace("  c.parallelize(5, Bulk)", "  c.parallelize(5, Mma)");
    let e = err(&src);
    assert!(
        e.starts_with("t.hf:19:3: error: `c` has 1 Mma axes in a row"),
        "{e}"
    );
}

/// A schedule that leaves a reduction's accumulator a register array of a size symbol's
/// elements is refused at the reduction (the accumulator has no tensor of its own).
#[test]
fn an_accumulator_of_symbolic_size_is_located_at_its_reduction() {
    let src = "fusion f {\n  input q: f32[M, 8]\n  s = sum(q, axis=1)\n  y = q * broadcast(s, axis=1)\n  output y\n}\nschedule {\n  s.reorder(1, 0)\n  s.set_memory(shared)\n}\n";
    let e = err(src);
    assert!(
        e.starts_with("t.hf:3:3: error: register tensor `s_acc` needs M elements per thread"),
        "{e}"
    );
}

/// A tensor the builder named inside an expression (`y_broadcast2` for `broadcast(v,
/// axis=1)`) is named in a message by the expression's text, at its location, with what to
/// write instead; a tensor the program names keeps its name (issue 33).
#[test]
fn an_expression_without_a_name_is_named_by_its_text() {
    let src = "fusion f {\n  input x: f32[M, 4096]\n  v, m = var_mean(x, axis=1)\n  y = (x - broadcast(m, axis=1)) * broadcast(v, axis=1)\n  output y\n}\nschedule {\n  y.split(0, 2)\n  y.split(2, 4)\n  y.reorder(0, 2, 1, 3)\n  y.parallelize(0, BIDx)\n  y.parallelize(1, TIDx)\n  y.parallelize(3, Vectorize)\n  propagate(y)\n  inline_most()\n}\n";
    let e = err(src);
    assert!(
        e.starts_with("t.hf:4:36: error: the expression `broadcast(v, axis=1)` cannot share loops both with its producers and with its consumer `y`; name it (`t = broadcast(v, axis=1)`) and lower the inlining position of `t`"),
        "{e}"
    );
    assert!(!e.contains("y_broadcast2"), "{e}");
    // Named, the tensors are refused under their names.
    let named = src.replace(
        "  y = (x - broadcast(m, axis=1)) * broadcast(v, axis=1)",
        "  vb = broadcast(v, axis=1)\n  d = x - broadcast(m, axis=1)\n  y = d * vb",
    );
    let e = err(&named);
    assert!(
        e.starts_with("t.hf:5:3: error: `d` cannot share loops both with its producers and with its consumer `y`; lower its inlining position"),
        "{e}"
    );
}

/// An unnamed expression left a register array of a size symbol's elements is named by its
/// text in the allocation's refusal too.
#[test]
fn a_register_array_of_an_unnamed_expression_is_named_by_its_text() {
    let src = "fusion f {\n  input q: f32[M, N]\n  y = exp(q) * 2.0\n  output y\n}\nschedule {\n  y.reorder(1, 0)\n}\n";
    let e = err(src);
    assert!(
        e.starts_with("t.hf:3:7: error: the expression `exp(q)` needs M * N elements per thread: a register array needs a constant size"),
        "{e}"
    );
}
