//! Pass `view_vectors` on whole programs: each vector load it issues reads, at sampled values
//! of the loop variables where its guard holds, exactly the elements the scalar reads it
//! replaced read in each lane (their clamps and all), from an aligned start. The scalar reads
//! are those of the kernel before the pass (the `simplify` dump), the vector loads those after
//! it, both read back with `kir::parse`.

use hopfuse::kir::{parse, Data, Kernel, Stmt, Val};
use std::collections::BTreeMap;

/// The kernel IR after pass `name` of `src` specialised to `sizes`.
fn dumps(src: &str, sizes: &[(&str, i64)]) -> (Kernel, Kernel) {
    let sizes: BTreeMap<String, i64> = sizes.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let options = hopfuse::CompileOptions {
        aligned_for: Some(sizes),
        specialize: true,
        ..Default::default()
    };
    let c = hopfuse::compile(src, &options).unwrap_or_else(|e| panic!("{}", e.render(src, "t")));
    let ir = |name: &str| {
        let d = c
            .passes
            .iter()
            .find(|p| p.name == name)
            .expect("the pass ran");
        parse(&d.ir).unwrap_or_else(|e| panic!("{name}: {}", e.message))
    };
    (ir("simplify"), ir("view_vectors"))
}

/// One vector load the pass issued: its register array, the lane variable and width, the
/// guard at lane 0 and the start.
struct Load {
    array: String,
    lane: String,
    width: i64,
    guard: Val,
    start: Val,
}

/// The vector loads into register arrays of no tensor (the pass's), with their guards.
fn loads(k: &Kernel) -> Vec<Load> {
    let mut out = Vec::new();
    let mut add = |guard: &Val, s: &Stmt| {
        let Stmt::Compute(c) = s else { return };
        let (Some((lane, w)), Data::Read(src)) = (&c.vector, &c.value) else {
            return;
        };
        let array = &k.buffers[c.out.buffer];
        let global = k.buffers[src.buffer].memory == hopfuse::fusion::MemoryType::Global;
        let start = src.index.clone().expect("indexed");
        // (A guarded load is met first under its `if`, then again alone.)
        let seen = |l: &Load| l.array == array.name && l.start == start;
        if array.tensor.is_some() || !global || out.iter().any(seen) {
            return;
        }
        out.push(Load {
            array: array.name.clone(),
            lane: lane.clone(),
            width: *w as i64,
            guard: guard.clone(),
            start,
        });
    };
    hopfuse::kir::for_each_stmt(&k.body, &mut |s| match s {
        Stmt::If { cond, then, .. } if then.len() == 1 => add(cond, &then[0]),
        s => add(&Val::True, s),
    });
    out
}

/// The computes of a kernel by their expression and output buffer's name, in order.
fn computes(k: &Kernel) -> Vec<(String, &Data)> {
    let mut out = Vec::new();
    hopfuse::kir::for_each_stmt(&k.body, &mut |s| {
        if let Stmt::Compute(c) = s {
            if c.vector.is_none() && k.buffers[c.out.buffer].tensor.is_some() {
                out.push((
                    format!("{:?}/{}", c.expr, k.buffers[c.out.buffer].name),
                    &c.value,
                ));
            }
        }
    });
    out
}

/// Walks `after` and `before` (the same tree but for reads) together: each read of a register
/// array of no tensor (the pass's) in `after` and the scalar read (its index) at its place in
/// `before`.
fn pair_reads(after: &Data, before: &Data, ka: &Kernel, found: &mut Vec<(String, Val)>) {
    match (after, before) {
        (Data::Read(a), Data::Read(b)) if ka.buffers[a.buffer].tensor.is_none() => {
            if let Some(i) = &b.index {
                found.push((ka.buffers[a.buffer].name.clone(), i.clone()));
            }
        }
        (Data::Unary(_, _, x), Data::Unary(_, _, y))
        | (Data::Cast(_, x), Data::Cast(_, y))
        | (Data::View(_, x), Data::View(_, y)) => pair_reads(x, y, ka, found),
        (Data::Binary(_, _, x1, x2), Data::Binary(_, _, y1, y2)) => {
            pair_reads(x1, y1, ka, found);
            pair_reads(x2, y2, ka, found);
        }
        (Data::Ternary(_, _, xs), Data::Ternary(_, _, ys)) => {
            for (x, y) in xs.iter().zip(ys.iter()) {
                pair_reads(x, y, ka, found);
            }
        }
        _ => {}
    }
}

