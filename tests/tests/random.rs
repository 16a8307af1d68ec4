//! `rand` and `randn` end to end: the float64 reference is the generator of
//! `hopfuse::fusion::philox` at each element's row-major index (so its values do not depend on
//! the schedule; four uniforms or two normals share a call), the CUDA calls the prelude's
//! helpers with that index (through a memo of the last call in a thread's loop), the twin
//! defines the same generator in torch ops, and bad seeds, offsets and shapes are located
//! errors.

use hopfuse::fusion::philox;
use hopfuse_tests::{compile, error};
use std::collections::BTreeMap;

const FUSION: &str = "fusion f {
  input x: f32[M, N]
  input seed: i64
  input offset: i64
  u = rand(x, seed, offset)
  z = randn(x, seed, offset)
  output u
  output z
}
";

fn reference(src: &str, sizes: [i64; 2], scalars: &[(&str, f64)]) -> BTreeMap<String, Vec<f64>> {
    let f = hopfuse::reference_fusion(src).unwrap_or_else(|e| panic!("{}", e.render(src, "t.hf")));
    let sizes = BTreeMap::from([("M".to_string(), sizes[0]), ("N".to_string(), sizes[1])]);
    let mut inputs: BTreeMap<String, Vec<f64>> = scalars
        .iter()
        .map(|(k, v)| (k.to_string(), vec![*v]))
        .collect();
    inputs.insert("x".into(), vec![0.5; (sizes["M"] * sizes["N"]) as usize]);
    hopfuse::backend::reference::evaluate(&f, &sizes, &inputs).unwrap()
}

#[test]
fn the_reference_is_the_generator_at_each_linear_index() {
    let (m, n) = (5, 7);
    // A seed above 2^32 and a negative offset: both halves of the key and counter matter.
    let (seed, offset) = (0x1_2345_6789_i64, -3_i64);
    let out = reference(
        FUSION,
        [m, n],
        &[("seed", seed as f64), ("offset", offset as f64)],
    );
    for i in 0..m * n {
        let want_u = philox::uniform(seed, offset, i);
        assert_eq!(out["u"][i as usize], want_u, "u at {i}");
        // (The float64 reference keeps randn's f64 value; validation allows f32 rounding.)
        let want_z = philox::normal(seed, offset, i);
        assert_eq!(out["z"][i as usize], want_z, "z at {i}");
    }
    // Random123's first known answer: counter 0 and key 0 give the words 0x6627e8d5,
    // 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8: elements 0..3 of rand.
    let zero = reference(FUSION, [1, 4], &[("seed", 0.0), ("offset", 0.0)]);
    let top24 = [0x6627e8u32, 0xe169c5, 0xbc57ac, 0x9b00db];
    let want: Vec<f64> = top24.map(|w| f64::from(w) / 16_777_216.0).to_vec();
    assert_eq!(zero["u"], want);
    // Literal seeds and offsets, and a 1-D shape: the index is the element's.
    let src = "fusion f {\n  input x: f32[N]\n  u = rand(x, 42, 7)\n  output u\n}\n";
    let f = hopfuse::reference_fusion(src).unwrap();
    let out = hopfuse::backend::reference::evaluate(
        &f,
        &BTreeMap::from([("N".to_string(), 9)]),
        &BTreeMap::from([("x".to_string(), vec![0.0; 9])]),
    )
    .unwrap();
    let want: Vec<f64> = (0..9).map(|i| philox::uniform(42, 7, i)).collect();
    assert_eq!(out["u"], want);
}

