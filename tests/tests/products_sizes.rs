//! Issue 33's size symbols inside expressions (`x / N`) and matrix products as ops (`matmul`,
//! `linear`): located errors, the float64 reference, the CUDA (the same as the written-out
//! broadcast form's) and the PyTorch twin. And a fusion whose register cache feeds both an
//! elementwise chain and a reduction, which once failed the verifier (`use-before-alloc`).

use hopfuse_tests::{compile, error as err};

/// Output `c` of `src` by the float64 reference.
fn reference(src: &str, sizes: &[(&str, i64)], inputs: &[(&str, Vec<f64>)]) -> Vec<f64> {
    hopfuse_tests::reference(src, sizes, inputs, "c")
}

fn twin(src: &str) -> String {
    hopfuse::torch_twin(src)
        .unwrap_or_else(|e| panic!("{}", e.render(src, "t.hf")))
        .source
}

fn rows(body: &str) -> String {
    format!("fusion f {{\n  input x: f32[M, N]\n  {body}\n  output c\n}}\n")
}

#[test]
fn a_size_symbol_is_a_number_read_at_run_time() {
    let x = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let at = |body: &str| reference(&rows(body), &[("M", 2), ("N", 3)], &[("x", x.clone())]);
    assert_eq!(
        at("c = x / N"),
        [1.0 / 3.0, 2.0 / 3.0, 1.0, 4.0 / 3.0, 5.0 / 3.0, 2.0]
    );
    assert_eq!(at("c = x * (M * N)"), [6.0, 12.0, 18.0, 24.0, 30.0, 36.0]);
    assert_eq!(at("c = x - (N - 1)"), [-1.0, 0.0, 1.0, 2.0, 3.0, 4.0]);
    assert_eq!(at("c = x + (N + 2)"), [6.0, 7.0, 8.0, 9.0, 10.0, 11.0]);
    // The row mean written by hand equals `mean`.
    assert_eq!(
        at("c = broadcast(sum(x, axis=1) / N, axis=1) + x * 0.0"),
        at("c = broadcast(mean(x, axis=1), axis=1) + x * 0.0")
    );
    // Compared with an index: the last column.
    let last = reference(
        &rows("c = where(iota(x, axis=1) == N - 1, x, 0.0)"),
        &[("M", 2), ("N", 3)],
        &[("x", x.clone())],
    );
    assert_eq!(last, [0.0, 0.0, 3.0, 0.0, 0.0, 6.0]);
    // An integer tensor times a size stays an integer (a Python int from x.shape does).
    let src = "fusion f {\n  input i: i32[N]\n  c = i * N\n  output c\n}\n";
    let program = hopfuse::frontend::parse(src).unwrap();
    let f = hopfuse::fusion::build(&program.fusion).unwrap();
    let c = f.tensors.iter().find(|t| t.name == "c").unwrap();
    assert_eq!(c.dtype, hopfuse::DType::I32);
    assert_eq!(
        reference(src, &[("N", 3)], &[("i", vec![1.0, -2.0, 5.0])]),
        [3.0, -6.0, 15.0]
    );
}

#[test]
fn a_size_symbol_reaches_cuda_as_its_parameter_and_the_twin_as_a_shape() {
    let src = rows("c = x / N + x * (M * N) - (N - 1)");
    let cuda = compile(&src).cuda;
    assert!(cuda.contains("static_cast<float>(N)"), "{cuda}");
    let py = twin(&src);
    assert!(
        py.contains("x / x.shape[1]")
            && py.contains("x.shape[0] * x.shape[1]")
            && py.contains("max(x.shape[1] - 1, 0)"),
        "{py}"
    );
    // Compared as i32: the size parameter (index_t, `long long` with 64-bit indices) is
    // converted before the clamp, so that `max` has one overload.
    let cuda = compile(&rows("c = where(iota(x, axis=1) == N - 1, x, 0.0)")).cuda;
    assert!(cuda.contains("max((static_cast<int>(N) - 1), 0)"), "{cuda}");
    let py = twin(&rows("c = x + (N + 2)"));
    assert!(py.contains("x + (x.shape[1] + 2)"), "{py}");
}

