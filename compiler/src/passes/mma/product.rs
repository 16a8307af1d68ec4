//! What a tensor-core product's tile computes: the update `acc += cast(x) * cast(y)` found
//! through the tile's register temporaries, its M, N and K loops, and each operand's layout in
//! shared memory as a matrix descriptor (K-major or MN-major, from the cache's swizzle), checked
//! against the instruction's shapes. The instruction's K and which layouts an operand may have
//! follow from its element type (`target::wgmma_k`, `target::wgmma_transposable`): k16 for
//! f16 / bf16, k32 and K-major only for e4m3 / e5m2.

#[allow(unused_imports)]
use super::*;
use crate::passes::probe::Probe;

/// What [`Lower::product`] found.
pub(super) struct Product {
    pub(super) expr: ExprId,
    pub(super) m: TileLoop,
    pub(super) n: TileLoop,
    pub(super) n_extent: i64,
    pub(super) acc: Access,
    pub(super) a: MmaOperand,
    pub(super) b: MmaOperand,
    pub(super) a_type: DType,
    pub(super) b_type: DType,
    /// The instruction's K loop.
    pub(super) k: TileLoop,
    /// Factors of the product other than its two operands (block scales, `block_scale.rs`),
    /// each read from global memory; empty for a plain product.
    pub(super) scales: Vec<Data>,
}

/// The factors of a product of f32 values (`x * y * ...`).
fn factors(d: &Data, out: &mut Vec<Data>) {
    match d {
        Data::Binary(BinaryOp::Mul, DType::F32, x, y) => {
            factors(x, out);
            factors(y, out);
        }
        other => out.push(other.clone()),
    }
}

/// `x` with every read of a register temporary defined earlier in the tile replaced by its
/// definition.
pub(super) fn resolve(d: &Data, defs: &HashMap<BufferId, Data>) -> Data {
    match d {
        Data::Read(a) => match defs.get(&a.buffer) {
            Some(def) => resolve(def, defs),
            None => d.clone(),
        },
        Data::Unary(op, t, x) => Data::Unary(*op, *t, Box::new(resolve(x, defs))),
        Data::Binary(op, t, x, y) => Data::Binary(
            *op,
            *t,
            Box::new(resolve(x, defs)),
            Box::new(resolve(y, defs)),
        ),
        Data::Ternary(op, t, xs) => {
            Data::Ternary(*op, *t, Box::new(xs.clone().map(|x| resolve(&x, defs))))
        }
        Data::Cast(t, x) => Data::Cast(*t, Box::new(resolve(x, defs))),
        other => other.clone(),
    }
}

/// The tile's M, N and K extents against the instruction's (M = 64, K = `wgmma_k` of the
/// operands' type `input`, N a multiple of 8 up to 256); returns N.
fn tile_extents(ml: &TileLoop, nl: &TileLoop, kl: &TileLoop, input: DType) -> Result<i64, String> {
    let k = target::wgmma_k(input).expect("a wgmma operand type");
    if ml.extent != Some(target::WGMMA_M) {
        return Err(format!(
            "its Mma M axis `{}` has {} rows; a wgmma tile has M = {}: split M by {} and make the inner part Mma",
            ml.var,
            ml.extent.map_or("a symbolic number of".into(), |e| e.to_string()),
            target::WGMMA_M,
            target::WGMMA_M
        ));
    }
    if kl.extent != Some(k) {
        return Err(format!(
            "its Mma K axis `{}` has {} elements; a wgmma on {}-bit inputs has K = {k} ({input}: {} bytes of each operand row): split K by {k} and make the inner part Mma",
            kl.var,
            kl.extent.map_or("a symbolic number of".into(), |e| e.to_string()),
            8 * input.size_bytes(),
            target::WGMMA_K_BYTES,
        ));
    }
    match nl.extent {
        Some(n) if target::wgmma_n_valid(n) => Ok(n),
        other => Err(format!(
            "its Mma N axis `{}` has {} columns; a wgmma tile has N a multiple of 8 from 8 to 256",
            nl.var,
            other.map_or("a symbolic number of".into(), |e| e.to_string())
        )),
    }
}

