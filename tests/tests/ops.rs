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
    hopfuse::reference::evaluate(&f, &sizes, &inputs).unwrap()["c"].clone()
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
    // A comparison computes in its operands' type and gives a bool.
    let src = fusion("  input i: i32[N]", "c = cast(i < 2.5, f32)");
    let cuda = hopfuse::compile(&src, &Default::default()).unwrap().cuda;
    assert!(
        cuda.contains("static_cast<float>(i[") && cuda.contains("< 2.5f"),
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
