//! The dtypes beyond f32: `f8e4m3`, `f8e5m2`, `i64`, `i8`, `u8` end to end: casts between every
//! pair reach CUDA and the float64 reference, the 8-bit floats' conversions as torch's (NaN or
//! an infinity out of range, or saturating with `saturate=true`), 8-bit integer arithmetic
//! wrapping, promotion errors located, and the twin's torch names.

use hopfuse::DType;
use std::collections::BTreeMap;

use hopfuse_tests::error as err;

fn fusion(inputs: &str, body: &str) -> String {
    format!("fusion f {{\n{inputs}\n  {body}\n  output c\n}}\n")
}

/// The float64 reference of `body` (defining `c`) over `x` (of `dtype`) with these values.
fn reference(dtype: &str, body: &str, x: &[f64]) -> Vec<f64> {
    let src = fusion(&format!("  input x: {dtype}[N]"), body);
    let f =
        hopfuse::reference_fusion(&src).unwrap_or_else(|e| panic!("{}", e.render(&src, "t.hf")));
    let sizes = BTreeMap::from([("N".to_string(), x.len() as i64)]);
    let inputs = BTreeMap::from([("x".to_string(), x.to_vec())]);
    hopfuse::backend::reference::evaluate(&f, &sizes, &inputs).unwrap()["c"].clone()
}

#[test]
fn every_cast_between_every_pair_of_dtypes_compiles_and_evaluates() {
    for from in DType::ALL {
        for to in DType::ALL {
            let src = fusion(
                &format!("  input x: {from}[N]"),
                &format!("c = cast(x, {to})"),
            );
            let c = hopfuse::compile(&src, &Default::default())
                .unwrap_or_else(|e| panic!("{from} -> {to}: {}", e.render(&src, "t.hf")));
            assert!(
                c.cuda.contains(&format!("{}* __restrict__ c", storage(to))),
                "{from} -> {to}:\n{}",
                c.cuda
            );
            let twin = hopfuse::torch_twin(&src).unwrap().source;
            if from != to {
                assert!(twin.contains(&conversion(to)), "{from} -> {to}:\n{twin}");
            }
            let v = reference(from.name(), &format!("c = cast(x, {to})"), &[1.0, 0.0]);
            assert_eq!(v, [1.0, 0.0], "{from} -> {to}");
        }
    }
}

/// How the kernel declares a tensor of `d`.
fn storage(d: DType) -> &'static str {
    match d {
        DType::BF16 => "hf_bf16",
        DType::F16 => "hf_f16",
        d => d.cuda(),
    }
}

/// How the twin converts to `d`.
fn conversion(d: DType) -> String {
    match d {
        DType::F8E4M3 | DType::F8E5M2 => format!(".to(torch.{})", d.torch()),
        DType::Bool => ".bool()".into(),
        DType::U8 => ".byte()".into(),
        DType::I8 => ".char()".into(),
        DType::I32 => ".int()".into(),
        DType::I64 => ".long()".into(),
        DType::BF16 => ".bfloat16()".into(),
        DType::F16 => ".half()".into(),
        DType::F32 => ".float()".into(),
        DType::F64 => ".double()".into(),
    }
}

