//! Matrix products in a fusion: a `sum` over a product of two broadcast factors seen as the
//! contraction it is, without the product tensor.
//!
//! Takes the unscheduled [`Fusion`]. A sum is a [`Contraction`] when an axis both factors have
//! is summed and each factor has a kept axis the other lacks (`x @ w`, batched or not); every
//! other sum of a product (a sum of squares, a dot along an axis of same-shaped tensors, a
//! matrix-vector product) is not one. Guarantees each factor is the tensor under its copies,
//! casts and one broadcast (those absorbed: read by this product only), with the product axes
//! it has, and [`Contraction::matmul_layout`] tells whether the contraction is one matrix
//! multiplication `a @ b` and in which layout (batch axes, which factor carries `M`, which
//! operand enters transposed).
//!
//! Read by the torch back end (a contraction is written `a @ b` or `torch.einsum`, its
//! absorbed tensors not at all) and by [`super::attention`] (the products `q k^T` and `p v`).

use super::{BinaryOp, ExprId, Fusion, IterKind, Op, Operand, ReduceOp, TensorId};
use crate::dtype::DType;
use crate::id::IdVec;

/// One operand of a contraction: the tensor under its broadcast, the casts applied to it (in
/// order), and the axes of the product it has.
#[derive(Clone, Debug)]
pub struct Factor {
    pub base: TensorId,
    pub casts: Vec<DType>,
    /// Broadcast positions still to squeeze (when no broadcast op could be peeled off).
    pub squeeze: Vec<usize>,
    /// Product axes this operand has, in order.
    pub present: Vec<usize>,
}

/// A matrix product `sum(x * y, axis=...)` (see the module doc), computed without the product
/// tensor.
#[derive(Clone, Debug)]
pub struct Contraction {
    /// Rank of the product.
    pub rank: usize,
    /// Reduced product axes.
    pub reduced: Vec<usize>,
    pub factors: [Factor; 2],
    /// The compute type of the product (and of the sum).
    pub compute: DType,
    /// Both factors are this half type widened to f32: a half GEMM with f32 accumulation.
    pub half: Option<DType>,
    /// The dtype of the tensor the contraction defines (the sum, or the half cast of it).
    pub out: DType,
}

impl Contraction {
    /// The contraction as one matrix multiplication `a @ b`, when its layout is one `@` takes
    /// (each operand's last two axes, either transposed): one reduced axis, the batch axes
    /// (kept, in both factors) first in the result and in both factors, then one free axis of
    /// each factor.
    pub fn matmul_layout(&self) -> Option<MatMulLayout> {
        let (r, kept, batch) = self.kept_axes()?;
        let [pm, pn] = kept[batch..] else {
            return None;
        };
        let a = usize::from(!self.factors[0].present.contains(&pm));
        // Each operand: the batch axes (before the reduced one), its free axis and the
        // reduced one, nothing else.
        let fits = |fa: &Factor, free: usize| {
            fa.present.len() == batch + 2
                && fa.present.contains(&free)
                && fa.present.contains(&r)
                && fa.present[..batch] == kept[..batch]
        };
        if !fits(&self.factors[a], pm) || !fits(&self.factors[1 - a], pn) {
            return None;
        }
        Some(MatMulLayout {
            batch,
            a,
            a_transposed: r < pm,
            b_transposed: pn < r,
        })
    }
}

impl Contraction {
    /// The one reduced axis, the kept axes in order, and how many of them lead in both
    /// factors (the batch axes); `None` with more than one reduced axis.
    fn kept_axes(&self) -> Option<(usize, Vec<usize>, usize)> {
        let [fx, fy] = &self.factors;
        let [r] = self.reduced[..] else {
            return None;
        };
        let kept: Vec<usize> = (0..self.rank).filter(|&a| a != r).collect();
        let both = |a: &usize| fx.present.contains(a) && fy.present.contains(a);
        let batch = kept.iter().take_while(|a| both(a)).count();
        Some((r, kept, batch))
    }

    /// [`Self::matmul_layout`], where the first factor may also have *group* axes: kept axes
    /// right after the batch axes that only it has (grouped-query attention's query heads
    /// sharing one K/V head: `q [B, G, S, D]` against `k [B, T, D]`, broadcast over `G`). The
    /// layout's `batch` counts the shared batch axes; `.1` the group axes (0 where
    /// `matmul_layout` takes the contraction as it is).
    pub fn matmul_layout_grouped(&self) -> Option<(MatMulLayout, usize)> {
        if let Some(layout) = self.matmul_layout() {
            return Some((layout, 0));
        }
        let [fx, fy] = &self.factors;
        let (r, kept, batch) = self.kept_axes()?;
        let groups = kept.len().checked_sub(batch + 2).filter(|&g| g > 0)?;
        let lead = batch + groups;
        let [pm, pn] = kept[lead..] else {
            return None;
        };
        let first_only = kept[batch..lead]
            .iter()
            .all(|a| fx.present.contains(a) && !fy.present.contains(a));
        let fits = |fa: &Factor, lead: usize, free: usize| {
            fa.present.len() == lead + 2
                && fa.present.contains(&free)
                && fa.present.contains(&r)
                && fa.present[..lead] == kept[..lead]
        };
        if !first_only || !fits(fx, lead, pm) || !fits(fy, batch, pn) {
            return None;
        }
        Some((
            MatMulLayout {
                batch,
                a: 0,
                a_transposed: r < pm,
                b_transposed: pn < r,
            },
            groups,
        ))
    }
}

