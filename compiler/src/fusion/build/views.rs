//! The views that move indices: `slice`, `pad`, `cat`, `reshape` and `expand_blocks`.
//!
//! Takes the call's arguments; checks them (axes, integers, equal extents, equal element
//! counts, an operand the kernel can read at moved indices) with errors at the argument or the
//! call; emits one [`Op::Slice`], [`Op::Pad`], [`Op::Cat`], [`Op::Reshape`] or [`Op::ExpandBlocks`]
//! whose output root axes are new classes where the indices move (the sliced, padded or
//! concatenated axis; every axis of a reshape; an axis expanded by a block other than 1) and
//! join the input's classes elsewhere. `expand_blocks` takes a fusion input only (its scales are
//! read where the product needs them).
//!
//! The rule for the operand: the kernel reads a fusion input in global memory at the index the
//! op maps the output's to (`passes::indexing`). A computed tensor lives in registers or shared
//! memory of the threads that computed it, indexed by its own loops, so a view does not read
//! it: it recomputes it where it reads it, through elementwise ops, casts, broadcasts and other
//! views down to the fusion inputs (`Op::is_recomputed_in_views`, `passes::loop_nest`), and a
//! tensor only views read is not computed on its own. A reduction's result, an `iota` or a
//! `full` on that path is read where it is computed, at the view's own indices: the view must
//! not move its axes (`Builder::view_recomputable` says so at the call).
//!
//! Output extents are written from the input's: `N - 2` (`slice(x, axis=1, start=1,
//! stop=-1)`), `ceilDiv(N - 1, 2)` with a step, `N + 3` (a pad), `N + K` (a cat), the listed
//! products (a reshape). A slice of a size symbol that could be empty adds a
//! [`Constraint::Positive`] the runner checks before a launch (and the reference before it
//! evaluates), so no index reaches outside the input; so does an `expand_blocks` whose input
//! must cover the shape (`ceilDiv(K, 128) <= KB`).

use super::*;
use crate::plan::Constraint;

/// `e + c` with constants folded.
fn plus(e: &SizeExpr, c: i64) -> SizeExpr {
    match (e, c) {
        (_, 0) => e.clone(),
        (SizeExpr::Const(v), _) => SizeExpr::Const(v + c),
        _ => SizeExpr::Add(Box::new(e.clone()), Box::new(SizeExpr::Const(c))),
    }
}

/// `a + b` with constants folded.
fn sum(a: &SizeExpr, b: &SizeExpr) -> SizeExpr {
    match (a, b) {
        (SizeExpr::Const(x), SizeExpr::Const(y)) => SizeExpr::Const(x + y),
        (_, SizeExpr::Const(y)) => plus(a, *y),
        (SizeExpr::Const(x), _) => plus(b, *x),
        _ => SizeExpr::Add(Box::new(a.clone()), Box::new(b.clone())),
    }
}

/// A product of size symbols and a positive integer, as a sorted list of symbols and the
/// integer: equal products have equal forms (the element-count check of `reshape`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Monomial {
    coefficient: i64,
    symbols: Vec<String>,
}

impl Monomial {
    fn of(e: &SizeExpr) -> Option<Monomial> {
        Some(match e {
            SizeExpr::Const(c) => Monomial {
                coefficient: *c,
                symbols: vec![],
            },
            SizeExpr::Sym(s) => Monomial {
                coefficient: 1,
                symbols: vec![s.clone()],
            },
            SizeExpr::Mul(a, b) => Monomial::of(a)?.times(&Monomial::of(b)?)?,
            _ => return None,
        })
    }

    fn times(&self, o: &Monomial) -> Option<Monomial> {
        let mut symbols = [&self.symbols[..], &o.symbols[..]].concat();
        symbols.sort_unstable();
        Some(Monomial {
            coefficient: self.coefficient.checked_mul(o.coefficient)?,
            symbols,
        })
    }
}

impl std::fmt::Display for Monomial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = self.symbols.clone();
        if self.coefficient != 1 || parts.is_empty() {
            parts.insert(0, self.coefficient.to_string());
        }
        f.write_str(&parts.join(" * "))
    }
}

