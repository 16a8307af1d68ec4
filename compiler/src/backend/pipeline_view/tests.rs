//! The pipeline view of the examples and of hand-made kernels.
use super::*;

fn view(src: &str) -> PipelineView {
    crate::compile(src, &Default::default())
        .unwrap_or_else(|e| panic!("{}", e.render(src, "t.hf")))
        .pipeline
}

fn phase(kind: PhaseKind, var: &str, extent: &str) -> Phase {
    Phase {
        kind,
        var: Some(var.into()),
        extent: Some(extent.into()),
    }
}

fn one_thread(condition: &str) -> Role {
    Role {
        name: "producer".into(),
        condition: Some(condition.into()),
        thread_count: Some(1),
        threads: format!("1 thread: {condition}"),
        registers: None,
        issues: true,
        waits: false,
        mma: false,
        warp_groups: None,
    }
}

fn all_threads(n: i64, threads: &str) -> Role {
    Role {
        name: "consumers".into(),
        condition: None,
        thread_count: Some(n),
        threads: threads.into(),
        registers: None,
        issues: false,
        waits: true,
        mma: false,
        warp_groups: None,
    }
}

#[test]
fn copy_1d_stages3_is_one_thread_loading_two_ahead_into_three_slots() {
    let v = view(include_str!("../../../../examples/tma/copy_1d_stages3.hf"));
    assert_eq!(
        v.roles,
        [
            one_thread("warp == 0 && elect_one()"),
            all_threads(256, "all 256 threads of the block"),
        ]
    );
    assert_eq!(
        v.pipelines,
        [Pipeline {
            buffers: vec!["x_s".into()],
            tensors: vec!["x".into()],
            stages: 3,
            prefetch: Some(2),
            loop_var: Some("n_oi".into()),
            phases: vec![
                phase(PhaseKind::Prologue, "n_oi", "2"),
                phase(PhaseKind::Main, "n_oi", "14"),
                phase(PhaseKind::Epilogue, "n_oi_epi", "2"),
            ],
            loads: vec![Load {
                kind: LoadKind::Tile,
                buffer: "x_s".into(),
                tensor: "x".into(),
                tensor_map: Some("x_s_map".into()),
                rank: 1,
                bytes: 1024,
                boxes: 1,
                multicast: None,
                expect_tx: Some(1024),
                arrival: Some(0),
                role: 0,
                slot: "(n_oi + 2) % 3".into(),
                guard: None,
                phases: vec![PhaseKind::Prologue, PhaseKind::Main],
            }],
            stage_bytes: 1024,
            full_barrier: "x_s_full".into(),
            empty_barrier: None,
            waits: vec![Wait {
                role: 1,
                barrier: "x_s_full".into(),
                slot: "n_oi % 3".into(),
                parity: "n_oi / 3 % 2".into(),
                phases: vec![PhaseKind::Main, PhaseKind::Epilogue],
            }],
            release: Release::SyncThreads,
        }]
    );
}

#[test]
fn exp_2d_is_a_2d_box_through_four_slots() {
    let v = view(include_str!("../../../../examples/tma/exp_2d.hf"));
    assert_eq!(
        v.roles,
        [
            one_thread("warp == 0 && elect_one()"),
            all_threads(512, "all 512 threads of the block (64 × 8)"),
        ]
    );
    let [p] = &v.pipelines[..] else {
        panic!("one pipeline: {v:#?}")
    };
    assert_eq!((p.stages, p.prefetch), (4, Some(3)));
    assert_eq!(p.loop_var.as_deref(), Some("n_o"));
    assert_eq!(
        p.phases,
        [
            phase(PhaseKind::Prologue, "n_o", "3"),
            phase(PhaseKind::Main, "n_o", "ceilDiv(N, 64) - 3"),
            phase(PhaseKind::Epilogue, "n_o_epi", "3"),
        ]
    );
    let [l] = &p.loads[..] else {
        panic!("one load: {p:#?}")
    };
    assert_eq!(
        (l.kind, l.rank, l.bytes, l.expect_tx),
        (LoadKind::Tile, 2, 2048, Some(2048))
    );
    assert_eq!((&*l.buffer, &*l.tensor), ("x_s", "x"));
    assert_eq!(l.slot, "(n_o + 3) % 4");
    // The prologue's bound (`n_o < ceilDiv(N, 64)`) is not the main loop's.
    assert_eq!(l.guard, None);
    assert_eq!(p.stage_bytes, 2048);
    assert_eq!(p.full_barrier, "x_s_full");
    assert_eq!(p.empty_barrier, None);
    assert_eq!(p.waits.len(), 1);
    assert_eq!(
        (&*p.waits[0].slot, &*p.waits[0].parity),
        ("n_o % 4", "n_o / 4 % 2")
    );
    assert_eq!(p.release, Release::SyncThreads);
}

