//! Stream-K (`persistent(BIDy, 16, stream_k)`): whole tiles for as many rounds as every CTA
//! has one, then the CTAs split the k steps of the tiles left evenly.
//! The kernel's own index expressions, evaluated on the host for many sizes and grids: every k
//! step of every tile is taken exactly once, one piece ends each tile, and its CTA adds the
//! partial sums of exactly the CTAs holding the tile's other pieces, each their first piece of
//! the split (one workspace slot per CTA); the pipelines count a CTA's steps without a gap.
//! Then the launch, the generated hand-over and the errors.

use hopfuse::fusion::ParallelType;
use hopfuse::kir::{Stmt, Val};
use std::collections::BTreeMap;

use hopfuse_tests::{compile, error, example};

/// Step 15 with per-group stores, split by k steps.
fn stream_k_src() -> String {
    let src = example("matmul/step15_persistent_raster.hf");
    src.replace(
        "\n  persistent(BIDy, 16)\n",
        "\n  persistent(BIDy, 16, stream_k)\n",
    )
}

fn sizes(m: i64, n: i64, k: i64) -> BTreeMap<String, i64> {
    [("M", m), ("N", n), ("K", k)]
        .into_iter()
        .map(|(s, v)| (s.to_string(), v))
        .collect()
}

/// One CTA's piece of one tile, as the kernel computes it.
#[derive(Debug)]
struct Piece {
    cta: i64,
    /// The tile loop's iteration (whole tiles first, then the split's pieces).
    iteration: i64,
    tile: (i64, i64),
    lo: i64,
    hi: i64,
    /// The pipeline's count of the CTA's k steps before this piece.
    before: i64,
    /// The CTAs whose partial sums this piece adds (the fixup's loop), if it ends its tile.
    peers: Vec<i64>,
}

fn pieces(c: &hopfuse::Compilation, sz: &BTreeMap<String, i64>, grid: i64) -> Vec<Piece> {
    let p = c.kernel.persistent.as_ref().expect("a persistent kernel");
    let sk = p.stream_k.as_ref().expect("a stream-K split");
    let mut tile_extent = None;
    hopfuse::kir::for_each_stmt(&c.kernel.body, &mut |s| {
        if let Stmt::Loop(l) = s {
            if l.var == p.var {
                tile_extent.get_or_insert(l.extent.clone());
            }
        }
    });
    let tile_extent = tile_extent.expect("the tile loop");
    // The CTA's constants (the kernel's `let`s), then any value of an iteration.
    let consts = |cta: i64| {
        let mut known: BTreeMap<String, i64> = BTreeMap::new();
        for (name, value) in &sk.consts {
            let v = value
                .eval_with(&|x: &Val| match x {
                    Val::Var(n) => known.get(n).copied(),
                    Val::Hw(ParallelType::BIDx) => Some(cta),
                    Val::Ctas => Some(grid),
                    Val::Size(s) => sz.get(s).copied(),
                    _ => None,
                })
                .expect("a constant");
            known.insert(name.clone(), v);
        }
        known
    };
    let eval = |v: &Val, cta: i64, tile: i64| {
        let known = consts(cta);
        v.eval_with(&|x: &Val| match x {
            Val::Var(name) if *name == p.var => Some(tile),
            Val::Var(name) => known.get(name).copied(),
            Val::Hw(ParallelType::BIDx) => Some(cta),
            Val::Ctas => Some(grid),
            Val::Size(s) => sz.get(s).copied(),
            _ => None,
        })
        .expect("evaluable")
    };
    let work = eval(&sk.work, 0, 0);
    let start = |b: i64| b * (work / grid) + b.min(work % grid);
    let mut out = Vec::new();
    for cta in 0..grid {
        for iteration in 0..eval(&tile_extent, cta, 0) {
            let index = |axis| {
                let (_, _, value) = p.bindings.iter().find(|(_, a, _)| *a == axis).unwrap();
                eval(value, cta, iteration)
            };
            let (lo, hi) = (eval(&sk.lo, cta, iteration), eval(&sk.hi, cta, iteration));
            let kt = eval(&sk.kt, cta, iteration);
            let tile_start = eval(&sk.tile_start, cta, iteration);
            let mut peers = Vec::new();
            if hi == kt && lo > 0 {
                let mut q = cta - 1;
                while q >= 0 && tile_start < start(q + 1) {
                    peers.push(q);
                    q -= 1;
                }
            }
            out.push(Piece {
                cta,
                iteration,
                tile: (index(ParallelType::BIDy), index(ParallelType::BIDx)),
                lo,
                hi,
                before: eval(&sk.before, cta, iteration),
                peers,
            });
        }
    }
    out
}

