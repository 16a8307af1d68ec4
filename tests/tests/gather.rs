//! `gather` / `take_along_axis` and `index_select` (issue 33): indices loaded from data, end to
//! end: located errors, the float64 reference (an index outside the axis clamped to its nearest
//! end, as the kernel clamps it; torch raises), the CUDA (the index read into the address of the
//! load through `hf_index_in`) and the PyTorch twin.

use hopfuse_tests::{compile, error as err};

/// Output `c` of `src` by the float64 reference.
fn reference(src: &str, sizes: &[(&str, i64)], inputs: &[(&str, Vec<f64>)]) -> Vec<f64> {
    hopfuse_tests::reference(src, sizes, inputs, "c")
}

/// An example by its path under `examples/` without `.hf` (`ops/embedding`).
fn example(path: &str) -> String {
    hopfuse_tests::example(&format!("{path}.hf"))
}

fn fusion(inputs: &str, body: &str) -> String {
    format!("fusion f {{\n{inputs}\n  {body}\n  output c\n}}\n")
}

/// x: 2 rows of 3.
const X: [f64; 6] = [10.0, 11.0, 12.0, 20.0, 21.0, 22.0];

#[test]
fn gather_picks_along_an_axis_and_clamps_what_is_out_of_range() {
    let x = ("x", X.to_vec());
    // One label per row, the second out of range (clamped to the last column).
    let src = fusion(
        "  input x: f32[M, N]\n  input labels: i32[M]",
        "c = gather(x, broadcast(labels, axis=1), axis=1)",
    );
    let at = |labels: Vec<f64>| {
        reference(
            &src,
            &[("M", 2), ("N", 3)],
            &[x.clone(), ("labels", labels)],
        )
    };
    assert_eq!(at(vec![1.0, 2.0]), [11.0, 22.0]);
    assert_eq!(at(vec![7.0, -3.0]), [12.0, 20.0], "clamped to [0, N)");
    // A full index of the result's shape: each row reordered (take_along_axis), i64 indices.
    let src = fusion(
        "  input x: f32[M, N]\n  input index: i64[M, N]",
        "c = take_along_axis(x, index, axis=1)",
    );
    let reordered = reference(
        &src,
        &[("M", 2), ("N", 3)],
        &[x.clone(), ("index", vec![2.0, 0.0, 1.0, 1.0, 1.0, 0.0])],
    );
    assert_eq!(reordered, [12.0, 10.0, 11.0, 21.0, 21.0, 20.0]);
    // Along axis 0: each column picks a row.
    let src = fusion(
        "  input x: f32[M, N]\n  input index: i32[K, N]",
        "c = gather(x, index, axis=0)",
    );
    let rows = reference(
        &src,
        &[("M", 2), ("N", 3), ("K", 1)],
        &[x, ("index", vec![1.0, 0.0, 1.0])],
    );
    assert_eq!(rows, [20.0, 11.0, 22.0]);
}

#[test]
fn index_select_picks_rows_and_clamps_what_is_out_of_range() {
    let src = fusion(
        "  input x: f32[V, D]\n  input tokens: i32[T]",
        "c = index_select(x, 0, tokens) * 2.0",
    );
    let rows = reference(
        &src,
        &[("V", 2), ("D", 3), ("T", 4)],
        &[("x", X.to_vec()), ("tokens", vec![1.0, 0.0, 9.0, -1.0])],
    );
    assert_eq!(
        rows,
        [40.0, 42.0, 44.0, 20.0, 22.0, 24.0, 40.0, 42.0, 44.0, 20.0, 22.0, 24.0]
    );
    // Along the last axis, of a computed x (recomputed at the picked columns).
    let src = fusion(
        "  input x: f32[V, D]\n  input cols: u8[K]",
        "c = index_select(x + 1.0, -1, cols)",
    );
    let cols = reference(
        &src,
        &[("V", 2), ("D", 3), ("K", 2)],
        &[("x", X.to_vec()), ("cols", vec![2.0, 0.0])],
    );
    assert_eq!(cols, [13.0, 11.0, 23.0, 21.0]);
}