/// Why an MN-major operand of 8-bit type `t` (the cache `cache`, contiguous along `axis`)
/// cannot be read: wgmma's transpose immediates exist for 16-bit operands only.
fn mn_major_8_bit(cache: &str, axis: &str, t: DType) -> String {
    format!(
        "operand `{cache}` is {t} and MN-major (its {axis} axis is contiguous in shared memory); wgmma transposes only f16 and bf16 operands, so an 8-bit operand must be K-major: give the input with K as its last (contiguous) axis ({axis} x K, as torch._scaled_mm takes `b.t()` of a row-major [N, K] weight) and cache it as loaded"
    )
}

/// Why a register fragment `name` of type `t` cannot be a wgmma operand.
fn register_f32(name: &str, t: DType) -> String {
    format!(
        "operand `{name}` is a {t} register fragment (computed from a tensor-core accumulator); wgmma takes A from registers as f16 or bf16 only: round it first (`{name}b = cast({name}, bf16)`) and multiply `cast(broadcast({name}b, ...), f32)`"
    )
}

/// A product's tile, for the checks of its operands.
pub(super) struct TileOf<'a> {
    expr: ExprId,
    /// The sum's tensor name (for the messages).
    sum: &'a str,
    m: &'a TileLoop,
    n: &'a TileLoop,
    k: &'a TileLoop,
    n_extent: i64,
    /// The instruction's K, in elements.
    k_extent: i64,
}

/// A product's operands as written (x, y) with their types, and its scales.
struct Operands {
    x: (Access, DType),
    y: (Access, DType),
    scales: Vec<Data>,
}

