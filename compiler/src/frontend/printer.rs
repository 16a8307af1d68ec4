//! Canonical text of a [`Program`]: `parse(print(p)) == p`.

use super::ast::*;
use std::fmt::Write;

pub fn print(p: &Program) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "fusion {} {{", p.fusion.name);
    for item in &p.fusion.items {
        match item {
            Item::Input {
                name,
                dtype,
                dims,
                value,
                ..
            } => {
                let _ = write!(s, "  input {name}: {dtype}");
                if let Some(dims) = dims {
                    let d: Vec<String> = dims
                        .iter()
                        .map(|d| match d {
                            Dim::Sym(x) => x.clone(),
                            Dim::Const(c) => c.to_string(),
                        })
                        .collect();
                    let _ = write!(s, "[{}]", d.join(", "));
                }
                if let Some(v) = value {
                    let _ = write!(s, " = {}", expr(v));
                }
                s.push('\n');
            }
            Item::Let { name, value, .. } => {
                let _ = writeln!(s, "  {name} = {}", expr(value));
            }
            Item::LetTuple { names, value, .. } => {
                let names: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
                let _ = writeln!(s, "  {} = {}", names.join(", "), expr(value));
            }
            Item::Output { name, .. } => {
                let _ = writeln!(s, "  output {name}");
            }
        }
    }
    s.push_str("}\n");
    if !p.schedule.is_empty() {
        s.push_str("schedule {\n");
        for st in &p.schedule {
            let line = match st {
                SchedStmt::Bind {
                    name, func, args, ..
                } => format!("{name} = {func}({})", args_text(args)),
                SchedStmt::Method {
                    tensor,
                    method,
                    args,
                    ..
                } => format!("{tensor}.{method}({})", args_text(args)),
                SchedStmt::Call { func, args, .. } => format!("{func}({})", args_text(args)),
            };
            let _ = writeln!(s, "  {line}");
        }
        s.push_str("}\n");
    }
    s
}

fn args_text(args: &[Arg]) -> String {
    args.iter()
        .map(|a| match a {
            Arg::Pos(e) => expr(e),
            Arg::Named { name, value, .. } => format!("{name}={}", expr(value)),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn prec(e: &Expr) -> u8 {
    match e {
        Expr::Binary(BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne, ..) => {
            0
        }
        Expr::Binary(BinOp::Add | BinOp::Sub, ..) => 1,
        Expr::Binary(BinOp::Mul | BinOp::Div, ..) => 2,
        Expr::Neg(..) => 3,
        _ => 4,
    }
}

/// Prints an expression with the fewest parentheses that keep its tree.
pub fn expr(e: &Expr) -> String {
    match e {
        Expr::Name(n, _) => n.clone(),
        Expr::Int(i, _) => i.to_string(),
        Expr::Float(_, text, _) => text.clone(),
        Expr::Neg(inner, _) => {
            // `--x` would lex fine, but `-(-1)` keeps literals readable.
            let t = expr(inner);
            if prec(inner) < 3 || matches!(**inner, Expr::Neg(..) | Expr::Int(..) | Expr::Float(..))
            {
                format!("-({t})")
            } else {
                format!("-{t}")
            }
        }
        Expr::Binary(op, l, r, _) => {
            let p = prec(e);
            // Comparisons do not chain: a comparison as either operand is parenthesised.
            let lt = if prec(l) < p || (p == 0 && prec(l) == 0) {
                format!("({})", expr(l))
            } else {
                expr(l)
            };
            // Left-associative: a right operand of equal precedence needs parentheses.
            let rt = if prec(r) <= p {
                format!("({})", expr(r))
            } else {
                expr(r)
            };
            format!("{lt} {} {rt}", op.symbol())
        }
        Expr::Call { func, args, .. } => format!("{func}({})", args_text(args)),
        Expr::List(items, _) => format!(
            "[{}]",
            items.iter().map(expr).collect::<Vec<_>>().join(", ")
        ),
    }
}