#[test]
fn size_symbols_in_expressions_are_located_errors() {
    let e = err(&rows("c = x / K"));
    assert!(
        e.starts_with("t.hf:3:11: error: unknown tensor `K`") && e.contains("M, N"),
        "{e}"
    );
    let e = err(&rows("c = N"));
    assert!(
        e.contains("t.hf:3:3") && e.contains("`c` is the size N"),
        "{e}"
    );
    let e = err(&rows("c = x / (N * 2)"));
    assert!(
        e.contains("t.hf:3:12") && e.contains("sizes combine among themselves only"),
        "{e}"
    );
    let e = err(&rows("c = x * -N"));
    assert!(e.contains("t.hf:3:11") && e.contains("negated size"), "{e}");
    let e = err(&rows("c = exp(N)"));
    assert!(e.contains("sizes combine among themselves only"), "{e}");
}

const MATMUL_BROADCAST: &str =
    "  ab = broadcast(a, axis=2)\n  bb = broadcast(b, axis=0)\n  p = ab * bb\n  c = sum(p, axis=1)";

#[test]
fn matmul_and_linear_follow_torch() {
    // a [2, 3] @ b [3, 2]
    let a = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let b = vec![1.0, 0.0, 0.0, 1.0, 2.0, -1.0];
    let sizes = [("M", 2), ("K", 3), ("N", 2)];
    let mm = |body: &str| {
        let src = format!(
            "fusion f {{\n  input a: f32[M, K]\n  input b: f32[K, N]\n{body}\n  output c\n}}\n"
        );
        reference(&src, &sizes, &[("a", a.clone()), ("b", b.clone())])
    };
    assert_eq!(mm("  c = matmul(a, b)"), [7.0, -1.0, 16.0, -1.0]);
    assert_eq!(mm("  c = matmul(a, b)"), mm(MATMUL_BROADCAST));
    // linear: x [2, 3] times w [2, 3] transposed, plus bias [2].
    let w = vec![1.0, 0.0, 2.0, 0.0, 1.0, -1.0];
    let lin = |body: &str, extra: &str, inputs: &[(&str, Vec<f64>)]| {
        let src = format!(
            "fusion f {{\n  input x: f32[M, K]\n  input w: f32[N, K]\n{extra}  c = {body}\n  output c\n}}\n"
        );
        reference(&src, &sizes, inputs)
    };
    let xw = [("x", a.clone()), ("w", w.clone())];
    assert_eq!(lin("linear(x, w)", "", &xw), [7.0, -1.0, 16.0, -1.0]);
    let xwb = [
        ("x", a.clone()),
        ("w", w.clone()),
        ("bias", vec![0.5, -2.0]),
    ];
    assert_eq!(
        lin("linear(x, w, bias)", "  input bias: f32[N]\n", &xwb),
        [7.5, -3.0, 16.5, -3.0]
    );
    // Batched: [2, 1, 2] @ [2, 2, 1].
    let src = "fusion f {\n  input a: f32[B, M, K]\n  input b: f32[B, K, N]\n  c = matmul(a, b)\n  output c\n}\n";
    let batched = reference(
        src,
        &[("B", 2), ("M", 1), ("K", 2), ("N", 1)],
        &[
            ("a", vec![1.0, 2.0, 3.0, 4.0]),
            ("b", vec![5.0, 6.0, 7.0, 8.0]),
        ],
    );
    assert_eq!(batched, [17.0, 53.0]);
}

