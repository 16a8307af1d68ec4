use super::*;
use std::collections::BTreeMap;

/// The attention of `[S, 4]` queries over `[T, 4]` keys with the scores masked by `keep`.
fn masked(keep: &str) -> Fusion {
    masked_after("", keep)
}

/// [`masked`] with `lines` (statements, each ending in a newline) before `keep`.
fn masked_after(lines: &str, keep: &str) -> Fusion {
    let source = format!(
        "fusion f {{
  input q: f32[S, 4]
  input k: f32[T, 4]
  input v: f32[T, 4]
  s = sum(broadcast(q, axis=1) * broadcast(k, axis=0), axis=2)
  i = iota(s, axis=0)
  j = iota(s, axis=1)
{lines}  keep = {keep}
  sm = where(keep, s, -1.0 / 0.0)
  m = max(sm, axis=1)
  e = exp(sm - broadcast(m, axis=1))
  l = sum(e, axis=1)
  p = e / broadcast(l, axis=1)
  o = sum(broadcast(p, axis=2) * broadcast(v, axis=0), axis=1)
  output o
}}"
    );
    crate::reference_fusion(&source).unwrap_or_else(|e| panic!("{keep}: {e:?}"))
}

fn tensor(f: &Fusion, name: &str) -> TensorId {
    f.tensors
        .iter()
        .position(|t| t.name == name)
        .map(TensorId::new)
        .unwrap()
}

/// The mask's value at query `i`, key `j`, from the fusion's own ops in float64.
fn keep_at(f: &Fusion, o: &Operand, i: i64, j: i64, sizes: &BTreeMap<String, i64>) -> f64 {
    let t = match *o {
        Operand::Scalar(v) => return v,
        Operand::Count(c) => {
            let n = f.count_size(c).eval(sizes).unwrap() as f64;
            return (n - f.counts[c].minus).max(0.0);
        }
        Operand::Tensor(t) => t,
    };
    let e = &f.exprs[f.tensors[t].definition.unwrap()];
    let at = |o: &Operand| keep_at(f, o, i, j, sizes);
    match (&e.op, &e.inputs[..]) {
        (Op::Iota { axis }, _) => [i, j][*axis] as f64,
        (Op::Set | Op::Cast(_), [a]) => at(a),
        (Op::Unary(op), [a]) => op.eval(at(a)),
        (Op::Binary(op), [a, b]) => op.eval(at(a), at(b)),
        (op, _) => panic!("{op:?} in a mask"),
    }
}

/// For every pair of a query tile and a key tile (tile sizes that divide the extents and that
/// do not), the list's condition holds wherever the mask keeps a pair of the two tiles; and,
/// for `exact` masks, only there.
fn check(keep: &str, exact: bool) {
    let f = masked(keep);
    let (sm, keep_t) = (tensor(&f, "sm"), tensor(&f, "keep"));
    let key_axis = f.logical(sm)[1];
    let mask = find(&f, sm, key_axis).unwrap_or_else(|| panic!("{keep}: not found"));
    // Nothing but the mask reads its condition: the kept tiles go without it.
    let exprs = mask.exprs.as_ref().expect("the mask's expressions");
    assert_eq!(exprs.select, f.tensors[sm].definition.unwrap());
    assert!(exprs.condition_tensors.contains(&keep_t));
    let (s, t) = (100, 77);
    let sizes = BTreeMap::from([("S".to_string(), s), ("T".to_string(), t)]);
    for (bq, bk) in [(16, 16), (32, 8), (8, 32), (13, 7), (1, 1)] {
        for q0 in (0..s).step_by(bq as usize) {
            let q1 = (q0 + bq).min(s) - 1;
            for k0 in (0..t).step_by(bk as usize) {
                let k1 = (k0 + bk).min(t) - 1;
                let bounds = [q0, q1, k0, k1];
                let eval = |v: &Val| {
                    v.eval_with(&|leaf| match leaf {
                        Val::Var(n) => TILE_BOUNDS.iter().position(|b| b == n).map(|p| bounds[p]),
                        Val::Size(n) => sizes.get(n).copied(),
                        _ => None,
                    })
                    .unwrap()
                };
                let (may, must) = (eval(&mask.may), eval(&mask.must));
                let kept =
                    |i: i64, j: i64| keep_at(&f, &Operand::Tensor(keep_t), i, j, &sizes) != 0.0;
                let any = (q0..=q1).any(|i| (k0..=k1).any(|j| kept(i, j)));
                let all = (q0..=q1).all(|i| (k0..=k1).all(|j| kept(i, j)));
                let tiles = format!("{keep}: queries {q0}..={q1}, keys {k0}..={k1}");
                if any {
                    assert_eq!(may, 1, "{tiles} keep a pair");
                } else if exact {
                    assert_eq!(may, 0, "{tiles} keep none");
                }
                if !all {
                    assert_eq!(must, 0, "{tiles} do not keep every pair");
                } else if exact {
                    assert_eq!(must, 1, "{tiles} keep every pair");
                }
            }
        }
    }
}