/// The integer argument `name=` and where it is written.
fn named_int(args: &[Arg], name: &str) -> BResult<Option<(i64, Span)>> {
    for a in args {
        if let Arg::Named {
            name: n,
            value,
            loc,
        } = a
        {
            if n != name {
                continue;
            }
            let v = match value {
                ast::Expr::Int(i, _) => Some(*i),
                ast::Expr::Neg(inner, _) => match **inner {
                    ast::Expr::Int(i, _) => Some(-i),
                    _ => None,
                },
                _ => None,
            };
            return match v {
                Some(v) => Ok(Some((v, loc.0))),
                None => Err(Diagnostic::new(
                    format!("`{name}=` is an integer"),
                    Some(loc.0),
                )),
            };
        }
    }
    Ok(None)
}

/// The most ops a view recomputes its operand from (see `Builder::view_recomputable`): the
/// recomputation is a tree, so a chain that reads each tensor twice doubles it at every step.
const MAX_RECOMPUTED_OPS: u64 = 256;

/// What a tensor that a view does not recompute is, in its error.
fn held_kind(op: &Op) -> String {
    match op {
        Op::Reduce { op, .. } => format!("`{}` reduction", op.name()),
        Op::Iota { .. } => "`iota`".into(),
        Op::ElementIndex { .. } => "`rand`'s element index".into(),
        Op::Full { .. } => "`full`".into(),
        Op::Gather { select: false, .. } => "`gather`".into(),
        Op::Gather { select: true, .. } => "`index_select`".into(),
        _ => "matrix product".into(),
    }
}

impl Builder {
    /// The operand of a one-operand view and its axis: `(rank, axis)`.
    fn view_operand(
        &self,
        func: &str,
        args: &[Arg],
        (t, at): (TensorId, Span),
        span: Span,
    ) -> BResult<(usize, usize)> {
        self.view_ranked(func, t, at)?;
        let rank = self.f.rank(t);
        let axis = self.view_axis(args, span, rank, func)?;
        self.view_recomputable(func, t, at, &[axis])?;
        Ok((rank, axis))
    }

    /// The operand of a view that moves indices has axes.
    fn view_ranked(&self, func: &str, t: TensorId, at: Span) -> BResult<()> {
        if self.f.rank(t) == 0 {
            return Err(Diagnostic::new(
                format!(
                    "`{func}`: `{}` is a scalar and has no axis",
                    self.f.tensors[t].name
                ),
                Some(at),
            ));
        }
        Ok(())
    }

    /// `expand_blocks` reads a fusion input (its scales are read where the product needs them,
    /// in global memory), with axes.
    fn view_input(&self, func: &str, t: TensorId, at: Span) -> BResult<()> {
        let tensor = &self.f.tensors[t];
        if !self.f.inputs.contains(&t) {
            return Err(Diagnostic::new(
                format!("`{func}` reads a fusion input (the kernel reads it at moved indices in global memory), and `{}` is computed here: apply `{func}` to the inputs it is computed from, then compute (elementwise ops commute with it)", tensor.name),
                Some(at),
            ));
        }
        if self.f.rank(t) == 0 {
            return Err(Diagnostic::new(
                format!("`{func}`: `{}` is a scalar and has no axis", tensor.name),
                Some(at),
            ));
        }
        Ok(())
    }

