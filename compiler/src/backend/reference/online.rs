//! The online form of a softmax and the product over its axis, in float64: what the
//! `online_softmax` rewrite computes ([`crate::fusion::online_softmax`]), evaluated directly so
//! tests can hold it equal to the plain form [`super::evaluate`] computes.
//!
//! Takes the fusion, the pattern the rule accepted, a tile of `T` and the inputs; evaluates the
//! scores and the values with the plain reference, then, for every element of the result, walks
//! `T` in tiles with a running maximum `m`, sum `l` and accumulator `acc`: per tile
//! `m' = max(m, max s)`, `a = exp(m - m')`, `l' = a l + sum exp(s - m')`,
//! `acc' = a acc + sum exp(s - m') v`; the result is `acc / l`. While `m'` is `-inf` (every score
//! so far masked) it subtracts 0 instead, so `-inf - -inf` never makes a NaN that later tiles
//! would carry. The pattern's casts are not applied (the plain form's are: compare f32 fusions).

use crate::fusion::online_softmax::{Exponential, OnlineSoftmax};
use crate::fusion::{Fusion, IterId, IterKind, TensorId};
use std::collections::BTreeMap;

/// The values of `pattern.result` (row-major over its logical axes) computed online over tiles
/// of `tile` elements of the softmax's axis.
pub fn evaluate(
    fusion: &Fusion,
    pattern: &OnlineSoftmax,
    tile: usize,
    sizes: &BTreeMap<String, i64>,
    inputs: &BTreeMap<String, Vec<f64>>,
) -> Result<Vec<f64>, String> {
    if tile == 0 {
        return Err("the tile of the softmax's axis must hold at least one element".into());
    }
    let mut operands = fusion.clone();
    for t in &mut operands.tensors {
        t.is_output = false;
    }
    operands.outputs = vec![pattern.scores, pattern.values];
    for t in [pattern.scores, pattern.values] {
        operands.tensors[t].is_output = true;
    }
    let mut values = super::evaluate(&operands, sizes, inputs)?;
    let name = |t: TensorId| fusion.tensors[t].name.clone();
    let scores = values.remove(&name(pattern.scores)).ok_or("no scores")?;
    let vals = values.remove(&name(pattern.values)).ok_or("no values")?;

    let extent = |class: IterId| -> Result<usize, String> {
        let e = fusion.class_extent(class);
        let v = e.eval(sizes).map_err(|e| e.to_string())?;
        usize::try_from(v).map_err(|_| format!("size {e} = {v} is negative"))
    };
    // The result's axes by class; the scores and the values are indexed from them and T.
    let result_classes: Vec<IterId> = fusion
        .logical(pattern.result)
        .iter()
        .map(|&a| fusion.class_of(a))
        .collect();
    let result_extents = result_classes
        .iter()
        .map(|&c| extent(c))
        .collect::<Result<Vec<_>, _>>()?;
    let t_extent = extent(pattern.axis)?;
    // For a tensor: per logical axis, where its index comes from (a result axis, T, or 0 for a
    // broadcast axis) and its row-major stride.
    let layout = |t: TensorId| -> Result<Vec<(Source, usize)>, String> {
        let axes = fusion.logical(t);
        let mut out = Vec::with_capacity(axes.len());
        let mut stride = 1;
        for &a in axes.iter().rev() {
            let class = fusion.class_of(a);
            let (source, n) = if fusion.ids[a].kind == IterKind::Broadcast {
                (Source::Zero, 1)
            } else if class == pattern.axis {
                (Source::T, t_extent)
            } else {
                let at = result_classes
                    .iter()
                    .position(|&c| c == class)
                    .ok_or_else(|| {
                        format!(
                            "axis of `{}` is neither the softmax's nor one of the result's",
                            fusion.tensors[t].name
                        )
                    })?;
                (Source::Result(at), result_extents[at])
            };
            out.push((source, stride));
            stride *= n;
        }
        Ok(out)
    };
    let (s_layout, v_layout) = (layout(pattern.scores)?, layout(pattern.values)?);
    let offset = |layout: &[(Source, usize)], index: &[usize], t: usize| -> usize {
        layout
            .iter()
            .map(|&(source, stride)| match source {
                Source::Zero => 0,
                Source::T => t * stride,
                Source::Result(at) => index[at] * stride,
            })
            .sum()
    };
    let exp = |x: f64| match pattern.exponential {
        Exponential::Exp => x.exp(),
        Exponential::Exp2 => x.exp2(),
    };
    let n: usize = result_extents.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut index = vec![0; result_extents.len()];
    for _ in 0..n {
        let (mut m, mut l, mut acc) = (f64::NEG_INFINITY, 0.0, 0.0);
        for start in (0..t_extent).step_by(tile) {
            let tile_ts = start..(start + tile).min(t_extent);
            let s_at = |t: usize| scores[offset(&s_layout, &index, t)];
            let m_new = tile_ts
                .clone()
                .map(s_at)
                .fold(m, crate::fusion::ops::maximum);
            // The guard: subtract 0 while every score so far is -inf.
            let m_used = if m_new == f64::NEG_INFINITY {
                0.0
            } else {
                m_new
            };
            let rescale = exp(m - m_used);
            l *= rescale;
            acc *= rescale;
            for t in tile_ts {
                let w = exp(s_at(t) - m_used);
                l += w;
                acc += w * vals[offset(&v_layout, &index, t)];
            }
            m = m_new;
        }
        out.push(acc / l);
        // The next index, row-major.
        for (i, &e) in index.iter_mut().zip(&result_extents).rev() {
            *i += 1;
            if *i < e {
                break;
            }
            *i = 0;
        }
    }
    Ok(out)
}

/// Where an index of an operand comes from.
#[derive(Clone, Copy)]
enum Source {
    Zero,
    T,
    Result(usize),
}