/// A contraction as `a @ b` ([`Contraction::matmul_layout`]): `a [batch.., M, K]`,
/// `b [batch.., K, N]`, each as stored or transposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatMulLayout {
    /// The leading batch axes, kept and in both factors.
    pub batch: usize,
    /// The factor (0 or 1) that is `a`: the one carrying `M`, the result's first free axis;
    /// the other factor is `b`.
    pub a: usize,
    /// `a` has its axes as `[.., K, M]`: it enters the product transposed.
    pub a_transposed: bool,
    /// `b` has its axes as `[.., N, K]`: it enters the product transposed.
    pub b_transposed: bool,
}

/// Every contraction among the expressions defining `live` tensors, by the tensor it defines
/// (the sum, or the half cast of it), and the tensors they absorb.
pub fn find_all(
    f: &Fusion,
    live: &IdVec<TensorId, bool>,
) -> (IdVec<TensorId, Option<Contraction>>, IdVec<TensorId, bool>) {
    let n = f.tensors.len();
    let mut contractions: IdVec<TensorId, _> = vec![None; n].into();
    let mut absorbed: IdVec<TensorId, bool> = vec![false; n].into();
    for (e, expr) in f.expr_ids().zip(&f.exprs) {
        if !live[expr.output] {
            continue;
        }
        if let Some((root, c, inner)) = contraction(f, e) {
            for t in inner {
                absorbed[t] = true;
            }
            contractions[root] = Some(c);
        }
    }
    (contractions, absorbed)
}

/// The matrix product reduction expr `e` computes, if it is one: the tensor it defines, the
/// contraction, and the tensors it absorbs (not emitted).
pub fn contraction(f: &Fusion, e: ExprId) -> Option<(TensorId, Contraction, Vec<TensorId>)> {
    let expr = &f.exprs[e];
    let Op::Reduce {
        op: ReduceOp::Sum,
        axes,
    } = &expr.op
    else {
        return None;
    };
    let sum = expr.output;
    let [Operand::Tensor(product)] = expr.inputs[..] else {
        return None;
    };
    let tensor = &f.tensors[product];
    let def = &f.exprs[tensor.definition?];
    if tensor.is_output || f.uses(product).len() != 1 || def.op != Op::Binary(BinaryOp::Mul) {
        return None;
    }
    let [Operand::Tensor(x), Operand::Tensor(y)] = def.inputs[..] else {
        return None;
    };
    let compute = tensor.dtype;
    let rank = f.rank(product);
    // Beyond 26 axes the torch back end's einsum runs out of letters.
    if !compute.is_float() || rank > 26 {
        return None;
    }
    let mut absorbed = vec![product];
    let fx = peel(f, x, &mut absorbed)?;
    let fy = peel(f, y, &mut absorbed)?;
    // Every kept axis must come from a factor: einsum cannot make a broadcast axis.
    if (0..rank).any(|a| !axes.contains(&a) && !fx.present.contains(&a) && !fy.present.contains(&a))
    {
        return None;
    }
    // Only a matrix product is written as one: an axis both factors have is summed, and each
    // factor has a kept axis the other lacks (x @ w, batched or not). Anything else (a sum of
    // squares, a dot along an axis of same-shaped tensors, a matrix-vector product) is what a
    // user writes as a product then a sum, which torch.compile fuses into one reduction; as a
    // GEMM it would be a batched matmul of 1-wide matrices.
    let has = |fa: &Factor, a: usize| fa.present.contains(&a);
    let shared = axes.iter().any(|&a| has(&fx, a) && has(&fy, a));
    let free = |fa: &Factor, other: &Factor| {
        (0..rank).any(|a| !axes.contains(&a) && has(fa, a) && !has(other, a))
    };
    if !shared || !free(&fx, &fy) || !free(&fy, &fx) {
        return None;
    }
    let half_of = |fa: &Factor| -> Option<DType> {
        let base = f.tensors[fa.base].dtype;
        (matches!(base, DType::BF16 | DType::F16)
            && fa.squeeze.is_empty()
            && fa.casts.iter().all(|&c| c == DType::F32))
        .then_some(base)
    };
    let half = match (half_of(&fx), half_of(&fy)) {
        (Some(a), Some(b)) if a == b && compute == DType::F32 => Some(a),
        _ => None,
    };
    // A half GEMM whose f32 sum is only rounded to the same half type: one rounding, in cuBLAS.
    let mut root = sum;
    let mut out = compute;
    if let Some(h) = half {
        let uses = f.uses(sum);
        if let [u] = uses[..] {
            if f.exprs[u].op == Op::Cast(h) && !f.tensors[sum].is_output {
                absorbed.push(sum);
                root = f.exprs[u].output;
                out = h;
            }
        }
    }
    let c = Contraction {
        rank,
        reduced: axes.clone(),
        factors: [fx, fy],
        compute,
        half,
        out,
    };
    Some((root, c, absorbed))
}