#[test]
fn fp8_casts_are_torchs_and_saturate_on_request() {
    let x = [
        1000.0,
        460.0,
        464.0,
        470.0,
        -1e9,
        0.1,
        f64::INFINITY,
        f64::NAN,
    ];
    let e4m3 = reference("f32", "c = cast(x, f8e4m3)", &x);
    assert_eq!(e4m3[1..3], [448.0, 448.0]);
    assert_eq!(e4m3[5], 0.1015625); // 0.1 to 1.625 * 2^-4, the nearest e4m3
    for i in [0, 3, 4, 6, 7] {
        assert!(e4m3[i].is_nan(), "{} gives {}", x[i], e4m3[i]);
    }
    let sat = reference("f32", "c = cast(x, f8e4m3, saturate=true)", &x);
    assert_eq!(
        sat[..7],
        [448.0, 448.0, 448.0, 448.0, -448.0, 0.1015625, 448.0]
    );
    assert!(sat[7].is_nan(), "NaN stays NaN");
    let e5m2 = reference("f32", "c = cast(x, f8e5m2)", &[61439.0, 61440.0, -7e4, 0.1]);
    assert_eq!(e5m2, [57344.0, f64::INFINITY, f64::NEG_INFINITY, 0.09375]);
    let sat = reference("f32", "c = cast(x, f8e5m2, saturate=true)", &[1e6, -1e6]);
    assert_eq!(sat, [57344.0, -57344.0]);
    // bf16 reaches e4m3 through f32 (exact), f64 through f32 (as torch converts it).
    assert_eq!(reference("bf16", "c = cast(x, f8e4m3)", &[3.0]), [3.0]);
    assert_eq!(
        reference("f64", "c = cast(x, f8e4m3)", &[1.0 + 1.0 / 16.0 + 1e-12]),
        [1.0]
    );
    // Arithmetic on 8-bit floats happens in f32.
    assert_eq!(reference("f8e4m3", "c = x * 2.0", &[448.0]), [896.0]);
}

#[test]
fn fp8_kernels_convert_through_the_prelude_and_twins_write_torchs_form() {
    let src = fusion(
        "  input x: bf16[N]",
        "c = cast(cast(x, f8e5m2), f32) + cast(cast(x, f8e4m3, saturate=true), f32)",
    );
    let cuda = hopfuse::compile(&src, &Default::default()).unwrap().cuda;
    for needle in [
        "#include <cuda_fp8.h>",
        "hf_float_to_e5m2(hf_bf16_to_float(",
        "hf_e4m3_to_float(",
        "hf_clamp(",
        "-448.0f, 448.0f",
        "fabsf(f) <= 464.0f",
        "fabsf(f) < 61440.0f",
    ] {
        assert!(cuda.contains(needle), "{needle}:\n{cuda}");
    }
    let twin = hopfuse::torch_twin(&src).unwrap().source;
    assert!(
        twin.contains(".to(torch.float8_e5m2)")
            && twin.contains("torch.clamp(x.float(), -448.0, 448.0).to(torch.float8_e4m3fn)"),
        "{twin}"
    );
    // Without an 8-bit float, no header is included (NVRTC alone compiles the kernel).
    let plain = hopfuse::compile(&fusion("  input x: bf16[N]", "c = x"), &Default::default());
    assert!(!plain.unwrap().cuda.contains("#include"));
    // A reduction of an 8-bit float tensor: the twin widens it first (torch reduces none).
    let src = "fusion f {\n  input x: f8e4m3[M, N]\n  c = max(x, axis=1)\n  output c\n}\n";
    let twin = hopfuse::torch_twin(src).unwrap().source;
    assert!(twin.contains("torch.amax(x.float(), dim=1)"), "{twin}");
}

