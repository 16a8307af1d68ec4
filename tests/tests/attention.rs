//! Attention written as its math (`examples/attention/`): the online-softmax rule finds the
//! softmax and its product in each example and names the tensor that breaks it in programs it
//! refuses; the online form, evaluated in float64 over tiles of T (ragged ones, rows masked in
//! their first tiles, rows masked throughout), equals the plain form; the automatic schedulers
//! name attention as the reason they decline it.

use hopfuse::fusion::online_softmax::{self, Exponential, OnlineSoftmax};
use hopfuse::fusion::Fusion;
use hopfuse_tests::{example, values};
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
    let inputs = inputs(&f, &sizes);
    let plain = hopfuse::backend::reference::evaluate(&f, &sizes, &inputs).unwrap();
    let p = online_softmax::find_all(&f).remove(0);
    let online =
        hopfuse::backend::reference::online::evaluate(&f, &p, tile, &sizes, &inputs).unwrap();
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
    // The f32 examples are attention the attention scheduler declines for their dtype (the
    // softcap's too: a score modification is a form it takes, `auto_attention.rs`).
    for path in EXAMPLES {
        let src = hopfuse::examples::without_schedule(&example(path));
        let reason = match hopfuse::auto_schedule(&src, None).unwrap() {
            Ok(_) => panic!("{path}: an automatic schedule for f32 attention"),
            Err(declined) => declined.reason,
        };
        assert!(
            reason.starts_with(
                "`o` is attention of f32 `q`, `k`, `v`; its tensor-core kernel takes bf16 or f16"
            ),
            "{path}: {reason}"
        );
    }
}

// ---- The primitive `online_softmax(o)` and its lowering on CUDA cores.

const ONLINE_EXAMPLES: [(&str, &str); 2] = [
    ("attention/online.hf", "attention/attention.hf"),
    ("attention/online_causal.hf", "attention/causal.hf"),
];

/// Every input of `f` at `sizes`, deterministic.
fn inputs(f: &Fusion, sizes: &BTreeMap<String, i64>) -> BTreeMap<String, Vec<f64>> {
    let mut out = BTreeMap::new();
    for (k, &x) in f.inputs.iter().enumerate() {
        let n: i64 = f
            .logical(x)
            .iter()
            .map(|&a| f.class_extent(f.class_of(a)).eval(sizes).unwrap())
            .product();
        let t = &f.tensors[x];
        let v = match t.value {
            Some(v) => vec![v],
            None => values(n as usize, k as u64 + 1),
        };
        out.insert(t.name.clone(), v);
    }
    out
}

#[test]
fn the_online_examples_compute_the_plain_examples_math() {
    // The reference evaluates the math, not the schedule: the online examples' programs are
    // the attention of the plain examples (at D = 64, their constant), at a bench-like and a
    // ragged size, and their online form over the schedule's tile of 32 keys equals both.
    for (online, plain) in ONLINE_EXAMPLES {
        let (fo, fp) = (fusion(&example(online)), fusion(&example(plain)));
        for (s, t) in [(64, 96), (70, 37), (5, 100)] {
            let sizes: BTreeMap<String, i64> =
                [("S".into(), s), ("T".into(), t), ("D".into(), 64)].into();
            let ins = inputs(&fp, &sizes);
            let got = hopfuse::backend::reference::evaluate(&fo, &sizes, &ins).unwrap();
            let want = hopfuse::backend::reference::evaluate(&fp, &sizes, &ins).unwrap();
            assert_close(&want["o"], &got["o"], &format!("{online} at S={s}, T={t}"));
            assert!(want["o"].iter().all(|x| x.is_finite()), "{plain}");
            let p = online_softmax::find_all(&fo).remove(0);
            let tiled =
                hopfuse::backend::reference::online::evaluate(&fo, &p, 32, &sizes, &ins).unwrap();
            assert_close(
                &want["o"],
                &tiled,
                &format!("{online} tiled at S={s}, T={t}"),
            );
        }
    }
}

/// The line of `cuda` that starts (indentation aside) with `needle`, or a panic.
fn line_of(cuda: &str, needle: &str) -> usize {
    cuda.lines()
        .position(|l| l.trim_start().starts_with(needle))
        .unwrap_or_else(|| panic!("no line starting `{needle}` in\n{cuda}"))
}

#[test]
fn the_online_kernel_keeps_running_statistics_in_one_tile_loop() {
    for (online, _) in ONLINE_EXAMPLES {
        let c = hopfuse_tests::compile(&example(online));
        let cuda = &c.cuda;
        // One serial loop over ceilDiv(T, 32) key tiles (under the causal mask, those up to the
        // query tile's diagonal: `causal_tiles_stop_at_the_diagonal_and_mask_only_it`), and no
        // loop over the whole of T.
        let tiles = if online.contains("causal") {
            "for (index_t t_o = 0; t_o < hf_min<index_t>(hf_ceil_div<index_t>(T, 32), 2 * (s2_o + 1)); ++t_o)"
        } else {
            "for (index_t t_o = 0; t_o < hf_ceil_div<index_t>(T, 32); ++t_o)"
        };
        assert_eq!(cuda.matches(tiles).count(), 1, "{online}");
        assert!(!cuda.contains("t < T;"), "{online}");
        assert!(!cuda.contains("expf("), "{online}");
        // In it, in order: the tiles to shared memory, the maximum, the guarded m, the rescale,
        // the exponentials, the sum and the product; the division after it.
        let order = [
            "for (index_t t_o = 0;",
            "kc[t_ido * 64 + t_idi] = k[",
            "vc[t_id2o * 64 + t_id2i] = v[",
            "__syncthreads();",
            "m_prev[0] = m_acc[0];",
            "m_acc[0] = hf_maximum(m_acc[0], ",
            "m[0] = (m_acc[0] == __int_as_float(0xff800000)) ? 0.0f : m_acc[0];",
            // The softmax in base 2: -m log2(e) once per row, each exponential one FMA and
            // exp2.
            "m_neg_log2[0] = m[0] * -1.442695f;",
            "m_scale[0] = hf_exp2_ftz(fmaf(m_prev[0], 1.442695f, m_neg_log2[0]));",
            "l_acc[0] = l_acc[0] * m_scale[0];",
            "o_acc[d2] = o_acc[d2] * m_scale[0];",
            "e_broadcast[0] = m_neg_log2[0];",
            "e_sub[0] = fmaf(",
            "e[t_i] = hf_exp2_ftz(e_sub[0]);",
            "l_acc[0] = l_acc[0] + e[t_i];",
            "o_acc[d2] = o_acc[d2] + o_mul[0];",
            "o[(s2_o * 64 + s2_i) * 64 + d2] = o_acc[d2] * (1.0f / (l_acc[0]));",
        ];
        let lines: Vec<usize> = order.iter().map(|n| line_of(cuda, n)).collect();
        assert!(
            lines.windows(2).all(|w| w[0] < w[1]),
            "{online}: {lines:?}\n{cuda}"
        );
        // Ragged T: the key's bound guards the maximum, the sum and the product.
        for update in [
            "m_acc[0] = hf_maximum(",
            "l_acc[0] = l_acc[0] + e",
            "o_acc[d2] = o_acc[d2] + o_mul",
        ] {
            let at = line_of(cuda, update);
            let guard = cuda.lines().nth(at - 1).unwrap();
            assert!(
                guard.contains("t_o * 32 + t_i < T"),
                "{online}: `{update}` under `{guard}`"
            );
        }
        // Each block fills its own shared tiles: no block-index predicate on the copies.
        let copy = cuda
            .lines()
            .nth(line_of(cuda, "kc[t_ido * 64 + t_idi] = k[") - 1)
            .unwrap();
        assert!(!copy.contains("blockIdx"), "{copy}");
    }
}

#[test]
fn without_the_primitive_the_scores_of_all_of_t_are_kept() {
    // The same schedule without online_softmax(o): the maximum over T must finish before the
    // exponentials start, so the scores of the whole row are kept, which registers cannot.
    let src = example("attention/online.hf").replace("  online_softmax(o)\n", "");
    let e = compile_error(&src);
    assert!(
        e.contains("register tensor `s` needs ceilDiv(T, 32) * 32 elements per thread"),
        "{e}"
    );
}

/// The first error of compiling `src`, rendered (`t.hf:line:column: message`).
fn compile_error(src: &str) -> String {
    match hopfuse::compile(src, &Default::default()) {
        Ok(_) => panic!("expected an error for:\n{src}"),
        Err(e) => e.render(src, "t.hf"),
    }
}

/// online.hf with its schedule's statement `from` replaced by `to` (and its copies made by one
/// thread, so that schedules without the split still apply).
fn online_with(from: &str, to: &str) -> String {
    let src = example("attention/online.hf")
        .replace(
            "  kc.merge(1)\n  kc.split(1, 64)\n  kc.parallelize(2, TIDx)\n",
            "",
        )
        .replace(
            "  vc.merge(1)\n  vc.split(1, 64)\n  vc.parallelize(2, TIDx)\n",
            "",
        );
    assert!(src.contains(from), "{from}");
    src.replacen(from, to, 1)
}

/// Where `stmt` starts in `src`: `t.hf:line:column`.
fn located(src: &str, stmt: &str) -> String {
    let at = src.find(stmt).unwrap_or_else(|| panic!("no `{stmt}`"));
    let line = src[..at].lines().count() + usize::from(src[..at].ends_with('\n'));
    let column = at - src[..at].rfind('\n').map_or(0, |n| n + 1) + 1;
    format!("t.hf:{line}:{column}")
}

