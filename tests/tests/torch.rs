//! The PyTorch twins (`hopfuse compile --torch`): every example's twin is a golden output, is
//! valid Python, and computes what the float64 reference computes, checked by running it under
//! `python3` against the pure-Python stand-in for torch (`runner/peers/fake_torch`, which
//! rounds every value to its dtype and rejects mixed-dtype ops) at small sizes; with
//! `HOPFUSE_TEST_TORCH_PYTHON=/path/to/python` against the real torch (on the CPU) instead.
//! Update the snapshots with `INSTA_UPDATE=always cargo test -p hopfuse-tests --test torch`.

use hopfuse::fusion::{Fusion, IterKind, Op, Operand};
use hopfuse::DType;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `(group__stem, path)` of every `examples/<group>/*.hf`.
fn examples() -> Vec<(String, PathBuf)> {
    hopfuse_tests::examples()
        .into_iter()
        .map(|e| (format!("{}__{}", e.group, e.name), e.path))
        .collect()
}

fn twin(path: &Path) -> (hopfuse::backend::torch::Twin, Fusion) {
    let src = std::fs::read_to_string(path).unwrap();
    let twin = hopfuse::torch_twin(&src)
        .unwrap_or_else(|e| panic!("{}", e.render(&src, &path.display().to_string())));
    let program = hopfuse::frontend::parse(&src).unwrap();
    (twin, hopfuse::fusion::build(&program.fusion).unwrap())
}

#[test]
fn every_example_twin_matches_its_golden_output() {
    let files = examples();
    assert!(files.len() >= 10, "found only {} examples", files.len());
    for (name, path) in files {
        insta::assert_snapshot!(name, twin(&path).0.source);
    }
}

/// The block-scaled FP8 examples' `torch._scaled_mm` peers (the runner's `--peers`) are golden
/// outputs too: the scale layouts cuBLAS's block-scaled path takes.
#[test]
fn block_scaled_examples_scaled_mm_peers_match_their_golden_output() {
    for stem in [
        "step18_fp8_block",
        "step18_fp8_block_overlap",
        "step21_fp8_block_split_k",
    ] {
        let path = repo().join(format!("examples/matmul/{stem}.hf"));
        let f = twin(&path).1;
        let peer = hopfuse::backend::torch::emit_scaled_mm(&f)
            .unwrap_or_else(|| panic!("{stem}: no _scaled_mm peer"));
        insta::assert_snapshot!(format!("scaled_mm__matmul__{stem}"), peer.source);
    }
}

/// Small distinct sizes, so a reduction over the wrong axis or a transposed operand shows.
const SIZES: [i64; 6] = [3, 5, 4, 2, 6, 7];

/// Deterministic values in [-1, 1) rounded to the dtype; integers in ±1..8 (as the runner's).
fn values(dtype: DType, n: usize, seed: u64) -> Vec<f64> {
    (0..n as u64)
        .map(|i| {
            let h = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed.wrapping_mul(0xBF58_476D);
            let u = (h >> 11) as f64 / (1u64 << 53) as f64;
            match dtype {
                DType::I32 => (1 + (h % 8) as i64) as f64 * if h & 256 == 0 { 1.0 } else { -1.0 },
                d => d.round(u * 2.0 - 1.0),
            }
        })
        .collect()
}

fn shape(f: &Fusion, t: hopfuse::fusion::TensorId, sizes: &BTreeMap<String, i64>) -> Vec<usize> {
    f.logical(t)
        .iter()
        .map(|&id| match f.ids[id].kind {
            IterKind::Broadcast => 1,
            _ => f.class_extent(f.class_of(id)).eval(sizes).unwrap() as usize,
        })
        .collect()
}

