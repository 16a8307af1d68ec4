//! The arguments of schedule statements: positional and named values checked one at a time
//! (integers, identifiers, tensors, axes), and the option lists of `cache_after` /
//! `cache_before` and `warp_specialized(...)`; every error points at the argument.

use super::SResult;
use crate::diag::{Diagnostic, Span};
use crate::frontend::ast::{self, Arg};
use crate::fusion::*;

/// Arguments of a schedule call, checked one at a time.
pub(super) struct Args<'a> {
    pub(super) what: String,
    pub(super) pos: Vec<&'a ast::Expr>,
    pub(super) named: Vec<(&'a str, &'a ast::Expr, Span)>,
    pub(super) span: Span,
}

impl<'a> Args<'a> {
    pub(super) fn new(what: String, args: &'a [Arg], span: Span) -> Args<'a> {
        let mut pos = Vec::new();
        let mut named = Vec::new();
        for a in args {
            match a {
                Arg::Pos(e) => pos.push(e),
                Arg::Named { name, value, loc } => named.push((name.as_str(), value, loc.0)),
            }
        }
        Args {
            what,
            pos,
            named,
            span,
        }
    }
    pub(super) fn err<T>(&self, msg: impl Into<String>, span: Option<Span>) -> SResult<T> {
        Err(Diagnostic::new(
            format!("{}: {}", self.what, msg.into()),
            span.or(Some(self.span)),
        ))
    }
    pub(super) fn count(&self, min: usize, max: usize) -> SResult<()> {
        if self.pos.len() < min || self.pos.len() > max {
            let n = if min == max {
                format!("{min}")
            } else {
                format!("{min} to {max}")
            };
            return self.err(
                format!("takes {n} positional argument(s), got {}", self.pos.len()),
                None,
            );
        }
        Ok(())
    }
    pub(super) fn no_named(&self) -> SResult<()> {
        if let Some((n, _, sp)) = self.named.first() {
            return self.err(format!("unknown argument `{n}`"), Some(*sp));
        }
        Ok(())
    }
    pub(super) fn int(&self, i: usize) -> SResult<i64> {
        int_of(self.pos[i])
            .ok_or(())
            .or_else(|_| self.err("expected an integer", Some(self.pos[i].loc())))
    }
    pub(super) fn ident(&self, i: usize) -> SResult<(&'a str, Span)> {
        match self.pos[i] {
            ast::Expr::Name(n, l) => Ok((n.as_str(), l.0)),
            e => self.err("expected a name", Some(e.loc())),
        }
    }
}

pub(super) fn int_of(e: &ast::Expr) -> Option<i64> {
    match e {
        ast::Expr::Int(i, _) => Some(*i),
        ast::Expr::Neg(inner, _) => int_of(inner).map(|v| -v),
        _ => None,
    }
}

pub(super) fn tensor(f: &Fusion, name: &str, span: Span) -> SResult<TensorId> {
    f.tensor_by_name(name)
        .ok_or_else(|| Diagnostic::new(format!("unknown tensor `{name}`"), Some(span)))
}

/// Resolves a (possibly negative) axis of a tensor's loop domain.
pub(super) fn axis(f: &Fusion, t: TensorId, a: &Args, i: usize) -> SResult<usize> {
    let v = a.int(i)?;
    let n = f.tensors[t].loop_domain.len() as i64;
    let ax = if v < 0 { v + n } else { v };
    if ax < 0 || ax >= n {
        return a.err(
            format!(
                "axis {v} is out of range: `{}` has {n} loop axes",
                f.tensors[t].name
            ),
            Some(a.pos[i].loc()),
        );
    }
    Ok(ax as usize)
}

/// The named arguments of `cache_after` / `cache_before`.
pub(super) struct CacheArgs {
    pub(super) memory: Option<MemoryType>,
    pub(super) load: LoadKind,
    pub(super) store: LoadKind,
    pub(super) fence: Option<FenceMode>,
    pub(super) swizzle: Option<(u32, Span)>,
}

pub(super) fn name_arg<T>(
    a: &Args,
    value: &ast::Expr,
    sp: Span,
    what: &str,
    choices: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> SResult<T> {
    match value {
        ast::Expr::Name(k, l) => parse(k).ok_or_else(|| {
            Diagnostic::new(
                format!("{}: unknown {what} `{k}` ({choices})", a.what),
                Some(l.0),
            )
        }),
        _ => a.err(format!("{what} must be one of: {choices}"), Some(sp)),
    }
}

pub(super) fn cache_args(a: &Args) -> SResult<CacheArgs> {
    let mut out = CacheArgs {
        memory: None,
        load: LoadKind::Plain,
        store: LoadKind::Plain,
        fence: None,
        swizzle: None,
    };
    for (name, value, sp) in &a.named {
        match *name {
            "memory" => {
                out.memory = Some(name_arg(
                    a,
                    value,
                    *sp,
                    "memory",
                    "global, shared or local",
                    MemoryType::parse,
                )?)
            }
            "load" => {
                out.load = name_arg(
                    a,
                    value,
                    *sp,
                    "load kind",
                    "plain, tma or bulk",
                    LoadKind::parse,
                )?
            }
            "store" => {
                out.store = name_arg(a, value, *sp, "store kind", "plain or tma", |k| {
                    LoadKind::parse(k).filter(|&k| k != LoadKind::Bulk)
                })?
            }
            "fence" => {
                out.fence = Some(name_arg(
                    a,
                    value,
                    *sp,
                    "fence placement",
                    "analysis, per_store or issuing_warp",
                    FenceMode::parse,
                )?)
            }
            "swizzle" => {
                let bytes = match value {
                    ast::Expr::Name(n, _) if n == "none" => Some(0),
                    e => int_of(e).filter(|b| [0, 32, 64, 128].contains(b)),
                };
                let Some(bytes) = bytes else {
                    return a.err("swizzle is none, 32, 64 or 128 (bytes)", Some(*sp));
                };
                out.swizzle = Some((bytes as u32, *sp));
            }
            other => return a.err(format!("unknown argument `{other}`"), Some(*sp)),
        }
    }
    Ok(out)
}

/// `warp_specialized(TIDx|TIDy|TIDz, registers=[producer, consumer], warp=N)`.
pub(super) fn warp_specialized(a: &Args, args: &[Arg], span: Span) -> SResult<WarpSpecialized> {
    let inner = Args::new("warp_specialized(...)".into(), args, span);
    inner.count(1, 1)?;
    let (on, on_span) = inner.ident(0)?;
    let on = match ParallelType::parse(on) {
        Some(p @ (ParallelType::TIDx | ParallelType::TIDy | ParallelType::TIDz)) => p,
        _ => {
            return a.err(
                format!("warp_specialized: `{on}` is not a thread dim (TIDx, TIDy or TIDz)"),
                Some(on_span),
            )
        }
    };
    let mut out = WarpSpecialized {
        on,
        registers: None,
        warp: 0,
    };
    for (n, v, sp) in &inner.named {
        match *n {
            "registers" => {
                let ast::Expr::List(items, _) = v else {
                    return a.err("registers must be a list [producer, consumer]", Some(*sp));
                };
                let vals: Vec<i64> = items.iter().filter_map(int_of).collect();
                if items.len() != 2 || vals.len() != 2 {
                    return a.err(
                        "registers must be two integers: [producer, consumer]",
                        Some(*sp),
                    );
                }
                if vals.iter().any(|&r| !(0..=1024).contains(&r)) {
                    return a.err("register counts are 24 to 256", Some(*sp));
                }
                out.registers = Some((vals[0] as u32, vals[1] as u32));
            }
            "warp" => match int_of(v) {
                Some(w @ 0..=3) => out.warp = w as u32,
                _ => {
                    return a.err(
                        "warp is the producer warp (0 to 3) that issues this tensor's loads",
                        Some(*sp),
                    )
                }
            },
            other => {
                return a.err(
                    format!("unknown argument `{other}` of warp_specialized (registers, warp)"),
                    Some(*sp),
                )
            }
        }
    }
    Ok(out)
}
