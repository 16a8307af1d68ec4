//! The kernel IR's text read back: [`parse`] takes a dump written by [`Kernel::print`] and
//! returns the [`Kernel`] it shows. The per-pass filetests give a pass its input this way, and
//! `parse(print(k)) == k` for every example after every pass shows the dump leaves nothing out.
//!
//! The reader follows the printer line by line: the `kernel` line, then the declarations
//! (buffers in id order, tensor maps, mbarrier arrays, hardware and persistent bindings), then
//! the body, one statement per line, nested by two spaces. Every error names the line and
//! column it found ([`ParseError`]); nesting is bounded ([`MAX_BLOCK_DEPTH`] for blocks,
//! [`MAX_DEPTH`] for index and value expressions), so no text overflows the stack, and no text makes it panic.
//!
//! One field is derived rather than read: a name in an index expression is a loop variable
//! ([`Val::Var`]) when the kernel binds it somewhere (a loop or a flat loop's digit, a `let`, a
//! grid reduction's `last` flag, a
//! hardware or persistent binding, a stream-K variable) and a size symbol ([`Val::Size`])
//! otherwise; the pass context never hands out a variable named like a size symbol.

use super::print::ternary_operand_dtype;
use super::*;
use crate::fusion::MemoryType;
use crate::plan::TensorMapSpec;
use std::collections::{HashMap, HashSet};
use std::fmt;

/// Deepest nesting of expressions within one line that [`parse`] accepts: the printed kernels
/// of every example stay far below it, and a parse this deep fits in a 1 MiB stack in a debug
/// build (`tests/tests/kir_parse.rs` parses the deepest texts on one; test threads get 2 MiB).
pub const MAX_DEPTH: usize = 64;

/// Deepest nesting of blocks that [`parse`] accepts (the examples' kernels nest at most 14 deep
/// after any pass; a parse this deep fits in a 1 MiB stack in a debug build, as [`MAX_DEPTH`]).
pub const MAX_BLOCK_DEPTH: usize = 32;

/// Why a text is not a kernel dump: where (1-based line and column, in characters) and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

impl std::error::Error for ParseError {}

type Result<T> = std::result::Result<T, ParseError>;

/// A binary node of [`Val`] from its operands (`Val::Add`, ...).
type MakeVal = fn(Box<Val>, Box<Val>) -> Val;

/// Reads a dump of [`Kernel::print`] back into the kernel.
pub fn parse(text: &str) -> Result<Kernel> {
    let lines: Vec<Line> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let indent = l.len() - l.trim_start_matches(' ').len();
            Line {
                number: i + 1,
                indent,
                text: &l[indent..],
            }
        })
        .collect();
    let mut p = Parser {
        lines,
        at: 0,
        kernel: Kernel::empty(String::new()),
        buffers: HashMap::new(),
        mbarriers: HashMap::new(),
        maps: HashMap::new(),
    };
    p.kernel_line()?;
    p.declarations()?;
    p.kernel.body = p.block(1)?;
    if let Some(l) = p.lines.get(p.at) {
        return Err(l.cursor().error("indented less than the kernel's body"));
    }
    let mut k = p.kernel;
    resolve_sizes(&mut k);
    Ok(k)
}

struct Line<'a> {
    number: usize,
    indent: usize,
    text: &'a str,
}

impl<'a> Line<'a> {
    fn cursor(&self) -> Cursor<'a> {
        Cursor {
            text: self.text,
            pos: 0,
            line: self.number,
            column: self.indent + 1,
            depth: 0,
        }
    }
}

struct Parser<'a> {
    lines: Vec<Line<'a>>,
    at: usize,
    kernel: Kernel,
    buffers: HashMap<String, BufferId>,
    mbarriers: HashMap<String, MbarId>,
    maps: HashMap<String, TensorMapId>,
}

/// One line's text being read, with its place for errors and the nesting depth so far.
struct Cursor<'a> {
    text: &'a str,
    pos: usize,
    line: usize,
    column: usize,
    depth: usize,
}

impl<'a> Cursor<'a> {
    fn error(&self, message: impl Into<String>) -> ParseError {
        let at = self.text.get(..self.pos).map_or(0, |s| s.chars().count());
        ParseError {
            line: self.line,
            column: self.column + at,
            message: message.into(),
        }
    }

