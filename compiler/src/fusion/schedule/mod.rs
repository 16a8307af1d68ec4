//! Applies a schedule (the `schedule { ... }` block) to a fusion: caching, loop transformations,
//! parallelization, memory types, inlining positions, pipelining and the grid. Every primitive
//! is an entry of one table ([`table::PRIMITIVES`]: name, how it is written, parameters with
//! kinds and defaults, doc, apply function); each statement is looked up there, its arguments
//! checked against the entry ([`args`]), and the entry's function applied. An error names the
//! statement as written, the tensor, the axis and the rule.
//!
//! The apply functions, by what they do: [`memory`] (caches, `set_memory`), [`loops`] (split,
//! merge, reorder, rfactor, propagate), [`parallel`], [`inlining`], [`recompute`], [`pipeline`]
//! (circular buffering, warp specialization), [`grid`] (cluster, persistent), [`online`] (the
//! online softmax) and [`welford`] (a variance or a log-sum-exp in one pass).
//!
//! A statement that fails after changing the fusion is undone from a copy taken before it; a
//! statement whose checks all come before its first change (`checks_before_changing`, from the
//! table) needs no copy (debug builds take one anyway and check it was not needed), which keeps a
//! long schedule linear. Loop domains are bounded by `transform::MAX_LOOP_AXES` and
//! `transform::MAX_DERIVATION_SIZE` (their docs say why).

use super::*;
use crate::diag::Diagnostic;
use crate::frontend::ast::{self, Arg, SchedStmt};

pub(crate) use super::transform::*;

mod args;
mod grid;
mod inlining;
mod loops;
mod memory;
mod online;
mod parallel;
mod params;
mod pipeline;
mod recompute;
pub mod table;
mod welford;

use args::{tensor, Args};
use table::{Apply, Form};

type SResult<T> = Result<T, Diagnostic>;

pub fn apply(f: &mut Fusion, stmts: &[SchedStmt]) -> SResult<()> {
    match apply_all(f, stmts).into_iter().next() {
        Some(first) => Err(first),
        None => Ok(()),
    }
}

/// Applies every statement and returns every independent error (none: the whole schedule
/// applied). A statement that fails leaves the fusion as it was and is skipped; so is every
/// later statement that names a tensor a failed statement named (its errors would only follow
/// from the first one). Axes made by a statement remember it ([`IterDomain::stmt`]), so an error
/// found later, in a pass, can point at the statement that made the axis.
///
/// Inside a [`crate::Cancel::scope`] whose flag is set, stops before the next statement
/// ([`crate::Cancel::error`] then ends the list).
pub fn apply_all(f: &mut Fusion, stmts: &[SchedStmt]) -> Vec<Diagnostic> {
    let mut errors = Vec::new();
    let mut failed: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for st in stmts {
        if let Err(stopped) = crate::Cancel::check() {
            errors.push(stopped);
            break;
        }
        let (loc, names) = stmt_names(st);
        if names.iter().any(|n| failed.contains(n)) {
            continue;
        }
        // The fusion as it was, to restore when the statement fails: a copy of the whole
        // fusion, so only for statements that may fail after changing it (a copy per statement
        // made long schedules of large fusions quadratic). Debug builds copy for every statement
        // and check that the others did leave it untouched.
        let keep_copy = cfg!(debug_assertions) || !checks_before_changing(st);
        let before = keep_copy.then(|| f.clone());
        let first_new = f.ids.len();
        match apply_one(f, st) {
            Ok(()) => {
                for id in &mut f.ids[first_new..] {
                    id.stmt = Some(loc);
                }
            }
            Err(e) => {
                if let Some(before) = before {
                    debug_assert!(
                        !checks_before_changing(st) || format!("{f:?}") == format!("{before:?}"),
                        "a failed `{}` changed the fusion",
                        names.first().copied().unwrap_or("schedule statement")
                    );
                    *f = before;
                }
                let bound = match st {
                    SchedStmt::Bind { name, .. } => Some(name.as_str()),
                    _ => None,
                };
                failed.extend(
                    names
                        .iter()
                        .copied()
                        .filter(|n| Some(*n) == bound || f.tensors.iter().any(|t| t.name == *n)),
                );
                errors.push(e);
            }
        }
    }
    errors
}

