//! Attention written as its math (`examples/attention/`): the online-softmax rule finds the
//! softmax and its product in each example and names the tensor that breaks it in programs it
//! refuses; the online form, evaluated in float64 over tiles of T (ragged ones, rows masked in
//! their first tiles, rows masked throughout), equals the plain form; the automatic schedulers
//! name attention as the reason they decline it.

use hopfuse::fusion::online_softmax::{self, Exponential, OnlineSoftmax};
use hopfuse::fusion::Fusion;
use hopfuse_tests::example;
use std::collections::BTreeMap;

const EXAMPLES: [&str; 4] = [
    "attention/attention.hf",
    "attention/batched.hf",
    "attention/causal.hf",
    "attention/softcap.hf",
];

fn fusion(src: &str) -> Fusion {
    hopfuse::reference_fusion(src).unwrap_or_else(|e| panic!("{}", e.render(src, "t.hf")))
}

/// The pattern the rule finds for the product named `o`.
fn pattern(f: &Fusion, o: &str) -> Result<OnlineSoftmax, String> {
    online_softmax::find(f, f.tensor_by_name(o).expect("the product"))
}

fn names(f: &Fusion, p: &OnlineSoftmax) -> [String; 6] {
    let n = |t: hopfuse::fusion::TensorId| f.tensors[t].name.clone();
    [
        n(p.scores),
        n(p.max),
        n(p.exp),
        n(p.sum),
        n(p.values),
        n(p.result),
    ]
}

#[test]
fn the_rule_finds_each_examples_softmax_and_product() {
    for (path, scores) in EXAMPLES.iter().zip(["s", "s", "sm", "sc"]) {
        let f = fusion(&example(path));
        let p = pattern(&f, "o").unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(names(&f, &p), [scores, "m", "e", "l", "v", "o"], "{path}");
        assert_eq!(p.probs.map(|t| f.tensors[t].name.as_str()), Some("p"));
        assert_eq!(p.exponential, Exponential::Exp);
        // T: the class of the keys' axis (k is [B, T, D] or [T, D]).
        let k = f.tensor_by_name("k").unwrap();
        let keys = f.logical(k);
        assert_eq!(p.axis, f.class_of(keys[keys.len() - 2]), "{path}");
        assert_eq!(online_softmax::find_all(&f), vec![p], "{path}");
        // The first product (over D) consumes no softmax.
        let first = pattern(&f, "s_sum").expect_err("the first product consumes no softmax");
        assert!(first.starts_with("neither factor of `s_sum`"), "{first}");
    }
}

/// Plain attention with the body between `fusion a {` and `output o` replaced.
fn program(body: &str) -> String {
    format!(
        "fusion a {{\n  input q: f32[S, D]\n  input k: f32[T, D]\n  input v: f32[T, D]\n  s = sum(broadcast(q, axis=1) * broadcast(k, axis=0), axis=2)\n{body}\n}}"
    )
}

const SOFTMAX: &str =
    "  m = max(s, axis=1)\n  e = exp(s - broadcast(m, axis=1))\n  l = sum(e, axis=1)";

#[test]
fn the_unnormalised_form_and_exp2_are_accepted() {
    // o = sum(e v) / l, with exp2 (FlashAttention's scale * log2(e) folded into the scores).
    let src = program(&format!(
        "{}\n  u = sum(broadcast(e, axis=2) * broadcast(v, axis=0), axis=1)\n  o = u / broadcast(l, axis=1)\n  output o",
        SOFTMAX.replace("exp(", "exp2(")
    ));
    let f = fusion(&src);
    let p = pattern(&f, "u").unwrap();
    assert_eq!(names(&f, &p), ["s", "m", "e", "l", "v", "o"]);
    assert_eq!((p.probs, p.exponential), (None, Exponential::Exp2));
    // The log-sum-exp reads the final statistics: legal.
    let lse = program(&format!(
        "{SOFTMAX}\n  p = e / broadcast(l, axis=1)\n  o = sum(broadcast(p, axis=2) * broadcast(v, axis=0), axis=1)\n  lse = m + log(l)\n  output o\n  output lse"
    ));
    assert!(pattern(&fusion(&lse), "o").is_ok());
}