    /// The kernel reads the operand `t` of a view at indices moved along its axes `moved`: a
    /// fusion input in global memory is read there, and a computed tensor is recomputed there
    /// from the tensors it is computed from, through elementwise ops, casts, broadcasts and
    /// other views (`Op::is_recomputed_in_views`), down to the fusion inputs. A tensor held
    /// where it is computed (a reduction's result, an `iota`, a `full`) is read at the view's
    /// own indices, so it must not lie along a moved axis: that is the error here.
    pub(super) fn view_recomputable(
        &self,
        func: &str,
        t: TensorId,
        at: Span,
        moved: &[usize],
    ) -> BResult<()> {
        let f = &self.f;
        let mut classes: Vec<IterId> = moved.iter().map(|&k| f.class_of(f.logical(t)[k])).collect();
        let mut stack = vec![t];
        let mut seen = vec![false; f.tensors.len()];
        seen[t.index()] = true;
        // The recomputed tensors, to count the ops the view repeats.
        let mut recomputed = Vec::new();
        while let Some(u) = stack.pop() {
            let Some(def) = f.tensors[u].definition else {
                continue;
            };
            let expr = &f.exprs[def];
            if expr.op.is_recomputed_in_views() {
                recomputed.push(u);
                // A view below moves its own operands' indices along the axes it moves (all of
                // them for a reshape) from the ones read here.
                let nested_axis = match &expr.op {
                    Op::Slice { axis, .. } | Op::Pad { axis, .. } | Op::Cat { axis } => Some(*axis),
                    _ => None,
                };
                for p in expr.input_tensors() {
                    let axes = f.logical(p);
                    match (&expr.op, nested_axis) {
                        (Op::Reshape, _) => classes.extend(axes.iter().map(|&id| f.class_of(id))),
                        (_, Some(a)) if a < axes.len() => classes.push(f.class_of(axes[a])),
                        _ => {}
                    }
                    if !seen[p.index()] {
                        seen[p.index()] = true;
                        stack.push(p);
                    }
                }
                continue;
            }
            let logical = f.logical(u);
            if let Some(axis) = logical
                .iter()
                .position(|&id| classes.contains(&f.class_of(id)))
            {
                let (name, held) = (&f.tensors[t].name, &f.tensors[u].name);
                let what = if name == held {
                    format!("`{name}`")
                } else {
                    format!("`{name}`, computed from `{held}`,")
                };
                return Err(Diagnostic::new(
                    format!("`{func}` reads {what} at moved indices along axis {axis} of `{held}`: a view recomputes elementwise ops, casts and views from the fusion inputs where it reads them, but `{held}` (a {}) is held where it is computed, at its own indices; apply `{func}` to what `{held}` is computed from, or to a tensor that does not vary along that axis", held_kind(&expr.op)),
                    Some(at),
                ));
            }
        }
        // The recomputation is a tree: an op two others read is repeated in both. Operands are
        // built before their readers, so tensor order counts each op's tree after its operands'.
        recomputed.sort_unstable_by_key(|u| u.index());
        let mut ops: rustc_hash::FxHashMap<TensorId, u64> = Default::default();
        for &u in &recomputed {
            let def = f.tensors[u].definition.expect("a computed tensor");
            let below: u64 = f.exprs[def]
                .input_tensors()
                .map(|p| ops.get(&p).copied().unwrap_or(0))
                .fold(1, u64::saturating_add);
            ops.insert(u, below);
        }
        let count = ops.get(&t).copied().unwrap_or(0);
        if count > MAX_RECOMPUTED_OPS {
            return Err(Diagnostic::new(
                format!("`{func}` would recompute `{}` as {count} ops (an op counted once for each path to it; at most {MAX_RECOMPUTED_OPS}): a view recomputes its computed operand where it reads it; apply `{func}` to the tensors `{}` is computed from, then compute", f.tensors[t].name, f.tensors[t].name),
                Some(at),
            ));
        }
        Ok(())
    }

    /// The one `axis=` of a view (its other named arguments are its own).
    fn view_axis(&self, args: &[Arg], span: Span, rank: usize, func: &str) -> BResult<usize> {
        let axis: Vec<Arg> = args
            .iter()
            .filter(|a| matches!(a, Arg::Named { name, .. } if name == "axis" || name == "axes"))
            .cloned()
            .collect();
        self.one_axis(&axis, span, rank, func)
    }

