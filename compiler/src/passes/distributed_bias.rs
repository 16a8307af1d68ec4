//! Pass `distributed_bias`: a per-row factor times a converted index difference (ALiBi's
//! `slope * (j - i)` on the S fragment) made one FMA per score: `u * (base + c)` becomes
//! `fma(u, c, u * base)` with `u * base` once per tile.
//!
//! Requires: `index_float` (the converted index `D[0] = add(B[0], C)`, `B` written before the
//! loop, `C` the constant of the unrolled iteration). Takes, in the body of an `@Unroll` loop,
//!
//! ```text
//! D[0] = add(B[0], C)              // index_float's form; C reads no buffer
//! U[0] = A[h]                      // an element of a register array A of at most 8
//! M[0] = mul(U[0], D[0])           // (or mul(D[0], U[0]))
//! ```
//!
//! where `D` and `U` are read by `M` alone and the loop writes neither `A` nor `B`.
//!
//! Guarantees: right before the loop, a register `AB` of `A`'s size holds `AB[k] = A[k] *
//! B[0]`; in the loop `M[0] = fma(U[0], C, AB[h])` and `D` is gone. Per score one FFMA where an
//! FADD (the index) and a product were; NVRTC contracts the score's `s * scale + M` into one
//! FFMA as before. ALiBi's key loop at B = 128, S = T = 2048: 643 -> 581 SASS instructions per
//! key tile (NVRTC 13.0). Within tolerance, not bit for bit: `u * (b + c)` is one rounding of
//! an exact sum (`index_float`), `fma(u, c, round(u * b))` is off from it by at most half an
//! ulp of `u * b` (2^-24 relative to the bias, whose magnitude is at most |slope| (S + T)).
//! Emits nothing else.

use super::context::{Change, Ctx};
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::fusion::{BinaryOp, MemoryType, ParallelType, TernaryOp};
use crate::kir::{Access, Buffer, BufferId, Compute, ComputeRole, Data, Kernel, Stmt, Val};

/// The largest register array whose elements the pass multiplies out before the loop.
const MAX_FACTORS: i64 = 8;

/// Whether the fusion can have the form: `index_float`'s and a product.
pub fn used(cx: &Ctx) -> bool {
    super::index_float::used(cx)
}

pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<Change, Diagnostic> {
    let mut body = std::mem::take(&mut k.body);
    let mut removed = Vec::new();
    let mut changed = false;
    crate::kir::for_each_block_mut(&mut body, &mut |block| {
        let mut at = 0;
        while at < block.len() {
            if let Some(form) = find(&block[at], &k.buffers) {
                let product = new_register(cx, k, &form);
                let before = apply(&mut block[at], &form, product);
                removed.push(form.d);
                let n = before.len();
                block.splice(at..at, before);
                at += n;
                changed = true;
            }
            at += 1;
        }
    });
    k.body = body;
    super::index_float::remove_unread(k, removed);
    Ok(Change::from_changed(changed))
}

/// One taken form in a loop's body.
struct Form {
    d: BufferId,
    a: BufferId,
    a_len: i64,
    b: BufferId,
    /// M's statement in the loop's body.
    m_at: usize,
    u: BufferId,
    h: Val,
    c: Data,
}

fn one(a: &Access) -> bool {
    matches!(a.index, Some(Val::Int(0)))
}

fn reads_buffer(d: &Data) -> bool {
    let mut any = false;
    d.for_each_read(&mut |_| any = true);
    any
}