#[test]
fn the_rule_names_the_tensor_that_breaks_it() {
    let product = "  p = e / broadcast(l, axis=1)\n  o = sum(broadcast(p, axis=2) * broadcast(v, axis=0), axis=1)\n  output o";
    let cases: Vec<(String, &str, &str)> = vec![
        // The probabilities are an output: the online form never holds all of them.
        (
            format!("{SOFTMAX}\n{product}\n  output p"),
            "o",
            "`p` is an output, but the online softmax never holds all of it",
        ),
        // Another reader of the exponentials.
        (
            format!("{SOFTMAX}\n{product}\n  z = e * 2.0\n  output z"),
            "o",
            "`e` is read by `z`, outside the softmax and its product",
        ),
        // The maximum of other scores than the exponentiated ones.
        (
            format!("  t = s * 2.0\n  m = max(t, axis=1)\n  e = exp(s - broadcast(m, axis=1))\n  l = sum(e, axis=1)\n{product}"),
            "o",
            "`m` is the maximum of `t`, but `e` subtracts it from `s`",
        ),
        // A sum over the other axis.
        (
            ("  m = max(s, axis=1)\n  e = exp(s - broadcast(m, axis=1))\n  l = sum(e, axis=0)\n  p = e / broadcast(l, axis=0)\n  o = sum(broadcast(p, axis=2) * broadcast(v, axis=0), axis=1)\n  output o".to_string()),
            "o",
            "`p` divides by `l`, which is not the sum of `e` over the summed axis",
        ),
        // No maximum subtracted.
        (
            format!("  e = exp(s)\n  l = sum(e, axis=1)\n{product}"),
            "o",
            "`e` takes the exponential of `s`, not of the scores minus their row maximum",
        ),
        // The row maximum read back over T by something else.
        (
            format!("{SOFTMAX}\n{product}\n  d = s - broadcast(m, axis=1)\n  output d"),
            "o",
            "`d` reads the row statistic `m` over the summed axis",
        ),
        // Values that depend on a reduction over T.
        (
            format!("{SOFTMAX}\n  p = e / broadcast(l, axis=1)\n  vm = v - broadcast(sum(v, axis=0), axis=0)\n  o = sum(broadcast(p, axis=2) * broadcast(vm, axis=0), axis=1)\n  output o"),
            "o",
            "the values `vm` depend on `vm_sum`, a reduction over the summed axis",
        ),
        // A product that is not over a softmax.
        (
            format!("{SOFTMAX}\n{product}"),
            "s",
            "neither factor of `s` (`q`, `k`) is a softmax over the summed axis",
        ),
        (
            format!("{SOFTMAX}\n{product}"),
            "m",
            "`m` is not a sum over one axis",
        ),
        // The unnormalised product read by something else than its division.
        (
            format!("{SOFTMAX}\n  u = sum(broadcast(e, axis=2) * broadcast(v, axis=0), axis=1)\n  output u"),
            "u",
            "`u` sums unnormalised exponentials `e`: its only reader must divide it by their row sum",
        ),
    ];
    for (body, product, message) in cases {
        let src = program(&body);
        let err = pattern(&fusion(&src), product).expect_err(&src);
        assert!(err.contains(message), "{src}\nwant: {message}\ngot:  {err}");
    }
}

/// Deterministic values in [-2, 2).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
        })
        .collect()
}

