//! The kernel IR's text: [`Kernel::print`] (the dump shown after every pass), its line map
//! ([`IrLines`]) and one statement's line ([`Kernel::stmt_head`]). The dump is complete:
//! `kir::parse` reads it back into the same kernel, so what its readable lines leave out is
//! written as short annotations (the helpers at the end of this file).

use super::*;
use std::fmt::Write;

impl Data {
    /// The value's text, its types written where they are not the ones implied by its own.
    pub fn text(&self, k: &Kernel) -> String {
        let mut out = String::new();
        self.write(k, self.dtype().unwrap_or(DType::F32), &mut out);
        out
    }

    /// The type of the node (None for a read: the buffer's).
    pub fn dtype(&self) -> Option<DType> {
        match self {
            Data::Read(_) => None,
            Data::Index(of, _) => Some(of.dtype()),
            Data::View(_, x) => x.dtype(),
            Data::Param(_, d)
            | Data::Literal(_, d)
            | Data::Unary(_, d, _)
            | Data::Binary(_, d, _, _)
            | Data::Ternary(_, d, _)
            | Data::Cast(d, _) => Some(*d),
        }
    }

    /// Writes the value where a value of type `expected` is wanted (a computation's output
    /// buffer type at the top): a node's type is written (`exp<f64>(..)`, `1.0:i32`) only when it
    /// is not [`implied_dtype`], so the usual computation reads as before.
    fn write(&self, k: &Kernel, expected: DType, out: &mut String) {
        let annotate = |d: DType, out: &mut String| {
            if d != implied_dtype(self, expected) {
                out.push(':');
                out.push_str(d.name());
            }
        };
        match self {
            Data::Read(a) => write_access(k, a, out),
            Data::Param(n, d) => {
                out.push_str(n);
                annotate(*d, out);
            }
            Data::Literal(v, d) => {
                out.push_str(&crate::text::float_literal(v));
                annotate(*d, out);
            }
            Data::Unary(u, d, x) => {
                out.push_str(u.name());
                write_op_dtype(*d, implied_dtype(self, expected), out);
                out.push('(');
                x.write(k, *d, out);
                out.push(')');
            }
            Data::Binary(b, d, x, y) => {
                out.push_str(b.name());
                write_op_dtype(*d, implied_dtype(self, expected), out);
                out.push('(');
                x.write(k, *d, out);
                out.push_str(", ");
                y.write(k, *d, out);
                out.push(')');
            }
            Data::Ternary(t, d, xs) => {
                out.push_str(t.name());
                write_op_dtype(*d, implied_dtype(self, expected), out);
                out.push('(');
                for (i, x) in xs.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    x.write(k, ternary_operand_dtype(*t, i, *d), out);
                }
                out.push(')');
            }
            Data::Cast(d, x) => {
                out.push_str("cast<");
                out.push_str(d.name());
                out.push_str(">(");
                x.write(k, *d, out);
                out.push(')');
            }
            // `view@e3(...)`: the view expression e3 recomputed from its operands.
            Data::View(e, x) => {
                let _ = write!(out, "view@e{}(", e.index());
                x.write(k, expected, out);
                out.push(')');
            }
            // `index@1[*]` until the indexing pass, then `index@1[n_o * 256 + n_i]`; an
            // element index over axes 0 and 1 is `index@(0, 1)[...]`; a combination of indices
            // `index@value[t_o * 128 - s2_o * 128]`.
            Data::Index(of, v) => {
                match of {
                    IndexOf::Value => out.push_str("index@value["),
                    IndexOf::Axis(axis) => {
                        let _ = write!(out, "index@{axis}[");
                    }
                    IndexOf::Element(axes) => {
                        let list: Vec<String> = axes.iter().map(|a| a.to_string()).collect();
                        let _ = write!(out, "index@({})[", list.join(", "));
                    }
                }
                match v {
                    None => out.push('*'),
                    Some(v) => v.write(out, false),
                }
                out.push(']');
            }
        }
    }
}

/// The type operand `i` of a ternary op of type `d` is read in: `where` tests its condition
/// in its own type (a truth value), every other operand computes in `d` (`loop_nest`).
pub(super) fn ternary_operand_dtype(op: TernaryOp, i: usize, d: DType) -> DType {
    if op == TernaryOp::Where && i == 0 {
        DType::Bool
    } else {
        d
    }
}

