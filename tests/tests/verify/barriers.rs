//! Planted faults in the named barriers: the block's and the consumers' barriers, the thread
//! groups' barriers and the ping-pong turn barriers (counts, ids, where they may stand).

use super::*;

#[test]
fn block_barrier_a_named_barrier_under_a_thread_dependent_condition() {
    let mut k = lowered("ws/add_two_roles.hf");
    edit_roles(&mut k, |roles| {
        let Stmt::WarpRoles(w) = roles else {
            unreachable!()
        };
        let consumer = &mut w.consumer;
        let sync = consumer
            .iter()
            .position(|s| *s == Stmt::Sync)
            .expect("the consumers' named barrier");
        let barrier = consumer.remove(sync);
        consumer.insert(
            sync,
            Stmt::If {
                cond: Val::eq(Val::Var("m_i".into()), Val::Int(0)),
                then: vec![barrier],
                els: Vec::new(),
            },
        );
    });
    let e = caught(&k, Rule::BlockBarrier, "__syncthreads()");
    assert!(e[0].detail.contains("differs between threads"), "{}", e[0]);
}

#[test]
fn block_barrier_a_barrier_in_the_producer_branch() {
    let mut k = lowered("ws/exp_tidy.hf");
    edit_roles(&mut k, |roles| {
        if let Stmt::WarpRoles(w) = roles {
            w.producer.push(Stmt::Sync);
        }
    });
    let e = caught(&k, Rule::BlockBarrier, "__syncthreads()");
    assert!(e[0].detail.contains("producer branch"), "{}", e[0]);
}

#[test]
fn named_barrier_count_consumers_counted_wrong() {
    let mut k = lowered("ws/add_two_roles.hf");
    edit_roles(&mut k, |roles| {
        if let Stmt::WarpRoles(w) = roles {
            w.consumer_threads = 256;
        }
    });
    let e = caught(&k, Rule::NamedBarrierCount, "producer warps");
    assert!(
        e[0].detail.contains("counts 256 threads, but 512 threads"),
        "{}",
        e[0]
    );
}

#[test]
fn named_barrier_count_one_id_with_two_counts() {
    let k = lowered("ws/row_sum_persistent.hf");
    let mut uses = verify::barrier_uses(&k);
    // Barrier 0 at entry; barrier 1 in the block reduction and before the inval.
    let ids: Vec<u32> = uses.iter().map(|u| u.id).collect();
    assert_eq!(ids, [0, 1, 1], "{uses:?}");
    assert!(verify::check_barrier_uses(&uses).is_empty());
    uses[2].threads = Some(256);
    let e = verify::check_barrier_uses(&uses);
    assert_eq!(e.len(), 1, "{}", list(&e));
    assert_eq!(e[0].rule, Rule::NamedBarrierCount);
    assert!(
        e[0].detail.contains("counts 256 threads here but 512"),
        "{}",
        e[0]
    );
}

#[test]
fn named_barrier_id_beyond_the_hardware_16() {
    // The kernel IR names no barrier ids yet (codegen maps block barriers to 0 and the
    // consumers' to 1), so the fault goes into the barriers derived from a real kernel.
    let k = lowered("ws/add_two_roles.hf");
    let mut uses = verify::barrier_uses(&k);
    assert!(verify::check_barrier_uses(&uses).is_empty());
    let last = uses.last_mut().expect("a consumer barrier");
    last.id = 16;
    let e = verify::check_barrier_uses(&uses);
    assert_eq!(e.len(), 1, "{}", list(&e));
    assert_eq!(e[0].rule, Rule::NamedBarrierId);
    assert!(e[0].detail.contains("barriers 0 to 15"), "{}", e[0]);
}

#[test]
fn named_barrier_count_a_group_barrier_of_part_of_a_warp() {
    let mut k = lowered("tma/exp_row_stores.hf");
    assert_eq!(verify::verify(&k, Stage::LOWERED), Ok(()));
    at_first(
        &mut k,
        |_, s| matches!(s, Stmt::GroupSync { .. }),
        |list, i| {
            if let Stmt::GroupSync { threads, .. } = &mut list[i] {
                *threads = 48;
            }
        },
    );
    let e = caught(
        &k,
        Rule::NamedBarrierCount,
        "group_barrier(TIDy, 48 threads)",
    );
    assert!(e[0].detail.contains("whole warps"), "{}", e[0]);
}

#[test]
fn block_barrier_a_group_barrier_under_a_lane_dependent_condition() {
    let mut k = lowered("tma/exp_row_stores.hf");
    at_first(
        &mut k,
        |_, s| matches!(s, Stmt::GroupSync { .. }),
        |list, i| {
            let barrier = list.remove(i);
            list.insert(
                i,
                Stmt::If {
                    cond: Val::lt(Val::Hw(ParallelType::TIDx), Val::Int(16)),
                    then: vec![barrier],
                    els: Vec::new(),
                },
            );
        },
    );
    let e = caught(&k, Rule::BlockBarrier, "group_barrier(TIDy, 64 threads)");
    assert!(e[0].detail.contains("lanes of a warp"), "{}", e[0]);
}

