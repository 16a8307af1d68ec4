//! Segmentation decisions and their stated reasons.

use super::*;

fn split_of(source: &str) -> Segmentation {
    match decide(source, None).expect("the program compiles") {
        Decision::Split(s) => s,
        other => panic!("expected a split, got {other:?}"),
    }
}

fn example(name: &str) -> String {
    let path = format!("{}/../examples/auto/{name}.hf", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn column_normalisation_is_a_column_sum_then_a_division() {
    let s = split_of(&example("col_norm"));
    assert!(
        s.reason
            .contains("reads the column reductions back over the columns"),
        "{}",
        s.reason
    );
    let names: Vec<_> = s.segments.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["col_norm_s1", "col_norm_s2"]);
    assert_eq!(s.segments[0].scheduler, "outer reduction");
    assert_eq!(s.segments[1].scheduler, "pointwise");
    assert_eq!(s.segments[0].reads, ["x"]);
    assert_eq!(s.segments[0].writes, ["y_sum"]);
    assert_eq!(s.segments[1].reads, ["x", "y_sum"]);
    assert_eq!(s.segments[1].writes, ["y"]);
    assert!(
        s.segments[0]
            .reason
            .starts_with("ends before `y`: with it, `y` reads the column reductions back"),
        "{}",
        s.segments[0].reason
    );
    assert_eq!(s.segments[1].reason, "the last segment");
    assert_eq!(s.intermediates.len(), 1);
    let m = &s.intermediates[0];
    assert_eq!((m.name.as_str(), m.dtype), ("y_sum", DType::F32));
    assert_eq!(m.shape, [SizeExpr::sym("N")]);
    assert_eq!((m.producer, m.consumers.as_slice()), (0, &[1][..]));
    assert_eq!(m.bytes().to_string(), "4 * N");
    // The segment's program declares the intermediate as an input and keeps the bench lines.
    assert!(
        s.segments[1].source.contains("input y_sum: f32[N]"),
        "{}",
        s.segments[1].source
    );
    assert!(s.segments[1].source.contains("// bench: M=16384,N=8192"));
}

#[test]
fn product_then_row_softmax_is_a_product_kernel_then_a_softmax_kernel() {
    let s = split_of(&example("product_softmax"));
    let schedulers: Vec<_> = s.segments.iter().map(|g| g.scheduler.as_str()).collect();
    assert_eq!(schedulers, ["matrix product", "normalization"]);
    assert_eq!(s.segments[0].writes, ["c"]);
    assert_eq!(s.segments[1].reads, ["c"]);
    assert!(
        s.segments[0]
            .reason
            .starts_with("ends before `cf`: with it, "),
        "{}",
        s.segments[0].reason
    );
    // The product's output is stored as the bf16 the program casts it to: exact.
    let c = &s.intermediates[0];
    assert_eq!((c.name.as_str(), c.dtype), ("c", DType::BF16));
    assert_eq!(c.shape, [SizeExpr::sym("M"), SizeExpr::sym("N")]);
}

#[test]
fn two_reductions_along_different_axes_are_two_kernels() {
    let s = split_of(&example("row_col_sums"));
    assert!(
        s.reason.contains(
            "`r` and `c` reduce different axes; one kernel with one schedule reduces one"
        ),
        "{}",
        s.reason
    );
    let schedulers: Vec<_> = s.segments.iter().map(|g| g.scheduler.as_str()).collect();
    assert_eq!(schedulers, ["inner reduction", "outer reduction"]);
    assert_eq!(s.segments[0].writes, ["r"]);
    assert_eq!(s.segments[1].writes, ["c"]);
    assert!(s.intermediates.is_empty());
    assert_eq!(
        s.segments[0].reason,
        "ends before `c`: with it, `r` and `c` reduce different axes; one kernel with one schedule reduces one"
    );
}

#[test]
fn a_fusion_a_scheduler_takes_whole_or_with_a_schedule_is_not_split() {
    assert_eq!(decide(&example("softmax"), None).unwrap(), Decision::Whole);
    let scheduled = "fusion f {\n  input x: f32[M, N]\n  y = x / broadcast(sum(x, axis=0), axis=0)\n  output y\n}\nschedule {\n  inline_most()\n}\n";
    assert_eq!(decide(scheduled, None).unwrap(), Decision::Whole);
}

#[test]
fn a_statistic_of_every_element_is_a_grid_reduction_then_a_pointwise_kernel() {
    let s = split_of(&example("normalize_by_total"));
    let schedulers: Vec<_> = s.segments.iter().map(|g| g.scheduler.as_str()).collect();
    assert_eq!(schedulers, ["full reduction", "pointwise"]);
    assert_eq!(s.segments[0].writes, ["y_sum"]);
    assert_eq!(s.segments[1].reads, ["x", "y_sum"]);
    assert!(
        s.segments[0].reason.starts_with(
            "ends before `y`: with it, `y_sum`, a reduction of every element, is read again"
        ),
        "{}",
        s.segments[0].reason
    );
    // A scalar intermediate: one element in global memory, declared `f32[]` (a pointer, not a
    // value passed at launch).
    let t = &s.intermediates[0];
    assert_eq!((t.name.as_str(), t.dtype), ("y_sum", DType::F32));
    assert!(t.shape.is_empty());
    assert_eq!(t.bytes().to_string(), "4");
    assert!(
        s.segments[1].source.contains("input y_sum: f32[]"),
        "{}",
        s.segments[1].source
    );
    // The rank-1 form, and per-tensor quantization with its amax as a second output.
    let source = "fusion f {\n  input x: f32[N]\n  y = x / broadcast(sum(x, axis=0), axis=0)\n  output y\n}\n";
    let s = split_of(source);
    let schedulers: Vec<_> = s.segments.iter().map(|g| g.scheduler.as_str()).collect();
    assert_eq!(schedulers, ["full reduction", "pointwise"]);
    let path = format!(
        "{}/../examples/ops/quantize_fp8_tensor.hf",
        env!("CARGO_MANIFEST_DIR")
    );
    let s = split_of(&std::fs::read_to_string(path).unwrap());
    let schedulers: Vec<_> = s.segments.iter().map(|g| g.scheduler.as_str()).collect();
    assert_eq!(schedulers, ["full reduction", "pointwise"]);
    assert_eq!(s.segments[0].writes, ["amax"]);
    assert_eq!(s.segments[1].writes, ["q"]);
}

#[test]
fn a_tuple_assignment_is_not_split_and_says_so() {
    // Column statistics read back over the columns: no scheduler takes it whole.
    let source = "fusion f {\n  input x: f32[M, N]\n  v, m = var_mean(x, axis=0)\n  y = (x - broadcast(m, axis=0)) / broadcast(v, axis=0)\n  output y\n}\n";
    match decide(source, None).unwrap() {
        Decision::Declined(Declined(why)) => assert_eq!(
            why,
            "`v, m` is a tuple assignment, which the segmenter does not split yet"
        ),
        other => panic!("expected a decline, got {other:?}"),
    }
}

#[test]
fn nested_reductions_are_hoisted_innermost_first_with_fresh_names() {
    let program = crate::frontend::parse(
        "fusion f {\n  input x: f32[M, N]\n  y_max = x\n  y = x - broadcast(max(x - broadcast(sum(x, axis=1), axis=1), axis=1), axis=1)\n  output y\n}\n",
    )
    .unwrap();
    let st = hoist(&program.fusion);
    let names: Vec<_> = st.lets.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["y_max", "y_sum", "y_max2", "y"]);
    assert_eq!(
        crate::frontend::printer::expr(&st.lets[2].1),
        "max(x - broadcast(y_sum, axis=1), axis=1)"
    );
}