/// `<dtype>` after an operation's name when its type is not the implied one.
fn write_op_dtype(d: DType, implied: DType, out: &mut String) {
    if d != implied {
        out.push('<');
        out.push_str(d.name());
        out.push('>');
    }
}

/// The type a value node has when the dump does not write it, where a value of type
/// `expected` is wanted: arithmetic in the compute type of `expected` (`loop_nest` computes
/// an op in its output's compute type and reads its operands in it), a literal or parameter in
/// `expected` itself. The parser reads an unwritten type back with the same rule.
pub(super) fn implied_dtype(node: &Data, expected: DType) -> DType {
    match node {
        Data::Unary(..) | Data::Binary(..) | Data::Ternary(..) => expected.compute(),
        Data::Cast(d, _) => *d,
        Data::Index(of, _) => of.dtype(),
        Data::View(_, x) => implied_dtype(x, expected),
        Data::Read(_) | Data::Param(..) | Data::Literal(..) => expected,
    }
}

pub fn access_text(k: &Kernel, a: &Access) -> String {
    let mut out = String::new();
    write_access(k, a, &mut out);
    out
}

fn write_access(k: &Kernel, a: &Access, out: &mut String) {
    out.push_str(&k.buffers[a.buffer].name);
    out.push('[');
    match &a.index {
        None => out.push('*'),
        Some(i) => i.write(out, false),
    }
    out.push(']');
}

/// Where [`Kernel::print_with_lines`] put things: 1-based line numbers in the dump.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IrLines {
    /// The first line of every statement of the body, in preorder (a statement before the
    /// statements it holds; `then` before `els`, `producer` before `consumer`).
    pub stmts: Vec<usize>,
    /// The line of every `hw_vars` binding.
    pub bindings: Vec<usize>,
}

/// Where statements and bindings start in a growing dump, as byte offsets while it is written;
/// turned into line numbers in one pass over the finished text (counting the lines at every
/// statement was a third of a dump's time).
#[derive(Default)]
struct LineRecorder {
    stmts: Vec<usize>,
    bindings: Vec<usize>,
}

impl LineRecorder {
    /// The 1-based line of each offset (`offsets` ascending).
    fn lines_at(s: &str, offsets: &[usize]) -> Vec<usize> {
        let (mut line, mut counted) = (1, 0);
        offsets
            .iter()
            .map(|&offset| {
                line += count_newlines(&s.as_bytes()[counted..offset]);
                counted = offset;
                line
            })
            .collect()
    }
}

/// The number of `\n` bytes in `bytes`, eight at a time: a byte of `w ^ 0x0a..` is zero
/// exactly where `w` has a newline, and `((x & 0x7f) + 0x7f) | x` has its high bit set exactly
/// where `x` is not zero (no carry crosses a byte).
fn count_newlines(bytes: &[u8]) -> usize {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let mut chunks = bytes.chunks_exact(8);
    let mut n = 0;
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("8 bytes")) ^ 0x0a0a_0a0a_0a0a_0a0a;
        let nonzero = (((w & LOW7) + LOW7) | w) & !LOW7;
        n += 8 - nonzero.count_ones() as usize;
    }
    n + chunks.remainder().iter().filter(|&&b| b == b'\n').count()
}

impl Kernel {
    /// The readable dump shown after every pass.
    pub fn print(&self) -> String {
        self.print_recording(None)
    }

    /// [`Kernel::print`], and the line of every statement and binding in it (the CUDA
    /// emitter's line map points into the final dump with these).
    pub fn print_with_lines(&self) -> (String, IrLines) {
        let mut rec = LineRecorder::default();
        let s = self.print_recording(Some(&mut rec));
        let lines = IrLines {
            stmts: LineRecorder::lines_at(&s, &rec.stmts),
            bindings: LineRecorder::lines_at(&s, &rec.bindings),
        };
        (s, lines)
    }