/// `matmul(a, transpose(w, 0, 1))`, torch's `a @ w.T`, is `linear`'s product on `w` K-major:
/// the same values, the same kernel under the tensor-core example's schedule, and the automatic
/// product schedule takes it (it took only `linear` and the written-out form before).
#[test]
fn matmul_by_a_transposed_weight_is_the_k_major_product() {
    let sizes = [("M", 2), ("K", 3), ("N", 2)];
    let x = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let w = vec![1.0, 0.0, 2.0, 0.0, 1.0, -1.0];
    let of = |body: &str| {
        let src = format!(
            "fusion f {{\n  input x: f32[M, K]\n  input w: f32[N, K]\n{body}\n  output c\n}}\n"
        );
        reference(&src, &sizes, &[("x", x.clone()), ("w", w.clone())])
    };
    assert_eq!(
        of("  c = matmul(x, transpose(w, 0, 1))"),
        [7.0, -1.0, 16.0, -1.0]
    );
    assert_eq!(
        of("  wt = permute(w, dims=[1, 0])\n  c = matmul(x, wt)"),
        [7.0, -1.0, 16.0, -1.0]
    );
    // A transpose of other axes is a product over the view, as written.
    let src = "fusion f {\n  input a: f32[B, M, K]\n  input w: f32[K, B, N]\n  c = matmul(a, transpose(w, 0, 1))\n  output c\n}\n";
    let viewed = reference(
        src,
        &[("B", 2), ("M", 1), ("K", 2), ("N", 1)],
        &[
            ("a", vec![1.0, 2.0, 3.0, 4.0]),
            ("w", vec![5.0, 7.0, 6.0, 8.0]),
        ],
    );
    assert_eq!(viewed, [17.0, 53.0]);
    // A K that does not match is named as written.
    let src = "fusion f {\n  input x: f32[M, K]\n  input w: f32[K, N]\n  c = matmul(x, transpose(w, 0, 1))\n  output c\n}\n";
    let e = err(src);
    assert!(
        e.contains("`x` has K columns and `transpose(w, ...)` has N rows"),
        "{e}"
    );
    // A batched weight [B, N, K] transposed on its last two axes.
    let src = "fusion f {\n  input a: f32[B, M, K]\n  input w: f32[B, N, K]\n  c = matmul(a, transpose(w, 1, 2))\n  output c\n}\n";
    let batched = reference(
        src,
        &[("B", 2), ("M", 1), ("K", 2), ("N", 1)],
        &[
            ("a", vec![1.0, 2.0, 3.0, 4.0]),
            ("w", vec![5.0, 6.0, 7.0, 8.0]),
        ],
    );
    assert_eq!(batched, [17.0, 53.0]);
    // The tensor-core example's kernel, with the product written as torch writes it.
    let written = hopfuse_tests::example("matmul/step1_one_warp_group.hf");
    let products = "  ab = cast(broadcast(a, axis=1), f32)\n  bb = cast(broadcast(b, axis=0), f32)\n  p = ab * bb\n  s = sum(p, axis=2)";
    assert!(written.contains(products), "the example changed");
    let op = written.replace(products, "  s = matmul(a, transpose(b, 0, 1))");
    assert_eq!(compile(&op).cuda, compile(&written).cuda);
    // Without a schedule: the automatic product schedule.
    let src = "fusion f {\n  input a: bf16[M, K]\n  input b: bf16[N, K]\n  c = cast(matmul(a, transpose(b, 0, 1)), bf16)\n  output c\n}\n";
    let sizes = std::collections::BTreeMap::from([
        ("M".to_string(), 128),
        ("N".to_string(), 4096),
        ("K".to_string(), 4096),
    ]);
    let auto = hopfuse::schedule_for(src, Some(&sizes))
        .unwrap_or_else(|e| panic!("{}", e.render(src, "t.hf")))
        .auto
        .expect("an automatic schedule note");
    assert_eq!(
        auto.scheduler.as_deref(),
        Some("matrix product"),
        "{}",
        auto.reason
    );
    assert!(twin(src).contains("c = a @ b.t()\n"), "{}", twin(src));
}

