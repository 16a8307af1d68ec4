//! The launch plan's checks as one: for every example and a range of sizes, the sizes launch
//! (`LaunchPlan::concretize`, what the runner calls) exactly when every constraint of the plan
//! and every CUDA launch limit listed for it (`LaunchPlan::launch_limits`, what the playground's
//! Launch plan pane shows) holds by `Constraint::check`.

use std::collections::BTreeMap;

#[test]
fn concretize_agrees_with_the_listed_constraints_and_limits() {
    let mut refused = 0;
    // A split example's kernels are its segments' programs.
    for (id, src) in hopfuse_tests::example_programs() {
        let plan = hopfuse::compile(&src, &Default::default())
            .unwrap_or_else(|e| panic!("{}", e.render(&src, &id)))
            .plan;
        let checks: Vec<_> = plan
            .constraints
            .iter()
            .cloned()
            .chain(plan.launch_limits())
            .collect();
        for size in [1, 3, 64, 1000, 4096, 1 << 20, 3_000_000_000] {
            let sizes: BTreeMap<String, i64> =
                plan.symbols.iter().map(|s| (s.clone(), size)).collect();
            let launches = plan.concretize(&sizes);
            let all_hold = checks.iter().all(|c| c.check(&sizes).is_ok());
            assert_eq!(
                launches.is_ok(),
                all_hold,
                "{} with every size {size}: concretize says {launches:?}",
                id
            );
            refused += usize::from(launches.is_err());
        }
    }
    // Both answers occur: some sizes break a constraint or a limit.
    assert!(refused > 0);
}