    fn print_recording(&self, mut rec: Option<&mut LineRecorder>) -> String {
        let mut s = String::new();
        let dims = |d: &[SizeExpr; 3]| {
            d.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = write!(
            s,
            "kernel {}  grid({})  block({}){}",
            self.name,
            dims(&self.grid),
            dims(&self.block),
            self.cluster
                .map(|c| format!("  cluster({}, {}, {})", c[0], c[1], c[2]))
                .unwrap_or_default()
        );
        write_kernel_extras(self, &mut s);
        for b in &self.buffers {
            write_buffer_decl(b, &mut s);
        }
        for m in &self.tensor_maps {
            let list = |v: &[SizeExpr]| {
                v.iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = write!(
                s,
                "  param {}: tensor map of `{}` ({}), innermost first: dims [{}] strides [{}] bytes, box {:?}",
                m.param,
                m.tensor,
                m.dtype,
                list(&m.global_dims),
                list(&m.global_strides),
                m.box_dims
            );
            write_tensor_map_extras(m, &mut s);
        }
        for m in &self.mbarriers {
            write_mbarrier_decl(m, &mut s);
        }
        for (v, p) in &self.hw_vars {
            if let Some(r) = rec.as_deref_mut() {
                r.bindings.push(s.len());
            }
            let _ = writeln!(s, "  {v} = {}", p.cuda_index().unwrap_or("?"));
        }
        if let Some(p) = &self.persistent {
            match &p.stream_k {
                None => {
                    let _ = writeln!(
                        s,
                        "  persistent({}, {}): loop `{}` walks this CTA's share of {} tiles (blockIdx.x, + gridDim.x, ...)",
                        p.along, p.group, p.var, p.tiles
                    );
                }
                Some(sk) => {
                    let _ = writeln!(
                        s,
                        "  persistent({}, {}, stream_k): loop `{}` walks this CTA's rounds and run of {} split k steps of {} tiles; `{}` walks the piece [{}, {}) of each",
                        p.along,
                        p.group,
                        p.var,
                        sk.work.text(),
                        p.tiles,
                        sk.k_var,
                        sk.lo.text(),
                        sk.hi.text()
                    );
                }
            }
            if let Some(sk) = &p.stream_k {
                write_stream_k_details(sk, &mut s);
            }
            for (v, along, value) in &p.bindings {
                let _ = writeln!(s, "  {v} @{along} = {}", value.text());
            }
        }
        if let Some(v) = &self.visited {
            write_visited(v, &mut s);
        }
        print_block(self, &self.body, 1, &mut s, &mut rec);
        s
    }
}

/// The `visited` line of a kernel whose key-tile loop visits a list ([`super::VisitedTiles`]).
fn write_visited(v: &super::VisitedTiles, s: &mut String) {
    let _ = write!(
        s,
        "  visited({}, {}, {}): ",
        v.var, v.query_tile, v.key_tile
    );
    match &v.test {
        super::TileTest::Ids {
            query_ids,
            query_row,
            key_ids,
            key_row,
            upper,
            lower,
        } => {
            let _ = write!(
                s,
                "{}[{}] from {} of {}, {}[{}] of {}",
                query_ids,
                query_row.text(),
                v.first_query.text(),
                v.queries.text(),
                key_ids,
                key_row.text(),
                v.keys.text()
            );
            if let Some(u) = upper {
                let _ = write!(s, ", j - i <= {}", u.text());
            }
            if let Some(l) = lower {
                let _ = write!(s, ", j - i >= {}", l.text());
            }
        }
        super::TileTest::Bounds { may, must } => {
            let _ = write!(
                s,
                "queries from {} of {}, keys of {}, where {}, kept where {}",
                v.first_query.text(),
                v.queries.text(),
                v.keys.text(),
                may.text(),
                must.text()
            );
        }
    }
    if let Some(o) = &v.smem_offset {
        let _ = write!(s, " at smem {}", o.text());
    }
    s.push('\n');
}

fn print_block(
    k: &Kernel,
    body: &[Stmt],
    depth: usize,
    s: &mut String,
    rec: &mut Option<&mut LineRecorder>,
) {
    // Two spaces per level, borrowed from a constant (a string per block was an allocation
    // per loop and per `if` of the kernel).
    const SPACES: &str = "                                                                ";
    let owned;
    let ind = match SPACES.get(..2 * depth) {
        Some(ind) => ind,
        None => {
            owned = "  ".repeat(depth);
            owned.as_str()
        }
    };
    for st in body {
        if let Some(r) = rec.as_deref_mut() {
            r.stmts.push(s.len());
        }
        print_head(k, st, ind, s);
        for (i, child) in st.children().enumerate() {
            if i > 0 {
                print_between(st, ind, s);
            }
            print_block(k, child, depth + 1, s, rec);
        }
    }
}

/// The line before a statement's second body: `else:` (when there is one), the consumer warps'.
fn print_between(st: &Stmt, ind: &str, s: &mut String) {
    match st {
        Stmt::If { els, .. } if !els.is_empty() => {
            let _ = writeln!(s, "{ind}else:");
        }
        Stmt::WarpRoles(w) => {
            let _ = writeln!(
                s,
                "{ind}consumer warps ({} threads, barriers are named){}:",
                w.consumer_threads,
                setmaxnreg(w.registers, 1)
            );
        }
        _ => {}
    }
}

/// `, setmaxnreg N` of warp roles' `role` (0: producer, 1: consumer), when they set counts.
fn setmaxnreg(registers: Option<(u32, u32)>, role: usize) -> String {
    registers
        .map(|r| format!(", setmaxnreg {}", if role == 0 { r.0 } else { r.1 }))
        .unwrap_or_default()
}

fn print_loop(l: &Loop, ind: &str, s: &mut String) {
    s.push_str(ind);
    s.push_str("for ");
    s.push_str(&l.var);
    s.push_str(" in ");
    l.extent.write(s, false);
    let _ = write!(s, " @{} key {}", l.parallel, l.key.index());
    if !l.digits.is_empty() {
        s.push_str(" carrying ");
        for (i, d) in l.digits.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            s.push_str(&d.var);
            s.push_str(" in ");
            d.extent.write(s, false);
        }
    }
    s.push_str(":\n");
}

fn print_alloc(k: &Kernel, b: BufferId, ind: &str, s: &mut String) {
    let buf = &k.buffers[b];
    s.push_str(ind);
    s.push_str("alloc ");
    s.push_str(&buf.name);
    let _ = write!(s, ": {}[", buf.dtype);
    match &buf.size {
        Some(v) => v.write(s, false),
        None => s.push('?'),
    }
    s.push_str("] ");
    s.push_str(buf.memory.name());
    if let Some(o) = &buf.smem_offset {
        s.push_str(" at smem+");
        o.write(s, false);
    }
    s.push('\n');
}

fn print_compute(k: &Kernel, c: &Compute, ind: &str, s: &mut String) {
    s.push_str(ind);
    if let Some((v, w)) = &c.vector {
        let _ = write!(s, "vector<{w}> over {v}: ");
    }
    write_access(k, &c.out, s);
    s.push_str(" = ");
    c.value.write(k, k.buffers[c.out.buffer].dtype, s);
    write_compute_tag(c, s);
    s.push('\n');
}

fn print_mbar_init(k: &Kernel, bars: MbarId, ind: &str, s: &mut String) {
    let m = &k.mbarriers[bars];
    let off = m
        .smem_offset
        .as_ref()
        .map(|o| format!(" at smem+{}", o.text()))
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "{ind}mbarrier_init {}[{}]{off}, {} arrivals{}; fence.mbarrier_init",
        m.name,
        m.count,
        m.arrivals,
        if m.cluster_wide {
            " (cluster-wide)"
        } else {
            ""
        }
    );
}