#[test]
fn every_k_step_is_taken_once_and_every_partial_sum_is_added_once() {
    let c = compile(&stream_k_src());
    for (m, n, k) in [
        (4096i64, 4096i64, 4096i64),
        (4000, 3000, 1000),
        (129, 4088, 72),
        (128, 256, 64),
        (1000, 1544, 328),
        (256, 512, 8192),
    ] {
        let sz = sizes(m, n, k);
        let (mt, nt, kt) = ((m + 127) / 128, (n + 255) / 256, (k + 63) / 64);
        let work = mt * nt * kt;
        for grid in [1, 2, 7, 128, 132, 264].into_iter().filter(|&g| g <= work) {
            let what = format!("{m} x {n} x {k}, grid {grid}");
            let all = pieces(&c, &sz, grid);
            // Each (tile, k step) once.
            let mut steps: Vec<(i64, i64, i64)> = all
                .iter()
                .flat_map(|p| (p.lo..p.hi).map(move |s| (p.tile.0, p.tile.1, s)))
                .collect();
            assert_eq!(steps.len() as i64, work, "{what}");
            steps.sort();
            steps.dedup();
            assert_eq!(steps.len() as i64, work, "{what}: a step twice");
            assert!(
                steps
                    .iter()
                    .all(|&(y, x, s)| y < mt && x < nt && (0..kt).contains(&s)),
                "{what}: out of range"
            );
            // The pipelines count each CTA's steps from 0 without a gap.
            for cta in 0..grid {
                let mine: Vec<&Piece> = all.iter().filter(|p| p.cta == cta).collect();
                let mut next = 0;
                for p in mine {
                    assert_eq!(p.before, next, "{what}: CTA {cta}'s count");
                    next += p.hi - p.lo;
                }
            }
            // One piece ends each tile; it adds exactly the other pieces, each the first piece
            // its CTA takes in the split (so one workspace slot per CTA suffices).
            let mut enders = BTreeMap::new();
            for p in all.iter().filter(|p| p.hi == kt) {
                assert!(
                    enders.insert(p.tile, p).is_none(),
                    "{what}: two pieces end a tile"
                );
            }
            assert_eq!(enders.len() as i64, mt * nt, "{what}");
            // Whole tiles first (R rounds), then the split.
            let rounds = mt * nt / grid;
            for p in all.iter().filter(|p| p.iteration < rounds) {
                assert_eq!((p.lo, p.hi), (0, kt), "{what}");
            }
            let mut handed = Vec::new();
            for p in all.iter().filter(|p| p.hi < kt) {
                assert_eq!(
                    p.iteration, rounds,
                    "{what}: a handed-on piece that is not its run's first"
                );
                let ender = enders[&p.tile];
                assert!(
                    ender.peers.contains(&p.cta),
                    "{what}: CTA {} not added",
                    p.cta
                );
                handed.push(p.cta);
            }
            // The CTAs take their split pieces at about the same k step: each run starts at
            // step 0 of a tile or inside the run's only tile.
            for p in all.iter().filter(|p| p.iteration == rounds && p.lo > 0) {
                assert!(
                    all.iter().filter(|q| q.cta == p.cta).count() as i64 == rounds + 1,
                    "{what}: CTA {} starts its run inside a tile it goes on from",
                    p.cta
                );
            }
            let mut added: Vec<i64> = enders.values().flat_map(|p| p.peers.clone()).collect();
            added.sort();
            handed.sort();
            assert_eq!(
                added, handed,
                "{what}: the ending pieces add what was handed on"
            );
        }
    }
}

