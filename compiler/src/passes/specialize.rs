//! Pass `specialize`: a kernel specialised to its sizes (`CompileOptions::specialize`) gets
//! the values of its size symbols in place of the symbols.
//!
//! Runs only for such a kernel, just before `simplify`, which then folds what became constant.
//! The extents of its axis classes were values from the first pass on (`Ctx::class_extent`), so
//! its loop trip counts, grid and block are constants already and the splits these sizes
//! divide got no bounds predicate; what is left are the symbols the passes read from tensors'
//! shapes: strides, a view's bounds, TMA boxes' bounds, buffer sizes and offsets, and the
//! sizes used as data (a count's `n`, an `argmax`'s or a `pad`'s bounds: `Data::Param`s named
//! after a size symbol, which become literals).
//!
//! Requires: every pass that writes index arithmetic has run. Guarantees: no `Val::Size` of a
//! symbol with a value remains in the statements, buffers, mbarriers, persistent walk, grid,
//! block or shared memory. The tensors' global shapes (the plan's parameters and its tensor
//! maps, which the launch evaluates) keep their symbols, as do the size parameters of the
//! kernel's signature: every launcher passes the same arguments to a generic or a specialised
//! kernel. Emits: nothing new.

use super::context::{Change, Ctx};
use crate::diag::Diagnostic;
use crate::kir::{for_each_stmt_mut, Data, Flow, Kernel, Stmt};
use crate::plan::SizeExpr;
use std::collections::BTreeMap;

/// Whether the kernel is specialised to its sizes.
pub fn used(cx: &Ctx) -> bool {
    cx.options.specialized.is_some()
}

pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<Change, Diagnostic> {
    let Some(sizes) = &cx.options.specialized else {
        return Ok(Change::Unchanged);
    };
    let before = k.clone();
    let size = |e: &mut SizeExpr, sizes: &BTreeMap<String, i64>| *e = e.specialized(sizes);
    k.map_vals(&mut |v| v.subst_sizes(sizes));
    let symbols = &cx.fusion.symbols;
    for_each_stmt_mut(&mut k.body, &mut |s| {
        if let Stmt::Compute(c) = s {
            size_literals(&mut c.value, symbols, sizes);
        }
        Flow::Descend
    });
    for e in k.grid.iter_mut().chain(k.block.iter_mut()) {
        size(e, sizes);
    }
    size(&mut k.dynamic_smem, sizes);
    if let Some(e) = &mut k.reduce_scratch {
        size(e, sizes);
    }
    if let Some(p) = &mut k.persistent {
        size(&mut p.tiles, sizes);
        if let Some(sk) = &mut p.stream_k {
            size(&mut sk.work_size, sizes);
        }
    }
    Ok(Change::from_changed(*k != before))
}

/// Replaces each size symbol used as data (`Data::Param` of a symbol's name: symbols and
/// scalar inputs never share a name) by its value.
fn size_literals(d: &mut Data, symbols: &[String], sizes: &BTreeMap<String, i64>) {
    d.rewrite(&mut |n| {
        if let Data::Param(name, dtype) = n {
            if let Some(&v) = sizes.get(name.as_str()).filter(|_| symbols.contains(name)) {
                *n = Data::Literal(v as f64, *dtype);
            }
        }
        false
    });
}