/// The example's schedule and another (2-D tiles, no vectors): the fusion each compiles is
/// the program's, whose reference values are the same, and both kernels call the generator
/// at the row-major index `m * N + n` computed in 64 bits.
#[test]
fn the_values_do_not_depend_on_the_schedule() {
    let vectorized = format!(
        "{FUSION}schedule {{\n  u.split(1, 4)\n  u.split(1, 32)\n  u.merge(0)\n  u.parallelize(0, BIDx)\n  u.parallelize(1, TIDx)\n  u.parallelize(2, Vectorize)\n  propagate(u)\n  inline_most()\n}}\n"
    );
    let tiled = format!(
        "{FUSION}schedule {{\n  u.split(0, 8)\n  u.split(2, 16)\n  u.reorder(0, 2, 1, 3)\n  u.parallelize(0, BIDy)\n  u.parallelize(1, BIDx)\n  u.parallelize(2, TIDy)\n  u.parallelize(3, TIDx)\n  propagate(u)\n  inline_most()\n}}\n"
    );
    let scalars = [("seed", 99.0), ("offset", 1.0)];
    let mut values = Vec::new();
    for (src, in_loop) in [(&vectorized, true), (&tiled, false)] {
        let c = compile(src);
        // In the vectors' loop each draw keeps its last call in a memo of its own, declared
        // empty before the loop's `#pragma unroll`; a lone lane (the tiles: one element per
        // thread) calls the generator each time.
        let draws = if in_loop {
            [
                "= hf_rand_memo(hf_philox0, seed, offset, ",
                "= hf_randn_memo(hf_philox1, seed, offset, ",
            ]
        } else {
            ["= hf_rand(seed, offset, ", "= hf_randn(seed, offset, "]
        };
        assert!(
            draws.iter().all(|d| c.cuda.contains(d)),
            "{draws:?} in\n{}",
            c.cuda
        );
        let memo_lines: Vec<&str> = c
            .cuda
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("hf_philox_memo "))
            .collect();
        if in_loop {
            assert_eq!(
                memo_lines,
                [
                    "hf_philox_memo hf_philox0 = {};",
                    "hf_philox_memo hf_philox1 = {};"
                ]
            );
            let at = c.cuda.find("hf_philox_memo hf_philox1 = {};").unwrap();
            assert!(
                c.cuda[at..].lines().nth(1).unwrap().trim() == "#pragma unroll",
                "the memos come before the loop's pragma:\n{}",
                c.cuda
            );
        } else {
            assert!(memo_lines.is_empty(), "{memo_lines:?}");
        }
        assert!(
            c.cuda
                .contains("__device__ __forceinline__ float hf_rand(long long seed")
                && c.cuda.contains("0xD2511F53u"),
            "the prelude defines the generator"
        );
        let sizes = [13, 37];
        let f = &c.fusion;
        let sizes_map = BTreeMap::from([("M".to_string(), sizes[0]), ("N".to_string(), sizes[1])]);
        let mut inputs: BTreeMap<String, Vec<f64>> = scalars
            .iter()
            .map(|(k, v)| (k.to_string(), vec![*v]))
            .collect();
        inputs.insert("x".into(), vec![0.0; (sizes[0] * sizes[1]) as usize]);
        values.push(hopfuse::backend::reference::evaluate(f, &sizes_map, &inputs).unwrap());
    }
    assert_eq!(values[0], values[1]);
    assert_eq!(values[0]["u"][37 + 2], philox::uniform(99, 1, 39));
}

#[test]
fn the_twin_draws_the_same_generator_in_torch_ops() {
    let twin = hopfuse::torch_twin(FUSION).unwrap().source;
    assert!(
        twin.contains("def _hf_philox(seed, offset, call):")
            && twin.contains("u = _hf_rand(seed, offset, ")
            && twin.contains("z = _hf_randn(seed, offset, ")
            // The element index, row-major over x's shape, as torch writes it.
            && twin.contains("torch.arange(x.shape[0] * x.shape[1], dtype=torch.int64, device=x.device).view(x.shape[0], x.shape[1])"),
        "{twin}"
    );
    let plain =
        hopfuse::torch_twin("fusion f {\n  input x: f32[N]\n  y = x * 2.0\n  output y\n}\n")
            .unwrap()
            .source;
    assert!(
        !plain.contains("_hf_philox"),
        "only a fusion that draws defines it"
    );
}

#[test]
fn bad_seeds_offsets_and_shapes_are_located_errors() {
    let prog = |body: &str| {
        format!("fusion f {{\n  input x: f32[M, N]\n  input s: f32\n  input k: i32\n  {body}\n  output c\n}}\n")
    };
    let e = error(&prog("c = rand(x, s, 0)"));
    assert!(
        e.contains("t.hf:5:15")
            && e.contains("the seed is an integer or an integer scalar input")
            && e.contains("`s` is a f32"),
        "{e}"
    );
    let e = error(&prog("c = randn(x, k, 0.5)"));
    assert!(
        e.contains("t.hf:5:19") && e.contains("the offset is an integer below 2^53"),
        "{e}"
    );
    let e = error(&prog("c = rand(x, x, 0)"));
    assert!(e.contains("t.hf:5:15") && e.contains("rank 2"), "{e}");
    let e = error(&prog("c = rand(x, k)"));
    assert!(
        e.contains("`rand` takes 3 operands, got 2 (written rand(x, seed, offset))"),
        "{e}"
    );
    let e = error(&prog("c = rand(k, k, k)"));
    assert!(e.contains("has no axis of extent above 1"), "{e}");
    // A size symbol is a count read at run time, not a seed.
    let e = error(&prog("c = rand(x, 1, N)"));
    assert!(
        e.contains("t.hf:5:18") && e.contains("the offset is an integer or an integer scalar input (input offset: i64), not a size"),
        "{e}"
    );
    // An i32 scalar input is a seed (read as i64).
    compile(&prog("c = x * randn(x, k, k)"));
}