fn py_list<T: ToString>(v: &[T]) -> String {
    format!(
        "[{}]",
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Runs a twin on `inputs` under the fake torch; each output as (dtype name, shape, values).
fn run_twin(
    twin: &hopfuse::backend::torch::Twin,
    inputs: &[(DType, Vec<usize>, Vec<f64>)],
) -> Vec<(String, Vec<usize>, Vec<f64>)> {
    let mut script = String::from("import sys, torch\n");
    script += &format!(
        "code = compile({:?}, 'twin.py', 'exec')\nns = {{}}\nexec(code, ns)\nargs = []\n",
        twin.source
    );
    for (dtype, shape, vals) in inputs {
        let vals: Vec<String> = vals.iter().map(|v| format!("{v:?}")).collect();
        script += &format!(
            "args.append(torch.tensor({}, dtype=torch.float64).reshape(tuple({})).to({}))\n",
            py_list(&vals),
            py_list(shape),
            hopfuse::backend::torch::torch_dtype(*dtype)
        );
    }
    script += &format!(
        "outs = ns[{:?}](*args)\nouts = outs if isinstance(outs, tuple) else (outs,)\n\
         for o in outs:\n    name = str(o.dtype).replace('torch.', '')\n    flat = o.double().reshape(-1).tolist()\n    print(name, ' '.join(map(str, o.shape)), '|', ' '.join(repr(v) for v in flat))\n",
        twin.function
    );
    // `HOPFUSE_TEST_TORCH_PYTHON`: a Python with the real torch instead of the fake one.
    let real = std::env::var("HOPFUSE_TEST_TORCH_PYTHON").ok();
    let fake = repo().join("runner/peers/fake_torch");
    let mut child = Command::new(real.as_deref().unwrap_or("python3"))
        .arg("-")
        .env("PYTHONPATH", if real.is_some() { "".into() } else { fake })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 is needed to check the torch twins (CI machines have it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python3 failed on the twin:\n{}\n{}",
        twin.source,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (head, vals) = line.split_once(" | ").unwrap_or((line, ""));
            let mut head = head.split(' ');
            let dtype = head.next().unwrap().to_string();
            let shape = head.filter(|s| !s.is_empty()).map(|s| s.parse().unwrap());
            let vals = vals.split(' ').filter(|s| !s.is_empty());
            (
                dtype,
                shape.collect(),
                vals.map(|v| v.parse().unwrap()).collect(),
            )
        })
        .collect()
}

/// The relative L2 error of `got`, with the runner's rule for non-finite reference elements
/// (`runner/src/validate.rs`): each must be matched exactly (NaN by NaN: a row of attention
/// whose keys are all masked) and stays out of the sums; NaN when one is not.
fn rel_l2(got: &[f64], want: &[f64]) -> f64 {
    let (mut diff, mut norm) = (0.0, 0.0);
    for (&g, &w) in got.iter().zip(want) {
        if !w.is_finite() {
            if !(g == w || (g.is_nan() && w.is_nan())) {
                return f64::NAN;
            }
            continue;
        }
        diff += (g - w) * (g - w);
        norm += w * w;
    }
    (diff / f64::max(norm, f64::MIN_POSITIVE)).sqrt()
}

/// Checks one program's twins against the reference; `what` names it in failures. Returns
/// whether it had a cuBLASLt twin too.
fn check_against_reference(src: &str, what: &str) -> bool {
    let program = hopfuse::frontend::parse(src).unwrap();
    let f = hopfuse::fusion::build(&program.fusion).unwrap();
    let twin = hopfuse::backend::torch::emit(&f, Some(&program.fusion));
    let sizes: BTreeMap<String, i64> = f.symbols.iter().cloned().zip(SIZES).collect();
    let mut named = BTreeMap::new();
    let mut inputs = Vec::new();
    // An index of a gather draws values inside the gathered axis (torch raises outside it;
    // the kernel and the reference clamp, which tests/gather.rs checks).
    let index_extent = |t| {
        f.exprs.iter().find_map(|e| match (&e.op, &e.inputs[..]) {
            (Op::Gather { axis, .. }, [Operand::Tensor(x), Operand::Tensor(index)])
                if hopfuse::fusion::build::index_source(&f, *index) == Some(t) =>
            {
                Some(shape(&f, *x, &sizes)[*axis] as f64)
            }
            _ => None,
        })
    };
    for (k, &t) in f.inputs.iter().enumerate() {
        let s = shape(&f, t, &sizes);
        let mut v = values(f.tensors[t].dtype, s.iter().product(), k as u64 + 1);
        if let Some(n) = index_extent(t) {
            v.iter_mut().for_each(|x| *x = x.rem_euclid(n));
        }
        named.insert(f.tensors[t].name.clone(), v.clone());
        inputs.push((f.tensors[t].dtype, s, v));
    }
    let want = hopfuse::backend::reference::evaluate(&f, &sizes, &named).unwrap();
    let mut twins = vec![twin];
    // A matrix product with a bias epilogue also has its cuBLASLt twin: it must agree too.
    twins.extend(hopfuse::backend::torch::emit_cublaslt(&f).map(|(t, _)| t));
    for twin in &twins {
        check_twin(&f, twin, &inputs, &want, &sizes, what);
    }
    twins.len() == 2
}

fn check_twin(
    f: &Fusion,
    twin: &hopfuse::backend::torch::Twin,
    inputs: &[(DType, Vec<usize>, Vec<f64>)],
    want: &BTreeMap<String, Vec<f64>>,
    sizes: &BTreeMap<String, i64>,
    what: &str,
) {
    let got = run_twin(twin, inputs);
    assert_eq!(got.len(), f.outputs.len(), "{what}: outputs");
    for ((dtype, shp, vals), &t) in got.iter().zip(&f.outputs) {
        let tensor = &f.tensors[t];
        let expect = torch_name(tensor.dtype);
        assert_eq!(
            (dtype.as_str(), shp),
            (expect, &shape(f, t, sizes)),
            "{what}: `{}`",
            tensor.name
        );
        let err = rel_l2(vals, &want[&tensor.name]);
        assert!(
            err <= tensor.dtype.tolerance().max(1e-12),
            "{what}: `{}` relative L2 error {err:e}\n{}",
            tensor.name,
            twin.source
        );
    }
}

fn torch_name(d: DType) -> &'static str {
    d.torch()
}

