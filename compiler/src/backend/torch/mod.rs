//! PyTorch back end: the *torch twin* of a fusion, one self-contained Python function that
//! computes what the kernel computes, for users (drop it into a model or a test) and for the
//! runner's peers (`hopfuse run --peers` times it eagerly and under `torch.compile`).
//!
//! Takes the unscheduled [`Fusion`] (the schedule changes nothing a twin can see) and, when the
//! program text is at hand, its [`ast::FusionDef`]: the tensors the program names get a line of
//! their own, the nested expressions stay nested; without it every tensor used once is inlined.
//!
//! Guarantees the kernel's arithmetic, op by op (the rules of `passes::loop_nest` and
//! `codegen`): every tensor has its fusion dtype; an op computes in its result's compute type
//! (`DType::compute`: half types in f32), so operands of another type are converted first
//! (`x.float()`); a sum of a half or integer tensor accumulates in f32 (`torch.sum(..., dtype=)`),
//! a max/min is taken in the input type and converted after (exact); casts are `.to` conversions;
//! `broadcast(x, axis=k)` is `x.unsqueeze(k)` and torch's broadcasting does the rest; literals
//! are Python numbers (torch converts them to the op's type, as the kernel's literals are);
//! scalar inputs are 0-dim tensors of their dtype.
//!
//! Written as a PyTorch user writes it, because the runner's peers time this form: reductions
//! are reductions, views are views (`unsqueeze`, `squeeze`, `.t()`), and only a matrix product
//! is a GEMM. A sum of a product of broadcasts is a matrix product when an axis both factors
//! have is summed and each factor has a kept axis the other lacks (`x @ w`); it becomes `a @ b`
//! (`.t()` or `.transpose(-2, -1)` for transposed layouts, batch axes leading: a batched
//! matmul), or `torch.einsum` in a layout `@` does not take without a permute, never the
//! `[M, K, N]` intermediate. With half operands widened to f32 it is the half GEMM (f32
//! accumulation), its result rounded once to the half type when that is what the fusion does
//! next, else `torch.mm`/`torch.bmm(..., out_dtype=torch.float32)` (with several batch axes,
//! the f32 matmul of the widened operands); integer products stay element-wise (cuBLAS has no
//! int GEMM). Every other sum of a product (a sum of squares, a dot along an axis of
//! same-shaped tensors, a matrix-vector product) is the product then `torch.sum`, which
//! torch.compile fuses into one reduction; as an einsum it would run as a batched matmul of
//! 1-wide matrices, several times slower (issue 33: an RMSNorm's sum of squares).
//!
//! Tensors that do not reach an output are left out; an output that would alias an input is
//! cloned.

use crate::dtype::DType;
use crate::frontend::ast;
use crate::fusion::contraction::{self, Contraction, Factor};
use crate::fusion::{
    BinaryOp, Fusion, IterKind, Op, Operand, ReduceOp, TensorId, TernaryOp, UnaryOp,
};
use crate::id::IdVec;
use std::fmt::Write;

mod cublaslt;
pub mod flex;
mod random;
mod scaled_mm;
pub mod sdpa;
pub use cublaslt::{emit_cublaslt, Activation};
pub use flex::emit_flex;
pub use scaled_mm::emit_scaled_mm;
pub use sdpa::{emit_sdpa, SdpaBackend};

/// The twin of one fusion.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Twin {
    /// The Python module: `import torch` and one function.
    pub source: String,
    /// The function's name; it takes the fusion's inputs in declaration order (tensors, scalar
    /// inputs as 0-dim tensors) and returns its outputs in declaration order (a tuple when
    /// there are several).
    pub function: String,
}

/// The torch dtype of a fusion dtype (`torch.float32`, ...).
/// How an attention's `q`, `k`, `v` and output are viewed for a 4-D `[B, H, S, D]` attention call
/// (SDPA, FlexAttention): the suffix each takes and whether K/V have fewer heads than `q`.
pub(crate) struct HeadsLayout {
    pub q: &'static str,
    pub kv: &'static str,
    /// The call's result back to the fusion's output shape.
    pub out: &'static str,
    /// Grouped-query attention: `q`'s group axis are the query heads of one K/V head.
    pub gqa: bool,
}

impl HeadsLayout {
    /// SDPA's layout of `at`: the fusion's batch axis (if any) is SDPA's batch.
    pub fn sdpa(at: &crate::fusion::attention::Attention) -> HeadsLayout {
        HeadsLayout::of(at, ".unsqueeze(1)", ".squeeze(1)")
    }

    /// FlexAttention's layout of `at`: the fusion's batch axis (if any) is its heads.
    pub fn flex(at: &crate::fusion::attention::Attention) -> HeadsLayout {
        HeadsLayout::of(at, ".unsqueeze(0)", ".squeeze(0)")
    }

    /// `at`'s layout with a batched, ungrouped fusion viewed by `batched` and its result back by
    /// `unview`; unbatched `[1, 1, S, D]`; grouped-query attention `[B, G, S, D]` with `k`, `v`
    /// as `[B, 1, T, D]` (`[1, G, S, D]` and `[1, 1, T, D]` unbatched).
    fn of(
        at: &crate::fusion::attention::Attention,
        batched: &'static str,
        unview: &'static str,
    ) -> HeadsLayout {
        let (q, kv, out, gqa) = match (at.batch, at.groups) {
            (0, 0) => (
                ".unsqueeze(0).unsqueeze(0)",
                ".unsqueeze(0).unsqueeze(0)",
                ".squeeze(0).squeeze(0)",
                false,
            ),
            (_, 0) => (batched, batched, unview, false),
            (0, _) => (
                ".unsqueeze(0)",
                ".unsqueeze(0).unsqueeze(0)",
                ".squeeze(0)",
                true,
            ),
            _ => ("", ".unsqueeze(1)", "", true),
        };
        HeadsLayout { q, kv, out, gqa }
    }

    /// The call's grouped-query argument (empty for plain attention).
    pub fn gqa_arg(&self) -> &'static str {
        if self.gqa {
            ", enable_gqa=True"
        } else {
            ""
        }
    }
}

pub fn torch_dtype(d: DType) -> String {
    format!("torch.{}", d.torch())
}

/// The conversion method call (`float()`) to a dtype; `to(torch.float8_e4m3fn)` for the types
/// without one.
fn conversion(d: DType) -> String {
    match d {
        DType::Bool => "bool()".into(),
        DType::U8 => "byte()".into(),
        DType::I8 => "char()".into(),
        DType::I32 => "int()".into(),
        DType::I64 => "long()".into(),
        DType::BF16 => "bfloat16()".into(),
        DType::F16 => "half()".into(),
        DType::F32 => "float()".into(),
        DType::F64 => "double()".into(),
        DType::F8E4M3 | DType::F8E5M2 => format!("to({})", torch_dtype(d)),
    }
}