#[test]
fn the_index_is_loaded_into_the_address_and_clamped_in_the_kernel() {
    let c = compile(&example("fusions/cross_entropy_labels"));
    assert!(
        c.cuda
            .contains("logits[m * V + hf_index_in<index_t>(labels[m], V)]"),
        "{}",
        c.cuda
    );
    assert!(c
        .cuda
        .contains("__device__ __forceinline__ T hf_index_in(I v, T n)"));
    // The kernel IR says it too, and reads back.
    let ir = &c.passes.last().unwrap().ir;
    assert!(ir.contains("index_in(labels[m], V)"), "{ir}");
    // An embedding row: 16-byte vector loads at the token's row when it is aligned.
    let c = compile(&example("ops/embedding"));
    assert!(
        c.cuda.contains("*reinterpret_cast<const hf_vec<hf_bf16, 8>*>(&table[hf_index_in<index_t>(tokens[t], V) * D + (d_oo * 128 + d_oi) * 8])"),
        "{}",
        c.cuda
    );
    // Without a schedule too.
    let src = fusion(
        "  input x: bf16[V, D]\n  input tokens: i64[T]",
        "c = index_select(x, 0, tokens)",
    );
    assert!(compile(&src).cuda.contains("hf_index_in<index_t>(tokens["));
}

#[test]
fn the_twin_calls_torch_gather_and_index_select() {
    let twin = |src: &str| hopfuse::torch_twin(src).unwrap().source;
    let ce = twin(&example("fusions/cross_entropy_labels"));
    assert!(
        ce.contains("torch.gather(x, 1, labels.unsqueeze(1).long())")
            && ce.contains("torch.logsumexp(x, dim=1)"),
        "{ce}"
    );
    let emb = twin(&example("ops/embedding"));
    assert!(
        emb.contains("torch.index_select(table, 0, tokens)"),
        "{emb}"
    );
    let src = fusion(
        "  input x: f32[M, N]\n  input index: i64[M, N]",
        "c = gather(x, index, axis=1)",
    );
    assert!(twin(&src).contains("torch.gather(x, 1, index)"));
    let src = fusion(
        "  input x: f32[V, D]\n  input tokens: u8[T]",
        "c = index_select(x, 0, tokens)",
    );
    assert!(twin(&src).contains("torch.index_select(x, 0, tokens.int())"));
}

#[test]
fn gather_errors_are_located() {
    let xl = "  input x: f32[M, N]\n  input labels: i32[M]";
    let e = err(&fusion(
        "  input x: f32[M, N]\n  input labels: f32[M, 1]",
        "c = gather(x, labels, axis=1)",
    ));
    assert!(
        e.contains("t.hf:4:17") && e.contains("the index `labels` is f32"),
        "{e}"
    );
    let e = err(&fusion(
        xl,
        "c = gather(x, broadcast(labels + 1, axis=1), axis=1)",
    ));
    assert!(
        e.contains("t.hf:4:17") && e.contains("reads its index from a fusion input"),
        "{e}"
    );
    let e = err(&fusion(xl, "c = gather(x, labels, axis=1)"));
    assert!(
        e.contains("t.hf:4:17") && e.contains("an index of the result's shape, rank 2"),
        "{e}"
    );
    let e = err(&fusion(
        "  input x: f32[M, N]\n  input index: i32[K, 2]",
        "c = gather(x, index, axis=1)",
    ));
    assert!(
        e.contains("t.hf:4:17")
            && e.contains("axis 0 of the index `index` has extent K and of `x` M"),
        "{e}"
    );
    let e = err(&fusion(
        xl,
        "c = gather(x, broadcast(labels, axis=1), axis=2)",
    ));
    assert!(e.contains("axis 2 is out of range"), "{e}");
    let e = err(&fusion(xl, "c = index_select(x, labels, labels)"));
    assert!(
        e.contains("t.hf:4:23") && e.contains("takes the axis, a number"),
        "{e}"
    );
    let e = err(&fusion(xl, "c = index_select(x, 2, labels)"));
    assert!(
        e.contains("t.hf:4:23") && e.contains("2 is not an axis of `x`"),
        "{e}"
    );
    let e = err(&fusion(
        "  input x: f32[M, N]\n  input index: i32[M, N]",
        "c = index_select(x, 0, index)",
    ));
    assert!(e.contains("takes a 1-D index"), "{e}");
    // A reduction's result is held where it is computed: not gathered along its axis.
    let e = err(&fusion(
        "  input x: f32[M, N]\n  input index: i32[M, N]",
        "c = gather(x - broadcast(max(x, axis=1), axis=1), index, axis=0)",
    ));
    assert!(
        e.contains("t.hf:4:14") && e.contains("held where it is computed"),
        "{e}"
    );
}
