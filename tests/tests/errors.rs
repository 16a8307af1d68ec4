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
fn grid_reduction_is_rejected() {
    let src = "fusion f {\n  input x: f32[M, N]\n  s = sum(x, axis=1)\n  output s\n}\nschedule {\n  s.parallelize(1, BIDy)\n}\n";
    assert!(err(src).contains("grid reductions"));
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