#[test]
fn the_grid_is_every_resident_cta_and_the_workspace_a_slot_per_cta() {
    let c = compile(&stream_k_src());
    let plan = &c.plan;
    let p = plan.persistent.as_ref().unwrap();
    assert!(p.stream_k.is_some());
    let grid = |m, n, k| plan.concretize(&sizes(m, n, k)).unwrap().grid;
    // 512 tiles x 64 steps over all 132 SMs (not 128 CTAs of 4 whole tiles).
    assert_eq!(grid(4096, 4096, 4096), [132, 1, 1]);
    // Fewer steps than SMs: one CTA per step.
    assert_eq!(grid(128, 256, 64), [1, 1, 1]);
    assert_eq!(grid(128, 512, 128), [4, 1, 1]);
    assert_eq!(hopfuse::plan::stream_k_grid(100_000, 1000), 264);
    // No k step: refused before anything is split (nothing would write the output).
    let e = plan
        .concretize(&sizes(256, 256, 0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("K = 0 must be at least 1"), "{e}");
    // The workspace: 264 slots of 128 x 256 floats, then 264 flags; zeroed, not validated.
    let ws = plan
        .params
        .iter()
        .find_map(|p| match p {
            hopfuse::plan::Param::Tensor {
                name, role, shape, ..
            } if name == "hf_workspace" => Some((*role, shape.clone())),
            _ => None,
        })
        .expect("the workspace parameter");
    assert_eq!(ws.0, hopfuse::plan::TensorRole::Workspace);
    assert_eq!(
        ws.1,
        vec![hopfuse::plan::SizeExpr::Const(264 * (128 * 256 + 1))]
    );
}

#[test]
fn a_piece_hands_on_its_sums_and_only_the_piece_ending_a_tile_stores() {
    let c = compile(&stream_k_src());
    let cuda = &c.cuda;
    assert!(cuda.contains("float* __restrict__ hf_workspace,"), "{cuda}");
    assert!(
        cuda.contains("hf_sk_store<128, 256>(hf_workspace, blockIdx.x, &s_acc[0], hf_sk_tid);"),
        "{cuda}"
    );
    assert!(
        cuda.contains("hf_sk_add<128, 256>(hf_workspace, hf_sk_p, &s_acc[0], hf_sk_tid);"),
        "{cuda}"
    );
    assert!(cuda.contains("st.release.gpu.global.u32"), "{cuda}");
    assert!(cuda.contains("ld.acquire.gpu.global.u32"), "{cuda}");
    // The fixup comes after the last wgmma has retired, before the epilogue reads s_acc.
    let kernel = &cuda[cuda.find("__global__").unwrap()..];
    let wait = kernel.find("hf_wgmma_wait<0>();").unwrap();
    let fixup = kernel.find("{  // stream-K").unwrap();
    let epilogue = kernel.find("hf_stmatrix_x4(").unwrap();
    assert!(wait < fixup && fixup < epilogue, "{kernel}");
    // Each TMA store of c is guarded by the piece ending its tile.
    let ir = &c.passes.last().unwrap().ir;
    assert!(
        ir.contains("persistent(BIDy, 16, stream_k): loop `tile` walks this CTA's rounds and run"),
        "{ir}"
    );
    assert!(ir.contains("stream_k_fixup s_acc"), "{ir}");
    let store = ir.find("tma_store_2d c_map").unwrap();
    let guard = ir[..store].rfind("if ").unwrap();
    let cond = ir[guard + 3..].split(':').next().unwrap().trim();
    // (Pass `tile_values` computes the condition once per tile, as a `let`.)
    let cond = match ir.find(&format!("let {cond} = ")) {
        Some(at) => ir[at..].lines().next().unwrap(),
        None => cond,
    };
    assert!(cond.contains(") == ceilDiv(K, 64)"), "{cond}");
}

#[test]
fn stream_k_errors_name_the_rule() {
    let with = |s: &str| stream_k_src().replace("persistent(BIDy, 16, stream_k)", s);
    let e = error(&with("persistent(BIDy, 16, split)"));
    assert!(
        e.contains("persistent(...)'s third argument is `stream_k`"),
        "{e}"
    );
    let e = error(&with("persistent(BIDy, 8, stream_k)\n  cluster(BIDy, 2)"));
    assert!(
        e.contains("a stream-K split does not combine with cluster(...)"),
        "{e}"
    );
    // An example with a stream-K grid.
    let split = |name: &str| {
        error(&example(name).replace(
            "\n  inline_most()\n",
            "\n  inline_most()\n  persistent(BIDy, 16, stream_k)\n",
        ))
    };
    // Operands loaded without a producer warp group (step 2's pipeline).
    let e = split("matmul/step2_pipelined.hf");
    assert!(
        e.contains("stream_k: the operands are not loaded by a warp-specialized circular buffer"),
        "{e}"
    );
    // An output written by plain stores (step 4's register epilogue): a later piece would
    // store its partial sums.
    let e = split("matmul/step4_two_consumers.hf");
    assert!(
        e.contains(
            "stream_k: output `c` is not written by TMA stores (cache_before(..., store=tma))"
        ),
        "{e}"
    );
}