#[test]
fn every_example_twin_parses_and_computes_the_reference() {
    for (name, path) in examples() {
        let src = std::fs::read_to_string(&path).unwrap();
        check_against_reference(&src, &name);
    }
}

/// Programs beyond the examples: every op, every reduction, mixed dtypes, scalar inputs,
/// contractions in other layouts (batched, transposed, with a batch axis last), names that are
/// Python keywords.
#[test]
fn other_programs_compute_the_reference() {
    let programs = [
        "fusion ops {\n  input x: f32[M, N]\n  input k: i32[M, N]\n  a = sigmoid(x) + rsqrt(abs(x) + 1.0) - tanh(neg(x))\n  b = max(x, k) / (min(relu(x), 0.25) + 1.0) + sqrt(exp(x))\n  c = k * 3 - abs(k)\n  output a\n  output b\n  output c\n}",
        "fusion reductions {\n  input x: bf16[B, M, N]\n  s = sum(x, axis=[0, 2])\n  m = min(x, axis=1)\n  t = max(cast(x, f16), axis=[1, 2])\n  y = broadcast(s, axis=[0, 2]) * broadcast(t, axis=[1, 2])\n  output y\n  output m\n}",
        "fusion scalars {\n  input x: f16[M]\n  input alpha: f64\n  input lambda: bf16\n  y = cast(x, f64) * alpha + lambda\n  output y\n}",
        "fusion gemm_bias {\n  input a: f16[K, M]\n  input b: f16[K, N]\n  input bias: f32[N]\n  p = broadcast(a, axis=2) * broadcast(cast(b, f32), axis=1)\n  c = sum(p, axis=0) + broadcast(bias, axis=0)\n  output c\n}",
        "fusion gemm_f32_out {\n  input a: bf16[M, K]\n  input b: bf16[K, N]\n  input bias: f32[N]\n  s = sum(broadcast(a, axis=2) * broadcast(b, axis=0), axis=1)\n  y = relu(s + broadcast(bias, axis=0))\n  output y\n}",
        "fusion batched {\n  input a: f64[B, M, K]\n  input b: f64[B, K, N]\n  c = sum(broadcast(a, axis=3) * broadcast(b, axis=1), axis=2)\n  output c\n}",
        "fusion scores {\n  input q: f32[B, H, M, K]\n  input k: f32[B, H, N, K]\n  c = sum(broadcast(q, axis=3) * broadcast(k, axis=2), axis=4)\n  output c\n}",
        "fusion batched_f32_out {\n  input a: bf16[B, K, M]\n  input b: bf16[B, K, N]\n  s = sum(broadcast(a, axis=3) * broadcast(b, axis=2), axis=1)\n  c = s * 2.0\n  output c\n}",
        "fusion batched2_f32_out {\n  input a: f16[B, H, M, K]\n  input b: f16[B, H, K, N]\n  s = sum(broadcast(a, axis=4) * broadcast(b, axis=2), axis=3)\n  c = s + 1.0\n  output c\n}",
        "fusion batch_last {\n  input a: f32[M, K, B]\n  input b: f32[K, N, B]\n  c = sum(broadcast(a, axis=2) * broadcast(b, axis=0), axis=1)\n  output c\n}",
        "fusion int_gemm {\n  input a: i32[M, K]\n  input b: i32[K, N]\n  c = sum(broadcast(a, axis=2) * broadcast(b, axis=0), axis=1)\n  output c\n}",
        "fusion gemm_bias_gelu {\n  input a: bf16[M, K]\n  input b: bf16[N, K]\n  input bias: bf16[N]\n  s = sum(broadcast(a, axis=1) * broadcast(b, axis=0), axis=2)\n  u = s + broadcast(bias, axis=0)\n  y = cast(0.5 * u * (1.0 + tanh(0.7978845608 * (u + 0.044715 * u * u * u))), bf16)\n  output y\n}",
        "fusion gemm_relu_f32 {\n  input a: f32[K, M]\n  input b: f32[K, N]\n  input bias: f32[N]\n  y = relu(sum(broadcast(a, axis=2) * broadcast(b, axis=1), axis=0) + broadcast(bias, axis=0))\n  output y\n}",
        "fusion copies {\n  input x: f32[M, N]\n  y = x\n  z = cast(x, f32)\n  output y\n  output z\n}",
    ];
    let with_cublaslt: Vec<&str> = programs
        .iter()
        .filter(|src| check_against_reference(src, src.lines().next().unwrap()))
        .map(|src| src.lines().next().unwrap())
        .collect();
    assert_eq!(
        with_cublaslt,
        ["fusion gemm_bias_gelu {", "fusion gemm_relu_f32 {"]
    );
}