/// Whether a statement, when it fails, has not changed the fusion: its primitive checks
/// everything before its first change ([`table::Primitive::checks_first`]), or it names no
/// primitive. The others (caching, `rfactor`, `circular_buffer`) are undone from a copy.
fn checks_before_changing(st: &SchedStmt) -> bool {
    let (SchedStmt::Bind { func: name, .. }
    | SchedStmt::Method { method: name, .. }
    | SchedStmt::Call { func: name, .. }) = st;
    table::primitive(name).is_none_or(|p| p.checks_first)
}

/// A statement's span and the names it mentions (the tensor it acts on, names in its
/// arguments, the name it binds).
fn stmt_names(st: &SchedStmt) -> (Span, Vec<&str>) {
    fn arg_names<'a>(args: &'a [Arg], out: &mut Vec<&'a str>) {
        for a in args {
            let e = match a {
                Arg::Pos(e) | Arg::Named { value: e, .. } => e,
            };
            if let ast::Expr::Name(n, _) = e {
                out.push(n.as_str());
            }
        }
    }
    let mut names = Vec::new();
    let loc = match st {
        SchedStmt::Bind {
            name, args, loc, ..
        } => {
            names.push(name.as_str());
            arg_names(args, &mut names);
            loc.0
        }
        SchedStmt::Method {
            tensor, args, loc, ..
        } => {
            names.push(tensor.as_str());
            arg_names(args, &mut names);
            loc.0
        }
        SchedStmt::Call { args, loc, .. } => {
            arg_names(args, &mut names);
            loc.0
        }
    };
    (loc, names)
}

fn untransformed(f: &Fusion, t: TensorId, a: &Args) -> SResult<()> {
    if f.tensors[t].loop_domain != f.tensors[t].root
        || f.tensors[t]
            .root
            .iter()
            .any(|&i| f.ids[i].parallel != ParallelType::Serial)
    {
        return a.err(
            format!("`{}` is already scheduled: cache it before splitting, merging, reordering or parallelizing it", f.tensors[t].name),
            None,
        );
    }
    Ok(())
}

fn new_name(f: &Fusion, name: &str, span: Span) -> SResult<()> {
    crate::fusion::build::check_identifier(name, span)?;
    if f.tensor_by_name(name).is_some() {
        return Err(Diagnostic::new(
            format!("`{name}` is already defined"),
            Some(span),
        ));
    }
    Ok(())
}

/// Looks the statement's primitive up in the table, checks its arguments against it and
/// applies it.
fn apply_one(f: &mut Fusion, st: &SchedStmt) -> SResult<()> {
    let (form, name, what, args, span) = match st {
        SchedStmt::Bind {
            name,
            func,
            args,
            loc,
        } => (
            Form::Binding,
            func,
            format!("{name} = {func}(...)"),
            args,
            loc.0,
        ),
        SchedStmt::Method {
            tensor,
            method,
            args,
            loc,
        } => (
            Form::Method,
            method,
            format!("{tensor}.{method}"),
            args,
            loc.0,
        ),
        SchedStmt::Call { func, args, loc } => {
            (Form::Statement, func, format!("{func}(...)"), args, loc.0)
        }
    };
    let primitive = table::lookup(form, name, &what, span)?;
    match (primitive.apply, st) {
        (Apply::Method(apply), SchedStmt::Method { tensor: tname, .. }) => {
            let t = tensor(f, tname, span)?;
            if f.tensors[t].is_input && !primitive.on_inputs {
                return Err(Diagnostic::new(
                    format!("{what}: `{tname}` is an input and is never computed; schedule a cache of it (x_c = cache_after({tname}))"),
                    Some(span),
                ));
            }
            apply(f, t, &Args::check(primitive.params, what, args, span)?)
        }
        (Apply::Binding(apply), SchedStmt::Bind { name: bound, .. }) => {
            apply(f, bound, &Args::check(primitive.params, what, args, span)?)
        }
        (Apply::Statement(apply), SchedStmt::Call { .. }) => {
            apply(f, &Args::check(primitive.params, what, args, span)?)
        }
        _ => Err(table::wrong_form(primitive, &what, span)),
    }
}
