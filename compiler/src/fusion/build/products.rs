//! Matrix products as ops: `matmul(a, b)` and `linear(x, w, bias)`.
//!
//! Takes the call's tensor operands; checks ranks, floating-point dtypes and the extents the
//! product joins (the inner `K`, the batch axes, the bias's `N`) with errors at the operand;
//! emits the sum of broadcast products a user writes for a tensor-core product (and the
//! schedules lower, `fusion::matmul` recognises for the runner's cuBLAS comparison, and the torch
//! twin writes as `a @ b`): `matmul` as `sum(broadcast(a, axis=r) * broadcast(b, axis=r-2),
//! axis=r-1)` (`examples/basics/matmul.hf`), `linear` as `sum(broadcast(x, axis=r-1) *
//! broadcast(w, axis=[0, .., r-2]), axis=r)` with `w` K-major (`[N, K]`, torch's weight and
//! `examples/matmul/step1_one_warp_group.hf`'s `b`) and the bias broadcast over the leading
//! axes and added. Half and 8-bit float operands are widened to f32 after the broadcast, as
//! the written-out examples do, so the result is the f32 accumulator (cast it back, as after
//! `sum`). `matmul(a, transpose(w, -2, -1))` (torch's `a @ w.T`) is written as `linear`'s
//! form on `w`, K-major, not as a product over the transposed view. The tensors are named as a
//! nested expression's (`c_broadcast`, `c_mul`, ...), the last one taking the statement's name.

use super::*;

/// Which product a call writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Form {
    /// `matmul(a, b)`, `b` [.., K, N].
    MatMul,
    /// `matmul(a, transpose(w, -2, -1))`: the operand given is `w` [.., N, K].
    KMajor,
    /// `linear(x, w[, bias])`.
    Linear,
}

impl Builder {
    /// A `matmul` or `linear` call: its operands built (for `matmul(a, transpose(w, -2, -1))`,
    /// `w` itself, no transposed view), then [`Builder::product`].
    pub(super) fn product_call(
        &mut self,
        func: &str,
        def: &ops::OpDef,
        args: &[Arg],
        has_axis: bool,
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        let k_major = (def.kind == OpKind::MatMul)
            .then(|| self.transposed_operand(args))
            .flatten();
        let args: &[Arg] = k_major.as_deref().unwrap_or(args);
        let pos = self.call_operands(func, def, args, has_axis, dest, span)?;
        let operands = (0..pos.len())
            .map(|i| Ok((tensor_operand(func, &pos, i)?, pos[i].1)))
            .collect::<BResult<Vec<_>>>()?;
        let form = match def.kind {
            OpKind::Linear => Form::Linear,
            _ if k_major.is_some() => Form::KMajor,
            _ => Form::MatMul,
        };
        self.product(form, &operands, dest, span)
    }

    /// `matmul`'s arguments with the second operand's transpose removed, when it is
    /// `transpose(w, i, j)` or `permute(w, dims=[..])` of a named tensor `w` swapping exactly its
    /// last two axes (torch's `a @ w.T`); else None. Decided on the text, so no transposed view
    /// is built and left unread.
    fn transposed_operand(&self, args: &[Arg]) -> Option<Vec<Arg>> {
        let [Arg::Pos(a), Arg::Pos(ast::Expr::Call {
            func, args: inner, ..
        })] = args
        else {
            return None;
        };
        let Some(Arg::Pos(w @ ast::Expr::Name(n, _))) = inner.first() else {
            return None;
        };
        let r = self.f.rank(*self.names.get(n)?) as i64;
        let axis = |e: &ast::Expr| {
            let v = literal_number(e).ok()? as i64;
            (-r..r).contains(&v).then_some(v.rem_euclid(r.max(1)))
        };
        let dims: Vec<i64> = match (func.as_str(), &inner[1..]) {
            ("transpose", [Arg::Pos(i), Arg::Pos(j)]) => {
                let (i, j) = (axis(i)?, axis(j)?);
                let mut dims: Vec<i64> = (0..r).collect();
                dims.swap(i as usize, j as usize);
                dims
            }
            (
                "permute",
                [Arg::Named {
                    name,
                    value: ast::Expr::List(items, _),
                    ..
                }],
            ) if name == "dims" => items.iter().map(axis).collect::<Option<_>>()?,
            _ => return None,
        };
        let swapped: Vec<i64> = (0..r - 2).chain([r - 1, r - 2]).collect();
        (r >= 2 && dims == swapped).then(|| vec![Arg::Pos(a.clone()), Arg::Pos(w.clone())])
    }