    fn rest(&self) -> &'a str {
        self.text.get(self.pos..).unwrap_or("")
    }

    fn eat(&mut self, lit: &str) -> bool {
        if self.rest().starts_with(lit) {
            self.pos += lit.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, lit: &str) -> Result<()> {
        if self.eat(lit) {
            Ok(())
        } else {
            Err(self.error(format!("expected `{lit}`, found {}", self.found())))
        }
    }

    fn found(&self) -> String {
        match self.rest().chars().take(24).collect::<String>() {
            s if s.is_empty() => "the end of the line".to_string(),
            s => format!("`{s}`"),
        }
    }

    fn end(&self) -> Result<()> {
        if self.rest().is_empty() {
            Ok(())
        } else {
            Err(self.error(format!("unexpected {}", self.found())))
        }
    }

    fn ident(&mut self) -> Result<&'a str> {
        let rest = self.rest();
        let len = rest
            .char_indices()
            .find(|&(i, c)| !(c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())))
            .map_or(rest.len(), |(i, _)| i);
        if len == 0 {
            return Err(self.error(format!("expected a name, found {}", self.found())));
        }
        self.pos += len;
        Ok(&rest[..len])
    }

    fn int(&mut self) -> Result<i64> {
        let rest = self.rest();
        let sign = usize::from(rest.starts_with('-'));
        let digits = rest[sign..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len() - sign);
        if digits == 0 {
            return Err(self.error(format!("expected a number, found {}", self.found())));
        }
        let text = &rest[..sign + digits];
        let v = text
            .parse()
            .map_err(|_| self.error(format!("`{text}` is out of range")))?;
        self.pos += text.len();
        Ok(v)
    }

    fn uint<T: TryFrom<i64>>(&mut self) -> Result<T> {
        let start = self.pos;
        let v = self.int()?;
        T::try_from(v).map_err(|_| {
            self.pos = start;
            self.error(format!("`{v}` is out of range here"))
        })
    }

    /// Enters one level of nesting (a parenthesis, a call, an operand).
    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(format!("nested more than {MAX_DEPTH} deep")));
        }
        Ok(())
    }

    fn dtype(&mut self) -> Result<DType> {
        let start = self.pos;
        let name = self.ident()?;
        [DType::Bool]
            .into_iter()
            .chain(DType::ALL)
            .find(|d| d.name() == name)
            .ok_or_else(|| {
                self.pos = start;
                self.error(format!("`{name}` is not a type"))
            })
    }

    fn parallel(&mut self) -> Result<ParallelType> {
        let start = self.pos;
        let name = self.ident()?;
        ParallelType::parse(name).ok_or_else(|| {
            self.pos = start;
            self.error(format!("`{name}` is not a parallel type"))
        })
    }

    // ---- index expressions (`Val`), as `Val::write` spells them

    fn val(&mut self) -> Result<Val> {
        Ok(self.val_depth()?.0)
    }

    /// A value and the depth of its tree (bounded, so that dropping or comparing it is too).
    fn val_depth(&mut self) -> Result<(Val, usize)> {
        self.enter()?;
        let r = self.binary(1);
        self.depth -= 1;
        r
    }

    fn binary(&mut self, level: u8) -> Result<(Val, usize)> {
        if level > 4 {
            return self.primary();
        }
        let (mut lhs, mut d) = self.binary(level + 1)?;
        loop {
            let ops: &[(&str, MakeVal)] = match level {
                1 => &[(" && ", Val::And)],
                2 => &[(" < ", Val::Lt), (" == ", Val::Eq)],
                3 => &[(" + ", Val::Add), (" - ", Val::Sub)],
                _ => &[(" * ", Val::Mul), (" / ", Val::Div), (" % ", Val::Mod)],
            };
            let Some(&(_, make)) = ops.iter().find(|(op, _)| self.eat(op)) else {
                return Ok((lhs, d));
            };
            let (rhs, rd) = self.binary(level + 1)?;
            d = d.max(rd) + 1;
            if d > MAX_DEPTH {
                return Err(self.error(format!("an expression nested more than {MAX_DEPTH} deep")));
            }
            lhs = make(Box::new(lhs), Box::new(rhs));
        }
    }

    fn primary(&mut self) -> Result<(Val, usize)> {
        let two = |c: &mut Self, make: fn(Box<Val>, Box<Val>) -> Val| {
            let (a, ad) = c.val_depth()?;
            c.expect(", ")?;
            let (b, bd) = c.val_depth()?;
            c.expect(")")?;
            Ok((make(Box::new(a), Box::new(b)), ad.max(bd) + 1))
        };
        if self.eat("(") {
            let (a, ad) = self.val_depth()?;
            if self.eat(" ^ ") {
                self.enter()?;
                let (b, bd) = self.primary()?;
                self.depth -= 1;
                self.expect(")")?;
                return Ok((Val::Xor(Box::new(a), Box::new(b)), ad.max(bd) + 1));
            }
            self.expect(")")?;
            return Ok((a, ad));
        }
        if self
            .rest()
            .starts_with(|c: char| c == '-' || c.is_ascii_digit())
        {
            return Ok((Val::Int(self.int()?), 1));
        }
        if self.eat("ceilDiv(") {
            return two(self, Val::CeilDiv);
        }
        if self.eat("min(") {
            return two(self, Val::Min);
        }
        if self.eat("index_in(") {
            let array = self.ident()?.to_string();
            self.expect("[")?;
            let (i, id) = self.val_depth()?;
            self.expect("], ")?;
            let (n, nd) = self.val_depth()?;
            self.expect(")")?;
            return Ok((
                Val::IndexIn(array, Box::new(i), Box::new(n)),
                id.max(nd) + 1,
            ));
        }
        if self.eat("elect_one()") {
            return Ok((Val::Elect, 1));
        }
        if self.eat("positive(") {
            let param = self.ident()?.to_string();
            self.expect(")")?;
            return Ok((Val::Positive(param), 1));
        }
        let start = self.pos;
        let name = self.ident()?;
        let v = match name {
            "true" => Val::True,
            "warp" => Val::Warp,
            "gridDim" => {
                self.expect(".x")?;
                Val::Ctas
            }
            "threadIdx" | "blockIdx" => {
                self.expect(".")?;
                self.pos = start;
                Val::Hw(self.hw_index()?)
            }
            _ => Val::Var(name.to_string()),
        };
        Ok((v, 1))
    }

    /// `threadIdx.x`, `blockIdx.y`, ...: the parallel type whose CUDA index it is.
    fn hw_index(&mut self) -> Result<ParallelType> {
        let p = ParallelType::ALL
            .into_iter()
            .find(|p| p.cuda_index().is_some_and(|i| self.rest().starts_with(i)));
        match p {
            Some(p) => {
                self.pos += p.cuda_index().map_or(0, str::len);
                Ok(p)
            }
            None => Err(self.error(format!(
                "expected a thread or block index, found {}",
                self.found()
            ))),
        }
    }

    // ---- size expressions (`SizeExpr`), as its `Display` spells them

    fn size(&mut self) -> Result<SizeExpr> {
        self.enter()?;
        let mut e = self.size_atom()?;
        while self.eat(" * ") {
            e = SizeExpr::Mul(Box::new(e), Box::new(self.size_atom()?));
        }
        self.depth -= 1;
        Ok(e)
    }

    fn size_atom(&mut self) -> Result<SizeExpr> {
        let two = |c: &mut Self, make: fn(Box<SizeExpr>, Box<SizeExpr>) -> SizeExpr, sep| {
            let a = c.size()?;
            c.expect(sep)?;
            let b = c.size()?;
            c.expect(")")?;
            Ok(make(Box::new(a), Box::new(b)))
        };
        if self.eat("(") {
            let a = self.size()?;
            // `(N - 2)`: an addition of a negative constant (a slice's extent).
            if self.eat(" - ") {
                let c = self.int()?;
                self.expect(")")?;
                return Ok(SizeExpr::Add(Box::new(a), Box::new(SizeExpr::Const(-c))));
            }
            self.expect(" + ")?;
            let b = self.size()?;
            self.expect(")")?;
            return Ok(SizeExpr::Add(Box::new(a), Box::new(b)));
        }
        if self.eat("ceilDiv(") {
            return two(self, SizeExpr::CeilDiv, ", ");
        }
        if self.eat("max(") {
            return two(self, SizeExpr::Max, ", ");
        }
        if self
            .rest()
            .starts_with(|c: char| c == '-' || c.is_ascii_digit())
        {
            return Ok(SizeExpr::Const(self.int()?));
        }
        Ok(SizeExpr::Sym(self.ident()?.to_string()))
    }

    /// `a, b, c` up to `close` (not eaten), each read by `item`.
    fn list<T>(&mut self, close: &str, item: fn(&mut Self) -> Result<T>) -> Result<Vec<T>> {
        let mut out = Vec::new();
        if self.rest().starts_with(close) {
            return Ok(out);
        }
        loop {
            out.push(item(self)?);
            if !self.eat(", ") {
                return Ok(out);
            }
        }
    }

    fn sizes3(&mut self) -> Result<[SizeExpr; 3]> {
        let a = self.size()?;
        self.expect(", ")?;
        let b = self.size()?;
        self.expect(", ")?;
        let c = self.size()?;
        self.expect(")")?;
        Ok([a, b, c])
    }
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&Line<'a>> {
        self.lines.get(self.at)
    }

    fn end_error(&self, what: &str) -> ParseError {
        let line = self.lines.last().map_or(1, |l| l.number);
        ParseError {
            line,
            column: 1,
            message: format!("the text ends before {what}"),
        }
    }

    fn kernel_line(&mut self) -> Result<()> {
        let Some(line) = self.peek() else {
            return Err(ParseError {
                line: 1,
                column: 1,
                message: "expected `kernel`, found an empty text".into(),
            });
        };
        let mut c = line.cursor();
        if line.indent != 0 {
            return Err(c.error("the `kernel` line is not indented"));
        }
        self.at += 1;
        c.expect("kernel ")?;
        self.kernel.name = c.ident()?.to_string();
        c.expect("  grid(")?;
        self.kernel.grid = c.sizes3()?;
        c.expect("  block(")?;
        self.kernel.block = c.sizes3()?;
        if c.eat("  cluster(") {
            let mut dims = [1i64; 3];
            for (i, d) in dims.iter_mut().enumerate() {
                if i > 0 {
                    c.expect(", ")?;
                }
                *d = c.int()?;
            }
            c.expect(")")?;
            self.kernel.cluster = Some(dims);
        }
        if c.eat("  smem(") {
            self.kernel.dynamic_smem = c.size()?;
            c.expect(")")?;
        }
        if c.eat("  reduce_scratch(") {
            self.kernel.reduce_scratch = Some(c.size()?);
            c.expect(")")?;
        }
        if c.eat("  setmaxnreg(") {
            let p = c.uint()?;
            c.expect(", ")?;
            let q = c.uint()?;
            c.expect(")")?;
            self.kernel.register_sharing = Some((p, q));
        }
        c.end()
    }

    /// The lines between the `kernel` line and the body.
    fn declarations(&mut self) -> Result<()> {
        while let Some(line) = self.peek() {
            if line.indent != 2 {
                return Ok(());
            }
            let mut c = line.cursor();
            let text = line.text;
            let memory = |w: &str| MemoryType::parse(w).filter(|m| *m != MemoryType::Global);
            let first = text.split(' ').next().unwrap_or("");
            if text.starts_with("param ") {
                c.expect("param ")?;
                if text.contains(": tensor map of `") {
                    self.tensor_map(&mut c)?;
                } else {
                    self.global_buffer(&mut c)?;
                }
            } else if let Some(m) = memory(first).filter(|_| text.len() > first.len()) {
                c.expect(first)?;
                c.expect(" ")?;
                self.buffer(&mut c, m)?;
            } else if text.starts_with("mbarrier ") {
                c.expect("mbarrier ")?;
                let (name, m) = mbarrier_fields(&mut c)?;
                self.add_mbarrier(&c, name, m)?;
            } else if text.starts_with("persistent(") {
                self.persistent(&mut c)?;
            } else if text.starts_with("stream_k ") {
                self.stream_k(&mut c)?;
            } else if text.starts_with("visited(") {
                self.visited(&mut c)?;
            } else if let Some(binding) = binding_form(text) {
                let var = c.ident()?.to_string();
                match binding {
                    Binding::Hardware => {
                        c.expect(" = ")?;
                        let p = c.hw_index()?;
                        self.kernel.hw_vars.push((var, p));
                    }
                    Binding::Persistent => {
                        c.expect(" @")?;
                        let along = c.parallel()?;
                        c.expect(" = ")?;
                        let value = c.val()?;
                        match &mut self.kernel.persistent {
                            Some(p) => p.bindings.push((var, along, value)),
                            None => return Err(c.error("a tile binding before `persistent(...)`")),
                        }
                    }
                }
            } else {
                return Ok(());
            }
            c.end()?;
            self.at += 1;
        }
        Ok(())
    }

    fn add_buffer(&mut self, c: &Cursor, b: Buffer) -> Result<()> {
        let id = BufferId::new(self.kernel.buffers.len());
        if self.buffers.insert(b.name.clone(), id).is_some() {
            return Err(c.error(format!("buffer `{}` is declared twice", b.name)));
        }
        self.kernel.buffers.push(b);
        Ok(())
    }

    /// ` (t3)`: the fusion tensor a buffer holds.
    fn tensor_of(c: &mut Cursor) -> Result<Option<TensorId>> {
        if c.eat(" (t") {
            let t = c.uint::<usize>()?;
            c.expect(")")?;
            return Ok(Some(TensorId::new(t)));
        }
        Ok(None)
    }

    fn global_buffer(&mut self, c: &mut Cursor) -> Result<()> {
        let name = c.ident()?.to_string();
        c.expect(": ")?;
        let dtype = c.dtype()?;
        c.expect("[")?;
        let global_shape = c.list("]", |c| {
            let e = c.size()?;
            if e == SizeExpr::Const(1) {
                if c.eat(" of ") {
                    return Ok((c.size()?, true));
                }
                // A broadcast axis of extent 1 reads as `1`; an axis of extent 1 that is not
                // broadcast as `1!`.
                return Ok((e, !c.eat("!")));
            }
            Ok((e, false))
        })?;
        c.expect("] global ")?;
        let is_input = match c.ident()? {
            "in" => true,
            "out" => false,
            other => return Err(c.error(format!("expected `in` or `out`, found `{other}`"))),
        };
        let l2 = if c.eat(" l2=") {
            let word = c.ident()?;
            crate::fusion::L2Policy::parse(word)
                .ok_or_else(|| c.error(format!("unknown L2 policy `{word}`")))?
        } else {
            crate::fusion::L2Policy::Normal
        };
        let tensor = Self::tensor_of(c)?;
        self.add_buffer(
            c,
            Buffer {
                name,
                dtype,
                memory: MemoryType::Global,
                tensor,
                size: None,
                smem_offset: None,
                global_shape,
                is_input,
                l2,
            },
        )
    }

    fn buffer(&mut self, c: &mut Cursor, memory: MemoryType) -> Result<()> {
        let name = c.ident()?.to_string();
        c.expect(": ")?;
        let dtype = c.dtype()?;
        let size = if c.eat("[") {
            let v = c.val()?;
            c.expect("]")?;
            Some(v)
        } else {
            None
        };
        let smem_offset = if c.eat(" at smem+") {
            Some(c.val()?)
        } else {
            None
        };
        let tensor = Self::tensor_of(c)?;
        self.add_buffer(
            c,
            Buffer {
                name,
                dtype,
                memory,
                tensor,
                size,
                smem_offset,
                global_shape: Vec::new(),
                is_input: false,
                l2: crate::fusion::L2Policy::Normal,
            },
        )
    }

    fn tensor_map(&mut self, c: &mut Cursor) -> Result<()> {
        let param = c.ident()?.to_string();
        c.expect(": tensor map of `")?;
        let tensor = c.ident()?.to_string();
        c.expect("` (")?;
        let dtype = c.dtype()?;
        c.expect("), innermost first: dims [")?;
        let global_dims = c.list("]", Cursor::size)?;
        c.expect("] strides [")?;
        let global_strides = c.list("]", Cursor::size)?;
        c.expect("] bytes, box [")?;
        let box_dims = c.list("]", Cursor::int)?;
        c.expect("]")?;
        let element_strides = if c.eat(", element strides [") {
            let s = c.list("]", Cursor::int)?;
            c.expect("]")?;
            s
        } else {
            vec![1; box_dims.len()]
        };
        let swizzle_bytes = if c.eat(", swizzle ") { c.uint()? } else { 0 };
        if self
            .maps
            .insert(
                param.clone(),
                TensorMapId::new(self.kernel.tensor_maps.len()),
            )
            .is_some()
        {
            return Err(c.error(format!("tensor map `{param}` is declared twice")));
        }
        self.kernel.tensor_maps.push(TensorMapSpec {
            param,
            tensor,
            dtype,
            global_dims,
            global_strides,
            box_dims,
            element_strides,
            swizzle_bytes,
        });
        Ok(())
    }

    fn add_mbarrier(&mut self, c: &Cursor, name: String, m: MbarArray) -> Result<()> {
        if self
            .mbarriers
            .insert(name, MbarId::new(self.kernel.mbarriers.len()))
            .is_some()
        {
            return Err(c.error(format!("mbarrier array `{}` is declared twice", m.name)));
        }
        self.kernel.mbarriers.push(m);
        Ok(())
    }

    fn persistent(&mut self, c: &mut Cursor) -> Result<()> {
        c.expect("persistent(")?;
        let along = c.parallel()?;
        c.expect(", ")?;
        let group = c.int()?;
        let stream_k = c.eat(", stream_k");
        c.expect("): loop `")?;
        let var = c.ident()?.to_string();
        let (tiles, stream_k) = if stream_k {
            c.expect("` walks this CTA's rounds and run of ")?;
            let work = c.val()?;
            c.expect(" split k steps of ")?;
            let tiles = c.size()?;
            c.expect(" tiles; `")?;
            let k_var = c.ident()?.to_string();
            c.expect("` walks the piece [")?;
            let lo = c.val()?;
            c.expect(", ")?;
            let hi = c.val()?;
            c.expect(") of each")?;
            let sk = StreamK {
                k_var,
                consts: Vec::new(),
                kt: Val::Int(0),
                work,
                work_size: SizeExpr::Const(0),
                lo,
                hi,
                before: Val::Int(0),
                tile_start: Val::Int(0),
            };
            (tiles, Some(sk))
        } else {
            c.expect("` walks this CTA's share of ")?;
            let tiles = c.size()?;
            c.expect(" tiles (blockIdx.x, + gridDim.x, ...)")?;
            (tiles, None)
        };
        if self.kernel.persistent.is_some() {
            return Err(c.error("a second `persistent` line"));
        }
        self.kernel.persistent = Some(Persistent {
            var,
            tiles,
            along,
            group,
            bindings: Vec::new(),
            stream_k,
        });
        Ok(())
    }

    /// `visited(var, query_tile, key_tile): ` then either `query_ids[row] from first of
    /// queries, key_ids[row] of keys` with `, j - i <= upper`, `, j - i >= lower` (a band), or
    /// `queries from first of queries, keys of keys, where may, kept where must`; after
    /// allocation, ` at smem
    /// offset`.
    fn visited(&mut self, c: &mut Cursor) -> Result<()> {
        c.expect("visited(")?;
        let var = c.ident()?.to_string();
        c.expect(", ")?;
        let query_tile = c.int()?;
        c.expect(", ")?;
        let key_tile = c.int()?;
        c.expect("): ")?;
        let (first_query, queries, keys, test) = if c.eat("queries from ") {
            let first_query = c.val()?;
            c.expect(" of ")?;
            let queries = c.val()?;
            c.expect(", keys of ")?;
            let keys = c.val()?;
            c.expect(", where ")?;
            let may = c.val()?;
            c.expect(", kept where ")?;
            let must = c.val()?;
            (first_query, queries, keys, TileTest::Bounds { may, must })
        } else {
            let query_ids = c.ident()?.to_string();
            c.expect("[")?;
            let query_row = c.val()?;
            c.expect("] from ")?;
            let first_query = c.val()?;
            c.expect(" of ")?;
            let queries = c.val()?;
            c.expect(", ")?;
            let key_ids = c.ident()?.to_string();
            c.expect("[")?;
            let key_row = c.val()?;
            c.expect("] of ")?;
            let keys = c.val()?;
            let upper = if c.eat(", j - i <= ") {
                Some(c.val()?)
            } else {
                None
            };
            let lower = if c.eat(", j - i >= ") {
                Some(c.val()?)
            } else {
                None
            };
            let test = TileTest::Ids {
                query_ids,
                query_row,
                key_ids,
                key_row,
                upper,
                lower,
            };
            (first_query, queries, keys, test)
        };
        let smem_offset = if c.eat(" at smem ") {
            Some(c.val()?)
        } else {
            None
        };
        if query_tile < 1 || key_tile < 1 {
            return Err(c.error("a tile of fewer than one query or key"));
        }
        if self.kernel.visited.is_some() {
            return Err(c.error("a second `visited` line"));
        }
        self.kernel.visited = Some(crate::kir::VisitedTiles {
            var,
            key_tile,
            query_tile,
            first_query,
            queries,
            keys,
            test,
            smem_offset,
        });
        Ok(())
    }

    fn stream_k(&mut self, c: &mut Cursor) -> Result<()> {
        let Some(sk) = self
            .kernel
            .persistent
            .as_mut()
            .and_then(|p| p.stream_k.as_mut())
        else {
            return Err(c.error("a `stream_k` line without `persistent(..., stream_k)` before it"));
        };
        c.expect("stream_k ")?;
        if c.eat("const ") {
            let v = c.ident()?.to_string();
            c.expect(" = ")?;
            sk.consts.push((v, c.val()?));
            return Ok(());
        }
        c.expect("kt = ")?;
        sk.kt = c.val()?;
        c.expect(", work = ")?;
        let at = c.pos;
        let work = c.val()?;
        if work != sk.work {
            c.pos = at;
            return Err(c.error("not the work of the `persistent` line"));
        }
        c.expect(" (launch: ")?;
        sk.work_size = c.size()?;
        c.expect("), before = ")?;
        sk.before = c.val()?;
        c.expect(", tile_start = ")?;
        sk.tile_start = c.val()?;
        Ok(())
    }

    // ---- the body

    fn block(&mut self, depth: usize) -> Result<Vec<Stmt>> {
        let mut out = Vec::new();
        while let Some(line) = self.peek() {
            let indent = line.indent;
            if indent < 2 * depth {
                break;
            }
            let c = line.cursor();
            if indent != 2 * depth {
                return Err(c.error(format!(
                    "indented by {indent} spaces where the block's statements have {}",
                    2 * depth
                )));
            }
            if depth > MAX_BLOCK_DEPTH {
                return Err(c.error(format!("blocks nested more than {MAX_BLOCK_DEPTH} deep")));
            }
            self.at += 1;
            out.push(self.statement(c, depth)?);
        }
        Ok(out)
    }

    /// A nested block: one or more lines indented one level more.
    fn nested(&mut self, depth: usize) -> Result<Vec<Stmt>> {
        self.block(depth + 1)
    }

    fn statement(&mut self, mut c: Cursor<'a>, depth: usize) -> Result<Stmt> {
        let text = c.text;
        let simple = [
            ("__syncthreads()", Stmt::Sync),
            ("cluster_sync", Stmt::ClusterSync),
            ("bulk_commit_group", Stmt::BulkCommit),
            ("fence.proxy.async.shared::cta", Stmt::FenceProxyAsync),
            ("wgmma.fence", Stmt::WgmmaFence),
            ("wgmma.commit_group", Stmt::WgmmaCommit),
        ];
        if let Some((_, st)) = simple.into_iter().find(|(t, _)| *t == text) {
            return Ok(st);
        }
        let st = if c.eat("for ") {
            return self.for_loop(c, depth);
        } else if c.eat("if ") {
            let cond = c.val()?;
            c.expect(":")?;
            c.end()?;
            let then = self.nested(depth)?;
            let els = match self.peek() {
                Some(l) if l.indent == 2 * depth && l.text == "else:" => {
                    self.at += 1;
                    self.nested(depth)?
                }
                _ => Vec::new(),
            };
            return Ok(Stmt::If { cond, then, els });
        } else if c.eat("producer warps (if ") {
            return self.warp_roles(c, depth);
        } else if c.eat("alloc ") {
            self.alloc(&mut c)?
        } else if c.eat("let ") {
            let var = c.ident()?.to_string();
            c.expect(" = ")?;
            let value = c.val()?;
            let broadcast = c.eat(" (broadcast from lane 0)");
            Stmt::Let {
                var,
                value,
                broadcast,
            }
        } else if c.eat("block_") {
            self.block_reduce(&mut c)?
        } else if c.eat("quad_") {
            self.quad_reduce(&mut c)?
        } else if c.eat("grid_") {
            self.grid_reduce(&mut c)?
        } else if c.eat("group_barrier(") {
            // `group_barrier(TIDy, TIDz, 256 threads)`: the dims, then the count.
            let mut dims = Vec::new();
            while !c.rest().starts_with(|ch: char| ch.is_ascii_digit()) {
                dims.push(c.parallel()?);
                c.expect(", ")?;
            }
            let threads = c.int()?;
            c.expect(" threads)")?;
            Stmt::GroupSync { dims, threads }
        } else if text.starts_with("turn_") {
            let step = if c.eat("turn_wait(") {
                TurnStep::Wait
            } else {
                c.expect("turn_pass(")?;
                TurnStep::Pass
            };
            let on = c.parallel()?;
            c.expect(", ")?;
            let groups = c.int()?;
            c.expect(" groups of ")?;
            let threads = c.int()?;
            c.expect(" threads)")?;
            Stmt::Turn {
                step,
                on,
                groups,
                threads,
            }
        } else if text.starts_with("mbarrier_") {
            self.mbarrier_statement(&mut c)?
        } else if c.eat("tma_store_") {
            let rank = c.uint::<usize>()?;
            c.expect("d ")?;
            let map = self.map_named(&mut c)?;
            c.expect(" {")?;
            let coords = c.list("}", Cursor::val)?;
            c.expect("} <- ")?;
            let src = self.access(&mut c)?;
            c.expect(", ")?;
            let bytes = c.int()?;
            c.expect(" bytes")?;
            check_rank(&c, rank, coords.len())?;
            Stmt::TmaStore(TmaStore {
                map,
                src,
                coords,
                bytes,
            })
        } else if c.eat("stream_k_fixup ") {
            let acc = if c.eat("?") {
                None
            } else {
                Some(self.buffer_named(&mut c)?)
            };
            Stmt::StreamKFixup { acc }
        } else if c.eat("bulk_wait_group_read ") {
            Stmt::BulkWaitRead(c.uint()?)
        } else if c.eat("wgmma.wait_group ") {
            Stmt::WgmmaWait(c.uint()?)
        } else if c.eat("wgmma.m64n") {
            self.wgmma(&mut c)?
        } else if c.eat("stmatrix.x4 ") {
            let dst = self.access(&mut c)?;
            c.expect(" <- ")?;
            let src = self.stmatrix_source(&mut c)?;
            Stmt::StMatrix { dst, src }
        } else {
            self.compute_or_load(&mut c)?
        };
        c.end()?;
        Ok(st)
    }

    fn for_loop(&mut self, mut c: Cursor<'a>, depth: usize) -> Result<Stmt> {
        let var = c.ident()?.to_string();
        c.expect(" in ")?;
        let extent = c.val()?;
        c.expect(" @")?;
        let parallel = c.parallel()?;
        c.expect(" key ")?;
        let key = LoopKey::new(c.uint()?);
        let mut digits = Vec::new();
        if c.eat(" carrying ") {
            digits = c.list(":", |c| {
                let var = c.ident()?.to_string();
                c.expect(" in ")?;
                Ok(Digit {
                    var,
                    extent: c.val()?,
                })
            })?;
        }
        c.expect(":")?;
        c.end()?;
        let body = self.nested(depth)?;
        Ok(Stmt::Loop(Loop {
            key,
            var,
            extent,
            parallel,
            body,
            digits,
        }))
    }

    fn warp_roles(&mut self, mut c: Cursor<'a>, depth: usize) -> Result<Stmt> {
        let is_producer = c.val()?;
        c.expect(")")?;
        let producer_regs = if c.eat(", setmaxnreg ") {
            Some(c.uint()?)
        } else {
            None
        };
        c.expect(":")?;
        c.end()?;
        let producer = self.nested(depth)?;
        let Some(line) = self.peek().filter(|l| l.indent == 2 * depth) else {
            return Err(self.end_error("the consumer warps of the producer warps above"));
        };
        let mut c = line.cursor();
        self.at += 1;
        c.expect("consumer warps (")?;
        let consumer_threads = c.int()?;
        c.expect(" threads, barriers are named)")?;
        let consumer_regs = if c.eat(", setmaxnreg ") {
            Some(c.uint()?)
        } else {
            None
        };
        c.expect(":")?;
        c.end()?;
        let registers = match (producer_regs, consumer_regs) {
            (Some(p), Some(q)) => Some((p, q)),
            (None, None) => None,
            _ => return Err(c.error("setmaxnreg on one role only")),
        };
        let consumer = self.nested(depth)?;
        Ok(Stmt::WarpRoles(crate::kir::WarpRoles {
            is_producer,
            producer,
            consumer,
            registers,
            consumer_threads,
        }))
    }

    fn buffer_named(&self, c: &mut Cursor) -> Result<BufferId> {
        declared(c, &self.buffers, "buffer")
    }

    fn mbarrier_named(&self, c: &mut Cursor) -> Result<MbarId> {
        declared(c, &self.mbarriers, "mbarrier array")
    }

    fn map_named(&self, c: &mut Cursor) -> Result<TensorMapId> {
        declared(c, &self.maps, "tensor map")
    }

    /// `name[index]`, `name[*]` before indexing.
    fn access(&self, c: &mut Cursor) -> Result<Access> {
        let buffer = self.buffer_named(c)?;
        c.expect("[")?;
        let index = if c.eat("*") { None } else { Some(c.val()?) };
        c.expect("]")?;
        Ok(Access { buffer, index })
    }

    /// `regs[0..8]`, `regs[i..+8]` or `regs[*]`.
    fn stmatrix_source(&self, c: &mut Cursor) -> Result<Access> {
        let buffer = self.buffer_named(c)?;
        c.expect("[")?;
        let index = if c.eat("*") {
            None
        } else if c
            .rest()
            .starts_with(|ch: char| ch == '-' || ch.is_ascii_digit())
            && !c.rest().contains("..+8]")
        {
            let i = c.int()?;
            c.expect("..")?;
            let end = c.int()?;
            if Some(end) != i.checked_add(8) {
                return Err(c.error("a stmatrix.x4 stores 8 registers"));
            }
            Some(Val::Int(i))
        } else {
            let i = c.val()?;
            c.expect("..+8")?;
            Some(i)
        };
        c.expect("]")?;
        Ok(Access { buffer, index })
    }

    fn alloc(&mut self, c: &mut Cursor) -> Result<Stmt> {
        let start = c.pos;
        let b = self.buffer_named(c)?;
        c.expect(": ")?;
        let dtype = c.dtype()?;
        c.expect("[")?;
        let size = if c.eat("?") { None } else { Some(c.val()?) };
        c.expect("] ")?;
        let memory = MemoryType::parse(c.ident()?);
        let smem_offset = if c.eat(" at smem+") {
            Some(c.val()?)
        } else {
            None
        };
        let buf = &self.kernel.buffers[b];
        if buf.dtype != dtype
            || Some(buf.memory) != memory
            || buf.size != size
            || buf.smem_offset != smem_offset
        {
            c.pos = start;
            return Err(c.error(format!(
                "`{}` is not allocated as declared (its type, memory, size and offset)",
                buf.name
            )));
        }
        Ok(Stmt::Alloc(b))
    }

    /// `quad_max(m_acc[0])`, optionally ` in f32`.
    fn quad_reduce(&mut self, c: &mut Cursor) -> Result<Stmt> {
        let name = c.ident()?;
        let op = reduce_op(c, name)?;
        let (acc, dtype) = self.reduced_value(c)?;
        Ok(Stmt::QuadReduce { acc, op, dtype })
    }

    /// `grid_sum(t_acc) -> t_last, slot 0`, optionally ` in f32` after the accumulator and
    /// `, split_k over blockIdx.z` at the end.
    fn grid_reduce(&mut self, c: &mut Cursor) -> Result<Stmt> {
        let name = c.ident()?;
        let op = reduce_op(c, name)?;
        let (acc, dtype) = self.reduced_value(c)?;
        c.expect(" -> ")?;
        let last = c.ident()?.to_string();
        c.expect(", slot ")?;
        let slot = usize::try_from(c.int()?).map_err(|_| c.error("a slot is not negative"))?;
        let split_k = if c.eat(", split_k over blockIdx.") {
            let dim = c.ident()?;
            Some(
                ["x", "y", "z"]
                    .iter()
                    .position(|&d| d == dim)
                    .ok_or_else(|| c.error("a block dim is x, y or z"))?,
            )
        } else {
            None
        };
        Ok(Stmt::GridReduce(crate::kir::GridReduce {
            acc,
            op,
            dtype,
            slot,
            last,
            split_k,
        }))
    }

    /// `(acc)`, optionally ` in <type>` (the type the reduction combines in, when it is not
    /// the buffer's).
    fn reduced_value(&self, c: &mut Cursor) -> Result<(Access, DType)> {
        c.expect("(")?;
        let acc = self.access(c)?;
        c.expect(")")?;
        let dtype = if c.eat(" in ") {
            c.dtype()?
        } else {
            self.kernel.buffers[acc.buffer].dtype
        };
        Ok((acc, dtype))
    }

    fn block_reduce(&mut self, c: &mut Cursor) -> Result<Stmt> {
        // `block_sum_over_xy(...)`: the name runs to the `(`.
        let Some((op_name, dims_text)) = c.ident()?.split_once("_over_") else {
            return Err(c.error("expected `block_<op>_over_<dims>(`"));
        };
        let mut dims = [false; 3];
        for ch in dims_text.chars() {
            let i = match ch {
                'x' => 0,
                'y' => 1,
                'z' => 2,
                _ => return Err(c.error(format!("`{dims_text}` are not thread dims"))),
            };
            dims[i] = true;
        }
        if op_name == "welford" {
            // `block_welford_over_x(mean[*], m2[*], count[*])`.
            c.expect("(")?;
            let mean = self.access(c)?;
            c.expect(", ")?;
            let m2 = self.access(c)?;
            c.expect(", ")?;
            let count = self.access(c)?;
            c.expect(")")?;
            return Ok(Stmt::BlockWelford {
                mean,
                m2,
                count,
                dims,
            });
        }
        let op = reduce_op(c, op_name)?;
        let (acc, dtype) = self.reduced_value(c)?;
        Ok(Stmt::BlockReduce {
            acc,
            op,
            dtype,
            dims,
        })
    }

    fn mbarrier_statement(&mut self, c: &mut Cursor) -> Result<Stmt> {
        let slot_of = |p: &Self, c: &mut Cursor| -> Result<(MbarId, Val)> {
            let bars = p.mbarrier_named(c)?;
            c.expect("[")?;
            let slot = c.val()?;
            c.expect("]")?;
            Ok((bars, slot))
        };
        if c.eat("mbarrier_init ") {
            let start = c.pos;
            let (name, m) = mbarrier_fields(c)?;
            c.expect("; fence.mbarrier_init")?;
            let bars = self.mbarriers.get(&name).copied();
            return match bars {
                Some(b) if self.kernel.mbarriers[b] == m => Ok(Stmt::MbarInit { bars: b }),
                _ => {
                    c.pos = start;
                    Err(c.error(format!("not the declared mbarrier array `{name}`")))
                }
            };
        }
        if c.eat("mbarrier_inval ") {
            let bars = self.mbarrier_named(c)?;
            c.expect("[")?;
            let count = c.int()?;
            c.expect("]")?;
            if count != self.kernel.mbarriers[bars].count {
                return Err(c.error("not the declared count"));
            }
            return Ok(Stmt::MbarInval { bars });
        }
        if c.eat("mbarrier_arrive_expect_tx ") {
            let (bars, slot) = slot_of(self, c)?;
            c.expect(", ")?;
            let bytes = c.int()?;
            c.expect(" bytes")?;
            return Ok(Stmt::MbarArriveExpectTx { bars, slot, bytes });
        }
        if c.eat("mbarrier_expect_tx ") {
            let (bars, slot) = slot_of(self, c)?;
            c.expect(", ")?;
            let bytes = c.int()?;
            c.expect(" bytes")?;
            return Ok(Stmt::MbarExpectTx { bars, slot, bytes });
        }
        if c.eat("mbarrier_wait ") {
            let (bars, slot) = slot_of(self, c)?;
            c.expect(", parity ")?;
            let parity = c.val()?;
            return Ok(Stmt::MbarWait { bars, slot, parity });
        }
        c.expect("mbarrier_arrive ")?;
        let (bars, slot) = slot_of(self, c)?;
        let cluster_wide = self.kernel.mbarriers[bars].cluster_wide;
        let suffix = match cluster_wide {
            true => [
                (
                    " in every CTA of the cluster (lane r of each warp on CTA r's)",
                    true,
                ),
                (" in every CTA of the cluster", false),
            ],
            false => [(" (lane 0 of each warp)", true), ("", false)],
        };
        let per_warp = suffix
            .into_iter()
            .find(|(s, _)| c.eat(s))
            .is_some_and(|(_, w)| w);
        Ok(Stmt::MbarArrive {
            bars,
            slot,
            per_warp,
        })
    }

    fn wgmma(&mut self, c: &mut Cursor) -> Result<Stmt> {
        let n = c.int()?;
        c.expect("k")?;
        let k = c.int()?;
        c.expect(".f32.")?;
        let a_type = c.dtype()?;
        let b_type = if c.eat(".") { c.dtype()? } else { a_type };
        if !crate::target::wgmma_types_pair(a_type, b_type) {
            return Err(c.error(format!("no wgmma multiplies {a_type} by {b_type}")));
        }
        if crate::target::wgmma_k(a_type) != Some(k) {
            return Err(c.error(format!(
                "a wgmma on {a_type} operands has K = {}, not {k}",
                crate::target::wgmma_k(a_type).unwrap_or(0)
            )));
        }
        c.expect(" ")?;
        let buffer = self.buffer_named(c)?;
        c.expect("[+")?;
        let index = if c.eat("*") { None } else { Some(c.val()?) };
        c.expect("] (+)= ")?;
        let a = self.mma_operand(c)?;
        c.expect(" x ")?;
        let b = self.mma_operand(c)?;
        c.expect(", accumulate if ")?;
        let accumulate = if c.eat("true") {
            None
        } else {
            Some(self.access(c)?)
        };
        c.expect("  // e")?;
        let expr = ExprId::new(c.uint()?);
        Ok(Stmt::Wgmma(Wgmma {
            expr,
            acc: Access { buffer, index },
            n,
            a,
            b,
            a_type,
            b_type,
            accumulate,
        }))
    }

    fn mma_operand(&self, c: &mut Cursor) -> Result<MmaOperand> {
        let tile = self.access(c)?;
        if c.eat(" (registers)") {
            return Ok(MmaOperand {
                tile,
                desc_bits: 0,
                transposed: false,
                swizzle: 0,
                registers: true,
            });
        }
        c.expect(" (")?;
        let transposed = if c.eat("MN-major") {
            true
        } else {
            c.expect("K-major")?;
            false
        };
        c.expect(", swizzle ")?;
        let swizzle = c.uint()?;
        c.expect(", lbo ")?;
        let lbo = c.int()?;
        c.expect(", sbo ")?;
        let sbo = c.int()?;
        c.expect(")")?;
        let desc_bits = crate::target::descriptor_bits(lbo, sbo, swizzle)
            .ok_or_else(|| c.error(format!("no wgmma descriptor has a swizzle of {swizzle}")))?;
        Ok(MmaOperand {
            tile,
            desc_bits,
            transposed,
            swizzle,
            registers: false,
        })
    }

    /// `[vector<W> over v: ]out = value  // eN[ role]`, or `dst <- tma_load... | bulk_load ...`.
    fn compute_or_load(&mut self, c: &mut Cursor) -> Result<Stmt> {
        let vector = if c.eat("vector<") {
            let w = c.uint()?;
            c.expect("> over ")?;
            let v = c.ident()?.to_string();
            c.expect(": ")?;
            Some((v, w))
        } else {
            None
        };
        let out = self.access(c)?;
        if vector.is_none() && c.eat(" <- ") {
            return self.load(c, out);
        }
        c.expect(" = ")?;
        let expected = self.kernel.buffers[out.buffer].dtype;
        let value = self.data(c, expected)?;
        c.expect("  // e")?;
        let expr = ExprId::new(c.uint()?);
        let role = [
            (" init", ComputeRole::ReductionInit),
            (" reduce", ComputeRole::ReductionUpdate),
            (" write", ComputeRole::ReductionWrite),
            (" rescale", ComputeRole::OnlineRescale),
        ]
        .into_iter()
        .find(|(t, _)| c.eat(t))
        .map_or(ComputeRole::Normal, |(_, r)| r);
        Ok(Stmt::Compute(Compute {
            expr,
            out,
            value,
            role,
            vector,
        }))
    }

    fn load(&mut self, c: &mut Cursor, dst: Access) -> Result<Stmt> {
        let (kind, src, coords) = if c.eat("tma_load_") {
            let rank = c.uint::<usize>()?;
            c.expect("d ")?;
            let map = self.map_named(c)?;
            c.expect(" {")?;
            let coords = c.list("}", Cursor::val)?;
            c.expect("} of ")?;
            check_rank(c, rank, coords.len())?;
            let src = self.access(c)?;
            (CopyKind::Tile { map }, src, coords)
        } else {
            c.expect("bulk_load ")?;
            let src = self.access(c)?;
            let coords = if c.eat(" {") {
                let coords = c.list("}", Cursor::val)?;
                c.expect("}")?;
                coords
            } else {
                Vec::new()
            };
            (CopyKind::Bulk, src, coords)
        };
        c.expect(", ")?;
        let bytes = c.int()?;
        c.expect(" bytes, on ")?;
        let bars = self.mbarrier_named(c)?;
        c.expect("[")?;
        let slot = c.val()?;
        c.expect("]")?;
        let multicast = if c.eat(", multicast to ") {
            let n = c.int()?;
            c.expect(" CTAs")?;
            Some(n)
        } else {
            None
        };
        Ok(Stmt::TmaLoad(TmaLoad {
            kind,
            dst,
            src,
            coords,
            bytes,
            bars,
            slot,
            multicast,
        }))
    }

    /// A data value where one of type `expected` is wanted (see `print::implied_dtype`).
    fn data(&self, c: &mut Cursor, expected: DType) -> Result<Data> {
        c.enter()?;
        let d = self.data_inner(c, expected);
        c.depth -= 1;
        d
    }

    fn data_inner(&self, c: &mut Cursor, expected: DType) -> Result<Data> {
        let typed = |c: &mut Cursor, implied: DType| -> Result<DType> {
            if c.eat(":") {
                c.dtype()
            } else {
                Ok(implied)
            }
        };
        if c.eat("index@") {
            let axis =
                |c: &mut Cursor| usize::try_from(c.int()?).map_err(|_| c.error("a negative axis"));
            let of = if c.eat("value") {
                IndexOf::Value
            } else if c.eat("(") {
                let mut axes = vec![axis(c)?];
                while c.eat(", ") {
                    axes.push(axis(c)?);
                }
                c.expect(")")?;
                IndexOf::Element(axes)
            } else {
                IndexOf::Axis(axis(c)?)
            };
            c.expect("[")?;
            let v = if c.eat("*") { None } else { Some(c.val()?) };
            c.expect("]")?;
            return Ok(Data::Index(of, v));
        }
        if c.eat("view@e") {
            let e = ExprId::new(c.uint()?);
            c.expect("(")?;
            let x = self.data(c, expected)?;
            c.expect(")")?;
            return Ok(Data::View(e, Box::new(x)));
        }
        if c.eat("cast<") {
            let d = c.dtype()?;
            c.expect(">(")?;
            let x = self.data(c, d)?;
            c.expect(")")?;
            return Ok(Data::Cast(d, Box::new(x)));
        }
        let rest = c.rest();
        let number = rest.starts_with(|ch: char| ch == '-' || ch.is_ascii_digit())
            || rest.starts_with("NaN")
            || rest.starts_with("inf");
        if number {
            let len = rest
                .find(|ch: char| !(ch.is_ascii_alphanumeric() || matches!(ch, '.' | '-' | '+')))
                .unwrap_or(rest.len());
            let text = &rest[..len];
            let v: f64 = text
                .parse()
                .map_err(|_| c.error(format!("`{text}` is not a number")))?;
            c.pos += len;
            return Ok(Data::Literal(v, typed(c, expected)?));
        }
        let start = c.pos;
        let name = c.ident()?;
        if c.rest().starts_with('[') {
            c.pos = start;
            return Ok(Data::Read(self.access(c)?));
        }
        if !c.rest().starts_with(['(', '<']) {
            return Ok(Data::Param(name.to_string(), typed(c, expected)?));
        }
        // What the printer leaves unwritten (`print::implied_dtype` of an operation).
        let implied = expected.compute();
        let dtype = if c.eat("<") {
            let d = c.dtype()?;
            c.expect(">")?;
            d
        } else {
            implied
        };
        c.expect("(")?;
        if let Some(u) = UnaryOp::ALL.into_iter().find(|u| u.name() == name) {
            let x = self.data(c, dtype)?;
            c.expect(")")?;
            return Ok(Data::Unary(u, dtype, Box::new(x)));
        }
        if let Some(t) = TernaryOp::ALL.into_iter().find(|t| t.name() == name) {
            // `where` reads its condition in its own type (`print::ternary_operand_dtype`).
            let first = self.data(c, ternary_operand_dtype(t, 0, dtype))?;
            c.expect(", ")?;
            let second = self.data(c, dtype)?;
            c.expect(", ")?;
            let third = self.data(c, dtype)?;
            c.expect(")")?;
            return Ok(Data::Ternary(t, dtype, Box::new([first, second, third])));
        }
        let Some(b) = BinaryOp::ALL.into_iter().find(|b| b.name() == name) else {
            c.pos = start;
            return Err(c.error(format!("`{name}` is not an operation")));
        };
        let x = self.data(c, dtype)?;
        c.expect(", ")?;
        let y = self.data(c, dtype)?;
        c.expect(")")?;
        Ok(Data::Binary(b, dtype, Box::new(x), Box::new(y)))
    }
}

