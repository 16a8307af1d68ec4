//! The ops of the op table end to end: typing errors located, comparisons parsed and printed
//! back, the float64 reference, the CUDA and the PyTorch twin of each new op.

use std::collections::BTreeMap;

fn err(src: &str) -> String {
    match hopfuse::compile(src, &Default::default()) {
        Ok(_) => panic!("expected an error for:\n{src}"),
        Err(e) => e.render(src, "t.hf"),
    }
}

fn fusion(inputs: &str, body: &str) -> String {
    format!("fusion f {{\n{inputs}\n  {body}\n  output c\n}}\n")
}

const XY: &str = "  input x: f32[N]\n  input y: f32[N]";

#[test]
fn typing_errors_name_the_op_and_where_it_is() {
    let e = err(&fusion(XY, "c = bitwise_and(x, y)"));
    assert!(
        e.starts_with("t.hf:4:7: error: `bitwise_and` works on integer or bool operands"),
        "{e}"
    );
    let e = err(&fusion(
        "  input i: i32[N]",
        "c = bitwise_left_shift(i, 1.5)",
    ));
    assert!(
        e.contains("`bitwise_left_shift` works on i32 operands"),
        "{e}"
    );
    let e = err(&fusion("  input m: bool[N]", "c = m + m"));
    assert!(
        e.contains("t.hf:3:7") && e.contains("`add` needs numbers"),
        "{e}"
    );
    let e = err(&fusion(XY, "c = where(x, y)"));
    assert!(
        e.contains("`where` takes 3 operands, got 2 (written where(cond, a, b))"),
        "{e}"
    );
    let e = err(&fusion(XY, "c = gelu(x, approximate=erf)"));
    assert!(e.contains("t.hf:4:15") && e.contains("`none`"), "{e}");
    let e = err(&fusion(XY, "c = exp(x, axis=0)"));
    assert!(e.contains("`exp` takes no named arguments"), "{e}");
    let e = err(&fusion(XY, "c = x < y < x"));
    assert!(e.contains("comparisons do not chain"), "{e}");
    let e = err(&fusion(XY, "c = frobnicate(x)"));
    assert!(
        e.contains("unknown function `frobnicate`") && e.contains("where"),
        "{e}"
    );
    let e = err("fusion f {\n  input x: f32[N]\n  input s: f32[N] = 1.0\n  c = x\n  output c\n}\n");
    assert!(
        e.contains("t.hf:3:19") && e.contains("only a scalar input"),
        "{e}"
    );
    let e =
        err("fusion f {\n  input x: f32[N]\n  input k: i32 = 1.5\n  c = x * k\n  output c\n}\n");
    assert!(e.contains("not an integer"), "{e}");
}

#[test]
fn comparisons_print_back_to_the_same_program() {
    let src = fusion(XY, "c = where((x < y) == (y >= 0.5), x != y, x <= -y)");
    let p = hopfuse::frontend::parse(&src).unwrap();
    let printed = hopfuse::frontend::print(&p);
    assert_eq!(hopfuse::frontend::parse(&printed).unwrap(), p, "{printed}");
    assert!(printed.contains("(x < y) == (y >= 0.5)"), "{printed}");
}

/// The float64 reference of `body` (defining `c`) over x and y.
fn reference(inputs: &str, body: &str, values: &[(&str, Vec<f64>)]) -> Vec<f64> {
    let src = fusion(inputs, body);
    let program = hopfuse::frontend::parse(&src).unwrap();
    let f = hopfuse::fusion::build(&program.fusion).unwrap_or_else(|d| panic!("{}", d.message));
    let n = values[0].1.len() as i64;
    let sizes = BTreeMap::from([("N".to_string(), n)]);
    let inputs: BTreeMap<String, Vec<f64>> = values
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    hopfuse::backend::reference::evaluate(&f, &sizes, &inputs).unwrap()["c"].clone()
}

