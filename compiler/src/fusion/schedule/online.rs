//! `online_softmax(o)` (and `online_softmax(o, overlap=products)`, FlashAttention-3's order of
//! the products around the softmax: `passes::mma`'s `overlap`): computes the softmax that the product `o` consumes *online*, as running
//! statistics over the serial loop of `o`'s tiles of the summed axis `T` (docs/attention.md).
//!
//! Takes the tensor the statement names: the sum over `T` of products (`o = sum(broadcast(p) *
//! broadcast(v), axis=T)`), or in the unnormalised form the division of it by the row sum.
//! Checks the legality rule of [`crate::fusion::online_softmax::find`] (each refusal names the
//! tensor as the user wrote it, prefixed with the statement and located on it) and records the
//! accepted pattern on the fusion ([`Fusion::online_softmax`]) as typed data for the passes:
//! `loop_nest` lets the softmax's tensors share the loop over `T` tiles, and
//! `passes::online_softmax` inserts the rescale. Changes nothing else, so it may come anywhere
//! in the schedule; the tile is the inner part of a split of `T` on `o`, checked when lowering.

use super::*;
use crate::fusion::online_softmax;

/// `online_softmax(o)`.
pub(super) fn online_softmax(f: &mut Fusion, a: &Args) -> SResult<()> {
    let (named, name, at) = a.tensor(f, "product")?;
    let product = product_of(f, named);
    let pattern = online_softmax::find(f, product).or_else(|why| a.err(why, Some(at)))?;
    if pattern.result != named {
        // `named` is the division of a product by something that is not its row sum: find's
        // message for the product would name a tensor the user did not write here.
        return a.err(
            format!(
                "`{name}` divides the product `{}`, but the online softmax's result is `{}`",
                f.tensors[product].name, f.tensors[pattern.result].name
            ),
            Some(at),
        );
    }
    if f.online_softmax
        .iter()
        .any(|r| r.pattern.product == pattern.product || r.pattern.max == pattern.max)
    {
        return a.err(
            format!("the softmax `{name}` consumes is already online (an earlier online_softmax statement)"),
            Some(at),
        );
    }
    let overlap = match a.ident("overlap") {
        None => false,
        Some(("products", _)) => true,
        Some((other, at)) => {
            return a.err(
                format!("online_softmax's overlap is `products` (the previous tile's P V product runs during this tile's softmax), got `{other}`"),
                Some(at),
            )
        }
    };
    f.online_softmax.push(OnlineRewrite {
        pattern,
        overlap,
        span: Some(a.span),
    });
    Ok(())
}

/// The product a statement names: the tensor itself, or for a division (the unnormalised form
/// `o = sum(...) / broadcast(l)`) the sum it divides.
fn product_of(f: &Fusion, t: TensorId) -> TensorId {
    let Some(e) = f.tensors[t].definition.map(|e| &f.exprs[e]) else {
        return t;
    };
    match (&e.op, &e.inputs[..]) {
        (Op::Binary(BinaryOp::Div), [Operand::Tensor(num), _]) => {
            let mut n = *num;
            // Through copies and casts (a broadcast would change the axes).
            while let Some(d) = f.tensors[n].definition.map(|d| &f.exprs[d]) {
                match (&d.op, &d.inputs[..]) {
                    (Op::Set | Op::Cast(_), [Operand::Tensor(i)]) => n = *i,
                    _ => break,
                }
            }
            match f.tensors[n].definition.map(|d| &f.exprs[d].op) {
                Some(Op::Reduce { .. }) => n,
                _ => t,
            }
        }
        _ => t,
    }
}