/// Emits the twin of `fusion`. `def` (the program's fusion block, from which `fusion` was built)
/// only decides which tensors get a line of their own.
pub fn emit(fusion: &Fusion, def: Option<&ast::FusionDef>) -> Twin {
    let named: Vec<&str> = def
        .map(|d| {
            d.items
                .iter()
                .flat_map(|i| match i {
                    ast::Item::Let { name, .. } => vec![name.as_str()],
                    ast::Item::LetTuple { names, .. } => {
                        names.iter().map(|(n, _)| n.as_str()).collect()
                    }
                    _ => Vec::new(),
                })
                .collect()
        })
        .unwrap_or_default();
    let e = Emitter::new(fusion, &named);
    e.module()
}

/// Python operator precedence, loosest first, as far as the twin needs it.
const ADD: u8 = 1;
const MUL: u8 = 2;
const UNARY: u8 = 3;
const ATOM: u8 = 4;

/// A Python expression with its precedence and its dtype (None: a Python number).
#[derive(Clone, Debug)]
struct Py {
    text: String,
    prec: u8,
    dtype: Option<DType>,
}

impl Py {
    fn new(text: String, prec: u8, dtype: DType) -> Py {
        Py {
            text,
            prec,
            dtype: Some(dtype),
        }
    }

    /// The text, parenthesised unless it binds at least as tightly as `min`.
    fn at(&self, min: u8) -> String {
        if self.prec >= min {
            self.text.clone()
        } else {
            format!("({})", self.text)
        }
    }

    /// `self` converted to `to` (a Python number is left to torch, which converts it to the
    /// op's type as the kernel's literal is).
    fn to(self, to: DType) -> Py {
        match self.dtype {
            Some(d) if d != to => {
                Py::new(format!("{}.{}", self.at(ATOM), conversion(to)), ATOM, to)
            }
            _ => self,
        }
    }
}

struct Emitter<'a> {
    f: &'a Fusion,
    names: IdVec<TensorId, String>,
    statement: IdVec<TensorId, bool>,
    live: IdVec<TensorId, bool>,
    /// Contractions by the tensor they define.
    contractions: IdVec<TensorId, Option<Contraction>>,
    /// Tensors written as their composite call (`torch.mean`, ...; see [`Emitter::call`]).
    composite: IdVec<TensorId, bool>,
    /// Text that stands for a tensor wherever it is read, instead of its name or definition
    /// (FlexAttention's `score_mod` reads the scores as `score`, an input as `x[h, q_idx]`).
    overrides: rustc_hash::FxHashMap<TensorId, Py>,
}

const PY_KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield", "torch",
];

