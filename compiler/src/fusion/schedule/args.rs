//! The arguments of one schedule statement, checked against its primitive's parameters in the
//! table ([`super::table`], in the terms of [`super::params`]) before the primitive is applied: the count of positional arguments,
//! the names of named ones (each at most once), and each value's kind (an integer, a name, one
//! of a kind's keywords, a list, a nested call such as `warp_specialized(...)`, itself checked
//! against its own parameters). [`Args`] then hands the apply function each parameter's value
//! (or its default) by name. Every error starts with the statement as the user wrote it
//! (`c.split`, `x_s = cache_after(...)`) and points at the argument.

use super::params::{either, ArgKind, IfAbsent, Param, Passing};
use super::SResult;
use crate::diag::{Diagnostic, Span};
use crate::frontend::ast::{self, Arg};
use crate::fusion::*;

/// One argument given for a parameter.
#[derive(Clone, Copy)]
pub(super) struct Given<'a> {
    pub(super) expr: &'a ast::Expr,
    /// Where a wrong value is reported: the value, or the whole `name=value`.
    pub(super) at: Span,
}

/// The checked arguments of a schedule statement (or of a nested call).
pub(super) struct Args<'a> {
    /// The statement as the user wrote it, the prefix of every error.
    pub(super) what: String,
    pub(super) span: Span,
    params: &'static [Param],
    /// For each parameter, what was given for it (several for a [`IfAbsent::Many`] one).
    given: Vec<Vec<Given<'a>>>,
}

