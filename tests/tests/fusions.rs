//! `examples/fusions/`: the transformer fusions of issue 33, one per kind, each with a hand
//! schedule, `// bench:` sizes (a real model's and a ragged one) and a PyTorch twin written as
//! a PyTorch user would (no einsum: the twin is the peer `--peers` times).

use hopfuse_tests::examples;

/// Every kind issue 33's table lists, by its example's name (LayerNorm twice: its statistics
/// in one pass, `welford(v)`, and in two, for timing the two lowerings side by side).
const KINDS: [&str; 13] = [
    "rmsnorm",
    "layernorm",
    "layernorm_two_pass",
    "add_rmsnorm",
    "softmax_scale",
    "causal_softmax",
    "cross_entropy_labels",
    "rotary",
    "swiglu",
    "gelu_exact",
    "dropout_residual",
    "quantize_fp8",
    "transpose_bf16",
];

#[test]
fn every_fusion_example_is_scheduled_sized_and_twinned_without_einsum() {
    let fusions: Vec<_> = examples()
        .into_iter()
        .filter(|e| e.group == "fusions")
        .collect();
    let mut names: Vec<&str> = fusions.iter().map(|e| e.name.as_str()).collect();
    names.sort();
    let mut kinds = KINDS.to_vec();
    kinds.sort();
    assert_eq!(names, kinds);
    for e in &fusions {
        let src = std::fs::read_to_string(&e.path).unwrap();
        let program =
            hopfuse::frontend::parse(&src).unwrap_or_else(|errs| panic!("{}: {errs:?}", e.name));
        assert!(!program.schedule.is_empty(), "{}: no hand schedule", e.name);
        let c = hopfuse::compile(&src, &Default::default())
            .unwrap_or_else(|err| panic!("{}", err.render(&src, &e.path.display().to_string())));
        assert!(c.plan.auto_schedule.is_none(), "{}", e.name);
        // Bench sizes: at least two, one of them ragged (an extent that is no multiple of 8).
        let benches: Vec<&str> = src
            .lines()
            .filter_map(|l| l.strip_prefix("// bench: "))
            .collect();
        assert!(benches.len() >= 2, "{}: {benches:?}", e.name);
        let ragged = benches.iter().any(|b| {
            b.split(',')
                .filter_map(|kv| kv.split_once('='))
                .any(|(_, v)| v.parse::<i64>().is_ok_and(|n| n % 8 != 0))
        });
        assert!(ragged, "{}: no ragged bench size in {benches:?}", e.name);
        let twin = hopfuse::torch_twin(&src).unwrap().source;
        assert!(!twin.contains("einsum"), "{}:\n{twin}", e.name);
    }
}
