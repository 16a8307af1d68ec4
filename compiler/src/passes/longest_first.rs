//! Longest first: a causally masked attention's blocks take their query tiles in decreasing
//! work, the last query tile first.
//!
//! Under a causal mask query tile `q` computes about `q + 1` key tiles (`mask_bounds` stops its
//! key loop at the diagonal), so when block `x` takes query tile `x` the blocks launched last
//! are the longest and the grid's last wave runs them alone. The hardware dispatches blocks in
//! increasing `blockIdx` (x fastest), so taking query tile `n - 1 - x` (`n` the grid's extent
//! along the query tiles' dimension) starts the longest tiles first and leaves the shortest for
//! the tail, as FlashAttention's kernels do for causal attention.
//!
//! Takes the classified key-tile loops of `mask_bounds` ([`CausalTiles`]: each names its
//! query-tile loop's variable) and the kernel after `mask_tiles`. A query-tile variable is
//! reversed when the kernel binds it to a block index (`Kernel::hw_vars`) and every loop bound
//! to that block index is a loop over it whose extent is the grid's along that dimension (so
//! `n - 1 - x` stays in `[0, n)` for every block launched); otherwise (a serial or thread-bound
//! query loop, another loop sharing the block index, a grid wider than the query tiles) the
//! kernel is left as it is.
//!
//! Guarantees: the same blocks compute the same query tiles, in another order: each block's
//! query-tile index is a bijection of its block index over `[0, n)`, and every statement reads
//! the query tile's variable as before, so the output rows each block writes are the rows of
//! its query tile (ragged sizes keep their bounds checks on the query index, not the block's).
//!
//! Emits: the block index binds a fresh variable (`s2_o_block`), and each loop bound to it
//! starts with `let s2_o = n - 1 - s2_o_block`, `n` the grid's extent in the kernel's terms
//! (`ceilDiv(S, 128)`, a constant when the sizes are specialised).

use super::causal_tiles::CausalTiles;
use super::context::Ctx;
use crate::kir::{for_each_stmt, for_each_stmt_mut, Flow, Kernel, Stmt, Val};

/// Pass `longest_first`: each causally masked query-tile loop bound to a block index takes
/// its tiles from the last one down (module doc).
pub fn run(cx: &Ctx, tiles: &CausalTiles, k: &mut Kernel) -> super::Change {
    let mut changed = false;
    let mut done: Vec<&str> = Vec::new();
    for c in &tiles.0 {
        let var = c.query_var.as_str();
        if done.contains(&var) {
            continue;
        }
        done.push(var);
        let Some(extent) = reversible(k, var) else {
            continue;
        };
        let block_var = fresh_name(cx, k, var);
        reverse(k, var, &block_var, &extent);
        changed = true;
    }
    super::Change::from_changed(changed)
}

/// The grid's extent along the block index `var` is bound to, when every loop bound to that
/// index is a loop over `var` of that extent (module doc); `None` when `var` is not reversible.
fn reversible(k: &Kernel, var: &str) -> Option<Val> {
    let &(_, along) = k.hw_vars.iter().find(|(v, p)| v == var && p.is_block())?;
    let extent = Val::from_size(&k.grid[along.dim()?]);
    let mut fits = true;
    for_each_stmt(&k.body, &mut |s| {
        if let Stmt::Loop(l) = s {
            if l.parallel == along && (l.var != var || l.extent != extent) {
                fits = false;
            }
        }
    });
    fits.then_some(extent)
}

/// A name for the block index that no loop, binding or buffer of the kernel has:
/// `<var>_block`, with `n`s appended until it is free.
fn fresh_name(cx: &Ctx, k: &Kernel, var: &str) -> String {
    let mut name = format!("{var}_block");
    let taken = |n: &str| {
        cx.keys.names.iter().any(|x| x == n)
            || k.hw_vars.iter().any(|(v, _)| v == n)
            || k.buffers.iter().any(|b| b.name == n)
    };
    while taken(&name) {
        name.push('n');
    }
    name
}

/// Binds the block index to `block_var` and starts each loop bound to it with `var = extent -
/// 1 - block_var`.
fn reverse(k: &mut Kernel, var: &str, block_var: &str, extent: &Val) {
    let mut along = None;
    for (v, p) in &mut k.hw_vars {
        if v == var && p.is_block() {
            *v = block_var.to_string();
            along = Some(*p);
        }
    }
    let last = match extent {
        Val::Int(n) => Val::Int(n - 1),
        e => Val::sub(e.clone(), Val::Int(1)),
    };
    let value = Val::sub(last, Val::Var(block_var.to_string()));
    for_each_stmt_mut(&mut k.body, &mut |s| match s {
        Stmt::Loop(l) if Some(l.parallel) == along && l.var == var => {
            l.var = block_var.to_string();
            l.body.insert(
                0,
                Stmt::Let {
                    var: var.to_string(),
                    value: value.clone(),
                    broadcast: false,
                },
            );
            Flow::Skip
        }
        _ => Flow::Descend,
    });
}
