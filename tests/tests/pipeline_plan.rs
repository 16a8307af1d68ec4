//! The typed pipeline plan (`Compilation::pipeline_plan`, what the `tma` pass decides and the
//! `allocation` pass completes) of every example that has one (TMA and bulk copies, TMA stores,
//! circular buffers, warp specialization: the tma/, ws/ and matmul/ examples, the automatic
//! matrix products and attention on tensor cores, by hand or automatic), snapshotted as JSON next to the launch plan's goldens:
//! a change to a planned pipeline shows here as a change of the plan itself, not only of the
//! CUDA it becomes. Object keys are sorted (the stage sizes are a hash map).
//! Update with `INSTA_UPDATE=always cargo test -p hopfuse-tests --test pipeline_plan`.

#[test]
fn every_pipelined_example_matches_its_plan_snapshot() {
    let mut planned = 0;
    // A split example's kernels are its segments' programs (`group/name#segment`).
    for (id, src) in hopfuse_tests::example_programs() {
        let (group, name) = id.split_once('/').expect("group/name");
        let name = name.replace('#', "__");
        let c = hopfuse::compile(&src, &Default::default())
            .unwrap_or_else(|e| panic!("{}", e.render(&src, &id)));
        let plan = &c.pipeline_plan;
        // An automatic matrix product reuses a matmul example's schedule, pipeline and all.
        let scheduler = c
            .plan
            .auto_schedule
            .as_ref()
            .and_then(|n| n.scheduler.as_deref());
        let auto_product = scheduler == Some(hopfuse::auto::Scheduler::MatrixProduct.name());
        // Attention on tensor cores (by hand or by the attention scheduler) loads its tiles by
        // TMA.
        let tensor_core_attention = (group == "attention" && name.starts_with("online_wgmma"))
            || scheduler == Some(hopfuse::auto::Scheduler::Attention.name());
        let pipelined =
            ["tma", "ws", "matmul"].contains(&group) || auto_product || tensor_core_attention;
        let has_plan = !plan.loads.is_empty() || !plan.stores.is_empty();
        assert_eq!(
            has_plan, pipelined,
            "{id}: a pipeline plan only for (and for every) TMA, warp-specialized, matmul, automatic matrix product and tensor-core attention example"
        );
        if !has_plan {
            continue;
        }
        let mut json = serde_json::to_value(plan).expect("a pipeline plan serializes");
        json.sort_all_objects();
        insta::assert_snapshot!(
            format!("{group}__{name}__pipeline_plan"),
            serde_json::to_string_pretty(&json).unwrap()
        );
        planned += 1;
    }
    assert!(
        planned >= 30,
        "only {planned} examples have a pipeline plan"
    );
}