#[test]
fn online_softmax_errors_name_the_tensor_and_the_statement() {
    // The rule's refusals, prefixed with the statement and located on it.
    let src = online_with("online_softmax(o)", "online_softmax(s_sum)");
    let e = compile_error(&src);
    assert!(
        e.contains("online_softmax(...): neither factor of `s_sum`"),
        "{e}"
    );
    assert!(e.contains(&located(&src, "s_sum)")), "{e}");

    let src = online_with("online_softmax(o)", "online_softmax(o2)");
    let e = compile_error(&src);
    assert!(e.contains("unknown tensor `o2`"), "{e}");

    let src = online_with(
        "online_softmax(o)",
        "online_softmax(o)\n  online_softmax(o)",
    );
    let e = compile_error(&src);
    assert!(
        e.contains("online_softmax(...): the softmax `o` consumes is already online (an earlier online_softmax statement)"),
        "{e}"
    );

    // The rule holds, but the lowering's conditions do not.
    let src = online_with("  o.split(2, 32)\n", "");
    let e = compile_error(&src);
    assert!(
        e.contains("online_softmax(o): `o` sums over `T` in one loop; split it into the serial loop over tiles and the tile (`o.split(2, 64)`)"),
        "{e}"
    );
    assert!(e.contains(&located(&src, "online_softmax(o)")), "{e}");

    let src = online_with(
        "o.parallelize(1, TIDx)",
        "o.parallelize(1, TIDx)\n  o.parallelize(2, TIDy)",
    );
    let e = compile_error(&src);
    assert!(
        e.contains("online_softmax(o): `m` reduces over `T` along TIDy; the online softmax's statistics are per thread"),
        "{e}"
    );
}

#[test]
fn forms_the_rule_accepts_but_the_lowering_does_not_say_so() {
    // The unnormalised form: the statement names the division.
    let src = online_with("", "")
        .replace(
            "  p = e / broadcast(l, axis=1)\n  o = sum(broadcast(p, axis=2) * broadcast(v, axis=0), axis=1)",
            "  u = sum(broadcast(e, axis=2) * broadcast(v, axis=0), axis=1)\n  o = u / broadcast(l, axis=1)",
        )
;
    let e = compile_error(&src);
    assert!(
        e.contains("online_softmax(o): the unnormalised form (`o` divides the product by `l` after it) is not lowered yet"),
        "{e}"
    );
}

#[test]
fn the_log_sum_exp_reads_the_final_statistics_after_the_tile_loop() {
    // On CUDA cores: online.hf with lse = m + log(l), m and l still in the tile loop.
    let src = online_with("", "").replace(
        "  output o\n",
        "  output o\n  lse = m + log(l)\n  output lse\n",
    );
    let cuda = hopfuse_tests::compile(&src).cuda;
    let tiles = line_of(
        &cuda,
        "for (index_t t_o = 0; t_o < hf_ceil_div<index_t>(T, 32); ++t_o)",
    );
    let guard = line_of(
        &cuda,
        "m[0] = (m_acc[0] == __int_as_float(0xff800000)) ? 0.0f : m_acc[0];",
    );
    let divide = line_of(
        &cuda,
        "o[(s2_o * 64 + s2_i) * 64 + d2] = o_acc[d2] * (1.0f / (l_acc[0]));",
    );
    let log = line_of(&cuda, "lse_log[0] = logf(l_acc[0]);");
    let store = line_of(&cuda, "lse[s2_o * 64 + s2_i] = m_acc[0] + lse_log[0];");
    let order = [tiles, guard, divide, log, store];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}\n{cuda}");
    // On tensor cores (online_wgmma_lse.hf): per row of the fragment, after the loop and the
    // output's store, from the running maximum and sum.
    let src = example("attention/online_wgmma_lse.hf");
    let cuda = hopfuse_tests::compile(&src).cuda;
    let release = line_of(
        &cuda,
        "hf_mbarrier_arrive_per_warp(&ks_vs_empty[(hf_ceil_div<index_t>(T, 64) - 1) % 2]);",
    );
    let rows = line_of(&cuda, "for (index_t h7 = 0; h7 < 2; ++h7) {");
    let log = line_of(&cuda, "lse_log[0] = logf(l_acc[h7]);");
    let store = line_of(
        &cuda,
        "lse[b * S + (s2_o * 64 + (16 * (((index_t)threadIdx.x) / 32) + ((index_t)threadIdx.x) % 32 / 4 + 8 * h7))] = m_acc[h7] + lse_log[0];",
    );
    let order = [release, rows, log, store];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    // The math: the reference's lse is each row's maximum score plus the log of its sum of
    // exponentials, and the program's ob is online_wgmma_ws.hf's.
    let f = fusion(&src);
    let sizes: BTreeMap<String, i64> = [("B".into(), 2), ("S".into(), 5), ("T".into(), 70)].into();
    let ins = inputs(&f, &sizes);
    let got = hopfuse::backend::reference::evaluate(&f, &sizes, &ins).unwrap();
    let (q, k) = (&ins["q"], &ins["k"]);
    for b in 0..2 {
        for i in 0..5 {
            let scores: Vec<f64> = (0..70)
                .map(|j| {
                    let dot: f64 = (0..128)
                        .map(|d| q[(b * 5 + i) * 128 + d] * k[(b * 70 + j) * 128 + d])
                        .sum();
                    dot * 0.125
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let want = m + scores.iter().map(|s| (s - m).exp()).sum::<f64>().ln();
            let lse = got["lse"][b * 5 + i];
            // (The reference rounds each f32 tensor of the program to f32.)
            assert!(
                (lse - want).abs() <= 1e-6 * want.abs().max(1.0),
                "{lse} {want}"
            );
        }
    }
    let ws = fusion(&example("attention/online_wgmma_ws.hf"));
    let want = hopfuse::backend::reference::evaluate(&ws, &sizes, &ins).unwrap();
    assert_eq!(got["ob"], want["ob"]);
}

// ---- On tensor cores: S = Q K^T and O += P V by wgmma, the softmax on the fragment.

const WGMMA_EXAMPLES: [&str; 2] = [
    "attention/online_wgmma.hf",
    "attention/online_wgmma_causal.hf",
];

#[test]
fn the_tensor_core_examples_are_the_online_recurrence_of_their_math() {
    // The reference evaluates the math (with p rounded to bf16 before the product, as the
    // program says); its online form over the schedule's tile of 64 keys equals it, at a
    // multiple of the tile, ragged, and shorter than one tile.
    for path in WGMMA_EXAMPLES {
        // (The product before its rounding to the bf16 output.)
        let src = example(path)
            .replace("  ob = cast(o, bf16)\n  output ob\n", "  output o\n")
            .replace("  ob.parallelize(2, Mma)\n", "");
        let f = fusion(&src);
        for (s, t) in [(64, 128), (70, 37), (130, 100)] {
            let sizes: BTreeMap<String, i64> = [("S".into(), s), ("T".into(), t)].into();
            let ins = inputs(&f, &sizes);
            let want = hopfuse::backend::reference::evaluate(&f, &sizes, &ins).unwrap();
            assert!(want["o"].iter().all(|x| x.is_finite()), "{path}");
            let p = online_softmax::find_all(&f).remove(0);
            let tiled =
                hopfuse::backend::reference::online::evaluate(&f, &p, 64, &sizes, &ins).unwrap();
            // The online form rounds the exponentials relative to the running maximum to
            // bf16 (as FlashAttention does), the plain form the normalised p: equal to bf16's
            // precision, not exactly.
            let scale = want["o"].iter().fold(0f64, |a, x| a.max(x.abs()));
            let worst = want["o"]
                .iter()
                .zip(&tiled)
                .fold(0f64, |a, (x, y)| a.max((x - y).abs()));
            assert!(
                worst <= 8e-3 * scale,
                "{path} at S={s}, T={t}: {worst} against {scale}"
            );
        }
    }
}

#[test]
fn the_tensor_core_kernel_keeps_the_softmax_on_the_fragment() {
    for path in WGMMA_EXAMPLES {
        let c = hopfuse_tests::compile(&example(path));
        let cuda = &c.cuda;
        // One serial loop over ceilDiv(T, 64) key tiles (causal: up to the diagonal); k's and
        // v's tiles by TMA in it.
        let tiles = line_of(
            cuda,
            if path.contains("causal") {
                "for (index_t t_o = 0; t_o < hf_min<index_t>(hf_ceil_div<index_t>(T, 64), s2_o + 1); ++t_o)"
            } else {
                "for (index_t t_o = 0; t_o < hf_ceil_div<index_t>(T, 64); ++t_o)"
            },
        );
        let k_tile = line_of(cuda, "hf_tma_load_2d(&ks[0], &ks_map");
        let v_tile = line_of(cuda, "hf_tma_load_2d(&vs[0], &vs_map");
        // S = Q K^T: both operands by descriptor (K-major).
        let scores = line_of(cuda, "hf_wgmma_m64n64k16_bf16_nn(&s_sum_acc[0], ");
        // The row statistics: two registers per thread (its two rows of the fragment).
        assert!(cuda.contains("float m_acc[2];"), "{path}");
        assert!(cuda.contains("float l_acc[2];"), "{path}");
        assert!(cuda.contains("float m_scale[2];"), "{path}");
        // The maximum over the thread's columns into a partial (a key past T left out), the
        // partial combined across the quad, then into the running maximum; the sum likewise
        // (a partial per tile: the running sum is counted once per column).
        let max = line_of(cuda, "m_acc_part[r");
        assert!(
            cuda.lines().nth(max - 1).unwrap().contains("< T) {"),
            "{path}: the maximum's update is not guarded by the key bound"
        );
        let max_quad = line_of(
            cuda,
            "m_acc_part[0] = hf_maximum(m_acc_part[0], __shfl_xor_sync(0xffffffffu, m_acc_part[0], 1));",
        );
        for h in 0..2 {
            for lanes in [1, 2] {
                assert!(cuda.contains(&format!(
                    "m_acc_part[{h}] = hf_maximum(m_acc_part[{h}], __shfl_xor_sync(0xffffffffu, m_acc_part[{h}], {lanes}));"
                )));
                assert!(cuda.contains(&format!(
                    "l_acc_part[{h}] = l_acc_part[{h}] + __shfl_xor_sync(0xffffffffu, l_acc_part[{h}], {lanes});"
                )));
            }
        }
        for h in 0..2 {
            assert!(cuda.contains(&format!("m_acc_part[{h}] = __int_as_float(0xff800000);")));
            assert!(cuda.contains(&format!(
                "m_acc[{h}] = hf_maximum(m_acc[{h}], m_acc_part[{h}]);"
            )));
            assert!(cuda.contains(&format!("l_acc_part[{h}] = 0.0f;")));
            assert!(cuda.contains(&format!("l_acc[{h}] = l_acc[{h}] + l_acc_part[{h}];")));
        }
        // The guard and the rescale per row, then the accumulator's rescale by its row's factor.
        let guard = line_of(
            cuda,
            "m[h4] = (m_acc[h4] == __int_as_float(0xff800000)) ? 0.0f : m_acc[h4];",
        );
        // The softmax in base 2 (passes/online_softmax.rs): -m log2(e) per row, the rescale
        // factor and each exponential one FMA and exp2.
        let neg_log2 = line_of(cuda, "m_neg_log2[h4] = m[h4] * -1.442695f;");
        assert!(cuda
            .contains("m_scale[h4] = hf_exp2_ftz(fmaf(m_prev[h4], 1.442695f, m_neg_log2[h4]));"));
        let exponential = line_of(cuda, "e_broadcast[0] = m_neg_log2[r");
        let folded = cuda
            .lines()
            .skip(exponential)
            .take(4)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            folded.contains("e_sub[0] = fmaf(")
                && folded.contains(", 1.442695f, e_broadcast[0]);")
                && folded.contains("] = hf_exp2_ftz(e_sub[0]);"),
            "{path}: {folded}"
        );
        assert!(!cuda.contains("expf("), "{path}");
        assert!(guard < neg_log2, "{path}");
        let rescale = line_of(cuda, "o_acc[r");
        assert!(
            cuda.contains("o_acc[r3] = o_acc[r3] * m_scale[r3 / 2 % 2];")
                || cuda.contains("o_acc[r4] = o_acc[r4] * m_scale[r4 / 2 % 2];"),
            "{path}"
        );
        let sum_quad = line_of(
            cuda,
            "l_acc_part[0] = l_acc_part[0] + __shfl_xor_sync(0xffffffffu, l_acc_part[0], 1);",
        );
        // P rounded to bf16 in registers and O += P V with A from them: registers 8 t_io.. of
        // the fragment for keys 16 t_io.., V (MN-major) by descriptor.
        let round = line_of(cuda, "pb[r");
        let product = line_of(
            cuda,
            "hf_wgmma_m64n64k16_bf16_rt(&o_acc[0], &pb[t_io * 16 % 64 / 4096 * 32 + t_io * 16 % 64 % 4096 / 8 * 4], (hf_wgmma_desc(&vs[0], ",
        );
        let divide = cuda
            .lines()
            .position(|l| l.contains("] = o_acc[r") && l.contains("] * (1.0f / (l_acc[r"))
            .expect("o times the reciprocal of its row sum after the loop");
        let store = line_of(cuda, "*reinterpret_cast<hf_vec<hf_bf16, 2>*>(&ob[");
        let order = [
            tiles, k_tile, v_tile, scores, max, max_quad, guard, rescale, sum_quad, round, product,
            divide, store,
        ];
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{path}: {order:?}");
        // The RS helper reads the eight bf16 values as the four .b32 registers of A (pairs of
        // the array, the lower column in the low half).
        assert!(cuda.contains("const unsigned a3 = reinterpret_cast<const unsigned*>(a)[3];"));
        assert!(cuda.contains(
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;"
        ));
    }
    // The mask is math on each register's query and key.
    let causal = hopfuse_tests::compile(&example("attention/online_wgmma_causal.hf")).cuda;
    assert!(causal.contains("sm[r2] = keep[0] ? s_sum_acc[r2] : __int_as_float(0xff800000);"));
}