#[test]
fn a_bulk_copy_keeps_its_bounds_guard_and_its_full_expect_tx() {
    let v = view(include_str!("../../../../examples/tma/copy_1d_bulk.hf"));
    let l = &v.pipelines[0].loads[0];
    assert_eq!((l.kind, &l.tensor_map), (LoadKind::Bulk, &None));
    assert_eq!(l.tensor, "x");
    // Out of bounds the thread arrives with 0 bytes in the `else`: not this load's arrival.
    assert_eq!(l.expect_tx, Some(1024));
    assert_eq!(
        l.guard.as_deref(),
        Some("(n_oo * 16 + (n_oi + 2)) * 256 < N")
    );
    assert_eq!(
        v.roles[l.role].condition.as_deref(),
        Some("warp == 0 && elect_one()")
    );
}

#[test]
fn one_stage_loads_and_waits_in_the_same_loop() {
    let src =
        include_str!("../../../../examples/tma/exp_2d.hf").replace("x_s.circular_buffer(4)\n", "");
    let p = &view(&src).pipelines[0];
    assert_eq!((p.stages, p.prefetch), (1, Some(0)));
    assert_eq!(p.phases, [phase(PhaseKind::Main, "n_o", "ceilDiv(N, 64)")]);
    assert_eq!(p.release, Release::SyncThreads);
}

#[test]
fn kernels_without_tma_have_no_pipeline() {
    for src in [
        include_str!("../../../../examples/basics/add.hf"),
        include_str!("../../../../examples/basics/softmax_shared.hf"),
    ] {
        assert_eq!(view(src), PipelineView::default());
    }
}