#[test]
fn every_independent_syntax_error_is_reported_not_only_the_first() {
    // `compile_program` decides on segmentation before compiling: its parse must recover as
    // `compile`'s does (a regression once reported 3:10 alone).
    let source = "fusion f {\n  input a: f32[M]\n  b = a *\n  c = exp(a))\n  output c\n}\nschedule {\n  c.split(0 4)\n  c.parallelize(0, BIDx)\n}\n";
    let Err(errors) = crate::compile_program(source, &crate::CompileOptions::default()) else {
        panic!("three syntax errors compiled");
    };
    let at: Vec<_> = errors.0.iter().map(|d| (d.line, d.column)).collect();
    assert_eq!(at, [(3, 10), (4, 13), (8, 13)]);
}

#[test]
fn a_zero_d_input_with_empty_extents_is_one_element_read_through_a_pointer() {
    // What a later segment declares for a scalar intermediate: a tensor parameter of shape
    // [] (one element in global memory), where `input s: f32` is a value passed at launch.
    let source = "fusion f {\n  input x: f32[N]\n  input s: f32[]\n  y = x / broadcast(s, axis=0)\n  output y\n}\n";
    let c = crate::compile(source, &crate::CompileOptions::default()).unwrap();
    assert!(
        c.plan.params.iter().any(|p| matches!(
            p,
            crate::plan::Param::Tensor { name, role: crate::plan::TensorRole::Input, shape, .. }
                if name == "s" && shape.is_empty()
        )),
        "{:?}",
        c.plan.params
    );
    assert!(
        c.cuda.contains("const float* __restrict__ s,"),
        "{}",
        c.cuda
    );
    assert!(c.cuda.contains("s[0]"), "{}", c.cuda);
    // The printer writes it back as it was written.
    let program = crate::frontend::parse(source).unwrap();
    assert!(crate::frontend::print(&program).contains("input s: f32[]"));
}
