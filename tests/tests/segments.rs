//! Segmentation (`hopfuse::segment`): which examples are split, that every kernel of a split
//! has an automatic schedule (none is the serial default), that the segments evaluated in
//! order (the float64 reference of each, intermediates passed by name) give the whole fusion's
//! outputs, and the segmented launch plan.

use hopfuse::segment::Decision;
use hopfuse_tests::{example, examples};
use std::collections::BTreeMap;

fn sizes(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn split(source: &str, sizes: Option<&BTreeMap<String, i64>>) -> hopfuse::Segmented {
    let options = hopfuse::CompileOptions {
        aligned_for: sizes.cloned(),
        ..Default::default()
    };
    match hopfuse::compile_program(source, &options).unwrap() {
        hopfuse::Compiled::Segmented(s) => *s,
        hopfuse::Compiled::One { .. } => panic!("expected a split"),
    }
}

#[test]
fn exactly_the_segmentation_examples_are_split_and_each_kernel_is_scheduled() {
    let mut split_ids = Vec::new();
    for e in examples() {
        let source = std::fs::read_to_string(&e.path).unwrap();
        if let Decision::Split(_) = hopfuse::segment::decide(&source, None).unwrap() {
            split_ids.push(e.id());
            let s = split(&source, None);
            for (c, seg) in s.kernels.iter().zip(&s.segmentation.segments) {
                let note = c
                    .plan
                    .auto_schedule
                    .as_ref()
                    .expect("an automatic schedule");
                assert_eq!(
                    note.scheduler.as_deref(),
                    Some(seg.scheduler.as_str()),
                    "{} {}: {}",
                    e.id(),
                    seg.name,
                    note.reason
                );
            }
        }
    }
    assert_eq!(
        split_ids,
        [
            "auto/col_norm",
            "auto/normalize_by_total",
            "auto/product_softmax",
            "auto/row_col_sums",
            "ops/quantize_fp8_tensor"
        ]
    );
}

/// Deterministic values, exact in bf16 (eighths between 0.5 and 1.5: no division near zero).
fn values(n: usize, seed: usize) -> Vec<f64> {
    (0..n)
        .map(|i| 0.5 + ((i * 7 + seed * 13) % 9) as f64 / 8.0)
        .collect()
}

/// The whole fusion's reference against its segments' references run in order.
fn segments_match_the_whole(name: &str, at: BTreeMap<String, i64>) {
    let source = example(&format!("auto/{name}.hf"));
    let s = split(&source, Some(&at));
    let whole = &s.fusion;
    let mut inputs = BTreeMap::new();
    for (k, &t) in whole.inputs.iter().enumerate() {
        let n: i64 = whole
            .root_shape(t)
            .iter()
            .map(|e| e.eval(&at).unwrap())
            .product();
        inputs.insert(whole.tensors[t].name.clone(), values(n as usize, k));
    }
    let expected = hopfuse::backend::reference::evaluate(whole, &at, &inputs).unwrap();
    // The segments in order, each reading the fusion's inputs and the intermediates so far.
    let mut tensors = inputs.clone();
    for seg in &s.segmentation.segments {
        let fusion = hopfuse::reference_fusion(&seg.source).unwrap();
        let own: BTreeMap<String, Vec<f64>> = seg
            .reads
            .iter()
            .map(|r| (r.clone(), tensors[r].clone()))
            .collect();
        let out = hopfuse::backend::reference::evaluate(&fusion, &at, &own).unwrap();
        assert_eq!(
            out.keys().collect::<Vec<_>>(),
            seg.writes.iter().collect::<Vec<_>>()
        );
        tensors.extend(out);
    }
    for (name, want) in &expected {
        let got = &tensors[name];
        assert_eq!(got.len(), want.len(), "{name}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                "{name}[{i}]: segments {g}, whole {w}"
            );
        }
    }
}

#[test]
fn the_segments_in_order_compute_the_whole_fusion() {
    segments_match_the_whole("col_norm", sizes(&[("M", 7), ("N", 5)]));
    segments_match_the_whole("row_col_sums", sizes(&[("M", 6), ("N", 9)]));
    segments_match_the_whole("product_softmax", sizes(&[("M", 4), ("N", 6), ("K", 8)]));
}

#[test]
fn the_segmented_plan_lists_the_kernels_and_intermediates() {
    let s = split(&example("auto/product_softmax.hf"), None);
    let p = &s.plan;
    assert_eq!(p.fusion, "product_softmax");
    let kernels: Vec<_> = p
        .kernels
        .iter()
        .map(|k| (k.plan.kernel_name.as_str(), k.scheduler.as_str()))
        .collect();
    assert_eq!(
        kernels,
        [
            ("product_softmax_s1_kernel", "matrix product"),
            ("product_softmax_s2_kernel", "normalization")
        ]
    );
    // The product kernel is timed against cuBLAS as any product: its plan has the shape.
    assert!(p.kernels[0].plan.matmul.is_some());
    let [c] = &p.intermediates[..] else {
        panic!("{:?}", p.intermediates)
    };
    assert_eq!((c.name.as_str(), c.dtype.name()), ("c", "bf16"));
    assert_eq!(c.bytes.to_string(), "2 * M * N");
    assert_eq!((c.producer, c.consumers.clone()), (0, vec![1]));
    let json = serde_json::to_value(p).unwrap();
    assert_eq!(json["intermediates"][0]["name"], "c");
    assert_eq!(json["kernels"][1]["reads"][0], "c");
}

#[test]
fn sizes_decide_each_segments_schedule() {
    let at = sizes(&[("M", 1000), ("N", 3000)]);
    let s = split(&example("auto/row_col_sums.hf"), Some(&at));
    for c in &s.kernels {
        let note = c.plan.auto_schedule.as_ref().unwrap();
        assert!(note.reason.contains("M=1000,N=3000"), "{}", note.reason);
    }
}
