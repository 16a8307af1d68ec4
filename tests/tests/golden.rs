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
        let c = hopfuse::compile(&src, &Default::default())
            .unwrap_or_else(|e| panic!("{}", e.render(&src, &path.display().to_string())));
        let mut passes = String::new();
        for p in &c.passes {
            passes.push_str(&format!(
                "// ---- pass {}: {}\n{}\n",
                p.name, p.summary, p.ir
            ));
        }
        insta::assert_snapshot!(format!("{name}__cuda"), c.cuda);
        insta::assert_snapshot!(format!("{name}__passes"), passes);
        insta::assert_snapshot!(format!("{name}__plan"), serde_json_plan(&c.plan));
    }
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
