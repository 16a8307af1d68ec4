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
    hopfuse::reference::evaluate(&f, &sizes, &inputs).unwrap()["c"].clone()
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
    // c is [N, M], flattened by the automatic pointwise schedule: element `i` of c is
    // (n, m) = (i / M, i % M), and x is read at m * N + n.
    assert!(
        cuda.contains("x_c[0] = x[((nm_oo * 2 + nm_oi) * 128 + nm_i) % M * N + ((nm_oo * 2 + nm_oi) * 128 + nm_i) / M];"),
        "{cuda}"
    );
    let twin = hopfuse::torch_twin(&src).unwrap().source;
    assert!(twin.contains("x.transpose(0, 1)"), "{twin}");
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
