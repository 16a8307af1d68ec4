//! The fusion as one cuBLASLt call, for the runner's peers: a matrix product of inputs plus a
//! bias along its rows, then optionally ReLU or the tanh GELU (recognised by value), then
//! optionally a cast, becomes `torch.addmm` or `torch._addmm_activation`: cuBLAS with the
//! epilogue fused into the GEMM, the fastest library form of what the kernel computes.

use super::{input_tensor, Emitter, MatMul, Py, Twin, ATOM};
use crate::dtype::DType;
use crate::fusion::{BinaryOp, Fusion, Op, Operand, TensorId};

/// An activation cuBLASLt can fuse after the bias of a matrix product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    None,
    Relu,
    /// The tanh approximation, as cuBLASLt's GELU epilogue computes it.
    Gelu,
}

/// The fusion through cuBLASLt's fused epilogue, for the runner's peers: `torch.addmm(bias, a,
/// b)` or `torch._addmm_activation(bias, a, b, use_gelu=...)`, when the fusion's one output is
/// one matrix product (of inputs) plus a bias along its rows (`broadcast(bias, axis=0)` of an
/// input), then optionally ReLU or the tanh GELU (recognised by value, however it is written),
/// then optionally a cast (a half GEMM must be rounded to its own half type: cuBLASLt gives no
/// f32 result from half operands). The bias is converted to the GEMM's type. None otherwise.
pub fn emit_cublaslt(fusion: &Fusion) -> Option<(Twin, Activation)> {
    let f = fusion;
    let [out] = f.outputs[..] else {
        return None;
    };
    let e = Emitter::new(f, &[]);
    let def = |t: TensorId| f.tensors[t].definition.map(|d| &f.exprs[d]);
    let (top, cast) = match def(out) {
        Some(x) if matches!(x.op, Op::Cast(_)) => (input_tensor(x), Some(f.tensors[out].dtype)),
        _ => (out, None),
    };
    // The bias add: `S + broadcast(bias, axis=0)` (either order) with S a contraction.
    let is_bias = |t: TensorId| -> Option<TensorId> {
        let x = def(t)?;
        let below = input_tensor(x);
        let bias = match &x.op {
            Op::Broadcast { axes } if axes[..] == [0] => below,
            _ => return None,
        };
        (f.tensors[bias].is_input && f.rank(bias) == 1).then_some(bias)
    };
    let add = f.tensor_ids().find(|&t| {
        def(t).is_some_and(|x| match (&x.op, &x.inputs[..]) {
            (Op::Binary(BinaryOp::Add), [Operand::Tensor(p), Operand::Tensor(q)]) => {
                (e.contractions[*p].is_some() && is_bias(*q).is_some())
                    || (e.contractions[*q].is_some() && is_bias(*p).is_some())
            }
            _ => false,
        })
    })?;
    let [Operand::Tensor(p), Operand::Tensor(q)] = def(add)?.inputs[..] else {
        return None;
    };
    let (sum, bias) = if e.contractions[p].is_some() {
        (p, is_bias(q)?)
    } else {
        (q, is_bias(p)?)
    };
    let c = e.contractions[sum].as_ref()?;
    let inputs_only = c.factors.iter().all(|fa| f.tensors[fa.base].is_input);
    let gemm = c.half.unwrap_or(c.compute);
    // A half GEMM gives a half result: the fusion must round to exactly that.
    if !inputs_only || (c.half.is_some() && cast != Some(gemm)) {
        return None;
    }
    // addmm takes matrices: no batch axes.
    let (a, b) = match e.matmul(c, e.operands(c))? {
        MatMul { a, b, batch: 0 } => (a, b),
        _ => return None,
    };
    // The epilogue between the bias add and the output, as a function of one value.
    let activation = [Activation::None, Activation::Relu, Activation::Gelu]
        .into_iter()
        .find(|act| {
            (-60..=60).all(|k| {
                let x = k as f64 * 0.1;
                let want = match act {
                    Activation::None => x,
                    Activation::Relu => x.max(0.0),
                    Activation::Gelu => {
                        let inner =
                            (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                        0.5 * x * (1.0 + inner.tanh())
                    }
                };
                scalar_epilogue(f, top, add, x)
                    .is_some_and(|got| (got - want).abs() <= 1e-6 * (1.0 + want.abs()))
            })
        })?;
    let bias = Py::new(e.names[bias].clone(), ATOM, f.tensors[bias].dtype).to(gemm);
    let call = match activation {
        Activation::None => format!("torch.addmm({}, {a}, {b})", bias.text),
        act => format!(
            "torch._addmm_activation({}, {a}, {b}, use_gelu={})",
            bias.text,
            if act == Activation::Gelu {
                "True"
            } else {
                "False"
            }
        ),
    };
    let mut value = Py::new(call, ATOM, gemm);
    if let Some(d) = cast {
        value = value.to(d);
    }
    let function = format!("{}_cublaslt", f.name);
    let params = e.input_params();
    let source = format!(
        "# The hopfuse fusion `{}` as one cuBLASLt call: the matrix product with its bias and\n\
         # activation fused into the GEMM's epilogue (a peer of `hopfuse run --peers`).\n\
         import torch\n\n\n\
         def {function}({}) -> torch.Tensor:\n    return {}\n",
        f.name,
        params.join(", "),
        value.text
    );
    Some((Twin { source, function }, activation))
}

/// The value the fusion computes from `top` down to `leaf` when `leaf` holds `x`: elementwise
/// float ops and literals only (None for anything else, another tensor, or a narrowing cast).
fn scalar_epilogue(f: &Fusion, top: TensorId, leaf: TensorId, x: f64) -> Option<f64> {
    if top == leaf {
        return Some(x);
    }
    let def = &f.exprs[f.tensors[top].definition?];
    let operand = |o: &Operand| match *o {
        Operand::Tensor(t) => scalar_epilogue(f, t, leaf, x),
        Operand::Scalar(v) => Some(v),
        Operand::Count(_) => None,
    };
    match &def.op {
        Op::Set => operand(&def.inputs[0]),
        Op::Cast(DType::F32 | DType::F64) => operand(&def.inputs[0]),
        Op::Unary(u) => Some(u.eval(operand(&def.inputs[0])?)),
        Op::Binary(b) => Some(b.eval(operand(&def.inputs[0])?, operand(&def.inputs[1])?)),
        _ => None,
    }
}
