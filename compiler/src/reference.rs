//! Reference evaluator: runs a fusion's math on the CPU in float64, ignoring the schedule.
//! Casts round to their target type, so a bf16 output is compared with a bf16-rounded reference.

use crate::fusion::{Fusion, IterKind, Op, Operand, TensorId};
use std::collections::BTreeMap;

/// Runs the fusion. `inputs` maps each input tensor (or scalar) name to its row-major values;
/// returns each output's row-major values.
pub fn evaluate(
    fusion: &Fusion,
    sizes: &BTreeMap<String, i64>,
    inputs: &BTreeMap<String, Vec<f64>>,
) -> Result<BTreeMap<String, Vec<f64>>, String> {
    let shape = |t: TensorId| -> Result<Vec<usize>, String> {
        fusion
            .logical(t)
            .iter()
            .map(|&id| {
                if fusion.ids[id].kind == IterKind::Broadcast {
                    return Ok(1);
                }
                let e = fusion.ids[id]
                    .root_extent
                    .clone()
                    .ok_or("axis without extent")?;
                let v = e.eval(sizes).map_err(|e| e.to_string())?;
                usize::try_from(v).map_err(|_| format!("size {e} = {v} is negative"))
            })
            .collect()
    };
    let mut values: Vec<Option<Vec<f64>>> = vec![None; fusion.tensors.len()];
    for &t in &fusion.inputs {
        let name = &fusion.tensors[t].name;
        let v = inputs
            .get(name)
            .ok_or_else(|| format!("no values for input `{name}`"))?;
        let n: usize = shape(t)?.iter().product();
        if v.len() != n {
            return Err(format!(
                "input `{name}` has {} values, expected {n}",
                v.len()
            ));
        }
        values[t] = Some(v.clone());
    }
    // A reduction of a binary op whose result feeds nothing else is evaluated in one pass,
    // without the intermediate: a matrix product's [M, N, K] products would not fit in memory.
    let use_index = fusion.use_index();
    let fused: std::collections::HashSet<TensorId> = (0..fusion.tensors.len())
        .filter(|&t| {
            let binary = fusion.tensors[t]
                .definition
                .is_some_and(|d| matches!(fusion.exprs[d].op, Op::Binary(_)));
            let uses = &use_index[t];
            binary
                && !fusion.tensors[t].is_output
                && uses.len() == 1
                && matches!(fusion.exprs[uses[0]].op, Op::Reduce { .. })
        })
        .collect();
    let fused_into_reduction = |t: TensorId| fused.contains(&t);
    for e in fusion.topo_exprs() {
        let expr = &fusion.exprs[e];
        if fused_into_reduction(expr.output) {
            continue;
        }
        let out_shape = shape(expr.output)?;
        let n: usize = out_shape.iter().product();
        let operand = |o: &Operand| -> Result<(Vec<f64>, Vec<usize>), String> {
            match o {
                Operand::Scalar(v) => Ok((vec![*v], vec![])),
                Operand::Tensor(t) => Ok((
                    values[*t].clone().ok_or_else(|| {
                        format!("`{}` used before it is computed", fusion.tensors[*t].name)
                    })?,
                    shape(*t)?,
                )),
            }
        };
        // Element strides of an operand seen through the output's shape: 0 along its broadcast
        // (extent 1) axes, and everywhere for scalars, so one running offset per operand walks
        // it in step with the output (no per-element allocation: references run at sizes of
        // 2^28 elements).
        let strides_in = |s: &[usize], rank: usize| -> Vec<usize> {
            if s.is_empty() {
                return vec![0; rank];
            }
            let mut st = vec![0; s.len()];
            let mut acc = 1;
            for k in (0..s.len()).rev() {
                st[k] = if s[k] == 1 { 0 } else { acc };
                acc *= s[k];
            }
            st
        };
        let out_dtype = fusion.tensors[expr.output].dtype;
        let result: Vec<f64> = match &expr.op {
            Op::Set | Op::Broadcast { .. } => operand(&expr.inputs[0])?.0,
            Op::Cast(d) => operand(&expr.inputs[0])?
                .0
                .iter()
                .map(|&x| d.round(x))
                .collect(),
            Op::Unary(u) => operand(&expr.inputs[0])?
                .0
                .iter()
                .map(|&x| u.eval(x))
                .collect(),
            Op::Binary(b) => {
                let (va, sa) = operand(&expr.inputs[0])?;
                let (vb, sb) = operand(&expr.inputs[1])?;
                let rank = out_shape.len();
                let (ta, tb) = (strides_in(&sa, rank), strides_in(&sb, rank));
                let mut idx = vec![0usize; rank];
                let (mut oa, mut ob) = (0usize, 0usize);
                let mut out = Vec::with_capacity(n);
                for _ in 0..n {
                    let r = b.eval(va[oa], vb[ob]);
                    out.push(if out_dtype == crate::DType::I32 {
                        out_dtype.round(r)
                    } else {
                        r
                    });
                    // Advance the multi-index like an odometer, keeping both offsets in step.
                    for k in (0..rank).rev() {
                        idx[k] += 1;
                        oa += ta[k];
                        ob += tb[k];
                        if idx[k] < out_shape[k] {
                            break;
                        }
                        oa -= ta[k] * out_shape[k];
                        ob -= tb[k] * out_shape[k];
                        idx[k] = 0;
                    }
                }
                out
            }
            Op::Reduce { op, axes } => {
                let input = match expr.inputs[0] {
                    Operand::Tensor(t) if fused_into_reduction(t) => Some(t),
                    _ => None,
                };
                if let Some(product) = input {
                    let def = &fusion.exprs[fusion.tensors[product].definition.expect("binary")];
                    let Op::Binary(b) = def.op else {
                        unreachable!("fused_into_reduction checks for a binary op")
                    };
                    let (va, sa) = operand(&def.inputs[0])?;
                    let (vb, sb) = operand(&def.inputs[1])?;
                    let ps = shape(product)?;
                    let reduced: Vec<bool> = (0..ps.len()).map(|k| axes.contains(&k)).collect();
                    let mut out = vec![op.identity(); n];
                    reduce_binary(
                        &ps,
                        &reduced,
                        (&va, &strides_in(&sa, ps.len())),
                        (&vb, &strides_in(&sb, ps.len())),
                        b,
                        op.combine(),
                        fusion.tensors[product].dtype == crate::DType::I32,
                        &mut out,
                    );
                    values[expr.output] = Some(out);
                    continue;
                }
                let (v, s) = operand(&expr.inputs[0])?;
                let mut out = vec![op.identity(); n];
                let reduced: Vec<bool> = (0..s.len()).map(|k| axes.contains(&k)).collect();
                let ostride = kept_strides(&s, &reduced);
                let combine = op.combine();
                let mut idx = vec![0usize; s.len()];
                let mut o = 0usize;
                for &x in &v {
                    out[o] = combine.eval(out[o], x);
                    for k in (0..s.len()).rev() {
                        idx[k] += 1;
                        o += ostride[k];
                        if idx[k] < s[k] {
                            break;
                        }
                        o -= ostride[k] * s[k];
                        idx[k] = 0;
                    }
                }
                out
            }
            Op::Mma => return Err("matrix products are not evaluated yet".into()),
        };
        values[expr.output] = Some(result);
    }
    let mut out = BTreeMap::new();
    for &t in &fusion.outputs {
        out.insert(
            fusion.tensors[t].name.clone(),
            values[t].clone().ok_or("output not computed")?,
        );
    }
    Ok(out)
}