    /// `slice(x, axis=, start=, stop=, step=)`.
    pub(super) fn slice(
        &mut self,
        args: &[Arg],
        t: TensorId,
        at: Span,
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        let (rank, axis) = self.view_operand("slice", args, (t, at), span)?;
        let name = self.f.tensors[t].name.clone();
        let extent = self.class_extent_of(self.f.logical(t)[axis]);
        let start = named_int(args, "start")?;
        let stop = named_int(args, "stop")?;
        let step = match named_int(args, "step")? {
            None => 1,
            Some((s, _)) if s >= 1 => s,
            Some((_, at)) => {
                return Err(Diagnostic::new(
                    "`step=` is a positive integer (as torch's slices)",
                    Some(at),
                ))
            }
        };
        let empty = |at: Option<Span>| {
            Diagnostic::new(
                format!("`slice` of `{name}` along axis {axis} (extent {extent}) is empty"),
                at.or(Some(span)),
            )
        };
        let (first, len) = match extent.as_const() {
            // Python's rules: negatives count from the end, both ends clamp into the axis.
            Some(n) => {
                let end = |v: i64| if v < 0 { (v + n).max(0) } else { v.min(n) };
                let s = start.map_or(0, |(v, _)| end(v));
                let e = stop.map_or(n, |(v, _)| end(v));
                let len = (e - s + step - 1).div_euclid(step);
                if len < 1 {
                    return Err(empty(stop.or(start).map(|p| p.1)));
                }
                (SizeExpr::Const(s), SizeExpr::Const(len))
            }
            None => {
                let needs = |value: SizeExpr, why: String| Constraint::Positive {
                    value,
                    reason: format!("`slice` of `{name}` along axis {axis} {why}"),
                };
                let ceil = |e: SizeExpr| {
                    if step == 1 {
                        e
                    } else {
                        SizeExpr::CeilDiv(Box::new(e), Box::new(SizeExpr::Const(step)))
                    }
                };
                match (start.map(|p| p.0), stop.map(|p| p.0)) {
                    // Both from the start: a constant count; the input must reach the stop.
                    (s, Some(e)) if s.unwrap_or(0) >= 0 && e >= 0 => {
                        let s = s.unwrap_or(0);
                        let len = (e - s + step - 1).div_euclid(step);
                        if len < 1 {
                            return Err(empty(stop.map(|p| p.1)));
                        }
                        self.f.constraints.push(needs(
                            plus(&extent, 1 - e),
                            format!("reads up to index {}", e - 1),
                        ));
                        (SizeExpr::Const(s), SizeExpr::Const(len))
                    }
                    // From the start to `k` before the end: the count follows the extent.
                    (s, e) if s.unwrap_or(0) >= 0 => {
                        let s = s.unwrap_or(0);
                        let k = -e.unwrap_or(0);
                        let span_len = plus(&extent, -(k + s));
                        self.f
                            .constraints
                            .push(needs(span_len.clone(), "must not be empty".into()));
                        (SizeExpr::Const(s), ceil(span_len))
                    }
                    // Both from the end: a constant count; the input must reach back to the start.
                    (Some(s), e) if e.unwrap_or(0) <= 0 => {
                        let (a, k) = (-s, -e.unwrap_or(0));
                        let len = (a - k + step - 1).div_euclid(step);
                        if len < 1 {
                            return Err(empty(stop.or(start).map(|p| p.1)));
                        }
                        self.f.constraints.push(needs(
                            plus(&extent, 1 - a),
                            format!("starts {a} before the end"),
                        ));
                        (plus(&extent, -a), SizeExpr::Const(len))
                    }
                    _ => {
                        return Err(Diagnostic::new(
                            format!("`slice` of `{name}` along axis {axis} (extent {extent}, a size symbol): a negative start needs a negative or omitted stop"),
                            stop.map(|p| p.1).or(Some(span)),
                        ))
                    }
                }
            }
        };
        let mut extents = vec![None; rank];
        extents[axis] = Some(len);
        self.view_op(
            Op::Slice {
                axis,
                start: first,
                step,
                written: [start.map(|p| p.0), stop.map(|p| p.0), Some(step)],
            },
            vec![Operand::Tensor(t)],
            extents,
            dest,
            span,
        )
    }