#[test]
fn matmul_lowers_to_the_cuda_of_its_broadcast_form() {
    // examples/basics/matmul.hf with the product written as an op.
    let written = hopfuse_tests::example("basics/matmul.hf");
    assert!(written.contains(MATMUL_BROADCAST), "the example changed");
    let op = written.replace(MATMUL_BROADCAST, "  c = matmul(a, b)");
    // The same program, its tensors named as the op names them.
    let named = written.replace(
        MATMUL_BROADCAST,
        "  c_broadcast = broadcast(a, axis=2)\n  c_broadcast2 = broadcast(b, axis=0)\n  c_mul = c_broadcast * c_broadcast2\n  c = sum(c_mul, axis=1)",
    );
    assert_eq!(compile(&op).cuda, compile(&named).cuda);
    // The tensor-core example with K-major b: linear(a, b) is its sum.
    let written = hopfuse_tests::example("matmul/step1_one_warp_group.hf");
    let products = "  ab = cast(broadcast(a, axis=1), f32)\n  bb = cast(broadcast(b, axis=0), f32)\n  p = ab * bb\n  s = sum(p, axis=2)";
    assert!(written.contains(products), "the example changed");
    let op = written.replace(products, "  s = linear(a, b)");
    let (op, written) = (compile(&op).cuda, compile(&written).cuda);
    assert!(op.contains("wgmma.mma_async"), "{op}");
    assert_eq!(op, written);
    // The twin writes the product as torch does.
    let src = "fusion f {\n  input a: bf16[M, K]\n  input b: bf16[K, N]\n  c = cast(matmul(a, b), bf16)\n  output c\n}\n";
    assert!(twin(src).contains("c = a @ b\n"), "{}", twin(src));
    let src = "fusion f {\n  input a: bf16[M, K]\n  input b: bf16[K, N]\n  c = matmul(a, b)\n  output c\n}\n";
    assert!(
        twin(src).contains("c = torch.mm(a, b, out_dtype=torch.float32)"),
        "{}",
        twin(src)
    );
    let src = "fusion f {\n  input x: bf16[M, K]\n  input w: bf16[N, K]\n  input bias: bf16[N]\n  c = cast(linear(x, w, bias), bf16)\n  output c\n}\n";
    assert!(
        twin(src)
            .contains("torch.mm(x, w.t(), out_dtype=torch.float32) + bias.unsqueeze(0).float()"),
        "{}",
        twin(src)
    );
    let src = "fusion f {\n  input a: f32[B, M, K]\n  input b: f32[B, K, N]\n  c = matmul(a, b)\n  output c\n}\n";
    assert!(twin(src).contains("c = a @ b"), "{}", twin(src));
}

#[test]
fn matmul_and_linear_errors_are_located() {
    let two = |decl: &str, body: &str| {
        err(&format!(
            "fusion f {{\n{decl}\n  c = {body}\n  output c\n}}\n"
        ))
    };
    let e = two("  input a: f32[M, K]\n  input b: f32[N, K]", "matmul(a, b)");
    assert!(
        e.contains("t.hf:4:17") && e.contains("`a` has K columns and `b` has N rows"),
        "{e}"
    );
    let e = two("  input a: f32[M, K]\n  input b: f32[K]", "matmul(a, b)");
    assert!(e.contains("t.hf:4:17") && e.contains("rank 1"), "{e}");
    let e = two("  input a: i32[M, K]\n  input b: f32[K, N]", "matmul(a, b)");
    assert!(
        e.contains("t.hf:4:14") && e.contains("floating-point"),
        "{e}"
    );
    let e = two("  input x: f32[M, K]\n  input w: f32[K, N]", "linear(x, w)");
    assert!(e.contains("t.hf:4:17") && e.contains("takes N"), "{e}");
    let e = two(
        "  input x: f32[M, K]\n  input w: f32[N, K]\n  input bias: f32[K]",
        "linear(x, w, bias)",
    );
    assert!(
        e.contains("t.hf:5:20") && e.contains("the bias is [N] = [N]"),
        "{e}"
    );
    let e = two("  input x: f32[M, K]", "linear(x)");
    assert!(e.contains("`linear` takes 3 operands, got 1"), "{e}");
}

/// The register cache of `q` feeds an elementwise chain (`x`) and a reduction (`s`) whose
/// broadcast `y` reads: it once failed the verifier with `use-before-alloc`.
#[test]
fn a_cache_read_by_a_chain_and_a_reduction_lowers() {
    let src = "fusion f {\n  input q: f32[M, 8]\n  x = q * 2\n  s = sum(q, axis=1)\n  y = x + x * broadcast(s, axis=1)\n  output y\n}\nschedule {\n  q_c = cache_after(q)\n}\n";
    let cuda = compile(src).cuda;
    // The sum is complete before the join reads it: `q_c` is held over the row (8 registers)
    // and read again after the reduction loop.
    let (sum, join) = (
        cuda.find("s[0] = s_acc[0]"),
        cuda.find("y_broadcast[0] = s[0]"),
    );
    assert!(sum.is_some() && join.is_some() && sum < join, "{cuda}");
    assert!(cuda.contains("float q_c[8]"), "{cuda}");
}
