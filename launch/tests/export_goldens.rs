//! The launchers `hopfuse export` writes (`NAME.h` and `NAME.py`), byte for byte, for kernels
//! that exercise every kind of launch argument: size parameters at both index types, scalars
//! with their defaults, TMA tensor maps (swizzled, clustered), more than 48 KiB of dynamic
//! shared memory and a stream-K grid that must be resident; and a fusion split into kernels
//! (its intermediates and a kernel's own workspace allocated by the launch, kernels with sizes
//! of their own). The CUBIN is a stand-in: the launchers only name its file.

use hopfuse::IndexType;
use hopfuse_launch::export::{export, export_split, ExportFile};
use hopfuse_launch::specialize::{compile_for_sizes, compile_segments_for_sizes};
use std::collections::BTreeMap;
use std::path::Path;

fn example(path: &str) -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

fn sizes(text: &str) -> BTreeMap<String, i64> {
    text.split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("NAME=VALUE");
            (k.to_string(), v.parse().expect("a number"))
        })
        .collect()
}

/// Checks `NAME.h` and `NAME.py` of `source`'s export at `sizes` against the snapshots
/// `export_goldens__{case}_h.snap` and `..._py.snap`.
fn check(case: &str, source: &str, size_text: &str, index: Option<IndexType>) {
    let sizes = sizes(size_text);
    let (compilation, setup) = compile_for_sizes(source, &sizes, index, true, false)
        .unwrap_or_else(|e| panic!("{case}: {e:?}"));
    let twin = hopfuse::torch_twin(source).unwrap_or_else(|e| panic!("{case}: {e:?}"));
    let files = export(&compilation, &setup, &sizes, b"CUBIN", &twin, case)
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    snapshot_launchers(case, &files);
}

/// `NAME.h` and `NAME.py` of an export's `files` against the snapshots
/// `export_goldens__{case}_h.snap` and `..._py.snap`.
fn snapshot_launchers(case: &str, files: &[ExportFile]) {
    let text = |suffix: &str| {
        let f = files
            .iter()
            .find(|f| f.name.ends_with(suffix) && !f.name.ends_with(&format!("_torch{suffix}")))
            .unwrap_or_else(|| panic!("{case}: no *{suffix}"));
        let text = String::from_utf8(f.bytes.clone()).unwrap();
        // (insta's comparison ignores how a text ends.)
        assert!(
            text.ends_with('\n') && !text.ends_with("\n\n"),
            "{case}: *{suffix} ends {:?}",
            &text[text.len().saturating_sub(20)..]
        );
        text
    };
    insta::assert_snapshot!(format!("{case}_h"), text(".h"));
    insta::assert_snapshot!(format!("{case}_py"), text(".py"));
}

#[test]
fn pointwise_with_size_parameters() {
    check(
        "add_ragged",
        &example("basics/add.hf"),
        "M=1000,N=1003",
        None,
    );
    check(
        "add_i64",
        &example("basics/add.hf"),
        "M=1000,N=1003",
        Some(IndexType::I64),
    );
    check(
        "softmax",
        &example("basics/softmax.hf"),
        "M=77,N=1000",
        None,
    );
}

#[test]
fn scalars_with_defaults() {
    check("rmsnorm", &example("fusions/rmsnorm.hf"), "M=100", None);
}

#[test]
fn tensor_maps() {
    check(
        "tma_add_2d",
        &example("tma/add_2d.hf"),
        "M=1000,N=1028",
        None,
    );
    check(
        "cluster_multicast",
        &example("matmul/step12_cluster_multicast.hf"),
        "M=1920,N=4096,K=1024",
        None,
    );
}

#[test]
fn a_stream_k_grid_checks_it_is_resident() {
    let source = example("matmul/step15_persistent_raster.hf").replace(
        "\n  persistent(BIDy, 16)\n",
        "\n  persistent(BIDy, 16, stream_k)\n",
    );
    assert!(source.contains("stream_k"), "the example changed");
    check("stream_k", &source, "M=1024,N=1024,K=4096", None);
}

/// [`check`] for a program no scheduler takes whole: its split at `sizes`, exported.
fn check_split(case: &str, source: &str, size_text: &str) {
    let sizes = sizes(size_text);
    let split = match hopfuse::segment::decide(source, Some(&sizes)) {
        Ok(hopfuse::segment::Decision::Split(split)) => split,
        other => panic!("{case}: not split: {other:?}"),
    };
    let kernels = compile_segments_for_sizes(&split, &sizes, None, true)
        .unwrap_or_else(|e| panic!("{case}: {}", e.describe(&split)));
    let cubins = vec![b"CUBIN".to_vec(); kernels.len()];
    let fusion = hopfuse::reference_fusion(source).unwrap_or_else(|e| panic!("{case}: {e:?}"));
    let twin = hopfuse::torch_twin(source).unwrap_or_else(|e| panic!("{case}: {e:?}"));
    let files = export_split(&split, &kernels, &cubins, &fusion, &sizes, &twin, case)
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    snapshot_launchers(case, &files);
}

#[test]
fn split_fusions() {
    // A grid reduction into a scalar intermediate, with its own workspace, then a pointwise
    // kernel.
    check_split(
        "split_normalize_by_total",
        &example("auto/normalize_by_total.hf"),
        "M=1000,N=1037",
    );
    // A tensor-core product (tensor maps, more than 48 KiB of shared memory, the size K of its
    // own) writing a bf16 intermediate, then a row softmax.
    check_split(
        "split_product_softmax",
        &example("auto/product_softmax.hf"),
        "M=512,N=4096,K=256",
    );
}