    /// `expand_blocks(x, block=[...], shape=[...])`: each element of `x` over a block.
    pub(super) fn expand_blocks(
        &mut self,
        args: &[Arg],
        t: TensorId,
        at: Span,
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        self.view_input("expand_blocks", t, at)?;
        let rank = self.f.rank(t);
        let name = self.f.tensors[t].name.clone();
        let list = |arg: &str, what: &str| {
            let (items, at) = named_list(args, arg).ok_or_else(|| {
                Diagnostic::new(
                    format!(
                        "`expand_blocks` needs `{arg}=[...]`, {what} for every axis of `{name}`"
                    ),
                    Some(span),
                )
            })?;
            if items.len() != rank {
                return Err(Diagnostic::new(
                    format!(
                        "`{arg}=` has {} entries and `{name}` has rank {rank}",
                        items.len()
                    ),
                    Some(at),
                ));
            }
            Ok(items)
        };
        let mut block = Vec::with_capacity(rank);
        for item in list("block", "a block size")? {
            match item {
                ast::Expr::Int(b, _) if *b >= 1 => block.push(*b),
                other => {
                    return Err(Diagnostic::new(
                        "a block size is a positive integer",
                        Some(other.loc()),
                    ))
                }
            }
        }
        let mut shape = Vec::with_capacity(rank);
        for item in list("shape", "an extent")? {
            shape.push(match item {
                ast::Expr::Int(c, _) if *c >= 1 => (SizeExpr::Const(*c), item.loc()),
                ast::Expr::Name(s, _) if self.f.symbols.contains(s) => {
                    (SizeExpr::Sym(s.clone()), item.loc())
                }
                other => {
                    return Err(Diagnostic::new(
                        "an extent is a size symbol of an input or a positive integer",
                        Some(other.loc()),
                    ))
                }
            });
        }
        let logical = self.f.logical(t);
        let mut extents = Vec::with_capacity(rank);
        for (k, ((&b, (e, e_at)), &id)) in block.iter().zip(shape).zip(&logical).enumerate() {
            let have = self.class_extent_of(id);
            if b == 1 {
                // Not expanded: the axis joins the input's, so its extent is the input's.
                if have != e {
                    return Err(Diagnostic::new(
                        format!("axis {k} of `{name}` has block 1 and extent {have}, so its shape entry is {have}, not {e}"),
                        Some(e_at),
                    ));
                }
                extents.push(None);
                continue;
            }
            // x covers the shape when block * extent(x) >= extent, i.e.
            // block * extent(x) - extent + 1 >= 1.
            match (have.as_const(), e.as_const()) {
                (Some(h), Some(n)) if b.saturating_mul(h) < n => {
                    return Err(Diagnostic::new(
                        format!("`{name}` has {h} blocks of {b} along axis {k}, fewer than the {n} elements of the shape"),
                        Some(e_at),
                    ))
                }
                (Some(_), Some(_)) => {}
                _ => self.f.constraints.push(Constraint::Positive {
                    value: sum(
                        &SizeExpr::Mul(Box::new(have.clone()), Box::new(SizeExpr::Const(b))),
                        &plus(
                            &SizeExpr::Mul(Box::new(e.clone()), Box::new(SizeExpr::Const(-1))),
                            1,
                        ),
                    ),
                    reason: format!(
                        "`expand_blocks` of `{name}`: its {have} blocks of {b} along axis {k} must cover {e} (ceilDiv({e}, {b}) <= {have})"
                    ),
                }),
            }
            extents.push(Some(e));
        }
        self.view_op(
            Op::ExpandBlocks { block },
            vec![Operand::Tensor(t)],
            extents,
            dest,
            span,
        )
    }

    /// `pad(x, axis=, before=, after=, value=)`.
    pub(super) fn pad(
        &mut self,
        args: &[Arg],
        t: TensorId,
        at: Span,
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        let (rank, axis) = self.view_operand("pad", args, (t, at), span)?;
        let mut widths = [0; 2];
        for (w, name) in widths.iter_mut().zip(["before", "after"]) {
            match named_int(args, name)? {
                None => {}
                Some((v, _)) if v >= 0 => *w = v,
                Some((_, at)) => {
                    return Err(Diagnostic::new(
                        format!("`{name}=` is an integer >= 0 (to drop elements, slice)"),
                        Some(at),
                    ))
                }
            }
        }
        let dtype = self.f.tensors[t].dtype;
        let value = match args
            .iter()
            .find(|a| matches!(a, Arg::Named { name, .. } if name == "value"))
        {
            Some(Arg::Named { value, .. }) => scalar_value(value, dtype)?,
            _ => 0.0,
        };
        let extent = self.class_extent_of(self.f.logical(t)[axis]);
        let mut extents = vec![None; rank];
        extents[axis] = Some(plus(&extent, widths[0] + widths[1]));
        self.view_op(
            Op::Pad {
                axis,
                before: widths[0],
                after: widths[1],
                value,
            },
            vec![Operand::Tensor(t)],
            extents,
            dest,
            span,
        )
    }