/// Output offset strides of a reduction's input axes: row-major over the kept axes, 0 on the
/// `reduced` ones.
fn kept_strides(shape: &[usize], reduced: &[bool]) -> Vec<usize> {
    let mut stride = vec![0usize; shape.len()];
    let mut acc = 1;
    for k in (0..shape.len()).rev() {
        if !reduced[k] {
            stride[k] = acc;
            acc *= shape[k];
        }
    }
    stride
}

/// `out[kept index] = combine(out, b(a[i], b[i]))` over every index `i` of `shape`, where the
/// `reduced` axes do not appear in `out`; `a` and `b` are values with their strides in `shape`
/// (0 along broadcast axes). The innermost axis is a plain loop; a summed product over a
/// contiguous innermost axis is a dot product with four partial sums.
#[allow(clippy::too_many_arguments)]
fn reduce_binary(
    shape: &[usize],
    reduced: &[bool],
    (va, ta): (&[f64], &[usize]),
    (vb, tb): (&[f64], &[usize]),
    b: crate::fusion::BinaryOp,
    combine: crate::fusion::BinaryOp,
    round_i32: bool,
    out: &mut [f64],
) {
    use crate::fusion::BinaryOp;
    let eval = |x: f64, y: f64| {
        let r = b.eval(x, y);
        if round_i32 {
            crate::DType::I32.round(r)
        } else {
            r
        }
    };
    let rank = shape.len();
    if rank == 0 {
        out[0] = combine.eval(out[0], eval(va[0], vb[0]));
        return;
    }
    if shape.contains(&0) {
        return;
    }
    let ostride = kept_strides(shape, reduced);
    let last = rank - 1;
    let (len, sa, sb, so) = (shape[last], ta[last], tb[last], ostride[last]);
    let dot = b == BinaryOp::Mul && combine == BinaryOp::Add && !round_i32;
    let outer: usize = shape[..last].iter().product();
    let mut idx = vec![0usize; last];
    let (mut oa, mut ob, mut o) = (0usize, 0usize, 0usize);
    for _ in 0..outer {
        if reduced[last] && dot && sa == 1 && sb == 1 {
            let (x, y) = (&va[oa..oa + len], &vb[ob..ob + len]);
            let mut partial = [0.0f64; 4];
            let (xc, yc) = (x.chunks_exact(4), y.chunks_exact(4));
            let (xr, yr) = (xc.remainder(), yc.remainder());
            for (p, q) in xc.zip(yc) {
                for l in 0..4 {
                    partial[l] += p[l] * q[l];
                }
            }
            let tail: f64 = xr.iter().zip(yr).map(|(p, q)| p * q).sum();
            out[o] += (partial[0] + partial[1]) + (partial[2] + partial[3]) + tail;
        } else if !reduced[last] && dot && so == 1 && (sa == 0 || sb == 0) {
            // One operand is broadcast along the innermost axis: out += scalar * row (axpy).
            let (scalar, row, step) = if sa == 0 {
                (va[oa], &vb[ob..], sb)
            } else {
                (vb[ob], &va[oa..], sa)
            };
            for (j, acc) in out[o..o + len].iter_mut().enumerate() {
                *acc += scalar * row[j * step];
            }
        } else {
            for j in 0..len {
                let oj = o + j * so;
                out[oj] = combine.eval(out[oj], eval(va[oa + j * sa], vb[ob + j * sb]));
            }
        }
        // Advance the outer multi-index like an odometer.
        for k in (0..last).rev() {
            idx[k] += 1;
            oa += ta[k];
            ob += tb[k];
            o += ostride[k];
            if idx[k] < shape[k] {
                break;
            }
            oa -= ta[k] * shape[k];
            ob -= tb[k] * shape[k];
            o -= ostride[k] * shape[k];
            idx[k] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        src: &str,
        sizes: &[(&str, i64)],
        inputs: &[(&str, Vec<f64>)],
    ) -> BTreeMap<String, Vec<f64>> {
        let program = crate::frontend::parse(src).unwrap();
        let fusion = crate::fusion::build(&program.fusion).unwrap();
        let sizes = sizes.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let inputs = inputs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        evaluate(&fusion, &sizes, &inputs).unwrap()
    }

    #[test]
    fn broadcasts_follow_the_output_index() {
        let out = run(
            "fusion f {\n  input x: f32[M, N]\n  input b: f32[N]\n  input c: f32[M]\n  y = x + broadcast(b, axis=0) * broadcast(c, axis=1)\n  output y\n}",
            &[("M", 2), ("N", 3)],
            &[("x", vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]), ("b", vec![10.0, 20.0, 30.0]), ("c", vec![1.0, 2.0])],
        );
        assert_eq!(out["y"], vec![10.0, 21.0, 32.0, 23.0, 44.0, 65.0]);
    }

    #[test]
    fn softmax_rows_and_column_reductions() {
        let ln2 = 2f64.ln();
        let out = run(
            "fusion f {\n  input x: f32[M, N]\n  e = exp(x - broadcast(max(x, axis=1), axis=1))\n  y = e / broadcast(sum(e, axis=1), axis=1)\n  output y\n}",
            &[("M", 2), ("N", 2)],
            &[("x", vec![0.0, ln2, 5.0, 5.0])],
        );
        let want = [1.0 / 3.0, 2.0 / 3.0, 0.5, 0.5];
        for (a, b) in out["y"].iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{:?}", out["y"]);
        }
        let out = run(
            "fusion f {\n  input x: f32[M, N]\n  s = sum(x, axis=0)\n  output s\n}",
            &[("M", 2), ("N", 3)],
            &[("x", vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])],
        );
        assert_eq!(out["s"], vec![5.0, 7.0, 9.0]);
    }

    /// Small deterministic values without a pattern a wrong index could hit by luck.
    fn values(n: usize, seed: u64) -> Vec<f64> {
        (0..n)
            .map(|i| (((i as u64 + 1) * 2654435761 + seed * 97) % 1000) as f64 / 250.0 - 2.0)
            .collect()
    }

    #[test]
    fn matrix_products_in_every_layout_match_a_triple_loop() {
        let (m, n, k) = (3usize, 5usize, 11usize);
        let a = values(m * k, 1);
        let b = values(k * n, 2);
        // c[i][j] = sum_l a[i][l] * b[l][j]; the operands' element (i, l) / (l, j) stored per layout.
        let expect = |a_at: &dyn Fn(usize, usize) -> f64, b_at: &dyn Fn(usize, usize) -> f64| {
            let mut c = vec![0.0; m * n];
            for i in 0..m {
                for j in 0..n {
                    c[i * n + j] = (0..k).map(|l| a_at(i, l) * b_at(l, j)).sum();
                }
            }
            c
        };
        let sizes = [("M", m as i64), ("N", n as i64), ("K", k as i64)];
        let close = |got: &[f64], want: &[f64]| {
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
            }
        };
        // a[M, K], b[N, K]: the summed axis is innermost (dot products).
        let out = run(
            "fusion f {\n  input a: f32[M, K]\n  input b: f32[N, K]\n  c = sum(broadcast(a, axis=1) * broadcast(b, axis=0), axis=2)\n  output c\n}",
            &sizes,
            &[("a", a.clone()), ("b", b.clone())],
        );
        close(
            &out["c"],
            &expect(&|i, l| a[i * k + l], &|l, j| b[j * k + l]),
        );
        // a[M, K], b[K, N]: the summed axis is in the middle.
        let out = run(
            "fusion f {\n  input a: f32[M, K]\n  input b: f32[K, N]\n  c = sum(broadcast(a, axis=2) * broadcast(b, axis=0), axis=1)\n  output c\n}",
            &sizes,
            &[("a", a.clone()), ("b", b.clone())],
        );
        close(
            &out["c"],
            &expect(&|i, l| a[i * k + l], &|l, j| b[l * n + j]),
        );
        // a[K, M], b[K, N]: the summed axis is outermost.
        let out = run(
            "fusion f {\n  input a: f32[K, M]\n  input b: f32[K, N]\n  c = sum(broadcast(a, axis=2) * broadcast(b, axis=1), axis=0)\n  output c\n}",
            &sizes,
            &[("a", a.clone()), ("b", b.clone())],
        );
        close(
            &out["c"],
            &expect(&|i, l| a[l * m + i], &|l, j| b[l * n + j]),
        );
    }

    #[test]
    fn other_reductions_of_binary_ops() {
        // max over rows of x - bias: an inner axis that is kept, another combine, a subtraction.
        let x = values(4 * 6, 3);
        let bias = values(6, 4);
        let out = run(
            "fusion f {\n  input x: f32[M, N]\n  input bias: f32[N]\n  c = max(x - broadcast(bias, axis=0), axis=0)\n  output c\n}",
            &[("M", 4), ("N", 6)],
            &[("x", x.clone()), ("bias", bias.clone())],
        );
        let want: Vec<f64> = (0..6)
            .map(|j| {
                (0..4)
                    .map(|i| x[i * 6 + j] - bias[j])
                    .fold(f64::NEG_INFINITY, f64::max)
            })
            .collect();
        assert_eq!(out["c"], want);
        // A product that is also an output is computed, and still summed.
        let out = run(
            "fusion f {\n  input x: f32[M, N]\n  p = x * x\n  s = sum(p, axis=1)\n  output p\n  output s\n}",
            &[("M", 4), ("N", 6)],
            &[("x", x.clone())],
        );
        assert_eq!(out["p"], x.iter().map(|v| v * v).collect::<Vec<_>>());
        for i in 0..4 {
            let want: f64 = (0..6).map(|j| x[i * 6 + j] * x[i * 6 + j]).sum();
            assert!((out["s"][i] - want).abs() < 1e-12);
        }
    }
}
