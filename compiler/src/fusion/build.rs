//! Builds the fusion IR from the fusion block of a program, checking names, ranks, extents and
//! dtypes. Nested expressions become anonymous tensors named `{result}_{op}`.
//!
//! User names reach the CUDA verbatim, so a name `cuda::reserved_reason` rejects (a C++ keyword,
//! a CUDA or generated name, a name reserved to the implementation) is a located error, as is a
//! literal out of the range of the type it computes in. At most [`MAX_FUSION_OPS`] operations.
//!
//! **Views** (`permute`, `transpose`, `expand`) are ops whose output axes are *joined* to the
//! input's axis classes, as `broadcast` joins a broadcast axis to the axis it meets: a view
//! is a copy whose root axes are the input's in another order (permute), or with a broadcast
//! axis given an extent (expand). No index arithmetic is stored: the indexing pass already
//! computes every access from the loops of the axis classes and each tensor's own root order
//! (its strides), so `y = transpose(x, 0, 1)` reads `x[m * N + n]` in `y`'s loops over
//! `(n, m)`, and a schedule may tile, cache and re-layout a view like any other tensor
//! (`examples/ops/transpose.hf`: a 32 x 32 tile through shared memory, each side with its own
//! thread layout). The price of joining classes: two axes of one tensor must stay in
//! different classes (each is indexed by its own loop), so an op that would join them
//! (`x + transpose(x)`) is a located error. Views that move indices (`slice`, `pad`, `cat`,
//! `reshape`: `build/views.rs`) are not classes of the same extent: their moved axes are new
//! classes, and `passes::indexing` reads the operand (a fusion input, in global memory) at the
//! index the op maps the output's to.

use super::ops::{self, OpKind};
use super::*;
use crate::diag::Diagnostic;
use crate::frontend::ast::{self, Arg, Dim, Item};
// Names are the user's: a seeded fast hash (foldhash), so chosen names cannot collide on
// purpose.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

mod gather;
mod products;

pub use gather::{index_bounds, index_source};
mod sizes;
mod views;

type BResult<T> = Result<T, Diagnostic>;

/// Most operations (tensors computed) in one fusion: lowering is linear in them, and this keeps
/// any program within the service's size limit well under a second.
pub const MAX_FUSION_OPS: usize = 8192;