impl<'a> Args<'a> {
    /// Matches `args` to `params`: positional arguments in order (an optional parameter whose
    /// kind does not fit the value is passed over), named ones by name; checks each value's
    /// kind.
    pub(super) fn check(
        params: &'static [Param],
        what: String,
        args: &'a [Arg],
        span: Span,
    ) -> SResult<Args<'a>> {
        let mut a = Args {
            what,
            span,
            params,
            given: vec![Vec::new(); params.len()],
        };
        let positional: Vec<usize> = (0..params.len())
            .filter(|&i| params[i].passing != Passing::Named)
            .collect();
        a.count(&positional, args)?;
        let mut next = 0;
        for arg in args {
            match arg {
                Arg::Pos(e) => {
                    let mut passed_over = Vec::new();
                    let slot = loop {
                        let Some(&i) = positional.get(next) else {
                            break None;
                        };
                        let p = &params[i];
                        if matches!(p.default, IfAbsent::Required | IfAbsent::Many)
                            || fits(p.kind, e)
                        {
                            break Some(i);
                        }
                        passed_over.push(match p.kind {
                            ArgKind::Call(_) => p.kind.describe(),
                            kind => format!("the {} ({})", p.name, kind.describe()),
                        });
                        next += 1;
                    };
                    let Some(i) = slot else {
                        return a.err(
                            format!("expected {}", passed_over.join(" or ")),
                            Some(e.loc()),
                        );
                    };
                    if params[i].default != IfAbsent::Many && !a.given[i].is_empty() {
                        return a.err(
                            format!("`{}` is given twice", params[i].name),
                            Some(e.loc()),
                        );
                    }
                    a.value(&params[i], e, e.loc())?;
                    a.given[i].push(Given {
                        expr: e,
                        at: e.loc(),
                    });
                    if params[i].default != IfAbsent::Many {
                        next += 1;
                    }
                }
                Arg::Named { name, value, loc } => {
                    let Some(i) = params
                        .iter()
                        .position(|p| p.name == name && p.passing != Passing::Positional)
                    else {
                        let names: Vec<&str> = params
                            .iter()
                            .filter(|p| p.passing != Passing::Positional)
                            .map(|p| p.name)
                            .collect();
                        let known = match names.as_slice() {
                            [] => "none are named".to_string(),
                            names => names.join(", "),
                        };
                        return a.err(format!("unknown argument `{name}` ({known})"), Some(loc.0));
                    };
                    if !a.given[i].is_empty() {
                        return a.err(format!("`{name}` is given twice"), Some(loc.0));
                    }
                    a.value(&params[i], value, loc.0)?;
                    a.given[i].push(Given {
                        expr: value,
                        at: loc.0,
                    });
                }
            }
        }
        Ok(a)
    }

    /// The count of positional arguments against the parameters taken by position.
    fn count(&self, positional: &[usize], args: &[Arg]) -> SResult<()> {
        let n = args.iter().filter(|a| matches!(a, Arg::Pos(_))).count();
        let params = || positional.iter().map(|&i| &self.params[i]);
        let min = params().filter(|p| p.default == IfAbsent::Required).count();
        let many = params().any(|p| p.default == IfAbsent::Many);
        let max = positional.len();
        if n >= min && (many || n <= max) {
            return Ok(());
        }
        let takes = if many {
            format!("at least {min}")
        } else if min == max {
            format!("{min}")
        } else {
            format!("{min} to {max}")
        };
        let mut usage = String::new();
        for p in params() {
            let sep = if usage.is_empty() { "" } else { ", " };
            usage += &match p.default {
                IfAbsent::Required => format!("{sep}{}", p.name),
                IfAbsent::Many => format!("[{sep}{}...]", p.name),
                _ => format!("[{sep}{}]", p.name),
            };
        }
        self.err(
            format!("takes {takes} positional argument(s) ({usage}), got {n}"),
            None,
        )
    }

    /// Checks one value against its parameter's kind.
    fn value(&self, p: &Param, e: &ast::Expr, at: Span) -> SResult<()> {
        let wrong = || {
            self.err(
                format!("expected {} for `{}`", p.kind.describe(), p.name),
                Some(at),
            )
        };
        match p.kind {
            ArgKind::Tensor | ArgKind::Keyword(_) => {
                ident(e).map(|_| ()).ok_or(()).or_else(|_| wrong())
            }
            ArgKind::Axis | ArgKind::Int => int_of(e).map(|_| ()).ok_or(()).or_else(|_| wrong()),
            ArgKind::Swizzle => swizzle_of(e)
                .map(|_| ())
                .ok_or(())
                .or_else(|_| self.err("swizzle is none, 32, 64 or 128 (bytes)", Some(at))),
            ArgKind::IntPair(..) => match e {
                ast::Expr::List(items, _)
                    if items.len() == 2 && items.iter().all(|i| int_of(i).is_some()) =>
                {
                    Ok(())
                }
                _ => self.err(
                    format!("{} must be {}", p.name, p.kind.describe()),
                    Some(at),
                ),
            },
            ArgKind::Call(nested) => match e {
                ast::Expr::Call { func, args, loc } if func == nested.name => {
                    Args::check(nested.params, format!("{func}(...)"), args, loc.0).map(|_| ())
                }
                _ => wrong(),
            },
            kind => self.keyword(kind, e, at).map(|_| ()),
        }
    }

    /// The keyword `e` names, one of `kind`'s.
    fn keyword(&self, kind: ArgKind, e: &'a ast::Expr, at: Span) -> SResult<&'a str> {
        let choices = either(kind.choices());
        match e {
            ast::Expr::Name(k, _) if kind.choices().contains(&k.as_str()) => Ok(k.as_str()),
            ast::Expr::Name(k, l) => self.err(
                format!("unknown {} `{k}` ({choices})", kind.noun()),
                Some(l.0),
            ),
            _ => self.err(
                format!("{} must be one of: {choices}", kind.noun()),
                Some(at),
            ),
        }
    }

    pub(super) fn err<T>(&self, msg: impl Into<String>, span: Option<Span>) -> SResult<T> {
        Err(Diagnostic::new(
            format!("{}: {}", self.what, msg.into()),
            span.or(Some(self.span)),
        ))
    }

    fn param(&self, name: &str) -> (usize, &'static Param) {
        let i = self
            .params
            .iter()
            .position(|p| p.name == name)
            .unwrap_or_else(|| panic!("`{}` has no parameter `{name}`", self.what));
        (i, &self.params[i])
    }

    /// What was given for a parameter (empty: nothing; several only for a `Many` one).
    pub(super) fn all(&self, name: &str) -> &[Given<'a>] {
        &self.given[self.param(name).0]
    }

    /// What was given for a parameter taking one value.
    pub(super) fn get(&self, name: &str) -> Option<Given<'a>> {
        self.all(name).first().copied()
    }

    /// An integer parameter: given, or its default.
    pub(super) fn int(&self, name: &str) -> i64 {
        match (self.get(name), self.param(name).1.default) {
            (Some(g), _) => int_of(g.expr),
            (None, IfAbsent::Is(text)) => text.parse().ok(),
            _ => None,
        }
        .unwrap_or_else(|| panic!("{}: `{name}` is an integer checked or defaulted", self.what))
    }

    /// A name parameter (a tensor, a keyword), if given.
    pub(super) fn ident(&self, name: &str) -> Option<(&'a str, Span)> {
        self.get(name)
            .and_then(|g| ident(g.expr).map(|n| (n, g.expr.loc())))
    }

    /// A keyword parameter read with `parse`: given, or its default.
    pub(super) fn choice<T>(&self, name: &str, parse: impl Fn(&str) -> Option<T>) -> SResult<T> {
        let p = self.param(name).1;
        let word = match (self.get(name), p.default) {
            (Some(g), _) => self.keyword(p.kind, g.expr, g.at)?,
            (None, IfAbsent::Is(word)) => word,
            (None, d) => panic!("{}: `{name}` has no default value ({d:?})", self.what),
        };
        parse(word).ok_or(()).or_else(|_| {
            self.err(
                format!(
                    "unknown {} `{word}` ({})",
                    p.kind.noun(),
                    either(p.kind.choices())
                ),
                self.get(name).map(|g| g.expr.loc()),
            )
        })
    }

    /// The swizzle in bytes (0: none) and where it was given, if it was.
    pub(super) fn swizzle(&self, name: &str) -> Option<(u32, Span)> {
        self.get(name)
            .and_then(|g| swizzle_of(g.expr).map(|b| (b, g.at)))
    }

    /// A `[a, b]` parameter and where it was given, if it was.
    pub(super) fn int_pair(&self, name: &str) -> Option<((i64, i64), Span)> {
        let g = self.get(name)?;
        match g.expr {
            ast::Expr::List(items, _) => match items.as_slice() {
                [a, b] => Some(((int_of(a)?, int_of(b)?), g.at)),
                _ => None,
            },
            _ => None,
        }
    }

    /// A nested-call parameter's own checked arguments, if it was given.
    pub(super) fn nested(&self, name: &str) -> SResult<Option<Args<'a>>> {
        let ArgKind::Call(nested) = self.param(name).1.kind else {
            panic!("{}: `{name}` is not a nested call", self.what);
        };
        match self.get(name).map(|g| g.expr) {
            Some(ast::Expr::Call { func, args, loc }) => {
                Args::check(nested.params, format!("{func}(...)"), args, loc.0).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The tensor a required name parameter names.
    pub(super) fn tensor(&self, f: &Fusion, name: &str) -> SResult<(TensorId, &'a str, Span)> {
        let g = self
            .get(name)
            .unwrap_or_else(|| panic!("{}: `{name}` is a required tensor", self.what));
        self.tensor_of(f, g)
    }

    /// The tensor a given name argument names.
    pub(super) fn tensor_of(&self, f: &Fusion, g: Given<'a>) -> SResult<(TensorId, &'a str, Span)> {
        match g.expr {
            ast::Expr::Name(n, l) => tensor(f, n, l.0).map(|t| (t, n.as_str(), l.0)),
            e => self.err("expected a tensor name", Some(e.loc())),
        }
    }

    /// Resolves a given (possibly negative) loop axis of tensor `t`.
    pub(super) fn axis(&self, f: &Fusion, t: TensorId, g: Given) -> SResult<usize> {
        let v = int_of(g.expr).unwrap_or_default();
        let n = f.tensors[t].loop_domain.len() as i64;
        let ax = if v < 0 { v + n } else { v };
        if ax < 0 || ax >= n {
            return self.err(
                format!(
                    "axis {v} is out of range: `{}` has {n} loop axes",
                    f.tensors[t].name
                ),
                Some(g.at),
            );
        }
        Ok(ax as usize)
    }

    /// The loop axis a required axis parameter gives.
    pub(super) fn axis_of(&self, f: &Fusion, t: TensorId, name: &str) -> SResult<usize> {
        let g = self
            .get(name)
            .unwrap_or_else(|| panic!("{}: `{name}` is a required axis", self.what));
        self.axis(f, t, g)
    }
}

/// Whether `e` has the shape of a value of `kind` (for matching optional positional
/// parameters; the value itself is checked after).
fn fits(kind: ArgKind, e: &ast::Expr) -> bool {
    match kind {
        ArgKind::Axis | ArgKind::Int => int_of(e).is_some(),
        ArgKind::Swizzle => swizzle_of(e).is_some(),
        ArgKind::IntPair(..) => matches!(e, ast::Expr::List(..)),
        ArgKind::Call(n) => matches!(e, ast::Expr::Call { func, .. } if func == n.name),
        _ => ident(e).is_some(),
    }
}

fn ident(e: &ast::Expr) -> Option<&str> {
    match e {
        ast::Expr::Name(n, _) => Some(n.as_str()),
        _ => None,
    }
}

pub(super) fn int_of(e: &ast::Expr) -> Option<i64> {
    match e {
        ast::Expr::Int(i, _) => Some(*i),
        ast::Expr::Neg(inner, _) => int_of(inner).map(|v| -v),
        _ => None,
    }
}

fn swizzle_of(e: &ast::Expr) -> Option<u32> {
    match e {
        ast::Expr::Name(n, _) if n == "none" => Some(0),
        e => int_of(e)
            .filter(|b| [0, 32, 64, 128].contains(b))
            .map(|b| b as u32),
    }
}

pub(super) fn tensor(f: &Fusion, name: &str, span: Span) -> SResult<TensorId> {
    f.tensor_by_name(name)
        .ok_or_else(|| Diagnostic::new(format!("unknown tensor `{name}`"), Some(span)))
}
