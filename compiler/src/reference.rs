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
    for e in fusion.topo_exprs() {
        let expr = &fusion.exprs[e];
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
                let (v, s) = operand(&expr.inputs[0])?;
                let mut out = vec![op.identity(); n];
                // Output offset of each input element: strides of the kept axes, 0 on reduced ones.
                let mut ostride = vec![0usize; s.len()];
                let mut acc = 1;
                for k in (0..s.len()).rev() {
                    if !axes.contains(&k) {
                        ostride[k] = acc;
                        acc *= s[k];
                    }
                }
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
}