/// The plain reference's `o` and the online form's over tiles of `tile`, for `src` at S x T x D
/// (and B = 3 where there is a batch).
fn plain_and_online(src: &str, (s, t, d): (i64, i64, i64), tile: usize) -> (Vec<f64>, Vec<f64>) {
    let f = fusion(src);
    let sizes: BTreeMap<String, i64> = [
        ("B".into(), 3),
        ("S".into(), s),
        ("T".into(), t),
        ("D".into(), d),
    ]
    .into();
    let mut inputs = BTreeMap::new();
    for (k, &x) in f.inputs.iter().enumerate() {
        let n: i64 = f
            .logical(x)
            .iter()
            .map(|&a| f.class_extent(f.class_of(a)).eval(&sizes).unwrap())
            .product();
        let t = &f.tensors[x];
        let v = match t.value {
            Some(v) => vec![v],
            None => values(n as usize, k as u64 + 1),
        };
        inputs.insert(t.name.clone(), v);
    }
    let plain = hopfuse::reference::evaluate(&f, &sizes, &inputs).unwrap();
    let p = online_softmax::find_all(&f).remove(0);
    let online = hopfuse::reference::online::evaluate(&f, &p, tile, &sizes, &inputs).unwrap();
    (plain[&f.tensors[p.result].name].clone(), online)
}

fn assert_close(plain: &[f64], online: &[f64], what: &str) {
    assert_eq!(plain.len(), online.len(), "{what}");
    for (i, (a, b)) in plain.iter().zip(online).enumerate() {
        let same = (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-12 * a.abs().max(1.0);
        assert!(same, "{what}: element {i}: plain {a}, online {b}");
    }
}

#[test]
fn the_online_form_equals_the_plain_form_at_ragged_tiles() {
    for path in EXAMPLES {
        let src = example(path);
        // T a multiple of the tile, ragged, shorter than one tile; S != T.
        for (shape, tile) in [
            ((5, 32, 4), 8),
            ((5, 37, 4), 8),
            ((3, 5, 2), 16),
            ((7, 40, 3), 1),
            ((40, 33, 8), 32),
        ] {
            let (plain, online) = plain_and_online(&src, shape, tile);
            assert_close(
                &plain,
                &online,
                &format!("{path} at {shape:?}, tile {tile}"),
            );
            assert!(plain.iter().all(|x| x.is_finite()), "{path}");
        }
    }
}

#[test]
fn rows_masked_in_their_first_tiles_need_the_guard() {
    // Anti-causal: query i sees keys i.. only, so row i's first tiles are all -inf when i is
    // past a tile: -inf - -inf would be NaN there without the guard.
    let src = example("attention/causal.hf").replace(
        "keep = iota(s, axis=1) <= iota(s, axis=0)",
        "keep = iota(s, axis=1) >= iota(s, axis=0)",
    );
    let (plain, online) = plain_and_online(&src, (20, 24, 4), 4);
    assert!(plain.iter().all(|x| x.is_finite()));
    assert_close(&plain, &online, "anti-causal, tile 4");
    // Rows past the last key see none: NaN (0 / 0) in both forms, as torch's softmax of a row
    // of -inf.
    let (plain, online) = plain_and_online(&src, (12, 8, 2), 3);
    assert!(plain[8 * 2..].iter().all(|x| x.is_nan()));
    assert!(plain[..8 * 2].iter().all(|x| x.is_finite()));
    assert_close(&plain, &online, "rows with no key");
}

#[test]
fn the_automatic_schedulers_name_attention() {
    for path in EXAMPLES {
        let src = hopfuse::examples::without_schedule(&example(path));
        let reason = match hopfuse::auto_schedule(&src, None).unwrap() {
            Ok(_) => panic!("{path}: an automatic schedule for attention"),
            Err(declined) => declined.reason,
        };
        assert!(
            reason.starts_with("`o` is attention (the softmax `p` over axis "),
            "{path}: {reason}"
        );
        assert!(
            reason.contains(
                "times `v` summed over that axis); no automatic scheduler takes attention yet"
            ),
            "{reason}"
        );
    }
}
