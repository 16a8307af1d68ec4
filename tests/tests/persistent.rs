//! Persistent grids with a grouped raster (`persistent(BIDy, 16)`): the tile loop the kernel
//! gets, that its tile indices visit every tile exactly once for any grid size (the bindings
//! evaluated on the host), the grid the launch plan picks, and the errors.

use hopfuse::kir::Val;
use std::collections::BTreeMap;

use hopfuse_tests::{compile, error, example};

fn step15() -> String {
    example("matmul/step15_persistent_raster.hf")
}

/// Step 15 with its `persistent(...)` statement replaced by `with`.
fn step15_with(with: &str) -> String {
    let src = step15();
    let line = "\n  persistent(BIDy, 16)\n";
    assert!(src.contains(line));
    src.replace(line, &format!("\n{with}\n"))
}

fn sizes(m: i64, n: i64, k: i64) -> BTreeMap<String, i64> {
    [("M", m), ("N", n), ("K", k)]
        .into_iter()
        .map(|(s, v)| (s.to_string(), v))
        .collect()
}

/// The (BIDy, BIDx) tile every CTA takes in every iteration of its tile loop, with `grid` CTAs,
/// from the kernel's own bindings evaluated on the host.
fn walk(c: &hopfuse::Compilation, sz: &BTreeMap<String, i64>, grid: i64) -> Vec<(i64, i64)> {
    let p = c.kernel.persistent.as_ref().expect("a persistent kernel");
    let tiles = p.tiles.eval(sz).unwrap();
    let ctas = c.plan.cluster.map_or(1, |d| d[0]);
    let mut out = Vec::new();
    for cta in 0..grid {
        let leaf = |tile: i64| {
            move |v: &Val| match v {
                Val::Var(name) if *name == p.var => Some(tile),
                Val::Hw(hopfuse::fusion::ParallelType::BIDx) => Some(cta),
                Val::Ctas => Some(grid),
                Val::Size(s) => sz.get(s).copied(),
                _ => None,
            }
        };
        // The loop's extent: ceilDiv(tiles - cluster, clusters in the grid).
        let (cluster, clusters) = (cta / ctas, grid / ctas);
        let iterations = (tiles - cluster + clusters - 1) / clusters;
        for tile in 0..iterations.max(0) {
            let index = |axis| {
                let (_, _, value) = p.bindings.iter().find(|(_, a, _)| *a == axis).unwrap();
                value.eval_with(&leaf(tile)).expect("evaluable")
            };
            out.push((
                index(hopfuse::fusion::ParallelType::BIDy),
                index(hopfuse::fusion::ParallelType::BIDx),
            ));
        }
    }
    out
}

#[test]
fn every_tile_is_taken_exactly_once_whatever_the_grid() {
    let c = compile(&step15());
    for (m, n) in [
        (4096i64, 4096i64),
        (4000, 3000),
        (128, 14336),
        (129, 4088),
        (8192, 1024),
    ] {
        let sz = sizes(m, n, 64);
        let (mt, nt) = ((m + 127) / 128, (n + 255) / 256);
        for grid in [1, 7, 128, 132, mt * nt, mt * nt + 5] {
            let mut seen = walk(&c, &sz, grid);
            assert_eq!(seen.len() as i64, mt * nt, "{m} x {n}, grid {grid}");
            seen.sort();
            seen.dedup();
            assert_eq!(
                seen.len() as i64,
                mt * nt,
                "{m} x {n}, grid {grid}: a tile twice"
            );
            assert!(
                seen.iter()
                    .all(|&(y, x)| (0..mt).contains(&y) && (0..nt).contains(&x)),
                "{m} x {n}, grid {grid}: a tile out of range"
            );
        }
    }
}