pub fn build(def: &ast::FusionDef) -> BResult<Fusion> {
    let mut b = Builder {
        f: Fusion {
            name: def.name.clone(),
            tensors: Vec::new(),
            exprs: Vec::new(),
            ids: Vec::new(),
            symbols: Vec::new(),
            counts: Default::default(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            class_parent: Default::default(),
            class_extent_member: Default::default(),
            cluster: None,
            persistent: None,
            online_softmax: Vec::new(),
            welford: Vec::new(),
            online_logsumexp: Vec::new(),
            constraints: Vec::new(),
            propagate_work: 0,
        },
        names: HashMap::new(),
        taken: HashSet::new(),
        name_suffix: HashMap::new(),
        permuted: false,
        tuple_mean: None,
        tuple_built: None,
    };
    for item in &def.items {
        match item {
            Item::Input {
                name,
                dtype,
                dims,
                value,
                loc,
            } => b.input(name, *dtype, dims.as_deref(), value.as_ref(), loc.0)?,
            Item::Let { name, value, loc } => b.let_statement(name, value, loc.0)?,
            Item::LetTuple { names, value, loc } => b.let_tuple(names, value, loc.0)?,
            Item::Output { name, loc } => b.output(name, loc.0)?,
        }
    }
    if b.f.outputs.is_empty() {
        return Err(Diagnostic::new(
            format!("fusion `{}` has no output (add `output NAME`)", def.name),
            def.items.last().map(item_span),
        ));
    }
    if b.f.inputs.iter().all(|&t| b.f.rank(t) == 0) {
        return Err(Diagnostic::new(
            format!(
                "fusion `{}` needs at least one input tensor with axes",
                def.name
            ),
            None,
        ));
    }
    Ok(b.f)
}

#[derive(Clone, Copy)]
enum Value {
    Tensor(TensorId),
    Scalar(f64),
    /// A size symbol written in an expression (`x / N`), or a product of them less a constant
    /// (`N * H`, `N - 1`): a count the kernel reads from the sizes at run time.
    Count(CountId),
}

struct Builder {
    f: Fusion,
    names: HashMap<String, TensorId>,
    /// Every tensor name handed out (anonymous ones included).
    taken: HashSet<String>,
    /// The next numeric suffix to try per anonymous-name stem.
    name_suffix: HashMap<String, usize>,
    /// A permute has been built (from then on, an op that joins two axes of one tensor is an
    /// error).
    permuted: bool,
    /// `v, m = var_mean(...)`: the second name, for the call to take, and the mean it built.
    tuple_mean: Option<String>,
    tuple_built: Option<TensorId>,
}

/// The dtypes a program may name, for messages.
fn dtype_names() -> String {
    DType::ALL
        .iter()
        .map(|d| d.name())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Builder {
    /// `input name: dtype[dims] (= value)`.
    fn input(
        &mut self,
        name: &str,
        dtype: DType,
        dims: Option<&[Dim]>,
        value: Option<&ast::Expr>,
        loc: Span,
    ) -> BResult<()> {
        self.check_new_name(name, loc)?;
        let mut root = Vec::new();
        for d in dims.unwrap_or_default() {
            let extent = match d {
                Dim::Sym(s) => {
                    check_identifier(s, loc)?;
                    if !self.f.symbols.contains(s) {
                        self.f.symbols.push(s.clone());
                    }
                    SizeExpr::Sym(s.clone())
                }
                Dim::Const(c) => SizeExpr::Const(*c),
            };
            root.push(
                self.f
                    .new_id(IterKind::Iteration, IterOrigin::Root, Some(extent)),
            );
        }
        let t = self.add_tensor(name.to_string(), dtype, root, None, Some(loc));
        if let Some(v) = value {
            self.f.tensors[t].value = Some(scalar_value(v, dtype)?);
        }
        self.f.tensors[t].is_input = true;
        self.f.tensors[t].in_memory = dims.is_some_and(|d| d.is_empty());
        self.f.inputs.push(t);
        Ok(())
    }

    /// `name = expression`: the statement's last op is the named tensor.
    fn let_statement(&mut self, name: &str, value: &ast::Expr, loc: Span) -> BResult<()> {
        self.check_new_name(name, loc)?;
        let first_new = TensorId::new(self.f.tensors.len());
        let t = match self.expr(value, name)? {
            Value::Tensor(t) => t,
            Value::Scalar(v) => {
                return Err(Diagnostic::new(
                    format!(
                        "`{name}` is the constant {v}; a tensor must depend on an input"
                    ),
                    Some(loc),
                ))
            }
            Value::Count(c) => {
                return Err(Diagnostic::new(
                    format!(
                        "`{name}` is the size {}; a tensor must depend on an input (full([...], ...) makes a tensor of one value)",
                        self.f.count_size(c)
                    ),
                    Some(loc),
                ))
            }
        };
        // The statement's last op is the named tensor; `y = x` makes a copy.
        let t = if t >= first_new {
            let old = std::mem::take(&mut self.f.tensors[t].name);
            self.names.remove(&old);
            t
        } else {
            self.op(Op::Set, vec![Operand::Tensor(t)], name, Some(loc))?
        };
        self.f.tensors[t].name = name.to_string();
        self.f.tensors[t].written = None;
        self.taken.insert(name.to_string());
        self.f.tensors[t].span = Some(loc);
        self.names.insert(name.to_string(), t);
        Ok(())
    }

    /// `a, b = call(...)`: one name per tensor the call gives.
    fn let_tuple(
        &mut self,
        names: &[(String, ast::Loc)],
        value: &ast::Expr,
        loc: Span,
    ) -> BResult<()> {
        for (i, (name, at)) in names.iter().enumerate() {
            self.check_new_name(name, at.0)?;
            if names[..i].iter().any(|(n, _)| n == name) {
                return Err(Diagnostic::new(
                    format!("`{name}` is assigned twice in one statement"),
                    Some(at.0),
                ));
            }
        }
        let tensors = self.tuple(names, value)?;
        for ((name, at), t) in names.iter().zip(tensors) {
            let old = std::mem::take(&mut self.f.tensors[t].name);
            self.names.remove(&old);
            self.f.tensors[t].name = name.clone();
            self.f.tensors[t].written = None;
            self.taken.insert(name.clone());
            self.f.tensors[t].span = Some(at.0.join(loc));
            self.names.insert(name.clone(), t);
        }
        Ok(())
    }

    /// `output name`.
    fn output(&mut self, name: &str, loc: Span) -> BResult<()> {
        let t = *self
            .names
            .get(name)
            .ok_or_else(|| Diagnostic::new(format!("unknown tensor `{name}`"), Some(loc)))?;
        if self.f.tensors[t].is_input {
            return Err(Diagnostic::new(
                format!(
                    "`{name}` is an input; an output must be computed (write `y = {name}` first)"
                ),
                Some(loc),
            ));
        }
        if self.f.tensors[t].is_output {
            return Err(Diagnostic::new(
                format!("`{name}` is already an output"),
                Some(loc),
            ));
        }
        self.f.tensors[t].is_output = true;
        self.f.tensors[t].memory = MemoryType::Global;
        self.f.outputs.push(t);
        Ok(())
    }

    fn check_new_name(&self, name: &str, span: Span) -> BResult<()> {
        check_identifier(name, span)?;
        if self.names.contains_key(name) {
            return Err(Diagnostic::new(
                format!("`{name}` is already defined"),
                Some(span),
            ));
        }
        if DType::parse(name).is_some() || self.f.symbols.iter().any(|s| s == name) {
            return Err(Diagnostic::new(
                format!("`{name}` is a dtype or size symbol, not a tensor name"),
                Some(span),
            ));
        }
        Ok(())
    }

    fn add_tensor(
        &mut self,
        name: String,
        dtype: DType,
        root: Vec<IterId>,
        def: Option<ExprId>,
        span: Option<Span>,
    ) -> TensorId {
        // An intermediate lives in registers until the schedule says otherwise; an input is
        // global memory.
        let memory = if def.is_none() {
            MemoryType::Global
        } else {
            MemoryType::Local
        };
        let t = super::transform::push_tensor(&mut self.f, &name, dtype, root, memory, span);
        self.f.tensors[t].definition = def;
        self.taken.insert(name.clone());
        self.names.entry(name).or_insert(t);
        t
    }

    /// `{base}_{op}`, or the first free `{base}_{op}{k}`: a hash lookup per candidate, and the
    /// search for a stem resumes where it stopped, so a long expression names its anonymous
    /// tensors in linear time.
    fn fresh_name(&mut self, base: &str, op: &str) -> String {
        let stem = format!("{base}_{op}");
        if !self.taken.contains(&stem) {
            return stem;
        }
        let k = match self.name_suffix.get_mut(&stem) {
            Some(k) => k,
            None => self.name_suffix.entry(stem.clone()).or_insert(2),
        };
        loop {
            let name = format!("{stem}{k}");
            *k += 1;
            if !self.taken.contains(&name) {
                return name;
            }
        }
    }

    /// The value of `e`; a tensor made for it gets `e`'s text ([`super::Tensor::written`])
    /// when the text is short (longer ones are named by their location alone, and printing
    /// only short ones keeps the builder linear in the program's size).
    fn expr(&mut self, e: &ast::Expr, dest: &str) -> BResult<Value> {
        /// The longest expression text a message quotes.
        const MAX_WRITTEN: usize = 80;
        let first_new = TensorId::new(self.f.tensors.len());
        let value = self.expr_value(e, dest)?;
        let span = e.loc();
        if let Value::Tensor(t) = value {
            if t >= first_new && span.end - span.start <= MAX_WRITTEN {
                self.f.tensors[t].written = Some(crate::frontend::printer::expr(e));
            }
        }
        Ok(value)
    }

    fn expr_value(&mut self, e: &ast::Expr, dest: &str) -> BResult<Value> {
        use ast::Expr as E;
        match e {
            E::Name(n, loc) => match self.names.get(n) {
                Some(&t) => Ok(Value::Tensor(t)),
                None => self.size_symbol(n, loc.0),
            },
            E::Int(i, _) => Ok(Value::Scalar(*i as f64)),
            E::Float(v, _, _) => Ok(Value::Scalar(*v)),
            E::Neg(inner, loc) => match self.expr(inner, dest)? {
                Value::Scalar(v) => Ok(Value::Scalar(-v)),
                Value::Count(_) => Err(Diagnostic::new(
                    "a negated size is not a tensor: write it with a tensor operand (x * -N is -(x * N))",
                    Some(loc.0),
                )),
                Value::Tensor(t) => Ok(Value::Tensor(self.op(
                    Op::Unary(UnaryOp::Neg),
                    vec![Operand::Tensor(t)],
                    dest,
                    Some(loc.0),
                )?)),
            },
            E::Binary(op, l, r, loc) => {
                let op = match op {
                    ast::BinOp::Add => BinaryOp::Add,
                    ast::BinOp::Sub => BinaryOp::Sub,
                    ast::BinOp::Mul => BinaryOp::Mul,
                    ast::BinOp::Div => BinaryOp::Div,
                    ast::BinOp::Lt => BinaryOp::Lt,
                    ast::BinOp::Le => BinaryOp::Le,
                    ast::BinOp::Gt => BinaryOp::Gt,
                    ast::BinOp::Ge => BinaryOp::Ge,
                    ast::BinOp::Eq => BinaryOp::Eq,
                    ast::BinOp::Ne => BinaryOp::Ne,
                };
                let (a, b) = (self.expr(l, dest)?, self.expr(r, dest)?);
                self.binary(op, a, b, dest, loc.0)
            }
            E::List(_, loc) => Err(Diagnostic::new(
                "a list is only allowed as an `axis=` argument",
                Some(loc.0),
            )),
            E::Call { func, args, loc } => self.call(func, args, dest, loc.0),
        }
    }

    fn binary(
        &mut self,
        op: BinaryOp,
        a: Value,
        b: Value,
        dest: &str,
        span: Span,
    ) -> BResult<Value> {
        self.elementwise(Op::Binary(op), vec![a, b], dest, span)
    }

    fn positional(&mut self, args: &[Arg], dest: &str) -> BResult<Vec<(Value, Span)>> {
        let mut out = Vec::new();
        for a in args {
            if let Arg::Pos(e) = a {
                if let ast::Expr::Name(n, loc) = e {
                    if let Some(d) = DType::parse(n) {
                        // dtype arguments (cast) are handled by the caller
                        let _ = d;
                        out.push((Value::Scalar(f64::NAN), loc.0));
                        continue;
                    }
                }
                let v = self.expr(e, dest)?;
                out.push((v, e.loc()));
            }
        }
        Ok(out)
    }

    fn axes_arg(
        &self,
        args: &[Arg],
        call: Span,
        rank: usize,
        extra: usize,
        what: &str,
    ) -> BResult<Vec<usize>> {
        let mut found = None;
        for a in args {
            match a {
                Arg::Named { name, value, loc } if name == "axis" || name == "axes" => {
                    let items: Vec<&ast::Expr> = match value {
                        ast::Expr::List(items, _) => items.iter().collect(),
                        other => vec![other],
                    };
                    let mut axes = Vec::new();
                    for it in items {
                        let (v, sp) = match it {
                            ast::Expr::Int(i, l) => (*i, l.0),
                            ast::Expr::Neg(inner, l) => match **inner {
                                ast::Expr::Int(i, _) => (-i, l.0),
                                _ => {
                                    return Err(Diagnostic::new(
                                        "an axis must be an integer",
                                        Some(it.loc()),
                                    ))
                                }
                            },
                            _ => {
                                return Err(Diagnostic::new(
                                    "an axis must be an integer",
                                    Some(it.loc()),
                                ))
                            }
                        };
                        let n = (rank + extra) as i64;
                        let ax = if v < 0 { v + n } else { v };
                        if ax < 0 || ax >= n {
                            return Err(Diagnostic::new(
                                format!(
                                    "{what}: axis {v} is out of range for a result of rank {n}"
                                ),
                                Some(sp),
                            ));
                        }
                        if axes.contains(&(ax as usize)) {
                            return Err(Diagnostic::new(
                                format!("{what}: axis {v} is listed twice"),
                                Some(sp),
                            ));
                        }
                        axes.push(ax as usize);
                    }
                    if axes.is_empty() {
                        return Err(Diagnostic::new(
                            format!("{what}: give at least one axis"),
                            Some(*loc).map(|l| l.0),
                        ));
                    }
                    crate::id::sort_by_position(&mut axes, |&a| a);
                    found = Some(axes);
                }
                Arg::Named { name, loc, .. } => {
                    return Err(Diagnostic::new(
                        format!("{what}: unknown argument `{name}`"),
                        Some(loc.0),
                    ))
                }
                Arg::Pos(_) => {}
            }
        }
        found.ok_or_else(|| Diagnostic::new(format!("{what} needs `axis=`"), Some(call)))
    }

    fn call(&mut self, func: &str, args: &[Arg], dest: &str, span: Span) -> BResult<Value> {
        let Some(def) = ops::lookup(func) else {
            return Err(Diagnostic::new(
                format!(
                    "unknown function `{func}` (expected one of: {})",
                    ops::names()
                ),
                Some(span),
            ));
        };
        // Taken before the operands are built: a `var_mean` among them gives no tuple.
        let tuple_mean = match def.kind {
            OpKind::VarMean(_) => self.tuple_mean.take(),
            _ => None,
        };
        let has_axis = args
            .iter()
            .any(|a| matches!(a, Arg::Named { name, .. } if name == "axis" || name == "axes"));
        check_named_args(func, def, args, has_axis)?;
        if def.kind == OpKind::Full {
            return Ok(Value::Tensor(self.full(args, dest, span)?));
        }
        if def.kind == OpKind::Reshape {
            return Ok(Value::Tensor(self.reshape(args, dest, span)?));
        }
        if matches!(def.kind, OpKind::MatMul | OpKind::Linear) {
            return Ok(Value::Tensor(
                self.product_call(func, def, args, has_axis, dest, span)?,
            ));
        }
        let pos = self.call_operands(func, def, args, has_axis, dest, span)?;
        let tensor_arg = |pos: &[(Value, Span)], i: usize| tensor_operand(func, pos, i);
        let values = |pos: Vec<(Value, Span)>| pos.into_iter().map(|p| p.0).collect::<Vec<_>>();
        let tensor = |t: BResult<TensorId>| t.map(Value::Tensor);
        match def.kind {
            OpKind::Unary(mut u) => {
                // `gelu(x, approximate=none|tanh)`: which GELU; `tanh(x,
                // approximate=none|hardware)`: precise, or the hardware's approximation.
                u = match u {
                    UnaryOp::Gelu => Self::approximate_form(
                        args,
                        u,
                        ("tanh", UnaryOp::GeluTanh),
                        "`none` (exact, the default) or `tanh`",
                    )?,
                    UnaryOp::Tanh => Self::approximate_form(
                        args,
                        u,
                        ("hardware", UnaryOp::TanhApprox),
                        "`none` (precise, the default) or `hardware` (PTX tanh.approx.f32, \
                         relative error about 2^-11)",
                    )?,
                    u => u,
                };
                // `~` of a bool is `not` (on 0 and 1 as i32 it would give -1 and -2).
                if u == UnaryOp::BitwiseNot
                    && matches!(pos[0].0, Value::Tensor(t) if self.f.tensors[t].dtype == DType::Bool)
                {
                    u = UnaryOp::LogicalNot;
                }
                self.elementwise(Op::Unary(u), values(pos), dest, span)
            }
            OpKind::Binary(b) | OpKind::ElementwiseOrReduce(b, _) if !has_axis => {
                self.elementwise(Op::Binary(b), values(pos), dest, span)
            }
            // A constant condition picks its value here.
            OpKind::Ternary(TernaryOp::Where) if matches!(pos[0].0, Value::Scalar(_)) => {
                let mut pos = values(pos).into_iter();
                let (c, a, b) = (pos.next(), pos.next(), pos.next());
                match (c, a, b) {
                    (Some(Value::Scalar(c)), Some(a), Some(b)) => Ok(if c != 0.0 { a } else { b }),
                    _ => unreachable!("where takes three operands (checked above)"),
                }
            }
            OpKind::Ternary(t) => self.elementwise(Op::Ternary(t), values(pos), dest, span),
            OpKind::Reduce(op) | OpKind::ElementwiseOrReduce(_, op) => {
                let t = tensor_arg(&pos, 0)?;
                let rank = self.f.rank(t);
                let axes = self.axes_arg(args, span, rank, 0, func)?;
                let reduce = Op::Reduce { op, axes };
                tensor(self.op(reduce, vec![Operand::Tensor(t)], dest, Some(span)))
            }
            OpKind::Full => unreachable!("built above"),
            OpKind::Random(generator) => {
                let x = tensor_arg(&pos, 0)?;
                let key = [pos[1], pos[2]];
                tensor(self.random(generator, x, key, dest, span))
            }
            OpKind::Iota => {
                let t = tensor_arg(&pos, 0)?;
                let axis = self.one_axis(args, span, self.f.rank(t), func)?;
                tensor(self.iota(t, axis, dest, span))
            }
            OpKind::Composite(_) | OpKind::VarMean(_) => {
                let t = tensor_arg(&pos, 0)?;
                tensor(self.composite_call(func, def.kind, args, t, tuple_mean, dest, span))
            }
            OpKind::Binary(_) => unreachable!("a binary op has no `axis=` (checked above)"),
            OpKind::Broadcast => {
                let t = tensor_arg(&pos, 0)?;
                tensor(self.broadcast_call(args, t, dest, span))
            }
            OpKind::Cast => {
                let t = tensor_arg(&pos, 0)?;
                tensor(self.cast_call(args, t, dest, span))
            }
            OpKind::Set => {
                let t = tensor_arg(&pos, 0)?;
                tensor(self.op_on(Op::Set, t, dest, span))
            }
            OpKind::Permute | OpKind::Transpose => {
                let t = tensor_arg(&pos, 0)?;
                let transpose = def.kind == OpKind::Transpose;
                tensor(self.permute_call(func, transpose, args, &pos, t, dest, span))
            }
            OpKind::Slice => {
                let t = tensor_arg(&pos, 0)?;
                tensor(self.slice(args, t, pos[0].1, dest, span))
            }
            OpKind::Pad => {
                let t = tensor_arg(&pos, 0)?;
                tensor(self.pad(args, t, pos[0].1, dest, span))
            }
            OpKind::Cat => {
                let operands = [
                    (tensor_arg(&pos, 0)?, pos[0].1),
                    (tensor_arg(&pos, 1)?, pos[1].1),
                ];
                tensor(self.cat(args, operands, dest, span))
            }
            OpKind::Reshape => unreachable!("built above"),
            OpKind::ExpandBlocks => {
                let t = tensor_arg(&pos, 0)?;
                tensor(self.expand_blocks(args, t, pos[0].1, dest, span))
            }
            OpKind::MatMul | OpKind::Linear => unreachable!("built above"),
            OpKind::Gather | OpKind::IndexSelect => {
                let select = def.kind == OpKind::IndexSelect;
                tensor(self.gather_call(func, select, args, &pos, dest, span))
            }
            OpKind::Expand => {
                let t = tensor_arg(&pos, 0)?;
                tensor(self.expand_call(args, t, dest, span))
            }
        }
    }

    /// A call's positional operands, built, and checked against the op's arity.
    fn call_operands(
        &mut self,
        func: &str,
        def: &ops::OpDef,
        args: &[Arg],
        has_axis: bool,
        dest: &str,
        span: Span,
    ) -> BResult<Vec<(Value, Span)>> {
        // `cast(x, f8)`: a name that is no dtype is a misspelt dtype, not an unknown tensor.
        if def.kind == OpKind::Cast {
            if let Some(Arg::Pos(ast::Expr::Name(n, loc))) = args.get(1) {
                if DType::parse(n).is_none() {
                    return Err(Diagnostic::new(
                        format!("unknown dtype `{n}` (expected one of: {})", dtype_names()),
                        Some(loc.0),
                    ));
                }
            }
        }
        let pos = self.positional(args, dest)?;
        let arity = match def.kind {
            OpKind::ElementwiseOrReduce(..) if has_axis => 1,
            // The bias is optional.
            OpKind::Linear if pos.len() == 2 => 2,
            _ => def.arity,
        };
        if pos.len() != arity {
            return Err(Diagnostic::new(
                format!(
                    "`{func}` takes {arity} operand{}, got {} (written {})",
                    if arity == 1 { "" } else { "s" },
                    pos.len(),
                    def.signature
                ),
                Some(span),
            ));
        }
        Ok(pos)
    }

    /// `argmax` / `argmin`, the composites (`mean`, `var`, `logsumexp`, ...) and `var_mean`
    /// (whose mean is named by the tuple's second name, `tuple_mean`).
    #[allow(clippy::too_many_arguments)]
    fn composite_call(
        &mut self,
        func: &str,
        kind: OpKind,
        args: &[Arg],
        t: TensorId,
        tuple_mean: Option<String>,
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        let rank = self.f.rank(t);
        if let OpKind::Composite(op @ (ops::CompositeOp::ArgMax | ops::CompositeOp::ArgMin)) = kind
        {
            let axis = self.one_axis(args, span, rank, func)?;
            if self.f.tensors[t].dtype == DType::Bool {
                return Err(Diagnostic::new(
                    format!(
                        "`{func}` needs numbers, and `{}` is bool (cast(x, i32) first)",
                        self.f.tensors[t].name
                    ),
                    Some(span),
                ));
            }
            return self.composite(op, t, vec![axis], 0.0, None, dest, span);
        }
        let correction = correction_arg(args)?;
        let axis_args: Vec<Arg> = args
            .iter()
            .filter(|a| !matches!(a, Arg::Named { name, .. } if name == "correction"))
            .cloned()
            .collect();
        let axes = self.axes_arg(&axis_args, span, rank, 0, func)?;
        let op = match kind {
            OpKind::Composite(op) => op,
            _ => {
                // `var_mean`: the mean (named by the tuple's second name), then the variance
                // from it.
                let Some(mean_name) = tuple_mean else {
                    return Err(Diagnostic::new(
                        format!("`{func}` gives two tensors, the variance and the mean: assign both, `v, m = {func}(...)`"),
                        Some(span),
                    ));
                };
                let mean = ops::CompositeOp::Mean;
                let m = self.composite(mean, t, axes.clone(), 0.0, None, &mean_name, span)?;
                let var = ops::CompositeOp::Var;
                let v = self.composite(var, t, axes, correction, Some(m), dest, span)?;
                self.tuple_built = Some(m);
                return Ok(v);
            }
        };
        self.composite(op, t, axes, correction, None, dest, span)
    }

    /// `broadcast(x, axis=...)`: new axes of extent one at the listed places.
    fn broadcast_call(
        &mut self,
        args: &[Arg],
        t: TensorId,
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        let rank = self.f.rank(t);
        let n_new = match args.iter().find_map(|a| match a {
            Arg::Named {
                value: ast::Expr::List(items, _),
                ..
            } => Some(items.len()),
            Arg::Named { .. } => Some(1),
            _ => None,
        }) {
            Some(n) => n,
            None => return Err(Diagnostic::new("broadcast needs `axis=`", Some(span))),
        };
        let axes = self.axes_arg(args, span, rank, n_new, "broadcast")?;
        self.op_on(Op::Broadcast { axes }, t, dest, span)
    }

    /// `cast(x, dtype)`, with `saturate=true` clamping to the type's largest finite value first.
    fn cast_call(
        &mut self,
        args: &[Arg],
        t: TensorId,
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        let dtype = match &args[1] {
            Arg::Pos(ast::Expr::Name(n, loc)) => DType::parse(n)
                .ok_or_else(|| Diagnostic::new(format!("unknown dtype `{n}`"), Some(loc.0)))?,
            Arg::Pos(e) => {
                return Err(Diagnostic::new(
                    format!("expected a dtype ({})", dtype_names()),
                    Some(e.loc()),
                ))
            }
            Arg::Named { loc, .. } => return Err(Diagnostic::new("expected a dtype", Some(loc.0))),
        };
        let mut input = t;
        let from = self.f.tensors[t].dtype;
        // An integer source already fits a float type's range: nothing to clamp.
        let fits = dtype.is_float()
            && (from == DType::Bool
                || from
                    .int_range()
                    .is_some_and(|(_, hi)| hi <= dtype.max_finite().unwrap_or(0.0)));
        if self.saturate_arg(args)? && !fits {
            // A saturating cast clamps to the largest finite value first (NaN stays
            // NaN), as a torch user writes it: x.clamp(-448, 448).to(float8_e4m3fn).
            let Some(max) = dtype.max_finite() else {
                return Err(Diagnostic::new(
                    format!("`saturate=` is for casts to a float type, and this one is to {dtype}"),
                    Some(span),
                ));
            };
            input = self.op(
                Op::Ternary(TernaryOp::Clamp),
                vec![
                    Operand::Tensor(t),
                    Operand::Scalar(-max),
                    Operand::Scalar(max),
                ],
                dest,
                Some(span),
            )?;
        }
        self.op_on(Op::Cast(dtype), input, dest, span)
    }

    /// `transpose(x, a, b)` (two axes swapped) and `permute(x, dims=[...])`.
    #[allow(clippy::too_many_arguments)]
    fn permute_call(
        &mut self,
        func: &str,
        transpose: bool,
        args: &[Arg],
        pos: &[(Value, Span)],
        t: TensorId,
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        let rank = self.f.rank(t);
        let name = &self.f.tensors[t].name;
        let axis = |v: f64, at: Span| -> BResult<usize> {
            let r = rank as f64;
            if v.fract() != 0.0 || v < -r || v >= r {
                return Err(Diagnostic::new(
                    format!("`{func}`: {v} is not an axis of `{name}` (rank {rank})"),
                    Some(at),
                ));
            }
            Ok(if v < 0.0 {
                (v + r) as usize
            } else {
                v as usize
            })
        };
        let dims = if transpose {
            let number = |i: usize| match pos[i] {
                (Value::Scalar(v), at) => axis(v, at),
                (_, at) => Err(Diagnostic::new(
                    format!("`{func}` takes two axis numbers after the tensor"),
                    Some(at),
                )),
            };
            let (a, b) = (number(1)?, number(2)?);
            let mut dims: Vec<usize> = (0..rank).collect();
            dims.swap(a, b);
            dims
        } else {
            let Some((items, at)) = named_list(args, "dims") else {
                return Err(Diagnostic::new(
                    "permute needs `dims=[...]`, the new order of the axes",
                    Some(span),
                ));
            };
            let mut dims = Vec::new();
            for item in items {
                dims.push(axis(literal_number(item)?, item.loc())?);
            }
            let mut sorted = dims.clone();
            sorted.sort_unstable();
            if sorted != (0..rank).collect::<Vec<_>>() {
                return Err(Diagnostic::new(
                    format!(
                        "`dims=` must list each of the {rank} axes of `{name}` once, in the new order"
                    ),
                    Some(at),
                ));
            }
            dims
        };
        self.op_on(Op::Permute { dims }, t, dest, span)
    }

    /// `gather(x, index, axis=a)` / `take_along_axis`, and `index_select(x, a, index)`.
    fn gather_call(
        &mut self,
        func: &str,
        select: bool,
        args: &[Arg],
        pos: &[(Value, Span)],
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        let (x, index) = if select { (0, 2) } else { (0, 1) };
        let operands = [
            (tensor_operand(func, pos, x)?, pos[x].1),
            (tensor_operand(func, pos, index)?, pos[index].1),
        ];
        let axis = if select {
            match pos[1] {
                (Value::Scalar(v), at) => (v, at),
                (_, at) => {
                    return Err(Diagnostic::new(
                        "`index_select` takes the axis, a number, between the tensor and the index (written index_select(x, 0, index))",
                        Some(at),
                    ))
                }
            }
        } else {
            let axis = self.one_axis(args, span, self.f.rank(operands[0].0), func)?;
            (axis as f64, span)
        };
        self.gather(select, operands, axis, dest, span)
    }

    /// `expand(x, shape=[...])`: axes of extent one stretched to the listed extents.
    fn expand_call(
        &mut self,
        args: &[Arg],
        t: TensorId,
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        let rank = self.f.rank(t);
        let Some((items, at)) = named_list(args, "shape") else {
            return Err(Diagnostic::new(
                "expand needs `shape=[...]`, an extent for every axis",
                Some(span),
            ));
        };
        if items.len() != rank {
            return Err(Diagnostic::new(
                format!(
                    "`shape=` has {} extents and `{}` has rank {rank}",
                    items.len(),
                    self.f.tensors[t].name
                ),
                Some(at),
            ));
        }
        let mut shape = Vec::new();
        for item in items {
            shape.push(match item {
                ast::Expr::Int(c, _) if *c >= 1 => SizeExpr::Const(*c),
                ast::Expr::Name(s, _) if self.f.symbols.contains(s) => SizeExpr::Sym(s.clone()),
                other => {
                    return Err(Diagnostic::new(
                        "an extent is a size symbol of an input or a positive integer",
                        Some(other.loc()),
                    ))
                }
            });
        }
        self.op_on(Op::Expand { shape }, t, dest, span)
    }

    /// `cast(x, dtype, saturate=true|false)`: whether out-of-range values clamp to the
    /// largest finite value (false, torch's conversion, when not given).
    fn saturate_arg(&self, args: &[Arg]) -> BResult<bool> {
        for a in args {
            if let Arg::Named { value, loc, .. } = a {
                return match value {
                    ast::Expr::Name(n, _) if n == "true" => Ok(true),
                    ast::Expr::Name(n, _) if n == "false" => Ok(false),
                    _ => Err(Diagnostic::new(
                        "`saturate=` is `true` or `false`",
                        Some(loc.0),
                    )),
                };
            }
        }
        Ok(false)
    }

    /// The ops of a [`ops::CompositeOp`] call on `x` over `axes` (see its variants), recorded on
    /// the result for the torch twin.
    /// `mean`: for `var`, the mean of `x` over `axes` already built (`var_mean`'s), which the
    /// variance reads instead of summing `x` again.
    #[allow(clippy::too_many_arguments)]
    fn composite(
        &mut self,
        op: ops::CompositeOp,
        x: TensorId,
        axes: Vec<usize>,
        correction: f64,
        mean: Option<TensorId>,
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        use ops::CompositeOp as C;
        let first = TensorId::new(self.f.tensors.len());
        let at = Some(span);
        let logical = self.f.logical(x);
        let reduced: Vec<IterId> = axes.iter().map(|&a| logical[a]).collect();
        if let Some(k) = axes
            .iter()
            .find(|&&a| self.f.ids[logical[a]].kind == IterKind::Broadcast)
        {
            // (`sum` says the same; said here before a derived op would say it of its operand.)
            return Err(Diagnostic::new(
                format!(
                    "{}: axis {k} of `{}` is a broadcast axis and cannot be reduced",
                    op.name(),
                    self.f.tensors[x].name
                ),
                at,
            ));
        }
        let r = CompositeParts {
            axes: &axes,
            reduced: &reduced,
            dest,
            at,
        };
        let out = match op {
            C::Mean => {
                let s = r.reduce(self, ReduceOp::Sum, x)?;
                let n = r.count(self, 0.0);
                r.binary(self, BinaryOp::Div, Operand::Tensor(s), n)?
            }
            C::Var => {
                let m = match mean {
                    Some(m) => m,
                    None => {
                        let s = r.reduce(self, ReduceOp::Sum, x)?;
                        let n = r.count(self, 0.0);
                        r.binary(self, BinaryOp::Div, Operand::Tensor(s), n)?
                    }
                };
                let m = r.back(self, m)?;
                let d = r.binary(self, BinaryOp::Sub, Operand::Tensor(x), Operand::Tensor(m))?;
                let sq = r.binary(self, BinaryOp::Mul, Operand::Tensor(d), Operand::Tensor(d))?;
                let ss = r.reduce(self, ReduceOp::Sum, sq)?;
                let dof = r.count(self, correction);
                r.binary(self, BinaryOp::Div, Operand::Tensor(ss), dof)?
            }
            C::LogSumExp => self.log_sum_exp(&r, x)?,
            C::ArgMax | C::ArgMin => self.arg_extreme(&r, op == C::ArgMax, x, span)?,
        };
        self.f.tensors[out].composite = Some(Composite {
            op,
            input: x,
            axes,
            correction,
            first,
        });
        Ok(out)
    }

    /// `logsumexp`: the maximum, shifted by 0 where it is infinite (torch's rule), plus the log
    /// of the sum of the shifted exponentials.
    fn log_sum_exp(&mut self, r: &CompositeParts, x: TensorId) -> BResult<TensorId> {
        let m = r.reduce(self, ReduceOp::Max, x)?;
        // torch: an infinite maximum is shifted by 0 instead (x - inf would be NaN).
        let inf = self.op(
            Op::Unary(UnaryOp::IsInf),
            vec![Operand::Tensor(m)],
            r.dest,
            r.at,
        )?;
        let shift = self.op(
            Op::Ternary(TernaryOp::Where),
            vec![
                Operand::Tensor(inf),
                Operand::Scalar(0.0),
                Operand::Tensor(m),
            ],
            r.dest,
            r.at,
        )?;
        let wide = r.back(self, shift)?;
        let d = r.binary(
            self,
            BinaryOp::Sub,
            Operand::Tensor(x),
            Operand::Tensor(wide),
        )?;
        let e = self.op(
            Op::Unary(UnaryOp::Exp),
            vec![Operand::Tensor(d)],
            r.dest,
            r.at,
        )?;
        let s = r.reduce(self, ReduceOp::Sum, e)?;
        let l = self.op(
            Op::Unary(UnaryOp::Log),
            vec![Operand::Tensor(s)],
            r.dest,
            r.at,
        )?;
        r.binary(
            self,
            BinaryOp::Add,
            Operand::Tensor(l),
            Operand::Tensor(shift),
        )
    }

    /// `argmax` / `argmin`: the first index of the extreme along the axis (a NaN's index wins,
    /// as in torch), as the minimum of the hit indices shifted past the axis' extent.
    fn arg_extreme(
        &mut self,
        r: &CompositeParts,
        max: bool,
        x: TensorId,
        span: Span,
    ) -> BResult<TensorId> {
        let pick = if max { ReduceOp::Max } else { ReduceOp::Min };
        let best = r.reduce(self, pick, x)?;
        let best = r.back(self, best)?;
        let hit = r.binary(
            self,
            BinaryOp::Eq,
            Operand::Tensor(x),
            Operand::Tensor(best),
        )?;
        let index = self.iota(x, r.axes[0], r.dest, span)?;
        let n = r.count(self, 0.0);
        let shifted = r.binary(self, BinaryOp::Add, Operand::Tensor(index), n)?;
        let never = Operand::Scalar(f64::from(i32::MAX));
        let select = |b: &mut Self, c: TensorId, yes: Operand, no: Operand| {
            b.op(
                Op::Ternary(TernaryOp::Where),
                vec![Operand::Tensor(c), yes, no],
                r.dest,
                r.at,
            )
        };
        let mut key = select(self, hit, Operand::Tensor(shifted), never)?;
        if self.f.tensors[x].dtype.is_float() {
            // A NaN is torch's maximum and minimum: its index, unshifted, wins.
            let nan = self.op(
                Op::Unary(UnaryOp::IsNan),
                vec![Operand::Tensor(x)],
                r.dest,
                r.at,
            )?;
            key = select(self, nan, Operand::Tensor(index), Operand::Tensor(key))?;
        }
        let least = r.reduce(self, ReduceOp::Min, key)?;
        let over = r.binary(self, BinaryOp::Ge, Operand::Tensor(least), n)?;
        let less = r.binary(self, BinaryOp::Sub, Operand::Tensor(least), n)?;
        select(self, over, Operand::Tensor(less), Operand::Tensor(least))
    }

    /// The form of a unary op with an `approximate=` argument (`gelu`, `tanh`): `exact` when it
    /// is absent or `none`, `approximate` for the `other` keyword; `what` says both, for the
    /// located error on anything else.
    fn approximate_form(
        args: &[Arg],
        exact: UnaryOp,
        (other, approximate): (&str, UnaryOp),
        what: &str,
    ) -> BResult<UnaryOp> {
        let Some((value, loc)) = args.iter().find_map(|a| match a {
            Arg::Named { value, loc, .. } => Some((value, loc)),
            _ => None,
        }) else {
            return Ok(exact);
        };
        match value {
            ast::Expr::Name(n, _) if n == "none" => Ok(exact),
            ast::Expr::Name(n, _) if n == other => Ok(approximate),
            _ => Err(Diagnostic::new(
                format!("`approximate=` is {what}"),
                Some(loc.0),
            )),
        }
    }

    /// An elementwise op of these values: folded when every one is a number.
    fn elementwise(
        &mut self,
        op: Op,
        values: Vec<Value>,
        dest: &str,
        span: Span,
    ) -> BResult<Value> {
        let numbers: Option<Vec<f64>> = values
            .iter()
            .map(|v| match v {
                Value::Scalar(x) => Some(*x),
                Value::Tensor(_) | Value::Count(_) => None,
            })
            .collect();
        if let Some(n) = numbers {
            return Ok(Value::Scalar(match (&op, &n[..]) {
                (Op::Unary(u), [x]) => u.eval(*x),
                (Op::Binary(b), [x, y]) => b.eval(*x, *y),
                (Op::Ternary(t), [x, y, z]) => t.eval(*x, *y, *z),
                _ => unreachable!("elementwise ops take as many values as their arity"),
            }));
        }
        if !values.iter().any(|v| matches!(v, Value::Tensor(_))) {
            return self.size_arithmetic(&op, &values, span);
        }
        let inputs = values
            .into_iter()
            .map(|v| match v {
                Value::Scalar(x) => Operand::Scalar(x),
                Value::Tensor(t) => Operand::Tensor(t),
                Value::Count(c) => Operand::Count(c),
            })
            .collect();
        Ok(Value::Tensor(self.op(op, inputs, dest, Some(span))?))
    }

    /// Adds `out = op(inputs)`, creating the output's root axes and joining axis classes.
    pub(super) fn op(
        &mut self,
        op: Op,
        inputs: Vec<Operand>,
        dest: &str,
        span: Option<Span>,
    ) -> BResult<TensorId> {
        self.op_with(op, inputs, None, dest, span)
    }

    /// Adds a view that moves indices: output axis `k` is a new axis of extent `extents[k]`
    /// where that is given, else joins axis `k` of every input.
    fn view_op(
        &mut self,
        op: Op,
        inputs: Vec<Operand>,
        extents: Vec<Option<SizeExpr>>,
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        self.op_with(op, inputs, Some(extents), dest, Some(span))
    }

    /// [`Builder::op`] of one tensor operand at the call's location.
    fn op_on(&mut self, op: Op, t: TensorId, dest: &str, span: Span) -> BResult<TensorId> {
        self.op(op, vec![Operand::Tensor(t)], dest, Some(span))
    }

    /// [`Builder::op`], with the extents of a view that moves indices.
    fn op_with(
        &mut self,
        op: Op,
        inputs: Vec<Operand>,
        view: Option<Vec<Option<SizeExpr>>>,
        dest: &str,
        span: Option<Span>,
    ) -> BResult<TensorId> {
        self.check_op_budget(span)?;
        let tensors: Vec<TensorId> = inputs
            .iter()
            .filter_map(|o| {
                if let Operand::Tensor(t) = o {
                    Some(*t)
                } else {
                    None
                }
            })
            .collect();
        let err = |msg: String| Diagnostic::new(msg, span);
        let opname = op_name(&op);
        // Operands with axes must have equal ranks; rank-0 tensors (scalars) broadcast implicitly.
        let ranked: Vec<TensorId> = tensors
            .iter()
            .copied()
            .filter(|&t| self.f.rank(t) > 0)
            .collect();
        let (compute, dtype) = self.op_types(&op, &inputs, &tensors, &opname, span)?;
        check_literals(&inputs, compute, &opname, span)?;
        let out_root: Vec<IterId> = match &op {
            Op::Reduce { axes, .. } => self.reduce_root(tensors[0], axes, &opname, span)?,
            Op::Broadcast { axes } => self.broadcast_root(tensors[0], axes, span)?,
            Op::Permute { dims } => self.permute_root(tensors[0], dims),
            Op::Expand { shape } => self.expand_root(tensors[0], shape, span)?,
            Op::Gather { axis, select } => self.gather_root(&tensors, *axis, *select),
            Op::Slice { .. }
            | Op::Pad { .. }
            | Op::Cat { .. }
            | Op::Reshape
            | Op::ExpandBlocks { .. } => {
                let extents =
                    view.ok_or_else(|| err(format!("internal: {opname} without its extents")))?;
                self.view_root(&tensors, extents)
            }
            _ => self.elementwise_root(&ranked, &opname, span)?,
        };
        self.permuted |= matches!(op, Op::Permute { .. });
        if self.permuted {
            self.check_self_permutation(&tensors, &opname, span)?;
        }
        Ok(self.push_expr(op, inputs, out_root, dtype, dest, &opname, span))
    }

    /// The type an op computes in and the type of its result.
    fn op_types(
        &self,
        op: &Op,
        inputs: &[Operand],
        tensors: &[TensorId],
        opname: &str,
        span: Option<Span>,
    ) -> BResult<(DType, DType)> {
        let err = |msg: String| Diagnostic::new(msg, span);
        Ok(match op {
            Op::Cast(d) => (d.compute(), *d),
            Op::Set
            | Op::Broadcast { .. }
            | Op::Permute { .. }
            | Op::Expand { .. }
            | Op::Slice { .. }
            | Op::Pad { .. }
            | Op::Cat { .. }
            | Op::Reshape
            | Op::ExpandBlocks { .. }
            | Op::Gather { .. } => {
                let d = self.f.tensors[tensors[0]].dtype;
                (d.compute(), d)
            }
            Op::Mma => (DType::F32, DType::F32),
            Op::Iota { .. } | Op::ElementIndex { .. } | Op::Full { .. } => {
                return Err(err(format!(
                    "internal: {opname} is built by its own builder"
                )));
            }
            _ => {
                let typing = match op {
                    Op::Unary(u) => u.def().typing,
                    Op::Binary(b) => b.def().typing,
                    Op::Ternary(t) => t.def().typing,
                    // `sum`/`prod` accumulate in floating point (an i32 sum in f32: there is
                    // no i64), `max`/`min` in the operand's type (exact), `any`/`all` in bool.
                    Op::Reduce { op, .. } => op.def().typing,
                    Op::Set
                    | Op::Broadcast { .. }
                    | Op::Permute { .. }
                    | Op::Expand { .. }
                    | Op::Slice { .. }
                    | Op::Pad { .. }
                    | Op::Cat { .. }
                    | Op::Reshape
                    | Op::ExpandBlocks { .. }
                    | Op::Gather { .. }
                    | Op::Cast(_)
                    | Op::Mma
                    | Op::Iota { .. }
                    | Op::ElementIndex { .. }
                    | Op::Full { .. } => {
                        unreachable!("typed above")
                    }
                };
                // `where`'s condition takes no part in the result's type.
                let values = if typing == ops::Typing::Select {
                    &inputs[1..]
                } else {
                    inputs
                };
                let (types, literals) = operand_types(&self.f, values);
                ops::result_type(typing, &types, &literals)
                    .map_err(|why| err(format!("`{opname}` {why}")))?
            }
        })
    }

    /// A reduction's root: the input's axes, the reduced ones made reduction axes.
    fn reduce_root(
        &mut self,
        t: TensorId,
        axes: &[usize],
        opname: &str,
        span: Option<Span>,
    ) -> BResult<Vec<IterId>> {
        let err = |msg: String| Diagnostic::new(msg, span);
        let logical = self.f.logical(t);
        let mut root = Vec::new();
        for (k, &id) in logical.iter().enumerate() {
            let in_kind = self.f.ids[id].kind;
            let kind = if axes.contains(&k) {
                if in_kind == IterKind::Broadcast {
                    return Err(err(format!(
                        "{opname}: axis {k} of `{}` is a broadcast axis and cannot be reduced",
                        self.f.tensors[t].name
                    )));
                }
                IterKind::Reduction
            } else {
                in_kind
            };
            let ext = self.f.ids[id].root_extent.clone();
            let new = self.f.new_id(kind, IterOrigin::Root, ext);
            self.f.union(new, id);
            root.push(new);
        }
        Ok(root)
    }

    /// A broadcast's root: the input's axes with new axes of extent one at `axes`.
    fn broadcast_root(
        &mut self,
        t: TensorId,
        axes: &[usize],
        span: Option<Span>,
    ) -> BResult<Vec<IterId>> {
        let err = |msg: String| Diagnostic::new(msg, span);
        let logical = self.f.logical(t);
        let n = logical.len() + axes.len();
        let mut src = logical.iter();
        let mut root = Vec::new();
        for k in 0..n {
            if axes.contains(&k) {
                root.push(self.f.new_id(
                    IterKind::Broadcast,
                    IterOrigin::Root,
                    Some(SizeExpr::Const(1)),
                ));
            } else {
                let &id = src
                    .next()
                    .ok_or_else(|| err("broadcast: internal rank mismatch".into()))?;
                let ext = self.f.ids[id].root_extent.clone();
                let kind = self.f.ids[id].kind;
                let new = self.f.new_id(kind, IterOrigin::Root, ext);
                self.f.union(new, id);
                root.push(new);
            }
        }
        Ok(root)
    }

    /// A view's axes join the input's: a permute's in the new order (an expand's broadcast axes
    /// join a new axis of the given extent, as a binary op joins a broadcast axis with its
    /// other operand's: [`Builder::expand_root`]).
    fn permute_root(&mut self, t: TensorId, dims: &[usize]) -> Vec<IterId> {
        let logical = self.f.logical(t);
        let mut root = Vec::new();
        for &d in dims {
            let id = logical[d];
            let (kind, ext) = (self.f.ids[id].kind, self.f.ids[id].root_extent.clone());
            let new = self.f.new_id(kind, IterOrigin::Root, ext);
            self.f.union(new, id);
            root.push(new);
        }
        root
    }

    /// An expand's root: its broadcast axes stretched to `shape`'s extents.
    fn expand_root(
        &mut self,
        t: TensorId,
        shape: &[SizeExpr],
        span: Option<Span>,
    ) -> BResult<Vec<IterId>> {
        let err = |msg: String| Diagnostic::new(msg, span);
        let logical = self.f.logical(t);
        let mut root = Vec::new();
        for (k, (&id, e)) in logical.iter().zip(shape).enumerate() {
            let class = self.class_extent_of(id);
            let broadcast = self.f.ids[id].kind == IterKind::Broadcast;
            // A broadcast axis already joined with a concrete one has that extent.
            let joined = broadcast && class != SizeExpr::Const(1);
            if (!broadcast || joined) && class != *e {
                return Err(err(format!(
                    "expand: axis {k} of `{}` has extent {class}, not {e} (only broadcast axes expand)",
                    self.f.tensors[t].name
                )));
            }
            let new = if broadcast && *e != SizeExpr::Const(1) {
                self.f
                    .new_id(IterKind::Iteration, IterOrigin::Root, Some(e.clone()))
            } else {
                let kind = self.f.ids[id].kind;
                self.f
                    .new_id(kind, IterOrigin::Root, self.f.ids[id].root_extent.clone())
            };
            self.f.union(new, id);
            root.push(new);
        }
        Ok(root)
    }

    /// A view that moves indices (slice, pad, cat, reshape, expand_blocks): an axis with a new
    /// extent is new; one without joins the operands' axis.
    fn view_root(&mut self, tensors: &[TensorId], extents: Vec<Option<SizeExpr>>) -> Vec<IterId> {
        let logicals: Vec<Vec<IterId>> = tensors.iter().map(|&t| self.f.logical(t)).collect();
        let mut root = Vec::with_capacity(extents.len());
        for (k, e) in extents.into_iter().enumerate() {
            root.push(match e {
                Some(e) => self
                    .f
                    .new_id(IterKind::Iteration, IterOrigin::Root, Some(e)),
                None => {
                    let id = logicals[0][k];
                    let (kind, ext) = (self.f.ids[id].kind, self.f.ids[id].root_extent.clone());
                    let new = self.f.new_id(kind, IterOrigin::Root, ext);
                    for l in &logicals {
                        self.f.union(new, l[k]);
                    }
                    new
                }
            });
        }
        root
    }

    /// An elementwise op's root: the operands' axes joined, their extents checked (rank-0 operands broadcast).
    fn elementwise_root(
        &mut self,
        ranked: &[TensorId],
        opname: &str,
        span: Option<Span>,
    ) -> BResult<Vec<IterId>> {
        let err = |msg: String| Diagnostic::new(msg, span);
        let rank = ranked.first().map(|&t| self.f.rank(t)).unwrap_or(0);
        for &t in ranked {
            if self.f.rank(t) != rank {
                let names: Vec<String> = ranked
                    .iter()
                    .map(|&t| format!("`{}` (rank {})", self.f.tensors[t].name, self.f.rank(t)))
                    .collect();
                return Err(err(format!(
                    "{opname}: operands have different ranks: {}; use broadcast(x, axis=...) to add axes",
                    names.join(" and ")
                )));
            }
        }
        let logicals: Vec<Vec<IterId>> = ranked.iter().map(|&t| self.f.logical(t)).collect();
        let mut root = Vec::new();
        for k in 0..rank {
            let members: Vec<IterId> = logicals.iter().map(|l| l[k]).collect();
            let concrete: Vec<IterId> = members
                .iter()
                .copied()
                .filter(|&i| self.f.ids[i].kind != IterKind::Broadcast)
                .collect();
            for w in concrete.windows(2) {
                let (ea, eb) = (self.class_extent_of(w[0]), self.class_extent_of(w[1]));
                if ea != eb {
                    return Err(err(format!(
                        "{opname}: axis {k} has extent {ea} in one operand and {eb} in another"
                    )));
                }
            }
            let (kind, ext) = match concrete.first() {
                Some(&c) => (IterKind::Iteration, self.f.ids[c].root_extent.clone()),
                None => (IterKind::Broadcast, Some(SizeExpr::Const(1))),
            };
            let new = self.f.new_id(kind, IterOrigin::Root, ext);
            for &m in &members {
                // A broadcast axis joined with an axis of another class must agree with
                // every other use of its class.
                let (ea, eb) = (self.class_extent_of(m), self.class_extent_of(new));
                if self.f.ids[new].kind != IterKind::Broadcast
                    && ea != eb
                    && ea != SizeExpr::Const(1)
                {
                    return Err(err(format!(
                        "{opname}: axis {k} joins extents {ea} and {eb}"
                    )));
                }
                self.f.union(new, m);
            }
            root.push(new);
        }
        Ok(root)
    }

    /// Refuses an op that makes two axes of one operand the same loop (once any permute is built).
    fn check_self_permutation(
        &self,
        tensors: &[TensorId],
        opname: &str,
        span: Option<Span>,
    ) -> BResult<()> {
        let err = |msg: String| Diagnostic::new(msg, span);
        // Every axis of a tensor is indexed by a loop of its own class: an op that joins two
        // axes of one tensor through a permute (a tensor combined with its own transpose)
        // cannot be lowered. (Without a permute, two axes of one class come only from two
        // broadcasts of one tensor, `broadcast(x, axis=2) * broadcast(x, axis=1)`, which the
        // reference evaluates and which is left as it was.)
        for t in tensors.iter().copied().filter(|_| self.permuted) {
            let classes: Vec<IterId> = self.f.tensors[t]
                .root
                .iter()
                .map(|&i| self.f.class_of(i))
                .collect();
            for (a, c) in classes.iter().enumerate() {
                if let Some(b) = classes[a + 1..].iter().position(|d| d == c) {
                    return Err(err(format!(
                    "{opname}: this makes axes {a} and {} of `{}` the same loop (a tensor meets its own permutation); every axis of a tensor needs a loop of its own: copy it first in another fusion",
                    a + 1 + b,
                    self.f.tensors[t].name
                )));
                }
            }
        }
        Ok(())
    }

    /// At most [`MAX_FUSION_OPS`] operations.
    fn check_op_budget(&self, span: Option<Span>) -> BResult<()> {
        if self.f.exprs.len() >= MAX_FUSION_OPS {
            return Err(Diagnostic::new(
                format!("the fusion has more than {MAX_FUSION_OPS} operations; one fusion is one kernel: split the work into several fusions"),
                span,
            ));
        }
        Ok(())
    }

    /// The tensor `op(inputs)` with root `root`, named after `dest` and the op.
    #[allow(clippy::too_many_arguments)]
    fn push_expr(
        &mut self,
        op: Op,
        inputs: Vec<Operand>,
        root: Vec<IterId>,
        dtype: DType,
        dest: &str,
        opname: &str,
        span: Option<Span>,
    ) -> TensorId {
        let name = self.fresh_name(dest, opname);
        let e = ExprId::new(self.f.exprs.len());
        let out = self.add_tensor(name, dtype, root, Some(e), span);
        self.f.exprs.push(Expr {
            op,
            inputs,
            output: out,
            span,
        });
        out
    }

    /// `iota(x, axis=k)`: an i32 tensor of `x`'s rank whose axis `k` is `x`'s (same class) and
    /// whose other axes are broadcast axes; `x` is not an operand (its values are not read).
    fn iota(&mut self, x: TensorId, axis: usize, dest: &str, span: Span) -> BResult<TensorId> {
        self.check_op_budget(Some(span))?;
        let logical = self.f.logical(x);
        if self.f.ids[logical[axis]].kind == IterKind::Broadcast {
            return Err(Diagnostic::new(
                format!(
                    "iota: axis {axis} of `{}` is a broadcast axis (extent 1); give a tensor with that axis",
                    self.f.tensors[x].name
                ),
                Some(span),
            ));
        }
        let root = self.index_root(x, &[axis]);
        Ok(self.push_expr(
            Op::Iota { axis },
            Vec::new(),
            root,
            DType::I32,
            dest,
            "iota",
            Some(span),
        ))
    }

    /// The root axes of an index over `axes` of `x`: those axes (`x`'s, same class), broadcast
    /// axes elsewhere.
    fn index_root(&mut self, x: TensorId, axes: &[usize]) -> Vec<IterId> {
        let logical = self.f.logical(x);
        let mut root = Vec::with_capacity(logical.len());
        for (k, &id) in logical.iter().enumerate() {
            if axes.contains(&k) {
                let ext = self.f.ids[id].root_extent.clone();
                let new = self.f.new_id(IterKind::Iteration, IterOrigin::Root, ext);
                self.f.union(new, id);
                root.push(new);
            } else {
                root.push(self.f.new_id(
                    IterKind::Broadcast,
                    IterOrigin::Root,
                    Some(SizeExpr::Const(1)),
                ));
            }
        }
        root
    }

    /// The tensors of `a, b = call(...)`, in the order of the names: only `var_mean` gives
    /// several (the variance, then the mean).
    fn tuple(&mut self, names: &[(String, ast::Loc)], value: &ast::Expr) -> BResult<Vec<TensorId>> {
        let names_at = names[0].1 .0.join(names[names.len() - 1].1 .0);
        let gives = match value {
            ast::Expr::Call { func, .. } => ops::lookup(func).map(|d| (func, d.kind)),
            _ => None,
        };
        match gives {
            Some((_, OpKind::VarMean(_))) if names.len() == 2 => {}
            Some((func, OpKind::VarMean(_))) => {
                return Err(Diagnostic::new(
                    format!("`{func}` gives 2 tensors (the variance, then the mean), and {} names are assigned", names.len()),
                    Some(names_at),
                ))
            }
            _ => {
                return Err(Diagnostic::new(
                    format!("{} names are assigned one tensor: only `var_mean` gives several (`v, m = var_mean(x, axis=1)`)", names.len()),
                    Some(value.loc()),
                ))
            }
        }
        let ast::Expr::Call { func, args, loc } = value else {
            unreachable!("a call (matched above)")
        };
        self.tuple_mean = Some(names[1].0.clone());
        self.tuple_built = None;
        let first = self.call(func, args, &names[0].0, loc.0);
        self.tuple_mean = None;
        let mean = self.tuple_built.take();
        match (first?, mean) {
            (Value::Tensor(v), Some(m)) => Ok(vec![v, m]),
            _ => unreachable!("var_mean with a tuple builds both tensors or fails"),
        }
    }

    /// `rand(x, seed, offset)` / `randn(...)`: `generator(seed, offset, i)` at each element of
    /// `x`'s shape, `i` its row-major linear index as an i64 (the sum over `x`'s axes of
    /// `iota` times the product of the later axes' extents), so that an element's value is
    /// its index's whatever the schedule. `x`'s values are not read.
    fn random(
        &mut self,
        generator: TernaryOp,
        x: TensorId,
        key: [(Value, Span); 2],
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        let func = generator.def().name;
        let mut operands = Vec::with_capacity(3);
        for ((value, at), what) in key.into_iter().zip(["seed", "offset"]) {
            operands.push(match value {
                // Exact in the float64 reference below 2^53.
                Value::Scalar(v) if v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 => {
                    Operand::Scalar(v)
                }
                Value::Scalar(v) => {
                    return Err(Diagnostic::new(
                        format!("`{func}`: the {what} is an integer below 2^53 in magnitude, not {v}"),
                        Some(at),
                    ))
                }
                Value::Tensor(t) => {
                    let (name, dtype) = (&self.f.tensors[t].name, self.f.tensors[t].dtype);
                    if self.f.rank(t) > 0 || !dtype.is_integer() {
                        return Err(Diagnostic::new(
                            format!("`{func}`: the {what} is an integer or an integer scalar input (input {what}: i64), and `{name}` is a {dtype} tensor of rank {}", self.f.rank(t)),
                            Some(at),
                        ));
                    }
                    Operand::Tensor(t)
                }
                Value::Count(_) => {
                    return Err(Diagnostic::new(
                        format!("`{func}`: the {what} is an integer or an integer scalar input (input {what}: i64), not a size"),
                        Some(at),
                    ))
                }
            });
        }
        let logical = self.f.logical(x);
        let axes: Vec<usize> = (0..logical.len())
            .filter(|&k| self.f.ids[logical[k]].kind != IterKind::Broadcast)
            .collect();
        if axes.is_empty() {
            return Err(Diagnostic::new(
                format!(
                    "`{func}` gives a tensor of x's shape, and `{}` has no axis of extent above 1",
                    self.f.tensors[x].name
                ),
                Some(span),
            ));
        }
        let at = Some(span);
        self.check_op_budget(at)?;
        let root = self.index_root(x, &axes);
        let index = self.push_expr(
            Op::ElementIndex { axes },
            Vec::new(),
            root,
            DType::I64,
            dest,
            "index",
            at,
        );
        operands.push(Operand::Tensor(index));
        self.op(Op::Ternary(generator), operands, dest, at)
    }

    /// `full([M, 4096], value, dtype=...)`: a tensor of new axes with those extents (size
    /// symbols of the fusion or positive integers) holding `value`.
    fn full(&mut self, args: &[Arg], dest: &str, span: Span) -> BResult<TensorId> {
        self.check_op_budget(Some(span))?;
        let usage = "`full` is written full([M, 4096], value) or full([M, N], value, dtype=bf16)";
        let (shape, value) = match args {
            [Arg::Pos(shape), Arg::Pos(value), ..] => (shape, value),
            _ => return Err(Diagnostic::new(usage, Some(span))),
        };
        let ast::Expr::List(dims, _) = shape else {
            return Err(Diagnostic::new(
                format!("{usage}: the shape is a list of extents"),
                Some(shape.loc()),
            ));
        };
        let mut root = Vec::with_capacity(dims.len());
        for d in dims {
            let extent = match d {
                ast::Expr::Name(s, _) if self.f.symbols.contains(s) => SizeExpr::Sym(s.clone()),
                ast::Expr::Int(i, _) if *i > 0 => SizeExpr::Const(*i),
                other => {
                    return Err(Diagnostic::new(
                        format!(
                            "an extent of `full` is a size symbol of the fusion's inputs ({}) or a positive integer",
                            self.f.symbols.join(", ")
                        ),
                        Some(other.loc()),
                    ))
                }
            };
            root.push(
                self.f
                    .new_id(IterKind::Iteration, IterOrigin::Root, Some(extent)),
            );
        }
        if root.is_empty() {
            return Err(Diagnostic::new(
                format!("{usage}: give at least one extent"),
                Some(shape.loc()),
            ));
        }
        let value_at = value.loc();
        let v = match self.expr(value, dest)? {
            Value::Scalar(v) => v,
            Value::Tensor(_) | Value::Count(_) => {
                return Err(Diagnostic::new(
                    "`full`'s value is a number (a tensor already has its shape)",
                    Some(value_at),
                ))
            }
        };
        let mut dtype = if v.fract() != 0.0 || !v.is_finite() {
            DType::F32
        } else {
            DType::I32
        };
        for a in &args[2..] {
            match a {
                Arg::Named { name, value, loc } if name == "dtype" => {
                    dtype = match value {
                        ast::Expr::Name(n, _) => DType::parse(n),
                        _ => None,
                    }
                    .ok_or_else(|| {
                        Diagnostic::new(
                            format!("expected a dtype ({})", dtype_names()),
                            Some(loc.0),
                        )
                    })?;
                }
                other => {
                    let at = match other {
                        Arg::Pos(e) => e.loc(),
                        Arg::Named { loc, .. } => loc.0,
                    };
                    return Err(Diagnostic::new(usage, Some(at)));
                }
            }
        }
        if let Some(why) = literal_out_of_range(v, dtype.compute()) {
            return Err(Diagnostic::new(
                format!("full: the value {v} {why}"),
                Some(value_at),
            ));
        }
        Ok(self.push_expr(
            Op::Full {
                value: dtype.round(v),
            },
            Vec::new(),
            root,
            dtype,
            dest,
            "full",
            Some(span),
        ))
    }

    /// The one axis of `axis=` (`what` takes a single axis, as torch's does).
    fn one_axis(&self, args: &[Arg], span: Span, rank: usize, what: &str) -> BResult<usize> {
        match self.axes_arg(args, span, rank, 0, what)?[..] {
            [a] => Ok(a),
            _ => Err(Diagnostic::new(
                format!("{what} takes one axis (`axis=1`), as torch's does"),
                Some(span),
            )),
        }
    }

    fn class_extent_of(&self, id: IterId) -> SizeExpr {
        self.f.class_extent(self.f.class_of(id))
    }
}

/// What a composite's parts share: the reduced axes, and the name and location its ops take.
struct CompositeParts<'a> {
    axes: &'a [usize],
    reduced: &'a [IterId],
    dest: &'a str,
    at: Option<Span>,
}

impl CompositeParts<'_> {
    /// The reduced axes' element count less `minus` (a variance's correction), as an operand.
    fn count(&self, b: &mut Builder, minus: f64) -> Operand {
        Operand::Count(b.f.counts.push(Count {
            axes: self.reduced.to_vec(),
            minus,
        }))
    }

    fn reduce(&self, b: &mut Builder, op: ReduceOp, t: TensorId) -> BResult<TensorId> {
        let axes = self.axes.to_vec();
        b.op(
            Op::Reduce { op, axes },
            vec![Operand::Tensor(t)],
            self.dest,
            self.at,
        )
    }

    fn binary(&self, b: &mut Builder, op: BinaryOp, l: Operand, r: Operand) -> BResult<TensorId> {
        b.op(Op::Binary(op), vec![l, r], self.dest, self.at)
    }

    /// A reduced tensor broadcast back over the reduced axes.
    fn back(&self, b: &mut Builder, t: TensorId) -> BResult<TensorId> {
        let axes = self.axes.to_vec();
        b.op(
            Op::Broadcast { axes },
            vec![Operand::Tensor(t)],
            self.dest,
            self.at,
        )
    }
}