/// The names of the variables of `v`.
fn variables(v: &Val, out: &mut Vec<String>) {
    match v {
        Val::Var(n) if !out.contains(n) => out.push(n.clone()),
        Val::IndexIn(_, a, b) => {
            variables(a, out);
            variables(b, out);
        }
        _ => {
            if let Some((a, b)) = v.operands() {
                variables(a, out);
                variables(b, out);
            }
        }
    }
}

/// A small deterministic generator of sample values.
fn sample(seed: &mut u64) -> i64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*seed >> 33) % 100_000) as i64
}

/// Checks every load of `src` at sizes `sizes`; the number of points where a guard held.
fn check(src: &str, sizes: &[(&str, i64)], expect_loads: usize) -> usize {
    let (before, after) = dumps(src, sizes);
    let loads = loads(&after);
    assert_eq!(loads.len(), expect_loads, "vector loads issued");
    let (cb, ca) = (computes(&before), computes(&after));
    let mut scalar: Vec<(String, Val)> = Vec::new();
    for (name, a) in &ca {
        let b = cb
            .iter()
            .find(|(n, _)| n == name)
            .expect("the same compute before");
        pair_reads(a, b.1, &after, &mut scalar);
    }
    let mut held = 0;
    let mut seed = 7u64;
    let mut matched: Vec<&Val> = Vec::new();
    for load in &loads {
        let reads: Vec<&Val> = scalar
            .iter()
            .filter(|(n, _)| *n == load.array)
            .map(|(_, i)| i)
            .collect();
        assert!(!reads.is_empty(), "`{}` replaces a scalar read", load.array);
        // The reads the load agrees with at every point where its guard holds (an array may
        // hold a cat's two operands, each loaded under its own guard).
        let mut agree = vec![true; reads.len()];
        let mut points = 0;
        for _ in 0..4000 {
            let mut names = Vec::new();
            for v in reads.iter().copied().chain([&load.guard, &load.start]) {
                variables(v, &mut names);
            }
            let point: BTreeMap<String, i64> = names
                .into_iter()
                .filter(|n| *n != load.lane)
                .map(|n| (n, sample(&mut seed) % 128))
                .collect();
            let at = |lane: i64| {
                let p = point.clone();
                let lane_var = load.lane.clone();
                move |v: &Val| match v {
                    Val::Var(n) if *n == lane_var => Some(lane),
                    Val::Var(n) => p.get(n).copied(),
                    _ => None,
                }
            };
            if load.guard.eval_with(&at(0)) != Some(1) {
                continue;
            }
            points += 1;
            let start = load.start.eval_with(&at(0)).expect("a start");
            assert_eq!(start % load.width, 0, "aligned: {}", load.start.text());
            for (read, ok) in reads.iter().zip(agree.iter_mut()) {
                *ok &= (0..load.width).all(|v| read.eval_with(&at(v)) == Some(start + v));
            }
        }
        assert!(
            points > 200,
            "the guard of `{}` held at {points} points",
            load.array
        );
        held += points;
        let first = agree.iter().position(|&ok| ok);
        let read = first.map(|i| reads[i]).unwrap_or_else(|| {
            panic!(
                "no scalar read of `{}` agrees with its load at {}",
                load.array,
                load.start.text()
            )
        });
        matched.push(read);
    }
    // Every replaced scalar read is some load's.
    for (name, read) in &scalar {
        assert!(
            matched.contains(&read),
            "`{name}`'s read {} has no load",
            read.text()
        );
    }
    held
}

fn example(name: &str) -> String {
    std::fs::read_to_string(format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn rotary_halves_load_the_elements_the_lanes_read() {
    let src = example("fusions/rotary.hf");
    assert!(check(&src, &[("S", 262144)], 2) > 1000);
    // Ragged: a bounds predicate joins the guards.
    assert!(check(&src, &[("S", 1037)], 2) > 500);
}

#[test]
fn a_cat_of_aligned_rows_loads_each_operand_and_a_straddling_one_loads_none() {
    let src = example("ops/kv_append.hf");
    assert!(check(&src, &[("R", 512), ("S", 56), ("T", 8)], 2) > 1000);
    // The bench's S = 4095: the operands' rows are not aligned to 8.
    check(&src, &[("R", 512), ("S", 4095), ("T", 1)], 0);
}