fn print_mbar_arrive(
    k: &Kernel,
    bars: MbarId,
    slot: &Val,
    per_warp: bool,
    ind: &str,
    s: &mut String,
) {
    let m = &k.mbarriers[bars];
    let _ = writeln!(
        s,
        "{ind}mbarrier_arrive {}[{}]{}",
        m.name,
        slot.text(),
        match (per_warp, m.cluster_wide) {
            (true, false) => " (lane 0 of each warp)",
            (true, true) => " in every CTA of the cluster (lane r of each warp on CTA r's)",
            (false, true) => " in every CTA of the cluster",
            (false, false) => "",
        }
    );
}

fn print_tma_store(k: &Kernel, t: &TmaStore, ind: &str, s: &mut String) {
    let c: Vec<String> = t.coords.iter().map(|v| v.text()).collect();
    let _ = writeln!(
        s,
        "{ind}tma_store_{}d {} {{{}}} <- {}, {} bytes",
        t.coords.len(),
        k.tensor_maps[t.map].param,
        c.join(", "),
        access_text(k, &t.src),
        t.bytes
    );
}

fn print_wgmma(k: &Kernel, w: &Wgmma, ind: &str, s: &mut String) {
    let operand = |o: &MmaOperand| {
        if o.registers {
            return format!("{} (registers)", access_text(k, &o.tile));
        }
        let (lbo, sbo) = descriptor_offsets(o.desc_bits);
        format!(
            "{} ({}, swizzle {}, lbo {lbo}, sbo {sbo})",
            access_text(k, &o.tile),
            if o.transposed { "MN-major" } else { "K-major" },
            o.swizzle
        )
    };
    let _ = write!(
        s,
        "{ind}wgmma.m64n{}k{}.f32.{} {}[+{}] (+)= {} x {}, accumulate if {}",
        w.n,
        crate::target::wgmma_k(w.a_type).unwrap_or(0),
        // One type when both operands have it (FP8 products may mix e4m3 and e5m2).
        if w.a_type == w.b_type {
            w.a_type.name().to_string()
        } else {
            format!("{}.{}", w.a_type.name(), w.b_type.name())
        },
        k.buffers[w.acc.buffer].name,
        w.acc.index.as_ref().map_or("*".into(), |i| i.text()),
        operand(&w.a),
        operand(&w.b),
        w.accumulate
            .as_ref()
            .map_or("true".into(), |a| access_text(k, a))
    );
    // The fusion expression, as a computation's (the same `  // e3`).
    let _ = writeln!(s, "  // e{}", w.expr.index());
}