/// What a PyTorch user writes, since the peers time it (issue 33): a reduction or a norm is a
/// product then a sum, never an einsum or a GEMM (an RMSNorm's sum of squares as an einsum ran
/// as a batched matmul: the page said x4.95 for hopfuse, where `(xf * xf).sum(-1)` under
/// torch.compile beats it), and the matrix products stay GEMMs.
#[test]
fn reductions_and_norms_are_reductions_and_matrix_products_are_gemms() {
    let reductions = [
        // RMSNorm: the sum of squares of the f32 row, bf16 in and out, a weight.
        "fusion rmsnorm {\n  input x: bf16[M, N]\n  input w: bf16[N]\n  xf = cast(x, f32)\n  ss = sum(xf * xf, axis=1)\n  r = rsqrt(ss * 0.25 + 0.000001)\n  y = cast(xf * broadcast(r, axis=1) * broadcast(cast(w, f32), axis=0), bf16)\n  output y\n}",
        // Softmax in bf16 with a scale, its row sum weighted by a mask.
        "fusion softmax {\n  input x: bf16[M, N]\n  input mask: f32[M, N]\n  xf = cast(x, f32) * 0.125\n  m = max(xf, axis=1)\n  e = exp(xf - broadcast(m, axis=1)) * mask\n  s = sum(e * mask, axis=1)\n  y = cast(e / broadcast(s, axis=1), bf16)\n  output y\n}",
        // Sums of squares over the last axis, the first, and two, of a 3-D tensor.
        "fusion squares {\n  input x: f32[B, M, N]\n  a = sum(x * x, axis=2)\n  b = sum(x * x, axis=0)\n  c = sum(x * x, axis=[0, 2])\n  output a\n  output b\n  output c\n}",
        // A dot of same-shaped rows in f16, a matrix-vector product, a weighted column sum.
        "fusion dots {\n  input p: f16[M, N]\n  input q: f16[M, N]\n  input v: f32[N]\n  d = sum(cast(p, f32) * cast(q, f32), axis=1)\n  mv = sum(cast(p, f32) * broadcast(v, axis=0), axis=1)\n  cs = sum(broadcast(v, axis=0) * cast(q, f32), axis=0)\n  output d\n  output mv\n  output cs\n}",
    ];
    for src in reductions {
        let what = src.lines().next().unwrap();
        let program = hopfuse::frontend::parse(src).unwrap();
        let f = hopfuse::fusion::build(&program.fusion).unwrap();
        let twin = hopfuse::backend::torch::emit(&f, Some(&program.fusion)).source;
        for gemm in ["einsum", "@", "matmul", "torch.mm(", "bmm"] {
            assert!(!twin.contains(gemm), "{what}: `{gemm}` in\n{twin}");
        }
        assert!(twin.contains("torch.sum("), "{what}:\n{twin}");
        check_against_reference(src, what);
    }
    let gemms: Vec<(String, String)> = examples()
        .into_iter()
        .filter(|(name, _)| name.starts_with("matmul__") || name.starts_with("basics__matmul"))
        .map(|(name, path)| (name, twin(&path).0.source))
        .collect();
    assert!(
        gemms.len() >= 17,
        "found only {} matmul examples",
        gemms.len()
    );
    for (name, twin) in gemms {
        assert!(
            !twin.contains("einsum") && (twin.contains(" @ ") || twin.contains("torch.mm(")),
            "{name}:\n{twin}"
        );
    }
}

#[test]
fn a_program_error_is_located() {
    let err = hopfuse::torch_twin("fusion f {\n  input x: f32[N]\n  y = nope(x)\n  output y\n}")
        .unwrap_err();
    assert_eq!((err.0[0].line, err.0[0].column), (3, 7), "{err:?}");
}
