//! The kernel-IR verifier (`hopfuse::verify`): every example is well-formed after every pass,
//! and a fault planted in a real lowered kernel is caught by the rule it breaks (one test per
//! rule, `Rule::ALL`).

use hopfuse::fusion::{MemoryType, ParallelType};
use hopfuse::kir::{BufferId, Kernel, Stmt, Val, WarpRoles};
use hopfuse::plan::SizeExpr;
use hopfuse::verify::{self, Rule, Stage, VerifyError};

#[path = "verify/barriers.rs"]
mod barriers;

#[test]
fn every_example_passes_the_verifier_after_every_pass() {
    assert!(
        verify::enabled(),
        "the verifier is off: run the tests in a debug build or with HOPFUSE_VERIFY_IR=1"
    );
    let sources = hopfuse_tests::example_programs();
    assert!(sources.len() >= 20, "found {} examples", sources.len());
    for (_, src) in sources {
        // `compile` verifies after every pass while `verify::enabled()`.
        let before = verify::verified_on_this_thread();
        let c = hopfuse::compile(&src, &Default::default())
            .unwrap_or_else(|e| panic!("{}\n{src}", e.render(&src, "example.hf")));
        // Every dump but the first (the fusion IR) is a pass that ran.
        assert_eq!(
            verify::verified_on_this_thread() - before,
            c.passes.len() - 1,
            "the pipeline did not verify after every pass of\n{src}"
        );
        if let Err(errors) = verify::verify(&c.kernel, Stage::LOWERED) {
            panic!("{}\n{src}", list(&errors));
        }
    }
}

/// The kernel IR of `examples/{path}` after the whole pipeline (well-formed, checked here).
fn lowered(path: &str) -> Kernel {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(path);
    let src = std::fs::read_to_string(&file).expect("example");
    let k = hopfuse::compile(&src, &Default::default())
        .unwrap_or_else(|e| panic!("{}", e.render(&src, path)))
        .kernel;
    if let Err(errors) = verify::verify(&k, Stage::LOWERED) {
        panic!(
            "{path} is not well-formed before the fault:\n{}",
            list(&errors)
        );
    }
    k
}

/// Runs `f` on the first statement list (outer lists before the ones they hold) where it
/// finds what to change (it returns true).
fn edit(body: &mut Vec<Stmt>, f: &mut dyn FnMut(&mut Vec<Stmt>) -> bool) -> bool {
    if f(body) {
        return true;
    }
    body.iter_mut()
        .any(|st| st.children_mut().any(|child| edit(child, f)))
}

/// Applies `change` to the list holding the first statement `pick` selects, at its index.
fn at_first(
    k: &mut Kernel,
    pick: impl Fn(&Kernel, &Stmt) -> bool,
    change: impl FnOnce(&mut Vec<Stmt>, usize),
) {
    let view = k.clone();
    let mut change = Some(change);
    let found = edit(
        &mut k.body,
        &mut |list| match list.iter().position(|s| pick(&view, s)) {
            Some(i) => {
                (change.take().expect("applied once"))(list, i);
                true
            }
            None => false,
        },
    );
    assert!(found, "no statement to plant the fault at");
}

/// Removes the first statement `pick` selects.
fn remove_first(k: &mut Kernel, pick: impl Fn(&Kernel, &Stmt) -> bool) {
    at_first(k, pick, |list, i| {
        list.remove(i);
    });
}

/// Puts the first statement `pick` selects under `if cond:`.
fn guard_first(k: &mut Kernel, pick: impl Fn(&Kernel, &Stmt) -> bool, cond: Val) {
    at_first(k, pick, |list, i| {
        let st = list.remove(i);
        list.insert(
            i,
            Stmt::If {
                cond,
                then: vec![st],
                els: Vec::new(),
            },
        );
    });
}

/// Changes the (first) warp roles of the kernel.
fn edit_roles(k: &mut Kernel, change: impl FnOnce(&mut Stmt)) {
    at_first(
        k,
        |_, s| matches!(s, Stmt::WarpRoles(_)),
        |list, i| change(&mut list[i]),
    );
}

/// The dump line of a statement is `prefix...`.
fn starts(k: &Kernel, st: &Stmt, prefix: &str) -> bool {
    k.stmt_head(st).starts_with(prefix)
}

fn buffer(k: &Kernel, name: &str) -> BufferId {
    k.buffer_ids()
        .find(|&b| k.buffers[b].name == name)
        .unwrap_or_else(|| panic!("no buffer `{name}`"))
}