fn print_tma_load(k: &Kernel, t: &TmaLoad, ind: &str, s: &mut String) {
    let what = match t.kind {
        CopyKind::Tile { map } => {
            let c: Vec<String> = t.coords.iter().map(|v| v.text()).collect();
            format!(
                "tma_load_{}d {} {{{}}} of {}",
                t.coords.len(),
                k.tensor_maps[map].param,
                c.join(", "),
                access_text(k, &t.src)
            )
        }
        CopyKind::Bulk => bulk_load_text(k, t),
    };
    let _ = writeln!(
        s,
        "{ind}{} <- {what}, {} bytes, on {}[{}]{}",
        access_text(k, &t.dst),
        t.bytes,
        k.mbarriers[t.bars].name,
        t.slot.text(),
        t.multicast
            .map(|n| format!(", multicast to {n} CTAs"))
            .unwrap_or_default()
    );
}

/// A statement's first line (its whole text when it has no body), indented by `ind`.
fn print_head(k: &Kernel, st: &Stmt, ind: &str, s: &mut String) {
    // The common statements are written piece by piece into `s` (no string per part):
    // this runs for every statement of every pass dump.
    match st {
        Stmt::Loop(l) => print_loop(l, ind, s),
        Stmt::If { cond, .. } => {
            s.push_str(ind);
            s.push_str("if ");
            cond.write(s, false);
            s.push_str(":\n");
        }
        Stmt::Alloc(b) => print_alloc(k, *b, ind, s),
        Stmt::Compute(c) => print_compute(k, c, ind, s),
        Stmt::BlockReduce { .. }
        | Stmt::BlockWelford { .. }
        | Stmt::QuadReduce { .. }
        | Stmt::GridReduce(_) => print_reduction(k, st, ind, s),
        Stmt::Sync | Stmt::GroupSync { .. } | Stmt::Turn { .. } | Stmt::ClusterSync => {
            print_barrier(st, ind, s)
        }
        Stmt::Let {
            var,
            value,
            broadcast,
        } => {
            let from = if *broadcast {
                " (broadcast from lane 0)"
            } else {
                ""
            };
            let _ = writeln!(s, "{ind}let {var} = {}{from}", value.text());
        }
        Stmt::MbarInit { bars } => print_mbar_init(k, *bars, ind, s),
        Stmt::MbarInval { .. }
        | Stmt::MbarArriveExpectTx { .. }
        | Stmt::MbarWait { .. }
        | Stmt::MbarExpectTx { .. } => print_mbar_op(k, st, ind, s),
        Stmt::MbarArrive {
            bars,
            slot,
            per_warp,
        } => print_mbar_arrive(k, *bars, slot, *per_warp, ind, s),
        Stmt::TmaStore(t) => print_tma_store(k, t, ind, s),
        Stmt::BulkCommit => {
            let _ = writeln!(s, "{ind}bulk_commit_group");
        }
        Stmt::StreamKFixup { acc } => {
            let acc = acc.map_or("?".to_string(), |b| k.buffers[b].name.clone());
            let _ = writeln!(s, "{ind}stream_k_fixup {acc}");
        }
        Stmt::BulkWaitRead(n) => {
            let _ = writeln!(s, "{ind}bulk_wait_group_read {n}");
        }
        Stmt::FenceProxyAsync => {
            let _ = writeln!(s, "{ind}fence.proxy.async.shared::cta");
        }
        Stmt::Wgmma(w) => print_wgmma(k, w, ind, s),
        Stmt::StMatrix { dst, src } => {
            let _ = writeln!(
                s,
                "{ind}stmatrix.x4 {} <- {}",
                access_text(k, dst),
                stmatrix_source(k, src)
            );
        }
        Stmt::WgmmaFence => {
            let _ = writeln!(s, "{ind}wgmma.fence");
        }
        Stmt::WgmmaCommit => {
            let _ = writeln!(s, "{ind}wgmma.commit_group");
        }
        Stmt::WgmmaWait(n) => {
            let _ = writeln!(s, "{ind}wgmma.wait_group {n}");
        }
        Stmt::WarpRoles(w) => {
            let _ = writeln!(
                s,
                "{ind}producer warps (if {}){}:",
                w.is_producer.text(),
                setmaxnreg(w.registers, 0)
            );
        }
        Stmt::TmaLoad(t) => print_tma_load(k, t, ind, s),
    }
}