/// `name[count], N arrivals[ at smem+offset][ (cluster-wide)]`: an mbarrier array as its
/// declaration and its `mbarrier_init` show it.
fn mbarrier_fields(c: &mut Cursor) -> Result<(String, MbarArray)> {
    let name = c.ident()?.to_string();
    c.expect("[")?;
    let count = c.int()?;
    c.expect("]")?;
    let smem_offset = if c.eat(" at smem+") {
        Some(c.val()?)
    } else {
        None
    };
    c.expect(", ")?;
    let arrivals = c.int()?;
    c.expect(" arrivals")?;
    let cluster_wide = c.eat(" (cluster-wide)");
    Ok((
        name.clone(),
        MbarArray {
            name,
            count,
            arrivals,
            smem_offset,
            cluster_wide,
        },
    ))
}

/// The id of the declared `what` whose name comes next.
fn declared<T: Copy>(c: &mut Cursor, table: &HashMap<String, T>, what: &str) -> Result<T> {
    let start = c.pos;
    let name = c.ident()?;
    table.get(name).copied().ok_or_else(|| {
        c.pos = start;
        c.error(format!("no {what} `{name}` is declared"))
    })
}

fn check_rank(c: &Cursor, rank: usize, coords: usize) -> Result<()> {
    if rank == coords {
        Ok(())
    } else {
        Err(c.error(format!("a {rank}-d copy with {coords} coordinates")))
    }
}