#[test]
fn tiles_with_a_kept_pair_are_listed() {
    // Monotone in each index: the bounds are exact.
    check("logical_or(j <= i, j < 20)", true);
    check(
        "logical_and(j <= i, bitwise_right_shift(i, 4) == bitwise_right_shift(j, 4))",
        true,
    );
    check("abs(i - j) < 10", true);
    check("j < T - 5", true);
    check("logical_not(j > i + 3)", true);
    check("max(i, j) < 50", true);
    check("min(i, j) * 2 >= 30", true);
    check("-j > -i", true);
    check("cast(i, i64) * 3 - cast(j, i64) * 2 != 0", false);
    // Negative values through the floor divisions.
    check("bitwise_right_shift(i - j, 3) == 0", false);
    check("remainder(j - i, 5) < 2", false);
    check("remainder(i, 8) <= remainder(j, 16)", false);
    check("logical_and(j >= 40, logical_or(i < 10, j - i > 30))", true);
}

#[test]
fn bands_documents_and_other_masks_are_not_taken() {
    let f = masked("j <= i");
    let sm = tensor(&f, "sm");
    assert!(
        find(&f, sm, f.logical(sm)[1]).is_none(),
        "a band is mask_bounds'"
    );
    // A float in the mask, a product of two indices, a remainder by a non-literal.
    for keep in [
        "cast(i, f32) * 0.5 < cast(j, f32)",
        "i * j < 100",
        "remainder(i, j + 1) == 0",
    ] {
        let f = masked(keep);
        let sm = tensor(&f, "sm");
        assert!(find(&f, sm, f.logical(sm)[1]).is_none(), "{keep}");
    }
}

#[test]
fn a_condition_read_elsewhere_keeps_every_tile_masked() {
    // `j` is also a score modification: the kept tiles still compute it, so no tile goes
    // without the mask's statements, and none is said to be kept whole.
    let f = masked("j < 40");
    let sm = tensor(&f, "sm");
    assert!(find(&f, sm, f.logical(sm)[1]).unwrap().exprs.is_some());
    let shared = crate::reference_fusion(
        "fusion f {
  input q: f32[S, 4]
  input k: f32[T, 4]
  input v: f32[T, 4]
  s = sum(broadcast(q, axis=1) * broadcast(k, axis=0), axis=2)
  j = iota(s, axis=1)
  sb = s + cast(j, f32)
  keep = j < 40
  sm = where(keep, sb, -1.0 / 0.0)
  m = max(sm, axis=1)
  e = exp(sm - broadcast(m, axis=1))
  l = sum(e, axis=1)
  p = e / broadcast(l, axis=1)
  o = sum(broadcast(p, axis=2) * broadcast(v, axis=0), axis=1)
  output o
}",
    )
    .unwrap();
    let sm = tensor(&shared, "sm");
    let mask = find(&shared, sm, shared.logical(sm)[1]).unwrap();
    assert!(mask.exprs.is_none());
    assert_eq!(mask.must, Val::Int(0));
}

#[test]
fn a_mask_whose_bounds_would_grow_without_end_is_left_unlisted() {
    // Each line reads the one before twice: the bounds would double at each, to 2^40 nodes.
    // The analysis stops at its cap, at once, and leaves the mask to the full loop.
    let mut lines = String::from("  x0 = j\n");
    for n in 1..=40 {
        lines.push_str(&format!("  x{n} = x{} + x{}\n", n - 1, n - 1));
    }
    let f = masked_after(&lines, "x40 < i");
    let sm = tensor(&f, "sm");
    let started = std::time::Instant::now();
    assert!(find(&f, sm, f.logical(sm)[1]).is_none());
    assert!(started.elapsed().as_secs() < 2);
    // Six levels stay under the cap and are listed.
    let f = masked_after(
        &lines
            .lines()
            .take(7)
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
        "x6 < i",
    );
    let sm = tensor(&f, "sm");
    assert!(find(&f, sm, f.logical(sm)[1]).is_some());
}