#[test]
fn named_barrier_ids_of_group_barriers_follow_the_consumers() {
    // Eight rows of threads: barriers 2..9, each over its row's 64 threads.
    let k = lowered("tma/exp_row_stores.hf");
    let uses = verify::barrier_uses(&k);
    let ids: std::collections::BTreeSet<u32> = uses.iter().map(|u| u.id).collect();
    assert_eq!(ids, (2..10).collect(), "{uses:?}");
    assert!(uses.iter().all(|u| u.threads == Some(64)), "{uses:?}");
}

/// The first turn hand-over of step 14 (ping-pong), changed by `change`.
fn step14_with_turn(change: impl FnOnce(&mut Vec<Stmt>, usize)) -> Kernel {
    let mut k = lowered("matmul/step14_ping_pong.hf");
    at_first(&mut k, |_, s| matches!(s, Stmt::Turn { .. }), change);
    k
}

#[test]
fn named_barrier_count_a_turn_barrier_of_part_of_a_warp() {
    let k = step14_with_turn(|list, i| {
        if let Stmt::Turn { threads, .. } = &mut list[i] {
            *threads = 48;
        }
    });
    let e = caught(
        &k,
        Rule::NamedBarrierCount,
        "turn_pass(TIDy, 2 groups of 48",
    );
    assert!(e[0].detail.contains("whole warps"), "{}", e[0]);
}

#[test]
fn named_barrier_id_more_groups_than_turn_barriers() {
    let k = step14_with_turn(|list, i| {
        if let Stmt::Turn { groups, .. } = &mut list[i] {
            *groups = 9;
        }
    });
    let e = caught(&k, Rule::NamedBarrierId, "turn_pass(TIDy, 9 groups");
    assert!(
        e[0].detail.contains("at most 4 have turn barriers"),
        "{}",
        e[0]
    );
}

#[test]
fn block_barrier_a_turn_barrier_under_a_lane_dependent_condition_and_in_the_producers() {
    let k = step14_with_turn(|list, i| {
        let turn = list.remove(i);
        list.insert(
            i,
            Stmt::If {
                cond: Val::lt(Val::Hw(ParallelType::TIDx), Val::Int(16)),
                then: vec![turn],
                els: Vec::new(),
            },
        );
    });
    let e = caught(&k, Rule::BlockBarrier, "turn_pass(TIDy, 2 groups of 128");
    assert!(e[0].detail.contains("lanes of a warp"), "{}", e[0]);
    // The same hand-over moved into the producer branch.
    let mut k = lowered("matmul/step14_ping_pong.hf");
    let mut turn = None;
    at_first(
        &mut k,
        |_, s| matches!(s, Stmt::Turn { .. }),
        |list, i| turn = Some(list.remove(i)),
    );
    edit_roles(&mut k, |roles| {
        if let Stmt::WarpRoles(w) = roles {
            w.producer.insert(0, turn.take().expect("taken"));
        }
    });
    let e = verify::verify(&k, Stage::LOWERED).expect_err("caught");
    assert!(
        e.iter().any(|e| e.rule == Rule::BlockBarrier
            && e.detail.contains("producer branch")
            && e.text.starts_with("turn_pass(")),
        "{}",
        list(&e)
    );
}

#[test]
fn named_barrier_ids_of_ping_pong_turns_count_down_from_the_top() {
    // Step 14: the block's barrier 0 (after the mbarrier init), the consumers' barrier 1, the
    // warp groups' epilogue barriers (2 + threadIdx.y, 128 threads; the verifier takes every
    // row of the block, the producers' too, so 2 to 4) and the two turn barriers (15, 14), each
    // counting both groups.
    let k = lowered("matmul/step14_ping_pong.hf");
    let uses = verify::barrier_uses(&k);
    let count = |id: u32| {
        let mut c: Vec<Option<i64>> = uses
            .iter()
            .filter(|u| u.id == id)
            .map(|u| u.threads)
            .collect();
        c.dedup();
        c
    };
    let ids: std::collections::BTreeSet<u32> = uses.iter().map(|u| u.id).collect();
    assert_eq!(
        ids,
        [0, 1, 2, 3, 4, 14, 15].into_iter().collect(),
        "{uses:?}"
    );
    assert_eq!(
        (count(1), count(2), count(3)),
        (vec![Some(256)], vec![Some(128)], vec![Some(128)])
    );
    assert_eq!((count(14), count(15)), (vec![Some(256)], vec![Some(256)]));
}
