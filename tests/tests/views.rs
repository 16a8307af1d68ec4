//! Views in the fusion language: `permute`, `transpose` and `expand` as ops whose output axes
//! join the input's axis classes, so the kernel reads the input through its own strides; their
//! reference, CUDA, twin and errors; a tensor meeting its own transpose is refused.

use std::collections::BTreeMap;

use hopfuse_tests::error as err;

fn fusion(inputs: &str, body: &str) -> String {
    format!("fusion f {{\n{inputs}\n  {body}\n  output c\n}}\n")
}

/// The float64 reference of `src` with every input 0, 1, 2, ... over these sizes (`x` has
/// `x_len` elements, any other input one per `M`).
fn reference(src: &str, sizes: &[(&str, i64)], x_len: usize) -> Vec<f64> {
    let f = hopfuse::reference_fusion(src).unwrap_or_else(|e| panic!("{}", e.render(src, "t.hf")));
    let sizes: BTreeMap<String, i64> = sizes.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let mut inputs = BTreeMap::new();
    for &t in &f.inputs {
        let name = f.tensors[t].name.clone();
        let len = if name == "x" {
            x_len
        } else {
            sizes["M"] as usize
        };
        inputs.insert(name, (0..len).map(|i| i as f64).collect::<Vec<_>>());
    }
    hopfuse::backend::reference::evaluate(&f, &sizes, &inputs).unwrap()["c"].clone()
}