impl<'a> Emitter<'a> {
    fn new(f: &'a Fusion, named: &[&str]) -> Emitter<'a> {
        Emitter::reserving(f, named, &[])
    }

    /// An emitter whose tensor names also stay off `reserved` (the names a peer's own code
    /// defines around the fusion's, such as FlexAttention's `score_mod` parameters).
    fn reserving(f: &'a Fusion, named: &[&str], reserved: &[&str]) -> Emitter<'a> {
        let n = f.tensors.len();
        // Python names: the fusion's, moved off keywords (and `torch`) and kept unique.
        let mut taken: Vec<String> = vec![f.name.clone()];
        taken.extend(reserved.iter().map(|r| r.to_string()));
        let mut names = IdVec::default();
        for t in &f.tensors {
            let mut name = t.name.clone();
            while PY_KEYWORDS.contains(&name.as_str()) || taken.contains(&name) {
                name.push('_');
            }
            taken.push(name.clone());
            names.push(name);
        }
        let live = f.live();
        let live_uses = |t: TensorId| {
            f.uses(t)
                .into_iter()
                .filter(|&e| live[f.exprs[e].output])
                .count()
        };
        let (contractions, mut absorbed) = contraction::find_all(f, &live);
        // A composite call is written as torch's call when nothing else reads the tensors the
        // builder made for it (an anonymous name such as `m_sum` can be read afterwards).
        let mut composite: IdVec<TensorId, bool> = vec![false; n].into();
        for t in f.tensor_ids() {
            let Some(c) = &f.tensors[t].composite else {
                continue;
            };
            let inside = |u: TensorId| (c.first.index()..=t.index()).contains(&u.index());
            let internal = (c.first.index()..t.index()).map(TensorId::new);
            let sealed = live[t]
                && internal.clone().all(|i| {
                    f.uses(i)
                        .into_iter()
                        .all(|e| !live[f.exprs[e].output] || inside(f.exprs[e].output))
                });
            if sealed {
                composite[t] = true;
                for i in internal {
                    absorbed[i] = true;
                }
            }
        }
        let statement = f
            .tensor_ids()
            .map(|t| {
                let tensor = &f.tensors[t];
                live[t]
                    && !tensor.is_input
                    && !absorbed[t]
                    && (tensor.is_output
                        || live_uses(t) != 1
                        || named.contains(&tensor.name.as_str()))
            })
            .collect();
        Emitter {
            f,
            names,
            statement,
            live,
            contractions,
            composite,
            overrides: Default::default(),
        }
    }

    /// Every tensor inlined where it is read: for one expression on its own (a `score_mod`'s
    /// body), where no statement of the twin's function defines a name.
    fn inline_all(&mut self) {
        self.statement = vec![false; self.f.tensors.len()].into();
    }

    /// `text` (of `dtype`, binding as an atom) stands for `t` wherever it is read.
    fn set_override(&mut self, t: TensorId, text: String, dtype: DType) {
        self.overrides.insert(t, Py::new(text, ATOM, dtype));
    }

    fn module(&self) -> Twin {
        let f = self.f;
        let mut function = f.name.clone();
        while PY_KEYWORDS.contains(&function.as_str()) {
            function.push('_');
        }
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# PyTorch twin of the hopfuse fusion `{}` (`hopfuse compile --torch`): the same dtypes,\n\
             # casts, reduction axes and accumulation types as the kernel.\n\
             import torch\n\n",
            f.name
        );
        if f.exprs.iter().any(|e| {
            matches!(
                e.op,
                Op::Ternary(TernaryOp::Rand) | Op::Ternary(TernaryOp::RandN)
            )
        }) {
            s.push_str(&random::helpers());
        }
        let params = self.input_params();
        let ret = if f.outputs.len() == 1 {
            "torch.Tensor".to_string()
        } else {
            format!(
                "tuple[{}]",
                vec!["torch.Tensor"; f.outputs.len()].join(", ")
            )
        };
        let _ = writeln!(s, "def {function}({}) -> {ret}:", params.join(", "));
        let sig = |ts: &[TensorId]| -> Vec<String> {
            ts.iter()
                .map(|&t| format!("{}: {}", self.names[t], self.shape(t)))
                .collect()
        };
        let _ = writeln!(
            s,
            "    \"\"\"{} -> {}\"\"\"",
            sig(&f.inputs).join(", "),
            sig(&f.outputs).join(", ")
        );
        let permuted = f
            .exprs
            .iter()
            .any(|e| matches!(e.op, Op::Permute { .. } | Op::Expand { .. }));
        let var_means = self.var_means();
        for e in f.topo_exprs() {
            let t = f.exprs[e].output;
            if !self.statement[t] || var_means.iter().any(|&(_, m)| m == t) {
                continue;
            }
            if let Some(&(_, m)) = var_means.iter().find(|&&(v, _)| v == t) {
                let call = self.call(t).text;
                let call = call.replacen("torch.var(", "torch.var_mean(", 1);
                let _ = writeln!(s, "    {}, {} = {call}", self.names[t], self.names[m]);
                continue;
            }
            let mut value = self.define(t);
            if f.tensors[t].is_output && self.aliases_input(&value) {
                value = Py::new(
                    format!("{}.clone()", value.at(ATOM)),
                    ATOM,
                    f.tensors[t].dtype,
                );
            } else if f.tensors[t].is_output && permuted {
                // A permuted view, and elementwise ops on one, keep the permuted strides in
                // torch; the kernel writes the output row-major, and so must the peer (else
                // eager times a view, or an untransposed copy).
                value = Py::new(
                    format!("{}.contiguous()", value.at(ATOM)),
                    ATOM,
                    f.tensors[t].dtype,
                );
            }
            let _ = writeln!(s, "    {} = {}", self.names[t], value.text);
        }
        let outs: Vec<&str> = f.outputs.iter().map(|&t| self.names[t].as_str()).collect();
        let _ = writeln!(s, "    return {}", outs.join(", "));
        Twin {
            source: s,
            function,
        }
    }

    /// `float32[M, N]`, broadcast axes as 1, scalars as `float32[]`.
    /// The fusion's inputs as the twin's (and the peers') parameters: `x: torch.Tensor`, ...
    pub(super) fn input_params(&self) -> Vec<String> {
        self.f
            .inputs
            .iter()
            .map(|&t| format!("{}: torch.Tensor", self.names[t]))
            .collect()
    }

    fn shape(&self, t: TensorId) -> String {
        let f = self.f;
        let dims: Vec<String> = f
            .logical(t)
            .iter()
            .map(|&id| {
                if f.ids[id].kind == IterKind::Broadcast {
                    "1".to_string()
                } else {
                    f.class_extent(f.class_of(id)).to_string()
                }
            })
            .collect();
        let dtype = f.tensors[t].dtype.torch();
        format!("{dtype}[{}]", dims.join(", "))
    }

    fn aliases_input(&self, value: &Py) -> bool {
        self.f.inputs.iter().any(|&i| self.names[i] == value.text)
    }

    /// The expression that reads `t`: its override, its name, or its definition inlined.
    fn value(&self, t: TensorId) -> Py {
        if let Some(p) = self.overrides.get(&t) {
            return p.clone();
        }
        let tensor = &self.f.tensors[t];
        if tensor.is_input || self.statement[t] {
            Py::new(self.names[t].clone(), ATOM, tensor.dtype)
        } else {
            self.define(t)
        }
    }

    fn operand(&self, o: &Operand, compute: DType) -> Py {
        match *o {
            Operand::Tensor(t) => self.value(t).to(compute),
            Operand::Scalar(v) => literal(v, compute),
            Operand::Count(c) => self.count(c),
        }
    }

    /// A count of elements from the inputs' shapes (`x.shape[1] * x.shape[2] - 1`): a size
    /// symbol is the extent of the first input axis that has it.
    fn count(&self, c: crate::fusion::CountId) -> Py {
        let f = self.f;
        let factors: Vec<String> = f.counts[c].axes.iter().map(|&id| self.extent(id)).collect();
        let mut text = factors.join(" * ");
        let minus = f.counts[c].minus;
        // An integral constant as a Python int, so that `x * (N - 1)` of an integer tensor
        // stays an integer tensor as the kernel's does; one added (`N + 1`) needs no clamp.
        let constant = |m: f64| {
            if m.fract() == 0.0 && m.abs() < 2f64.powi(53) {
                format!("{}", m as i64)
            } else {
                crate::text::float_literal(m)
            }
        };
        if minus > 0.0 {
            text = format!("max({text} - {}, 0)", constant(minus));
        } else if minus < 0.0 {
            text = format!("{text} + {}", constant(-minus));
        }
        let prec = if minus < 0.0 {
            ADD
        } else if factors.len() > 1 && minus == 0.0 {
            MUL
        } else {
            ATOM
        };
        Py {
            text,
            prec,
            dtype: None,
        }
    }

    /// The extent of an axis's class from the inputs' shapes: a size symbol is the extent of
    /// the first input axis that has it (`x.shape[1]`), a constant itself.
    fn extent(&self, id: crate::fusion::IterId) -> String {
        let f = self.f;
        match f.class_extent(f.class_of(id)) {
            crate::plan::SizeExpr::Sym(sym) => f
                .inputs
                .iter()
                .find_map(|&i| {
                    let k = f.logical(i).iter().position(|&a| {
                        f.ids[a].root_extent == Some(crate::plan::SizeExpr::Sym(sym.clone()))
                    })?;
                    Some(format!("{}.shape[{k}]", self.names[i]))
                })
                .unwrap_or(sym),
            e => e.to_string(),
        }
    }

    /// The `(variance, mean)` pairs of `v, m = var_mean(...)`: a `var` whose ops read a `mean`
    /// of the same operand and axes (`var` alone sums its operand itself). The twin writes
    /// them as one `torch.var_mean` where the variance is defined.
    fn var_means(&self) -> Vec<(TensorId, TensorId)> {
        use crate::fusion::CompositeOp;
        let f = self.f;
        let mut pairs = Vec::new();
        for (i, tensor) in f.tensors.iter().enumerate() {
            let v = TensorId::new(i);
            let Some(c) = tensor
                .composite
                .as_ref()
                .filter(|c| c.op == CompositeOp::Var)
            else {
                continue;
            };
            let mean = (c.first.index()..=v.index())
                .filter_map(|i| f.tensors[TensorId::new(i)].definition)
                .flat_map(|e| f.exprs[e].input_tensors())
                .find(|&m| {
                    f.tensors[m].composite.as_ref().is_some_and(|cm| {
                        cm.op == CompositeOp::Mean && cm.input == c.input && cm.axes == c.axes
                    })
                });
            if let Some(m) = mean {
                if self.statement[v] && self.statement[m] {
                    pairs.push((v, m));
                }
            }
        }
        pairs
    }

    /// `, device=x.device` of the first input with axes (what a created tensor is made on).
    fn device(&self) -> String {
        let f = self.f;
        f.inputs
            .iter()
            .find(|&&i| f.rank(i) > 0)
            .map(|&i| format!(", device={}.device", self.names[i]))
            .unwrap_or_default()
    }

    /// `iota(x, axis=k)`: `torch.arange` on the inputs' device, viewed with extent 1 on the
    /// other axes (torch broadcasts it as the kernel does).
    fn iota(&self, t: TensorId, axis: usize) -> Py {
        let f = self.f;
        let logical = f.logical(t);
        let device = self.device();
        let mut text = format!(
            "torch.arange({}, dtype=torch.int32{device})",
            self.extent(logical[axis])
        );
        if logical.len() > 1 {
            let view: Vec<&str> = (0..logical.len())
                .map(|k| if k == axis { "-1" } else { "1" })
                .collect();
            let _ = write!(text, ".view({})", view.join(", "));
        }
        Py::new(text, ATOM, DType::I32)
    }

    /// The row-major index over `axes` of `t`'s shape (1 along its other axes), as int64.
    fn element_index(&self, t: TensorId, axes: &[usize]) -> Py {
        let logical = self.f.logical(t);
        let extents: Vec<String> = axes.iter().map(|&k| self.extent(logical[k])).collect();
        let mut text = format!(
            "torch.arange({}, dtype=torch.int64{})",
            extents.join(" * "),
            self.device()
        );
        if logical.len() > 1 {
            let view: Vec<String> = (0..logical.len())
                .map(|k| match axes.iter().position(|&a| a == k) {
                    Some(i) => extents[i].clone(),
                    None => "1".into(),
                })
                .collect();
            let _ = write!(text, ".view({})", view.join(", "));
        }
        Py::new(text, ATOM, DType::I64)
    }

    /// `t`'s composite call as torch writes it: `torch.mean`, `torch.var`, `torch.logsumexp`
    /// over the operand converted to the result's compute type (torch's own accumulation).
    fn call(&self, t: TensorId) -> Py {
        use crate::fusion::CompositeOp;
        let f = self.f;
        let c = f.tensors[t]
            .composite
            .as_ref()
            .expect("only composite tensors are called");
        let out = f.tensors[t].dtype;
        let compute = out.compute();
        let x = self.value(c.input);
        let dim = dims(&c.axes);
        let text = match c.op {
            CompositeOp::Mean if x.dtype == Some(compute) => {
                format!("torch.mean({}, dim={dim})", x.text)
            }
            CompositeOp::Mean => format!(
                "torch.mean({}, dim={dim}, dtype={})",
                x.text,
                torch_dtype(compute)
            ),
            CompositeOp::Var => format!(
                "torch.var({}, dim={dim}, correction={})",
                x.to(compute).text,
                // An integral correction as torch's default is written (`1`, not `1.0`).
                if c.correction.fract() == 0.0 {
                    format!("{}", c.correction as i64)
                } else {
                    c.correction.to_string()
                }
            ),
            CompositeOp::LogSumExp => {
                format!("torch.logsumexp({}, dim={dim})", x.to(compute).text)
            }
            // torch's index is int64; the kernel's i32.
            CompositeOp::ArgMax | CompositeOp::ArgMin => {
                let name = if c.op == CompositeOp::ArgMax {
                    "argmax"
                } else {
                    "argmin"
                };
                format!("torch.{name}({}, dim={dim}).int()", x.text)
            }
        };
        Py::new(text, ATOM, compute).to(out)
    }

    /// The expression that computes `t` from its producers.
    fn define(&self, t: TensorId) -> Py {
        let f = self.f;
        if let Some(c) = &self.contractions[t] {
            return self.contract(c);
        }
        if self.composite[t] {
            return self.call(t);
        }
        debug_assert!(self.live[t]);
        let out = f.tensors[t].dtype;
        let compute = out.compute();
        let Some(d) = f.tensors[t].definition else {
            return Py::new(self.names[t].clone(), ATOM, out);
        };
        let expr = &f.exprs[d];
        match &expr.op {
            Op::Set => self.operand(&expr.inputs[0], out),
            Op::Cast(to) => self.operand(&expr.inputs[0], *to),
            Op::Broadcast { .. }
            | Op::Permute { .. }
            | Op::Slice { .. }
            | Op::Pad { .. }
            | Op::Cat { .. }
            | Op::ExpandBlocks { .. }
            | Op::Gather { .. }
            | Op::Reshape
            | Op::Expand { .. } => self.define_view(t, expr, out),
            Op::Unary(u) => {
                let x = self.operand(&expr.inputs[0], f.compute_type(d));
                unary(*u, x, out)
            }
            Op::Binary(b) => {
                let compute = f.compute_type(d);
                let x = self.operand(&expr.inputs[0], compute);
                let y = self.operand(&expr.inputs[1], compute);
                binary(*b, x, y, out)
            }
            Op::Ternary(op) => self.define_ternary(*op, expr, compute, out),
            Op::Reduce { op, axes } => self.define_reduce(*op, axes, expr, compute, out),
            Op::Iota { axis } => self.iota(t, *axis),
            Op::ElementIndex { axes } => self.element_index(t, axes),
            Op::Full { value } => self.define_full(t, *value, out),
            Op::Mma => {
                let x = self.operand(&expr.inputs[0], compute);
                let y = self.operand(&expr.inputs[1], compute);
                Py::new(format!("torch.matmul({}, {})", x.text, y.text), ATOM, out)
            }
        }
    }

    /// A view as a torch user writes it: unsqueeze, transpose / permute, basic slicing, F.pad,
    /// torch.cat, repeat_interleave, gather / index_select, reshape, expand.
    fn define_view(&self, t: TensorId, expr: &crate::fusion::Expr, out: DType) -> Py {
        let f = self.f;
        match &expr.op {
            Op::Broadcast { axes } => {
                let mut x = self.operand(&expr.inputs[0], out);
                for a in axes {
                    x = Py::new(format!("{}.unsqueeze({a})", x.at(ATOM)), ATOM, out);
                }
                x
            }
            Op::Permute { dims } => {
                let x = self.operand(&expr.inputs[0], out);
                let moved: Vec<usize> = (0..dims.len()).filter(|&k| dims[k] != k).collect();
                let text = match moved[..] {
                    [a, b] => format!("{}.transpose({a}, {b})", x.at(ATOM)),
                    _ => format!(
                        "{}.permute({})",
                        x.at(ATOM),
                        dims.iter()
                            .map(|d| d.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                Py::new(text, ATOM, out)
            }
            // As a torch user writes them: basic slicing, F.pad, torch.cat, reshape.
            Op::Slice { axis, written, .. } => {
                let x = self.operand(&expr.inputs[0], out);
                let part = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
                let step = match written[2] {
                    Some(s) if s != 1 => format!(":{s}"),
                    _ => String::new(),
                };
                let mut key = vec![":".to_string(); *axis];
                key.push(format!("{}:{}{step}", part(written[0]), part(written[1])));
                Py::new(format!("{}[{}]", x.at(ATOM), key.join(", ")), ATOM, out)
            }
            Op::Pad {
                axis,
                before,
                after,
                value,
            } => {
                let x = self.operand(&expr.inputs[0], out);
                // F.pad's pairs run from the last axis back to the padded one.
                let rank = f.rank(t);
                let mut widths = vec!["0, 0"; rank - 1 - axis].join(", ");
                if !widths.is_empty() {
                    widths.push_str(", ");
                }
                let value = if *value == 0.0 {
                    String::new()
                } else {
                    format!(", value={}", literal(*value, out.compute()).text)
                };
                Py::new(
                    format!(
                        "torch.nn.functional.pad({}, ({widths}{before}, {after}){value})",
                        x.text
                    ),
                    ATOM,
                    out,
                )
            }
            Op::Cat { axis } => {
                let (a, b) = (
                    self.operand(&expr.inputs[0], out),
                    self.operand(&expr.inputs[1], out),
                );
                Py::new(
                    format!("torch.cat(({}, {}), dim={axis})", a.text, b.text),
                    ATOM,
                    out,
                )
            }
            // Each element repeated over its block, then cut to the shape.
            Op::ExpandBlocks { block } => {
                let x = self.operand(&expr.inputs[0], out);
                let mut text = x.at(ATOM).to_string();
                let mut cut = Vec::new();
                for (axis, (&b, &id)) in block.iter().zip(&f.logical(t)).enumerate() {
                    if b == 1 {
                        cut.push(":".to_string());
                    } else {
                        text = format!("{text}.repeat_interleave({b}, {axis})");
                        cut.push(format!(
                            ":{}",
                            self.size_text(&f.class_extent(f.class_of(id)))
                        ));
                    }
                }
                Py::new(format!("{text}[{}]", cut.join(", ")), ATOM, out)
            }
            Op::Gather { axis, select } => self.define_gather(*axis, *select, expr, out),
            Op::Reshape => {
                let x = self.operand(&expr.inputs[0], out);
                let sizes: Vec<String> = f
                    .logical(t)
                    .iter()
                    .map(|&id| self.product_text(&f.class_extent(f.class_of(id))))
                    .collect();
                Py::new(
                    format!("{}.reshape({})", x.at(ATOM), sizes.join(", ")),
                    ATOM,
                    out,
                )
            }
            // -1 keeps an axis; a size symbol is the extent of an input that has it.
            Op::Expand { shape } => {
                let x = self.operand(&expr.inputs[0], out);
                let input = f.logical(input_tensor(expr));
                let sizes: Vec<String> = input
                    .iter()
                    .zip(shape)
                    .map(|(&i, e)| {
                        if f.ids[i].kind == IterKind::Broadcast {
                            self.size_text(e)
                        } else {
                            "-1".into()
                        }
                    })
                    .collect();
                Py::new(
                    format!("{}.expand({})", x.at(ATOM), sizes.join(", ")),
                    ATOM,
                    out,
                )
            }
            _ => unreachable!("define_view takes views"),
        }
    }

    /// `torch.gather` (int64 indices) or `torch.index_select` (int32 or int64).
    fn define_gather(
        &self,
        axis: usize,
        select: bool,
        expr: &crate::fusion::Expr,
        out: DType,
    ) -> Py {
        let f = self.f;
        let x = self.operand(&expr.inputs[0], out);
        let Operand::Tensor(index) = expr.inputs[1] else {
            unreachable!("an index is a tensor (fusion::build)")
        };
        let dtype = f.tensors[index].dtype;
        let i = self.value(index);
        let text = match (select, dtype) {
            (false, DType::I64) => format!("torch.gather({}, {axis}, {})", x.text, i.text),
            (false, _) => {
                format!("torch.gather({}, {axis}, {}.long())", x.text, i.at(ATOM))
            }
            (true, DType::I32 | DType::I64) => {
                format!("torch.index_select({}, {axis}, {})", x.text, i.text)
            }
            (true, _) => format!(
                "torch.index_select({}, {axis}, {}.int())",
                x.text,
                i.at(ATOM)
            ),
        };
        Py::new(text, ATOM, out)
    }

    /// `where`, `clamp`, `lerp`, `fma` and the random generator.
    fn define_ternary(
        &self,
        t: TernaryOp,
        expr: &crate::fusion::Expr,
        compute: DType,
        out: DType,
    ) -> Py {
        let x = self.operand(&expr.inputs[0], t.operand_type(0, compute));
        let y = self.operand(&expr.inputs[1], t.operand_type(1, compute));
        let z = self.operand(&expr.inputs[2], t.operand_type(2, compute));
        let call = |name: &str| {
            Py::new(
                format!("torch.{name}({}, {}, {})", tensor(&x), y.text, z.text),
                ATOM,
                out,
            )
        };
        match t {
            TernaryOp::Where => call("where"),
            TernaryOp::Clamp => call("clamp"),
            TernaryOp::Lerp => Py::new(
                format!("torch.lerp({}, {}, {})", tensor(&x), tensor(&y), z.text),
                ATOM,
                out,
            ),
            TernaryOp::Fma => Py::new(
                format!("{} * {} + {}", x.at(MUL), y.at(MUL + 1), z.at(ADD + 1)),
                ADD,
                out,
            ),
            // The generator in torch ops (`random`): the kernel's stream.
            TernaryOp::Rand | TernaryOp::RandN => Py::new(
                format!("_hf_{}({}, {}, {})", t.def().name, x.text, y.text, z.text),
                ATOM,
                out,
            ),
        }
    }

    /// A reduction: `torch.sum` (with `dtype=` where the kernel accumulates wider), `prod` axis
    /// by axis, `any` / `all`, `amax` / `amin`.
    fn define_reduce(
        &self,
        op: ReduceOp,
        axes: &[usize],
        expr: &crate::fusion::Expr,
        compute: DType,
        out: DType,
    ) -> Py {
        let f = self.f;
        // torch reduces no 8-bit float tensor: those are widened to f32 first.
        let input = f.tensors[input_tensor(expr)].dtype;
        let x = self.operand(
            &expr.inputs[0],
            if input.is_fp8() { DType::F32 } else { input },
        );
        let dim = dims(axes);
        match op {
            ReduceOp::Sum if x.dtype == Some(compute) => {
                Py::new(format!("torch.sum({}, dim={dim})", x.text), ATOM, out)
            }
            // The kernel converts every element and accumulates in the compute type;
            // `dtype=` makes torch do the same (without a converted copy on CUDA).
            ReduceOp::Sum => Py::new(
                format!(
                    "torch.sum({}, dim={dim}, dtype={})",
                    x.text,
                    torch_dtype(compute)
                ),
                ATOM,
                out,
            ),
            // `torch.prod` takes one dim: the axes one after the other, last first.
            ReduceOp::Prod => {
                let mut p = x.to(compute);
                for a in axes.iter().rev() {
                    p = Py::new(format!("torch.prod({}, dim={a})", p.text), ATOM, compute);
                }
                p.to(out)
            }
            ReduceOp::Any | ReduceOp::All => {
                let name = if op == ReduceOp::Any { "any" } else { "all" };
                Py::new(format!("torch.{name}({}, dim={dim})", x.text), ATOM, out)
            }
            // The largest of the values converted is the converted largest: exact.
            ReduceOp::Max | ReduceOp::Min => {
                let name = if op == ReduceOp::Max { "amax" } else { "amin" };
                let dtype = x.dtype.unwrap_or(compute);
                Py::new(format!("torch.{name}({}, dim={dim})", x.text), ATOM, dtype).to(out)
            }
        }
    }

    /// `torch.full(shape, value)`.
    fn define_full(&self, t: TensorId, value: f64, out: DType) -> Py {
        let f = self.f;
        let dims: Vec<String> = f.logical(t).iter().map(|&id| self.extent(id)).collect();
        let device = self.device();
        // A one-element tuple keeps its comma.
        let shape = match &dims[..] {
            [one] => format!("({one},)"),
            _ => format!("({})", dims.join(", ")),
        };
        Py::new(
            format!(
                "torch.full({shape}, {}, dtype={}{device})",
                literal(value, out).text,
                torch_dtype(out)
            ),
            ATOM,
            out,
        )
    }

    /// A product of sizes as Python (`x.shape[1] * 64`).
    fn product_text(&self, e: &crate::plan::SizeExpr) -> String {
        match e {
            crate::plan::SizeExpr::Mul(a, b) => {
                format!("{} * {}", self.product_text(a), self.product_text(b))
            }
            _ => self.size_text(e),
        }
    }

    /// A size as Python: a constant, or a symbol as the extent of the first input that has it.
    fn size_text(&self, e: &crate::plan::SizeExpr) -> String {
        let f = self.f;
        if let crate::plan::SizeExpr::Sym(s) = e {
            for &i in &f.inputs {
                for (k, &id) in f.tensors[i].root.iter().enumerate() {
                    if f.ids[id].root_extent.as_ref() == Some(e) {
                        return format!("{}.shape[{k}]", self.names[i]);
                    }
                }
            }
            return s.clone();
        }
        e.to_string()
    }

    /// A factor of a contraction: its base expression with the casts applied, squeezed.
    fn factor(&self, fa: &Factor) -> Py {
        let mut x = self.value(fa.base);
        for &c in &fa.casts {
            x = x.to(c);
        }
        if !fa.squeeze.is_empty() {
            let dtype = x.dtype.unwrap_or(DType::F32);
            x = Py::new(
                format!("{}.squeeze({})", x.at(ATOM), dims(&fa.squeeze)),
                ATOM,
                dtype,
            );
        }
        x
    }

    /// The operands of a contraction as torch sees them: the half tensors under the widening
    /// casts of a half GEMM (cuBLAS multiplies them exactly and accumulates in f32, as the
    /// kernel does), else the factors in the compute type.
    fn operands(&self, c: &Contraction) -> (Py, Py) {
        let operand = |fa: &Factor| -> Py {
            match c.half {
                Some(h) => self.value(fa.base).to(h),
                None => self.factor(fa).to(c.compute),
            }
        };
        (operand(&c.factors[0]), operand(&c.factors[1]))
    }

    /// The contraction as `a @ b` when its layout is one `@` takes
    /// ([`Contraction::matmul_layout`]), a transposed operand written with `.t()` /
    /// `.transpose(-2, -1)`. `x`, `y`: the factors as the call takes them.
    fn matmul(&self, c: &Contraction, (x, y): (Py, Py)) -> Option<MatMul> {
        let layout = c.matmul_layout()?;
        let (a, b) = if layout.a == 0 { (x, y) } else { (y, x) };
        let transposed = |p: &Py| {
            if layout.batch == 0 {
                format!("{}.t()", p.at(ATOM))
            } else {
                format!("{}.transpose(-2, -1)", p.at(ATOM))
            }
        };
        Some(MatMul {
            a: if layout.a_transposed {
                transposed(&a)
            } else {
                a.at(MUL)
            },
            b: if layout.b_transposed {
                transposed(&b)
            } else {
                b.at(UNARY)
            },
            batch: layout.batch,
        })
    }

    fn contract(&self, c: &Contraction) -> Py {
        let [fx, fy] = &c.factors;
        let out_f32 = c.half.is_some() && c.out == DType::F32;
        // Half operands widened to f32, as the fusion does: for the forms with no f32 result
        // from half operands.
        let widened = || {
            (
                self.factor(fx).to(DType::F32),
                self.factor(fy).to(DType::F32),
            )
        };
        if let Some(mm) = self.matmul(c, self.operands(c)) {
            let MatMul { a, b, batch } = mm;
            return match (out_f32, batch) {
                (false, _) => Py::new(format!("{a} @ {b}"), MUL, c.out),
                (true, 0) => Py::new(
                    format!("torch.mm({a}, {b}, out_dtype=torch.float32)"),
                    ATOM,
                    DType::F32,
                ),
                (true, 1) => Py::new(
                    format!("torch.bmm({a}, {b}, out_dtype=torch.float32)"),
                    ATOM,
                    DType::F32,
                ),
                (true, _) => {
                    let mm = self
                        .matmul(c, widened())
                        .expect("the layout does not depend on the operands' dtype");
                    Py::new(format!("{} @ {}", mm.a, mm.b), MUL, DType::F32)
                }
            };
        }
        // A matrix product in a layout `@` does not take (a free or batch axis after the
        // reduced one, several free axes): einsum, which permutes and calls the batched GEMM.
        let letter = |a: usize| (b'a' + a as u8) as char;
        let subscripts = |axes: &[usize]| axes.iter().map(|&a| letter(a)).collect::<String>();
        let kept: Vec<usize> = (0..c.rank).filter(|a| !c.reduced.contains(a)).collect();
        let (x, y) = if out_f32 { widened() } else { self.operands(c) };
        Py::new(
            format!(
                "torch.einsum(\"{},{}->{}\", {}, {})",
                subscripts(&fx.present),
                subscripts(&fy.present),
                subscripts(&kept),
                x.text,
                y.text
            ),
            ATOM,
            c.out,
        )
    }
}

/// `a @ b` of a contraction: the operand texts, bound for `@`, and its batch axes.
struct MatMul {
    a: String,
    b: String,
    batch: usize,
}

fn input_tensor(expr: &crate::fusion::Expr) -> TensorId {
    expr.input_tensors()
        .next()
        .expect("a reduction, cast or broadcast reads a tensor")
}

/// `dim=` of a reduction or squeeze: `1` or `(0, 2)`.
fn dims(axes: &[usize]) -> String {
    match axes {
        [a] => a.to_string(),
        _ => format!(
            "({})",
            axes.iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A literal of the op's compute type as a Python number.
fn literal(v: f64, compute: DType) -> Py {
    let text = if compute.is_integer() {
        format!("{}", compute.round(v) as i64)
    } else if v.is_nan() {
        "float(\"nan\")".into()
    } else if v.is_infinite() {
        format!("float(\"{}inf\")", if v < 0.0 { "-" } else { "" })
    } else {
        // Rust's shortest round-trip form parses back to the same double in Python.
        crate::text::float_literal(v)
    };
    let prec = if text.starts_with('-') { UNARY } else { ATOM };
    Py {
        text,
        prec,
        dtype: None,
    }
}

/// A Python number as a 0-dim tensor, for the torch functions that take only tensors first
/// (torch treats a 0-dim tensor in an op with larger ones as it treats a number).
fn tensor(p: &Py) -> String {
    match p.dtype {
        Some(_) => p.text.clone(),
        None => format!("torch.tensor({})", p.text),
    }
}

fn unary(u: UnaryOp, x: Py, out: DType) -> Py {
    let call = |name: &str| Py::new(format!("torch.{name}({})", x.text), ATOM, out);
    match u {
        UnaryOp::Neg => Py::new(format!("-{}", x.at(UNARY)), UNARY, out),
        UnaryOp::Exp => call("exp"),
        UnaryOp::Relu => call("relu"),
        UnaryOp::Abs => call("abs"),
        UnaryOp::Sqrt => call("sqrt"),
        UnaryOp::Rsqrt => call("rsqrt"),
        // The twin computes the precise tanh for `approximate=hardware` too.
        UnaryOp::Tanh | UnaryOp::TanhAbs | UnaryOp::TanhApprox => call("tanh"),
        UnaryOp::Sigmoid => call("sigmoid"),
        UnaryOp::Log => call("log"),
        UnaryOp::Log2 => call("log2"),
        UnaryOp::Log1p => call("log1p"),
        // Made by the passes in the kernel IR only; the twin is written from the fusion.
        UnaryOp::Exp2 | UnaryOp::Exp2Ftz | UnaryOp::Exp2Fma => call("exp2"),
        UnaryOp::Expm1 => call("expm1"),
        UnaryOp::Erf => call("erf"),
        UnaryOp::Sin => call("sin"),
        UnaryOp::Cos => call("cos"),
        UnaryOp::Floor => call("floor"),
        UnaryOp::Ceil => call("ceil"),
        UnaryOp::Round => call("round"),
        UnaryOp::Trunc => call("trunc"),
        UnaryOp::Reciprocal => call("reciprocal"),
        UnaryOp::Sign => call("sign"),
        UnaryOp::Silu => call("nn.functional.silu"),
        UnaryOp::Gelu => call("nn.functional.gelu"),
        UnaryOp::GeluTanh => Py::new(
            format!("torch.nn.functional.gelu({}, approximate=\"tanh\")", x.text),
            ATOM,
            out,
        ),
        UnaryOp::Softplus => call("nn.functional.softplus"),
        UnaryOp::IsNan => call("isnan"),
        UnaryOp::IsInf => call("isinf"),
        UnaryOp::LogicalNot => call("logical_not"),
        UnaryOp::BitwiseNot => call("bitwise_not"),
    }
}

fn binary(b: BinaryOp, x: Py, y: Py, out: DType) -> Py {
    // Python's comparison, bitwise and shift operators bind more loosely than `+`: the
    // expression is parenthesised whole, its operands at `+`'s precedence.
    let loose = |sym: &str| {
        Py::new(
            format!("({} {sym} {})", x.at(ADD), y.at(ADD + 1)),
            ATOM,
            out,
        )
    };
    let call = |name: &str| {
        Py::new(
            format!("torch.{name}({}, {})", tensor(&x), tensor(&y)),
            ATOM,
            out,
        )
    };
    let infix = |sym: &str, prec: u8| {
        // Left-associative: the right operand must bind tighter.
        Py::new(
            format!("{} {sym} {}", x.at(prec), y.at(prec + 1)),
            prec,
            out,
        )
    };
    match b {
        BinaryOp::Add => infix("+", ADD),
        BinaryOp::Sub => infix("-", ADD),
        BinaryOp::Mul => infix("*", MUL),
        BinaryOp::Div => infix("/", MUL),
        BinaryOp::Pow => Py::new(format!("torch.pow({}, {})", tensor(&x), y.text), ATOM, out),
        BinaryOp::Fmod => Py::new(format!("torch.fmod({}, {})", tensor(&x), y.text), ATOM, out),
        BinaryOp::Remainder => infix("%", MUL),
        BinaryOp::Lt => loose("<"),
        BinaryOp::Le => loose("<="),
        BinaryOp::Gt => loose(">"),
        BinaryOp::Ge => loose(">="),
        BinaryOp::Eq => loose("=="),
        BinaryOp::Ne => loose("!="),
        BinaryOp::LogicalAnd => call("logical_and"),
        BinaryOp::LogicalOr => call("logical_or"),
        BinaryOp::LogicalXor => call("logical_xor"),
        BinaryOp::BitwiseAnd => loose("&"),
        BinaryOp::BitwiseOr => loose("|"),
        BinaryOp::BitwiseXor => loose("^"),
        BinaryOp::ShiftLeft => loose("<<"),
        BinaryOp::ShiftRight => loose(">>"),
        BinaryOp::Max | BinaryOp::Min => {
            let (f, clamp) = if b == BinaryOp::Max {
                ("maximum", "clamp_min")
            } else {
                ("minimum", "clamp_max")
            };
            // torch.maximum takes two tensors; a number bounds through clamp.
            match (x.dtype, y.dtype) {
                (None, _) => Py::new(format!("{}.{clamp}({})", y.at(ATOM), x.text), ATOM, out),
                (_, None) => Py::new(format!("{}.{clamp}({})", x.at(ATOM), y.text), ATOM, out),
                _ => Py::new(format!("torch.{f}({}, {})", x.text, y.text), ATOM, out),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn twin(src: &str) -> String {
        let program = crate::frontend::parse(src).unwrap();
        let fusion = crate::fusion::build(&program.fusion).unwrap();
        emit(&fusion, Some(&program.fusion)).source
    }

    fn body(src: &str) -> Vec<String> {
        twin(src)
            .lines()
            .skip_while(|l| !l.starts_with("def "))
            .skip(2)
            .map(|l| l.trim().to_string())
            .collect()
    }

    #[test]
    fn softmax_keeps_the_named_tensors_and_nests_the_rest() {
        let b = body(
            "fusion softmax {\n  input x: f32[M, N]\n  m = max(x, axis=1)\n  e = exp(x - broadcast(m, axis=1))\n  s = sum(e, axis=1)\n  y = e / broadcast(s, axis=1)\n  output y\n}",
        );
        assert_eq!(
            b,
            [
                "m = torch.amax(x, dim=1)",
                "e = torch.exp(x - m.unsqueeze(1))",
                "s = torch.sum(e, dim=1)",
                "y = e / s.unsqueeze(1)",
                "return y"
            ]
        );
    }

    #[test]
    fn half_inputs_compute_and_accumulate_in_f32() {
        let b = body(
            "fusion f {\n  input x: bf16[M, N]\n  input k: i32[M, N]\n  s = sum(x, axis=1)\n  m = max(x, axis=0)\n  y = exp(x) * broadcast(s, axis=1) + k\n  z = cast(k / 2, f16)\n  output y\n  output z\n  output m\n}",
        );
        assert_eq!(
            b,
            [
                "s = torch.sum(x, dim=1, dtype=torch.float32)",
                "m = torch.amax(x, dim=0).float()",
                "y = torch.exp(x.float()) * s.unsqueeze(1) + k.float()",
                "z = (k.float() / 2.0).half()",
                "return y, z, m"
            ]
        );
    }

    #[test]
    fn matrix_products_become_gemms_in_every_layout() {
        let mm = |inputs: &str, body_: &str| {
            body(&format!("fusion f {{\n{inputs}\n{body_}\n  output c\n}}"))[0].clone()
        };
        assert_eq!(
            mm(
                "  input a: f32[M, K]\n  input b: f32[K, N]",
                "  c = sum(broadcast(a, axis=2) * broadcast(b, axis=0), axis=1)"
            ),
            "c = a @ b"
        );
        assert_eq!(
            mm(
                "  input a: f32[K, M]\n  input b: f32[K, N]",
                "  p = broadcast(a, axis=2) * broadcast(b, axis=1)\n  c = sum(p, axis=0)"
            ),
            "c = a.t() @ b"
        );
        // bf16 widened to f32, summed, rounded to bf16: the bf16 GEMM.
        assert_eq!(
            mm(
                "  input a: bf16[M, K]\n  input b: bf16[N, K]",
                "  ab = cast(broadcast(a, axis=1), f32)\n  bb = cast(broadcast(b, axis=0), f32)\n  s = sum(ab * bb, axis=2)\n  c = cast(s, bf16)"
            ),
            "c = a @ b.t()"
        );
        // The f32 sum used in f32: a half GEMM with an f32 result.
        assert_eq!(
            mm(
                "  input a: f16[M, K]\n  input b: f16[K, N]\n  input bias: f32[N]",
                "  s = sum(broadcast(a, axis=2) * broadcast(b, axis=0), axis=1)\n  c = s + broadcast(bias, axis=0)"
            ),
            "s = torch.mm(a, b, out_dtype=torch.float32)"
        );
        // Batched: the batched matmul, transposed as attention's scores are.
        assert_eq!(
            mm(
                "  input a: f32[B, M, K]\n  input b: f32[B, K, N]",
                "  c = sum(broadcast(a, axis=3) * broadcast(b, axis=1), axis=2)"
            ),
            "c = a @ b"
        );
        assert_eq!(
            mm(
                "  input q: f32[B, H, M, K]\n  input k: f32[B, H, N, K]",
                "  c = sum(broadcast(q, axis=3) * broadcast(k, axis=2), axis=4)"
            ),
            "c = q @ k.transpose(-2, -1)"
        );
        assert_eq!(
            mm(
                "  input a: bf16[B, K, M]\n  input b: bf16[B, K, N]",
                "  s = sum(broadcast(a, axis=3) * broadcast(b, axis=2), axis=1)\n  c = s * 2.0"
            ),
            "s = torch.bmm(a.transpose(-2, -1), b, out_dtype=torch.float32)"
        );
        // A batch axis after the reduced one: no `@` without a permute.
        assert_eq!(
            mm(
                "  input a: f32[M, K, B]\n  input b: f32[K, N, B]",
                "  c = sum(broadcast(a, axis=2) * broadcast(b, axis=0), axis=1)"
            ),
            "c = torch.einsum(\"abd,bcd->acd\", a, b)"
        );
        // Integers have no GEMM: the product stays element-wise.
        assert_eq!(
            mm(
                "  input a: i32[M, K]\n  input b: i32[K, N]",
                "  c = sum(broadcast(a, axis=2) * broadcast(b, axis=0), axis=1)"
            ),
            "c = torch.sum(a.unsqueeze(2) * b.unsqueeze(0), dim=1, dtype=torch.float32)"
        );
    }

    #[test]
    fn sums_of_products_that_are_not_matrix_products_stay_reductions() {
        // A sum of squares (an RMSNorm's), a dot of same-shaped rows, a matrix-vector product,
        // a sum over an axis one factor lacks: the product, then the sum.
        let b = body(
            "fusion f {\n  input x: bf16[M, N]\n  input y: f32[M, N]\n  input w: f32[N]\n  xf = cast(x, f32)\n  ss = sum(xf * xf, axis=1)\n  d = sum(xf * y, axis=1)\n  mv = sum(y * broadcast(w, axis=0), axis=1)\n  c = sum(broadcast(w, axis=0) * y, axis=0)\n  output ss\n  output d\n  output mv\n  output c\n}",
        );
        assert_eq!(
            b,
            [
                "xf = x.float()",
                "ss = torch.sum(xf * xf, dim=1)",
                "d = torch.sum(xf * y, dim=1)",
                "mv = torch.sum(y * w.unsqueeze(0), dim=1)",
                "c = torch.sum(w.unsqueeze(0) * y, dim=0)",
                "return ss, d, mv, c"
            ]
        );
    }

    #[test]
    fn a_gemm_with_a_bias_and_an_activation_is_one_cublaslt_call() {
        let lt = |body_: &str| {
            let src = format!(
                "fusion g {{\n  input a: bf16[M, K]\n  input b: bf16[N, K]\n  input bias: f32[N]\n  s = sum(broadcast(a, axis=1) * broadcast(b, axis=0), axis=2)\n  u = s + broadcast(bias, axis=0)\n{body_}\n  output y\n}}"
            );
            let program = crate::frontend::parse(&src).unwrap();
            let fusion = crate::fusion::build(&program.fusion).unwrap();
            emit_cublaslt(&fusion).map(|(t, act)| {
                let line = t.source.lines().last().unwrap().trim().to_string();
                (line, act)
            })
        };
        let gelu =
            "  y = cast(0.5 * u * (1.0 + tanh(0.7978845608 * (u + 0.044715 * u * u * u))), bf16)";
        assert_eq!(
            lt(gelu),
            Some((
                "return torch._addmm_activation(bias.bfloat16(), a, b.t(), use_gelu=True)".into(),
                Activation::Gelu
            ))
        );
        // The same GELU written another way.
        let gelu2 = "  y = cast(u * sigmoid(1.5957691216 * (u + 0.044715 * u * u * u)), bf16)";
        assert_eq!(lt(gelu2).map(|x| x.1), Some(Activation::Gelu));
        assert_eq!(
            lt("  y = cast(relu(u), bf16)"),
            Some((
                "return torch._addmm_activation(bias.bfloat16(), a, b.t(), use_gelu=False)".into(),
                Activation::Relu
            ))
        );
        assert_eq!(
            lt("  y = cast(u, bf16)"),
            Some((
                "return torch.addmm(bias.bfloat16(), a, b.t())".into(),
                Activation::None
            ))
        );
        // Not an epilogue cuBLASLt has: a scaled GELU, a half GEMM kept in f32, a tanh.
        assert_eq!(lt("  y = cast(1.5 * relu(u), bf16)"), None);
        assert_eq!(lt("  y = relu(u)"), None);
        assert_eq!(lt("  y = cast(tanh(u), bf16)"), None);
    }

    #[test]
    fn names_literals_and_aliases() {
        let b = body(
            "fusion f {\n  input lambda: f64[N]\n  input alpha: f32\n  torch = -lambda * -0.5\n  y = lambda\n  z = max(cast(torch, f32), 0.25) * alpha\n  dead = exp(torch)\n  output y\n  output z\n}",
        );
        assert_eq!(
            b,
            [
                "torch_ = -lambda_ * -0.5",
                "y = lambda_.clone()",
                "z = torch_.float().clamp_min(0.25) * alpha",
                "return y, z"
            ]
        );
    }
}