/// The name an op gives the tensors it builds and its errors.
fn op_name(op: &Op) -> String {
    match op {
        Op::Set => "set".to_string(),
        Op::Unary(u) => u.name().to_string(),
        Op::Binary(b) => b.name().to_string(),
        Op::Ternary(t) => t.name().to_string(),
        Op::Cast(d) => format!("cast_{d}"),
        Op::Broadcast { .. } => "broadcast".into(),
        Op::Permute { .. } => "permute".into(),
        Op::Expand { .. } => "expand".into(),
        Op::Slice { .. } => "slice".into(),
        Op::Pad { .. } => "pad".into(),
        Op::Cat { .. } => "cat".into(),
        Op::Reshape => "reshape".into(),
        Op::ExpandBlocks { .. } => "expand_blocks".into(),
        Op::Gather { select: false, .. } => "gather".into(),
        Op::Gather { select: true, .. } => "index_select".into(),
        Op::Reduce { op, .. } => op.name().into(),
        Op::Mma => "mma".into(),
        Op::Iota { .. } => "iota".into(),
        Op::ElementIndex { .. } => "index".into(),
        Op::Full { .. } => "full".into(),
    }
}

/// A literal takes the type of the arithmetic it is part of; one that type cannot hold would be
/// emitted wrapped (i32) or as an infinity the user never wrote.
fn check_literals(
    inputs: &[Operand],
    compute: DType,
    opname: &str,
    span: Option<Span>,
) -> BResult<()> {
    let err = |msg: String| Diagnostic::new(msg, span);
    for o in inputs {
        if let Operand::Scalar(v) = o {
            if let Some(why) = literal_out_of_range(*v, compute) {
                let text = if v.abs() >= 1e16 {
                    format!("{v:e}")
                } else {
                    format!("{v}")
                };
                return Err(err(format!(
                    "{opname}: the literal {text} {why} (the operation computes in {})",
                    compute.name()
                )));
            }
        }
    }
    Ok(())
}