/// A block, quad or grid reduction (`block_sum_over_x(acc[...]) in f32`) or a block Welford combine.
fn print_reduction(k: &Kernel, st: &Stmt, ind: &str, s: &mut String) {
    match st {
        Stmt::BlockReduce {
            acc,
            op,
            dims,
            dtype,
        } => {
            let _ = write!(
                s,
                "{ind}block_{}_over_{}({})",
                op.name(),
                dims_text(dims),
                access_text(k, acc)
            );
            if *dtype != k.buffers[acc.buffer].dtype {
                let _ = write!(s, " in {dtype}");
            }
            s.push('\n');
        }
        Stmt::BlockWelford {
            mean,
            m2,
            count,
            dims,
        } => {
            let _ = writeln!(
                s,
                "{ind}block_welford_over_{}({}, {}, {})",
                dims_text(dims),
                access_text(k, mean),
                access_text(k, m2),
                access_text(k, count)
            );
        }
        Stmt::QuadReduce { acc, op, dtype } => {
            let _ = write!(s, "{ind}quad_{}({})", op.name(), access_text(k, acc));
            if *dtype != k.buffers[acc.buffer].dtype {
                let _ = write!(s, " in {dtype}");
            }
            s.push('\n');
        }
        Stmt::GridReduce(g) => {
            let _ = write!(s, "{ind}grid_{}({})", g.op.name(), access_text(k, &g.acc));
            if g.dtype != k.buffers[g.acc.buffer].dtype {
                let _ = write!(s, " in {}", g.dtype);
            }
            let _ = write!(s, " -> {}, slot {}", g.last, g.slot);
            if let Some(d) = g.split_k {
                let _ = write!(s, ", split_k over blockIdx.{}", ["x", "y", "z"][d]);
            }
            s.push('\n');
        }
        _ => unreachable!("print_reduction prints its own statements"),
    }
}

/// A block, group, turn or cluster barrier.
fn print_barrier(st: &Stmt, ind: &str, s: &mut String) {
    match st {
        Stmt::Sync => {
            let _ = writeln!(s, "{ind}__syncthreads()");
        }
        Stmt::GroupSync { dims, threads } => {
            let d: Vec<String> = dims.iter().map(|p| p.to_string()).collect();
            let _ = writeln!(s, "{ind}group_barrier({}, {threads} threads)", d.join(", "));
        }
        Stmt::Turn {
            step,
            on,
            groups,
            threads,
        } => {
            let what = match step {
                crate::kir::TurnStep::Wait => "turn_wait",
                crate::kir::TurnStep::Pass => "turn_pass",
            };
            let _ = writeln!(s, "{ind}{what}({on}, {groups} groups of {threads} threads)");
        }
        Stmt::ClusterSync => {
            let _ = writeln!(s, "{ind}cluster_sync");
        }
        _ => unreachable!("print_barrier prints its own statements"),
    }
}