#[test]
fn permute_and_transpose_reorder_the_values() {
    // x[2, 3] = [[0, 1, 2], [3, 4, 5]]
    let t = fusion("  input x: f32[M, N]", "c = transpose(x, 0, 1)");
    assert_eq!(
        reference(&t, &[("M", 2), ("N", 3)], 6),
        [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    );
    // x[2, 3, 4] permuted to [4, 2, 3]: c[k, i, j] = x[i, j, k].
    let p = fusion(
        "  input x: f32[A, B, C]",
        "c = permute(x, dims=[2, 0, 1]) * 2.0",
    );
    let c = reference(&p, &[("A", 2), ("B", 3), ("C", 4)], 24);
    for k in 0..4 {
        for i in 0..2 {
            for j in 0..3 {
                assert_eq!(c[k * 6 + i * 3 + j], 2.0 * (i * 12 + j * 4 + k) as f64);
            }
        }
    }
    // Negative axes count from the end.
    let n = fusion("  input x: f32[M, N]", "c = transpose(x, -1, -2)");
    assert_eq!(reference(&n, &[("M", 2), ("N", 3)], 6)[1], 3.0);
}

#[test]
fn a_transpose_reads_the_input_through_its_own_strides() {
    let src = fusion("  input x: f32[M, N]", "c = transpose(x, 0, 1)");
    let cuda = hopfuse::compile(&src, &Default::default()).unwrap().cuda;
    // c is [N, M], in 32 x 32 tiles by the automatic transpose schedule: x's tile is read
    // along x's rows (m * N + n, n across the threads) and read back down its columns.
    assert!(
        cuda.contains("x_s[(m_io * 4 + m_ii) * 33 + n_i] = x[(m_o * 32 + (m_io * 4 + m_ii)) * N + (n_o * 32 + n_i)];"),
        "{cuda}"
    );
    assert!(cuda.contains("c_c[0] = x_s[m_i * 33 + "), "{cuda}");
    let twin = hopfuse::torch_twin(&src).unwrap().source;
    assert!(twin.contains("x.transpose(0, 1).contiguous()"), "{twin}");
    let p = fusion("  input x: f32[A, B, C]", "c = permute(x, dims=[2, 0, 1])");
    let twin = hopfuse::torch_twin(&p).unwrap().source;
    assert!(twin.contains("x.permute(2, 0, 1)"), "{twin}");
}

#[test]
fn expand_gives_broadcast_axes_an_extent() {
    let src = fusion(
        "  input x: f32[N]\n  input y: f32[M, K]",
        "c = expand(broadcast(x, axis=0), shape=[M, N])",
    );
    let c = reference(&src, &[("M", 2), ("N", 3), ("K", 1)], 3);
    assert_eq!(c, [0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
    let cuda = hopfuse::compile(&src, &Default::default()).unwrap().cuda;
    // c's loops are over (m, n); x is read along n only.
    assert!(
        cuda.contains("c_broadcast[0] = x[n];") && cuda.contains("c[m * N + n] = c_broadcast[0];"),
        "{cuda}"
    );
    let twin = hopfuse::torch_twin(&src).unwrap().source;
    assert!(
        twin.contains("x.unsqueeze(0).expand(y.shape[0], -1)"),
        "{twin}"
    );
}

#[test]
fn view_errors_are_located_and_say_what_to_write() {
    let xy = "  input x: f32[M, N]";
    let e = err(&fusion(xy, "c = transpose(x, 0, 2)"));
    assert!(
        e.starts_with("t.hf:3:23: error: `transpose`: 2 is not an axis of `x` (rank 2)"),
        "{e}"
    );
    let e = err(&fusion(xy, "c = permute(x, dims=[0, 0])"));
    assert!(
        e.contains("t.hf:3:18") && e.contains("must list each of the 2 axes of `x` once"),
        "{e}"
    );
    let e = err(&fusion(xy, "c = permute(x)"));
    assert!(e.contains("permute needs `dims=[...]`"), "{e}");
    // Transposed shapes differ unless the tensor is square; a square one would need the same
    // loop for both of its axes.
    let e = err(&fusion(xy, "c = x + transpose(x, 0, 1)"));
    assert!(
        e.contains("axis 0 has extent M in one operand and N in another"),
        "{e}"
    );
    let e = err(&fusion(
        "  input x: f32[N, N]",
        "c = x + transpose(x, 0, 1)",
    ));
    assert!(
        e.contains("t.hf:3:7") && e.contains("axes 0 and 1 of `x` the same loop"),
        "{e}"
    );
    let e = err(&fusion(xy, "c = expand(x, shape=[M, K])"));
    assert!(e.contains("an extent is a size symbol of an input"), "{e}");
    let e = err(&fusion(xy, "c = expand(x, shape=[M, M])"));
    assert!(
        e.contains("expand: axis 1 of `x` has extent N, not M (only broadcast axes expand)"),
        "{e}"
    );
    let e = err(&fusion(xy, "c = expand(x, shape=[M])"));
    assert!(
        e.contains("`shape=` has 1 extents and `x` has rank 2"),
        "{e}"
    );
}

#[test]
fn slice_pad_cat_and_reshape_move_the_values() {
    // x[2, 4] = [[0, 1, 2, 3], [4, 5, 6, 7]]
    let xy = "  input x: f32[M, N]";
    let s = fusion(xy, "c = slice(x, axis=1, start=1, stop=-1)");
    assert_eq!(
        reference(&s, &[("M", 2), ("N", 4)], 8),
        [1.0, 2.0, 5.0, 6.0]
    );
    let s = fusion(xy, "c = slice(x, axis=1, start=1, step=2)");
    assert_eq!(
        reference(&s, &[("M", 2), ("N", 4)], 8),
        [1.0, 3.0, 5.0, 7.0]
    );
    let s = fusion(xy, "c = slice(x, axis=0, start=-1)");
    assert_eq!(
        reference(&s, &[("M", 2), ("N", 4)], 8),
        [4.0, 5.0, 6.0, 7.0]
    );
    let p = fusion(xy, "c = pad(x, axis=1, before=1, after=2, value=-1)");
    assert_eq!(
        reference(&p, &[("M", 2), ("N", 2)], 4),
        [-1.0, 0.0, 1.0, -1.0, -1.0, -1.0, 2.0, 3.0, -1.0, -1.0]
    );
    // Any other input has one value per M: y[2, 1] = [[0], [1]].
    let c = fusion(
        "  input x: f32[M, N]\n  input y: f32[M, K]",
        "c = cat(x, y, axis=1)",
    );
    assert_eq!(
        reference(&c, &[("M", 2), ("N", 2), ("K", 1)], 4),
        [0.0, 1.0, 0.0, 2.0, 3.0, 1.0]
    );
    let r = fusion(xy, "c = reshape(x, [M * N])");
    assert_eq!(
        reference(&r, &[("M", 2), ("N", 2)], 4),
        [0.0, 1.0, 2.0, 3.0]
    );
}

#[test]
fn views_that_move_indices_read_the_input_at_the_moved_index() {
    let xy = "  input x: f32[M, N]";
    let cuda = |body: &str| {
        hopfuse::compile(&fusion(xy, body), &Default::default())
            .unwrap()
            .cuda
    };
    let twin = |src: &str| hopfuse::torch_twin(src).unwrap().source;
    // The extent ceil((N - 2) / 2); element i of a row read at 1 + 2 * i.
    let src = fusion(xy, "c = slice(x, axis=1, start=1, stop=-1, step=2)");
    let c = cuda("c = slice(x, axis=1, start=1, stop=-1, step=2)");
    assert!(c.contains("hf_ceil_div<index_t>(N - 2, 2)"), "{c}");
    assert!(c.contains("(1 + 2 *"), "{c}");
    assert!(twin(&src).contains("x[:, 1:-1:2]"), "{}", twin(&src));
    let src = fusion(xy, "c = pad(x, axis=1, before=1, after=2, value=0.5)");
    let c = cuda("c = pad(x, axis=1, before=1, after=2, value=0.5)");
    // In range of x the read, else the value; the read itself clamped into x.
    assert!(
        c.contains(">= 1) && (static_cast<int>(") && c.contains("< (N + 1))) ? x["),
        "{c}"
    );
    assert!(c.contains("N - 1)] : 0.5f;"), "{c}");
    assert!(
        twin(&src).contains("torch.nn.functional.pad(x, (1, 2), value=0.5)"),
        "{}",
        twin(&src)
    );
    let src = fusion(xy, "c = pad(x, axis=0, before=2)");
    assert!(
        twin(&src).contains("torch.nn.functional.pad(x, (0, 0, 2, 0))"),
        "{}",
        twin(&src)
    );
    let cat = fusion(
        "  input x: f32[M, N]\n  input y: f32[M, K]",
        "c = cat(x, y, axis=1)",
    );
    let c = hopfuse::compile(&cat, &Default::default()).unwrap().cuda;
    assert!(c.contains("< N) ? x[") && c.contains(": y["), "{c}");
    assert!(
        c.contains("float* __restrict__ c,") && c.contains("M * (N + K)"),
        "{c}"
    );
    assert!(
        twin(&cat).contains("torch.cat((x, y), dim=1)"),
        "{}",
        twin(&cat)
    );
    let src = fusion("  input x: f32[M, H, D]", "c = reshape(x, [M, H * D])");
    let c = hopfuse::compile(&src, &Default::default()).unwrap().cuda;
    // Row-major order is kept: the flattened loop reads x at its own linear index.
    assert!(
        c.contains("c_c[md_i] = x[((md_ooo * 2 + md_ooi) * 128 + md_oi) * 4 + md_i];"),
        "{c}"
    );
    assert!(
        twin(&src).contains("x.reshape(x.shape[0], x.shape[1] * x.shape[2])"),
        "{}",
        twin(&src)
    );
}

#[test]
fn a_slice_of_a_size_symbol_is_checked_before_it_reads() {
    let src = fusion(
        "  input x: f32[M, N]",
        "c = slice(x, axis=1, start=2, stop=6)",
    );
    let plan = hopfuse::compile(&src, &Default::default()).unwrap().plan;
    let sizes = |n: i64| BTreeMap::from([("M".to_string(), 2), ("N".to_string(), n)]);
    assert!(plan.concretize(&sizes(6)).is_ok());
    let e = plan.concretize(&sizes(5)).unwrap_err().to_string();
    assert!(
        e.contains("`slice` of `x` along axis 1 reads up to index 5"),
        "{e}"
    );
    let f = hopfuse::reference_fusion(&src).unwrap();
    let inputs = BTreeMap::from([("x".to_string(), vec![0.0; 10])]);
    let e = hopfuse::backend::reference::evaluate(&f, &sizes(5), &inputs).unwrap_err();
    assert!(e.contains("reads up to index 5"), "{e}");
    // From the start to one before the end: the extent follows N, and must not be empty.
    let src = fusion(
        "  input x: f32[M, N]",
        "c = slice(x, axis=1, start=1, stop=-1)",
    );
    let plan = hopfuse::compile(&src, &Default::default()).unwrap().plan;
    assert!(plan.concretize(&sizes(3)).is_ok());
    let e = plan.concretize(&sizes(2)).unwrap_err().to_string();
    assert!(e.contains("must not be empty"), "{e}");
}

#[test]
fn errors_of_views_that_move_indices_are_located() {
    let xy = "  input x: f32[M, N]";
    let e = err(&fusion(
        "  input x: f32[M, 4]",
        "c = slice(x, axis=1, start=3, stop=1)",
    ));
    assert!(
        e.contains("`slice` of `x` along axis 1 (extent 4) is empty"),
        "{e}"
    );
    let e = err(&fusion(xy, "c = slice(x, axis=1, step=0)"));
    assert!(
        e.contains("t.hf:3:24") && e.contains("`step=` is a positive integer"),
        "{e}"
    );
    let e = err(&fusion(xy, "c = slice(x, axis=1, start=-2, stop=3)"));
    assert!(
        e.contains("a negative start needs a negative or omitted stop"),
        "{e}"
    );
    let e = err(&fusion(xy, "c = slice(x, axis=2)"));
    assert!(e.contains("axis"), "{e}");
    let e = err(&fusion(xy, "c = pad(x, axis=1, before=-1)"));
    assert!(e.contains("`before=` is an integer >= 0"), "{e}");
    let e = err(&fusion(
        "  input x: f32[M, N]\n  input y: f32[K, N]",
        "c = cat(x, y, axis=1)",
    ));
    assert!(
        e.contains("`cat` along axis 1: axis 0 has extent M in `x` and K in `y`"),
        "{e}"
    );
    let e = err(&fusion(
        "  input x: f32[M, N]\n  input y: bf16[M, N]",
        "c = cat(x, y, axis=0)",
    ));
    assert!(e.contains("`cat`: `x` is f32 and `y` is bf16"), "{e}");
    let e = err(&fusion(xy, "c = reshape(x, [M, 8, N])"));
    assert!(
        e.starts_with("t.hf:3:18: error: `reshape` keeps the element count: `x` has M * N elements and the shape 8 * M * N"),
        "{e}"
    );
    let e = err(&fusion(xy, "c = reshape(x, [M, N + 1])"));
    assert!(e.contains("an extent of `reshape` is a size symbol"), "{e}");
    // A schedule that caches the input of such a view: the view recomputes the copy from the
    // input in global memory, and the copy, read by nothing else, is not made.
    let src = "fusion f {\n  input x: f32[4, 8]\n  c = slice(x, axis=1, start=1)\n  output c\n}\nschedule {\n  x_c = cache_after(x)\n}\n";
    let cuda = hopfuse::compile(src, &Default::default()).unwrap().cuda;
    assert!(!cuda.contains("x_c"), "{cuda}");
    assert!(cuda.contains("= x[") && cuda.contains("(1 + "), "{cuda}");
}

/// Inputs 0, 1, 2, ... as for [`reference`], evaluated over M = 2, N = 4 for tensor `c`.
fn reference_2x4(body: &str) -> Vec<f64> {
    reference(
        &fusion("  input x: f32[M, N]", body),
        &[("M", 2), ("N", 4)],
        8,
    )
}

#[test]
fn views_of_computed_tensors_and_of_views_recompute_them() {
    // x = [[0, 1, 2, 3], [4, 5, 6, 7]]
    let exp = |v: &[f64]| v.iter().map(|v| v.exp()).collect::<Vec<_>>();
    assert_eq!(
        reference_2x4("c = slice(exp(x), axis=1, start=1)"),
        exp(&[1.0, 2.0, 3.0, 5.0, 6.0, 7.0])
    );
    assert_eq!(
        reference_2x4("c = slice(slice(x, axis=1, start=1), axis=1, step=2)"),
        [1.0, 3.0, 5.0, 7.0]
    );
    assert_eq!(
        reference_2x4("c = slice(reshape(x * 2.0, [M * N]), axis=0, start=5)"),
        [10.0, 12.0, 14.0]
    );
    assert_eq!(
        reference_2x4("c = cat(-slice(x, axis=1, start=2), slice(x, axis=1, stop=2), axis=1)"),
        [-2.0, -3.0, 0.0, 1.0, -6.0, -7.0, 4.0, 5.0]
    );
    assert_eq!(
        reference_2x4("c = pad(slice(x + 1.0, axis=1, stop=1), axis=1, after=1, value=-1)"),
        [1.0, -1.0, 5.0, -1.0]
    );
    let cuda = |body: &str| {
        let src = fusion("  input x: f32[M, N]", body);
        hopfuse::compile(&src, &Default::default())
            .unwrap_or_else(|e| panic!("{}", e.render(&src, "t.hf")))
            .cuda
    };
    // The exp is computed at the moved index, and nowhere else.
    let c = cuda("c = slice(exp(x), axis=1, start=1)");
    assert!(c.contains("expf(x[") && c.contains("(1 + "), "{c}");
    assert_eq!(c.matches("expf(").count(), 1, "{c}");
    // A slice of a slice reads x at 1 + 2 * i: the inner slice is not made.
    let c = cuda("c = slice(slice(x, axis=1, start=1), axis=1, step=2)");
    assert!(c.contains("(1 + 2 *"), "{c}");
    assert!(!c.contains("c_slice"), "{c}");
    // rotate_half: each half read from the other half of x, negated where the first is.
    let c = cuda("c = cat(-slice(x, axis=1, start=2), slice(x, axis=1, stop=2), axis=1)");
    assert!(c.contains(") ? -(x["), "{c}");
    // A per-row sum broadcast along the sliced axis is read where it is, at the row.
    let src = fusion(
        "  input x: f32[M, N]",
        "s = sum(x, axis=1)\n  c = slice(x * broadcast(s, axis=1), axis=1, start=1)",
    );
    assert!(hopfuse::compile(&src, &Default::default()).is_ok());
    assert_eq!(
        reference(&src, &[("M", 2), ("N", 4)], 8),
        [6.0, 12.0, 18.0, 110.0, 132.0, 154.0]
    );
}

#[test]
fn a_view_cannot_move_the_axes_of_a_reduction_it_reads() {
    let xy = "  input x: f32[M, N]";
    let e = err(&fusion(
        xy,
        "s = sum(x, axis=1)\n  y = x * broadcast(s, axis=1)\n  c = slice(y, axis=0, start=1)",
    ));
    assert!(
        e.starts_with("t.hf:5:13: error: `slice` reads `y`, computed from `s`, at moved indices along axis 0 of `s`")
            && e.contains("`s` (a `sum` reduction) is held where it is computed"),
        "{e}"
    );
    // A reshape moves every axis.
    let e = err(&fusion(
        xy,
        "s = max(x, axis=1)\n  c = reshape(x - broadcast(s, axis=1), [M * N])",
    ));
    assert!(
        e.contains("`reshape` reads") && e.contains("`s` (a `max` reduction)"),
        "{e}"
    );
    // Through a view of a view: the inner slice moves the iota's axis.
    let e = err(&fusion(
        xy,
        "i = iota(x, axis=1)\n  c = slice(slice(x + cast(i, f32), axis=1, start=1), axis=0, start=1)",
    ));
    assert!(e.contains("(a `iota`)"), "{e}");
    // A chain that reads each tensor twice doubles the recomputation at every step.
    let mut body = String::from("a0 = x + 1.0");
    for k in 1..9 {
        body += &format!("\n  a{k} = a{} * a{}", k - 1, k - 1);
    }
    body += "\n  c = slice(a8, axis=1, start=1)";
    let e = err(&fusion(xy, &body));
    assert!(
        e.contains("t.hf:12:13: error: `slice` would recompute `a8` as 511 ops"),
        "{e}"
    );
}

/// examples/fusions/rotary.hf: x * cos + rotate_half(x) * sin on values bf16 holds exactly.
#[test]
fn rotary_example_matches_the_formula() {
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/fusions/rotary.hf"
    ))
    .unwrap();
    let f = hopfuse::reference_fusion(&src).unwrap();
    let (s, d) = (3usize, 128usize);
    let q: Vec<f64> = (0..s * d).map(|i| ((i * 7) % 9) as f64 - 4.0).collect();
    let cos: Vec<f64> = (0..s * d)
        .map(|i| ((i * 5) % 3) as f64 * 0.5 - 0.5)
        .collect();
    let sin: Vec<f64> = (0..s * d)
        .map(|i| ((i * 3) % 5) as f64 * 0.25 - 0.5)
        .collect();
    let inputs = BTreeMap::from([
        ("q".to_string(), q.clone()),
        ("cos_t".to_string(), cos.clone()),
        ("sin_t".to_string(), sin.clone()),
        ("scale".to_string(), vec![0.125]),
    ]);
    let sizes = BTreeMap::from([("S".to_string(), s as i64)]);
    let y = hopfuse::backend::reference::evaluate(&f, &sizes, &inputs).unwrap()["y"].clone();
    let half = d / 2;
    for r in 0..s {
        for j in 0..d {
            let x = |k: usize| q[r * d + k] * 0.125;
            let rotated = if j < half { -x(j + half) } else { x(j - half) };
            let want = x(j) * cos[r * d + j] + rotated * sin[r * d + j];
            assert_eq!(y[r * d + j], want, "row {r} column {j}");
        }
    }
    // The kernel computes the scaled q once for x and recomputes it in the rotation; the
    // halves and their negation are not tensors of their own.
    let cuda = hopfuse::compile(&src, &Default::default()).unwrap().cuda;
    assert_eq!(cuda.matches("alignas(16) float").count(), 5, "{cuda}");
    assert!(
        cuda.contains(
            "rotated[sd_i] = (static_cast<int>((((sd_ooo * 2 + sd_ooi) * 128 + sd_oi) * 8 + sd_i) % 128) < 64) ? -("
        ),
        "{cuda}"
    );
}