/// Verifies the faulty kernel: it fails, only by `rule`, and the first error quotes a
/// statement starting with `at` (empty: the kernel's declarations).
fn caught(k: &Kernel, rule: Rule, at: &str) -> Vec<VerifyError> {
    let errors = verify::verify(k, Stage::LOWERED).expect_err("the planted fault is caught");
    assert!(
        errors.iter().all(|e| e.rule == rule),
        "expected only `{rule}`, got:\n{}",
        list(&errors)
    );
    assert!(
        errors[0].text.starts_with(at) && (at.is_empty() == errors[0].stmt.is_none()),
        "expected the error at `{at}`, got:\n{}",
        list(&errors)
    );
    errors
}

fn list(errors: &[VerifyError]) -> String {
    errors
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn unknown_id_a_copy_on_a_missing_mbarrier_array() {
    let mut k = lowered("tma/exp_store.hf");
    at_first(
        &mut k,
        |_, s| matches!(s, Stmt::TmaLoad(_)),
        |list, i| {
            if let Stmt::TmaLoad(t) = &mut list[i] {
                t.bars = hopfuse::kir::MbarId::new(7);
            }
        },
    );
    let e = caught(&k, Rule::UnknownId, "TmaLoad");
    assert!(e[0].detail.contains("mbarrier array 7"), "{}", e[0]);
}

#[test]
fn unbound_variable_a_renamed_let() {
    let mut k = lowered("tma/exp_store.hf");
    // The epilogue's `let n_o = ...`: the statements after it still read `n_o`.
    at_first(
        &mut k,
        |_, s| matches!(s, Stmt::Let { var, .. } if var == "n_o"),
        |list, i| {
            if let Stmt::Let { var, .. } = &mut list[i] {
                *var = "n_o_renamed".into();
            }
        },
    );
    let e = caught(&k, Rule::UnboundVariable, "if -1 < n_o");
    assert!(e[0].detail.contains("`n_o` is not bound"), "{}", e[0]);
}

#[test]
fn unbound_variable_a_thread_loop_without_its_binding() {
    let mut k = lowered("basics/softmax.hf");
    k.hw_vars.retain(|(_, p)| *p != ParallelType::TIDx);
    let e = caught(&k, Rule::UnboundVariable, "for n_oi in");
    assert!(e[0].detail.contains("threadIdx.x"), "{}", e[0]);
}

#[test]
fn use_before_alloc_a_dropped_allocation() {
    let mut k = lowered("basics/softmax.hf");
    remove_first(&mut k, |k, s| starts(k, s, "alloc m_acc"));
    let e = caught(&k, Rule::UseBeforeAlloc, "m_acc[0] = -inf");
    assert!(e[0].detail.contains("local buffer `m_acc`"), "{}", e[0]);
}

#[test]
fn use_before_alloc_a_shared_buffer_used_before_its_alloc() {
    let mut k = lowered("tma/exp_store.hf");
    // The TMA store of the main loop moved to the top of its iteration, before `alloc y_s`.
    at_first(
        &mut k,
        |k, s| starts(k, s, "for n_o in ceilDiv(N, 64) - 3"),
        |list, i| {
            let Stmt::Loop(l) = &mut list[i] else {
                unreachable!()
            };
            let store = l
                .body
                .iter()
                .position(
                    |s| matches!(s, Stmt::If { then, .. } if matches!(then[0], Stmt::TmaStore(_))),
                )
                .expect("the store");
            let moved = l.body.remove(store);
            l.body.insert(0, moved);
        },
    );
    let e = caught(&k, Rule::UseBeforeAlloc, "tma_store_2d");
    assert!(e[0].detail.contains("shared buffer `y_s`"), "{}", e[0]);
}

#[test]
fn double_alloc_an_allocation_repeated_in_its_scope() {
    let mut k = lowered("basics/softmax.hf");
    at_first(
        &mut k,
        |k, s| starts(k, s, "alloc x_c"),
        |list, i| {
            let again = list[i].clone();
            list.insert(i + 1, again);
        },
    );
    let e = caught(&k, Rule::DoubleAlloc, "alloc x_c");
    assert_eq!(e.len(), 1, "{}", list(&e));
}

#[test]
fn unindexed_access_an_access_without_index() {
    let mut k = lowered("basics/add.hf");
    at_first(
        &mut k,
        |_, s| matches!(s, Stmt::Compute(_)),
        |list, i| {
            if let Stmt::Compute(c) = &mut list[i] {
                c.out.index = None;
            }
        },
    );
    caught(&k, Rule::UnindexedAccess, "vector<4> over mn_i: a_c[*]");
    // Before the indexing pass, the same kernel is fine on that count.
    let stage = Stage::after("allocation");
    assert!(!stage.indexed);
    assert!(verify::verify(&k, stage).is_ok());
}

#[test]
fn memory_space_a_tma_load_into_global_memory() {
    let mut k = lowered("tma/exp_store.hf");
    let x = buffer(&k, "x");
    at_first(
        &mut k,
        |_, s| matches!(s, Stmt::TmaLoad(_)),
        |list, i| {
            if let Stmt::TmaLoad(t) = &mut list[i] {
                t.dst.buffer = x;
            }
        },
    );
    let e = caught(&k, Rule::MemorySpace, "x[");
    assert!(
        e[0].detail.contains("destination of a TMA load"),
        "{}",
        e[0]
    );
}

#[test]
fn register_array_size_a_register_array_of_symbolic_size() {
    let mut k = lowered("basics/softmax.hf");
    let x_c = buffer(&k, "x_c");
    k.buffers[x_c].size = Some(Val::Size("N".into()));
    let e = caught(&k, Rule::RegisterArraySize, "alloc x_c: f32[N]");
    assert!(e[0].detail.contains("constant size"), "{}", e[0]);
}

#[test]
fn shared_memory_limit_a_shared_buffer_past_227_kib() {
    let mut k = lowered("tma/exp_store.hf");
    // What an allocation pass without its limit check would leave: `y_s` grown by 240,000
    // bytes and the kernel's shared memory with it, every region still inside.
    let y_s = buffer(&k, "y_s");
    let extra = 240_000;
    k.buffers[y_s].size = Some(Val::Int(512 + extra / 4));
    for m in &mut k.mbarriers {
        let at = match m.smem_offset {
            Some(Val::Int(o)) => o,
            _ => panic!("a constant offset"),
        };
        m.smem_offset = Some(Val::Int(at + extra));
    }
    let total = k.dynamic_smem.as_const().expect("constant") + extra;
    k.dynamic_smem = SizeExpr::Const(total);
    let e = caught(&k, Rule::SharedMemoryLimit, "");
    assert!(e[0].detail.contains(&total.to_string()), "{}", e[0]);
}

#[test]
fn shared_memory_layout_a_misaligned_and_an_overflowing_buffer() {
    let mut k = lowered("tma/exp_store.hf");
    let y_s = buffer(&k, "y_s");
    k.buffers[y_s].smem_offset = Some(Val::Int(8196));
    let e = caught(&k, Rule::SharedMemoryLayout, "alloc y_s");
    assert!(e[0].detail.contains("not a multiple of 16"), "{}", e[0]);
    let mut k = lowered("tma/exp_store.hf");
    k.dynamic_smem = SizeExpr::Const(9000);
    let e = caught(&k, Rule::SharedMemoryLayout, "alloc y_s");
    assert!(
        e[0].detail.contains("past the kernel's 9000 bytes"),
        "{}",
        e[0]
    );
}

#[test]
fn mbarrier_init_a_dropped_init_and_a_dropped_barrier_after_it() {
    let mut k = lowered("tma/exp_store.hf");
    remove_first(&mut k, |_, s| matches!(s, Stmt::MbarInit { .. }));
    let e = caught(&k, Rule::MbarrierInit, "mbarrier_arrive_expect_tx");
    assert!(e[0].detail.contains("never initialised"), "{}", e[0]);

    let mut k = lowered("tma/exp_store.hf");
    // The `__syncthreads()` right after the guarded init.
    let init_guard = init_guard(&k);
    assert_eq!(k.body[init_guard + 1], Stmt::Sync);
    k.body.remove(init_guard + 1);
    let e = caught(&k, Rule::MbarrierInit, "mbarrier_arrive_expect_tx");
    assert!(e[0].detail.contains("no block barrier"), "{}", e[0]);
}

/// Where the kernel's body initialises its mbarriers (the guard of one thread).
fn init_guard(k: &Kernel) -> usize {
    k.body
        .iter()
        .position(
            |s| matches!(s, Stmt::If { then, .. } if matches!(then[0], Stmt::MbarInit { .. })),
        )
        .expect("the init")
}

/// A copy the initialising thread starts in the init guard itself needs no barrier (program
/// order): document masks start Q's copy with the init, before the list of visited tiles. The
/// other threads' first use still needs the barrier after the guard.
#[test]
fn mbarrier_init_the_issuers_own_copy_in_the_init_guard_and_a_dropped_barrier() {
    let mut k = lowered("auto/attention_document.hf");
    assert!(k.visited.is_some(), "the document mask lists its tiles");
    let init_guard = init_guard(&k);
    let Stmt::If { then, .. } = &k.body[init_guard] else {
        unreachable!("matched above")
    };
    assert!(
        then.iter()
            .any(|s| starts(&k, s, "mbarrier_arrive_expect_tx qs_full")),
        "Q's copy starts with the init:\n{}",
        k.print()
    );
    assert_eq!(k.body[init_guard + 1], Stmt::Sync);
    k.body.remove(init_guard + 1);
    // The producer's first copies of K are another thread's: caught. Q's copy in the guard
    // is not.
    let e = caught(
        &k,
        Rule::MbarrierInit,
        "mbarrier_arrive_expect_tx ks_doc_ks_full",
    );
    assert!(e[0].detail.contains("no block barrier"), "{}", e[0]);
    assert!(
        e.iter()
            .all(|e| !e.text.contains("qs_full[0], 32768 bytes")),
        "{}",
        list(&e)
    );
}

#[test]
fn mbarrier_inval_a_dropped_invalidation_and_a_use_after_it() {
    let mut k = lowered("ws/add_two_roles.hf");
    remove_first(&mut k, |k, s| starts(k, s, "mbarrier_inval b_s_empty"));
    let e = caught(&k, Rule::MbarrierInval, "mbarrier_init b_s_empty");
    assert!(e[0].detail.contains("never invalidated"), "{}", e[0]);

    let mut k = lowered("tma/exp_store.hf");
    // Invalidate at entry, right after the barrier that follows the init.
    let inval = k.body.pop().expect("the guarded inval");
    k.body.insert(2, inval);
    let errors = caught(&k, Rule::MbarrierInval, "mbarrier_wait x_s_full");
    assert!(
        errors[0].detail.contains("after its invalidation"),
        "{}",
        errors[0]
    );
}

#[test]
fn warp_collective_a_per_warp_arrive_under_a_lane_dependent_condition() {
    let mut k = lowered("ws/add_two_roles.hf");
    guard_first(
        &mut k,
        |_, s| matches!(s, Stmt::MbarArrive { per_warp: true, .. }),
        Val::lt(Val::Var("n_i".into()), Val::Int(16)),
    );
    let e = caught(&k, Rule::WarpCollective, "mbarrier_arrive a_s_empty");
    assert!(e[0].detail.contains("per-warp arrive"), "{}", e[0]);
}

#[test]
fn warp_collective_a_stmatrix_under_a_lane_dependent_condition() {
    let mut k = lowered("matmul/step9_tma_store_epilogue.hf");
    // The bounds guard the stmatrix dropped, put back: lanes past N would skip the
    // warp-collective store.
    guard_first(
        &mut k,
        |_, s| matches!(s, Stmt::StMatrix { .. }),
        Val::lt(Val::Hw(ParallelType::TIDx), Val::Size("N".into())),
    );
    let e = caught(&k, Rule::WarpCollective, "stmatrix.x4 c_s[");
    assert!(e[0].detail.contains("stmatrix"), "{}", e[0]);
}

/// Whether `s` is the issuing thread's wait for its TMA stores (`if issuer: wait_group.read 0`).
fn is_store_wait(s: &Stmt) -> bool {
    matches!(s, Stmt::If { then, .. } if matches!(then.as_slice(), [Stmt::BulkWaitRead(0)]))
}

/// In the list that waits for the stores and then writes the staged tile (the tile loop's
/// body), applies `change` at the wait's index.
fn at_tile_drain(k: &mut Kernel, change: impl FnOnce(&mut Vec<Stmt>, usize)) {
    let mut change = Some(change);
    let found = edit(&mut k.body, &mut |list| {
        let wait = list.iter().position(is_store_wait);
        let writes = list
            .iter()
            .position(|s| format!("{s:?}").contains("StMatrix"));
        match (wait, writes) {
            (Some(w), Some(x)) if w < x => {
                (change.take().expect("applied once"))(list, w);
                true
            }
            _ => false,
        }
    });
    assert!(found, "no drain before the staged writes");
}

#[test]
fn store_reuse_a_staged_tile_written_without_waiting_for_its_stores() {
    let mut k = lowered("matmul/step9_tma_store_epilogue.hf");
    at_tile_drain(&mut k, |list, w| {
        list.remove(w);
    });
    let e = caught(&k, Rule::StoreReuse, "stmatrix.x4 c_s[");
    assert!(e[0].detail.contains("no wait for them"), "{}", e[0]);
}

#[test]
fn store_reuse_a_wait_without_the_barrier_after_it() {
    let mut k = lowered("matmul/step9_tma_store_epilogue.hf");
    at_tile_drain(&mut k, |list, w| {
        assert!(matches!(list[w + 1], Stmt::Sync));
        list.remove(w + 1);
    });
    let e = caught(&k, Rule::StoreReuse, "stmatrix.x4 c_s[");
    assert!(e[0].detail.contains("no barrier since"), "{}", e[0]);
}

#[test]
fn store_reuse_an_exit_without_the_last_wait() {
    let mut k = lowered("tma/exp_store.hf");
    // The exit drain is the last wait of the kernel.
    let mut waits = 0;
    edit(&mut k.body, &mut |list| {
        waits += list.iter().filter(|s| is_store_wait(s)).count();
        false
    });
    assert!(waits >= 2, "{waits}");
    let found = edit(
        &mut k.body,
        &mut |list| match list.iter().position(is_store_wait) {
            Some(i)
                if list[i + 1..]
                    .iter()
                    .any(|s| format!("{s:?}").contains("MbarInval")) =>
            {
                list.remove(i);
                true
            }
            _ => false,
        },
    );
    assert!(found, "no exit drain");
    let errors = verify::verify(&k, Stage::LOWERED).unwrap_err();
    let e: Vec<&VerifyError> = errors
        .iter()
        .filter(|e| e.rule == Rule::StoreReuse)
        .collect();
    assert!(
        e.iter().any(|e| e
            .detail
            .contains("can exit while a TMA store still reads `y_s`")),
        "{}",
        list(&errors)
    );
}

#[test]
fn warp_collective_elect_after_a_lane_dependent_test() {
    let mut k = lowered("tma/exp_2d.hf");
    // `warp == 0 && elect_one()` becomes `threadIdx.x == 0 && elect_one()`: elect.sync would
    // run in lane 0 alone.
    at_first(
        &mut k,
        |_, s| matches!(s, Stmt::If { cond: Val::And(_, b), .. } if **b == Val::Elect),
        |list, i| {
            if let Stmt::If { cond, .. } = &mut list[i] {
                *cond = Val::and(
                    Val::eq(Val::Hw(ParallelType::TIDx), Val::Int(0)),
                    Val::Elect,
                );
            }
        },
    );
    let e = caught(
        &k,
        Rule::WarpCollective,
        "if threadIdx.x == 0 && elect_one()",
    );
    assert!(e[0].detail.contains("elect.sync"), "{}", e[0]);
}

#[test]
fn warp_roles_register_counts_setmaxnreg_does_not_take() {
    let mut k = lowered("ws/exp_tidy_regs.hf");
    k.register_sharing = Some((20, 112));
    edit_roles(&mut k, |roles| {
        if let Stmt::WarpRoles(w) = roles {
            w.registers = Some((20, 112));
        }
    });
    let e = caught(&k, Rule::WarpRoles, "producer warps");
    assert!(
        e[0].detail.contains("producer register count 20"),
        "{}",
        e[0]
    );
}

#[test]
fn warp_roles_nested_roles() {
    let mut k = lowered("ws/exp_tidy.hf");
    edit_roles(&mut k, |roles| {
        let Stmt::WarpRoles(w) = roles else {
            unreachable!()
        };
        let inner = Stmt::WarpRoles(WarpRoles {
            producer: Vec::new(),
            consumer: Vec::new(),
            ..w.clone()
        });
        w.consumer.insert(0, inner);
    });
    let e = caught(&k, Rule::WarpRoles, "producer warps");
    assert!(e[0].detail.contains("inside warp roles"), "{}", e[0]);
}

const CLUSTER: &str = "matmul/step12_cluster_multicast.hf";

#[test]
fn cluster_a_multicast_kernel_launched_without_clusters() {
    let mut k = lowered(CLUSTER);
    k.cluster = None;
    // The rank is then unbound too; plant only the launch fault: read the rank from a `let`.
    k.body.insert(
        0,
        Stmt::Let {
            var: hopfuse::kir::CTA_RANK.into(),
            value: Val::Int(0),
            broadcast: false,
        },
    );
    let e = caught(&k, Rule::Cluster, "b_s[");
    assert!(
        e.iter()
            .any(|e| e.detail.contains("launched without clusters")),
        "{}",
        list(&e)
    );
    assert!(
        e.iter().any(|e| e.detail.contains("multicast to 2 CTAs")),
        "{}",
        list(&e)
    );
}

#[test]
fn cluster_a_cluster_barrier_inside_warp_roles_and_under_a_thread_condition() {
    let mut k = lowered(CLUSTER);
    edit_roles(&mut k, |roles| {
        let Stmt::WarpRoles(w) = roles else {
            unreachable!()
        };
        w.consumer.push(Stmt::ClusterSync);
    });
    let e = caught(&k, Rule::Cluster, "cluster_sync");
    assert!(e[0].detail.contains("inside warp roles"), "{}", e[0]);

    let mut k = lowered(CLUSTER);
    guard_first(
        &mut k,
        |_, s| matches!(s, Stmt::ClusterSync),
        Val::lt(Val::Hw(ParallelType::TIDy), Val::Int(1)),
    );
    let e = caught(&k, Rule::Cluster, "cluster_sync");
    assert!(e[0].detail.contains("differs between threads"), "{}", e[0]);
}

#[test]
fn mbarrier_init_a_cluster_wide_barrier_after_a_block_barrier_only() {
    // Peers arrive on the empty barriers: a `__syncthreads` does not order their init.
    let mut k = lowered(CLUSTER);
    at_first(
        &mut k,
        |_, s| matches!(s, Stmt::ClusterSync),
        |list, i| list[i] = Stmt::Sync,
    );
    let e = caught(&k, Rule::MbarrierInit, "mbarrier_wait a_s_b_s_empty");
    assert!(e[0].detail.contains("no cluster barrier"), "{}", e[0]);
}

#[test]
fn every_rule_has_a_planted_fault_above() {
    // Keeps this file in step with the rules: a new rule needs a test here.
    let source = [
        include_str!("verify.rs"),
        include_str!("verify/barriers.rs"),
    ]
    .concat();
    for rule in Rule::ALL {
        let variant = format!("Rule::{rule:?}");
        assert!(
            source.contains(&variant),
            "no planted-fault test names {variant}"
        );
    }
}

#[test]
fn the_pipeline_hook_names_the_pass_and_the_rule() {
    let mut k = lowered("basics/softmax.hf");
    remove_first(&mut k, |k, s| starts(k, s, "alloc m_acc"));
    assert!(verify::enabled(), "the verifier is off");
    // Allocations are not placed yet right after `loop_nest`: nothing to report then.
    assert!(verify::after_pass("loop_nest", &k).is_ok());
    let d = verify::after_pass("sync", &k).expect_err("caught after `sync`");
    let message = &d.0[0].message;
    assert!(
        message.starts_with("internal error: the kernel IR after pass `sync` breaks rule `use-before-alloc` at statement"),
        "{message}"
    );
    assert!(message.contains("m_acc"), "{message}");
}

#[test]
fn lowered_kernels_keep_shared_buffers_in_shared_memory() {
    // The memory-space facts the rules above rely on hold in the examples used.
    let k = lowered("tma/exp_store.hf");
    assert_eq!(k.buffers[buffer(&k, "y_s")].memory, MemoryType::Shared);
    assert_eq!(k.buffers[buffer(&k, "x")].memory, MemoryType::Global);
}

#[test]
fn warp_collective_a_broadcast_of_a_value_that_differs_between_lanes() {
    let mut k = lowered("matmul/step15_persistent_raster.hf");
    // Pass `tile_values` broadcasts the tile's raster from lane 0: with a per-lane term lane
    // 0's value would not be the others'.
    at_first(
        &mut k,
        |_, s| {
            matches!(
                s,
                Stmt::Let {
                    broadcast: true,
                    ..
                }
            )
        },
        |list, i| {
            if let Stmt::Let { value, .. } = &mut list[i] {
                *value = Val::add(value.clone(), Val::Hw(ParallelType::TIDx));
            }
        },
    );
    let e = caught(&k, Rule::WarpCollective, "let tile_v0 = ");
    assert!(e[0].detail.contains("broadcast from lane 0"), "{}", e[0]);
}