impl Lower<'_> {
    /// The sum of products a three-deep tile computes, checked against the instruction.
    pub(super) fn product(
        &self,
        cx: &Ctx,
        k: &Kernel,
        loops: &[TileLoop],
        body: &[Stmt],
    ) -> Result<Product, Diagnostic> {
        let f = cx.fusion;
        let mut cs = Vec::new();
        let any_expr = first_expr(body);
        let what = |e: Option<ExprId>| {
            e.map(|e| format!("`{}`", f.tensors[f.exprs[e].output].name))
                .unwrap_or_else(|| "a tensor".into())
        };
        let span = |e: Option<ExprId>| e.and_then(|e| f.tensors[f.exprs[e].output].span);
        if !computes(body, &mut cs) {
            return Err(Diagnostic::new(
                format!(
                    "the Mma tile of {} holds more than computations: a tensor-core tile is one instruction",
                    what(any_expr)
                ),
                span(any_expr),
            ));
        }
        let Some(update) = cs
            .iter()
            .rev()
            .find(|c| c.role == ComputeRole::ReductionUpdate)
        else {
            return Err(Diagnostic::new(
                format!(
                    "{} has three Mma axes but is not a sum: the M, N and K axes of a tensor-core tile belong to the sum of products (other tensors in the tile have its M and N axes only)",
                    what(any_expr)
                ),
                span(any_expr),
            ));
        };
        let expr = update.expr;
        let sum = &f.tensors[f.exprs[expr].output];
        let message = |m: String| self.err(cx, expr, format!("`{}`: {m}", sum.name));
        let bad = |m: String| Err(message(m));
        let defs: HashMap<BufferId, Data> = cs
            .iter()
            .filter(|c| {
                k.buffers[c.out.buffer].memory == MemoryType::Local
                    && !self.fragments.contains(&c.out.buffer)
            })
            .map(|c| (c.out.buffer, c.value.clone()))
            .collect();
        let acc = update.out.clone();
        let Data::Binary(BinaryOp::Add, DType::F32, x, y) = &update.value else {
            return bad("a tensor-core product accumulates in f32: the sum must be f32".into());
        };
        let product = match (&**x, &**y) {
            (Data::Read(a), other) | (other, Data::Read(a)) if a == &acc => resolve(other, &defs),
            _ => return bad("internal: the reduction update does not read its accumulator".into()),
        };
        let Data::Binary(BinaryOp::Mul, _, _, _) = &product else {
            return bad(
                "a tensor-core tile computes a sum of products of two operands, and this sum is of something else".into(),
            );
        };
        let Operands {
            x: (xa, xt),
            y: (ya, _),
            scales,
        } = self.operands(k, &product, &message)?;
        let in_registers = |a: &Access, t: DType| {
            self.fragments.contains(&a.buffer) && target::wgmma_transposable(t)
        };
        // Which loop is which: K is the one the accumulator does not move with; A moves with
        // M, B with N.
        let acc_index = acc.index.clone().unwrap_or(Val::Int(0));
        let moves = |idx: &Val, l: &TileLoop| idx.mentions(&l.var);
        let ks: Vec<&TileLoop> = loops.iter().filter(|l| !moves(&acc_index, l)).collect();
        let [kl] = ks[..] else {
            return bad("internal: the Mma tile has no single K axis".into());
        };
        let mn: Vec<&TileLoop> = loops.iter().filter(|l| l.key != kl.key).collect();
        let (xi, yi) = (
            xa.index.clone().unwrap_or(Val::Int(0)),
            ya.index.clone().unwrap_or(Val::Int(0)),
        );
        let only = |idx: &Val, a: &TileLoop, b: &TileLoop| moves(idx, a) && !moves(idx, b);
        if !((only(&xi, mn[0], mn[1]) && only(&yi, mn[1], mn[0]))
            || (only(&xi, mn[1], mn[0]) && only(&yi, mn[0], mn[1])))
        {
            return bad("each operand of a tensor-core product must vary with exactly one of the tile's M and N axes (and with K)".into());
        }
        // N is the tile's axis the accumulator holds contiguously (the fragment's columns), M
        // the other; A is the operand that moves with M.
        let (ml, nl) = if stride(&acc_index, &mn[0].var) == Some(1) {
            (mn[1], mn[0])
        } else {
            (mn[0], mn[1])
        };
        let (a, b) = if moves(&xi, ml) { (xa, ya) } else { (ya, xa) };
        let n_extent = tile_extents(ml, nl, kl, xt).map_err(message)?;
        // The accumulator: N consecutive, rows N apart (the fragment's tile inside the array).
        if stride(&acc_index, &nl.var) != Some(1) || stride(&acc_index, &ml.var) != Some(n_extent) {
            return bad("internal: the accumulator is not laid out as its M x N tile".into());
        }
        let tile = TileOf {
            expr,
            sum: &sum.name,
            m: ml,
            n: nl,
            k: kl,
            n_extent,
            k_extent: target::wgmma_k(xt).expect("a wgmma operand type"),
        };
        let (a_type, b_type) = (k.buffers[a.buffer].dtype, k.buffers[b.buffer].dtype);
        if in_registers(&b, k.buffers[b.buffer].dtype) {
            return bad(format!(
                "operand `{}` is a register fragment but moves with N; wgmma takes only A (the operand that moves with M) from registers: B must be a swizzled shared-memory cache",
                k.buffers[b.buffer].name
            ));
        }
        let a_op = if in_registers(&a, a_type) {
            self.register_operand(k, &tile, &a).map_err(message)?
        } else {
            self.operand(cx, k, &tile, &a, ml)?
        };
        let b_op = self.operand(cx, k, &tile, &b, nl)?;
        Ok(Product {
            expr,
            m: ml.clone(),
            n: nl.clone(),
            n_extent,
            acc,
            a: a_op,
            b: b_op,
            a_type,
            b_type,
            k: kl.clone(),
            scales,
        })
    }

    /// The product's two operands (each `cast(x, f32)` of a 16- or 8-bit cache in shared memory,
    /// or A a register fragment) and the scales among its other factors, checked.
    fn operands(
        &self,
        k: &Kernel,
        product: &Data,
        message: &dyn Fn(String) -> Diagnostic,
    ) -> Result<Operands, Diagnostic> {
        let operand = |d: &Data| -> Option<(Access, DType)> {
            match d {
                Data::Cast(DType::F32, inner) => match &**inner {
                    Data::Read(a) => Some((a.clone(), k.buffers[a.buffer].dtype)),
                    _ => None,
                },
                _ => None,
            }
        };
        // Two factors are the operands; with more, the two widened wgmma caches are and the
        // rest are scales read from global memory (promoted per K block, `block_scale.rs`).
        let mut all = Vec::new();
        factors(product, &mut all);
        let mut scales = Vec::new();
        if all.len() > 2 {
            let wgmma_cache = |d: &Data| {
                operand(d).is_some_and(|(a, t)| {
                    k.buffers[a.buffer].memory == MemoryType::Shared && target::wgmma_input(t)
                })
            };
            let (ops, rest): (Vec<Data>, Vec<Data>) = all.into_iter().partition(wgmma_cache);
            for scale in &rest {
                let mut from_memory = true;
                scale.for_each_read(&mut |a| {
                    from_memory &= k.buffers[a.buffer].memory == MemoryType::Global
                });
                if !from_memory {
                    return Err(message("a factor of the product other than its two operands is a scale the tensor cores cannot apply inside the tile; it must be read from an input (a block scale: `expand_blocks(sa, block=[1, 128], shape=[M, K])`)".into()));
                }
            }
            all = ops;
            scales = rest;
        }
        let (x, y) = match &all[..] {
            [x, y] => (x, y),
            _ => (product, product),
        };
        // An f32 fragment read as a factor (no cast: it is f32 already).
        for d in [x, y] {
            if let Data::Read(a) = d {
                if self.fragments.contains(&a.buffer) {
                    return Err(message(register_f32(
                        &k.buffers[a.buffer].name,
                        k.buffers[a.buffer].dtype,
                    )));
                }
            }
        }
        let (Some((xa, xt)), Some((ya, yt))) = (operand(x), operand(y)) else {
            return Err(message("the tensor cores multiply f16, bf16, f8e4m3 or f8e5m2 operands widened to f32: each factor must be `cast(x, f32)` of such a cache in shared memory (a scale constant along the summed axis, i.e. a number, a scalar input or `broadcast(x, axis=K)`, is applied after the sum; one constant along blocks of K, `expand_blocks(s, block=[..., 128], ...)`, after each block)".into()));
        };
        // A 16-bit register fragment (another product's accumulator, converted) may be A.
        let in_registers = |a: &Access, t: DType| {
            self.fragments.contains(&a.buffer) && target::wgmma_transposable(t)
        };
        for (a, t) in [(&xa, xt), (&ya, yt)] {
            let buf = &k.buffers[a.buffer];
            if in_registers(a, t) {
                continue;
            }
            if self.fragments.contains(&a.buffer) {
                return Err(message(register_f32(&buf.name, t)));
            }
            if buf.memory != MemoryType::Shared || !target::wgmma_input(t) {
                return Err(message(format!(
                    "operand `{}` is {} in {} memory; a wgmma operand is an f16, bf16, f8e4m3 or f8e5m2 cache in shared memory (cache_after(x, memory=shared, load=tma, swizzle=128))",
                    buf.name,
                    t,
                    buf.memory.name()
                )));
            }
        }
        if !target::wgmma_types_pair(xt, yt) {
            return Err(message(format!(
                "the operands are {xt} and {yt}; a wgmma multiplies two operands of the same 16-bit type, or two 8-bit floats (f8e4m3, f8e5m2, either mix)"
            )));
        }
        Ok(Operands {
            x: (xa, xt),
            y: (ya, yt),
            scales,
        })
    }

    /// A from registers (the RS form): `o` reads a 16-bit fragment of a `64 x W` tile whose
    /// rows are the M rows of this product's tile (the same M loop) and whose columns `c ..
    /// c + 16` are the instruction's K, `c` a multiple of 16. Those columns are registers `W / 2
    /// * tile + c / 2 .. + 8` of the fragment, which are the A operand's eight values in its
    /// layout (`target::fragment_a_row_col`): no shuffle. Checked at every row and k.
    fn register_operand(&self, k: &Kernel, t: &TileOf, o: &Access) -> Result<MmaOperand, String> {
        let name = &k.buffers[o.buffer].name;
        let idx = o.index.clone().unwrap_or(Val::Int(0));
        let not_a_fragment = || {
            format!(
                "operand `{name}` is a register fragment, but not one wgmma can take as A: its index must be a 64-row tile whose columns are this product's K (16 of them from a multiple of 16), as when it is computed from another product's accumulator with the same M axis and this product's K split from that product's N"
            )
        };
        let width = stride(&idx, &t.m.var).ok_or_else(not_a_fragment)?;
        if width <= 0 || width % t.k_extent != 0 || !target::wgmma_n_valid(width) {
            return Err(not_a_fragment());
        }
        let free = [Val::Var(t.m.var.clone()), Val::Var(t.k.var.clone())];
        // Every row and k of the tile, row-major: each probe at all of them at once.
        let (rs, ks): (Vec<i64>, Vec<i64>) = (0..target::WGMMA_M)
            .flat_map(|r| (0..t.k_extent).map(move |kk| (r, kk)))
            .unzip();
        for seed in 0..3u64 {
            let probe = Probe::new(&idx, &free, seed);
            let origin = probe
                .at(&[0, 0], &mut Vec::new())
                .ok_or_else(not_a_fragment)?;
            if origin % t.k_extent != 0 {
                return Err(not_a_fragment());
            }
            let values = probe.at_each(&[&rs, &ks]);
            let tile = rs.iter().zip(&ks).zip(values);
            if !tile
                .into_iter()
                .all(|((r, kk), v)| v == Some(origin + r * width + kk))
            {
                return Err(not_a_fragment());
            }
        }
        let base = fragment_base(Some(&idx), &t.m.var, &t.k.var, width);
        Ok(MmaOperand {
            tile: Access {
                buffer: o.buffer,
                index: Some(base),
            },
            desc_bits: 0,
            transposed: false,
            swizzle: 0,
            registers: true,
        })
    }

    /// Operand `o` of the product `t` (its rows along loop `row`: M for A, N for B) as a matrix
    /// descriptor: K-major or MN-major in its cache's swizzle, else why it is neither.
    fn operand(
        &self,
        cx: &Ctx,
        k: &Kernel,
        t: &TileOf,
        o: &Access,
        row: &TileLoop,
    ) -> Result<MmaOperand, Diagnostic> {
        let bad_op = |m: String| -> Result<MmaOperand, Diagnostic> {
            Err(self.err(cx, t.expr, format!("`{}`: {m}", t.sum)))
        };
        let buf = &k.buffers[o.buffer];
        let idx = o.index.clone().unwrap_or(Val::Int(0));
        let sw = self
            .plan
            .box_swizzle(&cx.layout.tensor_buffer, o.buffer)
            .unwrap_or(0);
        if sw == 0 {
            return bad_op(format!(
                "operand `{}` is not swizzled; wgmma reads shared memory in 8 x 16-byte core matrices, which a TMA box gives with swizzle=128 (or 64, 32) on the cache",
                buf.name
            ));
        }
        let elem_type = buf.dtype;
        let elem = elem_type.size_bytes() as i64;
        let span_elems = sw as i64 / elem;
        let (sr, sk) = (stride(&idx, &row.var), stride(&idx, &t.k.var));
        let tile = Access {
            buffer: o.buffer,
            index: Some(zero(&idx, &[&t.m.var, &t.n.var, &t.k.var])),
        };
        let rows = if row.key == t.m.key {
            target::WGMMA_M
        } else {
            t.n_extent
        };
        let axis = if row.key == t.m.key { "M" } else { "N" };
        // The element offsets of the whole instruction tile from its first element, probed
        // at every row and every k (the index is a sum of a part in the row and a part in
        // k: the cache's axes each come from one of them) with the loops around the tile
        // at several values: they must not move it.
        let other = if row.key == t.m.key {
            &t.n.var
        } else {
            &t.m.var
        };
        let offsets = TileOffsets::new(&zero(&idx, &[other]), &row.var, &t.k.var, rows, t.k_extent);
        let offset = |r: i64, kk: i64| offsets.at(r, kk);
        let all = |f: &dyn Fn(i64, i64) -> i64| {
            (0..rows).all(|r| offset(r, 0) == Some(f(r, 0)))
                && (0..t.k_extent).all(|kk| offset(0, kk) == Some(f(0, kk)))
                && offset(rows - 1, t.k_extent - 1) == Some(f(rows - 1, t.k_extent - 1))
        };
        // K-major: K contiguous, one swizzle span per row; SBO = 8 rows.
        if all(&|r, kk| r * span_elems + kk) {
            return Ok(MmaOperand {
                tile,
                desc_bits: target::descriptor_bits(16, 8 * sw as i64, sw).expect("a valid swizzle"),
                transposed: false,
                swizzle: sw,
                registers: false,
            });
        }
        // MN-major: the row axis contiguous within one swizzle span (an atom), K by rows of
        // a span; a tile wider than a span is several atoms, `lbo` elements apart (boxes
        // side by side).
        let lbo = if rows > span_elems {
            offset(span_elems, 0)
        } else {
            Some(0)
        };
        if let Some(lbo) = lbo {
            if all(&|r, kk| r / span_elems * lbo + kk * span_elems + r % span_elems) {
                if !target::wgmma_transposable(elem_type) {
                    return bad_op(mn_major_8_bit(&buf.name, axis, elem_type));
                }
                let repeat = target::swizzle_repeat(sw) / elem;
                if rows > span_elems && (lbo <= 0 || lbo % repeat != 0) {
                    return bad_op(format!(
                        "operand `{}` is MN-major with {rows} elements along {axis} in atoms of one {sw}-byte swizzle span ({span_elems}), the next atom {lbo} elements on; wgmma steps from atom to atom by one stride, and each atom starts on the swizzle's {} bytes: lay the atoms one after the other as whole boxes (the cache's leading Bulk axis counting them)",
                        buf.name,
                        target::swizzle_repeat(sw)
                    ));
                }
                return Ok(MmaOperand {
                    tile,
                    // LBO steps to the next atom along M or N (unused with one atom); SBO
                    // steps 8 rows of K.
                    desc_bits: target::descriptor_bits(
                        if rows > span_elems {
                            lbo * elem
                        } else {
                            8 * sw as i64
                        },
                        8 * sw as i64,
                        sw,
                    )
                    .expect("a valid swizzle"),
                    transposed: true,
                    swizzle: sw,
                    registers: false,
                });
            }
        }
        if sr == Some(1) && !target::wgmma_transposable(elem_type) {
            return bad_op(mn_major_8_bit(&buf.name, axis, elem_type));
        }
        if sr == Some(1) && sk == Some(span_elems) && rows > span_elems {
            return bad_op(format!(
                "operand `{}` is MN-major (its {axis} axis is contiguous) with {rows} elements along it, more than one {sw}-byte swizzle span ({span_elems}), and its atoms of {span_elems} are not laid out one after the other: split the {axis} axis of the cache by {span_elems} and make the outer piece its leading Bulk axis (boxes side by side), or store the operand K-major",
                buf.name
            ));
        }
        bad_op(format!(
            "operand `{}` is laid out with {} elements per step of {axis} and {} per step of K in shared memory; a wgmma operand is K-major (K contiguous, rows of one {sw}-byte swizzle span, i.e. {span_elems} elements) or MN-major (M or N contiguous in atoms of {span_elems}, K rows of {span_elems})",
            buf.name,
            sr.map_or("varying".into(), |s| s.to_string()),
            sk.map_or("varying".into(), |s| s.to_string()),
        ))
    }
}

