//! Kernels specialised to their sizes (`CompileOptions::specialize`): goldens of the automatic
//! softmax and RMSNorm specialised to their bench sizes, what specialising removes (size
//! parameters read in the body, bounds predicates the sizes prove), the plan's record of the
//! sizes and its refusal of others, and every example specialised to each of its bench sizes.
//! Update the goldens with `INSTA_UPDATE=always cargo test -p hopfuse-tests --test specialize`.

use hopfuse::plan::{Constraint, LaunchError, SizeExpr};
use hopfuse::CompileOptions;
use std::collections::BTreeMap;

/// `M=8192,N=16384` as sizes.
fn sizes(text: &str) -> BTreeMap<String, i64> {
    text.split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.trim().to_string(), v.trim().parse().unwrap())
        })
        .collect()
}

fn compile(source: &str, at: &str, specialize: bool) -> hopfuse::Compilation {
    let options = CompileOptions {
        aligned_for: Some(sizes(at)),
        specialize,
        ..CompileOptions::default()
    };
    hopfuse::compile(source, &options).unwrap_or_else(|e| panic!("{}", e.render(source, "t.hf")))
}

/// RMSNorm over rows of `N` (examples/auto/rmsnorm.hf has rows of 4096, which a
/// specialisation leaves as they are): the mean's count is `N` as data.
const RMSNORM: &str = "fusion rmsnorm {
  input x: bf16[M, N]
  input w: bf16[N]
  input eps: f32 = 0.000001
  xf = cast(x, f32)
  r = rsqrt(mean(xf * xf, axis=1) + eps)
  y = cast(xf * broadcast(r, axis=1) * cast(broadcast(w, axis=0), f32), bf16)
  output y
}
";

fn example(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    std::fs::read_to_string(root.join(path)).unwrap()
}

/// The kernel's body: its lines after the signature's opening brace.
fn body(cuda: &str) -> &str {
    let start = cuda.find("__global__").expect("a kernel");
    let open = start + cuda[start..].find('{').expect("a body");
    &cuda[open..]
}

/// Whether the body reads size parameter `symbol` (as a whole word).
fn reads(cuda: &str, symbol: &str) -> bool {
    body(cuda)
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|word| word == symbol)
}

fn conditions(cuda: &str) -> usize {
    body(cuda).matches("if (").count()
}

#[test]
fn specialised_softmax_and_rmsnorm_match_their_goldens() {
    let softmax = example("auto/softmax.hf");
    for (name, source, at) in [
        ("softmax", softmax.as_str(), "M=8192,N=16384"),
        ("softmax", softmax.as_str(), "M=1000,N=1000"),
        ("rmsnorm", RMSNORM, "M=8192,N=16384"),
    ] {
        let c = compile(source, at, true);
        let name = format!("{name}_{}", at.replace([',', '='], "_"));
        insta::assert_snapshot!(format!("{name}__cuda"), c.cuda);
        insta::assert_snapshot!(
            format!("{name}__plan"),
            serde_json::to_string_pretty(&c.plan).unwrap()
        );
    }
}

#[test]
fn specialising_removes_the_size_parameters_and_the_predicates_the_sizes_prove() {
    for (file, at, symbols) in [
        ("auto/softmax.hf", "M=8192,N=16384", &["M", "N"][..]),
        ("auto/softmax.hf", "M=32768,N=4096", &["M", "N"]),
        ("auto/cross_entropy.hf", "M=16384,N=8192", &["M", "N"]),
        ("auto/row_sum.hf", "M=16384,N=16384", &["M", "N"]),
        ("auto/gelu_bias.hf", "M=16384,N=16384", &["M", "N"]),
        ("rmsnorm", "M=8192,N=16384", &["M", "N"]),
    ] {
        let source = match file {
            "rmsnorm" => RMSNORM.to_string(),
            file => example(file),
        };
        let generic = compile(&source, at, false);
        let special = compile(&source, at, true);
        let what = format!("{file} at {at}");
        // The parameters stay in the signature, so every launcher passes the same arguments.
        assert_eq!(generic.plan.params, special.plan.params, "{what}");
        assert!(
            symbols.iter().any(|s| reads(&generic.cuda, s)),
            "{what}: the generic kernel reads none of {symbols:?}"
        );
        for s in symbols {
            assert!(
                !reads(&special.cuda, s),
                "{what}: the specialised kernel still reads {s}\n{}",
                special.cuda
            );
        }
        assert!(
            conditions(&special.cuda) < conditions(&generic.cuda),
            "{what}: {} conditions specialised, {} generic\n{}",
            conditions(&special.cuda),
            conditions(&generic.cuda),
            special.cuda
        );
        // Grid and block are the launch's numbers.
        for e in special.plan.grid.iter().chain(&special.plan.block) {
            assert!(e.as_const().is_some(), "{what}: {e} is not a constant");
        }
        // The launch the sizes give is the same.
        let s = sizes(at);
        assert_eq!(
            generic.plan.concretize(&s).unwrap(),
            special.plan.concretize(&s).unwrap(),
            "{what}"
        );
    }
}

#[test]
fn ragged_sizes_keep_the_bounds_predicates_with_constants() {
    let source = example("auto/softmax.hf");
    let c = compile(&source, "M=1000,N=1000", true);
    assert!(!reads(&c.cuda, "N") && !reads(&c.cuda, "M"), "{}", c.cuda);
    // 1000 is not a multiple of the row's vectors: the tail is guarded by the constant.
    assert!(c.cuda.contains("< 1000"), "{}", c.cuda);
}