    /// The ops of `matmul(a, b)`, `matmul(a, transpose(w, -2, -1))` or `linear(x, w[, bias])`
    /// on `operands`.
    pub(super) fn product(
        &mut self,
        form: Form,
        operands: &[(TensorId, Span)],
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        let linear = form == Form::Linear;
        let func = if linear { "linear" } else { "matmul" };
        for &(t, at) in operands {
            let tensor = &self.f.tensors[t];
            if !tensor.dtype.is_float() {
                return Err(Diagnostic::new(
                    format!(
                        "`{func}` multiplies floating-point matrices, and `{}` is {} (cast it to f32 first)",
                        tensor.name, tensor.dtype
                    ),
                    Some(at),
                ));
            }
        }
        let (x, x_at) = operands[0];
        let (w, w_at) = operands[1];
        let rank = self.f.rank(x);
        let name = |b: &Self, t: TensorId| b.f.tensors[t].name.clone();
        let extent = |b: &Self, t: TensorId, axis: usize| b.class_extent_of(b.f.logical(t)[axis]);
        let leading: Vec<usize> = (0..rank.saturating_sub(1)).collect();
        let (xb, wb, reduced) = if linear {
            if rank == 0 {
                return Err(Diagnostic::new(
                    format!(
                        "`linear`: `{}` is a scalar; x has its features on its last axis ([M, K])",
                        name(self, x)
                    ),
                    Some(x_at),
                ));
            }
            if self.f.rank(w) != 2 {
                return Err(Diagnostic::new(
                    format!("`linear`: the weight `{}` has rank {}; it is [N, K] (torch's [out_features, in_features])", name(self, w), self.f.rank(w)),
                    Some(w_at),
                ));
            }
            let (k_x, k_w) = (extent(self, x, rank - 1), extent(self, w, 1));
            if k_x != k_w {
                return Err(Diagnostic::new(
                    format!("`linear`: `{}` has {k_x} features on its last axis and the weight `{}` takes {k_w} (its axis 1)", name(self, x), name(self, w)),
                    Some(w_at),
                ));
            }
            let xb = self.broadcast_to(x, vec![rank - 1], dest, span)?;
            let wb = self.broadcast_to(w, leading.clone(), dest, span)?;
            (xb, wb, rank)
        } else {
            let b_rank = self.f.rank(w);
            if rank < 2 || b_rank != rank {
                let (bad, at) = if rank < 2 { (x, x_at) } else { (w, w_at) };
                return Err(Diagnostic::new(
                    format!("`matmul` takes matrices [M, K] and [K, N] of one rank (batched: [B, M, K] and [B, K, N]), and `{}` has rank {} (`{}` {rank}); broadcast a vector to a matrix first", name(self, bad), self.f.rank(bad), name(self, x)),
                    Some(at),
                ));
            }
            let k_major = form == Form::KMajor;
            let k_axis = if k_major { rank - 1 } else { rank - 2 };
            let (k_a, k_b) = (extent(self, x, rank - 1), extent(self, w, k_axis));
            if k_a != k_b {
                // The K-major operand's K is its columns: the rows of the transpose written.
                let b = if k_major {
                    format!("`transpose({}, ...)`", name(self, w))
                } else {
                    format!("`{}`", name(self, w))
                };
                return Err(Diagnostic::new(
                    format!("`matmul`: `{}` has {k_a} columns and {b} has {k_b} rows; they must be equal", name(self, x)),
                    Some(w_at),
                ));
            }
            for axis in 0..rank - 2 {
                let (ea, eb) = (extent(self, x, axis), extent(self, w, axis));
                if ea != eb {
                    return Err(Diagnostic::new(
                        format!(
                            "`matmul`: batch axis {axis} has extent {ea} in `{}` and {eb} in `{}`",
                            name(self, x),
                            name(self, w)
                        ),
                        Some(w_at),
                    ));
                }
            }
            // `a` [.., M, K] meets `b` [.., K, N] over [.., M, K, N], summed on K; the K-major
            // `w` [.., N, K] over [.., M, N, K].
            let (a_axis, reduced) = if k_major {
                (rank - 1, rank)
            } else {
                (rank, rank - 1)
            };
            let ab = self.broadcast_to(x, vec![a_axis], dest, span)?;
            let bb = self.broadcast_to(w, vec![rank - 2], dest, span)?;
            (ab, bb, reduced)
        };
        let product = self.op(
            Op::Binary(BinaryOp::Mul),
            vec![Operand::Tensor(xb), Operand::Tensor(wb)],
            dest,
            Some(span),
        )?;
        let sum = self.op(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![reduced],
            },
            vec![Operand::Tensor(product)],
            dest,
            Some(span),
        )?;
        let Some(&(bias, bias_at)) = operands.get(2) else {
            return Ok(sum);
        };
        let n = extent(self, w, 0);
        if self.f.rank(bias) != 1 || extent(self, bias, 0) != n {
            return Err(Diagnostic::new(
                format!("`linear`: the bias is [N] = [{n}] (one value per row of the weight), and `{}` has {}", name(self, bias), describe_shape(self, bias)),
                Some(bias_at),
            ));
        }
        let bias = self.broadcast_to(bias, leading, dest, span)?;
        self.op(
            Op::Binary(BinaryOp::Add),
            vec![Operand::Tensor(sum), Operand::Tensor(bias)],
            dest,
            Some(span),
        )
    }

    /// `t` with new axes at `axes` (none: `t` itself), widened to f32 when it is a half or
    /// 8-bit float type (cast after the broadcast, as the written-out products are).
    fn broadcast_to(
        &mut self,
        t: TensorId,
        axes: Vec<usize>,
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        let wide = if axes.is_empty() {
            t
        } else {
            self.op(
                Op::Broadcast { axes },
                vec![Operand::Tensor(t)],
                dest,
                Some(span),
            )?
        };
        let dtype = self.f.tensors[t].dtype;
        if dtype == dtype.compute() {
            return Ok(wide);
        }
        self.op(
            Op::Cast(DType::F32),
            vec![Operand::Tensor(wide)],
            dest,
            Some(span),
        )
    }
}

/// `rank 2 ([M, N])`, for messages.
fn describe_shape(b: &Builder, t: TensorId) -> String {
    let extents: Vec<String> =
        b.f.logical(t)
            .iter()
            .map(|&id| b.class_extent_of(id).to_string())
            .collect();
    format!("rank {} ([{}])", extents.len(), extents.join(", "))
}