/// The element offsets of an operand's instruction tile from its first element (what
/// [`Lower::operand`] matches against the wgmma layouts), probed with three seeds for the
/// loops around the tile: an offset that depends on them is `None`. The lines along the row
/// axis (k = 0) and along k (row 0), which every layout reads, are computed once.
struct TileOffsets {
    probes: Vec<(Probe, Option<i64>)>,
    along_rows: Vec<Option<i64>>,
    along_k: Vec<Option<i64>>,
    rows: i64,
    k_extent: i64,
}

impl TileOffsets {
    /// The offsets of `at_tile` (the operand's index with the other tile axis at 0) over
    /// its `row` and `k` variables.
    fn new(at_tile: &Val, row: &str, k: &str, rows: i64, k_extent: i64) -> TileOffsets {
        let origin = zero(at_tile, &[row, k]);
        // (A few hundred points: the index prepared once per seed, not rebuilt per point.)
        let free = [Val::Var(row.to_string()), Val::Var(k.to_string())];
        let probes: Vec<(Probe, Option<i64>)> = (0..3u64)
            .map(|seed| {
                (
                    Probe::new(at_tile, &free, seed),
                    eval(&origin, "", 0, seed, &[], 1),
                )
            })
            .collect();
        let mut offsets = TileOffsets {
            probes,
            along_rows: Vec::new(),
            along_k: Vec::new(),
            rows,
            k_extent,
        };
        let (row_line, k_line): (Vec<i64>, Vec<i64>) =
            ((0..rows).collect(), (0..k_extent).collect());
        offsets.along_rows = offsets.at_points(&row_line, &vec![0; row_line.len()]);
        offsets.along_k = offsets.at_points(&vec![0; k_line.len()], &k_line);
        offsets
    }