#[test]
fn the_plan_records_the_sizes_and_refuses_others() {
    let source = example("auto/softmax.hf");
    let c = compile(&source, "M=8192,N=16384", true);
    let at = sizes("M=8192,N=16384");
    assert_eq!(c.plan.specialized_sizes(), Some(at.clone()));
    // The sizes come first, so they are what another launch is refused for.
    assert!(matches!(
        &c.plan.constraints[..2],
        [
            Constraint::Equals { value: SizeExpr::Sym(m), expected: 8192, .. },
            Constraint::Equals { value: SizeExpr::Sym(n), expected: 16384, .. },
        ] if m == "M" && n == "N"
    ));
    assert!(c.plan.concretize(&at).is_ok());
    let other = sizes("M=8192,N=8192");
    let refused = c.plan.concretize(&other).unwrap_err();
    assert!(
        matches!(
            &refused,
            LaunchError::NotEqual {
                actual: 8192,
                expected: 16384,
                ..
            }
        ),
        "{refused:?}"
    );
    assert_eq!(
        refused.to_string(),
        "the kernel is specialised to its sizes (compile it for these sizes, or generic): \
         N = 8192, but it was compiled for N = 16384"
    );
    // The generic kernel of the same sizes records none and takes the others.
    let generic = compile(&source, "M=8192,N=16384", false);
    assert_eq!(generic.plan.specialized_sizes(), None);
    assert!(generic.plan.concretize(&other).is_ok());
    // The plan's JSON carries the record (the runner and the service read it back).
    let json = serde_json::to_string(&c.plan).unwrap();
    let back: hopfuse::LaunchPlan = serde_json::from_str(&json).unwrap();
    assert_eq!(back.specialized_sizes(), Some(at));
}

#[test]
fn specialising_needs_every_size_positive_and_the_sizes_given() {
    let source = example("auto/softmax.hf");
    let without = CompileOptions {
        specialize: true,
        ..CompileOptions::default()
    };
    let e = hopfuse::compile(&source, &without).unwrap_err();
    assert!(e.0[0].message.contains("needs the sizes"), "{e}");
    let zero = CompileOptions {
        specialize: true,
        aligned_for: Some(sizes("M=0,N=16")),
        ..CompileOptions::default()
    };
    let e = hopfuse::compile(&source, &zero).unwrap_err();
    assert!(
        e.0[0]
            .message
            .contains("cannot specialise the kernel to M = 0"),
        "{e}"
    );
}

/// Every example lowers specialised to each of its `// bench:` sizes and to a ragged size
/// (the verifier runs after every pass in this debug build), with the sizes in its plan.
#[test]
fn every_example_specialises_to_its_bench_sizes() {
    let mut count = 0;
    // A split example's kernels are its segments' programs (with its bench lines).
    for (id, source) in hopfuse_tests::example_programs() {
        let benches: Vec<String> = source
            .lines()
            .filter_map(|l| l.trim().strip_prefix(hopfuse::auto::BENCH_PREFIX))
            .map(|s| s.trim().to_string())
            .collect();
        for at in benches {
            let c = compile(&source, &at, true);
            let given = sizes(&at);
            let recorded = c.plan.specialized_sizes().unwrap_or_default();
            for s in &c.plan.symbols {
                assert_eq!(recorded.get(s), given.get(s), "{}: {s} at {at}", id);
                assert!(!reads(&c.cuda, s), "{}: {s} at {at}", id);
            }
            reads_back(&c, &format!("{} at {at}", id));
            count += 1;
        }
    }
    assert!(count >= 20, "only {count} bench sizes");
    // The mean's count as a literal, at a ragged size.
    reads_back(
        &compile(RMSNORM, "M=1000,N=1000", true),
        "rmsnorm at M=1000,N=1000",
    );
}

/// The specialised kernel's IR prints and reads back ([`hopfuse::kir::parse`]).
fn reads_back(c: &hopfuse::Compilation, what: &str) {
    let printed = c.kernel.print();
    let back = hopfuse::kir::parse(&printed)
        .unwrap_or_else(|e| panic!("{what}: {}:{}: {}", e.line, e.column, e.message));
    assert!(
        back == c.kernel,
        "{what}: the IR reads back otherwise\n{printed}"
    );
}

/// A pipeline deeper than the K loop the run's sizes give (4 stages, one K tile) compiles
/// specialised as it does generic: the stage check is for trip counts the program writes
/// (the H200 refused step18 at K=128 before, "4 stages is more than the 1 iterations").
#[test]
fn a_short_loop_from_the_sizes_keeps_its_pipeline() {
    let source = hopfuse_tests::example("matmul/step18_fp8_block.hf");
    for at in [
        "M=256,N=256,K=128,KB=1,NB=2",
        "M=129,N=4088,K=80,KB=1,NB=32",
    ] {
        let generic = compile(&source, at, false);
        let specialised = compile(&source, at, true);
        assert!(specialised.plan.specialized_sizes().is_some(), "{at}");
        assert_eq!(
            generic.plan.dynamic_smem_bytes.eval(&sizes(at)).unwrap(),
            specialised
                .plan
                .dynamic_smem_bytes
                .eval(&sizes(at))
                .unwrap(),
            "{at}"
        );
    }
}

/// A flattened vector access whose row length is not a multiple of the vector: specialised,
/// the merged index's decomposition has the row length as a number while the tensor's stride
/// is still its size symbol until pass `specialize`; the vector check probes them with the
/// sizes' values (the H200's export check refused basics/add at M=1000 N=1003: "never aligned").
#[test]
fn a_flattened_vector_at_a_ragged_row_length_specialises() {
    let source = hopfuse_tests::example("basics/add.hf");
    let c = compile(&source, "M=1000,N=1003", true);
    assert!(
        c.cuda.contains(
            "= *reinterpret_cast<const hf_vec<float, 4>*>(&a[(mn_oo * 128 + mn_oi) * 4]);"
        ),
        "{}",
        c.cuda
    );
}
