//! Size symbols inside expressions: `x / N`, `iota(x, axis=1) < N - 1`, `x / (N * H)`.
//!
//! Takes a name that is no tensor; a size symbol of an earlier input's extents becomes a
//! [`Count`] of one axis with that extent (the kernel reads the size parameter, the reference
//! the run's size, the torch twin `x.shape[k]`), which an op converts to the type it computes
//! in, as a Python `int` from `x.shape` is (an integral number: `x * N` of an `i32` tensor stays
//! `i32`, `x / N` divides in floating point). Sizes combine among themselves only as far as a
//! [`Count`] holds them: a product of symbols (`N * H`) and an integer added or taken away
//! (`N - 1`, which a count clamps at 0, as the degrees of freedom of `var` are); anything else
//! needs a tensor operand, and says so at the expression. Any other name is an unknown tensor,
//! with the size symbols listed.

use super::*;

impl Builder {
    /// The value of the name `n`, which is no tensor: a size symbol, else a located error.
    pub(super) fn size_symbol(&mut self, n: &str, at: Span) -> BResult<Value> {
        let axis =
            self.f.inputs.iter().find_map(|&t| {
                self.f.tensors[t].root.iter().copied().find(
                    |&id| matches!(&self.f.ids[id].root_extent, Some(SizeExpr::Sym(s)) if s == n),
                )
            });
        match axis {
            Some(id) => Ok(Value::Count(self.f.counts.push(Count {
                axes: vec![id],
                minus: 0.0,
            }))),
            None => {
                let known = if self.f.symbols.is_empty() {
                    "no input has a symbolic extent yet".to_string()
                } else {
                    format!("the size symbols so far are {}", self.f.symbols.join(", "))
                };
                Err(Diagnostic::new(
                    format!("unknown tensor `{n}` (neither a tensor nor a size symbol: {known})"),
                    Some(at),
                ))
            }
        }
    }

    /// An elementwise op whose operands are sizes and numbers only: a product of two counts, or
    /// a count plus or minus an integer, is a count; anything else is an error at `span`.
    pub(super) fn size_arithmetic(
        &mut self,
        op: &Op,
        values: &[Value],
        span: Span,
    ) -> BResult<Value> {
        let counts = &self.f.counts;
        let plain = |c: &CountId| counts[*c].minus == 0.0;
        let combined = match (op, values) {
            (Op::Binary(BinaryOp::Mul), [Value::Count(a), Value::Count(b)])
                if plain(a) && plain(b) =>
            {
                Some(Count {
                    axes: [&counts[*a].axes[..], &counts[*b].axes[..]].concat(),
                    minus: 0.0,
                })
            }
            (
                Op::Binary(op @ (BinaryOp::Add | BinaryOp::Sub)),
                [Value::Count(c), Value::Scalar(v)],
            )
            | (Op::Binary(op @ BinaryOp::Add), [Value::Scalar(v), Value::Count(c)])
                if v.fract() == 0.0 && v.abs() < 2f64.powi(31) =>
            {
                let v = if *op == BinaryOp::Add { -*v } else { *v };
                Some(Count {
                    axes: counts[*c].axes.clone(),
                    minus: counts[*c].minus + v,
                })
            }
            _ => None,
        };
        match combined {
            Some(c) => Ok(Value::Count(self.f.counts.push(c))),
            None => Err(Diagnostic::new(
                "sizes combine among themselves only as a product of size symbols (N * H) or a size plus or minus an integer (N - 1); write the rest with a tensor operand (x / N / 2 rather than x / (N * 2))",
                Some(span),
            )),
        }
    }
}