/// A warp-specialized kernel as the compiler does not make it yet: warps with
/// `threadIdx.y == 1` load in a loop of their own after waiting on an empty barrier, the
/// others wait on the full barrier in theirs.
fn example(path: &str) -> String {
    std::fs::read_to_string(format!("{}/../examples/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn warp_specialized_roles_each_load_on_their_own_barriers() {
    let v = view(&example("ws/mul_two_roles.hf"));
    let roles: Vec<String> = v
        .roles
        .iter()
        .map(|r| {
            format!(
                "{} {:?} {:?} {} {}",
                r.name, r.thread_count, r.registers, r.issues, r.waits
            )
        })
        .collect();
    assert_eq!(
        roles,
        [
            "producer 1 Some(1) Some(152) true false",
            "producer 2 Some(1) Some(152) true false",
            "consumers Some(256) Some(176) false true",
        ]
    );
    assert_eq!(v.pipelines.len(), 2);
    for (p, t) in v.pipelines.iter().zip(["t2_s", "t3_s"]) {
        assert_eq!(p.full_barrier, format!("{t}_full"));
        assert_eq!(p.empty_barrier.as_deref(), Some(&*format!("{t}_empty")));
        assert_eq!(p.release, Release::EmptyBarrier);
        assert_eq!(
            p.phases.iter().map(|p| p.kind).collect::<Vec<_>>(),
            [PhaseKind::Produce, PhaseKind::Consume]
        );
        assert_eq!((p.stages, p.loads.len(), p.loads[0].bytes), (4, 1, 8192));
        assert_eq!(p.waits[0].role, 2);
    }
}

#[test]
fn an_empty_barrier_pipeline_without_warp_roles() {
    let src = example("tma/exp_2d.hf").replace(
        "x_s.circular_buffer(4)",
        "x_s.circular_buffer(4, war=mbarrier)",
    );
    let v = view(&src);
    let p = &v.pipelines[0];
    assert_eq!(p.empty_barrier.as_deref(), Some("x_s_empty"));
    assert_eq!(p.release, Release::EmptyBarrier);
    assert_eq!(v.roles[0].thread_count, Some(1));
}

#[test]
fn boxes_side_by_side_are_one_load_of_several_boxes() {
    // Step 8's K tile is two 128-byte swizzle spans: each operand's stage is two boxes, two
    // copies announced by the one arrival of the stage.
    let v = view(&example("matmul/step8_wide_k_tile.hf"));
    let p = &v.pipelines[0];
    let loads: Vec<_> = p
        .loads
        .iter()
        .map(|l| (l.buffer.as_str(), l.bytes, l.boxes, l.expect_tx, l.arrival))
        .collect();
    assert_eq!(
        loads,
        [
            ("a_s", 16384, 2, Some(65536), Some(0)),
            ("b_s", 16384, 2, Some(65536), Some(0)),
        ]
    );
    assert_eq!(p.stage_bytes, 65536);
}

/// A 2-CTA cluster: the shared operand's copy is a slice multicast to both CTAs, so a slot
/// receives two slices; the stage is still A's box and B's whole box.
#[test]
fn a_multicast_load_fills_its_slot_with_a_slice_from_each_cta() {
    let v = view(&example("matmul/step12_cluster_multicast.hf"));
    assert_eq!(v.cluster, Some([1, 2, 1]));
    let p = &v.pipelines[0];
    let loads: Vec<_> = p
        .loads
        .iter()
        .map(|l| (l.buffer.as_str(), l.bytes, l.multicast, l.expect_tx))
        .collect();
    assert_eq!(
        loads,
        [
            ("a_s", 16384, None, Some(49152)),
            ("b_s", 16384, Some(2), Some(49152)),
        ]
    );
    assert_eq!(p.stage_bytes, 49152);
    assert_eq!(
        view(&example("matmul/step9_tma_store_epilogue.hf")).cluster,
        None
    );
}

/// What the plan knows is read from it, not rediscovered from the kernel: without the plan's
/// streams no pipeline is shown, and the prefetch distance is the plan's.
#[test]
fn pipelines_and_their_prefetch_come_from_the_plan() {
    let c = crate::compile(&example("tma/exp_2d.hf"), &Default::default()).unwrap();
    assert_eq!(extract(&c.kernel, &c.pipeline_plan), c.pipeline);
    assert_eq!(c.pipeline.pipelines[0].prefetch, Some(3));
    let mut plan = c.pipeline_plan.clone();
    plan.pipes[0].prefetch = 1;
    assert_eq!(extract(&c.kernel, &plan).pipelines[0].prefetch, Some(1));
    let none = extract(&c.kernel, &crate::passes::PipelinePlan::default());
    assert!(none.pipelines.is_empty(), "{none:#?}");
}

/// The products of one role: (turns, turn, in flight) of each, in program order.
fn turns_and_flights(path: &str) -> Vec<(Option<Turns>, Option<usize>, InFlight)> {
    view(&example(path))
        .mmas
        .iter()
        .map(|m| (m.turns, m.turn, m.in_flight.clone()))
        .collect()
}

fn drained(n: u32, next_iteration: bool, products: &[usize], epilogues: &[usize]) -> InFlight {
    InFlight {
        drained_by: Some(n),
        next_iteration,
        products: products.to_vec(),
        epilogues: epilogues.to_vec(),
    }
}

/// FlashAttention-3's kernel: the two consumer groups take turns issuing S_j and P_{j-1}
/// V_{j-1} (both in one turn); S_j is drained by `wait_group 1` while P V runs, and P V by
/// `wait_group 0` after tile j's softmax, which reads S's accumulator, has run under it. Its
/// steady state is the loop over `t_o_pv`, not the peeled S_0.
#[test]
fn attention_turns_take_products_and_the_softmax_runs_under_p_v() {
    let products = Some(Turns {
        kind: TurnKind::Products,
        groups: 2,
    });
    let [s, pv] = &turns_and_flights("attention/online_wgmma_overlap_pingpong.hf")[..] else {
        panic!("two products")
    };
    assert_eq!(*s, (products, Some(0), drained(1, false, &[1], &[])));
    assert_eq!(*pv, (products, Some(0), drained(0, false, &[], &[0])));
    let v = view(&example("attention/online_wgmma_overlap_pingpong.hf"));
    let loops: Vec<_> = v.mmas.iter().map(|m| m.loop_var.as_deref()).collect();
    assert_eq!(loops, [Some("t_o_pv"), Some("t_o_pv")]);
    // Each stage is given back after the wait that drains the product reading it.
    let released: Vec<_> = v
        .mmas
        .iter()
        .map(|m| m.release.as_ref().map(|r| (&*r.barrier, &*r.slot)))
        .collect();
    assert_eq!(
        released,
        [
            Some(("ks_empty", "t_o % 2")),
            Some(("vs_empty", "t_o_pv % 2"))
        ]
    );
    // The automatic schedule writes the same kernel.
    assert_eq!(
        turns_and_flights("auto/attention.hf"),
        turns_and_flights("attention/online_wgmma_overlap_pingpong.hf")
    );
}

/// The overlap without turns: the same in-flight facts, no turns.
#[test]
fn the_overlap_without_turns_has_the_same_products_in_flight() {
    let [s, pv] = &turns_and_flights("attention/online_wgmma_overlap.hf")[..] else {
        panic!("two products")
    };
    assert_eq!(*s, (None, None, drained(1, false, &[1], &[])));
    assert_eq!(*pv, (None, None, drained(0, false, &[], &[0])));
}

/// Without the overlap each product is drained right after its commit: the softmax waits for S.
/// With product turns but no overlap, S and P V are turns of their own, and P V stays in flight
/// into the next iteration until the next S is drained (nothing reads an accumulator meanwhile).
#[test]
fn without_the_overlap_the_softmax_waits_for_s() {
    let [s, pv] = &turns_and_flights("attention/online_wgmma.hf")[..] else {
        panic!("two products")
    };
    assert_eq!(*s, (None, None, drained(0, false, &[], &[])));
    assert_eq!(*pv, (None, None, drained(0, false, &[], &[])));
    let products = Some(Turns {
        kind: TurnKind::Products,
        groups: 2,
    });
    let [s, pv] = &turns_and_flights("attention/online_wgmma_pingpong.hf")[..] else {
        panic!("two products")
    };
    assert_eq!(*s, (products, Some(0), drained(0, false, &[], &[])));
    assert_eq!(*pv, (products, Some(1), drained(0, true, &[0], &[])));
}

/// The matmul ping-pong takes turns with whole stages; its one product is drained by the next
/// k step's `wait_group 1`, its own next group in flight with it.
#[test]
fn the_matmul_ping_pong_takes_turns_with_whole_stages() {
    let [m] = &turns_and_flights("matmul/step14_ping_pong.hf")[..] else {
        panic!("one product")
    };
    let stages = Some(Turns {
        kind: TurnKind::Stages,
        groups: 2,
    });
    assert_eq!(*m, (stages, Some(0), drained(1, true, &[0], &[])));
    let [m] = &turns_and_flights("matmul/step3_warp_specialized.hf")[..] else {
        panic!("one product")
    };
    assert_eq!(*m, (None, None, drained(1, true, &[0], &[])));
}