    /// `cat(a, b, axis=)`.
    pub(super) fn cat(
        &mut self,
        args: &[Arg],
        operands: [(TensorId, Span); 2],
        dest: &str,
        span: Span,
    ) -> BResult<TensorId> {
        let [(a, at_a), (b, at_b)] = operands;
        self.view_ranked("cat", a, at_a)?;
        self.view_ranked("cat", b, at_b)?;
        let (na, nb) = (&self.f.tensors[a].name, &self.f.tensors[b].name);
        let rank = self.f.rank(a);
        if self.f.rank(b) != rank {
            return Err(Diagnostic::new(
                format!(
                    "`cat`: `{na}` has rank {rank} and `{nb}` rank {}",
                    self.f.rank(b)
                ),
                Some(span),
            ));
        }
        let (da, db) = (self.f.tensors[a].dtype, self.f.tensors[b].dtype);
        if da != db {
            return Err(Diagnostic::new(
                format!("`cat`: `{na}` is {da} and `{nb}` is {db}; cast one of them first"),
                Some(span),
            ));
        }
        let axis = self.view_axis(args, span, rank, "cat")?;
        self.view_recomputable("cat", a, at_a, &[axis])?;
        self.view_recomputable("cat", b, at_b, &[axis])?;
        let (la, lb) = (self.f.logical(a), self.f.logical(b));
        for k in (0..rank).filter(|&k| k != axis) {
            let (ea, eb) = (self.class_extent_of(la[k]), self.class_extent_of(lb[k]));
            if ea != eb {
                return Err(Diagnostic::new(
                    format!("`cat` along axis {axis}: axis {k} has extent {ea} in `{na}` and {eb} in `{nb}`"),
                    Some(span),
                ));
            }
        }
        let mut extents = vec![None; rank];
        extents[axis] = Some(sum(
            &self.class_extent_of(la[axis]),
            &self.class_extent_of(lb[axis]),
        ));
        self.view_op(
            Op::Cat { axis },
            vec![Operand::Tensor(a), Operand::Tensor(b)],
            extents,
            dest,
            span,
        )
    }

    /// `reshape(x, [extents])`.
    pub(super) fn reshape(&mut self, args: &[Arg], dest: &str, span: Span) -> BResult<TensorId> {
        let usage = "`reshape` is written reshape(x, [M, 8, 64])";
        let (x, shape) = match args {
            [Arg::Pos(x), Arg::Pos(shape)] => (x, shape),
            _ => return Err(Diagnostic::new(usage, Some(span))),
        };
        let t = match self.expr(x, dest)? {
            Value::Tensor(t) => t,
            Value::Scalar(_) | Value::Count(_) => {
                return Err(Diagnostic::new(
                    "`reshape` expects a tensor here",
                    Some(x.loc()),
                ))
            }
        };
        self.view_ranked("reshape", t, x.loc())?;
        let every_axis: Vec<usize> = (0..self.f.rank(t)).collect();
        self.view_recomputable("reshape", t, x.loc(), &every_axis)?;
        let ast::Expr::List(items, _) = shape else {
            return Err(Diagnostic::new(
                format!("{usage}: the shape is a list of extents"),
                Some(shape.loc()),
            ));
        };
        let mut extents = Vec::with_capacity(items.len());
        for item in items {
            extents.push(self.extent_product(item)?);
        }
        let name = &self.f.tensors[t].name;
        let count = |es: &[SizeExpr]| {
            es.iter().try_fold(
                Monomial {
                    coefficient: 1,
                    symbols: vec![],
                },
                |m, e| m.times(&Monomial::of(e)?),
            )
        };
        let input: Vec<SizeExpr> = self
            .f
            .logical(t)
            .iter()
            .map(|&id| self.class_extent_of(id))
            .collect();
        let (Some(have), Some(want)) = (count(&input), count(&extents)) else {
            return Err(Diagnostic::new(
                "`reshape`: an element count is too large",
                Some(shape.loc()),
            ));
        };
        if have != want {
            return Err(Diagnostic::new(
                format!("`reshape` keeps the element count: `{name}` has {have} elements and the shape {want} (each count a product of size symbols and integers; a symbol is not split into others)"),
                Some(shape.loc()),
            ));
        }
        let extents = extents.into_iter().map(Some).collect();
        self.view_op(Op::Reshape, vec![Operand::Tensor(t)], extents, dest, span)
    }

    /// An extent of `reshape`: a size symbol, a positive integer or a product of them.
    fn extent_product(&self, e: &ast::Expr) -> BResult<SizeExpr> {
        Ok(match e {
            ast::Expr::Name(s, _) if self.f.symbols.contains(s) => SizeExpr::Sym(s.clone()),
            ast::Expr::Int(i, _) if *i > 0 => SizeExpr::Const(*i),
            ast::Expr::Binary(ast::BinOp::Mul, a, b, _) => {
                crate::plan::mul(self.extent_product(a)?, self.extent_product(b)?)
            }
            other => {
                return Err(Diagnostic::new(
                    format!(
                        "an extent of `reshape` is a size symbol of the fusion's inputs ({}), a positive integer or a product of them (H * 64)",
                        self.f.symbols.join(", ")
                    ),
                    Some(other.loc()),
                ))
            }
        })
    }
}