enum Binding {
    /// `v = threadIdx.x`
    Hardware,
    /// `v @BIDy = value` (a persistent kernel's tile index)
    Persistent,
}

/// Whether a declaration line binds a variable, and how.
fn binding_form(text: &str) -> Option<Binding> {
    let name_len = text
        .find(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
        .unwrap_or(text.len());
    let rest = &text[name_len..];
    if name_len == 0 {
        None
    } else if rest.starts_with(" = threadIdx.") || rest.starts_with(" = blockIdx.") {
        Some(Binding::Hardware)
    } else if rest.starts_with(" @") {
        Some(Binding::Persistent)
    } else {
        None
    }
}

/// Turns every name the kernel does not bind as a variable into a size symbol.
fn resolve_sizes(k: &mut Kernel) {
    // The CTA's rank in its cluster is declared by every cluster kernel, not by a statement.
    let mut bound: HashSet<String> = HashSet::from([CTA_RANK.to_string()]);
    bound.extend(k.hw_vars.iter().map(|(v, _)| v.clone()));
    if let Some(v) = &k.visited {
        // The list's length, declared at the top of the kernel, and the tile bounds its
        // condition reads.
        bound.insert(crate::kir::VISITED_COUNT.to_string());
        if let TileTest::Bounds { .. } = v.test {
            bound.extend(crate::kir::TILE_BOUNDS.map(String::from));
            bound.insert(crate::kir::VISITED_KEPT.to_string());
        }
    }
    if let Some(p) = &k.persistent {
        bound.insert(p.var.clone());
        bound.extend(p.bindings.iter().map(|(v, _, _)| v.clone()));
        if let Some(sk) = &p.stream_k {
            bound.insert(sk.k_var.clone());
            bound.extend(sk.consts.iter().map(|(v, _)| v.clone()));
        }
    }
    for_each_stmt(&k.body, &mut |st| match st {
        Stmt::Loop(l) => {
            bound.insert(l.var.clone());
            bound.extend(l.digits.iter().map(|d| d.var.clone()));
        }
        Stmt::Let { var, .. } | Stmt::GridReduce(crate::kir::GridReduce { last: var, .. }) => {
            bound.insert(var.clone());
        }
        Stmt::Compute(Compute {
            vector: Some((v, _)),
            ..
        }) => {
            bound.insert(v.clone());
        }
        _ => {}
    });
    k.map_vals(&mut |v: &Val| sizes_in(v, &bound));
}

fn sizes_in(v: &Val, bound: &HashSet<String>) -> Val {
    match (v, v.operands()) {
        (Val::Var(n), _) if !bound.contains(n) => Val::Size(n.clone()),
        (_, Some((a, b))) => v.with_operands(sizes_in(a, bound), sizes_in(b, bound)),
        (v, None) => v.clone(),
    }
}

/// The reduction named `name` (`sum`, `max`, ...).
fn reduce_op(c: &Cursor, name: &str) -> Result<ReduceOp> {
    ReduceOp::ALL
        .into_iter()
        .find(|o| o.name() == name)
        .ok_or_else(|| c.error(format!("`{name}` is not a reduction")))
}