/// A call's named arguments against the op's: a reduction-capable elementwise op (`max`) takes
/// `axis=` too.
fn check_named_args(func: &str, def: &ops::OpDef, args: &[Arg], has_axis: bool) -> BResult<()> {
    for a in args {
        if let Arg::Named { name, loc, .. } = a {
            let allowed = def.named.contains(&name.as_str())
                || (has_axis && matches!(def.kind, OpKind::ElementwiseOrReduce(..)));
            if !allowed {
                let takes = match def.named {
                    [] if !matches!(def.kind, OpKind::ElementwiseOrReduce(..)) => {
                        "takes no named arguments".to_string()
                    }
                    [] => "takes only `axis=`".to_string(),
                    named => format!(
                        "takes {}",
                        named
                            .iter()
                            .map(|n| format!("`{n}=`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                return Err(Diagnostic::new(
                    format!(
                        "`{func}` {takes}, not `{name}=` (written {})",
                        def.signature
                    ),
                    Some(loc.0),
                ));
            }
        }
    }
    Ok(())
}

/// Operand `i` of a call, which must be a tensor.
fn tensor_operand(func: &str, pos: &[(Value, Span)], i: usize) -> BResult<TensorId> {
    match &pos[i] {
        (Value::Tensor(t), _) => Ok(*t),
        (_, sp) => Err(Diagnostic::new(
            format!("`{func}` expects a tensor here"),
            Some(*sp),
        )),
    }
}

/// `var`'s `correction=` (torch's: a number, 1 when not given).
fn correction_arg(args: &[Arg]) -> BResult<f64> {
    for a in args {
        if let Arg::Named { name, value, loc } = a {
            if name != "correction" {
                continue;
            }
            let v = match value {
                ast::Expr::Int(i, _) => *i as f64,
                ast::Expr::Float(x, _, _) => *x,
                ast::Expr::Neg(..) => -1.0,
                _ => {
                    return Err(Diagnostic::new(
                        "`correction=` is a number (1: Bessel's correction, the default; 0: the population variance)",
                        Some(loc.0),
                    ))
                }
            };
            if v < 0.0 || !v.is_finite() {
                return Err(Diagnostic::new(
                    "`correction=` must be a finite number of at least 0",
                    Some(loc.0),
                ));
            }
            return Ok(v);
        }
    }
    Ok(1.0)
}

/// The items of the list argument `name=[...]` (a single item is a list of one) and where the
/// argument is.
fn named_list<'a>(args: &'a [Arg], name: &str) -> Option<(Vec<&'a ast::Expr>, Span)> {
    args.iter().find_map(|a| match a {
        Arg::Named {
            name: n,
            value,
            loc,
        } if n == name => Some((
            match value {
                ast::Expr::List(items, _) => items.iter().collect(),
                other => vec![other],
            },
            loc.0,
        )),
        _ => None,
    })
}

/// An integer written in the program (`1`, `-1`).
fn literal_number(e: &ast::Expr) -> BResult<f64> {
    match e {
        ast::Expr::Int(i, _) => Ok(*i as f64),
        ast::Expr::Neg(inner, _) => literal_number(inner).map(|v| -v),
        other => Err(Diagnostic::new(
            "expected an axis number",
            Some(other.loc()),
        )),
    }
}

/// The value written for a scalar input (`input eps: f32 = 1e-6`), checked against its dtype.
fn scalar_value(v: &ast::Expr, dtype: DType) -> BResult<f64> {
    let x = match v {
        ast::Expr::Int(i, _) => *i as f64,
        ast::Expr::Float(x, _, _) => *x,
        ast::Expr::Neg(inner, _) => -scalar_value(inner, dtype)?,
        other => {
            return Err(Diagnostic::new(
                "a scalar input's value is a number",
                Some(other.loc()),
            ))
        }
    };
    if let Some(why) = literal_out_of_range(x, dtype.compute()) {
        return Err(Diagnostic::new(
            format!("the value {x} {why}"),
            Some(v.loc()),
        ));
    }
    if let Some(max) = dtype.max_finite().filter(|&m| x.abs() > m) {
        return Err(Diagnostic::new(
            format!("the value {x} is out of range for {dtype} (|x| <= {max})"),
            Some(v.loc()),
        ));
    }
    if !dtype.is_float() && x.fract() != 0.0 {
        return Err(Diagnostic::new(
            format!("the value {x} is not an integer, and the input is {dtype}"),
            Some(v.loc()),
        ));
    }
    Ok(dtype.round(x))
}

/// The dtypes of the tensor operands (scalar inputs included) and the literals among
/// `inputs`.
pub(crate) fn operand_types(f: &Fusion, inputs: &[Operand]) -> (Vec<DType>, Vec<f64>) {
    let mut types = Vec::new();
    let mut literals = Vec::new();
    for o in inputs {
        match o {
            Operand::Tensor(t) => types.push(f.tensors[*t].dtype),
            Operand::Scalar(v) => literals.push(*v),
            // An integral number: it changes no float operand's type.
            Operand::Count(_) => literals.push(1.0),
        }
    }
    (types, literals)
}

/// Why a finite literal cannot be represented in the type its operation computes in (`None`
/// when it can). Infinities and NaN written through arithmetic on literals (`1.0 / 0.0`) are
/// kept: the back end emits them as bit patterns.
fn literal_out_of_range(v: f64, d: DType) -> Option<&'static str> {
    if !v.is_finite() {
        return None;
    }
    match d {
        DType::U8 if !(0.0..=255.0).contains(&v) => Some("is out of range for u8 (0..=255)"),
        DType::I8 if !(-128.0..=127.0).contains(&v) => Some("is out of range for i8 (-128..=127)"),
        DType::I32 if v < i32::MIN as f64 || v > i32::MAX as f64 => {
            Some("is out of range for i32 (-2147483648..=2147483647)")
        }
        // 2^63 itself is out of range; float64 holds no integer between it and i64::MAX.
        DType::I64 if v < i64::MIN as f64 || v >= 9_223_372_036_854_775_808.0 => {
            Some("is out of range for i64")
        }
        DType::F32 | DType::BF16 | DType::F16 if (v as f32).is_infinite() => {
            Some("is out of range for f32 (|x| <= 3.4028235e38)")
        }
        _ => None,
    }
}

/// A user name reaches the CUDA source verbatim (as a parameter, buffer or size name), so it must
/// not be one the emitted code or C++ already gives a meaning.
pub(crate) fn check_identifier(name: &str, span: Span) -> BResult<()> {
    match crate::cuda::reserved_reason(name) {
        Some(why) => Err(Diagnostic::new(
            format!("`{name}` cannot be used as a name: it is {why}"),
            Some(span),
        )),
        None => Ok(()),
    }
}

/// Where an item of the fusion block is written.
fn item_span(item: &Item) -> Span {
    match item {
        Item::Input { loc, .. }
        | Item::Let { loc, .. }
        | Item::LetTuple { loc, .. }
        | Item::Output { loc, .. } => loc.0,
    }
}