fn find(s: &Stmt, buffers: &[Buffer]) -> Option<Form> {
    let Stmt::Loop(l) = s else {
        return None;
    };
    if l.parallel != ParallelType::Unroll {
        return None;
    }
    let computes: Vec<(usize, &Compute)> = l
        .body
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            Stmt::Compute(c) => Some((i, c)),
            _ => None,
        })
        .collect();
    let written = |b: BufferId| {
        let mut w = false;
        crate::kir::for_each_stmt(&l.body, &mut |s| {
            if let Stmt::Compute(c) = s {
                w |= c.out.buffer == b;
            }
        });
        w
    };
    let reads_of = |b: BufferId| {
        let mut n = 0;
        crate::kir::for_each_stmt(&l.body, &mut |s| {
            if let Stmt::Compute(c) = s {
                c.value
                    .for_each_read(&mut |a| n += usize::from(a.buffer == b));
            }
        });
        n
    };
    for &(m_at, m) in &computes {
        let Data::Binary(BinaryOp::Mul, DType::F32, x, y) = &m.value else {
            continue;
        };
        let (Data::Read(x), Data::Read(y)) = (&**x, &**y) else {
            continue;
        };
        for (ua, da) in [(x, y), (y, x)] {
            let (Some(dw), Some(uw)) = (
                computes.iter().find(|(_, c)| c.out.buffer == da.buffer),
                computes.iter().find(|(_, c)| c.out.buffer == ua.buffer),
            ) else {
                continue;
            };
            let Data::Binary(BinaryOp::Add, DType::F32, base, c) = &dw.1.value else {
                continue;
            };
            let (Data::Read(base), Data::Read(elem)) = (&**base, &uw.1.value) else {
                continue;
            };
            let a = &buffers[elem.buffer.index()];
            let Some(Val::Int(a_len)) = a.size else {
                continue;
            };
            let ok = one(da)
                && one(ua)
                && one(base)
                && dw.0 < m_at
                && uw.0 < m_at
                && !reads_buffer(c)
                && a.memory == MemoryType::Local
                && a.dtype == DType::F32
                && (1..=MAX_FACTORS).contains(&a_len)
                && reads_of(da.buffer) == 1
                && reads_of(ua.buffer) == 1
                && !written(elem.buffer)
                && !written(base.buffer);
            if ok {
                return Some(Form {
                    d: da.buffer,
                    a: elem.buffer,
                    a_len,
                    b: base.buffer,
                    m_at,
                    u: ua.buffer,
                    h: elem.index.clone()?,
                    c: (**c).clone(),
                });
            }
        }
    }
    None
}

/// The register `AB` for the products `A[k] * B[0]`.
fn new_register(cx: &mut Ctx, k: &mut Kernel, form: &Form) -> BufferId {
    let name = cx.fresh_name(&format!(
        "{}_{}",
        k.buffers[form.a.index()].name,
        k.buffers[form.b.index()].name
    ));
    let b = BufferId::new(k.buffers.len());
    k.buffers.push(Buffer {
        name,
        dtype: DType::F32,
        memory: MemoryType::Local,
        tensor: None,
        size: Some(Val::Int(form.a_len)),
        smem_offset: None,
        global_shape: Vec::new(),
        is_input: false,
        l2: crate::fusion::L2Policy::Normal,
    });
    b
}

/// Rewrites the loop; returns the statements that go before it.
fn apply(s: &mut Stmt, form: &Form, product: BufferId) -> Vec<Stmt> {
    let Stmt::Loop(l) = s else {
        unreachable!("find took a loop")
    };
    let at = |buffer: BufferId, index: Val| Access {
        buffer,
        index: Some(index),
    };
    let Stmt::Compute(m) = &mut l.body[form.m_at] else {
        unreachable!("find took a compute")
    };
    let expr = m.expr;
    m.value = Data::Ternary(
        TernaryOp::Fma,
        DType::F32,
        Box::new([
            Data::Read(at(form.u, Val::Int(0))),
            form.c.clone(),
            Data::Read(at(product, form.h.clone())),
        ]),
    );
    let mut before = vec![Stmt::Alloc(product)];
    for i in 0..form.a_len {
        before.push(Stmt::Compute(Compute {
            expr,
            out: at(product, Val::Int(i)),
            value: Data::Binary(
                BinaryOp::Mul,
                DType::F32,
                Box::new(Data::Read(at(form.a, Val::Int(i)))),
                Box::new(Data::Read(at(form.b, Val::Int(0)))),
            ),
            role: ComputeRole::Normal,
            vector: None,
        }));
    }
    before
}
