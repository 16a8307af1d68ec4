//! Recursive-descent parser: tokens → [`Program`]. Never panics; every error carries a span.
//!
//! A syntax error ends its statement, not the parse: the parser skips to the next statement
//! (a new line, `;`, or the `}` of the block) and goes on, so [`parse_all`] reports every
//! independent error. An unclosed `(` or `[` is reported at the bracket itself (the lexer joins
//! the lines inside brackets, so the error is only seen lines later).

use super::ast::*;
use super::lexer::{lex, Tok, Token};
use crate::diag::{Diagnostic, Span};
use crate::dtype::DType;

/// Deepest expression nesting accepted (keeps recursion bounded on hostile input).
const MAX_DEPTH: usize = 64;
/// Most operations in one statement's expression. The expression tree is walked recursively
/// after parsing (builder, printer, drop), and its height is at most its operation count, so
/// this bounds every later walk of it: `x + x + ... + x` builds a left spine as tall as the sum
/// is long.
pub const MAX_EXPR_OPS: usize = 512;

/// The program, or its first syntax error (see [`parse_all`] for all of them).
pub fn parse(src: &str) -> Result<Program, Diagnostic> {
    parse_all(src).map_err(|mut errors| errors.swap_remove(0))
}

/// The program, or every syntax error in source order (never an empty list): after an error the
/// parser resumes at the next statement.
pub fn parse_all(src: &str) -> Result<Program, Vec<Diagnostic>> {
    let tokens = lex(src).map_err(|d| vec![d])?;
    let mut p = Parser {
        src,
        tokens,
        pos: 0,
        depth: 0,
        ops: 0,
        errors: Vec::new(),
    };
    let program = p.program();
    match program {
        Ok(program) if p.errors.is_empty() => Ok(program),
        Ok(_) => Err(p.errors),
        Err(d) => {
            p.errors.push(d);
            Err(p.errors)
        }
    }
}

struct Parser<'a> {
    src: &'a str,
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
    /// Operations in the expression being parsed (see [`MAX_EXPR_OPS`]).
    ops: usize,
    /// Errors of the statements skipped so far.
    errors: Vec<Diagnostic>,
}

type PResult<T> = Result<T, Diagnostic>;

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => format!("`{s}`"),
        Tok::Int(i) => format!("`{i}`"),
        Tok::Float(_, s) => format!("`{s}`"),
        Tok::Punct(c) => format!("`{c}`"),
        Tok::Compare(op) => format!("`{op}`"),
        Tok::Newline => "end of line".into(),
        Tok::Eof => "end of input".into(),
    }
}