    /// The offset at one point, the same under every probe.
    fn at_point(&self, r: i64, kk: i64) -> Option<i64> {
        let mut values = Vec::new();
        let mut found = None;
        for (probe, origin) in &self.probes {
            let d = probe.at(&[r, kk], &mut values)? - (*origin)?;
            if found.is_some_and(|f| f != d) {
                return None;
            }
            found = Some(d);
        }
        found
    }

    /// What `at_point` gives at many points, each probe evaluated at all of them at once.
    fn at_points(&self, rs: &[i64], ks: &[i64]) -> Vec<Option<i64>> {
        let mut found: Vec<Option<i64>> = Vec::new();
        for (i, (probe, origin)) in self.probes.iter().enumerate() {
            let ds = probe
                .at_each(&[rs, ks])
                .into_iter()
                .map(|v| Some(v? - (*origin)?));
            if i == 0 {
                found = ds.collect();
            } else {
                for (f, d) in found.iter_mut().zip(ds) {
                    if *f != d {
                        *f = None;
                    }
                }
            }
        }
        found
    }

    /// The offset of element (`r`, `kk`) of the tile.
    fn at(&self, r: i64, kk: i64) -> Option<i64> {
        match (r, kk) {
            (r, 0) if (0..self.rows).contains(&r) => self.along_rows[r as usize],
            (0, kk) if (0..self.k_extent).contains(&kk) => self.along_k[kk as usize],
            _ => self.at_point(r, kk),
        }
    }
}
