//! Golden tests: every example's CUDA, its kernel IR after every pass and its launch plan as
//! JSON (text in, text out).
//! Update with `INSTA_UPDATE=always cargo test -p hopfuse-tests` and review the diff.

use hopfuse_tests::examples;

#[test]
fn every_example_lowers_and_matches_its_golden_output() {
    let files = examples();
    assert!(
        files.len() >= 5,
        "expected the five basic examples, found {}",
        files.len()
    );
    for example in files {
        let path = &example.path;
        let src = std::fs::read_to_string(path).unwrap();
        let name = format!("{}__{}", example.group, example.name);
        let compiled = hopfuse::compile_program(&src, &Default::default())
            .unwrap_or_else(|e| panic!("{}", e.render(&src, &path.display().to_string())));
        let (cuda, passes, plan) = match compiled {
            hopfuse::Compiled::One { compilation, .. } => (
                compilation.cuda.clone(),
                passes_text(&compilation),
                serde_json_plan(&compilation.plan),
            ),
            // A fusion split into kernels: each kernel under a header line, and the
            // segmented plan.
            hopfuse::Compiled::Segmented(s) => {
                let (mut cuda, mut passes) = (String::new(), String::new());
                for (k, c) in s.kernels.iter().enumerate() {
                    let header = format!(
                        "// ==== segment {} of {}: {}\n",
                        k + 1,
                        s.kernels.len(),
                        c.plan.kernel_name
                    );
                    cuda.push_str(&header);
                    cuda.push_str(&c.cuda);
                    passes.push_str(&header);
                    passes.push_str(&passes_text(c));
                }
                (cuda, passes, serde_json_segmented_plan(&s.plan))
            }
        };
        insta::assert_snapshot!(format!("{name}__cuda"), cuda);
        insta::assert_snapshot!(format!("{name}__passes"), passes);
        insta::assert_snapshot!(format!("{name}__plan"), plan);
    }
}

/// Every pass's dump under its header line.
fn passes_text(c: &hopfuse::Compilation) -> String {
    let mut passes = String::new();
    for p in &c.passes {
        passes.push_str(&format!(
            "// ---- pass {}: {}\n{}\n",
            p.name, p.summary, p.ir
        ));
    }
    passes
}

/// A segmented plan's JSON, pretty-printed (and read back to the same plan).
fn serde_json_segmented_plan(p: &hopfuse::plan::SegmentedPlan) -> String {
    let json = serde_json::to_string_pretty(p).expect("a segmented plan serializes");
    let back: hopfuse::plan::SegmentedPlan =
        serde_json::from_str(&json).expect("the JSON reads back");
    assert_eq!(&back, p, "the segmented plan's JSON does not round-trip");
    json
}

/// The launch plan as the runner and the service receive it: its JSON, pretty-printed (and
/// read back to the same plan, as the worker reads it).
fn serde_json_plan(p: &hopfuse::LaunchPlan) -> String {
    let json = serde_json::to_string_pretty(p).expect("a launch plan serializes");
    let back: hopfuse::LaunchPlan = serde_json::from_str(&json).expect("the JSON reads back");
    assert_eq!(&back, p, "the launch plan's JSON does not round-trip");
    json
}

#[test]
fn printer_round_trips_every_example() {
    for example in examples() {
        let path = example.path;
        let src = std::fs::read_to_string(&path).unwrap();
        let p = hopfuse::frontend::parse(&src).unwrap();
        let printed = hopfuse::frontend::print(&p);
        let again = hopfuse::frontend::parse(&printed).unwrap();
        assert_eq!(p, again, "{}", path.display());
        assert_eq!(printed, hopfuse::frontend::print(&again));
    }
}