#[test]
fn the_consumers_store_each_tile_where_its_raster_says() {
    // Pass `tile_values` moves the raster into `let`s at the top of the consumers' tile loop:
    // evaluated on the host, the TMA stores' coordinates (first box) are the tiles of the
    // bindings.
    use hopfuse::kir::{for_each_stmt, Stmt};
    let c = compile(&step15());
    let mut tile_loops = Vec::new();
    for_each_stmt(&c.kernel.body, &mut |s| {
        if let Stmt::Loop(l) = s {
            if l.var == "tile" {
                tile_loops.push(l);
            }
        }
    });
    let [consumer] = tile_loops[..] else {
        panic!("one tile loop besides the producer's flat loop")
    };
    let lets: Vec<(&String, &Val)> = consumer
        .body
        .iter()
        .map_while(|s| match s {
            Stmt::Let {
                var,
                value,
                broadcast: true,
            } => Some((var, value)),
            _ => None,
        })
        .collect();
    assert_eq!(lets.len(), 2, "the raster's two indices");
    let mut stores = Vec::new();
    for_each_stmt(&consumer.body, &mut |s| {
        if let Stmt::TmaStore(t) = s {
            stores.push(&t.coords);
        }
    });
    let [coords] = stores[..] else {
        panic!("one TMA store statement")
    };
    for (m, n) in [(4096i64, 4096i64), (4000, 3000), (129, 4088)] {
        let sz = sizes(m, n, 64);
        let grid = 7;
        let tiles = walk(&c, &sz, grid);
        let mut next = tiles.iter();
        let mt_nt = ((m + 127) / 128) * ((n + 255) / 256);
        for cta in 0..grid {
            for tile in 0..(mt_nt - cta + grid - 1) / grid {
                let mut env: BTreeMap<String, i64> = BTreeMap::new();
                env.insert("tile".into(), tile);
                env.insert("n_io".into(), 0);
                let eval = |v: &Val, env: &BTreeMap<String, i64>| {
                    v.eval_with(&|x| match x {
                        Val::Var(name) => env.get(name).copied(),
                        Val::Hw(hopfuse::fusion::ParallelType::BIDx) => Some(cta),
                        Val::Ctas => Some(grid),
                        Val::Size(s) => sz.get(s).copied(),
                        _ => None,
                    })
                    .unwrap_or_else(|| panic!("{} is evaluable", v.text()))
                };
                for (var, value) in &lets {
                    let v = eval(value, &env);
                    env.insert(var.to_string(), v);
                }
                let got: Vec<i64> = coords.iter().map(|v| eval(v, &env)).collect();
                let &(y, x) = next.next().expect("a tile");
                assert_eq!(
                    got,
                    vec![x * 256, y * 128],
                    "{m} x {n}, CTA {cta}, tile {tile}"
                );
            }
        }
        assert!(next.next().is_none());
    }
}

#[test]
fn the_tiles_in_flight_form_groups_along_m() {
    // 4096^2 in 128 x 256 tiles: 32 x 16. The first tile of each of 128 CTAs: groups of 16 M
    // tiles, stepping down M first, so 16 M tiles x 8 N tiles.
    let c = compile(&step15());
    let first: Vec<(i64, i64)> = walk(&c, &sizes(4096, 4096, 64), 128)
        .chunks(4)
        .map(|tiles| tiles[0])
        .collect();
    assert_eq!(first.len(), 128);
    assert_eq!(&first[..3], &[(0, 0), (1, 0), (2, 0)]);
    assert_eq!(first[16], (0, 1));
    let rows: std::collections::BTreeSet<i64> = first.iter().map(|t| t.0).collect();
    let cols: std::collections::BTreeSet<i64> = first.iter().map(|t| t.1).collect();
    assert_eq!((rows.len(), cols.len()), (16, 8));
}

#[test]
fn the_kernel_has_one_tile_loop_that_the_producer_flattens() {
    let c = compile(&step15());
    let ir = &c.passes.last().unwrap().ir;
    assert!(
        ir.contains("persistent(BIDy, 16): loop `tile` walks this CTA's share of ceilDiv(M, 128) * ceilDiv(N, 256) tiles"),
        "{ir}"
    );
    // The consumers' tile loop, and the producer's one flat (tile, k) loop.
    assert!(
        ir.contains("for tile in ceilDiv(ceilDiv(M, 128) * ceilDiv(N, 256) - blockIdx.x, gridDim.x) @Serial key "),
        "{ir}"
    );
    // It carries the tile and k indices as digits: no division of the linear count.
    assert!(
        ir.contains("for tile_k_o in ceilDiv(ceilDiv(M, 128) * ceilDiv(N, 256) - blockIdx.x, gridDim.x) * ceilDiv(K, 64) @Serial key ")
            && ir.contains(" carrying tile in ceilDiv(ceilDiv(M, 128) * ceilDiv(N, 256) - blockIdx.x, gridDim.x), k_o in ceilDiv(K, 64):"),
        "{ir}"
    );
    assert!(
        c.cuda
            .contains("if (++k_o == hf_ceil_div<index_t>(K, 64)) { k_o = 0; ++tile; }"),
        "{}",
        c.cuda
    );
    assert!(
        !c.cuda.contains("tile_k_o / hf_ceil_div") && !c.cuda.contains("tile_k_o % hf_ceil_div"),
        "{}",
        c.cuda
    );
    // No blockIdx.y anywhere: the grid is one-dimensional.
    assert!(!c.cuda.contains("blockIdx.y"), "{}", c.cuda);
    assert!(c.cuda.contains("hf_min<index_t>("), "{}", c.cuda);
    let view = &c.pipeline;
    let order = view
        .tiles
        .as_ref()
        .expect("the tile order in the pipeline view");
    assert_eq!((order.along.as_str(), order.group), ("BIDy", 16));
    assert_eq!(order.indices.len(), 2);
}

