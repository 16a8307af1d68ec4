//! The syntax tree of a program: one fusion and an optional schedule.
//!
//! Locations ([`Loc`]) take no part in equality, so `parse(print(p)) == p` holds for every
//! program `p` the parser accepts.

use crate::diag::Span;
use crate::dtype::DType;

/// A source span that compares equal to every other span.
#[derive(Clone, Copy, Debug, Default)]
pub struct Loc(pub Span);

impl PartialEq for Loc {
    fn eq(&self, _: &Loc) -> bool {
        true
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub fusion: FusionDef,
    pub schedule: Vec<SchedStmt>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FusionDef {
    pub name: String,
    pub items: Vec<Item>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Dim {
    Sym(String),
    Const(i64),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// `input x: f32[M, N]`; `dims` is None for a scalar (`input alpha: f32`), which may give
    /// its value at launch (`input eps: f32 = 1e-6`: a number, possibly negated).
    Input {
        name: String,
        dtype: DType,
        dims: Option<Vec<Dim>>,
        value: Option<Expr>,
        loc: Loc,
    },
    /// `y = expr`
    Let { name: String, value: Expr, loc: Loc },
    /// `v, m = var_mean(x, axis=1)`: a call that gives several tensors, one name each (two or
    /// more names, each with its location).
    LetTuple {
        names: Vec<(String, Loc)>,
        value: Expr,
        loc: Loc,
    },
    /// `output y`
    Output { name: String, loc: Loc },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl BinOp {
    /// The comparisons, by their symbols (the lexer's two-character operators among them).
    pub const COMPARISONS: [BinOp; 6] = [
        BinOp::Lt,
        BinOp::Le,
        BinOp::Gt,
        BinOp::Ge,
        BinOp::Eq,
        BinOp::Ne,
    ];

    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
        }
    }
}

/// An argument of a call: positional or `name=value`.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    Pos(Expr),
    Named { name: String, value: Expr, loc: Loc },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Name(String, Loc),
    Int(i64, Loc),
    /// A float literal keeps its text so printing round-trips exactly.
    Float(f64, String, Loc),
    Neg(Box<Expr>, Loc),
    Binary(BinOp, Box<Expr>, Box<Expr>, Loc),
    Call {
        func: String,
        args: Vec<Arg>,
        loc: Loc,
    },
    /// `[0, 1]` (axis lists)
    List(Vec<Expr>, Loc),
}

impl Expr {
    pub fn loc(&self) -> Span {
        match self {
            Expr::Name(_, l)
            | Expr::Int(_, l)
            | Expr::Float(_, _, l)
            | Expr::Neg(_, l)
            | Expr::Binary(_, _, _, l)
            | Expr::Call { loc: l, .. }
            | Expr::List(_, l) => l.0,
        }
    }
}

/// One schedule statement.
#[derive(Clone, Debug, PartialEq)]
pub enum SchedStmt {
    /// `xs = cache_after(x, memory=shared)` (and `cache_before`)
    Bind {
        name: String,
        func: String,
        args: Vec<Arg>,
        loc: Loc,
    },
    /// `y.split(1, 128)`
    Method {
        tensor: String,
        method: String,
        args: Vec<Arg>,
        loc: Loc,
    },
    /// `inline_most()`, `propagate(y)`
    Call {
        func: String,
        args: Vec<Arg>,
        loc: Loc,
    },
}