impl Parser<'_> {
    fn peek(&self) -> &Tok {
        &self.tokens[self.pos.min(self.tokens.len() - 1)].tok
    }
    fn span(&self) -> Span {
        self.tokens[self.pos.min(self.tokens.len() - 1)].span
    }
    fn prev_end(&self) -> usize {
        if self.pos == 0 {
            0
        } else {
            self.tokens[self.pos - 1].span.end
        }
    }
    fn bump(&mut self) -> Token {
        let t = self.tokens[self.pos.min(self.tokens.len() - 1)].clone();
        if self.pos < self.tokens.len() - 1 {
            self.pos += 1;
        }
        t
    }
    fn err<T>(&self, what: &str) -> PResult<T> {
        Err(Diagnostic::new(
            format!("expected {what}, found {}", describe(self.peek())),
            Some(self.span()),
        ))
    }
    fn is_punct(&self, c: char) -> bool {
        *self.peek() == Tok::Punct(c)
    }
    fn eat_punct(&mut self, c: char) -> bool {
        if self.is_punct(c) {
            self.bump();
            true
        } else {
            false
        }
    }
    fn expect_punct(&mut self, c: char) -> PResult<Span> {
        if self.is_punct(c) {
            Ok(self.bump().span)
        } else {
            self.err(&format!("`{c}`"))
        }
    }
    fn ident(&mut self, what: &str) -> PResult<(String, Span)> {
        match self.peek().clone() {
            Tok::Ident(s) => {
                let sp = self.bump().span;
                Ok((s, sp))
            }
            _ => self.err(what),
        }
    }
    fn keyword(&mut self, kw: &str) -> PResult<Span> {
        match self.peek() {
            Tok::Ident(s) if s == kw => Ok(self.bump().span),
            _ => self.err(&format!("`{kw}`")),
        }
    }
    fn skip_newlines(&mut self) {
        while matches!(self.peek(), Tok::Newline) || self.is_punct(';') {
            self.bump();
        }
    }
    /// A statement ends at a newline, `;` or before `}`.
    fn end_stmt(&mut self) -> PResult<()> {
        match self.peek() {
            Tok::Newline | Tok::Eof => {
                self.bump();
                Ok(())
            }
            Tok::Punct(';') => {
                self.bump();
                Ok(())
            }
            Tok::Punct('}') => Ok(()),
            // The newline was swallowed by an unclosed bracket further up (reported there).
            _ if !self.errors.is_empty() && self.starts_line(self.pos) => Ok(()),
            _ => self.err("end of statement (a new line or `;`)"),
        }
    }

    /// Whether the token at `i` is the first on its line (newlines inside brackets are not
    /// tokens, so this is how a statement after an unclosed `(` is found).
    fn starts_line(&self, i: usize) -> bool {
        i > 0
            && i < self.tokens.len()
            && self
                .src
                .get(self.tokens[i - 1].span.end..self.tokens[i].span.start)
                .is_some_and(|gap| gap.contains('\n'))
    }

    /// Records `error` and skips the rest of the statement that began at token `start`: to
    /// after the next newline or `;`, or to a `}`, the end of input or the first token of a
    /// later line, whichever comes first (always past at least one token, so it progresses).
    fn recover(&mut self, error: Diagnostic, start: usize) {
        self.errors.push(error);
        if self.pos == start && !matches!(self.peek(), Tok::Eof | Tok::Punct('}')) {
            self.bump();
        }
        loop {
            match self.peek() {
                Tok::Newline | Tok::Punct(';') => {
                    self.bump();
                    return;
                }
                Tok::Eof | Tok::Punct('}') => return,
                _ if self.starts_line(self.pos) => return,
                _ => {
                    self.bump();
                }
            }
        }
    }

    /// After the items of a bracketed list: `close` (consumed) or `,`. Anything else on a
    /// later line (or the end of input) means the bracket at `open` was never closed: the
    /// error points at it.
    fn close_or_comma(&mut self, open: Span, close: char) -> PResult<bool> {
        if self.eat_punct(close) {
            return Ok(true);
        }
        if self.eat_punct(',') {
            return Ok(false);
        }
        self.unclosed(open, close)?;
        self.err(&format!("`,` or `{close}`"))
    }

    /// `close` after a parenthesized expression (see [`Parser::close_or_comma`]).
    fn expect_close(&mut self, open: Span, close: char) -> PResult<()> {
        if self.eat_punct(close) {
            return Ok(());
        }
        self.unclosed(open, close)?;
        self.err(&format!("`{close}`"))
    }

    /// The error at the bracket `open` when the token here shows it was never closed: the end
    /// of input, a `}` or `;`, or the first token of a later line.
    fn unclosed(&self, open: Span, close: char) -> PResult<()> {
        let unclosed = matches!(self.peek(), Tok::Eof | Tok::Punct('}') | Tok::Punct(';'))
            || self.starts_line(self.pos);
        if !unclosed {
            return Ok(());
        }
        let opener = if close == ')' { '(' } else { '[' };
        Err(Diagnostic::new(
            format!(
                "unclosed `{opener}`: expected `{close}` before {}",
                describe(self.peek())
            ),
            Some(open),
        ))
    }

    fn program(&mut self) -> PResult<Program> {
        self.skip_newlines();
        let fusion = self.fusion()?;
        self.skip_newlines();
        let mut schedule = Vec::new();
        if let Tok::Ident(s) = self.peek() {
            if s == "schedule" {
                self.bump();
                self.expect_punct('{')?;
                loop {
                    self.skip_newlines();
                    if self.eat_punct('}') {
                        break;
                    }
                    if matches!(self.peek(), Tok::Eof) {
                        return self.err("`}` closing the schedule");
                    }
                    let start = self.pos;
                    match self
                        .sched_stmt()
                        .and_then(|st| self.end_stmt().map(|()| st))
                    {
                        Ok(st) => schedule.push(st),
                        Err(d) => self.recover(d, start),
                    }
                }
            }
        }
        self.skip_newlines();
        if !matches!(self.peek(), Tok::Eof) {
            return self.err("end of input after the fusion and its schedule");
        }
        Ok(Program { fusion, schedule })
    }

    fn fusion(&mut self) -> PResult<FusionDef> {
        self.keyword("fusion")?;
        let (name, _) = self.ident("a fusion name")?;
        self.expect_punct('{')?;
        let mut items = Vec::new();
        loop {
            self.skip_newlines();
            if self.eat_punct('}') {
                break;
            }
            if matches!(self.peek(), Tok::Eof) {
                return self.err("`}` closing the fusion");
            }
            let start = self.pos;
            match self.item().and_then(|item| self.end_stmt().map(|()| item)) {
                Ok(item) => items.push(item),
                Err(d) => self.recover(d, start),
            }
        }
        Ok(FusionDef { name, items })
    }

    /// One statement of the fusion: an input, an output or an assignment.
    fn item(&mut self) -> PResult<Item> {
        let start = self.span().start;
        let (word, word_span) = match self.peek().clone() {
            Tok::Ident(s) => (s, self.span()),
            _ => return self.err("`input`, `output` or an assignment"),
        };
        let item = match word.as_str() {
            "input"
                if !matches!(
                    self.tokens.get(self.pos + 1).map(|t| &t.tok),
                    Some(Tok::Punct('='))
                ) =>
            {
                self.bump();
                let (name, _) = self.ident("an input name")?;
                self.expect_punct(':')?;
                let (ty, ty_span) = self.ident("a dtype (f32, f16, bf16, i32, f64)")?;
                let dtype = DType::parse(&ty).ok_or_else(|| {
                    Diagnostic::new(
                        format!("unknown dtype `{ty}` (expected f32, f16, bf16, i32 or f64)"),
                        Some(ty_span),
                    )
                })?;
                let dims =
                    if self.is_punct('[') {
                        let open = self.bump().span;
                        let mut dims = Vec::new();
                        // `f32[]`: a 0-d tensor in global memory (a kernel's scalar result read
                        // by the next kernel), not a value passed at launch.
                        if self.is_punct(']') {
                            self.bump();
                        } else {
                            loop {
                                match self.peek().clone() {
                                    Tok::Ident(s) => {
                                        self.bump();
                                        dims.push(Dim::Sym(s));
                                    }
                                    Tok::Int(i) => {
                                        let sp = self.bump().span;
                                        if i < 1 {
                                            return Err(Diagnostic::new(
                                                "a constant extent must be at least 1",
                                                Some(sp),
                                            ));
                                        }
                                        dims.push(Dim::Const(i));
                                    }
                                    _ => return self.err(
                                        "an extent (a size symbol like `N` or a positive integer)",
                                    ),
                                }
                                if self.close_or_comma(open, ']')? {
                                    break;
                                }
                            }
                        }
                        if dims.len() > 8 {
                            return Err(Diagnostic::new(
                                "a tensor has at most 8 dimensions",
                                Some(ty_span),
                            ));
                        }
                        Some(dims)
                    } else {
                        None
                    };
                let value = if self.is_punct('=') {
                    let eq = self.bump().span;
                    if dims.is_some() {
                        return Err(Diagnostic::new(
                            "only a scalar input (no extents) takes a value: `input eps: f32 = 1e-6`",
                            Some(eq),
                        ));
                    }
                    let v = self.unary()?;
                    let number = match &v {
                        Expr::Int(..) | Expr::Float(..) => true,
                        Expr::Neg(inner, _) => matches!(**inner, Expr::Int(..) | Expr::Float(..)),
                        _ => false,
                    };
                    if !number {
                        return Err(Diagnostic::new(
                            "a scalar input's value is a number (`input eps: f32 = 1e-6`)",
                            Some(v.loc()),
                        ));
                    }
                    Some(v)
                } else {
                    None
                };
                Item::Input {
                    name,
                    dtype,
                    dims,
                    value,
                    loc: Loc(Span::new(start, self.prev_end())),
                }
            }
            "output"
                if !matches!(
                    self.tokens.get(self.pos + 1).map(|t| &t.tok),
                    Some(Tok::Punct('='))
                ) =>
            {
                self.bump();
                let (name, _) = self.ident("an output name")?;
                Item::Output {
                    name,
                    loc: Loc(Span::new(start, self.prev_end())),
                }
            }
            _ => {
                self.bump();
                // `v, m = var_mean(x, axis=1)`: several names, one call.
                let mut names = vec![(word, Loc(word_span))];
                while self.eat_punct(',') {
                    let (name, at) = self.ident("a name to assign")?;
                    names.push((name, Loc(at)));
                }
                self.expect_punct('=')?;
                let value = self.expr()?;
                let loc = Loc(word_span.join(Span::new(start, self.prev_end())));
                if names.len() == 1 {
                    let (name, _) = names.pop().expect("one name");
                    Item::Let { name, value, loc }
                } else {
                    Item::LetTuple { names, value, loc }
                }
            }
        };
        Ok(item)
    }

    fn sched_stmt(&mut self) -> PResult<SchedStmt> {
        let start = self.span().start;
        let (first, _) = self.ident("a schedule statement")?;
        if self.eat_punct('=') {
            let (func, _) = self.ident("`cache_after` or `cache_before`")?;
            let args = self.call_args()?;
            return Ok(SchedStmt::Bind {
                name: first,
                func,
                args,
                loc: Loc(Span::new(start, self.prev_end())),
            });
        }
        if self.eat_punct('.') {
            let (method, _) =
                self.ident("a schedule method (split, merge, reorder, parallelize, ...)")?;
            let args = self.call_args()?;
            return Ok(SchedStmt::Method {
                tensor: first,
                method,
                args,
                loc: Loc(Span::new(start, self.prev_end())),
            });
        }
        if self.is_punct('(') {
            let args = self.call_args()?;
            return Ok(SchedStmt::Call {
                func: first,
                args,
                loc: Loc(Span::new(start, self.prev_end())),
            });
        }
        self.err("`=`, `.` or `(` in a schedule statement")
    }

    fn call_args(&mut self) -> PResult<Vec<Arg>> {
        let open = self.expect_punct('(')?;
        let mut args = Vec::new();
        if self.eat_punct(')') {
            return Ok(args);
        }
        loop {
            let is_named = matches!(self.peek(), Tok::Ident(_))
                && matches!(
                    self.tokens.get(self.pos + 1).map(|t| &t.tok),
                    Some(Tok::Punct('='))
                );
            if is_named {
                let (name, sp) = self.ident("an argument name")?;
                self.expect_punct('=')?;
                let value = self.expr()?;
                let loc = Loc(sp.join(value.loc()));
                args.push(Arg::Named { name, value, loc });
            } else {
                args.push(Arg::Pos(self.expr()?));
            }
            if self.close_or_comma(open, ')')? {
                return Ok(args);
            }
        }
    }

    /// Counts one operation of the current statement's expression.
    fn count_op(&mut self, at: Span) -> PResult<()> {
        self.ops += 1;
        if self.ops > MAX_EXPR_OPS {
            return Err(Diagnostic::new(
                format!("this expression has more than {MAX_EXPR_OPS} operations; split it into several statements (`t = ...`)"),
                Some(at),
            ));
        }
        Ok(())
    }

    fn expr(&mut self) -> PResult<Expr> {
        if self.depth == 0 {
            self.ops = 0;
        }
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Diagnostic::new(
                "expression nested too deeply",
                Some(self.span()),
            ));
        }
        let r = self.comparison();
        self.depth -= 1;
        r
    }

    /// `a < b` and the other comparisons: one per expression (`a < b < c` would mean
    /// something else in Python than in C, so it is refused).
    fn comparison(&mut self) -> PResult<Expr> {
        let lhs = self.additive()?;
        let Some(op) = self.compare_op() else {
            return Ok(lhs);
        };
        let at = self.bump().span;
        self.count_op(at)?;
        let rhs = self.additive()?;
        if self.compare_op().is_some() {
            return Err(Diagnostic::new(
                "comparisons do not chain: write logical_and(a < b, b < c)",
                Some(self.span()),
            ));
        }
        let loc = Loc(lhs.loc().join(rhs.loc()));
        Ok(Expr::Binary(op, Box::new(lhs), Box::new(rhs), loc))
    }

    fn compare_op(&self) -> Option<BinOp> {
        match self.peek() {
            Tok::Compare(text) => BinOp::COMPARISONS
                .into_iter()
                .find(|op| op.symbol() == *text),
            _ => None,
        }
    }

    fn additive(&mut self) -> PResult<Expr> {
        let mut lhs = self.multiplicative()?;
        loop {
            let op = if self.is_punct('+') {
                BinOp::Add
            } else if self.is_punct('-') {
                BinOp::Sub
            } else {
                return Ok(lhs);
            };
            let at = self.bump().span;
            self.count_op(at)?;
            let rhs = self.multiplicative()?;
            let loc = Loc(lhs.loc().join(rhs.loc()));
            lhs = Expr::Binary(op, Box::new(lhs), Box::new(rhs), loc);
        }
    }

    fn multiplicative(&mut self) -> PResult<Expr> {
        let mut lhs = self.unary()?;
        loop {
            let op = if self.is_punct('*') {
                BinOp::Mul
            } else if self.is_punct('/') {
                BinOp::Div
            } else {
                return Ok(lhs);
            };
            let at = self.bump().span;
            self.count_op(at)?;
            let rhs = self.unary()?;
            let loc = Loc(lhs.loc().join(rhs.loc()));
            lhs = Expr::Binary(op, Box::new(lhs), Box::new(rhs), loc);
        }
    }

    fn unary(&mut self) -> PResult<Expr> {
        if self.is_punct('-') {
            let sp = self.bump().span;
            self.count_op(sp)?;
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return Err(Diagnostic::new("expression nested too deeply", Some(sp)));
            }
            let inner = self.unary();
            self.depth -= 1;
            let inner = inner?;
            let loc = Loc(sp.join(inner.loc()));
            return Ok(Expr::Neg(Box::new(inner), loc));
        }
        self.primary()
    }

    fn primary(&mut self) -> PResult<Expr> {
        let sp = self.span();
        match self.peek().clone() {
            Tok::Int(i) => {
                self.bump();
                Ok(Expr::Int(i, Loc(sp)))
            }
            Tok::Float(v, text) => {
                self.bump();
                Ok(Expr::Float(v, text, Loc(sp)))
            }
            Tok::Ident(name) => {
                self.bump();
                if self.is_punct('(') {
                    let args = self.call_args()?;
                    Ok(Expr::Call {
                        func: name,
                        args,
                        loc: Loc(Span::new(sp.start, self.prev_end())),
                    })
                } else {
                    Ok(Expr::Name(name, Loc(sp)))
                }
            }
            Tok::Punct('(') => {
                self.bump();
                let e = self.expr()?;
                self.expect_close(sp, ')')?;
                Ok(e)
            }
            Tok::Punct('[') => {
                self.bump();
                let mut items = Vec::new();
                if !self.eat_punct(']') {
                    loop {
                        items.push(self.expr()?);
                        if self.close_or_comma(sp, ']')? {
                            break;
                        }
                    }
                }
                Ok(Expr::List(items, Loc(Span::new(sp.start, self.prev_end()))))
            }
            _ => self.err("an expression"),
        }
    }
}