#[test]
fn the_launch_takes_the_fewest_ctas_for_the_fewest_rounds() {
    let c = compile(&step15());
    let plan = &c.plan;
    assert_eq!(
        plan.persistent,
        Some(hopfuse::plan::PersistentGrid {
            along: "BIDy".into(),
            group: 16,
            stream_k: None,
        })
    );
    let grid = |m, n| plan.concretize(&sizes(m, n, 64)).unwrap().grid;
    // 512 tiles in 4 rounds: 128 CTAs, not 132 of which 116 take a fourth.
    assert_eq!(grid(4096, 4096), [128, 1, 1]);
    assert_eq!(grid(8192, 8192), [128, 1, 1]);
    // Fewer tiles than SMs: one CTA per tile.
    assert_eq!(grid(128, 4096), [16, 1, 1]);
    // 32 x 12 = 384 tiles: 3 rounds of 128.
    assert_eq!(grid(4000, 3000), [128, 1, 1]);
    // 33 x 16 = 528 tiles: 4 rounds of 132.
    assert_eq!(grid(4224, 4096), [132, 1, 1]);
    assert_eq!(hopfuse::plan::persistent_grid(528, 1, 132), 132);
    assert_eq!(hopfuse::plan::persistent_grid(529, 1, 132), 106);
    assert_eq!(hopfuse::plan::persistent_grid(200, 2, 66), 100);
}

#[test]
fn a_cluster_kernel_takes_tiles_of_clusters() {
    let src = step15_with("  persistent(BIDy, 8)\n  cluster(BIDy, 2)");
    let c = compile(&src);
    assert_eq!(c.plan.cluster, Some([2, 1, 1]));
    assert!(c.cuda.contains("__cluster_dims__(2, 1, 1)"), "{}", c.cuda);
    let sz = sizes(4096, 4096, 64);
    // 16 x 16 cluster tiles of 2 CTAs; 66 clusters fit: 4 rounds of 64 clusters.
    assert_eq!(c.plan.concretize(&sz).unwrap().grid, [128, 1, 1]);
    let tiles = walk(&c, &sz, 128);
    // The two CTAs of each cluster take M tiles 2j and 2j + 1 of one N tile, together.
    for (i, pair) in tiles.chunks(4).collect::<Vec<_>>().chunks(2).enumerate() {
        for (a, b) in pair[0].iter().zip(pair[1]) {
            assert_eq!((a.0 % 2, b.0, a.1), (0, a.0 + 1, b.1), "cluster {i}");
        }
    }
    let mut all = tiles.clone();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 32 * 16);
}

#[test]
fn persistent_errors_name_the_rule() {
    let e = error(&step15_with("  persistent(TIDy, 16)"));
    assert!(e.contains("persistent(...) takes the grid axis its tile groups run along (BIDx or BIDy) and a group size, got `TIDy`"), "{e}");
    let e = error(&step15_with("  persistent(BIDy, 0)"));
    assert!(
        e.contains("a raster group has 1 to 132 tiles, got 0"),
        "{e}"
    );
    let e = error(&step15_with(
        "  persistent(BIDy, 16)\n  persistent(BIDx, 4)",
    ));
    assert!(e.contains("the kernel is already persistent"), "{e}");
    // No axis on BIDy: nothing to group along it.
    let e = error(
        &step15_with("  persistent(BIDy, 4)")
            .replace("s.parallelize(0, BIDy)", "s.parallelize(0, Serial)"),
    );
    assert!(
        e.contains("persistent(BIDy, 4): no axis is parallelized on BIDy, so there are no tiles along it to group"),
        "{e}"
    );
    // Located at the statement.
    assert!(e.contains(":63:3"), "{e}");

    // Two nests over the grid (t computed alone, then y): one tile loop cannot hold them.
    let two = "fusion f {\n  input x: f32[M, N]\n  t = exp(x)\n  y = t + 1.0\n  output y\n}\nschedule {\n  y.split(1, 128)\n  y.parallelize(0, BIDy)\n  y.parallelize(2, TIDx)\n  propagate(y)\n  t.set_memory(global)\n  t.inline_at(0)\n  persistent(BIDy, 4)\n}\n";
    let e = error(two);
    assert!(
        e.contains("t.hf:14:3: error: persistent(BIDy, 4): the kernel has 2 separate loop nests over the grid"),
        "{e}"
    );
}
