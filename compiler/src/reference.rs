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
        // Value of an operand at a multi-index of the output (broadcast axes and scalars repeat).
        let at = |v: &[f64], s: &[usize], idx: &[usize]| -> f64 {
            if s.is_empty() {
                return v[0];
            }
            let mut lin = 0;
            for (k, &ext) in s.iter().enumerate() {
                lin = lin * ext + if ext == 1 { 0 } else { idx[k] };
            }
            v[lin]
        };
        let unravel = |mut lin: usize, s: &[usize]| -> Vec<usize> {
            let mut idx = vec![0; s.len()];
            for k in (0..s.len()).rev() {
                idx[k] = lin % s[k].max(1);
                lin /= s[k].max(1);
            }
            idx
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
                (0..n)
                    .map(|lin| {
                        let idx = unravel(lin, &out_shape);
                        let r = b.eval(at(&va, &sa, &idx), at(&vb, &sb, &idx));
                        if out_dtype == crate::DType::I32 {
                            out_dtype.round(r)
                        } else {
                            r
                        }
                    })
                    .collect()
            }
            Op::Reduce { op, axes } => {
                let (v, s) = operand(&expr.inputs[0])?;
                let mut out = vec![op.identity(); n];
                let kept: Vec<usize> = (0..s.len()).filter(|k| !axes.contains(k)).collect();
                for (lin, &x) in v.iter().enumerate() {
                    let idx = unravel(lin, &s);
                    let mut o = 0;
                    for &k in &kept {
                        o = o * s[k] + idx[k];
                    }
                    out[o] = op.combine().eval(out[o], x);
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