#[test]
fn the_batched_tensor_core_example_is_the_one_head_example_per_problem() {
    // The math: each of the B problems is online_wgmma.hf's attention of its own q, k and v
    // (the f64 reference of the batched program, sliced, against the one-head program's).
    let batched = fusion(&example("attention/online_wgmma_batched.hf"));
    let single = fusion(&example("attention/online_wgmma.hf"));
    let (b, s, t) = (3usize, 70usize, 37usize);
    let sizes: BTreeMap<String, i64> = [
        ("B".into(), b as i64),
        ("S".into(), s as i64),
        ("T".into(), t as i64),
    ]
    .into();
    let ins = inputs(&batched, &sizes);
    let got = hopfuse::backend::reference::evaluate(&batched, &sizes, &ins).unwrap();
    let one: BTreeMap<String, i64> = [("S".into(), s as i64), ("T".into(), t as i64)].into();
    for problem in 0..b {
        let slice = |name: &str, rows: usize| {
            let x = &ins[name];
            x[problem * rows * 64..(problem + 1) * rows * 64].to_vec()
        };
        let mut single_ins = ins.clone();
        single_ins.insert("q".into(), slice("q", s));
        single_ins.insert("k".into(), slice("k", t));
        single_ins.insert("v".into(), slice("v", t));
        let want = hopfuse::backend::reference::evaluate(&single, &one, &single_ins).unwrap();
        assert_eq!(
            &got["ob"][problem * s * 64..(problem + 1) * s * 64],
            &want["ob"][..],
            "problem {problem}"
        );
    }
    // The kernel: the problems on blockIdx.y, the query tiles on blockIdx.x inside them, the
    // TMA boxes 3-D at the block's problem, the store at its rows.
    let c = hopfuse_tests::compile(&example("attention/online_wgmma_batched.hf"));
    let cuda = &c.cuda;
    let problem = line_of(cuda, "const index_t b = blockIdx.y;");
    let q_tile = line_of(
        cuda,
        "hf_tma_load_3d(&qs[0], &qs_map, (int)(0), (int)(s2_o * 64), (int)(b), &qs_full[0]);",
    );
    let tiles = line_of(
        cuda,
        "for (index_t t_o = 0; t_o < hf_ceil_div<index_t>(T, 128); ++t_o)",
    );
    let k_tile = line_of(
        cuda,
        "hf_tma_load_3d(&ks[0], &ks_map, (int)(0), (int)(t_o * 128), (int)(b), &t_o_full[0]);",
    );
    let v_tile = line_of(
        cuda,
        "hf_tma_load_3d(&vs[0], &vs_map, (int)(0), (int)(t_o * 128), (int)(b), &t_o_full[0]);",
    );
    // 128-key tiles (S is m64n128), the head dim 64 (P V is m64n64).
    let scores = line_of(cuda, "hf_wgmma_m64n128k16_bf16_nn(&s_sum_acc[0], ");
    let product = line_of(cuda, "hf_wgmma_m64n64k16_bf16_rt(&o_acc[0], ");
    let store = line_of(
        cuda,
        "*reinterpret_cast<hf_vec<hf_bf16, 2>*>(&ob[(b * S + (s2_o * 64 + ",
    );
    let order = [
        problem, q_tile, tiles, k_tile, v_tile, scores, product, store,
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    // The launch: one block of one warp group per 64 queries of each problem.
    let grid = &c.plan.grid;
    assert_eq!(
        serde_json::to_value(grid).unwrap(),
        serde_json::json!([{"ceil_div": [{"sym": "S"}, {"const": 64}]}, {"sym": "B"}, {"const": 1}]),
        "{grid:?}"
    );
}

#[test]
fn the_head_dim_128_kernel_takes_two_swizzle_spans_per_row() {
    // The math: its online recurrence over tiles of 64 keys is the reference to bf16's
    // precision (as the one-head examples'), at a ragged size with two problems.
    let path = "attention/online_wgmma_d128.hf";
    let src = example(path)
        .replace("  ob = cast(o, bf16)\n  output ob\n", "  output o\n")
        .replace("  ob.parallelize(3, Mma)\n", "");
    let f = fusion(&src);
    let sizes: BTreeMap<String, i64> =
        [("B".into(), 2), ("S".into(), 70), ("T".into(), 100)].into();
    let ins = inputs(&f, &sizes);
    let want = hopfuse::backend::reference::evaluate(&f, &sizes, &ins).unwrap();
    let p = online_softmax::find_all(&f).remove(0);
    let tiled = hopfuse::backend::reference::online::evaluate(&f, &p, 64, &sizes, &ins).unwrap();
    let scale = want["o"].iter().fold(0f64, |a, x| a.max(x.abs()));
    let worst = want["o"]
        .iter()
        .zip(&tiled)
        .fold(0f64, |a, (x, y)| a.max((x - y).abs()));
    assert_eq!(want["o"].len(), 2 * 70 * 128);
    assert!(worst <= 8e-3 * scale, "{worst} against {scale}");
    // The kernel: q's and k's rows in two slabs of 64 columns (a TMA box each, 4096 elements
    // apart), S = Q K^T in eight k16 steps that jump to the next slab every four, and
    // O += P V as m64n128k16 with V's two 64-column atoms 8 KiB apart (LBO 0x200 x 16 bytes).
    let cuda = hopfuse_tests::compile(&example(path)).cuda;
    for (cache, row) in [("qs", "s2_o * 64"), ("ks", "t_o * 64"), ("vs", "t_o * 64")] {
        for (slab, column) in [(0, 0), (4096, 64)] {
            let copy = format!(
                "hf_tma_load_3d(&{cache}[{slab}], &{cache}_map, (int)({column}), (int)({row}), (int)(b), "
            );
            assert!(cuda.contains(&copy), "{copy}");
        }
    }
    assert!(cuda.contains("alignas(16) float o_acc[64];"));
    assert!(cuda.contains("alignas(16) float s_sum_acc[32];"));
    assert!(cuda.contains("for (index_t d_o = 0; d_o < 8; ++d_o) {"));
    assert!(cuda.contains(
        "hf_wgmma_m64n64k16_bf16_nn(&s_sum_acc[0], (hf_wgmma_desc(&qs[0], 0x4000004000010000ull) + 512 * (d_o / 4) + 2 * (d_o % 4)), (hf_wgmma_desc(&ks[0], 0x4000004000010000ull) + 512 * (d_o / 4) + 2 * (d_o % 4)), s_sum_acc_started[0]);"
    ));
    assert!(cuda.contains(
        "hf_wgmma_m64n128k16_bf16_rt(&o_acc[0], &pb[t_io * 16 % 64 / 4096 * 32 + t_io * 16 % 64 % 4096 / 8 * 4], (hf_wgmma_desc(&vs[0], 0x4000004002000000ull) + 8 * (t_io * 16 % 64)), o_acc_started[0]);"
    ));
    assert!(cuda.contains("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, "));
}

#[test]
fn the_warp_specialized_kernel_pipelines_k_and_v() {
    let path = "attention/online_wgmma_ws.hf";
    let src = example(path);
    let cuda = hopfuse_tests::compile(&src).cuda;
    // A producer warp group and a consumer warp group; the empty barriers take one arrive per
    // consumer warp.
    assert!(cuda.contains("__launch_bounds__(256)"));
    assert!(cuda.contains("hf_mbarrier_init(&ks_vs_empty[hf_s], 4);"));
    assert!(cuda.contains("hf_mbarrier_init(&ks_vs_full[hf_s], 1);"));
    // The producer: per tile, wait for the stage to be empty, then k's and v's two boxes each
    // on its full barrier (32 KiB).
    let producer = line_of(&cuda, "if (3 < hf_warp % 8) {  // producer warp group");
    let empty = line_of(
        &cuda,
        "hf_mbarrier_wait(&ks_vs_empty[t_o % 2], (unsigned)((t_o / 2 + 1) % 2));",
    );
    let expect = line_of(
        &cuda,
        "hf_mbarrier_arrive_expect_tx(&ks_vs_full[t_o % 2], 32768u);",
    );
    let k_copy = line_of(
        &cuda,
        "hf_tma_load_3d(&ks[t_o % 2 * 8192 + 4096], &ks_map, ",
    );
    let v_copy = line_of(
        &cuda,
        "hf_tma_load_3d(&vs[t_o % 2 * 8192 + 4096], &vs_map, ",
    );
    // The consumer: wait for the stage, S = Q K^T on it, the softmax, O += P V kept in flight
    // while the stage before is released; the last stage after the loop.
    let consumer = line_of(&cuda, "} else {  // consumer warps");
    let full = line_of(
        &cuda,
        "hf_mbarrier_wait(&ks_vs_full[t_o % 2], (unsigned)(t_o / 2 % 2));",
    );
    let scores = line_of(
        &cuda,
        "hf_wgmma_m64n64k16_bf16_nn(&s_sum_acc[0], (hf_wgmma_desc(&qs[0], 0x4000004000010000ull) + 512 * (d_o / 4) + 2 * (d_o % 4)), (hf_wgmma_desc(&ks[t_o % 2 * 8192], ",
    );
    let max_quad = line_of(
        &cuda,
        "m_acc_part[0] = hf_maximum(m_acc_part[0], __shfl_xor_sync(0xffffffffu, m_acc_part[0], 1));",
    );
    let product = line_of(
        &cuda,
        "hf_wgmma_m64n128k16_bf16_rt(&o_acc[0], &pb[t_io * 16 % 64 / 4096 * 32 + t_io * 16 % 64 % 4096 / 8 * 4], (hf_wgmma_desc(&vs[t_o % 2 * 8192], ",
    );
    let in_flight = line_of(&cuda, "hf_wgmma_wait<1>();");
    let release = line_of(
        &cuda,
        "hf_mbarrier_arrive_per_warp(&ks_vs_empty[(t_o - 1) % 2]);",
    );
    let last = line_of(
        &cuda,
        "hf_mbarrier_arrive_per_warp(&ks_vs_empty[(hf_ceil_div<index_t>(T, 64) - 1) % 2]);",
    );
    let order = [
        producer, empty, expect, k_copy, v_copy, consumer, full, scores, max_quad, product,
        in_flight, release, last,
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    // Without the producer, the same two stages are filled by the block itself: tile j + 1's
    // copies at the top of iteration j, before the wait for tile j, and a barrier at its end
    // (the stage it frees is refilled in the next iteration).
    let plain = src.replace(", warp_specialized(TIDy))", ")");
    let cuda = hopfuse_tests::compile(&plain).cuda;
    assert!(cuda.contains("__launch_bounds__(128)"));
    let main = line_of(
        &cuda,
        "for (index_t t_o = 0; t_o < hf_ceil_div<index_t>(T, 64) - 1; ++t_o) {",
    );
    let next = line_of(
        &cuda,
        "hf_tma_load_3d(&ks[(t_o + 1) % 2 * 8192], &ks_map, (int)(0), (int)((t_o + 1) * 64), (int)(b), &t_o_full[(t_o + 1) % 2]);",
    );
    let wait = line_of(
        &cuda,
        "hf_mbarrier_wait(&t_o_full[t_o % 2], (unsigned)(t_o / 2 % 2));",
    );
    let war = main
        + cuda
            .lines()
            .skip(main)
            .position(|l| l.trim() == "__syncthreads();")
            .unwrap();
    let last = line_of(&cuda, "for (index_t t_o_epi = 0; t_o_epi < 1; ++t_o_epi) {");
    let order = [main, next, wait, war, last];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
}

#[test]
fn two_consumer_warp_groups_share_every_stage() {
    let src = example("attention/online_wgmma_ws2.hf");
    // The math is online_wgmma_ws.hf's: only the schedule differs.
    let ws = example("attention/online_wgmma_ws.hf");
    let math = |s: &str| s[s.find("  input q").unwrap()..s.find("schedule {").unwrap()].to_string();
    assert_eq!(math(&src), math(&ws));
    let cuda = hopfuse_tests::compile(&src).cuda;
    // Two consumer warp groups and a producer (384 threads), setmaxnreg 24 / 240; every stage
    // is released by the eight consumer warps of both groups.
    assert!(cuda.contains("__launch_bounds__(384, 1)"), "{cuda}");
    assert!(cuda.contains("hf_mbarrier_init(&ks_vs_empty[hf_s], 8);"));
    assert!(cuda.contains("hf_mbarrier_init(&ks_vs_full[hf_s], 1);"));
    assert!(cuda.contains("setmaxnreg.dec.sync.aligned.u32 24;"));
    assert!(cuda.contains("setmaxnreg.inc.sync.aligned.u32 240;"));
    // q's tile: 128 rows per box, one box pair for both groups.
    for (slab, column) in [(0, 0), (8192, 64)] {
        let copy = format!(
            "hf_tma_load_3d(&qs[{slab}], &qs_map, (int)({column}), (int)(s2_o * 128), (int)(b), &qs_full[0]);"
        );
        assert!(cuda.contains(&copy), "{copy}");
    }
    // The consumers: each iteration waits for the stage, then, in the group's binding, S = Q K^T
    // on the group's 64 rows of q, the row maximum, the rescale factors (before the
    // exponentials that read -m log2(e)), the exponentials, O += P V; the group is committed
    // after the binding and kept in flight while the stage before is released.
    let full = line_of(
        &cuda,
        "hf_mbarrier_wait(&ks_vs_full[t_o % 2], (unsigned)(t_o / 2 % 2));",
    );
    let binding = full + 1;
    assert_eq!(
        cuda.lines().nth(binding).unwrap().trim(),
        "{  // s2_io = threadIdx.y"
    );
    let scores = line_of(
        &cuda,
        "hf_wgmma_m64n64k16_bf16_nn(&s_sum_acc[0], (hf_wgmma_desc(&qs[s2_io * 64 * 4 * 16], 0x4000004000010000ull) + 1024 * (d_o / 4) + 2 * (d_o % 4)), (hf_wgmma_desc(&ks[t_o % 2 * 8192], ",
    );
    let max = line_of(&cuda, "m_acc[1] = hf_maximum(m_acc[1], m_acc_part[1]);");
    let neg_log2 = line_of(&cuda, "m_neg_log2[h4] = m[h4] * -1.442695f;");
    let rescale = line_of(&cuda, "o_acc[r3] = o_acc[r3] * m_scale[r3 / 2 % 2];");
    let exp = line_of(&cuda, "e[r4] = hf_exp2_ftz(e_sub[0]);");
    let product = line_of(
        &cuda,
        "hf_wgmma_m64n128k16_bf16_rt(&o_acc[0], &pb[t_io * 16 % 64 / 4096 * 32 + t_io * 16 % 64 % 4096 / 8 * 4], (hf_wgmma_desc(&vs[t_o % 2 * 8192], ",
    );
    // (The unrolled loop's brace, then the binding's.)
    let commit = product + 4;
    assert_eq!(cuda.lines().nth(product + 3).unwrap().trim(), "}");
    assert_eq!(
        cuda.lines().nth(commit).unwrap().trim(),
        "hf_wgmma_commit();"
    );
    let in_flight = line_of(&cuda, "hf_wgmma_wait<1>();");
    let release = line_of(
        &cuda,
        "hf_mbarrier_arrive_per_warp(&ks_vs_empty[(t_o - 1) % 2]);",
    );
    let last = line_of(
        &cuda,
        "hf_mbarrier_arrive_per_warp(&ks_vs_empty[(hf_ceil_div<index_t>(T, 64) - 1) % 2]);",
    );
    let order = [
        full, binding, scores, max, neg_log2, rescale, exp, product, commit, in_flight, release,
        last,
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}\n{cuda}");
    // The stores: each group its 64 rows.
    assert!(cuda.contains("ob[(b * S + (s2_o * 128 + (s2_io * 64 + "));
    // q's tile cannot be loaded per group: one thread issues a TMA copy for the block.
    let per_group = src.replace(
        "  qs.reorder(0, 1, 3, 2, 5, 4, 6)\n  qs.parallelize(2, Bulk)\n",
        "  qs.reorder(0, 1, 2, 3, 5, 4, 6)\n",
    );
    assert_ne!(per_group, src);
    let e = compile_error(&per_group);
    assert!(
        e.contains("`qs` is loaded by tma, which one thread issues for the whole block: it cannot be inside the thread-parallel loop `s2_io` (TIDy)"),
        "{e}"
    );
}

#[test]
fn two_consumer_warp_groups_take_turns_with_their_products() {
    let src = example("attention/online_wgmma_pingpong.hf");
    // online_wgmma_ws2.hf with turns=products, and nothing else.
    let ws2 = example("attention/online_wgmma_ws2.hf");
    let from = |s: &str| s[s.find("  input q").unwrap()..].to_string();
    assert_eq!(
        from(&src).replace(", turns=products))", "))"),
        from(&ws2).replace(
            "  // while both consumer warp groups (TIDy = 0, 1) compute on each stage.\n",
            "  // while both consumer warp groups (TIDy = 0, 1) compute on each stage; the two groups take\n  // turns issuing their products (turns=products).\n"
        )
    );
    let cuda = hopfuse_tests::compile(&src).cuda;
    let wait = "hf_bar_sync_group<256>(15u - threadIdx.y);";
    let pass = "hf_bar_arrive_group<256>(15u - (threadIdx.y + 1u) % 2u);";
    let lines: Vec<&str> = cuda.lines().map(str::trim).collect();
    let at = |needle: &str, from: usize| {
        from + lines[from..]
            .iter()
            .position(|l| l.starts_with(needle))
            .unwrap_or_else(|| panic!("no `{needle}` after line {from}\n{cuda}"))
    };
    // Group 1 passes the first turn at entry; in each tile iteration, each of the group's two
    // products (S = Q K^T, then O += P V) is issued in its turn: wait, fence, wgmmas, commit,
    // pass, and only then the wait for its results; group 0 takes the last turn at exit.
    let consumer = at("} else {  // consumer warps", 0);
    let first = at("if (((index_t)threadIdx.y) == 1) {", consumer);
    assert_eq!(lines[first + 1], pass);
    let tiles = at(
        "for (index_t t_o = 0; t_o < hf_ceil_div<index_t>(T, 64); ++t_o) {",
        first,
    );
    let s_turn = at(wait, tiles);
    assert_eq!(lines[s_turn + 1], "hf_wgmma_fence();");
    let s_commit = at("hf_wgmma_commit();", s_turn);
    assert_eq!(lines[s_commit + 1], pass);
    assert_eq!(lines[s_commit + 2], "hf_wgmma_wait<0>();");
    let softmax = at("e[r4] = hf_exp2_ftz(e_sub[0]);", s_commit);
    let pv_turn = at(wait, softmax);
    assert_eq!(lines[pv_turn + 1], "hf_wgmma_fence();");
    let pv = at("hf_wgmma_m64n128k16_bf16_rt(&o_acc[0], ", pv_turn);
    let pv_commit = at("hf_wgmma_commit();", pv);
    assert_eq!(lines[pv_commit + 1], pass);
    assert_eq!(lines[pv_commit + 2], "hf_wgmma_wait<1>();");
    let last = at("if (((index_t)threadIdx.y) == 0) {", pv_commit);
    assert_eq!(lines[last + 1], wait);
    // Two turns and two passes per group and tile, one of each at entry and exit: no other.
    assert_eq!(lines.iter().filter(|l| **l == wait).count(), 3);
    assert_eq!(lines.iter().filter(|l| **l == pass).count(), 3);
    // The refusals, at the circular buffer's statement.
    // Groups that take turns with whole stages (matmul/step14_ping_pong.hf: the loads inside
    // the consumers' loop over TIDy) cannot also take turns with products.
    let tiles = example("matmul/step14_ping_pong.hf").replace(
        "warp_specialized(TIDy, registers=[40, 232]))",
        "warp_specialized(TIDy, registers=[40, 232], turns=products))",
    );
    let e = compile_error(&tiles);
    assert!(
        e.contains("`a_s`: turns=products: the loads are inside the consumers' loop over TIDy, so its groups already take turns with whole stages (ping-pong over tiles); bind TIDy inside the buffered loop for groups that share every stage"),
        "{e}"
    );
    // One consumer group: nothing to take turns with.
    one_group_takes_no_turns(&example("attention/online_wgmma_ws.hf"));
    // A word turns does not take.
    let e = compile_error(&src.replace("turns=products", "turns=stages"));
    assert!(
        e.contains("warp_specialized's turns is `products` (the consumer groups take turns issuing their tensor-core products), got `stages`"),
        "{e}"
    );
}

/// `src` (online_wgmma_ws.hf's one consumer group, with or without the overlap) with
/// `turns=products` is refused at its circular buffer: one group has nothing to take turns with.
fn one_group_takes_no_turns(src: &str) {
    let one = src.replace(
        "warp_specialized(TIDy))",
        "warp_specialized(TIDy, turns=products))",
    );
    let e = compile_error(&one);
    assert!(
        e.contains("`ks`: turns=products: the consumers have 1 thread group(s) along TIDy; two to 4 can take turns (each has a turn barrier)"),
        "{e}"
    );
    assert!(
        e.contains(&located(
            &one,
            "ks.circular_buffer(2, warp_specialized(TIDy, turns=products))"
        )),
        "{e}"
    );
}

#[test]
fn the_overlap_issues_the_next_scores_before_the_softmax_of_the_product_in_flight() {
    let src = example("attention/online_wgmma_overlap.hf");
    // online_wgmma_ws2.hf with overlap=products and V on its own producer warp, nothing else.
    let ws2 = example("attention/online_wgmma_ws2.hf");
    let from = |s: &str| s[s.find("  input q").unwrap()..].to_string();
    let stmts = |s: &str| -> Vec<String> {
        from(s)
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        stmts(&src),
        stmts(
            &ws2.replace("online_softmax(o)", "online_softmax(o, overlap=products)")
                .replace(
                    "vs.circular_buffer(2, warp_specialized(TIDy, registers=[24, 240]))",
                    "vs.circular_buffer(2, warp_specialized(TIDy, registers=[24, 240], warp=1))"
                )
        )
    );
    let cuda = hopfuse_tests::compile(&src).cuda;
    let lines: Vec<&str> = cuda.lines().map(str::trim).collect();
    let at = |needle: &str, from: usize| {
        from + lines[from..]
            .iter()
            .position(|l| l.starts_with(needle))
            .unwrap_or_else(|| panic!("no `{needle}` after line {from}\n{cuda}"))
    };
    let count = |needle: &str| lines.iter().filter(|l| l.starts_with(needle)).count();
    // The line after line `i` is `want`.
    let next_is = |i: usize, want: &str| assert_eq!(lines[i + 1], want, "after line {i}");
    let scores = OVERLAP_SCORES;
    let exp = OVERLAP_EXP;
    let rescale = "o_acc[r3] = o_acc[r3] * m_scale[r3 / 2 % 2];";
    let convert = OVERLAP_CONVERT;
    // P (bf16) and the probabilities it converts live across iterations.
    let consumer = at("} else {  // consumer warps", 0);
    let p_alloc = at("alignas(16) hf_bf16 pb[32];", consumer);
    at("alignas(16) float p[32];", consumer);
    // The prologue: tile 0's S, waited for, K's stage released, its softmax; no P V, no
    // rescale of O, no conversion.
    let first = at(
        "for (index_t t_o_first = 0; t_o_first < hf_min<index_t>(hf_ceil_div<index_t>(T, 64), 1); ++t_o_first) {",
        p_alloc,
    );
    next_is(first, "const index_t t_o = 0;");
    let s0 = at(scores, first);
    let s0_wait = at("hf_wgmma_wait<0>();", s0);
    next_is(s0_wait, "hf_mbarrier_arrive_per_warp(&ks_empty[t_o % 2]);");
    let exp0 = at(exp, s0_wait);
    // The loop over the tile whose P V it issues: S of tile t_o = t_o_pv + 1, then P_{t_o_pv}
    // converted and O += P V on V's stage t_o_pv (its full barrier waited for there), both in
    // flight; wait_group 1 (S done), K's stage released, the softmax while P V runs; then
    // wait_group 0, V's stage released, O rescaled.
    let main = at(
        "for (index_t t_o_pv = 0; t_o_pv < hf_ceil_div<index_t>(T, 64) - 1; ++t_o_pv) {",
        exp0,
    );
    next_is(main, "const index_t t_o = t_o_pv + 1;");
    let k_full = at(
        "hf_mbarrier_wait(&ks_full[t_o % 2], (unsigned)(t_o / 2 % 2));",
        main,
    );
    let s = at(scores, k_full);
    let s_commit = at("hf_wgmma_commit();", s);
    let v_full = at(
        "hf_mbarrier_wait(&vs_full[t_o_pv % 2], (unsigned)(t_o_pv / 2 % 2));",
        s_commit,
    );
    assert_eq!(v_full, s_commit + 1);
    let conv = at(convert, v_full);
    let pv = at("hf_wgmma_m64n128k16_bf16_rt(&o_acc[0], &pb[", conv);
    assert!(lines[pv].contains("(hf_wgmma_desc(&vs[t_o_pv % 2 * 8192], "));
    let pv_commit = at("hf_wgmma_commit();", pv);
    next_is(pv_commit, "hf_wgmma_wait<1>();");
    assert_eq!(
        lines[pv_commit + 2],
        "hf_mbarrier_arrive_per_warp(&ks_empty[t_o % 2]);"
    );
    let softmax = at(exp, pv_commit);
    let drained = at("hf_wgmma_wait<0>();", softmax);
    next_is(
        drained,
        "hf_mbarrier_arrive_per_warp(&vs_empty[t_o_pv % 2]);",
    );
    let rescaled = at(rescale, drained);
    // The epilogue: the last tile's P V, drained, V's stage released.
    let last = at(
        "for (index_t t_o_last = 0; t_o_last < hf_min<index_t>(hf_ceil_div<index_t>(T, 64), 1); ++t_o_last) {",
        rescaled,
    );
    next_is(last, "const index_t t_o = hf_ceil_div<index_t>(T, 64) - 1;");
    let last_conv = at(convert, last);
    let last_pv = at("hf_wgmma_m64n128k16_bf16_rt(&o_acc[0], &pb[", last_conv);
    let last_commit = at("hf_wgmma_commit();", last_pv);
    next_is(last_commit, "hf_wgmma_wait<0>();");
    assert_eq!(
        lines[last_commit + 2],
        "hf_mbarrier_arrive_per_warp(&vs_empty[t_o % 2]);"
    );
    let divide = at(
        "o[r8] = o_acc[r8] * (1.0f / (l_acc[r8 / 2 % 2]));",
        last_commit,
    );
    assert!(divide > last_commit);
    // Each part once: S twice (peeled and in the loop), P V twice (loop and epilogue), the
    // exponentials twice, the rescale once, one wait_group 1.
    assert_eq!(count(scores), 2);
    assert_eq!(count("hf_wgmma_m64n128k16_bf16_rt("), 2);
    assert_eq!(count(exp), 2);
    assert_eq!(count(rescale), 1);
    assert_eq!(count(convert), 2);
    assert_eq!(count("hf_wgmma_wait<1>();"), 1);
    // The RS wgmma reads P's pairs as 32-bit words (no packing after the group's fence).
    assert!(cuda.contains("  const unsigned a0 = reinterpret_cast<const unsigned*>(a)[0];"));
}

/// K and V released by one producer warp's joint barrier under the overlap: the joint stage is
/// released at wait_group 0, one iteration behind (for the tile of the P V product).
#[test]
fn the_overlap_releases_a_joint_k_and_v_stage_one_iteration_behind() {
    let src = example("attention/online_wgmma_overlap.hf");
    let joint = src.replace("registers=[24, 240], warp=1))", "registers=[24, 240]))");
    assert_ne!(joint, src, "the example changed");
    let cuda = hopfuse_tests::compile(&joint).cuda;
    let lines: Vec<&str> = cuda.lines().map(str::trim).collect();
    let drained = lines
        .iter()
        .position(|l| *l == "hf_wgmma_wait<0>();")
        .unwrap();
    assert!(
        !lines[drained + 1].starts_with("hf_mbarrier_arrive"),
        "the prologue releases nothing"
    );
    let in_loop = lines
        .iter()
        .position(|l| *l == "hf_wgmma_wait<1>();")
        .unwrap();
    let release = in_loop
        + lines[in_loop..]
            .iter()
            .position(|l| *l == "hf_wgmma_wait<0>();")
            .unwrap();
    assert_eq!(
        lines[release + 1],
        "hf_mbarrier_arrive_per_warp(&ks_vs_empty[t_o_pv % 2]);"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("hf_mbarrier_arrive_per_warp("))
            .count(),
        2
    );
}

#[test]
fn the_overlap_composes_with_the_causal_tile_classification() {
    let src = example("attention/online_wgmma_overlap_causal.hf");
    let overlap = example("attention/online_wgmma_overlap.hf");
    // The overlap example with the mask, nothing else in the schedule.
    let schedule = |s: &str| -> Vec<String> {
        s[s.find("schedule {").unwrap()..]
            .lines()
            .filter(|l| !l.trim_start().starts_with("//") && !l.contains("sm.inline_at"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(schedule(&src), schedule(&overlap));
    let cuda = hopfuse_tests::compile(&src).cuda;
    // The loops and the peeled tiles follow the causal bound; the peeled first tile splits the
    // mask (a kept tile runs the scores as they are); the loop, where the P V product is in
    // flight over the mask and a branch would drain it, becomes two: the kept tiles (t_o <
    // 2 s2_o, t_o = t_o_pv + 1) without the mask, then the diagonal ones with it.
    let bound = "hf_min<index_t>(hf_ceil_div<index_t>(T, 64), 2 * (s2_o + 1))";
    let kept = format!("(0 - hf_min<index_t>(0, 0 - hf_min<index_t>({bound} - 1, 2 * s2_o - 1)))");
    assert!(cuda.contains(&format!(
        "for (index_t t_o_pv = 0; t_o_pv < {}; ++t_o_pv) {{",
        &kept[1..kept.len() - 1]
    )));
    assert!(cuda.contains(&format!(
        "for (index_t t_o_pv_diag = 0; t_o_pv_diag < {bound} - 1 - {kept}; ++t_o_pv_diag) {{"
    )));
    assert!(cuda.contains(&format!("const index_t t_o = {bound} - 1;")));
    assert_eq!(cuda.matches("if (t_o < 2 * s2_o) {").count(), 1, "{cuda}");
    let split = line_of(&cuda, "if (t_o < 2 * s2_o) {");
    let main = line_of(&cuda, "for (index_t t_o_pv = 0; ");
    let diagonal = line_of(&cuda, "for (index_t t_o_pv_diag = 0; ");
    assert!(split < main && main < diagonal);
    let masked = "sm[r2] = keep[0] ? s_sum_acc[r2] : ";
    assert_eq!(cuda.matches(masked).count(), 2, "{cuda}");
    // One in the peeled tile's diagonal branch, one in the diagonal tiles' loop.
    let masked_lines: Vec<usize> = (cuda.lines().enumerate())
        .filter(|(_, l)| l.trim_start().starts_with(masked))
        .map(|(n, _)| n)
        .collect();
    assert!(
        masked_lines[0] < main && diagonal < masked_lines[1],
        "{cuda}"
    );
}

/// The statements of `src` from its fusion on, comments left out.
fn statements(src: &str) -> Vec<String> {
    src[src.find("  input q").expect("a fusion")..]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(str::to_string)
        .collect()
}

/// `src` with `turns=products` added to both circular buffers of the overlap examples.
fn with_product_turns(src: &str) -> String {
    let k = "ks.circular_buffer(2, warp_specialized(TIDy, registers=[24, 240]))";
    let v = "vs.circular_buffer(2, warp_specialized(TIDy, registers=[24, 240], warp=1))";
    assert!(src.contains(k) && src.contains(v));
    src.replace(
        k,
        "ks.circular_buffer(2, warp_specialized(TIDy, registers=[24, 240], turns=products))",
    )
    .replace(
        v,
        "vs.circular_buffer(2, warp_specialized(TIDy, registers=[24, 240], warp=1, turns=products))",
    )
}

/// Lines of the overlapped attention kernels' CUDA the overlap tests find: S's wgmma, the
/// softmax's exponential, P's conversion to bf16.
const OVERLAP_SCORES: &str = "hf_wgmma_m64n64k16_bf16_nn(&s_sum_acc[0], ";
/// The same on key tiles of 128 (the ping-pong examples').
const OVERLAP_SCORES_128: &str = "hf_wgmma_m64n128k16_bf16_nn(&s_sum_acc[0], ";
const OVERLAP_EXP: &str = "e[r4] = hf_exp2_ftz(e_sub[0]);";
const OVERLAP_CONVERT: &str = "pb[r7] = hf_float_to_bf16(p[r7]);";

/// A group's wait for its turn and its pass to the other of two groups, as the CUDA writes them.
const TURN_WAIT: &str = "hf_bar_sync_group<256>(15u - threadIdx.y);";
const TURN_PASS: &str = "hf_bar_arrive_group<256>(15u - (threadIdx.y + 1u) % 2u);";

/// A kernel's CUDA lines, indentation trimmed, and the orders they are checked in.
struct CudaLines<'a>(Vec<&'a str>);

impl<'a> CudaLines<'a> {
    fn of(cuda: &'a str) -> Self {
        CudaLines(cuda.lines().map(str::trim).collect())
    }

    /// The first line at or after `from` that starts with `needle`, or a panic.
    fn at(&self, needle: &str, from: usize) -> usize {
        from + self.0[from..]
            .iter()
            .position(|l| l.starts_with(needle))
            .unwrap_or_else(|| panic!("no `{needle}` after line {from}\n{}", self.0.join("\n")))
    }

    /// The line after line `i` is `want`.
    fn next_is(&self, i: usize, want: &str) {
        assert_eq!(self.0[i + 1], want, "after line {i}");
    }
}

/// Example `path`, which is example `from` with `turns=products` on both circular buffers and
/// key tiles of 128 (FlashAttention-3's at D = 128; `from` keeps 64), nothing else, and its
/// CUDA.
fn turns_example(path: &str, from: &str) -> (String, String) {
    let src = example(path);
    let from = example(from).replace("s_sum.split(4, 64)", "s_sum.split(4, 128)");
    assert_eq!(
        statements(&src),
        statements(&with_product_turns(&from)),
        "{path}"
    );
    let cuda = hopfuse_tests::compile(&src).cuda;
    (src, cuda)
}

/// How many lines of `cuda` are `line`, indentation aside.
fn count_lines(cuda: &str, line: &str) -> usize {
    cuda.lines().filter(|l| l.trim() == line).count()
}

#[test]
fn the_overlap_and_the_turns_issue_both_products_of_an_iteration_in_one_turn() {
    let (src, cuda) = turns_example(
        "attention/online_wgmma_overlap_pingpong.hf",
        "attention/online_wgmma_overlap.hf",
    );
    let lines = CudaLines::of(&cuda);
    let at = |needle: &str, from: usize| lines.at(needle, from);
    let next_is = |i: usize, want: &str| lines.next_is(i, want);
    let (wait, pass) = (TURN_WAIT, TURN_PASS);
    let scores = OVERLAP_SCORES_128;
    let pv = "hf_wgmma_m64n128k16_bf16_rt(&o_acc[0], &pb[";
    let convert = OVERLAP_CONVERT;
    let exp = OVERLAP_EXP;
    // Group 1 passes the first turn at entry.
    let consumer = at("} else {  // consumer warps", 0);
    let first = at("if (((index_t)threadIdx.y) == 1) {", consumer);
    next_is(first, pass);
    // The peeled tile 0: K's stage waited for outside the turn, S_0 issued in a turn of its
    // own, the turn passed before its wait_group 0.
    let prologue = at("for (index_t t_o_first = 0; ", first);
    let k0 = at("hf_mbarrier_wait(&ks_full[t_o % 2], ", prologue);
    let turn0 = at(wait, k0);
    next_is(turn0, "hf_wgmma_fence();");
    let s0 = at("hf_wgmma_commit();", at(scores, turn0));
    next_is(s0, pass);
    next_is(s0 + 1, "hf_wgmma_wait<0>();");
    // The loop: K_j's stage, then the turn; S_j issued, V_{j-1}'s stage waited for and P_{j-1}
    // converted inside the turn, O += P_{j-1} V_{j-1} issued, the turn passed; only then
    // wait_group 1, K_j's stage released, tile j's softmax, wait_group 0, V's stage released.
    let main = at("for (index_t t_o_pv = 0; ", s0);
    let k = at("hf_mbarrier_wait(&ks_full[t_o % 2], ", main);
    let turn = at(wait, k);
    next_is(turn, "hf_wgmma_fence();");
    let s_commit = at("hf_wgmma_commit();", at(scores, turn));
    next_is(
        s_commit,
        "hf_mbarrier_wait(&vs_full[t_o_pv % 2], (unsigned)(t_o_pv / 2 % 2));",
    );
    let conv = at(convert, s_commit);
    let pv_fence = at("hf_wgmma_fence();", conv);
    let pv_commit = at("hf_wgmma_commit();", at(pv, pv_fence));
    assert!(!lines.0[turn + 1..pv_commit].contains(&pass), "one turn");
    next_is(pv_commit, pass);
    next_is(pv_commit + 1, "hf_wgmma_wait<1>();");
    next_is(
        pv_commit + 2,
        "hf_mbarrier_arrive_per_warp(&ks_empty[t_o % 2]);",
    );
    let drained = at("hf_wgmma_wait<0>();", at(exp, pv_commit));
    next_is(
        drained,
        "hf_mbarrier_arrive_per_warp(&vs_empty[t_o_pv % 2]);",
    );
    // The last P V in a turn of its own; group 0 takes the last turn at exit.
    let epilogue = at("for (index_t t_o_last = 0; ", drained);
    let last_turn = at(wait, at(convert, epilogue));
    next_is(last_turn, "hf_wgmma_fence();");
    let last_commit = at("hf_wgmma_commit();", at(pv, last_turn));
    next_is(last_commit, pass);
    next_is(last_commit + 1, "hf_wgmma_wait<0>();");
    let exit = at("if (((index_t)threadIdx.y) == 0) {", last_commit);
    next_is(exit, wait);
    // Three turns per group (the peeled S, the loop's, the last P V), one pass at entry and
    // one wait at exit: no other.
    assert_eq!(count_lines(&cuda, wait), 4);
    assert_eq!(count_lines(&cuda, pass), 4);
    // Three groups (192 queries a block, FlashAttention-3's count at D = 64) take the turns
    // round: group 2 passes the first, each group to the next.
    let three = src
        .replace("s_sum.split(1, 128)", "s_sum.split(1, 192)")
        .replace("registers=[24, 240]", "registers=[32, 160]");
    let cuda = hopfuse_tests::compile(&three).cuda;
    let pass3 = "hf_bar_arrive_group<256>(15u - (threadIdx.y + 1u) % 3u);";
    let entry = line_of(&cuda, "if (((index_t)threadIdx.y) == 2) {");
    assert_eq!(cuda.lines().nth(entry + 1).map(str::trim), Some(pass3));
    assert_eq!(count_lines(&cuda, pass3), 4);
    assert_eq!(count_lines(&cuda, wait), 4);
}

#[test]
fn the_overlap_and_the_turns_compose_with_the_causal_tile_classification() {
    let (_, cuda) = turns_example(
        "attention/online_wgmma_overlap_pingpong_causal.hf",
        "attention/online_wgmma_overlap_causal.hf",
    );
    // Both groups of a block run the query tile's key tiles (the bound names the block's
    // s2_o, not the group), so they issue the same turns.
    let bound = "hf_min<index_t>(hf_ceil_div<index_t>(T, 128), s2_o + 1)";
    assert!(cuda.contains(&format!(
        "for (index_t t_o_pv = 0; t_o_pv < 0 - hf_min<index_t>(0, 0 - hf_min<index_t>({bound} - 1, s2_o - 1)); ++t_o_pv) {{"
    )));
    assert!(!cuda.contains("s2_io + 1)"), "{cuda}");
    // The peeled first tile's mask split comes after its turn is passed (one branch taken by
    // both groups, no turn inside it); the loop's mask is not split.
    let (wait, pass) = (TURN_WAIT, TURN_PASS);
    let split = line_of(&cuda, "if (t_o < s2_o) {");
    let main = line_of(&cuda, "for (index_t t_o_pv = 0; ");
    let first_pass = line_of(&cuda, "hf_wgmma_wait<0>();") - 1;
    assert_eq!(cuda.lines().nth(first_pass).map(str::trim), Some(pass));
    assert!(first_pass < split && split < main);
    assert_eq!(cuda.matches("if (t_o < s2_o) {").count(), 1, "{cuda}");
    // Four turns per group in the code (the peeled S, the kept tiles' loop, the diagonal
    // tiles' loop, the last P V), one pass at entry and one wait at exit.
    assert_eq!(count_lines(&cuda, wait), 5);
    assert_eq!(count_lines(&cuda, pass), 5);
}

#[test]
fn the_overlap_says_where_it_cannot_apply() {
    let with = |path: &str| {
        let src = example(path);
        assert!(src.contains("  online_softmax(o)\n"), "{path}");
        src.replace(
            "  online_softmax(o)\n",
            "  online_softmax(o, overlap=products)\n",
        )
    };
    let stmt = "online_softmax(o, overlap=products)";
    // No circular buffer with empty mbarriers: V's tile is refilled at the end of each
    // iteration, while the P V product of the tile before would still read it.
    for path in [
        "attention/online_wgmma_d128.hf",
        "attention/online_wgmma_causal.hf",
    ] {
        let src = with(path);
        let e = compile_error(&src);
        assert!(
            e.contains("online_softmax(o, overlap=products): the value tiles' stages are not released by empty mbarriers: circular-buffer k's and v's caches with warp_specialized(...)"),
            "{path}: {e}"
        );
        assert!(e.contains(&located(&src, stmt)), "{e}");
    }
    // On CUDA cores there is no asynchronous product to overlap.
    let src = with("attention/online.hf");
    let e = compile_error(&src);
    assert!(
        e.contains("online_softmax(o): overlap=products overlaps the softmax with the P V product on tensor cores, and `o` has no tensor-core tile"),
        "{e}"
    );
    // With the groups' turns the overlap needs two groups or more, as the turns do (one
    // group has nothing to take turns with), located at the circular buffer.
    one_group_takes_no_turns(&with("attention/online_wgmma_ws.hf"));
    // The ping-pong example with the overlap is the combined example's kernel.
    let combined = with("attention/online_wgmma_pingpong.hf");
    assert!(hopfuse_tests::compile(&combined)
        .cuda
        .contains("hf_bar_arrive_group<256>(15u - (threadIdx.y + 1u) % 2u);"));
    // A word overlap does not take.
    let src =
        example("attention/online_wgmma_overlap.hf").replace("overlap=products", "overlap=scores");
    let e = compile_error(&src);
    assert!(
        e.contains("online_softmax's overlap is `products` (the previous tile's P V product runs during this tile's softmax), got `scores`"),
        "{e}"
    );
    // One consumer warp group without a binding (online_wgmma_ws.hf) takes it too.
    let cuda = hopfuse_tests::compile(&with("attention/online_wgmma_ws.hf")).cuda;
    assert!(cuda.contains("hf_wgmma_wait<1>();"));
    assert!(cuda.contains("for (index_t t_o_pv = 0; "));
}

/// online_wgmma.hf with every `from` replaced by `to`.
fn wgmma_with(from: &str, to: &str) -> String {
    let src = example("attention/online_wgmma.hf");
    assert!(src.contains(from), "{from}");
    src.replace(from, to)
}

#[test]
fn tensor_core_attention_errors_name_the_operand() {
    // P as f32 registers: wgmma takes A from registers only as a 16-bit fragment.
    let src = wgmma_with("  pb = cast(p, bf16)\n", "")
        .replace(
            "pf = cast(broadcast(pb, axis=2), f32)",
            "pf = broadcast(p, axis=2)",
        )
        .replace("  pb.inline_at(2)\n", "")
        .lines()
        .filter(|l| !l.starts_with("  pf_broadcast."))
        .map(|l| format!("{l}\n"))
        .collect::<String>();
    let e = compile_error(&src);
    assert!(
        e.contains("`o`: operand `p` is a f32 register fragment (computed from a tensor-core accumulator); wgmma takes A from registers as f16 or bf16 only: round it first (`pb = cast(p, bf16)`)"),
        "{e}"
    );
    assert!(e.contains(&located(&src, "o = sum(pv, axis=1)")), "{e}");
    // The product's K is not a run of 16 columns of the fragment (the tile's keys split 16 x 4,
    // K the outer part: key 4 k + u).
    let mut src = example("attention/online_wgmma.hf");
    for t in ["o", "pv", "pf", "vf", "pf_broadcast", "vf_broadcast"] {
        let from = format!("  {t}.split(3, 16)\n  {t}.reorder(0, 1, 3, 2, 5, 4)\n");
        let to = format!("  {t}.split(3, 16, outer)\n  {t}.reorder(0, 1, 4, 2, 5, 3)\n");
        assert!(src.contains(&from), "{from}");
        src = src.replace(&from, &to);
    }
    let e = compile_error(&src);
    assert!(
        e.contains("`o`: operand `pb` is a register fragment, but not one wgmma can take as A: its index must be a 64-row tile whose columns are this product's K (16 of them from a multiple of 16)"),
        "{e}"
    );
    assert!(e.contains(&located(&src, "o = sum(pv, axis=1)")), "{e}");
}

/// The pass names a compilation ran.
fn ran(c: &hopfuse::Compilation) -> Vec<&str> {
    c.passes.iter().map(|p| p.name).collect()
}

#[test]
fn causal_tiles_stop_at_the_diagonal_and_mask_only_it() {
    let src = example("attention/online_wgmma_causal.hf");
    let c = hopfuse_tests::compile(&src);
    assert!(ran(&c).contains(&"mask_bounds") && ran(&c).contains(&"mask_tiles"));
    let cuda = &c.cuda;
    // Query tile s2_o (64 queries) sees keys up to 64 s2_o + 63: key tiles 0..=s2_o.
    let tiles = line_of(
        cuda,
        "for (index_t t_o = 0; t_o < hf_min<index_t>(hf_ceil_div<index_t>(T, 64), s2_o + 1); ++t_o)",
    );
    // Tiles before the diagonal take the scores as they are; only the diagonal tile is masked.
    let kept = line_of(cuda, "if (t_o < s2_o) {");
    let unmasked = line_of(cuda, "sm[r2] = s_sum_acc[r2];");
    let diagonal = line_of(cuda, "} else {");
    let mask = line_of(cuda, "keep[0] = keep_iota[0] <= keep_iota2[0];");
    let masked = line_of(
        cuda,
        "sm[r2] = keep[0] ? s_sum_acc[r2] : __int_as_float(0xff800000);",
    );
    let order = [tiles, kept, unmasked, diagonal, mask, masked];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    assert_eq!(cuda.matches("keep_iota2[0] = ").count(), 1);
    // The kernel IR after `mask_bounds`: the bound is on the loop before TMA plans it.
    let bounds = c.passes.iter().find(|p| p.name == "mask_bounds").unwrap();
    assert!(
        bounds
            .ir
            .contains("for t_o in min(ceilDiv(T, 64), s2_o + 1) @Serial key 3:"),
        "{}",
        bounds.ir
    );
    // The mask written the other way round, and the strict mask (query i sees keys before i):
    // the same tiles (the strict diagonal still needs its tile), the same unmasked ones.
    for (from, to) in [
        (
            "iota(s, axis=1) <= iota(s, axis=0)",
            "iota(s, axis=0) >= iota(s, axis=1)",
        ),
        (
            "iota(s, axis=1) <= iota(s, axis=0)",
            "iota(s, axis=1) < iota(s, axis=0)",
        ),
    ] {
        let cuda = hopfuse_tests::compile(&src.replace(from, to)).cuda;
        assert!(
            cuda.contains("t_o < hf_min<index_t>(hf_ceil_div<index_t>(T, 64), s2_o + 1);"),
            "{to}"
        );
        assert!(cuda.contains("if (t_o < s2_o) {"), "{to}");
    }
    // An anti-causal mask is no band it reads: pass mask_list lists its key tiles (from the
    // diagonal on) instead.
    let anti = hopfuse_tests::compile(&src.replace(
        "iota(s, axis=1) <= iota(s, axis=0)",
        "iota(s, axis=1) >= iota(s, axis=0)",
    ));
    assert!(!ran(&anti).contains(&"mask_bounds"));
    assert!(ran(&anti).contains(&"mask_list"));
    assert!(anti.cuda.contains("t_o < hf_visited_n;"));
    // Masks no pass bounds keep the full computation: finite masked scores, the mask on the
    // query axis twice.
    for (from, to) in [
        ("where(keep, s, -1.0 / 0.0)", "where(keep, s, -30000.0)"),
        (
            "iota(s, axis=1) <= iota(s, axis=0)",
            "iota(s, axis=0) <= iota(s, axis=0)",
        ),
    ] {
        let c = hopfuse_tests::compile(&src.replace(from, to));
        assert!(!ran(&c).contains(&"mask_bounds"), "{to}");
        assert!(
            c.cuda
                .contains("for (index_t t_o = 0; t_o < hf_ceil_div<index_t>(T, 64); ++t_o)"),
            "{to}"
        );
        assert!(!c.cuda.contains("if (t_o < s2_o)"), "{to}");
    }
    // On CUDA cores, 64 queries a block and key tiles of 32: tiles 0..2 s2_o + 2, the first
    // 2 s2_o unmasked.
    let cuda = hopfuse_tests::compile(&example("attention/online_causal.hf")).cuda;
    assert!(cuda.contains(
        "for (index_t t_o = 0; t_o < hf_min<index_t>(hf_ceil_div<index_t>(T, 32), 2 * (s2_o + 1)); ++t_o)"
    ));
    assert!(cuda.contains("if (t_o < 2 * s2_o) {"));
    assert_eq!(
        cuda.matches("keep[0] = keep_iota[0] <= keep_iota2[0];")
            .count(),
        1
    );
}

/// A softcap's tanh reaches the scores through a product only: `tanh_abs` (absolute error
/// scaled as the term's rounding). Read twice, exponentiated, or divided by, it stays `tanhf`.
#[test]
fn a_softcaps_tanh_is_the_absolute_form_only_where_its_error_scales_linearly() {
    let src = example("auto/attention_softcap.hf");
    // The attention scheduler's schedule of the softcap, for it and for each variant.
    let schedule = hopfuse::auto_schedule(&src, None).unwrap().unwrap().block();
    let with_schedule = |src: &str| hopfuse_tests::compile(&format!("{src}\n{schedule}")).cuda;
    let c = with_schedule(&src);
    assert!(c.contains("= hf_tanh_abs(") && !c.contains("tanhf("), "{c}");
    for (why, math) in [
        ("read twice", "t = tanh(s / cap)\n  sc = cap * t * t"),
        ("exponentiated", "sc = cap * exp(tanh(s / cap))"),
        ("a divisor", "sc = cap / (2.0 + tanh(s / cap))"),
    ] {
        let other = src.replace("sc = cap * tanh(s / cap)", math);
        assert_ne!(other, src);
        let c = with_schedule(&other);
        assert!(
            c.contains("tanhf(") && !c.contains("= hf_tanh_abs("),
            "{why}: {c}"
        );
    }
}