/// A factor of a product: below copies, casts and its one broadcast to the tensor it
/// broadcasts, through tensors used only on this path (those are absorbed).
fn peel(f: &Fusion, t: TensorId, absorbed: &mut Vec<TensorId>) -> Option<Factor> {
    let logical = f.logical(t);
    let broadcast: Vec<usize> = (0..logical.len())
        .filter(|&k| f.ids[logical[k]].kind == IterKind::Broadcast)
        .collect();
    let present: Vec<usize> = (0..logical.len())
        .filter(|k| !broadcast.contains(k))
        .collect();
    if present.is_empty() {
        return None;
    }
    let mut cur = t;
    let mut casts = Vec::new();
    let mut path = Vec::new();
    loop {
        let tensor = &f.tensors[cur];
        if tensor.is_input || tensor.is_output || f.uses(cur).len() != 1 {
            break;
        }
        let def = &f.exprs[tensor.definition?];
        let [Operand::Tensor(from)] = def.inputs[..] else {
            break;
        };
        match &def.op {
            Op::Set => {}
            Op::Cast(d) => casts.push(*d),
            Op::Broadcast { axes } if *axes == broadcast => {
                path.push(cur);
                absorbed.extend(path);
                casts.reverse();
                return Some(Factor {
                    base: from,
                    casts,
                    squeeze: Vec::new(),
                    present,
                });
            }
            _ => break,
        }
        path.push(cur);
        cur = from;
    }
    // No broadcast to peel off: squeeze the factor as it is.
    Some(Factor {
        base: t,
        casts: Vec::new(),
        squeeze: broadcast,
        present,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout of the one contraction in a fusion of inputs `decls` computing `sum`.
    fn layout(decls: &str, sum: &str) -> Option<MatMulLayout> {
        let src = format!("fusion g {{\n{decls}  c = {sum}\n  output c\n}}\n");
        let program = crate::frontend::parse(&src).unwrap();
        let f = crate::fusion::build(&program.fusion).unwrap();
        let (contractions, _) = find_all(&f, &f.live());
        let mut found = contractions.iter().flatten();
        let c = found.next().expect("a contraction");
        assert!(found.next().is_none());
        c.matmul_layout()
    }

    #[test]
    fn the_layout_names_the_factor_carrying_m_and_the_transposed_operands() {
        let ab = "  input a: f32[M, K]\n  input b: f32[K, N]\n";
        let plain = |a| MatMulLayout {
            batch: 0,
            a,
            a_transposed: false,
            b_transposed: false,
        };
        // a @ b, written either way round.
        assert_eq!(
            layout(
                ab,
                "sum(broadcast(a, axis=2) * broadcast(b, axis=0), axis=1)"
            ),
            Some(plain(0))
        );
        assert_eq!(
            layout(
                ab,
                "sum(broadcast(b, axis=0) * broadcast(a, axis=2), axis=1)"
            ),
            Some(plain(1))
        );
        // q @ k^T: `k [T, D]` enters transposed.
        let qk = "  input q: f32[S, D]\n  input k: f32[T, D]\n";
        assert_eq!(
            layout(
                qk,
                "sum(broadcast(q, axis=1) * broadcast(k, axis=0), axis=2)"
            ),
            Some(MatMulLayout {
                b_transposed: true,
                ..plain(0)
            })
        );
        // a^T @ b, batched: `a [B, K, M]`, `b [B, K, N]`.
        let t = "  input a: f32[B, K, M]\n  input b: f32[B, K, N]\n";
        assert_eq!(
            layout(
                t,
                "sum(broadcast(a, axis=3) * broadcast(b, axis=2), axis=1)"
            ),
            Some(MatMulLayout {
                batch: 1,
                a_transposed: true,
                ..plain(0)
            })
        );
        // Two free axes in one factor: a contraction, but no `@`.
        let wide = "  input a: f32[M, P, K]\n  input b: f32[K, N]\n";
        assert_eq!(
            layout(
                wide,
                "sum(broadcast(a, axis=3) * broadcast(b, axis=[0, 1]), axis=2)"
            ),
            None
        );
    }
}