/// An mbarrier's invalidation, arrival with a transaction count, expectation or wait.
fn print_mbar_op(k: &Kernel, st: &Stmt, ind: &str, s: &mut String) {
    match st {
        Stmt::MbarInval { bars } => {
            let m = &k.mbarriers[*bars];
            let _ = writeln!(s, "{ind}mbarrier_inval {}[{}]", m.name, m.count);
        }
        Stmt::MbarArriveExpectTx { bars, slot, bytes } => {
            let _ = writeln!(
                s,
                "{ind}mbarrier_arrive_expect_tx {}[{}], {bytes} bytes",
                k.mbarriers[*bars].name,
                slot.text()
            );
        }
        Stmt::MbarWait { bars, slot, parity } => {
            let _ = writeln!(
                s,
                "{ind}mbarrier_wait {}[{}], parity {}",
                k.mbarriers[*bars].name,
                slot.text(),
                parity.text()
            );
        }
        Stmt::MbarExpectTx { bars, slot, bytes } => {
            let _ = writeln!(
                s,
                "{ind}mbarrier_expect_tx {}[{}], {bytes} bytes",
                k.mbarriers[*bars].name,
                slot.text()
            );
        }
        _ => unreachable!("print_mbar_op prints its own statements"),
    }
}

impl Kernel {
    /// The first line of a statement's dump, unindented (`for i in N @Serial:`, `if c:`, an
    /// access...): how messages about one statement quote it. Only the statement's own ids are
    /// read (its nested blocks are left out), and they must be the kernel's.
    pub fn stmt_head(&self, st: &Stmt) -> String {
        let mut s = String::new();
        print_head(self, st, "", &mut s);
        s.truncate(s.trim_end_matches('\n').len());
        s
    }
}

// The annotations below carry what the dump's readable lines leave out, so that
// `kir::parse` reads every kernel field back (kept apart from `print_block` on purpose).

/// A computation's trailing comment: its fusion expression (`e3`) and, in a reduction, its part.
fn write_compute_tag(c: &Compute, s: &mut String) {
    let _ = write!(s, "  // e{}", c.expr.index());
    s.push_str(match c.role {
        ComputeRole::Normal => "",
        ComputeRole::ReductionInit => " init",
        ComputeRole::ReductionUpdate => " reduce",
        ComputeRole::ReductionWrite => " write",
        ComputeRole::OnlineRescale => " rescale",
    });
}

/// After the header's grid: the dynamic shared memory, block-reduction scratch and register
/// split, each only when the kernel has one; then the end of the line.
fn write_kernel_extras(k: &Kernel, s: &mut String) {
    if k.dynamic_smem != SizeExpr::Const(0) {
        let _ = write!(s, "  smem({})", k.dynamic_smem);
    }
    if let Some(r) = &k.reduce_scratch {
        let _ = write!(s, "  reduce_scratch({r})");
    }
    if let Some((p, c)) = k.register_sharing {
        let _ = write!(s, "  setmaxnreg({p}, {c})");
    }
    s.push('\n');
}

/// One buffer of the kernel, in id order: a global one as a kernel parameter (its shape;
/// a broadcast axis as `1`, or `1 of E` when the axis's extent is not 1; an axis of extent 1
/// that is not broadcast as `1!`), a local or shared one by its memory, with its size and
/// offset once the allocation pass has set them (as its `alloc`s show them: a buffer may have
/// none left, or several); then the fusion tensor it holds.
fn write_buffer_decl(b: &Buffer, s: &mut String) {
    if b.memory == MemoryType::Global {
        let shape: Vec<String> = b
            .global_shape
            .iter()
            .map(|(e, bc)| match (bc, e) {
                (false, SizeExpr::Const(1)) => "1!".into(),
                (false, e) => e.to_string(),
                (true, SizeExpr::Const(1)) => "1".into(),
                (true, e) => format!("1 of {e}"),
            })
            .collect();
        let _ = write!(
            s,
            "  param {}: {}[{}] global {}",
            b.name,
            b.dtype,
            shape.join(", "),
            if b.is_input { "in" } else { "out" }
        );
        if b.l2 != crate::fusion::L2Policy::Normal {
            let _ = write!(s, " l2={}", b.l2.name());
        }
    } else {
        let _ = write!(s, "  {} {}: {}", b.memory.name(), b.name, b.dtype);
        if let Some(size) = &b.size {
            s.push('[');
            size.write(s, false);
            s.push(']');
        }
        if let Some(o) = &b.smem_offset {
            s.push_str(" at smem+");
            o.write(s, false);
        }
    }
    if let Some(t) = b.tensor {
        let _ = write!(s, " (t{})", t.index());
    }
    s.push('\n');
}