#[test]
fn the_reference_follows_torch() {
    let x = vec![-2.5, -0.5, 0.5, 1.5, 2.5, f64::NAN];
    let y = vec![1.0, -1.0, 2.0, 0.5, -3.0, 0.0];
    let xy = |body| reference(XY, body, &[("x", x.clone()), ("y", y.clone())]);
    let round = xy("c = round(x)");
    assert_eq!(round[..5], [-2.0, -0.0, 0.0, 2.0, 2.0]);
    assert!(round[5].is_nan());
    assert_eq!(
        xy("c = cast(x < y, f32)")[..],
        [1.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(
        xy("c = where(x > 0.0, x, y)")[..5],
        [1.0, -1.0, 0.5, 1.5, 2.5]
    );
    assert_eq!(xy("c = remainder(x, y)")[..5], [0.5, -0.5, 0.5, 0.0, -0.5]);
    assert_eq!(xy("c = fmod(x, y)")[..5], [-0.5, -0.5, 0.5, 0.0, 2.5]);
    let clamp = xy("c = clamp(x, -1.0, 1.0)");
    assert_eq!(clamp[..5], [-1.0, -0.5, 0.5, 1.0, 1.0]);
    assert!(clamp[5].is_nan(), "clamp keeps NaN");
    assert_eq!(
        xy("c = cast(isnan(x), f32)")[..],
        [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    );
    assert_eq!(xy("c = sign(x)")[..], [-1.0, -1.0, 1.0, 1.0, 1.0, 0.0]);
    let gelu = xy("c = gelu(y)");
    assert!(
        (gelu[0] - 0.841_344_746_068_542_9).abs() < 1e-15,
        "{gelu:?}"
    );
    let i = vec![-8.0, 5.0, 1.0, 7.0];
    let s = vec![1.0, 2.0, 40.0, -1.0];
    let ints = |body| {
        reference(
            "  input i: i32[N]\n  input s: i32[N]",
            body,
            &[("i", i.clone()), ("s", s.clone())],
        )
    };
    assert_eq!(
        ints("c = bitwise_right_shift(i, s)")[..],
        [-4.0, 1.0, 0.0, 0.0]
    );
    assert_eq!(
        ints("c = bitwise_left_shift(i, s)")[..],
        [-16.0, 20.0, 0.0, 0.0]
    );
    assert_eq!(ints("c = bitwise_xor(i, s)")[..], [-7.0, 7.0, 41.0, -8.0]);
    assert_eq!(ints("c = remainder(i, s)")[..], [0.0, 1.0, 1.0, 0.0]);
    assert_eq!(ints("c = i / s")[..], [-8.0, 2.5, 0.025, -7.0]);
}

#[test]
fn every_op_reaches_cuda_and_the_twin() {
    let cases = [
        ("  input x: f32[N]\n  input y: f32[N]", "c = log(x) + log2(x) + log1p(x) + exp2(x) + expm1(x) + erf(x) + sin(x) + cos(x) + floor(x) + ceil(x) + round(x) + trunc(x) + reciprocal(x) + sign(x) + silu(x) + gelu(x) + gelu(x, approximate=tanh) + softplus(x) + pow(x, y) + fmod(x, y) + remainder(x, y) + clamp(x, -1.0, y) + lerp(x, y, 0.25) + fma(x, y, x)"),
        ("  input x: f32[N]\n  input y: f32[N]", "c = logical_xor(logical_and(x < y, x <= y), logical_or(isnan(x), isinf(y))) != logical_not(x == y)"),
        ("  input i: i32[N]\n  input j: i32[N]", "c = bitwise_and(bitwise_or(i, j), bitwise_not(bitwise_xor(i, j))) + bitwise_left_shift(i, 2) + bitwise_right_shift(j, i) + sign(i) + floor(i)"),
        ("  input m: bool[N]\n  input x: f32[N]", "c = where(bitwise_not(m), x, 0.0) * m"),
    ];
    for (inputs, body) in cases {
        let src = fusion(inputs, body);
        let c = hopfuse::compile(&src, &Default::default())
            .unwrap_or_else(|e| panic!("{}", e.render(&src, "t.hf")));
        assert!(c.cuda.contains("f_kernel"));
        let twin = hopfuse::torch_twin(&src).unwrap_or_else(|e| panic!("{e}"));
        assert!(twin.source.contains("def "), "{}", twin.source);
    }
    let src = fusion(
        XY,
        "c = gelu(x, approximate=tanh) + remainder(x, y) + clamp(x, 0.0, 1.0)",
    );
    let cuda = hopfuse::compile(&src, &Default::default()).unwrap().cuda;
    assert!(
        cuda.contains("hf_gelu_tanh(")
            && cuda.contains("hf_remainder(")
            && cuda.contains("hf_clamp(")
    );
    assert!(
        !cuda.contains("hf_lerp"),
        "only the helpers used are emitted"
    );
    let twin = hopfuse::torch_twin(&src).unwrap().source;
    assert!(
        twin.contains("torch.nn.functional.gelu(x, approximate=\"tanh\")")
            && twin.contains("x % y")
            && twin.contains("torch.clamp(x, 0.0, 1.0)"),
        "{twin}"
    );
    // A comparison computes in its operands' type and gives a bool (read through the register
    // cache `i_c` of the automatic schedule).
    let src = fusion("  input i: i32[N]", "c = cast(i < 2.5, f32)");
    let cuda = hopfuse::compile(&src, &Default::default()).unwrap().cuda;
    assert!(
        cuda.contains("static_cast<float>(i_c[") && cuda.contains("< 2.5f"),
        "{cuda}"
    );
}

#[test]
fn a_scalar_input_with_a_value_passes_it_in_the_plan() {
    let src =
        "fusion f {\n  input x: f32[N]\n  input eps: f32 = 1e-6\n  c = x + eps\n  output c\n}\n";
    let c = hopfuse::compile(src, &Default::default()).unwrap();
    let scalar = c
        .plan
        .params
        .iter()
        .find_map(|p| match p {
            hopfuse::plan::Param::Scalar { name, value, .. } if name == "eps" => Some(*value),
            _ => None,
        })
        .expect("eps is a parameter");
    assert_eq!(scalar, Some(1e-6_f32 as f64));
}

/// The float64 reference of `body` (defining `c`, reduced over axis 1 of `x: f32[M, N]`) on
/// the rows of `rows`.
fn rows_reference(dtype: &str, body: &str, rows: &[Vec<f64>]) -> Vec<f64> {
    let src = format!("fusion f {{\n  input x: {dtype}[M, N]\n  {body}\n  output c\n}}\n");
    let program = hopfuse::frontend::parse(&src).unwrap();
    let f = hopfuse::fusion::build(&program.fusion).unwrap_or_else(|d| panic!("{}", d.message));
    let sizes = BTreeMap::from([
        ("M".to_string(), rows.len() as i64),
        ("N".to_string(), rows.first().map_or(0, |r| r.len()) as i64),
    ]);
    let inputs = BTreeMap::from([("x".to_string(), rows.concat())]);
    hopfuse::backend::reference::evaluate(&f, &sizes, &inputs).unwrap()["c"].clone()
}

#[test]
fn reductions_follow_torch_on_known_values() {
    let rows = vec![vec![1.0, 2.0, 3.0, 4.0], vec![-2.0, 0.5, 0.0, 8.0]];
    let r = |body| rows_reference("f32", body, &rows);
    assert_eq!(r("c = mean(x, axis=1)"), [2.5, 1.625]);
    assert_eq!(r("c = prod(x, axis=1)"), [24.0, -0.0]);
    // torch.var([1, 2, 3, 4]) = 5/3 (Bessel), correction=0: 5/4.
    let v = r("c = var(x, axis=1)");
    assert!((v[0] - 5.0 / 3.0).abs() < 1e-15, "{v:?}");
    assert_eq!(r("c = var(x, axis=1, correction=0)")[0], 1.25);
    // n - correction <= 0: inf (torch clamps the degrees of freedom at 0).
    assert_eq!(r("c = var(x, axis=1, correction=4)")[0], f64::INFINITY);
    assert_eq!(r("c = var(x, axis=1, correction=7)")[0], f64::INFINITY);
    let lse = r("c = logsumexp(x, axis=1)");
    let want = (1f64.exp() + 2f64.exp() + 3f64.exp() + 4f64.exp()).ln();
    assert!((lse[0] - want).abs() < 1e-14, "{lse:?}");
    assert_eq!(r("c = cast(any(x < 0.0, axis=1), f32)"), [0.0, 1.0]);
    assert_eq!(r("c = cast(all(x, axis=1), f32)"), [1.0, 0.0]);
    // logsumexp stays finite far from 0 (the maximum is subtracted) and keeps infinities as
    // torch does.
    let wide = vec![
        vec![1000.0, 1000.0],
        vec![f64::NEG_INFINITY, f64::NEG_INFINITY],
        vec![f64::INFINITY, 1.0],
    ];
    let lse = rows_reference("f32", "c = logsumexp(x, axis=1)", &wide);
    assert!((lse[0] - (1000.0 + 2f64.ln())).abs() < 1e-12, "{lse:?}");
    assert_eq!(lse[1..], [f64::NEG_INFINITY, f64::INFINITY]);
    // One element: the mean is it, the Bessel variance NaN (0 / 0), as torch.
    let one = rows_reference("f32", "c = var(x, axis=1)", &[vec![3.0]]);
    assert!(one[0].is_nan(), "{one:?}");
    assert_eq!(
        rows_reference("f32", "c = mean(x, axis=1)", &[vec![3.0]]),
        [3.0]
    );
    // No elements: sum-like reductions give their identities, the mean 0 / 0.
    let empty = vec![vec![]; 2];
    assert_eq!(
        rows_reference("f32", "c = prod(x, axis=1)", &empty),
        [1.0, 1.0]
    );
    assert_eq!(
        rows_reference("f32", "c = cast(all(x, axis=1), f32)", &empty),
        [1.0, 1.0]
    );
    assert!(rows_reference("f32", "c = mean(x, axis=1)", &empty)[0].is_nan());
    // An i32 maximum stays i32; an i32 mean divides in f32.
    let ints = vec![vec![3.0, -7.0, 5.0]];
    assert_eq!(
        rows_reference("i32", "c = max(x, axis=1) + 1", &ints),
        [6.0]
    );
    assert_eq!(
        rows_reference("i32", "c = mean(x, axis=1)", &ints),
        [1.0 / 3.0]
    );
}

#[test]
fn reduction_typing_and_arguments_are_located_errors() {
    let e = err(&fusion(
        "  input x: f32[M, N]",
        "c = var(x, axis=1, correction=-1)",
    ));
    assert!(
        e.starts_with("t.hf:3:22: error: `correction=` must be a finite number of at least 0"),
        "{e}"
    );
    let e = err(&fusion(
        "  input x: f32[M, N]",
        "c = var(x, axis=1, correction=x)",
    ));
    assert!(e.contains("t.hf:3:22") && e.contains("is a number"), "{e}");
    let e = err(&fusion(
        "  input x: f32[M, N]",
        "c = mean(x, axis=1, correction=0)",
    ));
    assert!(
        e.contains("t.hf:3:23") && e.contains("`mean` takes `axis=`, `axes=`, not `correction=`"),
        "{e}"
    );
    let e = err(&fusion("  input x: f32[M, N]", "c = logsumexp(x)"));
    assert!(
        e.contains("t.hf:3:7") && e.contains("logsumexp needs `axis=`"),
        "{e}"
    );
    let e = err(&fusion("  input x: f32[M, N]", "c = prod(x, axis=2)"));
    assert!(
        e.contains("t.hf:3:20") && e.contains("axis 2 is out of range"),
        "{e}"
    );
    let e = err(&fusion(
        "  input x: f32[N]",
        "c = mean(broadcast(x, axis=0), axis=0)",
    ));
    assert!(
        e.contains("t.hf:3:7") && e.contains("mean: axis 0 of `c_broadcast` is a broadcast axis"),
        "{e}"
    );
    let e = err(&fusion("  input m: bool[M, N]", "c = max(m, axis=1)"));
    assert!(e.contains("`max` needs numbers"), "{e}");
}

#[test]
fn reductions_reach_cuda_and_the_twin_as_torch_calls() {
    let src = "fusion f {\n  input x: bf16[M, N]\n  input k: i32[M, N]\n  input y: f32[B, M, N]\n  a = mean(x, axis=1)\n  b = var(y, axis=[1, 2], correction=0)\n  c = logsumexp(x, axis=1)\n  d = prod(y, axis=[1, 2])\n  e = any(k, axis=1)\n  g = all(k > 0, axis=1)\n  h = max(k, axis=1)\n  output a\n  output b\n  output c\n  output d\n  output e\n  output g\n  output h\n}\n";
    let c = hopfuse::compile(src, &Default::default())
        .unwrap_or_else(|e| panic!("{}", e.render(src, "t.hf")));
    // The mean divides by N read at run time; var's count is M * N, less nothing.
    assert!(c.cuda.contains("/ static_cast<float>(N)"), "{}", c.cuda);
    assert!(
        c.cuda
            .contains("static_cast<float>(M) * static_cast<float>(N)"),
        "{}",
        c.cuda
    );
    let twin = hopfuse::torch_twin(src).unwrap().source;
    for line in [
        "a = torch.mean(x, dim=1, dtype=torch.float32)",
        "b = torch.var(y, dim=(1, 2), correction=0)",
        "c = torch.logsumexp(x.float(), dim=1)",
        "d = torch.prod(torch.prod(y, dim=2), dim=1)",
        "e = torch.any(k, dim=1)",
        "g = torch.all((k > 0), dim=1)",
        "h = torch.amax(k, dim=1)",
    ] {
        assert!(twin.contains(line), "{line}\n{twin}");
    }
    assert!(
        !twin.contains("_sum"),
        "the composites' ops stay out of the twin:\n{twin}"
    );
    // Read by a later statement, a composite's own tensor makes the twin write the ops out,
    // dividing by the input's extent.
    let src =
        "fusion f {\n  input x: f32[M, N]\n  m = var(x, axis=1)\n  c = m + m_sum\n  output c\n}\n";
    let twin = hopfuse::torch_twin(src).unwrap().source;
    assert!(
        twin.contains("max(x.shape[1] - 1, 0)") && twin.contains("x.shape[1]"),
        "{twin}"
    );
}

/// max, min (elementwise and as reductions), relu and clamp propagate NaN as torch.maximum,
/// torch.amax, torch.relu and torch.clamp do, in the float64 reference and in the kernel (PTX
/// `max.NaN` / `min.NaN` in every per-thread, quad and block combine; fmaxf would drop it).
#[test]
fn max_min_relu_and_clamp_propagate_nan_as_torch() {
    let x = vec![1.0, f64::NAN, -2.0, 0.5];
    let y = vec![f64::NAN, 3.0, -1.0, 0.25];
    let xy = |body| reference(XY, body, &[("x", x.clone()), ("y", y.clone())]);
    for body in ["c = max(x, y)", "c = min(x, y)"] {
        let c = xy(body);
        assert!(c[0].is_nan() && c[1].is_nan(), "{body}: {c:?}");
    }
    assert_eq!(xy("c = max(x, y)")[2..], [-1.0, 0.5]);
    assert_eq!(xy("c = min(x, y)")[2..], [-2.0, 0.25]);
    let relu = xy("c = relu(x)");
    assert!(relu[1].is_nan(), "{relu:?}");
    assert_eq!([relu[0], relu[2], relu[3]], [1.0, 0.0, 0.5]);
    // A NaN bound gives NaN too (torch.clamp with tensor bounds).
    let clamp = xy("c = clamp(y, -0.5, x)");
    assert!(clamp[0].is_nan() && clamp[1].is_nan(), "{clamp:?}");
    // hi below lo gives hi, as torch.clamp.
    assert_eq!(clamp[2..], [-2.0, 0.25]);
    // Reductions: a row with a NaN gives NaN, the others their extreme (the identity, -inf or
    // inf, never shows).
    let rows = [vec![1.0, f64::NAN, 3.0], vec![-4.0, -5.0, -6.0]];
    for (op, other) in [("max", -4.0), ("min", -6.0)] {
        let r = rows_reference("f32", &format!("c = {op}(x, axis=1)"), &rows);
        assert!(r[0].is_nan(), "{op}: {r:?}");
        assert_eq!(r[1], other, "{op}");
    }
    // The kernel: elementwise, relu, clamp, a per-thread and a block reduction all through the
    // NaN-propagating helpers.
    let src = "fusion f {\n  input x: f32[M, N]\n  input y: f32[M, N]\n  a = max(x, y) + min(x, y) + relu(x) + clamp(x, 0.0, y)\n  m = max(a, axis=1)\n  n = min(x, axis=1)\n  c = m + n\n  output c\n}\nschedule {\n  m.split(1, 128)\n  m.parallelize(0, BIDx)\n  m.parallelize(2, TIDx)\n  propagate(m)\n  inline_most()\n}\n";
    let cuda = hopfuse::compile(src, &Default::default())
        .unwrap_or_else(|e| panic!("{}", e.render(src, "t.hf")))
        .cuda;
    for needle in [
        "asm(\"max.NaN.f32 %0, %1, %2;\"",
        "asm(\"min.NaN.f32 %0, %1, %2;\"",
        "hf_maximum(x[",
        "hf_minimum(x[",
        "0.0f)",
        "struct hf_max { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return hf_maximum(a, b); } };",
        "struct hf_min {",
        "hf_max(), reinterpret_cast<float*>",
        "hf_min(), reinterpret_cast<float*>",
        "return hf_minimum(hf_maximum(x, lo), hi);",
    ] {
        assert!(cuda.contains(needle), "{needle}\n{cuda}");
    }
    for dropped in ["fmaxf(", "fminf(", "a > b ? a : b; } };"] {
        assert!(!cuda.contains(dropped), "{dropped}\n{cuda}");
    }
    // A sum's block reduction alone emits neither max nor min.
    let src = "fusion f {\n  input x: f32[M, N]\n  c = sum(x, axis=1)\n  output c\n}\nschedule {\n  c.split(1, 128)\n  c.parallelize(0, BIDx)\n  c.parallelize(2, TIDx)\n}\n";
    let cuda = hopfuse::compile(src, &Default::default()).unwrap().cuda;
    assert!(
        !cuda.contains("hf_max") && !cuda.contains("hf_maximum"),
        "{cuda}"
    );
}

#[test]
fn block_reductions_emit_only_the_combines_they_use() {
    let src = "fusion f {\n  input x: f32[M, N]\n  c = any(x, axis=1)\n  output c\n}\nschedule {\n  c.split(1, 128)\n  c.parallelize(0, BIDx)\n  c.parallelize(2, TIDx)\n}\n";
    let cuda = hopfuse::compile(src, &Default::default())
        .unwrap_or_else(|e| panic!("{}", e.render(src, "t.hf")))
        .cuda;
    assert!(
        cuda.contains("struct hf_any") && cuda.contains("hf_any(), reinterpret_cast<bool*>"),
        "{cuda}"
    );
    assert!(
        !cuda.contains("struct hf_prod") && !cuda.contains("struct hf_all"),
        "{cuda}"
    );
}

#[test]
fn argmax_and_argmin_break_ties_and_nan_as_torch() {
    let rows = vec![
        vec![1.0, 3.0, 3.0, -1.0],
        vec![2.0, f64::NAN, 5.0, f64::NAN],
        vec![-1.0, -1.0, -1.0, -1.0],
        vec![f64::NEG_INFINITY, f64::NEG_INFINITY, -7.0, -7.0],
    ];
    // The first maximum; the first NaN when there is one; the first of equal values.
    assert_eq!(
        rows_reference("f32", "c = argmax(x, axis=1)", &rows),
        [1.0, 1.0, 0.0, 2.0]
    );
    assert_eq!(
        rows_reference("f32", "c = argmin(x, axis=1)", &rows),
        [3.0, 1.0, 0.0, 0.0]
    );
    // One element: index 0. Integers: no NaN test, the same ties.
    assert_eq!(
        rows_reference("f32", "c = argmax(x, axis=1)", &[vec![4.0]]),
        [0.0]
    );
    assert_eq!(
        rows_reference("i32", "c = argmin(x, axis=1)", &[vec![5.0, -2.0, -2.0]]),
        [1.0]
    );
    let e = err(&fusion(
        "  input x: f32[M, N]",
        "c = argmax(x, axis=[0, 1])",
    ));
    assert!(
        e.contains("t.hf:3:7") && e.contains("argmax takes one axis (`axis=1`)"),
        "{e}"
    );
    let e = err(&fusion("  input m: bool[M, N]", "c = argmin(m, axis=1)"));
    assert!(e.contains("`argmin` needs numbers"), "{e}");
}

#[test]
fn iota_indexes_one_axis_and_broadcasts_the_others() {
    let rows = vec![vec![0.0; 3]; 2];
    assert_eq!(
        rows_reference(
            "f32",
            "c = cast(iota(x, axis=1) + 10 * iota(x, axis=0), f32)",
            &rows
        ),
        [0.0, 1.0, 2.0, 10.0, 11.0, 12.0]
    );
    assert_eq!(
        rows_reference(
            "f32",
            "c = where(iota(x, axis=1) <= iota(x, axis=0), 1.0, 0.0) + x",
            &rows
        ),
        [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    );
    let e = err(&fusion(
        "  input x: f32[N]",
        "c = iota(broadcast(x, axis=0), axis=0)",
    ));
    assert!(
        e.contains("t.hf:3:7") && e.contains("iota: axis 0 of `c_broadcast` is a broadcast axis"),
        "{e}"
    );
    let e = err(&fusion("  input x: f32[N]", "c = iota(x)"));
    assert!(e.contains("iota needs `axis=`"), "{e}");
    // In the kernel the index is the consumer's root index; in the twin, torch.arange.
    let src = fusion("  input x: f32[M, N]", "c = x * cast(iota(x, axis=1), f32)");
    let cuda = hopfuse::compile(&src, &Default::default()).unwrap().cuda;
    assert!(cuda.contains("static_cast<int>("), "{cuda}");
    let twin = hopfuse::torch_twin(&src).unwrap().source;
    assert!(
        twin.contains("torch.arange(x.shape[1], dtype=torch.int32, device=x.device).view(1, -1)"),
        "{twin}"
    );
    let src = fusion("  input x: bf16[M, N]", "c = argmin(x, axis=1)");
    let twin = hopfuse::torch_twin(&src).unwrap().source;
    assert!(twin.contains("c = torch.argmin(x, dim=1).int()"), "{twin}");
}

#[test]
fn composite_reductions_match_plain_loops_on_drawn_rows() {
    // Rows of small integers (many ties), some with NaN, drawn from a fixed LCG.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as u32
    };
    for case in 0..200 {
        let n = 1 + (next() % 9) as usize;
        let rows: Vec<Vec<f64>> = (0..3)
            .map(|_| {
                (0..n)
                    .map(|_| match next() % 16 {
                        0 if case % 4 == 0 => f64::NAN,
                        k => f64::from(k % 5) - 2.0,
                    })
                    .collect()
            })
            .collect();
        let first = |row: &Vec<f64>, better: fn(f64, f64) -> bool| {
            let mut best = 0;
            for (i, &v) in row.iter().enumerate() {
                if row[best].is_nan() {
                    break;
                }
                if v.is_nan() || better(v, row[best]) {
                    best = i;
                }
            }
            best as f64
        };
        let want_max: Vec<f64> = rows.iter().map(|r| first(r, |v, b| v > b)).collect();
        let want_min: Vec<f64> = rows.iter().map(|r| first(r, |v, b| v < b)).collect();
        assert_eq!(
            rows_reference("f32", "c = argmax(x, axis=1)", &rows),
            want_max,
            "{rows:?}"
        );
        assert_eq!(
            rows_reference("f32", "c = argmin(x, axis=1)", &rows),
            want_min,
            "{rows:?}"
        );
        let finite: Vec<Vec<f64>> = rows
            .iter()
            .map(|r| {
                r.iter()
                    .map(|v| if v.is_nan() { 0.5 } else { *v })
                    .collect()
            })
            .collect();
        let mean = rows_reference("f32", "c = mean(x, axis=1)", &finite);
        let var = rows_reference("f32", "c = var(x, axis=1, correction=0)", &finite);
        let lse = rows_reference("f32", "c = logsumexp(x, axis=1)", &finite);
        for (k, r) in finite.iter().enumerate() {
            let m = r.iter().sum::<f64>() / n as f64;
            let v = r.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n as f64;
            let l = r.iter().map(|x| x.exp()).sum::<f64>().ln();
            assert!((mean[k] - m).abs() < 1e-12, "{r:?}");
            assert!((var[k] - v).abs() < 1e-12, "{r:?}");
            assert!((lse[k] - l).abs() < 1e-12, "{r:?}");
        }
    }
}

#[test]
fn full_makes_a_tensor_of_the_listed_extents() {
    let rows = vec![vec![1.0, 2.0, 3.0]; 2];
    assert_eq!(
        rows_reference("f32", "c = x + full([M, N], 0.5)", &rows),
        [1.5, 2.5, 3.5, 1.5, 2.5, 3.5]
    );
    // An integral value is an i32 (added to an f32 in f32), unless dtype= says otherwise.
    assert_eq!(
        rows_reference("f32", "c = cast(full([M, N], 7) / 2, f32) + 0 * x", &rows),
        [3.5; 6]
    );
    let e = err(&fusion("  input x: f32[M, N]", "c = x + full([M, K], 1.0)"));
    assert!(
        e.contains("t.hf:3:20") && e.contains("size symbol of the fusion's inputs (M, N)"),
        "{e}"
    );
    let e = err(&fusion("  input x: f32[M, N]", "c = x + full([M, 3], 1.0)"));
    assert!(
        e.contains("axis 1 has extent N in one operand and 3 in another"),
        "{e}"
    );
    let e = err(&fusion("  input x: f32[M, N]", "c = x + full([M, N], x)"));
    assert!(
        e.contains("t.hf:3:24") && e.contains("`full`'s value is a number"),
        "{e}"
    );
    let e = err(&fusion(
        "  input x: f32[M, N]",
        "c = x + full([M, N], 1.0, dtype=f77)",
    ));
    assert!(e.contains("expected a dtype"), "{e}");
    let e = err(&fusion("  input x: f32[M, N]", "c = x + full(M, 1.0)"));
    assert!(e.contains("the shape is a list of extents"), "{e}");
    let src = fusion(
        "  input x: bf16[M, N]",
        "c = x * full([M, 4096], 2, dtype=bf16)",
    );
    let src = src.replace("bf16[M, N]", "bf16[M, 4096]");
    let c = hopfuse::compile(&src, &Default::default())
        .unwrap_or_else(|e| panic!("{}", e.render(&src, "t.hf")));
    // A half type has no literal: the value is written in f32 and converted.
    assert!(c.cuda.contains("= hf_float_to_bf16(2.0f);"), "{}", c.cuda);
    let twin = hopfuse::torch_twin(&src).unwrap().source;
    assert!(
        twin.contains("torch.full((x.shape[0], 4096), 2.0, dtype=torch.bfloat16, device=x.device)"),
        "{twin}"
    );
}

/// `tanh(x, approximate=hardware)`: PTX `tanh.approx.f32` in f32, the precise `tanh` in f64 and
/// in the torch twin, and a tolerance of 1e-3 for what is computed from it; a bad value is
/// located.
#[test]
fn tanh_approximate_hardware() {
    let e = err(&fusion(XY, "c = tanh(x, approximate=fast)"));
    assert!(e.contains("t.hf:4:15") && e.contains("`hardware`"), "{e}");
    let src = fusion(XY, "c = 2.0 * tanh(x / y, approximate=hardware) + tanh(y)");
    let cuda = hopfuse::compile(&src, &Default::default()).unwrap().cuda;
    assert!(
        cuda.contains("asm(\"tanh.approx.f32 %0, %1;\"")
            && cuda.contains("hf_tanh_approx(")
            && cuda.contains("tanhf("),
        "one approximate tanh, one precise:\n{cuda}"
    );
    let twin = hopfuse::torch_twin(&src).unwrap().source;
    assert_eq!(twin.matches("torch.tanh(").count(), 2, "{twin}");
    let f = hopfuse::reference_fusion(&src).unwrap();
    let tolerances = hopfuse::backend::reference::tolerance::output_tolerances(&f);
    assert_eq!(tolerances, [("c".to_string(), 1e-3)]);
    // Written with approximate=none, or in f64, it is the precise tanh: f32's own tolerance.
    let src = fusion(XY, "c = tanh(x, approximate=none)");
    let cuda = hopfuse::compile(&src, &Default::default()).unwrap().cuda;
    assert!(!cuda.contains("tanh.approx"), "{cuda}");
    let f = hopfuse::reference_fusion(&src).unwrap();
    assert_eq!(
        hopfuse::backend::reference::tolerance::output_tolerances(&f),
        [("c".to_string(), 1e-5)]
    );
    let src = "fusion f {\n  input x: f64[N]\n  c = tanh(x, approximate=hardware)\n  output c\n}\n";
    let cuda = hopfuse::compile(src, &Default::default()).unwrap().cuda;
    assert!(
        !cuda.contains("tanh.approx") && cuda.contains("tanh("),
        "{cuda}"
    );
}