#[test]
fn small_integers_wrap_as_torchs_and_casts_between_integers_wrap() {
    assert_eq!(reference("u8", "c = x + x", &[200.0, 3.0]), [144.0, 6.0]);
    assert_eq!(reference("u8", "c = -x", &[1.0]), [255.0]);
    assert_eq!(
        reference("i8", "c = x * 2", &[100.0, -100.0]),
        [-56.0, 56.0]
    );
    assert_eq!(reference("i8", "c = bitwise_not(x)", &[5.0]), [-6.0]);
    assert_eq!(reference("u8", "c = bitwise_not(x)", &[5.0]), [250.0]);
    assert_eq!(
        reference("i32", "c = cast(x, i8)", &[200.0, -129.0]),
        [-56.0, 127.0]
    );
    assert_eq!(
        reference("f32", "c = cast(x, u8)", &[-1.0, 300.5, f64::NAN]),
        [255.0, 44.0, 0.0]
    );
    assert_eq!(
        reference("f32", "c = cast(x, i8)", &[300.0, -3.7]),
        [127.0, -3.0]
    );
    assert_eq!(reference("i64", "c = x * 3", &[1e15]), [3e15]);
    // A comparison of u8 sees the wrapped sum, as torch's does.
    assert_eq!(
        reference("u8", "c = cast(x + x > 100, i32)", &[200.0]),
        [1.0]
    );
    let cuda = hopfuse::compile(
        &fusion("  input x: u8[N]", "c = x + x > 100"),
        &Default::default(),
    )
    .unwrap()
    .cuda;
    assert!(
        cuda.contains("c_add[n_i] = static_cast<unsigned char>((x_c[n_i] + x_c[n_i]));")
            && cuda.contains("c_c[n_i] = c_add[n_i] > 100;"),
        "{cuda}"
    );
    // i64 literals and helpers.
    let cuda = hopfuse::compile(
        &fusion(
            "  input x: i64[N]",
            "c = remainder(abs(x), 3000000000) + sign(x)",
        ),
        &Default::default(),
    )
    .unwrap()
    .cuda;
    assert!(
        cuda.contains("3000000000LL")
            && cuda.contains("llabs(")
            && cuda.contains("long long hf_remainder"),
        "{cuda}"
    );
}

#[test]
fn dtype_errors_are_located_and_say_what_to_write() {
    let e = err(&fusion("  input a: u8[N]\n  input b: i8[N]", "c = a + b"));
    assert!(
        e.starts_with("t.hf:4:7: error: `add` mixes u8 and i8") && e.contains("cast(x, i32)"),
        "{e}"
    );
    let e = err(&fusion("  input a: u8[N]", "c = a + 256"));
    assert!(
        e.contains("the literal 256 is out of range for u8 (0..=255)"),
        "{e}"
    );
    let e = err(&fusion("  input a: i8[N]", "c = a * -200"));
    assert!(e.contains("out of range for i8"), "{e}");
    let e = err(&fusion(
        "  input a: f32[N]",
        "c = cast(a, i32, saturate=true)",
    ));
    assert!(
        e.contains("t.hf:3:7") && e.contains("`saturate=` is for casts to a float type"),
        "{e}"
    );
    let e = err(&fusion(
        "  input a: f32[N]",
        "c = cast(a, f8e4m3, saturate=yes)",
    ));
    assert!(e.contains("`saturate=` is `true` or `false`"), "{e}");
    let e = err(&fusion("  input a: f32[N]", "c = cast(a, f8)"));
    assert!(e.contains("unknown dtype `f8`"), "{e}");
    let e =
        err("fusion f {\n  input x: f32[N]\n  input s: f8e4m3 = 500\n  c = x * s\n  output c\n}\n");
    assert!(
        e.contains("t.hf:3:21") && e.contains("out of range for f8e4m3 (|x| <= 448)"),
        "{e}"
    );
    let e = err(&fusion("  input a: i64[N]", "c = bitwise_left_shift(a, 1)"));
    assert!(e.contains("works on i32 operands"), "{e}");
    // An integer type within the float type's range needs no clamp to saturate; a wider one
    // does.
    let cuda = |from: &str| {
        let src = fusion(
            &format!("  input a: {from}[N]"),
            "c = cast(a, f8e5m2, saturate=true)",
        );
        hopfuse::compile(&src, &Default::default()).unwrap().cuda
    };
    assert!(!cuda("u8").contains("hf_clamp"));
    assert!(
        cuda("i32").contains("hf_clamp(a_c[n_i], -57344, 57344)"),
        "{}",
        cuda("i32")
    );
}

#[test]
fn scalar_inputs_of_the_new_types_pass_in_their_compute_type() {
    let src = "fusion f {\n  input x: u8[N]\n  input k: u8 = 7\n  input s: f8e4m3 = 2\n  c = cast(x + k, f32) * s\n  output c\n}\n";
    let cuda = hopfuse::compile(src, &Default::default()).unwrap().cuda;
    assert!(
        cuda.contains("unsigned char k") && cuda.contains("float s"),
        "{cuda}"
    );
}