/// A tensor map's element strides (when not all 1) and swizzle (when any); then the end of
/// the line.
fn write_tensor_map_extras(m: &crate::plan::TensorMapSpec, s: &mut String) {
    if m.element_strides.iter().any(|&e| e != 1) || m.element_strides.len() != m.box_dims.len() {
        let _ = write!(s, ", element strides {:?}", m.element_strides);
    }
    if m.swizzle_bytes != 0 {
        let _ = write!(s, ", swizzle {}", m.swizzle_bytes);
    }
    s.push('\n');
}

/// An mbarrier array, in id order (as its `mbarrier_init` shows it, once there is one).
fn write_mbarrier_decl(m: &MbarArray, s: &mut String) {
    let _ = write!(s, "  mbarrier {}[{}]", m.name, m.count);
    if let Some(o) = &m.smem_offset {
        s.push_str(" at smem+");
        o.write(s, false);
    }
    let _ = write!(s, ", {} arrivals", m.arrivals);
    if m.cluster_wide {
        s.push_str(" (cluster-wide)");
    }
    s.push('\n');
}

/// What a stream-K split computes once per CTA and per piece, after the `persistent` line.
fn write_stream_k_details(sk: &StreamK, s: &mut String) {
    for (v, value) in &sk.consts {
        let _ = writeln!(s, "  stream_k const {v} = {}", value.text());
    }
    let _ = writeln!(
        s,
        "  stream_k kt = {}, work = {} (launch: {}), before = {}, tile_start = {}",
        sk.kt.text(),
        sk.work.text(),
        sk.work_size,
        sk.before.text(),
        sk.tile_start.text()
    );
}

/// The leading- and stride-dimension byte offsets of a wgmma descriptor's bits
/// ([`crate::target::descriptor_bits`] reads them back).
pub(super) fn descriptor_offsets(bits: u64) -> (i64, i64) {
    let field = |at: u32| (((bits >> at) & 0x3FFF) << 4) as i64;
    (field(16), field(32))
}

/// The 8 registers a `stmatrix.x4` stores: `regs[0..8]` (or `regs[i..+8]` from a computed index).
fn stmatrix_source(k: &Kernel, src: &Access) -> String {
    let name = &k.buffers[src.buffer].name;
    match &src.index {
        Some(Val::Int(i)) => format!("{name}[{i}..{}]", i.saturating_add(8)),
        Some(i) => format!("{name}[{}..+8]", i.text()),
        None => format!("{name}[*]"),
    }
}

/// A bulk copy's source run, and the box coordinates it keeps when it has any.
fn bulk_load_text(k: &Kernel, t: &TmaLoad) -> String {
    let mut s = format!("bulk_load {}", access_text(k, &t.src));
    if !t.coords.is_empty() {
        let c: Vec<String> = t.coords.iter().map(|v| v.text()).collect();
        let _ = write!(s, " {{{}}}", c.join(", "));
    }
    s
}

/// The reduced thread dims of a block reduction as its name writes them (`xy`).
fn dims_text(dims: &[bool; 3]) -> String {
    ["x", "y", "z"]
        .iter()
        .zip(dims)
        .filter(|(_, &b)| b)
        .map(|(n, _)| *n)
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn newlines_are_counted_in_every_position_and_next_to_every_byte() {
        let mut text: Vec<u8> = (0..=255u8).collect();
        for i in (0..text.len()).step_by(7) {
            text[i] = b'\n';
        }
        for start in 0..16 {
            for end in start..text.len() {
                let slice = &text[start..end];
                let want = slice.iter().filter(|&&b| b == b'\n').count();
                assert_eq!(super::count_newlines(slice), want, "{start}..{end}");
            }
        }
    }
}
